/* Context id -> device id, learned from RESOURCE callbacks and CONTEXT records. */
#include "agent/ctx_map.h"

#include <stdatomic.h>

#include "agent/util/hash.h"

/* (context_id + 1) << 32 | device; 0 = empty. One atomic word per entry makes set/get
 * lock-free without a seqlock. */
static _Atomic uint64_t slots[CTX_MAP_SLOTS];

void ctx_map_set(uint32_t context_id, int32_t device)
{
  uint64_t word = ((uint64_t)context_id + 1) << 32 | (uint32_t)device;
  size_t i = (size_t)hash_u64(context_id) & (CTX_MAP_SLOTS - 1);

  for (int n = 0; n < CTX_MAP_SLOTS; n++, i = (i + 1) & (CTX_MAP_SLOTS - 1)) {
    uint64_t cur = atomic_load_explicit(&slots[i], memory_order_acquire);
    if (cur == 0) {
      if (atomic_compare_exchange_strong_explicit(&slots[i], &cur, word, memory_order_acq_rel,
                                                  memory_order_acquire))
        return;
    }
    if ((cur >> 32) == (uint64_t)context_id + 1) {
      atomic_store_explicit(&slots[i], word, memory_order_release);
      return;
    }
  }
}

int32_t ctx_map_get(uint32_t context_id)
{
  size_t i = (size_t)hash_u64(context_id) & (CTX_MAP_SLOTS - 1);

  for (int n = 0; n < CTX_MAP_SLOTS; n++, i = (i + 1) & (CTX_MAP_SLOTS - 1)) {
    uint64_t cur = atomic_load_explicit(&slots[i], memory_order_acquire);
    if (cur == 0)
      return -1;
    if ((cur >> 32) == (uint64_t)context_id + 1)
      return (int32_t)(uint32_t)cur;
  }
  return -1;
}
