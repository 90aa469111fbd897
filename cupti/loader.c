/* Finds and loads libcupti at run time, checks its version, and resolves the functions used. */
#define LOG_MODULE "cupti"
#include "cupti/loader.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/util/log.h"

#ifndef GPUPROF_CUPTI_LIBDIR
#define GPUPROF_CUPTI_LIBDIR ""
#endif
#ifndef GPUPROF_CUDA_ROOT
#define GPUPROF_CUDA_ROOT ""
#endif

#define CUPTI_SONAME "libcupti.so.13"
#define MAX_WHEEL_DIRS 8

struct cupti_api cupti_fn;

static void *lib_handle;
static char lib_path[PATH_MAX];
static uint32_t lib_version;

const char *cupti_loader_path(void)
{
  return lib_path;
}

uint32_t cupti_loader_version(void)
{
  return lib_version;
}

const char *cupti_result_string(CUptiResult result)
{
  const char *s = NULL;

  if (cupti_fn.GetResultString && cupti_fn.GetResultString(result, &s) == CUPTI_SUCCESS && s)
    return s;
  return "unknown CUPTI error";
}

/* name -> offset of its pointer in struct cupti_api */
static const struct {
  const char *name;
  size_t offset;
  int optional;
} symbols[] = {
#define SYM(field, name)                                                                           \
  {                                                                                                \
    name, offsetof(struct cupti_api, field), 0                                                     \
  }
#define OPT(field, name)                                                                           \
  {                                                                                                \
    name, offsetof(struct cupti_api, field), 1                                                     \
  }
    SYM(GetVersion, "cuptiGetVersion"),
    SYM(GetResultString, "cuptiGetResultString"),
    SYM(Subscribe_v2, "cuptiSubscribe_v2"),
    SYM(Unsubscribe, "cuptiUnsubscribe"),
    SYM(EnableCallback, "cuptiEnableCallback"),
    SYM(ActivityRegisterCallbacks, "cuptiActivityRegisterCallbacks"),
    SYM(ActivityEnable, "cuptiActivityEnable"),
    SYM(ActivityEnableAndDump, "cuptiActivityEnableAndDump"),
    SYM(ActivityDisable, "cuptiActivityDisable"),
    SYM(ActivityGetNextRecord, "cuptiActivityGetNextRecord"),
    SYM(ActivityGetNumDroppedRecords, "cuptiActivityGetNumDroppedRecords"),
    SYM(ActivityFlushAll, "cuptiActivityFlushAll"),
    SYM(ActivitySetAttribute, "cuptiActivitySetAttribute"),
    SYM(SetThreadIdType, "cuptiSetThreadIdType"),
    SYM(Finalize, "cuptiFinalize"),
    OPT(GetDeviceId, "cuptiGetDeviceId"),
    OPT(GetContextId, "cuptiGetContextId"),
    OPT(GetGraphNodeId, "cuptiGetGraphNodeId"),
    OPT(NvtxInitialize2, "cuptiNvtxInitialize2"),
#undef SYM
#undef OPT
};

/* "CUDA 13.0" from a CUPTI API version (xxyyzz since 13.0; small integers before). */
static void describe_version(uint32_t v, char *buf, size_t len)
{
  if (v >= 10000)
    snprintf(buf, len, "CUDA %u.%u", v / 10000, (v / 100) % 100);
  else
    snprintf(buf, len, "CUDA 12 or older");
}

/* Resolves and checks an opened library; on success it becomes the agent's CUPTI. */
static int adopt(void *handle, const char *opened_as, char *reason, size_t reason_len)
{
  struct cupti_api api;
  struct link_map *lm = NULL;
  const char *path = opened_as;
  uint32_t version = 0;
  char found[32], built[32];

  memset(&api, 0, sizeof(api));
  if (dlinfo(handle, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && lm->l_name[0])
    path = lm->l_name;

  for (size_t i = 0; i < sizeof(symbols) / sizeof(symbols[0]); i++) {
    void *fn = dlsym(handle, symbols[i].name);
    if (!fn && symbols[i].optional) {
      log_debug("%s does not export %s; allocations are accounted by context records only", path,
                symbols[i].name);
      continue;
    }
    if (!fn) {
      snprintf(reason, reason_len,
               "%s does not export %s (not a CUDA 13 CUPTI?); set GPUPROF_CUPTI_PATH to the "
               "libcupti.so.13 of a CUDA 13.0 toolkit",
               path, symbols[i].name);
      return -ENOSYS;
    }
    memcpy((char *)&api + symbols[i].offset, &fn, sizeof(fn));
  }

  if (api.GetVersion(&version) != CUPTI_SUCCESS) {
    snprintf(reason, reason_len,
             "cuptiGetVersion failed in %s; set GPUPROF_CUPTI_PATH to a working libcupti.so.13",
             path);
    return -EIO;
  }
  lib_version = version;
  snprintf(lib_path, sizeof(lib_path), "%s", path);
  /* Record layouts change between minor versions (13.2 moves to Kernel11, Device6, ...):
   * reading them with 13.0 structs would silently produce garbage, so refuse. */
  if (version / 100 != CUPTI_API_VERSION / 100) {
    describe_version(version, found, sizeof(found));
    describe_version(CUPTI_API_VERSION, built, sizeof(built));
    snprintf(reason, reason_len,
             "CUPTI at %s is version %u (%s) but this gpuprof was built for CUPTI %u (%s) and "
             "cannot read its records; use the gpuprof build made with the %s toolkit, or set "
             "GPUPROF_CUPTI_PATH to a %s libcupti.so.13",
             path, version, found, (unsigned)CUPTI_API_VERSION, built, found, built);
    return -EPROTO;
  }
  cupti_fn = api;
  lib_handle = handle;
  return 0;
}

int cupti_loader_open_path(const char *path, char *reason, size_t reason_len)
{
  void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  int ret;

  if (!handle) {
    const char *err = dlerror();
    snprintf(reason, reason_len,
             "cannot load CUPTI from %s: %s; gpuprof is inactive in this process (fix or unset "
             "GPUPROF_CUPTI_PATH)",
             path, err ? err : "unknown error");
    return -ENOENT;
  }
  ret = adopt(handle, path, reason, reason_len);
  if (ret)
    dlclose(handle); /* nothing was initialized in it: unloading is safe */
  return ret;
}

struct wheel_search {
  char dirs[MAX_WHEEL_DIRS][PATH_MAX];
  int n;
};

/* Collects ".../site-packages/" prefixes of loaded objects. Only collects: dlopen while
 * dl_iterate_phdr holds the loader's list lock is asking for a deadlock. */
static int collect_wheel_dir(struct dl_phdr_info *info, size_t size, void *arg)
{
  static const char *const markers[] = {"/site-packages/", "/dist-packages/"};
  struct wheel_search *ws = arg;
  const char *name = info->dlpi_name;

  (void)size;
  if (!name || !*name || ws->n == MAX_WHEEL_DIRS)
    return 0;
  for (int m = 0; m < 2; m++) {
    const char *hit = strstr(name, markers[m]);
    size_t len;
    if (!hit)
      continue;
    len = (size_t)(hit - name) + strlen(markers[m]);
    if (len >= PATH_MAX)
      return 0;
    for (int i = 0; i < ws->n; i++)
      if (strlen(ws->dirs[i]) == len && !strncmp(ws->dirs[i], name, len))
        return 0;
    memcpy(ws->dirs[ws->n], name, len);
    ws->dirs[ws->n][len] = '\0';
    ws->n++;
    return 0;
  }
  return 0;
}

/* The first loaded libcupti.so.<N> of another major N (a CUDA 12 or 14 application): no path
 * helps there, so the not-found line names it and says what this build works with. */
static int find_other_major(struct dl_phdr_info *info, size_t size, void *arg)
{
  char *out = arg; /* PATH_MAX */
  const char *name = info->dlpi_name, *base;

  (void)size;
  if (!name || !*name)
    return 0;
  base = strrchr(name, '/');
  base = base ? base + 1 : name;
  if (strncmp(base, "libcupti.so.", 12) || base[12] < '0' || base[12] > '9' ||
      !strcmp(base, CUPTI_SONAME))
    return 0;
  snprintf(out, PATH_MAX, "%s", name);
  return 1;
}

/* Tries one candidate. 1: not there, keep searching; else the final result of the search. */
static int try_candidate(const char *path, char *tried, size_t tried_len, char *reason,
                         size_t reason_len)
{
  void *handle;
  size_t used = strlen(tried);

  if (path[0] == '/' && access(path, F_OK) != 0)
    goto not_there;
  handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    log_debug("cannot load %s: %s", path, dlerror());
    goto not_there;
  }
  log_debug("loaded %s", path);
  {
    int ret = adopt(handle, path, reason, reason_len);
    if (ret)
      dlclose(handle);
    return ret;
  }
not_there:
  snprintf(tried + used, tried_len - used, "%s%s", used ? ", " : "", path);
  return 1;
}

/* An already loaded libcupti.so.13 (found by its soname, never loaded from disk). */
static int try_loaded(char *reason, size_t reason_len)
{
  void *handle = dlopen(CUPTI_SONAME, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  int ret;

  if (!handle)
    return 1;
  ret = adopt(handle, CUPTI_SONAME, reason, reason_len);
  if (ret)
    dlclose(handle); /* drops only the reference RTLD_NOLOAD took */
  return ret;
}

/*
 * GPUPROF_CUPTI_PATH names another file than the libcupti.so.13 the process already loaded
 * (PyTorch loads its wheel's at import, before cuInit). dlopen by path compares files, not
 * sonames, so it would map a second CUPTI next to the first: two copies hooking one driver,
 * each missing what the other was told. The loaded one is used instead, with one line.
 * 1: nothing else is loaded (or it is that very file), go on with the configured path.
 */
static int try_loaded_instead_of(const char *configured_path, char *reason, size_t reason_len)
{
  void *handle = dlopen(CUPTI_SONAME, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  struct link_map *lm = NULL;
  struct stat want, have;
  int ret;

  /* A bare name is looked up by soname too, and finds the loaded one itself. */
  if (!handle)
    return 1;
  if (!strchr(configured_path, '/') || dlinfo(handle, RTLD_DI_LINKMAP, &lm) != 0 || !lm ||
      !lm->l_name || !lm->l_name[0] ||
      (stat(configured_path, &want) == 0 && stat(lm->l_name, &have) == 0 &&
       want.st_dev == have.st_dev && want.st_ino == have.st_ino)) {
    dlclose(handle);
    return 1;
  }
  log_warn("GPUPROF_CUPTI_PATH=%s is not used: this process already loaded CUPTI from %s and "
           "a second CUPTI cannot work in one process; using the loaded one",
           configured_path, lm->l_name);
  ret = adopt(handle, CUPTI_SONAME, reason, reason_len);
  if (ret)
    dlclose(handle); /* drops only the reference RTLD_NOLOAD took */
  return ret;
}

int cupti_loader_open(const char *configured_path, int wheels_only, char *reason, size_t reason_len)
{
  static struct wheel_search ws; /* large; init runs once */
  char tried[2048] = "";
  char path[PATH_MAX];
  int ret;

  if (configured_path && configured_path[0]) {
    ret = try_loaded_instead_of(configured_path, reason, reason_len);
    if (ret != 1)
      return ret;
    return cupti_loader_open_path(configured_path, reason, reason_len);
  }

  if (wheels_only) {
    log_debug("GPUPROF_TEST_CUPTI_WHEELS_ONLY: skipping the library path and the toolkit");
    ret = try_loaded(reason, reason_len);
    if (ret != 1)
      return ret;
    goto wheels;
  }
  ret = try_candidate(CUPTI_SONAME, tried, sizeof(tried), reason, reason_len);
  if (ret != 1)
    return ret;

  if (GPUPROF_CUPTI_LIBDIR[0]) {
    snprintf(path, sizeof(path), "%s/%s", GPUPROF_CUPTI_LIBDIR, CUPTI_SONAME);
    ret = try_candidate(path, tried, sizeof(tried), reason, reason_len);
    if (ret != 1)
      return ret;
  }
  if (GPUPROF_CUDA_ROOT[0]) {
    snprintf(path, sizeof(path), "%s/extras/CUPTI/lib64/%s", GPUPROF_CUDA_ROOT, CUPTI_SONAME);
    ret = try_candidate(path, tried, sizeof(tried), reason, reason_len);
    if (ret != 1)
      return ret;
  }

wheels:
  ws.n = 0;
  dl_iterate_phdr(collect_wheel_dir, &ws);
  for (int i = 0; i < ws.n; i++) {
    static const char *const subdirs[] = {"nvidia/cu13/lib/", "nvidia/cuda_cupti/lib/"};
    for (int s = 0; s < 2; s++) {
      /* A site-packages path too long for PATH_MAX cannot be a candidate: skip it. */
      if (snprintf(path, sizeof(path), "%s%s%s", ws.dirs[i], subdirs[s], CUPTI_SONAME) >=
          (int)sizeof(path))
        continue;
      ret = try_candidate(path, tried, sizeof(tried), reason, reason_len);
      if (ret != 1)
        return ret;
    }
  }

  path[0] = '\0';
  dl_iterate_phdr(find_other_major, path);
  if (path[0]) {
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    const char *major = base + strlen("libcupti.so.");
    char built[32];
    int len = (int)strspn(major, "0123456789");

    describe_version(CUPTI_API_VERSION, built, sizeof(built));
    snprintf(reason, reason_len,
             "cannot find %s (tried %s); this process uses %s, the CUPTI of CUDA %.*s, which "
             "this gpuprof (built for %s) cannot read; gpuprof is inactive in this process; it "
             "works with CUDA 13 applications only (docs/COMPATIBILITY.md)",
             CUPTI_SONAME, tried, path, len, major, built);
    return -ENOENT;
  }
  snprintf(reason, reason_len,
           "cannot find %s (tried %s); gpuprof is inactive in this process; set "
           "GPUPROF_CUPTI_PATH to its full path (it ships with the CUDA 13 toolkit and in the "
           "nvidia-cuda-cupti wheel)",
           CUPTI_SONAME, tried);
  return -ENOENT;
}
