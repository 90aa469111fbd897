/* Writes a known set of events through the trace writer in every format, for check_traces.py. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "export/trace.h"
#include "tests/trace/expect.h"

/*
 * trace_fixture OUTDIR writes, for each format F in {json, json.gz, pftrace}:
 *   OUTDIR/fixture.F   2 GPUs, 3 streams, 2 host threads, kernels with known names and times,
 *                      memcpys both ways and peer-to-peer, a memset, syncs, memory counters,
 *                      overlapping kernels on one stream (clamped), an API call that starts
 *                      before the base (clamped) and one invalid call (refused)
 *   OUTDIR/capped.F    the same start, then kernels until a 256 KiB size cap stops the writer
 *   OUTDIR/killed.F    a child process writes ~2 MB of events and is SIGKILLed before close
 * and OUTDIR/fixture.json.log: what was submitted (one JSON object per line) and each
 * writer's stats, which the checker compares with what the files contain.
 */

#define BASE 1700000000000000000ull /* epoch ns: too large for a double to hold in µs */
#define PID 4242u
#define NKERNELS 40

static FILE *logf; /* NULL except for the first format */

static const char *const kernel_names[] = {"_Z10sgemm_128x64PfS_S_i", "elementwise_add",
                                           "reduce<float, 256>", "weird\"name\\with\tctl",
                                           "k\xc3\xa9rnel_utf8"};

struct stream_ref {
  uint32_t device, stream;
};
static const struct stream_ref streams[3] = {{0, 7}, {0, 13}, {1, 7}};

static void log_api(uint32_t tid, const char *name, uint64_t s, uint64_t e, uint32_t corr,
                    uint64_t flow, int rc)
{
  if (logf)
    fprintf(logf,
            "{\"type\":\"api\",\"tid\":%u,\"name\":\"%s\",\"start\":%" PRIu64 ",\"end\":%" PRIu64
            ",\"corr\":%u,\"flow\":%" PRIu64 ",\"rc\":%d}\n",
            tid, name, s, e, corr, flow, rc);
}

static void log_gpu(const struct trace_gpu_slice *g, int rc)
{
  if (!logf)
    return;
  fprintf(logf,
          "{\"type\":\"gpu\",\"kind\":%d,\"device\":%u,\"stream\":%u,\"start\":%" PRIu64
          ",\"end\":%" PRIu64 ",\"corr\":%u,\"flow\":%" PRIu64 ",\"graph_id\":%u,\"rc\":%d",
          (int)g->kind, g->device, g->stream, g->start_ns, g->end_ns, g->corr_id, g->flow_id,
          g->graph_id, rc);
  if (g->kind == TRACE_GPU_KERNEL) {
    fprintf(logf,
            ",\"grid\":[%d,%d,%d],\"block\":[%d,%d,%d],\"registers\":%u,"
            "\"shared_mem\":%u",
            g->u.kernel.grid[0], g->u.kernel.grid[1], g->u.kernel.grid[2], g->u.kernel.block[0],
            g->u.kernel.block[1], g->u.kernel.block[2], g->u.kernel.registers_per_thread,
            g->u.kernel.static_smem + g->u.kernel.dynamic_smem);
    for (size_t i = 0; i < sizeof(kernel_names) / sizeof(kernel_names[0]); i++)
      if (g->name == kernel_names[i])
        fprintf(logf, ",\"kernel\":%zu", i);
  } else if (g->kind == TRACE_GPU_MEMCPY) {
    fprintf(logf, ",\"bytes\":%" PRIu64 ",\"copy_kind\":%u,\"src_kind\":%u,\"dst_kind\":%u",
            g->u.memcpy.bytes, g->u.memcpy.copy_kind, g->u.memcpy.src_kind, g->u.memcpy.dst_kind);
  } else {
    fprintf(logf, ",\"bytes\":%" PRIu64, g->u.memset.bytes);
  }
  fprintf(logf, "}\n");
}

static int api(struct trace_writer *w, uint32_t tid, const char *name, uint64_t s, uint64_t e,
               uint32_t corr, uint64_t flow)
{
  int rc = trace_writer_api_slice(w, tid, name, s, e, corr, flow);
  log_api(tid, name, s, e, corr, flow, rc);
  return rc;
}

/* NVTX: kind "range" (thread track), "mark", "span" (lane of the NVTX start/end track). */
static void log_nvtx(const char *kind, uint32_t tid, const char *domain, const char *name,
                     uint64_t s, uint64_t e, uint32_t lane, uint32_t end_tid, int rc)
{
  if (logf)
    fprintf(logf,
            "{\"type\":\"nvtx\",\"kind\":\"%s\",\"tid\":%u,\"domain\":\"%s\",\"name\":\"%s\","
            "\"start\":%" PRIu64 ",\"end\":%" PRIu64 ",\"lane\":%u,\"end_tid\":%u,\"rc\":%d}\n",
            kind, tid, domain ? domain : "", name, s, e, lane, end_tid, rc);
}

static void nvtx_range(struct trace_writer *w, uint32_t tid, const char *domain, const char *name,
                       uint64_t s, uint64_t e)
{
  int rc = trace_writer_nvtx_range(w, tid, domain, name, s, e);
  EXPECT(rc == 0);
  log_nvtx("range", tid, domain, name, s, e, 0, 0, rc);
}

static void nvtx_span(struct trace_writer *w, const char *domain, const char *name, uint64_t s,
                      uint64_t e, uint32_t lane, uint32_t start_tid, uint32_t end_tid)
{
  int rc = trace_writer_nvtx_span(w, domain, name, s, e, start_tid, end_tid);
  EXPECT(rc == 0);
  log_nvtx("span", start_tid, domain, name, s, e, lane, end_tid, rc);
}

static int gpu(struct trace_writer *w, const struct trace_gpu_slice *g)
{
  int rc = trace_writer_gpu_slice(w, g);
  log_gpu(g, rc);
  return rc;
}

static struct trace_gpu_slice kernel(uint32_t si, uint64_t s, uint64_t e, uint32_t corr,
                                     unsigned name)
{
  struct trace_gpu_slice g = {.kind = TRACE_GPU_KERNEL,
                              .start_ns = s,
                              .end_ns = e,
                              .device = streams[si].device,
                              .stream = streams[si].stream,
                              .corr_id = corr,
                              .flow_id = corr,
                              .name = kernel_names[name % 5]};
  g.u.kernel.grid[0] = 80 + (int)name;
  g.u.kernel.grid[1] = 2;
  g.u.kernel.grid[2] = 1;
  g.u.kernel.block[0] = 256;
  g.u.kernel.block[1] = 1;
  g.u.kernel.block[2] = 1;
  g.u.kernel.registers_per_thread = 32 + name % 5;
  /* Kernels 3, 15, 27 and 39 use no shared memory (JSON leaves the argument out). */
  g.u.kernel.static_smem = name % 4 == 3 ? 0 : 1024;
  g.u.kernel.dynamic_smem = 512 * (name % 3);
  return g;
}

/* The fixed content. Times are offsets from BASE chosen so that only the pairs meant to
 * overlap do. */
static void feed(struct trace_writer *w)
{
  uint64_t t = BASE + 1000;
  uint32_t corr = 100;
  struct trace_gpu_slice g;
  int rc;

  EXPECT(trace_writer_device(w, 0, "NVIDIA H100 80GB HBM3") == 0);
  EXPECT(trace_writer_device(w, 1, "NVIDIA A100-SXM4-40GB") == 0);
  EXPECT(trace_writer_thread_name(w, PID, "main") == 0);
  EXPECT(trace_writer_thread_name(w, PID + 1, "worker") == 0);

  /* Kernels: launch on alternating threads, run 20 µs later on one of three streams. */
  for (int i = 0; i < NKERNELS; i++) {
    uint64_t s = t + (uint64_t)i * 10000 + 123, e = s + 3456 + (uint64_t)i;
    uint32_t tid = PID + (uint32_t)(i % 2);
    EXPECT(api(w, tid, "cudaLaunchKernel", s, e, corr, corr) == 0);
    g = kernel((uint32_t)(i % 3), s + 20000 + 7, s + 20000 + 5000 + (uint64_t)i * 7, corr,
               (unsigned)i);
    EXPECT(gpu(w, &g) == 0);
    corr++;
  }

  /* Copies and a memset on device 0 stream 13, after the kernels there. */
  t = BASE + 1000000;
  struct trace_gpu_slice c = {.kind = TRACE_GPU_MEMCPY,
                              .start_ns = t + 2000,
                              .end_ns = t + 2000 + 40000,
                              .device = 0,
                              .stream = 13,
                              .corr_id = corr,
                              .flow_id = corr};
  c.u.memcpy.bytes = 1 << 20;
  c.u.memcpy.copy_kind = 1; /* HtoD */
  c.u.memcpy.src_kind = 2;  /* pinned */
  c.u.memcpy.dst_kind = 3;  /* device */
  c.u.memcpy.src_device = c.u.memcpy.dst_device = 0;
  EXPECT(api(w, PID, "cudaMemcpyAsync", t, t + 1500, corr, corr) == 0);
  EXPECT(gpu(w, &c) == 0);
  corr++;

  c.start_ns = t + 50000;
  c.end_ns = t + 50000 + 20000;
  c.corr_id = c.flow_id = corr;
  c.u.memcpy.bytes = 512 * 1024;
  c.u.memcpy.copy_kind = 2; /* DtoH, synchronous: the API call spans the copy */
  c.u.memcpy.src_kind = 3;  /* device */
  c.u.memcpy.dst_kind = 1;  /* pageable */
  EXPECT(api(w, PID + 1, "cudaMemcpy", t + 49000, t + 71000, corr, corr) == 0);
  EXPECT(gpu(w, &c) == 0);
  corr++;

  c.start_ns = t + 80000;
  c.end_ns = t + 80000 + 10000;
  c.corr_id = c.flow_id = corr;
  c.u.memcpy.bytes = 4 << 20;
  c.u.memcpy.copy_kind = 10;                     /* PtoP */
  c.u.memcpy.src_kind = c.u.memcpy.dst_kind = 0; /* unknown: not written */
  c.u.memcpy.src_device = 0;
  c.u.memcpy.dst_device = 1;
  EXPECT(api(w, PID, "cudaMemcpyPeerAsync", t + 79000, t + 79500, corr, corr) == 0);
  EXPECT(gpu(w, &c) == 0);
  corr++;

  struct trace_gpu_slice m = {.kind = TRACE_GPU_MEMSET,
                              .start_ns = t + 95000,
                              .end_ns = t + 95000 + 1000,
                              .device = 0,
                              .stream = 13,
                              .corr_id = corr,
                              .flow_id = corr,
                              .graph_id = 3,
                              .graph_node_id = 17};
  m.u.memset.bytes = 65536;
  m.u.memset.value = 0;
  EXPECT(api(w, PID, "cudaMemsetAsync", t + 94000, t + 94400, corr, corr) == 0);
  EXPECT(gpu(w, &m) == 0);
  corr++;

  /* A synchronous copy whose driver call (inner) completes before the runtime call (outer):
   * nested on the worker thread, no clamp. */
  EXPECT(api(w, PID + 1, "cuMemcpyDtoH_v2", t + 120100, t + 128000, corr + 1000, 0) == 0);
  EXPECT(api(w, PID + 1, "cudaMemcpy", t + 120000, t + 130000, corr + 1001, 0) == 0);

  /* Syncs: a stream wait on device 0 stream 7 and a context-wide one on device 1. */
  EXPECT(trace_writer_sync(w, 0, 7, "cudaStreamSynchronize", t + 140000, t + 150000, corr) == 0);
  if (logf)
    fprintf(logf, "{\"type\":\"sync\",\"device\":0,\"stream\":7,\"start\":%llu,\"end\":%llu}\n",
            (unsigned long long)(t + 140000), (unsigned long long)(t + 150000));
  EXPECT(trace_writer_sync(w, 1, UINT32_MAX, "cudaDeviceSynchronize", t + 140000, t + 160000,
                           corr + 1) == 0);
  if (logf)
    fprintf(logf,
            "{\"type\":\"sync\",\"device\":1,\"stream\":4294967295,\"start\":%llu,\"end\":%llu}\n",
            (unsigned long long)(t + 140000), (unsigned long long)(t + 160000));
  corr += 2;

  /* Overlaps on device 1 stream 7: B starts 1 µs before A ends (start moved to A's end), C
   * arrives late, starts before A and ends inside it (end moved to A's start). */
  t = BASE + 2000000;
  g = kernel(2, t, t + 10000, corr, 1);
  EXPECT(api(w, PID, "cudaLaunchKernel", t - 5000, t - 4000, corr, corr) == 0);
  EXPECT(gpu(w, &g) == 0);
  corr++;
  g = kernel(2, t + 9000, t + 20000, corr, 2);
  EXPECT(api(w, PID, "cudaLaunchKernel", t - 3900, t - 3000, corr, corr) == 0);
  EXPECT(gpu(w, &g) == 0);
  corr++;
  g = kernel(2, t - 2000, t + 3000, corr, 0);
  EXPECT(api(w, PID, "cudaLaunchKernel", t - 2900, t - 2500, corr, corr) == 0);
  EXPECT(gpu(w, &g) == 0);
  corr++;

  /* NVTX on the main thread, after the rest of its slices: a range in domain NCCL around a
   * launch, written before the default-domain range that contains both (any order nests);
   * a mark; start/end ranges where the second overlaps the first (lane 2) and the third
   * fits on lane 1 again once the first has ended. */
  t = BASE + 2500000;
  EXPECT(api(w, PID, "cuLaunchKernelEx", t + 1000, t + 2000, 7000, 0) == 0);
  nvtx_range(w, PID, "NCCL", "ncclAllReduce", t, t + 5000);
  nvtx_range(w, PID, NULL, "step", t - 1000, t + 8000);
  EXPECT(trace_writer_nvtx_mark(w, PID, "NCCL", "nccl_mark", t + 6000) == 0);
  log_nvtx("mark", PID, "NCCL", "nccl_mark", t + 6000, t + 6000, 0, 0, 0);
  nvtx_span(w, NULL, "span_a", t + 10000, t + 13000, 0, PID, PID + 1);
  nvtx_span(w, "NCCL", "span_b", t + 11000, t + 15000, 1, PID + 1, PID + 1);
  nvtx_span(w, NULL, "span_c", t + 14000, t + 16000, 0, PID, PID);

  /* Starts before the base: clamped to it. Ends before it starts: refused. */
  EXPECT(api(w, PID + 1, "cudaGetDevice", BASE - 500, BASE + 500, 9000, 0) == 0);
  rc = trace_writer_api_slice(w, PID, "cudaBroken", BASE + 10, BASE + 5, 9001, 0);
  EXPECT(rc == -EINVAL);

  /* GPU memory in use. */
  static const uint64_t mem0[] = {1 << 20, 3 << 20, 2 << 20}, mem1[] = {4 << 20, 0};
  for (int i = 0; i < 3; i++) {
    EXPECT(trace_writer_memory(w, 0, BASE + 5000 + (uint64_t)i * 100000, mem0[i]) == 0);
    if (logf)
      fprintf(logf, "{\"type\":\"memory\",\"device\":0,\"ts\":%llu,\"bytes\":%llu}\n",
              (unsigned long long)(BASE + 5000 + (uint64_t)i * 100000),
              (unsigned long long)mem0[i]);
  }
  for (int i = 0; i < 2; i++) {
    EXPECT(trace_writer_memory(w, 1, BASE + 7000 + (uint64_t)i * 100000, mem1[i]) == 0);
    if (logf)
      fprintf(logf, "{\"type\":\"memory\",\"device\":1,\"ts\":%llu,\"bytes\":%llu}\n",
              (unsigned long long)(BASE + 7000 + (uint64_t)i * 100000),
              (unsigned long long)mem1[i]);
  }

  EXPECT(trace_writer_meta_uint(w, "dropped_records", 3) == 0);
  EXPECT(trace_writer_meta_uint(w, "capture_end_ns", BASE + 3000000) == 0);
  EXPECT(trace_writer_meta_string(w, "capture_trigger", "test") == 0);
  EXPECT(trace_writer_meta_uint(w, "Bad-Key", 1) == -EINVAL);
}

static struct trace_meta meta(uint64_t cap)
{
  return (struct trace_meta){.base_ns = BASE,
                             .pid = PID,
                             .process_name = "fixture (4242)",
                             .command_line = "trace_fixture --known \"events\"",
                             .hostname = "testhost",
                             .agent_version = "gpuprof test",
                             .size_cap_bytes = cap,
                             .flows = 1};
}

static void log_stats(FILE *f, const char *file, const struct trace_stats *st, int close_rc)
{
  fprintf(f,
          "{\"type\":\"stats\",\"file\":\"%s\",\"events\":%" PRIu64 ",\"clamped\":%" PRIu64
          ",\"discarded\":%" PRIu64 ",\"invalid\":%" PRIu64 ",\"stopped\":%d,\"close\":%d}\n",
          file, st->events, st->clamped, st->discarded, st->invalid, st->stopped, close_rc);
}

/* Many kernels on one stream after the fixed content, until the cap stops the writer. */
static void flood(struct trace_writer *w, int count, int expect_stop)
{
  uint64_t t = BASE + 4000000;
  int rc = 0, i;

  for (i = 0; i < count; i++) {
    struct trace_gpu_slice g = kernel(0, t + (uint64_t)i * 2000, t + (uint64_t)i * 2000 + 1500,
                                      (uint32_t)(100000 + i), (unsigned)i);
    rc = trace_writer_api_slice(w, PID, "cudaLaunchKernel", t + (uint64_t)i * 2000 - 900,
                                t + (uint64_t)i * 2000 - 100, (uint32_t)(100000 + i),
                                (uint64_t)(100000 + i));
    if (rc)
      break;
    rc = trace_writer_gpu_slice(w, &g);
    if (rc)
      break;
  }
  if (expect_stop) {
    EXPECT(rc == -EFBIG);
    /* Stays stopped. */
    EXPECT(trace_writer_api_slice(w, PID, "late", t, t + 1, 1, 0) == -EFBIG);
  } else {
    EXPECT(rc == 0);
  }
}

int main(int argc, char **argv)
{
  char path[4096], logpath[4096];
  FILE *stats;

  if (argc != 2) {
    fprintf(stderr, "usage: trace_fixture OUTDIR\n");
    return 2;
  }
  snprintf(logpath, sizeof(logpath), "%s/fixture.log", argv[1]);
  stats = fopen(logpath, "w");
  if (!stats) {
    perror(logpath);
    return 1;
  }

  for (int f = TRACE_FORMAT_JSON; f <= TRACE_FORMAT_PERFETTO; f++) {
    struct trace_meta m = meta(0);
    struct trace_stats st;
    struct trace_writer *w;
    int rc;

    snprintf(path, sizeof(path), "%s/fixture%s", argv[1],
             trace_format_suffix((enum trace_format)f));
    w = trace_writer_open(path, (enum trace_format)f, &m);
    if (!w) {
      fprintf(stderr, "trace_writer_open %s: %s\n", path, strerror(errno));
      return 1;
    }
    logf = f == 0 ? stats : NULL;
    feed(w);
    logf = NULL;
    trace_writer_stats(w, &st);
    EXPECT(st.clamped == 3);
    EXPECT(st.invalid == 1);
    EXPECT(!st.stopped);
    rc = trace_writer_close(w);
    EXPECT(rc == 0);
    log_stats(stats, path, &st, rc);
  }

  /* Size cap. */
  for (int f = TRACE_FORMAT_JSON; f <= TRACE_FORMAT_PERFETTO; f++) {
    struct trace_meta m = meta(256 * 1024);
    struct trace_stats st;
    struct trace_writer *w;
    int rc;

    snprintf(path, sizeof(path), "%s/capped%s", argv[1], trace_format_suffix((enum trace_format)f));
    w = trace_writer_open(path, (enum trace_format)f, &m);
    if (!w) {
      fprintf(stderr, "trace_writer_open %s: %s\n", path, strerror(errno));
      return 1;
    }
    feed(w);
    /* gzip JSON compresses ~10x: it needs many more events to reach the cap. */
    flood(w, f == 1 ? 400000 : 40000, 1);
    trace_writer_stats(w, &st);
    EXPECT(st.stopped);
    EXPECT(st.discarded >= 2);
    rc = trace_writer_close(w);
    EXPECT(rc == 0);
    log_stats(stats, path, &st, rc);
  }

  /* Killed before close: a child writes and SIGKILLs itself. */
  for (int f = TRACE_FORMAT_JSON; f <= TRACE_FORMAT_PERFETTO; f++) {
    pid_t child;
    int status;

    snprintf(path, sizeof(path), "%s/killed%s", argv[1], trace_format_suffix((enum trace_format)f));
    fflush(NULL);
    child = fork();
    if (child == 0) {
      struct trace_meta m = meta(0);
      struct trace_writer *w = trace_writer_open(path, (enum trace_format)f, &m);
      if (!w)
        _exit(3);
      feed(w);
      flood(w, f == 1 ? 100000 : 10000, 0);
      kill(getpid(), SIGKILL);
      _exit(4);
    }
    EXPECT(child > 0);
    EXPECT(waitpid(child, &status, 0) == child);
    EXPECT(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  }

  fclose(stats);
  if (failures)
    fprintf(stderr, "trace_fixture: %d checks failed\n", failures);
  return failures ? 1 : 0;
}
