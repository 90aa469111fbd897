/* Per-thread agent state: the cached tid and the stack of API calls open on this thread. */
#ifndef GPUPROF_AGENT_THREAD_H
#define GPUPROF_AGENT_THREAD_H

#include <stdint.h>

#define THREAD_MAX_OPEN_CALLS 16

struct thread_call {
  uint32_t corr_id;
  uint8_t domain;    /* enum corr_domain */
  uint8_t is_memory; /* an alloc/free API: nested ones must not be counted again */
  uint32_t stack_id; /* the host stack of the outermost open call (inherited by nested ones) */
  uint32_t weight;
  uint64_t enter_ns; /* for a trace capture's API slice (agent/capture.h) */
};

/*
 * Lives in TLS, so it exists without malloc from the thread's first callback on; at thread exit
 * only its counter stripe is given back (agent/thread.c) and its capture ring
 * (agent/capture.c), by pthread key destructors. CUPTI delivers ENTER/EXIT synchronously
 * on the calling thread and LIFO, so a plain array stack suffices; calls nested deeper than
 * THREAD_MAX_OPEN_CALLS are counted in `depth` but not remembered.
 */
struct thread_state {
  uint32_t tid; /* 0 until first use */
  int depth;
  /* This thread's stripe of the agent's striped counters (agent/util/counter.h): owned while
   * the thread lives, then another's (COUNTER_SHARED_STRIPE from its key destructor on). */
  uint32_t counter_slot;
  /* The API-callback epoch its open calls belong to (cupti/subscriber.c): calls still open
   * when callbacks were switched off may never see their EXIT and are forgotten at the next
   * ENTER, or the EXIT of another call, of a later epoch. */
  uint32_t call_epoch;
  /* The correlation id of the last memory call whose EXIT updated the live map (or noted an
   * out-of-memory failure) on this thread, 0 before the first: see thread_memory_done_inside. */
  uint32_t memory_corr;
  struct thread_call open[THREAD_MAX_OPEN_CALLS];
  /* Launch sampler (agent/hoststack.c). */
  uint64_t rng;
  uint32_t countdown;
  uint8_t sampler_ready;
  /* The thread's queue of API calls for a trace capture (agent/capture.c), NULL until its
   * first call during a capture. */
  void *capture_ring;
};

/*
 * Hidden visibility makes every access from inside the agent's .so use the local-dynamic TLS
 * model: one __tls_get_addr per function for all of the agent's TLS, where an extern
 * declaration of default visibility costs one call per access (general dynamic). The faster
 * models are not safe here: initial-exec takes static TLS that a library the application
 * dlopens later may need (its dlopen then fails), and the x86-64 TLS descriptors of glibc
 * before 2.40 clobber vector registers on their dynamic fallback path (glibc bug 31372).
 */
extern __thread struct thread_state thread_tls
    __attribute__((visibility("hidden"), tls_model("local-dynamic")));

/* First use on a thread: its tid and counter stripe. */
void thread_state_init(struct thread_state *ts);

static inline struct thread_state *thread_state_get(void)
{
  struct thread_state *ts = &thread_tls;

  /* An opaque copy: otherwise the compiler recomputes the address (a __tls_get_addr call)
   * after every call in the caller instead of keeping it in a register. */
  __asm__("" : "+r"(ts));
  if (__builtin_expect(!ts->tid, 0))
    thread_state_init(ts);
  return ts;
}

/* Pushes a call at ENTER. */
static inline void thread_push_call(struct thread_state *ts, uint32_t corr_id, uint8_t domain,
                                    int is_memory)
{
  if (ts->depth >= 0 && ts->depth < THREAD_MAX_OPEN_CALLS) {
    struct thread_call *c = &ts->open[ts->depth];
    c->corr_id = corr_id;
    c->domain = domain;
    c->is_memory = (uint8_t)(is_memory != 0);
    c->stack_id = 0;
    c->weight = 0;
  }
  ts->depth++;
}
/* The innermost open call, or NULL (none, or nested deeper than remembered). */
static inline struct thread_call *thread_top_call(struct thread_state *ts)
{
  int top = ts->depth - 1;
  return top >= 0 && top < THREAD_MAX_OPEN_CALLS ? &ts->open[top] : 0;
}

void thread_pop_call_slow(struct thread_state *ts, uint32_t corr_id);

/* Pops the call at EXIT (tolerates a missing EXIT of an inner call by unwinding to corr_id). */
static inline void thread_pop_call(struct thread_state *ts, uint32_t corr_id)
{
  int top = ts->depth - 1;

  if (__builtin_expect(top >= 0 && top < THREAD_MAX_OPEN_CALLS && ts->open[top].corr_id == corr_id,
                       1))
    ts->depth = top;
  else
    thread_pop_call_slow(ts, corr_id);
}
/* The outermost open call's correlation id (the user's call that a call entered now is nested
 * in), or 0 when none is open. */
static inline uint32_t thread_outermost_call(const struct thread_state *ts)
{
  return ts->depth > 0 ? ts->open[0].corr_id : 0;
}
/* True if an alloc/free call encloses the top call (which then must not touch the map). */
int thread_inside_memory_call(const struct thread_state *ts);

/*
 * For a memory call at its EXIT: true when its ENTER is not on the stack (forgotten because a
 * capture ended and the next began while it ran, or never seen) and a memory call nested in it
 * has already updated the live map. Correlation ids grow, so a memory call of this thread with
 * a larger id began after this one began and ended before it ends: a cudaMalloc whose
 * cuMemAlloc was counted as outermost must not count the allocation again (nor a cudaFree its
 * free). A call that is on the stack needs no check: its nested calls were above it there.
 */
static inline int thread_memory_done_inside(const struct thread_state *ts, uint32_t corr_id)
{
  if (ts->depth > THREAD_MAX_OPEN_CALLS ||
      (ts->depth > 0 && ts->open[ts->depth - 1].corr_id == corr_id))
    return 0;
  return ts->memory_corr && (int32_t)(ts->memory_corr - corr_id) > 0;
}

#endif
