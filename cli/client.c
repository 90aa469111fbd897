/* The gpuprof command's side of the control socket: finding agents and asking them things. */
#define _GNU_SOURCE
#include "cli/client.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

const char *client_run_dir(const char *opt)
{
  const char *env = getenv("GPUPROF_RUN_DIR");

  if (opt && *opt)
    return opt;
  return env && *env ? env : CONTROL_DEFAULT_RUN_DIR;
}

/* The pid of a name "gpuprof-<pid>.sock" or "gpuprof-<pid>.<n>.sock" (a second agent with the
 * same pid, from another pid namespace: agent/control.c), or -1. */
static int socket_pid(const char *name)
{
  size_t pl = strlen(CONTROL_SOCKET_PREFIX), sl = strlen(CONTROL_SOCKET_SUFFIX);
  size_t n = strlen(name), i;
  long pid = 0, nth = 0;

  if (n <= pl + sl || strncmp(name, CONTROL_SOCKET_PREFIX, pl) ||
      strcmp(name + n - sl, CONTROL_SOCKET_SUFFIX))
    return -1;
  for (i = pl; i < n - sl && name[i] != '.'; i++) {
    if (name[i] < '0' || name[i] > '9' || pid > 99999999)
      return -1;
    pid = pid * 10 + (name[i] - '0');
  }
  if (i < n - sl) {
    /* ".<n>", n >= 2 */
    for (i++; i < n - sl; i++) {
      if (name[i] < '0' || name[i] > '9' || nth > 999)
        return -1;
      nth = nth * 10 + (name[i] - '0');
    }
    if (nth < 2)
      return -1;
  }
  return pid > 0 ? (int)pid : -1;
}

static int by_pid(const void *a, const void *b)
{
  const struct agent_socket *x = a, *y = b;
  return (x->pid > y->pid) - (x->pid < y->pid);
}

int client_scan(const char *dir, struct agent_socket **out, size_t *n)
{
  DIR *d = opendir(dir);
  struct agent_socket *v = NULL;
  size_t cnt = 0, cap = 0;
  struct dirent *e;
  int ret = 0;

  *out = NULL;
  *n = 0;
  if (!d)
    return -errno;
  while ((e = readdir(d))) {
    struct agent_socket a;
    struct stat sb;
    int pid = socket_pid(e->d_name);

    if (pid < 0)
      continue;
    a.pid = pid;
    if ((size_t)snprintf(a.path, sizeof(a.path), "%s/%s", dir, e->d_name) >= sizeof(a.path))
      continue;
    if (lstat(a.path, &sb) || !S_ISSOCK(sb.st_mode))
      continue;
    a.owner = sb.st_uid;
    a.dev = sb.st_dev;
    a.ino = sb.st_ino;
    if (cnt == cap) {
      size_t nc = cap ? cap * 2 : 16;
      struct agent_socket *nv = realloc(v, nc * sizeof(*v));
      if (!nv) {
        ret = -ENOMEM;
        goto out;
      }
      v = nv;
      cap = nc;
    }
    v[cnt++] = a;
  }
  if (cnt)
    qsort(v, cnt, sizeof(*v), by_pid);
out:
  closedir(d);
  if (ret) {
    free(v);
    return ret;
  }
  *out = v;
  *n = cnt;
  return 0;
}

static uint64_t now_ms(void)
{
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* poll for one fd until deadline; 1 ready, 0 timeout, -errno. */
static int wait_fd(int fd, short events, uint64_t deadline)
{
  for (;;) {
    struct pollfd p = {.fd = fd, .events = events};
    uint64_t now = now_ms();
    int r;

    if (now >= deadline)
      return 0;
    r = poll(&p, 1, (int)(deadline - now));
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0)
      return -errno;
    return r > 0;
  }
}

#define RUN_DIR_LOCK_WAIT_MS 1000

int client_remove_stale(const char *dir, const struct agent_socket *a)
{
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), fd = -1, ret;
  struct stat sb;

  if (dfd < 0)
    return -errno;
  /* The lock an agent holds from judging a name stale to linking its own socket there. */
  for (int waited = 0; flock(dfd, LOCK_EX | LOCK_NB); waited += 10) {
    if (errno != EWOULDBLOCK || waited >= RUN_DIR_LOCK_WAIT_MS) {
      ret = errno == EWOULDBLOCK ? -EBUSY : -errno;
      goto out;
    }
    usleep(10000);
  }
  if (lstat(a->path, &sb)) {
    ret = -errno;
    goto out;
  }
  snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", a->path);
  fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    ret = -errno;
    goto out;
  }
  /* Still the file scanned, and still nobody listening (EAGAIN: a full backlog, a listener). */
  if (!S_ISSOCK(sb.st_mode) || sb.st_dev != a->dev || sb.st_ino != a->ino ||
      connect(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0 || errno != ECONNREFUSED) {
    ret = -ESTALE;
    goto out;
  }
  ret = unlink(a->path) ? -errno : 0;
out:
  if (fd >= 0)
    close(fd);
  close(dfd); /* releases the lock */
  return ret;
}

/*
 * The run directory may be shared (an emptyDir, /tmp): whoever can write there can plant a
 * gpuprof-<pid>.sock. Its listener, not the file, is what answers: only one running as our
 * uid or as root is trusted with a request (it may carry an output path) and with its reply
 * (the file paths we print for scripts). Root talks to every user's agent (a root sidecar).
 */
static int check_server(int fd, const char *path, char *err, size_t err_len)
{
  struct ucred peer;
  socklen_t plen = sizeof(peer);
  uid_t me = geteuid();

  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &plen) || plen != sizeof(peer)) {
    snprintf(err, err_len, "%s: cannot tell who serves it: %s", path, strerror(errno));
    return -EPROTO;
  }
  if (me == 0 || peer.uid == me || peer.uid == 0)
    return 0;
  snprintf(err, err_len,
           "refusing %s: it is served by uid %u (pid %d), neither you (uid %u) nor root; not "
           "your agent (a socket planted in a shared run directory?)",
           path, (unsigned)peer.uid, (int)peer.pid, (unsigned)me);
  return -EPERM;
}

int client_request(const char *path, const struct control_request *req, unsigned timeout_ms,
                   struct client_reply *rep, char *err, size_t err_len)
{
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  uint64_t deadline = now_ms() + timeout_ms;
  char out[CONTROL_REQUEST_MAX];
  size_t off = 0, len = 0;
  int fd = -1, n, ret;

  err[0] = '\0';
  n = control_request_write(req, out, sizeof(out));
  if (n < 0) {
    snprintf(err, err_len, "cannot encode the request: %s", strerror(-n));
    return n;
  }
  if ((size_t)snprintf(a.sun_path, sizeof(a.sun_path), "%s", path) >= sizeof(a.sun_path)) {
    snprintf(err, err_len, "%s: path too long for a socket", path);
    return -ENAMETOOLONG;
  }
  fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    ret = -errno;
    snprintf(err, err_len, "socket: %s", strerror(errno));
    goto out;
  }
  /* A full backlog (a busy or stuck agent) makes a non-blocking connect fail with EAGAIN. */
  while (connect(fd, (struct sockaddr *)&a, sizeof(a))) {
    if (errno == EAGAIN && now_ms() < deadline) {
      usleep(20000);
      continue;
    }
    ret = errno == EAGAIN ? -ETIMEDOUT : -errno;
    snprintf(err, err_len, "%s", strerror(-ret));
    goto out;
  }
  ret = check_server(fd, path, err, err_len);
  if (ret)
    goto out;
  while (off < (size_t)n) {
    ssize_t w = send(fd, out + off, (size_t)n - off, MSG_NOSIGNAL);
    if (w > 0) {
      off += (size_t)w;
      continue;
    }
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0 && errno == EAGAIN && (ret = wait_fd(fd, POLLOUT, deadline)) > 0)
      continue;
    ret = w < 0 && errno != EAGAIN ? -errno : -ETIMEDOUT;
    snprintf(err, err_len, "sending the request: %s", strerror(-ret));
    goto out;
  }
  for (;;) {
    ssize_t r;

    if (len && control_msg_complete(rep->buf, len))
      break;
    if (len == CONTROL_RESPONSE_MAX) {
      ret = -EPROTO;
      snprintf(err, err_len, "the reply is longer than %d bytes", CONTROL_RESPONSE_MAX);
      goto out;
    }
    ret = wait_fd(fd, POLLIN, deadline);
    if (ret <= 0) {
      ret = ret ? ret : -ETIMEDOUT;
      snprintf(err, err_len, "no reply within %u ms", timeout_ms);
      goto out;
    }
    r = recv(fd, rep->buf + len, CONTROL_RESPONSE_MAX - len, 0);
    if (r < 0 && (errno == EINTR || errno == EAGAIN))
      continue;
    if (r <= 0) {
      ret = r ? -errno : -EPROTO;
      snprintf(err, err_len, "the agent closed the connection %s",
               r ? strerror(errno) : "before replying");
      goto out;
    }
    len += (size_t)r;
  }
  rep->buf[len] = '\0';
  ret = control_msg_parse(rep->buf, control_msg_complete(rep->buf, len), &rep->msg, err, err_len);
  if (ret == 0 && (rep->msg.version != CONTROL_PROTO_VERSION ||
                   (strcmp(rep->msg.word, CONTROL_OK) && strcmp(rep->msg.word, CONTROL_ERROR)))) {
    snprintf(err, err_len, "unexpected reply header (protocol version %u, '%s')", rep->msg.version,
             rep->msg.word);
    ret = -EPROTO;
  } else if (ret) {
    ret = -EPROTO;
  }
  if (ret == 0)
    rep->ok = strcmp(rep->msg.word, CONTROL_OK) == 0;
  /* Every error reply names its code; one without is not from a gpuprof agent. */
  if (ret == 0 && !rep->ok && !rep->msg.code) {
    snprintf(err, err_len, "an error reply without a code");
    ret = -EPROTO;
  }
out:
  if (fd >= 0)
    close(fd);
  return ret;
}

static uint64_t get_u64(const struct control_msg *m, const char *key)
{
  const char *v = control_msg_get(m, key);
  uint64_t x = 0;

  if (v && control_parse_u64(v, &x))
    x = 0;
  return x;
}

static const char *get_str(const struct control_msg *m, const char *key)
{
  const char *v = control_msg_get(m, key);
  return v ? v : "";
}

void client_status_read(const struct client_reply *rep, struct client_status *st)
{
  const struct control_msg *m = &rep->msg;
  const char *err;

  memset(st, 0, sizeof(*st));
  st->pid = (int)get_u64(m, "pid");
  st->command = get_str(m, "command");
  st->version = get_str(m, "version");
  st->mode = get_str(m, "mode");
  st->agent = get_str(m, "agent");
  st->gpus = get_str(m, "gpus");
  st->message = get_str(m, "message");
  st->running = strcmp(get_str(m, "capture.state"), "running") == 0;
  st->id = get_u64(m, "capture.id");
  st->now_ns = get_u64(m, "now_ns");
  st->started_ns = get_u64(m, "capture.started_ns");
  st->ends_ns = get_u64(m, "capture.ends_ns");
  st->events = get_u64(m, "capture.events");
  st->bytes = get_u64(m, "capture.bytes");
  st->dropped = get_u64(m, "capture.dropped");
  st->gpu_only = get_u64(m, "capture.gpu_only") != 0;
  err = get_str(m, "capture.error");
  st->error = *err ? atoi(err) : 0;
  st->error_text = get_str(m, "capture.error_text");
  for (size_t i = 0; i < m->n_fields; i++)
    if (strcmp(m->fields[i].key, "capture.file") == 0 &&
        st->n_files < sizeof(st->files) / sizeof(st->files[0]))
      st->files[st->n_files++] = m->fields[i].value;
}

int client_parse_duration(const char *s, uint64_t *ns)
{
  static const struct {
    const char *suffix;
    uint64_t mult;
  } units[] = {
      {"ns", 1ull},          {"us", 1000ull},         {"ms", 1000000ull},      {"s", 1000000000ull},
      {"m", 60000000000ull}, {"min", 60000000000ull}, {"h", 3600000000000ull}, {"", 1000000000ull}};
  uint64_t v = 0;
  const char *p = s;

  if (*p < '0' || *p > '9')
    return -EINVAL;
  for (; *p >= '0' && *p <= '9'; p++) {
    if (v > (UINT64_MAX - 9) / 10)
      return -EINVAL;
    v = v * 10 + (uint64_t)(*p - '0');
  }
  for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
    if (strcmp(p, units[i].suffix) == 0) {
      if (v > UINT64_MAX / units[i].mult)
        return -EINVAL;
      *ns = v * units[i].mult;
      return 0;
    }
  }
  return -EINVAL;
}
