/* e2e vmm_lifetime: VMM physical memory lives until it is both released and unmapped, whatever
 * the order of cuMemRelease and cuMemUnmap (cupti.md 5.2; CUDA's own VMM samples release the
 * handle right after mapping it). */
#include "tests/fakegpu/fakegpu.h"
#include "tests/lib/e2e.h"

#define MIB (1024u * 1024u)
#define VMM_BYTES (2u * MIB)

static void reserve_map(CUmemGenericAllocationHandle h, const CUmemAllocationProp *prop,
                        CUdeviceptr *va)
{
  CUmemAccessDesc access;

  CU(cuMemAddressReserve(va, VMM_BYTES, 0, 0, 0));
  CU(cuMemMap(*va, VMM_BYTES, 0, h, 0));
  memset(&access, 0, sizeof(access));
  access.location = prop->location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CU(cuMemSetAccess(*va, VMM_BYTES, &access, 1));
}

int main(void)
{
  CUdevice dev;
  CUcontext ctx;
  CUdeviceptr va1, va2, vb, vr, p;
  CUmemGenericAllocationHandle a, b, c, d, e, h;
  CUmemAllocationProp prop;

  CU(cuInit(0));
  CU(cuDeviceGet(&dev, 0));
  CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU(cuCtxSetCurrent(ctx));

  memset(&prop, 0, sizeof(prop));
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;

  /* A: mapped twice, its handle released at once (the memory stays: it is mapped). */
  CU(cuMemCreate(&a, VMM_BYTES, &prop, 0));
  reserve_map(a, &prop, &va1);
  reserve_map(a, &prop, &va2);
  CU(cuMemRelease(a));
  /* The two mappings alias the same pages. */
  ((volatile uint8_t *)(uintptr_t)va1)[100] = 0x5a;
  if (((volatile uint8_t *)(uintptr_t)va2)[100] != 0x5a)
    e2e_fail("VMM mappings do not alias");

  /* While A is still mapped: in use 2 MiB + 4096 (the peak). */
  CU(cuMemAlloc(&p, 4096));
  CU(cuMemFree(p));
  CU(cuMemUnmap(va1, VMM_BYTES)); /* still mapped at va2 */
  CU(cuMemAddressFree(va1, VMM_BYTES));
  CU(cuMemAlloc(&p, 8192)); /* 2 MiB + 8192: the new peak */
  CU(cuMemFree(p));
  CU(cuMemUnmap(va2, VMM_BYTES)); /* A's memory is gone only now */
  CU(cuMemAddressFree(va2, VMM_BYTES));

  /* B, freed as NCCL frees cuMem buffers: the handle retained from the address and released,
   * then unmapped, then released (freed only now). */
  CU(cuMemCreate(&b, VMM_BYTES, &prop, 0));
  reserve_map(b, &prop, &vb);
  CU(cuMemRetainAllocationHandle(&h, (void *)(uintptr_t)vb));
  if (h != b)
    e2e_fail("cuMemRetainAllocationHandle returned another handle");
  CU(cuMemRelease(h));
  CU(cuMemAlloc(&p, 4096)); /* 2 MiB + 4096: B is still held */
  CU(cuMemFree(p));
  CU(cuMemUnmap(vb, VMM_BYTES));
  CU(cuMemRelease(b));
  CU(cuMemAddressFree(vb, VMM_BYTES));

  /* D, E: two mappings in one reservation with never-mapped space before, between and after
   * them (granularity-aligned), both released at once, then the whole reservation unmapped by
   * one call. The simulator unmaps every mapping that starts inside the range; whether a real
   * driver accepts such a range is unconfirmed, and if it refuses, the agent sees a failed call
   * and changes nothing. Both are gone after that one call. */
  CU(cuMemCreate(&d, VMM_BYTES, &prop, 0));
  CU(cuMemCreate(&e, VMM_BYTES, &prop, 0));
  CU(cuMemAddressReserve(&vr, 5 * VMM_BYTES, 0, 0, 0));
  CU(cuMemMap(vr + VMM_BYTES, VMM_BYTES, 0, d, 0));
  CU(cuMemMap(vr + 3 * VMM_BYTES, VMM_BYTES, 0, e, 0));
  CU(cuMemRelease(d));
  CU(cuMemRelease(e));
  CU(cuMemUnmap(vr, 5 * VMM_BYTES));
  CU(cuMemAddressFree(vr, 5 * VMM_BYTES));

  /* C: host memory on NUMA node 0 (as NCCL allocates its host buffers): pinned host memory,
   * not device 0's. */
  prop.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
  prop.location.id = 0;
  CU(cuMemCreate(&c, VMM_BYTES, &prop, 0));
  CU(cuMemRelease(c));

  printf("vmm_lifetime: done\n");
  return 0;
}
