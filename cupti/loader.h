/* Finds and loads libcupti at run time, checks its version, and resolves the functions used. */
#ifndef GPUPROF_CUPTI_LOADER_H
#define GPUPROF_CUPTI_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include <cupti.h>

/*
 * The agent never links libcupti: a pod's image has it in a toolkit, in a PyTorch wheel, or
 * not at all, and a link-time dependency would make the driver fail to load the agent with
 * no message. Every CUPTI function the agent calls goes through this table, filled once by
 * cupti_loader_open() before any other thread can use it and read-only afterwards.
 */
struct cupti_api {
  CUptiResult (*GetVersion)(uint32_t *version);
  CUptiResult (*GetResultString)(CUptiResult result, const char **str);
  CUptiResult (*Subscribe_v2)(CUpti_SubscriberHandle *subscriber, CUpti_CallbackFunc callback,
                              void *userdata, CUpti_SubscriberParams *params);
  CUptiResult (*Unsubscribe)(CUpti_SubscriberHandle subscriber);
  CUptiResult (*EnableCallback)(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                CUpti_CallbackDomain domain, CUpti_CallbackId cbid);
  CUptiResult (*ActivityRegisterCallbacks)(CUpti_BuffersCallbackRequestFunc requested,
                                           CUpti_BuffersCallbackCompleteFunc completed);
  CUptiResult (*ActivityEnable)(CUpti_ActivityKind kind);
  CUptiResult (*ActivityEnableAndDump)(CUpti_ActivityKind kind);
  CUptiResult (*ActivityDisable)(CUpti_ActivityKind kind);
  CUptiResult (*ActivityGetNextRecord)(uint8_t *buffer, size_t valid_size, CUpti_Activity **record);
  CUptiResult (*ActivityGetNumDroppedRecords)(CUcontext context, uint32_t stream_id,
                                              size_t *dropped);
  CUptiResult (*ActivityFlushAll)(uint32_t flag);
  CUptiResult (*ActivitySetAttribute)(CUpti_ActivityAttribute attr, size_t *value_size,
                                      void *value);
  CUptiResult (*SetThreadIdType)(CUpti_ActivityThreadIdType type);
  CUptiResult (*Finalize)(void);
  /* Optional (NULL when missing): only refine which device an allocation is accounted to. */
  CUptiResult (*GetDeviceId)(CUcontext context, uint32_t *device_id);
  CUptiResult (*GetContextId)(CUcontext context, uint32_t *context_id);
  /* Optional: without it graph kernels keep the graph launch's stack (agent/graph_map.h). */
  CUptiResult (*GetGraphNodeId)(CUgraphNode node, uint64_t *node_id);
  /* Optional: NVTX v3 injection (exported by libcupti, declared in no 13.0 header: cupti.md
   * 1.3). The argument is an NVTX module's NvtxGetExportTableFunc_t. Without it NVTX calls
   * stay no-ops (agent/nvtx.h). */
  CUptiResult (*NvtxInitialize2)(void *get_export_table);
};

extern struct cupti_api cupti_fn;

/*
 * Search order (the first library found is used; a second copy of CUPTI in one process is
 * never loaded):
 *   1. configured_path (GPUPROF_CUPTI_PATH) if non-empty, and nothing else; but when the
 *      process already has another libcupti.so.13 file loaded, that one (with one warning);
 *   2. "libcupti.so.13" through the normal library search (also finds an already loaded one);
 *   3. the toolkit gpuprof was built against: GPUPROF_CUPTI_LIBDIR, <toolkit>/extras/CUPTI/lib64;
 *   4. PyTorch wheels: for every loaded object under .../site-packages/ or .../dist-packages/,
 *      <that dir>/nvidia/cu13/lib/libcupti.so.13 and <that
 * dir>/nvidia/cuda_cupti/lib/libcupti.so.13. Then every function is resolved and cuptiGetVersion
 * must match the major.minor of the CUPTI_API_VERSION the record layouts were compiled for. Returns
 * 0, or -errno with a one-line explanation (naming the path and what to do) in reason.
 * wheels_only (the test knob GPUPROF_TEST_CUPTI_WHEELS_ONLY) replaces steps 2 and 3 by a look
 * for a libcupti.so.13 that is already loaded, so that tests reach step 4 on a machine whose
 * library path or build toolkit has a CUPTI.
 */
int cupti_loader_open(const char *configured_path, int wheels_only, char *reason,
                      size_t reason_len);

/* Loads exactly `path` (tests use it with the real libcupti). Same checks, same result. */
int cupti_loader_open_path(const char *path, char *reason, size_t reason_len);

/* The resolved file name of the loaded library, "" before a successful open. */
const char *cupti_loader_path(void);
/* What cuptiGetVersion reported (also set when the version did not match), else 0. */
uint32_t cupti_loader_version(void);

/* cuptiGetResultString through the table, never NULL. */
const char *cupti_result_string(CUptiResult result);

#endif
