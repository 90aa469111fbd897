/* e2e graph: three kernels captured from a stream into a graph and replayed, plus one ordinary
 * launch, so the checks can tell graph-launched kernels from directly launched ones. */
#include "tests/fakegpu/fakegpu.h"
#include "tests/lib/e2e.h"

#define REPLAYS 12

static const char *const names[] = {"_Z8producerPf", "_Z9transformPf", "_Z8consumerPf"};

int main(void)
{
  CUdevice dev;
  CUcontext ctx;
  CUstream s;
  CUmodule mod;
  CUfunction f[3];
  CUgraph graph;
  CUgraphExec exec;
  size_t nodes = 0;

  CU(cuInit(0));
  CU(cuDeviceGet(&dev, 0));
  CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU(cuCtxSetCurrent(ctx));
  CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  mod = e2e_module_with_kernels(names, 3);
  for (int i = 0; i < 3; i++)
    CU(cuModuleGetFunction(&f[i], mod, names[i]));
  fakegpu_set_kernel_duration_ns(names[0], 3000);
  fakegpu_set_kernel_duration_ns(names[1], 7000);
  fakegpu_set_kernel_duration_ns(names[2], 11000);

  /* Launches during capture become graph nodes: they run (and produce records) only when the
   * graph is launched. */
  CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  for (int i = 0; i < 3; i++)
    e2e_launch(f[i], s);
  CU(cuStreamEndCapture(s, &graph));
  CU(cuGraphGetNodes(graph, NULL, &nodes));
  CU(cuGraphInstantiate(&exec, graph, 0));

  for (int r = 0; r < REPLAYS; r++)
    CU(cuGraphLaunch(exec, s));
  e2e_launch(f[0], s);
  CU(cuStreamSynchronize(s));

  CU(cuGraphExecDestroy(exec));
  CU(cuGraphDestroy(graph));
  CU(cuStreamDestroy(s));
  printf("graph: %zu nodes, %d replays, 1 direct launch\n", nodes, REPLAYS);
  return 0;
}
