/* The normalized device event: what every CUPTI record kind the agent reads is decoded into. */
#ifndef GPUPROF_AGENT_EVENT_H
#define GPUPROF_AGENT_EVENT_H

#include <stdint.h>

/*
 * One model for the summary, the pprof windows and the trace writers, independent of CUPTI's
 * record versions (cupti/decode.c is the only place that knows them). Strings are borrowed:
 * `kernel.name` is CUPTI-owned and stays valid until cuptiFinalize, so a consumer that keeps
 * it past the current buffer must copy or intern it. Device names are copied into the event
 * (CUPTI hands them to the client, and decode frees the original).
 */
enum event_kind {
  EVENT_NONE = 0,
  EVENT_KERNEL,
  EVENT_MEMCPY,
  EVENT_MEMSET,
  EVENT_MEMORY,      /* allocation or release record (MEMORY2) */
  EVENT_MEMORY_POOL, /* pool created / destroyed / trimmed */
  EVENT_SYNC,
  EVENT_OVERHEAD,
  EVENT_DEVICE,
  EVENT_CONTEXT,
  EVENT_STREAM,
};

enum event_flags {
  EVENT_F_NO_TIMING = 1 << 0, /* GPU record without timestamps (CUPTI ran out of device buffer) */
  EVENT_F_ASYNC = 1 << 1,     /* async memcpy/memset, stream-ordered allocation */
  EVENT_F_PEER = 1 << 2,      /* memcpy between devices (MEMCPY2 record) */
};

/* Memcpy directions, the values of CUPTI's CUpti_ActivityMemcpyKind. */
enum event_copy_kind {
  EVENT_COPY_UNKNOWN = 0,
  EVENT_COPY_HTOD = 1,
  EVENT_COPY_DTOH = 2,
  EVENT_COPY_HTOA = 3,
  EVENT_COPY_ATOH = 4,
  EVENT_COPY_ATOA = 5,
  EVENT_COPY_ATOD = 6,
  EVENT_COPY_DTOA = 7,
  EVENT_COPY_DTOD = 8,
  EVENT_COPY_HTOH = 9,
  EVENT_COPY_PTOP = 10,
  EVENT_COPY_KIND_COUNT = 11,
};

enum event_memory_op {
  EVENT_MEMORY_ALLOCATION = 1,
  EVENT_MEMORY_RELEASE = 2,
};

enum event_pool_op {
  EVENT_POOL_CREATED = 1,
  EVENT_POOL_DESTROYED = 2,
  EVENT_POOL_TRIMMED = 3,
};

/* CUPTI's CUpti_ActivitySynchronizationType values. */
enum event_sync_type {
  EVENT_SYNC_UNKNOWN = 0,
  EVENT_SYNC_EVENT = 1,
  EVENT_SYNC_STREAM_WAIT_EVENT = 2,
  EVENT_SYNC_STREAM = 3,
  EVENT_SYNC_CONTEXT = 4,
};

#define EVENT_INVALID_ID 0xffffffffu

struct event {
  enum event_kind kind;
  uint32_t flags;
  uint64_t start_ns; /* CLOCK_REALTIME; for instantaneous records start == end */
  uint64_t end_ns;
  uint32_t device;
  uint32_t context;
  uint32_t stream;
  uint32_t corr_id;         /* the launching API call (driver id for memcpy) */
  uint32_t runtime_corr_id; /* memcpy only: the runtime API call, 0 if none */
  uint32_t graph_id;        /* 0 unless the work ran as a graph node */
  uint64_t graph_node_id;
  union {
    struct {
      const char *name; /* mangled, CUPTI-owned */
      int32_t grid[3];
      int32_t block[3];
      uint32_t registers_per_thread;
      int32_t static_smem;
      int32_t dynamic_smem;
    } kernel;
    struct {
      uint64_t bytes;
      uint8_t copy_kind; /* enum event_copy_kind */
      uint8_t src_kind;  /* CUpti_ActivityMemoryKind */
      uint8_t dst_kind;
      uint32_t src_device, dst_device; /* peer copies; else both == device */
      uint64_t copy_count;             /* > 1 for batched copies */
    } memcpy;
    struct {
      uint64_t bytes;
      uint32_t value;
      uint16_t memory_kind;
    } memset;
    struct {
      uint8_t op;          /* enum event_memory_op */
      uint8_t memory_kind; /* CUpti_ActivityMemoryKind */
      uint64_t address;
      uint64_t bytes;
      uint64_t pool_address; /* stream-ordered allocations: the pool, else 0 */
      uint64_t pool_size;
    } memory;
    struct {
      uint8_t op; /* enum event_pool_op */
      uint64_t address;
      uint64_t size;
      uint64_t utilized;
    } pool;
    struct {
      uint32_t type; /* enum event_sync_type */
      uint32_t cuda_event_id;
    } sync;
    struct {
      uint32_t overhead_kind; /* CUpti_ActivityOverheadKind */
    } overhead;
    struct {
      char name[64];
      uint64_t global_memory_bytes;
      uint32_t cc_major, cc_minor;
    } device;
    struct {
      uint16_t null_stream;
    } context;
    struct {
      uint32_t priority;
      uint32_t flag;
    } stream;
  } u;
};

/* The device-side kinds that are joined to their API call (and need timestamps). */
static inline int event_is_gpu_work(const struct event *ev)
{
  return ev->kind == EVENT_KERNEL || ev->kind == EVENT_MEMCPY || ev->kind == EVENT_MEMSET;
}

#endif
