// Sample: a two-rank NCCL all-reduce, one rank per GPU, both driven from this one process.
//
// Needs two GPUs: with fewer it prints "nccl_allreduce: skipped: ..." and exits 0. Ranks are
// made with ncclCommInitAll on devices 0 and 1; every iteration reduces kCount floats on each
// rank's own stream inside one ncclGroupStart/ncclGroupEnd (the way a single process drives
// several GPUs).
//
// What a profiler must show (checked by the GPU verification script):
//   kernels  on each of devices 0 and 1: kIters (20) kernels whose name contains
//            "AllReduce" (NCCL's ncclDevKernel_AllReduce_Sum_f32_* family), launched by NCCL
//            through the driver API (cuLaunchKernelEx)
//   memory   2 cudaMalloc of 4194304 bytes per device (send and receive buffers), freed
//   memcpy   1 HtoD per device of 4194304 bytes, 1 DtoH per device of 4194304 bytes
//   nccl     with NCCL_PROFILER_PLUGIN set to the agent: 2 communicators, 40 AllReduce ops of
//            4194304 bytes, each joined to its kernel (summary, nccl profile, one trace track
//            per communicator with 20 slices inside their kernels)
//   result   every element equals the sum over ranks (1 + 2 = 3): "results verified"
#include <vector>

#include <nccl.h>

#include "sample_common.h"

#define NCCL_CHECK(call)                                                                           \
  do {                                                                                             \
    ncclResult_t r_ = (call);                                                                      \
    if (r_ != ncclSuccess) {                                                                       \
      fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,                         \
              ncclGetErrorString(r_));                                                             \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

constexpr int kRanks = 2;
constexpr size_t kCount = 1 << 20;
constexpr int kIters = 20;

int main()
{
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < kRanks) {
    printf("nccl_allreduce: skipped: needs %d GPUs, found %d\n", kRanks, devices);
    return 0;
  }
  int version = 0;
  NCCL_CHECK(ncclGetVersion(&version));
  printf("nccl_allreduce: NCCL %d, %d ranks on devices 0..%d\n", version, kRanks, kRanks - 1);

  int devs[kRanks];
  ncclComm_t comms[kRanks];
  cudaStream_t streams[kRanks];
  float *send[kRanks], *recv[kRanks];
  for (int r = 0; r < kRanks; r++) {
    devs[r] = r;
    CHECK(cudaSetDevice(r));
    CHECK(cudaStreamCreate(&streams[r]));
    CHECK(cudaMalloc(&send[r], kCount * sizeof(float)));
    CHECK(cudaMalloc(&recv[r], kCount * sizeof(float)));
    std::vector<float> h(kCount, (float)(r + 1));
    CHECK(cudaMemcpy(send[r], h.data(), kCount * sizeof(float), cudaMemcpyHostToDevice));
  }
  NCCL_CHECK(ncclCommInitAll(comms, kRanks, devs));

  for (int i = 0; i < kIters; i++) {
    NCCL_CHECK(ncclGroupStart());
    for (int r = 0; r < kRanks; r++)
      NCCL_CHECK(ncclAllReduce(send[r], recv[r], kCount, ncclFloat, ncclSum, comms[r], streams[r]));
    NCCL_CHECK(ncclGroupEnd());
  }
  long bad = 0;
  for (int r = 0; r < kRanks; r++) {
    CHECK(cudaSetDevice(r));
    CHECK(cudaStreamSynchronize(streams[r]));
    std::vector<float> h(kCount);
    CHECK(cudaMemcpy(h.data(), recv[r], kCount * sizeof(float), cudaMemcpyDeviceToHost));
    for (size_t k = 0; k < kCount; k++)
      bad += h[k] != 3.0f;
  }
  // NCCL runs real device code: there is no simulated case to excuse.
  sample_judge("nccl_allreduce", false, bad);

  for (int r = 0; r < kRanks; r++) {
    NCCL_CHECK(ncclCommDestroy(comms[r]));
    CHECK(cudaSetDevice(r));
    CHECK(cudaFree(send[r]));
    CHECK(cudaFree(recv[r]));
    CHECK(cudaStreamDestroy(streams[r]));
  }
  return 0;
}
