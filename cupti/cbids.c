/* The one table of CUDA API callbacks the agent enables, and what each one means to it. */
#include "cupti/cbids.h"

#include <stddef.h>

#include "agent/alloc_map.h"

/*
 * Enabling only these callbacks (instead of whole domains) keeps the per-call cost of every
 * other CUDA API at zero. A launch, copy or set that is missing here still produces its
 * device record; it is then counted as having an unknown correlation, so a gap shows up in
 * the summary rather than silently.
 *
 * CUDA 13 nvcc compiles <<<>>> to __cudaGetKernel (once per kernel) + __cudaLaunchKernel
 * (cbids 504/505/506) instead of cudaLaunchKernel; 504 only looks the kernel up and is not
 * traced. Binaries built with CUDA <= 12 still call cudaLaunchKernel (211/214).
 */
#define RT_ID(name) CUPTI_RUNTIME_TRACE_CBID_##name
#define DRV_ID(name) CUPTI_DRIVER_TRACE_CBID_##name

#define RT(name, cls)                                                                              \
  {                                                                                                \
    CUPTI_CB_DOMAIN_RUNTIME_API, RT_ID(name), cls, CBID_PARAMS_NONE, 0, 0, 0                       \
  }
#define DRV(name, cls)                                                                             \
  {                                                                                                \
    CUPTI_CB_DOMAIN_DRIVER_API, DRV_ID(name), cls, CBID_PARAMS_NONE, 0, 0, 0                       \
  }

#define RT_ALLOC(name, kind, out, size)                                                            \
  {                                                                                                \
    CUPTI_CB_DOMAIN_RUNTIME_API, RT_ID(name), CBID_ALLOC, CBID_PARAMS_OUT_PTR_SIZE, kind,          \
        offsetof(name##_params, out), offsetof(name##_params, size)                                \
  }
#define DRV_ALLOC(name, kind, out, size)                                                           \
  {                                                                                                \
    CUPTI_CB_DOMAIN_DRIVER_API, DRV_ID(name), CBID_ALLOC, CBID_PARAMS_OUT_PTR_SIZE, kind,          \
        offsetof(name##_params, out), offsetof(name##_params, size)                                \
  }
#define RT_FREE(name, ptr)                                                                         \
  {                                                                                                \
    CUPTI_CB_DOMAIN_RUNTIME_API, RT_ID(name), CBID_FREE, CBID_PARAMS_IN_PTR, 0,                    \
        offsetof(name##_params, ptr), 0                                                            \
  }
#define DRV_FREE(name, ptr)                                                                        \
  {                                                                                                \
    CUPTI_CB_DOMAIN_DRIVER_API, DRV_ID(name), CBID_FREE, CBID_PARAMS_IN_PTR, 0,                    \
        offsetof(name##_params, ptr), 0                                                            \
  }

static const struct cbid_entry table[] = {
    /* ---- kernel launches ---- */
    RT(cudaLaunchKernel_v7000, CBID_LAUNCH),
    RT(cudaLaunchKernel_ptsz_v7000, CBID_LAUNCH),
    RT(cudaLaunchKernelExC_v11060, CBID_LAUNCH),
    RT(cudaLaunchKernelExC_ptsz_v11060, CBID_LAUNCH),
    RT(cudaLaunchCooperativeKernel_v9000, CBID_LAUNCH),
    RT(cudaLaunchCooperativeKernel_ptsz_v9000, CBID_LAUNCH),
    RT(__cudaLaunchKernel_v13000, CBID_LAUNCH),
    RT(__cudaLaunchKernel_ptsz_v13000, CBID_LAUNCH),
    RT(cudaLaunchHostFunc_v10000, CBID_LAUNCH),
    RT(cudaLaunchHostFunc_ptsz_v10000, CBID_LAUNCH),
    DRV(cuLaunchKernel, CBID_LAUNCH),
    DRV(cuLaunchKernel_ptsz, CBID_LAUNCH),
    DRV(cuLaunchKernelEx, CBID_LAUNCH),
    DRV(cuLaunchKernelEx_ptsz, CBID_LAUNCH),
    DRV(cuLaunchCooperativeKernel, CBID_LAUNCH),
    DRV(cuLaunchCooperativeKernel_ptsz, CBID_LAUNCH),
    DRV(cuLaunchHostFunc, CBID_LAUNCH),
    DRV(cuLaunchHostFunc_ptsz, CBID_LAUNCH),
    DRV(cuLaunch, CBID_LAUNCH),
    DRV(cuLaunchGrid, CBID_LAUNCH),
    DRV(cuLaunchGridAsync, CBID_LAUNCH),

    /* ---- graph launches ---- */
    RT(cudaGraphLaunch_v10000, CBID_GRAPH_LAUNCH),
    RT(cudaGraphLaunch_ptsz_v10000, CBID_GRAPH_LAUNCH),
    DRV(cuGraphLaunch, CBID_GRAPH_LAUNCH),
    DRV(cuGraphLaunch_ptsz, CBID_GRAPH_LAUNCH),

    /* ---- allocations ---- */
    RT_ALLOC(cudaMalloc_v3020, ALLOC_KIND_DEVICE, devPtr, size),
    {CUPTI_CB_DOMAIN_RUNTIME_API, RT_ID(cudaMallocPitch_v3020), CBID_ALLOC, CBID_PARAMS_RT_PITCH,
     ALLOC_KIND_DEVICE, 0, 0},
    {CUPTI_CB_DOMAIN_RUNTIME_API, RT_ID(cudaMalloc3D_v3020), CBID_ALLOC, CBID_PARAMS_RT_3D,
     ALLOC_KIND_DEVICE, 0, 0},
    RT_ALLOC(cudaMallocHost_v3020, ALLOC_KIND_PINNED, ptr, size),
    RT_ALLOC(cudaHostAlloc_v3020, ALLOC_KIND_PINNED, pHost, size),
    RT_ALLOC(cudaMallocManaged_v6000, ALLOC_KIND_MANAGED, devPtr, size),
    RT_ALLOC(cudaMallocAsync_v11020, ALLOC_KIND_ASYNC, devPtr, size),
    RT_ALLOC(cudaMallocAsync_ptsz_v11020, ALLOC_KIND_ASYNC, devPtr, size),
    RT_ALLOC(cudaMallocFromPoolAsync_v11020, ALLOC_KIND_ASYNC, ptr, size),
    RT_ALLOC(cudaMallocFromPoolAsync_ptsz_v11020, ALLOC_KIND_ASYNC, ptr, size),
    DRV_ALLOC(cuMemAlloc_v2, ALLOC_KIND_DEVICE, dptr, bytesize),
    {CUPTI_CB_DOMAIN_DRIVER_API, DRV_ID(cuMemAllocPitch_v2), CBID_ALLOC, CBID_PARAMS_DRV_PITCH,
     ALLOC_KIND_DEVICE, 0, 0},
    DRV_ALLOC(cuMemAllocHost_v2, ALLOC_KIND_PINNED, pp, bytesize),
    DRV_ALLOC(cuMemHostAlloc, ALLOC_KIND_PINNED, pp, bytesize),
    DRV_ALLOC(cuMemAllocManaged, ALLOC_KIND_MANAGED, dptr, bytesize),
    DRV_ALLOC(cuMemAllocAsync, ALLOC_KIND_ASYNC, dptr, bytesize),
    DRV_ALLOC(cuMemAllocAsync_ptsz, ALLOC_KIND_ASYNC, dptr, bytesize),
    DRV_ALLOC(cuMemAllocFromPoolAsync, ALLOC_KIND_ASYNC, dptr, bytesize),
    DRV_ALLOC(cuMemAllocFromPoolAsync_ptsz, ALLOC_KIND_ASYNC, dptr, bytesize),
    {CUPTI_CB_DOMAIN_DRIVER_API, DRV_ID(cuMemCreate), CBID_ALLOC, CBID_PARAMS_VMM_CREATE,
     ALLOC_KIND_VMM, offsetof(cuMemCreate_params, handle), offsetof(cuMemCreate_params, size)},

    /* ---- frees ---- */
    RT_FREE(cudaFree_v3020, devPtr),
    RT_FREE(cudaFreeHost_v3020, ptr),
    RT_FREE(cudaFreeAsync_v11020, devPtr),
    RT_FREE(cudaFreeAsync_ptsz_v11020, devPtr),
    DRV_FREE(cuMemFree_v2, dptr),
    DRV_FREE(cuMemFreeHost, p),
    DRV_FREE(cuMemFreeAsync, dptr),
    DRV_FREE(cuMemFreeAsync_ptsz, dptr),
    {CUPTI_CB_DOMAIN_DRIVER_API, DRV_ID(cuMemRelease), CBID_FREE, CBID_PARAMS_VMM_RELEASE, 0,
     offsetof(cuMemRelease_params, handle), 0},

    /* ---- VMM address space and mappings (physical memory is cuMemCreate/Release; it is
     * freed once released and unmapped, in either order: agent/alloc_map.h) ---- */
    DRV(cuMemAddressReserve, CBID_VMM),
    DRV(cuMemAddressFree, CBID_VMM),
    {CUPTI_CB_DOMAIN_DRIVER_API, DRV_ID(cuMemMap), CBID_VMM, CBID_PARAMS_VMM_MAP, 0, 0, 0},
    {CUPTI_CB_DOMAIN_DRIVER_API, DRV_ID(cuMemUnmap), CBID_VMM, CBID_PARAMS_VMM_UNMAP, 0, 0, 0},
    {CUPTI_CB_DOMAIN_DRIVER_API, DRV_ID(cuMemRetainAllocationHandle), CBID_VMM,
     CBID_PARAMS_VMM_RETAIN, 0, 0, 0},

    /* ---- memory pools (joins MEMORY_POOL records) ---- */
    RT(cudaMemPoolCreate_v11020, CBID_POOL),
    RT(cudaMemPoolDestroy_v11020, CBID_POOL),
    RT(cudaMemPoolTrimTo_v11020, CBID_POOL),
    DRV(cuMemPoolCreate, CBID_POOL),
    DRV(cuMemPoolDestroy, CBID_POOL),
    DRV(cuMemPoolTrimTo, CBID_POOL),

    /* ---- copies ---- */
    RT(cudaMemcpy_v3020, CBID_MEMCPY),
    RT(cudaMemcpy_ptds_v7000, CBID_MEMCPY),
    RT(cudaMemcpyAsync_v3020, CBID_MEMCPY),
    RT(cudaMemcpyAsync_ptsz_v7000, CBID_MEMCPY),
    RT(cudaMemcpy2D_v3020, CBID_MEMCPY),
    RT(cudaMemcpy2D_ptds_v7000, CBID_MEMCPY),
    RT(cudaMemcpy2DAsync_v3020, CBID_MEMCPY),
    RT(cudaMemcpy2DAsync_ptsz_v7000, CBID_MEMCPY),
    RT(cudaMemcpy3D_v3020, CBID_MEMCPY),
    RT(cudaMemcpy3D_ptds_v7000, CBID_MEMCPY),
    RT(cudaMemcpy3DAsync_v3020, CBID_MEMCPY),
    RT(cudaMemcpy3DAsync_ptsz_v7000, CBID_MEMCPY),
    RT(cudaMemcpyToArray_v3020, CBID_MEMCPY),
    RT(cudaMemcpyFromArray_v3020, CBID_MEMCPY),
    RT(cudaMemcpy2DToArray_v3020, CBID_MEMCPY),
    RT(cudaMemcpy2DFromArray_v3020, CBID_MEMCPY),
    RT(cudaMemcpyToArray_ptds_v7000, CBID_MEMCPY),
    RT(cudaMemcpyFromArray_ptds_v7000, CBID_MEMCPY),
    RT(cudaMemcpy2DToArray_ptds_v7000, CBID_MEMCPY),
    RT(cudaMemcpy2DFromArray_ptds_v7000, CBID_MEMCPY),
    RT(cudaMemcpyToArrayAsync_v3020, CBID_MEMCPY),
    RT(cudaMemcpyToArrayAsync_ptsz_v7000, CBID_MEMCPY),
    RT(cudaMemcpyFromArrayAsync_v3020, CBID_MEMCPY),
    RT(cudaMemcpyFromArrayAsync_ptsz_v7000, CBID_MEMCPY),
    RT(cudaMemcpy2DToArrayAsync_v3020, CBID_MEMCPY),
    RT(cudaMemcpy2DToArrayAsync_ptsz_v7000, CBID_MEMCPY),
    RT(cudaMemcpy2DFromArrayAsync_v3020, CBID_MEMCPY),
    RT(cudaMemcpy2DFromArrayAsync_ptsz_v7000, CBID_MEMCPY),
    RT(cudaMemcpyArrayToArray_v3020, CBID_MEMCPY),
    RT(cudaMemcpyArrayToArray_ptds_v7000, CBID_MEMCPY),
    RT(cudaMemcpy2DArrayToArray_v3020, CBID_MEMCPY),
    RT(cudaMemcpy2DArrayToArray_ptds_v7000, CBID_MEMCPY),
    RT(cudaMemcpyToSymbol_v3020, CBID_MEMCPY),
    RT(cudaMemcpyToSymbol_ptds_v7000, CBID_MEMCPY),
    RT(cudaMemcpyFromSymbol_v3020, CBID_MEMCPY),
    RT(cudaMemcpyFromSymbol_ptds_v7000, CBID_MEMCPY),
    RT(cudaMemcpyToSymbolAsync_v3020, CBID_MEMCPY),
    RT(cudaMemcpyToSymbolAsync_ptsz_v7000, CBID_MEMCPY),
    RT(cudaMemcpyFromSymbolAsync_v3020, CBID_MEMCPY),
    RT(cudaMemcpyFromSymbolAsync_ptsz_v7000, CBID_MEMCPY),
    RT(cudaMemcpyPeer_v4000, CBID_MEMCPY),
    RT(cudaMemcpyPeerAsync_v4000, CBID_MEMCPY),
    RT(cudaMemcpy3DPeer_v4000, CBID_MEMCPY),
    RT(cudaMemcpy3DPeer_ptds_v7000, CBID_MEMCPY),
    RT(cudaMemcpy3DPeerAsync_v4000, CBID_MEMCPY),
    RT(cudaMemcpy3DPeerAsync_ptsz_v7000, CBID_MEMCPY),
    RT(cudaMemcpyBatchAsync_v12080, CBID_MEMCPY),
    RT(cudaMemcpyBatchAsync_ptsz_v12080, CBID_MEMCPY),
    RT(cudaMemcpy3DBatchAsync_v12080, CBID_MEMCPY),
    RT(cudaMemcpy3DBatchAsync_ptsz_v12080, CBID_MEMCPY),
    RT(cudaMemcpyBatchAsync_v13000, CBID_MEMCPY),
    RT(cudaMemcpyBatchAsync_ptsz_v13000, CBID_MEMCPY),
    RT(cudaMemcpy3DBatchAsync_v13000, CBID_MEMCPY),
    RT(cudaMemcpy3DBatchAsync_ptsz_v13000, CBID_MEMCPY),
    DRV(cuMemcpy, CBID_MEMCPY),
    DRV(cuMemcpy_ptds, CBID_MEMCPY),
    DRV(cuMemcpyAsync, CBID_MEMCPY),
    DRV(cuMemcpyAsync_ptsz, CBID_MEMCPY),
    DRV(cuMemcpyHtoD_v2, CBID_MEMCPY),
    DRV(cuMemcpyHtoD_v2_ptds, CBID_MEMCPY),
    DRV(cuMemcpyHtoDAsync_v2, CBID_MEMCPY),
    DRV(cuMemcpyHtoDAsync_v2_ptsz, CBID_MEMCPY),
    DRV(cuMemcpyDtoH_v2, CBID_MEMCPY),
    DRV(cuMemcpyDtoH_v2_ptds, CBID_MEMCPY),
    DRV(cuMemcpyDtoHAsync_v2, CBID_MEMCPY),
    DRV(cuMemcpyDtoHAsync_v2_ptsz, CBID_MEMCPY),
    DRV(cuMemcpyDtoD_v2, CBID_MEMCPY),
    DRV(cuMemcpyDtoD_v2_ptds, CBID_MEMCPY),
    DRV(cuMemcpyDtoDAsync_v2, CBID_MEMCPY),
    DRV(cuMemcpyDtoDAsync_v2_ptsz, CBID_MEMCPY),
    DRV(cuMemcpyHtoA_v2, CBID_MEMCPY),
    DRV(cuMemcpyHtoA_v2_ptds, CBID_MEMCPY),
    DRV(cuMemcpyAtoH_v2, CBID_MEMCPY),
    DRV(cuMemcpyAtoH_v2_ptds, CBID_MEMCPY),
    DRV(cuMemcpyHtoAAsync_v2, CBID_MEMCPY),
    DRV(cuMemcpyHtoAAsync_v2_ptsz, CBID_MEMCPY),
    DRV(cuMemcpyAtoHAsync_v2, CBID_MEMCPY),
    DRV(cuMemcpyAtoHAsync_v2_ptsz, CBID_MEMCPY),
    DRV(cuMemcpyAtoD_v2, CBID_MEMCPY),
    DRV(cuMemcpyAtoD_v2_ptds, CBID_MEMCPY),
    DRV(cuMemcpyDtoA_v2, CBID_MEMCPY),
    DRV(cuMemcpyDtoA_v2_ptds, CBID_MEMCPY),
    DRV(cuMemcpyAtoA_v2, CBID_MEMCPY),
    DRV(cuMemcpyAtoA_v2_ptds, CBID_MEMCPY),
    DRV(cuMemcpy2D_v2, CBID_MEMCPY),
    DRV(cuMemcpy2D_v2_ptds, CBID_MEMCPY),
    DRV(cuMemcpy2DUnaligned_v2, CBID_MEMCPY),
    DRV(cuMemcpy2DUnaligned_v2_ptds, CBID_MEMCPY),
    DRV(cuMemcpy2DAsync_v2, CBID_MEMCPY),
    DRV(cuMemcpy2DAsync_v2_ptsz, CBID_MEMCPY),
    DRV(cuMemcpy3D_v2, CBID_MEMCPY),
    DRV(cuMemcpy3D_v2_ptds, CBID_MEMCPY),
    DRV(cuMemcpy3DAsync_v2, CBID_MEMCPY),
    DRV(cuMemcpy3DAsync_v2_ptsz, CBID_MEMCPY),
    DRV(cuMemcpyPeer, CBID_MEMCPY),
    DRV(cuMemcpyPeer_ptds, CBID_MEMCPY),
    DRV(cuMemcpyPeerAsync, CBID_MEMCPY),
    DRV(cuMemcpyPeerAsync_ptsz, CBID_MEMCPY),
    DRV(cuMemcpy3DPeer, CBID_MEMCPY),
    DRV(cuMemcpy3DPeer_ptds, CBID_MEMCPY),
    DRV(cuMemcpy3DPeerAsync, CBID_MEMCPY),
    DRV(cuMemcpy3DPeerAsync_ptsz, CBID_MEMCPY),
/* The first versions: what driver-API code built with CUDA 12.8/12.9 headers calls. Not
 * through DRV(): cuda.h #defines these names to their _v2, which DRV() would expand. */
#define DRV_V1_COPY(id)                                                                            \
  {                                                                                                \
    CUPTI_CB_DOMAIN_DRIVER_API, id, CBID_MEMCPY, CBID_PARAMS_NONE, 0, 0, 0                         \
  }
    DRV_V1_COPY(CUPTI_DRIVER_TRACE_CBID_cuMemcpyBatchAsync),
    DRV_V1_COPY(CUPTI_DRIVER_TRACE_CBID_cuMemcpyBatchAsync_ptsz),
    DRV_V1_COPY(CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DBatchAsync),
    DRV_V1_COPY(CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DBatchAsync_ptsz),
#undef DRV_V1_COPY
    DRV(cuMemcpyBatchAsync_v2, CBID_MEMCPY),
    DRV(cuMemcpyBatchAsync_v2_ptsz, CBID_MEMCPY),
    DRV(cuMemcpy3DBatchAsync_v2, CBID_MEMCPY),
    DRV(cuMemcpy3DBatchAsync_v2_ptsz, CBID_MEMCPY),

    /* ---- sets ---- */
    RT(cudaMemset_v3020, CBID_MEMSET),
    RT(cudaMemset_ptds_v7000, CBID_MEMSET),
    RT(cudaMemsetAsync_v3020, CBID_MEMSET),
    RT(cudaMemsetAsync_ptsz_v7000, CBID_MEMSET),
    RT(cudaMemset2D_v3020, CBID_MEMSET),
    RT(cudaMemset2D_ptds_v7000, CBID_MEMSET),
    RT(cudaMemset2DAsync_v3020, CBID_MEMSET),
    RT(cudaMemset2DAsync_ptsz_v7000, CBID_MEMSET),
    RT(cudaMemset3D_v3020, CBID_MEMSET),
    RT(cudaMemset3D_ptds_v7000, CBID_MEMSET),
    RT(cudaMemset3DAsync_v3020, CBID_MEMSET),
    RT(cudaMemset3DAsync_ptsz_v7000, CBID_MEMSET),
    DRV(cuMemsetD8_v2, CBID_MEMSET),
    DRV(cuMemsetD8_v2_ptds, CBID_MEMSET),
    DRV(cuMemsetD16_v2, CBID_MEMSET),
    DRV(cuMemsetD16_v2_ptds, CBID_MEMSET),
    DRV(cuMemsetD32_v2, CBID_MEMSET),
    DRV(cuMemsetD32_v2_ptds, CBID_MEMSET),
    DRV(cuMemsetD2D8_v2, CBID_MEMSET),
    DRV(cuMemsetD2D8_v2_ptds, CBID_MEMSET),
    DRV(cuMemsetD2D16_v2, CBID_MEMSET),
    DRV(cuMemsetD2D16_v2_ptds, CBID_MEMSET),
    DRV(cuMemsetD2D32_v2, CBID_MEMSET),
    DRV(cuMemsetD2D32_v2_ptds, CBID_MEMSET),
    DRV(cuMemsetD8Async, CBID_MEMSET),
    DRV(cuMemsetD8Async_ptsz, CBID_MEMSET),
    DRV(cuMemsetD16Async, CBID_MEMSET),
    DRV(cuMemsetD16Async_ptsz, CBID_MEMSET),
    DRV(cuMemsetD32Async, CBID_MEMSET),
    DRV(cuMemsetD32Async_ptsz, CBID_MEMSET),
    DRV(cuMemsetD2D8Async, CBID_MEMSET),
    DRV(cuMemsetD2D8Async_ptsz, CBID_MEMSET),
    DRV(cuMemsetD2D16Async, CBID_MEMSET),
    DRV(cuMemsetD2D16Async_ptsz, CBID_MEMSET),
    DRV(cuMemsetD2D32Async, CBID_MEMSET),
    DRV(cuMemsetD2D32Async_ptsz, CBID_MEMSET),

    /* ---- synchronization ---- */
    RT(cudaDeviceSynchronize_v3020, CBID_SYNC),
    RT(cudaStreamSynchronize_v3020, CBID_SYNC),
    RT(cudaStreamSynchronize_ptsz_v7000, CBID_SYNC),
    RT(cudaEventSynchronize_v3020, CBID_SYNC),
    RT(cudaStreamWaitEvent_v3020, CBID_SYNC),
    RT(cudaStreamWaitEvent_ptsz_v7000, CBID_SYNC),
    DRV(cuCtxSynchronize, CBID_SYNC),
    DRV(cuCtxSynchronize_v2, CBID_SYNC),
    DRV(cuStreamSynchronize, CBID_SYNC),
    DRV(cuStreamSynchronize_ptsz, CBID_SYNC),
    DRV(cuEventSynchronize, CBID_SYNC),
    DRV(cuStreamWaitEvent, CBID_SYNC),
    DRV(cuStreamWaitEvent_ptsz, CBID_SYNC),
};

/* Index + 1 into table[]; 0 = not traced. */
static uint16_t runtime_index[CUPTI_RUNTIME_TRACE_CBID_SIZE];
static uint16_t driver_index[CUPTI_DRIVER_TRACE_CBID_SIZE];

void cbid_table_init(void)
{
  for (unsigned i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
    if (table[i].domain == CUPTI_CB_DOMAIN_RUNTIME_API &&
        table[i].cbid < CUPTI_RUNTIME_TRACE_CBID_SIZE)
      runtime_index[table[i].cbid] = (uint16_t)(i + 1);
    else if (table[i].domain == CUPTI_CB_DOMAIN_DRIVER_API &&
             table[i].cbid < CUPTI_DRIVER_TRACE_CBID_SIZE)
      driver_index[table[i].cbid] = (uint16_t)(i + 1);
  }
}

const struct cbid_entry *cbid_lookup(CUpti_CallbackDomain domain, CUpti_CallbackId cbid)
{
  uint16_t idx = 0;

  if (domain == CUPTI_CB_DOMAIN_RUNTIME_API && cbid < CUPTI_RUNTIME_TRACE_CBID_SIZE)
    idx = runtime_index[cbid];
  else if (domain == CUPTI_CB_DOMAIN_DRIVER_API && cbid < CUPTI_DRIVER_TRACE_CBID_SIZE)
    idx = driver_index[cbid];
  return idx ? &table[idx - 1] : NULL;
}

const struct cbid_entry *cbid_table(unsigned *count)
{
  *count = sizeof(table) / sizeof(table[0]);
  return table;
}
