/* Contexts, streams, events and synchronization on the simulated GPU timeline. */
#include <stdlib.h>
#include <string.h>

#include "tests/fakegpu/driver.h"
#include "tests/fakegpu/fakegpu.h"

/*
 * Timeline: the GPU clock is CLOCK_REALTIME. Each stream is a FIFO whose `tail` is the
 * simulated completion time of its last op; an op starts at max(submission, tail, implicit
 * dependencies) and synchronous APIs sleep until the time they wait for. The legacy NULL
 * stream waits for all blocking streams of its context and they wait for it, as in CUDA;
 * non-blocking streams wait for nobody. Contexts and streams are never freed (a destroyed
 * one is marked dead) so that stale handles held by other threads stay harmless.
 */

#define CTX_MAGIC 0x43545821u
#define STREAM_MAGIC 0x53545221u
#define EVENT_MAGIC 0x45565421u
#define FG_MAX_STACK 16
#define FG_MAX_PT 16

struct fg_event {
  uint32_t magic;
  uint32_t id;
  unsigned flags;
  int recorded;
  struct fg_ctx *ctx;
  uint64_t time;              /* simulated time at which the recorded work completes */
  struct fg_event *next;
};

struct fg_ctx *fg_contexts;
static struct fg_ctx *g_dead_contexts;
static struct fg_event *g_events;
static uint32_t g_next_ctx_uid = 1;
static uint32_t g_next_event_id = 1;

static __thread struct fg_ctx *t_stack[FG_MAX_STACK];
static __thread int t_top;
static __thread struct {
  struct fg_ctx *ctx;
  struct fg_stream *stream;
} t_pt[FG_MAX_PT];

struct fg_ctx *fg_ctx_current(void) { return t_top > 0 ? t_stack[t_top - 1] : NULL; }

int fg_ctx_valid(const struct fg_ctx *ctx) { return ctx && ctx->magic == CTX_MAGIC; }

static CUresult current_ctx(struct fg_ctx **out)
{
  struct fg_ctx *ctx = fg_ctx_current();
  if (!fg_initialized())
    return CUDA_ERROR_NOT_INITIALIZED;
  if (!fg_ctx_valid(ctx))
    return CUDA_ERROR_INVALID_CONTEXT;
  *out = ctx;
  return CUDA_SUCCESS;
}

uint32_t fg_stream_cupti_id(const struct fg_stream *s) { return s->id; }

static struct fg_stream *stream_new(struct fg_ctx *ctx, unsigned flags, int priority,
                                    int legacy)
{
  struct fg_stream *s = calloc(1, sizeof(*s));
  if (!s)
    return NULL;
  s->magic = STREAM_MAGIC;
  s->ctx = ctx;
  s->flags = flags;
  s->priority = priority;
  s->legacy = legacy;
  if (legacy) {
    s->id = FG_LEGACY_STREAM_ID;
    ctx->legacy = s;
  } else {
    s->id = ctx->next_stream_id++;
    s->next = ctx->streams;
    ctx->streams = s;
  }
  return s;
}

void fg_stream_record(struct fg_stream *s, int dump)
{
  if (!fg_kind_on(CUPTI_ACTIVITY_KIND_STREAM, s->ctx))
    return;
  CUpti_ActivityStream r;
  memset(&r, 0, sizeof(r));
  r.kind = CUPTI_ACTIVITY_KIND_STREAM;
  r.contextId = s->ctx->uid;
  r.streamId = s->id;
  r.priority = (uint32_t)s->priority;
  r.flag = s->legacy ? CUPTI_ACTIVITY_STREAM_CREATE_FLAG_NULL
           : (s->flags & CU_STREAM_NON_BLOCKING) ? CUPTI_ACTIVITY_STREAM_CREATE_FLAG_NON_BLOCKING
                                                 : CUPTI_ACTIVITY_STREAM_CREATE_FLAG_DEFAULT;
  r.correlationId = dump ? 0 : fg_corr_current();
  fg_emit(&r, sizeof(r), 0);
}

void fg_context_record(struct fg_ctx *ctx)
{
  if (!fg_kind_on(CUPTI_ACTIVITY_KIND_CONTEXT, ctx))
    return;
  CUpti_ActivityContext3 r;
  memset(&r, 0, sizeof(r));
  r.kind = CUPTI_ACTIVITY_KIND_CONTEXT;
  r.contextId = ctx->uid;
  r.deviceId = (uint32_t)ctx->device;
  r.computeApiKind = CUPTI_ACTIVITY_COMPUTE_API_CUDA;
  r.nullStreamId = FG_LEGACY_STREAM_ID;
  r.numMultiprocessors = 132;
  r.cigMode = CUPTI_CONTEXT_CIG_MODE_NONE;
  fg_emit(&r, sizeof(r), 0);
}

void fg_device_records(void)
{
  if (!fg_kind_on(CUPTI_ACTIVITY_KIND_DEVICE, NULL))
    return;
  for (int i = 0; i < fg_device_count; i++) {
    CUpti_ActivityDevice5 r;
    memset(&r, 0, sizeof(r));
    r.kind = CUPTI_ACTIVITY_KIND_DEVICE;
    r.flags = CUPTI_ACTIVITY_FLAG_DEVICE_CONCURRENT_KERNELS;
    r.globalMemoryBandwidth = 3352320000ull; /* KB/s */
    r.globalMemorySize = fg_devices[i].total_mem;
    r.constantMemorySize = 65536;
    r.l2CacheSize = 52428800;
    r.numThreadsPerWarp = 32;
    r.coreClockRate = 1980000;
    r.numMemcpyEngines = 5;
    r.numMultiprocessors = 132;
    r.maxIPC = 4;
    r.maxWarpsPerMultiprocessor = 64;
    r.maxBlocksPerMultiprocessor = 32;
    r.maxSharedMemoryPerMultiprocessor = 233472;
    r.maxRegistersPerMultiprocessor = 65536;
    r.maxRegistersPerBlock = 65536;
    r.maxSharedMemoryPerBlock = 49152;
    r.maxThreadsPerBlock = 1024;
    r.maxBlockDimX = 1024;
    r.maxBlockDimY = 1024;
    r.maxBlockDimZ = 64;
    r.maxGridDimX = 2147483647;
    r.maxGridDimY = 65535;
    r.maxGridDimZ = 65535;
    r.computeCapabilityMajor = 9;
    r.computeCapabilityMinor = 0;
    r.id = (uint32_t)i;
    r.eccEnabled = 1;
    r.uuid = fg_devices[i].uuid;
    /* cupti.md 6.10: the client frees Device5.name. */
    r.name = strdup(fg_devices[i].name);
    r.isCudaVisible = 1;
    fg_emit(&r, sizeof(r), 0);
  }
}

void fg_dump(CUpti_ActivityKind kind)
{
  if (kind == CUPTI_ACTIVITY_KIND_DEVICE) {
    if (fg_initialized())
      fg_device_records();
    return;
  }
  if (kind != CUPTI_ACTIVITY_KIND_CONTEXT && kind != CUPTI_ACTIVITY_KIND_STREAM)
    return;
  /* Snapshot under the lock, emit without it: emitting may call the client's buffer
   * request callback. */
  enum { MAX = 1024 };
  static struct fg_ctx *ctxs[MAX];
  static struct fg_stream *streams[MAX];
  static pthread_mutex_t dump_lock = PTHREAD_MUTEX_INITIALIZER;
  pthread_mutex_lock(&dump_lock);
  int nc = 0, ns = 0;
  pthread_mutex_lock(&fg_lock);
  for (struct fg_ctx *c = fg_contexts; c && nc < MAX; c = c->next) {
    ctxs[nc++] = c;
    if (ns < MAX)
      streams[ns++] = c->legacy;
    for (struct fg_stream *s = c->streams; s && ns < MAX; s = s->next)
      if (s->magic == STREAM_MAGIC)
        streams[ns++] = s;
  }
  pthread_mutex_unlock(&fg_lock);
  if (kind == CUPTI_ACTIVITY_KIND_CONTEXT)
    for (int i = 0; i < nc; i++)
      fg_context_record(ctxs[i]);
  else
    for (int i = 0; i < ns; i++)
      fg_stream_record(streams[i], 1);
  pthread_mutex_unlock(&dump_lock);
}

static struct fg_ctx *ctx_new(int device, int primary, unsigned flags)
{
  struct fg_ctx *ctx = calloc(1, sizeof(*ctx));
  if (!ctx)
    return NULL;
  ctx->magic = CTX_MAGIC;
  ctx->device = device;
  ctx->primary = primary;
  ctx->flags = flags;
  ctx->next_stream_id = FG_FIRST_STREAM_ID;
  pthread_mutex_lock(&fg_lock);
  ctx->uid = g_next_ctx_uid++;
  if (!stream_new(ctx, CU_STREAM_DEFAULT, 0, 1)) {
    pthread_mutex_unlock(&fg_lock);
    free(ctx);
    return NULL;
  }
  ctx->next = fg_contexts;
  fg_contexts = ctx;
  pthread_mutex_unlock(&fg_lock);
  fg_context_record(ctx);
  fg_stream_record(ctx->legacy, 0);
  fg_resource(CUPTI_CBID_RESOURCE_CONTEXT_CREATED, ctx, NULL, NULL);
  return ctx;
}

/* Waits for the context's work, tells the tool, then unlinks it (memory kept, see top). */
static void ctx_destroy(struct fg_ctx *ctx)
{
  pthread_mutex_lock(&fg_lock);
  uint64_t idle = fg_ctx_idle(ctx);
  pthread_mutex_unlock(&fg_lock);
  fg_sleep_until(idle);
  for (struct fg_stream *s = ctx->streams; s; s = s->next)
    if (s->magic == STREAM_MAGIC && !s->per_thread)
      fg_resource(CUPTI_CBID_RESOURCE_STREAM_DESTROY_STARTING, ctx, s, NULL);
  fg_resource(CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING, ctx, NULL, NULL);
  pthread_mutex_lock(&fg_lock);
  for (struct fg_ctx **pp = &fg_contexts; *pp; pp = &(*pp)->next) {
    if (*pp == ctx) {
      *pp = ctx->next;
      break;
    }
  }
  ctx->magic = 0;
  for (struct fg_stream *s = ctx->streams; s; s = s->next)
    s->magic = 0;
  ctx->legacy->magic = 0;
  ctx->next = g_dead_contexts;
  g_dead_contexts = ctx;
  if (ctx->primary) {
    fg_devices[ctx->device].primary = NULL;
    fg_devices[ctx->device].primary_refs = 0;
  }
  pthread_mutex_unlock(&fg_lock);
  for (int i = 0; i < t_top; i++)
    if (t_stack[i] == ctx)
      t_stack[i] = NULL;
  while (t_top > 0 && !t_stack[t_top - 1])
    t_top--;
}

uint64_t fg_ctx_idle(const struct fg_ctx *ctx)
{
  uint64_t t = ctx->legacy->tail;
  for (struct fg_stream *s = ctx->streams; s; s = s->next)
    if (s->tail > t)
      t = s->tail;
  return t;
}

FG_API uint64_t fakegpu_gpu_idle_time_ns(void)
{
  uint64_t t = 0;
  pthread_mutex_lock(&fg_lock);
  for (struct fg_ctx *c = fg_contexts; c; c = c->next) {
    uint64_t x = fg_ctx_idle(c);
    if (x > t)
      t = x;
  }
  pthread_mutex_unlock(&fg_lock);
  return t;
}

/* When an op queued now on `s` could start (implicit legacy-stream ordering included). */
static uint64_t stream_ready(const struct fg_stream *s)
{
  uint64_t t = s->tail;
  if (s->legacy) {
    for (struct fg_stream *o = s->ctx->streams; o; o = o->next)
      if (!(o->flags & CU_STREAM_NON_BLOCKING) && o->tail > t)
        t = o->tail;
  } else if (!(s->flags & CU_STREAM_NON_BLOCKING) && s->ctx->legacy->tail > t) {
    t = s->ctx->legacy->tail;
  }
  return t;
}

uint64_t fg_stream_schedule(struct fg_stream *s, uint64_t not_before, uint64_t dur_ns,
                            uint64_t *end)
{
  uint64_t start = stream_ready(s);
  if (start < not_before)
    start = not_before;
  s->tail = start + dur_ns;
  *end = s->tail;
  s->queue_end[s->queued++ % FG_STREAM_QUEUE] = s->tail;
  return start;
}

void fg_stream_wait_room(struct fg_stream *s)
{
  uint64_t until = 0, now;

  pthread_mutex_lock(&fg_lock);
  if (s->queued >= FG_STREAM_QUEUE)
    until = s->queue_end[s->queued % FG_STREAM_QUEUE]; /* the oldest of the last 1024 */
  pthread_mutex_unlock(&fg_lock);
  now = fg_realtime_ns();
  if (until > now) {
    struct timespec ts = {(time_t)((until - now) / 1000000000ull),
                          (long)((until - now) % 1000000000ull)};
    nanosleep(&ts, NULL);
  }
}

static struct fg_stream *per_thread_stream(struct fg_ctx *ctx)
{
  int free_slot = -1;
  for (int i = 0; i < FG_MAX_PT; i++) {
    if (t_pt[i].ctx == ctx && t_pt[i].stream && t_pt[i].stream->magic == STREAM_MAGIC)
      return t_pt[i].stream;
    if (free_slot < 0 && (!t_pt[i].ctx || !fg_ctx_valid(t_pt[i].ctx)))
      free_slot = i;
  }
  pthread_mutex_lock(&fg_lock);
  struct fg_stream *s = stream_new(ctx, CU_STREAM_DEFAULT, 0, 0);
  if (s)
    s->per_thread = 1;
  pthread_mutex_unlock(&fg_lock);
  if (!s)
    return NULL;
  if (free_slot >= 0) {
    t_pt[free_slot].ctx = ctx;
    t_pt[free_slot].stream = s;
  }
  fg_stream_record(s, 0);
  return s;
}

CUresult fg_stream_resolve(CUstream h, int ptsz, struct fg_stream **out)
{
  struct fg_stream *s = (struct fg_stream *)h;
  if (h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD || !h) {
    struct fg_ctx *ctx;
    CUresult r = current_ctx(&ctx);
    if (r != CUDA_SUCCESS)
      return r;
    int pt = h == CU_STREAM_PER_THREAD || (!h && ptsz);
    s = pt ? per_thread_stream(ctx) : ctx->legacy;
    if (!s)
      return CUDA_ERROR_OUT_OF_MEMORY;
  } else if (s->magic != STREAM_MAGIC) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  *out = s;
  return CUDA_SUCCESS;
}

/* ---- queries for the CUPTI double ---- */

int fg_query_context_id(CUcontext c, uint32_t *id)
{
  struct fg_ctx *ctx = (struct fg_ctx *)c;
  if (!fg_ctx_valid(ctx))
    return -1;
  *id = ctx->uid;
  return 0;
}

int fg_query_device_id(CUcontext c, uint32_t *id)
{
  struct fg_ctx *ctx = c ? (struct fg_ctx *)c : fg_ctx_current();
  if (!fg_ctx_valid(ctx))
    return -1;
  *id = (uint32_t)ctx->device;
  return 0;
}

int fg_query_stream_id(CUcontext c, CUstream h, uint8_t per_thread, uint32_t *id)
{
  struct fg_ctx *ctx = c ? (struct fg_ctx *)c : fg_ctx_current();
  struct fg_stream *s = (struct fg_stream *)h;
  if (h && h != CU_STREAM_LEGACY && h != CU_STREAM_PER_THREAD) {
    if (s->magic != STREAM_MAGIC)
      return -2;
    *id = s->id;
    return 0;
  }
  if (!fg_ctx_valid(ctx))
    return -1;
  s = (h == CU_STREAM_PER_THREAD || (!h && per_thread)) ? per_thread_stream(ctx) : ctx->legacy;
  if (!s)
    return -2;
  *id = s->id;
  return 0;
}

/* ---- synchronization records ---- */

static void sync_record(CUpti_ActivitySynchronizationType type, struct fg_ctx *ctx,
                        const struct fg_stream *s, uint32_t event_id, uint64_t start,
                        CUresult ret)
{
  if (!fg_kind_on(CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, ctx))
    return;
  CUpti_ActivitySynchronization2 r;
  memset(&r, 0, sizeof(r));
  r.kind = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
  r.type = type;
  r.start = start;
  r.end = fg_now();
  if (r.end <= r.start)
    r.end = r.start + 1;
  r.correlationId = fg_corr_current();
  r.contextId = ctx ? ctx->uid : CUPTI_INVALID_CONTEXT_ID;
  r.streamId = s ? s->id : CUPTI_SYNCHRONIZATION_INVALID_VALUE;
  r.cudaEventId = event_id;
  r.cudaEventSyncId = CUPTI_SYNCHRONIZATION_INVALID_VALUE;
  r.returnValue = (uint32_t)ret;
  fg_emit(&r, sizeof(r), 0);
}

/* ---- contexts ---- */

FG_API CUresult CUDAAPI cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams,
                                       unsigned int flags, CUdevice dev)
{
  FG_ENTER(cuCtxCreate_v4, NULL, pctx, ctxCreateParams, flags, dev);
  if (!fg_initialized())
    return FG_EXIT(CUDA_ERROR_NOT_INITIALIZED);
  if (!pctx)
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  if (dev < 0 || dev >= fg_device_count)
    return FG_EXIT(CUDA_ERROR_INVALID_DEVICE);
  if (t_top >= FG_MAX_STACK)
    return FG_EXIT(CUDA_ERROR_OUT_OF_MEMORY);
  struct fg_ctx *ctx = ctx_new(dev, 0, flags);
  if (!ctx)
    return FG_EXIT(CUDA_ERROR_OUT_OF_MEMORY);
  t_stack[t_top++] = ctx;
  *pctx = (CUcontext)ctx;
  return FG_EXIT(CUDA_SUCCESS);
}

FG_API CUresult CUDAAPI cuCtxDestroy_v2(CUcontext c)
{
  FG_ENTER(cuCtxDestroy_v2, NULL, c);
  struct fg_ctx *ctx = (struct fg_ctx *)c;
  if (!fg_ctx_valid(ctx))
    return FG_EXIT(CUDA_ERROR_INVALID_CONTEXT);
  if (ctx->primary)
    return FG_EXIT(CUDA_ERROR_INVALID_CONTEXT);
  ctx_destroy(ctx);
  return FG_EXIT(CUDA_SUCCESS);
}

FG_API CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
  FG_ENTER(cuDevicePrimaryCtxRetain, NULL, pctx, dev);
  if (!fg_initialized())
    return FG_EXIT(CUDA_ERROR_NOT_INITIALIZED);
  if (!pctx)
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  if (dev < 0 || dev >= fg_device_count)
    return FG_EXIT(CUDA_ERROR_INVALID_DEVICE);
  pthread_mutex_lock(&fg_lock);
  struct fg_ctx *ctx = fg_devices[dev].primary;
  if (ctx)
    fg_devices[dev].primary_refs++;
  pthread_mutex_unlock(&fg_lock);
  if (!ctx) {
    /* Two threads racing here could both create one; the loser's context is destroyed. */
    struct fg_ctx *fresh = ctx_new(dev, 1, 0);
    if (!fresh)
      return FG_EXIT(CUDA_ERROR_OUT_OF_MEMORY);
    pthread_mutex_lock(&fg_lock);
    ctx = fg_devices[dev].primary;
    if (!ctx)
      fg_devices[dev].primary = ctx = fresh;
    fg_devices[dev].primary_refs++;
    pthread_mutex_unlock(&fg_lock);
    if (ctx != fresh) {
      fresh->primary = 0;
      ctx_destroy(fresh);
    }
  }
  *pctx = (CUcontext)ctx;
  return FG_EXIT(CUDA_SUCCESS);
}

FG_API CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
  FG_ENTER(cuDevicePrimaryCtxRelease_v2, NULL, dev);
  if (!fg_initialized())
    return FG_EXIT(CUDA_ERROR_NOT_INITIALIZED);
  if (dev < 0 || dev >= fg_device_count)
    return FG_EXIT(CUDA_ERROR_INVALID_DEVICE);
  pthread_mutex_lock(&fg_lock);
  struct fg_ctx *ctx = fg_devices[dev].primary;
  int last = ctx && --fg_devices[dev].primary_refs <= 0;
  pthread_mutex_unlock(&fg_lock);
  if (!ctx)
    return FG_EXIT(CUDA_ERROR_INVALID_CONTEXT);
  if (last)
    ctx_destroy(ctx);
  return FG_EXIT(CUDA_SUCCESS);
}

FG_API CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
  FG_ENTER(cuDevicePrimaryCtxReset_v2, NULL, dev);
  if (!fg_initialized())
    return FG_EXIT(CUDA_ERROR_NOT_INITIALIZED);
  if (dev < 0 || dev >= fg_device_count)
    return FG_EXIT(CUDA_ERROR_INVALID_DEVICE);
  pthread_mutex_lock(&fg_lock);
  struct fg_ctx *ctx = fg_devices[dev].primary;
  pthread_mutex_unlock(&fg_lock);
  if (ctx)
    ctx_destroy(ctx);
  return FG_EXIT(CUDA_SUCCESS);
}

FG_API CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
  FG_ENTER(cuDevicePrimaryCtxGetState, NULL, dev, flags, active);
  if (!fg_initialized())
    return FG_EXIT(CUDA_ERROR_NOT_INITIALIZED);
  if (dev < 0 || dev >= fg_device_count)
    return FG_EXIT(CUDA_ERROR_INVALID_DEVICE);
  if (!flags || !active)
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  pthread_mutex_lock(&fg_lock);
  *flags = 0;
  *active = fg_devices[dev].primary != NULL;
  pthread_mutex_unlock(&fg_lock);
  return FG_EXIT(CUDA_SUCCESS);
}

FG_API CUresult CUDAAPI cuCtxSetCurrent(CUcontext c)
{
  FG_ENTER(cuCtxSetCurrent, NULL, c);
  struct fg_ctx *ctx = (struct fg_ctx *)c;
  if (ctx && !fg_ctx_valid(ctx))
    return FG_EXIT(CUDA_ERROR_INVALID_CONTEXT);
  if (!ctx) {
    if (t_top > 0)
      t_top--;
  } else if (t_top > 0) {
    t_stack[t_top - 1] = ctx;
  } else {
    t_stack[t_top++] = ctx;
  }
  return FG_EXIT(CUDA_SUCCESS);
}

FG_API CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx)
{
  FG_ENTER(cuCtxGetCurrent, NULL, pctx);
  if (!pctx)
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  *pctx = (CUcontext)fg_ctx_current();
  return FG_EXIT(CUDA_SUCCESS);
}

FG_API CUresult CUDAAPI cuCtxPushCurrent_v2(CUcontext c)
{
  FG_ENTER(cuCtxPushCurrent_v2, NULL, c);
  struct fg_ctx *ctx = (struct fg_ctx *)c;
  if (!fg_ctx_valid(ctx))
    return FG_EXIT(CUDA_ERROR_INVALID_CONTEXT);
  if (t_top >= FG_MAX_STACK)
    return FG_EXIT(CUDA_ERROR_OUT_OF_MEMORY);
  t_stack[t_top++] = ctx;
  return FG_EXIT(CUDA_SUCCESS);
}

FG_API CUresult CUDAAPI cuCtxPopCurrent_v2(CUcontext *pctx)
{
  FG_ENTER(cuCtxPopCurrent_v2, NULL, pctx);
  if (t_top <= 0)
    return FG_EXIT(CUDA_ERROR_INVALID_CONTEXT);
  struct fg_ctx *ctx = t_stack[--t_top];
  if (pctx)
    *pctx = (CUcontext)ctx;
  return FG_EXIT(CUDA_SUCCESS);
}

FG_API CUresult CUDAAPI cuCtxGetDevice(CUdevice *device)
{
  FG_ENTER(cuCtxGetDevice, NULL, device);
  struct fg_ctx *ctx;
  CUresult r = current_ctx(&ctx);
  if (r == CUDA_SUCCESS && !device)
    r = CUDA_ERROR_INVALID_VALUE;
  if (r == CUDA_SUCCESS)
    *device = ctx->device;
  return FG_EXIT(r);
}

FG_API CUresult CUDAAPI cuCtxGetId(CUcontext c, unsigned long long *ctxId)
{
  FG_ENTER(cuCtxGetId, NULL, c, ctxId);
  struct fg_ctx *ctx = c ? (struct fg_ctx *)c : fg_ctx_current();
  if (!fg_ctx_valid(ctx))
    return FG_EXIT(CUDA_ERROR_INVALID_CONTEXT);
  if (!ctxId)
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  *ctxId = ctx->uid;
  return FG_EXIT(CUDA_SUCCESS);
}

static CUresult ctx_sync(struct fg_ctx *ctx)
{
  uint64_t start = fg_now();
  pthread_mutex_lock(&fg_lock);
  uint64_t idle = fg_ctx_idle(ctx);
  pthread_mutex_unlock(&fg_lock);
  fg_sleep_until(idle);
  sync_record(CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE, ctx, NULL,
              CUPTI_SYNCHRONIZATION_INVALID_VALUE, start, CUDA_SUCCESS);
  fg_sync_callback(CUPTI_CBID_SYNCHRONIZE_CONTEXT_SYNCHRONIZED, ctx, NULL);
  return CUDA_SUCCESS;
}

FG_API CUresult CUDAAPI cuCtxSynchronize(void)
{
  FG_ENTER0(cuCtxSynchronize);
  struct fg_ctx *ctx;
  CUresult r = current_ctx(&ctx);
  if (r == CUDA_SUCCESS)
    r = ctx_sync(ctx);
  return FG_EXIT(r);
}

FG_API CUresult CUDAAPI cuCtxSynchronize_v2(CUcontext c)
{
  FG_ENTER(cuCtxSynchronize_v2, NULL, c);
  struct fg_ctx *ctx = c ? (struct fg_ctx *)c : fg_ctx_current();
  if (!fg_ctx_valid(ctx))
    return FG_EXIT(CUDA_ERROR_INVALID_CONTEXT);
  return FG_EXIT(ctx_sync(ctx));
}

/* ---- streams ---- */

static CUresult stream_create(CUstream *ph, unsigned flags, int priority)
{
  struct fg_ctx *ctx;
  CUresult r = current_ctx(&ctx);
  if (r != CUDA_SUCCESS)
    return r;
  if (!ph || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
    return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&fg_lock);
  struct fg_stream *s = stream_new(ctx, flags, priority, 0);
  pthread_mutex_unlock(&fg_lock);
  if (!s)
    return CUDA_ERROR_OUT_OF_MEMORY;
  *ph = (CUstream)s;
  fg_stream_record(s, 0);
  fg_resource(CUPTI_CBID_RESOURCE_STREAM_CREATED, ctx, s, NULL);
  return CUDA_SUCCESS;
}

FG_API CUresult CUDAAPI cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
  FG_ENTER(cuStreamCreate, NULL, phStream, Flags);
  return FG_EXIT(stream_create(phStream, Flags, 0));
}

FG_API CUresult CUDAAPI cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags,
                                                   int priority)
{
  FG_ENTER(cuStreamCreateWithPriority, NULL, phStream, flags, priority);
  /* Valid priorities are [-5, 0] on Hopper; others are clamped as the driver does. */
  if (priority < -5)
    priority = -5;
  if (priority > 0)
    priority = 0;
  return FG_EXIT(stream_create(phStream, flags, priority));
}

FG_API CUresult CUDAAPI cuStreamDestroy_v2(CUstream hStream)
{
  FG_ENTER(cuStreamDestroy_v2, NULL, hStream);
  struct fg_stream *s = (struct fg_stream *)hStream;
  if (!s || hStream == CU_STREAM_LEGACY || hStream == CU_STREAM_PER_THREAD ||
      s->magic != STREAM_MAGIC || s->per_thread)
    return FG_EXIT(CUDA_ERROR_INVALID_HANDLE);
  fg_resource(CUPTI_CBID_RESOURCE_STREAM_DESTROY_STARTING, s->ctx, s, NULL);
  s->magic = 0;
  return FG_EXIT(CUDA_SUCCESS);
}

static CUresult stream_sync(CUstream h, int ptsz)
{
  struct fg_stream *s;
  CUresult r = fg_stream_resolve(h, ptsz, &s);
  if (r != CUDA_SUCCESS)
    return r;
  if (s->capture)
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  uint64_t start = fg_now();
  pthread_mutex_lock(&fg_lock);
  uint64_t t = stream_ready(s);
  pthread_mutex_unlock(&fg_lock);
  fg_sleep_until(t);
  sync_record(CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE, s->ctx, s,
              CUPTI_SYNCHRONIZATION_INVALID_VALUE, start, CUDA_SUCCESS);
  fg_sync_callback(CUPTI_CBID_SYNCHRONIZE_STREAM_SYNCHRONIZED, s->ctx, h);
  return CUDA_SUCCESS;
}

FG_API CUresult CUDAAPI cuStreamSynchronize(CUstream hStream)
{
  FG_ENTER(cuStreamSynchronize, NULL, hStream);
  return FG_EXIT(stream_sync(hStream, 0));
}

FG_API CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream hStream)
{
  FG_ENTER(cuStreamSynchronize_ptsz, NULL, hStream);
  return FG_EXIT(stream_sync(hStream, 1));
}

static CUresult stream_query(CUstream h, int ptsz)
{
  struct fg_stream *s;
  CUresult r = fg_stream_resolve(h, ptsz, &s);
  if (r != CUDA_SUCCESS)
    return r;
  pthread_mutex_lock(&fg_lock);
  uint64_t t = stream_ready(s);
  pthread_mutex_unlock(&fg_lock);
  return fg_realtime_ns() >= t ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

FG_API CUresult CUDAAPI cuStreamQuery(CUstream hStream)
{
  FG_ENTER(cuStreamQuery, NULL, hStream);
  return FG_EXIT(stream_query(hStream, 0));
}

FG_API CUresult CUDAAPI cuStreamQuery_ptsz(CUstream hStream)
{
  FG_ENTER(cuStreamQuery_ptsz, NULL, hStream);
  return FG_EXIT(stream_query(hStream, 1));
}

/* The stream a cuStreamGet* call asks about; its output pointer must not be NULL. */
static CUresult stream_for_getter(CUstream h, const void *out, struct fg_stream **s)
{
  CUresult r = fg_stream_resolve(h, 0, s);
  return r == CUDA_SUCCESS && !out ? CUDA_ERROR_INVALID_VALUE : r;
}

FG_API CUresult CUDAAPI cuStreamGetId(CUstream hStream, unsigned long long *streamId)
{
  FG_ENTER(cuStreamGetId, NULL, hStream, streamId);
  struct fg_stream *s;
  CUresult r = stream_for_getter(hStream, streamId, &s);
  if (r == CUDA_SUCCESS)
    *streamId = s->id;
  return FG_EXIT(r);
}

FG_API CUresult CUDAAPI cuStreamGetCtx(CUstream hStream, CUcontext *pctx)
{
  FG_ENTER(cuStreamGetCtx, NULL, hStream, pctx);
  struct fg_stream *s;
  CUresult r = stream_for_getter(hStream, pctx, &s);
  if (r == CUDA_SUCCESS)
    *pctx = (CUcontext)s->ctx;
  return FG_EXIT(r);
}

FG_API CUresult CUDAAPI cuStreamGetPriority(CUstream hStream, int *priority)
{
  FG_ENTER(cuStreamGetPriority, NULL, hStream, priority);
  struct fg_stream *s;
  CUresult r = stream_for_getter(hStream, priority, &s);
  if (r == CUDA_SUCCESS)
    *priority = s->priority;
  return FG_EXIT(r);
}

FG_API CUresult CUDAAPI cuStreamGetFlags(CUstream hStream, unsigned int *flags)
{
  FG_ENTER(cuStreamGetFlags, NULL, hStream, flags);
  struct fg_stream *s;
  CUresult r = stream_for_getter(hStream, flags, &s);
  if (r == CUDA_SUCCESS)
    *flags = s->flags;
  return FG_EXIT(r);
}

/* ---- events ---- */

FG_API CUresult CUDAAPI cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
  FG_ENTER(cuEventCreate, NULL, phEvent, Flags);
  struct fg_ctx *ctx;
  CUresult r = current_ctx(&ctx);
  if (r != CUDA_SUCCESS)
    return FG_EXIT(r);
  if (!phEvent)
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  struct fg_event *ev = calloc(1, sizeof(*ev));
  if (!ev)
    return FG_EXIT(CUDA_ERROR_OUT_OF_MEMORY);
  ev->magic = EVENT_MAGIC;
  ev->flags = Flags;
  ev->ctx = ctx;
  pthread_mutex_lock(&fg_lock);
  ev->id = g_next_event_id++;
  ev->next = g_events;
  g_events = ev;
  pthread_mutex_unlock(&fg_lock);
  *phEvent = (CUevent)ev;
  return FG_EXIT(CUDA_SUCCESS);
}

static struct fg_event *event_get(CUevent h)
{
  struct fg_event *ev = (struct fg_event *)h;
  return ev && ev->magic == EVENT_MAGIC ? ev : NULL;
}

static CUresult event_record(CUevent h, CUstream hs, int ptsz)
{
  struct fg_event *ev = event_get(h);
  if (!ev)
    return CUDA_ERROR_INVALID_HANDLE;
  struct fg_stream *s;
  CUresult r = fg_stream_resolve(hs, ptsz, &s);
  if (r != CUDA_SUCCESS)
    return r;
  pthread_mutex_lock(&fg_lock);
  uint64_t t = stream_ready(s);
  uint64_t now = fg_realtime_ns();
  ev->time = t > now ? t : now;
  ev->recorded = 1;
  pthread_mutex_unlock(&fg_lock);
  return CUDA_SUCCESS;
}

FG_API CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream)
{
  FG_ENTER(cuEventRecord, NULL, hEvent, hStream);
  return FG_EXIT(event_record(hEvent, hStream, 0));
}

FG_API CUresult CUDAAPI cuEventRecord_ptsz(CUevent hEvent, CUstream hStream)
{
  FG_ENTER(cuEventRecord_ptsz, NULL, hEvent, hStream);
  return FG_EXIT(event_record(hEvent, hStream, 1));
}

FG_API CUresult CUDAAPI cuEventSynchronize(CUevent hEvent)
{
  FG_ENTER(cuEventSynchronize, NULL, hEvent);
  struct fg_event *ev = event_get(hEvent);
  if (!ev)
    return FG_EXIT(CUDA_ERROR_INVALID_HANDLE);
  uint64_t start = fg_now();
  fg_sleep_until(ev->time);
  sync_record(CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE, ev->ctx, NULL, ev->id,
              start, CUDA_SUCCESS);
  return FG_EXIT(CUDA_SUCCESS);
}

FG_API CUresult CUDAAPI cuEventQuery(CUevent hEvent)
{
  FG_ENTER(cuEventQuery, NULL, hEvent);
  struct fg_event *ev = event_get(hEvent);
  if (!ev)
    return FG_EXIT(CUDA_ERROR_INVALID_HANDLE);
  return FG_EXIT(fg_realtime_ns() >= ev->time ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY);
}

FG_API CUresult CUDAAPI cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
  FG_ENTER(cuEventElapsedTime_v2, NULL, pMilliseconds, hStart, hEnd);
  struct fg_event *a = event_get(hStart), *b = event_get(hEnd);
  if (!a || !b || !a->recorded || !b->recorded)
    return FG_EXIT(CUDA_ERROR_INVALID_HANDLE);
  if (!pMilliseconds)
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  uint64_t now = fg_realtime_ns();
  if (now < a->time || now < b->time)
    return FG_EXIT(CUDA_ERROR_NOT_READY);
  *pMilliseconds = (float)((double)((int64_t)(b->time - a->time)) / 1e6);
  return FG_EXIT(CUDA_SUCCESS);
}

FG_API CUresult CUDAAPI cuEventDestroy_v2(CUevent hEvent)
{
  FG_ENTER(cuEventDestroy_v2, NULL, hEvent);
  struct fg_event *ev = event_get(hEvent);
  if (!ev)
    return FG_EXIT(CUDA_ERROR_INVALID_HANDLE);
  ev->magic = 0;
  return FG_EXIT(CUDA_SUCCESS);
}

static CUresult stream_wait_event(CUstream hs, CUevent he, int ptsz)
{
  struct fg_event *ev = event_get(he);
  if (!ev)
    return CUDA_ERROR_INVALID_HANDLE;
  struct fg_stream *s;
  CUresult r = fg_stream_resolve(hs, ptsz, &s);
  if (r != CUDA_SUCCESS)
    return r;
  uint64_t start = fg_now();
  pthread_mutex_lock(&fg_lock);
  if (ev->recorded && ev->time > s->tail)
    s->tail = ev->time;
  pthread_mutex_unlock(&fg_lock);
  sync_record(CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT, s->ctx, s, ev->id, start,
              CUDA_SUCCESS);
  return CUDA_SUCCESS;
}

FG_API CUresult CUDAAPI cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
  FG_ENTER(cuStreamWaitEvent, NULL, hStream, hEvent, Flags);
  return FG_EXIT(stream_wait_event(hStream, hEvent, 0));
}

FG_API CUresult CUDAAPI cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent,
                                               unsigned int Flags)
{
  FG_ENTER(cuStreamWaitEvent_ptsz, NULL, hStream, hEvent, Flags);
  return FG_EXIT(stream_wait_event(hStream, hEvent, 1));
}

/* ---- peer access (bookkeeping only: peer copies work either way) ---- */

static CUresult peer_access(CUcontext peer, int enable)
{
  struct fg_ctx *ctx;
  CUresult r = current_ctx(&ctx);
  if (r != CUDA_SUCCESS)
    return r;
  struct fg_ctx *p = (struct fg_ctx *)peer;
  if (!fg_ctx_valid(p))
    return CUDA_ERROR_INVALID_CONTEXT;
  if (p->device == ctx->device)
    return CUDA_ERROR_INVALID_DEVICE;
  uint64_t bit = 1ull << (p->uid % 64);
  pthread_mutex_lock(&fg_lock);
  int on = (ctx->peers & bit) != 0;
  if (enable && on)
    r = CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
  else if (!enable && !on)
    r = CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
  else
    ctx->peers ^= bit;
  pthread_mutex_unlock(&fg_lock);
  return r;
}

FG_API CUresult CUDAAPI cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags)
{
  FG_ENTER(cuCtxEnablePeerAccess, NULL, peerContext, Flags);
  if (Flags)
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  return FG_EXIT(peer_access(peerContext, 1));
}

FG_API CUresult CUDAAPI cuCtxDisablePeerAccess(CUcontext peerContext)
{
  FG_ENTER(cuCtxDisablePeerAccess, NULL, peerContext);
  return FG_EXIT(peer_access(peerContext, 0));
}
