/* A tiny CUPTI tool driving a driver-API workload on the simulated GPU and checking its view. */
#define _GNU_SOURCE
#include <cuda.h>
#include <cupti.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/fakegpu/fakegpu.h"

static int g_failures;

#define CHECK(cond, ...)                                                                         \
  do {                                                                                           \
    if (!(cond)) {                                                                               \
      g_failures++;                                                                              \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                       \
      fprintf(stderr, __VA_ARGS__);                                                              \
      fputc('\n', stderr);                                                                       \
    }                                                                                            \
  } while (0)
#define CU(x)                                                                                    \
  do {                                                                                           \
    CUresult r_ = (x);                                                                           \
    CHECK(r_ == CUDA_SUCCESS, "%s -> %d", #x, r_);                                               \
  } while (0)
#define CUPTI(x)                                                                                 \
  do {                                                                                           \
    CUptiResult r_ = (x);                                                                        \
    CHECK(r_ == CUPTI_SUCCESS, "%s -> %d", #x, r_);                                              \
  } while (0)

static pid_t gettid_(void) { return (pid_t)syscall(SYS_gettid); }

/* ---- activity buffers and the records they bring ---- */

#define MAX_RECS 20000

struct rec {
  uint32_t kind;
  union {
    CUpti_Activity a;
    CUpti_ActivityKernel10 k;
    CUpti_ActivityMemcpy6 m;
    CUpti_ActivityMemcpyPtoP4 p;
    CUpti_ActivityMemset4 s;
    CUpti_ActivityMemory4 mem;
    CUpti_ActivityMemoryPool3 pool;
    CUpti_ActivityAPI api;
    CUpti_ActivitySynchronization2 sync;
    CUpti_ActivityOverhead3 ovh;
    CUpti_ActivityDevice5 dev;
    CUpti_ActivityContext3 ctx;
    CUpti_ActivityStream stream;
    CUpti_ActivityGraphTrace2 graph;
  } u;
};

static pthread_mutex_t g_rec_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rec g_recs[MAX_RECS];
static int g_nrecs;
static atomic_int g_bad_buffers;     /* completion with context/streamId != 0, or a walk error */
static atomic_int g_completions;
static pid_t g_main_tid;
static atomic_int g_completions_off_main;

static atomic_int g_return_null;
static atomic_size_t g_buf_size = 64 * 1024;
static atomic_int g_requests;
static atomic_int g_inside_request, g_max_inside_request;
static atomic_int g_request_wait;    /* wait in the request callback for company */
static pthread_mutex_t g_req_lock = PTHREAD_MUTEX_INITIALIZER;
static pid_t g_req_tids[64];
static int g_nreq_tids;

static void CUPTIAPI on_request(uint8_t **buffer, size_t *size, size_t *maxNumRecords)
{
  atomic_fetch_add(&g_requests, 1);
  pthread_mutex_lock(&g_req_lock);
  pid_t me = gettid_();
  int seen = 0;
  for (int i = 0; i < g_nreq_tids; i++)
    seen |= g_req_tids[i] == me;
  if (!seen && g_nreq_tids < 64)
    g_req_tids[g_nreq_tids++] = me;
  pthread_mutex_unlock(&g_req_lock);
  int inside = atomic_fetch_add(&g_inside_request, 1) + 1;
  int max = atomic_load(&g_max_inside_request);
  while (inside > max && !atomic_compare_exchange_weak(&g_max_inside_request, &max, inside))
    ;
  /* Wait (bounded) for the other threads to arrive: proves requests run concurrently. */
  int want = atomic_load(&g_request_wait);
  for (int i = 0; want && i < 2000 && atomic_load(&g_inside_request) < want; i++)
    usleep(500);
  atomic_fetch_sub(&g_inside_request, 1);
  *maxNumRecords = 0;
  if (atomic_load(&g_return_null)) {
    *buffer = NULL;
    *size = 0;
    return;
  }
  *size = atomic_load(&g_buf_size);
  *buffer = aligned_alloc(8, *size);
}

static void CUPTIAPI on_complete(CUcontext ctx, uint32_t streamId, uint8_t *buffer, size_t size,
                                 size_t validSize)
{
  atomic_fetch_add(&g_completions, 1);
  if (gettid_() != g_main_tid)
    atomic_fetch_add(&g_completions_off_main, 1);
  if (ctx || streamId || validSize > size)
    atomic_fetch_add(&g_bad_buffers, 1);
  CUpti_Activity *r = NULL;
  CUptiResult e;
  pthread_mutex_lock(&g_rec_lock);
  while ((e = cuptiActivityGetNextRecord(buffer, validSize, &r)) == CUPTI_SUCCESS) {
    if (r->kind == CUPTI_ACTIVITY_KIND_DEVICE)
      free((void *)((CUpti_ActivityDevice5 *)r)->name);
    if (g_nrecs < MAX_RECS) {
      struct rec *x = &g_recs[g_nrecs++];
      x->kind = r->kind;
      size_t n = r->kind == CUPTI_ACTIVITY_KIND_DEVICE ? sizeof(CUpti_ActivityDevice5)
                 : r->kind == CUPTI_ACTIVITY_KIND_KERNEL ||
                         r->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL
                     ? sizeof(CUpti_ActivityKernel10)
                     : 128;
      memcpy(&x->u, r, n);
    }
  }
  pthread_mutex_unlock(&g_rec_lock);
  if (e != CUPTI_ERROR_MAX_LIMIT_REACHED)
    atomic_fetch_add(&g_bad_buffers, 1);
  free(buffer);
}

static int count_kind(uint32_t kind)
{
  int n = 0;
  pthread_mutex_lock(&g_rec_lock);
  for (int i = 0; i < g_nrecs; i++)
    n += g_recs[i].kind == kind;
  pthread_mutex_unlock(&g_rec_lock);
  return n;
}

static struct rec *find_kernel(uint32_t corr, uint64_t node)
{
  for (int i = 0; i < g_nrecs; i++)
    if (g_recs[i].kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL &&
        g_recs[i].u.k.correlationId == corr && g_recs[i].u.k.graphNodeId == node)
      return &g_recs[i];
  return NULL;
}

/* ---- callbacks ---- */

#define MAX_CALLS 4096

struct call {
  CUpti_CallbackDomain domain;
  uint32_t cbid;
  uint32_t corr;
  uint64_t enter_ts;
  const char *symbol;
  pid_t tid;
  int exited;
  CUresult result;
};

static pthread_mutex_t g_cb_lock = PTHREAD_MUTEX_INITIALIZER;
static struct call g_calls[MAX_CALLS];
static int g_ncalls;
static atomic_int g_pair_errors;
static __thread int t_open = -1;       /* index of this thread's open driver call */
static int g_init_finished, g_module_loaded, g_ctx_created, g_stream_created;
static int g_stream_sync_cb, g_ctx_sync_cb;
static int g_graph_created, g_graphexec_created;

struct node_seen {
  uint64_t id;
  uint32_t enclosing_cbid;
  uint32_t enclosing_corr;
};
static struct node_seen g_nodes[16];
static int g_nnodes;
/* GRAPHNODE_CLONED: the original's and the clone's ids, and the enclosing call. */
struct clone_seen {
  uint64_t original, clone;
  uint32_t enclosing_cbid;
  int exec_set;
};
static struct clone_seen g_clones[16];
static int g_nclones;

static void CUPTIAPI on_callback(void *ud, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                 const void *data)
{
  (void)ud;
  if (domain == CUPTI_CB_DOMAIN_DRIVER_API) {
    const CUpti_CallbackData *d = data;
    const char *name = NULL;
    cuptiGetCallbackName(domain, cbid, &name);
    if (!name || !d->functionName || strcmp(name, d->functionName) != 0)
      atomic_fetch_add(&g_pair_errors, 1);
    pthread_mutex_lock(&g_cb_lock);
    if (d->callbackSite == CUPTI_API_ENTER) {
      if (*d->correlationData != 0 || d->functionReturnValue || g_ncalls >= MAX_CALLS ||
          t_open >= 0)
        atomic_fetch_add(&g_pair_errors, 1);
      if (g_ncalls < MAX_CALLS) {
        uint64_t ts;
        cuptiGetTimestamp(&ts);
        g_calls[g_ncalls] = (struct call){domain, cbid, d->correlationId, ts, d->symbolName,
                                          gettid_(), 0, 0};
        t_open = g_ncalls++;
        *d->correlationData = 0x5eed0000u + (uint64_t)t_open;
      }
    } else {
      if (t_open < 0 || g_calls[t_open].corr != d->correlationId ||
          g_calls[t_open].cbid != cbid ||
          *d->correlationData != 0x5eed0000u + (uint64_t)t_open || !d->functionReturnValue) {
        atomic_fetch_add(&g_pair_errors, 1);
      } else {
        g_calls[t_open].exited = 1;
        g_calls[t_open].result = *(CUresult *)d->functionReturnValue;
      }
      t_open = -1;
    }
    pthread_mutex_unlock(&g_cb_lock);
  } else if (domain == CUPTI_CB_DOMAIN_RESOURCE) {
    const CUpti_ResourceData *r = data;
    pthread_mutex_lock(&g_cb_lock);
    switch (cbid) {
    case CUPTI_CBID_RESOURCE_CU_INIT_FINISHED: g_init_finished++; break;
    case CUPTI_CBID_RESOURCE_MODULE_LOADED: g_module_loaded++; break;
    case CUPTI_CBID_RESOURCE_CONTEXT_CREATED: g_ctx_created++; break;
    case CUPTI_CBID_RESOURCE_STREAM_CREATED: g_stream_created++; break;
    case CUPTI_CBID_RESOURCE_GRAPH_CREATED: g_graph_created++; break;
    case CUPTI_CBID_RESOURCE_GRAPHEXEC_CREATED: g_graphexec_created++; break;
    case CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED:
      if (g_nnodes < 16) {
        const CUpti_GraphData *g = r->resourceDescriptor;
        struct node_seen *n = &g_nodes[g_nnodes++];
        cuptiGetGraphNodeId(g->node, &n->id);
        n->enclosing_cbid = t_open >= 0 ? g_calls[t_open].cbid : 0;
        n->enclosing_corr = t_open >= 0 ? g_calls[t_open].corr : 0;
      }
      break;
    case CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED:
      if (g_nclones < 16) {
        const CUpti_GraphData *g = r->resourceDescriptor;
        struct clone_seen *c = &g_clones[g_nclones++];
        uint32_t exec_id = 0;
        cuptiGetGraphNodeId(g->originalNode, &c->original);
        cuptiGetGraphNodeId(g->node, &c->clone);
        c->enclosing_cbid = t_open >= 0 ? g_calls[t_open].cbid : 0;
        c->exec_set = cuptiGetGraphExecId(g->graphExec, &exec_id) == CUPTI_SUCCESS && exec_id;
      }
      break;
    default: break;
    }
    pthread_mutex_unlock(&g_cb_lock);
  } else if (domain == CUPTI_CB_DOMAIN_SYNCHRONIZE) {
    if (cbid == CUPTI_CBID_SYNCHRONIZE_STREAM_SYNCHRONIZED)
      g_stream_sync_cb++;
    else if (cbid == CUPTI_CBID_SYNCHRONIZE_CONTEXT_SYNCHRONIZED)
      g_ctx_sync_cb++;
  }
}

/* The last completed driver call with this cbid. */
static struct call *last_call(uint32_t cbid)
{
  for (int i = g_ncalls - 1; i >= 0; i--)
    if (g_calls[i].cbid == cbid && g_calls[i].exited)
      return &g_calls[i];
  return NULL;
}

static uint64_t now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- the workload ---- */

static CUcontext g_ctx0, g_ctx1;
static CUfunction g_fast, g_slow, g_empty;

static void setup_tool(CUpti_SubscriberHandle *sub)
{
  CUpti_SubscriberParams p;
  memset(&p, 0, sizeof(p));
  p.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
  p.subscriberName = "fakegpu-test";
  CUPTI(cuptiSubscribe_v2(sub, on_callback, NULL, &p));

  CUpti_SubscriberHandle other;
  char old[CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN] = "";
  CUpti_SubscriberParams q = {CUpti_SubscriberParams_STRUCT_SIZE, "second", old, sizeof(old)};
  CHECK(cuptiSubscribe_v2(&other, on_callback, NULL, &q) ==
            CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED, "second subscriber accepted");
  CHECK(strcmp(old, "CUPTI for fakegpu-test") == 0, "old subscriber name '%s'", old);
  CHECK(cuptiGetLastError() == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED, "last error");
  CHECK(cuptiGetLastError() == CUPTI_SUCCESS, "last error not reset");
  q.structSize = 8;
  CHECK(cuptiSubscribe_v2(&other, on_callback, NULL, &q) == CUPTI_ERROR_INVALID_PARAMETER,
        "bad structSize accepted");

  CUPTI(cuptiSetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM));
  CUPTI(cuptiActivityRegisterCallbacks(on_request, on_complete));
  static const CUpti_ActivityKind kinds[] = {
      CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
      CUPTI_ACTIVITY_KIND_MEMCPY2,           CUPTI_ACTIVITY_KIND_MEMSET,
      CUPTI_ACTIVITY_KIND_MEMORY2,           CUPTI_ACTIVITY_KIND_MEMORY_POOL,
      CUPTI_ACTIVITY_KIND_DRIVER,            CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,
      CUPTI_ACTIVITY_KIND_OVERHEAD,          CUPTI_ACTIVITY_KIND_DEVICE,
      CUPTI_ACTIVITY_KIND_CONTEXT,           CUPTI_ACTIVITY_KIND_STREAM,
  };
  for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
    CUPTI(cuptiActivityEnable(kinds[i]));
  CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_KERNEL) == CUPTI_ERROR_NOT_COMPATIBLE,
        "KERNEL with CONCURRENT_KERNEL");
  CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_PC_SAMPLING) ==
            CUPTI_ERROR_LEGACY_PROFILER_NOT_SUPPORTED, "PC_SAMPLING");
  CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_INVALID) == CUPTI_ERROR_INVALID_KIND, "kind 0");
  CHECK(cuptiActivityEnableHWTrace(1) == CUPTI_ERROR_NOT_SUPPORTED, "HW trace on Hopper");
  CUPTI(cuptiEnableDomain(1, *sub, CUPTI_CB_DOMAIN_DRIVER_API));
  CUPTI(cuptiEnableDomain(1, *sub, CUPTI_CB_DOMAIN_RESOURCE));
  CUPTI(cuptiEnableDomain(1, *sub, CUPTI_CB_DOMAIN_SYNCHRONIZE));
}

static void check_injection(void)
{
  const char *path = getenv("CUDA_INJECTION64_PATH");
  CHECK(path != NULL, "CUDA_INJECTION64_PATH not set by the test harness");
  if (!path)
    return;
  void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
  CHECK(h != NULL, "cuInit did not load %s", path);
  if (!h)
    return;
  int (*calls)(pthread_t *);
  *(void **)&calls = dlsym(h, "fakegpu_test_inject_calls");
  pthread_t t;
  CHECK(calls && calls(&t) == 1, "InitializeInjection not called exactly once");
  CHECK(calls && pthread_equal(t, pthread_self()), "InitializeInjection on another thread");
  dlclose(h);
}

struct expect_kernel {
  uint32_t corr;
  const char *name;
  uint32_t stream_id;
};

static void workload(void)
{
  static struct expect_kernel kernels[32];
  int nk = 0;
  CUdevice d0, d1;
  int n = 0;
  char name[64];
  CU(cuDeviceGetCount(&n));
  CHECK(n == 2, "%d devices", n);
  CU(cuDeviceGet(&d0, 0));
  CU(cuDeviceGet(&d1, 1));
  CU(cuDeviceGetName(name, sizeof(name), d0));
  CHECK(strcmp(name, "Fake H100 (simulated)") == 0, "device name '%s'", name);
  int ver = 0;
  CU(cuDriverGetVersion(&ver));
  CHECK(ver == 13000, "driver version %d", ver);

  CU(cuCtxCreate(&g_ctx1, NULL, 0, d1));
  CU(cuCtxCreate(&g_ctx0, NULL, 0, d0));
  CUcontext cur;
  CU(cuCtxGetCurrent(&cur));
  CHECK(cur == g_ctx0, "cuCtxCreate does not make the context current");

  CUstream s1, s2;
  CU(cuStreamCreate(&s1, CU_STREAM_DEFAULT));
  CU(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  uint32_t sid1, sid2, sid_legacy, ctx0_id, ctx1_id, dev_id;
  CUPTI(cuptiGetStreamIdEx(g_ctx0, s1, 0, &sid1));
  CUPTI(cuptiGetStreamIdEx(g_ctx0, s2, 0, &sid2));
  CUPTI(cuptiGetStreamIdEx(g_ctx0, NULL, 0, &sid_legacy));
  CUPTI(cuptiGetContextId(g_ctx0, &ctx0_id));
  CUPTI(cuptiGetContextId(g_ctx1, &ctx1_id));
  CUPTI(cuptiGetDeviceId(g_ctx1, &dev_id));
  CHECK(sid1 != sid2 && sid1 != sid_legacy, "stream ids %u %u %u", sid1, sid2, sid_legacy);
  CHECK(ctx0_id != ctx1_id && dev_id == 1, "context ids %u %u, device %u", ctx0_id, ctx1_id,
        dev_id);

  /* Modules without nvcc. */
  static const char *const names[] = {"_Z4fastv", "_Z4slowPf", "_Z5emptyv"};
  CUmodule mod;
  CHECK(fakegpu_module_from_names(&mod, names, 3) == 0, "fakegpu_module_from_names");
  CU(cuModuleGetFunction(&g_fast, mod, "_Z4fastv"));
  CU(cuModuleGetFunction(&g_slow, mod, "_Z4slowPf"));
  CU(cuModuleGetFunction(&g_empty, mod, "_Z5emptyv"));
  CUfunction none;
  CHECK(cuModuleGetFunction(&none, mod, "_Z7missingv") == CUDA_ERROR_NOT_FOUND, "unknown name");
  const char *fname = NULL;
  CU(cuFuncGetName(&fname, g_slow));
  CHECK(fname && strcmp(fname, "_Z4slowPf") == 0, "cuFuncGetName");
  fakegpu_set_kernel_duration_ns("_Z4fastv", 50000);
  fakegpu_set_kernel_duration_ns("_Z4slowPf", 2000000);

  /* Launches on two streams and the legacy stream. */
  for (int i = 0; i < 3; i++) {
    CU(cuLaunchKernel(g_fast, 2, 1, 1, 64, 1, 1, 0, s1, NULL, NULL));
    kernels[nk++] = (struct expect_kernel){last_call(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel)->corr,
                                           "_Z4fastv", sid1};
  }
  CU(cuLaunchKernel(g_slow, 1, 1, 1, 32, 1, 1, 0, s2, NULL, NULL));
  kernels[nk++] = (struct expect_kernel){last_call(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel)->corr,
                                         "_Z4slowPf", sid2};
  CHECK(strcmp(last_call(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel)->symbol, "_Z4slowPf") == 0,
        "symbolName of a launch");
  CUlaunchAttribute attr;
  memset(&attr, 0, sizeof(attr));
  attr.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
  attr.value.cooperative = 1;
  CUlaunchConfig cfg = {4, 2, 1, 128, 1, 1, 1024, s2, &attr, 1};
  CU(cuLaunchKernelEx(&cfg, g_fast, NULL, NULL));
  uint32_t ex_corr = last_call(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx)->corr;
  kernels[nk++] = (struct expect_kernel){ex_corr, "_Z4fastv", sid2};
  CU(cuLaunchKernel(g_empty, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
  kernels[nk++] = (struct expect_kernel){last_call(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel)->corr,
                                         "_Z5emptyv", sid_legacy};

  /* Memory of every kind. */
  const size_t MB = 1 << 20;
  CUdeviceptr dA, dB, dC, dM, dAsync;
  void *pinned;
  char *pageable = malloc(MB), *back = malloc(MB);
  for (size_t i = 0; i < MB; i++)
    pageable[i] = (char)(i * 7);
  CU(cuMemAlloc(&dA, MB));
  CU(cuMemAlloc(&dB, MB));
  CU(cuMemAllocHost(&pinned, MB));
  CU(cuMemAllocManaged(&dM, 4096, CU_MEM_ATTACH_GLOBAL));
  CU(cuMemAllocAsync(&dAsync, 65536, s1));
  CU(cuMemFreeAsync(dAsync, s1));
  CU(cuCtxPushCurrent(g_ctx1));
  CU(cuMemAlloc(&dC, MB));
  CU(cuCtxPopCurrent(&cur));

  /* Copies in every direction, then the bytes checked. */
  CU(cuMemcpyHtoD(dA, pageable, MB));
  memcpy(pinned, pageable, MB);
  CU(cuMemcpyHtoDAsync(dB, pinned, MB, s1));
  CU(cuMemcpyDtoDAsync(dB, dA, MB, s1));
  CU(cuMemcpyPeer(dC, g_ctx1, dA, g_ctx0, MB));
  CU(cuMemcpyPeerAsync(dA, g_ctx0, dC, g_ctx1, MB, s2));
  CU(cuStreamSynchronize(s2));
  CU(cuMemcpyDtoH(back, dB, MB));
  CHECK(memcmp(back, pageable, MB) == 0, "H2D -> D2D -> D2H round trip lost bytes");
  CU(cuMemcpy((CUdeviceptr)back, (CUdeviceptr)pageable, 4096));

  /* Sets. */
  CU(cuMemsetD8(dA, 0xab, 1000));
  CU(cuMemsetD32Async(dB, 0xdeadbeef, 256, s1));
  CU(cuMemsetD16(dA + 1024, 0x1234, 8));
  CU(cuMemcpyDtoH(back, dA, 2048));
  CHECK((unsigned char)back[999] == 0xab && (unsigned char)back[1000] != 0xab, "memset D8");
  CHECK(((uint16_t *)(back + 1024))[7] == 0x1234, "memset D16");
  CU(cuMemcpyDtoHAsync(back, dB, 1024, s1));
  CU(cuStreamSynchronize(s1));
  CHECK(((uint32_t *)back)[255] == 0xdeadbeef, "memset D32");

  /* A captured graph replayed twice. */
  CU(cuStreamBeginCapture(s1, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUstreamCaptureStatus st;
  CU(cuStreamIsCapturing(s1, &st));
  CHECK(st == CU_STREAM_CAPTURE_STATUS_ACTIVE, "not capturing");
  CU(cuLaunchKernel(g_fast, 8, 1, 1, 256, 1, 1, 0, s1, NULL, NULL));
  uint32_t capture_launch = last_call(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel)->corr;
  CU(cuMemsetD32Async(dB, 7, 64, s1));
  CUgraph graph;
  CUgraphExec exec;
  CU(cuStreamEndCapture(s1, &graph));
  CU(cuGraphInstantiate(&exec, graph, 0));
  uint32_t graph_id = 0;
  CUPTI(cuptiGetGraphId(graph, &graph_id));
  CU(cuGraphLaunch(exec, s1));
  uint32_t launch1 = last_call(CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch)->corr;
  CU(cuGraphLaunch(exec, s1));
  uint32_t launch2 = last_call(CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch)->corr;

  /* Syncs and frees. */
  CU(cuStreamSynchronize(s1));
  CU(cuCtxSynchronize());
  CHECK(cuMemFree(dA + 16) == CUDA_ERROR_INVALID_VALUE, "free of an inner pointer");
  CHECK(cuMemFree((CUdeviceptr)pageable) == CUDA_ERROR_INVALID_VALUE, "free of host memory");
  CU(cuMemFree(dA));
  CU(cuMemFree(dB));
  CU(cuMemFree(dM));
  CU(cuMemFreeHost(pinned));
  CU(cuCtxSetCurrent(g_ctx1));
  CU(cuMemFree(dC));
  CU(cuCtxSetCurrent(g_ctx0));
  CU(cuCtxSynchronize());

  /* Everything is complete now: FlushAll(0) must deliver it all. */
  CUPTI(cuptiActivityFlushAll(0));
  pthread_mutex_lock(&g_rec_lock);
  for (int i = 0; i < nk; i++) {
    struct rec *r = find_kernel(kernels[i].corr, 0);
    CHECK(r != NULL, "no kernel record for correlation %u", kernels[i].corr);
    if (!r)
      continue;
    CHECK(strcmp(r->u.k.name, kernels[i].name) == 0, "kernel %u named %s", kernels[i].corr,
          r->u.k.name);
    CHECK(r->u.k.streamId == kernels[i].stream_id, "kernel %u on stream %u, not %u",
          kernels[i].corr, r->u.k.streamId, kernels[i].stream_id);
    CHECK(r->u.k.contextId == ctx0_id && r->u.k.deviceId == 0, "kernel context/device");
    CHECK(r->u.k.registersPerThread == 32, "registers %u", r->u.k.registersPerThread);
    CHECK(r->u.k.graphId == 0 && r->u.k.channelType == CUPTI_CHANNEL_TYPE_COMPUTE, "graph/channel");
  }
  struct rec *ex = find_kernel(ex_corr, 0);
  CHECK(ex && ex->u.k.gridX == 4 && ex->u.k.gridY == 2 && ex->u.k.blockX == 128 &&
            ex->u.k.dynamicSharedMemory == 1024 &&
            ex->u.k.launchType == CUPTI_ACTIVITY_LAUNCH_TYPE_COOPERATIVE_SINGLE_DEVICE,
        "cuLaunchKernelEx record fields");
  struct rec *slow = find_kernel(kernels[3].corr, 0);
  CHECK(slow && slow->u.k.end - slow->u.k.start == 2000000, "slow kernel lasted %llu ns",
        slow ? (unsigned long long)(slow->u.k.end - slow->u.k.start) : 0ull);
  CHECK(find_kernel(capture_launch, 0) == NULL, "a capture-time launch executed");

  /* Graph replays: one kernel and one memset per launch. Capture created nodes 0 and 1;
   * instantiation cloned them (CREATED inside the instantiate call, then CLONED naming the
   * original), and the replayed records carry the clones' ids (cupti.md 1.2 item 6). */
  CHECK(g_nnodes == 4, "%d GRAPHNODE_CREATED callbacks", g_nnodes);
  CHECK(g_nnodes >= 1 && g_nodes[0].enclosing_cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel &&
            g_nodes[0].enclosing_corr == capture_launch,
        "GRAPHNODE_CREATED not inside the capturing launch");
  CHECK(g_nnodes >= 2 && g_nodes[1].enclosing_cbid == CUPTI_DRIVER_TRACE_CBID_cuMemsetD32Async,
        "memset node not created inside the capturing memset");
  for (int i = 2; i < 4 && i < g_nnodes; i++)
    CHECK(g_nodes[i].enclosing_cbid == CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithFlags &&
              g_nodes[i].id != g_nodes[0].id && g_nodes[i].id != g_nodes[1].id,
          "clone %d: CREATED outside the instantiate call or with an original's id", i);
  CHECK(g_nclones == 2, "%d GRAPHNODE_CLONED callbacks", g_nclones);
  for (int i = 0; i < 2 && i < g_nclones && g_nnodes >= 4; i++)
    CHECK(g_clones[i].original == g_nodes[i].id && g_clones[i].clone == g_nodes[2 + i].id &&
              g_clones[i].enclosing_cbid == CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithFlags &&
              g_clones[i].exec_set,
          "GRAPHNODE_CLONED %d: %llu -> %llu", i, (unsigned long long)g_clones[i].original,
          (unsigned long long)g_clones[i].clone);
  CHECK(g_graph_created == 1 && g_graphexec_created == 1, "graph callbacks %d %d",
        g_graph_created, g_graphexec_created);
  uint32_t launches[2] = {launch1, launch2};
  for (int i = 0; i < 2 && g_nnodes >= 4; i++) {
    struct rec *k = find_kernel(launches[i], g_nodes[2].id);
    CHECK(k && k->u.k.graphId == graph_id && k->u.k.streamId == sid1,
          "graph launch %u kernel record", launches[i]);
    int sets = 0;
    for (int j = 0; j < g_nrecs; j++)
      sets += g_recs[j].kind == CUPTI_ACTIVITY_KIND_MEMSET &&
              g_recs[j].u.s.correlationId == launches[i] &&
              g_recs[j].u.s.graphNodeId == g_nodes[3].id && g_recs[j].u.s.bytes == 256;
    CHECK(sets == 1, "graph launch %u: %d memset records", launches[i], sets);
  }

  /* Copies: exact kinds, bytes and memory kinds. */
  int htod_pageable = 0, htod_pinned = 0, dtod = 0, dtoh = 0, htoh = 0, ptop = 0;
  for (int i = 0; i < g_nrecs; i++) {
    if (g_recs[i].kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      CUpti_ActivityMemcpy6 *m = &g_recs[i].u.m;
      CHECK(m->runtimeCorrelationId == 0, "direct driver memcpy has a runtime id");
      if (m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_HTOD && m->bytes == MB)
        m->srcKind == CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE ? htod_pageable++ : htod_pinned++;
      dtod += m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOD && m->bytes == MB;
      dtoh += m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOH;
      htoh += m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_HTOH && m->bytes == 4096;
    } else if (g_recs[i].kind == CUPTI_ACTIVITY_KIND_MEMCPY2) {
      CUpti_ActivityMemcpyPtoP4 *p = &g_recs[i].u.p;
      ptop += p->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_PTOP && p->bytes == MB &&
              p->srcDeviceId != p->dstDeviceId;
    }
  }
  CHECK(htod_pageable == 1 && htod_pinned == 1, "HtoD %d pageable %d pinned", htod_pageable,
        htod_pinned);
  CHECK(dtod == 1 && dtoh == 3 && htoh == 1 && ptop == 2, "dtod %d dtoh %d htoh %d ptop %d",
        dtod, dtoh, htoh, ptop);

  /* Memory: allocations and releases by kind, async ones with their pool. */
  int alloc_dev = 0, free_dev = 0, pinned_n = 0, managed = 0, async = 0;
  for (int i = 0; i < g_nrecs; i++) {
    if (g_recs[i].kind != CUPTI_ACTIVITY_KIND_MEMORY2)
      continue;
    CUpti_ActivityMemory4 *m = &g_recs[i].u.mem;
    int alloc = m->memoryOperationType == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION;
    if (m->isAsync) {
      async++;
      CHECK(m->streamId == sid1 && m->memoryPoolConfig.memoryPoolType ==
                                       CUPTI_ACTIVITY_MEMORY_POOL_TYPE_LOCAL,
            "async memory record");
    } else if (m->memoryKind == CUPTI_ACTIVITY_MEMORY_KIND_DEVICE && m->bytes == MB) {
      alloc ? alloc_dev++ : free_dev++;
    }
    pinned_n += m->memoryKind == CUPTI_ACTIVITY_MEMORY_KIND_PINNED;
    managed += m->memoryKind == CUPTI_ACTIVITY_MEMORY_KIND_MANAGED;
  }
  CHECK(alloc_dev == 3 && free_dev == 3, "device alloc %d free %d", alloc_dev, free_dev);
  CHECK(pinned_n == 2 && managed == 2 && async == 2, "pinned %d managed %d async %d", pinned_n,
        managed, async);
  int pools = 0;
  for (int i = 0; i < g_nrecs; i++)
    pools += g_recs[i].kind == CUPTI_ACTIVITY_KIND_MEMORY_POOL &&
             g_recs[i].u.pool.memoryPoolOperationType ==
                 CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_CREATED &&
             g_recs[i].u.pool.deviceId == 0;
  CHECK(pools == 1, "%d default pool CREATED records", pools);
  pthread_mutex_unlock(&g_rec_lock);
  free(pageable);
  free(back);
  CU(cuGraphExecDestroy(exec));
  CU(cuGraphDestroy(graph));
  CU(cuStreamDestroy(s2));
}

/* ---- properties of everything delivered so far ---- */

static int by_start(const void *a, const void *b)
{
  const uint64_t *x = a, *y = b;
  return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* GPU records of one (context, stream) never overlap; each starts after its API's ENTER. */
static void check_timeline(void)
{
  static uint64_t spans[MAX_RECS][4]; /* start, end, ctx, stream */
  int n = 0;
  pthread_mutex_lock(&g_rec_lock);
  for (int i = 0; i < g_nrecs; i++) {
    struct rec *r = &g_recs[i];
    uint64_t s, e, c, st, corr;
    if (r->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)
      s = r->u.k.start, e = r->u.k.end, c = r->u.k.contextId, st = r->u.k.streamId,
      corr = r->u.k.graphNodeId ? 0 : r->u.k.correlationId;
    else if (r->kind == CUPTI_ACTIVITY_KIND_MEMCPY)
      s = r->u.m.start, e = r->u.m.end, c = r->u.m.contextId, st = r->u.m.streamId,
      corr = r->u.m.correlationId;
    else if (r->kind == CUPTI_ACTIVITY_KIND_MEMSET)
      s = r->u.s.start, e = r->u.s.end, c = r->u.s.contextId, st = r->u.s.streamId,
      corr = r->u.s.graphNodeId ? 0 : r->u.s.correlationId;
    else
      continue;
    if (!s && !e)
      continue; /* forced out before it finished */
    CHECK(e > s, "GPU record of %llu ns", (unsigned long long)(e - s));
    spans[n][0] = s, spans[n][1] = e, spans[n][2] = c, spans[n][3] = st;
    n++;
    for (int j = 0; corr && j < g_ncalls; j++)
      if (g_calls[j].corr == corr)
        CHECK(s >= g_calls[j].enter_ts, "GPU work of %u starts before its API ENTER",
              (unsigned)corr);
  }
  pthread_mutex_unlock(&g_rec_lock);
  qsort(spans, (size_t)n, sizeof(spans[0]), by_start);
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < n; j++)
      if (spans[j][2] == spans[i][2] && spans[j][3] == spans[i][3]) {
        CHECK(spans[j][0] >= spans[i][1], "overlap on stream %llu",
              (unsigned long long)spans[i][3]);
        break;
      }
}

/* Every ENTER met its EXIT, ids are unique and match one DRIVER record each. */
static void check_api(void)
{
  CHECK(atomic_load(&g_pair_errors) == 0, "%d ENTER/EXIT pairing errors",
        atomic_load(&g_pair_errors));
  pthread_mutex_lock(&g_cb_lock);
  pthread_mutex_lock(&g_rec_lock);
  int missing = 0, dup = 0;
  for (int i = 0; i < g_ncalls; i++) {
    CHECK(g_calls[i].exited, "call %d (cbid %u) never exited", i, g_calls[i].cbid);
    CHECK(g_calls[i].corr != 0, "call %d without correlation id", i);
    if (i > 0 && g_calls[i].tid == g_calls[i - 1].tid)
      CHECK(g_calls[i].corr > g_calls[i - 1].corr, "correlation ids not increasing");
    int found = 0;
    for (int j = 0; j < g_nrecs; j++) {
      const CUpti_ActivityAPI *a = &g_recs[j].u.api;
      if (g_recs[j].kind == CUPTI_ACTIVITY_KIND_DRIVER && a->correlationId == g_calls[i].corr) {
        found++;
        CHECK(a->cbid == g_calls[i].cbid && a->start < a->end &&
                  a->threadId == (uint32_t)g_calls[i].tid &&
                  a->returnValue == (uint32_t)g_calls[i].result,
              "DRIVER record of %u disagrees with its callbacks", g_calls[i].corr);
      }
    }
    missing += found == 0;
    dup += found > 1;
  }
  CHECK(!missing && !dup, "%d calls without DRIVER record, %d with several", missing, dup);
  int sync_stream = 0, sync_ctx = 0;
  for (int j = 0; j < g_nrecs; j++) {
    if (g_recs[j].kind != CUPTI_ACTIVITY_KIND_SYNCHRONIZATION)
      continue;
    sync_stream += g_recs[j].u.sync.type == CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE;
    sync_ctx += g_recs[j].u.sync.type == CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE;
  }
  CHECK(sync_stream == 3 && sync_ctx == 2, "sync records: %d stream, %d context", sync_stream,
        sync_ctx);
  CHECK(g_stream_sync_cb == 3 && g_ctx_sync_cb == 2, "sync callbacks: %d stream, %d context",
        g_stream_sync_cb, g_ctx_sync_cb);
  pthread_mutex_unlock(&g_rec_lock);
  pthread_mutex_unlock(&g_cb_lock);
  CHECK(count_kind(CUPTI_ACTIVITY_KIND_DEVICE) == 2, "%d DEVICE records",
        count_kind(CUPTI_ACTIVITY_KIND_DEVICE));
  CHECK(count_kind(CUPTI_ACTIVITY_KIND_CONTEXT) == 2, "%d CONTEXT records",
        count_kind(CUPTI_ACTIVITY_KIND_CONTEXT));
  CHECK(count_kind(CUPTI_ACTIVITY_KIND_OVERHEAD) >= 1, "no buffer-request OVERHEAD record");
  CHECK(g_init_finished == 1 && g_module_loaded == 1 && g_ctx_created == 2 &&
            g_stream_created == 2,
        "resource callbacks: init %d module %d ctx %d stream %d", g_init_finished,
        g_module_loaded, g_ctx_created, g_stream_created);
  CHECK(atomic_load(&g_bad_buffers) == 0, "%d malformed buffers", atomic_load(&g_bad_buffers));
}

/* FlushAll(0) withholds a buffer whose GPU work is still running; FORCED delivers it with
 * the unfinished record's timestamps zeroed. */
static void check_flush(void)
{
  CUstream s;
  CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  fakegpu_set_kernel_duration_ns("_Z5emptyv", 300000000);
  CU(cuLaunchKernel(g_empty, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL));
  uint32_t corr = last_call(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel)->corr;
  fakegpu_set_kernel_duration_ns("_Z5emptyv", 0);
  CUPTI(cuptiActivityFlushAll(0));
  pthread_mutex_lock(&g_rec_lock);
  CHECK(find_kernel(corr, 0) == NULL, "FlushAll(0) delivered a running kernel");
  pthread_mutex_unlock(&g_rec_lock);
  CHECK(cuStreamQuery(s) == CUDA_ERROR_NOT_READY, "stream idle while its kernel runs");
  CUPTI(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
  pthread_mutex_lock(&g_rec_lock);
  struct rec *k = find_kernel(corr, 0);
  CHECK(k && k->u.k.start == 0 && k->u.k.end == 0, "forced flush: running kernel not zeroed");
  pthread_mutex_unlock(&g_rec_lock);
  uint64_t t0 = now_ns();
  CU(cuStreamSynchronize(s));
  CHECK(now_ns() - t0 > 100000000, "cuStreamSynchronize did not wait for the kernel");
  CHECK(cuStreamQuery(s) == CUDA_SUCCESS, "stream busy after synchronize");
  CU(cuStreamDestroy(s));
}

/* A request callback answering NULL drops records, counted once. */
static void check_dropped(void)
{
  CUPTI(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
  size_t dropped = 0;
  CUPTI(cuptiActivityGetNumDroppedRecords(NULL, 0, &dropped));
  atomic_store(&g_return_null, 1);
  CUdevice d;
  for (int i = 0; i < 5; i++)
    CU(cuCtxGetDevice(&d));
  atomic_store(&g_return_null, 0);
  CUPTI(cuptiActivityGetNumDroppedRecords(NULL, 0, &dropped));
  CHECK(dropped == 5, "%zu records dropped, expected 5", dropped);
  CUPTI(cuptiActivityGetNumDroppedRecords(NULL, 0, &dropped));
  CHECK(dropped == 0, "dropped count not reset on read");
}

#define NTHREADS 8
#define PER_THREAD_CALLS 20

static pthread_barrier_t g_barrier;

static void *thread_main(void *arg)
{
  (void)arg;
  CU(cuCtxSetCurrent(g_ctx0));
  pthread_barrier_wait(&g_barrier);
  CUdevice d;
  for (int i = 0; i < PER_THREAD_CALLS; i++)
    CU(cuCtxGetDevice(&d));
  return NULL;
}

static int count_thread_records(pid_t tid)
{
  int n = 0;
  pthread_mutex_lock(&g_rec_lock);
  for (int i = 0; i < g_nrecs; i++)
    n += g_recs[i].kind == CUPTI_ACTIVITY_KIND_DRIVER &&
         g_recs[i].u.api.cbid == CUPTI_DRIVER_TRACE_CBID_cuCtxGetDevice &&
         g_recs[i].u.api.threadId == (uint32_t)tid;
  pthread_mutex_unlock(&g_rec_lock);
  return n;
}

/* Runs NTHREADS threads; returns the number of distinct threads that requested buffers. */
static int run_threads(pid_t *tids)
{
  pthread_mutex_lock(&g_req_lock);
  g_nreq_tids = 0;
  pthread_mutex_unlock(&g_req_lock);
  atomic_store(&g_max_inside_request, 0);
  pthread_t t[NTHREADS];
  pthread_barrier_init(&g_barrier, NULL, NTHREADS);
  for (int i = 0; i < NTHREADS; i++)
    pthread_create(&t[i], NULL, thread_main, NULL);
  for (int i = 0; i < NTHREADS; i++)
    pthread_join(t[i], NULL);
  pthread_barrier_destroy(&g_barrier);
  pthread_mutex_lock(&g_req_lock);
  int n = g_nreq_tids;
  memcpy(tids, g_req_tids, sizeof(pid_t) * (size_t)n);
  pthread_mutex_unlock(&g_req_lock);
  return n;
}

static void check_threads(void)
{
  pid_t tids[64];
  atomic_store(&g_request_wait, NTHREADS);
  int n = run_threads(tids);
  atomic_store(&g_request_wait, 0);
  CUPTI(cuptiActivityFlushAll(0));
  CHECK(n == NTHREADS, "%d threads requested buffers, expected %d", n, NTHREADS);
  CHECK(atomic_load(&g_max_inside_request) == NTHREADS,
        "at most %d request callbacks ran at once", atomic_load(&g_max_inside_request));
  for (int i = 0; i < n; i++)
    CHECK(count_thread_records(tids[i]) == PER_THREAD_CALLS, "thread %d: %d records", tids[i],
          count_thread_records(tids[i]));
}

/* After cuptiFinalize everything starts over: a new subscriber, a shared buffer. */
static void check_finalize(void)
{
  int before = atomic_load(&g_completions);
  CUPTI(cuptiFinalize());
  CHECK(atomic_load(&g_completions) >= before, "finalize lost buffers");
  CUdevice d;
  int calls = g_ncalls;
  CU(cuCtxGetDevice(&d));
  CHECK(g_ncalls == calls, "callbacks delivered after cuptiFinalize");

  CUpti_SubscriberHandle sub;
  CUPTI(cuptiSubscribe(&sub, on_callback, NULL));
  uint8_t shared = 0;
  size_t sz = sizeof(shared);
  CUPTI(cuptiActivitySetAttribute(CUPTI_ACTIVITY_ATTR_PER_THREAD_ACTIVITY_BUFFER, &sz, &shared));
  CUPTI(cuptiActivityRegisterCallbacks(on_request, on_complete));
  CUPTI(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DRIVER));
  atomic_store(&g_buf_size, 1 << 20);
  int requests = atomic_load(&g_requests);
  pid_t tids[64];
  run_threads(tids);
  CUPTI(cuptiActivityFlushAll(0));
  CHECK(atomic_load(&g_requests) - requests == 1, "shared buffer mode: %d requests",
        atomic_load(&g_requests) - requests);
  CUPTI(cuptiFinalize());
}

/* The child of a fork keeps the state but no worker thread; it must not hang. (A flush or
 * cuptiFinalize there is a rule the double enforces: test_rules.c.) */
static void check_fork(void)
{
  pid_t pid = fork();
  if (pid == 0) {
    alarm(10);
    CUdevice d;
    cuCtxGetDevice(&d);
    cuCtxSynchronize();
    _exit(0);
  }
  int status = 0;
  CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
            WEXITSTATUS(status) == 0,
        "forked child failed (status %d)", status);
}

int main(void)
{
  g_main_tid = gettid_();
  CUpti_SubscriberHandle sub;
  setup_tool(&sub);
  CU(cuInit(0));
  CU(cuInit(0));
  check_injection();
  workload();
  CUPTI(cuptiActivityFlushAll(0));
  check_timeline();
  check_api();
  check_flush();
  check_dropped();
  check_threads();
  check_fork();
  check_finalize();
  if (g_failures) {
    fprintf(stderr, "fakegpu_behaviour: %d failures\n", g_failures);
    return 1;
  }
  printf("fakegpu_behaviour: ok (%d records, %d calls, %d buffers)\n", g_nrecs, g_ncalls,
         atomic_load(&g_completions));
  return 0;
}
