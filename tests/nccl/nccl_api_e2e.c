/* A program that uses NCCL's API as PyTorch does: one comm, an AllReduce, a grouped pair, a
 * send/recv pair; run against the NCCL double with NCCL_PROFILER_PLUGIN naming the agent. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <nccl.h>

#include "tests/fakegpu/fakegpu.h"
#include "tests/lib/e2e.h"

#define NC(call)                                                                                   \
  do {                                                                                             \
    ncclResult_t r_ = (call);                                                                      \
    if (r_ != ncclSuccess) {                                                                       \
      fprintf(stderr, "%s: %s\n", #call, ncclGetErrorString(r_));                                  \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

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

int main(void)
{
  CUdevice dev;
  CUcontext ctx;
  CUstream s;
  CUdeviceptr a, b;
  ncclUniqueId id;
  ncclComm_t comm;

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
  e2e_allreduce(comm, (void *)a, (void *)b);
  e2e_grouped(comm, (void *)a, (void *)b);
  e2e_sendrecv(comm, (void *)a, (void *)b);
  CU(cuStreamSynchronize(s));
  NC(ncclCommDestroy(comm));
  CU(cuMemFree(a));
  CU(cuMemFree(b));
  CU(cuStreamDestroy(s));
  CU(cuDevicePrimaryCtxRelease(dev));
  printf("nccl_api_e2e: done\n");
  return 0;
}
