/* Unit tests of the worker thread's queue and shutdown (agent/worker.c). */
#include <errno.h>
#include <stdatomic.h>
#include <unistd.h>

#include "agent/aggregate.h"
#include "agent/corr.h"
#include "agent/worker.h"
#include "cupti/buffers.h"
#include "cupti/loader.h"
#include "unit.h"

static struct buffer_pool *pool;
static uint8_t *late;        /* a buffer CUPTI completes while the worker is stopping */
static _Atomic int stopping; /* set just before worker_stop */
static _Atomic int late_result = 1;
static _Atomic size_t cupti_drops; /* CUPTI's dropped-record counter (reset on read) */
static _Atomic int drops_injected;

static CUptiResult CUPTIAPI fake_dropped(CUcontext ctx, uint32_t stream, size_t *dropped)
{
  (void)ctx;
  (void)stream;
  *dropped = atomic_exchange(&cupti_drops, 0);
  return CUPTI_SUCCESS;
}

/* The final tick (worker_stop) can be long (a consumer writing its last window); CUPTI's own
 * thread may complete a buffer meanwhile. Submitted from the tick itself to hit that window. */
static void tick(void *arg, uint64_t now_ns)
{
  (void)arg;
  (void)now_ns;
  if (atomic_load(&stopping) && late) {
    atomic_store(&late_result, worker_submit(late, 0));
    late = NULL;
  } else if (atomic_load(&stopping) && !atomic_exchange(&drops_injected, 1)) {
    /* CUPTI dropped records after the last buffer the worker processed (every buffer was in
     * the worker's hands), and no buffer completes after them: still counted. */
    atomic_fetch_add(&cupti_drops, 7);
  }
}

/* A buffer completed while the worker stops is processed (or refused and counted as lost),
 * never left in the queue: it goes back to the pool either way. Records CUPTI dropped after
 * the last buffer the worker processed are still counted. */
static void test_stop_drains_late_buffer(void)
{
  struct corr_table *corr = corr_table_new(1024);
  struct aggregate *agg = aggregate_new(corr);
  struct worker_consumer c = {.tick = tick};
  struct worker_stats st;

  pool = buffer_pool_new(64 << 10, 256 << 10);
  CHECK(pool && agg);
  CHECK_EQ(worker_add_consumer(&c), 0);
  cupti_fn.ActivityGetNumDroppedRecords = fake_dropped;
  /* An hour between flushes: the only ticks are after batches and the final one. */
  CHECK_EQ(worker_start(pool, agg, 3600ull * 1000000000ull), 0);
  late = buffer_pool_get(pool);
  CHECK(late != NULL);
  CHECK_EQ(buffer_pool_available(pool), 3);
  atomic_store(&stopping, 1);
  CHECK_EQ(worker_stop(5000), 0);
  worker_get_stats(&st);
  if (atomic_load(&late_result) == 0)
    CHECK_EQ(st.buffers, 1); /* accepted: then processed */
  else
    CHECK_EQ(st.lost_buffers, 1); /* refused: counted */
  CHECK_EQ(buffer_pool_available(pool), 4);
  CHECK_EQ(atomic_load(&drops_injected), 1);
  CHECK_EQ(st.dropped_records, 7);
  /* After the stop, completions are refused. */
  CHECK(worker_submit(buffer_pool_get(pool), 0) != 0);
  aggregate_free(agg);
  corr_table_free(corr);
}

static _Atomic int in_flush, release_flush;

/* A FlushAll(0) stuck in a wedged driver: returns only when the test lets it. */
static CUptiResult CUPTIAPI stuck_flush(uint32_t flag)
{
  (void)flag;
  atomic_store(&in_flush, 1);
  while (!atomic_load(&release_flush))
    usleep(1000);
  return CUPTI_SUCCESS;
}

/* A periodic flush that does not return: pausing gives up after its bound, stopping gives up
 * after its own, and the buffers left queued go back to the pool, counted as lost. */
static void test_stuck_flush_bounded(void)
{
  struct corr_table *corr = corr_table_new(1024);
  struct aggregate *agg = aggregate_new(corr);
  struct buffer_pool *p = buffer_pool_new(64 << 10, 256 << 10);
  struct worker_stats before, st;
  uint8_t *b1, *b2;

  CHECK(p && agg);
  worker_get_stats(&before);
  CHECK_EQ(before.exit_incomplete, 0);
  cupti_fn.ActivityFlushAll = stuck_flush;
  CHECK_EQ(worker_start(p, agg, 1000000ull), 0); /* flushes every millisecond */
  while (!atomic_load(&in_flush))
    usleep(1000);
  CHECK_EQ(worker_pause_flushing(50), -ETIMEDOUT);
  /* Completed while the worker is stuck: queued, never read. */
  b1 = buffer_pool_get(p);
  b2 = buffer_pool_get(p);
  CHECK(b1 && b2);
  CHECK_EQ(worker_submit(b1, 0), 0);
  CHECK_EQ(worker_submit(b2, 0), 0);
  CHECK_EQ(worker_stop(50), -ETIMEDOUT);
  worker_get_stats(&st);
  CHECK_EQ(st.lost_buffers - before.lost_buffers, 2);
  CHECK_EQ(st.buffers, before.buffers);
  CHECK_EQ(st.exit_incomplete, 1);
  CHECK_EQ(buffer_pool_available(p), 4);
  /* Refused (and counted) from now on, even while the thread still exists. */
  CHECK_EQ(worker_submit(buffer_pool_get(p), 0), -ESHUTDOWN);
  worker_get_stats(&st);
  CHECK_EQ(st.lost_buffers - before.lost_buffers, 3);
  /* The flush returns at last: the detached thread finds nothing queued and ends. */
  atomic_store(&release_flush, 1);
}

static _Atomic int ticks, flushes_seen;

static void count_tick(void *arg, uint64_t now_ns)
{
  (void)arg;
  (void)now_ns;
  atomic_fetch_add(&ticks, 1);
}

static CUptiResult CUPTIAPI count_flush(uint32_t flag)
{
  (void)flag;
  atomic_fetch_add(&flushes_seen, 1);
  return CUPTI_SUCCESS;
}

/* worker_wake ticks the consumers at once, without a CUPTI flush and long before the flush
 * interval; several wakes before the worker runs make at least one tick; a wake while the
 * worker is stopped does nothing. */
static void test_wake_ticks_without_flush(void)
{
  struct corr_table *corr = corr_table_new(1024);
  struct aggregate *agg = aggregate_new(corr);
  struct buffer_pool *p = buffer_pool_new(64 << 10, 256 << 10);
  struct worker_consumer c = {.tick = count_tick};
  struct worker_stats before, st;
  int waited = 0;

  CHECK(p && agg);
  CHECK_EQ(worker_add_consumer(&c), 0);
  cupti_fn.ActivityFlushAll = count_flush;
  worker_get_stats(&before);
  worker_wake(); /* not running (the first test stopped it): no effect */
  /* An hour between flushes: only a wake (or the final stop) can tick. */
  CHECK_EQ(worker_start(p, agg, 3600ull * 1000000000ull), 0);
  for (int i = 0; i < 3; i++) {
    int t0 = atomic_load(&ticks);

    worker_wake();
    worker_wake();
    while (atomic_load(&ticks) == t0 && waited < 5000) {
      usleep(1000);
      waited++;
    }
    CHECK(atomic_load(&ticks) > t0);
  }
  worker_get_stats(&st);
  CHECK(st.kicks - before.kicks >= 3 && st.kicks - before.kicks <= 6);
  CHECK_EQ(st.flushes, before.flushes);
  CHECK_EQ(atomic_load(&flushes_seen), 0);
  CHECK_EQ(worker_stop(5000), 0);
  worker_wake(); /* stopped: no effect, no hang */
  worker_get_stats(&st);
  CHECK(st.kicks - before.kicks <= 6);
  buffer_pool_free(p);
  aggregate_free(agg);
  corr_table_free(corr);
}

int main(void)
{
  RUN(test_stop_drains_late_buffer);
  RUN(test_wake_ticks_without_flush);
  RUN(test_stuck_flush_bounded);
  UNIT_EXIT();
}
