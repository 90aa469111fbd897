/* Small hash functions for the agent's open-addressing tables. */
#ifndef GPUPROF_AGENT_UTIL_HASH_H
#define GPUPROF_AGENT_UTIL_HASH_H

#include <stddef.h>
#include <stdint.h>

/* A 64-bit finalizer (splitmix64): device addresses share their low and high bits. */
static inline uint64_t hash_u64(uint64_t x)
{
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

/* FNV-1a over a NUL-terminated string. */
static inline uint64_t hash_str(const char *s)
{
  uint64_t h = 0xcbf29ce484222325ull;
  for (; *s; s++) {
    h ^= (unsigned char)*s;
    h *= 0x100000001b3ull;
  }
  return h;
}

static inline size_t hash_round_pow2(size_t n)
{
  const size_t top = (size_t)1 << (sizeof(size_t) * 8 - 1);
  size_t p = 1;

  if (n > top) /* no power of two above it: the largest one (callers cap sizes far below) */
    return top;
  while (p < n)
    p <<= 1;
  return p;
}

#endif
