/* Unit tests of kernel-name demangling (agent/util/demangle.c): results, the cache's stable
 * pointers, names that do not demangle, pointers reused for another name, the bound. */
#include <stdint.h>

#include "agent/util/demangle.h"
#include "unit.h"

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
  /* 2^9 Tile leaves: far longer than the mangled name, and than the trace's name limit. */
  CHECK_EQ(strlen(first[1]), 12804);
  CHECK(strncmp(first[1], DEEP_PREFIX, strlen(DEEP_PREFIX)) == 0);
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

int main(void)
{
  RUN(test_alloc);
  RUN(test_cache);
  RUN(test_reused_pointer);
  RUN(test_growth);
  RUN(test_bound);
  UNIT_EXIT();
}
