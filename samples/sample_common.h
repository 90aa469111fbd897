// Helpers shared by the CUDA samples: error checks and how results are judged.
#ifndef GPUPROF_SAMPLES_SAMPLE_COMMON_H
#define GPUPROF_SAMPLES_SAMPLE_COMMON_H

#include <cstdio>
#include <cstdlib>

#include <cuda_runtime.h>

// Every CUDA call is checked: a sample that fails must say where and exit non-zero.
#define CHECK(call) sample_check((call), #call, __FILE__, __LINE__)
#define CHECK_LAUNCH() CHECK(cudaGetLastError())

static inline void sample_check(cudaError_t r, const char *what, const char *file, int line)
{
  if (r != cudaSuccess) {
    fprintf(stderr, "%s:%d: %s failed: %s (%s)\n", file, line, what, cudaGetErrorName(r),
            cudaGetErrorString(r));
    exit(1);
  }
}

// Judges results computed by kernels. On a GPU they must be exact. The simulated GPU of the
// test suite runs no device code, which leaves every value as it was: that alone is reported
// ("not verified") rather than failed, so one binary serves both. Any other difference fails.
static inline void sample_judge(const char *sample, bool untouched, long mismatches)
{
  if (untouched) {
    printf("%s: results not verified: the device left the data as it was (simulated GPU?)\n",
           sample);
  } else if (mismatches) {
    fprintf(stderr, "%s: %ld wrong results\n", sample, mismatches);
    exit(1);
  } else {
    printf("%s: results verified\n", sample);
  }
}

#endif
