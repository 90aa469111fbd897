/* pprof windows: GPU time, GPU memory and memcpy profiles per time window, by host stack. */
#define LOG_MODULE "profiles"
#include "agent/profiles.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent/aggregate.h"
#include "agent/alloc_map.h"
#include "agent/config.h"
#include "agent/corr.h"
#include "agent/event.h"
#include "agent/graph_map.h"
#include "agent/nccl.h"
#include "agent/stack.h"
#include "agent/symbolize.h"
#include "agent/uploader.h"
#include "agent/util/clock.h"
#include "agent/util/hash.h"
#include "agent/util/fdwriter.h"
#include "agent/util/files.h"
#include "agent/util/log.h"
#include "agent/worker.h"
#include "export/pprof.h"

enum kind { KIND_GPU_TIME = 0, KIND_MEMORY, KIND_MEMCPY, KIND_NCCL };

#define MAX_VALUES 4
/* zlib's fastest level: on a 100 000-sample window it takes a third of level 6's time for
 * about 5% more bytes (docs/PERFORMANCE.md), and the worker has other work to do. */
#define PROFILES_GZIP_LEVEL 1
#define LEAF_MEMSET 100u /* memcpy profile: leaf codes are copy kinds, or this */
#define LEAF_PEER 101u
/* gpu_time/memcpy keys: the work ran as a replayed graph node and stack_id is the stack that
 * created the node (agent/graph_map.h); its samples get a "[cuda graph replay]" frame. */
#define KEY_AUX_GRAPH 1u
#define GRAPH_FRAME "[cuda graph replay]"

/* One sample being aggregated: leaf is the kernel name (CUPTI's pointer: it stays valid
 * until cuptiFinalize, which runs after the last window is written), the memcpy direction
 * code, or the allocation API's name pointer (a CUPTI constant). */
struct key {
  uint64_t leaf;
  uint32_t stack_id;
  int32_t device;
  uint32_t aux; /* memory: enum alloc_kind */
};

struct entry {
  struct key k;
  int64_t v[MAX_VALUES];
  int used;
};

struct table {
  struct entry *slots;
  size_t cap, used;
};

struct window {
  uint64_t start;
  int open;
  int memory_cut; /* the memory table holds the cut at this window's end */
  uint64_t late, overflow, represented;
  struct table t[PROFILES_KIND_COUNT];
};

/* What a native or Python frame resolved to, kept for the life of the worker. */
struct frame_info {
  uint64_t frame;
  const char *function; /* symbolizer-owned, or NULL */
  const char *file;
  int line;
  int python;
  int module; /* index in p->modules, -1 for none */
  uint64_t module_offset;
  uint64_t loc_epoch, loc_id;
};

struct module_info {
  const char *path; /* symbolizer-owned (stable) */
  uint64_t lo, hi, file_offset;
  char build_id[129];
  uint64_t map_epoch, map_id;
};

/* A leaf's location in the profile being built (one kernel, copy direction or API). */
struct leaf_slot {
  uint64_t leaf;
  uint32_t aux;
  uint64_t epoch, loc_id;
};

#define LEAF_CACHE 1024 /* direct-mapped: a collision only costs building the leaf again */

struct profiles {
  struct profiles_options o;
  char output_dir[PATH_MAX];
  char host[256];
  char name[320];      /* the process's part of file names */
  uint64_t exe_pc;     /* the main program's entry point: an address inside it */
  char stem[PATH_MAX]; /* o.file_stem's copy, "" without one */
  char path[PATH_MAX]; /* o.file_path's copy, "" without one */
  char comment[512];   /* o.comment's copy, "" without one */
  struct window w[2];  /* w[0] older than w[1] when both are open */
  struct symbolizer *sym;
  struct pprof_builder *b;
  uint64_t epoch; /* one per profile built: invalidates the cached location/mapping ids */
  struct frame_info *frames;
  size_t frames_cap, frames_used;
  struct module_info *modules;
  size_t n_modules, cap_modules;
  struct profiles_stats stats;
  uint64_t overflow_total;
  int warned_dir, warned_oom, warned_size;
  uint32_t *order, *order_tmp; /* slots of a table by stack, when a window is written */
  size_t order_cap;
  struct leaf_slot leaves[LEAF_CACHE];
  /* The `gpu` label's ids of the host (0) and devices 0 - 15 in the profile being built. */
  uint64_t dev_label[17], dev_label_epoch[17];
  /* The last stack's frame locations in the profile being built (stack_locations). */
  uint32_t stack_id;
  int stack_n;
  uint64_t stack_epoch, stack_locs[STACK_MAX_DEPTH];
  uint64_t graph_loc_epoch, graph_loc; /* GRAPH_FRAME's location in the profile being built */
};

static const char *const kind_names[PROFILES_KIND_COUNT] = {"gpu_time", "gpu_memory", "memcpy",
                                                            "nccl"};

const char *profiles_kind_name(int kind)
{
  return kind >= 0 && kind < PROFILES_KIND_COUNT ? kind_names[kind] : "?";
}

/* ---- per-window tables ---- */

static uint64_t key_hash(const struct key *k)
{
  return hash_u64(k->leaf ^ hash_u64((uint64_t)k->stack_id << 32 | (uint32_t)k->device) ^
                  (uint64_t)k->aux << 56);
}

static int key_eq(const struct key *a, const struct key *b)
{
  return a->leaf == b->leaf && a->stack_id == b->stack_id && a->device == b->device &&
         a->aux == b->aux;
}

static struct entry *table_probe(struct table *t, const struct key *k)
{
  size_t i = key_hash(k) & (t->cap - 1);

  while (t->slots[i].used && !key_eq(&t->slots[i].k, k))
    i = (i + 1) & (t->cap - 1);
  return &t->slots[i];
}

static int table_grow(struct table *t)
{
  size_t cap = t->cap ? t->cap * 2 : 256;
  struct entry *old = t->slots, *fresh = calloc(cap, sizeof(*fresh));
  size_t old_cap = t->cap;

  if (!fresh)
    return -ENOMEM;
  t->slots = fresh;
  t->cap = cap;
  for (size_t i = 0; i < old_cap; i++)
    if (old[i].used)
      *table_probe(t, &old[i].k) = old[i];
  free(old);
  return 0;
}

/*
 * The entry for k, created if needed. Past max_keys a new key loses its stack (it joins the
 * leaf-only entry of its leaf) and counts as overflow: values are never lost to the cap, and
 * leaf-only entries are few (kernels x devices). NULL only when out of memory.
 */
static struct entry *table_get(struct profiles *p, struct window *w, struct table *t, struct key k)
{
  struct entry *e;

  if (!t->cap && table_grow(t))
    return NULL;
  e = table_probe(t, &k);
  if (e->used)
    return e;
  if (k.stack_id && t->used >= p->o.max_keys) {
    w->overflow++;
    k.stack_id = STACK_ID_NONE;
    e = table_probe(t, &k);
    if (e->used)
      return e;
  }
  if ((t->used + 1) * 2 > t->cap) {
    if (table_grow(t))
      return NULL;
    e = table_probe(t, &k);
  }
  memset(e, 0, sizeof(*e));
  e->k = k;
  e->used = 1;
  t->used++;
  return e;
}

static void table_clear(struct table *t)
{
  if (t->used)
    memset(t->slots, 0, t->cap * sizeof(*t->slots));
  t->used = 0;
}

/* ---- windows ---- */

static void window_open(struct profiles *p, struct window *w, uint64_t start)
{
  for (int i = 0; i < PROFILES_KIND_COUNT; i++)
    table_clear(&w->t[i]);
  w->start = start;
  w->open = 1;
  w->memory_cut = 0;
  w->late = w->overflow = w->represented = 0;
  (void)p;
}

static void live_add(const struct alloc_count *c, void *arg)
{
  struct profiles *p = ((void **)arg)[0];
  struct window *w = ((void **)arg)[1];
  struct key k = {(uint64_t)(uintptr_t)c->api, c->stack_id, c->device, c->kind};
  struct entry *e = table_get(p, w, &w->t[KIND_MEMORY], k);

  if (!e) {
    p->stats.lost++;
    return;
  }
  e->v[2] += (int64_t)c->count;
  e->v[3] += (int64_t)c->bytes;
}

static void allocated_add(const struct alloc_count *c, void *arg)
{
  struct profiles *p = ((void **)arg)[0];
  struct window *w = ((void **)arg)[1];
  struct key k = {(uint64_t)(uintptr_t)c->api, c->stack_id, c->device, c->kind};
  struct entry *e = table_get(p, w, &w->t[KIND_MEMORY], k);

  if (!e) {
    p->stats.lost++;
    return;
  }
  e->v[0] += (int64_t)c->count;
  e->v[1] += (int64_t)c->bytes;
}

/*
 * The memory profile's one source is the live-allocation map, so the two halves agree by
 * construction: in-use is the map at the cut, allocated is what alloc_map_insert counted
 * since the previous cut, under the same lock (same sizes, stacks and APIs as the map, and
 * VMM and pinned memory too, which have no MEMORY2 records). The cut happens at the first
 * tick past the window's end, so an allocation made between the end and that tick (at most
 * a flush interval) belongs to the earlier window.
 */
static void window_cut_memory(struct profiles *p, struct window *w)
{
  void *arg[2] = {p, w};

  if (w->memory_cut)
    return;
  w->memory_cut = 1;
  if (p->o.allocs)
    w->overflow += alloc_map_window(p->o.allocs, live_add, allocated_add, arg);
}

/* ---- symbolization, cached per distinct frame ---- */

static int module_index(struct profiles *p, const struct sym_frame *f)
{
  size_t i;

  if (!f->mod || !f->module_path)
    return -1;
  for (i = 0; i < p->n_modules; i++)
    if (p->modules[i].path == f->module_path)
      return (int)i;
  if (p->n_modules == p->cap_modules) {
    size_t cap = p->cap_modules ? p->cap_modules * 2 : 16;
    void *m = realloc(p->modules, cap * sizeof(*p->modules));
    if (!m)
      return -1;
    p->modules = m;
    p->cap_modules = cap;
  }
  struct module_info *m = &p->modules[p->n_modules];
  memset(m, 0, sizeof(*m));
  m->path = f->module_path;
  m->lo = f->mod->lo;
  m->hi = f->mod->hi;
  m->file_offset = f->mod->file_offset;
  for (size_t j = 0; j < f->mod->build_id_len && j < 64; j++)
    snprintf(m->build_id + 2 * j, 3, "%02x", f->mod->build_id[j]);
  return (int)p->n_modules++;
}

static struct frame_info *frame_get(struct profiles *p, uint64_t frame)
{
  struct frame_info *fi;
  struct sym_frame f;
  size_t i;

  if ((p->frames_used + 1) * 2 > p->frames_cap) {
    size_t cap = p->frames_cap ? p->frames_cap * 2 : 1024;
    struct frame_info *fresh = calloc(cap, sizeof(*fresh));
    if (!fresh)
      return NULL;
    for (size_t j = 0; j < p->frames_cap; j++) {
      if (!p->frames[j].frame)
        continue;
      for (i = hash_u64(p->frames[j].frame) & (cap - 1); fresh[i].frame; i = (i + 1) & (cap - 1))
        ;
      fresh[i] = p->frames[j];
    }
    free(p->frames);
    p->frames = fresh;
    p->frames_cap = cap;
  }
  for (i = hash_u64(frame) & (p->frames_cap - 1); p->frames[i].frame;
       i = (i + 1) & (p->frames_cap - 1))
    if (p->frames[i].frame == frame)
      return &p->frames[i];
  fi = &p->frames[i];
  symbolizer_resolve(p->sym, frame, &f);
  fi->frame = frame;
  fi->function = f.function;
  fi->file = f.file;
  fi->line = f.line;
  fi->python = f.python;
  fi->module = f.python ? -1 : module_index(p, &f);
  fi->module_offset = f.module_offset;
  p->frames_used++;
  return fi;
}

static uint64_t mapping_of(struct profiles *p, int module)
{
  struct module_info *m;

  if (module < 0)
    return 0;
  m = &p->modules[module];
  if (m->map_epoch != p->epoch) {
    struct pprof_mapping pm = {
        m->lo, m->hi, m->file_offset, m->path, m->build_id[0] ? m->build_id : NULL, 1};
    m->map_id = pprof_builder_add_mapping(p->b, &pm);
    m->map_epoch = p->epoch;
  }
  return m->map_id;
}

/* A native frame's function name, or module+0xoffset, or the address (formatted into buf). */
static const char *frame_name(const struct profiles *p, const struct frame_info *fi, char *buf,
                              size_t len)
{
  if (fi->function)
    return fi->function;
  if (fi->module >= 0) {
    const char *path = p->modules[fi->module].path, *slash = strrchr(path, '/');
    snprintf(buf, len, "%s+0x%llx", slash ? slash + 1 : path,
             (unsigned long long)fi->module_offset);
  } else {
    snprintf(buf, len, "0x%llx", (unsigned long long)fi->frame);
  }
  return buf;
}

/* The location of a host frame in the profile being built (0 on failure). */
static uint64_t frame_location(struct profiles *p, uint64_t frame)
{
  struct frame_info *fi = frame_get(p, frame);
  char buf[512];
  const char *name;
  uint64_t fn, map;

  if (!fi)
    return 0;
  if (fi->loc_epoch == p->epoch)
    return fi->loc_id;
  if (fi->python) {
    fn = pprof_builder_function(p->b, fi->function ? fi->function : "?", NULL, fi->file, 0);
    fi->loc_id = pprof_builder_location(p->b, 0, 0, fn, fi->line);
  } else {
    map = mapping_of(p, fi->module);
    name = frame_name(p, fi, buf, sizeof(buf));
    fn = pprof_builder_function(p->b, name, name, NULL, 0);
    fi->loc_id = pprof_builder_location(p->b, map, frame, fn, 0);
  }
  fi->loc_epoch = p->epoch;
  return fi->loc_id;
}

/* The synthetic leaf: "[gpu] kernel", "[gpu] memcpy HtoD", or the allocation API. */
static const char *leaf_name(struct profiles *p, int kind, const struct key *k, char *buf,
                             size_t len)
{
  switch (kind) {
  case KIND_GPU_TIME:
    snprintf(buf, len, "[gpu] %s", symbolizer_demangle(p->sym, (const char *)(uintptr_t)k->leaf));
    break;
  case KIND_NCCL:
    snprintf(buf, len, "nccl:%s", (const char *)(uintptr_t)k->leaf);
    break;
  case KIND_MEMCPY:
    if (k->leaf == LEAF_MEMSET)
      snprintf(buf, len, "[gpu] memset");
    else if (k->leaf == LEAF_PEER)
      snprintf(buf, len, "[gpu] memcpy peer");
    else
      snprintf(buf, len, "[gpu] memcpy %s", aggregate_copy_kind_name((unsigned)k->leaf));
    break;
  default:
    if (k->leaf)
      aggregate_api_base_name((const char *)(uintptr_t)k->leaf, buf, len);
    else
      snprintf(buf, len, "%s", alloc_kind_name((enum alloc_kind)k->aux));
    break;
  }
  return buf;
}

/* ---- building and writing ---- */

static void set_types(struct pprof_builder *b, int kind)
{
  /* The last sample type names the profile in Pyroscope's /ingest (formats.md 2.2). */
  switch (kind) {
  case KIND_GPU_TIME:
    pprof_builder_add_sample_type(b, "launches", "count");
    pprof_builder_add_sample_type(b, "gpu_time", "nanoseconds");
    pprof_builder_set_period(b, "gpu_time", "nanoseconds", 1);
    pprof_builder_set_default_sample_type(b, "gpu_time");
    break;
  case KIND_MEMORY:
    pprof_builder_add_sample_type(b, "alloc_objects", "count");
    pprof_builder_add_sample_type(b, "alloc_space", "bytes");
    pprof_builder_add_sample_type(b, "inuse_objects", "count");
    pprof_builder_add_sample_type(b, "inuse_space", "bytes");
    pprof_builder_set_period(b, "space", "bytes", 1);
    pprof_builder_set_default_sample_type(b, "inuse_space");
    break;
  case KIND_NCCL:
    pprof_builder_add_sample_type(b, "nccl_ops", "count");
    pprof_builder_add_sample_type(b, "nccl_bytes", "bytes");
    pprof_builder_add_sample_type(b, "nccl_time", "nanoseconds");
    pprof_builder_set_period(b, "nccl_time", "nanoseconds", 1);
    pprof_builder_set_default_sample_type(b, "nccl_time");
    break;
  default:
    pprof_builder_add_sample_type(b, "memcpy_count", "count");
    pprof_builder_add_sample_type(b, "memcpy_time", "nanoseconds");
    pprof_builder_add_sample_type(b, "memcpy_bytes", "bytes");
    pprof_builder_set_period(b, "memcpy_bytes", "bytes", 1);
    pprof_builder_set_default_sample_type(b, "memcpy_bytes");
    break;
  }
}

static const int n_values[PROFILES_KIND_COUNT] = {2, 4, 3, 3};

/* The leaf's location, named once per profile: a window has few distinct leaves (kernels,
 * directions, APIs) but one sample per (stack, leaf, device). 0 on allocation failure. */
static uint64_t leaf_location(struct profiles *p, int kind, const struct key *k)
{
  struct leaf_slot *c = &p->leaves[hash_u64(k->leaf ^ (uint64_t)k->aux << 56) & (LEAF_CACHE - 1)];
  char buf[1024];
  const char *name;
  uint64_t loc;

  if (c->epoch == p->epoch && c->leaf == k->leaf && c->aux == k->aux)
    return c->loc_id;
  name = leaf_name(p, kind, k, buf, sizeof(buf));
  loc = pprof_builder_location(p->b, 0, 0, pprof_builder_function(p->b, name, name, NULL, 0), 0);
  if (loc)
    *c = (struct leaf_slot){k->leaf, k->aux, p->epoch, loc};
  return loc;
}

/* The id of the sample's `gpu` label ("host" or the device number), interned once per
 * profile for the host and the first 16 devices: formatting and interning it per sample took
 * a tenth of building a 100 000-sample window. 0 when out of memory. */
static uint64_t device_label(struct profiles *p, int32_t device)
{
  int slot = device == ALLOC_DEVICE_HOST ? 0 : device >= 0 && device < 16 ? device + 1 : -1;
  char dev[16];
  struct pprof_label label = {"gpu", dev, 0, NULL};
  uint64_t id;

  if (slot >= 0 && p->dev_label_epoch[slot] == p->epoch)
    return p->dev_label[slot];
  if (device == ALLOC_DEVICE_HOST)
    snprintf(dev, sizeof(dev), "host");
  else
    snprintf(dev, sizeof(dev), "%d", (int)device);
  id = pprof_builder_label(p->b, &label);
  if (slot >= 0 && id) {
    p->dev_label[slot] = id;
    p->dev_label_epoch[slot] = p->epoch;
  }
  return id;
}

/*
 * The locations of a stack's frames, leaf first, into locs: their number, or -ENOMEM. The
 * samples of one stack (one per kernel and device) are added one after the other, so the
 * last stack's are kept: the others skip the stack table and a frame lookup per frame.
 */
static int stack_locations(struct profiles *p, uint32_t stack_id, uint64_t *locs)
{
  uint64_t frames[STACK_MAX_DEPTH];
  int n;

  if (!stack_id || !p->o.stacks)
    return 0;
  if (p->stack_epoch == p->epoch && p->stack_id == stack_id) {
    memcpy(locs, p->stack_locs, (size_t)p->stack_n * sizeof(*locs));
    return p->stack_n;
  }
  n = stack_table_get(p->o.stacks, stack_id, frames, STACK_MAX_DEPTH);
  for (int i = 0; i < n; i++)
    if (!(locs[i] = frame_location(p, frames[i])))
      return -ENOMEM;
  memcpy(p->stack_locs, locs, (size_t)n * sizeof(*locs));
  p->stack_id = stack_id;
  p->stack_n = n;
  p->stack_epoch = p->epoch;
  return n;
}

static int add_entry(struct profiles *p, int kind, const struct entry *e)
{
  uint64_t locs[STACK_MAX_DEPTH + 2];
  uint64_t labels[2] = {device_label(p, e->k.device), 0};
  int n = 0, nl = 0;

  if (!labels[0])
    return -ENOMEM;
  if (kind == KIND_NCCL) {
    /* The communicator: its name, or its hash (few per job, a label Pyroscope can keep). */
    char comm[64];
    struct pprof_label l = {"comm", comm, 0, NULL};
    nccl_comm_label((e->k.aux >> 8) - 1, comm, sizeof(comm));
    if (!(labels[1] = pprof_builder_label(p->b, &l)))
      return -ENOMEM;
  }
  locs[nl] = leaf_location(p, kind, &e->k);
  if (!locs[nl++])
    return -ENOMEM;
  if (kind != KIND_MEMORY && e->k.aux & KEY_AUX_GRAPH) {
    if (p->graph_loc_epoch != p->epoch) {
      p->graph_loc = pprof_builder_location(
          p->b, 0, 0, pprof_builder_function(p->b, GRAPH_FRAME, GRAPH_FRAME, NULL, 0), 0);
      p->graph_loc_epoch = p->graph_loc ? p->epoch : 0;
    }
    if (!(locs[nl++] = p->graph_loc))
      return -ENOMEM;
  }
  if ((n = stack_locations(p, e->k.stack_id, locs + nl)) < 0)
    return n;
  nl += n;
  return pprof_builder_add_sample_labels(p->b, locs, (size_t)nl, e->v, (size_t)n_values[kind],
                                         labels, kind == KIND_NCCL ? 2 : 1);
}

/*
 * p->order: the used slots of t by stack id (a stable radix sort), so that the samples of
 * one stack (one per kernel and device) are written one after the other. In slot (hash) order
 * the copies of a stack lie further apart than deflate's 32 KiB window: a 100 000-sample
 * window compressed 3x larger and 3x slower (docs/PERFORMANCE.md). 0 or -ENOMEM.
 */
static int table_by_stack(struct profiles *p, struct table *t)
{
  uint32_t max = 0, *tmp;
  size_t i, n = 0, count[256];

  if (t->used > p->order_cap) {
    free(p->order);
    free(p->order_tmp);
    p->order = malloc(t->used * sizeof(*p->order));
    p->order_tmp = malloc(t->used * sizeof(*p->order_tmp));
    p->order_cap = p->order && p->order_tmp ? t->used : 0;
    if (!p->order_cap)
      return -ENOMEM;
  }
  for (i = 0; i < t->cap; i++)
    if (t->slots[i].used) {
      p->order[n++] = (uint32_t)i;
      if (t->slots[i].k.stack_id > max)
        max = t->slots[i].k.stack_id;
    }
  for (unsigned shift = 0; shift < 32 && max >> shift; shift += 8) {
    size_t pos = 0;

    memset(count, 0, sizeof(count));
    for (i = 0; i < n; i++)
      count[t->slots[p->order[i]].k.stack_id >> shift & 255]++;
    for (i = 0; i < 256; i++) {
      size_t c = count[i];
      count[i] = pos;
      pos += c;
    }
    for (i = 0; i < n; i++)
      p->order_tmp[count[t->slots[p->order[i]].k.stack_id >> shift & 255]++] = p->order[i];
    tmp = p->order;
    p->order = p->order_tmp;
    p->order_tmp = tmp;
  }
  return 0;
}

/* Temp file in the same directory, then rename: a reader never sees half a profile. */
static int write_file(struct profiles *p, int kind, uint64_t start, const uint8_t *buf, size_t len)
{
  char path[PATH_MAX], tmp[PATH_MAX + 16], stamp[32];
  int fd, ret, n;

  files_utc_stamp(start, stamp, sizeof(stamp));
  if (p->path[0])
    n = snprintf(path, sizeof(path), "%s", p->path);
  else if (p->stem[0])
    n = snprintf(path, sizeof(path), "%s-%s.pb.gz", p->stem, kind_names[kind]);
  else
    n = snprintf(path, sizeof(path), "%s/gpuprof-%s-%s-%s.pb.gz", p->output_dir, p->name,
                 kind_names[kind], stamp);
  if (n < 0 || (size_t)n >= sizeof(path) ||
      (size_t)snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= sizeof(tmp))
    return -ENAMETOOLONG;
  ret = files_mkdir_p(p->output_dir, 0755);
  if (ret)
    goto out;
  /* The name is predictable and the directory may be shared (/tmp/gpuprof): whatever is at
   * tmp (a stale file, or a link planted by another user) is removed, never followed. */
  unlink(tmp);
  fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    ret = -errno;
    goto out;
  }
  ret = fd_write_all(fd, buf, len);
  if (close(fd) && !ret)
    ret = -errno;
  if (!ret && rename(tmp, path))
    ret = -errno;
  if (ret)
    unlink(tmp);
  else if (p->o.file_written)
    p->o.file_written(p->o.file_written_arg, kind, path);
out:
  if (ret && !p->warned_dir && files_first_output_error()) {
    char err[128];
    p->warned_dir = 1;
    log_warn("cannot write the profile %s: %s; set GPUPROF_OUTPUT_DIR to a writable directory "
             "(further profile write errors are not reported)",
             path, strerror_r(-ret, err, sizeof(err)));
  }
  return ret;
}

/* The uploader copies the bytes and sends them from its own thread. */
static void upload(struct profiles *p, int kind, const uint8_t *buf, size_t len, uint64_t start,
                   uint64_t end)
{
  if (uploader_submit(kind_names[kind], buf, len, start, end) != 0)
    p->stats.upload_errors++;
}

/*
 * Builds the kind's profile of w from the entries from..to of its stack order (p->order, or
 * the table's slot order when sorted is 0), with the window's comments. 0 or -errno.
 */
static int build(struct profiles *p, struct window *w, int kind, uint64_t end, int sorted,
                 size_t from, size_t to)
{
  struct table *t = &w->t[kind];
  char comment[256];
  size_t n = 0;
  int ret = 0;

  pprof_builder_reset(p->b);
  p->epoch++;
  set_types(p->b, kind);
  pprof_builder_set_time(p->b, (int64_t)w->start, (int64_t)(end - w->start));
  /* The main program is mapping 1: pprof takes mapping 1 for the binary ("File:" in its
   * reports). Its module is found through the program's entry point, so it is known before
   * any of its frames is seen (a short program's only window would otherwise name the first
   * library a frame came from). */
  if (p->exe_pc) {
    struct frame_info *exe = frame_get(p, p->exe_pc);
    if (exe && exe->module >= 0)
      mapping_of(p, exe->module);
  }
  if (sorted) {
    /* In stack order the slots are read at random: fetched a few entries ahead. */
    for (size_t i = from; i < to && !ret; i++) {
      if (i + 8 < to)
        __builtin_prefetch(&t->slots[p->order[i + 8]]);
      ret = add_entry(p, kind, &t->slots[p->order[i]]);
    }
  } else {
    for (size_t i = 0; i < t->cap && !ret; i++)
      if (t->slots[i].used && n++ >= from && n <= to)
        ret = add_entry(p, kind, &t->slots[i]);
  }
  if (kind == KIND_GPU_TIME && w->represented) {
    snprintf(comment, sizeof(comment),
             "%llu unsampled launches are represented by the weighted sampled ones",
             (unsigned long long)w->represented);
    pprof_builder_add_comment(p->b, comment);
  }
  if (p->comment[0])
    pprof_builder_add_comment(p->b, p->comment);
  if (w->overflow || w->late) {
    snprintf(comment, sizeof(comment),
             "window: %llu events lost their stack (too many distinct stacks), %llu arrived "
             "late (or stamped ahead of the clock) and were added to this window",
             (unsigned long long)w->overflow, (unsigned long long)w->late);
    pprof_builder_add_comment(p->b, comment);
  }
  return ret;
}

/*
 * The uncompressed size of an encoded profile: pprof_builder_encode writes one gzip member,
 * whose trailer ends with ISIZE, the input's length mod 2^32, little endian (RFC 1952 2.3.1).
 * A profile is far below 4 GiB (max_keys entries of at most STACK_MAX_DEPTH + 2 locations).
 */
static uint64_t gzip_isize(const uint8_t *buf, size_t len)
{
  if (len < 18) /* a gzip header and trailer */
    return 0;
  buf += len - 4;
  return (uint64_t)buf[0] | (uint64_t)buf[1] << 8 | (uint64_t)buf[2] << 16 | (uint64_t)buf[3] << 24;
}

static int over_size(const struct profiles *p, const uint8_t *buf, size_t len)
{
  return p->o.upload_max_size && gzip_isize(buf, len) > p->o.upload_max_size;
}

static void upload_range(struct profiles *p, struct window *w, int kind, uint64_t end, int sorted,
                         size_t from, size_t to);

/*
 * Pyroscope rejects for good (400) a profile over its max-profile-size-bytes, measured
 * uncompressed (formats.md 2.4): deep stacks with long C++ or Python names make a window of
 * fewer samples than its sample limit pass it. Entries from..to, whose profile of `bytes` was
 * over upload_max_size, go up as two halves, each halved again while over (same labels and
 * time: the server adds them up). One entry alone cannot be split: an upload error, never a
 * loop. The depth is at most log2(max_keys).
 */
static void upload_halves(struct profiles *p, struct window *w, int kind, uint64_t end, int sorted,
                          size_t from, size_t to, uint64_t bytes)
{
  size_t mid = from + (to - from) / 2;

  if (to - from < 2) {
    p->stats.upload_errors++;
    if (!p->warned_size) {
      p->warned_size = 1;
      log_warn("a %s profile of one sample is %llu bytes uncompressed, over the server's limit "
               "GPUPROF_PYROSCOPE_MAX_SIZE=%llu: not uploaded (the file keeps it; raise the "
               "limit on both sides to upload it; further ones are not reported)",
               kind_names[kind], (unsigned long long)bytes,
               (unsigned long long)p->o.upload_max_size);
    }
    return;
  }
  upload_range(p, w, kind, end, sorted, from, mid);
  upload_range(p, w, kind, end, sorted, mid, to);
}

/* Builds and uploads entries from..to of the stack order in one profile, or in halves. */
static void upload_range(struct profiles *p, struct window *w, int kind, uint64_t end, int sorted,
                         size_t from, size_t to)
{
  uint8_t *buf = NULL;
  size_t len = 0;
  uint64_t bytes;
  int ret = build(p, w, kind, end, sorted, from, to);

  if (!ret)
    ret = pprof_builder_encode(p->b, PROFILES_GZIP_LEVEL, &buf, &len);
  if (ret) {
    p->stats.upload_errors++;
  } else if (over_size(p, buf, len)) {
    bytes = gzip_isize(buf, len);
    /* Freed first: the halves reuse the builder, and no level keeps its bytes. */
    free(buf);
    buf = NULL;
    upload_halves(p, w, kind, end, sorted, from, to, bytes);
  } else {
    upload(p, kind, buf, len, w->start, end);
  }
  free(buf);
}

/*
 * Pyroscope rejects a profile of more samples than its limit (16 000 by default, formats.md
 * 2.4): a larger window goes up in parts of at most upload_max_samples, same labels and time
 * (the server adds them up), each in halves when over upload_max_size. The parts follow the
 * stack order, so each is small.
 */
static void upload_parts(struct profiles *p, struct window *w, int kind, uint64_t end, int sorted)
{
  size_t used = w->t[kind].used, max = p->o.upload_max_samples;

  for (size_t from = 0; from < used; from += max)
    upload_range(p, w, kind, end, sorted, from, from + max < used ? from + max : used);
  p->stats.split_uploads++;
}

static void window_write(struct profiles *p, struct window *w, uint64_t end)
{
  for (int kind = 0; kind < PROFILES_KIND_COUNT; kind++) {
    struct table *t = &w->t[kind];
    uint8_t *buf = NULL;
    size_t len = 0;
    uint64_t halve = 0; /* the whole profile's size, when it must go up in halves */
    int ret = 0, sorted, split;

    if (!t->used)
      continue;
    /* Created on first use, on the thread that writes windows: nothing of it runs inside the
     * application's cuInit (where the agent is initialised). */
    if (!p->sym && !(p->sym = symbolizer_new())) {
      p->stats.write_errors++;
      continue;
    }
    /* A library was dlopened or dlclosed: an address cached for a closed one may now belong
     * to another, so every frame is resolved again. */
    if (symbolizer_sync(p->sym) && p->frames) {
      memset(p->frames, 0, p->frames_cap * sizeof(*p->frames));
      p->frames_used = 0;
    }
    sorted = table_by_stack(p, t) == 0;
    split = p->o.upload && p->o.upload_max_samples && t->used > p->o.upload_max_samples;
    ret = build(p, w, kind, end, sorted, 0, t->used);
    if (!ret)
      ret = pprof_builder_encode(p->b, PROFILES_GZIP_LEVEL, &buf, &len);
    if (!ret) {
      p->stats.bytes += len;
      if (p->o.upload && !split && over_size(p, buf, len))
        halve = gzip_isize(buf, len);
      else if (p->o.upload && !split)
        upload(p, kind, buf, len, w->start, end);
      if (p->o.write_files)
        ret = write_file(p, kind, w->start, buf, len);
      if (!ret && p->o.write_files)
        p->stats.files++;
    } else if (!p->warned_oom) {
      p->warned_oom = 1;
      log_warn("cannot encode the %s profile of a window: %s", kind_names[kind], strerror(-ret));
    }
    if (ret)
      p->stats.write_errors++;
    free(buf);
    /* After the file: the parts reuse the builder. */
    if (split) {
      upload_parts(p, w, kind, end, sorted);
    } else if (halve) {
      upload_halves(p, w, kind, end, sorted, 0, t->used, halve);
      p->stats.split_uploads++;
    }
  }
  p->stats.windows++;
  p->stats.overflow += w->overflow;
  p->stats.late_events += w->late;
  p->stats.represented += w->represented;
  w->open = 0;
}

/* Closes (writes) the older window and makes w[1] free. */
static void close_oldest(struct profiles *p)
{
  struct window tmp;

  if (!p->w[0].open)
    return;
  window_cut_memory(p, &p->w[0]);
  window_write(p, &p->w[0], p->w[0].start + p->o.window_ns);
  /* Swap so that the tables' memory is reused by the next window. */
  tmp = p->w[0];
  p->w[0] = p->w[1];
  p->w[1] = tmp;
}

/* The open window starting at start, opening it (and closing the oldest) if it is newer. */
static struct window *window_at(struct profiles *p, uint64_t start)
{
  struct window *newest = p->w[1].open ? &p->w[1] : p->w[0].open ? &p->w[0] : NULL;

  if (newest && start <= newest->start) {
    if (p->w[0].open && start == p->w[0].start)
      return &p->w[0];
    if (p->w[1].open && start == p->w[1].start)
      return &p->w[1];
    return NULL;
  }
  /* A newer window: the older ones up to and including its predecessor stay open so late
   * events still find them; a third one would force the oldest out. */
  if (p->w[0].open && p->w[1].open)
    close_oldest(p);
  if (!p->w[0].open) {
    window_open(p, &p->w[0], start);
    return &p->w[0];
  }
  window_open(p, &p->w[1], start);
  return &p->w[1];
}

/* The start of the window holding ts: wall-clock aligned, or the capture's single window
 * from o.origin_ns (its files carry no time stamp: a second window would overwrite them). */
static uint64_t window_start(const struct profiles *p, uint64_t ts)
{
  if (!p->o.origin_ns)
    return ts - ts % p->o.window_ns;
  return p->o.origin_ns;
}

/* The window an event starting at ts belongs to: older than every open window counts as late
 * and goes to the oldest one (totals stay complete). */
static struct window *window_for(struct profiles *p, uint64_t ts)
{
  uint64_t start = window_start(p, ts);
  struct window *newest = p->w[1].open ? &p->w[1] : p->w[0].open ? &p->w[0] : NULL;
  struct window *w;

  /* A record may open the window after the newest one (the device's clock may run a little
   * ahead of the host's at a boundary), not one further ahead: a stamp from a bad clock, far
   * in the future, would otherwise hold every window back until then. It joins the newest. */
  if (newest && start > newest->start + p->o.window_ns) {
    newest->late++;
    return newest;
  }
  w = window_at(p, start);
  if (!w) {
    w = &p->w[0];
    w->late++;
  }
  return w;
}

static struct window *newest_window(struct profiles *p)
{
  return p->w[1].open ? &p->w[1] : &p->w[0];
}

static uint64_t duration(const struct event *ev)
{
  return ev->flags & EVENT_F_NO_TIMING || ev->end_ns < ev->start_ns ? 0 : ev->end_ns - ev->start_ns;
}

/*
 * The NCCL ops of a kernel record (agent/nccl.h): one sample each by the op's host stack, its
 * func as the leaf ("nccl:AllReduce") and its communicator as a label. Ops are weighted like
 * launches: a sampled op stands for its sampler's period, an op the sampler skipped is
 * represented by those (stacks "sampled"); without launch stacks every op counts once.
 */
static void nccl_event(struct profiles *p, const struct event *ev)
{
  const struct nccl_op_view *ops;
  unsigned n = nccl_current(ev, &ops);
  struct window *w;

  if (!n)
    return;
  w = ev->flags & EVENT_F_NO_TIMING || !ev->start_ns ? newest_window(p)
                                                     : window_for(p, ev->start_ns);
  if (!w->open)
    w = window_at(p, window_start(p, ev->start_ns));
  if (!w)
    return;
  for (unsigned i = 0; i < n; i++) {
    struct key k = {(uint64_t)(uintptr_t)ops[i].func, STACK_ID_NONE, (int32_t)ev->device,
                    (ops[i].comm + 1) << 8};
    uint64_t weight = 1;
    struct entry *e;

    if (ops[i].weight) {
      k.stack_id = ops[i].stack_id;
      weight = ops[i].weight;
    } else if (p->o.sample_every > 1) {
      continue;
    }
    if (!(e = table_get(p, w, &w->t[KIND_NCCL], k))) {
      p->stats.lost++;
      continue;
    }
    e->v[0] += (int64_t)weight;
    e->v[1] += (int64_t)(ops[i].bytes * weight);
    e->v[2] += (int64_t)(ops[i].gpu_ns * weight);
  }
}

void profiles_event(struct profiles *p, const struct event *ev, const struct corr_info *api)
{
  struct window *w;
  struct entry *e;
  struct key k = {0};
  uint64_t weight = 1, dur;
  int kind;

  switch (ev->kind) {
  case EVENT_KERNEL:
    nccl_event(p, ev);
    kind = KIND_GPU_TIME;
    k.leaf = (uint64_t)(uintptr_t)(ev->u.kernel.name ? ev->u.kernel.name : "?");
    break;
  case EVENT_MEMCPY:
    kind = KIND_MEMCPY;
    k.leaf = ev->flags & EVENT_F_PEER || ev->u.memcpy.copy_kind == EVENT_COPY_PTOP
                 ? LEAF_PEER
                 : (ev->u.memcpy.copy_kind < EVENT_COPY_KIND_COUNT ? ev->u.memcpy.copy_kind : 0);
    break;
  case EVENT_MEMSET:
    kind = KIND_MEMCPY;
    k.leaf = LEAF_MEMSET;
    break;
  default:
    return;
  }
  w = ev->flags & EVENT_F_NO_TIMING || !ev->start_ns ? newest_window(p)
                                                     : window_for(p, ev->start_ns);
  if (!w->open)
    w = window_at(p, window_start(p, ev->start_ns));
  if (!w)
    return;
  k.device = (int32_t)ev->device;
  if (api && (k.stack_id = graph_map_lookup(ev->graph_node_id))) {
    /* A replayed graph node: the stack that created it, every record counted (the graph
     * launch's sampling does not apply: the node's stack was taken unsampled). */
    k.aux = KEY_AUX_GRAPH;
  } else if (api && api->weight) {
    /* A sampled launch (or a call with a stack): its weight also when its stack could not
     * be kept (stack 0: the sample has only its leaf). */
    k.stack_id = api->stack_id;
    weight = api->weight;
  } else if (api && kind == KIND_GPU_TIME && p->o.sample_every > 1) {
    /* A launch the sampler skipped: the sampled launches of its thread carry the sample
     * period as their weight and stand for it. Counting it too would count it twice. */
    w->represented++;
    return;
  }
  e = table_get(p, w, &w->t[kind], k);
  if (!e) {
    p->stats.lost++;
    return;
  }
  dur = duration(ev);
  if (kind == KIND_GPU_TIME) {
    e->v[0] += (int64_t)weight;
    e->v[1] += (int64_t)(dur * weight);
  } else {
    e->v[0] += (int64_t)weight;
    e->v[1] += (int64_t)(dur * weight);
    e->v[2] +=
        (int64_t)((ev->kind == EVENT_MEMSET ? ev->u.memset.bytes : ev->u.memcpy.bytes) * weight);
  }
}

void profiles_memory_add(struct profiles *p, uint64_t ts, const struct profiles_memory *m)
{
  struct window *w = ts ? window_for(p, ts) : newest_window(p);
  struct key k = {(uint64_t)(uintptr_t)m->api, m->stack_id, m->device, m->kind};
  struct entry *e;

  if (!w->open)
    w = window_at(p, window_start(p, ts));
  e = w ? table_get(p, w, &w->t[KIND_MEMORY], k) : NULL;
  if (!e) {
    p->stats.lost++;
    return;
  }
  e->v[0] += m->alloc_objects;
  e->v[1] += m->alloc_bytes;
  e->v[2] += m->inuse_objects;
  e->v[3] += m->inuse_bytes;
}

void profiles_tick(struct profiles *p, uint64_t now_ns)
{
  const struct window *newest = p->w[1].open ? &p->w[1] : p->w[0].open ? &p->w[0] : NULL;

  /*
   * The wall clock stepped back by more than a window (NTP, a VM resumed): the open windows
   * would only end when the clock is back where it was, an hour later for an hour's step,
   * and nothing would be written meanwhile. They are written now, at their full length, and
   * windows go on from the new time; records stamped before the step count as late.
   */
  if (newest && window_start(p, now_ns) + p->o.window_ns < newest->start)
    while (p->w[0].open)
      close_oldest(p);
  window_at(p, window_start(p, now_ns));
  while (p->w[0].open) {
    uint64_t end = p->w[0].start + p->o.window_ns;
    if (now_ns < end)
      break;
    window_cut_memory(p, &p->w[0]);
    if (now_ns < end + p->o.grace_ns)
      break;
    close_oldest(p);
  }
}

void profiles_finish(struct profiles *p, uint64_t now_ns)
{
  while (p->w[0].open) {
    struct window *w = &p->w[0];
    uint64_t end = w->start + p->o.window_ns;
    struct window tmp;

    if (end > now_ns)
      end = now_ns > w->start ? now_ns : w->start + 1;
    window_cut_memory(p, w);
    window_write(p, w, end);
    tmp = p->w[0];
    p->w[0] = p->w[1];
    p->w[1] = tmp;
  }
}

struct profiles *profiles_new(const struct profiles_options *o, uint64_t now_ns)
{
  struct profiles *p = calloc(1, sizeof(*p));

  if (!p)
    return NULL;
  p->o = *o;
  if (!p->o.window_ns)
    p->o.window_ns = CONFIG_DEFAULT_WINDOW_NS;
  if (!p->o.max_keys)
    p->o.max_keys = PROFILES_DEFAULT_MAX_KEYS;
  /* A window must be closed before the one after next begins (at most two are open). */
  if (p->o.grace_ns > p->o.window_ns)
    p->o.grace_ns = p->o.window_ns;
  snprintf(p->output_dir, sizeof(p->output_dir), "%s", o->output_dir ? o->output_dir : ".");
  snprintf(p->host, sizeof(p->host), "%s", o->host && o->host[0] ? o->host : "unknown");
  p->o.output_dir = p->output_dir;
  p->o.host = p->host;
  if (o->name && o->name[0])
    snprintf(p->name, sizeof(p->name), "%s", o->name);
  else
    snprintf(p->name, sizeof(p->name), "%s-%d", p->host, o->pid);
  p->o.name = p->name;
  snprintf(p->stem, sizeof(p->stem), "%s", o->file_stem ? o->file_stem : "");
  p->o.file_stem = p->stem;
  snprintf(p->path, sizeof(p->path), "%s", o->file_path ? o->file_path : "");
  p->o.file_path = p->path;
  snprintf(p->comment, sizeof(p->comment), "%s", o->comment ? o->comment : "");
  p->o.comment = p->comment;
  p->exe_pc = getauxval(AT_ENTRY);
  p->b = pprof_builder_new();
  if (!p->b) {
    profiles_free(p);
    return NULL;
  }
  window_at(p, window_start(p, now_ns));
  return p;
}

void profiles_free(struct profiles *p)
{
  if (!p)
    return;
  for (int i = 0; i < 2; i++)
    for (int k = 0; k < PROFILES_KIND_COUNT; k++)
      free(p->w[i].t[k].slots);
  symbolizer_free(p->sym);
  pprof_builder_free(p->b);
  free(p->frames);
  free(p->modules);
  free(p->order);
  free(p->order_tmp);
  free(p);
}

void profiles_get_stats(const struct profiles *p, struct profiles_stats *out)
{
  *out = p->stats;
}

/*
 * A frame of the CUDA runtime: in libcudart.so, or, when the program links the runtime
 * statically (nvcc's default), a function of its API (`cuda` + a capital: cudaMalloc,
 * cudaMallocAsync) or one of its internals (`cudart::...`, `__cudart...`) in the program.
 */
static int runtime_frame(const struct profiles *p, const struct frame_info *fi)
{
  const char *f = fi->function;

  if (fi->module >= 0) {
    const char *path = p->modules[fi->module].path, *slash = strrchr(path, '/');
    if (!strncmp(slash ? slash + 1 : path, "libcudart", 9))
      return 1;
  }
  if (!f || fi->python)
    return 0;
  return (!strncmp(f, "cuda", 4) && f[4] >= 'A' && f[4] <= 'Z') || !strncmp(f, "cudart::", 8) ||
         !strncmp(f, "__cudart", 8);
}

int profiles_stack_leaf_name(struct profiles *p, uint32_t stack_id, char *buf, size_t len)
{
  uint64_t frames[STACK_MAX_DEPTH];
  struct frame_info *fi = NULL;
  const char *name;
  int n;

  snprintf(buf, len, "?");
  if (!stack_id || !p->o.stacks ||
      (n = stack_table_get(p->o.stacks, stack_id, frames, STACK_MAX_DEPTH)) < 1)
    return -ENOENT;
  /* Created on first use, on the calling thread, as window_write does. */
  if (!p->sym && !(p->sym = symbolizer_new()))
    return -ENOMEM;
  /* The CUDA runtime's own frames stay in stacks (the unwinder skips only the driver's and
   * CUPTI's): the caller is the innermost frame outside it (else the outermost one). */
  for (int i = 0; i < n && !fi; i++) {
    if (!(fi = frame_get(p, frames[i])))
      return -ENOMEM;
    if (i + 1 < n && runtime_frame(p, fi))
      fi = NULL;
  }
  name = frame_name(p, fi, buf, len);
  if (name != buf)
    snprintf(buf, len, "%s", name);
  return 0;
}

/* ---- the agent's instance ---- */

static struct profiles *instance;

static void consumer_event(void *arg, const struct event *ev, const struct corr_info *api)
{
  profiles_event(arg, ev, api);
}

static void consumer_tick(void *arg, uint64_t now_ns)
{
  profiles_tick(arg, now_ns);
}

int profiles_start(const struct config *cfg, struct alloc_map *allocs, struct stack_table *stacks,
                   uint32_t sample_every)
{
  struct profiles_options o = {
      .output_dir = cfg->output_dir,
      .window_ns = cfg->window_ns,
      /* Two flush intervals: CUPTI delivers a buffer at the flush after its records were
       * complete, and the worker may be one flush behind. */
      .grace_ns = 2 * cfg->flush_interval_ns,
      .write_files = cfg->profile_files,
      .upload = cfg->pyroscope_url[0] != '\0',
      .upload_max_samples = (size_t)cfg->pyroscope_max_samples,
      .upload_max_size = cfg->pyroscope_max_size,
      .allocs = allocs,
      .stacks = stacks,
      .sample_every = sample_every,
      .pid = (int)getpid(),
  };
  struct worker_consumer c = {consumer_event, consumer_tick, NULL};
  char host[256] = "", name[320];
  int ret;

  if (!o.write_files && !o.upload)
    return 0;
  files_hostname(host, sizeof(host));
  files_name(name, sizeof(name));
  o.host = host;
  o.name = name;
  instance = profiles_new(&o, clock_realtime_ns());
  if (!instance) {
    log_warn("out of memory setting up the pprof windows; no profiles will be written");
    return -ENOMEM;
  }
  c.arg = instance;
  ret = worker_add_consumer(&c);
  if (ret) {
    log_warn("cannot register the pprof windows with the worker; no profiles will be written");
    profiles_free(instance);
    instance = NULL;
  }
  return ret;
}

void profiles_stop(int worker_joined)
{
  struct profiles_stats st;

  /* A worker that could not be joined may still be inside the consumer: leave it be. */
  if (!instance || !worker_joined)
    return;
  profiles_finish(instance, clock_realtime_ns());
  profiles_get_stats(instance, &st);
  log_debug("pprof windows: %llu windows, %llu files, %llu bytes, %llu errors, %llu late, "
            "%llu overflow",
            (unsigned long long)st.windows, (unsigned long long)st.files,
            (unsigned long long)st.bytes, (unsigned long long)st.write_errors,
            (unsigned long long)st.late_events, (unsigned long long)st.overflow);
  profiles_free(instance);
  instance = NULL;
}
