/* The trace test programs' shared helpers: the check macro (counts failed expectations, names
 * each on stderr), a forked-child check and incompressible test bytes. */
#ifndef GPUPROF_TESTS_TRACE_EXPECT_H
#define GPUPROF_TESTS_TRACE_EXPECT_H

#include <stdint.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

static int failures;

#define EXPECT(cond)                                                                               \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: %s failed\n", __FILE__, __LINE__, #cond);                            \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

/* The next byte of a xorshift64 stream: incompressible data, the same for the same seed. */
static inline unsigned char xorshift_byte(uint64_t *seed)
{
  *seed ^= *seed << 13;
  *seed ^= *seed >> 7;
  *seed ^= *seed << 17;
  return (unsigned char)*seed;
}

/*
 * Runs child(DIR/name, arg) in a forked child (for a process-wide setting such as a file size
 * limit) and expects it to exit 0; a non-zero status, the check that failed there, is printed.
 */
static inline void expect_child_ok(const char *what, int (*child)(const char *, unsigned char *),
                                   const char *dir, const char *name, unsigned char *arg)
{
  char path[4096];
  pid_t pid;
  int status = 0;

  snprintf(path, sizeof(path), "%s/%s", dir, name);
  fflush(NULL);
  pid = fork();
  if (pid == 0)
    _exit(child(path, arg));
  EXPECT(pid > 0);
  EXPECT(waitpid(pid, &status, 0) == pid);
  if (!WIFEXITED(status) || WEXITSTATUS(status))
    fprintf(stderr, "%s: child status %#x\n", what, (unsigned)status);
  EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

#endif
