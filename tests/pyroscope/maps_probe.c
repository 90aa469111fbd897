/* Reports which libcurl/OpenSSL libraries its own process has mapped, after some CUDA work. */
#include <dlfcn.h>
#include <time.h>
#include <unistd.h>

#include "tests/fakegpu/fakegpu.h"
#include "tests/lib/e2e.h"

/*
 * Usage: maps_probe [WAIT_MS]
 * Runs a small driver-API workload (the agent initializes in cuInit), then reads
 * /proc/self/maps. With WAIT_MS, it first polls for up to that long until libcurl is mapped
 * (the upload thread loads it asynchronously). Prints one line per library of the upload
 * stack ("libcurl: mapped" / "libcurl: not mapped", ...) and whether curl_easy_init is
 * visible in the global scope (it must not be: the agent loads libcurl RTLD_LOCAL, and this
 * program does not link it).
 */

static const char *const libs[] = {"libcurl", "libssl", "libcrypto", "libnghttp2"};
#define N_LIBS (sizeof(libs) / sizeof(libs[0]))

/* Sets mapped[i] when a mapped file's name starts with libs[i] followed by '.' or '-'. */
static void scan(int mapped[N_LIBS])
{
  char line[4096];
  FILE *f = fopen("/proc/self/maps", "r");

  if (!f)
    e2e_fail("cannot open /proc/self/maps");
  while (fgets(line, sizeof(line), f)) {
    const char *base = strrchr(line, '/');
    if (!base)
      continue;
    base++;
    for (size_t i = 0; i < N_LIBS; i++) {
      size_t n = strlen(libs[i]);
      if (!strncmp(base, libs[i], n) && (base[n] == '.' || base[n] == '-'))
        mapped[i] = 1;
    }
  }
  fclose(f);
}

int main(int argc, char **argv)
{
  static const char *const names[] = {"_Z5probePf"};
  long wait_ms = argc > 1 ? atol(argv[1]) : 0;
  int mapped[N_LIBS] = {0};
  CUdevice dev;
  CUcontext ctx;
  CUstream s;
  CUmodule mod;
  CUfunction fn;
  CUdeviceptr p;
  uint8_t in[4096], out[4096];

  for (size_t i = 0; i < sizeof(in); i++)
    in[i] = e2e_pattern(i);
  CU(cuInit(0));
  CU(cuDeviceGet(&dev, 0));
  CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU(cuCtxSetCurrent(ctx));
  CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  mod = e2e_module_with_kernels(names, 1);
  CU(cuModuleGetFunction(&fn, mod, names[0]));
  CU(cuMemAlloc(&p, sizeof(in)));
  CU(cuMemcpyHtoD(p, in, sizeof(in)));
  e2e_launch(fn, s);
  CU(cuMemcpyDtoHAsync(out, p, sizeof(out), s));
  CU(cuStreamSynchronize(s));
  CU(cuMemFree(p));
  CU(cuStreamDestroy(s));
  if (memcmp(in, out, sizeof(in)))
    e2e_fail("copy mismatch");

  for (long waited = 0;; waited += 20) {
    scan(mapped);
    if (mapped[0] || waited >= wait_ms)
      break;
    usleep(20000);
  }
  for (size_t i = 0; i < N_LIBS; i++)
    printf("%s: %s\n", libs[i], mapped[i] ? "mapped" : "not mapped");
  printf("curl_easy_init in the global scope: %s\n",
         dlsym(RTLD_DEFAULT, "curl_easy_init") ? "yes" : "no");
  return 0;
}
