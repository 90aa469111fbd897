/* Context id -> device id, learned from RESOURCE callbacks and CONTEXT records. */
#include "agent/ctx_map.h"

#include <stdatomic.h>

/* (context_id + 1) << 32 | device; 0 = empty. One atomic word per entry makes set/get
 * lock-free without a seqlock. Context ids are sequential, so slot id % CTX_MAP_SLOTS holds
 * the newest context with that remainder: the most recent CTX_MAP_SLOTS contexts are always
 * known, and a process that keeps creating and destroying contexts never fills the table. */
static _Atomic uint64_t slots[CTX_MAP_SLOTS];

void ctx_map_set(uint32_t context_id, int32_t device)
{
  uint64_t word = ((uint64_t)context_id + 1) << 32 | (uint32_t)device;
  _Atomic uint64_t *slot = &slots[context_id & (CTX_MAP_SLOTS - 1)];
  uint64_t cur = atomic_load_explicit(slot, memory_order_acquire);

  /* A late CONTEXT record of an older context must not evict the newer one in its slot. */
  while ((cur >> 32) <= (uint64_t)context_id + 1 &&
         !atomic_compare_exchange_weak_explicit(slot, &cur, word, memory_order_acq_rel,
                                                memory_order_acquire))
    ;
}

int32_t ctx_map_get(uint32_t context_id)
{
  uint64_t cur =
      atomic_load_explicit(&slots[context_id & (CTX_MAP_SLOTS - 1)], memory_order_acquire);

  if ((cur >> 32) != (uint64_t)context_id + 1)
    return -1;
  return (int32_t)(uint32_t)cur;
}

uint64_t ctx_map_devices(void)
{
  uint64_t seen = 0;

  for (unsigned i = 0; i < CTX_MAP_SLOTS; i++) {
    uint64_t cur = atomic_load_explicit(&slots[i], memory_order_acquire);
    int32_t d = (int32_t)(uint32_t)cur;
    if (cur && d >= 0 && d < 64)
      seen |= 1ull << d;
  }
  return seen;
}
