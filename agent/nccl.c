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
      launch_conflicts, ignored_events, kernels;
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

struct nccl_comm_slot *nccl_comm_add(uint64_t hash, const char *name, int nnodes, int nranks,
                                     int rank)
{
  struct nccl_comm_slot *s = comm_same(hash, name, nnodes, nranks, rank);

  /* A re-init of a communicator this process had (destroyed, then created again from the same
   * unique id): its entry, so that re-inits cannot use up the table. */
  if (s)
    return s;
  s = comm_fill(hash, name, nnodes, nranks, rank);

  if (s)
    ADD(comms, 1);
  else
    ADD(comms_dropped, 1);
  return s;
}

struct nccl_comm_slot *nccl_comm_find_or_add(uint64_t hash, const char *name)
{
  uint32_t n = atomic_load_explicit(&n_comms, memory_order_acquire);

  for (uint32_t i = 0; i < n && i < NCCL_MAX_COMMS; i++)
    if (atomic_load_explicit(&comms[i].used, memory_order_acquire) && comms[i].c.hash == hash)
      return &comms[i];
  /* Two threads may add the same v3 communicator at once: two entries, same labels. */
  return nccl_comm_add(hash, name, 0, 0, 0);
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

struct op {
  _Atomic uint32_t state;
  _Atomic uint32_t gen;  /* bumped at each release: stale handles are recognized */
  _Atomic uint32_t next; /* the op bound to the same launch before this one: index + 1 */
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
  atomic_store_explicit(&pool_ready, 1, memory_order_release);
  return 0;
}

/* ---- the activation mask ---- */

static _Atomic(int *) mask_ptr;
static _Atomic int tracing; /* the agent records API calls: NCCL events can be joined */

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

static void op_release(struct op *o)
{
  atomic_fetch_add_explicit(&o->gen, 1, memory_order_relaxed);
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
    o->func = func_index(d->func);
  if (d->datatype)
    o->dtype = dtype_index(d->datatype);
  if (d->algo)
    o->algo = name_index(d->algo, algo_names, N_ALGOS, 1);
  if (d->proto)
    o->proto = name_index(d->proto, proto_names, N_PROTOS, 1);
  if (d->count)
    o->count = d->count;
  if (d->root >= 0)
    o->root = d->root;
  if (d->peer >= 0)
    o->peer = d->peer;
  if (d->has_seq) {
    o->seq = d->seq;
    o->has_seq = 1;
  }
  if (d->nchannels)
    o->nchannels = d->nchannels;
  if (d->graph_captured)
    o->graph_captured = 1;
}

/* A new op of communicator c, with this thread's host stack (the launch sampling policy). */
static struct op *op_new(struct nccl_comm_slot *c, const struct nccl_op_desc *d, uint32_t *idx)
{
  struct thread_state *ts;
  struct op *o = op_alloc(idx);

  if (!o)
    return NULL;
  ts = thread_state_get();
  o->corr = 0;
  o->comm = (uint32_t)(c - comms);
  o->tid = ts->tid;
  o->func = (uint8_t)(NCCL_FUNC_COUNT - 1);
  o->dtype = o->algo = o->proto = 0;
  o->has_seq = o->graph_captured = 0;
  o->nchannels = 0;
  o->count = 0;
  o->root = o->peer = -1;
  o->seq = 0;
  atomic_store_explicit(&o->next, 0, memory_order_relaxed);
  atomic_store_explicit(&o->api_stop_ns, 0, memory_order_relaxed);
  o->api_start_ns = clock_realtime_ns();
  atomic_store_explicit(&o->born_ns, o->api_start_ns, memory_order_relaxed);
  op_describe(o, d);
  hoststack_capture(ts, HOSTSTACK_CALL_LAUNCH, &o->stack_id, &o->weight);
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

/* Publishes o (index idx) as one of the ops of launch corr. */
static void op_bind(struct op *o, uint32_t idx, uint32_t corr)
{
  struct lslot *s = &lslots[corr & pool_mask];
  uint32_t c = atomic_load_explicit(&s->corr, memory_order_acquire);

  o->corr = corr;
  atomic_store_explicit(&o->state, OP_BOUND, memory_order_relaxed);
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

static uint32_t comm_index1(struct nccl_comm_slot *c)
{
  return c ? (uint32_t)(c - comms) + 1 : 0;
}

void *nccl_api_start(struct nccl_comm_slot *c, const struct nccl_op_desc *d)
{
  uint32_t idx;
  struct op *o;

  if (!c || !(o = op_new(c, d, &idx)))
    return NULL;
  return make_handle(idx, atomic_load_explicit(&o->gen, memory_order_relaxed), TAG_API);
}

void *nccl_task_start(struct nccl_comm_slot *c, void *parent, const struct nccl_op_desc *d)
{
  unsigned tag;
  struct op *o = parent ? handle_op(parent, &tag) : NULL;
  uint32_t idx, cidx = comm_index1(c);
  void *h;

  if (!c)
    return NULL;
  if (o && (tag != TAG_API || atomic_load_explicit(&o->state, memory_order_relaxed) != OP_OPEN)) {
    o = NULL; /* a graph replay of an op joined (or expired) long ago: a new op */
  }
  if (o) {
    /* The API event's func, count and datatype are the user's: NCCL rewrites AllGather and
     * Broadcast tasks to bytes of ncclInt8 (collTaskAppend), which its Coll events show. */
    struct nccl_op_desc task = *d;
    task.func = task.datatype = NULL;
    task.count = 0;
    idx = (uint32_t)(o - ops);
    op_describe(o, &task);
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
    return NULL;
  }
  h = make_handle(idx, atomic_load_explicit(&o->gen, memory_order_relaxed), TAG_TASK);
  if (tls.last_claimable && tls.last_corr && (!tls.last_comm || tls.last_comm == cidx))
    op_bind(o, idx, tls.last_corr);
  else if (tls.n_pending < TLS_PENDING)
    tls.pending[tls.n_pending++] = h;
  /* else: left open, released unjoined after NCCL_OP_TTL_NS */
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

/* The pending ops of comm (index + 1, 0: any) go to launch corr. */
static void bind_pending(uint32_t corr, uint32_t comm)
{
  uint32_t kept = 0;
  unsigned tag;

  for (uint32_t i = 0; i < tls.n_pending; i++) {
    struct op *o = handle_op(tls.pending[i], &tag);
    if (!o || atomic_load_explicit(&o->state, memory_order_relaxed) != OP_OPEN)
      continue;
    if (comm && o->comm + 1 != comm) {
      tls.pending[kept++] = tls.pending[i];
      continue;
    }
    op_bind(o, (uint32_t)(o - ops), corr);
    tls.bound_pending = 1;
  }
  tls.n_pending = kept;
}

void nccl_note_launch_slow(uint32_t corr_id, const char *symbol_name)
{
  if (!lslots || !corr_id)
    return;
  if (tls.kl_open) {
    tls.kl_corr = corr_id;
    bind_pending(corr_id, tls.kl_comm);
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
  bind_pending(corr_id, 0);
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

static void view_fill(struct nccl_op_view *v, const struct op *o)
{
  v->func = func_names[o->func < NCCL_FUNC_COUNT ? o->func : NCCL_FUNC_COUNT - 1];
  v->datatype = dtypes[o->dtype < N_DTYPES ? o->dtype : 0].name;
  v->algo = algo_names[o->algo < N_ALGOS ? o->algo : 0];
  v->proto = proto_names[o->proto < N_PROTOS ? o->proto : 0];
  v->count = o->count;
  v->bytes = o->count * dtypes[o->dtype < N_DTYPES ? o->dtype : 0].size;
  v->root = o->root;
  v->peer = o->peer;
  v->seq = o->has_seq ? o->seq : UINT64_MAX;
  v->nchannels = o->nchannels;
  v->comm = o->comm;
  v->tid = o->tid;
  v->stack_id = o->stack_id;
  v->weight = o->weight;
  v->graph_captured = o->graph_captured;
  v->api_start_ns = o->api_start_ns;
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
  idx1 = atomic_load_explicit(&s->head, memory_order_acquire);
  while (idx1 && idx1 - 1 <= pool_mask) {
    struct op *o = &ops[idx1 - 1];
    uint32_t state = OP_BOUND;
    /* Taken with a CAS: nccl_finish's sweep may run on another thread when the worker did not
     * stop in time, and an op must be released (and counted) once. */
    if (atomic_load_explicit(&o->state, memory_order_acquire) != OP_BOUND ||
        o->corr != ev->corr_id ||
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

/* Releases ops older than the bound and frees launch slots whose ops are gone. */
static void sweep(uint64_t now_ns, uint64_t ttl_ns)
{
  if (!ops)
    return;
  for (uint32_t i = 0; i <= pool_mask; i++) {
    struct op *o = &ops[i];
    uint32_t state = atomic_load_explicit(&o->state, memory_order_acquire);
    uint64_t born = atomic_load_explicit(&o->born_ns, memory_order_relaxed);
    /* Not straight to FREE: an application thread could claim the slot and hand out a
     * handle with the old generation before the increment, a handle this sweep then makes
     * stale (the op's Coll event would start a second op). */
    if ((state == OP_OPEN || state == OP_BOUND) && (ttl_ns == 0 || now_ns - born > ttl_ns) &&
        atomic_compare_exchange_strong_explicit(&o->state, &state, OP_RELEASING,
                                                memory_order_acq_rel, memory_order_relaxed)) {
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
         ops[h - 1].corr != c))
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

  if (atomic_exchange(&done, 1) || !atomic_load_explicit(&pool_ready, memory_order_acquire))
    return;
  sweep(clock_realtime_ns(), 0);
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
