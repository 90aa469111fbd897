/* The gpuprof command's side of the control socket: finding agents and asking them things. */
#ifndef GPUPROF_CLI_CLIENT_H
#define GPUPROF_CLI_CLIENT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "export/control_proto.h"

/* Exit statuses of the gpuprof command (docs/CONTROL.md). */
enum {
  EXIT_OK = 0,
  EXIT_ERROR = 1,    /* a request failed, a capture failed, a process exited mid-capture */
  EXIT_USAGE = 2,    /* bad arguments */
  EXIT_BUSY = 3,     /* a capture was already running */
  EXIT_NO_AGENT = 4, /* no agent to talk to in the run directory */
};

#define CLIENT_TIMEOUT_MS 5000

/* The run directory: --run-dir, else GPUPROF_RUN_DIR, else the default. */
const char *client_run_dir(const char *opt);

struct agent_socket {
  int pid;     /* from the file name */
  uid_t owner; /* of the socket file */
  dev_t dev;   /* the file found (client_remove_stale removes only that one) */
  ino_t ino;
  char path[108];
};

/*
 * The sockets named gpuprof-<pid>.sock in dir, sorted by pid, in a malloc'd array (*out, to
 * free()). Nothing is connected yet. 0 or -errno (-ENOENT: no such directory).
 */
int client_scan(const char *dir, struct agent_socket **out, size_t *n);

struct client_reply {
  char buf[CONTROL_RESPONSE_MAX + 1];
  struct control_msg msg;
  int ok; /* header word "ok"; otherwise msg.code is the error code */
};

/*
 * Connects to path, sends req, reads and parses the reply (within timeout_ms). 0 when a reply
 * arrived (ok or error); -ECONNREFUSED when nothing listens (the process is gone: a stale
 * file); -ENOENT; -EACCES; -ETIMEDOUT; -EPROTO for an unreadable reply; -EPERM when the
 * listener is neither our uid nor root (not sent to, not trusted: cli/client.c check_server);
 * err says why.
 */
int client_request(const char *path, const struct control_request *req, unsigned timeout_ms,
                   struct client_reply *rep, char *err, size_t err_len);

/*
 * Removes a socket file nobody listens on (client_request said -ECONNREFUSED): under the run
 * directory's lock, which agents hold while they take over a stale name (agent/control.c), and
 * only if the file is still the one scanned and still refuses connections. 0 when removed;
 * -EBUSY when the lock was not had within a second, -ESTALE when the file changed or someone
 * listens now (left alone), or -errno.
 */
int client_remove_stale(const char *dir, const struct agent_socket *a);

/* A status reply (ok or error: both carry the status fields) as values. */
struct client_status {
  int pid;
  const char *command, *version, *mode, *agent, *gpus, *message;
  int running;
  uint64_t id, now_ns, started_ns, ends_ns, events, bytes, dropped;
  int gpu_only, error;
  const char *error_text;
  const char *files[8];
  size_t n_files;
};

void client_status_read(const struct client_reply *rep, struct client_status *st);

/* Duration syntax of GPUPROF_* settings: integer + ns/us/ms/s/m/min/h, bare = seconds. */
int client_parse_duration(const char *s, uint64_t *ns);

/* The list and capture commands: argc/argv after the command word. */
int cmd_list(int argc, char **argv);
int cmd_capture(int argc, char **argv);
int cmd_stop(int argc, char **argv);

#endif
