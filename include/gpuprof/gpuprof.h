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
 * GPUPROF_TRACE_FORMAT. duration_ms 0 means the default (60 s). Returns 0, or a negative
 * errno: -EBUSY (a capture is running), -ENODEV (the agent is not active in this process,
 * or CUDA was not initialized yet), -EINVAL (unknown flags), or an I/O error creating the
 * file. Safe from any application thread.
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
 * -lgpuprof. Without either the pointers stay NULL and the program runs unprofiled.
 */
int gpuprof_capture_start(unsigned duration_ms, unsigned flags);

/* Ends the running capture now and finishes its file. 0, or -ENOENT when none runs. */
int gpuprof_capture_stop(void);

#ifdef __cplusplus
}
#endif

#endif
