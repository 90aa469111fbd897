/* A program that uses NCCL's API as PyTorch does: one comm, an AllReduce, a grouped pair, a
 * send/recv pair; run against the NCCL double with NCCL_PROFILER_PLUGIN naming the agent.
 * Modes: api (that), initall (the two comms of one ncclCommInitAll driven in one group from
 * one thread, as samples/nccl_allreduce.cu), ondemand (the same calls inside and outside
 * captures, one of them GPU-only), span (a group that outlives its capture), hang (collectives
 * that never finish, see hang()), hang_dev (a hung first collective on the second device),
 * hang_idle (a collective of a comm that never launched, on the second device). */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <nccl.h>

#include "include/gpuprof/gpuprof.h"

#include "tests/fakegpu/fakegpu.h"
#include "tests/lib/e2e.h"
#include "tests/lib/e2e_nccl.h"

#define K_AR_BF16 "_Z40ncclDevKernel_AllReduce_Sum_bf16_RING_LL24ncclDevKernelArgsStorageILm4096EE"
#define K_AR_F32 "_Z39ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernelArgsStorageILm4096EE"
#define K_SENDRECV "_Z22ncclDevKernel_SendRecv24ncclDevKernelArgsStorageILm4096EE"

static cudaStream_t stream;

static void e2e_allreduce(ncclComm_t comm, void *a, void *b)
{
  NC(ncclAllReduce(a, b, 524288, ncclBfloat16, ncclSum, comm, stream));
}

/* One kernel for both: NCCL plans a group's tasks on one comm together. */
static void e2e_grouped(ncclComm_t comm, void *a, void *b)
{
  NC(ncclGroupStart());
  NC(ncclAllReduce(a, b, 100000, ncclFloat32, ncclSum, comm, stream));
  NC(ncclAllGather(a, b, 2048, ncclBfloat16, comm, stream));
  NC(ncclGroupEnd());
}

static void e2e_sendrecv(ncclComm_t comm, void *a, void *b)
{
  NC(ncclGroupStart());
  NC(ncclSend(a, 1024, ncclFloat32, 1, comm, stream));
  NC(ncclRecv(b, 1024, ncclFloat32, 1, comm, stream));
  NC(ncclGroupEnd());
}

/* ncclGroupStart; AllReduce on comm0/stream0 and comm1/stream1; ncclGroupEnd: one plan, so
 * one kernel, per comm (NCCL launches rank 1's first). */
static void e2e_pair(ncclComm_t *comms, CUstream *st, CUdeviceptr *a, CUdeviceptr *b)
{
  NC(ncclGroupStart());
  for (int i = 0; i < 2; i++)
    NC(ncclAllReduce((void *)a[i], (void *)b[i], 4096, ncclFloat32, ncclSum, comms[i],
                     (cudaStream_t)st[i]));
  NC(ncclGroupEnd());
}

static int initall(void)
{
  CUdevice dev[2];
  CUcontext ctx[2];
  CUstream st[2];
  CUdeviceptr a[2], b[2];
  ncclComm_t comms[2];

  CU(cuInit(0));
  for (int i = 0; i < 2; i++) {
    CU(cuDeviceGet(&dev[i], i));
    CU(cuDevicePrimaryCtxRetain(&ctx[i], dev[i]));
    CU(cuCtxSetCurrent(ctx[i]));
    CU(cuStreamCreate(&st[i], CU_STREAM_NON_BLOCKING));
    CU(cuMemAlloc(&a[i], 1u << 20));
    CU(cuMemAlloc(&b[i], 1u << 20));
  }
  CU(cuCtxSetCurrent(ctx[0]));
  fakegpu_set_kernel_duration_ns(K_AR_F32, 50000);
  NC(ncclCommInitAll(comms, 2, NULL));
  for (int it = 0; it < 3; it++)
    e2e_pair(comms, st, a, b);
  for (int i = 0; i < 2; i++) {
    CU(cuCtxSetCurrent(ctx[i]));
    CU(cuStreamSynchronize(st[i]));
  }
  for (int i = 0; i < 2; i++)
    NC(ncclCommDestroy(comms[i]));
  for (int i = 0; i < 2; i++) {
    CU(cuCtxSetCurrent(ctx[i]));
    CU(cuMemFree(a[i]));
    CU(cuMemFree(b[i]));
    CU(cuStreamDestroy(st[i]));
    CU(cuDevicePrimaryCtxRelease(dev[i]));
  }
  printf("nccl_api_e2e: done\n");
  return 0;
}

/* gpuprof_capture_start/stop of the agent the driver injected. */
static int capture(unsigned flags, int on)
{
  void *lib = dlopen(getenv("CUDA_INJECTION64_PATH"), RTLD_NOW | RTLD_NOLOAD);
  int (*start)(unsigned, unsigned) =
      lib ? (int (*)(unsigned, unsigned))dlsym(lib, "gpuprof_capture_start") : NULL;
  int (*stop)(void) = lib ? (int (*)(void))dlsym(lib, "gpuprof_capture_stop") : NULL;
  int rc;

  if (!start || !stop) {
    fprintf(stderr, "the agent's capture API is not loaded\n");
    exit(1);
  }
  rc = on ? start(600000, flags) : stop();
  if (rc) {
    fprintf(stderr, "capture %s: %d\n", on ? "start" : "stop", rc);
    exit(1);
  }
  return 0;
}

/*
 * hang: two named comms ("hang0", "hang1") of two ranks (rank 0 here), two AllReduces each
 * that finish, then a collective that never does: AllReduce seq 2 on hang0 whose kernel runs
 * for 10^12 ns (its record never comes), seq 3 queued behind it, and on hang1 an AllReduce
 * inside a group that is never ended (not launched). The capture started by
 * GPUPROF_CAPTURE_ON_START is stopped (the worker finishes it), a second one is started after
 * the hang began and the program exits without ending it or synchronizing (the exit path
 * finishes it). Both traces and the summary list the three pending ops.
 */
static ncclComm_t hang_comm[2]; /* never destroyed (a hung job): reachable, not leaked */

static int hang(int abort_comm)
{
  CUdevice dev;
  CUcontext ctx;
  CUstream st[2];
  CUdeviceptr a, b;
  ncclComm_t *comm = hang_comm;
  void *lib;
  int (*start)(unsigned, unsigned);
  int (*stop)(void);

  CU(cuInit(0)); /* loads the agent (CUDA_INJECTION64_PATH) */
  lib = dlopen(getenv("CUDA_INJECTION64_PATH"), RTLD_NOW | RTLD_NOLOAD);
  start = lib ? (int (*)(unsigned, unsigned))dlsym(lib, "gpuprof_capture_start") : NULL;
  stop = lib ? (int (*)(void))dlsym(lib, "gpuprof_capture_stop") : NULL;
  if (!start || !stop)
    e2e_fail("the agent's capture API is not loaded");
  CU(cuDeviceGet(&dev, 0));
  CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU(cuCtxSetCurrent(ctx));
  CU(cuMemAlloc(&a, 4u << 20));
  CU(cuMemAlloc(&b, 4u << 20));
  fakegpu_set_kernel_duration_ns(K_AR_BF16, 100000);
  fakegpu_set_kernel_duration_ns(K_AR_F32, 90001);
  for (int i = 0; i < 2; i++) {
    ncclUniqueId id;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.commName = i ? "hang1" : "hang0";
    CU(cuStreamCreate(&st[i], CU_STREAM_NON_BLOCKING));
    NC(ncclGetUniqueId(&id));
    NC(ncclCommInitRankConfig(&comm[i], 2, id, 0, &cfg));
  }
  for (int it = 0; it < 2; it++) {
    NC(ncclAllReduce((void *)a, (void *)b, 524288, ncclBfloat16, ncclSum, comm[0],
                     (cudaStream_t)st[0]));
    NC(ncclAllReduce((void *)a, (void *)b, 100000, ncclFloat32, ncclSum, comm[1],
                     (cudaStream_t)st[1]));
  }
  for (int i = 0; i < 2; i++)
    CU(cuStreamSynchronize(st[i]));
  /* A job that ran a while before it hung: the agent's periodic flush (GPUPROF_FLUSH_INTERVAL
   * 20ms) delivers the finished kernels' buffer. Records made after it share a buffer with the
   * hung kernel's, which CUPTI holds back until a forced flush (docs/TRACES.md "NCCL"). */
  usleep(200000);
  /* The hung collective: its kernel outlives the process. */
  fakegpu_set_kernel_duration_ns(K_AR_BF16, 1000000000000ull);
  NC(ncclAllReduce((void *)a, (void *)b, 524288, ncclBfloat16, ncclSum, comm[0],
                   (cudaStream_t)st[0]));
  NC(ncclAllReduce((void *)a, (void *)b, 4096, ncclBfloat16, ncclSum, comm[0],
                   (cudaStream_t)st[0]));
  NC(ncclGroupStart());
  NC(ncclAllReduce((void *)a, (void *)b, 2048, ncclFloat32, ncclSum, comm[1], (cudaStream_t)st[1]));
  if (stop() || start(600000, 0))
    e2e_fail("capture stop/start");
  /* hang_abort: the job gives up on hang0 (a fault-tolerant trainer aborts the comm and goes
   * on): NCCL finalizes the plugin's context, and hang0's ops are no longer pending. */
  if (abort_comm)
    NC(ncclCommAbort(comm[0]));
  printf("nccl_api_e2e: done\n");
  return 0; /* no ncclGroupEnd, no synchronization: the exit path finishes the capture */
}

/*
 * hang_dev (two devices): comm "gpu0" on device 0 finishes an AllReduce; then comm "gpu1" on
 * device 1 launches its first AllReduce, whose kernel never finishes, and the program exits.
 * No kernel of gpu1 ever finished, so only its launch tells the agent its device: the pending
 * op must be drawn on GPU 1, not on the device some other comm's kernels ran on.
 * hang_idle: the second comm ("idle1", device 1) never launches anything: its first AllReduce
 * is posted in a group that never ends. Only its init (with device 1 current, as NCCL makes
 * it) can tell the agent its device; the last launch any comm made was on device 0.
 */
static ncclComm_t dev_comm[2]; /* never destroyed (a hung job) */

static int hang_dev(int idle)
{
  CUcontext ctx[2];
  CUstream st[2];
  CUdeviceptr a[2], b[2];

  CU(cuInit(0));
  fakegpu_set_kernel_duration_ns(K_AR_F32, 50000);
  for (int i = 0; i < 2; i++) {
    CUdevice dev;
    ncclUniqueId id;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.commName = i ? (idle ? "idle1" : "gpu1") : "gpu0";
    CU(cuDeviceGet(&dev, i));
    CU(cuDevicePrimaryCtxRetain(&ctx[i], dev));
    CU(cuCtxSetCurrent(ctx[i]));
    CU(cuMemAlloc(&a[i], 1u << 20));
    CU(cuMemAlloc(&b[i], 1u << 20));
    CU(cuStreamCreate(&st[i], CU_STREAM_NON_BLOCKING));
    NC(ncclGetUniqueId(&id));
    NC(ncclCommInitRankConfig(&dev_comm[i], 2, id, 0, &cfg));
  }
  CU(cuCtxSetCurrent(ctx[0]));
  NC(ncclAllReduce((void *)a[0], (void *)b[0], 1000, ncclFloat32, ncclSum, dev_comm[0],
                   (cudaStream_t)st[0]));
  CU(cuStreamSynchronize(st[0]));
  usleep(200000); /* the periodic flush delivers gpu0's kernel */
  fakegpu_set_kernel_duration_ns(K_AR_F32, 1000000000000ull);
  CU(cuCtxSetCurrent(ctx[1]));
  if (idle)
    NC(ncclGroupStart());
  NC(ncclAllReduce((void *)a[1], (void *)b[1], 2000, ncclFloat32, ncclSum, dev_comm[1],
                   (cudaStream_t)st[1]));
  printf("nccl_api_e2e: done\n");
  return 0; /* hang_idle: no ncclGroupEnd */
}

int main(int argc, char **argv)
{
  const char *mode = argc > 1 ? argv[1] : "api";
  CUdevice dev;
  CUcontext ctx;
  CUstream s;
  CUdeviceptr a, b;
  ncclUniqueId id;
  ncclComm_t comm;

  if (!strcmp(mode, "initall"))
    return initall();
  if (!strcmp(mode, "hang_dev") || !strcmp(mode, "hang_idle"))
    return hang_dev(!strcmp(mode, "hang_idle"));
  if (!strcmp(mode, "hang") || !strcmp(mode, "hang_abort"))
    return hang(!strcmp(mode, "hang_abort"));
  CU(cuInit(0));
  CU(cuDeviceGet(&dev, 0));
  CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU(cuCtxSetCurrent(ctx));
  CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  stream = (cudaStream_t)s;
  CU(cuMemAlloc(&a, 4u << 20));
  CU(cuMemAlloc(&b, 4u << 20));
  fakegpu_set_kernel_duration_ns(K_AR_BF16, 100000);
  fakegpu_set_kernel_duration_ns(K_AR_F32, 90001);
  fakegpu_set_kernel_duration_ns(K_SENDRECV, 30000);
  NC(ncclGetUniqueId(&id));
  NC(ncclCommInitRank(&comm, 2, id, 0));
  if (!strcmp(mode, "ondemand")) {
    /* Outside any capture: NCCL events are off. */
    e2e_allreduce(comm, (void *)a, (void *)b);
    CU(cuStreamSynchronize(s));
    capture(0, 1);
    e2e_allreduce(comm, (void *)a, (void *)b);
    e2e_grouped(comm, (void *)a, (void *)b);
    CU(cuStreamSynchronize(s));
    capture(0, 0);
    e2e_sendrecv(comm, (void *)a, (void *)b);
    CU(cuStreamSynchronize(s));
    /* GPU-only: the kernel, but no NCCL events (the join needs the API callbacks). */
    capture(GPUPROF_CAPTURE_GPU_ONLY, 1);
    e2e_allreduce(comm, (void *)a, (void *)b);
    CU(cuStreamSynchronize(s));
    capture(0, 0);
  } else if (!strcmp(mode, "span")) {
    /* A user group that outlives its capture: NCCL brackets the group's launch (its task saw
     * the events on) while the agent no longer sees launches. That op must not join the
     * next capture's AllReduce kernel. */
    capture(0, 1);
    NC(ncclGroupStart());
    NC(ncclAllReduce((void *)a, (void *)b, 100000, ncclFloat32, ncclSum, comm, stream));
    capture(0, 0);
    NC(ncclGroupEnd());
    CU(cuStreamSynchronize(s));
    capture(0, 1);
    e2e_allreduce(comm, (void *)a, (void *)b);
    CU(cuStreamSynchronize(s));
    capture(0, 0);
  } else {
    e2e_allreduce(comm, (void *)a, (void *)b);
    e2e_grouped(comm, (void *)a, (void *)b);
    e2e_sendrecv(comm, (void *)a, (void *)b);
  }
  CU(cuStreamSynchronize(s));
  NC(ncclCommDestroy(comm));
  CU(cuMemFree(a));
  CU(cuMemFree(b));
  CU(cuStreamDestroy(s));
  CU(cuDevicePrimaryCtxRelease(dev));
  printf("nccl_api_e2e: done\n");
  return 0;
}
