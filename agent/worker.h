/* The agent's worker thread: decodes completed CUPTI buffers, aggregates, flushes periodically. */
#ifndef GPUPROF_AGENT_WORKER_H
#define GPUPROF_AGENT_WORKER_H

#include <stddef.h>
#include <stdint.h>

struct aggregate;
struct buffer_pool;
struct corr_info;
struct event;

/*
 * A consumer of decoded events besides the summary's aggregate (pprof windows, a trace
 * capture). Both functions run on the worker thread only, so a consumer needs no lock for
 * state only they touch. `event` gets every decoded event after the aggregate joined it:
 * `api` is the API call that caused it, or NULL (not joinable, or the call is unknown).
 * `tick` runs after every batch and at least every flush interval (and once more when the
 * worker stops), with the current CLOCK_REALTIME time: windows and capture deadlines.
 * Either may be NULL.
 */
struct worker_consumer {
  void (*event)(void *arg, const struct event *ev, const struct corr_info *api);
  void (*tick)(void *arg, uint64_t now_ns);
  void *arg;
};

#define WORKER_MAX_CONSUMERS 4

/* Before worker_start only. 0, or -ENOSPC when WORKER_MAX_CONSUMERS are registered. */
int worker_add_consumer(const struct worker_consumer *c);

struct worker_stats {
  uint64_t buffers;         /* completed buffers processed */
  uint64_t records;         /* records read from them */
  uint64_t dropped_records; /* cuptiActivityGetNumDroppedRecords, summed */
  uint64_t invalid_records; /* buffers that ended in an unreadable record */
  uint64_t zero_timestamps; /* GPU records without timing */
  uint64_t flushes;         /* periodic cuptiActivityFlushAll(0) calls */
  uint64_t kicks;           /* worker_wake calls that woke the worker (ticks, no flush) */
  uint64_t lost_buffers;    /* never read: still queued when the worker could not be stopped
                             * at exit, or completed after it stopped */
  int exit_incomplete;      /* an exit wait timed out (a flush that did not return, a worker
                             * not joined): records CUPTI or the worker still held are in no
                             * count */
};

/*
 * One worker per process (a singleton: CUPTI's buffer callbacks carry no user pointer).
 *
 * Locking: one mutex guards the queue of completed buffers and the flush state. The
 * completion callback holds it only to append; the worker holds it only to take the queue,
 * and never while it decodes or calls cuptiActivityFlushAll (FlushAll may run the completion
 * callback on the calling thread, which then needs the mutex).
 */
int worker_start(struct buffer_pool *pool, struct aggregate *agg, uint64_t flush_interval_ns);

/* From the completion callback (any thread): queue a buffer. -ESHUTDOWN when not running. */
int worker_submit(uint8_t *buffer, size_t valid_size);

/*
 * Stops periodic flushing and waits at most timeout_ms for a flush in progress to return.
 * -ETIMEDOUT (one warning line; the summary then says it is incomplete) when it did not:
 * CUPTI is stuck, and the caller must not flush again (it would block the same way).
 */
int worker_pause_flushing(unsigned timeout_ms);

/*
 * A consumer's own cuptiActivityFlushAll(0) (from its tick, on the worker thread) between
 * these two: begin returns 0 once flushing was paused for the exit path's forced flush, and
 * then the consumer must not flush (the forced flush delivers everything anyway).
 */
int worker_flush_begin(void);
void worker_flush_end(void);

/*
 * Any thread, also from inside a CUPTI callback: makes the worker tick its consumers soon,
 * without a CUPTI flush (a capture then drains the API rings of threads that ended, so that
 * later threads reuse them instead of allocating). Takes the worker's mutex briefly: safe
 * wherever worker_submit is (the worker never holds it across a CUPTI call). A no-op when the
 * worker is not running or in a forked child.
 */
void worker_wake(void);

/*
 * Worker thread only (a consumer's tick, which runs without the worker's mutex): waits at
 * most timeout_ms while a thread is inside the completion callback (cupti/buffers.h
 * buffers_completing), then returns how many buffers are queued for the worker's next batch.
 * 0: every buffer CUPTI had started to hand over has been decoded and passed to the
 * consumers. Not 0: the worker takes them right after this tick and ticks again.
 */
unsigned worker_settle(unsigned timeout_ms);

/* Processes what is queued, stops and joins the thread (waits at most timeout_ms; returns
 * -ETIMEDOUT if the thread did not finish, and then leaves it running detached, refuses
 * further buffers and counts those it left queued as lost_buffers). Idempotent. */
int worker_stop(unsigned timeout_ms);

void worker_get_stats(struct worker_stats *out);

/* Forked child: the thread does not exist there. Forget it without touching locks. */
void worker_forget(void);

#endif
