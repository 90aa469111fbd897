/* The CUPTI subscription: callbacks on application threads, enabled cbids and activity kinds. */
#ifndef GPUPROF_CUPTI_SUBSCRIBER_H
#define GPUPROF_CUPTI_SUBSCRIBER_H

#include <stddef.h>
#include <stdint.h>

struct alloc_map;
struct corr_table;

/*
 * Subscribes as "gpuprof", sets the session attributes and registers the buffer callbacks.
 * Callbacks are not enabled yet. Returns 0, or -errno with a one-line reason (which names
 * the other CUPTI client when there is one); on failure nothing stays registered.
 */
int subscriber_start(struct corr_table *corr, struct alloc_map *allocs, char *reason,
                     size_t reason_len);

/* Enables the API/resource callbacks and the activity kinds (a kind that fails is warned
 * about once and skipped). Call once the agent state is ACTIVE. */
void subscriber_enable(void);

/* GPUPROF_MODE=ondemand, instead of subscriber_enable: only the resource callbacks and the
 * device/context/stream records until a capture starts. */
void subscriber_enable_ondemand(void);
/* On-demand capture start: the activity kinds, and the API callbacks if api_callbacks. */
void subscriber_capture_begin(int api_callbacks);
/* On-demand capture end (after a FlushAll): API callbacks and trace kinds off again. */
void subscriber_capture_end(void);

/* Full (not GPU-only) capture start (1) and end (0): the NVTX event callbacks (agent/nvtx.h).
 * Nothing when GPUPROF_NVTX=0. */
void subscriber_nvtx_events(int on);

/* Exit: disables the activity kinds so that no new records are produced. */
void subscriber_disable_activity(void);

struct subscriber_stats {
  uint64_t api_runtime, api_driver; /* API calls seen (ENTER callbacks) */
  uint64_t contexts, streams, graph_nodes;
};

void subscriber_get_stats(struct subscriber_stats *out);

#endif
