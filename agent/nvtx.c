/* NVTX: the injection entry point, the gate in front of CUPTI's NVTX, and the NVTX callbacks. */
#define LOG_MODULE "nvtx"
#include "agent/nvtx.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <generated_nvtx_meta.h>

#include "agent/agent.h"
#include "agent/capture.h"
#include "agent/config.h"
#include "agent/thread.h"
#include "agent/util/clock.h"
#include "agent/util/export.h"
#include "agent/util/guard.h"
#include "agent/util/log.h"
#include "cupti/loader.h"

/*
 * Concurrency: module injection and the CUPTI attach serialize on setup_lock (rare, never on
 * an NVTX event). The gate's hot path is one acquire load of `forwarding` plus the agent's
 * state word. Name and handle tables are insert-only open addressing with CAS, read without
 * locks; their strings are never freed (the trace writers key names by pointer).
 */

#define NAME_MAX_LEN 255u   /* longer messages are cut (UTF-8 repaired by the writers) */
#define DOMAIN_NAME_MAX 63u /* domain names (the category) are cut to this */
#define MAX_DOMAINS 256u    /* domain index 0 is the default domain */
#define NAMES_CAP 16384u    /* interned names: at most NAMES_LIMIT of them */
#define NAMES_LIMIT 12288u
#define NAMES_PROBE 64u
#define HANDLES_CAP 8192u /* CUPTI handles of domains and registered strings */
#define STACK_DEPTH 128u  /* open push/pop ranges per thread */
#define STARTS_CAP 4096u  /* open start/end ranges, process-wide */
#define STARTS_PROBE 8u

static const char too_many_names[] = "[nvtx: too many distinct names]";
static const char unicode_name[] = "[nvtx: unicode message]";
static const char unnamed[] = "[nvtx: no message]";

/* ---- interned names ---- */

static _Atomic(char *) names[NAMES_CAP];
static _Atomic uint32_t names_len;
static _Atomic uint64_t st_unmatched, st_crossed, st_dropped;

static uint32_t hash_str(const char *s, size_t n)
{
  uint32_t h = 2166136261u;

  for (size_t i = 0; i < n; i++)
    h = (h ^ (unsigned char)s[i]) * 16777619u;
  return h;
}

/* A stable copy of the first `max` bytes of s. Never NULL. Allocates once per distinct name. */
static const char *intern(const char *s, size_t max)
{
  size_t n = strnlen(s, max);
  uint32_t h = hash_str(s, n);
  char *mine = NULL;

  for (uint32_t i = 0; i < NAMES_PROBE; i++) {
    _Atomic(char *) *slot = &names[(h + i) % NAMES_CAP];
    char *cur = atomic_load_explicit(slot, memory_order_acquire);

    if (!cur) {
      if (atomic_load_explicit(&names_len, memory_order_relaxed) >= NAMES_LIMIT)
        break;
      if (!mine) {
        mine = malloc(n + 1);
        if (!mine)
          break;
        memcpy(mine, s, n);
        mine[n] = '\0';
      }
      if (atomic_compare_exchange_strong_explicit(slot, &cur, mine, memory_order_acq_rel,
                                                  memory_order_acquire)) {
        atomic_fetch_add_explicit(&names_len, 1, memory_order_relaxed);
        return mine;
      }
      /* Another thread took the slot: cur is its string. */
    }
    if (!strncmp(cur, s, n) && cur[n] == '\0') {
      free(mine);
      return cur;
    }
  }
  free(mine);
  atomic_fetch_add_explicit(&st_dropped, 1, memory_order_relaxed);
  return too_many_names;
}

/* ---- CUPTI handles: domain index or registered string, by handle ---- */

struct handle_entry {
  _Atomic uintptr_t key;
  const char *_Atomic name; /* registered strings */
  _Atomic uint32_t domain;  /* domains: their index */
  atomic_int ready;
};

static struct handle_entry handles[HANDLES_CAP];
static const char *_Atomic domain_names[MAX_DOMAINS];
static _Atomic uint32_t n_domains = 1;

static struct handle_entry *handle_find(const void *h, int insert)
{
  uintptr_t key = (uintptr_t)h;
  uint32_t start = (uint32_t)((key >> 4) * 0x9e3779b1u) % HANDLES_CAP;

  if (!key)
    return NULL;
  for (uint32_t i = 0; i < HANDLES_CAP; i++) {
    struct handle_entry *e = &handles[(start + i) % HANDLES_CAP];
    uintptr_t cur = atomic_load_explicit(&e->key, memory_order_acquire);

    if (cur == key)
      return e;
    if (!cur) {
      if (!insert)
        return NULL;
      if (atomic_compare_exchange_strong(&e->key, &cur, key) || cur == key)
        return e;
    }
  }
  return NULL;
}

static uint32_t domain_index(nvtxDomainHandle_t d)
{
  struct handle_entry *e;

  if (!d)
    return 0;
  e = handle_find(d, 0);
  return e && atomic_load_explicit(&e->ready, memory_order_acquire)
             ? atomic_load_explicit(&e->domain, memory_order_relaxed)
             : 0;
}

const char *nvtx_domain_name(uint32_t index)
{
  return index && index < MAX_DOMAINS
             ? atomic_load_explicit(&domain_names[index], memory_order_acquire)
             : NULL;
}

static void on_domain_create(const nvtxDomainCreateA_params *p, const void *ret)
{
  nvtxDomainHandle_t h = ret ? *(const nvtxDomainHandle_t *)ret : NULL;
  struct handle_entry *e = handle_find(h, 1);
  uint32_t idx;

  if (!e || atomic_load_explicit(&e->ready, memory_order_acquire))
    return;
  idx = atomic_fetch_add_explicit(&n_domains, 1, memory_order_relaxed);
  if (idx >= MAX_DOMAINS) {
    atomic_fetch_add_explicit(&st_dropped, 1, memory_order_relaxed);
    return; /* its events show in the default domain */
  }
  atomic_store_explicit(&domain_names[idx], intern(p && p->name ? p->name : "", DOMAIN_NAME_MAX),
                        memory_order_release);
  atomic_store_explicit(&e->domain, idx, memory_order_relaxed);
  atomic_store_explicit(&e->ready, 1, memory_order_release);
}

static void on_register_string(const nvtxDomainRegisterStringA_params *p, const void *ret)
{
  nvtxStringHandle_t h = ret ? *(const nvtxStringHandle_t *)ret : NULL;
  struct handle_entry *e = handle_find(h, 1);

  if (!e || atomic_load_explicit(&e->ready, memory_order_acquire))
    return;
  atomic_store_explicit(&e->name, intern(p && p->string ? p->string : "", NAME_MAX_LEN),
                        memory_order_relaxed);
  atomic_store_explicit(&e->ready, 1, memory_order_release);
}

/* The message of an Ex call. ASCII and registered messages; unicode ones get a placeholder
 * (the agent has no wide-character conversion on this path, and the writers need UTF-8). */
static const char *attrib_name(const nvtxEventAttributes_t *a)
{
  if (!a || a->size < offsetof(nvtxEventAttributes_t, message) + sizeof(a->message))
    return unnamed;
  switch (a->messageType) {
  case NVTX_MESSAGE_TYPE_ASCII:
    return a->message.ascii ? intern(a->message.ascii, NAME_MAX_LEN) : unnamed;
  case NVTX_MESSAGE_TYPE_REGISTERED: {
    struct handle_entry *e = handle_find(a->message.registered, 0);
    return e && atomic_load_explicit(&e->ready, memory_order_acquire)
               ? atomic_load_explicit(&e->name, memory_order_relaxed)
               : unnamed;
  }
  case NVTX_MESSAGE_TYPE_UNICODE:
    return unicode_name;
  default:
    return unnamed;
  }
}

/* ---- per-thread push/pop pairing ---- */

struct open_range {
  const char *name;
  uint64_t start_ns;
  uint32_t domain;
};

struct nvtx_thread {
  uint32_t epoch; /* the capture its open ranges belong to */
  uint32_t depth;
  uint32_t lost; /* pushes beyond STACK_DEPTH: their pops are swallowed */
  struct open_range open[STACK_DEPTH];
};

static __thread struct nvtx_thread nvtx_tls __attribute__((tls_model("local-dynamic")));
static _Atomic uint32_t capture_epoch;

static struct nvtx_thread *thread_ranges(void)
{
  struct nvtx_thread *t = &nvtx_tls;
  uint32_t e = atomic_load_explicit(&capture_epoch, memory_order_relaxed);

  /* Ranges opened in an earlier capture never pair with pops of this one. */
  if (t->epoch != e) {
    t->epoch = e;
    t->depth = 0;
    t->lost = 0;
  }
  return t;
}

static void on_push(const char *name, uint32_t domain)
{
  struct nvtx_thread *t = thread_ranges();

  if (t->depth >= STACK_DEPTH) {
    t->lost++;
    atomic_fetch_add_explicit(&st_dropped, 1, memory_order_relaxed);
    return;
  }
  t->open[t->depth++] = (struct open_range){name, clock_realtime_ns(), domain};
}

/*
 * A pop of `domain` closes that domain's innermost open range (NVTX keeps one stack per
 * domain). When it is not the thread's innermost range of all domains, writing it would cross
 * the ranges above it on the thread's track (they end later): it is dropped and counted.
 */
static void on_pop(uint32_t domain)
{
  struct nvtx_thread *t = thread_ranges();
  uint64_t now = clock_realtime_ns();
  uint32_t i;

  if (t->lost) {
    t->lost--;
    return;
  }
  for (i = t->depth; i > 0; i--)
    if (t->open[i - 1].domain == domain)
      break;
  if (!i) {
    atomic_fetch_add_explicit(&st_unmatched, 1, memory_order_relaxed);
    return;
  }
  if (i == t->depth) {
    const struct open_range *r = &t->open[i - 1];
    capture_nvtx(CAPTURE_NVTX_RANGE, r->name, r->domain, r->start_ns, now, 0);
    t->depth--;
    return;
  }
  atomic_fetch_add_explicit(&st_crossed, 1, memory_order_relaxed);
  memmove(&t->open[i - 1], &t->open[i], (t->depth - i) * sizeof(t->open[0]));
  t->depth--;
}

static void on_mark(const char *name, uint32_t domain)
{
  uint64_t now = clock_realtime_ns();

  capture_nvtx(CAPTURE_NVTX_MARK, name, domain, now, now, 0);
}

/* ---- start/end ranges: any thread may end them ---- */

struct start_entry {
  _Atomic uint64_t id; /* 0: free */
  atomic_int ready;
  uint32_t epoch;
  uint32_t tid;
  uint32_t domain;
  const char *name;
  uint64_t start_ns;
};

static struct start_entry starts[STARTS_CAP];

static uint32_t start_slot(uint64_t id)
{
  return (uint32_t)((id * 0x9e3779b97f4a7c15ull) >> 40) % STARTS_CAP;
}

static void on_start(const void *ret, const char *name, uint32_t domain)
{
  uint64_t id = ret ? *(const nvtxRangeId_t *)ret : 0;
  uint32_t epoch = atomic_load_explicit(&capture_epoch, memory_order_relaxed);
  uint32_t s = start_slot(id);

  if (!id)
    return;
  for (uint32_t i = 0; i < STARTS_PROBE; i++) {
    struct start_entry *e = &starts[(s + i) % STARTS_CAP];
    uint64_t cur = atomic_load_explicit(&e->id, memory_order_acquire);

    /* A range left open by an earlier capture gives its slot up. */
    if (cur && (!atomic_load_explicit(&e->ready, memory_order_acquire) || e->epoch == epoch))
      continue;
    if (!atomic_compare_exchange_strong(&e->id, &cur, id))
      continue;
    atomic_store_explicit(&e->ready, 0, memory_order_relaxed);
    e->epoch = epoch;
    e->tid = thread_state_get()->tid;
    e->domain = domain;
    e->name = name;
    e->start_ns = clock_realtime_ns();
    atomic_store_explicit(&e->ready, 1, memory_order_release);
    return;
  }
  atomic_fetch_add_explicit(&st_dropped, 1, memory_order_relaxed);
}

static void on_end(uint64_t id)
{
  uint32_t epoch = atomic_load_explicit(&capture_epoch, memory_order_relaxed);
  uint64_t now = clock_realtime_ns();
  uint32_t s = start_slot(id);

  for (uint32_t i = 0; id && i < STARTS_PROBE; i++) {
    struct start_entry *e = &starts[(s + i) % STARTS_CAP];
    uint64_t cur = id;

    if (atomic_load_explicit(&e->id, memory_order_acquire) != id ||
        !atomic_load_explicit(&e->ready, memory_order_acquire))
      continue;
    {
      struct start_entry copy = {.epoch = e->epoch,
                                 .tid = e->tid,
                                 .domain = e->domain,
                                 .name = e->name,
                                 .start_ns = e->start_ns};
      atomic_store_explicit(&e->ready, 0, memory_order_relaxed);
      if (!atomic_compare_exchange_strong(&e->id, &cur, 0))
        break; /* ended twice at once: the other end wins */
      if (copy.epoch != epoch)
        break;
      capture_nvtx(CAPTURE_NVTX_SPAN, copy.name, copy.domain, copy.start_ns, now, copy.tid);
      return;
    }
  }
  atomic_fetch_add_explicit(&st_unmatched, 1, memory_order_relaxed);
}

/* ---- the CUPTI callbacks ---- */

void nvtx_on_callback(CUpti_CallbackId cbid, const void *cbdata)
{
  const CUpti_NvtxData *d = cbdata;
  const void *p = d->functionParams;

  if (!p)
    return;
  switch (cbid) {
  case CUPTI_CBID_NVTX_nvtxDomainCreateA:
    on_domain_create(p, d->functionReturnValue);
    return;
  case CUPTI_CBID_NVTX_nvtxDomainRegisterStringA:
    on_register_string(p, d->functionReturnValue);
    return;
  default:
    break;
  }
  /* Events: only while a full capture records them (callbacks may still be in flight right
   * after the capture switched them off). */
  if (!capture_nvtx_active())
    return;
  switch (cbid) {
  case CUPTI_CBID_NVTX_nvtxRangePushA: {
    const nvtxRangePushA_params *q = p;
    on_push(q->message ? intern(q->message, NAME_MAX_LEN) : unnamed, 0);
    break;
  }
  case CUPTI_CBID_NVTX_nvtxRangePushEx: {
    const nvtxRangePushEx_params *q = p;
    on_push(attrib_name(q->eventAttrib), 0);
    break;
  }
  case CUPTI_CBID_NVTX_nvtxDomainRangePushEx: {
    const nvtxDomainRangePushEx_params *q = p;
    on_push(attrib_name(q->core.eventAttrib), domain_index(q->domain));
    break;
  }
  case CUPTI_CBID_NVTX_nvtxRangePushW:
    on_push(unicode_name, 0);
    break;
  case CUPTI_CBID_NVTX_nvtxRangePop:
    on_pop(0);
    break;
  case CUPTI_CBID_NVTX_nvtxDomainRangePop: {
    const nvtxDomainRangePop_params *q = p;
    on_pop(domain_index(q->domain));
    break;
  }
  case CUPTI_CBID_NVTX_nvtxMarkA: {
    const nvtxMarkA_params *q = p;
    on_mark(q->message ? intern(q->message, NAME_MAX_LEN) : unnamed, 0);
    break;
  }
  case CUPTI_CBID_NVTX_nvtxMarkW:
    on_mark(unicode_name, 0);
    break;
  case CUPTI_CBID_NVTX_nvtxMarkEx: {
    const nvtxMarkEx_params *q = p;
    on_mark(attrib_name(q->eventAttrib), 0);
    break;
  }
  case CUPTI_CBID_NVTX_nvtxDomainMarkEx: {
    const nvtxDomainMarkEx_params *q = p;
    on_mark(attrib_name(q->core.eventAttrib), domain_index(q->domain));
    break;
  }
  case CUPTI_CBID_NVTX_nvtxRangeStartA: {
    const nvtxRangeStartA_params *q = p;
    on_start(d->functionReturnValue, q->message ? intern(q->message, NAME_MAX_LEN) : unnamed, 0);
    break;
  }
  case CUPTI_CBID_NVTX_nvtxRangeStartW:
    on_start(d->functionReturnValue, unicode_name, 0);
    break;
  case CUPTI_CBID_NVTX_nvtxRangeStartEx: {
    const nvtxRangeStartEx_params *q = p;
    on_start(d->functionReturnValue, attrib_name(q->eventAttrib), 0);
    break;
  }
  case CUPTI_CBID_NVTX_nvtxDomainRangeStartEx: {
    const nvtxDomainRangeStartEx_params *q = p;
    on_start(d->functionReturnValue, attrib_name(q->core.eventAttrib), domain_index(q->domain));
    break;
  }
  case CUPTI_CBID_NVTX_nvtxRangeEnd: {
    const nvtxRangeEnd_params *q = p;
    on_end(q->id);
    break;
  }
  case CUPTI_CBID_NVTX_nvtxDomainRangeEnd: {
    const nvtxDomainRangeEnd_params *q = p;
    on_end(q->core.id);
    break;
  }
  default:
    break;
  }
}

void nvtx_capture_begin(uint32_t seq)
{
  atomic_store_explicit(&capture_epoch, seq, memory_order_relaxed);
  atomic_store_explicit(&st_unmatched, 0, memory_order_relaxed);
  atomic_store_explicit(&st_crossed, 0, memory_order_relaxed);
  atomic_store_explicit(&st_dropped, 0, memory_order_relaxed);
}

void nvtx_capture_end(void)
{
  /* Ranges still open now are left out (docs/TRACES.md "NVTX"); the next capture's epoch
   * discards them. */
}

void nvtx_get_stats(struct nvtx_stats *out)
{
  out->unmatched = atomic_load_explicit(&st_unmatched, memory_order_relaxed);
  out->crossed = atomic_load_explicit(&st_crossed, memory_order_relaxed);
  out->dropped = atomic_load_explicit(&st_dropped, memory_order_relaxed);
}

/* ==== the injection side: the gate in each module, CUPTI's table behind it ==== */

/*
 * CUPTI's implementations, as cuptiNvtxInitialize2 writes them into the agent's own function
 * tables (one set for all modules: the implementations do not depend on the module). Each
 * table has the module layout of nvtxImpl.h: SIZE + 1 pointers to slots, entry 0 unused.
 */
static NvtxFunctionPointer cupti_core[NVTX_CBID_CORE_SIZE + 1];
static NvtxFunctionPointer cupti_core2[NVTX_CBID_CORE2_SIZE + 1];
static NvtxFunctionPointer cupti_cuda[NVTX_CBID_CUDA_SIZE + 1];
static NvtxFunctionPointer cupti_cudart[NVTX_CBID_CUDART_SIZE + 1];
static NvtxFunctionPointer cupti_opencl[NVTX_CBID_OPENCL_SIZE + 1];
static NvtxFunctionPointer cupti_sync[NVTX_CBID_SYNC_SIZE + 1];
static NvtxFunctionPointer *tab_core[NVTX_CBID_CORE_SIZE + 1];
static NvtxFunctionPointer *tab_core2[NVTX_CBID_CORE2_SIZE + 1];
static NvtxFunctionPointer *tab_cuda[NVTX_CBID_CUDA_SIZE + 1];
static NvtxFunctionPointer *tab_cudart[NVTX_CBID_CUDART_SIZE + 1];
static NvtxFunctionPointer *tab_opencl[NVTX_CBID_OPENCL_SIZE + 1];
static NvtxFunctionPointer *tab_sync[NVTX_CBID_SYNC_SIZE + 1];

static pthread_mutex_t setup_lock = PTHREAD_MUTEX_INITIALIZER;
static int injected;          /* a module took the gate (setup_lock) */
static int decided, enabled;  /* the knobs, read at the first injection (setup_lock) */
static int atfork_set;        /* setup_lock */
static int attach_tried;      /* cuptiNvtxInitialize2 was called (setup_lock) */
static atomic_int forwarding; /* CUPTI's table is filled: the gate may forward */

/* Forward only while this process's agent is active and CUPTI took its table. */
static inline int live(void)
{
  return atomic_load_explicit(&forwarding, memory_order_acquire) && agent_is_active();
}

#define CORE(cbid, type) ((type)cupti_core[NVTX_CBID_CORE_##cbid])
#define CORE2(cbid, type) ((type)cupti_core2[NVTX_CBID_CORE2_##cbid])

/* Domains and registered strings handed to modules: the agent's objects, each with its CUPTI
 * handle made on first forwarded use (domains are looked up by name, as NVTX returns one
 * handle per name). Never freed, so a handle stays valid after nvtxDomainDestroy. */
struct gate_domain {
  struct gate_domain *next;
  _Atomic(nvtxDomainHandle_t) cupti;
  char name[DOMAIN_NAME_MAX + 1];
};

struct gate_string {
  struct gate_string *next; /* all of them stay reachable: handles live as long as the process */
  struct gate_domain *domain;
  _Atomic(nvtxStringHandle_t) cupti;
  char text[];
};

static struct gate_domain *gate_domains; /* setup_lock */
static struct gate_string *gate_strings; /* setup_lock */
static uint32_t gate_domain_count, gate_string_count;

static nvtxDomainHandle_t cupti_domain(nvtxDomainHandle_t h)
{
  struct gate_domain *d = (struct gate_domain *)h;
  nvtxDomainHandle_t c;

  if (!d)
    return NULL;
  c = atomic_load_explicit(&d->cupti, memory_order_acquire);
  if (!c && CORE2(DomainCreateA, nvtxDomainCreateA_impl_fntype)) {
    c = CORE2(DomainCreateA, nvtxDomainCreateA_impl_fntype)(d->name);
    atomic_store_explicit(&d->cupti, c, memory_order_release);
  }
  return c;
}

static nvtxStringHandle_t cupti_string(nvtxStringHandle_t h)
{
  struct gate_string *s = (struct gate_string *)h;
  nvtxStringHandle_t c;

  if (!s)
    return NULL;
  c = atomic_load_explicit(&s->cupti, memory_order_acquire);
  if (!c && CORE2(DomainRegisterStringA, nvtxDomainRegisterStringA_impl_fntype)) {
    c = CORE2(DomainRegisterStringA, nvtxDomainRegisterStringA_impl_fntype)(
        cupti_domain((nvtxDomainHandle_t)s->domain), s->text);
    atomic_store_explicit(&s->cupti, c, memory_order_release);
  }
  return c;
}

/* Attributes with a registered message refer to the agent's string: CUPTI gets its own. */
static const nvtxEventAttributes_t *cupti_attrib(const nvtxEventAttributes_t *a,
                                                 nvtxEventAttributes_t *copy)
{
  size_t n;

  if (!a || a->messageType != NVTX_MESSAGE_TYPE_REGISTERED)
    return a;
  n = a->size < sizeof(*copy) ? a->size : sizeof(*copy);
  memset(copy, 0, sizeof(*copy));
  memcpy(copy, a, n);
  copy->message.registered = cupti_string(a->message.registered);
  return copy;
}

/* ---- the gate: CORE ---- */

static void NVTX_API gate_MarkEx(const nvtxEventAttributes_t *a)
{
  nvtxEventAttributes_t c;
  if (live() && CORE(MarkEx, nvtxMarkEx_impl_fntype))
    CORE(MarkEx, nvtxMarkEx_impl_fntype)(cupti_attrib(a, &c));
}

static void NVTX_API gate_MarkA(const char *m)
{
  if (live() && CORE(MarkA, nvtxMarkA_impl_fntype))
    CORE(MarkA, nvtxMarkA_impl_fntype)(m);
}

static nvtxRangeId_t NVTX_API gate_RangeStartEx(const nvtxEventAttributes_t *a)
{
  nvtxEventAttributes_t c;
  if (live() && CORE(RangeStartEx, nvtxRangeStartEx_impl_fntype))
    return CORE(RangeStartEx, nvtxRangeStartEx_impl_fntype)(cupti_attrib(a, &c));
  return 0;
}

static nvtxRangeId_t NVTX_API gate_RangeStartA(const char *m)
{
  if (live() && CORE(RangeStartA, nvtxRangeStartA_impl_fntype))
    return CORE(RangeStartA, nvtxRangeStartA_impl_fntype)(m);
  return 0;
}

static void NVTX_API gate_RangeEnd(nvtxRangeId_t id)
{
  /* 0 is what the gate returned for a start it did not forward. */
  if (id && live() && CORE(RangeEnd, nvtxRangeEnd_impl_fntype))
    CORE(RangeEnd, nvtxRangeEnd_impl_fntype)(id);
}

/* What an NVTX without a tool returns for push and pop (nvToolsExt.h). */
#define NO_PUSH_POP_TRACKING -2

static int NVTX_API gate_RangePushEx(const nvtxEventAttributes_t *a)
{
  nvtxEventAttributes_t c;
  if (live() && CORE(RangePushEx, nvtxRangePushEx_impl_fntype))
    return CORE(RangePushEx, nvtxRangePushEx_impl_fntype)(cupti_attrib(a, &c));
  return NO_PUSH_POP_TRACKING;
}

static int NVTX_API gate_RangePushA(const char *m)
{
  if (live() && CORE(RangePushA, nvtxRangePushA_impl_fntype))
    return CORE(RangePushA, nvtxRangePushA_impl_fntype)(m);
  return NO_PUSH_POP_TRACKING;
}

/* Wide-character calls: passed on like the others (so that their pops pair), recorded with a
 * placeholder name (no conversion on the application's thread). */
static void NVTX_API gate_MarkW(const wchar_t *m)
{
  if (live() && CORE(MarkW, nvtxMarkW_impl_fntype))
    CORE(MarkW, nvtxMarkW_impl_fntype)(m);
}

static nvtxRangeId_t NVTX_API gate_RangeStartW(const wchar_t *m)
{
  if (live() && CORE(RangeStartW, nvtxRangeStartW_impl_fntype))
    return CORE(RangeStartW, nvtxRangeStartW_impl_fntype)(m);
  return 0;
}

static int NVTX_API gate_RangePushW(const wchar_t *m)
{
  if (live() && CORE(RangePushW, nvtxRangePushW_impl_fntype))
    return CORE(RangePushW, nvtxRangePushW_impl_fntype)(m);
  return NO_PUSH_POP_TRACKING;
}

static int NVTX_API gate_RangePop(void)
{
  if (live() && CORE(RangePop, nvtxRangePop_impl_fntype))
    return CORE(RangePop, nvtxRangePop_impl_fntype)();
  return NO_PUSH_POP_TRACKING;
}

/* ---- the gate: CORE2 (domains) ---- */

static void NVTX_API gate_DomainMarkEx(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a)
{
  nvtxEventAttributes_t c;
  if (live() && CORE2(DomainMarkEx, nvtxDomainMarkEx_impl_fntype))
    CORE2(DomainMarkEx, nvtxDomainMarkEx_impl_fntype)(cupti_domain(d), cupti_attrib(a, &c));
}

static nvtxRangeId_t NVTX_API gate_DomainRangeStartEx(nvtxDomainHandle_t d,
                                                      const nvtxEventAttributes_t *a)
{
  nvtxEventAttributes_t c;
  if (live() && CORE2(DomainRangeStartEx, nvtxDomainRangeStartEx_impl_fntype))
    return CORE2(DomainRangeStartEx, nvtxDomainRangeStartEx_impl_fntype)(cupti_domain(d),
                                                                         cupti_attrib(a, &c));
  return 0;
}

static void NVTX_API gate_DomainRangeEnd(nvtxDomainHandle_t d, nvtxRangeId_t id)
{
  if (id && live() && CORE2(DomainRangeEnd, nvtxDomainRangeEnd_impl_fntype))
    CORE2(DomainRangeEnd, nvtxDomainRangeEnd_impl_fntype)(cupti_domain(d), id);
}

static int NVTX_API gate_DomainRangePushEx(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a)
{
  nvtxEventAttributes_t c;
  if (live() && CORE2(DomainRangePushEx, nvtxDomainRangePushEx_impl_fntype))
    return CORE2(DomainRangePushEx, nvtxDomainRangePushEx_impl_fntype)(cupti_domain(d),
                                                                       cupti_attrib(a, &c));
  return NO_PUSH_POP_TRACKING;
}

static int NVTX_API gate_DomainRangePop(nvtxDomainHandle_t d)
{
  if (live() && CORE2(DomainRangePop, nvtxDomainRangePop_impl_fntype))
    return CORE2(DomainRangePop, nvtxDomainRangePop_impl_fntype)(cupti_domain(d));
  return NO_PUSH_POP_TRACKING;
}

/* Not on an event path: these take the lock and allocate. Bounded: past 4096 domains or
 * 65536 strings they return NULL (the default domain, an unnamed message). */
static nvtxDomainHandle_t NVTX_API gate_DomainCreateA(const char *name)
{
  struct gate_domain *d;
  const char *n = name ? name : "";
  size_t len = strnlen(n, DOMAIN_NAME_MAX);

  pthread_mutex_lock(&setup_lock);
  for (d = gate_domains; d; d = d->next)
    if (!strncmp(d->name, n, len) && d->name[len] == '\0')
      break;
  if (!d && gate_domain_count < 4096 && (d = calloc(1, sizeof(*d)))) {
    memcpy(d->name, n, len);
    d->next = gate_domains;
    gate_domains = d;
    gate_domain_count++;
  }
  pthread_mutex_unlock(&setup_lock);
  /* Made in CUPTI now when it can be (its callback then names the domain), else later. */
  if (d && live())
    cupti_domain((nvtxDomainHandle_t)d);
  return (nvtxDomainHandle_t)d;
}

static nvtxStringHandle_t NVTX_API gate_DomainRegisterStringA(nvtxDomainHandle_t domain,
                                                              const char *string)
{
  const char *t = string ? string : "";
  size_t len = strnlen(t, NAME_MAX_LEN);
  struct gate_string *s = NULL;

  pthread_mutex_lock(&setup_lock);
  if (gate_string_count < 65536 && (s = calloc(1, sizeof(*s) + len + 1))) {
    s->domain = (struct gate_domain *)domain;
    memcpy(s->text, t, len);
    s->next = gate_strings;
    gate_strings = s;
    gate_string_count++;
  }
  pthread_mutex_unlock(&setup_lock);
  if (s && live())
    cupti_string((nvtxStringHandle_t)s);
  return (nvtxStringHandle_t)s;
}

struct gate_slot {
  unsigned index;
  NvtxFunctionPointer fn;
};

#define GATE(f) ((NvtxFunctionPointer)(void (*)(void))(f))

/*
 * The calls the gate takes. Left to NVTX's no-ops: nvtxDomainRegisterStringW (an Ex call
 * naming such a string gets the unnamed placeholder), the category, OS thread, CUDA/CUDART object
 * naming and sync calls (nothing in a trace uses them; nvtxNameOsThreadA is the call that crashes
 * in CUPTI 13.0's NVTX injection, NVIDIA/NVTX#125), nvtxDomainResourceCreate/Destroy and
 * nvtxDomainDestroy (the agent's domain objects stay valid; CUPTI keeps its domain).
 */
static const struct gate_slot gate_core[] = {
    {NVTX_CBID_CORE_MarkEx, GATE(gate_MarkEx)},
    {NVTX_CBID_CORE_MarkA, GATE(gate_MarkA)},
    {NVTX_CBID_CORE_RangeStartEx, GATE(gate_RangeStartEx)},
    {NVTX_CBID_CORE_RangeStartA, GATE(gate_RangeStartA)},
    {NVTX_CBID_CORE_RangeEnd, GATE(gate_RangeEnd)},
    {NVTX_CBID_CORE_RangePushEx, GATE(gate_RangePushEx)},
    {NVTX_CBID_CORE_RangePushA, GATE(gate_RangePushA)},
    {NVTX_CBID_CORE_RangePop, GATE(gate_RangePop)},
    {NVTX_CBID_CORE_MarkW, GATE(gate_MarkW)},
    {NVTX_CBID_CORE_RangeStartW, GATE(gate_RangeStartW)},
    {NVTX_CBID_CORE_RangePushW, GATE(gate_RangePushW)},
};

static const struct gate_slot gate_core2[] = {
    {NVTX_CBID_CORE2_DomainMarkEx, GATE(gate_DomainMarkEx)},
    {NVTX_CBID_CORE2_DomainRangeStartEx, GATE(gate_DomainRangeStartEx)},
    {NVTX_CBID_CORE2_DomainRangeEnd, GATE(gate_DomainRangeEnd)},
    {NVTX_CBID_CORE2_DomainRangePushEx, GATE(gate_DomainRangePushEx)},
    {NVTX_CBID_CORE2_DomainRangePop, GATE(gate_DomainRangePop)},
    {NVTX_CBID_CORE2_DomainRegisterStringA, GATE(gate_DomainRegisterStringA)},
    {NVTX_CBID_CORE2_DomainCreateA, GATE(gate_DomainCreateA)},
};

static int install(const NvtxExportTableCallbacks *cb, NvtxCallbackModule module,
                   const struct gate_slot *slots, size_t n)
{
  NvtxFunctionTable table = NULL;
  unsigned size = 0;

  if (!cb->GetModuleFunctionTable(module, &table, &size) || !table)
    return -1;
  for (size_t i = 0; i < n; i++)
    if (slots[i].index < size && table[slots[i].index])
      *table[slots[i].index] = slots[i].fn;
  return 0;
}

/* ---- the table CUPTI fills: the agent presents itself as one NVTX module ---- */

static int NVTX_API shadow_module_table(NvtxCallbackModule module, NvtxFunctionTable *out,
                                        unsigned *size)
{
  NvtxFunctionPointer **t;
  unsigned n;

  switch (module) {
  case NVTX_CB_MODULE_CORE:
    t = tab_core, n = NVTX_CBID_CORE_SIZE;
    break;
  case NVTX_CB_MODULE_CORE2:
    t = tab_core2, n = NVTX_CBID_CORE2_SIZE;
    break;
  case NVTX_CB_MODULE_CUDA:
    t = tab_cuda, n = NVTX_CBID_CUDA_SIZE;
    break;
  case NVTX_CB_MODULE_CUDART:
    t = tab_cudart, n = NVTX_CBID_CUDART_SIZE;
    break;
  case NVTX_CB_MODULE_OPENCL:
    t = tab_opencl, n = NVTX_CBID_OPENCL_SIZE;
    break;
  case NVTX_CB_MODULE_SYNC:
    t = tab_sync, n = NVTX_CBID_SYNC_SIZE;
    break;
  default:
    return 0;
  }
  if (out)
    *out = t;
  if (size)
    *size = n;
  return 1;
}

static void NVTX_API shadow_set_version(uint32_t version)
{
  (void)version;
}

static const NvtxExportTableCallbacks shadow_callbacks = {sizeof(NvtxExportTableCallbacks),
                                                          shadow_module_table};
static const NvtxExportTableVersionInfo shadow_version = {sizeof(NvtxExportTableVersionInfo),
                                                          NVTX_VERSION, 0, shadow_set_version};

static const void *NVTX_API shadow_export_table(uint32_t id)
{
  switch (id) {
  case NVTX_ETID_CALLBACKS:
    return &shadow_callbacks;
  case NVTX_ETID_VERSIONINFO:
    return &shadow_version;
  default:
    return NULL;
  }
}

static void shadow_init(void)
{
  for (unsigned i = 1; i < NVTX_CBID_CORE_SIZE; i++)
    tab_core[i] = &cupti_core[i];
  for (unsigned i = 1; i < NVTX_CBID_CORE2_SIZE; i++)
    tab_core2[i] = &cupti_core2[i];
  for (unsigned i = 1; i < NVTX_CBID_CUDA_SIZE; i++)
    tab_cuda[i] = &cupti_cuda[i];
  for (unsigned i = 1; i < NVTX_CBID_CUDART_SIZE; i++)
    tab_cudart[i] = &cupti_cudart[i];
  for (unsigned i = 1; i < NVTX_CBID_OPENCL_SIZE; i++)
    tab_opencl[i] = &cupti_opencl[i];
  for (unsigned i = 1; i < NVTX_CBID_SYNC_SIZE; i++)
    tab_sync[i] = &cupti_sync[i];
}

/* Under setup_lock: CUPTI fills the agent's table once, when the agent is active and some
 * module is injected (whichever comes second). */
static void attach_locked(void)
{
  CUptiResult res;

  if (attach_tried || !injected || !agent_is_active())
    return;
  attach_tried = 1;
  if (!cupti_fn.NvtxInitialize2) {
    log_warn("%s has no cuptiNvtxInitialize2: NVTX ranges are not recorded "
             "(NVTX_INJECTION64_PATH is set to this agent)",
             cupti_loader_path());
    return;
  }
  shadow_init();
  res = cupti_fn.NvtxInitialize2((void *)(uintptr_t)shadow_export_table);
  if (res != CUPTI_SUCCESS) {
    log_warn("cuptiNvtxInitialize2 failed (%s): NVTX ranges are not recorded",
             cupti_result_string(res));
    return;
  }
  atomic_store_explicit(&forwarding, 1, memory_order_release);
  log_debug("NVTX attached to CUPTI");
}

void nvtx_agent_active(void)
{
  pthread_mutex_lock(&setup_lock);
  attach_locked();
  pthread_mutex_unlock(&setup_lock);
}

/* A forked child: a parent thread may have held the lock at the fork. The child's agent is
 * dormant, so its gate forwards nothing; domains it creates still get objects. */
static void nvtx_fork_child(void)
{
  pthread_mutex_init(&setup_lock, NULL);
}

/*
 * The knobs, before the agent's configuration exists (the first NVTX call may precede cuInit).
 * A GPUPROF_NVTX that does not parse is reported by config_load at init, with the default
 * (on) used here and there alike.
 */
static void decide_locked(void)
{
  const char *mode = getenv("GPUPROF_MODE"), *v = getenv("GPUPROF_NVTX");
  int on = 1;

  if (decided)
    return;
  decided = 1;
  if (!atfork_set && pthread_atfork(NULL, NULL, nvtx_fork_child) == 0)
    atfork_set = 1;
  if (v && config_parse_bool(v, &on))
    on = 1;
  if (mode && !strcasecmp(mode, "off"))
    on = 0;
  enabled = on;
  if (!on)
    log_debug("%s: NVTX calls stay no-ops",
              mode && !strcasecmp(mode, "off") ? "GPUPROF_MODE=off" : "GPUPROF_NVTX=0");
}

/*
 * Called by each module's NVTX v3 loader (nvtx3/nvtxDetail/nvtxInit.h) on its first NVTX
 * call, on that thread, possibly before cuInit, in a forked child, or while the agent stops.
 * Returns 1 in every case: a 0 makes the loader dlclose the agent, which the CUDA driver may
 * have loaded too or may load later. Slots the gate did not take become no-ops.
 */
GPUPROF_EXPORT int InitializeInjectionNvtx2(void *get_export_table);
GPUPROF_EXPORT int InitializeInjectionNvtx2(void *get_export_table)
{
  NvtxGetExportTableFunc_t get = (NvtxGetExportTableFunc_t)(uintptr_t)get_export_table;
  const NvtxExportTableCallbacks *cb;
  int saved;

  if (!guard_enter(&saved))
    return 1;
  pthread_mutex_lock(&setup_lock);
  decide_locked();
  if (!enabled || !get)
    goto out;
  cb = get(NVTX_ETID_CALLBACKS);
  if (!cb || cb->struct_size < sizeof(*cb) || !cb->GetModuleFunctionTable) {
    log_warn("an NVTX module without a callbacks export table: its NVTX calls are not recorded");
    goto out;
  }
  if (install(cb, NVTX_CB_MODULE_CORE, gate_core, sizeof(gate_core) / sizeof(gate_core[0])))
    goto out;
  /* NVTX modules older than v2 have no CORE2 (domain) table. */
  install(cb, NVTX_CB_MODULE_CORE2, gate_core2, sizeof(gate_core2) / sizeof(gate_core2[0]));
  injected = 1;
  attach_locked();
out:
  pthread_mutex_unlock(&setup_lock);
  guard_leave(saved);
  return 1;
}
