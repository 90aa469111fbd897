/* The control socket: a server thread that lets the gpuprof command query and start captures. */
#define LOG_MODULE "control"
#include "agent/control.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "agent/util/bthread.h"
#include "agent/util/clock.h"
#include "agent/util/guard.h"
#include "agent/util/files.h"
#include "agent/util/log.h"
#include "export/control_proto.h"
#include "gpuprof/gpuprof.h"

_Static_assert(CONTROL_FORMAT_JSON == (int)CONFIG_TRACE_JSON &&
                   CONTROL_FORMAT_JSON_GZ == (int)CONFIG_TRACE_JSON_GZ &&
                   CONTROL_FORMAT_PERFETTO == (int)CONFIG_TRACE_PERFETTO,
               "the protocol's format numbers are the configuration's");
_Static_assert(CONTROL_PATH_MAX <= CONFIG_PATH_MAX, "an output path fits capture_params");

#define STOP_JOIN_TIMEOUT_MS 5000
#define LISTEN_BACKLOG 16
/* Connections read at the same time: a client that is slow to send (or sends nothing) holds
 * one slot for at most the client timeout, not the whole server. */
#define MAX_CLIENTS 8
/* Rejections are logged up to this many times each; a flood of bad clients must not flood
 * the application's stderr. */
#define LOG_REJECTIONS 5

/* One connection being read. */
struct client {
  int fd; /* -1: a free slot */
  uint64_t deadline_ms;
  struct ucred peer;
  size_t len;
  char req[CONTROL_REQUEST_MAX + 1];
};

struct control_server {
  int listen_fd;
  int stop_rd, stop_wr; /* a pipe: one byte written on stop wakes the thread's poll */
  struct bthread *thread;
  int started;
  struct control_ops ops;
  unsigned client_timeout_ms;
  pid_t pid;
  uid_t euid;
  dev_t dev;
  ino_t ino;
  char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
  char command[1024];
  /* Requests are read side by side but handled one at a time: one reply buffer. */
  struct client clients[MAX_CLIENTS];
  char reply[CONTROL_RESPONSE_MAX];
  struct capture_status st;
  _Atomic unsigned long long requests, denied, malformed;
};

/* argv joined by spaces, as ps shows it. */
static void read_command(char *out, size_t len)
{
  int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
  ssize_t n = fd >= 0 ? read(fd, out, len - 1) : -1;

  if (fd >= 0)
    close(fd);
  if (n <= 0) {
    snprintf(out, len, "?");
    return;
  }
  while (n > 0 && out[n - 1] == '\0')
    n--;
  for (ssize_t i = 0; i < n; i++)
    if (out[i] == '\0')
      out[i] = ' ';
  out[n] = '\0';
}

/*
 * 1 when a process listens on path (another agent with our pid: a run directory shared
 * across pid namespaces), 0 when nothing does (a stale file, or none). Non-blocking: this runs
 * inside cuInit, and a connect to a listener whose backlog is full (a stopped process) would
 * otherwise wait for it; EAGAIN means someone listens.
 */
static int socket_is_live(const char *path)
{
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), live;

  if (fd < 0)
    return 0;
  snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
  live = connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0 || errno == EAGAIN;
  close(fd);
  return live;
}

/*
 * The run directory's lock (flock on the directory itself), held while a socket name is
 * judged stale and replaced: by an agent taking a name, and by `gpuprof list` removing a stale
 * file (cli/client.c client_remove_stale). Without it, one of them could judge a name stale,
 * another take it over with a live socket, and the first then unlink that live socket. Waited
 * for at most RUN_DIR_LOCK_WAIT_MS (this runs inside cuInit; whoever can read the directory
 * can hold it): -1 without it, and names are then taken as before, unlocked.
 */
#define RUN_DIR_LOCK_WAIT_MS 1000

static int run_dir_lock(const char *run_dir)
{
  int fd = open(run_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

  for (int waited = 0; fd >= 0; waited += 10) {
    if (flock(fd, LOCK_EX | LOCK_NB) == 0)
      return fd;
    if (errno != EWOULDBLOCK || waited >= RUN_DIR_LOCK_WAIT_MS)
      break;
    usleep(10000);
  }
  if (fd >= 0) {
    log_debug("cannot lock GPUPROF_RUN_DIR=%s: %s; taking a socket name without it", run_dir,
              strerror(errno));
    close(fd);
  }
  return -1;
}

static void run_dir_unlock(int fd)
{
  if (fd >= 0)
    close(fd); /* releases the lock */
}

/* Most agents with the same pid that one run directory serves (gpuprof-<pid>.sock, then
 * gpuprof-<pid>.2.sock, ...): containers of one pod sharing the directory each have their own
 * pid namespace, and their workloads are often all pid 1. */
#define MAX_SAME_PID 16

static int socket_name(char *buf, size_t len, const char *run_dir, int pid, int n)
{
  int r = n == 1 ? snprintf(buf, len, "%s/" CONTROL_SOCKET_PREFIX "%d" CONTROL_SOCKET_SUFFIX,
                            run_dir, pid)
                 : snprintf(buf, len, "%s/" CONTROL_SOCKET_PREFIX "%d.%d" CONTROL_SOCKET_SUFFIX,
                            run_dir, pid, n);
  return r < 0 || (size_t)r >= len ? -ENAMETOOLONG : 0;
}

/*
 * Binds under a temporary name, restricts it to mode 0600 and listens; then links it to the
 * first free name and removes the temporary one: a client never sees the final name before it
 * is private and accepting, and link() fails if another agent took the name meanwhile. A name
 * held by a socket nobody listens on (a process that died) is taken over; a live one (another
 * agent with our pid, from another pid namespace) is skipped.
 */
static int create_socket(struct control_server *s, const char *run_dir, char *err, size_t err_len)
{
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  struct stat sb;
  /* The temporary name must differ from that of an agent with our pid in another namespace
   * binding at the same moment, and be no longer than the final name (socket paths are
   * short): ".gp<pid>.<16 bits>". */
  unsigned tag = (unsigned)((clock_monotonic_ns() >> 10) ^ (uintptr_t)s) & 0xffffu;
  int ret, n, stale_tries = 0, lock_fd;

  if (socket_name(s->path, sizeof(s->path), run_dir, (int)s->pid, 1) ||
      (size_t)snprintf(a.sun_path, sizeof(a.sun_path), "%s/.gp%d.%04x", run_dir, (int)s->pid,
                       tag) >= sizeof(a.sun_path)) {
    snprintf(err, err_len,
             "GPUPROF_RUN_DIR=%s is too long for a socket path (at most %zu bytes in all); "
             "the control socket is disabled",
             run_dir, sizeof(s->path) - 1);
    return -ENAMETOOLONG;
  }
  /* The run directory, if created here, is private; parents are 0755 like the output
   * directory's, so creating /tmp/gpuprof/run first does not lock others out of /tmp/gpuprof. */
  ret = files_mkdir_p(run_dir, 0700);
  if (ret) {
    snprintf(err, err_len, "cannot create GPUPROF_RUN_DIR=%s: %s; the control socket is disabled",
             run_dir, strerror(-ret));
    return ret;
  }
  unlink(a.sun_path);
  s->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (s->listen_fd < 0 || bind(s->listen_fd, (struct sockaddr *)&a, sizeof(a)) ||
      chmod(a.sun_path, 0600) || listen(s->listen_fd, LISTEN_BACKLOG)) {
    ret = -errno;
    snprintf(err, err_len, "cannot create the control socket in GPUPROF_RUN_DIR=%s: %s", run_dir,
             strerror(errno));
    unlink(a.sun_path);
    return ret;
  }
  lock_fd = run_dir_lock(run_dir);
  for (n = 1; n <= MAX_SAME_PID; n++) {
    if (socket_name(s->path, sizeof(s->path), run_dir, (int)s->pid, n)) {
      snprintf(err, err_len,
               "GPUPROF_RUN_DIR=%s is too long for socket %d of pid %d (other processes with "
               "this pid serve the shorter names); the control socket is disabled",
               run_dir, n, (int)s->pid);
      ret = -ENAMETOOLONG;
      goto fail;
    }
    if (link(a.sun_path, s->path) == 0)
      break;
    if (errno != EEXIST) {
      ret = -errno;
      snprintf(err, err_len, "cannot create the control socket %s in GPUPROF_RUN_DIR: %s", s->path,
               strerror(errno));
      goto fail;
    }
    if (lstat(s->path, &sb) == 0 && !S_ISSOCK(sb.st_mode)) {
      snprintf(err, err_len,
               "%s exists and is not a socket; not replacing it: the control "
               "socket is disabled (remove it or set GPUPROF_RUN_DIR)",
               s->path);
      ret = -EEXIST;
      goto fail;
    }
    if (socket_is_live(s->path))
      continue; /* another agent with our pid (another pid namespace) */
    /* Stale: taken over, unless another agent is quicker (then link fails again). */
    unlink(s->path);
    if (++stale_tries < 8)
      n--;
  }
  if (n > MAX_SAME_PID) {
    snprintf(err, err_len,
             "%d other processes with pid %d serve sockets in GPUPROF_RUN_DIR=%s (a directory "
             "shared across pid namespaces); the control socket is disabled",
             MAX_SAME_PID, (int)s->pid, run_dir);
    ret = -EADDRINUSE;
    goto fail;
  }
  run_dir_unlock(lock_fd);
  unlink(a.sun_path);
  if (stat(s->path, &sb)) {
    ret = -errno;
    snprintf(err, err_len, "cannot create the control socket %s in GPUPROF_RUN_DIR: %s", s->path,
             strerror(errno));
    return ret;
  }
  if (n > 1)
    log_info("pid %d already has a control socket in %s (another pid namespace): this one is %s",
             (int)s->pid, run_dir, s->path);
  s->dev = sb.st_dev;
  s->ino = sb.st_ino;
  return 0;
fail:
  run_dir_unlock(lock_fd);
  unlink(a.sun_path);
  return ret;
}

static uint64_t now_ms(void)
{
  return clock_monotonic_ns() / 1000000ull;
}

/* Waits for fd to be ready (events) or the stop pipe. 1 ready, 0 timeout, -1 stop or error. */
static int wait_fd(struct control_server *s, int fd, short events, uint64_t deadline_ms)
{
  for (;;) {
    struct pollfd p[2] = {{.fd = fd, .events = events}, {.fd = s->stop_rd, .events = POLLIN}};
    uint64_t now = now_ms();
    int r;

    if (now >= deadline_ms)
      return 0;
    r = poll(p, 2, (int)(deadline_ms - now));
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0 || p[1].revents)
      return -1;
    if (r > 0)
      return 1;
  }
}

static void send_reply(struct control_server *s, int fd, int len, uint64_t deadline_ms)
{
  size_t off = 0;

  /* A reply that does not fit is a bug in the writer's sizing; say so rather than truncate. */
  if (len < 0) {
    struct control_writer w;
    control_writer_init(&w, s->reply, sizeof(s->reply));
    control_writer_header(&w, CONTROL_ERROR, CONTROL_E_FAILED);
    control_writer_add(&w, "message", "the reply did not fit in %d bytes", CONTROL_RESPONSE_MAX);
    len = control_writer_end(&w);
  }
  atomic_fetch_add(&s->requests, 1);
  while (off < (size_t)len) {
    ssize_t n = send(fd, s->reply + off, (size_t)len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      off += (size_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    /* A client that does not read its reply is given up on at the deadline. */
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) &&
        wait_fd(s, fd, POLLOUT, deadline_ms + 1000) > 0)
      continue;
    return;
  }
}

static int error_reply(struct control_server *s, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int error_reply(struct control_server *s, const char *code, const char *fmt, ...)
{
  struct control_writer w;
  char msg[1024];
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  control_writer_init(&w, s->reply, sizeof(s->reply));
  control_writer_header(&w, CONTROL_ERROR, code);
  control_writer_add(&w, "message", "%s", msg);
  return control_writer_end(&w);
}

/* Logs the first LOG_REJECTIONS of a kind, then says once that it stops. */
static void log_rejection(_Atomic unsigned long long *counter, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void log_rejection(_Atomic unsigned long long *counter, const char *fmt, ...)
{
  unsigned long long n = atomic_fetch_add(counter, 1) + 1;
  char msg[1024];
  va_list ap;

  if (n > LOG_REJECTIONS || !log_enabled(LOG_WARN))
    return;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  log_warn("%s%s", msg, n == LOG_REJECTIONS ? " (further such requests are not logged)" : "");
}

static void add_status(struct control_server *s, struct control_writer *w,
                       const struct capture_status *st)
{
  struct control_info info = {.mode = "?", .state = "?"};
  char ebuf[128];

  if (s->ops.describe)
    s->ops.describe(s->ops.arg, &info);
  control_writer_add(w, "pid", "%d", (int)s->pid);
  control_writer_add(w, "command", "%s", s->command);
  control_writer_add(w, "version", "%s", GPUPROF_VERSION_STRING);
  control_writer_add(w, "mode", "%s", info.mode);
  control_writer_add(w, "agent", "%s", info.state);
  control_writer_add(w, "gpus", "%s", info.gpus);
  control_writer_add_u64(w, "now_ns", clock_realtime_ns());
  control_writer_add(w, "capture.state", "%s", st->state == CAPTURE_RUNNING ? "running" : "idle");
  control_writer_add_u64(w, "capture.id", st->id);
  control_writer_add(w, "capture.gpu_only", "%d", st->gpu_only ? 1 : 0);
  control_writer_add_u64(w, "capture.started_ns", st->started_ns);
  control_writer_add_u64(w, "capture.ends_ns", st->ends_ns);
  control_writer_add_u64(w, "capture.events", st->events);
  control_writer_add_u64(w, "capture.bytes", st->bytes);
  control_writer_add_u64(w, "capture.dropped", st->dropped);
  control_writer_add(w, "capture.error", "%d", st->last_error);
  if (st->last_error)
    control_writer_add(w, "capture.error_text", "%s",
                       strerror_r(-st->last_error, ebuf, sizeof(ebuf)));
  for (size_t i = 0; i < st->n_files && i < CAPTURE_MAX_FILES; i++)
    control_writer_add(w, "capture.file", "%s", st->files[i]);
}

static int ok_reply(struct control_server *s, const struct capture_status *st)
{
  struct control_writer w;

  control_writer_init(&w, s->reply, sizeof(s->reply));
  control_writer_header(&w, CONTROL_OK, NULL);
  add_status(s, &w, st);
  return control_writer_end(&w);
}

static int do_capture(struct control_server *s, const struct control_request *req,
                      const struct ucred *peer)
{
  struct capture_params p;
  struct control_writer w;
  char err[512] = "";
  int ret;

  memset(&p, 0, sizeof(p));
  p.duration_ns = req->duration_ns;
  p.gpu_only = req->gpu_only;
  p.format = req->format;
  snprintf(p.output_dir, sizeof(p.output_dir), "%s", req->output_dir);
  ret = s->ops.capture_start(s->ops.arg, &p, err, sizeof(err));
  s->ops.capture_status(s->ops.arg, &s->st);
  if (ret == 0) {
    log_info("capture %llu started for uid %u (pid %d), ends in %llu ms",
             (unsigned long long)s->st.id, (unsigned)peer->uid, (int)peer->pid,
             (unsigned long long)(s->st.ends_ns > s->st.started_ns
                                      ? (s->st.ends_ns - s->st.started_ns) / 1000000ull
                                      : 0));
    return ok_reply(s, &s->st);
  }
  control_writer_init(&w, s->reply, sizeof(s->reply));
  if (ret == -EBUSY) {
    control_writer_header(&w, CONTROL_ERROR, CONTROL_E_BUSY);
    control_writer_add(&w, "message", "capture %llu is running in pid %d",
                       (unsigned long long)s->st.id, (int)s->pid);
  } else {
    char ebuf[128];
    control_writer_header(&w, CONTROL_ERROR, ret == -EINVAL ? CONTROL_E_INVALID : CONTROL_E_FAILED);
    control_writer_add(&w, "message", "%s", err[0] ? err : strerror_r(-ret, ebuf, sizeof(ebuf)));
  }
  add_status(s, &w, &s->st);
  return control_writer_end(&w);
}

static int handle(struct control_server *s, char *buf, size_t len, const struct ucred *peer)
{
  struct control_request req;
  char err[512];
  int ret = control_request_parse(buf, len, &req, err, sizeof(err));

  if (ret) {
    log_rejection(&s->malformed, "refused a malformed request from pid %d: %s", (int)peer->pid,
                  err);
    return error_reply(s, ret == -EPROTO ? CONTROL_E_VERSION : CONTROL_E_BAD_REQUEST, "%s", err);
  }
  log_debug("%s request from uid %u (pid %d)", control_command_name(req.cmd), (unsigned)peer->uid,
            (int)peer->pid);
  switch (req.cmd) {
  case CONTROL_CMD_CAPTURE:
    return do_capture(s, &req, peer);
  case CONTROL_CMD_STOP:
    ret = s->ops.capture_stop(s->ops.arg);
    s->ops.capture_status(s->ops.arg, &s->st);
    if (ret == -ENOENT)
      return error_reply(s, CONTROL_E_NOT_RUNNING, "no capture is running in pid %d", (int)s->pid);
    if (ret)
      return error_reply(s, CONTROL_E_FAILED, "stopping the capture failed: %s", strerror(-ret));
    return ok_reply(s, &s->st);
  case CONTROL_CMD_STATUS:
  default:
    s->ops.capture_status(s->ops.arg, &s->st);
    return ok_reply(s, &s->st);
  }
}

static void client_close(struct client *c)
{
  close(c->fd);
  c->fd = -1;
}

/* A new connection: another uid is refused at once; else it gets a slot and its deadline. */
static void client_accept(struct control_server *s, struct client *c, int fd)
{
  uint64_t deadline = now_ms() + s->client_timeout_ms;
  socklen_t plen = sizeof(c->peer);

  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &c->peer, &plen) || plen != sizeof(c->peer)) {
    close(fd);
    return;
  }
  if (c->peer.uid != s->euid && c->peer.uid != 0) {
    log_rejection(&s->denied,
                  "refused a request from uid %u (pid %d): only uid %u or root may "
                  "use %s",
                  (unsigned)c->peer.uid, (int)c->peer.pid, (unsigned)s->euid, s->path);
    send_reply(s, fd,
               error_reply(s, CONTROL_E_DENIED,
                           "uid %u may not use this socket (only uid %u or root)",
                           (unsigned)c->peer.uid, (unsigned)s->euid),
               deadline);
    close(fd);
    return;
  }
  c->fd = fd;
  c->len = 0;
  c->deadline_ms = deadline;
}

/*
 * Reads what the client sent so far. Once it is a complete request (one reply), too long,
 * truncated by the client's close, or out of time, replies and frees the slot.
 */
static void client_step(struct control_server *s, struct client *c, uint64_t now)
{
  int reply;

  for (;;) {
    ssize_t n;

    if (control_msg_complete(c->req, c->len)) {
      /* Data after the empty line is refused by parsing all that arrived: one request per
       * connection. */
      c->req[c->len] = '\0';
      reply = handle(s, c->req, c->len, &c->peer);
      goto answer;
    }
    if (c->len == CONTROL_REQUEST_MAX) {
      log_rejection(&s->malformed, "refused a request from pid %d: longer than %d bytes",
                    (int)c->peer.pid, CONTROL_REQUEST_MAX);
      reply = error_reply(s, CONTROL_E_TOO_LARGE, "a request has at most %d bytes",
                          CONTROL_REQUEST_MAX);
      goto answer;
    }
    n = recv(c->fd, c->req + c->len, CONTROL_REQUEST_MAX - c->len, 0);
    if (n > 0) {
      c->len += (size_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      break;
    if (n < 0 || c->len == 0) {
      /* A connection closed before saying anything is a liveness probe, not an error. */
      client_close(c);
      return;
    }
    log_rejection(&s->malformed,
                  "refused a truncated request from pid %d (%zu bytes, no "
                  "empty line)",
                  (int)c->peer.pid, c->len);
    reply = error_reply(s, CONTROL_E_BAD_REQUEST,
                        "truncated request: the connection ended before the empty line");
    goto answer;
  }
  if (now < c->deadline_ms)
    return; /* more to come */
  log_rejection(&s->malformed,
                "gave up on a client (pid %d) that sent no complete request "
                "within %u ms",
                (int)c->peer.pid, s->client_timeout_ms);
  reply =
      error_reply(s, CONTROL_E_TIMEOUT, "no complete request within %u ms", s->client_timeout_ms);
answer:
  send_reply(s, c->fd, reply, c->deadline_ms);
  client_close(c);
}

static void *server_main(void *arg)
{
  struct control_server *s = arg;

  /* Whatever this thread calls (capture_start may reach CUPTI) must not re-enter the agent. */
  guard_hold();
  for (;;) {
    struct pollfd p[2 + MAX_CLIENTS];
    int slot[2 + MAX_CLIENTS];
    nfds_t np = 2;
    uint64_t now = now_ms(), next = UINT64_MAX;
    int free_slot = -1, timeout;

    p[0] = (struct pollfd){.fd = s->stop_rd, .events = POLLIN};
    p[1] = (struct pollfd){.fd = -1, .events = POLLIN}; /* the listener, while a slot is free */
    for (int i = 0; i < MAX_CLIENTS; i++) {
      struct client *c = &s->clients[i];
      if (c->fd < 0) {
        free_slot = free_slot < 0 ? i : free_slot;
        continue;
      }
      slot[np] = i;
      p[np++] = (struct pollfd){.fd = c->fd, .events = POLLIN};
      if (c->deadline_ms < next)
        next = c->deadline_ms;
    }
    if (free_slot >= 0)
      p[1].fd = s->listen_fd;
    timeout = next == UINT64_MAX ? -1 : next <= now ? 0 : (int)(next - now);
    if (poll(p, np, timeout) < 0) {
      if (errno == EINTR)
        continue;
      break;
    }
    if (p[0].revents)
      break;
    now = now_ms();
    for (nfds_t i = 2; i < np; i++) {
      struct client *c = &s->clients[slot[i]];
      if (p[i].revents || now >= c->deadline_ms)
        client_step(s, c, now);
    }
    if (p[1].revents) {
      int fd = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);

      if (fd >= 0) {
        client_accept(s, &s->clients[free_slot], fd);
      } else if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        /* Out of descriptors: the pending connection stays readable; do not spin on it. */
        struct pollfd q = {.fd = s->stop_rd, .events = POLLIN};
        if (poll(&q, 1, 100) > 0)
          break;
      }
    }
  }
  for (int i = 0; i < MAX_CLIENTS; i++)
    if (s->clients[i].fd >= 0)
      client_close(&s->clients[i]);
  return NULL;
}

struct control_server *control_server_start(const char *run_dir, const struct control_ops *ops,
                                            unsigned client_timeout_ms, char *err, size_t err_len)
{
  struct control_server *s = calloc(1, sizeof(*s));
  int pipefd[2] = {-1, -1};
  int ret;

  if (!s) {
    snprintf(err, err_len, "out of memory; the control socket is disabled");
    return NULL;
  }
  s->listen_fd = -1;
  for (int i = 0; i < MAX_CLIENTS; i++)
    s->clients[i].fd = -1;
  s->ops = *ops;
  s->client_timeout_ms = client_timeout_ms ? client_timeout_ms : CONTROL_DEFAULT_CLIENT_TIMEOUT_MS;
  s->pid = getpid();
  s->euid = geteuid();
  read_command(s->command, sizeof(s->command));
  if (pipe2(pipefd, O_CLOEXEC | O_NONBLOCK)) {
    ret = -errno;
    snprintf(err, err_len, "cannot create a pipe: %s; the control socket is disabled",
             strerror(errno));
    goto out;
  }
  s->stop_rd = pipefd[0];
  s->stop_wr = pipefd[1];
  ret = create_socket(s, run_dir, err, err_len);
  if (ret)
    goto out;

  ret = bthread_start(&s->thread, "gpuprof-ctl", server_main, s);
  if (ret) {
    snprintf(err, err_len, "cannot start the control thread: %s; the control socket is disabled",
             strerror(-ret));
    unlink(s->path);
    goto out;
  }
  s->started = 1;
out:
  if (ret) {
    if (s->listen_fd >= 0)
      close(s->listen_fd);
    if (pipefd[0] >= 0) {
      close(pipefd[0]);
      close(pipefd[1]);
    }
    free(s);
    return NULL;
  }
  return s;
}

const char *control_server_path(const struct control_server *s)
{
  return s->path;
}

void control_server_stop(struct control_server *s)
{
  struct stat sb;
  int joined = 1;

  if (!s)
    return;
  if (s->started) {
    if (write(s->stop_wr, "x", 1) < 0)
      log_debug("cannot wake the control thread: %s", strerror(errno));
    /* On the monotonic clock: a wall-clock step at exit must not stretch or cut the wait. */
    if (bthread_join_within(s->thread, STOP_JOIN_TIMEOUT_MS * 1000000ull)) {
      log_warn("the control thread did not finish within %d ms; leaving it", STOP_JOIN_TIMEOUT_MS);
      joined = 0;
    }
  }
  /* Only our own socket: a later process with the same pid may have replaced it. */
  if (lstat(s->path, &sb) == 0 && sb.st_dev == s->dev && sb.st_ino == s->ino)
    unlink(s->path);
  if (!joined)
    return; /* the thread may still use s */
  close(s->listen_fd);
  close(s->stop_rd);
  close(s->stop_wr);
  free(s);
}

void control_server_forget(struct control_server *s)
{
  if (!s)
    return;
  close(s->listen_fd);
  close(s->stop_rd);
  close(s->stop_wr);
  s->listen_fd = s->stop_rd = s->stop_wr = -1;
  /* Connections the parent was reading: the child must not keep them open. */
  for (int i = 0; i < MAX_CLIENTS; i++)
    if (s->clients[i].fd >= 0)
      close(s->clients[i].fd);
  s->started = 0;
}

void control_server_get_stats(const struct control_server *s, struct control_stats *out)
{
  out->requests = atomic_load(&s->requests);
  out->denied = atomic_load(&s->denied);
  out->malformed = atomic_load(&s->malformed);
}
