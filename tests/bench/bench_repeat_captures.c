/* Benchmark: process RSS, heap, fds and threads after 1, 10, 100 and N short captures of one
 * running process (on demand, as a sidecar's hourly captures are). Not a test. */
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "gpuprof/gpuprof.h"
#include "tests/fakegpu/fakegpu.h"
#include "tests/lib/e2e.h"
#include "tests/lib/procstat.h"

#pragma weak gpuprof_capture_start
#pragma weak gpuprof_capture_stop

/*
 * Usage: bench_repeat_captures [captures] [launches_per_capture]
 * Run under the agent, preloaded (the API binds at start), in on-demand mode, e.g.
 *   GPUPROF_MODE=ondemand GPUPROF_FLUSH_INTERVAL=10ms LD_PRELOAD=$agent
 *   CUDA_INJECTION64_PATH=$agent LD_LIBRARY_PATH=build/fakegpu/lib bench_repeat_captures 500
 * Two application threads launch kernels all along. Captures alternate between the public
 * API and the process's own control socket (as `gpuprof capture` / `gpuprof stop` would),
 * cycling the formats json, json.gz, perfetto, every fourth GPU-only; each lasts until
 * `launches_per_capture` more kernels were launched, then is stopped. Its files (named by the
 * agent's status) are deleted, so the disk does not fill. After captures 1, 10, 100 and N it
 * prints VmRSS, the heap in use (mallinfo2: every arena, and mmapped chunks), open fds and
 * threads.
 */

#define THREADS 2

static const char *const names[THREADS] = {"_Z10benchRepAv", "_Z10benchRepBv"};
static CUcontext ctx;
static CUfunction fn[THREADS];
static atomic_int stop_launching;
static atomic_ulong launched;
static char sock_path[sizeof(((struct sockaddr_un *)0)->sun_path)];

static void *launcher(void *arg)
{
  int i = (int)(intptr_t)arg;
  struct timespec pause = {0, 200000}; /* 0.2 ms: a steady stream, not a flood */
  CUstream s;

  CU(cuCtxSetCurrent(ctx));
  CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  while (!atomic_load(&stop_launching)) {
    e2e_launch(fn[i], s);
    CU(cuStreamSynchronize(s));
    atomic_fetch_add(&launched, 1);
    nanosleep(&pause, NULL);
  }
  CU(cuStreamDestroy(s));
  return NULL;
}

/* One control request (docs/CONTROL.md); the reply in buf. 0 or -1. */
static int request(const char *req, char *buf, size_t len)
{
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  size_t got = 0;
  ssize_t n;
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0), ret = -1;

  if (fd < 0)
    return -1;
  snprintf(a.sun_path, sizeof(a.sun_path), "%s", sock_path);
  if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
      write(fd, req, strlen(req)) != (ssize_t)strlen(req))
    goto out;
  while (got + 1 < len && (n = read(fd, buf + got, len - 1 - got)) > 0)
    got += (size_t)n;
  buf[got] = '\0';
  ret = strncmp(buf, "GPUPROF/1 ok\n", 13) == 0 ? 0 : -1;
out:
  close(fd);
  return ret;
}

/* Waits until the last capture is finished, then deletes its files. */
static void finish_and_delete(void)
{
  char buf[16384], *line, *save = NULL;

  for (int tries = 0; tries < 5000; tries++) {
    if (request("GPUPROF/1 status\n\n", buf, sizeof(buf)) == 0 &&
        strstr(buf, "\ncapture.state=idle\n"))
      break;
    usleep(1000);
  }
  for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
    if (!strncmp(line, "capture.file=", 13))
      unlink(line + 13);
}

static void wait_launches(unsigned long n)
{
  unsigned long until = atomic_load(&launched) + n;

  while (atomic_load(&launched) < until)
    usleep(200);
}

static void report(unsigned long n)
{
  struct mallinfo2 mi = mallinfo2();

  /* In use: chunks of every arena plus the mmapped ones (the agent's big per-capture tables). */
  printf("after %5lu captures: rss %6ld KiB  heap in use %8zu B  fds %3d  threads %2d\n", n,
         procstat_rss_kib(), mi.uordblks + mi.hblkhd, procstat_count_dir("/proc/self/fd"),
         procstat_count_dir("/proc/self/task"));
  fflush(stdout);
}

int main(int argc, char **argv)
{
  static const char *const formats[] = {"json", "json.gz", "perfetto"};
  unsigned long captures = argc > 1 ? strtoul(argv[1], NULL, 10) : 500;
  unsigned long per = argc > 2 ? strtoul(argv[2], NULL, 10) : 20;
  const char *run_dir = getenv("GPUPROF_RUN_DIR");
  pthread_t t[THREADS];
  char req[256], buf[16384];
  CUdevice dev;
  CUmodule mod;

  if (!gpuprof_capture_start || !gpuprof_capture_stop) {
    fprintf(stderr, "bench_repeat_captures: run with LD_PRELOAD=<libgpuprof.so>\n");
    return 2;
  }
  snprintf(sock_path, sizeof(sock_path), "%s/gpuprof-%d.sock",
           run_dir ? run_dir : "/tmp/gpuprof/run", (int)getpid());
  mod = e2e_context_with_kernels(&dev, &ctx, names, THREADS, fn);
  for (int i = 0; i < THREADS; i++)
    fakegpu_set_kernel_duration_ns(names[i], 2000);
  for (int i = 0; i < THREADS; i++)
    if (pthread_create(&t[i], NULL, launcher, (void *)(intptr_t)i) != 0)
      e2e_fail("pthread_create");
  wait_launches(per);
  report(0);
  for (unsigned long c = 1; c <= captures; c++) {
    int gpu_only = c % 4 == 0;

    if (c % 2) {
      if (gpuprof_capture_start(60000, gpu_only ? GPUPROF_CAPTURE_GPU_ONLY : 0) != 0)
        e2e_fail("gpuprof_capture_start");
      wait_launches(per);
      if (gpuprof_capture_stop() != 0)
        e2e_fail("gpuprof_capture_stop");
    } else {
      snprintf(req, sizeof(req),
               "GPUPROF/1 capture\nduration_ns=60000000000\ngpu_only=%d\nformat=%s\n\n", gpu_only,
               formats[c % 3]);
      if (request(req, buf, sizeof(buf)) != 0)
        e2e_fail("capture request");
      wait_launches(per);
      if (request("GPUPROF/1 stop\n\n", buf, sizeof(buf)) != 0)
        e2e_fail("stop request");
    }
    finish_and_delete();
    if (c == 1 || c == 10 || c == 100 || c == 1000 || c == captures)
      report(c);
  }
  atomic_store(&stop_launching, 1);
  for (int i = 0; i < THREADS; i++)
    pthread_join(t[i], NULL);
  CU(cuModuleUnload(mod));
  CU(cuDevicePrimaryCtxRelease(dev));
  printf("%lu kernels launched\n", atomic_load(&launched));
  return 0;
}
