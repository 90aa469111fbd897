/* The trace writers' output: a bounded buffer over write(2), optionally gzip-deflated. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "export/trace_internal.h"

#define ZBUF_SIZE (64u * 1024u)

static int write_all(struct trace_out *o, const void *data, size_t n)
{
  const char *p = data;

  while (n) {
    ssize_t r = write(o->fd, p, n);
    if (r < 0) {
      if (errno == EINTR)
        continue;
      return o->err = -errno;
    }
    p += r;
    n -= (size_t)r;
    o->file_bytes += (uint64_t)r;
  }
  return 0;
}

/*
 * A write that failed part-way (a full disk, a file size limit) leaves part of a buffer in the
 * file, i.e. half an event or half a deflate block: cut the file back to where the buffer
 * started, the end of a whole event (and of a sync-flushed gzip block), so that what was
 * written before stays loadable. The error stays sticky; nothing is written after it.
 */
static int write_failed(struct trace_out *o, uint64_t boundary)
{
  if (o->file_bytes > boundary && ftruncate(o->fd, (off_t)boundary) == 0)
    o->file_bytes = boundary;
  return o->err;
}

int trace_out_open(struct trace_out *o, const char *path, int gzip, int level)
{
  memset(o, 0, sizeof(*o));
  o->fd = -1;
  o->buf = malloc(TRACE_OUT_BUF);
  if (!o->buf)
    return -ENOMEM;
  if (gzip) {
    o->zbuf = malloc(ZBUF_SIZE);
    if (!o->zbuf)
      return -ENOMEM;
    /* 16 + 15: a gzip wrapper around a 32 KiB-window deflate stream. */
    if (deflateInit2(&o->z, level, Z_DEFLATED, 16 + 15, 8, Z_DEFAULT_STRATEGY) != Z_OK)
      return -ENOMEM;
    o->gzip = 1;
  }
  o->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (o->fd < 0)
    return o->err = -errno;
  return 0;
}

/* Feeds buf to deflate with `flush` and writes what comes out. */
static int deflate_out(struct trace_out *o, int flush)
{
  uint64_t boundary = o->file_bytes;

  o->z.next_in = (unsigned char *)o->buf;
  o->z.avail_in = (unsigned)o->len;
  do {
    int rc;
    o->z.next_out = o->zbuf;
    o->z.avail_out = ZBUF_SIZE;
    rc = deflate(&o->z, flush);
    if (rc == Z_STREAM_ERROR)
      return o->err = -EIO;
    if (write_all(o, o->zbuf, ZBUF_SIZE - o->z.avail_out))
      return write_failed(o, boundary);
    if (flush == Z_FINISH && rc == Z_STREAM_END)
      break;
  } while (o->z.avail_out == 0 || o->z.avail_in > 0 || flush == Z_FINISH);
  o->len = 0;
  return 0;
}

int trace_out_flush(struct trace_out *o)
{
  uint64_t boundary = o->file_bytes;

  if (o->err)
    return o->err;
  if (!o->len)
    return 0;
  if (o->gzip)
    /* A sync flush at every buffer keeps a killed capture readable with zcat up to here; it
     * costs a few bytes per 256 KiB. */
    return deflate_out(o, Z_SYNC_FLUSH);
  if (write_all(o, o->buf, o->len))
    return write_failed(o, boundary);
  o->len = 0;
  return 0;
}

char *trace_out_reserve(struct trace_out *o, size_t n)
{
  if (o->err)
    return NULL;
  if (o->len + n > TRACE_OUT_BUF && trace_out_flush(o))
    return NULL;
  return o->buf + o->len;
}

int trace_out_write(struct trace_out *o, const void *data, size_t n)
{
  while (n) {
    size_t chunk = n < TRACE_EVENT_MAX ? n : TRACE_EVENT_MAX;
    char *p = trace_out_reserve(o, chunk);
    if (!p)
      return o->err;
    memcpy(p, data, chunk);
    trace_out_commit(o, chunk);
    data = (const char *)data + chunk;
    n -= chunk;
  }
  return 0;
}

uint64_t trace_out_size(const struct trace_out *o)
{
  /* After a sync flush deflate holds nothing back, so the buffered text is all that is
   * unaccounted for; deflate never expands it by more than a few bytes per block. */
  return o->file_bytes + o->len + (o->gzip ? 64 : 0);
}

int trace_out_pwrite(struct trace_out *o, uint64_t off, const void *data, size_t n)
{
  if (o->err)
    return o->err;
  if (o->gzip)
    return -EINVAL;
  if (pwrite(o->fd, data, n, (off_t)off) != (ssize_t)n)
    return o->err = errno ? -errno : -EIO;
  return 0;
}

int trace_out_close(struct trace_out *o)
{
  int err = o->err;

  if (!err) {
    if (o->gzip)
      err = deflate_out(o, Z_FINISH);
    else
      err = trace_out_flush(o);
  }
  if (o->gzip)
    deflateEnd(&o->z);
  if (o->fd >= 0 && close(o->fd) && !err)
    err = -errno;
  free(o->buf);
  free(o->zbuf);
  o->buf = NULL;
  o->zbuf = NULL;
  o->fd = -1;
  return err;
}
