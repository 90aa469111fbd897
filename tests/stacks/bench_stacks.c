/* Benchmark (not a test): host time the stack policy adds per launch and per allocation at a
 * given depth, and the stack table's memory per distinct stack. Numbers go to docs. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent/config.h"
#include "agent/hoststack.h"
#include "agent/stack.h"
#include "agent/thread.h"

#define CALLS 200000

static uint64_t now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static volatile uint32_t sink;

/* Runs `calls` captures from `depth` frames below the caller. */
__attribute__((noinline)) static double at_depth(int depth, enum hoststack_call call, int calls)
{
  if (depth > 1) {
    double r = at_depth(depth - 1, call, calls);
    sink += (uint32_t)depth; /* no sibling call: every level stays a frame */
    return r;
  }
  struct thread_state *ts = thread_state_get();
  uint32_t id, w;
  uint64_t t0 = now_ns();
  for (int i = 0; i < calls; i++) {
    hoststack_capture(ts, call, &id, &w);
    sink += id;
  }
  return (double)(now_ns() - t0) / calls;
}

/* Distinct stacks: the same 40-frame prefix, then a different leaf path each time. */
__attribute__((noinline)) static void distinct(int depth, int variant)
{
  if (depth > 1) {
    distinct(depth - 1, variant);
    sink += (uint32_t)depth;
    return;
  }
  struct thread_state *ts = thread_state_get();
  uint32_t id, w;
  uint64_t frames[8];
  (void)ts;
  (void)w;
  for (int i = 0; i < 8; i++)
    frames[i] = 0x400000u + (uint64_t)variant * 64 + (uint64_t)i; /* fake leaf frames */
  id = stack_table_intern(hoststack_table(), frames, 8);
  sink += id;
}

int main(int argc, char **argv)
{
  struct config cfg;
  int depth = argc > 1 ? atoi(argv[1]) : 40;
  struct stack_table_stats st;

  config_defaults(&cfg);
  cfg.stack_depth = 64;
  cfg.stack_sample_seed = 1;
  hoststack_init(&cfg, NULL);
  printf("policy %s, 1 in %u launches sampled, stacks of %d frames\n", hoststack_policy_name(),
         hoststack_sample_every(), depth);
  at_depth(depth, HOSTSTACK_CALL_MEMORY, 1000); /* warm libunwind's cache and the table */
  printf("launch (sampled policy):   %8.1f ns mean per launch\n",
         at_depth(depth, HOSTSTACK_CALL_LAUNCH, CALLS));
  printf("allocation (full stack):   %8.1f ns mean per call\n",
         at_depth(depth, HOSTSTACK_CALL_MEMORY, CALLS / 10));
  stack_table_get_stats(hoststack_table(), &st);
  uint64_t bytes0 = st.bytes, stacks0 = st.stacks;
  for (int v = 0; v < 100000; v++)
    distinct(1, v);
  stack_table_get_stats(hoststack_table(), &st);
  printf("stack table: %llu distinct stacks, %llu nodes, %llu bytes; %.1f bytes per new "
         "distinct stack (8 new frames each)\n",
         (unsigned long long)st.stacks, (unsigned long long)st.nodes, (unsigned long long)st.bytes,
         (double)(st.bytes - bytes0) / (double)(st.stacks - stacks0));
  return 0;
}
