/* Launches kernels whose names are mangled C++ (plain, templated, namespaced, a template that
 * demangles to 12804 characters, one nested 40 levels as in review R35, 27 TB in full),
 * one that is not mangled and one that does not demangle, a known number of times each, for
 * check_demangle.py. */
#include "tests/fakegpu/fakegpu.h"
#include "tests/lib/e2e.h"

/* Name, launches, duration in ns (distinct GPU times: the summary's order is fixed). */
static const struct {
  const char *name;
  int launches;
  uint64_t ns;
} kernels[] = {
    {"_Z5smallPf", 3, 4000},
    {"_Z10fma_kernelIfEvPT_S0_S0_i", 2, 9000},
    {"_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEENS_6detail5ArrayIPcLi1"
     "EEEEEviT0_T1_",
     5, 3000},
    {"_Z11deep_kernelI4PairIS0_IS0_IS0_IS0_IS0_IS0_IS0_IS0_I4TileS1_ES2_ES3_ES4_ES5_ES6_ES7_ES8_"
     "ES9_EEvPT_",
     1, 50000},
    /* The same nested 40 levels: 353 characters, 27 TB demangled in full (the agent's worker
     * and exit summary would print it for days); the agent stops at 4 096 bytes. */
    {"_Z11deep_kernelI4PairIS0_IS0_IS0_IS0_IS0_IS0_IS0_IS0_IS0_IS0_IS0_IS0_IS0_IS0_IS0_IS0_IS0_I"
     "S0_IS0_IS0_IS0_IS0_IS0_IS0_IS0_IS0_IS0_IS0_IS0_IS0_IS0_IS0_IS0_IS0_IS0_IS0_IS0_IS0_IS0_I4T"
     "ileS1_ES2_ES3_ES4_ES5_ES6_ES7_ES8_ES9_ESA_ESB_ESC_ESD_ESE_ESF_ESG_ESH_ESI_ESJ_ESK_ESL_ESM_"
     "ESN_ESO_ESP_ESQ_ESR_ESS_EST_ESU_ESV_ESW_ESX_ESY_ESZ_ES10_ES11_ES12_ES13_ES14_EEvPT_",
     1, 70000},
    {"plain_kernel", 4, 1000},
    {"_Z3badX", 1, 2000},
};
#define N_KERNELS (int)(sizeof(kernels) / sizeof(kernels[0]))

int main(void)
{
  const char *names[N_KERNELS];
  CUfunction fn[N_KERNELS];
  CUdevice dev;
  CUcontext ctx;
  CUstream s;
  int total = 0;

  for (int i = 0; i < N_KERNELS; i++)
    names[i] = kernels[i].name;
  e2e_context_with_kernels(&dev, &ctx, names, N_KERNELS, fn);
  CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  for (int i = 0; i < N_KERNELS; i++) {
    fakegpu_set_kernel_duration_ns(kernels[i].name, kernels[i].ns);
    for (int k = 0; k < kernels[i].launches; k++)
      e2e_launch(fn[i], s);
    total += kernels[i].launches;
  }
  CU(cuStreamSynchronize(s));
  CU(cuStreamDestroy(s));
  printf("demangle: %d kernels, %d launches\n", N_KERNELS, total);
  return 0;
}
