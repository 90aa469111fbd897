/* Per-thread agent state: the cached tid and the stack of API calls open on this thread. */
#include "agent/thread.h"

#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "agent/corr.h"
#include "agent/util/counter.h"

__thread struct thread_state thread_tls;

static _Atomic uint32_t next_counter_slot;

void thread_state_init(struct thread_state *ts)
{
  uint32_t slot = atomic_fetch_add_explicit(&next_counter_slot, 1, memory_order_relaxed);

  /* Owned stripes for the first threads, the shared one for the rest (agent/util/counter.h). */
  ts->counter_slot = slot < COUNTER_SHARED_STRIPE ? slot : COUNTER_SHARED_STRIPE;
  ts->tid = (uint32_t)syscall(SYS_gettid);
}

void thread_pop_call_slow(struct thread_state *ts, uint32_t corr_id)
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
