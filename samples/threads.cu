// Sample: four host threads, each launching on its own stream.
//
// What a profiler must show (checked by the GPU verification script):
//   threads  4 host threads other than main make every CUDA call below (thread_main)
//   streams  4 non-default streams, one per thread (cudaStreamCreateWithFlags, non-blocking)
//   kernels  _Z11thread_workPfif 100 launches: 25 per thread, each thread's launches on its own
//            stream and from its own host thread id
//   memcpy   4 HtoD and 4 DtoH of 524288 bytes (131072 floats), one pair per thread
//   cudaMalloc / cudaFree 4 each of 524288 bytes
#include <thread>
#include <vector>

#include "sample_common.h"

constexpr int kThreads = 4;
constexpr int kLaunches = 25;
constexpr int kN = 1 << 17;

__global__ void thread_work(float *x, int n, float v)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    x[i] += v;
}

struct result {
  bool untouched = true;
  long bad = 0;
};

static void thread_main(int t, result *res)
{
  // The runtime's current device is per thread: set it like real multi-threaded code does.
  CHECK(cudaSetDevice(0));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::vector<float> h(kN, (float)t);
  float *d = nullptr;
  CHECK(cudaMalloc(&d, kN * sizeof(float)));
  CHECK(cudaMemcpyAsync(d, h.data(), kN * sizeof(float), cudaMemcpyHostToDevice, s));
  for (int i = 0; i < kLaunches; i++)
    thread_work<<<kN / 256, 256, 0, s>>>(d, kN, 1.0f);
  CHECK_LAUNCH();
  CHECK(cudaMemcpyAsync(h.data(), d, kN * sizeof(float), cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  for (int i = 0; i < kN; i++) {
    res->untouched &= h[i] == (float)t;
    res->bad += h[i] != (float)(t + kLaunches);
  }
  CHECK(cudaFree(d));
  CHECK(cudaStreamDestroy(s));
}

int main()
{
  std::vector<std::thread> threads;
  result res[kThreads];
  for (int t = 0; t < kThreads; t++)
    threads.emplace_back(thread_main, t, &res[t]);
  for (auto &th : threads)
    th.join();
  bool untouched = true;
  long bad = 0;
  for (const result &r : res) {
    untouched &= r.untouched;
    bad += r.bad;
  }
  sample_judge("threads", untouched, bad);
  return 0;
}
