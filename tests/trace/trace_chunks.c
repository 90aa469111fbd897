/* Checks the .pftrace output's compressed chunks (export/trace_out.c, TRACE_OUT_PACKETS). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "export/pbframe.h"
#include "export/trace_internal.h"
#include "tests/trace/expect.h"

/*
 * trace_chunks DIR: drives trace_out in packet mode directly, with whole Trace packets of
 * compressible and incompressible bytes, and reads the file back as Perfetto's tokenizer does
 * (a packet holding only compressed_packets is a zlib stream of whole packets). Checks:
 *   - the file reads back to exactly the packets handed over, after every flush and at close,
 *     and the size bound the cap relies on holds;
 *   - buffers that deflate well become one chunk each; a buffer deflate cannot shrink is
 *     written as its packets;
 *   - a buffer filled while the compressor is still busy with the one before is written as its
 *     packets (this program's deflate() holds the first chunk's deflate until the writer has
 *     filled the next buffer), and the chunks after it are deflated again;
 *   - a write that fails part-way (RLIMIT_FSIZE) leaves whole chunks, a prefix of the packets.
 * Exit status 1 if a check failed.
 */

#define DATA_MAX (6u << 20)

static unsigned char *data; /* the packets handed to trace_out, in order */
static size_t data_len;

/* ---- deflate, held once on request ---- */

static atomic_int hold_first;   /* 1: the next deflate waits for `writer_ready`, then 0.3 s */
static atomic_int writer_ready; /* the writer is about to hand over the next buffer */

int deflate(z_streamp strm, int flush)
{
  static int (*real)(z_streamp, int);

  if (!real)
    real = (int (*)(z_streamp, int))dlsym(RTLD_NEXT, "deflate");
  if (atomic_exchange(&hold_first, 0)) {
    struct timespec ts = {0, 300 * 1000 * 1000};
    while (!atomic_load(&writer_ready)) {
      struct timespec t = {0, 1000 * 1000};
      nanosleep(&t, NULL);
    }
    nanosleep(&ts, NULL); /* the writer's next reserve finds this chunk in flight */
  }
  return real(strm, flush);
}

/* ---- input ---- */

/* Appends one Trace packet with n payload bytes: incompressible (xorshift) or repetitive. */
static void make_packet(size_t n, int random, uint64_t *seed)
{
  unsigned char *p = data + data_len;
  size_t h = 1;

  p[0] = 0x0A;
  h += pb_put_varint(p + 1, n);
  for (size_t i = 0; i < n; i++) {
    p[h + i] =
        random ? xorshift_byte(seed) : (unsigned char)"\x08\x01\x5a\x06kernel\x10\x2a"[i % 12];
  }
  data_len += h + n;
}

/* ---- reading back ---- */

struct readback {
  size_t len;              /* packet bytes recovered */
  unsigned chunks, plains; /* chunks, and plain packets outside them */
  char order[64];          /* per top-level item, up to 63: 'C' chunk, 'p' run of plain packets */
};

static void note(struct readback *r, char c)
{
  size_t k = strlen(r->order);
  if (k < sizeof(r->order) - 1 && !(c == 'p' && k && r->order[k - 1] == 'p'))
    r->order[k] = c;
}

/* Whole packets in in[0, n) -> 0, with each one's bytes appended to out; -1 if malformed. */
static int packets_of(const unsigned char *in, size_t n, unsigned char *out, size_t cap,
                      struct readback *r, int inside)
{
  size_t at = 0;

  while (at < n) {
    size_t start = at;
    uint64_t len;
    if (in[at++] != 0x0A || pb_get_varint(in, n, &at, &len) || len > n - at)
      return -1;
    if (len >= 2 && in[at] == 0x92 && in[at + 1] == 0x03) {
      /* compressed_packets: it must be the packet's only field, and no chunk nests */
      size_t f = at + 2;
      uint64_t zlen;
      static unsigned char inner[TRACE_OUT_BUF];
      uLongf got = sizeof(inner);
      if (inside || pb_get_varint(in, n, &f, &zlen) || f + zlen != at + len)
        return -1;
      if (uncompress(inner, &got, in + f, (uLong)zlen) != Z_OK)
        return -1;
      if (packets_of(inner, got, out, cap, r, 1))
        return -1;
      r->chunks++;
      note(r, 'C');
    } else {
      if (r->len + (at + len - start) > cap)
        return -1;
      memcpy(out + r->len, in + start, at + len - start);
      r->len += at + len - start;
      if (!inside) {
        r->plains++;
        note(r, 'p');
      }
    }
    at += len;
  }
  return 0;
}

static int read_back(const char *path, unsigned char *out, struct readback *r)
{
  FILE *f = fopen(path, "rb");
  static unsigned char file[DATA_MAX + (1u << 16)];
  size_t n;

  memset(r, 0, sizeof(*r));
  if (!f)
    return -1;
  n = fread(file, 1, sizeof(file), f);
  fclose(f);
  return packets_of(file, n, out, DATA_MAX, r, 0);
}

static uint64_t file_size(const char *path)
{
  struct stat st;
  return stat(path, &st) ? UINT64_MAX : (uint64_t)st.st_size;
}

/* ---- cases ---- */

static void roundtrip(const char *dir, unsigned char *back)
{
  struct trace_out o;
  struct readback r;
  char path[4096];
  uint64_t seed = 88172645463325252ull;
  size_t n = 1;

  snprintf(path, sizeof(path), "%s/roundtrip.pftrace", dir);
  EXPECT(trace_out_open(&o, path, TRACE_OUT_PACKETS, 1) == 0);
  data_len = 0;
  for (int i = 0; data_len + 3 * TRACE_EVENT_MAX < DATA_MAX; i++) {
    size_t before = data_len;
    char *p;
    n = n * 7 % 3000 + 1;
    /* Stretches of 600 packets: a random one fills whole buffers that deflate cannot shrink. */
    make_packet(n, (i / 600) % 3 == 1, &seed);
    p = trace_out_reserve(&o, data_len - before);
    EXPECT(p != NULL);
    if (!p)
      return;
    memcpy(p, data + before, data_len - before);
    trace_out_commit(&o, data_len - before);
    if (i % 997 == 996) {
      uint64_t bound = trace_out_size(&o);
      EXPECT(trace_out_flush(&o) == 0);
      EXPECT(file_size(path) == o.file_bytes);
      EXPECT(o.file_bytes <= bound);
      EXPECT(read_back(path, back, &r) == 0);
      EXPECT(r.len == data_len && !memcmp(back, data, data_len));
    }
  }
  EXPECT(trace_out_close(&o) == 0);
  EXPECT(read_back(path, back, &r) == 0);
  EXPECT(r.len == data_len && !memcmp(back, data, data_len));
  EXPECT(o.chunks_deflated == r.chunks && r.chunks >= 8);
  EXPECT(o.chunks_stored >= 2 && r.plains > 0);
  EXPECT(file_size(path) < data_len * 3 / 4);
}

/* Appends one compressible packet through reserve/commit; 1 if it made the buffer swap. */
static int put_packet(struct trace_out *o, uint64_t *seed, int before_swap_ready)
{
  size_t before = data_len;
  int swap;
  char *p;

  make_packet(200, 0, seed);
  swap = o->len + (data_len - before) > TRACE_OUT_BUF;
  if (swap && before_swap_ready)
    atomic_store(&writer_ready, 1);
  p = trace_out_reserve(o, data_len - before);
  EXPECT(p != NULL);
  if (!p)
    return -1;
  memcpy(p, data + before, data_len - before);
  trace_out_commit(o, data_len - before);
  return swap;
}

static void behind(const char *dir, unsigned char *back)
{
  struct trace_out o;
  struct readback r;
  char path[4096];
  uint64_t seed = 1;
  int rc;

  snprintf(path, sizeof(path), "%s/behind.pftrace", dir);
  EXPECT(trace_out_open(&o, path, TRACE_OUT_PACKETS, 1) == 0);
  atomic_store(&writer_ready, 0);
  atomic_store(&hold_first, 1);
  data_len = 0;
  /* Buffer A goes to the compressor, whose deflate is held until buffer B is full: B must
   * then be written as it is. The flush waits for B and deflates the part of C written so
   * far; the close deflates D. */
  while ((rc = put_packet(&o, &seed, 0)) == 0)
    ;
  while (rc >= 0 && (rc = put_packet(&o, &seed, 1)) == 0)
    ;
  for (int i = 0; rc >= 0 && i < 100; i++)
    rc = put_packet(&o, &seed, 0);
  EXPECT(trace_out_flush(&o) == 0);
  for (int i = 0; rc >= 0 && i < 100; i++)
    rc = put_packet(&o, &seed, 0);
  EXPECT(trace_out_close(&o) == 0);
  EXPECT(read_back(path, back, &r) == 0);
  EXPECT(r.len == data_len && !memcmp(back, data, data_len));
  EXPECT(!strcmp(r.order, "CpCC"));
  EXPECT(o.chunks_stored == 1 && o.chunks_deflated == 3);
  if (strcmp(r.order, "CpCC"))
    fprintf(stderr, "behind: chunks and plain runs in the file: %s\n", r.order);
}

/* In a child: the file size limit applies to the process, and SIGXFSZ is ignored there. */
static int failed_write_child(const char *path, unsigned char *back)
{
  struct rlimit rl = {300000 + 777, 300000 + 777};
  struct trace_out o;
  struct readback r;
  uint64_t seed = 7;
  int rc = 0;

  signal(SIGXFSZ, SIG_IGN);
  if (setrlimit(RLIMIT_FSIZE, &rl) || trace_out_open(&o, path, TRACE_OUT_PACKETS, 1))
    return 10;
  data_len = 0;
  /* Mostly incompressible: 1.5 MB handed over are far past the limit. */
  while (!rc && data_len < 1500000) {
    size_t before = data_len;
    make_packet(1000, data_len % 3, &seed);
    rc = trace_out_write(&o, data + before, data_len - before);
  }
  if (rc != -EFBIG)
    return 11;
  if (trace_out_write(&o, "x", 1) != -EFBIG || trace_out_flush(&o) != -EFBIG)
    return 13; /* sticky */
  if (trace_out_close(&o) != -EFBIG)
    return 14;
  if (file_size(path) > rl.rlim_cur)
    return 16;
  /* Cut back to the end of a whole chunk: a non-empty prefix of the packets. */
  if (read_back(path, back, &r) || !r.len || r.len > data_len || memcmp(back, data, r.len))
    return 17;
  return 0;
}

int main(int argc, char **argv)
{
  unsigned char *back;

  if (argc != 2) {
    fprintf(stderr, "usage: trace_chunks DIR\n");
    return 2;
  }
  mkdir(argv[1], 0755);
  data = malloc(DATA_MAX + TRACE_EVENT_MAX);
  back = malloc(DATA_MAX);
  if (!data || !back)
    return 2;
  roundtrip(argv[1], back);
  behind(argv[1], back);
  expect_child_ok("failed_write", failed_write_child, argv[1], "wfail.pftrace", back);
  free(data);
  free(back);
  if (failures)
    fprintf(stderr, "trace_chunks: %d check(s) failed\n", failures);
  return failures ? 1 : 0;
}
