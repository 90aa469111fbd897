/* e2e fork_after_init: CUDA work, then fork; the child (no CUDA) exits through exit() so every
 * atexit handler runs in it; the parent waits and does more CUDA work. */
#include <sys/wait.h>
#include <unistd.h>

#include "tests/fakegpu/fakegpu.h"
#include "tests/lib/e2e.h"

static const char *const names[] = {"_Z10beforeForkv", "_Z9afterForkv"};

int main(void)
{
  CUdevice dev;
  CUcontext ctx;
  CUstream s;
  CUmodule mod;
  CUfunction before, after;
  CUdeviceptr p;
  pid_t child;
  int status = 0;

  CU(cuInit(0));
  CU(cuDeviceGet(&dev, 0));
  CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU(cuCtxSetCurrent(ctx));
  CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  mod = e2e_module_with_kernels(names, 2);
  CU(cuModuleGetFunction(&before, mod, names[0]));
  CU(cuModuleGetFunction(&after, mod, names[1]));
  fakegpu_set_kernel_duration_ns(names[0], 6000);
  fakegpu_set_kernel_duration_ns(names[1], 9000);

  CU(cuMemAlloc(&p, 4096));
  for (int i = 0; i < 4; i++)
    e2e_launch(before, s);
  CU(cuStreamSynchronize(s));

  fflush(stdout);
  child = fork();
  if (child < 0)
    e2e_fail("fork");
  if (child == 0) {
    /* CUDA is not usable after fork; the child only computes and leaves through exit(). */
    unsigned sum = 0;
    for (unsigned i = 0; i < 1000; i++)
      sum += i;
    printf("child: sum %u\n", sum);
    exit(0);
  }
  if (waitpid(child, &status, 0) != child)
    e2e_fail("waitpid");
  printf("parent: child exited with %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);

  for (int i = 0; i < 3; i++)
    e2e_launch(after, s);
  CU(cuStreamSynchronize(s));
  CU(cuMemFree(p));
  CU(cuStreamDestroy(s));
  printf("parent: done\n");
  return 0;
}
