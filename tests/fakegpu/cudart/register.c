/* Runtime double: nvcc's registration calls, kernel lookup and loading, and kernel launches. */
#define _GNU_SOURCE
#include "tests/fakegpu/cudart/cudart.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fakegpu/cudart/params.h"
#include "tests/fakegpu/nested.h"

#define KERNEL_MAGIC 0x6b65726eu /* "kern" */
#define TABLE_BUCKETS 1024
#define MAX_CONFIG_DEPTH 32

/* One fatbin registered by a host object's constructor. */
struct rt_fatbin {
  void *handle_slot; /* first: __cudaRegisterFatBinary hands out its address as the handle */
  const void *image; /* the __fatBinC_Wrapper_t, which cuModuleLoadData accepts as is */
  CUmodule module[RT_MAX_DEVICES];
  struct rt_fatbin *next;
};

struct rt_kernel {
  uint32_t magic;
  const void *host; /* the host stub nvcc generated */
  char *name;       /* mangled device name */
  struct rt_fatbin *fatbin;
  CUfunction function[RT_MAX_DEVICES];
  struct rt_kernel *next_in_list;
};

/* Kernels are found both by host stub and by their own address (a cudaKernel_t). */
struct table_entry {
  const void *key;
  struct rt_kernel *kernel;
  struct table_entry *next;
};

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct table_entry *table[TABLE_BUCKETS];
static struct rt_kernel *kernels;
static struct rt_fatbin *fatbins;

struct call_config {
  dim3 grid, block;
  size_t shared_mem;
  cudaStream_t stream;
};

/* <<<>>> pushes before evaluating the arguments and the stub pops: arguments that launch
 * kernels themselves nest, hence a stack. */
static _Thread_local struct call_config t_config[MAX_CONFIG_DEPTH];
static _Thread_local int t_config_depth;

static size_t bucket(const void *key)
{
  uintptr_t k = (uintptr_t)key;
  return (size_t)((k >> 4) ^ (k >> 14)) & (TABLE_BUCKETS - 1);
}

/* Under reg_lock. */
static struct rt_kernel *table_get(const void *key)
{
  for (struct table_entry *e = table[bucket(key)]; e; e = e->next)
    if (e->key == key)
      return e->kernel;
  return NULL;
}

static int table_put(const void *key, struct rt_kernel *k)
{
  struct table_entry *e = malloc(sizeof(*e));
  if (!e)
    return -1;
  e->key = key;
  e->kernel = k;
  e->next = table[bucket(key)];
  table[bucket(key)] = e;
  return 0;
}

struct rt_kernel *rt_kernel_find(const void *func)
{
  pthread_mutex_lock(&reg_lock);
  struct rt_kernel *k = func ? table_get(func) : NULL;
  pthread_mutex_unlock(&reg_lock);
  return k;
}

const char *rt_kernel_name(const struct rt_kernel *k)
{
  return k ? k->name : NULL;
}

/* A PTX module declaring every kernel of `fb`: used when the driver cannot read the fatbin
 * itself (a compression it does not undo), so that launches still resolve by name. */
static char *synth_ptx(const struct rt_fatbin *fb)
{
  size_t cap = 256;
  for (struct rt_kernel *k = kernels; k; k = k->next_in_list)
    if (k->fatbin == fb)
      cap += strlen(k->name) + 64;
  char *ptx = malloc(cap);
  if (!ptx)
    return NULL;
  size_t n = (size_t)snprintf(ptx, cap, ".version 9.0\n.target sm_90\n.address_size 64\n");
  for (struct rt_kernel *k = kernels; k; k = k->next_in_list)
    if (k->fatbin == fb)
      n += (size_t)snprintf(ptx + n, cap - n, ".visible .entry %s()\n{\n\tret;\n}\n", k->name);
  return ptx;
}

CUresult rt_kernel_function(struct rt_kernel *k, CUfunction *fn)
{
  int dev = rt_current_device();
  CUresult r = CUDA_SUCCESS;
  if (dev < 0 || dev >= RT_MAX_DEVICES)
    return CUDA_ERROR_INVALID_DEVICE;
  pthread_mutex_lock(&reg_lock);
  if (!k->function[dev]) {
    struct rt_fatbin *fb = k->fatbin;
    /* Like the runtime's lazy loading: a fatbin is loaded into a device's context when one
     * of its kernels is first used there. */
    if (!fb->module[dev]) {
      r = DRV(cuModuleLoadData, &fb->module[dev], fb->image);
      if (r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_SUPPORTED) {
        char *ptx = synth_ptx(fb);
        fprintf(stderr,
                "fakegpu cudart: the simulated driver could not load the fatbin of %s "
                "(CUresult %d); loading its registered kernel names instead\n",
                k->name, (int)r);
        r = ptx ? DRV(cuModuleLoadData, &fb->module[dev], ptx) : CUDA_ERROR_OUT_OF_MEMORY;
        free(ptx);
      }
    }
    if (r == CUDA_SUCCESS)
      r = DRV(cuModuleGetFunction, &k->function[dev], fb->module[dev], k->name);
  }
  *fn = k->function[dev];
  pthread_mutex_unlock(&reg_lock);
  return r;
}

void rt_kernels_forget_device(int dev)
{
  pthread_mutex_lock(&reg_lock);
  for (struct rt_fatbin *fb = fatbins; fb; fb = fb->next)
    fb->module[dev] = NULL;
  for (struct rt_kernel *k = kernels; k; k = k->next_in_list)
    k->function[dev] = NULL;
  pthread_mutex_unlock(&reg_lock);
}

/* ---- registration (called from static constructors, before main) ---- */

RT_API void **CUDARTAPI __cudaRegisterFatBinary(void *fatCubin)
{
  fg___cudaRegisterFatBinary_v13000_params p = {fatCubin};
  struct rt_call c;
  rt_begin(&c, RT_NEED_NOTHING, RT_CB(__cudaRegisterFatBinary_v13000), &p, NULL);
  struct rt_fatbin *fb = calloc(1, sizeof(*fb));
  if (fb) {
    fb->handle_slot = fatCubin;
    fb->image = fatCubin;
    pthread_mutex_lock(&reg_lock);
    fb->next = fatbins;
    fatbins = fb;
    pthread_mutex_unlock(&reg_lock);
  }
  rt_leave(&c, fb ? cudaSuccess : cudaErrorMemoryAllocation);
  return fb ? &fb->handle_slot : NULL;
}

RT_API void CUDARTAPI __cudaRegisterFatBinaryEnd(void **fatCubinHandle)
{
  fg___cudaFatBinaryHandle_v13000_params p = {fatCubinHandle};
  struct rt_call c;
  rt_begin(&c, RT_NEED_NOTHING, RT_CB(__cudaRegisterFatBinaryEnd_v13000), &p, NULL);
  rt_leave(&c, cudaSuccess);
}

RT_API void CUDARTAPI __cudaUnregisterFatBinary(void **fatCubinHandle)
{
  fg___cudaFatBinaryHandle_v13000_params p = {fatCubinHandle};
  struct rt_call c;
  rt_begin(&c, RT_NEED_NOTHING, RT_CB(__cudaUnregisterFatBinary_v13000), &p, NULL);
  /* Runs from atexit. The kernels stay registered and the modules loaded: the process is
   * ending, and a tool may still be resolving names from its records. */
  rt_leave(&c, cudaSuccess);
}

RT_API void CUDARTAPI __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun,
                                             char *deviceFun, const char *deviceName,
                                             int thread_limit, uint3 *tid, uint3 *bid, dim3 *bDim,
                                             dim3 *gDim, int *wSize)
{
  fg___cudaRegisterFunction_v13000_params p = {
      fatCubinHandle, hostFun, deviceFun, deviceName, thread_limit, tid, bid, bDim, gDim, wSize};
  struct rt_call c;
  rt_begin(&c, RT_NEED_NOTHING, RT_CB(__cudaRegisterFunction_v13000), &p, NULL);
  cudaError_t err = cudaErrorMemoryAllocation;
  /* deviceFun is the mangled name the image defines; deviceName is the same string in the
   * code nvcc generates, kept as a fallback. */
  const char *name = deviceFun ? deviceFun : deviceName;
  struct rt_kernel *k = calloc(1, sizeof(*k));
  if (k && fatCubinHandle && hostFun && name && (k->name = strdup(name))) {
    k->magic = KERNEL_MAGIC;
    k->host = hostFun;
    k->fatbin = (struct rt_fatbin *)fatCubinHandle; /* handle_slot is the first member */
    pthread_mutex_lock(&reg_lock);
    if (table_put(hostFun, k) == 0 && table_put(k, k) == 0) {
      k->next_in_list = kernels;
      kernels = k;
      err = cudaSuccess;
    }
    pthread_mutex_unlock(&reg_lock);
  }
  if (err != cudaSuccess && k) {
    free(k->name);
    free(k);
  }
  rt_leave(&c, err);
}

RT_API void CUDARTAPI __cudaRegisterVar(void **fatCubinHandle, char *hostVar, char *deviceAddress,
                                        const char *deviceName, int ext, size_t size, int constant,
                                        int global)
{
  fg___cudaRegisterVar_v13000_params p = {fatCubinHandle, hostVar,  deviceAddress, deviceName, ext,
                                          size,           constant, global};
  struct rt_call c;
  /* Accepted and forgotten: the simulator has no device symbols (cudaMemcpyToSymbol). */
  rt_begin(&c, RT_NEED_NOTHING, RT_CB(__cudaRegisterVar_v13000), &p, NULL);
  rt_leave(&c, cudaSuccess);
}

RT_API char CUDARTAPI __cudaInitModule(void **fatCubinHandle)
{
  fg___cudaFatBinaryHandle_v13000_params p = {fatCubinHandle};
  struct rt_call c;
  if (rt_begin(&c, RT_NEED_CONTEXT, RT_CB(__cudaInitModule_v13000), &p, NULL) != cudaSuccess)
    return 0;
  rt_leave(&c, cudaSuccess);
  return 1;
}

/* ---- launches ---- */

RT_API unsigned CUDARTAPI __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
                                                      struct CUstream_st *stream)
{
  fg___cudaPushCallConfiguration_v13000_params p = {gridDim, blockDim, sharedMem, stream};
  struct rt_call c;
  if (rt_begin(&c, RT_NEED_DRIVER, RT_CB(__cudaPushCallConfiguration_v13000), &p, NULL) !=
      cudaSuccess)
    return 1;
  if (t_config_depth >= MAX_CONFIG_DEPTH) {
    rt_end_rt(&c, cudaErrorInvalidConfiguration);
    return 1;
  }
  t_config[t_config_depth++] = (struct call_config){gridDim, blockDim, sharedMem, stream};
  rt_leave(&c, cudaSuccess);
  return 0;
}

RT_API cudaError_t CUDARTAPI __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim,
                                                        size_t *sharedMem, void *stream)
{
  fg___cudaPopCallConfiguration_v13000_params p = {gridDim, blockDim, sharedMem, stream};
  BEGIN(RT_NEED_DRIVER, __cudaPopCallConfiguration_v13000, &p);
  if (t_config_depth <= 0)
    return rt_end_rt(&call_, cudaErrorMissingConfiguration);
  struct call_config *cfg = &t_config[--t_config_depth];
  *gridDim = cfg->grid;
  *blockDim = cfg->block;
  *sharedMem = cfg->shared_mem;
  *(cudaStream_t *)stream = cfg->stream;
  return rt_leave(&call_, cudaSuccess);
}

RT_API cudaError_t CUDARTAPI __cudaGetKernel(cudaKernel_t *kernelPtr, const void *funcAddr)
{
  fg___cudaGetKernel_v13000_params p = {kernelPtr, funcAddr};
  BEGIN(RT_NEED_DRIVER, __cudaGetKernel_v13000, &p);
  struct rt_kernel *k = rt_kernel_find(funcAddr);
  if (!kernelPtr || !k)
    return rt_end_rt(&call_, kernelPtr ? cudaErrorInvalidDeviceFunction : cudaErrorInvalidValue);
  /* The handle is the registration record itself; launches accept both it and the stub. */
  *kernelPtr = (cudaKernel_t)k;
  return rt_end_rt(&call_, cudaSuccess);
}

RT_API cudaError_t CUDARTAPI cudaGetKernel(cudaKernel_t *kernelPtr, const void *entryFuncAddr)
{
  cudaGetKernel_v12000_params p = {kernelPtr, entryFuncAddr};
  BEGIN(RT_NEED_DRIVER, cudaGetKernel_v12000, &p);
  struct rt_kernel *k = rt_kernel_find(entryFuncAddr);
  if (!kernelPtr || !k)
    return rt_end_rt(&call_, kernelPtr ? cudaErrorInvalidDeviceFunction : cudaErrorInvalidValue);
  *kernelPtr = (cudaKernel_t)k;
  return rt_end_rt(&call_, cudaSuccess);
}

/* The body shared by every launch entry point, inside its runtime call. */
static CUresult launch(struct rt_kernel *k, dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                       void **args, cudaError_t *rt_err)
{
  *rt_err = cudaSuccess;
  if (!k) {
    *rt_err = cudaErrorInvalidDeviceFunction;
    return CUDA_SUCCESS;
  }
  if (!grid.x || !grid.y || !grid.z || !block.x || !block.y || !block.z) {
    *rt_err = cudaErrorInvalidConfiguration;
    return CUDA_SUCCESS;
  }
  CUfunction f;
  CUresult r = rt_kernel_function(k, &f);
  if (r != CUDA_SUCCESS)
    return r;
  return DRV(cuLaunchKernel, f, grid.x, grid.y, grid.z, block.x, block.y, block.z, (unsigned)smem,
             (CUstream)stream, args, NULL);
}

static cudaError_t launch_end(struct rt_call *c, CUresult r, cudaError_t rt_err)
{
  return rt_err != cudaSuccess ? rt_end_rt(c, rt_err) : rt_end(c, r);
}

static cudaError_t internal_launch(uint32_t cbid, const char *fname, cudaKernel_t kernel,
                                   dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem,
                                   cudaStream_t stream)
{
  fg___cudaLaunchKernel_v13000_params p = {kernel, gridDim, blockDim, args, sharedMem, stream};
  struct rt_kernel *k = rt_kernel_find(kernel);
  struct rt_call c;
  cudaError_t err = rt_begin(&c, RT_NEED_CONTEXT, cbid, fname, &p, rt_kernel_name(k));
  if (err != cudaSuccess)
    return rt_end_rt(&c, err);
  if (fakegpu_nested_get() & FAKEGPU_NESTED_RUNTIME) {
    /* FAKEGPU_NESTED=runtime (tests/fakegpu/nested.h): the CUDA 13 entry point reaches the
     * launch through cudaLaunchKernel(_ptsz), a nested RUNTIME call of its own. */
    int ptsz = cbid == CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_ptsz_v13000;
    cudaLaunchKernel_v7000_params ip = {kernel, gridDim, blockDim, args, sharedMem, stream};
    struct rt_call inner;
    err = ptsz ? rt_begin(&inner, RT_NEED_CONTEXT, RT_CB(cudaLaunchKernel_ptsz_v7000), &ip,
                          rt_kernel_name(k))
               : rt_begin(&inner, RT_NEED_CONTEXT, RT_CB(cudaLaunchKernel_v7000), &ip,
                          rt_kernel_name(k));
    if (err == cudaSuccess) {
      CUresult r = launch(k, gridDim, blockDim, sharedMem, stream, args, &err);
      err = launch_end(&inner, r, err);
    } else {
      err = rt_end_rt(&inner, err);
    }
    return rt_end_rt(&c, err);
  }
  CUresult r = launch(k, gridDim, blockDim, sharedMem, stream, args, &err);
  return launch_end(&c, r, err);
}

RT_API cudaError_t CUDARTAPI __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim,
                                                void **args, size_t sharedMem, cudaStream_t stream)
{
  return internal_launch(RT_CB(__cudaLaunchKernel_v13000), kernel, gridDim, blockDim, args,
                         sharedMem, stream);
}

RT_API cudaError_t CUDARTAPI __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim,
                                                     dim3 blockDim, void **args, size_t sharedMem,
                                                     cudaStream_t stream)
{
  /* Compiled with --default-stream per-thread: the NULL stream is the thread's own. */
  if (!stream)
    stream = cudaStreamPerThread;
  return internal_launch(RT_CB(__cudaLaunchKernel_ptsz_v13000), kernel, gridDim, blockDim, args,
                         sharedMem, stream);
}

RT_API cudaError_t CUDARTAPI cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim,
                                              void **args, size_t sharedMem, cudaStream_t stream)
{
  cudaLaunchKernel_v7000_params p = {func, gridDim, blockDim, args, sharedMem, stream};
  struct rt_kernel *k = rt_kernel_find(func);
  BEGIN_SYM(RT_NEED_CONTEXT, cudaLaunchKernel_v7000, &p, rt_kernel_name(k));
  cudaError_t err;
  CUresult r = launch(k, gridDim, blockDim, sharedMem, stream, args, &err);
  return launch_end(&call_, r, err);
}

RT_API cudaError_t CUDARTAPI cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func,
                                                 void **args)
{
  cudaLaunchKernelExC_v11060_params p = {config, func, args};
  struct rt_kernel *k = rt_kernel_find(func);
  BEGIN_SYM(RT_NEED_CONTEXT, cudaLaunchKernelExC_v11060, &p, rt_kernel_name(k));
  if (!config)
    return rt_end_rt(&call_, cudaErrorInvalidValue);
  /* Launch attributes (clusters, priorities) do not change what the simulator records. */
  cudaError_t err;
  CUresult r = launch(k, config->gridDim, config->blockDim, config->dynamicSmemBytes,
                      config->stream, args, &err);
  return launch_end(&call_, r, err);
}

RT_API cudaError_t CUDARTAPI cudaFuncGetName(const char **name, const void *func)
{
  cudaFuncGetName_v12030_params p = {name, func};
  BEGIN(RT_NEED_DRIVER, cudaFuncGetName_v12030, &p);
  struct rt_kernel *k = rt_kernel_find(func);
  if (!name || !k)
    return rt_end_rt(&call_, name ? cudaErrorInvalidDeviceFunction : cudaErrorInvalidValue);
  *name = k->name;
  return rt_end_rt(&call_, cudaSuccess);
}
