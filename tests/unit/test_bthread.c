/* Unit tests of the agent's thread helper (agent/util/bthread.c): start, bounded join, detach. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agent/util/bthread.h"
#include "agent/util/clock.h"
#include "tests/lib/procstat.h"
#include "unit.h"

/* Waits (up to 10 s) until no thread is named `name`: 1 if none is. A joined thread can still be
 * listed for a moment: the kernel clears its tid (what pthread_join waits for) before it takes
 * the task out of /proc. */
static int wait_none_named(const char *name)
{
  for (int i = 0; i < 10000 && procstat_threads_named(name, NULL) != 0; i++)
    usleep(1000);
  return procstat_threads_named(name, NULL) == 0;
}

static int task_exists(pid_t tid)
{
  char path[64];

  snprintf(path, sizeof(path), "/proc/self/task/%d", (int)tid);
  return access(path, F_OK) == 0;
}

/* Waits (up to 10 s) until the thread tid no longer exists: 1 if it is gone. */
static int wait_task_gone(pid_t tid)
{
  for (int i = 0; i < 10000 && task_exists(tid); i++)
    usleep(1000);
  return !task_exists(tid);
}

/* What a returning thread saw; plain fields: the join must order them before the reads. */
struct seen {
  int ran;
  char name[16];
  int blocked_int, blocked_term, blocked_usr1, blocked_prof, blocked_chld;
};

static void *observe(void *arg)
{
  struct seen *s = arg;
  sigset_t cur;

  pthread_getname_np(pthread_self(), s->name, sizeof(s->name));
  pthread_sigmask(SIG_SETMASK, NULL, &cur);
  s->blocked_int = sigismember(&cur, SIGINT);
  s->blocked_term = sigismember(&cur, SIGTERM);
  s->blocked_usr1 = sigismember(&cur, SIGUSR1);
  s->blocked_prof = sigismember(&cur, SIGPROF);
  s->blocked_chld = sigismember(&cur, SIGCHLD);
  s->ran = 42;
  return NULL;
}

/* A thread that returns is joined: it ran once with its name and every signal blocked, and the
 * starter's own mask is as it was. */
static void test_returns_joined(void)
{
  struct seen s = {0};
  struct bthread *t = NULL;
  sigset_t mine;

  CHECK_EQ(bthread_start(&t, "gpuprof-test", observe, &s), 0);
  CHECK(t != NULL);
  CHECK_EQ(bthread_join_within(t, 10000000000ull), 0);
  CHECK_EQ(s.ran, 42);
  CHECK_STR(s.name, "gpuprof-test");
  CHECK_EQ(s.blocked_int, 1);
  CHECK_EQ(s.blocked_term, 1);
  CHECK_EQ(s.blocked_usr1, 1);
  CHECK_EQ(s.blocked_prof, 1);
  CHECK_EQ(s.blocked_chld, 1);
  pthread_sigmask(SIG_SETMASK, NULL, &mine);
  CHECK_EQ(sigismember(&mine, SIGUSR1), 0);
  CHECK_EQ(sigismember(&mine, SIGTERM), 0);
}

/* The kernel keeps 15 characters of a name; without one the thread keeps the starter's. */
static void test_names(void)
{
  struct seen s = {0};
  struct bthread *t;
  char mine[16] = "";

  CHECK_EQ(bthread_start(&t, "gpuprof-a-very-long-name", observe, &s), 0);
  CHECK_EQ(bthread_join_within(t, 10000000000ull), 0);
  CHECK_STR(s.name, "gpuprof-a-very-");

  memset(&s, 0, sizeof(s));
  pthread_getname_np(pthread_self(), mine, sizeof(mine));
  CHECK_EQ(bthread_start(&t, NULL, observe, &s), 0);
  CHECK_EQ(bthread_join_within(t, 10000000000ull), 0);
  CHECK_EQ(s.ran, 42);
  CHECK_STR(s.name, mine);
}

/* A thread blocked in read(2) until the test writes to its pipe. */
struct blocked {
  int fd;
  _Atomic pid_t tid;
  _Atomic int returned;
};

static void *block_on_pipe(void *arg)
{
  struct blocked *b = arg;
  char c;

  atomic_store(&b->tid, gettid());
  while (read(b->fd, &c, 1) < 0 && errno == EINTR) {
  }
  atomic_store(&b->returned, 1);
  return NULL;
}

/* A thread that does not return in time: -ETIMEDOUT no earlier than the bound, the thread left
 * running (detached) and the process fine; released later, it ends on its own and its state
 * goes with it (ASan/LSan: nothing leaked or used after free). */
static void check_blocked(uint64_t timeout_ns)
{
  struct blocked b = {.fd = -1};
  struct seen s = {0};
  struct bthread *t, *other;
  int fds[2];
  uint64_t t0, waited;
  pid_t tid;

  CHECK_EQ(pipe(fds), 0);
  b.fd = fds[0];
  CHECK_EQ(bthread_start(&t, "gpuprof-stuck", block_on_pipe, &b), 0);
  for (int i = 0; i < 10000 && !atomic_load(&b.tid); i++)
    usleep(1000);
  tid = atomic_load(&b.tid);
  CHECK(tid != 0);

  t0 = clock_monotonic_ns();
  CHECK_EQ(bthread_join_within(t, timeout_ns), -ETIMEDOUT);
  waited = clock_monotonic_ns() - t0;
  CHECK(waited >= timeout_ns); /* the bound is a minimum too: it never gives up early */
  CHECK_EQ(atomic_load(&b.returned), 0);
  CHECK(task_exists(tid));

  /* Still fine: another thread starts and joins while the stuck one runs. */
  CHECK_EQ(bthread_start(&other, "gpuprof-other", observe, &s), 0);
  CHECK_EQ(bthread_join_within(other, 10000000000ull), 0);
  CHECK_EQ(s.ran, 42);

  CHECK_EQ(write(fds[1], "x", 1), 1);
  CHECK(wait_task_gone(tid));
  CHECK_EQ(atomic_load(&b.returned), 1);
  close(fds[0]);
  close(fds[1]);
}

static void test_blocked_times_out(void)
{
  check_blocked(100000000ull); /* 100 ms */
}

static void test_zero_timeout_detaches(void)
{
  check_blocked(0);
}

static void test_null_handle(void)
{
  CHECK_EQ(bthread_join_within(NULL, 1000000ull), 0);
}

static void *count_one(void *arg)
{
  (*(int *)arg)++;
  return NULL;
}

/* Many threads in turn: each one runs once and is joined, none is left behind (none is still
 * there a moment after the last join). */
static void test_churn(void)
{
  int count = 0, failed = 0;

  for (int i = 0; i < 500; i++) {
    struct bthread *t;

    if (bthread_start(&t, "gpuprof-churn", count_one, &count) != 0 ||
        bthread_join_within(t, 10000000000ull) != 0)
      failed++;
  }
  CHECK_EQ(failed, 0);
  CHECK_EQ(count, 500);
  CHECK(wait_none_named("gpuprof-churn"));
}

int main(void)
{
  RUN(test_returns_joined);
  RUN(test_names);
  RUN(test_blocked_times_out);
  RUN(test_zero_timeout_detaches);
  RUN(test_null_handle);
  RUN(test_churn);
  UNIT_EXIT();
}
