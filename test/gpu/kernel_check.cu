// A CUDA C program as users write them (runtime API, kernels): under the hook
// it allocates several sizes (a slab-sized, a buddy-sized and a coalesced
// block larger than one chunk), runs a kernel that writes a pattern over all
// of each, checks it on the device and on the host, and frees. Exit 0 = ok.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
  std::printf("FAIL %s: %s\n", #x, cudaGetErrorString(e_)); return 1; } } while (0)

__global__ void fill(unsigned *p, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = (unsigned)i * 2654435761u ^ seed;
}
__global__ void verify(const unsigned *p, size_t n, unsigned seed, unsigned long long *bad) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    if (p[i] != ((unsigned)i * 2654435761u ^ seed)) atomicAdd(bad, 1ull);
}

int main() {
  const size_t sizes[] = {256, 4096, 1 << 20, 64u << 20, 600u << 20};
  unsigned *ptr[5];
  unsigned long long *bad;
  size_t free_b, total_b;
  CK(cudaMemGetInfo(&free_b, &total_b));
  std::printf("cudaMemGetInfo free=%zu total=%zu\n", free_b, total_b);
  CK(cudaMalloc(&bad, sizeof(*bad)));
  for (int k = 0; k < 5; k++) {
    CK(cudaMalloc(&ptr[k], sizes[k]));
    if ((unsigned long long)ptr[k] % 256) { std::printf("FAIL alignment %p\n", (void *)ptr[k]); return 1; }
  }
  for (int k = 0; k < 5; k++) {
    size_t n = sizes[k] / 4;
    CK(cudaMemset(bad, 0, sizeof(*bad)));
    fill<<<264, 256>>>(ptr[k], n, 77u + k);
    CK(cudaGetLastError());
    verify<<<264, 256>>>(ptr[k], n, 77u + k, bad);
    CK(cudaGetLastError());
    unsigned long long nbad = 0;
    CK(cudaMemcpy(&nbad, bad, sizeof(nbad), cudaMemcpyDeviceToHost));
    unsigned *host = (unsigned *)std::malloc(sizes[k]);
    CK(cudaMemcpy(host, ptr[k], sizes[k], cudaMemcpyDeviceToHost));
    size_t hbad = 0;
    for (size_t i = 0; i < n; i++) hbad += host[i] != ((unsigned)i * 2654435761u ^ (77u + k));
    std::free(host);
    std::printf("%s size=%zu device_mismatches=%llu host_mismatches=%zu\n",
                nbad || hbad ? "FAIL" : "PASS", sizes[k], nbad, hbad);
    if (nbad || hbad) return 1;
  }
  for (int k = 0; k < 5; k++) CK(cudaFree(ptr[k]));
  CK(cudaFree(bad));
  std::printf("PASS kernel_check\n");
  return 0;
}
