/* Executes work on a stream: moves bytes, advances the timeline, writes GPU activity records. */
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fakegpu/driver.h"

/*
 * Data effects happen at submission (the bytes are in place when the API returns); only the
 * timing is simulated. Durations: kernels per fg_kernel_duration; copies and sets take a
 * fixed latency plus bytes / bandwidth of their direction (GB/s == bytes/ns):
 */
#define COPY_LATENCY_NS 1500
#define SET_LATENCY_NS 1000
#define BW_PINNED 25      /* HtoD / DtoH with pinned host memory */
#define BW_PAGEABLE 12    /* HtoD / DtoH with pageable host memory (staged) */
#define BW_DTOD 1000      /* within a device */
#define BW_PTOP 50        /* between devices */
#define BW_HTOH 10
#define BW_SET 1000

static atomic_llong g_grid_id;

static int is_dev(enum fg_mem_class c) { return c == FG_MEM_DEVICE || c == FG_MEM_MANAGED; }

static uint8_t cupti_mem_kind(enum fg_mem_class c)
{
  switch (c) {
  case FG_MEM_PINNED: return CUPTI_ACTIVITY_MEMORY_KIND_PINNED;
  case FG_MEM_DEVICE: return CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  case FG_MEM_MANAGED: return CUPTI_ACTIVITY_MEMORY_KIND_MANAGED;
  default: return CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE;
  }
}

static uint32_t channel_of(const struct fg_stream *s) { return s->id % 32; }

static void kernel_record(const struct fg_stream *s, const struct fg_op *op, uint64_t start,
                          uint64_t end, int64_t grid_id, uint32_t corr,
                          const struct fg_graph_ref *g)
{
  CUpti_ActivityKind kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  if (fg_kind_on(CUPTI_ACTIVITY_KIND_KERNEL, s->ctx))
    kind = CUPTI_ACTIVITY_KIND_KERNEL;
  else if (!fg_kind_on(kind, s->ctx))
    return;
  const struct fg_func *f = op->func;
  CUpti_ActivityKernel10 r;
  memset(&r, 0, sizeof(r));
  r.kind = kind;
  r.sharedMemoryConfig = 1;
  r.registersPerThread = (uint16_t)(f->num_regs > 0 ? f->num_regs : 32);
  r.start = fg_gpu_ts(start);
  r.end = fg_gpu_ts(end);
  r.completed = r.end;
  r.deviceId = (uint32_t)s->ctx->device;
  r.contextId = s->ctx->uid;
  r.streamId = s->id;
  r.gridX = (int32_t)op->grid[0];
  r.gridY = (int32_t)op->grid[1];
  r.gridZ = (int32_t)op->grid[2];
  r.blockX = (int32_t)op->block[0];
  r.blockY = (int32_t)op->block[1];
  r.blockZ = (int32_t)op->block[2];
  r.staticSharedMemory = f->static_smem;
  r.dynamicSharedMemory = (int32_t)op->smem;
  r.correlationId = corr;
  r.gridId = grid_id;
  r.name = f->name;
  r.launchType = op->launch_type;
  r.sharedMemoryExecuted = (uint32_t)f->static_smem + op->smem;
  r.graphNodeId = g ? g->node_id : 0;
  r.graphId = g ? g->graph_id : 0;
  r.channelID = channel_of(s);
  r.channelType = CUPTI_CHANNEL_TYPE_COMPUTE;
  r.clusterX = op->cluster[0];
  r.clusterY = op->cluster[1];
  r.clusterZ = op->cluster[2];
  fg_emit(&r, sizeof(r), end);
}

struct copy_info {
  enum fg_mem_class src_cls, dst_cls;
  int src_dev, dst_dev;
  uint32_t src_ctx, dst_ctx;
};

static uint8_t copy_kind(const struct copy_info *c)
{
  int sd = is_dev(c->src_cls), dd = is_dev(c->dst_cls);
  if (sd && dd)
    return c->src_dev == c->dst_dev ? CUPTI_ACTIVITY_MEMCPY_KIND_DTOD
                                    : CUPTI_ACTIVITY_MEMCPY_KIND_PTOP;
  if (sd)
    return CUPTI_ACTIVITY_MEMCPY_KIND_DTOH;
  if (dd)
    return CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
  return CUPTI_ACTIVITY_MEMCPY_KIND_HTOH;
}

static uint64_t copy_duration(const struct copy_info *c, uint64_t bytes)
{
  uint64_t bw;
  switch (copy_kind(c)) {
  case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: bw = BW_DTOD; break;
  case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: bw = BW_PTOP; break;
  case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: bw = BW_HTOH; break;
  case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
    bw = c->src_cls == FG_MEM_PINNED ? BW_PINNED : BW_PAGEABLE;
    break;
  default: bw = c->dst_cls == FG_MEM_PINNED ? BW_PINNED : BW_PAGEABLE; break;
  }
  return COPY_LATENCY_NS + bytes / bw;
}

/* Peer copies are MEMCPY2 (MemcpyPtoP4) records when that kind is on; with only MEMCPY on
 * they appear as Memcpy6 records of copyKind PTOP. Never both. */
static void copy_record(const struct fg_stream *s, const struct copy_info *c, uint64_t bytes,
                        int async, uint64_t start, uint64_t end, const struct fg_graph_ref *g)
{
  uint8_t kind = copy_kind(c);
  uint32_t corr = g ? g->corr : fg_corr_current();
  uint32_t rt_corr = g ? g->runtime_corr : fg_corr_runtime();
  if (kind == CUPTI_ACTIVITY_MEMCPY_KIND_PTOP && fg_kind_on(CUPTI_ACTIVITY_KIND_MEMCPY2, s->ctx)) {
    CUpti_ActivityMemcpyPtoP4 r;
    memset(&r, 0, sizeof(r));
    r.kind = CUPTI_ACTIVITY_KIND_MEMCPY2;
    r.copyKind = kind;
    r.srcKind = cupti_mem_kind(c->src_cls);
    r.dstKind = cupti_mem_kind(c->dst_cls);
    r.flags = async ? CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC : 0;
    r.bytes = bytes;
    r.start = fg_gpu_ts(start);
    r.end = fg_gpu_ts(end);
    r.deviceId = (uint32_t)s->ctx->device;
    r.contextId = s->ctx->uid;
    r.streamId = s->id;
    r.srcDeviceId = (uint32_t)c->src_dev;
    r.srcContextId = c->src_ctx;
    r.dstDeviceId = (uint32_t)c->dst_dev;
    r.dstContextId = c->dst_ctx;
    r.correlationId = corr;
    r.graphNodeId = g ? g->node_id : 0;
    r.graphId = g ? g->graph_id : 0;
    r.channelID = channel_of(s);
    r.channelType = CUPTI_CHANNEL_TYPE_ASYNC_MEMCPY;
    fg_emit(&r, sizeof(r), end);
    return;
  }
  if (!fg_kind_on(CUPTI_ACTIVITY_KIND_MEMCPY, s->ctx))
    return;
  CUpti_ActivityMemcpy6 r;
  memset(&r, 0, sizeof(r));
  r.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  r.copyKind = kind;
  r.srcKind = cupti_mem_kind(c->src_cls);
  r.dstKind = cupti_mem_kind(c->dst_cls);
  r.flags = async ? CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC : 0;
  r.bytes = bytes;
  r.start = fg_gpu_ts(start);
  r.end = fg_gpu_ts(end);
  r.deviceId = (uint32_t)s->ctx->device;
  r.contextId = s->ctx->uid;
  r.streamId = s->id;
  r.correlationId = corr;
  r.runtimeCorrelationId = rt_corr;
  r.graphNodeId = g ? g->node_id : 0;
  r.graphId = g ? g->graph_id : 0;
  r.channelID = channel_of(s);
  r.channelType = CUPTI_CHANNEL_TYPE_ASYNC_MEMCPY;
  r.copyCount = 1;
  fg_emit(&r, sizeof(r), end);
}

static void set_record(const struct fg_stream *s, const struct fg_op *op, enum fg_mem_class cls,
                       int async, uint64_t start, uint64_t end, const struct fg_graph_ref *g)
{
  if (!fg_kind_on(CUPTI_ACTIVITY_KIND_MEMSET, s->ctx))
    return;
  CUpti_ActivityMemset4 r;
  memset(&r, 0, sizeof(r));
  r.kind = CUPTI_ACTIVITY_KIND_MEMSET;
  r.value = op->value;
  r.bytes = op->bytes;
  r.start = fg_gpu_ts(start);
  r.end = fg_gpu_ts(end);
  r.deviceId = (uint32_t)s->ctx->device;
  r.contextId = s->ctx->uid;
  r.streamId = s->id;
  r.correlationId = g ? g->corr : fg_corr_current();
  r.flags = async ? CUPTI_ACTIVITY_FLAG_MEMSET_ASYNC : 0;
  r.memoryKind = cupti_mem_kind(cls);
  r.graphNodeId = g ? g->node_id : 0;
  r.graphId = g ? g->graph_id : 0;
  r.channelID = channel_of(s);
  r.channelType = CUPTI_CHANNEL_TYPE_ASYNC_MEMCPY;
  fg_emit(&r, sizeof(r), end);
}

static void fill(uint64_t dst, uint32_t value, unsigned elem, uint64_t count)
{
  if (elem == 1) {
    memset((void *)(uintptr_t)dst, (int)(value & 0xff), count);
  } else if (elem == 2) {
    uint16_t *p = (uint16_t *)(uintptr_t)dst;
    for (uint64_t i = 0; i < count; i++)
      p[i] = (uint16_t)value;
  } else {
    uint32_t *p = (uint32_t *)(uintptr_t)dst;
    for (uint64_t i = 0; i < count; i++)
      p[i] = value;
  }
}

struct host_call {
  CUhostFn fn;
  void *arg;
  uint64_t at;
};

/* The driver runs host functions on its own thread once the stream reaches them. */
static void *host_thread(void *p)
{
  struct host_call hc = *(struct host_call *)p;
  free(p);
  fg_sleep_until(hc.at);
  hc.fn(hc.arg);
  return NULL;
}

static int spawn_host(CUhostFn fn, void *arg, uint64_t at)
{
  struct host_call *hc = malloc(sizeof(*hc));
  if (!hc)
    return -1;
  *hc = (struct host_call){fn, arg, at};
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_t t;
  int rc = pthread_create(&t, &attr, host_thread, hc);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    free(hc);
    return -1;
  }
  return 0;
}

static CUresult submit(struct fg_stream *s, const struct fg_op *op, int async,
                       const struct fg_graph_ref *g, uint64_t *start_out, uint64_t *end)
{
  uint64_t now, start;
  int records = !g || g->node_records;

  /* Graph nodes do not wait: a graph launch takes one place in the real queue, not one per
   * node (its nodes still count as queued work). */
  if (!g)
    fg_stream_wait_room(s);
  now = fg_realtime_ns();
  *start_out = now;
  switch (op->type) {
  case FG_OP_KERNEL: {
    uint64_t dur = fg_kernel_duration(op->func, op);
    int serial = fg_kind_on(CUPTI_ACTIVITY_KIND_KERNEL, s->ctx);
    pthread_mutex_lock(&fg_lock);
    struct fg_device *d = &fg_devices[s->ctx->device];
    /* The KERNEL kind serializes all kernels of a device (cupti.md 6.8). */
    uint64_t nb = serial && d->serial_tail > now ? d->serial_tail : now;
    start = *start_out = fg_stream_schedule(s, nb, dur, end);
    if (serial)
      d->serial_tail = *end;
    pthread_mutex_unlock(&fg_lock);
    int64_t grid = atomic_fetch_add(&g_grid_id, 1) + 1;
    if (records)
      kernel_record(s, op, start, *end, grid, g ? g->corr : fg_corr_current(), g);
    return CUDA_SUCCESS;
  }
  case FG_OP_MEMCPY: {
    struct copy_info c;
    uint64_t sspan = op->height ? op->spitch * (op->height - 1) + op->width : op->bytes;
    uint64_t dspan = op->height ? op->dpitch * (op->height - 1) + op->width : op->bytes;
    if (fg_mem_classify(op->src, sspan, &c.src_cls, &c.src_dev, &c.src_ctx) != 0 ||
        fg_mem_classify(op->dst, dspan, &c.dst_cls, &c.dst_dev, &c.dst_ctx) != 0)
      return CUDA_ERROR_INVALID_VALUE;
    if (op->src_device >= 0)
      c.src_dev = op->src_device;
    if (op->dst_device >= 0)
      c.dst_dev = op->dst_device;
    if (c.src_dev < 0)
      c.src_dev = s->ctx->device;
    if (c.dst_dev < 0)
      c.dst_dev = s->ctx->device;
    if (op->height) {
      for (uint64_t row = 0; row < op->height; row++)
        memmove((void *)(uintptr_t)(op->dst + row * op->dpitch),
                (const void *)(uintptr_t)(op->src + row * op->spitch), op->width);
    } else if (op->bytes) {
      memmove((void *)(uintptr_t)op->dst, (const void *)(uintptr_t)op->src, op->bytes);
    }
    pthread_mutex_lock(&fg_lock);
    start = *start_out = fg_stream_schedule(s, now, copy_duration(&c, op->bytes), end);
    pthread_mutex_unlock(&fg_lock);
    if (records)
      copy_record(s, &c, op->bytes, async, start, *end, g);
    return CUDA_SUCCESS;
  }
  case FG_OP_MEMSET: {
    enum fg_mem_class cls;
    int dev;
    uint32_t ctx_uid;
    if (fg_mem_classify(op->dst, op->bytes, &cls, &dev, &ctx_uid) != 0 || !is_dev(cls))
      return CUDA_ERROR_INVALID_VALUE;
    fill(op->dst, op->value, op->elem_size, op->bytes / op->elem_size);
    pthread_mutex_lock(&fg_lock);
    start = *start_out = fg_stream_schedule(s, now, SET_LATENCY_NS + op->bytes / BW_SET, end);
    pthread_mutex_unlock(&fg_lock);
    if (records)
      set_record(s, op, cls, async, start, *end, g);
    return CUDA_SUCCESS;
  }
  case FG_OP_HOST:
    pthread_mutex_lock(&fg_lock);
    start = *start_out = fg_stream_schedule(s, now, 0, end);
    pthread_mutex_unlock(&fg_lock);
    return spawn_host(op->host_fn, op->host_arg, start) == 0 ? CUDA_SUCCESS
                                                             : CUDA_ERROR_OUT_OF_MEMORY;
  }
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult fg_op_submit(struct fg_stream *s, const struct fg_op *op, int async,
                      const struct fg_graph_ref *g, uint64_t *start, uint64_t *end)
{
  uint64_t st, en = 0;
  CUresult r = submit(s, op, async, g, &st, &en);
  if (start)
    *start = st;
  if (end)
    *end = en;
  return r;
}
