/* Known native call chains that launch, allocate and copy: plain calls, recursion, threads, a
 * library loaded with dlopen after start, and frames libunwind cannot step through. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/mman.h>

#include "tests/stacks/stk.h"

#define MIB (1024u * 1024u)
#define N_THREADS 3

static CUfunction k_a, k_rec, k_thr;

/* A chain of plain calls: main -> stk_path_top -> stk_path_mid -> stk_path_leaf -> launch x3. */
STK_FRAME static void stk_path_leaf(void)
{
  for (int i = 0; i < 3; i++)
    STK_CU(cuLaunchKernel(k_a, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
}

STK_FRAME static void stk_path_mid(void)
{
  stk_path_leaf();
}

STK_FRAME void stk_path_top(void)
{
  stk_path_mid();
}

/* Recursion: four stk_recurse frames, then one allocation (kept live) and one launch. */
STK_FRAME static CUdeviceptr stk_recurse(int n)
{
  CUdeviceptr p = 0;

  if (n > 1)
    return stk_recurse(n - 1) + 0;
  STK_CU(cuMemAlloc(&p, MIB));
  STK_CU(cuLaunchKernel(k_rec, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
  return p;
}

/* Threads: each copies 4096 bytes to the device and launches once. */
STK_FRAME static void stk_thread_work(CUcontext ctx)
{
  static char host[4096];
  CUdeviceptr p;

  STK_CU(cuCtxSetCurrent(ctx));
  STK_CU(cuMemAlloc(&p, 4096));
  STK_CU(cuMemcpyHtoD(p, host, sizeof(host)));
  STK_CU(cuLaunchKernel(k_thr, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
  STK_CU(cuCtxSynchronize());
  STK_CU(cuMemFree(p));
}

STK_FRAME static void *stk_thread_main(void *arg)
{
  stk_thread_work(arg);
  return NULL;
}

/* A library that did not exist when the agent started. */
STK_FRAME static void stk_call_plugin(const char *path)
{
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  void (*entry)(void);

  if (!h) {
    fprintf(stderr, "stacks: dlopen %s: %s\n", path, dlerror());
    exit(1);
  }
  *(void **)&entry = dlsym(h, "stk_plugin_entry");
  if (!entry)
    exit(1);
  entry();
}

/* In stacks_nounwind.c: built without unwind tables. */
void stk_nounwind_launch(CUfunction f);
void stk_bad_fp_launch(CUfunction f, uint64_t fp);

/*
 * Launches from a frame without unwind information whose frame pointer is garbage, one
 * kernel per kind of garbage: a small integer, an address in a PROT_NONE mapping (mapped but
 * unreadable: a check that the page exists is not enough), a readable chain whose saved frame
 * pointer leads into that mapping and whose return address lies in no module, a
 * non-canonical address, and a frame pointer that points at itself. Both unwinders must end
 * the stack at stk_bad_fp_launch and the process must go on.
 */
STK_FRAME static void stk_bad_frames(void)
{
  static const char *const kernels[] = {"stk_kernel_corrupt", "stk_kernel_fp_prot_none",
                                        "stk_kernel_fp_chain", "stk_kernel_fp_noncanonical",
                                        "stk_kernel_fp_loop"};
  char *none = mmap(NULL, 2 * 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  uint64_t *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  uint64_t fps[5];

  if (none == MAP_FAILED || page == MAP_FAILED)
    exit(1);
  page[0] = (uint64_t)(uintptr_t)(none + 4096); /* saved frame pointer: unreadable */
  page[1] = 0x7fff00001234ull;                  /* return address: no module there */
  page[8] = (uint64_t)(uintptr_t)&page[8];      /* saved frame pointer: itself */
  page[9] = 0x7fff00005678ull;
  fps[0] = 0x10;
  fps[1] = (uint64_t)(uintptr_t)(none + 64);
  fps[2] = (uint64_t)(uintptr_t)page;
  fps[3] = 0x4141414141414141ull;
  fps[4] = (uint64_t)(uintptr_t)&page[8];
  for (int i = 0; i < 5; i++)
    stk_bad_fp_launch(stk_kernel(kernels[i]), fps[i]);
  munmap(none, 2 * 4096);
  munmap(page, 4096);
}

int main(int argc, char **argv)
{
  CUcontext ctx;
  pthread_t th[N_THREADS];

  if (argc < 2) {
    fprintf(stderr, "usage: %s PLUGIN.so\n", argv[0]);
    return 2;
  }
  ctx = stk_context();
  k_a = stk_kernel("stk_kernel_path");
  k_rec = stk_kernel("stk_kernel_recurse");
  k_thr = stk_kernel("stk_kernel_thread");

  stk_path_top();
  if (!stk_recurse(4))
    return 1;
  for (int i = 0; i < N_THREADS; i++)
    if (pthread_create(&th[i], NULL, stk_thread_main, ctx))
      return 1;
  for (int i = 0; i < N_THREADS; i++)
    pthread_join(th[i], NULL);
  stk_call_plugin(argv[1]);
  stk_nounwind_launch(stk_kernel("stk_kernel_nounwind"));
  stk_bad_frames();
  STK_CU(cuCtxSynchronize());
  printf("stacks_native: done\n");
  return 0;
}
