/* Runtime calls open across on-demand capture boundaries, their driver work nested inside. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <cupti_runtime_cbid.h>

#include "tests/fakegpu/fakegpu.h"
#include "tests/lib/e2e.h"

/*
 * Each allocation and free below is a "cudaMalloc" / "cudaFree" made with the runtime double's
 * hooks, so that the program decides what happens between its RUNTIME ENTER and EXIT: one
 * capture ends and the next starts (the agent switches API callbacks off and on again, a new
 * call epoch), and only then does the call reach the driver (cuMemAlloc / cuMemFree with their
 * DRIVER callbacks, as under FAKEGPU_NESTED=driver). The driver call's ENTER then sees a new
 * epoch and forgets the open runtime call; the runtime call's EXIT must still not count the
 * allocation (or the free) a second time. Summary expected (check_boundary.py): device 0,
 * allocs 2 (1 MiB + 64 KiB), frees 1 (64 KiB), in use 1 MiB, no unknown frees.
 */

#define MIB (1024u * 1024u)

/* The runtime's parameter structs (generated_cuda_runtime_api_meta.h). */
struct malloc_params {
  void **devPtr;
  size_t size;
};
struct free_params {
  void *devPtr;
};

static int (*cap_start)(unsigned, unsigned);
static int (*cap_stop)(void);

static void sleep_ms(unsigned ms)
{
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

/* Ends the running capture and starts the next one (busy until the first has finished: by then
 * the agent has switched the API callbacks off). */
static void recapture(void)
{
  int rc;

  if (cap_stop() != 0)
    e2e_fail("gpuprof_capture_stop");
  for (int i = 0; i < 4000; i++) {
    rc = cap_start(60000, 0);
    if (rc != -EBUSY)
      break;
    sleep_ms(5);
  }
  if (rc != 0)
    e2e_fail("gpuprof_capture_start (again)");
}

static CUdeviceptr boundary_malloc(size_t size)
{
  void *p = NULL;
  struct malloc_params mp = {&p, size};
  CUdeviceptr d = 0;

  fakegpu_runtime_enter(CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020, "cudaMalloc_v3020", &mp, NULL);
  recapture();
  CU(cuMemAlloc(&d, size));
  p = (void *)(uintptr_t)d;
  fakegpu_runtime_exit(0);
  return d;
}

static void boundary_free(CUdeviceptr d)
{
  struct free_params fp = {(void *)(uintptr_t)d};

  fakegpu_runtime_enter(CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020, "cudaFree_v3020", &fp, NULL);
  recapture();
  CU(cuMemFree(d));
  fakegpu_runtime_exit(0);
}

int main(void)
{
  const char *agent = getenv("CUDA_INJECTION64_PATH");
  CUdevice dev;
  CUcontext ctx;
  CUdeviceptr big, small;
  void *h;

  CU(cuInit(0));
  CU(cuDeviceGet(&dev, 0));
  CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU(cuCtxSetCurrent(ctx));
  /* cuInit loaded the agent: its capture API from that copy. */
  h = agent ? dlopen(agent, RTLD_NOW | RTLD_NOLOAD) : NULL;
  if (!h)
    e2e_fail("the agent is not loaded");
  cap_start = (int (*)(unsigned, unsigned))dlsym(h, "gpuprof_capture_start");
  cap_stop = (int (*)(void))dlsym(h, "gpuprof_capture_stop");
  if (!cap_start || !cap_stop)
    e2e_fail("the agent exports no capture API");
  if (cap_start(60000, 0) != 0)
    e2e_fail("gpuprof_capture_start");
  big = boundary_malloc(MIB);
  small = boundary_malloc(65536);
  boundary_free(small);
  (void)big; /* still in use at exit */
  if (cap_stop() != 0)
    e2e_fail("gpuprof_capture_stop (last)");
  dlclose(h);
  printf("boundary_prog: done\n");
  return 0;
}
