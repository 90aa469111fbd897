/* Unit tests of kernel-name demangling (agent/util/demangle.c): results, the cache's stable
 * pointers, names that do not demangle, pointers reused for another name, the bound on names
 * kept and on a name's length. */
#include <stdint.h>

#include "agent/util/demangle.h"
#include "unit.h"

/* libstdc++'s demangler, which the agent used before: the reference for equal output and for
 * how an exponential name explodes (tests/unit/CMakeLists.txt links libstdc++ here). */
extern char *__cxa_demangle(const char *mangled, char *buf, size_t *len, int *status);

/* Allocations by anything linked statically (the agent's code, libiberty): --wrap in
 * tests/unit/CMakeLists.txt routes them here. */
extern void *__real_malloc(size_t n);
extern void *__real_calloc(size_t n, size_t size);
extern void *__real_realloc(void *p, size_t n);
static unsigned long n_allocs;

void *__wrap_malloc(size_t n)
{
  n_allocs++;
  return __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t size)
{
  n_allocs++;
  return __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t n)
{
  n_allocs++;
  return __real_realloc(p, n);
}

/* Expected values from binutils' c++filt, written out. */
#define DEEP_MANGLED                                                                               \
  "_Z11deep_kernelI4PairIS0_IS0_IS0_IS0_IS0_IS0_IS0_IS0_I4TileS1_ES2_ES3_ES4_ES5_ES6_ES7_ES8_ES9_" \
  "EEvPT_"
#define DEEP_PREFIX "void deep_kernel<Pair<Pair<Pair<Pair<Pair<Pair<Pair<Pair<Pair<Tile, Tile>, "

static void test_alloc(void)
{
  char *s = demangle_alloc("_Z10fma_kernelIfEvPT_S0_S0_i");

  CHECK_STR(s, "void fma_kernel<float>(float*, float, float, int)");
  free(s);
  CHECK(demangle_alloc("plain_kernel") == NULL);
  CHECK(demangle_alloc("_Z3badX") == NULL);
  CHECK(demangle_alloc("") == NULL);
  CHECK(demangle_alloc(NULL) == NULL);
}

static void test_cache(void)
{
  struct demangle_cache *c = demangle_cache_new(0);
  char copy[] = "_Z5smallPf";
  const char *a, *b, *bad;

  CHECK(c != NULL);
  a = demangle_cache_get(c, "_Z5smallPf");
  CHECK_STR(a, "small(float*)");
  /* The same pointer for the same name, at any address: writers key their tables by it. */
  CHECK(demangle_cache_get(c, "_Z5smallPf") == a);
  CHECK(demangle_cache_get(c, copy) == a);
  /* Not mangled: the caller's own pointer. */
  b = "plain_kernel";
  CHECK(demangle_cache_get(c, b) == b);
  /* "_Z" that does not demangle: the name, from a copy the cache owns (stable as well). */
  bad = demangle_cache_get(c, "_Z3badX");
  CHECK_STR(bad, "_Z3badX");
  CHECK(demangle_cache_get(c, "_Z3badX") == bad);
  CHECK_EQ(demangle_cache_count(c), 2);
  CHECK(demangle_cache_get(c, NULL) == NULL);
  demangle_cache_free(c);
  /* Without a cache (out of memory at creation): names as given. */
  CHECK(demangle_cache_get(NULL, copy) == copy);
  demangle_cache_free(NULL);
}

/* A pointer seen before that now holds another name (a module's strings freed and reused). */
static void test_reused_pointer(void)
{
  struct demangle_cache *c = demangle_cache_new(0);
  char buf[64] = "_Z5smallPf";

  CHECK_STR(demangle_cache_get(c, buf), "small(float*)");
  snprintf(buf, sizeof(buf), "_Z6addOnePfi");
  CHECK_STR(demangle_cache_get(c, buf), "addOne(float*, int)");
  snprintf(buf, sizeof(buf), "_Z5smallPf");
  CHECK_STR(demangle_cache_get(c, buf), "small(float*)");
  CHECK_EQ(demangle_cache_count(c), 2);
  demangle_cache_free(c);
}

/* Results keep their address while the table grows past many distinct names. */
static void test_growth(void)
{
  struct demangle_cache *c = demangle_cache_new(0);
  const char *first[4];
  char name[64];

  first[0] = demangle_cache_get(c, "_Z5smallPf");
  first[1] = demangle_cache_get(c, DEEP_MANGLED);
  first[2] = demangle_cache_get(c, "_Z3badX");
  for (int i = 0; i < 5000; i++) {
    snprintf(name, sizeof(name), "_Z%dk%dv", i < 10 ? 2 : i < 100 ? 3 : i < 1000 ? 4 : 5, i);
    CHECK(strncmp(demangle_cache_get(c, name), "k", 1) == 0);
  }
  CHECK_EQ(demangle_cache_count(c), 5003);
  CHECK(demangle_cache_get(c, "_Z5smallPf") == first[0]);
  CHECK(demangle_cache_get(c, DEEP_MANGLED) == first[1]);
  CHECK(demangle_cache_get(c, "_Z3badX") == first[2]);
  CHECK_STR(first[0], "small(float*)");
  /* 2^9 Tile leaves, 12 804 characters in full: far longer than the mangled name, cut. */
  CHECK_EQ(strlen(first[1]), DEMANGLE_MAX);
  CHECK(strncmp(first[1], DEEP_PREFIX, strlen(DEEP_PREFIX)) == 0);
  CHECK_STR(first[1] + DEMANGLE_MAX - 8, "ir<Ti...");
  snprintf(name, sizeof(name), "_Z4k123v");
  CHECK_STR(demangle_cache_get(c, name), "k123()");
  demangle_cache_free(c);
}

/* Past max_names, new names come back as given; the ones held still demangle. */
static void test_bound(void)
{
  struct demangle_cache *c = demangle_cache_new(2);
  char third[] = "_Z6addOnePfi";

  CHECK_STR(demangle_cache_get(c, "_Z5smallPf"), "small(float*)");
  CHECK_STR(demangle_cache_get(c, "_Z4stepv"), "step()");
  CHECK(demangle_cache_get(c, third) == third);
  CHECK(demangle_cache_get(c, third) == third);
  CHECK_EQ(demangle_cache_count(c), 2);
  CHECK_STR(demangle_cache_get(c, "_Z4stepv"), "step()");
  /* The pointer that was refused now holds a name the cache has (a module's strings freed and
   * the memory reused): its demangled form, not the mangled one (one kernel, one name). */
  snprintf(third, sizeof(third), "_Z4stepv");
  CHECK_STR(demangle_cache_get(c, third), "step()");
  demangle_cache_free(c);
}

/* Names of the corpus (tests/demangle, bench_names, and the shapes kernels and host frames
 * take) with binutils' c++filt's output, written out. */
static const char *const corpus[][2] = {
    {"_Z5smallPf", "small(float*)"},
    {"_Z6addOnePfi", "addOne(float*, int)"},
    {"_Z10fma_kernelIfEvPT_S0_S0_i", "void fma_kernel<float>(float*, float, float, int)"},
    {"_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEENS_6detail5ArrayIPcLi1"
     "EEEEEviT0_T1_",
     "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
     "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, "
     "at::detail::Array<char*, 1>)"},
    {"_ZN2at6native12_GLOBAL__N_119cunn_SoftMaxForwardILi4EfffNS1_22SoftMaxForwardEpilogueEEEvPT2_"
     "PKT0_l",
     "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
     "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, long)"},
    {"_ZN7cutlass6KernelINS_4gemm6kernel4GemmINS1_11threadblock12MmaPipelinedINS1_9GemmShapeILi128E"
     "Li128ELi8EEEfEEEEEEvNT_6ParamsE",
     "void cutlass::Kernel<cutlass::gemm::kernel::Gemm<cutlass::gemm::threadblock::MmaPipelined<"
     "cutlass::gemm::GemmShape<128, 128, 8>, float> > >(cutlass::gemm::kernel::Gemm<cutlass::gemm::"
     "threadblock::MmaPipelined<cutlass::gemm::GemmShape<128, 128, 8>, float> >::Params)"},
    {"_ZZ4mainENKUlvE_clEv", "main::{lambda()#1}::operator()() const"},
    {"_Z6kernelIZ4mainEUliE_EvT_", "void kernel<main::{lambda(int)#1}>(main::{lambda(int)#1})"},
    {"_Z3fooi.constprop.0", "foo(int) [clone .constprop.0]"},
    {"_Z3fooi.cold", "foo(int) [clone .cold]"},
    {"_Z3fooi.isra.0.part.0", "foo(int) [clone .isra.0] [clone .part.0]"},
    {"_ZNSt6vectorIiSaIiEE9push_backERKi",
     "std::vector<int, std::allocator<int> >::push_back(int const&)"},
    {"_Z1fPFviE", "f(void (*)(int))"},
    {"_Z1fIJifEEvDpT_", "void f<int, float>(int, float)"},
    {"_ZN12_GLOBAL__N_13fooEv", "(anonymous namespace)::foo()"},
    {"_ZN1AplERKS_", "A::operator+(A const&)"},
    {"_Z1fB5cxx11v", "f[abi:cxx11]()"},
    {"_ZNK1A3getEv", "A::get() const"},
    {"_ZN1AC2Ev", "A::A()"},
    {"_ZN1AD0Ev", "A::~A()"},
    /* c++filt prints std::basic_string<char, std::char_traits<char>, std::allocator<char> >
     * (it demangles verbosely); the C++ runtime's short form is what the agent always wrote. */
    {"_Z1fSs", "f(std::string)"},
};

/* The same output as c++filt and as the C++ runtime's demangler, name by name. */
static void test_corpus(void)
{
  for (size_t i = 0; i < sizeof(corpus) / sizeof(corpus[0]); i++) {
    int status = -1;
    char *got = demangle_alloc(corpus[i][0]);
    char *old = __cxa_demangle(corpus[i][0], NULL, NULL, &status);

    CHECK_STR(got, corpus[i][1]);
    CHECK_EQ(status, 0);
    CHECK_STR(got, old);
    free(got);
    free(old);
  }
  /* Longer than 1 024 characters: neither demangles it (libiberty's stack bound, kept). */
  {
    char name[1200] = "_ZN";
    size_t n = 3;
    char *old;
    int status = 0;

    for (int i = 0; i < 130; i++)
      n += (size_t)snprintf(name + n, sizeof(name) - n, "7Type%03d", i);
    snprintf(name + n, sizeof(name) - n, "4funcEv");
    CHECK_EQ(strlen(name), 1050);
    CHECK(demangle_alloc(name) == NULL);
    old = __cxa_demangle(name, NULL, NULL, &status);
    CHECK(old == NULL);
    CHECK_EQ(status, -2);
    free(old);
  }
}

/* deep_kernel<Pair<...>>(Pair<...>*) nested `depth` levels: each level refers twice to the one
 * inside by back-reference, so the name grows by 9 characters a level and its demangled form
 * doubles. Depth 9 is DEEP_MANGLED. */
static void deep_name(char *out, size_t size, int depth)
{
  static const char digits[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ";
  size_t n = (size_t)snprintf(out, size, "_Z11deep_kernelI4PairI");

  for (int i = 1; i < depth; i++)
    n += (size_t)snprintf(out + n, size - n, "S0_I");
  n += (size_t)snprintf(out + n, size - n, "4Tile");
  /* S<k>_ (base 36) is substitution k + 1: Tile is 2, the innermost Pair<Tile, Tile> 3, ... */
  for (int k = 1; k <= depth; k++) {
    if (k < 36)
      n += (size_t)snprintf(out + n, size - n, "S%c_E", digits[k]);
    else
      n += (size_t)snprintf(out + n, size - n, "S%c%c_E", digits[k / 36], digits[k % 36]);
  }
  snprintf(out + n, size - n, "EvPT_");
}

/* The demangled text of deep_name's family, written directly (bounded): the reference. */
struct text {
  char *buf;
  size_t len, cap;
};

static void put(struct text *t, const char *s)
{
  for (; *s && t->len < t->cap; s++)
    t->buf[t->len++] = *s;
}

static void pair_tree(struct text *t, int depth)
{
  if (t->len >= t->cap)
    return;
  if (depth == 0) {
    put(t, "Tile");
    return;
  }
  put(t, "Pair<");
  pair_tree(t, depth - 1);
  put(t, ", ");
  pair_tree(t, depth - 1);
  put(t, depth > 1 ? " >" : ">");
}

static size_t deep_text(char *buf, size_t cap, int depth)
{
  struct text t = {buf, 0, cap};

  put(&t, "void deep_kernel<");
  pair_tree(&t, depth);
  put(&t, " >(");
  pair_tree(&t, depth);
  put(&t, "*)");
  buf[t.len] = '\0';
  return t.len;
}

/* Length of deep_text at `depth` in full: 2 P + 22, P(0) = 4, P(1) = 16, P(d) = 2 P(d-1) + 9. */
static unsigned long long deep_len(int depth)
{
  unsigned long long p = 4;

  for (int d = 1; d <= depth; d++)
    p = d == 1 ? 16 : 2 * p + 9;
  return 2 * p + 22;
}

/*
 * Review R35: a short name whose template arguments refer back to each other. The C++ runtime's
 * demangler prints all of it (the size doubles with each level: 25 levels, a 228-character
 * name, are 838 MB, seconds of CPU); the bounded one returns DEMANGLE_MAX bytes, its first ones
 * followed by "...", at any depth, and allocates nothing but the result (the printer is left
 * with a longjmp: nothing of it may be on the heap).
 */
static void test_exponential(void)
{
  static char want[DEMANGLE_MAX + 1];
  char name[1024];

  /* The old demangler, exactly: 2^depth leaves, up to 102 KB at depth 12. */
  for (int depth = 1; depth <= 12; depth++) {
    int status = -1;
    char *old;

    deep_name(name, sizeof(name), depth);
    old = __cxa_demangle(name, NULL, NULL, &status);
    CHECK_EQ(status, 0);
    CHECK_EQ(old ? strlen(old) : 0, deep_len(depth));
    free(old);
  }
  CHECK_EQ(deep_len(12), 102404);
  CHECK_EQ(deep_len(25), 838860804);
  deep_name(name, sizeof(name), 9);
  CHECK_STR(name, DEEP_MANGLED);
  deep_name(name, sizeof(name), 25);
  CHECK_EQ(strlen(name), 228);

  /* Up to the bound: whole, and equal to the reference (depth 7: 3 204 characters). */
  for (int depth = 1; depth <= 7; depth++) {
    char *got;

    deep_name(name, sizeof(name), depth);
    got = demangle_alloc(name);
    CHECK_EQ(deep_text(want, DEMANGLE_MAX, depth), deep_len(depth));
    CHECK_STR(got, want);
    free(got);
  }
  /* Past it, from 6 404 characters (depth 8) to 2^100 times more: cut, at the same length. */
  for (int depth = 8; depth <= 100; depth++) {
    unsigned long before = n_allocs;
    char *got;

    deep_name(name, sizeof(name), depth);
    got = demangle_alloc(name);
    CHECK_EQ(n_allocs - before, 1);
    CHECK(got != NULL);
    if (!got)
      continue;
    CHECK_EQ(strlen(got), DEMANGLE_MAX);
    deep_text(want, DEMANGLE_MAX - 3, depth);
    CHECK(strncmp(got, want, DEMANGLE_MAX - 3) == 0);
    CHECK_STR(got + DEMANGLE_MAX - 3, "...");
    free(got);
  }
  /* Through the cache as well (the worker's and the symbolizer's path). */
  {
    struct demangle_cache *c = demangle_cache_new(0);
    const char *r;

    deep_name(name, sizeof(name), 60);
    r = demangle_cache_get(c, name);
    CHECK_EQ(strlen(r), DEMANGLE_MAX);
    CHECK(strncmp(r, "void deep_kernel<Pair<Pair<", 27) == 0);
    demangle_cache_free(c);
  }
}

/* A name cut inside a multi-byte UTF-8 character loses the whole character, not half of it. */
static void test_cut_utf8(void)
{
  /* void f<T, T, ...>() with T a class named "x" and 300 "é" (601 bytes, as GCC mangles an
   * identifier: its bytes), given once and then 9 times by back-reference (S0_; S_ is f). */
  static char name[1024];
  char *got;
  size_t n;

  n = (size_t)snprintf(name, sizeof(name), "_Z1fIJ601x");
  for (int i = 0; i < 300; i++)
    n += (size_t)snprintf(name + n, sizeof(name) - n, "\xc3\xa9");
  for (int i = 0; i < 9; i++)
    n += (size_t)snprintf(name + n, sizeof(name) - n, "S0_");
  snprintf(name + n, sizeof(name) - n, "EEvv");
  got = demangle_alloc(name);
  CHECK(got != NULL);
  if (!got)
    return;
  CHECK(strncmp(got, "void f<x\xc3\xa9\xc3\xa9", 12) == 0);
  /* "void f<" (7 bytes), then 601-byte names and ", " (603 each): the 7th name starts at
   * 7 + 6 * 603 = 3625, so byte 4093 is 468 into it, the second byte of an "é" (those start at
   * odd offsets). The cut goes back one byte: the last "é" whole, "...", 4 095 bytes. */
  CHECK_EQ(strlen(got), DEMANGLE_MAX - 1);
  CHECK_STR(got + DEMANGLE_MAX - 6, "\xc3\xa9...");
  free(got);
}

int main(void)
{
  RUN(test_alloc);
  RUN(test_cache);
  RUN(test_reused_pointer);
  RUN(test_growth);
  RUN(test_bound);
  RUN(test_corpus);
  RUN(test_exponential);
  RUN(test_cut_utf8);
  UNIT_EXIT();
}
