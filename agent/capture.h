/* Trace captures: a time-boxed Perfetto timeline of this process, started on demand. */
#ifndef GPUPROF_AGENT_CAPTURE_H
#define GPUPROF_AGENT_CAPTURE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/config.h"

#define CAPTURE_DEFAULT_DURATION_NS (60ull * 1000000000ull)
#define CAPTURE_MAX_FILES 5 /* the trace and its gpu_time, gpu_memory, memcpy, nccl profiles */

/* What a caller (control socket, GPUPROF_CAPTURE_ON_START, signal, public API) asks for. */
struct capture_params {
  uint64_t duration_ns; /* 0: CAPTURE_DEFAULT_DURATION_NS */
  int gpu_only;         /* -1: the configured GPUPROF_GPU_ONLY, else 0 or 1 */
  int format;           /* -1: the configured GPUPROF_TRACE_FORMAT, else enum config_trace_format */
  char output_dir[CONFIG_PATH_MAX]; /* "": the configured GPUPROF_OUTPUT_DIR */
  const char *trigger; /* for the trace metadata: "control", "start", "signal", "api"; NULL:
                          "control" */
};

enum capture_state {
  CAPTURE_IDLE = 0, /* none yet, or the last one finished (see last_*) */
  CAPTURE_RUNNING,
};

struct capture_status {
  enum capture_state state;
  uint64_t id; /* increments per capture started; 0: none yet */
  int gpu_only;
  uint64_t started_ns, ends_ns; /* CLOCK_REALTIME; of the running or the last capture */
  uint64_t events, bytes;       /* written so far / in total */
  uint64_t dropped;             /* events lost (records dropped, size cap) */
  int last_error;               /* 0, or the negative errno the last capture ended with */
  size_t n_files;               /* files written by the last finished capture */
  char files[CAPTURE_MAX_FILES][CONFIG_PATH_MAX];
  int truncated; /* the last capture reached GPUPROF_TRACE_MAX_SIZE (its file is still valid) */
};

/*
 * Starts a capture. 0; -EBUSY while one runs; -EINVAL for bad parameters; another negative
 * errno (e.g. the output directory cannot be written) with a one-line reason in err. Safe
 * from any thread except inside a CUPTI callback.
 */
int capture_start(const struct capture_params *p, char *err, size_t err_len);

/* Ends the running capture now (its file is finished and listed in the status). 0 or -ENOENT. */
int capture_stop(void);
/* The same, but returns after at most max_wait_ns even if the file is not finished yet (the
 * worker ends a capture at its next ticks, up to two flush intervals): the control thread
 * must answer its client, which then follows the status until the capture is idle. */
int capture_stop_within(uint64_t max_wait_ns);

void capture_get_status(struct capture_status *out);

/* ---- wiring (agent/agent.c) ---- */

struct alloc_map;
struct thread_state;

/* Init, before worker_start: registers the worker consumer. 0 or -errno (captures disabled). */
int capture_init(const struct config *cfg, struct alloc_map *allocs);
/* Once the agent is active: GPUPROF_CAPTURE_ON_START and the GPUPROF_CAPTURE_SIGNAL trigger. */
void capture_start_configured(void);
/* Exit, after the worker stopped (worker_stopped: it was joined): finishes a running capture's
 * file and stops the signal thread. Idempotent. */
void capture_shutdown(int worker_stopped);
/* Exit, first: no capture starts any more, and a capture_stop waiting (control thread)
 * returns at once, so the control server stops without waiting for the worker. */
void capture_refuse(void);
/* Forked child: drops the parent's signal trigger (its pipe and, if still ours, the handler);
 * capture_stop there returns -ENOENT at once (the parent's capture is not the child's). */
void capture_forget(void);

/* ---- the API callback hot path (cupti/subscriber.c) ---- */

/* Nonzero while a capture records API calls: one relaxed load at every API EXIT. */
extern atomic_int capture_api_on;

static inline int capture_api_active(void)
{
  return atomic_load_explicit(&capture_api_on, memory_order_relaxed);
}

/*
 * At API EXIT while capture_api_active(), before the call is popped: queues the call (its
 * ENTER time is in the thread's open-call stack) for the worker. flow: a launch or copy whose
 * GPU work gets an arrow. Never blocks; allocates only on the thread's first call.
 */
void capture_api_exit(struct thread_state *ts, uint32_t corr_id, const char *function_name,
                      int flow, uint64_t exit_ns);

/* ---- NVTX (agent/nvtx.c) ---- */

/* Nonzero while a full capture records NVTX ranges. */
extern atomic_int capture_nvtx_on;

static inline int capture_nvtx_active(void)
{
  return atomic_load_explicit(&capture_nvtx_on, memory_order_relaxed);
}

enum capture_nvtx_kind {
  CAPTURE_NVTX_RANGE = 2, /* push/pop, on the calling thread's track */
  CAPTURE_NVTX_MARK,      /* start_ns == end_ns */
  CAPTURE_NVTX_SPAN,      /* start/end; start_tid: the thread that started it */
};

/* Queues one NVTX record on the calling thread's ring (as capture_api_exit). name: stable
 * (interned); domain: agent/nvtx.h's index (0 default, < 256). */
void capture_nvtx(uint32_t kind, const char *name, uint32_t domain, uint64_t start_ns,
                  uint64_t end_ns, uint32_t start_tid);

#endif
