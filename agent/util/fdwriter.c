/* A small buffered writer over write(2): the agent's replacement for stdio. */
#include "agent/util/fdwriter.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

void fd_writer_init(struct fd_writer *w, int fd)
{
  w->fd = fd;
  w->err = 0;
  w->len = 0;
}

static int write_loop(int fd, const char *p, size_t len)
{
  while (len > 0) {
    ssize_t n = write(fd, p, len);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return -errno;
    }
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

/*
 * A write to a pipe or socket whose reader is gone raises SIGPIPE, whose default action kills
 * the process: the application's stderr piped to a reader that has exited would let one
 * agent warning end it (status 141) where it would have run on. So SIGPIPE is blocked on this
 * thread for the write, and the one the write raised (none was pending before) is taken back
 * with a zero-timeout sigtimedwait before the old mask returns; the write just fails with
 * EPIPE. Signal masks are per thread: the application's other threads are not affected.
 */
int fd_write_all(int fd, const void *buf, size_t len)
{
  static const struct timespec zero = {0, 0};
  sigset_t pipe_set, old, pending;
  int ret, was_pending;

  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  if (pthread_sigmask(SIG_BLOCK, &pipe_set, &old) != 0)
    return write_loop(fd, buf, len);
  was_pending = sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1;
  ret = write_loop(fd, buf, len);
  if (ret == -EPIPE && !was_pending)
    while (sigtimedwait(&pipe_set, NULL, &zero) < 0 && errno == EINTR) {
    }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  return ret;
}

static int write_all(struct fd_writer *w, const char *p, size_t len)
{
  int ret = fd_write_all(w->fd, p, len);

  if (ret)
    w->err = ret;
  return ret;
}

int fd_writer_flush(struct fd_writer *w)
{
  if (w->err)
    return w->err;
  if (w->len) {
    int ret = write_all(w, w->buf, w->len);
    w->len = 0;
    return ret;
  }
  return 0;
}

int fd_writer_write(struct fd_writer *w, const char *data, size_t len)
{
  if (w->err)
    return w->err;
  if (w->len + len > sizeof(w->buf)) {
    if (fd_writer_flush(w))
      return w->err;
    if (len >= sizeof(w->buf))
      return write_all(w, data, len);
  }
  memcpy(w->buf + w->len, data, len);
  w->len += len;
  return 0;
}

int fd_writer_puts(struct fd_writer *w, const char *s)
{
  return fd_writer_write(w, s, strlen(s));
}

int fd_writer_printf(struct fd_writer *w, const char *fmt, ...)
{
  char tmp[FD_WRITER_BUF];
  va_list ap;
  int n;

  va_start(ap, fmt);
  n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
  va_end(ap);
  if (n < 0)
    return -EINVAL;
  if ((size_t)n >= sizeof(tmp))
    n = sizeof(tmp) - 1;
  return fd_writer_write(w, tmp, (size_t)n);
}

int fd_writer_sink(void *ctx, const char *data, size_t len)
{
  return fd_writer_write(ctx, data, len);
}
