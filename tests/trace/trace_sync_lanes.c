/* Writes overlapping synchronization waits (many threads syncing one stream) for
 * check_sync_lanes.py. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export/trace.h"
#include "tests/trace/expect.h"

/*
 * trace_sync_lanes OUTDIR writes OUTDIR/syncs.{json,json.gz,pftrace} and OUTDIR/syncs.log, one
 * JSON line per sync submitted: device, stream, name, start, end, correlation and whether the
 * writer must keep its times exactly ("exact": 0 only past the lane limit, where it clamps).
 * The waits, in the order CUPTI delivers them (at completion):
 *   - 24 threads syncing stream 7 together: starts 10 ns apart, ends within 2 ns of each other
 *     (some equal), written in end order;
 *   - a wait contained in another one of stream 7 (another thread's: it must not nest);
 *   - 100 back-to-back waits of one thread on stream 7 (they share its first track);
 *   - a late record, older than 100 records written after it;
 *   - 3 overlapping cudaDeviceSynchronize (context-wide) on device 1;
 *   - 260 waits on stream 9 that all overlap: past the lane limit (255) they are clamped.
 */

#define BASE 1700000000000000000ull
#define PID 4242u

static FILE *logf;
static struct trace_writer *ws[3];
static uint32_t next_corr = 1;

static void sync_all(uint32_t device, uint32_t stream, const char *name, uint64_t s, uint64_t e,
                     int exact)
{
  uint32_t corr = next_corr++;

  for (int f = TRACE_FORMAT_JSON; f <= TRACE_FORMAT_PERFETTO; f++)
    EXPECT(trace_writer_sync(ws[f], device, stream, name, BASE + s, BASE + e, corr) == 0);
  fprintf(logf,
          "{\"device\":%u,\"stream\":%u,\"name\":\"%s\",\"start\":%llu,\"end\":%llu,"
          "\"corr\":%u,\"exact\":%d}\n",
          device, stream, name, (unsigned long long)s, (unsigned long long)e, corr, exact);
}

int main(int argc, char **argv)
{
  struct trace_meta m = {.base_ns = BASE,
                         .pid = PID,
                         .process_name = "sync lanes",
                         .agent_version = "gpuprof test",
                         .flows = 1};
  char path[4096];
  struct trace_stats st;
  int order[24];

  if (argc != 2) {
    fprintf(stderr, "usage: trace_sync_lanes OUTDIR\n");
    return 2;
  }
  snprintf(path, sizeof(path), "%s/syncs.log", argv[1]);
  logf = fopen(path, "w");
  if (!logf) {
    fprintf(stderr, "%s: %s\n", path, strerror(errno));
    return 1;
  }
  for (int f = TRACE_FORMAT_JSON; f <= TRACE_FORMAT_PERFETTO; f++) {
    snprintf(path, sizeof(path), "%s/syncs%s", argv[1], trace_format_suffix((enum trace_format)f));
    ws[f] = trace_writer_open(path, (enum trace_format)f, &m);
    if (!ws[f]) {
      fprintf(stderr, "trace_writer_open %s: %s\n", path, strerror(errno));
      return 1;
    }
    EXPECT(trace_writer_device(ws[f], 0, "Sim A") == 0);
    EXPECT(trace_writer_device(ws[f], 1, "Sim B") == 0);
  }

  /* Thread i waits from 1000 + 10 i to 50000 + i % 3: in end order (ties by start). */
  for (int k = 0; k < 3; k++)
    for (int i = k; i < 24; i += 3)
      order[k * 8 + i / 3] = i;
  for (int j = 0; j < 24; j++)
    sync_all(0, 7, "cudaStreamSynchronize", 1000 + 10 * (uint64_t)order[j],
             50000 + (uint64_t)(order[j] % 3), 1);
  /* Contained: another thread's event wait inside a stream wait. */
  sync_all(0, 7, "cudaStreamSynchronize", 60000, 70000, 1);
  sync_all(0, 7, "cudaEventSynchronize", 61000, 65000, 1);
  /* One thread's back-to-back waits, then a late record from before them. */
  for (uint64_t k = 0; k < 100; k++)
    sync_all(0, 7, "cudaStreamSynchronize", 100000 + 100 * k, 100000 + 100 * k + 50, 1);
  sync_all(0, 7, "cudaStreamSynchronize", 80000, 90000, 1);
  /* Context-wide waits on device 1. */
  sync_all(1, UINT32_MAX, "cudaDeviceSynchronize", 5000, 9000, 1);
  sync_all(1, UINT32_MAX, "cudaDeviceSynchronize", 6000, 9000, 1);
  sync_all(1, UINT32_MAX, "cudaDeviceSynchronize", 4000, 8000, 1);
  /* 260 at once on stream 9: the first 255 get a track each, the rest are clamped. */
  for (uint64_t i = 0; i < 260; i++)
    sync_all(0, 9, "cudaStreamSynchronize", 300000 + i, 400000 + i, i < 255);

  for (int f = TRACE_FORMAT_JSON; f <= TRACE_FORMAT_PERFETTO; f++) {
    trace_writer_stats(ws[f], &st);
    EXPECT(st.invalid == 0);
    EXPECT(st.clamped == 5);
    fprintf(logf, "{\"stats\":\"%s\",\"clamped\":%llu}\n",
            trace_format_suffix((enum trace_format)f), (unsigned long long)st.clamped);
    EXPECT(trace_writer_close(ws[f]) == 0);
  }
  if (fclose(logf) != 0)
    failures++;
  return failures ? 1 : 0;
}
