/* A streaming JSON writer: escaping, integers and doubles, nesting, through a caller's sink. */
#include "export/json.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export/utf8.h"

enum frame_kind { FRAME_TOP, FRAME_OBJECT, FRAME_ARRAY };

struct frame {
  unsigned char kind;
  unsigned char count_nonzero; /* a member/element was already written */
  unsigned char key_pending;   /* object: key written, value due */
};

struct json_writer {
  json_sink_fn sink;
  void *ctx;
  unsigned flags;
  int err;
  int depth; /* index of the current frame; 0 = top level */
  struct frame stack[JSON_MAX_DEPTH + 1];
};

struct json_writer *json_writer_new(json_sink_fn sink, void *ctx, unsigned flags)
{
  struct json_writer *w;

  if (!sink)
    return NULL;
  w = calloc(1, sizeof(*w));
  if (!w)
    return NULL;
  w->sink = sink;
  w->ctx = ctx;
  w->flags = flags;
  w->stack[0].kind = FRAME_TOP;
  return w;
}

void json_writer_free(struct json_writer *w)
{
  free(w);
}

int json_writer_error(const struct json_writer *w)
{
  return w->err;
}

static int emit(struct json_writer *w, const char *s, size_t len)
{
  int ret;

  if (w->err)
    return w->err;
  ret = w->sink(w->ctx, s, len);
  if (ret)
    w->err = ret < 0 ? ret : -EIO;
  return w->err;
}

static int fail(struct json_writer *w, int err)
{
  if (!w->err)
    w->err = err;
  return w->err;
}

static int newline_indent(struct json_writer *w, int depth)
{
  static const char spaces[] = "                                                                ";
  int n = depth * 2;

  if (!(w->flags & JSON_PRETTY))
    return 0;
  if (emit(w, "\n", 1))
    return w->err;
  while (n > 0) {
    int chunk = n < (int)sizeof(spaces) - 1 ? n : (int)sizeof(spaces) - 1;
    if (emit(w, spaces, (size_t)chunk))
      return w->err;
    n -= chunk;
  }
  return 0;
}

/* Everything that starts a value: separators, and checks that a value is allowed here. */
static int before_value(struct json_writer *w)
{
  struct frame *f = &w->stack[w->depth];

  if (w->err)
    return w->err;
  switch (f->kind) {
  case FRAME_TOP:
    if (f->count_nonzero)
      return fail(w, -EINVAL); /* one document per writer */
    f->count_nonzero = 1;
    return 0;
  case FRAME_OBJECT:
    if (!f->key_pending)
      return fail(w, -EINVAL);
    f->key_pending = 0;
    return 0;
  default:
    if (f->count_nonzero && emit(w, ",", 1))
      return w->err;
    f->count_nonzero = 1;
    return newline_indent(w, w->depth);
  }
}

static int emit_string(struct json_writer *w, const char *s, size_t len);

int json_writer_key(struct json_writer *w, const char *key)
{
  struct frame *f = &w->stack[w->depth];
  int pretty = (w->flags & JSON_PRETTY) != 0;

  if (w->err)
    return w->err;
  if (f->kind != FRAME_OBJECT || f->key_pending || !key)
    return fail(w, -EINVAL);
  if (f->count_nonzero && emit(w, ",", 1))
    return w->err;
  f->count_nonzero = 1;
  if (newline_indent(w, w->depth) || emit_string(w, key, strlen(key)))
    return w->err;
  if (emit(w, pretty ? ": " : ":", pretty ? 2 : 1))
    return w->err;
  f->key_pending = 1;
  return 0;
}

static int begin(struct json_writer *w, enum frame_kind kind, const char *open)
{
  if (before_value(w))
    return w->err;
  if (w->depth >= JSON_MAX_DEPTH)
    return fail(w, -EINVAL);
  if (emit(w, open, 1))
    return w->err;
  w->depth++;
  w->stack[w->depth].kind = (unsigned char)kind;
  w->stack[w->depth].count_nonzero = 0;
  w->stack[w->depth].key_pending = 0;
  return 0;
}

static int end(struct json_writer *w, enum frame_kind kind, const char *close)
{
  struct frame *f = &w->stack[w->depth];

  if (w->err)
    return w->err;
  if (f->kind != kind || f->key_pending)
    return fail(w, -EINVAL);
  w->depth--;
  if (f->count_nonzero && newline_indent(w, w->depth))
    return w->err;
  return emit(w, close, 1);
}

int json_writer_begin_object(struct json_writer *w)
{
  return begin(w, FRAME_OBJECT, "{");
}

int json_writer_end_object(struct json_writer *w)
{
  return end(w, FRAME_OBJECT, "}");
}

int json_writer_begin_array(struct json_writer *w)
{
  return begin(w, FRAME_ARRAY, "[");
}

int json_writer_end_array(struct json_writer *w)
{
  return end(w, FRAME_ARRAY, "]");
}

/* Writes s as a quoted, escaped JSON string (no separators). */
static int emit_string(struct json_writer *w, const char *s, size_t len)
{
  static const char hex[] = "0123456789abcdef";
  size_t i, run = 0;

  if (emit(w, "\"", 1))
    return w->err;
  /* Copy runs of plain bytes in one sink call; escape quotes, backslashes and controls.
   * Valid UTF-8 passes through; each byte of an invalid sequence (a path or name in another
   * encoding) becomes '?', since a strict reader refuses the whole document for one. */
  for (i = 0; i < len; i++) {
    unsigned char c = (unsigned char)s[i];
    char esc[6];
    size_t elen = 0;

    if (c >= 0x80) {
      size_t l = utf8_seq_len((const unsigned char *)s + i, len - i);
      if (l) {
        run += l;
        i += l - 1;
        continue;
      }
      esc[0] = '?';
      elen = 1;
    } else if (c == '"' || c == '\\') {
      esc[0] = '\\';
      esc[1] = (char)c;
      elen = 2;
    } else if (c < 0x20) {
      esc[0] = '\\';
      switch (c) {
      case '\n':
        esc[1] = 'n';
        elen = 2;
        break;
      case '\r':
        esc[1] = 'r';
        elen = 2;
        break;
      case '\t':
        esc[1] = 't';
        elen = 2;
        break;
      case '\b':
        esc[1] = 'b';
        elen = 2;
        break;
      case '\f':
        esc[1] = 'f';
        elen = 2;
        break;
      default:
        esc[1] = 'u';
        esc[2] = '0';
        esc[3] = '0';
        esc[4] = hex[c >> 4];
        esc[5] = hex[c & 0xf];
        elen = 6;
      }
    } else {
      run++;
      continue;
    }
    if (run && emit(w, s + i - run, run))
      return w->err;
    run = 0;
    if (emit(w, esc, elen))
      return w->err;
  }
  if (run && emit(w, s + len - run, run))
    return w->err;
  return emit(w, "\"", 1);
}

int json_writer_string_len(struct json_writer *w, const char *s, size_t len)
{
  if (before_value(w))
    return w->err;
  return emit_string(w, s, len);
}

int json_writer_string(struct json_writer *w, const char *s)
{
  if (!s)
    return json_writer_null(w);
  return json_writer_string_len(w, s, strlen(s));
}

static int raw_value(struct json_writer *w, const char *text, size_t len)
{
  if (before_value(w))
    return w->err;
  return emit(w, text, len);
}

int json_writer_uint(struct json_writer *w, uint64_t v)
{
  char buf[24];
  char *p = buf + sizeof(buf);

  do {
    *--p = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  return raw_value(w, p, (size_t)(buf + sizeof(buf) - p));
}

int json_writer_int(struct json_writer *w, int64_t v)
{
  char buf[24];
  char *p = buf + sizeof(buf);
  /* Negate in unsigned arithmetic so INT64_MIN works. */
  uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;

  do {
    *--p = (char)('0' + u % 10);
    u /= 10;
  } while (u);
  if (v < 0)
    *--p = '-';
  return raw_value(w, p, (size_t)(buf + sizeof(buf) - p));
}

int json_writer_double(struct json_writer *w, double v)
{
  char buf[32];
  int n;

  if (!isfinite(v))
    return json_writer_null(w);
  /* The shortest of %.15g..%.17g that reads back exactly. */
  for (int prec = 15; prec <= 17; prec++) {
    n = snprintf(buf, sizeof(buf), "%.*g", prec, v);
    if (strtod(buf, NULL) == v)
      break;
  }
  if (n < 0 || (size_t)n >= sizeof(buf))
    return fail(w, -EINVAL);
  /* printf and strtod follow the host program's LC_NUMERIC, whose decimal point may be ","
   * (or several bytes): JSON's is ".". */
  {
    int j = 0;
    for (int i = 0; i < n; i++) {
      char c = buf[i];
      if ((c >= '0' && c <= '9') || c == '-' || c == '+' || c == 'e')
        buf[j++] = c;
      else if (!j || buf[j - 1] != '.')
        buf[j++] = '.';
    }
    n = j;
  }
  return raw_value(w, buf, (size_t)n);
}

int json_writer_bool(struct json_writer *w, int v)
{
  return v ? raw_value(w, "true", 4) : raw_value(w, "false", 5);
}

int json_writer_null(struct json_writer *w)
{
  return raw_value(w, "null", 4);
}

int json_writer_finish(struct json_writer *w)
{
  if (w->err)
    return w->err;
  if (w->depth != 0 || !w->stack[0].count_nonzero)
    return fail(w, -EINVAL);
  if (w->flags & JSON_PRETTY)
    return emit(w, "\n", 1);
  return 0;
}

int json_writer_kv_string(struct json_writer *w, const char *key, const char *s)
{
  return json_writer_key(w, key) ? w->err : json_writer_string(w, s);
}

int json_writer_kv_int(struct json_writer *w, const char *key, int64_t v)
{
  return json_writer_key(w, key) ? w->err : json_writer_int(w, v);
}

int json_writer_kv_uint(struct json_writer *w, const char *key, uint64_t v)
{
  return json_writer_key(w, key) ? w->err : json_writer_uint(w, v);
}
