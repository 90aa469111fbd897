/* The simulated CUPTI's NVTX injection, through NVIDIA's nvtx3 loader (README "NVTX"). */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cupti.h>
#include <generated_nvtx_meta.h>

/* Run with NVTX_INJECTION64_PATH = the simulated libcupti.so.13 (its InitializeInjectionNvtx2). */

static int failures;
#define CHECK(c, ...)                                                                              \
  do {                                                                                             \
    if (!(c)) {                                                                                    \
      failures++;                                                                                  \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                        \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fputc('\n', stderr);                                                                         \
    }                                                                                              \
  } while (0)

struct seen {
  int n;
  CUpti_CallbackDomain domain;
  CUpti_CallbackId cbid;
  const char *name;
  const void *params;
  const void *ret;
  int ret_int;        /* *ret at the callback, for push/pop */
  const char *text;   /* the message or name in the params, copied pointer */
  void *handle;       /* a handle in the params (domain / registered string) */
  uint64_t id;        /* a range id in the params or return value */
} g_seen;

static int g_cuda_in_callback;

static void CUPTIAPI on_cb(void *ud, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                           const void *data)
{
  const CUpti_NvtxData *d = data;

  (void)ud;
  if (domain != CUPTI_CB_DOMAIN_NVTX)
    return;
  if (g_cuda_in_callback) {
    int n;
    cuDeviceGetCount(&n); /* not allowed here: the double aborts */
  }
  g_seen.n++;
  g_seen.domain = domain;
  g_seen.cbid = cbid;
  g_seen.name = d->functionName;
  g_seen.params = d->functionParams;
  g_seen.ret = d->functionReturnValue;
  switch (cbid) {
  case CUPTI_CBID_NVTX_nvtxRangePushA:
    g_seen.text = ((const nvtxRangePushA_params *)d->functionParams)->message;
    g_seen.ret_int = *(const int *)d->functionReturnValue;
    break;
  case CUPTI_CBID_NVTX_nvtxRangePop:
  case CUPTI_CBID_NVTX_nvtxDomainRangePop:
    g_seen.ret_int = *(const int *)d->functionReturnValue;
    break;
  case CUPTI_CBID_NVTX_nvtxDomainCreateA:
    g_seen.text = ((const nvtxDomainCreateA_params *)d->functionParams)->name;
    g_seen.handle = *(nvtxDomainHandle_t *)d->functionReturnValue;
    break;
  case CUPTI_CBID_NVTX_nvtxDomainRegisterStringA:
    g_seen.text = ((const nvtxDomainRegisterStringA_params *)d->functionParams)->string;
    g_seen.handle = *(nvtxStringHandle_t *)d->functionReturnValue;
    break;
  case CUPTI_CBID_NVTX_nvtxDomainRangePushEx: {
    const nvtxDomainRangePushEx_params *p = d->functionParams;
    g_seen.handle = p->core.eventAttrib->message.registered;
    g_seen.ret_int = *(const int *)d->functionReturnValue;
    break;
  }
  case CUPTI_CBID_NVTX_nvtxRangeStartA:
    g_seen.id = *(const nvtxRangeId_t *)d->functionReturnValue;
    break;
  case CUPTI_CBID_NVTX_nvtxRangeEnd:
    g_seen.id = ((const nvtxRangeEnd_params *)d->functionParams)->id;
    break;
  default:
    break;
  }
}

static void reset(void) { memset(&g_seen, 0, sizeof(g_seen)); }

/* A CUDA call inside an NVTX callback: the child aborts with the callback rule's message. */
static void rule_child(CUpti_SubscriberHandle sub)
{
  int fds[2];
  pid_t pid;
  int status = 0;
  char buf[512] = "";
  ssize_t n;

  if (pipe(fds))
    exit(2);
  pid = fork();
  if (pid == 0) {
    dup2(fds[1], 2);
    g_cuda_in_callback = 1;
    cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_NVTX, CUPTI_CBID_NVTX_nvtxMarkA);
    nvtxMarkA("rule");
    _exit(0);
  }
  close(fds[1]);
  n = read(fds[0], buf, sizeof(buf) - 1);
  buf[n > 0 ? n : 0] = '\0';
  waitpid(pid, &status, 0);
  CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, "CUDA call in an NVTX callback: "
        "child status %d", status);
  CHECK(strstr(buf, "cuDeviceGetCount called from inside a CUPTI callback") != NULL,
        "rule message: %s", buf);
}

int main(void)
{
  CUpti_SubscriberHandle sub;
  nvtxDomainHandle_t dom, dom2;
  nvtxStringHandle_t str;
  nvtxEventAttributes_t a = {0};
  nvtxRangeId_t id;
  int r;

  if (cuInit(0) != CUDA_SUCCESS)
    return 2;
  /* No subscriber yet: the loader initializes through the double, no callback. */
  r = nvtxRangePushA("early");
  CHECK(r == 0 && g_seen.n == 0, "push before subscribing: %d, %d callbacks", r, g_seen.n);
  CHECK(nvtxRangePop() == 0, "pop before subscribing");

  CHECK(cuptiSubscribe(&sub, on_cb, NULL) == CUPTI_SUCCESS, "subscribe");
  /* Only enabled cbids call back. */
  reset();
  nvtxMarkA("m");
  CHECK(g_seen.n == 0, "a callback for a cbid not enabled");
  cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_NVTX);
  cuptiEnableCallback(0, sub, CUPTI_CB_DOMAIN_NVTX, CUPTI_CBID_NVTX_nvtxMarkA);

  reset();
  r = nvtxRangePushA("outer");
  CHECK(g_seen.n == 1 && g_seen.cbid == CUPTI_CBID_NVTX_nvtxRangePushA &&
            !strcmp(g_seen.name, "nvtxRangePushA") && !strcmp(g_seen.text, "outer") &&
            g_seen.ret_int == 0 && r == 0,
        "nvtxRangePushA: %d callbacks, cbid %u, %s, level %d/%d", g_seen.n, g_seen.cbid,
        g_seen.name ? g_seen.name : "-", g_seen.ret_int, r);

  reset();
  dom = nvtxDomainCreateA("NCCL");
  CHECK(g_seen.n == 1 && g_seen.cbid == CUPTI_CBID_NVTX_nvtxDomainCreateA &&
            !strcmp(g_seen.name, "nvtxDomainCreateA") && !strcmp(g_seen.text, "NCCL") &&
            g_seen.handle == dom && dom,
        "nvtxDomainCreateA");
  dom2 = nvtxDomainCreateA("NCCL");
  CHECK(dom2 == dom, "a second nvtxDomainCreateA of one name: another handle");

  reset();
  str = nvtxDomainRegisterStringA(dom, "ncclAllReduce");
  CHECK(g_seen.n == 1 && g_seen.cbid == CUPTI_CBID_NVTX_nvtxDomainRegisterStringA &&
            !strcmp(g_seen.text, "ncclAllReduce") && g_seen.handle == str && str,
        "nvtxDomainRegisterStringA");

  reset();
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
  a.message.registered = str;
  r = nvtxDomainRangePushEx(dom, &a);
  CHECK(g_seen.n == 1 && g_seen.cbid == CUPTI_CBID_NVTX_nvtxDomainRangePushEx &&
            !strcmp(g_seen.name, "nvtxDomainRangePushEx") && g_seen.handle == str &&
            ((const nvtxDomainRangePushEx_params *)g_seen.params)->domain == dom &&
            g_seen.ret_int == 1 && r == 1,
        "nvtxDomainRangePushEx: level %d/%d", g_seen.ret_int, r);

  reset();
  r = nvtxDomainRangePop(dom);
  CHECK(g_seen.cbid == CUPTI_CBID_NVTX_nvtxDomainRangePop && r == 1 && g_seen.ret_int == 1,
        "nvtxDomainRangePop: %d", r);
  r = nvtxRangePop();
  CHECK(r == 0, "nvtxRangePop: %d", r);
  reset();
  r = nvtxRangePop();
  CHECK(r < 0 && g_seen.ret_int == r && !strcmp(g_seen.name, "nvtxRangePop"),
        "a pop with nothing open: %d", r);

  reset();
  id = nvtxRangeStartA("se");
  CHECK(g_seen.cbid == CUPTI_CBID_NVTX_nvtxRangeStartA && id && g_seen.id == id,
        "nvtxRangeStartA: id %llu", (unsigned long long)id);
  reset();
  nvtxRangeEnd(id);
  CHECK(g_seen.cbid == CUPTI_CBID_NVTX_nvtxRangeEnd && g_seen.id == id, "nvtxRangeEnd");

  rule_child(sub);

  /* After unsubscribing nothing calls back. */
  cuptiUnsubscribe(sub);
  reset();
  nvtxRangePushA("late");
  nvtxRangePop();
  CHECK(g_seen.n == 0, "callbacks after cuptiUnsubscribe");

  if (failures)
    fprintf(stderr, "%d failure(s)\n", failures);
  else
    printf("fakegpu_nvtx: ok\n");
  return failures ? 1 : 0;
}
