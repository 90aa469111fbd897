/* Per-thread agent state: the cached tid and the stack of API calls open on this thread. */
#include "agent/thread.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "agent/corr.h"
#include "agent/util/counter.h"

__thread struct thread_state thread_tls;

/*
 * Owned counter stripes (agent/util/counter.h): bit i set while a live thread owns stripe i.
 * A thread gives its stripe back when it exits (pthread key destructor), so that a process
 * whose threads come and go (thread pools, data loader workers) keeps owned stripes for the
 * threads alive now instead of sending every thread after the first 63 ever seen to the one
 * shared, atomic stripe. The stripe keeps its value: the next owner adds to it.
 */
static _Atomic uint64_t stripes_owned;
/* Where the next claim starts looking: stripes are handed out round robin, so a stripe just
 * given back (its cache line maybe still in its last owner's core) is taken last. */
static _Atomic uint32_t stripe_cursor;
static pthread_key_t stripe_key;
static int stripe_key_ok;
static pthread_once_t stripe_once = PTHREAD_ONCE_INIT;

static void stripe_thread_exit(void *p)
{
  uint32_t slot = (uint32_t)(uintptr_t)p - 1;

  /* A CUDA call from a later destructor of this thread must not add to a stripe that another
   * thread may own by then: it takes the shared one. */
  thread_tls.counter_slot = COUNTER_SHARED_STRIPE;
  /* Release: the next owner's plain load then sees this thread's last store. */
  atomic_fetch_and_explicit(&stripes_owned, ~(1ull << slot), memory_order_release);
}

static void stripe_key_create(void)
{
  stripe_key_ok = pthread_key_create(&stripe_key, stripe_thread_exit) == 0;
}

static uint32_t stripe_claim(void)
{
  const uint64_t all = (1ull << COUNTER_SHARED_STRIPE) - 1;
  uint64_t owned = atomic_load_explicit(&stripes_owned, memory_order_relaxed);
  uint32_t from =
      atomic_load_explicit(&stripe_cursor, memory_order_relaxed) % COUNTER_SHARED_STRIPE;
  uint64_t free_now, after;
  uint32_t slot;

  pthread_once(&stripe_once, stripe_key_create);
  do {
    free_now = ~owned & all;
    if (!free_now)
      return COUNTER_SHARED_STRIPE;
    after = free_now & (all << from);
    slot = (uint32_t)__builtin_ctzll(after ? after : free_now);
  } while (!atomic_compare_exchange_weak_explicit(&stripes_owned, &owned, owned | (1ull << slot),
                                                  memory_order_acquire, memory_order_relaxed));
  atomic_store_explicit(&stripe_cursor, slot + 1, memory_order_relaxed);
  /* Without the destructor the stripe stays this thread's after it exits (it keeps counting
   * right; only later threads get fewer owned stripes). */
  if (stripe_key_ok)
    pthread_setspecific(stripe_key, (void *)(uintptr_t)(slot + 1));
  return slot;
}

void thread_state_init(struct thread_state *ts)
{
  /* Owned stripes for the threads alive now, the shared one beyond (agent/util/counter.h). */
  ts->counter_slot = stripe_claim();
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
