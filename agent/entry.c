/* The entry points the CUDA driver uses: InitializeInjection, plus a cheap load-time constructor.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "agent/agent.h"
#include "agent/util/export.h"
#include "agent/util/guard.h"
#include "agent/util/log.h"

/*
 * libcuda dlopens CUDA_INJECTION64_PATH inside the process's first cuInit and calls this
 * once, on the thread running cuInit. It must not call CUDA, must return 1 (also when the
 * agent decides to stay inactive: a 0 is not an error the application could act on), and is
 * idempotent: a second call, even concurrent, waits for the first init and returns 1.
 */
GPUPROF_EXPORT int InitializeInjection(void)
{
  int saved;

  if (!guard_enter(&saved))
    return 1;
  agent_init();
  guard_leave(saved);
  return 1;
}

/*
 * Runs when the library is mapped, possibly long before cuInit. Nothing costly and nothing
 * that could fail: configuration is read by InitializeInjection. With GPUPROF_LOG=debug it
 * says it was loaded, which makes "the driver never called us" distinguishable from "the
 * library was never loaded".
 */
__attribute__((constructor)) static void gpuprof_loaded(void)
{
  const char *level = getenv("GPUPROF_LOG");

  if (level && !strcasecmp(level, "debug")) {
    log_set_level(LOG_DEBUG);
    log_debug("loaded into pid %d; waiting for cuInit to call InitializeInjection", (int)getpid());
  }
}
