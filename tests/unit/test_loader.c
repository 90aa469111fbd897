/* Unit tests of finding and loading CUPTI (cupti/loader.c) with odd files and the real libcupti. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <sys/stat.h>

#include "cupti/loader.h"
#include "unit.h"

static char dir[] = "/tmp/gpuprof-test-loader-XXXXXX";
static char reason[2048];

/* What every refusal must leave: nothing adopted, one line naming the file. */
static void check_refused(int ret, int want, const char *path)
{
  CHECK_EQ(ret, (unsigned long long)want);
  CHECK(strstr(reason, path) != NULL);
  CHECK(strchr(reason, '\n') == NULL);
  CHECK_STR(cupti_loader_path(), "");
  CHECK(cupti_fn.GetVersion == NULL);
}

static void test_odd_files(void)
{
  char empty[256], sub[256];
  int fd;

  snprintf(empty, sizeof(empty), "%s/empty.so", dir);
  fd = open(empty, O_CREAT | O_WRONLY | O_TRUNC, 0644);
  CHECK(fd >= 0);
  close(fd);
  check_refused(cupti_loader_open(empty, 0, reason, sizeof(reason)), -ENOENT, empty);
  CHECK(strstr(reason, "file too short") != NULL);

  snprintf(sub, sizeof(sub), "%s/adir", dir);
  CHECK_EQ(mkdir(sub, 0755), 0);
  check_refused(cupti_loader_open(sub, 0, reason, sizeof(reason)), -ENOENT, sub);
  rmdir(sub);

  /* A shared object that is not CUPTI (the C library is always there). */
  check_refused(cupti_loader_open("libc.so.6", 0, reason, sizeof(reason)), -ENOSYS, "libc.so.6");
  CHECK(strstr(reason, "cuptiGetVersion") != NULL);
  unlink(empty);
}

static int count_cupti(struct dl_phdr_info *info, size_t size, void *arg)
{
  const char *slash = strrchr(info->dlpi_name, '/');

  (void)size;
  if (slash && !strcmp(slash + 1, "libcupti.so.13"))
    (*(int *)arg)++;
  return 0;
}

/* Copies the file `from` to `to` (a new inode: dlopen then sees another library). */
static int copy_file(const char *from, const char *to)
{
  char buf[65536];
  int in = open(from, O_RDONLY), out = open(to, O_CREAT | O_WRONLY | O_TRUNC, 0755);
  ssize_t n = 0;

  while (in >= 0 && out >= 0 && (n = read(in, buf, sizeof(buf))) > 0)
    if (write(out, buf, (size_t)n) != n) {
      n = -1;
      break;
    }
  if (in >= 0)
    close(in);
  if (out >= 0)
    close(out);
  return in >= 0 && out >= 0 && n == 0 ? 0 : -1;
}

/*
 * A CUDA 12 application: its libcupti.so.12 is loaded, no libcupti.so.13 anywhere (wheels_only
 * hides this machine's). The line names that library and its CUDA, and the build to use. Any
 * shared object stands in for it: only its file name is read.
 */
static void test_other_major_loaded(void)
{
  struct link_map *lm = NULL;
  char fake[256];
  void *z = dlopen("libz.so.1", RTLD_NOW | RTLD_LOCAL), *old;

  CHECK(z && dlinfo(z, RTLD_DI_LINKMAP, &lm) == 0 && lm);
  snprintf(fake, sizeof(fake), "%s/libcupti.so.12", dir);
  CHECK_EQ(copy_file(lm->l_name, fake), 0);

  /* Nothing loaded yet: the usual line. */
  CHECK_EQ(cupti_loader_open(NULL, 1, reason, sizeof(reason)), (unsigned long long)-ENOENT);
  CHECK(strstr(reason, "set GPUPROF_CUPTI_PATH") != NULL);
  CHECK(strstr(reason, "CUDA 12") == NULL);

  old = dlopen(fake, RTLD_NOW | RTLD_LOCAL);
  CHECK(old != NULL);
  CHECK_EQ(cupti_loader_open(NULL, 1, reason, sizeof(reason)), (unsigned long long)-ENOENT);
  check_refused(-ENOENT, -ENOENT, fake);
  CHECK(strstr(reason, "the CUPTI of CUDA 12, which this gpuprof (built for CUDA 13.0) cannot "
                       "read") != NULL);
  CHECK(strstr(reason, "it works with CUDA 13 applications only") != NULL);
  if (old)
    dlclose(old);
  dlclose(z);
  unlink(fake);
}

/*
 * The application loaded CUPTI before cuInit (PyTorch does at import) and GPUPROF_CUPTI_PATH
 * names another copy: the loaded one is used, never a second CUPTI in the process.
 */
static void test_configured_path_with_cupti_loaded(void)
{
  char copy[256];
  void *app;
  int n = 0;

  snprintf(copy, sizeof(copy), "%s/libcupti.so.13", dir);
  CHECK_EQ(copy_file(TEST_CUPTI_LIBRARY, copy), 0);
  app = dlopen(TEST_CUPTI_LIBRARY, RTLD_NOW | RTLD_LOCAL);
  CHECK(app != NULL);

  CHECK_EQ(cupti_loader_open(copy, 0, reason, sizeof(reason)), 0);
  dl_iterate_phdr(count_cupti, &n);
  CHECK_EQ(n, 1);
  CHECK_STR(cupti_loader_path(), TEST_CUPTI_LIBRARY);
  CHECK_EQ(cupti_loader_version() / 100, CUPTI_API_VERSION / 100);
  CHECK(cupti_fn.ActivityGetNextRecord == dlsym(app, "cuptiActivityGetNextRecord"));
  unlink(copy);
}

int main(void)
{
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  RUN(test_odd_files);
  RUN(test_other_major_loaded);
  RUN(test_configured_path_with_cupti_loaded);
  rmdir(dir);
  UNIT_EXIT();
}
