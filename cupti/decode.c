/* Decodes CUPTI activity buffers and records (13.0 layouts) into the agent's event model. */
#define LOG_MODULE "cupti"
#include "cupti/decode.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "agent/util/log.h"
#include "cupti/loader.h"

/*
 * The structs below are the ones CUPTI 13.0 fills (cupti.md 2.2), and the loader accepts the
 * CUPTI minor version of the headers the agent is built with. Headers of another minor
 * (13.2 fills Kernel11, Context4, Device6) would build an agent that accepts that CUPTI and
 * reads its records through these structs: check them against that cupti_activity.h first
 * (docs/COMPATIBILITY.md, "Adding a CUDA version"), then extend this line.
 */
_Static_assert(CUPTI_API_VERSION / 100 == 1300,
               "cupti/decode.c reads the CUDA 13.0 record structs; check them for this CUPTI");
/* The sizes the real 13.0 cuptiActivityGetNextRecord steps by (cupti.md 2.2). */
_Static_assert(sizeof(CUpti_ActivityKernel10) == 216 && sizeof(CUpti_ActivityMemcpy6) == 96 &&
                   sizeof(CUpti_ActivityMemcpyPtoP4) == 96 && sizeof(CUpti_ActivityMemset4) == 88 &&
                   sizeof(CUpti_ActivityMemory4) == 128 &&
                   sizeof(CUpti_ActivityMemoryPool3) == 80 &&
                   sizeof(CUpti_ActivitySynchronization2) == 56 &&
                   sizeof(CUpti_ActivityOverhead3) == 56 && sizeof(CUpti_ActivityDevice5) == 184 &&
                   sizeof(CUpti_ActivityContext3) == 32 && sizeof(CUpti_ActivityStream) == 24,
               "CUPTI 13.0 record sizes");

/* GPU records report 0 timestamps when CUPTI had no device buffer space to time them. */
static void check_timing(struct event *ev)
{
  if (ev->start_ns == 0 || ev->end_ns == 0 || ev->end_ns < ev->start_ns)
    ev->flags |= EVENT_F_NO_TIMING;
}

/* The fields every GPU-side record (kernel, memcpy, peer copy, memset) has under the same
 * names; a macro because the record structs are distinct types. */
#define DECODE_GPU_COMMON(ev, r)                                                                   \
  do {                                                                                             \
    (ev)->start_ns = (r)->start;                                                                   \
    (ev)->end_ns = (r)->end;                                                                       \
    (ev)->device = (r)->deviceId;                                                                  \
    (ev)->context = (r)->contextId;                                                                \
    (ev)->stream = (r)->streamId;                                                                  \
    (ev)->corr_id = (r)->correlationId;                                                            \
    (ev)->graph_id = (r)->graphId;                                                                 \
    (ev)->graph_node_id = (r)->graphNodeId;                                                        \
  } while (0)

static void decode_kernel(const CUpti_ActivityKernel10 *r, struct event *ev)
{
  ev->kind = EVENT_KERNEL;
  DECODE_GPU_COMMON(ev, r);
  ev->u.kernel.name = r->name;
  ev->u.kernel.grid[0] = r->gridX;
  ev->u.kernel.grid[1] = r->gridY;
  ev->u.kernel.grid[2] = r->gridZ;
  ev->u.kernel.block[0] = r->blockX;
  ev->u.kernel.block[1] = r->blockY;
  ev->u.kernel.block[2] = r->blockZ;
  ev->u.kernel.registers_per_thread = r->registersPerThread;
  ev->u.kernel.static_smem = r->staticSharedMemory;
  ev->u.kernel.dynamic_smem = r->dynamicSharedMemory;
  check_timing(ev);
}

static void decode_memcpy(const CUpti_ActivityMemcpy6 *r, struct event *ev)
{
  ev->kind = EVENT_MEMCPY;
  DECODE_GPU_COMMON(ev, r);
  ev->runtime_corr_id = r->runtimeCorrelationId;
  if (r->flags & CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC)
    ev->flags |= EVENT_F_ASYNC;
  ev->u.memcpy.bytes = r->bytes;
  ev->u.memcpy.copy_kind = r->copyKind < EVENT_COPY_KIND_COUNT ? r->copyKind : EVENT_COPY_UNKNOWN;
  ev->u.memcpy.src_kind = r->srcKind;
  ev->u.memcpy.dst_kind = r->dstKind;
  ev->u.memcpy.src_device = r->deviceId;
  ev->u.memcpy.dst_device = r->deviceId;
  ev->u.memcpy.copy_count = r->copyCount ? r->copyCount : 1;
  check_timing(ev);
}

static void decode_peer(const CUpti_ActivityMemcpyPtoP4 *r, struct event *ev)
{
  ev->kind = EVENT_MEMCPY;
  ev->flags |= EVENT_F_PEER;
  DECODE_GPU_COMMON(ev, r);
  if (r->flags & CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC)
    ev->flags |= EVENT_F_ASYNC;
  ev->u.memcpy.bytes = r->bytes;
  ev->u.memcpy.copy_kind = r->copyKind < EVENT_COPY_KIND_COUNT ? r->copyKind : EVENT_COPY_PTOP;
  ev->u.memcpy.src_kind = r->srcKind;
  ev->u.memcpy.dst_kind = r->dstKind;
  ev->u.memcpy.src_device = r->srcDeviceId;
  ev->u.memcpy.dst_device = r->dstDeviceId;
  ev->u.memcpy.copy_count = 1;
  check_timing(ev);
}

static void decode_memset(const CUpti_ActivityMemset4 *r, struct event *ev)
{
  ev->kind = EVENT_MEMSET;
  DECODE_GPU_COMMON(ev, r);
  if (r->flags & CUPTI_ACTIVITY_FLAG_MEMSET_ASYNC)
    ev->flags |= EVENT_F_ASYNC;
  ev->u.memset.bytes = r->bytes;
  ev->u.memset.value = r->value;
  ev->u.memset.memory_kind = r->memoryKind;
  check_timing(ev);
}

static void decode_memory(const CUpti_ActivityMemory4 *r, struct event *ev)
{
  ev->kind = EVENT_MEMORY;
  ev->start_ns = ev->end_ns = r->timestamp;
  ev->device = r->deviceId;
  ev->context = r->contextId;
  ev->stream = r->streamId;
  ev->corr_id = r->correlationId;
  if (r->isAsync)
    ev->flags |= EVENT_F_ASYNC;
  ev->u.memory.op = (uint8_t)r->memoryOperationType;
  ev->u.memory.memory_kind = (uint8_t)r->memoryKind;
  ev->u.memory.address = r->address;
  ev->u.memory.bytes = r->bytes;
  if (r->memoryPoolConfig.memoryPoolType != CUPTI_ACTIVITY_MEMORY_POOL_TYPE_INVALID) {
    ev->u.memory.pool_address = r->memoryPoolConfig.address;
    ev->u.memory.pool_size = r->memoryPoolConfig.pool.size;
  }
}

static void decode_pool(const CUpti_ActivityMemoryPool3 *r, struct event *ev)
{
  ev->kind = EVENT_MEMORY_POOL;
  ev->start_ns = ev->end_ns = r->timestamp;
  ev->device = r->deviceId;
  ev->context = EVENT_INVALID_ID;
  ev->stream = EVENT_INVALID_ID;
  ev->corr_id = r->correlationId;
  ev->u.pool.op = (uint8_t)r->memoryPoolOperationType;
  ev->u.pool.address = r->address;
  ev->u.pool.size = r->size;
  ev->u.pool.utilized = r->utilizedSize;
}

static void decode_sync(const CUpti_ActivitySynchronization2 *r, struct event *ev)
{
  ev->kind = EVENT_SYNC;
  ev->start_ns = r->start;
  ev->end_ns = r->end;
  ev->device = EVENT_INVALID_ID; /* not in the record: the context tells (agent/ctx_map.h) */
  ev->context = r->contextId;
  ev->stream = r->streamId;
  ev->corr_id = r->correlationId;
  ev->u.sync.type = (uint32_t)r->type;
  ev->u.sync.cuda_event_id = r->cudaEventId;
  check_timing(ev); /* a duration is taken from it (summary sync time, trace slices) */
}

static void decode_overhead(CUpti_ActivityOverhead3 *r, struct event *ev)
{
  ev->kind = EVENT_OVERHEAD;
  ev->start_ns = r->start;
  ev->end_ns = r->end;
  ev->device = EVENT_INVALID_ID;
  ev->context = EVENT_INVALID_ID;
  ev->stream = EVENT_INVALID_ID;
  ev->corr_id = r->correlationId;
  ev->u.overhead.overhead_kind = (uint32_t)r->overheadKind;
  /* cupti_activity.h: "Client is responsible for freeing this memory". */
  free(r->overheadData);
  r->overheadData = NULL;
}

static void decode_device(CUpti_ActivityDevice5 *r, struct event *ev)
{
  ev->kind = EVENT_DEVICE;
  ev->device = r->id;
  ev->context = EVENT_INVALID_ID;
  ev->stream = EVENT_INVALID_ID;
  if (r->name) {
    strncpy(ev->u.device.name, r->name, sizeof(ev->u.device.name) - 1);
    /* cupti_activity.h: the client owns the device name and must free it. */
    free((void *)r->name);
    r->name = NULL;
  }
  ev->u.device.global_memory_bytes = r->globalMemorySize;
  ev->u.device.cc_major = r->computeCapabilityMajor;
  ev->u.device.cc_minor = r->computeCapabilityMinor;
}

int decode_record(CUpti_Activity *record, struct event *ev)
{
  memset(ev, 0, sizeof(*ev));
  switch (record->kind) {
  case CUPTI_ACTIVITY_KIND_KERNEL:
  case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
    decode_kernel((const CUpti_ActivityKernel10 *)record, ev);
    return 0;
  case CUPTI_ACTIVITY_KIND_MEMCPY:
    decode_memcpy((const CUpti_ActivityMemcpy6 *)record, ev);
    return 0;
  case CUPTI_ACTIVITY_KIND_MEMCPY2:
    decode_peer((const CUpti_ActivityMemcpyPtoP4 *)record, ev);
    return 0;
  case CUPTI_ACTIVITY_KIND_MEMSET:
    decode_memset((const CUpti_ActivityMemset4 *)record, ev);
    return 0;
  case CUPTI_ACTIVITY_KIND_MEMORY2:
    decode_memory((const CUpti_ActivityMemory4 *)record, ev);
    return 0;
  case CUPTI_ACTIVITY_KIND_MEMORY_POOL:
    decode_pool((const CUpti_ActivityMemoryPool3 *)record, ev);
    return 0;
  case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION:
    decode_sync((const CUpti_ActivitySynchronization2 *)record, ev);
    return 0;
  case CUPTI_ACTIVITY_KIND_OVERHEAD:
    decode_overhead((CUpti_ActivityOverhead3 *)record, ev);
    return 0;
  case CUPTI_ACTIVITY_KIND_DEVICE:
    decode_device((CUpti_ActivityDevice5 *)record, ev);
    return 0;
  case CUPTI_ACTIVITY_KIND_CONTEXT: {
    const CUpti_ActivityContext3 *r = (const CUpti_ActivityContext3 *)record;
    ev->kind = EVENT_CONTEXT;
    ev->device = r->deviceId;
    ev->context = r->contextId;
    ev->stream = EVENT_INVALID_ID;
    ev->u.context.null_stream = r->nullStreamId;
    return 0;
  }
  case CUPTI_ACTIVITY_KIND_STREAM: {
    const CUpti_ActivityStream *r = (const CUpti_ActivityStream *)record;
    ev->kind = EVENT_STREAM;
    ev->device = EVENT_INVALID_ID;
    ev->context = r->contextId;
    ev->stream = r->streamId;
    ev->corr_id = r->correlationId;
    ev->u.stream.priority = r->priority;
    ev->u.stream.flag = (uint32_t)r->flag;
    return 0;
  }
  default:
    return -ENOENT;
  }
}

void decode_buffer(uint8_t *buffer, size_t valid_size, decode_event_fn fn, void *arg,
                   struct decode_stats *st)
{
  CUpti_Activity *record = NULL;
  struct event ev;

  if (!buffer || valid_size == 0)
    return;
  for (;;) {
    CUptiResult res = cupti_fn.ActivityGetNextRecord(buffer, valid_size, &record);

    if (res == CUPTI_ERROR_MAX_LIMIT_REACHED)
      break;
    if (res != CUPTI_SUCCESS) {
      /* INVALID_KIND: the record's size is unknown, so nothing after it can be found. */
      st->invalid_records++;
      log_warn_once("activity buffer ended in an unreadable record (%s); the rest of that "
                    "buffer is lost (counted as invalid_records)",
                    cupti_result_string(res));
      break;
    }
    st->records++;
    if (decode_record(record, &ev) != 0)
      continue;
    st->events++;
    if (ev.flags & EVENT_F_NO_TIMING)
      st->zero_timestamps++;
    fn(&ev, arg);
  }
}
