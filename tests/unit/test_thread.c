/* Unit tests of the per-thread API call stack (agent/thread.c). */
#include <pthread.h>

#include "agent/corr.h"
#include "agent/thread.h"
#include "agent/util/counter.h"
#include "unit.h"

static void test_nesting(void)
{
  struct thread_state *ts = thread_state_get();

  CHECK(ts->tid != 0);
  CHECK_EQ(ts->tid, (uint32_t)gettid());
  CHECK_EQ(ts->depth, 0);

  /* cudaMalloc (runtime, memory) -> cuMemAlloc_v2 (driver, memory). */
  CHECK_EQ(thread_outermost_call(ts), 0);
  thread_push_call(ts, 10, CORR_DOMAIN_RUNTIME, 1);
  CHECK_EQ(thread_outermost_call(ts), 10);
  CHECK_EQ(thread_inside_memory_call(ts), 0);
  thread_push_call(ts, 11, CORR_DOMAIN_DRIVER, 1);
  CHECK_EQ(thread_outermost_call(ts), 10);
  CHECK_EQ(thread_inside_memory_call(ts), 1); /* the nested driver call must not count */
  thread_pop_call(ts, 11);
  CHECK_EQ(thread_inside_memory_call(ts), 0); /* the runtime call is outermost */
  thread_pop_call(ts, 10);
  CHECK_EQ(ts->depth, 0);

  /* A launch inside a non-memory runtime call is still outermost for memory purposes. */
  thread_push_call(ts, 20, CORR_DOMAIN_RUNTIME, 0);
  thread_push_call(ts, 21, CORR_DOMAIN_DRIVER, 1);
  CHECK_EQ(thread_inside_memory_call(ts), 0);
  CHECK_EQ(thread_outermost_call(ts), 20);
  /* A missing inner EXIT: popping the outer call unwinds both. */
  thread_pop_call(ts, 20);
  CHECK_EQ(ts->depth, 0);
  /* EXIT without ENTER is ignored. */
  thread_pop_call(ts, 99);
  CHECK_EQ(ts->depth, 0);
}

static void test_deep(void)
{
  struct thread_state *ts = thread_state_get();

  for (uint32_t i = 1; i <= THREAD_MAX_OPEN_CALLS + 4; i++)
    thread_push_call(ts, i, i == 1 ? CORR_DOMAIN_RUNTIME : CORR_DOMAIN_DRIVER, 0);
  CHECK_EQ(ts->depth, THREAD_MAX_OPEN_CALLS + 4);
  CHECK_EQ(thread_outermost_call(ts), 1);
  for (uint32_t i = THREAD_MAX_OPEN_CALLS + 4; i >= 1; i--)
    thread_pop_call(ts, i);
  CHECK_EQ(ts->depth, 0);
}

/* A cudaMalloc whose ENTER was forgotten (a new call epoch began inside it) and whose nested
 * cuMemAlloc was then counted as outermost: its own EXIT must not count again. */
static void test_memory_done_inside(void)
{
  struct thread_state *ts = thread_state_get();

  ts->depth = 0;
  ts->memory_corr = 0;
  CHECK_EQ(thread_memory_done_inside(ts, 0x90000000u), 0); /* nothing counted yet */
  thread_push_call(ts, 10, CORR_DOMAIN_RUNTIME, 1);
  ts->depth = 0; /* the epoch changed: the open cudaMalloc is forgotten at the next ENTER */
  thread_push_call(ts, 11, CORR_DOMAIN_DRIVER, 1);
  CHECK_EQ(thread_inside_memory_call(ts), 0);
  CHECK_EQ(thread_memory_done_inside(ts, 11), 0); /* on the stack: counted */
  ts->memory_corr = 11;
  thread_pop_call(ts, 11);
  CHECK_EQ(thread_memory_done_inside(ts, 10), 1); /* its cuMemAlloc counted already */
  thread_pop_call(ts, 10);
  CHECK_EQ(ts->depth, 0);
  /* An orphan EXIT later than the last counted call is counted. */
  CHECK_EQ(thread_memory_done_inside(ts, 12), 0);
  /* Across the wrap of the 32-bit ids: 5 came after 0xfffffff0. */
  ts->memory_corr = 5;
  CHECK_EQ(thread_memory_done_inside(ts, 0xfffffff0u), 1);
  CHECK_EQ(thread_memory_done_inside(ts, 6), 0);
  /* An entered call (top of the stack) is never skipped. */
  thread_push_call(ts, 3, CORR_DOMAIN_RUNTIME, 1);
  CHECK_EQ(thread_memory_done_inside(ts, 3), 0);
  thread_pop_call(ts, 3);
  ts->memory_corr = 0;
}

/* Each thread owns a counter stripe (plain adds): the sum must still be exact. */
#define COUNT_THREADS 8
#define COUNT_ADDS 100000

static struct striped_counter counted;
static uint32_t slots[COUNT_THREADS];

static void *count_thread(void *arg)
{
  struct thread_state *ts = thread_state_get();

  slots[(uintptr_t)arg] = ts->counter_slot;
  for (int i = 0; i < COUNT_ADDS; i++)
    striped_counter_add(&counted, ts->counter_slot, 1);
  return NULL;
}

static void test_counter_slots(void)
{
  pthread_t th[COUNT_THREADS];

  for (uintptr_t i = 0; i < COUNT_THREADS; i++)
    CHECK_EQ(pthread_create(&th[i], NULL, count_thread, (void *)i), 0);
  for (int i = 0; i < COUNT_THREADS; i++)
    pthread_join(th[i], NULL);
  /* Fewer threads than stripes: all own one, none the same, none the shared one. */
  for (int i = 0; i < COUNT_THREADS; i++) {
    CHECK(slots[i] < COUNTER_SHARED_STRIPE);
    for (int j = 0; j < i; j++)
      CHECK(slots[i] != slots[j]);
  }
  /* Adds from the shared stripe are atomic. */
  striped_counter_add(&counted, COUNTER_SHARED_STRIPE, 5);
  CHECK_EQ(striped_counter_sum(&counted), (uint64_t)COUNT_THREADS * COUNT_ADDS + 5);
}

int main(void)
{
  RUN(test_nesting);
  RUN(test_deep);
  RUN(test_memory_done_inside);
  RUN(test_counter_slots);
  UNIT_EXIT();
}
