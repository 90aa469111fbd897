/* The rules the real CUPTI / driver enforce by deadlocking or hanging, which the double turns
 * into a loud abort (README "Rules enforced"): each violation runs in a forked child that must
 * die of SIGABRT naming the rule; the allowed neighbours of each rule must run cleanly. */
#define _GNU_SOURCE
#include <cuda.h>
#include <cupti.h>
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int g_failures;
static const char *g_mode;
static uint8_t g_buf[2][64 * 1024] __attribute__((aligned(8)));
static int g_next_buf;

static void CUPTIAPI requested(uint8_t **buffer, size_t *size, size_t *max)
{
  *buffer = g_buf[g_next_buf++ & 1];
  *size = sizeof(g_buf[0]);
  *max = 0;
  if (!strcmp(g_mode, "driver_in_request")) {
    int n;
    cuDeviceGetCount(&n);
  }
}

static void CUPTIAPI completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
                               size_t valid)
{
  (void)ctx, (void)stream, (void)buffer, (void)size, (void)valid;
  if (!strcmp(g_mode, "flush_in_complete"))
    cuptiActivityFlushAll(0);
  else if (!strcmp(g_mode, "forced_flush_in_complete"))
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  else if (!strcmp(g_mode, "finalize_in_complete"))
    cuptiFinalize();
  else if (!strcmp(g_mode, "driver_in_complete")) {
    int n;
    cuDeviceGetCount(&n);
  }
}

static void CUPTIAPI on_cb(void *ud, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                           const void *data)
{
  (void)ud;
  if (domain == CUPTI_CB_DOMAIN_RESOURCE && cbid == CUPTI_CBID_RESOURCE_STREAM_DESTROY_STARTING) {
    if (!strcmp(g_mode, "flush_in_stream_destroy"))
      cuptiActivityFlushAll(0);
    return;
  }
  if (domain == CUPTI_CB_DOMAIN_RESOURCE && cbid == CUPTI_CBID_RESOURCE_CONTEXT_CREATED) {
    if (!strcmp(g_mode, "driver_in_resource")) {
      CUdevice d;
      cuCtxGetDevice(&d);
    }
    return;
  }
  if (domain != CUPTI_CB_DOMAIN_DRIVER_API || cbid != CUPTI_DRIVER_TRACE_CBID_cuDriverGetVersion)
    return;
  const CUpti_CallbackData *cd = data;
  if (!strcmp(g_mode, "driver_in_callback")) {
    int n;
    cuDeviceGetCount(&n);
  } else if (!strcmp(g_mode, "allowed") && cd->callbackSite == CUPTI_API_EXIT) {
    /* cupti.md 3.1 / 6.2: the synchronize functions and FlushAll(0) are fine here. */
    cuCtxSynchronize();
    cuptiActivityFlushAll(0);
  }
}

/* Runs `call` in a child of this process and dies the way that child died. */
static int in_forked_child(CUptiResult (*call)(void))
{
  pid_t pid = fork();
  if (pid == 0)
    _exit(call() == CUPTI_ERROR_INVALID_OPERATION ? 0 : 1);
  int status;
  if (pid < 0 || waitpid(pid, &status, 0) != pid)
    return 8;
  if (WIFSIGNALED(status)) {
    signal(WTERMSIG(status), SIG_DFL);
    raise(WTERMSIG(status));
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 9;
}

static CUptiResult forced_flush(void) { return cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED); }

static int child(void)
{
  if (!strcmp(g_mode, "cuda_in_injection")) {
    setenv("CUDA_INJECTION64_PATH", TEST_INJECT, 1);
    setenv("FAKEGPU_TEST_INJECT_CUDA", "1", 1);
  }
  CUpti_SubscriberHandle sub;
  CUcontext ctx;
  CUstream s;
  int v;

  /* cupti_activity.h: a flush not preceded by cuptiActivityRegisterCallbacks is refused, also
   * in a forked child (nothing of CUPTI's was inherited yet). */
  if (cuptiActivityFlushAll(0) != CUPTI_ERROR_INVALID_OPERATION ||
      cuptiActivityFlush(NULL, 0, 0) != CUPTI_ERROR_INVALID_OPERATION ||
      in_forked_child(forced_flush) != 0)
    return 6;
  if (cuptiSubscribe(&sub, on_cb, NULL) != CUPTI_SUCCESS ||
      cuptiActivityRegisterCallbacks(requested, completed) != CUPTI_SUCCESS ||
      cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API,
                          CUPTI_DRIVER_TRACE_CBID_cuDriverGetVersion) != CUPTI_SUCCESS ||
      cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_RESOURCE) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DRIVER) != CUPTI_SUCCESS)
    return 2;
  if (cuInit(0) != CUDA_SUCCESS)
    return 3;
  cuDriverGetVersion(&v);
  if (cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
    return 4;
  if (cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS ||
      cuStreamDestroy(s) != CUDA_SUCCESS)
    return 5;
  if (!strcmp(g_mode, "flush_in_fork_child"))
    return in_forked_child(forced_flush);
  if (!strcmp(g_mode, "finalize_in_fork_child"))
    return in_forked_child(cuptiFinalize);
  cuptiActivityFlushAll(0); /* delivers the DRIVER records: the completion callback runs */
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  cuptiFinalize();
  if (cuptiActivityFlushAll(0) != CUPTI_ERROR_INVALID_OPERATION) /* registration gone too */
    return 7;
  if (in_forked_child(forced_flush) != 0) /* forked after Finalize: nothing inherited */
    return 10;
  return 0;
}

/* Runs `mode` in a child; `expect` NULL: must exit 0, else must abort saying `expect`. */
static void run(const char *mode, const char *expect)
{
  int fd[2];
  char out[4096] = "";
  size_t len = 0;
  int status;

  fflush(NULL);
  if (pipe(fd) != 0) {
    perror("pipe");
    exit(1);
  }
  pid_t pid = fork();
  if (pid == 0) {
    close(fd[0]);
    dup2(fd[1], 2);
    g_mode = mode;
    _exit(child());
  }
  close(fd[1]);
  for (ssize_t n; (n = read(fd[0], out + len, sizeof(out) - 1 - len)) > 0;)
    len += (size_t)n;
  out[len] = '\0';
  close(fd[0]);
  waitpid(pid, &status, 0);
  int ok = expect ? WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT && strstr(out, expect)
                  : WIFEXITED(status) && WEXITSTATUS(status) == 0;
  printf("%s %s (status 0x%x)%s%s", ok ? "ok  " : "FAIL", mode, status, len ? ": " : "",
         len ? out : "\n");
  g_failures += !ok;
}

int main(void)
{
  run("allowed", NULL);
  run("flush_in_complete", "cuptiActivityFlushAll called from inside the buffer completion");
  run("forced_flush_in_complete", "cuptiActivityFlushAll called from inside the buffer completion");
  run("finalize_in_complete", "cuptiFinalize called from inside the buffer completion");
  run("flush_in_stream_destroy", "STREAM_DESTROY_STARTING callback");
  run("driver_in_callback", "cuDeviceGetCount called from inside a CUPTI callback");
  run("driver_in_resource", "cuCtxGetDevice called from inside a CUPTI callback");
  run("driver_in_complete", "cuDeviceGetCount called from inside the CUPTI buffer");
  run("driver_in_request", "cuDeviceGetCount called from inside the CUPTI buffer");
  run("cuda_in_injection", "cuDriverGetVersion called from inside InitializeInjection");
  run("flush_in_fork_child", "cuptiActivityFlushAll called in a child forked after");
  run("finalize_in_fork_child", "cuptiFinalize called in a child forked after");
  if (g_failures)
    fprintf(stderr, "%d rule check(s) failed\n", g_failures);
  return g_failures != 0;
}
