/* Injection library that subscribes to CUPTI like a profiler and checks what a <<<>>> launch
 * yields. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cupti.h>

/*
 * Loaded through CUDA_INJECTION64_PATH by the simulated cuInit. At exit it checks, for
 * runtime_nvcc_test.cu: the first <<<>>> launch is a RUNTIME callback with cbid
 * __cudaLaunchKernel_v13000 (505), ENTER and EXIT with one correlation id and symbolName the
 * mangled kernel name, and a CONCURRENT_KERNEL record of that kernel carries the same id; and
 * the first H2D memcpy record's runtimeCorrelationId is a cudaMemcpy_v3020 call.
 */

#define EXPECTED_KERNEL "_ZN5fgrt19fill_iotaEPii"
#define EXPECTED_COPY_BYTES (4096 * sizeof(float))
#define MAX_IDS 64

static struct {
  __typeof__(cuptiSubscribe) *subscribe;
  __typeof__(cuptiEnableDomain) *enable_domain;
  __typeof__(cuptiActivityRegisterCallbacks) *register_callbacks;
  __typeof__(cuptiActivityEnable) *activity_enable;
  __typeof__(cuptiActivityFlushAll) *flush_all;
  __typeof__(cuptiActivityGetNextRecord) *next_record;
} cupti;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint32_t launch_corr; /* first 505 ENTER */
static char launch_symbol[256];
static int launch_exit_seen;
static int other_launch_cbids; /* 211 / 506: the launch went another way */
static uint32_t memcpy_corr[MAX_IDS];
static int n_memcpy_corr;
static uint32_t kernel_record_corr;
static int kernel_records;
static uint32_t copy_record_runtime_corr;

static void CUPTIAPI on_callback(void *userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                 const void *data)
{
  (void)userdata;
  const CUpti_CallbackData *cb = data;
  if (domain != CUPTI_CB_DOMAIN_RUNTIME_API)
    return;
  pthread_mutex_lock(&lock);
  if (cbid == CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_v13000) {
    if (cb->callbackSite == CUPTI_API_ENTER && !launch_corr) {
      launch_corr = cb->correlationId;
      snprintf(launch_symbol, sizeof(launch_symbol), "%s",
               cb->symbolName ? cb->symbolName : "(null)");
    } else if (cb->callbackSite == CUPTI_API_EXIT && cb->correlationId == launch_corr) {
      launch_exit_seen = 1;
    }
  } else if (cbid == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000 ||
             cbid == CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_ptsz_v13000) {
    other_launch_cbids++;
  } else if (cbid == CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020 &&
             cb->callbackSite == CUPTI_API_ENTER && n_memcpy_corr < MAX_IDS) {
    memcpy_corr[n_memcpy_corr++] = cb->correlationId;
  }
  pthread_mutex_unlock(&lock);
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
  *size = 1 << 20;
  *buffer = aligned_alloc(8, *size);
  *max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
                                      size_t valid)
{
  (void)ctx;
  (void)stream;
  (void)size;
  CUpti_Activity *rec = NULL;
  pthread_mutex_lock(&lock);
  while (cupti.next_record(buffer, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
      const CUpti_ActivityKernel10 *k = (const void *)rec;
      if (k->name && strcmp(k->name, EXPECTED_KERNEL) == 0) {
        kernel_records++;
        if (!kernel_record_corr)
          kernel_record_corr = k->correlationId;
      }
    } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      const CUpti_ActivityMemcpy6 *m = (const void *)rec;
      if (m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_HTOD && m->bytes == EXPECTED_COPY_BYTES &&
          !copy_record_runtime_corr)
        copy_record_runtime_corr = m->runtimeCorrelationId;
    }
  }
  pthread_mutex_unlock(&lock);
  free(buffer);
}

static void check_at_exit(void)
{
  cupti.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  pthread_mutex_lock(&lock);
  const char *why = NULL;
  int copy_known = 0;
  for (int i = 0; i < n_memcpy_corr; i++)
    copy_known |= memcpy_corr[i] == copy_record_runtime_corr;
  if (!launch_corr)
    why = "no __cudaLaunchKernel_v13000 (505) ENTER callback";
  else if (!launch_exit_seen)
    why = "no 505 EXIT callback with the ENTER's correlation id";
  else if (strcmp(launch_symbol, EXPECTED_KERNEL) != 0)
    why = "505 symbolName is not the mangled kernel name";
  else if (other_launch_cbids)
    why = "launches also reported as cudaLaunchKernel / _ptsz";
  else if (kernel_records != 1)
    why = "not exactly one CONCURRENT_KERNEL record of the kernel";
  else if (kernel_record_corr != launch_corr)
    why = "the kernel record's correlationId is not the launch's";
  else if (!copy_record_runtime_corr || !copy_known)
    why = "no H2D memcpy record whose runtimeCorrelationId is a cudaMemcpy call";
  printf("cupti_check: %s: launch corr %u symbol %s exit %d, kernel records %d corr %u, "
         "memcpy runtime corr %u%s%s\n",
         why ? "FAIL" : "PASS", launch_corr, launch_symbol, launch_exit_seen, kernel_records,
         kernel_record_corr, copy_record_runtime_corr, why ? ": " : "", why ? why : "");
  fflush(stdout);
  pthread_mutex_unlock(&lock);
}

__attribute__((visibility("default"))) int InitializeInjection(void)
{
  const char *path = getenv("FAKEGPU_CHECK_CUPTI");
  void *h = dlopen(path && *path ? path : "libcupti.so.13", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    printf("cupti_check: FAIL: cannot load CUPTI: %s\n", dlerror());
    return 0;
  }
  *(void **)&cupti.subscribe = dlsym(h, "cuptiSubscribe");
  *(void **)&cupti.enable_domain = dlsym(h, "cuptiEnableDomain");
  *(void **)&cupti.register_callbacks = dlsym(h, "cuptiActivityRegisterCallbacks");
  *(void **)&cupti.activity_enable = dlsym(h, "cuptiActivityEnable");
  *(void **)&cupti.flush_all = dlsym(h, "cuptiActivityFlushAll");
  *(void **)&cupti.next_record = dlsym(h, "cuptiActivityGetNextRecord");
  CUpti_SubscriberHandle sub;
  if (!cupti.subscribe || !cupti.enable_domain || !cupti.register_callbacks ||
      !cupti.activity_enable || !cupti.flush_all || !cupti.next_record ||
      cupti.subscribe(&sub, on_callback, NULL) != CUPTI_SUCCESS ||
      cupti.enable_domain(1, sub, CUPTI_CB_DOMAIN_RUNTIME_API) != CUPTI_SUCCESS ||
      cupti.register_callbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
      cupti.activity_enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS ||
      cupti.activity_enable(CUPTI_ACTIVITY_KIND_MEMCPY) != CUPTI_SUCCESS) {
    printf("cupti_check: FAIL: CUPTI set-up failed\n");
    return 0;
  }
  atexit(check_at_exit);
  return 1;
}
