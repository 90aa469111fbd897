/* Benchmark helper: an injection library that subscribes to CUPTI like the agent but does
 * nothing, so launch_overhead can separate the simulator's callback and record cost from the
 * agent's. Never used in tests. */
#include <stdint.h>
#include <stdlib.h>

#include <cupti.h>

/*
 * Same subscription as the agent (cupti/ at the time of writing): DRIVER and RUNTIME API
 * callbacks, RESOURCE callbacks, and the device-side activity kinds with real buffers, so
 * the simulator produces every record it would produce for the agent. The callbacks return
 * at once and completed buffers are freed unread.
 */
#define BUFFER_SIZE (4u << 20)

static void CUPTIAPI on_callback(void *ud, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                 const void *data)
{
  (void)ud;
  (void)domain;
  (void)cbid;
  (void)data;
}

static void CUPTIAPI on_request(uint8_t **buffer, size_t *size, size_t *max_records)
{
  *buffer = aligned_alloc(8, BUFFER_SIZE);
  *size = *buffer ? BUFFER_SIZE : 0;
  *max_records = 0;
}

static void CUPTIAPI on_complete(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
                                 size_t valid)
{
  (void)ctx;
  (void)stream;
  (void)size;
  (void)valid;
  free(buffer);
}

__attribute__((visibility("default"))) int InitializeInjection(void)
{
  static int done;
  static const CUpti_ActivityKind kinds[] = {
      CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
      CUPTI_ACTIVITY_KIND_MEMCPY2,           CUPTI_ACTIVITY_KIND_MEMSET,
      CUPTI_ACTIVITY_KIND_MEMORY2,           CUPTI_ACTIVITY_KIND_MEMORY_POOL,
      CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,   CUPTI_ACTIVITY_KIND_OVERHEAD,
  };
  CUpti_SubscriberHandle sub;

  if (done)
    return 1;
  done = 1;
  if (cuptiSubscribe(&sub, on_callback, NULL) != CUPTI_SUCCESS)
    return 1;
  cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_DRIVER_API);
  cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_RUNTIME_API);
  cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_RESOURCE);
  cuptiActivityRegisterCallbacks(on_request, on_complete);
  for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
    cuptiActivityEnable(kinds[i]);
  return 1;
}
