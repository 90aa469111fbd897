/* Host stack policy on the callback path: which calls get a stack, launch sampling, capture. */
#define LOG_MODULE "stacks"
#include "agent/hoststack.h"

#include <errno.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "agent/config.h"
#include "agent/pystack.h"
#include "agent/stack.h"
#include "agent/thread.h"
#include "agent/unwind.h"
#include "agent/util/hash.h"
#include "agent/util/log.h"

/* Set once by hoststack_init, before callbacks are enabled; read-only afterwards. */
static struct {
  enum config_stacks policy;
  int depth;
  uint32_t every;
  uint64_t seed;
  int python;
  struct stack_table *table;
} hs;

static _Atomic uint32_t next_thread_ordinal;

static const char *const policy_names[] = {"off", "alloc", "sampled", "all"};

int hoststack_init(const struct config *cfg, const void *cupti_anchor)
{
  static const char *const skip_names[] = {"libcuda.so", "libcupti.so", NULL};
  const void *anchors[] = {cupti_anchor, NULL};
  struct timespec ts;

  hs.policy = cfg->gpu_only ? CONFIG_STACKS_OFF : cfg->stacks;
  hs.depth = (int)(cfg->stack_depth < STACK_MAX_DEPTH ? cfg->stack_depth : STACK_MAX_DEPTH);
  hs.every = cfg->stack_sample_every ? cfg->stack_sample_every : 1;
  hs.python = cfg->stack_python;
  hs.seed = cfg->stack_sample_seed;
  if (!hs.seed) {
    clock_gettime(CLOCK_MONOTONIC, &ts);
    hs.seed = hash_u64((uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)getpid());
  }
  if (hs.policy == CONFIG_STACKS_OFF)
    return 0;
  hs.table = stack_table_new(cfg->stack_table_size);
  if (!hs.table) {
    log_warn("cannot reserve %llu bytes for the stack table (GPUPROF_STACK_TABLE_SIZE); "
             "continuing without host stacks",
             (unsigned long long)cfg->stack_table_size);
    hs.policy = CONFIG_STACKS_OFF;
    return -ENOMEM;
  }
  unwind_init(skip_names, anchors);
  unwind_set_safe(cfg->stack_unwind_safe);
  if (hs.python)
    pystack_init();
  return 0;
}

struct stack_table *hoststack_table(void)
{
  return hs.table;
}

const char *hoststack_policy_name(void)
{
  return policy_names[hs.policy];
}

uint32_t hoststack_sample_every(void)
{
  return hs.policy == CONFIG_STACKS_SAMPLED ? hs.every : 1;
}

/* xorshift64*: a few cycles, per-thread state, no lock. */
static uint64_t next_random(struct thread_state *ts)
{
  uint64_t x = ts->rng;

  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  ts->rng = x;
  return x * 0x2545f4914f6cdd1dull;
}

/*
 * One launch in `every` on average, with intervals drawn uniformly from [1, 2*every - 1]
 * and a random first one: a loop whose period divides `every` would otherwise always hit
 * the same launch (aliasing). Each sampled launch stands for `every` launches, which keeps
 * the totals by stack unbiased. The thread's generator is seeded from the process seed and
 * the order in which threads first sample, so a single-threaded run with a fixed
 * GPUPROF_STACK_SAMPLE_SEED picks the same launches every time.
 */
static int sample_launch(struct thread_state *ts)
{
  if (!ts->sampler_ready) {
    uint32_t ordinal = atomic_fetch_add_explicit(&next_thread_ordinal, 1, memory_order_relaxed);
    ts->rng = hash_u64(hs.seed + 0x9e3779b97f4a7c15ull * (ordinal + 1)) | 1;
    ts->countdown = 1 + (uint32_t)(next_random(ts) % hs.every);
    ts->sampler_ready = 1;
  }
  if (--ts->countdown)
    return 0;
  ts->countdown = 1 + (uint32_t)(next_random(ts) % (2ull * hs.every - 1));
  return 1;
}

void hoststack_capture(struct thread_state *ts, enum hoststack_call call, uint32_t *stack_id,
                       uint32_t *weight)
{
  uint64_t frames[STACK_MAX_DEPTH];
  uint32_t w = 1;
  int n;

  *stack_id = STACK_ID_NONE;
  *weight = 0;
  switch (call) {
  case HOSTSTACK_CALL_MEMORY:
    if (hs.policy == CONFIG_STACKS_OFF)
      return;
    break;
  case HOSTSTACK_CALL_LAUNCH:
    if (hs.policy == CONFIG_STACKS_ALL)
      break;
    if (hs.policy != CONFIG_STACKS_SAMPLED)
      return;
    if (hs.every > 1) {
      if (!sample_launch(ts))
        return;
      w = hs.every;
    }
    break;
  default:
    return;
  }
  /* Unwound into this frame's array first: nothing shared is touched until the intern. */
  n = unwind_capture(frames, hs.depth);
  if (hs.python)
    n = pystack_merge(frames, n, hs.depth);
  *stack_id = stack_table_intern(hs.table, frames, n);
  /* Kept without a stack too (nothing unwound, the stack table full): a sampled launch
   * stands for the launches its sampler skipped, which would otherwise be lost with it. */
  *weight = w;
}
