/* Host stack policy on the callback path: which calls get a stack, launch sampling, capture. */
#ifndef GPUPROF_AGENT_HOSTSTACK_H
#define GPUPROF_AGENT_HOSTSTACK_H

#include <stdint.h>

struct config;
struct stack_table;
struct thread_state;

/* What a traced call is, as far as stacks are concerned. */
enum hoststack_call {
  HOSTSTACK_CALL_OTHER = 0,
  HOSTSTACK_CALL_MEMORY, /* allocations, frees, memcpys, memsets: a stack under alloc and up */
  HOSTSTACK_CALL_LAUNCH, /* launches (graph launches too) and synchronization: sampled/all */
};

/*
 * From the one-time init, after CUPTI was loaded (cupti_anchor: any address inside libcupti).
 * Reads GPUPROF_STACKS and friends from cfg, creates the stack table, records which modules
 * to skip, looks for a Python interpreter. 0, or -errno (stacks then stay off).
 */
int hoststack_init(const struct config *cfg, const void *cupti_anchor);

/*
 * At an outermost API ENTER on an application thread: decides whether this call gets a
 * stack (policy, and for launches the per-thread sampler), and if so unwinds, merges Python
 * frames and interns. *weight is how many calls this one stands for (sample period for sampled
 * launches, 1 otherwise, 0 when the call was not chosen); *stack_id is STACK_ID_NONE when no
 * stack was taken, also for a chosen call whose stack could not be kept (nothing unwound, the
 * stack table full), which keeps its weight.
 */
void hoststack_capture(struct thread_state *ts, enum hoststack_call call, uint32_t *stack_id,
                       uint32_t *weight);

/* The table (NULL when stacks are off), for the summary and exporters. */
struct stack_table *hoststack_table(void);

/* The policy name ("off", "alloc", "sampled", "all") and launch sampling period in effect. */
const char *hoststack_policy_name(void);
uint32_t hoststack_sample_every(void);

#endif
