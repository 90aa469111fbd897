/* A workload that runs a simulated 80 MiB GPU (FAKEGPU_DEVICE_MEM_MIB=80) out of memory: known
 * holders, a failed allocation it survives (as PyTorch's caching allocator does), a second one, a
 * normal exit. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#define MIB (1ull << 20)
#define NOINLINE __attribute__((noinline))

static int driver_mode;
static void *weights[4], *cache[4], *late[3];

/* Inline on purpose: the allocating function, not a helper, is the stack's innermost frame. */
#define ALLOC(pp, n)                                                                               \
  (driver_mode ? (int)cuMemAlloc((CUdeviceptr *)(void *)(pp), (n)) : (int)cudaMalloc((pp), (n)))
#define FREE(p) (driver_mode ? (int)cuMemFree((CUdeviceptr)(uintptr_t)(p)) : (int)cudaFree(p))

static void must(int r, const char *what)
{
  if (r != 0) {
    fprintf(stderr, "oom_prog: %s returned %d\n", what, r);
    exit(1);
  }
}

/* The error both APIs give for lack of memory (cudaErrorMemoryAllocation,
 * CUDA_ERROR_OUT_OF_MEMORY). */
static void must_fail(int r, const char *what)
{
  if (r != 2) {
    fprintf(stderr, "oom_prog: %s returned %d, expected out of memory (2)\n", what, r);
    exit(1);
  }
  printf("oom_prog: %s: out of memory\n", what);
}

/* 4 x 9 MiB = 36 MiB, kept until the end. */
NOINLINE static void hold_weights(void)
{
  for (int i = 0; i < 4; i++)
    must(ALLOC(&weights[i], 9 * MIB), "hold_weights");
}

/* 4 x 10 MiB, one freed: 30 MiB in use. */
NOINLINE static void hold_cache(void)
{
  for (int i = 0; i < 4; i++)
    must(ALLOC(&cache[i], 10 * MIB), "hold_cache");
  must(FREE(cache[3]), "hold_cache free");
}

/* 66 MiB in use + 16 MiB > 80 MiB. */
NOINLINE static void grow_batch(void)
{
  void *p = NULL;

  must_fail(ALLOC(&p, 16 * MIB), "grow_batch");
}

/* What a caching allocator does next: free the cache at once (the snapshot must still show it). */
NOINLINE static void drop_cache(void)
{
  for (int i = 0; i < 3; i++)
    must(FREE(cache[i]), "drop_cache");
}

/* 3 x 11 MiB: 69 MiB in use. */
NOINLINE static void after_oom(void)
{
  for (int i = 0; i < 3; i++)
    must(ALLOC(&late[i], 11 * MIB), "after_oom");
}

/* Named like the API of a statically linked CUDA runtime (nvcc's default), whose frames are
 * in the program, not in libcudart.so: the stderr line must name its caller. */
NOINLINE static int cudaMallocStaticShim(void **p, size_t n)
{
  return ALLOC(p, n);
}

/* 69 MiB + 12 MiB > 80 MiB: the second failure. */
NOINLINE static void retry_batch(void)
{
  void *p = NULL;

  must_fail(cudaMallocStaticShim(&p, 12 * MIB), "retry_batch");
}

/* Whether the agent has written a gpu_memory_oom snapshot into GPUPROF_OUTPUT_DIR. */
static int snapshot_written(void)
{
  const char *dir = getenv("GPUPROF_OUTPUT_DIR");
  struct dirent *e;
  DIR *d = dir ? opendir(dir) : NULL;
  int found = 0;

  while (d && !found && (e = readdir(d)))
    found = strstr(e->d_name, "-gpu_memory_oom-") && strstr(e->d_name, ".pb.gz") &&
            !strstr(e->d_name, ".tmp");
  if (d)
    closedir(d);
  return found;
}

int main(int argc, char **argv)
{
  int pause_ms = 0;

  driver_mode = argc > 1 && !strcmp(argv[1], "driver");
  if (argc > 2)
    pause_ms = atoi(argv[2]);
  if (driver_mode) {
    CUdevice dev;
    CUcontext ctx;
    must(cuInit(0), "cuInit");
    must(cuDeviceGet(&dev, 0), "cuDeviceGet");
    must(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    must(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  }
  hold_weights();
  hold_cache();
  grow_batch();
  drop_cache();
  after_oom();
  /* A pause longer than GPUPROF_OOM_INTERVAL makes the second failure snapshot-worthy; the
   * first snapshot must also be written by then (its slot free again), which a loaded
   * machine may delay: wait for its file (up to 30 s) before the rest of the pause. */
  if (pause_ms) {
    for (int i = 0; i < 300 && !snapshot_written(); i++)
      usleep(100 * 1000);
    usleep((useconds_t)pause_ms * 1000);
  }
  retry_batch();
  for (int i = 0; i < 3; i++)
    must(FREE(late[i]), "free late");
  for (int i = 0; i < 4; i++)
    must(FREE(weights[i]), "free weights");
  printf("oom_prog: done\n");
  return 0;
}
