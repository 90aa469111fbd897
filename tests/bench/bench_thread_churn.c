/* Benchmark: process RSS, heap, fds and threads after 1k, 10k, 100k short-lived CUDA threads,
 * with no capture running or inside back-to-back API captures (flat numbers: recycled). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>

#include "tests/lib/procstat.h"

/*
 * usage: bench_thread_churn [THREADS [AT_ONCE [captures|none [PER_CAPTURE [WIDE]]]]]
 * (defaults 100000 8 captures 1000 0). Run under the agent (CUDA_INJECTION64_PATH, the
 * simulator's libcuda first on LD_LIBRARY_PATH). THREADS threads, AT_ONCE alive at a time,
 * each: cuCtxSetCurrent, cuMemAlloc(4096), 2 x cuLaunchKernel, cuStreamSynchronize, cuMemFree.
 * With "captures" every PER_CAPTURE threads run inside one API capture (its files deleted after
 * it), so each thread takes an API ring (agent/capture.c) that must be recycled; with WIDE > 0
 * WIDE threads alive together in a capture come first (the rings' high-water mark). Prints,
 * after 1k, 10k, 100k, ... threads and at the end: VmRSS, the heap in use (mallinfo2: every
 * arena plus mmapped chunks; the rings are heap), open fds and threads.
 */

static CUcontext ctx;
static CUfunction fn;
static pthread_barrier_t *wide_barrier;

static void cu(CUresult r, const char *what)
{
  if (r != CUDA_SUCCESS) {
    fprintf(stderr, "bench_thread_churn: %s failed (%d)\n", what, (int)r);
    exit(1);
  }
}

static void *worker(void *arg)
{
  CUdeviceptr p;

  (void)arg;
  cu(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  cu(cuMemAlloc(&p, 4096), "cuMemAlloc");
  for (int k = 0; k < 2; k++)
    cu(cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL), "cuLaunchKernel");
  cu(cuStreamSynchronize(NULL), "cuStreamSynchronize");
  if (wide_barrier)
    pthread_barrier_wait(wide_barrier);
  cu(cuMemFree(p), "cuMemFree");
  return NULL;
}

static void report(const char *when, unsigned long n, double secs)
{
  struct mallinfo2 mi = mallinfo2();

  printf("%-6s %7lu threads: rss %7ld KiB  heap in use %10zu B  fds %3d  threads %3d  %.1f s\n",
         when, n, procstat_rss_kib(), mi.uordblks + mi.hblkhd, procstat_count_dir("/proc/self/fd"),
         procstat_count_dir("/proc/self/task"), secs);
  fflush(stdout);
}

/* Deletes the capture's files: 100 captures would otherwise fill the disk, not the heap. */
static void clear_dir(const char *dir)
{
  char path[4096];
  DIR *d = dir ? opendir(dir) : NULL;
  struct dirent *e;

  if (!d)
    return;
  while ((e = readdir(d)))
    if (e->d_name[0] != '.' &&
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) < (int)sizeof(path))
      unlink(path);
  closedir(d);
}

/* The process's threads by name: says whose thread stayed when the count moved. */
static void list_threads(void)
{
  char path[300], name[64];
  DIR *d = opendir("/proc/self/task");
  struct dirent *e;
  FILE *f;

  if (!d)
    return;
  printf("threads:");
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.')
      continue;
    snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
    if ((f = fopen(path, "r"))) {
      if (fgets(name, sizeof(name), f))
        printf(" %.*s", (int)strcspn(name, "\n"), name);
      fclose(f);
    }
  }
  printf("\n");
  closedir(d);
}

static double now_s(void)
{
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void run_threads(unsigned long n)
{
  pthread_t t[1024];

  for (unsigned long k = 0; k < n; k++)
    if (pthread_create(&t[k], NULL, worker, NULL) != 0) {
      fprintf(stderr, "bench_thread_churn: pthread_create failed\n");
      exit(1);
    }
  for (unsigned long k = 0; k < n; k++)
    pthread_join(t[k], NULL);
}

int main(int argc, char **argv)
{
  static const char ptx[] = ".version 9.0\n.target sm_75\n.address_size 64\n\n"
                            ".visible .entry churn_bench()\n{\n\tret;\n}\n";
  unsigned long total = argc > 1 ? strtoul(argv[1], NULL, 10) : 100000;
  unsigned long at_once = argc > 2 ? strtoul(argv[2], NULL, 10) : 8;
  int captures = argc > 3 ? strcmp(argv[3], "none") != 0 : 1;
  unsigned long per = argc > 4 ? strtoul(argv[4], NULL, 10) : 1000;
  unsigned long wide = argc > 5 ? strtoul(argv[5], NULL, 10) : 0;
  const char *out = getenv("GPUPROF_OUTPUT_DIR");
  int (*start)(unsigned, unsigned) = NULL;
  int (*stop)(void) = NULL;
  unsigned long done = 0, next_report = 1000;
  void *agent = NULL;
  pthread_barrier_t b;
  CUmodule mod;
  CUdevice dev;
  double t0;

  if (!at_once || at_once > 1024 || !per || wide > 1024) {
    fprintf(stderr, "bench_thread_churn: AT_ONCE 1..1024, PER_CAPTURE > 0, WIDE <= 1024\n");
    return 2;
  }
  cu(cuInit(0), "cuInit");
  cu(cuDeviceGet(&dev, 0), "cuDeviceGet");
  cu(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  cu(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  cu(cuModuleLoadData(&mod, ptx), "cuModuleLoadData");
  cu(cuModuleGetFunction(&fn, mod, "churn_bench"), "cuModuleGetFunction");
  if (getenv("CUDA_INJECTION64_PATH"))
    agent = dlopen(getenv("CUDA_INJECTION64_PATH"), RTLD_NOW | RTLD_NOLOAD);
  if (agent) {
    start = (int (*)(unsigned, unsigned))dlsym(agent, "gpuprof_capture_start");
    stop = (int (*)(void))dlsym(agent, "gpuprof_capture_stop");
  }
  if (captures && (!start || !stop)) {
    fprintf(stderr, "bench_thread_churn: captures need the agent (CUDA_INJECTION64_PATH)\n");
    return 2;
  }
  printf("%lu threads, %lu at a time, %s, wide %lu\n", total, at_once,
         captures ? "inside API captures" : "no capture", wide);
  report("start", 0, 0);
  t0 = now_s();
  if (wide) {
    pthread_barrier_init(&b, NULL, (unsigned)wide);
    wide_barrier = &b;
    if (captures && start(600000, 0) != 0)
      fprintf(stderr, "bench_thread_churn: capture start failed\n");
    run_threads(wide);
    if (captures)
      stop();
    clear_dir(out);
    wide_barrier = NULL;
    pthread_barrier_destroy(&b);
    report("wide", wide, now_s() - t0);
  }
  while (done < total) {
    unsigned long batch_end = captures ? done + per : next_report;
    int rc = captures ? start(600000, 0) : 0;

    if (rc != 0)
      fprintf(stderr, "bench_thread_churn: capture start returned %d\n", rc);
    if (batch_end > total)
      batch_end = total;
    while (done < batch_end) {
      unsigned long n = batch_end - done < at_once ? batch_end - done : at_once;

      run_threads(n);
      done += n;
    }
    if (captures) {
      stop();
      clear_dir(out);
    }
    if (done >= next_report) {
      report("after", done, now_s() - t0);
      next_report *= 10;
    }
  }
  report("end", done, now_s() - t0);
  /* A joined thread can stay listed for a moment while the kernel releases it. */
  usleep(200000);
  report("+0.2 s", done, now_s() - t0);
  list_threads();
  return 0;
}
