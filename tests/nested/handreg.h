/* nvcc's kernel registration done by hand, for C test programs on the runtime API (no nvcc). */
#ifndef GPUPROF_TESTS_NESTED_HANDREG_H
#define GPUPROF_TESTS_NESTED_HANDREG_H

#include <stdint.h>
#include <string.h>

#include <cuda_runtime_api.h>

/*
 * A fatbin holding one PTX image with the kernels `_Z5scalePf`, `_Z6reducePf` and
 * `_Z4stepPf` (no bodies: the simulator models durations, not code), registered under the
 * addresses of three host stubs as nvcc's generated code would. CUDA 13 nvcc launches through
 * __cudaGetKernel + __cudaLaunchKernel, declared here because no header does.
 */

void **__cudaRegisterFatBinary(void *fatCubin);
void __cudaRegisterFatBinaryEnd(void **handle);
void __cudaRegisterFunction(void **handle, const char *hostFun, char *deviceFun,
                            const char *deviceName, int thread_limit, uint3 *tid, uint3 *bid,
                            dim3 *bDim, dim3 *gDim, int *wSize);
cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *func);
cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 grid, dim3 block, void **args, size_t smem,
                               cudaStream_t stream);

static const char handreg_ptx[] = ".version 9.0\n.target sm_90\n.address_size 64\n"
                                  ".visible .entry _Z5scalePf(\n.param .u64 p\n)\n{\n\tret;\n}\n"
                                  ".visible .entry _Z6reducePf(\n.param .u64 p\n)\n{\n\tret;\n}\n"
                                  ".visible .entry _Z4stepPf(\n.param .u64 p\n)\n{\n\tret;\n}\n";

/* The fatbin container (magic, header, one PTX entry for sm_90), as cudart reads it. */
static void *handreg_fatbin(void)
{
  static uint64_t storage[128];
  unsigned char *out = (unsigned char *)storage;
  size_t len = sizeof(handreg_ptx), padded = (len + 7) & ~(size_t)7;
  uint32_t magic = 0xBA55ED50u, ehdr = 0x50, arch = 90;
  uint16_t version = 1, hdr = 16, kind = 1;
  uint64_t total = ehdr + padded, payload = padded, flags = 0x11;
  unsigned char *e = out + 16;

  memcpy(out, &magic, 4);
  memcpy(out + 4, &version, 2);
  memcpy(out + 6, &hdr, 2);
  memcpy(out + 8, &total, 8);
  memcpy(e, &kind, 2);
  memcpy(e + 4, &ehdr, 4);
  memcpy(e + 8, &payload, 8);
  memcpy(e + 0x1c, &arch, 4);
  memcpy(e + 0x28, &flags, 8);
  memcpy(e + ehdr, handreg_ptx, len);
  return out;
}

/* The host stubs nvcc would generate: only their addresses matter. Distinct bodies keep the
 * linker from folding them into one. */
__attribute__((noinline)) static void handreg_scale(void)
{
  __asm__ volatile("" ::: "memory");
}
__attribute__((noinline)) static void handreg_reduce(void)
{
  __asm__ volatile("nop");
}
__attribute__((noinline)) static void handreg_step(void)
{
  __asm__ volatile("nop\n nop");
}

static void handreg_register(void)
{
  static struct {
    uint32_t magic, version;
    const void *data;
    void *unused;
  } wrapper;
  static char scale[] = "_Z5scalePf", reduce[] = "_Z6reducePf", step[] = "_Z4stepPf";
  void **h;

  wrapper.magic = 0x466243b1u;
  wrapper.version = 1;
  wrapper.data = handreg_fatbin();
  h = __cudaRegisterFatBinary(&wrapper);
  __cudaRegisterFunction(h, (const char *)(uintptr_t)handreg_scale, scale, scale, -1, NULL, NULL,
                         NULL, NULL, NULL);
  __cudaRegisterFunction(h, (const char *)(uintptr_t)handreg_reduce, reduce, reduce, -1, NULL, NULL,
                         NULL, NULL, NULL);
  __cudaRegisterFunction(h, (const char *)(uintptr_t)handreg_step, step, step, -1, NULL, NULL, NULL,
                         NULL, NULL);
  __cudaRegisterFatBinaryEnd(h);
}

/* What `stub<<<grid, block, 0, stream>>>(x)` compiles to with CUDA 13 nvcc. */
static cudaError_t handreg_launch(void (*stub)(void), unsigned grid, unsigned block,
                                  cudaStream_t stream, float *x)
{
  cudaKernel_t k;
  void *args[] = {&x};
  dim3 g = {grid, 1, 1}, b = {block, 1, 1};
  cudaError_t e = __cudaGetKernel(&k, (const void *)(uintptr_t)stub);

  return e != cudaSuccess ? e : __cudaLaunchKernel(k, g, b, args, 0, stream);
}

#endif
