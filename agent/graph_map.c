/* CUDA graph node id -> the host stack of the call that created the node (capture time). */
#define LOG_MODULE "graphs"
#include "agent/graph_map.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>

#include "agent/util/hash.h"
#include "agent/util/log.h"

#define FIRST_SLOTS 4096u /* 64 KiB: a typical captured graph has a few hundred nodes */

struct slot {
  uint64_t key; /* node id, 0 = empty */
  uint32_t stack;
  uint32_t pad;
};

struct table {
  size_t cap; /* slots, a power of two */
  struct slot slots[];
};

struct graph_map {
  pthread_mutex_t lock;
  struct table *cur, *old; /* this generation's entries, and the previous one's */
  size_t gen_max;          /* entries a generation holds: half the bound */
  size_t used, old_used, old_promoted;
  _Atomic uint64_t nodes, drops, clones;
  int warned;
};

static size_t table_bytes(size_t cap)
{
  return sizeof(struct table) + cap * sizeof(struct slot);
}

/* Anonymous mappings are zero-filled, so every slot starts empty; pages are committed as
 * slots are touched. */
static struct table *table_new(size_t cap)
{
  struct table *t = mmap(NULL, table_bytes(cap), PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

  if (t == MAP_FAILED)
    return NULL;
  t->cap = cap;
  return t;
}

/* The slot holding key, or the empty slot where it would go. Tables are never full (a
 * table is replaced at half load), so the probe ends. */
static struct slot *probe(const struct table *t, uint64_t key)
{
  size_t mask = t->cap - 1;
  size_t i = (size_t)hash_u64(key) & mask;

  for (;; i = (i + 1) & mask) {
    struct slot *s = (struct slot *)&t->slots[i];
    if (s->key == key || s->key == 0)
      return s;
  }
}

struct graph_map *graph_map_new(size_t max_nodes)
{
  struct graph_map *m;

  if (!max_nodes)
    return NULL;
  m = mmap(NULL, sizeof(*m), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED)
    return NULL;
  pthread_mutex_init(&m->lock, NULL);
  m->gen_max = max_nodes > 1 ? max_nodes / 2 : 1;
  return m;
}

static void table_free(struct table *t)
{
  if (t)
    munmap(t, table_bytes(t->cap));
}

void graph_map_free(struct graph_map *m)
{
  if (!m)
    return;
  table_free(m->cur);
  table_free(m->old);
  pthread_mutex_destroy(&m->lock);
  munmap(m, sizeof(*m));
}

/*
 * Under m->lock, when this generation is full: the previous generation is forgotten (the
 * nodes in it that were neither created nor replayed since, i.e. not promoted: counted as
 * drops) and this one becomes the previous one. A graph that is still replayed keeps its
 * nodes, whatever number of graphs are made and destroyed around it.
 */
static void rotate(struct graph_map *m)
{
  size_t evicted = m->old_used - m->old_promoted;

  if (evicted) {
    atomic_fetch_add_explicit(&m->drops, evicted, memory_order_relaxed);
    if (!m->warned) {
      m->warned = 1;
      log_warn("more than %zu CUDA graph nodes made since nodes that are no longer replayed "
               "were last forgotten: forgetting %zu more (their kernels, if replayed again, "
               "are attributed to the graph launch's stack)",
               m->gen_max, evicted);
    }
  }
  table_free(m->old);
  m->old = m->cur;
  m->old_used = m->used;
  m->old_promoted = 0;
  m->cur = NULL;
  m->used = 0;
}

/* Under m->lock: a table with room for one more entry at most half full. */
static struct table *writable_table(struct graph_map *m)
{
  struct table *t = m->cur;
  struct table *n;

  if (t && (m->used + 1) * 2 <= t->cap)
    return t;
  n = table_new(t ? t->cap * 2 : FIRST_SLOTS);
  if (!n)
    return NULL;
  for (size_t i = 0; t && i < t->cap; i++)
    if (t->slots[i].key)
      *probe(n, t->slots[i].key) = t->slots[i];
  if (t)
    munmap(t, table_bytes(t->cap));
  m->cur = n;
  return n;
}

static int set_locked(struct graph_map *m, uint64_t node_id, uint32_t stack_id);

/* Under m->lock. A node found in the previous generation is promoted to this one. */
static uint32_t get_locked(struct graph_map *m, uint64_t node_id)
{
  struct slot *s;
  uint32_t stack;

  if (m->cur && (s = probe(m->cur, node_id))->key == node_id)
    return s->stack;
  if (!m->old || (s = probe(m->old, node_id))->key != node_id)
    return 0;
  stack = s->stack;
  if (!s->pad) {
    s->pad = 1; /* promoted: not counted as evicted when its generation goes */
    m->old_promoted++;
  }
  set_locked(m, node_id, stack);
  return stack;
}

/* Under m->lock. */
static int set_locked(struct graph_map *m, uint64_t node_id, uint32_t stack_id)
{
  struct table *t = m->cur;
  struct slot *s;

  if (t && (s = probe(t, node_id))->key) {
    s->stack = stack_id;
    return 0;
  }
  if (m->used >= m->gen_max)
    rotate(m);
  if (!(t = writable_table(m))) {
    atomic_fetch_add_explicit(&m->drops, 1, memory_order_relaxed);
    return -ENOMEM;
  }
  s = probe(t, node_id);
  s->stack = stack_id;
  s->key = node_id;
  m->used++;
  atomic_fetch_add_explicit(&m->nodes, 1, memory_order_relaxed);
  return 0;
}

int graph_map_set(struct graph_map *m, uint64_t node_id, uint32_t stack_id)
{
  int ret;

  if (!m || !node_id || !stack_id)
    return -EINVAL;
  pthread_mutex_lock(&m->lock);
  ret = set_locked(m, node_id, stack_id);
  pthread_mutex_unlock(&m->lock);
  return ret;
}

int graph_map_clone(struct graph_map *m, uint64_t original_id, uint64_t clone_id)
{
  uint32_t stack;
  int ret;

  if (!m || !original_id || !clone_id)
    return -EINVAL;
  pthread_mutex_lock(&m->lock);
  stack = get_locked(m, original_id);
  ret = stack ? set_locked(m, clone_id, stack) : -ENOENT;
  if (ret == 0)
    atomic_fetch_add_explicit(&m->clones, 1, memory_order_relaxed);
  pthread_mutex_unlock(&m->lock);
  return ret;
}

uint32_t graph_map_get(struct graph_map *m, uint64_t node_id)
{
  uint32_t stack;

  if (!m || !node_id)
    return 0;
  pthread_mutex_lock(&m->lock);
  stack = get_locked(m, node_id);
  pthread_mutex_unlock(&m->lock);
  return stack;
}

void graph_map_get_stats(const struct graph_map *m, struct graph_map_stats *out)
{
  struct graph_map *mm = (struct graph_map *)m;

  out->nodes = m ? atomic_load(&mm->nodes) : 0;
  out->drops = m ? atomic_load(&mm->drops) : 0;
  out->clones = m ? atomic_load(&mm->clones) : 0;
}

static _Atomic(struct graph_map *) global;
static pthread_once_t global_once = PTHREAD_ONCE_INIT;

static void global_init(void)
{
  struct graph_map *m = graph_map_new(GRAPH_MAP_MAX_NODES);

  if (!m)
    log_warn("cannot map the CUDA graph node table; graph kernels are attributed to the graph "
             "launch's stack");
  atomic_store_explicit(&global, m, memory_order_release);
}

struct graph_map *graph_map_global(void)
{
  pthread_once(&global_once, global_init);
  return atomic_load_explicit(&global, memory_order_acquire);
}

struct graph_map *graph_map_peek(void)
{
  return atomic_load_explicit(&global, memory_order_acquire);
}
