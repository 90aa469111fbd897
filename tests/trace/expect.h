/* The trace test programs' check macro: counts failed expectations, names each on stderr. */
#ifndef GPUPROF_TESTS_TRACE_EXPECT_H
#define GPUPROF_TESTS_TRACE_EXPECT_H

#include <stdio.h>

static int failures;

#define EXPECT(cond)                                                                               \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: %s failed\n", __FILE__, __LINE__, #cond);                            \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

#endif
