/* Joins device events to their API calls and aggregates them into the capture summary's counters.
 */
#define LOG_MODULE "aggregate"
#include "agent/aggregate.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "agent/corr.h"
#include "agent/ctx_map.h"
#include "agent/graph_map.h"
#include "agent/util/hash.h"
#include "agent/util/log.h"

#define UNKNOWN_API "?"

/* Open-addressing set of pointers, keyed by a 64-bit hash the caller computes. Grows at 1/2. */
struct ptr_table {
  void **slots;
  uint64_t *hashes;
  size_t cap, used;
};

struct api_name {
  const char *function_name; /* CUPTI's pointer (the key) */
  char base[];               /* without the _vNNNN suffix */
};

struct aggregate {
  pthread_mutex_t lock;
  struct corr_table *corr;
  struct agg_totals totals;
  struct ptr_table kernels;       /* struct agg_kernel *, by name */
  struct ptr_table streams;       /* struct agg_stream *, by key */
  struct ptr_table apis;          /* struct api_name *, by function-name pointer */
  struct ptr_table stack_kernels; /* struct agg_stack_kernel *, by (stack, kernel) */
  struct ptr_table stack_copies;  /* struct agg_stack_copy *, by stack */
  /* Kernel lookups by CUPTI's name pointer: CUPTI shares one string per function, so the
   * pointer finds the entry without hashing ~100-character mangled names per record; the
   * strcmp guards against a pointer reused by another module's name after an unload. */
  struct {
    const char *name;
    struct agg_kernel *kernel;
  } kernel_cache[256];
  int oom_warned;
};

static int ptr_table_init(struct ptr_table *t)
{
  t->cap = 64;
  t->used = 0;
  t->slots = calloc(t->cap, sizeof(*t->slots));
  t->hashes = calloc(t->cap, sizeof(*t->hashes));
  return t->slots && t->hashes ? 0 : -1;
}

static void ptr_table_destroy(struct ptr_table *t, void (*free_item)(void *))
{
  if (free_item)
    for (size_t i = 0; i < t->cap; i++)
      if (t->slots && t->slots[i])
        free_item(t->slots[i]);
  free(t->slots);
  free(t->hashes);
}

typedef int (*ptr_match_fn)(const void *item, const void *key);

static void *ptr_table_find(const struct ptr_table *t, uint64_t h, ptr_match_fn match,
                            const void *key)
{
  for (size_t i = h & (t->cap - 1);; i = (i + 1) & (t->cap - 1)) {
    if (!t->slots[i])
      return NULL;
    if (t->hashes[i] == h && match(t->slots[i], key))
      return t->slots[i];
  }
}

static int ptr_table_insert(struct ptr_table *t, uint64_t h, void *item)
{
  if ((t->used + 1) * 2 > t->cap) {
    size_t cap = t->cap * 2;
    void **slots = calloc(cap, sizeof(*slots));
    uint64_t *hashes = calloc(cap, sizeof(*hashes));
    if (!slots || !hashes) {
      free(slots);
      free(hashes);
      return -1;
    }
    for (size_t i = 0; i < t->cap; i++) {
      if (!t->slots[i])
        continue;
      size_t j = t->hashes[i] & (cap - 1);
      while (slots[j])
        j = (j + 1) & (cap - 1);
      slots[j] = t->slots[i];
      hashes[j] = t->hashes[i];
    }
    free(t->slots);
    free(t->hashes);
    t->slots = slots;
    t->hashes = hashes;
    t->cap = cap;
  }
  size_t i = h & (t->cap - 1);
  while (t->slots[i])
    i = (i + 1) & (t->cap - 1);
  t->slots[i] = item;
  t->hashes[i] = h;
  t->used++;
  return 0;
}

static void free_kernel(void *p)
{
  struct agg_kernel *k = p;
  free((void *)k->name);
  free(k->apis);
  free(k->streams);
  free(k);
}

struct aggregate *aggregate_new(struct corr_table *corr)
{
  struct aggregate *a = calloc(1, sizeof(*a));

  if (!a)
    return NULL;
  a->corr = corr;
  if (ptr_table_init(&a->kernels) || ptr_table_init(&a->streams) || ptr_table_init(&a->apis) ||
      ptr_table_init(&a->stack_kernels) || ptr_table_init(&a->stack_copies)) {
    aggregate_free(a);
    return NULL;
  }
  pthread_mutex_init(&a->lock, NULL);
  return a;
}

void aggregate_free(struct aggregate *a)
{
  if (!a)
    return;
  ptr_table_destroy(&a->kernels, free_kernel);
  ptr_table_destroy(&a->streams, free);
  ptr_table_destroy(&a->apis, free);
  ptr_table_destroy(&a->stack_kernels, free);
  ptr_table_destroy(&a->stack_copies, free);
  pthread_mutex_destroy(&a->lock);
  free(a);
}

void aggregate_lock(struct aggregate *a)
{
  pthread_mutex_lock(&a->lock);
}

void aggregate_unlock(struct aggregate *a)
{
  pthread_mutex_unlock(&a->lock);
}

const struct agg_totals *aggregate_totals(struct aggregate *a)
{
  return &a->totals;
}

void aggregate_api_base_name(const char *function_name, char *buf, size_t len)
{
  size_t n = strlen(function_name);
  size_t end = n;

  /* Strip a trailing "_v" followed by digits only ("_v7000", "_v2"). */
  while (end > 0 && function_name[end - 1] >= '0' && function_name[end - 1] <= '9')
    end--;
  if (end < n && end >= 2 && function_name[end - 1] == 'v' && function_name[end - 2] == '_')
    n = end - 2;
  if (n >= len)
    n = len - 1;
  memcpy(buf, function_name, n);
  buf[n] = '\0';
}

const char *aggregate_copy_kind_name(unsigned copy_kind)
{
  static const char *const names[EVENT_COPY_KIND_COUNT] = {
      "unknown", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA", "AtoD", "DtoA", "DtoD", "HtoH", "PtoP",
  };
  return copy_kind < EVENT_COPY_KIND_COUNT ? names[copy_kind] : NULL;
}

static void warn_oom(struct aggregate *a)
{
  if (!a->oom_warned) {
    a->oom_warned = 1;
    log_warn("out of memory while aggregating; some kernels are missing from the summary");
  }
}

static int match_api(const void *item, const void *key)
{
  return ((const struct api_name *)item)->function_name == key;
}

/* The stripped API name, cached per CUPTI name pointer (they are global constants). */
static const char *api_base(struct aggregate *a, const char *function_name)
{
  uint64_t h = hash_u64((uint64_t)(uintptr_t)function_name);
  struct api_name *e;
  size_t n;

  if (!function_name)
    return UNKNOWN_API;
  e = ptr_table_find(&a->apis, h, match_api, function_name);
  if (e)
    return e->base;
  n = strlen(function_name) + 1;
  e = malloc(sizeof(*e) + n);
  if (!e)
    return UNKNOWN_API;
  e->function_name = function_name;
  aggregate_api_base_name(function_name, e->base, n);
  if (ptr_table_insert(&a->apis, h, e)) {
    free(e);
    return UNKNOWN_API;
  }
  return e->base;
}

static int match_kernel(const void *item, const void *key)
{
  return !strcmp(((const struct agg_kernel *)item)->name, key);
}

static struct agg_kernel *kernel_get(struct aggregate *a, const char *name)
{
  size_t slot =
      hash_u64((uint64_t)(uintptr_t)name) % (sizeof(a->kernel_cache) / sizeof(a->kernel_cache[0]));
  struct agg_kernel *k = a->kernel_cache[slot].kernel;
  uint64_t h;

  if (k && a->kernel_cache[slot].name == name && !strcmp(k->name, name))
    return k;
  h = hash_str(name);
  k = ptr_table_find(&a->kernels, h, match_kernel, name);
  if (k)
    goto cache;
  k = calloc(1, sizeof(*k));
  if (!k || !(k->name = strdup(name)) || ptr_table_insert(&a->kernels, h, k)) {
    if (k)
      free((void *)k->name);
    free(k);
    return NULL;
  }
cache:
  a->kernel_cache[slot].name = name;
  a->kernel_cache[slot].kernel = k;
  return k;
}

static uint64_t stream_hash(const struct agg_stream_key *k)
{
  return hash_u64(((uint64_t)k->device << 48) ^ ((uint64_t)k->context << 24) ^ k->stream);
}

static int match_stream(const void *item, const void *key)
{
  const struct agg_stream_key *a = &((const struct agg_stream *)item)->key, *b = key;
  return a->device == b->device && a->context == b->context && a->stream == b->stream;
}

static struct agg_stream *stream_get(struct aggregate *a, const struct event *ev)
{
  struct agg_stream_key key = {ev->device, ev->context, ev->stream};
  uint64_t h = stream_hash(&key);
  struct agg_stream *s = ptr_table_find(&a->streams, h, match_stream, &key);

  if (s)
    return s;
  s = calloc(1, sizeof(*s));
  if (!s || ptr_table_insert(&a->streams, h, s)) {
    free(s);
    return NULL;
  }
  s->key = key;
  return s;
}

/* Small per-kernel lists: a handful of APIs and streams per kernel name in practice. */
static void kernel_add_api(struct aggregate *a, struct agg_kernel *k, const char *api)
{
  for (uint32_t i = 0; i < k->n_apis; i++) {
    if (k->apis[i].api == api || !strcmp(k->apis[i].api, api)) {
      k->apis[i].count++;
      return;
    }
  }
  if (k->n_apis == k->cap_apis) {
    uint32_t cap = k->cap_apis ? k->cap_apis * 2 : 2;
    void *p = realloc(k->apis, cap * sizeof(*k->apis));
    if (!p) {
      warn_oom(a);
      return;
    }
    k->apis = p;
    k->cap_apis = cap;
  }
  k->apis[k->n_apis].api = api;
  k->apis[k->n_apis].count = 1;
  k->n_apis++;
}

static void kernel_add_stream(struct aggregate *a, struct agg_kernel *k, const struct event *ev)
{
  for (uint32_t i = 0; i < k->n_streams; i++)
    if (k->streams[i].device == ev->device && k->streams[i].context == ev->context &&
        k->streams[i].stream == ev->stream)
      return;
  if (k->n_streams == k->cap_streams) {
    uint32_t cap = k->cap_streams ? k->cap_streams * 2 : 2;
    void *p = realloc(k->streams, cap * sizeof(*k->streams));
    if (!p) {
      warn_oom(a);
      return;
    }
    k->streams = p;
    k->cap_streams = cap;
  }
  k->streams[k->n_streams++] = (struct agg_stream_key){ev->device, ev->context, ev->stream};
}

/*
 * The join: kernels, memsets and memory records by correlationId; memcpys by their runtime
 * correlation id when it is set and known (the user-visible call), else by the driver one.
 * A call nested in another on its thread (a driver call inside a runtime call, if CUPTI
 * reports those: cupti/subscriber.c) stands for its outermost call, the one the user made,
 * whichever id CUPTI put on the record. Returns the API's base name, or "?" (counted as
 * unknown) when the call was not seen.
 */
static const char *join(struct aggregate *a, const struct event *ev, struct corr_info *info)
{
  int found = -1;

  if (ev->kind == EVENT_MEMCPY && ev->runtime_corr_id)
    found = corr_table_lookup(a->corr, ev->runtime_corr_id, info);
  if (found != 0)
    found = corr_table_lookup(a->corr, ev->corr_id, info);
  if (found != 0) {
    memset(info, 0, sizeof(*info));
    a->totals.joins_unknown++;
    return UNKNOWN_API;
  }
  if (info->parent_corr_id) {
    struct corr_info outer;
    /* Gone only if the ring wrapped while the outer call was open: keep the nested one. */
    if (corr_table_lookup(a->corr, info->parent_corr_id, &outer) == 0)
      *info = outer;
  }
  if (info->domain == CORR_DOMAIN_RUNTIME)
    a->totals.joins_runtime++;
  else
    a->totals.joins_driver++;
  return api_base(a, info->api_name);
}

static uint64_t stack_kernel_hash(uint32_t stack_id, const struct agg_kernel *k)
{
  return hash_u64((uint64_t)stack_id << 32 ^ (uint64_t)(uintptr_t)k);
}

struct stack_kernel_key {
  uint32_t stack_id;
  const struct agg_kernel *kernel;
};

static int match_stack_kernel(const void *item, const void *key)
{
  const struct agg_stack_kernel *e = item;
  const struct stack_kernel_key *k = key;
  return e->stack_id == k->stack_id && e->kernel == k->kernel;
}

static int match_stack_copy(const void *item, const void *key)
{
  return ((const struct agg_stack_copy *)item)->stack_id == *(const uint32_t *)key;
}

/* Weighted by the sample period: the estimate of the kernel's launches from this stack. */
static void add_stack_kernel(struct aggregate *a, const struct corr_info *info,
                             const struct agg_kernel *k, uint64_t dur)
{
  struct stack_kernel_key key = {info->stack_id, k};
  uint64_t h = stack_kernel_hash(info->stack_id, k);
  struct agg_stack_kernel *e;

  if (!info->stack_id || !k) {
    a->totals.kernels_without_stack++;
    a->totals.kernel_time_without_stack_ns += dur;
    return;
  }
  e = ptr_table_find(&a->stack_kernels, h, match_stack_kernel, &key);
  if (!e) {
    e = calloc(1, sizeof(*e));
    if (!e || ptr_table_insert(&a->stack_kernels, h, e)) {
      free(e);
      warn_oom(a);
      return;
    }
    e->stack_id = info->stack_id;
    e->kernel = k;
  }
  e->samples++;
  e->launches += info->weight;
  e->gpu_time_ns += dur * info->weight;
}

static void add_stack_copy(struct aggregate *a, const struct corr_info *info, uint64_t bytes,
                           uint64_t dur)
{
  uint64_t h = hash_u64(info->stack_id);
  struct agg_stack_copy *e;

  if (!info->stack_id) {
    a->totals.memcpys_without_stack++;
    a->totals.memcpy_bytes_without_stack += bytes;
    return;
  }
  e = ptr_table_find(&a->stack_copies, h, match_stack_copy, &info->stack_id);
  if (!e) {
    e = calloc(1, sizeof(*e));
    if (!e || ptr_table_insert(&a->stack_copies, h, e)) {
      free(e);
      warn_oom(a);
      return;
    }
    e->stack_id = info->stack_id;
  }
  e->count += info->weight;
  e->bytes += bytes * info->weight;
  e->gpu_time_ns += dur * info->weight;
}

/* The call a record's stack comes from: for a replayed graph node whose creation was seen,
 * the capture-time stack, each record counted once (agent/graph_map.h, docs/PROFILES.md);
 * otherwise the joined call. The joined call still names the API (the graph launch). */
static const struct corr_info *stack_source(const struct event *ev, const struct corr_info *info,
                                            struct corr_info *graph)
{
  uint32_t stack_id = graph_map_lookup(ev->graph_node_id);

  if (!stack_id)
    return info;
  *graph = *info;
  graph->stack_id = stack_id;
  graph->weight = 1;
  return graph;
}

static void widen_window(struct aggregate *a, const struct event *ev)
{
  if (ev->flags & EVENT_F_NO_TIMING || !ev->start_ns)
    return;
  if (!a->totals.window_start_ns || ev->start_ns < a->totals.window_start_ns)
    a->totals.window_start_ns = ev->start_ns;
  if (ev->end_ns > a->totals.window_end_ns)
    a->totals.window_end_ns = ev->end_ns;
}

static uint64_t duration(const struct event *ev)
{
  return ev->flags & EVENT_F_NO_TIMING ? 0 : ev->end_ns - ev->start_ns;
}

int aggregate_event(struct aggregate *a, const struct event *ev, struct corr_info *api_out)
{
  struct agg_totals *t = &a->totals;
  const char *api;
  struct agg_kernel *k;
  struct agg_stream *s;
  struct corr_info info, graph;

  memset(&info, 0, sizeof(info));

  pthread_mutex_lock(&a->lock);
  switch (ev->kind) {
  case EVENT_KERNEL:
    api = join(a, ev, &info);
    widen_window(a, ev);
    t->kernels++;
    t->kernel_time_ns += duration(ev);
    k = kernel_get(a, ev->u.kernel.name ? ev->u.kernel.name : "?");
    if (k) {
      k->count++;
      k->gpu_time_ns += duration(ev);
      kernel_add_api(a, k, api);
      kernel_add_stream(a, k, ev);
    } else {
      warn_oom(a);
    }
    add_stack_kernel(a, stack_source(ev, &info, &graph), k, duration(ev));
    if ((s = stream_get(a, ev)))
      s->kernels++;
    break;
  case EVENT_MEMCPY: {
    struct agg_bucket *b =
        &t->memcpy[ev->u.memcpy.copy_kind < EVENT_COPY_KIND_COUNT ? ev->u.memcpy.copy_kind : 0];
    join(a, ev, &info);
    add_stack_copy(a, stack_source(ev, &info, &graph), ev->u.memcpy.bytes, duration(ev));
    widen_window(a, ev);
    b->count++;
    b->bytes += ev->u.memcpy.bytes;
    b->gpu_time_ns += duration(ev);
    if ((s = stream_get(a, ev)))
      s->memcpys++;
    break;
  }
  case EVENT_MEMSET:
    join(a, ev, &info);
    widen_window(a, ev);
    t->memset.count++;
    t->memset.bytes += ev->u.memset.bytes;
    t->memset.gpu_time_ns += duration(ev);
    if ((s = stream_get(a, ev)))
      s->memsets++;
    break;
  case EVENT_MEMORY:
    join(a, ev, &info);
    widen_window(a, ev);
    t->memory_records++;
    break;
  case EVENT_MEMORY_POOL:
    t->pool_records++;
    break;
  case EVENT_SYNC:
    widen_window(a, ev);
    t->syncs++;
    t->sync_time_ns += duration(ev);
    break;
  case EVENT_OVERHEAD:
    t->overhead_records++;
    break;
  case EVENT_DEVICE:
    t->devices_seen++;
    break;
  case EVENT_CONTEXT:
    t->contexts_seen++;
    ctx_map_set(ev->context, (int32_t)ev->device);
    break;
  case EVENT_STREAM:
    t->streams_created++;
    break;
  default:
    break;
  }
  pthread_mutex_unlock(&a->lock);
  if (api_out)
    *api_out = info;
  return info.corr_id != 0;
}

/* ---- sorted views ---- */

static int cmp_kernel(const void *x, const void *y)
{
  const struct agg_kernel *a = *(const struct agg_kernel *const *)x,
                          *b = *(const struct agg_kernel *const *)y;
  if (a->gpu_time_ns != b->gpu_time_ns)
    return a->gpu_time_ns > b->gpu_time_ns ? -1 : 1;
  return strcmp(a->name, b->name);
}

static int cmp_api(const void *x, const void *y)
{
  return strcmp(((const struct agg_api_count *)x)->api, ((const struct agg_api_count *)y)->api);
}

static int cmp_key(const struct agg_stream_key *a, const struct agg_stream_key *b)
{
  if (a->device != b->device)
    return a->device < b->device ? -1 : 1;
  if (a->context != b->context)
    return a->context < b->context ? -1 : 1;
  if (a->stream != b->stream)
    return a->stream < b->stream ? -1 : 1;
  return 0;
}

static int cmp_stream_key(const void *x, const void *y)
{
  return cmp_key(x, y);
}

static int cmp_stream(const void *x, const void *y)
{
  return cmp_key(&(*(const struct agg_stream *const *)x)->key,
                 &(*(const struct agg_stream *const *)y)->key);
}

static size_t collect(struct ptr_table *t, void ***out)
{
  size_t n = 0;

  *out = NULL;
  if (!t->used)
    return 0;
  *out = malloc(t->used * sizeof(void *));
  if (!*out)
    return 0;
  for (size_t i = 0; i < t->cap; i++)
    if (t->slots[i])
      (*out)[n++] = t->slots[i];
  return n;
}

size_t aggregate_kernels_sorted(struct aggregate *a, struct agg_kernel ***out)
{
  size_t n = collect(&a->kernels, (void ***)out);

  for (size_t i = 0; i < n; i++) {
    struct agg_kernel *k = (*out)[i];
    qsort(k->apis, k->n_apis, sizeof(*k->apis), cmp_api);
    qsort(k->streams, k->n_streams, sizeof(*k->streams), cmp_stream_key);
  }
  if (n)
    qsort(*out, n, sizeof(**out), cmp_kernel);
  return n;
}

size_t aggregate_streams_sorted(struct aggregate *a, struct agg_stream ***out)
{
  size_t n = collect(&a->streams, (void ***)out);

  if (n)
    qsort(*out, n, sizeof(**out), cmp_stream);
  return n;
}

static int cmp_stack_kernel(const void *x, const void *y)
{
  const struct agg_stack_kernel *a = *(const struct agg_stack_kernel *const *)x,
                                *b = *(const struct agg_stack_kernel *const *)y;
  if (a->gpu_time_ns != b->gpu_time_ns)
    return a->gpu_time_ns > b->gpu_time_ns ? -1 : 1;
  if (a->stack_id != b->stack_id)
    return a->stack_id < b->stack_id ? -1 : 1;
  return strcmp(a->kernel->name, b->kernel->name);
}

static int cmp_stack_copy(const void *x, const void *y)
{
  const struct agg_stack_copy *a = *(const struct agg_stack_copy *const *)x,
                              *b = *(const struct agg_stack_copy *const *)y;
  if (a->bytes != b->bytes)
    return a->bytes > b->bytes ? -1 : 1;
  return a->stack_id < b->stack_id ? -1 : a->stack_id > b->stack_id;
}

size_t aggregate_stack_kernels_sorted(struct aggregate *a, struct agg_stack_kernel ***out)
{
  size_t n = collect(&a->stack_kernels, (void ***)out);

  if (n)
    qsort(*out, n, sizeof(**out), cmp_stack_kernel);
  return n;
}

size_t aggregate_stack_copies_sorted(struct aggregate *a, struct agg_stack_copy ***out)
{
  size_t n = collect(&a->stack_copies, (void ***)out);

  if (n)
    qsort(*out, n, sizeof(**out), cmp_stack_copy);
  return n;
}
