/* Driver start-up: cuInit with CUDA_INJECTION64_PATH, devices, versions, errors, proc lookup. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tests/fakegpu/driver.h"
#include "tests/fakegpu/fg_names.h"

pthread_mutex_t fg_lock = PTHREAD_MUTEX_INITIALIZER;
struct fg_device fg_devices[FG_MAX_DEVICES];
int fg_device_count;

static pthread_once_t g_init_once = PTHREAD_ONCE_INIT;
static atomic_int g_init_started;
static __thread int t_in_init;
static int g_log = -1;

int fg_log_enabled(void)
{
  if (g_log < 0) {
    const char *v = getenv("FAKEGPU_LOG");
    g_log = v && *v && strcmp(v, "0") != 0;
  }
  return g_log;
}

/* stderr through write(2): this runs inside other programs' callbacks, where stdio buffers
 * and locks are not ours to take. */
void fg_log(const char *fmt, ...)
{
  if (!fg_log_enabled())
    return;
  char buf[512];
  int n = snprintf(buf, sizeof(buf), "fakegpu: ");
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(buf + n, sizeof(buf) - (size_t)n - 1, fmt, ap);
  va_end(ap);
  if (m < 0)
    return;
  n += m < (int)(sizeof(buf) - (size_t)n - 1) ? m : (int)(sizeof(buf) - (size_t)n - 2);
  buf[n++] = '\n';
  ssize_t w = write(2, buf, (size_t)n);
  (void)w;
}

uint64_t fg_realtime_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void fg_sleep_until(uint64_t t)
{
  while (fg_realtime_ns() < t) {
    struct timespec ts = {(time_t)(t / 1000000000ull), (long)(t % 1000000000ull)};
    clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &ts, NULL);
  }
}

int fg_in_injection(void)
{
  return t_in_init;
}

int fg_initialized(void)
{
  return atomic_load(&g_init_started);
}

/* FAKEGPU_DEVICE_MEM: each device's memory in MiB (default 80 GiB), so that tests can run a
 * device out of memory with small allocations (each is backed by host memory). */
static uint64_t device_mem(void)
{
  const char *v = getenv("FAKEGPU_DEVICE_MEM_MIB");
  char *end;
  unsigned long long mib;

  if (!v || !*v)
    return 80ull << 30;
  mib = strtoull(v, &end, 10);
  if (*end || mib == 0 || mib > (1ull << 24)) {
    fg_log("FAKEGPU_DEVICE_MEM_MIB=%s is not a number of MiB in 1..16777216; using 81920", v);
    return 80ull << 30;
  }
  return (uint64_t)mib << 20;
}

static void setup_devices(void)
{
  int n = 2;
  uint64_t mem = device_mem();
  const char *v = getenv("FAKEGPU_DEVICES");
  if (v && *v) {
    char *end;
    long x = strtol(v, &end, 10);
    if (*end || x < 0 || x > FG_MAX_DEVICES)
      fg_log("FAKEGPU_DEVICES=%s is not a number in 0..%d; using 2", v, FG_MAX_DEVICES);
    else
      n = (int)x;
  }
  for (int i = 0; i < n; i++) {
    struct fg_device *d = &fg_devices[i];
    snprintf(d->name, sizeof(d->name), "Fake H100 (simulated)");
    memcpy(d->uuid.bytes, "FAKEGPU-UUID-00", 15);
    d->uuid.bytes[15] = (char)i;
    d->total_mem = mem;
  }
  fg_device_count = n;
}

/* The driver's injection contract (cupti.md 1.1): dlopen, dlsym InitializeInjection, call it
 * once on the thread running the first cuInit; failures leave the program running untraced. */
static void inject(void)
{
  const char *path = getenv("CUDA_INJECTION64_PATH");
  if (!path || !*path)
    return;
  void *h = dlopen(path, RTLD_NOW);
  if (!h) {
    fg_log("CUDA_INJECTION64_PATH=%s: cannot load (%s); running without it", path, dlerror());
    return;
  }
  int (*init)(void);
  *(void **)&init = dlsym(h, "InitializeInjection");
  if (!init) {
    fg_log("CUDA_INJECTION64_PATH=%s: no InitializeInjection symbol; running without it", path);
    return;
  }
  int r = init();
  if (r == 0)
    fg_log("CUDA_INJECTION64_PATH=%s: InitializeInjection returned 0", path);
}

static void do_init(void)
{
  setup_devices();
  atomic_store(&g_init_started, 1);
  t_in_init = 1;
  inject();
  t_in_init = 0;
  fg_resource(CUPTI_CBID_RESOURCE_CU_INIT_FINISHED, NULL, NULL, NULL);
  fg_device_records();
}

FG_API CUresult CUDAAPI cuInit(unsigned int Flags)
{
  FG_ENTER(cuInit, NULL, Flags);
  if (Flags != 0)
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  /* InitializeInjection must not call CUDA: fg_call_enter aborts on it (cupti.md 1.1). */
  if (!t_in_init)
    pthread_once(&g_init_once, do_init);
  return FG_EXIT(CUDA_SUCCESS);
}

FG_API CUresult CUDAAPI cuDriverGetVersion(int *driverVersion)
{
  FG_ENTER(cuDriverGetVersion, NULL, driverVersion);
  if (!driverVersion)
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  *driverVersion = CUDA_VERSION;
  return FG_EXIT(CUDA_SUCCESS);
}

static CUresult check_device(CUdevice dev)
{
  if (!fg_initialized())
    return CUDA_ERROR_NOT_INITIALIZED;
  if (dev < 0 || dev >= fg_device_count)
    return CUDA_ERROR_INVALID_DEVICE;
  return CUDA_SUCCESS;
}

FG_API CUresult CUDAAPI cuDeviceGetCount(int *count)
{
  FG_ENTER(cuDeviceGetCount, NULL, count);
  if (!fg_initialized())
    return FG_EXIT(CUDA_ERROR_NOT_INITIALIZED);
  if (!count)
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  *count = fg_device_count;
  return FG_EXIT(CUDA_SUCCESS);
}

FG_API CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal)
{
  FG_ENTER(cuDeviceGet, NULL, device, ordinal);
  CUresult r = check_device(ordinal);
  if (r == CUDA_SUCCESS && !device)
    r = CUDA_ERROR_INVALID_VALUE;
  if (r == CUDA_SUCCESS)
    *device = ordinal;
  return FG_EXIT(r);
}

FG_API CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice dev)
{
  FG_ENTER(cuDeviceGetName, NULL, name, len, dev);
  CUresult r = check_device(dev);
  if (r == CUDA_SUCCESS && (!name || len <= 0))
    r = CUDA_ERROR_INVALID_VALUE;
  if (r == CUDA_SUCCESS)
    snprintf(name, (size_t)len, "%s", fg_devices[dev].name);
  return FG_EXIT(r);
}

FG_API CUresult CUDAAPI cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
  FG_ENTER(cuDeviceTotalMem_v2, NULL, bytes, dev);
  CUresult r = check_device(dev);
  if (r == CUDA_SUCCESS && !bytes)
    r = CUDA_ERROR_INVALID_VALUE;
  if (r == CUDA_SUCCESS)
    *bytes = fg_devices[dev].total_mem;
  return FG_EXIT(r);
}

static CUresult get_uuid(CUuuid *uuid, CUdevice dev)
{
  CUresult r = check_device(dev);
  if (r == CUDA_SUCCESS && !uuid)
    r = CUDA_ERROR_INVALID_VALUE;
  if (r == CUDA_SUCCESS)
    *uuid = fg_devices[dev].uuid;
  return r;
}

/* cuda.h maps cuDeviceGetUuid to _v2; the driver still exports the old name. */
#undef cuDeviceGetUuid
FG_API CUresult CUDAAPI cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
  FG_ENTER(cuDeviceGetUuid, NULL, uuid, dev);
  return FG_EXIT(get_uuid(uuid, dev));
}

FG_API CUresult CUDAAPI cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
  FG_ENTER(cuDeviceGetUuid_v2, NULL, uuid, dev);
  return FG_EXIT(get_uuid(uuid, dev));
}

/* An H100 SXM's values, enough for what runtimes and agents ask. */
static int attribute(CUdevice_attribute a, CUdevice dev)
{
  switch (a) {
  case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
    return 1024;
  case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
    return 1024;
  case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y:
    return 1024;
  case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z:
    return 64;
  case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X:
    return 2147483647;
  case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
    return 65535;
  case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z:
    return 65535;
  case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK:
    return 49152;
  case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY:
    return 65536;
  case CU_DEVICE_ATTRIBUTE_WARP_SIZE:
    return 32;
  case CU_DEVICE_ATTRIBUTE_MAX_PITCH:
    return 2147483647;
  case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK:
    return 65536;
  case CU_DEVICE_ATTRIBUTE_CLOCK_RATE:
    return 1980000;
  case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT:
    return 512;
  case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
    return 132;
  case CU_DEVICE_ATTRIBUTE_INTEGRATED:
    return 0;
  case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:
    return 1;
  case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS:
    return 1;
  case CU_DEVICE_ATTRIBUTE_ECC_ENABLED:
    return 1;
  case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID:
    return 0x18 + dev;
  case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID:
    return 0;
  case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID:
    return 0;
  case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE:
    return 2619000;
  case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH:
    return 5120;
  case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE:
    return 52428800;
  case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR:
    return 2048;
  case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT:
    return 5;
  case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
    return 1;
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
    return 9;
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
    return 0;
  case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR:
    return 233472;
  case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR:
    return 65536;
  case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
    return 1;
  case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD:
    return 0;
  case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH:
    return 1;
  case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
    return 232448;
  case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR:
    return 32;
  case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
    return 1;
  case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
    return 1;
  case CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH:
    return 1;
  case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE:
    return CU_COMPUTEMODE_DEFAULT;
  default:
    return 0;
  }
}

FG_API CUresult CUDAAPI cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
  FG_ENTER(cuDeviceGetAttribute, NULL, pi, attrib, dev);
  CUresult r = check_device(dev);
  if (r == CUDA_SUCCESS && (!pi || (int)attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX))
    r = CUDA_ERROR_INVALID_VALUE;
  if (r == CUDA_SUCCESS)
    *pi = attribute(attrib, dev);
  return FG_EXIT(r);
}

FG_API CUresult CUDAAPI cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev)
{
  FG_ENTER(cuDeviceCanAccessPeer, NULL, canAccessPeer, dev, peerDev);
  CUresult r = check_device(dev);
  if (r == CUDA_SUCCESS)
    r = check_device(peerDev);
  if (r == CUDA_SUCCESS && !canAccessPeer)
    r = CUDA_ERROR_INVALID_VALUE;
  if (r == CUDA_SUCCESS)
    *canAccessPeer = dev != peerDev;
  return FG_EXIT(r);
}

static const char *result_text(CUresult e)
{
  switch (e) {
  case CUDA_SUCCESS:
    return "no error";
  case CUDA_ERROR_INVALID_VALUE:
    return "invalid argument";
  case CUDA_ERROR_OUT_OF_MEMORY:
    return "out of memory";
  case CUDA_ERROR_NOT_INITIALIZED:
    return "initialization error";
  case CUDA_ERROR_INVALID_DEVICE:
    return "invalid device ordinal";
  case CUDA_ERROR_INVALID_IMAGE:
    return "device kernel image is invalid";
  case CUDA_ERROR_INVALID_CONTEXT:
    return "invalid device context";
  case CUDA_ERROR_FILE_NOT_FOUND:
    return "file not found";
  case CUDA_ERROR_INVALID_HANDLE:
    return "invalid resource handle";
  case CUDA_ERROR_NOT_FOUND:
    return "named symbol not found";
  case CUDA_ERROR_NOT_READY:
    return "device not ready";
  case CUDA_ERROR_NOT_SUPPORTED:
    return "operation not supported";
  case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED:
    return "operation not permitted when stream is capturing";
  default:
    return NULL;
  }
}

FG_API CUresult CUDAAPI cuGetErrorName(CUresult error, const char **pStr)
{
  FG_ENTER(cuGetErrorName, NULL, error, pStr);
  if (!pStr)
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  *pStr = fg_cuda_result_name((int)error);
  return FG_EXIT(*pStr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE);
}

FG_API CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr)
{
  FG_ENTER(cuGetErrorString, NULL, error, pStr);
  if (!pStr)
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  const char *name = fg_cuda_result_name((int)error);
  const char *text = result_text(error);
  *pStr = text ? text : name;
  return FG_EXIT(*pStr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE);
}

static void *own_symbol(const char *name)
{
  static void *self;
  if (!self) {
    Dl_info info;
    if (!dladdr((void *)cuInit, &info) || !info.dli_fname)
      return NULL;
    self = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
    if (!self)
      return NULL;
  }
  return dlsym(self, name);
}

/* The driver hands out the newest version of an entry point for the base name asked for
 * (cuMemAlloc -> cuMemAlloc_v2), and the _ptsz/_ptds one when asked for per-thread streams. */
static void *lookup_proc(const char *symbol, cuuint64_t flags)
{
  static const char *const versions[] = {"_v4", "_v3", "_v2", ""};
  static const char *const pt[] = {"_ptsz", "_ptds"};
  char name[160];
  if (strcmp(symbol, "cuGraphInstantiate") == 0)
    symbol = "cuGraphInstantiateWithFlags";
  for (size_t v = 0; v < sizeof(versions) / sizeof(versions[0]); v++) {
    if (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) {
      for (size_t i = 0; i < 2; i++) {
        snprintf(name, sizeof(name), "%s%s%s", symbol, versions[v], pt[i]);
        void *p = own_symbol(name);
        if (p)
          return p;
      }
    }
    snprintf(name, sizeof(name), "%s%s", symbol, versions[v]);
    void *p = own_symbol(name);
    if (p)
      return p;
  }
  return NULL;
}

FG_API CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                            cuuint64_t flags,
                                            CUdriverProcAddressQueryResult *symbolStatus)
{
  FG_ENTER(cuGetProcAddress_v2, NULL, symbol, pfn, cudaVersion, flags, symbolStatus);
  if (!symbol || !pfn)
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  *pfn = strncmp(symbol, "cu", 2) == 0 ? lookup_proc(symbol, flags) : NULL;
  if (symbolStatus)
    *symbolStatus = *pfn ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return FG_EXIT(*pfn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND);
}
