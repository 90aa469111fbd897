/* API call bracketing: correlation ids, DRIVER/RUNTIME callbacks and records, tool hooks. */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

#include "tests/fakegpu/driver.h"
#include "tests/fakegpu/fakegpu.h"
#include "tests/fakegpu/nested.h"

/*
 * Correlation ids (cupti.md 3.6, 7.4 item 3): one process-wide counter from 1 shared by the
 * runtime and the driver. An id is assigned to every traced API call while the tool is
 * active (a subscriber exists or an activity kind is enabled), whether or not the callback
 * for that cbid is enabled: API records need ids even when no callback is delivered, and
 * the agent sees gaps in the sequence, as on hardware where CUPTI also numbers calls it does
 * not report.
 *
 * Attribution ([U] in cupti.md 3.6, to be checked on a GPU): a runtime call gets one id and
 * the driver work it does inside fakegpu_internal_begin/end produces records carrying that
 * runtime id (kernel, memset, memory records; memcpy records carry it as both correlationId
 * and runtimeCorrelationId). A driver API called directly (also from inside a runtime call
 * without the internal bracket) gets its own id; its memcpy records carry the driver id in
 * correlationId and the enclosing runtime id (or 0) in runtimeCorrelationId.
 *
 * FAKEGPU_NESTED=driver (nested.h) surfaces the driver calls a runtime call makes inside its
 * own internal bracket (not the context binding before its ENTER, not the driver's calls to
 * itself) as nested DRIVER calls with ids of their own; records made inside them carry the
 * frame's `records` id: the driver id, or for launches the enclosing runtime call's id.
 */

#define FG_MAX_FRAMES 64

struct frame {
  CUpti_CallbackDomain domain;
  uint32_t corr;
  uint32_t records; /* the id records made inside this call carry */
};

struct rt_call {
  uint32_t cbid;
  const char *name;
  const void *params;
  const char *symbol;
  uint32_t corr;
  uint64_t start;
  uint64_t cdata;
  int entered;
  int internal_base; /* t_internal at ENTER: the call's own bracket is one above it */
};

static _Atomic(const struct fg_tool *) g_tool;
static atomic_uint g_corr;
static atomic_uint g_nested; /* FAKEGPU_NESTED_* bits */

static __thread struct frame t_frames[FG_MAX_FRAMES];
static __thread int t_depth;
static __thread int t_internal;
static __thread struct rt_call t_rt[FG_MAX_FRAMES];
static __thread int t_rt_depth;
/*
 * Client code running on this thread: a CUPTI callback (API, RESOURCE, SYNCHRONIZE) or the
 * buffer request / completion callback. t_client_base[i] is t_internal when the i-th level
 * began: a call made at that level is the client's own, one made deeper is the runtime
 * double's work inside a call the client made.
 */
#define FG_MAX_CLIENT 16
static __thread int t_client;
static __thread int t_client_kind[FG_MAX_CLIENT]; /* 1 callback, 2 buffer callback */
static __thread int t_client_base[FG_MAX_CLIENT];

/*
 * Rules the real driver enforces by hanging (cupti.md 1.1, 3.1, 6.2): no CUDA runtime or
 * driver call from inside InitializeInjection, and none from inside a CUPTI callback (API,
 * RESOURCE, SYNCHRONIZE, or the buffer request / completion callback) except the
 * synchronize functions. A test cannot wait for a hang, so the double names the call and the
 * rule on stderr and aborts.
 */
static int driver_sync_allowed(uint32_t cbid)
{
  switch (cbid) {
  case CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize:
  case CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize_v2:
  case CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize:
  case CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize_ptsz:
    return 1;
  default:
    return 0;
  }
}

static int runtime_sync_allowed(uint32_t cbid)
{
  switch (cbid) {
  case CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020:
  case CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020:
  case CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_ptsz_v7000:
  case CUPTI_RUNTIME_TRACE_CBID_cudaThreadSynchronize_v3020:
    return 1;
  default:
    return 0;
  }
}

/* The simulator's own fatal errors (a rule the real library enforces by deadlocking, broken):
 * one line on stderr, also appended to $FAKEGPU_FATAL_LOG when set (scripts/test.sh sets it, so
 * that an abort in a process whose status nobody reads still fails the run: README.md), then
 * abort(). Shared with the CUPTI double through fg_tool.h. */
FG_API void fakegpu_fatalv(const char *fmt, va_list ap)
{
  char buf[768];
  int n = snprintf(buf, sizeof(buf), "fakegpu: FATAL: ");
  int m = vsnprintf(buf + n, sizeof(buf) - (size_t)n - 1, fmt, ap);
  if (m < 0)
    m = 0;
  n += m < (int)(sizeof(buf) - (size_t)n - 1) ? m : (int)(sizeof(buf) - (size_t)n - 2);
  buf[n++] = '\n';
  ssize_t w = write(2, buf, (size_t)n);
  const char *log = getenv("FAKEGPU_FATAL_LOG");
  int fd = log && *log ? open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644) : -1;
  if (fd >= 0) {
    w = write(fd, buf, (size_t)n);
    close(fd);
  }
  (void)w;
  abort();
}

static void fg_fatal(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void fg_fatal(const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  fakegpu_fatalv(fmt, ap);
}

/* `name` is about to run on this thread (before its ENTER): abort if the client may not call
 * it here. During InitializeInjection every call is the injection library's (cuInit runs
 * nothing else of the driver's meanwhile), whatever t_internal says. */
static void check_call_site(const char *name, int allowed)
{
  if (fg_in_injection())
    fg_fatal("%s called from inside InitializeInjection: it \"cannot call any CUDA runtime or "
             "driver code\" (cupti.md 1.1)", name);
  if (allowed || !t_client || t_client > FG_MAX_CLIENT ||
      t_internal != t_client_base[t_client - 1])
    return;
  if (t_client_kind[t_client - 1] == 1)
    fg_fatal("%s called from inside a CUPTI callback: only the synchronize functions may be "
             "(cupti.md 3.1, 6.2; the real driver may hang)", name);
  fg_fatal("%s called from inside the CUPTI buffer request/completion callback: no CUDA calls "
           "there (cupti.md 6.2; the real driver may hang)", name);
}

static void client_begin(int kind)
{
  if (t_client < FG_MAX_CLIENT) {
    t_client_kind[t_client] = kind;
    t_client_base[t_client] = t_internal;
  }
  t_client++;
}

static void client_end(void)
{
  if (t_client > 0)
    t_client--;
}

static void client_code(int enter)
{
  if (enter)
    client_begin(enter == 2 ? 1 : 2); /* 2: a callback (kind 1), 1: a buffer callback */
  else
    client_end();
}

static void client_callback(const struct fg_tool *t, CUpti_CallbackDomain domain,
                            CUpti_CallbackId cbid, const void *data)
{
  client_begin(1);
  t->callback(domain, cbid, data);
  client_end();
}

static uint64_t idle_time(void) { return fakegpu_gpu_idle_time_ns(); }

int fg_query_context_id(CUcontext ctx, uint32_t *id);
int fg_query_device_id(CUcontext ctx, uint32_t *id);
int fg_query_stream_id(CUcontext ctx, CUstream stream, uint8_t per_thread, uint32_t *id);
int fg_query_graph_node_id(CUgraphNode node, uint64_t *id);
int fg_query_graph_id(CUgraph graph, uint32_t *id);
int fg_query_graph_exec_id(CUgraphExec exec, uint32_t *id);

static const struct fg_driver_ops g_ops = {
    .initialized = fg_initialized,
    .dump = fg_dump,
    .context_id = fg_query_context_id,
    .device_id = fg_query_device_id,
    .stream_id = fg_query_stream_id,
    .graph_node_id = fg_query_graph_node_id,
    .graph_id = fg_query_graph_id,
    .graph_exec_id = fg_query_graph_exec_id,
    .idle_time = idle_time,
    .client_code = client_code,
};

/* A fork while another thread holds fg_lock must not leave the child's copy locked. The
 * driver never calls the tool with fg_lock held, so any order against CUPTI's handlers works. */
static void fork_prepare(void) { pthread_mutex_lock(&fg_lock); }
static void fork_release(void) { pthread_mutex_unlock(&fg_lock); }

static unsigned parse_nested(const char *v)
{
  unsigned mode = 0;
  char word[16];

  while (v && *v) {
    size_t n = strcspn(v, ",");
    if (n < sizeof(word)) {
      memcpy(word, v, n);
      word[n] = '\0';
      if (strcmp(word, "driver") == 0)
        mode |= FAKEGPU_NESTED_DRIVER;
      else if (strcmp(word, "runtime") == 0)
        mode |= FAKEGPU_NESTED_RUNTIME;
    }
    v += n + (v[n] == ',');
  }
  return mode;
}

__attribute__((constructor)) static void driver_load(void)
{
  pthread_atfork(fork_prepare, fork_release, fork_release);
  atomic_store(&g_nested, parse_nested(getenv("FAKEGPU_NESTED")));
}

FG_API unsigned fakegpu_nested_get(void) { return atomic_load(&g_nested); }

FG_API void fakegpu_nested_set(unsigned mode) { atomic_store(&g_nested, mode); }

FG_API const struct fg_driver_ops *fakegpu_tool_attach(const struct fg_tool *tool)
{
  atomic_store(&g_tool, tool);
  return &g_ops;
}

const struct fg_tool *fg_tool_get(void) { return atomic_load(&g_tool); }

uint64_t fg_now(void)
{
  const struct fg_tool *t = fg_tool_get();
  return t ? t->now() : fg_realtime_ns();
}

uint64_t fg_gpu_ts(uint64_t realtime_ns)
{
  const struct fg_tool *t = fg_tool_get();
  return t ? t->gpu_ts(realtime_ns) : realtime_ns;
}

int fg_kind_on(CUpti_ActivityKind kind, const struct fg_ctx *ctx)
{
  const struct fg_tool *t = fg_tool_get();
  return t && t->kind_enabled(kind, ctx ? ctx->uid : 0);
}

void fg_emit(const void *rec, size_t size, uint64_t complete_ns)
{
  const struct fg_tool *t = fg_tool_get();
  if (t)
    t->record(rec, size, complete_ns);
}

static uint32_t corr_next(const struct fg_tool *t)
{
  if (!t || !t->active())
    return 0;
  return atomic_fetch_add(&g_corr, 1) + 1;
}

static void push_frame(CUpti_CallbackDomain domain, uint32_t corr, uint32_t records)
{
  if (t_depth < FG_MAX_FRAMES)
    t_frames[t_depth] = (struct frame){domain, corr, records};
  t_depth++;
}

static void pop_frame(void)
{
  if (t_depth > 0)
    t_depth--;
}

uint32_t fg_corr_current(void)
{
  for (int i = (t_depth < FG_MAX_FRAMES ? t_depth : FG_MAX_FRAMES) - 1; i >= 0; i--)
    if (t_frames[i].corr)
      return t_frames[i].records;
  return 0;
}

uint32_t fg_corr_runtime(void)
{
  for (int i = (t_depth < FG_MAX_FRAMES ? t_depth : FG_MAX_FRAMES) - 1; i >= 0; i--)
    if (t_frames[i].domain == CUPTI_CB_DOMAIN_RUNTIME_API)
      return t_frames[i].corr;
  return 0;
}

static void api_callback(const struct fg_tool *t, CUpti_CallbackDomain domain,
                         CUpti_ApiCallbackSite site, uint32_t cbid, const char *name,
                         const void *params, void *ret, const char *symbol, uint32_t corr,
                         uint64_t *cdata)
{
  struct fg_ctx *ctx = fg_ctx_current();
  CUpti_CallbackData d = {
      .callbackSite = site,
      .functionName = name,
      .functionParams = params,
      .functionReturnValue = ret,
      .symbolName = symbol,
      .context = (CUcontext)ctx,
      .contextUid = ctx ? ctx->uid : 0,
      .correlationData = cdata,
      .correlationId = corr,
  };
  client_callback(t, domain, cbid, &d);
}

/* A driver call made now by the runtime double (inside its internal bracket) that nested mode
 * reports: only inside the innermost runtime call's own bracket. */
static int nested_driver_visible(void)
{
  if (!(atomic_load_explicit(&g_nested, memory_order_relaxed) & FAKEGPU_NESTED_DRIVER) ||
      t_rt_depth <= 0 || t_rt_depth > FG_MAX_FRAMES)
    return 0;
  return t_internal == t_rt[t_rt_depth - 1].internal_base + 1;
}

/* struct fg_call.traced bits. */
enum {
  FG_TRACED = 1,          /* ids, DRIVER records */
  FG_TRACED_CALLBACK = 2, /* ENTER delivered, so EXIT is */
  FG_TRACED_NESTED = 4,   /* a nested-mode call from inside the runtime double */
};

static int is_launch(uint32_t cbid)
{
  switch (cbid) {
  case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel:
  case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz:
  case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx:
  case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz:
  case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel:
  case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz:
    return 1;
  default:
    return 0;
  }
}

/* The EXIT callback is delivered only when ENTER was: a subscriber enabled between the two
 * (e.g. inside cuInit, which runs InitializeInjection) never sees a lone EXIT. */
void fg_call_enter(struct fg_call *c, uint32_t cbid, const char *name, const void *params,
                   const char *symbol)
{
  const struct fg_tool *t = fg_tool_get();
  memset(c, 0, sizeof(*c));
  c->cbid = cbid;
  c->name = name;
  c->params = params;
  c->symbol = symbol;
  check_call_site(name, driver_sync_allowed(cbid));
  if (t_internal) {
    if (!nested_driver_visible())
      return;
    /* What this driver function calls of the driver itself stays silent. */
    c->traced = FG_TRACED_NESTED;
    t_internal++;
  }
  c->traced |= FG_TRACED;
  c->corr = corr_next(t);
  /* Kernels carry the runtime call's id for runtime launches (cupti.md 3.6). */
  push_frame(CUPTI_CB_DOMAIN_DRIVER_API, c->corr,
             (c->traced & FG_TRACED_NESTED) && is_launch(cbid) && fg_corr_runtime()
                 ? fg_corr_runtime()
                 : c->corr);
  c->start = fg_now();
  if (t && c->corr && t->callback_enabled(CUPTI_CB_DOMAIN_DRIVER_API, cbid)) {
    c->traced |= FG_TRACED_CALLBACK;
    api_callback(t, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_API_ENTER, cbid, name, params, NULL,
                 symbol, c->corr, &c->cdata);
  }
}

CUresult fg_call_exit(struct fg_call *c, CUresult result)
{
  const struct fg_tool *t = fg_tool_get();
  if (!c->traced)
    return result;
  uint64_t end = fg_now();
  if (end <= c->start)
    end = c->start + 1;
  if (t && c->corr && t->api_enabled(CUPTI_ACTIVITY_KIND_DRIVER, c->cbid))
    t->api_record(CUPTI_ACTIVITY_KIND_DRIVER, c->cbid, c->start, end, c->corr, (uint32_t)result);
  if (t && (c->traced & FG_TRACED_CALLBACK))
    api_callback(t, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_API_EXIT, c->cbid, c->name, c->params,
                 &result, c->symbol, c->corr, &c->cdata);
  pop_frame();
  if ((c->traced & FG_TRACED_NESTED) && t_internal > 0)
    t_internal--;
  return result;
}

FG_API uint32_t fakegpu_runtime_enter(uint32_t cbid, const char *fname, const void *params,
                                      const char *symbol_name)
{
  const struct fg_tool *t = fg_tool_get();
  check_call_site(fname, runtime_sync_allowed(cbid));
  uint32_t corr = corr_next(t);
  push_frame(CUPTI_CB_DOMAIN_RUNTIME_API, corr, corr);
  if (t_rt_depth >= FG_MAX_FRAMES) {
    t_rt_depth++;
    return corr;
  }
  struct rt_call *r = &t_rt[t_rt_depth++];
  *r = (struct rt_call){cbid, fname, params, symbol_name, corr, fg_now(), 0, 0, t_internal};
  if (t && corr && t->callback_enabled(CUPTI_CB_DOMAIN_RUNTIME_API, cbid)) {
    r->entered = 1;
    api_callback(t, CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_API_ENTER, cbid, fname, params, NULL,
                 symbol_name, corr, &r->cdata);
  }
  return corr;
}

FG_API void fakegpu_runtime_exit(int result)
{
  const struct fg_tool *t = fg_tool_get();
  if (t_rt_depth <= 0)
    return;
  if (--t_rt_depth >= FG_MAX_FRAMES) {
    pop_frame();
    return;
  }
  struct rt_call *r = &t_rt[t_rt_depth];
  uint64_t end = fg_now();
  if (end <= r->start)
    end = r->start + 1;
  if (t && r->corr && t->api_enabled(CUPTI_ACTIVITY_KIND_RUNTIME, r->cbid))
    t->api_record(CUPTI_ACTIVITY_KIND_RUNTIME, r->cbid, r->start, end, r->corr,
                  (uint32_t)result);
  if (t && r->entered) {
    int ret = result;
    api_callback(t, CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_API_EXIT, r->cbid, r->name, r->params,
                 &ret, r->symbol, r->corr, &r->cdata);
  }
  pop_frame();
}

FG_API void fakegpu_internal_begin(void) { t_internal++; }

FG_API void fakegpu_internal_end(void)
{
  if (t_internal > 0)
    t_internal--;
}

void fg_resource(CUpti_CallbackIdResource cbid, struct fg_ctx *ctx, void *handle,
                 void *descriptor)
{
  const struct fg_tool *t = fg_tool_get();
  if (!t || !t->callback_enabled(CUPTI_CB_DOMAIN_RESOURCE, cbid))
    return;
  CUpti_ResourceData d;
  memset(&d, 0, sizeof(d));
  d.context = (CUcontext)ctx;
  d.resourceHandle.stream = (CUstream)handle;
  d.resourceDescriptor = descriptor;
  client_callback(t, CUPTI_CB_DOMAIN_RESOURCE, cbid, &d);
}

void fg_graph_callback(CUpti_CallbackIdResource cbid, struct fg_ctx *ctx, CUgraph graph,
                       CUgraphNode node, CUgraphNodeType type, CUgraphExec exec)
{
  CUpti_GraphData g;
  memset(&g, 0, sizeof(g));
  g.graph = graph;
  g.node = node;
  g.nodeType = type;
  g.graphExec = exec;
  fg_resource(cbid, ctx, NULL, &g);
}

void fg_sync_callback(CUpti_CallbackIdSync cbid, struct fg_ctx *ctx, CUstream stream)
{
  const struct fg_tool *t = fg_tool_get();
  if (!t || !t->callback_enabled(CUPTI_CB_DOMAIN_SYNCHRONIZE, cbid))
    return;
  CUpti_SynchronizeData d = {(CUcontext)ctx, stream};
  client_callback(t, CUPTI_CB_DOMAIN_SYNCHRONIZE, cbid, &d);
}
