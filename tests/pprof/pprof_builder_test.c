/* The pprof builder alone: interning and ids, errors, and a profile written for go tool pprof. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export/pprof.h"

#include "tests/pprof/pprof_check.h"

/* Two stacks: main -> work -> [gpu] k1 (3 launches, 300 ns), main -> [gpu] k2 (1, 50 ns). */
static int build(struct pprof_builder *b)
{
  struct pprof_mapping m = {0x400000, 0x500000, 0, "/bin/prog", "0a1b2c", 1};
  struct pprof_label gpu = {"gpu", "0", 0, NULL};
  uint64_t map, f_main, f_work, l_main, l_work, l_k1, l_k2;
  int64_t v1[2] = {3, 300}, v2[2] = {1, 50};
  uint64_t s1[3], s2[2];

  CHECK(pprof_builder_add_sample_type(b, "launches", "count") == 0);
  CHECK(pprof_builder_add_sample_type(b, "gpu_time", "nanoseconds") == 0);
  pprof_builder_set_period(b, "gpu_time", "nanoseconds", 1);
  pprof_builder_set_default_sample_type(b, "gpu_time");
  pprof_builder_set_time(b, 1700000000000000000ll, 15000000000ll);
  map = pprof_builder_add_mapping(b, &m);
  CHECK(map == 1);
  f_main = pprof_builder_function(b, "main", "main", "prog.c", 10);
  f_work = pprof_builder_function(b, "work", "work", "prog.c", 20);
  CHECK(f_main == 1 && f_work == 2);
  CHECK(pprof_builder_function(b, "main", "main", "prog.c", 10) == f_main); /* interned */
  CHECK(pprof_builder_function(b, "main", "main", "other.c", 10) == 3);     /* another file */
  l_main = pprof_builder_location(b, map, 0x401000, f_main, 12);
  l_work = pprof_builder_location(b, map, 0x402000, f_work, 22);
  CHECK(l_main == 1 && l_work == 2);
  CHECK(pprof_builder_location(b, map, 0x401000, f_main, 12) == l_main);
  l_k1 = pprof_builder_location(b, 0, 0, pprof_builder_function(b, "[gpu] k1", "[gpu] k1", NULL, 0),
                                0);
  l_k2 = pprof_builder_location(b, 0, 0, pprof_builder_function(b, "[gpu] k2", "[gpu] k2", NULL, 0),
                                0);
  CHECK(l_k1 == 3 && l_k2 == 4);
  CHECK(pprof_builder_location(b, 7, 0, f_main, 0) == 0); /* no such mapping */
  s1[0] = l_k1;
  s1[1] = l_work;
  s1[2] = l_main;
  s2[0] = l_k2;
  s2[1] = l_main;
  CHECK(pprof_builder_add_sample(b, s1, 3, v1, 2, &gpu, 1) == 0);
  CHECK(pprof_builder_add_sample(b, s2, 2, v2, 2, &gpu, 1) == 0);
  CHECK(pprof_builder_add_sample(b, s2, 2, v2, 1, &gpu, 1) != 0); /* one value per type */
  s2[0] = 99;
  CHECK(pprof_builder_add_sample(b, s2, 2, v2, 2, &gpu, 1) != 0); /* unknown location */
  CHECK(pprof_builder_sample_count(b) == 2);
  CHECK(pprof_builder_add_comment(b, "built by pprof_builder_test") == 0);
  /* Not UTF-8 (Latin-1 e, a lone continuation byte, a surrogate): '?' per bad byte. */
  CHECK(pprof_builder_add_comment(b, "caf\xe9 \xc3\xa9t\xc3\xa9 \x80 \xed\xa0\x80") == 0);
  CHECK(pprof_builder_string(b, "x\xff") == pprof_builder_string(b, "x?"));
  CHECK(pprof_builder_string(b, "") == 0 && pprof_builder_string(b, NULL) == 0);
  return 0;
}

int main(int argc, char **argv)
{
  struct pprof_builder *b = pprof_builder_new();
  uint8_t *buf = NULL, *buf2 = NULL;
  size_t len = 0, len2 = 0;
  FILE *f;

  if (argc < 2 || !b) {
    fprintf(stderr, "usage: %s OUT.pb.gz\n", argv[0]);
    return 2;
  }
  /* The same profile twice, the second time after a reset: identical bytes. */
  build(b);
  CHECK(pprof_builder_encode(b, 6, &buf, &len) == 0);
  CHECK(len > 18 && buf[0] == 0x1f && buf[1] == 0x8b);
  pprof_builder_reset(b);
  CHECK(pprof_builder_sample_count(b) == 0);
  build(b);
  CHECK(pprof_builder_encode(b, 6, &buf2, &len2) == 0);
  CHECK(len == len2 && buf && buf2 && !memcmp(buf, buf2, len));
  f = fopen(argv[1], "wb");
  CHECK(f && fwrite(buf, 1, len, f) == len);
  if (f)
    fclose(f);
  free(buf);
  free(buf2);
  pprof_builder_free(b);
  pprof_builder_free(NULL);
  if (failures)
    return 1;
  printf("pprof_builder_test: ok\n");
  return 0;
}
