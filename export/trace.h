/* Streaming timeline writer: host API calls, GPU work, flows and counters to a Perfetto trace. */
#ifndef GPUPROF_EXPORT_TRACE_H
#define GPUPROF_EXPORT_TRACE_H

#include <stdint.h>

/*
 * One writer per trace file, fed by one thread at a time (the agent's worker during a capture,
 * or the gpuprof command). Three encodings of the same content:
 *
 *   TRACE_FORMAT_JSON      Chrome Trace Event JSON (what ui.perfetto.dev and chrome://tracing read)
 *   TRACE_FORMAT_JSON_GZ   the same, gzip-compressed while it is written
 *   TRACE_FORMAT_PERFETTO  native Perfetto TracePacket protobuf (.pftrace), in deflated chunks
 *
 * Layout (docs/TRACES.md): the host process with one track per application thread (CUDA API
 * calls as slices); one process per GPU, sorted after the host, with one track per stream
 * (kernels, memcpys, memsets), one track per stream for synchronization waits (more, "sync
 * lanes", while several threads wait for the stream at once), and a "GPU memory in use"
 * counter; a flow arrow from each launching API call to its GPU slice.
 *
 * Nothing is kept per event: output goes through a bounded buffer, and memory grows only with
 * the number of distinct tracks (threads, streams) and, for the protobuf encoding, distinct
 * names. Slices on one track never overlap in the output: a slice that would partially overlap
 * one already written on its track is clamped (its start moved to the other's end, or its end
 * to 1 ns before the other's start; also when it only touches it, see trace.c track_fit) and
 * counted in trace_stats.clamped.
 *
 * Timestamps are CLOCK_REALTIME nanoseconds. JSON writes them in microseconds relative to
 * trace_meta.base_ns with three decimals (a double cannot hold epoch microseconds to the
 * nanosecond); the protobuf writes absolute nanoseconds.
 *
 * Errors: functions return 0 or a negative errno. -EINVAL refuses one event (it ends before it
 * starts, or its track cannot be held: a device >= 64, 65536 tracks) and counts it in
 * trace_stats.invalid; later events are unaffected. An I/O error is sticky (every later call
 * returns it), and the file is cut back to its last whole event, so it loads as a killed
 * writer's would. When the size cap is reached the writer stops writing events, keeps the file
 * valid, counts what it discards and returns -EFBIG from every event call; trace_writer_close
 * then adds a note to the trace's metadata and returns 0.
 */

enum trace_format {
  TRACE_FORMAT_JSON = 0,
  TRACE_FORMAT_JSON_GZ,
  TRACE_FORMAT_PERFETTO,
};

/* "json", "json.gz" or "perfetto" (also "pftrace"); 0 or -EINVAL. */
int trace_format_parse(const char *s, enum trace_format *out);
/* The file name suffix: ".json", ".json.gz", ".pftrace". */
const char *trace_format_suffix(enum trace_format f);

/* What is known when the trace is opened. Strings are copied. */
struct trace_meta {
  uint64_t base_ns;          /* time origin (CLOCK_REALTIME ns), usually the capture start;
                                anything earlier is clamped to it */
  uint32_t pid;              /* the host process */
  const char *process_name;  /* e.g. "python3 train.py"; NULL: "process <pid>" */
  const char *command_line;  /* NULL if unknown */
  const char *hostname;      /* NULL if unknown */
  const char *agent_version; /* e.g. "gpuprof 0.1.0" */
  uint64_t size_cap_bytes;   /* 0: no cap; else the file stays below this size */
  int flows;                 /* nonzero: write flow arrows (off for GPU-only captures, whose
                                API slices are not recorded) */
  int gzip_level;            /* TRACE_FORMAT_JSON_GZ, and TRACE_FORMAT_PERFETTO's chunks: 1..9,
                                0 means 1 (fastest) */
  int pftrace_plain;         /* TRACE_FORMAT_PERFETTO: nonzero writes the packets as they are;
                                0 deflates them in chunks (compressed_packets, ~5x smaller) */
};

enum trace_gpu_kind {
  TRACE_GPU_KERNEL = 1,
  TRACE_GPU_MEMCPY,
  TRACE_GPU_MEMSET,
};

/*
 * One piece of GPU work, filled by the agent from its event model (or by the CLI). Kept apart
 * from agent/event.h because export/ is shared with the command, which has no agent headers.
 */
struct trace_gpu_slice {
  enum trace_gpu_kind kind;
  uint64_t start_ns, end_ns;
  uint32_t device;
  uint32_t stream;
  uint32_t corr_id;  /* shown as an argument; 0 if none */
  uint64_t flow_id;  /* the API slice's flow (trace_writer_api_slice), 0: no arrow */
  uint32_t graph_id; /* 0 unless the work ran as a graph node */
  uint64_t graph_node_id;
  const char *name; /* kernels: the (mangled) name; memcpy/memset: NULL for the default */
  union {
    struct {
      int32_t grid[3];
      int32_t block[3];
      uint32_t registers_per_thread;
      uint32_t static_smem, dynamic_smem;
    } kernel;
    struct {
      uint64_t bytes;
      uint8_t copy_kind; /* CUPTI's CUpti_ActivityMemcpyKind values (1 HtoD, 2 DtoH, 8 DtoD…) */
      /* CUPTI's CUpti_ActivityMemoryKind of each side (1 pageable, 2 pinned, 3 device…; 0
       * unknown: not written): a copy from or to pageable host memory is staged by the driver
       * and blocks the host (the trace names it, docs/TRACES.md). */
      uint8_t src_kind, dst_kind;
      uint32_t src_device, dst_device;
    } memcpy;
    struct {
      uint64_t bytes;
      uint32_t value;
    } memset;
  } u;
};

struct trace_writer;

/* Creates (truncates) path; NULL with errno set on failure. */
struct trace_writer *trace_writer_open(const char *path, enum trace_format format,
                                       const struct trace_meta *meta);

/* Names a GPU ("NVIDIA H100 80GB HBM3"): its process becomes "GPU <n> (<name>)". Optional. */
int trace_writer_device(struct trace_writer *w, uint32_t device, const char *name);
/* Names a host thread's track; threads without a name are shown as "thread <tid>". */
int trace_writer_thread_name(struct trace_writer *w, uint32_t tid, const char *name);

/*
 * A host API call on thread tid of the host process. flow_id != 0 starts a flow arrow that
 * the GPU slice with the same flow_id ends (use the correlation id: unique per process).
 *
 * Calls on one thread may nest (any write order), with one contract for flows: a call that
 * starts a flow must not share its start time with a call nested in it. The JSON importer
 * binds a flow start ("s") to the topmost slice open on the thread at that time in its sorted
 * stream, and an inner slice starting at the same instant is open there (for sure when it was
 * written first), so it would take the outer call's arrow; the writer does not check this.
 * The protobuf format names the flow on the slice's own BEGIN and is immune. The agent keeps
 * the contract trivially: agent/capture.c writes only the outermost call of each thread
 * (cupti/subscriber.c queues a call for the trace only at depth 1), so its host slices never
 * nest.
 */
int trace_writer_api_slice(struct trace_writer *w, uint32_t tid, const char *name,
                           uint64_t start_ns, uint64_t end_ns, uint32_t corr_id, uint64_t flow_id);

int trace_writer_gpu_slice(struct trace_writer *w, const struct trace_gpu_slice *s);

/*
 * One NCCL operation (collective or point-to-point) on its communicator's track in the GPU
 * process of the device that ran it: "NCCL comm <label> rank <r>/<n>", above the streams. A
 * kernel that ran one op: the slice spans the kernel. Ops grouped into one kernel: the caller
 * lays them out one after another inside the kernel's interval, each its share of the
 * kernel's time (siblings that tile the kernel, not a staircase of nested slices that a large
 * group would make hundreds deep), with group_ops and kernel_ns telling so. Strings are
 * copied or used only during the call.
 */
struct trace_nccl_slice {
  uint64_t start_ns, end_ns;
  uint32_t device;
  uint64_t comm_hash;
  const char *comm_label; /* the communicator's name, or its hash in hex */
  int32_t rank, nranks;
  const char *func;         /* the slice's name: "AllReduce", "Send", ... */
  const char *datatype;     /* "ncclBfloat16" */
  const char *algo, *proto; /* "" when unknown */
  uint64_t count, bytes;
  int32_t root, peer; /* -1: none */
  uint64_t seq;       /* UINT64_MAX: none */
  uint32_t nchannels;
  uint32_t stream;    /* the kernel's stream */
  uint32_t corr_id;   /* the kernel launch's correlation id */
  uint32_t group_ops; /* ops the kernel ran; > 1: args group_ops and kernel_ns are written */
  uint64_t kernel_ns; /* the kernel's duration */
  /* An op still pending at the capture's end (agent/nccl.h nccl_pending): its state ("launched,
   * not finished" or "not launched"), written as arg `state` with `posted_ns` (the API call's
   * absolute start). NULL for a finished op. A pending op's corr_id is 0 when it was not
   * launched (no `correlation` arg then), stream UINT32_MAX (none) and nchannels 0 (not yet
   * known) leave those args out. */
  const char *state;
  uint64_t posted_ns;
};
int trace_writer_nccl_slice(struct trace_writer *w, const struct trace_nccl_slice *s);

/* A synchronization wait (CUPTI sync record): stream == UINT32_MAX for a context-wide one.
 * Waits never nest: one that overlaps a wait already on the stream's sync track (another
 * thread's) goes on the stream's next sync lane, a track of its own ("stream 7 sync 2"), with
 * its times unchanged; see trace.c sync_lane. */
int trace_writer_sync(struct trace_writer *w, uint32_t device, uint32_t stream, const char *name,
                      uint64_t start_ns, uint64_t end_ns, uint32_t corr_id);

/*
 * NVTX (docs/TRACES.md "NVTX"). domain is the slice's category (NULL: "nvtx", the default
 * domain); strings are used only during the call.
 *
 * A push/pop range on its thread's track, where it nests with the thread's API calls (the
 * caller pairs pushes and pops so that ranges of one thread never cross).
 */
int trace_writer_nvtx_range(struct trace_writer *w, uint32_t tid, const char *domain,
                            const char *name, uint64_t start_ns, uint64_t end_ns);
/* A mark: an instant event on its thread's track. */
int trace_writer_nvtx_mark(struct trace_writer *w, uint32_t tid, const char *domain,
                           const char *name, uint64_t ts_ns);
/* A start/end range (it may end on another thread than it started on): on the host process's
 * "NVTX start/end" track, or on its next lane ("NVTX start/end 2", ...) when it overlaps a
 * range already written there; args start_tid and end_tid. */
int trace_writer_nvtx_span(struct trace_writer *w, const char *domain, const char *name,
                           uint64_t start_ns, uint64_t end_ns, uint32_t start_tid,
                           uint32_t end_tid);

/* GPU memory in use on device from ts_ns on. */
int trace_writer_memory(struct trace_writer *w, uint32_t device, uint64_t ts_ns,
                        uint64_t bytes_in_use);

/*
 * Metadata written when the trace is closed (dropped-record counts, capture end, …). Keys are
 * [a-z0-9_]; setting a key again replaces its value. At most TRACE_META_MAX keys.
 */
#define TRACE_META_MAX 32
int trace_writer_meta_uint(struct trace_writer *w, const char *key, uint64_t value);
int trace_writer_meta_string(struct trace_writer *w, const char *key, const char *value);

struct trace_stats {
  uint64_t events;    /* slices, counters and flows written */
  uint64_t bytes;     /* file size so far (compressed for gzip), excluding buffered */
  uint64_t clamped;   /* slices moved or shortened to keep their track nested */
  uint64_t discarded; /* events not written because the size cap was reached */
  uint64_t invalid;   /* events refused: end before start, or too many tracks */
  /* .pftrace, excluding buffered: chunks of packets written deflated, and written as they
   * were (the compressor was behind the writer, or deflate did not make them smaller) */
  uint64_t chunks_deflated, chunks_stored;
  int stopped; /* the size cap was reached */
};
void trace_writer_stats(const struct trace_writer *w, struct trace_stats *out);

/* Writes the metadata and the end of the file, closes it and frees w. NULL is a no-op. */
int trace_writer_close(struct trace_writer *w);

#endif
