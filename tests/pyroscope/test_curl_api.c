/* curl_api: the dlopen'ed table equals the linked one; a missing library or function fails. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "export/curl_api.h"

static int failures;

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                         \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fputc('\n', stderr);                                                                         \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

/* This program links libcurl, so dlopen("libcurl.so.4") finds the same library: every function
 * it resolves must be the very one the linker bound (a wrong name in GPUPROF_CURL_FUNCTIONS,
 * or a member resolved to another symbol, shows up here). */
static void loaded_matches_linked(void)
{
  const struct curl_api *linked = curl_api_linked();
  struct curl_api loaded;
  char why[512] = "";
  int ret = curl_api_load(NULL, &loaded, why, sizeof(why));
  unsigned n = 0;

  CHECK(ret == 0, "curl_api_load(NULL): %d (%s)", ret, why);
  if (ret)
    return;
  CHECK(loaded.lib != NULL, "no handle");
  CHECK(linked->lib == NULL, "the linked table has a handle");
#define SAME(f)                                                                                    \
  CHECK(linked->f != NULL, "linked curl_" #f " is NULL");                                          \
  CHECK(loaded.f == linked->f, "curl_" #f ": dlsym %p, linked %p", (void *)loaded.f,               \
        (void *)linked->f);                                                                        \
  n++;
  GPUPROF_CURL_FUNCTIONS(SAME)
#undef SAME
  CHECK(n == 23, "%u functions in the table", n);
  /* And it works: a URL parsed through the loaded table. */
  {
    CURLU *u = loaded.url();
    char *host = NULL;
    CHECK(u && loaded.url_set(u, CURLUPART_URL, "http://pyroscope.example:4040/x", 0) == CURLUE_OK,
          "url_set");
    CHECK(u && loaded.url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK && host &&
              !strcmp(host, "pyroscope.example"),
          "host %s", host ? host : "(null)");
    loaded.free(host);
    loaded.url_cleanup(u);
  }
}

static void missing_library(void)
{
  const char *path = "/nonexistent/gpuprof-test/libcurl.so.4";
  struct curl_api api;
  char why[512] = "";
  int ret;

  memset(&api, 0xa5, sizeof(api));
  ret = curl_api_load(path, &api, why, sizeof(why));
  CHECK(ret == -ENOENT, "missing library: %d", ret);
  CHECK(strstr(why, path) != NULL, "the reason does not name the path: %s", why);
  CHECK(api.easy_init == NULL && api.lib == NULL, "table not cleared");
}

/* A library that exists but is not libcurl (zlib, which every build links): the first
 * function looked up is missing and named. */
static void not_libcurl(void)
{
  struct curl_api api;
  char why[512] = "";
  int ret = curl_api_load("libz.so.1", &api, why, sizeof(why));

  CHECK(ret == -ENOSYS, "libz.so.1: %d", ret);
  CHECK(strstr(why, "libz.so.1 has no curl_global_init") != NULL, "reason: %s", why);
  CHECK(api.global_init == NULL && api.lib == NULL, "table not cleared");
}

int main(void)
{
  loaded_matches_linked();
  missing_library();
  not_libcurl();
  if (failures)
    return 1;
  printf("ok\n");
  return 0;
}
