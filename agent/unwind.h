/* Native stack capture on application threads: libunwind's fast path, minus the agent's frames. */
#ifndef GPUPROF_AGENT_UNWIND_H
#define GPUPROF_AGENT_UNWIND_H

#include <stdint.h>

/* Most frames skipped at the leaf (agent, CUPTI, driver) beyond the requested depth. */
#define UNWIND_SKIP_SLACK 32

/*
 * Sets libunwind's per-thread caching and records the address ranges of the modules whose
 * frames never belong in a user's stack: the agent itself, and every loaded module whose file
 * name starts with one of `skip_names` (e.g. "libcupti.so", "libcuda.so"), plus the module of
 * each address in `anchors` (NULL-terminated; e.g. a CUPTI function pointer). Call once, from
 * the one-time init, before any capture.
 */
void unwind_init(const char *const *skip_names, const void *const *anchors);

/*
 * Fast (default): libunwind's unw_backtrace, cached per thread. A frame without unwind
 * information (hand-written assembly, some JIT code) is stepped by guessing that %rbp is a
 * frame pointer, and from that frame on libunwind validates every address before reading it
 * (libunwind 1.6, Debian 12's, checks readability by letting write(2) to a pipe read the word;
 * a libunwind that checks with mincore/msync alone lets a PROT_NONE page through, and
 * reading it then crashes: use the safe mode with such a libunwind). tests/stacks checks
 * garbage, unmapped, unreadable, non-canonical and looping frame pointers: the stack ends at
 * the bad frame. Frames with unwind information are read unvalidated, so what the fast path
 * cannot survive is CFI that is wrong (claims %rbp is a frame pointer when it is not) in front
 * of the first guessed frame.
 * Safe: steps frame by frame and validates every memory read; about 40 times slower.
 * GPUPROF_STACK_UNWIND selects it. It ends the stack at the first frame without unwind
 * information only where libunwind reports that frame as such: libunwind 1.6 on x86-64 does not
 * (unw_get_proc_info succeeds with a one-byte procedure), so there such a frame is stepped by
 * the validated frame-pointer guess, as in the fast path.
 */
void unwind_set_safe(int safe);

/* Adds the ranges of modules loaded after unwind_init (a driver dlopened late). */
void unwind_add_skip_module(const void *addr);

/*
 * Unwinds the calling thread into frames (return addresses, leaf first), dropping the leading
 * frames that lie in skipped modules. Returns the number of frames (0..max). Safe in CUPTI
 * callbacks: writes only to `frames` and libunwind's per-thread cache, takes no lock of ours.
 * A frame libunwind cannot step past (no unwind information, a corrupt frame) ends the stack.
 */
int unwind_capture(uint64_t *frames, int max);

/* True if addr lies in a skipped module (exported for tests). */
int unwind_is_skipped(uint64_t addr);

#endif
