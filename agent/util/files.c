/* Output files: directories, the names every output file shares, one warning per process. */
#include "agent/util/files.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
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

/* The claimed name: set once at start (files_claim_name), read by the writers afterwards. */
static struct {
  pid_t pid; /* who claimed it: a fork child does not own its parent's name */
  int fd;    /* the locked file, open for the process's life */
  char name[300];
  char lock_path[PATH_MAX];
} claim = {.fd = -1};

#define MAX_SAME_NAME 64

void files_claim_name(const char *dir)
{
  char host[256], name[sizeof(claim.name)], path[PATH_MAX];
  pid_t pid = getpid();
  int retries = 0;

  files_hostname(host, sizeof(host));
  if (files_mkdir_p(dir, 0755))
    return;
  for (int n = 1; n <= MAX_SAME_NAME; n++) {
    struct stat by_fd, by_path;
    int fd;

    if (n == 1)
      snprintf(name, sizeof(name), "%s-%d", host, (int)pid);
    else
      snprintf(name, sizeof(name), "%s-%d.%d", host, (int)pid, n);
    if ((size_t)snprintf(path, sizeof(path), "%s/.gpuprof-%s.lock", dir, name) >= sizeof(path))
      return;
    fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0)
      return; /* an unusable directory: the plain name, as without a claim */
    if (flock(fd, LOCK_EX | LOCK_NB)) {
      close(fd);
      if (errno != EWOULDBLOCK)
        return;
      continue; /* a live process has this name */
    }
    /* Locked, but the file may have been removed by its exiting owner between our open and
     * our lock: then it is not the name's lock any more. */
    if (fstat(fd, &by_fd) || stat(path, &by_path) || by_fd.st_ino != by_path.st_ino ||
        by_fd.st_dev != by_path.st_dev) {
      close(fd);
      if (++retries < 8)
        n--;
      continue;
    }
    claim.fd = fd;
    claim.pid = pid;
    snprintf(claim.name, sizeof(claim.name), "%s", name);
    snprintf(claim.lock_path, sizeof(claim.lock_path), "%s", path);
    return;
  }
}

void files_name(char *buf, size_t len)
{
  char host[256];

  if (claim.fd >= 0 && claim.pid == getpid()) {
    snprintf(buf, len, "%s", claim.name);
    return;
  }
  files_hostname(host, sizeof(host));
  snprintf(buf, len, "%s-%d", host, (int)getpid());
}

void files_release_name(void)
{
  if (claim.fd < 0 || claim.pid != getpid())
    return;
  /* Removed while still locked: a process opening it now finds it gone after locking (the
   * check above) and tries again. */
  unlink(claim.lock_path);
  close(claim.fd);
  claim.fd = -1;
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
