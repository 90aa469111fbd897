/* The bounded launch queue: a stream holds about a thousand pending launches, then a launch
 * blocks the host until the oldest of them has finished (driver.h FG_STREAM_QUEUE). */
#define _GNU_SOURCE
#include <cuda.h>
#include <stdio.h>
#include <time.h>

#include "tests/fakegpu/fakegpu.h"

#define KERNEL_NS 100000ull /* 100 us */
#define LAUNCHES 1300

static int g_failures;

#define CU(x)                                                                                      \
  do {                                                                                             \
    CUresult r_ = (x);                                                                             \
    if (r_ != CUDA_SUCCESS) {                                                                      \
      fprintf(stderr, "FAIL %s:%d: %s -> %d\n", __FILE__, __LINE__, #x, (int)r_);                  \
      return 1;                                                                                    \
    }                                                                                              \
  } while (0)

static unsigned long long mono_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

int main(void)
{
  static const char *const names[] = {"_Z4slowv"};
  CUdevice dev;
  CUcontext ctx;
  CUmodule mod;
  CUfunction f;
  CUstream s;
  unsigned long long t0, launched, min_ns;

  CU(cuInit(0));
  CU(cuDeviceGet(&dev, 0));
  CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU(cuCtxSetCurrent(ctx));
  if (fakegpu_module_from_names(&mod, names, 1) != 0) {
    fprintf(stderr, "FAIL fakegpu_module_from_names\n");
    return 1;
  }
  CU(cuModuleGetFunction(&f, mod, "_Z4slowv"));
  fakegpu_set_kernel_duration_ns("_Z4slowv", KERNEL_NS);
  CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));

  /* Launching takes about 2 us each while the GPU needs 100 us each: the first 1024 queue
   * at once, each later one waits for a kernel to finish. The bound is one-sided (a slow
   * machine only makes the loop longer), so the check cannot fail for lack of speed. */
  t0 = mono_ns();
  for (int i = 0; i < LAUNCHES; i++)
    CU(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, NULL, NULL));
  launched = mono_ns() - t0;
  CU(cuStreamSynchronize(s));
  min_ns = (LAUNCHES - 1024) * KERNEL_NS;
  if (launched < min_ns) {
    fprintf(stderr,
            "FAIL %d launches of 100 us kernels returned after %llu ns: the queue "
            "did not block (at least %llu ns expected)\n",
            LAUNCHES, launched, min_ns);
    g_failures++;
  }
  if (g_failures)
    return 1;
  printf("fakegpu_queue: ok (%d launches in %llu ms)\n", LAUNCHES, launched / 1000000ull);
  return 0;
}
