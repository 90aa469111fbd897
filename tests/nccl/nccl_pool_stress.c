/* Stress of the NCCL op pool: application threads post and stop ops while the worker joins
 * kernels and sweeps, and a reader lists pending ops; every op is accounted for at the end. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "agent/event.h"
#include "agent/nccl.h"
#include "agent/util/clock.h"
#include "unit.h"

#define APP_THREADS 4
#define ITERS 20000
#define QCAP 65536

/*
 * Each op carries its identity in two fields written at different times: the API start writes
 * count = k (and root = k % 1000, a Broadcast), the Coll start writes seq = k. A copy that
 * mixes two ops (torn read, or a slot reused under a writer) breaks root == count % 1000 or
 * seq == count; a kernel that joins an op not its own breaks count == corr (k is the launch's
 * correlation id).
 */
static struct nccl_comm_slot *comm;
static atomic_uint next_corr = 1;
static atomic_int apps_done;
static atomic_int reader_stop;

/* Launches for the worker: a mutex is fine here, the agent is what is under test. */
static pthread_mutex_t qlock = PTHREAD_MUTEX_INITIALIZER;
static uint32_t q[QCAP];
static unsigned q_head, q_tail;

static uint64_t views_joined, views_bad, pending_seen, pending_bad;

static void q_push(uint32_t corr)
{
  pthread_mutex_lock(&qlock);
  if (q_tail - q_head < QCAP)
    q[q_tail++ % QCAP] = corr;
  pthread_mutex_unlock(&qlock);
}

static int q_pop(uint32_t *corr)
{
  int ok = 0;

  pthread_mutex_lock(&qlock);
  if (q_head != q_tail) {
    *corr = q[q_head++ % QCAP];
    ok = 1;
  }
  pthread_mutex_unlock(&qlock);
  return ok;
}

static void *app(void *arg)
{
  (void)arg;
  for (unsigned i = 0; i < ITERS; i++) {
    uint32_t k = atomic_fetch_add(&next_corr, 1);
    struct nccl_op_desc d = {.func = "Broadcast",
                             .datatype = "ncclFloat32",
                             .count = k,
                             .root = (int32_t)(k % 1000),
                             .peer = -1};
    struct nccl_op_desc t = {.func = "Broadcast",
                             .datatype = "ncclFloat32",
                             .algo = "RING",
                             .proto = "SIMPLE",
                             .count = k,
                             .root = (int32_t)(k % 1000),
                             .peer = -1,
                             .seq = k,
                             .has_seq = 1,
                             .nchannels = 2};
    void *api = nccl_api_start(comm, &d), *kl, *task;

    kl = nccl_launch_start(comm);
    /* One bracket in 13 without a launch the agent saw: its ops are released at once. */
    if (k % 13)
      nccl_note_launch_slow(k, "ncclDevKernel_Broadcast_RING_LL", 0);
    nccl_handle_stop(kl);
    task = nccl_task_start(comm, api, &t);
    nccl_handle_stop(task);
    nccl_handle_stop(api);
    nccl_handle_stop(api); /* NCCL 2.28.9 stops a CollApi twice */
    /* One launch in 7 never delivers its kernel record: pending or released by the sweep. */
    if (k % 13 && k % 7)
      q_push(k);
  }
  atomic_fetch_add(&apps_done, 1);
  return NULL;
}

static void check_view(const struct nccl_op_view *v, uint32_t corr)
{
  views_joined++;
  if (strcmp(v->func, "Broadcast") || v->count != corr || v->root != (int32_t)(corr % 1000) ||
      v->seq != corr || v->bytes != 4ull * corr || strcmp(v->algo, "RING"))
    views_bad++;
}

static void *worker(void *arg)
{
  uint64_t tick = 0;
  (void)arg;
  for (;;) {
    uint32_t corr;
    int done = atomic_load(&apps_done) == APP_THREADS;
    if (q_pop(&corr)) {
      struct event ev;
      const struct nccl_op_view *v;
      unsigned n;
      memset(&ev, 0, sizeof(ev));
      ev.kind = EVENT_KERNEL;
      ev.corr_id = corr;
      ev.start_ns = 1000;
      ev.end_ns = 2000;
      ev.device = corr & 1;
      nccl_worker_event(&ev);
      n = nccl_current(&ev, &v);
      for (unsigned i = 0; i < n; i++)
        check_view(&v[i], corr);
      continue;
    }
    if (done)
      break;
    /* A sweep with every op past its TTL, NCCL events on and off in turn: ops are taken from
     * under their writers, and pending ones kept. */
    if (++tick % 64 == 0) {
      nccl_set_tracing((tick / 64) & 1);
      nccl_worker_tick(clock_realtime_ns() + NCCL_OP_TTL_NS + tick * 1000000000ull);
    }
  }
  return NULL;
}

static void *reader(void *arg)
{
  (void)arg;
  while (!atomic_load(&reader_stop)) {
    struct nccl_pending *p;
    int n = nccl_pending_collect(UINT64_MAX, &p);
    for (int i = 0; i < n; i++) {
      const struct nccl_comm *c = nccl_comm_get(p[i].v.comm);
      if (c && c->hash != 0x1234)
        continue; /* test_comm_finalize's */
      pending_seen++;
      if (strcmp(p[i].v.func, "Broadcast") || p[i].v.root != (int32_t)(p[i].v.count % 1000) ||
          (p[i].v.seq != UINT64_MAX && p[i].v.seq != p[i].v.count) ||
          (p[i].launched && p[i].corr != p[i].v.count))
        pending_bad++;
    }
    free(p);
  }
  return NULL;
}

static void test_pool_stress(void)
{
  pthread_t a[APP_THREADS], w, r;
  struct nccl_stats st;
  const struct nccl_pending *snap;
  uint64_t at;
  unsigned npend;

  comm = nccl_comm_add(0x1234, "stress", 1, 2, 0, -1);
  CHECK(comm != NULL);
  nccl_set_tracing(1);
  pthread_create(&w, NULL, worker, NULL);
  pthread_create(&r, NULL, reader, NULL);
  for (int i = 0; i < APP_THREADS; i++)
    pthread_create(&a[i], NULL, app, NULL);
  for (int i = 0; i < APP_THREADS; i++)
    pthread_join(a[i], NULL);
  pthread_join(w, NULL);
  atomic_store(&reader_stop, 1);
  pthread_join(r, NULL);
  nccl_set_tracing(1);
  nccl_finish();
  nccl_get_stats(&st);
  npend = nccl_pending_at_exit(&snap, &at);
  fprintf(stderr,
          "ops %llu dropped %llu joined %llu unjoined %llu pending at exit %u, "
          "pending listed meanwhile %llu\n",
          (unsigned long long)st.ops, (unsigned long long)st.ops_dropped,
          (unsigned long long)st.ops_joined, (unsigned long long)st.ops_unjoined, npend,
          (unsigned long long)pending_seen);
  /* After nccl_finish the pool is empty: each op was joined or released unjoined, once (the
   * pending ones at exit among the unjoined). */
  CHECK_EQ(st.ops, st.ops_joined + st.ops_unjoined);
  CHECK(npend <= st.ops_unjoined);
  CHECK_EQ(views_joined, st.ops_joined);
  CHECK_EQ(views_bad, 0);
  CHECK_EQ(pending_bad, 0);
  for (unsigned i = 0; i < npend; i++)
    CHECK(snap[i].v.count == 7 || snap[i].v.root == (int32_t)(snap[i].v.count % 1000));
  CHECK(st.ops_joined > 0);
}

/* A collective hung on a communicator that is then aborted: pending until the abort, then
 * released at the TTL like any unjoined op; the communicator re-created can hang again. */
static void test_comm_finalize(void)
{
  struct nccl_comm_slot *c = nccl_comm_add(0x5678, "aborted", 1, 2, 0, -1), *again;
  struct nccl_op_desc d = {
      .func = "AllReduce", .datatype = "ncclFloat32", .count = 7, .root = -1, .peer = -1};
  struct nccl_op_desc t = {.func = "AllReduce",
                           .datatype = "ncclFloat32",
                           .count = 7,
                           .root = -1,
                           .peer = -1,
                           .seq = 1,
                           .has_seq = 1};
  struct nccl_pending *p;
  struct nccl_stats st0, st1;
  void *api, *kl, *task;
  int n;

  CHECK(c != NULL);
  nccl_set_tracing(1);
  api = nccl_api_start(c, &d);
  kl = nccl_launch_start(c);
  nccl_note_launch_slow(4000000001u, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 0);
  nccl_handle_stop(kl);
  task = nccl_task_start(c, api, &t);
  nccl_handle_stop(task);
  nccl_handle_stop(api);
  n = nccl_pending_collect(UINT64_MAX, &p);
  CHECK_EQ(n, 1);
  if (n == 1) {
    CHECK_EQ(p[0].launched, 1);
    CHECK_EQ(p[0].corr, 4000000001u);
    CHECK_EQ(p[0].v.seq, 1);
  }
  free(p);
  nccl_comm_finalize(c);
  nccl_comm_finalize(&n); /* not a communicator (a v3 plugin's context): ignored */
  n = nccl_pending_collect(UINT64_MAX, &p);
  CHECK_EQ(n, 0);
  free(p);
  nccl_get_stats(&st0);
  nccl_worker_tick(clock_realtime_ns() + NCCL_OP_TTL_NS + 1000000000ull);
  nccl_get_stats(&st1);
  CHECK_EQ(st1.ops_unjoined - st0.ops_unjoined, 1);
  /* Re-created from the same unique id: the same entry; an op posted now may pend again. */
  again = nccl_comm_add(0x5678, "aborted", 1, 2, 0, -1);
  CHECK(again == c);
  api = nccl_api_start(again, &d);
  nccl_handle_stop(api);
  n = nccl_pending_collect(UINT64_MAX, &p);
  CHECK_EQ(n, 1);
  if (n == 1)
    CHECK_EQ(p[0].launched, 0);
  free(p);
}

int main(void)
{
  CHECK_EQ(nccl_init(1024), 0);
  RUN(test_comm_finalize);
  RUN(test_pool_stress);
  UNIT_EXIT();
}
