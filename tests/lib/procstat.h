/* What a test or benchmark program reads about its own process: open fds, threads, RSS. */
#ifndef GPUPROF_TESTS_LIB_PROCSTAT_H
#define GPUPROF_TESTS_LIB_PROCSTAT_H

#include <dirent.h>
#include <stdio.h>
#include <string.h>

/* Entries of a /proc directory (e.g. /proc/self/fd, /proc/self/task), -1 if unreadable; for
 * /proc/self/fd without the descriptor opendir itself holds. */
static inline int procstat_count_dir(const char *path)
{
  DIR *d = opendir(path);
  struct dirent *e;
  int n = 0;

  if (!d)
    return -1;
  while ((e = readdir(d)))
    if (e->d_name[0] != '.')
      n++;
  closedir(d);
  return n - (strcmp(path, "/proc/self/fd") == 0);
}

/* VmRSS in KiB, -1 if unreadable. */
static inline long procstat_rss_kib(void)
{
  char line[256];
  long kib = -1;
  FILE *f = fopen("/proc/self/status", "r");

  if (!f)
    return -1;
  while (fgets(line, sizeof(line), f))
    if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
      break;
  fclose(f);
  return kib;
}

#endif
