/* Reading the agent's trace files back: JSON lines (plain or gzip) and .pftrace packets. */
#define _GNU_SOURCE
#include "cli/tracefile.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "export/pbframe.h"
#include "export/trace_internal.h"

const char *tf_prog = "gpuprof";
int tf_fail(const char *path, const char *fmt, ...)
{
  va_list ap;

  fprintf(stderr, "%s: %s: ", tf_prog, path);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  return -EINVAL;
}

int tf_io_fail(const char *path, const char *what, int err)
{
  fprintf(stderr, "%s: %s: %s: %s\n", tf_prog, path, what, strerror(err));
  return -(err ? err : EIO);
}

/* The next line without its newline in l->buf (l->len); 1, 0 at the end, or -errno. */
int tf_line_next(struct tf_lines *l)
{
  int err;

  if (!gzgets(l->f, l->buf, TF_LINE_CAP)) {
    const char *msg = gzerror(l->f, &err);
    if (err == Z_OK || err == Z_STREAM_END || (err == Z_BUF_ERROR && gzeof(l->f)))
      return err == Z_BUF_ERROR ? -EPIPE : 0;
    return tf_fail(l->path, "read error after line %" PRIu64 ": %s", l->no,
                   err == Z_ERRNO ? strerror(errno) : msg);
  }
  l->no++;
  l->len = strlen(l->buf);
  if (l->len && l->buf[l->len - 1] == '\n') {
    l->buf[--l->len] = '\0';
    return 1;
  }
  if (l->len >= TF_LINE_CAP - 1)
    return tf_fail(l->path, "line %" PRIu64 " is longer than %u bytes: not a gpuprof trace", l->no,
                   TF_LINE_CAP);
  /* The last line has no newline: the file ends inside it (the writer ends every line). */
  gzerror(l->f, &err);
  return err == Z_BUF_ERROR ? -EPIPE : 2;
}

int tf_lines_open(struct tf_lines *l, const char *path)
{
  int fd = open(path, O_RDONLY | O_CLOEXEC);

  memset(l, 0, sizeof(*l));
  l->path = path;
  if (fd < 0)
    return tf_io_fail(path, "cannot open", errno);
  l->f = gzdopen(fd, "rb");
  l->buf = malloc(TF_LINE_CAP);
  if (!l->f || !l->buf) {
    if (l->f)
      gzclose(l->f);
    else
      close(fd);
    free(l->buf);
    l->f = NULL; /* the callers' tf_lines_close must not release them again */
    l->buf = NULL;
    return tf_io_fail(path, "cannot read", ENOMEM);
  }
  gzbuffer(l->f, 1u << 20);
  return 0;
}

void tf_lines_close(struct tf_lines *l)
{
  if (l->f)
    gzclose(l->f);
  free(l->buf);
}

/* The event text of a line: without the header (first line) and the separating comma. */
char *tf_event_text(struct tf_lines *l, size_t *len)
{
  char *p = l->buf;
  size_t n = l->len;

  if (l->no == 1 && n >= sizeof(TF_JSON_HEADER) - 1) {
    p += sizeof(TF_JSON_HEADER) - 1;
    n -= sizeof(TF_JSON_HEADER) - 1;
  }
  if (n && p[n - 1] == ',')
    p[--n] = '\0';
  *len = n;
  return p;
}

/* A tokener that refuses invalid UTF-8: the writer's is valid, and json-c would pass the bytes
 * through into a merged trace that no JSON reader accepts. */
json_tokener *tf_tokener_new(void)
{
  json_tokener *tok = json_tokener_new();

#ifdef JSON_TOKENER_VALIDATE_UTF8
  if (tok)
    json_tokener_set_flags(tok, JSON_TOKENER_VALIDATE_UTF8);
#endif
  return tok;
}

json_object *tf_parse_event(json_tokener *tok, const char *text, size_t len)
{
  json_object *o;

  json_tokener_reset(tok);
  o = json_tokener_parse_ex(tok, text, (int)len);
  if (o && (json_tokener_get_error(tok) != json_tokener_success ||
            json_tokener_get_parse_end(tok) != len || !json_object_is_type(o, json_type_object))) {
    json_object_put(o);
    o = NULL;
  }
  return o;
}

const char *tf_text_of(json_object *v)
{
  return v ? json_object_get_string(v) : "null";
}

/* An integer JSON value in [lo, hi] into *out; 0 or -EINVAL. */
int tf_int_in(json_object *v, int64_t lo, int64_t hi, int64_t *out)
{
  if (!v || !json_object_is_type(v, json_type_int))
    return -EINVAL;
  /* json-c clamps a uint64 above INT64_MAX to INT64_MAX: out of any range asked here. */
  *out = json_object_get_int64(v);
  return *out >= lo && *out <= hi ? 0 : -EINVAL;
}

const char *tf_str_of(json_object *o, const char *key)
{
  json_object *v;

  if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string))
    return NULL;
  return json_object_get_string(v);
}

/* "123.456" (µs, up to three decimals) -> ns, exactly; -EINVAL for any other text, or ns
 * beyond 64 bits. s is NULL for a JSON null. */
int tf_parse_us(const char *s, uint64_t *ns)
{
  uint64_t v = 0;
  int frac = -1;

  if (!s || !*s)
    return -EINVAL;
  for (; *s; s++) {
    if (*s == '.' && frac < 0) {
      frac = 0;
      continue;
    }
    if (*s < '0' || *s > '9' || frac >= 3 || v > UINT64_MAX / 10 - 10)
      return -EINVAL;
    v = v * 10 + (uint64_t)(*s - '0');
    if (frac >= 0)
      frac++;
  }
  for (frac = frac < 0 ? 0 : frac; frac < 3; frac++) {
    if (v > UINT64_MAX / 10)
      return -EINVAL;
    v *= 10;
  }
  *ns = v;
  return 0;
}

static void *arena_alloc(void *data, size_t n)
{
  struct tf_arena *a = data;
  size_t at = (a->used + 15) & ~(size_t)15;

  if (at + n > a->cap)
    return NULL; /* arena_fit sized it for the packet */
  a->used = at + n;
  return a->mem + at;
}

static void arena_free(void *data, void *p)
{
  (void)data;
  (void)p;
}

/* Unpacked, a packet takes a few times its wire size (pointers, arrays): room for that. */
static int arena_fit(struct tf_arena *a, size_t wire)
{
  size_t need = wire * 16 + 64 * 1024;

  a->used = 0;
  if (need <= a->cap)
    return 0;
  free(a->mem);
  a->mem = malloc(need);
  a->cap = a->mem ? need : 0;
  return a->mem ? 0 : -ENOMEM;
}

/* Makes n bytes available at buf + start; 1, 0 when the file ends first, or -errno. */
static int pf_need(struct tf_pf_reader *r, size_t n)
{
  while (r->end - r->start < n) {
    ssize_t got;
    if (r->eof)
      return 0;
    if (r->start) {
      memmove(r->buf, r->buf + r->start, r->end - r->start);
      r->end -= r->start;
      r->start = 0;
    }
    if (r->cap - r->end < n || r->cap - r->end < 65536) {
      size_t cap = r->cap ? r->cap * 2 : (1u << 20);
      uint8_t *nb;
      while (cap < n + 65536)
        cap *= 2;
      nb = realloc(r->buf, cap);
      if (!nb)
        return tf_io_fail(r->path, "cannot read", ENOMEM);
      r->buf = nb;
      r->cap = cap;
    }
    got = read(r->fd, r->buf + r->end, r->cap - r->end);
    if (got < 0 && errno == EINTR)
      continue;
    if (got < 0)
      return tf_io_fail(r->path, "read error", errno);
    if (!got)
      r->eof = 1;
    r->end += (size_t)got;
  }
  return 1;
}

/* Whether the n packet bytes at p are a compressed chunk: the one field compressed_packets
 * (50, length-delimited: key 0x92 0x03); its zlib bytes at *z, *zlen. */
static int is_chunk(const uint8_t *p, size_t n, const uint8_t **z, size_t *zlen)
{
  size_t at = 2;
  uint64_t len;

  if (n < 3 || p[0] != 0x92 || p[1] != 0x03 || pb_get_varint(p, n, &at, &len) || len != n - at)
    return 0;
  *z = p + at;
  *zlen = (size_t)len;
  return 1;
}

/* Inflates a chunk's zlib stream into r->chunk (at most TF_PACKET_MAX bytes). */
static int pf_inflate(struct tf_pf_reader *r, const uint8_t *zdata, size_t zlen)
{
  z_stream z;
  int zrc = Z_OK;

  memset(&z, 0, sizeof(z));
  if (inflateInit(&z) != Z_OK)
    return tf_io_fail(r->path, "cannot read", ENOMEM);
  z.next_in = (uint8_t *)zdata;
  z.avail_in = (uInt)zlen;
  r->chunk_len = r->chunk_pos = 0;
  while (zrc != Z_STREAM_END) {
    if (r->chunk_len == r->chunk_cap) {
      size_t cap = r->chunk_cap ? r->chunk_cap * 2 : TRACE_OUT_BUF * 2;
      uint8_t *nb = cap <= TF_PACKET_MAX ? realloc(r->chunk, cap) : NULL;
      if (!nb) {
        inflateEnd(&z);
        return cap <= TF_PACKET_MAX
                   ? tf_io_fail(r->path, "cannot read", ENOMEM)
                   : tf_fail(r->path,
                             "byte %" PRIu64 ": a compressed chunk of over %u bytes: "
                             "not a gpuprof trace",
                             r->chunk_offset, TF_PACKET_MAX);
      }
      r->chunk = nb;
      r->chunk_cap = cap;
    }
    z.next_out = r->chunk + r->chunk_len;
    z.avail_out = (uInt)(r->chunk_cap - r->chunk_len);
    zrc = inflate(&z, Z_NO_FLUSH);
    r->chunk_len = r->chunk_cap - z.avail_out;
    if (zrc != Z_OK && zrc != Z_STREAM_END)
      break;
  }
  inflateEnd(&z);
  if (zrc != Z_STREAM_END || z.avail_in)
    return tf_fail(r->path,
                   "byte %" PRIu64 ": a compressed chunk that does not inflate whole: "
                   "not a gpuprof trace",
                   r->chunk_offset);
  return 0;
}

/* The next packet of the chunk being read; 1, or -EINVAL (reported). */
static int chunk_next(struct tf_pf_reader *r, const uint8_t **p, size_t *n)
{
  size_t at = r->chunk_pos + 1;
  uint64_t len;
  const uint8_t *z;
  size_t zlen;

  if (r->chunk[r->chunk_pos] != 0x0A || pb_get_varint(r->chunk, r->chunk_len, &at, &len) ||
      len > r->chunk_len - at || len > TF_PACKET_MAX)
    return tf_fail(r->path,
                   "byte %" PRIu64 ": a compressed chunk holds a cut packet: not a "
                   "gpuprof trace",
                   r->chunk_offset);
  *p = r->chunk + at;
  *n = (size_t)len;
  if (is_chunk(*p, *n, &z, &zlen))
    return tf_fail(r->path,
                   "byte %" PRIu64 ": a compressed chunk inside a compressed chunk: not "
                   "a gpuprof trace",
                   r->chunk_offset);
  r->chunk_pos = at + len;
  return 1;
}

/* The next packet of the file itself; as tf_pf_next. */
static int file_next(struct tf_pf_reader *r, const uint8_t **p, size_t *n)
{
  uint64_t len = 0;
  size_t h = 1;
  int rc;

  rc = pf_need(r, 1);
  if (rc <= 0)
    return rc;
  if (r->buf[r->start] != 0x0A)
    return tf_fail(r->path, "byte %" PRIu64 " is not a Trace packet: not a .pftrace", r->offset);
  for (;;) {
    rc = pf_need(r, h + 1);
    if (rc < 0)
      return rc;
    if (!rc)
      return -EPIPE;
    uint8_t b = r->buf[r->start + h];
    if (h > 10)
      return tf_fail(r->path, "byte %" PRIu64 ": bad packet length: not a .pftrace", r->offset);
    len |= (uint64_t)(b & 0x7f) << (7 * (h - 1));
    h++;
    if (!(b & 0x80))
      break;
  }
  if (len > TF_PACKET_MAX)
    return tf_fail(r->path, "byte %" PRIu64 ": a packet of %" PRIu64 " bytes: not a gpuprof trace",
                   r->offset, len);
  rc = pf_need(r, h + len);
  if (rc < 0)
    return rc;
  if (!rc)
    return -EPIPE;
  *p = r->buf + r->start + h;
  *n = len;
  r->start += h + len;
  r->offset += h + len;
  return 1;
}

/*
 * The next packet's bytes, the packets of a compressed chunk (the agent writes its traces in
 * them) one by one as if they stood in the file; 1, 0 at the end, -EPIPE if the file ends
 * inside a packet, or -errno.
 */
int tf_pf_next(struct tf_pf_reader *r, const uint8_t **p, size_t *n)
{
  for (;;) {
    const uint8_t *z;
    size_t zlen;
    uint64_t at = r->offset;
    int rc;

    if (r->chunk_pos < r->chunk_len)
      return chunk_next(r, p, n);
    rc = file_next(r, p, n);
    if (rc <= 0 || !is_chunk(*p, *n, &z, &zlen))
      return rc;
    r->chunk_offset = at;
    rc = pf_inflate(r, z, zlen);
    if (rc)
      return rc;
  }
}

int tf_pf_open(struct tf_pf_reader *r, const char *path)
{
  memset(r, 0, sizeof(*r));
  r->path = path;
  r->fd = open(path, O_RDONLY | O_CLOEXEC);
  return r->fd < 0 ? tf_io_fail(path, "cannot open", errno) : 0;
}

void tf_pf_close(struct tf_pf_reader *r)
{
  if (r->fd >= 0)
    close(r->fd);
  free(r->buf);
  free(r->chunk);
}

Gpuprof__Perfetto__TracePacket *tf_pf_unpack(struct tf_arena *a, const uint8_t *p, size_t n)
{
  ProtobufCAllocator al = {arena_alloc, arena_free, a};

  if (arena_fit(a, n))
    return NULL;
  return gpuprof__perfetto__trace_packet__unpack(&al, n, p);
}

uint32_t tf_seq_of(const Gpuprof__Perfetto__TracePacket *p)
{
  return p->optional_trusted_packet_sequence_id_case ? p->trusted_packet_sequence_id : 0;
}
