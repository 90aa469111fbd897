/* Clock helpers: CLOCK_REALTIME nanoseconds (the CUPTI clock) and monotonic deadlines. */
#ifndef GPUPROF_AGENT_UTIL_CLOCK_H
#define GPUPROF_AGENT_UTIL_CLOCK_H

#include <stdint.h>
#include <time.h>

/* CUPTI 13 timestamps are CLOCK_REALTIME ns on Linux; API enter/exit times use the same clock. */
static inline uint64_t clock_realtime_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t clock_monotonic_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline struct timespec clock_ns_to_timespec(uint64_t ns)
{
  struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ull),
                        .tv_nsec = (long)(ns % 1000000000ull)};
  return ts;
}

#endif
