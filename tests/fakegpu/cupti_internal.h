/* Private state shared by the simulated CUPTI's source files. */
#ifndef FAKEGPU_CUPTI_INTERNAL_H
#define FAKEGPU_CUPTI_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <cupti.h>

#include "tests/fakegpu/fg_tool.h"

#define CU_API __attribute__((visibility("default")))

/* The driver's queries; set by the constructor in cupti_callbacks.c. */
extern const struct fg_driver_ops *cu_drv;

/* FAKEGPU_CUPTI_FAULT, read once at load. no_driver is this double's own addition: every
 * control-plane call answers CUPTI_ERROR_UNKNOWN, as the real library does on a machine
 * without a driver (cupti.md 7.1). */
struct cu_faults {
  int no_buffers;
  int unknown_kind;
  int zero_timestamps;
  int no_driver;
  int hung_flush;     /* cuptiActivityFlushAll(0) never returns */
  int kinds_refused;  /* cuptiActivityEnable(AndDump) answers CUPTI_ERROR_NOT_SUPPORTED */
  int late_delivery;  /* the worker hands its first batch over after a flush that missed it */
  /* NVTX marks, ranges and nvtxNameOsThreadA called with no subscriber abort, as the real
   * 13.0 library without a driver crashes in them (README "NVTX") */
  int nvtx_needs_session;
};
extern struct cu_faults cu_fault;

/* Records `r` as this thread's last error (cuptiGetLastError) and returns it. */
CUptiResult cu_ret(CUptiResult r);

/* The size of the 13.0 record struct of `kind`, 0 for kinds the library rejects. */
size_t cu_record_size(uint32_t kind);

/*
 * Calls the real library would deadlock on (cupti.md 2.5, 6.2): cuptiActivityFlushAll /
 * cuptiActivityFlush / cuptiFinalize from inside the buffer completion or request callback,
 * and the flushes from inside a CUPTI_CBID_RESOURCE_STREAM_DESTROY_STARTING callback. The
 * double cannot hang the test instead, so it says which rule was broken on stderr and aborts.
 * `call` names the CUPTI function; `flush` is 0 for cuptiFinalize.
 */
void cu_check_deadlock_site(const char *call, int flush);
/* Fatal rule violation: one line on stderr (write(2)), then abort(). */
__attribute__((noreturn)) void cu_fatal(const char *fmt, ...);

/* cupti_callbacks.c */
int cu_in_stream_destroy_callback(void);
int cu_subscribed(void);
int cu_callback_enabled(CUpti_CallbackDomain domain, CUpti_CallbackId cbid);
void cu_callback(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void *data);
void cu_callbacks_reset(void);

/* cupti_activity.c */
int cu_any_kind(void);
int cu_kind_enabled(CUpti_ActivityKind kind, uint32_t ctx_uid);
int cu_api_enabled(CUpti_ActivityKind kind, CUpti_CallbackId cbid);
void cu_api_record(CUpti_ActivityKind kind, CUpti_CallbackId cbid, uint64_t start, uint64_t end,
                   uint32_t corr, uint32_t result);
void cu_record(const void *rec, size_t size, uint64_t complete_ns);
uint64_t cu_now(void);
uint64_t cu_gpu_ts(uint64_t realtime_ns);
void cu_activity_reset(void);
void cu_activity_atfork_prepare(void);
void cu_activity_atfork_parent(void);
void cu_activity_atfork_child(void);

#endif
