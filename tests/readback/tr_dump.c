/* Prints every callback of trace_read (cli/trace_read.h) as one canonical line. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/trace_read.h"
#include "cli/tracefile.h"

/*
 * tr_dump [--pftrace|--json] FILE prints, on stdout:
 *   thread <tid> <name as a JSON string>
 *   device <n> <name as a JSON string>
 *   event <kind> <track> <device> <id> <cat> <name> <ts_ns> <dur_ns> <value> <args>
 *   meta <object>
 * strings and objects as JSON, object keys sorted and doubles as %.17g so that how a value was
 * built (parsed from text, or from a protobuf field) does not show. Then "rc <return value>".
 * Exit status: 0 for a return of 0, 1 for 1, 2 for an error.
 */

static void put_json(FILE *f, json_object *o);

static int key_cmp(const void *a, const void *b)
{
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void put_string(FILE *f, const char *s)
{
  json_object *o = json_object_new_string(s ? s : "");

  fputs(o ? json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN) : "\"?\"", f);
  json_object_put(o);
}

static void put_object(FILE *f, json_object *o)
{
  size_t n = (size_t)json_object_object_length(o), i = 0;
  const char **keys = calloc(n ? n : 1, sizeof(*keys));

  if (!keys) {
    fputs("{?}", f);
    return;
  }
  json_object_object_foreach(o, key, val)
  {
    (void)val;
    keys[i++] = key;
  }
  qsort(keys, n, sizeof(*keys), key_cmp);
  fputc('{', f);
  for (i = 0; i < n; i++) {
    json_object *v = NULL;
    json_object_object_get_ex(o, keys[i], &v);
    if (i)
      fputc(',', f);
    put_string(f, keys[i]);
    fputc(':', f);
    put_json(f, v);
  }
  fputc('}', f);
  free(keys);
}

static void put_json(FILE *f, json_object *o)
{
  switch (json_object_get_type(o)) {
  case json_type_null:
    fputs("null", f);
    break;
  case json_type_object:
    put_object(f, o);
    break;
  case json_type_array:
    fputc('[', f);
    for (size_t i = 0; i < json_object_array_length(o); i++) {
      if (i)
        fputc(',', f);
      put_json(f, json_object_array_get_idx(o, i));
    }
    fputc(']', f);
    break;
  case json_type_double:
    fprintf(f, "%.17g", json_object_get_double(o));
    break;
  case json_type_string:
    put_string(f, json_object_get_string(o));
    break;
  default: /* int (int64 or uint64), boolean: json-c's text is canonical */
    fputs(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN), f);
    break;
  }
}

static const char *kind_name(enum tr_kind k)
{
  switch (k) {
  case TR_SLICE:
    return "slice";
  case TR_INSTANT:
    return "instant";
  case TR_COUNTER:
    return "counter";
  }
  return "?";
}

static const char *track_name(enum tr_track t)
{
  switch (t) {
  case TR_HOST_THREAD:
    return "thread";
  case TR_HOST_NVTX:
    return "nvtx";
  case TR_GPU_STREAM:
    return "stream";
  case TR_GPU_SYNC:
    return "sync";
  case TR_GPU_NCCL:
    return "nccl";
  case TR_GPU_MEMORY:
    return "memory";
  }
  return "?";
}

static void on_meta(void *ctx, json_object *meta)
{
  (void)ctx;
  fputs("meta ", stdout);
  put_json(stdout, meta);
  fputc('\n', stdout);
}

static void on_thread(void *ctx, uint32_t tid, const char *name)
{
  (void)ctx;
  printf("thread %" PRIu32 " ", tid);
  put_string(stdout, name);
  fputc('\n', stdout);
}

static void on_device(void *ctx, uint32_t device, const char *name)
{
  (void)ctx;
  printf("device %" PRIu32 " ", device);
  put_string(stdout, name);
  fputc('\n', stdout);
}

static void on_event(void *ctx, const struct tr_event *e)
{
  (void)ctx;
  printf("event %s %s %" PRIu32 " %" PRIu32 " ", kind_name(e->kind), track_name(e->track),
         e->device, e->id);
  put_string(stdout, e->cat);
  fputc(' ', stdout);
  put_string(stdout, e->name);
  printf(" %" PRIu64 " %" PRIu64 " %" PRIu64 " ", e->ts_ns, e->dur_ns, e->value);
  if (e->args)
    put_json(stdout, e->args);
  else
    fputs("-", stdout);
  fputc('\n', stdout);
}

int main(int argc, char **argv)
{
  struct tr_sink sink = {
      .meta = on_meta, .thread = on_thread, .device = on_device, .event = on_event};
  int (*read)(const char *, const struct tr_sink *) = trace_read;
  int rc;

  tf_prog = "tr_dump";
  if (argc == 3 && !strcmp(argv[1], "--pftrace"))
    read = trace_read_pftrace;
  else if (argc == 3 && !strcmp(argv[1], "--json"))
    read = trace_read_json;
  else if (argc != 2) {
    fprintf(stderr, "usage: tr_dump [--pftrace|--json] FILE\n");
    return 2;
  }
  rc = read(argv[argc - 1], &sink);
  printf("rc %d\n", rc);
  if (fflush(stdout)) {
    perror("tr_dump: stdout");
    return 2;
  }
  return rc == 0 ? 0 : rc == 1 ? 1 : 2;
}
