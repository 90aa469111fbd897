/* A shared library the native test loads with dlopen after the agent started: it allocates 2 MiB
 * (kept live) and launches one kernel. */
#include "tests/stacks/stk.h"

STK_FRAME static void stk_plugin_inner(void)
{
  CUdeviceptr p;

  STK_CU(cuMemAlloc(&p, 2u * 1024u * 1024u));
  STK_CU(cuLaunchKernel(stk_kernel("stk_kernel_plugin"), 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
}

STK_FRAME void stk_plugin_entry(void)
{
  stk_plugin_inner();
}
