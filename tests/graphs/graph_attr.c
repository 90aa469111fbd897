/* CUDA graph work for the graph attribution tests: nodes captured and added from named sites. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "tests/stacks/stk.h"

/* Durations the checker expects (ns); the simulator runs each launch for exactly this. */
#define NS_A 5000
#define NS_B 7000
#define NS_C 3000
#define NS_D 2000
#define REPLAYS_CAPTURED 5
#define REPLAYS_EXPLICIT 3

static CUfunction k_a, k_b, k_c, k_d;
static CUdeviceptr buf;

/* Two kernel nodes from this site... */
STK_FRAME static void gr_capture_a(CUstream s)
{
  for (int i = 0; i < 2; i++)
    STK_CU(cuLaunchKernel(k_a, 1, 1, 1, 32, 1, 1, 0, s, NULL, NULL));
}

/* ...a kernel node and a memset node (64 x 4 bytes) from this one. */
STK_FRAME static void gr_capture_b(CUstream s)
{
  STK_CU(cuLaunchKernel(k_b, 1, 1, 1, 32, 1, 1, 0, s, NULL, NULL));
  STK_CU(cuMemsetD32Async(buf, 7, 64, s));
}

STK_FRAME static CUgraphExec gr_capture(CUstream s)
{
  CUgraph g;
  CUgraphExec e;

  STK_CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  gr_capture_a(s);
  gr_capture_b(s);
  STK_CU(cuStreamEndCapture(s, &g));
  STK_CU(cuGraphInstantiate(&e, g, 0));
  return e;
}

/* A node added explicitly: no launch is involved, the node's stack is this call's. */
STK_FRAME static void gr_add_node(CUgraph g)
{
  CUDA_KERNEL_NODE_PARAMS p;
  CUgraphNode n;

  memset(&p, 0, sizeof(p));
  p.func = k_c;
  p.gridDimX = p.gridDimY = p.gridDimZ = 1;
  p.blockDimX = 32;
  p.blockDimY = p.blockDimZ = 1;
  STK_CU(cuGraphAddKernelNode(&n, g, NULL, 0, &p));
}

STK_FRAME static CUgraphExec gr_build_explicit(void)
{
  CUgraph g;
  CUgraphExec e;

  STK_CU(cuGraphCreate(&g, 0));
  gr_add_node(g);
  STK_CU(cuGraphInstantiate(&e, g, 0));
  return e;
}

STK_FRAME static void gr_replay(CUgraphExec e, CUstream s, int n)
{
  for (int i = 0; i < n; i++)
    STK_CU(cuGraphLaunch(e, s));
}

/* Outside any graph: attributed to its launch as always. */
STK_FRAME static void gr_plain(CUstream s)
{
  STK_CU(cuLaunchKernel(k_d, 1, 1, 1, 32, 1, 1, 0, s, NULL, NULL));
}

int main(void)
{
  CUstream s;
  CUgraphExec captured, explicit_graph;

  stk_context();
  k_a = stk_kernel("gr_kernel_a");
  k_b = stk_kernel("gr_kernel_b");
  k_c = stk_kernel("gr_kernel_c");
  k_d = stk_kernel("gr_kernel_d");
  fakegpu_set_kernel_duration_ns("gr_kernel_a", NS_A);
  fakegpu_set_kernel_duration_ns("gr_kernel_b", NS_B);
  fakegpu_set_kernel_duration_ns("gr_kernel_c", NS_C);
  fakegpu_set_kernel_duration_ns("gr_kernel_d", NS_D);
  STK_CU(cuMemAlloc(&buf, 4096));
  STK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));

  captured = gr_capture(s);
  explicit_graph = gr_build_explicit();
  gr_replay(captured, s, REPLAYS_CAPTURED);
  gr_replay(explicit_graph, s, REPLAYS_EXPLICIT);
  gr_plain(s);
  STK_CU(cuStreamSynchronize(s));
  STK_CU(cuGraphExecDestroy(captured));
  STK_CU(cuGraphExecDestroy(explicit_graph));
  STK_CU(cuMemFree(buf));
  printf("graph_attr: done\n");
  return 0;
}
