/* Demangling of C++ / CUDA kernel names, with a per-owner cache of the results. */
#ifndef GPUPROF_AGENT_UTIL_DEMANGLE_H
#define GPUPROF_AGENT_UTIL_DEMANGLE_H

#include <stddef.h>

/*
 * The longest result, in bytes (the trace writers' name limit, TRACE_NAME_MAX): a name whose
 * demangled form is longer comes back as its first DEMANGLE_MAX - 3 bytes or fewer (cut at a
 * UTF-8 character boundary) and "...". A short mangled name can demangle to hundreds of MB
 * (template arguments that refer back to each other); the demangler stops at this bound.
 */
#define DEMANGLE_MAX 4096

/* The demangled form of name as a new string (free() it) of at most DEMANGLE_MAX bytes, or
 * NULL when name is not mangled ("_Z...") or does not demangle. Allocates: never on a
 * callback path. Thread-safe. */
char *demangle_alloc(const char *name);

/*
 * Demangled names by mangled name. Not thread-safe: one thread per cache (the symbolizer's
 * owner, the capture's worker, the exit path's summary). A returned string stays valid, at
 * the same address, until the cache is freed: trace writers key their name tables by it.
 */
struct demangle_cache;

/* max_names: distinct names it keeps (0: no limit); past it, names are returned as given. */
struct demangle_cache *demangle_cache_new(size_t max_names);
void demangle_cache_free(struct demangle_cache *c);

/*
 * The demangled form of name, or name itself when it is not mangled, does not demangle, or the
 * cache is full (or out of memory). Demangles each distinct name once; a name seen before at
 * the same address is found without hashing it (CUPTI shares one string per function).
 */
const char *demangle_cache_get(struct demangle_cache *c, const char *name);

/* Distinct names held (for tests and the log). */
size_t demangle_cache_count(const struct demangle_cache *c);

#endif
