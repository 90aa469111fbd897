/* Simulated CUPTI callback API: subscription, enables, dispatch, and the hook into the driver. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fakegpu/cupti_internal.h"
#include "tests/fakegpu/fg_names.h"

/*
 * One subscriber at a time (CUDA 13.0). The enable table is read lock-free on every API
 * call; writers serialize on g_sub_lock (the client must serialize its enable calls anyway,
 * cupti.md 3.1). Callbacks run on the calling thread with no lock held.
 */

#define MAX_CBID 1024

struct CUpti_Subscriber_st {
  CUpti_CallbackFunc callback;
  void *userdata;
  char name[CUPTI_SUBSCRIBER_NAME_MAX_LEN + 16];
};

const struct fg_driver_ops *cu_drv;
struct cu_faults cu_fault;

static struct CUpti_Subscriber_st g_sub_storage;
static _Atomic(struct CUpti_Subscriber_st *) g_sub;
static atomic_uchar g_enabled[CUPTI_CB_DOMAIN_SIZE][MAX_CBID];
static pthread_mutex_t g_sub_lock = PTHREAD_MUTEX_INITIALIZER;

static uint32_t domain_size(CUpti_CallbackDomain d)
{
  switch (d) {
  case CUPTI_CB_DOMAIN_DRIVER_API: return CUPTI_DRIVER_TRACE_CBID_SIZE;
  case CUPTI_CB_DOMAIN_RUNTIME_API: return CUPTI_RUNTIME_TRACE_CBID_SIZE;
  case CUPTI_CB_DOMAIN_RESOURCE: return CUPTI_CBID_RESOURCE_SIZE;
  case CUPTI_CB_DOMAIN_SYNCHRONIZE: return CUPTI_CBID_SYNCHRONIZE_SIZE;
  case CUPTI_CB_DOMAIN_NVTX: return CUPTI_CBID_NVTX_SIZE;
  case CUPTI_CB_DOMAIN_STATE: return CUPTI_CBID_STATE_SIZE;
  default: return 0;
  }
}

int cu_subscribed(void) { return atomic_load(&g_sub) != NULL; }

/*
 * Test introspection, not a CUPTI API (the real library has none to list its enables): how
 * many callbacks of `domain` are enabled now (-1: no such domain). Read-only, so a test can
 * check that a tool switched off what it switched on (tests/capture/leak_workload.c).
 */
CU_API int fakegpu_cupti_enabled_callbacks(int domain);
CU_API int fakegpu_cupti_enabled_callbacks(int domain)
{
  int n = 0;

  if (domain <= CUPTI_CB_DOMAIN_INVALID || domain >= CUPTI_CB_DOMAIN_SIZE)
    return -1;
  for (uint32_t cbid = 0; cbid < MAX_CBID; cbid++)
    n += atomic_load_explicit(&g_enabled[domain][cbid], memory_order_relaxed) != 0;
  return n;
}

int cu_callback_enabled(CUpti_CallbackDomain domain, CUpti_CallbackId cbid)
{
  return (unsigned)domain < CUPTI_CB_DOMAIN_SIZE && cbid < MAX_CBID &&
         atomic_load_explicit(&g_enabled[domain][cbid], memory_order_relaxed) &&
         atomic_load(&g_sub) != NULL;
}

/* Depth of STREAM_DESTROY_STARTING callbacks on this thread: flushing there deadlocks the
 * real library (cupti.md 2.5, 6.2), see cu_check_deadlock_site. */
static __thread int t_stream_destroy;

int cu_in_stream_destroy_callback(void) { return t_stream_destroy > 0; }

void cu_callback(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void *data)
{
  struct CUpti_Subscriber_st *s = atomic_load(&g_sub);
  int sd = domain == CUPTI_CB_DOMAIN_RESOURCE && cbid == CUPTI_CBID_RESOURCE_STREAM_DESTROY_STARTING;
  if (!s || !s->callback)
    return;
  t_stream_destroy += sd;
  s->callback(s->userdata, domain, cbid, data);
  t_stream_destroy -= sd;
}

static int tool_active(void) { return cu_subscribed() || cu_any_kind(); }

static const struct fg_tool g_tool = {
    .active = tool_active,
    .callback_enabled = cu_callback_enabled,
    .callback = cu_callback,
    .kind_enabled = cu_kind_enabled,
    .api_enabled = cu_api_enabled,
    .api_record = cu_api_record,
    .record = cu_record,
    .now = cu_now,
    .gpu_ts = cu_gpu_ts,
};

static void read_faults(void)
{
  const char *v = getenv("FAKEGPU_CUPTI_FAULT");
  if (!v)
    return;
  char *copy = strdup(v), *save = NULL;
  if (!copy)
    return;
  for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    if (strcmp(t, "no_buffers") == 0)
      cu_fault.no_buffers = 1;
    else if (strcmp(t, "unknown_kind") == 0)
      cu_fault.unknown_kind = 1;
    else if (strcmp(t, "zero_timestamps") == 0)
      cu_fault.zero_timestamps = 1;
    else if (strcmp(t, "no_driver") == 0)
      cu_fault.no_driver = 1;
    else if (strcmp(t, "hung_flush") == 0)
      cu_fault.hung_flush = 1;
    else if (strcmp(t, "kinds_refused") == 0)
      cu_fault.kinds_refused = 1;
    else if (strcmp(t, "late_delivery") == 0)
      cu_fault.late_delivery = 1;
    else if (strcmp(t, "nvtx_needs_session") == 0)
      cu_fault.nvtx_needs_session = 1;
  }
  free(copy);
}

__attribute__((constructor)) static void cu_load(void)
{
  read_faults();
  pthread_atfork(cu_activity_atfork_prepare, cu_activity_atfork_parent,
                 cu_activity_atfork_child);
  cu_drv = fakegpu_tool_attach(&g_tool);
}

/* The driver may outlive us during exit; it must not call into an unloaded library. */
__attribute__((destructor)) static void cu_unload(void) { fakegpu_tool_attach(NULL); }

void cu_callbacks_reset(void)
{
  pthread_mutex_lock(&g_sub_lock);
  atomic_store(&g_sub, NULL);
  for (int d = 0; d < CUPTI_CB_DOMAIN_SIZE; d++)
    for (int c = 0; c < MAX_CBID; c++)
      atomic_store(&g_enabled[d][c], 0);
  pthread_mutex_unlock(&g_sub_lock);
}

static void old_name(CUpti_SubscriberParams *p, const char *name)
{
  if (p && p->oldSubscriberName && p->oldSubscriberSize > 0)
    snprintf(p->oldSubscriberName, p->oldSubscriberSize, "%s", name);
}

static CUptiResult subscribe(CUpti_SubscriberHandle *subscriber, CUpti_CallbackFunc callback,
                             void *userdata, CUpti_SubscriberParams *params)
{
  if (cu_fault.no_driver)
    return CUPTI_ERROR_UNKNOWN;
  if (!subscriber)
    return CUPTI_ERROR_INVALID_PARAMETER;
  if (params && params->structSize != CUpti_SubscriberParams_STRUCT_SIZE)
    return CUPTI_ERROR_INVALID_PARAMETER;
  const char *other = getenv("FAKEGPU_CUPTI_SUBSCRIBER");
  if (other && *other) {
    char name[CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN + 64];
    snprintf(name, sizeof(name), "CUPTI for %s", other);
    old_name(params, name);
    return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
  }
  pthread_mutex_lock(&g_sub_lock);
  struct CUpti_Subscriber_st *cur = atomic_load(&g_sub);
  if (cur) {
    old_name(params, cur->name);
    pthread_mutex_unlock(&g_sub_lock);
    return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
  }
  struct CUpti_Subscriber_st *s = &g_sub_storage;
  s->callback = callback;
  s->userdata = userdata;
  if (params && params->subscriberName)
    snprintf(s->name, sizeof(s->name), "CUPTI for %.*s", CUPTI_SUBSCRIBER_NAME_MAX_LEN,
             params->subscriberName);
  else
    snprintf(s->name, sizeof(s->name), "CUPTI");
  atomic_store(&g_sub, s);
  pthread_mutex_unlock(&g_sub_lock);
  *subscriber = s;
  return CUPTI_SUCCESS;
}

CU_API CUptiResult CUPTIAPI cuptiSubscribe(CUpti_SubscriberHandle *subscriber,
                                           CUpti_CallbackFunc callback, void *userdata)
{
  return cu_ret(subscribe(subscriber, callback, userdata, NULL));
}

CU_API CUptiResult CUPTIAPI cuptiSubscribe_v2(CUpti_SubscriberHandle *subscriber,
                                              CUpti_CallbackFunc callback, void *userdata,
                                              CUpti_SubscriberParams *pParams)
{
  return cu_ret(subscribe(subscriber, callback, userdata, pParams));
}

static int is_current(CUpti_SubscriberHandle s) { return s && s == atomic_load(&g_sub); }

CU_API CUptiResult CUPTIAPI cuptiUnsubscribe(CUpti_SubscriberHandle subscriber)
{
  if (!is_current(subscriber))
    return cu_ret(CUPTI_ERROR_INVALID_PARAMETER);
  cu_callbacks_reset();
  return CUPTI_SUCCESS;
}

CU_API CUptiResult CUPTIAPI cuptiEnableCallback(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                                CUpti_CallbackDomain domain, CUpti_CallbackId cbid)
{
  if (!is_current(subscriber) || cbid >= domain_size(domain))
    return cu_ret(CUPTI_ERROR_INVALID_PARAMETER);
  atomic_store(&g_enabled[domain][cbid], enable ? 1 : 0);
  return CUPTI_SUCCESS;
}

CU_API CUptiResult CUPTIAPI cuptiEnableDomain(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                              CUpti_CallbackDomain domain)
{
  uint32_t n = domain_size(domain);
  if (!is_current(subscriber) || !n)
    return cu_ret(CUPTI_ERROR_INVALID_PARAMETER);
  for (uint32_t c = 0; c < n; c++)
    atomic_store(&g_enabled[domain][c], enable ? 1 : 0);
  return CUPTI_SUCCESS;
}

CU_API CUptiResult CUPTIAPI cuptiEnableAllDomains(uint32_t enable, CUpti_SubscriberHandle subscriber)
{
  if (!is_current(subscriber))
    return cu_ret(CUPTI_ERROR_INVALID_PARAMETER);
  for (int d = CUPTI_CB_DOMAIN_DRIVER_API; d < CUPTI_CB_DOMAIN_SIZE; d++)
    for (uint32_t c = 0; c < domain_size((CUpti_CallbackDomain)d); c++)
      atomic_store(&g_enabled[d][c], enable ? 1 : 0);
  return CUPTI_SUCCESS;
}

CU_API CUptiResult CUPTIAPI cuptiGetCallbackState(uint32_t *enable,
                                                  CUpti_SubscriberHandle subscriber,
                                                  CUpti_CallbackDomain domain,
                                                  CUpti_CallbackId cbid)
{
  if (!enable || !is_current(subscriber) || cbid >= domain_size(domain))
    return cu_ret(CUPTI_ERROR_INVALID_PARAMETER);
  *enable = atomic_load(&g_enabled[domain][cbid]);
  return CUPTI_SUCCESS;
}

CU_API CUptiResult CUPTIAPI cuptiSupportedDomains(size_t *domainCount, CUpti_DomainTable *domainTable)
{
  static CUpti_CallbackDomain table[] = {
      CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_CB_DOMAIN_RESOURCE,
      CUPTI_CB_DOMAIN_SYNCHRONIZE, CUPTI_CB_DOMAIN_NVTX, CUPTI_CB_DOMAIN_STATE,
  };
  if (cu_fault.no_driver)
    return cu_ret(CUPTI_ERROR_UNKNOWN);
  if (!domainCount || !domainTable)
    return cu_ret(CUPTI_ERROR_INVALID_PARAMETER);
  *domainCount = sizeof(table) / sizeof(table[0]);
  *domainTable = table;
  return CUPTI_SUCCESS;
}

CU_API CUptiResult CUPTIAPI cuptiGetCallbackName(CUpti_CallbackDomain domain, uint32_t cbid,
                                                 const char **name)
{
  if (!name)
    return cu_ret(CUPTI_ERROR_INVALID_PARAMETER);
  const char *n = NULL;
  if (domain == CUPTI_CB_DOMAIN_DRIVER_API)
    n = fg_driver_cbid_name(cbid);
  else if (domain == CUPTI_CB_DOMAIN_RUNTIME_API)
    n = fg_runtime_cbid_name(cbid);
  if (!n)
    return cu_ret(CUPTI_ERROR_INVALID_PARAMETER);
  *name = n;
  return CUPTI_SUCCESS;
}
