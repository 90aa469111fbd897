/* A long-running multi-threaded CUDA program driven line by line on stdin, for the repeated-
 * capture test: it launches exactly what it is told, starts/stops API captures, and reports
 * which CUPTI callbacks and activity kinds the simulator has enabled. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cupti.h>

#include "gpuprof/gpuprof.h"
#include "tests/fakegpu/fakegpu.h"
#include "tests/lib/e2e.h"

/* The public API, weak: bound only when libgpuprof.so is preloaded. */
#pragma weak gpuprof_capture_start
#pragma weak gpuprof_capture_stop

#define THREADS 4

static const char *const names[THREADS] = {"leak_kernel_0", "leak_kernel_1", "leak_kernel_2",
                                           "leak_kernel_3"};

static CUcontext ctx;
static CUfunction fn[THREADS];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static unsigned long generation, per_thread, finished;
static int quit;

/* Each thread waits for a batch, launches its kernel per_thread times on its own stream (each
 * synchronized, so the batch is complete on the GPU when the reply is printed), and reports. */
static void *worker(void *arg)
{
  int i = (int)(intptr_t)arg;
  unsigned long seen = 0, n;
  CUstream s;

  CU(cuCtxSetCurrent(ctx));
  CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  for (;;) {
    pthread_mutex_lock(&lock);
    while (!quit && generation == seen)
      pthread_cond_wait(&cond, &lock);
    if (quit) {
      pthread_mutex_unlock(&lock);
      break;
    }
    seen = generation;
    n = per_thread;
    pthread_mutex_unlock(&lock);
    for (unsigned long k = 0; k < n; k++) {
      e2e_launch(fn[i], s);
      CU(cuStreamSynchronize(s));
    }
    pthread_mutex_lock(&lock);
    finished++;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
  }
  CU(cuStreamDestroy(s));
  return NULL;
}

static void launch(unsigned long n)
{
  pthread_mutex_lock(&lock);
  per_thread = n;
  finished = 0;
  generation++;
  pthread_cond_broadcast(&cond);
  while (finished < THREADS)
    pthread_cond_wait(&cond, &lock);
  pthread_mutex_unlock(&lock);
}

/* The simulator's introspection (tests/fakegpu/cupti_callbacks.c, cupti_activity.c): found in
 * the libcupti.so.13 the agent loaded, without loading one. */
static void state(void)
{
  static const struct {
    int domain;
    const char *name;
  } domains[] = {{CUPTI_CB_DOMAIN_DRIVER_API, "driver"}, {CUPTI_CB_DOMAIN_RUNTIME_API, "runtime"},
                 {CUPTI_CB_DOMAIN_RESOURCE, "resource"}, {CUPTI_CB_DOMAIN_SYNCHRONIZE, "sync"},
                 {CUPTI_CB_DOMAIN_NVTX, "nvtx"},         {CUPTI_CB_DOMAIN_STATE, "state"}};
  void *lib = dlopen("libcupti.so.13", RTLD_NOW | RTLD_NOLOAD);
  int (*callbacks)(int) = lib ? (int (*)(int))dlsym(lib, "fakegpu_cupti_enabled_callbacks") : NULL;
  int (*kind_on)(int, int *) =
      lib ? (int (*)(int, int *))dlsym(lib, "fakegpu_cupti_kind_enabled") : NULL;
  const char *sep = "";

  if (!callbacks || !kind_on) {
    printf("state unavailable\n");
    if (lib)
      dlclose(lib);
    return;
  }
  printf("state callbacks=");
  for (size_t d = 0; d < sizeof(domains) / sizeof(domains[0]); d++)
    printf("%s%s:%d", d ? "," : "", domains[d].name, callbacks(domains[d].domain));
  printf(" kinds=");
  for (int k = 0; k < CUPTI_ACTIVITY_KIND_COUNT; k++) {
    int api = 0, on = kind_on(k, &api);
    if (on || api) {
      printf("%s%d%s", sep, k, on == 2 ? "(ctx)" : "");
      if (api)
        printf("[api %d]", api);
      sep = ",";
    }
  }
  printf("\n");
  dlclose(lib);
}

/* usage: leak_workload, then on stdin one command a line:
 *   launch N      every thread launches its kernel N times; replies "launched N"
 *   start MS F    gpuprof_capture_start(MS, F); replies "start RC" (or "start absent")
 *   stop          gpuprof_capture_stop(); replies "stop RC"
 *   state         the simulator's enabled callbacks per domain and activity kinds
 *   quit          ends the threads and exits 0 */
int main(void)
{
  pthread_t t[THREADS];
  char line[256];
  CUdevice dev;
  CUmodule mod;

  mod = e2e_context_with_kernels(&dev, &ctx, names, THREADS, fn);
  for (int i = 0; i < THREADS; i++)
    fakegpu_set_kernel_duration_ns(names[i], 3000);
  for (int i = 0; i < THREADS; i++)
    if (pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i) != 0)
      e2e_fail("pthread_create");
  printf("ready\n");
  fflush(stdout);
  while (fgets(line, sizeof(line), stdin)) {
    unsigned long n, ms, flags;

    if (sscanf(line, "launch %lu", &n) == 1) {
      launch(n);
      printf("launched %lu\n", n);
    } else if (sscanf(line, "start %lu %lu", &ms, &flags) == 2) {
      if (gpuprof_capture_start)
        printf("start %d\n", gpuprof_capture_start((unsigned)ms, (unsigned)flags));
      else
        printf("start absent\n");
    } else if (!strcmp(line, "stop\n")) {
      if (gpuprof_capture_stop)
        printf("stop %d\n", gpuprof_capture_stop());
      else
        printf("stop absent\n");
    } else if (!strcmp(line, "state\n")) {
      state();
    } else if (!strcmp(line, "quit\n")) {
      break;
    } else {
      printf("unknown %s", line);
    }
    fflush(stdout);
  }
  pthread_mutex_lock(&lock);
  quit = 1;
  pthread_cond_broadcast(&cond);
  pthread_mutex_unlock(&lock);
  for (int i = 0; i < THREADS; i++)
    pthread_join(t[i], NULL);
  CU(cuModuleUnload(mod));
  CU(cuDevicePrimaryCtxRelease(dev));
  printf("bye\n");
  return 0;
}
