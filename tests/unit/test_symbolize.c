/* Unit tests of the symbolizer (agent/symbolize.c): static and exported functions of this
 * program and of libc through their ELF symbol tables, demangling, unknown addresses. */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <link.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/stack.h"
#include "agent/symbolize.h"
#include "unit.h"

/* A static function: only .symtab names it. */
__attribute__((noinline)) static int symbolize_static_target(int x)
{
  return x * 3 + 1;
}

__attribute__((noinline)) int symbolize_global_target(int x)
{
  return symbolize_static_target(x) + 2;
}

/* This program's functions, from its own file. */
static void check_main_program(struct symbolizer *s)
{
  struct sym_frame f;
  /* Frames are return addresses: resolve (function + 1) as the instruction after a call. */
  uint64_t st = (uint64_t)(uintptr_t)symbolize_static_target + 1;
  uint64_t gl = (uint64_t)(uintptr_t)symbolize_global_target + 1;

  CHECK_EQ(symbolizer_resolve(s, st, &f), 0);
  CHECK_STR(f.function, "symbolize_static_target");
  CHECK_STR(f.module, "test_symbolize");
  CHECK_EQ(symbolizer_resolve(s, gl, &f), 0);
  CHECK_STR(f.function, "symbolize_global_target");
  CHECK(f.mod && f.mod->build_id_len == 20);
}

static void test_main_program(void)
{
  struct symbolizer *s = symbolizer_new();

  check_main_program(s);
  symbolizer_free(s);
}

static void test_own_functions(void)
{
  struct symbolizer *s = symbolizer_new();
  struct sym_frame f;

  check_main_program(s);
  /* libc's own definition (through its handle: RTLD_DEFAULT would find a sanitizer's
   * interceptor first). */
  void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  CHECK(libc != NULL);
  CHECK_EQ(symbolizer_resolve(s, (uint64_t)(uintptr_t)dlsym(libc, "fopen") + 1, &f), 0);
  CHECK_STR(f.module, "libc.so.6");
  CHECK(f.function && strstr(f.function, "fopen"));
  dlclose(libc);
  /* Nowhere: no module. */
  CHECK_EQ(symbolizer_resolve(s, 0x10, &f), -ENOENT);
  CHECK(f.module == NULL && f.function == NULL);
  /* A Python frame nobody interned. */
  CHECK_EQ(symbolizer_resolve(s, STACK_FRAME_PYTHON | 12345, &f), -ENOENT);
  CHECK(f.python);
  symbolizer_free(s);
}

static void test_demangle(void)
{
  struct symbolizer *s = symbolizer_new();

  CHECK_STR(symbolizer_demangle(s, "_ZN3ops4gemmIfEEvPT_i"), "void ops::gemm<float>(float*, int)");
  CHECK_STR(symbolizer_demangle(s, "_Z6addOnePfi"), "addOne(float*, int)");
  CHECK_STR(symbolizer_demangle(s, "scale_kernel"), "scale_kernel");
  CHECK_STR(symbolizer_demangle(s, "_Znot a name"), "_Znot a name");
  /* Cached: the same pointer the second time. */
  CHECK(symbolizer_demangle(s, "_Z6addOnePfi") == symbolizer_demangle(s, "_Z6addOnePfi"));
  symbolizer_free(s);
}

/* A library loaded after the symbolizer read the module map, found after a frame in no module
 * (JIT code) was resolved: the map is read again because the loader's counters moved. */
static void test_late_dlopen(void)
{
  /* Libraries Debian always has (apt, python3) and with one function named below. */
  static const char *const candidates[] = {"libbz2.so.1", "liblzma.so.5", "libexpat.so.1", NULL};
  struct symbolizer *s = symbolizer_new();
  struct sym_frame f;
  Dl_info info;
  void *h = NULL, *fn = NULL;
  size_t n_before, n_after;

  symbolizer_modules(s, &n_before);
  /* In no module: nothing to read again, the map is unchanged. */
  CHECK_EQ(symbolizer_resolve(s, 0x10, &f), -ENOENT);
  CHECK_EQ(symbolizer_sync(s), 0);
  for (const char *const *c = candidates; *c && !h; c++) {
    if ((h = dlopen(*c, RTLD_NOW | RTLD_NOLOAD)) != NULL) {
      dlclose(h); /* already loaded: not a late one */
      h = NULL;
      continue;
    }
    h = dlopen(*c, RTLD_NOW | RTLD_LOCAL);
  }
  if (!h) {
    fprintf(stderr, "test_late_dlopen: no library left to dlopen; skipped\n");
    symbolizer_free(s);
    return;
  }
  static const char *const functions[] = {"BZ2_bzCompressInit", "lzma_code", "XML_ParserCreate",
                                          NULL};
  for (const char *const *name = functions; *name && !fn; name++)
    fn = dlsym(h, *name);
  CHECK(fn != NULL);
  CHECK(dladdr(fn, &info) != 0);
  CHECK_EQ(symbolizer_resolve(s, (uint64_t)(uintptr_t)fn + 1, &f), 0);
  CHECK(f.module && info.dli_fname && strstr(info.dli_fname, f.module));
  CHECK_STR(f.function, info.dli_sname);
  symbolizer_modules(s, &n_after);
  CHECK_EQ(n_after, n_before + 1);
  dlclose(h);
  symbolizer_free(s);
}

/* The program's PT_INTERP (the loader's path), from the main program's headers. */
static int find_interp(struct dl_phdr_info *info, size_t size, void *data)
{
  (void)size;
  for (int i = 0; i < info->dlpi_phnum; i++)
    if (info->dlpi_phdr[i].p_type == PT_INTERP)
      *(const char **)data = (const char *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
  return 1; /* the main program comes first */
}

/* Started through the loader (`ld-linux-x86-64.so.2 ./prog`), /proc/self/exe is the loader:
 * the main program's frames must still be named from its own file. */
static void test_via_loader(void)
{
  const char *interp = NULL;
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  int status = 0;
  pid_t pid;

  dl_iterate_phdr(find_interp, &interp);
  CHECK(interp != NULL && n > 0);
  if (!interp || n <= 0)
    return;
  self[n] = '\0';
  fflush(NULL);
  pid = fork();
  if (pid == 0) {
    execl(interp, interp, self, "--main-program", (char *)NULL);
    _exit(127);
  }
  CHECK(pid > 0);
  CHECK_EQ(waitpid(pid, &status, 0), pid);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

int main(int argc, char **argv)
{
  if (argc > 1 && !strcmp(argv[1], "--main-program")) {
    RUN(test_main_program);
    UNIT_EXIT();
  }
  RUN(test_own_functions);
  RUN(test_via_loader);
  RUN(test_late_dlopen);
  RUN(test_demangle);
  UNIT_EXIT();
}
