/* The bounded pool of CUPTI activity buffers and the request/complete callbacks CUPTI calls. */
#define LOG_MODULE "cupti"
#include "cupti/buffers.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "agent/util/log.h"
#include "agent/worker.h"

#define IDX_MASK 0xffffffffull

struct buffer_pool {
  uint8_t *base;
  size_t size; /* of one buffer, a multiple of 8 */
  unsigned count;
  size_t map_len;
  /* Free stack: low 32 bits = index + 1 of the top buffer (0 = empty), high 32 = generation. */
  _Atomic uint64_t head;
  _Atomic uint32_t *next; /* next[i] = index + 1 of the buffer below i */
  _Atomic uint64_t exhausted;
  _Atomic unsigned available;
};

struct buffer_pool *buffer_pool_new(size_t buffer_size, size_t limit)
{
  struct buffer_pool *p = calloc(1, sizeof(*p));
  void *mem;

  if (!p)
    return NULL;
  p->size = (buffer_size + 7) & ~(size_t)7; /* CUPTI wants 8-byte aligned records */
  p->count = (unsigned)(limit / p->size);
  if (p->count == 0)
    p->count = 1;
  p->next = calloc(p->count, sizeof(*p->next));
  if (!p->next)
    goto fail;
  p->map_len = p->size * p->count;
  mem = mmap(NULL, p->map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
             -1, 0);
  if (mem == MAP_FAILED)
    goto fail;
  p->base = mem;
  for (unsigned i = 0; i < p->count; i++)
    atomic_store(&p->next[i], i); /* buffer i sits on buffer i - 1 */
  atomic_store(&p->head, p->count);
  atomic_store(&p->available, p->count);
  return p;
fail:
  free(p->next);
  free(p);
  return NULL;
}

void buffer_pool_free(struct buffer_pool *p)
{
  if (!p)
    return;
  munmap(p->base, p->map_len);
  free(p->next);
  free(p);
}

uint8_t *buffer_pool_get(struct buffer_pool *p)
{
  uint64_t old = atomic_load_explicit(&p->head, memory_order_acquire);

  for (;;) {
    uint32_t top = (uint32_t)(old & IDX_MASK);
    uint64_t fresh;

    if (!top) {
      atomic_fetch_add_explicit(&p->exhausted, 1, memory_order_relaxed);
      return NULL;
    }
    fresh = ((old >> 32) + 1) << 32 | atomic_load_explicit(&p->next[top - 1], memory_order_relaxed);
    if (atomic_compare_exchange_weak_explicit(&p->head, &old, fresh, memory_order_acq_rel,
                                              memory_order_acquire)) {
      atomic_fetch_sub_explicit(&p->available, 1, memory_order_relaxed);
      return p->base + (size_t)(top - 1) * p->size;
    }
  }
}

int buffer_pool_put(struct buffer_pool *p, uint8_t *buf)
{
  uint64_t old, fresh;
  size_t off;
  uint32_t idx;

  if (!buf || buf < p->base || buf >= p->base + p->map_len)
    return -EINVAL;
  off = (size_t)(buf - p->base);
  if (off % p->size)
    return -EINVAL;
  idx = (uint32_t)(off / p->size);
  /* Zero here, on the worker, so that CUPTI need not zero it on an application thread. */
  memset(buf, 0, p->size);
  old = atomic_load_explicit(&p->head, memory_order_relaxed);
  do {
    atomic_store_explicit(&p->next[idx], (uint32_t)(old & IDX_MASK), memory_order_relaxed);
    fresh = ((old >> 32) + 1) << 32 | (idx + 1);
  } while (!atomic_compare_exchange_weak_explicit(&p->head, &old, fresh, memory_order_release,
                                                  memory_order_relaxed));
  atomic_fetch_add_explicit(&p->available, 1, memory_order_relaxed);
  return 0;
}

size_t buffer_pool_buffer_size(const struct buffer_pool *p)
{
  return p->size;
}

unsigned buffer_pool_count(const struct buffer_pool *p)
{
  return p->count;
}

unsigned buffer_pool_available(struct buffer_pool *p)
{
  return atomic_load_explicit(&p->available, memory_order_relaxed);
}

uint64_t buffer_pool_exhausted(struct buffer_pool *p)
{
  return atomic_load_explicit(&p->exhausted, memory_order_relaxed);
}

/* ---- CUPTI callbacks ---- */

/* Set once at init before the callbacks are registered; never changes afterwards. */
static struct buffer_pool *attached_pool;

/*
 * Completion callbacks running now, on any thread. FlushAll returning does not mean that
 * CUPTI's own delivery thread is out of buffers_completed (cupti.md 2.5): a capture's end
 * waits for this to reach 0 before it counts what was handed over (worker_settle). An
 * atomic and no lock: the callback must never wait on the agent.
 */
static _Atomic unsigned completing;

void buffers_attach(struct buffer_pool *p)
{
  attached_pool = p;
}

/*
 * No reentrancy guard here, on purpose: CUPTI also requests buffers on the agent's own
 * worker thread (which holds the guard for its whole life) while it flushes, and refusing
 * those would lose records. Neither callback calls anything that could come back into the
 * agent.
 */
void CUPTIAPI buffers_requested(uint8_t **buffer, size_t *size, size_t *max_num_records)
{
  struct buffer_pool *p = attached_pool;
  uint8_t *buf = p ? buffer_pool_get(p) : NULL;

  /* NULL tells CUPTI to drop records; it counts them (cuptiActivityGetNumDroppedRecords). */
  *buffer = buf;
  *size = buf ? p->size : 0;
  *max_num_records = 0;
  if (!buf)
    log_warn_once("all %u activity buffers are in use; CUPTI drops records until one is "
                  "free (raise GPUPROF_BUFFER_LIMIT or lower GPUPROF_FLUSH_INTERVAL)",
                  p ? p->count : 0);
}

void CUPTIAPI buffers_completed(CUcontext context, uint32_t stream_id, uint8_t *buffer, size_t size,
                                size_t valid_size)
{
  (void)context;
  (void)stream_id;
  (void)size;
  if (!buffer)
    return;
  atomic_fetch_add_explicit(&completing, 1, memory_order_acq_rel);
  /* Never FlushAll here, never a lock a FlushAll caller could hold: only hand over. */
  if (worker_submit(buffer, valid_size) != 0 && attached_pool)
    buffer_pool_put(attached_pool,
                    buffer); /* worker gone (exit): records are lost, the buffer is not */
  /* Release: whoever reads 0 after this also sees the buffer in the worker's queue. */
  atomic_fetch_sub_explicit(&completing, 1, memory_order_release);
}

unsigned buffers_completing(void)
{
  return atomic_load_explicit(&completing, memory_order_acquire);
}
