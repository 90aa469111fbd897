// Sample: three kernels, each launched 50 times on its own stream, with events and syncs.
//
// What a profiler must show (checked by the GPU verification script):
//   kernels  add_kernel                  50 launches, all on stream A
//            _Z10mul_kernelPffi           50 launches, all on stream B
//            _Z10fma_kernelIfEvPT_S0_S0_i 50 launches, all on stream C
//            (three distinct non-default streams, one kernel name per stream, 150 in all)
//   memcpy   3 HtoD and 3 DtoH of 262144 bytes each (65536 floats per stream)
//   API      3 cudaStreamCreate, 6 cudaEventRecord, 3 cudaEventSynchronize, 1 cudaStreamWaitEvent,
//            3 cudaStreamSynchronize, then cudaDeviceSynchronize
#include <cstring>
#include <vector>

#include "sample_common.h"

constexpr int kN = 1 << 16;
constexpr int kLaunches = 50;

extern "C" __global__ void add_kernel(float *x, float v, int n)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    x[i] += v;
}

__global__ void mul_kernel(float *x, float v, int n)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    x[i] *= v;
}

template <typename T> __global__ void fma_kernel(T *x, T a, T b, int n)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    x[i] = x[i] * a + b;
}

int main()
{
  cudaStream_t s[3];
  cudaEvent_t start[3], stop[3];
  float *d[3];
  std::vector<float> h[3];
  for (int k = 0; k < 3; k++) {
    CHECK(cudaStreamCreate(&s[k]));
    CHECK(cudaEventCreate(&start[k]));
    CHECK(cudaEventCreate(&stop[k]));
    CHECK(cudaMalloc(&d[k], kN * sizeof(float)));
    h[k].assign(kN, 1.0f);
    CHECK(cudaMemcpyAsync(d[k], h[k].data(), kN * sizeof(float), cudaMemcpyHostToDevice, s[k]));
  }

  const int block = 256, grid = kN / block;
  for (int k = 0; k < 3; k++)
    CHECK(cudaEventRecord(start[k], s[k]));
  for (int i = 0; i < kLaunches; i++) {
    add_kernel<<<grid, block, 0, s[0]>>>(d[0], 1.0f, kN);
    mul_kernel<<<grid, block, 0, s[1]>>>(d[1], 1.0f + (i % 2), kN);
    fma_kernel<float><<<grid, block, 0, s[2]>>>(d[2], 1.0f, 0.5f, kN);
    CHECK_LAUNCH();
  }
  for (int k = 0; k < 3; k++)
    CHECK(cudaEventRecord(stop[k], s[k]));
  // Stream A waits for C's work: a cross-stream dependency the timeline shows.
  CHECK(cudaStreamWaitEvent(s[0], stop[2], 0));

  for (int k = 0; k < 3; k++) {
    CHECK(cudaEventSynchronize(stop[k]));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, start[k], stop[k]));
    printf("streams: stream %c: %d launches in %.3f ms\n", 'A' + k, kLaunches, ms);
    CHECK(cudaMemcpyAsync(h[k].data(), d[k], kN * sizeof(float), cudaMemcpyDeviceToHost, s[k]));
    CHECK(cudaStreamSynchronize(s[k]));
  }
  CHECK(cudaDeviceSynchronize());

  // Expected: A = 1 + 50; B = 1 * 2^25 (every other launch doubles); C = 1 + 50 * 0.5.
  const float expect[3] = {1.0f + kLaunches, 33554432.0f, 1.0f + 0.5f * kLaunches};
  bool untouched = true;
  long bad = 0;
  for (int k = 0; k < 3; k++)
    for (int i = 0; i < kN; i++) {
      untouched &= h[k][i] == 1.0f;
      bad += h[k][i] != expect[k];
    }
  sample_judge("streams", untouched, bad);

  for (int k = 0; k < 3; k++) {
    CHECK(cudaFree(d[k]));
    CHECK(cudaEventDestroy(start[k]));
    CHECK(cudaEventDestroy(stop[k]));
    CHECK(cudaStreamDestroy(s[k]));
  }
  return 0;
}
