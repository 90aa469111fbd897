/* A striped event counter: many threads add without sharing one cache line; readers sum. */
#ifndef GPUPROF_AGENT_UTIL_COUNTER_H
#define GPUPROF_AGENT_UTIL_COUNTER_H

#include <stdatomic.h>
#include <stdint.h>

#define COUNTER_STRIPES 32

/*
 * Callbacks of every application thread count API calls; one shared atomic would bounce a
 * cache line between all of them. A thread picks its stripe from its tid, so increments are
 * uncontended relaxed adds in practice. The sum is exact once the adders have stopped, and a
 * slightly stale snapshot otherwise.
 */
struct striped_counter {
  struct {
    _Alignas(64) _Atomic uint64_t value;
  } stripe[COUNTER_STRIPES];
};

static inline void striped_counter_add(struct striped_counter *c, unsigned hint, uint64_t n)
{
  atomic_fetch_add_explicit(&c->stripe[hint % COUNTER_STRIPES].value, n, memory_order_relaxed);
}

static inline uint64_t striped_counter_sum(struct striped_counter *c)
{
  uint64_t sum = 0;
  for (int i = 0; i < COUNTER_STRIPES; i++)
    sum += atomic_load_explicit(&c->stripe[i].value, memory_order_relaxed);
  return sum;
}

#endif
