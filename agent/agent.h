/* The agent's lifecycle: the global state word, one-time init, exit and fork handling. */
#ifndef GPUPROF_AGENT_AGENT_H
#define GPUPROF_AGENT_AGENT_H

#include <stdatomic.h>

#include "agent/config.h"

enum agent_state {
  AGENT_UNINIT = 0, /* InitializeInjection not called (yet) */
  AGENT_STARTING,   /* init in progress; callbacks ignore everything */
  AGENT_ACTIVE,     /* capturing: the only state in which callbacks do work */
  AGENT_INACTIVE,   /* CUPTI unusable (missing, wrong version, other subscriber, ...) */
  AGENT_OFF,        /* GPUPROF_MODE=off */
  AGENT_STOPPING,   /* exit handler running */
  AGENT_STOPPED,    /* outputs written */
  AGENT_DORMANT,    /* forked child: the parent's agent, inert */
};

/* The state word: CUPTI callbacks test it with a single load before anything else. */
extern _Atomic int agent_state_word;

static inline int agent_is_active(void)
{
  return atomic_load_explicit(&agent_state_word, memory_order_acquire) == AGENT_ACTIVE;
}

/* Runs the one-time init (config, CUPTI, subscription, worker). Safe from concurrent callers:
 * all but the first wait for it to finish. Never calls CUDA. */
void agent_init(void);

/* Writes outputs and detaches from CUPTI; the atexit handler. Only the process that
 * initialised acts; safe to call twice and from any thread. */
void agent_shutdown(void);

/* The configuration read by agent_init (read-only afterwards). */
const struct config *agent_config(void);

#endif
