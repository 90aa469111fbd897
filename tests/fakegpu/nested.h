/* FAKEGPU_NESTED: whether runtime calls also deliver the nested DRIVER/RUNTIME callbacks. */
#ifndef FAKEGPU_NESTED_H
#define FAKEGPU_NESTED_H

/*
 * Whether a CUDA runtime call on real hardware delivers nested DRIVER-domain callbacks (with
 * their own correlation ids) for the driver work it does is not verified ([U] in cupti.md
 * 3.6). The simulator's default is no (the runtime double reaches the driver inside
 * fakegpu_internal_begin/end, silently); FAKEGPU_NESTED, a comma list, selects the other
 * worlds so that a tool can be tested in all of them:
 *
 *   driver   the driver calls a runtime call makes deliver DRIVER ENTER/EXIT callbacks and
 *            DRIVER API records with ids of their own, nested inside the RUNTIME ENTER/EXIT
 *   runtime  __cudaLaunchKernel(_ptsz) calls cudaLaunchKernel(_ptsz) inside itself: a nested
 *            RUNTIME ENTER/EXIT (and with `driver`, the cuLaunchKernel under that)
 *
 * Records in nested mode: memcpy records carry the nested driver call's id in correlationId
 * and the innermost runtime call's id in runtimeCorrelationId; kernel records carry the
 * innermost runtime call's id (cupti.md 3.6: "runtime id for runtime launches"); memset,
 * memory, sync and graph-replay records carry the nested driver call's id (the originating
 * API; the harder case for a tool, [U]).
 *
 * Exported by the simulated libcuda.so.1, like the hooks in fakegpu.h.
 */

#ifdef __cplusplus
extern "C" {
#endif

enum {
  FAKEGPU_NESTED_DRIVER = 1,
  FAKEGPU_NESTED_RUNTIME = 2,
};

/* The current mode (bits above): FAKEGPU_NESTED at load, or the last fakegpu_nested_set. */
unsigned fakegpu_nested_get(void);
/* Test control: switches the mode for calls that begin afterwards. */
void fakegpu_nested_set(unsigned mode);

#ifdef __cplusplus
}
#endif

#endif
