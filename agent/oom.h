/* GPU out-of-memory snapshots: what held the memory when an allocation failed for lack of it. */
#ifndef GPUPROF_AGENT_OOM_H
#define GPUPROF_AGENT_OOM_H

#include <stdint.h>

struct alloc_map;
struct config;
struct stack_table;

/* One allocation call that failed with cudaErrorMemoryAllocation / CUDA_ERROR_OUT_OF_MEMORY. */
struct oom_event {
  uint64_t time_ns;  /* CLOCK_REALTIME at the call's EXIT */
  uint64_t bytes;    /* what the call asked for */
  const char *api;   /* CUPTI functionName (a constant), e.g. "cudaMalloc_v3020" */
  uint32_t stack_id; /* the call's host stack, STACK_ID_NONE without one */
  uint32_t tid;
  int32_t device; /* ALLOC_DEVICE_HOST for pinned host memory */
  uint8_t kind;   /* enum alloc_kind */
};

/*
 * From a CUPTI EXIT callback on the application thread, for the outermost failed allocation
 * call only. Counts it; unless snapshots are off (GPUPROF_OOM_INTERVAL=0), the previous
 * snapshot is younger than the interval or one is still being written, it copies the live
 * allocations' groups into the one preallocated snapshot slot (no malloc: under the
 * live-allocation map's lock, which every successful allocation takes too) for the worker's
 * next tick to write. So the snapshot is the memory held at the instant of the failure, before
 * a caching allocator (PyTorch's) frees its cache and retries.
 */
void oom_record(const struct oom_event *ev);

/* From init, before worker_start: allocates the slot and registers the worker consumer
 * (continuous mode only: nothing in on-demand mode, or with GPUPROF_OOM_INTERVAL=0).
 * 0 or -errno (then failures are still counted, no snapshot is written). */
int oom_start(const struct config *cfg, struct alloc_map *allocs, struct stack_table *stacks);
/* From shutdown after worker_stop: writes a snapshot still pending if the worker was joined;
 * one it cannot write (worker not joined, or a thread still filling it) counts as an error, so
 * failed == snapshots + skipped + errors holds in the summary. Later failures are skipped. */
void oom_stop(int worker_joined);

struct oom_stats {
  uint64_t failed;    /* allocation calls that failed for lack of memory */
  uint64_t snapshots; /* snapshot profiles written */
  uint64_t skipped;   /* failures without a snapshot: within the interval, or one pending */
  uint64_t errors;    /* snapshots taken but not written (I/O, encoding, exit) */
  int have_first;     /* first is valid */
  struct oom_event first;
};

void oom_get_stats(struct oom_stats *out);

#endif
