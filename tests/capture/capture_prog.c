/* Workloads for the capture tests: known kernels, copies, sets and threads, with a trigger
 * (none, the capture signal, or the public API through weak symbols) around the middle phase. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gpuprof/gpuprof.h"
#include "tests/fakegpu/fakegpu.h"
#include "tests/lib/e2e.h"

/* The public API, weak: NULL unless libgpuprof.so was loaded when the program started. */
#pragma weak gpuprof_capture_start
#pragma weak gpuprof_capture_stop

#define MIB (1024u * 1024u)

static const char *const names[] = {"k_small",  "k_big",   "k_thread",
                                    "k_before", "k_after", "k_many"};
static CUfunction fn[6];
static CUcontext ctx;
static atomic_int own_handler_calls;

static void sleep_ms(unsigned ms)
{
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

static void *launcher(void *arg)
{
  CUstream s2;

  (void)arg;
  /* Named by itself before its first CUDA call: named by the creator, it could launch (and
   * claim its API ring under the old name) first. */
  pthread_setname_np(pthread_self(), "launcher");
  CU(cuCtxSetCurrent(ctx));
  CU(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  for (int i = 0; i < 4; i++)
    e2e_launch(fn[2], s2);
  CU(cuStreamSynchronize(s2));
  return NULL;
}

/* The middle phase every test checks exactly (tests/capture/check_capture.py, BASIC). */
static void basic(void)
{
  CUstream s;
  CUdeviceptr a, b;
  uint8_t *host = malloc(MIB);
  pthread_t t;

  if (!host)
    e2e_fail("out of host memory");
  for (size_t i = 0; i < MIB; i++)
    host[i] = e2e_pattern(i);
  CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CU(cuMemAlloc(&a, MIB));
  CU(cuMemAlloc(&b, 65536));
  CU(cuMemcpyHtoD(a, host, MIB));
  CU(cuMemsetD8(b, 0, 4096));
  for (int i = 0; i < 3; i++)
    e2e_launch(fn[0], s);
  for (int i = 0; i < 2; i++)
    e2e_launch(fn[1], NULL);
  CU(cuStreamSynchronize(s));
  if (pthread_create(&t, NULL, launcher, NULL) != 0)
    e2e_fail("pthread_create");
  pthread_join(t, NULL);
  CU(cuMemcpyDtoH(host, a, MIB));
  CU(cuCtxSynchronize());
  CU(cuMemFree(a));
  CU(cuMemFree(b));
  for (size_t i = 0; i < MIB; i++)
    if (host[i] != e2e_pattern(i))
      e2e_fail("copy round trip mismatch");
  free(host);
  printf("basic: done\n");
}

static void launches(int fi, int n, CUstream s)
{
  for (int i = 0; i < n; i++) {
    e2e_launch(fn[fi], s);
    if (i % 1000 == 999)
      CU(cuStreamSynchronize(s));
  }
  CU(cuStreamSynchronize(s));
}

static atomic_int late_stopped;

/* late: launches k_after bursts on a stream of its own until the capture is stopped. */
static void *late_ticker(void *arg)
{
  CUstream s;

  (void)arg;
  CU(cuCtxSetCurrent(ctx));
  CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  for (int i = 0; i < 200 && !atomic_load(&late_stopped); i++)
    launches(4, 300, s);
  CU(cuStreamDestroy(s));
  return NULL;
}

/*
 * late (FAKEGPU_CUPTI_FAULT=late_delivery, check_capture.py LATE): the simulated CUPTI's worker
 * holds the first full buffers of n k_many launches and hands them over only after a flush
 * that missed them, at the next flush. The capture must still hold every k_many. While main
 * stops it, a thread's k_after bursts fill buffers that CUPTI's worker delivers, so the
 * agent's worker ticks without a periodic flush (GPUPROF_FLUSH_INTERVAL is long): the end's
 * flushes are then the only flushes after the buffers were taken. The bursts come from their
 * own thread: CUPTI's buffers are per thread, and a flush delivers only buffers whose records
 * have all finished, so main's last k_many records must not share a buffer with them.
 */
static void late(int n)
{
  void *lib = dlopen("libcupti.so.13", RTLD_NOW | RTLD_NOLOAD);
  int (*late_state)(void) = lib ? (int (*)(void))dlsym(lib, "fakegpu_cupti_late_state") : NULL;
  pthread_t t;
  int st = 0;

  if (!gpuprof_capture_start || !gpuprof_capture_stop || !late_state)
    e2e_fail("late: run with LD_PRELOAD of the agent on the simulated CUPTI");
  printf("late: start %d\n", gpuprof_capture_start(600000, 0));
  launches(5, n, NULL);
  /* CUPTI's worker takes the first full buffers once their kernels have finished. */
  for (int i = 0; i < 10000 && (st = late_state()) == 0; i++)
    sleep_ms(1);
  printf("late: held %d\n", st);
  if (pthread_create(&t, NULL, late_ticker, NULL) != 0)
    e2e_fail("pthread_create");
  printf("late: stop %d\n", gpuprof_capture_stop());
  atomic_store(&late_stopped, 1);
  pthread_join(t, NULL);
  printf("late: %d launches\n", n);
}

static void on_own_signal(int sig)
{
  (void)sig;
  atomic_fetch_add(&own_handler_calls, 1);
}

int main(int argc, char **argv)
{
  const char *mode = argc > 1 ? argv[1] : "basic";
  CUdevice dev;
  CUmodule mod;

  setvbuf(stdout, NULL, _IONBF, 0);
  if (!strcmp(mode, "own-handler"))
    signal(SIGUSR2, on_own_signal);
  CU(cuInit(0));
  CU(cuDeviceGet(&dev, 0));
  CU(cuCtxCreate(&ctx, NULL, 0, dev));
  mod = e2e_module_with_kernels(names, 6);
  for (int i = 0; i < 6; i++)
    CU(cuModuleGetFunction(&fn[i], mod, names[i]));
  fakegpu_set_kernel_duration_ns("k_small", 5000);
  fakegpu_set_kernel_duration_ns("k_big", 50000);
  fakegpu_set_kernel_duration_ns("k_thread", 7000);
  fakegpu_set_kernel_duration_ns("k_before", 3000);
  fakegpu_set_kernel_duration_ns("k_after", 4000);
  fakegpu_set_kernel_duration_ns("k_many", 2000);

  if (!strcmp(mode, "basic")) {
    basic();
  } else if (!strcmp(mode, "after")) {
    /* basic, then k_after once the capture (GPUPROF_CAPTURE_ON_START=1s) is over. */
    basic();
    sleep_ms(2500);
    launches(4, 2, NULL);
  } else if (!strcmp(mode, "signal") || !strcmp(mode, "api")) {
    int api = !strcmp(mode, "api");
    launches(3, 2, NULL);
    sleep_ms(100);
    if (api) {
      if (!gpuprof_capture_start || !gpuprof_capture_stop) {
        printf("api: not available\n");
      } else {
        int rc = gpuprof_capture_start(60000, 0);
        int again = gpuprof_capture_start(60000, 0);
        printf("api: start %d, again %d\n", rc, again);
      }
    } else {
      raise(SIGUSR2);
      sleep_ms(300); /* the agent's signal thread opens the file */
    }
    basic();
    if (api) {
      if (gpuprof_capture_stop) {
        int rc = gpuprof_capture_stop();
        int again = gpuprof_capture_stop();
        printf("api: stop %d, again %d\n", rc, again);
      }
    } else {
      raise(SIGUSR2);
      sleep_ms(300);
    }
    sleep_ms(100);
    launches(4, 2, NULL);
  } else if (!strcmp(mode, "memory")) {
    /* A known allocation sequence around an API-triggered capture (check_capture.py MEMORY):
     * pre is allocated before it and freed inside it; b and c outlive it. */
    CUdeviceptr pre, a, b, c;
    if (!gpuprof_capture_start || !gpuprof_capture_stop)
      e2e_fail("memory: run with LD_PRELOAD of the agent");
    CU(cuMemAlloc(&pre, 4 * MIB));
    printf("memory: start %d\n", gpuprof_capture_start(60000, 0));
    CU(cuMemAlloc(&a, MIB));
    CU(cuMemAlloc(&b, 65536));
    CU(cuMemFree(pre));
    CU(cuMemFree(a));
    CU(cuMemAlloc(&c, 8192));
    printf("memory: stop %d\n", gpuprof_capture_stop());
    CU(cuMemFree(b));
    CU(cuMemFree(c));
  } else if (!strcmp(mode, "fork")) {
    /* A child forked during an API capture has no capture of its own: its stop finds none
     * and its start is refused (the agent is dormant there); the parent's capture runs on. */
    pid_t child;
    int status = -1;
    if (!gpuprof_capture_start || !gpuprof_capture_stop)
      e2e_fail("fork: run with LD_PRELOAD of the agent");
    printf("fork: start %d\n", gpuprof_capture_start(60000, 0));
    child = fork();
    if (child < 0)
      e2e_fail("fork");
    if (child == 0) {
      int stop = gpuprof_capture_stop();
      printf("fork: child stop %d, start %d\n", stop, gpuprof_capture_start(1000, 0));
      _exit(0);
    }
    waitpid(child, &status, 0);
    printf("fork: child exited %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    basic();
    printf("fork: stop %d\n", gpuprof_capture_stop());
  } else if (!strcmp(mode, "own-handler")) {
    raise(SIGUSR2);
    basic();
    printf("own handler: %d calls\n", atomic_load(&own_handler_calls));
  } else if (!strcmp(mode, "late")) {
    late(argc > 2 ? atoi(argv[2]) : 2000);
  } else if (!strcmp(mode, "many")) {
    int n = argc > 2 ? atoi(argv[2]) : 20000;
    launches(5, n, NULL);
    printf("many: %d launches\n", n);
    if (argc > 3 && !strcmp(argv[3], "sleep")) {
      printf("sleeping\n");
      sleep_ms(60000);
    }
  } else {
    e2e_fail("unknown mode");
  }
  CU(cuCtxDestroy(ctx));
  return 0;
}
