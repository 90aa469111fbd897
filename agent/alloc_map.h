/* Live GPU memory: address (or VMM handle) -> allocation, with per-device in-use and peak bytes. */
#ifndef GPUPROF_AGENT_ALLOC_MAP_H
#define GPUPROF_AGENT_ALLOC_MAP_H

#include <stddef.h>
#include <stdint.h>

enum alloc_kind {
  ALLOC_KIND_DEVICE = 0, /* cudaMalloc*, cuMemAlloc*, pitch, 3D */
  ALLOC_KIND_PINNED,     /* cudaMallocHost, cudaHostAlloc, cuMemAllocHost, cuMemHostAlloc */
  ALLOC_KIND_MANAGED,    /* cudaMallocManaged, cuMemAllocManaged */
  ALLOC_KIND_ASYNC,      /* stream-ordered: cudaMallocAsync, cuMemAllocAsync, ...FromPoolAsync */
  ALLOC_KIND_VMM,        /* cuMemCreate physical memory */
  ALLOC_KIND_COUNT,
};

/* Keys live in two namespaces: virtual addresses, and VMM allocation handles. (VMM mappings
 * are kept in a third one, reached only through the alloc_map_vmm_* calls.) */
enum alloc_space {
  ALLOC_SPACE_VA = 0,
  ALLOC_SPACE_VMM_HANDLE = 1,
};

#define ALLOC_DEVICE_HOST (-1) /* pinned host memory is accounted to "device" -1 */
#define ALLOC_MAX_DEVICES 64
#define ALLOC_MAP_DEFAULT_MAX (1u << 22)

struct alloc_info {
  uint64_t size;
  int32_t device; /* ALLOC_DEVICE_HOST for pinned memory */
  uint8_t kind;   /* enum alloc_kind */
  uint32_t corr_id;
  const char *api;   /* CUPTI functionName (global constant) */
  uint32_t stack_id; /* the allocating host stack, STACK_ID_NONE if none */
};

struct alloc_device_stats {
  uint64_t allocs, frees;
  uint64_t bytes_allocated, bytes_freed;
  uint64_t in_use, peak_in_use;
  uint64_t by_kind[ALLOC_KIND_COUNT]; /* bytes allocated */
};

/* Index 0 is the host (device -1), index d + 1 is device d. */
struct alloc_map_stats {
  struct alloc_device_stats dev[ALLOC_MAX_DEVICES + 1];
  uint64_t live;          /* allocations currently tracked */
  uint64_t unknown_frees; /* frees of keys not in the map */
  uint64_t replaced;      /* allocations at a key still live (its free was not seen) */
  uint64_t untracked;     /* allocations not tracked: map full, or device id out of range */
};

const char *alloc_kind_name(enum alloc_kind kind);

/*
 * Concurrency: any application thread inserts and removes (from CUPTI EXIT callbacks); the
 * summary snapshots the stats. One mutex guards the table for a few dozen instructions per
 * call; allocation APIs themselves take microseconds to milliseconds, so this is not a
 * contention point, and no holder ever does I/O or calls out. The table grows (doubling,
 * under the lock) only when the number of *live* allocations grows, which is rare in steady
 * state; at max_entries it stops tracking and counts.
 */
struct alloc_map;

struct alloc_map *alloc_map_new(size_t max_entries);
void alloc_map_free(struct alloc_map *m);

/* 0; -ENOSPC when the map is full or the device is out of range (counted as untracked). */
int alloc_map_insert(struct alloc_map *m, enum alloc_space space, uint64_t key,
                     const struct alloc_info *info);
/* 0 and *out (may be NULL) filled; -ENOENT for an unknown key (counted as an unknown free). */
int alloc_map_remove(struct alloc_map *m, enum alloc_space space, uint64_t key,
                     struct alloc_info *out);
int alloc_map_lookup(struct alloc_map *m, enum alloc_space space, uint64_t key,
                     struct alloc_info *out);

/*
 * VMM physical memory (cuMemCreate, inserted with ALLOC_SPACE_VMM_HANDLE) is freed when its
 * handle has been released (once per cuMemCreate and per cuMemRetainAllocationHandle) *and*
 * no mapping of it is left, in either order: CUDA's own samples release the handle right
 * after cuMemMap and keep using the memory until cuMemUnmap. These calls keep that count;
 * the allocation is accounted as freed by the call that drops the last reference. Mappings
 * of handles the map does not hold (created before the agent saw them) are ignored.
 */
/* cuMemMap: [va, va + size) maps handle. 0, or -ENOENT (unknown handle) / -ENOSPC (full). */
int alloc_map_vmm_map(struct alloc_map *m, uint64_t va, uint64_t size, uint64_t handle);
/* cuMemUnmap: removes every mapping that starts inside [va, va + size), back to back or
 * not (CUDA unmaps whole mappings only). Returns how many. */
int alloc_map_vmm_unmap(struct alloc_map *m, uint64_t va, uint64_t size);
/* cuMemRetainAllocationHandle(addr): one more reference on the handle mapped over va (any
 * address inside a mapping, as in CUDA). 0, or -ENOENT (no mapping of a known handle there). */
int alloc_map_vmm_retain(struct alloc_map *m, uint64_t va);
/* cuMemRelease: one reference less. 0; -ENOENT for an unknown handle (an unknown free). */
int alloc_map_vmm_release(struct alloc_map *m, uint64_t handle);

void alloc_map_get_stats(struct alloc_map *m, struct alloc_map_stats *out);

/* Allocations made since the previous alloc_map_window, grouped (pprof windows). */
struct alloc_count {
  uint32_t stack_id;
  int32_t device;
  uint8_t kind;
  const char *api;
  uint64_t count, bytes;
};

/* Distinct groups counted per window; beyond it the stack is dropped (the group becomes
 * stack-less) and alloc_map_window reports the overflow. */
#define ALLOC_COUNT_MAX_GROUPS (1u << 16)

/*
 * One consistent cut for a window's memory profile: under one hold of the lock, calls inuse()
 * for every group of live allocations (kept up to date at each insert and remove, so the cut
 * costs the number of groups, not of allocations) and starts a new counting period; then,
 * without the lock, calls allocated() for every group counted in the period that just ended.
 * So in-use at one cut equals in-use at the previous cut plus what was allocated in between
 * minus what was freed. One caller at a time (the worker); inuse() runs under the map's lock
 * and must not call into the map. Returns the allocations whose stack was dropped from their
 * group because the period had ALLOC_COUNT_MAX_GROUPS groups (in-use groups have the same cap).
 */
uint64_t alloc_map_window(struct alloc_map *m,
                          void (*inuse)(const struct alloc_count *c, void *arg),
                          void (*allocated)(const struct alloc_count *c, void *arg), void *arg);

/* Calls fn for every live allocation, under the map's lock: fn must not call into the map. */
void alloc_map_for_each(struct alloc_map *m, void (*fn)(const struct alloc_info *info, void *arg),
                        void *arg);

#endif
