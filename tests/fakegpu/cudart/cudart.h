/* Private state of the runtime double (libcudart.so.13): driver table, call bracketing, kernels. */
#ifndef FAKEGPU_CUDART_CUDART_H
#define FAKEGPU_CUDART_CUDART_H

#include <stddef.h>
#include <stdint.h>

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cupti_runtime_cbid.h>
#include <generated_cuda_runtime_api_meta.h>

#include "tests/fakegpu/fakegpu.h"

/* Everything the program links against; all else stays hidden (-fvisibility=hidden). */
#define RT_API __attribute__((visibility("default")))

#define RT_MAX_DEVICES 16

/*
 * The driver functions the runtime uses, found with dlsym in libcuda.so.1 at first use. The
 * real runtime resolves its driver entry points at run time too (cuGetProcAddress); here it
 * also means a driver function the simulator lacks makes only the runtime calls that need it
 * fail (cudaErrorNotSupported, named once under FAKEGPU_LOG=1) instead of the whole library
 * failing to load. The names go through cuda.h's macros, so cuMemAlloc is cuMemAlloc_v2.
 */
#define RT_DRIVER_FUNCS(X)                                                                         \
  X(cuInit)                                                                                        \
  X(cuDriverGetVersion)                                                                            \
  X(cuDeviceGetCount)                                                                              \
  X(cuDeviceGet)                                                                                   \
  X(cuDeviceGetName)                                                                               \
  X(cuDeviceGetUuid)                                                                               \
  X(cuDeviceTotalMem)                                                                              \
  X(cuDeviceGetAttribute)                                                                          \
  X(cuDeviceCanAccessPeer)                                                                         \
  X(cuDevicePrimaryCtxRetain)                                                                      \
  X(cuDevicePrimaryCtxReset)                                                                       \
  X(cuCtxGetCurrent)                                                                               \
  X(cuCtxSetCurrent)                                                                               \
  X(cuCtxSynchronize)                                                                              \
  X(cuCtxEnablePeerAccess)                                                                         \
  X(cuCtxDisablePeerAccess)                                                                        \
  X(cuModuleLoadData)                                                                              \
  X(cuModuleGetFunction)                                                                           \
  X(cuLaunchKernel)                                                                                \
  X(cuMemAlloc)                                                                                    \
  X(cuMemFree)                                                                                     \
  X(cuMemAllocPitch)                                                                               \
  X(cuMemAllocManaged)                                                                             \
  X(cuMemAllocHost)                                                                                \
  X(cuMemHostAlloc)                                                                                \
  X(cuMemFreeHost)                                                                                 \
  X(cuMemAllocAsync)                                                                               \
  X(cuMemFreeAsync)                                                                                \
  X(cuMemAllocFromPoolAsync)                                                                       \
  X(cuMemGetInfo)                                                                                  \
  X(cuMemcpy)                                                                                      \
  X(cuMemcpyAsync)                                                                                 \
  X(cuMemcpyHtoD)                                                                                  \
  X(cuMemcpyDtoH)                                                                                  \
  X(cuMemcpyDtoD)                                                                                  \
  X(cuMemcpyHtoDAsync)                                                                             \
  X(cuMemcpyDtoHAsync)                                                                             \
  X(cuMemcpyDtoDAsync)                                                                             \
  X(cuMemcpy2D)                                                                                    \
  X(cuMemcpy2DAsync)                                                                               \
  X(cuMemcpyPeer)                                                                                  \
  X(cuMemcpyPeerAsync)                                                                             \
  X(cuMemsetD8)                                                                                    \
  X(cuMemsetD8Async)                                                                               \
  X(cuPointerGetAttributes)                                                                        \
  X(cuDeviceGetDefaultMemPool)                                                                     \
  X(cuDeviceGetMemPool)                                                                            \
  X(cuDeviceSetMemPool)                                                                            \
  X(cuMemPoolCreate)                                                                               \
  X(cuMemPoolDestroy)                                                                              \
  X(cuMemPoolSetAttribute)                                                                         \
  X(cuMemPoolGetAttribute)                                                                         \
  X(cuMemPoolTrimTo)                                                                               \
  X(cuStreamCreate)                                                                                \
  X(cuStreamCreateWithPriority)                                                                    \
  X(cuStreamDestroy)                                                                               \
  X(cuStreamSynchronize)                                                                           \
  X(cuStreamQuery)                                                                                 \
  X(cuStreamWaitEvent)                                                                             \
  X(cuStreamBeginCapture)                                                                          \
  X(cuStreamEndCapture)                                                                            \
  X(cuStreamIsCapturing)                                                                           \
  X(cuEventCreate)                                                                                 \
  X(cuEventRecord)                                                                                 \
  X(cuEventSynchronize)                                                                            \
  X(cuEventQuery)                                                                                  \
  X(cuEventElapsedTime)                                                                            \
  X(cuEventDestroy)                                                                                \
  X(cuGraphInstantiate)                                                                            \
  X(cuGraphLaunch)                                                                                 \
  X(cuGraphExecDestroy)                                                                            \
  X(cuGraphDestroy)

#define RT_DECLARE_DRIVER(f) extern __typeof__(f) *rt_drv_##f;
RT_DRIVER_FUNCS(RT_DECLARE_DRIVER)
#undef RT_DECLARE_DRIVER

/* Calls driver function `f`, or answers CUDA_ERROR_NOT_SUPPORTED when the driver lacks it. */
#define DRV(f, ...) (rt_drv_##f ? rt_drv_##f(__VA_ARGS__) : rt_driver_missing(#f))

CUresult rt_driver_missing(const char *name);

/* ---- one runtime API call ---- */

enum rt_need {
  RT_NEED_NOTHING, /* registration: before main, the driver is not started (as the real one) */
  RT_NEED_DRIVER,  /* device queries: cuInit */
  RT_NEED_CONTEXT, /* everything else: the current device's primary context, current */
};

struct rt_call {
  int entered;
};

/* Starts the driver if `need` says so (before any callback: cuInit runs the injection), enters
 * the RUNTIME callback, brackets the driver calls that follow so that they produce records but
 * no DRIVER callbacks, then binds the current device's primary context (RT_NEED_CONTEXT; inside
 * the call, as the real runtime does: context NULL at a thread's first ENTER). On a driver
 * start error returns it and enters nothing (rt_end then only records it); on a binding error
 * returns it with the call entered (rt_end delivers EXIT). */
cudaError_t rt_begin(struct rt_call *c, enum rt_need need, uint32_t cbid, const char *fname,
                     const void *params, const char *symbol);
/* Leaves the call: maps `r`, remembers it as the thread's last error, delivers EXIT. */
cudaError_t rt_end(struct rt_call *c, CUresult r);
/* As rt_end for a result that is already a runtime error. */
cudaError_t rt_end_rt(struct rt_call *c, cudaError_t err);

/* Leaves the call with `err` without touching the last error (cudaGetLastError itself). */
cudaError_t rt_leave(struct rt_call *c, cudaError_t err);

/* Begins a call in a function returning cudaError_t, or returns its initialisation error. */
#define BEGIN_SYM(need, cb, params, symbol)                                                        \
  struct rt_call call_;                                                                            \
  do {                                                                                             \
    cudaError_t e_ = rt_begin(&call_, need, RT_CB(cb), params, symbol);                            \
    if (e_ != cudaSuccess)                                                                         \
      return rt_end_rt(&call_, e_);                                                                \
  } while (0)
#define BEGIN(need, cb, params) BEGIN_SYM(need, cb, params, NULL)

/* `RT_CB(cudaMalloc_v3020)` -> the cbid and the name as CUPTI spells it. */
#define RT_CB(name) CUPTI_RUNTIME_TRACE_CBID_##name, #name

cudaError_t rt_error_from_driver(CUresult r);
int rt_current_device(void);
/* The primary context of `dev` (retained on first use). */
CUresult rt_device_context(int dev, CUcontext *ctx);
/* cudaDeviceReset: forget the device's context and everything loaded into it. */
void rt_device_forget(int dev);

/* ---- registered kernels (register.c) ---- */

struct rt_kernel;

/* Finds a kernel by host stub address or by the cudaKernel_t __cudaGetKernel handed out. */
struct rt_kernel *rt_kernel_find(const void *func);
const char *rt_kernel_name(const struct rt_kernel *k);
/* The kernel's CUfunction in the current device's context, loading its fatbin on first use. */
CUresult rt_kernel_function(struct rt_kernel *k, CUfunction *fn);
void rt_kernels_forget_device(int dev);

#endif
