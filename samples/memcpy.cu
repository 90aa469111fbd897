// Sample: a memcpy-bound loop in every direction, pageable and pinned, and peer when possible.
//
// What a profiler must show (checked by the GPU verification script), with R = 5 rounds of
// 8388608-byte (8 MiB) copies, all cudaMemcpy on the legacy default stream, no kernels:
//   HtoD  2R = 10 copies, 83886080 bytes: R from pageable memory, R from pinned memory
//   DtoH  2R = 10 copies, 83886080 bytes: R to pageable memory, R to pinned memory
//   DtoD  R = 5 copies, 41943040 bytes
//   PtoP  with 2+ devices that can access each other: R = 5 cudaMemcpyPeer copies of 8 MiB
//         from device 0 to device 1 (41943040 bytes), then one more 8 MiB DtoH from device 1
//         that checks them; with one device the program prints "memcpy: peer copies skipped"
//         and there are none
//   cudaMallocHost 1 call of 8 MiB (pinned), cudaMalloc 2 calls (+1 on device 1 for peer)
#include <algorithm>
#include <cstring>
#include <vector>

#include "sample_common.h"

constexpr size_t kBytes = 8 << 20;
constexpr int kRounds = 5;

int main()
{
  std::vector<unsigned char> pageable(kBytes), check(kBytes);
  for (size_t i = 0; i < kBytes; i++)
    pageable[i] = (unsigned char)(i * 31 + 7);
  unsigned char *pinned = nullptr, *a = nullptr, *b = nullptr;
  CHECK(cudaMallocHost(&pinned, kBytes));
  memcpy(pinned, pageable.data(), kBytes);
  CHECK(cudaMalloc(&a, kBytes));
  CHECK(cudaMalloc(&b, kBytes));

  for (int r = 0; r < kRounds; r++) {
    CHECK(cudaMemcpy(a, pageable.data(), kBytes, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(b, a, kBytes, cudaMemcpyDeviceToDevice));
    CHECK(cudaMemcpy(check.data(), b, kBytes, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(a, pinned, kBytes, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(pinned, a, kBytes, cudaMemcpyDeviceToHost));
  }
  // Copies run on the simulator too: their results are checked everywhere.
  if (memcmp(check.data(), pageable.data(), kBytes) != 0 ||
      memcmp(pinned, pageable.data(), kBytes) != 0) {
    fprintf(stderr, "memcpy: data changed in a round trip\n");
    return 1;
  }

  int devices = 0, can = 0;
  CHECK(cudaGetDeviceCount(&devices));
  if (devices >= 2)
    CHECK(cudaDeviceCanAccessPeer(&can, 0, 1));
  if (devices >= 2 && can) {
    unsigned char *peer = nullptr;
    CHECK(cudaSetDevice(1));
    CHECK(cudaMalloc(&peer, kBytes));
    CHECK(cudaSetDevice(0));
    cudaError_t e = cudaDeviceEnablePeerAccess(1, 0);
    if (e != cudaErrorPeerAccessAlreadyEnabled)
      CHECK(e);
    cudaGetLastError();
    for (int r = 0; r < kRounds; r++)
      CHECK(cudaMemcpyPeer(peer, 1, a, 0, kBytes));
    std::fill(check.begin(), check.end(), 0);
    CHECK(cudaMemcpy(check.data(), peer, kBytes, cudaMemcpyDeviceToHost));
    if (memcmp(check.data(), pageable.data(), kBytes) != 0) {
      fprintf(stderr, "memcpy: peer copy changed the data\n");
      return 1;
    }
    CHECK(cudaFree(peer));
    printf("memcpy: %d peer copies from device 0 to device 1\n", kRounds);
  } else {
    printf("memcpy: peer copies skipped (%d device%s%s)\n", devices, devices == 1 ? "" : "s",
           devices >= 2 ? " without peer access" : "");
  }

  CHECK(cudaFree(a));
  CHECK(cudaFree(b));
  CHECK(cudaFreeHost(pinned));
  printf("memcpy: results verified\n");
  return 0;
}
