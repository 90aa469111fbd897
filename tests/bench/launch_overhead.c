/* Benchmark: host time per cuLaunchKernel on the simulated GPU, to isolate what an injected
 * subscriber (the agent, or bench_null_injection) adds to every launch. Not a test. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cupti_runtime_cbid.h>

#include "tests/fakegpu/fakegpu.h"
#include "tests/lib/e2e.h"

/*
 * Usage: bench_launch_overhead [launches] [batch] [launch|callbacks]
 * Times batches of `batch` back-to-back launches (one clock read pair per batch keeps the
 * timer's own cost out of the per-launch figure), synchronizing between batches so the
 * simulated GPU queue stays short. Prints one line:
 *   launches=N batch=B median_ns=... mean_ns=... p10_ns=... p90_ns=...
 * where the statistics are over batches of (batch time / batch).
 *
 * Mode `callbacks` replaces each cuLaunchKernel by the simulator's runtime-call bracket
 * (fakegpu_runtime_enter/exit of a cudaLaunchKernel): the subscriber's ENTER and EXIT
 * callbacks of a launch and nothing else, no driver work and no activity records. It
 * isolates the callback path: with no subscriber it is the bracket's own cost, with the
 * do-nothing subscriber that plus the simulator's callback dispatch, with the agent that
 * plus the agent's two callbacks.
 */

static const char *const names[] = {"_Z10benchEmptyv"};

static uint64_t now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
  long launches = argc > 1 ? atol(argv[1]) : 200000;
  long batch = argc > 2 ? atol(argv[2]) : 100;
  int callbacks_only = argc > 3 && !strcmp(argv[3], "callbacks");
  CUdevice dev;
  CUcontext ctx;
  CUstream s;
  CUmodule mod;
  CUfunction f;
  long nb;
  double *per, sum = 0;

  if (launches <= 0 || batch <= 0 || launches < batch ||
      (argc > 3 && !callbacks_only && strcmp(argv[3], "launch"))) {
    fprintf(stderr, "usage: %s [launches] [batch] [launch|callbacks], launches >= batch > 0\n",
            argv[0]);
    return 2;
  }
  nb = launches / batch;
  per = calloc((size_t)nb, sizeof(*per));
  if (!per)
    e2e_fail("out of memory");

  CU(cuInit(0));
  CU(cuDeviceGet(&dev, 0));
  CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU(cuCtxSetCurrent(ctx));
  CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  mod = e2e_module_with_kernels(names, 1);
  CU(cuModuleGetFunction(&f, mod, names[0]));
  /* 1 ns kernels: the simulated GPU never falls behind, so synchronizing costs no waiting. */
  fakegpu_set_kernel_duration_ns(names[0], 1);

  for (int i = 0; i < 2000; i++) /* warm-up: lazy buffers, first-launch paths */
    e2e_launch(f, s);
  CU(cuStreamSynchronize(s));

  for (long b = 0; b < nb; b++) {
    uint64_t t0 = now_ns();
    if (callbacks_only) {
      for (long i = 0; i < batch; i++) {
        fakegpu_runtime_enter(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
                              "cudaLaunchKernel_v7000", NULL, names[0]);
        fakegpu_runtime_exit(0);
      }
    } else {
      for (long i = 0; i < batch; i++)
        CU(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, NULL, NULL));
    }
    uint64_t t1 = now_ns();
    per[b] = (double)(t1 - t0) / (double)batch;
    sum += per[b];
    CU(cuStreamSynchronize(s));
  }
  qsort(per, (size_t)nb, sizeof(*per), cmp_double);
  printf("mode=%s launches=%ld batch=%ld median_ns=%.1f mean_ns=%.1f p10_ns=%.1f p90_ns=%.1f\n",
         callbacks_only ? "callbacks" : "launch", nb * batch, batch, per[nb / 2], sum / (double)nb,
         per[nb / 10], per[nb * 9 / 10]);
  free(per);
  return 0;
}
