/* Holds the CUPTI double's driver-independent functions to the real libcupti.so.13. */
#define _GNU_SOURCE
#include <cupti.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/*
 * Both libraries share the SONAME libcupti.so.13, so the real one is loaded into its own
 * link-map namespace (dlmopen LM_ID_NEWLM) and the double with a plain dlopen of its path.
 * Everything compared here works in the real library without a driver (cupti.md 7.1).
 */

typedef CUptiResult (*next_fn)(uint8_t *, size_t, CUpti_Activity **);
typedef CUptiResult (*str_fn)(CUptiResult, const char **);
typedef CUptiResult (*ts_fn)(uint64_t *);
typedef CUptiResult (*ver_fn)(uint32_t *);
typedef CUptiResult (*cbname_fn)(CUpti_CallbackDomain, uint32_t, const char **);

struct lib {
  const char *what;
  next_fn next;
  str_fn result_string, error_message;
  ts_fn timestamp;
  ver_fn version;
  cbname_fn callback_name;
};

static int g_failures;

#define CHECK(cond, ...)                                                                         \
  do {                                                                                           \
    if (!(cond)) {                                                                               \
      g_failures++;                                                                              \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                       \
      fprintf(stderr, __VA_ARGS__);                                                              \
      fputc('\n', stderr);                                                                       \
    }                                                                                            \
  } while (0)

static void *sym(void *h, const char *what, const char *name)
{
  void *p = dlsym(h, name);
  if (!p) {
    fprintf(stderr, "FAIL: %s has no %s\n", what, name);
    exit(1);
  }
  return p;
}

static struct lib load(void *h, const char *what)
{
  struct lib l = {what, NULL, NULL, NULL, NULL, NULL, NULL};
  *(void **)&l.next = sym(h, what, "cuptiActivityGetNextRecord");
  *(void **)&l.result_string = sym(h, what, "cuptiGetResultString");
  *(void **)&l.error_message = sym(h, what, "cuptiGetErrorMessage");
  *(void **)&l.timestamp = sym(h, what, "cuptiGetTimestamp");
  *(void **)&l.version = sym(h, what, "cuptiGetVersion");
  *(void **)&l.callback_name = sym(h, what, "cuptiGetCallbackName");
  return l;
}

/* The test's own idea of record sizes: only used to lay buffers out. */
static size_t test_size(uint32_t kind)
{
  switch (kind) {
  case CUPTI_ACTIVITY_KIND_MEMCPY: return sizeof(CUpti_ActivityMemcpy6);
  case CUPTI_ACTIVITY_KIND_MEMSET: return sizeof(CUpti_ActivityMemset4);
  case CUPTI_ACTIVITY_KIND_KERNEL:
  case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: return sizeof(CUpti_ActivityKernel10);
  case CUPTI_ACTIVITY_KIND_DRIVER:
  case CUPTI_ACTIVITY_KIND_RUNTIME:
  case CUPTI_ACTIVITY_KIND_INTERNAL_LAUNCH_API: return sizeof(CUpti_ActivityAPI);
  case CUPTI_ACTIVITY_KIND_DEVICE: return sizeof(CUpti_ActivityDevice5);
  case CUPTI_ACTIVITY_KIND_CONTEXT: return sizeof(CUpti_ActivityContext3);
  case CUPTI_ACTIVITY_KIND_MEMCPY2: return sizeof(CUpti_ActivityMemcpyPtoP4);
  case CUPTI_ACTIVITY_KIND_MEMORY2: return sizeof(CUpti_ActivityMemory4);
  case CUPTI_ACTIVITY_KIND_MEMORY_POOL: return sizeof(CUpti_ActivityMemoryPool3);
  case CUPTI_ACTIVITY_KIND_OVERHEAD: return sizeof(CUpti_ActivityOverhead3);
  case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: return sizeof(CUpti_ActivitySynchronization2);
  case CUPTI_ACTIVITY_KIND_STREAM: return sizeof(CUpti_ActivityStream);
  case CUPTI_ACTIVITY_KIND_GRAPH_TRACE: return sizeof(CUpti_ActivityGraphTrace2);
  case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: return sizeof(CUpti_ActivityExternalCorrelation);
  case CUPTI_ACTIVITY_KIND_MARKER: return sizeof(CUpti_ActivityMarker2);
  case CUPTI_ACTIVITY_KIND_MARKER_DATA: return sizeof(CUpti_ActivityMarkerData2);
  default: return 0;
  }
}

#define MAX_STEPS 512

struct walk {
  CUptiResult codes[MAX_STEPS];
  long offsets[MAX_STEPS];
  int n;
};

/* Iterates like a client: NULL first, then until an error; records every answer. */
static void walk(const struct lib *l, uint8_t *buf, size_t valid, struct walk *w)
{
  CUpti_Activity *r = NULL;
  w->n = 0;
  while (w->n < MAX_STEPS) {
    CUptiResult e = l->next(buf, valid, &r);
    w->codes[w->n] = e;
    w->offsets[w->n] = r ? (long)((uint8_t *)r - buf) : -1;
    w->n++;
    if (e != CUPTI_SUCCESS)
      break;
  }
}

static void compare(const struct lib *a, const struct lib *b, uint8_t *buf, size_t valid,
                    const char *label)
{
  static struct walk wa, wb;
  walk(a, buf, valid, &wa);
  walk(b, buf, valid, &wb);
  CHECK(wa.n == wb.n, "%s: %s took %d steps, %s %d", label, a->what, wa.n, b->what, wb.n);
  for (int i = 0; i < wa.n && i < wb.n; i++) {
    CHECK(wa.codes[i] == wb.codes[i], "%s step %d: code %d vs %d", label, i, wa.codes[i],
          wb.codes[i]);
    CHECK(wa.offsets[i] == wb.offsets[i], "%s step %d: offset %ld vs %ld", label, i,
          wa.offsets[i], wb.offsets[i]);
  }
}

static size_t put(uint8_t *buf, size_t off, uint32_t kind, size_t size)
{
  memset(buf + off, 0, size);
  memcpy(buf + off, &kind, sizeof(kind));
  return off + size;
}

static uint64_t realtime(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void test_records(const struct lib *real, const struct lib *fake)
{
  static uint8_t buf[65536] __attribute__((aligned(8)));
  char label[64];

  /* Every kind value alone, valid and invalid alike. */
  for (uint32_t k = 0; k <= 64; k++) {
    memset(buf, 0, 1024);
    memcpy(buf, &k, 4);
    snprintf(label, sizeof(label), "single kind %u", k);
    compare(real, fake, buf, 1024, label);
  }
  uint32_t k999 = 999;
  memset(buf, 0, 64);
  memcpy(buf, &k999, 4);
  compare(real, fake, buf, 64, "single kind 999");

  /* Every kind followed by a STREAM record: the step proves the per-kind size for all 56. */
  for (uint32_t k = 1; k < CUPTI_ACTIVITY_KIND_COUNT; k++) {
    memset(buf, 0, 2048);
    memcpy(buf, &k, 4);
    for (size_t off = 8; off < 1024; off += 8)
      put(buf, off, CUPTI_ACTIVITY_KIND_STREAM, 4);
    snprintf(label, sizeof(label), "kind %u then stream", k);
    compare(real, fake, buf, 1024, label);
  }

  /* A mixed buffer of the kinds the double writes, then its truncations and corruptions. */
  static const uint32_t mix[] = {
      CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
      CUPTI_ACTIVITY_KIND_MEMCPY2,           CUPTI_ACTIVITY_KIND_MEMSET,
      CUPTI_ACTIVITY_KIND_MEMORY2,           CUPTI_ACTIVITY_KIND_MEMORY_POOL,
      CUPTI_ACTIVITY_KIND_DRIVER,            CUPTI_ACTIVITY_KIND_RUNTIME,
      CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,   CUPTI_ACTIVITY_KIND_OVERHEAD,
      CUPTI_ACTIVITY_KIND_DEVICE,            CUPTI_ACTIVITY_KIND_CONTEXT,
      CUPTI_ACTIVITY_KIND_STREAM,            CUPTI_ACTIVITY_KIND_GRAPH_TRACE,
      CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION, CUPTI_ACTIVITY_KIND_KERNEL,
      CUPTI_ACTIVITY_KIND_MARKER,            CUPTI_ACTIVITY_KIND_MARKER_DATA,
  };
  size_t n = sizeof(mix) / sizeof(mix[0]), total = 0, offs[32];
  for (size_t i = 0; i < n; i++) {
    offs[i] = total;
    total = put(buf, total, mix[i], test_size(mix[i]));
  }
  compare(real, fake, buf, total, "mixed");
  compare(real, fake, buf, total - 8, "mixed, trailing record truncated");
  compare(real, fake, buf, total + 3, "mixed, 3 stray bytes");
  compare(real, fake, buf, 0, "validSize 0");
  compare(real, fake, buf, 2, "validSize 2");
  compare(real, fake, buf, 27, "validSize 27");
  uint32_t zero = 0;
  memcpy(buf + offs[5], &zero, 4);
  compare(real, fake, buf, total, "kind 0 in the middle");
  memcpy(buf + offs[5], &k999, 4);
  compare(real, fake, buf, total, "kind 999 in the middle");

  /* Random layouts, random cuts, occasional junk kinds. */
  srand(12345);
  for (int round = 0; round < 300; round++) {
    size_t off = 0;
    int count = 1 + rand() % 40;
    for (int i = 0; i < count; i++) {
      uint32_t kind = mix[(size_t)rand() % n];
      int junk = rand() % 50 == 0;
      off = put(buf, off, kind, test_size(kind));
      if (junk) {
        uint32_t bad = (uint32_t)(rand() % 3 == 0 ? 0 : 56 + rand() % 2000);
        memcpy(buf + off - test_size(kind), &bad, 4);
      }
    }
    size_t cut = off - (rand() % 4 == 0 ? (size_t)(rand() % 64) : 0);
    snprintf(label, sizeof(label), "random %d", round);
    compare(real, fake, buf, cut, label);
  }

  /* NULL arguments. */
  CUpti_Activity *r = NULL;
  CHECK(real->next(NULL, 100, &r) == fake->next(NULL, 100, &r), "NULL buffer codes differ");
  CHECK(fake->next(NULL, 100, &r) == CUPTI_ERROR_INVALID_PARAMETER, "NULL buffer");
  CHECK(real->next(buf, 100, NULL) == fake->next(buf, 100, NULL), "NULL record codes differ");
}

static void test_strings(const struct lib *real, const struct lib *fake)
{
  for (int c = 0; c <= 61; c++) {
    const char *a = NULL, *b = NULL;
    CUptiResult ra = real->result_string((CUptiResult)c, &a);
    CUptiResult rb = fake->result_string((CUptiResult)c, &b);
    CHECK(ra == rb, "cuptiGetResultString(%d): %d vs %d", c, ra, rb);
    CHECK(a && b && strcmp(a, b) == 0, "cuptiGetResultString(%d): '%s' vs '%s'", c, a ? a : "",
          b ? b : "");
    ra = real->error_message((CUptiResult)c, &a);
    rb = fake->error_message((CUptiResult)c, &b);
    CHECK(ra == rb, "cuptiGetErrorMessage(%d): %d vs %d", c, ra, rb);
  }
  const char *a = NULL, *b = NULL;
  CUptiResult ra = real->result_string(CUPTI_ERROR_UNKNOWN, &a);
  CUptiResult rb = fake->result_string(CUPTI_ERROR_UNKNOWN, &b);
  CHECK(ra == rb && a && b && strcmp(a, b) == 0, "cuptiGetResultString(999)");
  CHECK(real->result_string(CUPTI_SUCCESS, NULL) == fake->result_string(CUPTI_SUCCESS, NULL),
        "cuptiGetResultString(NULL) codes differ");
}

static void test_callback_names(const struct lib *real, const struct lib *fake)
{
  static const struct {
    CUpti_CallbackDomain domain;
    uint32_t size;
  } domains[] = {
      {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_SIZE},
      {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_SIZE},
      {CUPTI_CB_DOMAIN_RESOURCE, 4},
  };
  for (size_t d = 0; d < sizeof(domains) / sizeof(domains[0]); d++) {
    for (uint32_t cb = 0; cb < domains[d].size + 3; cb++) {
      const char *a = NULL, *b = NULL;
      CUptiResult ra = real->callback_name(domains[d].domain, cb, &a);
      CUptiResult rb = fake->callback_name(domains[d].domain, cb, &b);
      CHECK(ra == rb, "cuptiGetCallbackName(%d, %u): %d vs %d", domains[d].domain, cb, ra, rb);
      if (ra == CUPTI_SUCCESS && rb == CUPTI_SUCCESS)
        CHECK(strcmp(a, b) == 0, "cuptiGetCallbackName(%d, %u): '%s' vs '%s'",
              domains[d].domain, cb, a, b);
    }
  }
}

static void test_clock_version(const struct lib *real, const struct lib *fake)
{
  uint64_t t0 = realtime(), a = 0, b = 0;
  CHECK(real->timestamp(&a) == CUPTI_SUCCESS, "real cuptiGetTimestamp");
  CHECK(fake->timestamp(&b) == CUPTI_SUCCESS, "fake cuptiGetTimestamp");
  uint64_t t1 = realtime();
  CHECK(a >= t0 && a <= t1, "real timestamp %llu outside [%llu, %llu]", (unsigned long long)a,
        (unsigned long long)t0, (unsigned long long)t1);
  CHECK(b >= t0 && b <= t1, "fake timestamp %llu outside [%llu, %llu]", (unsigned long long)b,
        (unsigned long long)t0, (unsigned long long)t1);
  CHECK(real->timestamp(NULL) == fake->timestamp(NULL), "cuptiGetTimestamp(NULL) codes differ");
  uint32_t va = 0, vb = 0;
  CHECK(real->version(&va) == CUPTI_SUCCESS && fake->version(&vb) == CUPTI_SUCCESS,
        "cuptiGetVersion");
  CHECK(va == vb && vb == CUPTI_API_VERSION, "cuptiGetVersion: %u vs %u", va, vb);
}

int main(void)
{
  unsetenv("FAKEGPU_CUPTI_VERSION");
  void *hr = dlmopen(LM_ID_NEWLM, REAL_CUPTI, RTLD_NOW | RTLD_LOCAL);
  if (!hr) {
    fprintf(stderr, "FAIL: cannot load the real CUPTI %s: %s\n", REAL_CUPTI, dlerror());
    return 1;
  }
  void *hf = dlopen(FAKE_CUPTI, RTLD_NOW | RTLD_LOCAL);
  if (!hf) {
    fprintf(stderr, "FAIL: cannot load the CUPTI double %s: %s\n", FAKE_CUPTI, dlerror());
    return 1;
  }
  CHECK(hr != hf, "the two libraries resolved to one handle");
  struct lib real = load(hr, "real"), fake = load(hf, "double");
  CHECK((void *)real.next != (void *)fake.next, "the two libraries share cuptiActivityGetNextRecord");
  test_records(&real, &fake);
  test_strings(&real, &fake);
  test_callback_names(&real, &fake);
  test_clock_version(&real, &fake);
  if (g_failures) {
    fprintf(stderr, "fakegpu_fidelity: %d failures\n", g_failures);
    return 1;
  }
  printf("fakegpu_fidelity: ok\n");
  return 0;
}
