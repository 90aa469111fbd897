/* An agent trace read back as one stream of events: the format sniffed, and the JSON reader. */
#define _GNU_SOURCE
#include "cli/trace_read.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "cli/tracefile.h"
#include "export/trace_internal.h"

#define META_TEXT_MAX (1024u * 1024u) /* the writer's metadata fits its 96 KiB tail reserve */

/* The metadata at the end of a JSON trace ("],"metadata":{...}}"), or NULL when the file
 * ends before it (a killed process's) or is not the agent's (*rc set, reported). One pass of
 * line reads: the events are parsed in the second. */
static json_object *json_metadata(const char *path, int *rc)
{
  struct tf_lines l = {0};
  json_tokener *tok = tf_tokener_new();
  json_object *meta = NULL;
  char *text = NULL;
  size_t len = 0;
  int in_meta = 0;

  *rc = tok ? tf_lines_open(&l, path) : tf_io_fail(path, "cannot parse", ENOMEM);
  if (*rc)
    goto out;
  while ((*rc = tf_line_next(&l)) > 0) {
    if (l.no == 1 && strncmp(l.buf, TF_JSON_HEADER, sizeof(TF_JSON_HEADER) - 1) != 0 &&
        strncmp(l.buf, TF_JSON_HEADER_UNFINISHED, sizeof(TF_JSON_HEADER_UNFINISHED) - 1) != 0) {
      *rc = tf_fail(path, "not a gpuprof trace (no {\"traceEvents\":[ at its start)");
      break;
    }
    if (!in_meta && !strncmp(l.buf, TF_JSON_META, sizeof(TF_JSON_META) - 1)) {
      in_meta = 1;
      text = malloc(META_TEXT_MAX);
      if (!text) {
        *rc = tf_io_fail(path, "cannot read its metadata", ENOMEM);
        break;
      }
      l.len -= sizeof(TF_JSON_META) - 1;
      memmove(l.buf, l.buf + sizeof(TF_JSON_META) - 1, l.len + 1);
    }
    if (!in_meta)
      continue;
    if (len + l.len + 1 >= META_TEXT_MAX) {
      *rc = tf_fail(path, "metadata larger than %u bytes: not a gpuprof trace", META_TEXT_MAX);
      break;
    }
    memcpy(text + len, l.buf, l.len);
    len += l.len;
    text[len++] = '\n';
  }
  if (*rc < 0 && *rc != -EPIPE)
    goto out;
  *rc = 0;
  if (!in_meta)
    goto out;
  /* {"base_time_ns":...}} and a newline: the last brace closes the trace. */
  while (len && (text[len - 1] == '\n' || text[len - 1] == ' '))
    len--;
  if (len >= 2 && text[len - 1] == '}')
    meta = tf_parse_event(tok, text, len - 1);
  /* Cut inside its metadata: the events are whole, the base is lost with the rest. */
out:
  free(text);
  if (tok && l.buf)
    tf_lines_close(&l);
  json_tokener_free(tok);
  return meta;
}

static uint64_t uint_of(json_object *o, const char *key)
{
  json_object *v;
  int64_t n;

  if (!json_object_object_get_ex(o, key, &v) || tf_int_in(v, 0, INT64_MAX, &n))
    return 0;
  return (uint64_t)n;
}

/* Where a JSON pid/tid is: the inverse of trace_gpu_pid, trace_sync_tid, trace_nccl_tid and
 * trace_nvtx_tid. GPU "processes" have bit 30 of the pid set, above any real pid. */
static void json_track(uint64_t pid, uint64_t tid, struct tr_event *e)
{
  uint32_t t = (uint32_t)tid;

  if (pid < 0x40000000u) {
    e->track = t >= 0xf0000000u ? TR_HOST_NVTX : TR_HOST_THREAD;
    e->id = t >= 0xf0000000u ? t & 0x0fffffffu : t;
    return;
  }
  e->device = (uint32_t)pid & 0xffu;
  if (t >= 0xc0000000u) { /* context-wide waits: lanes count down from UINT32_MAX */
    e->track = TR_GPU_SYNC;
    e->id = UINT32_MAX;
  } else if (t & 0x80000000u) {
    e->track = TR_GPU_SYNC;
    e->id = (t >> 22) & 0xffu ? t & 0x3fffffu : t & 0x7fffffffu;
  } else if (t & 0x40000000u) {
    e->track = TR_GPU_NCCL;
    e->id = t & 0x3fffffffu;
  } else {
    e->track = TR_GPU_STREAM;
    e->id = t;
  }
}

/* One event line: metadata names to their callbacks, slices, instants and counters to event;
 * flows are left out. 0, or -EINVAL for a line that is not one of the writer's events. */
static int json_event(const char *path, uint64_t line, json_object *o, uint64_t base,
                      const struct tr_sink *sink)
{
  struct tr_event e = {0};
  const char *ph = tf_str_of(o, "ph"), *name = tf_str_of(o, "name");
  json_object *v, *args = NULL;
  uint64_t pid = uint_of(o, "pid"), tid = uint_of(o, "tid"), us;

  json_object_object_get_ex(o, "args", &args);
  if (!ph || !name)
    return tf_fail(path, "line %" PRIu64 ": an event without ph or name: not a gpuprof trace",
                   line);
  if (!strcmp(ph, "M")) {
    const char *label = args ? tf_str_of(args, "name") : NULL;
    if (!label)
      return 0;
    if (!strcmp(name, "thread_name") && pid < 0x40000000u && tid < 0xf0000000u && sink->thread)
      sink->thread(sink->ctx, (uint32_t)tid, label);
    else if (!strcmp(name, "process_name") && pid >= 0x40000000u && sink->device)
      sink->device(sink->ctx, (uint32_t)pid & 0xffu, label);
    return 0;
  }
  if (!strcmp(ph, "X"))
    e.kind = TR_SLICE;
  else if (!strcmp(ph, "i") || !strcmp(ph, "I"))
    e.kind = TR_INSTANT;
  else if (!strcmp(ph, "C"))
    e.kind = TR_COUNTER;
  else
    return 0; /* flows */
  if (!json_object_object_get_ex(o, "ts", &v) ||
      tf_parse_us(v ? json_object_get_string(v) : NULL, &us) || us > UINT64_MAX - base)
    return tf_fail(path, "line %" PRIu64 ": a bad ts: not a gpuprof trace", line);
  e.ts_ns = base + us;
  if (e.kind == TR_SLICE && (!json_object_object_get_ex(o, "dur", &v) ||
                             tf_parse_us(v ? json_object_get_string(v) : NULL, &e.dur_ns)))
    return tf_fail(path, "line %" PRIu64 ": a slice without a dur: not a gpuprof trace", line);
  json_track(pid, tid, &e);
  if (e.kind == TR_COUNTER) {
    e.track = TR_GPU_MEMORY;
    e.value = args ? uint_of(args, "in_use_bytes") : 0;
    args = NULL;
  }
  e.cat = tf_str_of(o, "cat");
  if (!e.cat)
    e.cat = "";
  e.name = name;
  e.args = args;
  if (sink->only_cat && strcmp(e.cat, sink->only_cat))
    return 0;
  if (sink->event)
    sink->event(sink->ctx, &e);
  return 0;
}

int trace_read_json(const char *path, const struct tr_sink *sink)
{
  struct tf_lines l = {0};
  json_tokener *tok = NULL;
  json_object *meta;
  uint64_t base;
  char cat_key[64] = "";
  int rc, cut = 0;

  meta = json_metadata(path, &rc);
  if (rc)
    return rc;
  /* Without its metadata (a killed process's file) the times stay relative to the capture's
   * start, which is what the file's numbers are. */
  base = meta ? uint_of(meta, "base_time_ns") : 0;
  if (sink->only_cat)
    snprintf(cat_key, sizeof(cat_key), "\"cat\":\"%s\"", sink->only_cat);
  tok = tf_tokener_new();
  rc = tok ? tf_lines_open(&l, path) : tf_io_fail(path, "cannot parse", ENOMEM);
  if (rc)
    goto out;
  while ((rc = tf_line_next(&l)) > 0) {
    size_t len;
    char *text;
    json_object *o;

    if (!strncmp(l.buf, TF_JSON_META, sizeof(TF_JSON_META) - 1))
      break;
    text = tf_event_text(&l, &len);
    if (!len)
      continue;
    if (rc == 2) { /* the file ends inside this line */
      cut = 1;
      break;
    }
    /* An event of a category not asked for (the parsed "cat" decides for those kept); the
     * names ("ph":"M") are always read. */
    if (cat_key[0] && strncmp(text, "{\"ph\":\"M\"", 10) && !strstr(text, cat_key))
      continue;
    o = tf_parse_event(tok, text, len);
    if (!o) {
      rc = tf_fail(path, "line %" PRIu64 " is not a whole event: not a gpuprof trace", l.no);
      goto out;
    }
    rc = json_event(path, l.no, o, base, sink);
    json_object_put(o);
    if (rc)
      goto out;
  }
  if (rc == -EPIPE)
    cut = 1;
  else if (rc < 0)
    goto out;
  if (!meta)
    cut = 1;
  if (sink->meta) {
    json_object *empty = meta ? NULL : json_object_new_object();
    sink->meta(sink->ctx, meta ? meta : empty);
    json_object_put(empty);
  }
  rc = cut;
out:
  if (l.buf)
    tf_lines_close(&l);
  json_tokener_free(tok);
  json_object_put(meta);
  return rc;
}

int trace_read(const char *path, const struct tr_sink *sink)
{
  unsigned char head[2] = {0, 0};
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  ssize_t n;

  if (fd < 0)
    return tf_io_fail(path, "cannot open", errno);
  n = read(fd, head, sizeof(head));
  close(fd);
  if (n < 0)
    return tf_io_fail(path, "cannot read", errno);
  /* A .pftrace starts with its first packet (Trace.packet: 0x0A); JSON with '{' (or, never
   * finished, with the spaces its writer leaves for the header), gzip with 1f 8b (zlib reads
   * either). */
  if (n >= 1 && head[0] == 0x0A)
    return trace_read_pftrace(path, sink);
  if (n >= 1 &&
      (head[0] == '{' || head[0] == ' ' || (n == 2 && head[0] == 0x1f && head[1] == 0x8b)))
    return trace_read_json(path, sink);
  return tf_fail(path, "not a gpuprof trace (neither JSON, gzip nor Perfetto protobuf)");
}
