// e2e runtime_basic: the runtime API (as nvcc-built programs use it): triple-chevron and
// cudaLaunchKernel launches of three named kernels, copies, memsets, cudaMalloc, cudaMallocHost
// and cudaMallocAsync with sizes the checks know. Kernel durations come from FAKEGPU_KERNEL_NS.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <cuda_runtime_api.h>

#define RT(call) check((call), #call, __LINE__)

static void check(cudaError_t r, const char *what, int line)
{
  if (r != cudaSuccess) {
    fprintf(stderr, "e2e: runtime_basic.cu:%d: %s returned %d (%s)\n", line, what, (int)r,
            cudaGetErrorName(r));
    exit(1);
  }
}

extern "C" __global__ void fill_kernel(float *x, float v, int n)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    x[i] = v;
}

__global__ void addOne(float *x, int n) // _Z6addOnePfi
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    x[i] += 1.0f;
}

namespace ops {
template <typename T> __global__ void gemm(T *x, int n) // ops::gemm<float>: _ZN3ops4gemmIfEEvPT_i
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    x[i] = x[i] * x[i];
}
template __global__ void gemm<float>(float *, int);
} // namespace ops

static uint8_t pattern(size_t i)
{
  return (uint8_t)((i * 7u + (i >> 8) * 13u) & 0xffu);
}

int main()
{
  const size_t MIB = 1024 * 1024;
  const int n = 1024;
  cudaStream_t s1, s2;
  uint8_t *a, *b, *pinned;
  float *scratch;
  void *pool;
  uint8_t *host = (uint8_t *)malloc(MIB), *back = (uint8_t *)malloc(MIB);
  int bad = 0;

  for (size_t i = 0; i < MIB; i++)
    host[i] = pattern(i);
  RT(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  RT(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  RT(cudaMalloc((void **)&a, MIB));
  RT(cudaMalloc((void **)&b, 256 * 1024));
  RT(cudaMalloc((void **)&scratch, n * sizeof(float)));
  RT(cudaMallocHost((void **)&pinned, 65536));

  // HtoD: 1 MiB sync, 65536 async on s1 (from pinned memory).
  memcpy(pinned, host + 300, 65536);
  RT(cudaMemcpy(a, host, MIB, cudaMemcpyHostToDevice));
  RT(cudaMemcpyAsync(b, pinned, 65536, cudaMemcpyHostToDevice, s1));
  RT(cudaStreamSynchronize(s1));
  // memsets: 4096 sync, 8192 async on s2.
  RT(cudaMemset(a, 0, 4096));
  RT(cudaMemsetAsync(b + 65536, 1, 8192, s2));
  RT(cudaStreamSynchronize(s2));

  // Kernels (on a scratch buffer, so the copies checked below do not depend on them):
  // fill_kernel 2x on s1, addOne 3x <<<>>> on s2 + 1x cudaLaunchKernel on s1, gemm 2x on the
  // NULL stream.
  for (int i = 0; i < 2; i++)
    fill_kernel<<<4, 256, 0, s1>>>(scratch, 2.0f, n);
  for (int i = 0; i < 3; i++)
    addOne<<<4, 256, 0, s2>>>(scratch, n);
  {
    int nn = n;
    void *args[] = {&scratch, &nn};
    RT(cudaLaunchKernel((const void *)addOne, dim3(4), dim3(256), args, 0, s1));
  }
  for (int i = 0; i < 2; i++)
    ops::gemm<float><<<4, 256>>>(scratch, n);
  RT(cudaGetLastError());

  // DtoD 4096 sync; DtoH 65536 async on s2 and 1 MiB sync.
  RT(cudaMemcpy(b + 131072, a + 8192, 4096, cudaMemcpyDeviceToDevice));
  RT(cudaMemcpyAsync(pinned, b, 65536, cudaMemcpyDeviceToHost, s2));
  RT(cudaStreamSynchronize(s2));
  RT(cudaMemcpy(back, a, MIB, cudaMemcpyDeviceToHost));
  RT(cudaDeviceSynchronize());

  for (size_t i = 0; i < MIB; i++) {
    uint8_t want = i < 4096 ? 0 : pattern(i);
    if (back[i] != want) {
      printf("a: mismatch at %zu\n", i);
      bad = 1;
      break;
    }
  }
  if (memcmp(pinned, host + 300, 65536) != 0) {
    printf("b: mismatch\n");
    bad = 1;
  }

  // Stream-ordered: 128 KiB while a, b and scratch are alive (the peak).
  RT(cudaMallocAsync(&pool, 131072, s1));
  RT(cudaFreeAsync(pool, s1));
  RT(cudaStreamSynchronize(s1));

  RT(cudaFree(scratch));
  RT(cudaFree(b));
  RT(cudaFree(a));
  RT(cudaFreeHost(pinned));
  RT(cudaStreamDestroy(s1));
  RT(cudaStreamDestroy(s2));
  free(host);
  free(back);
  printf("runtime_basic: %s\n", bad ? "FAILED" : "copies ok, 8 launches");
  return bad;
}
