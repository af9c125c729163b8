// test/gpu_bw.cu — the device memory bandwidth that test/gpu.sh compares clover-cuda's decode steps
// with: a large device-to-device copy, timed with CUDA events, counting the bytes read plus the bytes
// written (as the ~4.3 TB/s reported for an H200's copy in README.md, "GPU", is counted).
//
//   nvcc -O2 -o build/gpu_bw test/gpu_bw.cu && build/gpu_bw [GIB]    (default 4 GiB per buffer)
//
// Two buffers of GIB GiB, filled with a hash of the index (not zeros: METHOD.md's advice, and an
// unwritten buffer would go unnoticed), copied back and forth: 3 copies to warm up, then REPS timed
// ones, each between its own pair of events; prints the median, min and max, and checks that the
// last copy's destination holds the filled values (its first and last MiB).
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <algorithm>
#include <vector>

#define CHECK(call)                                                                          \
    do {                                                                                     \
        cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess) {                                                             \
            fprintf(stderr, "gpu_bw: %s failed: %s\n", #call, cudaGetErrorString(e_));       \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

enum { REPS = 15, WARMUP = 3 };

__host__ __device__ static uint32_t word(size_t i) {
    uint32_t h = (uint32_t)i * 2654435761u;
    return h ^ (h >> 15);
}

__global__ void fill_kernel(uint32_t *p, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) p[i] = word(i);
}

// the first and last MiB of p (n words) hold word(i)
static bool filled_ends(const uint32_t *p, size_t n) {
    const size_t k = (1 << 20) / 4;
    std::vector<uint32_t> h(k);
    for (size_t off : {(size_t)0, n - k}) {
        CHECK(cudaMemcpy(h.data(), p + off, k * 4, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < k; i++)
            if (h[i] != word(off + i)) return false;
    }
    return true;
}

int main(int argc, char **argv) {
    int gib = argc > 1 ? atoi(argv[1]) : 4;
    if (gib < 1 || gib > 32) {
        fprintf(stderr, "usage: gpu_bw [GIB]   (1 to 32 GiB per buffer)\n");
        return 2;
    }
    size_t n = (size_t)gib << 30;
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("gpu_bw: %s, %d multiprocessors, L2 %d MiB, %.1f GiB\n", prop.name, prop.multiProcessorCount,
           prop.l2CacheSize >> 20, prop.totalGlobalMem / 1073741824.0);
    void *a, *b;
    CHECK(cudaMalloc(&a, n));
    CHECK(cudaMalloc(&b, n));
    fill_kernel<<<4 * prop.multiProcessorCount, 256>>>((uint32_t *)a, n / 4);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < WARMUP; i++) CHECK(cudaMemcpy(i % 2 ? a : b, i % 2 ? b : a, n, cudaMemcpyDeviceToDevice));
    CHECK(cudaDeviceSynchronize());
    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    std::vector<float> gbs;
    for (int i = 0; i < REPS; i++) {
        // alternate the direction so that each copy reads what the previous one wrote
        void *dst = i % 2 ? a : b, *src = i % 2 ? b : a;
        CHECK(cudaEventRecord(e0));
        CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice));
        CHECK(cudaEventRecord(e1));
        CHECK(cudaEventSynchronize(e1));
        float ms;
        CHECK(cudaEventElapsedTime(&ms, e0, e1));
        gbs.push_back(2.0f * n / (ms * 1e-3f) / 1e9f);
    }
    if (!filled_ends((const uint32_t *)((REPS - 1) % 2 ? a : b), n / 4)) {
        fprintf(stderr, "gpu_bw: the copy did not arrive\n");
        return 1;
    }
    std::vector<float> s = gbs;
    std::sort(s.begin(), s.end());
    printf("gpu_bw: %d GiB device-to-device copy: median %.0f GB/s (bytes read + written; min %.0f, max %.0f over %d copies)\n",
           gib, s[REPS / 2], s[0], s[REPS - 1], REPS);
    CHECK(cudaFree(a));
    CHECK(cudaFree(b));
    return 0;
}
