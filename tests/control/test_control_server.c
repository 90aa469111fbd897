/* Unit tests of the control server with test ops: replies, busy, bad clients, permissions. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stddef.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>

#include "agent/control.h"
#include "export/control_proto.h"
#include "tests/unit/unit.h"

/* ---- test ops: a fake capture engine ---- */

static struct {
  pthread_mutex_t lock;
  struct capture_params last;
  int starts, stops;
  struct capture_status st;
  int fail_with; /* capture_start returns this when nonzero */
} fake = {.lock = PTHREAD_MUTEX_INITIALIZER};

static int fake_start(void *arg, const struct capture_params *p, char *err, size_t err_len)
{
  int ret = 0;

  (void)arg;
  pthread_mutex_lock(&fake.lock);
  if (fake.fail_with) {
    ret = fake.fail_with;
    snprintf(err, err_len, "cannot write to %s", p->output_dir);
  } else if (fake.st.state == CAPTURE_RUNNING) {
    ret = -EBUSY;
  } else {
    fake.last = *p;
    fake.starts++;
    fake.st.state = CAPTURE_RUNNING;
    fake.st.id++;
    fake.st.started_ns = 1000;
    fake.st.ends_ns = 1000 + (p->duration_ns ? p->duration_ns : CAPTURE_DEFAULT_DURATION_NS);
    fake.st.events = 0;
    fake.st.n_files = 0;
  }
  pthread_mutex_unlock(&fake.lock);
  return ret;
}

static int fake_stop(void *arg)
{
  int ret = 0;

  (void)arg;
  pthread_mutex_lock(&fake.lock);
  if (fake.st.state != CAPTURE_RUNNING) {
    ret = -ENOENT;
  } else {
    fake.stops++;
    fake.st.state = CAPTURE_IDLE;
    fake.st.events = 42;
    fake.st.bytes = 4096;
    fake.st.n_files = 1;
    snprintf(fake.st.files[0], sizeof(fake.st.files[0]), "/out/trace-%llu.json",
             (unsigned long long)fake.st.id);
  }
  pthread_mutex_unlock(&fake.lock);
  return ret;
}

static void fake_status(void *arg, struct capture_status *out)
{
  (void)arg;
  pthread_mutex_lock(&fake.lock);
  *out = fake.st;
  pthread_mutex_unlock(&fake.lock);
}

static void fake_describe(void *arg, struct control_info *out)
{
  (void)arg;
  out->mode = "ondemand";
  out->state = "active";
  snprintf(out->gpus, sizeof(out->gpus), "0,1");
}

static const struct control_ops ops = {
    .capture_start = fake_start,
    .capture_stop = fake_stop,
    .capture_status = fake_status,
    .describe = fake_describe,
};

/* ---- a raw client ---- */

static char tmpdir[256];

static int dial(const char *path)
{
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

  snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
  if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0)
    return fd;
  if (fd >= 0) {
    int e = errno;
    close(fd);
    errno = e;
  }
  return -1;
}

/* Reads until EOF (the server closes after its reply) or 5 s; NUL-terminated. */
static size_t read_all(int fd, char *buf, size_t cap)
{
  size_t len = 0;

  for (;;) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    ssize_t n;

    if (poll(&p, 1, 5000) <= 0)
      break;
    n = read(fd, buf + len, cap - 1 - len);
    if (n <= 0)
      break;
    len += (size_t)n;
    if (len == cap - 1)
      break;
  }
  buf[len] = '\0';
  return len;
}

/* Sends data (len bytes; shut_wr: then closes our side) and returns the reply. */
static char *exchange(const char *path, const char *data, size_t len, int shut_wr)
{
  static char reply[CONTROL_RESPONSE_MAX + 1];
  int fd = dial(path);

  reply[0] = '\0';
  if (fd < 0) {
    fprintf(stderr, "connect %s: %s\n", path, strerror(errno));
    return reply;
  }
  if (len && write(fd, data, len) != (ssize_t)len)
    fprintf(stderr, "short write\n");
  if (shut_wr)
    shutdown(fd, SHUT_WR);
  read_all(fd, reply, sizeof(reply));
  close(fd);
  return reply;
}

static char *request(const char *path, const char *text)
{
  return exchange(path, text, strlen(text), 0);
}

/* The value of key in a reply (a copy), or "" */
static const char *field(const char *reply, const char *key)
{
  static char val[4096];
  char pat[64];
  const char *p, *e;

  snprintf(pat, sizeof(pat), "\n%s=", key);
  p = strstr(reply, pat);
  if (!p)
    return "";
  p += strlen(pat);
  e = strchr(p, '\n');
  snprintf(val, sizeof(val), "%.*s", (int)(e ? e - p : (ptrdiff_t)strlen(p)), p);
  return val;
}

static int starts_with(const char *s, const char *prefix)
{
  return strncmp(s, prefix, strlen(prefix)) == 0;
}

static struct control_server *start_server(const char *dir, unsigned timeout_ms)
{
  char err[512] = "";
  struct control_server *s = control_server_start(dir, &ops, timeout_ms, err, sizeof(err));

  if (!s)
    fprintf(stderr, "control_server_start: %s\n", err);
  return s;
}

/* ---- tests ---- */

static void test_socket_file(void)
{
  char dir[512], path[600];
  struct control_server *s;
  struct stat sb;

  /* Missing directories are created, private. */
  snprintf(dir, sizeof(dir), "%s/a/run", tmpdir);
  s = start_server(dir, 0);
  CHECK(s != NULL);
  if (!s)
    return;
  snprintf(path, sizeof(path), "%s/gpuprof-%d.sock", dir, (int)getpid());
  CHECK_STR(control_server_path(s), path);
  CHECK_EQ(lstat(path, &sb), 0);
  CHECK(S_ISSOCK(sb.st_mode));
  CHECK_EQ(sb.st_mode & 0777, 0600);
  CHECK_EQ(stat(dir, &sb), 0);
  CHECK_EQ(sb.st_mode & 0777, 0700);
  /* Its parents are not private: other users' agents write their outputs beside it. */
  {
    mode_t mask = umask(0);
    umask(mask);
    snprintf(path, sizeof(path), "%s/a", tmpdir);
    CHECK_EQ(stat(path, &sb), 0);
    CHECK_EQ(sb.st_mode & 0777, 0755 & ~mask);
  }
  /* No temporary name is left behind. */
  snprintf(path, sizeof(path), "%s/.gpuprof-%d.tmp", dir, (int)getpid());
  CHECK(access(path, F_OK) != 0);
  control_server_stop(s);
  /* Removed at stop; the directory stays. */
  CHECK_EQ(access(dir, F_OK), 0);
  snprintf(path, sizeof(path), "%s/gpuprof-%d.sock", dir, (int)getpid());
  CHECK(access(path, F_OK) != 0);
}

static void test_status_capture_stop(void)
{
  struct control_server *s = start_server(tmpdir, 0);
  const char *path;
  char *r;

  CHECK(s != NULL);
  if (!s)
    return;
  path = control_server_path(s);

  r = request(path, "GPUPROF/1 status\n\n");
  CHECK(starts_with(r, "GPUPROF/1 ok\n"));
  CHECK_EQ(strtol(field(r, "pid"), NULL, 10), getpid());
  CHECK(strstr(field(r, "command"), "test_control_server") != NULL);
  CHECK_STR(field(r, "mode"), "ondemand");
  CHECK_STR(field(r, "agent"), "active");
  CHECK_STR(field(r, "gpus"), "0,1");
  CHECK_STR(field(r, "capture.state"), "idle");
  CHECK_STR(field(r, "capture.id"), "0");

  r = request(path, "GPUPROF/1 capture\nduration_ns=3000000000\ngpu_only=1\nformat=perfetto\n"
                    "output=/traces here\n\n");
  CHECK(starts_with(r, "GPUPROF/1 ok\n"));
  CHECK_STR(field(r, "capture.state"), "running");
  CHECK_STR(field(r, "capture.id"), "1");
  CHECK_STR(field(r, "capture.ends_ns"), "3000001000");
  CHECK_EQ(fake.last.duration_ns, 3000000000ull);
  CHECK_EQ(fake.last.gpu_only, 1);
  CHECK_EQ(fake.last.format, CONFIG_TRACE_PERFETTO);
  CHECK_STR(fake.last.output_dir, "/traces here");

  /* A second capture while one runs: busy, naming the running one. */
  r = request(path, "GPUPROF/1 capture\n\n");
  CHECK(starts_with(r, "GPUPROF/1 error busy\n"));
  CHECK(strstr(field(r, "message"), "capture 1 is running") != NULL);
  CHECK_EQ(fake.starts, 1);

  r = request(path, "GPUPROF/1 stop\n\n");
  CHECK(starts_with(r, "GPUPROF/1 ok\n"));
  CHECK_STR(field(r, "capture.state"), "idle");
  CHECK_STR(field(r, "capture.events"), "42");
  CHECK_STR(field(r, "capture.file"), "/out/trace-1.json");
  r = request(path, "GPUPROF/1 stop\n\n");
  CHECK(starts_with(r, "GPUPROF/1 error not-running\n"));

  /* Defaults travel as "the agent's": -1 and "". */
  r = request(path, "GPUPROF/1 capture\n\n");
  CHECK(starts_with(r, "GPUPROF/1 ok\n"));
  CHECK_EQ(fake.last.duration_ns, 0);
  CHECK_EQ(fake.last.gpu_only, -1);
  CHECK_EQ(fake.last.format, -1);
  CHECK_STR(fake.last.output_dir, "");
  CHECK_STR(field(r, "capture.id"), "2");
  request(path, "GPUPROF/1 stop\n\n");

  /* capture_start failures: invalid and other errors carry the engine's reason. */
  fake.fail_with = -EACCES;
  r = request(path, "GPUPROF/1 capture\noutput=/root/x\n\n");
  CHECK(starts_with(r, "GPUPROF/1 error failed\n"));
  CHECK_STR(field(r, "message"), "cannot write to /root/x");
  fake.fail_with = -EINVAL;
  r = request(path, "GPUPROF/1 capture\n\n");
  CHECK(starts_with(r, "GPUPROF/1 error invalid\n"));
  fake.fail_with = 0;
  control_server_stop(s);
}

static void test_bad_clients(void)
{
  struct control_server *s = start_server(tmpdir, 300);
  int starts = fake.starts;
  struct control_stats stats;
  const char *path;
  char big[CONTROL_REQUEST_MAX + 100];
  char *r;
  int fd;

  CHECK(s != NULL);
  if (!s)
    return;
  path = control_server_path(s);

  r = request(path, "GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  CHECK(starts_with(r, "GPUPROF/1 error bad-request\n"));
  CHECK(strstr(field(r, "message"), "first line") != NULL);

  r = request(path, "GPUPROF/9 status\n\n");
  CHECK(starts_with(r, "GPUPROF/1 error version\n"));

  r = request(path, "GPUPROF/1 status\n\nGPUPROF/1 capture\n\n");
  CHECK(starts_with(r, "GPUPROF/1 error bad-request\n"));
  CHECK(strstr(field(r, "message"), "one message per connection") != NULL);
  CHECK_EQ(fake.starts, starts);

  /* Oversized: more than CONTROL_REQUEST_MAX bytes without an empty line. */
  memset(big, 'a', sizeof(big));
  memcpy(big, "GPUPROF/1 capture\noutput=/", 26);
  r = exchange(path, big, sizeof(big), 0);
  CHECK(starts_with(r, "GPUPROF/1 error too-large\n"));

  /* Truncated: half a request, then the client closes its side. */
  r = exchange(path, "GPUPROF/1 capture\nduration", 26, 1);
  CHECK(starts_with(r, "GPUPROF/1 error bad-request\n"));
  CHECK(strstr(field(r, "message"), "truncated") != NULL);

  /* A slow client that sends nothing: given up on after the timeout, with a reply... */
  fd = dial(path);
  CHECK(fd >= 0);
  if (fd >= 0) {
    char buf[1024];
    read_all(fd, buf, sizeof(buf));
    CHECK(starts_with(buf, "GPUPROF/1 error timeout\n"));
    close(fd);
  }
  /* ...and half a request: the server is free again afterwards. */
  fd = dial(path);
  if (fd >= 0) {
    char buf[1024];
    CHECK_EQ(write(fd, "GPUPROF/1 sta", 13), 13);
    r = request(path, "GPUPROF/1 status\n\n"); /* waits behind the slow client */
    CHECK(starts_with(r, "GPUPROF/1 ok\n"));
    read_all(fd, buf, sizeof(buf));
    CHECK(starts_with(buf, "GPUPROF/1 error timeout\n"));
    close(fd);
  }
  /* A connection closed without a byte is a probe: no reply, not counted. */
  close(dial(path));

  r = request(path, "GPUPROF/1 status\n\n");
  CHECK(starts_with(r, "GPUPROF/1 ok\n"));
  control_server_get_stats(s, &stats);
  CHECK_EQ(stats.malformed, 7);
  CHECK_EQ(stats.denied, 0);
  control_server_stop(s);
}

/* Clients that connect and send nothing (a probe that hangs, a stuck script) do not hold up
 * the others: a request behind several of them is answered at once, not after each one's
 * timeout (here 7 x 3 s, past the 5 s read_all gives any reply). */
static void test_silent_clients(void)
{
  struct control_server *s = start_server(tmpdir, 3000);
  int fds[7];
  char *r;

  CHECK(s != NULL);
  if (!s)
    return;
  for (int i = 0; i < 7; i++)
    fds[i] = dial(control_server_path(s));
  r = request(control_server_path(s), "GPUPROF/1 status\n\n");
  CHECK(starts_with(r, "GPUPROF/1 ok\n"));
  /* Half a request from one of them completes it later: answered too. */
  CHECK_EQ(write(fds[0], "GPUPROF/1 sta", 13), 13);
  CHECK_EQ(write(fds[0], "tus\n\n", 5), 5);
  {
    char buf[CONTROL_RESPONSE_MAX];
    read_all(fds[0], buf, sizeof(buf));
    CHECK(starts_with(buf, "GPUPROF/1 ok\n"));
    /* The silent ones are given up on with a reply when their time is up. */
    read_all(fds[1], buf, sizeof(buf));
    CHECK(starts_with(buf, "GPUPROF/1 error timeout\n"));
  }
  for (int i = 0; i < 7; i++)
    if (fds[i] >= 0)
      close(fds[i]);
  control_server_stop(s);
}

/* Random and mutated requests through the socket: every one gets a well-formed reply. */
static void test_socket_fuzz(void)
{
  struct control_server *s = start_server(tmpdir, 200);
  uint64_t x = 12345;
  int replies = 0;

  CHECK(s != NULL);
  if (!s)
    return;
  for (int i = 0; i < 300; i++) {
    char buf[512];
    size_t n = 1 + (size_t)(i % 200);
    char *r;

    for (size_t k = 0; k < n; k++) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      buf[k] = (char)(k % 5 == 4 ? '\n' : (char)(x & 0xff));
    }
    memcpy(buf, "GPUPROF/1 ", n < 10 ? n : 10);
    if (n >= 2 && i % 2) {
      buf[n - 2] = '\n';
      buf[n - 1] = '\n';
    }
    r = exchange(control_server_path(s), buf, n, 1);
    replies += starts_with(r, "GPUPROF/1 ") && control_msg_complete(r, strlen(r)) == strlen(r);
  }
  CHECK_EQ(replies, 300);
  CHECK(starts_with(request(control_server_path(s), "GPUPROF/1 status\n\n"), "GPUPROF/1 ok\n"));
  control_server_stop(s);
  /* Whatever the fuzz did, no capture was left running by accident beyond what it asked. */
  fake_stop(NULL);
}

/* A listener with our pid that never accepts (a stopped process) and whose backlog is full:
 * the agent's probe of it (inside cuInit) must not wait; it is a live socket, left alone. */
static void test_full_backlog(void)
{
  char dir[512], path[600], err[512];
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  int lfd, cfd[64], n = 0;
  struct control_server *s;

  snprintf(dir, sizeof(dir), "%s/backlog", tmpdir);
  mkdir(dir, 0700);
  snprintf(path, sizeof(path), "%s/gpuprof-%d.sock", dir, (int)getpid());
  lfd = socket(AF_UNIX, SOCK_STREAM, 0);
  memcpy(a.sun_path, path, strlen(path) + 1);
  CHECK_EQ(bind(lfd, (struct sockaddr *)&a, sizeof(a)), 0);
  CHECK_EQ(listen(lfd, 0), 0);
  /* Fill the backlog: non-blocking connects until one would wait. */
  while (n < 64) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
      CHECK_EQ(errno, EAGAIN);
      close(fd);
      break;
    }
    cfd[n++] = fd;
  }
  CHECK(n < 64);
  s = control_server_start(dir, &ops, 0, err, sizeof(err));
  CHECK(s != NULL);
  if (s) {
    /* It counts as live: this agent takes the next name, left alone by nobody. */
    char second[600];
    snprintf(second, sizeof(second), "%s/gpuprof-%d.2.sock", dir, (int)getpid());
    CHECK(starts_with(request(second, "GPUPROF/1 status\n\n"), "GPUPROF/1 ok\n"));
    control_server_stop(s);
  }
  while (n > 0)
    close(cfd[--n]);
  close(lfd);
  unlink(path);
}

static void test_stale_and_conflicts(void)
{
  char dir[512], path[600], err[512];
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  struct control_server *s, *s2;
  int fd;

  snprintf(dir, sizeof(dir), "%s/stale", tmpdir);
  mkdir(dir, 0700);
  snprintf(path, sizeof(path), "%s/gpuprof-%d.sock", dir, (int)getpid());

  /* A stale socket file with our pid (an earlier process; nobody listens): replaced. */
  fd = socket(AF_UNIX, SOCK_STREAM, 0);
  CHECK(strlen(path) < sizeof(a.sun_path));
  memcpy(a.sun_path, path, strlen(path) + 1);
  CHECK_EQ(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
  close(fd);
  s = start_server(dir, 0);
  CHECK(s != NULL);
  if (s)
    CHECK(starts_with(request(path, "GPUPROF/1 status\n\n"), "GPUPROF/1 ok\n"));

  /* A live socket with our pid (another pid namespace sharing the directory): left alone, and
   * this agent serves the next name; both answer, and each removes only its own at exit. */
  s2 = control_server_start(dir, &ops, 0, err, sizeof(err));
  CHECK(s2 != NULL);
  if (s2) {
    char second[600];
    struct stat sb;
    snprintf(second, sizeof(second), "%s/gpuprof-%d.2.sock", dir, (int)getpid());
    CHECK(starts_with(request(second, "GPUPROF/1 status\n\n"), "GPUPROF/1 ok\n"));
    CHECK(starts_with(request(path, "GPUPROF/1 status\n\n"), "GPUPROF/1 ok\n"));
    control_server_stop(s2);
    CHECK(stat(second, &sb) != 0);
    CHECK(stat(path, &sb) == 0);
  }
  control_server_stop(s);

  /* Not a socket: never replaced. */
  fd = open(path, O_CREAT | O_WRONLY, 0600);
  close(fd);
  s2 = control_server_start(dir, &ops, 0, err, sizeof(err));
  CHECK(s2 == NULL);
  CHECK(strstr(err, "is not a socket") != NULL);
  CHECK_EQ(access(path, F_OK), 0);
  unlink(path);

  /* A run dir too long for sun_path names the variable. */
  {
    char longdir[300];
    memset(longdir, 'd', sizeof(longdir));
    longdir[0] = '/';
    longdir[sizeof(longdir) - 1] = '\0';
    s2 = control_server_start(longdir, &ops, 0, err, sizeof(err));
    CHECK(s2 == NULL);
    CHECK(strstr(err, "GPUPROF_RUN_DIR=/ddd") != NULL);
    CHECK(strstr(err, "too long") != NULL);
  }
  /* A run dir that cannot be created. */
  s2 = control_server_start("/proc/gpuprof-run", &ops, 0, err, sizeof(err));
  CHECK(s2 == NULL);
  CHECK(strstr(err, "cannot create GPUPROF_RUN_DIR=/proc/gpuprof-run") != NULL);
}

/* Only the same uid or root: another uid is refused, by the file mode and by SO_PEERCRED. */
static void test_permission_denied(void)
{
  struct control_server *s;
  struct control_stats stats;
  int starts = fake.starts;
  char dir[512];
  pid_t child;
  int status = -1;

  if (geteuid() != 0) {
    fprintf(stderr, "skipped test_permission_denied: needs root (setuid to nobody)\n");
    return;
  }
  snprintf(dir, sizeof(dir), "%s/perm", tmpdir);
  s = start_server(dir, 0);
  CHECK(s != NULL);
  if (!s)
    return;
  /* nobody must reach the directory to reach the socket at all. */
  chmod(tmpdir, 0755);
  chmod(dir, 0755);
  child = fork();
  if (child == 0) {
    int fd;

    if (setgid(65534) || setuid(65534))
      _exit(10);
    /* Mode 0600: connect itself is refused. */
    fd = dial(control_server_path(s));
    if (fd >= 0 || errno != EACCES)
      _exit(11);
    _exit(0);
  }
  waitpid(child, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);

  /* Opened up by mistake (or a copy of the socket with looser permissions): SO_PEERCRED. */
  chmod(control_server_path(s), 0666);
  child = fork();
  if (child == 0) {
    char buf[1024];
    int fd;

    if (setgid(65534) || setuid(65534))
      _exit(10);
    fd = dial(control_server_path(s));
    if (fd < 0)
      _exit(12);
    /* The server refuses before reading: the send may find the connection closed. */
    (void)send(fd, "GPUPROF/1 capture\n\n", 19, MSG_NOSIGNAL);
    read_all(fd, buf, sizeof(buf));
    _exit(starts_with(buf, "GPUPROF/1 error denied\n") &&
                  strstr(buf, "uid 65534 may not use this socket")
              ? 0
              : 14);
  }
  waitpid(child, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECK_EQ(fake.starts, starts);
  control_server_get_stats(s, &stats);
  CHECK_EQ(stats.denied, 1);
  /* Root (the same uid here) is still served. */
  CHECK(starts_with(request(control_server_path(s), "GPUPROF/1 status\n\n"), "GPUPROF/1 ok\n"));
  control_server_stop(s);
  chmod(tmpdir, 0700);
}

/* A forked child drops the parent's descriptors and never removes its socket. */
static void test_fork_child(void)
{
  struct control_server *s = start_server(tmpdir, 0);
  pid_t child;
  int status = -1;

  CHECK(s != NULL);
  if (!s)
    return;
  child = fork();
  if (child == 0) {
    control_server_forget(s);
    _exit(access(control_server_path(s), F_OK) == 0 ? 0 : 1);
  }
  waitpid(child, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECK_EQ(access(control_server_path(s), F_OK), 0);
  CHECK(starts_with(request(control_server_path(s), "GPUPROF/1 status\n\n"), "GPUPROF/1 ok\n"));
  control_server_stop(s);
}

static void cleanup(const char *dir)
{
  char cmd[600];

  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  if (system(cmd) != 0)
    fprintf(stderr, "could not remove %s\n", dir);
}

int main(void)
{
  snprintf(tmpdir, sizeof(tmpdir), "/tmp/gpuprof-ctl-test-XXXXXX");
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 1;
  }
  RUN(test_socket_file);
  RUN(test_status_capture_stop);
  RUN(test_bad_clients);
  RUN(test_silent_clients);
  RUN(test_socket_fuzz);
  RUN(test_stale_and_conflicts);
  RUN(test_full_backlog);
  RUN(test_permission_denied);
  RUN(test_fork_child);
  cleanup(tmpdir);
  UNIT_EXIT();
}
