/* Workloads with known answers for gpuprof analyze, on the simulated GPU (check_analyze.py).
 *
 *   analyze_prog gpu         two GPUs: on GPU 0, 200 short kernels (2 µs), 4 long ones (2 ms),
 *                            a fifth long one beside an 8 MiB copy from pinned memory on
 *                            another stream, 3 copies HtoD and 2 DtoH of 8 MiB from pageable
 *                            memory, 48 MiB allocated at the peak;
 *                            then GPU 0 idles twice: 40 ms while the host makes no CUDA call,
 *                            80 ms while it waits in cuStreamSynchronize for a kernel on GPU 1
 *   analyze_prog rank R MODE rank R of a 2-rank communicator whose unique id is fixed, so that
 *                            two processes join the same one (the same commHash): 3 AllReduces
 *                            that finish, then MODE "stop" (rank 1 leaves: never posts the 4th),
 *                            "hang" (posts the 4th AllReduce, whose kernel never finishes) or
 *                            "other" (posts an AllGather instead, which never finishes), "send"
 *                            or "recv" (a Send to / Recv from the other rank that never finishes)
 *   analyze_prog steps       30 NVTX "step" ranges, each holding a "forward" range around a
 *                            kernel; step 17 takes 40 ms more than the others (a spike)
 *   analyze_prog rank R pace T0
 *                            the same communicator: 12 AllReduces, the i-th at T0 + i * 50 ms
 *                            (CLOCK_REALTIME ns), rank 1's 20 ms late (a straggler); the two
 *                            ranks run at once
 *
 * The programs exit without ending their capture (GPUPROF_CAPTURE_ON_START), as a hung job is
 * stopped: the agent's exit path finishes it, with the pending collective.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <nccl.h>
#include <nvtx3/nvToolsExt.h>

#include "tests/fakegpu/fakegpu.h"
#include "tests/lib/e2e.h"
#include "tests/lib/e2e_nccl.h"

#define MIB (1u << 20)
#define K_SHORT "_Z7short_kv"
#define K_LONG "_Z6long_kv"
#define K_WAIT "_Z6wait_kv"
#define K_AR_F32 "_Z39ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernelArgsStorageILm4096EE"

static int gpu(void)
{
  static const char *const names[] = {K_SHORT, K_LONG, K_WAIT};
  CUdevice dev0, dev1;
  CUcontext ctx0, ctx1;
  CUfunction fn[3], wait1;
  CUmodule mod1;
  CUstream s0, s1, s2;
  void *pinned;
  CUdeviceptr a, b, c;
  uint8_t *host = malloc(8 * MIB);

  if (!host)
    e2e_fail("out of memory");
  memset(host, 1, 8 * MIB);
  e2e_context_with_kernels(&dev0, &ctx0, names, 3, fn);
  fakegpu_set_kernel_duration_ns(K_SHORT, 2000);
  fakegpu_set_kernel_duration_ns(K_LONG, 2000000);
  fakegpu_set_kernel_duration_ns(K_WAIT, 80000000);
  CU(cuStreamCreate(&s0, CU_STREAM_NON_BLOCKING));
  CU(cuMemAlloc(&a, 16 * MIB));
  CU(cuMemAlloc(&b, 16 * MIB));
  CU(cuMemAlloc(&c, 16 * MIB));
  CU(cuMemFree(c));
  for (int i = 0; i < 200; i++)
    e2e_launch(fn[0], s0);
  CU(cuStreamSynchronize(s0));
  for (int i = 0; i < 4; i++)
    e2e_launch(fn[1], s0);
  CU(cuStreamSynchronize(s0));
  /* One copy that hides behind a kernel: from pinned memory, on a stream of its own. */
  CU(cuMemAllocHost(&pinned, 8 * MIB));
  CU(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  e2e_launch(fn[1], s0);
  CU(cuMemcpyHtoDAsync(a, pinned, 8 * MIB, s2));
  CU(cuStreamSynchronize(s2));
  CU(cuStreamSynchronize(s0));
  CU(cuMemFreeHost(pinned));
  for (int i = 0; i < 3; i++)
    CU(cuMemcpyHtoD(a, host, 8 * MIB));
  for (int i = 0; i < 2; i++)
    CU(cuMemcpyDtoH(host, b, 8 * MIB));

  /* The host busy with something else: no CUDA call for 40 ms. */
  usleep(40000);
  e2e_launch(fn[0], s0);
  CU(cuStreamSynchronize(s0));

  /* The host waits for GPU 1: GPU 0 idles under cuStreamSynchronize. */
  CU(cuDeviceGet(&dev1, 1));
  CU(cuDevicePrimaryCtxRetain(&ctx1, dev1));
  CU(cuCtxSetCurrent(ctx1));
  mod1 = e2e_module_with_kernels(&names[2], 1);
  CU(cuModuleGetFunction(&wait1, mod1, K_WAIT));
  CU(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
  e2e_launch(wait1, s1);
  CU(cuStreamSynchronize(s1));
  CU(cuCtxSetCurrent(ctx0));
  e2e_launch(fn[0], s0);
  CU(cuStreamSynchronize(s0));
  CU(cuMemFree(a));
  CU(cuMemFree(b));
  free(host);
  printf("analyze_prog: gpu done\n");
  return 0;
}

static int steps(void)
{
  static const char *const names[] = {K_SHORT};
  CUdevice dev;
  CUcontext ctx;
  CUfunction fn;
  CUstream s;

  e2e_context_with_kernels(&dev, &ctx, names, 1, &fn);
  CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  for (int i = 0; i < 30; i++) {
    nvtxRangePushA("step");
    nvtxRangePushA("forward");
    e2e_launch(fn, s);
    CU(cuStreamSynchronize(s));
    nvtxRangePop();
    usleep(i == 17 ? 42000 : 2000);
    nvtxRangePop();
  }
  printf("analyze_prog: steps done\n");
  return 0;
}

static ncclComm_t comm; /* never destroyed when hung (a hung job): reachable, not leaked */

/* Sleeps until CLOCK_REALTIME ns (the clock CUPTI's timestamps use). */
static void sleep_until(uint64_t ns)
{
  struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000u), .tv_nsec = (long)(ns % 1000000000u)};

  while (clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &ts, NULL)) {
  }
}

static int rank(int r, const char *mode, uint64_t t0)
{
  ncclUniqueId id;
  CUdevice dev;
  CUcontext ctx;
  CUstream st;
  CUdeviceptr a, b;

  /* Both processes take the same id, as ranks given one by their launcher. */
  memset(&id, 0x5a, sizeof(id));
  CU(cuInit(0));
  CU(cuDeviceGet(&dev, 0));
  CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU(cuCtxSetCurrent(ctx));
  CU(cuMemAlloc(&a, 4 * MIB));
  CU(cuMemAlloc(&b, 4 * MIB));
  CU(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
  fakegpu_set_kernel_duration_ns(K_AR_F32, 50000);
  NC(ncclCommInitRank(&comm, 2, id, r));
  for (int i = 0; i < (t0 ? 12 : 3); i++) {
    if (t0)
      sleep_until(t0 + (uint64_t)i * 50000000u + (r == 1 ? 20000000u : 0));
    NC(ncclAllReduce((void *)a, (void *)b, 65536, ncclFloat32, ncclSum, comm, (cudaStream_t)st));
  }
  CU(cuStreamSynchronize(st));
  if (!strcmp(mode, "hang")) {
    fakegpu_set_kernel_duration_ns(K_AR_F32, 1000000000000ull);
    NC(ncclAllReduce((void *)a, (void *)b, 65536, ncclFloat32, ncclSum, comm, (cudaStream_t)st));
  } else if (!strcmp(mode, "send") || !strcmp(mode, "recv")) {
    /* A point-to-point transfer with the other rank whose kernel never finishes. */
    fakegpu_set_kernel_duration_ns(NULL, 1000000000000ull);
    if (!strcmp(mode, "send"))
      NC(ncclSend((void *)a, 16384, ncclFloat32, 1 - r, comm, (cudaStream_t)st));
    else
      NC(ncclRecv((void *)b, 16384, ncclFloat32, 1 - r, comm, (cudaStream_t)st));
  } else if (!strcmp(mode, "other")) {
    /* Another collective where the other rank calls AllReduce: its kernel (no duration of its
     * own: the default) never finishes. */
    fakegpu_set_kernel_duration_ns(NULL, 1000000000000ull);
    NC(ncclAllGather((void *)a, (void *)b, 16384, ncclFloat32, comm, (cudaStream_t)st));
  }
  printf("analyze_prog: rank %d %s\n", r, mode);
  return 0; /* no synchronization: the exit path finishes the capture */
}

int main(int argc, char **argv)
{
  if (argc == 2 && !strcmp(argv[1], "gpu"))
    return gpu();
  if (argc == 2 && !strcmp(argv[1], "steps"))
    return steps();
  if (argc == 4 && !strcmp(argv[1], "rank") &&
      (!strcmp(argv[3], "stop") || !strcmp(argv[3], "hang") || !strcmp(argv[3], "other") ||
       !strcmp(argv[3], "send") || !strcmp(argv[3], "recv")))
    return rank(atoi(argv[2]), argv[3], 0);
  if (argc == 5 && !strcmp(argv[1], "rank") && !strcmp(argv[3], "pace"))
    return rank(atoi(argv[2]), argv[3], strtoull(argv[4], NULL, 10));
  fprintf(stderr,
          "usage: analyze_prog gpu | steps | rank R stop|hang|other|send|recv | rank R pace T0\n");
  return 2;
}
