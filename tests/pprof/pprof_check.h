/* Shared by the pprof C tests: a counting CHECK and gunzip of an encoded profile. */
#ifndef GPUPROF_TESTS_PPROF_CHECK_H
#define GPUPROF_TESTS_PPROF_CHECK_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static int failures;

#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);                     \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

/* The serialized profile inside gz (at most cap bytes), malloced, its size in *out_len (0
 * when it does not inflate completely); NULL when out of memory. */
static inline uint8_t *gunzip_profile(const uint8_t *gz, size_t len, size_t cap, size_t *out_len)
{
  uint8_t *raw = malloc(cap);
  z_stream z;

  memset(&z, 0, sizeof(z));
  *out_len = 0;
  if (!raw || inflateInit2(&z, 16 + 15) != Z_OK) {
    free(raw);
    return NULL;
  }
  z.next_in = (Bytef *)gz;
  z.avail_in = (uInt)len;
  z.next_out = raw;
  z.avail_out = (uInt)cap;
  if (inflate(&z, Z_FINISH) == Z_STREAM_END)
    *out_len = z.total_out;
  inflateEnd(&z);
  return raw;
}

#endif
