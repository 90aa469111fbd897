/* Writes kernels and launches that exercise the protobuf writer's cached packet parts, for
 * check_pf_parts.py. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export/trace.h"
#include "tests/trace/expect.h"

/*
 * trace_pf_parts OUTDIR writes OUTDIR/parts.pftrace and OUTDIR/parts.log, one JSON line per
 * slice written: kind, track (stream or thread), name, start, end (ns after BASE), correlation,
 * and for kernels the launch configuration and graph id. export/perfetto.c assembles a slice
 * from cached parts (sequence, END, and TrackEvent constant bytes per category, name and
 * launch string) and falls back to whole messages for the rest; this mixes both:
 *   - 700 kernel names x 5 launch configurations over 4 streams, more distinct (name, launch)
 *     pairs than the parts cache holds, in an order that evicts and refills it; then the first
 *     600 kernels again (same pairs: cache hits after evictions);
 *   - each kernel launched by an API call on one of two threads, alternating two API names,
 *     with a flow from the call to the kernel;
 *   - every 37th kernel of a stream written after the next one (a late record: its BEGIN and
 *     END have absolute timestamps), every 53rd enclosing the previous kernel of its stream
 *     (BEGIN absolute, END a delta), every 29th a graph kernel (a whole message).
 */

#define BASE 1700000000000000000ull
#define PID 4242u
#define NAMES 700
#define FIRST 3500
#define AGAIN 600

static FILE *logf;
static struct trace_writer *w;
static char names[NAMES][48];

struct stream_state {
  uint64_t t; /* the end of the stream's last kernel, ns after BASE */
  int n;      /* kernels written on it */
};

static void kernel(uint32_t stream, int name, int cfg, uint64_t s, uint64_t e, uint32_t corr,
                   uint32_t flow, uint32_t graph)
{
  struct trace_gpu_slice g = {.kind = TRACE_GPU_KERNEL,
                              .start_ns = BASE + s,
                              .end_ns = BASE + e,
                              .device = 0,
                              .stream = stream,
                              .corr_id = corr,
                              .flow_id = flow,
                              .graph_id = graph,
                              .graph_node_id = graph ? corr : 0,
                              .name = names[name]};

  g.u.kernel.grid[0] = 32 << cfg;
  g.u.kernel.grid[1] = 1 + cfg % 2;
  g.u.kernel.grid[2] = 1;
  g.u.kernel.block[0] = 64 << (cfg % 3);
  g.u.kernel.block[1] = g.u.kernel.block[2] = 1;
  g.u.kernel.registers_per_thread = 32 + (uint32_t)cfg;
  g.u.kernel.static_smem = (uint32_t)cfg * 1024;
  g.u.kernel.dynamic_smem = 0;
  EXPECT(trace_writer_gpu_slice(w, &g) == 0);
  fprintf(
      logf,
      "{\"kind\":\"kernel\",\"stream\":%u,\"name\":\"%s\",\"start\":%llu,\"end\":%llu,"
      "\"corr\":%u,\"flow\":%u,\"graph\":%u,\"grid\":[%d,%d,%d],\"block\":[%d,%d,%d],\"regs\":%u,"
      "\"smem\":%u}\n",
      stream, names[name], (unsigned long long)s, (unsigned long long)e, corr, flow, graph,
      g.u.kernel.grid[0], g.u.kernel.grid[1], g.u.kernel.grid[2], g.u.kernel.block[0],
      g.u.kernel.block[1], g.u.kernel.block[2], g.u.kernel.registers_per_thread,
      g.u.kernel.static_smem);
}

static void launch(uint32_t tid, uint64_t s, uint32_t corr, uint32_t flow)
{
  const char *name = corr % 2 ? "cudaLaunchKernel" : "cuLaunchKernel";

  EXPECT(trace_writer_api_slice(w, tid, name, BASE + s, BASE + s + 300, corr, flow) == 0);
  fprintf(logf,
          "{\"kind\":\"api\",\"tid\":%u,\"name\":\"%s\",\"start\":%llu,\"end\":%llu,"
          "\"corr\":%u,\"flow\":%u}\n",
          tid, name, (unsigned long long)s, (unsigned long long)s + 300, corr, flow);
}

int main(int argc, char **argv)
{
  struct trace_meta m = {.base_ns = BASE,
                         .pid = PID,
                         .process_name = "pf parts",
                         .agent_version = "gpuprof test",
                         .flows = 1};
  struct stream_state st[4] = {{0}};
  uint64_t host = 0;
  uint32_t corr = 0;
  char path[4096];

  if (argc != 2) {
    fprintf(stderr, "usage: trace_pf_parts OUTDIR\n");
    return 2;
  }
  for (int i = 0; i < NAMES; i++)
    snprintf(names[i], sizeof(names[i]), "_Z13pf_kernel_%03dPfS_i", i);
  snprintf(path, sizeof(path), "%s/parts.log", argv[1]);
  logf = fopen(path, "w");
  if (!logf) {
    perror(path);
    return 1;
  }
  snprintf(path, sizeof(path), "%s/parts.pftrace", argv[1]);
  w = trace_writer_open(path, TRACE_FORMAT_PERFETTO, &m);
  if (!w) {
    perror(path);
    return 1;
  }
  for (int i = 0; i < FIRST + AGAIN; i++) {
    int k = i < FIRST ? i : i - FIRST;
    int name = (k * 37) % NAMES, cfg = (k / 3) % 5;
    uint32_t si = (uint32_t)k & 3, stream = 7 + si;
    struct stream_state *q = &st[si];
    uint64_t s = q->t + 1000, e = s + 400 + (uint64_t)(k % 11) * 7;

    host += 500;
    if (s < host + 1000) {
      s = host + 1000;
      e = s + 400 + (uint64_t)(k % 11) * 7;
    }
    q->n++;
    ++corr;
    /* The enclosing kernel may start before its launch: no flow there (an arrow back in time). */
    launch(1000 + si % 2, host, corr, q->n % 37 && q->n % 53 == 0 ? 0 : corr);
    if (q->n % 37 == 0) {
      /* Late: the stream's next kernel is written first, this one lands in the gap. */
      uint32_t late = corr;
      uint64_t s2 = e + 1000, e2 = s2 + 500;
      host += 500;
      ++corr;
      launch(1000 + si % 2, host, corr, corr);
      kernel(stream, (name + 1) % NAMES, cfg, s2, e2, corr, corr, 0);
      kernel(stream, name, cfg, s, e, late, late, 0);
      q->t = e2;
      q->n++;
    } else if (q->n % 53 == 0) {
      /* Encloses the stream's previous kernel (a slice on the track that starts before the
       * incremental clock and ends after it). */
      kernel(stream, name, cfg, q->t - 900, q->t + 10, corr, 0, 0);
      q->t += 10;
    } else {
      kernel(stream, name, cfg, s, e, corr, corr, q->n % 29 == 0 ? 5 : 0);
      q->t = e;
    }
  }
  EXPECT(trace_writer_close(w) == 0);
  EXPECT(fclose(logf) == 0);
  return failures ? 1 : 0;
}
