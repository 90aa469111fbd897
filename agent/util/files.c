/* Output files: directories, the names output files share, capture stems, one warning. */
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

int files_lock(const char *path)
{
  for (int tries = 0; tries < 8; tries++) {
    struct stat by_fd, by_path;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);

    if (fd < 0)
      return -errno;
    if (flock(fd, LOCK_EX | LOCK_NB)) {
      int err = errno == EWOULDBLOCK ? -EWOULDBLOCK : -errno;
      close(fd);
      return err;
    }
    /* Locked, but the file may have been removed by its exiting owner between our open and
     * our lock: then it is not the name's lock any more, and a newcomer may hold the new one. */
    if (fstat(fd, &by_fd) == 0 && stat(path, &by_path) == 0 && by_fd.st_ino == by_path.st_ino &&
        by_fd.st_dev == by_path.st_dev)
      return fd;
    close(fd);
  }
  return -EWOULDBLOCK;
}

void files_unlock(int fd, const char *path)
{
  if (fd < 0)
    return;
  /* Removed while still locked: a process opening it now finds it gone after locking (the
   * check in files_lock) and tries again. */
  unlink(path);
  close(fd);
}

void files_claim_name(const char *dir)
{
  char host[256], name[sizeof(claim.name)], path[PATH_MAX];
  pid_t pid = getpid();

  files_hostname(host, sizeof(host));
  if (files_mkdir_p(dir, 0755))
    return;
  for (int n = 1; n <= MAX_SAME_NAME; n++) {
    int fd;

    if (n == 1)
      snprintf(name, sizeof(name), "%s-%d", host, (int)pid);
    else
      snprintf(name, sizeof(name), "%s-%d.%d", host, (int)pid, n);
    if ((size_t)snprintf(path, sizeof(path), "%s/.gpuprof-%s.lock", dir, name) >= sizeof(path))
      return;
    fd = files_lock(path);
    if (fd == -EWOULDBLOCK)
      continue; /* a live process has this name */
    if (fd < 0)
      return; /* an unusable directory: the plain name, as without a claim */
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
  files_unlock(claim.fd, claim.lock_path);
  claim.fd = -1;
}

/* Whether any of the stem's files exists (a dangling link counts: it is never followed). */
static int stem_taken(char *path, size_t len, const char *stem, const char *const *suffixes)
{
  struct stat st;

  for (; *suffixes; suffixes++) {
    if ((size_t)snprintf(path, len, "%s%s", stem, *suffixes) >= len)
      return -ENAMETOOLONG;
    if (lstat(path, &st) == 0)
      return 1;
  }
  return 0;
}

int files_stem_create(struct files_stem *s, const char *dir, const char *base, uint64_t id,
                      const char *suffix, const char *const *others, char *stem, size_t len)
{
  char cand[PATH_MAX], path[PATH_MAX];
  int ret = -EEXIST;

  s->fd = -1;
  for (int k = 0; k <= MAX_SAME_NAME; k++) {
    const char *leaf;
    int n, fd;

    if (k == 0)
      n = snprintf(cand, sizeof(cand), "%s/%s", dir, base);
    else if (k == 1)
      n = snprintf(cand, sizeof(cand), "%s/%s-%llu", dir, base, (unsigned long long)id);
    else
      n = snprintf(cand, sizeof(cand), "%s/%s-%llu.%d", dir, base, (unsigned long long)id, k);
    if (n < 0 || (size_t)n >= sizeof(cand) || (size_t)n >= len)
      return -ENAMETOOLONG;
    leaf = cand + strlen(dir) + 1;
    if ((size_t)snprintf(s->lock_path, sizeof(s->lock_path), "%s/.%s.lock", dir, leaf) >=
        sizeof(s->lock_path))
      return -ENAMETOOLONG;
    s->fd = files_lock(s->lock_path);
    if (s->fd == -EWOULDBLOCK)
      continue; /* another live capture writes this stem's files */
    if (s->fd == -EACCES || s->fd == -EPERM || s->fd == -ELOOP) {
      /* A stale lock of another user's (a shared /tmp), or a link planted there (never
       * followed): the next name. */
      ret = s->fd;
      continue;
    }
    if (s->fd < 0) {
      ret = s->fd;
      goto out;
    }
    /* Files of a finished capture (or of one whose process was killed): never replaced. */
    ret = stem_taken(path, sizeof(path), cand, others);
    if (ret == 0) {
      if ((size_t)snprintf(path, sizeof(path), "%s%s", cand, suffix) >= sizeof(path)) {
        ret = -ENAMETOOLONG;
      } else {
        fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd >= 0) {
          close(fd);
          snprintf(stem, len, "%s", cand);
          return 0;
        }
        ret = errno == EEXIST ? 1 : -errno;
      }
    }
    files_stem_release(s);
    if (ret < 0)
      goto out;
    ret = -EEXIST;
  }
  /* Every name taken (or, with EACCES, a directory we may not write to). */
out:
  s->fd = -1;
  return ret;
}

void files_stem_release(struct files_stem *s)
{
  int fd = s->fd;

  /* -1 before the close: a fork in between would have the child's files_stem_forget close
   * whatever the application opened under the number meanwhile (a worker's pipe). */
  s->fd = -1;
  files_unlock(fd, s->lock_path);
}

void files_stem_forget(struct files_stem *s)
{
  /* Only our copy of the descriptor: the lock itself stays the parent's. */
  if (s->fd >= 0)
    close(s->fd);
  s->fd = -1;
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
