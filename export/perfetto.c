/* Native Perfetto encoding of a trace: length-delimited TracePackets built with protobuf-c. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "export/pbframe.h"
#include "export/trace_internal.h"
#include "export/utf8.h"
#include "proto/perfetto_trace.pb-c.h"

/*
 * The file is a Trace message written one `packet` field (tag 0x0A, varint length, bytes) at a
 * time, so it is valid after every packet: a size cap or a kill leaves whole packets only
 * (a packet is appended to the output buffer whole, and the buffer is written on packet
 * boundaries). protobuf-c packs each packet into the output buffer; the framing is ours.
 *
 * Sequences (trusted_packet_sequence_id). Sequence 1 carries what is not an event: the first
 * packet (clears the incremental state, sets CLOCK_REALTIME as its timestamp clock and holds
 * a ClockSnapshot of REALTIME and BOOTTIME taken at open, so that the importer can place
 * CUPTI's wall-clock timestamps on its own boot-time axis and line the trace up with other
 * processes' traces), the track descriptors and the metadata instants. Every track that has
 * events gets a sequence of its own (id = track uuid + 1), started by one packet before its
 * first event that sets, for that sequence only:
 *   - the track: trace_packet_defaults.track_event_defaults.track_uuid, so events carry none;
 *   - an incremental clock (id 64, sequence-scoped, snapshot = base time against REALTIME) as
 *     the timestamp clock: each event's timestamp is the delta from the previous event of the
 *     track, two varint bytes for back-to-back kernels instead of nine. An event earlier than
 *     the previous one (a late record; an outer API call written after its inner one) carries
 *     an absolute REALTIME timestamp and timestamp_clock_id 1 instead, and leaves the
 *     incremental clock where it was;
 *   - the interned categories and debug annotation names (fixed tables, iid = index + 1).
 * Event names and kernel launch strings are interned too: one table per trace gives each
 * distinct string an iid, and the first event of a sequence that uses an iid carries its
 * definition in interned_data (Perfetto scopes iids to a sequence). A kernel's launch
 * configuration (grid, block, registers, shared memory) is one interned string, so a kernel
 * launched the same way a million times stores it once per track and costs a 3-byte
 * reference per launch.
 *
 * Packets carry no SEQ_NEEDS_INCREMENTAL_STATE flag: the importer uses it only to drop packets
 * of a sequence whose state was lost (a ring buffer that wrapped), which a file written front
 * to back never has; it would cost 2 bytes per packet.
 *
 * Slices are a TYPE_SLICE_BEGIN and a TYPE_SLICE_END on the track (TrackEvent has no complete
 * event); both are written together when the slice arrives, already fitted to the track by
 * trace.c. Flows: the API call's BEGIN carries flow_ids, the GPU slice's BEGIN the same id in
 * terminating_flow_ids. The per-event packets use the EventPacket/EventBody views of the
 * schema (export/proto/perfetto_trace.proto): same bytes, a few fields for protobuf-c to walk.
 * The commonest ones (a kernel's or an API call's BEGIN, any END) are assembled from parts
 * packed once (sequence id, END, a TrackEvent's constant fields) and a tiny message packed per
 * event (timestamp, ids): see pack_begin_parts. The decoded content is the same either way.
 */

#define SEQ_MAIN 1
#define SEQ_CLEARED 1
#define CLOCK_ID_REALTIME 1
#define CLOCK_ID_BOOTTIME 6
#define CLOCK_ID_TRACK 64 /* sequence-scoped: every track sequence defines its own */
#define INTERN_MAX 65536u
#define INTERN_BYTES_MAX (16u << 20)
/* The "gpuprof" metadata track: trace.c's uuids count from 1 up to TRACE_MAX_TRACKS. */
#define META_UUID ((uint64_t)TRACE_MAX_TRACKS + 1)

typedef Gpuprof__Perfetto__TracePacket Packet;
typedef Gpuprof__Perfetto__TrackEvent Event;
typedef Gpuprof__Perfetto__EventPacket HotPacket;
typedef Gpuprof__Perfetto__EventBody HotEvent;
typedef Gpuprof__Perfetto__TrackDescriptor Descriptor;
typedef Gpuprof__Perfetto__DebugAnnotation Annotation;
typedef Gpuprof__Perfetto__InternedData Interned;

/* Debug annotation names, interned at the start of every track sequence, iid = index + 1. */
enum {
  ANN_LAUNCH = 1,
  ANN_BYTES,
  ANN_BANDWIDTH,
  ANN_VALUE,
  ANN_GRAPH_ID,
  ANN_GRAPH_NODE_ID,
  ANN_SRC_DEVICE,
  ANN_DST_DEVICE,
  ANN_SRC_KIND,
  ANN_DST_KIND,
  ANN_COUNT = ANN_DST_KIND
};
static const char *const ann_names[ANN_COUNT] = {
    "launch",        "bytes",      "bandwidth_gbps", "value",    "graph_id",
    "graph_node_id", "src_device", "dst_device",     "src_kind", "dst_kind"};

/* Categories, the JSON encoding's "cat" values, interned the same way. */
enum { CAT_API = 1, CAT_SYNC, CAT_KERNEL, CAT_MEMCPY, CAT_MEMSET, CAT_NCCL, CAT_COUNT = CAT_NCCL };
static const char *const cat_names[CAT_COUNT] = {"cuda_api",   "cuda_sync",  "kernel",
                                                 "gpu_memcpy", "gpu_memset", "nccl"};

/* Strings interned by content; memory grows with distinct strings only, up to a bound. */
struct intern {
  char **keys;
  uint64_t *iids;
  uint32_t cap, len;
  size_t bytes;
  char **by_iid; /* by_iid[iid - 1]: the string, for sequences that have not seen it yet */
  uint32_t by_iid_cap;
};

/* What the encoder knows about one track's sequence. */
struct seq_state {
  uint64_t last_ts; /* the incremental clock's value: the last delta-encoded timestamp */
  uint64_t *seen[2];
  uint32_t seen_words[2];
  uint8_t started;
  /* Packed once when the sequence starts (SequencePart, EndPart): the constant bytes of its
   * hot packets. A sequence id takes at most 5 bytes, so 6 and 10 bytes. */
  uint8_t seq_len, end_len;
  uint8_t seq_part[8], end_part[16];
};
enum { SEEN_NAME = 0, SEEN_STRING = 1 };

#define NAME_CACHE 1024
#define LAUNCH_CACHE 256
#define BODY_SETS 128 /* of BODY_WAYS entries: 24 KiB */
#define BODY_WAYS 4
/* A cached TrackEvent part: type 2 + category 2 + name iid 4 + launch annotation 9 bytes at
 * most (iids are below 2^21: INTERN_MAX). */
#define BODY_MAX 32
/* A body cache key: category, name iid and launch iid in one word (0: an empty entry). */
#define BODY_KEY(cat, niid, liid) ((niid) | (liid) << 24 | (cat) << 48)
_Static_assert(INTERN_MAX < (1u << 21) && CAT_COUNT < 256, "iids too large for BODY_KEY/MAX");

struct trace_encoder {
  struct intern names;    /* EventName iids */
  struct intern strings;  /* debug annotation string values (launch configurations) */
  struct seq_state *seqs; /* by track uuid */
  uint32_t nseqs;
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
  /* The constant part of a slice BEGIN's TrackEvent by (category, name iid, launch iid),
   * packed by protobuf-c on first use: the bytes do not depend on the sequence. Set
   * associative: a miss costs a pack of the whole TrackEvent part, so distinct names should
   * not evict each other (the set index is linear in the name iid). */
  struct body_set {
    uint64_t key[BODY_WAYS]; /* BODY_KEY; the keys share a cache line */
    uint8_t len[BODY_WAYS];
    uint32_t victim; /* the next way a miss replaces: round robin */
    uint8_t bytes[BODY_WAYS][BODY_MAX];
  } body_cache[BODY_SETS];
};

static uint64_t str_hash(const char *s, size_t n)
{
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++)
    h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
  return h;
}

/* The iid of s; *is_new set when it was just added. 0: the table is full (or out of memory),
 * write the string inline. */
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
  if (t->len >= t->by_iid_cap) {
    uint32_t ncap = t->by_iid_cap ? t->by_iid_cap * 2 : 256;
    char **nb = realloc(t->by_iid, ncap * sizeof(*nb));
    if (!nb)
      return 0;
    t->by_iid = nb;
    t->by_iid_cap = ncap;
  }
  t->keys[i] = strndup(s, n);
  if (!t->keys[i])
    return 0;
  t->iids[i] = ++t->len;
  t->by_iid[t->len - 1] = t->keys[i];
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
  free(t->by_iid);
}

/* Whether the sequence has had iid's definition. */
static int seq_seen(const struct seq_state *q, int which, uint64_t iid)
{
  uint64_t word = iid >> 6;
  return word < q->seen_words[which] && (q->seen[which][word] >> (iid & 63) & 1);
}

/* Records that the sequence now has iid's definition; -ENOMEM leaves it unrecorded (the next
 * event defines it again). */
static int seq_mark(struct seq_state *q, int which, uint64_t iid)
{
  uint64_t word = iid >> 6;

  if (word >= q->seen_words[which]) {
    uint32_t n = q->seen_words[which] ? q->seen_words[which] : 4;
    uint64_t *nb;
    while (n <= word)
      n *= 2;
    nb = realloc(q->seen[which], n * sizeof(*nb));
    if (!nb)
      return -ENOMEM;
    memset(nb + q->seen_words[which], 0, (n - q->seen_words[which]) * sizeof(*nb));
    q->seen[which] = nb;
    q->seen_words[which] = n;
  }
  q->seen[which][word] |= 1ull << (iid & 63);
  return 0;
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
  h = 1 + pb_put_varint(p + 1, n);
  gpuprof__perfetto__trace_packet__pack(pkt, p + h);
  trace_out_commit(&w->out, h + n);
  w->stats.events += nevents;
  return 0;
}

static int emit(struct trace_writer *w, const Packet *pkt, unsigned nevents)
{
  return emit_sized(w, pkt, gpuprof__perfetto__trace_packet__get_packed_size(pkt), nevents);
}

/* Appends pkt without the cap check: for the closing metadata, which lives in the reserve
 * below the cap. */
static int emit_raw(struct trace_writer *w, const Packet *pkt)
{
  size_t n = gpuprof__perfetto__trace_packet__get_packed_size(pkt), h;
  uint8_t *p = (uint8_t *)trace_out_reserve(&w->out, n + 11);

  if (!p)
    return w->out.err;
  p[0] = 0x0A;
  h = 1 + pb_put_varint(p + 1, n);
  gpuprof__perfetto__trace_packet__pack(pkt, p + h);
  trace_out_commit(&w->out, h + n);
  return 0;
}

static void packet_init(Packet *pkt, uint32_t seq, uint64_t ts)
{
  gpuprof__perfetto__trace_packet__init(pkt);
  pkt->optional_trusted_packet_sequence_id_case =
      GPUPROF__PERFETTO__TRACE_PACKET__OPTIONAL_TRUSTED_PACKET_SEQUENCE_ID_TRUSTED_PACKET_SEQUENCE_ID;
  pkt->trusted_packet_sequence_id = seq;
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

static void ann_double(Annotation *a, uint64_t name_iid, double v)
{
  gpuprof__perfetto__debug_annotation__init(a);
  a->name_field_case = GPUPROF__PERFETTO__DEBUG_ANNOTATION__NAME_FIELD_NAME_IID;
  a->name_iid = name_iid;
  a->value_case = GPUPROF__PERFETTO__DEBUG_ANNOTATION__VALUE_DOUBLE_VALUE;
  a->double_value = v;
}

static void ann_str(Annotation *a, uint64_t name_iid, const char *v)
{
  gpuprof__perfetto__debug_annotation__init(a);
  a->name_field_case = GPUPROF__PERFETTO__DEBUG_ANNOTATION__NAME_FIELD_NAME_IID;
  a->name_iid = name_iid;
  a->value_case = GPUPROF__PERFETTO__DEBUG_ANNOTATION__VALUE_STRING_VALUE;
  a->string_value = (char *)v;
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
 * block of its own that the importer shows). On sequence 1, absolute REALTIME. */
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
    packet_init(&pkt, SEQ_MAIN, 0);
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
  ann_named_str(&a[n++], "trace_writer", "gpuprof trace 2");
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

  packet_init(&pkt, SEQ_MAIN, ts);
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
  int rc;

  w->enc = calloc(1, sizeof(*w->enc));
  if (!w->enc)
    return -ENOMEM;

  packet_init(&pkt, SEQ_MAIN, 0);
  pkt.has_sequence_flags = 1;
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

  /* Not subject to the cap: trace_writer_open refuses caps below twice the reserve. */
  rc = emit(w, &pkt, 0);
  if (rc)
    return rc;
  return meta_instant(w, w->meta.base_ns, "trace start", 0);
}

/* Packs the sequence's constant packet parts (see the hot path in pf_slice). */
static void seq_parts(struct seq_state *q, uint32_t seq)
{
  Gpuprof__Perfetto__SequencePart sp = GPUPROF__PERFETTO__SEQUENCE_PART__INIT;
  Gpuprof__Perfetto__EndPart ep = GPUPROF__PERFETTO__END_PART__INIT;
  Gpuprof__Perfetto__EndBody eb = GPUPROF__PERFETTO__END_BODY__INIT;

  sp.trusted_packet_sequence_id = seq;
  q->seq_len = (uint8_t)gpuprof__perfetto__sequence_part__pack(&sp, q->seq_part);
  ep.trusted_packet_sequence_id = seq;
  eb.type = GPUPROF__PERFETTO__TRACK_EVENT__TYPE__TYPE_SLICE_END;
  ep.track_event = &eb;
  q->end_len = (uint8_t)gpuprof__perfetto__end_part__pack(&ep, q->end_part);
}

/* The state of t's sequence, started (its first packet written) if it was not. NULL: out of
 * memory, or the start packet did not fit (*rc). */
static struct seq_state *seq_start(struct trace_writer *w, const struct trace_track *t, int *rc)
{
  struct trace_encoder *enc = w->enc;
  struct seq_state *q;
  Packet pkt;
  Gpuprof__Perfetto__TracePacketDefaults defaults;
  Gpuprof__Perfetto__TrackEventDefaults ted;
  Gpuprof__Perfetto__ClockSnapshot snap;
  Gpuprof__Perfetto__ClockSnapshot__Clock clocks[2], *cp[2] = {&clocks[0], &clocks[1]};
  Interned in;
  Gpuprof__Perfetto__EventCategory cats[CAT_COUNT], *catp[CAT_COUNT];
  Gpuprof__Perfetto__DebugAnnotationName names[ANN_COUNT], *np[ANN_COUNT];

  if (t->uuid >= enc->nseqs) {
    uint32_t n = enc->nseqs ? enc->nseqs : 16;
    struct seq_state *ns;
    while (n <= t->uuid)
      n *= 2;
    ns = realloc(enc->seqs, n * sizeof(*ns));
    if (!ns) {
      *rc = -ENOMEM;
      return NULL;
    }
    memset(ns + enc->nseqs, 0, (n - enc->nseqs) * sizeof(*ns));
    enc->seqs = ns;
    enc->nseqs = n;
  }
  q = &enc->seqs[t->uuid];
  if (q->started)
    return q;

  packet_init(&pkt, (uint32_t)t->uuid + 1, 0);
  pkt.has_sequence_flags = 1;
  pkt.sequence_flags = SEQ_CLEARED;
  pkt.has_first_packet_on_sequence = 1;
  pkt.first_packet_on_sequence = 1;
  gpuprof__perfetto__trace_packet_defaults__init(&defaults);
  defaults.has_timestamp_clock_id = 1;
  defaults.timestamp_clock_id = CLOCK_ID_TRACK;
  gpuprof__perfetto__track_event_defaults__init(&ted);
  ted.has_track_uuid = 1;
  ted.track_uuid = t->uuid;
  defaults.track_event_defaults = &ted;
  pkt.trace_packet_defaults = &defaults;

  gpuprof__perfetto__interned_data__init(&in);
  for (int i = 0; i < CAT_COUNT; i++) {
    gpuprof__perfetto__event_category__init(&cats[i]);
    cats[i].has_iid = 1;
    cats[i].iid = (uint64_t)i + 1;
    cats[i].name = (char *)cat_names[i];
    catp[i] = &cats[i];
  }
  for (int i = 0; i < ANN_COUNT; i++) {
    gpuprof__perfetto__debug_annotation_name__init(&names[i]);
    names[i].has_iid = 1;
    names[i].iid = (uint64_t)i + 1;
    names[i].name = (char *)ann_names[i];
    np[i] = &names[i];
  }
  in.n_event_categories = CAT_COUNT;
  in.event_categories = catp;
  in.n_debug_annotation_names = ANN_COUNT;
  in.debug_annotation_names = np;
  pkt.interned_data = &in;

  /* The track's clock reads the base time when REALTIME does; it then only moves forward. */
  gpuprof__perfetto__clock_snapshot__init(&snap);
  for (int i = 0; i < 2; i++) {
    gpuprof__perfetto__clock_snapshot__clock__init(&clocks[i]);
    clocks[i].has_clock_id = clocks[i].has_timestamp = 1;
    clocks[i].timestamp = w->meta.base_ns;
  }
  clocks[0].clock_id = CLOCK_ID_TRACK;
  clocks[0].has_is_incremental = 1;
  clocks[0].is_incremental = 1;
  clocks[1].clock_id = CLOCK_ID_REALTIME;
  snap.n_clocks = 2;
  snap.clocks = cp;
  pkt.data_case = GPUPROF__PERFETTO__TRACE_PACKET__DATA_CLOCK_SNAPSHOT;
  pkt.clock_snapshot = &snap;

  *rc = emit(w, &pkt, 0);
  if (*rc)
    return NULL;
  q->started = 1;
  q->last_ts = w->meta.base_ns;
  seq_parts(q, (uint32_t)t->uuid + 1);
  return q;
}

/* seq_start's check of a started sequence, inline: it is made for every event. */
static inline struct seq_state *seq_for(struct trace_writer *w, const struct trace_track *t,
                                        int *rc)
{
  struct trace_encoder *enc = w->enc;

  if (t->uuid < enc->nseqs && enc->seqs[t->uuid].started)
    return &enc->seqs[t->uuid];
  return seq_start(w, t, rc);
}

/* Sets a hot packet's timestamp: a delta on the track's clock, or absolute REALTIME when the
 * clock would have to go back. clock: the clock value, committed once the packet is written.
 * A macro: EventPacket, KernelPacket and EndPacket are distinct types with these fields. */
#define SET_TS(pkt, clock, ts)                                                                     \
  do {                                                                                             \
    if ((ts) >= (clock)) {                                                                         \
      (pkt).timestamp = (ts) - (clock);                                                            \
      (clock) = (ts);                                                                              \
    } else {                                                                                       \
      (pkt).timestamp = (ts);                                                                      \
      (pkt).has_timestamp_clock_id = 1;                                                            \
      (pkt).timestamp_clock_id = CLOCK_ID_REALTIME;                                                \
    }                                                                                              \
  } while (0)

static int emit_descriptor(struct trace_writer *w, Descriptor *d)
{
  Packet pkt;

  packet_init(&pkt, SEQ_MAIN, 0);
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
  char name[320], tname[TRACE_NAME_MAX + 1];
  char *cmdline[1];
  struct trace_track *parent;

  /* Names are protobuf strings, which must be UTF-8 (the JSON encoding replaces invalid bytes
   * the same way): a thread, process or device name is bytes from the system. */
  trace_track_name(w, t, name, sizeof(name));
  utf8_fix(name);
  if (thread_name) {
    snprintf(tname, sizeof(tname), "%s", thread_name);
    utf8_fix(tname);
    thread_name = tname;
  }
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
  case TRACK_HOST_NVTX:
    d.static_or_dynamic_name_case =
        GPUPROF__PERFETTO__TRACK_DESCRIPTOR__STATIC_OR_DYNAMIC_NAME_NAME;
    d.name = name;
    parent = NULL;
    for (uint32_t i = 0; i < w->tracks_cap; i++)
      if (w->tracks[i].kind == TRACK_HOST_PROCESS)
        parent = &w->tracks[i];
    if (parent) {
      d.has_parent_uuid = 1;
      d.parent_uuid = parent->uuid;
    }
    break;
  case TRACK_GPU_STREAM:
  case TRACK_GPU_SYNC:
  case TRACK_GPU_MEMORY:
  case TRACK_GPU_NCCL:
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
    } else if (t->kind == TRACK_GPU_NCCL) {
      d.sibling_order_rank = trace_nccl_rank(t->b);
    } else {
      d.sibling_order_rank = trace_stream_rank(t->b, t->kind == TRACK_GPU_SYNC ? 1 + t->lane : 0);
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

/* The name's iid in the trace's table (0: could not be interned). name/len: the caller's
 * string, whose pointer keys the cache. */
static uint64_t name_iid(struct trace_writer *w, const char *name, size_t len)
{
  struct trace_encoder *enc = w->enc;
  uint32_t slot = (uint32_t)(((uintptr_t)name >> 3) * 0x9e3779b1u) % NAME_CACHE;
  const char *key = NULL;
  int is_new;
  uint64_t iid;

  /* A cached pointer may since have been freed and reused for another string: compare the
   * content with the interned copy. */
  if (enc->name_cache[slot].ptr == name && enc->name_cache[slot].len == len &&
      !memcmp(enc->name_cache[slot].key, name, len))
    return enc->name_cache[slot].iid;
  if (utf8_valid_prefix(name, len) != len) {
    /* Interned under its repaired form ('?' for each invalid byte, as in JSON); the cache
     * compares against that, so such a name is looked up in the table every time. */
    char fixed[TRACE_NAME_MAX + 1];
    memcpy(fixed, name, len);
    fixed[len] = '\0';
    utf8_fix(fixed);
    return intern_get(&enc->names, fixed, len, &is_new, &key);
  }
  iid = intern_get(&enc->names, name, len, &is_new, &key);
  if (iid) {
    enc->name_cache[slot].ptr = name;
    enc->name_cache[slot].len = len;
    enc->name_cache[slot].key = key;
    enc->name_cache[slot].iid = iid;
  }
  return iid;
}

/* A hash of a launch configuration: four independent multiplies rather than a byte-serial
 * chain, which cost more than the rest of the lookup. */
static inline uint32_t launch_hash(const int32_t cfg[8])
{
  uint64_t w[4], h;

  memcpy(w, cfg, sizeof(w));
  h = w[0] * 0x9e3779b97f4a7c15ull ^ w[1] * 0xc2b2ae3d27d4eb4full ^ w[2] * 0x165667b19e3779f9ull ^
      w[3] * 0xd6e8feb86659fd93ull;
  return (uint32_t)((h ^ h >> 29) * 0x9e3779b97f4a7c15ull >> 32);
}

/* The iid of a kernel's launch string ("grid [..] block [..] registers N shared_mem N"); 0 if
 * it could not be interned, with the string in buf for writing inline. */
static uint64_t launch_iid(struct trace_writer *w, const struct trace_gpu_slice *g, char *buf,
                           size_t n)
{
  struct trace_encoder *enc = w->enc;
  int32_t cfg[8] = {g->u.kernel.grid[0],
                    g->u.kernel.grid[1],
                    g->u.kernel.grid[2],
                    g->u.kernel.block[0],
                    g->u.kernel.block[1],
                    g->u.kernel.block[2],
                    (int32_t)g->u.kernel.registers_per_thread,
                    (int32_t)(g->u.kernel.static_smem + g->u.kernel.dynamic_smem)};
  uint32_t h = launch_hash(cfg) % LAUNCH_CACHE;
  uint64_t iid;
  int len, is_new;

  if (enc->launch_cache[h].iid && !memcmp(enc->launch_cache[h].cfg, cfg, sizeof(cfg)))
    return enc->launch_cache[h].iid;
  len =
      snprintf(buf, n, "grid [%d,%d,%d] block [%d,%d,%d] registers %u shared_mem %llu",
               g->u.kernel.grid[0], g->u.kernel.grid[1], g->u.kernel.grid[2], g->u.kernel.block[0],
               g->u.kernel.block[1], g->u.kernel.block[2], g->u.kernel.registers_per_thread,
               (unsigned long long)g->u.kernel.static_smem + g->u.kernel.dynamic_smem);
  if (len < 0 || (size_t)len >= n)
    len = (int)strlen(buf);
  iid = intern_get(&enc->strings, buf, (size_t)len, &is_new, NULL);
  if (iid) {
    memcpy(enc->launch_cache[h].cfg, cfg, sizeof(cfg));
    enc->launch_cache[h].iid = iid;
  }
  return iid;
}

static uint64_t slice_cat(const struct trace_track *t, const struct trace_slice *s)
{
  if (s->nccl)
    return CAT_NCCL;
  if (s->gpu)
    return s->gpu->kind == TRACE_GPU_KERNEL   ? CAT_KERNEL
           : s->gpu->kind == TRACE_GPU_MEMCPY ? CAT_MEMCPY
                                              : CAT_MEMSET;
  return t->kind == TRACK_GPU_SYNC ? CAT_SYNC : CAT_API;
}

/* A hot packet packed at p + 2 framed as one Trace.packet field (1, length-delimited). */
static inline size_t frame(uint8_t *p, size_t n)
{
  return pb_frame_field(p, 0x0A, n);
}

/*
 * The hot path: a slice's BEGIN and END assembled from parts (perfetto_trace.proto, "Pieces of
 * the hottest packets"). protobuf-c walks every field of a message's descriptor, nested ones
 * again, so packing a whole BEGIN (80 ns) and END (27 ns) per slice capped the writer; the parts
 * that do not change from one slice to the next are packed once, and per event protobuf-c packs
 * only a timestamp and the ids. Taken when the packet needs no interned data and no absolute
 * timestamp, and the BEGIN no annotation but the interned launch string; otherwise the whole
 * packet is packed as an EventPacket, KernelPacket or EndPacket.
 */

/* Packs the constant TrackEvent part of a BEGIN into way i of the body cache's set. Not
 * inlined: on the hot path (a hit) the compiler would otherwise initialize the messages before
 * the check. */
__attribute__((noinline)) static const uint8_t *
body_fill(struct body_set *set, uint32_t i, uint64_t cat, uint64_t niid, uint64_t liid, size_t *len)
{
  Gpuprof__Perfetto__KernelBody kb = GPUPROF__PERFETTO__KERNEL_BODY__INIT;
  Gpuprof__Perfetto__LaunchAnnotation la = GPUPROF__PERFETTO__LAUNCH_ANNOTATION__INIT;

  kb.type = GPUPROF__PERFETTO__TRACK_EVENT__TYPE__TYPE_SLICE_BEGIN;
  kb.n_category_iids = 1;
  kb.category_iids = &cat;
  kb.has_name_iid = 1;
  kb.name_iid = niid;
  if (liid) {
    la.name_iid = ANN_LAUNCH;
    la.has_string_value_iid = 1;
    la.string_value_iid = liid;
    kb.launch = &la;
  }
  if (gpuprof__perfetto__kernel_body__get_packed_size(&kb) > BODY_MAX)
    return NULL;
  set->len[i] = (uint8_t)gpuprof__perfetto__kernel_body__pack(&kb, set->bytes[i]);
  set->key[i] = BODY_KEY(cat, niid, liid);
  *len = set->len[i];
  return set->bytes[i];
}

/* The cached constant part of the TrackEvent of a BEGIN of category cat named by niid, with the
 * launch annotation liid when nonzero (*len bytes); NULL if it does not fit the cache. */
static inline const uint8_t *body_part(struct trace_encoder *enc, uint64_t cat, uint64_t niid,
                                       uint64_t liid, size_t *len)
{
  uint64_t key = BODY_KEY(cat, niid, liid);
  struct body_set *set = &enc->body_cache[((uint32_t)niid + (uint32_t)liid * 0x9e3779b1u +
                                           (uint32_t)cat * 0x85ebca77u) %
                                          BODY_SETS];

  for (uint32_t i = 0; i < BODY_WAYS; i++)
    if (set->key[i] == key) {
      *len = set->len[i];
      return set->bytes[i];
    }
  return body_fill(set, set->victim++ % BODY_WAYS, cat, niid, liid, len);
}

/* A BEGIN at p from parts: the sequence's, the timestamp delta, and one TrackEvent field whose
 * bytes are the cached constant part followed by the slice's ids. Returns the bytes written. */
static size_t pack_begin_parts(const struct seq_state *q, const uint8_t *body, size_t nbody,
                               uint64_t delta, const struct trace_slice *s, uint64_t *flow,
                               uint8_t *p)
{
  Gpuprof__Perfetto__TimestampPart tp = GPUPROF__PERFETTO__TIMESTAMP_PART__INIT;
  Gpuprof__Perfetto__SliceIds ids = GPUPROF__PERFETTO__SLICE_IDS__INIT;
  size_t o = 2, ev;

  /* Whole arrays: a fixed-size copy is a few moves, the bytes past the part are overwritten. */
  memcpy(p + o, q->seq_part, sizeof(q->seq_part));
  o += q->seq_len;
  tp.timestamp = delta;
  o += gpuprof__perfetto__timestamp_part__pack(&tp, p + o);
  if (s->corr_id) {
    ids.has_correlation_id = 1;
    ids.correlation_id = s->corr_id;
  }
  if (s->flow_out) {
    ids.n_flow_ids = 1;
    ids.flow_ids = flow;
  } else if (s->flow_in) {
    ids.n_terminating_flow_ids = 1;
    ids.terminating_flow_ids = flow;
  }
  /* TracePacket.track_event: field 11, length-delimited; one field (see the schema). */
  ev = o;
  memcpy(p + ev + 2, body, BODY_MAX);
  o += pb_frame_field(p + ev, 0x5A,
                      nbody + gpuprof__perfetto__slice_ids__pack(&ids, p + ev + 2 + nbody));
  return frame(p, o - 2);
}

/* An END at p from the sequence's part and the timestamp delta; returns the bytes written. */
static size_t pack_end_parts(const struct seq_state *q, uint64_t delta, uint8_t *p)
{
  Gpuprof__Perfetto__TimestampPart tp = GPUPROF__PERFETTO__TIMESTAMP_PART__INIT;

  memcpy(p + 2, q->end_part, sizeof(q->end_part));
  tp.timestamp = delta;
  return frame(p, q->end_len + gpuprof__perfetto__timestamp_part__pack(&tp, p + 2 + q->end_len));
}

/* The generic BEGIN (API calls, syncs, copies, sets, graph kernels) packed at p + 2. */
static size_t pack_begin(HotPacket *bp, HotEvent *be, const struct trace_slice *s, uint64_t liid,
                         char *launch, uint8_t *p)
{
  const struct trace_gpu_slice *g = s->gpu;
  const struct trace_nccl_slice *nc = s->nccl;
  Annotation a[18], *ap[18];
  const char *kind;
  char hash[24];
  size_t na = 0;

  /* NCCL ops are rare: their arguments are named inline, not interned. */
  if (nc) {
    ann_named_uint(&a[na++], "count", nc->count);
    ann_named_str(&a[na++], "datatype", nc->datatype ? nc->datatype : "");
    ann_named_uint(&a[na++], "bytes", nc->bytes);
    if (nc->root >= 0)
      ann_named_uint(&a[na++], "root", (uint64_t)nc->root);
    if (nc->peer >= 0)
      ann_named_uint(&a[na++], "peer", (uint64_t)nc->peer);
    if (nc->seq != UINT64_MAX)
      ann_named_uint(&a[na++], "seq", nc->seq);
    if (nc->algo && *nc->algo)
      ann_named_str(&a[na++], "algo", nc->algo);
    if (nc->proto && *nc->proto)
      ann_named_str(&a[na++], "proto", nc->proto);
    if (!nc->state || nc->nchannels)
      ann_named_uint(&a[na++], "nChannels", nc->nchannels);
    snprintf(hash, sizeof(hash), "%016llx", (unsigned long long)nc->comm_hash);
    ann_named_str(&a[na++], "comm", hash);
    ann_named_uint(&a[na++], "rank", (uint64_t)nc->rank);
    ann_named_uint(&a[na++], "nranks", (uint64_t)nc->nranks);
    if (nc->stream != UINT32_MAX)
      ann_named_uint(&a[na++], "stream", nc->stream);
    if (nc->state) {
      /* Still pending at the capture's end (docs/TRACES.md "NCCL"). */
      ann_named_str(&a[na++], "state", nc->state);
      ann_named_uint(&a[na++], "posted_ns", nc->posted_ns);
    }
    if (nc->group_ops > 1) {
      /* The interval is the op's share of a grouped kernel, not when it ran. */
      ann_named_uint(&a[na++], "group_ops", nc->group_ops);
      ann_named_uint(&a[na++], "kernel_ns", nc->kernel_ns);
    }
    for (size_t i = 0; i < na; i++)
      ap[i] = &a[i];
    be->n_debug_annotations = na;
    be->debug_annotations = ap;
  }

  if (g) {
    uint64_t dur = s->end - s->start;
    switch (g->kind) {
    case TRACE_GPU_KERNEL:
      gpuprof__perfetto__debug_annotation__init(&a[na]);
      a[na].name_field_case = GPUPROF__PERFETTO__DEBUG_ANNOTATION__NAME_FIELD_NAME_IID;
      a[na].name_iid = ANN_LAUNCH;
      if (liid) {
        a[na].value_case = GPUPROF__PERFETTO__DEBUG_ANNOTATION__VALUE_STRING_VALUE_IID;
        a[na].string_value_iid = liid;
      } else {
        a[na].value_case = GPUPROF__PERFETTO__DEBUG_ANNOTATION__VALUE_STRING_VALUE;
        a[na].string_value = launch;
      }
      na++;
      break;
    case TRACE_GPU_MEMCPY:
      ann_uint(&a[na++], ANN_BYTES, g->u.memcpy.bytes);
      ann_double(&a[na++], ANN_BANDWIDTH,
                 (double)trace_bandwidth_milli(g->u.memcpy.bytes, dur) / 1000.0);
      if (g->u.memcpy.copy_kind == 10) {
        ann_uint(&a[na++], ANN_SRC_DEVICE, g->u.memcpy.src_device);
        ann_uint(&a[na++], ANN_DST_DEVICE, g->u.memcpy.dst_device);
      }
      if ((kind = trace_memory_kind_name(g->u.memcpy.src_kind)))
        ann_str(&a[na++], ANN_SRC_KIND, kind);
      if ((kind = trace_memory_kind_name(g->u.memcpy.dst_kind)))
        ann_str(&a[na++], ANN_DST_KIND, kind);
      break;
    case TRACE_GPU_MEMSET:
      ann_uint(&a[na++], ANN_BYTES, g->u.memset.bytes);
      ann_double(&a[na++], ANN_BANDWIDTH,
                 (double)trace_bandwidth_milli(g->u.memset.bytes, dur) / 1000.0);
      ann_uint(&a[na++], ANN_VALUE, g->u.memset.value);
      break;
    }
    if (g->graph_id) {
      ann_uint(&a[na++], ANN_GRAPH_ID, g->graph_id);
      ann_uint(&a[na++], ANN_GRAPH_NODE_ID, g->graph_node_id);
    }
    for (size_t i = 0; i < na; i++)
      ap[i] = &a[i];
    be->n_debug_annotations = na;
    be->debug_annotations = ap;
  }
  return gpuprof__perfetto__event_packet__pack(bp, p + 2);
}

/*
 * The fields every SLICE_BEGIN packet of a GPU slice sets, for the two generated packet types
 * that carry one (protobuf-c structs share no type): sequence, timestamp on the track's
 * incremental clock, interned data, category, name (interned when niid), correlation id.
 */
#define FILL_BEGIN(pkt, body)                                                                      \
  do {                                                                                             \
    (pkt).trusted_packet_sequence_id = (uint32_t)t->uuid + 1;                                      \
    SET_TS(pkt, clock, s->start);                                                                  \
    (pkt).interned_data = inp;                                                                     \
    (pkt).track_event = &(body);                                                                   \
    (body).type = GPUPROF__PERFETTO__TRACK_EVENT__TYPE__TYPE_SLICE_BEGIN;                          \
    (body).n_category_iids = 1;                                                                    \
    (body).category_iids = &cat;                                                                   \
    if (niid) {                                                                                    \
      (body).has_name_iid = 1;                                                                     \
      (body).name_iid = niid;                                                                      \
    } else {                                                                                       \
      (body).name = name;                                                                          \
    }                                                                                              \
    if (s->corr_id) {                                                                              \
      (body).has_correlation_id = 1;                                                               \
      (body).correlation_id = s->corr_id;                                                          \
    }                                                                                              \
  } while (0)

static int pf_slice(struct trace_writer *w, struct trace_track *t, const struct trace_slice *s)
{
  const struct trace_gpu_slice *g = s->gpu;
  int kernel = g && g->kind == TRACE_GPU_KERNEL;
  Interned in, *inp = NULL;
  Gpuprof__Perfetto__EventName en, *enp;
  Gpuprof__Perfetto__InternedString is, *isp;
  const uint8_t *body;
  size_t nbody;
  uint64_t flow = s->flow_out ? s->flow_out : s->flow_in, cat, niid, liid = 0, clock;
  char name[TRACE_NAME_MAX + 1];
  char launch[160];
  struct seq_state *q;
  uint8_t *p;
  size_t nb, ne;
  int rc = 0, new_name, new_launch = 0;
  char nvtx_cat_buf[256], *nvtx_cat = nvtx_cat_buf;
  Annotation nvtx_ann[2], *nvtx_annp[2] = {&nvtx_ann[0], &nvtx_ann[1]};

  q = seq_for(w, t, &rc);
  if (!q)
    return rc;
  clock = q->last_ts;
  cat = slice_cat(t, s);
  if (s->cat) {
    snprintf(nvtx_cat_buf, sizeof(nvtx_cat_buf), "%s", s->cat);
    utf8_fix(nvtx_cat_buf);
  }
  niid = name_iid(w, s->name, s->name_len);
  if (!niid) {
    memcpy(name, s->name, s->name_len);
    name[s->name_len] = '\0';
    utf8_fix(name);
  }
  new_name = niid && !seq_seen(q, SEEN_NAME, niid);
  if (kernel) {
    liid = launch_iid(w, g, launch, sizeof(launch));
    new_launch = liid && !seq_seen(q, SEEN_STRING, liid);
  }

  /* Definitions this sequence has not had yet ride on the packet that first uses them. */
  if (new_name || new_launch) {
    gpuprof__perfetto__interned_data__init(&in);
    if (new_name) {
      gpuprof__perfetto__event_name__init(&en);
      en.has_iid = 1;
      en.iid = niid;
      en.name = w->enc->names.by_iid[niid - 1];
      enp = &en;
      in.n_event_names = 1;
      in.event_names = &enp;
    }
    if (new_launch) {
      gpuprof__perfetto__interned_string__init(&is);
      is.has_iid = is.has_str = 1;
      is.iid = liid;
      is.str.data = (uint8_t *)w->enc->strings.by_iid[liid - 1];
      is.str.len = strlen(w->enc->strings.by_iid[liid - 1]);
      isp = &is;
      in.n_debug_annotation_string_values = 1;
      in.debug_annotation_string_values = &isp;
    }
    inp = &in;
  }

  /* Room for both packets: the name and the launch string at most twice each (inline or
   * interned, plus their definitions) and the bounded scalar fields. */
  p = (uint8_t *)trace_out_reserve(&w->out, 2 * (s->name_len + sizeof(launch)) + 512);
  if (!p)
    return w->out.err;

  if (!inp && niid && s->start >= clock && !s->nccl && !s->cat &&
      (!g || (kernel && !g->graph_id && liid)) &&
      (body = body_part(w->enc, cat, niid, liid, &nbody))) {
    nb = pack_begin_parts(q, body, nbody, s->start - clock, s, &flow, p);
    clock = s->start;
  } else if (kernel && !g->graph_id) {
    Gpuprof__Perfetto__KernelPacket kp;
    Gpuprof__Perfetto__KernelBody kb;
    Gpuprof__Perfetto__LaunchAnnotation la;

    gpuprof__perfetto__kernel_packet__init(&kp);
    gpuprof__perfetto__kernel_body__init(&kb);
    gpuprof__perfetto__launch_annotation__init(&la);
    FILL_BEGIN(kp, kb);
    if (s->flow_in) {
      kb.n_terminating_flow_ids = 1;
      kb.terminating_flow_ids = &flow;
    }
    la.name_iid = ANN_LAUNCH;
    if (liid) {
      la.has_string_value_iid = 1;
      la.string_value_iid = liid;
    } else {
      la.string_value = launch;
    }
    kb.launch = &la;
    nb = frame(p, gpuprof__perfetto__kernel_packet__pack(&kp, p + 2));
  } else {
    HotPacket bp;
    HotEvent be;

    gpuprof__perfetto__event_packet__init(&bp);
    gpuprof__perfetto__event_body__init(&be);
    FILL_BEGIN(bp, be);
    if (s->cat) {
      /* NVTX: the domain is the category, inline (domains are few and user-named). */
      be.n_category_iids = 0;
      be.n_categories = 1;
      be.categories = &nvtx_cat;
      if (s->instant)
        be.type = GPUPROF__PERFETTO__TRACK_EVENT__TYPE__TYPE_INSTANT;
      if (t->kind == TRACK_HOST_NVTX) {
        ann_named_uint(&nvtx_ann[0], "start_tid", s->start_tid);
        ann_named_uint(&nvtx_ann[1], "end_tid", s->end_tid);
        be.n_debug_annotations = 2;
        be.debug_annotations = nvtx_annp;
      }
    }
    if (s->flow_out) {
      be.n_flow_ids = 1;
      be.flow_ids = &flow;
    } else if (s->flow_in) {
      be.n_terminating_flow_ids = 1;
      be.terminating_flow_ids = &flow;
    }
    nb = frame(p, pack_begin(&bp, &be, s, liid, launch, p));
  }

  if (s->instant) {
    ne = 0;
  } else if (s->end >= clock) {
    ne = pack_end_parts(q, s->end - clock, p + nb);
    clock = s->end;
  } else {
    Gpuprof__Perfetto__EndPacket ep;
    Gpuprof__Perfetto__EndBody eb;

    gpuprof__perfetto__end_packet__init(&ep);
    gpuprof__perfetto__end_body__init(&eb);
    ep.trusted_packet_sequence_id = (uint32_t)t->uuid + 1;
    SET_TS(ep, clock, s->end);
    ep.track_event = &eb;
    eb.type = GPUPROF__PERFETTO__TRACK_EVENT__TYPE__TYPE_SLICE_END;
    ne = frame(p + nb, gpuprof__perfetto__end_packet__pack(&ep, p + nb + 2));
  }

  /* Both halves or neither: an END without its BEGIN, or the reverse, would leave the track
   * unbalanced. The packets stay uncommitted unless both fit. */
  rc = trace_fits(w, nb + ne, 1);
  if (rc)
    return rc;
  trace_out_commit(&w->out, nb + ne);
  q->last_ts = clock;
  if (new_name)
    seq_mark(q, SEEN_NAME, niid);
  if (new_launch)
    seq_mark(q, SEEN_STRING, liid);
  w->stats.events += 1 + (s->flow_out || s->flow_in);
  return 0;
}

static int pf_counter(struct trace_writer *w, struct trace_track *t, uint64_t ts, uint64_t value)
{
  HotPacket pkt;
  HotEvent ev;
  struct seq_state *q;
  uint64_t clock;
  size_t n;
  uint8_t *p;
  int rc = 0;

  q = seq_for(w, t, &rc);
  if (!q)
    return rc;
  clock = q->last_ts;
  gpuprof__perfetto__event_packet__init(&pkt);
  gpuprof__perfetto__event_body__init(&ev);
  pkt.trusted_packet_sequence_id = (uint32_t)t->uuid + 1;
  pkt.track_event = &ev;
  SET_TS(pkt, clock, ts);
  ev.type = GPUPROF__PERFETTO__TRACK_EVENT__TYPE__TYPE_COUNTER;
  ev.has_counter_value = 1;
  ev.counter_value = (int64_t)value;
  p = (uint8_t *)trace_out_reserve(&w->out, 64);
  if (!p)
    return w->out.err;
  n = frame(p, gpuprof__perfetto__event_packet__pack(&pkt, p + 2));
  rc = trace_fits(w, n, 1);
  if (rc)
    return rc;
  trace_out_commit(&w->out, n);
  q->last_ts = clock;
  w->stats.events++;
  return 0;
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
  for (uint32_t i = 0; i < w->enc->nseqs; i++) {
    free(w->enc->seqs[i].seen[0]);
    free(w->enc->seqs[i].seen[1]);
  }
  free(w->enc->seqs);
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
