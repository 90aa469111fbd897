/* Simulated CUPTI: record iteration, result strings, version, ids, finalize. */
#include <stdlib.h>

#include "tests/fakegpu/cupti_internal.h"

static __thread CUptiResult t_last_error;

CUptiResult cu_ret(CUptiResult r)
{
  if (r != CUPTI_SUCCESS)
    t_last_error = r;
  return r;
}

CU_API CUptiResult CUPTIAPI cuptiGetLastError(void)
{
  CUptiResult r = t_last_error;
  t_last_error = CUPTI_SUCCESS;
  return r;
}

CU_API CUptiResult CUPTIAPI cuptiGetVersion(uint32_t *version)
{
  if (!version)
    return cu_ret(CUPTI_ERROR_INVALID_PARAMETER);
  const char *v = getenv("FAKEGPU_CUPTI_VERSION");
  char *end = NULL;
  unsigned long x = v && *v ? strtoul(v, &end, 10) : 0;
  *version = end && !*end && x ? (uint32_t)x : CUPTI_API_VERSION;
  return CUPTI_SUCCESS;
}

/* The 13.0 library names the codes of cupti_result.h except 36 and 37, which it reports as
 * unknown (checked against the real libcupti by the fidelity test). */
static const char *result_name(CUptiResult r)
{
#define N(x) case x: return #x
  switch (r) {
  N(CUPTI_SUCCESS);
  N(CUPTI_ERROR_INVALID_PARAMETER);
  N(CUPTI_ERROR_INVALID_DEVICE);
  N(CUPTI_ERROR_INVALID_CONTEXT);
  N(CUPTI_ERROR_INVALID_EVENT_DOMAIN_ID);
  N(CUPTI_ERROR_INVALID_EVENT_ID);
  N(CUPTI_ERROR_INVALID_EVENT_NAME);
  N(CUPTI_ERROR_INVALID_OPERATION);
  N(CUPTI_ERROR_OUT_OF_MEMORY);
  N(CUPTI_ERROR_HARDWARE);
  N(CUPTI_ERROR_PARAMETER_SIZE_NOT_SUFFICIENT);
  N(CUPTI_ERROR_API_NOT_IMPLEMENTED);
  N(CUPTI_ERROR_MAX_LIMIT_REACHED);
  N(CUPTI_ERROR_NOT_READY);
  N(CUPTI_ERROR_NOT_COMPATIBLE);
  N(CUPTI_ERROR_NOT_INITIALIZED);
  N(CUPTI_ERROR_INVALID_METRIC_ID);
  N(CUPTI_ERROR_INVALID_METRIC_NAME);
  N(CUPTI_ERROR_QUEUE_EMPTY);
  N(CUPTI_ERROR_INVALID_HANDLE);
  N(CUPTI_ERROR_INVALID_STREAM);
  N(CUPTI_ERROR_INVALID_KIND);
  N(CUPTI_ERROR_INVALID_EVENT_VALUE);
  N(CUPTI_ERROR_DISABLED);
  N(CUPTI_ERROR_INVALID_MODULE);
  N(CUPTI_ERROR_INVALID_METRIC_VALUE);
  N(CUPTI_ERROR_HARDWARE_BUSY);
  N(CUPTI_ERROR_NOT_SUPPORTED);
  N(CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED);
  N(CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED_ON_DEVICE);
  N(CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED_ON_NON_P2P_DEVICES);
  N(CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED_WITH_MPS);
  N(CUPTI_ERROR_CDP_TRACING_NOT_SUPPORTED);
  N(CUPTI_ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED);
  N(CUPTI_ERROR_CUDA_COMPILER_NOT_COMPATIBLE);
  N(CUPTI_ERROR_INSUFFICIENT_PRIVILEGES);
  N(CUPTI_ERROR_LEGACY_PROFILER_NOT_SUPPORTED);
  N(CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED);
  N(CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES);
  N(CUPTI_ERROR_CONFIDENTIAL_COMPUTING_NOT_SUPPORTED);
  N(CUPTI_ERROR_CMP_DEVICE_NOT_SUPPORTED);
  N(CUPTI_ERROR_MIG_DEVICE_NOT_SUPPORTED);
  N(CUPTI_ERROR_SLI_DEVICE_NOT_SUPPORTED);
  N(CUPTI_ERROR_WSL_DEVICE_NOT_SUPPORTED);
  N(CUPTI_ERROR_INVALID_CHIP_NAME);
  N(CUPTI_ERROR_UNKNOWN);
  default: return NULL;
  }
#undef N
}

CU_API CUptiResult CUPTIAPI cuptiGetResultString(CUptiResult result, const char **str)
{
  if (!str)
    return cu_ret(CUPTI_ERROR_INVALID_PARAMETER);
  const char *n = result_name(result);
  *str = n ? n : "<unknown>";
  return n ? CUPTI_SUCCESS : cu_ret(CUPTI_ERROR_INVALID_PARAMETER);
}

/* The messages are the result names: this double has no prose of its own to offer. */
CU_API CUptiResult CUPTIAPI cuptiGetErrorMessage(CUptiResult result, const char **str)
{
  if (!str)
    return cu_ret(CUPTI_ERROR_INVALID_PARAMETER);
  const char *n = result_name(result);
  *str = n ? n : "<unknown>";
  return CUPTI_SUCCESS;
}

size_t cu_record_size(uint32_t kind)
{
  switch (kind) {
  case CUPTI_ACTIVITY_KIND_MEMCPY: return sizeof(CUpti_ActivityMemcpy6);
  case CUPTI_ACTIVITY_KIND_MEMSET: return sizeof(CUpti_ActivityMemset4);
  case CUPTI_ACTIVITY_KIND_KERNEL:
  case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: return sizeof(CUpti_ActivityKernel10);
  case CUPTI_ACTIVITY_KIND_DRIVER:
  case CUPTI_ACTIVITY_KIND_RUNTIME:
  case CUPTI_ACTIVITY_KIND_INTERNAL_LAUNCH_API: return sizeof(CUpti_ActivityAPI);
  case CUPTI_ACTIVITY_KIND_DEVICE: return sizeof(CUpti_ActivityDevice5);
  case CUPTI_ACTIVITY_KIND_CONTEXT: return sizeof(CUpti_ActivityContext3);
  case CUPTI_ACTIVITY_KIND_NAME: return sizeof(CUpti_ActivityName);
  case CUPTI_ACTIVITY_KIND_MARKER: return sizeof(CUpti_ActivityMarker2);
  case CUPTI_ACTIVITY_KIND_MARKER_DATA: return sizeof(CUpti_ActivityMarkerData2);
  case CUPTI_ACTIVITY_KIND_OVERHEAD: return sizeof(CUpti_ActivityOverhead3);
  case CUPTI_ACTIVITY_KIND_CDP_KERNEL: return sizeof(CUpti_ActivityCdpKernel);
  case CUPTI_ACTIVITY_KIND_PREEMPTION: return sizeof(CUpti_ActivityPreemption);
  case CUPTI_ACTIVITY_KIND_ENVIRONMENT: return sizeof(CUpti_ActivityEnvironment);
  case CUPTI_ACTIVITY_KIND_MEMCPY2: return sizeof(CUpti_ActivityMemcpyPtoP4);
  case CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER: return sizeof(CUpti_ActivityUnifiedMemoryCounter3);
  case CUPTI_ACTIVITY_KIND_FUNCTION: return sizeof(CUpti_ActivityFunction);
  case CUPTI_ACTIVITY_KIND_MODULE: return sizeof(CUpti_ActivityModule);
  case CUPTI_ACTIVITY_KIND_DEVICE_ATTRIBUTE: return sizeof(CUpti_ActivityDeviceAttribute);
  case CUPTI_ACTIVITY_KIND_OPENACC_DATA: return sizeof(CUpti_ActivityOpenAccData);
  case CUPTI_ACTIVITY_KIND_OPENACC_LAUNCH: return sizeof(CUpti_ActivityOpenAccLaunch);
  case CUPTI_ACTIVITY_KIND_OPENACC_OTHER: return sizeof(CUpti_ActivityOpenAccOther);
  case CUPTI_ACTIVITY_KIND_CUDA_EVENT: return sizeof(CUpti_ActivityCudaEvent2);
  case CUPTI_ACTIVITY_KIND_STREAM: return sizeof(CUpti_ActivityStream);
  case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: return sizeof(CUpti_ActivitySynchronization2);
  case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: return sizeof(CUpti_ActivityExternalCorrelation);
  case CUPTI_ACTIVITY_KIND_NVLINK: return sizeof(CUpti_ActivityNvLink4);
  case CUPTI_ACTIVITY_KIND_MEMORY: return sizeof(CUpti_ActivityMemory);
  case CUPTI_ACTIVITY_KIND_PCIE: return sizeof(CUpti_ActivityPcie);
  case CUPTI_ACTIVITY_KIND_OPENMP: return sizeof(CUpti_ActivityOpenMp);
  case CUPTI_ACTIVITY_KIND_MEMORY2: return sizeof(CUpti_ActivityMemory4);
  case CUPTI_ACTIVITY_KIND_MEMORY_POOL: return sizeof(CUpti_ActivityMemoryPool3);
  case CUPTI_ACTIVITY_KIND_GRAPH_TRACE: return sizeof(CUpti_ActivityGraphTrace2);
  case CUPTI_ACTIVITY_KIND_JIT: return sizeof(CUpti_ActivityJit2);
  case CUPTI_ACTIVITY_KIND_DEVICE_GRAPH_TRACE: return sizeof(CUpti_ActivityDeviceGraphTrace);
  case CUPTI_ACTIVITY_KIND_MEM_DECOMPRESS: return sizeof(CUpti_ActivityMemDecompress);
  case CUPTI_ACTIVITY_KIND_CONFIDENTIAL_COMPUTE_ROTATION:
    return sizeof(CUpti_ActivityConfidentialComputeRotation);
  default: return 0;
  }
}

/* The real 13.0 U1 behaviour (cupti.md 2.4, probed): the next record follows the previous
 * one at the size of its kind's current struct; the end of validSize comes before the kind
 * check, the kind check before the truncation check; *record is left alone on failure. */
CU_API CUptiResult CUPTIAPI cuptiActivityGetNextRecord(uint8_t *buffer, size_t validBufferSizeBytes,
                                                       CUpti_Activity **record)
{
  if (!buffer || !record)
    return cu_ret(CUPTI_ERROR_INVALID_PARAMETER);
  size_t off = 0;
  if (*record) {
    size_t prev = cu_record_size((*record)->kind);
    if (!prev)
      return cu_ret(CUPTI_ERROR_INVALID_KIND);
    off = (size_t)((uint8_t *)*record - buffer) + prev;
  }
  if (off >= validBufferSizeBytes)
    return cu_ret(CUPTI_ERROR_MAX_LIMIT_REACHED);
  size_t size = cu_record_size(((CUpti_Activity *)(buffer + off))->kind);
  if (!size)
    return cu_ret(CUPTI_ERROR_INVALID_KIND);
  if (off + size > validBufferSizeBytes)
    return cu_ret(CUPTI_ERROR_MAX_LIMIT_REACHED);
  *record = (CUpti_Activity *)(buffer + off);
  return CUPTI_SUCCESS;
}

/* ---- ids ---- */

CU_API CUptiResult CUPTIAPI cuptiGetContextId(CUcontext context, uint32_t *contextId)
{
  if (!context || !contextId)
    return cu_ret(CUPTI_ERROR_INVALID_PARAMETER);
  if (!cu_drv || cu_drv->context_id(context, contextId) != 0)
    return cu_ret(CUPTI_ERROR_INVALID_CONTEXT);
  return CUPTI_SUCCESS;
}

CU_API CUptiResult CUPTIAPI cuptiGetDeviceId(CUcontext context, uint32_t *deviceId)
{
  if (!deviceId)
    return cu_ret(CUPTI_ERROR_INVALID_PARAMETER);
  if (!cu_drv || cu_drv->device_id(context, deviceId) != 0)
    return cu_ret(CUPTI_ERROR_INVALID_CONTEXT);
  return CUPTI_SUCCESS;
}

CU_API CUptiResult CUPTIAPI cuptiGetStreamIdEx(CUcontext context, CUstream stream,
                                               uint8_t perThreadStream, uint32_t *streamId)
{
  if (!streamId)
    return cu_ret(CUPTI_ERROR_INVALID_PARAMETER);
  int rc = cu_drv ? cu_drv->stream_id(context, stream, perThreadStream, streamId) : -1;
  if (rc == -1)
    return cu_ret(CUPTI_ERROR_INVALID_CONTEXT);
  if (rc != 0)
    return cu_ret(CUPTI_ERROR_INVALID_STREAM);
  return CUPTI_SUCCESS;
}

CU_API CUptiResult CUPTIAPI cuptiGetStreamId(CUcontext context, CUstream stream, uint32_t *streamId)
{
  return cuptiGetStreamIdEx(context, stream, 0, streamId);
}

CU_API CUptiResult CUPTIAPI cuptiGetGraphNodeId(CUgraphNode node, uint64_t *nodeId)
{
  if (!node || !nodeId || !cu_drv || cu_drv->graph_node_id(node, nodeId) != 0)
    return cu_ret(CUPTI_ERROR_INVALID_PARAMETER);
  return CUPTI_SUCCESS;
}

CU_API CUptiResult CUPTIAPI cuptiGetGraphId(CUgraph graph, uint32_t *pId)
{
  if (!graph || !pId || !cu_drv || cu_drv->graph_id(graph, pId) != 0)
    return cu_ret(CUPTI_ERROR_INVALID_PARAMETER);
  return CUPTI_SUCCESS;
}

CU_API CUptiResult CUPTIAPI cuptiGetGraphExecId(CUgraphExec graphExec, uint32_t *pId)
{
  if (!graphExec || !pId || !cu_drv || cu_drv->graph_exec_id(graphExec, pId) != 0)
    return cu_ret(CUPTI_ERROR_INVALID_PARAMETER);
  return CUPTI_SUCCESS;
}

/* ---- finalize ---- */

/* cupti.md 2.8: forced flush, then everything off; the next call starts from scratch. Safe
 * to call twice and from an API EXIT callback (it delivers no API callbacks itself). */
CU_API CUptiResult CUPTIAPI cuptiFinalize(void)
{
  /* It flushes (forced) like cuptiActivityFlushAll: the same sites deadlock. */
  cu_check_deadlock_site("cuptiFinalize", 0);
  cu_callbacks_reset();
  cu_activity_reset();
  return CUPTI_SUCCESS;
}
