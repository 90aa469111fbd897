/* agent/util/fdwriter.c: whole writes, sticky errors, truncation, and no SIGPIPE to the host. */
#include "agent/util/fdwriter.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>

#include "agent/util/log.h"
#include "unit.h"

static int sigpipe_pending(void)
{
  sigset_t pending;

  return sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1;
}

/* Reads everything the pipe holds (the writer end is closed by the caller first). */
static size_t drain(int fd, char *buf, size_t cap)
{
  size_t got = 0;
  ssize_t n;

  while (got < cap && (n = read(fd, buf + got, cap - got)) > 0)
    got += (size_t)n;
  return got;
}

static void test_buffered_and_large_writes(void)
{
  static char big[3 * FD_WRITER_BUF + 17], out[sizeof(big) + 64];
  struct fd_writer w;
  int p[2];

  for (size_t i = 0; i < sizeof(big); i++)
    big[i] = (char)('a' + i % 26);
  CHECK(pipe(p) == 0);
  /* The pipe holds 64 KiB: all of this fits without a reader. */
  fd_writer_init(&w, p[1]);
  CHECK_EQ(fd_writer_puts(&w, "head:"), 0);
  CHECK_EQ(fd_writer_write(&w, big, sizeof(big)), 0);
  CHECK_EQ(fd_writer_printf(&w, ":%d:%s", 42, "tail"), 0);
  CHECK_EQ(fd_writer_flush(&w), 0);
  close(p[1]);
  CHECK_EQ(drain(p[0], out, sizeof(out)), 5 + sizeof(big) + 8);
  CHECK(memcmp(out, "head:", 5) == 0);
  CHECK(memcmp(out + 5, big, sizeof(big)) == 0);
  CHECK(memcmp(out + 5 + sizeof(big), ":42:tail", 8) == 0);
  close(p[0]);
}

static void test_printf_truncates(void)
{
  static char out[2 * FD_WRITER_BUF];
  char arg[FD_WRITER_BUF + 100];
  struct fd_writer w;
  int p[2];

  memset(arg, 'x', sizeof(arg) - 1);
  arg[sizeof(arg) - 1] = '\0';
  CHECK(pipe(p) == 0);
  fd_writer_init(&w, p[1]);
  CHECK_EQ(fd_writer_printf(&w, "%s", arg), 0);
  CHECK_EQ(fd_writer_flush(&w), 0);
  close(p[1]);
  CHECK_EQ(drain(p[0], out, sizeof(out)), FD_WRITER_BUF - 1);
  close(p[0]);
}

/*
 * A reader that is gone: -EPIPE, sticky, and the process is neither killed nor left with a
 * pending SIGPIPE (SIGPIPE has its default action here, as in most applications).
 */
static void test_closed_reader_no_sigpipe(void)
{
  struct fd_writer w;
  int p[2];

  signal(SIGPIPE, SIG_DFL);
  CHECK(pipe(p) == 0);
  close(p[0]);
  CHECK_EQ(fd_write_all(p[1], "x", 1), (unsigned long long)-EPIPE);
  CHECK(!sigpipe_pending());
  fd_writer_init(&w, p[1]);
  CHECK_EQ(fd_writer_puts(&w, "buffered"), 0);
  CHECK_EQ(fd_writer_flush(&w), (unsigned long long)-EPIPE);
  /* Sticky: nothing is written (or raised) again. */
  CHECK_EQ(fd_writer_puts(&w, "more"), (unsigned long long)-EPIPE);
  CHECK_EQ(fd_writer_flush(&w), (unsigned long long)-EPIPE);
  CHECK(!sigpipe_pending());
  close(p[1]);
}

/* A warning logged to a stderr nobody reads any more: the application runs on. */
static void test_log_to_closed_stderr(void)
{
  int p[2], saved = dup(2);

  signal(SIGPIPE, SIG_DFL);
  CHECK(pipe(p) == 0);
  close(p[0]);
  dup2(p[1], 2);
  errno = 1234;
  log_warn("a warning nobody reads");
  CHECK_EQ(errno, 1234);
  dup2(saved, 2);
  close(saved);
  close(p[1]);
  CHECK(!sigpipe_pending());
}

/* A SIGPIPE the application had pending (blocked) before the write stays pending for it. */
static void test_pending_sigpipe_kept(void)
{
  sigset_t set, old;
  int p[2];

  sigemptyset(&set);
  sigaddset(&set, SIGPIPE);
  CHECK(pthread_sigmask(SIG_BLOCK, &set, &old) == 0);
  raise(SIGPIPE);
  CHECK(sigpipe_pending());
  CHECK(pipe(p) == 0);
  close(p[0]);
  CHECK_EQ(fd_write_all(p[1], "x", 1), (unsigned long long)-EPIPE);
  CHECK(sigpipe_pending());
  close(p[1]);
  /* Taken here, with the mask still blocking it, so the test process survives. */
  {
    struct timespec zero = {0, 0};
    CHECK_EQ(sigtimedwait(&set, NULL, &zero), SIGPIPE);
  }
  CHECK(!sigpipe_pending());
  pthread_sigmask(SIG_SETMASK, &old, NULL);
}

int main(void)
{
  RUN(test_buffered_and_large_writes);
  RUN(test_printf_truncates);
  RUN(test_closed_reader_no_sigpipe);
  RUN(test_log_to_closed_stderr);
  RUN(test_pending_sigpipe_kept);
  UNIT_EXIT();
}
