/* Benchmark of the trace writers: events per second (writer CPU and wall) and bytes per kernel. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "export/trace.h"

/*
 * bench_trace [--events N] [--dir DIR] [--format json|json.gz|pftrace|pftrace-plain]
 *             [--rate R] [--keep]
 *
 * For each format, writes N kernels (realistic mangled names from a set of 64, launch
 * configurations from a set of 16, 4 streams on 2 GPUs) and N launch API calls with flows,
 * the shape of a small-kernel storm, and reports:
 *   events/s   writer calls per second of the calling thread's CPU time (one API slice or one
 *              kernel = one call; flows are part of the calls); json.gz deflates on a second
 *              thread, whose CPU this does not count
 *   wall ev/s  the same calls per second of wall-clock time, open to close included: what the
 *              agent's worker can sustain when the compressor keeps up
 *   B/kernel   file bytes divided by the number of kernels, for a kernels-only run (GPU-only
 *              capture: no API slices, no flows) and for the full run (per kernel + its launch)
 *   chunks     pftrace: 256 KiB chunks of packets written deflated / as they were (when the
 *              compressor was still busy with the previous one), the last two not counted
 * pftrace deflates its chunks on a second thread; pftrace-plain writes the packets as they are.
 * --rate R paces the calls to R per second of wall-clock time (sleeping between batches, which
 * the thread's CPU time does not count), as records arrive from an application: at full speed
 * the writer outruns the compressor and stores about every other chunk.
 * Numbers go to docs/PERFORMANCE.md; nothing here is asserted. --keep leaves the files in DIR
 * (bench_trace_kernels.F, bench_trace_launch.F), to compare the content of two builds: it is
 * deterministic but for the clock snapshot taken at open.
 */

static double cpu_seconds(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double wall_seconds(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static char names[64][160];

static void make_names(void)
{
  static const char *const stems[] = {"sgemm_128x64_nn",
                                      "ampere_fp16_s16816gemm_fp16_256x128",
                                      "vectorized_elementwise_kernel",
                                      "reduce_kernel",
                                      "softmax_warp_forward",
                                      "layer_norm_kernel",
                                      "flash_fwd_kernel",
                                      "indexSelectLargeIndex"};
  for (int i = 0; i < 64; i++)
    snprintf(names[i], sizeof(names[i]), "_ZN2at6native%zu%s%dILi%dEEEvPfS_i", strlen(stems[i % 8]),
             stems[i % 8], i, 4 << (i % 4));
}

struct result {
  double events_per_s;
  double wall_events_per_s;
  double bytes_per_kernel;
  uint64_t bytes;
  uint64_t chunks_deflated, chunks_stored;
};

/* Sleeps until `calls` calls at `rate` per second past w0 are due. */
static void pace(double w0, long calls, double rate)
{
  double due = w0 + (double)calls / rate, now = wall_seconds();

  if (due > now) {
    struct timespec ts = {(time_t)(due - now),
                          (long)((due - now - (double)(time_t)(due - now)) * 1e9)};
    nanosleep(&ts, NULL);
  }
}

static int run(enum trace_format fmt, int plain, const char *path, long n, int with_api,
               double rate, struct result *r)
{
  struct trace_meta meta = {.base_ns = 1700000000000000000ull,
                            .pid = 1234,
                            .process_name = "bench",
                            .agent_version = "gpuprof bench",
                            .flows = with_api,
                            .pftrace_plain = plain};
  struct trace_stats ts;
  struct trace_writer *w = trace_writer_open(path, fmt, &meta);
  uint64_t t = meta.base_ns + 1000;
  uint64_t stream_end[4] = {0};
  long calls = 0;
  double c0, w0 = wall_seconds();
  struct stat st;

  if (!w) {
    fprintf(stderr, "bench_trace: %s: %s\n", path, strerror(errno));
    return -1;
  }
  trace_writer_device(w, 0, "NVIDIA H100 80GB HBM3");
  trace_writer_device(w, 1, "NVIDIA H100 80GB HBM3");
  c0 = cpu_seconds();
  for (long i = 0; i < n; i++) {
    uint32_t corr = (uint32_t)i + 1, si = (uint32_t)(i & 3);
    uint64_t api_s = t + (uint64_t)i * 2500, launch_end = api_s + 1800 + (uint64_t)(i % 7) * 13;
    struct trace_gpu_slice g = {.kind = TRACE_GPU_KERNEL,
                                .device = si >> 1,
                                .stream = 7 + (si & 1) * 6,
                                .corr_id = corr,
                                .flow_id = with_api ? corr : 0,
                                .name = names[i % 64]};
    uint64_t ks = api_s + 30000 + (uint64_t)(i % 13) * 17;
    if (ks < stream_end[si])
      ks = stream_end[si];
    g.start_ns = ks;
    g.end_ns = ks + 4000 + (uint64_t)(i % 97) * 31;
    stream_end[si] = g.end_ns;
    g.u.kernel.grid[0] = 64 << (i % 4);
    g.u.kernel.grid[1] = 1 + (int)(i % 4 / 2);
    g.u.kernel.grid[2] = 1;
    g.u.kernel.block[0] = 128 << (i % 2);
    g.u.kernel.block[1] = g.u.kernel.block[2] = 1;
    g.u.kernel.registers_per_thread = 64;
    g.u.kernel.static_smem = 0;
    g.u.kernel.dynamic_smem = (uint32_t)(i % 2) * 49152;
    if (with_api) {
      trace_writer_api_slice(w, 1234 + (uint32_t)(i & 1), "cudaLaunchKernel", api_s, launch_end,
                             corr, corr);
      calls++;
    }
    trace_writer_gpu_slice(w, &g);
    calls++;
    if (rate > 0 && !(i & 1023))
      pace(w0, calls, rate);
  }
  trace_writer_stats(w, &ts);
  r->chunks_deflated = ts.chunks_deflated;
  r->chunks_stored = ts.chunks_stored;
  trace_writer_close(w);
  r->events_per_s = (double)calls / (cpu_seconds() - c0);
  r->wall_events_per_s = (double)calls / (wall_seconds() - w0);
  if (stat(path, &st))
    return -1;
  r->bytes = (uint64_t)st.st_size;
  r->bytes_per_kernel = (double)st.st_size / (double)n;
  return 0;
}

int main(int argc, char **argv)
{
  long n = 1000000;
  const char *dir = "/tmp", *only = NULL;
  int keep = 0;
  double rate = 0;
  static const struct {
    enum trace_format fmt;
    int plain;
    const char *name, *suffix;
  } fmts[] = {{TRACE_FORMAT_JSON, 0, "json", "json"},
              {TRACE_FORMAT_JSON_GZ, 0, "json.gz", "json.gz"},
              {TRACE_FORMAT_PERFETTO, 0, "pftrace", "pftrace"},
              {TRACE_FORMAT_PERFETTO, 1, "pftrace-plain", "plain.pftrace"}};

  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--events") && i + 1 < argc)
      n = atol(argv[++i]);
    else if (!strcmp(argv[i], "--dir") && i + 1 < argc)
      dir = argv[++i];
    else if (!strcmp(argv[i], "--format") && i + 1 < argc)
      only = argv[++i];
    else if (!strcmp(argv[i], "--rate") && i + 1 < argc)
      rate = atof(argv[++i]);
    else if (!strcmp(argv[i], "--keep"))
      keep = 1;
    else {
      fprintf(stderr, "usage: bench_trace [--events N] [--dir DIR] [--format F] [--rate R] "
                      "[--keep]\n");
      return 2;
    }
  }
  make_names();
  printf("%-13s %-13s %14s %12s %9s %12s %9s\n", "format", "content", "events/s/core", "wall ev/s",
         "B/kernel", "file bytes", "chunks");
  for (size_t f = 0; f < sizeof(fmts) / sizeof(fmts[0]); f++) {
    if (only && strcmp(only, fmts[f].name))
      continue;
    for (int with_api = 0; with_api < 2; with_api++) {
      char path[4096];
      struct result r;
      if (keep)
        snprintf(path, sizeof(path), "%s/bench_trace_%s.%s", dir, with_api ? "launch" : "kernels",
                 fmts[f].suffix);
      else
        snprintf(path, sizeof(path), "%s/bench_trace_%d.%s", dir, (int)getpid(), fmts[f].suffix);
      if (run(fmts[f].fmt, fmts[f].plain, path, n, with_api, rate, &r))
        return 1;
      printf("%-13s %-13s %14.0f %12.0f %9.1f %12" PRIu64 " %4" PRIu64 "/%-4" PRIu64 "\n",
             fmts[f].name, with_api ? "kernel+launch" : "kernels", r.events_per_s,
             r.wall_events_per_s, r.bytes_per_kernel, r.bytes, r.chunks_deflated, r.chunks_stored);
      if (!keep)
        unlink(path);
    }
  }
  return 0;
}
