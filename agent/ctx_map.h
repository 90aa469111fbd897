/* Context id -> device id, learned from RESOURCE callbacks and CONTEXT records. */
#ifndef GPUPROF_AGENT_CTX_MAP_H
#define GPUPROF_AGENT_CTX_MAP_H

#include <stdint.h>

/*
 * CUPTI's contextUid (callbacks) and contextId (records) are the same process-unique
 * sequential id. A fixed table of CTX_MAP_SLOTS entries, insert-only, lock-free: any thread
 * sets, any thread gets. Processes with more contexts than slots get -1 for the excess.
 */
#define CTX_MAP_SLOTS 1024

void ctx_map_set(uint32_t context_id, int32_t device);
/* The device, or -1 if unknown. */
int32_t ctx_map_get(uint32_t context_id);

#endif
