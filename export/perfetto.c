/* Native Perfetto encoding of a trace: length-delimited TracePackets built with protobuf-c. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "export/trace_internal.h"
#include "proto/perfetto_trace.pb-c.h"

/*
 * The file is a Trace message written one `packet` field (tag 0x0A, varint length, bytes) at a
 * time, so it is valid after every packet: a size cap or a kill leaves whole packets only
 * (a packet is appended to the output buffer whole, and the buffer is written on packet
 * boundaries). protobuf-c packs each packet into the output buffer; the framing is ours.
 *
 * One packet sequence (trusted_packet_sequence_id 1). The first packet clears the incremental
 * state, sets CLOCK_REALTIME as the sequence's timestamp clock (trace_packet_defaults) and
 * carries a ClockSnapshot of REALTIME and BOOTTIME taken at open, so that the importer can
 * place CUPTI's wall-clock timestamps on its own (boot time) axis and line the trace up with
 * other processes' traces. Event names and kernel launch configurations are interned: the
 * first packet that uses a name carries it in interned_data and every packet refers to it by
 * iid, so a kernel's name is stored once however often it runs.
 *
 * Slices are a TYPE_SLICE_BEGIN and a TYPE_SLICE_END on the track (TrackEvent has no complete
 * event); they are written together when the slice arrives, already fitted to the track by
 * trace.c. Flows: the API call's BEGIN carries flow_ids, the GPU slice's BEGIN the same id
 * in terminating_flow_ids.
 */

#define SEQ_ID 1
#define SEQ_CLEARED 1
#define SEQ_NEEDS_STATE 2
#define CLOCK_ID_REALTIME 1
#define CLOCK_ID_BOOTTIME 6
#define INTERN_MAX 65536u
#define META_UUID UINT64_MAX /* the "gpuprof" track; trace.c's uuids count from 1 */
#define INTERN_BYTES_MAX (16u << 20)

typedef Gpuprof__Perfetto__TracePacket Packet;
typedef Gpuprof__Perfetto__TrackEvent Event;
typedef Gpuprof__Perfetto__TrackDescriptor Descriptor;
typedef Gpuprof__Perfetto__DebugAnnotation Annotation;
typedef Gpuprof__Perfetto__InternedData Interned;

/* Debug annotation names, interned once in the first packet with iid = index + 1. */
enum {
  ANN_LAUNCH = 1,
  ANN_BYTES,
  ANN_BANDWIDTH,
  ANN_VALUE,
  ANN_GRAPH_ID,
  ANN_GRAPH_NODE_ID,
  ANN_SRC_DEVICE,
  ANN_DST_DEVICE,
  ANN_COUNT = ANN_DST_DEVICE
};
static const char *const ann_names[ANN_COUNT] = {"launch",     "bytes",     "bandwidth_gbps",
                                                 "value",      "graph_id",  "graph_node_id",
                                                 "src_device", "dst_device"};

/* Strings interned by content; memory grows with distinct strings only, up to a bound. */
struct intern {
  char **keys;
  uint64_t *iids;
  uint32_t cap, len;
  size_t bytes;
};

#define NAME_CACHE 1024
#define LAUNCH_CACHE 256

struct trace_encoder {
  struct intern names;   /* EventName iids */
  struct intern strings; /* debug annotation string values */
  /* In front of the interning tables: kernel names are CUPTI-owned strings whose pointers
   * repeat, and launch configurations repeat; both caches are checked against content. */
  struct {
    const char *ptr;
    size_t len;
    const char *key; /* the interned copy */
    uint64_t iid;
  } name_cache[NAME_CACHE];
  struct {
    int32_t cfg[8];
    uint64_t iid;
  } launch_cache[LAUNCH_CACHE];
};

static uint64_t str_hash(const char *s, size_t n)
{
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++)
    h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
  return h;
}

/* The iid of s; *is_new set when it was just added (the packet must then carry it). 0: the
 * table is full, write the string inline. */
static uint64_t intern_get(struct intern *t, const char *s, size_t n, int *is_new, const char **key)
{
  uint32_t i;

  *is_new = 0;
  if ((t->len + 1) * 2 > t->cap) {
    uint32_t ncap = t->cap ? t->cap * 2 : 256;
    char **nk;
    uint64_t *ni;
    if (t->len >= INTERN_MAX || t->bytes + n > INTERN_BYTES_MAX)
      goto lookup_only;
    nk = calloc(ncap, sizeof(*nk));
    ni = calloc(ncap, sizeof(*ni));
    if (!nk || !ni) {
      free(nk);
      free(ni);
      goto lookup_only;
    }
    for (uint32_t j = 0; j < t->cap; j++) {
      if (!t->keys[j])
        continue;
      uint32_t k = (uint32_t)str_hash(t->keys[j], strlen(t->keys[j])) & (ncap - 1);
      while (nk[k])
        k = (k + 1) & (ncap - 1);
      nk[k] = t->keys[j];
      ni[k] = t->iids[j];
    }
    free(t->keys);
    free(t->iids);
    t->keys = nk;
    t->iids = ni;
    t->cap = ncap;
  }
lookup_only:
  if (!t->cap)
    return 0;
  i = (uint32_t)str_hash(s, n) & (t->cap - 1);
  for (; t->keys[i]; i = (i + 1) & (t->cap - 1))
    if (!strncmp(t->keys[i], s, n) && t->keys[i][n] == '\0') {
      if (key)
        *key = t->keys[i];
      return t->iids[i];
    }
  if ((t->len + 1) * 2 > t->cap || t->bytes + n > INTERN_BYTES_MAX)
    return 0;
  t->keys[i] = strndup(s, n);
  if (!t->keys[i])
    return 0;
  t->iids[i] = ++t->len;
  t->bytes += n + 1;
  *is_new = 1;
  if (key)
    *key = t->keys[i];
  return t->iids[i];
}

static void intern_free(struct intern *t)
{
  for (uint32_t i = 0; i < t->cap; i++)
    free(t->keys[i]);
  free(t->keys);
  free(t->iids);
}

static size_t put_varint(uint8_t *p, uint64_t v)
{
  size_t n = 0;
  while (v >= 0x80) {
    p[n++] = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  p[n++] = (uint8_t)v;
  return n;
}

/* Appends pkt (n bytes packed) as one `packet` field of Trace, if it fits under the size cap. */
static int emit_sized(struct trace_writer *w, const Packet *pkt, size_t n, unsigned nevents)
{
  uint8_t *p;
  size_t h;
  int rc;

  if (n + 16 > TRACE_EVENT_MAX) {
    w->stats.invalid++;
    return -E2BIG;
  }
  rc = trace_fits(w, n + 11, 0);
  if (rc)
    return rc;
  p = (uint8_t *)trace_out_reserve(&w->out, n + 11);
  if (!p)
    return w->out.err;
  p[0] = 0x0A; /* Trace.packet: field 1, length-delimited */
  h = 1 + put_varint(p + 1, n);
  gpuprof__perfetto__trace_packet__pack(pkt, p + h);
  trace_out_commit(&w->out, h + n);
  w->stats.events += nevents;
  return 0;
}

static int emit(struct trace_writer *w, const Packet *pkt, unsigned nevents)
{
  return emit_sized(w, pkt, gpuprof__perfetto__trace_packet__get_packed_size(pkt), nevents);
}

/* Appends pkt without the cap check: for what the cap already paid for (a slice's END) and
 * for the closing metadata, which lives in the reserve below the cap. */
static int emit_raw(struct trace_writer *w, const Packet *pkt)
{
  size_t n = gpuprof__perfetto__trace_packet__get_packed_size(pkt), h;
  uint8_t *p = (uint8_t *)trace_out_reserve(&w->out, n + 11);

  if (!p)
    return w->out.err;
  p[0] = 0x0A;
  h = 1 + put_varint(p + 1, n);
  gpuprof__perfetto__trace_packet__pack(pkt, p + h);
  trace_out_commit(&w->out, h + n);
  return 0;
}

static void packet_init(Packet *pkt, uint64_t ts)
{
  gpuprof__perfetto__trace_packet__init(pkt);
  pkt->optional_trusted_packet_sequence_id_case =
      GPUPROF__PERFETTO__TRACE_PACKET__OPTIONAL_TRUSTED_PACKET_SEQUENCE_ID_TRUSTED_PACKET_SEQUENCE_ID;
  pkt->trusted_packet_sequence_id = SEQ_ID;
  pkt->has_sequence_flags = 1;
  pkt->sequence_flags = SEQ_NEEDS_STATE;
  if (ts) {
    pkt->has_timestamp = 1;
    pkt->timestamp = ts;
  }
}

static uint64_t clock_ns(clockid_t id)
{
  struct timespec ts;
  clock_gettime(id, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void ann_uint(Annotation *a, uint64_t name_iid, uint64_t v)
{
  gpuprof__perfetto__debug_annotation__init(a);
  a->name_field_case = GPUPROF__PERFETTO__DEBUG_ANNOTATION__NAME_FIELD_NAME_IID;
  a->name_iid = name_iid;
  a->value_case = GPUPROF__PERFETTO__DEBUG_ANNOTATION__VALUE_UINT_VALUE;
  a->uint_value = v;
}

static void ann_named_str(Annotation *a, const char *name, const char *v)
{
  gpuprof__perfetto__debug_annotation__init(a);
  a->name_field_case = GPUPROF__PERFETTO__DEBUG_ANNOTATION__NAME_FIELD_NAME;
  a->name = (char *)name;
  a->value_case = GPUPROF__PERFETTO__DEBUG_ANNOTATION__VALUE_STRING_VALUE;
  a->string_value = (char *)v;
}

static void ann_named_uint(Annotation *a, const char *name, uint64_t v)
{
  gpuprof__perfetto__debug_annotation__init(a);
  a->name_field_case = GPUPROF__PERFETTO__DEBUG_ANNOTATION__NAME_FIELD_NAME;
  a->name = (char *)name;
  a->value_case = GPUPROF__PERFETTO__DEBUG_ANNOTATION__VALUE_UINT_VALUE;
  a->uint_value = v;
}

/* The trace metadata, as an instant on the "gpuprof" track (the format has no metadata
 * block of its own that the importer shows). */
static int meta_instant(struct trace_writer *w, uint64_t ts, const char *name, int at_end)
{
  Packet pkt;
  Event ev;
  Descriptor d;
  Annotation a[16 + TRACE_META_MAX], *ap[16 + TRACE_META_MAX];
  size_t n = 0;
  char base[32];

  if (!at_end) {
    /* Described here rather than through trace.c's table: it is the writer's own track. */
    packet_init(&pkt, 0);
    pkt.has_sequence_flags = 0;
    gpuprof__perfetto__track_descriptor__init(&d);
    d.has_uuid = 1;
    d.uuid = META_UUID;
    d.static_or_dynamic_name_case =
        GPUPROF__PERFETTO__TRACK_DESCRIPTOR__STATIC_OR_DYNAMIC_NAME_NAME;
    d.name = "gpuprof";
    pkt.data_case = GPUPROF__PERFETTO__TRACE_PACKET__DATA_TRACK_DESCRIPTOR;
    pkt.track_descriptor = &d;
    int rc = emit(w, &pkt, 0);
    if (rc)
      return rc;
  }

  snprintf(base, sizeof(base), "%llu", (unsigned long long)w->meta.base_ns);
  ann_named_str(&a[n++], "base_time_ns", base);
  ann_named_str(&a[n++], "trace_writer", "gpuprof trace 1");
  ann_named_str(&a[n++], "agent", w->meta.agent_version);
  ann_named_uint(&a[n++], "pid", w->meta.pid);
  if (w->meta.command_line)
    ann_named_str(&a[n++], "command_line", w->meta.command_line);
  if (w->meta.hostname)
    ann_named_str(&a[n++], "hostname", w->meta.hostname);
  if (w->meta.size_cap_bytes)
    ann_named_uint(&a[n++], "size_cap_bytes", w->meta.size_cap_bytes);
  if (at_end) {
    ann_named_uint(&a[n++], "events", w->stats.events);
    ann_named_uint(&a[n++], "clamped_slices", w->stats.clamped);
    ann_named_uint(&a[n++], "invalid_events", w->stats.invalid);
    if (w->stats.stopped) {
      ann_named_str(&a[n++], "truncated", "size cap reached: later events were not written");
      ann_named_uint(&a[n++], "discarded_events", w->stats.discarded);
    }
    for (uint32_t i = 0; i < w->kv_len; i++) {
      if (w->kv[i].is_string)
        ann_named_str(&a[n++], w->kv[i].key, w->kv[i].s);
      else
        ann_named_uint(&a[n++], w->kv[i].key, w->kv[i].u);
    }
  }
  for (size_t i = 0; i < n; i++)
    ap[i] = &a[i];

  packet_init(&pkt, ts);
  gpuprof__perfetto__track_event__init(&ev);
  ev.has_type = 1;
  ev.type = GPUPROF__PERFETTO__TRACK_EVENT__TYPE__TYPE_INSTANT;
  ev.has_track_uuid = 1;
  ev.track_uuid = META_UUID;
  ev.name_field_case = GPUPROF__PERFETTO__TRACK_EVENT__NAME_FIELD_NAME;
  ev.name = (char *)name;
  ev.n_debug_annotations = n;
  ev.debug_annotations = ap;
  pkt.data_case = GPUPROF__PERFETTO__TRACE_PACKET__DATA_TRACK_EVENT;
  pkt.track_event = &ev;
  return at_end ? emit_raw(w, &pkt) : emit(w, &pkt, 0);
}

static int pf_begin(struct trace_writer *w)
{
  Packet pkt;
  Gpuprof__Perfetto__TracePacketDefaults defaults;
  Gpuprof__Perfetto__ClockSnapshot snap;
  Gpuprof__Perfetto__ClockSnapshot__Clock clocks[2], *cp[2] = {&clocks[0], &clocks[1]};
  Interned in;
  Gpuprof__Perfetto__DebugAnnotationName names[ANN_COUNT], *np[ANN_COUNT];
  int rc;

  w->enc = calloc(1, sizeof(*w->enc));
  if (!w->enc)
    return -ENOMEM;

  packet_init(&pkt, 0);
  pkt.sequence_flags = SEQ_CLEARED;
  pkt.has_first_packet_on_sequence = 1;
  pkt.first_packet_on_sequence = 1;
  gpuprof__perfetto__trace_packet_defaults__init(&defaults);
  defaults.has_timestamp_clock_id = 1;
  defaults.timestamp_clock_id = CLOCK_ID_REALTIME;
  pkt.trace_packet_defaults = &defaults;

  gpuprof__perfetto__clock_snapshot__init(&snap);
  for (int i = 0; i < 2; i++) {
    gpuprof__perfetto__clock_snapshot__clock__init(&clocks[i]);
    clocks[i].has_clock_id = clocks[i].has_timestamp = 1;
  }
  clocks[0].clock_id = CLOCK_ID_BOOTTIME;
  clocks[0].timestamp = clock_ns(CLOCK_BOOTTIME);
  clocks[1].clock_id = CLOCK_ID_REALTIME;
  clocks[1].timestamp = clock_ns(CLOCK_REALTIME);
  snap.n_clocks = 2;
  snap.clocks = cp;
  pkt.data_case = GPUPROF__PERFETTO__TRACE_PACKET__DATA_CLOCK_SNAPSHOT;
  pkt.clock_snapshot = &snap;

  gpuprof__perfetto__interned_data__init(&in);
  for (int i = 0; i < ANN_COUNT; i++) {
    gpuprof__perfetto__debug_annotation_name__init(&names[i]);
    names[i].has_iid = 1;
    names[i].iid = (uint64_t)i + 1;
    names[i].name = (char *)ann_names[i];
    np[i] = &names[i];
  }
  in.n_debug_annotation_names = ANN_COUNT;
  in.debug_annotation_names = np;
  pkt.interned_data = &in;

  /* Not subject to the cap: trace_writer_open refuses caps below twice the reserve. */
  rc = emit(w, &pkt, 0);
  if (rc)
    return rc;
  return meta_instant(w, w->meta.base_ns, "trace start", 0);
}

static int emit_descriptor(struct trace_writer *w, Descriptor *d)
{
  Packet pkt;

  packet_init(&pkt, 0);
  pkt.has_sequence_flags = 0;
  pkt.data_case = GPUPROF__PERFETTO__TRACE_PACKET__DATA_TRACK_DESCRIPTOR;
  pkt.track_descriptor = d;
  return emit(w, &pkt, 0);
}

static int describe(struct trace_writer *w, struct trace_track *t, const char *thread_name)
{
  Descriptor d;
  Gpuprof__Perfetto__ProcessDescriptor proc;
  Gpuprof__Perfetto__ThreadDescriptor thr;
  Gpuprof__Perfetto__CounterDescriptor ctr;
  char name[320];
  char *cmdline[1];
  struct trace_track *parent;

  trace_track_name(w, t, name, sizeof(name));
  gpuprof__perfetto__track_descriptor__init(&d);
  d.has_uuid = 1;
  d.uuid = t->uuid;
  switch (t->kind) {
  case TRACK_HOST_PROCESS:
    gpuprof__perfetto__process_descriptor__init(&proc);
    proc.has_pid = 1;
    proc.pid = (int32_t)w->meta.pid;
    proc.process_name = name;
    if (w->meta.command_line) {
      cmdline[0] = (char *)w->meta.command_line;
      proc.n_cmdline = 1;
      proc.cmdline = cmdline;
    }
    d.process = &proc;
    break;
  case TRACK_HOST_THREAD:
    gpuprof__perfetto__thread_descriptor__init(&thr);
    thr.has_pid = thr.has_tid = 1;
    thr.pid = (int32_t)w->meta.pid;
    thr.tid = t->b;
    thr.thread_name = thread_name ? (char *)thread_name : name;
    d.thread = &thr;
    break;
  case TRACK_GPU_PROCESS:
    d.static_or_dynamic_name_case =
        GPUPROF__PERFETTO__TRACK_DESCRIPTOR__STATIC_OR_DYNAMIC_NAME_NAME;
    d.name = name;
    d.has_child_ordering = 1;
    d.child_ordering = GPUPROF__PERFETTO__TRACK_DESCRIPTOR__CHILD_TRACKS_ORDERING__EXPLICIT;
    break;
  case TRACK_GPU_STREAM:
  case TRACK_GPU_SYNC:
  case TRACK_GPU_MEMORY:
    d.static_or_dynamic_name_case =
        GPUPROF__PERFETTO__TRACK_DESCRIPTOR__STATIC_OR_DYNAMIC_NAME_NAME;
    d.name = name;
    /* The table cannot move here: trace.c described the parent before this track. */
    parent = NULL;
    for (uint32_t i = 0; i < w->tracks_cap; i++)
      if (w->tracks[i].kind == TRACK_GPU_PROCESS && w->tracks[i].a == t->a)
        parent = &w->tracks[i];
    if (parent) {
      d.has_parent_uuid = 1;
      d.parent_uuid = parent->uuid;
    }
    d.has_sibling_order_rank = 1;
    if (t->kind == TRACK_GPU_MEMORY) {
      d.sibling_order_rank = -1;
      gpuprof__perfetto__counter_descriptor__init(&ctr);
      ctr.has_unit = 1;
      ctr.unit = GPUPROF__PERFETTO__COUNTER_DESCRIPTOR__UNIT__UNIT_SIZE_BYTES;
      d.counter = &ctr;
    } else if (t->b == UINT32_MAX) {
      d.sibling_order_rank = INT32_MAX;
    } else {
      d.sibling_order_rank = (int32_t)((t->b & 0x3fffffff) * 2 + (t->kind == TRACK_GPU_SYNC));
    }
    break;
  default:
    return 0;
  }
  return emit_descriptor(w, &d);
}

static int pf_describe(struct trace_writer *w, struct trace_track *t)
{
  return describe(w, t, NULL);
}

static int pf_describe_thread(struct trace_writer *w, struct trace_track *t, const char *name)
{
  return describe(w, t, name);
}

/* Sets the event's name, by iid when it can be interned (adding it to the packet if new). */
/* Sets the event's name, by iid when it can be interned (adding it to the packet if new).
 * name/len: the caller's string (its pointer keys the cache); copy: the same, NUL-terminated. */
static void set_name(struct trace_writer *w, Event *ev, Interned *in,
                     Gpuprof__Perfetto__EventName *en, Gpuprof__Perfetto__EventName **enp,
                     const char *name, size_t len, char *copy)
{
  struct trace_encoder *enc = w->enc;
  uint32_t slot = (uint32_t)(((uintptr_t)name >> 3) * 0x9e3779b1u) % NAME_CACHE;
  const char *key = NULL;
  int is_new = 0;
  uint64_t iid;

  /* A cached pointer may since have been freed and reused for another string: compare the
   * content with the interned copy. */
  if (enc->name_cache[slot].ptr == name && enc->name_cache[slot].len == len &&
      !memcmp(enc->name_cache[slot].key, name, len)) {
    iid = enc->name_cache[slot].iid;
  } else {
    iid = intern_get(&enc->names, copy, len, &is_new, &key);
    if (iid) {
      enc->name_cache[slot].ptr = name;
      enc->name_cache[slot].len = len;
      enc->name_cache[slot].key = key;
      enc->name_cache[slot].iid = iid;
    }
  }
  if (iid) {
    ev->name_field_case = GPUPROF__PERFETTO__TRACK_EVENT__NAME_FIELD_NAME_IID;
    ev->name_iid = iid;
    if (is_new) {
      gpuprof__perfetto__event_name__init(en);
      en->has_iid = 1;
      en->iid = iid;
      en->name = copy;
      *enp = en;
      in->n_event_names = 1;
      in->event_names = enp;
    }
  } else {
    ev->name_field_case = GPUPROF__PERFETTO__TRACK_EVENT__NAME_FIELD_NAME;
    ev->name = copy;
  }
}

static int pf_slice(struct trace_writer *w, struct trace_track *t, const struct trace_slice *s)
{
  Packet pkt;
  Event ev;
  Interned in;
  Gpuprof__Perfetto__EventName en, *enp;
  Gpuprof__Perfetto__InternedString is, *isp;
  Annotation a[8], *ap[8];
  size_t na = 0;
  uint64_t flow;
  char name[TRACE_NAME_MAX + 1];
  char launch[160];
  const struct trace_gpu_slice *g = s->gpu;
  size_t size;
  int rc, have_in = 0;

  memcpy(name, s->name, s->name_len);
  name[s->name_len] = '\0';

  packet_init(&pkt, s->start);
  gpuprof__perfetto__track_event__init(&ev);
  gpuprof__perfetto__interned_data__init(&in);
  ev.has_type = 1;
  ev.type = GPUPROF__PERFETTO__TRACK_EVENT__TYPE__TYPE_SLICE_BEGIN;
  ev.has_track_uuid = 1;
  ev.track_uuid = t->uuid;
  set_name(w, &ev, &in, &en, &enp, s->name, s->name_len, name);
  if (in.n_event_names)
    have_in = 1;
  if (s->corr_id) {
    ev.correlation_id_field_case =
        GPUPROF__PERFETTO__TRACK_EVENT__CORRELATION_ID_FIELD_CORRELATION_ID;
    ev.correlation_id = s->corr_id;
  }
  if (s->flow_out) {
    flow = s->flow_out;
    ev.n_flow_ids = 1;
    ev.flow_ids = &flow;
  } else if (s->flow_in) {
    flow = s->flow_in;
    ev.n_terminating_flow_ids = 1;
    ev.terminating_flow_ids = &flow;
  }
  if (g) {
    uint64_t dur = s->end - s->start;
    switch (g->kind) {
    case TRACE_GPU_KERNEL: {
      /* One interned string per distinct launch configuration: a kernel launched the same
       * way a million times costs one iid per launch. */
      int is_new = 0, len = 0;
      uint64_t iid = 0;
      int32_t cfg[8] = {g->u.kernel.grid[0],
                        g->u.kernel.grid[1],
                        g->u.kernel.grid[2],
                        g->u.kernel.block[0],
                        g->u.kernel.block[1],
                        g->u.kernel.block[2],
                        (int32_t)g->u.kernel.registers_per_thread,
                        (int32_t)(g->u.kernel.static_smem + g->u.kernel.dynamic_smem)};
      uint32_t h = 2166136261u;
      for (int i = 0; i < 8; i++)
        h = (h ^ (uint32_t)cfg[i]) * 16777619u;
      h %= LAUNCH_CACHE;
      if (w->enc->launch_cache[h].iid && !memcmp(w->enc->launch_cache[h].cfg, cfg, sizeof(cfg)))
        iid = w->enc->launch_cache[h].iid;
      if (!iid) {
        len = snprintf(
            launch, sizeof(launch), "grid [%d,%d,%d] block [%d,%d,%d] registers %u shared_mem %llu",
            g->u.kernel.grid[0], g->u.kernel.grid[1], g->u.kernel.grid[2], g->u.kernel.block[0],
            g->u.kernel.block[1], g->u.kernel.block[2], g->u.kernel.registers_per_thread,
            (unsigned long long)g->u.kernel.static_smem + g->u.kernel.dynamic_smem);
        if (len < 0 || (size_t)len >= sizeof(launch))
          len = (int)strlen(launch);
        iid = intern_get(&w->enc->strings, launch, (size_t)len, &is_new, NULL);
        if (iid) {
          memcpy(w->enc->launch_cache[h].cfg, cfg, sizeof(cfg));
          w->enc->launch_cache[h].iid = iid;
        }
      }
      gpuprof__perfetto__debug_annotation__init(&a[na]);
      a[na].name_field_case = GPUPROF__PERFETTO__DEBUG_ANNOTATION__NAME_FIELD_NAME_IID;
      a[na].name_iid = ANN_LAUNCH;
      if (iid) {
        a[na].value_case = GPUPROF__PERFETTO__DEBUG_ANNOTATION__VALUE_STRING_VALUE_IID;
        a[na].string_value_iid = iid;
        if (is_new) {
          gpuprof__perfetto__interned_string__init(&is);
          is.has_iid = is.has_str = 1;
          is.iid = iid;
          is.str.data = (uint8_t *)launch;
          is.str.len = (size_t)len;
          isp = &is;
          in.n_debug_annotation_string_values = 1;
          in.debug_annotation_string_values = &isp;
          have_in = 1;
        }
      } else {
        a[na].value_case = GPUPROF__PERFETTO__DEBUG_ANNOTATION__VALUE_STRING_VALUE;
        a[na].string_value = launch;
      }
      na++;
      break;
    }
    case TRACE_GPU_MEMCPY:
      ann_uint(&a[na++], ANN_BYTES, g->u.memcpy.bytes);
      gpuprof__perfetto__debug_annotation__init(&a[na]);
      a[na].name_field_case = GPUPROF__PERFETTO__DEBUG_ANNOTATION__NAME_FIELD_NAME_IID;
      a[na].name_iid = ANN_BANDWIDTH;
      a[na].value_case = GPUPROF__PERFETTO__DEBUG_ANNOTATION__VALUE_DOUBLE_VALUE;
      a[na++].double_value = (double)trace_bandwidth_milli(g->u.memcpy.bytes, dur) / 1000.0;
      if (g->u.memcpy.copy_kind == 10) {
        ann_uint(&a[na++], ANN_SRC_DEVICE, g->u.memcpy.src_device);
        ann_uint(&a[na++], ANN_DST_DEVICE, g->u.memcpy.dst_device);
      }
      break;
    case TRACE_GPU_MEMSET:
      ann_uint(&a[na++], ANN_BYTES, g->u.memset.bytes);
      gpuprof__perfetto__debug_annotation__init(&a[na]);
      a[na].name_field_case = GPUPROF__PERFETTO__DEBUG_ANNOTATION__NAME_FIELD_NAME_IID;
      a[na].name_iid = ANN_BANDWIDTH;
      a[na].value_case = GPUPROF__PERFETTO__DEBUG_ANNOTATION__VALUE_DOUBLE_VALUE;
      a[na++].double_value = (double)trace_bandwidth_milli(g->u.memset.bytes, dur) / 1000.0;
      ann_uint(&a[na++], ANN_VALUE, g->u.memset.value);
      break;
    }
    if (g->graph_id) {
      ann_uint(&a[na++], ANN_GRAPH_ID, g->graph_id);
      ann_uint(&a[na++], ANN_GRAPH_NODE_ID, g->graph_node_id);
    }
  }
  for (size_t i = 0; i < na; i++)
    ap[i] = &a[i];
  ev.n_debug_annotations = na;
  ev.debug_annotations = ap;
  if (have_in)
    pkt.interned_data = &in;
  pkt.data_case = GPUPROF__PERFETTO__TRACE_PACKET__DATA_TRACK_EVENT;
  pkt.track_event = &ev;

  /* Both halves or neither: check the cap for the pair before writing the BEGIN. */
  size = gpuprof__perfetto__trace_packet__get_packed_size(&pkt);
  rc = trace_fits(w, size + 64, 0);
  if (rc)
    return rc;
  rc = emit_sized(w, &pkt, size, 1 + (s->flow_out || s->flow_in));
  if (rc)
    return rc;

  packet_init(&pkt, s->end);
  gpuprof__perfetto__track_event__init(&ev);
  ev.has_type = 1;
  ev.type = GPUPROF__PERFETTO__TRACK_EVENT__TYPE__TYPE_SLICE_END;
  ev.has_track_uuid = 1;
  ev.track_uuid = t->uuid;
  pkt.data_case = GPUPROF__PERFETTO__TRACE_PACKET__DATA_TRACK_EVENT;
  pkt.track_event = &ev;
  /* The END must follow its BEGIN even at the cap, or the slice would never close: it was
   * paid for above (64 bytes of headroom). */
  return emit_raw(w, &pkt);
}

static int pf_counter(struct trace_writer *w, struct trace_track *t, uint64_t ts, uint64_t value)
{
  Packet pkt;
  Event ev;

  packet_init(&pkt, ts);
  pkt.has_sequence_flags = 0;
  gpuprof__perfetto__track_event__init(&ev);
  ev.has_type = 1;
  ev.type = GPUPROF__PERFETTO__TRACK_EVENT__TYPE__TYPE_COUNTER;
  ev.has_track_uuid = 1;
  ev.track_uuid = t->uuid;
  ev.counter_value_field_case = GPUPROF__PERFETTO__TRACK_EVENT__COUNTER_VALUE_FIELD_COUNTER_VALUE;
  ev.counter_value = (int64_t)value;
  pkt.data_case = GPUPROF__PERFETTO__TRACE_PACKET__DATA_TRACK_EVENT;
  pkt.track_event = &ev;
  return emit(w, &pkt, 1);
}

static int pf_end(struct trace_writer *w)
{
  return meta_instant(w, w->max_ts, "trace end", 1);
}

static void pf_free(struct trace_writer *w)
{
  if (!w->enc)
    return;
  intern_free(&w->enc->names);
  intern_free(&w->enc->strings);
  free(w->enc);
  w->enc = NULL;
}

const struct trace_encoder_ops trace_perfetto_ops = {
    .begin = pf_begin,
    .describe = pf_describe,
    .describe_thread = pf_describe_thread,
    .slice = pf_slice,
    .counter = pf_counter,
    .end = pf_end,
    .free = pf_free,
};
