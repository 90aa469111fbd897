/* FAKEGPU_NESTED: the callbacks and record ids of runtime calls in each nesting mode. */
#define _GNU_SOURCE
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cupti.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fakegpu/nested.h"
#include "tests/nested/handreg.h"

static int g_failures;

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      g_failures++;                                                                                \
      fprintf(stderr, "FAIL %s:%d: [mode %u] ", __FILE__, __LINE__, g_mode);                       \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fputc('\n', stderr);                                                                         \
    }                                                                                              \
  } while (0)
#define RT(x)                                                                                      \
  do {                                                                                             \
    cudaError_t e_ = (x);                                                                          \
    CHECK(e_ == cudaSuccess, "%s -> %d", #x, (int)e_);                                             \
  } while (0)

static unsigned g_mode;

/* ---- callbacks: one ordered log of API ENTER/EXIT (single-threaded program) ---- */

struct ev {
  CUpti_CallbackDomain domain;
  CUpti_ApiCallbackSite site;
  uint32_t cbid;
  uint32_t corr;
  CUcontext ctx;
  char name[48];
};

#define MAX_EV 4096
static struct ev g_ev[MAX_EV];
static int g_nev;

static void CUPTIAPI on_callback(void *ud, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                 const void *data)
{
  const CUpti_CallbackData *d = data;

  (void)ud;
  if (domain == CUPTI_CB_DOMAIN_RESOURCE && cbid == CUPTI_CBID_RESOURCE_CONTEXT_CREATED &&
      g_nev < MAX_EV) {
    const CUpti_ResourceData *rd = data;
    g_ev[g_nev] = (struct ev){domain, CUPTI_API_ENTER, cbid, 0, rd->context, "CONTEXT_CREATED"};
    g_nev++;
    return;
  }
  if ((domain != CUPTI_CB_DOMAIN_RUNTIME_API && domain != CUPTI_CB_DOMAIN_DRIVER_API) ||
      g_nev >= MAX_EV)
    return;
  g_ev[g_nev] = (struct ev){domain, d->callbackSite, cbid, d->correlationId, d->context, ""};
  snprintf(g_ev[g_nev].name, sizeof(g_ev[g_nev].name), "%s", d->functionName);
  g_nev++;
}

/* ---- records ---- */

#define MAX_RECS 4096
static union rec {
  CUpti_Activity a;
  CUpti_ActivityKernel10 k;
  CUpti_ActivityMemcpy6 m;
  CUpti_ActivityMemset4 s;
  CUpti_ActivityMemory4 mem;
  CUpti_ActivityAPI api;
} g_recs[MAX_RECS];
static int g_nrecs;

static void CUPTIAPI on_request(uint8_t **buffer, size_t *size, size_t *max)
{
  *size = 256 * 1024;
  *buffer = aligned_alloc(8, *size);
  *max = 0;
}

static void CUPTIAPI on_complete(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
                                 size_t valid)
{
  CUpti_Activity *r = NULL;

  (void)ctx;
  (void)stream;
  (void)size;
  while (cuptiActivityGetNextRecord(buffer, valid, &r) == CUPTI_SUCCESS && g_nrecs < MAX_RECS) {
    size_t n = r->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL ? sizeof(CUpti_ActivityKernel10)
               : r->kind == CUPTI_ACTIVITY_KIND_MEMORY2         ? sizeof(CUpti_ActivityMemory4)
               : r->kind == CUPTI_ACTIVITY_KIND_MEMCPY          ? sizeof(CUpti_ActivityMemcpy6)
               : r->kind == CUPTI_ACTIVITY_KIND_MEMSET          ? sizeof(CUpti_ActivityMemset4)
                                                                : sizeof(CUpti_ActivityAPI);
    memcpy(&g_recs[g_nrecs++], r, n);
  }
  free(buffer);
}

/* ---- reading the log ---- */

/* The index of the RUNTIME ENTER of the `nth` (0-based) call of `cbid`, or -1. */
static int rt_enter(uint32_t cbid, int nth)
{
  for (int i = 0; i < g_nev; i++)
    if (g_ev[i].domain == CUPTI_CB_DOMAIN_RUNTIME_API && g_ev[i].site == CUPTI_API_ENTER &&
        g_ev[i].cbid == cbid && nth-- == 0)
      return i;
  return -1;
}

/* The index of the EXIT matching the ENTER at `i`, or -1. */
static int exit_of(int i)
{
  for (int j = i + 1; j < g_nev; j++)
    if (g_ev[j].site == CUPTI_API_EXIT && g_ev[j].corr == g_ev[i].corr &&
        g_ev[j].domain == g_ev[i].domain)
      return j;
  return -1;
}

/* The events strictly inside the call whose ENTER is at `i`, as "R+name/D-name ..." text
 * (R/D domain, + ENTER, - EXIT; names without their _vNNNN suffix). */
static void inside(int i, char *out, size_t len)
{
  int j = exit_of(i);
  size_t used = 0;

  out[0] = '\0';
  for (int k = i + 1; k < j && used < len; k++)
    used += (size_t)snprintf(out + used, len - used, "%s%c%c%s", used ? " " : "",
                             g_ev[k].domain == CUPTI_CB_DOMAIN_RUNTIME_API ? 'R' : 'D',
                             g_ev[k].site == CUPTI_API_ENTER ? '+' : '-', g_ev[k].name);
}

/* Every nested call's correlation id is unique and later than its parent's; ENTER/EXIT pair
 * LIFO. */
static void check_nesting(void)
{
  uint32_t stack[16];
  int depth = 0;

  for (int i = 0; i < g_nev; i++) {
    if (g_ev[i].site == CUPTI_API_ENTER) {
      CHECK(depth < 16, "nesting too deep at event %d", i);
      if (depth > 0)
        CHECK(g_ev[i].corr > stack[depth - 1], "nested id %u not after its parent's %u",
              g_ev[i].corr, stack[depth - 1]);
      if (depth < 16)
        stack[depth++] = g_ev[i].corr;
    } else {
      CHECK(depth > 0 && stack[depth - 1] == g_ev[i].corr, "EXIT %u (%s) out of order",
            g_ev[i].corr, g_ev[i].name);
      if (depth > 0)
        depth--;
    }
  }
  CHECK(depth == 0, "%d calls never exited", depth);
}

static int count_api_records(CUpti_ActivityKind kind, uint32_t corr, uint32_t cbid)
{
  int n = 0;
  for (int i = 0; i < g_nrecs; i++)
    n += g_recs[i].a.kind == kind && g_recs[i].api.correlationId == corr &&
         g_recs[i].api.cbid == cbid;
  return n;
}

static union rec *find(CUpti_ActivityKind kind, int graph)
{
  for (int i = 0; i < g_nrecs; i++) {
    if (g_recs[i].a.kind != kind)
      continue;
    if (kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && (g_recs[i].k.graphId != 0) != graph)
      continue;
    return &g_recs[i];
  }
  return NULL;
}

/* One runtime call and its nested driver call `drv` (if the mode reports it): checks the
 * callbacks between its ENTER and EXIT and its API records; returns {runtime id, driver id}. */
static void one_call(uint32_t rt_cbid, int nth, const char *drv, uint32_t drv_cbid, uint32_t *rt,
                     uint32_t *dr)
{
  int i = rt_enter(rt_cbid, nth), j;
  char got[256], want[128];

  *rt = *dr = 0;
  CHECK(i >= 0, "no RUNTIME ENTER of cbid %u", rt_cbid);
  if (i < 0)
    return;
  *rt = g_ev[i].corr;
  inside(i, got, sizeof(got));
  if (g_mode & FAKEGPU_NESTED_DRIVER)
    snprintf(want, sizeof(want), "D+%s D-%s", drv, drv);
  else
    want[0] = '\0';
  CHECK(strcmp(got, want) == 0, "inside %s: '%s', want '%s'", g_ev[i].name, got, want);
  if (g_mode & FAKEGPU_NESTED_DRIVER) {
    *dr = g_ev[i + 1].corr;
    CHECK(*dr == *rt + 1, "driver id %u, runtime id %u: the next id expected", *dr, *rt);
    j = exit_of(i);
    CHECK(j == i + 3, "EXIT of %s at %d, want %d", g_ev[i].name, j, i + 3);
    CHECK(count_api_records(CUPTI_ACTIVITY_KIND_DRIVER, *dr, drv_cbid) == 1,
          "%s: one DRIVER record with its id %u", drv, *dr);
  }
  CHECK(count_api_records(CUPTI_ACTIVITY_KIND_RUNTIME, *rt, rt_cbid) == 1,
        "%s: one RUNTIME record with id %u", g_ev[i].name, *rt);
}

/* ---- one mode ---- */

static void run_mode(unsigned mode)
{
  enum { N = 4096 };
  static unsigned char host[N];
  cudaStream_t s;
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  float *a = NULL;
  uint32_t rt, dr, rt2, dr2;
  int driver = mode & FAKEGPU_NESTED_DRIVER, runtime = mode & FAKEGPU_NESTED_RUNTIME;
  union rec *r;
  char got[256], want[128];
  int i;

  g_mode = mode;
  RT(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  /* Modules load at a kernel's first launch: keep that out of the calls checked below. */
  RT(handreg_launch(handreg_scale, 1, 32, s, a));
  RT(cudaStreamSynchronize(s));
  cuptiActivityFlushAll(1);
  fakegpu_nested_set(mode);
  g_nev = g_nrecs = 0;

  RT(cudaMalloc((void **)&a, N));
  RT(cudaMemcpy(a, host, N, cudaMemcpyHostToDevice));
  RT(cudaMemset(a, 0, N));
  RT(handreg_launch(handreg_scale, 2, 64, s, a));
  RT(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  RT(handreg_launch(handreg_step, 1, 32, s, a));
  RT(cudaStreamEndCapture(s, &graph));
  RT(cudaGraphInstantiate(&exec, graph, 0));
  RT(cudaGraphLaunch(exec, s));
  RT(cudaStreamSynchronize(s));
  RT(cudaFree(a));
  fakegpu_nested_set(0);
  RT(cudaGraphExecDestroy(exec));
  RT(cudaGraphDestroy(graph));
  RT(cudaStreamDestroy(s));
  cuptiActivityFlushAll(1);

  check_nesting();

  /* cudaMalloc: MEMORY2 allocation record carries the originating API (driver when nested). */
  one_call(CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020, 0, "cuMemAlloc_v2",
           CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, &rt, &dr);
  r = find(CUPTI_ACTIVITY_KIND_MEMORY2, 0);
  CHECK(r && r->mem.correlationId == (driver ? dr : rt), "MEMORY2 correlationId %u (rt %u drv %u)",
        r ? r->mem.correlationId : 0, rt, dr);

  /* cudaMemcpy: correlationId the driver call, runtimeCorrelationId the runtime call. */
  one_call(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020, 0, "cuMemcpyHtoD_v2",
           CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2, &rt, &dr);
  r = find(CUPTI_ACTIVITY_KIND_MEMCPY, 0);
  CHECK(r && r->m.correlationId == (driver ? dr : rt) && r->m.runtimeCorrelationId == rt,
        "MEMCPY ids %u/%u (rt %u drv %u)", r ? r->m.correlationId : 0,
        r ? r->m.runtimeCorrelationId : 0, rt, dr);

  /* cudaMemset: the originating API, the driver call when nested ([U]). */
  one_call(CUPTI_RUNTIME_TRACE_CBID_cudaMemset_v3020, 0, "cuMemsetD8_v2",
           CUPTI_DRIVER_TRACE_CBID_cuMemsetD8_v2, &rt, &dr);
  r = find(CUPTI_ACTIVITY_KIND_MEMSET, 0);
  CHECK(r && r->s.correlationId == (driver ? dr : rt), "MEMSET correlationId %u (rt %u drv %u)",
        r ? r->s.correlationId : 0, rt, dr);

  /* __cudaLaunchKernel: with `runtime`, a nested cudaLaunchKernel (and cuLaunchKernel under
   * it with `driver`); the kernel carries the innermost runtime call's id. */
  i = rt_enter(CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_v13000, 0);
  CHECK(i >= 0, "no __cudaLaunchKernel");
  if (i >= 0) {
    rt = g_ev[i].corr;
    inside(i, got, sizeof(got));
    snprintf(want, sizeof(want), "%s%s%s%s", runtime ? "R+cudaLaunchKernel_v7000" : "",
             driver ? (runtime ? " D+cuLaunchKernel D-cuLaunchKernel"
                               : "D+cuLaunchKernel D-cuLaunchKernel")
                    : "",
             "", runtime ? " R-cudaLaunchKernel_v7000" : "");
    CHECK(strcmp(got, want) == 0, "inside __cudaLaunchKernel: '%s', want '%s'", got, want);
    rt2 = runtime ? g_ev[i + 1].corr : rt;
    dr2 = driver ? g_ev[i + (runtime ? 2 : 1)].corr : 0;
    r = find(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, 0);
    CHECK(r && r->k.correlationId == rt2, "kernel correlationId %u, want %u (driver call %u)",
          r ? r->k.correlationId : 0, rt2, dr2);
    if (driver)
      CHECK(count_api_records(CUPTI_ACTIVITY_KIND_DRIVER, dr2,
                              CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel) == 1,
            "one cuLaunchKernel DRIVER record");
    if (runtime)
      CHECK(count_api_records(CUPTI_ACTIVITY_KIND_RUNTIME, rt2,
                              CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000) == 1,
            "one nested cudaLaunchKernel RUNTIME record");
  }

  /* cudaGraphLaunch: replayed nodes carry the launching API, the driver one when nested. */
  one_call(CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000, 0, "cuGraphLaunch",
           CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch, &rt, &dr);
  r = find(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, 1);
  CHECK(r && r->k.correlationId == (driver ? dr : rt),
        "graph kernel correlationId %u (rt %u drv %u)", r ? r->k.correlationId : 0, rt, dr);

  one_call(CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020, 0, "cuStreamSynchronize",
           CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize, &rt, &dr);
  one_call(CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020, 0, "cuMemFree_v2",
           CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2, &rt, &dr);

  /* Outside nested mode no driver call of the runtime double is reported at all. */
  if (!driver) {
    int n = 0;
    for (int k = 0; k < g_nev; k++)
      n += g_ev[k].domain == CUPTI_CB_DOMAIN_DRIVER_API;
    CHECK(n == 0, "%d DRIVER callbacks without FAKEGPU_NESTED=driver", n);
  }
}

/* A thread's first runtime call binds the primary context inside the call: context NULL at
 * ENTER, the primary context at EXIT, its CONTEXT_CREATED in between the first time
 * (cupti_callbacks.h, CUpti_CallbackData.context; cupti.md 3.3, 6.4). */
static void *first_call_thread(void *arg)
{
  void *p = NULL;
  RT(cudaMalloc(&p, 256));
  RT(cudaFree(p));
  return arg;
}

static void check_lazy_context(void)
{
  pthread_t t;
  CUcontext primary;
  int i, j, created = -1;

  g_nev = 0;
  RT(cudaFree(NULL));
  i = rt_enter(CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020, 0);
  j = i >= 0 ? exit_of(i) : -1;
  for (int k = 0; k < g_nev; k++)
    if (g_ev[k].domain == CUPTI_CB_DOMAIN_RESOURCE)
      created = k;
  CHECK(i >= 0 && j > i, "first cudaFree: no ENTER/EXIT");
  if (i < 0 || j < 0)
    return;
  primary = g_ev[j].ctx;
  CHECK(g_ev[i].ctx == NULL, "first call's ENTER has context %p, want NULL", (void *)g_ev[i].ctx);
  CHECK(primary != NULL, "first call's EXIT has no context");
  CHECK(created > i && created < j && g_ev[created].ctx == primary,
        "CONTEXT_CREATED at %d (ctx %p), want between ENTER %d and EXIT %d of the first call",
        created, created >= 0 ? (void *)g_ev[created].ctx : NULL, i, j);

  /* Another thread: the context exists, but is not current there before its first call. */
  g_nev = 0;
  CHECK(pthread_create(&t, NULL, first_call_thread, NULL) == 0, "pthread_create");
  pthread_join(t, NULL);
  i = rt_enter(CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020, 0);
  j = i >= 0 ? exit_of(i) : -1;
  CHECK(i >= 0 && j > i, "thread's cudaMalloc: no ENTER/EXIT");
  if (i >= 0 && j > i)
    CHECK(g_ev[i].ctx == NULL && g_ev[j].ctx == primary,
          "thread's first call: context %p at ENTER, %p at EXIT; want NULL, %p",
          (void *)g_ev[i].ctx, (void *)g_ev[j].ctx, (void *)primary);
  for (int k = 0; k < g_nev; k++)
    CHECK(g_ev[k].domain != CUPTI_CB_DOMAIN_RESOURCE, "a second CONTEXT_CREATED");
  i = rt_enter(CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020, 0);
  if (i >= 0)
    CHECK(g_ev[i].ctx == primary, "the thread's second call: context %p at ENTER, want %p",
          (void *)g_ev[i].ctx, (void *)primary);
  g_nev = 0;
}

int main(void)
{
  static const unsigned modes[] = {0, FAKEGPU_NESTED_DRIVER, FAKEGPU_NESTED_RUNTIME,
                                   FAKEGPU_NESTED_DRIVER | FAKEGPU_NESTED_RUNTIME};
  static const CUpti_ActivityKind kinds[] = {
      CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
      CUPTI_ACTIVITY_KIND_MEMCPY,
      CUPTI_ACTIVITY_KIND_MEMSET,
      CUPTI_ACTIVITY_KIND_MEMORY2,
      CUPTI_ACTIVITY_KIND_DRIVER,
      CUPTI_ACTIVITY_KIND_RUNTIME,
  };
  CUpti_SubscriberHandle sub;

  /* The environment is read at load: FAKEGPU_NESTED=driver,runtime must give both. */
  g_mode = 0;
  CHECK(fakegpu_nested_get() == (FAKEGPU_NESTED_DRIVER | FAKEGPU_NESTED_RUNTIME),
        "FAKEGPU_NESTED=%s read as %u", getenv("FAKEGPU_NESTED") ? getenv("FAKEGPU_NESTED") : "",
        fakegpu_nested_get());
  fakegpu_nested_set(0);
  handreg_register();
  if (cuptiSubscribe(&sub, on_callback, NULL) != CUPTI_SUCCESS ||
      cuptiActivityRegisterCallbacks(on_request, on_complete) != CUPTI_SUCCESS) {
    fprintf(stderr, "test_nested: cannot subscribe\n");
    return 1;
  }
  cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_RUNTIME_API);
  cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_DRIVER_API);
  cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_CREATED);
  for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++)
    cuptiActivityEnable(kinds[k]);
  check_lazy_context();
  for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++)
    run_mode(modes[m]);
  cuptiFinalize();
  if (g_failures) {
    fprintf(stderr, "fakegpu_nested: %d failures\n", g_failures);
    return 1;
  }
  printf("fakegpu_nested: ok (4 modes)\n");
  return 0;
}
