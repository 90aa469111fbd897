/* A minimal injection library: proves cuInit loads CUDA_INJECTION64_PATH and calls it once. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#define EXPORT __attribute__((visibility("default")))

static atomic_int g_calls;
static pthread_t g_thread;

EXPORT int InitializeInjection(void)
{
  g_thread = pthread_self();
  atomic_fetch_add(&g_calls, 1);
  /* test_rules: an injection that breaks the rule "no CUDA calls here" (cupti.md 1.1). */
  if (getenv("FAKEGPU_TEST_INJECT_CUDA")) {
    int (*version)(int *);
    int v;
    *(void **)&version = dlsym(RTLD_DEFAULT, "cuDriverGetVersion");
    if (version)
      version(&v);
  }
  return 1;
}

/* Read by the behaviour test through dlsym: how often, and on which thread. */
EXPORT int fakegpu_test_inject_calls(pthread_t *thread)
{
  if (thread)
    *thread = g_thread;
  return atomic_load(&g_calls);
}
