/* Unit tests of the traced-callback table (cupti/cbids.c). */
#include "agent/alloc_map.h"
#include "cupti/cbids.h"
#include "unit.h"

static void test_lookup(void)
{
  const struct cbid_entry *e, *table;
  unsigned n;

  cbid_table_init();
  table = cbid_table(&n);
  CHECK(n > 100);
  /* Unique, and every entry is found by lookup. */
  for (unsigned i = 0; i < n; i++) {
    CHECK(cbid_lookup(table[i].domain, table[i].cbid) == &table[i]);
    for (unsigned j = i + 1; j < n; j++)
      CHECK(!(table[i].domain == table[j].domain && table[i].cbid == table[j].cbid));
  }

  /* Every launch path of the brief, by its 13.0 number. */
  static const unsigned runtime_launch[] = {211, 214, 430, 431, 269, 270, 505, 506};
  static const unsigned driver_launch[] = {307, 442, 652, 653, 477, 478};
  for (unsigned i = 0; i < sizeof(runtime_launch) / sizeof(runtime_launch[0]); i++) {
    e = cbid_lookup(CUPTI_CB_DOMAIN_RUNTIME_API, runtime_launch[i]);
    CHECK(e && e->cls == CBID_LAUNCH);
  }
  for (unsigned i = 0; i < sizeof(driver_launch) / sizeof(driver_launch[0]); i++) {
    e = cbid_lookup(CUPTI_CB_DOMAIN_DRIVER_API, driver_launch[i]);
    CHECK(e && e->cls == CBID_LAUNCH);
  }
  CHECK(cbid_lookup(CUPTI_CB_DOMAIN_RUNTIME_API, 311)->cls == CBID_GRAPH_LAUNCH);
  CHECK(cbid_lookup(CUPTI_CB_DOMAIN_DRIVER_API, 514)->cls == CBID_GRAPH_LAUNCH);
  CHECK(cbid_lookup(CUPTI_CB_DOMAIN_DRIVER_API, 515)->cls == CBID_GRAPH_LAUNCH);
  /* __cudaGetKernel only looks a kernel up. */
  CHECK(cbid_lookup(CUPTI_CB_DOMAIN_RUNTIME_API, 504) == NULL);

  /* Allocations read the right parameter fields. */
  e = cbid_lookup(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020);
  CHECK(e && e->cls == CBID_ALLOC && e->kind == ALLOC_KIND_DEVICE &&
        e->params == CBID_PARAMS_OUT_PTR_SIZE);
  CHECK_EQ(e->ptr_off, offsetof(cudaMalloc_v3020_params, devPtr));
  CHECK_EQ(e->size_off, offsetof(cudaMalloc_v3020_params, size));
  e = cbid_lookup(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMallocHost_v3020);
  CHECK(e && e->kind == ALLOC_KIND_PINNED);
  e = cbid_lookup(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync);
  CHECK(e && e->kind == ALLOC_KIND_ASYNC);
  e = cbid_lookup(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemCreate);
  CHECK(e && e->kind == ALLOC_KIND_VMM && e->params == CBID_PARAMS_VMM_CREATE);
  e = cbid_lookup(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemRelease);
  CHECK(e && e->cls == CBID_FREE && e->params == CBID_PARAMS_VMM_RELEASE);
  e = cbid_lookup(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemMap);
  CHECK(e && e->cls == CBID_VMM);
  e = cbid_lookup(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_v11020);
  CHECK(e && e->cls == CBID_FREE && e->ptr_off == offsetof(cudaFreeAsync_v11020_params, devPtr));
  e = cbid_lookup(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2);
  CHECK(e && e->cls == CBID_MEMCPY);
  /* Batched copies: CUDA 13's entry points (796..799) and 12.8's (776..779, still exported
   * by the CUDA 13 driver for binaries built against the older headers). */
  for (unsigned id = 776; id <= 779; id++) {
    e = cbid_lookup(CUPTI_CB_DOMAIN_DRIVER_API, id);
    CHECK(e && e->cls == CBID_MEMCPY);
    e = cbid_lookup(CUPTI_CB_DOMAIN_DRIVER_API, id + 20);
    CHECK(e && e->cls == CBID_MEMCPY);
  }
  /* Every runtime copy entry point libcudart.so.13 exports, arrays and their per-thread
   * variants included: a missing one leaves its copies without their call. */
  static const unsigned runtime_copies[] = {
      CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyToArray_ptds_v7000,
      CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyFromArray_ptds_v7000,
      CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DToArray_ptds_v7000,
      CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DFromArray_ptds_v7000,
      CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyToArrayAsync_v3020,
      CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyToArrayAsync_ptsz_v7000,
      CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyFromArrayAsync_v3020,
      CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyFromArrayAsync_ptsz_v7000,
      CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DToArrayAsync_v3020,
      CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DToArrayAsync_ptsz_v7000,
      CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DFromArrayAsync_v3020,
      CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DFromArrayAsync_ptsz_v7000,
      CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyArrayToArray_v3020,
      CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyArrayToArray_ptds_v7000,
      CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DArrayToArray_v3020,
      CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DArrayToArray_ptds_v7000,
      CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyBatchAsync_v12080,
      CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3DBatchAsync_ptsz_v12080,
      CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyBatchAsync_v13000,
  };
  for (unsigned i = 0; i < sizeof(runtime_copies) / sizeof(runtime_copies[0]); i++) {
    e = cbid_lookup(CUPTI_CB_DOMAIN_RUNTIME_API, runtime_copies[i]);
    CHECK(e && e->cls == CBID_MEMCPY);
  }
  e = cbid_lookup(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize_v2);
  CHECK(e && e->cls == CBID_SYNC);

  /* Out of range and untraced ids. */
  CHECK(cbid_lookup(CUPTI_CB_DOMAIN_RUNTIME_API, 100000) == NULL);
  CHECK(cbid_lookup(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuInit) == NULL);
  CHECK(cbid_lookup(CUPTI_CB_DOMAIN_RESOURCE, 1) == NULL);
}

int main(void)
{
  RUN(test_lookup);
  UNIT_EXIT();
}
