/* Known GPU work for the pprof tests: kernels, allocations and copies from named call chains. */
#define _GNU_SOURCE /* dladdr */
#include <dirent.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tests/stacks/stk.h"

/* Durations the checker expects (ns); the simulator runs each launch for exactly this. */
#define NS_A 5000
#define NS_B 7000
#define NS_W 3000

static CUfunction k_a, k_b;

STK_FRAME static void pp_launch_a(void)
{
  for (int i = 0; i < 3; i++)
    STK_CU(cuLaunchKernel(k_a, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
}

STK_FRAME static void pp_launch_b(void)
{
  for (int i = 0; i < 2; i++)
    STK_CU(cuLaunchKernel(k_a, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
  STK_CU(cuLaunchKernel(k_b, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
}

/* Two allocations kept, one freed: in use 2 MiB + 1 MiB from here... */
STK_FRAME static void pp_alloc_keep(void)
{
  CUdeviceptr p, q, r;

  STK_CU(cuMemAlloc(&p, 1 << 20));
  STK_CU(cuMemAlloc(&q, 2 << 20));
  STK_CU(cuMemAlloc(&r, 4096));
  STK_CU(cuMemFree(r));
}

/* ...allocated and freed again: allocated 3 x 8 KiB, none in use. */
STK_FRAME static void pp_alloc_free(void)
{
  for (int i = 0; i < 3; i++) {
    CUdeviceptr p;
    STK_CU(cuMemAlloc(&p, 8192));
    STK_CU(cuMemFree(p));
  }
}

STK_FRAME static void pp_alloc_pinned(void)
{
  void *h;

  STK_CU(cuMemAllocHost(&h, 16384));
}

STK_FRAME static void pp_alloc_managed(void)
{
  CUdeviceptr p;

  STK_CU(cuMemAllocManaged(&p, 65536, CU_MEM_ATTACH_GLOBAL));
}

/* HtoD 2 x 4096, DtoH 1 x 1000, DtoD 1 x 2048, memset 512. */
STK_FRAME static void pp_copy(void)
{
  static char host[4096];
  CUdeviceptr a, b;

  STK_CU(cuMemAlloc(&a, 4096));
  STK_CU(cuMemAlloc(&b, 4096));
  STK_CU(cuMemcpyHtoD(a, host, 4096));
  STK_CU(cuMemcpyHtoD(b, host, 4096));
  STK_CU(cuMemcpyDtoH(host, a, 1000));
  STK_CU(cuMemcpyDtoD(b, a, 2048));
  STK_CU(cuMemsetD8(a, 0, 512));
  STK_CU(cuMemFree(a));
  STK_CU(cuMemFree(b));
}

static uint64_t now_ns(void)
{
  struct timespec ts;

  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Sleeps until `ms` milliseconds past the next whole second (GPUPROF_WINDOW=1s). */
static void sleep_to_next_second(unsigned ms)
{
  uint64_t t = now_ns(), target = (t / 1000000000ull + 1) * 1000000000ull + ms * 1000000ull;
  struct timespec ts = {(time_t)(target / 1000000000ull), (long)(target % 1000000000ull)};

  while (clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &ts, NULL))
    ;
}

STK_FRAME static void pp_window_one(CUfunction k)
{
  CUdeviceptr p;

  for (int i = 0; i < 2; i++)
    STK_CU(cuLaunchKernel(k, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
  STK_CU(cuMemAlloc(&p, 1000));
}

STK_FRAME static void pp_window_two(CUfunction k)
{
  CUdeviceptr p;

  for (int i = 0; i < 3; i++)
    STK_CU(cuLaunchKernel(k, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
  STK_CU(cuMemAlloc(&p, 2000));
}

/* Waits (at most 20 s) until the agent wrote a gpu_time window into GPUPROF_OUTPUT_DIR. */
static void wait_for_window(void)
{
  const char *dir = getenv("GPUPROF_OUTPUT_DIR");

  for (int i = 0; dir && i < 2000; i++) {
    DIR *d = opendir(dir);
    struct dirent *e;
    int found = 0;

    while (d && (e = readdir(d)) != NULL)
      found |= strstr(e->d_name, "-gpu_time-") && strstr(e->d_name, ".pb.gz") &&
               !strstr(e->d_name, ".tmp");
    if (d)
      closedir(d);
    if (found)
      return;
    usleep(10000);
  }
}

/* dlopens path and launches k from its pp_reload_entry; prints where it was loaded. */
static void *pp_reload(const char *path, const char *tag, CUfunction k)
{
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  void (*entry)(CUfunction);
  Dl_info info;

  if (!h) {
    fprintf(stderr, "pprof_work: %s\n", dlerror());
    exit(1);
  }
  *(void **)&entry = dlsym(h, "pp_reload_entry");
  if (!entry || !dladdr(*(void **)&entry, &info)) {
    fprintf(stderr, "pprof_work: no pp_reload_entry in %s\n", path);
    exit(1);
  }
  printf("base %s %p\n", tag, info.dli_fbase);
  entry(k);
  STK_CU(cuCtxSynchronize());
  return h;
}

STK_FRAME static void pp_sampled(CUfunction k, int n)
{
  for (int i = 0; i < n; i++)
    STK_CU(cuLaunchKernel(k, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
}

/* Distinct call paths, one per value of `path` (two call sites per level), each allocating
 * and freeing once: enough of them fill the smallest stack table (GPUPROF_STACK_TABLE_SIZE). */
STK_FRAME static void pp_fill_a(int depth, unsigned path);
STK_FRAME static void pp_fill_b(int depth, unsigned path);

static void pp_fill_step(int depth, unsigned path)
{
  CUdeviceptr p;

  if (!depth) {
    STK_CU(cuMemAlloc(&p, 256));
    STK_CU(cuMemFree(p));
  } else if (path & 1) {
    pp_fill_a(depth - 1, path >> 1);
  } else {
    pp_fill_b(depth - 1, path >> 1);
  }
}

STK_FRAME static void pp_fill_a(int depth, unsigned path)
{
  pp_fill_step(depth, path);
}

STK_FRAME static void pp_fill_b(int depth, unsigned path)
{
  pp_fill_step(depth, path);
}

int main(int argc, char **argv)
{
  const char *mode = argc > 1 ? argv[1] : "basic";

  stk_context();
  if (!strcmp(mode, "basic")) {
    k_a = stk_kernel("pp_kernel_a");
    k_b = stk_kernel("pp_kernel_b");
    fakegpu_set_kernel_duration_ns("pp_kernel_a", NS_A);
    fakegpu_set_kernel_duration_ns("pp_kernel_b", NS_B);
    pp_launch_a();
    pp_launch_b();
    pp_alloc_keep();
    pp_alloc_free();
    pp_alloc_pinned();
    pp_alloc_managed();
    pp_copy();
  } else if (!strcmp(mode, "windows")) {
    CUfunction k1 = stk_kernel("pp_kernel_w1"), k2 = stk_kernel("pp_kernel_w2");

    fakegpu_set_kernel_duration_ns("pp_kernel_w1", NS_W);
    fakegpu_set_kernel_duration_ns("pp_kernel_w2", NS_W);
    /* Well inside each window: the memory cut comes at the first tick after a window's end. */
    sleep_to_next_second(200);
    printf("window1 %llu\n", (unsigned long long)(now_ns() / 1000000000ull));
    pp_window_one(k1);
    sleep_to_next_second(500);
    printf("window2 %llu\n", (unsigned long long)(now_ns() / 1000000000ull));
    pp_window_two(k2);
  } else if (!strcmp(mode, "sampled")) {
    CUfunction k = stk_kernel("pp_kernel_s");

    fakegpu_set_kernel_duration_ns("pp_kernel_s", 1000);
    pp_sampled(k, 400);
  } else if (!strcmp(mode, "sampled_full")) {
    CUfunction k = stk_kernel("pp_kernel_s");

    /* The table is full before the first launch: no sampled launch keeps its stack. */
    for (unsigned path = 0; path < (1u << 13); path++)
      pp_fill_step(13, path);
    fakegpu_set_kernel_duration_ns("pp_kernel_s", 1000);
    pp_sampled(k, 400);
  } else if (!strcmp(mode, "reload") && argc > 3) {
    CUfunction k = stk_kernel("pp_kernel_r");
    void *a;

    fakegpu_set_kernel_duration_ns("pp_kernel_r", NS_W);
    /* Plugin a launches in window 1, which is written while a is still loaded; then a is
     * closed and its twin b, loaded at the same addresses, launches in window 2. */
    sleep_to_next_second(200);
    printf("window1 %llu\n", (unsigned long long)(now_ns() / 1000000000ull));
    a = pp_reload(argv[2], "a", k);
    sleep_to_next_second(500);
    wait_for_window(); /* a slow worker (sanitizers, load) must not see a closed already */
    dlclose(a);
    printf("window2 %llu\n", (unsigned long long)(now_ns() / 1000000000ull));
    pp_reload(argv[3], "b", k);
  } else {
    fprintf(stderr, "usage: %s basic|windows|sampled|sampled_full|reload LIB_A LIB_B\n", argv[0]);
    return 2;
  }
  STK_CU(cuCtxSynchronize());
  printf("pprof_work: done\n");
  return 0;
}
