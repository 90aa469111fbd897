/* Unit tests of the symbolizer (agent/symbolize.c): static and exported functions of this
 * program and of libc through their ELF symbol tables, demangling, unknown addresses. */
#include <dlfcn.h>
#include <errno.h>

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

static void test_own_functions(void)
{
  struct symbolizer *s = symbolizer_new();
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

int main(void)
{
  RUN(test_own_functions);
  RUN(test_demangle);
  UNIT_EXIT();
}
