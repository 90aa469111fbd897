/* The agent's lifecycle: the global state word, one-time init, exit and fork handling. */
#include "agent/agent.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/aggregate.h"
#include "agent/alloc_map.h"
#include "agent/capture.h"
#include "agent/control.h"
#include "agent/corr.h"
#include "agent/ctx_map.h"
#include "agent/hoststack.h"
#include "agent/nccl.h"
#include "agent/nvtx.h"
#include "agent/oom.h"
#include "agent/profiles.h"
#include "agent/summary.h"
#include "agent/uploader.h"
#include "agent/util/bthread.h"
#include "agent/util/clock.h"
#include "agent/util/files.h"
#include "agent/util/guard.h"
#include "agent/util/log.h"
#include "agent/worker.h"
#include "cupti/buffers.h"
#include "cupti/loader.h"
#include "cupti/subscriber.h"

/* Exit-path bounds (docs/CONFIGURATION.md "Exit delay" has their sum). */
#define WORKER_PAUSE_TIMEOUT_MS 2000
#define WORKER_STOP_TIMEOUT_MS 5000
#define EXIT_CUPTI_TIMEOUT_MS 2000 /* the forced flush, then cuptiFinalize: each */

_Atomic int agent_state_word = AGENT_UNINIT;

/*
 * Written only inside the one-time init (pthread_once), read-only afterwards. The data
 * structures are never freed: an application thread may still be inside a callback that
 * passed the state check just before exit switched the state, and must find them intact.
 */
static struct config cfg;
static pid_t init_pid;
static char inactive_reason[1024];
static struct corr_table *corr;
static struct alloc_map *allocs;
static struct aggregate *agg;
static struct buffer_pool *pool;

static struct control_server *control; /* NULL: no control socket */

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t shutdown_lock = PTHREAD_MUTEX_INITIALIZER;
static int shutdown_done;

const struct config *agent_config(void)
{
  return &cfg;
}

static void set_state(enum agent_state s)
{
  atomic_store_explicit(&agent_state_word, s, memory_order_release);
}

/* One line on stderr; the same text goes into the summary's inactive_reason. */
static void go_inactive(void)
{
  set_state(AGENT_INACTIVE);
  log_warn("%s", inactive_reason);
}

static void exit_handler(void)
{
  /* A forked child inherits this handler but not the parent's CUPTI session. */
  if (getpid() != init_pid)
    return;
  agent_shutdown();
}

/*
 * Fork policy: the child of a fork is dormant. CUDA cannot be used in a child forked after
 * CUDA initialization, CUPTI's threads and our worker do not exist there, and flushing could
 * hang: the child never captures, never flushes and writes no outputs. A child that execs
 * starts clean and gets its own agent (and its own outputs) through the inherited
 * CUDA_INJECTION64_PATH when it calls cuInit.
 */
static void fork_child(void)
{
  set_state(AGENT_DORMANT);
  worker_forget();
  uploader_forget();
  capture_forget();
  /* The socket is the parent's: the child closes its copies and never removes the file. */
  control_server_forget(control);
}

/* The control socket's view of the agent (agent/control.h): captures and a description. */
static int ctl_capture_start(void *arg, const struct capture_params *p, char *err, size_t len)
{
  (void)arg;
  return capture_start(p, err, len);
}

static int ctl_capture_stop(void *arg)
{
  (void)arg;
  /* Bounded: the client's request has a timeout, and the thread serves the others. */
  return capture_stop_within(CONTROL_STOP_WAIT_MS * 1000000ull);
}

static void ctl_capture_status(void *arg, struct capture_status *out)
{
  (void)arg;
  capture_get_status(out);
}

static void ctl_describe(void *arg, struct control_info *out)
{
  uint64_t seen = 0;
  size_t n = 0;

  (void)arg;
  out->mode = config_mode_name(cfg.mode);
  out->state = agent_is_active() ? "active" : "stopping";
  /* The devices of this process's contexts (the most recent CTX_MAP_SLOTS of them). */
  seen = ctx_map_devices();
  out->gpus[0] = '\0';
  for (int d = 0; d < 64; d++)
    if (seen & (1ull << d))
      n += (size_t)snprintf(out->gpus + n, sizeof(out->gpus) - n, "%s%d", n ? "," : "", d);
}

static const struct control_ops control_ops = {
    .capture_start = ctl_capture_start,
    .capture_stop = ctl_capture_stop,
    .capture_status = ctl_capture_status,
    .describe = ctl_describe,
};

static void init_once_fn(void)
{
  int ret;

  set_state(AGENT_STARTING);
  config_load(&cfg);
  if (cfg.mode == CONFIG_MODE_OFF) {
    log_debug("GPUPROF_MODE=off: the agent stays inactive in pid %d", (int)getpid());
    set_state(AGENT_OFF);
    return;
  }
  init_pid = getpid();
  /* Registered whatever happens next: an inactive agent still writes its summary. */
  if (atexit(exit_handler) != 0)
    log_warn("cannot register the exit handler; no summary will be written for pid %d",
             (int)init_pid);
  pthread_atfork(NULL, NULL, fork_child);
  /* The name of this process's files, unique among the live processes writing there (two
   * containers of a pod often both run pid 1): agent/util/files.h. */
  files_claim_name(cfg.output_dir);

  if (cupti_loader_open(cfg.cupti_path, cfg.cupti_wheels_only, inactive_reason,
                        sizeof(inactive_reason))) {
    go_inactive();
    return;
  }
  log_debug("CUPTI %u loaded from %s", cupti_loader_version(), cupti_loader_path());

  corr = corr_table_new(cfg.corr_table_size);
  allocs = alloc_map_new(0);
  agg = corr ? aggregate_new(corr) : NULL;
  pool = buffer_pool_new(cfg.buffer_size, cfg.buffer_limit);
  if (!corr || !allocs || !agg || !pool) {
    snprintf(
        inactive_reason, sizeof(inactive_reason),
        "out of memory setting up (GPUPROF_BUFFER_LIMIT=%llu bytes, GPUPROF_CORR_TABLE_SIZE=%llu); "
        "gpuprof is inactive in this process",
        (unsigned long long)cfg.buffer_limit, (unsigned long long)cfg.corr_table_size);
    go_inactive();
    return;
  }
  buffers_attach(pool);
  /* Before any callback is enabled; failure only turns stacks off. */
  hoststack_init(&cfg, (const void *)(uintptr_t)cupti_fn.Subscribe_v2);
  /* The NCCL plugin's op pool (cupti/nccl_plugin.c); failure only turns NCCL ops off. */
  nccl_init(0);

  /* Before the worker, which submits finished windows; failure only turns uploads off. */
  if (cfg.mode == CONFIG_MODE_CONTINUOUS)
    uploader_start(&cfg);
  /* pprof windows (continuous mode only): a worker consumer, registered before it starts;
   * failure only turns the profiles off. */
  if (cfg.mode == CONFIG_MODE_CONTINUOUS)
    profiles_start(&cfg, allocs, hoststack_table(), hoststack_sample_every());
  /* Trace captures: a worker consumer too; failure only disables captures. */
  capture_init(&cfg, allocs);
  /* Out-of-memory snapshots: written by the worker; failure only disables them. */
  oom_start(&cfg, allocs, hoststack_table());
  /* The worker first: buffers may complete as soon as kinds are enabled. */
  ret = worker_start(pool, agg, cfg.flush_interval_ns);
  if (ret) {
    uploader_stop(0);
    snprintf(inactive_reason, sizeof(inactive_reason),
             "cannot start the worker thread: %s; gpuprof is inactive in this process",
             strerror(-ret));
    go_inactive();
    return;
  }
  if (subscriber_start(corr, allocs, inactive_reason, sizeof(inactive_reason))) {
    worker_stop(WORKER_STOP_TIMEOUT_MS);
    uploader_stop(0);
    go_inactive();
    return;
  }
  /* Active before enabling: callbacks that fire during enabling are then recorded. */
  set_state(AGENT_ACTIVE);
  /* On demand, API callbacks and trace kinds wait for a capture (agent/capture.c). */
  if (cfg.mode == CONFIG_MODE_ONDEMAND)
    subscriber_enable_ondemand();
  else
    subscriber_enable();
  /* CUPTI takes the NVTX gate's table now if a module was injected before cuInit. */
  nvtx_agent_active();
  capture_start_configured();
  /* Last: a capture the gpuprof command starts finds everything running. Failure only
   * disables the socket. */
  {
    char err[1024];
    control = control_server_start(cfg.run_dir, &control_ops, 0, err, sizeof(err));
    if (!control)
      log_warn("%s", err);
  }
  log_info("capturing in pid %d (mode %s, CUPTI %u from %s)", (int)init_pid,
           config_mode_name(cfg.mode), cupti_loader_version(), cupti_loader_path());
}

void agent_init(void)
{
  pthread_once(&init_once, init_once_fn);
}

/* Set when a CUPTI call of the exit path did not return in time: the summary says so. */
static int exit_cupti_stuck;

enum exit_call { EXIT_CALL_DISABLE = 1, EXIT_CALL_FORCED_FLUSH, EXIT_CALL_FINALIZE };

static const char *const exit_call_names[] = {
    [EXIT_CALL_DISABLE] = "cuptiActivityDisable",
    [EXIT_CALL_FORCED_FLUSH] = "the final cuptiActivityFlushAll",
    [EXIT_CALL_FINALIZE] = "cuptiFinalize",
};

static void *exit_call_main(void *arg)
{
  /* An agent thread: whatever CUPTI calls back on it is not the application's. */
  guard_hold();
  switch ((enum exit_call)(uintptr_t)arg) {
  case EXIT_CALL_DISABLE:
    subscriber_disable_activity();
    break;
  case EXIT_CALL_FORCED_FLUSH:
    cupti_fn.ActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    break;
  case EXIT_CALL_FINALIZE:
    cupti_fn.Finalize();
    break;
  }
  return NULL;
}

/*
 * A CUPTI call of the exit path, made on a thread of its own and waited for at most
 * EXIT_CUPTI_TIMEOUT_MS: the GPU may wedge after the worker's last periodic flush returned,
 * and the forced flush (or Finalize, which synchronizes every context) would then block the
 * application's exit for good. Past the bound the thread is left inside CUPTI (the process
 * is exiting) and -ETIMEDOUT returned. Without a thread, the call is made here, as before.
 */
static int exit_call(enum exit_call what)
{
  struct bthread *t;

  if (bthread_start(&t, "gpuprof-exit", exit_call_main, (void *)(uintptr_t)what)) {
    exit_call_main((void *)(uintptr_t)what);
    return 0;
  }
  /* On the monotonic clock: a wall-clock step at exit must not stretch or cut the wait. */
  if (bthread_join_within(t, EXIT_CUPTI_TIMEOUT_MS * 1000000ull) == 0)
    return 0;
  exit_cupti_stuck = 1;
  log_warn("%s did not return within %d ms; %s", exit_call_names[what], EXIT_CUPTI_TIMEOUT_MS,
           what == EXIT_CALL_FINALIZE
               ? "exiting without it"
               : "records CUPTI still holds are lost and the summary is incomplete");
  return -ETIMEDOUT;
}

static void write_outputs(int active)
{
  struct alloc_map_stats mem;
  struct summary_input in;
  char path[4096];

  memset(&in, 0, sizeof(in));
  in.cfg = &cfg;
  in.pid = (int)init_pid;
  in.active = active;
  in.inactive_reason = active ? "" : inactive_reason;
  in.cupti_version = cupti_loader_version();
  in.cupti_path = cupti_loader_path();
  if (active) {
    subscriber_get_stats(&in.api);
    alloc_map_get_stats(allocs, &mem);
    in.mem = &mem;
    in.allocs = allocs;
    in.stacks = hoststack_table();
    in.agg = agg;
    worker_get_stats(&in.worker);
    if (exit_cupti_stuck)
      in.worker.exit_incomplete = 1;
    in.buffer_pool_exhausted = buffer_pool_exhausted(pool);
  }
  if (summary_write_file(&in, path, sizeof(path)) != 0)
    path[0] = '\0';
  if (log_enabled(LOG_INFO))
    summary_print(&in, path[0] ? path : NULL);
}

void agent_shutdown(void)
{
  int saved, entered, stopped, flushed, disabled;

  /* Before the lock: a forked child may have inherited it held. */
  if (getpid() != init_pid)
    return;
  entered = guard_enter(&saved);
  pthread_mutex_lock(&shutdown_lock);
  if (shutdown_done)
    goto out;
  switch (atomic_load(&agent_state_word)) {
  case AGENT_ACTIVE:
    shutdown_done = 1;
    /* First: no capture may start while the agent winds down; the socket file goes away. */
    capture_refuse();
    control_server_stop(control);
    control = NULL;
    /*
     * Stop new records before callbacks go quiet: a thread still launching in between would
     * otherwise produce kernel records whose API call the agent never saw (counted as
     * unknown correlations although nothing was lost). Bounded like the calls below: one
     * that does not return means CUPTI is stuck, and the forced flush and Finalize would
     * block the same way, so they are skipped.
     */
    disabled = exit_call(EXIT_CALL_DISABLE) == 0;
    /* From here every callback is a no-op (one load of the state word). */
    set_state(AGENT_STOPPING);
    /* The worker must not be inside a FlushAll(0) while we force the final one. A flush
     * that does not return in time means CUPTI is stuck (a wedged GPU or driver): the forced
     * one would block the same way, so it is skipped and the summary says it is incomplete. */
    flushed = disabled && worker_pause_flushing(WORKER_PAUSE_TIMEOUT_MS) == 0;
    if (flushed)
      flushed = exit_call(EXIT_CALL_FORCED_FLUSH) == 0;
    /* The last, partial window(s) once the worker has delivered every record; before the
     * uploader's final flush, which then sends them. */
    stopped = worker_stop(WORKER_STOP_TIMEOUT_MS) == 0;
    /* NCCL ops no kernel record claimed: counted as unjoined in the summary. */
    nccl_finish();
    profiles_stop(stopped);
    oom_stop(stopped);
    /* A capture still running ends with the process: its file is finished here. */
    capture_shutdown(stopped);
    /* After the last window was submitted, before the summary that reports the uploads: the
     * final flush waits at most GPUPROF_EXIT_TIMEOUT (and returns at once without a URL). */
    uploader_stop(cfg.exit_timeout_ns);
    write_outputs(1);
    files_release_name();
    /*
     * Workaround: with CUDA 13.0-13.1, libcupti unloaded at exit without cuptiFinalize can
     * crash the process (fixed in 13.2; PAPI does the same, icl-utk-edu/papi#594). Finalize
     * after everything was flushed and written; buffers it still completes are returned
     * unread (the worker is gone). Not while a flush is stuck inside CUPTI (the worker's, or
     * the forced one's): Finalize synchronizes every context and would wait on the same
     * wedged GPU. A flush that was only slow (it returned and the worker was joined) does not
     * skip it. Finalize itself is bounded the same way (exit_call).
     */
    if (flushed || (stopped && !exit_cupti_stuck))
      exit_call(EXIT_CALL_FINALIZE);
    set_state(AGENT_STOPPED);
    break;
  case AGENT_INACTIVE:
    shutdown_done = 1;
    write_outputs(0);
    files_release_name();
    set_state(AGENT_STOPPED);
    break;
  default:
    /* Off, dormant (forked child), never initialised, or already stopped: nothing to do. */
    break;
  }
out:
  pthread_mutex_unlock(&shutdown_lock);
  if (entered)
    guard_leave(saved);
}
