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
  _Atomic uint64_t
      exit_word; /* EXIT_* below: written outside the seqlock, 0 while the call is open */
};

/*
 * The exit time is written at API EXIT with one plain store and no seqlock round: the EXIT
 * path runs on every API call, and a locked instruction there costs more than the rest of it.
 * That is safe because the word names the call it belongs to. A late EXIT whose slot was
 * taken over by a newer call (one `size` ids later: a call open while the whole ring wrapped)
 * stores a word tagged with the old id, which the reader then ignores; the newer call is
 * never given a wrong exit time. Layout: valid bit, unit bit (duration in µs rather than ns,
 * for calls longer than 2^40 ns = 18 minutes), 22 tag bits, 40 bits of duration since ENTER.
 * The tag is corr_id >> 10: two ids sharing a slot differ by a multiple of the table size
 * (at least 1024) and by less than 2^32, so their tags differ.
 */
#define EXIT_VALID (1ull << 63)
#define EXIT_MICROS (1ull << 62)
#define EXIT_TAG_SHIFT 40
#define EXIT_TAG_MASK 0x3fffffull
#define EXIT_DUR_MASK ((1ull << EXIT_TAG_SHIFT) - 1)

static uint64_t exit_tag(uint32_t corr_id)
{
  return ((uint64_t)(corr_id >> 10) & EXIT_TAG_MASK) << EXIT_TAG_SHIFT;
}

static uint64_t exit_encode(uint32_t corr_id, uint64_t enter_ns, uint64_t exit_ns)
{
  uint64_t dur = exit_ns > enter_ns ? exit_ns - enter_ns : 0; /* a clock step back: 0 */

  if (dur <= EXIT_DUR_MASK)
    return EXIT_VALID | exit_tag(corr_id) | dur;
  dur /= 1000;
  return EXIT_VALID | EXIT_MICROS | exit_tag(corr_id) |
         (dur <= EXIT_DUR_MASK ? dur : EXIT_DUR_MASK);
}

/* The exit time a word stores for corr_id, or 0 (open, or another call's word). */
static uint64_t exit_decode(uint64_t word, uint32_t corr_id, uint64_t enter_ns)
{
  uint64_t dur = word & EXIT_DUR_MASK;

  if (!(word & EXIT_VALID) || (word & (EXIT_TAG_MASK << EXIT_TAG_SHIFT)) != exit_tag(corr_id))
    return 0;
  return enter_ns + (word & EXIT_MICROS ? dur * 1000 : dur);
}

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
  /*
   * Anonymous zeroed pages, populated now: CUPTI ids walk the whole ring within the first
   * `size` API calls anyway (seconds in any real workload), and faulting its pages in then
   * costs the application thread a page fault every ~70 calls (about 1,800 in all for the
   * default 7 MiB). At init it is a few milliseconds once, inside cuInit.
   */
  mem = mmap(NULL, t->map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
             -1, 0);
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
  atomic_store_explicit(&s->exit_word, 0, RELAXED);
  slot_unlock(s, (uint32_t)seq);
}

void corr_table_exit(struct corr_table *t, uint32_t corr_id, uint64_t exit_ns)
{
  struct corr_slot *s = &t->slots[corr_id & t->mask];
  uint64_t enter_ns;

  /* The slot was written by this thread at ENTER, unless that write was skipped (collision)
   * or a newer call has taken it since: then the id differs, or the tag makes the word void. */
  if (atomic_load_explicit(&s->corr_id, RELAXED) != corr_id)
    return;
  enter_ns = atomic_load_explicit(&s->enter_ns, RELAXED);
  atomic_store_explicit(&s->exit_word, exit_encode(corr_id, enter_ns, exit_ns), RELAXED);
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
    uint64_t exit_word;

    if (seq1 & 1)
      continue;
    out->corr_id = atomic_load_explicit(&s->corr_id, RELAXED);
    out->parent_corr_id = atomic_load_explicit(&s->parent_corr_id, RELAXED);
    out->tid = atomic_load_explicit(&s->tid, RELAXED);
    meta = atomic_load_explicit(&s->meta, RELAXED);
    out->api_name = (const char *)atomic_load_explicit(&s->api_name, RELAXED);
    out->enter_ns = atomic_load_explicit(&s->enter_ns, RELAXED);
    exit_word = atomic_load_explicit(&s->exit_word, RELAXED);
    out->stack_id = atomic_load_explicit(&s->stack_id, RELAXED);
    out->weight = atomic_load_explicit(&s->weight, RELAXED);
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load_explicit(&s->seq, RELAXED) != seq1)
      continue;
    out->cbid = (uint16_t)(meta >> 8);
    out->domain = (uint8_t)(meta & 0xff);
    out->exit_ns = exit_decode(exit_word, out->corr_id, out->enter_ns);
    return out->corr_id == corr_id ? 0 : -ENOENT;
  }
  return -ENOENT;
}
