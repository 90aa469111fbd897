/* Per-thread reentrancy guard taken on every way into the agent (CUPTI callbacks, later NCCL). */
#ifndef GPUPROF_AGENT_UTIL_GUARD_H
#define GPUPROF_AGENT_UTIL_GUARD_H

/*
 * guard_in_agent is non-zero while the thread runs agent code. A way in tests it first and
 * bails out when set (the agent would otherwise re-enter itself, e.g. if a CUPTI call made
 * from a callback delivered another callback); otherwise it saves the old value, sets it, and
 * restores the saved value on the way out instead of clearing it, so nesting stays correct.
 * Agent-owned threads hold the guard for their whole life, which makes any callback that an
 * agent thread triggers (by calling into CUPTI) a no-op.
 */
extern __thread int guard_in_agent;

/* Returns 1 and fills *saved when the caller may proceed, 0 when it is already inside. */
static inline int guard_enter(int *saved)
{
  *saved = guard_in_agent;
  if (*saved)
    return 0;
  guard_in_agent = 1;
  return 1;
}

static inline void guard_leave(int saved)
{
  guard_in_agent = saved;
}

/* For agent threads: inside the agent until the thread ends. */
static inline void guard_hold(void)
{
  guard_in_agent = 1;
}

#endif
