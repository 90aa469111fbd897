/* Many threads synchronizing one stream at the same time, for check_sync_overlap.py: the
 * trace must show every wait once, none overlapping another on a track. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "tests/fakegpu/fakegpu.h"
#include "tests/lib/e2e.h"

/*
 * sync_overlap [THREADS [ROUNDS]] (default 8 threads, 3 rounds). Each round the main thread
 * launches k_wait (300 ms on the simulated GPU) on stream s, then releases the threads
 * (syncer0, syncer1, ...), which all call cuStreamSynchronize(s): every wait starts while the
 * kernel runs and ends when it ends, so all THREADS waits of a round overlap.
 */

#define KERNEL_NS 300000000ull

static CUcontext ctx;
static CUstream s;
static pthread_barrier_t launched, synced;
static int rounds = 3;

static void *syncer(void *arg)
{
  char name[16];

  snprintf(name, sizeof(name), "syncer%d", (int)(long)arg);
  if (pthread_setname_np(pthread_self(), name) != 0)
    e2e_fail("pthread_setname_np");
  CU(cuCtxSetCurrent(ctx));
  for (int r = 0; r < rounds; r++) {
    pthread_barrier_wait(&launched);
    CU(cuStreamSynchronize(s));
    pthread_barrier_wait(&synced);
  }
  return NULL;
}

int main(int argc, char **argv)
{
  static const char *const names[] = {"k_wait"};
  int n = argc > 1 ? atoi(argv[1]) : 8;
  pthread_t t[64];
  CUdevice dev;
  CUfunction fn;

  if (argc > 2)
    rounds = atoi(argv[2]);
  if (n < 1 || n > 64 || rounds < 1)
    e2e_fail("usage: sync_overlap [THREADS (1..64) [ROUNDS]]");
  e2e_context_with_kernels(&dev, &ctx, names, 1, &fn);
  fakegpu_set_kernel_duration_ns("k_wait", KERNEL_NS);
  CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  if (pthread_barrier_init(&launched, NULL, (unsigned)n + 1) ||
      pthread_barrier_init(&synced, NULL, (unsigned)n + 1))
    e2e_fail("pthread_barrier_init");
  for (long i = 0; i < n; i++)
    if (pthread_create(&t[i], NULL, syncer, (void *)i) != 0)
      e2e_fail("pthread_create");
  for (int r = 0; r < rounds; r++) {
    e2e_launch(fn, s);
    pthread_barrier_wait(&launched);
    pthread_barrier_wait(&synced);
  }
  for (int i = 0; i < n; i++)
    pthread_join(t[i], NULL);
  CU(cuStreamDestroy(s));
  printf("sync_overlap: done\n");
  return 0;
}
