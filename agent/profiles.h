/* pprof windows: GPU time, GPU memory and memcpy profiles per time window, by host stack. */
#ifndef GPUPROF_AGENT_PROFILES_H
#define GPUPROF_AGENT_PROFILES_H

#include <stddef.h>
#include <stdint.h>

struct alloc_map;
struct config;
struct corr_info;
struct event;
struct stack_table;

/*
 * Windows are aligned to the wall clock (start = a multiple of window_ns since the epoch).
 * Device events are attributed to the window of their start time; because CUPTI delivers
 * them up to a flush interval (or more) late, a window is closed only grace_ns after its end,
 * and at most two windows are open. Memory is cut once, at the first tick after a window's
 * end (alloc_map_window): in-use bytes are what the live-allocation map holds at that cut.
 * Everything here runs on one thread at a time (the worker, then the exit path after the
 * worker was joined): no locks of its own.
 */
struct profiles_options {
  const char *output_dir;
  uint64_t window_ns;
  uint64_t grace_ns;
  int write_files;           /* 0: encode (and upload) only */
  int upload;                /* hand each profile to the Pyroscope uploader */
  size_t upload_max_samples; /* a profile with more is uploaded in parts; 0: never split */
  /* A profile whose uncompressed pprof is larger is uploaded in halves (recursively); 0: no
   * limit. One entry alone over it is not uploaded (an upload error). */
  uint64_t upload_max_size;
  struct alloc_map *allocs;   /* NULL: no memory profile */
  struct stack_table *stacks; /* NULL: stacks are off, every sample is its leaf alone */
  uint32_t sample_every;      /* launch sampling period: > 1 when launches are sampled */
  size_t max_keys;            /* distinct (stack, leaf, device) per profile and window */
  const char *host;
  int pid;
  /* The process's part of file names (files_name: "<host>-<pid>[.n]"); NULL: host-pid. */
  const char *name;
  /* A capture's profiles (agent/capture.c): one window of window_ns from origin_ns instead of
   * wall-clock-aligned ones, and files named <file_stem>-<kind>.pb.gz. 0 / NULL: windows. */
  uint64_t origin_ns;
  const char *file_stem;
  /* A snapshot's exact file path instead of the windows' names, and a comment added to every
   * profile built (agent/oom.c). NULL: none. Every kind and window is written to that one
   * path: only for an instance that writes a single profile. */
  const char *file_path;
  const char *comment;
  /* Called after each file is written (on the writing thread); NULL: not called. */
  void (*file_written)(void *arg, int kind, const char *path);
  void *file_written_arg;
};

/* Memory accounted by the owner of an instance without allocs (a capture, which must not take
 * the continuous windows' alloc_map_window counters). */
struct profiles_memory {
  const char *api;   /* the allocation API (CUPTI functionName); NULL: the kind names the leaf */
  uint32_t stack_id; /* STACK_ID_NONE: the leaf alone */
  int32_t device;    /* ALLOC_DEVICE_HOST for pinned memory */
  uint8_t kind;      /* enum alloc_kind */
  int64_t alloc_objects, alloc_bytes, inuse_objects, inuse_bytes;
};

#define PROFILES_DEFAULT_MAX_KEYS (1u << 16)

struct profiles_stats {
  uint64_t windows;       /* windows closed */
  uint64_t files;         /* profile files written */
  uint64_t bytes;         /* compressed bytes produced */
  uint64_t write_errors;  /* profiles not written (I/O or encoding failure) */
  uint64_t upload_errors; /* profiles the uploader did not accept */
  uint64_t split_uploads; /* profiles uploaded in parts (over upload_max_samples or _size) */
  uint64_t late_events;   /* device events older than the oldest open window */
  uint64_t overflow;      /* events whose stack was dropped: too many distinct keys */
  uint64_t lost;          /* events dropped outright (out of memory) */
  uint64_t represented;   /* unsampled launches, stood for by the weighted sampled ones */
};

struct profiles;

struct profiles *profiles_new(const struct profiles_options *o, uint64_t now_ns);
void profiles_free(struct profiles *p);

/* A decoded device event and the API call that caused it (NULL when not joined). */
void profiles_event(struct profiles *p, const struct event *ev, const struct corr_info *api);
/* Adds to the memory profile of the window that holds ts (0: the newest open window). */
void profiles_memory_add(struct profiles *p, uint64_t ts, const struct profiles_memory *m);
/* Opens the window of now, cuts memory and closes (writes) windows that are due. */
void profiles_tick(struct profiles *p, uint64_t now_ns);
/* Writes every open window, the last one as a partial window ending at now. */
void profiles_finish(struct profiles *p, uint64_t now_ns);
void profiles_get_stats(const struct profiles *p, struct profiles_stats *out);

/* The name of a stack's innermost frame (the function that made the call): its function, or
 * module+0xoffset, or the address; resolved with the instance's symbolizer on its thread.
 * 0, or -ENOENT (no stack, stacks off) / -ENOMEM, and then buf holds "?". */
int profiles_stack_leaf_name(struct profiles *p, uint32_t stack_id, char *buf, size_t len);

/* The kind names used in file names: "gpu_time", "gpu_memory", "memcpy", "nccl" (written only
 * when the window has NCCL ops). */
#define PROFILES_KIND_COUNT 4
const char *profiles_kind_name(int kind);

/* The agent's instance. From init, before worker_start: continuous mode only; registers the
 * worker consumer. 0 or -errno (then no profiles; the agent runs on). */
int profiles_start(const struct config *cfg, struct alloc_map *allocs, struct stack_table *stacks,
                   uint32_t sample_every);
/* From shutdown after worker_stop: worker_joined says the worker is gone, so its state may be
 * touched here; then writes the last window(s). */
void profiles_stop(int worker_joined);

#endif
