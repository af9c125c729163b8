// test/emu_limits.cu — shows that test/cuda_emu.h enforces sm_90's launch limits (test/run.sh gpu).
// build/emu_limits CASE makes the one launch CASE names and prints `ok` when it ran; a launch past a
// limit must instead end the program with one `clover: error: cuda-emu: KERNEL: ...` line. The cases
// at a limit must run, those one past it must fail (the list: build/emu_limits with no argument).
#include "test/cuda_emu.h"

__global__ void one_thread_kernel(int *out) {
    if (threadIdx.x == 0 && blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0) out[0] = 1;
}

// writes N floats of static shared memory (the emulation counts an array once a block writes it)
template <int N> __global__ void static_smem_kernel(int *out) {
    __shared__ float a[N];
    for (int i = threadIdx.x; i < N; i += blockDim.x) a[i] = (float)i;
    __syncthreads();
    if (threadIdx.x == 0) out[0] = (int)a[N - 1];
}

// 40 KiB of static shared memory and the launch's dynamic bytes, every one written
__global__ void both_smem_kernel(int *out, int n_dynamic) {
    __shared__ float a[10240];
    DYNAMIC_SHARED(unsigned char, d);
    for (int i = threadIdx.x; i < 10240; i += blockDim.x) a[i] = 1;
    for (int i = threadIdx.x; i < n_dynamic; i += blockDim.x) d[i] = 1;
    __syncthreads();
    if (threadIdx.x == 0) out[0] = (int)a[0] + (n_dynamic ? d[n_dynamic - 1] : 1);
}

__global__ void dynamic_smem_kernel(int *out, int n_dynamic, int n_write) {
    DYNAMIC_SHARED(unsigned char, d);
    for (int i = threadIdx.x; i < n_write; i += blockDim.x) d[i] = 1;
    __syncthreads();
    if (threadIdx.x == 0) out[0] = n_dynamic;
}

// launch_only: checked with CLOVER_EMU_LAUNCH_ONLY=1 (2^31 - 1 blocks would not run in a lifetime)
struct Case { const char *name; bool fits; dim3 grid, block; size_t dynamic; int opt_in; int kernel; bool launch_only; };
enum { ONE, STATIC_48K, STATIC_48K_PLUS, BOTH, DYNAMIC, DYNAMIC_OVERRUN };
static const Case CASES[] = {
    {"grid-y-65535", true, dim3(1, 65535), dim3(32), 0, -1, ONE, false},
    {"grid-y-65536", false, dim3(1, 65536), dim3(32), 0, -1, ONE, false},
    {"grid-z-65536", false, dim3(1, 1, 65536), dim3(32), 0, -1, ONE, false},
    {"grid-x-2^31-1", true, dim3(2147483647u), dim3(32), 0, -1, ONE, true},
    {"grid-x-2^31", false, dim3(2147483648u), dim3(32), 0, -1, ONE, true},
    {"block-1024", true, dim3(1), dim3(1024), 0, -1, ONE, false},
    {"block-1056", false, dim3(1), dim3(1056), 0, -1, ONE, false},
    {"block-32x33", false, dim3(1), dim3(32, 33), 0, -1, ONE, false},
    {"block-z-64", true, dim3(1), dim3(1, 1, 64), 0, -1, ONE, false},
    {"block-z-65", false, dim3(1), dim3(1, 1, 65), 0, -1, ONE, false},
    {"grid-0", false, dim3(0), dim3(32), 0, -1, ONE, false},
    {"static-48K", true, dim3(2), dim3(256), 0, -1, STATIC_48K, false},
    {"static-48K+4", false, dim3(2), dim3(256), 0, -1, STATIC_48K_PLUS, false},
    {"dynamic-48K", true, dim3(1), dim3(256), 48 * 1024, -1, DYNAMIC, false},
    {"dynamic-48K+1", false, dim3(1), dim3(256), 48 * 1024 + 1, -1, DYNAMIC, false},
    {"static-40K+dynamic-8K", true, dim3(1), dim3(256), 8 * 1024, -1, BOTH, false},
    {"static-40K+dynamic-8K+1", false, dim3(1), dim3(256), 8 * 1024 + 1, -1, BOTH, false},
    {"opt-in-100K-dynamic-100K", true, dim3(1), dim3(256), 100 * 1024, 100 * 1024, DYNAMIC, false},
    {"opt-in-100K-dynamic-100K+1", false, dim3(1), dim3(256), 100 * 1024 + 1, 100 * 1024, DYNAMIC, false},
    {"opt-in-227K+1", false, dim3(1), dim3(256), 0, 227 * 1024 + 1, DYNAMIC, false},
    {"opt-in-static-40K+dynamic-187K", true, dim3(1), dim3(256), 187 * 1024, 227 * 1024, BOTH, false},
    {"opt-in-static-40K+dynamic-187K+1", false, dim3(1), dim3(256), 187 * 1024 + 1, 227 * 1024, BOTH, false},
    {"dynamic-write-past-its-bytes", false, dim3(1), dim3(256), 1024, -1, DYNAMIC_OVERRUN, false},
};

static void check(cudaError_t e, const char *what) {   // as clover.cu's CUDA_CHECK
    if (e != cudaSuccess) {
        fprintf(stderr, "clover: error: %s failed: %s\n", what, cudaGetErrorString(e));
        exit(1);
    }
}

int main(int argc, char **argv) {
    const Case *c = NULL;
    for (const Case &k : CASES)
        if (argc == 2 && !strcmp(argv[1], k.name)) c = &k;
    if (!c) {   // the list, one case a line: NAME fits|exceeds
        for (const Case &k : CASES) printf("%s %s\n", k.name, k.fits ? "fits" : "exceeds");
        return argc == 1 ? 0 : 2;
    }
    if (c->launch_only) setenv("CLOVER_EMU_LAUNCH_ONLY", "1", 1);
    int *out;
    check(cudaMalloc(&out, sizeof(int)), "cudaMalloc");
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = c->grid, cfg.blockDim = c->block, cfg.dynamicSmemBytes = c->dynamic;
    int n = (int)c->dynamic;
    switch (c->kernel) {
    case ONE: check(cudaLaunchKernelEx(&cfg, one_thread_kernel, out), "launch"); break;
    case STATIC_48K: check(cudaLaunchKernelEx(&cfg, static_smem_kernel<12288>, out), "launch"); break;
    case STATIC_48K_PLUS: check(cudaLaunchKernelEx(&cfg, static_smem_kernel<12289>, out), "launch"); break;
    case BOTH:
        if (c->opt_in >= 0) check(cudaFuncSetAttribute(both_smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, c->opt_in), "cudaFuncSetAttribute");
        check(cudaLaunchKernelEx(&cfg, both_smem_kernel, out, n), "launch");
        break;
    case DYNAMIC:
    case DYNAMIC_OVERRUN:
        if (c->opt_in >= 0) check(cudaFuncSetAttribute(dynamic_smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, c->opt_in), "cudaFuncSetAttribute");
        check(cudaLaunchKernelEx(&cfg, dynamic_smem_kernel, out, n, c->kernel == DYNAMIC_OVERRUN ? n + 1 : n), "launch");
        break;
    }
    printf("ok\n");
    return 0;
}
