/* e2e child_processes: children that use CUDA get their own agent and summary: one forked
 * before the parent initialises CUDA, one started with exec after it. */
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/fakegpu/fakegpu.h"
#include "tests/lib/e2e.h"

/* Initialises CUDA in this process and launches `n` kernels named `name`, `ns` each. */
static void launch_work(const char *role, const char *name, int n, uint64_t ns)
{
  CUdevice dev;
  CUcontext ctx;
  CUstream s;
  CUmodule mod;
  CUfunction fn;

  CU(cuInit(0));
  CU(cuDeviceGet(&dev, 0));
  CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU(cuCtxSetCurrent(ctx));
  CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  mod = e2e_module_with_kernels(&name, 1);
  CU(cuModuleGetFunction(&fn, mod, name));
  fakegpu_set_kernel_duration_ns(name, ns);
  for (int i = 0; i < n; i++)
    e2e_launch(fn, s);
  CU(cuStreamSynchronize(s));
  CU(cuStreamDestroy(s));
  printf("%s: %d launches\n", role, n);
  fflush(stdout);
}

static void wait_child(pid_t child, const char *what)
{
  int status = 0;

  if (child < 0)
    e2e_fail("fork");
  if (waitpid(child, &status, 0) != child)
    e2e_fail("waitpid");
  printf("parent: %s exited with %d\n", what, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  fflush(stdout);
}

int main(int argc, char **argv)
{
  pid_t child;

  if (argc > 1 && strcmp(argv[1], "exec-child") == 0) {
    launch_work("exec child", "_Z9execChildv", 2, 7000);
    return 0;
  }

  /* Before the parent touches CUDA: the child's own cuInit injects a fresh agent. */
  fflush(stdout);
  child = fork();
  if (child == 0) {
    launch_work("fork child", "_Z9forkChildv", 3, 5000);
    exit(0);
  }
  wait_child(child, "fork child");

  launch_work("parent", "_Z10parentWorkv", 4, 3000);

  /* After: the exec'ed image inherits CUDA_INJECTION64_PATH and injects on its own cuInit. */
  child = fork();
  if (child == 0) {
    execl("/proc/self/exe", argv[0], "exec-child", (char *)NULL);
    _exit(127);
  }
  wait_child(child, "exec child");
  return 0;
}
