/* The CUPTI subscription: callbacks on application threads, enabled cbids and activity kinds. */
#define LOG_MODULE "cupti"
#include "cupti/subscriber.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <cupti.h>

#include "agent/agent.h"
#include "agent/alloc_map.h"
#include "agent/capture.h"
#include "agent/corr.h"
#include "agent/ctx_map.h"
#include "agent/graph_map.h"
#include "agent/hoststack.h"
#include "agent/config.h"
#include "agent/nccl.h"
#include "agent/nvtx.h"
#include "agent/oom.h"
#include "agent/stack.h"
#include "agent/thread.h"
#include "agent/util/clock.h"
#include "agent/util/counter.h"
#include "agent/util/guard.h"
#include "agent/util/log.h"
#include "cupti/buffers.h"
#include "cupti/cbids.h"
#include "cupti/loader.h"

/* Set in subscriber_start, before any callback is enabled; read-only afterwards. */
static CUpti_SubscriberHandle subscriber;
static struct corr_table *corr;
static struct alloc_map *allocs;

static struct striped_counter api_runtime, api_driver;
static _Atomic uint64_t n_contexts, n_streams, n_graph_nodes;
static _Atomic uint32_t call_epoch; /* bumped when API callbacks are switched off */
/* Graph nodes get stacks only while API calls are traced (not in an idle on-demand agent). */
static _Atomic int api_callbacks_on;

/* ---- application-thread side (hot path) ---- */

/* The device an allocation made in this context belongs to: the cache first (lock-free),
 * cuptiGetDeviceId (documented as callable from callbacks) to fill it. */
static int32_t context_device(CUcontext ctx, uint32_t context_uid)
{
  int32_t dev = ctx_map_get(context_uid);
  uint32_t id;

  if (dev >= 0)
    return dev;
  if (ctx && cupti_fn.GetDeviceId && cupti_fn.GetDeviceId(ctx, &id) == CUPTI_SUCCESS) {
    ctx_map_set(context_uid, (int32_t)id);
    return (int32_t)id;
  }
  return 0; /* no context information at all: a single-device process is the common case */
}

/* Where cuMemCreate puts its memory: a device, or host memory (NCCL allocates its host buffers
 * with cuMemCreate on a host NUMA node), accounted like pinned memory. 0, or -1 when the
 * properties do not say (the context's device then). */
static int vmm_location(const CUmemAllocationProp *prop, int32_t *device)
{
  if (!prop)
    return -1;
  switch (prop->location.type) {
  case CU_MEM_LOCATION_TYPE_DEVICE:
    *device = prop->location.id;
    return 0;
  case CU_MEM_LOCATION_TYPE_HOST:
  case CU_MEM_LOCATION_TYPE_HOST_NUMA:
  case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
    *device = ALLOC_DEVICE_HOST;
    return 0;
  default:
    return -1;
  }
}

static uint64_t read_u64(const void *p)
{
  uint64_t v;
  memcpy(&v, p, sizeof(v));
  return v;
}

/* Reads the result of an alloc/free API at EXIT (outputs are only valid there) and updates
 * the live map. Only the outermost memory call of a thread gets here, so a cudaMalloc that
 * reaches cuMemAlloc is counted once. */
static void track_memory(const struct cbid_entry *e, const CUpti_CallbackData *cb)
{
  const char *params = cb->functionParams;
  struct thread_call *top = thread_top_call(thread_state_get());
  struct alloc_info info = {.kind = e->kind,
                            .corr_id = cb->correlationId,
                            .api = cb->functionName,
                            .stack_id = top ? top->stack_id : 0};
  enum alloc_space space = ALLOC_SPACE_VA;
  uint64_t key = 0;

  if (!params)
    return;
  switch (e->params) {
  case CBID_PARAMS_OUT_PTR_SIZE: {
    const void *out = *(void *const *)(params + e->ptr_off);
    if (!out)
      return;
    key = read_u64(out);
    info.size = read_u64(params + e->size_off);
    break;
  }
  case CBID_PARAMS_RT_PITCH: {
    const cudaMallocPitch_v3020_params *p = (const void *)params;
    if (!p->devPtr || !p->pitch)
      return;
    key = (uint64_t)(uintptr_t)*p->devPtr;
    info.size = *p->pitch * p->height;
    break;
  }
  case CBID_PARAMS_DRV_PITCH: {
    const cuMemAllocPitch_v2_params *p = (const void *)params;
    if (!p->dptr || !p->pPitch)
      return;
    key = *p->dptr;
    info.size = *p->pPitch * p->Height;
    break;
  }
  case CBID_PARAMS_RT_3D: {
    const cudaMalloc3D_v3020_params *p = (const void *)params;
    if (!p->pitchedDevPtr)
      return;
    key = (uint64_t)(uintptr_t)p->pitchedDevPtr->ptr;
    info.size =
        p->pitchedDevPtr->pitch * p->extent.height * (p->extent.depth ? p->extent.depth : 1);
    break;
  }
  case CBID_PARAMS_VMM_CREATE: {
    const cuMemCreate_params *p = (const void *)params;
    if (!p->handle)
      return;
    space = ALLOC_SPACE_VMM_HANDLE;
    key = *p->handle;
    info.size = p->size;
    if (key && vmm_location(p->prop, &info.device) == 0)
      goto insert;
    break;
  }
  case CBID_PARAMS_IN_PTR:
    key = read_u64(params + e->ptr_off);
    if (!key)
      return; /* cudaFree(NULL) and friends free nothing */
    alloc_map_remove(allocs, ALLOC_SPACE_VA, key, NULL);
    return;
  case CBID_PARAMS_VMM_RELEASE:
    /* The memory may outlive its handle while it is mapped (agent/alloc_map.h). */
    alloc_map_vmm_release(allocs, read_u64(params + e->ptr_off));
    return;
  case CBID_PARAMS_VMM_MAP: {
    const cuMemMap_params *p = (const void *)params;
    alloc_map_vmm_map(allocs, p->ptr, p->size, p->handle);
    return;
  }
  case CBID_PARAMS_VMM_UNMAP: {
    const cuMemUnmap_params *p = (const void *)params;
    alloc_map_vmm_unmap(allocs, p->ptr, p->size);
    return;
  }
  case CBID_PARAMS_VMM_RETAIN: {
    const cuMemRetainAllocationHandle_params *p = (const void *)params;
    alloc_map_vmm_retain(allocs, (uint64_t)(uintptr_t)p->addr);
    return;
  }
  default:
    return;
  }
  if (!key)
    return;
  info.device = e->kind == ALLOC_KIND_PINNED ? ALLOC_DEVICE_HOST
                                             : context_device(cb->context, cb->contextUid);
insert:
  alloc_map_insert(allocs, space, key, &info);
}

/* cudaError_t / CUresult: 0 is success for both. */
static int call_succeeded(const CUpti_CallbackData *cb)
{
  int result;

  if (!cb->functionReturnValue)
    return 0;
  memcpy(&result, cb->functionReturnValue, sizeof(result));
  return result == 0;
}

/* cudaErrorMemoryAllocation and CUDA_ERROR_OUT_OF_MEMORY are both 2. */
static int call_out_of_memory(const CUpti_CallbackData *cb)
{
  int result;

  if (!cb->functionReturnValue)
    return 0;
  memcpy(&result, cb->functionReturnValue, sizeof(result));
  return result == 2;
}

/* What a failed allocation asked for, from its parameters (outputs are not valid on failure). */
static uint64_t requested_bytes(const struct cbid_entry *e, const char *params)
{
  switch (e->params) {
  case CBID_PARAMS_OUT_PTR_SIZE:
  case CBID_PARAMS_VMM_CREATE:
    return read_u64(params + e->size_off);
  case CBID_PARAMS_RT_PITCH: {
    const cudaMallocPitch_v3020_params *p = (const void *)params;
    return (uint64_t)p->width * p->height;
  }
  case CBID_PARAMS_DRV_PITCH: {
    const cuMemAllocPitch_v2_params *p = (const void *)params;
    return (uint64_t)p->WidthInBytes * p->Height;
  }
  case CBID_PARAMS_RT_3D: {
    const cudaMalloc3D_v3020_params *p = (const void *)params;
    return (uint64_t)p->extent.width * p->extent.height * (p->extent.depth ? p->extent.depth : 1);
  }
  default:
    return 0;
  }
}

/* An outermost allocation call that failed for lack of memory: agent/oom.c takes it from here
 * (a count, and at most one snapshot per GPUPROF_OOM_INTERVAL). Never on the success path. */
static void note_oom(const struct cbid_entry *e, const CUpti_CallbackData *cb,
                     struct thread_state *ts)
{
  struct thread_call *top = thread_top_call(ts);
  struct oom_event ev = {.time_ns = clock_realtime_ns(),
                         .api = cb->functionName,
                         .stack_id = top ? top->stack_id : 0,
                         .tid = ts->tid,
                         .kind = e->kind};
  const cuMemCreate_params *vmm = cb->functionParams;

  if (cb->functionParams)
    ev.bytes = requested_bytes(e, cb->functionParams);
  if (e->kind == ALLOC_KIND_PINNED)
    ev.device = ALLOC_DEVICE_HOST;
  else if (e->params != CBID_PARAMS_VMM_CREATE || !vmm || vmm_location(vmm->prop, &ev.device))
    ev.device = context_device(cb->context, cb->contextUid);
  oom_record(&ev);
}

/*
 * The host stack of a call at ENTER, before it is pushed. A call nested in another one on
 * this thread (a runtime call reaching the driver) shares the outer call's stack and sampling
 * decision: one unwind per user call, and a sampled launch is never counted twice.
 */
static void stack_for_call(struct thread_state *ts, const struct cbid_entry *e, uint32_t *stack_id,
                           uint32_t *weight)
{
  struct thread_call *outer = thread_top_call(ts);
  enum hoststack_call call = HOSTSTACK_CALL_OTHER;

  *stack_id = 0;
  *weight = 0;
  if (ts->depth > 0) {
    if (outer) {
      *stack_id = outer->stack_id;
      *weight = outer->weight;
    }
    return;
  }
  if (!e)
    return;
  switch (e->cls) {
  case CBID_ALLOC:
  case CBID_FREE:
  case CBID_MEMCPY:
  case CBID_MEMSET:
    call = HOSTSTACK_CALL_MEMORY;
    break;
  case CBID_LAUNCH:
  case CBID_GRAPH_LAUNCH:
  case CBID_SYNC:
    call = HOSTSTACK_CALL_LAUNCH;
    break;
  default:
    return;
  }
  hoststack_capture(ts, call, stack_id, weight);
}

/*
 * Whether CUDA's runtime delivers nested DRIVER callbacks for the driver work of a runtime call
 * (and CUDA 13's __cudaLaunchKernel a nested cudaLaunchKernel) is not verified on hardware
 * (cupti.md 3.6 [U]); the agent must give the same answers either way. A nested call shares
 * the outermost call's stack (stack_for_call), names the outermost call as its parent (the
 * aggregate joins its device records to that call: the user's), is not counted as an API call
 * of its own, and is no slice in a trace capture. tests/nested runs the checks in both worlds
 * (FAKEGPU_NESTED).
 */
static void on_api(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const CUpti_CallbackData *cb)
{
  const struct cbid_entry *e = cbid_lookup(domain, cbid);
  struct thread_state *ts = thread_state_get();
  uint8_t dom = domain == CUPTI_CB_DOMAIN_RUNTIME_API ? CORR_DOMAIN_RUNTIME : CORR_DOMAIN_DRIVER;
  /* Calls that change the live map (VMM mappings keep VMM memory alive). */
  int is_memory =
      e && (e->cls == CBID_ALLOC || e->cls == CBID_FREE || (e->cls == CBID_VMM && e->params));
  uint32_t epoch = atomic_load_explicit(&call_epoch, memory_order_relaxed);
  struct thread_call *top;
  uint64_t exit_ns;

  if (cb->callbackSite == CUPTI_API_ENTER) {
    if (__builtin_expect(ts->call_epoch != epoch, 0)) {
      ts->depth = 0;
      ts->call_epoch = epoch;
    }
    struct corr_info info = {
        .corr_id = cb->correlationId,
        .tid = ts->tid,
        .cbid = (uint16_t)cbid,
        .domain = dom,
        .api_name = cb->functionName,
        .enter_ns = clock_realtime_ns(),
    };
    stack_for_call(ts, e, &info.stack_id, &info.weight);
    info.parent_corr_id = thread_outermost_call(ts);
    thread_push_call(ts, cb->correlationId, dom, is_memory);
    if ((top = thread_top_call(ts))) {
      top->stack_id = info.stack_id;
      top->weight = info.weight;
      top->enter_ns = info.enter_ns;
    }
    corr_table_enter(corr, &info);
    /* NCCL's kernel launches: the plugin's KernelLaunch event on this thread names the ops
     * this correlation id runs (agent/nccl.h). One relaxed load unless NCCL is in use. */
    if (dom == CORR_DOMAIN_DRIVER &&
        (cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx ||
         cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz ||
         cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel ||
         cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz) &&
        nccl_watching())
      nccl_note_launch_slow(cb->correlationId, cb->symbolName,
                            context_device(cb->context, cb->contextUid));
    if (!info.parent_corr_id)
      striped_counter_add(dom == CORR_DOMAIN_RUNTIME ? &api_runtime : &api_driver, ts->counter_slot,
                          1);
    return;
  }

  /* The first callback of a new epoch on this thread may be an EXIT whose ENTER was not seen
   * (callbacks switched on inside the call). Unless it closes the top call (entered before the
   * switch, returning now), the calls on the stack are stale like at ENTER: left there, a stale
   * memory call would make this free or allocation look nested and leave the map wrong. */
  if (__builtin_expect(ts->call_epoch != epoch, 0) &&
      !((top = thread_top_call(ts)) && top->corr_id == cb->correlationId)) {
    ts->depth = 0;
    ts->call_epoch = epoch;
  }

  /* Exit times feed trace captures only (API slices, flows; nothing in the continuous
   * profiles uses them), and the clock read is the largest part of the EXIT path: outside a
   * capture it is skipped. ENTER keeps its read, so a call open when a capture starts still
   * has its start. */
  if (capture_api_active()) {
    exit_ns = clock_realtime_ns();
    /* Queued before the exit time is published: a GPU record joined to a call that has
     * returned then finds the call in the capture's queue (agent/capture.c, flows). Only the
     * outermost call of the thread: the user's call, whose slice the flow starts from. */
    if (ts->depth <= 1)
      capture_api_exit(ts, cb->correlationId, cb->functionName,
                       e && (e->cls == CBID_LAUNCH || e->cls == CBID_MEMCPY) && call_succeeded(cb),
                       exit_ns);
    corr_table_exit(corr, cb->correlationId, exit_ns);
  }
  if (is_memory && !thread_inside_memory_call(ts) &&
      !thread_memory_done_inside(ts, cb->correlationId)) {
    ts->memory_corr = cb->correlationId;
    if (call_succeeded(cb))
      track_memory(e, cb);
    else if (e->cls == CBID_ALLOC && call_out_of_memory(cb))
      note_oom(e, cb, ts);
  }
  thread_pop_call(ts, cb->correlationId);
}

/* Graph instantiation clones every node of the graph: the GRAPHNODE_CREATED of a clone fires
 * inside the instantiate call and says nothing about user code (its GRAPHNODE_CLONED carries
 * the attribution). These calls are traced only to recognize that. */
static const struct {
  CUpti_CallbackDomain domain;
  CUpti_CallbackId cbid;
} instantiate_cbids[] = {
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaGraphInstantiate_v10000},
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaGraphInstantiate_v12000},
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaGraphInstantiateWithFlags_v11040},
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaGraphInstantiateWithParams_v12000},
    {CUPTI_CB_DOMAIN_RUNTIME_API,
     CUPTI_RUNTIME_TRACE_CBID_cudaGraphInstantiateWithParams_ptsz_v12000},
    {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiate},
    {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiate_v2},
    {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithFlags},
    {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithParams},
    {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithParams_ptsz},
};

#define N_INSTANTIATE (sizeof(instantiate_cbids) / sizeof(instantiate_cbids[0]))

static int is_instantiate(uint8_t domain, uint16_t cbid)
{
  CUpti_CallbackDomain d =
      domain == CORR_DOMAIN_RUNTIME ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API;

  for (unsigned i = 0; i < N_INSTANTIATE; i++)
    if (instantiate_cbids[i].domain == d && instantiate_cbids[i].cbid == cbid)
      return 1;
  return 0;
}

/*
 * GRAPHNODE_CREATED: the node id -> the stack of the call that created it (a launch or copy
 * on a capturing stream, which CUPTI encloses in its ENTER/EXIT, or an untraced
 * cuGraphAdd*Node with no call open). The open call's stack is reused when it has one (a
 * sampled launch); otherwise one is taken now, unsampled at any stacks policy but off: this
 * is capture time, once per node, and every replay of the node is attributed to it.
 * GRAPHNODE_CLONED: the clone inherits the original's entry. Not a hot path; the map's
 * writers share a mutex and nothing else.
 */
static void on_graph_node(CUpti_CallbackId cbid, const CUpti_GraphData *gd)
{
  struct thread_state *ts;
  struct thread_call *top;
  struct corr_info info;
  uint64_t node = 0, original = 0;
  uint32_t stack_id, weight;
  struct graph_map *m;
  int open;

  if (!gd || !gd->node || !cupti_fn.GetGraphNodeId ||
      cupti_fn.GetGraphNodeId(gd->node, &node) != CUPTI_SUCCESS || !node)
    return;
  if (cbid == CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED) {
    if (gd->originalNode && (m = graph_map_peek()) &&
        cupti_fn.GetGraphNodeId(gd->originalNode, &original) == CUPTI_SUCCESS)
      graph_map_clone(m, original, node);
    return;
  }
  /* Only nodes that produce records worth a stack (event, host, empty and child-graph nodes
   * do not; a child graph's nodes have their own CREATED). */
  if (gd->nodeType != CU_GRAPH_NODE_TYPE_KERNEL && gd->nodeType != CU_GRAPH_NODE_TYPE_MEMCPY &&
      gd->nodeType != CU_GRAPH_NODE_TYPE_MEMSET)
    return;
  if (!atomic_load_explicit(&api_callbacks_on, memory_order_relaxed))
    return;
  /* Known already: a clone whose CLONED came first keeps its original's stack. */
  if (graph_map_lookup(node))
    return;
  ts = thread_state_get();
  /* Calls left open when API callbacks were last switched off are not open now. */
  open = ts->call_epoch == atomic_load_explicit(&call_epoch, memory_order_relaxed) ? ts->depth : 0;
  if (open > THREAD_MAX_OPEN_CALLS)
    open = THREAD_MAX_OPEN_CALLS;
  /* A clone made by an instantiate call, however deep inside it: CLONED attributes it. */
  for (int i = 0; i < open; i++)
    if (corr_table_lookup(corr, ts->open[i].corr_id, &info) == 0 &&
        is_instantiate(info.domain, info.cbid))
      return;
  top = thread_top_call(ts);
  stack_id = open && top ? top->stack_id : STACK_ID_NONE;
  if (!stack_id)
    hoststack_capture(ts, HOSTSTACK_CALL_MEMORY, &stack_id, &weight);
  if (stack_id && (m = graph_map_global()))
    graph_map_set(m, node, stack_id);
}

static void on_resource(CUpti_CallbackId cbid, const CUpti_ResourceData *rd)
{
  uint32_t uid, dev;

  switch (cbid) {
  case CUPTI_CBID_RESOURCE_CONTEXT_CREATED:
    atomic_fetch_add_explicit(&n_contexts, 1, memory_order_relaxed);
    if (rd->context && cupti_fn.GetContextId && cupti_fn.GetDeviceId &&
        cupti_fn.GetContextId(rd->context, &uid) == CUPTI_SUCCESS &&
        cupti_fn.GetDeviceId(rd->context, &dev) == CUPTI_SUCCESS)
      ctx_map_set(uid, (int32_t)dev);
    break;
  case CUPTI_CBID_RESOURCE_STREAM_CREATED:
    atomic_fetch_add_explicit(&n_streams, 1, memory_order_relaxed);
    break;
  case CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED:
  case CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED:
    atomic_fetch_add_explicit(&n_graph_nodes, 1, memory_order_relaxed);
    on_graph_node(cbid, rd->resourceDescriptor);
    break;
  default:
    break;
  }
}

/* Every way CUPTI enters the agent on an application thread comes through here. */
static void CUPTIAPI on_callback(void *userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                 const void *data)
{
  int saved;

  (void)userdata;
  /* One load: stopping, inactive, forked-child and not-yet-started states all return here. */
  if (!agent_is_active() || !data)
    return;
  if (!guard_enter(&saved))
    return;
  if (domain == CUPTI_CB_DOMAIN_RUNTIME_API || domain == CUPTI_CB_DOMAIN_DRIVER_API)
    on_api(domain, cbid, data);
  else if (domain == CUPTI_CB_DOMAIN_RESOURCE)
    on_resource(cbid, data);
  else if (domain == CUPTI_CB_DOMAIN_NVTX)
    nvtx_on_callback(cbid, data);
  guard_leave(saved);
}

/* ---- setup (inside InitializeInjection) ---- */

static const struct {
  CUpti_ActivityKind kind;
  const char *name;
  int dump; /* cuptiActivityEnableAndDump: also emit records of objects that already exist */
} activity_kinds[] = {
    /* CONCURRENT_KERNEL, never KERNEL: KERNEL serializes all kernels on the GPU. */
    {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, "CONCURRENT_KERNEL", 0},
    {CUPTI_ACTIVITY_KIND_MEMCPY, "MEMCPY", 0},
    {CUPTI_ACTIVITY_KIND_MEMCPY2, "MEMCPY2", 0},
    {CUPTI_ACTIVITY_KIND_MEMSET, "MEMSET", 0},
    {CUPTI_ACTIVITY_KIND_MEMORY2, "MEMORY2", 0},
    {CUPTI_ACTIVITY_KIND_MEMORY_POOL, "MEMORY_POOL", 0},
    {CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, "SYNCHRONIZATION", 0},
    {CUPTI_ACTIVITY_KIND_OVERHEAD, "OVERHEAD", 0},
    {CUPTI_ACTIVITY_KIND_DEVICE, "DEVICE", 1},
    {CUPTI_ACTIVITY_KIND_CONTEXT, "CONTEXT", 1},
    {CUPTI_ACTIVITY_KIND_STREAM, "STREAM", 1},
};

#define N_KINDS (sizeof(activity_kinds) / sizeof(activity_kinds[0]))

static int kind_enabled[N_KINDS];
static int kind_warned[N_KINDS];

static const CUpti_CallbackId resource_cbids[] = {
    CUPTI_CBID_RESOURCE_CONTEXT_CREATED,  CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING,
    CUPTI_CBID_RESOURCE_STREAM_CREATED,   CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED,
    CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED,
};

static void set_attribute_u8(CUpti_ActivityAttribute attr, const char *name, uint8_t value)
{
  size_t size = sizeof(value);
  CUptiResult res = cupti_fn.ActivitySetAttribute(attr, &size, &value);

  if (res != CUPTI_SUCCESS)
    log_debug("cannot set %s=%u: %s", name, value, cupti_result_string(res));
}

int subscriber_start(struct corr_table *corr_table, struct alloc_map *alloc_map, char *reason,
                     size_t reason_len)
{
  char other[CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN * 2] = "";
  CUpti_SubscriberParams params;
  CUptiResult res;
  int ret = 0;

  corr = corr_table;
  allocs = alloc_map;
  cbid_table_init();

  memset(&params, 0, sizeof(params));
  params.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
  params.subscriberName = "gpuprof";
  params.oldSubscriberName = other;
  params.oldSubscriberSize = sizeof(other);
  res = cupti_fn.Subscribe_v2(&subscriber, on_callback, NULL, &params);
  if (res == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
    /* Registering buffer callbacks now would hijack the other client's records: stay out. */
    snprintf(reason, reason_len,
             "another CUPTI client is already attached (%s); gpuprof is inactive in this "
             "process (CUDA 13.0 allows one; stop torch.profiler/nsys/ncu to use gpuprof)",
             other[0] ? other : "name not reported");
    ret = -EBUSY;
    goto out;
  }
  if (res != CUPTI_SUCCESS) {
    snprintf(reason, reason_len,
             "cuptiSubscribe_v2 failed: %s; gpuprof is inactive in this process",
             cupti_result_string(res));
    ret = -EIO;
    goto out;
  }

  /* Kernel thread ids (gettid) match /proc, perf and the tids the callbacks record. */
  res = cupti_fn.SetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM);
  if (res != CUPTI_SUCCESS)
    log_debug("cuptiSetThreadIdType(SYSTEM): %s", cupti_result_string(res));

  /*
   * Per-thread activity buffers off (CUDA 13 defaults them on): with them CUPTI asks for one
   * buffer per thread that produces records, so the memory use scales with the application's
   * thread count and a bounded pool runs dry in a 64-thread process. Most of our records
   * (kernels, copies, sets) are produced by CUPTI's own post-processing anyway, so the shared
   * buffers cost little contention. Must be set before registering callbacks and enabling.
   */
  set_attribute_u8(CUPTI_ACTIVITY_ATTR_PER_THREAD_ACTIVITY_BUFFER, "PER_THREAD_ACTIVITY_BUFFER", 0);
  /* The pool hands out zeroed buffers (the worker zeroes them), so CUPTI need not zero them
   * on the application thread that requests one. */
  set_attribute_u8(CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER, "ZEROED_OUT_ACTIVITY_BUFFER", 1);

  res = cupti_fn.ActivityRegisterCallbacks(buffers_requested, buffers_completed);
  if (res != CUPTI_SUCCESS) {
    snprintf(reason, reason_len,
             "cuptiActivityRegisterCallbacks failed: %s; gpuprof is inactive in this process",
             cupti_result_string(res));
    cupti_fn.Unsubscribe(subscriber);
    ret = -EIO;
    goto out;
  }
out:
  return ret;
}

/* The API callbacks of the cbid table on or off; returns how many could not be switched. */
static unsigned set_api_callbacks(uint32_t enable)
{
  const struct cbid_entry *table;
  unsigned n, failed = 0;
  CUptiResult res;

  table = cbid_table(&n);
  for (unsigned i = 0; i < n; i++) {
    res = cupti_fn.EnableCallback(enable, subscriber, table[i].domain, table[i].cbid);
    if (res != CUPTI_SUCCESS) {
      failed++;
      log_debug("cannot %s callback %u in domain %d: %s", enable ? "enable" : "disable",
                table[i].cbid, table[i].domain, cupti_result_string(res));
    }
  }
  /* Not counted as failures: without them the CREATED of a clone looks like an untraced
   * cuGraphAdd*Node and takes the instantiate call's stack, until its CLONED copies the
   * original's over it. */
  for (unsigned i = 0; i < N_INSTANTIATE; i++)
    if (cupti_fn.EnableCallback(enable, subscriber, instantiate_cbids[i].domain,
                                instantiate_cbids[i].cbid) != CUPTI_SUCCESS)
      log_debug("cannot %s callback %u in domain %d", enable ? "enable" : "disable",
                instantiate_cbids[i].cbid, instantiate_cbids[i].domain);
  atomic_store_explicit(&api_callbacks_on, enable != 0, memory_order_relaxed);
  /* NCCL events are joined through the driver launch callback: wanted only while API calls
   * are traced (not in an idle on-demand agent, nor in its GPU-only captures). */
  nccl_set_tracing(enable != 0);
  return failed;
}

static unsigned enable_resource_callbacks(void)
{
  unsigned failed = 0;
  CUptiResult res;

  for (unsigned i = 0; i < sizeof(resource_cbids) / sizeof(resource_cbids[0]); i++) {
    res = cupti_fn.EnableCallback(1, subscriber, CUPTI_CB_DOMAIN_RESOURCE, resource_cbids[i]);
    if (res != CUPTI_SUCCESS) {
      failed++;
      log_debug("cannot enable resource callback %u: %s", resource_cbids[i],
                cupti_result_string(res));
    }
  }
  return failed;
}

#define KINDS_RECORDS 1 /* the kinds of activity records */
#define KINDS_OBJECTS 2 /* the object kinds, enabled with a dump of what exists */

/*
 * Enables the kinds of `which` that are off. The kinds CUPTI refuses are named in one line,
 * each kind once per process (on-demand captures enable the kinds again each time): an old
 * driver refuses them all, which must not cost the application a screenful of stderr.
 */
static void enable_kinds(int which)
{
  /* Every kind with the longest result name CUPTI 13.0 has (57 bytes) fits: 11 kinds take
   * 776, and the whole line stays under the log's 1024. */
  char failed[800] = "";
  size_t len = 0, n_failed = 0, n_tried = 0;
  CUptiResult res;

  for (unsigned i = 0; i < N_KINDS; i++) {
    if (kind_enabled[i] || !(which & (activity_kinds[i].dump ? KINDS_OBJECTS : KINDS_RECORDS)))
      continue;
    n_tried++;
    res = activity_kinds[i].dump ? cupti_fn.ActivityEnableAndDump(activity_kinds[i].kind)
                                 : cupti_fn.ActivityEnable(activity_kinds[i].kind);
    kind_enabled[i] = res == CUPTI_SUCCESS;
    if (res != CUPTI_SUCCESS && !kind_warned[i]) {
      int w = snprintf(failed + len, sizeof(failed) - len, "%s%s (%s)", n_failed ? ", " : "",
                       activity_kinds[i].name, cupti_result_string(res));
      kind_warned[i] = 1;
      n_failed++;
      if (w > 0 && (size_t)w < sizeof(failed) - len)
        len += (size_t)w;
      else
        failed[len] = '\0'; /* no cut-off fragment: the kind is left out whole */
    }
  }
  if (n_failed)
    log_warn("cannot enable CUPTI activity kind%s %s; continuing without %s records",
             n_failed == 1 ? "" : "s", failed,
             n_failed == n_tried && which == (KINDS_RECORDS | KINDS_OBJECTS) ? "any GPU" : "those");
}

/*
 * NVTX (agent/nvtx.h). Domain and string registrations happen once per object, often long
 * before a capture: always on (cupti.md 1.4; they fire only when NVTX_INJECTION64_PATH names
 * the agent). The events only during full captures.
 */
static const CUpti_CallbackId nvtx_registration_cbids[] = {
    CUPTI_CBID_NVTX_nvtxDomainCreateA,
    CUPTI_CBID_NVTX_nvtxDomainRegisterStringA,
};
static const CUpti_CallbackId nvtx_event_cbids[] = {
    CUPTI_CBID_NVTX_nvtxMarkA,          CUPTI_CBID_NVTX_nvtxMarkEx,
    CUPTI_CBID_NVTX_nvtxRangeStartA,    CUPTI_CBID_NVTX_nvtxRangeStartEx,
    CUPTI_CBID_NVTX_nvtxRangeEnd,       CUPTI_CBID_NVTX_nvtxRangePushA,
    CUPTI_CBID_NVTX_nvtxRangePushEx,    CUPTI_CBID_NVTX_nvtxRangePop,
    CUPTI_CBID_NVTX_nvtxDomainMarkEx,   CUPTI_CBID_NVTX_nvtxDomainRangeStartEx,
    CUPTI_CBID_NVTX_nvtxDomainRangeEnd, CUPTI_CBID_NVTX_nvtxDomainRangePushEx,
    CUPTI_CBID_NVTX_nvtxDomainRangePop, CUPTI_CBID_NVTX_nvtxMarkW,
    CUPTI_CBID_NVTX_nvtxRangeStartW,    CUPTI_CBID_NVTX_nvtxRangePushW,
};

static unsigned set_nvtx_callbacks(uint32_t enable, const CUpti_CallbackId *cbids, size_t n)
{
  unsigned failed = 0;

  for (size_t i = 0; i < n; i++)
    if (cupti_fn.EnableCallback(enable, subscriber, CUPTI_CB_DOMAIN_NVTX, cbids[i]) !=
        CUPTI_SUCCESS)
      failed++;
  return failed;
}

void subscriber_nvtx_events(int on)
{
  if (!agent_config()->nvtx)
    return;
  if (set_nvtx_callbacks(on ? 1 : 0, nvtx_event_cbids,
                         sizeof(nvtx_event_cbids) / sizeof(nvtx_event_cbids[0])))
    log_debug("some NVTX callbacks could not be %s", on ? "enabled" : "disabled");
}

static void enable_nvtx_registrations(void)
{
  if (agent_config()->nvtx &&
      set_nvtx_callbacks(1, nvtx_registration_cbids,
                         sizeof(nvtx_registration_cbids) / sizeof(nvtx_registration_cbids[0])))
    log_debug("the NVTX registration callbacks could not be enabled");
}

void subscriber_enable(void)
{
  unsigned n, failed;

  cbid_table(&n);
  failed = set_api_callbacks(1) + enable_resource_callbacks();
  enable_nvtx_registrations();
  if (failed)
    log_info("%u of %zu callbacks could not be enabled (run with GPUPROF_LOG=debug for the list)",
             failed, (size_t)n + sizeof(resource_cbids) / sizeof(resource_cbids[0]));
  enable_kinds(KINDS_RECORDS | KINDS_OBJECTS);
}

void subscriber_enable_ondemand(void)
{
  enable_nvtx_registrations();
  if (enable_resource_callbacks())
    log_info("some resource callbacks could not be enabled (run with GPUPROF_LOG=debug)");
  enable_kinds(KINDS_OBJECTS);
}

void subscriber_capture_begin(int api_callbacks)
{
  if (api_callbacks && set_api_callbacks(1))
    log_info("some API callbacks could not be enabled (run with GPUPROF_LOG=debug)");
  enable_kinds(KINDS_RECORDS);
}

void subscriber_capture_end(void)
{
  set_api_callbacks(0);
  /* Calls in flight now may get no EXIT: their threads drop them at their next callback of
   * the new epoch (a call that then returns still finds itself on top, see on_api). */
  atomic_fetch_add_explicit(&call_epoch, 1, memory_order_relaxed);
  for (unsigned i = 0; i < N_KINDS; i++) {
    if (kind_enabled[i] && !activity_kinds[i].dump) {
      cupti_fn.ActivityDisable(activity_kinds[i].kind);
      kind_enabled[i] = 0;
    }
  }
}

void subscriber_disable_activity(void)
{
  for (unsigned i = 0; i < N_KINDS; i++) {
    if (kind_enabled[i]) {
      cupti_fn.ActivityDisable(activity_kinds[i].kind);
      kind_enabled[i] = 0;
    }
  }
}

void subscriber_get_stats(struct subscriber_stats *out)
{
  out->api_runtime = striped_counter_sum(&api_runtime);
  out->api_driver = striped_counter_sum(&api_driver);
  out->contexts = atomic_load(&n_contexts);
  out->streams = atomic_load(&n_streams);
  out->graph_nodes = atomic_load(&n_graph_nodes);
}
