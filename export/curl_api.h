/* The libcurl functions gpuprof uses, as a table: dlopen'ed by the agent, linked by programs. */
#ifndef GPUPROF_EXPORT_CURL_API_H
#define GPUPROF_EXPORT_CURL_API_H

#include <stddef.h>

#include <curl/curl.h>

/*
 * Why a table: the agent lives in every CUDA process it is injected into, and most of them
 * never upload. Linking libcurl would load it and its dependency tree (OpenSSL, nghttp2,
 * LDAP, Kerberos, ...) into all of them, and clash with the OpenSSL that PyTorch or conda
 * bring. So libgpuprof.so has no libcurl in its DT_NEEDED: its upload thread fills this table
 * with curl_api_load() when a Pyroscope URL is set. A program that links libcurl anyway (the
 * gpuprof command, tests) gets the same table from curl_api_linked() instead, so the code
 * that makes requests (export/pyroscope.c) is written once, against the table, and does not
 * care which it got.
 *
 * Each member has exactly the type of the libcurl function it stands for (__typeof__ of the
 * declaration in <curl/curl.h>), and is called as api->easy_init() for curl_easy_init().
 * Members drop the curl_ prefix because curl.h makes curl_easy_setopt and curl_easy_getinfo
 * type-checking macros: a member of that name would be expanded at every call. Calls through
 * the table are therefore not type-checked: pass long, curl_off_t and pointers exactly as
 * libcurl documents for each option.
 */
#define GPUPROF_CURL_FUNCTIONS(X)                                                                  \
  X(global_init)                                                                                   \
  X(version_info)                                                                                  \
  X(easy_init)                                                                                     \
  X(easy_cleanup)                                                                                  \
  X(easy_setopt)                                                                                   \
  X(easy_perform)                                                                                  \
  X(easy_getinfo)                                                                                  \
  X(easy_strerror)                                                                                 \
  X(easy_escape)                                                                                   \
  X(free)                                                                                          \
  X(slist_append)                                                                                  \
  X(slist_free_all)                                                                                \
  X(mime_init)                                                                                     \
  X(mime_addpart)                                                                                  \
  X(mime_name)                                                                                     \
  X(mime_filename)                                                                                 \
  X(mime_data)                                                                                     \
  X(mime_type)                                                                                     \
  X(mime_free)                                                                                     \
  X(url)                                                                                           \
  X(url_set)                                                                                       \
  X(url_get)                                                                                       \
  X(url_cleanup)

struct curl_api {
#define GPUPROF_CURL_MEMBER(f) __typeof__(curl_##f) *f;
  GPUPROF_CURL_FUNCTIONS(GPUPROF_CURL_MEMBER)
#undef GPUPROF_CURL_MEMBER
  void *lib; /* the dlopen handle; NULL when linked */
};

/* The soname loaded by default: Debian/Ubuntu's package libcurl4 (the OpenSSL flavour). */
#define CURL_API_SONAME "libcurl.so.4"

/*
 * Loads path (NULL: CURL_API_SONAME, found by the dynamic loader's usual search) with
 * RTLD_NOW | RTLD_LOCAL, so that neither libcurl nor its dependencies can lend symbols to
 * the application or to libraries it loads later, and resolves every function of the table.
 * The library is never dlclosed: libcurl and OpenSSL keep threads, atexit handlers and
 * thread-locals that must outlive any handle (a second call loads nothing new).
 * 0, or -ENOENT (the library cannot be loaded) / -ENOSYS (it lacks a function, e.g. a libcurl
 * older than 7.62) with *api zeroed and a one-line reason in why. Takes the loader's lock:
 * never call it from a context that may hold it (a library constructor).
 */
int curl_api_load(const char *path, struct curl_api *api, char *why, size_t why_len);

/* The table of the libcurl this program is linked with. Defined in export/curl_linked.c, in
 * the library gpuprof_curl_linked, which links libcurl: never part of the agent. */
const struct curl_api *curl_api_linked(void);

#endif
