/* Simulated CUPTI NVTX injection: fills an NVTX module's function table, delivers NVTX callbacks. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <generated_nvtx_meta.h>

#include "tests/fakegpu/cupti_internal.h"

/*
 * What cuptiNvtxInitialize2 does with the NVTX v3 injection ABI (nvtx3/nvtxDetail/nvtxTypes.h,
 * nvtxImpl.h): it asks the module's export table for NVTX_ETID_VERSIONINFO and
 * NVTX_ETID_CALLBACKS, then GetModuleFunctionTable for the CORE, CORE2, SYNC, CUDA and CUDART
 * modules (the order the real 13.0 library asks in, tests/fakegpu/README.md "NVTX"), and
 * writes its implementations through the slot pointers. The module then calls them directly
 * (the slots the tool leaves alone become no-ops once the loader is done).
 *
 * Each implementation makes exactly one callback (no ENTER/EXIT: cupti.md 3.3), with
 * CUpti_NvtxData{functionName, functionParams, functionReturnValue} and the params structs of
 * generated_nvtx_meta.h, only while a subscriber has that NVTX cbid enabled. The return value
 * is computed before the callback, so functionReturnValue points at the value the caller gets.
 *
 * Filled: the ASCII, W and Ex forms of marks, start/end and push/pop ranges,
 * nvtxNameOsThreadA, and in CORE2 the domain versions, nvtxDomainRegisterStringA,
 * nvtxDomainCreateA and nvtxDomainDestroy. Not filled (the real library fills them, see
 * README): nvtxNameOsThreadW, nvtxDomainCreateW, the category, CUDA, CUDART and SYNC naming
 * calls: they stay no-ops here.
 */

/* Domain and registered-string handles are the double's objects; the caller only compares
 * them. One object per distinct domain name (nvtxDomainCreateA of a known name returns the
 * same handle, as the NVTX documentation describes). Never freed: handles stay valid. */
struct fg_domain {
  struct fg_domain *next;
  char name[];
};

struct fg_string {
  struct fg_string *next; /* kept reachable: handles stay valid for the process */
  struct fg_domain *domain;
  char text[];
};

static pthread_mutex_t g_nvtx_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fg_domain *g_domains;
static struct fg_string *g_strings;
static _Atomic uint64_t g_next_range_id = 1;
static __thread int t_depth; /* open push/pop ranges of this thread, all domains together */

static void deliver(CUpti_CallbackId cbid, const char *name, const void *params, const void *ret)
{
  CUpti_NvtxData d = {.functionName = name, .functionParams = params, .functionReturnValue = ret};

  if (!cu_callback_enabled(CUPTI_CB_DOMAIN_NVTX, cbid))
    return;
  /* The tool's code: a CUDA call from inside it breaks the callback rule (README). */
  if (cu_drv && cu_drv->client_code)
    cu_drv->client_code(2);
  cu_callback(CUPTI_CB_DOMAIN_NVTX, cbid, &d);
  if (cu_drv && cu_drv->client_code)
    cu_drv->client_code(0);
}

/* FAKEGPU_CUPTI_FAULT=nvtx_needs_session: where the real library crashes without a session. */
static void need_session(const char *name)
{
  if (cu_fault.nvtx_needs_session && !cu_subscribed())
    cu_fatal("%s called through CUPTI's NVTX with no CUPTI session: the real 13.0 library "
             "crashes there (tests/fakegpu/README.md \"NVTX\")",
             name);
}

static int push_depth(void) { return t_depth++; }

static int pop_depth(void)
{
  if (t_depth <= 0)
    return -1; /* nvToolsExt.h: a negative value when no range was open */
  return --t_depth;
}

static nvtxRangeId_t next_range_id(void)
{
  return atomic_fetch_add_explicit(&g_next_range_id, 1, memory_order_relaxed);
}

/* ---- CORE ---- */

static void NVTX_API fg_nvtxMarkEx(const nvtxEventAttributes_t *eventAttrib)
{
  need_session("nvtxMarkEx");
  nvtxMarkEx_params p = {eventAttrib};
  deliver(CUPTI_CBID_NVTX_nvtxMarkEx, "nvtxMarkEx", &p, NULL);
}

static void NVTX_API fg_nvtxMarkA(const char *message)
{
  need_session("nvtxMarkA");
  nvtxMarkA_params p = {message};
  deliver(CUPTI_CBID_NVTX_nvtxMarkA, "nvtxMarkA", &p, NULL);
}

static nvtxRangeId_t NVTX_API fg_nvtxRangeStartEx(const nvtxEventAttributes_t *eventAttrib)
{
  need_session("nvtxRangeStartEx");
  nvtxRangeStartEx_params p = {eventAttrib};
  nvtxRangeId_t id = next_range_id();
  deliver(CUPTI_CBID_NVTX_nvtxRangeStartEx, "nvtxRangeStartEx", &p, &id);
  return id;
}

static nvtxRangeId_t NVTX_API fg_nvtxRangeStartA(const char *message)
{
  need_session("nvtxRangeStartA");
  nvtxRangeStartA_params p = {message};
  nvtxRangeId_t id = next_range_id();
  deliver(CUPTI_CBID_NVTX_nvtxRangeStartA, "nvtxRangeStartA", &p, &id);
  return id;
}

static void NVTX_API fg_nvtxRangeEnd(nvtxRangeId_t id)
{
  need_session("nvtxRangeEnd");
  nvtxRangeEnd_params p = {id};
  deliver(CUPTI_CBID_NVTX_nvtxRangeEnd, "nvtxRangeEnd", &p, NULL);
}

static int NVTX_API fg_nvtxRangePushEx(const nvtxEventAttributes_t *eventAttrib)
{
  need_session("nvtxRangePushEx");
  nvtxRangePushEx_params p = {eventAttrib};
  int r = push_depth();
  deliver(CUPTI_CBID_NVTX_nvtxRangePushEx, "nvtxRangePushEx", &p, &r);
  return r;
}

static int NVTX_API fg_nvtxRangePushA(const char *message)
{
  need_session("nvtxRangePushA");
  nvtxRangePushA_params p = {message};
  int r = push_depth();
  deliver(CUPTI_CBID_NVTX_nvtxRangePushA, "nvtxRangePushA", &p, &r);
  return r;
}

static int NVTX_API fg_nvtxRangePop(void)
{
  need_session("nvtxRangePop");
  nvtxRangePop_params p = {NULL};
  int r = pop_depth();
  deliver(CUPTI_CBID_NVTX_nvtxRangePop, "nvtxRangePop", &p, &r);
  return r;
}

static void NVTX_API fg_nvtxMarkW(const wchar_t *message)
{
  need_session("nvtxMarkW");
  nvtxMarkW_params p = {message};
  deliver(CUPTI_CBID_NVTX_nvtxMarkW, "nvtxMarkW", &p, NULL);
}

static nvtxRangeId_t NVTX_API fg_nvtxRangeStartW(const wchar_t *message)
{
  need_session("nvtxRangeStartW");
  nvtxRangeStartW_params p = {message};
  nvtxRangeId_t id = next_range_id();
  deliver(CUPTI_CBID_NVTX_nvtxRangeStartW, "nvtxRangeStartW", &p, &id);
  return id;
}

static int NVTX_API fg_nvtxRangePushW(const wchar_t *message)
{
  need_session("nvtxRangePushW");
  nvtxRangePushW_params p = {message};
  int r = push_depth();
  deliver(CUPTI_CBID_NVTX_nvtxRangePushW, "nvtxRangePushW", &p, &r);
  return r;
}

static void NVTX_API fg_nvtxNameOsThreadA(uint32_t threadId, const char *name)
{
  need_session("nvtxNameOsThreadA");
  nvtxNameOsThreadA_params p = {threadId, name};
  deliver(CUPTI_CBID_NVTX_nvtxNameOsThreadA, "nvtxNameOsThreadA", &p, NULL);
}

/* ---- CORE2 (domains) ---- */

static void NVTX_API fg_nvtxDomainMarkEx(nvtxDomainHandle_t domain,
                                         const nvtxEventAttributes_t *eventAttrib)
{
  need_session("nvtxDomainMarkEx");
  nvtxDomainMarkEx_params p = {domain, {eventAttrib}};
  deliver(CUPTI_CBID_NVTX_nvtxDomainMarkEx, "nvtxDomainMarkEx", &p, NULL);
}

static nvtxRangeId_t NVTX_API fg_nvtxDomainRangeStartEx(nvtxDomainHandle_t domain,
                                                        const nvtxEventAttributes_t *eventAttrib)
{
  need_session("nvtxDomainRangeStartEx");
  nvtxDomainRangeStartEx_params p = {domain, {eventAttrib}};
  nvtxRangeId_t id = next_range_id();
  deliver(CUPTI_CBID_NVTX_nvtxDomainRangeStartEx, "nvtxDomainRangeStartEx", &p, &id);
  return id;
}

static void NVTX_API fg_nvtxDomainRangeEnd(nvtxDomainHandle_t domain, nvtxRangeId_t id)
{
  need_session("nvtxDomainRangeEnd");
  nvtxDomainRangeEnd_params p = {domain, {id}};
  deliver(CUPTI_CBID_NVTX_nvtxDomainRangeEnd, "nvtxDomainRangeEnd", &p, NULL);
}

static int NVTX_API fg_nvtxDomainRangePushEx(nvtxDomainHandle_t domain,
                                             const nvtxEventAttributes_t *eventAttrib)
{
  need_session("nvtxDomainRangePushEx");
  nvtxDomainRangePushEx_params p = {domain, {eventAttrib}};
  int r = push_depth();
  deliver(CUPTI_CBID_NVTX_nvtxDomainRangePushEx, "nvtxDomainRangePushEx", &p, &r);
  return r;
}

static int NVTX_API fg_nvtxDomainRangePop(nvtxDomainHandle_t domain)
{
  need_session("nvtxDomainRangePop");
  nvtxDomainRangePop_params p = {domain};
  int r = pop_depth();
  deliver(CUPTI_CBID_NVTX_nvtxDomainRangePop, "nvtxDomainRangePop", &p, &r);
  return r;
}

static nvtxStringHandle_t NVTX_API fg_nvtxDomainRegisterStringA(nvtxDomainHandle_t domain,
                                                                const char *string)
{
  nvtxDomainRegisterStringA_params p = {domain, string};
  size_t len = string ? strlen(string) : 0;
  struct fg_string *s = malloc(sizeof(*s) + len + 1);
  nvtxStringHandle_t h = NULL;

  if (s) {
    s->domain = (struct fg_domain *)domain;
    memcpy(s->text, string ? string : "", len + 1);
    pthread_mutex_lock(&g_nvtx_lock);
    s->next = g_strings;
    g_strings = s;
    pthread_mutex_unlock(&g_nvtx_lock);
    h = (nvtxStringHandle_t)s;
  }
  deliver(CUPTI_CBID_NVTX_nvtxDomainRegisterStringA, "nvtxDomainRegisterStringA", &p, &h);
  return h;
}

static nvtxDomainHandle_t NVTX_API fg_nvtxDomainCreateA(const char *name)
{
  nvtxDomainCreateA_params p = {name};
  const char *n = name ? name : "";
  struct fg_domain *d;
  nvtxDomainHandle_t h;

  pthread_mutex_lock(&g_nvtx_lock);
  for (d = g_domains; d; d = d->next)
    if (!strcmp(d->name, n))
      break;
  if (!d && (d = malloc(sizeof(*d) + strlen(n) + 1))) {
    strcpy(d->name, n);
    d->next = g_domains;
    g_domains = d;
  }
  pthread_mutex_unlock(&g_nvtx_lock);
  h = (nvtxDomainHandle_t)d;
  deliver(CUPTI_CBID_NVTX_nvtxDomainCreateA, "nvtxDomainCreateA", &p, &h);
  return h;
}

static void NVTX_API fg_nvtxDomainDestroy(nvtxDomainHandle_t domain)
{
  nvtxDomainDestroy_params p = {domain};
  deliver(CUPTI_CBID_NVTX_nvtxDomainDestroy, "nvtxDomainDestroy", &p, NULL);
}

/* ---- the injection entry points ---- */

struct slot {
  unsigned index;
  NvtxFunctionPointer fn;
};

#define FN(f) ((NvtxFunctionPointer)(void (*)(void))(f))

static const struct slot core_slots[] = {
    {NVTX_CBID_CORE_MarkEx, FN(fg_nvtxMarkEx)},
    {NVTX_CBID_CORE_MarkA, FN(fg_nvtxMarkA)},
    {NVTX_CBID_CORE_RangeStartEx, FN(fg_nvtxRangeStartEx)},
    {NVTX_CBID_CORE_RangeStartA, FN(fg_nvtxRangeStartA)},
    {NVTX_CBID_CORE_RangeEnd, FN(fg_nvtxRangeEnd)},
    {NVTX_CBID_CORE_RangePushEx, FN(fg_nvtxRangePushEx)},
    {NVTX_CBID_CORE_RangePushA, FN(fg_nvtxRangePushA)},
    {NVTX_CBID_CORE_RangePop, FN(fg_nvtxRangePop)},
    {NVTX_CBID_CORE_NameOsThreadA, FN(fg_nvtxNameOsThreadA)},
    {NVTX_CBID_CORE_MarkW, FN(fg_nvtxMarkW)},
    {NVTX_CBID_CORE_RangeStartW, FN(fg_nvtxRangeStartW)},
    {NVTX_CBID_CORE_RangePushW, FN(fg_nvtxRangePushW)},
};

static const struct slot core2_slots[] = {
    {NVTX_CBID_CORE2_DomainMarkEx, FN(fg_nvtxDomainMarkEx)},
    {NVTX_CBID_CORE2_DomainRangeStartEx, FN(fg_nvtxDomainRangeStartEx)},
    {NVTX_CBID_CORE2_DomainRangeEnd, FN(fg_nvtxDomainRangeEnd)},
    {NVTX_CBID_CORE2_DomainRangePushEx, FN(fg_nvtxDomainRangePushEx)},
    {NVTX_CBID_CORE2_DomainRangePop, FN(fg_nvtxDomainRangePop)},
    {NVTX_CBID_CORE2_DomainRegisterStringA, FN(fg_nvtxDomainRegisterStringA)},
    {NVTX_CBID_CORE2_DomainCreateA, FN(fg_nvtxDomainCreateA)},
    {NVTX_CBID_CORE2_DomainDestroy, FN(fg_nvtxDomainDestroy)},
};

/* 0 if the module gave a table for `module` and every slot of `slots` could be written. */
static int fill(const NvtxExportTableCallbacks *cb, NvtxCallbackModule module,
                const struct slot *slots, size_t n)
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

/*
 * pfnGetExportTable: the module's nvtxGetExportTable (NvtxGetExportTableFunc_t, passed as a
 * void * in the undeclared CUPTI prototype). Fails with INVALID_PARAMETER for a NULL pointer
 * or a module without a callbacks table, and with UNKNOWN under FAKEGPU_CUPTI_FAULT=no_driver
 * (the double's stand-in for "CUPTI cannot initialize": the real library without a driver
 * does fill the slots and then crashes inside them, README "NVTX", which a double must not).
 */
CU_API CUptiResult CUPTIAPI cuptiNvtxInitialize2(void *pfnGetExportTable)
{
  NvtxGetExportTableFunc_t get = (NvtxGetExportTableFunc_t)pfnGetExportTable;
  const NvtxExportTableCallbacks *cb;
  const NvtxExportTableVersionInfo *vi;

  if (cu_fault.no_driver)
    return cu_ret(CUPTI_ERROR_UNKNOWN);
  if (!get)
    return cu_ret(CUPTI_ERROR_INVALID_PARAMETER);
  vi = get(NVTX_ETID_VERSIONINFO);
  if (vi && vi->struct_size >= sizeof(*vi) && vi->SetInjectionNvtxVersion)
    vi->SetInjectionNvtxVersion(NVTX_VERSION);
  cb = get(NVTX_ETID_CALLBACKS);
  if (!cb || cb->struct_size < sizeof(*cb) || !cb->GetModuleFunctionTable)
    return cu_ret(CUPTI_ERROR_INVALID_PARAMETER);
  if (fill(cb, NVTX_CB_MODULE_CORE, core_slots, sizeof(core_slots) / sizeof(core_slots[0])))
    return cu_ret(CUPTI_ERROR_INVALID_PARAMETER);
  /* NVTX v1/v2 modules have no CORE2 table: their domain calls do not exist. */
  fill(cb, NVTX_CB_MODULE_CORE2, core2_slots, sizeof(core2_slots) / sizeof(core2_slots[0]));
  /* The real library asks for these next, in this order, and fills some of their slots;
   * the double asks the same and fills none (their calls stay no-ops). */
  fill(cb, NVTX_CB_MODULE_SYNC, NULL, 0);
  fill(cb, NVTX_CB_MODULE_CUDA, NULL, 0);
  fill(cb, NVTX_CB_MODULE_CUDART, NULL, 0);
  return CUPTI_SUCCESS;
}

/* The NVTX v1/v2 loader and the payload extension are not simulated (README "NVTX"). */
CU_API CUptiResult CUPTIAPI cuptiNvtxInitialize(void *pfnGetExportTable)
{
  (void)pfnGetExportTable;
  return cu_ret(CUPTI_ERROR_NOT_SUPPORTED);
}

CU_API CUptiResult CUPTIAPI cuptiNvtxExtensionInitialize(void *moduleInfo)
{
  (void)moduleInfo;
  return cu_ret(CUPTI_ERROR_NOT_SUPPORTED);
}

/* libcupti.so.13 exports these too, so NVTX_INJECTION64_PATH can name the library itself. */
CU_API int InitializeInjectionNvtx2(void *pfnGetExportTable);
CU_API int InitializeInjectionNvtx2(void *pfnGetExportTable)
{
  return cuptiNvtxInitialize2(pfnGetExportTable) == CUPTI_SUCCESS;
}
