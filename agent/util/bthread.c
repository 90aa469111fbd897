/* Agent threads: started with every signal blocked, stopped by a join bounded on CLOCK_MONOTONIC.
 */
#include "agent/util/bthread.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "agent/util/clock.h"

struct bthread {
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t done_cond; /* CLOCK_MONOTONIC: broadcast when done is set */
  int done;                 /* fn returned (under lock) */
  /* The thread and its stopper each hold one reference: a detached thread may outlive the
   * stopper's wait by any time, so the last of the two to let go frees. */
  _Atomic int refs;
  void *(*fn)(void *);
  void *arg;
  char name[16]; /* the kernel keeps 15 characters */
};

static void bthread_put(struct bthread *t)
{
  if (atomic_fetch_sub_explicit(&t->refs, 1, memory_order_acq_rel) != 1)
    return;
  pthread_cond_destroy(&t->done_cond);
  pthread_mutex_destroy(&t->lock);
  free(t);
}

static void *bthread_main(void *p)
{
  struct bthread *t = p;

  /* Named here rather than by the starter: fn never runs under the application's name, and a
   * thread that has already ended is never named. */
  if (t->name[0])
    pthread_setname_np(pthread_self(), t->name);
  t->fn(t->arg);
  pthread_mutex_lock(&t->lock);
  t->done = 1;
  pthread_cond_broadcast(&t->done_cond);
  pthread_mutex_unlock(&t->lock);
  bthread_put(t);
  return NULL;
}

int bthread_start(struct bthread **out, const char *name, void *(*fn)(void *), void *arg)
{
  struct bthread *t = calloc(1, sizeof(*t));
  pthread_condattr_t attr;
  sigset_t all, old;
  int ret = 0;

  *out = NULL;
  if (!t)
    return -ENOMEM;
  t->fn = fn;
  t->arg = arg;
  if (name)
    snprintf(t->name, sizeof(t->name), "%s", name);
  atomic_init(&t->refs, 2);
  pthread_mutex_init(&t->lock, NULL);
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  ret = -pthread_cond_init(&t->done_cond, &attr);
  pthread_condattr_destroy(&attr);
  if (ret) {
    pthread_mutex_destroy(&t->lock);
    free(t);
    return ret;
  }

  /* The thread inherits this mask: no application signal is ever delivered to it. */
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  ret = -pthread_create(&t->thread, NULL, bthread_main, t);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (ret)
    goto out;
  *out = t;
out:
  if (ret) {
    pthread_cond_destroy(&t->done_cond);
    pthread_mutex_destroy(&t->lock);
    free(t);
  }
  return ret;
}

int bthread_join_within(struct bthread *t, uint64_t timeout_ns)
{
  struct timespec deadline;
  int done, rc = 0;

  if (!t)
    return 0;
  deadline = clock_ns_to_timespec(clock_monotonic_ns() + timeout_ns);
  pthread_mutex_lock(&t->lock);
  while (!t->done && rc == 0)
    rc = pthread_cond_timedwait(&t->done_cond, &t->lock, &deadline);
  /* A wakeup at the deadline that finds the thread done is not a timeout. */
  done = t->done;
  pthread_mutex_unlock(&t->lock);
  if (done)
    pthread_join(t->thread, NULL); /* fn has returned: this only waits for the unwinding */
  else
    pthread_detach(t->thread);
  bthread_put(t);
  return done ? 0 : -ETIMEDOUT;
}
