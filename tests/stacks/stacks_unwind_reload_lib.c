/* The library the unwind reload test loads at one address in two builds: the same code, once
 * with unwind information and once without (the build leaves out every unwind table). */

/* Calls back into the program, so that a stack captured there has this frame in it. */
__attribute__((visibility("default"), noinline)) int stk_unwind_reload_call(int (*cb)(void))
{
  return cb() + 1;
}
