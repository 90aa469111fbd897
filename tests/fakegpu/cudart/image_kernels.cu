// Three kernels whose mangled names image_test expects: C linkage, a template instance, a
// namespace.
extern "C" __global__ void __launch_bounds__(256) plain_add(float *x, int n)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    x[i] += 1.0f;
}

template <typename T> __global__ void scale(T *x, T a, int n)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    x[i] *= a;
}
template __global__ void scale<float>(float *, float, int);

namespace ns
{
// 64 ints of static shared memory: image_test expects static_smem == 256 from the cubin.
__global__ void inner(int *y)
{
  __shared__ int s[64];
  s[threadIdx.x % 64] = threadIdx.x;
  __syncthreads();
  y[threadIdx.x] = s[63 - threadIdx.x % 64];
}
} // namespace ns
