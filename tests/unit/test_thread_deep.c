/* Unit tests of the per-thread call stack past THREAD_MAX_OPEN_CALLS with an EXIT missing or an
 * EXIT whose ENTER was never seen: the thread's next user call is outermost again. */
#include "agent/corr.h"
#include "agent/thread.h"
#include "unit.h"

#define MAX THREAD_MAX_OPEN_CALLS

static struct thread_state *fresh(void)
{
  struct thread_state *ts = thread_state_get();

  ts->depth = 0;
  return ts;
}

static void push_range(struct thread_state *ts, uint32_t first, uint32_t last)
{
  for (uint32_t id = first; id <= last; id++)
    thread_push_call(ts, id, id == 1 ? CORR_DOMAIN_RUNTIME : CORR_DOMAIN_DRIVER, 0);
}

/* After the outermost call returned, a new call is the outermost one and remembered. */
static void check_idle(struct thread_state *ts)
{
  CHECK_EQ(ts->depth, 0);
  CHECK_EQ(thread_outermost_call(ts), 0);
  thread_push_call(ts, 1000, CORR_DOMAIN_RUNTIME, 0);
  CHECK_EQ(thread_outermost_call(ts), 1000);
  CHECK(thread_top_call(ts) && thread_top_call(ts)->corr_id == 1000);
  thread_pop_call(ts, 1000);
  CHECK_EQ(ts->depth, 0);
}

/* `open` calls open, the innermost `missed` never return: every other EXIT arrives. */
static void missed_exits(uint32_t open, uint32_t missed)
{
  struct thread_state *ts = fresh();

  push_range(ts, 1, open);
  for (uint32_t id = open - missed; id >= 1; id--) {
    thread_pop_call(ts, id);
    /* Exact again from the first EXIT that arrives with the top of the stack remembered (it
     * unwinds to its call; before, the unremembered levels are popped by count alone). */
    if (id + missed <= MAX) {
      CHECK_EQ(ts->depth, (int)id - 1);
      if (id > 1)
        CHECK(thread_top_call(ts) && thread_top_call(ts)->corr_id == id - 1);
    }
  }
  check_idle(ts);
}

static void test_missed_exit_deep(void)
{
  missed_exits(MAX + 1, 1);
  missed_exits(MAX + 2, 1);
  missed_exits(MAX + 4, 3);
  missed_exits(MAX + 8, 8);
  missed_exits(2 * MAX, MAX - 1);
}

/* An EXIT whose ENTER was not seen (callbacks enabled during it), inside the innermost of
 * `open` calls: every open call still returns, and the stack ends empty. */
static void unseen_enter(uint32_t open)
{
  struct thread_state *ts = fresh();

  push_range(ts, 1, open);
  thread_pop_call(ts, 5000);
  /* A call made now is nested (not outermost) and its EXIT arrives. */
  thread_push_call(ts, 5001, CORR_DOMAIN_DRIVER, 0);
  CHECK_EQ(thread_outermost_call(ts), 1);
  thread_pop_call(ts, 5001);
  for (uint32_t id = open; id >= 1; id--) {
    thread_pop_call(ts, id);
    if (id <= MAX) {
      CHECK_EQ(ts->depth, (int)id - 1);
      if (id > 1)
        CHECK(thread_top_call(ts) && thread_top_call(ts)->corr_id == id - 1);
    }
  }
  check_idle(ts);
}

static void test_unseen_enter_deep(void)
{
  unseen_enter(MAX);
  unseen_enter(MAX + 1);
  unseen_enter(MAX + 2);
  unseen_enter(MAX + 5);
}

int main(void)
{
  RUN(test_missed_exit_deep);
  RUN(test_unseen_enter_deep);
  UNIT_EXIT();
}
