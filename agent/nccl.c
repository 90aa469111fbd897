/* NCCL operations: the plugin's op pool, its join to the kernel that ran them, the worker's view.
 */
#define LOG_MODULE "nccl"
#include "agent/nccl.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/event.h"
#include "agent/hoststack.h"
#include "agent/stack.h"
#include "agent/thread.h"
#include "agent/util/clock.h"
#include "agent/util/log.h"

/* ---- static names: ops keep indices, consumers get pointers that never dangle ---- */

static const char *const func_names[NCCL_FUNC_COUNT] = {
    "AllReduce", "AllGather", "ReduceScatter", "Broadcast", "Reduce",   "AlltoAll",
    "Gather",    "Scatter",   "Send",          "Recv",      "SendRecv", "Unknown"};

static const struct {
  const char *name;
  unsigned size;
} dtypes[] = {
    {"Unknown", 0},        {"ncclInt8", 1},    {"ncclUint8", 1},    {"ncclInt32", 4},
    {"ncclUint32", 4},     {"ncclInt64", 8},   {"ncclUint64", 8},   {"ncclFloat16", 2},
    {"ncclFloat32", 4},    {"ncclFloat64", 8}, {"ncclBfloat16", 2}, {"ncclFloat8e4m3", 1},
    {"ncclFloat8e5m2", 1},
};
#define N_DTYPES (sizeof(dtypes) / sizeof(dtypes[0]))

/* NCCL's algorithm and protocol names (src/graph/tuning.cc); index 0: none given. */
static const char *const algo_names[] = {
    "", "TREE", "RING", "COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS", "NVLS_TREE", "PAT", "other"};
static const char *const proto_names[] = {"", "LL", "LL128", "SIMPLE", "other"};
#define N_ALGOS (sizeof(algo_names) / sizeof(algo_names[0]))
#define N_PROTOS (sizeof(proto_names) / sizeof(proto_names[0]))

/* Index of s in names[1..n-1); 0 for NULL or "", n - 1 ("other"/"Unknown") otherwise. */
static uint8_t name_index(const char *s, const char *const *names, unsigned n, int first)
{
  if (!s || !*s)
    return 0;
  for (unsigned i = (unsigned)first; i + 1 < n; i++)
    if (!strcmp(s, names[i]))
      return (uint8_t)i;
  return (uint8_t)(n - 1);
}

static uint8_t func_index(const char *s)
{
  uint8_t i = name_index(s, func_names, NCCL_FUNC_COUNT, 0);
  return s && *s ? i : (uint8_t)(NCCL_FUNC_COUNT - 1);
}

static uint8_t dtype_index(const char *s)
{
  if (!s)
    return 0;
  for (unsigned i = 1; i < N_DTYPES; i++)
    if (!strcmp(s, dtypes[i].name))
      return (uint8_t)i;
  return 0;
}

unsigned nccl_datatype_size(const char *name)
{
  return dtypes[dtype_index(name)].size;
}

/* ---- communicators ---- */

struct nccl_comm_slot {
  _Atomic int used; /* set (release) once c is filled */
  struct nccl_comm c;
};

static struct nccl_comm_slot comms[NCCL_MAX_COMMS];
static _Atomic uint32_t n_comms;

static uint32_t comm_index1(struct nccl_comm_slot *c)
{
  return c ? (uint32_t)(c - comms) + 1 : 0;
}

static struct nccl_comm_slot *comm_fill(uint64_t hash, const char *name, int nnodes, int nranks,
                                        int rank)
{
  uint32_t i = atomic_fetch_add_explicit(&n_comms, 1, memory_order_relaxed);
  struct nccl_comm_slot *s;

  if (i >= NCCL_MAX_COMMS) {
    atomic_store_explicit(&n_comms, NCCL_MAX_COMMS, memory_order_relaxed);
    return NULL;
  }
  s = &comms[i];
  s->c.hash = hash;
  if (name)
    snprintf(s->c.name, sizeof(s->c.name), "%s", name);
  s->c.nnodes = nnodes;
  s->c.nranks = nranks;
  s->c.rank = rank;
  atomic_store_explicit(&s->used, 1, memory_order_release);
  return s;
}

static struct {
  _Atomic uint64_t comms, comms_dropped, ops, ops_dropped, ops_joined, ops_unjoined, ops_overflow,
      launch_conflicts, ignored_events, kernels, unfinished;
  _Atomic uint64_t func_ops[NCCL_FUNC_COUNT], func_bytes[NCCL_FUNC_COUNT],
      func_gpu_ns[NCCL_FUNC_COUNT];
} st;

#define ADD(field, n) atomic_fetch_add_explicit(&st.field, (n), memory_order_relaxed)

/* An entry that describes exactly this communicator, or NULL. */
static struct nccl_comm_slot *comm_same(uint64_t hash, const char *name, int nnodes, int nranks,
                                        int rank)
{
  uint32_t n = atomic_load_explicit(&n_comms, memory_order_acquire);
  char want[sizeof(comms[0].c.name)] = "";

  if (name)
    snprintf(want, sizeof(want), "%s", name);
  for (uint32_t i = 0; i < n && i < NCCL_MAX_COMMS; i++) {
    const struct nccl_comm *c = &comms[i].c;
    if (atomic_load_explicit(&comms[i].used, memory_order_acquire) && c->hash == hash &&
        c->rank == rank && c->nranks == nranks && c->nnodes == nnodes && !strcmp(c->name, want))
      return &comms[i];
  }
  return NULL;
}

static void comm_note_device(struct nccl_comm_slot *s, int32_t device);

struct nccl_comm_slot *nccl_comm_add(uint64_t hash, const char *name, int nnodes, int nranks,
                                     int rank, int32_t device)
{
  struct nccl_comm_slot *s = comm_same(hash, name, nnodes, nranks, rank);

  /* A re-init of a communicator this process had (destroyed, then created again from the same
   * unique id): its entry, so that re-inits cannot use up the table. */
  if (!s) {
    s = comm_fill(hash, name, nnodes, nranks, rank);
    if (s)
      ADD(comms, 1);
    else
      ADD(comms_dropped, 1);
  }
  if (s)
    comm_note_device(s, device);
  return s;
}

struct nccl_comm_slot *nccl_comm_find_or_add(uint64_t hash, const char *name)
{
  uint32_t n = atomic_load_explicit(&n_comms, memory_order_acquire);

  for (uint32_t i = 0; i < n && i < NCCL_MAX_COMMS; i++)
    if (atomic_load_explicit(&comms[i].used, memory_order_acquire) && comms[i].c.hash == hash)
      return &comms[i];
  /* Two threads may add the same v3 communicator at once: two entries, same labels. */
  return nccl_comm_add(hash, name, 0, 0, 0, -1);
}

const struct nccl_comm *nccl_comm_get(uint32_t index)
{
  if (index >= NCCL_MAX_COMMS || !atomic_load_explicit(&comms[index].used, memory_order_acquire))
    return NULL;
  return &comms[index].c;
}

void nccl_comm_label(uint32_t index, char *buf, size_t len)
{
  const struct nccl_comm *c = nccl_comm_get(index);

  if (!c)
    snprintf(buf, len, "?");
  else if (c->name[0])
    snprintf(buf, len, "%s", c->name);
  else
    snprintf(buf, len, "%016llx", (unsigned long long)c->hash);
}

/* ---- the op pool ---- */

/* OP_RELEASING: the sweep took the op; its generation moves on before the slot is free. */
enum { OP_FREE = 0, OP_OPEN, OP_BOUND, OP_RELEASING };

/*
 * An op's fields are written by application threads (op_new, the Coll/P2p start, the launch)
 * while another thread may list the pending ops (nccl_pending_collect: the worker at a
 * capture's end, or the exit path). They are written and read with relaxed atomics under a
 * sequence count, wseq: odd while the op is free or being written, even when it is complete.
 * A reader keeps a copy only if wseq, gen and state did not move while it copied. Only the
 * op's owner writes it, so the count costs an uncontended increment per write.
 */
#define SET(f, v) __atomic_store_n(&(f), (v), __ATOMIC_RELAXED)
#define GET(f) __atomic_load_n(&(f), __ATOMIC_RELAXED)

struct op {
  _Atomic uint32_t state;
  _Atomic uint32_t gen;  /* bumped at each release: stale handles are recognized */
  _Atomic uint32_t wseq; /* the write sequence above; 1 in a never-used op */
  _Atomic uint32_t next; /* the op bound to the same launch before this one: index + 1 */
  _Atomic uint32_t pins; /* owners writing it (op_pin): the sweep leaves it alone meanwhile */
  uint32_t corr;
  uint32_t comm;
  uint32_t tid, stack_id, weight;
  uint8_t func, dtype, algo, proto;
  uint8_t has_seq, graph_captured;
  uint32_t nchannels;
  uint64_t count;
  int32_t root, peer;
  uint64_t seq;
  uint64_t api_start_ns;
  _Atomic uint64_t api_stop_ns;
  _Atomic uint64_t born_ns;
};

/* Correlation id -> the last op bound to that launch. corr 0: free; SLOT_BUSY: being set. */
struct lslot {
  _Atomic uint32_t corr;
  _Atomic uint32_t head; /* op index + 1 */
};
#define SLOT_BUSY UINT32_MAX

static struct op *ops;
static struct lslot *lslots;
static uint32_t pool_mask;
static _Atomic uint32_t alloc_next;
static _Atomic int pool_ready;
_Atomic int nccl_launch_watch;
static _Atomic int legacy_plugin; /* a v3/v4 plugin: no KernelLaunch events, name heuristic */

int nccl_init(size_t pool_ops)
{
  size_t n = 1024;

  if (atomic_load(&pool_ready))
    return 0;
  if (!pool_ops)
    pool_ops = NCCL_DEFAULT_POOL;
  while (n < pool_ops && n < (1u << 24))
    n <<= 1;
  ops = calloc(n, sizeof(*ops));
  lslots = calloc(n, sizeof(*lslots));
  if (!ops || !lslots) {
    free(ops);
    free(lslots);
    ops = NULL;
    lslots = NULL;
    log_warn("out of memory for the NCCL op pool (%zu ops); NCCL operations are not recorded", n);
    return -ENOMEM;
  }
  pool_mask = (uint32_t)(n - 1);
  for (size_t i = 0; i < n; i++)
    atomic_store_explicit(&ops[i].wseq, 1, memory_order_relaxed);
  atomic_store_explicit(&pool_ready, 1, memory_order_release);
  return 0;
}

/* ---- the activation mask ---- */

static _Atomic(int *) mask_ptr;
static _Atomic int tracing; /* the agent records API calls: NCCL events can be joined */
/* When tracing last went on: on demand, ops of an earlier capture whose kernels ended while
 * records were off are not pending in this one. */
static _Atomic uint64_t tracing_since_ns;

static int mask_value(void)
{
  if (!atomic_load_explicit(&tracing, memory_order_relaxed) ||
      !atomic_load_explicit(&pool_ready, memory_order_acquire))
    return 0;
  return atomic_load_explicit(&legacy_plugin, memory_order_relaxed) ? NCCL_MASK_LEGACY
                                                                    : NCCL_MASK_V5;
}

int nccl_plugin_mask(int *mask, int legacy)
{
  if (legacy)
    atomic_store_explicit(&legacy_plugin, 1, memory_order_relaxed);
  atomic_store_explicit(&mask_ptr, mask, memory_order_release);
  atomic_store_explicit(&nccl_launch_watch, 1, memory_order_relaxed);
  return mask_value();
}

void nccl_set_tracing(int on)
{
  int *m;

  if (on && !atomic_load_explicit(&tracing, memory_order_relaxed))
    atomic_store_explicit(&tracing_since_ns, clock_realtime_ns(), memory_order_relaxed);
  atomic_store_explicit(&tracing, on != 0, memory_order_relaxed);
  /* NCCL reads its mask atomically at each group start (one int for all communicators). */
  m = atomic_load_explicit(&mask_ptr, memory_order_acquire);
  if (m)
    __atomic_store_n(m, mask_value(), __ATOMIC_RELAXED);
}

/* ---- handles: opaque tokens, never dereferenced by NCCL ---- */

enum { TAG_API = 1, TAG_TASK = 2, TAG_LAUNCH = 3 };

static void *make_handle(uint32_t idx, uint32_t gen, unsigned tag)
{
  return (void *)(uintptr_t)(((uint64_t)gen << 32) | ((uint64_t)(idx + 1) << 2) | tag);
}

/* The op a handle names, if it is still that op (not released and reused). */
static struct op *handle_op(void *h, unsigned *tag)
{
  uint64_t v = (uint64_t)(uintptr_t)h;
  uint32_t idx;
  struct op *o;

  *tag = (unsigned)(v & 3);
  if (!ops || *tag == TAG_LAUNCH || !(v >> 2 & 0x3fffffffu))
    return NULL;
  idx = (uint32_t)((v >> 2) & 0x3fffffffu) - 1;
  if (idx > pool_mask)
    return NULL;
  o = &ops[idx];
  if (atomic_load_explicit(&o->gen, memory_order_acquire) != (uint32_t)(v >> 32) ||
      atomic_load_explicit(&o->state, memory_order_acquire) == OP_FREE)
    return NULL;
  return o;
}

/* Brackets writes to an op that readers may see (wseq above). */
static void op_write_begin(struct op *o)
{
  atomic_fetch_add_explicit(&o->wseq, 1, memory_order_relaxed);
  atomic_thread_fence(memory_order_release);
}

static void op_write_end(struct op *o)
{
  atomic_fetch_add_explicit(&o->wseq, 1, memory_order_release);
}

/* Ends an op_pin (or op_new's pin). Release: the sweep that reads the count sees the writes. */
static void op_unpin(struct op *o)
{
  atomic_fetch_sub_explicit(&o->pins, 1, memory_order_release);
}

/*
 * Keeps the sweep off o while its owner writes it: 1 if o is still the open op of generation
 * gen (pinned; op_unpin when done), else 0. Without it, the sweep could release an op past its
 * TTL between its owner's check and its writes, which then land in a free or reclaimed slot (an
 * op joined after being counted unjoined, another op's fields overwritten, the write count's
 * parity inverted). A Dekker pair with the sweep: each side writes its own word, then reads
 * the other's, all seq_cst, so at least one of them sees the other (no fence instruction on
 * x86: the increment is a locked one anyway).
 */
static int op_pin(struct op *o, uint32_t gen)
{
  atomic_fetch_add_explicit(&o->pins, 1, memory_order_seq_cst);
  if (atomic_load_explicit(&o->state, memory_order_seq_cst) == OP_OPEN &&
      atomic_load_explicit(&o->gen, memory_order_relaxed) == gen)
    return 1;
  op_unpin(o);
  return 0;
}

static void op_release(struct op *o)
{
  /* Odd while free: a reader never takes the fields of a slot being reclaimed. */
  atomic_fetch_add_explicit(&o->wseq, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&o->gen, 1, memory_order_relaxed);
  /* 0 until the next owner stamps it: the sweep leaves such an op alone (see sweep). */
  atomic_store_explicit(&o->born_ns, 0, memory_order_relaxed);
  atomic_store_explicit(&o->state, OP_FREE, memory_order_release);
}

/* A free op, claimed (state OPEN), or NULL when the pool is full (counted). Bounded probing:
 * O(1) whatever the pool holds. */
#define ALLOC_PROBES 16
static struct op *op_alloc(uint32_t *idx_out)
{
  uint32_t start, expect;

  if (!atomic_load_explicit(&pool_ready, memory_order_acquire))
    return NULL;
  start = atomic_fetch_add_explicit(&alloc_next, 1, memory_order_relaxed);
  for (uint32_t i = 0; i < ALLOC_PROBES; i++) {
    uint32_t idx = (start + i) & pool_mask;
    expect = OP_FREE;
    if (atomic_compare_exchange_strong_explicit(&ops[idx].state, &expect, OP_OPEN,
                                                memory_order_acquire, memory_order_relaxed)) {
      *idx_out = idx;
      return &ops[idx];
    }
  }
  ADD(ops_dropped, 1);
  return NULL;
}

static void op_describe(struct op *o, const struct nccl_op_desc *d)
{
  if (d->func)
    SET(o->func, func_index(d->func));
  if (d->datatype)
    SET(o->dtype, dtype_index(d->datatype));
  if (d->algo)
    SET(o->algo, name_index(d->algo, algo_names, N_ALGOS, 1));
  if (d->proto)
    SET(o->proto, name_index(d->proto, proto_names, N_PROTOS, 1));
  if (d->count)
    SET(o->count, d->count);
  if (d->root >= 0)
    SET(o->root, d->root);
  if (d->peer >= 0)
    SET(o->peer, d->peer);
  if (d->has_seq) {
    SET(o->seq, d->seq);
    SET(o->has_seq, 1);
  }
  if (d->nchannels)
    SET(o->nchannels, d->nchannels);
  if (d->graph_captured)
    SET(o->graph_captured, 1);
}

/* A new op of communicator c, with this thread's host stack (the launch sampling policy),
 * pinned (op_pin): the caller unpins it. */
static struct op *op_new(struct nccl_comm_slot *c, const struct nccl_op_desc *d, uint32_t *idx)
{
  struct thread_state *ts;
  struct op *o = op_alloc(idx);
  uint32_t stack_id = 0, weight = 0;
  uint64_t now;

  if (!o)
    return NULL;
  /* Before born_ns is stamped (released below): a sweep that sees the stamp sees the pin. */
  atomic_fetch_add_explicit(&o->pins, 1, memory_order_relaxed);
  /* op_write_begin's fence: a reader that copies a field written below then sees the odd
   * count op_release left (C11 fence to fence; the claim above is an acquire only). */
  atomic_thread_fence(memory_order_release);
  ts = thread_state_get();
  now = clock_realtime_ns();
  hoststack_capture(ts, HOSTSTACK_CALL_LAUNCH, &stack_id, &weight);
  /* wseq is odd since the slot was freed (op_release): no write_begin here. */
  SET(o->corr, 0);
  SET(o->comm, (uint32_t)(c - comms));
  SET(o->tid, ts->tid);
  SET(o->stack_id, stack_id);
  SET(o->weight, weight);
  SET(o->func, (uint8_t)(NCCL_FUNC_COUNT - 1));
  SET(o->dtype, 0);
  SET(o->algo, 0);
  SET(o->proto, 0);
  SET(o->has_seq, 0);
  SET(o->graph_captured, 0);
  SET(o->nchannels, 0);
  SET(o->count, 0);
  SET(o->root, -1);
  SET(o->peer, -1);
  SET(o->seq, 0);
  atomic_store_explicit(&o->next, 0, memory_order_relaxed);
  atomic_store_explicit(&o->api_stop_ns, 0, memory_order_relaxed);
  SET(o->api_start_ns, now);
  atomic_store_explicit(&o->born_ns, now, memory_order_release);
  op_describe(o, d);
  op_write_end(o);
  ADD(ops, 1);
  return o;
}

/* ---- the join, per thread ---- */

#define TLS_PENDING 32

/*
 * What this thread saw of NCCL's launches. NCCL 2.28 (src/enqueue.cc) brackets each plan's
 * cuLaunchKernelEx with KernelLaunch start/stop and, in eager mode, starts the plan's Coll/P2p
 * events on the same thread right after (hostStreamPlanTask from ncclLaunchKernelAfter_NoCuda):
 * a Coll that starts after a bracket belongs to that bracket's launch. A Coll that starts while
 * no launch is claimable waits in `pending` and the next bracketed launch takes it, which
 * covers an order where the plan's events come first. A launch that took pending ops is not
 * claimable afterwards (the ops after it belong to the next one). A bracket whose launch the
 * agent did not see (API callbacks switched off as a capture ends, a launch through an API
 * the agent does not watch) owns the ops that follow it until the next bracket: they are
 * released unjoined at once instead of waiting in `pending` for a later, unrelated launch.
 */
struct nccl_tls {
  uint8_t kl_open;
  uint8_t after_unseen; /* the last bracket closed without a launch */
  uint8_t bound_pending;
  uint8_t last_claimable;
  uint32_t kl_corr, kl_comm; /* comm: index + 1, 0: any */
  uint32_t last_corr, last_comm;
  uint32_t n_pending;
  void *pending[TLS_PENDING]; /* TAG_TASK handles */
};

static __thread struct nccl_tls tls __attribute__((tls_model("local-dynamic")));

/* Publishes o (index idx, pinned by the caller) as one of the ops of launch corr. */
static void op_bind(struct op *o, uint32_t idx, uint32_t corr)
{
  struct lslot *s = &lslots[corr & pool_mask];
  uint32_t c = atomic_load_explicit(&s->corr, memory_order_acquire), open = OP_OPEN;
  int bound;

  op_write_begin(o);
  SET(o->corr, corr);
  /* A CAS: a sweep that missed the pin may hold the op (RELEASING); it is then not bound. */
  bound = atomic_compare_exchange_strong_explicit(&o->state, &open, OP_BOUND, memory_order_relaxed,
                                                  memory_order_relaxed);
  op_write_end(o);
  if (!bound)
    return;
  if (c == corr) {
    /* Another op of the same launch, bound by this same thread. */
    atomic_store_explicit(&o->next, atomic_load_explicit(&s->head, memory_order_relaxed),
                          memory_order_relaxed);
    atomic_store_explicit(&s->head, idx + 1, memory_order_release);
    return;
  }
  if (c != 0 || !atomic_compare_exchange_strong_explicit(
                    &s->corr, &c, SLOT_BUSY, memory_order_acquire, memory_order_relaxed)) {
    /* A launch size ids apart still holds the slot: this op expires unjoined. */
    ADD(launch_conflicts, 1);
    return;
  }
  atomic_store_explicit(&o->next, 0, memory_order_relaxed);
  atomic_store_explicit(&s->head, idx + 1, memory_order_relaxed);
  atomic_store_explicit(&s->corr, corr, memory_order_release);
}

void *nccl_api_start(struct nccl_comm_slot *c, const struct nccl_op_desc *d)
{
  uint32_t idx;
  struct op *o;
  void *h;

  if (!c || !(o = op_new(c, d, &idx)))
    return NULL;
  h = make_handle(idx, atomic_load_explicit(&o->gen, memory_order_relaxed), TAG_API);
  op_unpin(o);
  return h;
}

void *nccl_task_start(struct nccl_comm_slot *c, void *parent, const struct nccl_op_desc *d)
{
  unsigned tag;
  struct op *o = parent ? handle_op(parent, &tag) : NULL;
  uint32_t idx, cidx = comm_index1(c);
  void *h;

  if (!c)
    return NULL;
  if (o && (tag != TAG_API || !op_pin(o, (uint32_t)((uint64_t)(uintptr_t)parent >> 32)))) {
    o = NULL; /* a graph replay of an op joined (or expired) long ago: a new op */
  }
  if (o) {
    /* The API event's func, count and datatype are the user's: NCCL rewrites AllGather and
     * Broadcast tasks to bytes of ncclInt8 (collTaskAppend), which its Coll events show. */
    struct nccl_op_desc task = *d;
    task.func = task.datatype = NULL;
    task.count = 0;
    idx = (uint32_t)(o - ops);
    op_write_begin(o);
    op_describe(o, &task);
    op_write_end(o);
  } else if (!(o = op_new(c, d, &idx))) {
    return NULL;
  }
  if (tls.after_unseen && !tls.last_claimable) {
    /* The op of a launch the agent did not see: no kernel record can claim it. A CAS, as
     * the sweep may be taking an op that waited for its Coll event past the TTL. */
    uint32_t state = OP_OPEN;
    if (atomic_compare_exchange_strong_explicit(&o->state, &state, OP_RELEASING,
                                                memory_order_acquire, memory_order_relaxed)) {
      op_release(o);
      ADD(ops_unjoined, 1);
    }
    op_unpin(o);
    return NULL;
  }
  h = make_handle(idx, atomic_load_explicit(&o->gen, memory_order_relaxed), TAG_TASK);
  if (tls.last_claimable && tls.last_corr && (!tls.last_comm || tls.last_comm == cidx))
    op_bind(o, idx, tls.last_corr);
  else if (tls.n_pending < TLS_PENDING)
    tls.pending[tls.n_pending++] = h;
  /* else: left open, released unjoined after NCCL_OP_TTL_NS */
  op_unpin(o);
  return h;
}

void *nccl_launch_start(struct nccl_comm_slot *c)
{
  tls.kl_open = 1;
  tls.after_unseen = 0;
  tls.kl_corr = 0;
  tls.kl_comm = comm_index1(c);
  tls.bound_pending = 0;
  return make_handle(0, 0, TAG_LAUNCH);
}

/*
 * Per communicator (any thread reads): the latest API start of an op that finished (the worker
 * writes; NCCL runs a communicator's ops in order, so an op posted before it finished too, even
 * if its record was lost), and the device its kernels run on + 1. The plugin is not told a
 * communicator's device: its init writes the device current on the initializing thread (NCCL's
 * ncclCommInitRankFunc sets the communicator's device first), for a communicator that never
 * launches anything (a collective stuck in an unended group); the launching thread writes the
 * device of its launches' context, before any kernel finished, which a hung collective's never
 * does; the worker writes it again from the kernel records.
 */
static _Atomic uint64_t comm_done_posted[NCCL_MAX_COMMS];
static _Atomic uint32_t comm_dev1[NCCL_MAX_COMMS];
static _Atomic uint32_t any_dev1;

static void comm_set_device(uint32_t comm, int32_t device)
{
  if (comm >= NCCL_MAX_COMMS || device < 0)
    return;
  atomic_store_explicit(&comm_dev1[comm], (uint32_t)device + 1, memory_order_relaxed);
  atomic_store_explicit(&any_dev1, (uint32_t)device + 1, memory_order_relaxed);
}

/* The device a communicator was created on: its own only (any_dev1 stays the device of the
 * last launch, the guess for communicators that say nothing). */
static void comm_note_device(struct nccl_comm_slot *s, int32_t device)
{
  if (device >= 0)
    atomic_store_explicit(&comm_dev1[comm_index1(s) - 1], (uint32_t)device + 1,
                          memory_order_relaxed);
}

/* The pending ops of comm (index + 1, 0: any) go to launch corr, on device. */
static void bind_pending(uint32_t corr, uint32_t comm, int32_t device)
{
  uint32_t kept = 0;
  unsigned tag;

  for (uint32_t i = 0; i < tls.n_pending; i++) {
    struct op *o = handle_op(tls.pending[i], &tag);
    if (!o || !op_pin(o, (uint32_t)((uint64_t)(uintptr_t)tls.pending[i] >> 32)))
      continue;
    if (comm && GET(o->comm) + 1 != comm) {
      op_unpin(o);
      tls.pending[kept++] = tls.pending[i];
      continue;
    }
    op_bind(o, (uint32_t)(o - ops), corr);
    comm_set_device(GET(o->comm), device);
    op_unpin(o);
    tls.bound_pending = 1;
  }
  tls.n_pending = kept;
}

void nccl_note_launch_slow(uint32_t corr_id, const char *symbol_name, int32_t device)
{
  if (!lslots || !corr_id)
    return;
  if (tls.kl_open) {
    tls.kl_corr = corr_id;
    if (tls.kl_comm)
      comm_set_device(tls.kl_comm - 1, device);
    bind_pending(corr_id, tls.kl_comm, device);
    return;
  }
  /* v3/v4 plugins get no KernelLaunch events: an NCCL kernel launched on this thread plays
   * the bracket's part (NCCL names its kernels ncclDevKernel_*, ncclSymkDevKernel_*, and
   * before 2.19 ncclKernel_*). */
  if (!atomic_load_explicit(&legacy_plugin, memory_order_relaxed) || !symbol_name ||
      (!strstr(symbol_name, "ncclDevKernel_") && !strstr(symbol_name, "ncclKernel_") &&
       !strstr(symbol_name, "ncclSymk")))
    return;
  tls.bound_pending = 0;
  bind_pending(corr_id, 0, device);
  tls.last_corr = corr_id;
  tls.last_comm = 0;
  tls.last_claimable = !tls.bound_pending;
}

void nccl_handle_stop(void *handle)
{
  unsigned tag;
  struct op *o;

  if (!handle)
    return;
  o = handle_op(handle, &tag);
  if (tag == TAG_LAUNCH) {
    tls.kl_open = 0;
    tls.last_corr = tls.kl_corr;
    tls.last_comm = tls.kl_comm;
    tls.last_claimable = tls.kl_corr && !tls.bound_pending;
    tls.after_unseen = !tls.kl_corr;
    return;
  }
  /* NCCL 2.28.9 may stop a CollApi handle twice (it keeps the handle after the first stop,
   * tests/fakegpu/nccl reproduces it): the first stop is the call's return. */
  if (o && tag == TAG_API && !atomic_load_explicit(&o->api_stop_ns, memory_order_relaxed))
    atomic_store_explicit(&o->api_stop_ns, clock_realtime_ns(), memory_order_relaxed);
}

/* ---- worker side ---- */

/* The ops of the kernel being decoded: grown on the worker thread as groups need (64 ops
 * cover almost every kernel; an all-to-all of n ranks needs 2n - 2), up to
 * NCCL_MAX_OPS_PER_KERNEL. */
static struct nccl_op_view *cur;
static unsigned cur_cap;
static unsigned cur_n;
static const struct event *cur_ev;
static uint64_t last_scan_ns;

static void view_fill(struct nccl_op_view *v, struct op *o)
{
  uint8_t func = GET(o->func), dtype = GET(o->dtype), algo = GET(o->algo), proto = GET(o->proto);

  memset(v, 0, sizeof(*v));
  v->func = func_names[func < NCCL_FUNC_COUNT ? func : NCCL_FUNC_COUNT - 1];
  v->datatype = dtypes[dtype < N_DTYPES ? dtype : 0].name;
  v->algo = algo_names[algo < N_ALGOS ? algo : 0];
  v->proto = proto_names[proto < N_PROTOS ? proto : 0];
  v->count = GET(o->count);
  v->bytes = v->count * dtypes[dtype < N_DTYPES ? dtype : 0].size;
  v->root = GET(o->root);
  v->peer = GET(o->peer);
  v->seq = GET(o->has_seq) ? GET(o->seq) : UINT64_MAX;
  v->nchannels = GET(o->nchannels);
  v->comm = GET(o->comm);
  v->tid = GET(o->tid);
  v->stack_id = GET(o->stack_id);
  v->weight = GET(o->weight);
  v->graph_captured = GET(o->graph_captured);
  v->api_start_ns = GET(o->api_start_ns);
  v->api_stop_ns = atomic_load_explicit(&o->api_stop_ns, memory_order_relaxed);
}

/* Room for n + 1 views in cur; 0 when there is none (out of memory, or the bound). */
static int cur_room(unsigned n)
{
  unsigned cap;
  struct nccl_op_view *p;

  if (n < cur_cap)
    return 1;
  if (cur_cap >= NCCL_MAX_OPS_PER_KERNEL)
    return 0;
  cap = cur_cap ? cur_cap * 2 : 64;
  if (cap > NCCL_MAX_OPS_PER_KERNEL)
    cap = NCCL_MAX_OPS_PER_KERNEL;
  p = realloc(cur, cap * sizeof(*cur));
  if (!p)
    return 0;
  cur = p;
  cur_cap = cap;
  return 1;
}

/* comm_done_posted[comm] = max(itself, t): a CAS, as the worker and nccl_comm_finalize race. */
static void comm_done_raise(uint32_t comm, uint64_t t)
{
  uint64_t cur = atomic_load_explicit(&comm_done_posted[comm], memory_order_relaxed);

  while (t > cur &&
         !atomic_compare_exchange_weak_explicit(&comm_done_posted[comm], &cur, t,
                                                memory_order_relaxed, memory_order_relaxed))
    ;
}

static void comm_finished(uint32_t comm, uint64_t api_start_ns, uint32_t device)
{
  if (comm >= NCCL_MAX_COMMS)
    return;
  comm_done_raise(comm, api_start_ns);
  comm_set_device(comm, (int32_t)device);
}

void nccl_comm_finalize(void *context)
{
  uintptr_t p = (uintptr_t)context, base = (uintptr_t)comms;

  /* Any plugin context: a v3 plugin's is not a communicator. */
  if (p < base || p >= base + sizeof(comms) || (p - base) % sizeof(comms[0]))
    return;
  comm_done_raise((uint32_t)((p - base) / sizeof(comms[0])), clock_realtime_ns());
}

/* Whether an op of comm posted at api_start_ns may still be running (see nccl_pending). */
static int comm_may_pend(uint32_t comm, uint64_t api_start_ns)
{
  return comm < NCCL_MAX_COMMS &&
         atomic_load_explicit(&comm_done_posted[comm], memory_order_relaxed) <= api_start_ns;
}

void nccl_worker_event(const struct event *ev)
{
  struct lslot *s;
  uint32_t idx1, n = 0, dropped = 0;
  uint64_t dur, share, rest;

  cur_ev = NULL;
  cur_n = 0;
  if (ev->kind != EVENT_KERNEL || !ev->corr_id || !lslots)
    return;
  s = &lslots[ev->corr_id & pool_mask];
  if (atomic_load_explicit(&s->corr, memory_order_acquire) != ev->corr_id)
    return;
  if (ev->flags & EVENT_F_NO_TIMING) {
    /* A forced flush (the exit path's) delivers kernels still running with no timestamps:
     * not finished. Its ops stay bound, to be listed as pending (a hung collective). */
    ADD(unfinished, 1);
    return;
  }
  idx1 = atomic_load_explicit(&s->head, memory_order_acquire);
  while (idx1 && idx1 - 1 <= pool_mask) {
    struct op *o = &ops[idx1 - 1];
    uint32_t state = OP_BOUND;
    /* Taken with a CAS: nccl_finish's sweep may run on another thread when the worker did not
     * stop in time, and an op must be released (and counted) once. */
    if (atomic_load_explicit(&o->state, memory_order_acquire) != OP_BOUND ||
        GET(o->corr) != ev->corr_id ||
        !atomic_compare_exchange_strong_explicit(&o->state, &state, OP_RELEASING,
                                                 memory_order_acquire, memory_order_relaxed))
      break;
    idx1 = atomic_load_explicit(&o->next, memory_order_relaxed);
    if (cur_room(n))
      view_fill(&cur[n++], o);
    else
      dropped++;
    op_release(o);
  }
  {
    uint32_t expect = ev->corr_id;
    atomic_compare_exchange_strong_explicit(&s->corr, &expect, 0, memory_order_release,
                                            memory_order_relaxed);
  }
  if (dropped)
    ADD(ops_overflow, dropped);
  if (!n)
    return;
  /* Bound newest first: back to the order NCCL started them in. */
  for (uint32_t i = 0; i < n / 2; i++) {
    struct nccl_op_view t = cur[i];
    cur[i] = cur[n - 1 - i];
    cur[n - 1 - i] = t;
  }
  dur = ev->flags & EVENT_F_NO_TIMING || ev->end_ns < ev->start_ns ? 0 : ev->end_ns - ev->start_ns;
  share = dur / n;
  rest = dur % n;
  for (uint32_t i = 0; i < n; i++) {
    unsigned f;
    cur[i].gpu_ns = share + (i < rest ? 1 : 0);
    for (f = 0; f < NCCL_FUNC_COUNT - 1 && func_names[f] != cur[i].func; f++)
      ;
    ADD(func_ops[f], 1);
    ADD(func_bytes[f], cur[i].bytes);
    ADD(func_gpu_ns[f], cur[i].gpu_ns);
    comm_finished(cur[i].comm, cur[i].api_start_ns, ev->device);
  }
  ADD(ops_joined, n);
  ADD(kernels, 1);
  cur_n = n;
  cur_ev = ev;
}

unsigned nccl_current(const struct event *ev, const struct nccl_op_view **out)
{
  if (!cur_n || ev != cur_ev)
    return 0;
  *out = cur;
  return cur_n;
}

/* Whether o (read without a copy: a heuristic for the sweep) can be a pending op. */
static int op_may_pend(struct op *o)
{
  uint64_t posted = GET(o->api_start_ns);

  return atomic_load_explicit(&tracing, memory_order_relaxed) && !GET(o->graph_captured) &&
         posted >= atomic_load_explicit(&tracing_since_ns, memory_order_relaxed) &&
         comm_may_pend(GET(o->comm), posted);
}

/* A consistent copy of o into p if it is pending (nccl_pending): 1, else 0. */
static int op_read_pending(struct op *o, struct nccl_pending *p)
{
  for (int tries = 0; tries < 8; tries++) {
    uint32_t v = atomic_load_explicit(&o->wseq, memory_order_acquire);
    uint32_t g = atomic_load_explicit(&o->gen, memory_order_acquire);
    uint32_t st = atomic_load_explicit(&o->state, memory_order_acquire), st2, corr, d1;

    if (st != OP_OPEN && st != OP_BOUND)
      return 0;
    if (v & 1)
      continue; /* being written: its owner is inside a plugin callback, briefly */
    view_fill(&p->v, o);
    corr = GET(o->corr);
    atomic_thread_fence(memory_order_acquire);
    st2 = atomic_load_explicit(&o->state, memory_order_relaxed);
    if (atomic_load_explicit(&o->wseq, memory_order_relaxed) != v ||
        atomic_load_explicit(&o->gen, memory_order_relaxed) != g)
      continue;
    /* Taken by a kernel record (or the sweep) meanwhile: it finished. */
    if (st2 != OP_OPEN && st2 != OP_BOUND)
      return 0;
    if (p->v.graph_captured ||
        p->v.api_start_ns < atomic_load_explicit(&tracing_since_ns, memory_order_relaxed) ||
        !comm_may_pend(p->v.comm, p->v.api_start_ns))
      return 0;
    /* OPEN -> BOUND happens inside a write section: st is the state the copy describes. */
    p->launched = st == OP_BOUND;
    p->corr = p->launched ? corr : 0;
    d1 = p->v.comm < NCCL_MAX_COMMS
             ? atomic_load_explicit(&comm_dev1[p->v.comm], memory_order_relaxed)
             : 0;
    if (!d1)
      d1 = atomic_load_explicit(&any_dev1, memory_order_relaxed);
    p->device = d1 ? d1 - 1 : 0;
    return 1;
  }
  return 0;
}

static int pending_cmp(const void *a, const void *b)
{
  const struct nccl_pending *x = a, *y = b;

  if (x->v.api_start_ns != y->v.api_start_ns)
    return x->v.api_start_ns < y->v.api_start_ns ? -1 : 1;
  if (x->v.comm != y->v.comm)
    return x->v.comm < y->v.comm ? -1 : 1;
  return x->v.seq < y->v.seq ? -1 : x->v.seq > y->v.seq;
}

/* The snapshot nccl_finish takes before releasing everything; published by exit_done. */
static struct nccl_pending *exit_snap;
static unsigned exit_n;
static uint64_t exit_at_ns;
static _Atomic int exit_done;

/* One scan of the pool: the pending ops posted before before_ns, sorted. */
static int pending_scan(uint64_t before_ns, struct nccl_pending **out)
{
  struct nccl_pending *arr = NULL, *p;
  unsigned n = 0, cap = 0;

  *out = NULL;
  if (!atomic_load_explicit(&pool_ready, memory_order_acquire))
    return 0;
  for (uint32_t i = 0; i <= pool_mask; i++) {
    struct nccl_pending tmp;
    if (!op_read_pending(&ops[i], &tmp) || tmp.v.api_start_ns >= before_ns)
      continue;
    if (n == cap) {
      cap = cap ? cap * 2 : 16;
      p = realloc(arr, cap * sizeof(*arr));
      if (!p) {
        free(arr);
        return -ENOMEM;
      }
      arr = p;
    }
    arr[n++] = tmp;
  }
  if (n > 1)
    qsort(arr, n, sizeof(*arr), pending_cmp);
  *out = arr;
  return (int)n;
}

int nccl_pending_collect(uint64_t before_ns, struct nccl_pending **out)
{
  struct nccl_pending *arr;
  unsigned n = 0;

  *out = NULL;
  if (!atomic_load_explicit(&exit_done, memory_order_acquire))
    return pending_scan(before_ns, out);
  /* After nccl_finish the pool is empty: what was pending then. */
  for (unsigned i = 0; i < exit_n; i++)
    n += exit_snap[i].v.api_start_ns < before_ns;
  if (!n)
    return 0;
  arr = malloc(n * sizeof(*arr));
  if (!arr)
    return -ENOMEM;
  n = 0;
  for (unsigned i = 0; i < exit_n; i++)
    if (exit_snap[i].v.api_start_ns < before_ns)
      arr[n++] = exit_snap[i];
  *out = arr;
  return (int)n;
}

unsigned nccl_pending_at_exit(const struct nccl_pending **out, uint64_t *at_ns)
{
  if (!atomic_load_explicit(&exit_done, memory_order_acquire)) {
    *out = NULL;
    *at_ns = 0;
    return 0;
  }
  *out = exit_snap;
  *at_ns = exit_at_ns;
  return exit_n;
}

/* Releases ops older than the bound and frees launch slots whose ops are gone. */
static void sweep(uint64_t now_ns, uint64_t ttl_ns)
{
  if (!ops)
    return;
  for (uint32_t i = 0; i <= pool_mask; i++) {
    struct op *o = &ops[i];
    uint32_t state = atomic_load_explicit(&o->state, memory_order_acquire);
    uint32_t gen = atomic_load_explicit(&o->gen, memory_order_acquire);
    uint64_t born = atomic_load_explicit(&o->born_ns, memory_order_acquire);
    /* Not straight to FREE: an application thread could claim the slot and hand out a
     * handle with the old generation before the increment, a handle this sweep then makes
     * stale (the op's Coll event would start a second op). born == 0: claimed a moment ago
     * by an application thread that has not stamped or described it yet; its age is
     * unknown and its fields unwritten, so op_may_pend would misjudge it (the overflow test
     * lost an op to this under TSan); at exit too, as its owner is still writing it and its
     * pin (op_new) may not be visible yet. */
    if ((state == OP_OPEN || state == OP_BOUND) && born &&
        (ttl_ns == 0 || (now_ns - born > ttl_ns && !op_may_pend(o))) &&
        atomic_compare_exchange_strong_explicit(&o->state, &state, OP_RELEASING,
                                                memory_order_seq_cst, memory_order_relaxed)) {
      /* The op judged above was released and the slot claimed again in between (same
       * state, a new generation), or its owner is writing it (op_pin: seq_cst, as there).
       * Nothing else leaves RELEASING. */
      if (atomic_load_explicit(&o->gen, memory_order_acquire) != gen ||
          atomic_load_explicit(&o->pins, memory_order_seq_cst)) {
        atomic_store_explicit(&o->state, state, memory_order_release);
        continue;
      }
      op_release(o);
      ADD(ops_unjoined, 1);
    }
  }
  for (uint32_t i = 0; i <= pool_mask; i++) {
    struct lslot *s = &lslots[i];
    uint32_t c = atomic_load_explicit(&s->corr, memory_order_acquire);
    uint32_t h = atomic_load_explicit(&s->head, memory_order_acquire);
    if (c && c != SLOT_BUSY &&
        (!h || h - 1 > pool_mask ||
         atomic_load_explicit(&ops[h - 1].state, memory_order_acquire) != OP_BOUND ||
         GET(ops[h - 1].corr) != c))
      atomic_compare_exchange_strong_explicit(&s->corr, &c, 0, memory_order_release,
                                              memory_order_relaxed);
  }
}

void nccl_worker_tick(uint64_t now_ns)
{
  if (!atomic_load_explicit(&pool_ready, memory_order_acquire))
    return;
  if (now_ns - last_scan_ns < 1000000000ull)
    return;
  last_scan_ns = now_ns;
  sweep(now_ns, NCCL_OP_TTL_NS);
}

void nccl_finish(void)
{
  static _Atomic int done;

  struct nccl_pending *snap;
  int n;

  if (atomic_exchange(&done, 1) || !atomic_load_explicit(&pool_ready, memory_order_acquire))
    return;
  /* Before the sweep empties the pool: the summary and a capture the exit path finishes
   * list what was still pending (a hung collective). Kept to the process's end. */
  exit_at_ns = clock_realtime_ns();
  n = pending_scan(UINT64_MAX, &snap);
  if (n < 0)
    log_warn("out of memory listing the pending NCCL operations at exit; they are counted as "
             "unjoined only");
  exit_snap = n > 0 ? snap : NULL;
  exit_n = n > 0 ? (unsigned)n : 0;
  atomic_store_explicit(&exit_done, 1, memory_order_release);
  sweep(exit_at_ns, 0);
}

void nccl_get_stats(struct nccl_stats *out)
{
  out->comms = atomic_load(&st.comms);
  out->comms_dropped = atomic_load(&st.comms_dropped);
  out->ops = atomic_load(&st.ops);
  out->ops_dropped = atomic_load(&st.ops_dropped);
  out->ops_joined = atomic_load(&st.ops_joined);
  out->ops_unjoined = atomic_load(&st.ops_unjoined);
  out->ops_overflow = atomic_load(&st.ops_overflow);
  out->launch_conflicts = atomic_load(&st.launch_conflicts);
  out->ignored_events = atomic_load(&st.ignored_events);
  out->kernels = atomic_load(&st.kernels);
  out->unfinished = atomic_load(&st.unfinished);
}

void nccl_count_ignored(void)
{
  ADD(ignored_events, 1);
}

unsigned nccl_get_func_totals(struct nccl_func_total *out, unsigned max)
{
  unsigned n = 0;

  for (unsigned f = 0; f < NCCL_FUNC_COUNT && n < max; f++) {
    uint64_t k = atomic_load(&st.func_ops[f]);
    if (!k)
      continue;
    out[n].func = func_names[f];
    out[n].ops = k;
    out[n].bytes = atomic_load(&st.func_bytes[f]);
    out[n].gpu_ns = atomic_load(&st.func_gpu_ns[f]);
    n++;
  }
  return n;
}
