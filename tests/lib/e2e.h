/* Helpers shared by the end-to-end test programs: checked driver calls and modules of named
 * kernels. */
#ifndef GPUPROF_TESTS_LIB_E2E_H
#define GPUPROF_TESTS_LIB_E2E_H

/*
 * The programs are run twice by tests/e2e/run_case.py, without and with the agent, and their
 * stdout and exit status must not change: they print only deterministic facts (what they
 * verified, never ids, pointers or times). A failed CUDA call prints one "e2e:" line on stderr
 * and exits with status 1, so a broken simulator shows up as a failed run, not a wrong count.
 */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>

#define CU(call) e2e_check_cu((call), #call, __FILE__, __LINE__)

static inline void e2e_check_cu(CUresult r, const char *what, const char *file, int line)
{
  const char *name = NULL;

  if (r == CUDA_SUCCESS)
    return;
  if (cuGetErrorName(r, &name) != CUDA_SUCCESS)
    name = "?";
  fprintf(stderr, "e2e: %s:%d: %s returned %d (%s)\n", file, line, what, (int)r, name);
  exit(1);
}

static inline void e2e_fail(const char *what)
{
  fprintf(stderr, "e2e: %s\n", what);
  exit(1);
}

/* Loads a module that defines one empty, parameterless kernel per name (names are used as
 * given, so mangled C++ names work), from PTX text: the real driver JIT-compiles it, the
 * simulator reads the entry names. */
static inline CUmodule e2e_module_with_kernels(const char *const *names, int n)
{
  static const char header[] = ".version 9.0\n.target sm_75\n.address_size 64\n\n";
  size_t cap = sizeof(header) + 1;
  char *ptx;
  CUmodule mod;

  for (int i = 0; i < n; i++)
    cap += strlen(names[i]) + 64;
  ptx = malloc(cap);
  if (!ptx)
    e2e_fail("out of memory building PTX");
  strcpy(ptx, header);
  for (int i = 0; i < n; i++) {
    size_t len = strlen(ptx);
    snprintf(ptx + len, cap - len, ".visible .entry %s()\n{\n\tret;\n}\n\n", names[i]);
  }
  CU(cuModuleLoadData(&mod, ptx));
  free(ptx);
  return mod;
}

/* cuInit, device 0 (*dev) with its primary context made current (*ctx), and a module of the
 * named kernels (e2e_module_with_kernels, returned) whose functions go to fn[0..n). */
static inline CUmodule e2e_context_with_kernels(CUdevice *dev, CUcontext *ctx,
                                                const char *const *names, int n, CUfunction *fn)
{
  CUmodule mod;

  CU(cuInit(0));
  CU(cuDeviceGet(dev, 0));
  CU(cuDevicePrimaryCtxRetain(ctx, *dev));
  CU(cuCtxSetCurrent(*ctx));
  mod = e2e_module_with_kernels(names, n);
  for (int i = 0; i < n; i++)
    CU(cuModuleGetFunction(&fn[i], mod, names[i]));
  return mod;
}

/* One launch of a parameterless kernel: 1 block of 32 threads, no dynamic shared memory. */
static inline void e2e_launch(CUfunction f, CUstream stream)
{
  CU(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, stream, NULL, NULL));
}

/* Deterministic byte pattern used to fill host buffers. */
static inline uint8_t e2e_pattern(size_t i)
{
  return (uint8_t)((i * 7u + (i >> 8) * 13u) & 0xffu);
}

#endif
