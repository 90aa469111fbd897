/* Chrome Trace Event JSON encoding of a trace, laid out as Perfetto's JSON importer reads it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export/utf8.h"
#include "export/trace_internal.h"

/*
 * File shape, and why:
 *
 *   {"traceEvents":[
 *   {"ph":"M",...},
 *   {"ph":"X",...},
 *   ...
 *   ],"metadata":{"base_time_ns":...,...}}
 *
 * Perfetto reads an object-form trace only if it is complete, but accepts the array form
 * ("[{...},{...}") without its closing bracket. An uncompressed trace is therefore written as
 * an array whose opening bracket is preceded by 15 spaces, with events separated by ",\n" and
 * flushed on event boundaries; trace_writer_close appends the metadata and then overwrites the
 * spaces with {"traceEvents":. A capture killed before close leaves a valid array-form trace
 * (without the metadata object). A gzip stream cannot be patched in place, so .json.gz is
 * written in object form from the start; after a kill `zcat` recovers the text up to the last
 * sync flush, and appending "]}" makes it complete (docs/TRACES.md).
 *
 * Timestamps are microseconds relative to meta.base_ns with exactly three decimals, so the
 * double Perfetto parses keeps nanoseconds ("%llu.%03llu").
 */

#define HEADER_OBJECT "{\"traceEvents\":"
#define HEADER_PAD "               " /* as long as HEADER_OBJECT */

struct trace_encoder {
  int need_comma;
};

static char *put_lit(char *p, const char *s, size_t n)
{
  memcpy(p, s, n);
  return p + n;
}
#define PUT(p, lit) put_lit((p), (lit), sizeof(lit) - 1)

static char *put_u64(char *p, uint64_t v)
{
  static const char digits[] = "00010203040506070809101112131415161718192021222324252627282930"
                               "31323334353637383940414243444546474849505152535455565758596061"
                               "62636465666768697071727374757677787980818283848586878889909192"
                               "93949596979899";
  char tmp[20];
  char *t = tmp + sizeof(tmp);

  while (v >= 100) {
    unsigned d = (unsigned)(v % 100) * 2;
    v /= 100;
    *--t = digits[d + 1];
    *--t = digits[d];
  }
  if (v >= 10) {
    *--t = digits[v * 2 + 1];
    *--t = digits[v * 2];
  } else {
    *--t = (char)('0' + v);
  }
  size_t n = (size_t)(tmp + sizeof(tmp) - t);
  memcpy(p, t, n);
  return p + n;
}

static char *put_i64(char *p, int64_t v)
{
  if (v < 0) {
    *p++ = '-';
    return put_u64(p, (uint64_t)0 - (uint64_t)v);
  }
  return put_u64(p, (uint64_t)v);
}

/* v thousandths as "<v/1000>.<v%1000 in three digits>". */
static char *put_milli(char *p, uint64_t v)
{
  unsigned f = (unsigned)(v % 1000);
  p = put_u64(p, v / 1000);
  p[0] = '.';
  p[1] = (char)('0' + f / 100);
  p[2] = (char)('0' + f / 10 % 10);
  p[3] = (char)('0' + f % 10);
  return p + 4;
}

/* A quoted JSON string; needs 6 * n + 2 bytes. Invalid UTF-8 becomes '?'. */
static char *put_str(char *p, const char *str, size_t n)
{
  static const char hex[] = "0123456789abcdef";
  const unsigned char *s = (const unsigned char *)str;
  size_t i = 0;

  *p++ = '"';
  while (i < n) {
    unsigned char c = s[i];
    if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
      *p++ = (char)c;
      i++;
    } else if (c == '"' || c == '\\') {
      *p++ = '\\';
      *p++ = (char)c;
      i++;
    } else if (c < 0x20) {
      p = PUT(p, "\\u00");
      *p++ = hex[c >> 4];
      *p++ = hex[c & 15];
      i++;
    } else {
      size_t l = utf8_seq_len(s + i, n - i);
      if (l) {
        memcpy(p, s + i, l);
        p += l;
        i += l;
      } else {
        *p++ = '?';
        i++;
      }
    }
  }
  *p++ = '"';
  return p;
}

static char *put_cstr(char *p, const char *s)
{
  return put_str(p, s, strlen(s));
}

static uint64_t rel(const struct trace_writer *w, uint64_t t)
{
  return t - w->meta.base_ns;
}

/* Starts an event: separator and opening brace. */
static char *event_open(struct trace_writer *w, char *p)
{
  if (w->enc->need_comma)
    p = PUT(p, ",\n");
  return p;
}

/* Commits an event of (p - start) bytes if it fits under the size cap. */
static int event_commit(struct trace_writer *w, char *start, char *p, unsigned nevents)
{
  size_t n = (size_t)(p - start);
  int rc = trace_fits(w, n, 1);

  if (rc)
    return rc;
  trace_out_commit(&w->out, n);
  w->enc->need_comma = 1;
  w->stats.events += nevents;
  return 0;
}

static uint32_t track_pid(const struct trace_writer *w, const struct trace_track *t)
{
  if (t->kind == TRACK_HOST_PROCESS || t->kind == TRACK_HOST_THREAD || t->kind == TRACK_META ||
      t->kind == TRACK_HOST_NVTX)
    return w->meta.pid;
  return trace_gpu_pid(w->meta.pid, t->a);
}

static uint32_t track_tid(const struct trace_track *t)
{
  switch (t->kind) {
  case TRACK_HOST_THREAD:
  case TRACK_GPU_STREAM:
    return t->b;
  case TRACK_GPU_SYNC:
    return trace_sync_tid(t->b, t->lane);
  case TRACK_GPU_NCCL:
    return trace_nccl_tid(t->b);
  case TRACK_HOST_NVTX:
    return trace_nvtx_tid(t->b);
  default:
    return 0;
  }
}

static char *put_pid_tid(char *p, const struct trace_writer *w, const struct trace_track *t)
{
  p = PUT(p, ",\"pid\":");
  p = put_u64(p, track_pid(w, t));
  p = PUT(p, ",\"tid\":");
  return put_u64(p, track_tid(t));
}

static int json_begin(struct trace_writer *w)
{
  w->enc = calloc(1, sizeof(*w->enc));
  if (!w->enc)
    return -ENOMEM;
  /* No whitespace between "[" and the first event: Perfetto sniffs for [{" exactly. */
  if (w->out.gzip)
    return trace_out_write(&w->out, HEADER_OBJECT "[", sizeof(HEADER_OBJECT "[") - 1);
  return trace_out_write(&w->out, HEADER_PAD "[", sizeof(HEADER_PAD "[") - 1);
}

/* An M event naming a process or thread, plus its sort index when it has one. */
static int json_name_event(struct trace_writer *w, const struct trace_track *t, const char *name,
                           size_t len, int has_sort, int64_t sort)
{
  int process = t->kind == TRACK_HOST_PROCESS || t->kind == TRACK_GPU_PROCESS;
  char *start = trace_out_reserve(&w->out, len * 6 + 512), *p = start;

  if (!p)
    return w->out.err;
  p = event_open(w, p);
  p = process ? PUT(p, "{\"ph\":\"M\",\"name\":\"process_name\"")
              : PUT(p, "{\"ph\":\"M\",\"name\":\"thread_name\"");
  p = put_pid_tid(p, w, t);
  p = PUT(p, ",\"args\":{\"name\":");
  p = put_str(p, name, len);
  p = PUT(p, "}}");
  if (has_sort) {
    p = PUT(p, ",\n");
    p = process ? PUT(p, "{\"ph\":\"M\",\"name\":\"process_sort_index\"")
                : PUT(p, "{\"ph\":\"M\",\"name\":\"thread_sort_index\"");
    p = put_pid_tid(p, w, t);
    p = PUT(p, ",\"args\":{\"sort_index\":");
    p = put_i64(p, sort);
    p = PUT(p, "}}");
  }
  return event_commit(w, start, p, has_sort ? 2 : 1);
}

static int json_describe(struct trace_writer *w, struct trace_track *t)
{
  char name[320];
  size_t len = trace_track_name(w, t, name, sizeof(name));

  switch (t->kind) {
  case TRACK_HOST_PROCESS:
    /* Lowest sort index first: the host above its GPUs. */
    return json_name_event(w, t, name, len, 1, 1);
  case TRACK_GPU_PROCESS:
    return json_name_event(w, t, name, len, 1, 10 + (int64_t)t->a);
  case TRACK_HOST_THREAD:
    return json_name_event(w, t, name, len, 0, 0);
  case TRACK_GPU_STREAM:
    return json_name_event(w, t, name, len, 1, trace_stream_rank(t->b, 0));
  case TRACK_GPU_SYNC:
    return json_name_event(w, t, name, len, 1, trace_stream_rank(t->b, 1 + t->lane));
  case TRACK_GPU_NCCL:
    return json_name_event(w, t, name, len, 1, trace_nccl_rank(t->b));
  case TRACK_HOST_NVTX:
    /* Below the threads (which have no sort index), in lane order. */
    return json_name_event(w, t, name, len, 1, 1000000 + (int64_t)t->b);
  default:
    return 0; /* counters are named by their events */
  }
}

static int json_describe_thread(struct trace_writer *w, struct trace_track *t, const char *name)
{
  return json_name_event(w, t, name, strnlen(name, TRACE_NAME_MAX), 0, 0);
}

static char *put_flow(char *p, struct trace_writer *w, const struct trace_track *t, int end,
                      uint64_t id, uint64_t ts)
{
  /* Kineto's convention: cat = name = "ac2g", the correlation id as an integer id; the end
   * binds to the enclosing slice ("bp":"e"), i.e. the GPU slice starting at the same ts. */
  p = PUT(p, ",\n");
  p = end ? PUT(p, "{\"ph\":\"f\",\"bp\":\"e\",\"cat\":\"ac2g\",\"name\":\"ac2g\",\"id\":")
          : PUT(p, "{\"ph\":\"s\",\"cat\":\"ac2g\",\"name\":\"ac2g\",\"id\":");
  p = put_u64(p, id);
  p = put_pid_tid(p, w, t);
  p = PUT(p, ",\"ts\":");
  p = put_milli(p, rel(w, ts));
  return PUT(p, "}");
}

/*
 * GPU slice arguments. Size matters here (docs/TRACES.md, "Encoding"): the device is not an
 * argument (the slice's process is "GPU <n>"), and shared memory is left out when zero.
 */
static char *put_gpu_args(char *p, const struct trace_gpu_slice *g, uint64_t dur)
{
  const char *kind;

  p = PUT(p, ",\"stream\":");
  p = put_u64(p, g->stream);
  switch (g->kind) {
  case TRACE_GPU_KERNEL:
    p = PUT(p, ",\"grid\":[");
    for (int i = 0; i < 3; i++) {
      if (i)
        *p++ = ',';
      p = put_i64(p, g->u.kernel.grid[i]);
    }
    p = PUT(p, "],\"block\":[");
    for (int i = 0; i < 3; i++) {
      if (i)
        *p++ = ',';
      p = put_i64(p, g->u.kernel.block[i]);
    }
    p = PUT(p, "],\"regs\":");
    p = put_u64(p, g->u.kernel.registers_per_thread);
    if (g->u.kernel.static_smem || g->u.kernel.dynamic_smem) {
      p = PUT(p, ",\"smem\":");
      p = put_u64(p, (uint64_t)g->u.kernel.static_smem + g->u.kernel.dynamic_smem);
    }
    break;
  case TRACE_GPU_MEMCPY:
    p = PUT(p, ",\"bytes\":");
    p = put_u64(p, g->u.memcpy.bytes);
    p = PUT(p, ",\"bandwidth_gbps\":");
    p = put_milli(p, trace_bandwidth_milli(g->u.memcpy.bytes, dur));
    if (g->u.memcpy.copy_kind == 10 /* PtoP */) {
      p = PUT(p, ",\"src_device\":");
      p = put_u64(p, g->u.memcpy.src_device);
      p = PUT(p, ",\"dst_device\":");
      p = put_u64(p, g->u.memcpy.dst_device);
    }
    if ((kind = trace_memory_kind_name(g->u.memcpy.src_kind))) {
      p = PUT(p, ",\"src_kind\":\"");
      p = put_lit(p, kind, strlen(kind));
      *p++ = '"';
    }
    if ((kind = trace_memory_kind_name(g->u.memcpy.dst_kind))) {
      p = PUT(p, ",\"dst_kind\":\"");
      p = put_lit(p, kind, strlen(kind));
      *p++ = '"';
    }
    break;
  case TRACE_GPU_MEMSET:
    p = PUT(p, ",\"bytes\":");
    p = put_u64(p, g->u.memset.bytes);
    p = PUT(p, ",\"bandwidth_gbps\":");
    p = put_milli(p, trace_bandwidth_milli(g->u.memset.bytes, dur));
    p = PUT(p, ",\"value\":");
    p = put_u64(p, g->u.memset.value);
    break;
  }
  if (g->graph_id) {
    p = PUT(p, ",\"graph_id\":");
    p = put_u64(p, g->graph_id);
    p = PUT(p, ",\"graph_node_id\":");
    p = put_u64(p, g->graph_node_id);
  }
  return p;
}

/* An NCCL op's arguments (docs/TRACES.md "NCCL"): root, peer and seq only when it has them. */
static char *put_nccl_args(char *p, const struct trace_nccl_slice *n)
{
  char hash[24];

  p = PUT(p, ",\"count\":");
  p = put_u64(p, n->count);
  p = PUT(p, ",\"datatype\":");
  p = put_cstr(p, n->datatype ? n->datatype : "");
  p = PUT(p, ",\"bytes\":");
  p = put_u64(p, n->bytes);
  if (n->root >= 0) {
    p = PUT(p, ",\"root\":");
    p = put_i64(p, n->root);
  }
  if (n->peer >= 0) {
    p = PUT(p, ",\"peer\":");
    p = put_i64(p, n->peer);
  }
  if (n->seq != UINT64_MAX) {
    p = PUT(p, ",\"seq\":");
    p = put_u64(p, n->seq);
  }
  if (n->algo && *n->algo) {
    p = PUT(p, ",\"algo\":");
    p = put_cstr(p, n->algo);
  }
  if (n->proto && *n->proto) {
    p = PUT(p, ",\"proto\":");
    p = put_cstr(p, n->proto);
  }
  if (!n->state || n->nchannels) {
    p = PUT(p, ",\"nChannels\":");
    p = put_u64(p, n->nchannels);
  }
  /* A string: a 64-bit hash does not survive a JSON number (a double). */
  snprintf(hash, sizeof(hash), "%016llx", (unsigned long long)n->comm_hash);
  p = PUT(p, ",\"comm\":");
  p = put_cstr(p, hash);
  p = PUT(p, ",\"rank\":");
  p = put_i64(p, n->rank);
  p = PUT(p, ",\"nranks\":");
  p = put_i64(p, n->nranks);
  if (n->stream != UINT32_MAX) {
    p = PUT(p, ",\"stream\":");
    p = put_u64(p, n->stream);
  }
  if (n->state) {
    p = PUT(p, ",\"state\":");
    p = put_cstr(p, n->state);
    p = PUT(p, ",\"posted_ns\":");
    p = put_u64(p, n->posted_ns);
  }
  if (n->group_ops > 1) {
    /* The interval is the op's share of a grouped kernel, not when it ran. */
    p = PUT(p, ",\"group_ops\":");
    p = put_u64(p, n->group_ops);
    p = PUT(p, ",\"kernel_ns\":");
    p = put_u64(p, n->kernel_ns);
  }
  return p;
}

static const char *slice_cat(const struct trace_track *t, const struct trace_slice *s)
{
  if (s->nccl)
    return "\"nccl\"";
  if (s->gpu)
    return s->gpu->kind == TRACE_GPU_KERNEL   ? "\"kernel\""
           : s->gpu->kind == TRACE_GPU_MEMCPY ? "\"gpu_memcpy\""
                                              : "\"gpu_memset\"";
  return t->kind == TRACK_GPU_SYNC ? "\"cuda_sync\"" : "\"cuda_api\"";
}

/* An NVTX range or mark: the domain as "cat", no correlation; start/end ranges name their
 * threads. */
static int json_nvtx(struct trace_writer *w, struct trace_track *t, const struct trace_slice *s)
{
  size_t cat_len = strnlen(s->cat, 255); /* the agent's domains are at most 63 bytes */
  char *start = trace_out_reserve(&w->out, (s->name_len + cat_len) * 6 + 512), *p = start;

  if (!p)
    return w->out.err;
  p = event_open(w, p);
  p = s->instant ? PUT(p, "{\"ph\":\"i\",\"s\":\"t\",\"cat\":") : PUT(p, "{\"ph\":\"X\",\"cat\":");
  p = put_str(p, s->cat, cat_len);
  p = PUT(p, ",\"name\":");
  p = put_str(p, s->name, s->name_len);
  p = put_pid_tid(p, w, t);
  p = PUT(p, ",\"ts\":");
  p = put_milli(p, rel(w, s->start));
  if (!s->instant) {
    p = PUT(p, ",\"dur\":");
    p = put_milli(p, s->end - s->start);
  }
  if (t->kind == TRACK_HOST_NVTX) {
    p = PUT(p, ",\"args\":{\"start_tid\":");
    p = put_u64(p, s->start_tid);
    p = PUT(p, ",\"end_tid\":");
    p = put_u64(p, s->end_tid);
    p = PUT(p, "}");
  }
  p = PUT(p, "}");
  return event_commit(w, start, p, 1);
}

static int json_slice(struct trace_writer *w, struct trace_track *t, const struct trace_slice *s)
{
  if (s->cat)
    return json_nvtx(w, t, s);
  char *start = trace_out_reserve(&w->out, s->name_len * 6 + 1024), *p = start;
  const char *cat = slice_cat(t, s);
  unsigned n = 1;

  if (!p)
    return w->out.err;
  p = event_open(w, p);
  p = PUT(p, "{\"ph\":\"X\",\"cat\":");
  p = put_lit(p, cat, strlen(cat));
  p = PUT(p, ",\"name\":");
  p = put_str(p, s->name, s->name_len);
  p = put_pid_tid(p, w, t);
  p = PUT(p, ",\"ts\":");
  p = put_milli(p, rel(w, s->start));
  p = PUT(p, ",\"dur\":");
  p = put_milli(p, s->end - s->start);
  if (s->nccl && s->nccl->state && !s->corr_id) {
    /* A pending op never launched has no correlation id: its args start with the next one,
     * without put_nccl_args's leading comma. */
    char *q;
    p = PUT(p, ",\"args\":{");
    q = put_nccl_args(p, s->nccl);
    memmove(p, p + 1, (size_t)(q - p - 1));
    p = q - 1;
  } else {
    p = PUT(p, ",\"args\":{\"correlation\":");
    p = put_u64(p, s->corr_id);
    if (s->gpu)
      p = put_gpu_args(p, s->gpu, s->end - s->start);
    else if (s->nccl)
      p = put_nccl_args(p, s->nccl);
  }
  p = PUT(p, "}}");
  if (s->flow_out) {
    p = put_flow(p, w, t, 0, s->flow_out, s->start);
    n++;
  }
  if (s->flow_in) {
    p = put_flow(p, w, t, 1, s->flow_in, s->start);
    n++;
  }
  return event_commit(w, start, p, n);
}

static int json_counter(struct trace_writer *w, struct trace_track *t, uint64_t ts, uint64_t value)
{
  char *start = trace_out_reserve(&w->out, 256), *p = start;

  if (!p)
    return w->out.err;
  p = event_open(w, p);
  /* Perfetto names the track "<name> <arg key>": "GPU memory in_use_bytes". */
  p = PUT(p, "{\"ph\":\"C\",\"name\":\"GPU memory\",\"pid\":");
  p = put_u64(p, track_pid(w, t));
  p = PUT(p, ",\"ts\":");
  p = put_milli(p, rel(w, ts));
  p = PUT(p, ",\"args\":{\"in_use_bytes\":");
  p = put_u64(p, value);
  p = PUT(p, "}}");
  return event_commit(w, start, p, 1);
}

static char *put_kv_u64(char *p, const char *key, uint64_t v)
{
  p = PUT(p, ",\n");
  p = put_cstr(p, key);
  *p++ = ':';
  return put_u64(p, v);
}

static char *put_kv_str(char *p, const char *key, const char *v)
{
  p = PUT(p, ",\n");
  p = put_cstr(p, key);
  *p++ = ':';
  return put_cstr(p, v);
}

static int json_end(struct trace_writer *w)
{
  /* The reserve below the cap (TRACE_TAIL_RESERVE) is larger than all of this: the keys and
   * strings are bounded (trace_meta copies, TRACE_META_MAX entries of bounded size). */
  char *start, *p;
  int rc;

  if (!w->out.gzip) {
    /* The events first, so that a failure to write the end cuts the file back to them. */
    rc = trace_out_flush(&w->out);
    if (rc)
      return rc;
  }
  start = trace_out_reserve(&w->out, TRACE_TAIL_RESERVE - 1024);
  if (!start)
    return w->out.err;
  p = PUT(start, "\n],\"metadata\":{\"base_time_ns\":");
  p = put_u64(p, w->meta.base_ns);
  p = put_kv_str(p, "trace_writer", "gpuprof trace 2");
  p = put_kv_str(p, "agent", w->meta.agent_version);
  p = put_kv_u64(p, "pid", w->meta.pid);
  if (w->meta.process_name)
    p = put_kv_str(p, "process_name", w->meta.process_name);
  if (w->meta.command_line)
    p = put_kv_str(p, "command_line", w->meta.command_line);
  if (w->meta.hostname)
    p = put_kv_str(p, "hostname", w->meta.hostname);
  p = put_kv_u64(p, "events", w->stats.events);
  p = put_kv_u64(p, "clamped_slices", w->stats.clamped);
  p = put_kv_u64(p, "invalid_events", w->stats.invalid);
  if (w->meta.size_cap_bytes)
    p = put_kv_u64(p, "size_cap_bytes", w->meta.size_cap_bytes);
  if (w->stats.stopped) {
    p = put_kv_str(p, "truncated", "size cap reached: later events were not written");
    p = put_kv_u64(p, "discarded_events", w->stats.discarded);
  }
  for (uint32_t i = 0; i < w->kv_len; i++)
    p = w->kv[i].is_string ? put_kv_str(p, w->kv[i].key, w->kv[i].s)
                           : put_kv_u64(p, w->kv[i].key, w->kv[i].u);
  p = PUT(p, "}}\n");
  trace_out_commit(&w->out, (size_t)(p - start));
  if (w->out.gzip)
    return 0;
  /* The header is patched only once the end is in the file: until then the file is a valid
   * array-form trace (a full disk while the end was written leaves it one, cut back to its
   * last event by trace_out), after it a complete object. */
  rc = trace_out_flush(&w->out);
  if (!rc)
    rc = trace_out_pwrite(&w->out, 0, HEADER_OBJECT, sizeof(HEADER_OBJECT) - 1);
  return rc;
}

static void json_free(struct trace_writer *w)
{
  free(w->enc);
  w->enc = NULL;
}

const struct trace_encoder_ops trace_json_ops = {
    .begin = json_begin,
    .describe = json_describe,
    .describe_thread = json_describe_thread,
    .slice = json_slice,
    .counter = json_counter,
    .end = json_end,
    .free = json_free,
};
