/* gpuprof public header: the agent's version and the optional in-application capture API. */
#ifndef GPUPROF_GPUPROF_H
#define GPUPROF_GPUPROF_H

#define GPUPROF_VERSION_MAJOR 0
#define GPUPROF_VERSION_MINOR 1
#define GPUPROF_VERSION_PATCH 0
#define GPUPROF_VERSION_STRING "0.1.0"

/* One integer for comparisons: 0.1.0 -> 100. */
#define GPUPROF_VERSION                                                                            \
  (GPUPROF_VERSION_MAJOR * 10000 + GPUPROF_VERSION_MINOR * 100 + GPUPROF_VERSION_PATCH)

#ifdef __cplusplus
extern "C" {
#endif

/* gpuprof_capture_start flags. */
#define GPUPROF_CAPTURE_GPU_ONLY 0x1u /* device activity only: no API calls, no flows */

/*
 * Starts a trace capture of this process (docs/TRACES.md), written to GPUPROF_OUTPUT_DIR in
 * GPUPROF_TRACE_FORMAT. duration_ms 0 means the default (60 s), at most 24 h. Returns 0, or a
 * negative errno (<errno.h>): -EBUSY (a capture is running), -ENODEV (the agent is not active
 * in this process: CUDA not initialized yet, GPUPROF_MODE=off, a forked child, or after the
 * agent's exit handler ran), -ESHUTDOWN (the process is exiting right now), -EINVAL (unknown
 * flags; a duration over 24 h once the agent is active), or an I/O error creating the file.
 * Safe from any application thread, but not from a signal handler (it takes locks and opens
 * files): GPUPROF_CAPTURE_SIGNAL is the signal-driven trigger.
 *
 * Both functions are exported by libgpuprof.so. The agent is optional at run time, so
 * declare them weak and test for NULL:
 *
 *   #include <gpuprof/gpuprof.h>
 *   #pragma weak gpuprof_capture_start
 *   #pragma weak gpuprof_capture_stop
 *   ...
 *   if (gpuprof_capture_start)
 *     gpuprof_capture_start(10000, 0);
 *
 * A weak reference is bound when the program starts, so the agent must be loaded by then:
 * LD_PRELOAD="$CUDA_INJECTION64_PATH" (the driver then reuses that copy), or link with
 * -lgpuprof (which makes the library a start-up dependency: the program no longer starts
 * where it is missing). Without either the pointers stay NULL and the program runs unprofiled: the
 * driver dlopens the agent inside cuInit, after the weak references were resolved.
 * Such a program can still reach the functions after cuInit with
 * dlopen(getenv("CUDA_INJECTION64_PATH"), RTLD_NOW | RTLD_NOLOAD) and dlsym.
 */
int gpuprof_capture_start(unsigned duration_ms, unsigned flags);

/*
 * Ends the running capture now and waits until its file is finished (bounded: three flush
 * intervals plus 5 s). 0, or -ENOENT when none runs (also before cuInit and without an active
 * agent).
 */
int gpuprof_capture_stop(void);

#ifdef __cplusplus
}
#endif

#endif
