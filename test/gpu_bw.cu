// test/gpu_bw.cu — the two device figures test/costmodel.c takes as given: the device memory
// bandwidth that test/gpu.sh compares clover-cuda's decode steps with, and what a node of a CUDA
// graph costs (the model's 2 us a launch, which is most of what it predicts for a verify batch).
//
//   nvcc -O2 -o build/gpu_bw test/gpu_bw.cu && build/gpu_bw [GIB]    (default 4 GiB per buffer)
//
// Bandwidth: a large device-to-device copy, timed with CUDA events, counting the bytes read plus the
// bytes written (as the ~4.3 TB/s reported for an H200's copy in README.md, "GPU", is counted). Two
// buffers of GIB GiB, filled with a hash of the index (not zeros: METHOD.md's advice, and an
// unwritten buffer would go unnoticed), copied back and forth: 3 copies to warm up, then REPS timed
// ones, each between its own pair of events; prints the median, min and max, and checks that the
// last copy's destination holds the filled values (its first and last MiB).
//
// A graph node: a graph of NODES launches of a kernel that does almost nothing, each reading what the
// one before wrote (as a pass's kernels do), replayed REPS times between events: the median replay
// over NODES. Three forms: one block a launch; a grid of 4 blocks an SM (a launch that fills the
// GPU, as a pass's matrix launches do); and that grid again with programmatic dependent launch
// (sm_90: the next launch is set up while this one runs, and waits for it with griddepcontrol.wait
// before reading), which clover does not use and the cost model does not assume. The chain's last
// value is checked: every node ran, in order.
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

// One node of the chain: x[0] = x[0] + 1 by block 0's thread 0 (the grid's other blocks only
// arrive). pdl: wait for the launch before to finish (and its writes to be seen), then let the next
// one start launching (so that at most two grids of the chain are resident; both no-ops where the
// launch has no programmatic edge).
__global__ void node_kernel(unsigned *x, bool pdl) {
    if (pdl) {
        asm volatile("griddepcontrol.wait;" ::: "memory");
        asm volatile("griddepcontrol.launch_dependents;");
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) x[0] += 1;
}

enum { NODES = 400 };   // about a verify batch's nodes (README.md, "Predicted cost on an H200")

// Median microseconds a node of a captured chain of NODES launches of `blocks` blocks of 128
// threads (pdl: programmatic edges); -1 with the reason on stderr where the runtime refuses the form
static double node_us(int blocks, bool pdl, unsigned *x) {
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK(cudaMemsetAsync(x, 0, sizeof *x, s));
    CHECK(cudaStreamSynchronize(s));
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    cudaError_t e = cudaSuccess;
    for (int i = 0; i < NODES && e == cudaSuccess; i++) {
        cudaLaunchConfig_t c = {};
        cudaLaunchAttribute a[1];
        c.gridDim = dim3(blocks), c.blockDim = dim3(128), c.stream = s;
        if (pdl) {
            a[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
            a[0].val.programmaticStreamSerializationAllowed = 1;
            c.attrs = a, c.numAttrs = 1;
        }
        e = cudaLaunchKernelEx(&c, node_kernel, x, pdl);
    }
    cudaError_t ec = cudaStreamEndCapture(s, &g);
    if (e == cudaSuccess) e = ec;
    if (e == cudaSuccess) e = cudaGraphInstantiate(&ge, g, 0);
    if (e != cudaSuccess) {
        fprintf(stderr, "gpu_bw: a graph of %d launches%s: %s\n", NODES, pdl ? " with programmatic dependent launch" : "", cudaGetErrorString(e));
        cudaGetLastError();
        if (ec == cudaSuccess) CHECK(cudaGraphDestroy(g));   // (the capture ended, the launch or instantiation failed)
        CHECK(cudaStreamDestroy(s));
        return -1;
    }
    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    std::vector<float> us;
    for (int i = 0; i < WARMUP + REPS; i++) {
        CHECK(cudaEventRecord(e0, s));
        CHECK(cudaGraphLaunch(ge, s));
        CHECK(cudaEventRecord(e1, s));
        CHECK(cudaEventSynchronize(e1));
        float ms;
        CHECK(cudaEventElapsedTime(&ms, e0, e1));
        if (i >= WARMUP) us.push_back(1e3f * ms / NODES);
    }
    unsigned got;
    CHECK(cudaMemcpy(&got, x, sizeof got, cudaMemcpyDeviceToHost));
    if (got != (unsigned)(NODES * (WARMUP + REPS))) {
        fprintf(stderr, "gpu_bw: the graph's chain counted %u, not %d\n", got, NODES * (WARMUP + REPS));
        exit(1);
    }
    CHECK(cudaGraphExecDestroy(ge));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaEventDestroy(e0));
    CHECK(cudaEventDestroy(e1));
    CHECK(cudaStreamDestroy(s));
    std::sort(us.begin(), us.end());
    return us[REPS / 2];
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
    int full = 4 * prop.multiProcessorCount;
    double one = node_us(1, false, (unsigned *)a), wide = node_us(full, false, (unsigned *)a), pdl = node_us(full, true, (unsigned *)a);
    printf("gpu_bw: a graph node (%d dependent launches, median of %d replays): %.2f us of 1 block, %.2f us of %d blocks, %.2f us of %d blocks with programmatic dependent launch\n",
           NODES, REPS, one, wide, full, pdl, full);
    CHECK(cudaFree(a));
    CHECK(cudaFree(b));
    return 0;
}
