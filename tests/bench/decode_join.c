/* Benchmark: CUPTI activity records decoded and joined per second on one thread, through the
 * agent's own worker path (decode_buffer -> aggregate_event). Not a test. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cupti.h>

#include "agent/aggregate.h"
#include "agent/config.h"
#include "agent/corr.h"
#include "cupti/decode.h"
#include "cupti/loader.h"

/*
 * Usage: bench_decode_join [records] [libcupti path] [full|decode]
 *
 * Builds activity buffers the way CUPTI 13.0 fills them (CUpti_ActivityKernel10, Memcpy6 and
 * Memset4 records back to back in 4 MiB buffers, the agent's default buffer size): 80 %
 * kernels with 64 distinct ~100-character mangled names on 4 streams, 15 % copies, 5 % sets, and
 * enters the API call of every record into the correlation table beforehand, as the application
 * threads' callbacks would have. Then times decode_buffer over the buffers, with aggregate_event as
 * the per-event function, until `records` records were processed, and prints wall and thread-CPU
 * rates. Iteration uses cuptiActivityGetNextRecord from the given libcupti (default: the
 * toolkit's real one, whose record iteration works without a driver). Mode "decode" replaces
 * aggregate_event by a function that does nothing, to separate decoding (CUPTI's iteration
 * included) from joining and aggregation.
 */

#define BUFFER_BYTES (4u << 20)
#define UNIQUE_RECORDS 100000u /* distinct correlation ids: below the table size (128 Ki) */
#define KERNEL_NAMES 64
#define STREAMS 4

struct buffer {
  uint8_t *data;
  size_t valid;
};

static char names[KERNEL_NAMES][128]; /* ~100 characters, like PyTorch's mangled names */

static uint64_t clock_ns(clockid_t id)
{
  struct timespec ts;
  clock_gettime(id, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Appends one record of `size` bytes; starts a new buffer when the current one is full. */
static void *append(struct buffer *bufs, size_t *n, size_t size)
{
  struct buffer *b = &bufs[*n - 1];
  void *p;

  if (b->valid + size > BUFFER_BYTES) {
    b = &bufs[(*n)++];
    b->data = aligned_alloc(8, BUFFER_BYTES);
    if (!b->data) {
      fprintf(stderr, "bench_decode_join: out of memory\n");
      exit(1);
    }
    b->valid = 0;
  }
  p = b->data + b->valid;
  memset(p, 0, size);
  b->valid += size;
  return p;
}

static void on_event(const struct event *ev, void *arg)
{
  aggregate_event(arg, ev, NULL);
}

static void on_event_discard(const struct event *ev, void *arg)
{
  (void)ev;
  (void)arg;
}

int main(int argc, char **argv)
{
  unsigned long long target = argc > 1 ? strtoull(argv[1], NULL, 10) : 20000000ull;
  const char *lib = argc > 2 && argv[2][0] ? argv[2] : BENCH_CUPTI_LIBRARY;
  int decode_only = argc > 3 && strcmp(argv[3], "decode") == 0;
  decode_event_fn fn = decode_only ? on_event_discard : on_event;
  size_t max_bufs = UNIQUE_RECORDS * sizeof(CUpti_ActivityKernel10) / BUFFER_BYTES + 2;
  struct buffer *bufs = calloc(max_bufs, sizeof(*bufs));
  size_t nbufs = 1;
  char reason[512];
  struct corr_table *corr;
  struct aggregate *agg;
  struct decode_stats st = {0};
  uint64_t base = 1700000000000000000ull, kernels = 0, copies = 0, sets = 0, passes = 0;
  uint64_t wall0, cpu0, wall, cpu;

  if (!bufs || !(bufs[0].data = aligned_alloc(8, BUFFER_BYTES))) {
    fprintf(stderr, "bench_decode_join: out of memory\n");
    return 1;
  }
  if (cupti_loader_open_path(lib, reason, sizeof(reason)) != 0) {
    fprintf(stderr, "bench_decode_join: %s\n", reason);
    return 1;
  }
  corr = corr_table_new(CONFIG_DEFAULT_CORR_TABLE_SIZE);
  agg = corr ? aggregate_new(corr) : NULL;
  if (!agg) {
    fprintf(stderr, "bench_decode_join: cannot create the correlation table or aggregate\n");
    return 1;
  }
  for (int i = 0; i < KERNEL_NAMES; i++)
    snprintf(names[i], sizeof(names[i]),
             "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_%02dFillFunctorIfEENS_"
             "6detail5ArrayIPcLi1EEEEEviT0_T1_",
             i);

  for (uint32_t id = 1; id <= UNIQUE_RECORDS; id++) {
    uint64_t t = base + (uint64_t)id * 3000;
    unsigned mix = id % 20;
    int runtime = id % 2; /* half the calls through the runtime, half straight to the driver */
    struct corr_info info = {
        .corr_id = id,
        .tid = 1000 + id % 8,
        .domain = runtime ? CORR_DOMAIN_RUNTIME : CORR_DOMAIN_DRIVER,
        .enter_ns = t - 500,
    };

    if (mix < 16) {
      CUpti_ActivityKernel10 *r = append(bufs, &nbufs, sizeof(*r));
      r->kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
      r->start = t;
      r->end = t + 2000 + id % 997;
      r->completed = r->end;
      r->deviceId = 0;
      r->contextId = 1;
      r->streamId = 13 + id % STREAMS;
      r->gridX = 128;
      r->gridY = r->gridZ = 1;
      r->blockX = 256;
      r->blockY = r->blockZ = 1;
      r->registersPerThread = 32;
      r->correlationId = id;
      r->gridId = id;
      r->name = names[(id * 7) % KERNEL_NAMES];
      info.cbid = runtime ? CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_v13000
                          : CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel;
      info.api_name = runtime ? "__cudaLaunchKernel_v13000" : "cuLaunchKernel";
      kernels++;
    } else if (mix < 19) {
      CUpti_ActivityMemcpy6 *r = append(bufs, &nbufs, sizeof(*r));
      r->kind = CUPTI_ACTIVITY_KIND_MEMCPY;
      r->copyKind = id % 2 ? CUPTI_ACTIVITY_MEMCPY_KIND_HTOD : CUPTI_ACTIVITY_MEMCPY_KIND_DTOH;
      r->srcKind = CUPTI_ACTIVITY_MEMORY_KIND_PINNED;
      r->dstKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
      r->flags = CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC;
      r->bytes = 65536;
      r->start = t;
      r->end = t + 4000;
      r->deviceId = 0;
      r->contextId = 1;
      r->streamId = 13 + id % STREAMS;
      r->correlationId = id;
      r->runtimeCorrelationId = runtime ? id : 0;
      r->copyCount = 1;
      info.cbid = runtime ? CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020
                          : CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2;
      info.api_name = runtime ? "cudaMemcpyAsync_v3020" : "cuMemcpyHtoDAsync_v2";
      copies++;
    } else {
      CUpti_ActivityMemset4 *r = append(bufs, &nbufs, sizeof(*r));
      r->kind = CUPTI_ACTIVITY_KIND_MEMSET;
      r->value = 0;
      r->bytes = 1 << 20;
      r->start = t;
      r->end = t + 2000;
      r->deviceId = 0;
      r->contextId = 1;
      r->streamId = 13 + id % STREAMS;
      r->correlationId = id;
      r->memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
      info.cbid = runtime ? CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020
                          : CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async;
      info.api_name = runtime ? "cudaMemsetAsync_v3020" : "cuMemsetD8Async";
      sets++;
    }
    corr_table_enter(corr, &info);
    corr_table_exit(corr, id, info.enter_ns + 1000);
  }

  wall0 = clock_ns(CLOCK_MONOTONIC);
  cpu0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
  while (st.records < target) {
    for (size_t i = 0; i < nbufs; i++)
      decode_buffer(bufs[i].data, bufs[i].valid, fn, agg, &st);
    passes++;
  }
  wall = clock_ns(CLOCK_MONOTONIC) - wall0;
  cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0;

  /* The work was real: every record joined, every kernel counted. */
  aggregate_lock(agg);
  const struct agg_totals *t = aggregate_totals(agg);
  int ok = st.events == st.records &&
           (decode_only || (t->kernels == kernels * passes && t->joins_unknown == 0 &&
                            t->joins_runtime + t->joins_driver == st.records));
  aggregate_unlock(agg);
  if (!ok) {
    fprintf(stderr,
            "bench_decode_join: the aggregate does not add up (unknown joins or lost records)\n");
    return 1;
  }
  printf("mode=%s records=%llu (kernels %.0f%%, memcpy %.0f%%, memset %.0f%%) buffers=%zu x %u KiB "
         "passes=%llu\n",
         decode_only ? "decode" : "full", (unsigned long long)st.records,
         100.0 * kernels / UNIQUE_RECORDS, 100.0 * copies / UNIQUE_RECORDS,
         100.0 * sets / UNIQUE_RECORDS, nbufs, BUFFER_BYTES >> 10, (unsigned long long)passes);
  printf("wall %.3f s: %.2f M records/s (%.1f ns/record); thread CPU %.3f s: %.2f M records/s\n",
         wall / 1e9, st.records / (wall / 1e3), (double)wall / (double)st.records, cpu / 1e9,
         st.records / (cpu / 1e3));
  aggregate_free(agg);
  corr_table_free(corr);
  for (size_t i = 0; i < nbufs; i++)
    free(bufs[i].data);
  free(bufs);
  return 0;
}
