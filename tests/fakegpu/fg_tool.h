/* Private interface between the simulated driver (libcuda.so.1) and the simulated CUPTI. */
#ifndef FAKEGPU_FG_TOOL_H
#define FAKEGPU_FG_TOOL_H

/*
 * The real libcupti hooks the driver through private export tables; here the CUPTI double
 * registers one table of tool hooks with the driver from a constructor and gets one table of
 * driver queries back. Only `fakegpu_tool_attach` and `fakegpu_fatalv` cross the library
 * boundary; they are exported by libcuda.so.1 like the `fakegpu_` controls, and are no contract
 * for anyone else.
 *
 * Concurrency: the driver calls the hooks from application threads without holding any
 * driver lock, so a hook may call back into the driver queries (and the client callbacks it
 * invokes may call driver synchronize functions).
 */

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda.h>
#include <cupti.h>

struct fg_tool {
  /* A subscriber or an enabled activity kind exists: API calls get correlation ids. */
  int (*active)(void);
  int (*callback_enabled)(CUpti_CallbackDomain domain, CUpti_CallbackId cbid);
  void (*callback)(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void *cbdata);
  /* Whether records of `kind` are wanted for the context with CUPTI id `ctx_uid` (0: none). */
  int (*kind_enabled)(CUpti_ActivityKind kind, uint32_t ctx_uid);
  /* Whether a RUNTIME / DRIVER record is wanted for this cbid (per-API selection). */
  int (*api_enabled)(CUpti_ActivityKind kind, CUpti_CallbackId cbid);
  /* Emits a RUNTIME / DRIVER record; the tool fills process and thread ids and writes the
   * external-correlation records that precede it. */
  void (*api_record)(CUpti_ActivityKind kind, CUpti_CallbackId cbid, uint64_t start,
                     uint64_t end, uint32_t correlation_id, uint32_t result);
  /* Copies a finished record (size = sizeof the 13.0 struct) into an activity buffer.
   * complete_ns: CLOCK_REALTIME at which the simulated GPU finishes the work the record
   * describes (0 for CPU-side records, which are complete at once). */
  void (*record)(const void *rec, size_t size, uint64_t complete_ns);
  /* Timestamp for CPU-side events (cuptiGetTimestamp's clock). */
  uint64_t (*now)(void);
  /* Converts a simulated-GPU time (CLOCK_REALTIME ns) to the record clock. */
  uint64_t (*gpu_ts)(uint64_t realtime_ns);
};

struct fg_driver_ops {
  int (*initialized)(void);                      /* cuInit has started */
  void (*dump)(CUpti_ActivityKind kind);         /* re-emit DEVICE / CONTEXT / STREAM records */
  int (*context_id)(CUcontext ctx, uint32_t *id);
  int (*device_id)(CUcontext ctx, uint32_t *id); /* ctx NULL: the current context */
  int (*stream_id)(CUcontext ctx, CUstream stream, uint8_t per_thread, uint32_t *id);
  int (*graph_node_id)(CUgraphNode node, uint64_t *id);
  int (*graph_id)(CUgraph graph, uint32_t *id);
  int (*graph_exec_id)(CUgraphExec exec, uint32_t *id);
  uint64_t (*idle_time)(void);                   /* as fakegpu_gpu_idle_time_ns */
  /* Around the client's buffer request / completion callback (enter 1, then 0) or a
   * callback CUPTI makes itself, an NVTX one (enter 2, then 0): the driver calls made in
   * between are the client's, see check_call_site in driver_api.c. */
  void (*client_code)(int enter);
};

/* Installs `tool` (NULL detaches) and returns the driver's queries. */
const struct fg_driver_ops *fakegpu_tool_attach(const struct fg_tool *tool);
/* The simulator's fatal error (driver_api.c): a line on stderr and in $FAKEGPU_FATAL_LOG, then
 * abort(). */
__attribute__((noreturn)) void fakegpu_fatalv(const char *fmt, va_list ap);

#endif
