/* Loads libcurl at run time into a struct curl_api (see export/curl_api.h for why). */
#include "export/curl_api.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

int curl_api_load(const char *path, struct curl_api *api, char *why, size_t why_len)
{
  const char *err;
  void *lib;
  int ret = 0;

  memset(api, 0, sizeof(*api));
  if (!path)
    path = CURL_API_SONAME;
  /*
   * RTLD_LOCAL: libcurl's symbols, and those of the OpenSSL it pulls in, stay out of the
   * global scope, so a library the application dlopens later still binds to its own. A
   * library the process already has under the same soname is shared, not loaded twice.
   */
  lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    err = dlerror();
    snprintf(why, why_len, "%s", err ? err : path);
    return -ENOENT;
  }
#define GPUPROF_CURL_RESOLVE(f)                                                                    \
  if (!ret) {                                                                                      \
    dlerror();                                                                                     \
    api->f = (__typeof__(api->f))dlsym(lib, "curl_" #f);                                           \
    if (!api->f) {                                                                                 \
      snprintf(why, why_len, "%s has no curl_" #f " (a libcurl older than 7.62?)", path);          \
      ret = -ENOSYS;                                                                               \
    }                                                                                              \
  }
  GPUPROF_CURL_FUNCTIONS(GPUPROF_CURL_RESOLVE)
#undef GPUPROF_CURL_RESOLVE
  if (ret) {
    /* Not dlclosed even now: unloading a library whose constructors ran is never safe in a
     * process we do not own, and a failed load happens once. */
    memset(api, 0, sizeof(*api));
    return ret;
  }
  api->lib = lib;
  return 0;
}
