/* NCCL operations: the plugin's op pool, its join to the kernel that ran them, the worker's view.
 */
#ifndef GPUPROF_AGENT_NCCL_H
#define GPUPROF_AGENT_NCCL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

struct event;

/*
 * NCCL's profiler plugin (cupti/nccl_plugin.c) tells what a collective or point-to-point call
 * was (func, count, datatype, root/peer, communicator, sequence number, algorithm); CUPTI's
 * kernel record tells when the GPU ran it. This module joins the two through the correlation
 * id of the driver launch (cuLaunchKernelEx) that NCCL brackets with its KernelLaunch event.
 *
 * Application threads (and NCCL's threads) write ops into a preallocated pool: no malloc and
 * no lock after nccl_init. When the pool is full the op is dropped and counted. A bound op is
 * published in a table indexed by correlation id; the worker takes the ops of each kernel
 * record it decodes (nccl_worker_event), before the consumers see the event, and the
 * consumers read them back with nccl_current. Ops that never meet a kernel (graph-captured
 * calls, a launch the agent did not see) are released after NCCL_OP_TTL_NS and counted, unless
 * still pending (nccl_pending below: a hung collective stays listed); those of a KernelLaunch
 * bracket that closed without a launch the agent saw are released at once.
 */

/* Event types of the NCCL profiler API (cupti.md 4.3). */
enum nccl_event_type {
  NCCL_EV_GROUP = 1 << 0,
  NCCL_EV_COLL = 1 << 1,
  NCCL_EV_P2P = 1 << 2,
  NCCL_EV_PROXY_OP = 1 << 3,
  NCCL_EV_PROXY_STEP = 1 << 4,
  NCCL_EV_PROXY_CTRL = 1 << 5,
  NCCL_EV_KERNEL_CH = 1 << 6,
  NCCL_EV_NET_PLUGIN = 1 << 7,
  NCCL_EV_GROUP_API = 1 << 8,
  NCCL_EV_COLL_API = 1 << 9,
  NCCL_EV_P2P_API = 1 << 10,
  NCCL_EV_KERNEL_LAUNCH = 1 << 11,
};

/* The activation masks the plugin asks for (v5, and v3/v4 which know no API events). */
#define NCCL_MASK_V5                                                                               \
  (NCCL_EV_COLL_API | NCCL_EV_P2P_API | NCCL_EV_KERNEL_LAUNCH | NCCL_EV_COLL | NCCL_EV_P2P)
#define NCCL_MASK_LEGACY (NCCL_EV_COLL | NCCL_EV_P2P)

#define NCCL_MAX_COMMS 256u
/* Ops one kernel can carry to the consumers: an all-to-all of a 1024-rank job puts 2046 p2p
 * ops into one kernel. The worker's array for them grows on demand (agent/nccl.c). */
#define NCCL_MAX_OPS_PER_KERNEL 4096u
#define NCCL_OP_TTL_NS (60ull * 1000000000ull)
#define NCCL_DEFAULT_POOL 16384u

/* A communicator as init described it. Read by the worker while plugins may add others. */
struct nccl_comm {
  uint64_t hash;
  char name[64]; /* commName, or "" */
  int32_t nnodes, nranks, rank;
};

/* What the worker hands to consumers for one op of the kernel it is decoding. */
struct nccl_op_view {
  const char *func;     /* "AllReduce", ... (static) */
  const char *datatype; /* "ncclBfloat16", ... (static) */
  const char *algo;     /* "RING", ... or "" (static) */
  const char *proto;    /* "LL", ... or "" (static) */
  uint64_t count, bytes;
  int32_t root, peer; /* -1 when the op has none */
  uint64_t seq;       /* Coll seqNumber; UINT64_MAX when unknown (p2p, no Coll event) */
  uint32_t nchannels;
  uint32_t comm; /* index for nccl_comm_get */
  uint32_t tid;
  uint32_t stack_id, weight; /* host stack at the API call (hoststack.h), launch sampling */
  int graph_captured;
  uint64_t api_start_ns, api_stop_ns; /* 0 when unknown / still open */
  /* The op's share of the kernel: the kernel's time split evenly between the ops it ran, the
   * first ones taking the remainder's nanoseconds, so that the shares sum to the kernel's. */
  uint64_t gpu_ns;
};

struct nccl_stats {
  uint64_t comms;            /* communicators initialised */
  uint64_t comms_dropped;    /* inits past NCCL_MAX_COMMS (their events are ignored) */
  uint64_t ops;              /* ops recorded */
  uint64_t ops_dropped;      /* pool full */
  uint64_t ops_joined;       /* matched to a kernel record */
  uint64_t ops_unjoined;     /* released without a kernel (TTL, or still open at exit) */
  uint64_t ops_overflow;     /* joined ops past NCCL_MAX_OPS_PER_KERNEL for one kernel */
  uint64_t launch_conflicts; /* a launch's ops could not be published (table slot busy) */
  uint64_t ignored_events;   /* events of types not asked for or unknown */
  uint64_t kernels;          /* kernel records that carried ops */
  uint64_t unfinished;       /* kernel records without timestamps (not finished) left pending */
};

/* Per-func totals for the summary: joined ops only. */
struct nccl_func_total {
  const char *func;
  uint64_t ops, bytes, gpu_ns;
};
#define NCCL_FUNC_COUNT 12

/* ---- lifecycle (agent.c) ---- */

/* Allocates the pool (pool_ops rounded up to a power of two; 0: NCCL_DEFAULT_POOL). Idempotent.
 * 0 or -ENOMEM (NCCL ops are then ignored). */
int nccl_init(size_t pool_ops);

/* The agent records API calls (NCCL events are wanted) or not: stored through the mask
 * pointer NCCL gave the plugin, so a capture turns NCCL events on and off. */
void nccl_set_tracing(int on);

/* ---- plugin side (cupti/nccl_plugin.c), any thread ---- */

/* A communicator; NULL when the table is full (counted). The same communicator initialised
 * again (hash, rank, size and name equal: a comm destroyed and re-created from the same unique
 * id) gets its old entry back. device: its GPU when known (-1: not), the thread's current one
 * in the plugin's init (NCCL sets the communicator's device before it). Not a hot path. */
struct nccl_comm_slot;
struct nccl_comm_slot *nccl_comm_add(uint64_t hash, const char *name, int nnodes, int nranks,
                                     int rank, int32_t device);
/* v3 descriptors name their communicator in every event: found or added by hash. */
struct nccl_comm_slot *nccl_comm_find_or_add(uint64_t hash, const char *name);
/* The plugin's finalize (ncclCommDestroy, ncclCommAbort) with its context (any plugin version's:
 * one that is not a communicator is ignored). Nothing posted on the communicator before now
 * runs any more: its ops are no longer pending (nccl_pending), so an aborted hang is not shown
 * in later captures and its ops are released after NCCL_OP_TTL_NS instead of filling the pool.
 * Its entry stays (records of its last kernels may still be decoded, a re-init takes it back,
 * and ops posted after that can be pending again). Not a hot path. */
void nccl_comm_finalize(void *context);
/* Registers the activation mask pointer and returns the mask to store now. */
int nccl_plugin_mask(int *mask, int legacy);

/* What a CollApi / P2pApi / Coll / P2p start describes. NULL strings are fine. */
struct nccl_op_desc {
  const char *func;
  const char *datatype;
  const char *algo, *proto;
  uint64_t count;
  int32_t root, peer;
  uint64_t seq;
  int has_seq;
  uint32_t nchannels;
  int graph_captured;
};

/* CollApi/P2pApi start: a new op with the caller's host stack. Returns an opaque handle or NULL. */
void *nccl_api_start(struct nccl_comm_slot *c, const struct nccl_op_desc *d);
/* Coll/P2p start: completes the op of parent (an nccl_api_start handle, or NULL: a new op) and
 * joins it to a launch on this thread. Returns a handle or NULL. */
void *nccl_task_start(struct nccl_comm_slot *c, void *parent, const struct nccl_op_desc *d);
/* KernelLaunch start; returns a handle. */
void *nccl_launch_start(struct nccl_comm_slot *c);
/* stopEvent for any handle above (NULL: no-op). */
void nccl_handle_stop(void *handle);
/* An event of a type the plugin did not ask for, or does not know. */
void nccl_count_ignored(void);

/* ---- the driver launch callback (cupti/subscriber.c), application threads ---- */

/* A kernel launch on a device (of its context; -1: unknown): the ops of the KernelLaunch event
 * open on this thread (or, v3/v4 plugins, of an NCCL kernel's name) run in it. Cheap unless a
 * KernelLaunch event is open on this thread (or a v3/v4 plugin was inited). Call it only while
 * nccl_watching(). */
void nccl_note_launch_slow(uint32_t corr_id, const char *symbol_name, int32_t device);
extern _Atomic int nccl_launch_watch; /* nonzero once any plugin was initialised */
static inline int nccl_watching(void)
{
  return __builtin_expect(atomic_load_explicit(&nccl_launch_watch, memory_order_relaxed), 0);
}

/* ---- worker side ---- */

/* Every decoded event, before the consumers: takes the ops of a kernel record. */
void nccl_worker_event(const struct event *ev);
/* The ops of ev, if ev is the kernel nccl_worker_event just took them for: count, *out. */
unsigned nccl_current(const struct event *ev, const struct nccl_op_view **out);
/* Periodically: releases ops older than NCCL_OP_TTL_NS (counted as unjoined), except those still
 * pending (nccl_pending): a hang is diagnosed long after it began. */
void nccl_worker_tick(uint64_t now_ns);
/* A communicator by the index in a view; NULL if none. */
const struct nccl_comm *nccl_comm_get(uint32_t index);
/* "<name or hash16> rank r/n" label used by traces and profiles. */
void nccl_comm_label(uint32_t index, char *buf, size_t len);

/*
 * Ops still pending: recorded, not joined to a finished kernel, and not followed by a joined op
 * posted later on their communicator (NCCL runs a communicator's ops in order, so a later op
 * that finished means this one finished too and only its record was lost). A hung collective
 * is one: its kernel never completes, so CUPTI never delivers its record (a forced flush at
 * exit delivers it without timestamps, which does not count as finished). Graph-captured ops
 * are left out (their kernels run under the graph launch's correlation id, never theirs), and
 * in on-demand mode ops posted before NCCL events were last switched on, and ops posted before
 * their communicator was finalized (nccl_comm_finalize: destroyed or aborted).
 */
struct nccl_pending {
  struct nccl_op_view v; /* gpu_ns 0; seq, algo, proto, nchannels known once launched */
  uint32_t corr;         /* the launch's correlation id; 0 when not launched */
  uint32_t device;       /* of its communicator's last joined kernel, else of any, else 0 */
  int launched;          /* the launch was seen ("launched, not finished") */
};

/* The pending ops whose API call began before before_ns, oldest first, in a malloc'd array
 * (*out, the caller frees it; NULL when none). Returns how many, or -ENOMEM. Bounded: one
 * scan of the pool. Any thread, while plugins write the pool: an op is copied under its
 * write sequence and left out if it is being rewritten or released meanwhile. After
 * nccl_finish, the ops pending at exit (its snapshot). */
int nccl_pending_collect(uint64_t before_ns, struct nccl_pending **out);

/* At exit (worker joined or not): keeps a snapshot of the pending ops for the summary and the
 * exit path's capture, then counts ops still open as unjoined. */
void nccl_finish(void);
/* The ops pending at exit (nccl_finish's snapshot), oldest first; *at_ns: when it was taken.
 * Returns how many (all of them; the caller shows what it wants). */
unsigned nccl_pending_at_exit(const struct nccl_pending **out, uint64_t *at_ns);
void nccl_get_stats(struct nccl_stats *out);
/* The per-func totals (funcs with ops only); returns how many were filled. */
unsigned nccl_get_func_totals(struct nccl_func_total *out, unsigned max);

/* Bytes per element of an NCCL datatype name ("ncclBfloat16" -> 2); 0 if unknown. */
unsigned nccl_datatype_size(const char *name);

#endif
