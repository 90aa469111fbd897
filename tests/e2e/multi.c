/* e2e multi: two devices, eight threads with a stream each launching a known number of kernels
 * and allocating known sizes, then a peer copy between the devices. */
#include <pthread.h>

#include "tests/fakegpu/fakegpu.h"
#include "tests/lib/e2e.h"

#define THREADS 8
#define PEER_BYTES 262144u

static const char *const names[] = {"_Z6workerPfi"};

static CUcontext ctx[2];
static CUfunction fn[2];
static pthread_barrier_t allocated;

/* Thread i runs on device i % 2, launches 20 + i kernels on its own stream and allocates two
 * buffers of (i + 1) * 4096 bytes; all threads hold both buffers at the barrier, so the
 * per-device peak is the sum over its threads. */
static void *worker(void *arg)
{
  int i = (int)(intptr_t)arg, d = i % 2;
  size_t size = (size_t)(i + 1) * 4096;
  CUstream s;
  CUdeviceptr x, y;

  CU(cuCtxSetCurrent(ctx[d]));
  CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CU(cuMemAlloc(&x, size));
  CU(cuMemAlloc(&y, size));
  pthread_barrier_wait(&allocated);
  CU(cuMemFree(x));
  for (int k = 0; k < 20 + i; k++)
    e2e_launch(fn[d], s);
  CU(cuStreamSynchronize(s));
  CU(cuMemFree(y));
  CU(cuStreamDestroy(s));
  return NULL;
}

int main(void)
{
  CUdevice dev[2];
  CUmodule mod[2];
  CUstream ps;
  CUdeviceptr src, dst;
  pthread_t t[THREADS];
  int count = 0;
  uint8_t *in = malloc(PEER_BYTES), *out = malloc(PEER_BYTES);

  if (!in || !out)
    e2e_fail("out of host memory");
  for (size_t i = 0; i < PEER_BYTES; i++)
    in[i] = e2e_pattern(i);
  CU(cuInit(0));
  CU(cuDeviceGetCount(&count));
  if (count < 2)
    e2e_fail("multi needs 2 devices (FAKEGPU_DEVICES=2)");
  for (int d = 0; d < 2; d++) {
    CU(cuDeviceGet(&dev[d], d));
    CU(cuDevicePrimaryCtxRetain(&ctx[d], dev[d]));
    CU(cuCtxSetCurrent(ctx[d]));
    mod[d] = e2e_module_with_kernels(names, 1);
    CU(cuModuleGetFunction(&fn[d], mod[d], names[0]));
  }
  fakegpu_set_kernel_duration_ns(names[0], 1500);

  /* The peer buffers live across the threads' lifetime: part of each device's peak. */
  CU(cuCtxSetCurrent(ctx[1]));
  CU(cuMemAlloc(&dst, PEER_BYTES));
  CU(cuCtxSetCurrent(ctx[0]));
  CU(cuMemAlloc(&src, PEER_BYTES));

  pthread_barrier_init(&allocated, NULL, THREADS);
  for (int i = 0; i < THREADS; i++)
    if (pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i) != 0)
      e2e_fail("pthread_create");
  for (int i = 0; i < THREADS; i++)
    pthread_join(t[i], NULL);
  pthread_barrier_destroy(&allocated);

  /* HtoD on device 0, peer copy 0 -> 1 on a stream of device 0, DtoH from device 1. */
  CU(cuCtxSetCurrent(ctx[0]));
  CU(cuStreamCreate(&ps, CU_STREAM_NON_BLOCKING));
  CU(cuMemcpyHtoD(src, in, PEER_BYTES));
  CU(cuMemcpyPeerAsync(dst, ctx[1], src, ctx[0], PEER_BYTES, ps));
  CU(cuStreamSynchronize(ps));
  CU(cuCtxSetCurrent(ctx[1]));
  CU(cuMemcpyDtoH(out, dst, PEER_BYTES));
  CU(cuMemFree(dst));
  CU(cuCtxSetCurrent(ctx[0]));
  CU(cuMemFree(src));
  CU(cuStreamDestroy(ps));

  if (memcmp(in, out, PEER_BYTES) != 0) {
    printf("multi: peer copy mismatch\n");
    return 1;
  }
  printf("multi: %d threads, %d launches, peer copy of %u bytes ok\n", THREADS,
         THREADS * 20 + THREADS * (THREADS - 1) / 2, PEER_BYTES);
  free(in);
  free(out);
  return 0;
}
