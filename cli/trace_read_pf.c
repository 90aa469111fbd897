/* The agent's .pftrace read back as trace_read's events: tracks, clocks and interning undone. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/util/hash.h"
#include "cli/trace_read.h"
#include "cli/tracefile.h"
#include "export/trace_internal.h"
#include "export/utf8.h"

/*
 * export/perfetto.c's layout, undone packet by packet. Sequence 1 holds the track descriptors
 * and the "trace start"/"trace end" metadata instants (absolute REALTIME); every track with
 * events has a sequence of its own whose first packet sets its track, an incremental clock (id
 * 64, based by a ClockSnapshot against REALTIME) and its interned tables. A slice is a BEGIN and
 * an END on its track: the BEGIN waits on the track's stack until its END gives the duration,
 * and the JSON encoding's arguments are rebuilt from the BEGIN's fields and the track.
 *
 * Memory is per track and per sequence (its interned strings, held once in a pool by content:
 * the writer defines a name again on every sequence that uses it), bounded by the writer's own
 * limits (uuids, interning tables); a file past them is not the agent's.
 */

typedef Gpuprof__Perfetto__TracePacket Packet;
typedef Gpuprof__Perfetto__TrackEvent Event;
typedef Gpuprof__Perfetto__TrackDescriptor Descriptor;
typedef Gpuprof__Perfetto__DebugAnnotation Annotation;
typedef Gpuprof__Perfetto__InternedData Interned;

#define CLOCK_ID_REALTIME 1
#define CLOCK_ID_TRACK 64
#define SEQ_CLEARED 1 /* SEQ_INCREMENTAL_STATE_CLEARED */
/* trace.c's uuids count from 1 to TRACE_MAX_TRACKS, perfetto.c's metadata track is the next;
 * a track's sequence is its uuid + 1. */
#define UUID_MAX ((uint64_t)TRACE_MAX_TRACKS + 1)
#define SEQ_MAX (UUID_MAX + 1)
/* The writer writes a slice's BEGIN and END together: more open at once is not its file. */
#define STACK_MAX 64u
/* The writer interns at most 65536 names and 65536 launch strings of 16 MiB each (perfetto.c
 * INTERN_MAX, INTERN_BYTES_MAX), plus its fixed categories and annotation names. */
#define SEQ_INTERNED_MAX (2u * 65536u + 64u)
#define POOL_BYTES_MAX (48u << 20)
#define NCCL_RANK0 (-1000000) /* trace_nccl_rank(0) */

enum pf_track_kind {
  PT_NONE = 0,
  PT_META, /* the writer's "gpuprof" track: metadata instants */
  PT_HOST_PROCESS,
  PT_GPU_PROCESS,
  PT_EVENTS, /* from here on: tracks with events, kind in trace_read.h's terms */
};

/* A slice whose BEGIN was read and whose END was not yet. */
struct open_slice {
  uint64_t ts;
  const char *name, *cat; /* pooled, or name_own */
  char *name_own;         /* a name written inline (the writer's table was full) */
  json_object *args;
};

struct pf_track {
  uint8_t kind; /* enum pf_track_kind */
  enum tr_track track;
  uint32_t device, id;
  struct open_slice *stack;
  uint32_t depth, cap;
};

enum { IN_NAME, IN_STRING, IN_CAT, IN_ANN };

struct interned {
  uint64_t iid;
  const char *s; /* pooled; NULL: an empty slot */
  uint8_t kind;
};

struct pf_seq {
  struct interned *tab; /* open addressing by (kind, iid) */
  uint32_t cap, len;
  uint32_t ts_clock; /* trace_packet_defaults' timestamp clock; 0: none */
  int has_track, has_clock;
  uint64_t track;
  uint64_t clock;  /* the incremental clock's value */
  uint64_t offset; /* REALTIME - the incremental clock, mod 2^64 */
};

/* Strings by content: every sequence's copy of a name is one string here. */
struct pool {
  char **keys;
  uint32_t cap, len;
  size_t bytes;
};

struct reader {
  const char *path;
  const struct tr_sink *sink;
  struct pool pool;
  struct pf_track *tracks; /* by uuid */
  uint32_t ntracks;
  struct pf_seq **seqs; /* by sequence id */
  uint32_t nseqs;
  uint64_t packet; /* the packet being read, from 1 */
  int started, ended;
  json_object *meta; /* "trace start" and "trace end" keys */
  char *process_name;
};

static uint64_t hash_bytes(const char *s, size_t n)
{
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++)
    h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
  return h;
}

/* A malloc'd copy of s (n bytes) with invalid UTF-8 repaired as the JSON encoding repairs it:
 * the writer fixes names, but writes metadata strings (hostname, command line) as they are. */
static char *fixed_dup(const char *s, size_t n)
{
  char *c = strndup(s, n);

  if (c && utf8_valid_prefix(c, strlen(c)) != strlen(c))
    utf8_fix(c);
  return c;
}

static int fail(struct reader *rd, const char *what)
{
  return tf_fail(rd->path, "packet %" PRIu64 ": %s: not a gpuprof trace", rd->packet, what);
}

static int nomem(struct reader *rd)
{
  return tf_io_fail(rd->path, "cannot read", ENOMEM);
}

/* The pooled copy of s (n bytes, repaired); NULL when out of memory or past the bound. */
static const char *pool_get(struct pool *p, const char *s, size_t n)
{
  char *c = fixed_dup(s, n);
  uint32_t i;

  if (!c)
    return NULL;
  n = strlen(c);
  if ((p->len + 1) * 2 > p->cap) {
    uint32_t ncap = p->cap ? p->cap * 2 : 256;
    char **nk = calloc(ncap, sizeof(*nk));
    if (!nk)
      goto fail;
    for (uint32_t j = 0; j < p->cap; j++) {
      if (!p->keys[j])
        continue;
      uint32_t k = (uint32_t)hash_bytes(p->keys[j], strlen(p->keys[j])) & (ncap - 1);
      while (nk[k])
        k = (k + 1) & (ncap - 1);
      nk[k] = p->keys[j];
    }
    free(p->keys);
    p->keys = nk;
    p->cap = ncap;
  }
  for (i = (uint32_t)hash_bytes(c, n) & (p->cap - 1); p->keys[i]; i = (i + 1) & (p->cap - 1))
    if (!strcmp(p->keys[i], c)) {
      free(c);
      return p->keys[i];
    }
  if (p->bytes + n + 1 > POOL_BYTES_MAX)
    goto fail;
  p->keys[i] = c;
  p->len++;
  p->bytes += n + 1;
  return c;
fail:
  free(c);
  return NULL;
}

static void pool_free(struct pool *p)
{
  for (uint32_t i = 0; i < p->cap; i++)
    free(p->keys[i]);
  free(p->keys);
}

static const char *seq_lookup(const struct pf_seq *q, int kind, uint64_t iid)
{
  if (!q->cap)
    return NULL;
  for (uint32_t i = (uint32_t)hash_u64(iid * 4 + (uint64_t)kind) & (q->cap - 1); q->tab[i].s;
       i = (i + 1) & (q->cap - 1))
    if (q->tab[i].iid == iid && q->tab[i].kind == kind)
      return q->tab[i].s;
  return NULL;
}

/* Defines (or redefines) iid in the sequence; 0, -ENOMEM or -E2BIG (past the writer's bound). */
static int seq_define(struct pf_seq *q, int kind, uint64_t iid, const char *s)
{
  uint32_t i;

  if ((q->len + 1) * 2 > q->cap) {
    uint32_t ncap = q->cap ? q->cap * 2 : 64;
    struct interned *nt;
    if (q->len >= SEQ_INTERNED_MAX)
      return -E2BIG;
    nt = calloc(ncap, sizeof(*nt));
    if (!nt)
      return -ENOMEM;
    for (uint32_t j = 0; j < q->cap; j++) {
      if (!q->tab[j].s)
        continue;
      uint32_t k = (uint32_t)hash_u64(q->tab[j].iid * 4 + q->tab[j].kind) & (ncap - 1);
      while (nt[k].s)
        k = (k + 1) & (ncap - 1);
      nt[k] = q->tab[j];
    }
    free(q->tab);
    q->tab = nt;
    q->cap = ncap;
  }
  for (i = (uint32_t)hash_u64(iid * 4 + (uint64_t)kind) & (q->cap - 1); q->tab[i].s;
       i = (i + 1) & (q->cap - 1))
    if (q->tab[i].iid == iid && q->tab[i].kind == kind) {
      q->tab[i].s = s;
      return 0;
    }
  q->tab[i] = (struct interned){.iid = iid, .s = s, .kind = (uint8_t)kind};
  q->len++;
  return 0;
}

/* Grows a by-id array of elem-byte entries to hold index id (zeroed); 0 or -ENOMEM. */
static int grow(void **arr, uint32_t *n, uint64_t id, size_t elem)
{
  uint64_t ncap = *n ? *n : 16;
  void *na;

  if (id < *n)
    return 0;
  while (ncap <= id)
    ncap *= 2;
  na = realloc(*arr, ncap * elem);
  if (!na)
    return -ENOMEM;
  memset((char *)na + *n * elem, 0, (ncap - *n) * elem);
  *arr = na;
  *n = (uint32_t)ncap;
  return 0;
}

/* The sequence's state, created on first use; NULL (reported in *rc) when out of range. */
static struct pf_seq *seq_of(struct reader *rd, uint32_t id, int *rc)
{
  if (!id || id > SEQ_MAX) {
    *rc = fail(rd, "a packet without a sequence id the writer uses");
    return NULL;
  }
  if (grow((void **)&rd->seqs, &rd->nseqs, id, sizeof(*rd->seqs)))
    goto oom;
  if (!rd->seqs[id] && !(rd->seqs[id] = calloc(1, sizeof(struct pf_seq))))
    goto oom;
  return rd->seqs[id];
oom:
  *rc = nomem(rd);
  return NULL;
}

static struct pf_track *track_of(struct reader *rd, uint64_t uuid)
{
  return uuid < rd->ntracks ? &rd->tracks[uuid] : NULL;
}

/* ---- sequence state: clocks, defaults, interned data ---- */

static int intern_all(struct reader *rd, struct pf_seq *q, const Interned *in)
{
  struct {
    int kind;
    uint64_t iid;
    const char *s;
    size_t n;
  } e;
  size_t total = in->n_event_categories + in->n_event_names + in->n_debug_annotation_names +
                 in->n_debug_annotation_string_values;

  for (size_t i = 0; i < total; i++) {
    size_t k = i;
    const char *s;
    int rc;

    /* The four tables in one loop; an entry without its iid or string is not the writer's. */
    if (k < in->n_event_categories) {
      const Gpuprof__Perfetto__EventCategory *c = in->event_categories[k];
      e.kind = IN_CAT, e.iid = c->has_iid ? c->iid : 0, e.s = c->name;
    } else if ((k -= in->n_event_categories) < in->n_event_names) {
      const Gpuprof__Perfetto__EventName *c = in->event_names[k];
      e.kind = IN_NAME, e.iid = c->has_iid ? c->iid : 0, e.s = c->name;
    } else if ((k -= in->n_event_names) < in->n_debug_annotation_names) {
      const Gpuprof__Perfetto__DebugAnnotationName *c = in->debug_annotation_names[k];
      e.kind = IN_ANN, e.iid = c->has_iid ? c->iid : 0, e.s = c->name;
    } else {
      const Gpuprof__Perfetto__InternedString *c =
          in->debug_annotation_string_values[k - in->n_debug_annotation_names];
      e.kind = IN_STRING, e.iid = c->has_iid ? c->iid : 0;
      e.s = c->has_str ? (const char *)c->str.data : NULL;
      e.n = c->has_str ? c->str.len : 0;
    }
    if (!e.iid || !e.s)
      return fail(rd, "an interned entry without its id or string");
    if (e.kind != IN_STRING)
      e.n = strlen(e.s);
    s = pool_get(&rd->pool, e.s, e.n);
    if (!s)
      return rd->pool.bytes + e.n + 1 > POOL_BYTES_MAX ? fail(rd, "too many interned strings")
                                                       : nomem(rd);
    rc = seq_define(q, e.kind, e.iid, s);
    if (rc)
      return rc == -E2BIG ? fail(rd, "too many interned strings on one sequence") : nomem(rd);
  }
  return 0;
}

/* What a packet sets for its sequence: cleared state, defaults, the track clock's base. */
static int seq_update(struct reader *rd, struct pf_seq *q, uint32_t id, const Packet *pkt)
{
  if (pkt->has_sequence_flags && (pkt->sequence_flags & SEQ_CLEARED)) {
    free(q->tab);
    q->tab = NULL;
    q->cap = q->len = 0;
  }
  if (pkt->trace_packet_defaults) {
    const Gpuprof__Perfetto__TracePacketDefaults *d = pkt->trace_packet_defaults;
    if (d->has_timestamp_clock_id)
      q->ts_clock = d->timestamp_clock_id;
    if (d->track_event_defaults && d->track_event_defaults->has_track_uuid) {
      q->has_track = 1;
      q->track = d->track_event_defaults->track_uuid;
    }
  }
  if (pkt->data_case == GPUPROF__PERFETTO__TRACE_PACKET__DATA_CLOCK_SNAPSHOT && id != 1) {
    /* A track's clock: its value and REALTIME's at the same instant (both the base time). */
    const Gpuprof__Perfetto__ClockSnapshot *c = pkt->clock_snapshot;
    int have = 0;
    uint64_t track = 0, real = 0;
    for (size_t i = 0; i < c->n_clocks; i++) {
      if (!c->clocks[i]->has_clock_id || !c->clocks[i]->has_timestamp)
        continue;
      if (c->clocks[i]->clock_id == CLOCK_ID_TRACK && c->clocks[i]->is_incremental) {
        track = c->clocks[i]->timestamp;
        have |= 1;
      } else if (c->clocks[i]->clock_id == CLOCK_ID_REALTIME) {
        real = c->clocks[i]->timestamp;
        have |= 2;
      }
    }
    if (have != 3)
      return fail(rd, "a track's clock snapshot without its clock and REALTIME");
    q->has_clock = 1;
    q->clock = track;
    q->offset = real - track;
  }
  return pkt->interned_data ? intern_all(rd, q, pkt->interned_data) : 0;
}

/* An event packet's absolute REALTIME timestamp: REALTIME as it is, or the track clock moved
 * on by the delta. */
static int event_ts(struct reader *rd, struct pf_seq *q, const Packet *pkt, uint64_t *ts)
{
  uint32_t clock = pkt->has_timestamp_clock_id ? pkt->timestamp_clock_id : q->ts_clock;

  if (!pkt->has_timestamp)
    return fail(rd, "an event without a timestamp");
  if (clock == CLOCK_ID_REALTIME) {
    *ts = pkt->timestamp;
    return 0;
  }
  if (clock != CLOCK_ID_TRACK || !q->has_clock)
    return fail(rd, "an event timestamp on a clock the writer does not use");
  q->clock += pkt->timestamp;
  *ts = q->clock + q->offset;
  return 0;
}

/* ---- track descriptors ---- */

/* Decimal digits at *s as a value <= max into *v (no sign, no space); 0 or -EINVAL. */
static int digits(const char **s, uint64_t max, uint64_t *v)
{
  const char *p = *s;
  uint64_t x = 0;

  if (*p < '0' || *p > '9')
    return -EINVAL;
  for (; *p >= '0' && *p <= '9'; p++) {
    if (x > (max - (uint64_t)(*p - '0')) / 10)
      return -EINVAL;
    x = x * 10 + (uint64_t)(*p - '0');
  }
  *s = p;
  *v = x;
  return 0;
}

/* s after prefix, or NULL. */
static const char *after(const char *s, const char *prefix)
{
  size_t n = strlen(prefix);
  return strncmp(s, prefix, n) ? NULL : s + n;
}

/* Lane k >= 2 of a lane name's " <k>" suffix at s (trace.c numbers lanes from the second one on
 * as lane + 1), or 0 for the first lane (an empty suffix); -EINVAL otherwise. */
static int64_t lane_suffix(const char *s)
{
  uint64_t k;

  if (!*s)
    return 0;
  if (*s != ' ' || (s++, digits(&s, UINT32_MAX, &k)) || *s || k < 2)
    return -EINVAL;
  return (int64_t)k - 1;
}

/* A GPU's child track by its name (trace.c trace_track_name). */
static int gpu_child(struct pf_track *t, const Descriptor *d, const char *name)
{
  const char *s;
  uint64_t v;
  int64_t lane;

  if (d->counter || !strcmp(name, "GPU memory in use")) {
    t->track = TR_GPU_MEMORY;
    t->id = 0;
  } else if ((s = after(name, "NCCL comm "))) {
    /* The name holds the communicator's label, rank and size; the writer's index of it, which
     * the JSON encoding's tid holds, is in the sort rank (trace_nccl_rank). */
    if (!d->has_sibling_order_rank || d->sibling_order_rank < NCCL_RANK0 ||
        d->sibling_order_rank > NCCL_RANK0 + 0xffff)
      return -EINVAL;
    t->track = TR_GPU_NCCL;
    t->id = (uint32_t)(d->sibling_order_rank - NCCL_RANK0);
  } else if ((s = after(name, "context sync"))) {
    if ((lane = lane_suffix(s)) < 0)
      return -EINVAL;
    t->track = TR_GPU_SYNC;
    t->id = UINT32_MAX;
  } else if ((s = after(name, "stream ")) && !digits(&s, UINT32_MAX, &v)) {
    if (!*s) {
      t->track = TR_GPU_STREAM;
    } else if ((s = after(s, " sync")) && lane_suffix(s) >= 0) {
      t->track = TR_GPU_SYNC;
    } else {
      return -EINVAL;
    }
    t->id = (uint32_t)v;
  } else {
    return -EINVAL;
  }
  return 0;
}

static int on_descriptor(struct reader *rd, const Descriptor *d)
{
  const char *name = d->static_or_dynamic_name_case ==
                             GPUPROF__PERFETTO__TRACK_DESCRIPTOR__STATIC_OR_DYNAMIC_NAME_NAME
                         ? d->name
                         : NULL;
  struct pf_track *t, *parent, nt;
  char *fixed = NULL;
  const char *s;
  uint64_t v;

  if (!d->has_uuid || !d->uuid || d->uuid > UUID_MAX)
    return fail(rd, "a track uuid the writer does not use");
  if (grow((void **)&rd->tracks, &rd->ntracks, d->uuid, sizeof(*rd->tracks)))
    return nomem(rd);
  t = &rd->tracks[d->uuid];
  parent = d->has_parent_uuid ? track_of(rd, d->parent_uuid) : NULL;
  memset(&nt, 0, sizeof(nt));
  if (!rd->started && !(name && !strcmp(name, "gpuprof") && !d->has_parent_uuid))
    return fail(rd, "a track described before the \"trace start\" metadata");

  if (d->process) {
    nt.kind = PT_HOST_PROCESS;
    if (d->process->process_name) {
      free(rd->process_name);
      rd->process_name = fixed_dup(d->process->process_name, strlen(d->process->process_name));
      if (!rd->process_name)
        return nomem(rd);
    }
  } else if (d->thread) {
    if (!d->thread->has_tid || d->thread->tid < 0 || d->thread->tid > UINT32_MAX)
      return fail(rd, "a thread without a 32-bit tid");
    nt.kind = PT_EVENTS;
    nt.track = TR_HOST_THREAD;
    nt.id = (uint32_t)d->thread->tid;
    name = d->thread->thread_name;
  } else if (!name) {
    return fail(rd, "a track without a name");
  } else if (!d->has_parent_uuid) {
    if (!strcmp(name, "gpuprof")) {
      nt.kind = PT_META;
    } else if ((s = after(name, "GPU ")) && !digits(&s, UINT32_MAX, &v) &&
               (!*s || (*s == ' ' && s[1] == '(' && s[strlen(s) - 1] == ')'))) {
      nt.kind = PT_GPU_PROCESS;
      nt.device = (uint32_t)v;
    } else {
      return fail(rd, "a top-level track that is neither a process, a GPU nor \"gpuprof\"");
    }
  } else if (parent && parent->kind == PT_GPU_PROCESS) {
    nt.kind = PT_EVENTS;
    nt.device = parent->device;
    if (gpu_child(&nt, d, name))
      return fail(rd, "a GPU track whose name the writer does not write");
  } else if (parent && parent->kind == PT_HOST_PROCESS && (s = after(name, "NVTX start/end")) &&
             lane_suffix(s) >= 0) {
    nt.kind = PT_EVENTS;
    nt.track = TR_HOST_NVTX;
    nt.id = (uint32_t)lane_suffix(s);
  } else {
    return fail(rd, "a track whose parent and name the writer does not write");
  }

  /* Described again: a renamed thread or device, nothing else moves. */
  if (t->kind &&
      (t->kind != nt.kind || t->track != nt.track || t->device != nt.device || t->id != nt.id))
    return fail(rd, "a track described again as another one");
  if (!t->kind) {
    t->kind = nt.kind;
    t->track = nt.track;
    t->device = nt.device;
    t->id = nt.id;
  }
  if ((t->track == TR_HOST_THREAD || t->kind == PT_GPU_PROCESS) && name) {
    fixed = fixed_dup(name, strlen(name));
    if (!fixed)
      return nomem(rd);
    if (t->track == TR_HOST_THREAD && rd->sink->thread)
      rd->sink->thread(rd->sink->ctx, t->id, fixed);
    else if (t->kind == PT_GPU_PROCESS && rd->sink->device)
      rd->sink->device(rd->sink->ctx, t->device, fixed);
    free(fixed);
  }
  return 0;
}

/* ---- events ---- */

/* Appends n to o (o owns it); 0 or -ENOMEM. */
static int add(json_object *o, const char *key, json_object *v)
{
  if (!v)
    return -ENOMEM;
  return json_object_object_add(o, key, v) ? -ENOMEM : 0;
}

static json_object *new_u64(uint64_t v)
{
  /* As json-c parses the JSON encoding's numbers: int64 while they fit. */
  return v <= INT64_MAX ? json_object_new_int64((int64_t)v) : json_object_new_uint64(v);
}

static json_object *new_string(const char *s)
{
  char *c;
  json_object *o;

  if (utf8_valid_prefix(s, strlen(s)) == strlen(s))
    return json_object_new_string(s);
  c = fixed_dup(s, strlen(s));
  o = c ? json_object_new_string(c) : NULL;
  free(c);
  return o;
}

/* A literal at *s, skipped; 0 or -EINVAL. */
static int lit(const char **s, const char *l)
{
  const char *p = after(*s, l);

  if (!p)
    return -EINVAL;
  *s = p;
  return 0;
}

/* A signed 32-bit number at *s (perfetto.c's %d). */
static int int32_at(const char **s, int64_t *v)
{
  uint64_t u;
  int neg = **s == '-';

  if (neg)
    (*s)++;
  if (digits(s, neg ? (uint64_t)INT32_MAX + 1 : INT32_MAX, &u))
    return -EINVAL;
  *v = neg ? -(int64_t)u : (int64_t)u;
  return 0;
}

/*
 * A kernel's interned launch string ("grid [80,2,1] block [256,1,1] registers 32 shared_mem
 * 1024", perfetto.c launch_iid) as the JSON encoding's arguments: "grid" and "block" arrays,
 * "regs", and "smem" unless 0 (JSON leaves it out when static and dynamic shared memory are
 * both 0, the only way their sum is 0). 1 when done, 0 when s is not in that form exactly (the
 * caller keeps it as "launch"), -ENOMEM.
 */
static int launch_args(json_object *args, const char *s)
{
  int64_t dim[6];
  uint64_t regs, smem;
  const char *p = s;
  char back[192];
  json_object *grid, *block;

  if (lit(&p, "grid ["))
    return 0;
  for (int i = 0; i < 6; i++) {
    if (i == 3 && lit(&p, "] block ["))
      return 0;
    if ((i % 3 && lit(&p, ",")) || int32_at(&p, &dim[i]))
      return 0;
  }
  if (lit(&p, "] registers ") || digits(&p, UINT32_MAX, &regs) || lit(&p, " shared_mem ") ||
      digits(&p, UINT64_MAX, &smem) || *p)
    return 0;
  /* Exactly as the writer formats it (no leading zeros, "-0"), so the values are the ones it
   * had. */
  snprintf(back, sizeof(back), "grid [%d,%d,%d] block [%d,%d,%d] registers %u shared_mem %llu",
           (int)dim[0], (int)dim[1], (int)dim[2], (int)dim[3], (int)dim[4], (int)dim[5],
           (unsigned)regs, (unsigned long long)smem);
  if (strcmp(back, s))
    return 0;
  grid = json_object_new_array_ext(3);
  block = json_object_new_array_ext(3);
  if (!grid || !block) {
    json_object_put(grid);
    json_object_put(block);
    return -ENOMEM;
  }
  for (int i = 0; i < 3; i++) {
    json_object_array_add(grid, json_object_new_int64(dim[i]));
    json_object_array_add(block, json_object_new_int64(dim[3 + i]));
  }
  if (json_object_array_length(grid) != 3 || json_object_array_length(block) != 3) {
    json_object_put(grid);
    json_object_put(block);
    return -ENOMEM;
  }
  if (add(args, "grid", grid) || add(args, "block", block) ||
      add(args, "regs", json_object_new_int64((int64_t)regs)) ||
      (smem && add(args, "smem", new_u64(smem))))
    return -ENOMEM;
  return 1;
}

/* A bandwidth as the JSON encoding writes it: thousandths, "%llu.%03u" (put_milli). */
static json_object *new_milli(double v)
{
  char text[48];
  double m = v * 1000.0;
  uint64_t milli;

  if (!(m >= 0 && m < 9007199254740992.0) || (double)(uint64_t)llround(m) / 1000.0 != v)
    return json_object_new_double(v);
  milli = (uint64_t)llround(m);
  snprintf(text, sizeof(text), "%llu.%03u", (unsigned long long)(milli / 1000),
           (unsigned)(milli % 1000));
  return json_object_new_double_s(v, text);
}

/* Whether an NCCL annotation is one the JSON encoding writes signed (put_i64): perfetto.c
 * casts those ints to uint64, so a negative one comes back as its two's complement. */
static int nccl_signed(const char *name)
{
  return !strcmp(name, "rank") || !strcmp(name, "nranks") || !strcmp(name, "root") ||
         !strcmp(name, "peer");
}

/* The debug annotations into args, under the JSON encoding's names and types. */
static int annotations(struct reader *rd, const struct pf_seq *q, const Event *ev, int nccl,
                       json_object *args)
{
  for (size_t i = 0; i < ev->n_debug_annotations; i++) {
    const Annotation *a = ev->debug_annotations[i];
    const char *name = NULL, *str;
    json_object *v;
    int rc;

    if (a->name_field_case == GPUPROF__PERFETTO__DEBUG_ANNOTATION__NAME_FIELD_NAME_IID)
      name = seq_lookup(q, IN_ANN, a->name_iid);
    else if (a->name_field_case == GPUPROF__PERFETTO__DEBUG_ANNOTATION__NAME_FIELD_NAME)
      name = a->name;
    if (!name || utf8_valid_prefix(name, strlen(name)) != strlen(name))
      return fail(rd, "an argument without a UTF-8 name the sequence defines");
    switch (a->value_case) {
    case GPUPROF__PERFETTO__DEBUG_ANNOTATION__VALUE_UINT_VALUE:
      v = nccl && nccl_signed(name) ? json_object_new_int64((int64_t)a->uint_value)
                                    : new_u64(a->uint_value);
      break;
    case GPUPROF__PERFETTO__DEBUG_ANNOTATION__VALUE_INT_VALUE:
      v = json_object_new_int64(a->int_value);
      break;
    case GPUPROF__PERFETTO__DEBUG_ANNOTATION__VALUE_BOOL_VALUE:
      v = json_object_new_boolean(a->bool_value);
      break;
    case GPUPROF__PERFETTO__DEBUG_ANNOTATION__VALUE_DOUBLE_VALUE:
      v = !strcmp(name, "bandwidth_gbps") ? new_milli(a->double_value)
                                          : json_object_new_double(a->double_value);
      break;
    case GPUPROF__PERFETTO__DEBUG_ANNOTATION__VALUE_STRING_VALUE:
    case GPUPROF__PERFETTO__DEBUG_ANNOTATION__VALUE_STRING_VALUE_IID:
      str = a->value_case == GPUPROF__PERFETTO__DEBUG_ANNOTATION__VALUE_STRING_VALUE
                ? a->string_value
                : seq_lookup(q, IN_STRING, a->string_value_iid);
      if (!str)
        return fail(rd, "an argument's interned string the sequence does not define");
      if (!strcmp(name, "launch")) {
        rc = launch_args(args, str);
        if (rc < 0)
          return nomem(rd);
        if (rc)
          continue;
      }
      v = new_string(str);
      break;
    default:
      return fail(rd, "an argument without a value");
    }
    if (add(args, name, v))
      return nomem(rd);
  }
  return 0;
}

static int has_annotation(const Event *ev, const char *name)
{
  for (size_t i = 0; i < ev->n_debug_annotations; i++)
    if (ev->debug_annotations[i]->name_field_case ==
            GPUPROF__PERFETTO__DEBUG_ANNOTATION__NAME_FIELD_NAME &&
        !strcmp(ev->debug_annotations[i]->name, name))
      return 1;
  return 0;
}

/*
 * A BEGIN's or an instant's arguments as trace_json.c writes them. Every slice but NVTX ones
 * has "correlation", 0 included, except a pending NCCL op never launched (json_slice); GPU work
 * has "stream", its track's; NVTX ranges have none but the start/end lanes' thread ids.
 */
static int event_args(struct reader *rd, const struct pf_seq *q, const struct pf_track *t,
                      const Event *ev, const char *cat, json_object **out)
{
  int nvtx = ev->n_categories > 0, nccl = !nvtx && !strcmp(cat, "nccl");
  json_object *args;
  int rc;

  *out = NULL;
  if (nvtx && !ev->n_debug_annotations)
    return 0;
  args = json_object_new_object();
  if (!args)
    return nomem(rd);
  if (!nvtx && !(nccl && !ev->correlation_id_field_case && has_annotation(ev, "state")) &&
      add(args, "correlation", new_u64(ev->correlation_id_field_case ? ev->correlation_id : 0)))
    goto oom;
  if (!nvtx && !nccl && t->track == TR_GPU_STREAM && add(args, "stream", new_u64(t->id)))
    goto oom;
  rc = annotations(rd, q, ev, nccl, args);
  if (rc) {
    json_object_put(args);
    return rc;
  }
  *out = args;
  return 0;
oom:
  json_object_put(args);
  return nomem(rd);
}

static void deliver(struct reader *rd, const struct pf_track *t, enum tr_kind kind, const char *cat,
                    const char *name, uint64_t ts, uint64_t dur, uint64_t value, json_object *args)
{
  struct tr_event e = {.kind = kind,
                       .track = t->track,
                       .device =
                           t->track == TR_HOST_THREAD || t->track == TR_HOST_NVTX ? 0 : t->device,
                       .id = t->id,
                       .cat = cat,
                       .name = name,
                       .ts_ns = ts,
                       .dur_ns = dur,
                       .value = value,
                       .args = args};

  if (rd->sink->event && (!rd->sink->only_cat || !strcmp(cat, rd->sink->only_cat)))
    rd->sink->event(rd->sink->ctx, &e);
}

/* The metadata instants' annotations into rd->meta, as the JSON encoding's "metadata" has
 * them: base_time_ns is a string here (a JSON number there). */
static int on_meta(struct reader *rd, const Event *ev, int start)
{
  for (size_t i = 0; i < ev->n_debug_annotations; i++) {
    const Annotation *a = ev->debug_annotations[i];
    json_object *v;

    if (a->name_field_case != GPUPROF__PERFETTO__DEBUG_ANNOTATION__NAME_FIELD_NAME ||
        utf8_valid_prefix(a->name, strlen(a->name)) != strlen(a->name))
      return fail(rd, "a metadata key that is not UTF-8 named inline");
    if (!strcmp(a->name, "base_time_ns")) {
      const char *s = a->value_case == GPUPROF__PERFETTO__DEBUG_ANNOTATION__VALUE_STRING_VALUE
                          ? a->string_value
                          : "";
      uint64_t base;
      if (digits(&s, UINT64_MAX, &base) || *s)
        return fail(rd, "a base_time_ns that is not digits");
      v = new_u64(base);
    } else if (a->value_case == GPUPROF__PERFETTO__DEBUG_ANNOTATION__VALUE_STRING_VALUE) {
      if (!strcmp(a->name, "trace_writer") && !after(a->string_value, "gpuprof trace "))
        return fail(rd, "its trace_writer is not gpuprof's");
      v = new_string(a->string_value);
    } else if (a->value_case == GPUPROF__PERFETTO__DEBUG_ANNOTATION__VALUE_UINT_VALUE) {
      v = new_u64(a->uint_value);
    } else if (a->value_case == GPUPROF__PERFETTO__DEBUG_ANNOTATION__VALUE_INT_VALUE) {
      v = json_object_new_int64(a->int_value);
    } else {
      return fail(rd, "a metadata value that is neither a string nor a number");
    }
    if (add(rd->meta, a->name, v))
      return nomem(rd);
  }
  if (start && !json_object_object_get_ex(rd->meta, "trace_writer", NULL))
    return fail(rd, "no trace_writer in the \"trace start\" metadata");
  return 0;
}

static int on_event(struct reader *rd, struct pf_seq *q, const Packet *pkt)
{
  const Event *ev = pkt->track_event;
  uint64_t uuid = ev->has_track_uuid ? ev->track_uuid : q->has_track ? q->track : 0;
  struct pf_track *t = track_of(rd, uuid);
  int type = ev->has_type ? (int)ev->type : 0;
  const char *name = NULL, *cat = NULL;
  char *own = NULL;
  struct open_slice *o;
  json_object *args = NULL;
  uint64_t ts = 0;
  int rc;

  if (!t || !t->kind)
    return fail(rd, "an event on a track that was not described");
  if (t->kind == PT_META) {
    const char *n =
        ev->name_field_case == GPUPROF__PERFETTO__TRACK_EVENT__NAME_FIELD_NAME ? ev->name : "";
    int start = !strcmp(n, "trace start");
    if (type != GPUPROF__PERFETTO__TRACK_EVENT__TYPE__TYPE_INSTANT ||
        (!start && strcmp(n, "trace end")))
      return fail(rd, "an event on the metadata track that is not its metadata");
    if (start == rd->started || rd->ended)
      return fail(rd, "metadata out of order");
    rd->started |= start;
    rd->ended |= !start;
    return on_meta(rd, ev, start);
  }
  if (!rd->started)
    return fail(rd, "an event before the \"trace start\" metadata");
  if (t->kind != PT_EVENTS)
    return fail(rd, "an event on a process track");
  rc = event_ts(rd, q, pkt, &ts);
  if (rc)
    return rc;

  switch (type) {
  case GPUPROF__PERFETTO__TRACK_EVENT__TYPE__TYPE_COUNTER:
    if (t->track != TR_GPU_MEMORY || ev->counter_value_field_case == 0 || ev->counter_value < 0)
      return fail(rd, "a counter that is not the GPU memory in use");
    /* The JSON encoding's counter event, "GPU memory" without a category, whose one argument
     * (in_use_bytes) is the value. */
    deliver(rd, t, TR_COUNTER, "", "GPU memory", ts, 0, (uint64_t)ev->counter_value, NULL);
    return 0;
  case GPUPROF__PERFETTO__TRACK_EVENT__TYPE__TYPE_SLICE_END:
    if (!t->depth)
      return fail(rd, "a slice END without its BEGIN");
    o = &t->stack[--t->depth];
    if (ts < o->ts) {
      rc = fail(rd, "a slice that ends before it begins");
    } else {
      deliver(rd, t, TR_SLICE, o->cat, o->name, o->ts, ts - o->ts, 0, o->args);
      rc = 0;
    }
    json_object_put(o->args);
    free(o->name_own);
    return rc;
  case GPUPROF__PERFETTO__TRACK_EVENT__TYPE__TYPE_SLICE_BEGIN:
  case GPUPROF__PERFETTO__TRACK_EVENT__TYPE__TYPE_INSTANT:
    break;
  default:
    return fail(rd, "an event of a type the writer does not write");
  }
  if (t->track == TR_GPU_MEMORY)
    return fail(rd, "a slice on the GPU memory counter's track");

  if (ev->n_categories)
    cat = pool_get(&rd->pool, ev->categories[0], strlen(ev->categories[0]));
  else if (ev->n_category_iids)
    cat = seq_lookup(q, IN_CAT, ev->category_iids[0]);
  if (!cat)
    return ev->n_categories ? nomem(rd) : fail(rd, "an event without a category");
  if (ev->name_field_case == GPUPROF__PERFETTO__TRACK_EVENT__NAME_FIELD_NAME_IID)
    name = seq_lookup(q, IN_NAME, ev->name_iid);
  else if (ev->name_field_case == GPUPROF__PERFETTO__TRACK_EVENT__NAME_FIELD_NAME)
    name = ev->name;
  if (!name)
    return fail(rd, "an event without a name the sequence defines");
  if (name == ev->name) {
    /* Inline: the packet's memory is reused by the next one. */
    name = own = fixed_dup(name, strlen(name));
    if (!own)
      return nomem(rd);
  }
  /* An event of a category not asked for is still paired, but its arguments are not built. */
  rc = rd->sink->only_cat && strcmp(cat, rd->sink->only_cat) ? 0
                                                             : event_args(rd, q, t, ev, cat, &args);
  if (rc)
    goto out;

  if (type == GPUPROF__PERFETTO__TRACK_EVENT__TYPE__TYPE_INSTANT) {
    if (t->track != TR_HOST_THREAD)
      rc = fail(rd, "an instant that is not an NVTX mark");
    else
      deliver(rd, t, TR_INSTANT, cat, name, ts, 0, 0, args);
    goto out;
  }
  if (t->depth == t->cap) {
    uint32_t ncap = t->cap ? t->cap * 2 : 2;
    struct open_slice *ns;
    if (t->cap >= STACK_MAX) {
      rc = fail(rd, "slices nested deeper than the writer writes them");
      goto out;
    }
    ns = realloc(t->stack, ncap * sizeof(*ns));
    if (!ns) {
      rc = nomem(rd);
      goto out;
    }
    t->stack = ns;
    t->cap = ncap;
  }
  t->stack[t->depth++] =
      (struct open_slice){.ts = ts, .name = name, .cat = cat, .name_own = own, .args = args};
  return 0;
out:
  json_object_put(args);
  free(own);
  return rc;
}

static int on_packet(struct reader *rd, const Packet *pkt)
{
  uint32_t id = tf_seq_of(pkt);
  struct pf_seq *q;
  int rc = 0;

  if (rd->packet == 1 &&
      (id != 1 || pkt->data_case != GPUPROF__PERFETTO__TRACE_PACKET__DATA_CLOCK_SNAPSHOT))
    return fail(rd, "its first packet is not the gpuprof writer's");
  q = seq_of(rd, id, &rc);
  if (!q)
    return rc;
  rc = seq_update(rd, q, id, pkt);
  if (rc)
    return rc;
  switch (pkt->data_case) {
  case GPUPROF__PERFETTO__TRACE_PACKET__DATA_TRACK_DESCRIPTOR:
    return on_descriptor(rd, pkt->track_descriptor);
  case GPUPROF__PERFETTO__TRACE_PACKET__DATA_TRACK_EVENT:
    return on_event(rd, q, pkt);
  default:
    return 0;
  }
}

/* The metadata in the JSON encoding's key order (trace_json.c json_end), then the rest. */
static json_object *meta_object(struct reader *rd)
{
  static const char *const order[] = {
      "base_time_ns",    "trace_writer",   "agent",          "pid",
      "process_name",    "command_line",   "hostname",       "events",
      "clamped_slices",  "invalid_events", "size_cap_bytes", "truncated",
      "discarded_events"};
  json_object *m = json_object_new_object(), *v;
  char dflt[32];
  int64_t pid = 0;

  if (!m)
    return NULL;
  /* The JSON encoding has process_name only when the writer was given one; without it the
   * process track is named "process <pid>", which is then not metadata. */
  if (json_object_object_get_ex(rd->meta, "pid", &v))
    pid = json_object_get_int64(v);
  snprintf(dflt, sizeof(dflt), "process %" PRId64, pid);
  if (rd->process_name && strcmp(rd->process_name, dflt) &&
      !json_object_object_get_ex(rd->meta, "process_name", NULL) &&
      add(rd->meta, "process_name", json_object_new_string(rd->process_name)))
    goto oom;
  for (size_t i = 0; i < sizeof(order) / sizeof(order[0]); i++)
    if (json_object_object_get_ex(rd->meta, order[i], &v) && add(m, order[i], json_object_get(v)))
      goto oom;
  json_object_object_foreach(rd->meta, key, val)
  {
    if (!json_object_object_get_ex(m, key, NULL) && add(m, key, json_object_get(val)))
      goto oom;
  }
  return m;
oom:
  json_object_put(m);
  return NULL;
}

static void reader_free(struct reader *rd)
{
  for (uint32_t i = 0; i < rd->ntracks; i++) {
    struct pf_track *t = &rd->tracks[i];
    for (uint32_t k = 0; k < t->depth; k++) {
      json_object_put(t->stack[k].args);
      free(t->stack[k].name_own);
    }
    free(t->stack);
  }
  free(rd->tracks);
  for (uint32_t i = 0; i < rd->nseqs; i++) {
    if (rd->seqs[i])
      free(rd->seqs[i]->tab);
    free(rd->seqs[i]);
  }
  free(rd->seqs);
  pool_free(&rd->pool);
  json_object_put(rd->meta);
  free(rd->process_name);
}

int trace_read_pftrace(const char *path, const struct tr_sink *sink)
{
  static const struct tr_sink none;
  struct reader rd = {.path = path, .sink = sink ? sink : &none};
  struct tf_pf_reader r;
  struct tf_arena a = {0};
  const uint8_t *p;
  size_t n;
  int rc, cut = 0;

  rd.meta = json_object_new_object();
  if (!rd.meta)
    return nomem(&rd);
  rc = tf_pf_open(&r, path);
  if (rc)
    goto out_meta;
  while ((rc = tf_pf_next(&r, &p, &n)) > 0) {
    Packet *pkt = tf_pf_unpack(&a, p, n);
    rd.packet++;
    if (!pkt) {
      rc = fail(&rd, "it does not decode");
      goto out;
    }
    rc = on_packet(&rd, pkt);
    if (rc)
      goto out;
  }
  if (rc < 0 && rc != -EPIPE)
    goto out;
  cut = rc == -EPIPE;
  if (!rd.started) {
    rc = tf_fail(path, "no \"trace start\" metadata%s: not a gpuprof trace",
                 cut ? " before the file ends inside a packet" : "");
    goto out;
  }
  /* A slice still open here lost its END to the cut: the JSON encoding writes a slice whole
   * or not at all, so it is left out. */
  if (sink && sink->meta) {
    json_object *m = meta_object(&rd);
    if (!m) {
      rc = nomem(&rd);
      goto out;
    }
    sink->meta(sink->ctx, m);
    json_object_put(m);
  }
  rc = cut || !rd.ended ? 1 : 0;
out:
  tf_pf_close(&r);
  free(a.mem);
out_meta:
  reader_free(&rd);
  return rc;
}
