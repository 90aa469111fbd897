/* Symbolization of captured frames: module map, ELF symbol tables, demangling, Python frames. */
#ifndef GPUPROF_AGENT_SYMBOLIZE_H
#define GPUPROF_AGENT_SYMBOLIZE_H

#include <stddef.h>
#include <stdint.h>

/* What one frame resolves to. Strings are owned by the symbolizer (valid until it is freed). */
struct sym_frame {
  const char *function;    /* demangled name; NULL when unresolved (then use module + offset) */
  const char *module;      /* file name without directories; NULL when in no known module */
  const char *module_path; /* as loaded ("" for the main program is replaced by its path) */
  uint64_t module_offset;  /* frame address minus the module's load bias */
  const struct sym_module *mod;
  const char *file; /* Python frames: the code object's co_filename, else NULL */
  int line;         /* Python frames: the line being executed, else 0 */
  int python;
};

/* One loaded module, for pprof mappings (later) and the frame above. */
struct sym_module {
  char *path;
  char *name;
  uint64_t bias;        /* load bias: runtime address - link-time address */
  uint64_t lo, hi;      /* lowest and highest runtime address of its PT_LOAD segments */
  uint64_t file_offset; /* of the executable segment */
  uint8_t build_id[64];
  size_t build_id_len; /* 0: the module has no NT_GNU_BUILD_ID note */
};

/*
 * Never used on callback paths: the worker or the exit path creates one, resolves, frees it.
 * The module map comes from dl_iterate_phdr and is read again when an address falls outside
 * every known module and the loader's dlopen/dlclose counters moved since the last read (a
 * library dlopened since; a frame in JIT code does not read the map again). Function names come
 * from each module's .symtab (static functions included) and .dynsym, read from the file on disk
 * with libelf the first time the module is needed (and from /usr/lib/debug/.build-id/ when the file
 * has no .symtab and a debug file exists); a file whose build id is not the loaded module's
 * (rebuilt on disk since it was loaded) is not read. A module is known already only with the same
 * path, addresses and build id; those found at the last reading of the map are preferred over
 * dlclosed ones. C++ and CUDA kernel names are demangled with the C++ runtime's __cxa_demangle.
 * Not thread-safe: one thread per symbolizer.
 */
struct symbolizer;

struct symbolizer *symbolizer_new(void);
void symbolizer_free(struct symbolizer *s);

/* Resolves a stack frame (agent/stack.h: native return address or tagged Python frame).
 * Always fills *out; returns 0 when a function name was found, -ENOENT otherwise. */
int symbolizer_resolve(struct symbolizer *s, uint64_t frame, struct sym_frame *out);

/* The demangled form of name (C++ / CUDA kernel names), or name itself when it is not
 * mangled or does not demangle. Owned by the symbolizer. */
const char *symbolizer_demangle(struct symbolizer *s, const char *name);

/*
 * Reads the module map again if anything was dlopened or dlclosed since the last read (the
 * loader's dlpi_adds/dlpi_subs counters: one dl_iterate_phdr step when nothing changed).
 * Returns 1 when the map changed: results resolved before may now be stale, since a library
 * loaded where a closed one was (also a rebuilt file at the same path) is preferred for its
 * addresses.
 */
int symbolizer_sync(struct symbolizer *s);

/* The modules known so far (after resolving). */
const struct sym_module *symbolizer_modules(struct symbolizer *s, size_t *count);

#endif
