/* Writes the trace shapes the fixture lacks, in every format, for check_readback.py. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "export/trace.h"

/*
 * tr_write_edge OUTDIR writes OUTDIR/edge.{json,json.gz,pftrace}, the same events in each:
 * NCCL ops (finished and grouped, pending launched, pending never launched), sync lanes of a
 * stream and of the context, a renamed thread and an unnamed one, an unnamed GPU, names cut at
 * the writer's bound or with invalid UTF-8 (metadata strings too), a zero correlation id, a
 * negative grid, records older than the last one of their track (absolute timestamps in the
 * protobuf), and no process name. check_readback.py compares what trace_read gives for them.
 */

#define BASE 1700000000000000000ull
#define PID 4242u

static int failures;

static void expect(int ok, const char *what)
{
  if (!ok) {
    fprintf(stderr, "tr_write_edge: %s failed\n", what);
    failures++;
  }
}

static void nccl(struct trace_writer *w, uint64_t s, uint64_t e, uint32_t corr, const char *state,
                 uint32_t group_ops)
{
  struct trace_nccl_slice n = {.start_ns = BASE + s,
                               .end_ns = BASE + e,
                               .device = 0,
                               .comm_hash = 0xfeedface12345678ull,
                               .comm_label = "tp",
                               .rank = 1,
                               .nranks = 2,
                               .func = "AllReduce",
                               .datatype = "ncclBfloat16",
                               .algo = state ? "" : "RING",
                               .proto = state ? "" : "LL",
                               .count = 1024,
                               .bytes = 2048,
                               .root = -1,
                               .peer = state ? -1 : 0,
                               .seq = state && !corr ? UINT64_MAX : 12,
                               .nchannels = state ? 0 : 4,
                               .stream = state ? UINT32_MAX : 5,
                               .corr_id = corr,
                               .group_ops = group_ops,
                               .kernel_ns = group_ops > 1 ? 900 : 0,
                               .state = state,
                               .posted_ns = state ? BASE + s - 10 : 0};

  expect(trace_writer_nccl_slice(w, &n) == 0, "nccl slice");
}

static void kernel(struct trace_writer *w, uint32_t stream, uint64_t s, uint64_t e, uint32_t corr,
                   const char *name, int32_t grid0)
{
  struct trace_gpu_slice g = {.kind = TRACE_GPU_KERNEL,
                              .start_ns = BASE + s,
                              .end_ns = BASE + e,
                              .device = 0,
                              .stream = stream,
                              .corr_id = corr,
                              .name = name};

  g.u.kernel.grid[0] = grid0;
  g.u.kernel.grid[1] = g.u.kernel.grid[2] = 1;
  g.u.kernel.block[0] = 1024;
  g.u.kernel.block[1] = g.u.kernel.block[2] = 1;
  g.u.kernel.registers_per_thread = 255;
  expect(trace_writer_gpu_slice(w, &g) == 0, name);
}

static void feed(struct trace_writer *w)
{
  static char long_name[5000];
  struct trace_gpu_slice c = {.kind = TRACE_GPU_MEMCPY,
                              .start_ns = BASE + 70000,
                              .end_ns = BASE + 70007,
                              .device = 2,
                              .stream = 1,
                              .corr_id = 0};

  /* Longer than TRACE_NAME_MAX, with a 2-byte character across the cut. */
  memset(long_name, 'x', sizeof(long_name) - 1);
  memcpy(long_name + 4095, "\xc3\xa9", 2);

  expect(trace_writer_device(w, 0, "Sim\xff GPU") == 0, "device 0");
  expect(trace_writer_thread_name(w, PID, "main") == 0, "thread name");
  expect(trace_writer_api_slice(w, PID, "cudaFree", BASE + 100, BASE + 200, 0, 0) == 0, "api 0");
  expect(trace_writer_thread_name(w, PID, "renamed w\xc3(") == 0, "thread rename");
  expect(trace_writer_api_slice(w, PID + 2, "", BASE + 300, BASE + 400, 5, 0) == 0, "unnamed");

  kernel(w, 5, 5000, 6000, 10, long_name, -1);
  kernel(w, 5, 1000, 2000, 11, "bad\xffname\x01", 7); /* late: before the last one */
  kernel(w, 5, 7000, 7500, 12, "ok", 0x7fffffff);
  nccl(w, 10000, 12000, 40, NULL, 3);
  nccl(w, 20000, 30000, 41, "launched, not finished", 1);
  nccl(w, 20001, 29999, 0, "not launched", 1);

  /* Two waits on stream 3 at once, two context-wide ones: second lanes. */
  expect(trace_writer_sync(w, 0, 3, "cudaStreamSynchronize", BASE + 40000, BASE + 50000, 20) == 0,
         "sync");
  expect(trace_writer_sync(w, 0, 3, "cudaStreamSynchronize", BASE + 41000, BASE + 50000, 21) == 0,
         "sync lane 2");
  expect(trace_writer_sync(w, 0, UINT32_MAX, "cudaDeviceSynchronize", BASE + 40000, BASE + 45000,
                           22) == 0,
         "context sync");
  expect(trace_writer_sync(w, 0, UINT32_MAX, "cudaDeviceSynchronize", BASE + 42000, BASE + 46000,
                           23) == 0,
         "context sync lane 2");

  /* An unnamed GPU: a 3-byte copy in 7 ns (0.428 GB/s). */
  c.u.memcpy.bytes = 3;
  c.u.memcpy.copy_kind = 8;
  expect(trace_writer_gpu_slice(w, &c) == 0, "copy on an unnamed GPU");

  expect(trace_writer_nvtx_range(w, PID, "dom\376ain", "r\xe2\x82", BASE + 500, BASE + 900) == 0,
         "nvtx range");
  expect(trace_writer_nvtx_mark(w, PID, NULL, "mark", BASE + 950) == 0, "nvtx mark");
  expect(trace_writer_memory(w, 0, BASE + 9000, 4096) == 0, "memory");
  expect(trace_writer_memory(w, 0, BASE + 8000, 8192) == 0, "memory, late");

  expect(trace_writer_meta_string(w, "note", "v\xfe") == 0, "meta string");
  expect(trace_writer_meta_uint(w, "big", UINT64_MAX) == 0, "meta uint");
}

int main(int argc, char **argv)
{
  struct trace_meta m = {.base_ns = BASE,
                         .pid = PID,
                         .hostname = "h\xc3\xa9st\xff",
                         .agent_version = "gpuprof test",
                         .flows = 1};
  char path[4096];

  if (argc != 2) {
    fprintf(stderr, "usage: tr_write_edge OUTDIR\n");
    return 2;
  }
  for (int f = TRACE_FORMAT_JSON; f <= TRACE_FORMAT_PERFETTO; f++) {
    struct trace_writer *w;

    snprintf(path, sizeof(path), "%s/edge%s", argv[1], trace_format_suffix((enum trace_format)f));
    w = trace_writer_open(path, (enum trace_format)f, &m);
    if (!w) {
      fprintf(stderr, "tr_write_edge: %s: %s\n", path, strerror(errno));
      return 1;
    }
    feed(w);
    expect(trace_writer_close(w) == 0, "close");
  }
  return failures ? 1 : 0;
}
