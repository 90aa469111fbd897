/* The agent's worker thread: decodes completed CUPTI buffers, aggregates, flushes periodically. */
#define LOG_MODULE "worker"
#include "agent/worker.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent/aggregate.h"
#include "agent/corr.h"
#include "agent/nccl.h"
#include "agent/util/bthread.h"
#include "agent/util/clock.h"
#include "agent/util/guard.h"
#include "agent/util/log.h"
#include "cupti/buffers.h"
#include "cupti/decode.h"
#include "cupti/loader.h"

struct item {
  uint8_t *buffer;
  size_t valid_size;
};

static struct {
  pthread_mutex_t lock;
  pthread_cond_t wake;    /* work queued, kick, or stop */
  pthread_cond_t settled; /* a flush returned */
  struct bthread *thread;
  int started;   /* thread exists and has not been joined */
  int accepting; /* worker_submit may queue */
  int stop;
  int kick; /* worker_wake: tick the consumers now */
  int flush_enabled;
  int flushing;
  struct item *queue; /* ring of `cap` items */
  unsigned cap, head, count;
  struct item *batch; /* the worker's private copy of a taken queue */
  struct buffer_pool *pool;
  struct aggregate *agg;
  uint64_t flush_interval_ns;
  struct worker_consumer consumers[WORKER_MAX_CONSUMERS];
  unsigned n_consumers;
} w = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
};

static struct {
  _Atomic uint64_t buffers, records, dropped, invalid, zero_ts, flushes, lost, kicks;
  _Atomic int exit_incomplete;
} stats;

/* Set in a forked child (worker_forget): w.lock may be held there by a thread that does not
 * exist, so nothing may take it, not even a buffer CUPTI completes in the child. */
static _Atomic int forked;

#define ADD(field, n) atomic_fetch_add_explicit(&stats.field, (n), memory_order_relaxed)

static void on_event(const struct event *ev, void *arg)
{
  struct corr_info api;
  int joined = aggregate_event(arg, ev, &api);

  /* The NCCL ops of a kernel record, taken before the consumers read them (nccl_current). */
  nccl_worker_event(ev);
  for (unsigned i = 0; i < w.n_consumers; i++)
    if (w.consumers[i].event)
      w.consumers[i].event(w.consumers[i].arg, ev, joined ? &api : NULL);
}

static void tick_consumers(void)
{
  uint64_t now = clock_realtime_ns();

  nccl_worker_tick(now);
  for (unsigned i = 0; i < w.n_consumers; i++)
    if (w.consumers[i].tick)
      w.consumers[i].tick(w.consumers[i].arg, now);
}

int worker_add_consumer(const struct worker_consumer *c)
{
  if (w.n_consumers == WORKER_MAX_CONSUMERS)
    return -ENOSPC;
  w.consumers[w.n_consumers++] = *c;
  return 0;
}

/* Host-side drops are counted by CUPTI since the last call (the call resets the count). */
static void count_dropped(void)
{
  size_t dropped = 0;

  if (cupti_fn.ActivityGetNumDroppedRecords &&
      cupti_fn.ActivityGetNumDroppedRecords(NULL, 0, &dropped) == CUPTI_SUCCESS && dropped)
    ADD(dropped, dropped);
}

static void process(struct item *it)
{
  struct decode_stats ds = {0};

  decode_buffer(it->buffer, it->valid_size, on_event, w.agg, &ds);
  count_dropped();
  ADD(buffers, 1);
  ADD(records, ds.records);
  ADD(invalid, ds.invalid_records);
  ADD(zero_ts, ds.zero_timestamps);
  buffer_pool_put(w.pool, it->buffer);
}

static void *worker_main(void *arg)
{
  uint64_t next_flush = clock_monotonic_ns() + w.flush_interval_ns;

  (void)arg;
  /* Whatever this thread calls into CUPTI must not come back as an agent callback. */
  guard_hold();
  pthread_mutex_lock(&w.lock);
  for (;;) {
    unsigned n = 0;
    int do_flush, due;

    /* Wakes for work, stop, a kick (ticks only), or the flush interval (then flushes if
     * enabled, and ticks). */
    while (!w.stop && w.count == 0 && !w.kick && clock_monotonic_ns() < next_flush) {
      struct timespec ts = clock_ns_to_timespec(next_flush);
      pthread_cond_timedwait(&w.wake, &w.lock, &ts);
    }
    if (w.kick) {
      w.kick = 0;
      ADD(kicks, 1);
    }
    due = clock_monotonic_ns() >= next_flush;
    if (due)
      next_flush = clock_monotonic_ns() + w.flush_interval_ns;
    while (w.count) {
      w.batch[n++] = w.queue[w.head];
      w.head = (w.head + 1) % w.cap;
      w.count--;
    }
    if (w.stop && n == 0) {
      pthread_mutex_unlock(&w.lock);
      tick_consumers();
      pthread_mutex_lock(&w.lock);
      /* The final tick ran without the lock (a consumer may write its last window): a
       * buffer completed meanwhile was accepted and must be processed, not left queued.
       * Leaving with the queue empty and `accepting` cleared in one hold of the lock. */
      if (w.count)
        continue;
      break;
    }
    do_flush = w.flush_enabled && !w.stop && due;
    w.flushing = do_flush;
    pthread_mutex_unlock(&w.lock);

    for (unsigned i = 0; i < n; i++)
      process(&w.batch[i]);
    if (do_flush) {
      /* Delivers every buffer whose records are complete; completions come back through
       * worker_submit, possibly on this very thread (the mutex is not held here). */
      cupti_fn.ActivityFlushAll(0);
      ADD(flushes, 1);
      worker_flush_end();
    }
    /* Not flushing any more: a consumer's tick may flush (worker_flush_begin). */
    tick_consumers();

    pthread_mutex_lock(&w.lock);
  }
  w.accepting = 0;
  pthread_mutex_unlock(&w.lock);
  /* Records dropped while every buffer was in this thread's hands, after the last buffer it
   * processed: no buffer completes after them, so only this read counts them. */
  count_dropped();
  return NULL;
}

int worker_start(struct buffer_pool *pool, struct aggregate *agg, uint64_t flush_interval_ns)
{
  pthread_condattr_t attr;
  int ret;

  w.cap = buffer_pool_count(pool) + 1;
  /* A restart after a joined worker_stop (unit tests): nothing uses the old queue any more. */
  free(w.queue);
  free(w.batch);
  w.queue = calloc(w.cap, sizeof(*w.queue));
  w.batch = calloc(w.cap, sizeof(*w.batch));
  if (!w.queue || !w.batch) {
    ret = -ENOMEM;
    goto out;
  }
  w.pool = pool;
  w.agg = agg;
  w.flush_interval_ns = flush_interval_ns;
  w.flush_enabled = 1;
  w.accepting = 1;
  /* Restartable after a worker_stop that joined the thread (the unit tests start it again). */
  w.stop = 0;
  w.kick = 0;
  w.flushing = 0;
  w.head = w.count = 0;

  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&w.wake, &attr);
  pthread_cond_init(&w.settled, &attr);
  pthread_condattr_destroy(&attr);

  ret = bthread_start(&w.thread, "gpuprof-worker", worker_main, NULL);
  if (ret) {
    w.accepting = 0;
    goto out;
  }
  w.started = 1;
out:
  if (ret) {
    free(w.queue);
    free(w.batch);
    w.queue = w.batch = NULL;
  }
  return ret;
}

int worker_submit(uint8_t *buffer, size_t valid_size)
{
  int ret = 0;

  if (atomic_load_explicit(&forked, memory_order_relaxed))
    return -ESHUTDOWN;
  pthread_mutex_lock(&w.lock);
  if (!w.accepting) {
    ret = -ESHUTDOWN;
  } else if (w.count == w.cap) {
    ret = -ENOSPC; /* cannot happen: the queue holds every buffer the pool has */
  } else {
    w.queue[(w.head + w.count) % w.cap] = (struct item){buffer, valid_size};
    w.count++;
    pthread_cond_signal(&w.wake);
  }
  pthread_mutex_unlock(&w.lock);
  if (ret)
    ADD(lost, 1);
  return ret;
}

void worker_wake(void)
{
  if (atomic_load_explicit(&forked, memory_order_relaxed))
    return;
  pthread_mutex_lock(&w.lock);
  /* One signal per batch of wakes: the worker clears the flag when it takes it. */
  if (w.started && w.accepting && !w.kick) {
    w.kick = 1;
    pthread_cond_signal(&w.wake);
  }
  pthread_mutex_unlock(&w.lock);
}

int worker_flush_begin(void)
{
  int ok;

  pthread_mutex_lock(&w.lock);
  ok = w.flush_enabled && !w.flushing;
  if (ok)
    w.flushing = 1;
  pthread_mutex_unlock(&w.lock);
  return ok;
}

void worker_flush_end(void)
{
  pthread_mutex_lock(&w.lock);
  w.flushing = 0;
  pthread_cond_broadcast(&w.settled);
  pthread_mutex_unlock(&w.lock);
}

int worker_pause_flushing(unsigned timeout_ms)
{
  struct timespec deadline;
  int ret = 0;

  /* w.settled waits on CLOCK_MONOTONIC (worker_start). */
  deadline = clock_ns_to_timespec(clock_monotonic_ns() + (uint64_t)timeout_ms * 1000000ull);
  pthread_mutex_lock(&w.lock);
  w.flush_enabled = 0;
  while (w.flushing && ret == 0)
    ret = pthread_cond_timedwait(&w.settled, &w.lock, &deadline);
  /* A wakeup at the deadline that finds the flush over is not a timeout. */
  ret = w.flushing ? -ETIMEDOUT : 0;
  pthread_mutex_unlock(&w.lock);
  if (ret) {
    /* A wedged GPU or driver (a hung kernel, a collective that never completes): the
     * application's exit must not wait on it. */
    atomic_store(&stats.exit_incomplete, 1);
    log_warn("cuptiActivityFlushAll did not return within %u ms; skipping the final flush, so "
             "records CUPTI still holds are lost and the summary is incomplete",
             timeout_ms);
  }
  return ret;
}

int worker_stop(unsigned timeout_ms)
{
  struct bthread *t;
  unsigned left;

  pthread_mutex_lock(&w.lock);
  if (!w.started) {
    pthread_mutex_unlock(&w.lock);
    return 0;
  }
  w.started = 0;
  w.stop = 1;
  t = w.thread;
  w.thread = NULL;
  pthread_cond_signal(&w.wake);
  pthread_mutex_unlock(&w.lock);

  /* On the monotonic clock: a wall-clock step at exit neither hangs the exit nor cuts the
   * worker's last batch short. */
  if (bthread_join_within(t, (uint64_t)timeout_ms * 1000000ull) == 0)
    return 0;
  /* Better an incomplete summary than a process that cannot exit. What is still queued
   * will never be read: counted as lost and given back now; a worker that wakes later
   * finds the queue empty and refuses further buffers (worker_submit counts those). */
  pthread_mutex_lock(&w.lock);
  w.accepting = 0;
  left = w.count;
  while (w.count) {
    buffer_pool_put(w.pool, w.queue[w.head].buffer);
    w.head = (w.head + 1) % w.cap;
    w.count--;
  }
  pthread_mutex_unlock(&w.lock);
  ADD(lost, left);
  atomic_store(&stats.exit_incomplete, 1);
  log_warn("the worker thread did not finish within %u ms; writing the summary without it "
           "(%u completed buffers unread)",
           timeout_ms, left);
  return -ETIMEDOUT;
}

unsigned worker_settle(unsigned timeout_ms)
{
  uint64_t until = clock_monotonic_ns() + (uint64_t)timeout_ms * 1000000ull;
  const struct timespec nap = {.tv_sec = 0, .tv_nsec = 200000};
  unsigned queued;

  /* A thread inside the completion callback is about to queue a buffer (it only takes
   * w.lock, which this thread does not hold here): worth a short wait. Bounded, because a
   * CUPTI thread may be descheduled for as long as the machine likes. */
  while (buffers_completing() && clock_monotonic_ns() < until)
    nanosleep(&nap, NULL);
  pthread_mutex_lock(&w.lock);
  queued = w.count;
  pthread_mutex_unlock(&w.lock);
  return queued;
}

void worker_get_stats(struct worker_stats *out)
{
  out->buffers = atomic_load(&stats.buffers);
  out->records = atomic_load(&stats.records);
  out->dropped_records = atomic_load(&stats.dropped);
  out->invalid_records = atomic_load(&stats.invalid);
  out->zero_timestamps = atomic_load(&stats.zero_ts);
  out->flushes = atomic_load(&stats.flushes);
  out->lost_buffers = atomic_load(&stats.lost);
  out->kicks = atomic_load(&stats.kicks);
  out->exit_incomplete = atomic_load(&stats.exit_incomplete);
}

void worker_forget(void)
{
  /* In a forked child the mutex may be held by a parent thread that does not exist here:
   * never lock it (worker_submit checks `forked` first). The flags are read by nothing in a
   * dormant child; reset for clarity. */
  atomic_store_explicit(&forked, 1, memory_order_relaxed);
  w.started = 0;
  w.accepting = 0;
}
