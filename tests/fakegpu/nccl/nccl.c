/* libnccl.so.2 double: communicators, groups and collectives that behave as NCCL 2.28.9 does. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "tests/fakegpu/fakegpu.h"
#include "tests/fakegpu/nccl/fakenccl.h"

/*
 * Where each behaviour comes from (NCCL 2.28, read for facts): API validation in
 * src/misc/argcheck.cc (ArgsCheck, CommCheck, PtrCheck); the call path in src/enqueue.cc
 * (ncclEnqueueCheck -> taskAppend -> collTaskAppend / p2pTaskAppend, ncclLaunchKernel,
 * ncclLaunchKernelAfter_NoCuda -> hostStreamPlanTask); groups in src/group.cc
 * (ncclGroupEndInternal, doLaunches) and src/include/group.h (ncclGroupCommJoin); kernel
 * selection in src/device/generate.py (best_kernel, equivalent_primary); commHash in
 * src/init.cc (getHash of the unique id). README.md in this folder lists what is left out.
 */

__thread int fgn_group_depth;
static __thread ncclResult_t t_group_error;
static __thread struct ncclComm *t_group_head;

static pthread_mutex_t g_log_lock = PTHREAD_MUTEX_INITIALIZER;
static char g_last_error[1024];

/* ---- logging ---- */

static int debug_level(void)
{
  const char *v = getenv("NCCL_DEBUG");
  if (!v)
    return 0;
  if (strcasecmp(v, "VERSION") == 0)
    return 1;
  if (strcasecmp(v, "WARN") == 0)
    return 2;
  if (strcasecmp(v, "INFO") == 0)
    return 3;
  if (strcasecmp(v, "TRACE") == 0)
    return 5;
  return 0;
}

void fgn_warn(const char *fmt, ...)
{
  va_list ap;
  pthread_mutex_lock(&g_log_lock);
  va_start(ap, fmt);
  vsnprintf(g_last_error, sizeof(g_last_error), fmt, ap);
  va_end(ap);
  if (debug_level() >= 2)
    fprintf(stderr, "fake NCCL WARN %s\n", g_last_error);
  pthread_mutex_unlock(&g_log_lock);
}

void fgn_info(const char *fmt, ...)
{
  if (debug_level() < 3)
    return;
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  fprintf(stderr, "fake NCCL INFO %s\n", line);
}

/* ---- NCCL's tables ---- */

const char *fgn_func_name(enum fgn_func f)
{
  static const char *const names[FGN_FUNC_COUNT] = {
      "Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce", "SendRecv", "Send", "Recv"};
  return (unsigned)f < FGN_FUNC_COUNT ? names[f] : "Invalid";
}

/* ncclDatatypeToString: ncclUint8 has no case in 2.28.9 and reads "Unknown". */
const char *fgn_type_name(ncclDataType_t t)
{
  switch (t) {
  case ncclInt8:
    return "ncclInt8";
  case ncclInt32:
    return "ncclInt32";
  case ncclUint32:
    return "ncclUint32";
  case ncclInt64:
    return "ncclInt64";
  case ncclUint64:
    return "ncclUint64";
  case ncclFloat16:
    return "ncclFloat16";
  case ncclFloat32:
    return "ncclFloat32";
  case ncclFloat64:
    return "ncclFloat64";
  case ncclBfloat16:
    return "ncclBfloat16";
  case ncclFloat8e4m3:
    return "ncclFloat8e4m3";
  case ncclFloat8e5m2:
    return "ncclFloat8e5m2";
  default:
    return "Unknown";
  }
}

static int type_size(ncclDataType_t t)
{
  switch (t) {
  case ncclInt8:
  case ncclUint8:
  case ncclFloat8e4m3:
  case ncclFloat8e5m2:
    return 1;
  case ncclFloat16:
  case ncclBfloat16:
    return 2;
  case ncclInt32:
  case ncclUint32:
  case ncclFloat32:
    return 4;
  default:
    return 8;
  }
}

/* The kernel's type suffix: generate.py's equivalent_primary maps signed to unsigned. */
static const char *kernel_type(ncclDataType_t t)
{
  switch (t) {
  case ncclInt8:
  case ncclUint8:
    return "u8";
  case ncclInt32:
  case ncclUint32:
    return "u32";
  case ncclInt64:
  case ncclUint64:
    return "u64";
  case ncclFloat16:
    return "f16";
  case ncclFloat32:
    return "f32";
  case ncclFloat64:
    return "f64";
  case ncclBfloat16:
    return "bf16";
  case ncclFloat8e4m3:
    return "f8e4m3";
  default:
    return "f8e5m2";
  }
}

/* ---- kernels ---- */

#define FGN_MAX_KERNELS 64
static pthread_once_t g_kernels_once = PTHREAD_ONCE_INIT;
static char g_kernel_names[FGN_MAX_KERNELS][128];
static int g_nkernels;
static CUmodule g_module;

/* NCCL's mangled name for ncclDevKernel_<suffix>(ncclDevKernelArgsStorage<4096>). */
static void mangle(char *out, size_t n, const char *suffix)
{
  char base[96];
  int k = snprintf(base, sizeof(base), "ncclDevKernel_%s", suffix);
  if (k < 0 || (size_t)k >= sizeof(base))
    base[0] = '\0';
  k = snprintf(out, n, "_Z%zu%s24ncclDevKernelArgsStorageILm4096EE", strlen(base), base);
  if (k < 0 || (size_t)k >= n)
    out[0] = '\0'; /* never with NCCL's names; an empty name makes the launch fail loudly */
}

/* The kernels the double can launch: the RING/LL specializations NCCL 2.28.9 ships. */
static void kernels_load(void)
{
  static const char *const colls[] = {"AllReduce", "Reduce", "ReduceScatter"};
  static const char *const types[] = {"u8",  "u32",  "u64",    "f16",   "f32",
                                      "f64", "bf16", "f8e4m3", "f8e5m2"};
  const char *names[FGN_MAX_KERNELS];
  mangle(g_kernel_names[g_nkernels++], 128, "Generic");
  mangle(g_kernel_names[g_nkernels++], 128, "SendRecv");
  mangle(g_kernel_names[g_nkernels++], 128, "AllGather_RING_LL");
  mangle(g_kernel_names[g_nkernels++], 128, "Broadcast_RING_LL");
  for (size_t c = 0; c < sizeof(colls) / sizeof(colls[0]); c++)
    for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
      char suffix[64];
      snprintf(suffix, sizeof(suffix), "%s_Sum_%s_RING_LL", colls[c], types[t]);
      mangle(g_kernel_names[g_nkernels++], 128, suffix);
    }
  for (int i = 0; i < g_nkernels; i++)
    names[i] = g_kernel_names[i];
  if (fakegpu_module_from_names(&g_module, names, g_nkernels) != 0)
    g_module = NULL;
}

/* A task's kernel and whether it is specialized for the task (NCCL's
 * ncclDevKernelForFunc / ncclDevKernelForFuncIsSpecialized under RING/LL). */
static void task_kernel(const struct fgn_task *t, char *out, size_t n, bool *specialized)
{
  char suffix[64];
  if (t->func == FGN_FUNC_SEND || t->func == FGN_FUNC_RECV) {
    snprintf(suffix, sizeof(suffix), "SendRecv");
    *specialized = true;
  } else if (t->func == FGN_FUNC_ALLGATHER || t->func == FGN_FUNC_BROADCAST) {
    snprintf(suffix, sizeof(suffix), "%s_RING_LL", fgn_func_name(t->func));
    *specialized = true;
  } else {
    snprintf(suffix, sizeof(suffix), "%s_Sum_%s_RING_LL", fgn_func_name(t->func),
             kernel_type(t->datatype));
    *specialized = t->op == ncclSum;
  }
  mangle(out, n, suffix);
}

/* ---- the simulated driver ---- */

/* Driver calls NCCL makes through cudart's private tables: no DRIVER callbacks (fakegpu.h). */
static CUresult driver_init(void)
{
  fakegpu_internal_begin();
  CUresult r = cuInit(0);
  fakegpu_internal_end();
  return r;
}

static int device_count(void)
{
  int n = 0;
  fakegpu_internal_begin();
  if (cuDeviceGetCount(&n) != CUDA_SUCCESS)
    n = 0;
  fakegpu_internal_end();
  return n;
}

/* cudaGetDevice: the device of the thread's current context, else 0. */
static int current_device(void)
{
  CUcontext ctx = NULL;
  CUdevice dev = 0;
  fakegpu_internal_begin();
  if (cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx || cuCtxGetDevice(&dev) != CUDA_SUCCESS)
    dev = 0;
  fakegpu_internal_end();
  return (int)dev;
}

static bool stream_captured(CUstream s)
{
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  fakegpu_internal_begin();
  if (cuStreamIsCapturing(s, &st) != CUDA_SUCCESS)
    st = CU_STREAM_CAPTURE_STATUS_NONE;
  fakegpu_internal_end();
  return st == CU_STREAM_CAPTURE_STATUS_ACTIVE;
}

/* ---- communicators ---- */

/* src/misc/utils.cc getHash (DJB2a over the id's signed chars). */
static uint64_t id_hash(const ncclUniqueId *id)
{
  uint64_t h = 5381;
  for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++)
    h = ((h << 5) + h) ^ (uint64_t)(int64_t)id->internal[i];
  return h;
}

static ncclResult_t ptr_check(const void *p, const char *op, const char *name)
{
  if (!p) {
    fgn_warn("%s : %s argument is NULL", op, name);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

static ncclResult_t comm_check(const struct ncclComm *comm, const char *op, const char *name)
{
  ncclResult_t r = ptr_check(comm, op, name);
  if (r != ncclSuccess)
    return r;
  if (comm->start_magic != FGN_MAGIC || comm->end_magic != FGN_MAGIC) {
    fgn_warn("Error: corrupted comm object detected");
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

FGN_API ncclResult_t ncclGetVersion(int *version)
{
  if (!version)
    return ncclInvalidArgument;
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

FGN_API ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId)
{
  static uint64_t serial;
  ncclResult_t r = ptr_check(uniqueId, "ncclGetUniqueId", "uniqueId");
  if (r != ncclSuccess)
    return r;
  /* The real id is a bootstrap socket handle; any bytes unique to this process will do. */
  memset(uniqueId, 0, sizeof(*uniqueId));
  uint64_t words[3] = {0x6e63636cull, (uint64_t)getpid(),
                       __atomic_add_fetch(&serial, 1, __ATOMIC_RELAXED)};
  memcpy(uniqueId->internal, words, sizeof(words));
  return ncclSuccess;
}

/* ncclCommInitRankFunc: cudaSetDevice(cudaDev) first, so the profiler plugin's init (from
 * initTransportsRank) runs with the communicator's device current. The job's thread is the
 * caller's for a single init, whose device is the communicator's already (restored after). */
static void init_job(struct ncclComm *c)
{
  CUcontext saved = NULL;
  fakegpu_internal_begin();
  cuCtxGetCurrent(&saved);
  cuCtxSetCurrent(c->ctx);
  fakegpu_internal_end();
  fgn_plugin_init(c);
  fakegpu_internal_begin();
  cuCtxSetCurrent(saved);
  fakegpu_internal_end();
}

static struct ncclComm *comm_new(int nranks, int rank, int dev, const ncclUniqueId *id,
                                 const char *name)
{
  struct ncclComm *c = calloc(1, sizeof(*c));
  if (!c)
    return NULL;
  c->start_magic = c->end_magic = FGN_MAGIC;
  c->nranks = nranks;
  c->rank = rank;
  c->nnodes = 1;
  c->dev = dev;
  c->comm_hash = id_hash(id);
  c->clique = c;
  if (name && !(c->comm_name = strdup(name))) {
    free(c);
    return NULL;
  }
  fakegpu_internal_begin();
  CUresult r = cuDevicePrimaryCtxRetain(&c->ctx, (CUdevice)dev);
  fakegpu_internal_end();
  if (r != CUDA_SUCCESS) {
    free(c->comm_name);
    free(c);
    return NULL;
  }
  return c;
}

static void comm_free(struct ncclComm *c)
{
  fakegpu_internal_begin();
  cuDevicePrimaryCtxRelease((CUdevice)c->dev);
  fakegpu_internal_end();
  c->start_magic = c->end_magic = 0;
  free(c->comm_name);
  free(c);
}

static ncclResult_t init_rank(ncclComm_t *newcomm, int nranks, ncclUniqueId id, int rank,
                              const char *name)
{
  ncclResult_t r = ptr_check(newcomm, "CommInitRank", "newcomm");
  if (r != ncclSuccess)
    return r;
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    fgn_warn("Invalid rank requested : %d/%d", rank, nranks);
    return ncclInvalidArgument;
  }
  if (driver_init() != CUDA_SUCCESS) {
    fgn_warn("Cuda failure 'initialization error'");
    return ncclUnhandledCudaError;
  }
  struct ncclComm *c = comm_new(nranks, rank, current_device(), &id, name);
  if (!c)
    return ncclSystemError;
  /* A single init job runs on the calling thread (group.cc asyncJobLaunch). */
  init_job(c);
  *newcomm = c;
  return ncclSuccess;
}

FGN_API ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank)
{
  return init_rank(comm, nranks, commId, rank, NULL);
}

FGN_API ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId,
                                            int rank, ncclConfig_t *config)
{
  if (config && (config->magic != 0xcafebeef || config->version < NCCL_VERSION(2, 14, 0))) {
    fgn_warn("ncclConfig_t argument not initialized via NCCL_CONFIG_INITIALIZER");
    return ncclInvalidArgument;
  }
  return init_rank(comm, nranks, commId, rank, config ? config->commName : NULL);
}

static void *init_thread(void *arg)
{
  init_job(arg);
  return NULL;
}

FGN_API ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist)
{
  ncclResult_t r = ptr_check(comms, "CommInitAll", "comms");
  if (r != ncclSuccess)
    return r;
  if (ndev < 0) {
    fgn_warn("Invalid device count requested : %d", ndev);
    return ncclInvalidArgument;
  }
  if (driver_init() != CUDA_SUCCESS) {
    fgn_warn("Cuda failure 'initialization error'");
    return ncclUnhandledCudaError;
  }
  int total = device_count();
  for (int i = 0; devlist && i < ndev; i++)
    if (devlist[i] < 0 || devlist[i] >= total) {
      fgn_warn("Invalid device %d (totalnDev=%d)", devlist[i], total);
      return ncclInvalidArgument;
    }
  if (!devlist && ndev > total) {
    fgn_warn("Invalid device %d (totalnDev=%d)", total, total);
    return ncclInvalidArgument;
  }
  ncclUniqueId id;
  ncclGetUniqueId(&id);
  for (int i = 0; i < ndev; i++) {
    comms[i] = comm_new(ndev, i, devlist ? devlist[i] : i, &id, NULL);
    if (!comms[i]) {
      while (i-- > 0)
        comm_free(comms[i]);
      return ncclSystemError;
    }
    comms[i]->clique = comms[0];
  }
  /* Several init jobs run on threads of their own (group.cc asyncJobLaunch), so the plugin's
   * init is called concurrently, from threads that are not the caller's. */
  pthread_t threads[64];
  int started = 0;
  for (int i = 0; i < ndev; i++) {
    if (ndev > 1 && i < 64 && pthread_create(&threads[i], NULL, init_thread, comms[i]) == 0)
      started = i + 1;
    else
      init_job(comms[i]);
  }
  for (int i = 0; i < started; i++)
    pthread_join(threads[i], NULL);
  return ncclSuccess;
}

FGN_API ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
  ncclResult_t r = comm_check(comm, "ncclCommFinalize", "comm");
  if (r != ncclSuccess)
    return r;
  comm->finalized = true;
  return ncclSuccess;
}

static ncclResult_t comm_release(ncclComm_t comm, const char *op)
{
  if (!comm)
    return ncclSuccess; /* NCCL returns at once for a NULL comm */
  ncclResult_t r = comm_check(comm, op, "comm");
  if (r != ncclSuccess)
    return r;
  /* commFree waits for the comm's work; the kernels' host side is already done here. */
  fgn_plugin_finalize(comm);
  comm_free(comm);
  return ncclSuccess;
}

FGN_API ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
  return comm_release(comm, "ncclCommDestroy");
}

FGN_API ncclResult_t ncclCommAbort(ncclComm_t comm)
{
  return comm_release(comm, "ncclCommAbort");
}

FGN_API ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
  ncclResult_t r = comm_check(comm, "CommCount", "comm");
  if (r == ncclSuccess && (r = ptr_check(count, "CommCount", "count")) == ncclSuccess)
    *count = comm->nranks;
  return r;
}

FGN_API ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
  ncclResult_t r = comm_check(comm, "CommUserRank", "comm");
  if (r == ncclSuccess && (r = ptr_check(rank, "CommUserRank", "rank")) == ncclSuccess)
    *rank = comm->rank;
  return r;
}

FGN_API ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device)
{
  ncclResult_t r = comm_check(comm, "CommCuDevice", "comm");
  if (r == ncclSuccess && (r = ptr_check(device, "CommCuDevice", "device")) == ncclSuccess)
    *device = comm->dev;
  return r;
}

FGN_API ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
{
  ncclResult_t r = comm_check(comm, "ncclGetAsyncError", "comm");
  if (r == ncclSuccess &&
      (r = ptr_check(asyncError, "ncclGetAsyncError", "asyncError")) == ncclSuccess)
    *asyncError = ncclSuccess;
  return r;
}

FGN_API const char *ncclGetErrorString(ncclResult_t code)
{
  switch (code) {
  case ncclSuccess:
    return "no error";
  case ncclUnhandledCudaError:
    return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
  case ncclSystemError:
    return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
  case ncclInternalError:
    return "internal error - please report this issue to the NCCL developers";
  case ncclInvalidArgument:
    return "invalid argument (run with NCCL_DEBUG=WARN for details)";
  case ncclInvalidUsage:
    return "invalid usage (run with NCCL_DEBUG=WARN for details)";
  case ncclRemoteError:
    return "remote process exited or there was a network error";
  case ncclInProgress:
    return "NCCL operation in progress";
  default:
    return "unknown result code";
  }
}

/* One process-wide text, whatever comm is passed (as in 2.28). */
FGN_API const char *ncclGetLastError(ncclComm_t comm)
{
  (void)comm;
  return g_last_error;
}

/* ---- groups ---- */

static void group_start_internal(void)
{
  fgn_group_depth++;
}

FGN_API ncclResult_t ncclGroupStart(void)
{
  group_start_internal();
  return ncclSuccess;
}

/* group.h ncclGroupCommJoin: a comm goes right before a sibling of its clique already in the
 * group (so the sibling that joined last launches first), else in commHash order. */
static void group_comm_join(struct ncclComm *comm)
{
  if (comm->joined)
    return;
  struct ncclComm **pp = &t_group_head;
  while (*pp && (*pp)->clique != comm->clique)
    pp = &(*pp)->group_next;
  if (!*pp) {
    pp = &t_group_head;
    while (*pp && (*pp)->comm_hash < comm->comm_hash)
      pp = &(*pp)->group_next;
  }
  comm->group_next = *pp;
  *pp = comm;
  comm->joined = true;
  comm->colls = comm->p2ps = NULL;
  comm->have_stream = false;
}

static void free_tasks(struct fgn_task *t)
{
  while (t) {
    struct fgn_task *next = t->next;
    free(t);
    t = next;
  }
}

static void group_cleanup(void)
{
  struct ncclComm *c = t_group_head;
  while (c) {
    struct ncclComm *next = c->group_next;
    free_tasks(c->colls);
    free_tasks(c->p2ps);
    c->colls = c->p2ps = NULL;
    c->joined = false;
    c->group_next = NULL;
    c = next;
  }
  t_group_head = NULL;
  t_group_error = ncclSuccess;
}

/* ncclPrepareTasks + scheduleCollTasksToPlan / scheduleP2pTasksToPlan for one comm: colls in
 * NCCL's size-sorted order, then p2ps by schedule round, send before recv within a round. */
static void plan_build(struct ncclComm *comm, struct fgn_plan *plan)
{
  memset(plan, 0, sizeof(*plan));
  plan->stream = comm->first_stream;
  /* The sorter bins by traffic, largest first; a stable insertion keeps call order for ties. */
  struct fgn_task *sorted = NULL;
  for (struct fgn_task *t = comm->colls, *next; t; t = next) {
    next = t->next;
    struct fgn_task **pp = &sorted;
    while (*pp && (*pp)->traffic >= t->traffic)
      pp = &(*pp)->next;
    t->next = *pp;
    *pp = t;
  }
  comm->colls = NULL;
  plan->colls = sorted;
  struct fgn_task *p2ps = NULL, **tail = &p2ps;
  for (int round = 0; round < comm->nranks; round++) {
    for (;;) {
      struct fgn_task **send = NULL, **recv = NULL;
      for (struct fgn_task **pp = &comm->p2ps; *pp; pp = &(*pp)->next) {
        if ((*pp)->kernel_round != round)
          continue;
        if (!send && (*pp)->func == FGN_FUNC_SEND)
          send = pp;
        if (!recv && (*pp)->func == FGN_FUNC_RECV)
          recv = pp;
      }
      if (!send && !recv)
        break;
      struct fgn_task *pick[2] = {send ? *send : NULL, recv ? *recv : NULL};
      for (int i = 0; i < 2; i++) {
        if (!pick[i])
          continue;
        struct fgn_task **pp = &comm->p2ps;
        while (*pp != pick[i])
          pp = &(*pp)->next;
        *pp = pick[i]->next;
        pick[i]->next = NULL;
        *tail = pick[i];
        tail = &pick[i]->next;
      }
    }
  }
  plan->p2ps = p2ps;
  /* The kernel: the first specialized one the plan's tasks ask for, colls first. */
  bool specialized = false;
  unsigned threads = 0;
  for (struct fgn_task *t = plan->colls; t; t = t->next) {
    if (!specialized)
      task_kernel(t, plan->kernel, sizeof(plan->kernel), &specialized);
    if ((unsigned)t->nwarps * 32 > threads)
      threads = (unsigned)t->nwarps * 32;
  }
  if (plan->p2ps) {
    if (!specialized)
      task_kernel(plan->p2ps, plan->kernel, sizeof(plan->kernel), &specialized);
    threads = 640; /* NCCL_MAX_NTHREADS */
  }
  plan->grid = 2;
  plan->block = threads;
}

/* ncclLaunchKernel: cuLaunchKernelEx, through the driver, bracketed by KernelLaunch. */
static ncclResult_t launch_kernel(struct ncclComm *comm, struct fgn_plan *plan)
{
  ncclResult_t ret = ncclSuccess;
  fgn_start_kernel_launch(comm, plan);
  pthread_once(&g_kernels_once, kernels_load);
  CUfunction fn = NULL;
  CUcontext saved = NULL;
  fakegpu_internal_begin();
  if (!g_module || cuModuleGetFunction(&fn, g_module, plan->kernel) != CUDA_SUCCESS)
    fn = NULL;
  cuCtxGetCurrent(&saved);
  cuCtxSetCurrent(comm->ctx); /* NCCL's cudaSetDevice(comm->cudaDev) */
  fakegpu_internal_end();
  if (!fn) {
    fgn_warn("Cuda failure 'named symbol not found' (%s)", plan->kernel);
    ret = ncclUnhandledCudaError;
    goto out;
  }
  /* sm90 attributes of ncclLaunchKernel: a CGA cluster (size 4 unless the grid does not divide,
   * then 1), spread scheduling, NCCL's "Remote" memory-sync domain. */
  CUlaunchAttribute attrs[3];
  memset(attrs, 0, sizeof(attrs));
  attrs[0].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  attrs[0].value.clusterDim.x = plan->grid % 4 ? 1 : 4;
  attrs[0].value.clusterDim.y = 1;
  attrs[0].value.clusterDim.z = 1;
  attrs[1].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE;
  attrs[1].value.clusterSchedulingPolicyPreference = CU_CLUSTER_SCHEDULING_POLICY_SPREAD;
  attrs[2].id = CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN;
  attrs[2].value.memSyncDomain = CU_LAUNCH_MEM_SYNC_DOMAIN_REMOTE;
  CUlaunchConfig cfg;
  memset(&cfg, 0, sizeof(cfg));
  cfg.gridDimX = plan->grid;
  cfg.gridDimY = cfg.gridDimZ = 1;
  cfg.blockDimX = plan->block;
  cfg.blockDimY = cfg.blockDimZ = 1;
  cfg.hStream = plan->stream;
  cfg.attrs = attrs;
  cfg.numAttrs = 3;
  static char args[4096];
  size_t args_size = sizeof(args);
  void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, args, CU_LAUNCH_PARAM_BUFFER_SIZE, &args_size,
                   CU_LAUNCH_PARAM_END};
  CUresult r = cuLaunchKernelEx(&cfg, fn, NULL, extra);
  if (r != CUDA_SUCCESS) {
    fgn_warn("Cuda failure %d launching %s", (int)r, plan->kernel);
    ret = ncclUnhandledCudaError;
  }
out:
  fakegpu_internal_begin();
  cuCtxSetCurrent(saved);
  fakegpu_internal_end();
  fgn_stop_kernel_launch(plan);
  return ret;
}

/* hostStreamPlanTask, called from ncclLaunchKernelAfter_NoCuda after the launch. */
static void host_stream_plan_task(struct ncclComm *comm, struct fgn_plan *plan)
{
  fgn_start_group(comm, plan);
  fgn_start_tasks(comm, plan);
  fgn_stop_tasks(plan);
  fgn_stop_group(plan);
}

/* group.cc doLaunches: per clique, prepare every comm, then one launch round per comm. */
static ncclResult_t do_launches(void)
{
  ncclResult_t ret = ncclSuccess;
  struct ncclComm *head = t_group_head;
  while (head) {
    struct fgn_plan plans[64];
    struct ncclComm *members[64];
    int n = 0;
    struct ncclComm *c = head;
    do {
      if (n < 64)
        members[n++] = c;
      c = c->group_next;
    } while (c && c->clique == head->clique);
    fgn_move_data(members, n);
    for (int i = 0; i < n; i++)
      plan_build(members[i], &plans[i]);
    for (int i = 0; i < n; i++) {
      if (!plans[i].colls && !plans[i].p2ps)
        continue;
      ncclResult_t r = launch_kernel(members[i], &plans[i]);
      if (r != ncclSuccess && ret == ncclSuccess)
        ret = r;
      host_stream_plan_task(members[i], &plans[i]);
      free_tasks(plans[i].colls);
      free_tasks(plans[i].p2ps);
    }
    head = c;
  }
  return ret;
}

static ncclResult_t group_end_internal(void)
{
  ncclResult_t ret = ncclSuccess;
  if (fgn_group_depth == 0) {
    fgn_warn("ncclGroupEnd: not in a group call.");
    ret = ncclInvalidUsage;
    goto out;
  }
  if (fgn_api.profiler_group_depth > 0)
    fgn_api.profiler_group_depth--;
  if (fgn_api.profiler_group_depth == 0)
    fgn_record_group_api(FGN_STATE_GROUP_END_API_START);
  if (--fgn_group_depth > 0)
    goto out;
  if ((ret = t_group_error) == ncclSuccess && t_group_head)
    ret = do_launches();
  group_cleanup();
out:
  /* The GroupApi event was started inside taskAppend; it ends with the outermost group. */
  fgn_stop_group_api();
  return ret;
}

FGN_API ncclResult_t ncclGroupEnd(void)
{
  return group_end_internal();
}

/* ---- enqueue ---- */

struct info {
  const char *op_name;
  enum fgn_func func;
  const void *sendbuff;
  void *recvbuff;
  size_t count;
  ncclDataType_t datatype;
  ncclRedOp_t op;
  int root;
  struct ncclComm *comm;
  CUstream stream;
};

static ncclResult_t args_check(const struct info *in)
{
  if (in->root < 0 || in->root >= in->comm->nranks) {
    fgn_warn("%s : invalid root %d (root should be in the 0..%d range)", in->op_name, in->root,
             in->comm->nranks);
    return ncclInvalidArgument;
  }
  if ((int)in->datatype < 0 || (int)in->datatype >= ncclNumTypes) {
    fgn_warn("%s : invalid type %d", in->op_name, (int)in->datatype);
    return ncclInvalidArgument;
  }
  if ((int)in->op < 0 || (int)in->op > (int)ncclMaxRedOp) {
    fgn_warn("%s : invalid reduction operation %d", in->op_name, (int)in->op);
    return ncclInvalidArgument;
  }
  /* No user reduction ops exist in the double (ncclRedOpCreatePreMulSum is not exported). */
  if ((int)in->op >= (int)ncclNumOps) {
    fgn_warn("%s : reduction operation %d unknown to this communicator", in->op_name, (int)in->op);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

static void note_stream(struct ncclComm *comm, CUstream s)
{
  if (!comm->have_stream) {
    comm->first_stream = s;
    comm->have_stream = true;
  }
}

static struct fgn_task *task_new(const struct info *in)
{
  struct fgn_task *t = calloc(1, sizeof(*t));
  if (!t)
    return NULL;
  t->func = in->func;
  t->sendbuff = in->sendbuff;
  t->recvbuff = in->recvbuff;
  t->count = in->count;
  t->root = in->root;
  t->datatype = in->datatype;
  t->op = in->op;
  t->mask = fgn_api.mask;
  t->group_api = fgn_api.group_api;
  t->nchannels = 2;
  return t;
}

static void append(struct fgn_task **list, struct fgn_task *t)
{
  while (*list)
    list = &(*list)->next;
  *list = t;
}

static ncclResult_t p2p_task_append(const struct info *in)
{
  struct ncclComm *comm = in->comm;
  group_comm_join(comm);
  note_stream(comm, in->stream);
  bool captured = stream_captured(in->stream);
  fgn_start_group_api(comm, captured);
  fgn_record_group_api(FGN_STATE_GROUP_START_API_STOP);
  fgn_start_p2p_api(comm, in->func, in->count, in->datatype, in->stream, captured);
  struct fgn_task *t = task_new(in);
  if (!t)
    return ncclSystemError;
  t->api = fgn_api.p2p_api;
  t->sendbuff = NULL;
  t->recvbuff = in->func == FGN_FUNC_SEND ? (void *)in->sendbuff : in->recvbuff;
  t->traffic = in->count * (size_t)type_size(in->datatype);
  /* p2pSchedule round: send to rank+round, receive from rank-round. */
  int n = comm->nranks;
  t->kernel_round =
      in->func == FGN_FUNC_SEND ? (in->root - comm->rank + n) % n : (comm->rank - in->root + n) % n;
  append(&comm->p2ps, t);
  fgn_stop_p2p_api();
  return ncclSuccess;
}

static ncclResult_t coll_task_append(const struct info *in)
{
  struct ncclComm *comm = in->comm;
  group_comm_join(comm);
  note_stream(comm, in->stream);
  bool captured = stream_captured(in->stream);
  fgn_start_group_api(comm, captured);
  fgn_record_group_api(FGN_STATE_GROUP_START_API_STOP);
  fgn_start_coll_api(comm, in->func, in->count, in->datatype, in->root, in->stream, captured);
  struct fgn_task *t = task_new(in);
  if (!t)
    return ncclSystemError;
  t->api = fgn_api.coll_api;
  size_t elem = (size_t)type_size(in->datatype);
  if (in->func == FGN_FUNC_ALLGATHER || in->func == FGN_FUNC_BROADCAST) {
    /* collTaskAppend moves these byte-wise: count in bytes, type ncclInt8. */
    t->count *= elem;
    t->datatype = ncclInt8;
    elem = 1;
  }
  size_t per_byte = in->func == FGN_FUNC_ALLREDUCE ? 2
                    : in->func == FGN_FUNC_ALLGATHER || in->func == FGN_FUNC_REDUCESCATTER
                        ? (size_t)comm->nranks
                        : 1;
  t->traffic = t->count * elem * per_byte;
  t->nwarps = 16;
  append(&comm->colls, t);
  fgn_stop_coll_api();
  return ncclSuccess;
}

/* enqueue.cc ncclLaunchOneRank: a one-rank comm copies send to recv on the stream (through
 * cudart, so no DRIVER callback): no plan, no kernel, no plugin event. */
static ncclResult_t launch_one_rank(const struct info *in)
{
  if (in->sendbuff == in->recvbuff)
    return ncclSuccess;
  size_t bytes = in->count * (size_t)type_size(in->datatype);
  CUcontext saved = NULL;
  fakegpu_internal_begin();
  cuCtxGetCurrent(&saved);
  cuCtxSetCurrent(in->comm->ctx);
  CUresult r = cuMemcpyDtoDAsync((CUdeviceptr)(uintptr_t)in->recvbuff,
                                 (CUdeviceptr)(uintptr_t)in->sendbuff, bytes, in->stream);
  cuCtxSetCurrent(saved);
  fakegpu_internal_end();
  if (r != CUDA_SUCCESS) {
    fgn_warn("Cuda failure %d 'copy of a one-rank %s'", (int)r, in->op_name);
    return ncclUnhandledCudaError;
  }
  return ncclSuccess;
}

static ncclResult_t task_append(const struct info *in)
{
  if (in->func == FGN_FUNC_SEND || in->func == FGN_FUNC_RECV)
    return p2p_task_append(in);
  if (in->count == 0)
    return ncclSuccess; /* empty collectives are discarded, before any event */
  if (in->comm->nranks == 1)
    return launch_one_rank(in);
  return coll_task_append(in);
}

/* enqueue.cc ncclEnqueueCheck. */
static ncclResult_t enqueue_check(const struct info *in)
{
  ncclResult_t ret;
  if (fgn_api.profiler_group_depth > 0)
    fgn_api.profiler_group_depth++;
  group_start_internal();
  if ((ret = comm_check(in->comm, in->op_name, "comm")) == ncclSuccess &&
      (ret = args_check(in)) == ncclSuccess)
    ret = task_append(in);
  if (fgn_group_depth > 0 && ret != ncclSuccess && ret != ncclInProgress)
    t_group_error = ret;
  ncclResult_t end = group_end_internal();
  if (end != ncclSuccess)
    return end;
  return ret;
}

FGN_API ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                                   ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                   cudaStream_t stream)
{
  struct info in = {"AllReduce", FGN_FUNC_ALLREDUCE, sendbuff, recvbuff, count, datatype, op, 0,
                    comm,        (CUstream)stream};
  return enqueue_check(&in);
}

FGN_API ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count,
                                ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                                cudaStream_t stream)
{
  struct info in = {"Reduce", FGN_FUNC_REDUCE, sendbuff, recvbuff, count, datatype, op, root,
                    comm,     (CUstream)stream};
  return enqueue_check(&in);
}

FGN_API ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                                   ncclDataType_t datatype, int root, ncclComm_t comm,
                                   cudaStream_t stream)
{
  struct info in = {"Broadcast", FGN_FUNC_BROADCAST, sendbuff, recvbuff,
                    count,       datatype,           ncclSum,  root,
                    comm,        (CUstream)stream};
  return enqueue_check(&in);
}

FGN_API ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root,
                               ncclComm_t comm, cudaStream_t stream)
{
  return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

FGN_API ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                                   ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
  struct info in = {"AllGather", FGN_FUNC_ALLGATHER, sendbuff, recvbuff,
                    sendcount,   datatype,           ncclSum,  0,
                    comm,        (CUstream)stream};
  return enqueue_check(&in);
}

FGN_API ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                                       ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                       cudaStream_t stream)
{
  struct info in = {
      "ReduceScatter", FGN_FUNC_REDUCESCATTER, sendbuff, recvbuff, recvcount, datatype, op, 0, comm,
      (CUstream)stream};
  return enqueue_check(&in);
}

FGN_API ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                              ncclComm_t comm, cudaStream_t stream)
{
  struct info in = {"Send",  FGN_FUNC_SEND, NULL, (void *)sendbuff, count, datatype,
                    ncclSum, peer,          comm, (CUstream)stream};
  in.sendbuff = sendbuff;
  return enqueue_check(&in);
}

FGN_API ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                              ncclComm_t comm, cudaStream_t stream)
{
  struct info in = {"Recv",   FGN_FUNC_RECV, NULL, recvbuff, count,
                    datatype, ncclSum,       peer, comm,     (CUstream)stream};
  return enqueue_check(&in);
}

/* ---- the rest of nccl.h: present so that programs link, refused since not simulated ---- */

static ncclResult_t not_simulated(const char *fn)
{
  fgn_warn("%s is not simulated by the NCCL double (tests/fakegpu/nccl)", fn);
  return ncclInvalidUsage;
}

FGN_API ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                                   ncclConfig_t *config)
{
  (void)comm, (void)color, (void)key, (void)newcomm, (void)config;
  return not_simulated("ncclCommSplit");
}

FGN_API ncclResult_t ncclCommRegister(const ncclComm_t comm, void *buff, size_t size, void **handle)
{
  (void)comm, (void)buff, (void)size, (void)handle;
  return not_simulated("ncclCommRegister");
}

FGN_API ncclResult_t ncclCommDeregister(const ncclComm_t comm, void *handle)
{
  (void)comm, (void)handle;
  return not_simulated("ncclCommDeregister");
}

FGN_API ncclResult_t ncclMemAlloc(void **ptr, size_t size)
{
  (void)ptr, (void)size;
  return not_simulated("ncclMemAlloc");
}

FGN_API ncclResult_t ncclMemFree(void *ptr)
{
  (void)ptr;
  return not_simulated("ncclMemFree");
}

FGN_API ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar,
                                              ncclDataType_t datatype,
                                              ncclScalarResidence_t residence, ncclComm_t comm)
{
  (void)op, (void)scalar, (void)datatype, (void)residence, (void)comm;
  return not_simulated("ncclRedOpCreatePreMulSum");
}

FGN_API ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm)
{
  (void)op, (void)comm;
  return not_simulated("ncclRedOpDestroy");
}

FGN_API ncclResult_t ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                                  ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
  (void)sendbuff, (void)recvbuff, (void)count, (void)datatype, (void)comm, (void)stream;
  return not_simulated("ncclAlltoAll");
}

FGN_API ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t *simInfo)
{
  (void)simInfo;
  return not_simulated("ncclGroupSimulateEnd");
}
