/* CUDA graphs: stream capture, explicit construction, instantiation and replay. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fakegpu/driver.h"

/*
 * A graph is a list of nodes executed in creation order (the dependencies that capture and
 * the Add*Node calls pass are accepted but replay is sequential on the launch stream, which
 * is one valid schedule). Instantiation clones every node as the real driver does (cupti.md
 * 1.2 item 6): inside the instantiate call each clone gets a new node id, GRAPHNODE_CREATED
 * (for the clone) and then GRAPHNODE_CLONED (node = clone, originalNode = the graph's node)
 * are delivered, and replayed records carry the clone's graphNodeId, so a tool must re-key
 * what it learnt at the original's creation. Records keep the id of the instantiated graph
 * as graphId. Graph objects are kept after destruction (marked dead) so stale handles stay
 * harmless.
 */

#define GRAPH_MAGIC 0x47525048u
#define NODE_MAGIC 0x4e4f4445u
#define EXEC_MAGIC 0x45584543u

struct fg_node {
  uint32_t magic;
  uint64_t id;
  struct fg_graph *graph;
  CUgraphNodeType type;
  struct fg_op op;
};

struct fg_graph {
  uint32_t magic;
  uint32_t id;
  struct fg_ctx *ctx;
  struct fg_node **nodes;
  size_t n, cap;
  struct fg_graph *next;      /* every graph ever made (see top) */
};

struct fg_exec {
  uint32_t magic;
  uint32_t id;
  struct fg_graph *graph;
  struct fg_node **nodes;
  size_t n;
  struct fg_exec *next;
};

static atomic_uint g_graph_id, g_exec_id;
static struct fg_graph *g_graphs;
static struct fg_exec *g_execs;
static atomic_ullong g_node_id, g_capture_id;

static struct fg_graph *graph_get(CUgraph h)
{
  struct fg_graph *g = (struct fg_graph *)h;
  return g && g->magic == GRAPH_MAGIC ? g : NULL;
}

static struct fg_exec *exec_get(CUgraphExec h)
{
  struct fg_exec *e = (struct fg_exec *)h;
  return e && e->magic == EXEC_MAGIC ? e : NULL;
}

int fg_query_graph_node_id(CUgraphNode node, uint64_t *id)
{
  struct fg_node *n = (struct fg_node *)node;
  if (!n || n->magic != NODE_MAGIC)
    return -1;
  *id = n->id;
  return 0;
}

int fg_query_graph_id(CUgraph graph, uint32_t *id)
{
  struct fg_graph *g = graph_get(graph);
  if (!g)
    return -1;
  *id = g->id;
  return 0;
}

int fg_query_graph_exec_id(CUgraphExec exec, uint32_t *id)
{
  struct fg_exec *e = exec_get(exec);
  if (!e)
    return -1;
  *id = e->id;
  return 0;
}

static struct fg_graph *graph_new(struct fg_ctx *ctx)
{
  struct fg_graph *g = calloc(1, sizeof(*g));
  if (!g)
    return NULL;
  g->magic = GRAPH_MAGIC;
  g->id = atomic_fetch_add(&g_graph_id, 1) + 1;
  g->ctx = ctx;
  pthread_mutex_lock(&fg_lock);
  g->next = g_graphs;
  g_graphs = g;
  pthread_mutex_unlock(&fg_lock);
  fg_graph_callback(CUPTI_CBID_RESOURCE_GRAPH_CREATED, ctx, (CUgraph)g, NULL, 0, NULL);
  return g;
}

static CUgraphNodeType node_type(enum fg_op_type t)
{
  switch (t) {
  case FG_OP_KERNEL: return CU_GRAPH_NODE_TYPE_KERNEL;
  case FG_OP_MEMCPY: return CU_GRAPH_NODE_TYPE_MEMCPY;
  case FG_OP_MEMSET: return CU_GRAPH_NODE_TYPE_MEMSET;
  default: return CU_GRAPH_NODE_TYPE_HOST;
  }
}

/* Appends a node; GRAPHNODE_CREATED fires here, inside the creating API's ENTER/EXIT. */
static struct fg_node *node_add(struct fg_graph *g, const struct fg_op *op)
{
  struct fg_node *n = calloc(1, sizeof(*n));
  if (!n)
    return NULL;
  pthread_mutex_lock(&fg_lock);
  if (g->n == g->cap) {
    size_t cap = g->cap ? g->cap * 2 : 8;
    struct fg_node **v = realloc(g->nodes, cap * sizeof(*v));
    if (!v) {
      pthread_mutex_unlock(&fg_lock);
      free(n);
      return NULL;
    }
    g->nodes = v;
    g->cap = cap;
  }
  n->magic = NODE_MAGIC;
  n->id = atomic_fetch_add(&g_node_id, 1) + 1;
  n->graph = g;
  n->type = node_type(op->type);
  n->op = *op;
  g->nodes[g->n++] = n;
  pthread_mutex_unlock(&fg_lock);
  fg_graph_callback(CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED, g->ctx, (CUgraph)g, (CUgraphNode)n,
                    n->type, NULL);
  return n;
}

int fg_capture_op(struct fg_stream *s, const struct fg_op *op, CUresult *result)
{
  if (!s->capture)
    return 0;
  *result = node_add(s->capture, op) ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
  return 1;
}

/* ---- capture ---- */

static CUresult begin_capture(CUstream h, int ptsz)
{
  struct fg_stream *s;
  CUresult r = fg_stream_resolve(h, ptsz, &s);
  if (r != CUDA_SUCCESS)
    return r;
  if (s->legacy)
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (s->capture)
    return CUDA_ERROR_ILLEGAL_STATE;
  struct fg_graph *g = graph_new(s->ctx);
  if (!g)
    return CUDA_ERROR_OUT_OF_MEMORY;
  s->capture_id = atomic_fetch_add(&g_capture_id, 1) + 1;
  s->capture = g;
  return CUDA_SUCCESS;
}

FG_API CUresult CUDAAPI cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
  FG_ENTER(cuStreamBeginCapture_v2, NULL, hStream, mode);
  return FG_EXIT(begin_capture(hStream, 0));
}

FG_API CUresult CUDAAPI cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode)
{
  FG_ENTER(cuStreamBeginCapture_v2_ptsz, NULL, hStream, mode);
  return FG_EXIT(begin_capture(hStream, 1));
}

static CUresult end_capture(CUstream h, CUgraph *out, int ptsz)
{
  struct fg_stream *s;
  CUresult r = fg_stream_resolve(h, ptsz, &s);
  if (r != CUDA_SUCCESS)
    return r;
  if (!out)
    return CUDA_ERROR_INVALID_VALUE;
  if (!s->capture)
    return CUDA_ERROR_ILLEGAL_STATE;
  *out = (CUgraph)s->capture;
  s->capture = NULL;
  return CUDA_SUCCESS;
}

FG_API CUresult CUDAAPI cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
  FG_ENTER(cuStreamEndCapture, NULL, hStream, phGraph);
  return FG_EXIT(end_capture(hStream, phGraph, 0));
}

FG_API CUresult CUDAAPI cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph)
{
  FG_ENTER(cuStreamEndCapture_ptsz, NULL, hStream, phGraph);
  return FG_EXIT(end_capture(hStream, phGraph, 1));
}

static CUresult is_capturing(CUstream h, CUstreamCaptureStatus *status, int ptsz)
{
  struct fg_stream *s;
  CUresult r = fg_stream_resolve(h, ptsz, &s);
  if (r != CUDA_SUCCESS)
    return r;
  if (!status)
    return CUDA_ERROR_INVALID_VALUE;
  *status = s->capture ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}

FG_API CUresult CUDAAPI cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
  FG_ENTER(cuStreamIsCapturing, NULL, hStream, captureStatus);
  return FG_EXIT(is_capturing(hStream, captureStatus, 0));
}

FG_API CUresult CUDAAPI cuStreamIsCapturing_ptsz(CUstream hStream,
                                                 CUstreamCaptureStatus *captureStatus)
{
  FG_ENTER(cuStreamIsCapturing_ptsz, NULL, hStream, captureStatus);
  return FG_EXIT(is_capturing(hStream, captureStatus, 1));
}

static CUresult capture_info(CUstream h, CUstreamCaptureStatus *status, cuuint64_t *id,
                             CUgraph *graph, const CUgraphNode **deps,
                             const CUgraphEdgeData **edges, size_t *ndeps, int ptsz)
{
  struct fg_stream *s;
  CUresult r = fg_stream_resolve(h, ptsz, &s);
  if (r != CUDA_SUCCESS)
    return r;
  if (!status)
    return CUDA_ERROR_INVALID_VALUE;
  struct fg_graph *g = s->capture;
  *status = g ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  if (id)
    *id = g ? s->capture_id : 0;
  if (graph)
    *graph = (CUgraph)g;
  /* Capture is sequential: the frontier is the last node captured. */
  if (deps)
    *deps = g && g->n ? (const CUgraphNode *)&g->nodes[g->n - 1] : NULL;
  if (edges)
    *edges = NULL;
  if (ndeps)
    *ndeps = g && g->n ? 1 : 0;
  return CUDA_SUCCESS;
}

FG_API CUresult CUDAAPI cuStreamGetCaptureInfo_v3(CUstream hStream,
                                                  CUstreamCaptureStatus *captureStatus_out,
                                                  cuuint64_t *id_out, CUgraph *graph_out,
                                                  const CUgraphNode **dependencies_out,
                                                  const CUgraphEdgeData **edgeData_out,
                                                  size_t *numDependencies_out)
{
  FG_ENTER(cuStreamGetCaptureInfo_v3, NULL, hStream, captureStatus_out, id_out, graph_out,
           dependencies_out, edgeData_out, numDependencies_out);
  return FG_EXIT(capture_info(hStream, captureStatus_out, id_out, graph_out, dependencies_out,
                              edgeData_out, numDependencies_out, 0));
}

FG_API CUresult CUDAAPI cuStreamGetCaptureInfo_v3_ptsz(CUstream hStream,
                                                       CUstreamCaptureStatus *captureStatus_out,
                                                       cuuint64_t *id_out, CUgraph *graph_out,
                                                       const CUgraphNode **dependencies_out,
                                                       const CUgraphEdgeData **edgeData_out,
                                                       size_t *numDependencies_out)
{
  FG_ENTER(cuStreamGetCaptureInfo_v3_ptsz, NULL, hStream, captureStatus_out, id_out, graph_out,
           dependencies_out, edgeData_out, numDependencies_out);
  return FG_EXIT(capture_info(hStream, captureStatus_out, id_out, graph_out, dependencies_out,
                              edgeData_out, numDependencies_out, 1));
}

/* ---- explicit construction ---- */

FG_API CUresult CUDAAPI cuGraphCreate(CUgraph *phGraph, unsigned int flags)
{
  FG_ENTER(cuGraphCreate, NULL, phGraph, flags);
  if (!phGraph || flags)
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  struct fg_graph *g = graph_new(fg_ctx_current());
  if (!g)
    return FG_EXIT(CUDA_ERROR_OUT_OF_MEMORY);
  *phGraph = (CUgraph)g;
  return FG_EXIT(CUDA_SUCCESS);
}

static CUresult add_node(CUgraphNode *out, CUgraph h, const struct fg_op *op)
{
  struct fg_graph *g = graph_get(h);
  if (!g)
    return CUDA_ERROR_INVALID_VALUE;
  if (!out)
    return CUDA_ERROR_INVALID_VALUE;
  struct fg_node *n = node_add(g, op);
  if (!n)
    return CUDA_ERROR_OUT_OF_MEMORY;
  *out = (CUgraphNode)n;
  return CUDA_SUCCESS;
}

FG_API CUresult CUDAAPI cuGraphAddKernelNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph,
                                                const CUgraphNode *dependencies,
                                                size_t numDependencies,
                                                const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
  FG_ENTER(cuGraphAddKernelNode_v2, NULL, phGraphNode, hGraph, dependencies, numDependencies,
           nodeParams);
  if (!nodeParams)
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  struct fg_func *f = (struct fg_func *)(nodeParams->func ? (void *)nodeParams->func
                                                          : (void *)nodeParams->kern);
  if (!f || !f->name)
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  struct fg_op op;
  memset(&op, 0, sizeof(op));
  op.type = FG_OP_KERNEL;
  op.func = f;
  op.grid[0] = nodeParams->gridDimX;
  op.grid[1] = nodeParams->gridDimY;
  op.grid[2] = nodeParams->gridDimZ;
  op.block[0] = nodeParams->blockDimX;
  op.block[1] = nodeParams->blockDimY;
  op.block[2] = nodeParams->blockDimZ;
  op.smem = nodeParams->sharedMemBytes;
  return FG_EXIT(add_node(phGraphNode, hGraph, &op));
}

FG_API CUresult CUDAAPI cuGraphAddMemsetNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                             const CUgraphNode *dependencies,
                                             size_t numDependencies,
                                             const CUDA_MEMSET_NODE_PARAMS *memsetParams,
                                             CUcontext ctx)
{
  FG_ENTER(cuGraphAddMemsetNode, NULL, phGraphNode, hGraph, dependencies, numDependencies,
           memsetParams, ctx);
  const CUDA_MEMSET_NODE_PARAMS *p = memsetParams;
  if (!p || (p->elementSize != 1 && p->elementSize != 2 && p->elementSize != 4))
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  struct fg_op op;
  memset(&op, 0, sizeof(op));
  op.type = FG_OP_MEMSET;
  op.dst = p->dst;
  op.elem_size = p->elementSize;
  op.value = p->value;
  op.bytes = (uint64_t)p->elementSize * p->width * (p->height ? p->height : 1);
  return FG_EXIT(add_node(phGraphNode, hGraph, &op));
}

/* Only contiguous host/device copies (pitch ignored); arrays are not simulated. */
FG_API CUresult CUDAAPI cuGraphAddMemcpyNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                             const CUgraphNode *dependencies,
                                             size_t numDependencies,
                                             const CUDA_MEMCPY3D *copyParams, CUcontext ctx)
{
  FG_ENTER(cuGraphAddMemcpyNode, NULL, phGraphNode, hGraph, dependencies, numDependencies,
           copyParams, ctx);
  const CUDA_MEMCPY3D *c = copyParams;
  if (!c || c->srcMemoryType == CU_MEMORYTYPE_ARRAY || c->dstMemoryType == CU_MEMORYTYPE_ARRAY)
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  struct fg_op op;
  memset(&op, 0, sizeof(op));
  op.type = FG_OP_MEMCPY;
  op.src = (c->srcMemoryType == CU_MEMORYTYPE_HOST ? (uint64_t)(uintptr_t)c->srcHost
                                                   : c->srcDevice) + c->srcXInBytes;
  op.dst = (c->dstMemoryType == CU_MEMORYTYPE_HOST ? (uint64_t)(uintptr_t)c->dstHost
                                                   : c->dstDevice) + c->dstXInBytes;
  op.bytes = (uint64_t)c->WidthInBytes * (c->Height ? c->Height : 1) * (c->Depth ? c->Depth : 1);
  op.src_device = op.dst_device = -1;
  return FG_EXIT(add_node(phGraphNode, hGraph, &op));
}

FG_API CUresult CUDAAPI cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes)
{
  FG_ENTER(cuGraphGetNodes, NULL, hGraph, nodes, numNodes);
  struct fg_graph *g = graph_get(hGraph);
  if (!g || !numNodes)
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  pthread_mutex_lock(&fg_lock);
  if (nodes)
    for (size_t i = 0; i < g->n && i < *numNodes; i++)
      nodes[i] = (CUgraphNode)g->nodes[i];
  *numNodes = g->n;
  pthread_mutex_unlock(&fg_lock);
  return FG_EXIT(CUDA_SUCCESS);
}

FG_API CUresult CUDAAPI cuGraphDestroy(CUgraph hGraph)
{
  FG_ENTER(cuGraphDestroy, NULL, hGraph);
  struct fg_graph *g = graph_get(hGraph);
  if (!g)
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  fg_graph_callback(CUPTI_CBID_RESOURCE_GRAPH_DESTROY_STARTING, g->ctx, hGraph, NULL, 0, NULL);
  g->magic = 0;
  return FG_EXIT(CUDA_SUCCESS);
}

/* ---- instantiate and launch ---- */

/* The clone of n made by an instantiation: a new id, the same work. CREATED and CLONED fire
 * from the instantiating thread, inside the instantiate call (what tools rely on to skip the
 * CREATED of clones). The CUpti_GraphData of both names the instantiated graph as graph (and
 * originalGraph) and the exec being built as graphExec: the real driver's internal clone graph
 * is not modelled. */
static struct fg_node *node_clone(struct fg_graph *g, const struct fg_node *n, CUgraphExec exec)
{
  struct fg_node *c = calloc(1, sizeof(*c));
  CUpti_GraphData d;

  if (!c)
    return NULL;
  c->magic = NODE_MAGIC;
  c->id = atomic_fetch_add(&g_node_id, 1) + 1;
  c->graph = g;
  c->type = n->type;
  c->op = n->op;
  memset(&d, 0, sizeof(d));
  d.graph = (CUgraph)g;
  d.node = (CUgraphNode)c;
  d.nodeType = c->type;
  d.graphExec = exec;
  fg_resource(CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED, g->ctx, NULL, &d);
  d.originalGraph = (CUgraph)g;
  d.originalNode = (CUgraphNode)n;
  fg_resource(CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED, g->ctx, NULL, &d);
  return c;
}

FG_API CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                    unsigned long long flags)
{
  FG_ENTER(cuGraphInstantiateWithFlags, NULL, phGraphExec, hGraph, flags);
  struct fg_graph *g = graph_get(hGraph);
  struct fg_node **orig = NULL;
  size_t n = 0;
  if (!g || !phGraphExec)
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  struct fg_exec *e = calloc(1, sizeof(*e));
  if (!e)
    return FG_EXIT(CUDA_ERROR_OUT_OF_MEMORY);
  /* The node list is snapshot under the lock; callbacks are delivered without it. */
  pthread_mutex_lock(&fg_lock);
  n = g->n;
  orig = malloc((n ? n : 1) * sizeof(*orig));
  e->nodes = malloc((n ? n : 1) * sizeof(*e->nodes));
  if (orig && e->nodes)
    memcpy(orig, g->nodes, n * sizeof(*orig));
  pthread_mutex_unlock(&fg_lock);
  if (!orig || !e->nodes) {
    free(orig);
    free(e->nodes);
    free(e);
    return FG_EXIT(CUDA_ERROR_OUT_OF_MEMORY);
  }
  e->magic = EXEC_MAGIC;
  e->id = atomic_fetch_add(&g_exec_id, 1) + 1;
  e->graph = g;
  for (size_t i = 0; i < n; i++) {
    if (!(e->nodes[i] = node_clone(g, orig[i], (CUgraphExec)e))) {
      /* Clones already announced stay allocated (handles are never freed, see top). */
      e->magic = 0;
      free(orig);
      return FG_EXIT(CUDA_ERROR_OUT_OF_MEMORY);
    }
    e->n = i + 1;
  }
  free(orig);
  pthread_mutex_lock(&fg_lock);
  e->next = g_execs;
  g_execs = e;
  pthread_mutex_unlock(&fg_lock);
  fg_graph_callback(CUPTI_CBID_RESOURCE_GRAPHEXEC_CREATED, g->ctx, hGraph, NULL, 0,
                    (CUgraphExec)e);
  *phGraphExec = (CUgraphExec)e;
  return FG_EXIT(CUDA_SUCCESS);
}

FG_API CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec hGraphExec)
{
  FG_ENTER(cuGraphExecDestroy, NULL, hGraphExec);
  struct fg_exec *e = exec_get(hGraphExec);
  if (!e)
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  fg_graph_callback(CUPTI_CBID_RESOURCE_GRAPHEXEC_DESTROY_STARTING, e->graph->ctx,
                    (CUgraph)e->graph, NULL, 0, hGraphExec);
  e->magic = 0;
  return FG_EXIT(CUDA_SUCCESS);
}

/* Replays the nodes in order on the stream. Per-node records carry the launch's
 * correlation id, the instantiated graph's graphId and the clone's graphNodeId; with GRAPH_TRACE on, one GraphTrace2 record per
 * launch replaces them (cupti.md 6.7). */
static CUresult graph_launch(CUgraphExec h, CUstream hs, int ptsz)
{
  struct fg_exec *e = exec_get(h);
  if (!e)
    return CUDA_ERROR_INVALID_VALUE;
  struct fg_stream *s;
  CUresult r = fg_stream_resolve(hs, ptsz, &s);
  if (r != CUDA_SUCCESS)
    return r;
  if (s->capture)
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  int trace = fg_kind_on(CUPTI_ACTIVITY_KIND_GRAPH_TRACE, s->ctx);
  struct fg_graph_ref ref = {e->graph->id, 0, fg_corr_current(), fg_corr_runtime(), !trace};
  uint64_t first = 0, last = 0;
  for (size_t i = 0; i < e->n; i++) {
    uint64_t st, en;
    ref.node_id = e->nodes[i]->id;
    r = fg_op_submit(s, &e->nodes[i]->op, 1, &ref, &st, &en);
    if (r != CUDA_SUCCESS)
      return r;
    if (i == 0)
      first = st;
    last = en;
  }
  if (trace && e->n) {
    CUpti_ActivityGraphTrace2 t;
    memset(&t, 0, sizeof(t));
    t.kind = CUPTI_ACTIVITY_KIND_GRAPH_TRACE;
    t.correlationId = ref.corr;
    t.start = fg_gpu_ts(first);
    t.end = fg_gpu_ts(last);
    t.deviceId = t.endDeviceId = (uint32_t)s->ctx->device;
    t.graphId = e->graph->id;
    t.contextId = t.endContextId = s->ctx->uid;
    t.streamId = s->id;
    fg_emit(&t, sizeof(t), last);
  }
  return CUDA_SUCCESS;
}

FG_API CUresult CUDAAPI cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
  FG_ENTER(cuGraphLaunch, NULL, hGraphExec, hStream);
  return FG_EXIT(graph_launch(hGraphExec, hStream, 0));
}

FG_API CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
  FG_ENTER(cuGraphLaunch_ptsz, NULL, hGraphExec, hStream);
  return FG_EXIT(graph_launch(hGraphExec, hStream, 1));
}
