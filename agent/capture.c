/* Trace captures: feeds the worker's decoded events and the threads' API calls to a trace writer.
 */
#define LOG_MODULE "capture"
#include "agent/capture.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent/agent.h"
#include "agent/aggregate.h"
#include "agent/alloc_map.h"
#include "agent/corr.h"
#include "agent/ctx_map.h"
#include "agent/event.h"
#include "agent/hoststack.h"
#include "agent/nccl.h"
#include "agent/nvtx.h"
#include "agent/profiles.h"
#include "agent/stack.h"
#include "agent/thread.h"
#include "agent/util/bthread.h"
#include "agent/util/clock.h"
#include "agent/util/demangle.h"
#include "agent/util/export.h"
#include "agent/util/guard.h"
#include "agent/util/files.h"
#include "agent/util/log.h"
#include "agent/worker.h"
#include "cupti/loader.h"
#include "cupti/subscriber.h"
#include "export/trace.h"
#include "gpuprof/gpuprof.h"

/*
 * Threads and ownership:
 *  - capture_start (any thread but a callback) opens the file, fills `cap` under cap.lock and
 *    publishes the writer in cap.live; from then on only the worker thread writes to it.
 *  - Application threads queue API calls into their own single-producer ring (below); the
 *    worker drains the rings.
 *  - The worker ends a capture in its tick (deadline, stop request, size cap, write error):
 *    stops API recording and flushes CUPTI; at the next tick it flushes again and closes the
 *    file once every buffer CUPTI handed over is decoded (end_settled), so that records
 *    completed before the end are written. agent_shutdown closes a running one after the
 *    worker's final batch (capture_shutdown).
 * cap.lock is held only for a few assignments, never across I/O or CUPTI calls.
 */

/* ---- per-thread API rings ---- */

#define RING_SIZE 8192u /* calls a thread can queue between two drains (32 B each) */
#define RING_MASK (RING_SIZE - 1)
/*
 * Rings of ended threads wait for the worker's next drain before a new thread may reuse them;
 * the worker drains at its ticks (every GPUPROF_FLUSH_INTERVAL), so threads that come and go
 * faster would each allocate one more ring (1000 threads in one interval: 250 MiB). A claim
 * that must allocate while RING_EXITED_WAKE rings await their drain wakes the worker for an
 * early drain; with RING_EXITED_MAX waiting (the worker does not keep up) it allocates none
 * and the thread's calls are dropped and counted (dropped_api_calls) until a ring is free.
 * Rings in all: at most the threads calling CUDA at once in a capture + RING_EXITED_MAX.
 */
#define RING_EXITED_WAKE 32u
#define RING_EXITED_MAX 256u

struct api_rec {
  const char *name; /* CUPTI functionName: a global constant */
  uint64_t enter_ns, exit_ns;
  uint32_t corr_id;
  uint32_t flow;
};

struct api_ring {
  _Atomic uint32_t head; /* the owning thread's next slot */
  _Atomic uint32_t tail; /* the worker's next slot */
  uint32_t tid;
  atomic_int exited; /* the owner thread ended: reusable once drained */
  atomic_int free;   /* no owner: a new thread may claim it */
  _Atomic uint64_t dropped;
  char comm[16]; /* the owner's name when it claimed the ring */
  /* Worker only: the capture (wk.seq) whose trace names this owner's track, 0 for none. Per
   * ring rather than a table of tids: no limit on the threads one capture names. */
  uint32_t named_seq;
  struct api_ring *next; /* immutable once published */
  struct api_rec recs[RING_SIZE];
};

static _Atomic(struct api_ring *) rings; /* push-only list */
static pthread_mutex_t rings_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_key_t ring_key;
static int ring_key_ok;
static _Atomic uint64_t rings_failed;    /* calls not queued: no ring could be allocated */
static _Atomic uint32_t rings_allocated; /* rings in the list (never freed): trace metadata */

atomic_int capture_api_on;

/* Thread exit (pthread key destructor): the worker frees the ring once it has drained it. */
static void ring_thread_exit(void *p)
{
  struct api_ring *r = p;
  struct thread_state *ts = thread_state_get();

  /* A CUDA call from a later destructor must not write into a ring that is being recycled. */
  if (ts->capture_ring == r)
    ts->capture_ring = NULL;
  atomic_store_explicit(&r->exited, 1, memory_order_release);
}

static struct api_ring *ring_claim(uint32_t tid)
{
  struct api_ring *r;
  unsigned waiting = 0; /* rings of ended threads the worker has not drained yet */

  /* Without the key no ring would ever be recycled: one per thread ever seen would leak. */
  if (!ring_key_ok)
    return NULL;
  pthread_mutex_lock(&rings_lock);
  for (r = atomic_load_explicit(&rings, memory_order_acquire); r; r = r->next) {
    if (atomic_load_explicit(&r->free, memory_order_acquire))
      break;
    waiting += atomic_load_explicit(&r->exited, memory_order_relaxed) != 0;
  }
  /* Once per thread, and only while a capture records: the one allocation on this path. */
  if (!r && waiting < RING_EXITED_MAX) {
    r = calloc(1, sizeof(*r));
    if (r) {
      r->next = atomic_load_explicit(&rings, memory_order_relaxed);
      atomic_store_explicit(&rings, r, memory_order_release);
      atomic_fetch_add_explicit(&rings_allocated, 1, memory_order_relaxed);
    }
  }
  if (r) {
    r->tid = tid;
    r->named_seq = 0; /* free: the worker no longer reads it */
    if (prctl(PR_GET_NAME, r->comm) != 0)
      r->comm[0] = '\0';
    atomic_store_explicit(&r->exited, 0, memory_order_relaxed);
    atomic_store_explicit(&r->free, 0, memory_order_release);
  }
  pthread_mutex_unlock(&rings_lock);
  /* After the unlock: the worker's drain does not take rings_lock, and worker_wake's mutex is
   * never held across a CUPTI call, so waking from this callback cannot deadlock. */
  if (waiting >= RING_EXITED_WAKE)
    worker_wake();
  if (r && ring_key_ok)
    pthread_setspecific(ring_key, r);
  return r;
}

/* The thread's ring slot for one more record, claiming a ring on its first use; NULL when
 * the record is dropped (and counted). Publish with ring_publish. */
static struct api_rec *ring_slot(struct thread_state *ts, uint32_t *head)
{
  struct api_ring *r = ts->capture_ring;
  uint32_t h, t;

  if (!r) {
    r = ring_claim(ts->tid);
    if (!r) {
      atomic_fetch_add_explicit(&rings_failed, 1, memory_order_relaxed);
      return NULL;
    }
    ts->capture_ring = r;
  }
  h = atomic_load_explicit(&r->head, memory_order_relaxed);
  t = atomic_load_explicit(&r->tail, memory_order_acquire);
  if (h - t >= RING_SIZE) {
    atomic_fetch_add_explicit(&r->dropped, 1, memory_order_relaxed);
    return NULL;
  }
  *head = h;
  return &r->recs[h & RING_MASK];
}

static void ring_publish(struct thread_state *ts, uint32_t head)
{
  struct api_ring *r = ts->capture_ring;

  atomic_store_explicit(&r->head, head + 1, memory_order_release);
}

void capture_api_exit(struct thread_state *ts, uint32_t corr_id, const char *function_name,
                      int flow, uint64_t exit_ns)
{
  struct thread_call *top = thread_top_call(ts);
  struct api_rec *rec;
  uint32_t h;

  /* The ENTER was seen (not a call that was open when callbacks were switched on). */
  if (!top || top->corr_id != corr_id || !top->enter_ns || !function_name)
    return;
  rec = ring_slot(ts, &h);
  if (!rec)
    return;
  rec->name = function_name;
  rec->enter_ns = top->enter_ns;
  rec->exit_ns = exit_ns;
  rec->corr_id = corr_id;
  rec->flow = (uint32_t)flow;
  ring_publish(ts, h);
}

atomic_int capture_nvtx_on;

/* NVTX records share the API ring (their order against the thread's API calls is kept):
 * `flow` holds the kind (>= CAPTURE_NVTX_RANGE, API calls have 0 or 1), corr_id the domain
 * index in its low 8 bits and, for start/end ranges, the starting thread above them. */
#define NVTX_DOMAIN_BITS 8u

void capture_nvtx(uint32_t kind, const char *name, uint32_t domain, uint64_t start_ns,
                  uint64_t end_ns, uint32_t start_tid)
{
  struct thread_state *ts = thread_state_get();
  struct api_rec *rec;
  uint32_t h;

  rec = ring_slot(ts, &h);
  if (!rec)
    return;
  rec->name = name;
  rec->enter_ns = start_ns;
  rec->exit_ns = end_ns;
  rec->corr_id = (domain & ((1u << NVTX_DOMAIN_BITS) - 1)) | start_tid << NVTX_DOMAIN_BITS;
  rec->flow = kind;
  ring_publish(ts, h);
}

/* ---- the capture ---- */

enum phase {
  PHASE_IDLE = 0,
  PHASE_RUNNING,
  PHASE_ENDING, /* end decided; CUPTI flushed, the file closes once the rest is in (end_settled) */
};

#define PENDING_SIZE 65536u /* launches/copies waiting for their GPU record (flows) */
#define PENDING_MASK (PENDING_SIZE - 1)
#define FLOW_WAIT_NS (10ull * 1000000000ull) /* a launch's GPU record arrives within this */
#define MAX_DEVICES 64
/* On demand: allocations made during a capture that it follows to their free (in-use). */
#define LIVE_MAX (1u << 20)
/*
 * The end's second step (end_settled): how long one tick waits for a CUPTI thread that is
 * inside the completion callback, and how long the ticks after the second flush may keep
 * finding buffers queued before the file is closed regardless (a process whose CUPTI keeps
 * delivering in continuous mode must still get its file).
 */
#define SETTLE_WAIT_MS 200u
#define SETTLE_MAX_NS (2ull * 1000000000ull)

/*
 * The default format follows from the expected size (formats.md 3.6: the UI parses JSON in
 * 4 GB of WebAssembly memory; a few hundred MB of JSON is the practical ceiling, 900 MB
 * crashed it). Bytes per kernel of uncompressed JSON as the agent writes them, with demangled
 * PyTorch- and CUTLASS-like names of 140 characters on average (tests/demangle/bench_names.c,
 * docs/TRACES.md "Kernel names"): a kernel alone, and a kernel with its launch slice and flow.
 * A .json.gz is parsed at its uncompressed size, so it counts the same.
 */
#define AUTO_JSON_LIMIT (256ull << 20)
#define AUTO_JSON_BYTES_GPU_ONLY 314u
#define AUTO_JSON_BYTES_WITH_API 562u
#define RATE_PERIOD_NS (10ull * 1000000000ull) /* continuous mode: the rate of the last 10 s */

struct pending {
  struct api_rec rec;
  uint32_t tid; /* 0: empty slot */
};

/* A GPU record that arrived before its call returned (a synchronous copy delivered by a flush
 * in between): held until the call is drained. */
#define GPU_WAIT_SIZE 1024u
struct gpu_wait {
  struct trace_gpu_slice s;
  uint32_t flow_corr; /* 0: empty slot */
  uint64_t since_ns;
};

static struct {
  pthread_mutex_t lock;
  pthread_cond_t done;
  const struct config *cfg;
  struct alloc_map *allocs;
  int ready;      /* capture_init succeeded */
  int format_set; /* GPUPROF_TRACE_FORMAT was given: no size-based choice */
  /* Guarded by lock. */
  enum phase phase;
  int stop_requested;
  int switching; /* capture_start is between opening the file and publishing it */
  int shutdown;
  int refusing; /* the agent is exiting: no new capture, stop() waits no more */
  /* A fork child (set without the lock, single-threaded there): it has no capture, and the
   * lock may have been held by a parent thread at the fork. */
  int forked;
  uint64_t next_id;
  struct capture_status st;
  /* Set by capture_start under lock, then read-only until the capture ends. */
  struct trace_writer *writer;
  uint64_t start_ns, deadline_ns;
  int gpu_only;
  const char *trigger;
  char path[CONFIG_PATH_MAX];
  char stem[CONFIG_PATH_MAX];  /* path without its suffix: the profiles' name stem */
  struct files_stem stem_lock; /* held from the file's creation to the capture's end */
  uint64_t mem_base[MAX_DEVICES];
  uint64_t dropped_at_start, zero_ts_at_start;
  uint64_t duration_ns; /* as planned (the profiles' window) */
  /* GPU work records per second, as last measured (0: unknown): the automatic format. */
  _Atomic uint64_t gpu_rate;
  /* Published writer: the worker's event path loads it without the lock. */
  _Atomic(struct trace_writer *) live;
  /* deadline_ns as last set (start, stop, exit): the worker leaves out what begins after it
   * at once, not only from the tick that notices the end (up to a flush interval later). */
  _Atomic uint64_t end_pub;
} cap = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .done = PTHREAD_COND_INITIALIZER,
    .stem_lock = {.fd = -1},
};

/* Worker-thread-only state of the capture being written. */
static struct {
  struct trace_writer *w;    /* adopted cap.live */
  uint64_t start_ns, end_ns; /* window; end_ns UINT64_MAX while running */
  uint64_t planned_end_ns;   /* start + duration: later work is past the capture's profiles */
  int flows;
  int cap_hit, error;
  int flushed;           /* ENDING: 1 after the first flush, 2 the second (end_settled) */
  uint64_t settle_until; /* CLOCK_MONOTONIC: end_settled closes the file by then */
  uint64_t ring_dropped;
  uint64_t events_since_drain;
  int64_t mem[MAX_DEVICES];
  struct pending *pending;
  struct gpu_wait *gpu_wait;
  uint32_t seq;                    /* this capture's number (api_ring.named_seq), from 1 */
  char dev_names[MAX_DEVICES][64]; /* kept across captures: DEVICE records come once */
  /* The pprof of the capture window (NULL: none) and the files it wrote. */
  struct profiles *prof;
  struct alloc_map *live; /* on demand: this capture's allocations, to its end */
  int gpu_only;
  size_t n_prof_files;
  char prof_files[PROFILES_KIND_COUNT][CONFIG_PATH_MAX];
  uint64_t capture_gpu; /* GPU work records in this capture's window */
  /* Every GPU work record seen, and the rate period (continuous mode). */
  uint64_t seen_gpu, rate_seen_at, rate_since;
  /* Kernel slice names, demangled (kernel_name). Kept across captures and freed only by
   * capture_shutdown once the worker is stopped: writers key their name tables by these
   * pointers, and a gpu_wait slice may hold one until the file is closed. */
  struct demangle_cache *names;
} wk;

_Static_assert(CAPTURE_MAX_FILES >= 1 + PROFILES_KIND_COUNT, "a capture lists all its files");

/* The window's end as known now: a stop or the planned deadline, before the worker's tick
 * has noticed it (wk.end_ns). Worker thread. */
static uint64_t window_end(void)
{
  uint64_t d = atomic_load_explicit(&cap.end_pub, memory_order_relaxed);

  return d < wk.end_ns ? d : wk.end_ns;
}

/* Orders on-demand enabling (capture_start) before disabling (the worker's end of it). */
static pthread_mutex_t switch_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *trigger_name(const char *t)
{
  return t && *t ? t : "control";
}

/* /proc/self/cmdline with spaces between the arguments. */
static void read_cmdline(char *buf, size_t len)
{
  ssize_t n = -1;
  int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);

  buf[0] = '\0';
  if (fd >= 0) {
    n = read(fd, buf, len - 1);
    close(fd);
  }
  if (n <= 0)
    return;
  buf[n] = '\0';
  for (ssize_t i = 0; i < n - 1; i++)
    if (buf[i] == '\0')
      buf[i] = ' ';
}

static enum trace_format to_trace_format(int f)
{
  switch (f) {
  case CONFIG_TRACE_JSON:
    return TRACE_FORMAT_JSON;
  case CONFIG_TRACE_PERFETTO:
    return TRACE_FORMAT_PERFETTO;
  default:
    return TRACE_FORMAT_JSON_GZ;
  }
}

/* Ends the claim on the capture's stem; unlink_trace: first removes the trace file (a start
 * that failed after creating it). */
static void release_stem(int unlink_trace)
{
  if (unlink_trace && cap.stem_lock.fd >= 0 && cap.path[0])
    unlink(cap.path);
  files_stem_release(&cap.stem_lock);
}

/*
 * Creates the trace file, empty: gpuprof-<host>-<pid>-<UTC time>-capture<suffix>, or with
 * "-<id>" (then "-<id>.<k>") before the suffix when that stem is taken: by a capture of this
 * process in the same second, or by an agent with the same host name and pid writing into the
 * same directory (containers of a pod, each its own pid namespace, given one --output). The
 * stem stays locked until the capture ends, so its profiles (<stem>-gpu_time.pb.gz, ...) are
 * ours alone too, and no existing file is truncated or replaced. Written under its final
 * name, not a temporary one: a capture killed with its process must stay where users and
 * `gpuprof list` look.
 */
static int make_path(const char *dir, enum trace_format f, uint64_t id, uint64_t now_ns)
{
  static const enum trace_format formats[] = {TRACE_FORMAT_JSON, TRACE_FORMAT_JSON_GZ,
                                              TRACE_FORMAT_PERFETTO};
  char name[320], stamp[32], base[400], prof[PROFILES_KIND_COUNT][32];
  const char *others[3 + PROFILES_KIND_COUNT + 1];
  size_t n = 0;
  int ret;

  for (size_t i = 0; i < sizeof(formats) / sizeof(formats[0]); i++)
    others[n++] = trace_format_suffix(formats[i]);
  for (int k = 0; k < PROFILES_KIND_COUNT; k++) {
    snprintf(prof[k], sizeof(prof[k]), "-%s.pb.gz", profiles_kind_name(k));
    others[n++] = prof[k];
  }
  others[n] = NULL;
  files_name(name, sizeof(name));
  files_utc_stamp(now_ns, stamp, sizeof(stamp));
  snprintf(base, sizeof(base), "gpuprof-%s-%s-capture", name, stamp);
  ret = files_stem_create(&cap.stem_lock, dir, base, id, trace_format_suffix(f), others, cap.stem,
                          sizeof(cap.stem));
  if (ret)
    return ret;
  if ((size_t)snprintf(cap.path, sizeof(cap.path), "%s%s", cap.stem, trace_format_suffix(f)) >=
      sizeof(cap.path)) {
    cap.path[0] = '\0'; /* not reached: files_stem_create checked stem + suffix fits PATH_MAX */
    release_stem(0);
    return -ENAMETOOLONG;
  }
  return 0;
}

/*
 * The format when none was asked for (no request value, GPUPROF_TRACE_FORMAT unset): json.gz,
 * unless the GPU work rate measured last predicts more uncompressed JSON for this duration
 * than AUTO_JSON_LIMIT; then perfetto, whose in-memory form in the UI is far smaller and
 * whose writer is faster. *expected gets the predicted GPU records (0: no rate known yet).
 */
static enum trace_format auto_format(uint64_t duration_ns, int gpu_only, uint64_t *expected)
{
  uint64_t rate = atomic_load_explicit(&cap.gpu_rate, memory_order_relaxed);
  uint64_t per = gpu_only ? AUTO_JSON_BYTES_GPU_ONLY : AUTO_JSON_BYTES_WITH_API;

  /* In ms first: rate x 24 h in ns would overflow 64 bits. */
  *expected = rate * (duration_ns / 1000000ull) / 1000ull;
  return *expected * per > AUTO_JSON_LIMIT ? TRACE_FORMAT_PERFETTO : TRACE_FORMAT_JSON_GZ;
}

int capture_start(const struct capture_params *p, char *err, size_t err_len)
{
  char cmdline[2048], pname[300], host[256] = "", version[64];
  struct alloc_map_stats *mem = NULL;
  struct worker_stats ws;
  struct trace_meta meta;
  struct trace_writer *w = NULL;
  enum trace_format fmt;
  const char *dir;
  uint64_t id, duration, now, expected = 0;
  int gpu_only, fmt_auto, ret = 0, saved, entered;

  if (err_len)
    err[0] = '\0';
  entered = guard_enter(&saved);
  if (!cap.ready || !agent_is_active()) {
    snprintf(err, err_len, "gpuprof is not active in pid %d", (int)getpid());
    ret = -ENODEV;
    goto out_unguarded;
  }
  if (!p || (p->gpu_only != -1 && p->gpu_only != 0 && p->gpu_only != 1) ||
      (p->format != -1 && (p->format < CONFIG_TRACE_JSON || p->format > CONFIG_TRACE_PERFETTO)) ||
      p->duration_ns > CONFIG_MAX_CAPTURE_NS) {
    snprintf(err, err_len,
             "invalid capture parameters (duration at most 24h, format json, "
             "json.gz or perfetto)");
    ret = -EINVAL;
    goto out_unguarded;
  }
  pthread_mutex_lock(&cap.lock);
  if (cap.phase != PHASE_IDLE || cap.switching || cap.shutdown || cap.refusing) {
    ret = cap.shutdown || cap.refusing ? -ESHUTDOWN : -EBUSY;
    pthread_mutex_unlock(&cap.lock);
    snprintf(err, err_len,
             ret == -EBUSY ? "a capture is already running in pid %d" : "pid %d is exiting",
             (int)getpid());
    goto out_unguarded;
  }
  cap.switching = 1;
  id = ++cap.next_id;
  pthread_mutex_unlock(&cap.lock);

  duration = p->duration_ns ? p->duration_ns : CAPTURE_DEFAULT_DURATION_NS;
  gpu_only = p->gpu_only == -1 ? cap.cfg->gpu_only : p->gpu_only;
  fmt_auto = p->format == -1 && !cap.format_set;
  if (fmt_auto)
    fmt = auto_format(duration, gpu_only, &expected);
  else
    fmt = to_trace_format(p->format == -1 ? (int)cap.cfg->trace_format : p->format);
  dir = p->output_dir[0] ? p->output_dir : cap.cfg->output_dir;
  now = clock_realtime_ns();

  ret = files_mkdir_p(dir, 0755);
  if (ret) {
    snprintf(err, err_len, "cannot create the output directory %s: %s", dir, strerror(-ret));
    goto out;
  }
  cap.path[0] = '\0';
  ret = make_path(dir, fmt, id, now);
  if (ret) {
    if (ret == -ENAMETOOLONG)
      snprintf(err, err_len, "the output directory name is too long: %s", dir);
    else
      snprintf(err, err_len, "cannot create a capture file in %s: %s", dir, strerror(-ret));
    goto out;
  }
  read_cmdline(cmdline, sizeof(cmdline));
  files_hostname(host, sizeof(host));
  snprintf(pname, sizeof(pname), "%s (%d)", program_invocation_short_name, (int)getpid());
  snprintf(version, sizeof(version), "gpuprof %s", GPUPROF_VERSION_STRING);
  memset(&meta, 0, sizeof(meta));
  meta.base_ns = now;
  meta.pid = (uint32_t)getpid();
  meta.process_name = pname;
  meta.command_line = cmdline[0] ? cmdline : NULL;
  meta.hostname = host[0] ? host : NULL;
  meta.agent_version = version;
  meta.size_cap_bytes = cap.cfg->trace_max_size;
  meta.flows = !gpu_only;
  meta.gzip_level = 1;
  w = trace_writer_open(cap.path, fmt, &meta);
  if (!w) {
    ret = -errno;
    snprintf(err, err_len, "cannot create %s: %s", cap.path, strerror(errno));
    goto out;
  }
  trace_writer_meta_string(w, "capture_trigger", trigger_name(p->trigger));
  trace_writer_meta_uint(w, "capture_id", id);
  trace_writer_meta_uint(w, "capture_start_ns", now);
  trace_writer_meta_uint(w, "gpu_only", (uint64_t)gpu_only);
  trace_writer_meta_string(w, "mode", config_mode_name(cap.cfg->mode));
  if (fmt_auto) {
    trace_writer_meta_uint(w, "trace_format_auto", 1);
    trace_writer_meta_uint(w, "expected_gpu_records", expected);
    if (fmt == TRACE_FORMAT_PERFETTO)
      log_info("capture %llu: about %llu GPU records expected in %llu s, more JSON than "
               "ui.perfetto.dev loads well: writing perfetto (GPUPROF_TRACE_FORMAT or --format "
               "chooses)",
               (unsigned long long)id, (unsigned long long)expected,
               (unsigned long long)(duration / 1000000000ull));
  }

  /* The memory counter starts from what the agent knows is in use (nothing in on-demand
   * mode, where allocations are only seen during captures). */
  memset(cap.mem_base, 0, sizeof(cap.mem_base));
  if (cap.cfg->mode == CONFIG_MODE_CONTINUOUS && cap.allocs && (mem = malloc(sizeof(*mem)))) {
    alloc_map_get_stats(cap.allocs, mem);
    for (int d = 0; d < MAX_DEVICES && d < ALLOC_MAX_DEVICES; d++)
      cap.mem_base[d] = mem->dev[d + 1].in_use;
    free(mem);
  }
  worker_get_stats(&ws);

  pthread_mutex_lock(&switch_lock);
  pthread_mutex_lock(&cap.lock);
  /* The exit path began while the file was being opened: nothing would finish it. */
  if (cap.shutdown || cap.refusing) {
    pthread_mutex_unlock(&cap.lock);
    pthread_mutex_unlock(&switch_lock);
    snprintf(err, err_len, "the process is exiting");
    ret = -ESHUTDOWN;
    goto out;
  }
  cap.writer = w;
  cap.start_ns = now;
  cap.deadline_ns = now + duration;
  atomic_store_explicit(&cap.end_pub, cap.deadline_ns, memory_order_relaxed);
  cap.duration_ns = duration;
  cap.gpu_only = gpu_only;
  cap.trigger = trigger_name(p->trigger);
  cap.dropped_at_start = ws.dropped_records;
  cap.zero_ts_at_start = ws.zero_timestamps;
  cap.stop_requested = 0;
  cap.phase = PHASE_RUNNING;
  cap.switching = 0;
  memset(&cap.st, 0, sizeof(cap.st));
  cap.st.state = CAPTURE_RUNNING;
  cap.st.id = id;
  cap.st.gpu_only = gpu_only;
  cap.st.started_ns = now;
  cap.st.ends_ns = cap.deadline_ns;
  atomic_store_explicit(&cap.live, w, memory_order_release);
  if (!gpu_only)
    atomic_store_explicit(&capture_api_on, 1, memory_order_relaxed);
  pthread_mutex_unlock(&cap.lock);

  /* On demand, collection starts now (cupti.md 2.8); continuous mode already collects. */
  if (cap.cfg->mode == CONFIG_MODE_ONDEMAND)
    subscriber_capture_begin(!gpu_only);
  /* NVTX ranges: in full captures only, in both modes (nothing else uses them). The epoch
   * first, so that no range opened in an earlier capture pairs with this one's pops. */
  if (!gpu_only && cap.cfg->nvtx) {
    nvtx_capture_begin((uint32_t)id);
    atomic_store_explicit(&capture_nvtx_on, 1, memory_order_relaxed);
    subscriber_nvtx_events(1);
  }
  pthread_mutex_unlock(&switch_lock);
  log_info("capture %llu started (%s%s, %llu ms, trigger %s): %s", (unsigned long long)id,
           trace_format_suffix(fmt) + 1, gpu_only ? ", GPU only" : "",
           (unsigned long long)(duration / 1000000), trigger_name(p->trigger), cap.path);
  w = NULL;
out:
  if (w)
    trace_writer_close(w);
  if (ret) {
    release_stem(1);
    pthread_mutex_lock(&cap.lock);
    cap.switching = 0;
    cap.st.last_error = ret;
    pthread_mutex_unlock(&cap.lock);
  }
out_unguarded:
  if (entered)
    guard_leave(saved);
  return ret;
}

int capture_stop(void)
{
  return capture_stop_within(UINT64_MAX);
}

int capture_stop_within(uint64_t max_wait_ns)
{
  struct timespec deadline;
  uint64_t id, wait_ns;
  int ret = 0;

  /* The parent's capture is not the child's to stop: no worker there would ever end it. */
  if (cap.forked)
    return -ENOENT;
  pthread_mutex_lock(&cap.lock);
  if (cap.phase == PHASE_IDLE) {
    pthread_mutex_unlock(&cap.lock);
    return -ENOENT;
  }
  id = cap.st.id;
  if (!cap.stop_requested) {
    cap.stop_requested = 1;
    /* The window ends now, not when the worker notices. */
    if (cap.deadline_ns > clock_realtime_ns())
      cap.deadline_ns = clock_realtime_ns();
    cap.st.ends_ns = cap.deadline_ns;
    atomic_store_explicit(&cap.end_pub, cap.deadline_ns, memory_order_relaxed);
  }
  /* The worker ends it within two flush intervals; bounded anyway. */
  wait_ns = 3 * (cap.cfg ? cap.cfg->flush_interval_ns : 500000000ull) + 5000000000ull;
  if (wait_ns > max_wait_ns)
    wait_ns = max_wait_ns;
  /* cap.done waits on CLOCK_MONOTONIC (capture_init): a wall-clock step must not make this
   * wait end at once or last far longer than wait_ns. */
  deadline = clock_ns_to_timespec(clock_monotonic_ns() + wait_ns);
  while (cap.phase != PHASE_IDLE && cap.st.id == id && !cap.shutdown && !cap.refusing &&
         ret != ETIMEDOUT)
    ret = pthread_cond_timedwait(&cap.done, &cap.lock, &deadline);
  pthread_mutex_unlock(&cap.lock);
  return 0;
}

void capture_get_status(struct capture_status *out)
{
  pthread_mutex_lock(&cap.lock);
  *out = cap.st;
  pthread_mutex_unlock(&cap.lock);
}

/* ---- worker side ---- */

static int note_write(int ret)
{
  if (ret == -EFBIG)
    wk.cap_hit = 1;
  else if (ret && ret != -EINVAL && !wk.error)
    wk.error = ret;
  return ret;
}

/* Reads /proc/self/task/<tid>/comm (the thread's current name), else the name it had. */
static void name_thread(struct api_ring *r)
{
  char path[64], name[64];
  uint32_t tid = r->tid;
  const char *comm = r->comm;
  ssize_t n = -1;
  int fd;

  if (r->named_seq == wk.seq)
    return;
  r->named_seq = wk.seq;
  if (tid == (uint32_t)getpid()) {
    note_write(trace_writer_thread_name(wk.w, tid, "main"));
    return;
  }
  snprintf(path, sizeof(path), "/proc/self/task/%u/comm", tid);
  fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    n = read(fd, name, sizeof(name) - 1);
    close(fd);
  }
  if (n > 0) {
    name[n] = '\0';
    name[strcspn(name, "\n")] = '\0';
  } else {
    snprintf(name, sizeof(name), "%s", comm);
  }
  if (name[0])
    note_write(trace_writer_thread_name(wk.w, tid, name));
}

static void write_api(uint32_t tid, const struct api_rec *rec, uint64_t flow)
{
  char name[128];

  aggregate_api_base_name(rec->name, name, sizeof(name));
  note_write(
      trace_writer_api_slice(wk.w, tid, name, rec->enter_ns, rec->exit_ns, rec->corr_id, flow));
}

static void pending_flush_one(struct pending *p)
{
  if (p->tid) {
    write_api(p->tid, &p->rec, 0);
    p->tid = 0;
  }
}

static void gpu_wait_flush_one(struct gpu_wait *g)
{
  if (g->flow_corr) {
    note_write(trace_writer_gpu_slice(wk.w, &g->s));
    g->flow_corr = 0;
  }
}

static void handle_nvtx(uint32_t tid, const struct api_rec *rec)
{
  const char *domain = nvtx_domain_name(rec->corr_id & ((1u << NVTX_DOMAIN_BITS) - 1));

  switch (rec->flow) {
  case CAPTURE_NVTX_RANGE:
    note_write(trace_writer_nvtx_range(wk.w, tid, domain, rec->name, rec->enter_ns, rec->exit_ns));
    break;
  case CAPTURE_NVTX_MARK:
    note_write(trace_writer_nvtx_mark(wk.w, tid, domain, rec->name, rec->enter_ns));
    break;
  case CAPTURE_NVTX_SPAN:
    note_write(trace_writer_nvtx_span(wk.w, domain, rec->name, rec->enter_ns, rec->exit_ns,
                                      rec->corr_id >> NVTX_DOMAIN_BITS, tid));
    break;
  default:
    break;
  }
}

static void handle_api(struct api_ring *r, const struct api_rec *rec)
{
  uint32_t tid = r->tid;
  struct pending *p;
  struct gpu_wait *g;

  /* Calls that returned before this capture (queued at the end of the last one) or that
   * began after its window. */
  if (rec->exit_ns < wk.start_ns || rec->enter_ns >= window_end())
    return;
  name_thread(r);
  if (rec->flow >= CAPTURE_NVTX_RANGE) {
    handle_nvtx(tid, rec);
    return;
  }
  if (!rec->flow || !wk.flows || !wk.pending) {
    write_api(tid, rec, 0);
    return;
  }
  g = wk.gpu_wait ? &wk.gpu_wait[rec->corr_id & (GPU_WAIT_SIZE - 1)] : NULL;
  if (g && g->flow_corr == rec->corr_id) {
    write_api(tid, rec, rec->corr_id);
    g->s.flow_id = rec->corr_id;
    note_write(trace_writer_gpu_slice(wk.w, &g->s));
    g->flow_corr = 0;
    return;
  }
  /* Held until its GPU record arrives, so that the arrow is written only with both ends. */
  p = &wk.pending[rec->corr_id & PENDING_MASK];
  pending_flush_one(p);
  p->rec = *rec;
  p->tid = tid;
}

static void drain_rings(void)
{
  wk.events_since_drain = 0;
  for (struct api_ring *r = atomic_load_explicit(&rings, memory_order_acquire); r; r = r->next) {
    uint32_t t, h;
    int exited;

    if (atomic_load_explicit(&r->free, memory_order_acquire))
      continue;
    /* Read before the head: everything the thread queued before it exited is then seen. */
    exited = atomic_load_explicit(&r->exited, memory_order_acquire);
    t = atomic_load_explicit(&r->tail, memory_order_relaxed);
    h = atomic_load_explicit(&r->head, memory_order_acquire);
    for (; t != h; t++)
      if (wk.w)
        handle_api(r, &r->recs[t & RING_MASK]);
    atomic_store_explicit(&r->tail, t, memory_order_release);
    wk.ring_dropped += atomic_exchange_explicit(&r->dropped, 0, memory_order_relaxed);
    if (exited) {
      atomic_store_explicit(&r->head, 0, memory_order_relaxed);
      atomic_store_explicit(&r->tail, 0, memory_order_relaxed);
      atomic_store_explicit(&r->free, 1, memory_order_release);
    }
  }
}

/*
 * Outside a capture: rings of ended threads that hold nothing become free, so that threads
 * which ended after a capture do not count against the next one's RING_EXITED_MAX. A ring
 * with calls queued waits for the next capture's drain (which knows its window).
 */
static void reclaim_rings(void)
{
  for (struct api_ring *r = atomic_load_explicit(&rings, memory_order_acquire); r; r = r->next) {
    if (atomic_load_explicit(&r->free, memory_order_acquire) ||
        !atomic_load_explicit(&r->exited, memory_order_acquire))
      continue;
    /* Exited first: its owner queues nothing more, so equal indices stay equal. */
    if (atomic_load_explicit(&r->tail, memory_order_relaxed) !=
        atomic_load_explicit(&r->head, memory_order_acquire))
      continue;
    atomic_store_explicit(&r->head, 0, memory_order_relaxed);
    atomic_store_explicit(&r->tail, 0, memory_order_relaxed);
    atomic_store_explicit(&r->free, 1, memory_order_release);
  }
}

static const char *sync_name(uint32_t type)
{
  switch (type) {
  case EVENT_SYNC_EVENT:
    return "cudaEventSynchronize";
  case EVENT_SYNC_STREAM_WAIT_EVENT:
    return "cudaStreamWaitEvent";
  case EVENT_SYNC_STREAM:
    return "cudaStreamSynchronize";
  case EVENT_SYNC_CONTEXT:
    return "cudaDeviceSynchronize";
  default:
    return "synchronize";
  }
}

/* CUpti_ActivityMemoryKind: device, array and managed memory count as the device's. */
static int is_device_memory(uint8_t kind)
{
  return kind == 3 || kind == 4 || kind == 5;
}

/*
 * The name a kernel's slice shows: demangled (the Perfetto UI shows slice names as they are,
 * and Nsight Systems and Kineto show demangled names), once per distinct name, here on the
 * worker. Without the cache, or past its bound, CUPTI's name: valid until cuptiFinalize,
 * which runs after the last capture is closed.
 */
#define KERNEL_NAMES_MAX 65536u
static const char *kernel_name(const char *mangled)
{
  if (!wk.names && !(wk.names = demangle_cache_new(KERNEL_NAMES_MAX)))
    return mangled;
  return demangle_cache_get(wk.names, mangled);
}

static void write_gpu(const struct event *ev, const struct corr_info *api)
{
  struct trace_gpu_slice s;
  uint32_t flow_corr;
  struct pending *p;

  memset(&s, 0, sizeof(s));
  s.start_ns = ev->start_ns;
  s.end_ns = ev->end_ns;
  s.device = ev->device;
  s.stream = ev->stream;
  /* The call the slice is joined to (the user's, cupti/subscriber.c): equal to the record's
   * id unless CUPTI reported the work under a nested driver call, and the id that the API
   * slice and the flow carry in either case. */
  s.corr_id = api && api->corr_id ? api->corr_id : ev->corr_id;
  s.graph_id = ev->graph_id;
  s.graph_node_id = ev->graph_node_id;
  switch (ev->kind) {
  case EVENT_KERNEL:
    s.kind = TRACE_GPU_KERNEL;
    s.name = kernel_name(ev->u.kernel.name);
    memcpy(s.u.kernel.grid, ev->u.kernel.grid, sizeof(s.u.kernel.grid));
    memcpy(s.u.kernel.block, ev->u.kernel.block, sizeof(s.u.kernel.block));
    s.u.kernel.registers_per_thread = ev->u.kernel.registers_per_thread;
    s.u.kernel.static_smem = (uint32_t)ev->u.kernel.static_smem;
    s.u.kernel.dynamic_smem = (uint32_t)ev->u.kernel.dynamic_smem;
    break;
  case EVENT_MEMCPY:
    s.kind = TRACE_GPU_MEMCPY;
    s.u.memcpy.bytes = ev->u.memcpy.bytes;
    s.u.memcpy.copy_kind = ev->u.memcpy.copy_kind;
    s.u.memcpy.src_kind = ev->u.memcpy.src_kind;
    s.u.memcpy.dst_kind = ev->u.memcpy.dst_kind;
    s.u.memcpy.src_device = ev->u.memcpy.src_device;
    s.u.memcpy.dst_device = ev->u.memcpy.dst_device;
    break;
  default:
    s.kind = TRACE_GPU_MEMSET;
    s.u.memset.bytes = ev->u.memset.bytes;
    s.u.memset.value = ev->u.memset.value;
    break;
  }
  /* The call the aggregate joined (for a memcpy the runtime call when there is one). */
  flow_corr = api ? api->corr_id : ev->corr_id;
  if (wk.flows && wk.pending && flow_corr && ev->kind != EVENT_MEMSET) {
    p = &wk.pending[flow_corr & PENDING_MASK];
    if ((!p->tid || p->rec.corr_id != flow_corr) && api && api->exit_ns)
      drain_rings(); /* the call returned: it is queued, just not drained yet */
    if (p->tid && p->rec.corr_id == flow_corr) {
      write_api(p->tid, &p->rec, flow_corr);
      p->tid = 0;
      s.flow_id = flow_corr;
    } else if (api && !api->exit_ns && api->corr_id && wk.gpu_wait) {
      struct gpu_wait *g = &wk.gpu_wait[flow_corr & (GPU_WAIT_SIZE - 1)];
      gpu_wait_flush_one(g);
      g->s = s;
      g->flow_corr = flow_corr;
      g->since_ns = clock_realtime_ns();
      return;
    }
  }
  note_write(trace_writer_gpu_slice(wk.w, &s));
}

/* The NCCL ops the kernel ran (agent/nccl.h): one slice each on its communicator's track. The
 * ops of a grouped kernel follow one another in NCCL's order, each lasting its share of the
 * kernel (gpu_ns, the split the nccl profile uses), so that they tile the kernel exactly. */
static void write_nccl(const struct event *ev)
{
  const struct nccl_op_view *ops;
  unsigned n = nccl_current(ev, &ops);
  uint64_t at = ev->start_ns, kernel_ns = ev->end_ns >= ev->start_ns ? ev->end_ns - at : 0;
  char label[64];

  for (unsigned i = 0; i < n; i++) {
    const struct nccl_comm *c = nccl_comm_get(ops[i].comm);
    struct trace_nccl_slice s = {.start_ns = at,
                                 .end_ns = at + ops[i].gpu_ns,
                                 .device = ev->device,
                                 .comm_hash = c ? c->hash : 0,
                                 .comm_label = label,
                                 .rank = c ? c->rank : 0,
                                 .nranks = c ? c->nranks : 0,
                                 .func = ops[i].func,
                                 .datatype = ops[i].datatype,
                                 .algo = ops[i].algo,
                                 .proto = ops[i].proto,
                                 .count = ops[i].count,
                                 .bytes = ops[i].bytes,
                                 .root = ops[i].root,
                                 .peer = ops[i].peer,
                                 .seq = ops[i].seq,
                                 .nchannels = ops[i].nchannels,
                                 .stream = ev->stream,
                                 .corr_id = ev->corr_id,
                                 .group_ops = n,
                                 .kernel_ns = kernel_ns};
    at = s.end_ns;
    nccl_comm_label(ops[i].comm, label, sizeof(label));
    note_write(trace_writer_nccl_slice(wk.w, &s));
  }
}

/*
 * At the capture's end: the NCCL ops still pending (agent/nccl.h nccl_pending), each on its
 * communicator's track from its API call (or the capture's start) to the capture's end, with
 * its state. A communicator's pending ops run in order, the oldest first and the others queued
 * behind it, so they nest: the oldest outermost, each later one inside the one before, ending
 * 1 ns earlier (distinct ends keep both importers' nesting unambiguous). One that was posted
 * while the communicator's last finished op still ran starts at that op's end (track_fit).
 */
static void write_nccl_pending(uint64_t end_ns)
{
  struct nccl_pending *p;
  int n = nccl_pending_collect(end_ns, &p);
  uint32_t depth[NCCL_MAX_COMMS];
  char label[64];

  if (n < 0)
    log_warn("out of memory listing the pending NCCL operations; the trace %s does not show "
             "them",
             cap.path);
  if (n <= 0)
    return;
  memset(depth, 0, sizeof(depth));
  for (int i = 0; i < n; i++) {
    const struct nccl_op_view *v = &p[i].v;
    const struct nccl_comm *c = nccl_comm_get(v->comm);
    uint32_t k = v->comm < NCCL_MAX_COMMS ? depth[v->comm]++ : 0;
    struct trace_nccl_slice s = {.start_ns =
                                     v->api_start_ns > wk.start_ns ? v->api_start_ns : wk.start_ns,
                                 .end_ns = end_ns > k ? end_ns - k : end_ns,
                                 .device = p[i].device,
                                 .comm_hash = c ? c->hash : 0,
                                 .comm_label = label,
                                 .rank = c ? c->rank : 0,
                                 .nranks = c ? c->nranks : 0,
                                 .func = v->func,
                                 .datatype = v->datatype,
                                 .algo = v->algo,
                                 .proto = v->proto,
                                 .count = v->count,
                                 .bytes = v->bytes,
                                 .root = v->root,
                                 .peer = v->peer,
                                 .seq = v->seq,
                                 .nchannels = v->nchannels,
                                 .stream = UINT32_MAX,
                                 .corr_id = p[i].corr,
                                 .state = p[i].launched ? "launched, not finished" : "not launched",
                                 .posted_ns = v->api_start_ns};
    if (s.end_ns < s.start_ns)
      s.end_ns = s.start_ns;
    nccl_comm_label(v->comm, label, sizeof(label));
    note_write(trace_writer_nccl_slice(wk.w, &s));
  }
  free(p);
}

static void write_memory(const struct event *ev)
{
  uint32_t d = ev->device;

  if (d >= MAX_DEVICES || !is_device_memory(ev->u.memory.memory_kind) ||
      ev->start_ns < wk.start_ns || ev->start_ns >= window_end())
    return;
  if (ev->u.memory.op == EVENT_MEMORY_ALLOCATION)
    wk.mem[d] += (int64_t)ev->u.memory.bytes;
  else if (ev->u.memory.op == EVENT_MEMORY_RELEASE)
    wk.mem[d] -= (int64_t)ev->u.memory.bytes;
  else
    return;
  /* Frees of memory allocated before an on-demand capture: the counter cannot go below 0. */
  if (wk.mem[d] < 0)
    wk.mem[d] = 0;
  note_write(trace_writer_memory(wk.w, d, ev->start_ns, (uint64_t)wk.mem[d]));
}

/* ---- the pprof of the capture window ---- */

static void profile_written(void *arg, int kind, const char *path)
{
  (void)arg;
  (void)kind;
  if (wk.n_prof_files < PROFILES_KIND_COUNT)
    snprintf(wk.prof_files[wk.n_prof_files++], sizeof(wk.prof_files[0]), "%s", path);
}

/*
 * A second profiles instance, owned by the capture: one window from the capture's start for
 * its planned duration, files next to the trace. It gets no alloc_map: alloc_map_window's
 * counters belong to the continuous windows, so the capture accounts memory itself.
 */
static void profile_open(uint64_t start_ns, uint64_t duration_ns, const char *stem)
{
  char dir[CONFIG_PATH_MAX];
  const char *slash = strrchr(stem, '/');
  struct profiles_options o = {
      .output_dir = dir,
      .window_ns = duration_ns,
      .write_files = 1,
      .stacks = wk.gpu_only ? NULL : hoststack_table(),
      .sample_every = hoststack_sample_every(),
      .pid = (int)getpid(),
      .origin_ns = start_ns,
      .file_stem = stem,
      .file_written = profile_written,
  };

  /* The trace's directory (the request's --output, or GPUPROF_OUTPUT_DIR). */
  if (slash)
    snprintf(dir, sizeof(dir), "%.*s", slash == stem ? 1 : (int)(slash - stem), stem);
  else
    snprintf(dir, sizeof(dir), ".");
  wk.n_prof_files = 0;
  wk.prof = profiles_new(&o, start_ns);
  /* On demand the shared map misses every free between captures (and GPU-only captures
   * update it not at all): in-use at the end is what this capture saw allocated and not
   * freed. */
  if (wk.prof && cap.cfg->mode == CONFIG_MODE_ONDEMAND)
    wk.live = alloc_map_new(LIVE_MAX);
  if (!wk.prof || (cap.cfg->mode == CONFIG_MODE_ONDEMAND && !wk.live))
    log_warn("out of memory for the profiles of a capture; it writes the trace only");
}

/* CUpti_ActivityMemoryKind -> the allocation kind and the device it is accounted to; -1:
 * not an allocation the profiles count (pageable, static). */
static int memory_alloc_kind(const struct event *ev, int32_t *device)
{
  *device = (int32_t)ev->device;
  switch (ev->u.memory.memory_kind) {
  case 2:
    *device = ALLOC_DEVICE_HOST;
    return ALLOC_KIND_PINNED;
  case 3:
    return ev->flags & EVENT_F_ASYNC ? ALLOC_KIND_ASYNC : ALLOC_KIND_DEVICE;
  case 4:
    return ALLOC_KIND_DEVICE;
  case 5:
    return ALLOC_KIND_MANAGED;
  default:
    return -1;
  }
}

/* alloc_* from the allocation records of the window, by the joined API call's stack. */
static void profile_memory(const struct event *ev, const struct corr_info *api)
{
  struct profiles_memory m = {0};
  int kind = memory_alloc_kind(ev, &m.device);

  if (kind < 0)
    return;
  if (ev->u.memory.op == EVENT_MEMORY_ALLOCATION) {
    m.api = api ? api->api_name : NULL;
    m.stack_id = api ? api->stack_id : STACK_ID_NONE;
    m.kind = (uint8_t)kind;
    m.alloc_objects = 1;
    m.alloc_bytes = (int64_t)ev->u.memory.bytes;
    profiles_memory_add(wk.prof, ev->start_ns, &m);
    if (wk.live) {
      struct alloc_info info = {.size = ev->u.memory.bytes,
                                .device = m.device,
                                .kind = m.kind,
                                .corr_id = ev->corr_id,
                                .api = m.api,
                                .stack_id = m.stack_id};
      alloc_map_insert(wk.live, ALLOC_SPACE_VA, ev->u.memory.address, &info);
    }
  } else if (ev->u.memory.op == EVENT_MEMORY_RELEASE && wk.live) {
    alloc_map_remove(wk.live, ALLOC_SPACE_VA, ev->u.memory.address, NULL);
  }
}

/* The GPU work and allocations that start inside the window (the trace also shows slices that
 * only overlap it). */
static void profile_event(const struct event *ev, const struct corr_info *api)
{
  /* Work after the end (a stop, or the planned end: window_end) is not the window's. */
  if (ev->flags & EVENT_F_NO_TIMING || ev->start_ns < wk.start_ns ||
      ev->start_ns >= wk.planned_end_ns || ev->start_ns >= window_end())
    return;
  if (event_is_gpu_work(ev))
    wk.capture_gpu++;
  if (!wk.prof)
    return;
  /* GPU-only: device activity alone, so leaf-only samples, each record counted once. */
  if (wk.gpu_only)
    api = NULL;
  if (event_is_gpu_work(ev)) {
    profiles_event(wk.prof, ev, api);
  } else if (ev->kind == EVENT_MEMORY) {
    profile_memory(ev, api);
  }
}

static void live_to_profile(const struct alloc_info *info, void *arg)
{
  struct profiles_memory m = {.api = wk.gpu_only ? NULL : info->api,
                              .stack_id = wk.gpu_only ? STACK_ID_NONE : info->stack_id,
                              .device = info->device,
                              .kind = info->kind,
                              .inuse_objects = 1,
                              .inuse_bytes = (int64_t)info->size};

  (void)arg;
  profiles_memory_add(wk.prof, 0, &m);
}

/* Adds in-use at the end and writes the profiles (their paths land in wk.prof_files). */
static void profile_finish(uint64_t end_ns)
{
  if (!wk.prof)
    return;
  /* Continuous mode: every live allocation the agent knows, as at the end of the capture
   * (the map as of now, at most a flush interval later). */
  if (wk.live)
    alloc_map_for_each(wk.live, live_to_profile, NULL);
  else if (cap.allocs)
    alloc_map_for_each(cap.allocs, live_to_profile, NULL);
  profiles_finish(wk.prof, end_ns);
  profiles_free(wk.prof);
  wk.prof = NULL;
  alloc_map_free(wk.live);
  wk.live = NULL;
}

/* GPU work records per second, for auto_format: continuous mode measures every period. */
static void rate_tick(uint64_t now_ns)
{
  if (cap.cfg->mode != CONFIG_MODE_CONTINUOUS)
    return;
  if (!wk.rate_since || now_ns < wk.rate_since) {
    wk.rate_since = now_ns;
    wk.rate_seen_at = wk.seen_gpu;
    return;
  }
  if (now_ns - wk.rate_since < RATE_PERIOD_NS)
    return;
  atomic_store_explicit(&cap.gpu_rate,
                        (wk.seen_gpu - wk.rate_seen_at) * 1000000000ull / (now_ns - wk.rate_since),
                        memory_order_relaxed);
  wk.rate_since = now_ns;
  wk.rate_seen_at = wk.seen_gpu;
}

/* First sight of a published writer on the worker: set up what only the worker touches. */
static void adopt(struct trace_writer *w)
{
  uint64_t duration;

  pthread_mutex_lock(&cap.lock);
  wk.start_ns = cap.start_ns;
  wk.flows = !cap.gpu_only;
  wk.gpu_only = cap.gpu_only;
  wk.capture_gpu = 0;
  duration = cap.duration_ns;
  for (int d = 0; d < MAX_DEVICES; d++)
    wk.mem[d] = (int64_t)cap.mem_base[d];
  pthread_mutex_unlock(&cap.lock);
  profile_open(wk.start_ns, duration, cap.stem);
  wk.w = w;
  wk.end_ns = UINT64_MAX;
  wk.planned_end_ns = wk.start_ns + duration;
  wk.cap_hit = wk.error = wk.flushed = 0;
  wk.ring_dropped = 0;
  if (!++wk.seq)
    wk.seq = 1; /* 0 is "named in no capture" */
  wk.pending = wk.flows ? calloc(PENDING_SIZE, sizeof(*wk.pending)) : NULL;
  wk.gpu_wait = wk.flows ? calloc(GPU_WAIT_SIZE, sizeof(*wk.gpu_wait)) : NULL;
  for (uint32_t d = 0; d < MAX_DEVICES; d++) {
    if (wk.dev_names[d][0])
      note_write(trace_writer_device(w, d, wk.dev_names[d]));
    if (wk.mem[d] > 0)
      note_write(trace_writer_memory(w, d, wk.start_ns, (uint64_t)wk.mem[d]));
  }
}

static void on_event(void *arg, const struct event *ev, const struct corr_info *api)
{
  struct trace_writer *w = atomic_load_explicit(&cap.live, memory_order_acquire);

  (void)arg;
  if (event_is_gpu_work(ev))
    wk.seen_gpu++;
  /* Device names arrive once (at init, or when enabled): kept whether or not a capture runs. */
  if (ev->kind == EVENT_DEVICE && ev->device < MAX_DEVICES &&
      strncmp(wk.dev_names[ev->device], ev->u.device.name, sizeof(wk.dev_names[0]) - 1)) {
    snprintf(wk.dev_names[ev->device], sizeof(wk.dev_names[0]), "%s", ev->u.device.name);
    if (wk.w)
      note_write(trace_writer_device(wk.w, ev->device, wk.dev_names[ev->device]));
  }
  if (!w)
    return;
  if (w != wk.w)
    adopt(w);
  if (++wk.events_since_drain >= RING_SIZE / 2)
    drain_rings();
  if (ev->start_ns >= window_end())
    return;
  profile_event(ev, api);
  if (event_is_gpu_work(ev)) {
    if (ev->flags & EVENT_F_NO_TIMING || ev->end_ns < wk.start_ns)
      return;
    write_gpu(ev, api);
    if (ev->kind == EVENT_KERNEL)
      write_nccl(ev);
  } else if (ev->kind == EVENT_SYNC) {
    int32_t dev = ctx_map_get(ev->context);
    if (ev->flags & EVENT_F_NO_TIMING || ev->end_ns < wk.start_ns)
      return;
    note_write(trace_writer_sync(wk.w, dev >= 0 ? (uint32_t)dev : 0,
                                 ev->u.sync.type == EVENT_SYNC_CONTEXT ? UINT32_MAX : ev->stream,
                                 sync_name(ev->u.sync.type), ev->start_ns, ev->end_ns,
                                 ev->corr_id));
  } else if (ev->kind == EVENT_MEMORY) {
    write_memory(ev);
  }
}

/* Writes the end metadata and closes the file; updates the status. Worker (or exit) thread. */
static void finish(void)
{
  struct trace_stats ts;
  struct worker_stats ws;
  uint64_t dropped, ring_dropped, end_ns, id;
  char path[CONFIG_PATH_MAX];
  struct stat st;
  uint64_t bytes;
  int ret, cap_hit, error;

  drain_rings();
  if (wk.pending) {
    for (uint32_t i = 0; i < PENDING_SIZE; i++)
      pending_flush_one(&wk.pending[i]);
  }
  if (wk.gpu_wait) {
    for (uint32_t i = 0; i < GPU_WAIT_SIZE; i++)
      gpu_wait_flush_one(&wk.gpu_wait[i]);
  }
  worker_get_stats(&ws);
  pthread_mutex_lock(&cap.lock);
  end_ns = cap.deadline_ns;
  dropped = ws.dropped_records - cap.dropped_at_start;
  pthread_mutex_unlock(&cap.lock);
  write_nccl_pending(end_ns);
  ring_dropped = wk.ring_dropped + atomic_exchange(&rings_failed, 0);
  trace_writer_meta_uint(wk.w, "capture_end_ns", end_ns);
  trace_writer_meta_uint(wk.w, "dropped_records", dropped);
  trace_writer_meta_uint(wk.w, "dropped_api_calls", ring_dropped);
  trace_writer_meta_uint(wk.w, "api_rings",
                         atomic_load_explicit(&rings_allocated, memory_order_relaxed));
  trace_writer_meta_uint(wk.w, "zero_timestamp_records", ws.zero_timestamps - cap.zero_ts_at_start);
  if (!wk.gpu_only && cap.cfg->nvtx) {
    struct nvtx_stats nv;
    nvtx_get_stats(&nv);
    trace_writer_meta_uint(wk.w, "nvtx_unmatched", nv.unmatched);
    trace_writer_meta_uint(wk.w, "nvtx_crossed", nv.crossed);
    trace_writer_meta_uint(wk.w, "nvtx_dropped", nv.dropped);
  }
  trace_writer_stats(wk.w, &ts);
  cap_hit = ts.stopped;
  error = wk.error;
  ret = trace_writer_close(wk.w);
  if (ret && !error)
    error = ret;
  /* The writer's count misses its last buffer and the gzip trailer, written by the close:
   * what is reported is what is on disk. */
  bytes = stat(cap.path, &st) == 0 ? (uint64_t)st.st_size : ts.bytes;
  profile_finish(end_ns);
  release_stem(0);
  /* On demand the rate is measured only while a capture collects: this one's. */
  if (cap.cfg->mode == CONFIG_MODE_ONDEMAND && end_ns >= wk.start_ns + 1000000ull)
    atomic_store_explicit(&cap.gpu_rate,
                          wk.capture_gpu * 1000ull / ((end_ns - wk.start_ns) / 1000000ull),
                          memory_order_relaxed);

  free(wk.pending);
  free(wk.gpu_wait);
  wk.gpu_wait = NULL;
  wk.pending = NULL;
  wk.w = NULL;

  pthread_mutex_lock(&cap.lock);
  atomic_store_explicit(&cap.live, NULL, memory_order_release);
  cap.writer = NULL;
  cap.phase = PHASE_IDLE;
  cap.st.state = CAPTURE_IDLE;
  cap.st.ends_ns = end_ns;
  cap.st.events = ts.events;
  cap.st.bytes = bytes;
  cap.st.dropped = dropped + ring_dropped + ts.discarded;
  cap.st.truncated = cap_hit;
  cap.st.last_error = error;
  cap.st.n_files = 1;
  snprintf(cap.st.files[0], sizeof(cap.st.files[0]), "%s", cap.path);
  for (size_t i = 0; i < wk.n_prof_files && cap.st.n_files < CAPTURE_MAX_FILES; i++)
    snprintf(cap.st.files[cap.st.n_files++], sizeof(cap.st.files[0]), "%s", wk.prof_files[i]);
  /* Copies for the messages: a new capture may start (and reuse cap.path) once unlocked. */
  id = cap.st.id;
  snprintf(path, sizeof(path), "%s", cap.path);
  pthread_cond_broadcast(&cap.done);
  pthread_mutex_unlock(&cap.lock);

  if (error)
    log_warn("capture %llu ended with an error writing %s: %s; the file may be incomplete",
             (unsigned long long)id, path, strerror(-error));
  else if (cap_hit)
    log_warn("capture %llu reached GPUPROF_TRACE_MAX_SIZE=%llu bytes: later events were not "
             "written (%llu discarded); %s is complete up to there",
             (unsigned long long)id, (unsigned long long)cap.cfg->trace_max_size,
             (unsigned long long)ts.discarded, path);
  else
    log_info("capture %llu finished: %llu events, %llu bytes in %s", (unsigned long long)id,
             (unsigned long long)ts.events, (unsigned long long)bytes, path);
}

/*
 * The ticks after the end's first flush: 1 once the file may be closed. FlushAll returning
 * does not mean CUPTI's own delivery thread has handed over everything it had (cupti.md 2.5:
 * it delivers too, the split is not documented): a buffer it took before the first flush can
 * arrive after it. So a second flush here (CUPTI's thread has had a tick to finish; a flush
 * that finds it delivering may also wait for it), then a bounded wait for any thread still
 * inside the completion callback, and the file closes only when nothing is left queued: the
 * worker decodes what is queued right after this tick and ticks again. What arrives later
 * still is missed (docs/TRACES.md, Known limits). Records that begin after the end are left
 * out on arrival (window_end), so whatever the second flush adds is the window's.
 */
static int end_settled(void)
{
  if (wk.flushed == 1) {
    /* Not while the exit path pauses flushing (its forced flush delivers everything), nor
     * after a flush that never returned (worker_flush_begin refuses both). */
    if (worker_flush_begin()) {
      cupti_fn.ActivityFlushAll(0);
      worker_flush_end();
    }
    wk.flushed = 2;
    wk.settle_until = clock_monotonic_ns() + SETTLE_MAX_NS;
  }
  return worker_settle(SETTLE_WAIT_MS) == 0 || clock_monotonic_ns() >= wk.settle_until;
}

static void on_tick(void *arg, uint64_t now_ns)
{
  struct trace_writer *w = atomic_load_explicit(&cap.live, memory_order_acquire);
  struct trace_stats ts;
  int begin_end = 0, do_finish = 0, nvtx_was_on = 0;

  (void)arg;
  rate_tick(now_ns);
  if (!w) {
    reclaim_rings();
    return;
  }
  if (w != wk.w)
    adopt(w);
  drain_rings();
  /* Launches whose GPU record did not come within FLOW_WAIT_NS: written without an arrow,
   * so that a killed process loses at most that much of its host timeline. */
  if (wk.pending && now_ns > FLOW_WAIT_NS) {
    for (uint32_t i = 0; i < PENDING_SIZE; i++)
      if (wk.pending[i].tid && wk.pending[i].rec.exit_ns < now_ns - FLOW_WAIT_NS)
        pending_flush_one(&wk.pending[i]);
  }
  if (wk.gpu_wait) {
    for (uint32_t i = 0; i < GPU_WAIT_SIZE; i++)
      if (wk.gpu_wait[i].flow_corr && wk.gpu_wait[i].since_ns + FLOW_WAIT_NS < now_ns)
        gpu_wait_flush_one(&wk.gpu_wait[i]);
  }
  trace_writer_stats(wk.w, &ts);

  pthread_mutex_lock(&cap.lock);
  cap.st.events = ts.events;
  cap.st.bytes = ts.bytes;
  if (cap.phase == PHASE_RUNNING &&
      (cap.stop_requested || now_ns >= cap.deadline_ns || wk.cap_hit || wk.error)) {
    /* Not now_ns, read before this tick's work: a stop (or the exit path) that came meanwhile
     * has already set the end to its own, later time, and moving it back would leave out
     * work that ran before the stop. */
    uint64_t t = clock_realtime_ns();
    if (cap.deadline_ns > t)
      cap.deadline_ns = t;
    cap.st.ends_ns = cap.deadline_ns;
    wk.end_ns = cap.deadline_ns;
    atomic_store_explicit(&cap.end_pub, cap.deadline_ns, memory_order_relaxed);
    cap.phase = PHASE_ENDING;
    atomic_store_explicit(&capture_api_on, 0, memory_order_relaxed);
    nvtx_was_on = atomic_exchange_explicit(&capture_nvtx_on, 0, memory_order_relaxed);
    begin_end = 1;
  } else if (cap.phase == PHASE_ENDING && wk.flushed) {
    do_finish = 1;
  }
  pthread_mutex_unlock(&cap.lock);

  if (begin_end) {
    /* Delivers the records completed so far; they are processed before the next tick. Not
     * while the exit path forces its own flush (which then delivers them). */
    if (worker_flush_begin()) {
      cupti_fn.ActivityFlushAll(0);
      worker_flush_end();
    }
    if (cap.cfg->mode == CONFIG_MODE_ONDEMAND || nvtx_was_on) {
      pthread_mutex_lock(&switch_lock);
      if (cap.cfg->mode == CONFIG_MODE_ONDEMAND)
        subscriber_capture_end(); /* no residual overhead once the capture is over */
      if (nvtx_was_on) {
        subscriber_nvtx_events(0);
        nvtx_capture_end();
      }
      pthread_mutex_unlock(&switch_lock);
    }
    wk.flushed = 1;
  }
  if (do_finish && end_settled())
    finish();
}

/* ---- signal trigger ---- */

static int sig_pipe[2] = {-1, -1};
static struct bthread *sig_thread;
static int sig_thread_started;

static void on_capture_signal(int sig)
{
  int saved = errno;
  char c = 's';

  (void)sig;
  /* Async-signal-safe: one write to a non-blocking pipe; a full pipe drops the request. */
  if (write(sig_pipe[1], &c, 1) < 0) {
  }
  errno = saved;
}

static void *signal_main(void *arg)
{
  struct capture_params p;
  struct capture_status st;
  char err[512], c;
  ssize_t n;

  (void)arg;
  guard_hold();
  for (;;) {
    n = read(sig_pipe[0], &c, 1);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0 || c == 'q')
      break;
    /* Toggle: the signal starts a capture, and ends the running one early. */
    capture_get_status(&st);
    if (st.state == CAPTURE_RUNNING) {
      capture_stop();
      continue;
    }
    memset(&p, 0, sizeof(p));
    p.gpu_only = -1;
    p.format = -1;
    p.trigger = "signal";
    if (capture_start(&p, err, sizeof(err)) && err[0])
      log_warn("GPUPROF_CAPTURE_SIGNAL: cannot start a capture: %s", err);
  }
  return NULL;
}

static void signal_trigger_start(int sig)
{
  struct sigaction old, sa;

  if (sigaction(sig, NULL, &old) != 0)
    return;
  /* Never take a signal the application handles (or ignores on purpose). */
  if ((old.sa_flags & SA_SIGINFO) || old.sa_handler != SIG_DFL) {
    log_warn("GPUPROF_CAPTURE_SIGNAL=%d: the application already has a handler for signal %d; "
             "the signal trigger is not installed (use the gpuprof command instead)",
             sig, sig);
    return;
  }
  if (pipe2(sig_pipe, O_CLOEXEC) != 0) {
    log_warn("GPUPROF_CAPTURE_SIGNAL: cannot create a pipe: %s; no signal trigger",
             strerror(errno));
    return;
  }
  fcntl(sig_pipe[1], F_SETFL, O_NONBLOCK);
  if (bthread_start(&sig_thread, "gpuprof-signal", signal_main, NULL) != 0) {
    log_warn("GPUPROF_CAPTURE_SIGNAL: cannot start a thread; no signal trigger");
    close(sig_pipe[0]);
    close(sig_pipe[1]);
    sig_pipe[0] = sig_pipe[1] = -1;
    return;
  }
  sig_thread_started = 1;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_capture_signal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(sig, &sa, NULL);
  log_info("signal %d starts and stops a capture in pid %d", sig, (int)getpid());
}

void capture_forget(void)
{
  struct sigaction cur;
  int sig = cap.cfg ? cap.cfg->capture_signal : 0;

  cap.forked = 1;
  files_stem_forget(&cap.stem_lock);
  /* The child of a fork: the pipe's reader is the parent's signal thread. The child never
   * captures, so the signal gets its default action back (the application had none). */
  if (sig_pipe[1] < 0)
    return;
  if (sig > 0 && sigaction(sig, NULL, &cur) == 0 && !(cur.sa_flags & SA_SIGINFO) &&
      cur.sa_handler == on_capture_signal) {
    cur.sa_handler = SIG_DFL;
    sigaction(sig, &cur, NULL);
  }
  close(sig_pipe[0]);
  close(sig_pipe[1]);
  sig_pipe[0] = sig_pipe[1] = -1;
}

/* ---- wiring ---- */

int capture_init(const struct config *cfg, struct alloc_map *allocs)
{
  struct worker_consumer c = {.event = on_event, .tick = on_tick, .arg = NULL};
  pthread_condattr_t attr;
  int ret;

  /* Before any capture or signal thread exists, so nothing waits on cap.done yet: its
   * timed wait (capture_stop_within) uses a CLOCK_MONOTONIC deadline. */
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&cap.done, &attr);
  pthread_condattr_destroy(&attr);
  cap.cfg = cfg;
  cap.allocs = allocs;
  cap.format_set = cfg->trace_format_set;
  ring_key_ok = pthread_key_create(&ring_key, ring_thread_exit) == 0;
  if (!ring_key_ok)
    log_warn("no thread-specific key left (PTHREAD_KEYS_MAX): captures record GPU work only, "
             "without API calls");
  ret = worker_add_consumer(&c);
  if (ret) {
    log_warn("cannot register the capture consumer: %s; captures are disabled", strerror(-ret));
    return ret;
  }
  cap.ready = 1;
  return 0;
}

void capture_start_configured(void)
{
  struct capture_params p;
  char err[512];

  if (!cap.ready)
    return;
  if (cap.cfg->capture_signal)
    signal_trigger_start(cap.cfg->capture_signal);
  if (cap.cfg->capture_on_start_ns) {
    memset(&p, 0, sizeof(p));
    p.duration_ns = cap.cfg->capture_on_start_ns;
    p.gpu_only = -1;
    p.format = -1;
    p.trigger = "start";
    if (capture_start(&p, err, sizeof(err)))
      log_warn("GPUPROF_CAPTURE_ON_START: %s; no capture at start", err);
  }
}

void capture_refuse(void)
{
  /* Under switch_lock too: a capture_start past its last check finishes enabling on-demand
   * collection first, so the exit path's disabling (after this) is never undone by it. */
  pthread_mutex_lock(&switch_lock);
  pthread_mutex_lock(&cap.lock);
  cap.refusing = 1;
  pthread_cond_broadcast(&cap.done);
  pthread_mutex_unlock(&cap.lock);
  pthread_mutex_unlock(&switch_lock);
}

void capture_shutdown(int worker_stopped)
{
  struct trace_writer *w;
  char c = 'q';

  pthread_mutex_lock(&cap.lock);
  if (cap.shutdown) {
    pthread_mutex_unlock(&cap.lock);
    return;
  }
  cap.shutdown = 1;
  pthread_cond_broadcast(&cap.done);
  atomic_store_explicit(&capture_api_on, 0, memory_order_relaxed);
  atomic_store_explicit(&capture_nvtx_on, 0, memory_order_relaxed);
  if (cap.phase != PHASE_IDLE && cap.deadline_ns > clock_realtime_ns()) {
    cap.deadline_ns = clock_realtime_ns();
    atomic_store_explicit(&cap.end_pub, cap.deadline_ns, memory_order_relaxed);
  }
  pthread_mutex_unlock(&cap.lock);

  if (sig_thread_started) {
    /* Told to quit, it gets 2 s (on the monotonic clock); one that cannot be told is left. */
    uint64_t wait_ns = write(sig_pipe[1], &c, 1) == 1 ? 2000000000ull : 0;

    sig_thread_started = 0;
    bthread_join_within(sig_thread, wait_ns);
    sig_thread = NULL;
  }
  /* A worker that could not be joined may still be writing: leave its file as it is (it
   * stays loadable, like a killed capture's). */
  w = atomic_load_explicit(&cap.live, memory_order_acquire);
  if (!worker_stopped)
    return;
  if (w) {
    if (w != wk.w)
      adopt(w);
    finish();
  }
  /* No worker and no open file: nothing holds a kernel name now. */
  demangle_cache_free(wk.names);
  wk.names = NULL;
}

/* ---- public API (include/gpuprof/gpuprof.h) ---- */

GPUPROF_EXPORT int gpuprof_capture_start(unsigned duration_ms, unsigned flags)
{
  struct capture_params p;
  char err[512];
  int ret;

  if (flags & ~(unsigned)GPUPROF_CAPTURE_GPU_ONLY)
    return -EINVAL;
  /* First, with its acquire load: an application thread may call this while another thread
   * is still inside cuInit's agent_init, and capture_start reads cap.ready (plain, written
   * by capture_init) which only the state word's release-acquire orders. */
  if (!agent_is_active())
    return -ENODEV;
  memset(&p, 0, sizeof(p));
  p.duration_ns = (uint64_t)duration_ms * 1000000ull;
  p.gpu_only = (flags & GPUPROF_CAPTURE_GPU_ONLY) ? 1 : -1;
  p.format = -1;
  p.trigger = "api";
  ret = capture_start(&p, err, sizeof(err));
  if (ret && ret != -EBUSY && ret != -ENODEV)
    log_warn("gpuprof_capture_start: %s", err);
  return ret;
}

GPUPROF_EXPORT int gpuprof_capture_stop(void)
{
  int saved, entered = guard_enter(&saved);
  int ret = capture_stop();

  if (entered)
    guard_leave(saved);
  return ret;
}
