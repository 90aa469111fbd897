/* The trace writers' output: a bounded buffer over write(2), optionally deflated on a thread
 * (one gzip stream, or each buffer of Perfetto packets as one compressed_packets packet). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "export/pbframe.h"
#include "export/trace_internal.h"

#define ZBUF_SIZE (64u * 1024u)

/*
 * Compressed output deflates on a second thread ("gpuprof-gz"): deflate costs several times
 * what formatting does, and the writer runs on the agent's only worker thread, which must keep
 * up with the application. Two buffers of TRACE_OUT_BUF: the writer fills one while the thread
 * deflates (gzip: sync-flushed, as one job; packets: as one chunk) and writes the other.
 * Everything below `lock` is shared; the thread alone touches o->z, o->zbuf and `bytes` while
 * a job runs, the writer alone touches o->buf, o->len, o->file_bytes, o->err and `inflight`.
 *
 * Packets only: a job the writer had to wait for means the compressor is slower than the
 * application's records; the buffer filled meanwhile is then written as it is (packets need no
 * wrapper), which takes the thread a copy instead of a deflate, so a launch storm slows the
 * writer by at most half a deflate per buffer and costs size, not records.
 *
 * A fork child never writes a trace (a capture does not continue in a child, agent/capture.c),
 * so nothing here is fork-aware: the child has no compressor thread to wait for.
 */
struct trace_gz {
  pthread_t thread;
  int started; /* the thread runs; 0: jobs run inline (no thread could be created) */
  pthread_mutex_t lock;
  pthread_cond_t work, done;
  const char *job; /* the buffer being deflated while busy */
  size_t job_len;
  int job_flush; /* gzip: Z_SYNC_FLUSH or Z_FINISH */
  int job_store; /* packets: write the job as it is */
  int busy, quit;
  int err;                   /* sticky; also read without the lock (atomically) by the writer */
  uint64_t bytes;            /* bytes the thread handed to write(2) */
  uint64_t deflated, stored; /* packets: chunks written each way */

  char *spare;     /* the writer's other buffer: the one in flight, or idle */
  size_t inflight; /* writer's view: bytes handed over that may not be in the file yet */
};

static int write_all(int fd, const void *data, size_t n, uint64_t *bytes)
{
  const char *p = data;

  while (n) {
    ssize_t r = write(fd, p, n);
    if (r < 0) {
      if (errno == EINTR)
        continue;
      return -errno;
    }
    p += r;
    n -= (size_t)r;
    *bytes += (uint64_t)r;
  }
  return 0;
}

/*
 * A write that failed part-way (a full disk, a file size limit) leaves part of a buffer in the
 * file, i.e. half an event or half a deflate block: cut the file back to where the buffer
 * started, the end of a whole event (and of a sync-flushed gzip block), so that what was
 * written before stays loadable. The error stays sticky; nothing is written after it.
 */
static void write_failed(int fd, uint64_t *bytes, uint64_t boundary)
{
  if (*bytes > boundary && ftruncate(fd, (off_t)boundary) == 0)
    *bytes = boundary;
}

/* Feeds data to deflate with `flush` and writes what comes out; on the compressor thread (or
 * inline without one). */
static int deflate_out(struct trace_out *o, const char *data, size_t len, int flush,
                       uint64_t *bytes)
{
  uint64_t boundary = *bytes;
  int rc;

  o->z.next_in = (unsigned char *)data;
  o->z.avail_in = (unsigned)len;
  do {
    int zrc;
    o->z.next_out = o->zbuf;
    o->z.avail_out = ZBUF_SIZE;
    zrc = deflate(&o->z, flush);
    if (zrc == Z_STREAM_ERROR)
      return -EIO;
    rc = write_all(o->fd, o->zbuf, ZBUF_SIZE - o->z.avail_out, bytes);
    if (rc) {
      write_failed(o->fd, bytes, boundary);
      return rc;
    }
    if (flush == Z_FINISH && zrc == Z_STREAM_END)
      break;
  } while (o->z.avail_out == 0 || o->z.avail_in > 0 || flush == Z_FINISH);
  return 0;
}

const unsigned char *trace_chunk_deflate(z_stream *z, const void *data, size_t len,
                                         unsigned char *out, size_t cap, size_t *n)
{
  unsigned char *zd = out + TRACE_CHUNK_HEAD, head[TRACE_CHUNK_HEAD], zlen_v[10];
  size_t zlen, zh, h;

  if (!len || cap <= TRACE_CHUNK_HEAD || deflateReset(z) != Z_OK)
    return NULL;
  z->next_in = (unsigned char *)data;
  z->avail_in = (unsigned)len;
  z->next_out = zd;
  z->avail_out = (unsigned)(cap - TRACE_CHUNK_HEAD);
  if (deflate(z, Z_FINISH) != Z_STREAM_END)
    return NULL; /* out was smaller than the bound */
  zlen = cap - TRACE_CHUNK_HEAD - z->avail_out;
  if (zlen + TRACE_CHUNK_HEAD >= len)
    return NULL;
  zh = pb_put_varint(zlen_v, zlen);
  head[0] = 0x0A; /* Trace.packet; its length: compressed_packets' key, length and bytes */
  h = 1 + pb_put_varint(head + 1, 2 + zh + zlen);
  head[h++] = 0x92; /* field 50, length-delimited: (50 << 3 | 2) as a varint */
  head[h++] = 0x03;
  memcpy(head + h, zlen_v, zh);
  h += zh;
  memcpy(zd - h, head, h);
  *n = h + zlen;
  return zd - h;
}

/* Writes len bytes of whole packets as one compressed chunk, or as they are (store, or deflate
 * did not pay); on the compressor thread (or inline without one). */
static int chunk_out(struct trace_out *o, const char *data, size_t len, int store, uint64_t *bytes,
                     uint64_t *deflated, uint64_t *stored)
{
  uint64_t boundary = *bytes;
  const unsigned char *chunk = NULL;
  size_t n = 0;
  int rc;

  if (!len)
    return 0;
  if (!store)
    chunk = trace_chunk_deflate(&o->z, data, len, o->zbuf, o->zcap, &n);
  if (chunk) {
    rc = write_all(o->fd, chunk, n, bytes);
    ++*deflated;
  } else {
    rc = write_all(o->fd, data, len, bytes);
    ++*stored;
  }
  if (rc)
    write_failed(o->fd, bytes, boundary);
  return rc;
}

/* One job: a gzip stream's next part, or a chunk of packets. */
static int job_out(struct trace_out *o, const char *data, size_t len, int flush, int store,
                   uint64_t *bytes, uint64_t *deflated, uint64_t *stored)
{
  if (o->packets)
    return chunk_out(o, data, len, store, bytes, deflated, stored);
  return deflate_out(o, data, len, flush, bytes);
}

static void *gz_main(void *arg)
{
  struct trace_out *o = arg;
  struct trace_gz *gz = o->gz;

  pthread_mutex_lock(&gz->lock);
  for (;;) {
    while (!gz->busy && !gz->quit)
      pthread_cond_wait(&gz->work, &gz->lock);
    if (!gz->busy)
      break;
    if (!gz->err) {
      const char *job = gz->job;
      size_t len = gz->job_len;
      int flush = gz->job_flush, store = gz->job_store, rc;
      uint64_t bytes = gz->bytes, deflated = gz->deflated, stored = gz->stored;

      /* The writer does not touch the job's buffer, the stream or `bytes` until busy is 0. */
      pthread_mutex_unlock(&gz->lock);
      rc = job_out(o, job, len, flush, store, &bytes, &deflated, &stored);
      pthread_mutex_lock(&gz->lock);
      gz->bytes = bytes;
      gz->deflated = deflated;
      gz->stored = stored;
      if (rc)
        __atomic_store_n(&gz->err, rc, __ATOMIC_RELAXED);
    }
    gz->busy = 0;
    pthread_cond_signal(&gz->done);
  }
  pthread_mutex_unlock(&gz->lock);
  return NULL;
}

/* Waits until the job in flight is in the file; picks up its error. 0 or the sticky error;
 * *waited (if given): whether a job was still in flight. */
static int gz_wait(struct trace_out *o, int *waited)
{
  struct trace_gz *gz = o->gz;
  int err;

  pthread_mutex_lock(&gz->lock);
  if (waited)
    *waited = gz->busy;
  while (gz->busy)
    pthread_cond_wait(&gz->done, &gz->lock);
  o->file_bytes = gz->bytes;
  o->chunks_deflated = gz->deflated;
  o->chunks_stored = gz->stored;
  err = gz->err;
  pthread_mutex_unlock(&gz->lock);
  gz->inflight = 0;
  if (err && !o->err)
    o->err = err;
  return o->err;
}

/*
 * Hands buf to the compressor as one job ending in `flush`, after the previous job is in the
 * file. swap: go on in the other buffer without waiting for this job; else buf is free again
 * when this returns (the job is done), with what lies past len untouched.
 */
static int gz_submit(struct trace_out *o, int flush, int swap)
{
  struct trace_gz *gz = o->gz;
  char *job = o->buf;
  int behind = 0;

  if (gz_wait(o, &behind))
    return o->err;
  if (!gz->started) {
    uint64_t bytes = o->file_bytes;
    int rc = job_out(o, job, o->len, flush, 0, &bytes, &gz->deflated, &gz->stored);
    gz->bytes = o->file_bytes = bytes;
    o->chunks_deflated = gz->deflated;
    o->chunks_stored = gz->stored;
    if (rc)
      return o->err = gz->err = rc;
    o->len = 0;
    return 0;
  }
  pthread_mutex_lock(&gz->lock);
  gz->job = job;
  gz->job_len = o->len;
  gz->job_flush = flush;
  gz->job_store = swap && o->packets && behind;
  gz->busy = 1;
  pthread_cond_signal(&gz->work);
  pthread_mutex_unlock(&gz->lock);
  gz->inflight = o->len;
  o->len = 0;
  if (!swap)
    return gz_wait(o, NULL);
  o->buf = gz->spare;
  gz->spare = job;
  return 0;
}

static int gz_open(struct trace_out *o, enum trace_out_mode mode, int level)
{
  struct trace_gz *gz = calloc(1, sizeof(*gz));

  if (!gz)
    return -ENOMEM;
  o->gz = gz;
  pthread_mutex_init(&gz->lock, NULL);
  pthread_cond_init(&gz->work, NULL);
  pthread_cond_init(&gz->done, NULL);
  gz->spare = malloc(TRACE_OUT_BUF);
  if (!gz->spare)
    return -ENOMEM;
  /* 16 + 15: a gzip wrapper around a 32 KiB-window deflate stream; 15: the zlib wrapper that
   * compressed_packets holds. */
  if (deflateInit2(&o->z, level, Z_DEFLATED, mode == TRACE_OUT_GZIP ? 16 + 15 : 15, 8,
                   Z_DEFAULT_STRATEGY) != Z_OK)
    return -ENOMEM;
  o->gzip = 1;
  o->packets = mode == TRACE_OUT_PACKETS;
  o->zcap = o->packets ? TRACE_CHUNK_HEAD + deflateBound(&o->z, TRACE_OUT_BUF) : ZBUF_SIZE;
  o->zbuf = malloc(o->zcap);
  return o->zbuf ? 0 : -ENOMEM;
}

/* Starts the compressor with every signal blocked: the application's handlers must not run
 * on it. Without a thread (none can be created) the writer deflates inline, as it is slower
 * but correct. */
static void gz_start(struct trace_out *o)
{
  struct trace_gz *gz = o->gz;
  sigset_t all, old;

  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  gz->started = pthread_create(&gz->thread, NULL, gz_main, o) == 0;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (gz->started)
    pthread_setname_np(gz->thread, "gpuprof-gz");
}

static void gz_close(struct trace_out *o)
{
  struct trace_gz *gz = o->gz;

  if (!gz)
    return;
  if (gz->started) {
    pthread_mutex_lock(&gz->lock);
    gz->quit = 1;
    pthread_cond_signal(&gz->work);
    pthread_mutex_unlock(&gz->lock);
    pthread_join(gz->thread, NULL);
  }
  pthread_cond_destroy(&gz->work);
  pthread_cond_destroy(&gz->done);
  pthread_mutex_destroy(&gz->lock);
  free(gz->spare);
  free(gz);
  o->gz = NULL;
}

int trace_out_open(struct trace_out *o, const char *path, enum trace_out_mode mode, int level)
{
  int rc;

  memset(o, 0, sizeof(*o));
  o->fd = -1;
  o->buf = malloc(TRACE_OUT_BUF);
  if (!o->buf)
    return -ENOMEM;
  if (mode != TRACE_OUT_PLAIN) {
    rc = gz_open(o, mode, level);
    if (rc)
      return rc;
  }
  /* Never through a link. Captures (agent/capture.c) pass a file they have just created
   * empty with O_EXCL and own the name of, so the truncation drops nothing. */
  o->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (o->fd < 0)
    return o->err = -errno;
  if (o->gzip)
    gz_start(o);
  return 0;
}

int trace_out_flush(struct trace_out *o)
{
  uint64_t boundary = o->file_bytes;
  int rc;

  if (o->err)
    return o->err;
  if (o->gzip) {
    /* A sync flush at every buffer keeps a killed capture readable with zcat up to here; it
     * costs a few bytes per 256 KiB. Packets: the buffer becomes a chunk of its own. */
    if (!o->len)
      return gz_wait(o, NULL);
    return gz_submit(o, Z_SYNC_FLUSH, 0);
  }
  if (!o->len)
    return 0;
  rc = write_all(o->fd, o->buf, o->len, &o->file_bytes);
  if (rc) {
    write_failed(o->fd, &o->file_bytes, boundary);
    return o->err = rc;
  }
  o->len = 0;
  return 0;
}

char *trace_out_reserve(struct trace_out *o, size_t n)
{
  if (o->err)
    return NULL;
  if (o->gzip) {
    /* The compressor's error reaches the writer at its next event, not only at a flush. */
    if (__atomic_load_n(&o->gz->err, __ATOMIC_RELAXED)) {
      gz_wait(o, NULL);
      return NULL;
    }
    if (o->len + n > TRACE_OUT_BUF && gz_submit(o, Z_SYNC_FLUSH, 1))
      return NULL;
    return o->buf + o->len;
  }
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

/*
 * What deflating n bytes with a sync flush can add to them: incompressible input goes out in
 * stored blocks of at most 16 KiB (zlib's symbol buffer at memLevel 8), 5 bytes each, then
 * the flush's empty block and, first, the gzip header.
 */
static uint64_t deflate_slack(size_t n)
{
  return (n >> 11) + 32;
}

uint64_t trace_out_size(const struct trace_out *o)
{
  /* After a sync flush deflate holds nothing back, so the buffered text and the buffer in
   * flight (file_bytes is the size from before it) are all that is unaccounted for. A chunk
   * of packets is written deflated only when that is smaller than the packets themselves. */
  if (!o->gzip || o->packets)
    return o->file_bytes + o->len + (o->gzip ? o->gz->inflight : 0);
  return o->file_bytes + o->len + deflate_slack(o->len) +
         (o->gz->inflight ? o->gz->inflight + deflate_slack(o->gz->inflight) : 0);
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
      err = gz_submit(o, Z_FINISH, 0);
    else
      err = trace_out_flush(o);
  }
  /* Joins the compressor (after its job in flight, if an error came first). */
  gz_close(o);
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
