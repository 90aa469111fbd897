/* Drives the agent's NCCL profiler plugin as NCCL 2.28.9 does, around NCCL-named fake kernels. */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fakegpu/fakegpu.h"
#include "tests/lib/e2e.h"
#include "tests/nccl/nccl_abi.h"

/*
 * The call order is NCCL 2.28.9's eager path (tests/fakegpu/nccl documents it from
 * src/plugin/profiler.cc and src/enqueue.cc): GroupApi, CollApi/P2pApi start+stop per call,
 * then per plan KernelLaunch start, cuLaunchKernelEx, KernelLaunch stop, then Group, the
 * plan's Coll/P2p starts (parentObj = their API event), their stops, Group stop, GroupApi stop.
 * The descriptor layouts are the plugin API's (cupti.md 4.3): tests/nccl/nccl_abi.h.
 */

#define K_AR_BF16 "_Z40ncclDevKernel_AllReduce_Sum_bf16_RING_LL24ncclDevKernelArgsStorageILm4096EE"
#define K_AR_F32 "_Z39ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernelArgsStorageILm4096EE"
#define K_SENDRECV "_Z22ncclDevKernel_SendRecv24ncclDevKernelArgsStorageILm4096EE"
#define K_BCAST "_Z31ncclDevKernel_Broadcast_RING_LL24ncclDevKernelArgsStorageILm4096EE"

static const char *const names[] = {K_AR_BF16, K_AR_F32, K_SENDRECV, K_BCAST};
static CUfunction fn[4];
static CUstream stream;
static int mask_word; /* NCCL's one process-wide ncclProfilerEventMask */
static profiler_v5 *p5;

static void *lib(void)
{
  const char *path = getenv("CUDA_INJECTION64_PATH");
  /* The agent is already loaded (cuInit injected it): dlopen returns the same handle. */
  void *h = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD) : NULL;

  if (!h)
    e2e_fail("the agent is not loaded (CUDA_INJECTION64_PATH)");
  return h;
}

static void launch(int k, uint64_t ns)
{
  CUlaunchConfig cfg;

  memset(&cfg, 0, sizeof(cfg));
  cfg.gridDimX = 2;
  cfg.gridDimY = cfg.gridDimZ = 1;
  cfg.blockDimX = 512;
  cfg.blockDimY = cfg.blockDimZ = 1;
  cfg.hStream = stream;
  fakegpu_set_kernel_duration_ns(names[k], ns);
  CU(cuLaunchKernelEx(&cfg, fn[k], NULL, NULL));
}

static void *start(void *ctx, descr_v5 *d)
{
  void *h = (void *)1;

  if (p5->startEvent(ctx, &h, d) != 0)
    e2e_fail("startEvent returned an error");
  return h;
}

static void stop(void *h)
{
  if (p5->stopEvent(h) != 0)
    e2e_fail("stopEvent returned an error");
}

static void *coll_api(void *ctx, const char *func, size_t count, const char *dt, int root)
{
  descr_v5 d = {.type = T_COLL_API, .rank = 0};
  d.collApi.func = func;
  d.collApi.count = count;
  d.collApi.datatype = dt;
  d.collApi.root = root;
  d.collApi.stream = stream;
  return start(ctx, &d);
}

static void *p2p_api(void *ctx, const char *func, size_t count, const char *dt)
{
  descr_v5 d = {.type = T_P2P_API, .rank = 0};
  d.p2pApi.func = func;
  d.p2pApi.count = count;
  d.p2pApi.datatype = dt;
  d.p2pApi.stream = stream;
  return start(ctx, &d);
}

static void *coll(void *ctx, void *parent, int rank, uint64_t seq, const char *func, size_t count,
                  const char *dt, int root)
{
  descr_v5 d = {.type = T_COLL, .parentObj = parent, .rank = rank};
  d.coll.seqNumber = seq;
  d.coll.func = func;
  d.coll.count = count;
  d.coll.root = root;
  d.coll.datatype = dt;
  d.coll.nChannels = 2;
  d.coll.nWarps = 16;
  d.coll.algo = "RING";
  d.coll.proto = "LL";
  return start(ctx, &d);
}

static void *p2p(void *ctx, void *parent, int rank, const char *func, size_t count, const char *dt,
                 int peer)
{
  descr_v5 d = {.type = T_P2P, .parentObj = parent, .rank = rank};
  d.p2p.func = func;
  d.p2p.count = count;
  d.p2p.datatype = dt;
  d.p2p.peer = peer;
  d.p2p.nChannels = 2;
  return start(ctx, &d);
}

/* GroupApi start (the plugin keeps none: NULL), its GroupStartApiStop state. */
static void *group_api(void *ctx, int depth)
{
  descr_v5 d = {.type = T_GROUP_API};
  void *g;
  d.groupApi.groupDepth = depth;
  g = start(ctx, &d);
  if (g)
    e2e_fail("GroupApi got a handle");
  p5->recordEventState(g, 23, NULL);
  return g;
}

/* KernelLaunch start, cuLaunchKernelEx, stop; then Group start (handle ignored). */
static void *kernel_launch(void *ctx, int k, uint64_t ns)
{
  descr_v5 d = {.type = T_KERNEL_LAUNCH};
  descr_v5 g = {.type = T_GROUP};
  void *l, *grp;
  d.kernelLaunch.stream = stream;
  l = start(ctx, &d);
  if (!l)
    e2e_fail("KernelLaunch got no handle");
  launch(k, ns);
  stop(l);
  grp = start(ctx, &g);
  if (grp)
    e2e_fail("Group got a handle");
  return grp;
}

/* ncclAllReduce(524288 bf16) alone: an implicit group of one. */
static void sim_allreduce(void *tp)
{
  void *G = group_api(tp, 1), *C, *c, *g;

  C = coll_api(tp, "AllReduce", 524288, "ncclBfloat16", 0);
  stop(C);
  p5->recordEventState(G, 24, NULL);
  g = kernel_launch(tp, 0, 100000);
  c = coll(tp, C, 0, 0, "AllReduce", 524288, "ncclBfloat16", 0);
  stop(c);
  stop(g);
  stop(G);
  stop(C); /* NCCL 2.28.9 stops a kept CollApi handle again later: harmless */
}

/* ncclGroupStart; ncclAllReduce(1000 f32); ncclAllGather(2048 bf16); ncclGroupEnd: one kernel. */
static void sim_grouped(void *tp)
{
  void *G = group_api(tp, 2), *C1, *C2, *c1, *c2, *g;

  C1 = coll_api(tp, "AllReduce", 1000, "ncclFloat32", 0);
  stop(C1);
  C2 = coll_api(tp, "AllGather", 2048, "ncclBfloat16", 0);
  stop(C2);
  p5->recordEventState(G, 24, NULL);
  g = kernel_launch(tp, 1, 90001);
  c1 = coll(tp, C1, 0, 1, "AllReduce", 1000, "ncclFloat32", 0);
  /* collTaskAppend rewrites AllGather to bytes of ncclInt8 */
  c2 = coll(tp, C2, 0, 0, "AllGather", 4096, "ncclInt8", 0);
  stop(c1);
  stop(c2);
  stop(g);
  stop(G);
}

/* ncclGroupStart; ncclSend(1024 f32, peer 1); ncclRecv(1024 f32, peer 1); ncclGroupEnd. */
static void sim_sendrecv(void *tp)
{
  void *G = group_api(tp, 2), *S, *R, *s, *r, *g;

  S = p2p_api(tp, "Send", 1024, "ncclFloat32");
  stop(S);
  R = p2p_api(tp, "Recv", 1024, "ncclFloat32");
  stop(R);
  p5->recordEventState(G, 24, NULL);
  g = kernel_launch(tp, 2, 30000);
  s = p2p(tp, S, 0, "Send", 1024, "ncclFloat32", 1);
  r = p2p(tp, R, 0, "Recv", 1024, "ncclFloat32", 1);
  stop(s);
  stop(r);
  stop(g);
  stop(G);
}

/* ncclBroadcast(4096 f16, root 1) on the unnamed communicator (rank 1 of 4). */
static void sim_broadcast(void *dp)
{
  void *G = group_api(dp, 1), *C, *c, *g;

  C = coll_api(dp, "Broadcast", 4096, "ncclFloat16", 1);
  stop(C);
  p5->recordEventState(G, 24, NULL);
  g = kernel_launch(dp, 3, 20000);
  c = coll(dp, C, 1, 0, "Broadcast", 8192, "ncclInt8", 1);
  stop(c);
  stop(g);
  stop(G);
}

static void *init_v5(uint64_t hash, const char *name, int nranks, int rank);

/* A group whose launch the agent does not see (the bracket closes without a driver launch, as
 * when API callbacks are off by then), then sim_allreduce: the first group's AllReduce must
 * not join the second group's kernel. */
static void sim_unseen(void *tp)
{
  descr_v5 d = {.type = T_KERNEL_LAUNCH};
  void *G = group_api(tp, 1), *C, *c, *l;

  C = coll_api(tp, "AllReduce", 1000, "ncclFloat32", 0);
  stop(C);
  p5->recordEventState(G, 24, NULL);
  d.kernelLaunch.stream = stream;
  l = start(tp, &d);
  stop(l);
  c = coll(tp, C, 0, 5, "AllReduce", 1000, "ncclFloat32", 0);
  stop(c);
  stop(G);
  sim_allreduce(tp);
}

/* An all-to-all of a 66-rank job: 65 Send/Recv pairs in one group, so 130 p2p ops in one
 * SendRecv kernel (the old bound was 64 ops per kernel). */
#define A2A_PEERS 65
static void sim_alltoall(void *tp)
{
  void *G = group_api(tp, 2), *api[2 * A2A_PEERS], *task[2 * A2A_PEERS], *g;

  for (int i = 0; i < 2 * A2A_PEERS; i++) {
    api[i] = p2p_api(tp, i % 2 ? "Recv" : "Send", 256, "ncclFloat32");
    stop(api[i]);
  }
  p5->recordEventState(G, 24, NULL);
  g = kernel_launch(tp, 2, 130013);
  for (int i = 0; i < 2 * A2A_PEERS; i++)
    task[i] = p2p(tp, api[i], 0, i % 2 ? "Recv" : "Send", 256, "ncclFloat32", 1 + i / 2);
  for (int i = 0; i < 2 * A2A_PEERS; i++)
    stop(task[i]);
  stop(g);
  stop(G);
}

/* The communicator table (256 entries): tp is initialised again (a comm destroyed and
 * re-created from the same unique id) and must get its entry back; the table filled, one init
 * more gets no context, and the process-wide mask must stay on for the others. */
static void *sim_full(void *tp)
{
  void *again, *ctx = (void *)1;

  for (int i = 0; i < 254; i++)
    init_v5(0x5000 + (uint64_t)i, NULL, 8, 1);
  again = init_v5(0x1111222233334444ull, "tp", 2, 0);
  printf("re-init: %s entry\n", again == tp ? "same" : "new");
  init_v5(0x6000, "last", 8, 1);
  if (p5->init(&ctx, 0x7000, &mask_word, "extra", 1, 8, 1, NULL) != 0 || ctx)
    e2e_fail("an init past the table got a context");
  printf("table full: mask 0x%x\n", mask_word);
  return again;
}

/* Types the plugin did not ask for or does not know: no handle, no effect. */
static void sim_unknown(void *tp)
{
  descr_v5 d = {.type = T_PROXY_OP};
  descr_v5 u = {.type = 1u << 20};

  if (start(tp, &d) || start(tp, &u) || start(NULL, &u))
    e2e_fail("an ignored event type got a handle");
  stop(NULL);
  p5->recordEventState(NULL, 22, NULL);
}

static void *init_v5(uint64_t hash, const char *name, int nranks, int rank)
{
  void *ctx = NULL;

  if (p5->init(&ctx, hash, &mask_word, name, 1, nranks, rank, NULL) != 0 || !ctx)
    e2e_fail("v5 init failed");
  printf("v5 mask 0x%x\n", mask_word);
  return ctx;
}

/* More API events than the pool holds (16384), none ever launched; then a Coll whose
 * CollApi was dropped (parentObj NULL): ignored, not dropped twice. */
static void sim_overflow(void *tp, int n)
{
  for (int i = 0; i < n; i++)
    coll_api(tp, "AllReduce", 8, "ncclFloat32", 0);
}

/* NCCL 2.27 (v4) / 2.26 (v3): Coll events only, after the plan's launch, no KernelLaunch. */
static void sim_v4(void)
{
  profiler_v4 *p = dlsym(lib(), "ncclProfiler_v4");
  descr_v4 d = {.type = T_COLL, .rank = 0};
  void *ctx = NULL, *h = NULL;

  if (!p || p->init(&ctx, &mask_word, "v4comm", 0x4444, 1, 8, 3, NULL) != 0 || !ctx)
    e2e_fail("v4 init failed");
  printf("v4 mask 0x%x\n", mask_word);
  launch(0, 50000);
  d.coll.seqNumber = 7;
  d.coll.func = "AllReduce";
  d.coll.count = 256;
  d.coll.datatype = "ncclBfloat16";
  d.coll.nChannels = 4;
  d.coll.algo = "TREE";
  d.coll.proto = "SIMPLE";
  if (p->startEvent(ctx, &h, &d) != 0 || !h)
    e2e_fail("v4 Coll got no handle");
  p->stopEvent(h);
  p->finalize(ctx);
}

static void sim_v3(void)
{
  profiler_v3 *p = dlsym(lib(), "ncclProfiler_v3");
  descr_v3 d = {.type = T_COLL, .rank = 0};
  void *ctx = NULL, *h = NULL;

  if (!p || p->init(&ctx, &mask_word) != 0 || !ctx)
    e2e_fail("v3 init failed");
  printf("v3 mask 0x%x\n", mask_word);
  launch(0, 60000);
  d.coll.name = "v3comm";
  d.coll.commHash = 0x3333;
  d.coll.seqNumber = 9;
  d.coll.func = "AllReduce";
  d.coll.count = 128;
  d.coll.datatype = "ncclFloat64";
  d.coll.nMaxChannels = 1;
  d.coll.algo = "RING";
  d.coll.proto = "LL128";
  if (p->startEvent(ctx, &h, &d) != 0 || !h)
    e2e_fail("v3 Coll got no handle");
  p->stopEvent(h);
  p->finalize(ctx);
}

/* NCCL_PROFILER_PLUGIN names the agent but CUDA_INJECTION64_PATH does not: NCCL loads the
 * library as a plugin only. Every comm init succeeds with events off (mask 0). */
static void sim_noinject(void)
{
  const char *path = getenv("NCCL_PROFILER_PLUGIN");
  void *h = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
  descr_v5 d = {.type = T_COLL_API};
  void *ctx = &mask_word;

  p5 = h ? dlsym(h, "ncclProfiler_v5") : NULL;
  if (!p5)
    e2e_fail("cannot load ncclProfiler_v5 from NCCL_PROFILER_PLUGIN");
  for (int i = 0; i < 2; i++) {
    mask_word = -1;
    if (p5->init(&ctx, 0x1234 + (uint64_t)i, &mask_word, "tp", 1, 2, 0, NULL) != 0)
      e2e_fail("init failed");
    if (mask_word != 0 || ctx != NULL)
      e2e_fail("an uninjected plugin asked for events");
    d.collApi.func = "AllReduce";
    if (start(ctx, &d))
      e2e_fail("an uninjected plugin returned a handle");
    p5->finalize(ctx);
  }
  printf("noinject mask 0x%x\n", mask_word);
}

int main(int argc, char **argv)
{
  const char *mode = argc > 1 ? argv[1] : "main";
  CUdevice dev;
  CUcontext ctx;
  CUmodule mod;

  mod = e2e_context_with_kernels(&dev, &ctx, names, 4, fn);
  CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  if (!strcmp(mode, "noinject")) {
    sim_noinject();
  } else if (!strcmp(mode, "v4")) {
    sim_v4();
  } else if (!strcmp(mode, "v3")) {
    sim_v3();
  } else {
    p5 = dlsym(lib(), "ncclProfiler_v5");
    if (!p5 || strcmp(p5->name, "gpuprof"))
      e2e_fail("ncclProfiler_v5 not exported");
    void *tp = init_v5(0x1111222233334444ull, "tp", 2, 0);
    if (!strcmp(mode, "overflow")) {
      sim_overflow(tp, 16394);
      if (coll(tp, NULL, 0, 0, "AllReduce", 8, "ncclFloat32", 0))
        e2e_fail("a Coll without its CollApi got a handle");
    } else if (!strcmp(mode, "unseen")) {
      sim_unseen(tp);
    } else if (!strcmp(mode, "alltoall")) {
      sim_alltoall(tp);
    } else if (!strcmp(mode, "full")) {
      sim_allreduce(sim_full(tp));
    } else {
      void *dp = init_v5(0xabcdef0012345678ull, NULL, 4, 1);
      sim_allreduce(tp);
      sim_grouped(tp);
      sim_sendrecv(tp);
      sim_broadcast(dp);
      sim_unknown(tp);
      p5->finalize(dp);
    }
    /* overflow: a job that exits without destroying its comm, so that its 16384 ops are
     * still pending at exit (the summary lists 16). */
    if (strcmp(mode, "overflow"))
      p5->finalize(tp);
  }
  CU(cuStreamSynchronize(stream));
  CU(cuStreamDestroy(stream));
  CU(cuModuleUnload(mod));
  CU(cuDevicePrimaryCtxRelease(dev));
  printf("nccl_plugin_sim %s: done\n", mode);
  return 0;
}
