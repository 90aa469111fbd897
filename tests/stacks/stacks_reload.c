/* Symbolizing a library whose path gets another build: dlclosed and a rebuilt file dlopened at the
 * same path (and addresses), the first one loaded again, and a file replaced on disk while loaded.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/symbolize.h"

static int failures;

#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "stacks_reload: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);      \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

/* Copies src to a new file renamed over dst: a new inode, as a linker writing its output. */
static int install(const char *src, const char *dst)
{
  char tmp[4096], buf[65536];
  int in, out = -1, ret = -1;
  ssize_t n;

  snprintf(tmp, sizeof(tmp), "%s.new", dst);
  in = open(src, O_RDONLY | O_CLOEXEC);
  if (in < 0)
    goto out;
  out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
  if (out < 0)
    goto out;
  while ((n = read(in, buf, sizeof(buf))) > 0)
    if (write(out, buf, (size_t)n) != n)
      goto out;
  if (n == 0 && close(out) == 0 && rename(tmp, dst) == 0)
    ret = 0;
  out = -1;
out:
  if (in >= 0)
    close(in);
  if (out >= 0)
    close(out);
  if (ret)
    fprintf(stderr, "stacks_reload: cannot install %s as %s: %s\n", src, dst, strerror(errno));
  return ret;
}

/* dlopens path and returns the address of fn in it. */
static void *load(const char *path, const char *fn, void **handle)
{
  void *f;

  *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!*handle) {
    fprintf(stderr, "stacks_reload: dlopen %s: %s\n", path, dlerror());
    exit(1);
  }
  f = dlsym(*handle, fn);
  if (!f) {
    fprintf(stderr, "stacks_reload: no %s in %s\n", fn, path);
    exit(1);
  }
  return f;
}

/* The function the frame (a return address just inside fn) resolves to, or "" */
static const char *resolve(struct symbolizer *s, void *fn, struct sym_frame *f)
{
  return symbolizer_resolve(s, (uint64_t)(uintptr_t)fn + 1, f) == 0 ? f->function : "";
}

int main(int argc, char **argv)
{
  char dir[] = "/tmp/gpuprof-reload-XXXXXX", path[4096];
  struct symbolizer *s, *s2;
  struct sym_frame f;
  uint8_t id_alpha[64];
  size_t id_alpha_len;
  void *h, *alpha, *bravo, *alpha2;

  if (argc != 3) {
    fprintf(stderr, "usage: stacks_reload LIB_ALPHA LIB_BRAVO\n");
    return 2;
  }
  if (!mkdtemp(dir)) {
    perror("stacks_reload: mkdtemp");
    return 1;
  }
  snprintf(path, sizeof(path), "%s/libstk_reload.so", dir);

  /* The first build, resolved once (its symbols are read and kept). */
  if (install(argv[1], path))
    return 1;
  alpha = load(path, "stk_reload_alpha", &h);
  s = symbolizer_new();
  CHECK(s != NULL);
  CHECK(!strcmp(resolve(s, alpha, &f), "stk_reload_alpha"));
  CHECK(f.mod && f.mod->build_id_len > 0);
  id_alpha_len = f.mod ? f.mod->build_id_len : 0;
  if (f.mod)
    memcpy(id_alpha, f.mod->build_id, id_alpha_len);
  CHECK(f.module && !strcmp(f.module, "libstk_reload.so"));

  /* Closed, rebuilt, loaded again at the same path: the new build's names and build id. */
  CHECK(dlclose(h) == 0);
  CHECK(dlopen(path, RTLD_NOW | RTLD_NOLOAD) == NULL);
  if (install(argv[2], path))
    return 1;
  bravo = load(path, "stk_reload_bravo", &h);
  if (bravo != alpha)
    fprintf(stderr, "stacks_reload: note: the rebuilt library was loaded at other addresses\n");
  CHECK(symbolizer_sync(s) == 1);
  CHECK(!strcmp(resolve(s, bravo, &f), "stk_reload_bravo"));
  CHECK(f.mod && (f.mod->build_id_len != id_alpha_len ||
                  memcmp(f.mod->build_id, id_alpha, id_alpha_len) != 0));

  /* And the first build loaded again in place of the second. */
  CHECK(dlclose(h) == 0);
  if (install(argv[1], path))
    return 1;
  alpha2 = load(path, "stk_reload_alpha", &h);
  CHECK(symbolizer_sync(s) == 1);
  CHECK(!strcmp(resolve(s, alpha2, &f), "stk_reload_alpha"));
  CHECK(f.mod && f.mod->build_id_len == id_alpha_len &&
        !memcmp(f.mod->build_id, id_alpha, id_alpha_len));

  /* Replaced on disk while loaded, symbols not read yet: the file on disk is not the loaded
   * code, so no name rather than the new file's. */
  if (install(argv[2], path))
    return 1;
  s2 = symbolizer_new();
  CHECK(s2 != NULL);
  CHECK(!strcmp(resolve(s2, alpha2, &f), ""));
  CHECK(f.function == NULL && f.module && !strcmp(f.module, "libstk_reload.so"));
  CHECK(f.module_offset == (uint64_t)(uintptr_t)alpha2 + 1 - (f.mod ? f.mod->bias : 0));

  symbolizer_free(s2);
  symbolizer_free(s);
  dlclose(h);
  unlink(path);
  rmdir(dir);
  if (failures)
    return 1;
  printf("stacks_reload: ok\n");
  return 0;
}
