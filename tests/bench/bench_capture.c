/* Benchmark: process RSS and CPU per launch while a trace capture records millions of events
 * (run under the agent with a capture configured; tests/bench/run.sh). Not a test. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "tests/fakegpu/fakegpu.h"
#include "tests/lib/e2e.h"

/*
 * Usage: bench_capture [launches] [samples]
 * Launches `launches` empty kernels (syncing every 1000 so the simulated queue stays short)
 * and prints the process's resident set size at `samples` evenly spaced points, then the
 * wall time and the CPU time of the whole process (application and agent threads) per
 * launch. With GPUPROF_CAPTURE_ON_START set the agent traces all of it; compare against a
 * run without the agent for the agent's share. The trace file is finished at exit, so the
 * writer's time to drain what is queued at the end is part of neither figure.
 */

static const char *const names[] = {"_Z12benchCapturev"};

static uint64_t now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static long rss_kb(void)
{
  char line[256];
  long kb = -1;
  FILE *f = fopen("/proc/self/status", "r");

  if (!f)
    return -1;
  while (fgets(line, sizeof(line), f))
    if (!strncmp(line, "VmRSS:", 6))
      kb = strtol(line + 6, NULL, 10);
  fclose(f);
  return kb;
}

static uint64_t cpu_ns(void)
{
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000ull +
         (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000ull;
}

int main(int argc, char **argv)
{
  long launches = argc > 1 ? atol(argv[1]) : 1000000;
  int samples = argc > 2 ? atoi(argv[2]) : 10;
  CUdevice dev;
  CUcontext ctx;
  CUmodule mod;
  CUfunction f;
  uint64_t t0, c0, t1, c1;
  long max_rss = 0;

  if (launches <= 0 || samples <= 0) {
    fprintf(stderr, "usage: bench_capture [launches] [samples]\n");
    return 2;
  }
  CU(cuInit(0));
  CU(cuDeviceGet(&dev, 0));
  CU(cuCtxCreate(&ctx, NULL, 0, dev));
  mod = e2e_module_with_kernels(names, 1);
  CU(cuModuleGetFunction(&f, mod, names[0]));
  printf("rss_kb at 0: %ld\n", rss_kb());
  t0 = now_ns();
  c0 = cpu_ns();
  for (long i = 1; i <= launches; i++) {
    e2e_launch(f, NULL);
    if (i % 1000 == 0)
      CU(cuCtxSynchronize());
    if (i % (launches / samples ? launches / samples : 1) == 0) {
      long r = rss_kb();
      max_rss = r > max_rss ? r : max_rss;
      printf("rss_kb at %ld: %ld\n", i, r);
    }
  }
  CU(cuCtxSynchronize());
  t1 = now_ns();
  c1 = cpu_ns();
  printf("launches=%ld wall_ns_per_launch=%.1f cpu_ns_per_launch=%.1f max_rss_kb=%ld\n", launches,
         (double)(t1 - t0) / (double)launches, (double)(c1 - c0) / (double)launches, max_rss);
  CU(cuCtxDestroy(ctx));
  return 0;
}
