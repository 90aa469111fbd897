/* e2e small: a minimal driver-API workload (6 launches of one kernel, one copy each way, one
 * allocation) shared by the configuration and error-path cases. */
#include "tests/fakegpu/fakegpu.h"
#include "tests/lib/e2e.h"

static const char *const names[] = {"_Z5smallPf"};

int main(void)
{
  CUdevice dev;
  CUcontext ctx;
  CUstream s;
  CUmodule mod;
  CUfunction f;
  CUdeviceptr p;
  uint8_t in[8192], out[8192];

  for (size_t i = 0; i < sizeof(in); i++)
    in[i] = e2e_pattern(i);
  CU(cuInit(0));
  CU(cuDeviceGet(&dev, 0));
  CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU(cuCtxSetCurrent(ctx));
  CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  mod = e2e_module_with_kernels(names, 1);
  CU(cuModuleGetFunction(&f, mod, names[0]));
  fakegpu_set_kernel_duration_ns(names[0], 4000);

  CU(cuMemAlloc(&p, sizeof(in)));
  CU(cuMemcpyHtoD(p, in, sizeof(in)));
  for (int i = 0; i < 6; i++)
    e2e_launch(f, s);
  CU(cuMemcpyDtoHAsync(out, p, sizeof(out), s));
  CU(cuStreamSynchronize(s));
  CU(cuMemFree(p));
  CU(cuStreamDestroy(s));

  if (memcmp(in, out, sizeof(in)) != 0) {
    printf("small: copy mismatch\n");
    return 1;
  }
  printf("small: 8192 bytes round-tripped, 6 launches\n");
  return 0;
}
