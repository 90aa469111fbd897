/* Modules, libraries, functions and kernel launches; the kernel duration model. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fakegpu/driver.h"
#include "tests/fakegpu/fakegpu.h"
#include "tests/fakegpu/image.h"

#define FUNC_MAGIC 0x46554e43u
#define MODULE_MAGIC 0x4d4f4455u
#define LIBRARY_MAGIC 0x4c494252u

struct fg_module {
  uint32_t magic;
  uint32_t id;
  int nfuncs;
  struct fg_func *funcs;
  struct fg_module *next;
};

struct fg_library {
  uint32_t magic;
  struct fg_module *module;
};

static struct fg_module *g_modules; /* every module ever loaded: functions outlive unload */
static atomic_uint g_module_id;

/* ---- interned names: kernel records point at them until the process ends ---- */

struct name {
  struct name *next;
  char s[];
};

static struct name *g_names;
static pthread_mutex_t g_names_lock = PTHREAD_MUTEX_INITIALIZER;

const char *fg_intern(const char *s)
{
  pthread_mutex_lock(&g_names_lock);
  for (struct name *n = g_names; n; n = n->next) {
    if (strcmp(n->s, s) == 0) {
      pthread_mutex_unlock(&g_names_lock);
      return n->s;
    }
  }
  size_t len = strlen(s);
  struct name *n = malloc(sizeof(*n) + len + 1);
  if (n) {
    memcpy(n->s, s, len + 1);
    n->next = g_names;
    g_names = n;
  }
  pthread_mutex_unlock(&g_names_lock);
  return n ? n->s : NULL;
}

/* ---- kernel durations ---- */

struct override {
  const char *name; /* interned; NULL for the default */
  uint64_t ns;
  struct override *next;
};

static struct override *g_overrides;
static pthread_mutex_t g_dur_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t g_dur_once = PTHREAD_ONCE_INIT;

static void set_override(const char *name, uint64_t ns)
{
  const char *key = name ? fg_intern(name) : NULL;
  if (name && !key)
    return;
  pthread_mutex_lock(&g_dur_lock);
  struct override **pp = &g_overrides;
  while (*pp && (*pp)->name != key)
    pp = &(*pp)->next;
  if (*pp && ns == 0) {
    struct override *o = *pp;
    *pp = o->next;
    free(o);
  } else if (*pp) {
    (*pp)->ns = ns;
  } else if (ns) {
    struct override *o = malloc(sizeof(*o));
    if (o) {
      *o = (struct override){key, ns, g_overrides};
      g_overrides = o;
    }
  }
  pthread_mutex_unlock(&g_dur_lock);
}

/* FAKEGPU_KERNEL_NS="default=NS,NAME=NS,...". A bad entry is reported and skipped. */
static void parse_env(void)
{
  const char *v = getenv("FAKEGPU_KERNEL_NS");
  if (!v || !*v)
    return;
  char *copy = strdup(v), *save = NULL;
  if (!copy)
    return;
  for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    char *eq = strrchr(tok, '='), *end;
    unsigned long long ns = eq ? strtoull(eq + 1, &end, 10) : 0;
    if (!eq || eq == tok || !eq[1] || *end) {
      fg_log("FAKEGPU_KERNEL_NS: entry '%s' is not NAME=NS; ignored", tok);
      continue;
    }
    *eq = 0;
    set_override(strcmp(tok, "default") == 0 ? NULL : tok, ns);
  }
  free(copy);
}

FG_API void fakegpu_set_kernel_duration_ns(const char *name, uint64_t ns)
{
  pthread_once(&g_dur_once, parse_env);
  set_override(name, ns);
}

uint64_t fg_kernel_duration(const struct fg_func *f, const struct fg_op *op)
{
  pthread_once(&g_dur_once, parse_env);
  uint64_t by_name = 0, dflt = 0;
  pthread_mutex_lock(&g_dur_lock);
  for (struct override *o = g_overrides; o; o = o->next) {
    if (o->name == f->name)
      by_name = o->ns;
    else if (!o->name)
      dflt = o->ns;
  }
  pthread_mutex_unlock(&g_dur_lock);
  if (by_name)
    return by_name;
  if (dflt)
    return dflt;
  uint64_t threads = (uint64_t)op->grid[0] * op->grid[1] * op->grid[2] * op->block[0] *
                     op->block[1] * op->block[2];
  return 2000 + threads / 64 + op->smem / 256;
}

/* ---- modules ---- */

struct collect {
  struct fg_func *funcs;
  int n, cap;
  int failed;
};

static int collect_fn(const struct fg_image_function *fn, void *arg)
{
  struct collect *c = arg;
  if (c->n == c->cap) {
    int cap = c->cap ? c->cap * 2 : 16;
    struct fg_func *n = realloc(c->funcs, (size_t)cap * sizeof(*n));
    if (!n) {
      c->failed = 1;
      return 1;
    }
    c->funcs = n;
    c->cap = cap;
  }
  const char *name = fg_intern(fn->name);
  if (!name) {
    c->failed = 1;
    return 1;
  }
  c->funcs[c->n++] =
      (struct fg_func){FUNC_MAGIC, name, fn->num_regs, fn->static_smem, fn->max_threads, NULL};
  return 0;
}

static struct fg_module *module_new(struct collect *c)
{
  struct fg_module *m = calloc(1, sizeof(*m));
  if (!m)
    return NULL;
  m->magic = MODULE_MAGIC;
  m->id = atomic_fetch_add(&g_module_id, 1) + 1;
  m->nfuncs = c->n;
  m->funcs = c->funcs;
  for (int i = 0; i < c->n; i++)
    m->funcs[i].module = m;
  pthread_mutex_lock(&fg_lock);
  m->next = g_modules;
  g_modules = m;
  pthread_mutex_unlock(&fg_lock);
  return m;
}

static void module_loaded(struct fg_module *m, const void *image)
{
  CUpti_ModuleResourceData d = {m->id, 0, image};
  fg_resource(CUPTI_CBID_RESOURCE_MODULE_LOADED, fg_ctx_current(), NULL, &d);
}

static CUresult load_image(const void *image, struct fg_module **out)
{
  if (!image)
    return CUDA_ERROR_INVALID_VALUE;
  struct collect c = {0};
  int rc = fg_image_functions(image, collect_fn, &c);
  if (rc < 0 || c.failed) {
    free(c.funcs);
    fg_log("module image %p not loaded (%d)", image, rc);
    return c.failed         ? CUDA_ERROR_OUT_OF_MEMORY
           : rc == -ENOTSUP ? CUDA_ERROR_NOT_SUPPORTED
                            : CUDA_ERROR_INVALID_IMAGE;
  }
  struct fg_module *m = module_new(&c);
  if (!m) {
    free(c.funcs);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  module_loaded(m, image);
  *out = m;
  return CUDA_SUCCESS;
}

static CUresult module_load(CUmodule *module, const void *image)
{
  if (!fg_initialized())
    return CUDA_ERROR_NOT_INITIALIZED;
  if (!fg_ctx_valid(fg_ctx_current()))
    return CUDA_ERROR_INVALID_CONTEXT;
  if (!module)
    return CUDA_ERROR_INVALID_VALUE;
  struct fg_module *m;
  CUresult r = load_image(image, &m);
  if (r == CUDA_SUCCESS)
    *module = (CUmodule)m;
  return r;
}

FG_API int fakegpu_module_from_names(CUmodule *mod, const char *const *names, int n)
{
  if (!mod || !names || n <= 0)
    return -EINVAL;
  struct collect c = {0};
  for (int i = 0; i < n; i++) {
    struct fg_image_function fn = {names[i], 32, 0, 1024};
    if (!names[i])
      c.failed = 1;
    else
      collect_fn(&fn, &c);
    if (c.failed) {
      free(c.funcs);
      return names[i] ? -ENOMEM : -EINVAL;
    }
  }
  struct fg_module *m = module_new(&c);
  if (!m) {
    free(c.funcs);
    return -ENOMEM;
  }
  module_loaded(m, NULL);
  *mod = (CUmodule)m;
  return 0;
}

FG_API CUresult CUDAAPI cuModuleLoadData(CUmodule *module, const void *image)
{
  FG_ENTER(cuModuleLoadData, NULL, module, image);
  return FG_EXIT(module_load(module, image));
}

FG_API CUresult CUDAAPI cuModuleLoadDataEx(CUmodule *module, const void *image,
                                           unsigned int numOptions, CUjit_option *options,
                                           void **optionValues)
{
  FG_ENTER(cuModuleLoadDataEx, NULL, module, image, numOptions, options, optionValues);
  return FG_EXIT(module_load(module, image));
}

FG_API CUresult CUDAAPI cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin)
{
  FG_ENTER(cuModuleLoadFatBinary, NULL, module, fatCubin);
  return FG_EXIT(module_load(module, fatCubin));
}

FG_API CUresult CUDAAPI cuModuleLoad(CUmodule *module, const char *fname)
{
  FG_ENTER(cuModuleLoad, NULL, module, fname);
  if (!fname)
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  FILE *f = fopen(fname, "rb");
  if (!f)
    return FG_EXIT(CUDA_ERROR_FILE_NOT_FOUND);
  char *buf = NULL;
  size_t len = 0, cap = 0;
  CUresult r = CUDA_SUCCESS;
  for (;;) {
    if (cap - len < 65536) {
      char *n = realloc(buf, cap + 65536 + 1);
      if (!n) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
        break;
      }
      buf = n;
      cap += 65536;
    }
    size_t got = fread(buf + len, 1, cap - len, f);
    len += got;
    if (got == 0)
      break;
  }
  fclose(f);
  if (r == CUDA_SUCCESS) {
    buf[len] = 0; /* PTX text must be NUL-terminated */
    r = module_load(module, buf);
  }
  free(buf);
  return FG_EXIT(r);
}

FG_API CUresult CUDAAPI cuModuleUnload(CUmodule hmod)
{
  FG_ENTER(cuModuleUnload, NULL, hmod);
  struct fg_module *m = (struct fg_module *)hmod;
  if (!m || m->magic != MODULE_MAGIC)
    return FG_EXIT(CUDA_ERROR_INVALID_HANDLE);
  CUpti_ModuleResourceData d = {m->id, 0, NULL};
  fg_resource(CUPTI_CBID_RESOURCE_MODULE_UNLOAD_STARTING, fg_ctx_current(), NULL, &d);
  m->magic = 0;
  return FG_EXIT(CUDA_SUCCESS);
}

static struct fg_func *module_find(struct fg_module *m, const char *name)
{
  for (int i = 0; i < m->nfuncs; i++)
    if (strcmp(m->funcs[i].name, name) == 0)
      return &m->funcs[i];
  return NULL;
}

FG_API CUresult CUDAAPI cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
  FG_ENTER(cuModuleGetFunction, NULL, hfunc, hmod, name);
  struct fg_module *m = (struct fg_module *)hmod;
  if (!m || m->magic != MODULE_MAGIC)
    return FG_EXIT(CUDA_ERROR_INVALID_HANDLE);
  if (!hfunc || !name)
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  struct fg_func *f = module_find(m, name);
  if (!f)
    return FG_EXIT(CUDA_ERROR_NOT_FOUND);
  *hfunc = (CUfunction)f;
  return FG_EXIT(CUDA_SUCCESS);
}

/* ---- libraries (context-independent modules); a CUkernel is the function itself ---- */

FG_API CUresult CUDAAPI cuLibraryLoadData(CUlibrary *library, const void *code,
                                          CUjit_option *jitOptions, void **jitOptionsValues,
                                          unsigned int numJitOptions,
                                          CUlibraryOption *libraryOptions,
                                          void **libraryOptionValues,
                                          unsigned int numLibraryOptions)
{
  FG_ENTER(cuLibraryLoadData, NULL, library, code, jitOptions, jitOptionsValues, numJitOptions,
           libraryOptions, libraryOptionValues, numLibraryOptions);
  if (!fg_initialized())
    return FG_EXIT(CUDA_ERROR_NOT_INITIALIZED);
  if (!library)
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  struct fg_library *lib = calloc(1, sizeof(*lib));
  if (!lib)
    return FG_EXIT(CUDA_ERROR_OUT_OF_MEMORY);
  CUresult r = load_image(code, &lib->module);
  if (r != CUDA_SUCCESS) {
    free(lib);
    return FG_EXIT(r);
  }
  lib->magic = LIBRARY_MAGIC;
  *library = (CUlibrary)lib;
  return FG_EXIT(CUDA_SUCCESS);
}

static struct fg_library *library_get(CUlibrary h)
{
  struct fg_library *lib = (struct fg_library *)h;
  return lib && lib->magic == LIBRARY_MAGIC ? lib : NULL;
}

FG_API CUresult CUDAAPI cuLibraryUnload(CUlibrary library)
{
  FG_ENTER(cuLibraryUnload, NULL, library);
  struct fg_library *lib = library_get(library);
  if (!lib)
    return FG_EXIT(CUDA_ERROR_INVALID_HANDLE);
  lib->magic = 0;
  lib->module->magic = 0;
  free(lib);
  return FG_EXIT(CUDA_SUCCESS);
}

FG_API CUresult CUDAAPI cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name)
{
  FG_ENTER(cuLibraryGetKernel, NULL, pKernel, library, name);
  struct fg_library *lib = library_get(library);
  if (!lib)
    return FG_EXIT(CUDA_ERROR_INVALID_HANDLE);
  if (!pKernel || !name)
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  struct fg_func *f = module_find(lib->module, name);
  if (!f)
    return FG_EXIT(CUDA_ERROR_NOT_FOUND);
  *pKernel = (CUkernel)f;
  return FG_EXIT(CUDA_SUCCESS);
}

FG_API CUresult CUDAAPI cuLibraryGetModule(CUmodule *pMod, CUlibrary library)
{
  FG_ENTER(cuLibraryGetModule, NULL, pMod, library);
  struct fg_library *lib = library_get(library);
  if (!lib)
    return FG_EXIT(CUDA_ERROR_INVALID_HANDLE);
  if (!pMod)
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  *pMod = (CUmodule)lib->module;
  return FG_EXIT(CUDA_SUCCESS);
}

static struct fg_func *func_get(const void *h)
{
  struct fg_func *f = (struct fg_func *)h;
  return f && f->magic == FUNC_MAGIC ? f : NULL;
}

FG_API CUresult CUDAAPI cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel)
{
  FG_ENTER(cuKernelGetFunction, NULL, pFunc, kernel);
  if (!func_get(kernel))
    return FG_EXIT(CUDA_ERROR_INVALID_HANDLE);
  if (!pFunc)
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  *pFunc = (CUfunction)kernel;
  return FG_EXIT(CUDA_SUCCESS);
}

/* cuKernelGetName and cuFuncGetName: a kernel handle is its function's. */
static CUresult name_of(const char **name, const void *handle)
{
  struct fg_func *f = func_get(handle);
  if (!f)
    return CUDA_ERROR_INVALID_HANDLE;
  if (!name)
    return CUDA_ERROR_INVALID_VALUE;
  *name = f->name;
  return CUDA_SUCCESS;
}

FG_API CUresult CUDAAPI cuKernelGetName(const char **name, CUkernel hfunc)
{
  FG_ENTER(cuKernelGetName, NULL, name, hfunc);
  return FG_EXIT(name_of(name, hfunc));
}

FG_API CUresult CUDAAPI cuFuncGetName(const char **name, CUfunction hfunc)
{
  FG_ENTER(cuFuncGetName, NULL, name, hfunc);
  return FG_EXIT(name_of(name, hfunc));
}

FG_API CUresult CUDAAPI cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc)
{
  FG_ENTER(cuFuncGetAttribute, NULL, pi, attrib, hfunc);
  struct fg_func *f = func_get(hfunc);
  if (!f)
    return FG_EXIT(CUDA_ERROR_INVALID_HANDLE);
  if (!pi)
    return FG_EXIT(CUDA_ERROR_INVALID_VALUE);
  switch (attrib) {
  case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
    *pi = f->max_threads ? f->max_threads : 1024;
    break;
  case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES:
    *pi = f->static_smem;
    break;
  case CU_FUNC_ATTRIBUTE_NUM_REGS:
    *pi = f->num_regs > 0 ? f->num_regs : 32;
    break;
  case CU_FUNC_ATTRIBUTE_PTX_VERSION:
  case CU_FUNC_ATTRIBUTE_BINARY_VERSION:
    *pi = 90;
    break;
  case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
    *pi = 232448 - f->static_smem;
    break;
  default:
    *pi = 0;
    break;
  }
  return FG_EXIT(CUDA_SUCCESS);
}

/* ---- launches ---- */

static const char *sym(const void *f)
{
  const struct fg_func *fn = func_get(f);
  return fn ? fn->name : NULL;
}

static CUresult launch(struct fg_func *f, const unsigned grid[3], const unsigned block[3],
                       unsigned smem, CUstream h, int ptsz, uint8_t launch_type,
                       const unsigned cluster[3])
{
  if (!f)
    return CUDA_ERROR_INVALID_HANDLE;
  struct fg_stream *s;
  CUresult r = fg_stream_resolve(h, ptsz, &s);
  if (r != CUDA_SUCCESS)
    return r;
  uint64_t threads = (uint64_t)block[0] * block[1] * block[2];
  if (!grid[0] || !grid[1] || !grid[2] || !threads)
    return CUDA_ERROR_INVALID_VALUE;
  if (threads > (uint64_t)(f->max_threads ? f->max_threads : 1024) || smem > 232448)
    return CUDA_ERROR_INVALID_VALUE;
  struct fg_op op;
  memset(&op, 0, sizeof(op));
  op.type = FG_OP_KERNEL;
  op.func = f;
  memcpy(op.grid, grid, sizeof(op.grid));
  memcpy(op.block, block, sizeof(op.block));
  if (cluster)
    memcpy(op.cluster, cluster, sizeof(op.cluster));
  op.smem = smem;
  op.launch_type = launch_type;
  if (s->capture) {
    fg_capture_op(s, &op, &r);
    return r;
  }
  uint64_t end;
  return fg_op_submit(s, &op, 1, NULL, NULL, &end);
}

FG_API CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                       unsigned int gridDimZ, unsigned int blockDimX,
                                       unsigned int blockDimY, unsigned int blockDimZ,
                                       unsigned int sharedMemBytes, CUstream hStream,
                                       void **kernelParams, void **extra)
{
  FG_ENTER(cuLaunchKernel, sym(f), f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
           sharedMemBytes, hStream, kernelParams, extra);
  unsigned g[3] = {gridDimX, gridDimY, gridDimZ}, b[3] = {blockDimX, blockDimY, blockDimZ};
  return FG_EXIT(launch(func_get(f), g, b, sharedMemBytes, hStream, 0,
                        CUPTI_ACTIVITY_LAUNCH_TYPE_REGULAR, NULL));
}

FG_API CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX,
                                            unsigned int gridDimY, unsigned int gridDimZ,
                                            unsigned int blockDimX, unsigned int blockDimY,
                                            unsigned int blockDimZ, unsigned int sharedMemBytes,
                                            CUstream hStream, void **kernelParams, void **extra)
{
  FG_ENTER(cuLaunchKernel_ptsz, sym(f), f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY,
           blockDimZ, sharedMemBytes, hStream, kernelParams, extra);
  unsigned g[3] = {gridDimX, gridDimY, gridDimZ}, b[3] = {blockDimX, blockDimY, blockDimZ};
  return FG_EXIT(launch(func_get(f), g, b, sharedMemBytes, hStream, 1,
                        CUPTI_ACTIVITY_LAUNCH_TYPE_REGULAR, NULL));
}

FG_API CUresult CUDAAPI cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX,
                                                  unsigned int gridDimY, unsigned int gridDimZ,
                                                  unsigned int blockDimX, unsigned int blockDimY,
                                                  unsigned int blockDimZ,
                                                  unsigned int sharedMemBytes, CUstream hStream,
                                                  void **kernelParams)
{
  FG_ENTER(cuLaunchCooperativeKernel, sym(f), f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY,
           blockDimZ, sharedMemBytes, hStream, kernelParams);
  unsigned g[3] = {gridDimX, gridDimY, gridDimZ}, b[3] = {blockDimX, blockDimY, blockDimZ};
  return FG_EXIT(launch(func_get(f), g, b, sharedMemBytes, hStream, 0,
                        CUPTI_ACTIVITY_LAUNCH_TYPE_COOPERATIVE_SINGLE_DEVICE, NULL));
}

FG_API CUresult CUDAAPI cuLaunchCooperativeKernel_ptsz(
    CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
    unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
    unsigned int sharedMemBytes, CUstream hStream, void **kernelParams)
{
  FG_ENTER(cuLaunchCooperativeKernel_ptsz, sym(f), f, gridDimX, gridDimY, gridDimZ, blockDimX,
           blockDimY, blockDimZ, sharedMemBytes, hStream, kernelParams);
  unsigned g[3] = {gridDimX, gridDimY, gridDimZ}, b[3] = {blockDimX, blockDimY, blockDimZ};
  return FG_EXIT(launch(func_get(f), g, b, sharedMemBytes, hStream, 1,
                        CUPTI_ACTIVITY_LAUNCH_TYPE_COOPERATIVE_SINGLE_DEVICE, NULL));
}

static CUresult launch_ex(const CUlaunchConfig *config, CUfunction f, int ptsz)
{
  if (!config)
    return CUDA_ERROR_INVALID_VALUE;
  uint8_t type = CUPTI_ACTIVITY_LAUNCH_TYPE_REGULAR;
  unsigned cluster[3] = {0, 0, 0};
  for (unsigned i = 0; i < config->numAttrs; i++) {
    const CUlaunchAttribute *a = &config->attrs[i];
    if (a->id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE && a->value.cooperative)
      type = CUPTI_ACTIVITY_LAUNCH_TYPE_COOPERATIVE_SINGLE_DEVICE;
    else if (a->id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
      cluster[0] = a->value.clusterDim.x;
      cluster[1] = a->value.clusterDim.y;
      cluster[2] = a->value.clusterDim.z;
    }
  }
  unsigned g[3] = {config->gridDimX, config->gridDimY, config->gridDimZ};
  unsigned b[3] = {config->blockDimX, config->blockDimY, config->blockDimZ};
  return launch(func_get(f), g, b, config->sharedMemBytes, config->hStream, ptsz, type, cluster);
}

FG_API CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f,
                                         void **kernelParams, void **extra)
{
  FG_ENTER(cuLaunchKernelEx, sym(f), config, f, kernelParams, extra);
  return FG_EXIT(launch_ex(config, f, 0));
}

FG_API CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f,
                                              void **kernelParams, void **extra)
{
  FG_ENTER(cuLaunchKernelEx_ptsz, sym(f), config, f, kernelParams, extra);
  return FG_EXIT(launch_ex(config, f, 1));
}

static CUresult host_func(CUstream h, CUhostFn fn, void *data, int ptsz)
{
  if (!fn)
    return CUDA_ERROR_INVALID_VALUE;
  struct fg_stream *s;
  CUresult r = fg_stream_resolve(h, ptsz, &s);
  if (r != CUDA_SUCCESS)
    return r;
  struct fg_op op;
  memset(&op, 0, sizeof(op));
  op.type = FG_OP_HOST;
  op.host_fn = fn;
  op.host_arg = data;
  if (s->capture) {
    fg_capture_op(s, &op, &r);
    return r;
  }
  uint64_t end;
  return fg_op_submit(s, &op, 1, NULL, NULL, &end);
}

FG_API CUresult CUDAAPI cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData)
{
  FG_ENTER(cuLaunchHostFunc, NULL, hStream, fn, userData);
  return FG_EXIT(host_func(hStream, fn, userData, 0));
}

FG_API CUresult CUDAAPI cuLaunchHostFunc_ptsz(CUstream hStream, CUhostFn fn, void *userData)
{
  FG_ENTER(cuLaunchHostFunc_ptsz, NULL, hStream, fn, userData);
  return FG_EXIT(host_func(hStream, fn, userData, 1));
}
