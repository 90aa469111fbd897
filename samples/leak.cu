// Sample: a GPU memory leak. Each step allocates more 1 MiB buffers than it frees.
//
// What a profiler must show (checked by the GPU verification script):
//   step k = 1..8 calls allocate_cache_block() k times (cudaMalloc of 1048576 bytes each, then
//   a cudaMemset of the whole buffer) and release_cache_block() on the oldest floor(k/2)
//   buffers still held (cudaFree).
//   cudaMalloc   36 calls, 37748736 bytes, all from allocate_cache_block <- leaky_step <- main
//   cudaFree     16 calls, 16777216 bytes, all from release_cache_block
//   in use       grows every step: 1, 2, 4, 6, 9, 12, 16, 20 MiB after steps 1..8;
//                20 MiB (20 buffers, 20971520 bytes) still allocated at exit, held by
//                allocate_cache_block (the program leaks them on purpose)
//   memset       36 memsets of 1048576 bytes; no kernels
#include <deque>

#include "sample_common.h"

constexpr size_t kBlock = 1 << 20;
constexpr int kSteps = 8;

// Not inlined: a profiler's allocation stacks must show these names.
__attribute__((noinline)) static void *allocate_cache_block(int tag)
{
  void *p = nullptr;
  CHECK(cudaMalloc(&p, kBlock));
  CHECK(cudaMemset(p, tag & 0xff, kBlock));
  return p;
}

__attribute__((noinline)) static void release_cache_block(void *p)
{
  CHECK(cudaFree(p));
}

__attribute__((noinline)) static void leaky_step(int step, std::deque<void *> &held)
{
  for (int i = 0; i < step; i++)
    held.push_back(allocate_cache_block(step));
  for (int i = 0; i < step / 2; i++) {
    release_cache_block(held.front());
    held.pop_front();
  }
}

int main()
{
  std::deque<void *> held;
  size_t free_at_start = 0, total = 0;
  CHECK(cudaMemGetInfo(&free_at_start, &total));
  for (int step = 1; step <= kSteps; step++) {
    leaky_step(step, held);
    printf("leak: step %d: %zu MiB held\n", step, held.size() * kBlock >> 20);
  }
  CHECK(cudaDeviceSynchronize());
  if (held.size() != 20) {
    fprintf(stderr, "leak: %zu buffers held, expected 20\n", held.size());
    return 1;
  }
  printf("leak: exiting with %zu MiB still allocated\n", held.size() * kBlock >> 20);
  return 0;
}
