/* gpuprof merge: several processes' capture traces in one file, on one clock. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "cli/merge.h"
#include "cli/tracefile.h"
#include "export/pbframe.h"
#include "export/trace_internal.h"
#include "include/gpuprof/gpuprof.h"
#include "proto/perfetto_trace.pb-c.h"

/*
 * How the inputs become one trace (docs/TRACES.md, "Merging processes"):
 *
 * Every input is read twice, streaming, never whole: a first pass finds what is needed
 * before any event is rewritten (JSON: the metadata, which the writer puts at the end, with
 * the base time its timestamps are relative to; both: the host pid, the NCCL rank from the
 * communicator track names), a second pass rewrites each event and writes it out. Memory is
 * a line or packet buffer and a few small tables per input, whatever the traces' sizes.
 *
 * Identifiers that are unique only within one process are made unique per input k = 0, 1, ...
 * by arithmetic, so no map grows with the events:
 *   - host pid: kept, unless an earlier input has it (pid 1 in two containers); it then gets
 *     a free pid counted down from 2^22 - 1 (above any pid_max), and its process is named
 *     with its real pid;
 *   - GPU "processes": the writer's trace_gpu_pid(host pid, device), from the new host pid;
 *   - flow ids and correlation ids (CUPTI's, 32-bit): k * 2^32 + id, so input 0 keeps its ids;
 *   - .pftrace track uuids (1 .. TRACE_MAX_TRACKS + 1) and sequence ids (uuid + 1, and 1):
 *     k * SEQ_STRIDE + id. Sequences stay apart, so interned data and incremental clocks
 *     stay valid as written.
 * The ranges are disjoint only for ids in the writer's ranges: an input with others is
 * refused (json_rewrite, pf_check), or its ids would meet another input's.
 * JSON timestamps are microseconds with three decimals relative to each input's base; they
 * are rebased to the earliest base as integers of nanoseconds (the number's text, never a
 * double), and refused from 2^42 µs on, where the importer's double loses the ns. Process sort
 * indices become k * 100 + the writer's (host 1, GPUs 10 + device), so each input's processes stay
 * together in input order.
 */

#define EXIT_BAD_INPUT 2
#define META_TEXT_MAX (1024u * 1024u) /* the writer's metadata fits its 96 KiB tail reserve */
#define SEQ_STRIDE ((uint64_t)TRACE_MAX_TRACKS + 3)
#define MAX_UUID ((uint64_t)TRACE_MAX_TRACKS + 1) /* the writer's "gpuprof" metadata track */
#define ID_SHIFT 32
#define HOST_PID_SPACE 0x400000u /* trace_gpu_pid keeps 22 bits of the host pid */
#define OUT_BUF (1u << 20)
/* Perfetto reads a JSON ts into a double: ns survive below 2^42 µs (formats.md, Precision). */
#define JSON_TS_MAX_NS ((UINT64_C(1) << 42) * 1000u)

enum family { FAM_JSON = 1, FAM_PFTRACE };

struct input {
  const char *path;
  enum family fam;
  int gz;
  uint32_t k;
  uint64_t base_ns;
  uint32_t pid, new_pid;
  int rank, nranks;  /* rank -1: unknown */
  json_object *meta; /* the input's metadata */
  int finished;      /* .pftrace: has its "trace end" */
  uint64_t packets;  /* .pftrace: whole packets (a cut last one is left out) */
  uint64_t events;   /* events (JSON lines, .pftrace packets) written */
};

struct merge {
  struct input *in;
  size_t n;
  uint64_t base_ns;
  gzFile gz;     /* JSON output ("wT": plain) */
  int gz_fd;     /* a second descriptor of its file, to fsync it after gzclose (-1: none) */
  FILE *pf;      /* .pftrace output */
  uint8_t *pbuf; /* packing buffer */
  size_t pbuf_cap;
  /* .pftrace output: packets gathered into chunks of TRACE_OUT_BUF, each written deflated
   * as one compressed_packets packet, as the agent writes them (export/trace_out.c) */
  uint8_t *chunk, *zbuf;
  size_t chunk_len, zcap;
  z_stream z;
  int z_open;
  uint64_t events;
};

/* ---- identifiers ---- */

static uint64_t remap_id(const struct input *in, uint64_t id)
{
  return id ? ((uint64_t)in->k << ID_SHIFT) + id : 0;
}

static uint64_t remap_uuid(const struct input *in, uint64_t uuid)
{
  return (uint64_t)in->k * SEQ_STRIDE + uuid;
}

/* The output pid of a pid the input uses: its host or one of its GPUs; -1 if neither. */
static int64_t remap_pid(const struct input *in, uint64_t pid, int *gpu)
{
  *gpu = 0;
  if (pid == in->pid)
    return in->new_pid;
  if (pid <= UINT32_MAX && trace_gpu_pid(in->pid, (uint32_t)pid & 0xffu) == pid) {
    *gpu = 1;
    return trace_gpu_pid(in->new_pid, (uint32_t)pid & 0xffu);
  }
  return -1;
}

/* "NCCL comm <label> rank <r>/<n>": the input's rank in its largest communicator. */
static void note_rank(struct input *in, const char *name)
{
  const char *p = NULL;
  int r, n;

  if (strncmp(name, "NCCL comm ", 10) != 0)
    return;
  /* The last " rank ": a communicator's label may contain the word. */
  for (const char *q = name; (q = strstr(q, " rank ")); q++)
    p = q;
  if (!p)
    return;
  if (sscanf(p, " rank %d/%d", &r, &n) == 2 && r >= 0 && n > in->nranks) {
    in->rank = r;
    in->nranks = n;
  }
}

/* The label a merged process gets: "pid 4242, rank 1". */
static void label(const struct input *in, char *buf, size_t n)
{
  if (in->rank >= 0)
    snprintf(buf, n, "pid %" PRIu32 ", rank %d", in->pid, in->rank);
  else
    snprintf(buf, n, "pid %" PRIu32, in->pid);
}

/* "GPU 0 (NVIDIA H100)" -> "GPU 0 (pid 4242, rank 1, NVIDIA H100)". */
static void gpu_name(const struct input *in, const char *orig, char *buf, size_t n)
{
  char l[64];
  const char *paren = strchr(orig, '(');
  size_t head = paren ? (size_t)(paren - orig) : strlen(orig);
  size_t tail_len = paren ? strlen(paren + 1) : 0;

  label(in, l, sizeof(l));
  while (head && orig[head - 1] == ' ')
    head--;
  if (paren && tail_len && paren[tail_len] == ')')
    snprintf(buf, n, "%.*s (%s, %.*s", (int)head, orig, l, (int)tail_len, paren + 1);
  else
    snprintf(buf, n, "%.*s (%s)", (int)head, orig, l);
}

/* The host process keeps its name, plus its real pid when that changed and its rank. */
static const char *host_name(const struct input *in, const char *orig, char *buf, size_t n)
{
  char l[64];

  if (in->new_pid != in->pid)
    label(in, l, sizeof(l));
  else if (in->rank >= 0)
    snprintf(l, sizeof(l), "rank %d", in->rank);
  else
    return orig;
  snprintf(buf, n, "%s (%s)", orig, l);
  return buf;
}

/* Host pids: an input keeps its own unless an earlier one has it (two containers' pid 1). */
static void assign_pids(struct merge *m)
{
  for (size_t i = 0; i < m->n; i++) {
    struct input *in = &m->in[i];
    uint32_t cand = in->pid;
    int taken;

    for (uint32_t next = HOST_PID_SPACE - 1;; next--) {
      taken = cand >= HOST_PID_SPACE;
      for (size_t j = 0; j < i && !taken; j++)
        taken = m->in[j].new_pid == cand;
      /* A replacement must not be another input's real pid either. */
      for (size_t j = 0; j < m->n && !taken && cand != in->pid; j++)
        taken = m->in[j].pid == cand;
      if (!taken || !next)
        break;
      cand = next;
    }
    in->new_pid = cand;
  }
}

/* ---- JSON ---- */

/* Pass 1: the header, the metadata at the end, the NCCL ranks in thread names. */
static int json_scan(struct input *in)
{
  struct tf_lines l;
  json_tokener *tok = tf_tokener_new();
  char *meta = NULL;
  size_t meta_len = 0;
  int rc, in_meta = 0;

  if (!tok)
    return tf_io_fail(in->path, "cannot parse", ENOMEM);
  rc = tf_lines_open(&l, in->path);
  if (rc)
    goto out;
  while ((rc = tf_line_next(&l)) > 0) {
    if (l.no == 1 && strncmp(l.buf, TF_JSON_HEADER, sizeof(TF_JSON_HEADER) - 1) != 0) {
      if (!strncmp(l.buf, TF_JSON_HEADER_UNFINISHED, sizeof(TF_JSON_HEADER_UNFINISHED) - 1))
        rc = tf_fail(in->path, "the trace was not finished (its process was killed during the "
                               "capture, or the file was cut): without its metadata its times "
                               "cannot be placed on a common clock; open it on its own");
      else
        rc = tf_fail(in->path, "not a gpuprof trace (no {\"traceEvents\":[ at its start)");
      goto out;
    }
    if (!in_meta && !strncmp(l.buf, TF_JSON_META, sizeof(TF_JSON_META) - 1)) {
      in_meta = 1;
      meta = malloc(META_TEXT_MAX);
      if (!meta) {
        rc = tf_io_fail(in->path, "cannot read its metadata", ENOMEM);
        goto out;
      }
      l.len -= sizeof(TF_JSON_META) - 1;
      memmove(l.buf, l.buf + sizeof(TF_JSON_META) - 1, l.len + 1);
    }
    if (in_meta) {
      if (meta_len + l.len + 1 >= META_TEXT_MAX) {
        rc = tf_fail(in->path, "metadata larger than %u bytes: not a gpuprof trace", META_TEXT_MAX);
        goto out;
      }
      memcpy(meta + meta_len, l.buf, l.len);
      meta_len += l.len;
      meta[meta_len++] = '\n';
      if (rc == 2)
        break;
      continue;
    }
    size_t len;
    char *text = tf_event_text(&l, &len);
    if (!len)
      continue;
    if (text[0] != '{' || rc == 2) {
      rc = tf_fail(in->path,
                   "line %" PRIu64 " is not a whole event: not a gpuprof trace, or the "
                   "file was cut",
                   l.no);
      goto out;
    }
    if (!strncmp(text, "{\"ph\":\"M\",\"name\":\"thread_name\"", 30)) {
      json_object *o = tf_parse_event(tok, text, len), *args;
      const char *name;
      if (o && json_object_object_get_ex(o, "args", &args) && (name = tf_str_of(args, "name")))
        note_rank(in, name);
      json_object_put(o);
    }
  }
  if (rc < 0 && rc != -EPIPE)
    goto out; /* reported */
  if (rc == -EPIPE || !in_meta) {
    rc = tf_fail(in->path, "the trace was not finished (its process was killed during the "
                           "capture, or the file was cut): without its metadata its times cannot "
                           "be placed on a common clock; open it on its own");
    goto out;
  }
  if (rc < 0)
    goto out;
  /* meta is {"base_time_ns":...}} plus a newline: the trace's closing brace is not its own. */
  while (meta_len && (meta[meta_len - 1] == '\n' || meta[meta_len - 1] == ' '))
    meta_len--;
  if (meta_len < 2 || meta[meta_len - 1] != '}') {
    rc = tf_fail(in->path, "its metadata is cut: not a finished gpuprof trace");
    goto out;
  }
  in->meta = tf_parse_event(tok, meta, meta_len - 1);
  rc = 0;
  if (!in->meta)
    rc = tf_fail(in->path, "its metadata does not parse: not a gpuprof trace");
out:
  free(meta);
  if (l.buf)
    tf_lines_close(&l);
  json_tokener_free(tok);
  return rc < 0 ? rc : 0;
}

static json_object *us_number(uint64_t ns)
{
  char t[32];

  snprintf(t, sizeof(t), "%" PRIu64 ".%03u", ns / 1000, (unsigned)(ns % 1000));
  return json_object_new_double_s((double)ns / 1e3, t);
}

/* Rewrites one event for the merged trace; 0 or -EINVAL (reported). */
static int json_rewrite(struct input *in, json_object *o, uint64_t delta, uint64_t line)
{
  json_object *v, *tid, *args = NULL;
  const char *ph = tf_str_of(o, "ph"), *name = tf_str_of(o, "name");
  int gpu = 0;
  int64_t pid, id, si;
  uint64_t ts;

  if (!ph)
    return tf_fail(in->path, "line %" PRIu64 ": an event without \"ph\"", line);
  json_object_object_get_ex(o, "args", &args);
  if (!json_object_object_get_ex(o, "pid", &v) || !json_object_is_type(v, json_type_int) ||
      (pid = remap_pid(in, json_object_get_uint64(v), &gpu)) < 0)
    return tf_fail(in->path,
                   "line %" PRIu64 ": pid %s is neither its process (%" PRIu32
                   ") nor one of its GPUs: not a gpuprof trace",
                   line, tf_text_of(v), in->pid);
  /* The importer takes a missing tid as the pid: the event keeps the thread it had. */
  if (pid != (int64_t)json_object_get_uint64(v) &&
      (!json_object_object_get_ex(o, "tid", &tid) || !tid))
    json_object_object_add(o, "tid", json_object_new_int64((int64_t)json_object_get_uint64(v)));
  json_object_object_add(o, "pid", json_object_new_int64(pid));
  if (json_object_object_get_ex(o, "ts", &v)) {
    /* v is NULL for "ts":null (json-c's null), and parse_us refuses NULL. */
    if (tf_parse_us(v ? json_object_get_string(v) : NULL, &ts) || ts > UINT64_MAX - in->base_ns)
      return tf_fail(in->path,
                     "line %" PRIu64 ": ts %s is not in microseconds with at most three "
                     "decimals after base_time_ns: not a gpuprof trace",
                     line, tf_text_of(v));
    /* delta <= in->base_ns: no carry. Past 2^42 µs the importer's double loses the ns. */
    if (ts + delta >= JSON_TS_MAX_NS)
      return tf_fail(in->path,
                     "line %" PRIu64 ": ts %s is %" PRIu64 " µs after the earliest input's base: "
                     "a JSON trace keeps ns only below 2^42 µs (51 days); merge traces of one "
                     "time, or the .pftrace captures",
                     line, tf_text_of(v), (ts + delta) / 1000);
    json_object_object_add(o, "ts", us_number(ts + delta));
  }
  /* Ids 1 .. 2^32 - 1 (CUPTI's correlation ids): input k's land in k * 2^32 + [1, 2^32), so
   * no two inputs share one and a flow cannot bind ends of two inputs. */
  if (json_object_object_get_ex(o, "id", &v)) {
    if (tf_int_in(v, 1, UINT32_MAX, &id))
      return tf_fail(in->path,
                     "line %" PRIu64 ": flow id %s is not a 32-bit correlation id: not "
                     "a gpuprof trace",
                     line, tf_text_of(v));
    json_object_object_add(o, "id", json_object_new_int64((int64_t)remap_id(in, (uint64_t)id)));
  }
  if (args && json_object_object_get_ex(args, "correlation", &v)) {
    if (tf_int_in(v, 0, UINT32_MAX, &id))
      return tf_fail(in->path,
                     "line %" PRIu64 ": correlation %s is not a 32-bit correlation id: not a "
                     "gpuprof trace",
                     line, tf_text_of(v));
    json_object_object_add(args, "correlation",
                           json_object_new_int64((int64_t)remap_id(in, (uint64_t)id)));
  }
  if (ph[0] == 'M' && name && args) {
    char buf[TRACE_NAME_MAX + 128];
    const char *pn;
    if (!strcmp(name, "process_name") && (pn = tf_str_of(args, "name"))) {
      if (gpu)
        gpu_name(in, pn, buf, sizeof(buf));
      const char *nn = gpu ? buf : host_name(in, pn, buf, sizeof(buf));
      if (nn != pn)
        json_object_object_add(args, "name", json_object_new_string(nn));
    } else if (!strcmp(name, "process_sort_index") &&
               json_object_object_get_ex(args, "sort_index", &v)) {
      /* The writer's are int32 (trace_internal.h): k * 100 + one cannot overflow. */
      if (tf_int_in(v, INT32_MIN, INT32_MAX, &si))
        return tf_fail(in->path,
                       "line %" PRIu64 ": sort_index %s is not a 32-bit integer: not a gpuprof "
                       "trace",
                       line, tf_text_of(v));
      json_object_object_add(args, "sort_index", json_object_new_int64((int64_t)in->k * 100 + si));
    }
  }
  return 0;
}

static int out_write(struct merge *m, const char *out, const void *p, size_t n)
{
  if (n && gzwrite(m->gz, p, (unsigned)n) != (int)n) {
    int err;
    const char *msg = gzerror(m->gz, &err);
    fprintf(stderr, "gpuprof merge: %s: write error: %s\n", out,
            err == Z_ERRNO ? strerror(errno) : msg);
    return -EIO;
  }
  return 0;
}

static int json_copy(struct merge *m, struct input *in, const char *out)
{
  struct tf_lines l;
  json_tokener *tok = tf_tokener_new();
  uint64_t delta = in->base_ns - m->base_ns;
  int rc;

  if (!tok)
    return tf_io_fail(in->path, "cannot parse", ENOMEM);
  rc = tf_lines_open(&l, in->path);
  if (rc)
    goto out;
  while ((rc = tf_line_next(&l)) > 0) {
    size_t len, olen;
    char *text;
    json_object *o;
    const char *s;

    if (!strncmp(l.buf, TF_JSON_META, sizeof(TF_JSON_META) - 1))
      break; /* json_scan read the metadata */
    text = tf_event_text(&l, &len);
    if (!len)
      continue;
    o = tf_parse_event(tok, text, len);
    if (!o) {
      rc = tf_fail(in->path, "line %" PRIu64 " is not a JSON event", l.no);
      goto out;
    }
    rc = json_rewrite(in, o, delta, l.no);
    if (!rc) {
      s = json_object_to_json_string_length(
          o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &olen);
      rc = out_write(m, out, m->events ? ",\n" : "", m->events ? 2 : 0);
      if (!rc)
        rc = out_write(m, out, s, olen);
    }
    json_object_put(o);
    if (rc)
      goto out;
    m->events++;
    in->events++;
  }
  rc = rc < 0 ? rc : 0;
out:
  if (l.buf)
    tf_lines_close(&l);
  json_tokener_free(tok);
  return rc;
}

static int json_finish(struct merge *m, const char *out)
{
  json_object *meta = json_object_new_object(), *inputs = json_object_new_array();
  const char *s;
  size_t len;
  int rc;

  if (!meta || !inputs) {
    json_object_put(meta);
    json_object_put(inputs);
    return tf_io_fail(out, "cannot write its metadata", ENOMEM);
  }
  json_object_object_add(meta, "base_time_ns", json_object_new_uint64(m->base_ns));
  json_object_object_add(meta, "trace_writer", json_object_new_string("gpuprof trace 2"));
  json_object_object_add(meta, "merged_by",
                         json_object_new_string("gpuprof " GPUPROF_VERSION_STRING " merge"));
  json_object_object_add(meta, "events", json_object_new_uint64(m->events));
  for (size_t i = 0; i < m->n; i++) {
    struct input *in = &m->in[i];
    json_object *e = json_object_new_object();
    json_object_object_add(e, "file", json_object_new_string(in->path));
    json_object_object_add(e, "pid", json_object_new_int64(in->pid));
    json_object_object_add(e, "merged_pid", json_object_new_int64(in->new_pid));
    if (in->rank >= 0)
      json_object_object_add(e, "rank", json_object_new_int(in->rank));
    json_object_object_add(e, "id_offset", json_object_new_uint64(remap_id(in, 1) - 1));
    json_object_object_add(e, "events", json_object_new_uint64(in->events));
    json_object_object_add(e, "metadata", json_object_get(in->meta));
    json_object_array_add(inputs, e);
  }
  json_object_object_add(meta, "inputs", inputs);
  s = json_object_to_json_string_length(
      meta, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len);
  rc = out_write(m, out, "\n" TF_JSON_META, sizeof(TF_JSON_META));
  if (!rc)
    rc = out_write(m, out, s, len);
  if (!rc)
    rc = out_write(m, out, "}\n", 2);
  json_object_put(meta);
  return rc;
}

/* ---- .pftrace ---- */

typedef Gpuprof__Perfetto__TracePacket Packet;

/*
 * The identifiers the merge offsets per input, in the writer's ranges, where input k's stay
 * apart from every other input's: sequence ids 1 .. MAX_UUID + 1 and track uuids up to
 * MAX_UUID (k * SEQ_STRIDE + those), flow ids 1 .. 2^32 - 1 and correlation ids below 2^32
 * (k * 2^32 + those). 0, or -EINVAL reported.
 */
static int pf_check(const struct input *in, const Packet *p)
{
  const Gpuprof__Perfetto__TrackEvent *ev = p->track_event;
  const Gpuprof__Perfetto__TracePacketDefaults *defs = p->trace_packet_defaults;

  if (p->data_case == GPUPROF__PERFETTO__TRACE_PACKET__DATA_COMPRESSED_PACKETS)
    return tf_fail(in->path, "a compressed chunk with other fields: not a gpuprof trace");
  if (tf_seq_of(p) > MAX_UUID + 1)
    return tf_fail(in->path, "packet sequence %" PRIu32 " beyond the writer's: not a gpuprof trace",
                   tf_seq_of(p));
  if (defs && defs->track_event_defaults && defs->track_event_defaults->has_track_uuid &&
      defs->track_event_defaults->track_uuid > MAX_UUID)
    return tf_fail(in->path,
                   "default track uuid %" PRIu64 " beyond the writer's: not a gpuprof trace",
                   defs->track_event_defaults->track_uuid);
  if (p->data_case == GPUPROF__PERFETTO__TRACE_PACKET__DATA_TRACK_DESCRIPTOR) {
    const Gpuprof__Perfetto__TrackDescriptor *d = p->track_descriptor;
    if (!d->has_uuid || d->uuid > MAX_UUID || (d->has_parent_uuid && d->parent_uuid > MAX_UUID))
      return tf_fail(in->path, "track uuid beyond the writer's: not a gpuprof trace");
  }
  if (p->data_case != GPUPROF__PERFETTO__TRACE_PACKET__DATA_TRACK_EVENT)
    return 0;
  if (ev->has_track_uuid && ev->track_uuid > MAX_UUID)
    return tf_fail(in->path,
                   "event track uuid %" PRIu64 " beyond the writer's: not a gpuprof trace",
                   ev->track_uuid);
  for (size_t i = 0; i < ev->n_flow_ids + ev->n_terminating_flow_ids; i++) {
    uint64_t id =
        i < ev->n_flow_ids ? ev->flow_ids[i] : ev->terminating_flow_ids[i - ev->n_flow_ids];
    if (!id || id >> ID_SHIFT)
      return tf_fail(in->path,
                     "flow id %" PRIu64 " is not a 32-bit correlation id: not a gpuprof "
                     "trace",
                     id);
  }
  if (ev->correlation_id_field_case && ev->correlation_id >> ID_SHIFT)
    return tf_fail(in->path,
                   "correlation id %" PRIu64 " is not a 32-bit correlation id: not a "
                   "gpuprof trace",
                   ev->correlation_id);
  return 0;
}

/* A metadata instant's debug annotations into in->meta. */
static void pf_meta(struct input *in, const Gpuprof__Perfetto__TrackEvent *ev)
{
  for (size_t i = 0; i < ev->n_debug_annotations; i++) {
    const Gpuprof__Perfetto__DebugAnnotation *a = ev->debug_annotations[i];
    json_object *v = NULL;

    if (a->name_field_case != GPUPROF__PERFETTO__DEBUG_ANNOTATION__NAME_FIELD_NAME)
      continue;
    switch (a->value_case) {
    case GPUPROF__PERFETTO__DEBUG_ANNOTATION__VALUE_STRING_VALUE:
      v = json_object_new_string(a->string_value);
      break;
    case GPUPROF__PERFETTO__DEBUG_ANNOTATION__VALUE_UINT_VALUE:
      v = json_object_new_uint64(a->uint_value);
      break;
    case GPUPROF__PERFETTO__DEBUG_ANNOTATION__VALUE_INT_VALUE:
      v = json_object_new_int64(a->int_value);
      break;
    default:
      continue;
    }
    json_object_object_add(in->meta, a->name, v);
  }
}

/* Pass 1: the "trace start"/"trace end" metadata instants and the NCCL track names. */
static int pf_scan(struct input *in)
{
  struct tf_pf_reader r;
  struct tf_arena a = {0};
  const uint8_t *p;
  size_t n;
  int rc, started = 0;

  in->meta = json_object_new_object();
  if (!in->meta)
    return tf_io_fail(in->path, "cannot read", ENOMEM);
  rc = tf_pf_open(&r, in->path);
  if (rc)
    return rc;
  while ((rc = tf_pf_next(&r, &p, &n)) > 0) {
    Packet *pkt = tf_pf_unpack(&a, p, n);

    if (!pkt) {
      rc = tf_fail(in->path, "packet %" PRIu64 " does not decode: not a gpuprof trace",
                   in->packets + 1);
      goto out;
    }
    if (!in->packets && (tf_seq_of(pkt) != 1 ||
                         pkt->data_case != GPUPROF__PERFETTO__TRACE_PACKET__DATA_CLOCK_SNAPSHOT)) {
      rc = tf_fail(in->path, "its first packet is not the gpuprof writer's: not a gpuprof trace");
      goto out;
    }
    rc = pf_check(in, pkt);
    if (rc)
      goto out;
    in->packets++;
    if (pkt->data_case == GPUPROF__PERFETTO__TRACE_PACKET__DATA_TRACK_DESCRIPTOR) {
      const Gpuprof__Perfetto__TrackDescriptor *d = pkt->track_descriptor;
      if (d->static_or_dynamic_name_case && d->name)
        note_rank(in, d->name);
    } else if (pkt->data_case == GPUPROF__PERFETTO__TRACE_PACKET__DATA_TRACK_EVENT &&
               tf_seq_of(pkt) == 1 &&
               pkt->track_event->name_field_case ==
                   GPUPROF__PERFETTO__TRACK_EVENT__NAME_FIELD_NAME) {
      if (!strcmp(pkt->track_event->name, "trace start"))
        started = 1;
      else if (!strcmp(pkt->track_event->name, "trace end"))
        in->finished = 1;
      else
        continue;
      pf_meta(in, pkt->track_event);
    }
  }
  if (rc < 0 && rc != -EPIPE)
    goto out;
  if (!started) {
    rc = tf_fail(in->path, "no \"trace start\" metadata: not a gpuprof trace");
    goto out;
  }
  if (rc == -EPIPE)
    fprintf(stderr,
            "gpuprof merge: %s: warning: the file ends inside a packet (its process was killed "
            "during the capture?): the %" PRIu64 " whole packets before it are merged\n",
            in->path, in->packets);
  if (!in->finished)
    fprintf(stderr,
            "gpuprof merge: %s: warning: the trace was not finished (its process was killed "
            "during the capture?): merged up to its last whole packet\n",
            in->path);
  rc = 0;
out:
  tf_pf_close(&r);
  free(a.mem);
  return rc;
}

/* Writes the gathered packets as one chunk: deflated, or as they are when that does not pay. */
static int chunk_flush(struct merge *m, const char *out)
{
  const unsigned char *c;
  size_t n = 0;

  if (!m->chunk_len)
    return 0;
  c = trace_chunk_deflate(&m->z, m->chunk, m->chunk_len, m->zbuf, m->zcap, &n);
  if (!c) {
    c = m->chunk;
    n = m->chunk_len;
  }
  m->chunk_len = 0;
  if (fwrite(c, 1, n, m->pf) != n)
    return tf_io_fail(out, "write error", errno);
  return 0;
}

static int pf_emit(struct merge *m, const char *out, const Packet *pkt)
{
  size_t n = gpuprof__perfetto__trace_packet__get_packed_size(pkt), len;
  int rc;

  if (n + 16 <= TRACE_OUT_BUF) {
    if (m->chunk_len + n + 16 > TRACE_OUT_BUF && (rc = chunk_flush(m, out)))
      return rc;
    len = gpuprof__perfetto__trace_packet__pack(pkt, m->chunk + m->chunk_len + 2);
    m->chunk_len += pb_frame_field(m->chunk + m->chunk_len, 0x0A, len);
    return 0;
  }
  /* Larger than a chunk: on its own, after the packets before it. */
  if ((rc = chunk_flush(m, out)))
    return rc;
  if (n + 16 > m->pbuf_cap) {
    free(m->pbuf);
    m->pbuf_cap = n + 16 > OUT_BUF ? n + 16 : OUT_BUF;
    m->pbuf = malloc(m->pbuf_cap);
    if (!m->pbuf) {
      m->pbuf_cap = 0;
      return tf_io_fail(out, "cannot write", ENOMEM);
    }
  }
  len = gpuprof__perfetto__trace_packet__pack(pkt, m->pbuf + 2);
  len = pb_frame_field(m->pbuf, 0x0A, len);
  if (fwrite(m->pbuf, 1, len, m->pf) != len)
    return tf_io_fail(out, "write error", errno);
  return 0;
}

/* Rewrites a packet's identifiers for input in (pf_check passed); 0 or -EINVAL (reported). */
static int pf_rewrite(struct input *in, Packet *pkt, char *name, size_t name_len)
{
  int gpu;
  int32_t orig = 0;
  int64_t pid;

  if (pkt->optional_trusted_packet_sequence_id_case)
    pkt->trusted_packet_sequence_id = (uint32_t)remap_uuid(in, pkt->trusted_packet_sequence_id);
  if (pkt->trace_packet_defaults && pkt->trace_packet_defaults->track_event_defaults &&
      pkt->trace_packet_defaults->track_event_defaults->has_track_uuid)
    pkt->trace_packet_defaults->track_event_defaults->track_uuid =
        remap_uuid(in, pkt->trace_packet_defaults->track_event_defaults->track_uuid);
  switch (pkt->data_case) {
  case GPUPROF__PERFETTO__TRACE_PACKET__DATA_CLOCK_SNAPSHOT:
    /* Sequence 1's snapshot ties REALTIME to the host's BOOTTIME. Inputs from several hosts
     * have unrelated boot times, and the importer would convert each timestamp through
     * whichever snapshot is nearest: one snapshot (the first input's) for all. The tracks'
     * own snapshots (sequence-scoped incremental clocks) are kept. */
    if (in->k && pkt->trusted_packet_sequence_id == remap_uuid(in, 1)) {
      pkt->data_case = GPUPROF__PERFETTO__TRACE_PACKET__DATA__NOT_SET;
      pkt->clock_snapshot = NULL;
    }
    break;
  case GPUPROF__PERFETTO__TRACE_PACKET__DATA_TRACK_DESCRIPTOR: {
    Gpuprof__Perfetto__TrackDescriptor *d = pkt->track_descriptor;
    int named = d->static_or_dynamic_name_case && d->name;
    if (d->has_uuid)
      d->uuid = remap_uuid(in, d->uuid);
    if (d->has_parent_uuid)
      d->parent_uuid = remap_uuid(in, d->parent_uuid);
    if (d->process) {
      if (d->process->has_pid) {
        orig = d->process->pid;
        pid = remap_pid(in, (uint32_t)orig, &gpu);
        if (pid < 0)
          goto bad_pid;
        d->process->pid = (int32_t)pid;
      }
      if (d->process->process_name)
        d->process->process_name = (char *)host_name(in, d->process->process_name, name, name_len);
    } else if (d->thread) {
      if (d->thread->has_pid) {
        orig = d->thread->pid;
        pid = remap_pid(in, (uint32_t)orig, &gpu);
        if (pid < 0)
          goto bad_pid;
        d->thread->pid = (int32_t)pid;
      }
    } else if (named && !d->has_parent_uuid && !strncmp(d->name, "GPU ", 4)) {
      gpu_name(in, d->name, name, name_len);
      d->name = name;
    } else if (named && !d->has_parent_uuid && !strcmp(d->name, "gpuprof")) {
      char l[64];
      label(in, l, sizeof(l));
      snprintf(name, name_len, "gpuprof (%s)", l);
      d->name = name;
    }
    break;
  }
  case GPUPROF__PERFETTO__TRACE_PACKET__DATA_TRACK_EVENT: {
    Gpuprof__Perfetto__TrackEvent *ev = pkt->track_event;
    if (ev->has_track_uuid)
      ev->track_uuid = remap_uuid(in, ev->track_uuid);
    for (size_t i = 0; i < ev->n_flow_ids; i++)
      ev->flow_ids[i] = remap_id(in, ev->flow_ids[i]);
    for (size_t i = 0; i < ev->n_terminating_flow_ids; i++)
      ev->terminating_flow_ids[i] = remap_id(in, ev->terminating_flow_ids[i]);
    if (ev->correlation_id_field_case)
      ev->correlation_id = remap_id(in, ev->correlation_id);
    break;
  }
  default:
    break;
  }
  return 0;
bad_pid:
  return tf_fail(in->path,
                 "track pid %" PRId32 " is neither its process (%" PRIu32 ") nor one of its GPUs: "
                 "not a gpuprof trace",
                 orig, in->pid);
}

static int pf_copy(struct merge *m, struct input *in, const char *out)
{
  struct tf_pf_reader r;
  struct tf_arena a = {0};
  const uint8_t *p;
  size_t n;
  uint64_t left = in->packets;
  char name[TRACE_NAME_MAX + 128];
  int rc;

  rc = tf_pf_open(&r, in->path);
  if (rc)
    return rc;
  while (left && (rc = tf_pf_next(&r, &p, &n)) > 0) {
    Packet *pkt = tf_pf_unpack(&a, p, n);

    left--;
    if (!pkt) {
      rc = tf_fail(in->path, "a packet does not decode: not a gpuprof trace");
      goto out;
    }
    /* Checked again: pf_scan read the file before, and it may have changed since. */
    rc = pf_check(in, pkt);
    if (!rc)
      rc = pf_rewrite(in, pkt, name, sizeof(name));
    if (!rc)
      rc = pf_emit(m, out, pkt);
    if (rc)
      goto out;
    in->events++;
    m->events++;
  }
  rc = rc < 0 && rc != -EPIPE ? rc : 0;
out:
  tf_pf_close(&r);
  free(a.mem);
  return rc;
}

/* The merge's own metadata: an instant on a "gpuprof merge" track of a sequence of its own. */
static int pf_finish(struct merge *m, const char *out)
{
  Packet pkt = GPUPROF__PERFETTO__TRACE_PACKET__INIT;
  Gpuprof__Perfetto__TrackDescriptor d = GPUPROF__PERFETTO__TRACK_DESCRIPTOR__INIT;
  Gpuprof__Perfetto__TracePacketDefaults defs = GPUPROF__PERFETTO__TRACE_PACKET_DEFAULTS__INIT;
  Gpuprof__Perfetto__TrackEvent ev = GPUPROF__PERFETTO__TRACK_EVENT__INIT;
  size_t max = 4 + 6 * m->n, na = 0;
  Gpuprof__Perfetto__DebugAnnotation *a = calloc(max, sizeof(*a));
  Gpuprof__Perfetto__DebugAnnotation **ap = calloc(max, sizeof(*ap));
  char *keys = calloc(max, 48), *vals = calloc(max, 32);
  uint64_t uuid = (uint64_t)m->n * SEQ_STRIDE + 2;
  int rc;

  if (!a || !ap || !keys || !vals) {
    rc = tf_io_fail(out, "cannot write its metadata", ENOMEM);
    goto out;
  }
#define ANN(key_fmt, ...)                                                                          \
  (gpuprof__perfetto__debug_annotation__init(&a[na]), ap[na] = &a[na],                             \
   snprintf(keys + na * 48, 48, key_fmt, __VA_ARGS__),                                             \
   a[na].name_field_case = GPUPROF__PERFETTO__DEBUG_ANNOTATION__NAME_FIELD_NAME,                   \
   a[na].name = keys + na * 48, &a[na++])
  {
    Gpuprof__Perfetto__DebugAnnotation *x;
    x = ANN("%s", "base_time_ns");
    snprintf(vals, 32, "%" PRIu64, m->base_ns);
    x->value_case = GPUPROF__PERFETTO__DEBUG_ANNOTATION__VALUE_STRING_VALUE;
    x->string_value = vals;
    x = ANN("%s", "merged_by");
    x->value_case = GPUPROF__PERFETTO__DEBUG_ANNOTATION__VALUE_STRING_VALUE;
    x->string_value = "gpuprof " GPUPROF_VERSION_STRING " merge";
    x = ANN("%s", "inputs");
    x->value_case = GPUPROF__PERFETTO__DEBUG_ANNOTATION__VALUE_UINT_VALUE;
    x->uint_value = m->n;
    for (size_t i = 0; i < m->n; i++) {
      struct input *in = &m->in[i];
      x = ANN("input_%zu_file", i);
      x->value_case = GPUPROF__PERFETTO__DEBUG_ANNOTATION__VALUE_STRING_VALUE;
      x->string_value = (char *)in->path;
      x = ANN("input_%zu_pid", i);
      x->value_case = GPUPROF__PERFETTO__DEBUG_ANNOTATION__VALUE_UINT_VALUE;
      x->uint_value = in->pid;
      x = ANN("input_%zu_merged_pid", i);
      x->value_case = GPUPROF__PERFETTO__DEBUG_ANNOTATION__VALUE_UINT_VALUE;
      x->uint_value = in->new_pid;
      if (in->rank >= 0) {
        x = ANN("input_%zu_rank", i);
        x->value_case = GPUPROF__PERFETTO__DEBUG_ANNOTATION__VALUE_INT_VALUE;
        x->int_value = in->rank;
      }
      x = ANN("input_%zu_id_offset", i);
      x->value_case = GPUPROF__PERFETTO__DEBUG_ANNOTATION__VALUE_UINT_VALUE;
      x->uint_value = remap_id(in, 1) - 1;
    }
  }
#undef ANN
  pkt.optional_trusted_packet_sequence_id_case =
      GPUPROF__PERFETTO__TRACE_PACKET__OPTIONAL_TRUSTED_PACKET_SEQUENCE_ID_TRUSTED_PACKET_SEQUENCE_ID;
  pkt.trusted_packet_sequence_id = (uint32_t)uuid + 1;
  pkt.has_sequence_flags = 1;
  pkt.sequence_flags = 1; /* SEQ_INCREMENTAL_STATE_CLEARED */
  pkt.has_first_packet_on_sequence = pkt.first_packet_on_sequence = 1;
  defs.has_timestamp_clock_id = 1;
  defs.timestamp_clock_id = 1; /* REALTIME, as the inputs' absolute timestamps */
  pkt.trace_packet_defaults = &defs;
  d.has_uuid = 1;
  d.uuid = uuid;
  d.static_or_dynamic_name_case = GPUPROF__PERFETTO__TRACK_DESCRIPTOR__STATIC_OR_DYNAMIC_NAME_NAME;
  d.name = "gpuprof merge";
  pkt.data_case = GPUPROF__PERFETTO__TRACE_PACKET__DATA_TRACK_DESCRIPTOR;
  pkt.track_descriptor = &d;
  rc = pf_emit(m, out, &pkt);
  if (rc)
    goto out;
  gpuprof__perfetto__trace_packet__init(&pkt);
  pkt.optional_trusted_packet_sequence_id_case =
      GPUPROF__PERFETTO__TRACE_PACKET__OPTIONAL_TRUSTED_PACKET_SEQUENCE_ID_TRUSTED_PACKET_SEQUENCE_ID;
  pkt.trusted_packet_sequence_id = (uint32_t)uuid + 1;
  pkt.has_timestamp = 1;
  pkt.timestamp = m->base_ns;
  ev.has_type = 1;
  ev.type = GPUPROF__PERFETTO__TRACK_EVENT__TYPE__TYPE_INSTANT;
  ev.has_track_uuid = 1;
  ev.track_uuid = uuid;
  ev.name_field_case = GPUPROF__PERFETTO__TRACK_EVENT__NAME_FIELD_NAME;
  ev.name = "merged traces";
  ev.n_debug_annotations = na;
  ev.debug_annotations = ap;
  pkt.data_case = GPUPROF__PERFETTO__TRACE_PACKET__DATA_TRACK_EVENT;
  pkt.track_event = &ev;
  rc = pf_emit(m, out, &pkt);
out:
  free(a);
  free(ap);
  free(keys);
  free(vals);
  return rc;
}

/* ---- inputs and output ---- */

/* The family of a file from its first bytes: gzip or { / [ is JSON, a packet tag .pftrace. */
static int sniff(struct input *in)
{
  unsigned char b[2] = {0};
  int fd = open(in->path, O_RDONLY | O_CLOEXEC);
  ssize_t n;

  if (fd < 0)
    return tf_io_fail(in->path, "cannot open", errno);
  n = read(fd, b, 2);
  close(fd);
  if (n < 0)
    return tf_io_fail(in->path, "cannot read", errno);
  if (n == 2 && b[0] == 0x1f && b[1] == 0x8b) {
    in->fam = FAM_JSON;
    in->gz = 1;
  } else if (n >= 1 && (b[0] == '{' || b[0] == ' ' || b[0] == '[')) {
    in->fam = FAM_JSON;
  } else if (n >= 1 && b[0] == 0x0A) {
    in->fam = FAM_PFTRACE;
  } else {
    return tf_fail(in->path, n ? "not a gpuprof trace (neither JSON nor .pftrace)"
                               : "empty file: not a gpuprof trace");
  }
  return 0;
}

/* The input's base time and host pid from its metadata. */
static int meta_required(struct input *in)
{
  json_object *v;
  const char *w = tf_str_of(in->meta, "trace_writer");
  char *end;

  if (!w || strncmp(w, "gpuprof trace ", 14))
    return tf_fail(in->path, "no \"trace_writer\": \"gpuprof trace ...\" in its metadata: not a "
                             "gpuprof trace");
  if (!json_object_object_get_ex(in->meta, "base_time_ns", &v))
    return tf_fail(in->path, "no base_time_ns in its metadata: not a gpuprof trace");
  /* An integer in JSON, a decimal string in .pftrace (a debug annotation): digits only
   * (strtoull would take "-5" as 2^64 - 5, and leading blanks). v is NULL for a null. */
  w = v ? json_object_get_string(v) : NULL;
  if (!w || *w < '0' || *w > '9')
    return tf_fail(in->path, "base_time_ns %s is not a time in ns", tf_text_of(v));
  errno = 0;
  in->base_ns = strtoull(w, &end, 10);
  if (errno || *end || !in->base_ns)
    return tf_fail(in->path, "base_time_ns %s is not a time in ns", tf_text_of(v));
  if (!json_object_object_get_ex(in->meta, "pid", &v) || !json_object_is_type(v, json_type_int) ||
      json_object_get_uint64(v) > UINT32_MAX)
    return tf_fail(in->path, "no pid in its metadata: not a gpuprof trace");
  in->pid = (uint32_t)json_object_get_uint64(v);
  /* A rank stated by the process itself (a metadata key) wins over the NCCL track names. */
  if ((json_object_object_get_ex(in->meta, "rank", &v) ||
       json_object_object_get_ex(in->meta, "local_rank", &v)) &&
      json_object_is_type(v, json_type_int))
    in->rank = json_object_get_int(v);
  return 0;
}

static const char *suffix_of(enum family fam, int gz)
{
  return fam == FAM_PFTRACE ? ".pftrace" : gz ? ".json.gz" : ".json";
}

static int ends_with(const char *s, const char *suf)
{
  size_t a = strlen(s), b = strlen(suf);
  return a >= b && !strcmp(s + a - b, suf);
}

/* Creates the output under a temporary name in its directory; renamed when complete. */
static int open_output(struct merge *m, enum family fam, int gz, const char *final, char *tmp,
                       size_t tmp_len)
{
  char dir[PATH_MAX];
  int fd;

  snprintf(dir, sizeof(dir), "%s", final);
  if ((size_t)snprintf(tmp, tmp_len, "%s/.gpuprof-merge-XXXXXX", dirname(dir)) >= tmp_len)
    return tf_fail(final, "path too long");
  fd = mkostemp(tmp, O_CLOEXEC);
  if (fd < 0)
    return tf_io_fail(final, "cannot create a file in its directory", errno);
  fchmod(fd, 0644);
  if (fam == FAM_PFTRACE) {
    if (!m->z_open && deflateInit(&m->z, 1) == Z_OK) {
      m->z_open = 1;
      m->zcap = TRACE_CHUNK_HEAD + deflateBound(&m->z, TRACE_OUT_BUF);
      m->chunk = malloc(TRACE_OUT_BUF);
      m->zbuf = malloc(m->zcap);
    }
    if (m->chunk && m->zbuf)
      m->pf = fdopen(fd, "wb");
    if (m->pf)
      setvbuf(m->pf, NULL, _IOFBF, OUT_BUF);
  } else {
    m->gz_fd = dup(fd);
    m->gz = m->gz_fd >= 0 ? gzdopen(fd, gz ? "wb1" : "wT") : NULL;
    if (m->gz)
      gzbuffer(m->gz, OUT_BUF);
    else if (m->gz_fd >= 0) {
      close(m->gz_fd);
      m->gz_fd = -1;
    }
  }
  if (!m->pf && !m->gz) {
    close(fd);
    unlink(tmp);
    return tf_io_fail(final, "cannot write", ENOMEM);
  }
  return 0;
}

static int close_output(struct merge *m, const char *out)
{
  int rc = 0;

  if (m->pf) {
    rc = chunk_flush(m, out);
    if ((fflush(m->pf) || fsync(fileno(m->pf)) || fclose(m->pf)) && !rc)
      rc = tf_io_fail(out, "write error", errno);
    m->pf = NULL;
  }
  if (m->gz) {
    /* gzclose writes the end and closes its descriptor; the file is on disk before the rename
     * names it, as a .pftrace is. */
    if (gzclose(m->gz) != Z_OK)
      rc = tf_io_fail(out, "write error", errno ? errno : EIO);
    else if (fsync(m->gz_fd))
      rc = tf_io_fail(out, "write error", errno);
    close(m->gz_fd);
    m->gz = NULL;
    m->gz_fd = -1;
  }
  return rc;
}

/* Default: next to the first input, gpuprof-merged-<UTC base>.<suffix> (-2, -3, ... if taken). */
static void default_name(const struct merge *m, const char *suf, int k, char *buf, size_t n)
{
  char dir[PATH_MAX], when[32];
  time_t t = (time_t)(m->base_ns / 1000000000ull);
  struct tm tm;

  snprintf(dir, sizeof(dir), "%s", m->in[0].path);
  gmtime_r(&t, &tm);
  strftime(when, sizeof(when), "%Y%m%dT%H%M%SZ", &tm);
  if (k < 2)
    snprintf(buf, n, "%s/gpuprof-merged-%s%s", dirname(dir), when, suf);
  else
    snprintf(buf, n, "%s/gpuprof-merged-%s-%d%s", dirname(dir), when, k, suf);
}

int merge_traces(const char *out, const char *const *paths, size_t n, char *written,
                 size_t written_len)
{
  struct merge m;
  char final[PATH_MAX] = "", tmp[PATH_MAX] = "";
  enum family fam;
  int gz, rc = 0;
  struct stat so, si;

  tf_prog = "gpuprof merge";
  memset(&m, 0, sizeof(m));
  m.gz_fd = -1;
  if (!n)
    return EXIT_BAD_INPUT;
  if (n > UINT32_MAX / SEQ_STRIDE - 2) {
    fprintf(stderr, "gpuprof merge: %zu inputs: at most %" PRIu64 " traces at once\n", n,
            UINT32_MAX / SEQ_STRIDE - 2);
    return EXIT_BAD_INPUT;
  }
  m.in = calloc(n, sizeof(*m.in));
  if (!m.in)
    return 1;
  m.n = n;
  for (size_t i = 0; i < n && !rc; i++) {
    m.in[i].path = paths[i];
    m.in[i].k = (uint32_t)i;
    m.in[i].rank = -1;
    rc = sniff(&m.in[i]);
    if (!rc && m.in[i].fam != m.in[0].fam)
      rc = tf_fail(paths[i],
                   "a %s trace among %s ones: merge JSON traces (.json, .json.gz) or "
                   ".pftrace traces, not both",
                   m.in[i].fam == FAM_PFTRACE ? ".pftrace" : "JSON",
                   m.in[0].fam == FAM_PFTRACE ? ".pftrace" : "JSON");
  }
  fam = rc ? FAM_JSON : m.in[0].fam;
  gz = m.in[0].gz;
  if (!rc && out) {
    if (ends_with(out, ".pftrace") || ends_with(out, ".json") || ends_with(out, ".json.gz")) {
      enum family want = ends_with(out, ".pftrace") ? FAM_PFTRACE : FAM_JSON;
      if (want != fam)
        rc = tf_fail(out,
                     "the inputs are %s traces: the merged trace is %s (the format is not "
                     "converted)",
                     fam == FAM_PFTRACE ? ".pftrace" : "JSON",
                     fam == FAM_PFTRACE ? ".pftrace" : ".json or .json.gz");
      gz = ends_with(out, ".json.gz");
    }
    for (size_t i = 0; i < n && !rc; i++)
      if (!stat(out, &so) && !stat(paths[i], &si) && so.st_dev == si.st_dev &&
          so.st_ino == si.st_ino)
        rc = tf_fail(out, "is one of the inputs: choose another -o");
  }
  for (size_t i = 0; i < n && !rc; i++) {
    struct input *in = &m.in[i];
    rc = in->fam == FAM_PFTRACE ? pf_scan(in) : json_scan(in);
    if (!rc)
      rc = meta_required(in);
    if (!rc && (!m.base_ns || in->base_ns < m.base_ns))
      m.base_ns = in->base_ns;
  }
  if (rc)
    goto out;
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < i; j++) {
      struct stat a, b;
      if (!stat(paths[i], &a) && !stat(paths[j], &b) && a.st_dev == b.st_dev &&
          a.st_ino == b.st_ino) {
        rc = tf_fail(paths[i], "given twice: each process's trace once");
        goto out;
      }
    }
  assign_pids(&m);
  if (out)
    snprintf(final, sizeof(final), "%s", out);
  else
    default_name(&m, suffix_of(fam, gz), 1, final, sizeof(final));
  rc = open_output(&m, fam, gz, final, tmp, sizeof(tmp));
  if (rc)
    goto out;
  if (fam == FAM_JSON)
    rc = out_write(&m, final, TF_JSON_HEADER, sizeof(TF_JSON_HEADER) - 1);
  for (size_t i = 0; i < n && !rc; i++)
    rc = fam == FAM_PFTRACE ? pf_copy(&m, &m.in[i], final) : json_copy(&m, &m.in[i], final);
  if (!rc)
    rc = fam == FAM_PFTRACE ? pf_finish(&m, final) : json_finish(&m, final);
  {
    int crc = close_output(&m, final);
    rc = rc ? rc : crc;
  }
  if (rc)
    goto out;
  if (out) {
    if (rename(tmp, final)) {
      rc = tf_io_fail(final, "cannot write", errno);
      goto out;
    }
  } else {
    /* link(2) never replaces a file: a name taken meanwhile moves on to the next. */
    int k = 1, err;
    /* Only this link's own success names the file: a name that exists after a failed link
     * (EPERM, EXDEV, ...) is somebody else's. */
    while ((err = link(tmp, final) ? errno : 0) == EEXIST && ++k <= 64)
      default_name(&m, suffix_of(fam, gz), k, final, sizeof(final));
    if (err) {
      rc = tf_io_fail(final, "cannot create", err);
      goto out;
    }
    unlink(tmp);
  }
  tmp[0] = '\0';
  snprintf(written, written_len, "%s", final);
  fprintf(stderr, "gpuprof merge: %zu traces, %" PRIu64 " events, base %" PRIu64 " ns -> %s\n", n,
          m.events, m.base_ns, final);
out:
  if (m.pf || m.gz)
    close_output(&m, final);
  if (tmp[0])
    unlink(tmp);
  for (size_t i = 0; i < n; i++)
    json_object_put(m.in[i].meta);
  free(m.in);
  free(m.pbuf);
  free(m.chunk);
  free(m.zbuf);
  if (m.z_open)
    deflateEnd(&m.z);
  return !rc ? 0 : rc == -EINVAL ? EXIT_BAD_INPUT : 1;
}

static void usage(FILE *f)
{
  fputs("usage: gpuprof merge [-o OUT] FILE...\n"
        "  merges the capture traces of several processes (the agent's .json/.json.gz, or its\n"
        "  .pftrace) into one trace on one clock; OUT's suffix picks .json, .json.gz or\n"
        "  .pftrace (default: the first input's format, next to it). Prints the file written.\n",
        f);
}

int cmd_merge(int argc, char **argv)
{
  const char *out = NULL;
  const char **files = calloc((size_t)argc + 1, sizeof(*files));
  char written[PATH_MAX];
  size_t n = 0;
  int rc, opts = 1;

  if (!files)
    return 1;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (opts && !strcmp(a, "--")) {
      opts = 0;
    } else if (opts && (!strcmp(a, "-h") || !strcmp(a, "--help"))) {
      usage(stdout);
      free(files);
      return 0;
    } else if (opts && (!strcmp(a, "-o") || !strcmp(a, "--output"))) {
      if (i + 1 >= argc) {
        fprintf(stderr, "gpuprof merge: %s needs a file name\n", a);
        free(files);
        return EXIT_BAD_INPUT;
      }
      out = argv[++i];
    } else if (opts && a[0] == '-' && a[1]) {
      fprintf(stderr, "gpuprof merge: %s is not an option\n", a);
      usage(stderr);
      free(files);
      return EXIT_BAD_INPUT;
    } else {
      files[n++] = a;
    }
  }
  if (!n) {
    fprintf(stderr, "gpuprof merge: no trace files given\n");
    usage(stderr);
    free(files);
    return EXIT_BAD_INPUT;
  }
  rc = merge_traces(out, files, n, written, sizeof(written));
  if (!rc)
    printf("%s\n", written);
  free(files);
  return rc;
}
