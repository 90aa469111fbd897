/* Simulated CUPTI activity API: kinds, attributes, buffers, records, flushing, finalize. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "tests/fakegpu/cupti_internal.h"

/*
 * Buffers (cupti.md 7.4 items 4-8). With CUPTI_ACTIVITY_ATTR_PER_THREAD_ACTIVITY_BUFFER = 1
 * (the default) each producing thread owns a slot holding its current buffer; with 0 all
 * threads share one slot. A slot's buffer is requested lazily from the producing thread
 * when a record does not fit, with no lock held, so many threads can be inside the client's
 * request callback at once. Records are copied back to back at the size of their 13.0
 * struct. A buffer is complete when the simulated GPU has finished every record in it
 * (CLOCK_REALTIME past the latest end); full buffers wait on g_full until then and are
 * delivered by the worker thread, FlushAll(0) delivers every complete buffer, FORCED every
 * buffer (zeroing the timestamps of unfinished GPU records). g_lock guards slots and lists
 * and is never held across a client callback.
 */

#define UNKNOWN_KIND_BYTES 24   /* the unknown_kind fault's trailing record */
#define MAX_EXT_DEPTH 64
#define MAX_CTX_ENABLES 64
#define MAX_CBID 1024

struct mark {
  uint32_t off;
  uint64_t end;
};

struct buf {
  uint8_t *data;
  size_t size, used, nrec, maxrec;
  uint64_t complete;          /* CLOCK_REALTIME when every record is final */
  struct mark *marks;         /* GPU records: where they are and when they finish */
  size_t nmarks, capmarks;
  struct buf *next;
};

struct slot {
  struct buf *cur;
  unsigned gen;
  struct slot *next;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct slot *g_slots;
static struct slot g_shared;
static struct buf *g_full;
static struct buf *g_spare;
static struct buf *g_returned;     /* client buffers handed back unused */
static unsigned g_gen = 1;
static __thread struct slot *t_slot;
/* Shared mode asks for one buffer at a time; the other producers wait for it. A thread's
 * records made from inside its own request callback are dropped rather than recursing. */
static int g_shared_requesting;
static pthread_cond_t g_shared_cv = PTHREAD_COND_INITIALIZER;
static __thread int t_requesting;
/* Inside the client's completion callback on this thread (deliver). */
static __thread int t_completing;

static _Atomic(CUpti_BuffersCallbackRequestFunc) g_request;
static _Atomic(CUpti_BuffersCallbackCompleteFunc) g_complete;
/* The process that registered the buffer callbacks: a child forked after that inherits the
 * state but none of CUPTI's threads (cupti.md 6.3). */
static _Atomic pid_t g_registered_pid;
static _Atomic(CUpti_TimestampCallbackFunc) g_tscb;
static atomic_size_t g_dropped;

static atomic_uchar g_kind[CUPTI_ACTIVITY_KIND_COUNT];
static atomic_int g_nkinds;
static struct {
  uint32_t uid;
  uint8_t kinds[CUPTI_ACTIVITY_KIND_COUNT];
} g_ctx_en[MAX_CTX_ENABLES];
static atomic_int g_any_ctx_en;
static pthread_mutex_t g_en_lock = PTHREAD_MUTEX_INITIALIZER;
/* Per-API record selection for DRIVER (index 0) and RUNTIME (1): 0 unset, 1 on, 2 off. */
static atomic_uchar g_api_sel[2][MAX_CBID];

static atomic_int g_thread_id_type;
static size_t g_attr_size[11] = {3200000, 8388608, 250, 0, 0, 0, 3, 0, 0, 0, 16777216};
static uint8_t g_attr_u8[11] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0};
static atomic_int g_per_thread = 1;

/* worker thread */
static pthread_mutex_t g_worker_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_worker_cond = PTHREAD_COND_INITIALIZER;
static pthread_t g_worker;
static int g_worker_running;
static int g_worker_stop;
static pid_t g_worker_pid;
static uint32_t g_period_ms;

static __thread struct {
  uint64_t ids[MAX_EXT_DEPTH];
  int depth;
} t_ext[CUPTI_EXTERNAL_CORRELATION_KIND_SIZE];

static uint64_t realtime(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t cu_now(void)
{
  CUpti_TimestampCallbackFunc f = atomic_load(&g_tscb);
  return f ? f() : realtime();
}

uint64_t cu_gpu_ts(uint64_t rt)
{
  if (cu_fault.zero_timestamps)
    return 0;
  CUpti_TimestampCallbackFunc f = atomic_load(&g_tscb);
  if (!f)
    return rt;
  uint64_t now_rt = realtime();
  return f() + (rt - now_rt);
}

static uint32_t thread_id(void)
{
  if (atomic_load(&g_thread_id_type) == CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM)
    return (uint32_t)syscall(SYS_gettid);
  return (uint32_t)pthread_self();
}

/* ---- enables ---- */

int cu_any_kind(void) { return atomic_load(&g_nkinds) > 0 || atomic_load(&g_any_ctx_en); }

/*
 * Test introspection, not a CUPTI API (the real library cannot list its enables): whether
 * activity `kind` is enabled now, globally (1), only for some context (2), or not (0); and
 * for kind DRIVER/RUNTIME, how many per-API selections (cuptiActivityEnableDriverApi /
 * RuntimeApi) are on (*api_on). Read-only: tests/capture/leak_workload.c checks that a tool
 * switched off what it switched on.
 */
CU_API int fakegpu_cupti_kind_enabled(int kind, int *api_on);
CU_API int fakegpu_cupti_kind_enabled(int kind, int *api_on)
{
  int on = 0;

  if (api_on)
    *api_on = 0;
  if (kind < 0 || kind >= CUPTI_ACTIVITY_KIND_COUNT)
    return 0;
  if (atomic_load(&g_kind[kind]))
    on = 1;
  pthread_mutex_lock(&g_en_lock);
  for (int i = 0; !on && i < MAX_CTX_ENABLES; i++)
    if (g_ctx_en[i].uid && g_ctx_en[i].kinds[kind])
      on = 2;
  pthread_mutex_unlock(&g_en_lock);
  if (api_on && (kind == CUPTI_ACTIVITY_KIND_DRIVER || kind == CUPTI_ACTIVITY_KIND_RUNTIME))
    for (uint32_t cbid = 0; cbid < MAX_CBID; cbid++)
      *api_on += atomic_load(&g_api_sel[kind == CUPTI_ACTIVITY_KIND_RUNTIME][cbid]) == 1;
  return on;
}

int cu_kind_enabled(CUpti_ActivityKind kind, uint32_t ctx_uid)
{
  if ((unsigned)kind >= CUPTI_ACTIVITY_KIND_COUNT)
    return 0;
  if (atomic_load_explicit(&g_kind[kind], memory_order_relaxed))
    return 1;
  if (!ctx_uid || !atomic_load(&g_any_ctx_en))
    return 0;
  int on = 0;
  pthread_mutex_lock(&g_en_lock);
  for (int i = 0; i < MAX_CTX_ENABLES; i++)
    if (g_ctx_en[i].uid == ctx_uid)
      on = g_ctx_en[i].kinds[kind];
  pthread_mutex_unlock(&g_en_lock);
  return on;
}

int cu_api_enabled(CUpti_ActivityKind kind, CUpti_CallbackId cbid)
{
  int d = kind == CUPTI_ACTIVITY_KIND_RUNTIME;
  uint8_t sel = cbid < MAX_CBID ? atomic_load(&g_api_sel[d][cbid]) : 0;
  if (atomic_load(&g_kind[kind]))
    return sel != 2;
  return sel == 1;
}

static CUptiResult check_kind(CUpti_ActivityKind kind)
{
  switch ((int)kind) {
  case CUPTI_ACTIVITY_KIND_SOURCE_LOCATOR:
  case CUPTI_ACTIVITY_KIND_GLOBAL_ACCESS:
  case CUPTI_ACTIVITY_KIND_BRANCH:
  case CUPTI_ACTIVITY_KIND_INSTRUCTION_EXECUTION:
  case CUPTI_ACTIVITY_KIND_SHARED_ACCESS:
  case CUPTI_ACTIVITY_KIND_PC_SAMPLING:
  case CUPTI_ACTIVITY_KIND_PC_SAMPLING_RECORD_INFO:
  case CUPTI_ACTIVITY_KIND_INSTRUCTION_CORRELATION:
  case CUPTI_ACTIVITY_KIND_EVENT:
  case CUPTI_ACTIVITY_KIND_METRIC:
  case CUPTI_ACTIVITY_KIND_EVENT_INSTANCE:
  case CUPTI_ACTIVITY_KIND_METRIC_INSTANCE:
  case CUPTI_ACTIVITY_KIND_INSTANTANEOUS_EVENT:
  case CUPTI_ACTIVITY_KIND_INSTANTANEOUS_EVENT_INSTANCE:
  case CUPTI_ACTIVITY_KIND_INSTANTANEOUS_METRIC:
  case CUPTI_ACTIVITY_KIND_INSTANTANEOUS_METRIC_INSTANCE:
    return CUPTI_ERROR_LEGACY_PROFILER_NOT_SUPPORTED;
  case CUPTI_ACTIVITY_KIND_CDP_KERNEL:
    return CUPTI_ERROR_INVALID_KIND; /* comes with CONCURRENT_KERNEL, never alone */
  default:
    return kind > 0 && kind < CUPTI_ACTIVITY_KIND_COUNT ? CUPTI_SUCCESS
                                                        : CUPTI_ERROR_INVALID_KIND;
  }
}

/* KERNEL serializes and CONCURRENT_KERNEL does not: they cannot be on together. MARKER_DATA
 * needs MARKER first (cupti.md 2.2). Both are this double's choice of error code. */
static CUptiResult check_compatible(CUpti_ActivityKind kind, const uint8_t *on)
{
  if (kind == CUPTI_ACTIVITY_KIND_KERNEL && on[CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL])
    return CUPTI_ERROR_NOT_COMPATIBLE;
  if (kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && on[CUPTI_ACTIVITY_KIND_KERNEL])
    return CUPTI_ERROR_NOT_COMPATIBLE;
  if (kind == CUPTI_ACTIVITY_KIND_MARKER_DATA && !on[CUPTI_ACTIVITY_KIND_MARKER])
    return CUPTI_ERROR_NOT_COMPATIBLE;
  return CUPTI_SUCCESS;
}

static CUptiResult enable(CUpti_ActivityKind kind)
{
  if (cu_fault.no_driver)
    return CUPTI_ERROR_UNKNOWN;
  if (cu_fault.kinds_refused)
    return CUPTI_ERROR_NOT_SUPPORTED;
  CUptiResult r = check_kind(kind);
  if (r != CUPTI_SUCCESS)
    return r;
  pthread_mutex_lock(&g_en_lock);
  uint8_t on[CUPTI_ACTIVITY_KIND_COUNT];
  for (int i = 0; i < CUPTI_ACTIVITY_KIND_COUNT; i++)
    on[i] = atomic_load(&g_kind[i]);
  r = check_compatible(kind, on);
  if (r == CUPTI_SUCCESS && !on[kind]) {
    if (kind == CUPTI_ACTIVITY_KIND_DRIVER || kind == CUPTI_ACTIVITY_KIND_RUNTIME)
      for (int c = 0; c < MAX_CBID; c++)
        atomic_store(&g_api_sel[kind == CUPTI_ACTIVITY_KIND_RUNTIME][c], 0);
    atomic_store(&g_kind[kind], 1);
    atomic_fetch_add(&g_nkinds, 1);
  }
  pthread_mutex_unlock(&g_en_lock);
  return r;
}

CU_API CUptiResult CUPTIAPI cuptiActivityEnable(CUpti_ActivityKind kind)
{
  return cu_ret(enable(kind));
}

CU_API CUptiResult CUPTIAPI cuptiActivityEnableAndDump(CUpti_ActivityKind kind)
{
  CUptiResult r = enable(kind);
  if (r == CUPTI_SUCCESS && cu_drv)
    cu_drv->dump(kind);
  return cu_ret(r);
}

CU_API CUptiResult CUPTIAPI cuptiActivityDisable(CUpti_ActivityKind kind)
{
  if (cu_fault.no_driver)
    return cu_ret(CUPTI_ERROR_UNKNOWN);
  CUptiResult r = check_kind(kind);
  if (r != CUPTI_SUCCESS)
    return cu_ret(r);
  pthread_mutex_lock(&g_en_lock);
  if (atomic_exchange(&g_kind[kind], 0))
    atomic_fetch_sub(&g_nkinds, 1);
  pthread_mutex_unlock(&g_en_lock);
  return CUPTI_SUCCESS;
}

/* Only device-side kinds can be enabled per context; the others answer INVALID_KIND, which
 * the official trace sample takes as "enable it globally instead" (cupti.md 1.2). */
static int per_context_kind(CUpti_ActivityKind k)
{
  return k == CUPTI_ACTIVITY_KIND_KERNEL || k == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL ||
         k == CUPTI_ACTIVITY_KIND_MEMCPY || k == CUPTI_ACTIVITY_KIND_MEMCPY2 ||
         k == CUPTI_ACTIVITY_KIND_MEMSET || k == CUPTI_ACTIVITY_KIND_MEMORY2 ||
         k == CUPTI_ACTIVITY_KIND_SYNCHRONIZATION || k == CUPTI_ACTIVITY_KIND_GRAPH_TRACE ||
         k == CUPTI_ACTIVITY_KIND_STREAM;
}

static CUptiResult context_enable(CUcontext ctx, CUpti_ActivityKind kind, uint8_t value)
{
  if (cu_fault.no_driver)
    return CUPTI_ERROR_UNKNOWN;
  uint32_t uid;
  if (!ctx || !cu_drv || cu_drv->context_id(ctx, &uid) != 0)
    return CUPTI_ERROR_INVALID_CONTEXT;
  CUptiResult r = check_kind(kind);
  if (r != CUPTI_SUCCESS)
    return r;
  if (!per_context_kind(kind))
    return CUPTI_ERROR_INVALID_KIND;
  pthread_mutex_lock(&g_en_lock);
  int slot = -1;
  for (int i = 0; i < MAX_CTX_ENABLES && slot < 0; i++)
    if (g_ctx_en[i].uid == uid)
      slot = i;
  for (int i = 0; i < MAX_CTX_ENABLES && slot < 0 && value; i++)
    if (!g_ctx_en[i].uid) {
      slot = i;
      g_ctx_en[i].uid = uid;
      memset(g_ctx_en[i].kinds, 0, sizeof(g_ctx_en[i].kinds));
    }
  if (slot >= 0) {
    r = value ? check_compatible(kind, g_ctx_en[slot].kinds) : CUPTI_SUCCESS;
    if (r == CUPTI_SUCCESS)
      g_ctx_en[slot].kinds[kind] = value;
    if (value)
      atomic_store(&g_any_ctx_en, 1);
  } else if (value) {
    r = CUPTI_ERROR_OUT_OF_MEMORY;
  }
  pthread_mutex_unlock(&g_en_lock);
  return r;
}

CU_API CUptiResult CUPTIAPI cuptiActivityEnableContext(CUcontext context, CUpti_ActivityKind kind)
{
  return cu_ret(context_enable(context, kind, 1));
}

CU_API CUptiResult CUPTIAPI cuptiActivityDisableContext(CUcontext context, CUpti_ActivityKind kind)
{
  return cu_ret(context_enable(context, kind, 0));
}

static CUptiResult api_select(int runtime, CUpti_CallbackId cbid, uint8_t enable)
{
  uint32_t n = runtime ? CUPTI_RUNTIME_TRACE_CBID_SIZE : CUPTI_DRIVER_TRACE_CBID_SIZE;
  if (cu_fault.no_driver)
    return CUPTI_ERROR_UNKNOWN;
  if (cbid == 0 || cbid >= n)
    return CUPTI_ERROR_INVALID_PARAMETER;
  atomic_store(&g_api_sel[runtime][cbid], enable ? 1 : 2);
  return CUPTI_SUCCESS;
}

CU_API CUptiResult CUPTIAPI cuptiActivityEnableDriverApi(CUpti_CallbackId cbid, uint8_t enable)
{
  return cu_ret(api_select(0, cbid, enable));
}

CU_API CUptiResult CUPTIAPI cuptiActivityEnableRuntimeApi(CUpti_CallbackId cbid, uint8_t enable)
{
  return cu_ret(api_select(1, cbid, enable));
}

/* ---- attributes ---- */

static int attr_is_u8(CUpti_ActivityAttribute a)
{
  return a == CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER ||
         a == CUPTI_ACTIVITY_ATTR_MEM_ALLOCATION_TYPE_HOST_PINNED ||
         a == CUPTI_ACTIVITY_ATTR_PER_THREAD_ACTIVITY_BUFFER;
}

CU_API CUptiResult CUPTIAPI cuptiActivitySetAttribute(CUpti_ActivityAttribute attr,
                                                      size_t *valueSize, void *value)
{
  if (cu_fault.no_driver)
    return cu_ret(CUPTI_ERROR_UNKNOWN);
  if (!valueSize || !value || (unsigned)attr > CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE_DEVICE_GRAPHS)
    return cu_ret(CUPTI_ERROR_INVALID_PARAMETER);
  if (attr == CUPTI_ACTIVITY_ATTR_PROFILING_SEMAPHORE_POOL_SIZE ||
      attr == CUPTI_ACTIVITY_ATTR_PROFILING_SEMAPHORE_POOL_LIMIT ||
      attr == CUPTI_ACTIVITY_ATTR_PROFILING_SEMAPHORE_PRE_ALLOCATE_VALUE)
    return cu_ret(CUPTI_ERROR_NOT_SUPPORTED); /* gone since CUDA 12.3 (cupti.md 2.7) */
  if (attr_is_u8(attr)) {
    if (*valueSize < sizeof(uint8_t))
      return cu_ret(CUPTI_ERROR_PARAMETER_SIZE_NOT_SUFFICIENT);
    g_attr_u8[attr] = *(uint8_t *)value;
    if (attr == CUPTI_ACTIVITY_ATTR_PER_THREAD_ACTIVITY_BUFFER)
      atomic_store(&g_per_thread, *(uint8_t *)value != 0);
  } else {
    if (*valueSize < sizeof(size_t))
      return cu_ret(CUPTI_ERROR_PARAMETER_SIZE_NOT_SUFFICIENT);
    g_attr_size[attr] = *(size_t *)value;
  }
  return CUPTI_SUCCESS;
}

CU_API CUptiResult CUPTIAPI cuptiActivityGetAttribute(CUpti_ActivityAttribute attr,
                                                      size_t *valueSize, void *value)
{
  if (cu_fault.no_driver)
    return cu_ret(CUPTI_ERROR_UNKNOWN);
  if (!valueSize || !value || (unsigned)attr > CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE_DEVICE_GRAPHS)
    return cu_ret(CUPTI_ERROR_INVALID_PARAMETER);
  if (attr_is_u8(attr)) {
    if (*valueSize < sizeof(uint8_t))
      return cu_ret(CUPTI_ERROR_PARAMETER_SIZE_NOT_SUFFICIENT);
    *(uint8_t *)value = g_attr_u8[attr];
    *valueSize = sizeof(uint8_t);
  } else {
    if (*valueSize < sizeof(size_t))
      return cu_ret(CUPTI_ERROR_PARAMETER_SIZE_NOT_SUFFICIENT);
    *(size_t *)value = g_attr_size[attr];
    *valueSize = sizeof(size_t);
  }
  return CUPTI_SUCCESS;
}

CU_API CUptiResult CUPTIAPI cuptiSetThreadIdType(CUpti_ActivityThreadIdType type)
{
  if ((unsigned)type >= CUPTI_ACTIVITY_THREAD_ID_TYPE_SIZE)
    return cu_ret(CUPTI_ERROR_INVALID_PARAMETER);
  atomic_store(&g_thread_id_type, (int)type);
  return CUPTI_SUCCESS;
}

CU_API CUptiResult CUPTIAPI cuptiGetThreadIdType(CUpti_ActivityThreadIdType *type)
{
  if (!type)
    return cu_ret(CUPTI_ERROR_INVALID_PARAMETER);
  *type = (CUpti_ActivityThreadIdType)atomic_load(&g_thread_id_type);
  return CUPTI_SUCCESS;
}

CU_API CUptiResult CUPTIAPI cuptiGetTimestamp(uint64_t *timestamp)
{
  if (!timestamp)
    return cu_ret(CUPTI_ERROR_INVALID_PARAMETER);
  *timestamp = cu_now();
  return CUPTI_SUCCESS;
}

/* Registered after the first enable it still applies, to later records only. */
CU_API CUptiResult CUPTIAPI cuptiActivityRegisterTimestampCallback(
    CUpti_TimestampCallbackFunc funcTimestamp)
{
  if (cu_fault.no_driver)
    return cu_ret(CUPTI_ERROR_UNKNOWN);
  if (!funcTimestamp)
    return cu_ret(CUPTI_ERROR_INVALID_PARAMETER);
  atomic_store(&g_tscb, funcTimestamp);
  return CUPTI_SUCCESS;
}

CU_API CUptiResult CUPTIAPI cuptiActivityRegisterCallbacks(
    CUpti_BuffersCallbackRequestFunc funcBufferRequested,
    CUpti_BuffersCallbackCompleteFunc funcBufferCompleted)
{
  if (!funcBufferRequested || !funcBufferCompleted)
    return cu_ret(CUPTI_ERROR_INVALID_PARAMETER);
  if (!atomic_load(&g_complete))
    atomic_store(&g_registered_pid, getpid());
  atomic_store(&g_request, funcBufferRequested);
  atomic_store(&g_complete, funcBufferCompleted);
  return CUPTI_SUCCESS;
}

CU_API CUptiResult CUPTIAPI cuptiActivityGetNumDroppedRecords(CUcontext context, uint32_t streamId,
                                                              size_t *dropped)
{
  (void)context;
  (void)streamId;
  if (!dropped)
    return cu_ret(CUPTI_ERROR_INVALID_PARAMETER);
  *dropped = atomic_exchange(&g_dropped, 0);
  return CUPTI_SUCCESS;
}

/* ---- rules the real library enforces by deadlocking ---- */

void cu_fatal(const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  fakegpu_fatalv(fmt, ap);
}

void cu_check_deadlock_site(const char *call, int flush)
{
  if (t_completing)
    cu_fatal("%s called from inside the buffer completion callback: the real CUPTI "
             "deadlocks there (cupti.md 2.5, 6.2)", call);
  if (t_requesting)
    cu_fatal("%s called from inside the buffer request callback: the real CUPTI "
             "deadlocks there (cupti.md 2.5, 6.2)", call);
  if (atomic_load(&g_complete) && atomic_load(&g_registered_pid) != getpid())
    cu_fatal("%s called in a child forked after the buffer callbacks were registered (in "
             "pid %d): the real CUPTI can hang there (cupti.md 6.3)", call,
             (int)atomic_load(&g_registered_pid));
  if (flush && cu_in_stream_destroy_callback())
    cu_fatal("%s called from inside a CUPTI_CBID_RESOURCE_STREAM_DESTROY_STARTING callback: "
             "the real CUPTI deadlocks there (cupti.md 2.5, 6.2)", call);
}

/* The client's buffer callback starts (1) or ends (0) on this thread: the driver then refuses
 * CUDA calls (cupti.md 6.2). */
static void client_code(int enter)
{
  if (cu_drv && cu_drv->client_code)
    cu_drv->client_code(enter);
}

/* ---- buffers ---- */

static size_t reserve(void) { return cu_fault.unknown_kind ? UNKNOWN_KIND_BYTES : 0; }

static int fits(const struct buf *b, size_t n)
{
  return b->used + n + reserve() <= b->size && (!b->maxrec || b->nrec < b->maxrec);
}

static int is_full(const struct buf *b)
{
  return (b->maxrec && b->nrec >= b->maxrec) || b->used + 24 + reserve() > b->size;
}

static void push(struct buf **list, struct buf *b)
{
  b->next = *list;
  *list = b;
}

static void worker_kick(void);

/* Under g_lock: the slot the calling thread appends to. */
static struct slot *slot_get(void)
{
  if (!atomic_load(&g_per_thread))
    return &g_shared;
  if (t_slot && t_slot->gen == g_gen)
    return t_slot;
  struct slot *s = calloc(1, sizeof(*s));
  if (!s)
    return NULL;
  s->gen = g_gen;
  s->next = g_slots;
  g_slots = s;
  t_slot = s;
  return s;
}

/* Hands a client buffer back unused (no_buffers fault, or too small for the record). */
static void give_back(uint8_t *p, size_t size)
{
  struct buf *b = calloc(1, sizeof(*b));
  if (!b)
    return;
  b->data = p;
  b->size = size;
  pthread_mutex_lock(&g_lock);
  push(&g_returned, b);
  pthread_mutex_unlock(&g_lock);
}

static void put_record(struct buf *b, const void *rec, size_t size, uint64_t complete)
{
  memcpy(b->data + b->used, rec, size);
  if (complete) {
    if (b->nmarks == b->capmarks) {
      size_t cap = b->capmarks ? b->capmarks * 2 : 64;
      struct mark *m = realloc(b->marks, cap * sizeof(*m));
      if (m) {
        b->marks = m;
        b->capmarks = cap;
      }
    }
    if (b->nmarks < b->capmarks)
      b->marks[b->nmarks++] = (struct mark){(uint32_t)b->used, complete};
    if (complete > b->complete)
      b->complete = complete;
  }
  b->used += size;
  b->nrec++;
}

/* Calls the client's request callback (no lock held). Returns NULL when it declines. */
static struct buf *request_buffer(size_t need)
{
  CUpti_BuffersCallbackRequestFunc req = atomic_load(&g_request);
  if (!req)
    return NULL;
  uint8_t *p = NULL;
  size_t size = 0, maxrec = 0;
  uint64_t t0 = cu_now();
  client_code(1);
  req(&p, &size, &maxrec);
  client_code(0);
  uint64_t t1 = cu_now();
  if (!p)
    return NULL;
  if (cu_fault.no_buffers || size < need + reserve()) {
    give_back(p, size);
    return NULL;
  }
  struct buf *b = calloc(1, sizeof(*b));
  if (!b) {
    give_back(p, size);
    return NULL;
  }
  b->data = p;
  b->size = size;
  b->maxrec = maxrec;
  /* CUPTI clears buffers unless told they come zeroed (CUPTI_ACTIVITY_ATTR_ZEROED_OUT_...). */
  if (!g_attr_u8[CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER])
    memset(p, 0, size);
  if (atomic_load(&g_kind[CUPTI_ACTIVITY_KIND_OVERHEAD]) &&
      fits(b, sizeof(CUpti_ActivityOverhead3) + need)) {
    CUpti_ActivityOverhead3 o;
    memset(&o, 0, sizeof(o));
    o.kind = CUPTI_ACTIVITY_KIND_OVERHEAD;
    o.overheadKind = CUPTI_ACTIVITY_OVERHEAD_ACTIVITY_BUFFER_REQUEST;
    o.objectKind = CUPTI_ACTIVITY_OBJECT_THREAD;
    o.objectId.pt.processId = (uint32_t)getpid();
    o.objectId.pt.threadId = thread_id();
    o.start = t0;
    o.end = t1 > t0 ? t1 : t0 + 1;
    put_record(b, &o, sizeof(o), 0);
  }
  return b;
}

void cu_record(const void *rec, size_t size, uint64_t complete)
{
  if (!atomic_load(&g_request) || !atomic_load(&g_complete) || t_requesting) {
    atomic_fetch_add(&g_dropped, 1);
    return;
  }
  int kick = 0;
  pthread_mutex_lock(&g_lock);
  struct slot *sl = slot_get();
  if (!sl) {
    pthread_mutex_unlock(&g_lock);
    atomic_fetch_add(&g_dropped, 1);
    return;
  }
  for (int tries = 0;;) {
    struct buf *b = sl->cur;
    if (b && fits(b, size)) {
      put_record(b, rec, size, complete);
      if (is_full(b)) {
        sl->cur = NULL;
        push(&g_full, b);
        kick = 1;
      }
      break;
    }
    if (b) {
      sl->cur = NULL;
      push(&g_full, b);
      kick = 1;
    }
    if (g_spare) {
      sl->cur = g_spare;
      g_spare = g_spare->next;
      continue;
    }
    if (sl == &g_shared && g_shared_requesting) {
      pthread_cond_wait(&g_shared_cv, &g_lock);
      if (!(sl = slot_get())) {
        atomic_fetch_add(&g_dropped, 1);
        break;
      }
      continue;
    }
    int shared = sl == &g_shared;
    g_shared_requesting |= shared;
    pthread_mutex_unlock(&g_lock);
    t_requesting = 1;
    struct buf *nb = tries++ < 2 ? request_buffer(size) : NULL;
    t_requesting = 0;
    pthread_mutex_lock(&g_lock);
    if (shared) {
      g_shared_requesting = 0;
      pthread_cond_broadcast(&g_shared_cv);
    }
    if (!nb) {
      atomic_fetch_add(&g_dropped, 1);
      break;
    }
    /* The slot may have moved on meanwhile (shared mode, or the generation changed). */
    sl = slot_get();
    if (!sl) {
      push(&g_spare, nb);
      atomic_fetch_add(&g_dropped, 1);
      break;
    }
    if (!sl->cur)
      sl->cur = nb;
    else
      push(&g_spare, nb);
  }
  pthread_mutex_unlock(&g_lock);
  if (kick)
    worker_kick();
}

void cu_api_record(CUpti_ActivityKind kind, CUpti_CallbackId cbid, uint64_t start, uint64_t end,
                   uint32_t corr, uint32_t result)
{
  if (atomic_load(&g_kind[CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION])) {
    for (int k = 1; k < CUPTI_EXTERNAL_CORRELATION_KIND_SIZE; k++) {
      if (!t_ext[k].depth)
        continue;
      CUpti_ActivityExternalCorrelation e;
      memset(&e, 0, sizeof(e));
      e.kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
      e.externalKind = (CUpti_ExternalCorrelationKind)k;
      e.externalId = t_ext[k].ids[t_ext[k].depth - 1];
      e.correlationId = corr;
      cu_record(&e, sizeof(e), 0);
    }
  }
  CUpti_ActivityAPI r;
  memset(&r, 0, sizeof(r));
  r.kind = kind;
  r.cbid = cbid;
  r.start = start;
  r.end = end;
  r.processId = (uint32_t)getpid();
  r.threadId = thread_id();
  r.correlationId = corr;
  r.returnValue = result;
  cu_record(&r, sizeof(r), 0);
}

CU_API CUptiResult CUPTIAPI cuptiActivityPushExternalCorrelationId(CUpti_ExternalCorrelationKind kind,
                                                                   uint64_t id)
{
  if (kind <= CUPTI_EXTERNAL_CORRELATION_KIND_INVALID || kind >= CUPTI_EXTERNAL_CORRELATION_KIND_SIZE)
    return cu_ret(CUPTI_ERROR_INVALID_PARAMETER);
  if (t_ext[kind].depth >= MAX_EXT_DEPTH)
    return cu_ret(CUPTI_ERROR_MAX_LIMIT_REACHED);
  t_ext[kind].ids[t_ext[kind].depth++] = id;
  return CUPTI_SUCCESS;
}

CU_API CUptiResult CUPTIAPI cuptiActivityPopExternalCorrelationId(CUpti_ExternalCorrelationKind kind,
                                                                  uint64_t *lastId)
{
  if (kind <= CUPTI_EXTERNAL_CORRELATION_KIND_INVALID || kind >= CUPTI_EXTERNAL_CORRELATION_KIND_SIZE)
    return cu_ret(CUPTI_ERROR_INVALID_PARAMETER);
  if (!t_ext[kind].depth)
    return cu_ret(CUPTI_ERROR_QUEUE_EMPTY);
  uint64_t id = t_ext[kind].ids[--t_ext[kind].depth];
  if (lastId)
    *lastId = id;
  return CUPTI_SUCCESS;
}

/* ---- delivery ---- */

static int kind_gpu_fields(uint32_t kind, size_t *start, size_t *end, size_t *completed)
{
  *completed = 0;
  switch (kind) {
  case CUPTI_ACTIVITY_KIND_KERNEL:
  case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
    *start = offsetof(CUpti_ActivityKernel10, start);
    *end = offsetof(CUpti_ActivityKernel10, end);
    *completed = offsetof(CUpti_ActivityKernel10, completed);
    return 1;
  case CUPTI_ACTIVITY_KIND_MEMCPY:
    *start = offsetof(CUpti_ActivityMemcpy6, start);
    *end = offsetof(CUpti_ActivityMemcpy6, end);
    return 1;
  case CUPTI_ACTIVITY_KIND_MEMCPY2:
    *start = offsetof(CUpti_ActivityMemcpyPtoP4, start);
    *end = offsetof(CUpti_ActivityMemcpyPtoP4, end);
    return 1;
  case CUPTI_ACTIVITY_KIND_MEMSET:
    *start = offsetof(CUpti_ActivityMemset4, start);
    *end = offsetof(CUpti_ActivityMemset4, end);
    return 1;
  case CUPTI_ACTIVITY_KIND_GRAPH_TRACE:
    *start = offsetof(CUpti_ActivityGraphTrace2, start);
    *end = offsetof(CUpti_ActivityGraphTrace2, end);
    return 1;
  default:
    return 0;
  }
}

/* A forced flush hands over GPU records that have not finished: their timestamps are not
 * known yet, so they carry 0 (what hardware shows, cupti.md 2.5). */
static void zero_unfinished(struct buf *b, uint64_t now)
{
  static const uint64_t zero;
  for (size_t i = 0; i < b->nmarks; i++) {
    if (b->marks[i].end <= now)
      continue;
    uint8_t *r = b->data + b->marks[i].off;
    size_t s, e, c;
    if (!kind_gpu_fields(*(uint32_t *)r, &s, &e, &c))
      continue;
    memcpy(r + s, &zero, 8);
    memcpy(r + e, &zero, 8);
    if (c)
      memcpy(r + c, &zero, 8);
  }
}

static void deliver(struct buf *list, int forced)
{
  CUpti_BuffersCallbackCompleteFunc cmp = atomic_load(&g_complete);
  uint64_t now = realtime();
  while (list) {
    struct buf *b = list;
    list = b->next;
    if (forced)
      zero_unfinished(b, now);
    if (cu_fault.unknown_kind && b->used + UNKNOWN_KIND_BYTES <= b->size) {
      memset(b->data + b->used, 0, UNKNOWN_KIND_BYTES);
      *(uint32_t *)(b->data + b->used) = 999;
      b->used += UNKNOWN_KIND_BYTES;
    }
    if (cmp) {
      t_completing++;
      client_code(1);
      cmp(NULL, 0, b->data, b->size, b->used);
      client_code(0);
      t_completing--;
    }
    free(b->marks);
    free(b);
  }
}

static int ready(const struct buf *b, int forced, uint64_t now)
{
  return forced || b->complete <= now;
}

/* Under g_lock: moves the buffers to deliver onto *out. */
static void collect(struct buf **out, int forced, int full_only)
{
  uint64_t now = realtime();
  struct buf **pp = &g_full;
  while (*pp) {
    struct buf *b = *pp;
    if (ready(b, forced, now)) {
      *pp = b->next;
      push(out, b);
    } else {
      pp = &b->next;
    }
  }
  if (full_only)
    return;
  struct slot *all[] = {&g_shared};
  for (size_t i = 0; i < 1; i++) {
    struct slot *s = all[i];
    if (s->cur && s->cur->used && ready(s->cur, forced, now)) {
      push(out, s->cur);
      s->cur = NULL;
    }
  }
  for (struct slot *s = g_slots; s; s = s->next) {
    if (s->cur && s->cur->used && ready(s->cur, forced, now)) {
      push(out, s->cur);
      s->cur = NULL;
    }
  }
  while (g_returned) {
    struct buf *b = g_returned;
    g_returned = b->next;
    push(out, b);
  }
}

/*
 * FAKEGPU_CUPTI_FAULT=late_delivery: the worker thread hands the first batch of full buffers
 * it takes over late, after a concurrent flush returned without it. Legal for the real
 * library: its FlushAll delivers on the caller's thread while its own thread delivers too
 * (cupti.md 2.5, the split is not documented), so a returned flush does not mean that the
 * other thread has handed over what it took. Made deterministic for tests: the batch is set
 * aside when taken (HELD); the first flush that begins after that misses it (MISSED); the next
 * flush to begin has the worker deliver it and returns only once the client's completion
 * callback has returned (a flush that finds the worker delivering waits for it); without such
 * a flush the worker delivers it LATE_MAX_NS after taking it. The worker goes on delivering
 * other full buffers meanwhile. fakegpu_cupti_late_state() tells a test where it stands.
 */
enum { LATE_OFF, LATE_HELD, LATE_MISSED, LATE_RELEASED, LATE_DONE };
#define LATE_MAX_NS (10ull * 1000000000ull)
static pthread_mutex_t g_late_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_late_cv = PTHREAD_COND_INITIALIZER;
static int g_late_state;
static struct buf *g_late;
static uint64_t g_late_since;

/* Test introspection, not a CUPTI API: 0 fault off or nothing taken yet, 1 held, 2 missed by a
 * flush, 3 being delivered, 4 delivered. */
CU_API int fakegpu_cupti_late_state(void);
CU_API int fakegpu_cupti_late_state(void)
{
  pthread_mutex_lock(&g_late_lock);
  int st = g_late_state;
  pthread_mutex_unlock(&g_late_lock);
  return st;
}

/* Worker: sets the first non-empty batch aside. Returns what to deliver now. */
static struct buf *late_take(struct buf *list)
{
  if (!cu_fault.late_delivery || !list)
    return list;
  pthread_mutex_lock(&g_late_lock);
  if (g_late_state == LATE_OFF) {
    g_late = list;
    g_late_since = realtime();
    g_late_state = LATE_HELD;
    list = NULL;
  }
  pthread_mutex_unlock(&g_late_lock);
  return list;
}

/* Worker (or, force, the thread that stopped it): delivers the batch once released or due. */
static void late_deliver_due(int force)
{
  struct buf *list = NULL;
  if (!cu_fault.late_delivery)
    return;
  pthread_mutex_lock(&g_late_lock);
  if (g_late &&
      (force || g_late_state == LATE_RELEASED || realtime() - g_late_since > LATE_MAX_NS)) {
    list = g_late;
    g_late = NULL;
    g_late_state = LATE_RELEASED;
  }
  pthread_mutex_unlock(&g_late_lock);
  if (!list)
    return;
  deliver(list, 0);
  pthread_mutex_lock(&g_late_lock);
  g_late_state = LATE_DONE;
  pthread_cond_broadcast(&g_late_cv);
  pthread_mutex_unlock(&g_late_lock);
}

/* A flush begins: releases a batch an earlier flush missed and waits (bounded) for its
 * delivery. Returns 1 when this flush misses a held batch. */
static int late_flush_begin(void)
{
  if (!cu_fault.late_delivery)
    return 0;
  pthread_mutex_lock(&g_late_lock);
  int held = g_late_state == LATE_HELD;
  if (g_late_state == LATE_MISSED) {
    g_late_state = LATE_RELEASED;
    pthread_mutex_unlock(&g_late_lock);
    worker_kick();
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 5;
    pthread_mutex_lock(&g_late_lock);
    while (g_late_state == LATE_RELEASED &&
           pthread_cond_timedwait(&g_late_cv, &g_late_lock, &ts) == 0) {
    }
  }
  pthread_mutex_unlock(&g_late_lock);
  return held;
}

static void late_flush_end(int missed)
{
  if (!missed)
    return;
  pthread_mutex_lock(&g_late_lock);
  if (g_late_state == LATE_HELD)
    g_late_state = LATE_MISSED;
  pthread_mutex_unlock(&g_late_lock);
}

static CUptiResult flush(uint32_t flag)
{
  struct buf *list = NULL;
  int forced = (flag & CUPTI_ACTIVITY_FLAG_FLUSH_FORCED) != 0;
  int missed = late_flush_begin();
  pthread_mutex_lock(&g_lock);
  collect(&list, forced, 0);
  pthread_mutex_unlock(&g_lock);
  deliver(list, forced);
  late_flush_end(missed);
  return CUPTI_SUCCESS;
}

/* FAKEGPU_CUPTI_FAULT=hung_flush: a FlushAll(0) that never returns, as the real library's can
 * while the GPU or driver is wedged (a hung kernel, a process torn down mid-collective). It
 * blocks the calling thread for the rest of the process, holding none of the simulator's
 * locks: other threads (the buffer worker, forced flushes, Finalize) carry on. */
static void hang_until_exit(void)
{
  for (;;)
    pause();
}

/* cupti_activity.h: both flushes return CUPTI_ERROR_INVALID_OPERATION "if not preceded by a
 * successful call to cuptiActivityRegisterCallbacks" (none yet, or none since cuptiFinalize). */
static int callbacks_registered(void) { return atomic_load(&g_complete) != NULL; }

CU_API CUptiResult CUPTIAPI cuptiActivityFlushAll(uint32_t flag)
{
  if (cu_fault.no_driver)
    return cu_ret(CUPTI_ERROR_UNKNOWN);
  cu_check_deadlock_site("cuptiActivityFlushAll", 1);
  if (!callbacks_registered())
    return cu_ret(CUPTI_ERROR_INVALID_OPERATION);
  if (flag == 0 && cu_fault.hung_flush)
    hang_until_exit();
  return cu_ret(flush(flag));
}

CU_API CUptiResult CUPTIAPI cuptiActivityFlush(CUcontext context, uint32_t streamId, uint32_t flag)
{
  (void)context;
  (void)streamId;
  if (cu_fault.no_driver)
    return cu_ret(CUPTI_ERROR_UNKNOWN);
  cu_check_deadlock_site("cuptiActivityFlush", 1);
  if (!callbacks_registered())
    return cu_ret(CUPTI_ERROR_INVALID_OPERATION);
  return cu_ret(flush(flag));
}

/* ---- worker: delivers full buffers once complete, like CUPTI's own thread ---- */

static void *worker_main(void *arg)
{
  (void)arg;
  pthread_mutex_lock(&g_worker_lock);
  while (!g_worker_stop) {
    uint32_t ms = g_period_ms ? g_period_ms : 10;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&g_worker_cond, &g_worker_lock, &ts);
    if (g_worker_stop)
      break;
    pthread_mutex_unlock(&g_worker_lock);
    struct buf *list = NULL;
    pthread_mutex_lock(&g_lock);
    collect(&list, 0, 1);
    pthread_mutex_unlock(&g_lock);
    deliver(late_take(list), 0);
    late_deliver_due(0);
    pthread_mutex_lock(&g_worker_lock);
  }
  pthread_mutex_unlock(&g_worker_lock);
  return NULL;
}

static void worker_kick(void)
{
  pthread_mutex_lock(&g_worker_lock);
  if (!g_worker_running || g_worker_pid != getpid()) {
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    g_worker_stop = 0;
    if (pthread_create(&g_worker, NULL, worker_main, NULL) == 0) {
      g_worker_running = 1;
      g_worker_pid = getpid();
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
  }
  pthread_cond_signal(&g_worker_cond);
  pthread_mutex_unlock(&g_worker_lock);
}

static void worker_stop(void)
{
  pthread_mutex_lock(&g_worker_lock);
  int join = g_worker_running && g_worker_pid == getpid();
  g_worker_stop = 1;
  pthread_cond_signal(&g_worker_cond);
  pthread_mutex_unlock(&g_worker_lock);
  if (join)
    pthread_join(g_worker, NULL);
  pthread_mutex_lock(&g_worker_lock);
  g_worker_running = 0;
  pthread_mutex_unlock(&g_worker_lock);
  late_deliver_due(1); /* the worker is gone: what it held is delivered here */
}

CU_API CUptiResult CUPTIAPI cuptiActivityFlushPeriod(uint32_t time)
{
  if (cu_fault.no_driver)
    return cu_ret(CUPTI_ERROR_UNKNOWN);
  pthread_mutex_lock(&g_worker_lock);
  g_period_ms = time;
  pthread_mutex_unlock(&g_worker_lock);
  if (time)
    worker_kick();
  return CUPTI_SUCCESS;
}

/* ---- session knobs without simulated effect ---- */

static uint8_t g_latency, g_alloc_source, g_device_graph, g_launch_attrs, g_all_sync, g_event_ts;

CU_API CUptiResult CUPTIAPI cuptiActivityEnableLatencyTimestamps(uint8_t enable)
{
  g_latency = enable;
  return CUPTI_SUCCESS;
}

CU_API CUptiResult CUPTIAPI cuptiActivityEnableAllocationSource(uint8_t enable)
{
  g_alloc_source = enable;
  return CUPTI_SUCCESS;
}

CU_API CUptiResult CUPTIAPI cuptiActivityEnableDeviceGraph(uint8_t enable)
{
  g_device_graph = enable;
  return CUPTI_SUCCESS;
}

CU_API CUptiResult CUPTIAPI cuptiActivityEnableLaunchAttributes(uint8_t enable)
{
  g_launch_attrs = enable;
  return CUPTI_SUCCESS;
}

CU_API CUptiResult CUPTIAPI cuptiActivityEnableAllSyncRecords(uint8_t enable)
{
  g_all_sync = enable;
  return CUPTI_SUCCESS;
}

CU_API CUptiResult CUPTIAPI cuptiActivityEnableCudaEventDeviceTimestamps(uint8_t enable)
{
  g_event_ts = enable;
  return CUPTI_SUCCESS;
}

/* HES tracing exists on Blackwell only; the simulated GPU is a Hopper (cupti.md 2.9). */
CU_API CUptiResult CUPTIAPI cuptiActivityEnableHWTrace(uint8_t enable)
{
  if (cu_fault.no_driver)
    return cu_ret(CUPTI_ERROR_UNKNOWN);
  return enable ? cu_ret(CUPTI_ERROR_NOT_SUPPORTED) : CUPTI_SUCCESS;
}

/* ---- finalize and fork ---- */

void cu_activity_reset(void)
{
  flush(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  worker_stop();
  struct buf *list = NULL;
  pthread_mutex_lock(&g_lock);
  while (g_spare) {
    struct buf *b = g_spare;
    g_spare = b->next;
    b->used = 0;
    push(&list, b);
  }
  collect(&list, 1, 0);
  for (struct slot *s = g_slots; s; s = s->next)
    if (s->cur)
      push(&list, s->cur);
  if (g_shared.cur)
    push(&list, g_shared.cur);
  g_shared.cur = NULL;
  while (g_slots) {
    struct slot *s = g_slots;
    g_slots = s->next;
    free(s);
  }
  g_gen++;
  pthread_mutex_unlock(&g_lock);
  /* Empty buffers go back too: the client owns their memory. */
  deliver(list, 1);
  pthread_mutex_lock(&g_en_lock);
  for (int i = 0; i < CUPTI_ACTIVITY_KIND_COUNT; i++)
    atomic_store(&g_kind[i], 0);
  atomic_store(&g_nkinds, 0);
  memset(g_ctx_en, 0, sizeof(g_ctx_en));
  atomic_store(&g_any_ctx_en, 0);
  for (int d = 0; d < 2; d++)
    for (int c = 0; c < MAX_CBID; c++)
      atomic_store(&g_api_sel[d][c], 0);
  pthread_mutex_unlock(&g_en_lock);
  atomic_store(&g_request, NULL);
  atomic_store(&g_complete, NULL);
  atomic_store(&g_tscb, NULL);
  atomic_store(&g_thread_id_type, 0);
  atomic_store(&g_per_thread, 1);
  g_attr_u8[CUPTI_ACTIVITY_ATTR_PER_THREAD_ACTIVITY_BUFFER] = 1;
  g_period_ms = 0;
}

/* cupti.md 6.3: the child keeps the state but not the worker; the next full buffer starts a
 * new worker in the child (worker_kick checks the pid). */
void cu_activity_atfork_prepare(void)
{
  pthread_mutex_lock(&g_late_lock);
  pthread_mutex_lock(&g_worker_lock);
  pthread_mutex_lock(&g_lock);
}

void cu_activity_atfork_parent(void)
{
  pthread_mutex_unlock(&g_lock);
  pthread_mutex_unlock(&g_worker_lock);
  pthread_mutex_unlock(&g_late_lock);
}

void cu_activity_atfork_child(void)
{
  g_shared_requesting = 0;
  /* The parent's worker holds the late batch: the child never delivers it. */
  g_late = NULL;
  if (g_late_state != LATE_OFF)
    g_late_state = LATE_DONE;
  pthread_mutex_unlock(&g_late_lock);
  pthread_mutex_unlock(&g_lock);
  g_worker_running = 0;
  pthread_mutex_unlock(&g_worker_lock);
}
