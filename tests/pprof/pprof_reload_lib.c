/* A plugin the reload test loads, closes and replaces by a twin (built twice, PP_LIB a or b):
 * the twin lands where the first one was, and its frames must resolve to its own names. */
#include "tests/stacks/stk.h"

#define PP_CAT2(a, b) a##b
#define PP_CAT(a, b) PP_CAT2(a, b)
#define PP_INNER PP_CAT(pp_reload_inner_, PP_LIB)

STK_FRAME static void PP_INNER(CUfunction k)
{
  STK_CU(cuLaunchKernel(k, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
}

STK_FRAME void pp_reload_entry(CUfunction k)
{
  PP_INNER(k);
}
