/* gpuprof public header: the version of the agent (the in-application capture API comes later). */
#ifndef GPUPROF_GPUPROF_H
#define GPUPROF_GPUPROF_H

#define GPUPROF_VERSION_MAJOR 0
#define GPUPROF_VERSION_MINOR 1
#define GPUPROF_VERSION_PATCH 0
#define GPUPROF_VERSION_STRING "0.1.0"

/* One integer for comparisons: 0.1.0 -> 100. */
#define GPUPROF_VERSION                                                                            \
  (GPUPROF_VERSION_MAJOR * 10000 + GPUPROF_VERSION_MINOR * 100 + GPUPROF_VERSION_PATCH)

#endif
