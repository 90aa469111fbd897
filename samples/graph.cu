// Sample: a CUDA graph captured from a stream (three kernels) and replayed 20 times.
//
// What a profiler must show (checked by the GPU verification script):
//   capture  cudaStreamBeginCapture / cudaStreamEndCapture on one stream, capturing 3 kernel
//            launches: graph_scale, _Z10graph_biasPfif, _Z11graph_clampPfif (in that order)
//   replay   1 cudaGraphInstantiate, 20 cudaGraphLaunch calls on the same stream
//   kernels  60 kernel executions, 20 of each of the three names, all from graph replays
//            (graph id set, 3 distinct graph node ids); none outside the graph
//   stacks   every replayed kernel attributed to the stack that captured it: a
//            "[cuda graph replay]" frame above capture_graph(), not replay_graph()
//   memcpy   1 HtoD and 1 DtoH of 1048576 bytes (262144 floats)
#include <vector>

#include "sample_common.h"

constexpr int kN = 1 << 18;
constexpr int kReplays = 20;

extern "C" __global__ void graph_scale(float *x, int n)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    x[i] *= 2.0f;
}

__global__ void graph_bias(float *x, int n, float b)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    x[i] -= b;
}

__global__ void graph_clamp(float *x, int n, float hi)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && x[i] > hi)
    x[i] = hi;
}

// Separate, non-inlined functions so that the capture-time stack and the replay stack differ.
__attribute__((noinline)) static cudaGraph_t capture_graph(cudaStream_t s, float *d)
{
  const int block = 256, grid = kN / block;
  cudaGraph_t graph;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  graph_scale<<<grid, block, 0, s>>>(d, kN);
  graph_bias<<<grid, block, 0, s>>>(d, kN, 1.0f);
  graph_clamp<<<grid, block, 0, s>>>(d, kN, 100.0f);
  CHECK_LAUNCH();
  CHECK(cudaStreamEndCapture(s, &graph));
  return graph;
}

__attribute__((noinline)) static void replay_graph(cudaGraphExec_t exec, cudaStream_t s)
{
  for (int r = 0; r < kReplays; r++)
    CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));
}

int main()
{
  std::vector<float> h(kN);
  for (int i = 0; i < kN; i++)
    h[i] = 1.0f + (i % 4);
  float *d = nullptr;
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CHECK(cudaMalloc(&d, kN * sizeof(float)));
  CHECK(cudaMemcpy(d, h.data(), kN * sizeof(float), cudaMemcpyHostToDevice));

  cudaGraph_t graph = capture_graph(s, d);
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  replay_graph(exec, s);

  std::vector<float> out(kN);
  CHECK(cudaMemcpy(out.data(), d, kN * sizeof(float), cudaMemcpyDeviceToHost));
  bool untouched = true;
  long bad = 0;
  for (int i = 0; i < kN; i++) {
    float x = h[i];
    for (int r = 0; r < kReplays; r++)
      x = x * 2.0f - 1.0f > 100.0f ? 100.0f : x * 2.0f - 1.0f;
    untouched &= out[i] == h[i];
    bad += out[i] != x;
  }
  sample_judge("graph", untouched, bad);

  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaFree(d));
  CHECK(cudaStreamDestroy(s));
  return 0;
}
