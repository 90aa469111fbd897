/* Per-thread agent state: the cached tid and the stack of API calls open on this thread. */
#include "agent/thread.h"

#include <sys/syscall.h>
#include <unistd.h>

#include "agent/corr.h"

static __thread struct thread_state tls_state;

struct thread_state *thread_state_get(void)
{
  struct thread_state *ts = &tls_state;

  if (!ts->tid)
    ts->tid = (uint32_t)syscall(SYS_gettid);
  return ts;
}

void thread_push_call(struct thread_state *ts, uint32_t corr_id, uint8_t domain, int is_memory)
{
  if (ts->depth >= 0 && ts->depth < THREAD_MAX_OPEN_CALLS) {
    ts->open[ts->depth].corr_id = corr_id;
    ts->open[ts->depth].domain = domain;
    ts->open[ts->depth].is_memory = (uint8_t)(is_memory != 0);
    ts->open[ts->depth].stack_id = 0;
    ts->open[ts->depth].weight = 0;
  }
  ts->depth++;
}

void thread_pop_call(struct thread_state *ts, uint32_t corr_id)
{
  int top = ts->depth - 1;

  if (top < 0)
    return; /* EXIT without ENTER (callbacks enabled mid-call) */
  if (top >= THREAD_MAX_OPEN_CALLS) {
    ts->depth--;
    return;
  }
  /* Normally the top matches. If not, an inner EXIT was never delivered: unwind to ours. */
  for (int i = top; i >= 0; i--) {
    if (ts->open[i].corr_id == corr_id) {
      ts->depth = i;
      return;
    }
  }
  /* Not open at all (its ENTER predates the agent): leave the stack as it is. */
}

uint32_t thread_parent_runtime(const struct thread_state *ts)
{
  int top = ts->depth - 1;

  if (top > THREAD_MAX_OPEN_CALLS)
    top = THREAD_MAX_OPEN_CALLS;
  for (int i = top - 1; i >= 0; i--)
    if (ts->open[i].domain == CORR_DOMAIN_RUNTIME)
      return ts->open[i].corr_id;
  return 0;
}

int thread_inside_memory_call(const struct thread_state *ts)
{
  int top = ts->depth - 1;

  if (top > THREAD_MAX_OPEN_CALLS)
    top = THREAD_MAX_OPEN_CALLS;
  for (int i = top - 1; i >= 0; i--)
    if (ts->open[i].is_memory)
      return 1;
  return 0;
}
