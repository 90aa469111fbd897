/* e2e async_vmm_pinned: the allocation kinds beside cuMemAlloc: stream-ordered (cuMemAllocAsync),
 * virtual memory management (cuMemCreate/Map/Unmap/Release) and pinned host memory. */
#include "tests/fakegpu/fakegpu.h"
#include "tests/lib/e2e.h"

#define MIB (1024u * 1024u)
#define VMM_BYTES (2u * MIB)

int main(void)
{
  CUdevice dev;
  CUcontext ctx;
  CUstream s;
  CUdeviceptr plain, va, p1, p2, p3;
  CUmemGenericAllocationHandle handle;
  CUmemAllocationProp prop;
  CUmemAccessDesc access;
  size_t gran = 0;
  void *h1, *h2;

  CU(cuInit(0));
  CU(cuDeviceGet(&dev, 0));
  CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU(cuCtxSetCurrent(ctx));
  CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));

  /* Device 0 in use over time: 4096, + 2 MiB (VMM), + 1 MiB, + 512 KiB (peak 4096 + 3.5 MiB),
   * - 1 MiB, + 256 KiB, then everything goes. */
  CU(cuMemAlloc(&plain, 4096));

  memset(&prop, 0, sizeof(prop));
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  CU(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  if (gran == 0 || VMM_BYTES % gran != 0)
    e2e_fail("VMM granularity does not divide 2 MiB");
  CU(cuMemCreate(&handle, VMM_BYTES, &prop, 0));
  CU(cuMemAddressReserve(&va, VMM_BYTES, 0, 0, 0));
  CU(cuMemMap(va, VMM_BYTES, 0, handle, 0));
  memset(&access, 0, sizeof(access));
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CU(cuMemSetAccess(va, VMM_BYTES, &access, 1));

  CU(cuMemAllocAsync(&p1, MIB, s));
  CU(cuMemAllocAsync(&p2, MIB / 2, s));
  CU(cuMemFreeAsync(p1, s));
  CU(cuMemAllocAsync(&p3, MIB / 4, s));
  CU(cuMemFreeAsync(p2, s));
  CU(cuMemFreeAsync(p3, s));
  CU(cuStreamSynchronize(s));

  CU(cuMemUnmap(va, VMM_BYTES));
  CU(cuMemRelease(handle));
  CU(cuMemAddressFree(va, VMM_BYTES));
  CU(cuMemFree(plain));

  /* Pinned host memory: 64 KiB + 128 KiB, both alive together (device -1 in the summary). */
  CU(cuMemAllocHost(&h1, 65536));
  CU(cuMemHostAlloc(&h2, 131072, CU_MEMHOSTALLOC_PORTABLE));
  memset(h1, 0x11, 65536);
  memset(h2, 0x22, 131072);
  if (((uint8_t *)h1)[65535] != 0x11 || ((uint8_t *)h2)[131071] != 0x22)
    e2e_fail("pinned memory not writable");
  CU(cuMemFreeHost(h1));
  CU(cuMemFreeHost(h2));

  CU(cuStreamDestroy(s));
  printf("async_vmm_pinned: done\n");
  return 0;
}
