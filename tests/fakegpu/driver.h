/* Private state and helpers shared by the simulated driver's source files. */
#ifndef FAKEGPU_DRIVER_H
#define FAKEGPU_DRIVER_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda.h>
#include <cupti.h>

#include "tests/fakegpu/fg_tool.h"

#define FG_API __attribute__((visibility("default")))

#define FG_MAX_DEVICES 8
#define FG_LEGACY_STREAM_ID 7     /* what CUPTI reports for the NULL stream on hardware */
#define FG_FIRST_STREAM_ID 13     /* created streams count up from here, per context */

/* ---- objects (all guarded by fg_lock) ---- */

struct fg_ctx;
struct fg_graph;

struct fg_stream {
  uint32_t magic;
  struct fg_ctx *ctx;
  uint32_t id;                /* CUPTI stream id, unique within the context */
  unsigned flags;             /* CU_STREAM_DEFAULT / CU_STREAM_NON_BLOCKING */
  int priority;
  int legacy;                 /* the context's NULL stream */
  int per_thread;             /* a thread's per-thread default stream */
  uint64_t tail;              /* simulated completion time of the last op queued */
  /* Completion times of the last FG_STREAM_QUEUE ops queued (a ring, `queued` in all): a
   * launch waits while the op that many places back has not finished (fg_stream_wait_room). */
  uint64_t queue_end[1024];
  uint64_t queued;
  struct fg_graph *capture;   /* graph being captured, NULL when not capturing */
  uint64_t capture_id;
  struct fg_stream *next;
};

struct fg_ctx {
  uint32_t magic;
  uint32_t uid;               /* CUPTI context id: process-unique, sequential from 1 */
  int device;
  int primary;
  unsigned flags;
  uint32_t next_stream_id;
  struct fg_stream *legacy;
  struct fg_stream *streams;  /* created and per-thread streams, not the legacy one */
  uint64_t peers;             /* bit u: peer access to the context with uid u enabled */
  struct fg_ctx *next;
};

struct fg_device {
  char name[64];
  CUuuid uuid;
  size_t total_mem;
  struct fg_ctx *primary;
  int primary_refs;
  uint64_t serial_tail;       /* KERNEL (serialized) kind: end of the last kernel */
  struct fg_pool *default_pool;
  struct fg_pool *current_pool; /* cuDeviceSetMemPool; NULL: the default pool */
};

struct fg_pool {
  uint32_t magic;
  int device;
  uint64_t address;           /* pool base reported in records */
  uint64_t size;              /* bytes the pool holds */
  uint64_t used;              /* bytes handed out */
  uint64_t release_threshold;
  uint64_t used_high, reserved_high;
  struct fg_pool *next;
};

extern pthread_mutex_t fg_lock;
extern struct fg_device fg_devices[FG_MAX_DEVICES];
extern int fg_device_count;
extern struct fg_ctx *fg_contexts;

/* ---- init (driver_init.c) ---- */

int fg_initialized(void);
/* The calling thread is running CUDA_INJECTION64_PATH's InitializeInjection (inside cuInit). */
int fg_in_injection(void);
int fg_log_enabled(void);
void fg_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
uint64_t fg_realtime_ns(void);
void fg_sleep_until(uint64_t realtime_ns);

/* ---- API bracketing, correlation, records (driver_api.c) ---- */

/* One traced driver call in flight on this thread. */
struct fg_call {
  int traced;                 /* DRIVER callbacks/records for this call */
  uint32_t cbid;
  const char *name;
  const void *params;
  const char *symbol;
  uint32_t corr;
  uint64_t start;
  uint64_t cdata;             /* the correlationData slot shared ENTER -> EXIT */
};

void fg_call_enter(struct fg_call *c, uint32_t cbid, const char *name, const void *params,
                   const char *symbol);
CUresult fg_call_exit(struct fg_call *c, CUresult result);

/* The attribution of records made now on this thread: innermost API call's id, and the
 * innermost runtime call's id (0 when none). */
uint32_t fg_corr_current(void);
uint32_t fg_corr_runtime(void);

const struct fg_tool *fg_tool_get(void);
int fg_kind_on(CUpti_ActivityKind kind, const struct fg_ctx *ctx);
void fg_emit(const void *rec, size_t size, uint64_t complete_ns);
uint64_t fg_now(void);
uint64_t fg_gpu_ts(uint64_t realtime_ns);
void fg_resource(CUpti_CallbackIdResource cbid, struct fg_ctx *ctx, void *handle,
                 void *descriptor);
void fg_sync_callback(CUpti_CallbackIdSync cbid, struct fg_ctx *ctx, CUstream stream);
void fg_graph_callback(CUpti_CallbackIdResource cbid, struct fg_ctx *ctx, CUgraph graph,
                       CUgraphNode node, CUgraphNodeType type, CUgraphExec exec);

/* Declares the params struct `p` of exported function `fn`, fills it from the initializer
 * and enters the call: `FG_ENTER(cuMemAlloc_v2, sym, dptr, bytesize)`. */
#define FG_ENTER(fn, sym, ...)                                                                 \
  fn##_params p_ = {__VA_ARGS__};                                                              \
  struct fg_call call_;                                                                        \
  fg_call_enter(&call_, CUPTI_DRIVER_TRACE_CBID_##fn, #fn, &p_, sym)
#define FG_ENTER0(fn)                                                                          \
  struct fg_call call_;                                                                        \
  fg_call_enter(&call_, CUPTI_DRIVER_TRACE_CBID_##fn, #fn, NULL, NULL)
#define FG_EXIT(r) fg_call_exit(&call_, (r))

/* ---- contexts, streams, timeline (driver_ctx.c) ---- */

struct fg_ctx *fg_ctx_current(void);
int fg_ctx_valid(const struct fg_ctx *ctx);            /* under fg_lock */
/* Resolves a stream handle (NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD or a created
 * stream) against the current context; ptsz: NULL means the per-thread stream. */
CUresult fg_stream_resolve(CUstream h, int ptsz, struct fg_stream **out);
/* Queues `dur_ns` of work on `s` starting no earlier than `not_before` (under fg_lock);
 * returns the start, sets *end. */
uint64_t fg_stream_schedule(struct fg_stream *s, uint64_t not_before, uint64_t dur_ns,
                            uint64_t *end);
/* A real stream holds about a thousand pending launches; the next launch then blocks the host
 * until one finishes (NVIDIA developer forum "CUDA stream are blocked when launch lots of
 * kernels (>1000)"). Without that the simulated GPU could fall behind the host without bound,
 * and records would reach a profiler far later than on hardware. Blocks the caller (no lock
 * held) until s has room for one more op. */
#define FG_STREAM_QUEUE 1024
void fg_stream_wait_room(struct fg_stream *s);
uint64_t fg_ctx_idle(const struct fg_ctx *ctx);        /* under fg_lock */
void fg_stream_record(struct fg_stream *s, int dump);   /* STREAM activity record */
void fg_context_record(struct fg_ctx *ctx);             /* CONTEXT activity record */
void fg_device_records(void);                           /* DEVICE activity records */
void fg_dump(CUpti_ActivityKind kind);
uint32_t fg_stream_cupti_id(const struct fg_stream *s);

/* ---- memory (driver_mem.c) ---- */

enum fg_mem_class { FG_MEM_PAGEABLE, FG_MEM_PINNED, FG_MEM_DEVICE, FG_MEM_MANAGED };

/* Classifies [addr, addr + bytes): the class, device and CUPTI context id of the allocation
 * holding it (device -1, ctx 0 for pageable host memory). Returns -1 when the range starts
 * in tracked memory but runs past its allocation. */
int fg_mem_classify(uint64_t addr, uint64_t bytes, enum fg_mem_class *cls, int *device,
                    uint32_t *ctx_uid);

/* ---- work items shared by streams and graphs ---- */

enum fg_op_type { FG_OP_KERNEL, FG_OP_MEMCPY, FG_OP_MEMSET, FG_OP_HOST };

struct fg_func;

struct fg_op {
  enum fg_op_type type;
  /* kernel */
  struct fg_func *func;
  unsigned grid[3], block[3], cluster[3];
  unsigned smem;
  uint8_t launch_type;
  /* memcpy / memset */
  uint64_t dst, src, bytes;    /* 2D copies: bytes = width * height */
  uint64_t width, height, spitch, dpitch; /* height 0: a contiguous copy */
  int dst_device, src_device;  /* peer copies: explicit devices, -1 to classify */
  uint32_t value;
  unsigned elem_size;
  /* host function */
  CUhostFn host_fn;
  void *host_arg;
};

/* Graph attribution of a replayed op (all zero outside graphs). */
struct fg_graph_ref {
  uint32_t graph_id;
  uint64_t node_id;
  uint32_t corr;              /* the graph launch's correlation id */
  uint32_t runtime_corr;
  int node_records;           /* 0 while GRAPH_TRACE replaces per-node records */
};

/* Runs `op` on stream `s`: moves bytes, advances the timeline, writes records.
 * async: the API is an asynchronous one (record flags); sets *start and *end (simulated).
 * Returns CUDA_SUCCESS or an error for an invalid operand. */
CUresult fg_op_submit(struct fg_stream *s, const struct fg_op *op, int async,
                      const struct fg_graph_ref *g, uint64_t *start, uint64_t *end);

/* Stream capture: when `s` is capturing, appends `op` as a node and returns 1. */
int fg_capture_op(struct fg_stream *s, const struct fg_op *op, CUresult *result);

/* ---- functions (driver_launch.c) ---- */

struct fg_func {
  uint32_t magic;
  const char *name;           /* interned: stable for the life of the process */
  int num_regs;
  int static_smem;
  int max_threads;
  struct fg_module *module;
};

uint64_t fg_kernel_duration(const struct fg_func *f, const struct fg_op *op);
const char *fg_intern(const char *s);

#endif
