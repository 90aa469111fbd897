/* Runtime double core: driver lookup, lazy initialisation, per-thread device and error, brackets.
 */
#define _GNU_SOURCE
#include "tests/fakegpu/cudart/cudart.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RT_DEFINE_DRIVER(f) __typeof__(f) *rt_drv_##f;
RT_DRIVER_FUNCS(RT_DEFINE_DRIVER)
#undef RT_DEFINE_DRIVER

#define RT_STR2(x) #x
#define RT_STR(x) RT_STR2(x)

static pthread_once_t driver_once = PTHREAD_ONCE_INIT;
static CUresult driver_init_result = CUDA_ERROR_NOT_INITIALIZED;
static int log_enabled;

static pthread_mutex_t dev_lock = PTHREAD_MUTEX_INITIALIZER;
static CUcontext dev_ctx[RT_MAX_DEVICES];

/* Like the real runtime: the current device is per thread and starts at 0. */
static _Thread_local int t_device;
static _Thread_local cudaError_t t_last_error;

static void rt_log(const char *fmt, const char *arg)
{
  if (log_enabled) {
    fprintf(stderr, "fakegpu cudart: ");
    fprintf(stderr, fmt, arg);
    fputc('\n', stderr);
  }
}

CUresult rt_driver_missing(const char *name)
{
  rt_log("the simulated driver does not export %s; the runtime call fails", name);
  return CUDA_ERROR_NOT_SUPPORTED;
}

static void driver_load(void)
{
  const char *env = getenv("FAKEGPU_LOG");
  log_enabled = env && *env && strcmp(env, "0") != 0;
  /* libcudart is linked against libcuda.so.1, so this finds the loaded one. */
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!h)
    h = dlopen("libcuda.so.1", RTLD_NOW);
  if (!h) {
    driver_init_result = CUDA_ERROR_NOT_FOUND;
    return;
  }
#define RT_RESOLVE_DRIVER(f) *(void **)&rt_drv_##f = dlsym(h, RT_STR(f));
  RT_DRIVER_FUNCS(RT_RESOLVE_DRIVER)
#undef RT_RESOLVE_DRIVER
  fakegpu_internal_begin();
  driver_init_result = DRV(cuInit, 0);
  fakegpu_internal_end();
}

cudaError_t rt_error_from_driver(CUresult r)
{
  /* Most codes share numbers between the APIs since CUDA 10; these are the ones that differ. */
  switch (r) {
  case CUDA_SUCCESS:
    return cudaSuccess;
  case CUDA_ERROR_OUT_OF_MEMORY:
    return cudaErrorMemoryAllocation;
  case CUDA_ERROR_NOT_INITIALIZED:
    return cudaErrorInitializationError;
  case CUDA_ERROR_DEINITIALIZED:
    return cudaErrorCudartUnloading;
  case CUDA_ERROR_INVALID_CONTEXT:
    return cudaErrorDeviceUninitialized;
  case CUDA_ERROR_INVALID_HANDLE:
    return cudaErrorInvalidResourceHandle;
  case CUDA_ERROR_NOT_FOUND:
    return cudaErrorSymbolNotFound;
  case CUDA_ERROR_INVALID_IMAGE:
    return cudaErrorInvalidKernelImage;
  case CUDA_ERROR_NO_BINARY_FOR_GPU:
    return cudaErrorNoKernelImageForDevice;
  default:
    return (cudaError_t)r;
  }
}

int rt_current_device(void)
{
  return t_device;
}

CUresult rt_device_context(int dev, CUcontext *ctx)
{
  CUresult r = CUDA_SUCCESS;
  if (dev < 0 || dev >= RT_MAX_DEVICES)
    return CUDA_ERROR_INVALID_DEVICE;
  pthread_mutex_lock(&dev_lock);
  if (!dev_ctx[dev]) {
    CUdevice d;
    r = DRV(cuDeviceGet, &d, dev);
    if (r == CUDA_SUCCESS)
      r = DRV(cuDevicePrimaryCtxRetain, &dev_ctx[dev], d);
  }
  *ctx = dev_ctx[dev];
  pthread_mutex_unlock(&dev_lock);
  return r;
}

void rt_device_forget(int dev)
{
  pthread_mutex_lock(&dev_lock);
  dev_ctx[dev] = NULL;
  pthread_mutex_unlock(&dev_lock);
  rt_kernels_forget_device(dev);
}

/* Makes the current device's primary context current on this thread. */
static CUresult bind_context(void)
{
  CUcontext want, cur = NULL;
  CUresult r = rt_device_context(t_device, &want);
  if (r != CUDA_SUCCESS)
    return r;
  if (DRV(cuCtxGetCurrent, &cur) != CUDA_SUCCESS || cur != want)
    r = DRV(cuCtxSetCurrent, want);
  return r;
}

cudaError_t rt_begin(struct rt_call *c, enum rt_need need, uint32_t cbid, const char *fname,
                     const void *params, const char *symbol)
{
  c->entered = 0;
  if (need != RT_NEED_NOTHING) {
    pthread_once(&driver_once, driver_load);
    if (driver_init_result != CUDA_SUCCESS)
      return rt_error_from_driver(driver_init_result);
  }
  fakegpu_runtime_enter(cbid, fname, params, symbol);
  fakegpu_internal_begin();
  c->entered = 1;
  /* The context is bound inside the call, after the ENTER callback: a thread's first call sees
   * context NULL at ENTER and the primary context at EXIT, with CONTEXT_CREATED in between
   * when it is new ("can change from the entry to exit callback of a runtime API function if
   * the runtime initializes a context", cupti_callbacks.h). One internal level deeper than
   * the call's own driver work, so nested mode does not report the binding. */
  if (need == RT_NEED_CONTEXT) {
    fakegpu_internal_begin();
    CUresult r = bind_context();
    fakegpu_internal_end();
    if (r != CUDA_SUCCESS)
      return rt_error_from_driver(r);
  }
  return cudaSuccess;
}

cudaError_t rt_end_rt(struct rt_call *c, cudaError_t err)
{
  /* Polling answers are not errors a later cudaGetLastError should report. */
  if (err != cudaSuccess && err != cudaErrorNotReady)
    t_last_error = err;
  return rt_leave(c, err);
}

cudaError_t rt_leave(struct rt_call *c, cudaError_t err)
{
  if (c->entered) {
    fakegpu_internal_end();
    fakegpu_runtime_exit((int)err);
    c->entered = 0;
  }
  return err;
}

cudaError_t rt_end(struct rt_call *c, CUresult r)
{
  return rt_end_rt(c, rt_error_from_driver(r));
}

/* ---- errors ---- */

RT_API cudaError_t CUDARTAPI cudaGetLastError(void)
{
  BEGIN(RT_NEED_DRIVER, cudaGetLastError_v3020, NULL);
  cudaError_t err = t_last_error;
  t_last_error = cudaSuccess;
  return rt_leave(&call_, err);
}

RT_API cudaError_t CUDARTAPI cudaPeekAtLastError(void)
{
  BEGIN(RT_NEED_DRIVER, cudaPeekAtLastError_v3020, NULL);
  return rt_leave(&call_, t_last_error);
}

static const struct {
  cudaError_t code;
  const char *name;
  const char *text;
} error_table[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInitializationError, "cudaErrorInitializationError", "initialization error"},
    {cudaErrorCudartUnloading, "cudaErrorCudartUnloading", "driver shutting down"},
    {cudaErrorInvalidConfiguration, "cudaErrorInvalidConfiguration",
     "invalid configuration argument"},
    {cudaErrorInvalidPitchValue, "cudaErrorInvalidPitchValue", "invalid pitch argument"},
    {cudaErrorInvalidSymbol, "cudaErrorInvalidSymbol", "invalid device symbol"},
    {cudaErrorInvalidDevicePointer, "cudaErrorInvalidDevicePointer", "invalid device pointer"},
    {cudaErrorInvalidMemcpyDirection, "cudaErrorInvalidMemcpyDirection",
     "invalid copy direction for memcpy"},
    {cudaErrorMissingConfiguration, "cudaErrorMissingConfiguration",
     "__global__ function call is not configured"},
    {cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorDeviceUninitialized, "cudaErrorDeviceUninitialized", "invalid device context"},
    {cudaErrorInvalidKernelImage, "cudaErrorInvalidKernelImage", "device kernel image is invalid"},
    {cudaErrorNoKernelImageForDevice, "cudaErrorNoKernelImageForDevice",
     "no kernel image is available for execution on the device"},
    {cudaErrorPeerAccessAlreadyEnabled, "cudaErrorPeerAccessAlreadyEnabled",
     "peer access is already enabled"},
    {cudaErrorPeerAccessNotEnabled, "cudaErrorPeerAccessNotEnabled",
     "peer access has not been enabled"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {cudaErrorSymbolNotFound, "cudaErrorSymbolNotFound", "named symbol not found"},
    {cudaErrorNotReady, "cudaErrorNotReady", "device not ready"},
    {cudaErrorIllegalAddress, "cudaErrorIllegalAddress",
     "an illegal memory access was encountered"},
    {cudaErrorLaunchFailure, "cudaErrorLaunchFailure", "unspecified launch failure"},
    {cudaErrorInvalidDeviceFunction, "cudaErrorInvalidDeviceFunction", "invalid device function"},
    {cudaErrorNotSupported, "cudaErrorNotSupported", "operation not supported"},
    {cudaErrorStreamCaptureUnsupported, "cudaErrorStreamCaptureUnsupported",
     "operation not permitted when stream is capturing"},
    {cudaErrorStreamCaptureInvalidated, "cudaErrorStreamCaptureInvalidated",
     "operation failed due to a previous error during capture"},
    {cudaErrorStreamCaptureUnmatched, "cudaErrorStreamCaptureUnmatched",
     "capture was not ended in the same stream as it began"},
    {cudaErrorStreamCaptureWrongThread, "cudaErrorStreamCaptureWrongThread",
     "attempt to terminate a thread-local capture sequence from another thread"},
    {cudaErrorUnknown, "cudaErrorUnknown", "unknown error"},
};

static int error_index(cudaError_t code)
{
  for (size_t i = 0; i < sizeof(error_table) / sizeof(error_table[0]); i++)
    if (error_table[i].code == code)
      return (int)i;
  return -1;
}

RT_API const char *CUDARTAPI cudaGetErrorString(cudaError_t error)
{
  int i = error_index(error);
  return i >= 0 ? error_table[i].text : "unrecognized error code";
}

RT_API const char *CUDARTAPI cudaGetErrorName(cudaError_t error)
{
  int i = error_index(error);
  return i >= 0 ? error_table[i].name : "cudaErrorUnknown";
}

/* ---- versions and devices ---- */

RT_API cudaError_t CUDARTAPI cudaDriverGetVersion(int *driverVersion)
{
  cudaDriverGetVersion_v3020_params p = {driverVersion};
  BEGIN(RT_NEED_DRIVER, cudaDriverGetVersion_v3020, &p);
  return rt_end(&call_, DRV(cuDriverGetVersion, driverVersion));
}

RT_API cudaError_t CUDARTAPI cudaRuntimeGetVersion(int *runtimeVersion)
{
  cudaRuntimeGetVersion_v3020_params p = {runtimeVersion};
  BEGIN(RT_NEED_DRIVER, cudaRuntimeGetVersion_v3020, &p);
  if (!runtimeVersion)
    return rt_end_rt(&call_, cudaErrorInvalidValue);
  *runtimeVersion = CUDART_VERSION;
  return rt_end_rt(&call_, cudaSuccess);
}

RT_API cudaError_t CUDARTAPI cudaGetDeviceCount(int *count)
{
  cudaGetDeviceCount_v3020_params p = {count};
  BEGIN(RT_NEED_DRIVER, cudaGetDeviceCount_v3020, &p);
  return rt_end(&call_, DRV(cuDeviceGetCount, count));
}

static int device_count(void)
{
  int n = 0;
  if (DRV(cuDeviceGetCount, &n) != CUDA_SUCCESS)
    return 0;
  return n < RT_MAX_DEVICES ? n : RT_MAX_DEVICES;
}

RT_API cudaError_t CUDARTAPI cudaGetDevice(int *device)
{
  cudaGetDevice_v3020_params p = {device};
  BEGIN(RT_NEED_DRIVER, cudaGetDevice_v3020, &p);
  if (!device)
    return rt_end_rt(&call_, cudaErrorInvalidValue);
  *device = t_device;
  return rt_end_rt(&call_, cudaSuccess);
}

RT_API cudaError_t CUDARTAPI cudaSetDevice(int device)
{
  cudaSetDevice_v3020_params p = {device};
  BEGIN(RT_NEED_DRIVER, cudaSetDevice_v3020, &p);
  if (device < 0 || device >= device_count())
    return rt_end_rt(&call_, cudaErrorInvalidDevice);
  t_device = device;
  /* Since CUDA 12 cudaSetDevice initialises the device's primary context at once. */
  return rt_end(&call_, bind_context());
}

RT_API cudaError_t CUDARTAPI cudaSetDeviceFlags(unsigned int flags)
{
  cudaSetDeviceFlags_v3020_params p = {flags};
  BEGIN(RT_NEED_DRIVER, cudaSetDeviceFlags_v3020, &p);
  return rt_end_rt(&call_, cudaSuccess);
}

RT_API cudaError_t CUDARTAPI cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr,
                                                    int device)
{
  cudaDeviceGetAttribute_v5000_params p = {value, attr, device};
  BEGIN(RT_NEED_DRIVER, cudaDeviceGetAttribute_v5000, &p);
  /* cudaDeviceAttr and CUdevice_attribute share their numbering. */
  return rt_end(&call_, DRV(cuDeviceGetAttribute, value, (CUdevice_attribute)attr, device));
}

RT_API cudaError_t CUDARTAPI cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
  cudaGetDeviceProperties_v12000_params p = {prop, device};
  BEGIN(RT_NEED_DRIVER, cudaGetDeviceProperties_v12000, &p);
  if (!prop)
    return rt_end_rt(&call_, cudaErrorInvalidValue);
  if (device < 0 || device >= device_count())
    return rt_end_rt(&call_, cudaErrorInvalidDevice);
  memset(prop, 0, sizeof(*prop));
  CUresult r = DRV(cuDeviceGetName, prop->name, (int)sizeof(prop->name), device);
  if (r == CUDA_SUCCESS)
    r = DRV(cuDeviceTotalMem, &prop->totalGlobalMem, device);
  if (r != CUDA_SUCCESS)
    return rt_end(&call_, r);
  DRV(cuDeviceGetUuid, (CUuuid *)&prop->uuid, device);
  static const struct {
    size_t offset;
    int size;
    CUdevice_attribute attr;
  } fields[] = {
#define F(field, attr)                                                                             \
  {offsetof(struct cudaDeviceProp, field), sizeof(((struct cudaDeviceProp *)0)->field), attr}
      F(sharedMemPerBlock, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK),
      F(regsPerBlock, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK),
      F(warpSize, CU_DEVICE_ATTRIBUTE_WARP_SIZE),
      F(memPitch, CU_DEVICE_ATTRIBUTE_MAX_PITCH),
      F(maxThreadsPerBlock, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK),
      F(maxThreadsDim[0], CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X),
      F(maxThreadsDim[1], CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y),
      F(maxThreadsDim[2], CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z),
      F(maxGridSize[0], CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X),
      F(maxGridSize[1], CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y),
      F(maxGridSize[2], CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z),
      F(totalConstMem, CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY),
      F(major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
      F(minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
      F(textureAlignment, CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT),
      F(multiProcessorCount, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
      F(integrated, CU_DEVICE_ATTRIBUTE_INTEGRATED),
      F(canMapHostMemory, CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY),
      F(concurrentKernels, CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS),
      F(ECCEnabled, CU_DEVICE_ATTRIBUTE_ECC_ENABLED),
      F(pciBusID, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID),
      F(pciDeviceID, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID),
      F(pciDomainID, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID),
      F(asyncEngineCount, CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT),
      F(unifiedAddressing, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING),
      F(memoryBusWidth, CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH),
      F(l2CacheSize, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE),
      F(maxThreadsPerMultiProcessor, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR),
      F(managedMemory, CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY),
      F(sharedMemPerMultiprocessor, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR),
      F(regsPerMultiprocessor, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR),
      F(concurrentManagedAccess, CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS),
      F(sharedMemPerBlockOptin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
      F(maxBlocksPerMultiProcessor, CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR),
      F(memoryPoolsSupported, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED),
#undef F
  };
  for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
    int v = 0;
    if (DRV(cuDeviceGetAttribute, &v, fields[i].attr, device) != CUDA_SUCCESS)
      continue; /* an attribute the simulator does not model stays 0 */
    char *dst = (char *)prop + fields[i].offset;
    if (fields[i].size == sizeof(size_t)) {
      size_t s = (size_t)v;
      memcpy(dst, &s, sizeof(s));
    } else {
      memcpy(dst, &v, sizeof(v));
    }
  }
  return rt_end_rt(&call_, cudaSuccess);
}

RT_API cudaError_t CUDARTAPI cudaDeviceCanAccessPeer(int *canAccessPeer, int device, int peerDevice)
{
  cudaDeviceCanAccessPeer_v4000_params p = {canAccessPeer, device, peerDevice};
  BEGIN(RT_NEED_DRIVER, cudaDeviceCanAccessPeer_v4000, &p);
  return rt_end(&call_, DRV(cuDeviceCanAccessPeer, canAccessPeer, device, peerDevice));
}

RT_API cudaError_t CUDARTAPI cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags)
{
  cudaDeviceEnablePeerAccess_v4000_params p = {peerDevice, flags};
  BEGIN(RT_NEED_CONTEXT, cudaDeviceEnablePeerAccess_v4000, &p);
  CUcontext peer;
  CUresult r = rt_device_context(peerDevice, &peer);
  if (r == CUDA_SUCCESS)
    r = DRV(cuCtxEnablePeerAccess, peer, flags);
  if (r == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED)
    return rt_end_rt(&call_, cudaErrorPeerAccessAlreadyEnabled);
  return rt_end(&call_, r);
}

RT_API cudaError_t CUDARTAPI cudaDeviceDisablePeerAccess(int peerDevice)
{
  cudaDeviceDisablePeerAccess_v4000_params p = {peerDevice};
  BEGIN(RT_NEED_CONTEXT, cudaDeviceDisablePeerAccess_v4000, &p);
  CUcontext peer;
  CUresult r = rt_device_context(peerDevice, &peer);
  if (r == CUDA_SUCCESS)
    r = DRV(cuCtxDisablePeerAccess, peer);
  return rt_end(&call_, r);
}

RT_API cudaError_t CUDARTAPI cudaDeviceSynchronize(void)
{
  BEGIN(RT_NEED_CONTEXT, cudaDeviceSynchronize_v3020, NULL);
  return rt_end(&call_, DRV(cuCtxSynchronize));
}

RT_API cudaError_t CUDARTAPI cudaDeviceReset(void)
{
  BEGIN(RT_NEED_DRIVER, cudaDeviceReset_v3020, NULL);
  int dev = t_device;
  /* The primary context goes away with all it loaded: the runtime reloads on next use. */
  rt_device_forget(dev);
  return rt_end(&call_, DRV(cuDevicePrimaryCtxReset, dev));
}

RT_API cudaError_t CUDARTAPI cudaMemGetInfo(size_t *free, size_t *total)
{
  cudaMemGetInfo_v3020_params p = {free, total};
  BEGIN(RT_NEED_CONTEXT, cudaMemGetInfo_v3020, &p);
  return rt_end(&call_, DRV(cuMemGetInfo, free, total));
}
