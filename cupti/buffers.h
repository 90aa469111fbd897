/* The bounded pool of CUPTI activity buffers and the request/complete callbacks CUPTI calls. */
#ifndef GPUPROF_CUPTI_BUFFERS_H
#define GPUPROF_CUPTI_BUFFERS_H

#include <stddef.h>
#include <stdint.h>

#include <cupti.h>

/*
 * All buffers are carved out of one anonymous mapping made at init (pages are committed only
 * when CUPTI first writes them) and handed out zeroed, which lets CUPTI skip zeroing them on
 * the application thread (CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER). The free list is a
 * lock-free stack with a generation tag against ABA: buffer_pool_get never blocks and never
 * allocates, because CUPTI calls it on application threads in the critical path.
 */
struct buffer_pool;

/* count = limit / size (at least 1). NULL if the mapping fails. */
struct buffer_pool *buffer_pool_new(size_t buffer_size, size_t limit);
void buffer_pool_free(struct buffer_pool *p);

/* A zeroed buffer, or NULL when all are out (counted in buffer_pool_exhausted). */
uint8_t *buffer_pool_get(struct buffer_pool *p);
/* Zeroes and returns a buffer; -EINVAL for a pointer that is not one of the pool's. */
int buffer_pool_put(struct buffer_pool *p, uint8_t *buf);

size_t buffer_pool_buffer_size(const struct buffer_pool *p);
unsigned buffer_pool_count(const struct buffer_pool *p);
unsigned buffer_pool_available(struct buffer_pool *p);
uint64_t buffer_pool_exhausted(struct buffer_pool *p);

/*
 * The CUPTI side. buffers_attach() makes `p` the pool the callbacks serve;
 * buffers_requested/buffers_completed are what cuptiActivityRegisterCallbacks gets.
 * Completed buffers go to the worker (agent/worker.h); nothing is decoded here.
 */
void buffers_attach(struct buffer_pool *p);
void CUPTIAPI buffers_requested(uint8_t **buffer, size_t *size, size_t *max_num_records);
void CUPTIAPI buffers_completed(CUcontext context, uint32_t stream_id, uint8_t *buffer, size_t size,
                                size_t valid_size);

/* How many threads are inside buffers_completed now (a snapshot): 0 means every buffer CUPTI
 * has started to hand over is in the worker's queue or processed. Any thread, lock-free. */
unsigned buffers_completing(void);

#endif
