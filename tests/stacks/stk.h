/* Helpers of the stack test programs: a context and a module of named kernels on the simulator. */
#ifndef GPUPROF_TESTS_STACKS_STK_H
#define GPUPROF_TESTS_STACKS_STK_H

#include <stdio.h>
#include <stdlib.h>

#include <cuda.h>

#include "tests/fakegpu/fakegpu.h"

#ifdef __cplusplus
extern "C" {
#endif

#define STK_CU(call)                                                                               \
  do {                                                                                             \
    CUresult r_ = (call);                                                                          \
    if (r_ != CUDA_SUCCESS) {                                                                      \
      fprintf(stderr, "stacks: %s:%d: %s returned %d\n", __FILE__, __LINE__, #call, (int)r_);      \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

/* The functions whose names the checks expect must stay real calls: no inlining, no sibling
 * calls (the build adds -fno-inline -fno-optimize-sibling-calls too). */
#define STK_FRAME __attribute__((noinline, noclone))

static inline CUcontext stk_context(void)
{
  CUdevice dev;
  CUcontext ctx;

  STK_CU(cuInit(0));
  STK_CU(cuDeviceGet(&dev, 0));
  STK_CU(cuCtxCreate(&ctx, NULL, 0, dev));
  return ctx;
}

/* The kernel `name` of a fresh simulated module. */
static inline CUfunction stk_kernel(const char *name)
{
  CUmodule mod;
  CUfunction f;

  if (fakegpu_module_from_names(&mod, &name, 1) != 0) {
    fprintf(stderr, "stacks: fakegpu_module_from_names(%s) failed\n", name);
    exit(1);
  }
  STK_CU(cuModuleGetFunction(&f, mod, name));
  return f;
}

#ifdef __cplusplus
}
#endif

#endif
