/* The trace writer's front end: tracks, nesting repair, size cap and metadata for both encodings.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export/trace_internal.h"

int trace_format_parse(const char *s, enum trace_format *out)
{
  if (!s)
    return -EINVAL;
  if (!strcmp(s, "json"))
    *out = TRACE_FORMAT_JSON;
  else if (!strcmp(s, "json.gz") || !strcmp(s, "gz"))
    *out = TRACE_FORMAT_JSON_GZ;
  else if (!strcmp(s, "perfetto") || !strcmp(s, "pftrace") || !strcmp(s, "proto"))
    *out = TRACE_FORMAT_PERFETTO;
  else
    return -EINVAL;
  return 0;
}

const char *trace_format_suffix(enum trace_format f)
{
  switch (f) {
  case TRACE_FORMAT_JSON:
    return ".json";
  case TRACE_FORMAT_JSON_GZ:
    return ".json.gz";
  case TRACE_FORMAT_PERFETTO:
    return ".pftrace";
  }
  return "";
}

const char *trace_copy_kind_name(unsigned kind)
{
  static const char *const names[] = {"Unknown", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA",
                                      "AtoD",    "DtoA", "DtoD", "HtoH", "PtoP"};
  return kind < sizeof(names) / sizeof(names[0]) ? names[kind] : "Unknown";
}

const char *trace_memory_kind_name(unsigned kind)
{
  static const char *const names[] = {NULL,    "pageable", "pinned",        "device",
                                      "array", "managed",  "device_static", "managed_static"};
  return kind < sizeof(names) / sizeof(names[0]) ? names[kind] : NULL;
}

uint64_t trace_bandwidth_milli(uint64_t bytes, uint64_t dur_ns)
{
  /* bytes per ns is GB/s. Split to keep bytes * 1000 from overflowing for huge copies. */
  if (!dur_ns)
    return 0;
  if (bytes < UINT64_MAX / 1000)
    return bytes * 1000 / dur_ns;
  return bytes / dur_ns * 1000;
}

size_t trace_track_name(const struct trace_writer *w, const struct trace_track *t, char *buf,
                        size_t n)
{
  int len = 0;
  const char *dn;

  switch (t->kind) {
  case TRACK_HOST_PROCESS:
    if (w->meta.process_name)
      len = snprintf(buf, n, "%s", w->meta.process_name);
    else
      len = snprintf(buf, n, "process %u", w->meta.pid);
    break;
  case TRACK_HOST_THREAD:
    len = snprintf(buf, n, "thread %u", t->b);
    break;
  case TRACK_GPU_PROCESS:
    dn = t->a < TRACE_MAX_DEVICES ? w->device_names[t->a] : NULL;
    if (dn)
      len = snprintf(buf, n, "GPU %u (%s)", t->a, dn);
    else
      len = snprintf(buf, n, "GPU %u", t->a);
    break;
  case TRACK_GPU_STREAM:
    len = snprintf(buf, n, "stream %u", t->b);
    break;
  case TRACK_GPU_SYNC:
    /* Lanes are numbered from the second one on: "stream 7 sync", "stream 7 sync 2", ... */
    if (t->b == UINT32_MAX)
      len = t->lane ? snprintf(buf, n, "context sync %u", t->lane + 1)
                    : snprintf(buf, n, "context sync");
    else
      len = t->lane ? snprintf(buf, n, "stream %u sync %u", t->b, t->lane + 1)
                    : snprintf(buf, n, "stream %u sync", t->b);
    break;
  case TRACK_GPU_MEMORY:
    len = snprintf(buf, n, "GPU memory in use");
    break;
  case TRACK_META:
    len = snprintf(buf, n, "gpuprof");
    break;
  case TRACK_HOST_NVTX:
    len =
        t->b ? snprintf(buf, n, "NVTX start/end %u", t->b + 1) : snprintf(buf, n, "NVTX start/end");
    break;
  case TRACK_GPU_NCCL:
    if (t->b < w->n_nccl_comms)
      len = snprintf(buf, n, "NCCL comm %s rank %d/%d", w->nccl_comms[t->b].label,
                     w->nccl_comms[t->b].rank, w->nccl_comms[t->b].nranks);
    else
      len = snprintf(buf, n, "NCCL comm %u", t->b);
    break;
  }
  if (len < 0)
    len = 0;
  return (size_t)len < n ? (size_t)len : n - 1;
}

/* ---- the track table ---- */

static uint32_t track_hash(unsigned kind, uint32_t a, uint32_t b, uint32_t lane)
{
  uint64_t h = ((uint64_t)a << 32 | b) ^ ((uint64_t)kind << 59) ^ ((uint64_t)lane << 40);
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return (uint32_t)h;
}

static int tracks_grow(struct trace_writer *w)
{
  uint32_t ncap = w->tracks_cap ? w->tracks_cap * 2 : 64;
  struct trace_track *nt = calloc(ncap, sizeof(*nt));

  if (!nt)
    return -ENOMEM;
  for (uint32_t i = 0; i < w->tracks_cap; i++) {
    struct trace_track *t = &w->tracks[i];
    if (!t->kind)
      continue;
    uint32_t j = track_hash(t->kind, t->a, t->b, t->lane) & (ncap - 1);
    while (nt[j].kind)
      j = (j + 1) & (ncap - 1);
    nt[j] = *t;
  }
  free(w->tracks);
  w->tracks = nt;
  w->tracks_cap = ncap;
  w->last = NULL;
  return 0;
}

/* Finds or creates a track (lane: a sync track's lane, else 0). */
static struct trace_track *track_get_lane(struct trace_writer *w, unsigned kind, uint32_t a,
                                          uint32_t b, uint32_t lane)
{
  struct trace_track *t = w->last;
  uint32_t i;

  if (t && t->kind == kind && t->a == a && t->b == b && t->lane == lane)
    return t;
  if (w->tracks_cap) {
    i = track_hash(kind, a, b, lane) & (w->tracks_cap - 1);
    for (; w->tracks[i].kind; i = (i + 1) & (w->tracks_cap - 1)) {
      t = &w->tracks[i];
      if (t->kind == kind && t->a == a && t->b == b && t->lane == lane)
        return w->last = t;
    }
  }
  if (w->tracks_len >= TRACE_MAX_TRACKS)
    return NULL;
  if ((w->tracks_len + 1) * 4 > w->tracks_cap * 3 && tracks_grow(w))
    return NULL;
  i = track_hash(kind, a, b, lane) & (w->tracks_cap - 1);
  while (w->tracks[i].kind)
    i = (i + 1) & (w->tracks_cap - 1);
  t = &w->tracks[i];
  memset(t, 0, sizeof(*t));
  t->kind = (uint8_t)kind;
  t->a = a;
  t->b = b;
  t->lane = lane;
  t->uuid = w->next_uuid++;
  w->tracks_len++;
  return w->last = t;
}

static struct trace_track *track_get(struct trace_writer *w, unsigned kind, uint32_t a, uint32_t b)
{
  return track_get_lane(w, kind, a, b, 0);
}

/* The track an event goes on, with its parent described first. NULL: refused (counted).
 * thread_name: a host thread's name, written instead of the default the first time. */
static struct trace_track *track_named(struct trace_writer *w, unsigned kind, uint32_t a,
                                       uint32_t b, uint32_t lane, const char *thread_name)
{
  struct trace_track *t, *parent;

  if (kind != TRACK_HOST_THREAD && kind != TRACK_HOST_PROCESS && kind != TRACK_META &&
      kind != TRACK_HOST_NVTX && a >= TRACE_MAX_DEVICES) {
    w->stats.invalid++;
    return NULL;
  }
  t = track_get_lane(w, kind, a, b, lane);
  if (!t) {
    w->stats.invalid++;
    return NULL;
  }
  if (t->described)
    return t;
  /* Parents first: the encoders name processes before their threads and GPU tracks. */
  if (kind == TRACK_HOST_THREAD || kind == TRACK_HOST_NVTX)
    parent = track_get(w, TRACK_HOST_PROCESS, 0, 0);
  else if (kind == TRACK_GPU_STREAM || kind == TRACK_GPU_SYNC || kind == TRACK_GPU_MEMORY ||
           kind == TRACK_GPU_NCCL)
    parent = track_get(w, TRACK_GPU_PROCESS, a, 0);
  else
    parent = NULL;
  if (parent && !parent->described) {
    if (w->ops->describe(w, parent))
      return NULL;
    parent->described = 1;
  }
  /* track_get may have moved the table while adding the parent. */
  t = track_get_lane(w, kind, a, b, lane);
  if (thread_name ? w->ops->describe_thread(w, t, thread_name) : w->ops->describe(w, t))
    return NULL;
  t->described = 1;
  return t;
}

static struct trace_track *track_for(struct trace_writer *w, unsigned kind, uint32_t a, uint32_t b)
{
  return track_named(w, kind, a, b, 0, NULL);
}

/* Why track_named returned NULL: a write error, the size cap reached by the track's describing
 * event (-EFBIG, as for any event: callers end the capture as truncated, not failed), or a
 * refused track (device out of range, table full: -EINVAL, counted as invalid like a slice that
 * ends before it starts; the capture goes on with the other tracks). */
static int track_error(const struct trace_writer *w)
{
  if (w->out.err)
    return w->out.err;
  return w->stats.stopped ? -EFBIG : -EINVAL;
}

/*
 * Fits [*s, *e) among the slices recently written on t so that the track stays strictly
 * nested: containment either way is fine, a partial overlap is not (Perfetto moves or drops
 * such a slice; CUPTI records of consecutive kernels on a stream can overlap by a few ns, and
 * host timestamps taken at callback entry/exit can disagree with device ones). A slice that
 * starts inside an earlier one and ends after it starts at that one's end; one that starts
 * before and ends inside (or exactly at its start) ends 1 ns before its start, because of the
 * protobuf importer's order for equal timestamps (below). On GPU tracks a slice that starts
 * with an earlier one and ends inside it starts 1 ns later, so that it cannot take the earlier
 * one's flow arrow in JSON (below). Only the last TRACK_RING slices are
 * checked, which covers the near-in-order arrival of CUPTI buffers and of API calls (inner
 * calls complete before the outer ones).
 */
static void track_fit(struct trace_writer *w, struct trace_track *t, uint64_t *ps, uint64_t *pe)
{
  uint64_t s = *ps, e = *pe;
  int changed = 0;

  if (s <= t->max_end) {
    for (int pass = 0; pass < 4; pass++) {
      int moved = 0;
      for (uint32_t i = 0; i < t->ring_len; i++) {
        const struct trace_span *r = &t->ring[i];
        /* Ties matter too. The protobuf importer sorts by timestamp, equal ones in file
         * order, and an END closes the innermost open slice: a slice written after r that
         * ends exactly where r starts would close r, and one that starts with r and outlasts
         * it would nest inside r. So such a slice ends 1 ns before r, and on GPU tracks
         * (where work cannot nest) one starting with r starts at r's end. */
        if (s >= r->start && s < r->end && e > r->end &&
            (s > r->start || t->kind != TRACK_HOST_THREAD)) {
          s = r->end;
          moved = 1;
        } else if (s == r->start && r->start == r->end && e > s && t->kind != TRACK_HOST_THREAD) {
          s = r->end + 1; /* an empty r: starting at its end is starting with it */
          moved = 1;
        } else if (s == r->start && e > s && e <= r->end && t->kind != TRACK_HOST_THREAD) {
          /* Inside r and starting with it: the JSON importer sorts the longer (or, at equal
           * length, earlier) slice first and binds r's flow end, written after r, to the
           * topmost slice at that ts, which would be this one. One ns later it nests. */
          s = r->start + 1;
          moved = 1;
        } else if (s < r->start && e >= r->start && e < r->end) {
          e = r->start - 1;
          moved = 1;
        }
      }
      if (!moved)
        break;
      changed = 1;
    }
    if (e < s)
      e = s;
  }
  if (changed)
    w->stats.clamped++;
  t->written++;
  t->ring[t->ring_pos] = (struct trace_span){s, e};
  t->ring_pos = (t->ring_pos + 1) % TRACK_RING;
  if (t->ring_len < TRACK_RING)
    t->ring_len++;
  if (e > t->max_end)
    t->max_end = e;
  *ps = s;
  *pe = e;
}

int trace_fits(struct trace_writer *w, size_t bytes, int pending)
{
  size_t old_len = w->out.len;

  if (w->stats.stopped) {
    w->stats.discarded++;
    return -EFBIG;
  }
  if (trace_out_size(&w->out) + bytes <= w->cap)
    return 0;
  /* The gzip estimate counts buffered text as incompressible: flush to know for sure. An
   * event already formatted behind the buffered text (pending) moves to the front. */
  if (w->out.gzip && old_len && !trace_out_flush(&w->out)) {
    if (pending)
      memmove(w->out.buf, w->out.buf + old_len, bytes);
    if (trace_out_size(&w->out) + bytes <= w->cap)
      return 0;
  }
  w->stats.stopped = 1;
  w->stats.discarded++;
  return -EFBIG;
}

/* Common checks of an event call: a sticky error or the cap; clamps times to the base. */
static int event_begin(struct trace_writer *w, uint64_t *s, uint64_t *e)
{
  if (w->out.err)
    return w->out.err;
  if (w->stats.stopped) {
    w->stats.discarded++;
    return -EFBIG;
  }
  if (*e < *s || *e < w->meta.base_ns) {
    w->stats.invalid++;
    return -EINVAL;
  }
  if (*s < w->meta.base_ns) {
    *s = w->meta.base_ns;
    w->stats.clamped++;
  }
  return 0;
}

static size_t name_len(const char *name)
{
  size_t n = strnlen(name, TRACE_NAME_MAX);
  return n;
}

static int emit_slice(struct trace_writer *w, struct trace_track *t, struct trace_slice *sl)
{
  int rc;

  track_fit(w, t, &sl->start, &sl->end);
  rc = w->ops->slice(w, t, sl);
  if (rc)
    return rc;
  if (sl->end > w->max_ts)
    w->max_ts = sl->end;
  return 0;
}

int trace_writer_api_slice(struct trace_writer *w, uint32_t tid, const char *name,
                           uint64_t start_ns, uint64_t end_ns, uint32_t corr_id, uint64_t flow_id)
{
  struct trace_track *t;
  struct trace_slice sl;
  int rc = event_begin(w, &start_ns, &end_ns);

  if (rc)
    return rc;
  t = track_for(w, TRACK_HOST_THREAD, 0, tid);
  if (!t)
    return track_error(w);
  sl = (struct trace_slice){.name = name ? name : "?",
                            .start = start_ns,
                            .end = end_ns,
                            .corr_id = corr_id,
                            .flow_out = w->meta.flows ? flow_id : 0};
  sl.name_len = name_len(sl.name);
  return emit_slice(w, t, &sl);
}

/* ---- NVTX ---- */

static const char *nvtx_cat(const char *domain)
{
  return domain && *domain ? domain : "nvtx";
}

int trace_writer_nvtx_range(struct trace_writer *w, uint32_t tid, const char *domain,
                            const char *name, uint64_t start_ns, uint64_t end_ns)
{
  struct trace_track *t;
  struct trace_slice sl;
  int rc = event_begin(w, &start_ns, &end_ns);

  if (rc)
    return rc;
  t = track_for(w, TRACK_HOST_THREAD, 0, tid);
  if (!t)
    return track_error(w);
  sl = (struct trace_slice){
      .name = name ? name : "?", .start = start_ns, .end = end_ns, .cat = nvtx_cat(domain)};
  sl.name_len = name_len(sl.name);
  return emit_slice(w, t, &sl);
}

int trace_writer_nvtx_mark(struct trace_writer *w, uint32_t tid, const char *domain,
                           const char *name, uint64_t ts_ns)
{
  struct trace_track *t;
  struct trace_slice sl;
  uint64_t end = ts_ns;
  int rc = event_begin(w, &ts_ns, &end);

  if (rc)
    return rc;
  t = track_for(w, TRACK_HOST_THREAD, 0, tid);
  if (!t)
    return track_error(w);
  sl = (struct trace_slice){.name = name ? name : "?",
                            .start = ts_ns,
                            .end = ts_ns,
                            .cat = nvtx_cat(domain),
                            .instant = 1};
  sl.name_len = name_len(sl.name);
  /* Not fitted: an instant cannot overlap a slice partially, and it must not move one. */
  rc = w->ops->slice(w, t, &sl);
  if (!rc && ts_ns > w->max_ts)
    w->max_ts = ts_ns;
  return rc;
}

/* The first lane whose ranges all end by start: ranges are written when they end, so a lane
 * whose latest end is <= start holds nothing this one could overlap. */
static uint32_t nvtx_lane(struct trace_writer *w, uint64_t start, uint64_t end)
{
  uint32_t k;

  for (k = 0; k < w->nvtx_lanes; k++)
    if (w->nvtx_lane_end[k] <= start)
      break;
  if (k == w->nvtx_lanes) {
    if (w->nvtx_lanes < TRACE_NVTX_LANES)
      w->nvtx_lanes++;
    else
      k = TRACE_NVTX_LANES - 1; /* shared, clamped by track_fit */
  }
  if (end > w->nvtx_lane_end[k])
    w->nvtx_lane_end[k] = end;
  return k;
}

int trace_writer_nvtx_span(struct trace_writer *w, const char *domain, const char *name,
                           uint64_t start_ns, uint64_t end_ns, uint32_t start_tid, uint32_t end_tid)
{
  struct trace_track *t;
  struct trace_slice sl;
  int rc = event_begin(w, &start_ns, &end_ns);

  if (rc)
    return rc;
  t = track_for(w, TRACK_HOST_NVTX, 0, nvtx_lane(w, start_ns, end_ns));
  if (!t)
    return track_error(w);
  sl = (struct trace_slice){.name = name ? name : "?",
                            .start = start_ns,
                            .end = end_ns,
                            .cat = nvtx_cat(domain),
                            .start_tid = start_tid,
                            .end_tid = end_tid};
  sl.name_len = name_len(sl.name);
  return emit_slice(w, t, &sl);
}

int trace_writer_gpu_slice(struct trace_writer *w, const struct trace_gpu_slice *g)
{
  struct trace_track *t;
  struct trace_slice sl;
  uint64_t s = g->start_ns, e = g->end_ns;
  int rc = event_begin(w, &s, &e);
  char *name = NULL;

  if (rc)
    return rc;
  t = track_for(w, TRACK_GPU_STREAM, g->device, g->stream);
  if (!t)
    return track_error(w);
  sl = (struct trace_slice){.name = g->name,
                            .start = s,
                            .end = e,
                            .corr_id = g->corr_id,
                            .flow_in = w->meta.flows ? g->flow_id : 0,
                            .gpu = g};
  if (!sl.name) {
    static char copy_names[11][20];
    if (g->kind == TRACE_GPU_MEMCPY) {
      unsigned k = g->u.memcpy.copy_kind < 11 ? g->u.memcpy.copy_kind : 0;
      name = copy_names[k];
      if (!name[0])
        snprintf(name, sizeof(copy_names[k]), "Memcpy %s", trace_copy_kind_name(k));
      sl.name = name;
    } else if (g->kind == TRACE_GPU_MEMSET) {
      sl.name = "Memset";
    } else {
      sl.name = "kernel";
    }
  }
  sl.name_len = name_len(sl.name);
  return emit_slice(w, t, &sl);
}

/* The writer's index of a communicator (hash, rank); UINT32_MAX when the table is full. */
static uint32_t nccl_comm_index(struct trace_writer *w, const struct trace_nccl_slice *n)
{
  struct trace_nccl_comm *c;

  for (uint32_t i = 0; i < w->n_nccl_comms; i++)
    if (w->nccl_comms[i].hash == n->comm_hash && w->nccl_comms[i].rank == n->rank)
      return i;
  if (w->n_nccl_comms >= TRACE_MAX_NCCL_COMMS)
    return UINT32_MAX;
  c = &w->nccl_comms[w->n_nccl_comms];
  c->hash = n->comm_hash;
  c->rank = n->rank;
  c->nranks = n->nranks;
  snprintf(c->label, sizeof(c->label), "%s", n->comm_label ? n->comm_label : "?");
  return w->n_nccl_comms++;
}

int trace_writer_nccl_slice(struct trace_writer *w, const struct trace_nccl_slice *n)
{
  struct trace_track *t;
  struct trace_slice sl;
  uint64_t s = n->start_ns, e = n->end_ns;
  int rc = event_begin(w, &s, &e);
  uint32_t idx;

  if (rc)
    return rc;
  idx = nccl_comm_index(w, n);
  if (idx == UINT32_MAX) {
    w->stats.invalid++;
    return -EINVAL;
  }
  t = track_for(w, TRACK_GPU_NCCL, n->device, idx);
  if (!t)
    return track_error(w);
  sl = (struct trace_slice){
      .name = n->func ? n->func : "?", .start = s, .end = e, .corr_id = n->corr_id, .nccl = n};
  sl.name_len = name_len(sl.name);
  return emit_slice(w, t, &sl);
}

/*
 * Whether [s, e] can go on sync lane t as it is: disjoint from every slice on it. Syncs are
 * never nested (each is one host thread's wait, and a thread waits for one thing at a time), so
 * containment does not count as fitting either: another thread's wait drawn inside this one
 * would read as part of it. Touching is fine when this slice (written later) starts where a
 * non-empty one ends; ending where one starts is not (the protobuf importer would close that
 * one with this END), nor is starting at an empty one (JSON would nest it inside this one).
 * All slices of the lane are known while it has at most TRACK_RING; after that only a slice
 * after all of them (the usual case: waits are delivered as they complete) is known to fit.
 */
static int sync_lane_free(const struct trace_track *t, uint64_t s, uint64_t e)
{
  if (!t->written || s > t->max_end)
    return 1;
  if (t->written > TRACK_RING && s < t->max_end)
    return 0;
  for (uint32_t i = 0; i < t->ring_len; i++) {
    const struct trace_span *r = &t->ring[i];
    if (!((s >= r->end && (s > r->end || r->end > r->start)) || e < r->start))
      return 0;
  }
  return 1;
}

/*
 * The track a sync goes on: the first of its stream's lanes it fits on as it is, else a new
 * lane, so concurrent waits of several threads on one stream each get a track of their own
 * (as many as were in progress at once) instead of overlapping, and keep their times. Past
 * TRACE_SYNC_LANES lanes a wait goes on the last one and is clamped like any other slice.
 */
static struct trace_track *sync_lane(struct trace_writer *w, uint32_t device, uint32_t stream,
                                     uint64_t s, uint64_t e)
{
  struct trace_track *t0 = track_for(w, TRACK_GPU_SYNC, device, stream), *t;
  uint32_t lanes;

  if (!t0)
    return NULL;
  if (sync_lane_free(t0, s, e))
    return t0;
  lanes = t0->lanes ? t0->lanes : 1;
  for (uint32_t k = 1; k < lanes; k++) {
    t = track_get_lane(w, TRACK_GPU_SYNC, device, stream, k);
    if (t && sync_lane_free(t, s, e))
      return t;
  }
  /* Out of lanes (or of tracks: a wait is not refused for want of a new one). */
  if (lanes >= TRACE_SYNC_LANES || w->tracks_len >= TRACE_MAX_TRACKS)
    return track_get_lane(w, TRACK_GPU_SYNC, device, stream, lanes - 1);
  t = track_named(w, TRACK_GPU_SYNC, device, stream, lanes, NULL);
  if (!t)
    return NULL;
  /* Adding the lane may have moved the table: look lane 0 up again. */
  t0 = track_get(w, TRACK_GPU_SYNC, device, stream);
  t0->lanes = lanes + 1;
  return track_get_lane(w, TRACK_GPU_SYNC, device, stream, lanes);
}

int trace_writer_sync(struct trace_writer *w, uint32_t device, uint32_t stream, const char *name,
                      uint64_t start_ns, uint64_t end_ns, uint32_t corr_id)
{
  struct trace_track *t;
  struct trace_slice sl;
  int rc = event_begin(w, &start_ns, &end_ns);

  if (rc)
    return rc;
  t = sync_lane(w, device, stream, start_ns, end_ns);
  if (!t)
    return track_error(w);
  sl = (struct trace_slice){
      .name = name ? name : "Synchronize", .start = start_ns, .end = end_ns, .corr_id = corr_id};
  sl.name_len = name_len(sl.name);
  return emit_slice(w, t, &sl);
}

int trace_writer_memory(struct trace_writer *w, uint32_t device, uint64_t ts_ns,
                        uint64_t bytes_in_use)
{
  struct trace_track *t;
  uint64_t e = ts_ns;
  int rc = event_begin(w, &ts_ns, &e);

  if (rc)
    return rc;
  t = track_for(w, TRACK_GPU_MEMORY, device, 0);
  if (!t)
    return track_error(w);
  rc = w->ops->counter(w, t, ts_ns, bytes_in_use);
  if (!rc && ts_ns > w->max_ts)
    w->max_ts = ts_ns;
  return rc;
}

int trace_writer_device(struct trace_writer *w, uint32_t device, const char *name)
{
  struct trace_track *t;
  char *copy;

  if (device >= TRACE_MAX_DEVICES || !name)
    return -EINVAL;
  if (w->out.err)
    return w->out.err;
  copy = strndup(name, 128);
  if (!copy)
    return -ENOMEM;
  free(w->device_names[device]);
  w->device_names[device] = copy;
  if (w->stats.stopped)
    return -EFBIG;
  t = track_get(w, TRACK_GPU_PROCESS, device, 0);
  if (!t)
    return -EINVAL; /* the track table is full */
  t->described = 1;
  return w->ops->describe(w, t);
}

int trace_writer_thread_name(struct trace_writer *w, uint32_t tid, const char *name)
{
  struct trace_track *t;

  if (!name)
    return -EINVAL;
  if (w->out.err)
    return w->out.err;
  if (w->stats.stopped)
    return -EFBIG;
  t = track_get(w, TRACK_HOST_THREAD, 0, tid);
  if (t && t->described) /* renamed: Perfetto keeps the last name */
    return w->ops->describe_thread(w, t, name);
  t = track_named(w, TRACK_HOST_THREAD, 0, tid, 0, name);
  return t ? 0 : track_error(w);
}

/* ---- metadata ---- */

static struct trace_meta_kv *kv_slot(struct trace_writer *w, const char *key)
{
  size_t n = strlen(key);

  if (!n || n >= TRACE_META_KEY_MAX)
    return NULL;
  for (const char *p = key; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_'))
      return NULL;
  for (uint32_t i = 0; i < w->kv_len; i++)
    if (!strcmp(w->kv[i].key, key))
      return &w->kv[i];
  if (w->kv_len >= TRACE_META_MAX)
    return NULL;
  memcpy(w->kv[w->kv_len].key, key, n + 1);
  return &w->kv[w->kv_len++];
}

int trace_writer_meta_uint(struct trace_writer *w, const char *key, uint64_t value)
{
  struct trace_meta_kv *kv = key ? kv_slot(w, key) : NULL;

  if (!kv)
    return -EINVAL;
  kv->is_string = 0;
  kv->u = value;
  return 0;
}

int trace_writer_meta_string(struct trace_writer *w, const char *key, const char *value)
{
  struct trace_meta_kv *kv = key && value ? kv_slot(w, key) : NULL;

  if (!kv)
    return -EINVAL;
  kv->is_string = 1;
  snprintf(kv->s, sizeof(kv->s), "%s", value);
  return 0;
}

void trace_writer_stats(const struct trace_writer *w, struct trace_stats *out)
{
  *out = w->stats;
  out->bytes = w->out.file_bytes;
  out->chunks_deflated = w->out.chunks_deflated;
  out->chunks_stored = w->out.chunks_stored;
}

/* ---- open / close ---- */

static char *dup_opt(const char *s, size_t max)
{
  return s ? strndup(s, max) : NULL;
}

static void writer_free(struct trace_writer *w)
{
  if (w->ops && w->ops->free)
    w->ops->free(w);
  free((char *)w->meta.process_name);
  free((char *)w->meta.command_line);
  free((char *)w->meta.hostname);
  free((char *)w->meta.agent_version);
  for (unsigned i = 0; i < TRACE_MAX_DEVICES; i++)
    free(w->device_names[i]);
  free(w->tracks);
  free(w);
}

struct trace_writer *trace_writer_open(const char *path, enum trace_format format,
                                       const struct trace_meta *meta)
{
  struct trace_writer *w;
  enum trace_out_mode mode;
  int rc, level;

  if (!path || !meta || format > TRACE_FORMAT_PERFETTO ||
      (meta->size_cap_bytes && meta->size_cap_bytes < 2 * TRACE_TAIL_RESERVE)) {
    errno = EINVAL;
    return NULL;
  }
  w = calloc(1, sizeof(*w));
  if (!w) {
    errno = ENOMEM;
    return NULL;
  }
  w->format = format;
  w->ops = format == TRACE_FORMAT_PERFETTO ? &trace_perfetto_ops : &trace_json_ops;
  w->meta = *meta;
  w->meta.process_name = dup_opt(meta->process_name, 256);
  w->meta.command_line = dup_opt(meta->command_line, 2048);
  w->meta.hostname = dup_opt(meta->hostname, 256);
  w->meta.agent_version = dup_opt(meta->agent_version ? meta->agent_version : "gpuprof", 64);
  w->cap = meta->size_cap_bytes ? meta->size_cap_bytes - TRACE_TAIL_RESERVE : UINT64_MAX;
  w->next_uuid = 1;
  w->max_ts = meta->base_ns;
  level = meta->gzip_level >= 1 && meta->gzip_level <= 9 ? meta->gzip_level : 1;
  mode = format == TRACE_FORMAT_JSON_GZ                            ? TRACE_OUT_GZIP
         : format == TRACE_FORMAT_PERFETTO && !meta->pftrace_plain ? TRACE_OUT_PACKETS
                                                                   : TRACE_OUT_PLAIN;
  rc = trace_out_open(&w->out, path, mode, level);
  if (!rc)
    rc = w->ops->begin(w);
  if (rc) {
    trace_out_close(&w->out);
    writer_free(w);
    errno = -rc;
    return NULL;
  }
  return w;
}

int trace_writer_close(struct trace_writer *w)
{
  int rc, rc2;

  if (!w)
    return 0;
  rc = w->out.err ? w->out.err : w->ops->end(w);
  rc2 = trace_out_close(&w->out);
  writer_free(w);
  return rc ? rc : rc2;
}
