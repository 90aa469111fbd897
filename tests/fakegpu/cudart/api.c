/* Runtime double: memory, copies, streams, events, graphs and memory pools over the driver. */
#define _GNU_SOURCE
#include "tests/fakegpu/cudart/cudart.h"

#include <string.h>

#define DPTR(p) ((CUdeviceptr)(uintptr_t)(p))

/* ---- allocation ---- */

RT_API cudaError_t CUDARTAPI cudaMalloc(void **devPtr, size_t size)
{
  cudaMalloc_v3020_params p = {devPtr, size};
  BEGIN(RT_NEED_CONTEXT, cudaMalloc_v3020, &p);
  if (!devPtr)
    return rt_end_rt(&call_, cudaErrorInvalidValue);
  CUdeviceptr d = 0;
  CUresult r = size ? DRV(cuMemAlloc, &d, size) : CUDA_SUCCESS; /* 0 bytes: NULL, success */
  *devPtr = r == CUDA_SUCCESS ? (void *)(uintptr_t)d : NULL;
  return rt_end(&call_, r);
}

RT_API cudaError_t CUDARTAPI cudaFree(void *devPtr)
{
  cudaFree_v3020_params p = {devPtr};
  BEGIN(RT_NEED_CONTEXT, cudaFree_v3020, &p);
  /* cudaFree(NULL) is the idiom that initialises the runtime: nothing to free. */
  return rt_end(&call_, devPtr ? DRV(cuMemFree, DPTR(devPtr)) : CUDA_SUCCESS);
}

RT_API cudaError_t CUDARTAPI cudaMallocPitch(void **devPtr, size_t *pitch, size_t width,
                                             size_t height)
{
  cudaMallocPitch_v3020_params p = {devPtr, pitch, width, height};
  BEGIN(RT_NEED_CONTEXT, cudaMallocPitch_v3020, &p);
  if (!devPtr || !pitch)
    return rt_end_rt(&call_, cudaErrorInvalidValue);
  CUdeviceptr d = 0;
  CUresult r = DRV(cuMemAllocPitch, &d, pitch, width, height, 16);
  *devPtr = r == CUDA_SUCCESS ? (void *)(uintptr_t)d : NULL;
  return rt_end(&call_, r);
}

RT_API cudaError_t CUDARTAPI cudaMallocManaged(void **devPtr, size_t size, unsigned int flags)
{
  cudaMallocManaged_v6000_params p = {devPtr, size, flags};
  BEGIN(RT_NEED_CONTEXT, cudaMallocManaged_v6000, &p);
  if (!devPtr)
    return rt_end_rt(&call_, cudaErrorInvalidValue);
  CUdeviceptr d = 0;
  CUresult r = DRV(cuMemAllocManaged, &d, size, flags);
  *devPtr = r == CUDA_SUCCESS ? (void *)(uintptr_t)d : NULL;
  return rt_end(&call_, r);
}

RT_API cudaError_t CUDARTAPI cudaMallocHost(void **ptr, size_t size)
{
  cudaMallocHost_v3020_params p = {ptr, size};
  BEGIN(RT_NEED_CONTEXT, cudaMallocHost_v3020, &p);
  if (!ptr)
    return rt_end_rt(&call_, cudaErrorInvalidValue);
  return rt_end(&call_, DRV(cuMemAllocHost, ptr, size));
}

RT_API cudaError_t CUDARTAPI cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
  cudaHostAlloc_v3020_params p = {pHost, size, flags};
  BEGIN(RT_NEED_CONTEXT, cudaHostAlloc_v3020, &p);
  if (!pHost)
    return rt_end_rt(&call_, cudaErrorInvalidValue);
  /* cudaHostAlloc* flags have the values of CU_MEMHOSTALLOC_*. */
  return rt_end(&call_, DRV(cuMemHostAlloc, pHost, size, flags));
}

RT_API cudaError_t CUDARTAPI cudaFreeHost(void *ptr)
{
  cudaFreeHost_v3020_params p = {ptr};
  BEGIN(RT_NEED_CONTEXT, cudaFreeHost_v3020, &p);
  return rt_end(&call_, ptr ? DRV(cuMemFreeHost, ptr) : CUDA_SUCCESS);
}

RT_API cudaError_t CUDARTAPI cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream)
{
  cudaMallocAsync_v11020_params p = {devPtr, size, hStream};
  BEGIN(RT_NEED_CONTEXT, cudaMallocAsync_v11020, &p);
  if (!devPtr)
    return rt_end_rt(&call_, cudaErrorInvalidValue);
  CUdeviceptr d = 0;
  CUresult r = DRV(cuMemAllocAsync, &d, size, (CUstream)hStream);
  *devPtr = r == CUDA_SUCCESS ? (void *)(uintptr_t)d : NULL;
  return rt_end(&call_, r);
}

RT_API cudaError_t CUDARTAPI cudaFreeAsync(void *devPtr, cudaStream_t hStream)
{
  cudaFreeAsync_v11020_params p = {devPtr, hStream};
  BEGIN(RT_NEED_CONTEXT, cudaFreeAsync_v11020, &p);
  return rt_end(&call_, DRV(cuMemFreeAsync, DPTR(devPtr), (CUstream)hStream));
}

RT_API cudaError_t CUDARTAPI cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t memPool,
                                                     cudaStream_t stream)
{
  cudaMallocFromPoolAsync_v11020_params p = {ptr, size, memPool, stream};
  BEGIN(RT_NEED_CONTEXT, cudaMallocFromPoolAsync_v11020, &p);
  if (!ptr)
    return rt_end_rt(&call_, cudaErrorInvalidValue);
  CUdeviceptr d = 0;
  CUresult r = DRV(cuMemAllocFromPoolAsync, &d, size, (CUmemoryPool)memPool, (CUstream)stream);
  *ptr = r == CUDA_SUCCESS ? (void *)(uintptr_t)d : NULL;
  return rt_end(&call_, r);
}

/* ---- copies and sets ---- */

/* One copy through the driver function its direction calls for, as the real runtime does. */
static CUresult copy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                     cudaStream_t stream, int async)
{
  CUstream s = (CUstream)stream;
  if (count == 0)
    return CUDA_SUCCESS;
  switch (kind) {
  case cudaMemcpyHostToDevice:
    return async ? DRV(cuMemcpyHtoDAsync, DPTR(dst), src, count, s)
                 : DRV(cuMemcpyHtoD, DPTR(dst), src, count);
  case cudaMemcpyDeviceToHost:
    return async ? DRV(cuMemcpyDtoHAsync, dst, DPTR(src), count, s)
                 : DRV(cuMemcpyDtoH, dst, DPTR(src), count);
  case cudaMemcpyDeviceToDevice:
    return async ? DRV(cuMemcpyDtoDAsync, DPTR(dst), DPTR(src), count, s)
                 : DRV(cuMemcpyDtoD, DPTR(dst), DPTR(src), count);
  case cudaMemcpyHostToHost:
  case cudaMemcpyDefault:
    /* Unified addressing: the driver classifies the pointers. */
    return async ? DRV(cuMemcpyAsync, DPTR(dst), DPTR(src), count, s)
                 : DRV(cuMemcpy, DPTR(dst), DPTR(src), count);
  }
  return CUDA_ERROR_INVALID_VALUE;
}

static cudaError_t copy_end(struct rt_call *c, CUresult r, enum cudaMemcpyKind kind)
{
  if ((unsigned)kind > cudaMemcpyDefault)
    return rt_end_rt(c, cudaErrorInvalidMemcpyDirection);
  return rt_end(c, r);
}

RT_API cudaError_t CUDARTAPI cudaMemcpy(void *dst, const void *src, size_t count,
                                        enum cudaMemcpyKind kind)
{
  cudaMemcpy_v3020_params p = {dst, src, count, kind};
  BEGIN(RT_NEED_CONTEXT, cudaMemcpy_v3020, &p);
  return copy_end(&call_, copy(dst, src, count, kind, NULL, 0), kind);
}

RT_API cudaError_t CUDARTAPI cudaMemcpyAsync(void *dst, const void *src, size_t count,
                                             enum cudaMemcpyKind kind, cudaStream_t stream)
{
  cudaMemcpyAsync_v3020_params p = {dst, src, count, kind, stream};
  BEGIN(RT_NEED_CONTEXT, cudaMemcpyAsync_v3020, &p);
  return copy_end(&call_, copy(dst, src, count, kind, stream, 1), kind);
}

static void memcpy2d_params(CUDA_MEMCPY2D *m, void *dst, size_t dpitch, const void *src,
                            size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind)
{
  memset(m, 0, sizeof(*m));
  int src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  int dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  if (kind == cudaMemcpyDefault) {
    m->srcMemoryType = m->dstMemoryType = CU_MEMORYTYPE_UNIFIED;
    m->srcDevice = DPTR(src);
    m->dstDevice = DPTR(dst);
  } else {
    m->srcMemoryType = src_dev ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
    m->dstMemoryType = dst_dev ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
    if (src_dev)
      m->srcDevice = DPTR(src);
    else
      m->srcHost = src;
    if (dst_dev)
      m->dstDevice = DPTR(dst);
    else
      m->dstHost = dst;
  }
  m->srcPitch = spitch;
  m->dstPitch = dpitch;
  m->WidthInBytes = width;
  m->Height = height;
}

RT_API cudaError_t CUDARTAPI cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch,
                                          size_t width, size_t height, enum cudaMemcpyKind kind)
{
  cudaMemcpy2D_v3020_params p = {dst, dpitch, src, spitch, width, height, kind};
  BEGIN(RT_NEED_CONTEXT, cudaMemcpy2D_v3020, &p);
  CUDA_MEMCPY2D m;
  memcpy2d_params(&m, dst, dpitch, src, spitch, width, height, kind);
  return copy_end(&call_, DRV(cuMemcpy2D, &m), kind);
}

RT_API cudaError_t CUDARTAPI cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src,
                                               size_t spitch, size_t width, size_t height,
                                               enum cudaMemcpyKind kind, cudaStream_t stream)
{
  cudaMemcpy2DAsync_v3020_params p = {dst, dpitch, src, spitch, width, height, kind, stream};
  BEGIN(RT_NEED_CONTEXT, cudaMemcpy2DAsync_v3020, &p);
  CUDA_MEMCPY2D m;
  memcpy2d_params(&m, dst, dpitch, src, spitch, width, height, kind);
  return copy_end(&call_, DRV(cuMemcpy2DAsync, &m, (CUstream)stream), kind);
}

static CUresult peer_copy(void *dst, int dstDevice, const void *src, int srcDevice, size_t count,
                          cudaStream_t stream, int async)
{
  CUcontext dctx, sctx;
  CUresult r = rt_device_context(dstDevice, &dctx);
  if (r == CUDA_SUCCESS)
    r = rt_device_context(srcDevice, &sctx);
  if (r != CUDA_SUCCESS)
    return r;
  return async ? DRV(cuMemcpyPeerAsync, DPTR(dst), dctx, DPTR(src), sctx, count, (CUstream)stream)
               : DRV(cuMemcpyPeer, DPTR(dst), dctx, DPTR(src), sctx, count);
}

RT_API cudaError_t CUDARTAPI cudaMemcpyPeer(void *dst, int dstDevice, const void *src,
                                            int srcDevice, size_t count)
{
  cudaMemcpyPeer_v4000_params p = {dst, dstDevice, src, srcDevice, count};
  BEGIN(RT_NEED_CONTEXT, cudaMemcpyPeer_v4000, &p);
  return rt_end(&call_, peer_copy(dst, dstDevice, src, srcDevice, count, NULL, 0));
}

RT_API cudaError_t CUDARTAPI cudaMemcpyPeerAsync(void *dst, int dstDevice, const void *src,
                                                 int srcDevice, size_t count, cudaStream_t stream)
{
  cudaMemcpyPeerAsync_v4000_params p = {dst, dstDevice, src, srcDevice, count, stream};
  BEGIN(RT_NEED_CONTEXT, cudaMemcpyPeerAsync_v4000, &p);
  return rt_end(&call_, peer_copy(dst, dstDevice, src, srcDevice, count, stream, 1));
}

RT_API cudaError_t CUDARTAPI cudaMemset(void *devPtr, int value, size_t count)
{
  cudaMemset_v3020_params p = {devPtr, value, count};
  BEGIN(RT_NEED_CONTEXT, cudaMemset_v3020, &p);
  return rt_end(&call_, DRV(cuMemsetD8, DPTR(devPtr), (unsigned char)value, count));
}

RT_API cudaError_t CUDARTAPI cudaMemsetAsync(void *devPtr, int value, size_t count,
                                             cudaStream_t stream)
{
  cudaMemsetAsync_v3020_params p = {devPtr, value, count, stream};
  BEGIN(RT_NEED_CONTEXT, cudaMemsetAsync_v3020, &p);
  return rt_end(&call_,
                DRV(cuMemsetD8Async, DPTR(devPtr), (unsigned char)value, count, (CUstream)stream));
}

RT_API cudaError_t CUDARTAPI cudaPointerGetAttributes(struct cudaPointerAttributes *attributes,
                                                      const void *ptr)
{
  cudaPointerGetAttributes_v4000_params p = {attributes, ptr};
  BEGIN(RT_NEED_CONTEXT, cudaPointerGetAttributes_v4000, &p);
  if (!attributes)
    return rt_end_rt(&call_, cudaErrorInvalidValue);
  unsigned memtype = 0;
  int ordinal = -1;
  void *dev = NULL, *host = NULL;
  CUpointer_attribute which[] = {
      CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
      CU_POINTER_ATTRIBUTE_DEVICE_POINTER, CU_POINTER_ATTRIBUTE_HOST_POINTER};
  void *values[] = {&memtype, &ordinal, &dev, &host};
  CUresult r = DRV(cuPointerGetAttributes, 4, which, values, DPTR(ptr));
  memset(attributes, 0, sizeof(*attributes));
  if (r != CUDA_SUCCESS || memtype == 0) {
    /* Memory CUDA does not know is not an error since CUDA 11: "unregistered". */
    attributes->type = cudaMemoryTypeUnregistered;
    attributes->device = -2;
    attributes->hostPointer = (void *)ptr;
    return rt_end_rt(&call_, r == CUDA_ERROR_NOT_SUPPORTED ? cudaErrorNotSupported : cudaSuccess);
  }
  int managed = 0;
  CUpointer_attribute is_managed = CU_POINTER_ATTRIBUTE_IS_MANAGED;
  void *managed_value[] = {&managed};
  DRV(cuPointerGetAttributes, 1, &is_managed, managed_value, DPTR(ptr));
  attributes->type = managed                         ? cudaMemoryTypeManaged
                     : memtype == CU_MEMORYTYPE_HOST ? cudaMemoryTypeHost
                                                     : cudaMemoryTypeDevice;
  attributes->device = ordinal;
  attributes->devicePointer = dev;
  attributes->hostPointer = host;
  return rt_end_rt(&call_, cudaSuccess);
}

/* ---- memory pools ---- */

RT_API cudaError_t CUDARTAPI cudaDeviceGetDefaultMemPool(cudaMemPool_t *memPool, int device)
{
  cudaDeviceGetDefaultMemPool_v11020_params p = {memPool, device};
  BEGIN(RT_NEED_CONTEXT, cudaDeviceGetDefaultMemPool_v11020, &p);
  return rt_end(&call_, DRV(cuDeviceGetDefaultMemPool, (CUmemoryPool *)memPool, device));
}

RT_API cudaError_t CUDARTAPI cudaDeviceGetMemPool(cudaMemPool_t *memPool, int device)
{
  cudaDeviceGetMemPool_v11020_params p = {memPool, device};
  BEGIN(RT_NEED_CONTEXT, cudaDeviceGetMemPool_v11020, &p);
  return rt_end(&call_, DRV(cuDeviceGetMemPool, (CUmemoryPool *)memPool, device));
}

RT_API cudaError_t CUDARTAPI cudaDeviceSetMemPool(int device, cudaMemPool_t memPool)
{
  cudaDeviceSetMemPool_v11020_params p = {device, memPool};
  BEGIN(RT_NEED_CONTEXT, cudaDeviceSetMemPool_v11020, &p);
  return rt_end(&call_, DRV(cuDeviceSetMemPool, device, (CUmemoryPool)memPool));
}

RT_API cudaError_t CUDARTAPI cudaMemPoolCreate(cudaMemPool_t *memPool,
                                               const struct cudaMemPoolProps *poolProps)
{
  cudaMemPoolCreate_v11020_params p = {memPool, poolProps};
  BEGIN(RT_NEED_CONTEXT, cudaMemPoolCreate_v11020, &p);
  if (!memPool || !poolProps)
    return rt_end_rt(&call_, cudaErrorInvalidValue);
  CUmemPoolProps props;
  memset(&props, 0, sizeof(props));
  props.allocType = (CUmemAllocationType)poolProps->allocType;
  props.handleTypes = (CUmemAllocationHandleType)poolProps->handleTypes;
  props.location.type = (CUmemLocationType)poolProps->location.type;
  props.location.id = poolProps->location.id;
  props.maxSize = poolProps->maxSize;
  props.usage = poolProps->usage;
  return rt_end(&call_, DRV(cuMemPoolCreate, (CUmemoryPool *)memPool, &props));
}

RT_API cudaError_t CUDARTAPI cudaMemPoolDestroy(cudaMemPool_t memPool)
{
  cudaMemPoolDestroy_v11020_params p = {memPool};
  BEGIN(RT_NEED_CONTEXT, cudaMemPoolDestroy_v11020, &p);
  return rt_end(&call_, DRV(cuMemPoolDestroy, (CUmemoryPool)memPool));
}

RT_API cudaError_t CUDARTAPI cudaMemPoolSetAttribute(cudaMemPool_t memPool,
                                                     enum cudaMemPoolAttr attr, void *value)
{
  cudaMemPoolSetAttribute_v11020_params p = {memPool, attr, value};
  BEGIN(RT_NEED_CONTEXT, cudaMemPoolSetAttribute_v11020, &p);
  /* cudaMemPoolAttr and CUmemPool_attribute share their numbering. */
  return rt_end(
      &call_, DRV(cuMemPoolSetAttribute, (CUmemoryPool)memPool, (CUmemPool_attribute)attr, value));
}

RT_API cudaError_t CUDARTAPI cudaMemPoolGetAttribute(cudaMemPool_t memPool,
                                                     enum cudaMemPoolAttr attr, void *value)
{
  cudaMemPoolGetAttribute_v11020_params p = {memPool, attr, value};
  BEGIN(RT_NEED_CONTEXT, cudaMemPoolGetAttribute_v11020, &p);
  return rt_end(
      &call_, DRV(cuMemPoolGetAttribute, (CUmemoryPool)memPool, (CUmemPool_attribute)attr, value));
}

RT_API cudaError_t CUDARTAPI cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t minBytesToKeep)
{
  cudaMemPoolTrimTo_v11020_params p = {memPool, minBytesToKeep};
  BEGIN(RT_NEED_CONTEXT, cudaMemPoolTrimTo_v11020, &p);
  return rt_end(&call_, DRV(cuMemPoolTrimTo, (CUmemoryPool)memPool, minBytesToKeep));
}

/* ---- streams ---- */

RT_API cudaError_t CUDARTAPI cudaStreamCreate(cudaStream_t *pStream)
{
  cudaStreamCreate_v3020_params p = {pStream};
  BEGIN(RT_NEED_CONTEXT, cudaStreamCreate_v3020, &p);
  return rt_end(&call_, DRV(cuStreamCreate, (CUstream *)pStream, CU_STREAM_DEFAULT));
}

RT_API cudaError_t CUDARTAPI cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags)
{
  cudaStreamCreateWithFlags_v5000_params p = {pStream, flags};
  BEGIN(RT_NEED_CONTEXT, cudaStreamCreateWithFlags_v5000, &p);
  return rt_end(&call_, DRV(cuStreamCreate, (CUstream *)pStream, flags));
}

RT_API cudaError_t CUDARTAPI cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags,
                                                          int priority)
{
  cudaStreamCreateWithPriority_v5050_params p = {pStream, flags, priority};
  BEGIN(RT_NEED_CONTEXT, cudaStreamCreateWithPriority_v5050, &p);
  return rt_end(&call_, DRV(cuStreamCreateWithPriority, (CUstream *)pStream, flags, priority));
}

RT_API cudaError_t CUDARTAPI cudaStreamDestroy(cudaStream_t stream)
{
  cudaStreamDestroy_v5050_params p = {stream};
  BEGIN(RT_NEED_CONTEXT, cudaStreamDestroy_v5050, &p);
  return rt_end(&call_, DRV(cuStreamDestroy, (CUstream)stream));
}

RT_API cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t stream)
{
  cudaStreamSynchronize_v3020_params p = {stream};
  BEGIN(RT_NEED_CONTEXT, cudaStreamSynchronize_v3020, &p);
  return rt_end(&call_, DRV(cuStreamSynchronize, (CUstream)stream));
}

RT_API cudaError_t CUDARTAPI cudaStreamQuery(cudaStream_t stream)
{
  cudaStreamQuery_v3020_params p = {stream};
  BEGIN(RT_NEED_CONTEXT, cudaStreamQuery_v3020, &p);
  return rt_end(&call_, DRV(cuStreamQuery, (CUstream)stream));
}

RT_API cudaError_t CUDARTAPI cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event,
                                                 unsigned int flags)
{
  cudaStreamWaitEvent_v3020_params p = {stream, event, flags};
  BEGIN(RT_NEED_CONTEXT, cudaStreamWaitEvent_v3020, &p);
  return rt_end(&call_, DRV(cuStreamWaitEvent, (CUstream)stream, (CUevent)event, flags));
}

RT_API cudaError_t CUDARTAPI cudaStreamBeginCapture(cudaStream_t stream,
                                                    enum cudaStreamCaptureMode mode)
{
  cudaStreamBeginCapture_v10000_params p = {stream, mode};
  BEGIN(RT_NEED_CONTEXT, cudaStreamBeginCapture_v10000, &p);
  return rt_end(&call_, DRV(cuStreamBeginCapture, (CUstream)stream, (CUstreamCaptureMode)mode));
}

RT_API cudaError_t CUDARTAPI cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph)
{
  cudaStreamEndCapture_v10000_params p = {stream, pGraph};
  BEGIN(RT_NEED_CONTEXT, cudaStreamEndCapture_v10000, &p);
  return rt_end(&call_, DRV(cuStreamEndCapture, (CUstream)stream, (CUgraph *)pGraph));
}

RT_API cudaError_t CUDARTAPI cudaStreamIsCapturing(cudaStream_t stream,
                                                   enum cudaStreamCaptureStatus *pCaptureStatus)
{
  cudaStreamIsCapturing_v10000_params p = {stream, pCaptureStatus};
  BEGIN(RT_NEED_CONTEXT, cudaStreamIsCapturing_v10000, &p);
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  CUresult r = DRV(cuStreamIsCapturing, (CUstream)stream, &st);
  if (r == CUDA_SUCCESS && pCaptureStatus)
    *pCaptureStatus = (enum cudaStreamCaptureStatus)st;
  return rt_end(&call_, r);
}

/* ---- events ---- */

RT_API cudaError_t CUDARTAPI cudaEventCreate(cudaEvent_t *event)
{
  cudaEventCreate_v3020_params p = {event};
  BEGIN(RT_NEED_CONTEXT, cudaEventCreate_v3020, &p);
  return rt_end(&call_, DRV(cuEventCreate, (CUevent *)event, CU_EVENT_DEFAULT));
}

RT_API cudaError_t CUDARTAPI cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
  cudaEventCreateWithFlags_v3020_params p = {event, flags};
  BEGIN(RT_NEED_CONTEXT, cudaEventCreateWithFlags_v3020, &p);
  return rt_end(&call_, DRV(cuEventCreate, (CUevent *)event, flags));
}

RT_API cudaError_t CUDARTAPI cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
  cudaEventRecord_v3020_params p = {event, stream};
  BEGIN(RT_NEED_CONTEXT, cudaEventRecord_v3020, &p);
  return rt_end(&call_, DRV(cuEventRecord, (CUevent)event, (CUstream)stream));
}

RT_API cudaError_t CUDARTAPI cudaEventSynchronize(cudaEvent_t event)
{
  cudaEventSynchronize_v3020_params p = {event};
  BEGIN(RT_NEED_CONTEXT, cudaEventSynchronize_v3020, &p);
  return rt_end(&call_, DRV(cuEventSynchronize, (CUevent)event));
}

RT_API cudaError_t CUDARTAPI cudaEventQuery(cudaEvent_t event)
{
  cudaEventQuery_v3020_params p = {event};
  BEGIN(RT_NEED_CONTEXT, cudaEventQuery_v3020, &p);
  return rt_end(&call_, DRV(cuEventQuery, (CUevent)event));
}

RT_API cudaError_t CUDARTAPI cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
  cudaEventElapsedTime_v12080_params p = {ms, start, end};
  BEGIN(RT_NEED_CONTEXT, cudaEventElapsedTime_v12080, &p);
  return rt_end(&call_, DRV(cuEventElapsedTime, ms, (CUevent)start, (CUevent)end));
}

RT_API cudaError_t CUDARTAPI cudaEventDestroy(cudaEvent_t event)
{
  cudaEventDestroy_v3020_params p = {event};
  BEGIN(RT_NEED_CONTEXT, cudaEventDestroy_v3020, &p);
  return rt_end(&call_, DRV(cuEventDestroy, (CUevent)event));
}

/* ---- graphs ---- */

RT_API cudaError_t CUDARTAPI cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                                  unsigned long long flags)
{
  cudaGraphInstantiate_v12000_params p = {pGraphExec, graph, flags};
  BEGIN(RT_NEED_CONTEXT, cudaGraphInstantiate_v12000, &p);
  return rt_end(&call_, DRV(cuGraphInstantiate, (CUgraphExec *)pGraphExec, (CUgraph)graph, flags));
}

RT_API cudaError_t CUDARTAPI cudaGraphInstantiateWithFlags(cudaGraphExec_t *pGraphExec,
                                                           cudaGraph_t graph,
                                                           unsigned long long flags)
{
  cudaGraphInstantiateWithFlags_v11040_params p = {pGraphExec, graph, flags};
  BEGIN(RT_NEED_CONTEXT, cudaGraphInstantiateWithFlags_v11040, &p);
  return rt_end(&call_, DRV(cuGraphInstantiate, (CUgraphExec *)pGraphExec, (CUgraph)graph, flags));
}

RT_API cudaError_t CUDARTAPI cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream)
{
  cudaGraphLaunch_v10000_params p = {graphExec, stream};
  BEGIN(RT_NEED_CONTEXT, cudaGraphLaunch_v10000, &p);
  return rt_end(&call_, DRV(cuGraphLaunch, (CUgraphExec)graphExec, (CUstream)stream));
}

RT_API cudaError_t CUDARTAPI cudaGraphExecDestroy(cudaGraphExec_t graphExec)
{
  cudaGraphExecDestroy_v10000_params p = {graphExec};
  BEGIN(RT_NEED_CONTEXT, cudaGraphExecDestroy_v10000, &p);
  return rt_end(&call_, DRV(cuGraphExecDestroy, (CUgraphExec)graphExec));
}

RT_API cudaError_t CUDARTAPI cudaGraphDestroy(cudaGraph_t graph)
{
  cudaGraphDestroy_v10000_params p = {graph};
  BEGIN(RT_NEED_CONTEXT, cudaGraphDestroy_v10000, &p);
  return rt_end(&call_, DRV(cuGraphDestroy, (CUgraph)graph));
}
