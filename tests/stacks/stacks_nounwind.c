/* Frames libunwind cannot step through: one without unwind information, and one that calls the
 * driver with a corrupt frame pointer. Their stacks must end there; the process must go on. */
#include <stdint.h>

#include "tests/stacks/stk.h"

/* Built with -fno-asynchronous-unwind-tables -fno-unwind-tables: no CFI for this frame. */
STK_FRAME void stk_nounwind_launch(CUfunction f)
{
  STK_CU(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
}

/* The frame pointer holds `fp` while the driver runs: garbage an unwinder must not follow
 * blindly (tests/stacks/stacks_native.c passes unmapped, unreadable, non-canonical and looping
 * values). */
STK_FRAME void stk_bad_fp_launch(CUfunction f, uint64_t fp)
{
#if defined(__x86_64__)
  /* cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL) with %rbp = fp, the stack
   * realigned to 16 bytes at the call (%r12 keeps the old %rsp). */
  __asm__ volatile("push %%rbp\n\t"
                   "push %%r12\n\t"
                   "mov %%rsp, %%r12\n\t"
                   "and $-16, %%rsp\n\t"
                   "mov %0, %%rdi\n\t"
                   "mov %1, %%rbp\n\t"
                   "mov $1, %%esi\n\t"
                   "mov $1, %%edx\n\t"
                   "mov $1, %%ecx\n\t"
                   "mov $32, %%r8d\n\t"
                   "mov $1, %%r9d\n\t"
                   "sub $8, %%rsp\n\t"
                   "push $0\n\t"
                   "push $0\n\t"
                   "push $0\n\t"
                   "push $0\n\t"
                   "push $1\n\t"
                   "call cuLaunchKernel@PLT\n\t"
                   "mov %%r12, %%rsp\n\t"
                   "pop %%r12\n\t"
                   "pop %%rbp\n\t"
                   :
                   : "r"(f), "r"(fp)
                   : "rax", "rdi", "rsi", "rdx", "rcx", "r8", "r9", "r10", "r11", "r12", "memory",
                     "cc");
#else
  (void)fp;
  STK_CU(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
#endif
}
