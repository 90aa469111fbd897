/* gpuprof analyze: where a capture's GPU time went, and which rank an NCCL hang waits for. */
#define _GNU_SOURCE
#include "cli/analyze.h"

#include <errno.h>
#include <getopt.h>
#include <glob.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "agent/util/hash.h"
#include "cli/client.h"
#include "cli/trace_read.h"
#include "cli/tracefile.h"
#include "export/trace_internal.h"

/*
 * Each trace is read twice (cli/trace_read.c, streaming): the first pass sums what each GPU,
 * kernel, copy direction, API call and NCCL communicator did and keeps every GPU activity's
 * interval (16 bytes each: the GPU's busy time is their union, its idle gaps what lies between,
 * and the copies' union met with the kernels' tells how much copying hid behind compute);
 * the second pass, once the longest gaps are known, finds the host calls that overlap them.
 * The communicators of all the traces are then compared by their hash, which is the same on
 * every rank: that is how a hang's missing rank is found (docs/ANALYZE.md).
 */

#define EXIT_BAD_INPUT 2
#define MAX_GPUS 64u
#define TOP_GAPS 5
#define TOP_ROWS 10
#define GAP_CALLS 3 /* host calls reported per gap */
#define MAX_THREAD_NAMES 4096u
#define MAX_RANKS_LISTED 65536 /* ranks without a trace are listed for communicators up to this */
/* Launching a kernel costs some µs of host and GPU time: work shorter than this is bound by it. */
#define SHORT_KERNEL_NS 10000u

struct span {
  uint64_t start, end;
};

struct spans {
  struct span *v;
  size_t n, cap;
};

enum { SPAN_KERNEL, SPAN_COPY, SPAN_SET, SPAN_KINDS };

/* Totals by name (kernels, copy directions, API calls). */
struct tally {
  char *name;
  uint64_t count, total_ns, max_ns, bytes;
  /* NVTX ranges: when the longest started, and every duration (for the median and p99) */
  uint64_t max_start_ns;
  uint64_t *durs;
  size_t n_durs, cap_durs;
};

struct stats {
  struct tally *tab; /* open addressing, a power of two */
  size_t cap, len;
};

/* A host call that overlaps an idle gap, summed per thread and name. */
struct gap_call {
  uint32_t tid;
  char *name;
  uint64_t overlap_ns;
};

struct gap {
  uint64_t start, end;
  struct gap_call *calls; /* per thread and call; largest first once the trace is read */
  size_t n_calls, cap_calls;
  uint64_t covered_ns; /* of the gap, under any host CUDA call */
  struct span *cover;  /* pass 2: the host calls' overlaps, to take their union */
  size_t n_cover, cap_cover;
};

struct gpu {
  int seen;
  char *name;
  /* The intervals of its kernels, copies and sets (SPAN_*), until the trace is read. */
  struct spans spans[SPAN_KINDS];
  uint64_t busy_ns, first_ns, last_ns;
  uint64_t copy_overlap_ns; /* copy time during which a kernel ran too */
  uint64_t kernels, kernel_ns, short_kernels, short_ns, copies, copy_ns, copy_bytes, sets, set_ns;
  uint64_t pageable_copies, pageable_ns, pageable_bytes; /* a side in pageable host memory */
  uint64_t mem_peak, mem_peak_ts, mem_samples;
  struct gap gaps[TOP_GAPS];
  int n_gaps;
};

/* A finished collective: function (an index into its comm's newest[]), number, kernel start. */
struct coll {
  int func;
  int64_t seq;
  uint64_t start_ns;
};

/* One rank's view of a communicator. NCCL numbers collectives per function (seq counts the
 * communicator's AllReduces, apart from its AllGathers, ...). */
#define COMM_FUNCS 16
#define COMM_P2P 64
#define LAUNCHED "launched, not finished"
struct comm {
  char *hash;
  int64_t rank, nranks;
  uint32_t device;
  uint64_t ops, bytes, time_ns;
  struct {
    char *func;
    int64_t seq;
  } newest[COMM_FUNCS]; /* the newest finished collective of each function */
  int n_newest;
  /* Pending at the capture's end (a hang): the oldest one, and how many. */
  uint64_t pending;
  char *pend_func, *pend_state;
  int64_t pend_seq;  /* -1: none (point-to-point operations have none) */
  int64_t pend_peer; /* Send/Recv: the other rank; -1: none */
  uint64_t pend_posted_ns;
  /* Pending sends and receives launched, by direction and peer (a send's matching receive is
   * on its peer: that is how a point-to-point hang's missing side is found). */
  struct {
    int send;
    int64_t peer;
  } p2p[COMM_P2P];
  int n_p2p;
  /* Finished collectives run one to a kernel: when each started, to compare ranks. */
  struct coll *colls;
  size_t n_colls, cap_colls;
};

struct trace {
  const char *path;
  int cut; /* the file ended early */
  json_object *meta;
  uint32_t pid;
  uint64_t start_ns, end_ns;
  int gpu_only;
  struct gpu gpus[MAX_GPUS];
  struct stats kernels, copies, api, syncs;
  struct stats nvtx; /* ranges by "<domain>: <name>" ("<name>" in the default domain) */
  struct {
    uint32_t tid;
    char *name;
  } * threads;
  size_t n_threads;
  struct comm *comms;
  size_t n_comms;
  uint64_t host_calls;
  int pass;
  /* --from/--to: offsets into the capture, and the absolute window they make (win_to
   * UINT64_MAX: to the end); everything is clipped to it. */
  uint64_t from_ns, to_ns;
  int windowed;
  uint64_t win_from, win_to;
  /* Pass 2: every GPU's gaps by start, and the latest end among the first i + 1. */
  struct gap **gap_index;
  uint64_t *gap_max_end;
  size_t n_gap_index;
};

static void *xrealloc(void *p, size_t n)
{
  void *q = realloc(p, n ? n : 1);

  if (!q) {
    fprintf(stderr, "gpuprof analyze: out of memory\n");
    exit(1);
  }
  return q;
}

static char *xstrdup(const char *s)
{
  char *d = strdup(s ? s : "");

  if (!d) {
    fprintf(stderr, "gpuprof analyze: out of memory\n");
    exit(1);
  }
  return d;
}

static struct tally *stats_get(struct stats *t, const char *name)
{
  size_t i;

  if ((t->len + 1) * 2 > t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 64;
    struct tally *nt = xrealloc(NULL, cap * sizeof(*nt));

    memset(nt, 0, cap * sizeof(*nt));
    for (size_t j = 0; j < t->cap; j++) {
      if (!t->tab[j].name)
        continue;
      for (i = hash_str(t->tab[j].name) & (cap - 1); nt[i].name; i = (i + 1) & (cap - 1)) {
      }
      nt[i] = t->tab[j];
    }
    free(t->tab);
    t->tab = nt;
    t->cap = cap;
  }
  for (i = hash_str(name) & (t->cap - 1); t->tab[i].name; i = (i + 1) & (t->cap - 1))
    if (!strcmp(t->tab[i].name, name))
      return &t->tab[i];
  t->tab[i].name = xstrdup(name);
  t->len++;
  return &t->tab[i];
}

static void stats_add(struct stats *t, const char *name, uint64_t dur, uint64_t bytes)
{
  struct tally *s = stats_get(t, name);

  s->count++;
  s->total_ns += dur;
  s->bytes += bytes;
  if (dur > s->max_ns)
    s->max_ns = dur;
}

/* An NVTX range: its time, and its duration kept for the percentiles. */
static void stats_add_range(struct stats *t, const char *name, uint64_t start, uint64_t dur)
{
  struct tally *s = stats_get(t, name);

  if (!s->count || dur > s->max_ns)
    s->max_start_ns = start;
  stats_add(t, name, dur, 0);
  if (s->n_durs == s->cap_durs) {
    s->cap_durs = s->cap_durs ? s->cap_durs * 2 : 64;
    s->durs = xrealloc(s->durs, s->cap_durs * sizeof(*s->durs));
  }
  s->durs[s->n_durs++] = dur;
}

static int by_total(const void *a, const void *b)
{
  const struct tally *x = a, *y = b;

  if (x->total_ns != y->total_ns)
    return x->total_ns < y->total_ns ? 1 : -1;
  return strcmp(x->name, y->name);
}

/* The entries, largest total first (a new array; the names stay the table's). */
static struct tally *stats_sorted(const struct stats *t)
{
  struct tally *v = xrealloc(NULL, t->len * sizeof(*v));
  size_t n = 0;

  for (size_t i = 0; i < t->cap; i++)
    if (t->tab[i].name)
      v[n++] = t->tab[i];
  qsort(v, n, sizeof(*v), by_total);
  return v;
}

static void stats_free(struct stats *t)
{
  for (size_t i = 0; i < t->cap; i++) {
    free(t->tab[i].name);
    free(t->tab[i].durs);
  }
  free(t->tab);
}

/* o[key] = v, for the report's objects. */
static void put_u64(json_object *o, const char *key, uint64_t v)
{
  json_object_object_add(o, key, json_object_new_uint64(v));
}

static void put_i64(json_object *o, const char *key, int64_t v)
{
  json_object_object_add(o, key, json_object_new_int64(v));
}

static void put_str(json_object *o, const char *key, const char *v)
{
  json_object_object_add(o, key, json_object_new_string(v));
}

static const char *fmt_ns(uint64_t ns, char *buf, size_t n)
{
  if (ns < 1000)
    snprintf(buf, n, "%" PRIu64 " ns", ns);
  else if (ns < 1000000)
    snprintf(buf, n, "%.1f us", (double)ns / 1e3);
  else if (ns < 1000000000)
    snprintf(buf, n, "%.2f ms", (double)ns / 1e6);
  else
    snprintf(buf, n, "%.3f s", (double)ns / 1e9);
  return buf;
}

static const char *fmt_bytes(uint64_t b, char *buf, size_t n)
{
  if (b < 1024)
    snprintf(buf, n, "%" PRIu64 " B", b);
  else if (b < (1ull << 20))
    snprintf(buf, n, "%.1f KiB", (double)b / 1024);
  else if (b < (1ull << 30))
    snprintf(buf, n, "%.1f MiB", (double)b / 1048576);
  else
    snprintf(buf, n, "%.2f GiB", (double)b / 1073741824);
  return buf;
}

static double pct(uint64_t part, uint64_t whole)
{
  return whole ? 100.0 * (double)part / (double)whole : 0.0;
}

static uint64_t arg_u(json_object *args, const char *key, uint64_t dflt)
{
  json_object *v;
  int64_t n;

  if (!args || !json_object_object_get_ex(args, key, &v) || tf_int_in(v, 0, INT64_MAX, &n))
    return dflt;
  return (uint64_t)n;
}

static const char *arg_s(json_object *args, const char *key)
{
  return args ? tf_str_of(args, key) : NULL;
}

static const char *thread_name(const struct trace *t, uint32_t tid, char *buf, size_t n)
{
  for (size_t i = 0; i < t->n_threads; i++)
    if (t->threads[i].tid == tid)
      return t->threads[i].name;
  snprintf(buf, n, "thread %" PRIu32, tid);
  return buf;
}

static void on_thread(void *ctx, uint32_t tid, const char *name)
{
  struct trace *t = ctx;

  for (size_t i = 0; i < t->n_threads; i++)
    if (t->threads[i].tid == tid) {
      free(t->threads[i].name);
      t->threads[i].name = xstrdup(name);
      return;
    }
  if (t->n_threads == MAX_THREAD_NAMES)
    return; /* past it, threads are shown by id (the list is searched linearly) */
  t->threads = xrealloc(t->threads, (t->n_threads + 1) * sizeof(*t->threads));
  t->threads[t->n_threads].tid = tid;
  t->threads[t->n_threads++].name = xstrdup(name);
}

static void on_device(void *ctx, uint32_t device, const char *name)
{
  struct trace *t = ctx;

  if (device >= MAX_GPUS)
    return;
  free(t->gpus[device].name);
  t->gpus[device].name = xstrdup(name);
}

static void on_meta(void *ctx, json_object *meta)
{
  struct trace *t = ctx;

  if (!t->meta)
    t->meta = json_object_get(meta);
}

/* Host calls that only wait for the GPU. */
static int is_sync(const char *name)
{
  return strstr(name, "Synchronize") != NULL || !strcmp(name, "cudaEventQuery") ||
         !strcmp(name, "cudaStreamQuery");
}

static struct comm *comm_of(struct trace *t, const char *hash, json_object *args, uint32_t dev)
{
  int64_t rank = (int64_t)arg_u(args, "rank", UINT64_MAX);
  struct comm *c;

  for (size_t i = 0; i < t->n_comms; i++)
    if (!strcmp(t->comms[i].hash, hash) && t->comms[i].rank == rank)
      return &t->comms[i];
  if (t->n_comms == TRACE_MAX_NCCL_COMMS)
    return NULL; /* more than a trace can hold: not the agent's */
  t->comms = xrealloc(t->comms, (t->n_comms + 1) * sizeof(*t->comms));
  c = &t->comms[t->n_comms++];
  memset(c, 0, sizeof(*c));
  c->hash = xstrdup(hash);
  c->rank = rank;
  c->nranks = (int64_t)arg_u(args, "nranks", 0);
  c->device = dev;
  c->pend_seq = -1;
  c->pend_peer = -1;
  return c;
}

/* The newest finished collective of func on c; -1: none. */
static int64_t newest_seq(const struct comm *c, const char *func)
{
  for (int i = 0; i < c->n_newest; i++)
    if (!strcmp(c->newest[i].func, func))
      return c->newest[i].seq;
  return -1;
}

/* A finished collective's start, for comparing the ranks' arrivals. Only those that ran a
 * kernel of their own: the operations of a group share one and are drawn as its slices. */
static void nccl_arrival(struct comm *c, const struct tr_event *e, int64_t seq)
{
  int f;

  if (arg_u(e->args, "group_ops", 1) > 1)
    return;
  for (f = 0; f < c->n_newest && strcmp(c->newest[f].func, e->name); f++) {
  }
  if (f == c->n_newest)
    return; /* more functions than COMM_FUNCS */
  if (c->n_colls == c->cap_colls) {
    c->cap_colls = c->cap_colls ? c->cap_colls * 2 : 64;
    c->colls = xrealloc(c->colls, c->cap_colls * sizeof(*c->colls));
  }
  c->colls[c->n_colls++] = (struct coll){f, seq, e->ts_ns};
}

static void nccl_event(struct trace *t, const struct tr_event *e)
{
  const char *hash = arg_s(e->args, "comm"), *state = arg_s(e->args, "state");
  uint64_t seq = arg_u(e->args, "seq", UINT64_MAX);
  struct comm *c;

  if (!hash)
    return;
  c = comm_of(t, hash, e->args, e->device);
  if (!c)
    return;
  if (state) {
    uint64_t posted = arg_u(e->args, "posted_ns", e->ts_ns);
    int64_t peer = (int64_t)arg_u(e->args, "peer", UINT64_MAX);
    int send = !strcmp(e->name, "Send");
    /* The oldest pending operation is the one the communicator is stuck in. */
    if (!c->pending || posted < c->pend_posted_ns) {
      free(c->pend_func);
      free(c->pend_state);
      c->pend_func = xstrdup(e->name);
      c->pend_state = xstrdup(state);
      c->pend_seq = seq == UINT64_MAX ? -1 : (int64_t)seq;
      c->pend_peer = peer;
      c->pend_posted_ns = posted;
    }
    c->pending++;
    if ((send || !strcmp(e->name, "Recv")) && peer >= 0 && !strcmp(state, LAUNCHED) &&
        c->n_p2p < COMM_P2P) {
      c->p2p[c->n_p2p].send = send;
      c->p2p[c->n_p2p++].peer = peer;
    }
    return;
  }
  c->ops++;
  c->bytes += arg_u(e->args, "bytes", 0);
  c->time_ns += e->dur_ns;
  if (seq == UINT64_MAX) /* point-to-point operations have none */
    return;
  for (int i = 0; i < c->n_newest; i++)
    if (!strcmp(c->newest[i].func, e->name)) {
      if ((int64_t)seq > c->newest[i].seq)
        c->newest[i].seq = (int64_t)seq;
      nccl_arrival(c, e, (int64_t)seq);
      return;
    }
  if (c->n_newest < COMM_FUNCS) {
    c->newest[c->n_newest].func = xstrdup(e->name);
    c->newest[c->n_newest++].seq = (int64_t)seq;
    nccl_arrival(c, e, (int64_t)seq);
  }
}

static void spans_add(struct spans *s, uint64_t start, uint64_t end)
{
  if (s->n == s->cap) {
    s->cap = s->cap ? s->cap * 2 : 1024;
    s->v = xrealloc(s->v, s->cap * sizeof(*s->v));
  }
  s->v[s->n++] = (struct span){start, end};
}

static void gpu_work(struct trace *t, const struct tr_event *e)
{
  struct gpu *g = &t->gpus[e->device];
  uint64_t end = e->ts_ns + e->dur_ns;

  if (!g->seen || e->ts_ns < g->first_ns)
    g->first_ns = e->ts_ns;
  if (!g->seen || end > g->last_ns)
    g->last_ns = end;
  g->seen = 1;
  if (!strcmp(e->cat, "kernel")) {
    spans_add(&g->spans[SPAN_KERNEL], e->ts_ns, end);
    g->kernels++;
    g->kernel_ns += e->dur_ns;
    if (e->dur_ns < SHORT_KERNEL_NS) {
      g->short_kernels++;
      g->short_ns += e->dur_ns;
    }
    stats_add(&t->kernels, e->name, e->dur_ns, 0);
  } else if (!strcmp(e->cat, "gpu_memcpy")) {
    uint64_t bytes = arg_u(e->args, "bytes", 0);
    const char *src = arg_s(e->args, "src_kind"), *dst = arg_s(e->args, "dst_kind");
    char label[160];

    spans_add(&g->spans[SPAN_COPY], e->ts_ns, end);
    g->copies++;
    g->copy_ns += e->dur_ns;
    g->copy_bytes += bytes;
    if ((src && !strcmp(src, "pageable")) || (dst && !strcmp(dst, "pageable"))) {
      g->pageable_copies++;
      g->pageable_ns += e->dur_ns;
      g->pageable_bytes += bytes;
    }
    /* By direction and, where the trace says, the memory of each side. */
    if (src && dst)
      snprintf(label, sizeof(label), "%s (%s to %s)", e->name, src, dst);
    else
      snprintf(label, sizeof(label), "%s", e->name);
    stats_add(&t->copies, label, e->dur_ns, bytes);
  } else {
    spans_add(&g->spans[SPAN_SET], e->ts_ns, end);
    g->sets++;
    g->set_ns += e->dur_ns;
  }
}

/* One host call's share of the gaps it overlaps. */
static void gap_add_call(struct gap *gp, const struct tr_event *e)
{
  uint64_t s = e->ts_ns > gp->start ? e->ts_ns : gp->start;
  uint64_t end = e->ts_ns + e->dur_ns < gp->end ? e->ts_ns + e->dur_ns : gp->end;
  size_t j;

  if (s >= end)
    return;
  if (gp->n_cover == gp->cap_cover) {
    gp->cap_cover = gp->cap_cover ? gp->cap_cover * 2 : 16;
    gp->cover = xrealloc(gp->cover, gp->cap_cover * sizeof(*gp->cover));
  }
  gp->cover[gp->n_cover++] = (struct span){s, end};
  /* A gap holds few distinct calls (threads x names): a list is enough. */
  for (j = 0; j < gp->n_calls; j++)
    if (gp->calls[j].tid == e->id && !strcmp(gp->calls[j].name, e->name))
      break;
  if (j == gp->n_calls) {
    if (gp->n_calls == gp->cap_calls) {
      gp->cap_calls = gp->cap_calls ? gp->cap_calls * 2 : 8;
      gp->calls = xrealloc(gp->calls, gp->cap_calls * sizeof(*gp->calls));
    }
    gp->calls[gp->n_calls++] = (struct gap_call){e->id, xstrdup(e->name), 0};
  }
  gp->calls[j].overlap_ns += end - s;
}

/* The gaps a host call overlaps, found through the index (gaps of different GPUs overlap each
 * other, so by start and by the latest end so far). */
static void gaps_add_call(struct trace *t, const struct tr_event *e)
{
  uint64_t end = e->ts_ns + e->dur_ns;
  size_t lo = 0, hi = t->n_gap_index;

  while (lo < hi) { /* the first gap whose running latest end is past the call's start */
    size_t mid = (lo + hi) / 2;
    if (t->gap_max_end[mid] > e->ts_ns)
      hi = mid;
    else
      lo = mid + 1;
  }
  for (size_t i = lo; i < t->n_gap_index && t->gap_index[i]->start < end; i++)
    gap_add_call(t->gap_index[i], e);
}

static int by_overlap(const void *a, const void *b)
{
  const struct gap_call *x = a, *y = b;

  if (x->overlap_ns != y->overlap_ns)
    return x->overlap_ns < y->overlap_ns ? 1 : -1;
  return strcmp(x->name, y->name);
}

static int by_gap_start(const void *a, const void *b)
{
  const struct gap *x = *(struct gap *const *)a, *y = *(struct gap *const *)b;

  return x->start < y->start ? -1 : x->start > y->start;
}

/* An NVTX range (push/pop on its thread, or start/end): its category is its domain. */
static void nvtx_range(struct trace *t, const struct tr_event *e)
{
  char label[512];

  if (!strcmp(e->cat, "nvtx"))
    snprintf(label, sizeof(label), "%s", e->name);
  else
    snprintf(label, sizeof(label), "%s: %s", e->cat, e->name);
  stats_add_range(&t->nvtx, label, e->ts_ns, e->dur_ns);
}

/* e clipped to the --from/--to window into c: 0 when nothing of it is inside. */
static int clip(const struct trace *t, const struct tr_event *e, struct tr_event *c)
{
  uint64_t end = e->ts_ns + e->dur_ns, s, en;

  if (!e->dur_ns) /* instants, counters, empty slices: inside when they start inside */
    return e->ts_ns >= t->win_from && e->ts_ns < t->win_to ? (*c = *e, 1) : 0;
  if (end <= t->win_from || e->ts_ns >= t->win_to)
    return 0;
  s = e->ts_ns > t->win_from ? e->ts_ns : t->win_from;
  en = end < t->win_to ? end : t->win_to;
  *c = *e;
  c->ts_ns = s;
  c->dur_ns = en - s;
  return 1;
}

static void on_event(void *ctx, const struct tr_event *ev)
{
  struct trace *t = ctx;
  struct tr_event clipped;
  const struct tr_event *e = ev;

  if ((e->track != TR_HOST_THREAD && e->track != TR_HOST_NVTX) && e->device >= MAX_GPUS)
    return;
  if (t->windowed) {
    if (!clip(t, ev, &clipped))
      return;
    e = &clipped;
  }
  if (t->pass == 2) {
    if (e->track == TR_HOST_THREAD && e->kind == TR_SLICE && !strcmp(e->cat, "cuda_api"))
      gaps_add_call(t, e);
    return;
  }
  switch (e->track) {
  case TR_HOST_NVTX:
  case TR_HOST_THREAD:
    if (e->kind != TR_SLICE)
      return; /* NVTX marks */
    if (strcmp(e->cat, "cuda_api")) {
      nvtx_range(t, e);
      return;
    }
    t->host_calls++;
    stats_add(&t->api, e->name, e->dur_ns, 0);
    if (is_sync(e->name))
      stats_add(&t->syncs, e->name, e->dur_ns, 0);
    return;
  case TR_GPU_STREAM:
    if (e->kind == TR_SLICE)
      gpu_work(t, e);
    return;
  case TR_GPU_NCCL:
    if (e->kind == TR_SLICE)
      nccl_event(t, e);
    return;
  case TR_GPU_MEMORY: {
    struct gpu *g = &t->gpus[e->device];
    if (!g->mem_samples++ || e->value > g->mem_peak) {
      g->mem_peak = e->value;
      g->mem_peak_ts = e->ts_ns;
    }
    return;
  }
  default:
    return;
  }
}

static int by_start(const void *a, const void *b)
{
  const struct span *x = a, *y = b;

  return x->start < y->start ? -1 : x->start > y->start;
}

/* Sorts and merges spans in place: their union as disjoint spans in time order; its length. */
static uint64_t spans_union(struct span *v, size_t *n)
{
  size_t out = 0;
  uint64_t total = 0;

  if (!*n)
    return 0; /* v may be NULL: qsort's is declared non-null */
  qsort(v, *n, sizeof(*v), by_start);
  for (size_t i = 0; i < *n; i++) {
    if (out && v[i].start <= v[out - 1].end) {
      if (v[i].end > v[out - 1].end)
        v[out - 1].end = v[i].end;
      continue;
    }
    v[out++] = v[i];
  }
  for (size_t i = 0; i < out; i++)
    total += v[i].end - v[i].start;
  *n = out;
  return total;
}

/* The length of the intersection of two unions (disjoint spans in time order). */
static uint64_t spans_overlap(const struct spans *a, const struct spans *b)
{
  uint64_t total = 0;
  size_t i = 0, j = 0;

  while (i < a->n && j < b->n) {
    uint64_t s = a->v[i].start > b->v[j].start ? a->v[i].start : b->v[j].start;
    uint64_t e = a->v[i].end < b->v[j].end ? a->v[i].end : b->v[j].end;
    if (s < e)
      total += e - s;
    if (a->v[i].end < b->v[j].end)
      i++;
    else
      j++;
  }
  return total;
}

/* Busy time, copy time under kernels, and the longest idle gaps between a GPU's first and last
 * work. */
static void gpu_finish(struct gpu *g)
{
  struct spans busy = {0};

  for (int k = 0; k < SPAN_KINDS; k++) {
    struct spans *s = &g->spans[k];
    spans_union(s->v, &s->n);
    for (size_t i = 0; i < s->n; i++)
      spans_add(&busy, s->v[i].start, s->v[i].end);
  }
  g->copy_overlap_ns = spans_overlap(&g->spans[SPAN_KERNEL], &g->spans[SPAN_COPY]);
  g->busy_ns = spans_union(busy.v, &busy.n);
  for (size_t i = 1; i < busy.n; i++) {
    struct gap gp = {.start = busy.v[i - 1].end, .end = busy.v[i].start};
    int k;

    if (g->n_gaps == TOP_GAPS &&
        g->gaps[TOP_GAPS - 1].end - g->gaps[TOP_GAPS - 1].start >= gp.end - gp.start)
      continue; /* not among the longest */
    k = g->n_gaps < TOP_GAPS ? g->n_gaps++ : TOP_GAPS - 1;
    g->gaps[k] = gp;
    for (; k > 0 && g->gaps[k].end - g->gaps[k].start > g->gaps[k - 1].end - g->gaps[k - 1].start;
         k--) {
      struct gap tmp = g->gaps[k];
      g->gaps[k] = g->gaps[k - 1];
      g->gaps[k - 1] = tmp;
    }
  }
  free(busy.v);
  for (int k = 0; k < SPAN_KINDS; k++) {
    free(g->spans[k].v);
    g->spans[k] = (struct spans){0};
  }
}

static uint64_t meta_u(json_object *meta, const char *key)
{
  return arg_u(meta, key, 0);
}

/* Reads one trace (both passes). 0, or an exit status. */
static int trace_load(struct trace *t)
{
  struct tr_sink sink = {
      .ctx = t, .meta = on_meta, .thread = on_thread, .device = on_device, .event = on_event};
  json_object *v;
  int rc;

  if (t->windowed) {
    /* The window is in offsets from the capture's start, which the metadata holds: one more
     * pass, of the names and metadata only ("\001" is no category). */
    struct tr_sink pre = {.ctx = t, .meta = on_meta, .only_cat = "\001"};
    uint64_t start;

    rc = trace_read(t->path, &pre);
    if (rc < 0)
      return rc == -EINVAL ? EXIT_BAD_INPUT : 1;
    start = meta_u(t->meta, "capture_start_ns");
    if (!start)
      start = meta_u(t->meta, "base_time_ns");
    json_object_put(t->meta);
    t->meta = NULL;
    t->win_from = start + t->from_ns;
    t->win_to = t->to_ns ? start + t->to_ns : UINT64_MAX;
  }
  t->pass = 1;
  rc = trace_read(t->path, &sink);
  if (rc < 0)
    return rc == -EINVAL ? EXIT_BAD_INPUT : 1;
  t->cut = rc == 1;
  if (t->meta && json_object_object_get_ex(t->meta, "merged_by", &v)) {
    tf_fail(t->path, "a merged trace: analyze the per-process traces it was merged from "
                     "(its metadata lists them under \"inputs\")");
    return EXIT_BAD_INPUT;
  }
  t->pid = (uint32_t)meta_u(t->meta, "pid");
  t->start_ns = meta_u(t->meta, "capture_start_ns");
  if (!t->start_ns)
    t->start_ns = meta_u(t->meta, "base_time_ns");
  t->end_ns = meta_u(t->meta, "capture_end_ns");
  t->gpu_only = meta_u(t->meta, "gpu_only") != 0;
  /* A cut capture has no start or end in its metadata: its GPU work bounds it. */
  for (size_t d = 0; d < MAX_GPUS; d++) {
    const struct gpu *g = &t->gpus[d];
    if (!g->seen)
      continue;
    if (!meta_u(t->meta, "capture_start_ns") && !meta_u(t->meta, "base_time_ns") &&
        (!t->start_ns || g->first_ns < t->start_ns))
      t->start_ns = g->first_ns;
    if (!meta_u(t->meta, "capture_end_ns") && g->last_ns > t->end_ns)
      t->end_ns = g->last_ns;
  }
  if (t->windowed) {
    if (t->win_from > t->start_ns)
      t->start_ns = t->win_from;
    if (t->win_to < t->end_ns)
      t->end_ns = t->win_to;
  }
  for (size_t d = 0; d < MAX_GPUS; d++)
    if (t->gpus[d].seen)
      gpu_finish(&t->gpus[d]);
  if (!t->host_calls)
    return 0;
  /* Pass 2: the host calls under the gaps. The file was read once already: an error now is
   * the file changing under us. */
  t->gap_index = xrealloc(NULL, MAX_GPUS * TOP_GAPS * sizeof(*t->gap_index));
  t->gap_max_end = xrealloc(NULL, MAX_GPUS * TOP_GAPS * sizeof(*t->gap_max_end));
  for (size_t d = 0; d < MAX_GPUS; d++)
    for (int k = 0; k < t->gpus[d].n_gaps; k++)
      t->gap_index[t->n_gap_index++] = &t->gpus[d].gaps[k];
  qsort(t->gap_index, t->n_gap_index, sizeof(*t->gap_index), by_gap_start);
  for (size_t i = 0; i < t->n_gap_index; i++)
    t->gap_max_end[i] = i && t->gap_max_end[i - 1] > t->gap_index[i]->end ? t->gap_max_end[i - 1]
                                                                          : t->gap_index[i]->end;
  t->pass = 2;
  sink.meta = NULL;
  sink.thread = NULL;
  sink.device = NULL;
  sink.only_cat = "cuda_api";
  rc = trace_read(t->path, &sink);
  if (rc < 0)
    return 1;
  for (size_t d = 0; d < MAX_GPUS; d++)
    for (int k = 0; k < t->gpus[d].n_gaps; k++) {
      struct gap *gp = &t->gpus[d].gaps[k];
      gp->covered_ns = spans_union(gp->cover, &gp->n_cover);
      free(gp->cover);
      gp->cover = NULL;
      if (gp->n_calls)
        qsort(gp->calls, gp->n_calls, sizeof(*gp->calls), by_overlap);
    }
  return 0;
}

static void trace_free(struct trace *t)
{
  for (size_t d = 0; d < MAX_GPUS; d++) {
    struct gpu *g = &t->gpus[d];
    free(g->name);
    for (int k = 0; k < SPAN_KINDS; k++)
      free(g->spans[k].v);
    for (int k = 0; k < TOP_GAPS; k++) {
      free(g->gaps[k].cover);
      for (size_t j = 0; j < g->gaps[k].n_calls; j++)
        free(g->gaps[k].calls[j].name);
      free(g->gaps[k].calls);
    }
  }
  free(t->gap_index);
  free(t->gap_max_end);
  stats_free(&t->kernels);
  stats_free(&t->copies);
  stats_free(&t->api);
  stats_free(&t->syncs);
  stats_free(&t->nvtx);
  for (size_t i = 0; i < t->n_threads; i++)
    free(t->threads[i].name);
  free(t->threads);
  for (size_t i = 0; i < t->n_comms; i++) {
    free(t->comms[i].hash);
    for (int k = 0; k < t->comms[i].n_newest; k++)
      free(t->comms[i].newest[k].func);
    free(t->comms[i].colls);
    free(t->comms[i].pend_func);
    free(t->comms[i].pend_state);
  }
  free(t->comms);
  json_object_put(t->meta);
}

/* ---- across ranks: a communicator's ranks compared ---- */

/* Appends to the string in buf (n bytes), cutting what does not fit. */
static void append(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void append(char *buf, size_t n, const char *fmt, ...)
{
  size_t len = strlen(buf);
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(buf + len, n - len, fmt, ap);
  va_end(ap);
}

/* " 1, 3" from a JSON array of ranks. */
static void append_ranks(char *buf, size_t n, json_object *ranks)
{
  for (size_t i = 0; i < json_object_array_length(ranks); i++)
    append(buf, n, "%s %" PRId64, i ? "," : "",
           json_object_get_int64(json_object_array_get_idx(ranks, i)));
}

/* A communicator as all the traces see it: one entry per rank found. */
struct rank_view {
  const struct trace *t;
  const struct comm *c;
};

/* How long the rank's oldest pending operation had been posted when its capture ended. */
static uint64_t pending_for(const struct rank_view *r)
{
  return r->t->end_ns > r->c->pend_posted_ns ? r->t->end_ns - r->c->pend_posted_ns : 0;
}

/* A rank inside a collective that does not finish. */
static int is_stuck(const struct comm *c)
{
  return c->pending && c->pend_seq >= 0 && !strcmp(c->pend_state, LAUNCHED);
}

/* A rank inside a send or receive that does not finish. */
static int is_stuck_p2p(const struct comm *c)
{
  return c->pending && c->pend_seq < 0 && c->pend_peer >= 0 && !strcmp(c->pend_state, LAUNCHED) &&
         (!strcmp(c->pend_func, "Send") || !strcmp(c->pend_func, "Recv"));
}

/* Whether c has launched the counterpart of a send (send = 1) or receive from rank peer. */
static int has_counterpart(const struct comm *c, int send, int64_t peer)
{
  for (int i = 0; i < c->n_p2p; i++)
    if (c->p2p[i].send != send && c->p2p[i].peer == peer)
      return 1;
  return 0;
}

/*
 * A point-to-point hang: a rank inside a Send (Recv) waits for its peer's matching Recv
 * (Send). The peer has no trace here, never posted it, or is inside it too (the transfer
 * itself is stuck). Each stuck rank's case in text and in the array's rows.
 */
static const char *p2p_verdict(const struct rank_view *v, size_t n, json_object *rows, char *text,
                               size_t tn)
{
  const char *verdict = NULL;
  char b1[32];

  for (size_t i = 0; i < n; i++) {
    const struct comm *c = v[i].c, *p = NULL;
    int send;
    const char *other, *why;
    json_object *row;

    if (!is_stuck_p2p(c))
      continue;
    send = !strcmp(c->pend_func, "Send");
    other = send ? "Recv" : "Send";
    for (size_t j = 0; j < n; j++)
      if (v[j].c->rank == c->pend_peer)
        p = v[j].c;
    if (!p)
      why = "no trace";
    else if (has_counterpart(p, send, c->rank))
      why = "inside it too";
    else
      why = "not posted";
    row = json_object_new_object();
    put_i64(row, "rank", c->rank);
    put_str(row, "func", c->pend_func);
    put_i64(row, "peer", c->pend_peer);
    put_str(row, "peer_state", why);
    put_u64(row, "waiting_ns", pending_for(&v[i]));
    json_object_array_add(rows, row);
    append(text, tn,
           "%sHANG: rank %" PRId64 " is inside %s %s rank %" PRId64
           " (posted %s before the capture ended)",
           text[0] ? "; " : "", c->rank, c->pend_func, send ? "to" : "from", c->pend_peer,
           fmt_ns(pending_for(&v[i]), b1, sizeof(b1)));
    if (!p) {
      append(text, tn, ", which has no trace here (the suspect)");
      verdict = verdict ? verdict : "hang: peer without trace";
    } else if (!strcmp(why, "inside it too")) {
      append(text, tn,
             ", which is inside the matching %s: the transfer itself is stuck (the "
             "network, a peer's GPU)",
             other);
      verdict = verdict ? verdict : "hang: transfer stuck";
    } else {
      append(text, tn, ", which never posted the matching %s", other);
      if (p->pending)
        append(text, tn, " (it is inside %s)", p->pend_func);
      verdict = "hang: peer never posted";
    }
  }
  return verdict;
}

/*
 * NCCL runs a communicator's collectives in the same order on every rank, numbered per
 * function. In a hang, the ranks inside collective (F, N) wait for the ranks that are not:
 * those whose newest finished F is below N and that are not inside (F, N) themselves (nothing
 * of it pending, or it "not launched": still inside a group). Such a rank that is stuck inside
 * another collective called them in another order. The stuck collective compared is the one
 * most ranks are inside (the newest, on a tie). Returns the comparison as JSON, and in text the
 * verdict (empty when no rank is stuck).
 */
static json_object *comm_verdict(const struct rank_view *v, size_t n, int64_t nranks, char *text,
                                 size_t tn)
{
  json_object *o = json_object_new_object(), *waiting = json_object_new_array(),
              *behind = json_object_new_array(), *elsewhere = json_object_new_array(),
              *missing = json_object_new_array();
  const struct comm *front = NULL;
  size_t front_n = 0;
  uint64_t waited = 0; /* the longest a waiting rank had been inside it */
  char b1[32];

  for (size_t i = 0; i < n; i++) {
    size_t same = 0;
    if (!is_stuck(v[i].c))
      continue;
    for (size_t j = 0; j < n; j++)
      same += is_stuck(v[j].c) && v[j].c->pend_seq == v[i].c->pend_seq &&
              !strcmp(v[j].c->pend_func, v[i].c->pend_func);
    if (same > front_n || (same == front_n && v[i].c->pend_seq > front->pend_seq)) {
      front = v[i].c;
      front_n = same;
    }
  }
  for (int64_t r = 0; r < nranks && nranks <= MAX_RANKS_LISTED; r++) {
    size_t i;
    for (i = 0; i < n && v[i].c->rank != r; i++) {
    }
    if (i == n)
      json_object_array_add(missing, json_object_new_int64(r));
  }
  text[0] = '\0';
  json_object_object_add(o, "ranks_without_trace", missing);
  if (!front) {
    json_object *rows = json_object_new_array();
    const char *verdict = p2p_verdict(v, n, rows, text, tn);
    put_str(o, "verdict", verdict ? verdict : "ok");
    if (verdict)
      json_object_object_add(o, "p2p", rows);
    else
      json_object_put(rows);
    json_object_put(waiting);
    json_object_put(behind);
    json_object_put(elsewhere);
    return o;
  }
  for (size_t i = 0; i < n; i++) {
    const struct comm *c = v[i].c;
    if (is_stuck(c) && c->pend_seq == front->pend_seq && !strcmp(c->pend_func, front->pend_func)) {
      json_object_array_add(waiting, json_object_new_int64(c->rank));
      if (pending_for(&v[i]) > waited)
        waited = pending_for(&v[i]);
    } else if (newest_seq(c, front->pend_func) >= front->pend_seq)
      continue; /* it finished that one */
    else if (is_stuck(c))
      json_object_array_add(elsewhere, json_object_new_int64(c->rank));
    else
      json_object_array_add(behind, json_object_new_int64(c->rank));
  }
  put_str(o, "func", front->pend_func);
  put_i64(o, "seq", front->pend_seq);
  put_u64(o, "waiting_ns", waited);
  json_object_object_add(o, "waiting_ranks", json_object_get(waiting));
  json_object_object_add(o, "behind_ranks", json_object_get(behind));
  json_object_object_add(o, "elsewhere_ranks", json_object_get(elsewhere));
  append(text, tn, "HANG: rank%s", front_n > 1 ? "s" : "");
  append_ranks(text, tn, waiting);
  append(text, tn, " %s inside %s seq %" PRId64 " (posted %s before the capture ended)",
         front_n > 1 ? "are" : "is", front->pend_func, front->pend_seq,
         fmt_ns(waited, b1, sizeof(b1)));
  if (json_object_array_length(behind) || json_object_array_length(elsewhere)) {
    append(text, tn, ", waiting for");
    if (json_object_array_length(behind)) {
      append(text, tn, " rank%s", json_object_array_length(behind) > 1 ? "s" : "");
      append_ranks(text, tn, behind);
      append(text, tn,
             ", which never got to it (their host stacks and tracks say where "
             "they are)");
    }
    if (json_object_array_length(elsewhere)) {
      append(text, tn, "%s rank%s", json_object_array_length(behind) ? "; and" : "",
             json_object_array_length(elsewhere) > 1 ? "s" : "");
      append_ranks(text, tn, elsewhere);
      append(text, tn,
             ", inside another collective: the ranks called their collectives in "
             "different orders");
    }
    json_object_object_add(o, "verdict",
                           json_object_new_string(json_object_array_length(elsewhere)
                                                      ? "hang: collective order differs"
                                                      : "hang: ranks behind"));
  } else if (json_object_array_length(missing)) {
    append(text, tn, "; the ranks without a trace here are the suspects");
    put_str(o, "verdict", "hang: ranks without trace");
  } else {
    append(text, tn,
           " and none finished it: the collective itself is stuck (the network, a "
           "peer's GPU)");
    put_str(o, "verdict", "hang: all ranks inside");
  }
  json_object_put(waiting);
  json_object_put(behind);
  json_object_put(elsewhere);
  return o;
}

/* Orders a rank's collectives (of comm c) by function name, then number. */
static int by_coll(const void *a, const void *b, void *c)
{
  const struct comm *comm = c;
  const struct coll *x = a, *y = b;
  int d = strcmp(comm->newest[x->func].func, comm->newest[y->func].func);

  if (d)
    return d;
  return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* The start of rank c's collective (func, seq); 0 when it has none (c->colls sorted). */
static uint64_t coll_start(const struct comm *c, const char *func, int64_t seq)
{
  size_t lo = 0, hi = c->n_colls;

  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    const struct coll *m = &c->colls[mid];
    int d = strcmp(c->newest[m->func].func, func);
    if (!d)
      d = m->seq < seq ? -1 : m->seq > seq;
    if (!d)
      return m->start_ns;
    if (d < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return 0;
}

/*
 * Arrivals: a collective's kernel starts on each rank when that rank launches it and waits
 * inside for the others, so for the collectives every rank here finished, the rank that
 * started last, and by how much, says who the others wait for (a straggler). Times are each
 * host's CLOCK_REALTIME: ranks on different hosts compare as well as their clocks agree.
 */
static json_object *comm_arrivals(struct rank_view *v, size_t n, char *text, size_t tn)
{
  json_object *o = json_object_new_object(), *ranks = json_object_new_array();
  uint64_t *last = calloc(n, sizeof(*last)), *late = calloc(n, sizeof(*late)), common = 0;
  uint64_t *starts = calloc(n, sizeof(*starts));
  size_t worst = 0;

  text[0] = '\0';
  if (!last || !late || !starts) {
    fprintf(stderr, "gpuprof analyze: out of memory\n");
    exit(1);
  }
  for (size_t i = 0; i < n; i++)
    if (v[i].c->n_colls)
      qsort_r(v[i].c->colls, v[i].c->n_colls, sizeof(struct coll), by_coll, (void *)v[i].c);
  for (size_t k = 0; n > 1 && k < v[0].c->n_colls; k++) {
    const struct coll *op = &v[0].c->colls[k];
    const char *func = v[0].c->newest[op->func].func;
    uint64_t first = UINT64_MAX, latest = 0;
    size_t i, who = 0;

    for (i = 0; i < n; i++) {
      starts[i] = coll_start(v[i].c, func, op->seq);
      if (!starts[i])
        break;
      if (starts[i] < first)
        first = starts[i];
      if (starts[i] > latest) {
        latest = starts[i];
        who = i;
      }
    }
    if (i < n)
      continue; /* not finished on every rank here */
    common++;
    last[who]++;
    for (i = 0; i < n; i++)
      late[i] += starts[i] - first;
  }
  for (size_t i = 0; i < n; i++) {
    json_object *r = json_object_new_object();
    put_i64(r, "rank", v[i].c->rank);
    put_u64(r, "started_last", last[i]);
    json_object_object_add(r, "mean_late_ns",
                           json_object_new_uint64(common ? late[i] / common : 0));
    json_object_array_add(ranks, r);
    if (last[i] > last[worst])
      worst = i;
  }
  put_u64(o, "collectives", common);
  json_object_object_add(o, "ranks", ranks);
  /* A straggler: last in most of enough collectives, by more than launch jitter. */
  if (common >= 10 && last[worst] * 2 > common && late[worst] / common >= 50000) {
    char b1[32];
    snprintf(text, tn,
             "NCCL comm %s: rank %" PRId64 " started last in %" PRIu64 " of %" PRIu64
             " collectives, %s after the first rank on average: the other ranks wait for it "
             "inside them (its host calls and GPU work before each say why)",
             v[worst].c->hash, v[worst].c->rank, last[worst], common,
             fmt_ns(late[worst] / common, b1, sizeof(b1)));
    put_i64(o, "straggler", v[worst].c->rank);
  }
  free(last);
  free(late);
  free(starts);
  return o;
}

/* ---- output ---- */

static json_object *stat_json(const struct tally *s)
{
  json_object *o = json_object_new_object();

  put_str(o, "name", s->name);
  put_u64(o, "count", s->count);
  put_u64(o, "total_ns", s->total_ns);
  put_u64(o, "max_ns", s->max_ns);
  if (s->bytes)
    put_u64(o, "bytes", s->bytes);
  return o;
}

/* A table of the largest rows, on stdout and into a JSON array. */
static json_object *stats_report(FILE *out, const struct stats *t, const char *title,
                                 uint64_t whole, size_t rows)
{
  struct tally *v = stats_sorted(t);
  json_object *a = json_object_new_array();
  char b1[32], b2[32], b3[32];

  if (t->len && out)
    fprintf(out, "  %s:\n", title);
  for (size_t i = 0; i < t->len; i++) {
    if (i < rows && out) {
      fprintf(out, "    %9s %5.1f%%  %7" PRIu64 "x  avg %9s  max %9s",
              fmt_ns(v[i].total_ns, b1, 32), pct(v[i].total_ns, whole), v[i].count,
              fmt_ns(v[i].total_ns / v[i].count, b2, 32), fmt_ns(v[i].max_ns, b3, 32));
      if (v[i].bytes)
        fprintf(out, "  %s at %.1f GB/s", fmt_bytes(v[i].bytes, b1, 32),
                v[i].total_ns ? (double)v[i].bytes / (double)v[i].total_ns : 0.0);
      fprintf(out, "  %s\n", v[i].name);
    }
    json_object_array_add(a, stat_json(&v[i]));
  }
  if (t->len > rows && out)
    fprintf(out, "    ... %zu more\n", t->len - rows);
  free(v);
  return a;
}

/* A finding into list (and on out unless NULL); the new object, for callers to add to. */
static json_object *finding(FILE *out, json_object *list, const char *kind, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static json_object *finding(FILE *out, json_object *list, const char *kind, const char *fmt, ...)
{
  char text[1024];
  va_list ap;
  json_object *o = json_object_new_object();

  va_start(ap, fmt);
  vsnprintf(text, sizeof(text), fmt, ap);
  va_end(ap);
  if (out)
    fprintf(out, "  * %s\n", text);
  put_str(o, "kind", kind);
  put_str(o, "text", text);
  json_object_array_add(list, o);
  return o;
}

/* ts as an offset into the capture (0 for anything before its start). */
static uint64_t since_start(const struct trace *t, uint64_t ts)
{
  return ts > t->start_ns ? ts - t->start_ns : 0;
}

static int by_u64(const void *a, const void *b)
{
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

  return x < y ? -1 : x > y;
}

/*
 * NVTX ranges by total time, with the median, p99 and longest of each name: a step that is
 * sometimes much slower than usual is a latency spike, and the slowest one's time says where
 * in the trace to look.
 */
static json_object *nvtx_report(FILE *out, const struct trace *t, json_object *findings)
{
  struct tally *v = stats_sorted(&t->nvtx);
  json_object *a = json_object_new_array();
  char b1[32], b2[32], b3[32], b4[32], b5[32];

  if (t->nvtx.len && out)
    fprintf(out, "  NVTX ranges by total time:\n");
  for (size_t i = 0; i < t->nvtx.len; i++) {
    struct tally *s = &v[i]; /* a copy of the table's entry: its durations are the table's */
    uint64_t median, p99, at = since_start(t, s->max_start_ns);
    json_object *o = stat_json(s);

    qsort(s->durs, s->n_durs, sizeof(*s->durs), by_u64);
    median = s->durs[(s->n_durs - 1) / 2];
    p99 = s->durs[(s->n_durs - 1) * 99 / 100];
    put_u64(o, "median_ns", median);
    put_u64(o, "p99_ns", p99);
    put_u64(o, "max_start_ns", s->max_start_ns);
    json_object_array_add(a, o);
    if (out && i < TOP_ROWS)
      fprintf(out, "    %9s  %7" PRIu64 "x  median %9s  p99 %9s  max %9s at +%s  %s\n",
              fmt_ns(s->total_ns, b1, 32), s->count, fmt_ns(median, b2, 32), fmt_ns(p99, b3, 32),
              fmt_ns(s->max_ns, b4, 32), fmt_ns(at, b5, 32), s->name);
    if (s->count >= 10 && s->max_ns >= 3 * median && s->max_ns - median >= 1000000)
      finding(out, findings, "slow_range",
              "NVTX %s: the slowest of %" PRIu64 " took %s at +%s, %.1fx the median %s: a "
              "latency spike; the trace at that time shows what ran in it",
              s->name, s->count, fmt_ns(s->max_ns, b1, 32), fmt_ns(at, b2, 32),
              median ? (double)s->max_ns / (double)median : 0.0, fmt_ns(median, b3, 32));
  }
  if (t->nvtx.len > TOP_ROWS && out)
    fprintf(out, "    ... %zu more\n", t->nvtx.len - TOP_ROWS);
  free(v);
  return a;
}

static json_object *gpu_report(FILE *out, const struct trace *t, uint32_t d, json_object *findings)
{
  const struct gpu *g = &t->gpus[d];
  uint64_t window = since_start(t, t->end_ns);
  json_object *o = json_object_new_object(), *gaps = json_object_new_array();
  char b1[32], b2[32], b3[32], tn[64];
  int hung = 0;

  put_i64(o, "device", d);
  put_str(o, "name", g->name ? g->name : "");
  put_u64(o, "busy_ns", g->busy_ns);
  put_u64(o, "kernels", g->kernels);
  put_u64(o, "kernel_ns", g->kernel_ns);
  put_u64(o, "short_kernels", g->short_kernels);
  put_u64(o, "short_kernel_ns", g->short_ns);
  put_u64(o, "copies", g->copies);
  put_u64(o, "copy_ns", g->copy_ns);
  put_u64(o, "copy_bytes", g->copy_bytes);
  put_u64(o, "copy_overlap_ns", g->copy_overlap_ns);
  put_u64(o, "pageable_copies", g->pageable_copies);
  put_u64(o, "pageable_copy_ns", g->pageable_ns);
  put_u64(o, "pageable_copy_bytes", g->pageable_bytes);
  put_u64(o, "sets", g->sets);
  put_u64(o, "set_ns", g->set_ns);
  if (g->mem_samples) {
    put_u64(o, "memory_peak_bytes", g->mem_peak);
    put_u64(o, "memory_peak_ns", g->mem_peak_ts);
  }
  if (out) {
    fprintf(out,
            "  %s: busy %s of %s (%.1f%%): %" PRIu64 " kernels %s, %" PRIu64 " copies %s, %" PRIu64
            " sets\n",
            g->name ? g->name : "GPU", fmt_ns(g->busy_ns, b1, 32), fmt_ns(window, b2, 32),
            pct(g->busy_ns, window), g->kernels, fmt_ns(g->kernel_ns, b3, 32), g->copies,
            fmt_ns(g->copy_ns, tn, 32), g->sets);
    if (g->mem_samples)
      fprintf(out, "    GPU memory in use: peak %s at +%s\n", fmt_bytes(g->mem_peak, b1, 32),
              fmt_ns(since_start(t, g->mem_peak_ts), b2, 32));
  }
  for (int k = 0; k < g->n_gaps; k++) {
    const struct gap *gp = &g->gaps[k];
    json_object *go = json_object_new_object(), *calls = json_object_new_array();
    uint64_t len = gp->end - gp->start;

    put_u64(go, "start_ns", gp->start);
    put_u64(go, "dur_ns", len);
    put_u64(go, "host_cuda_ns", gp->covered_ns);
    if (out)
      fprintf(out, "    idle %s at +%s:", fmt_ns(len, b1, 32),
              fmt_ns(since_start(t, gp->start), b2, 32));
    for (size_t j = 0; j < GAP_CALLS && j < gp->n_calls; j++) {
      json_object *c;
      if (gp->calls[j].overlap_ns * 100 < len)
        break; /* under 1% of the gap: the edges of the calls around it */
      c = json_object_new_object();
      put_i64(c, "tid", gp->calls[j].tid);
      json_object_object_add(
          c, "thread", json_object_new_string(thread_name(t, gp->calls[j].tid, tn, sizeof(tn))));
      put_str(c, "name", gp->calls[j].name);
      put_u64(c, "overlap_ns", gp->calls[j].overlap_ns);
      json_object_array_add(calls, c);
      if (out)
        fprintf(out, "%s %s in %s %.0f%%", j ? "," : " host",
                thread_name(t, gp->calls[j].tid, tn, sizeof(tn)), gp->calls[j].name,
                pct(gp->calls[j].overlap_ns, len));
    }
    if (out) {
      if (t->gpu_only)
        fprintf(out, " (GPU-only capture: host calls not recorded)\n");
      else if (!gp->n_calls || gp->calls[0].overlap_ns * 100 < len)
        fprintf(out, " no CUDA call on any host thread for %.0f%% of it\n",
                pct(len - gp->covered_ns, len));
      else
        fprintf(out, "; no CUDA call for %.0f%%\n", pct(len - gp->covered_ns, len));
    }
    json_object_object_add(go, "host_calls", calls);
    json_object_array_add(gaps, go);
  }
  json_object_object_add(o, "idle_gaps", gaps);

  /* Findings: thresholds where the advice changes. A GPU inside a hung NCCL kernel is busy,
   * but that kernel has no record to show it: it is not called idle. */
  for (size_t i = 0; i < t->n_comms && !hung; i++)
    hung =
        t->comms[i].device == d && t->comms[i].pending && !strcmp(t->comms[i].pend_state, LAUNCHED);
  if (window && g->kernels && !hung && pct(g->busy_ns, window) < 50.0)
    finding(out, findings, "gpu_idle", "GPU %" PRIu32 " was idle %.1f%% of the capture", d,
            100.0 - pct(g->busy_ns, window));
  if (g->n_gaps && !t->gpu_only && g->gaps[0].end - g->gaps[0].start >= window / 20 && window) {
    const struct gap *gp = &g->gaps[0];
    uint64_t len = gp->end - gp->start;
    if (gp->n_calls && is_sync(gp->calls[0].name) && pct(gp->calls[0].overlap_ns, len) >= 50)
      finding(out, findings, "sync_stall",
              "GPU %" PRIu32 "'s longest idle gap (%s) is spent with %s waiting in %s: "
              "the host waits on work that is not on this GPU",
              d, fmt_ns(len, b1, 32), thread_name(t, gp->calls[0].tid, tn, sizeof(tn)),
              gp->calls[0].name);
    else if (gp->n_calls && pct(gp->calls[0].overlap_ns, len) >= 50)
      finding(out, findings, "host_call_stall",
              "GPU %" PRIu32 "'s longest idle gap (%s) is spent with %s in %s", d,
              fmt_ns(len, b1, 32), thread_name(t, gp->calls[0].tid, tn, sizeof(tn)),
              gp->calls[0].name);
    else if (pct(gp->covered_ns, len) < 50)
      finding(out, findings, "host_bound",
              "GPU %" PRIu32 "'s longest idle gap (%s) has no CUDA call for %.0f%% of it: "
              "the host was busy elsewhere (Python, data loading, the CPU profile says where)",
              d, fmt_ns(len, b1, 32), pct(len - gp->covered_ns, len));
  }
  if (g->kernels >= 100 && pct(g->short_kernels, g->kernels) >= 50.0)
    finding(out, findings, "short_kernels",
            "%.0f%% of GPU %" PRIu32 "'s kernels (%" PRIu64 ") ran under %u us: launch overhead "
            "bounds them (CUDA graphs, fusion, larger batches)",
            pct(g->short_kernels, g->kernels), d, g->short_kernels, SHORT_KERNEL_NS / 1000);
  if (g->pageable_bytes >= (1u << 20))
    finding(out, findings, "pageable_copies",
            "GPU %" PRIu32 ": %" PRIu64 " copies (%s) to or from pageable host memory, at %.1f "
            "GB/s: the driver stages them through a pinned buffer while the calling thread "
            "waits; pinned host memory (cudaHostAlloc, PyTorch pin_memory=True) copies faster "
            "and asynchronously",
            d, g->pageable_copies, fmt_bytes(g->pageable_bytes, b1, 32),
            g->pageable_ns ? (double)g->pageable_bytes / (double)g->pageable_ns : 0.0);
  /* Copies that never run beside a kernel make the GPU wait for them. */
  if (g->kernels && g->busy_ns && pct(g->copy_ns, g->busy_ns) >= 20.0 &&
      pct(g->copy_overlap_ns, g->copy_ns) < 10.0)
    finding(out, findings, "copies_serialized",
            "GPU %" PRIu32 ": copies take %.0f%% of its busy time and %.0f%% of them ran beside a "
            "kernel: copies on their own stream (cudaMemcpyAsync from pinned memory) would hide "
            "behind the compute",
            d, pct(g->copy_ns, g->busy_ns), pct(g->copy_overlap_ns, g->copy_ns));
  if (g->busy_ns && pct(g->copy_ns, g->copy_ns + g->kernel_ns) >= 30.0)
    finding(out, findings, "copy_bound",
            "copies take %.0f%% of GPU %" PRIu32 "'s work time (%s moved)",
            pct(g->copy_ns, g->copy_ns + g->kernel_ns), d, fmt_bytes(g->copy_bytes, b1, 32));
  return o;
}

static json_object *comms_json(const struct trace *t)
{
  json_object *a = json_object_new_array();

  for (size_t i = 0; i < t->n_comms; i++) {
    const struct comm *c = &t->comms[i];
    json_object *o = json_object_new_object();

    put_str(o, "comm", c->hash);
    put_i64(o, "rank", c->rank);
    put_i64(o, "nranks", c->nranks);
    put_i64(o, "device", c->device);
    put_u64(o, "ops", c->ops);
    put_u64(o, "bytes", c->bytes);
    put_u64(o, "time_ns", c->time_ns);
    json_object *newest = json_object_new_object();
    for (int k = 0; k < c->n_newest; k++)
      json_object_object_add(newest, c->newest[k].func, json_object_new_int64(c->newest[k].seq));
    json_object_object_add(o, "newest_seq", newest);
    put_u64(o, "pending", c->pending);
    if (c->pending) {
      put_str(o, "pending_func", c->pend_func);
      put_str(o, "pending_state", c->pend_state);
      put_i64(o, "pending_seq", c->pend_seq);
      if (c->pend_peer >= 0)
        put_i64(o, "pending_peer", c->pend_peer);
      put_u64(o, "pending_posted_ns", c->pend_posted_ns);
    }
    json_object_array_add(a, o);
  }
  return a;
}

static json_object *trace_report(FILE *out, const struct trace *t, json_object *findings)
{
  json_object *o = json_object_new_object(), *gpus = json_object_new_array();
  uint64_t window = since_start(t, t->end_ns), kernel_ns = 0, copy_ns = 0;
  const char *pname = tf_str_of(t->meta, "process_name");
  const char *host = tf_str_of(t->meta, "hostname");
  uint64_t dropped = meta_u(t->meta, "dropped_records"),
           dropped_api = meta_u(t->meta, "dropped_api_calls"), sync_ns = 0;
  char b1[32];

  put_str(o, "file", t->path);
  put_i64(o, "pid", t->pid);
  put_str(o, "process_name", pname ? pname : "");
  put_str(o, "hostname", host ? host : "");
  put_u64(o, "capture_start_ns", t->start_ns);
  put_u64(o, "capture_ns", window);
  if (t->windowed) { /* capture_start_ns and capture_ns are the window's then */
    put_u64(o, "from_ns", t->from_ns);
    put_u64(o, "to_ns", t->to_ns);
  }
  json_object_object_add(o, "gpu_only", json_object_new_boolean(t->gpu_only));
  json_object_object_add(o, "cut", json_object_new_boolean(t->cut));
  put_u64(o, "dropped_records", dropped);
  put_u64(o, "dropped_api_calls", dropped_api);
  if (out)
    fprintf(out, "\n%s\n  %s on %s, %s of %s%s%s\n", t->path, pname ? pname : "process",
            host ? host : "?", t->windowed ? "window" : "capture", fmt_ns(window, b1, 32),
            t->gpu_only ? ", GPU-only" : "",
            t->cut ? ", cut short (the process was killed during the capture?)" : "");
  if (dropped || dropped_api)
    finding(out, findings, "data_lost",
            "%" PRIu64 " GPU records and %" PRIu64 " API calls were lost during the capture: "
            "totals below are low (docs/TRACES.md)",
            dropped, dropped_api);
  if (tf_str_of(t->meta, "truncated"))
    finding(out, findings, "truncated",
            "the capture reached its size cap (%" PRIu64 " bytes): the %" PRIu64
            " events after that were not written (GPUPROF_TRACE_MAX_SIZE)",
            meta_u(t->meta, "size_cap_bytes"), meta_u(t->meta, "discarded_events"));
  for (size_t i = 0; i < t->syncs.cap; i++)
    sync_ns += t->syncs.tab[i].name ? t->syncs.tab[i].total_ns : 0;
  for (uint32_t d = 0; d < MAX_GPUS; d++)
    if (t->gpus[d].seen || t->gpus[d].mem_samples) {
      json_object_array_add(gpus, gpu_report(out, t, d, findings));
      kernel_ns += t->gpus[d].kernel_ns;
      copy_ns += t->gpus[d].copy_ns;
    }
  json_object_object_add(o, "gpus", gpus);
  json_object_object_add(
      o, "kernels", stats_report(out, &t->kernels, "kernels by GPU time", kernel_ns, TOP_ROWS));
  json_object_object_add(o, "copies",
                         stats_report(out, &t->copies, "copies by GPU time", copy_ns, TOP_ROWS));
  json_object_object_add(o, "api_calls",
                         stats_report(out, &t->api, "CUDA calls by host time", window, TOP_ROWS));
  json_object_object_add(o, "sync_calls", stats_report(NULL, &t->syncs, "", window, 0));
  json_object_object_add(o, "nvtx_ranges", nvtx_report(out, t, findings));
  put_u64(o, "sync_ns", sync_ns);
  if (window && pct(sync_ns, window) >= 20.0)
    finding(out, findings, "sync_heavy",
            "host threads spent %s (%.0f%% of the capture) in synchronize calls",
            fmt_ns(sync_ns, b1, 32), pct(sync_ns, window));
  json_object_object_add(o, "nccl", comms_json(t));
  return o;
}

/* One communicator's ranks as the traces show them. */
static void comm_print(FILE *out, const struct rank_view *v, size_t nv, int64_t nranks)
{
  char b1[32];

  fprintf(out, "\nNCCL comm %s: %zu of %" PRId64 " ranks in these traces\n", v[0].c->hash, nv,
          nranks);
  for (size_t k = 0; k < nv; k++) {
    const struct comm *r = v[k].c;
    fprintf(out, "  rank %" PRId64 " (%s, GPU %" PRIu32 "): %" PRIu64 " ops, %s", r->rank,
            v[k].t->path, r->device, r->ops, fmt_ns(r->time_ns, b1, sizeof(b1)));
    for (int f = 0; f < r->n_newest; f++)
      fprintf(out, "%s%s seq %" PRId64, f ? ", " : "; newest finished: ", r->newest[f].func,
              r->newest[f].seq);
    if (r->pending && r->pend_seq >= 0)
      fprintf(out, "; pending: %s seq %" PRId64 " (%s)", r->pend_func, r->pend_seq, r->pend_state);
    else if (r->pending && r->pend_peer >= 0)
      fprintf(out, "; pending: %s %s rank %" PRId64 " (%s)", r->pend_func,
              strcmp(r->pend_func, "Send") ? "from" : "to", r->pend_peer, r->pend_state);
    else if (r->pending)
      fprintf(out, "; pending: %s (%s)", r->pend_func, r->pend_state);
    if (r->pending > 1)
      fprintf(out, " and %" PRIu64 " more queued", r->pending - 1);
    fputc('\n', out);
  }
}

/* The communicators of all the traces, each compared across the ranks that have it (matched
 * by hash, in order of first appearance). */
static json_object *comms_report(FILE *out, struct trace *traces, size_t n, json_object *findings)
{
  json_object *comms = json_object_new_array();

  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < traces[i].n_comms; j++) {
      const char *hash = traces[i].comms[j].hash;
      struct rank_view *v = NULL;
      size_t nv = 0, first = 1;
      int64_t nranks = 0;
      char hang[1024], slow[512];
      json_object *co;

      for (size_t a = 0; a <= i && first; a++)
        for (size_t b = 0; b < traces[a].n_comms && first; b++)
          if ((a < i || b < j) && !strcmp(traces[a].comms[b].hash, hash))
            first = 0;
      if (!first)
        continue;
      for (size_t a = 0; a < n; a++)
        for (size_t b = 0; b < traces[a].n_comms; b++) {
          const struct comm *c = &traces[a].comms[b];
          size_t k;
          if (strcmp(c->hash, hash))
            continue;
          if (c->nranks > nranks)
            nranks = c->nranks;
          /* One view per rank: of several captures of it, the latest. */
          for (k = 0; k < nv && v[k].c->rank != c->rank; k++) {
          }
          if (k < nv) {
            if (traces[a].end_ns > v[k].t->end_ns)
              v[k] = (struct rank_view){&traces[a], c};
            continue;
          }
          v = xrealloc(v, (nv + 1) * sizeof(*v));
          v[nv++] = (struct rank_view){&traces[a], c};
        }
      co = json_object_new_object();
      put_str(co, "comm", hash);
      put_i64(co, "nranks", nranks);
      put_i64(co, "ranks_seen", (int64_t)nv);
      json_object_object_add(co, "analysis", comm_verdict(v, nv, nranks, hang, sizeof(hang)));
      json_object_object_add(co, "arrivals", comm_arrivals(v, nv, slow, sizeof(slow)));
      if (out) {
        comm_print(out, v, nv, nranks);
        if (hang[0])
          fprintf(out, "  %s\n", hang);
        if (slow[0])
          fprintf(out, "  %s\n", slow);
      }
      if (hang[0])
        put_str(finding(NULL, findings, "nccl_hang", "%s", hang), "comm", hash);
      if (slow[0])
        put_str(finding(NULL, findings, "nccl_straggler", "%s", slow), "comm", hash);
      json_object_array_add(comms, co);
      free(v);
    }
  return comms;
}

static int is_trace_name(const char *path)
{
  static const char *const suffixes[] = {".json", ".json.gz", ".pftrace"};
  size_t n = strlen(path);

  for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
    size_t k = strlen(suffixes[i]);
    if (n > k && !strcmp(path + n - k, suffixes[i]))
      return 1;
  }
  return 0;
}

/* Appends a copy of path to *v (*n entries). */
static void paths_add(char ***v, size_t *n, const char *path)
{
  *v = xrealloc(*v, (*n + 1) * sizeof(**v));
  (*v)[(*n)++] = xstrdup(path);
}

/*
 * The traces named on the command line, in order, into *v (*n of them, copies), a directory
 * standing for the capture traces in it (gpuprof-*-capture*.json, .json.gz, .pftrace, as
 * captures name them: what `gpuprof capture --all --output DIR` wrote). 0, or an exit status
 * (reported).
 */
static int expand_inputs(int argc, char **argv, char ***v, size_t *n)
{
  for (int i = 0; i < argc; i++) {
    struct stat st;
    char pattern[PATH_MAX];
    glob_t g;
    size_t before = *n;
    int rc;

    if (stat(argv[i], &st) || !S_ISDIR(st.st_mode)) {
      paths_add(v, n, argv[i]); /* a file (or nothing there: trace_read says so) */
      continue;
    }
    if ((size_t)snprintf(pattern, sizeof(pattern), "%s/gpuprof-*-capture*", argv[i]) >=
        sizeof(pattern))
      return tf_fail(argv[i], "path too long"), 2;
    rc = glob(pattern, 0, NULL, &g);
    if (rc == GLOB_NOSPACE)
      return tf_io_fail(argv[i], "cannot list", ENOMEM), 1;
    /* Only the traces: the capture's profiles (.pb.gz) share its name stem. */
    for (size_t k = 0; rc == 0 && k < g.gl_pathc; k++)
      if (is_trace_name(g.gl_pathv[k]))
        paths_add(v, n, g.gl_pathv[k]);
    if (rc != GLOB_NOMATCH)
      globfree(&g);
    if (*n == before)
      return tf_fail(argv[i], "a directory without gpuprof capture traces "
                              "(gpuprof-*-capture*.json, .json.gz, .pftrace)"),
             2;
  }
  return 0;
}

static void usage(FILE *f)
{
  fprintf(f, "usage: gpuprof analyze [--json FILE|-] [--from T] [--to T] TRACE|DIR...\n"
             "  Reads capture traces (.json, .json.gz, .pftrace; one per process, e.g. every rank\n"
             "  of a job) and reports per GPU busy time, the longest idle gaps and the host calls\n"
             "  in them, the kernels, copies and CUDA calls that took the most time, NVTX ranges\n"
             "  and their spikes, and NCCL communicators compared across ranks (which rank a hang\n"
             "  waits for, which rank the others wait for). docs/ANALYZE.md\n"
             "  A directory stands for the capture traces in it (gpuprof capture --output DIR).\n"
             "  --json FILE  also write the report as JSON (- for stdout, instead of the text)\n"
             "  --from T, --to T  only this part of each capture (offsets from its start, e.g.\n"
             "               --from 41ms --to 84ms: a spike the report pointed at)\n");
}

int cmd_analyze(int argc, char **argv)
{
  static const struct option longopts[] = {{"json", required_argument, NULL, 'j'},
                                           {"from", required_argument, NULL, 'f'},
                                           {"to", required_argument, NULL, 't'},
                                           {"help", no_argument, NULL, 'h'},
                                           {0, 0, 0, 0}};
  uint64_t from_ns = 0, to_ns = 0;
  int windowed = 0;
  char **paths = NULL;
  size_t n_paths = 0;
  const char *json_path = NULL;
  struct trace *traces;
  json_object *report = NULL, *list, *findings, *comms;
  FILE *out = stdout;
  size_t n = 0;
  int rc = 0, c;

  tf_prog = "gpuprof analyze";
  /* getopt_long from "analyze" on (argv[-1]: the caller passes what follows it); its own
   * messages off, ours name the command. */
  opterr = 0;
  optind = 1;
  while ((c = getopt_long(argc + 1, argv - 1, "hj:", longopts, NULL)) != -1) {
    if (c == 'h') {
      usage(stdout);
      return 0;
    }
    if (c == 'j') {
      json_path = optarg;
      continue;
    }
    if (c == 'f' || c == 't') {
      uint64_t *v = c == 'f' ? &from_ns : &to_ns;
      if (client_parse_duration(optarg, v)) {
        fprintf(stderr,
                "gpuprof analyze: --%s %s is not a duration (an offset into the capture: "
                "500ms, 41090us, 2s)\n",
                c == 'f' ? "from" : "to", optarg);
        return 2;
      }
      windowed = 1;
      continue;
    }
    if (optopt == 'j' || optopt == 'f' || optopt == 't')
      fprintf(stderr, "gpuprof analyze: --%s needs a value\n",
              optopt == 'j'   ? "json"
              : optopt == 'f' ? "from"
                              : "to");
    else
      fprintf(stderr, "gpuprof analyze: unknown option %s\n", argv[optind - 2]);
    usage(stderr);
    return 2;
  }
  if (windowed && to_ns && to_ns <= from_ns) {
    fprintf(stderr, "gpuprof analyze: --to must be after --from\n");
    return 2;
  }
  if (optind > argc) {
    fprintf(stderr, "gpuprof analyze: no trace given\n");
    usage(stderr);
    return 2;
  }
  rc = expand_inputs(argc + 1 - optind, argv + optind - 1, &paths, &n_paths);
  n = n_paths;
  traces = rc ? NULL : calloc(n, sizeof(*traces));
  if (!traces) {
    rc = rc ? rc : 1;
    n = 0;
    goto out;
  }
  for (size_t i = 0; i < n; i++) {
    traces[i].path = paths[i];
    traces[i].windowed = windowed;
    traces[i].from_ns = from_ns;
    traces[i].to_ns = to_ns;
  }
  for (size_t i = 0; i < n && !rc; i++)
    rc = trace_load(&traces[i]);
  if (rc)
    goto out;
  if (json_path && !strcmp(json_path, "-"))
    out = NULL;
  report = json_object_new_object();
  list = json_object_new_array();
  findings = json_object_new_array();
  for (size_t i = 0; i < n; i++) {
    json_object *f = json_object_new_array();
    json_object_array_add(list, trace_report(out, &traces[i], f));
    if (out && json_object_array_length(f) == 0)
      fprintf(out, "  (nothing stands out)\n");
    for (size_t k = 0; k < json_object_array_length(f); k++) {
      json_object *x = json_object_get(json_object_array_get_idx(f, k));
      const char *pname = tf_str_of(traces[i].meta, "process_name");
      put_str(x, "file", traces[i].path);
      put_str(x, "process", pname ? pname : traces[i].path);
      json_object_array_add(findings, x);
    }
    json_object_put(f);
  }
  json_object_object_add(report, "traces", list);

  comms = comms_report(out, traces, n, findings);
  json_object_object_add(report, "nccl_comms", comms);
  json_object_object_add(report, "findings", findings);
  if (out) {
    fprintf(out, "\nfindings: %zu\n", json_object_array_length(findings));
    for (size_t k = 0; k < json_object_array_length(findings); k++) {
      json_object *x = json_object_array_get_idx(findings, k);
      const char *who = tf_str_of(x, "process");
      fprintf(out, "  %s%s%s\n", who ? who : "", who ? ": " : "", tf_str_of(x, "text"));
    }
  }
  if (json_path) {
    const char *s = json_object_to_json_string_ext(report, JSON_C_TO_STRING_PRETTY |
                                                               JSON_C_TO_STRING_NOSLASHESCAPE);
    FILE *f = strcmp(json_path, "-") ? fopen(json_path, "w") : stdout;
    if (!f || fprintf(f, "%s\n", s) < 0 || (f != stdout && fclose(f))) {
      fprintf(stderr, "gpuprof analyze: %s: cannot write: %s\n", json_path, strerror(errno));
      rc = 1;
    }
  }
out:
  for (size_t i = 0; i < n; i++)
    trace_free(&traces[i]);
  free(traces);
  for (size_t i = 0; i < n_paths; i++)
    free(paths[i]);
  free(paths);
  json_object_put(report);
  return rc;
}
