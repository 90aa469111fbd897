/* A long-running multi-threaded CUDA program for capture tests: each thread launches its own
 * kernel on its own stream until a stop file appears (or a time limit passes). */
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "tests/fakegpu/fakegpu.h"
#include "tests/lib/e2e.h"

#define THREADS 4

static const char *const names[THREADS] = {"ctl_kernel_0", "ctl_kernel_1", "ctl_kernel_2",
                                           "ctl_kernel_3"};

static CUcontext ctx;
static CUfunction fn[THREADS];
static const char *stop_file;
static atomic_int stop;
static unsigned long launched[THREADS];

static void *worker(void *arg)
{
  int i = (int)(intptr_t)arg;
  struct timespec pause = {0, 2000000}; /* 2 ms: a steady trickle, not a flood */
  CUstream s;

  CU(cuCtxSetCurrent(ctx));
  CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  while (!stop) {
    e2e_launch(fn[i], s);
    CU(cuStreamSynchronize(s));
    launched[i]++;
    nanosleep(&pause, NULL);
  }
  CU(cuStreamDestroy(s));
  return NULL;
}

/* usage: control_workload STOP_FILE [MAX_SECONDS] */
int main(int argc, char **argv)
{
  pthread_t t[THREADS];
  CUdevice dev;
  CUmodule mod;
  time_t give_up;

  if (argc < 2) {
    fprintf(stderr, "usage: %s STOP_FILE [MAX_SECONDS]\n", argv[0]);
    return 2;
  }
  stop_file = argv[1];
  give_up = time(NULL) + (argc > 2 ? atoi(argv[2]) : 60);
  mod = e2e_context_with_kernels(&dev, &ctx, names, THREADS, fn);
  for (int i = 0; i < THREADS; i++)
    fakegpu_set_kernel_duration_ns(names[i], 5000);
  for (int i = 0; i < THREADS; i++)
    if (pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i) != 0)
      e2e_fail("pthread_create");
  while (access(stop_file, F_OK) != 0 && time(NULL) < give_up)
    usleep(20000);
  stop = 1;
  for (int i = 0; i < THREADS; i++)
    pthread_join(t[i], NULL);
  for (int i = 0; i < THREADS; i++)
    if (!launched[i])
      e2e_fail("a thread launched nothing");
  CU(cuModuleUnload(mod));
  CU(cuDevicePrimaryCtxRelease(dev));
  printf("workload: %d threads launched kernels\n", THREADS);
  return access(stop_file, F_OK) == 0 ? 0 : 3; /* 3: the test never said stop */
}
