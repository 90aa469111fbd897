/* Checks the NCCL double against NCCL 2.28.9's plugin call order, fields and kernel launches. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>
#include <cupti.h>
#include <nccl.h>

#include "tests/fakegpu/fakegpu.h"

/*
 * One program, one scenario per run (argv[1]), because NCCL's plugin state is per process:
 *   main      rec5 plugin: InitAll, AllReduce, grouped AllReduce+AllGather, Send/Recv group,
 *             Broadcast, a two-comm group, the mask toggled through the saved pointer, API
 *             errors, destroy; plus the kernels CUPTI sees
 *   none      NCCL_PROFILER_PLUGIN=none: no plugin call at all, kernels still launched
 *   v4        a plugin with only ncclProfiler_v4: its init signature, Group/Coll/P2p only
 *   v3        a plugin with only ncclProfiler_v3
 *   initfail  rec5 whose init fails for rank 1: 2.28.9 keeps delivering that comm's events
 *   bare      NCCL_PROFILER_PLUGIN=<name>: libnccl-profiler-<name>.so found by the loader
 *   onerank   a comm of one rank: a copy, no plugin event, no kernel
 *   data      both ranks local and in one group: the buffers hold NCCL's results
 * The expected lines are written from NCCL's source (see the README's NCCL section), not taken
 * from the double's output. REC_PLUGIN names the plugin file, which this program dlopens too
 * (same handle as NCCL's) to read its log.
 */

static int g_failed;

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                         \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fputc('\n', stderr);                                                                         \
      g_failed = 1;                                                                                \
    }                                                                                              \
  } while (0)

#define NCCL_OK(call)                                                                              \
  do {                                                                                             \
    ncclResult_t r_ = (call);                                                                      \
    CHECK(r_ == ncclSuccess, "%s -> %d", #call, (int)r_);                                          \
  } while (0)

static size_t (*rec_take)(char *, size_t);
static void (*rec_note)(const char *);
static int (*rec_set_mask)(int);

/* ---- expected-log helpers ---- */

static char g_expect[1 << 16];
static size_t g_elen;

static void ex(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void ex(const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(g_expect + g_elen, sizeof(g_expect) - g_elen, fmt, ap);
  va_end(ap);
  if (n > 0 && g_elen + (size_t)n + 1 < sizeof(g_expect)) {
    g_elen += (size_t)n;
    g_expect[g_elen++] = '\n';
    g_expect[g_elen] = '\0';
  }
}

/* Compares the plugin's log since the last check with what ex() built, line by line. */
static void check_log(const char *step)
{
  static char got[1 << 16];
  rec_take(got, sizeof(got));
  if (strcmp(got, g_expect) != 0) {
    fprintf(stderr, "FAIL %s: plugin calls differ\n--- expected\n%s--- got\n%s---\n", step,
            g_expect, got);
    g_failed = 1;
  }
  g_elen = 0;
  g_expect[0] = '\0';
}

/* The init lines of an ncclCommInitAll come from concurrent threads: compared as a sorted set. */
static int cmp_lines(const void *a, const void *b)
{
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static void check_log_unordered(const char *step)
{
  static char got[1 << 16];
  rec_take(got, sizeof(got));
  char *lines[2][64];
  int n[2] = {0, 0};
  char *bufs[2] = {got, g_expect};
  for (int k = 0; k < 2; k++)
    for (char *save, *l = strtok_r(bufs[k], "\n", &save); l && n[k] < 64;
         l = strtok_r(NULL, "\n", &save))
      lines[k][n[k]++] = l;
  qsort(lines[0], (size_t)n[0], sizeof(char *), cmp_lines);
  qsort(lines[1], (size_t)n[1], sizeof(char *), cmp_lines);
  int same = n[0] == n[1];
  for (int i = 0; same && i < n[0]; i++)
    same = strcmp(lines[0][i], lines[1][i]) == 0;
  if (!same) {
    fprintf(stderr, "FAIL %s: plugin calls differ (any order)\n--- expected\n", step);
    for (int i = 0; i < n[1]; i++)
      fprintf(stderr, "%s\n", lines[1][i]);
    fprintf(stderr, "--- got\n");
    for (int i = 0; i < n[0]; i++)
      fprintf(stderr, "%s\n", lines[0][i]);
    g_failed = 1;
  }
  g_elen = 0;
  g_expect[0] = '\0';
}

/* NCCL's commHash: src/misc/utils.cc getHash (DJB2a) over the unique id's signed chars. */
static uint64_t djb2a(const ncclUniqueId *id)
{
  uint64_t h = 5381;
  for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++)
    h = ((h << 5) + h) ^ (uint64_t)(int64_t)id->internal[i];
  return h;
}

/* ---- CUPTI: the DRIVER callback of each launch and the kernel records ---- */

#define MAX_KERNELS 64
struct kernel {
  char name[128];
  uint32_t device, stream, corr;
  uint64_t ns;
};
static struct kernel g_kernels[MAX_KERNELS];
static int g_nkernels;
static pthread_mutex_t g_klock = PTHREAD_MUTEX_INITIALIZER;

static void CUPTIAPI on_callback(void *ud, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                 const void *data)
{
  (void)ud;
  const CUpti_CallbackData *cb = data;
  if (domain != CUPTI_CB_DOMAIN_DRIVER_API || cb->callbackSite != CUPTI_API_ENTER)
    return;
  char line[256];
  snprintf(line, sizeof(line), "cupti %u %s", (unsigned)cbid,
           cb->symbolName ? cb->symbolName : "NULL");
  rec_note(line);
}

static void CUPTIAPI on_request(uint8_t **buffer, size_t *size, size_t *max)
{
  *size = 64 * 1024;
  *buffer = aligned_alloc(8, *size);
  *max = 0;
}

static void CUPTIAPI on_complete(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
                                 size_t valid)
{
  (void)ctx, (void)stream, (void)size;
  CUpti_Activity *r = NULL;
  pthread_mutex_lock(&g_klock);
  while (cuptiActivityGetNextRecord(buffer, valid, &r) == CUPTI_SUCCESS) {
    if (r->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || g_nkernels == MAX_KERNELS)
      continue;
    const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)r;
    struct kernel *x = &g_kernels[g_nkernels++];
    snprintf(x->name, sizeof(x->name), "%s", k->name ? k->name : "NULL");
    x->device = k->deviceId;
    x->stream = k->streamId;
    x->corr = k->correlationId;
    x->ns = k->end - k->start;
  }
  pthread_mutex_unlock(&g_klock);
  free(buffer);
}

static CUpti_SubscriberHandle g_sub;

static void cupti_start(void)
{
  CHECK(cuptiSubscribe(&g_sub, on_callback, NULL) == CUPTI_SUCCESS, "cuptiSubscribe");
  CHECK(cuptiEnableCallback(1, g_sub, CUPTI_CB_DOMAIN_DRIVER_API,
                            CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx) == CUPTI_SUCCESS,
        "cuptiEnableCallback");
  CHECK(cuptiActivityRegisterCallbacks(on_request, on_complete) == CUPTI_SUCCESS, "register");
  CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) == CUPTI_SUCCESS, "enable");
}

static int cmp_corr(const void *a, const void *b)
{
  const struct kernel *x = a, *y = b;
  return x->corr < y->corr ? -1 : x->corr > y->corr;
}

/* Delivers every record, then orders the kernels by launch (correlation id). */
static void cupti_stop(void)
{
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  cuptiUnsubscribe(g_sub);
  cuptiFinalize();
  qsort(g_kernels, (size_t)g_nkernels, sizeof(g_kernels[0]), cmp_corr);
}

/* ---- the simulated devices ---- */

static CUcontext g_ctx[2];
static CUstream g_s[2];
static CUdeviceptr g_sb[2], g_rb[2];

static void devices_open(void)
{
  CHECK(cuInit(0) == CUDA_SUCCESS, "cuInit");
  for (int d = 0; d < 2; d++) {
    CHECK(cuDevicePrimaryCtxRetain(&g_ctx[d], d) == CUDA_SUCCESS, "retain %d", d);
    CHECK(cuCtxSetCurrent(g_ctx[d]) == CUDA_SUCCESS, "set %d", d);
    CHECK(cuStreamCreate(&g_s[d], CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS, "stream %d", d);
    CHECK(cuMemAlloc(&g_sb[d], 1 << 20) == CUDA_SUCCESS, "alloc");
    CHECK(cuMemAlloc(&g_rb[d], 1 << 20) == CUDA_SUCCESS, "alloc");
  }
  cuCtxSetCurrent(g_ctx[0]);
}

static void devices_close(void)
{
  for (int d = 0; d < 2; d++) {
    cuCtxSetCurrent(g_ctx[d]);
    cuStreamSynchronize(g_s[d]);
    cuMemFree(g_sb[d]);
    cuMemFree(g_rb[d]);
    cuStreamDestroy(g_s[d]);
    cuDevicePrimaryCtxRelease(d);
  }
}

#define SB(d) ((void *)(uintptr_t)g_sb[d])
#define RB(d) ((void *)(uintptr_t)g_rb[d])
#define S(d) ((cudaStream_t)g_s[d])

static const char *const K_AR_BF16 =
    "_Z40ncclDevKernel_AllReduce_Sum_bf16_RING_LL24ncclDevKernelArgsStorageILm4096EE";
static const char *const K_AR_F32 =
    "_Z39ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernelArgsStorageILm4096EE";
static const char *const K_SENDRECV =
    "_Z22ncclDevKernel_SendRecv24ncclDevKernelArgsStorageILm4096EE";
static const char *const K_BCAST =
    "_Z31ncclDevKernel_Broadcast_RING_LL24ncclDevKernelArgsStorageILm4096EE";

/* The lines of one standalone collective on a comm whose every event is enabled. */
struct coll_expect {
  const char *ctx;
  int h; /* first handle number */
  const char *func, *api_dtype, *dtype, *kernel;
  size_t api_count, count;
  int root, rank, dev;
  uint64_t seq;
};

static int expect_standalone(const struct coll_expect *e)
{
  int g = e->h, a = e->h + 1, l = e->h + 2, gr = e->h + 3, c = e->h + 4;
  ex("start %s h%d GroupApi parent=NULL rank=0 captured=0 depth=1", e->ctx, g);
  ex("state h%d 23 args=NULL", g);
  ex("start %s h%d CollApi parent=h%d rank=0 func=%s count=%zu dtype=%s root=%d stream=%p "
     "captured=0",
     e->ctx, a, g, e->func, e->api_count, e->api_dtype, e->root, (void *)S(e->dev));
  ex("stop h%d", a);
  ex("state h%d 24 args=NULL", g);
  ex("start %s h%d KernelLaunch parent=h%d rank=0 stream=%p", e->ctx, l, g, (void *)S(e->dev));
  ex("cupti 652 %s", e->kernel);
  ex("stop h%d", l);
  ex("start %s h%d Group parent=NULL rank=0", e->ctx, gr);
  ex("start %s h%d Coll parent=h%d rank=%d seq=%" PRIu64 " func=%s send=%p recv=%p count=%zu "
     "root=%d dtype=%s nch=2 nwarps=16 algo=RING proto=LL pgroup=h%d",
     e->ctx, c, a, e->rank, e->seq, e->func, SB(e->dev), RB(e->dev), e->count, e->root, e->dtype,
     gr);
  ex("stop h%d", c);
  ex("stop h%d", gr);
  ex("stop h%d", g);
  return e->h + 5;
}

static void scenario_main(void)
{
  ncclComm_t comms[2];
  NCCL_OK(ncclCommInitAll(comms, 2, NULL));
  /* commHash: one per ncclCommInitAll, the same on both ranks; read from rank 0's line. */
  static char got[8192];
  rec_take(got, sizeof(got));
  char hash[17] = "";
  const char *p = strstr(got, "hash=");
  if (p)
    snprintf(hash, sizeof(hash), "%.16s", p + 5);
  CHECK(strlen(hash) == 16 && strcmp(hash, "0000000000000000") != 0, "hash in %s", got);
  ex("init v5 hash=%s name=NULL nNodes=1 nranks=2 rank=0 logfn=set -> c0 thread=other dev=0", hash);
  ex("init v5 hash=%s name=NULL nNodes=1 nranks=2 rank=1 logfn=set -> c1 thread=other dev=1", hash);
  /* check_log_unordered reads the log again: put back what was taken. */
  rec_note(strtok(got, "\n"));
  rec_note(strtok(NULL, "\n"));
  check_log_unordered("ncclCommInitAll");

  int v = 0, n = 0, r = -1, d = -1;
  NCCL_OK(ncclGetVersion(&v));
  CHECK(v == 22809, "version %d", v);
  NCCL_OK(ncclCommCount(comms[1], &n));
  NCCL_OK(ncclCommUserRank(comms[1], &r));
  NCCL_OK(ncclCommCuDevice(comms[1], &d));
  CHECK(n == 2 && r == 1 && d == 1, "count %d rank %d device %d", n, r, d);

  /* a) one AllReduce, bf16 sum, 1 MiB. */
  fakegpu_set_kernel_duration_ns(K_AR_BF16, 7000);
  NCCL_OK(ncclAllReduce(SB(0), RB(0), 524288, ncclBfloat16, ncclSum, comms[0], S(0)));
  struct coll_expect a = {
      "c0", 1, "AllReduce", "ncclBfloat16", "ncclBfloat16", K_AR_BF16, 524288, 524288, 0, 0, 0, 0};
  expect_standalone(&a);
  check_log("AllReduce");

  /* b) AllReduce + AllGather in one group: one plan, one kernel (the first task's). */
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclAllReduce(SB(0), RB(0), 524288, ncclBfloat16, ncclSum, comms[0], S(0)));
  NCCL_OK(ncclAllGather(SB(0), RB(0), 4096, ncclFloat32, comms[0], S(0)));
  NCCL_OK(ncclGroupEnd());
  ex("start c0 h6 GroupApi parent=NULL rank=0 captured=0 depth=2");
  ex("state h6 23 args=NULL");
  ex("start c0 h7 CollApi parent=h6 rank=0 func=AllReduce count=524288 dtype=ncclBfloat16 root=0 "
     "stream=%p captured=0",
     (void *)S(0));
  ex("stop h7");
  ex("start c0 h8 CollApi parent=h6 rank=0 func=AllGather count=4096 dtype=ncclFloat32 root=0 "
     "stream=%p captured=0",
     (void *)S(0));
  ex("stop h8");
  ex("state h6 24 args=NULL");
  ex("start c0 h9 KernelLaunch parent=h6 rank=0 stream=%p", (void *)S(0));
  ex("cupti 652 %s", K_AR_BF16);
  ex("stop h9");
  ex("start c0 h10 Group parent=NULL rank=0");
  ex("start c0 h11 Coll parent=h7 rank=0 seq=1 func=AllReduce send=%p recv=%p count=524288 root=0 "
     "dtype=ncclBfloat16 nch=2 nwarps=16 algo=RING proto=LL pgroup=h10",
     SB(0), RB(0));
  /* collTaskAppend: AllGather moves bytes (4096 floats = 16384 ncclInt8). */
  ex("start c0 h12 Coll parent=h8 rank=0 seq=0 func=AllGather send=%p recv=%p count=16384 root=0 "
     "dtype=ncclInt8 nch=2 nwarps=16 algo=RING proto=LL pgroup=h10",
     SB(0), RB(0));
  ex("stop h11");
  ex("stop h12");
  ex("stop h10");
  ex("stop h6");
  check_log("grouped AllReduce+AllGather");

  /* c) Recv then Send with peer 1 in one group: P2p events send first (same schedule round). */
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclRecv(RB(0), 1024, ncclFloat32, 1, comms[0], S(0)));
  NCCL_OK(ncclSend(SB(0), 1024, ncclFloat32, 1, comms[0], S(0)));
  NCCL_OK(ncclGroupEnd());
  ex("start c0 h13 GroupApi parent=NULL rank=0 captured=0 depth=2");
  ex("state h13 23 args=NULL");
  ex("start c0 h14 P2pApi parent=h13 rank=0 func=Recv count=1024 dtype=ncclFloat32 stream=%p "
     "captured=0",
     (void *)S(0));
  ex("stop h14");
  ex("start c0 h15 P2pApi parent=h13 rank=0 func=Send count=1024 dtype=ncclFloat32 stream=%p "
     "captured=0",
     (void *)S(0));
  ex("stop h15");
  ex("state h13 24 args=NULL");
  ex("start c0 h16 KernelLaunch parent=h13 rank=0 stream=%p", (void *)S(0));
  ex("cupti 652 %s", K_SENDRECV);
  ex("stop h16");
  ex("start c0 h17 Group parent=NULL rank=0");
  ex("start c0 h18 P2p parent=h15 rank=0 func=Send buff=%p dtype=ncclFloat32 count=1024 peer=1 "
     "nch=2 pgroup=h17",
     SB(0));
  ex("start c0 h19 P2p parent=h14 rank=0 func=Recv buff=%p dtype=ncclFloat32 count=1024 peer=1 "
     "nch=2 pgroup=h17",
     RB(0));
  ex("stop h18");
  ex("stop h19");
  ex("stop h17");
  ex("stop h13");
  check_log("Send/Recv group");

  /* d) Broadcast from root 1 on rank 1's comm. */
  NCCL_OK(ncclBroadcast(SB(1), RB(1), 2048, ncclFloat16, 1, comms[1], S(1)));
  struct coll_expect bc = {
      "c1", 20, "Broadcast", "ncclFloat16", "ncclInt8", K_BCAST, 2048, 4096, 1, 1, 1, 0};
  expect_standalone(&bc);
  check_log("Broadcast");

  /* e) samples/nccl_allreduce.cu: one AllReduce per rank in a group. One GroupApi event (on the
   * first comm's context); rank 1's comm joined last, so it launches first. */
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclAllReduce(SB(0), RB(0), 262144, ncclFloat32, ncclSum, comms[0], S(0)));
  NCCL_OK(ncclAllReduce(SB(1), RB(1), 262144, ncclFloat32, ncclSum, comms[1], S(1)));
  NCCL_OK(ncclGroupEnd());
  ex("start c0 h25 GroupApi parent=NULL rank=0 captured=0 depth=2");
  ex("state h25 23 args=NULL");
  ex("start c0 h26 CollApi parent=h25 rank=0 func=AllReduce count=262144 dtype=ncclFloat32 root=0 "
     "stream=%p captured=0",
     (void *)S(0));
  ex("stop h26");
  ex("start c1 h27 CollApi parent=h25 rank=0 func=AllReduce count=262144 dtype=ncclFloat32 root=0 "
     "stream=%p captured=0",
     (void *)S(1));
  ex("stop h27");
  ex("state h25 24 args=NULL");
  ex("start c1 h28 KernelLaunch parent=h25 rank=0 stream=%p", (void *)S(1));
  ex("cupti 652 %s", K_AR_F32);
  ex("stop h28");
  ex("start c1 h29 Group parent=NULL rank=0");
  ex("start c1 h30 Coll parent=h27 rank=1 seq=0 func=AllReduce send=%p recv=%p count=262144 root=0 "
     "dtype=ncclFloat32 nch=2 nwarps=16 algo=RING proto=LL pgroup=h29",
     SB(1), RB(1));
  ex("stop h30");
  ex("stop h29");
  ex("start c0 h31 KernelLaunch parent=h25 rank=0 stream=%p", (void *)S(0));
  ex("cupti 652 %s", K_AR_F32);
  ex("stop h31");
  ex("start c0 h32 Group parent=NULL rank=0");
  ex("start c0 h33 Coll parent=h26 rank=0 seq=2 func=AllReduce send=%p recv=%p count=262144 root=0 "
     "dtype=ncclFloat32 nch=2 nwarps=16 algo=RING proto=LL pgroup=h32",
     SB(0), RB(0));
  ex("stop h33");
  ex("stop h32");
  ex("stop h25");
  check_log("two-comm group");

  /* f) The plugin clears the mask through the pointer init got: the next call sees it. No
   * event is started, but 2.28.9 stops the CollApi handle it still holds (h27) once more, and
   * the kernel is launched all the same. Then the mask comes back for the call after. */
  CHECK(rec_set_mask(0) == 0, "rec_set_mask");
  NCCL_OK(ncclAllReduce(SB(0), RB(0), 262144, ncclFloat32, ncclSum, comms[0], S(0)));
  ex("stop h27");
  ex("cupti 652 %s", K_AR_F32);
  check_log("mask cleared");
  CHECK(rec_set_mask(0xf07) == 0, "rec_set_mask");
  NCCL_OK(ncclAllReduce(SB(0), RB(0), 262144, ncclFloat32, ncclSum, comms[0], S(0)));
  struct coll_expect on = {
      "c0", 34, "AllReduce", "ncclFloat32", "ncclFloat32", K_AR_F32, 262144, 262144, 0, 0, 0, 4};
  expect_standalone(&on); /* seq 4: the masked call was counted too */
  check_log("mask restored");

  /* g) Calls NCCL refuses or drops make no plugin call and no kernel. */
  NCCL_OK(ncclAllReduce(SB(0), RB(0), 0, ncclFloat32, ncclSum, comms[0], S(0)));
  CHECK(ncclAllReduce(SB(0), RB(0), 16, ncclFloat32, ncclSum, NULL, S(0)) == ncclInvalidArgument,
        "NULL comm");
  CHECK(strcmp(ncclGetLastError(NULL), "AllReduce : comm argument is NULL") == 0, "last error %s",
        ncclGetLastError(NULL));
  CHECK(ncclAllReduce(SB(0), RB(0), 16, (ncclDataType_t)12, ncclSum, comms[0], S(0)) ==
            ncclInvalidArgument,
        "bad type");
  CHECK(strcmp(ncclGetLastError(comms[0]), "AllReduce : invalid type 12") == 0, "last error %s",
        ncclGetLastError(comms[0]));
  CHECK(ncclAllReduce(SB(0), RB(0), 16, ncclFloat32, (ncclRedOp_t)5, comms[0], S(0)) ==
            ncclInvalidArgument,
        "unknown op");
  CHECK(ncclBroadcast(SB(0), RB(0), 16, ncclFloat32, 2, comms[0], S(0)) == ncclInvalidArgument,
        "root out of range");
  CHECK(strcmp(ncclGetLastError(comms[0]),
               "Broadcast : invalid root 2 (root should be in the 0..2 range)") == 0,
        "last error %s", ncclGetLastError(comms[0]));
  CHECK(ncclGroupEnd() == ncclInvalidUsage, "ncclGroupEnd outside a group");
  CHECK(strcmp(ncclGetErrorString(ncclInvalidArgument),
               "invalid argument (run with NCCL_DEBUG=WARN for details)") == 0,
        "error string");
  check_log("refused calls");

  /* h) Destroy: finalize per comm. */
  NCCL_OK(ncclCommDestroy(comms[0]));
  NCCL_OK(ncclCommDestroy(comms[1]));
  ex("finalize c0");
  ex("finalize c1");
  check_log("destroy");

  /* The kernels CUPTI recorded: names, devices, streams, and the duration set for bf16. */
  cupti_stop();
  static const char *const want[] = {K_AR_BF16, K_AR_BF16, K_SENDRECV, K_BCAST,
                                     K_AR_F32,  K_AR_F32,  K_AR_F32,   K_AR_F32};
  static const uint32_t want_dev[] = {0, 0, 0, 1, 1, 0, 0, 0};
  CHECK(g_nkernels == 8, "%d kernel records", g_nkernels);
  for (int i = 0; i < g_nkernels && i < 8; i++) {
    CHECK(strcmp(g_kernels[i].name, want[i]) == 0, "kernel %d: %s", i, g_kernels[i].name);
    CHECK(g_kernels[i].device == want_dev[i], "kernel %d on device %u", i, g_kernels[i].device);
    if (i < 2)
      CHECK(g_kernels[i].ns == 7000, "kernel %d took %" PRIu64 " ns", i, g_kernels[i].ns);
  }
}

/* A short workload for the plugin-loading scenarios. */
static void small_workload(ncclComm_t *comms)
{
  NCCL_OK(ncclAllReduce(SB(0), RB(0), 1024, ncclFloat32, ncclSum, comms[0], S(0)));
  NCCL_OK(ncclCommDestroy(comms[0]));
  NCCL_OK(ncclCommDestroy(comms[1]));
}

static void scenario_none(void)
{
  ncclComm_t comms[2];
  NCCL_OK(ncclCommInitAll(comms, 2, NULL));
  small_workload(comms);
  ex("cupti 652 %s", K_AR_F32);
  check_log("NCCL_PROFILER_PLUGIN=none");
}

static void scenario_v4(void)
{
  ncclUniqueId id;
  NCCL_OK(ncclGetUniqueId(&id));
  ncclComm_t c0, c1;
  NCCL_OK(ncclCommInitRank(&c0, 2, id, 0)); /* the other rank is imaginary */
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.commName = "trainer";
  cuCtxSetCurrent(g_ctx[1]);
  NCCL_OK(ncclCommInitRankConfig(&c1, 2, id, 1, &config));
  cuCtxSetCurrent(g_ctx[0]);
  int dev = -1;
  NCCL_OK(ncclCommCuDevice(c1, &dev));
  CHECK(dev == 1, "device %d", dev);
  uint64_t h = djb2a(&id);
  /* v4's init takes the mask before commName and commHash, and runs on the caller's thread. */
  ex("init v4 hash=%016" PRIx64 " name=NULL nNodes=1 nranks=2 rank=0 logfn=set -> c0 thread=main "
     "dev=0",
     h);
  ex("init v4 hash=%016" PRIx64 " name=trainer nNodes=1 nranks=2 rank=1 logfn=set -> c1 "
     "thread=main dev=1",
     h);
  check_log("v4 init");
  /* The adapter drops GroupApi/CollApi/P2pApi/KernelLaunch and the group states; a v4 Coll's
   * parent is its Group. */
  NCCL_OK(ncclAllReduce(SB(0), RB(0), 1024, ncclFloat32, ncclSum, c0, S(0)));
  NCCL_OK(ncclSend(SB(0), 256, ncclFloat32, 1, c0, S(0)));
  ex("cupti 652 %s", K_AR_F32);
  ex("start c0 h1 Group parent=NULL rank=0");
  ex("start c0 h2 Coll parent=h1 rank=0 seq=0 func=AllReduce count=1024 root=0 dtype=ncclFloat32 "
     "nch=2 nwarps=16 algo=RING proto=LL");
  ex("stop h2");
  ex("stop h1");
  ex("cupti 652 %s", K_SENDRECV);
  ex("start c0 h3 Group parent=NULL rank=0");
  ex("start c0 h4 P2p parent=h3 rank=0 func=Send dtype=ncclFloat32 count=256 peer=1 nch=2");
  ex("stop h4");
  ex("stop h3");
  check_log("v4 events");
  NCCL_OK(ncclCommDestroy(c1));
  NCCL_OK(ncclCommDestroy(c0));
  ex("finalize c1");
  ex("finalize c0");
  check_log("v4 destroy");
}

static void scenario_v3(void)
{
  ncclUniqueId id;
  NCCL_OK(ncclGetUniqueId(&id));
  ncclComm_t c0;
  NCCL_OK(ncclCommInitRank(&c0, 2, id, 0));
  NCCL_OK(ncclReduce(SB(0), RB(0), 64, ncclInt32, ncclMax, 1, c0, S(0)));
  ex("init v3 -> c0 thread=main dev=0");
  /* Max is not specialized: the kernel is still the Sum one for its type (u32 for int32). */
  ex("cupti 652 _Z36ncclDevKernel_Reduce_Sum_u32_RING_LL24ncclDevKernelArgsStorageILm4096EE");
  ex("start c0 h1 Group parent=NULL rank=0");
  ex("start c0 h2 Coll parent=h1 rank=0 name=NULL hash=0 seq=0 func=Reduce count=64 "
     "dtype=ncclInt32 nch=2");
  ex("stop h2");
  ex("stop h1");
  NCCL_OK(ncclCommDestroy(c0));
  ex("finalize c0");
  check_log("v3");
}

static void scenario_initfail(void)
{
  ncclComm_t comms[2];
  NCCL_OK(ncclCommInitAll(comms, 2, NULL));
  static char got[8192];
  rec_take(got, sizeof(got));
  CHECK(strstr(got, "rank=1 logfn=set -> fail thread=other dev=1") != NULL, "init lines %s", got);
  CHECK(strstr(got, "rank=0 logfn=set -> c0 thread=other dev=0") != NULL, "init lines %s", got);
  /* NCCL 2.28.9 only logs the failed init: rank 1's events keep coming, with the context the
   * plugin left (NULL). */
  NCCL_OK(ncclAllReduce(SB(1), RB(1), 1024, ncclFloat32, ncclSum, comms[1], S(1)));
  struct coll_expect e = {
      "NULL", 1, "AllReduce", "ncclFloat32", "ncclFloat32", K_AR_F32, 1024, 1024, 0, 1, 1, 0};
  expect_standalone(&e);
  check_log("events after a failed init");
  NCCL_OK(ncclCommDestroy(comms[1])); /* no finalize: its context is NULL */
  NCCL_OK(ncclCommDestroy(comms[0]));
  ex("finalize c0");
  check_log("destroy after a failed init");
}

/* A one-rank comm: ncclLaunchOneRank copies on the stream; no plugin event, no kernel. */
static void scenario_onerank(void)
{
  ncclUniqueId id;
  NCCL_OK(ncclGetUniqueId(&id));
  ncclComm_t c;
  NCCL_OK(ncclCommInitRank(&c, 1, id, 0));
  ex("init v5 hash=%016" PRIx64 " name=NULL nNodes=1 nranks=1 rank=0 logfn=set -> c0 thread=main "
     "dev=0",
     djb2a(&id));
  check_log("one-rank init");
  float in[256], out[256];
  for (int i = 0; i < 256; i++)
    in[i] = (float)i + 0.5f;
  memset(out, 0, sizeof(out));
  CHECK(cuMemcpyHtoD(g_sb[0], in, sizeof(in)) == CUDA_SUCCESS, "HtoD");
  NCCL_OK(ncclAllReduce(SB(0), RB(0), 256, ncclFloat32, ncclSum, c, S(0)));
  CHECK(cuStreamSynchronize(g_s[0]) == CUDA_SUCCESS, "sync");
  CHECK(cuMemcpyDtoH(out, g_rb[0], sizeof(out)) == CUDA_SUCCESS, "DtoH");
  CHECK(memcmp(in, out, sizeof(in)) == 0, "one-rank AllReduce did not copy send to recv");
  NCCL_OK(ncclCommDestroy(c));
  ex("finalize c0");
  check_log("one-rank AllReduce");
}

static void put_f32(int dev, CUdeviceptr p, const float *v, size_t n)
{
  cuCtxSetCurrent(g_ctx[dev]);
  CHECK(cuMemcpyHtoD(p, v, n * sizeof(float)) == CUDA_SUCCESS, "HtoD");
}

static void get_f32(int dev, CUdeviceptr p, float *v, size_t n)
{
  cuCtxSetCurrent(g_ctx[dev]);
  CHECK(cuStreamSynchronize(g_s[dev]) == CUDA_SUCCESS, "sync");
  CHECK(cuMemcpyDtoH(v, p, n * sizeof(float)) == CUDA_SUCCESS, "DtoH");
}

/* Both ranks in this process, each calling its part in one group: the buffers hold what NCCL
 * would have computed (samples/nccl_allreduce.cu checks 1 + 2 = 3). */
static void scenario_data(void)
{
  ncclComm_t comms[2];
  NCCL_OK(ncclCommInitAll(comms, 2, NULL));
  enum { N = 1024 };
  static float in[2][2 * N], out[2][2 * N];
  for (int r = 0; r < 2; r++) {
    for (int i = 0; i < 2 * N; i++)
      in[r][i] = (float)(r + 1) * (float)(i % 7 + 1);
    put_f32(r, g_sb[r], in[r], 2 * N);
  }
  /* AllReduce sum, in place on rank 1 (send == recv). */
  CHECK(cuMemcpyDtoD(g_rb[1], g_sb[1], 2 * N * sizeof(float)) == CUDA_SUCCESS, "DtoD");
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclAllReduce(SB(0), RB(0), N, ncclFloat32, ncclSum, comms[0], S(0)));
  NCCL_OK(ncclAllReduce(RB(1), RB(1), N, ncclFloat32, ncclSum, comms[1], S(1)));
  NCCL_OK(ncclGroupEnd());
  for (int r = 0; r < 2; r++) {
    get_f32(r, g_rb[r], out[r], N);
    int bad = 0;
    for (int i = 0; i < N; i++)
      bad += out[r][i] != in[0][i] + in[1][i];
    CHECK(bad == 0, "AllReduce rank %d: %d wrong, [0] = %g", r, bad, out[r][0]);
  }
  /* AllGather: rank r's N floats land at r * N on both ranks. */
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclAllGather(SB(0), RB(0), N, ncclFloat32, comms[0], S(0)));
  NCCL_OK(ncclAllGather(SB(1), RB(1), N, ncclFloat32, comms[1], S(1)));
  NCCL_OK(ncclGroupEnd());
  for (int r = 0; r < 2; r++) {
    get_f32(r, g_rb[r], out[r], 2 * N);
    CHECK(memcmp(out[r], in[0], N * sizeof(float)) == 0 &&
              memcmp(out[r] + N, in[1], N * sizeof(float)) == 0,
          "AllGather rank %d", r);
  }
  /* ReduceScatter max: rank r gets max over ranks of elements [r * N, (r + 1) * N). */
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclReduceScatter(SB(0), RB(0), N, ncclFloat32, ncclMax, comms[0], S(0)));
  NCCL_OK(ncclReduceScatter(SB(1), RB(1), N, ncclFloat32, ncclMax, comms[1], S(1)));
  NCCL_OK(ncclGroupEnd());
  for (int r = 0; r < 2; r++) {
    get_f32(r, g_rb[r], out[r], N);
    int bad = 0;
    for (int i = 0; i < N; i++)
      bad += out[r][i] != in[1][r * N + i];
    CHECK(bad == 0, "ReduceScatter rank %d: %d wrong", r, bad);
  }
  /* Broadcast from rank 1, and a Send/Recv exchange in the other direction (0 -> 1). */
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclBroadcast(SB(0), RB(0), N, ncclFloat32, 1, comms[0], S(0)));
  NCCL_OK(ncclBroadcast(SB(1), RB(1), N, ncclFloat32, 1, comms[1], S(1)));
  NCCL_OK(ncclGroupEnd());
  get_f32(0, g_rb[0], out[0], N);
  CHECK(memcmp(out[0], in[1], N * sizeof(float)) == 0, "Broadcast to rank 0");
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclSend(SB(0), N, ncclFloat32, 1, comms[0], S(0)));
  NCCL_OK(ncclRecv(RB(1), N, ncclFloat32, 0, comms[1], S(1)));
  NCCL_OK(ncclGroupEnd());
  get_f32(1, g_rb[1], out[1], N);
  CHECK(memcmp(out[1], in[0], N * sizeof(float)) == 0, "Send 0 -> Recv 1");
  /* One rank alone moves nothing (on hardware its kernel would wait for the peer). */
  static const float zero[N];
  put_f32(0, g_rb[0], zero, N);
  NCCL_OK(ncclAllReduce(SB(0), RB(0), N, ncclFloat32, ncclSum, comms[0], S(0)));
  get_f32(0, g_rb[0], out[0], N);
  CHECK(memcmp(out[0], zero, sizeof(zero)) == 0, "a lone rank's AllReduce wrote its output");
  cuCtxSetCurrent(g_ctx[0]);
  NCCL_OK(ncclCommDestroy(comms[0]));
  NCCL_OK(ncclCommDestroy(comms[1]));
}

static void scenario_bare(void)
{
  ncclComm_t comms[2];
  NCCL_OK(ncclCommInitAll(comms, 2, NULL));
  static char got[8192];
  rec_take(got, sizeof(got));
  CHECK(strstr(got, "init v5 ") && strstr(got, "rank=1 logfn=set -> c1 thread=other dev=1"),
        "libnccl-profiler-<name>.so not loaded: %s", got);
  small_workload(comms);
  rec_take(got, sizeof(got));
  CHECK(strstr(got, "finalize c0\nfinalize c1\n") != NULL, "finalize lines: %s", got);
}

int main(int argc, char **argv)
{
  const char *which = argc > 1 ? argv[1] : "main";
  const char *plugin = getenv("REC_PLUGIN");
  void *lib = plugin ? dlopen(plugin, RTLD_NOW | RTLD_LOCAL) : NULL;
  if (!lib) {
    fprintf(stderr, "FAIL: REC_PLUGIN=%s: %s\n", plugin ? plugin : "(unset)", dlerror());
    return 1;
  }
  rec_take = (size_t(*)(char *, size_t))dlsym(lib, "rec_take");
  rec_note = (void (*)(const char *))dlsym(lib, "rec_note");
  rec_set_mask = (int (*)(int))dlsym(lib, "rec_set_mask");
  if (!rec_take || !rec_note || !rec_set_mask) {
    fprintf(stderr, "FAIL: %s lacks the rec_* entry points\n", plugin);
    return 1;
  }
  devices_open();
  cupti_start();
  if (strcmp(which, "main") == 0)
    scenario_main();
  else if (strcmp(which, "none") == 0)
    scenario_none();
  else if (strcmp(which, "v4") == 0)
    scenario_v4();
  else if (strcmp(which, "v3") == 0)
    scenario_v3();
  else if (strcmp(which, "initfail") == 0)
    scenario_initfail();
  else if (strcmp(which, "bare") == 0)
    scenario_bare();
  else if (strcmp(which, "onerank") == 0)
    scenario_onerank();
  else if (strcmp(which, "data") == 0)
    scenario_data();
  else {
    fprintf(stderr, "FAIL: unknown scenario %s\n", which);
    g_failed = 1;
  }
  if (strcmp(which, "main") != 0)
    cupti_stop();
  devices_close();
  dlclose(lib);
  if (!g_failed)
    printf("ok %s\n", which);
  return g_failed;
}
