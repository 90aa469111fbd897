/* e2e exit_paths: the same work, then the process ends by exit(3), _exit(3), returning 3 from
 * main, or exit(3) while another thread is still launching kernels (argv[1] selects). */
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "tests/fakegpu/fakegpu.h"
#include "tests/lib/e2e.h"

#define SPINNER_MIN 200

static const char *const names[] = {"_Z4stepv", "_Z7spinnerv"};

static CUcontext ctx;
static CUfunction step, spinner;
static atomic_long spins;

static void *spin(void *arg)
{
  CUstream s;

  (void)arg;
  CU(cuCtxSetCurrent(ctx));
  CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  for (;;) {
    e2e_launch(spinner, s);
    atomic_fetch_add(&spins, 1);
  }
  return NULL;
}

static void leave(void)
{
  exit(3);
}

int main(int argc, char **argv)
{
  const char *mode = argc > 1 ? argv[1] : "";
  CUdevice dev;
  CUstream s;
  CUmodule mod;
  CUdeviceptr kept;

  CU(cuInit(0));
  CU(cuDeviceGet(&dev, 0));
  CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU(cuCtxSetCurrent(ctx));
  CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  mod = e2e_module_with_kernels(names, 2);
  CU(cuModuleGetFunction(&step, mod, names[0]));
  CU(cuModuleGetFunction(&spinner, mod, names[1]));
  fakegpu_set_kernel_duration_ns(names[0], 2500);
  fakegpu_set_kernel_duration_ns(names[1], 100);

  /* 5 launches and an allocation that is never freed: in use at exit. */
  CU(cuMemAlloc(&kept, 4096));
  for (int i = 0; i < 5; i++)
    e2e_launch(step, s);
  CU(cuStreamSynchronize(s));
  printf("exit_paths %s: work done\n", mode);
  fflush(stdout);

  if (strcmp(mode, "exit") == 0)
    leave();
  if (strcmp(mode, "_exit") == 0)
    _exit(3);
  if (strcmp(mode, "return") == 0)
    return 3;
  if (strcmp(mode, "thread") == 0) {
    pthread_t t;
    if (pthread_create(&t, NULL, spin, NULL) != 0)
      e2e_fail("pthread_create");
    while (atomic_load(&spins) < SPINNER_MIN)
      usleep(1000);
    printf("exit_paths thread: spinner passed %d launches\n", SPINNER_MIN);
    fflush(stdout);
    exit(3);
  }
  fprintf(stderr, "usage: exit_paths exit|_exit|return|thread\n");
  return 2;
}
