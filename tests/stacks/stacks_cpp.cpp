// Known C++ call chains: namespaces, a class template's member, a function template, a lambda.
#include <cstdint>
#include <cstdio>

#include "tests/stacks/stk.h"

namespace stk
{
namespace model
{

template <typename T> struct Layer {
  CUfunction kernel;
  STK_FRAME void forward(int times)
  {
    for (int i = 0; i < times; i++)
      STK_CU(cuLaunchKernel(kernel, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, nullptr));
  }
};

} // namespace model

template <typename T> STK_FRAME CUdeviceptr allocate_for(size_t n)
{
  CUdeviceptr p;
  STK_CU(cuMemAlloc(&p, n * sizeof(T)));
  return p;
}

STK_FRAME void run_lambda(CUfunction f)
{
  auto launch_twice = [f]() __attribute__((noinline))
  {
    for (int i = 0; i < 2; i++)
      STK_CU(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, nullptr));
  };
  launch_twice();
}

STK_FRAME void run_model()
{
  model::Layer<float> layer{stk_kernel("_ZN3stk6kernelIfEEvPT_i")};
  layer.forward(4);
}

} // namespace stk

int main()
{
  stk_context();
  stk::run_model();
  stk::run_lambda(stk_kernel("stk_kernel_lambda"));
  // 1000 doubles = 8000 bytes stay live.
  if (!stk::allocate_for<double>(1000))
    return 1;
  STK_CU(cuCtxSynchronize());
  std::printf("stacks_cpp: done\n");
  return 0;
}
