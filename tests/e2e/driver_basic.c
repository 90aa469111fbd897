/* e2e driver_basic: one context, two streams, two named kernels, copies in three directions,
 * memsets and allocations through the driver API, all with sizes and durations the checks know. */
#include "tests/fakegpu/fakegpu.h"
#include "tests/lib/e2e.h"

#define MIB (1024u * 1024u)

static const char *const names[] = {"scale_kernel", "_ZN3ops4gemmIfEEvPT_i"};

static int expect_bytes(const char *what, const uint8_t *got, const uint8_t *want, size_t n)
{
  for (size_t i = 0; i < n; i++) {
    if (got[i] != want[i]) {
      printf("%s: mismatch at byte %zu\n", what, i);
      return 1;
    }
  }
  printf("%s: %zu bytes ok\n", what, n);
  return 0;
}

int main(void)
{
  CUdevice dev;
  CUcontext ctx;
  CUstream s1, s2;
  CUmodule mod;
  CUfunction scale, gemm;
  CUdeviceptr a, b, c, d;
  uint8_t *src = malloc(MIB), *out_a = malloc(MIB), *out_b = malloc(12288), *out_c = malloc(65536);
  uint8_t *want = malloc(MIB);
  int bad = 0;

  if (!src || !out_a || !out_b || !out_c || !want)
    e2e_fail("out of host memory");
  for (size_t i = 0; i < MIB; i++)
    src[i] = e2e_pattern(i);

  CU(cuInit(0));
  CU(cuDeviceGet(&dev, 0));
  CU(cuCtxCreate(&ctx, NULL, 0, dev));
  CU(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
  CU(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  mod = e2e_module_with_kernels(names, 2);
  CU(cuModuleGetFunction(&scale, mod, names[0]));
  CU(cuModuleGetFunction(&gemm, mod, names[1]));
  fakegpu_set_kernel_duration_ns(names[0], 5000);
  fakegpu_set_kernel_duration_ns(names[1], 120000);

  /* a, b and c live together: the peak (2 MiB + 64 KiB). */
  CU(cuMemAlloc(&a, MIB));
  CU(cuMemAlloc(&b, MIB));
  CU(cuMemAlloc(&c, 65536));

  /* HtoD: 1 MiB + 4096 on the NULL stream, 65536 async on s1. */
  CU(cuMemcpyHtoD(a, src, MIB));
  CU(cuMemcpyHtoD(b, src + 100, 4096));
  CU(cuMemcpyHtoDAsync(c, src + 200, 65536, s1));
  CU(cuStreamSynchronize(s1));
  /* memsets: 1000 bytes on the NULL stream, 256 words (1024 bytes) async on s2. */
  CU(cuMemsetD8(a, 0x5a, 1000));
  CU(cuMemsetD32Async(b, 0xdeadbeefu, 256, s2));
  CU(cuStreamSynchronize(s2));
  /* DtoD: 8192 on the NULL stream, 16384 async on s1. */
  CU(cuMemcpyDtoD(b + 4096, a, 8192));
  CU(cuMemcpyDtoDAsync(c, a + 1000, 16384, s1));
  CU(cuStreamSynchronize(s1));

  /* Kernels: scale 3x on s1 and 2x on s2, gemm 4x on s2 and once on the NULL stream. */
  for (int i = 0; i < 3; i++)
    e2e_launch(scale, s1);
  for (int i = 0; i < 2; i++) {
    e2e_launch(scale, s2);
    e2e_launch(gemm, s2);
    e2e_launch(gemm, s2);
  }
  e2e_launch(gemm, NULL);

  /* DtoH: 1 MiB and 12288 on the NULL stream, 65536 async on s2. */
  CU(cuMemcpyDtoH(out_a, a, MIB));
  CU(cuMemcpyDtoH(out_b, b, 12288));
  CU(cuMemcpyDtoHAsync(out_c, c, 65536, s2));
  CU(cuStreamSynchronize(s2));
  CU(cuCtxSynchronize());

  memcpy(want, src, MIB);
  memset(want, 0x5a, 1000);
  bad |= expect_bytes("a", out_a, want, MIB);
  for (size_t i = 0; i < 1024; i += 4)
    memcpy(want + i, &(uint32_t){0xdeadbeefu}, 4);
  memcpy(want + 1024, src + 100 + 1024, 4096 - 1024);
  memcpy(want + 4096, out_a, 8192);
  bad |= expect_bytes("b", out_b, want, 12288);
  memcpy(want, out_a + 1000, 16384);
  memcpy(want + 16384, src + 200 + 16384, 65536 - 16384);
  bad |= expect_bytes("c", out_c, want, 65536);

  /* c goes, d (32 KiB) comes: in use stays below the peak. */
  CU(cuMemFree(c));
  CU(cuMemAlloc(&d, 32768));
  CU(cuMemFree(d));
  CU(cuMemFree(b));
  CU(cuMemFree(a));

  CU(cuModuleUnload(mod));
  CU(cuStreamDestroy(s1));
  CU(cuStreamDestroy(s2));
  CU(cuCtxDestroy(ctx));
  free(src);
  free(out_a);
  free(out_b);
  free(out_c);
  free(want);
  printf("driver_basic: %s\n", bad ? "FAILED" : "done");
  return bad;
}
