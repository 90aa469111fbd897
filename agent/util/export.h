/* The one macro that makes a symbol visible outside libgpuprof.so (built with -fvisibility=hidden).
 */
#ifndef GPUPROF_AGENT_UTIL_EXPORT_H
#define GPUPROF_AGENT_UTIL_EXPORT_H

/*
 * Only the injection entry point, the NCCL profiler plugin symbols (the data symbols
 * ncclProfiler_v5, ncclProfiler_v4 and ncclProfiler_v3, cupti/nccl_plugin.c) and the public API
 * in include/gpuprof/ carry this; `nm -D --defined-only libgpuprof.so` must list nothing else.
 */
#define GPUPROF_EXPORT __attribute__((visibility("default")))

#endif
