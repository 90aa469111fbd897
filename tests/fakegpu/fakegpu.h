/* The simulated GPU's own interface: test controls and the hooks the runtime double uses. */
#ifndef FAKEGPU_FAKEGPU_H
#define FAKEGPU_FAKEGPU_H

/*
 * Everything here is exported by the simulated driver (tests/fakegpu, SONAME libcuda.so.1)
 * with the `fakegpu_` prefix. None of it exists on a real GPU: programs meant to run on
 * hardware too (samples/) never call it and are steered only through the environment:
 *
 *   FAKEGPU_DEVICES=N              number of simulated devices (default 2)
 *   FAKEGPU_KERNEL_NS=spec         kernel durations: "default=NS,NAME=NS,..." (NAME is the
 *                                  mangled name); without it the deterministic model below
 *   FAKEGPU_CUPTI_VERSION=V        what cuptiGetVersion reports (default 130001)
 *   FAKEGPU_CUPTI_SUBSCRIBER=NAME  another tool already holds the CUPTI subscriber: a new
 *                                  subscribe fails with MULTIPLE_SUBSCRIBERS, old name "CUPTI for NAME"
 *   FAKEGPU_CUPTI_FAULT=LIST       comma list: no_buffers (request callback answers are ignored,
 *                                  records dropped and counted), unknown_kind (a record of kind
 *                                  999 is appended to every completed buffer), zero_timestamps
 *                                  (GPU records carry start == end == 0), no_driver (every
 *                                  CUPTI control-plane call answers CUPTI_ERROR_UNKNOWN, as the
 *                                  real library does on a machine without a driver)
 *   FAKEGPU_LOG=1                  the simulator explains itself on stderr
 *
 * Default kernel duration model (deterministic): 2000 ns + 1 ns per 64 threads
 * (grid * block threads), plus 1 ns per 256 bytes of dynamic shared memory.
 */

#include <stddef.h>
#include <stdint.h>

#include <cuda.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- test controls ---- */

/* Overrides the duration of every later launch of `name` (mangled); name NULL sets the
 * default for kernels without an override. ns == 0 removes the override. */
void fakegpu_set_kernel_duration_ns(const char *name, uint64_t ns);

/* Nanoseconds (CLOCK_REALTIME, the CUPTI clock) at which all work queued so far on every
 * stream of every device completes. */
uint64_t fakegpu_gpu_idle_time_ns(void);

/* Creates a module defining the kernels `names` (n mangled names; 32 registers per thread,
 * no static shared memory), as if cuModuleLoadData had loaded an image with them: the
 * RESOURCE MODULE_LOADED callback is delivered and cuModuleGetFunction finds them. Not a
 * driver API: no DRIVER callbacks. Needs no context. Returns 0, -EINVAL or -ENOMEM. */
int fakegpu_module_from_names(CUmodule *mod, const char *const *names, int n);

/* ---- hooks for the runtime double (libcudart.so.13) ---- */

/* Brackets one runtime API call. enter: assigns the call its correlation id and delivers the
 * RUNTIME-domain ENTER callback (cbid from cupti_runtime_cbid.h, fname as CUPTI spells it,
 * e.g. "cudaMalloc_v3020", params the matching *_params struct, symbol_name the mangled
 * kernel name for launches, else NULL). exit: delivers the EXIT callback with
 * *functionReturnValue = result and pops the call. Calls nest LIFO per thread. Returns the
 * correlation id (0 while no CUPTI subscriber exists). */
uint32_t fakegpu_runtime_enter(uint32_t cbid, const char *fname, const void *params,
                               const char *symbol_name);
void fakegpu_runtime_exit(int result);

/* While a thread is inside fakegpu_internal_begin/end, the driver functions it calls work as
 * usual and produce their activity records (attributed to the enclosing runtime call's
 * correlation id), but deliver no DRIVER-domain callbacks: the real libcudart reaches the
 * driver through private tables that CUPTI does not report as driver API calls. Nests. */
void fakegpu_internal_begin(void);
void fakegpu_internal_end(void);

#ifdef __cplusplus
}
#endif

#endif
