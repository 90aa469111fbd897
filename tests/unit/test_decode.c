/* Unit tests of record decoding (cupti/decode.c), iterated by the real libcupti 13.0. */
#include <errno.h>
#include <stdalign.h>

#include "agent/event.h"
#include "cupti/decode.h"
#include "cupti/loader.h"
#include "unit.h"

#define MAX_EVENTS 32

static struct event events[MAX_EVENTS];
static int n_events;

static void collect(const struct event *ev, void *arg)
{
  (void)arg;
  if (n_events < MAX_EVENTS)
    events[n_events++] = *ev;
}

static alignas(8) uint8_t buffer[8192];
static size_t used;

static void *append(size_t size)
{
  void *p = buffer + used;
  used += size;
  return p;
}

static const char kernel_name[] = "_Z6addOnePfi";

static void build_buffer(int trailing_garbage)
{
  CUpti_ActivityKernel10 *k;
  CUpti_ActivityMemcpy6 *c;
  CUpti_ActivityMemcpyPtoP4 *p;
  CUpti_ActivityMemset4 *s;
  CUpti_ActivityMemory4 *m;
  CUpti_ActivityDevice5 *d;
  CUpti_ActivityOverhead3 *o;
  CUpti_ActivityContext3 *ctx;

  memset(buffer, 0, sizeof(buffer));
  used = 0;

  k = append(sizeof(*k));
  k->kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k->start = 1000;
  k->end = 3000;
  k->deviceId = 1;
  k->contextId = 2;
  k->streamId = 13;
  k->correlationId = 77;
  k->gridX = 4;
  k->gridY = 2;
  k->gridZ = 1;
  k->blockX = 256;
  k->blockY = 1;
  k->blockZ = 1;
  k->registersPerThread = 32;
  k->staticSharedMemory = 1024;
  k->dynamicSharedMemory = 2048;
  k->graphId = 5;
  k->graphNodeId = 6;
  k->name = kernel_name;

  c = append(sizeof(*c));
  c->kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  c->copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
  c->srcKind = CUPTI_ACTIVITY_MEMORY_KIND_PINNED;
  c->dstKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  c->flags = CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC;
  c->bytes = 4096;
  c->start = 4000;
  c->end = 5200;
  c->deviceId = 1;
  c->contextId = 2;
  c->streamId = 13;
  c->correlationId = 80;
  c->runtimeCorrelationId = 79;
  c->copyCount = 0;

  p = append(sizeof(*p));
  p->kind = CUPTI_ACTIVITY_KIND_MEMCPY2;
  p->copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_PTOP;
  p->bytes = 1 << 20;
  p->start = 6000;
  p->end = 7000;
  p->deviceId = 0;
  p->srcDeviceId = 0;
  p->dstDeviceId = 1;
  p->correlationId = 81;

  s = append(sizeof(*s));
  s->kind = CUPTI_ACTIVITY_KIND_MEMSET;
  s->value = 0xab;
  s->bytes = 1024;
  s->start = 8000;
  s->end = 8800;
  s->deviceId = 1;
  s->correlationId = 82;

  m = append(sizeof(*m));
  m->kind = CUPTI_ACTIVITY_KIND_MEMORY2;
  m->memoryOperationType = CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION;
  m->memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  m->correlationId = 83;
  m->address = 0x7f0000000000;
  m->bytes = 8192;
  m->timestamp = 9000;
  m->deviceId = 1;
  m->isAsync = 1;
  m->memoryPoolConfig.memoryPoolType = CUPTI_ACTIVITY_MEMORY_POOL_TYPE_LOCAL;
  m->memoryPoolConfig.address = 0x7e0000000000;
  m->memoryPoolConfig.pool.size = 1 << 24;

  /* Client-owned heap memory: decode must free it (ASan/LSan would report otherwise). */
  d = append(sizeof(*d));
  d->kind = CUPTI_ACTIVITY_KIND_DEVICE;
  d->id = 1;
  d->name = strdup("NVIDIA H100 80GB HBM3");
  d->globalMemorySize = 80ull << 30;
  d->computeCapabilityMajor = 9;

  o = append(sizeof(*o));
  o->kind = CUPTI_ACTIVITY_KIND_OVERHEAD;
  o->overheadKind = CUPTI_ACTIVITY_OVERHEAD_CUPTI_BUFFER_FLUSH;
  o->start = 10;
  o->end = 20;
  o->overheadData = malloc(16);

  ctx = append(sizeof(*ctx));
  ctx->kind = CUPTI_ACTIVITY_KIND_CONTEXT;
  ctx->contextId = 2;
  ctx->deviceId = 1;

  /* A kernel CUPTI could not time. */
  k = append(sizeof(*k));
  k->kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k->correlationId = 90;
  k->name = kernel_name;

  if (trailing_garbage) {
    uint32_t *bad = append(64);
    *bad = 999; /* not a kind: CUPTI cannot size it, the rest is unreadable */
    k = append(sizeof(*k));
    k->kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    k->name = kernel_name;
  }
}

static void test_all_kinds(void)
{
  struct decode_stats st = {0};

  build_buffer(0);
  n_events = 0;
  decode_buffer(buffer, used, collect, NULL, &st);
  CHECK_EQ(st.records, 9);
  CHECK_EQ(st.events, 9);
  CHECK_EQ(st.zero_timestamps, 1);
  CHECK_EQ(st.invalid_records, 0);
  CHECK_EQ(n_events, 9);

  struct event *e = &events[0];
  CHECK_EQ(e->kind, EVENT_KERNEL);
  CHECK_EQ(e->start_ns, 1000);
  CHECK_EQ(e->end_ns, 3000);
  CHECK_EQ(e->device, 1);
  CHECK_EQ(e->context, 2);
  CHECK_EQ(e->stream, 13);
  CHECK_EQ(e->corr_id, 77);
  CHECK_EQ(e->graph_id, 5);
  CHECK_EQ(e->graph_node_id, 6);
  CHECK(e->u.kernel.name == kernel_name); /* borrowed, never copied or freed here */
  CHECK_EQ(e->u.kernel.grid[0], 4);
  CHECK_EQ(e->u.kernel.grid[1], 2);
  CHECK_EQ(e->u.kernel.block[0], 256);
  CHECK_EQ(e->u.kernel.registers_per_thread, 32);
  CHECK_EQ(e->u.kernel.static_smem, 1024);
  CHECK_EQ(e->u.kernel.dynamic_smem, 2048);
  CHECK_EQ(e->flags & EVENT_F_NO_TIMING, 0);

  e = &events[1];
  CHECK_EQ(e->kind, EVENT_MEMCPY);
  CHECK_EQ(e->u.memcpy.copy_kind, EVENT_COPY_HTOD);
  CHECK_EQ(e->u.memcpy.bytes, 4096);
  CHECK_EQ(e->u.memcpy.src_kind, CUPTI_ACTIVITY_MEMORY_KIND_PINNED);
  CHECK_EQ(e->corr_id, 80);
  CHECK_EQ(e->runtime_corr_id, 79);
  CHECK_EQ(e->u.memcpy.copy_count, 1);
  CHECK(e->flags & EVENT_F_ASYNC);

  e = &events[2];
  CHECK_EQ(e->kind, EVENT_MEMCPY);
  CHECK(e->flags & EVENT_F_PEER);
  CHECK_EQ(e->u.memcpy.copy_kind, EVENT_COPY_PTOP);
  CHECK_EQ(e->u.memcpy.src_device, 0);
  CHECK_EQ(e->u.memcpy.dst_device, 1);
  CHECK_EQ(e->u.memcpy.bytes, 1 << 20);

  e = &events[3];
  CHECK_EQ(e->kind, EVENT_MEMSET);
  CHECK_EQ(e->u.memset.bytes, 1024);
  CHECK_EQ(e->u.memset.value, 0xab);
  CHECK_EQ(e->corr_id, 82);

  e = &events[4];
  CHECK_EQ(e->kind, EVENT_MEMORY);
  CHECK_EQ(e->u.memory.op, EVENT_MEMORY_ALLOCATION);
  CHECK_EQ(e->u.memory.address, 0x7f0000000000);
  CHECK_EQ(e->u.memory.bytes, 8192);
  CHECK_EQ(e->start_ns, 9000);
  CHECK_EQ(e->u.memory.pool_address, 0x7e0000000000);
  CHECK_EQ(e->u.memory.pool_size, 1 << 24);
  CHECK(e->flags & EVENT_F_ASYNC);

  e = &events[5];
  CHECK_EQ(e->kind, EVENT_DEVICE);
  CHECK_STR(e->u.device.name, "NVIDIA H100 80GB HBM3");
  CHECK_EQ(e->u.device.global_memory_bytes, 80ull << 30);
  CHECK(
      ((CUpti_ActivityDevice5 *)(buffer + sizeof(CUpti_ActivityKernel10) +
                                 sizeof(CUpti_ActivityMemcpy6) + sizeof(CUpti_ActivityMemcpyPtoP4) +
                                 sizeof(CUpti_ActivityMemset4) + sizeof(CUpti_ActivityMemory4)))
          ->name == NULL);

  CHECK_EQ(events[6].kind, EVENT_OVERHEAD);
  CHECK_EQ(events[6].u.overhead.overhead_kind, CUPTI_ACTIVITY_OVERHEAD_CUPTI_BUFFER_FLUSH);
  CHECK_EQ(events[7].kind, EVENT_CONTEXT);
  CHECK_EQ(events[7].device, 1);
  CHECK_EQ(events[7].context, 2);

  CHECK_EQ(events[8].kind, EVENT_KERNEL);
  CHECK(events[8].flags & EVENT_F_NO_TIMING);
}

static void test_invalid_kind_and_truncation(void)
{
  struct decode_stats st = {0};

  build_buffer(1);
  n_events = 0;
  decode_buffer(buffer, used, collect, NULL, &st);
  CHECK_EQ(st.records, 9); /* the kernel after the garbage is unreachable */
  CHECK_EQ(st.invalid_records, 1);

  /* A buffer whose last record is cut off: CUPTI stops before it, not an error. */
  memset(&st, 0, sizeof(st));
  build_buffer(0);
  n_events = 0;
  decode_buffer(buffer, sizeof(CUpti_ActivityKernel10) + 40, collect, NULL, &st);
  CHECK_EQ(st.records, 1);
  CHECK_EQ(st.invalid_records, 0);
  /* The device and overhead records were not decoded: free what build_buffer allocated. */
  {
    CUpti_Activity *rec = NULL;
    while (cupti_fn.ActivityGetNextRecord(buffer, used, &rec) == CUPTI_SUCCESS) {
      struct event ev;
      decode_record(rec, &ev);
    }
  }

  /* Empty and NULL buffers. */
  memset(&st, 0, sizeof(st));
  decode_buffer(buffer, 0, collect, NULL, &st);
  decode_buffer(NULL, 100, collect, NULL, &st);
  CHECK_EQ(st.records, 0);
  CHECK_EQ(st.invalid_records, 0);
}

static void test_unmodelled_kind(void)
{
  CUpti_ActivityAPI api;
  struct event ev;

  memset(&api, 0, sizeof(api));
  api.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
  CHECK_EQ(decode_record((CUpti_Activity *)&api, &ev), (unsigned long long)-ENOENT);
}

/* Synchronization records are timed like GPU records: an end before the start is no time. */
static void test_sync_timing(void)
{
  struct decode_stats st = {0};
  CUpti_ActivitySynchronization2 *s;

  memset(buffer, 0, sizeof(buffer));
  used = 0;
  s = append(sizeof(*s));
  s->kind = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
  s->type = CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE;
  s->start = 5000;
  s->end = 4000;
  s->correlationId = 7;
  s = append(sizeof(*s));
  s->kind = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
  s->type = CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE;
  s->start = 5000;
  s->end = 6500;
  s->correlationId = 8;
  n_events = 0;
  decode_buffer(buffer, used, collect, NULL, &st);
  CHECK_EQ(n_events, 2);
  CHECK_EQ(st.zero_timestamps, 1);
  CHECK_EQ(events[0].kind, EVENT_SYNC);
  CHECK(events[0].flags & EVENT_F_NO_TIMING);
  CHECK_EQ(events[1].kind, EVENT_SYNC);
  CHECK_EQ(events[1].flags & EVENT_F_NO_TIMING, 0);
  CHECK_EQ(events[1].end_ns - events[1].start_ns, 1500);
}

/*
 * Records of kinds the agent never enables (another client's RUNTIME, legacy MEMORY) are
 * stepped over by their size and the records after them are read; enum values outside the
 * 13.0 ranges, a NULL kernel name, correlation id 0 and the largest byte counts pass through
 * without being mistaken for a known value.
 */
static void test_foreign_and_hostile_records(void)
{
  struct decode_stats st = {0};
  CUpti_ActivityAPI *api;
  CUpti_ActivityMemory *legacy;
  CUpti_ActivityMemcpy6 *c;
  CUpti_ActivityMemory4 *m;
  CUpti_ActivityKernel10 *k;

  memset(buffer, 0, sizeof(buffer));
  used = 0;
  api = append(sizeof(*api));
  api->kind = CUPTI_ACTIVITY_KIND_RUNTIME;
  api->correlationId = 5;
  c = append(sizeof(*c));
  c->kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  c->copyKind = 200;
  c->srcKind = 0xff;
  c->bytes = UINT64_MAX;
  c->start = 10;
  c->end = 20;
  legacy = append(sizeof(*legacy));
  legacy->kind = CUPTI_ACTIVITY_KIND_MEMORY;
  m = append(sizeof(*m));
  m->kind = CUPTI_ACTIVITY_KIND_MEMORY2;
  m->memoryOperationType = CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_FORCE_INT;
  m->memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_FORCE_INT;
  m->bytes = UINT64_MAX;
  k = append(sizeof(*k));
  k->kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k->start = 30;
  k->end = 40;
  n_events = 0;
  decode_buffer(buffer, used, collect, NULL, &st);
  CHECK_EQ(st.records, 5);
  CHECK_EQ(st.events, 3);
  CHECK_EQ(st.invalid_records, 0);
  CHECK_EQ(n_events, 3);
  CHECK_EQ(events[0].kind, EVENT_MEMCPY);
  CHECK_EQ(events[0].u.memcpy.copy_kind, EVENT_COPY_UNKNOWN);
  CHECK_EQ(events[0].u.memcpy.bytes, UINT64_MAX);
  CHECK_EQ(events[0].corr_id, 0);
  CHECK_EQ(events[1].kind, EVENT_MEMORY);
  CHECK(events[1].u.memory.op != EVENT_MEMORY_ALLOCATION &&
        events[1].u.memory.op != EVENT_MEMORY_RELEASE);
  CHECK_EQ(events[1].u.memory.bytes, UINT64_MAX);
  CHECK_EQ(events[2].kind, EVENT_KERNEL);
  CHECK(events[2].u.kernel.name == NULL);
  CHECK_EQ(events[2].end_ns - events[2].start_ns, 10);
}

int main(void)
{
  char reason[1024] = "";

  if (cupti_loader_open_path(TEST_CUPTI_LIBRARY, reason, sizeof(reason)) != 0) {
    fprintf(stderr, "cannot load the real CUPTI (%s): %s\n", TEST_CUPTI_LIBRARY, reason);
    return 1;
  }
  CHECK_EQ(cupti_loader_version() / 100, CUPTI_API_VERSION / 100);
  RUN(test_all_kinds);
  RUN(test_invalid_kind_and_truncation);
  RUN(test_sync_timing);
  RUN(test_unmodelled_kind);
  RUN(test_foreign_and_hostile_records);
  UNIT_EXIT();
}
