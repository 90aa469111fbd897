/* A striped event counter: many threads add without sharing one cache line; readers sum. */
#ifndef GPUPROF_AGENT_UTIL_COUNTER_H
#define GPUPROF_AGENT_UTIL_COUNTER_H

#include <stdatomic.h>
#include <stdint.h>

#define COUNTER_STRIPES 64
#define COUNTER_SHARED_STRIPE (COUNTER_STRIPES - 1)

/*
 * Callbacks of every application thread count API calls; one shared atomic would bounce a
 * cache line between all of them, and even an uncontended atomic add is a locked instruction
 * on every call. So the first COUNTER_STRIPES - 1 threads that count each own a stripe (their
 * counter_slot, agent/thread.h, claimed at a thread's first call) and add with a plain load and store: no
 * other thread writes it, readers only load it. Later threads share the last stripe with atomic
 * adds. The sum is exact once the adders have stopped, and a slightly stale snapshot
 * otherwise. A stripe is given back when its thread exits (agent/thread.c) and keeps its
 * value: the next owner adds to it.
 */
struct striped_counter {
  struct {
    _Alignas(64) _Atomic uint64_t value;
  } stripe[COUNTER_STRIPES];
};

/* slot: the calling thread's own stripe (below COUNTER_SHARED_STRIPE: no other thread has it),
 * or COUNTER_SHARED_STRIPE. */
static inline void striped_counter_add(struct striped_counter *c, uint32_t slot, uint64_t n)
{
  _Atomic uint64_t *v =
      &c->stripe[slot < COUNTER_SHARED_STRIPE ? slot : COUNTER_SHARED_STRIPE].value;

  if (slot < COUNTER_SHARED_STRIPE)
    atomic_store_explicit(v, atomic_load_explicit(v, memory_order_relaxed) + n,
                          memory_order_relaxed);
  else
    atomic_fetch_add_explicit(v, n, memory_order_relaxed);
}

static inline uint64_t striped_counter_sum(struct striped_counter *c)
{
  uint64_t sum = 0;
  for (int i = 0; i < COUNTER_STRIPES; i++)
    sum += atomic_load_explicit(&c->stripe[i].value, memory_order_relaxed);
  return sum;
}

#endif
