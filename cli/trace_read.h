/* An agent trace (.json, .json.gz or .pftrace) read back as one stream of events. */
#ifndef GPUPROF_CLI_TRACE_READ_H
#define GPUPROF_CLI_TRACE_READ_H

#include <json-c/json.h>
#include <stdint.h>

/*
 * Both encodings of the writer (export/trace.h) say the same things in different shapes: JSON
 * by pid/tid numbers (trace_gpu_pid, trace_sync_tid, trace_nccl_tid, trace_nvtx_tid), the
 * protobuf by track descriptors (a GPU's tracks are children of its "GPU <n> (<name>)" track,
 * named "stream <s>", "stream <s> sync", "NCCL comm ..." and "GPU memory"). The reader turns
 * either into the same events, so what is computed from them cannot depend on the format.
 */

/* Where an event is. */
enum tr_track {
  TR_HOST_THREAD = 1, /* a thread of the host process: id = its tid */
  TR_HOST_NVTX,       /* an NVTX start/end lane of the host process: id = the lane (0, 1, ...) */
  TR_GPU_STREAM,      /* kernels, copies, sets: device, id = the stream */
  TR_GPU_SYNC,        /* synchronization waits: device, id = the stream (UINT32_MAX: context) */
  TR_GPU_NCCL,        /* NCCL operations: device; the communicator is in the args */
  TR_GPU_MEMORY,      /* the GPU memory counter: device */
};

enum tr_kind {
  TR_SLICE = 1, /* ts_ns .. ts_ns + dur_ns */
  TR_INSTANT,   /* an NVTX mark */
  TR_COUNTER,   /* value from ts_ns on */
};

struct tr_event {
  enum tr_kind kind;
  enum tr_track track;
  uint32_t device; /* GPU tracks */
  uint32_t id;     /* see enum tr_track */
  /* "cuda_api", "kernel", "gpu_memcpy", "gpu_memset", "sync", "nccl"; an NVTX domain ("nvtx"
   * for the default one) on NVTX ranges and marks. */
  const char *cat;
  const char *name; /* as the trace shows it (kernels demangled) */
  /* CLOCK_REALTIME nanoseconds; in a JSON file cut before its metadata (which holds the base
   * its times are relative to), nanoseconds since the capture's start. */
  uint64_t ts_ns;
  uint64_t dur_ns;
  uint64_t value; /* TR_COUNTER: bytes in use */
  /* The arguments as the JSON encoding writes them ("correlation", "bytes", "grid" as an
   * array, NCCL "seq", "comm", "state", ...), an object; NULL when there are none. Valid only
   * during the callback. */
  json_object *args;
};

struct tr_sink {
  void *ctx;
  /* The trace's metadata as the JSON encoding's "metadata" object (base_time_ns, pid,
   * process_name, hostname, capture_start_ns, capture_end_ns, dropped_records, ...): called
   * once, after the last event, also for a cut file (with what it holds: a .pftrace's "trace
   * start" keys, nothing for a JSON file cut before its metadata). Valid only during the call.
   * Where the encodings differ: "events" counts the JSON file's naming records and the
   * .pftrace's slices and flows, and a .pftrace holds the process name only in its host
   * process's descriptor, written with the first host track (none in a GPU-only capture: no
   * process_name then). A kernel's launch string in a .pftrace comes back as the JSON keys
   * (grid, block, regs, smem), exactly; one not in the writer's form stays "launch". */
  void (*meta)(void *ctx, json_object *meta);
  /* A host thread's name (the same tid may be named again: the last name holds). */
  void (*thread)(void *ctx, uint32_t tid, const char *name);
  /* A GPU's name as the trace shows its process: "GPU 0 (NVIDIA H100 80GB HBM3)". */
  void (*device)(void *ctx, uint32_t device, const char *name);
  void (*event)(void *ctx, const struct tr_event *e);
  /* When set, only events of this category reach event (a reader may then skip the others
   * without decoding them: a JSON line is parsed only if it holds "cat":"<only_cat>"). */
  const char *only_cat;
};

/*
 * Reads the agent's trace at path (the encoding from its content: gzip or plain JSON, or
 * protobuf packets) into sink, one call per thing in file order. Any callback may be NULL.
 * Returns 0; 1 when the file ends early (a killed process's: what it holds was read); -EINVAL
 * when it is not a gpuprof trace or is damaged, or -errno; each error reported in one line on
 * stderr naming the file (tf_prog first).
 */
int trace_read(const char *path, const struct tr_sink *sink);

/* The two encodings' readers, which trace_read picks between (trace_read.c, trace_read_pf.c);
 * same contract. */
int trace_read_json(const char *path, const struct tr_sink *sink);
int trace_read_pftrace(const char *path, const struct tr_sink *sink);

#endif
