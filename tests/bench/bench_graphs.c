/* Benchmark: what CUDA-graph attribution costs: per node at capture, per replayed record on
 * the worker (run with and without the agent; tests/bench/run.sh). Not a test. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "agent/graph_map.h"
#include "tests/stacks/stk.h"

/*
 * Usage: bench_graphs [graphs] [nodes] [depth]
 * Part 1, the application thread: captures `graphs` graphs of `nodes` kernel launches each
 * from a call chain `depth` frames deep (a model's forward under a serving loop), and
 * instantiates each; prints the thread's CPU time per captured node. Under the agent every
 * node's creation takes a stack (unsampled) and a map entry, and each clone a map entry;
 * without the agent it is the simulator's own cost, to subtract.
 * Part 2, the worker's side in isolation: graph_map_get on a map of graphs * nodes originals
 * and as many clones, in the order replays deliver records; prints ns per lookup.
 */

static CUfunction kern;

static uint64_t thread_cpu_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

STK_FRAME static void launch_nodes(CUstream s, int nodes, int depth)
{
  if (depth > 0) {
    launch_nodes(s, nodes, depth - 1);
    return;
  }
  for (int i = 0; i < nodes; i++)
    STK_CU(cuLaunchKernel(kern, 1, 1, 1, 32, 1, 1, 0, s, NULL, NULL));
}

static double bench_capture(int graphs, int nodes, int depth)
{
  CUstream s;
  uint64_t t0;

  STK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  t0 = thread_cpu_ns();
  for (int g = 0; g < graphs; g++) {
    CUgraph graph;
    CUgraphExec exec;
    STK_CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    launch_nodes(s, nodes, depth);
    STK_CU(cuStreamEndCapture(s, &graph));
    STK_CU(cuGraphInstantiate(&exec, graph, 0));
    STK_CU(cuGraphExecDestroy(exec));
    STK_CU(cuGraphDestroy(graph));
  }
  return (double)(thread_cpu_ns() - t0) / ((double)graphs * nodes);
}

static double bench_lookup(int graphs, int nodes)
{
  uint64_t n = (uint64_t)graphs * nodes, t0, sum = 0;
  struct graph_map *m = graph_map_new(4 * n);
  const int rounds = 10;
  double ns;

  for (uint64_t id = 1; id <= n; id++)
    graph_map_set(m, id, (uint32_t)(id % 5000) + 1);
  for (uint64_t id = 1; id <= n; id++)
    graph_map_clone(m, id, n + id);
  t0 = thread_cpu_ns();
  for (int r = 0; r < rounds; r++)
    for (uint64_t id = 1; id <= n; id++)
      sum += graph_map_get(m, n + id);
  ns = (double)(thread_cpu_ns() - t0) / ((double)rounds * n);
  graph_map_free(m);
  if (!sum)
    fprintf(stderr, "bench_graphs: lookups found nothing\n");
  return ns;
}

int main(int argc, char **argv)
{
  int graphs = argc > 1 ? atoi(argv[1]) : 100;
  int nodes = argc > 2 ? atoi(argv[2]) : 500;
  int depth = argc > 3 ? atoi(argv[3]) : 30;

  if (graphs < 1 || nodes < 1 || depth < 0) {
    fprintf(stderr, "usage: bench_graphs [graphs] [nodes] [depth]\n");
    return 2;
  }
  stk_context();
  kern = stk_kernel("bench_graph_kernel");
  printf("capture: %d graphs x %d nodes, %d frames deep: %.0f ns CPU per node (capture + "
         "instantiate, application thread)\n",
         graphs, nodes, depth, bench_capture(graphs, nodes, depth));
  printf("lookup: %d x %d originals + clones in the map: %.1f ns per replayed record\n", graphs,
         nodes, bench_lookup(graphs, nodes));
  return 0;
}
