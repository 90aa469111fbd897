/* What the trace writer's front end (trace.c) shares with its JSON and protobuf encoders. */
#ifndef GPUPROF_EXPORT_TRACE_INTERNAL_H
#define GPUPROF_EXPORT_TRACE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <zlib.h>

#include "export/trace.h"

/* ---- output: a bounded buffer over write(2), optionally deflated on a second thread ---- */

#define TRACE_OUT_BUF (256u * 1024u)
/* Larger than any one event (names are truncated to TRACE_NAME_MAX bytes before escaping). */
#define TRACE_EVENT_MAX (40u * 1024u)
#define TRACE_NAME_MAX 4096u
/* Room kept below the size cap for the end of the file (metadata, closing brackets). */
#define TRACE_TAIL_RESERVE (96u * 1024u)
#define TRACE_META_KEY_MAX 48u
#define TRACE_META_VALUE_MAX 128u

/*
 * Whole events go into buf; buf is written (or deflated) only when the next event does not fit,
 * so every write(2) ends on an event boundary: a process killed between two writes leaves a file
 * that ends with a complete event. gzip output is sync-flushed at each of those points, so zcat
 * recovers everything written before a kill. Packet output (TRACE_OUT_PACKETS, for .pftrace)
 * deflates each buffer of whole packets on its own into one TracePacket.compressed_packets, the
 * way Perfetto's service compresses a trace, so a killed capture keeps every chunk written.
 * Both compressed outputs are deflated and written on a second thread (trace_out.c), one buffer
 * behind the writer; trace_out_flush waits for it.
 */
struct trace_gz;

enum trace_out_mode {
  TRACE_OUT_PLAIN, /* bytes as given */
  TRACE_OUT_GZIP,  /* one gzip stream, sync-flushed at every buffer */
  /* Trace packets; each buffer one compressed_packets packet (or as given). Each packet goes in
   * with one trace_out_reserve (at most TRACE_EVENT_MAX bytes), so no chunk splits one. */
  TRACE_OUT_PACKETS,
};

struct trace_out {
  int fd;
  int err;  /* sticky; a compressor error shows here from the writer's next call on */
  int gzip; /* a compressor thread is in use: TRACE_OUT_GZIP or TRACE_OUT_PACKETS */
  int packets;
  z_stream z; /* the compressor thread's */
  char *buf;
  size_t len;
  unsigned char *zbuf;
  size_t zcap;
  uint64_t file_bytes; /* bytes handed to write(2); compressed: as of the last flush or swap */
  /* TRACE_OUT_PACKETS, as of the last flush or swap: buffers written as compressed_packets,
   * and written as they were (deflate saved too little, or the compressor was behind). */
  uint64_t chunks_deflated, chunks_stored;
  struct trace_gz *gz; /* compressed: the compressor thread and the second buffer */
};

int trace_out_open(struct trace_out *o, const char *path, enum trace_out_mode mode, int level);
/* A pointer to at least n (<= TRACE_EVENT_MAX) writable bytes; NULL on error (o->err). */
char *trace_out_reserve(struct trace_out *o, size_t n);
static inline void trace_out_commit(struct trace_out *o, size_t n)
{
  o->len += n;
}
int trace_out_write(struct trace_out *o, const void *data, size_t n);
int trace_out_flush(struct trace_out *o);
/* Bytes the file would have if it were flushed now (an upper bound when compressed). */
uint64_t trace_out_size(const struct trace_out *o);
/* Overwrites already-flushed bytes of an uncompressed file. */
int trace_out_pwrite(struct trace_out *o, uint64_t off, const void *data, size_t n);
int trace_out_close(struct trace_out *o);

/* Room before a chunk's deflated bytes for its framing: Trace.packet's key and length, then
 * TracePacket.compressed_packets' key (field 50: two bytes) and length. */
#define TRACE_CHUNK_HEAD 16u
/*
 * Deflates len bytes of whole Trace packets (each field 1, as in a file) into one Trace packet
 * whose compressed_packets field holds them as a zlib stream, as Perfetto's service writes it
 * and its importer inflates it. z: a zlib-wrapped deflate stream (windowBits 15), reset here;
 * out: TRACE_CHUNK_HEAD + deflateBound(z, len) bytes. Returns the framed packet, inside out,
 * with its size in *n; NULL when deflate saves less than TRACE_CHUNK_HEAD bytes or fails: the
 * packets are then written as they are.
 */
const unsigned char *trace_chunk_deflate(z_stream *z, const void *data, size_t len,
                                         unsigned char *out, size_t cap, size_t *n);

/* ---- tracks ---- */

enum trace_track_kind {
  TRACK_HOST_PROCESS = 1,
  TRACK_HOST_THREAD,
  TRACK_GPU_PROCESS, /* a = device */
  TRACK_GPU_STREAM,  /* a = device, b = stream */
  TRACK_GPU_SYNC,    /* a = device, b = stream (UINT32_MAX: context-wide) */
  TRACK_GPU_MEMORY,  /* a = device */
  TRACK_META,        /* the protobuf writer's "gpuprof" track for trace metadata */
  TRACK_GPU_NCCL,    /* a = device, b = index in trace_writer.nccl_comms */
  TRACK_HOST_NVTX,   /* NVTX start/end ranges: a = 0, b = lane (trace.c nvtx_lane) */
};

#define TRACK_RING 16

struct trace_span {
  uint64_t start, end;
};

/* Tracks one stream's synchronization waits can take (its "sync lanes", trace.c sync_lane):
 * one per wait in progress at once. Past this many, waits share the last one, clamped. */
#define TRACE_SYNC_LANES 255u

struct trace_track {
  uint8_t kind;
  uint8_t described;
  uint32_t a, b;
  uint32_t lane;    /* TRACK_GPU_SYNC: 0 for the stream's first sync track, else 1.. */
  uint32_t lanes;   /* TRACK_GPU_SYNC lane 0: how many lanes the stream has (0 means 1) */
  uint64_t uuid;    /* protobuf track uuid, unique in the trace */
  uint64_t max_end; /* latest end of any slice written on the track */
  uint64_t written; /* slices written on the track */
  /* The most recent slices written on the track: a new one is fitted against these. */
  struct trace_span ring[TRACK_RING];
  uint32_t ring_len, ring_pos;
};

/* One slice ready to encode: fitted to its track, timestamps >= base. */
struct trace_slice {
  const char *name;
  size_t name_len;
  uint64_t start, end;
  uint32_t corr_id;
  uint64_t flow_out;                   /* nonzero: a flow starts here */
  uint64_t flow_in;                    /* nonzero: a flow ends here */
  const struct trace_gpu_slice *gpu;   /* NULL for API calls and syncs */
  const struct trace_nccl_slice *nccl; /* NCCL ops only */
  /* NVTX ranges and marks: the domain as the category (JSON "cat", protobuf `categories`),
   * no correlation id; NULL for every other slice. */
  const char *cat;
  int instant;                 /* an NVTX mark: an instant event at start (end == start) */
  uint32_t start_tid, end_tid; /* TRACK_HOST_NVTX: the threads that started and ended it */
};

/* Lanes of the host process's NVTX start/end track: one per range open at once. Past this
 * many, ranges share the last one, clamped. */
#define TRACE_NVTX_LANES 64u

/* The JSON tid of NVTX start/end lane k in the host process: above any real tid (Linux's
 * pid_max is at most 2^22). */
static inline uint32_t trace_nvtx_tid(uint32_t lane)
{
  return 0xf0000000u | lane;
}

/* The communicators of TRACK_GPU_NCCL tracks, in order of first use. */
#define TRACE_MAX_NCCL_COMMS 256u
struct trace_nccl_comm {
  uint64_t hash;
  int32_t rank, nranks;
  char label[64];
};

/* The JSON tid of a communicator's track in its GPU process: apart from streams (small ids)
 * and sync lanes (bit 31). */
static inline uint32_t trace_nccl_tid(uint32_t index)
{
  return 0x40000000u | index;
}
/* Communicator tracks sort above the streams of their GPU. */
static inline int32_t trace_nccl_rank(uint32_t index)
{
  return -1000000 + (int32_t)(index & 0xffffu);
}

struct trace_meta_kv {
  char key[TRACE_META_KEY_MAX];
  int is_string;
  uint64_t u;
  char s[TRACE_META_VALUE_MAX];
};

struct trace_encoder;

struct trace_writer {
  enum trace_format format;
  struct trace_meta meta; /* strings owned */
  struct trace_out out;
  uint64_t cap; /* size_cap_bytes less the tail reserve; UINT64_MAX if none */

  struct trace_track *tracks; /* open addressing */
  uint32_t tracks_cap, tracks_len;
  uint64_t next_uuid;
  struct trace_track *last; /* one-entry lookup cache */

  char *device_names[64];
  struct trace_nccl_comm nccl_comms[TRACE_MAX_NCCL_COMMS];
  uint32_t n_nccl_comms;
  uint64_t nvtx_lane_end[TRACE_NVTX_LANES]; /* latest end written on each NVTX lane */
  uint32_t nvtx_lanes;                      /* lanes in use */
  struct trace_meta_kv kv[TRACE_META_MAX];
  uint32_t kv_len;

  uint64_t max_ts; /* latest timestamp written */
  struct trace_stats stats;
  const struct trace_encoder_ops *ops;
  struct trace_encoder *enc; /* the encoder's own state */
};

#define TRACE_MAX_DEVICES 64u
#define TRACE_MAX_TRACKS 65536u

/* The pid a GPU's process gets in JSON: above any real pid, distinct per host process. */
static inline uint32_t trace_gpu_pid(uint32_t host_pid, uint32_t device)
{
  return 0x40000000u | ((host_pid & 0x3fffffu) << 8) | (device & 0xffu);
}
/* The sort rank of a stream's track (sub = 0) or of its sync lane sub - 1 (sub >= 1) in its
 * GPU process: a stream, then its sync tracks in lane order, then the next stream; context-wide
 * waits (UINT32_MAX) last. An int32 in both encodings: 256 ranks per stream (the stream and
 * TRACE_SYNC_LANES lanes), so stream ids from 2^23 - 2 on share the last stream's ranks
 * (CUPTI's are small per-context counters in practice). */
static inline int32_t trace_stream_rank(uint32_t stream, uint32_t sub)
{
  uint32_t k = sub < 255u ? sub : 255u;

  if (stream == UINT32_MAX)
    return (int32_t)(0x7fffff00u + (k ? k - 1 : 0));
  return (int32_t)((stream < 0x7ffffeu ? stream : 0x7ffffeu) * 256u + k);
}
/* The JSON tid of a stream's synchronization lane inside the GPU process. Lane 0 is
 * 0x80000000 | stream (context-wide: UINT32_MAX); lane k >= 1 puts k in bits 22..29 (the
 * stream in the 22 bits below: unique for stream ids below 2^22), context-wide lanes count down
 * from UINT32_MAX. */
static inline uint32_t trace_sync_tid(uint32_t stream, uint32_t lane)
{
  if (stream == UINT32_MAX)
    return UINT32_MAX - lane;
  if (!lane)
    return 0x80000000u | stream;
  return 0x80000000u | (lane << 22) | (stream & 0x3fffffu);
}

/* Track display names, shared by both encodings. Return the length written (< n). */
size_t trace_track_name(const struct trace_writer *w, const struct trace_track *t, char *buf,
                        size_t n);
const char *trace_copy_kind_name(unsigned kind); /* "HtoD", … */
/* A copy side's memory kind (CUpti_ActivityMemoryKind): "pageable", "pinned", "device",
 * "array", "managed", "device_static", "managed_static"; NULL for unknown ones. */
const char *trace_memory_kind_name(unsigned kind);
/* Memcpy/memset throughput in GB/s (bytes per ns), in thousandths; 0 if no duration. */
uint64_t trace_bandwidth_milli(uint64_t bytes, uint64_t dur_ns);

/*
 * 0 if `bytes` more still fit under the size cap, else stops the writer (-EFBIG). pending: the
 * event is already formatted at the end of the output buffer (trace_out_reserve), uncommitted;
 * it is kept if the check has to flush the buffer, and the caller then commits it as usual.
 */
int trace_fits(struct trace_writer *w, size_t bytes, int pending);

/* ---- encoders ---- */

struct trace_encoder_ops {
  int (*begin)(struct trace_writer *w);
  int (*describe)(struct trace_writer *w, struct trace_track *t);
  /* Names (or renames) a host thread's track. */
  int (*describe_thread)(struct trace_writer *w, struct trace_track *t, const char *name);
  int (*slice)(struct trace_writer *w, struct trace_track *t, const struct trace_slice *s);
  int (*counter)(struct trace_writer *w, struct trace_track *t, uint64_t ts, uint64_t value);
  int (*end)(struct trace_writer *w); /* metadata and closing; the file is then closed */
  void (*free)(struct trace_writer *w);
};

extern const struct trace_encoder_ops trace_json_ops;
extern const struct trace_encoder_ops trace_perfetto_ops;

#endif
