/* The public header used as its documentation shows, from C and (public_api_cxx.cc) C++. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>

#include "gpuprof/gpuprof.h"

/* Exactly as include/gpuprof/gpuprof.h tells applications to do it. */
#pragma weak gpuprof_capture_start
#pragma weak gpuprof_capture_stop

/*
 * Prints one line per call with the exact return values, so the runner
 * (tests/e2e/public_api.py) can tell "agent loaded and active", "agent preloaded but
 * inactive" and "agent not bound" apart. Modes (argv[1]):
 *   calls   before cuInit, after it, bad arguments, start/stop twice, a second capture
 *   race    a thread keeps calling gpuprof_capture_start while main runs cuInit
 *   atexit  a call from an exit handler registered before cuInit (it runs after the agent's)
 *   dlsym   without LD_PRELOAD: the functions looked up in the copy the driver loaded, and
 *           InitializeInjection called again, from several threads at once (cupti.md 1.1)
 */

static void report(const char *what, int rc)
{
  printf("%s %d\n", what, rc);
}

static int api_bound(void)
{
  if (!gpuprof_capture_start || !gpuprof_capture_stop) {
    printf("api absent\n");
    return 0;
  }
  return 1;
}

static void init_cuda(void)
{
  CUresult r = cuInit(0);

  if (r != CUDA_SUCCESS) {
    fprintf(stderr, "public_api: cuInit returned %d\n", (int)r);
    exit(1);
  }
}

static void mode_calls(void)
{
  if (!api_bound()) {
    init_cuda();
    return;
  }
  report("before cuInit: start", gpuprof_capture_start(1000, 0));
  report("before cuInit: stop", gpuprof_capture_stop());
  init_cuda();
  report("bad flags", gpuprof_capture_start(1000, 0x80u));
  /* More than 24 hours: 25 h in ms still fits an unsigned. */
  report("25 hours", gpuprof_capture_start(25u * 3600u * 1000u, 0));
  report("start", gpuprof_capture_start(60000, 0));
  report("start again", gpuprof_capture_start(60000, GPUPROF_CAPTURE_GPU_ONLY));
  report("stop", gpuprof_capture_stop());
  report("stop again", gpuprof_capture_stop());
  report("gpu-only start", gpuprof_capture_start(0, GPUPROF_CAPTURE_GPU_ONLY));
  report("gpu-only stop", gpuprof_capture_stop());
}

/* GCC builtins rather than <stdatomic.h>: the same source is compiled as C++. */
static int race_done;

static void *race_caller(void *arg)
{
  int seen_ok = 0;

  (void)arg;
  while (!__atomic_load_n(&race_done, __ATOMIC_ACQUIRE)) {
    int rc = gpuprof_capture_start(60000, 0);

    if (rc == 0) {
      seen_ok = 1;
      gpuprof_capture_stop();
    } else if (rc != -ENODEV && rc != -EBUSY) {
      printf("race: unexpected %d\n", rc);
      break;
    }
  }
  return (void *)(long)seen_ok;
}

static void mode_race(void)
{
  pthread_t t;
  void *ret;

  if (!api_bound()) {
    init_cuda();
    return;
  }
  if (pthread_create(&t, NULL, race_caller, NULL) != 0) {
    fprintf(stderr, "public_api: pthread_create failed\n");
    exit(1);
  }
  init_cuda();
  __atomic_store_n(&race_done, 1, __ATOMIC_RELEASE);
  pthread_join(t, &ret);
  /* The caller may or may not have won a start before race_done: only the final state is
   * deterministic. */
  report("race: start after", gpuprof_capture_start(60000, 0));
  report("race: stop after", gpuprof_capture_stop());
}

static void late_call(void)
{
  report("atexit: start", gpuprof_capture_start(1000, 0));
  report("atexit: stop", gpuprof_capture_stop());
  fflush(stdout);
}

static void mode_atexit(void)
{
  if (!api_bound()) {
    init_cuda();
    return;
  }
  /* Registered before cuInit, so it runs after the agent's exit handler. */
  atexit(late_call);
  init_cuda();
  report("start", gpuprof_capture_start(60000, 0));
}

static int (*again_init)(void);

static void *call_init(void *arg)
{
  (void)arg;
  return (void *)(long)again_init();
}

static void mode_dlsym(void)
{
  const char *path = getenv("CUDA_INJECTION64_PATH");
  int (*start)(unsigned, unsigned);
  int (*stop)(void);
  pthread_t t[4];
  void *h, *ret;
  int ones = 0;

  init_cuda();
  /* RTLD_NOLOAD: the copy libcuda loaded, never a second one. */
  h = path ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : NULL;
  if (!h) {
    printf("dlsym: agent not loaded\n");
    return;
  }
  *(void **)&start = dlsym(h, "gpuprof_capture_start");
  *(void **)&stop = dlsym(h, "gpuprof_capture_stop");
  *(void **)&again_init = dlsym(h, "InitializeInjection");
  if (!start || !stop || !again_init) {
    printf("dlsym: symbols missing\n");
    dlclose(h);
    return;
  }
  for (int i = 0; i < 4; i++)
    if (pthread_create(&t[i], NULL, call_init, NULL) != 0) {
      fprintf(stderr, "public_api: pthread_create failed\n");
      exit(1);
    }
  ones += again_init() == 1;
  for (int i = 0; i < 4; i++) {
    pthread_join(t[i], &ret);
    ones += ret == (void *)1L;
  }
  report("dlsym: InitializeInjection again returned 1", ones);
  report("dlsym: start", start(60000, 0));
  report("dlsym: stop", stop());
  dlclose(h);
}

int main(int argc, char **argv)
{
  const char *mode = argc > 1 ? argv[1] : "calls";

  setvbuf(stdout, NULL, _IOLBF, 0);
  if (!strcmp(mode, "calls"))
    mode_calls();
  else if (!strcmp(mode, "race"))
    mode_race();
  else if (!strcmp(mode, "atexit"))
    mode_atexit();
  else if (!strcmp(mode, "dlsym"))
    mode_dlsym();
  else {
    fprintf(stderr, "usage: public_api calls|race|atexit|dlsym\n");
    return 2;
  }
  printf("done\n");
  return 0;
}
