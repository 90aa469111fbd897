// Sample: a GPU out-of-memory failure that the program survives (as PyTorch's caching
// allocator does: it catches the error and carries on).
//
// What a profiler must show (checked by the GPU verification script):
//   held     hold_weights() allocates 2 x 128 MiB, hold_cache() 1 x 64 MiB (cudaMalloc)
//   failure  grow_batch() asks cudaMalloc for the device's total memory plus 1 GiB: it fails
//            with cudaErrorMemoryAllocation (on any GPU and on the simulated one)
//   snapshot one gpu_memory_oom profile: 320 MiB in use (3 allocations), the most held by
//            hold_weights (256 MiB), then hold_cache (64 MiB); the summary counts 1 failed
//            allocation and 1 snapshot; one stderr line names grow_batch and the holders
//   then     the program frees everything and exits 0
#include "sample_common.h"

constexpr size_t kMiB = 1 << 20;

// Not inlined: the snapshot's stacks must show these names.
__attribute__((noinline)) static void hold_weights(void **w)
{
  for (int i = 0; i < 2; i++)
    CHECK(cudaMalloc(&w[i], 128 * kMiB));
}

__attribute__((noinline)) static void hold_cache(void **c)
{
  CHECK(cudaMalloc(c, 64 * kMiB));
}

__attribute__((noinline)) static cudaError_t grow_batch(size_t bytes, void **p)
{
  cudaError_t err = cudaMalloc(p, bytes);
  if (err != cudaSuccess)
    *p = nullptr; // work after the call: no tail call, so grow_batch stays in the stack
  return err;
}

int main()
{
  void *weights[2] = {nullptr, nullptr}, *cache = nullptr, *batch = nullptr;
  size_t free_bytes = 0, total = 0;

  CHECK(cudaMemGetInfo(&free_bytes, &total));
  hold_weights(weights);
  hold_cache(&cache);
  cudaError_t err = grow_batch(total + 1024 * kMiB, &batch);
  if (err != cudaErrorMemoryAllocation) {
    fprintf(stderr, "oom: cudaMalloc of %zu bytes returned %d, expected %d (out of memory)\n",
            total + 1024 * kMiB, (int)err, (int)cudaErrorMemoryAllocation);
    return 1;
  }
  (void)cudaGetLastError(); // the failure is also this thread's last error: clear it
  printf("oom: cudaMalloc of %zu MiB failed as expected; carrying on\n",
         (total + 1024 * kMiB) / kMiB);
  CHECK(cudaFree(cache));
  CHECK(cudaFree(weights[0]));
  CHECK(cudaFree(weights[1]));
  CHECK(cudaDeviceSynchronize());
  printf("oom: done\n");
  return 0;
}
