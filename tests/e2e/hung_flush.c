/* e2e hung_flush: a workload whose records CUPTI completes while the agent's periodic flush
 * never returns (FAKEGPU_CUPTI_FAULT=hung_flush; tests/e2e/cases.py "hung_flush"). */
#include <pthread.h>
#include <time.h>

#include "tests/fakegpu/fakegpu.h"
#include "tests/lib/e2e.h"

#define HUNG_LAUNCHES 3000

static const char *const names[] = {"_Z4hungv"};
static CUfunction fn;

static void sleep_ms(long ms)
{
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

  while (nanosleep(&ts, &ts) != 0)
    ;
}

int main(void)
{
  CUdevice dev;
  CUcontext ctx;

  e2e_context_with_kernels(&dev, &ctx, names, 1, &fn);
  fakegpu_set_kernel_duration_ns(names[0], 1000);
  /* With GPUPROF_FLUSH_INTERVAL=1ms the agent's worker is inside its first (never-ending)
   * flush long before this: every launch below completes buffers nobody reads. */
  sleep_ms(200);
  for (int i = 0; i < HUNG_LAUNCHES; i++)
    e2e_launch(fn, 0);
  CU(cuCtxSynchronize());
  /* The simulated CUPTI hands full buffers over on its own thread every 10 ms once their
   * records are final: all of them are queued with the agent before exit. */
  sleep_ms(100);
  printf("hung_flush: %d launches\n", HUNG_LAUNCHES);
  return 0;
}
