/* NCCL profiler plugin entry points: ncclProfiler_v5/v4/v3, exported by libgpuprof.so itself. */
#define LOG_MODULE "nccl"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include <nccl.h>

#include "agent/agent.h"
#include "agent/nccl.h"
#include "agent/util/export.h"
#include "agent/util/guard.h"
#include "agent/util/log.h"
#include "cupti/loader.h"

/*
 * NCCL dlopens NCCL_PROFILER_PLUGIN and looks up the data symbols ncclProfiler_v5,
 * ncclProfiler_v4, ... (the first one found wins). dlopen of the path libcuda already loaded
 * through CUDA_INJECTION64_PATH returns the same handle, so this plugin sees the agent's own
 * state. The NCCL profiler headers are not installed with NCCL: the layouts below are written
 * from cupti.md 4.3 (NCCL 2.26 = v3, 2.27 = v4, 2.28 = v5). Only init may fail; every other
 * callback returns ncclSuccess whatever happens, and a NULL handle for events the plugin does
 * not keep (NCCL then never calls stop/record for them, or calls them with NULL: a no-op).
 */

typedef void (*gp_nccl_logger_t)(int level, unsigned long flags, const char *file, int line,
                                 const char *fmt, ...);

/*
 * The members that the v3, v4 and v5 descriptors name alike (in different layouts, hence macros
 * rather than a function): what an op is, how much, and for Coll how NCCL runs it.
 */
#define DESC_COMMON(od, e)                                                                         \
  ((od).func = (e).func, (od).count = (e).count, (od).datatype = (e).datatype)
#define DESC_COLL(od, e)                                                                           \
  (DESC_COMMON(od, e), (od).root = func_has_root((od).func) ? (e).root : -1,                       \
   (od).seq = (e).seqNumber, (od).has_seq = 1, (od).algo = (e).algo, (od).proto = (e).proto)
#define DESC_P2P(od, e) (DESC_COMMON(od, e), (od).peer = (e).peer)

/* ---- v5 (NCCL 2.28) ---- */

typedef struct {
  uint64_t type;
  void *parentObj;
  int rank;
  union {
    struct {
      bool graphCaptured;
      int groupDepth;
    } groupApi;
    struct {
      const char *func;
      size_t count;
      const char *datatype;
      int root;
      void *stream;
      bool graphCaptured;
    } collApi;
    struct {
      const char *func;
      size_t count;
      const char *datatype;
      void *stream;
      bool graphCaptured;
    } p2pApi;
    struct {
      void *stream;
    } kernelLaunch;
    struct {
      uint64_t seqNumber;
      const char *func;
      const void *sendBuff;
      void *recvBuff;
      size_t count;
      int root;
      const char *datatype;
      uint8_t nChannels;
      uint8_t nWarps;
      const char *algo;
      const char *proto;
      void *parentGroup;
    } coll;
    struct {
      const char *func;
      void *buff;
      const char *datatype;
      size_t count;
      int peer;
      uint8_t nChannels;
      void *parentGroup;
    } p2p;
    struct {
      pid_t pid;
      uint8_t channelId;
      int peer;
      int nSteps;
      int chunkSize;
      int isSend;
    } proxyOp;
    struct {
      int step;
    } proxyStep;
    struct {
      uint8_t channelId;
      uint64_t pTimer;
    } kernelCh;
    struct {
      int64_t id;
      void *data;
    } netPlugin;
  };
} gp_nccl_descr_v5;

typedef struct {
  const char *name;
  ncclResult_t (*init)(void **context, uint64_t commId, int *eActivationMask, const char *commName,
                       int nNodes, int nranks, int rank, gp_nccl_logger_t logfn);
  ncclResult_t (*startEvent)(void *context, void **eHandle, gp_nccl_descr_v5 *eDescr);
  ncclResult_t (*stopEvent)(void *eHandle);
  ncclResult_t (*recordEventState)(void *eHandle, int eState, void *eStateArgs);
  ncclResult_t (*finalize)(void *context);
} gp_nccl_profiler_v5;

/* ---- v4 (NCCL 2.27): uint8_t type, no API events, comm described at init ---- */

typedef struct {
  uint8_t type;
  void *parentObj;
  int rank;
  union {
    struct {
      uint64_t seqNumber;
      const char *func;
      const void *sendBuff;
      void *recvBuff;
      size_t count;
      int root;
      const char *datatype;
      uint8_t nChannels;
      uint8_t nWarps;
      const char *algo;
      const char *proto;
    } coll;
    struct {
      const char *func;
      void *buff;
      const char *datatype;
      size_t count;
      int peer;
      uint8_t nChannels;
    } p2p;
  };
} gp_nccl_descr_v4;

typedef struct {
  const char *name;
  ncclResult_t (*init)(void **context, int *eActivationMask, const char *commName,
                       uint64_t commHash, int nNodes, int nranks, int rank, gp_nccl_logger_t logfn);
  ncclResult_t (*startEvent)(void *context, void **eHandle, gp_nccl_descr_v4 *eDescr);
  ncclResult_t (*stopEvent)(void *eHandle);
  ncclResult_t (*recordEventState)(void *eHandle, int eState, void *eStateArgs);
  ncclResult_t (*finalize)(void *context);
} gp_nccl_profiler_v4;

/* ---- v3 (NCCL 2.26): init knows no communicator, every event names its own ---- */

typedef struct {
  uint8_t type;
  void *parentObj;
  int rank;
  union {
    struct {
      const char *name;
      uint64_t commHash;
      uint64_t seqNumber;
      const char *func;
      const void *sendBuff;
      void *recvBuff;
      size_t count;
      int root;
      const char *datatype;
      uint8_t nMaxChannels;
      uint8_t nWarps;
      const char *algo;
      const char *proto;
    } coll;
    struct {
      const char *name;
      uint64_t commHash;
      const char *func;
      void *buff;
      const char *datatype;
      size_t count;
      int peer;
    } p2p;
  };
} gp_nccl_descr_v3;

typedef struct {
  const char *name;
  ncclResult_t (*init)(void **context, int *eActivationMask);
  ncclResult_t (*startEvent)(void *context, void **eHandle, gp_nccl_descr_v3 *eDescr);
  ncclResult_t (*stopEvent)(void *eHandle);
  ncclResult_t (*recordEventState)(void *eHandle, int eState, void *eStateArgs);
  ncclResult_t (*finalize)(void *context);
} gp_nccl_profiler_v3;

/* ---- common ---- */

/* Only these collectives have a root; NCCL passes root 0 for the others. */
static int func_has_root(const char *func)
{
  return func && (!strcmp(func, "Broadcast") || !strcmp(func, "Reduce") ||
                  !strcmp(func, "Gather") || !strcmp(func, "Scatter"));
}

/* The v3 context: any non-NULL value (communicators are found by the events' hashes). */
static char v3_context;

/*
 * Whether a communicator's events can be recorded. The agent is normally initialised by then
 * (NCCL's comm init calls CUDA before it loads the plugin, and cuInit injects the agent);
 * UNINIT means the library was loaded as a plugin only. One line says so, and NCCL runs
 * without events (mask 0).
 */
static int plugin_usable(int *mask)
{
  int state = atomic_load_explicit(&agent_state_word, memory_order_acquire);

  if (state == AGENT_ACTIVE || state == AGENT_STARTING)
    return 1;
  if (mask)
    *mask = 0;
  if (state == AGENT_UNINIT)
    log_warn_once("NCCL_PROFILER_PLUGIN loads gpuprof, but CUDA_INJECTION64_PATH did not: NCCL "
                  "operations are not recorded (set CUDA_INJECTION64_PATH to the same path)");
  else
    log_debug("NCCL profiler plugin: the agent is not active; NCCL events stay off");
  return 0;
}

static ncclResult_t init_comm(void **context, int *mask, uint64_t hash, const char *name,
                              int nnodes, int nranks, int rank, int legacy)
{
  int saved;
  uint32_t dev;

  if (context)
    *context = NULL;
  if (!context || !mask || !plugin_usable(mask) || !guard_enter(&saved))
    return ncclSuccess;
  /* NCCL made the communicator's device current on this thread (cudaSetDevice at the start of
   * ncclCommInitRankFunc, whose initTransportsRank calls this init). */
  if (!cupti_fn.GetDeviceId || cupti_fn.GetDeviceId(NULL, &dev) != CUPTI_SUCCESS)
    dev = UINT32_MAX;
  *context = nccl_comm_add(hash, name, nnodes, nranks, rank, dev == UINT32_MAX ? -1 : (int32_t)dev);
  /* Even for a communicator the table has no room for (its events come with a NULL context
   * and are ignored): the mask is one int for the whole process, and 0 here would switch off
   * the events of every other communicator. */
  *mask = nccl_plugin_mask(mask, legacy);
  guard_leave(saved);
  return ncclSuccess;
}

static ncclResult_t init_v5(void **context, uint64_t commId, int *mask, const char *commName,
                            int nNodes, int nranks, int rank, gp_nccl_logger_t logfn)
{
  (void)logfn;
  return init_comm(context, mask, commId, commName, nNodes, nranks, rank, 0);
}

static ncclResult_t init_v4(void **context, int *mask, const char *commName, uint64_t commHash,
                            int nNodes, int nranks, int rank, gp_nccl_logger_t logfn)
{
  (void)logfn;
  return init_comm(context, mask, commHash, commName, nNodes, nranks, rank, 1);
}

static ncclResult_t init_v3(void **context, int *mask)
{
  if (context)
    *context = NULL;
  if (!context || !mask || !plugin_usable(mask))
    return ncclSuccess;
  *context = &v3_context;
  *mask = nccl_plugin_mask(mask, 1);
  return ncclSuccess;
}

static ncclResult_t stop_event(void *handle)
{
  int saved;

  if (!handle || !agent_is_active() || !guard_enter(&saved))
    return ncclSuccess;
  nccl_handle_stop(handle);
  guard_leave(saved);
  return ncclSuccess;
}

static ncclResult_t record_state(void *handle, int state, void *args)
{
  (void)handle;
  (void)state;
  (void)args;
  return ncclSuccess;
}

static ncclResult_t finalize(void *context)
{
  /* The communicator's entry stays: records of its last kernels may still be decoded. Its ops
   * posted so far are no longer pending (a destroyed or aborted communicator runs nothing). */
  nccl_comm_finalize(context);
  return ncclSuccess;
}

static ncclResult_t start_v5(void *context, void **handle, gp_nccl_descr_v5 *d)
{
  struct nccl_comm_slot *c = context;
  struct nccl_op_desc od = {.root = -1, .peer = -1};
  int saved;

  if (!handle)
    return ncclSuccess;
  *handle = NULL;
  if (!c || !d || !agent_is_active() || !guard_enter(&saved))
    return ncclSuccess;
  switch (d->type) {
  case NCCL_EV_COLL_API:
    DESC_COMMON(od, d->collApi);
    od.root = func_has_root(od.func) ? d->collApi.root : -1;
    od.graph_captured = d->collApi.graphCaptured;
    *handle = nccl_api_start(c, &od);
    break;
  case NCCL_EV_P2P_API:
    DESC_COMMON(od, d->p2pApi);
    od.graph_captured = d->p2pApi.graphCaptured;
    *handle = nccl_api_start(c, &od);
    break;
  case NCCL_EV_KERNEL_LAUNCH:
    *handle = nccl_launch_start(c);
    break;
  case NCCL_EV_COLL:
    /* No API event before it: its CollApi was dropped (pool full, counted then) or came
     * while events were off. */
    if (!d->parentObj)
      break;
    DESC_COLL(od, d->coll);
    od.nchannels = d->coll.nChannels;
    *handle = nccl_task_start(c, d->parentObj, &od);
    break;
  case NCCL_EV_P2P:
    if (!d->parentObj)
      break;
    DESC_P2P(od, d->p2p);
    od.nchannels = d->p2p.nChannels;
    *handle = nccl_task_start(c, d->parentObj, &od);
    break;
  default:
    /* Group, GroupApi (NCCL starts them whenever API events are on), proxy, kernel channel,
     * and types of later versions: not kept. */
    nccl_count_ignored();
    break;
  }
  guard_leave(saved);
  return ncclSuccess;
}

/* v3 and v4 Coll/P2p: no API event before them (parentObj is a Group event, not ours). */
static void legacy_task(struct nccl_comm_slot *c, void **handle, const struct nccl_op_desc *od)
{
  *handle = nccl_task_start(c, NULL, od);
}

static ncclResult_t start_v4(void *context, void **handle, gp_nccl_descr_v4 *d)
{
  struct nccl_op_desc od = {.root = -1, .peer = -1};
  int saved;

  if (!handle)
    return ncclSuccess;
  *handle = NULL;
  if (!context || !d || !agent_is_active() || !guard_enter(&saved))
    return ncclSuccess;
  if (d->type == NCCL_EV_COLL) {
    DESC_COLL(od, d->coll);
    od.nchannels = d->coll.nChannels;
    legacy_task(context, handle, &od);
  } else if (d->type == NCCL_EV_P2P) {
    DESC_P2P(od, d->p2p);
    od.nchannels = d->p2p.nChannels;
    legacy_task(context, handle, &od);
  } else {
    nccl_count_ignored();
  }
  guard_leave(saved);
  return ncclSuccess;
}

static ncclResult_t start_v3(void *context, void **handle, gp_nccl_descr_v3 *d)
{
  struct nccl_op_desc od = {.root = -1, .peer = -1};
  struct nccl_comm_slot *c;
  int saved;

  if (!handle)
    return ncclSuccess;
  *handle = NULL;
  if (!context || !d || !agent_is_active() || !guard_enter(&saved))
    return ncclSuccess;
  if (d->type == NCCL_EV_COLL) {
    DESC_COLL(od, d->coll);
    od.nchannels = d->coll.nMaxChannels;
    if ((c = nccl_comm_find_or_add(d->coll.commHash, d->coll.name)))
      legacy_task(c, handle, &od);
  } else if (d->type == NCCL_EV_P2P) {
    DESC_P2P(od, d->p2p);
    if ((c = nccl_comm_find_or_add(d->p2p.commHash, d->p2p.name)))
      legacy_task(c, handle, &od);
  } else {
    nccl_count_ignored();
  }
  guard_leave(saved);
  return ncclSuccess;
}

GPUPROF_EXPORT gp_nccl_profiler_v5 ncclProfiler_v5 = {
    .name = "gpuprof",
    .init = init_v5,
    .startEvent = start_v5,
    .stopEvent = stop_event,
    .recordEventState = record_state,
    .finalize = finalize,
};

GPUPROF_EXPORT gp_nccl_profiler_v4 ncclProfiler_v4 = {
    .name = "gpuprof",
    .init = init_v4,
    .startEvent = start_v4,
    .stopEvent = stop_event,
    .recordEventState = record_state,
    .finalize = finalize,
};

GPUPROF_EXPORT gp_nccl_profiler_v3 ncclProfiler_v3 = {
    .name = "gpuprof",
    .init = init_v3,
    .startEvent = start_v3,
    .stopEvent = stop_event,
    .recordEventState = record_state,
    .finalize = finalize,
};
