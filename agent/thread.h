/* Per-thread agent state: the cached tid and the stack of API calls open on this thread. */
#ifndef GPUPROF_AGENT_THREAD_H
#define GPUPROF_AGENT_THREAD_H

#include <stdint.h>

#define THREAD_MAX_OPEN_CALLS 16

struct thread_call {
  uint32_t corr_id;
  uint8_t domain;    /* enum corr_domain */
  uint8_t is_memory; /* an alloc/free API: nested ones must not be counted again */
  uint32_t stack_id; /* the host stack of the outermost open call (inherited by nested ones) */
  uint32_t weight;
};

/*
 * Lives in TLS, so it exists without malloc from the thread's first callback on and needs no
 * destructor yet (nothing to flush at thread exit). CUPTI delivers ENTER/EXIT synchronously
 * on the calling thread and LIFO, so a plain array stack suffices; calls nested deeper than
 * THREAD_MAX_OPEN_CALLS are counted in `depth` but not remembered.
 */
struct thread_state {
  uint32_t tid; /* 0 until first use */
  int depth;
  struct thread_call open[THREAD_MAX_OPEN_CALLS];
  /* Launch sampler (agent/hoststack.c). */
  uint64_t rng;
  uint32_t countdown;
  uint8_t sampler_ready;
};

struct thread_state *thread_state_get(void);

/* Pushes a call at ENTER. */
void thread_push_call(struct thread_state *ts, uint32_t corr_id, uint8_t domain, int is_memory);
/* The innermost open call, or NULL (none, or nested deeper than remembered). */
static inline struct thread_call *thread_top_call(struct thread_state *ts)
{
  int top = ts->depth - 1;
  return top >= 0 && top < THREAD_MAX_OPEN_CALLS ? &ts->open[top] : 0;
}

/* Pops the call at EXIT (tolerates a missing EXIT of an inner call by unwinding to corr_id). */
void thread_pop_call(struct thread_state *ts, uint32_t corr_id);
/* The innermost open runtime call's correlation id below the top, or 0. */
uint32_t thread_parent_runtime(const struct thread_state *ts);
/* True if an alloc/free call encloses the top call (which then must not touch the map). */
int thread_inside_memory_call(const struct thread_state *ts);

#endif
