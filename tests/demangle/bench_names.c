/* Benchmark: trace bytes per kernel with realistic C++ kernel names (PyTorch- and CUTLASS-like
 * templates, one extern "C" name), for the size effect of demangled slice names. Not a test. */
#include "tests/fakegpu/fakegpu.h"
#include "tests/lib/e2e.h"

/*
 * Usage: bench_names [launches]
 * Launches the kernels below round-robin, `launches` in all (default 100000), synchronizing
 * every 1000. Run it with GPUPROF_CAPTURE_ON_START and a GPUPROF_TRACE_FORMAT and divide the
 * trace's size by the launches (docs/TRACES.md, "Kernel names").
 */
static const char *const names[] = {
    /* 105 -> 177 characters demangled */
    "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEENS_6detail5ArrayIPcLi1"
    "EEEEEviT0_T1_",
    /* 98 -> 170 */
    "_ZN2at6native12_GLOBAL__N_119cunn_SoftMaxForwardILi4EfffNS1_22SoftMaxForwardEpilogueEEEvPT2_"
    "PKT0_l",
    /* 124 -> 265 */
    "_ZN7cutlass6KernelINS_4gemm6kernel4GemmINS1_11threadblock12MmaPipelinedINS1_9GemmShapeILi128E"
    "Li128ELi8EEEfEEEEEEvNT_6ParamsE",
    /* 28 -> 49 */
    "_Z10fma_kernelIfEvPT_S0_S0_i",
    /* extern "C": unchanged */
    "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
};
#define N_NAMES (int)(sizeof(names) / sizeof(names[0]))

int main(int argc, char **argv)
{
  long launches = argc > 1 ? atol(argv[1]) : 100000;
  CUfunction fn[N_NAMES];
  CUdevice dev;
  CUcontext ctx;
  CUstream s;

  e2e_context_with_kernels(&dev, &ctx, names, N_NAMES, fn);
  CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  for (long i = 0; i < launches; i++) {
    e2e_launch(fn[i % N_NAMES], s);
    if (i % 1000 == 999)
      CU(cuStreamSynchronize(s));
  }
  CU(cuStreamSynchronize(s));
  CU(cuStreamDestroy(s));
  printf("bench_names: %ld launches of %d kernels\n", launches, N_NAMES);
  return 0;
}
