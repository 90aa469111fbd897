/* Capture file stems (agent/util/files.c files_stem_create): unique while held, never reusing
 * a name whose files exist, never truncating, following or replacing anything. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/util/files.h"
#include "unit.h"

#define BASE "gpuprof-host-1-20260101T000000Z-capture"

static const char *const others[] = {
    ".json", ".json.gz", ".pftrace", "-gpu_time.pb.gz", "-gpu_memory.pb.gz", "-memcpy.pb.gz", NULL};
static char dir[PATH_MAX];

static void path_of(char *buf, size_t len, const char *leaf)
{
  snprintf(buf, len, "%s/%s", dir, leaf);
}

static off_t size_of(const char *leaf)
{
  char p[PATH_MAX + 64];
  struct stat st;

  path_of(p, sizeof(p), leaf);
  return lstat(p, &st) ? -1 : st.st_size;
}

static void write_file(const char *leaf, const char *text)
{
  char p[PATH_MAX + 64];
  FILE *f;

  path_of(p, sizeof(p), leaf);
  f = fopen(p, "w");
  CHECK(f != NULL);
  if (f) {
    fputs(text, f);
    fclose(f);
  }
}

static void remove_file(const char *leaf)
{
  char p[PATH_MAX + 64];

  path_of(p, sizeof(p), leaf);
  CHECK_EQ(unlink(p), 0);
}

/* Claims a stem for suffix and checks it is dir/want with stem + suffix created empty. */
static void claim(struct files_stem *s, const char *suffix, const char *want)
{
  char stem[PATH_MAX], exp[PATH_MAX + 64], leaf[PATH_MAX];
  int rc = files_stem_create(s, dir, BASE, 1, suffix, others, stem, sizeof(stem));

  CHECK_EQ(rc, 0);
  path_of(exp, sizeof(exp), want);
  CHECK_STR(stem, exp);
  CHECK(s->fd >= 0);
  snprintf(leaf, sizeof(leaf), "%s%s", want, suffix);
  CHECK_EQ(size_of(leaf), 0);
}

static void release(struct files_stem *s, const char *want)
{
  char leaf[PATH_MAX];

  files_stem_release(s);
  CHECK_EQ(s->fd, (unsigned long long)-1);
  snprintf(leaf, sizeof(leaf), ".%s.lock", want);
  CHECK_EQ(size_of(leaf), (unsigned long long)-1); /* the lock file is removed */
}

int main(void)
{
  struct files_stem a, b, c, d;
  char stem[PATH_MAX], target[PATH_MAX + 64], link_path[PATH_MAX + 64];

  snprintf(dir, sizeof(dir), "/tmp/gpuprof-test-names-XXXXXX");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }

  /* Two writers (agents with one host name, pid, start second and capture id) in one
   * directory, both formats: distinct stems, in order. */
  claim(&a, ".json", BASE);
  claim(&b, ".json", BASE "-1");
  /* Another format: the stem is still taken (its profiles would share the name). */
  claim(&c, ".pftrace", BASE "-1.2");
  CHECK_EQ(size_of(BASE ".pftrace"), (unsigned long long)-1);

  /* Released, but its files stay: the name is not reused, whatever the format. */
  release(&a, BASE);
  claim(&d, ".json.gz", BASE "-1.3");
  CHECK_EQ(size_of(BASE ".json.gz"), (unsigned long long)-1);
  release(&d, BASE "-1.3");

  /* A stem whose only file is a profile (a finished capture whose trace was removed). */
  release(&b, BASE "-1");
  release(&c, BASE "-1.2");
  remove_file(BASE ".json");
  write_file(BASE "-gpu_time.pb.gz", "profile");
  claim(&a, ".json", BASE "-1.4");
  CHECK_EQ(size_of(BASE "-gpu_time.pb.gz"), 7);
  release(&a, BASE "-1.4");

  /* A link planted where the first name's trace goes: skipped, not followed; its target is
   * left as it was. */
  remove_file(BASE "-gpu_time.pb.gz");
  write_file("victim", "keep me");
  path_of(target, sizeof(target), "victim");
  path_of(link_path, sizeof(link_path), BASE ".json");
  CHECK_EQ(symlink(target, link_path), 0);
  claim(&a, ".json", BASE "-1.5");
  CHECK_EQ(size_of("victim"), 7);
  release(&a, BASE "-1.5");

  /* A stale lock file (its holder was killed) is taken over. */
  write_file("." BASE "-1.6.lock", "");
  claim(&a, ".json", BASE "-1.6");
  release(&a, BASE "-1.6");

  /* A link planted where a name's lock file goes (a shared directory): that name is skipped,
   * the link neither followed nor removed. */
  path_of(link_path, sizeof(link_path), "." BASE "-1.7.lock");
  CHECK_EQ(symlink(target, link_path), 0);
  claim(&a, ".json", BASE "-1.8");
  CHECK_EQ(size_of("victim"), 7);
  CHECK_EQ(size_of(BASE "-1.7.json"), (unsigned long long)-1);
  {
    struct stat st;
    CHECK(lstat(link_path, &st) == 0 && S_ISLNK(st.st_mode));
  }
  release(&a, BASE "-1.8");

  /* Errors: a missing directory, a name too long for the caller's buffer. */
  CHECK_EQ(files_stem_create(&a, "/nonexistent-gpuprof-dir", BASE, 1, ".json", others, stem,
                             sizeof(stem)),
           (unsigned long long)-ENOENT);
  CHECK_EQ(a.fd, (unsigned long long)-1);
  CHECK_EQ(files_stem_create(&a, dir, BASE, 1, ".json", others, stem, 8),
           (unsigned long long)-ENAMETOOLONG);

  {
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
      fprintf(stderr, "could not remove %s\n", dir);
  }
  if (unit_failures)
    fprintf(stderr, "%d checks failed\n", unit_failures);
  return unit_failures ? 1 : 0;
}
