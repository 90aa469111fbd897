/* What a test or benchmark program reads about its own process: open fds, threads, RSS. */
#ifndef GPUPROF_TESTS_LIB_PROCSTAT_H
#define GPUPROF_TESTS_LIB_PROCSTAT_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

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

/* Threads of this process named `name` (/proc/self/task/N/comm), the first one's id in *tid
 * when tid is not NULL; -1 if /proc cannot be read. */
static inline int procstat_threads_named(const char *name, pid_t *tid)
{
  DIR *d = opendir("/proc/self/task");
  struct dirent *e;
  int n = 0;

  if (!d)
    return -1;
  while ((e = readdir(d))) {
    char path[300], comm[64] = "";
    FILE *f;

    if (e->d_name[0] == '.')
      continue;
    snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
    f = fopen(path, "r");
    if (!f)
      continue; /* the thread ended between readdir and open */
    if (fgets(comm, sizeof(comm), f))
      comm[strcspn(comm, "\n")] = '\0';
    fclose(f);
    if (strcmp(comm, name))
      continue;
    if (!n && tid)
      *tid = (pid_t)atoi(e->d_name);
    n++;
  }
  closedir(d);
  return n;
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
