/* The builder's string hash: no 64-bit collisions on names that differ in a few digits, and no
 * read past a string's NUL (strings that end at the last byte of a mapped page). */
#include "export/pprof.c" /* white box: hash_bytes is static */

#include <sys/mman.h>
#include <unistd.h>

#include "tests/pprof/pprof_check.h"

#define NAMES 100000

static int cmp_u64(const void *a, const void *b)
{
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* How many of the NAMES strings made from fmt and 0..NAMES-1 share their hash with another. */
static int collisions(const char *fmt, uint64_t *h)
{
  char name[256];
  int dup = 0;

  for (int i = 0; i < NAMES; i++) {
    int n = snprintf(name, sizeof(name), fmt, i);
    h[i] = hash_bytes(name, (size_t)n);
  }
  qsort(h, NAMES, sizeof(*h), cmp_u64);
  for (int i = 1; i < NAMES; i++)
    dup += h[i] == h[i - 1];
  if (dup)
    fprintf(stderr, "%s: %d hash collisions in %d names\n", fmt, dup, NAMES);
  return dup;
}

int main(void)
{
  /* Kernel names with numeric template arguments: the digits straddle an 8-byte block and a
   * short tail, where a multiply-and-rotate step let the tail cancel the block's difference
   * (8% of the first set collided on all 64 bits). */
  static const char *const fmts[] = {
      "void k<%d>(float*)",
      "abcdefg%dxy",
      "abcdefg%dx",
      "[gpu] void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl<%d>>",
      "f%d",
      "python/site-packages/torch/nn/modules/module.py:%d",
  };
  uint64_t *h = malloc(NAMES * sizeof(*h));
  long page = sysconf(_SC_PAGESIZE);
  struct pprof_builder *b = pprof_builder_new();
  char *map;

  if (!h || !b || page <= 0)
    return 1;
  for (size_t i = 0; i < sizeof(fmts) / sizeof(fmts[0]); i++)
    CHECK(collisions(fmts[i], h) == 0);
  /* A string whose NUL is the last byte before an unmapped page: hashing, the UTF-8 scan and
   * interning read nothing after it (a read past it faults here, with or without ASan). */
  map = mmap(NULL, 2 * (size_t)page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(map != MAP_FAILED);
  if (map != MAP_FAILED) {
    CHECK(mprotect(map + page, (size_t)page, PROT_NONE) == 0);
    for (size_t len = 1; len <= 24; len++) {
      char *s = map + page - len - 1;
      int64_t a, c;

      memset(s, 'a' + (int)len, len);
      s[len] = '\0';
      CHECK(hash_bytes(s, len) == hash_bytes(s, len));
      a = pprof_builder_string(b, s);
      c = pprof_builder_string(b, s); /* found: hashed and compared only */
      CHECK(a > 0 && a == c);
      s[0] = (char)0xff; /* not UTF-8: interned as its sanitized copy */
      a = pprof_builder_string(b, s);
      s[0] = '?';
      CHECK(a > 0 && a == pprof_builder_string(b, s));
    }
    munmap(map, 2 * (size_t)page);
  }
  pprof_builder_free(b);
  free(h);
  if (failures)
    fprintf(stderr, "pprof_hash_test: %d check(s) failed\n", failures);
  else
    printf("pprof_hash_test: ok\n");
  return failures ? 1 : 0;
}
