/* Simulated GPU memory: allocations backed by host memory, pools, VMM, MEMORY2 records. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tests/fakegpu/driver.h"

/*
 * A CUdeviceptr is the address of real host memory, so copies really move bytes and a test
 * can read back what it wrote. Every allocation is kept in a table sorted by address so
 * copies can classify pointers (pageable / pinned / device / managed) and frees of unknown
 * addresses fail as on hardware. VMM maps memfd pages at reserved addresses, so memory
 * mapped twice really aliases. VMM produces no MEMORY2 records (cupti.md 5.1, [U]).
 */

#define POOL_MAGIC 0x504f4f4cu

struct alloc {
  uint64_t base;
  uint64_t size;
  enum fg_mem_class cls;
  int device;
  struct fg_ctx *ctx;
  int registered;            /* cuMemHostRegister: memory not ours to free */
  int vmm;                   /* a VMM mapping (freed by cuMemUnmap only) */
  struct fg_pool *pool;      /* stream-ordered allocation */
  struct phys *ph;           /* a VMM mapping: the physical memory it maps */
};

static struct fg_pool *g_pools;   /* every pool ever made: allocations may point at them */

/* Physical memory lives while a handle reference (cuMemCreate, each
 * cuMemRetainAllocationHandle) or a mapping is left: released and unmapped in either order.
 * Under fg_lock. */
struct phys {
  int fd;
  uint64_t size;
  int device;
  int refs, maps;
};

static void phys_settle(struct phys *ph)
{
  if (ph->refs == 0 && ph->maps == 0) {
    close(ph->fd);
    free(ph);
  }
}

static struct alloc *g_allocs;
static size_t g_nallocs, g_capallocs;
static uint64_t g_used[FG_MAX_DEVICES];

/* ---- allocation table (under fg_lock) ---- */

static size_t lower_bound(uint64_t addr)
{
  size_t lo = 0, hi = g_nallocs;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (g_allocs[mid].base < addr)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

static int table_insert(const struct alloc *a)
{
  if (g_nallocs == g_capallocs) {
    size_t cap = g_capallocs ? g_capallocs * 2 : 256;
    struct alloc *n = realloc(g_allocs, cap * sizeof(*n));
    if (!n)
      return -1;
    g_allocs = n;
    g_capallocs = cap;
  }
  size_t i = lower_bound(a->base);
  memmove(&g_allocs[i + 1], &g_allocs[i], (g_nallocs - i) * sizeof(*a));
  g_allocs[i] = *a;
  g_nallocs++;
  return 0;
}

static struct alloc *table_find(uint64_t addr)
{
  size_t i = lower_bound(addr + 1);
  if (i == 0)
    return NULL;
  struct alloc *a = &g_allocs[i - 1];
  return addr >= a->base && addr < a->base + (a->size ? a->size : 1) ? a : NULL;
}

static void table_remove(struct alloc *a)
{
  size_t i = (size_t)(a - g_allocs);
  memmove(&g_allocs[i], &g_allocs[i + 1], (g_nallocs - i - 1) * sizeof(*a));
  g_nallocs--;
}

int fg_mem_classify(uint64_t addr, uint64_t bytes, enum fg_mem_class *cls, int *device,
                    uint32_t *ctx_uid)
{
  pthread_mutex_lock(&fg_lock);
  struct alloc *a = table_find(addr);
  *cls = a ? a->cls : FG_MEM_PAGEABLE;
  *device = a ? a->device : -1;
  *ctx_uid = a && a->ctx ? a->ctx->uid : 0;
  int rc = a && addr + bytes > a->base + a->size ? -1 : 0;
  pthread_mutex_unlock(&fg_lock);
  return rc;
}

/* ---- records ---- */

static CUpti_ActivityMemoryKind cupti_kind(enum fg_mem_class c)
{
  switch (c) {
  case FG_MEM_PINNED: return CUPTI_ACTIVITY_MEMORY_KIND_PINNED;
  case FG_MEM_DEVICE: return CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  case FG_MEM_MANAGED: return CUPTI_ACTIVITY_MEMORY_KIND_MANAGED;
  default: return CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE;
  }
}

static void memory_record(CUpti_ActivityMemoryOperationType op, const struct alloc *a,
                          const struct fg_stream *s, uint64_t pc)
{
  if (!fg_kind_on(CUPTI_ACTIVITY_KIND_MEMORY2, a->ctx))
    return;
  CUpti_ActivityMemory4 r;
  memset(&r, 0, sizeof(r));
  r.kind = CUPTI_ACTIVITY_KIND_MEMORY2;
  r.memoryOperationType = op;
  r.memoryKind = cupti_kind(a->cls);
  r.correlationId = fg_corr_current();
  r.address = a->base;
  r.bytes = a->size;
  r.timestamp = fg_now();
  r.PC = pc;
  r.processId = (uint32_t)getpid();
  r.deviceId = a->device >= 0 ? (uint32_t)a->device : 0;
  r.contextId = a->ctx ? a->ctx->uid : CUPTI_INVALID_CONTEXT_ID;
  r.streamId = s ? s->id : CUPTI_INVALID_STREAM_ID;
  r.isAsync = s != NULL;
  if (a->pool) {
    r.memoryPoolConfig.memoryPoolType = CUPTI_ACTIVITY_MEMORY_POOL_TYPE_LOCAL;
    r.memoryPoolConfig.address = a->pool->address;
    r.memoryPoolConfig.releaseThreshold = a->pool->release_threshold;
    r.memoryPoolConfig.pool.size = a->pool->size;
    r.memoryPoolConfig.utilizedSize = a->pool->used;
  }
  fg_emit(&r, sizeof(r), 0);
}

static void pool_record(CUpti_ActivityMemoryPoolOperationType op, const struct fg_pool *p,
                        size_t min_keep)
{
  if (!fg_kind_on(CUPTI_ACTIVITY_KIND_MEMORY_POOL, NULL))
    return;
  CUpti_ActivityMemoryPool3 r;
  memset(&r, 0, sizeof(r));
  r.kind = CUPTI_ACTIVITY_KIND_MEMORY_POOL;
  r.memoryPoolOperationType = op;
  r.memoryPoolType = CUPTI_ACTIVITY_MEMORY_POOL_TYPE_LOCAL;
  r.correlationId = fg_corr_current();
  r.processId = (uint32_t)getpid();
  r.deviceId = (uint32_t)p->device;
  r.minBytesToKeep = min_keep;
  r.address = p->address;
  r.size = p->size;
  r.releaseThreshold = p->release_threshold;
  r.timestamp = fg_now();
  r.utilizedSize = p->used;
  fg_emit(&r, sizeof(r), 0);
}

/* ---- plain allocations ---- */

static CUresult current(struct fg_ctx **ctx)
{
  if (!fg_initialized())
    return CUDA_ERROR_NOT_INITIALIZED;
  *ctx = fg_ctx_current();
  return fg_ctx_valid(*ctx) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

/* Allocates and registers; on success *out holds the table entry's copy. */
static CUresult alloc_new(size_t size, enum fg_mem_class cls, struct fg_ctx *ctx,
                          struct fg_pool *pool, struct alloc *out)
{
  if (size == 0)
    return CUDA_ERROR_INVALID_VALUE;
  int dev = ctx->device;
  void *p = NULL;
  if (posix_memalign(&p, 512, size) != 0)
    return CUDA_ERROR_OUT_OF_MEMORY;
  struct alloc a = {(uint64_t)(uintptr_t)p, size, cls, dev, ctx, 0, 0, pool, NULL};
  pthread_mutex_lock(&fg_lock);
  /* Checked under the lock that guards g_used: threads allocate concurrently. */
  if (cls != FG_MEM_PINNED && g_used[dev] + size > fg_devices[dev].total_mem) {
    pthread_mutex_unlock(&fg_lock);
    free(p);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (table_insert(&a) != 0) {
    pthread_mutex_unlock(&fg_lock);
    free(p);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (cls != FG_MEM_PINNED)
    g_used[dev] += size;
  if (pool) {
    pool->used += size;
    if (pool->used > pool->size)
      pool->size = pool->used;
    if (pool->used > pool->used_high)
      pool->used_high = pool->used;
    if (pool->size > pool->reserved_high)
      pool->reserved_high = pool->size;
  }
  pthread_mutex_unlock(&fg_lock);
  *out = a;
  return CUDA_SUCCESS;
}

/* Frees the allocation starting at `addr` if its class is in `classes` (bit mask). */
static CUresult alloc_free(uint64_t addr, unsigned classes, const struct fg_stream *s,
                           uint64_t pc)
{
  pthread_mutex_lock(&fg_lock);
  struct alloc *e = table_find(addr);
  if (!e || e->base != addr || e->vmm || e->registered || !(classes & (1u << e->cls))) {
    pthread_mutex_unlock(&fg_lock);
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct alloc a = *e;
  table_remove(e);
  if (a.cls != FG_MEM_PINNED)
    g_used[a.device] -= a.size;
  if (a.pool)
    a.pool->used -= a.size;
  pthread_mutex_unlock(&fg_lock);
  memory_record(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE, &a, s, pc);
  free((void *)(uintptr_t)a.base);
  return CUDA_SUCCESS;
}

#define PC() ((uint64_t)(uintptr_t)__builtin_return_address(0))
#define DEVICE_BITS ((1u << FG_MEM_DEVICE) | (1u << FG_MEM_MANAGED))

static CUresult device_alloc(CUdeviceptr *dptr, size_t size, enum fg_mem_class cls, uint64_t pc)
{
  struct fg_ctx *ctx;
  CUresult r = current(&ctx);
  if (r != CUDA_SUCCESS)
    return r;
  if (!dptr)
    return CUDA_ERROR_INVALID_VALUE;
  struct alloc a;
  r = alloc_new(size, cls, ctx, NULL, &a);
  if (r != CUDA_SUCCESS)
    return r;
  *dptr = a.base;
  memory_record(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION, &a, NULL, pc);
  return CUDA_SUCCESS;
}

FG_API CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
  FG_ENTER(cuMemAlloc_v2, NULL, dptr, bytesize);
  return FG_EXIT(device_alloc(dptr, bytesize, FG_MEM_DEVICE, PC()));
}

FG_API CUresult CUDAAPI cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
                                           size_t Height, unsigned int ElementSizeBytes)
{
  FG_ENTER(cuMemAllocPitch_v2, NULL, dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
  if (!pPitch || WidthInBytes == 0 || Height == 0 ||
      (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16))
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  size_t pitch = (WidthInBytes + 511) & ~(size_t)511;
  CUresult r = device_alloc(dptr, pitch * Height, FG_MEM_DEVICE, PC());
  if (r == CUDA_SUCCESS)
    *pPitch = pitch;
  return FG_EXIT(r);
}

FG_API CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
  FG_ENTER(cuMemAllocManaged, NULL, dptr, bytesize, flags);
  return FG_EXIT(device_alloc(dptr, bytesize, FG_MEM_MANAGED, PC()));
}

/* cuMemFree(0) is accepted as a no-op, like cudaFree(NULL). */
FG_API CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr)
{
  FG_ENTER(cuMemFree_v2, NULL, dptr);
  struct fg_ctx *ctx;
  CUresult r = current(&ctx);
  if (r == CUDA_SUCCESS && dptr)
    r = alloc_free(dptr, DEVICE_BITS, NULL, PC());
  return FG_EXIT(r);
}

static CUresult host_alloc(void **pp, size_t size, uint64_t pc)
{
  struct fg_ctx *ctx;
  CUresult r = current(&ctx);
  if (r != CUDA_SUCCESS)
    return r;
  if (!pp)
    return CUDA_ERROR_INVALID_VALUE;
  struct alloc a;
  r = alloc_new(size, FG_MEM_PINNED, ctx, NULL, &a);
  if (r != CUDA_SUCCESS)
    return r;
  *pp = (void *)(uintptr_t)a.base;
  memory_record(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION, &a, NULL, pc);
  return CUDA_SUCCESS;
}

FG_API CUresult CUDAAPI cuMemAllocHost_v2(void **pp, size_t bytesize)
{
  FG_ENTER(cuMemAllocHost_v2, NULL, pp, bytesize);
  return FG_EXIT(host_alloc(pp, bytesize, PC()));
}

FG_API CUresult CUDAAPI cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
  FG_ENTER(cuMemHostAlloc, NULL, pp, bytesize, Flags);
  return FG_EXIT(host_alloc(pp, bytesize, PC()));
}

FG_API CUresult CUDAAPI cuMemFreeHost(void *p)
{
  FG_ENTER(cuMemFreeHost, NULL, p);
  struct fg_ctx *ctx;
  CUresult r = current(&ctx);
  if (r == CUDA_SUCCESS && p)
    r = alloc_free((uint64_t)(uintptr_t)p, 1u << FG_MEM_PINNED, NULL, PC());
  return FG_EXIT(r);
}

FG_API CUresult CUDAAPI cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
  FG_ENTER(cuMemHostRegister_v2, NULL, p, bytesize, Flags);
  struct fg_ctx *ctx;
  CUresult r = current(&ctx);
  if (r != CUDA_SUCCESS)
    return FG_EXIT(r);
  if (!p || !bytesize)
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  struct alloc a = {
      (uint64_t)(uintptr_t)p, bytesize, FG_MEM_PINNED, ctx->device, ctx, 1, 0, NULL, NULL};
  pthread_mutex_lock(&fg_lock);
  if (table_find(a.base))
    r = CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  else if (table_insert(&a) != 0)
    r = CUDA_ERROR_OUT_OF_MEMORY;
  pthread_mutex_unlock(&fg_lock);
  return FG_EXIT(r);
}

FG_API CUresult CUDAAPI cuMemHostUnregister(void *p)
{
  FG_ENTER(cuMemHostUnregister, NULL, p);
  pthread_mutex_lock(&fg_lock);
  struct alloc *e = table_find((uint64_t)(uintptr_t)p);
  CUresult r = CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  if (e && e->registered && e->base == (uint64_t)(uintptr_t)p) {
    table_remove(e);
    r = CUDA_SUCCESS;
  }
  pthread_mutex_unlock(&fg_lock);
  return FG_EXIT(r);
}

FG_API CUresult CUDAAPI cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
  FG_ENTER(cuMemGetInfo_v2, NULL, free_bytes, total);
  struct fg_ctx *ctx;
  CUresult r = current(&ctx);
  if (r != CUDA_SUCCESS)
    return FG_EXIT(r);
  if (!free_bytes || !total)
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  pthread_mutex_lock(&fg_lock);
  *total = fg_devices[ctx->device].total_mem;
  *free_bytes = *total - g_used[ctx->device];
  pthread_mutex_unlock(&fg_lock);
  return FG_EXIT(CUDA_SUCCESS);
}

FG_API CUresult CUDAAPI cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
  FG_ENTER(cuMemGetAddressRange_v2, NULL, pbase, psize, dptr);
  CUresult r = CUDA_ERROR_NOT_FOUND;
  pthread_mutex_lock(&fg_lock);
  struct alloc *e = table_find(dptr);
  if (e && e->cls != FG_MEM_PINNED) {
    if (pbase)
      *pbase = e->base;
    if (psize)
      *psize = e->size;
    r = CUDA_SUCCESS;
  }
  pthread_mutex_unlock(&fg_lock);
  return FG_EXIT(r);
}

/* One attribute of `ptr`. Unknown (pageable host) pointers: an error for the single-attribute
 * query, zeros for cuPointerGetAttributes, as the driver answers for unregistered memory. */
static CUresult pointer_attr(CUpointer_attribute attribute, void *data, CUdeviceptr ptr,
                             int lenient)
{
  pthread_mutex_lock(&fg_lock);
  struct alloc *e = table_find(ptr);
  struct alloc a = e ? *e : (struct alloc){0};
  pthread_mutex_unlock(&fg_lock);
  if (!e && !lenient)
    return CUDA_ERROR_INVALID_VALUE;
  if (!e)
    a.device = -2;
  switch (attribute) {
  case CU_POINTER_ATTRIBUTE_CONTEXT: *(CUcontext *)data = (CUcontext)a.ctx; break;
  case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
    *(unsigned *)data = !e                      ? 0
                        : a.cls == FG_MEM_PINNED ? CU_MEMORYTYPE_HOST
                                                 : CU_MEMORYTYPE_DEVICE;
    break;
  case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: *(CUdeviceptr *)data = e ? ptr : 0; break;
  case CU_POINTER_ATTRIBUTE_HOST_POINTER: *(void **)data = e ? (void *)(uintptr_t)ptr : NULL; break;
  case CU_POINTER_ATTRIBUTE_IS_MANAGED: *(int *)data = a.cls == FG_MEM_MANAGED; break;
  case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data = e ? a.device : -2; break;
  case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *(CUdeviceptr *)data = a.base; break;
  case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t *)data = a.size; break;
  case CU_POINTER_ATTRIBUTE_MAPPED: *(int *)data = e != NULL; break;
  case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: *(CUmemoryPool *)data = (CUmemoryPool)a.pool; break;
  default: return CUDA_ERROR_NOT_SUPPORTED;
  }
  return CUDA_SUCCESS;
}

FG_API CUresult CUDAAPI cuPointerGetAttribute(void *data, CUpointer_attribute attribute,
                                              CUdeviceptr ptr)
{
  FG_ENTER(cuPointerGetAttribute, NULL, data, attribute, ptr);
  if (!data)
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  return FG_EXIT(pointer_attr(attribute, data, ptr, 0));
}

FG_API CUresult CUDAAPI cuPointerGetAttributes(unsigned int numAttributes,
                                               CUpointer_attribute *attributes, void **data,
                                               CUdeviceptr ptr)
{
  FG_ENTER(cuPointerGetAttributes, NULL, numAttributes, attributes, data, ptr);
  if (!attributes || !data)
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  for (unsigned i = 0; i < numAttributes; i++) {
    if (!data[i])
      continue;
    CUresult r = pointer_attr(attributes[i], data[i], ptr, 1);
    if (r != CUDA_SUCCESS)
      return FG_EXIT(r);
  }
  return FG_EXIT(CUDA_SUCCESS);
}

/* ---- stream-ordered allocations and pools ---- */

static struct fg_pool *pool_new(int device)
{
  struct fg_pool *p = calloc(1, sizeof(*p));
  if (!p)
    return NULL;
  /* A reserved page gives each pool a unique base address for the records. */
  void *va = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (va == MAP_FAILED) {
    free(p);
    return NULL;
  }
  p->magic = POOL_MAGIC;
  p->device = device;
  p->address = (uint64_t)(uintptr_t)va;
  pthread_mutex_lock(&fg_lock);
  p->next = g_pools;
  g_pools = p;
  pthread_mutex_unlock(&fg_lock);
  return p;
}

static struct fg_pool *default_pool(int device)
{
  pthread_mutex_lock(&fg_lock);
  struct fg_pool *p = fg_devices[device].default_pool;
  pthread_mutex_unlock(&fg_lock);
  if (p)
    return p;
  /* Made outside the lock (pool_new takes it); a racing loser's pool just stays unused. */
  struct fg_pool *fresh = pool_new(device);
  int created = 0;
  pthread_mutex_lock(&fg_lock);
  if (!fg_devices[device].default_pool && fresh) {
    fg_devices[device].default_pool = fresh;
    created = 1;
  }
  p = fg_devices[device].default_pool;
  pthread_mutex_unlock(&fg_lock);
  if (created)
    pool_record(CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_CREATED, p, 0);
  return p;
}

static CUresult async_alloc(CUdeviceptr *dptr, size_t size, struct fg_pool *pool, CUstream h,
                            int ptsz, uint64_t pc)
{
  struct fg_stream *s;
  CUresult r = fg_stream_resolve(h, ptsz, &s);
  if (r != CUDA_SUCCESS)
    return r;
  if (!dptr)
    return CUDA_ERROR_INVALID_VALUE;
  if (!pool)
    pool = fg_devices[s->ctx->device].current_pool;
  if (!pool)
    pool = default_pool(s->ctx->device);
  if (!pool || pool->magic != POOL_MAGIC)
    return CUDA_ERROR_INVALID_VALUE;
  struct alloc a;
  r = alloc_new(size, FG_MEM_DEVICE, s->ctx, pool, &a);
  if (r != CUDA_SUCCESS)
    return r;
  *dptr = a.base;
  memory_record(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION, &a, s, pc);
  return CUDA_SUCCESS;
}

static CUresult async_free(CUdeviceptr dptr, CUstream h, int ptsz, uint64_t pc)
{
  struct fg_stream *s;
  CUresult r = fg_stream_resolve(h, ptsz, &s);
  if (r != CUDA_SUCCESS)
    return r;
  return alloc_free(dptr, DEVICE_BITS, s, pc);
}

FG_API CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
  FG_ENTER(cuMemAllocAsync, NULL, dptr, bytesize, hStream);
  return FG_EXIT(async_alloc(dptr, bytesize, NULL, hStream, 0, PC()));
}

FG_API CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
  FG_ENTER(cuMemAllocAsync_ptsz, NULL, dptr, bytesize, hStream);
  return FG_EXIT(async_alloc(dptr, bytesize, NULL, hStream, 1, PC()));
}

FG_API CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize,
                                                CUmemoryPool pool, CUstream hStream)
{
  FG_ENTER(cuMemAllocFromPoolAsync, NULL, dptr, bytesize, pool, hStream);
  if (!pool)
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  return FG_EXIT(async_alloc(dptr, bytesize, (struct fg_pool *)pool, hStream, 0, PC()));
}

FG_API CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize,
                                                     CUmemoryPool pool, CUstream hStream)
{
  FG_ENTER(cuMemAllocFromPoolAsync_ptsz, NULL, dptr, bytesize, pool, hStream);
  if (!pool)
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  return FG_EXIT(async_alloc(dptr, bytesize, (struct fg_pool *)pool, hStream, 1, PC()));
}

FG_API CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
  FG_ENTER(cuMemFreeAsync, NULL, dptr, hStream);
  return FG_EXIT(async_free(dptr, hStream, 0, PC()));
}

FG_API CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
  FG_ENTER(cuMemFreeAsync_ptsz, NULL, dptr, hStream);
  return FG_EXIT(async_free(dptr, hStream, 1, PC()));
}

FG_API CUresult CUDAAPI cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
  FG_ENTER(cuDeviceGetDefaultMemPool, NULL, pool_out, dev);
  if (!fg_initialized())
    return FG_EXIT(CUDA_ERROR_NOT_INITIALIZED);
  if (dev < 0 || dev >= fg_device_count)
    return FG_EXIT(CUDA_ERROR_INVALID_DEVICE);
  if (!pool_out)
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  struct fg_pool *p = default_pool(dev);
  if (!p)
    return FG_EXIT(CUDA_ERROR_OUT_OF_MEMORY);
  *pool_out = (CUmemoryPool)p;
  return FG_EXIT(CUDA_SUCCESS);
}

FG_API CUresult CUDAAPI cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps)
{
  FG_ENTER(cuMemPoolCreate, NULL, pool, poolProps);
  if (!fg_initialized())
    return FG_EXIT(CUDA_ERROR_NOT_INITIALIZED);
  if (!pool || !poolProps || poolProps->location.id < 0 ||
      poolProps->location.id >= fg_device_count)
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  struct fg_pool *p = pool_new(poolProps->location.id);
  if (!p)
    return FG_EXIT(CUDA_ERROR_OUT_OF_MEMORY);
  *pool = (CUmemoryPool)p;
  pool_record(CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_CREATED, p, 0);
  return FG_EXIT(CUDA_SUCCESS);
}

/* Pools are kept (magic cleared) after destruction: allocations may still point at them. */
FG_API CUresult CUDAAPI cuMemPoolDestroy(CUmemoryPool pool)
{
  FG_ENTER(cuMemPoolDestroy, NULL, pool);
  struct fg_pool *p = (struct fg_pool *)pool;
  if (!p || p->magic != POOL_MAGIC)
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  pool_record(CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_DESTROYED, p, 0);
  p->magic = 0;
  return FG_EXIT(CUDA_SUCCESS);
}

FG_API CUresult CUDAAPI cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
  FG_ENTER(cuMemPoolTrimTo, NULL, pool, minBytesToKeep);
  struct fg_pool *p = (struct fg_pool *)pool;
  if (!p || p->magic != POOL_MAGIC)
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  pthread_mutex_lock(&fg_lock);
  uint64_t keep = p->used > minBytesToKeep ? p->used : minBytesToKeep;
  if (p->size > keep)
    p->size = keep;
  pthread_mutex_unlock(&fg_lock);
  pool_record(CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_TRIMMED, p, minBytesToKeep);
  return FG_EXIT(CUDA_SUCCESS);
}

/* ---- virtual memory management ---- */

#define VMM_GRANULARITY (2u << 20)

FG_API CUresult CUDAAPI cuMemGetAllocationGranularity(size_t *granularity,
                                                      const CUmemAllocationProp *prop,
                                                      CUmemAllocationGranularity_flags option)
{
  FG_ENTER(cuMemGetAllocationGranularity, NULL, granularity, prop, option);
  if (!granularity || !prop)
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  *granularity = VMM_GRANULARITY;
  return FG_EXIT(CUDA_SUCCESS);
}

static int page_multiple(uint64_t x) { return x && x % (uint64_t)sysconf(_SC_PAGESIZE) == 0; }

FG_API CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
                                            CUdeviceptr addr, unsigned long long flags)
{
  FG_ENTER(cuMemAddressReserve, NULL, ptr, size, alignment, addr, flags);
  if (!fg_initialized())
    return FG_EXIT(CUDA_ERROR_NOT_INITIALIZED);
  if (!ptr || !page_multiple(size))
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  void *va = mmap((void *)(uintptr_t)addr, size, PROT_NONE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (va == MAP_FAILED)
    return FG_EXIT(CUDA_ERROR_OUT_OF_MEMORY);
  *ptr = (CUdeviceptr)(uintptr_t)va;
  return FG_EXIT(CUDA_SUCCESS);
}

FG_API CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
  FG_ENTER(cuMemAddressFree, NULL, ptr, size);
  if (!ptr || !page_multiple(size))
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  munmap((void *)(uintptr_t)ptr, size);
  return FG_EXIT(CUDA_SUCCESS);
}

FG_API CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                                    const CUmemAllocationProp *prop, unsigned long long flags)
{
  FG_ENTER(cuMemCreate, NULL, handle, size, prop, flags);
  if (!fg_initialized())
    return FG_EXIT(CUDA_ERROR_NOT_INITIALIZED);
  if (!handle || !prop || !page_multiple(size) || prop->location.id < 0 ||
      prop->location.id >= fg_device_count)
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  struct phys *ph = calloc(1, sizeof(*ph));
  if (!ph)
    return FG_EXIT(CUDA_ERROR_OUT_OF_MEMORY);
  ph->fd = memfd_create("fakegpu-vmm", MFD_CLOEXEC);
  if (ph->fd < 0 || ftruncate(ph->fd, (off_t)size) != 0) {
    if (ph->fd >= 0)
      close(ph->fd);
    free(ph);
    return FG_EXIT(CUDA_ERROR_OUT_OF_MEMORY);
  }
  ph->size = size;
  ph->device = prop->location.id;
  ph->refs = 1;
  *handle = (CUmemGenericAllocationHandle)(uintptr_t)ph;
  return FG_EXIT(CUDA_SUCCESS);
}

/* The memory stays alive while mapped, as physical memory does (the handle value too: a
 * cuMemRetainAllocationHandle of a mapped address returns it). */
FG_API CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle)
{
  FG_ENTER(cuMemRelease, NULL, handle);
  struct phys *ph = (struct phys *)(uintptr_t)handle;
  if (!ph)
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  pthread_mutex_lock(&fg_lock);
  int ok = ph->refs > 0;
  if (ok) {
    ph->refs--;
    phys_settle(ph);
  }
  pthread_mutex_unlock(&fg_lock);
  return FG_EXIT(ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE);
}

FG_API CUresult CUDAAPI cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle,
                                                    void *addr)
{
  FG_ENTER(cuMemRetainAllocationHandle, NULL, handle, addr);
  if (!handle)
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  pthread_mutex_lock(&fg_lock);
  struct alloc *a = table_find((uint64_t)(uintptr_t)addr);
  int ok = a && a->vmm && a->ph;
  if (ok) {
    a->ph->refs++;
    *handle = (CUmemGenericAllocationHandle)(uintptr_t)a->ph;
  }
  pthread_mutex_unlock(&fg_lock);
  return FG_EXIT(ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE);
}

FG_API CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                                 CUmemGenericAllocationHandle handle, unsigned long long flags)
{
  FG_ENTER(cuMemMap, NULL, ptr, size, offset, handle, flags);
  struct phys *ph = (struct phys *)(uintptr_t)handle;
  if (!ph || !ptr || !page_multiple(size) || offset + size > ph->size)
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  void *va = mmap((void *)(uintptr_t)ptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
                  ph->fd, (off_t)offset);
  if (va == MAP_FAILED)
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  struct alloc a = {ptr, size, FG_MEM_DEVICE, ph->device, NULL, 0, 1, NULL, ph};
  pthread_mutex_lock(&fg_lock);
  int rc = table_insert(&a);
  if (rc == 0)
    ph->maps++;
  pthread_mutex_unlock(&fg_lock);
  return FG_EXIT(rc == 0 ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY);
}

FG_API CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size)
{
  FG_ENTER(cuMemUnmap, NULL, ptr, size);
  if (!ptr || !page_multiple(size))
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  pthread_mutex_lock(&fg_lock);
  for (;;) {
    size_t i = lower_bound(ptr);
    if (i >= g_nallocs || g_allocs[i].base >= ptr + size || !g_allocs[i].vmm)
      break;
    struct phys *ph = g_allocs[i].ph;
    table_remove(&g_allocs[i]);
    if (ph) {
      ph->maps--;
      phys_settle(ph);
    }
  }
  pthread_mutex_unlock(&fg_lock);
  /* Back to a reservation: the range stays owned until cuMemAddressFree. */
  mmap((void *)(uintptr_t)ptr, size, PROT_NONE,
       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  return FG_EXIT(CUDA_SUCCESS);
}

FG_API CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                                       size_t count)
{
  FG_ENTER(cuMemSetAccess, NULL, ptr, size, desc, count);
  if (!ptr || !size || !desc || !count)
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  pthread_mutex_lock(&fg_lock);
  struct alloc *e = table_find(ptr);
  int ok = e && e->vmm;
  pthread_mutex_unlock(&fg_lock);
  return FG_EXIT(ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE);
}

FG_API CUresult CUDAAPI cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
  FG_ENTER(cuDeviceGetMemPool, NULL, pool, dev);
  if (!fg_initialized())
    return FG_EXIT(CUDA_ERROR_NOT_INITIALIZED);
  if (dev < 0 || dev >= fg_device_count)
    return FG_EXIT(CUDA_ERROR_INVALID_DEVICE);
  if (!pool)
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  struct fg_pool *p = fg_devices[dev].current_pool;
  if (!p)
    p = default_pool(dev);
  if (!p)
    return FG_EXIT(CUDA_ERROR_OUT_OF_MEMORY);
  *pool = (CUmemoryPool)p;
  return FG_EXIT(CUDA_SUCCESS);
}

FG_API CUresult CUDAAPI cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
  FG_ENTER(cuDeviceSetMemPool, NULL, dev, pool);
  struct fg_pool *p = (struct fg_pool *)pool;
  if (!fg_initialized())
    return FG_EXIT(CUDA_ERROR_NOT_INITIALIZED);
  if (dev < 0 || dev >= fg_device_count)
    return FG_EXIT(CUDA_ERROR_INVALID_DEVICE);
  if (!p || p->magic != POOL_MAGIC || p->device != dev)
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  fg_devices[dev].current_pool = p;
  return FG_EXIT(CUDA_SUCCESS);
}

/* The release threshold is kept and reported; the simulated pool never releases memory on
 * its own (only cuMemPoolTrimTo shrinks it). The reuse policies are accepted and ignored. */
FG_API CUresult CUDAAPI cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr,
                                              void *value)
{
  FG_ENTER(cuMemPoolSetAttribute, NULL, pool, attr, value);
  struct fg_pool *p = (struct fg_pool *)pool;
  if (!p || p->magic != POOL_MAGIC || !value)
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  pthread_mutex_lock(&fg_lock);
  CUresult r = CUDA_SUCCESS;
  switch (attr) {
  case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: p->release_threshold = *(cuuint64_t *)value; break;
  case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: p->reserved_high = p->size; break;
  case CU_MEMPOOL_ATTR_USED_MEM_HIGH: p->used_high = p->used; break;
  case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
  case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
  case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES: break;
  default: r = CUDA_ERROR_INVALID_VALUE; break;
  }
  pthread_mutex_unlock(&fg_lock);
  return FG_EXIT(r);
}

FG_API CUresult CUDAAPI cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr,
                                              void *value)
{
  FG_ENTER(cuMemPoolGetAttribute, NULL, pool, attr, value);
  struct fg_pool *p = (struct fg_pool *)pool;
  if (!p || p->magic != POOL_MAGIC || !value)
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  pthread_mutex_lock(&fg_lock);
  CUresult r = CUDA_SUCCESS;
  switch (attr) {
  case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: *(cuuint64_t *)value = p->release_threshold; break;
  case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: *(cuuint64_t *)value = p->size; break;
  case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    *(cuuint64_t *)value = p->reserved_high > p->size ? p->reserved_high : p->size;
    break;
  case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: *(cuuint64_t *)value = p->used; break;
  case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
    *(cuuint64_t *)value = p->used_high > p->used ? p->used_high : p->used;
    break;
  case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
  case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
  case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES: *(int *)value = 1; break;
  default: r = CUDA_ERROR_INVALID_VALUE; break;
  }
  pthread_mutex_unlock(&fg_lock);
  return FG_EXIT(r);
}
