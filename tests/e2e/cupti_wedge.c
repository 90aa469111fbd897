/* A CUPTI for e2e tests whose GPU wedges at the agent's exit: loaded as GPUPROF_CUPTI_PATH,
 * it is the simulated libcupti.so.13 (its dependency, which answers every other symbol)
 * except that, per CUPTI_WEDGE, the forced cuptiActivityFlushAll ("forced"), cuptiFinalize
 * ("finalize") or cuptiActivityDisable ("disable": in continuous mode only the exit path calls
 * it) never returns, as behind a GPU that hung after the last periodic flush. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cupti.h>

#define EXPORT __attribute__((visibility("default")))

static void *real(const char *name)
{
  void *h = dlopen("libcupti.so.13", RTLD_NOW | RTLD_NOLOAD);

  return h ? dlsym(h, name) : NULL;
}

static int wedged(const char *what)
{
  const char *v = getenv("CUPTI_WEDGE");

  return v && strcmp(v, what) == 0;
}

/* Holds no lock: the rest of the process carries on until it exits. */
static void hang_until_exit(void)
{
  for (;;)
    pause();
}

EXPORT CUptiResult CUPTIAPI cuptiActivityFlushAll(uint32_t flag)
{
  CUptiResult (*fn)(uint32_t) = (CUptiResult(*)(uint32_t))real("cuptiActivityFlushAll");

  if (flag && wedged("forced"))
    hang_until_exit();
  return fn ? fn(flag) : CUPTI_ERROR_UNKNOWN;
}

EXPORT CUptiResult CUPTIAPI cuptiFinalize(void)
{
  CUptiResult (*fn)(void) = (CUptiResult(*)(void))real("cuptiFinalize");

  if (wedged("finalize"))
    hang_until_exit();
  return fn ? fn() : CUPTI_ERROR_UNKNOWN;
}

EXPORT CUptiResult CUPTIAPI cuptiActivityDisable(CUpti_ActivityKind kind)
{
  CUptiResult (*fn)(CUpti_ActivityKind) =
      (CUptiResult(*)(CUpti_ActivityKind))real("cuptiActivityDisable");

  if (wedged("disable"))
    hang_until_exit();
  return fn ? fn(kind) : CUPTI_ERROR_UNKNOWN;
}
