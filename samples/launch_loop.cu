// Sample: a launch-bound loop of empty kernels that times itself (the overhead benchmark).
//
// Usage: launch_loop [LAUNCHES] (default 200000). One warm-up launch (module loading, first
// launch costs) and a cudaDeviceSynchronize come first; then LAUNCHES launches of
// empty_kernel<<<1, 32>>> on the legacy default stream and one cudaDeviceSynchronize, timed
// with CLOCK_MONOTONIC. The GPU finishes an empty kernel faster than the host can launch the
// next, so the loop measures the host cost of a launch: exactly what a profiler adds to.
//
// What a profiler must show (checked by the GPU verification script):
//   kernels  empty_kernel LAUNCHES + 1 launches, all on one stream, joined to
//            __cudaLaunchKernel; no copies, no allocations
//   stdout   "launch_loop: N launches in T ms (U us per launch)": the verification script
//            runs this K times with and without the agent and compares the medians of T
#include <cstdlib>
#include <ctime>

#include "sample_common.h"

extern "C" __global__ void empty_kernel()
{
}

static double now_ms()
{
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(int argc, char **argv)
{
  long launches = 200000;
  if (argc > 1) {
    char *end = nullptr;
    launches = strtol(argv[1], &end, 10);
    if (!end || *end || launches < 1) {
      fprintf(stderr, "usage: launch_loop [LAUNCHES >= 1]\n");
      return 2;
    }
  }
  empty_kernel<<<1, 32>>>();
  CHECK_LAUNCH();
  CHECK(cudaDeviceSynchronize());

  double t0 = now_ms();
  for (long i = 0; i < launches; i++)
    empty_kernel<<<1, 32>>>();
  CHECK_LAUNCH();
  CHECK(cudaDeviceSynchronize());
  double ms = now_ms() - t0;
  printf("launch_loop: %ld launches in %.3f ms (%.3f us per launch)\n", launches, ms,
         ms * 1e3 / launches);
  return 0;
}
