/* A streaming JSON writer: escaping, integers and doubles, nesting, through a caller's sink. */
#ifndef GPUPROF_EXPORT_JSON_H
#define GPUPROF_EXPORT_JSON_H

#include <stddef.h>
#include <stdint.h>

/*
 * The writer emits text as it goes (no document tree) and keeps only a nesting stack, so it
 * suits large traces as well as the agent's exit summary. It never allocates after
 * json_writer_new. Commas, colons and (optionally) indentation are placed by the writer;
 * misuse (a value where a key is due, an unbalanced end, nesting deeper than
 * JSON_MAX_DEPTH) makes the writer fail with -EINVAL. Errors are sticky: after the first
 * failure every call returns it and writes nothing; json_writer_error() reports it.
 */

/* Receives the output; returns 0 or a negative errno, which the writer then returns too. */
typedef int (*json_sink_fn)(void *ctx, const char *data, size_t len);

#define JSON_MAX_DEPTH 32

enum json_flags {
  JSON_COMPACT = 0,
  JSON_PRETTY = 1 << 0, /* newlines and two-space indentation */
};

struct json_writer;

struct json_writer *json_writer_new(json_sink_fn sink, void *ctx, unsigned flags);
void json_writer_free(struct json_writer *w);

int json_writer_begin_object(struct json_writer *w);
int json_writer_end_object(struct json_writer *w);
int json_writer_begin_array(struct json_writer *w);
int json_writer_end_array(struct json_writer *w);
/* Inside an object: the next member's key (escaped as a string). */
int json_writer_key(struct json_writer *w, const char *key);

int json_writer_string(struct json_writer *w, const char *s); /* NULL writes null */
int json_writer_string_len(struct json_writer *w, const char *s, size_t len);
int json_writer_int(struct json_writer *w, int64_t v);
int json_writer_uint(struct json_writer *w, uint64_t v);
/* Shortest text that reads back to the same double, with a "." whatever the host program's
 * LC_NUMERIC; NaN and infinities are written as null. */
int json_writer_double(struct json_writer *w, double v);
int json_writer_bool(struct json_writer *w, int v);
int json_writer_null(struct json_writer *w);

/* Ends the document: 0 if everything was balanced and written, else the first error. */
int json_writer_finish(struct json_writer *w);
int json_writer_error(const struct json_writer *w);

/* Shorthands for "key": value inside an object. */
int json_writer_kv_string(struct json_writer *w, const char *key, const char *s);
int json_writer_kv_int(struct json_writer *w, const char *key, int64_t v);
int json_writer_kv_uint(struct json_writer *w, const char *key, uint64_t v);

#endif
