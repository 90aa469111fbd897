/* Benchmark: names demangled per second by the agent's bounded demangler (libiberty's callback
 * API, agent/util/demangle.c) and by libstdc++'s __cxa_demangle, which it replaced. Not a test. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent/util/demangle.h"

/*
 * Usage: bench_demangle [ROUNDS] [MAX_OLD_DEPTH]
 * Part 1: the kernel names of bench_names.c and the unit test's corpus, each demangled afresh
 * (no cache) in a loop of about 0.2 s, best of ROUNDS (default 7) by thread CPU time.
 * Part 2: review R35's exponential names, depth 10 .. 40 (the demangled size doubles each
 * level): the old demangler only up to MAX_OLD_DEPTH (default 22; 25 takes seconds and 0.8 GB).
 */
extern char *__cxa_demangle(const char *mangled, char *buf, size_t *len, int *status);

static const char *const names[] = {
    "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEENS_6detail5ArrayIPcLi1"
    "EEEEEviT0_T1_",
    "_ZN2at6native12_GLOBAL__N_119cunn_SoftMaxForwardILi4EfffNS1_22SoftMaxForwardEpilogueEEEvPT2_"
    "PKT0_l",
    "_ZN7cutlass6KernelINS_4gemm6kernel4GemmINS1_11threadblock12MmaPipelinedINS1_9GemmShapeILi128E"
    "Li128ELi8EEEfEEEEEEvNT_6ParamsE",
    "_Z10fma_kernelIfEvPT_S0_S0_i",
    "_Z5smallPf",
    "_ZZ4mainENKUlvE_clEv",
    "_Z6kernelIZ4mainEUliE_EvT_",
    "_Z3fooi.constprop.0",
    "_ZNSt6vectorIiSaIiEE9push_backERKi",
    "_Z1fIJifEEvDpT_",
    "_ZN12_GLOBAL__N_13fooEv",
    "_ZNK1A3getEv",
};
#define N_NAMES (sizeof(names) / sizeof(names[0]))

static double cpu_now(void)
{
  struct timespec t;

  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static char *old_demangle(const char *name)
{
  int status;

  return __cxa_demangle(name, NULL, NULL, &status);
}

/* Seconds of CPU per pass over names[], best of rounds; *bytes: output bytes of one pass. */
static double per_pass(char *(*fn)(const char *), int rounds, size_t *bytes)
{
  double best = 1e9;

  for (int r = 0; r < rounds; r++) {
    long passes = 0;
    double t0 = cpu_now(), t;

    do {
      *bytes = 0;
      for (size_t i = 0; i < N_NAMES; i++) {
        char *s = fn(names[i]);

        *bytes += s ? strlen(s) : 0;
        free(s);
      }
      passes++;
      t = cpu_now() - t0;
    } while (t < 0.2);
    if (t / (double)passes < best)
      best = t / (double)passes;
  }
  return best;
}

static void deep_name(char *out, size_t size, int depth)
{
  static const char digits[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ";
  size_t n = (size_t)snprintf(out, size, "_Z11deep_kernelI4PairI");

  for (int i = 1; i < depth; i++)
    n += (size_t)snprintf(out + n, size - n, "S0_I");
  n += (size_t)snprintf(out + n, size - n, "4Tile");
  for (int k = 1; k <= depth; k++) {
    if (k < 36)
      n += (size_t)snprintf(out + n, size - n, "S%c_E", digits[k]);
    else
      n += (size_t)snprintf(out + n, size - n, "S%c%c_E", digits[k / 36], digits[k % 36]);
  }
  snprintf(out + n, size - n, "EvPT_");
}

int main(int argc, char **argv)
{
  int rounds = argc > 1 ? atoi(argv[1]) : 7;
  int max_old = argc > 2 ? atoi(argv[2]) : 22;
  size_t b_old, b_new;
  double t_old = per_pass(old_demangle, rounds, &b_old);
  double t_new = per_pass(demangle_alloc, rounds, &b_new);
  char name[1024];

  printf("normal names (%zu, %zu bytes demangled a pass):\n", N_NAMES, b_new);
  printf("  __cxa_demangle   %9.0f names/s (%.2f us a name)\n", (double)N_NAMES / t_old,
         t_old * 1e6 / (double)N_NAMES);
  printf("  demangle_alloc   %9.0f names/s (%.2f us a name)%s\n", (double)N_NAMES / t_new,
         t_new * 1e6 / (double)N_NAMES, b_old == b_new ? "" : " (OUTPUT DIFFERS)");
  printf("exponential names (review R35): depth, mangled length, then output bytes and CPU ms\n");
  for (int depth = 10; depth <= 40; depth += 2) {
    double t0, t1, t2;
    char *o = NULL, *n;

    deep_name(name, sizeof(name), depth);
    t0 = cpu_now();
    if (depth <= max_old)
      o = old_demangle(name);
    t1 = cpu_now();
    n = demangle_alloc(name);
    t2 = cpu_now();
    if (depth <= max_old)
      printf("  %2d %4zu  old %11zu B %9.1f ms   new %5zu B %6.3f ms\n", depth, strlen(name),
             o ? strlen(o) : 0, (t1 - t0) * 1e3, n ? strlen(n) : 0, (t2 - t1) * 1e3);
    else
      printf("  %2d %4zu  old (not run)                 new %5zu B %6.3f ms\n", depth, strlen(name),
             n ? strlen(n) : 0, (t2 - t1) * 1e3);
    free(o);
    free(n);
  }
  return 0;
}
