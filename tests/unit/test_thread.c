/* Unit tests of the per-thread API call stack (agent/thread.c). */
#include "agent/corr.h"
#include "agent/thread.h"
#include "unit.h"

static void test_nesting(void)
{
  struct thread_state *ts = thread_state_get();

  CHECK(ts->tid != 0);
  CHECK_EQ(ts->tid, (uint32_t)gettid());
  CHECK_EQ(ts->depth, 0);

  /* cudaMalloc (runtime, memory) -> cuMemAlloc_v2 (driver, memory). */
  thread_push_call(ts, 10, CORR_DOMAIN_RUNTIME, 1);
  CHECK_EQ(thread_parent_runtime(ts), 0);
  CHECK_EQ(thread_inside_memory_call(ts), 0);
  thread_push_call(ts, 11, CORR_DOMAIN_DRIVER, 1);
  CHECK_EQ(thread_parent_runtime(ts), 10);
  CHECK_EQ(thread_inside_memory_call(ts), 1); /* the nested driver call must not count */
  thread_pop_call(ts, 11);
  CHECK_EQ(thread_inside_memory_call(ts), 0); /* the runtime call is outermost */
  thread_pop_call(ts, 10);
  CHECK_EQ(ts->depth, 0);

  /* A launch inside a non-memory runtime call is still outermost for memory purposes. */
  thread_push_call(ts, 20, CORR_DOMAIN_RUNTIME, 0);
  thread_push_call(ts, 21, CORR_DOMAIN_DRIVER, 1);
  CHECK_EQ(thread_inside_memory_call(ts), 0);
  CHECK_EQ(thread_parent_runtime(ts), 20);
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
  CHECK_EQ(thread_parent_runtime(ts), 1);
  for (uint32_t i = THREAD_MAX_OPEN_CALLS + 4; i >= 1; i--)
    thread_pop_call(ts, i);
  CHECK_EQ(ts->depth, 0);
}

int main(void)
{
  RUN(test_nesting);
  RUN(test_deep);
  UNIT_EXIT();
}
