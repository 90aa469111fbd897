/* Copy and set entry points: cuMemcpy*, cuMemcpyPeer*, cuMemsetD* and their async forms. */
#include <string.h>

#include "tests/fakegpu/driver.h"

/* What a direction-specific API requires of its operands (cuMemcpy / cuMemcpyAsync take
 * anything and let the addresses decide, as unified addressing does). */
enum need { ANY, TO_DEV = 1, FROM_DEV = 2 };

static int dev_class(uint64_t addr, uint64_t bytes)
{
  enum fg_mem_class c;
  int dev;
  uint32_t ctx;
  if (fg_mem_classify(addr, bytes, &c, &dev, &ctx) != 0)
    return 0;
  return c == FG_MEM_DEVICE || c == FG_MEM_MANAGED;
}

/* Runs or captures `op` on the stream; synchronous forms wait for the simulated completion. */
static CUresult run(struct fg_stream *s, const struct fg_op *op, int async)
{
  CUresult r;
  if (s->capture) {
    if (!async)
      return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    fg_capture_op(s, op, &r);
    return r;
  }
  uint64_t end;
  r = fg_op_submit(s, op, async, NULL, NULL, &end);
  if (r == CUDA_SUCCESS && !async)
    fg_sleep_until(end);
  return r;
}

static CUresult copy(uint64_t dst, uint64_t src, size_t bytes, CUstream h, int ptsz, int async,
                     unsigned need)
{
  struct fg_stream *s;
  CUresult r = fg_stream_resolve(h, ptsz, &s);
  if (r != CUDA_SUCCESS)
    return r;
  if ((bytes && (!dst || !src)) || ((need & TO_DEV) && !dev_class(dst, bytes)) ||
      ((need & FROM_DEV) && !dev_class(src, bytes)))
    return CUDA_ERROR_INVALID_VALUE;
  struct fg_op op;
  memset(&op, 0, sizeof(op));
  op.type = FG_OP_MEMCPY;
  op.dst = dst;
  op.src = src;
  op.bytes = bytes;
  op.dst_device = op.src_device = -1;
  return run(s, &op, async);
}

static CUresult peer(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx,
                     size_t bytes, CUstream h, int ptsz, int async)
{
  const struct fg_ctx *dc = (const struct fg_ctx *)dctx, *sc = (const struct fg_ctx *)sctx;
  if (!fg_ctx_valid(dc) || !fg_ctx_valid(sc))
    return CUDA_ERROR_INVALID_CONTEXT;
  struct fg_stream *s;
  CUresult r = fg_stream_resolve(h, ptsz, &s);
  if (r != CUDA_SUCCESS)
    return r;
  if (!dev_class(dst, bytes) || !dev_class(src, bytes))
    return CUDA_ERROR_INVALID_VALUE;
  struct fg_op op;
  memset(&op, 0, sizeof(op));
  op.type = FG_OP_MEMCPY;
  op.dst = dst;
  op.src = src;
  op.bytes = bytes;
  op.dst_device = dc->device;
  op.src_device = sc->device;
  return run(s, &op, async);
}

static CUresult set(CUdeviceptr dst, uint32_t value, unsigned elem, size_t n, CUstream h,
                    int ptsz, int async)
{
  struct fg_stream *s;
  CUresult r = fg_stream_resolve(h, ptsz, &s);
  if (r != CUDA_SUCCESS)
    return r;
  if (!dst || dst % elem || !dev_class(dst, (uint64_t)n * elem))
    return CUDA_ERROR_INVALID_VALUE;
  struct fg_op op;
  memset(&op, 0, sizeof(op));
  op.type = FG_OP_MEMSET;
  op.dst = dst;
  op.bytes = (uint64_t)n * elem;
  op.elem_size = elem;
  op.value = elem == 1 ? (value & 0xff) : elem == 2 ? (value & 0xffff) : value;
  return run(s, &op, async);
}

#define H(p) ((uint64_t)(uintptr_t)(p))

FG_API CUresult CUDAAPI cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
  FG_ENTER(cuMemcpy, NULL, dst, src, ByteCount);
  return FG_EXIT(copy(dst, src, ByteCount, NULL, 0, 0, ANY));
}

FG_API CUresult CUDAAPI cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
  FG_ENTER(cuMemcpy_ptds, NULL, dst, src, ByteCount);
  return FG_EXIT(copy(dst, src, ByteCount, NULL, 1, 0, ANY));
}

FG_API CUresult CUDAAPI cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,
                                      CUstream hStream)
{
  FG_ENTER(cuMemcpyAsync, NULL, dst, src, ByteCount, hStream);
  return FG_EXIT(copy(dst, src, ByteCount, hStream, 0, 1, ANY));
}

FG_API CUresult CUDAAPI cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,
                                           CUstream hStream)
{
  FG_ENTER(cuMemcpyAsync_ptsz, NULL, dst, src, ByteCount, hStream);
  return FG_EXIT(copy(dst, src, ByteCount, hStream, 1, 1, ANY));
}

FG_API CUresult CUDAAPI cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
  FG_ENTER(cuMemcpyHtoD_v2, NULL, dstDevice, srcHost, ByteCount);
  return FG_EXIT(copy(dstDevice, H(srcHost), ByteCount, NULL, 0, 0, TO_DEV));
}

FG_API CUresult CUDAAPI cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void *srcHost,
                                             size_t ByteCount)
{
  FG_ENTER(cuMemcpyHtoD_v2_ptds, NULL, dstDevice, srcHost, ByteCount);
  return FG_EXIT(copy(dstDevice, H(srcHost), ByteCount, NULL, 1, 0, TO_DEV));
}

FG_API CUresult CUDAAPI cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
  FG_ENTER(cuMemcpyDtoH_v2, NULL, dstHost, srcDevice, ByteCount);
  return FG_EXIT(copy(H(dstHost), srcDevice, ByteCount, NULL, 0, 0, FROM_DEV));
}

FG_API CUresult CUDAAPI cuMemcpyDtoH_v2_ptds(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
  FG_ENTER(cuMemcpyDtoH_v2_ptds, NULL, dstHost, srcDevice, ByteCount);
  return FG_EXIT(copy(H(dstHost), srcDevice, ByteCount, NULL, 1, 0, FROM_DEV));
}

FG_API CUresult CUDAAPI cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                        size_t ByteCount)
{
  FG_ENTER(cuMemcpyDtoD_v2, NULL, dstDevice, srcDevice, ByteCount);
  return FG_EXIT(copy(dstDevice, srcDevice, ByteCount, NULL, 0, 0, TO_DEV | FROM_DEV));
}

FG_API CUresult CUDAAPI cuMemcpyDtoD_v2_ptds(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                             size_t ByteCount)
{
  FG_ENTER(cuMemcpyDtoD_v2_ptds, NULL, dstDevice, srcDevice, ByteCount);
  return FG_EXIT(copy(dstDevice, srcDevice, ByteCount, NULL, 1, 0, TO_DEV | FROM_DEV));
}

FG_API CUresult CUDAAPI cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost,
                                             size_t ByteCount, CUstream hStream)
{
  FG_ENTER(cuMemcpyHtoDAsync_v2, NULL, dstDevice, srcHost, ByteCount, hStream);
  return FG_EXIT(copy(dstDevice, H(srcHost), ByteCount, hStream, 0, 1, TO_DEV));
}

FG_API CUresult CUDAAPI cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void *srcHost,
                                                  size_t ByteCount, CUstream hStream)
{
  FG_ENTER(cuMemcpyHtoDAsync_v2_ptsz, NULL, dstDevice, srcHost, ByteCount, hStream);
  return FG_EXIT(copy(dstDevice, H(srcHost), ByteCount, hStream, 1, 1, TO_DEV));
}

FG_API CUresult CUDAAPI cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice,
                                             size_t ByteCount, CUstream hStream)
{
  FG_ENTER(cuMemcpyDtoHAsync_v2, NULL, dstHost, srcDevice, ByteCount, hStream);
  return FG_EXIT(copy(H(dstHost), srcDevice, ByteCount, hStream, 0, 1, FROM_DEV));
}

FG_API CUresult CUDAAPI cuMemcpyDtoHAsync_v2_ptsz(void *dstHost, CUdeviceptr srcDevice,
                                                  size_t ByteCount, CUstream hStream)
{
  FG_ENTER(cuMemcpyDtoHAsync_v2_ptsz, NULL, dstHost, srcDevice, ByteCount, hStream);
  return FG_EXIT(copy(H(dstHost), srcDevice, ByteCount, hStream, 1, 1, FROM_DEV));
}

FG_API CUresult CUDAAPI cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                             size_t ByteCount, CUstream hStream)
{
  FG_ENTER(cuMemcpyDtoDAsync_v2, NULL, dstDevice, srcDevice, ByteCount, hStream);
  return FG_EXIT(copy(dstDevice, srcDevice, ByteCount, hStream, 0, 1, TO_DEV | FROM_DEV));
}

FG_API CUresult CUDAAPI cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                                  size_t ByteCount, CUstream hStream)
{
  FG_ENTER(cuMemcpyDtoDAsync_v2_ptsz, NULL, dstDevice, srcDevice, ByteCount, hStream);
  return FG_EXIT(copy(dstDevice, srcDevice, ByteCount, hStream, 1, 1, TO_DEV | FROM_DEV));
}

FG_API CUresult CUDAAPI cuMemcpyPeer(CUdeviceptr dstDevice, CUcontext dstContext,
                                     CUdeviceptr srcDevice, CUcontext srcContext, size_t ByteCount)
{
  FG_ENTER(cuMemcpyPeer, NULL, dstDevice, dstContext, srcDevice, srcContext, ByteCount);
  return FG_EXIT(peer(dstDevice, dstContext, srcDevice, srcContext, ByteCount, NULL, 0, 0));
}

FG_API CUresult CUDAAPI cuMemcpyPeer_ptds(CUdeviceptr dstDevice, CUcontext dstContext,
                                          CUdeviceptr srcDevice, CUcontext srcContext,
                                          size_t ByteCount)
{
  FG_ENTER(cuMemcpyPeer_ptds, NULL, dstDevice, dstContext, srcDevice, srcContext, ByteCount);
  return FG_EXIT(peer(dstDevice, dstContext, srcDevice, srcContext, ByteCount, NULL, 1, 0));
}

FG_API CUresult CUDAAPI cuMemcpyPeerAsync(CUdeviceptr dstDevice, CUcontext dstContext,
                                          CUdeviceptr srcDevice, CUcontext srcContext,
                                          size_t ByteCount, CUstream hStream)
{
  FG_ENTER(cuMemcpyPeerAsync, NULL, dstDevice, dstContext, srcDevice, srcContext, ByteCount,
           hStream);
  return FG_EXIT(peer(dstDevice, dstContext, srcDevice, srcContext, ByteCount, hStream, 0, 1));
}

FG_API CUresult CUDAAPI cuMemcpyPeerAsync_ptsz(CUdeviceptr dstDevice, CUcontext dstContext,
                                               CUdeviceptr srcDevice, CUcontext srcContext,
                                               size_t ByteCount, CUstream hStream)
{
  FG_ENTER(cuMemcpyPeerAsync_ptsz, NULL, dstDevice, dstContext, srcDevice, srcContext,
           ByteCount, hStream);
  return FG_EXIT(peer(dstDevice, dstContext, srcDevice, srcContext, ByteCount, hStream, 1, 1));
}

FG_API CUresult CUDAAPI cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
  FG_ENTER(cuMemsetD8_v2, NULL, dstDevice, uc, N);
  return FG_EXIT(set(dstDevice, uc, 1, N, NULL, 0, 0));
}

FG_API CUresult CUDAAPI cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
  FG_ENTER(cuMemsetD8_v2_ptds, NULL, dstDevice, uc, N);
  return FG_EXIT(set(dstDevice, uc, 1, N, NULL, 1, 0));
}

FG_API CUresult CUDAAPI cuMemsetD16_v2(CUdeviceptr dstDevice, unsigned short us, size_t N)
{
  FG_ENTER(cuMemsetD16_v2, NULL, dstDevice, us, N);
  return FG_EXIT(set(dstDevice, us, 2, N, NULL, 0, 0));
}

FG_API CUresult CUDAAPI cuMemsetD16_v2_ptds(CUdeviceptr dstDevice, unsigned short us, size_t N)
{
  FG_ENTER(cuMemsetD16_v2_ptds, NULL, dstDevice, us, N);
  return FG_EXIT(set(dstDevice, us, 2, N, NULL, 1, 0));
}

FG_API CUresult CUDAAPI cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
  FG_ENTER(cuMemsetD32_v2, NULL, dstDevice, ui, N);
  return FG_EXIT(set(dstDevice, ui, 4, N, NULL, 0, 0));
}

FG_API CUresult CUDAAPI cuMemsetD32_v2_ptds(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
  FG_ENTER(cuMemsetD32_v2_ptds, NULL, dstDevice, ui, N);
  return FG_EXIT(set(dstDevice, ui, 4, N, NULL, 1, 0));
}

FG_API CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N,
                                        CUstream hStream)
{
  FG_ENTER(cuMemsetD8Async, NULL, dstDevice, uc, N, hStream);
  return FG_EXIT(set(dstDevice, uc, 1, N, hStream, 0, 1));
}

FG_API CUresult CUDAAPI cuMemsetD8Async_ptsz(CUdeviceptr dstDevice, unsigned char uc, size_t N,
                                             CUstream hStream)
{
  FG_ENTER(cuMemsetD8Async_ptsz, NULL, dstDevice, uc, N, hStream);
  return FG_EXIT(set(dstDevice, uc, 1, N, hStream, 1, 1));
}

FG_API CUresult CUDAAPI cuMemsetD16Async(CUdeviceptr dstDevice, unsigned short us, size_t N,
                                         CUstream hStream)
{
  FG_ENTER(cuMemsetD16Async, NULL, dstDevice, us, N, hStream);
  return FG_EXIT(set(dstDevice, us, 2, N, hStream, 0, 1));
}

FG_API CUresult CUDAAPI cuMemsetD16Async_ptsz(CUdeviceptr dstDevice, unsigned short us, size_t N,
                                              CUstream hStream)
{
  FG_ENTER(cuMemsetD16Async_ptsz, NULL, dstDevice, us, N, hStream);
  return FG_EXIT(set(dstDevice, us, 2, N, hStream, 1, 1));
}

FG_API CUresult CUDAAPI cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N,
                                         CUstream hStream)
{
  FG_ENTER(cuMemsetD32Async, NULL, dstDevice, ui, N, hStream);
  return FG_EXIT(set(dstDevice, ui, 4, N, hStream, 0, 1));
}

FG_API CUresult CUDAAPI cuMemsetD32Async_ptsz(CUdeviceptr dstDevice, unsigned int ui, size_t N,
                                              CUstream hStream)
{
  FG_ENTER(cuMemsetD32Async_ptsz, NULL, dstDevice, ui, N, hStream);
  return FG_EXIT(set(dstDevice, ui, 4, N, hStream, 1, 1));
}

/* 2D copies between host and device memory (arrays are not simulated): one record of
 * WidthInBytes * Height bytes, as for a contiguous copy. */
static uint64_t addr2d(CUmemorytype type, const void *host, CUdeviceptr dev, size_t x, size_t y,
                       size_t pitch)
{
  uint64_t base = type == CU_MEMORYTYPE_HOST ? H(host) : dev;
  return base + y * pitch + x;
}

static CUresult copy2d(const CUDA_MEMCPY2D *c, CUstream h, int ptsz, int async)
{
  if (!c || c->srcMemoryType == CU_MEMORYTYPE_ARRAY || c->dstMemoryType == CU_MEMORYTYPE_ARRAY)
    return CUDA_ERROR_INVALID_VALUE;
  size_t sp = c->srcPitch ? c->srcPitch : c->WidthInBytes;
  size_t dp = c->dstPitch ? c->dstPitch : c->WidthInBytes;
  if (sp < c->WidthInBytes || dp < c->WidthInBytes)
    return CUDA_ERROR_INVALID_VALUE;
  struct fg_stream *s;
  CUresult r = fg_stream_resolve(h, ptsz, &s);
  if (r != CUDA_SUCCESS)
    return r;
  struct fg_op op;
  memset(&op, 0, sizeof(op));
  op.type = FG_OP_MEMCPY;
  op.src = addr2d(c->srcMemoryType, c->srcHost, c->srcDevice, c->srcXInBytes, c->srcY, sp);
  op.dst = addr2d(c->dstMemoryType, c->dstHost, c->dstDevice, c->dstXInBytes, c->dstY, dp);
  op.width = c->WidthInBytes;
  op.height = c->Height ? c->Height : 1;
  op.spitch = sp;
  op.dpitch = dp;
  op.bytes = op.width * op.height;
  op.dst_device = op.src_device = -1;
  if (!op.src || !op.dst)
    return CUDA_ERROR_INVALID_VALUE;
  return run(s, &op, async);
}

FG_API CUresult CUDAAPI cuMemcpy2D_v2(const CUDA_MEMCPY2D *pCopy)
{
  FG_ENTER(cuMemcpy2D_v2, NULL, pCopy);
  return FG_EXIT(copy2d(pCopy, NULL, 0, 0));
}

FG_API CUresult CUDAAPI cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D *pCopy)
{
  FG_ENTER(cuMemcpy2D_v2_ptds, NULL, pCopy);
  return FG_EXIT(copy2d(pCopy, NULL, 1, 0));
}

FG_API CUresult CUDAAPI cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *pCopy, CUstream hStream)
{
  FG_ENTER(cuMemcpy2DAsync_v2, NULL, pCopy, hStream);
  return FG_EXIT(copy2d(pCopy, hStream, 0, 1));
}

FG_API CUresult CUDAAPI cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D *pCopy, CUstream hStream)
{
  FG_ENTER(cuMemcpy2DAsync_v2_ptsz, NULL, pCopy, hStream);
  return FG_EXIT(copy2d(pCopy, hStream, 1, 1));
}
