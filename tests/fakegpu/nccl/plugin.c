/* The NCCL double's profiler plugin side: loading, v5/v4/v3 dispatch and NCCL 2.28.9's wrappers. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "tests/fakegpu/nccl/fakenccl.h"

/*
 * Everything here follows NCCL 2.28's src/plugin/profiler.cc, plugin_open.cc and
 * profiler/profiler_v{3,4,5}.cc (read for facts; the 2.28.9 binary in /usr/local/cuda/lib64
 * was disassembled to confirm the points marked [bin]). Quirks are kept on purpose: a plugin
 * tested against this double must survive the real library.
 */

#define FGN_GROUP_API_MASK                                                                         \
  (FGN_PROFILE_GROUP_API | FGN_PROFILE_P2P_API | FGN_PROFILE_COLL_API |                            \
   FGN_PROFILE_KERNEL_LAUNCH | FGN_PROFILE_GROUP | FGN_PROFILE_COLL | FGN_PROFILE_P2P |            \
   FGN_PROFILE_PROXY_OP | FGN_PROFILE_PROXY_STEP | FGN_PROFILE_KERNEL_CH | FGN_PROFILE_NET_PLUGIN)
#define FGN_PROXY_MASK                                                                             \
  (FGN_PROFILE_PROXY_OP | FGN_PROFILE_PROXY_STEP | FGN_PROFILE_KERNEL_CH | FGN_PROFILE_NET_PLUGIN)

enum { LOAD_FAILED = -1, LOAD_READY = 0, LOAD_SUCCESS = 1 };
enum { API_RESET = 0, API_STARTED = 1, API_STOPPED = 2 };

/* The one process-global activation mask every comm's init gets a pointer to. */
int fgn_event_mask;
__thread struct fgn_api_state fgn_api;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_status = LOAD_READY;
static int g_refs;
static void *g_lib;
static int g_version; /* 5, 4, 3; 0 while none is loaded */
static const fgn_profiler_v5 *g_v5;
static const fgn_profiler_v4 *g_v4;
static const fgn_profiler_v3 *g_v3;
/* NCCL's v3/v4 adapters install their event functions only once an init has succeeded. */
static bool g_adapter_ready;

static void log_fn(int level, unsigned long flags, const char *file, int line, const char *fmt, ...)
{
  (void)flags;
  (void)file;
  (void)line;
  const char *dbg = getenv("NCCL_DEBUG");
  if (!dbg || level > (strcasecmp(dbg, "INFO") == 0 ? 3 : strcasecmp(dbg, "WARN") == 0 ? 2 : 0))
    return;
  va_list ap;
  va_start(ap, fmt);
  fputs("fake NCCL plugin log: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

/* plugin_open.cc tryOpenLib: any case-insensitive prefix of STATIC_PLUGIN means the program. */
static void *try_open(const char *name)
{
  if (!name || !*name)
    return NULL;
  if (strncasecmp(name, "STATIC_PLUGIN", strlen(name)) == 0)
    name = NULL;
  void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!h)
    fgn_info("PROFILER/Plugin: %s", dlerror());
  return h;
}

/* plugin_open.cc openPluginLib: the value as given, then libnccl-profiler-<value>.so for a bare
 * name (no '/', and not already of the form lib*.so); unset means libnccl-profiler.so. */
static void *open_lib(const char *value)
{
  char name[256];
  snprintf(name, sizeof(name), "%s", value && *value ? value : "libnccl-profiler.so");
  void *h = try_open(name);
  if (h || !value || !*value || strchr(value, '/'))
    return h;
  size_t n = strlen(value);
  if (strncmp(value, "lib", 3) == 0 && n >= 3 && strcmp(value + n - 3, ".so") == 0)
    return NULL;
  snprintf(name, sizeof(name), "libnccl-profiler-%s.so", value);
  return try_open(name);
}

/* profiler.cc ncclProfilerPluginLoad; called with g_lock held. */
static void load_locked(void)
{
  if (g_status == LOAD_SUCCESS) {
    g_refs++;
    return;
  }
  const char *value = getenv("NCCL_PROFILER_PLUGIN");
  if (value)
    fgn_info("NCCL_PROFILER_PLUGIN set by environment to %s", value);
  if (value && strcasecmp(value, "none") == 0)
    goto fail;
  g_lib = open_lib(value);
  /* NCCL then falls back to the net plugin's library; the double has no external net plugin. */
  if (!g_lib)
    goto fail;
  int version = 0;
  if ((g_v5 = dlsym(g_lib, "ncclProfiler_v5")))
    version = 5;
  else if ((g_v4 = dlsym(g_lib, "ncclProfiler_v4")))
    version = 4;
  else if ((g_v3 = dlsym(g_lib, "ncclProfiler_v3")))
    version = 3;
  else {
    if (dlsym(g_lib, "ncclProfiler_v2") || dlsym(g_lib, "ncclProfiler_v1"))
      fprintf(stderr,
              "fake NCCL: profiler plugin %s exports only v2/v1, which the double does not "
              "adapt; running without it\n",
              value ? value : "libnccl-profiler.so");
    goto fail;
  }
  g_adapter_ready = false;
  /* Published last: event wrappers on other threads test it without the lock. */
  __atomic_store_n(&g_version, version, __ATOMIC_RELEASE);
  g_refs++;
  g_status = LOAD_SUCCESS;
  return;
fail:
  if (g_lib)
    dlclose(g_lib);
  g_lib = NULL;
  g_v5 = NULL;
  g_v4 = NULL;
  g_v3 = NULL;
  g_status = LOAD_FAILED; /* sticky for the process, as in NCCL */
}

static void unload_locked(void)
{
  if (--g_refs == 0) {
    __atomic_store_n(&g_version, 0, __ATOMIC_RELEASE);
    if (g_lib)
      dlclose(g_lib);
    g_lib = NULL;
    g_v5 = NULL;
    g_v4 = NULL;
    g_v3 = NULL;
    g_status = LOAD_READY;
  }
}

static int loaded_version(void)
{
  return __atomic_load_n(&g_version, __ATOMIC_ACQUIRE);
}

bool fgn_plugin_loaded(void)
{
  return loaded_version() != 0;
}

void fgn_plugin_init(struct ncclComm *comm)
{
  pthread_mutex_lock(&g_lock);
  if (g_status != LOAD_FAILED)
    load_locked();
  int version = g_version;
  int err = 0;
  if (version == 5) {
    err = g_v5->init(&comm->profiler_context, comm->comm_hash, &fgn_event_mask, comm->comm_name,
                     comm->nnodes, comm->nranks, comm->rank, log_fn);
  } else if (version == 4) {
    err = g_v4->init(&comm->profiler_context, &fgn_event_mask, comm->comm_name, comm->comm_hash,
                     comm->nnodes, comm->nranks, comm->rank, log_fn);
    if (!err)
      g_adapter_ready = true;
  } else if (version == 3) {
    err = g_v3->init(&comm->profiler_context, &fgn_event_mask);
    if (!err)
      g_adapter_ready = true;
  }
  pthread_mutex_unlock(&g_lock);
  /* [bin] 2.28.9 only logs a failed init and carries on: the plugin stays loaded and this
   * comm's events are still delivered with whatever context the plugin left. */
  if (err)
    fgn_info("Profiler init failed with error '%d': %s. Continue without profiler.", err,
             strerror(errno));
}

void fgn_plugin_finalize(struct ncclComm *comm)
{
  pthread_mutex_lock(&g_lock);
  if (g_version && comm->profiler_context) {
    if (g_version == 5)
      g_v5->finalize(comm->profiler_context);
    else if (g_version == 4)
      g_v4->finalize(comm->profiler_context);
    else
      g_v3->finalize(comm->profiler_context);
  }
  /* NCCL unloads once per destroyed comm, whether or not this comm's load was counted. */
  if (g_status != LOAD_FAILED)
    unload_locked();
  pthread_mutex_unlock(&g_lock);
}

/* ---- dispatch: v5 direct, v4/v3 through NCCL's adapters ---- */

static void adapter_missing(void)
{
  /* NCCL's adapter would call its still-NULL startEvent and crash the process here. */
  fprintf(stderr,
          "fake NCCL: event for a v%d plugin whose every init failed; NCCL 2.28.9 would "
          "call a NULL function pointer here\n",
          loaded_version());
}

static void start_event(void *ctx, void **handle, fgn_descr_v5 *d)
{
  if (loaded_version() == 5) {
    g_v5->startEvent(ctx, handle, d);
    return;
  }
  if (!g_adapter_ready) {
    adapter_missing();
    return;
  }
  if (loaded_version() == 4) {
    /* profiler_v4.cc: types unknown to v4 return at once, leaving *handle as it was. */
    fgn_descr_v4 d4;
    d4.type = (uint8_t)d->type;
    d4.parentObj = d->parentObj;
    d4.rank = d->rank;
    if (d->type == FGN_PROFILE_COLL) {
      d4.coll.seqNumber = d->coll.seqNumber;
      d4.coll.func = d->coll.func;
      d4.coll.sendBuff = d->coll.sendBuff;
      d4.coll.recvBuff = d->coll.recvBuff;
      d4.coll.count = d->coll.count;
      d4.coll.root = d->coll.root;
      d4.coll.datatype = d->coll.datatype;
      d4.coll.nChannels = d->coll.nChannels;
      d4.coll.nWarps = d->coll.nWarps;
      d4.coll.algo = d->coll.algo;
      d4.coll.proto = d->coll.proto;
      d4.parentObj = d->coll.parentGroup;
    } else if (d->type == FGN_PROFILE_P2P) {
      d4.p2p.func = d->p2p.func;
      d4.p2p.buff = d->p2p.buff;
      d4.p2p.count = d->p2p.count;
      d4.p2p.datatype = d->p2p.datatype;
      d4.p2p.peer = d->p2p.peer;
      d4.p2p.nChannels = d->p2p.nChannels;
      d4.parentObj = d->p2p.parentGroup;
    } else if (d->type != FGN_PROFILE_GROUP) {
      return;
    }
    g_v4->startEvent(ctx, handle, &d4);
    return;
  }
  /* profiler_v3.cc clears *handle first; name and commHash are left 0 (removed in v4). */
  *handle = NULL;
  fgn_descr_v3 d3;
  memset(&d3, 0, sizeof(d3));
  d3.type = (uint8_t)d->type;
  d3.parentObj = d->parentObj;
  d3.rank = d->rank;
  if (d->type == FGN_PROFILE_COLL) {
    d3.parentObj = d->coll.parentGroup;
    d3.coll.seqNumber = d->coll.seqNumber;
    d3.coll.func = d->coll.func;
    d3.coll.sendBuff = d->coll.sendBuff;
    d3.coll.recvBuff = d->coll.recvBuff;
    d3.coll.count = d->coll.count;
    d3.coll.root = d->coll.root;
    d3.coll.datatype = d->coll.datatype;
    d3.coll.nMaxChannels = d->coll.nChannels;
    d3.coll.nWarps = d->coll.nWarps;
    d3.coll.algo = d->coll.algo;
    d3.coll.proto = d->coll.proto;
  } else if (d->type == FGN_PROFILE_P2P) {
    d3.parentObj = d->p2p.parentGroup;
    d3.p2p.func = d->p2p.func;
    d3.p2p.buff = d->p2p.buff;
    d3.p2p.count = d->p2p.count;
    d3.p2p.datatype = d->p2p.datatype;
    d3.p2p.peer = d->p2p.peer;
  } else if (d->type != FGN_PROFILE_GROUP) {
    return;
  }
  g_v3->startEvent(ctx, handle, &d3);
}

static void stop_event(void *handle)
{
  /* Both adapters hand stopEvent straight to the plugin. */
  if (loaded_version() == 5)
    g_v5->stopEvent(handle);
  else if (!g_adapter_ready)
    adapter_missing();
  else if (loaded_version() == 4)
    g_v4->stopEvent(handle);
  else
    g_v3->stopEvent(handle);
}

static void record_state(void *handle, int state)
{
  /* The only states the double makes are the two group-API ones, which the v4/v3 adapters drop. */
  if (loaded_version() == 5)
    g_v5->recordEventState(handle, state, NULL);
}

/* ---- profiler.cc wrappers ---- */

void fgn_start_group_api(struct ncclComm *comm, bool captured)
{
  fgn_descr_v5 d;
  memset(&d, 0, sizeof(d));
  d.type = FGN_PROFILE_GROUP_API;
  d.groupApi.graphCaptured = captured;
  /* Read at every collective/p2p call, whether or not a plugin is loaded. */
  fgn_api.mask = __atomic_load_n(&fgn_event_mask, __ATOMIC_RELAXED);
  if (fgn_plugin_loaded() && (fgn_api.mask & FGN_GROUP_API_MASK)) {
    /* Only the outermost group gets an event; eDescr.rank stays 0 in 2.28.9. */
    if (fgn_api.profiler_group_depth == 0) {
      d.groupApi.groupDepth = fgn_group_depth;
      start_event(comm->profiler_context, &fgn_api.group_api, &d);
      fgn_api.profiler_group_depth = fgn_group_depth;
      fgn_api.state = API_STARTED;
    }
  }
}

void fgn_stop_group_api(void)
{
  void *h = fgn_api.group_api;
  if (fgn_plugin_loaded() && h && fgn_api.profiler_group_depth == 0) {
    stop_event(h);
    fgn_api.group_api = NULL;
  }
}

void fgn_record_group_api(int state)
{
  void *h = fgn_api.group_api;
  bool record = false;
  if (state == FGN_STATE_GROUP_START_API_STOP && fgn_api.state == API_STARTED) {
    fgn_api.state = API_STOPPED;
    record = true;
  } else if (state == FGN_STATE_GROUP_END_API_START && fgn_api.state == API_STOPPED) {
    fgn_api.state = API_RESET;
    record = true;
  }
  if (fgn_plugin_loaded() && h && record)
    record_state(h, state);
}

void fgn_start_coll_api(struct ncclComm *comm, enum fgn_func func, size_t count,
                        ncclDataType_t type, int root, CUstream stream, bool captured)
{
  fgn_descr_v5 d;
  memset(&d, 0, sizeof(d));
  d.type = FGN_PROFILE_COLL_API;
  d.parentObj = fgn_api.group_api;
  d.collApi.func = fgn_func_name(func);
  d.collApi.count = count;
  d.collApi.datatype = fgn_type_name(type);
  d.collApi.stream = stream;
  d.collApi.root = root;
  d.collApi.graphCaptured = captured;
  if (fgn_plugin_loaded() &&
      (fgn_api.mask & (FGN_PROFILE_COLL_API | FGN_PROFILE_COLL | FGN_PROXY_MASK)))
    start_event(comm->profiler_context, &fgn_api.coll_api, &d);
}

void fgn_stop_coll_api(void)
{
  /* [bin] 2.28.9 leaves the handle in place after the stop, so a later collective whose mask
   * no longer enables CollApi stops this stale handle again. */
  if (fgn_plugin_loaded() && fgn_api.coll_api)
    stop_event(fgn_api.coll_api);
}

void fgn_start_p2p_api(struct ncclComm *comm, enum fgn_func func, size_t count, ncclDataType_t type,
                       CUstream stream, bool captured)
{
  fgn_descr_v5 d;
  memset(&d, 0, sizeof(d));
  d.type = FGN_PROFILE_P2P_API;
  d.parentObj = fgn_api.group_api;
  d.p2pApi.func = fgn_func_name(func);
  d.p2pApi.count = count;
  d.p2pApi.datatype = fgn_type_name(type);
  d.p2pApi.stream = stream;
  d.p2pApi.graphCaptured = captured;
  if (fgn_plugin_loaded() &&
      (fgn_api.mask & (FGN_PROFILE_P2P_API | FGN_PROFILE_P2P | FGN_PROXY_MASK)))
    start_event(comm->profiler_context, &fgn_api.p2p_api, &d);
}

void fgn_stop_p2p_api(void)
{
  if (fgn_plugin_loaded() && fgn_api.p2p_api) {
    stop_event(fgn_api.p2p_api);
    fgn_api.p2p_api = NULL;
  }
}

/* The mask and GroupApi handle of a plan: those of its first task that had a mask. */
static int plan_mask(const struct fgn_plan *plan, void **group_api)
{
  for (const struct fgn_task *t = plan->colls; t; t = t->next)
    if (t->mask) {
      *group_api = t->group_api;
      return t->mask;
    }
  for (const struct fgn_task *t = plan->p2ps; t; t = t->next)
    if (t->mask) {
      *group_api = t->group_api;
      return t->mask;
    }
  *group_api = NULL;
  return 0;
}

void fgn_start_kernel_launch(struct ncclComm *comm, struct fgn_plan *plan)
{
  if (!fgn_plugin_loaded())
    return;
  void *group_api;
  int mask = plan_mask(plan, &group_api);
  if (mask & FGN_PROFILE_KERNEL_LAUNCH) {
    fgn_descr_v5 d;
    memset(&d, 0, sizeof(d));
    d.type = FGN_PROFILE_KERNEL_LAUNCH;
    d.parentObj = group_api;
    d.kernelLaunch.stream = plan->stream;
    start_event(comm->profiler_context, &plan->kernel_launch, &d);
  }
}

void fgn_stop_kernel_launch(struct fgn_plan *plan)
{
  if (fgn_plugin_loaded() && plan->kernel_launch)
    stop_event(plan->kernel_launch);
}

void fgn_start_group(struct ncclComm *comm, struct fgn_plan *plan)
{
  if (!fgn_plugin_loaded())
    return;
  void *group_api;
  int mask = plan_mask(plan, &group_api);
  if (mask & (FGN_PROFILE_GROUP | FGN_PROFILE_COLL | FGN_PROFILE_P2P | FGN_PROXY_MASK)) {
    fgn_descr_v5 d;
    memset(&d, 0, sizeof(d));
    d.type = FGN_PROFILE_GROUP;
    start_event(comm->profiler_context, &plan->group, &d);
  }
}

void fgn_stop_group(struct fgn_plan *plan)
{
  if (fgn_plugin_loaded() && plan->group)
    stop_event(plan->group);
}

void fgn_start_tasks(struct ncclComm *comm, struct fgn_plan *plan)
{
  for (struct fgn_task *t = plan->colls; t; t = t->next) {
    if (fgn_plugin_loaded() && (t->mask & (FGN_PROFILE_COLL | FGN_PROXY_MASK))) {
      fgn_descr_v5 d;
      memset(&d, 0, sizeof(d));
      d.type = FGN_PROFILE_COLL;
      d.coll.parentGroup = plan->group;
      d.parentObj = t->api;
      d.rank = comm->rank;
      d.coll.seqNumber = comm->seq_number[t->func];
      d.coll.func = fgn_func_name(t->func);
      d.coll.sendBuff = t->sendbuff;
      d.coll.recvBuff = t->recvbuff;
      d.coll.count = t->count;
      d.coll.root = t->root;
      d.coll.datatype = fgn_type_name(t->datatype);
      d.coll.nChannels = t->nchannels;
      d.coll.nWarps = t->nwarps;
      d.coll.algo = "RING";
      d.coll.proto = "LL";
      start_event(comm->profiler_context, &t->event, &d);
    }
    /* Counted whether or not a plugin listens (RAS uses them); graphs are not simulated. */
    __atomic_fetch_add(&comm->seq_number[t->func], 1, __ATOMIC_RELAXED);
  }
  if (!fgn_plugin_loaded())
    return;
  for (struct fgn_task *t = plan->p2ps; t; t = t->next) {
    if (t->mask & (FGN_PROFILE_P2P | FGN_PROXY_MASK)) {
      fgn_descr_v5 d;
      memset(&d, 0, sizeof(d));
      d.type = FGN_PROFILE_P2P;
      d.p2p.parentGroup = plan->group;
      d.parentObj = t->api;
      d.rank = comm->rank;
      d.p2p.func = fgn_func_name(t->func);
      d.p2p.buff = t->recvbuff;
      d.p2p.count = t->count;
      d.p2p.datatype = fgn_type_name(t->datatype);
      d.p2p.peer = t->root;
      d.p2p.nChannels = t->nchannels;
      start_event(comm->profiler_context, &t->event, &d);
    }
  }
}

void fgn_stop_tasks(struct fgn_plan *plan)
{
  if (!fgn_plugin_loaded())
    return;
  for (struct fgn_task *t = plan->colls; t; t = t->next)
    if (t->event)
      stop_event(t->event);
  for (struct fgn_task *t = plan->p2ps; t; t = t->next)
    if (t->event)
      stop_event(t->event);
}
