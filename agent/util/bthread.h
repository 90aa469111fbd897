/* Agent threads: started with every signal blocked, stopped by a join bounded on CLOCK_MONOTONIC.
 */
#ifndef GPUPROF_AGENT_UTIL_BTHREAD_H
#define GPUPROF_AGENT_UTIL_BTHREAD_H

#include <stdint.h>

/*
 * The agent stops its threads at the application's exit, and a stuck one (inside CUPTI on a
 * wedged GPU, inside libcurl on a dead network) must not hang that exit: the wait is bounded.
 * pthread_timedjoin_np takes a CLOCK_REALTIME deadline, which a wall-clock step (NTP, a VM
 * resumed) stretches or cuts short; pthread_clockjoin_np is not intercepted by GCC 12's libtsan
 * (false races in the TSan build). So the thread's wrapper sets a flag under a mutex and
 * broadcasts a CLOCK_MONOTONIC condition variable when its function returns; the stopper waits
 * for the flag and joins (which then only waits for the thread to unwind), or detaches.
 */
struct bthread;

/*
 * Starts fn(arg) on a new thread named `name` (at most 15 characters kept; NULL: unnamed) with
 * every signal blocked, so that no application signal is ever delivered to it; the caller's
 * mask is unchanged. fn's return value is ignored. 0 and *out set, or -errno and *out NULL.
 */
int bthread_start(struct bthread **out, const char *name, void *(*fn)(void *), void *arg);

/*
 * Waits at most timeout_ns (CLOCK_MONOTONIC) for fn to return. 0: it returned and the thread
 * is joined. -ETIMEDOUT: the thread is detached and may run on; its state is freed by whichever
 * of the two lets go last, never while the thread can touch it. Either way t is released and
 * must not be used again. A NULL t returns 0. Never call it from the thread itself.
 */
int bthread_join_within(struct bthread *t, uint64_t timeout_ns);

#endif
