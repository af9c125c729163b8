// clover.cu — the GPU side of clover.c (built by `make cuda` into ./clover-cuda).
//
// Status: this file holds the device bring-up only: finding a CUDA device and reporting it.
// The kernels that mirror each CPU op of clover.c (same name, same contract: quantized matvec and
// batched matmul per weight type, RMSNorm, partial RoPE, attention over the KV cache, the GDN conv
// and recurrence, MoE routing, greedy sampling) are not written yet; until they are, clover-cuda
// runs every layer on the CPU and says so. See README.md, "GPU".
#include <cuda_runtime.h>
#include <stdio.h>

// Every CUDA call is checked; a failure is one line naming the call.
#define CUDA_OK(call, err, n) cuda_ok((call), #call, err, n)
static bool cuda_ok(cudaError_t e, const char *what, char *err, size_t n) {
    if (e == cudaSuccess) return true;
    snprintf(err, n, "%s failed: %s", what, cudaGetErrorString(e));
    return false;
}

// Find device 0 and describe it in `info`. Returns false with a reason in `info` when there is
// no usable GPU (no driver, no device), so that the caller can refuse -ngl > 0 clearly.
extern "C" bool gpu_init(char *info, size_t n) {
    int count = 0;
    if (!CUDA_OK(cudaGetDeviceCount(&count), info, n)) return false;
    if (count == 0) {
        snprintf(info, n, "no CUDA device found");
        return false;
    }
    cudaDeviceProp p;
    if (!CUDA_OK(cudaGetDeviceProperties(&p, 0), info, n)) return false;
    snprintf(info, n, "%s, %.1f GiB, sm_%d%d", p.name, p.totalGlobalMem / 1073741824.0, p.major, p.minor);
    return true;
}
