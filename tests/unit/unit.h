/* A minimal unit-test harness: CHECK macros that count failures, and a stderr capture helper. */
#ifndef GPUPROF_TESTS_UNIT_H
#define GPUPROF_TESTS_UNIT_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int unit_failures;

#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond);                     \
      unit_failures++;                                                                             \
    }                                                                                              \
  } while (0)

#define CHECK_EQ(a, b)                                                                             \
  do {                                                                                             \
    unsigned long long a_ = (unsigned long long)(a), b_ = (unsigned long long)(b);                 \
    if (a_ != b_) {                                                                                \
      fprintf(stderr, "%s:%d: CHECK_EQ(%s, %s) failed: %llu != %llu\n", __FILE__, __LINE__, #a,    \
              #b, a_, b_);                                                                         \
      unit_failures++;                                                                             \
    }                                                                                              \
  } while (0)

#define CHECK_STR(a, b)                                                                            \
  do {                                                                                             \
    const char *a_ = (a), *b_ = (b);                                                               \
    if (!a_ || !b_ || strcmp(a_, b_)) {                                                            \
      fprintf(stderr, "%s:%d: CHECK_STR(%s, %s) failed:\n  got      '%s'\n  expected '%s'\n",      \
              __FILE__, __LINE__, #a, #b, a_ ? a_ : "(null)", b_ ? b_ : "(null)");                 \
      unit_failures++;                                                                             \
    }                                                                                              \
  } while (0)

#define RUN(test)                                                                                  \
  do {                                                                                             \
    int before_ = unit_failures;                                                                   \
    test();                                                                                        \
    fprintf(stderr, "%s %s\n", unit_failures == before_ ? "ok  " : "FAIL", #test);                 \
  } while (0)

#define UNIT_EXIT() return unit_failures ? 1 : 0

/* Captures what is written to fd 2 between begin and end into buf (NUL-terminated). */
struct stderr_capture {
  int saved_fd;
  FILE *tmp;
};

static inline void stderr_capture_begin(struct stderr_capture *c)
{
  fflush(stderr);
  c->tmp = tmpfile();
  c->saved_fd = dup(2);
  dup2(fileno(c->tmp), 2);
}

static inline void stderr_capture_end(struct stderr_capture *c, char *buf, size_t len)
{
  size_t n;

  fflush(stderr);
  dup2(c->saved_fd, 2);
  close(c->saved_fd);
  rewind(c->tmp);
  n = fread(buf, 1, len - 1, c->tmp);
  buf[n] = '\0';
  fclose(c->tmp);
}

static inline int count_lines(const char *s)
{
  int n = 0;
  for (; *s; s++)
    n += *s == '\n';
  return n;
}

#endif
