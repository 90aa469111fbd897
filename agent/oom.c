/* GPU out-of-memory snapshots: what held the memory when an allocation failed for lack of it. */
#include "agent/oom.h"

#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/aggregate.h"
#include "agent/alloc_map.h"
#include "agent/config.h"
#include "agent/profiles.h"
#include "agent/stack.h"
#include "agent/util/clock.h"
#include "agent/util/files.h"
#include "export/format.h"
#include "agent/util/hash.h"
#include "agent/util/log.h"
#include "agent/worker.h"

/* The groups of one snapshot: (stack, API, device, kind), as the live map groups in-use memory.
 * Past OOM_MAX_GROUPS distinct stacks an allocation joins its stack-less group (counted); the
 * table has room for those beyond the cap, and what still finds none is counted as lost. */
#define OOM_MAX_GROUPS 4096u
#define OOM_SLOTS (2 * OOM_MAX_GROUPS)
#define OOM_MAX_STACKLESS_USED (OOM_SLOTS * 3 / 4)
#define OOM_TOP_HOLDERS 3
#define NAME_MAX_LEN 96

struct oom_group {
  const char *api;
  uint64_t count, bytes;
  uint32_t stack_id;
  int32_t device;
  uint8_t kind;
  uint8_t used;
};

struct oom_snapshot {
  struct oom_event ev;
  uint64_t device_in_use; /* bytes live on ev.device at the failure */
  uint64_t stackless;     /* allocations that lost their stack: too many groups */
  uint64_t lost;          /* allocations left out: no slot at all */
  size_t used;
  struct oom_group *slots; /* OOM_SLOTS; allocated once by oom_start, never freed */
};

/* CLOSED: set at exit, final; a snapshot the slot held then was counted as an error there. */
enum { SLOT_FREE = 0, SLOT_FILLING, SLOT_READY, SLOT_WRITING, SLOT_CLOSED };

/* Set by oom_start before any callback is enabled; read-only afterwards. */
static struct alloc_map *allocs;
static struct stack_table *stacks;
static uint64_t interval_ns;
static char output_dir[CONFIG_PATH_MAX];
static char host[256];
static int pid;
static char name[320]; /* the process's part of file names (files_name) */

/* The one slot: an application thread takes it FREE -> FILLING (CAS), fills it and publishes
 * READY; the worker takes it READY -> WRITING, writes it and hands it back FREE. Every step is a
 * CAS so that oom_stop can close it at any point and count what it held exactly once. */
static struct oom_snapshot snap;
static _Atomic int slot_state = SLOT_FREE;
static _Atomic int started;
/* CLOCK_MONOTONIC of the last snapshot taken: the rate limit must not follow wall-clock steps. */
static _Atomic uint64_t last_snapshot_mono;
static _Atomic uint64_t n_failed, n_snapshots, n_skipped, n_errors;
static struct oom_event first;
static _Atomic int first_ready;

/* ---- application thread (a failed allocation: rare, never the success path) ---- */

static struct oom_group *group_probe(struct oom_snapshot *s, uint32_t stack_id, const char *api,
                                     int32_t device, uint8_t kind)
{
  uint64_t h = hash_u64((uint64_t)stack_id << 32 ^ (uint64_t)(uintptr_t)api ^
                        (uint64_t)(uint16_t)device << 16 ^ kind);
  size_t i;

  for (i = (size_t)h & (OOM_SLOTS - 1); s->slots[i].used; i = (i + 1) & (OOM_SLOTS - 1)) {
    const struct oom_group *g = &s->slots[i];
    if (g->stack_id == stack_id && g->api == api && g->device == device && g->kind == kind)
      break;
  }
  return &s->slots[i];
}

/* Under the live map's lock (alloc_map_for_each): no call into the map, no malloc. */
static void snapshot_add(const struct alloc_info *a, void *arg)
{
  struct oom_snapshot *s = arg;
  uint32_t stack_id = a->stack_id;
  struct oom_group *g;

  if (a->device == s->ev.device)
    s->device_in_use += a->size;
  g = group_probe(s, stack_id, a->api, a->device, a->kind);
  if (!g->used && stack_id && s->used >= OOM_MAX_GROUPS) {
    s->stackless++;
    stack_id = STACK_ID_NONE;
    g = group_probe(s, stack_id, a->api, a->device, a->kind);
  }
  if (!g->used) {
    if (s->used >= OOM_MAX_STACKLESS_USED) {
      s->lost++;
      return;
    }
    *g = (struct oom_group){a->api, 0, 0, stack_id, a->device, a->kind, 1};
    s->used++;
  }
  g->count++;
  g->bytes += a->size;
}

/* from -> to, unless oom_stop closed the slot meanwhile (then 0: it counted the snapshot). */
static int slot_handback(int from, int to)
{
  return atomic_compare_exchange_strong_explicit(&slot_state, &from, to, memory_order_acq_rel,
                                                 memory_order_relaxed);
}

void oom_record(const struct oom_event *ev)
{
  uint64_t last, now;
  int expected = SLOT_FREE;

  if (atomic_fetch_add_explicit(&n_failed, 1, memory_order_relaxed) == 0) {
    first = *ev;
    atomic_store_explicit(&first_ready, 1, memory_order_release);
  }
  if (!atomic_load_explicit(&started, memory_order_acquire)) {
    atomic_fetch_add_explicit(&n_skipped, 1, memory_order_relaxed);
    return;
  }
  now = clock_monotonic_ns();
  last = atomic_load_explicit(&last_snapshot_mono, memory_order_relaxed);
  if ((last && now < last + interval_ns) ||
      !atomic_compare_exchange_strong_explicit(&slot_state, &expected, SLOT_FILLING,
                                               memory_order_acquire, memory_order_relaxed)) {
    atomic_fetch_add_explicit(&n_skipped, 1, memory_order_relaxed);
    return;
  }
  /* Checked again with the slot held: another thread may have taken a snapshot meanwhile. */
  last = atomic_load_explicit(&last_snapshot_mono, memory_order_relaxed);
  if (last && now < last + interval_ns) {
    /* Closed meanwhile: oom_stop counted this failure as an error already. */
    if (slot_handback(SLOT_FILLING, SLOT_FREE))
      atomic_fetch_add_explicit(&n_skipped, 1, memory_order_relaxed);
    return;
  }
  atomic_store_explicit(&last_snapshot_mono, now, memory_order_relaxed);
  /* The slot is ours: the worker cleared it when it handed it back. */
  snap.ev = *ev;
  alloc_map_for_each(allocs, snapshot_add, &snap);
  slot_handback(SLOT_FILLING, SLOT_READY);
}

/* ---- worker ---- */

static void fmt_device(int32_t device, char *buf, size_t len)
{
  if (device == ALLOC_DEVICE_HOST)
    snprintf(buf, len, "the host (pinned memory)");
  else
    snprintf(buf, len, "GPU %d", (int)device);
}

struct holder {
  char name[NAME_MAX_LEN];
  uint64_t bytes;
};

static int cmp_holder_name(const void *x, const void *y)
{
  return strcmp(((const struct holder *)x)->name, ((const struct holder *)y)->name);
}

static int cmp_holder_bytes(const void *x, const void *y)
{
  const struct holder *a = x, *b = y;

  if (a->bytes != b->bytes)
    return a->bytes > b->bytes ? -1 : 1;
  return strcmp(a->name, b->name);
}

/* The name a group is held by: its stack's innermost function, or the API without a stack. */
static void holder_name(struct profiles *p, const struct oom_group *g, char *buf, size_t len)
{
  char api[64];

  if (profiles_stack_leaf_name(p, g->stack_id, buf, len) == 0)
    return;
  aggregate_api_base_name(g->api, api, sizeof(api));
  snprintf(buf, len, "%s (no stack)", api);
}

/* ", top holders: f 4.0 GiB, g 2.0 GiB": the failed device's groups summed per function. */
static void top_holders(struct profiles *p, const struct oom_snapshot *s, char *out, size_t len)
{
  struct holder *h = calloc(s->used ? s->used : 1, sizeof(*h));
  size_t n = 0, m = 0, off;
  char bytes[32];

  out[0] = '\0';
  if (!h)
    return;
  for (size_t i = 0; i < OOM_SLOTS; i++) {
    const struct oom_group *g = &s->slots[i];
    if (!g->used || g->device != s->ev.device)
      continue;
    holder_name(p, g, h[n].name, sizeof(h[n].name));
    h[n++].bytes = g->bytes;
  }
  qsort(h, n, sizeof(*h), cmp_holder_name);
  for (size_t i = 0; i < n; i++) {
    if (m && !strcmp(h[m - 1].name, h[i].name))
      h[m - 1].bytes += h[i].bytes;
    else
      h[m++] = h[i];
  }
  qsort(h, m, sizeof(*h), cmp_holder_bytes);
  off = (size_t)snprintf(out, len, "%s", m ? "; top holders:" : "");
  for (size_t i = 0; i < m && i < OOM_TOP_HOLDERS && off < len; i++) {
    format_bytes(h[i].bytes, bytes, sizeof(bytes));
    off += (size_t)snprintf(out + off, len - off, "%s %s %s", i ? "," : "", h[i].name, bytes);
  }
  free(h);
}

enum snapshot_outcome { SNAPSHOT_WRITTEN, SNAPSHOT_EMPTY, SNAPSHOT_ERROR };

/* Builds and writes the snapshot's profile (the pprof windows' memory profile code) and logs
 * the one line. Runs on the worker (or the exit path once the worker was joined). The caller
 * counts the outcome: not if the exit path has counted the snapshot already. */
static enum snapshot_outcome snapshot_write(struct oom_snapshot *s)
{
  char path[PATH_MAX], stamp[32], api[64], req[32], in_use[32], dev[48], at[NAME_MAX_LEN];
  char comment[512], holders[512], lost[96] = "";
  struct profiles_stats st;
  struct profiles *p = NULL;
  struct profiles_options o = {
      .output_dir = output_dir,
      .window_ns = 1,
      .write_files = 1,
      .stacks = stacks,
      .host = host,
      .pid = pid,
      .name = name,
      .origin_ns = s->ev.time_ns,
  };
  enum snapshot_outcome ret = SNAPSHOT_ERROR;
  int n;

  aggregate_api_base_name(s->ev.api, api, sizeof(api));
  format_bytes(s->ev.bytes, req, sizeof(req));
  format_bytes(s->device_in_use, in_use, sizeof(in_use));
  fmt_device(s->ev.device, dev, sizeof(dev));
  files_utc_stamp(s->ev.time_ns, stamp, sizeof(stamp));
  n = snprintf(path, sizeof(path), "%s/gpuprof-%s-gpu_memory_oom-%s.pb.gz", output_dir, name,
               stamp);
  if (s->stackless || s->lost)
    snprintf(lost, sizeof(lost), " (%llu allocations without their stack, %llu left out)",
             (unsigned long long)s->stackless, (unsigned long long)s->lost);
  snprintf(comment, sizeof(comment),
           "GPU out of memory: %s of %llu bytes (%s) failed on %s at %llu ns since the epoch "
           "(UTC %s), thread %u; in use: what the process held at that moment%s",
           api, (unsigned long long)s->ev.bytes, req, dev, (unsigned long long)s->ev.time_ns, stamp,
           s->ev.tid, lost);
  o.file_path = path;
  o.comment = comment;
  if (n < 0 || (size_t)n >= sizeof(path) || !(p = profiles_new(&o, s->ev.time_ns))) {
    log_warn("GPU out of memory: %s of %s failed on %s; cannot write the snapshot (out of "
             "memory or GPUPROF_OUTPUT_DIR too long)",
             api, req, dev);
    goto out;
  }
  for (size_t i = 0; i < OOM_SLOTS; i++) {
    const struct oom_group *g = &s->slots[i];
    struct profiles_memory m = {g->api, g->stack_id, g->device,         g->kind,
                                0,      0,           (int64_t)g->count, (int64_t)g->bytes};
    if (g->used)
      profiles_memory_add(p, 0, &m);
  }
  if (profiles_stack_leaf_name(p, s->ev.stack_id, at, sizeof(at)) != 0)
    snprintf(at, sizeof(at), "an unknown caller (no stack)");
  top_holders(p, s, holders, sizeof(holders));
  if (!s->used) {
    /* Nothing to profile: the process held no memory the agent saw. */
    log_warn("GPU out of memory: %s of %s failed on %s at %s; nothing in use by the process "
             "there; no profile written",
             api, req, dev, at);
    ret = SNAPSHOT_EMPTY;
    goto out;
  }
  profiles_finish(p, s->ev.time_ns + 1);
  profiles_get_stats(p, &st);
  if (!st.files) {
    log_warn("GPU out of memory: %s of %s failed on %s at %s; %s in use by the process there%s; "
             "the profile %s could not be written",
             api, req, dev, at, in_use, holders, path);
    goto out;
  }
  ret = SNAPSHOT_WRITTEN;
  log_warn("GPU out of memory: %s of %s failed on %s at %s; %s in use by the process there%s; "
           "profile: %s",
           api, req, dev, at, in_use, holders, path);
out:
  profiles_free(p);
  return ret;
}

static void take_pending(void)
{
  enum snapshot_outcome done;

  if (!slot_handback(SLOT_READY, SLOT_WRITING))
    return;
  done = snapshot_write(&snap);
  memset(snap.slots, 0, OOM_SLOTS * sizeof(*snap.slots));
  snap.used = 0;
  snap.device_in_use = snap.stackless = snap.lost = 0;
  /* Closed while writing (the worker could not be joined at exit): counted there. */
  if (!slot_handback(SLOT_WRITING, SLOT_FREE))
    return;
  if (done == SNAPSHOT_WRITTEN)
    atomic_fetch_add_explicit(&n_snapshots, 1, memory_order_relaxed);
  else if (done == SNAPSHOT_ERROR)
    atomic_fetch_add_explicit(&n_errors, 1, memory_order_relaxed);
}

static void consumer_tick(void *arg, uint64_t now_ns)
{
  (void)arg;
  (void)now_ns;
  take_pending();
}

int oom_start(const struct config *cfg, struct alloc_map *map, struct stack_table *table)
{
  struct worker_consumer c = {NULL, consumer_tick, NULL};
  int ret;

  /* On demand the live map misses every free made between captures (agent/capture.c keeps a
   * map of its own for that reason): a snapshot from it would name memory long freed. There,
   * failures seen during a capture are only counted. */
  if (!cfg->oom_interval_ns || !map || cfg->mode != CONFIG_MODE_CONTINUOUS)
    return 0;
  allocs = map;
  stacks = table;
  interval_ns = cfg->oom_interval_ns;
  snprintf(output_dir, sizeof(output_dir), "%s", cfg->output_dir);
  files_hostname(host, sizeof(host));
  files_name(name, sizeof(name));
  pid = (int)getpid();
  /* Never freed: an application thread may be filling it while the process exits. */
  snap.slots = calloc(OOM_SLOTS, sizeof(*snap.slots));
  if (!snap.slots) {
    log_warn("out of memory setting up GPU out-of-memory snapshots; none will be written");
    return -ENOMEM;
  }
  ret = worker_add_consumer(&c);
  if (ret) {
    log_warn("cannot register GPU out-of-memory snapshots with the worker; none will be written");
    return ret;
  }
  atomic_store_explicit(&started, 1, memory_order_release);
  return 0;
}

void oom_stop(int worker_joined)
{
  int held;

  if (!atomic_load_explicit(&started, memory_order_acquire))
    return;
  /* A worker that could not be joined may still be inside take_pending: it is left to
   * finish, but what it writes is counted here, before the summary, and never again. */
  if (worker_joined)
    take_pending();
  /* Closed for good: a failure after this (a thread past the agent's state check) is skipped. */
  held = atomic_exchange_explicit(&slot_state, SLOT_CLOSED, memory_order_acq_rel);
  /* Still being filled by a thread that failed during shutdown, ready for a worker that is
   * gone, or being written by one that could not be joined: taken, not written (yet). */
  if (held != SLOT_FREE && held != SLOT_CLOSED)
    atomic_fetch_add_explicit(&n_errors, 1, memory_order_relaxed);
}

void oom_get_stats(struct oom_stats *out)
{
  memset(out, 0, sizeof(*out));
  out->failed = atomic_load_explicit(&n_failed, memory_order_relaxed);
  out->snapshots = atomic_load_explicit(&n_snapshots, memory_order_relaxed);
  out->skipped = atomic_load_explicit(&n_skipped, memory_order_relaxed);
  out->errors = atomic_load_explicit(&n_errors, memory_order_relaxed);
  if (atomic_load_explicit(&first_ready, memory_order_acquire)) {
    out->have_first = 1;
    out->first = first;
  }
}
