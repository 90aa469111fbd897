/* Benchmark: the agent's NCCL plugin callbacks per operation, against the bare kernel launch. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/fakegpu/fakegpu.h"
#include "tests/lib/e2e.h"
#include "tests/nccl/nccl_abi.h"

/*
 * Usage: bench_nccl_plugin plugin|base [N]. "plugin": N single-op AllReduces as NCCL 2.28.9
 * reports them (CollApi start/stop, KernelLaunch start, cuLaunchKernelEx, KernelLaunch stop,
 * Coll start/stop); "base": the N launches alone. The difference is the plugin's cost on the
 * application thread per operation (its host stack included, per GPUPROF_STACKS). Not a test:
 * numbers go to docs/PERFORMANCE.md.
 */

#define K_AR "_Z40ncclDevKernel_AllReduce_Sum_bf16_RING_LL24ncclDevKernelArgsStorageILm4096EE"

static CUstream stream;
static CUfunction fn;

static void launch(void)
{
  CUlaunchConfig cfg;

  memset(&cfg, 0, sizeof(cfg));
  cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1;
  cfg.blockDimX = 64;
  cfg.blockDimY = cfg.blockDimZ = 1;
  cfg.hStream = stream;
  CU(cuLaunchKernelEx(&cfg, fn, NULL, NULL));
}

static double now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
  const char *mode = argc > 1 ? argv[1] : "plugin";
  long n = argc > 2 ? atol(argv[2]) : 100000;
  const char *const names[] = {K_AR};
  const char *path = getenv("CUDA_INJECTION64_PATH");
  profiler_v5 *p = NULL;
  CUdevice dev;
  CUcontext ctx;
  CUmodule mod;
  int mask = 0;
  void *comm = NULL;
  double t0, t1;

  mod = e2e_context_with_kernels(&dev, &ctx, names, 1, &fn);
  CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  fakegpu_set_kernel_duration_ns(K_AR, 1000);
  if (!strcmp(mode, "plugin")) {
    void *h = path ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : NULL;
    p = h ? dlsym(h, "ncclProfiler_v5") : NULL;
    if (!p || p->init(&comm, 0x42, &mask, "bench", 1, 8, 0, NULL) != 0)
      e2e_fail("no plugin (run under the agent)");
  }
  t0 = now_ns();
  for (long i = 0; i < n; i++) {
    if (p) {
      descr_v5 api = {.type = T_COLL_API}, kl = {.type = T_KERNEL_LAUNCH}, co = {.type = T_COLL};
      void *a = NULL, *l = NULL, *c = NULL;
      api.collApi.func = "AllReduce";
      api.collApi.count = 1 << 20;
      api.collApi.datatype = "ncclBfloat16";
      p->startEvent(comm, &a, &api);
      p->stopEvent(a);
      p->startEvent(comm, &l, &kl);
      launch();
      p->stopEvent(l);
      co.parentObj = a;
      co.coll.seqNumber = (uint64_t)i;
      co.coll.func = "AllReduce";
      co.coll.datatype = "ncclBfloat16";
      co.coll.count = 1 << 20;
      co.coll.algo = "RING";
      co.coll.proto = "LL";
      co.coll.nChannels = 2;
      p->startEvent(comm, &c, &co);
      p->stopEvent(c);
    } else {
      launch();
    }
    if (i % 1024 == 1023)
      CU(cuStreamSynchronize(stream));
  }
  t1 = now_ns();
  CU(cuStreamSynchronize(stream));
  printf("%s: %ld ops, %.0f ns per op (mask 0x%x)\n", mode, n, (t1 - t0) / (double)n, mask);
  CU(cuModuleUnload(mod));
  CU(cuStreamDestroy(stream));
  CU(cuDevicePrimaryCtxRelease(dev));
  return 0;
}
