/* Joins device events to their API calls and aggregates them into the capture summary's counters.
 */
#ifndef GPUPROF_AGENT_AGGREGATE_H
#define GPUPROF_AGENT_AGGREGATE_H

#include <stddef.h>
#include <stdint.h>

#include "agent/corr.h"
#include "agent/event.h"

struct corr_table;

struct agg_api_count {
  const char *api; /* CUPTI functionName without its _vNNNN suffix; "?" when unknown */
  uint64_t count;
};

struct agg_stream_key {
  uint32_t device, context, stream;
};

struct agg_kernel {
  const char *name; /* owned copy of the mangled name */
  uint64_t count;
  uint64_t gpu_time_ns;
  struct agg_api_count *apis;
  uint32_t n_apis, cap_apis;
  struct agg_stream_key *streams;
  uint32_t n_streams, cap_streams;
};

struct agg_stream {
  struct agg_stream_key key;
  uint64_t kernels, memcpys, memsets;
};

struct agg_bucket {
  uint64_t count, bytes, gpu_time_ns;
};

/* GPU time of one kernel launched from one host stack (agent/stack.h). Counts and times are
 * weighted: a sampled launch stands for the sample period's worth of launches. */
struct agg_stack_kernel {
  uint32_t stack_id;
  const struct agg_kernel *kernel;
  uint64_t samples;     /* launches actually seen with this stack */
  uint64_t launches;    /* weighted */
  uint64_t gpu_time_ns; /* weighted */
};

/* Memcpys issued from one host stack. */
struct agg_stack_copy {
  uint32_t stack_id;
  uint64_t count, bytes, gpu_time_ns;
};

struct agg_totals {
  uint64_t window_start_ns, window_end_ns; /* 0 when nothing was seen */
  uint64_t kernels, kernel_time_ns;
  struct agg_bucket memcpy[EVENT_COPY_KIND_COUNT];
  struct agg_bucket memset;
  uint64_t syncs, sync_time_ns;
  uint64_t joins_runtime, joins_driver, joins_unknown;
  uint64_t memory_records, pool_records, overhead_records;
  uint64_t devices_seen, contexts_seen, streams_created;
  /* Device work whose call carried no host stack (unsampled, stacks off, or dropped). */
  uint64_t kernels_without_stack, kernel_time_without_stack_ns;
  uint64_t memcpys_without_stack, memcpy_bytes_without_stack;
};

/*
 * Owned by the worker thread, which feeds it events; the exit path reads it after the worker
 * stopped. A mutex still guards it so that a reader never depends on that ordering (e.g. if
 * the worker could not be joined in time). Holders never do I/O.
 */
struct aggregate;

struct aggregate *aggregate_new(struct corr_table *corr);
void aggregate_free(struct aggregate *a);

/* Joins ev through the correlation table and adds it to the counters. Returns 1 and fills
 * *api_out (may be NULL) with the API call that caused ev when the join succeeded, else 0
 * (not a joinable kind, or the call is unknown) with *api_out zeroed. */
int aggregate_event(struct aggregate *a, const struct event *ev, struct corr_info *api_out);

void aggregate_lock(struct aggregate *a);
void aggregate_unlock(struct aggregate *a);

/* The following read the aggregate and must be called between lock and unlock. */
const struct agg_totals *aggregate_totals(struct aggregate *a);
/* A malloc'd array of the kernels sorted by gpu_time_ns desc, then name; apis sorted by name,
 * streams ascending. *out is NULL and 0 returned when empty or out of memory. */
size_t aggregate_kernels_sorted(struct aggregate *a, struct agg_kernel ***out);
/* A malloc'd array of the streams sorted by (device, context, stream). */
size_t aggregate_streams_sorted(struct aggregate *a, struct agg_stream ***out);

/* Kernels by (stack, kernel), sorted by weighted gpu_time_ns desc, then stack id, then name. */
size_t aggregate_stack_kernels_sorted(struct aggregate *a, struct agg_stack_kernel ***out);
/* Memcpys by stack, sorted by bytes desc, then stack id. */
size_t aggregate_stack_copies_sorted(struct aggregate *a, struct agg_stack_copy ***out);

/* "cudaLaunchKernel_v7000" -> "cudaLaunchKernel" into buf; exported for tests. */
void aggregate_api_base_name(const char *function_name, char *buf, size_t len);

/* Short direction names used in the summary: "HtoD", "DtoH", ..., "PtoP"; NULL for unknown. */
const char *aggregate_copy_kind_name(unsigned copy_kind);

#endif
