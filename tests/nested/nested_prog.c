/* A runtime-API workload with known stacks, sizes and launches for the nesting-mode tests. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

#include <cuda_runtime_api.h>

#include "tests/nested/handreg.h"

#define MIB (1024 * 1024)
#define NOINLINE __attribute__((noinline))

static int failed;

#define RT(call)                                                                                   \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) {                                                                       \
      fprintf(stderr, "nested_prog: %s -> %d\n", #call, (int)e_);                                  \
      failed = 1;                                                                                  \
    }                                                                                              \
  } while (0)

static unsigned char host[65536];
static float *big, *small;
static cudaStream_t s;

/* 1 MiB (still in use at exit) and 64 KiB (freed in release). */
NOINLINE static void alloc_buffers(void)
{
  RT(cudaMalloc((void **)&big, MIB));
  RT(cudaMalloc((void **)&small, 65536));
}

NOINLINE static void copy_in(void)
{
  RT(cudaMemcpy(big, host, 65536, cudaMemcpyHostToDevice));
}

NOINLINE static void clear(void)
{
  RT(cudaMemset(small, 0, 4096));
  RT(cudaMemsetAsync(small, 1, 8192, s));
}

/* scale 3x as nvcc 13 launches (__cudaLaunchKernel), reduce 2x through cudaLaunchKernel. */
NOINLINE static void run_kernels(void)
{
  void *args[] = {&big};
  dim3 g = {4, 1, 1}, b = {256, 1, 1};

  for (int i = 0; i < 3; i++)
    RT(handreg_launch(handreg_scale, 4, 256, s, big));
  for (int i = 0; i < 2; i++)
    RT(cudaLaunchKernel((const void *)(uintptr_t)handreg_reduce, g, b, args, 0, s));
}

/* step captured once into a graph, the graph launched twice. */
NOINLINE static void run_graph(void)
{
  cudaGraph_t graph;
  cudaGraphExec_t exec;

  RT(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  RT(handreg_launch(handreg_step, 1, 32, s, big));
  RT(cudaStreamEndCapture(s, &graph));
  RT(cudaGraphInstantiate(&exec, graph, 0));
  RT(cudaGraphLaunch(exec, s));
  RT(cudaGraphLaunch(exec, s));
  RT(cudaStreamSynchronize(s));
  RT(cudaGraphExecDestroy(exec));
  RT(cudaGraphDestroy(graph));
}

NOINLINE static void copy_out(void)
{
  RT(cudaMemcpy(host, big, 65536, cudaMemcpyDeviceToHost));
}

NOINLINE static void release(void)
{
  RT(cudaFree(small));
}

int main(void)
{
  prctl(PR_SET_NAME, "main");
  handreg_register();
  RT(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  alloc_buffers();
  copy_in();
  clear();
  run_kernels();
  run_graph();
  copy_out();
  release();
  RT(cudaDeviceSynchronize());
  RT(cudaStreamDestroy(s));
  printf("nested_prog: %s\n", failed ? "FAILED" : "done");
  return failed;
}
