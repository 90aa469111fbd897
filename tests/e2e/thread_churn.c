/* Thread churn under the agent: thousands of short-lived CUDA threads, captures taken while
 * they come and go, and 256 threads launching at once; checked by thread_churn.py. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tests/lib/e2e.h"
#include "tests/lib/procstat.h"

/*
 * Every worker thread names itself (its comm, before its first CUDA call), then makes exactly
 * these calls: cuCtxSetCurrent, cuMemAlloc(ALLOC_BYTES), LAUNCHES x cuLaunchKernel of its
 * phase's kernel on the null stream, cuStreamSynchronize(NULL), cuMemFree, and exits.
 */
#define ALLOC_BYTES 4096u
#define LAUNCHES 2
#define AT_ONCE 4 /* churn: threads alive together */
#define MAX_CAPTURES 8
#define KERNELS (2 + MAX_CAPTURES)

static const char *const names[KERNELS] = {
    "churn_kernel", "wide_kernel",  "cap_kernel_0", "cap_kernel_1", "cap_kernel_2",
    "cap_kernel_3", "cap_kernel_4", "cap_kernel_5", "cap_kernel_6", "cap_kernel_7"};

static CUcontext ctx;
static CUfunction fn[KERNELS];
static int (*capture_start)(unsigned, unsigned);
static int (*capture_stop)(void);

struct job {
  char name[16];
  CUfunction f;
  pthread_barrier_t *barrier; /* wide phase: all allocated before any launch, and before any free */
};

static void *worker(void *arg)
{
  struct job *j = arg;
  CUdeviceptr p;

  if (pthread_setname_np(pthread_self(), j->name) != 0)
    e2e_fail("pthread_setname_np");
  CU(cuCtxSetCurrent(ctx));
  CU(cuMemAlloc(&p, ALLOC_BYTES));
  if (j->barrier)
    pthread_barrier_wait(j->barrier);
  for (int k = 0; k < LAUNCHES; k++)
    e2e_launch(j->f, NULL);
  /* Threads synchronize the stream concurrently: their waits go on the stream's sync lanes. */
  CU(cuStreamSynchronize(NULL));
  if (j->barrier)
    pthread_barrier_wait(j->barrier);
  CU(cuMemFree(p));
  return NULL;
}

/* n threads, AT_ONCE alive at a time, named prefix<i>. */
static void churn(unsigned n, const char *prefix, CUfunction f)
{
  pthread_t t[AT_ONCE];
  struct job j[AT_ONCE];

  for (unsigned i = 0; i < n; i += AT_ONCE) {
    unsigned m = n - i < AT_ONCE ? n - i : AT_ONCE;

    for (unsigned k = 0; k < m; k++) {
      snprintf(j[k].name, sizeof(j[k].name), "%s%u", prefix, i + k);
      j[k].f = f;
      j[k].barrier = NULL;
      if (pthread_create(&t[k], NULL, worker, &j[k]) != 0)
        e2e_fail("pthread_create");
    }
    for (unsigned k = 0; k < m; k++)
      pthread_join(t[k], NULL);
  }
}

/* n threads alive together, launching between two barriers. */
static void wide(unsigned n)
{
  pthread_t *t = calloc(n, sizeof(*t));
  struct job *j = calloc(n, sizeof(*j));
  pthread_barrier_t b;

  if (!t || !j || pthread_barrier_init(&b, NULL, n) != 0)
    e2e_fail("wide: out of memory");
  for (unsigned i = 0; i < n; i++) {
    snprintf(j[i].name, sizeof(j[i].name), "w%u", i);
    j[i].f = fn[1];
    j[i].barrier = &b;
    if (pthread_create(&t[i], NULL, worker, &j[i]) != 0)
      e2e_fail("pthread_create (wide)");
  }
  for (unsigned i = 0; i < n; i++)
    pthread_join(t[i], NULL);
  pthread_barrier_destroy(&b);
  free(t);
  free(j);
}

/* The agent's threads finish what a capture used shortly after it ends: wait up to 5 s. */
static void settle(const char *what, const char *path, int want)
{
  int got = procstat_count_dir(path);

  for (int i = 0; i < 500 && got != want; i++) {
    nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    got = procstat_count_dir(path);
  }
  if (got == want)
    printf("%s back to baseline\n", what);
  else
    printf("%s: %d, baseline %d\n", what, got, want);
}

/* usage: thread_churn CHURN CAPTURES PER_CAPTURE WIDE
 * CHURN threads outside captures, then CAPTURES API captures with PER_CAPTURE threads each
 * (capture c launches cap_kernel_c), the last one also holding WIDE threads alive at once. */
int main(int argc, char **argv)
{
  unsigned churn_n, captures, per_capture, wide_n;
  int fds, tasks;
  CUdevice dev;
  void *agent;
  char prefix[16]; /* "c<capture>t": room for any unsigned, as -Wformat-truncation wants */

  if (argc != 5)
    e2e_fail("usage: thread_churn CHURN CAPTURES PER_CAPTURE WIDE");
  churn_n = (unsigned)strtoul(argv[1], NULL, 10);
  captures = (unsigned)strtoul(argv[2], NULL, 10);
  per_capture = (unsigned)strtoul(argv[3], NULL, 10);
  wide_n = (unsigned)strtoul(argv[4], NULL, 10);
  if (captures > MAX_CAPTURES || (wide_n && !captures))
    e2e_fail("at most 8 captures; WIDE needs one");
  e2e_context_with_kernels(&dev, &ctx, names, KERNELS, fn);
  /* The public API without preloading the agent (include/gpuprof/gpuprof.h). */
  agent = getenv("CUDA_INJECTION64_PATH")
              ? dlopen(getenv("CUDA_INJECTION64_PATH"), RTLD_NOW | RTLD_NOLOAD)
              : NULL;
  if (agent) {
    capture_start = (int (*)(unsigned, unsigned))dlsym(agent, "gpuprof_capture_start");
    capture_stop = (int (*)(void))dlsym(agent, "gpuprof_capture_stop");
  }
  fds = procstat_count_dir("/proc/self/fd");
  tasks = procstat_count_dir("/proc/self/task");

  churn(churn_n, "ch", fn[0]);
  printf("churned %u threads\n", churn_n);
  for (unsigned c = 0; c < captures; c++) {
    /* Without the agent the program's output must not change: the same lines, no capture. */
    int rc = capture_start ? capture_start(600000, 0) : 0;

    snprintf(prefix, sizeof(prefix), "c%ut", c);
    churn(per_capture, prefix, fn[2 + c]);
    if (c == captures - 1 && wide_n)
      wide(wide_n);
    printf("capture %u: start %d, %u threads%s, stop %d\n", c, rc, per_capture,
           c == captures - 1 && wide_n ? " + wide" : "", capture_stop ? capture_stop() : 0);
  }
  printf("wide %u threads\n", wide_n);
  fflush(stdout);
  settle("fds", "/proc/self/fd", fds);
  settle("threads", "/proc/self/task", tasks);
  if (agent)
    dlclose(agent);
  return 0;
}
