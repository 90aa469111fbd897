/* The library the reload test puts at one path in two builds: the same code under another
 * function name of the same length (STK_RELOAD_FN), so both have the same layout. */
#ifndef STK_RELOAD_FN
#error "STK_RELOAD_FN names the function"
#endif

__attribute__((visibility("default"), noinline)) int STK_RELOAD_FN(int x)
{
  return x * 3 + 1;
}
