// An nvcc-built (-cudart shared) program that must run unchanged on the simulator and a GPU.
//
// Kernels (mangled): scale_kernel (extern "C"), _Z8add_biasIfEvPT_S0_i (template),
// _ZN5fgrt19fill_iotaEPii (namespace). cupti_check.c expects one <<<>>> launch of
// _ZN5fgrt19fill_iotaEPii (the first launch of the program) through __cudaLaunchKernel.
// Copies are checked only on buffers no kernel writes: the simulator runs no device code.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <cuda_runtime.h>

#define RT(call) check((call), #call, __LINE__)

static void check(cudaError_t r, const char *what, int line)
{
  if (r != cudaSuccess) {
    fprintf(stderr, "runtime_nvcc_test.cu:%d: %s returned %d (%s)\n", line, what, (int)r,
            cudaGetErrorName(r));
    exit(1);
  }
}

extern "C" __global__ void scale_kernel(float *x, float a, int n)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    x[i] *= a;
}

template <typename T> __global__ void add_bias(T *x, T b, int n)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    x[i] += b;
}

namespace fgrt1
{
__global__ void fill_iota(int *y, int n)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    y[i] = i;
}
} // namespace fgrt1

int main()
{
  const int n = 1 << 12;
  int *iota = nullptr;
  float *work = nullptr, *keep = nullptr;
  RT(cudaMalloc(&iota, n * sizeof(int)));
  RT(cudaMalloc(&work, n * sizeof(float)));
  RT(cudaMalloc(&keep, n * sizeof(float)));

  fgrt1::fill_iota<<<n / 256, 256>>>(iota, n);
  RT(cudaGetLastError());

  float *host = static_cast<float *>(malloc(n * sizeof(float)));
  float *back = static_cast<float *>(malloc(n * sizeof(float)));
  for (int i = 0; i < n; i++)
    host[i] = 0.5f * i;
  RT(cudaMemcpy(keep, host, n * sizeof(float), cudaMemcpyHostToDevice));
  RT(cudaMemcpy(work, host, n * sizeof(float), cudaMemcpyHostToDevice));

  cudaStream_t s;
  RT(cudaStreamCreate(&s));
  scale_kernel<<<n / 128, 128, 0, s>>>(work, 2.0f, n);
  add_bias<float><<<n / 128, 128, 0, s>>>(work, 1.0f, n);
  RT(cudaGetLastError());
  RT(cudaStreamSynchronize(s));

  const char *name = nullptr;
  RT(cudaFuncGetName(&name, reinterpret_cast<const void *>(add_bias<float>)));
  if (strcmp(name, "_Z8add_biasIfEvPT_S0_i") != 0) {
    fprintf(stderr, "cudaFuncGetName gave %s\n", name);
    return 1;
  }

  RT(cudaMemcpy(back, keep, n * sizeof(float), cudaMemcpyDeviceToHost));
  if (memcmp(host, back, n * sizeof(float)) != 0) {
    fprintf(stderr, "H2D/D2H round trip changed the data\n");
    return 1;
  }
  // On a GPU the kernels ran: check them there (the simulator does not compute).
  int *ids = static_cast<int *>(malloc(n * sizeof(int)));
  RT(cudaMemcpy(ids, iota, n * sizeof(int), cudaMemcpyDeviceToHost));
  RT(cudaMemcpy(back, work, n * sizeof(float), cudaMemcpyDeviceToHost));
  if (getenv("FAKEGPU_EXPECT_COMPUTE") && (ids[n - 1] != n - 1 || back[3] != 4.0f)) {
    fprintf(stderr, "kernels computed %d and %f\n", ids[n - 1], back[3]);
    return 1;
  }

  RT(cudaStreamDestroy(s));
  RT(cudaFree(iota));
  RT(cudaFree(work));
  RT(cudaFree(keep));
  free(host);
  free(back);
  free(ids);
  printf("runtime_nvcc_test: done\n");
  return 0;
}
