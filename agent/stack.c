/* The stack table: interns host call stacks into dense ids (a trace tree of (parent, frame)). */
#include "agent/stack.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "agent/util/hash.h"

#define NODE_LEAF 1u
#define INITIAL_INDEX_SLOTS 4096u
#define MAX_INDEXES 32

/* Written once under the mutex before its id is published; read after an acquire load of
 * that id, so the plain fields never race. flags is set later by any thread. */
struct node {
  uint64_t frame;
  uint32_t parent;
  _Atomic uint32_t flags;
};

struct index {
  uint32_t mask;
  uint32_t used;
  size_t map_len;
  _Atomic uint32_t ids[]; /* 0 = empty */
};

struct stack_table {
  struct node *nodes; /* nodes[0] unused; reserved for max_nodes + 1, committed as touched */
  size_t nodes_len;
  uint32_t max_nodes;
  size_t max_bytes;
  _Atomic uint32_t n_nodes;
  _Atomic(struct index *) index;
  struct index *indexes[MAX_INDEXES]; /* every index built, freed with the table */
  int n_indexes;
  _Atomic uint64_t index_bytes;
  pthread_mutex_t lock; /* adding nodes only */
  _Atomic uint64_t stacks, interned, drops;
};

#define RELAXED memory_order_relaxed

/* Bytes a node costs at most: itself, and its index slots in the worst case (load just over
 * 1/4 after a doubling) summed over the current and all earlier indexes (a geometric 2x). */
#define BYTES_PER_NODE (sizeof(struct node) + 4 * sizeof(uint32_t) * 2)

static uint64_t key_hash(uint32_t parent, uint64_t frame)
{
  return hash_u64(frame ^ ((uint64_t)parent * 0x9e3779b97f4a7c15ull));
}

static struct index *index_new(uint32_t slots)
{
  size_t len = sizeof(struct index) + (size_t)slots * sizeof(uint32_t);
  struct index *ix = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

  if (ix == MAP_FAILED)
    return NULL;
  ix->mask = slots - 1;
  ix->map_len = len;
  return ix;
}

struct stack_table *stack_table_new(size_t max_bytes)
{
  struct stack_table *t;
  struct index *ix;
  void *mem;

  if (max_bytes < (64u << 10))
    max_bytes = 64u << 10;
  t = calloc(1, sizeof(*t));
  if (!t)
    return NULL;
  t->max_bytes = max_bytes;
  t->max_nodes =
      (uint32_t)((max_bytes / BYTES_PER_NODE) > 0x7fffffffu ? 0x7fffffffu
                                                            : max_bytes / BYTES_PER_NODE);
  t->nodes_len = ((size_t)t->max_nodes + 1) * sizeof(struct node);
  /* Reserved, not committed: pages are touched only as ids grow. */
  mem = mmap(NULL, t->nodes_len, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mem == MAP_FAILED) {
    free(t);
    return NULL;
  }
  t->nodes = mem;
  ix = index_new(INITIAL_INDEX_SLOTS);
  if (!ix) {
    munmap(mem, t->nodes_len);
    free(t);
    return NULL;
  }
  t->indexes[t->n_indexes++] = ix;
  atomic_store_explicit(&t->index_bytes, ix->map_len, RELAXED);
  atomic_init(&t->index, ix);
  pthread_mutex_init(&t->lock, NULL);
  return t;
}

void stack_table_free(struct stack_table *t)
{
  if (!t)
    return;
  for (int i = 0; i < t->n_indexes; i++)
    munmap(t->indexes[i], t->indexes[i]->map_len);
  munmap(t->nodes, t->nodes_len);
  pthread_mutex_destroy(&t->lock);
  free(t);
}

static uint32_t probe(const struct stack_table *t, const struct index *ix, uint64_t h,
                      uint32_t parent, uint64_t frame)
{
  for (uint32_t i = (uint32_t)h & ix->mask;; i = (i + 1) & ix->mask) {
    uint32_t id = atomic_load_explicit(&ix->ids[i], memory_order_acquire);
    if (!id)
      return 0;
    if (t->nodes[id].frame == frame && t->nodes[id].parent == parent)
      return id;
  }
}

static void index_put(struct index *ix, uint64_t h, uint32_t id)
{
  uint32_t i = (uint32_t)h & ix->mask;

  while (atomic_load_explicit(&ix->ids[i], RELAXED))
    i = (i + 1) & ix->mask;
  atomic_store_explicit(&ix->ids[i], id, memory_order_release);
  ix->used++;
}

/* Under the lock: a twice larger index with every node, published for new lookups. */
static struct index *grow(struct stack_table *t, struct index *old, uint32_t n)
{
  struct index *ix;

  if (t->n_indexes == MAX_INDEXES || !(ix = index_new((old->mask + 1) * 2)))
    return NULL;
  for (uint32_t id = 1; id <= n; id++)
    index_put(ix, key_hash(t->nodes[id].parent, t->nodes[id].frame), id);
  t->indexes[t->n_indexes++] = ix;
  atomic_fetch_add_explicit(&t->index_bytes, ix->map_len, RELAXED);
  atomic_store_explicit(&t->index, ix, memory_order_release);
  return ix;
}

/* The slow path: the node was not found without the lock. 0 when the table is full. */
static uint32_t add(struct stack_table *t, uint64_t h, uint32_t parent, uint64_t frame)
{
  struct index *ix;
  uint32_t id, n;

  pthread_mutex_lock(&t->lock);
  ix = atomic_load_explicit(&t->index, RELAXED);
  id = probe(t, ix, h, parent, frame); /* another thread may have added it meanwhile */
  if (id)
    goto out;
  n = atomic_load_explicit(&t->n_nodes, RELAXED);
  if (n >= t->max_nodes)
    goto out;
  if ((ix->used + 1) * 2 > ix->mask + 1 && !(ix = grow(t, ix, n)))
    goto out;
  id = n + 1;
  t->nodes[id].frame = frame;
  t->nodes[id].parent = parent;
  atomic_store_explicit(&t->n_nodes, id, memory_order_release);
  index_put(ix, h, id);
out:
  pthread_mutex_unlock(&t->lock);
  return id;
}

uint32_t stack_table_intern(struct stack_table *t, const uint64_t *frames, int n)
{
  struct index *ix = atomic_load_explicit(&t->index, memory_order_acquire);
  uint32_t id = 0;

  if (n <= 0)
    return STACK_ID_NONE;
  if (n > STACK_MAX_DEPTH)
    n = STACK_MAX_DEPTH;
  atomic_fetch_add_explicit(&t->interned, 1, RELAXED);
  for (int i = n - 1; i >= 0; i--) {
    uint64_t h = key_hash(id, frames[i]);
    uint32_t next = probe(t, ix, h, id, frames[i]);

    if (!next) {
      next = add(t, h, id, frames[i]);
      if (!next) {
        atomic_fetch_add_explicit(&t->drops, 1, RELAXED);
        return STACK_ID_NONE;
      }
      ix = atomic_load_explicit(&t->index, memory_order_acquire);
    }
    id = next;
  }
  if (!(atomic_load_explicit(&t->nodes[id].flags, RELAXED) & NODE_LEAF) &&
      !(atomic_fetch_or_explicit(&t->nodes[id].flags, NODE_LEAF, RELAXED) & NODE_LEAF))
    atomic_fetch_add_explicit(&t->stacks, 1, RELAXED);
  return id;
}

int stack_table_node(const struct stack_table *t, uint32_t id, uint64_t *frame, uint32_t *parent)
{
  if (id == 0 ||
      id > atomic_load_explicit(&((struct stack_table *)t)->n_nodes, memory_order_acquire))
    return -ENOENT;
  *frame = t->nodes[id].frame;
  *parent = t->nodes[id].parent;
  return 0;
}

int stack_table_get(const struct stack_table *t, uint32_t id, uint64_t *frames, int max)
{
  int n = 0;
  uint64_t frame;
  uint32_t parent;

  while (n < max && stack_table_node(t, id, &frame, &parent) == 0) {
    frames[n++] = frame;
    id = parent;
  }
  return n;
}

void stack_table_for_each(const struct stack_table *t,
                          void (*fn)(uint32_t id, uint32_t parent, uint64_t frame, void *arg),
                          void *arg)
{
  uint32_t n = atomic_load_explicit(&((struct stack_table *)t)->n_nodes, memory_order_acquire);

  for (uint32_t id = 1; id <= n; id++)
    fn(id, t->nodes[id].parent, t->nodes[id].frame, arg);
}

void stack_table_get_stats(const struct stack_table *t, struct stack_table_stats *out)
{
  struct stack_table *m = (struct stack_table *)t;

  out->nodes = atomic_load_explicit(&m->n_nodes, RELAXED);
  out->stacks = atomic_load_explicit(&m->stacks, RELAXED);
  out->bytes = out->nodes * sizeof(struct node) + atomic_load_explicit(&m->index_bytes, RELAXED);
  out->max_bytes = m->max_bytes;
  out->interned = atomic_load_explicit(&m->interned, RELAXED);
  out->drops = atomic_load_explicit(&m->drops, RELAXED);
}
