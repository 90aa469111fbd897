// Sample: NVTX ranges around CUDA work, as PyTorch, Megatron and NCCL write them.
//
// What a profiler must show (checked by the GPU verification script, with
// NVTX_INJECTION64_PATH set to the agent as `gpuprof run` sets it):
//   NVTX     10 "step" push/pop ranges (default domain: category nvtx) on the main thread, each
//            holding one "forward" range of domain "sample" (a registered string pushed with
//            nvtxDomainRangePushEx, as NCCL names its calls) with 20 kernel launches in it,
//            and one "step done" mark; one "io" start/end range, started on the main thread
//            and ended on another
//   kernels  _Z11nvtx_kernelPfif 200 launches on one stream
//   memcpy   1 HtoD and 1 DtoH of 262144 bytes (65536 floats)
#include <thread>
#include <vector>

#include <nvtx3/nvToolsExt.h>

#include "sample_common.h"

constexpr int kN = 1 << 16;
constexpr int kSteps = 10;
constexpr int kLaunchesPerStep = 20;

__global__ void nvtx_kernel(float *x, int n, float v)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    x[i] += v;
}

int main()
{
  nvtxDomainHandle_t domain = nvtxDomainCreateA("sample");
  nvtxStringHandle_t forward = nvtxDomainRegisterStringA(domain, "forward");
  nvtxEventAttributes_t attr = {};
  attr.version = NVTX_VERSION;
  attr.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  attr.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
  attr.message.registered = forward;

  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  std::vector<float> h(kN, 0.0f);
  float *d = nullptr;
  CHECK(cudaMalloc(&d, kN * sizeof(float)));

  nvtxRangeId_t io = nvtxRangeStartA("io");
  CHECK(cudaMemcpyAsync(d, h.data(), kN * sizeof(float), cudaMemcpyHostToDevice, s));
  CHECK(cudaStreamSynchronize(s));
  // Start/end ranges may end on another thread (a loader thread finishing the input, say).
  std::thread([io] { nvtxRangeEnd(io); }).join();

  const int block = 256, grid = kN / block;
  for (int step = 0; step < kSteps; step++) {
    nvtxRangePushA("step");
    nvtxDomainRangePushEx(domain, &attr);
    for (int i = 0; i < kLaunchesPerStep; i++) {
      nvtx_kernel<<<grid, block, 0, s>>>(d, kN, 1.0f);
      CHECK_LAUNCH();
    }
    nvtxDomainRangePop(domain);
    CHECK(cudaStreamSynchronize(s));
    nvtxMarkA("step done");
    nvtxRangePop();
  }

  CHECK(cudaMemcpyAsync(h.data(), d, kN * sizeof(float), cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaFree(d));
  CHECK(cudaStreamDestroy(s));

  bool untouched = true;
  long bad = 0;
  const float want = (float)(kSteps * kLaunchesPerStep);
  for (float v : h) {
    untouched = untouched && v == 0.0f;
    bad += v != want;
  }
  sample_judge("nvtx", untouched, bad);
  return 0;
}
