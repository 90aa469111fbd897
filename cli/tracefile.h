/* Reading the agent's trace files back: JSON lines (plain or gzip) and .pftrace packets. */
#ifndef GPUPROF_CLI_TRACEFILE_H
#define GPUPROF_CLI_TRACEFILE_H

#include <json-c/json.h>
#include <stddef.h>
#include <stdint.h>
#include <zlib.h>

#include "proto/perfetto_trace.pb-c.h"

/* The command named at the start of every message ("gpuprof merge"). */
extern const char *tf_prog;

/* "<tf_prog>: <path>: <message>" on stderr; returns -EINVAL. */
int tf_fail(const char *path, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "<tf_prog>: <path>: <what>: <strerror(err)>" on stderr; returns -err (-EIO for 0). */
int tf_io_fail(const char *path, const char *what, int err);

/* ---- JSON: the writer puts one event on each line ---- */

#define TF_LINE_CAP (512u * 1024u) /* longer than any line the JSON writer emits */
#define TF_JSON_HEADER "{\"traceEvents\":["
#define TF_JSON_META "],\"metadata\":"
/* The start of a plain JSON trace whose writer never closed it (a killed process's): the
 * writer overwrites these 15 spaces with {"traceEvents": at close (export/trace_json.c). */
#define TF_JSON_HEADER_UNFINISHED "               ["

struct tf_lines {
  gzFile f;
  const char *path;
  char *buf;
  size_t len;
  uint64_t no;
};

/* Opens path (plain or gzip) for tf_line_next; 0 or -errno (reported). */
int tf_lines_open(struct tf_lines *l, const char *path);
/* The next line without its newline in l->buf (l->len): 1, 2 for a last line without a
 * newline, 0 at the end, -EPIPE when a gzip stream is cut, or -errno (reported). */
int tf_line_next(struct tf_lines *l);
void tf_lines_close(struct tf_lines *l);
/* The event text of a line: without the header (first line) and the separating comma. */
char *tf_event_text(struct tf_lines *l, size_t *len);
/* A tokener that refuses invalid UTF-8 (the writer's is valid). */
json_tokener *tf_tokener_new(void);
/* text (len bytes) as one JSON object, or NULL when it is anything else. */
json_object *tf_parse_event(json_tokener *tok, const char *text, size_t len);
/* The text of a JSON value for messages: "null" for a null (json-c's NULL). */
const char *tf_text_of(json_object *v);
/* An integer JSON value in [lo, hi] into *out; 0 or -EINVAL. */
int tf_int_in(json_object *v, int64_t lo, int64_t hi, int64_t *out);
/* o[key] when it is a string, else NULL. */
const char *tf_str_of(json_object *o, const char *key);
/* "123.456" (µs, up to three decimals, as the writer's timestamps) -> ns, exactly; -EINVAL
 * for any other text (NULL too), or ns beyond 64 bits. */
int tf_parse_us(const char *s, uint64_t *ns);

/* ---- .pftrace: length-delimited packets, the agent's in deflated chunks ---- */

#define TF_PACKET_MAX (64u << 20)

/* A bump allocator for protobuf-c's unpacking, reset per packet: no malloc per field. Zero
 * it to start; free(mem) when done. */
struct tf_arena {
  uint8_t *mem;
  size_t cap, used;
};

struct tf_pf_reader {
  int fd;
  const char *path;
  uint8_t *buf;
  size_t cap, start, end;
  int eof;
  uint64_t offset; /* of buf[start] in the file */
  /* The packets of the compressed chunk being read (inflated), from chunk[chunk_pos] on. */
  uint8_t *chunk;
  size_t chunk_cap, chunk_len, chunk_pos;
  uint64_t chunk_offset; /* the chunk's packet in the file */
};

int tf_pf_open(struct tf_pf_reader *r, const char *path);
/*
 * The next packet's bytes, the packets of a compressed chunk (the agent writes its traces in
 * them) one by one as if they stood in the file; 1, 0 at the end, -EPIPE if the file ends
 * inside a packet, or -errno (reported).
 */
int tf_pf_next(struct tf_pf_reader *r, const uint8_t **p, size_t *n);
void tf_pf_close(struct tf_pf_reader *r);
/* The packet's bytes unpacked into a (valid until the next call); NULL if they do not decode. */
Gpuprof__Perfetto__TracePacket *tf_pf_unpack(struct tf_arena *a, const uint8_t *p, size_t n);
/* The packet's trusted_packet_sequence_id, 0 if none. */
uint32_t tf_seq_of(const Gpuprof__Perfetto__TracePacket *p);

#endif
