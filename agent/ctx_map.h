/* Context id -> device id, learned from RESOURCE callbacks and CONTEXT records. */
#ifndef GPUPROF_AGENT_CTX_MAP_H
#define GPUPROF_AGENT_CTX_MAP_H

#include <stdint.h>

/*
 * CUPTI's contextUid (callbacks) and contextId (records) are the same process-unique
 * sequential id. A fixed table of CTX_MAP_SLOTS entries (a power of two) indexed by the id,
 * lock-free: any thread sets, any thread gets. A new context takes the slot of the one
 * CTX_MAP_SLOTS ids before it, so the most recent CTX_MAP_SLOTS contexts are known however many
 * a process creates and destroys; an older one reads as unknown (-1), never as another's.
 */
#define CTX_MAP_SLOTS 1024

void ctx_map_set(uint32_t context_id, int32_t device);
/* The device, or -1 if unknown. */
int32_t ctx_map_get(uint32_t context_id);
/* Bit d set for every device d < 64 of a context in the table. */
uint64_t ctx_map_devices(void);

#endif
