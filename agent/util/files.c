/* Output files: directories, the names every output file shares, one warning per process. */
#include "agent/util/files.h"

#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int files_mkdir_p(const char *dir, mode_t leaf_mode)
{
  char path[PATH_MAX];
  size_t len = strlen(dir);

  if (len == 0)
    return -EINVAL;
  if (len >= sizeof(path))
    return -ENAMETOOLONG;
  memcpy(path, dir, len + 1);
  for (char *p = path + 1; *p; p++) {
    if (*p != '/')
      continue;
    *p = '\0';
    if (mkdir(path, 0755) && errno != EEXIST)
      return -errno;
    *p = '/';
  }
  if (mkdir(path, leaf_mode) && errno != EEXIST)
    return -errno;
  return 0;
}

void files_hostname(char *buf, size_t len)
{
  if (len == 0)
    return;
  if (gethostname(buf, len) != 0 || buf[0] == '\0')
    snprintf(buf, len, "unknown");
  buf[len - 1] = '\0';
  /* A hostname with '/' would escape the directory. */
  for (char *p = buf; *p; p++)
    if (*p == '/')
      *p = '_';
}

void files_utc_stamp(uint64_t ns, char *buf, size_t len)
{
  time_t secs = (time_t)(ns / 1000000000ull);
  struct tm tm;

  gmtime_r(&secs, &tm);
  if (strftime(buf, len, "%Y%m%dT%H%M%SZ", &tm) == 0 && len)
    buf[0] = '\0';
}

int files_first_output_error(void)
{
  static atomic_int reported;

  return atomic_exchange(&reported, 1) == 0;
}
