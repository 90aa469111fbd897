// Sample: stream-ordered allocation with cudaMallocAsync / cudaFreeAsync and memory pools.
//
// What a profiler must show (checked by the GPU verification script):
//   default pool  10 rounds x 3 cudaMallocAsync (1048576, 2097152, 4194304 bytes) on one
//                 stream = 30 allocations, 73400320 bytes, each freed with cudaFreeAsync in
//                 the same round (release threshold raised so the pool keeps its memory)
//   own pool      cudaMemPoolCreate, then 10 cudaMallocFromPoolAsync of 524288 bytes
//                 (5242880 bytes), each freed in its round; cudaMemPoolDestroy at the end
//   kernels       _Z9pool_fillPfif 40 launches (one per allocation), all on the stream
//   memset/copy   in the last round only: 1 memset of 4194304 bytes before the fill and 1 DtoH
//                 of 4 bytes after it (the probe that checks the result)
//   in use        0 bytes of pool allocations at exit; both pools trimmed (cudaMemPoolTrimTo 0)
#include <cstdint>

#include "sample_common.h"

constexpr int kRounds = 10;

__global__ void pool_fill(float *x, int n, float v)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    x[i] = v;
}

static void fill(float *p, size_t bytes, float v, cudaStream_t s)
{
  int n = (int)(bytes / sizeof(float));
  pool_fill<<<(n + 255) / 256, 256, 0, s>>>(p, n, v);
  CHECK_LAUNCH();
}

int main()
{
  int supported = 0;
  CHECK(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, 0));
  if (!supported) {
    fprintf(stderr, "mallocasync: device 0 does not support memory pools\n");
    return 1;
  }
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaMemPool_t def;
  CHECK(cudaDeviceGetDefaultMemPool(&def, 0));
  uint64_t keep = UINT64_MAX;
  CHECK(cudaMemPoolSetAttribute(def, cudaMemPoolAttrReleaseThreshold, &keep));

  cudaMemPoolProps props = {};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  cudaMemPool_t own;
  CHECK(cudaMemPoolCreate(&own, &props));

  const size_t sizes[3] = {1 << 20, 2 << 20, 4 << 20};
  float probe = 0;
  for (int r = 0; r < kRounds; r++) {
    float *p[3], *q = nullptr;
    for (int k = 0; k < 3; k++) {
      CHECK(cudaMallocAsync((void **)&p[k], sizes[k], s));
      if (r == kRounds - 1 && k == 2)
        CHECK(cudaMemsetAsync(p[k], 0, sizes[k], s));
      fill(p[k], sizes[k], (float)r, s);
    }
    CHECK(cudaMallocFromPoolAsync((void **)&q, 512 << 10, own, s));
    fill(q, 512 << 10, (float)r, s);
    if (r == kRounds - 1)
      CHECK(cudaMemcpyAsync(&probe, p[2] + 7, sizeof(float), cudaMemcpyDeviceToHost, s));
    for (int k = 0; k < 3; k++)
      CHECK(cudaFreeAsync(p[k], s));
    CHECK(cudaFreeAsync(q, s));
  }
  CHECK(cudaStreamSynchronize(s));
  // The last round filled with 9; an untouched probe (the simulator) reads the memset's 0.
  sample_judge("mallocasync", probe == 0.0f, probe != (float)(kRounds - 1));

  CHECK(cudaMemPoolTrimTo(def, 0));
  CHECK(cudaMemPoolTrimTo(own, 0));
  CHECK(cudaMemPoolDestroy(own));
  CHECK(cudaStreamDestroy(s));
  return 0;
}
