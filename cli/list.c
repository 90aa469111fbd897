/* `gpuprof list`: the agents reachable in the run directory, one line each. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/client.h"

static void no_agents(const char *dir, const char *why)
{
  fprintf(stderr,
          "gpuprof: no gpuprof agent in %s (%s). It is GPUPROF_RUN_DIR, or --run-dir DIR; an "
          "agent appears there once its process initialized CUDA with CUDA_INJECTION64_PATH set "
          "and GPUPROF_MODE not off\n",
          dir, why);
}

/* "running #3, 41 s left", "idle (last #3)", "idle" */
static void capture_column(const struct client_status *st, char *out, size_t len)
{
  if (st->running) {
    uint64_t left = st->ends_ns > st->now_ns ? (st->ends_ns - st->now_ns) / 1000000000ull : 0;
    snprintf(out, len, "running #%llu, %llu s left", (unsigned long long)st->id,
             (unsigned long long)left);
  } else if (st->id) {
    snprintf(out, len, "idle (last #%llu%s)", (unsigned long long)st->id,
             st->error ? ", failed" : "");
  } else {
    snprintf(out, len, "idle");
  }
}

int cmd_list(int argc, char **argv)
{
  static struct client_reply rep;
  const char *opt_dir = NULL, *dir;
  struct control_request req;
  struct agent_socket *socks;
  size_t n, shown = 0, refused = 0;
  int ret;

  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--run-dir") == 0 && i + 1 < argc) {
      opt_dir = argv[++i];
    } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      printf("usage: gpuprof list [--run-dir DIR]\n");
      return EXIT_OK;
    } else {
      fprintf(stderr, "gpuprof list: unknown argument %s (usage: gpuprof list [--run-dir DIR])\n",
              argv[i]);
      return EXIT_USAGE;
    }
  }
  dir = client_run_dir(opt_dir);
  ret = client_scan(dir, &socks, &n);
  if (ret) {
    no_agents(dir, strerror(-ret));
    return ret == -ENOENT ? EXIT_NO_AGENT : EXIT_ERROR;
  }
  control_request_init(&req, CONTROL_CMD_STATUS);
  for (size_t i = 0; i < n; i++) {
    struct client_status st;
    char err[512], cap[64];

    ret = client_request(socks[i].path, &req, CLIENT_TIMEOUT_MS, &rep, err, sizeof(err));
    if (ret == -ECONNREFUSED) {
      /* Nobody listens: the process is gone (killed, or exited without its exit handler).
       * Removed only under the run directory's lock, still refused: an agent may be taking
       * the name over right now (the same pid from another pid namespace, or a reused pid). */
      if (client_remove_stale(dir, &socks[i]) == 0)
        fprintf(stderr, "gpuprof: removed %s: its process %d is gone\n", socks[i].path,
                socks[i].pid);
      continue;
    }
    if (ret == -ENOENT)
      continue; /* it exited while we looked */
    if (ret == -EPERM) {
      /* Not an agent we may trust (another user's listener): not listed. */
      fprintf(stderr, "gpuprof: %s\n", err);
      refused++;
      continue;
    }
    if (shown++ == 0)
      printf("%-8s %-9s %-11s %-26s %-6s %s\n", "PID", "AGENT", "MODE", "CAPTURE", "GPUS",
             "COMMAND");
    if (ret == -EACCES || ret == -EPERM) {
      printf("%-8d %s\n", socks[i].pid, "permission denied: the socket belongs to another user");
      fprintf(stderr, "gpuprof: %s belongs to uid %u: run as that user or root\n", socks[i].path,
              (unsigned)socks[i].owner);
      continue;
    }
    if (ret) {
      printf("%-8d error: %s\n", socks[i].pid, err);
      continue;
    }
    client_status_read(&rep, &st);
    if (!rep.ok) {
      printf("%-8d %s: %s\n", socks[i].pid, rep.msg.code ? rep.msg.code : "error", st.message);
      continue;
    }
    capture_column(&st, cap, sizeof(cap));
    printf("%-8d %-9s %-11s %-26s %-6s %s\n", st.pid, st.agent, st.mode, cap,
           st.gpus[0] ? st.gpus : "-", st.command);
  }
  free(socks);
  if (!shown) {
    no_agents(dir, refused ? "only sockets served by other users"
                   : n     ? "only sockets of processes that are gone"
                           : "no sockets");
    return EXIT_NO_AGENT;
  }
  return EXIT_OK;
}
