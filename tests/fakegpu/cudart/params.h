/* Callback params of the runtime double's entry points that CUPTI 13.0 has no *_params struct for.
 */
#ifndef FAKEGPU_CUDART_PARAMS_H
#define FAKEGPU_CUDART_PARAMS_H

/*
 * generated_cuda_runtime_api_meta.h (CUDA 13.0) has no params struct for the internal entry
 * points nvcc's generated code calls (__cudaLaunchKernel, __cudaGetKernel, the call
 * configuration, registration). On hardware what CUPTI passes as functionParams for them is
 * undocumented, so a tool must not rely on it; the simulator passes these structs, laid out
 * like the arguments as the generated meta structs are, so tests can look inside.
 */

#include <stddef.h>

#include <cuda_runtime_api.h>

typedef struct {
  cudaKernel_t kernel;
  dim3 gridDim;
  dim3 blockDim;
  void **args;
  size_t sharedMem;
  cudaStream_t stream;
} fg___cudaLaunchKernel_v13000_params;

typedef struct {
  cudaKernel_t *kernelPtr;
  const void *funcAddr;
} fg___cudaGetKernel_v13000_params;

typedef struct {
  dim3 gridDim;
  dim3 blockDim;
  size_t sharedMem;
  void *stream;
} fg___cudaPushCallConfiguration_v13000_params;

typedef struct {
  dim3 *gridDim;
  dim3 *blockDim;
  size_t *sharedMem;
  void *stream;
} fg___cudaPopCallConfiguration_v13000_params;

typedef struct {
  void *fatCubin;
} fg___cudaRegisterFatBinary_v13000_params;

typedef struct {
  void **fatCubinHandle;
} fg___cudaFatBinaryHandle_v13000_params; /* RegisterFatBinaryEnd, UnregisterFatBinary, InitModule
                                           */

typedef struct {
  void **fatCubinHandle;
  const char *hostFun;
  char *deviceFun;
  const char *deviceName;
  int thread_limit;
  uint3 *tid;
  uint3 *bid;
  dim3 *bDim;
  dim3 *gDim;
  int *wSize;
} fg___cudaRegisterFunction_v13000_params;

typedef struct {
  void **fatCubinHandle;
  char *hostVar;
  char *deviceAddress;
  const char *deviceName;
  int ext;
  size_t size;
  int constant;
  int global;
} fg___cudaRegisterVar_v13000_params;

#endif
