/* Test NCCL profiler plugin that writes every call it gets, with its fields, to a text log. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "tests/fakegpu/fakegpu.h"
#include "tests/fakegpu/nccl/profiler_abi.h"

/*
 * Built three times: REC_VERSION 5 (exports ncclProfiler_v5 and, to check NCCL's lookup
 * order, a v4 that logs "WRONG"), 4 (only ncclProfiler_v4) and 3 (only ncclProfiler_v3).
 * Environment: REC_MASK (mask written at init, default 0xf07: GroupApi, CollApi, P2pApi,
 * KernelLaunch, Group, Coll, P2p), REC_INIT_FAIL=R (init of the comm of rank R fails, leaving
 * *context NULL). Handles are labelled h1, h2, ... in start order; contexts c<rank> (v3, which
 * is not told the rank: c<n> in init order). Init lines name the thread and the device current
 * on it (dev=-1: none). No memory is allocated per event.
 */

#define REC_EXPORT __attribute__((visibility("default")))
#define MAX_HANDLES 4096
#define MAX_CTX 64
#define LOG_BYTES (1 << 20)

struct rec_handle {
  int id;
};

struct rec_ctx {
  char label[16];
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static char g_log[LOG_BYTES];
static size_t g_len;
static struct rec_handle g_handles[MAX_HANDLES];
static int g_nhandles;
static struct rec_ctx g_ctx[MAX_CTX];
static int g_nctx;
static int *g_mask;

static void logf_locked(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logf_locked(const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(g_log + g_len, sizeof(g_log) - g_len, fmt, ap);
  va_end(ap);
  if (n > 0 && g_len + (size_t)n + 1 < sizeof(g_log)) {
    g_len += (size_t)n;
    g_log[g_len++] = '\n';
    g_log[g_len] = '\0';
  }
}

static const char *label(const void *h, char *buf, size_t n)
{
  const struct rec_handle *rh = h;
  if (!h)
    snprintf(buf, n, "NULL");
  else if (rh >= g_handles && rh < g_handles + MAX_HANDLES)
    snprintf(buf, n, "h%d", rh->id);
  else
    snprintf(buf, n, "?");
  return buf;
}

static const char *ctx_label(const void *c)
{
  const struct rec_ctx *rc = c;
  if (!c)
    return "NULL";
  if (rc >= g_ctx && rc < g_ctx + MAX_CTX)
    return rc->label;
  return "?";
}

/* ---- what the test program calls (it dlopens the same file, so it shares this state) ---- */

/* Copies the log so far into buf and empties it; returns its length. */
REC_EXPORT size_t rec_take(char *buf, size_t n)
{
  pthread_mutex_lock(&g_lock);
  size_t len = g_len < n - 1 ? g_len : n - 1;
  memcpy(buf, g_log, len);
  buf[len] = '\0';
  g_len = 0;
  g_log[0] = '\0';
  pthread_mutex_unlock(&g_lock);
  return len;
}

/* Adds a line of the test's own (e.g. what CUPTI saw) so its place among the calls shows. */
REC_EXPORT void rec_note(const char *line)
{
  pthread_mutex_lock(&g_lock);
  logf_locked("%s", line);
  pthread_mutex_unlock(&g_lock);
}

/* Stores through the mask pointer the last init was given, as a plugin toggling capture does. */
REC_EXPORT int rec_set_mask(int mask)
{
  if (!g_mask)
    return -1;
  __atomic_store_n(g_mask, mask, __ATOMIC_RELAXED);
  return 0;
}

/* ---- the plugin ---- */

static int env_int(const char *name, int dflt)
{
  const char *v = getenv(name);
  return v && *v ? (int)strtol(v, NULL, 0) : dflt;
}

/* The device current on this thread (NCCL sets the communicator's before the init). */
static int current_device(void)
{
  CUdevice dev = -1;
  fakegpu_internal_begin(); /* not an application call */
  if (cuCtxGetDevice(&dev) != CUDA_SUCCESS)
    dev = -1;
  fakegpu_internal_end();
  return (int)dev;
}

static ncclResult_t common_init(void **context, int *mask, int rank, const char *head)
{
  int dev = current_device();
  pthread_mutex_lock(&g_lock);
  g_mask = mask;
  *mask = env_int("REC_MASK", 0xf07);
  bool main_thread = syscall(SYS_gettid) == getpid();
  if (rank >= 0 && rank == env_int("REC_INIT_FAIL", -1)) {
    *context = NULL;
    logf_locked("%s -> fail thread=%s dev=%d", head, main_thread ? "main" : "other", dev);
    pthread_mutex_unlock(&g_lock);
    return ncclInternalError;
  }
  struct rec_ctx *c = &g_ctx[g_nctx % MAX_CTX];
  if (rank >= 0)
    snprintf(c->label, sizeof(c->label), "c%d", rank);
  else
    snprintf(c->label, sizeof(c->label), "c%d", g_nctx);
  g_nctx++;
  *context = c;
  logf_locked("%s -> %s thread=%s dev=%d", head, c->label, main_thread ? "main" : "other", dev);
  pthread_mutex_unlock(&g_lock);
  return ncclSuccess;
}

static void *new_handle(void)
{
  struct rec_handle *h = &g_handles[g_nhandles % MAX_HANDLES];
  h->id = ++g_nhandles;
  return h;
}

static ncclResult_t rec_stop(void *eHandle)
{
  char b[16];
  pthread_mutex_lock(&g_lock);
  logf_locked("stop %s", label(eHandle, b, sizeof(b)));
  pthread_mutex_unlock(&g_lock);
  return ncclSuccess;
}

static ncclResult_t rec_finalize(void *context)
{
  pthread_mutex_lock(&g_lock);
  logf_locked("finalize %s", ctx_label(context));
  pthread_mutex_unlock(&g_lock);
  return ncclSuccess;
}

static const char *type_name(uint64_t t)
{
  switch (t) {
  case FGN_PROFILE_GROUP:
    return "Group";
  case FGN_PROFILE_COLL:
    return "Coll";
  case FGN_PROFILE_P2P:
    return "P2p";
  case FGN_PROFILE_GROUP_API:
    return "GroupApi";
  case FGN_PROFILE_COLL_API:
    return "CollApi";
  case FGN_PROFILE_P2P_API:
    return "P2pApi";
  case FGN_PROFILE_KERNEL_LAUNCH:
    return "KernelLaunch";
  default:
    return "other";
  }
}

#if REC_VERSION == 5

static ncclResult_t rec_init(void **context, uint64_t commId, int *eActivationMask,
                             const char *commName, int nNodes, int nranks, int rank,
                             fgn_logger_t logfn)
{
  char head[256];
  snprintf(head, sizeof(head),
           "init v5 hash=%016" PRIx64 " name=%s nNodes=%d nranks=%d rank=%d "
           "logfn=%s",
           commId, commName ? commName : "NULL", nNodes, nranks, rank, logfn ? "set" : "NULL");
  return common_init(context, eActivationMask, rank, head);
}

static ncclResult_t rec_start(void *context, void **eHandle, fgn_descr_v5 *d)
{
  char p[16], g[16], h[16];
  pthread_mutex_lock(&g_lock);
  *eHandle = new_handle();
  char head[96];
  snprintf(head, sizeof(head), "start %s %s %s parent=%s rank=%d", ctx_label(context),
           label(*eHandle, h, sizeof(h)), type_name(d->type), label(d->parentObj, p, sizeof(p)),
           d->rank);
  switch (d->type) {
  case FGN_PROFILE_GROUP_API:
    logf_locked("%s captured=%d depth=%d", head, (int)d->groupApi.graphCaptured,
                d->groupApi.groupDepth);
    break;
  case FGN_PROFILE_COLL_API:
    logf_locked("%s func=%s count=%zu dtype=%s root=%d stream=%p captured=%d", head,
                d->collApi.func, d->collApi.count, d->collApi.datatype, d->collApi.root,
                d->collApi.stream, (int)d->collApi.graphCaptured);
    break;
  case FGN_PROFILE_P2P_API:
    logf_locked("%s func=%s count=%zu dtype=%s stream=%p captured=%d", head, d->p2pApi.func,
                d->p2pApi.count, d->p2pApi.datatype, d->p2pApi.stream,
                (int)d->p2pApi.graphCaptured);
    break;
  case FGN_PROFILE_KERNEL_LAUNCH:
    logf_locked("%s stream=%p", head, d->kernelLaunch.stream);
    break;
  case FGN_PROFILE_COLL:
    logf_locked("%s seq=%" PRIu64 " func=%s send=%p recv=%p count=%zu root=%d dtype=%s nch=%u "
                "nwarps=%u algo=%s proto=%s pgroup=%s",
                head, d->coll.seqNumber, d->coll.func, d->coll.sendBuff, d->coll.recvBuff,
                d->coll.count, d->coll.root, d->coll.datatype, d->coll.nChannels, d->coll.nWarps,
                d->coll.algo, d->coll.proto, label(d->coll.parentGroup, g, sizeof(g)));
    break;
  case FGN_PROFILE_P2P:
    logf_locked("%s func=%s buff=%p dtype=%s count=%zu peer=%d nch=%u pgroup=%s", head, d->p2p.func,
                d->p2p.buff, d->p2p.datatype, d->p2p.count, d->p2p.peer, d->p2p.nChannels,
                label(d->p2p.parentGroup, g, sizeof(g)));
    break;
  default:
    logf_locked("%s", head);
  }
  pthread_mutex_unlock(&g_lock);
  return ncclSuccess;
}

static ncclResult_t rec_state(void *eHandle, int eState, fgn_state_args_v5 *args)
{
  char b[16];
  pthread_mutex_lock(&g_lock);
  logf_locked("state %s %d args=%s", label(eHandle, b, sizeof(b)), eState, args ? "set" : "NULL");
  pthread_mutex_unlock(&g_lock);
  return ncclSuccess;
}

REC_EXPORT const fgn_profiler_v5 ncclProfiler_v5 = {"rec5",   rec_init,  rec_start,
                                                    rec_stop, rec_state, rec_finalize};

/* Never to be chosen while ncclProfiler_v5 exists. */
static ncclResult_t wrong_init(void **context, int *mask, const char *name, uint64_t hash,
                               int nNodes, int nranks, int rank, fgn_logger_t logfn)
{
  (void)name, (void)hash, (void)nNodes, (void)nranks, (void)logfn;
  return common_init(context, mask, rank, "WRONG v4 init of a v5 plugin");
}

static ncclResult_t wrong_start(void *context, void **eHandle, fgn_descr_v4 *d)
{
  (void)context, (void)d;
  *eHandle = NULL;
  rec_note("WRONG v4 start");
  return ncclSuccess;
}

static ncclResult_t wrong_state(void *eHandle, int eState, fgn_state_args_v4 *args)
{
  (void)eHandle, (void)eState, (void)args;
  return ncclSuccess;
}

REC_EXPORT const fgn_profiler_v4 ncclProfiler_v4 = {"rec5-as-v4", wrong_init,  wrong_start,
                                                    rec_stop,     wrong_state, rec_finalize};

#elif REC_VERSION == 4

static ncclResult_t rec_init(void **context, int *eActivationMask, const char *commName,
                             uint64_t commHash, int nNodes, int nranks, int rank,
                             fgn_logger_t logfn)
{
  char head[256];
  snprintf(head, sizeof(head),
           "init v4 hash=%016" PRIx64 " name=%s nNodes=%d nranks=%d rank=%d "
           "logfn=%s",
           commHash, commName ? commName : "NULL", nNodes, nranks, rank, logfn ? "set" : "NULL");
  return common_init(context, eActivationMask, rank, head);
}

static ncclResult_t rec_start(void *context, void **eHandle, fgn_descr_v4 *d)
{
  char p[16], h[16];
  pthread_mutex_lock(&g_lock);
  *eHandle = new_handle();
  char head[96];
  snprintf(head, sizeof(head), "start %s %s %s parent=%s rank=%d", ctx_label(context),
           label(*eHandle, h, sizeof(h)), type_name(d->type), label(d->parentObj, p, sizeof(p)),
           d->rank);
  if (d->type == FGN_PROFILE_COLL)
    logf_locked("%s seq=%" PRIu64 " func=%s count=%zu root=%d dtype=%s nch=%u nwarps=%u algo=%s "
                "proto=%s",
                head, d->coll.seqNumber, d->coll.func, d->coll.count, d->coll.root,
                d->coll.datatype, d->coll.nChannels, d->coll.nWarps, d->coll.algo, d->coll.proto);
  else if (d->type == FGN_PROFILE_P2P)
    logf_locked("%s func=%s dtype=%s count=%zu peer=%d nch=%u", head, d->p2p.func, d->p2p.datatype,
                d->p2p.count, d->p2p.peer, d->p2p.nChannels);
  else
    logf_locked("%s", head);
  pthread_mutex_unlock(&g_lock);
  return ncclSuccess;
}

static ncclResult_t rec_state(void *eHandle, int eState, fgn_state_args_v4 *args)
{
  (void)args;
  char b[16];
  pthread_mutex_lock(&g_lock);
  logf_locked("state %s %d", label(eHandle, b, sizeof(b)), eState);
  pthread_mutex_unlock(&g_lock);
  return ncclSuccess;
}

REC_EXPORT const fgn_profiler_v4 ncclProfiler_v4 = {"rec4",   rec_init,  rec_start,
                                                    rec_stop, rec_state, rec_finalize};

#else /* v3 */

static ncclResult_t rec_init(void **context, int *eActivationMask)
{
  return common_init(context, eActivationMask, -1, "init v3");
}

static ncclResult_t rec_start(void *context, void **eHandle, fgn_descr_v3 *d)
{
  char p[16], h[16];
  pthread_mutex_lock(&g_lock);
  *eHandle = new_handle();
  char head[96];
  snprintf(head, sizeof(head), "start %s %s %s parent=%s rank=%d", ctx_label(context),
           label(*eHandle, h, sizeof(h)), type_name(d->type), label(d->parentObj, p, sizeof(p)),
           d->rank);
  if (d->type == FGN_PROFILE_COLL)
    logf_locked("%s name=%s hash=%" PRIu64 " seq=%" PRIu64 " func=%s count=%zu dtype=%s nch=%u",
                head, d->coll.name ? d->coll.name : "NULL", d->coll.commHash, d->coll.seqNumber,
                d->coll.func, d->coll.count, d->coll.datatype, d->coll.nMaxChannels);
  else if (d->type == FGN_PROFILE_P2P)
    logf_locked("%s func=%s dtype=%s count=%zu peer=%d", head, d->p2p.func, d->p2p.datatype,
                d->p2p.count, d->p2p.peer);
  else
    logf_locked("%s", head);
  pthread_mutex_unlock(&g_lock);
  return ncclSuccess;
}

static ncclResult_t rec_state(void *eHandle, int eState, fgn_state_args_v3 *args)
{
  (void)args;
  char b[16];
  pthread_mutex_lock(&g_lock);
  logf_locked("state %s %d", label(eHandle, b, sizeof(b)), eState);
  pthread_mutex_unlock(&g_lock);
  return ncclSuccess;
}

REC_EXPORT const fgn_profiler_v3 ncclProfiler_v3 = {"rec3",   rec_init,  rec_start,
                                                    rec_stop, rec_state, rec_finalize};

#endif
