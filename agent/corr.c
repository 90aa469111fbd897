/* Correlation table: CUPTI correlation id -> the API call (thread, domain, cbid, name, times). */
#include "agent/corr.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "agent/util/hash.h"

/* 56 bytes. All fields are atomics so that the seqlock reader races with nobody (TSan-clean);
 * relaxed loads and stores compile to plain moves on x86-64 and arm64. */
struct corr_slot {
  _Atomic uint32_t seq; /* even: stable, odd: a writer is inside */
  _Atomic uint32_t corr_id;
  _Atomic uint32_t parent_corr_id;
  _Atomic uint32_t tid;
  _Atomic uint32_t meta; /* cbid << 8 | domain */
  _Atomic uint32_t stack_id;
  _Atomic uint32_t weight;
  uint32_t pad;
  _Atomic uintptr_t api_name;
  _Atomic uint64_t enter_ns;
  _Atomic uint64_t exit_ns;
};

struct corr_table {
  struct corr_slot *slots;
  size_t size;
  size_t map_len;
  uint32_t mask;
  _Atomic uint64_t collisions;
};

#define RELAXED memory_order_relaxed

struct corr_table *corr_table_new(size_t entries)
{
  struct corr_table *t = calloc(1, sizeof(*t));
  void *mem;

  if (!t)
    return NULL;
  if (entries < 1024)
    entries = 1024;
  t->size = hash_round_pow2(entries);
  t->mask = (uint32_t)(t->size - 1);
  t->map_len = t->size * sizeof(struct corr_slot);
  /* Anonymous zeroed pages: untouched slots cost no resident memory. */
  mem = mmap(NULL, t->map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    free(t);
    return NULL;
  }
  t->slots = mem;
  return t;
}

void corr_table_free(struct corr_table *t)
{
  if (!t)
    return;
  munmap(t->slots, t->map_len);
  free(t);
}

size_t corr_table_size(const struct corr_table *t)
{
  return t->size;
}

uint64_t corr_table_collisions(struct corr_table *t)
{
  return atomic_load_explicit(&t->collisions, RELAXED);
}

/* Enters the slot's write side without waiting; returns the even sequence it found, or -1. */
static int64_t slot_lock(struct corr_table *t, struct corr_slot *s)
{
  uint32_t seq = atomic_load_explicit(&s->seq, RELAXED);

  if ((seq & 1) || !atomic_compare_exchange_strong_explicit(&s->seq, &seq, seq + 1,
                                                            memory_order_acquire, RELAXED)) {
    atomic_fetch_add_explicit(&t->collisions, 1, RELAXED);
    return -1;
  }
  /* The odd sequence must be visible before any field store (reader validates against it). */
  atomic_thread_fence(memory_order_release);
  return seq;
}

static void slot_unlock(struct corr_slot *s, uint32_t seq)
{
  atomic_store_explicit(&s->seq, seq + 2, memory_order_release);
}

void corr_table_enter(struct corr_table *t, const struct corr_info *info)
{
  struct corr_slot *s = &t->slots[info->corr_id & t->mask];
  int64_t seq = slot_lock(t, s);

  if (seq < 0)
    return;
  atomic_store_explicit(&s->corr_id, info->corr_id, RELAXED);
  atomic_store_explicit(&s->parent_corr_id, info->parent_corr_id, RELAXED);
  atomic_store_explicit(&s->tid, info->tid, RELAXED);
  atomic_store_explicit(&s->meta, (uint32_t)info->cbid << 8 | info->domain, RELAXED);
  atomic_store_explicit(&s->api_name, (uintptr_t)info->api_name, RELAXED);
  atomic_store_explicit(&s->stack_id, info->stack_id, RELAXED);
  atomic_store_explicit(&s->weight, info->weight, RELAXED);
  atomic_store_explicit(&s->enter_ns, info->enter_ns, RELAXED);
  atomic_store_explicit(&s->exit_ns, 0, RELAXED);
  slot_unlock(s, (uint32_t)seq);
}

void corr_table_exit(struct corr_table *t, uint32_t corr_id, uint64_t exit_ns)
{
  struct corr_slot *s = &t->slots[corr_id & t->mask];
  int64_t seq;

  if (atomic_load_explicit(&s->corr_id, RELAXED) != corr_id)
    return;
  seq = slot_lock(t, s);
  if (seq < 0)
    return;
  if (atomic_load_explicit(&s->corr_id, RELAXED) == corr_id)
    atomic_store_explicit(&s->exit_ns, exit_ns, RELAXED);
  slot_unlock(s, (uint32_t)seq);
}

int corr_table_lookup(struct corr_table *t, uint32_t corr_id, struct corr_info *out)
{
  struct corr_slot *s = &t->slots[corr_id & t->mask];

  if (corr_id == 0)
    return -ENOENT;
  /* A writer holds a slot for a few stores; a handful of retries is plenty. */
  for (int attempt = 0; attempt < 64; attempt++) {
    uint32_t seq1 = atomic_load_explicit(&s->seq, memory_order_acquire);
    uint32_t meta;

    if (seq1 & 1)
      continue;
    out->corr_id = atomic_load_explicit(&s->corr_id, RELAXED);
    out->parent_corr_id = atomic_load_explicit(&s->parent_corr_id, RELAXED);
    out->tid = atomic_load_explicit(&s->tid, RELAXED);
    meta = atomic_load_explicit(&s->meta, RELAXED);
    out->api_name = (const char *)atomic_load_explicit(&s->api_name, RELAXED);
    out->enter_ns = atomic_load_explicit(&s->enter_ns, RELAXED);
    out->exit_ns = atomic_load_explicit(&s->exit_ns, RELAXED);
    out->stack_id = atomic_load_explicit(&s->stack_id, RELAXED);
    out->weight = atomic_load_explicit(&s->weight, RELAXED);
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load_explicit(&s->seq, RELAXED) != seq1)
      continue;
    out->cbid = (uint16_t)(meta >> 8);
    out->domain = (uint8_t)(meta & 0xff);
    return out->corr_id == corr_id ? 0 : -ENOENT;
  }
  return -ENOENT;
}
