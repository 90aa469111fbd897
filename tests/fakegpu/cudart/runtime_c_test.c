/* Runs a C program on the runtime API over the simulated GPU and checks what the runtime answers.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

static int failures;

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "runtime_c_test.c:%d: FAILED %s: ", __LINE__, #cond);                        \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fputc('\n', stderr);                                                                         \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

#define OK(call)                                                                                   \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    CHECK(e_ == cudaSuccess, "%s -> %d %s", #call, (int)e_, cudaGetErrorName(e_));                 \
  } while (0)

/* nvcc's registration, done by hand: a fatbin holding one PTX kernel, registered under the
 * address of a host function as nvcc's stub would be. */
static const char ptx[] = ".version 9.0\n.target sm_90\n.address_size 64\n"
                          ".visible .entry _Z9by_handlePf(\n.param .u64 p\n)\n{\n\tret;\n}\n";

static uint64_t fatbin_storage[128];

static void *build_fatbin(void)
{
  unsigned char *out = (unsigned char *)fatbin_storage;
  size_t len = sizeof(ptx), padded = (len + 7) & ~(size_t)7;
  uint32_t magic = 0xBA55ED50u, ehdr = 0x50, arch = 90;
  uint16_t version = 1, hdr = 16, kind = 1;
  uint64_t total = ehdr + padded, payload = padded, flags = 0x11;
  memcpy(out, &magic, 4);
  memcpy(out + 4, &version, 2);
  memcpy(out + 6, &hdr, 2);
  memcpy(out + 8, &total, 8);
  unsigned char *e = out + 16;
  memcpy(e, &kind, 2);
  memcpy(e + 4, &ehdr, 4);
  memcpy(e + 8, &payload, 8);
  memcpy(e + 0x1c, &arch, 4);
  memcpy(e + 0x28, &flags, 8);
  memcpy(e + ehdr, ptx, len);
  return out;
}

struct wrapper {
  uint32_t magic, version;
  const void *data;
  void *unused;
};

void **__cudaRegisterFatBinary(void *fatCubin);
void __cudaRegisterFatBinaryEnd(void **handle);
void __cudaRegisterFunction(void **handle, const char *hostFun, char *deviceFun,
                            const char *deviceName, int thread_limit, uint3 *tid, uint3 *bid,
                            dim3 *bDim, dim3 *gDim, int *wSize);

static void by_handle_stub(void)
{
}

static struct wrapper wrapper;

static void check_launches(void)
{
  wrapper = (struct wrapper){0x466243b1u, 1, build_fatbin(), NULL};
  void **h = __cudaRegisterFatBinary(&wrapper);
  CHECK(h != NULL, "registration handle");
  static char name[] = "_Z9by_handlePf";
  __cudaRegisterFunction(h, (const char *)(uintptr_t)by_handle_stub, name, name, -1, NULL, NULL,
                         NULL, NULL, NULL);
  __cudaRegisterFatBinaryEnd(h);

  const char *fname = NULL;
  OK(cudaFuncGetName(&fname, (const void *)(uintptr_t)by_handle_stub));
  CHECK(fname && strcmp(fname, "_Z9by_handlePf") == 0, "cudaFuncGetName gave %s",
        fname ? fname : "(null)");

  float *d = NULL;
  OK(cudaMalloc((void **)&d, 256));
  void *args[] = {&d};
  dim3 grid = {4, 1, 1}, block = {64, 1, 1};
  OK(cudaLaunchKernel((const void *)(uintptr_t)by_handle_stub, grid, block, args, 0, NULL));
  cudaLaunchConfig_t cfg = {.gridDim = grid, .blockDim = block};
  OK(cudaLaunchKernelExC(&cfg, (const void *)(uintptr_t)by_handle_stub, args));
  OK(cudaDeviceSynchronize());

  /* Unknown function, empty grid: the runtime's errors, remembered for cudaGetLastError. */
  cudaError_t e =
      cudaLaunchKernel((const void *)(uintptr_t)check_launches, grid, block, args, 0, NULL);
  CHECK(e == cudaErrorInvalidDeviceFunction, "unregistered function -> %d", (int)e);
  CHECK(cudaPeekAtLastError() == cudaErrorInvalidDeviceFunction, "peek");
  CHECK(cudaGetLastError() == cudaErrorInvalidDeviceFunction, "get");
  CHECK(cudaGetLastError() == cudaSuccess, "get resets");
  dim3 empty = {0, 1, 1};
  e = cudaLaunchKernel((const void *)(uintptr_t)by_handle_stub, empty, block, args, 0, NULL);
  CHECK(e == cudaErrorInvalidConfiguration, "empty grid -> %d", (int)e);
  cudaGetLastError();
  OK(cudaFree(d));
}

static void check_memory(void)
{
  enum { N = 1 << 16 };
  unsigned char *host = malloc(N), *back = malloc(N), *pinned = NULL;
  for (int i = 0; i < N; i++)
    host[i] = (unsigned char)(i * 7 + 3);
  void *a = NULL, *b = NULL;
  OK(cudaMalloc(&a, N));
  OK(cudaMalloc(&b, N));
  OK(cudaMemcpy(a, host, N, cudaMemcpyHostToDevice));
  OK(cudaMemcpy(b, a, N, cudaMemcpyDeviceToDevice));
  memset(back, 0, N);
  OK(cudaMemcpy(back, b, N, cudaMemcpyDeviceToHost));
  CHECK(memcmp(host, back, N) == 0, "H2D, D2D, D2H round trip changed the data");

  OK(cudaMemset(a, 0x5a, N));
  OK(cudaMemcpy(back, a, N, cudaMemcpyDefault));
  CHECK(back[0] == 0x5a && back[N - 1] == 0x5a, "memset gave %#x %#x", back[0], back[N - 1]);

  OK(cudaMallocHost((void **)&pinned, N));
  cudaStream_t s;
  OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  OK(cudaMemcpyAsync(a, host, N, cudaMemcpyHostToDevice, s));
  OK(cudaMemsetAsync(b, 0, N, s));
  OK(cudaMemcpyAsync(pinned, a, N, cudaMemcpyDeviceToHost, s));
  OK(cudaStreamSynchronize(s));
  CHECK(memcmp(host, pinned, N) == 0, "async round trip through pinned memory changed the data");

  struct cudaPointerAttributes attr;
  OK(cudaPointerGetAttributes(&attr, a));
  CHECK(attr.type == cudaMemoryTypeDevice && attr.device == 0, "device pointer: type %d dev %d",
        (int)attr.type, attr.device);
  OK(cudaPointerGetAttributes(&attr, host));
  CHECK(attr.type == cudaMemoryTypeUnregistered, "malloc'd pointer: type %d", (int)attr.type);

  size_t free_b = 0, total_b = 0;
  OK(cudaMemGetInfo(&free_b, &total_b));
  CHECK(total_b > 0 && free_b <= total_b, "mem info %zu / %zu", free_b, total_b);

  void *m = NULL, *pitched = NULL;
  size_t pitch = 0;
  OK(cudaMallocManaged(&m, 4096, cudaMemAttachGlobal));
  OK(cudaMallocPitch(&pitched, &pitch, 100, 10));
  CHECK(pitch >= 100, "pitch %zu", pitch);
  OK(cudaFree(m));
  OK(cudaFree(pitched));

  void *x = NULL;
  OK(cudaMallocAsync(&x, 1 << 20, s));
  OK(cudaFreeAsync(x, s));
  cudaMemPool_t pool;
  OK(cudaDeviceGetDefaultMemPool(&pool, 0));
  uint64_t threshold = UINT64_MAX;
  OK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  OK(cudaMallocFromPoolAsync(&x, 4096, pool, s));
  OK(cudaFreeAsync(x, s));
  OK(cudaStreamSynchronize(s));
  OK(cudaMemPoolTrimTo(pool, 0));
  OK(cudaStreamDestroy(s));

  OK(cudaFreeHost(pinned));
  OK(cudaFree(a));
  OK(cudaFree(b));
  free(host);
  free(back);
}

static void check_streams_events(void)
{
  cudaStream_t s1, s2;
  cudaEvent_t start, stop;
  OK(cudaStreamCreate(&s1));
  OK(cudaStreamCreateWithPriority(&s2, cudaStreamDefault, -1));
  OK(cudaEventCreate(&start));
  OK(cudaEventCreateWithFlags(&stop, cudaEventDefault));
  OK(cudaEventRecord(start, s1));
  void *d = NULL;
  OK(cudaMalloc(&d, 1 << 20));
  OK(cudaMemsetAsync(d, 1, 1 << 20, s1));
  OK(cudaEventRecord(stop, s1));
  OK(cudaStreamWaitEvent(s2, stop, 0));
  OK(cudaEventSynchronize(stop));
  OK(cudaEventQuery(stop));
  OK(cudaStreamQuery(s2));
  float ms = -1;
  OK(cudaEventElapsedTime(&ms, start, stop));
  CHECK(ms >= 0, "elapsed %f", ms);

  enum cudaStreamCaptureStatus st;
  cudaGraph_t g;
  cudaGraphExec_t ge;
  OK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
  OK(cudaStreamIsCapturing(s1, &st));
  CHECK(st == cudaStreamCaptureStatusActive, "capture status %d", (int)st);
  OK(cudaMemsetAsync(d, 2, 1 << 20, s1));
  OK(cudaStreamEndCapture(s1, &g));
  OK(cudaGraphInstantiate(&ge, g, 0));
  for (int i = 0; i < 3; i++)
    OK(cudaGraphLaunch(ge, s1));
  OK(cudaStreamSynchronize(s1));
  OK(cudaGraphExecDestroy(ge));
  OK(cudaGraphInstantiateWithFlags(&ge, g, 0));
  OK(cudaGraphExecDestroy(ge));
  OK(cudaGraphDestroy(g));

  OK(cudaFree(d));
  OK(cudaEventDestroy(start));
  OK(cudaEventDestroy(stop));
  OK(cudaStreamDestroy(s1));
  OK(cudaStreamDestroy(s2));
}

static void check_devices(void)
{
  int n = 0, v = 0, dev = -1;
  OK(cudaGetDeviceCount(&n));
  CHECK(n == 2, "the simulator's default is 2 devices, got %d", n);
  OK(cudaRuntimeGetVersion(&v));
  CHECK(v == 13000, "runtime version %d", v);
  OK(cudaDriverGetVersion(&v));
  CHECK(v >= 13000, "driver version %d", v);
  struct cudaDeviceProp prop;
  OK(cudaGetDeviceProperties(&prop, 0));
  CHECK(prop.name[0] && prop.totalGlobalMem > 0 && prop.major >= 7 && prop.warpSize == 32,
        "props: '%s' %zu bytes sm_%d%d warp %d", prop.name, prop.totalGlobalMem, prop.major,
        prop.minor, prop.warpSize);
  CHECK(cudaSetDevice(n) == cudaErrorInvalidDevice, "device %d accepted", n);
  cudaGetLastError();
  OK(cudaGetDevice(&dev));
  CHECK(dev == 0, "current device %d", dev);
  CHECK(strcmp(cudaGetErrorName(cudaErrorMemoryAllocation), "cudaErrorMemoryAllocation") == 0,
        "error name");
  CHECK(strcmp(cudaGetErrorString(cudaSuccess), "no error") == 0, "error string");
  if (n < 2)
    return;

  /* Peer copy from device 1 to device 0 keeps the data. */
  enum { N = 4096 };
  unsigned char src[N], dst[N];
  for (int i = 0; i < N; i++)
    src[i] = (unsigned char)(i ^ 0x33);
  void *d0 = NULL, *d1 = NULL;
  int can = 0;
  OK(cudaDeviceCanAccessPeer(&can, 0, 1));
  OK(cudaSetDevice(1));
  OK(cudaMalloc(&d1, N));
  OK(cudaMemcpy(d1, src, N, cudaMemcpyHostToDevice));
  OK(cudaSetDevice(0));
  OK(cudaMalloc(&d0, N));
  if (can)
    OK(cudaDeviceEnablePeerAccess(1, 0));
  OK(cudaMemcpyPeer(d0, 0, d1, 1, N));
  OK(cudaMemcpyPeerAsync(d0, 0, d1, 1, N, NULL));
  memset(dst, 0, N);
  OK(cudaMemcpy(dst, d0, N, cudaMemcpyDeviceToHost));
  CHECK(memcmp(src, dst, N) == 0, "peer copy changed the data");
  OK(cudaFree(d0));
  OK(cudaSetDevice(1));
  OK(cudaFree(d1));
  OK(cudaDeviceReset());
  OK(cudaSetDevice(0));
}

int main(void)
{
  check_devices();
  check_memory();
  check_streams_events();
  check_launches();
  OK(cudaDeviceSynchronize());
  OK(cudaDeviceReset());
  if (failures) {
    fprintf(stderr, "runtime_c_test: %d check(s) failed\n", failures);
    return 1;
  }
  printf("runtime_c_test: all checks passed\n");
  return 0;
}
