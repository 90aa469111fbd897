/* CPU cost of one NVTX push/pop pair (nvtx3 headers) with and without a capture running. */
#define _GNU_SOURCE
#include <time.h>

#include <nvtx3/nvToolsExt.h>

#include "gpuprof/gpuprof.h"
#include "tests/lib/e2e.h"

/*
 * bench_nvtx [PAIRS] [ROUNDS]: after cuInit, ROUNDS rounds of PAIRS nvtxRangePushA/Pop pairs
 * (named from a set of 8 strings, as a training loop's steps) outside any capture, then the
 * same inside a public-API capture (when the agent is preloaded). Prints the median over
 * rounds of the time per pair in each phase. Rounds are 50 ms apart (not timed), so that with
 * GPUPROF_FLUSH_INTERVAL=20ms the worker drains the thread's ring (8192 records) between
 * them: a capture records every range (its metadata's dropped_api_calls stays 0). What is measured
 * depends on the environment (docs/PERFORMANCE.md "NVTX"): no NVTX_INJECTION64_PATH (NVTX's own
 * no-op), the agent injected, GPUPROF_NVTX=0.
 */

#pragma weak gpuprof_capture_start
#pragma weak gpuprof_capture_stop

static const char *const msgs[8] = {"forward", "backward", "optimizer", "allreduce",
                                    "data",    "embed",    "attention", "mlp"};

static uint64_t now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double phase(unsigned pairs, unsigned rounds)
{
  double per[64];

  if (rounds > 64)
    rounds = 64;
  for (unsigned r = 0; r < rounds; r++) {
    uint64_t t0 = now_ns();
    for (unsigned i = 0; i < pairs; i++) {
      nvtxRangePushA(msgs[i & 7]);
      nvtxRangePop();
    }
    per[r] = (double)(now_ns() - t0) / pairs;
    nanosleep(&(struct timespec){0, 50000000L}, NULL);
  }
  qsort(per, rounds, sizeof(per[0]), cmp);
  return per[rounds / 2];
}

int main(int argc, char **argv)
{
  unsigned pairs = argc > 1 ? (unsigned)atoi(argv[1]) : 4000;
  unsigned rounds = argc > 2 ? (unsigned)atoi(argv[2]) : 25;
  double idle, during = -1;

  CU(cuInit(0));
  phase(1000, 1); /* NVTX's first call initializes (loads the injection) */
  idle = phase(pairs, rounds);
  if (gpuprof_capture_start && gpuprof_capture_start(600000, 0) == 0) {
    during = phase(pairs, rounds);
    gpuprof_capture_stop();
  }
  printf("ns per push/pop pair: no capture %.1f, capture running %.1f\n", idle, during);
  return 0;
}
