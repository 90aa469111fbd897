/* e2e overload: a launch storm against a one-buffer pool, and joins across a wrapped
 * correlation table (tests/e2e/cases.py "overload_storm", "overload_wrap"). */
#include <pthread.h>

#include "tests/fakegpu/fakegpu.h"
#include "tests/lib/e2e.h"

#define STORM_LAUNCHES 20000
#define WRAP_BLOCK 1024 /* GPUPROF_CORR_TABLE_SIZE=1K in the wrap case */

static const char *const names[] = {"_Z5stormv", "_Z6wrap_av", "_Z6wrap_bv"};
static CUfunction fn[3];
static CUcontext ctx;

/* Launches only: no copy, allocation or synchronization, so that every GPU record of the run
 * after context creation is one of these kernels. */
static void storm(void)
{
  for (int i = 0; i < STORM_LAUNCHES; i++)
    e2e_launch(fn[0], 0);
}

/* Distinct call sites per kernel: a kernel joined to the other kernel's call would show the
 * other call's stack and API. */
__attribute__((noinline)) static void wrap_launch_a(int n)
{
  for (int i = 0; i < n; i++)
    e2e_launch(fn[1], 0);
  __asm__ volatile("" ::: "memory"); /* not a tail call: this frame stays on the stack */
}

__attribute__((noinline)) static void wrap_launch_b(int n)
{
  CUlaunchConfig cfg;

  memset(&cfg, 0, sizeof(cfg));
  cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1;
  cfg.blockDimX = 32;
  cfg.blockDimY = cfg.blockDimZ = 1;
  for (int i = 0; i < n; i++)
    CU(cuLaunchKernelEx(&cfg, fn[2], NULL, NULL));
  __asm__ volatile("" ::: "memory");
}

static void *wrap_thread_b(void *arg)
{
  (void)arg;
  CU(cuCtxSetCurrent(ctx));
  wrap_launch_b(WRAP_BLOCK);
  return NULL;
}

/*
 * Consecutive correlation ids (every driver call takes the next one): A x1024 on this thread,
 * thread B's cuCtxSetCurrent (not traced: it takes an id but no table slot), B x1024
 * (cuLaunchKernelEx) on thread B, A x512, cuCtxSynchronize. The flush interval outlasts the
 * run, so every record is decoded at exit, after all of these calls.
 */
__attribute__((noinline)) static void wrap(void)
{
  pthread_t t;

  wrap_launch_a(WRAP_BLOCK);
  if (pthread_create(&t, NULL, wrap_thread_b, NULL) != 0 || pthread_join(t, NULL) != 0)
    e2e_fail("thread B");
  wrap_launch_a(WRAP_BLOCK / 2);
  CU(cuCtxSynchronize());
}

int main(int argc, char **argv)
{
  CUdevice dev;

  if (argc != 2 || (strcmp(argv[1], "storm") && strcmp(argv[1], "wrap")))
    e2e_fail("usage: overload storm|wrap");
  e2e_context_with_kernels(&dev, &ctx, names, 3, fn);
  if (!strcmp(argv[1], "storm")) {
    storm();
    printf("overload: %d launches\n", STORM_LAUNCHES);
  } else {
    wrap();
    printf("overload: %d + %d + %d launches\n", WRAP_BLOCK, WRAP_BLOCK, WRAP_BLOCK / 2);
  }
  return 0;
}
