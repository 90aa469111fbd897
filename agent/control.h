/* The control socket: a server thread that lets the gpuprof command query and start captures. */
#ifndef GPUPROF_AGENT_CONTROL_H
#define GPUPROF_AGENT_CONTROL_H

#include <stddef.h>

#include "agent/capture.h"

/* What the status reply says about the agent besides its capture. */
struct control_info {
  const char *mode;  /* "continuous", "ondemand" */
  const char *state; /* "active", "inactive", ... */
  char gpus[256];    /* devices with a context, "0,1"; "" when none yet */
};

/*
 * What the server calls; the agent wires these to agent/capture.h (agent.c), unit tests to
 * their own. They run on the server thread, which holds the reentrancy guard.
 */
struct control_ops {
  int (*capture_start)(void *arg, const struct capture_params *p, char *err, size_t err_len);
  int (*capture_stop)(void *arg);
  void (*capture_status)(void *arg, struct capture_status *out);
  void (*describe)(void *arg, struct control_info *out); /* may be NULL */
  void *arg;
};

#define CONTROL_DEFAULT_CLIENT_TIMEOUT_MS 2000
/* How long the server's stop waits for the file before replying (its state may then still
 * be "running"): well inside the gpuprof command's 5 s request timeout. */
#define CONTROL_STOP_WAIT_MS 2000

struct control_server;

/*
 * Creates <run_dir>/gpuprof-<pid>.sock (mode 0600; a missing run_dir is created with mode
 * 0700, its missing parents 0755; a socket of that name that nobody serves, left by an earlier
 * process with our pid, is replaced; a live one or another kind of file is not) and starts
 * the server thread "gpuprof-ctl". A client has client_timeout_ms (0: the default) from
 * accept to a complete request. NULL on failure with a one-line reason in err naming
 * GPUPROF_RUN_DIR.
 */
struct control_server *control_server_start(const char *run_dir, const struct control_ops *ops,
                                            unsigned client_timeout_ms, char *err, size_t err_len);

/* The socket's path. */
const char *control_server_path(const struct control_server *s);

/* Stops and joins the thread, removes the socket file, frees s. Accepts NULL. */
void control_server_stop(struct control_server *s);

/*
 * In a forked child (async-signal-safe, no locks): closes the inherited descriptors so the
 * child holds nothing of the parent's socket; never removes the file, which is the parent's.
 */
void control_server_forget(struct control_server *s);

struct control_stats {
  unsigned long long requests;  /* replied to, errors included */
  unsigned long long denied;    /* refused: another uid */
  unsigned long long malformed; /* bad, truncated, oversized or too slow */
};

void control_server_get_stats(const struct control_server *s, struct control_stats *out);

#endif
