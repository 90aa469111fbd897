/* The one table of CUDA API callbacks the agent enables, and what each one means to it. */
#ifndef GPUPROF_CUPTI_CBIDS_H
#define GPUPROF_CUPTI_CBIDS_H

#include <stdint.h>

#include <cupti.h>

enum cbid_class {
  CBID_LAUNCH = 1,   /* kernel and host-function launches */
  CBID_GRAPH_LAUNCH, /* graph launches (their nodes' records carry graph ids) */
  CBID_ALLOC,        /* allocates memory the live map tracks */
  CBID_FREE,         /* frees memory the live map tracks */
  CBID_VMM,          /* VMM address/mapping calls: mappings keep VMM memory alive (params) */
  CBID_POOL,         /* memory pool create/destroy/trim */
  CBID_MEMCPY,
  CBID_MEMSET,
  CBID_SYNC,
  CBID_OTHER,
};

/* How to read the address and size from an alloc/free call's parameter struct. */
enum cbid_params {
  CBID_PARAMS_NONE = 0,
  CBID_PARAMS_OUT_PTR_SIZE, /* T **out (T* or CUdeviceptr) at ptr_off, size_t at size_off */
  CBID_PARAMS_RT_PITCH,     /* cudaMallocPitch: void **devPtr, size_t *pitch, width, height */
  CBID_PARAMS_DRV_PITCH,  /* cuMemAllocPitch_v2: CUdeviceptr *dptr, size_t *pPitch, width, Height */
  CBID_PARAMS_RT_3D,      /* cudaMalloc3D: cudaPitchedPtr *, cudaExtent */
  CBID_PARAMS_IN_PTR,     /* free: address (void* or CUdeviceptr) at ptr_off */
  CBID_PARAMS_VMM_CREATE, /* cuMemCreate: handle *, size, prop (device in prop->location) */
  CBID_PARAMS_VMM_RELEASE, /* cuMemRelease: handle */
  CBID_PARAMS_VMM_MAP,     /* cuMemMap: ptr, size, offset, handle */
  CBID_PARAMS_VMM_UNMAP,   /* cuMemUnmap: ptr, size */
  CBID_PARAMS_VMM_RETAIN,  /* cuMemRetainAllocationHandle: handle *, addr */
};

struct cbid_entry {
  CUpti_CallbackDomain domain;
  CUpti_CallbackId cbid;
  uint8_t cls;    /* enum cbid_class */
  uint8_t params; /* enum cbid_params */
  uint8_t kind;   /* enum alloc_kind for CBID_ALLOC */
  uint8_t ptr_off;
  uint8_t size_off;
};

/* Builds the per-domain lookup arrays; call once before any lookup. */
void cbid_table_init(void);

/* The entry for (domain, cbid), or NULL if the agent does not trace it. O(1). */
const struct cbid_entry *cbid_lookup(CUpti_CallbackDomain domain, CUpti_CallbackId cbid);

/* All entries, for enabling the callbacks. */
const struct cbid_entry *cbid_table(unsigned *count);

#endif
