/* NVTX workload for the NVTX capture tests: ranges, marks and start/end ranges, written with
 * NVIDIA's nvtx3 headers (their loader is the one under test), around a public-API capture. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <nvtx3/nvToolsExt.h>

#include "gpuprof/gpuprof.h"
#include "tests/fakegpu/fakegpu.h"
#include "tests/lib/e2e.h"

#pragma weak gpuprof_capture_start
#pragma weak gpuprof_capture_stop

static const char *const names[] = {"k_step", "_Z40ncclDevKernel_AllReduce_Sum_f32_RING_LLv"};
static CUfunction fn[2];
static CUcontext ctx;
static nvtxRangeId_t cross_id;

static void sleep_ms(unsigned ms)
{
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

/* How many NVTX callbacks the simulated CUPTI has enabled now (-1: not the simulator). */
static int nvtx_enables(void)
{
  void *lib = dlopen("libcupti.so.13", RTLD_NOW | RTLD_NOLOAD);
  int (*f)(int) = lib ? (int (*)(int))dlsym(lib, "fakegpu_cupti_enabled_callbacks") : NULL;

  return f ? f(5) : -1; /* CUPTI_CB_DOMAIN_NVTX */
}

static nvtxEventAttributes_t attr_ascii(const char *m)
{
  nvtxEventAttributes_t a = {0};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = m;
  return a;
}

static void *ender(void *arg)
{
  (void)arg;
  pthread_setname_np(pthread_self(), "ender");
  sleep_ms(3);
  nvtxRangeEnd(cross_id); /* started on main */
  return NULL;
}

int main(int argc, char **argv)
{
  unsigned flags = argc > 1 && !strcmp(argv[1], "gpu-only") ? GPUPROF_CAPTURE_GPU_ONLY : 0;
  nvtxDomainHandle_t nccl;
  nvtxStringHandle_t allreduce;
  nvtxEventAttributes_t a;
  nvtxRangeId_t span2;
  CUdevice dev;
  CUmodule mod;
  CUstream s;
  CUdeviceptr p;
  pthread_t t;
  int rc;

  setvbuf(stdout, NULL, _IONBF, 0);
  if (!gpuprof_capture_start || !gpuprof_capture_stop)
    e2e_fail("run with LD_PRELOAD of the agent");

  /* Before cuInit: NVTX initializes here (the agent is injected, CUPTI not yet attached).
   * NCCL creates its domain and strings once, often this early. */
  nccl = nvtxDomainCreateA("NCCL");
  allreduce = nvtxDomainRegisterStringA(nccl, "ncclAllReduce");
  nvtxRangePushA("before_cuinit");
  nvtxRangePop();

  CU(cuInit(0));
  CU(cuDeviceGet(&dev, 0));
  CU(cuCtxCreate(&ctx, NULL, 0, dev));
  mod = e2e_module_with_kernels(names, 2);
  CU(cuModuleGetFunction(&fn[0], mod, names[0]));
  CU(cuModuleGetFunction(&fn[1], mod, names[1]));
  fakegpu_set_kernel_duration_ns(names[0], 4000);
  fakegpu_set_kernel_duration_ns(names[1], 6000);
  CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));

  nvtxRangePushA("open_at_start"); /* popped inside the capture: left out */
  printf("nvtx enables before: %d\n", nvtx_enables());
  rc = gpuprof_capture_start(60000, flags);
  printf("capture start: %d\n", rc);
  printf("nvtx enables during: %d\n", nvtx_enables());

  nvtxRangePushA("step");
  e2e_launch(fn[0], s);
  CU(cuStreamSynchronize(s));
  sleep_ms(2);
  nvtxRangePushA("inner");
  CU(cuMemAlloc(&p, 4096));
  sleep_ms(1);
  CU(cuMemFree(p));
  nvtxRangePop(); /* inner */
  nvtxRangePop(); /* step */
  nvtxRangePop(); /* open_at_start: its push came before the capture */

  /* What NCCL < 2.23 does around each collective: a registered string in domain "NCCL". */
  a = attr_ascii(NULL);
  a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
  a.message.registered = allreduce;
  nvtxDomainRangePushEx(nccl, &a);
  e2e_launch(fn[1], s);
  nvtxDomainRangePop(nccl);
  CU(cuStreamSynchronize(s));

  nvtxMarkA("mark_a");
  a = attr_ascii("nccl_mark");
  nvtxDomainMarkEx(nccl, &a);
  a = attr_ascii("ex_range");
  nvtxRangePushEx(&a);
  sleep_ms(1);
  nvtxRangePushW(L"wide"); /* recorded with a placeholder; its pop must not close ex_range */
  nvtxMarkW(L"wide_mark");
  nvtxRangePop();
  nvtxRangePop();

  /* Start/end: "cross" ends on another thread; "span2" overlaps it without nesting. */
  cross_id = nvtxRangeStartA("cross");
  CU(pthread_create(&t, NULL, ender, NULL) ? CUDA_ERROR_UNKNOWN : CUDA_SUCCESS);
  sleep_ms(1);
  a = attr_ascii("span2");
  span2 = nvtxDomainRangeStartEx(nccl, &a);
  pthread_join(t, NULL);
  sleep_ms(1);
  nvtxDomainRangeEnd(nccl, span2);

  nvtxRangePushA("open_at_end");
  rc = gpuprof_capture_stop();
  printf("capture stop: %d\n", rc);
  nvtxRangePop();
  nvtxRangePushA("after");
  nvtxRangePop();
  printf("nvtx enables after: %d\n", nvtx_enables());

  /* A forked child (dormant agent): NVTX keeps working as no-ops, new domains included. */
  {
    pid_t child = fork();
    int status = -1;
    if (child < 0)
      e2e_fail("fork");
    if (child == 0) {
      nvtxDomainHandle_t d = nvtxDomainCreateA("child");
      a = attr_ascii("child_range");
      nvtxDomainRangePushEx(d, &a);
      nvtxRangePushA("child_push");
      nvtxMarkA("child_mark");
      nvtxRangePop();
      nvtxDomainRangePop(d);
      nvtxRangeEnd(nvtxRangeStartA("child_span"));
      _exit(0);
    }
    waitpid(child, &status, 0);
    printf("fork child: %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  }
  return 0;
}
