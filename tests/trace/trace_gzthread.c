/* Checks the gzip trace output's compressor thread: flush semantics, size bound, errors, no leak.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "export/trace_internal.h"
#include "tests/lib/procstat.h"
#include "tests/trace/expect.h"

/*
 * trace_gzthread DIR: drives trace_out (the buffered, optionally deflated output under every
 * trace writer) directly with gzip on and checks:
 *   - exactly one thread "gpuprof-gz" while it is open, with the application's signals blocked,
 *     and none after trace_out_close: after a clean close, a failed open and a failed write;
 *   - trace_out_flush: when it returns, the file holds exactly the bytes handed over so far
 *     (it inflates, sync-flushed, to them) and file_bytes is its size; trace_out_size before
 *     the flush is not below that size (the size cap relies on it), with incompressible data;
 *   - the closed file gunzips to exactly what was written;
 *   - a write that fails part-way (RLIMIT_FSIZE) is reported to the writer while it writes,
 *     with -EFBIG, and the file is cut back to a sync-flushed prefix of the data.
 * Exit status 1 if a check failed.
 */

#define DATA_MAX (6u << 20)

static unsigned char *data; /* what was handed to trace_out, in order */
static size_t data_len;

/* This process's threads named "gpuprof-gz"; returns how many (first in *tid). */
static int gz_threads(pid_t *tid)
{
  return procstat_threads_named("gpuprof-gz", tid);
}

/* Whether thread tid blocks the signals an application or the agent may send or trigger. */
static int blocks_app_signals(pid_t tid)
{
  static const int sigs[] = {SIGHUP,  SIGINT,  SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE,
                             SIGALRM, SIGTERM, SIGCHLD, SIGPROF, SIGXFSZ, SIGWINCH};
  char path[64], line[256];
  unsigned long long mask = 0;
  int found = 0;
  FILE *f;

  snprintf(path, sizeof(path), "/proc/self/task/%d/status", (int)tid);
  f = fopen(path, "r");
  if (!f)
    return 0;
  while (fgets(line, sizeof(line), f))
    if (sscanf(line, "SigBlk: %llx", &mask) == 1)
      found = 1;
  fclose(f);
  if (!found)
    return 0;
  for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
    if (!(mask & (1ull << (sigs[i] - 1))))
      return 0;
  for (int s = SIGRTMIN; s <= SIGRTMAX; s++)
    if (!(mask & (1ull << (s - 1))))
      return 0;
  return 1;
}

/* Appends n bytes: incompressible (xorshift) or JSON-like text, to exercise both bounds. */
static void make(size_t n, int random, uint64_t *seed)
{
  for (size_t i = 0; i < n && data_len < DATA_MAX; i++) {
    data[data_len++] = random ? xorshift_byte(seed)
                              : (unsigned char)"{\"name\":\"kernel\",\"ts\":12345},\n"[i % 30];
  }
}

/*
 * Inflates the file at path into out (at most cap bytes). whole: it must be a complete gzip
 * stream; else it may end anywhere after a sync flush. Returns the inflated length, or -1.
 */
static long inflate_file(const char *path, unsigned char *out, size_t cap, int whole)
{
  FILE *f = fopen(path, "rb");
  static unsigned char in[1 << 16];
  z_stream z;
  long ret = -1;
  int rc = Z_OK;

  if (!f)
    return -1;
  memset(&z, 0, sizeof(z));
  if (inflateInit2(&z, 16 + 15) != Z_OK) {
    fclose(f);
    return -1;
  }
  z.next_out = out;
  z.avail_out = (uInt)cap;
  for (;;) {
    size_t n = fread(in, 1, sizeof(in), f);
    if (!n)
      break;
    z.next_in = in;
    z.avail_in = (uInt)n;
    rc = inflate(&z, Z_SYNC_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR)
      goto out;
    if (z.avail_in)
      goto out; /* data after the end, or out of room */
  }
  if (whole && rc != Z_STREAM_END)
    goto out;
  ret = (long)(cap - z.avail_out);
out:
  inflateEnd(&z);
  fclose(f);
  return ret;
}

static uint64_t file_size(const char *path)
{
  struct stat st;
  return stat(path, &st) ? UINT64_MAX : (uint64_t)st.st_size;
}

static void clean_close(const char *dir, unsigned char *back)
{
  struct trace_out o;
  char path[4096];
  uint64_t seed = 88172645463325252ull;
  pid_t tid = 0;
  size_t chunk = 1;
  long n;

  snprintf(path, sizeof(path), "%s/clean.json.gz", dir);
  EXPECT(gz_threads(NULL) == 0);
  EXPECT(trace_out_open(&o, path, TRACE_OUT_GZIP, 1) == 0);
  EXPECT(gz_threads(&tid) == 1);
  EXPECT(tid > 0 && blocks_app_signals(tid));
  data_len = 0;
  for (int i = 0; data_len + 2 * TRACE_EVENT_MAX < DATA_MAX; i++) {
    size_t before = data_len;
    chunk = chunk * 7 % TRACE_EVENT_MAX + 1;
    make(chunk, (i / 40) % 2 == 0, &seed);
    EXPECT(trace_out_write(&o, data + before, data_len - before) == 0);
    if (i % 53 == 52) {
      uint64_t bound = trace_out_size(&o);
      EXPECT(trace_out_flush(&o) == 0);
      EXPECT(file_size(path) == o.file_bytes);
      EXPECT(o.file_bytes <= bound);
      EXPECT(trace_out_size(&o) >= o.file_bytes);
      n = inflate_file(path, back, DATA_MAX, 0);
      EXPECT(n == (long)data_len && !memcmp(back, data, data_len));
    }
  }
  EXPECT(trace_out_close(&o) == 0);
  EXPECT(gz_threads(NULL) == 0);
  n = inflate_file(path, back, DATA_MAX, 1);
  EXPECT(n == (long)data_len && !memcmp(back, data, data_len));
}

static void failed_open(const char *dir)
{
  struct trace_out o;
  char path[4096];

  snprintf(path, sizeof(path), "%s/no-such-dir/x.json.gz", dir);
  EXPECT(trace_out_open(&o, path, TRACE_OUT_GZIP, 1) == -ENOENT);
  EXPECT(gz_threads(NULL) == 0);
  EXPECT(trace_out_close(&o) == -ENOENT);
  EXPECT(gz_threads(NULL) == 0);
}

/* In a child: the file size limit applies to the process, and SIGXFSZ is ignored there. */
static int failed_write_child(const char *path, unsigned char *back)
{
  struct rlimit rl = {300000 + 777, 300000 + 777};
  struct trace_out o;
  uint64_t seed = 1;
  int rc = 0;
  long n;

  signal(SIGXFSZ, SIG_IGN);
  if (setrlimit(RLIMIT_FSIZE, &rl) || trace_out_open(&o, path, TRACE_OUT_GZIP, 1))
    return 10;
  data_len = 0;
  /* Incompressible: 1.5 MB handed over are far past the limit, so the writer must have seen
   * the compressor's error by then. */
  while (!rc && data_len < 1500000) {
    size_t before = data_len;
    make(1000, 1, &seed);
    rc = trace_out_write(&o, data + before, data_len - before);
  }
  if (rc != -EFBIG)
    return 11;
  if (gz_threads(NULL) != 1)
    return 12;
  if (trace_out_write(&o, "x", 1) != -EFBIG || trace_out_flush(&o) != -EFBIG)
    return 13; /* sticky */
  if (trace_out_close(&o) != -EFBIG)
    return 14;
  if (gz_threads(NULL) != 0)
    return 15;
  if (file_size(path) > rl.rlim_cur)
    return 16;
  /* Cut back to the end of a sync-flushed buffer: a whole, non-empty prefix of the data. */
  n = inflate_file(path, back, DATA_MAX, 0);
  if (n <= 0 || (size_t)n > data_len || memcmp(back, data, (size_t)n))
    return 17;
  return 0;
}

int main(int argc, char **argv)
{
  unsigned char *back;

  if (argc != 2) {
    fprintf(stderr, "usage: trace_gzthread DIR\n");
    return 2;
  }
  mkdir(argv[1], 0755);
  data = malloc(DATA_MAX);
  back = malloc(DATA_MAX);
  if (!data || !back)
    return 2;
  clean_close(argv[1], back);
  failed_open(argv[1]);
  expect_child_ok("failed_write", failed_write_child, argv[1], "wfail.json.gz", back);
  free(data);
  free(back);
  if (failures)
    fprintf(stderr, "trace_gzthread: %d checks failed\n", failures);
  return failures ? 1 : 0;
}
