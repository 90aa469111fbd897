/* One kernel launched from three call paths in a loop whose period (4) divides the sampling
 * period (16): A, A, B, C. Sampled 1-in-16, the weighted launches per stack must still match
 * the true counts (8000, 4000, 4000), which a fixed-period sampler would alias. */
#include "tests/stacks/stk.h"

#define ITERATIONS 4000

static CUfunction k;

STK_FRAME static void stk_sample_launch(void)
{
  STK_CU(cuLaunchKernel(k, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
}

STK_FRAME static void stk_sample_a(void)
{
  stk_sample_launch();
}

STK_FRAME static void stk_sample_b(void)
{
  stk_sample_launch();
}

STK_FRAME static void stk_sample_c(void)
{
  stk_sample_launch();
}

int main(void)
{
  stk_context();
  k = stk_kernel("stk_kernel_sampled");
  for (int i = 0; i < ITERATIONS; i++) {
    stk_sample_a();
    stk_sample_a();
    stk_sample_b();
    stk_sample_c();
  }
  STK_CU(cuCtxSynchronize());
  printf("stacks_sampling: %d launches\n", 4 * ITERATIONS);
  return 0;
}
