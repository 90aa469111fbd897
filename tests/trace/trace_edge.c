/* Writes edge-case traces (ties, bad UTF-8, the cap at a new track, write errors) for
 * check_edge.py. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "export/json.h"
#include "export/trace.h"
#include "export/trace_internal.h"
#include "tests/trace/expect.h"

/*
 * trace_edge OUTDIR writes, for each format F in {json, json.gz, pftrace}:
 *   OUTDIR/ties.F     slices that touch slices written before them on the same track (the
 *                     protobuf importer orders equal timestamps by file position)
 *   OUTDIR/flowties.F flow arrows to GPU slices that start with another one on their stream
 *   OUTDIR/utf8.F     names with invalid UTF-8 (surrogates, overlong forms, code points above
 *                     U+10FFFF, a cut sequence) and a name longer than the writer keeps
 *   OUTDIR/wfail.F    a writer whose write(2) fails part-way (RLIMIT_FSIZE, like a full disk)
 *   OUTDIR/tailfail.json  the same failure while the end of the file is written
 * and checks return codes itself: the size cap reached while a new track is described must
 * read as the cap (-EFBIG), not as a write error. Exit status 1 if a check failed.
 */

#define BASE 1700000000000000000ull
#define PID 4242u

static struct trace_meta meta(uint64_t cap)
{
  return (struct trace_meta){.base_ns = BASE,
                             .pid = PID,
                             .process_name = "edge",
                             .agent_version = "gpuprof test",
                             .size_cap_bytes = cap,
                             .flows = 1};
}

static struct trace_writer *open_f(const char *dir, const char *stem, int f, uint64_t cap)
{
  char path[4096];
  struct trace_meta m = meta(cap);
  struct trace_writer *w;

  snprintf(path, sizeof(path), "%s/%s%s", dir, stem, trace_format_suffix((enum trace_format)f));
  w = trace_writer_open(path, (enum trace_format)f, &m);
  if (!w) {
    fprintf(stderr, "trace_writer_open %s: %s\n", path, strerror(errno));
    exit(1);
  }
  return w;
}

/* A kernel slice on device 0; flow_id != 0 ends the flow arrow of that id. */
static int kern_flow(struct trace_writer *w, uint32_t stream, uint64_t s, uint64_t e, uint32_t corr,
                     const char *name, uint64_t flow_id)
{
  struct trace_gpu_slice g = {.kind = TRACE_GPU_KERNEL,
                              .start_ns = s,
                              .end_ns = e,
                              .device = 0,
                              .stream = stream,
                              .corr_id = corr,
                              .flow_id = flow_id,
                              .name = name};
  g.u.kernel.grid[0] = g.u.kernel.block[0] = 1;
  return trace_writer_gpu_slice(w, &g);
}

static int kern(struct trace_writer *w, uint32_t stream, uint64_t s, uint64_t e, uint32_t corr,
                const char *name)
{
  return kern_flow(w, stream, s, e, corr, name, 0);
}

/* The same, ending the flow started by the API slice with correlation id corr. */
static int flow_kern(struct trace_writer *w, uint32_t stream, uint64_t s, uint64_t e, uint32_t corr,
                     const char *name)
{
  return kern_flow(w, stream, s, e, corr, name, corr);
}

/* Each pair: the second slice is written after the first and touches it. check_edge.py
 * knows the times. */
static void ties(const char *dir, int f)
{
  struct trace_writer *w = open_f(dir, "ties", f, 0);
  uint64_t b = BASE;

  /* Stream 1: a late kernel ending where the earlier-written one starts. */
  EXPECT(kern(w, 1, b + 1000, b + 2000, 1, "r1") == 0);
  EXPECT(kern(w, 1, b + 500, b + 1000, 2, "n1") == 0);
  /* Stream 2: an empty kernel, then one starting at the same nanosecond. */
  EXPECT(kern(w, 2, b + 3000, b + 3000, 3, "z2") == 0);
  EXPECT(kern(w, 2, b + 3000, b + 4000, 4, "n2") == 0);
  /* Stream 3: two kernels starting together, the longer one written second. */
  EXPECT(kern(w, 3, b + 5000, b + 6000, 5, "r3") == 0);
  EXPECT(kern(w, 3, b + 5000, b + 7000, 6, "n3") == 0);
  /* A host thread: a late call ending where the earlier-written one starts. */
  EXPECT(trace_writer_api_slice(w, PID, "apiR", b + 9000, b + 9500, 7, 0) == 0);
  EXPECT(trace_writer_api_slice(w, PID, "apiN", b + 8000, b + 9000, 8, 0) == 0);
  EXPECT(trace_writer_close(w) == 0);
}

/* Flow arrows next to slices that start in the same nanosecond on one track: Perfetto's JSON
 * importer binds an arrow's end to the topmost slice open at its place in the sorted stream,
 * where a longer slice sorts before a shorter one. check_edge.py knows the times. */
static void flowties(const char *dir, int f)
{
  struct trace_writer *w = open_f(dir, "flowties", f, 0);
  uint64_t b = BASE;

  for (uint32_t i = 1; i <= 6; i++)
    EXPECT(trace_writer_api_slice(w, PID, "cudaLaunchKernel", b + i * 100, b + i * 100 + 50, i,
                                  i) == 0);
  /* Stream 1: a shorter kernel written after a longer one that starts with it. */
  EXPECT(flow_kern(w, 1, b + 10000, b + 11000, 1, "long1") == 0);
  EXPECT(flow_kern(w, 1, b + 10000, b + 10500, 2, "short1") == 0);
  /* Stream 2: the same with an empty kernel. */
  EXPECT(flow_kern(w, 2, b + 20000, b + 21000, 3, "long2") == 0);
  EXPECT(flow_kern(w, 2, b + 20000, b + 20000, 4, "empty2") == 0);
  /* Stream 3: two kernels with the same span. */
  EXPECT(flow_kern(w, 3, b + 30000, b + 31000, 5, "same3a") == 0);
  EXPECT(flow_kern(w, 3, b + 30000, b + 31000, 6, "same3b") == 0);
  EXPECT(trace_writer_close(w) == 0);
}

static void utf8(const char *dir, int f)
{
  struct trace_writer *w = open_f(dir, "utf8", f, 0);
  static char longname[10000];
  uint64_t b = BASE;

  /* 4095 ASCII bytes and then a 2-byte character: the writer keeps 4096 bytes, which cuts it. */
  memset(longname, 'x', sizeof(longname) - 1);
  memcpy(longname + 4095, "\xc3\xa9", 2);
  EXPECT(kern(w, 1, b + 1000, b + 2000, 1, "sur\xed\xa0\x80g") == 0);
  EXPECT(kern(w, 1, b + 3000, b + 4000, 2, "over\xe0\x80\xaflong") == 0);
  EXPECT(kern(w, 1, b + 5000, b + 6000, 3, "big\xf4\x90\x80\x80") == 0);
  EXPECT(kern(w, 1, b + 7000, b + 8000, 4, "cut\xe2\x82") == 0);
  EXPECT(kern(w, 1, b + 9000, b + 10000, 5, "ok\xe2\x82\xac\xf0\x9f\x98\x80\x7f\x01") == 0);
  EXPECT(kern(w, 1, b + 11000, b + 12000, 6, longname) == 0);
  EXPECT(trace_writer_thread_name(w, PID, "th\xed\xbf\xbf") == 0);
  EXPECT(trace_writer_api_slice(w, PID, "cudaLaunchKernel", b + 100, b + 200, 7, 0) == 0);
  EXPECT(trace_writer_close(w) == 0);
}

/* A track the writer cannot hold (a device past TRACE_MAX_DEVICES) refuses its event as
 * invalid (-EINVAL, counted), not as a full disk: a capture goes on with the other tracks. */
static void refused_track(const char *dir, int f)
{
  struct trace_writer *w = open_f(dir, "refused", f, 0);
  struct trace_gpu_slice g = {.kind = TRACE_GPU_KERNEL,
                              .start_ns = BASE + 1000,
                              .end_ns = BASE + 2000,
                              .device = 64,
                              .stream = 7,
                              .corr_id = 1,
                              .name = "k"};
  struct trace_stats st;

  EXPECT(trace_writer_gpu_slice(w, &g) == -EINVAL);
  EXPECT(trace_writer_sync(w, 64, 7, "cudaStreamSynchronize", BASE + 1000, BASE + 3000, 2) ==
         -EINVAL);
  EXPECT(trace_writer_memory(w, 64, BASE + 1000, 4096) == -EINVAL);
  EXPECT(trace_writer_device(w, 64, "GPU 64") == -EINVAL);
  EXPECT(kern(w, 1, BASE + 4000, BASE + 5000, 3, "after") == 0);
  trace_writer_stats(w, &st);
  EXPECT(st.invalid == 3);
  EXPECT(st.events >= 1);
  EXPECT(trace_writer_close(w) == 0);
}

/* Sort ranks of stream tracks are int32 in both encodings (TrackDescriptor's
 * sibling_order_rank): each stream's sync lanes right below it in lane order, huge stream ids
 * clamped, context-wide waits last; lane tids distinct from streams' and from each other. */
static void stream_ranks(void)
{
  EXPECT(trace_stream_rank(7, 0) == 7 * 256);
  EXPECT(trace_stream_rank(7, 1) == 7 * 256 + 1);
  EXPECT(trace_stream_rank(7, 1 + TRACE_SYNC_LANES - 1) == 7 * 256 + 255);
  EXPECT(trace_stream_rank(8, 0) == 8 * 256);
  EXPECT(trace_stream_rank(0x40000000u, 0) == 0x7ffffe00);
  EXPECT(trace_stream_rank(0xfffffffeu, 1) == 0x7ffffe01);
  EXPECT(trace_stream_rank(UINT32_MAX, 1) == 0x7fffff00);
  EXPECT(trace_stream_rank(UINT32_MAX, TRACE_SYNC_LANES) == 0x7ffffffe);
  EXPECT(trace_sync_tid(7, 0) == 0x80000007u);
  EXPECT(trace_sync_tid(7, 1) == 0x80400007u);
  EXPECT(trace_sync_tid(7, TRACE_SYNC_LANES - 1) == 0xbf800007u);
  EXPECT(trace_sync_tid(UINT32_MAX, 0) == UINT32_MAX);
  EXPECT(trace_sync_tid(UINT32_MAX, 2) == UINT32_MAX - 2);
}

/* The cap reached while a new track is being described: -EFBIG like any other event. Runs
 * with padding of 0..63 bytes so that the cap falls on the describing event in some runs. */
static void cap_at_new_track(const char *dir, int f)
{
  static char name[4001];
  char stem[64];

  memset(name, 'n', sizeof(name) - 1);
  for (int pad = 0; pad < 64; pad++) {
    struct trace_writer *w;
    struct trace_stats st;
    int rc = 0;

    snprintf(stem, sizeof(stem), "capnew-%d", pad);
    w = open_f(dir, stem, f, 2 * 96 * 1024);
    EXPECT(trace_writer_api_slice(w, PID, name + sizeof(name) - 1 - pad * 13, BASE, BASE + 1, 1,
                                  0) == 0);
    /* New threads, each with a long name (its describing event), until the cap. */
    for (uint32_t tid = 1; tid < 100000 && !rc; tid++)
      rc = trace_writer_thread_name(w, tid, name + pad);
    EXPECT(rc == -EFBIG);
    EXPECT(trace_writer_api_slice(w, 200000, "cudaLaunchKernel", BASE + 10, BASE + 20, 2, 0) ==
           -EFBIG);
    trace_writer_stats(w, &st);
    EXPECT(st.stopped);
    EXPECT(trace_writer_close(w) == 0);
  }
  /* And with events on new tracks only: whichever of the two events meets the cap. */
  for (int pad = 0; pad < 64; pad++) {
    struct trace_writer *w;
    int rc = 0;

    snprintf(stem, sizeof(stem), "capnew2-%d", pad);
    w = open_f(dir, stem, f, 2 * 96 * 1024);
    EXPECT(trace_writer_api_slice(w, PID, name + sizeof(name) - 1 - pad * 13, BASE, BASE + 1, 1,
                                  0) == 0);
    for (uint32_t s = 1; s < 1000000 && !rc; s++)
      rc = f == 1 ? kern(w, s, BASE + s * 10, BASE + s * 10 + 5, s, name + 3000)
                  : trace_writer_api_slice(w, s, "cudaLaunchKernel", BASE + s * 10,
                                           BASE + s * 10 + 5, s, 0);
    EXPECT(rc == -EFBIG);
    EXPECT(trace_writer_close(w) == 0);
  }
}

/* A child whose file may grow to `limit` bytes only: write(2) then writes part of a buffer
 * and fails (EFBIG here, ENOSPC on a full disk). It writes events until one fails (or
 * `events` of them, then limits the file at close), and expects the close to fail unless
 * close_ok. */
static void write_fails(const char *dir, const char *stem, int f, rlim_t limit, int events,
                        int at_close, int close_ok)
{
  pid_t child;
  int status;

  fflush(NULL);
  child = fork();
  if (child == 0) {
    struct trace_writer *w = open_f(dir, stem, f, 0);
    struct rlimit rl = {limit, limit};
    int rc = 0;

    signal(SIGXFSZ, SIG_IGN);
    if (!at_close && setrlimit(RLIMIT_FSIZE, &rl))
      _exit(3);
    for (int i = 0; i < events && !rc; i++) {
      uint64_t t = BASE + (uint64_t)i * 1000;
      rc = trace_writer_api_slice(w, PID, "cudaLaunchKernel", t, t + 100, (uint32_t)i + 1,
                                  (uint64_t)i + 1);
      if (!rc)
        rc = kern(w, 7, t + 200, t + 900, (uint32_t)i + 1, "_Z6kernelPf");
    }
    if (at_close && setrlimit(RLIMIT_FSIZE, &rl))
      _exit(3);
    if (!at_close && rc >= 0)
      _exit(4); /* the limit was never reached */
    /* The close reports the error; what is in the file stays loadable. */
    rc = trace_writer_close(w);
    _exit(close_ok ? (rc == 0 ? 0 : 6) : (rc < 0 ? 0 : 5));
  }
  EXPECT(child > 0);
  EXPECT(waitpid(child, &status, 0) == child);
  EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static int to_buf(void *ctx, const char *data, size_t len)
{
  strncat(ctx, data, len);
  return 0;
}

/* The summary's JSON writer (export/json.c) replaces invalid UTF-8 like the trace writer. */
static void json_writer_utf8(void)
{
  static const char expected[] = "[\"sur???g\",\"over???long\",\"big????\",\"caf? latin1\","
                                 "\"cut??\",\"ok\xe2\x82\xac\xf0\x9f\x98\x80\\\"\"]";
  static char out[512];
  struct json_writer *jw = json_writer_new(to_buf, out, JSON_COMPACT);

  EXPECT(jw != NULL);
  if (!jw)
    return;
  json_writer_begin_array(jw);
  json_writer_string(jw, "sur\xed\xa0\x80g");
  json_writer_string(jw, "over\xe0\x80\xaflong");
  json_writer_string(jw, "big\xf4\x90\x80\x80");
  json_writer_string(jw, "caf\xe9 latin1");
  json_writer_string(jw, "cut\xe2\x82");
  json_writer_string(jw, "ok\xe2\x82\xac\xf0\x9f\x98\x80\"");
  json_writer_end_array(jw);
  EXPECT(json_writer_finish(jw) == 0);
  json_writer_free(jw);
  if (strcmp(out, expected)) {
    fprintf(stderr, "json writer wrote %s\n", out);
    failures++;
  }
}

int main(int argc, char **argv)
{
  char path[4096];
  FILE *fp;

  if (argc != 2) {
    fprintf(stderr, "usage: trace_edge OUTDIR\n");
    return 2;
  }
  json_writer_utf8();
  stream_ranks();
  for (int f = TRACE_FORMAT_JSON; f <= TRACE_FORMAT_PERFETTO; f++) {
    ties(argv[1], f);
    flowties(argv[1], f);
    utf8(argv[1], f);
    cap_at_new_track(argv[1], f);
    refused_track(argv[1], f);
    write_fails(argv[1], "wfail", f, 300000 + 777, 1000000, 0, 0);
  }

  /* The end of a JSON file fails to be written: first the full file, to learn where its end
   * starts, then the same events with the file limited to a few bytes past that point. */
  write_fails(argv[1], "tailfull", 0, 1 << 30, 3000, 1, 1);
  snprintf(path, sizeof(path), "%s/tailfull.json", argv[1]);
  fp = fopen(path, "rb");
  EXPECT(fp != NULL);
  if (fp) {
    static char buf[4 << 20];
    size_t n = fread(buf, 1, sizeof(buf), fp);
    char *tail = memmem(buf, n, "\n],\"metadata\"", 13);
    fclose(fp);
    EXPECT(tail != NULL);
    if (tail)
      write_fails(argv[1], "tailfail", 0, (rlim_t)(tail - buf) + 20, 3000, 1, 0);
  }
  if (failures)
    fprintf(stderr, "trace_edge: %d checks failed\n", failures);
  return failures ? 1 : 0;
}
