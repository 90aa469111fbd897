/* `gpuprof capture` and `gpuprof stop`: time-boxed traces of one or several agent processes. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/client.h"
#include "cli/merge.h"
#include "export/format.h"

#define POLL_INTERVAL_MS 200
/* After its planned end, a capture has this long to finish its file before we give up. */
#define FINISH_GRACE_NS (60ull * 1000000000ull)

enum target_state { T_SKIPPED, T_RUNNING, T_DONE, T_FAILED };

struct target {
  struct agent_socket sock;
  enum target_state state;
  uint64_t id;             /* the capture we started */
  uint64_t length_ns;      /* its planned length */
  uint64_t deadline_ns;    /* CLOCK_MONOTONIC: give up after this */
  int errors;              /* consecutive failed status requests */
  struct client_reply rep; /* the last status (the final one once done) */
  struct client_status st;
};

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
  (void)sig;
  interrupted = 1;
}

static uint64_t mono_ns(void)
{
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void usage(FILE *out, int capture)
{
  fputs(capture ? "usage: gpuprof capture [--pid N | --all] [--duration 60s] [--gpu-only]\n"
                  "                       [--format json|json.gz|perfetto] [--output DIR]"
                  " [--run-dir DIR] [--merge]\n"
                : "usage: gpuprof stop [--pid N | --all] [--run-dir DIR]\n",
        out);
}

struct options {
  int pid, all, gpu_only;
  int merge; /* --merge: the traces merged into one file too */
  int format;
  uint64_t duration_ns;
  char output[CONTROL_PATH_MAX];
  const char *run_dir;
};

static int parse_options(const char *cmd, int argc, char **argv, struct options *o, int capture)
{
  memset(o, 0, sizeof(*o));
  o->pid = -1;
  o->gpu_only = -1;
  o->format = CONTROL_FORMAT_DEFAULT;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    char *end;

    if (strcmp(a, "--all") == 0) {
      o->all = 1;
      continue;
    }
    if (capture && strcmp(a, "--gpu-only") == 0) {
      o->gpu_only = 1;
      continue;
    }
    if (capture && strcmp(a, "--merge") == 0) {
      o->merge = 1;
      continue;
    }
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      usage(stdout, capture);
      exit(EXIT_OK);
    }
    if (!v || (strcmp(a, "--pid") && strcmp(a, "--run-dir") &&
               (!capture ||
                (strcmp(a, "--duration") && strcmp(a, "--format") && strcmp(a, "--output"))))) {
      fprintf(stderr, "gpuprof %s: %s %s\n", cmd, a,
              v ? "is not an option" : "is not an option or needs a value");
      usage(stderr, capture);
      return -EINVAL;
    }
    i++;
    if (strcmp(a, "--pid") == 0) {
      long p = strtol(v, &end, 10);
      if (*end || p <= 0 || p > INT_MAX) {
        fprintf(stderr, "gpuprof %s: --pid %s is not a process id\n", cmd, v);
        return -EINVAL;
      }
      o->pid = (int)p;
    } else if (strcmp(a, "--run-dir") == 0) {
      o->run_dir = v;
    } else if (strcmp(a, "--duration") == 0) {
      if (client_parse_duration(v, &o->duration_ns) || o->duration_ns < CONTROL_MIN_DURATION_NS ||
          o->duration_ns > CONTROL_MAX_DURATION_NS) {
        fprintf(stderr,
                "gpuprof %s: --duration %s is not a duration between 1ms and 24h "
                "(e.g. 60s, 500ms, 2m)\n",
                cmd, v);
        return -EINVAL;
      }
    } else if (strcmp(a, "--format") == 0) {
      o->format = control_format_parse(v);
      if (o->format < 0) {
        fprintf(stderr, "gpuprof %s: --format %s is not json, json.gz or perfetto\n", cmd, v);
        return -EINVAL;
      }
    } else {
      /* The agent resolves the path in its own filesystem: make it absolute here, from our
       * working directory (the same filesystem when run inside the container). */
      char cwd[PATH_MAX];
      int n;
      if (v[0] == '/')
        n = snprintf(o->output, sizeof(o->output), "%s", v);
      else if (getcwd(cwd, sizeof(cwd)))
        n = snprintf(o->output, sizeof(o->output), "%s/%s", cwd, v);
      else
        n = -1;
      if (n < 0 || (size_t)n >= sizeof(o->output) || strpbrk(o->output, "\r\n")) {
        fprintf(stderr, "gpuprof %s: --output %s: not a usable directory path\n", cmd, v);
        return -EINVAL;
      }
    }
  }
  if (o->all && o->pid > 0) {
    fprintf(stderr, "gpuprof %s: --pid and --all exclude each other\n", cmd);
    return -EINVAL;
  }
  return 0;
}

static void no_agent(const char *dir, const char *what)
{
  fprintf(stderr,
          "gpuprof: %s in %s (GPUPROF_RUN_DIR, or --run-dir DIR); `gpuprof list` shows the "
          "agents there\n",
          what, dir);
}

/*
 * The targets: the one --pid names, every live agent for --all, or the only live agent.
 * Probes each with a status request (stale sockets of dead processes are skipped). Returns
 * an exit status on failure, 0 with the targets in *out and their count in *n otherwise.
 */
/* The agents to act on (*out, *n). *failed_probe: some agent with --all could not be asked
 * (reported; the others go on). 0 or the exit status. */
static int select_targets(const char *cmd, const struct options *o, const char *dir,
                          struct target **out, size_t *n, int *failed_probe)
{
  struct agent_socket *socks;
  struct control_request req;
  struct target *t;
  size_t cnt, live = 0;
  int ret;

  *out = NULL;
  *n = 0;
  *failed_probe = 0;
  ret = client_scan(dir, &socks, &cnt);
  if (ret) {
    no_agent(dir, strerror(-ret));
    return ret == -ENOENT ? EXIT_NO_AGENT : EXIT_ERROR;
  }
  t = calloc(cnt ? cnt : 1, sizeof(*t));
  if (!t) {
    free(socks);
    fprintf(stderr, "gpuprof %s: out of memory\n", cmd);
    return EXIT_ERROR;
  }
  control_request_init(&req, CONTROL_CMD_STATUS);
  for (size_t i = 0; i < cnt; i++) {
    char err[512];

    if (o->pid > 0 && socks[i].pid != o->pid)
      continue;
    t[live].sock = socks[i];
    ret = client_request(socks[i].path, &req, CLIENT_TIMEOUT_MS, &t[live].rep, err, sizeof(err));
    if (ret == -ECONNREFUSED || ret == -ENOENT)
      continue; /* a stale socket; `gpuprof list` removes it */
    if (ret == 0 && !t[live].rep.ok) {
      client_status_read(&t[live].rep, &t[live].st);
      snprintf(err, sizeof(err), "%s: %s", t[live].rep.msg.code, t[live].st.message);
      ret = -EPERM;
    }
    if (ret) {
      fprintf(stderr, "gpuprof %s: pid %d: %s\n", cmd, socks[i].pid,
              ret == -EACCES ? "permission denied (run as the process's user or root)" : err);
      /* --all, or --pid reaching several agents with that pid: the others are still
       * captured; the worst status wins at the end. */
      *failed_probe = 1;
      continue;
    }
    live++;
  }
  free(socks);
  /* --pid N whose only agents could not be asked: that failure (said above) is the status. */
  if (live == 0 && o->pid > 0 && *failed_probe) {
    free(t);
    return EXIT_ERROR;
  }
  if (live == 0) {
    char what[64];
    if (o->pid > 0)
      snprintf(what, sizeof(what), "no agent with pid %d", o->pid);
    else
      snprintf(what, sizeof(what), "no gpuprof agent");
    no_agent(dir, what);
    free(t);
    return EXIT_NO_AGENT;
  }
  /* Several agents with the --pid given are processes with that pid in other pid namespaces
   * sharing the run directory (docs/CONTROL.md): --pid reaches all of them. */
  if (live > 1 && !o->all && o->pid <= 0) {
    fprintf(stderr, "gpuprof %s: %zu agents in %s (pids", cmd, live, dir);
    for (size_t i = 0; i < live; i++)
      fprintf(stderr, " %d", t[i].sock.pid);
    fprintf(stderr, "): pass --pid N or --all\n");
    free(t);
    return EXIT_USAGE;
  }
  *out = t;
  *n = live;
  return 0;
}

/* Folds one reply's error into the exit status: busy (3) unless something worse happened. */
static int worse(int rc, int add)
{
  if (rc == EXIT_ERROR || add == EXIT_ERROR)
    return EXIT_ERROR;
  return rc ? rc : add;
}

static void start_all(struct target *t, size_t n, const struct options *o, int *rc)
{
  struct control_request req;

  control_request_init(&req, CONTROL_CMD_CAPTURE);
  req.duration_ns = o->duration_ns;
  req.gpu_only = o->gpu_only;
  req.format = o->format;
  snprintf(req.output_dir, sizeof(req.output_dir), "%s", o->output);
  /* Back to back, before any waiting: the windows of --all coincide. */
  for (size_t i = 0; i < n; i++) {
    char err[512];
    int ret = client_request(t[i].sock.path, &req, CLIENT_TIMEOUT_MS, &t[i].rep, err, sizeof(err));

    t[i].state = T_FAILED;
    if (ret) {
      fprintf(stderr, "gpuprof capture: pid %d: %s\n", t[i].sock.pid, err);
      *rc = worse(*rc, EXIT_ERROR);
      continue;
    }
    client_status_read(&t[i].rep, &t[i].st);
    if (!t[i].rep.ok) {
      int busy = strcmp(t[i].rep.msg.code, CONTROL_E_BUSY) == 0;
      fprintf(stderr, "gpuprof capture: pid %d: %s: %s\n", t[i].sock.pid, t[i].rep.msg.code,
              t[i].st.message);
      *rc = worse(*rc, busy ? EXIT_BUSY : EXIT_ERROR);
      continue;
    }
    t[i].state = T_RUNNING;
    t[i].id = t[i].st.id;
    t[i].length_ns =
        t[i].st.ends_ns > t[i].st.started_ns ? t[i].st.ends_ns - t[i].st.started_ns : 0;
    t[i].deadline_ns = mono_ns() + t[i].length_ns + FINISH_GRACE_NS;
    fprintf(stderr, "gpuprof: pid %d: capture #%llu started (%llu ms%s)\n", t[i].sock.pid,
            (unsigned long long)t[i].id, (unsigned long long)(t[i].length_ns / 1000000ull),
            t[i].st.gpu_only ? ", GPU only" : "");
  }
}

static void send_stop(struct target *t, size_t n)
{
  struct control_request req;
  static struct client_reply rep;

  control_request_init(&req, CONTROL_CMD_STOP);
  for (size_t i = 0; i < n; i++) {
    char err[512];
    if (t[i].state == T_RUNNING &&
        client_request(t[i].sock.path, &req, CLIENT_TIMEOUT_MS, &rep, err, sizeof(err)))
      fprintf(stderr, "gpuprof capture: pid %d: stop: %s\n", t[i].sock.pid, err);
  }
}

/* One status round: marks finished captures. Returns how many still run. */
static size_t poll_all(struct target *t, size_t n, int *rc, uint64_t *events, uint64_t *bytes,
                       uint64_t *left_ns)
{
  struct control_request req;
  size_t running = 0;

  control_request_init(&req, CONTROL_CMD_STATUS);
  *events = *bytes = *left_ns = 0;
  for (size_t i = 0; i < n; i++) {
    struct target *x = &t[i];
    char err[512];
    int ret;

    if (x->state != T_RUNNING)
      continue;
    ret = client_request(x->sock.path, &req, CLIENT_TIMEOUT_MS, &x->rep, err, sizeof(err));
    if (ret == -ECONNREFUSED || ret == -ENOENT) {
      fprintf(stderr,
              "gpuprof capture: pid %d exited before capture #%llu finished; its agent "
              "finishes the trace at exit (look in the output directory)\n",
              x->sock.pid, (unsigned long long)x->id);
      x->state = T_FAILED;
      *rc = worse(*rc, EXIT_ERROR);
      continue;
    }
    if (ret || !x->rep.ok) {
      if (++x->errors >= 5) {
        fprintf(stderr, "gpuprof capture: pid %d: status: %s\n", x->sock.pid,
                ret ? err : "the agent keeps refusing status requests");
        x->state = T_FAILED;
        *rc = worse(*rc, EXIT_ERROR);
      } else {
        running++;
      }
      continue;
    }
    x->errors = 0;
    client_status_read(&x->rep, &x->st);
    if (x->st.id > x->id || (x->st.id == x->id && !x->st.running)) {
      x->state = T_DONE;
      continue;
    }
    if (mono_ns() > x->deadline_ns) {
      fprintf(stderr,
              "gpuprof capture: pid %d: capture #%llu has not finished %llu s after its "
              "end; giving up waiting (it goes on in the process)\n",
              x->sock.pid, (unsigned long long)x->id,
              (unsigned long long)(FINISH_GRACE_NS / 1000000000ull));
      x->state = T_FAILED;
      *rc = worse(*rc, EXIT_ERROR);
      continue;
    }
    running++;
    *events += x->st.events;
    *bytes += x->st.bytes;
    if (x->st.ends_ns > x->st.now_ns && x->st.ends_ns - x->st.now_ns > *left_ns)
      *left_ns = x->st.ends_ns - x->st.now_ns;
  }
  return running;
}

static void report(struct target *t, size_t n, int *rc)
{
  for (size_t i = 0; i < n; i++) {
    struct client_status *st = &t[i].st;
    char b[32];

    if (t[i].state != T_DONE)
      continue;
    if (st->id != t[i].id) {
      fprintf(stderr,
              "gpuprof capture: pid %d: capture #%llu finished, and #%llu was started "
              "since; look for its file in the output directory\n",
              t[i].sock.pid, (unsigned long long)t[i].id, (unsigned long long)st->id);
      *rc = worse(*rc, EXIT_ERROR);
      continue;
    }
    if (st->error) {
      fprintf(stderr, "gpuprof capture: pid %d: capture #%llu failed: %s\n", t[i].sock.pid,
              (unsigned long long)st->id, st->error_text[0] ? st->error_text : "error");
      *rc = worse(*rc, EXIT_ERROR);
    }
    format_bytes(st->bytes, b, sizeof(b));
    fprintf(stderr, "gpuprof: pid %d: capture #%llu: %llu events, %s, %llu dropped, %zu file%s\n",
            t[i].sock.pid, (unsigned long long)st->id, (unsigned long long)st->events, b,
            (unsigned long long)st->dropped, st->n_files, st->n_files == 1 ? "" : "s");
    /* stdout: the files only, one per line, for scripts (kubectl cp, merge). */
    for (size_t f = 0; f < st->n_files; f++)
      printf("%s\n", st->files[f]);
  }
}

/* --merge: the finished captures' traces (not their profiles) in one file, printed last. */
static void merge_captures(struct target *t, size_t n, int *rc)
{
  const char **paths = calloc(n * 8 + 1, sizeof(*paths));
  char out[PATH_MAX];
  size_t np = 0;
  int ret;

  if (!paths) {
    *rc = worse(*rc, EXIT_ERROR);
    return;
  }
  for (size_t i = 0; i < n; i++)
    for (size_t f = 0; t[i].state == T_DONE && f < t[i].st.n_files; f++)
      if (!strstr(t[i].st.files[f], ".pb.gz"))
        paths[np++] = t[i].st.files[f];
  if (!np) {
    fprintf(stderr, "gpuprof capture: --merge: no trace was written\n");
    *rc = worse(*rc, EXIT_ERROR);
  } else if ((ret = merge_traces(NULL, paths, np, out, sizeof(out))) != 0) {
    /* The files are the agents': a sidecar or another container may not see them. */
    fprintf(stderr, "gpuprof capture: --merge failed; the traces above are complete, merge "
                    "them where they can be read: gpuprof merge FILE...\n");
    *rc = worse(*rc, EXIT_ERROR);
  } else {
    printf("%s\n", out);
  }
  free(paths);
}

int cmd_capture(int argc, char **argv)
{
  struct options o;
  struct target *t;
  struct sigaction sa, old_int, old_term;
  size_t n, running;
  const char *dir;
  int rc = EXIT_OK, tty = isatty(2), stopped = 0, ret, failed_probe;

  if (parse_options("capture", argc, argv, &o, 1))
    return EXIT_USAGE;
  dir = client_run_dir(o.run_dir);
  ret = select_targets("capture", &o, dir, &t, &n, &failed_probe);
  if (ret)
    return ret;
  if (failed_probe)
    rc = EXIT_ERROR;

  /* Ctrl-C ends the captures early; their files are still finished and listed. */
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);

  start_all(t, n, &o, &rc);
  for (;;) {
    uint64_t events, bytes, left;
    struct timespec ts = {0, POLL_INTERVAL_MS * 1000000L};

    nanosleep(&ts, NULL);
    if (interrupted && !stopped) {
      fprintf(stderr, "%sgpuprof: stopping the capture%s\n", tty ? "\r\033[K" : "",
              n > 1 ? "s" : "");
      send_stop(t, n);
      stopped = 1;
      interrupted = 0;
    } else if (interrupted) {
      /* A second Ctrl-C: stop waiting (the agents finish their files on their own). */
      fprintf(stderr, "%sgpuprof: not waiting for the capture%s to finish\n", tty ? "\r\033[K" : "",
              n > 1 ? "s" : "");
      rc = EXIT_ERROR;
      break;
    }
    running = poll_all(t, n, &rc, &events, &bytes, &left);
    if (!running)
      break;
    if (tty) {
      char b[32];
      format_bytes(bytes, b, sizeof(b));
      fprintf(stderr, "\r\033[Kgpuprof: capturing %zu process%s: %llu s left, %llu events, %s",
              running, running == 1 ? "" : "es",
              (unsigned long long)((left + 999999999ull) / 1000000000ull),
              (unsigned long long)events, b);
    }
  }
  if (tty)
    fprintf(stderr, "\r\033[K");
  report(t, n, &rc);
  if (o.merge)
    merge_captures(t, n, &rc);
  sigaction(SIGINT, &old_int, NULL);
  sigaction(SIGTERM, &old_term, NULL);
  free(t);
  return rc;
}

/*
 * After a stop: the agent replies within a couple of seconds, and a capture whose file takes
 * longer (it ends at the worker's next ticks, up to two flush intervals) still reads
 * "running". Follows the status until capture id is finished; 0 with its final status in
 * rep/st, or an exit status after saying why on stderr.
 */
static int wait_stopped(const struct agent_socket *sock, uint64_t id, struct client_reply *rep,
                        struct client_status *st)
{
  uint64_t deadline = mono_ns() + FINISH_GRACE_NS;
  struct control_request req;
  int errors = 0;

  control_request_init(&req, CONTROL_CMD_STATUS);
  while (st->running && st->id == id) {
    struct timespec ts = {0, POLL_INTERVAL_MS * 1000000L};
    char err[512];
    int ret;

    if (mono_ns() > deadline) {
      fprintf(stderr,
              "gpuprof stop: pid %d: capture #%llu has not finished its file %llu s after "
              "the stop; giving up waiting (it goes on in the process)\n",
              sock->pid, (unsigned long long)id,
              (unsigned long long)(FINISH_GRACE_NS / 1000000000ull));
      return EXIT_ERROR;
    }
    nanosleep(&ts, NULL);
    ret = client_request(sock->path, &req, CLIENT_TIMEOUT_MS, rep, err, sizeof(err));
    if (ret == -ECONNREFUSED || ret == -ENOENT) {
      fprintf(stderr,
              "gpuprof stop: pid %d exited before capture #%llu finished; its agent "
              "finishes the trace at exit (look in the output directory)\n",
              sock->pid, (unsigned long long)id);
      return EXIT_ERROR;
    }
    if (ret || !rep->ok) {
      if (++errors >= 5) {
        fprintf(stderr, "gpuprof stop: pid %d: status: %s\n", sock->pid,
                ret ? err : "the agent keeps refusing status requests");
        return EXIT_ERROR;
      }
      continue;
    }
    errors = 0;
    client_status_read(rep, st);
  }
  return EXIT_OK;
}

int cmd_stop(int argc, char **argv)
{
  static struct client_reply rep;
  struct control_request req;
  struct options o;
  struct target *t;
  size_t n, idle = 0;
  int rc = EXIT_OK, ret, failed_probe;

  if (parse_options("stop", argc, argv, &o, 0))
    return EXIT_USAGE;
  ret = select_targets("stop", &o, client_run_dir(o.run_dir), &t, &n, &failed_probe);
  if (ret)
    return ret;
  if (failed_probe)
    rc = EXIT_ERROR;
  control_request_init(&req, CONTROL_CMD_STOP);
  for (size_t i = 0; i < n; i++) {
    struct client_status st;
    char err[512];
    uint64_t id;

    ret = client_request(t[i].sock.path, &req, CLIENT_TIMEOUT_MS, &rep, err, sizeof(err));
    if (ret) {
      fprintf(stderr, "gpuprof stop: pid %d: %s\n", t[i].sock.pid, err);
      rc = EXIT_ERROR;
      continue;
    }
    client_status_read(&rep, &st);
    if (!rep.ok) {
      fprintf(stderr, "gpuprof stop: pid %d: %s: %s\n", t[i].sock.pid, rep.msg.code, st.message);
      /* With --all, or --pid reaching several agents with that pid, an idle agent is no
       * failure: there was nothing to stop in it (none running at all is, for --pid). */
      if ((o.all || n > 1) && strcmp(rep.msg.code, CONTROL_E_NOT_RUNNING) == 0)
        idle++;
      else
        rc = EXIT_ERROR;
      continue;
    }
    id = st.id;
    ret = wait_stopped(&t[i].sock, id, &rep, &st);
    if (ret) {
      rc = worse(rc, ret);
      continue;
    }
    if (st.id != id) {
      fprintf(stderr,
              "gpuprof stop: pid %d: capture #%llu stopped, and #%llu was started since; "
              "look for its file in the output directory\n",
              t[i].sock.pid, (unsigned long long)id, (unsigned long long)st.id);
      rc = EXIT_ERROR;
      continue;
    }
    fprintf(stderr, "gpuprof: pid %d: capture #%llu stopped\n", t[i].sock.pid,
            (unsigned long long)st.id);
    if (st.error) {
      fprintf(stderr, "gpuprof stop: pid %d: capture #%llu failed: %s\n", t[i].sock.pid,
              (unsigned long long)st.id, st.error_text[0] ? st.error_text : "error");
      rc = EXIT_ERROR;
    }
    for (size_t f = 0; f < st.n_files; f++)
      printf("%s\n", st.files[f]);
  }
  if (!o.all && idle == n)
    rc = EXIT_ERROR;
  free(t);
  return rc;
}
