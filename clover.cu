// clover.cu — the GPU side of clover.c (make cuda builds ./clover-cuda with nvcc; make cuda-emu builds
// build/clover-emu, the same file with clang++ and test/cuda_emu.h, every launch run on the CPU).
//
// What runs here: with -ngl >= the layer count, the whole forward pass (sections 11-12: weights
// uploaded once as stored, KV cache and GDN state on the device, causal batches, verify batches with
// the GDN log, the preview pass, the rollback replay, every pass of up to 16 rows as one CUDA graph
// ending in the greedy argmax or the drafts' best tokens, the --dump-tensors points); clover.c keeps the tokenizer, the embedding lookup, the
// sampler and the draft-self loop. Every kernel is checked against its CPU twin by --check-ops.
//
// Layout, as clover.c's sections: 1. errors and launches; 2. half precision; 3. block layouts;
// 4. reductions; 5. activation rounding (quantize_row); 6. matmul per weight type; 7. the other ops
// (rmsnorm, l2norm, rope, softmax, silu_row, argmax); 8. Gated DeltaNet; 9. gated attention; 10. MoE;
// 11. the model, state and scratch on the device; 12. the forward pass; 13. --check-ops.
//
// Every kernel is named after the CPU twin it computes (rmsnorm -> rmsnorm_kernel, launched by
// rmsnorm_gpu with the CPU function's arguments plus the number of rows T; a fused kernel names each
// twin). The CPU function is the definition, the kernel its fast form for the device: wide loads,
// several lanes a weight block, integer dots, and as few launches as a step allows (a decode step's
// layer is 11-12 graph nodes: section 12). Numerics:
//   - activation rounding is byte-identical to the CPU's (same NaN and tie rules);
//   - matmul's integer block sums equal the CPU's; the float order differs from the CPU's SIMD lanes
//     (documented at matmul_kernel) and is the same for every row of a batch, so a row's result does
//     not depend on T or on its place in the batch; no atomics: the same input gives the same bits;
//   - built with -fmad=false (nvcc) / -ffp-contract=off (clang++): a fused multiply-add only where
//     the code says fmaf, as in clover.c (C11 mode, no contraction).
// Kernels are launched with cudaLaunchKernelEx, not <<<>>>, so that clang++ compiles this file too.
#ifdef CLOVER_EMU
#include "test/cuda_emu.h"
#else
#include <cuda_runtime.h>
#define DYNAMIC_SHARED(T, name) extern __shared__ T name[]   // a kernel's dynamic shared memory (the emulation's one buffer there)
#endif
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ================================================================================================
// 1. Errors and launches
// ================================================================================================
// Every CUDA call is checked: a failure is one `clover: error:` line naming the call, exit 1.
static void cuda_check(cudaError_t e, const char *call) {
    if (e == cudaSuccess) return;
    fflush(stdout);
    fprintf(stderr, "clover: error: %s failed: %s\n", call, cudaGetErrorString(e));
    exit(1);
}
#define CUDA_CHECK(call) cuda_check((call), #call)

// Every launch, device-to-device copy and memset goes to this one stream (made by gpu_init), in
// order, so that a decode step can be captured as a CUDA graph and replayed (section 12).
static cudaStream_t stream;

static cudaLaunchConfig_t launch_config(dim3 grid, dim3 block) {
    cudaLaunchConfig_t c;
    memset(&c, 0, sizeof c);
    c.gridDim = grid, c.blockDim = block, c.stream = stream;
    return c;
}

static unsigned blocks_for(int64_t n, int per_block) { return (unsigned)((n + per_block - 1) / per_block); }

// Device memory: allocations, copies (checked), and host memory that must not fail silently.
static void *dev_alloc(size_t n) {
    void *p;
    CUDA_CHECK(cudaMalloc(&p, n));
    return p;
}
static void *dev_copy(const void *h, size_t n) {
    void *p = dev_alloc(n);
    CUDA_CHECK(cudaMemcpy(p, h, n, cudaMemcpyHostToDevice));
    return p;
}
static void host_copy(void *h, const void *d, size_t n) {   // waits for the kernels before it
    CUDA_CHECK(cudaStreamSynchronize(stream));
    CUDA_CHECK(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost));
}
static void dev_to_dev(void *dst, const void *src, size_t n) {   // in stream order
    CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, stream));
}
static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) { fprintf(stderr, "clover: error: out of memory (%zu bytes)\n", n); exit(1); }
    return p;
}

// Find device 0 and describe it in `info`. Returns false with a reason in `info` when there is
// no usable GPU (no driver, no device), so that the caller can refuse clearly.
extern "C" bool gpu_init(char *info, size_t n) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        snprintf(info, n, "cudaGetDeviceCount failed: %s", cudaGetErrorString(e));
        return false;
    }
    if (count == 0) {
        snprintf(info, n, "no CUDA device found");
        return false;
    }
    cudaDeviceProp p;
    e = cudaGetDeviceProperties(&p, 0);
    if (e != cudaSuccess) {
        snprintf(info, n, "cudaGetDeviceProperties failed: %s", cudaGetErrorString(e));
        return false;
    }
    e = cudaStreamCreate(&stream);
    if (e != cudaSuccess) {
        snprintf(info, n, "cudaStreamCreate failed: %s", cudaGetErrorString(e));
        return false;
    }
    snprintf(info, n, "%s, %.1f GiB, sm_%d%d", p.name, p.totalGlobalMem / 1073741824.0, p.major, p.minor);
    return true;
}

// ================================================================================================
// 2. Half precision: ports of clover.c's bit-exact conversions (not the CUDA intrinsics, whose
//    NaN payloads differ)
// ================================================================================================
enum { T_F32 = 0, T_F16 = 1, T_Q4_0 = 2, T_Q8_0 = 8, T_Q4_K = 12, T_Q5_K = 13, T_Q6_K = 14, T_Q8_K = 15, T_BF16 = 30 };

// Exact for every input, without branches: the 15 bits below the sign shifted into a float's exponent
// and mantissa give 2^-112 times the half's value (a half subnormal becomes a float subnormal with the
// same digits), and one multiplication by 2^112 rescales it exactly; inf and NaN (exponent 31) keep
// their payload in the top mantissa bits, as clover.c's fp16_to_fp32 does. Checked against the CPU
// for all 65536 halves (--check-ops "fp16_to_fp32").
__device__ float fp16_to_fp32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, rest = (uint32_t)(h & 0x7fff) << 13;
    float mag = (h & 0x7c00) == 0x7c00 ? __uint_as_float(0x7f800000 | rest) : __uint_as_float(rest) * 0x1p112f;
    return __uint_as_float(sign | __float_as_uint(mag));
}

// round to nearest even; NaN stays a quiet NaN with its sign (clover.c's fp32_to_fp16)
__device__ uint16_t fp32_to_fp16(float f) {
    uint32_t x = __float_as_uint(f);
    uint32_t sign = (x >> 16) & 0x8000, ax = x & 0x7fffffff;
    if (ax >= 0x7f800000) return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000 ? 0x200 : 0));
    if (ax >= 0x477ff000) return (uint16_t)(sign | 0x7c00);            // rounds past 65504: inf
    if (ax < 0x38800000) {                                             // below 2^-14: subnormal
        if (ax < 0x33000000) return (uint16_t)sign;                    // below half the smallest
        uint32_t man = (ax & 0x7fffff) | 0x800000, shift = 126 - (ax >> 23);
        uint32_t r = man >> shift, rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = ax - 0x38000000;                                      // rebias 127 -> 15
    r = (r + 0xfff + ((r >> 13) & 1)) >> 13;
    return (uint16_t)(sign | r);
}

__device__ float bf16_to_fp32(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

__device__ uint16_t fp32_to_bf16(float f) {
    uint32_t x = __float_as_uint(f);
    if ((x & 0x7fffffff) > 0x7f800000) return (uint16_t)((x >> 16) | 64); // quiet nan
    return (uint16_t)((x + (0x7fff + ((x >> 16) & 1))) >> 16);
}

// ================================================================================================
// 3. Block layouts (clover.c section 4; the same bytes as in the GGUF file)
// ================================================================================================
struct BlockQ4_0 { uint16_t d; uint8_t qs[16]; };                        // w = d*(q-8)
struct BlockQ8_0 { uint16_t d; int8_t qs[32]; };                         // w = d*q
struct BlockQ4_K { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[128]; };   // w = d*sc*q - dmin*m
struct BlockQ5_K { uint16_t d, dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; };
struct BlockQ6_K { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; uint16_t d; };  // w = d*sc*(q-32)
struct BlockQ8_K { float d; int8_t qs[256]; int16_t bsums[16]; };         // activations only
static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_K) == 144 &&
              sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210 && sizeof(BlockQ8_K) == 292,
              "block structs must match the GGUF layout");

// the weight type's activation dot type (clover.c's dot_type)
static uint32_t dot_type(uint32_t wtype) {
    switch (wtype) {
    case T_Q4_0: case T_Q8_0: return T_Q8_0;
    case T_Q4_K: case T_Q5_K: case T_Q6_K: return T_Q8_K;
    default: return wtype;
    }
}

static const char *type_name(uint32_t t) {
    switch (t) {
    case T_F32: return "F32";
    case T_F16: return "F16";
    case T_BF16: return "BF16";
    case T_Q8_0: return "Q8_0";
    case T_Q4_0: return "Q4_0";
    case T_Q4_K: return "Q4_K";
    case T_Q5_K: return "Q5_K";
    case T_Q6_K: return "Q6_K";
    case T_Q8_K: return "Q8_K";
    }
    return "?";
}

// bytes of a row of n values of type t
static size_t row_bytes(uint32_t t, int64_t n) {
    switch (t) {
    case T_F32: return (size_t)n * 4;
    case T_F16: case T_BF16: return (size_t)n * 2;
    case T_Q8_0: return (size_t)(n / 32) * sizeof(BlockQ8_0);
    case T_Q4_0: return (size_t)(n / 32) * sizeof(BlockQ4_0);
    case T_Q4_K: return (size_t)(n / 256) * sizeof(BlockQ4_K);
    case T_Q5_K: return (size_t)(n / 256) * sizeof(BlockQ5_K);
    case T_Q6_K: return (size_t)(n / 256) * sizeof(BlockQ6_K);
    case T_Q8_K: return (size_t)(n / 256) * sizeof(BlockQ8_K);
    }
    return 0;
}

// The device layouts. A 16-byte load needs a 16-byte aligned address: Q4_K (144 B) and Q5_K (176 B)
// blocks keep rows aligned, Q8_0 (34 B), Q4_0 (18 B) and Q6_K (210 B) do not. So at upload
// (upload_weights) a matrix of those types is split, the same bytes moved: row r keeps its quants in
// block order (Q8_0: the 32 qs of each block; Q4_0: the 16 qs bytes of each block; Q6_K: all its
// blocks' ql, then all their qh, then all their scales), and the fp16 scales d of every block of every
// row follow all the rows, block b of row r at scales[r * blocks + b]. A row of quants is then n,
// n/2 or 13n/16 bytes, a multiple of 16.
static bool split_scales(uint32_t t) { return t == T_Q8_0 || t == T_Q4_0 || t == T_Q6_K; }

// bytes of a row of n values of type t on the device (without the split-off scales)
static size_t quant_row_bytes(uint32_t t, int64_t n) {
    switch (t) {
    case T_Q8_0: return (size_t)n;
    case T_Q4_0: return (size_t)n / 2;
    case T_Q6_K: return (size_t)n / 16 * 13;
    default: return row_bytes(t, n);
    }
}

// Rounded activations (quantize_row_gpu) are split the same way, a row at a time, so that a lane
// reads its 16 or 32 quants with one or two 16-byte loads: [n int8 q | Q8_0: n/32 fp16 d; Q8_K: n/16
// int16 bsums, then n/256 float d], each row padded to a multiple of 16 bytes. F16 and BF16 rows are
// n values, F32 rows the activations themselves. act_bytes: the bytes between two rows.
static size_t act_content(uint32_t dt, int64_t n) {
    switch (dt) {
    case T_Q8_0: return (size_t)n + (size_t)n / 16;
    case T_Q8_K: return (size_t)n + (size_t)n / 8 + (size_t)n / 64;
    default: return row_bytes(dt, n);
    }
}
static size_t act_bytes(uint32_t dt, int64_t n) { return (act_content(dt, n) + 15) & ~(size_t)15; }

// 16 bytes, one 128-bit load (the address must be 16-byte aligned: the layouts above, and the
// activation rows). The emulation counts each as the one load instruction it is (emu_load_vec,
// test/cuda_emu.h).
struct alignas(16) Vec16 { uint32_t w[4]; };
struct alignas(16) F4 { float v[4]; };   // 4 floats, one 128-bit load or store
template <typename V> __device__ V load_vec(const void *p) {
#ifdef CLOVER_EMU
    return emu_load_vec<V>(p);
#else
    return *(const V *)p;
#endif
}
__device__ Vec16 load16(const uint8_t *p) { return load_vec<Vec16>(p); }
struct alignas(8) W2 { uint32_t w[2]; };   // 8 bytes, one 64-bit load (8-byte aligned)
__device__ W2 load8(const uint8_t *p) { return load_vec<W2>(p); }

// Asynchronous copies from device memory to shared memory (cp.async, sm_80 on): a thread issues
// 16-byte copies (both addresses 16-byte aligned), closes what it issued into a group
// (copies_commit), and later waits until all but its newest N groups have landed (copies_wait<N>),
// computing meanwhile. The bytes stay in flight without registers to hold them, so that a kernel
// can keep several units of its weights coming while it works on one (mma_rows). A lane sees only
// its own copies at its wait: the others' after a barrier (__syncwarp). The emulation poisons the
// destination at the issue and fills it at the wait, so a read that comes too early shows.
__device__ void copy16_async(void *dst, const uint8_t *src) {
#ifdef __CUDA_ARCH__
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"((unsigned)__cvta_generic_to_shared(dst)), "l"(src) : "memory");
#elif defined(CLOVER_EMU)
    Vec16 v = load16(src);
    emu_copy16_async(dst, &v);
#endif
}
__device__ void copies_commit(void) {
#ifdef __CUDA_ARCH__
    asm volatile("cp.async.commit_group;" ::: "memory");
#elif defined(CLOVER_EMU)
    emu_copies_commit();
#endif
}
template <int N> __device__ void copies_wait(void) {
#ifdef __CUDA_ARCH__
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#elif defined(CLOVER_EMU)
    emu_copies_wait(N);
#endif
}

// ================================================================================================
// 4. Reductions: a warp's 32 values folded by xor butterfly (offsets 16, 8, 4, 2, 1), so every lane
//    ends with the same bits, in an order fixed by the lane numbers alone. A block of 32*W threads
//    folds each warp, then warp 0 folds the W warp results the same way.
// ================================================================================================
// BLOCK: the threads of a block unless said otherwise. ROW_BLOCK: those of the kernels that take a
// whole row of the residual stream in one block (the norms and the MoE's sum: a decode step's launch
// of one is a single block, whose time is the chain of loads each of its threads issues in turn; a
// row of 2048-4096 values is one or two 16-byte loads a thread at 1024 threads).
enum { WARP = 32, BLOCK = 256, ROW_BLOCK = 1024 };

template <typename T> __device__ T warp_sum(T v) {
    for (int o = 16; o >= 1; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ float warp_max(float v) {   // fmaxf: a NaN loses to any number, as in clover.c's amax loops
    for (int o = 16; o >= 1; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// sum over a block of whole warps (at most 32 of them); every thread gets the result
template <typename T> __device__ T block_sum(T v) {
    __shared__ T part[WARP];
    int lane = threadIdx.x % WARP, w = threadIdx.x / WARP;
    v = warp_sum(v);
    if (lane == 0) part[w] = v;
    __syncthreads();
    T s = lane < (int)(blockDim.x / WARP) ? part[lane] : (T)0;
    s = warp_sum(s);
    __syncthreads();   // part[] is reused by the next call
    return s;
}

// ================================================================================================
// 5. Activation rounding: quantize_row (clover.c section 5), T rows of n values at once
// ================================================================================================
// Twin: quantize_q8_0. Per block of 32: d = amax/127 (stored as fp16), q = round(x * 127/amax),
// nearest with ties to even (__float2int_rn; a NaN gives 0, as (int8_t)lrintf(NaN) on x86).
// Block bb of a row (xb: its 32 values) by a warp, lane j holding x_j, into the split row layout.
__device__ void round_block_q8_0(const float *xb, uint8_t *row, int64_t n, int64_t bb) {
    int lane = threadIdx.x % WARP;
    float v = xb[lane], amax = warp_max(fmaxf(0.0f, fabsf(v)));
    float d = amax / 127, id = amax != 0 ? 127.f / amax : 0;
    if (lane == 0) ((uint16_t *)(row + n))[bb] = fp32_to_fp16(d);
    ((int8_t *)row)[32 * bb + lane] = (int8_t)__float2int_rn(v * id);
}

// Twin: quantize_q8_K. Per block of 256 the signed extreme max (the first of equal |x|) maps to -127:
// iscale = -127/max, q = min(round(iscale x), 127), d = 1/iscale, bsums[g] = sum of q over 16.
// Block bb of a row by a warp, lane l holding elements 8l..8l+7 (so bsum g is lanes 2g and 2g+1);
// its 8 q stored as one 8-byte word.
__device__ void round_block_q8_K(const float *xb, uint8_t *row, int64_t n, int64_t bb) {
    int lane = threadIdx.x % WARP;
    F4 v4[2] = {load_vec<F4>(xb + 8 * lane), load_vec<F4>(xb + 8 * lane + 4)};   // (rows are 16-byte aligned)
    float v[8], amax = 0;
    int at = 256;   // index of the extreme; 256: none (all zero or NaN)
    for (int j = 0; j < 8; j++) {
        v[j] = v4[j / 4].v[j % 4];
        if (fabsf(v[j]) > amax) amax = fabsf(v[j]), at = 8 * lane + j;
    }
    for (int o = 16; o >= 1; o /= 2) {   // the largest |x|, the lower index on ties
        float a2 = __shfl_xor_sync(0xffffffffu, amax, o);
        int at2 = __shfl_xor_sync(0xffffffffu, at, o);
        if (a2 > amax || (a2 == amax && at2 < at)) amax = a2, at = at2;
    }
    float iscale = amax == 0 ? 0 : -127.f / xb[at];
    uint64_t q8 = 0;
    int s = 0;
    for (int j = 0; j < 8; j++) {
        int q = __float2int_rn(iscale * v[j]);
        q = q < 127 ? q : 127;
        q8 |= (uint64_t)(uint8_t)q << (8 * j);
        s += q;
    }
    ((uint64_t *)(row + 256 * bb))[lane] = q8;
    s += __shfl_down_sync(0xffffffffu, s, 1);
    if (lane % 2 == 0) ((int16_t *)(row + n))[16 * bb + lane / 2] = (int16_t)s;
    if (lane == 0) ((float *)(row + n + n / 8))[bb] = amax == 0 ? 0 : 1 / iscale;
}

// One warp per block (block b of all T rows, nb a row; a warp past the last block leaves whole)
__global__ void quantize_q8_0_kernel(const float *x, uint8_t *y, int64_t n, size_t y_bytes, int64_t n_blocks) {
    int64_t b = (int64_t)blockIdx.x * (BLOCK / WARP) + threadIdx.x / WARP, nb = n / 32;
    if (b < n_blocks) round_block_q8_0(x + 32 * b, y + (b / nb) * y_bytes, n, b % nb);
}

__global__ void quantize_q8_K_kernel(const float *x, uint8_t *y, int64_t n, size_t y_bytes, int64_t n_blocks) {
    int64_t b = (int64_t)blockIdx.x * (BLOCK / WARP) + threadIdx.x / WARP, nb = n / 256;
    if (b < n_blocks) round_block_q8_K(x + 256 * b, y + (b / nb) * y_bytes, n, b % nb);
}

// Twin: quantize_row for F16 and BF16 activations: one element per thread.
__global__ void quantize_f16_kernel(const float *x, uint16_t *y, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * BLOCK + threadIdx.x;
    if (i < n) y[i] = fp32_to_fp16(x[i]);
}

__global__ void quantize_bf16_kernel(const float *x, uint16_t *y, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * BLOCK + threadIdx.x;
    if (i < n) y[i] = fp32_to_bf16(x[i]);
}

// The values from..to-1 of a row of n values xn (this block's, as the threads wrote it: a barrier
// first; from and to whole blocks of dt) rounded to dot type dt (F32: nothing) in the row's rounding
// xq, a warp a block of 32 or 256 (round_block_q8_0 / _q8_K), or a thread a value; round_row_block: all of it
__device__ void round_row_part(const float *xn, int n, uint32_t dt, uint8_t *xq, int from, int to) {
    if (dt == T_F32) return;
    __syncthreads();   // every thread's values of xn written
    int warp = threadIdx.x / WARP, warps = blockDim.x / WARP;
    if (dt == T_Q8_0)
        for (int b = from / 32 + warp; b < to / 32; b += warps) round_block_q8_0(xn + 32 * b, xq, n, b);
    else if (dt == T_Q8_K)
        for (int b = from / 256 + warp; b < to / 256; b += warps) round_block_q8_K(xn + 256 * b, xq, n, b);
    else
        for (int i = from + threadIdx.x; i < to; i += blockDim.x) ((uint16_t *)xq)[i] = dt == T_F16 ? fp32_to_fp16(xn[i]) : fp32_to_bf16(xn[i]);
}
__device__ void round_row_block(const float *xn, int n, uint32_t dt, uint8_t *xq) { round_row_part(xn, n, dt, xq, 0, n); }

// values a block of dot type dt rounds together (F32: 1, nothing to round)
__host__ __device__ int round_block_values(uint32_t dt) { return dt == T_Q8_K ? 256 : dt == T_Q8_0 ? 32 : 1; }

// Round T rows of n activations (x, device) to the dot type of weights of type wtype (y, device; rows
// act_bytes(dot_type(wtype), n) apart, in the split layout of section 3). Twin: quantize_row, row by row.
static void quantize_row_gpu(uint32_t wtype, const float *x, void *y, int64_t n, int T) {
    int64_t all = n * T;
    uint32_t dt = dot_type(wtype);
    size_t yb = act_bytes(dt, n);
    switch (dt) {
    case T_F32: dev_to_dev(y, x, (size_t)all * 4); break;
    case T_F16: {
        cudaLaunchConfig_t c = launch_config(blocks_for(all, BLOCK), BLOCK);
        CUDA_CHECK(cudaLaunchKernelEx(&c, quantize_f16_kernel, x, (uint16_t *)y, all));
        break;
    }
    case T_BF16: {
        cudaLaunchConfig_t c = launch_config(blocks_for(all, BLOCK), BLOCK);
        CUDA_CHECK(cudaLaunchKernelEx(&c, quantize_bf16_kernel, x, (uint16_t *)y, all));
        break;
    }
    case T_Q8_0: {
        cudaLaunchConfig_t c = launch_config(blocks_for(all / 32, BLOCK / WARP), BLOCK);
        CUDA_CHECK(cudaLaunchKernelEx(&c, quantize_q8_0_kernel, x, (uint8_t *)y, n, yb, all / 32));
        break;
    }
    case T_Q8_K: {
        cudaLaunchConfig_t c = launch_config(blocks_for(all / 256, BLOCK / WARP), BLOCK);
        CUDA_CHECK(cudaLaunchKernelEx(&c, quantize_q8_K_kernel, x, (uint8_t *)y, n, yb, all / 256));
        break;
    }
    }
}

// ================================================================================================
// 6. Matmul: y[t][o] = sum_i W[o][i] x[t][i] (clover.c's matmul in row order, dot_fn(wtype, false))
// ================================================================================================
// A row's dot is a sum over its units: a block (32 or 256 weights) or 16 bytes of F32/F16/BF16.
// A quantized unit adds (d_w d_a) * (its integer block sum), and for Q4_K/Q5_K also the mins' term
// (dmin_w d_a) * (the integer sum of its mins): those integers are the CPU's exactly, whichever lanes
// add them. The float order of a row depends on its weight type and length alone (not on T, the
// kernel, the expert or the thread order; it is not the CPU's SIMD order, and stays within llama.cpp's
// spread of CPU variants, README "GPU"):
//   lpr = lanes_per_row(LPB, units) lanes take the row, LPB lanes a unit, so slots = lpr / LPB;
//   slot s takes units s, s + slots, s + 2 slots, ... in turn, acc = fmaf(d_w d_a, sum, acc) from +0
//   (float units: acc = fmaf(w_i, x_i, acc) over the unit's values in order; the block-scaled Q8_0
//   and Q4_0, 8 blocks a unit: acc += the tree sum of its blocks' (d_w d_a) * sum, unit_tree);
//   the slots are folded by halving (slot i += slot i + slots/2, then + slots/4, ..., + 1: the xor
//   butterfly of their lanes), the mins' slots alike, and the row's dot is acc - accm.
// The LPB lanes of a unit read a part of its bytes each; their integer sums are added by xor shuffles
// (exact), so that each of them holds the unit's sums and does the same fmaf. Short rows (expert down
// projections: 512 values, two K blocks) get fewer lanes, and a warp takes 32 / lpr rows at once.
// matvec_kernel (one activation row: a decode step, the experts), matmul_kernel (tiles of rows: verify,
// preview, prefill) and swiglu_id_kernel run these same steps, so a row's bits do not depend on which
// of them computed it or on the batch around it.

// c + the four products of a's and b's signed bytes: the device's dp4a instruction; written out where
// this file is not compiled for a device (the emulation)
__device__ int dp4a(uint32_t a, uint32_t b, int c) {
#ifdef __CUDA_ARCH__
    return __dp4a((int)a, (int)b, c);
#else
    for (int k = 0; k < 4; k++) c += (int8_t)(a >> (8 * k)) * (int8_t)(b >> (8 * k));
    return c;
#endif
}

// d = a b on the tensor cores for a warp's 16 x 8 tile over k = 32 (mma.sync m16n8k32 of signed
// bytes, int32 sums: exact), the fragments as the PTX ISA lays them out, lane l = 4g + t holding
//   a[0], a[2]: A (16 x 32) row g, columns 4t..4t+3 and 16+4t..16+4t+3;  a[1], a[3]: the same of row g+8;
//   b[0], b[1]: B (32 x 8) column g, rows 4t..4t+3 and 16+4t..16+4t+3;
//   d[r]: row g + 8 (r / 2), column 2t + r % 2.
// Only the sum over k is used, so a caller may number the 32 k in any order that A and B share:
// matmul_mma_kernel gives lane t 8 consecutive values of a group, its piece tile_piece(j, t) (a[0],
// a[2] of row g, b[0], b[1] of column g). Every lane of the warp takes part.
__device__ void mma_s8(int d[4], const uint32_t a[4], const uint32_t b[2]) {
#ifdef __CUDA_ARCH__
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %10, %10, %10};"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(0));
#elif defined(CLOVER_EMU)
    emu_mma_s8(d, a, b, __FILE__, __LINE__);
#else
    d[0] = d[1] = d[2] = d[3] = 0;   // (nvcc's host pass: never run)
#endif
}

// The batch tile of matmul_mma_kernel in shared memory: MMA_M rows of Q8_K activations (rows past
// the batch zero), laid out so that a warp's B fragment of 8 rows is 256 consecutive bytes (two
// wavefronts, no bank conflicts) and a lane's part of it one 8-byte load:
//   q:     [unit][group of 32][row][4 pieces of 8 bytes]  (16 n bytes; lane 4g + t's piece of row g
//          at 8 lane: its values 8 tile_piece(j, t) .. + 7 of group j)
//   pairs: [unit][row][8 int16]                (n bytes: bsum 2j + bsum 2j+1, the sums of group j's
//          32 values, |sum| <= 32 x 127, what the K-quant mins multiply; for Q8_0 rows (Q8_0_ROWS)
//          the fp16 scales of the unit's 8 blocks)
//   d:     [unit][row] float                   (n / 4 bytes; Q8_K rows only)
// A block has MMA_WARPS warps of 16 weight rows each: four, so that the tile a block stages (as many
// bytes as 16 weight rows of Q4_K take a unit) serves 64 weight rows.
enum { MMA_M = 16, MMA_WARPS = 4, MMA_ROWS = 16 * MMA_WARPS, MMA_MAX_TILE = 200 * 1024, MMA_MAX_PAIRS = 4096 };
__host__ __device__ size_t mma_tile_bytes(int64_t n) { return (size_t)n * 17 + (size_t)n / 4; }
// byte offsets in the tile: row r's 32 bytes of group j of unit u; its 8 pairs of unit u; its d of unit u
__device__ size_t tile_q_at(int u, int j, int r) { return ((size_t)(8 * u + j) * MMA_M + r) * 32; }
__device__ size_t tile_pairs_at(int64_t n, int u, int r) { return 16 * (size_t)n + ((size_t)u * MMA_M + r) * 16; }
__device__ size_t tile_d_at(int64_t n, int u, int r) { return 17 * (size_t)n + 4 * ((size_t)u * MMA_M + r); }
__device__ float tile_d(const uint8_t *xs, int64_t n, int u, int r) { return *(const float *)(xs + tile_d_at(n, u, r)); }
// Which 8 values (piece 0-3) of group j lane t holds: the order in which DotK4 reads its weights. Its
// lane t loads 16 bytes of a row's 64 at 16t (pieces 2(t%2) and 2(t%2) + 1 of the 32-byte half t/2)
// and swaps its second piece with lane t^2's (two shuffles): then for the groups of half s
// ((j/2) % 2) it holds piece 2(t%2) + (s xor t/2), a 64-byte span a warp instruction per row.
__device__ int tile_piece(int j, int t) { return 2 * (t & 1) + (((j >> 1) & 1) ^ (t >> 1)); }
// 16 bytes that hold lane t's pieces 2(t%2) and 2(t%2) + 1 of a group, as p[s]: the piece of the
// groups of half s (selects, not an index that would put them on the stack)
__device__ void pieces_by_half(const Vec16 &v, int t, W2 p[2]) {
    W2 lo = {{v.w[0], v.w[1]}}, hi = {{v.w[2], v.w[3]}};
    p[0] = t < 2 ? lo : hi, p[1] = t < 2 ? hi : lo;
}

// The rows of a batch tile (shared memory): R <= MMA_M of them, tile row r reading activation row
// act[r] and writing output row out[r], with expert e's matrix (0: the one matrix; e < 0: none, the
// output rows are zeros, as matvec_kernel's for an id -1).
struct TileRows { int e, R, act[MMA_M], out[MMA_M]; };

// Block y's tile of a batch into tr (every thread calls it; false: this block has none):
//   ids NULL: rows 16y .. 16y + 15 of the n rows;
//   else n pairs, pair p running expert ids[p] on activation row p / in_div: the pairs of one expert
//   in order, in runs of MMA_M; pair y leads a run where the pairs of its expert before it are a
//   multiple of MMA_M (its block takes that run), else its block has no tile. So an expert's weights
//   are read once for every MMA_M pairs that chose it, and the grid (n pairs) is fixed, as a graph
//   needs. Warp 0 finds the run, 32 pairs a load, in pair order (its prefix sums by shuffles).
__device__ bool tile_rows(const int *ids, int n, int in_div, TileRows &tr) {
    int y = blockIdx.y, lane = threadIdx.x % WARP;
    if (threadIdx.x < WARP && !ids) {
        int R = n - MMA_M * y < MMA_M ? n - MMA_M * y : MMA_M;
        if (lane < R) tr.act[lane] = tr.out[lane] = MMA_M * y + lane;
        if (lane == 0) tr.e = 0, tr.R = R;
    } else if (threadIdx.x < WARP) {
        int e = ids[y], before = 0, R = 0;
        for (int p = lane; p < y; p += WARP) before += ids[p] == e;
        before = warp_sum(before);
        for (int p0 = y; before % MMA_M == 0 && p0 < n && R < MMA_M; p0 += WARP) {   // (warp-uniform)
            int p = p0 + lane, f = p < n && ids[p] == e, at = f;   // at: the pairs of e among lanes 0..lane
            for (int o = 1; o < WARP; o *= 2) {
                int v = __shfl_up_sync(0xffffffffu, at, o);
                if (lane >= o) at += v;
            }
            if (f && R + at <= MMA_M) tr.act[R + at - 1] = p / in_div, tr.out[R + at - 1] = p;
            R += __shfl_sync(0xffffffffu, at, WARP - 1);
        }
        if (lane == 0) tr.e = e, tr.R = R < MMA_M ? R : MMA_M;
    }
    __syncthreads();
    return tr.R > 0;
}

// Tile rows tr of the rounded rows x (Q8_K, or Q8_0 where D::Q8_0_ROWS; x_bytes apart, section 3's
// layout) into the tile xs, by all the block's threads in 16-byte pieces (rows past tr.R zero):
// units u0, u0 + du, ... (a split batch's block stages the units of its slot alone,
// matmul_mma_kernel), at their places in the tile.
template <typename D> __device__ void stage_tile(const uint8_t *x, size_t x_bytes, int n, const TileRows &tr, uint8_t *xs, int u0, int du) {
    int nu = n / 256, ns = (nu - u0 + du - 1) / du, R = tr.R;   // ns: the units staged
    for (int i = threadIdx.x; i < MMA_M * 32 * ns; i += blockDim.x) {   // q: piece t of group j, 8 bytes
        int r = i / (32 * ns), k = i % (32 * ns), u = u0 + du * (k / 32), j = k % 32 / 4, t = k % 4;
        W2 v = r < R ? load8(x + tr.act[r] * x_bytes + 256 * u + 32 * j + 8 * tile_piece(j, t)) : W2{};
        *(W2 *)(xs + tile_q_at(u, j, r) + 8 * t) = v;
    }
    if constexpr (D::Q8_0_ROWS) {   // pairs: the unit's 8 block scales (fp16, 16 bytes after the row's n quants at 16u)
        for (int i = threadIdx.x; i < MMA_M * ns; i += blockDim.x) {
            int r = i / ns, u = u0 + du * (i % ns);
            *(Vec16 *)(xs + tile_pairs_at(n, u, r)) = r < R ? load16(x + tr.act[r] * x_bytes + n + 16 * u) : Vec16{};
        }
        return;
    }
    for (int i = threadIdx.x; i < MMA_M * ns; i += blockDim.x) {   // pairs: a unit's 16 bsums, added two by two
        int r = i / ns, u = u0 + du * (i % ns);
        Vec16 v = {};
        for (int h = 0; r < R && h < 2; h++) {
            Vec16 b = load16(x + tr.act[r] * x_bytes + n + 32 * u + 16 * h);
            for (int k = 0; k < 2; k++) {
                uint32_t lo = (uint32_t)((int16_t)b.w[2 * k] + (int16_t)(b.w[2 * k] >> 16));
                uint32_t hi = (uint32_t)((int16_t)b.w[2 * k + 1] + (int16_t)(b.w[2 * k + 1] >> 16));
                v.w[2 * h + k] = (lo & 0xffff) | hi << 16;
            }
        }
        *(Vec16 *)(xs + tile_pairs_at(n, u, r)) = v;
    }
    for (int i = threadIdx.x; i < MMA_M * ns; i += blockDim.x) {   // d: one a unit
        int r = i / ns, u = u0 + du * (i % ns);
        *(float *)(xs + tile_d_at(n, u, r)) = r < R ? ((const float *)(x + tr.act[r] * x_bytes + n + n / 8))[u] : 0.0f;
    }
}

// A lane's B fragment of group j of unit u (mma_s8) for tile rows 8h .. 8h + 7: 8 bytes of row 8h + g
__device__ void tile_fragment(const uint8_t *xs, int u, int j, int h, uint32_t b[2]) {
    W2 v = load8(xs + tile_q_at(u, j, 8 * h) + 8 * (threadIdx.x % WARP));
    b[0] = v.w[0], b[1] = v.w[1];
}
// A lane's cells in the tensor-core kernels (mma_add, then the kernels' writes): cell c (0-7) of lane
// 4g + t is weight row g + 8 ((c/2) % 2) of its warp's 16 and tile row 2t + c%2 + 8 (c/4), the mma's
// d[c % 4] for the tile's rows 8 (c/4) ..
__device__ int cell_weight_row(int c) { return threadIdx.x % WARP / 4 + 8 * ((c / 2) % 2); }
__device__ int cell_tile_row(int c) { return 2 * (threadIdx.x % 4) + c % 2 + 8 * (c / 4); }

// A matrix on the device (clover.c's Mat): n_out rows of n_in values of `type` (n_stack matrices of
// them for the stacked experts, expert e's row o being row e * n_out + o) in the layouts of section 3:
// row r's quants at data + r * row_bytes, and for Q8_0, Q4_0 and Q6_K its blocks' fp16 scales d at
// scales + r * blocks.
struct Mat { uint32_t type; int64_t n_in, n_out; const uint8_t *data; size_t row_bytes; const uint16_t *scales; };

// the units of a row of n values, the last one partial where n is not a multiple of UNIT
template <typename D> __host__ __device__ int units_of(int64_t n) { return (int)((n + D::UNIT - 1) / D::UNIT); }

// expert e of stacked experts m as a matrix of its own
__host__ __device__ Mat expert(const Mat *m, int e) {
    Mat x = *m;
    x.data += (size_t)e * m->n_out * m->row_bytes;
    if (x.scales) x.scales += (size_t)e * m->n_out * (m->n_in / (m->type == T_Q6_K ? 256 : 32));
    return x;
}

// One type per weight type: UNIT values a unit, LPB lanes a unit, rows of a multiple of ROW_STEP
// values (a partial last unit where that is less than UNIT), MINS (the Q4_K/Q5_K mins' term), MMA (a
// tensor-core batch form, mma_add: rows of whole units), Q8_0_ROWS (its activation rows are Q8_0).
// load: this lane's part of unit u of row r (nu units a row) into registers, unpacked, once for all
// the activation rows it meets; add: that part against rounded activation row x (n values): the
// unit's sums, added across its LPB lanes, then its fmaf into acc (and accm). on false: the lane only
// takes part in the shuffles (its piece is not read).

// F32 weights . F32 activations: 4 values a lane, one 16-byte load of each
struct DotF32 {
    static constexpr int UNIT = 4, LPB = 1, ROW_STEP = 4;
    static constexpr bool MINS = false, MMA = false;
    struct Piece { float w[4]; };
    __device__ static void load(const Mat &m, int64_t r, int, int u, int, Piece &p) {
        Vec16 v = load16(m.data + r * m.row_bytes + 16 * (size_t)u);
        for (int i = 0; i < 4; i++) p.w[i] = __uint_as_float(v.w[i]);
    }
    __device__ static void add(const Piece &p, const uint8_t *x, int64_t, int u, int, bool on, float &acc, float &) {
        if (!on) return;
        Vec16 a = load16(x + 16 * (size_t)u);
        for (int i = 0; i < 4; i++) acc = fmaf(p.w[i], __uint_as_float(a.w[i]), acc);
    }
};

// F16 / BF16 weights . activations rounded to the same type (the products are exact in fp32; twins
// dot_f16_row, dot_bf16_row): 8 values a lane, one 16-byte load of each
template <bool BF> struct DotHalf {
    static constexpr int UNIT = 8, LPB = 1, ROW_STEP = 8;
    static constexpr bool MINS = false, MMA = false;
    struct Piece { float w[8]; };
    __device__ static float value(const Vec16 &v, int i) {
        uint16_t h = (uint16_t)(v.w[i / 2] >> (16 * (i % 2)));
        return BF ? bf16_to_fp32(h) : fp16_to_fp32(h);
    }
    __device__ static void load(const Mat &m, int64_t r, int, int u, int, Piece &p) {
        Vec16 v = load16(m.data + r * m.row_bytes + 16 * (size_t)u);
        for (int i = 0; i < 8; i++) p.w[i] = value(v, i);
    }
    __device__ static void add(const Piece &p, const uint8_t *x, int64_t, int u, int, bool on, float &acc, float &) {
        if (!on) return;
        Vec16 a = load16(x + 16 * (size_t)u);
        for (int i = 0; i < 8; i++) acc = fmaf(p.w[i], value(a, i), acc);
    }
};

// The block-scaled types (Q8_0 and Q4_0 weights . Q8_0 rows: a block of 32 values, a scale on each
// side) take units of 8 blocks, a lane a block: lane j of a unit has its block's value
// (d_w d_a) * (integer sum), and the unit's 8 values are added as the xor butterfly adds them
// across its lanes (o = 1, 2, 4): ((v0 + v1) + (v2 + v3)) + ((v4 + v5) + (v6 + v7)), the same in
// every lane (a + b = b + a exactly); then acc += unit. A row whose length is not a multiple of 256
// ends in a partial unit, its missing blocks adding 0. A warp load of the weights reads 1,024 (Q8_0)
// or 512 (Q4_0) consecutive bytes.
__device__ float block_value(uint16_t dw, uint16_t da, int sum) { return fp16_to_fp32(dw) * fp16_to_fp32(da) * (float)sum; }
__device__ float unit_tree(float v) {   // (every lane of the warp calls it)
    for (int o = 1; o < 8; o *= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
// unit_tree on one thread: cell c's value v of block j (in order 0..7) into the unit's pending sums,
// p[0] a pair's first value, p[1] the first pair of four, p[2] the first four; after j = 7, p[2]
// holds the unit's sum
__device__ void block_tree(float p[3][8], int c, int j, float v) {
    if (j % 2 == 0) {
        p[0][c] = v;
        return;
    }
    v = p[0][c] + v;
    if (j % 4 == 1) {
        p[1][c] = v;
        return;
    }
    v = p[1][c] + v;
    p[2][c] = j == 3 ? v : p[2][c] + v;
}
// scale j of the 8 fp16 scales of a unit (16 bytes)
__device__ uint16_t scale_of(const Vec16 &s, int j) { return (uint16_t)(s.w[j / 2] >> 16 * (j % 2)); }

// add's steps for a block-scaled type: this lane's block b of unit u (past the row: none), whose
// integer sum against the row's block sum(x's 32 bytes) gives, with both scales, its value; the
// unit's tree of values; acc += it
template <typename Sum> __device__ void block_add(uint16_t dw, const uint8_t *x, int64_t n, int u, int part, bool on, float &acc, Sum sum) {
    int64_t b = 8 * (int64_t)u + part;
    float v = on && b < n / 32 ? block_value(dw, ((const uint16_t *)(x + n))[b], sum(x + 32 * b)) : 0.0f;
    v = unit_tree(v);
    if (on) acc += v;
}
// 16-byte piece i of row r's unit u as a block-scaled type is staged (stage_unit): its QB bytes of
// quants, then its 8 scales
template <int QB> __device__ const uint8_t *block_staged_piece(const Mat &m, int64_t r, int u, int nu, int i) {
    return i < QB / 16 ? m.data + r * m.row_bytes + QB * (size_t)u + 16 * i : (const uint8_t *)(m.scales + (r * nu + u) * 8);
}

// The batch form of a block-scaled unit (matmul_mma_kernel; see DotK4's): an mma a block j and 8
// tile rows, A = weight rows o0 + g and o0 + g + 8's 8 values of piece tile_piece(j, t) as signed
// bytes (piece(staged row, j): two words), B = tile rows 8h + g (tile_fragment); each cell's block
// value from its weight row's scale (staged after the unit's quants, the last 16 of STAGED bytes)
// and its tile row's (the tile's pairs: Q8_0_ROWS), into block_tree, and the unit into acc[c].
template <int STAGED, typename Piece>
__device__ void block_mma(const Mat &m, int64_t o0, int u, const uint8_t *ws, const uint8_t *xs, int64_t n, bool upper, float acc[8], Piece piece) {
    int g = threadIdx.x % WARP / 4, t = threadIdx.x % 4;
    bool on[2];
    Vec16 dw[2], da[4];   // the scales of this lane's weight rows o0 + g + 8e, and of its tile rows 2t + k%2 + 8 (k/2)
    for (int e = 0; e < 2; e++) {
        on[e] = o0 + g + 8 * e < m.n_out;
        dw[e] = on[e] ? load16(ws + (g + 8 * e) * STAGED + STAGED - 16) : Vec16{};
    }
    for (int k = 0; k < 4; k++) da[k] = k < 2 || upper ? load16(xs + tile_pairs_at(n, u, 2 * t + k % 2 + 8 * (k / 2))) : Vec16{};
    float p[3][8];
#pragma unroll
    for (int j = 0; j < 8; j++) {
        uint32_t a[4], b[2];   // a[0], a[2]: weight row g; a[1], a[3]: row g + 8
        for (int e = 0; e < 2; e++) {
            W2 v = on[e] ? piece(ws + (g + 8 * e) * STAGED, j, t) : W2{};
            a[e] = v.w[0], a[2 + e] = v.w[1];
        }
        for (int hf = 0; hf < 2; hf++) {
            if (hf && !upper) break;
            int d[4];
            tile_fragment(xs, u, j, hf, b);
            mma_s8(d, a, b);
            for (int r = 0; r < 4; r++) {   // cell c = 4 hf + r: weight row e = r / 2, tile row 2t + r%2 + 8 hf
                int c = 4 * hf + r;
                block_tree(p, c, j, block_value(scale_of(dw[r / 2], j), scale_of(da[r % 2 + 2 * hf], j), d[r]));
            }
        }
    }
    for (int c = 0; c < 8; c++)
        if (c < 4 || upper) acc[c] += p[2][c];
}

// Q8_0 . Q8_0: d_w d_a sum_j q_j a_j over 32 (twin dot_q8_0); a lane a block, two 16-byte loads of
// each, 8 dp4a
struct DotQ8_0 {
    static constexpr int UNIT = 256, LPB = 8, ROW_STEP = 32;
    static constexpr bool MINS = false, MMA = true, Q8_0_ROWS = true;
    struct Piece { Vec16 q[2]; uint16_t d; };
    __device__ static void load(const Mat &m, int64_t r, int, int u, int part, Piece &p) {
        int64_t b = 8 * (int64_t)u + part, nb = m.n_in / 32;
        if (b >= nb) return;   // (past a partial unit: add leaves it out)
        const uint8_t *q = m.data + r * m.row_bytes + 32 * b;
        p.q[0] = load16(q), p.q[1] = load16(q + 16);
        p.d = m.scales[r * nb + b];
    }
    __device__ static void add(const Piece &p, const uint8_t *x, int64_t n, int u, int part, bool on, float &acc, float &) {
        block_add(p.d, x, n, u, part, on, acc, [&](const uint8_t *xb) {
            Vec16 a[2] = {load16(xb), load16(xb + 16)};
            int s = 0;
            for (int i = 0; i < 8; i++) s = dp4a(p.q[i / 4].w[i % 4], a[i / 4].w[i % 4], s);
            return s;
        });
    }
    // Staged (ws), a row's unit is its 8 blocks' quants and then their 8 scales, 272 bytes (68
    // words: 8 rows start in 8 different groups of 4 banks, and a warp's 8-byte loads of a block,
    // 32 bytes a row, take two wavefronts); lane t's piece of block j is 8 bytes of it.
    static constexpr int STAGED = 256 + 16;
    __device__ static const uint8_t *staged_piece(const Mat &m, int64_t r, int u, int nu, int i) { return block_staged_piece<256>(m, r, u, nu, i); }
    __device__ static void mma_add(const Mat &m, int64_t o0, int u, const uint8_t *ws, const uint8_t *xs, int64_t n, bool upper, float acc[8], float *) {
        block_mma<STAGED>(m, o0, u, ws, xs, n, upper, acc, [](const uint8_t *row, int j, int t) { return load8(row + 32 * j + 8 * tile_piece(j, t)); });
    }
};

// Q4_0 . Q8_0: d_w d_a sum_j (q_j - 8) a_j; byte j holds q_j (low nibble) and q_j+16 (twin dot_q4_0).
// A lane a block: its 16 bytes in one load, split into nibbles at load; sum (q - 8) a = sum q a -
// 8 sum a, the activations' sum by dp4a with ones.
__device__ uint32_t minus8(uint32_t q) { return ((q | 0x80808080u) - 0x08080808u) ^ 0x80808080u; }   // q - 8 in each byte (q < 16), no borrows
struct DotQ4_0 {
    static constexpr int UNIT = 256, LPB = 8, ROW_STEP = 32;
    static constexpr bool MINS = false, MMA = true, Q8_0_ROWS = true;
    struct Piece { uint32_t lo[4], hi[4]; uint16_t d; };
    __device__ static void load(const Mat &m, int64_t r, int, int u, int part, Piece &p) {
        int64_t b = 8 * (int64_t)u + part, nb = m.n_in / 32;
        if (b >= nb) return;   // (past a partial unit: add leaves it out)
        Vec16 v = load16(m.data + r * m.row_bytes + 16 * b);
        for (int i = 0; i < 4; i++) p.lo[i] = v.w[i] & 0x0f0f0f0f, p.hi[i] = (v.w[i] >> 4) & 0x0f0f0f0f;
        p.d = m.scales[r * nb + b];
    }
    __device__ static void add(const Piece &p, const uint8_t *x, int64_t n, int u, int part, bool on, float &acc, float &) {
        block_add(p.d, x, n, u, part, on, acc, [&](const uint8_t *xb) {
            Vec16 a0 = load16(xb), a1 = load16(xb + 16);
            int s = 0, sa = 0;
            for (int i = 0; i < 4; i++) {
                s = dp4a(p.hi[i], a1.w[i], dp4a(p.lo[i], a0.w[i], s));
                sa = dp4a(0x01010101u, a1.w[i], dp4a(0x01010101u, a0.w[i], sa));
            }
            return s - 8 * sa;
        });
    }
    // Staged, a row's unit is its 8 blocks' 16 bytes and then their 8 scales, 144 bytes (36 words);
    // piece p of block j is nibble p / 2 of its bytes 8 (p % 2) .. + 7, made q - 8 for the mma.
    static constexpr int STAGED = 128 + 16;
    __device__ static const uint8_t *staged_piece(const Mat &m, int64_t r, int u, int nu, int i) { return block_staged_piece<128>(m, r, u, nu, i); }
    __device__ static void mma_add(const Mat &m, int64_t o0, int u, const uint8_t *ws, const uint8_t *xs, int64_t n, bool upper, float acc[8], float *) {
        block_mma<STAGED>(m, o0, u, ws, xs, n, upper, acc, [](const uint8_t *row, int j, int t) {
            int p = tile_piece(j, t);
            W2 v = load8(row + 16 * j + 8 * (p % 2));
            for (int i = 0; i < 2; i++) v.w[i] = minus8((v.w[i] >> 4 * (p / 2)) & 0x0f0f0f0f);
            return v;
        });
    }
};

// scale and min j (0..7) of a Q4_K/Q5_K block from its 12 scale bytes as three words s0, s1, s2
// (clover.c's unpack_scales_k4, for one j)
__device__ void scale_min_k4(uint32_t s0, uint32_t s1, uint32_t s2, int j, int &sc, int &mn) {
    int k = 8 * (j % 4);
    uint32_t a = (s0 >> k) & 255, b = (s1 >> k) & 255, c = (s2 >> k) & 255;   // bytes j%4, j%4 + 4, j%4 + 8
    if (j < 4) sc = (int)(a & 63), mn = (int)(b & 63);
    else sc = (int)((c & 15) | ((a >> 6) << 4)), mn = (int)((c >> 4) | ((b >> 6) << 4));
}

// The K-quant units (256 weights) are split across LPB = 8 lanes by 16-value chunks of activations:
// lane c of a unit takes chunks c and c + 8 (values 16c.. and 128 + 16c..), so that one load of
// the 8 lanes of each of the 4 units in a warp reads 4 x 128 consecutive activation bytes (4 L1
// lines, the fewest that 512 bytes take) and the weights' bytes likewise; the 8 lanes' integer
// sums are then added by 3 xor shuffles. Chunk c of Q8_K activations: 16 bytes at 16c, bsum c.
__device__ Vec16 chunk_bits(const Vec16 &v, int shift, uint32_t mask) {
    Vec16 r;
    for (int i = 0; i < 4; i++) r.w[i] = (v.w[i] >> shift) & mask;
    return r;
}
__device__ int dot16(const Vec16 &w, const Vec16 &a) {
    int s = 0;
    for (int i = 0; i < 4; i++) s = dp4a(w.w[i], a.w[i], s);
    return s;
}

// Q4_K/Q5_K . Q8_K: d_w d_a sum_j sc_j (q_j . a_j) - dmin_w d_a sum_j m_j (bsum_2j + bsum_2j+1) over
// the sub-blocks j = 2p + h of 32 weights, nibble h of bytes qs[32p..32p+31] (Q5_K: plus bit j of
// qh[l] as bit 4). Twins dot_q4_K / dot_q4_K_8x8 and dot_q5_K. Chunk c (16 values) lies in
// sub-block j = c/2, at qs bytes 32 (c/4) + 16 (c%2): a lane loads the block's 16-byte header (d,
// dmin, scales; the same 16 bytes as its unit's other lanes), 16 qs bytes per chunk (and Q5_K's 16
// qh bytes), and adds sc_j (q . a) and m_j bsum_c per chunk: 8 dp4a.
template <bool Q5> struct DotK4 {
    static constexpr int UNIT = 256, LPB = 8, ROW_STEP = 256;
    static constexpr bool MINS = true, MMA = true, Q8_0_ROWS = false;
    struct Piece { Vec16 q[2]; int sc[2], mn[2]; float d, dmin; };
    __device__ static void load(const Mat &m, int64_t r, int, int u, int part, Piece &p) {
        const uint8_t *b = m.data + r * m.row_bytes + (size_t)u * (Q5 ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K));
        Vec16 h = load16(b);
        p.d = fp16_to_fp32((uint16_t)h.w[0]), p.dmin = fp16_to_fp32((uint16_t)(h.w[0] >> 16));
        for (int k = 0; k < 2; k++) {
            int c = part + 8 * k, j = c / 2, l0 = 16 * (c % 2);
            scale_min_k4(h.w[1], h.w[2], h.w[3], j, p.sc[k], p.mn[k]);
            p.q[k] = chunk_bits(load16(b + (Q5 ? 48 : 16) + 32 * (c / 4) + l0), 4 * (j % 2), 0x0f0f0f0f);
            if (Q5) {
                Vec16 hb = chunk_bits(load16(b + 16 + l0), j, 0x01010101);
                for (int i = 0; i < 4; i++) p.q[k].w[i] |= hb.w[i] << 4;
            }
        }
    }
    __device__ static void add(const Piece &p, const uint8_t *x, int64_t n, int u, int part, bool on, float &acc, float &accm) {
        int si = 0, sm = 0;
        if (on) {
            const int16_t *bs = (const int16_t *)(x + n) + 16 * (size_t)u;
            for (int k = 0; k < 2; k++) {
                int c = part + 8 * k;
                si += p.sc[k] * dot16(p.q[k], load16(x + 256 * (size_t)u + 16 * c));
                sm += p.mn[k] * bs[c];
            }
        }
        for (int o = 1; o < LPB; o *= 2) si += __shfl_xor_sync(0xffffffffu, si, o), sm += __shfl_xor_sync(0xffffffffu, sm, o);
        if (!on) return;
        float da = ((const float *)(x + n + n / 8))[u];
        acc = fmaf(p.d * da, (float)si, acc);
        accm = fmaf(p.dmin * da, (float)sm, accm);
    }
    // The batch form (matmul_mma_kernel): unit u of weight rows o0..o0+15, staged in shared memory
    // as ws (their blocks one after another, STAGED bytes each: stage_unit), against the tile's rows,
    // an mma a sub-block j and 8 tile rows: A = weight rows o0 + g and o0 + g + 8, their values of j
    // at piece tile_piece(j, t) (nibble j%2 of the qs bytes 32 (j/2) + 8 piece.., Q5_K's bit j of qh
    // bytes 8 piece.. as bit 4), B = tile rows 8h + g (tile_fragment). A lane loads 16 bytes of a
    // row's qs for four sub-blocks and swaps half of them with lane t^2 (tile_piece). Its cells c
    // (cell_weight_row, cell_tile_row; c >= 4 only where upper, the tile's rows passing 8) then add
    // sc_j times the mma's sum, and after the sub-blocks m_j times the tile row's pair j: the unit's
    // integer sums of add, and its fmaf into acc[c] and accm[c].
    // (Blocks of 144 or 176 bytes, 36 or 44 words: 8 rows start in 8 different groups of 4 banks, so
    // that the header and qs loads meet no bank twice more than their bytes ask.)
    static constexpr int STAGED = Q5 ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K);
    __device__ static const uint8_t *staged_piece(const Mat &m, int64_t r, int u, int, int i) { return m.data + r * m.row_bytes + (size_t)u * STAGED + 16 * i; }
    __device__ static void mma_add(const Mat &m, int64_t o0, int u, const uint8_t *ws, const uint8_t *xs, int64_t n, bool upper, float acc[8], float accm[8]) {
        int g = threadIdx.x % WARP / 4, t = threadIdx.x % 4;
        bool on[2];
        Vec16 h[2];   // the headers of this lane's weight rows o0 + g + 8e
        W2 qh[2][2] = {}, q[2][2] = {};   // [e][half]: this lane's pieces of halves 0 and 1 of qh, and of qs (both nibbles: sub-blocks j, j + 1)
        for (int e = 0; e < 2; e++) {
            on[e] = o0 + g + 8 * e < m.n_out;
            h[e] = on[e] ? load16(ws + (g + 8 * e) * STAGED) : Vec16{};
            if (Q5) pieces_by_half(on[e] ? load16(ws + (g + 8 * e) * STAGED + 16 + 16 * (t & 1)) : Vec16{}, t, qh[e]);
        }
        int si[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        uint32_t mins[2][2] = {};   // [e]: m_j of row e as byte j % 4 of word j / 4
#pragma unroll
        for (int j = 0; j < 8; j++) {
            if (j % 4 == 0)   // lane t's 16 bytes at 16t of 64, its second piece swapped with lane t^2's
                for (int e = 0; e < 2; e++) {
                    Vec16 v = on[e] ? load16(ws + (g + 8 * e) * STAGED + (Q5 ? 48 : 16) + 64 * (j / 4) + 16 * t) : Vec16{};
                    v.w[2] = __shfl_xor_sync(0xffffffffu, v.w[2], 2), v.w[3] = __shfl_xor_sync(0xffffffffu, v.w[3], 2);
                    pieces_by_half(v, t, q[e]);
                }
            int s = (j / 2) % 2, sc[2], mn[2];
            uint32_t a[4], b[2];   // a[0], a[2]: weight row g; a[1], a[3]: row g + 8
            for (int e = 0; e < 2; e++) {
                for (int i = 0; i < 2; i++) {
                    uint32_t w = (q[e][s].w[i] >> 4 * (j % 2)) & 0x0f0f0f0f;
                    a[2 * i + e] = Q5 ? w | ((qh[e][s].w[i] >> j) & 0x01010101) << 4 : w;
                }
                scale_min_k4(h[e].w[1], h[e].w[2], h[e].w[3], j, sc[e], mn[e]);
                mins[e][j / 4] |= (uint32_t)mn[e] << 8 * (j % 4);
            }
            for (int hf = 0; hf < 2; hf++) {
                if (hf && !upper) break;
                int c[4];
                tile_fragment(xs, u, j, hf, b);
                mma_s8(c, a, b);
                for (int r = 0; r < 4; r++) si[4 * hf + r] += sc[r / 2] * c[r];
            }
        }
        float dw[2], dmin[2];
        for (int e = 0; e < 2; e++) dw[e] = fp16_to_fp32((uint16_t)h[e].w[0]), dmin[e] = fp16_to_fp32((uint16_t)(h[e].w[0] >> 16));
        for (int k = 0; k < 4; k++) {   // tile row 2t + k%2 + 8 (k/2): its cells c = 4 (k/2) + k%2 and + 2
            if (k >= 2 && !upper) break;
            int r = 2 * t + k % 2 + 8 * (k / 2), sm[2] = {0, 0};
            Vec16 pr = load16(xs + tile_pairs_at(n, u, r));
            for (int j = 0; j < 8; j++) {
                int pair = (int16_t)(pr.w[j / 2] >> 16 * (j % 2));
                for (int e = 0; e < 2; e++) sm[e] += (int)((mins[e][j / 4] >> 8 * (j % 4)) & 255) * pair;
            }
            float da = tile_d(xs, n, u, r);
            for (int e = 0; e < 2; e++) {
                int c = 4 * (k / 2) + k % 2 + 2 * e;
                acc[c] = fmaf(dw[e] * da, (float)si[c], acc[c]);
                accm[c] = fmaf(dmin[e] * da, (float)sm[e], accm[c]);
            }
        }
    }
};

// Q6_K . Q8_K: d_w d_a sum_g sc_g sum_l (q - 32) a over 16 weights per g (twin dot_q6_K); weight
// 128h + 32k + l (half h, l < 32) is q = (ql[64h + l + 32(k%2)] nibble k/2) | (bits 2k of qh[32h + l]) << 4.
// Chunk c (16 values, scale group g = c) is h = c/8, k = (c/2)%4, l in [16(c%2), +16): a lane loads
// 16 ql and 16 qh bytes per chunk and the block's 16 scales (the same as its unit's other lanes),
// and adds sc_c (q . a - 32 bsum_c) per chunk: 8 dp4a.
struct DotQ6_K {
    static constexpr int UNIT = 256, LPB = 8, ROW_STEP = 256;
    static constexpr bool MINS = false, MMA = true, Q8_0_ROWS = false;
    struct Piece { Vec16 q[2]; int sc[2]; float d; };
    __device__ static void load(const Mat &m, int64_t r, int nu, int u, int part, Piece &p) {
        const uint8_t *row = m.data + r * m.row_bytes;   // [ql: 128 a block][qh: 64][scales: 16]
        Vec16 sc = load16(row + 192 * (size_t)nu + 16 * (size_t)u);
        for (int k = 0; k < 2; k++) {
            int c = part + 8 * k, h = c / 8, kk = (c / 2) % 4, l0 = 16 * (c % 2);
            Vec16 lo = chunk_bits(load16(row + 128 * (size_t)u + 64 * h + 32 * (kk % 2) + l0), 4 * (kk / 2), 0x0f0f0f0f);
            Vec16 hi = chunk_bits(load16(row + 128 * (size_t)nu + 64 * (size_t)u + 32 * h + l0), 2 * kk, 0x03030303);
            for (int i = 0; i < 4; i++) p.q[k].w[i] = lo.w[i] | hi.w[i] << 4;
            uint32_t sw = part < 4 ? sc.w[2 * k] : sc.w[2 * k + 1];   // word c/4, without a dynamic index (a stack copy)
            p.sc[k] = (int8_t)(sw >> (8 * (c % 4)));
        }
        p.d = fp16_to_fp32(m.scales[r * nu + u]);
    }
    __device__ static void add(const Piece &p, const uint8_t *x, int64_t n, int u, int part, bool on, float &acc, float &) {
        int si = 0;
        if (on) {
            const int16_t *bs = (const int16_t *)(x + n) + 16 * (size_t)u;
            for (int k = 0; k < 2; k++) {
                int c = part + 8 * k;
                si += p.sc[k] * (dot16(p.q[k], load16(x + 256 * (size_t)u + 16 * c)) - 32 * bs[c]);
            }
        }
        for (int o = 1; o < LPB; o *= 2) si += __shfl_xor_sync(0xffffffffu, si, o);
        if (on) acc = fmaf(p.d * ((const float *)(x + n + n / 8))[u], (float)si, acc);
    }
    // The batch form (matmul_mma_kernel, see DotK4's): A = rows o0 + g and o0 + g + 8's q - 32 for
    // the values of piece tile_piece(j, t) of the 32 at 128h + 32k (sub-block j = 4h + k), which hold
    // two scale groups, 2j (pieces 0 and 1: lanes t%2 = 0) and 2j + 1: two mmas a sub-block and 8
    // tile rows, each with the other group's lanes zero. A lane loads the 16 bytes of its two pieces
    // (ql, qh) of each of its rows and takes one. Staged (ws), a row's unit is its ql, qh and scales,
    // 208 bytes (52 words: 8 rows start in 8 different groups of 4 banks); the scale d comes from
    // device memory.
    static constexpr int STAGED = 128 + 64 + 16;
    __device__ static const uint8_t *staged_piece(const Mat &m, int64_t r, int u, int nu, int i) {
        const uint8_t *row = m.data + r * m.row_bytes;
        return i < 8 ? row + 128 * (size_t)u + 16 * i : i < 12 ? row + 128 * (size_t)nu + 64 * (size_t)u + 16 * (i - 8) : row + 192 * (size_t)nu + 16 * (size_t)u;
    }
    __device__ static void mma_add(const Mat &m, int64_t o0, int u, const uint8_t *ws, const uint8_t *xs, int64_t n, bool upper, float acc[8], float *) {
        int g = threadIdx.x % WARP / 4, t = threadIdx.x % 4, nu = (int)(n / UNIT);
        bool on[2];
        Vec16 sc[2];   // the scales of this lane's weight rows o0 + g + 8e
        float d[2];
        for (int e = 0; e < 2; e++) {
            int64_t o = o0 + g + 8 * e;
            on[e] = o < m.n_out;
            sc[e] = on[e] ? load16(ws + (g + 8 * e) * STAGED + 192) : Vec16{};
            d[e] = on[e] ? fp16_to_fp32(m.scales[o * nu + u]) : 0.0f;
        }
        int si[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        W2 ql[2][2][2] = {}, qh[2][2] = {};   // [e]: this lane's pieces of halves 0, 1: ql bytes of k % 2 (both nibbles: k and k + 2), qh bytes of h
#pragma unroll
        for (int j = 0; j < 8; j++) {
            int h = j / 4, k = j % 4, s = k / 2;   // (s: half (j/2) % 2)
            uint32_t lo[4], hi[4], b[2];   // A of scale groups 2j and 2j + 1: [0], [2] row g; [1], [3] row g + 8
            for (int e = 0; e < 2; e++) {
                const uint8_t *row = ws + (g + 8 * e) * STAGED;   // [ql: 128][qh: 64][scales: 16]
                if (k < 2) pieces_by_half(on[e] ? load16(row + 64 * h + 32 * k + 16 * (t & 1)) : Vec16{}, t, ql[e][k]);
                if (k == 0) pieces_by_half(on[e] ? load16(row + 128 + 32 * h + 16 * (t & 1)) : Vec16{}, t, qh[e]);
                for (int i = 0; i < 2; i++) {
                    uint32_t q = ((ql[e][k % 2][s].w[i] >> 4 * (k / 2)) & 0x0f0f0f0f) | ((qh[e][s].w[i] >> 2 * k) & 0x03030303) << 4;
                    q = (q & 0x1f1f1f1f) | ((~q >> 5) & 0x01010101) * 0xe0;   // q - 32 in each byte (q < 64)
                    lo[2 * i + e] = t % 2 == 0 ? q : 0, hi[2 * i + e] = t % 2 == 0 ? 0 : q;
                }
            }
            for (int hf = 0; hf < 2; hf++) {
                if (hf && !upper) break;
                int c0[4], c1[4];
                tile_fragment(xs, u, j, hf, b);
                mma_s8(c0, lo, b);
                mma_s8(c1, hi, b);
                for (int r = 0; r < 4; r++) {
                    const Vec16 &w = sc[r / 2];
                    si[4 * hf + r] += (int8_t)(w.w[j / 2] >> 16 * (j % 2)) * c0[r] + (int8_t)(w.w[j / 2] >> (16 * (j % 2) + 8)) * c1[r];
                }
            }
        }
        for (int c = 0; c < 8; c++) {
            if (c >= 4 && !upper) break;
            float da = tile_d(xs, n, u, cell_tile_row(c));
            acc[c] = fmaf(d[(c / 2) % 2] * da, (float)si[c], acc[c]);
        }
    }
};

// The slots of this lane's row folded (the halving fold above); every lane of the row gets the dot.
template <typename D> __device__ float fold_row(float acc, float accm, int lpr) {
    for (int o = lpr / 2; o >= D::LPB; o /= 2) {
        acc += __shfl_xor_sync(0xffffffffu, acc, o);
        if (D::MINS) accm += __shfl_xor_sync(0xffffffffu, accm, o);
    }
    return D::MINS ? acc - accm : acc;
}

// Row r of m . rounded activation row x by the lpr lanes of this lane's row (lanes lpr-aligned in the
// warp). active false: the lanes take part in the shuffles and add nothing.
template <typename D> __device__ float row_dot(const Mat &m, int64_t r, const uint8_t *x, int lpr, bool active) {
    int gl = threadIdx.x % lpr, slot = gl / D::LPB, part = gl % D::LPB, slots = lpr / D::LPB, nu = units_of<D>(m.n_in);
    float acc = 0, accm = 0;
#pragma unroll 2
    for (int u0 = 0; u0 < nu; u0 += slots) {   // the same trip count in every lane: the shuffles stay convergent
        int u = u0 + slot;
        bool on = active && u < nu;
        typename D::Piece p;
        if (on) D::load(m, r, nu, u, part, p);
        D::add(p, x, m.n_in, u, part, on, acc, accm);
    }
    return fold_row<D>(acc, accm, lpr);
}

// lanes of a row of `units` units: the smallest power of two that gives each unit its LPB lanes, at most a warp
static int lanes_per_row(int lpb, int64_t units) {
    int l = lpb;
    while (l < WARP && l < units * lpb) l *= 2;
    return l;
}

// Matrices of one type and row length that read one input, in one launch (matmuls_gpu; one matrix
// for the others): matrix i takes the launch's row blocks first[i] .. first[i+1]-1, its rows go to y[i].
enum { MAX_MATS = 4 };
struct MatList { Mat m[MAX_MATS]; float *y[MAX_MATS]; unsigned first[MAX_MATS + 1]; int n; };

// the entry of L that row block b belongs to, and its first block (compile-time indices only: no
// local-memory copy of the list)
__device__ void pick(const MatList &L, unsigned b, Mat &m, float *&y, unsigned &b0) {
    m = L.m[0], y = L.y[0], b0 = 0;
#pragma unroll
    for (int k = 1; k < MAX_MATS; k++)
        if (k < L.n && b >= L.first[k]) m = L.m[k], y = L.y[k], b0 = L.first[k];
}

// An activation row as a matvec block reads it: row r of the rounded rows x (x_bytes apart); or,
// where x is NULL, row r of the float rows xf (n each) rounded to dot type dt by the block itself
// into xs, its shared memory (round_row_block: quantize_row's bits). Every block that reads the row
// rounds it again, a few hundred loads from L2, which costs less than a launch of its own (a graph
// node, ~2 us): the decode step's inputs that no norm rounded come this way. Every thread of the
// block calls it (a barrier).
enum { MAX_ROUNDED = 8192 };   // bytes of a row rounded in shared memory: act_bytes(dt, n) at most
__device__ const uint8_t *block_input(const uint8_t *x, size_t x_bytes, const float *xf, int64_t n, uint32_t dt, int64_t r, uint8_t *xs) {
    if (x) return x + r * x_bytes;
    round_row_block(xf + r * n, (int)n, dt, xs);
    __syncthreads();
    return xs;
}

// F32 matrices that ride along in a launch of another kernel (a decode step's row, or the few rows
// of a verify or preview batch): extra blocks at the end of its grid x (grid row 0) compute their
// rows as matvec_kernel<DotF32> would alone (the same row_dot chains, the same bits), from the T float
// rows x: L's row blocks for each RIDER_ROWS of them in turn (rows per block: the launch's threads /
// lpr), a lane loading its weights once for those activation rows (a verify's router read 4 times,
// not 16). A GDN layer's
// alpha and beta ride with its q/k/v and gate projections, the router and the shared expert's gate
// with the shared expert's gate and up: a launch less each (a graph node, ~2 us), and their few
// blocks no longer wait for HBM on their own.
struct Rider { MatList L; const float *x; int lpr, T; };
enum { RIDER_ROWS = 4 };

// The residual stream's step after a matrix: the residual add (a mixer's output, or the MoE's sum and
// the shared expert, sel not NULL), the next norm and its rounding(s) (residual_row, section 7, which
// says what each field is). In a decode step the matvec launch that makes the row (the mixer's
// W_out or W_o, the shared expert's down projection) ends with it, by its last block to finish
// (count: last_block's): a launch less each. x NULL: none.
enum { MAX_USED = 64 };   // n_expert_used
struct Residual {
    float *x, *mix, *sh, *xn;
    const float *w, *wr, *ye, *sh_logit;
    const int *sel;
    int n, K;
    float eps;
    uint32_t dt, dt2;
    uint8_t *xq, *xq2;
    size_t xq_bytes, xq2_bytes;
    unsigned *count;
};
__device__ void residual_row(const Residual &r, int64_t t);

// Whether this block is the last of `blocks` blocks to get here, counting in *count (which the last
// one resets to 0 for the next launch: a graph replays it). The fence makes this block's writes
// visible to the last one before it counts; the last reads what every other block wrote. Every
// thread of the block calls it. The work the last block then does reads finished values in a fixed
// order, so the bits do not depend on which block came last.
__device__ bool last_block(unsigned *count, unsigned blocks) {
    __shared__ bool last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        last = atomicAdd(count, 1u) == blocks - 1;
        if (last) *count = 0;
    }
    __syncthreads();
    if (last) __threadfence();
#ifdef CLOVER_EMU
    if (last) emu_tail();   // (the cost model prices what the block does next after the rest of the launch)
#endif
    return last;
}

__host__ __device__ unsigned rider_blocks(const Rider &rd) { return rd.L.first[rd.L.n] * (unsigned)((rd.T + RIDER_ROWS - 1) / RIDER_ROWS); }

// Whether this block is one of rd's (the last rider_blocks(rd) of grid x), which it then computes
// (in grid row 0; the launch's other rows have none). Every thread of the block calls it.
__device__ bool ridden(const Rider &rd) {
    unsigned own = gridDim.x - rider_blocks(rd), per = rd.L.first[rd.L.n];
    if (blockIdx.x < own) return false;
    if (blockIdx.y) return true;
    unsigned b = (blockIdx.x - own) % per, b0;
    int64_t t0 = (blockIdx.x - own) / per * RIDER_ROWS;
    Mat m;
    float *y;
    pick(rd.L, b, m, y, b0);
    int64_t o = (int64_t)(b - b0) * (blockDim.x / rd.lpr) + threadIdx.x / rd.lpr;
    bool active = o < m.n_out;
    int gl = threadIdx.x % rd.lpr, nu = units_of<DotF32>(m.n_in);
    float acc[RIDER_ROWS] = {}, none = 0;
    for (int u = gl; u - gl < nu; u += rd.lpr) {   // row_dot's steps (DotF32: a unit a lane), for each activation row
        bool on = active && u < nu;
        DotF32::Piece p;
        if (on) DotF32::load(m, o, nu, u, 0, p);
#pragma unroll
        for (int k = 0; k < RIDER_ROWS; k++)
            if (t0 + k < rd.T) DotF32::add(p, (const uint8_t *)(rd.x + (t0 + k) * m.n_in), m.n_in, u, 0, on, acc[k], none);
    }
#pragma unroll
    for (int k = 0; k < RIDER_ROWS; k++) {
        float v = fold_row<DotF32>(acc[k], 0, rd.lpr);
        if (t0 + k < rd.T && active && gl == 0) y[(t0 + k) * m.n_out + o] = v;
    }
    return true;
}

// One activation row per job: job j multiplies expert ids[j]'s matrix (ids NULL: the matrices of L)
// by activation row j / in_div (block_input: rounded rows x, or floats xf rounded here to dt) into
// y + j * n_out; ids[j] < 0: zeros. Blocks of BLOCK threads take BLOCK / lpr rows (a warp 32 / lpr),
// grid L's row blocks x jobs in x alone (jobs may pass 65,535), then rd's blocks (T = 1). rs (one
// matrix, one job, no riders): then the residual step on its row, by the last block.
template <typename D>
__global__ void matvec_kernel(MatList L, const int *ids, const uint8_t *x, size_t x_bytes, const float *xf, uint32_t dt, int in_div, int lpr,
                              Rider rd, Residual rs) {
    __shared__ Vec16 xs[MAX_ROUNDED / 16];
    if (ridden(rd)) return;   // the whole block
    unsigned blocks = L.first[L.n], b = blockIdx.x % blocks, b0;
    int64_t job = blockIdx.x / blocks;
    Mat m;
    float *y;
    pick(L, b, m, y, b0);
    int64_t o = (int64_t)(b - b0) * (BLOCK / lpr) + threadIdx.x / lpr, at = job * m.n_out + o;
    int e = ids ? ids[job] : 0;
    bool active = o < m.n_out, writer = active && threadIdx.x % lpr == 0;
    if (e < 0) {   // the whole block (one job): no shuffles left behind
        if (writer) y[at] = 0;
        return;
    }
    const uint8_t *xr = block_input(x, x_bytes, xf, m.n_in, dt, job / in_div, (uint8_t *)xs);
    float v = row_dot<D>(m, e * m.n_out + o, xr, lpr, active);
    if (writer) y[at] = v;
    if (rs.x && last_block(rs.count, gridDim.x)) residual_row(rs, 0);
}

enum { MAX_ROWS = 16 };   // activation rows of matmul_kernel's tile (a verify or preview batch: all of them)

// T activation rows in tiles of MAX_ROWS (grid y; then rd's blocks in x): a lane loads and unpacks its part of a unit once
// and adds it to every row of the tile, its accumulators for the tile's rows in shared memory (its
// own cells, [warp][row][lane]: no bank conflicts, no barrier); then each row is folded as in row_dot.
template <typename D> __global__ void matmul_kernel(MatList L, const uint8_t *x, size_t x_bytes, int T, int lpr, Rider rd) {
    __shared__ float acc[BLOCK / WARP][MAX_ROWS][WARP], accm[BLOCK / WARP][MAX_ROWS][WARP];
    if (ridden(rd)) return;   // the whole block
    unsigned b0;
    Mat m;
    float *y;
    pick(L, blockIdx.x, m, y, b0);
    int w = threadIdx.x / WARP, lane = threadIdx.x % WARP, gl = lane % lpr;
    int slot = gl / D::LPB, part = gl % D::LPB, slots = lpr / D::LPB, nu = units_of<D>(m.n_in);
    int64_t o = (int64_t)(blockIdx.x - b0) * (BLOCK / lpr) + threadIdx.x / lpr;
    int t0 = blockIdx.y * MAX_ROWS, R = T - t0 < MAX_ROWS ? T - t0 : MAX_ROWS;
    const uint8_t *xt = x + (size_t)t0 * x_bytes;
    bool active = o < m.n_out;
    for (int r = 0; r < R; r++) acc[w][r][lane] = accm[w][r][lane] = 0;
    for (int u0 = 0; u0 < nu; u0 += slots) {
        int u = u0 + slot;
        bool on = active && u < nu;
        typename D::Piece p;
        if (on) D::load(m, o, nu, u, part, p);
        for (int r = 0; r < R; r++) D::add(p, xt + r * x_bytes, m.n_in, u, part, on, acc[w][r][lane], accm[w][r][lane]);
    }
    for (int r = 0; r < R; r++) {
        float v = fold_row<D>(acc[w][r][lane], accm[w][r][lane], lpr);
        if (active && gl == 0) y[(int64_t)(t0 + r) * m.n_out + o] = v;
    }
}

// The quantized batches on the tensor cores (K-quants, Q8_0, Q4_0; verify, preview, prefill: every
// matrix of the three files, the experts too): a block takes a tile of MMA_M activation rows (tile_rows),
// staged once in shared memory (stage_tile), and MMA_ROWS weight rows, a warp 16 of them, which come
// through shared memory a unit at a time (stage_unit, a few units ahead); for each unit the warp's
// mmas give every (activation row, weight row) pair its integer sums at once (D::mma_add), which the
// matvec lanes add up by shuffles. (The weights are the mma's A, 16 rows, and the activations its
// B, 8 rows an mma: a warp's fragment load of the tile then serves 16 weight rows, where with the
// activations as A it served 8.) The float steps are row_dot's: slot s of
// slots = lanes_per_row / LPB takes units s, s + slots, ... (here acc[0] is always the slot of the
// next unit: the slots rotate after each), then the halving fold. So a row's bits are
// matvec_kernel's, whatever the batch.
__device__ void rotate_slots(float a[4][8], int slots) {
    for (int e = 0; e < 8; e++) {
        float f = a[0][e];
        if (slots == 2) a[0][e] = a[1][e], a[1][e] = f;
        if (slots == 4) a[0][e] = a[1][e], a[1][e] = a[2][e], a[2][e] = a[3][e], a[3][e] = f;
    }
}
__device__ void fold_slots(float a[4][8], int slots) {
    for (int e = 0; e < 8; e++) {
        if (slots == 4) a[0][e] += a[2][e], a[1][e] += a[3][e];
        if (slots >= 2) a[0][e] += a[1][e];
    }
}
// The weights reach the tensor cores through shared memory: each warp stages unit u of its 16 weight
// rows (16 x D::STAGED bytes, by its lanes, 16 bytes an asynchronous copy) in one of MMA_STAGES
// buffers of its own, MMA_STAGES - 1 units ahead of the one its mmas work on. A load into registers
// holds its thread until the bytes come back (~600 ns from HBM), so that the threads an SM holds
// would keep too few bytes in flight to read at the H200's 4.8 TB/s (Little's law: ~21 KB an SM);
// the staged units stay in flight while the mmas run, two of them a warp (~4.6 KB). Rows past the
// matrix are not copied (mma_add does not read them).
enum { MMA_STAGES = 3 };
template <typename D> __device__ void stage_unit(const Mat &m, int64_t o0, int u, uint8_t *ws) {
    constexpr int P = D::STAGED / 16;   // 16-byte pieces of a row
    int nu = units_of<D>(m.n_in);
    for (int i = threadIdx.x % WARP; i < 16 * P; i += WARP)
        if (o0 + i / P < m.n_out) copy16_async(ws + 16 * i, D::staged_piece(m, o0 + i / P, u, nu, i % P));
}
// bytes of dynamic shared memory of a tensor-core block: the tile of rows of n values, then each
// warp's weight stages
template <typename D> __host__ __device__ size_t mma_smem_bytes(int64_t n) { return mma_tile_bytes(n) + (size_t)MMA_WARPS * MMA_STAGES * 16 * D::STAGED; }
template <typename D> __device__ uint8_t *warp_stages(uint8_t *smem, int64_t n) { return smem + mma_tile_bytes(n) + (size_t)(threadIdx.x / WARP) * MMA_STAGES * 16 * D::STAGED; }

// A warp's 16 weight rows o0.. of m against the staged tile, units u0, u0 + du, ..., through its
// weight stages ws: this lane's cells c (cell_weight_row, cell_tile_row) as row_dot's slots hold
// them, acc[k] the slot of unit u0 + k du (the slots rotating; slots 1: one, a split batch's block)
// (upper false: the tile's rows are at most 8, and the cells c >= 4 are left out). Unit k is waited
// for, and the warp meets (then no lane still reads unit k - 1's stage, which takes unit k +
// MMA_STAGES - 1); a group is committed every turn, empty or not, so that the wait always leaves the
// newest MMA_STAGES - 2 groups coming.
template <typename D>
__device__ void mma_rows(const Mat &m, int64_t o0, const uint8_t *xs, uint8_t *ws, int u0, int du, int slots, bool upper, float acc[4][8], float accm[4][8]) {
    constexpr size_t SB = 16 * D::STAGED;   // a stage
    int nu = units_of<D>(m.n_in), K = u0 < nu ? (nu - u0 + du - 1) / du : 0, k = 0;   // K: the warp's units
    for (int s = 0; s < MMA_STAGES - 1; s++) {
        if (s < K) stage_unit<D>(m, o0, u0 + s * du, ws + s * SB);
        copies_commit();
    }
    for (; k < K; k++) {
        copies_wait<MMA_STAGES - 2>();
        __syncwarp();
        int ahead = k + MMA_STAGES - 1;
        if (ahead < K) stage_unit<D>(m, o0, u0 + ahead * du, ws + ahead % MMA_STAGES * SB);
        copies_commit();
        D::mma_add(m, o0, u0 + k * du, ws + k % MMA_STAGES * SB, xs, m.n_in, upper, acc[0], accm[0]);
        rotate_slots(acc, slots), rotate_slots(accm, slots);
    }
    for (; k % slots; k++) rotate_slots(acc, slots), rotate_slots(accm, slots);   // back to slot 0
}
// the row's sums from its slots' (acc[s], accm[s]): the halving fold, less the mins
template <typename D> __device__ void fold_cells(float acc[4][8], float accm[4][8], int slots, float v[8]) {
    fold_slots(acc, slots), fold_slots(accm, slots);
    for (int c = 0; c < 8; c++) v[c] = D::MINS ? acc[0][c] - accm[0][c] : acc[0][c];
}

// A batch of few rows against a matrix of few rows has few blocks: 16 rows of a 2048 x 4096 matrix
// are 32 blocks of 64 weight rows, on 32 of the H200's 132 SMs, whose bytes in flight (~32 x 9.2 KB)
// cannot keep its memory busy (4.8 TB/s x 600 ns asks ~2.9 MB). Such a batch is
// split by slot (matmul_mma_gpu: where its blocks would not fill the SMs): block (row block b, slot s)
// computes slot s's sums of its rows (units s, s + slots, ...: the same fmaf chain, the tile staged
// for those units alone), writes them to part, and the last of b's blocks to finish (last_block, its
// count in count) folds the slots in order: the bits of the unsplit kernel. split 1: unsplit.
struct MmaSplit { float *part; unsigned *count; int split; };
// (tile, row block)s a split launch may have; the part of each: its (at most 4) slots' cells, 16
// floats a thread (acc and accm of its 8 cells)
enum { MMA_SPLIT_TILES = 1024, MMA_PART_FLOATS = 4 * MMA_WARPS * WARP * 16 };
static size_t mma_split_bytes(void) { return (size_t)MMA_SPLIT_TILES * (MMA_PART_FLOATS * sizeof(float) + sizeof(unsigned)); }
// A split block's sums of its slot s (acc[0], accm[0]) into the part of its (tile, row block) `at`;
// the last of the sp.split blocks to finish (last_block) gets every slot's back, slot k in acc[k],
// and goes on to fold them (true); the others are done (false). Every thread of the block calls it.
// A part is [slot][quarter q][thread] 4 floats (q: acc cells 0-3, 4-7, then accm's), so that each
// 16-byte load or store of a warp takes 512 consecutive bytes.
__device__ F4 *split_part(const MmaSplit &sp, size_t at, int s, int q) { return (F4 *)sp.part + ((at * sp.split + s) * 4 + q) * blockDim.x + threadIdx.x; }
__device__ bool split_gather(const MmaSplit &sp, size_t at, int s, float acc[4][8], float accm[4][8]) {
#pragma unroll
    for (int q = 0; q < 4; q++) {
        const float *src = q < 2 ? acc[0] : accm[0];
        *split_part(sp, at, s, q) = F4{{src[4 * (q % 2)], src[4 * (q % 2) + 1], src[4 * (q % 2) + 2], src[4 * (q % 2) + 3]}};
    }
    if (!last_block(sp.count + at, (unsigned)sp.split)) return false;
#pragma unroll
    for (int k = 0; k < 4; k++)   // (constant indices: acc stays in registers)
#pragma unroll
        for (int q = 0; q < 4; q++) {
            if (k >= sp.split) continue;
            F4 v = load_vec<F4>(split_part(sp, at, k, q));
            for (int i = 0; i < 4; i++) (q < 2 ? acc[k] : accm[k])[4 * (q % 2) + i] = v.v[i];
        }
    return true;
}

enum { MMA_BLOCKS_PER_SM = 12 / MMA_WARPS };
// (Both tensor-core kernels are bounded to 170 registers, 12 warps an SM (MMA_BLOCKS_PER_SM blocks):
// left alone, ptxas gives them 178-220, and none of them spills under the bound; with rows of 2048
// values the shared memory holds three blocks an SM anyway. At 16 warps, 128 registers, they spill.)
// y[out[r]][o] = W_e[o] . x[act[r]] for block y's tile (tile_rows: of the n rows, ids NULL; or of the
// n pairs of experts ids, the stacked matrices of L; then rd's blocks): matmul's, and matmul_id's
// (matvec_kernel's) bits. sp.split > 1 (ids NULL): grid x holds each row block's sp.split slots.
template <typename D>
__global__ void __launch_bounds__(MMA_WARPS * WARP, MMA_BLOCKS_PER_SM) matmul_mma_kernel(MatList L, const int *ids, int in_div, const uint8_t *x, size_t x_bytes, int n, int slots,
                                                                           MmaSplit sp, Rider rd) {
    DYNAMIC_SHARED(Vec16, tile);
    __shared__ TileRows tr;
    uint8_t *xs = (uint8_t *)tile;
    if (ridden(rd)) return;   // the whole block
    unsigned rb = blockIdx.x / sp.split, b0;   // the row block, and (split) its slot s
    int s = (int)(blockIdx.x % sp.split);
    Mat m;
    float *y;
    pick(L, rb, m, y, b0);
    if (!tile_rows(ids, n, in_div, tr)) return;   // the whole block
    if (tr.e >= 0) stage_tile<D>(x, x_bytes, (int)m.n_in, tr, xs, s, sp.split);
    __syncthreads();
    int64_t o0 = (int64_t)(rb - b0) * MMA_ROWS + 16 * (threadIdx.x / WARP);
    float acc[4][8] = {}, accm[4][8] = {}, v[8];   // [slot][cell]
    if (tr.e >= 0 && o0 < m.n_out)
        mma_rows<D>(expert(&m, tr.e), o0, xs, warp_stages<D>(xs, m.n_in), s, sp.split, sp.split > 1 ? 1 : slots, tr.R > MMA_M / 2, acc, accm);
    if (sp.split > 1 && !split_gather(sp, (size_t)blockIdx.y * L.first[L.n] + rb, s, acc, accm)) return;   // the whole block
    if (o0 >= m.n_out) return;   // the whole warp
    fold_cells<D>(acc, accm, slots, v);
    for (int c = 0; c < 8; c++) {
        int r = cell_tile_row(c);
        int64_t o = o0 + cell_weight_row(c);
        if (r < tr.R && o < m.n_out) y[(int64_t)tr.out[r] * m.n_out + o] = v[c];
    }
}

// f(D()) for weight type t's dot type D (section 6's types)
template <typename F> static void by_type(uint32_t t, const char *what, F f) {
    switch (t) {
    case T_F32: f(DotF32()); break;
    case T_F16: f(DotHalf<false>()); break;
    case T_BF16: f(DotHalf<true>()); break;
    case T_Q8_0: f(DotQ8_0()); break;
    case T_Q4_0: f(DotQ4_0()); break;
    case T_Q4_K: f(DotK4<false>()); break;
    case T_Q5_K: f(DotK4<true>()); break;
    case T_Q6_K: f(DotQ6_K()); break;
    default: fprintf(stderr, "clover: error: %s: no kernel for weight type %u\n", what, t); exit(1);
    }
}

// rd's row blocks for a launch of blocks of `threads` threads
static Rider rider_layout(Rider rd, int threads) {
    for (int i = 0; i < rd.L.n; i++) rd.L.first[i + 1] = rd.L.first[i] + blocks_for(rd.L.m[i].n_out, threads / rd.lpr);
    return rd;
}

// The F32 matrices w[0..n-1] (n <= MAX_MATS, one row length) as riders reading the T float rows x
// (T <= MAX_ROWS), into y[i] ([T][n_out]); n = 0: none
static Rider riders(const Mat *const w[], int n, const float *x, float *const y[], int T) {
    Rider rd = {};
    rd.x = x, rd.L.n = n, rd.T = n ? T : 0, rd.lpr = n ? lanes_per_row(DotF32::LPB, units_of<DotF32>(w[0]->n_in)) : WARP;
    for (int i = 0; i < n; i++) {
        if (w[i]->type != T_F32 || w[i]->n_in != w[0]->n_in || T > MAX_ROWS) {
            fprintf(stderr, "clover: error: internal: riders of another type than F32, of different widths or of over %d rows\n", (int)MAX_ROWS);
            exit(1);
        }
        rd.L.m[i] = *w[i], rd.L.y[i] = y[i];
    }
    return rider_layout(rd, BLOCK);
}

// Whether matvec blocks may round an input row of n values to dot type dt themselves (block_input)
static bool rounds_in_block(uint32_t dt, int64_t n) { return dt != T_F32 && act_bytes(dt, n) <= MAX_ROUNDED; }

// Whether a batch's rows (T > 1) of weight type t and row length n go to the tensor cores: the type
// has a batch form (D::MMA), the rows are whole units, and a tile of rows with the weight stages
// fits in shared memory (rows of up to ~10,000 values)
static bool mma_batch(uint32_t t, int64_t n) {
    bool mma = false;
    by_type(t, "mma_batch", [&](auto d) {
        using D = decltype(d);
        if constexpr (D::MMA) mma = n % D::UNIT == 0 && mma_smem_bytes<D>(n) <= MMA_MAX_TILE;
    });
    return mma;
}

// The launch of mma kernel k (matmul_mma_kernel, swiglu_mma_kernel) for dot type D: MMA_WARPS warps
// a block, the tile of rows of n values and the weight stages in dynamic shared memory
// (mma_smem_bytes; past 48 KiB by k's opt-in, to MMA_MAX_TILE for every one of them alike)
template <typename D, typename... P> static cudaLaunchConfig_t mma_config(void (*k)(P...), dim3 grid, int64_t n) {
    CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, MMA_MAX_TILE));
    cudaLaunchConfig_t c = launch_config(grid, MMA_WARPS * WARP);
    c.dynamicSmemBytes = mma_smem_bytes<D>(n);
    return c;
}

// The split batches' partial sums and counts (MMA_SPLIT_TILES of each, made once by mma_split_init),
// and the SMs of the device, eight warps of the tensor-core kernels each
static MmaSplit mma_split_buf;
static int mma_sms;
static void mma_split_init(void) {
    if (mma_split_buf.part) return;
    cudaDeviceProp p;
    CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
    mma_sms = p.multiProcessorCount;
    mma_split_buf.part = (float *)dev_alloc((size_t)MMA_SPLIT_TILES * MMA_PART_FLOATS * sizeof(float));
    mma_split_buf.count = (unsigned *)dev_alloc(MMA_SPLIT_TILES * sizeof(unsigned));
    CUDA_CHECK(cudaMemset(mma_split_buf.count, 0, MMA_SPLIT_TILES * sizeof(unsigned)));
}

// How many blocks a tensor-core launch of `blocks` (tile, row block)s without expert ids gives each:
// its slots where the launch would not give every SM eight warps (and the parts fit), else 1
static int mma_split(const int *ids, int slots, unsigned blocks) {
    return !ids && slots > 1 && blocks * MMA_WARPS < 8u * (unsigned)mma_sms && blocks <= MMA_SPLIT_TILES ? slots : 1;
}

// The batch on the tensor cores (mma_batch): n rows (ids NULL: a grid row a tile of MMA_M) or n pairs
// of experts ids (a grid row a pair, which leads a tile or not: tile_rows), for the matrices of L;
// rd: riders (rows of ids NULL). may_split (ids NULL): split by slot where the (tile, row block)s
// would not give every SM eight warps (MmaSplit); the same bits either way.
template <typename D>
static void matmul_mma_gpu(MatList L, const int *ids, int in_div, const uint8_t *x, size_t xb, int n, int lpr, Rider rd, bool may_split) {
    if constexpr (D::MMA) {
        for (int i = 0; i < L.n; i++) L.first[i + 1] = L.first[i] + blocks_for(L.m[i].n_out, MMA_ROWS);
        rd = rider_layout(rd, MMA_WARPS * WARP);
        unsigned tiles = ids ? (unsigned)n : blocks_for(n, MMA_M), blocks = L.first[L.n] * tiles;
        int slots = lpr / D::LPB;
        MmaSplit sp = mma_split_buf;
        sp.split = may_split ? mma_split(ids, slots, blocks) : 1;
        dim3 grid(L.first[L.n] * sp.split + rider_blocks(rd), tiles);
        cudaLaunchConfig_t c = mma_config<D>(matmul_mma_kernel<D>, grid, L.m[0].n_in);
        CUDA_CHECK(cudaLaunchKernelEx(&c, matmul_mma_kernel<D>, L, ids, in_div, x, xb, n, slots, sp, rd));
    }
}

// y_i[t][o] = W_i x_t for n <= MAX_MATS matrices of one type and row length and T activation rows already rounded to their dot type
// (quantize_row_gpu), in one launch: one row (a decode step) by matvec_kernel, more by
// matmul_mma_kernel (K-quants) or matmul_kernel; the same bits for a row either way. xq NULL (T = 1, rounds_in_block): the float row xf, which each
// block rounds itself. rd: F32 riders of the same T rows (riders(..., 0, ...): none). rs (not NULL; T =
// 1, one matrix, no riders): the residual step after it, by the same launch. Twin: matmul with
// dot_fn(wtype, false), for each W_i.
static void matmuls_gpu(const Mat *const w[], int n, const void *xq, const float *xf, int T, float *const y[], Rider rd, const Residual *rs = nullptr) {
    uint32_t dt = dot_type(w[0]->type);
    size_t xb = act_bytes(dt, w[0]->n_in);
    const uint8_t *x = (const uint8_t *)xq;
    if ((!x && !rounds_in_block(dt, w[0]->n_in)) || (T != 1 && !x) || (rd.L.n && rd.T != T) || (rs && (T != 1 || n != 1 || rd.L.n))) {
        fprintf(stderr, "clover: error: internal: matmuls_gpu of unrounded rows, of riders of other rows, or a residual step after a batch\n");
        exit(1);
    }
    by_type(w[0]->type, "matmul_gpu", [&](auto d) {
        using D = decltype(d);
        int lpr = lanes_per_row(D::LPB, units_of<D>(w[0]->n_in));
        MatList L = {};
        L.n = n;
        for (int i = 0; i < n; i++) {
            if (w[i]->type != w[0]->type || w[i]->n_in != w[0]->n_in) {
                fprintf(stderr, "clover: error: internal: matmuls_gpu of matrices of different types or widths\n");
                exit(1);
            }
            L.m[i] = *w[i], L.y[i] = y[i];
            L.first[i + 1] = L.first[i] + blocks_for(w[i]->n_out, BLOCK / lpr);
        }
        if (T == 1) {
            cudaLaunchConfig_t c = launch_config(L.first[n] + rider_blocks(rd), BLOCK);
            CUDA_CHECK(cudaLaunchKernelEx(&c, matvec_kernel<D>, L, (const int *)nullptr, x, xb, xf, dt, 1, lpr, rd, rs ? *rs : Residual{}));
        } else if (mma_batch(w[0]->type, w[0]->n_in)) {
            matmul_mma_gpu<D>(L, nullptr, 1, x, xb, T, lpr, rd, true);
        } else {
            cudaLaunchConfig_t c = launch_config(dim3(L.first[n] + rider_blocks(rd), blocks_for(T, MAX_ROWS)), BLOCK);
            CUDA_CHECK(cudaLaunchKernelEx(&c, matmul_kernel<D>, L, x, xb, T, lpr, rd));
        }
    });
}

// y[t][o] = W x_t for one matrix
static void matmul_gpu(const Mat *w, const void *xq, int T, float *y) { matmuls_gpu(&w, 1, xq, nullptr, T, &y, Rider{}); }

// y[p] = W_{ids[p]} xq[p / in_div] for n_pairs pairs (see matvec_kernel); in_div: n_used for gate/up
// (pair t*n_used + r reads row t), 1 for down. W: the stacked [n_expert][n_out][n_in] experts. xq
// NULL (rounds_in_block): the float rows xf, each block rounding the row it reads. batch: the pairs
// of a batch (T > 1), which go to the tensor cores where they can (mma_batch, rounded rows, at most
// MMA_MAX_PAIRS), an expert's weights read once for its pairs; else a job a pair. The same bits.
static void matmul_id_gpu(const Mat *w, const int *ids, int n_pairs, int in_div, bool batch, const void *xq, const float *xf, float *y) {
    uint32_t dt = dot_type(w->type);
    size_t xb = act_bytes(dt, w->n_in);
    const uint8_t *x = (const uint8_t *)xq;
    by_type(w->type, "matmul_id_gpu", [&](auto d) {
        using D = decltype(d);
        int lpr = lanes_per_row(D::LPB, units_of<D>(w->n_in));
        MatList L = {};
        L.n = 1, L.m[0] = *w, L.y[0] = y;
        if (batch && x && n_pairs <= MMA_MAX_PAIRS && mma_batch(w->type, w->n_in)) {
            matmul_mma_gpu<D>(L, ids, in_div, x, xb, n_pairs, lpr, Rider{}, false);
            return;
        }
        L.first[1] = blocks_for(w->n_out, BLOCK / lpr);
        cudaLaunchConfig_t c = launch_config(L.first[1] * (unsigned)n_pairs, BLOCK);
        CUDA_CHECK(cudaLaunchKernelEx(&c, matvec_kernel<D>, L, ids, x, xb, xf, dt, in_div, lpr, Rider{}, Residual{}));
    });
}

// ================================================================================================
// 7. The other ops, one row per block of BLOCK threads unless said otherwise
// ================================================================================================
// The squares of a row's n values (rounded to float, as on the CPU) summed in double in the order of a
// block of ROW_BLOCK threads whatever the block's size (a multiple of 32 that divides ROW_BLOCK), so that
// a row normed by a matvec launch's last block (Residual) gets the bits a launch of its own gives it:
// virtual thread v (thread v % blockDim.x) takes the quads of elements 4v..4v+3, 4(v+ROW_BLOCK).., ...
// (16-byte loads: n % 4 == 0 for every row the device normalizes, n_embd by upload_weights' rule and
// the head dim by attention_gpu's), each virtual warp's 32 sums added by xor butterfly, then the 32
// warps' sums likewise (block_sum's order at ROW_BLOCK threads). Every thread gets the sum.
__device__ double sum_squares_row(const float *xr, int n) {
    __shared__ double part[ROW_BLOCK / WARP];
    for (int v = threadIdx.x; v < ROW_BLOCK; v += blockDim.x) {   // (the whole warp)
        double ss = 0;
        for (int i = 4 * v; i < n; i += 4 * ROW_BLOCK) {
            F4 q = load_vec<F4>(xr + i);
            for (int k = 0; k < 4; k++) ss += (double)(q.v[k] * q.v[k]);
        }
        ss = warp_sum(ss);
        if (v % WARP == 0) part[v / WARP] = ss;
    }
    __syncthreads();
    double s = warp_sum(part[threadIdx.x % WARP]);
    __syncthreads();   // part[] is reused by the next call
    return s;
}

// Twin: rmsnorm. y = x / sqrt(mean(x^2) + eps) * w, the squares summed by sum_squares_row. One row xr
// by the block; yr may be xr.
__device__ void rmsnorm_block(float *yr, const float *xr, const float *w, int n, float eps) {
    double ss = sum_squares_row(xr, n);
    float scale = 1.0f / sqrtf((float)(ss / n) + eps);
    for (int i = 4 * threadIdx.x; i < n; i += 4 * blockDim.x) {
        F4 v = load_vec<F4>(xr + i), g = load_vec<F4>(w + i);
        for (int k = 0; k < 4; k++) v.v[k] = v.v[k] * scale * g.v[k];
        *(F4 *)(yr + i) = v;
    }
}

// Twin: l2norm. x = x / max(||x||, eps), the squares summed in double (block_sum).
__global__ void l2norm_kernel(float *x, int n, float eps) {
    float *xr = x + (int64_t)blockIdx.x * n;
    double ss = 0;
    for (int i = threadIdx.x; i < n; i += BLOCK) ss += (double)(xr[i] * xr[i]);
    ss = block_sum(ss);
    float scale = 1.0f / fmaxf(sqrtf((float)ss), eps);
    for (int i = threadIdx.x; i < n; i += BLOCK) xr[i] *= scale;
}

static void l2norm_gpu(float *x, int n, float eps, int T) {
    cudaLaunchConfig_t c = launch_config((unsigned)T, BLOCK);
    CUDA_CHECK(cudaLaunchKernelEx(&c, l2norm_kernel, x, n, eps));
}

// cos and sin of a float angle (|th| < 2^30), each rounded once from a double good to ~1e-16: th
// reduced by the nearest multiple k of pi/2 in two fused steps (pi/2 as a double plus its remainder),
// then the Taylor series to degree 16 on |r| <= pi/4 and the quadrant k mod 4. (The device's cosf and
// sinf keep a local-memory table for large angles, positions past 105,615: this has no stack frame.)
__device__ void cos_sin(float th, float *cs, float *sn) {
    double k = rint((double)th * 0x1.45f306dc9c883p-1), r = fma(-k, 0x1.921fb54442d18p0, (double)th);   // 2/pi; pi/2
    r = fma(-k, 0x1.1a62633145c07p-54, r);                                                                // pi/2 - its double
    double r2 = r * r, sr = 0, cr = 0;
    for (int j = 8; j >= 1; j--) {   // sin r = r sum_j (-r^2)^j / (2j+1)!,  cos r = sum_j (-r^2)^j / (2j)!
        sr = (sr + 1) * (-r2 / ((2 * j) * (2 * j + 1)));
        cr = (cr + 1) * (-r2 / ((2 * j - 1) * (2 * j)));
    }
    double sv = r * (sr + 1), cv = cr + 1;
    int q = (int)((int64_t)k & 3);
    *sn = (float)(q == 0 ? sv : q == 1 ? cv : q == 2 ? -sv : -cv);
    *cs = (float)(q == 0 ? cv : q == 1 ? -sv : q == 2 ? -cv : sv);
}

// Twin: rope. NEOX rotation of the first n_rot dims of head xh at position p: pair (i, i + n_rot/2)
// turns by theta_i = p * s^i, s = base^(-2/n_rot) computed on the host with the CPU's powf, and
// theta_i by i repeated float multiplications as on the CPU (so the angles are the same bits); then
// x_i' = fma(x_i, cos, -(x_j sin)), x_j' = fma(x_i, sin, x_j cos). Only cos and sin differ from the
// CPU's libm (cos_sin: rounded once from double). By the block, thread i < n_rot/2 turning pair i.
__device__ void rope_block(float *xh, int n_rot, int p, float theta_scale) {
    int i = threadIdx.x, half = n_rot / 2;
    if (i >= half) return;
    float th = (float)p, cs, sn;
    for (int k = 0; k < i; k++) th *= theta_scale;
    cos_sin(th, &cs, &sn);
    float x0 = xh[i], x1 = xh[i + half];
    xh[i] = fmaf(x0, cs, -(x1 * sn));
    xh[i + half] = fmaf(x0, sn, x1 * cs);
}

// clover.c's expf_ggml (ggml_v_expf): 2^n p(b), n = round(x / ln 2), b = x - n ln 2 in two fused
// steps, p of degree 5. The same operations, so the same bits.
__host__ __device__ float expf_ggml(float x) {
    const float r = 0x1.8p23f;
    float n = fmaf(x, 0x1.715476p+0f, r) - r;
    float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
    if (!(fabsf(n) <= 192)) return n <= 0 ? 0.0f : x + INFINITY;
    float u = b * b;
    float p = fmaf(fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)), u,
                   fmaf(0x1.ffffecp-1f, b, 1.0f));
    return ldexpf(p, (int)n);
}

// Twin: softmax (the plain one; softmax_avx2 computes the same bits). Per row: m = max x;
// e_i = exp(x_i - m), expf_ggml on whole groups of 16 (each group folded by halving in float, as
// the CPU does), libm expf on the tail; sum of the group sums and tail in double; x_i = e_i * (1/sum).
// Thread k takes groups k, k+BLOCK, ...; the max is order-free; only the double sum's order differs.
// One row xr by the block.
__device__ void softmax_block(float *xr, int n) {
    __shared__ float part[BLOCK / WARP];
    float m = -INFINITY;
    for (int i = threadIdx.x; i < n; i += BLOCK)
        if (xr[i] > m) m = xr[i];
    for (int o = 16; o >= 1; o /= 2) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, o);
        if (m2 > m) m = m2;
    }
    if (threadIdx.x % WARP == 0) part[threadIdx.x / WARP] = m;
    __syncthreads();
    m = part[0];
    for (int w = 1; w < BLOCK / WARP; w++)
        if (part[w] > m) m = part[w];
    int groups = n / 16;
    double sum = 0;
    for (int g = threadIdx.x; g < groups; g += BLOCK) {
        float e[16];
        for (int l = 0; l < 16; l++) e[l] = xr[16 * g + l] = expf_ggml(xr[16 * g + l] - m);
        for (int w = 8; w >= 1; w /= 2)
            for (int l = 0; l < w; l++) e[l] += e[l + w];
        sum += e[0];
    }
    for (int i = 16 * groups + threadIdx.x; i < n; i += BLOCK) {
        xr[i] = expf(xr[i] - m);
        sum += xr[i];
    }
    sum = block_sum(sum);
    float inv = (float)(1.0 / sum);
    for (int i = threadIdx.x; i < n; i += BLOCK) xr[i] *= inv;
}

__global__ void softmax_kernel(float *x, int n) { softmax_block(x + (int64_t)blockIdx.x * n, n); }

static void softmax_gpu(float *x, int n, int T) {
    cudaLaunchConfig_t c = launch_config((unsigned)T, BLOCK);
    CUDA_CHECK(cudaLaunchKernelEx(&c, softmax_kernel, x, n));
}

// Twin: silu. x / (1 + expf_ggml(-x))
__host__ __device__ float silu(float x) { return x / (1.0f + expf_ggml(-x)); }

// Twin: sigmoid. 1 / (1 + expf(-x)), libm's expf (the device's may differ from glibc's in the last bit)
__host__ __device__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// Twin: silu_row. y_i = silu(x_i); y may be x. One element per thread.
__global__ void silu_row_kernel(float *y, const float *x, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * BLOCK + threadIdx.x;
    if (i < n) y[i] = silu(x[i]);
}

static void silu_row_gpu(float *y, const float *x, int64_t n) {
    cudaLaunchConfig_t c = launch_config(blocks_for(n, BLOCK), BLOCK);
    CUDA_CHECK(cudaLaunchKernelEx(&c, silu_row_kernel, y, x, n));
}

// Twin: argmax. The first index of the largest value, as the CPU's loop `if (x[i] > x[best])`
// from best = 0 finds it: a NaN is never taken, except that x[0] = NaN makes the answer 0. Thread k
// scans k, k+BLOCK, ... then (value, index) pairs are folded, the larger value or the lower index.
__global__ void argmax_kernel(const float *x, int n, int *out) {
    __shared__ float pv[BLOCK / WARP];
    __shared__ int pi[BLOCK / WARP];
    const float *xr = x + (int64_t)blockIdx.x * n;
    float v = -INFINITY;
    int at = n;   // n: nothing above -inf yet
    for (int i = threadIdx.x; i < n; i += BLOCK)
        if (xr[i] > v) v = xr[i], at = i;
    for (int o = 16; o >= 1; o /= 2) {
        float v2 = __shfl_xor_sync(0xffffffffu, v, o);
        int at2 = __shfl_xor_sync(0xffffffffu, at, o);
        if (v2 > v || (v2 == v && at2 < at)) v = v2, at = at2;
    }
    if (threadIdx.x % WARP == 0) pv[threadIdx.x / WARP] = v, pi[threadIdx.x / WARP] = at;
    __syncthreads();
    if (threadIdx.x != 0) return;
    for (int w = 1; w < BLOCK / WARP; w++)
        if (pv[w] > v || (pv[w] == v && pi[w] < at)) v = pv[w], at = pi[w];
    out[blockIdx.x] = (at == n || xr[0] != xr[0]) ? 0 : at;
}

static void argmax_gpu(const float *x, int n, int T, int *out) {
    cudaLaunchConfig_t c = launch_config((unsigned)T, BLOCK);
    CUDA_CHECK(cudaLaunchKernelEx(&c, argmax_kernel, x, n, out));
}

// Twin: best_token. A drafter's candidate from row z of logits: the first index of the largest value
// other than `skip` (argmax's rule, from skip == 0 ? 1 : 0), its probability and the distribution's
// entropy, p = exp(z_best - max) / S and H = log S - sum_i e_i (z_i - max) / S with S = sum_i e_i,
// e_i = exp(z_i - max), in double as the CPU's. Thread k takes i = k, k + BLOCK, ... and the sums
// are folded as block_sum does, so p and H are the CPU's to a few ulps (another order), the id
// exactly. A block a row; a preview's 16 rows then cross the bus as 16 ids and 32 floats instead of
// 16 rows of n_vocab floats (~16 MB, ~0.6 ms over PCIe).
__global__ void best_token_kernel(const float *x, int n, int skip, int *id, float *p, float *H) {
    __shared__ float pv[BLOCK / WARP], pm[BLOCK / WARP];
    __shared__ int pi[BLOCK / WARP];
    __shared__ float top[2];   // the row's max and the best value
    __shared__ int best;
    const float *z = x + (int64_t)blockIdx.x * n;
    int first = skip == 0 ? 1 : 0, w = threadIdx.x / WARP;
    float v = -INFINITY, m = -INFINITY;
    int at = n;   // n: nothing above -inf yet
    for (int i = threadIdx.x; i < n; i += BLOCK) {
        m = fmaxf(m, z[i]);
        if (i != skip && z[i] > v) v = z[i], at = i;
    }
    for (int o = 16; o >= 1; o /= 2) {
        float v2 = __shfl_xor_sync(0xffffffffu, v, o), m2 = __shfl_xor_sync(0xffffffffu, m, o);
        int at2 = __shfl_xor_sync(0xffffffffu, at, o);
        if (v2 > v || (v2 == v && at2 < at)) v = v2, at = at2;
        m = fmaxf(m, m2);
    }
    if (threadIdx.x % WARP == 0) pv[w] = v, pi[w] = at, pm[w] = m;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int k = 1; k < BLOCK / WARP; k++) {
            if (pv[k] > v || (pv[k] == v && pi[k] < at)) v = pv[k], at = pi[k];
            m = fmaxf(m, pm[k]);
        }
        best = (at == n || z[first] != z[first]) ? first : at;
        top[0] = m, top[1] = z[best];
    }
    __syncthreads();
    double S = 0, Sz = 0, max = top[0];
    for (int i = threadIdx.x; i < n; i += BLOCK) {
        double e = exp((double)z[i] - max);
        S += e;
        Sz += e * ((double)z[i] - max);
    }
    S = block_sum(S), Sz = block_sum(Sz);
    if (threadIdx.x) return;
    id[blockIdx.x] = best;
    p[blockIdx.x] = (float)(exp((double)top[1] - max) / S);
    H[blockIdx.x] = (float)(log(S) - Sz / S);
}

static void best_token_gpu(const float *x, int n, int T, int skip, int *id, float *p, float *H) {
    cudaLaunchConfig_t c = launch_config((unsigned)T, BLOCK);
    CUDA_CHECK(cudaLaunchKernelEx(&c, best_token_kernel, x, n, skip, id, p, H));
}

// The residual stream's step after a mixer (add_norm) or an FFN (moe_out), and the next norm and its
// rounding, in one pass over each row t, by one block (a launch of its own, residual_kernel: a block
// of ROW_BLOCK a row; or, in a decode step, the last block of the matvec launch that makes the
// mixer's or the shared expert's row: struct Residual, section 6). Each thread takes 4 consecutive
// values at a time (16-byte loads: n % 4 == 0, rows 16-byte aligned), a single block being a decode
// step's whole grid, where the loads a thread issues in turn are its time:
//   add_norm (sel NULL):  x_t += mix_t (mix NULL: nothing added; the CPU's loop x[i] += mix[i])
//   moe_out (sel not NULL, K ranks a row):
//     moe_i = sum_r (wr[t][r] * ye[t*K + r][i]) in rank order, each term rounded to float before it is
//             added, ranks with sel[t][r] < 0 adding nothing (twin moe_sum: the CPU's order exactly);
//     ffn_i = moe_i + sh_i * sigmoid(sh_logit_t) (twin moe_shared_gate);  x_i += ffn_i;
//     moe and ffn stay in mix and sh (the dumps ffn_moe_out, ffn_out); the row's K weights and which
//     ranks are used are read once into shared memory;
// then xn_t = rmsnorm(x_t) w (the next layer's attn_norm, the FFN's post norm, or the output norm),
// rounded to dt into xq and, xq2 not NULL, to dt2 into xq2 (the FFN's input for a shared expert of
// another type than the experts, in a batch on the tensor cores: no launch of its own).
__device__ void residual_row(const Residual &r, int64_t t) {
    __shared__ float wk[MAX_USED];
    __shared__ bool used[MAX_USED];
    int n = r.n;
    float *xr = r.x + t * n;
    if (r.sel) {
        for (int k = threadIdx.x; k < r.K; k += blockDim.x) used[k] = r.sel[t * r.K + k] >= 0, wk[k] = r.wr[t * r.K + k];
        __syncthreads();
        float gate = sigmoid(r.sh_logit[t]);
        for (int i = 4 * threadIdx.x; i < n; i += 4 * blockDim.x) {
            F4 o = {{0, 0, 0, 0}}, s4 = load_vec<F4>(r.sh + t * n + i), x4 = load_vec<F4>(xr + i);
            for (int k = 0; k < r.K; k++) {
                if (!used[k]) continue;
                F4 y = load_vec<F4>(r.ye + (t * r.K + k) * n + i);
                for (int e = 0; e < 4; e++) {
                    float term = y.v[e] * wk[k];   // rounded, then added
                    o.v[e] += term;
                }
            }
            *(F4 *)(r.mix + t * n + i) = o;
            for (int e = 0; e < 4; e++) {
                float term = s4.v[e] * gate;
                o.v[e] += term;
                x4.v[e] += o.v[e];
            }
            *(F4 *)(r.sh + t * n + i) = o;
            *(F4 *)(xr + i) = x4;
        }
    } else if (r.mix)
        for (int i = 4 * threadIdx.x; i < n; i += 4 * blockDim.x) {
            F4 a = load_vec<F4>(xr + i), b = load_vec<F4>(r.mix + t * n + i);
            for (int e = 0; e < 4; e++) a.v[e] += b.v[e];
            *(F4 *)(xr + i) = a;
        }
    __syncthreads();   // the norm's threads read other values of x than they wrote
    rmsnorm_block(r.xn + t * n, xr, r.w, n, r.eps);
    for (int k = 0; k < (r.xq2 ? 2 : 1); k++)   // (one call: two would not be inlined, and take a stack frame)
        round_row_block(r.xn + t * n, n, k ? r.dt2 : r.dt, k ? r.xq2 + t * r.xq2_bytes : r.xq + t * r.xq_bytes);
}

__global__ void __launch_bounds__(ROW_BLOCK) residual_kernel(Residual r) { residual_row(r, blockIdx.x); }

// what residual_row can take: K <= MAX_USED ranks, rows of a multiple of 4
static void check_residual(const Residual &r) {
    if (r.K > MAX_USED || r.n % 4) {
        fprintf(stderr, "clover: error: residual step: %d experts used or a row of %d, over %d or not a multiple of 4\n", r.K, r.n, MAX_USED);
        exit(1);
    }
}

// r for T rows, a launch of its own
static void residual_gpu(const Residual &r, int T) {
    check_residual(r);
    cudaLaunchConfig_t c = launch_config((unsigned)T, ROW_BLOCK);
    CUDA_CHECK(cudaLaunchKernelEx(&c, residual_kernel, r));
}

// x += mix (mix may be NULL), xn = rmsnorm(x) w, and xq = xn rounded for weights of type wtype, rows of
// n (xq rows act_bytes(dot_type(wtype), n) apart); for F32 dot types xq is not written. xq2 (not
// NULL): xn rounded for weights of type wtype2 too.
static Residual add_norm_step(float *x, float *mix, const float *w, int n, float eps, uint32_t wtype, float *xn, void *xq, uint32_t wtype2 = T_F32,
                              void *xq2 = nullptr) {
    uint32_t dt = dot_type(wtype), dt2 = dot_type(wtype2);
    Residual r = {};
    r.x = x, r.mix = mix, r.w = w, r.n = n, r.eps = eps, r.xn = xn;
    r.dt = dt, r.xq = (uint8_t *)xq, r.xq_bytes = act_bytes(dt, n);
    r.dt2 = dt2, r.xq2 = dt2 == T_F32 ? nullptr : (uint8_t *)xq2, r.xq2_bytes = act_bytes(dt2, n);
    return r;
}

static void add_norm_gpu(float *x, float *mix, const float *w, int n, float eps, uint32_t wtype, float *xn, void *xq, int T, uint32_t wtype2 = T_F32,
                         void *xq2 = nullptr) {
    residual_gpu(add_norm_step(x, mix, w, n, eps, wtype, xn, xq, wtype2, xq2), T);
}

// ================================================================================================
// 8. Gated DeltaNet (clover.c section 9, "Gated DeltaNet")
// ================================================================================================
// Every op is a plain port of its CPU twin; the rows of a batch stay in order where the recurrence
// needs it (delta_rule, ring_push) and are independent otherwise. Layouts are clover.c's Scratch /
// State: post-conv rows [T][conv_dim] = [q | k | v], gates [T][n_v_heads], S [n_v_heads][d*d]
// transposed (S + h*d*d + j*d holds column j of S_h: a column is contiguous).

__host__ __device__ float softplus(float x) { return x > 20.0f ? x : logf(1.0f + expf(x)); }

// Twin: gdn_gates. Per (row t, value head h), i = t*H + h: beta_i = sigmoid(beta_logit_i),
// g_i = softplus(alpha_i + dt_h) * a_h (a < 0: g is a log-decay). The device's expf / logf may
// differ from libm's in the last bits. The gates of a pass: its inputs (a, dt per head; alpha,
// beta_logit per row and head) and outputs (g, beta), computed by gdn_conv_kernel on the way (the
// forward scan's) or by gdn_gates_kernel (the preview's reverse scan's).
struct Gates { const float *a, *dt, *alpha, *beta_logit; float *g, *beta; int H; };

__device__ void gate_element(const Gates &gt, int64_t i) {
    int h = (int)(i % gt.H);
    gt.beta[i] = sigmoid(gt.beta_logit[i]);
    gt.g[i] = softplus(gt.alpha[i] + gt.dt[h]) * gt.a[h];
}

// One element per thread
__global__ void gdn_gates_kernel(Gates gt, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * BLOCK + threadIdx.x;
    if (i < n) gate_element(gt, i);
}

static void gdn_gates_gpu(const float *a, const float *dt, const float *alpha, const float *beta_logit, int T, int H, float *g, float *beta) {
    int64_t n = (int64_t)T * H;
    cudaLaunchConfig_t c = launch_config(blocks_for(n, BLOCK), BLOCK);
    CUDA_CHECK(cudaLaunchKernelEx(&c, gdn_gates_kernel, Gates{a, dt, alpha, beta_logit, g, beta, H}, n));
}

enum { MAX_CONV = 8 };   // d_conv, the conv's taps: a window of X rows in registers

// Twins: gdn_conv (gdn_conv_avx2: the same bits), gdn_conv_right (the preview's right taps, where wr
// is not NULL), gdn_qk_norm, and where asked gdn_ring_push (push) and gdn_gates (gt not NULL), in one
// launch. Block b: head block b of d <= BLOCK channels, thread i its channel c = b*d + i, the rows t
// in order, the window of X = [ring | u] (the ring's K-1 rows, oldest first, then the T rows u) that
// row t reads, X[t .. t+K-1][c], in registers:
//   y_t[c] = sum_j wc[c][j] X[t+j][c]                     fmaf in j order from 0, as the CPU
//   y_t[c] += sum_{e=1..K-1, t+e<T} wr[c][e-1] u_{t+e}[c]  e in order, a product then a sum each
//   y_t[c] = silu(y_t[c]);  for the q and k heads (b < n_qk): y <- y / max(||y||, eps)
// the squares summed in double by block_sum (only that order differs from the CPU's). raw
// (--dump-tensors' conv_output_raw): y_t[c] the sums alone, before the SiLU and the norms. push:
// then the ring becomes X's last K-1 rows, the window left after row T-1, by the thread that read
// the channel (no race: a channel is one thread's). gt: the T x H gates too, by the blocks' threads
// in turn (they read nothing of the conv's). Fusing these saves two launches a layer and step.
__global__ void gdn_conv_kernel(const float *wc, const float *wr, int K, int C, float *ring, const float *u, int T, int d, int n_qk, float eps,
                                bool raw, bool push, float *y, Gates gt) {
    int b = blockIdx.x, i = threadIdx.x, c = b * d + i, R = K - 1;
    bool on = i < d;
    if (gt.g)
        for (int64_t e = (int64_t)b * BLOCK + i; e < (int64_t)T * gt.H; e += (int64_t)gridDim.x * BLOCK) gate_element(gt, e);
    float win[MAX_CONV], w[MAX_CONV], w_right[MAX_CONV];   // win[j] = X[t + j][c] for the row t at hand; the channel's taps, read once
#pragma unroll
    for (int j = 0; j < MAX_CONV; j++) {
        win[j] = on && j < R ? ring[(int64_t)j * C + c] : 0;
        w[j] = on && j < K ? wc[(int64_t)c * K + j] : 0, w_right[j] = wr && on && j < R ? wr[(int64_t)c * R + j] : 0;
    }
    for (int t = 0; t < T; t++) {
#pragma unroll
        for (int j = 0; j < MAX_CONV; j++)
            if (j == R) win[j] = on ? u[(int64_t)t * C + c] : 0;   // X row t + R
        float s = 0;
#pragma unroll
        for (int j = 0; j < MAX_CONV; j++)
            if (j < K) s = fmaf(win[j], w[j], s);
        if (wr && on)
#pragma unroll
            for (int e = 1; e < MAX_CONV; e++)
                if (e <= R && t + e < T) s += w_right[e - 1] * u[(int64_t)(t + e) * C + c];
        float v = raw ? s : silu(s);
        if (!raw && b < n_qk) {   // the whole block: a q or k head
            double ss = block_sum(on ? (double)(v * v) : 0.0);
            v *= 1.0f / fmaxf(sqrtf((float)ss), eps);
        }
        if (on) y[(int64_t)t * C + c] = v;
#pragma unroll
        for (int j = 0; j + 1 < MAX_CONV; j++) win[j] = win[j + 1];
    }
    if (push && on)
#pragma unroll
        for (int r = 0; r < MAX_CONV; r++)   // (compile-time indices: win stays in registers)
            if (r < R) ring[(int64_t)r * C + c] = win[r];   // X rows T .. T+K-2
}

// T rows of C = C/d heads of d channels, the first n_qk heads q and k; wr NULL: no right taps; gt:
// the gates to compute on the way (g NULL: none)
static void gdn_conv_gpu(const float *wc, const float *wr, int K, int C, float *ring, const float *u, int T, int d, int n_qk, float eps,
                         bool raw, bool push, float *y, Gates gt) {
    if (K > MAX_CONV || d > BLOCK) {
        fprintf(stderr, "clover: error: gdn_conv_gpu: %d conv taps or state size %d, over %d or %d\n", K, d, MAX_CONV, BLOCK);
        exit(1);
    }
    cudaLaunchConfig_t c = launch_config((unsigned)(C / d), BLOCK);
    CUDA_CHECK(cudaLaunchKernelEx(&c, gdn_conv_kernel, wc, wr, K, C, ring, u, T, d, n_qk, eps, raw, push, y, gt));
}

// Twin: gdn_gated_norm, then quantize_row of its output for ssm_out. Per (row t, value head h):
// y_h = rmsnorm(o_h) * w * silu(z_h), w shared by all heads: rmsnorm's steps (the squares summed in
// double by the warp, in another order than the CPU's), then the product with silu (expf_ggml).
// gated_norm_head: one head by a warp.
__device__ void gated_norm_head(const float *oh, const float *zh, const float *w, int d, float eps, float *yh) {
    int lane = threadIdx.x % WARP;
    double ss = 0;
    for (int i = lane; i < d; i += WARP) ss += (double)(oh[i] * oh[i]);
    ss = warp_sum(ss);
    float scale = 1.0f / sqrtf((float)(ss / d) + eps);
    for (int i = lane; i < d; i += WARP) yh[i] = oh[i] * scale * w[i] * silu(zh[i]);
}

// The gated norm where the delta rule's launch does it (delta_rule_kernel): after its scan, the last
// block of each group of `group` value heads (whole blocks of the rounding's dot type dt; count: a
// last_block count a group) norms the group's heads of every row into y and rounds them into xq
// (rows xq_bytes apart). y NULL: none (the preview's reverse scan, whose mix comes first; a rollback).
struct GatedNorm { const float *z, *w; float eps; float *y; uint32_t dt; uint8_t *xq; size_t xq_bytes; unsigned *count; int group; };

// A block of ROW_BLOCK per row t, warp w taking heads w, w + 32, ...; then the row's y rounded to
// dot type dt (round_row_block; F32: none) into xq. (The preview's, after its reverse scan's mix.)
__global__ void __launch_bounds__(ROW_BLOCK) gdn_gated_norm_kernel(const float *o, const float *z, const float *w, int H, int d, float eps, float *y, uint32_t dt, uint8_t *xq,
                                      size_t xq_bytes) {
    int64_t t = blockIdx.x, row = t * H * d;
    for (int h = threadIdx.x / WARP; h < H; h += ROW_BLOCK / WARP) gated_norm_head(o + row + (int64_t)h * d, z + row + (int64_t)h * d, w, d, eps, y + row + (int64_t)h * d);
    round_row_block(y + row, H * d, dt, xq + t * xq_bytes);
}

// T rows of H heads of d; xq: y rounded for weights of type wtype (rows act_bytes apart)
static void gdn_gated_norm_gpu(const float *o, const float *z, const float *w, int T, int H, int d, float eps, float *y, uint32_t wtype, void *xq) {
    cudaLaunchConfig_t c = launch_config((unsigned)T, ROW_BLOCK);
    uint32_t dt = dot_type(wtype);
    CUDA_CHECK(cudaLaunchKernelEx(&c, gdn_gated_norm_kernel, o, z, w, H, d, eps, y, dt, (uint8_t *)xq, act_bytes(dt, (int64_t)H * d)));
}

// The gated norm for the delta rule's launch to do: heads in the fewest groups of whole rounding
// blocks (Q8_K's 256 values: two heads of 128), counts: a last_block count per group, zero
// (Scratch.counts)
static GatedNorm gated_norm_in_scan(const float *z, const float *w, float eps, float *y, uint32_t wtype, void *xq, unsigned *counts, int H, int d) {
    uint32_t dt = dot_type(wtype);
    int group = 1;
    while ((group * d) % round_block_values(dt) || H % group) group++;
    return GatedNorm{z, w, eps, y, dt, (uint8_t *)xq, act_bytes(dt, (int64_t)H * d), counts, group};
}

// The delta rule's lanes. dot_f32 (clover.c's dot_f32_row; dot_f32_avx2 gives the same bits) keeps
// 64 accumulators, slot s taking elements s, s+64, ... by fmaf, folds them by halving (a[s] +=
// a[s+32], then a[s] += a[s+16], ... a[0] += a[1]), then adds the tail past np = d & ~63 in order
// (product, then sum). A column of S goes to DR_R lanes: lane r of the column holds the slots s = r,
// r + DR_R, ... (DR_SLOTS of them) and their elements, so the halving steps down to a[s] += a[s +
// DR_R] stay in the lane and only the last three are shuffles (xor 4, 2, 1: a butterfly in the
// column's lanes, each of which gets the sum). A warp takes WARP / DR_R columns, a block DR_COLS.
// Lane r's elements, in its order i: element 64 (i / DR_SLOTS) + r + DR_R (i % DR_SLOTS) for i <
// np / DR_R, then the tail's np + r + DR_R a (a = i - np / DR_R < DR_SLOTS, as the tail is under 64);
// a place i whose element would be d or more holds none.
enum { MAX_DSTATE = 256, DR_R = 8, DR_SLOTS = 64 / DR_R, DR_EL = MAX_DSTATE / DR_R, DR_COLS = BLOCK / DR_R, DR_ROWS = 16 };
__host__ __device__ int dr_elements(int d) { return (d & ~63) / DR_R + ((d & 63) + DR_R - 1) / DR_R; }   // a lane's elements, at most
__host__ __device__ int dr_stride(int d) { return ((dr_elements(d) + 7) & ~7) + 4; }   // floats of a lane's k or q in shared memory (below)
__device__ int dr_element(int d, int r, int i) {   // lane r's element i
    int np = d & ~63;
    return i < np / DR_R ? 64 * (i / DR_SLOTS) + r + DR_R * (i % DR_SLOTS) : np + r + DR_R * (i - np / DR_R);
}
__device__ int dr_lane(int d, int e) { return e < (d & ~63) ? e % 64 % DR_R : (e - (d & ~63)) % DR_R; }   // element e's lane r
__device__ int dr_index(int d, int e) {   // and its place i there
    int np = d & ~63;
    return e < np ? e / 64 * DR_SLOTS + e % 64 / DR_R : np / DR_R + (e - np) / DR_R;
}

// Twin: dot_f32, from a column's lanes: a, lane r's slot sums (slots r, r + DR_R, ...) of the
// elements below np, folded; then p, the products of its tail elements (0 past d), added in order.
// Every lane of the column gets the sum.
__device__ float column_sum(float a[DR_SLOTS], const float p[DR_SLOTS], int d) {
#pragma unroll
    for (int w = DR_SLOTS / 2; w >= 1; w /= 2)
#pragma unroll
        for (int i = 0; i < w; i++) a[i] += a[i + w];
    float s = a[0];
    for (int o = DR_R / 2; o >= 1; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
    int np = d & ~63;
#pragma unroll
    for (int i = 0; i < DR_SLOTS; i++)   // element np + DR_R i + b, from lane b of the column
        for (int b = 0; b < DR_R && np + DR_R * i + b < d; b++) s += __shfl_sync(0xffffffffu, p[i], b, DR_R);
    return s;
}

// Twin: gdn_scan_head + delta_rule (delta_rule_avx2: the same bits). For value head h (q/k head
// kh = h % n_k_heads) and each row t in order (reverse: T-1 .. 0), on column j of S_h:
//   S_j <- exp(g) S_j;  delta_j = beta (v_j - S_j . k);  S_j <- S_j + k delta_j;  o_j = (S_j . q) / sqrt(d)
// Columns are independent: DR_R lanes a column j (column_sum), DR_COLS columns a block (grid heads x
// column blocks), the column in registers for all T rows (S_j = S + h*d*d + j*d: the block's columns
// come from S0 through shared memory by asynchronous copies, so that a decode step's read of S keeps
// its bytes in flight without registers; the column's lanes write 32 consecutive bytes). The block stages the q and k rows of its head in shared
// memory, DR_ROWS rows at a time, each lane's elements together (dr_stride floats a lane, padded so
// that the 16-byte loads of a column's 8 lanes fall in distinct banks): a lane reads its k and q in
// 16-byte loads, and v, g and beta from L1. The operations and dot orders are the CPU's; only
// expf(g) is the device's (it may differ from libm's in the last bits). The column is read from S0
// (NULL: a zero state) and written to S (NULL: not written): the preview scans from the committed
// state or from zero and keeps nothing, without a copy or a memset of its own. nm: then the gated
// norm of o and its rounding, by the last block of each group of heads (GatedNorm), a launch less a layer.
__global__ void __launch_bounds__(BLOCK) delta_rule_kernel(const float *S0, float *S, const float *y, const float *g, const float *beta, float *o,
                                                            int T, bool reverse, int H, int n_k_heads, int d, int C, int key_dim, int value_dim,
                                                            GatedNorm nm) {
    DYNAMIC_SHARED(F4, kq4);   // [DR_ROWS][q, k][DR_R][dr_stride(d)] floats (first the block's columns of S0, DR_COLS x d: fewer floats)
    float *kq = (float *)kq4;
    int cb = (d + DR_COLS - 1) / DR_COLS, h = blockIdx.x / cb, kh = h % n_k_heads, r = threadIdx.x % DR_R;
    int j0 = blockIdx.x % cb * DR_COLS, cols = d - j0 < DR_COLS ? d - j0 : DR_COLS, jj = j0 + threadIdx.x / DR_R;
    int j = jj < d ? jj : d - 1;   // (a column past d computes the last one, unwritten)
    bool on = jj < d;
    int main = (d & ~63) / DR_R, ls = dr_stride(d), row = 2 * DR_R * ls;   // (main: a multiple of DR_SLOTS)
    float scale = 1.0f / sqrtf((float)d), st[DR_EL];   // (a lane's places past its last element: dr_element(d, r, i) >= d, held at 0)
    int64_t at = ((int64_t)h * d + j) * d;
    if (S0) {   // the block's columns (contiguous) into shared memory by asynchronous copies: in flight without registers
        for (int x = threadIdx.x; x < cols * d / 4; x += blockDim.x) copy16_async(kq + 4 * x, (const uint8_t *)(S0 + ((int64_t)h * d + j0) * d + 4 * x));
        copies_commit();
        copies_wait<0>();
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < DR_EL; i++) {
        int e = dr_element(d, r, i);
        st[i] = S0 && e < d ? kq[(j - j0) * d + e] : 0;
    }
    for (int n0 = 0; n0 < T; n0 += DR_ROWS) {
        int rows = T - n0 < DR_ROWS ? T - n0 : DR_ROWS;
        __syncthreads();   // (the rows before are read)
        for (int x = threadIdx.x; x < rows * 2 * d; x += blockDim.x) {   // (row, q or k, element e): read in order, placed by lane
            int e = x % d, qk = x / d % 2, n = n0 + x / (2 * d), t = reverse ? T - 1 - n : n;
            kq[(n - n0) * row + (qk * DR_R + dr_lane(d, e)) * ls + dr_index(d, e)] = y[(int64_t)t * C + qk * key_dim + kh * d + e];
        }
        __syncthreads();
        for (int n = n0; n < n0 + rows; n++) {
            int t = reverse ? T - 1 - n : n;
            const float *qs = kq + (n - n0) * row + r * ls, *ks = qs + DR_R * ls;
            float decay = expf(g[(int64_t)t * H + h]), a[DR_SLOTS] = {}, p[DR_SLOTS] = {};
#pragma unroll
            for (int i = 0; i < DR_EL; i++) st[i] *= decay;
#pragma unroll
            for (int i = 0; i < DR_EL; i += 4)   // S_j . k
                if (i < main) {
                    F4 kv = load_vec<F4>(ks + i);
                    for (int e = 0; e < 4; e++) a[(i + e) % DR_SLOTS] = fmaf(st[i + e], kv.v[e], a[(i + e) % DR_SLOTS]);
                }
#pragma unroll
            for (int k = 0; k < DR_EL; k += DR_SLOTS)   // (the tail's places, main.., at compile-time indices)
                if (k == main)
#pragma unroll
                    for (int i = 0; i < DR_SLOTS && k + i < DR_EL; i++) p[i] = dr_element(d, r, k + i) < d ? st[k + i] * ks[k + i] : 0;
            float delta = (y[(int64_t)t * C + 2 * key_dim + h * d + j] - column_sum(a, p, d)) * beta[(int64_t)t * H + h];
            for (int i = 0; i < DR_SLOTS; i++) a[i] = 0;
#pragma unroll
            for (int i = 0; i < DR_EL; i += 4)   // S_j += k delta_j, then S_j . q
                if (i < main) {
                    F4 kv = load_vec<F4>(ks + i), qv = load_vec<F4>(qs + i);
                    for (int e = 0; e < 4; e++) {
                        st[i + e] = fmaf(kv.v[e], delta, st[i + e]);
                        a[(i + e) % DR_SLOTS] = fmaf(st[i + e], qv.v[e], a[(i + e) % DR_SLOTS]);
                    }
                }
#pragma unroll
            for (int k = 0; k < DR_EL; k += DR_SLOTS)
                if (k == main)
#pragma unroll
                    for (int i = 0; i < DR_SLOTS && k + i < DR_EL; i++) {
                        bool in = dr_element(d, r, k + i) < d;
                        st[k + i] = in ? fmaf(ks[k + i], delta, st[k + i]) : 0;
                        p[i] = in ? st[k + i] * qs[k + i] : 0;
                    }
            float out = column_sum(a, p, d) * scale;
            if (r == 0 && on) o[(int64_t)t * value_dim + h * d + j] = out;
        }
    }
#pragma unroll
    for (int i = 0; i < DR_EL; i++) {
        int e = dr_element(d, r, i);
        if (S && on && e < d) S[at + e] = st[i];
    }
    if (!nm.y || !last_block(nm.count + h / nm.group, (unsigned)(nm.group * cb))) return;
    int h0 = h / nm.group * nm.group;
    for (int i = threadIdx.x / WARP; i < T * nm.group; i += BLOCK / WARP) {   // (row t, head h0 + i % group)
        int64_t at = (int64_t)(i / nm.group) * value_dim + (int64_t)(h0 + i % nm.group) * d;
        gated_norm_head(o + at, nm.z + at, nm.w, d, nm.eps, nm.y + at);
    }
    for (int t = 0; t < T; t++) round_row_part(nm.y + (int64_t)t * value_dim, value_dim, nm.dt, nm.xq + t * nm.xq_bytes, h0 * d, (h0 + nm.group) * d);
}

static void delta_rule_gpu(const float *S0, float *S, const float *y, const float *g, const float *beta, float *o, int T, bool reverse, int H,
                           int n_k_heads, int d, int C, int key_dim, int value_dim, GatedNorm nm) {
    if (d > MAX_DSTATE || d % 4) {   // (whole 16-byte pieces of S a column)
        fprintf(stderr, "clover: error: delta_rule_gpu: state size %d is over %d or not a multiple of 4\n", d, MAX_DSTATE);
        exit(1);
    }
    cudaLaunchConfig_t c = launch_config((unsigned)(H * ((d + DR_COLS - 1) / DR_COLS)), BLOCK);
    c.dynamicSmemBytes = (size_t)DR_ROWS * 2 * DR_R * dr_stride(d) * sizeof(float);
    CUDA_CHECK(cudaLaunchKernelEx(&c, delta_rule_kernel, S0, S, y, g, beta, o, T, reverse, H, n_k_heads, d, C, key_dim, value_dim, nm));
}

// Twin: gdn_rev_mix (the preview's mix of its reverse scan): o[t][h*d+j] += gamma_h o_rev[t][h*d+j],
// a product then a sum. One element per thread.
__global__ void gdn_rev_mix_kernel(float *o, const float *o_rev, const float *gamma, int64_t n, int H, int d) {
    int64_t i = (int64_t)blockIdx.x * BLOCK + threadIdx.x;
    if (i < n) o[i] += gamma[(i / d) % H] * o_rev[i];
}

static void gdn_rev_mix_gpu(float *o, const float *o_rev, const float *gamma, int T, int H, int d) {
    int64_t n = (int64_t)T * H * d;
    cudaLaunchConfig_t c = launch_config(blocks_for(n, BLOCK), BLOCK);
    CUDA_CHECK(cudaLaunchKernelEx(&c, gdn_rev_mix_kernel, o, o_rev, gamma, n, H, d));
}

// ================================================================================================
// 9. Gated attention (clover.c section 9, "gated attention")
// ================================================================================================

// Twins: load_as, round_as. Element i of a cache row of type T_F32, T_F16 or T_BF16 as fp32 (exact),
// and x after a round trip through that type (store_as then load_as).
__device__ float load_as(uint32_t type, const void *src, int64_t i) {
    if (type == T_F32) return ((const float *)src)[i];
    if (type == T_F16) return fp16_to_fp32(((const uint16_t *)src)[i]);
    return bf16_to_fp32(((const uint16_t *)src)[i]);
}

__device__ float round_as(uint32_t type, float x) {
    if (type == T_F32) return x;
    return type == T_F16 ? fp16_to_fp32(fp32_to_fp16(x)) : bf16_to_fp32(fp32_to_bf16(x));
}

__host__ __device__ size_t cache_bytes(uint32_t type) { return type == T_F32 ? 4 : 2; }   // bytes of a cache value

// Twin: store_as, one value: copied for T_F32, rounded as quantize_row rounds for T_F16 / T_BF16
// (nearest even, quiet NaN kept)
__device__ void store_as(uint32_t type, uint8_t *dst, int64_t at, float x) {
    if (type == T_F32) ((float *)dst)[at] = x;
    else if (type == T_F16) ((uint16_t *)dst)[at] = fp32_to_fp16(x);
    else ((uint16_t *)dst)[at] = fp32_to_bf16(x);
}

// Twins: attn_qk_norm, attn_rope, store_as of the K and V rows, in one launch: block b of
// T * (n_head + 2 n_head_kv) takes row t = b / heads and one head of it:
//   q head i < n_head (in qg at stride 2*hd): q = rope(RMSNorm(q) * q_norm)
//   k head i - n_head (in kr):                k = rope(RMSNorm(k) * k_norm), then into the K cache row *pos + t
//   v head i - n_head - n_head_kv (in vr):    into the V cache row *pos + t
// (rmsnorm_block, rope_block, store_as; a barrier between steps that read other threads' values).
// q_normed, k_normed not NULL (--dump-tensors): the q and k heads before rope there too, as
// [T][n_head][hd] and [T][n_head_kv][hd].
__global__ void attn_prep_kernel(float *qg, float *kr, const float *vr, const float *q_norm, const float *k_norm, int n_head, int n_head_kv,
                                 int hd, float eps, int n_rot, const int *pos, float theta_scale, uint32_t k_type, uint8_t *K, uint32_t v_type,
                                 uint8_t *V, float *q_normed, float *k_normed) {
    int heads = n_head + 2 * n_head_kv, i = blockIdx.x % heads, kvd = n_head_kv * hd;
    int64_t t = blockIdx.x / heads, row = (int64_t)(*pos + t) * kvd;
    if (i >= n_head + n_head_kv) {
        int64_t at = (int64_t)(i - n_head - n_head_kv) * hd;
        for (int j = threadIdx.x; j < hd; j += BLOCK) store_as(v_type, V, row + at + j, vr[t * kvd + at + j]);
        return;
    }
    bool q = i < n_head;
    float *x = q ? qg + (t * n_head + i) * 2 * hd : kr + t * kvd + (int64_t)(i - n_head) * hd;
    rmsnorm_block(x, x, q ? q_norm : k_norm, hd, eps);
    __syncthreads();   // (each thread wrote its own quads; the loops below read others')
    float *normed = q ? q_normed : k_normed;
    if (normed)   // row t, head i (of q) or i - n_head (of k)
        for (int j = threadIdx.x; j < hd; j += BLOCK) normed[(q ? (t * n_head + i) * hd : t * kvd + (int64_t)(i - n_head) * hd) + j] = x[j];
    __syncthreads();
    rope_block(x, n_rot, *pos + (int)t, theta_scale);
    if (q) return;
    __syncthreads();
    for (int j = threadIdx.x; j < hd; j += BLOCK) store_as(k_type, K, row + (int64_t)(i - n_head) * hd + j, x[j]);
}

// T rows at positions *pos.. (device memory, so that a captured graph replays at the step's position)
static void attn_prep_gpu(float *qg, float *kr, const float *vr, const float *q_norm, const float *k_norm, int T, int n_head, int n_head_kv,
                          int hd, float eps, int n_rot, float base, const int *pos, uint32_t k_type, void *K, uint32_t v_type, void *V,
                          float *q_normed, float *k_normed) {
    if (n_rot / 2 > BLOCK) {
        fprintf(stderr, "clover: error: attn_prep_gpu: %d rotated dims, over %d\n", n_rot, 2 * BLOCK);
        exit(1);
    }
    cudaLaunchConfig_t c = launch_config((unsigned)(T * (n_head + 2 * n_head_kv)), BLOCK);
    CUDA_CHECK(cudaLaunchKernelEx(&c, attn_prep_kernel, qg, kr, vr, q_norm, k_norm, n_head, n_head_kv, hd, eps, n_rot, pos, powf(base, -2.0f / n_rot),
                                  k_type, (uint8_t *)K, v_type, (uint8_t *)V, q_normed, k_normed));
}

// Twin: attend (attn_task's body for one row t and head h), as flash-decoding: for each query head h
// of kv head g = h / G (G = n_head / n_head_kv), over the n keys row t sees,
//   o = sum_j softmax_j(s) V_j,  s_j = (K_j . round_as(k_type, q_h)) * kq_scale,  ao_gated = o * sigmoid(gate_h)
// attention_kernel: a block per (row t, kv head g, split), a warp per query head of the group, so the
// G heads share each K and V row read. The n keys are split into chunks whose length depends on n
// alone (never on the batch: a verify row gets the bits its decode step gets); a split walks its
// chunk in tiles of KV_TILE keys: the block loads a tile of K rows into shared memory as floats
// (16-byte loads; rows KV_ROW floats apart: lane j reads row j 16 bytes at a time, a warp's 512
// bytes from 4 words of every bank, and 16-byte aligned), lane j of each warp computes score j
// (fmaf over the head's dims in order, K and q read 4 values a load), then the online softmax:
//   m' = max(m, max_j s_j), c = exp(m - m'), l = c l + sum_j exp(s_j - m'), o = c o + sum_j p_j V_j
// (expf_ggml, the CPU softmax's exp; the sum of p by xor butterfly; the V sum over the tile's keys in
// order, lane l holding dims l, l+32, ... of o, the tile's p in registers, the tile's V rows loaded as
// the K rows were). Each split
// writes (m, l, o) to part; the last of a row's blocks to finish (last_block) folds the row's splits
// in order and divides (attention_combine), a launch less a layer:
//   M = max_s m_s, o = sum_s exp(m_s - M) o_s / sum_s exp(m_s - M) l_s.
// No n_ctx-long score buffer: part holds T x n_head x MAX_SPLITS x (hd + 2) floats. The CPU rounds p
// to the cache type before the V sum (llama.cpp's non-flash matmul); this form keeps p in float, as
// llama.cpp's flash attention does, so with f16/bf16 caches the two differ by up to half an ulp of
// that type per p (check_attention's limits).
enum { MAX_HEAD_DIM = 256, KV_ROW = MAX_HEAD_DIM + 4, MAX_GROUP = 8, KV_TILE = 32, MAX_SPLITS = 16, SPLIT_KEYS = 128 };

// keys a split of a row that sees n keys takes: n over at most MAX_SPLITS splits of at least
// SPLIT_KEYS, rounded up to whole tiles
__device__ int split_keys(int n) {
    int splits = (n + SPLIT_KEYS - 1) / SPLIT_KEYS;
    splits = splits < MAX_SPLITS ? splits : MAX_SPLITS;
    int keys = (n + splits - 1) / splits;
    return (keys + KV_TILE - 1) / KV_TILE * KV_TILE;
}

// rows 0..nk-1 of a kv head's cache slice (rows `stride` bytes apart, hd values of `type`) into tile as floats
__device__ void load_tile(float (*tile)[KV_ROW], const uint8_t *src, size_t stride, uint32_t type, int nk, int hd) {
    int per = type == T_F32 ? 4 : 8, chunks = hd / per;   // values of a 16-byte load
    for (int c = threadIdx.x; c < nk * chunks; c += blockDim.x) {
        int k = c / chunks, i = c % chunks * per;
        Vec16 v = load16(src + k * stride + (size_t)i * cache_bytes(type));
        if (type == T_F32)
            for (int e = 0; e < 4; e++) tile[k][i + e] = __uint_as_float(v.w[e]);
        else
            for (int e = 0; e < 8; e++) {
                uint16_t hv = (uint16_t)(v.w[e / 2] >> (16 * (e % 2)));
                tile[k][i + e] = type == T_F16 ? fp16_to_fp32(hv) : bf16_to_fp32(hv);
            }
    }
}

enum { MAX_HEADS = 64 };   // query heads a row (attention_combine's per-head folds in shared memory)

// Split `split` of row t's n keys for kv head g, its G query heads a warp each: (m, l, o) into part
__device__ void attention_split(const float *qg, const uint8_t *K, const uint8_t *V, uint32_t k_type, uint32_t v_type, int t, int g, int split,
                                int n, int n_head, int n_head_kv, int hd, float kq_scale, float *part) {
    alignas(16) __shared__ float tile[KV_TILE][KV_ROW];
    alignas(16) __shared__ float qr[MAX_GROUP][MAX_HEAD_DIM];
    alignas(16) __shared__ float p[MAX_GROUP][KV_TILE];
    int w = threadIdx.x / WARP, lane = threadIdx.x % WARP, h = g * (n_head / n_head_kv) + w;
    int chunk = split_keys(n), j0 = split * chunk, j1 = j0 + chunk < n ? j0 + chunk : n;
    const float *q = qg + ((int64_t)t * n_head + h) * 2 * hd;
    for (int i = lane; i < hd; i += WARP) qr[w][i] = round_as(k_type, q[i]);
    size_t kstride = (size_t)n_head_kv * hd * cache_bytes(k_type), vstride = (size_t)n_head_kv * hd * cache_bytes(v_type);
    const uint8_t *Kg = K + (size_t)g * hd * cache_bytes(k_type), *Vg = V + (size_t)g * hd * cache_bytes(v_type);
    float m = -INFINITY, l = 0, o[MAX_HEAD_DIM / WARP];
    for (int i = 0; i < MAX_HEAD_DIM / WARP; i++) o[i] = 0;
    for (int j = j0; j < j1; j += KV_TILE) {
        int nk = j1 - j < KV_TILE ? j1 - j : KV_TILE;
        __syncthreads();   // the last tile's V sum is done with tile[]
        load_tile(tile, Kg + (size_t)j * kstride, kstride, k_type, nk, hd);
        __syncthreads();
        float s = -INFINITY;
        if (lane < nk) {
            float d = 0;
            for (int i = 0; i < hd; i += 4) {   // (hd % 8 == 0: attention_gpu)
                F4 kv = load_vec<F4>(&tile[lane][i]), qv = load_vec<F4>(&qr[w][i]);
                for (int e = 0; e < 4; e++) d = fmaf(kv.v[e], qv.v[e], d);
            }
            s = d * kq_scale;
        }
        float mn = fmaxf(m, warp_max(s)), pj = lane < nk ? expf_ggml(s - mn) : 0, c = expf_ggml(m - mn);
        l = l * c + warp_sum(pj);
        m = mn;
        p[w][lane] = pj;
        __syncthreads();   // every warp's scores are done with the K tile
        load_tile(tile, Vg + (size_t)j * vstride, vstride, v_type, nk, hd);
        __syncthreads();
        float pk[KV_TILE];   // the tile's p, 4 a load (constant indices below: registers)
#pragma unroll
        for (int k = 0; k < KV_TILE; k += 4) {
            F4 v = load_vec<F4>(&p[w][k]);
            for (int e = 0; e < 4; e++) pk[k + e] = v.v[e];
        }
        for (int i = 0; i < MAX_HEAD_DIM / WARP; i++) {
            if (lane + WARP * i >= hd) break;
            float a = o[i] * c;
#pragma unroll
            for (int k = 0; k < KV_TILE; k++)
                if (k < nk) a = fmaf(pk[k], tile[k][lane + WARP * i], a);
            o[i] = a;
        }
    }
    float *out = part + (((int64_t)t * n_head + h) * MAX_SPLITS + split) * (hd + 2);
    if (lane == 0) out[0] = m, out[1] = l;
    for (int i = 0; i < MAX_HEAD_DIM / WARP && lane + WARP * i < hd; i++) out[2 + lane + WARP * i] = o[i];
}

// The splits of each head of row t folded in order, the gate, then ao_gated's row rounded to dot type
// dt (for W_o; F32: none), by one block: thread h folds head h's (m, l), then a thread per (head, dim).
__device__ void attention_combine(const float *qg, const float *part, int64_t t, int n, int n_head, int hd, float *ao, float *ao_gated, uint32_t dt,
                                  uint8_t *xq, size_t xq_bytes) {
    __shared__ float M[MAX_HEADS], L[MAX_HEADS];
    int chunk = split_keys(n), splits = (n + chunk - 1) / chunk;
    const float *pt = part + t * n_head * MAX_SPLITS * (hd + 2);
    for (int h = threadIdx.x; h < n_head; h += blockDim.x) {
        const float *ph = pt + (int64_t)h * MAX_SPLITS * (hd + 2);
        float m = -INFINITY, l = 0;
        for (int s = 0; s < splits; s++) m = fmaxf(m, ph[s * (hd + 2)]);
        for (int s = 0; s < splits; s++) l += expf_ggml(ph[s * (hd + 2)] - m) * ph[s * (hd + 2) + 1];
        M[h] = m, L[h] = l;
    }
    __syncthreads();
    for (int k = threadIdx.x; k < n_head * hd; k += blockDim.x) {
        int h = k / hd, i = k % hd;
        const float *ph = pt + (int64_t)h * MAX_SPLITS * (hd + 2), *gate = qg + (t * n_head + h) * 2 * hd + hd;
        float a = 0;
        for (int s = 0; s < splits; s++) a += expf_ggml(ph[s * (hd + 2)] - M[h]) * ph[s * (hd + 2) + 2 + i];
        float v = a / L[h];
        ao[t * n_head * hd + k] = v;
        ao_gated[t * n_head * hd + k] = v * sigmoid(gate[i]);
    }
    round_row_block(ao_gated + t * n_head * hd, n_head * hd, dt, xq + t * xq_bytes);
}

// A block per (row t, kv head g, split): its split (none where the row's keys end before it), then,
// the last of the row's n_head_kv x MAX_SPLITS blocks to finish (count: counts[t]), the row's combine.
__global__ void attention_kernel(const float *qg, const uint8_t *K, const uint8_t *V, uint32_t k_type, uint32_t v_type, const int *pos,
                                 int T, bool causal, int n_head, int n_head_kv, int hd, float kq_scale, float *part, float *ao, float *ao_gated,
                                 uint32_t dt, uint8_t *xq, size_t xq_bytes, unsigned *counts) {
    int split = blockIdx.x % MAX_SPLITS, rest = blockIdx.x / MAX_SPLITS, t = rest / n_head_kv, g = rest % n_head_kv;
    int n = causal ? *pos + t + 1 : *pos + T;
    if (split * split_keys(n) < n) attention_split(qg, K, V, k_type, v_type, t, g, split, n, n_head, n_head_kv, hd, kq_scale, part);
    if (last_block(counts + t, (unsigned)(n_head_kv * MAX_SPLITS))) attention_combine(qg, part, t, n, n_head, hd, ao, ao_gated, dt, xq, xq_bytes);
}

// floats of attention's partial results for T rows
static size_t attention_part_floats(int T, int n_head, int hd) { return (size_t)T * n_head * MAX_SPLITS * (hd + 2); }

// T rows at positions *pos.. (device memory, as for rope): causal, row t sees keys 0..*pos+t; else
// every row sees keys 0..*pos+T-1 (the preview's block). part: attention_part_floats(T, ...) floats;
// xq: ao_gated rounded for weights of type wtype (W_o), rows act_bytes apart; counts: T zeros
// (last_block's, zeros again after it).
static void attention_gpu(const float *qg, const void *K, const void *V, uint32_t k_type, uint32_t v_type, const int *pos, int T, bool causal,
                          int n_head, int n_head_kv, int hd, float kq_scale, float *part, float *ao, float *ao_gated, uint32_t wtype, void *xq,
                          unsigned *counts) {
    int G = n_head / n_head_kv;
    if (hd > MAX_HEAD_DIM || hd % 8 || G > MAX_GROUP || n_head > MAX_HEADS) {
        fprintf(stderr, "clover: error: attention_gpu: head dim %d (at most %d, a multiple of 8), %d query heads a kv head (at most %d) "
                "or %d heads (at most %d)\n", hd, MAX_HEAD_DIM, G, MAX_GROUP, n_head, MAX_HEADS);
        exit(1);
    }
    cudaLaunchConfig_t c = launch_config((unsigned)(T * n_head_kv * MAX_SPLITS), (unsigned)(G * WARP));
    uint32_t dt = dot_type(wtype);
    CUDA_CHECK(cudaLaunchKernelEx(&c, attention_kernel, qg, (const uint8_t *)K, (const uint8_t *)V, k_type, v_type, pos, T, causal, n_head,
                                  n_head_kv, hd, kq_scale, part, ao, ao_gated, dt, (uint8_t *)xq, act_bytes(dt, (int64_t)n_head * hd), counts));
}

// ================================================================================================
// 10. MoE (clover.c section 9, "MoE")
// ================================================================================================
enum { MAX_EXPERT = 256, EPL = MAX_EXPERT / WARP };   // routing: a warp per row, EPL experts a lane

// Twin: softmax, by one warp over its row's n <= MAX_EXPERT values, lane l holding v[j] = x[l + 32j]:
// m = max x; e_i = exp(x_i - m), expf_ggml on whole groups of 16, each group folded by halving in
// float (group g = 2j + l/16 is half a warp at step j: the xor butterfly 8, 4, 2, 1 is the CPU's
// halving fold), libm expf on the tail; the sum of the group sums and tail terms in double (the only
// order that differs from the CPU's); x_i = e_i * (1/sum).
__device__ void softmax_warp(float v[EPL], int n) {
    int lane = threadIdx.x % WARP, groups = n / 16;
    float m = -INFINITY;
    for (int j = 0; j < EPL; j++)
        if (lane + WARP * j < n && v[j] > m) m = v[j];
    for (int o = 16; o >= 1; o /= 2) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, o);
        if (m2 > m) m = m2;
    }
    double sum = 0;
    for (int j = 0; j < EPL && WARP * j < n; j++) {   // the same trip count in every lane
        int e = lane + WARP * j;
        bool whole = e / 16 < groups;
        v[j] = e >= n ? 0 : whole ? expf_ggml(v[j] - m) : expf(v[j] - m);
        float g = whole ? v[j] : 0;
        for (int o = 8; o >= 1; o /= 2) g += __shfl_xor_sync(0xffffffffu, g, o);
        if (whole && lane % 16 == 0) sum += g;
        if (!whole && e < n) sum += v[j];
    }
    for (int o = 16; o >= 1; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    float inv = (float)(1.0 / sum);
    for (int j = 0; j < EPL; j++) v[j] *= inv;
}

// Twin: route_top_k, by one warp (lane l holding p[l + 32j] in v[j]): n_used rounds of a warp argmax
// over the allowed experts not yet taken. The CPU's loop keeps the first candidate and replaces it by
// a strictly larger p, so its answer is the first candidate when that p is NaN, else the largest
// non-NaN p with the lowest index among equals: each lane finds its own first candidate and best
// (its experts in index order), then (value, index) pairs are folded by xor butterfly, the larger
// value or the lower index winning. None left: -1, weight 0. The weights are then divided by their
// sum (in double in rank order, clamped to fp16's smallest normal) and scaled when the scale is not 0
// or 1, by lane 0 in the CPU's order: the same bits from the same p.
__device__ void route_top_k_warp(const float v[EPL], const uint8_t *allowed, int n_expert, int k, float weights_scale, int *sel, float *w) {
    int lane = threadIdx.x % WARP;
    uint32_t open = 0;   // bit j: expert lane + 32j may still be chosen
    for (int j = 0; j < EPL; j++) {
        int e = lane + WARP * j;
        if (e < n_expert && (!allowed || allowed[e])) open |= 1u << j;
    }
    for (int r = 0; r < k; r++) {
        int first = MAX_EXPERT, best = MAX_EXPERT;   // MAX_EXPERT: none
        float first_v = 0, best_v = -INFINITY;
        for (int j = 0; j < EPL; j++) {
            if (!(open >> j & 1)) continue;
            int e = lane + WARP * j;
            if (first == MAX_EXPERT) first = e, first_v = v[j];
            if (v[j] == v[j] && (best == MAX_EXPERT || v[j] > best_v)) best = e, best_v = v[j];
        }
        for (int o = 16; o >= 1; o /= 2) {
            int f2 = __shfl_xor_sync(0xffffffffu, first, o), b2 = __shfl_xor_sync(0xffffffffu, best, o);
            float fv2 = __shfl_xor_sync(0xffffffffu, first_v, o), bv2 = __shfl_xor_sync(0xffffffffu, best_v, o);
            if (f2 < first) first = f2, first_v = fv2;
            if (b2 != MAX_EXPERT && (best == MAX_EXPERT || bv2 > best_v || (bv2 == best_v && b2 < best))) best = b2, best_v = bv2;
        }
        int pick = first == MAX_EXPERT ? -1 : first_v != first_v ? first : best;
        if (pick >= 0 && pick % WARP == lane) open &= ~(1u << (pick / WARP));
        if (lane == 0) sel[r] = pick, w[r] = pick < 0 ? 0 : pick == first ? first_v : best_v;
    }
    if (lane != 0) return;
    double total = 0;
    for (int r = 0; r < k; r++) total += w[r];
    float sum = fmaxf((float)total, 6.103515625e-5f);
    for (int r = 0; r < k; r++) {
        float x = w[r] / sum;
        w[r] = weights_scale != 0 && weights_scale != 1 ? x * weights_scale : x;
    }
}

// Twin: route_task, for row t by one warp: softmax: p_t = softmax(logits_t) (else p_t as given);
// route: the row's experts and weights from p_t, within `allowed` when given.
__device__ void route_row(const float *logits, float *p, const uint8_t *allowed, int *sel, float *w, int64_t t, int n_expert, int n_used,
                          float weights_scale, bool softmax, bool route) {
    int lane = threadIdx.x % WARP;
    float *pt = p + t * n_expert, v[EPL];
    for (int j = 0; j < EPL; j++) {
        int e = lane + WARP * j;
        v[j] = e < n_expert ? (softmax ? logits[t * n_expert + e] : pt[e]) : 0;
    }
    if (softmax) {
        softmax_warp(v, n_expert);
        for (int j = 0; j < EPL; j++)
            if (lane + WARP * j < n_expert) pt[lane + WARP * j] = v[j];
    }
    if (route) route_top_k_warp(v, allowed, n_expert, n_used, weights_scale, sel + t * n_used, w + t * n_used);
}

// A warp per row t (BLOCK / WARP rows a block)
__global__ void route_kernel(const float *logits, float *p, const uint8_t *allowed, int *sel, float *w, int T, int n_expert, int n_used,
                             float weights_scale, bool softmax, bool route) {
    int64_t t = (int64_t)blockIdx.x * (BLOCK / WARP) + threadIdx.x / WARP;
    if (t < T) route_row(logits, p, allowed, sel, w, t, n_expert, n_used, weights_scale, softmax, route);   // (the whole warp)
}

static void route_gpu(const float *logits, float *p, const uint8_t *allowed, int *sel, float *w, int T, int n_expert, int n_used,
                      float weights_scale, bool softmax, bool route) {
    if (n_expert > MAX_EXPERT) {
        fprintf(stderr, "clover: error: route_gpu: %d experts, over %d\n", n_expert, MAX_EXPERT);
        exit(1);
    }
    cudaLaunchConfig_t c = launch_config(blocks_for(T, BLOCK / WARP), BLOCK);
    CUDA_CHECK(cudaLaunchKernelEx(&c, route_kernel, logits, p, allowed, sel, w, T, n_expert, n_used, weights_scale, softmax, route));
}

// Twin: coreset. total_e = sum_t p[t][e] in double, rows in order (thread e, the CPU's order), into
// shared memory; then thread 0: experts sorted by total (insertion sort: stable, ties keep the lower
// index first), and the shortest prefix whose running sum reaches top_p * T is allowed. One block.
__global__ void coreset_kernel(const float *p, int T, int n_expert, float top_p, uint8_t *allowed) {
    __shared__ double total[MAX_EXPERT];
    __shared__ int order[MAX_EXPERT];
    for (int e = threadIdx.x; e < n_expert; e += BLOCK) {
        double s = 0;
        for (int t = 0; t < T; t++) s += p[(int64_t)t * n_expert + e];
        total[e] = s, order[e] = e, allowed[e] = 0;
    }
    __syncthreads();
    if (threadIdx.x != 0) return;
    for (int i = 1; i < n_expert; i++)
        for (int j = i; j > 0 && total[order[j]] > total[order[j - 1]]; j--) {
            int tmp = order[j];
            order[j] = order[j - 1], order[j - 1] = tmp;
        }
    double cum = 0;
    for (int i = 0; i < n_expert && cum < (double)top_p * T; i++) {
        allowed[order[i]] = 1;
        cum += total[order[i]];
    }
}

static void coreset_gpu(const float *p, int T, int n_expert, float top_p, uint8_t *allowed) {
    if (n_expert > MAX_EXPERT) {
        fprintf(stderr, "clover: error: coreset_gpu: %d experts, over %d\n", n_expert, MAX_EXPERT);
        exit(1);
    }
    cudaLaunchConfig_t c = launch_config(1, BLOCK);
    CUDA_CHECK(cudaLaunchKernelEx(&c, coreset_kernel, p, T, n_expert, top_p, allowed));
}

// Twin: swiglu (ffn_act's h = silu(g) * u), one element per thread
__global__ void swiglu_kernel(const float *g, const float *u, float *h, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * BLOCK + threadIdx.x;
    if (i < n) h[i] = silu(g[i]) * u[i];
}

static void swiglu_gpu(const float *g, const float *u, float *h, int64_t n) {
    cudaLaunchConfig_t c = launch_config(blocks_for(n, BLOCK), BLOCK);
    CUDA_CHECK(cudaLaunchKernelEx(&c, swiglu_kernel, g, u, h, n));
}

// The routing of the rows after their router logits: route_row's arguments, and the count of the
// blocks that compute the logits (done NULL: no routing)
struct Routing { const float *logits; float *p; int *sel; float *w; int n_expert, n_used; float scale; unsigned *done; };

// For a rider block (ridden) of a launch whose riders are the router: the last of them to finish
// routes the riders' T rows, a warp a row (route_gpu's work). Every thread of the block calls it.
__device__ void route_after(const Rider &rd, const Routing &rt) {
    if (!rt.done || blockIdx.y || !last_block(rt.done, rider_blocks(rd))) return;
    for (int t = threadIdx.x / WARP; t < rd.T; t += blockDim.x / WARP)   // (whole warps)
        route_row(rt.logits, rt.p, nullptr, rt.sel, rt.w, t, rt.n_expert, rt.n_used, rt.scale, true, true);
}

// The rounding of a launch's output rows for the matrix that reads them next (quantize_row_gpu's
// work and bits, without a launch of its own): rows r of n floats to dot type dt into q (rows q_bytes
// apart), each by the last of the blocks that write it to finish (last_block, its count count[r]).
// q NULL: none.
struct Rounding { uint8_t *q; size_t q_bytes; uint32_t dt; unsigned *count; };
// Whether this block is the last of the `blocks` that write row r of rq's rows (then it rounds them:
// round_row_block). Every thread of the block calls it.
__device__ bool rounds_after(const Rounding &rq, int64_t r, unsigned blocks) { return rq.q && last_block(rq.count + r, blocks); }

// Gate, up and SwiGLU in one launch, for gate and up matrices of one type: the fused twin of
// matmul_id_gpu (gate), matmul_id_gpu (up), swiglu_gpu, with the same bits (each dot is row_dot's,
// then silu(g) * u): h[p][o] = silu(G_e[o] . x[t]) * (U_e[o] . x[t]), e = ids[p] (ids NULL: the one
// matrix, the shared expert), t = p / in_div; ids[p] < 0: h row p is 0 (= silu(0) * 0). The input
// as matvec_kernel's (block_input: rounded rows x, or floats xf rounded by each block to dt). Blocks
// and grid as matvec_kernel's; the gate row then the up row, by the same lanes. rq: h's rows rounded
// for the down projection after it, row p by the last of its row_blocks blocks.
template <typename D>
__global__ void swiglu_id_kernel(Mat G, Mat U, const int *ids, int in_div, const uint8_t *x, size_t x_bytes, const float *xf, uint32_t dt, int lpr,
                                 int64_t row_blocks, float *h, Rider rd, Routing rt, Rounding rq) {
    __shared__ Vec16 xs[MAX_ROUNDED / 16];
    if (ridden(rd)) {   // the whole block: a rider's (then rd's blocks, as in matvec_kernel)
        route_after(rd, rt);
        return;
    }
    int64_t job = blockIdx.x / row_blocks, o = blockIdx.x % row_blocks * (BLOCK / lpr) + threadIdx.x / lpr;
    int e = ids ? ids[job] : 0;
    bool active = o < G.n_out;
    float g = 0, u = 0;
    if (e >= 0) {   // the whole block (one job)
        const uint8_t *xr = block_input(x, x_bytes, xf, G.n_in, dt, job / in_div, (uint8_t *)xs);
        g = row_dot<D>(G, e * G.n_out + o, xr, lpr, active);
        u = row_dot<D>(U, e * U.n_out + o, xr, lpr, active);
    }
    if (active && threadIdx.x % lpr == 0) h[job * G.n_out + o] = silu(g) * u;
    if (rounds_after(rq, job, (unsigned)row_blocks)) round_row_block(h + job * G.n_out, (int)G.n_out, rq.dt, rq.q + job * rq.q_bytes);
}

// h[out[r]][o] = silu(G_e[o] . x[act[r]]) * (U_e[o] . x[act[r]]) for block y's tile (as
// matmul_mma_kernel's; ids NULL: the one matrix G, U, the shared expert): swiglu_id_kernel's bits. A
// block takes MMA_ROWS / 2 rows o of both: its first half of warps their gate rows, 16 a warp, the
// second half the same up rows, the gate's cells passed in shared memory. rq: the tile's rows of h rounded
// by the last of the blocks of its grid row. sp.split > 1 (ids NULL: the shared expert, whose 512
// rows are 16 blocks, on 16 SMs): grid x holds each row block's sp.split slots, as matmul_mma_kernel's.
template <typename D>
__global__ void __launch_bounds__(MMA_WARPS * WARP, MMA_BLOCKS_PER_SM) swiglu_mma_kernel(Mat G, Mat U, const int *ids, int in_div, const uint8_t *x, size_t x_bytes, int n, int slots, float *h, Rider rd,
                                  Routing rt, Rounding rq, MmaSplit sp) {
    DYNAMIC_SHARED(Vec16, tile);
    __shared__ TileRows tr;
    __shared__ float gs[MMA_M][MMA_ROWS / 2];
    uint8_t *xs = (uint8_t *)tile;
    if (ridden(rd)) {   // the whole block (riders and routing as in swiglu_id_kernel)
        route_after(rd, rt);
        return;
    }
    if (!tile_rows(ids, n, in_div, tr)) return;   // the whole block
    // the row block blockIdx.x / sp.split and (split) its slot blockIdx.x % sp.split, recomputed where
    // used (kept in registers across mma_rows, they made the Q5_K instance spill)
    if (tr.e >= 0) stage_tile<D>(x, x_bytes, (int)G.n_in, tr, xs, (int)(blockIdx.x % sp.split), sp.split);
    __syncthreads();
    int w = threadIdx.x / WARP, hw = w % (MMA_WARPS / 2);   // hw: the warp's 16 rows of the block's, gate or up
    bool up = w >= MMA_WARPS / 2;
    float acc[4][8] = {}, accm[4][8] = {}, v[8];
    Mat m = G;   // (a copy, not a pointer to one of the two: they stay in registers)
    if (up) m = U;
    if (tr.e >= 0)   // (warp-uniform)
        mma_rows<D>(expert(&m, tr.e), (int64_t)(blockIdx.x / sp.split) * (MMA_ROWS / 2) + 16 * hw, xs, warp_stages<D>(xs, G.n_in), (int)(blockIdx.x % sp.split), sp.split,
                    sp.split > 1 ? 1 : slots, tr.R > MMA_M / 2, acc, accm);
    unsigned row_blocks = (gridDim.x - rider_blocks(rd)) / sp.split;
    if (sp.split > 1 && !split_gather(sp, (size_t)blockIdx.y * row_blocks + blockIdx.x / sp.split, (int)(blockIdx.x % sp.split), acc, accm)) return;   // the whole block
    int64_t o0 = (int64_t)(blockIdx.x / sp.split) * (MMA_ROWS / 2);
    fold_cells<D>(acc, accm, slots, v);
    for (int c = 0; !up && c < 8; c++) gs[cell_tile_row(c)][16 * hw + cell_weight_row(c)] = v[c];
    __syncthreads();
    for (int c = 0; up && c < 8; c++) {
        int r = cell_tile_row(c), k = 16 * hw + cell_weight_row(c);
        if (r < tr.R && o0 + k < G.n_out) h[(int64_t)tr.out[r] * G.n_out + o0 + k] = silu(gs[r][k]) * v[c];
    }
    if (rounds_after(rq, blockIdx.y, row_blocks))
        for (int r = 0; r < tr.R; r++) round_row_block(h + (int64_t)tr.out[r] * G.n_out, (int)G.n_out, rq.dt, rq.q + (int64_t)tr.out[r] * rq.q_bytes);
}

// xq NULL (rounds_in_block): the float rows xf, each block rounding the row it reads; rd: F32 riders
// (of the rows of ids NULL: n_pairs = T), and rt.done not NULL: they are the router, and the rows are
// routed after them in the same launch (route_gpu's work). batch: as matmul_id_gpu's
// (swiglu_mma_kernel). rq: h's rows rounded for the matrix after it, in the same launch (Rounding).
static void swiglu_id_gpu(const Mat *G, const Mat *U, const int *ids, int n_pairs, int in_div, bool batch, const void *xq, const float *xf, float *h,
                          Rider rd, Routing rt, Rounding rq) {
    uint32_t dt = dot_type(G->type);
    size_t xb = act_bytes(dt, G->n_in);
    const uint8_t *ax = (const uint8_t *)xq;
    by_type(G->type, "swiglu_id_gpu", [&](auto d) {
        using D = decltype(d);
        int lpr = lanes_per_row(D::LPB, units_of<D>(G->n_in));
        if constexpr (D::MMA) {
            if (batch && ax && n_pairs <= MMA_MAX_PAIRS && mma_batch(G->type, G->n_in)) {
                Rider r = rider_layout(rd, MMA_WARPS * WARP);
                unsigned rb = blocks_for(G->n_out, MMA_ROWS / 2), tiles = ids ? (unsigned)n_pairs : blocks_for(n_pairs, MMA_M);
                MmaSplit sp = mma_split_buf;
                sp.split = mma_split(ids, lpr / D::LPB, rb * tiles);
                dim3 grid(rb * sp.split + rider_blocks(r), tiles);
                cudaLaunchConfig_t c = mma_config<D>(swiglu_mma_kernel<D>, grid, G->n_in);
                CUDA_CHECK(cudaLaunchKernelEx(&c, swiglu_mma_kernel<D>, *G, *U, ids, in_div, ax, xb, n_pairs, lpr / D::LPB, h, r, rt, rq, sp));
                return;
            }
        }
        unsigned rb = blocks_for(G->n_out, BLOCK / lpr);
        cudaLaunchConfig_t c = launch_config(rb * (unsigned)n_pairs + rider_blocks(rd), BLOCK);
        CUDA_CHECK(cudaLaunchKernelEx(&c, swiglu_id_kernel<D>, *G, *U, ids, in_div, ax, xb, xf, dt, lpr, (int64_t)rb, h, rd, rt, rq));
    });
}

// The MoE output, the residual add and the next norm and its rounding to the dot type of wtype, T rows
// of n (residual_row's moe_out; xq rows act_bytes(dot_type(wtype), n) apart): K ranks a row, their
// weights wr and down rows ye, the shared expert's rows sh and gate logits sh_logit.
static Residual moe_out_step(float *x, const int *sel, const float *wr, const float *ye, int K, float *mix, float *sh, const float *sh_logit,
                             const float *w, int n, float eps, uint32_t wtype, float *xn, void *xq) {
    Residual r = add_norm_step(x, mix, w, n, eps, wtype, xn, xq);
    r.sel = sel, r.wr = wr, r.ye = ye, r.K = K, r.sh = sh, r.sh_logit = sh_logit;
    return r;
}

static void moe_out_gpu(float *x, const int *sel, const float *wr, const float *ye, int K, float *mix, float *sh, const float *sh_logit,
                        const float *w, int n, float eps, uint32_t wtype, float *xn, void *xq, int T) {
    residual_gpu(moe_out_step(x, sel, wr, ye, K, mix, sh, sh_logit, w, n, eps, wtype, xn, xq), T);
}

// ================================================================================================
// 11. The model, state and scratch on the device, and the memory plan (clover.c section 7)
// ================================================================================================
// What clover.c hands over (declared identically there, beside gpu_load; GpuModel's `size` guards
// the layout): the hyper-parameters, and every tensor as the file stores it, by the field names of
// clover.c's Config, Layer and Model. A matrix is n_out rows of n_in values of `type` at `data`
// (host memory: the mapped file); the stacked expert tensors hold n_expert such matrices; data NULL:
// the file has no such tensor.
struct GpuMat { uint32_t type; int64_t n_in, n_out; const void *data; };
struct GpuConfig {
    int n_embd, n_layer, n_vocab;
    int n_head, n_head_kv, head_dim, n_rot;
    float eps, rope_base, kq_scale;
    int n_expert, n_expert_used, n_ff, n_ff_shexp;
    float expert_weights_scale;
    int d_conv, n_k_heads, n_v_heads, d_state, key_dim, value_dim, conv_dim;
    float coreset_top_p;
};
struct GpuLayer {
    bool recurrent;
    const float *attn_norm, *post_norm;
    GpuMat qkv, gate, beta, alpha, ssm_out;
    const float *conv, *dt, *a, *ssm_norm;
    const float *conv_right, *a_rev, *dt_rev, *rev_mix;
    GpuMat alpha_rev, beta_rev;
    GpuMat wq, wk, wv, wo;
    const float *q_norm, *k_norm;
    GpuMat router, gate_exps, up_exps, down_exps, gate_shexp, up_shexp, down_shexp;
    const float *shexp_gate;
};
// dump: clover.c's --dump-tensors writer (NULL: no dumps), called with host copies of `rows` blocks of
// ne2 x ne1 x ne0 floats (i32: ints) named as clover.c names them.
typedef void (*GpuDumpFn)(void *arg, const char *name, int il, const void *x, bool i32, int rows, int ne2, int ne1, int ne0);
struct GpuModel {
    size_t size;
    GpuConfig c;
    GpuMat output;
    const float *output_norm;
    const GpuLayer *layers;
    GpuDumpFn dump;
    void *dump_arg;
};

// The device copies: the same structs with device pointers (Mat, section 6; Layer, State and Scratch
// of clover.c, field for field where the GPU needs the field).
struct Layer {
    bool recurrent;
    float *attn_norm, *post_norm;
    Mat qkv, gate, beta, alpha, ssm_out;
    float *conv, *dt, *a, *ssm_norm;
    float *conv_right, *a_rev, *dt_rev, *rev_mix;
    Mat alpha_rev, beta_rev;
    Mat wq, wk, wv, wo;
    float *q_norm, *k_norm;
    Mat router, gate_exps, up_exps, down_exps, gate_shexp, up_shexp, down_shexp;
    Mat shexp_gate;   // the file's vector g_sh, as a matrix of one row (sh_logit = g_sh . m is a matmul)
};

// The committed state (clover.c's State): KV rows per attention layer; conv ring and S per GDN layer,
// all of them in one allocation (gdn: layer by layer, S then ring), so that draft-self's save before a
// verify batch (into gdn_saved, the same layout) and the rollback's restore are one copy each, not
// two a layer. Beside it, the verify batch's logged GDN inputs (log_u, log_g, log_beta), per GDN layer.
struct State {
    int n_ctx;
    uint32_t k_type, v_type;
    uint8_t **k, **v;
    float **ring, **S;
    float *gdn, *gdn_saved;
    size_t gdn_floats;
    float **log_u, **log_g, **log_beta;
};

// Scratch for one batch of up to cap rows: clover.c's Scratch, plus two buffers of rounded inputs
// (xq: a norm's rounding of xn, read by the matrices after it; xq2: every other rounding) and the
// logits of the batch's rows.
struct Scratch {
    int cap;
    float *x, *xn, *qkv, *z, *o, *o_normed, *beta_logit, *alpha, *beta, *g, *conv;
    float *qg, *kr, *vr, *ao, *ao_gated, *att;   // att: attention's partial results (attention_gpu)
    float *router_logits, *probs, *w;
    int *sel;
    float *ge, *ue, *he, *ye, *hs, *sh, *sh_logit, *mix;   // hs: the shared expert's SwiGLU
    uint8_t *xq, *xq2;
    float *beta_rev_logit, *alpha_rev, *beta_rev, *g_rev, *o_rev;
    uint8_t *coreset;
    float *logits;
    int *pos;                      // n_past of the pass, read by rope, store_as and attention
    int *token;                    // greedy ids: the argmax of each row of logits asked for (a decode step, a verify batch),
                                   // or a preview's best_token
    float *p_H;                    // best_token's p of each of those rows, then their H ([2][cap])
    unsigned *done;                // last_block's count (the routing after the router's riders)
    unsigned *round_count;         // last_block's counts of a Rounding's rows ([cap * n_expert_used])
    unsigned *counts;              // last_block's counts: the gated norm's head groups, the attention's rows ([max(cap, n_v_heads)])
    uint8_t *hsq;                  // the shared expert's hs rounded for its down projection (a batch's: Rounding)
    uint8_t *xq_sh;                // the FFN's input rounded for the shared expert by the norm (add_norm's xq2), where it needs its own
    float *x_host, *logits_host;   // pinned host staging of the embeddings in and the logits out
    int *pos_host, *token_host;
    float *p_H_host;
};

// A pass of one shape as a CUDA graph: the pass (causal or preview), its rows, whether it logs the
// GDN inputs, the rows of logits it ends with (first, n) and what it makes of them (out: the logits,
// their argmax, or best_token without skip). Its kernels read the position (s->pos), the routing and
// the rows from device memory, so the same graph serves every call of that shape.
enum PassOut { LOGITS, ARGMAX, BEST };
struct PassShape { bool preview, log; int T, first, n, skip; PassOut out; };
struct Captured { PassShape k; cudaGraphExec_t g; };
enum { MAX_GRAPHS = 64 };   // a draft-self run meets 2 x 16 shapes at most (verify and preview of 1..16 rows)

struct Gpu {
    GpuConfig c;
    Mat output;
    float *output_norm;
    Layer *layers;
    State st;
    Scratch sc;
    Captured graphs[MAX_GRAPHS];   // the passes of up to MAX_ROWS rows as CUDA graphs (section 12), each once captured
    int n_graphs;
    GpuDumpFn dump;                // --dump-tensors (section 12)
    void *dump_arg;
    float *dump_host[4];           // host copies for it, dump_n[i] floats each
    size_t dump_n[4];
};

// Floats of a GDN layer's conv ring and of its state S (clover.c's ring_floats, S_floats); the
// widest FFN and the widest matmul input, which size the scratch rows.
static size_t ring_floats(const GpuConfig *c) { return (size_t)(c->d_conv - 1) * c->conv_dim; }
static size_t S_floats(const GpuConfig *c) { return (size_t)c->n_v_heads * c->d_state * c->d_state; }
static size_t widest_ff(const GpuConfig *c) { return (size_t)(c->n_ff > c->n_ff_shexp ? c->n_ff : c->n_ff_shexp); }
static size_t widest_input(const GpuConfig *c) {
    size_t n = (size_t)c->n_embd, ins[] = {(size_t)c->value_dim, (size_t)c->n_head * c->head_dim, widest_ff(c)};
    for (size_t m : ins) n = m > n ? m : n;
    return n;
}

// Bytes of a matrix as stored (n_stack matrices of n_out rows).
static size_t mat_bytes(const GpuMat *m, int n_stack) { return row_bytes(m->type, m->n_in) * (size_t)m->n_out * (size_t)n_stack; }

// The device memory a run needs, in the order it is allocated: weights (every tensor once), the KV
// cache at n_ctx rows, the GDN state (committed, saved, and the verify batch's log), the scratch
// of a cap-row batch. Computed before anything is allocated, in double (no product can wrap).
struct Plan { double weights, kv, gdn, scratch; };

static double vec_floats(const GpuConfig *c, const GpuLayer *L) {   // the small f32 vectors of a layer
    double n = 2.0 * c->n_embd;
    if (L->recurrent)
        n += (double)c->conv_dim * c->d_conv + 2.0 * c->n_v_heads + c->d_state +
             (L->conv_right ? (double)c->conv_dim * (c->d_conv - 1) : 0) + (L->a_rev ? 3.0 * c->n_v_heads : 0);
    else n += 2.0 * c->head_dim;
    return n + (L->shexp_gate ? c->n_embd : 0);
}

static double layer_mat_bytes(const GpuConfig *c, const GpuLayer *L) {
    const GpuMat *one[] = {&L->qkv, &L->gate, &L->beta, &L->alpha, &L->ssm_out, &L->alpha_rev, &L->beta_rev, &L->wq, &L->wk,
                           &L->wv, &L->wo, &L->router, &L->gate_shexp, &L->up_shexp, &L->down_shexp};
    const GpuMat *stacked[] = {&L->gate_exps, &L->up_exps, &L->down_exps};
    double b = 0;
    for (const GpuMat *m : one) if (m->data) b += (double)mat_bytes(m, 1);
    for (const GpuMat *m : stacked) if (m->data) b += (double)mat_bytes(m, c->n_expert);
    return b;
}


static Plan plan(const GpuModel *m, int n_ctx, int cap, uint32_t k_type, uint32_t v_type) {
    const GpuConfig *c = &m->c;
    Plan p = {(double)mat_bytes(&m->output, 1) + 4.0 * c->n_embd, 0, 0, 0};
    double kvd = (double)c->n_head_kv * c->head_dim, ring = (double)ring_floats(c), S = (double)S_floats(c);
    for (int il = 0; il < c->n_layer; il++) {
        const GpuLayer *L = &m->layers[il];
        p.weights += layer_mat_bytes(c, L) + 4 * vec_floats(c, L);
        if (L->recurrent) p.gdn += 4 * (2 * (ring + S) + (double)cap * (c->conv_dim + 2.0 * c->n_v_heads));
        else p.kv += (double)n_ctx * kvd * (double)(cache_bytes(k_type) + cache_bytes(v_type));
    }
    double T = cap, K = c->n_expert_used, ff = (double)widest_ff(c), maxin = (double)widest_input(c);
    double per_row = 4.0 * c->n_embd + 2.0 * c->conv_dim + 4.0 * c->value_dim + 8.0 * c->n_v_heads + 4.0 * c->n_head * c->head_dim +
                     2 * kvd + 2.0 * c->n_expert + 2 * K + K * c->n_embd + 3 * K * ff + c->n_ff_shexp + 1 + c->n_vocab +
                     (double)attention_part_floats(1, c->n_head, c->head_dim);
    p.scratch = 4 * T * per_row + 4 * (T * K * maxin + T * maxin) + c->n_expert + (double)mma_split_bytes() + 4 * T * (K + c->n_ff_shexp) + 4 * fmax(T, c->n_v_heads);
    return p;
}

static void human(char *out, size_t n, double b) {
    if (b >= 1073741824.0) snprintf(out, n, "%.2f GiB", b / 1073741824.0);
    else snprintf(out, n, "%.1f MiB", b / 1048576.0);
}

// --- allocation and upload ---------------------------------------------------------------------
static float *dev_floats(size_t n) { return (float *)dev_alloc(n * sizeof(float)); }

static float *upload_vec(const float *h, size_t n) { return h ? (float *)dev_copy(h, n * sizeof(float)) : nullptr; }

// A matrix's rows as stored (blocks) into the device layout of section 3: rows x quant_row_bytes
// bytes, then (Q8_0, Q4_0, Q6_K) the rows x blocks scales. The bytes are moved, not changed.
static void split_rows(uint32_t t, const uint8_t *src, int64_t n, int64_t rows, uint8_t *dst) {
    size_t rb = row_bytes(t, n), qb = quant_row_bytes(t, n);
    int64_t nb = t == T_Q6_K ? n / 256 : n / 32;
    uint16_t *scales = (uint16_t *)(dst + (size_t)rows * qb);
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *s = src + (size_t)r * rb;
        uint8_t *q = dst + (size_t)r * qb;
        for (int64_t b = 0; b < nb; b++) {
            uint16_t *d = &scales[r * nb + b];
            if (t == T_Q8_0) {
                BlockQ8_0 x;
                memcpy(&x, s + b * sizeof x, sizeof x);
                memcpy(q + 32 * b, x.qs, 32), *d = x.d;
            } else if (t == T_Q4_0) {
                BlockQ4_0 x;
                memcpy(&x, s + b * sizeof x, sizeof x);
                memcpy(q + 16 * b, x.qs, 16), *d = x.d;
            } else {
                BlockQ6_K x;
                memcpy(&x, s + b * sizeof x, sizeof x);
                memcpy(q + 128 * b, x.ql, 128), memcpy(q + 128 * nb + 64 * b, x.qh, 64), memcpy(q + 192 * nb + 16 * b, x.scales, 16);
                *d = x.d;
            }
        }
    }
}

// n_stack matrices of n_out rows of n_in values of type t (host, as stored) onto the device. Every
// kernel reads whole units with 16-byte loads: rows whose length is not a multiple of the unit (4
// values for F32, 8 for F16/BF16, the block otherwise) are refused.
static Mat upload_weights(uint32_t t, int64_t n_in, int64_t n_out, int n_stack, const void *h) {
    int unit = 0;
    by_type(t, "upload_weights", [&](auto d) { unit = decltype(d)::ROW_STEP; });
    if (n_in % unit != 0) {
        fprintf(stderr, "clover: error: the GPU kernels need %s rows of a multiple of %d values, but a matrix has rows of %lld; use -ngl 0\n",
                type_name(t), unit, (long long)n_in);
        exit(1);
    }
    int64_t rows = n_out * n_stack;
    size_t bytes = row_bytes(t, n_in) * (size_t)rows;
    Mat m = {t, n_in, n_out, nullptr, quant_row_bytes(t, n_in), nullptr};
    if (!split_scales(t)) {
        m.data = (const uint8_t *)dev_copy(h, bytes);
        return m;
    }
    uint8_t *tmp = (uint8_t *)xmalloc(bytes);
    split_rows(t, (const uint8_t *)h, n_in, rows, tmp);
    m.data = (const uint8_t *)dev_copy(tmp, bytes);
    m.scales = (const uint16_t *)(m.data + (size_t)rows * m.row_bytes);
    free(tmp);
    return m;
}

static Mat upload_mat(const GpuMat *m, int n_stack) {
    if (!m->data) return {m->type, m->n_in, m->n_out, nullptr, quant_row_bytes(m->type, m->n_in), nullptr};
    return upload_weights(m->type, m->n_in, m->n_out, n_stack, m->data);
}

static Layer upload_layer(const GpuConfig *c, const GpuLayer *h) {
    Layer L;
    memset(&L, 0, sizeof L);
    L.recurrent = h->recurrent;
    L.attn_norm = upload_vec(h->attn_norm, c->n_embd);
    L.post_norm = upload_vec(h->post_norm, c->n_embd);
    if (h->recurrent) {
        L.qkv = upload_mat(&h->qkv, 1), L.gate = upload_mat(&h->gate, 1), L.beta = upload_mat(&h->beta, 1);
        L.alpha = upload_mat(&h->alpha, 1), L.ssm_out = upload_mat(&h->ssm_out, 1);
        L.conv = upload_vec(h->conv, (size_t)c->conv_dim * c->d_conv);
        L.dt = upload_vec(h->dt, c->n_v_heads), L.a = upload_vec(h->a, c->n_v_heads);
        L.ssm_norm = upload_vec(h->ssm_norm, c->d_state);
        L.conv_right = upload_vec(h->conv_right, (size_t)c->conv_dim * (c->d_conv - 1));
        L.a_rev = upload_vec(h->a_rev, c->n_v_heads), L.dt_rev = upload_vec(h->dt_rev, c->n_v_heads);
        L.rev_mix = upload_vec(h->rev_mix, c->n_v_heads);
        L.alpha_rev = upload_mat(&h->alpha_rev, 1), L.beta_rev = upload_mat(&h->beta_rev, 1);
    } else {
        L.wq = upload_mat(&h->wq, 1), L.wk = upload_mat(&h->wk, 1), L.wv = upload_mat(&h->wv, 1), L.wo = upload_mat(&h->wo, 1);
        L.q_norm = upload_vec(h->q_norm, c->head_dim), L.k_norm = upload_vec(h->k_norm, c->head_dim);
    }
    L.router = upload_mat(&h->router, 1);
    L.gate_exps = upload_mat(&h->gate_exps, c->n_expert), L.up_exps = upload_mat(&h->up_exps, c->n_expert);
    L.down_exps = upload_mat(&h->down_exps, c->n_expert);
    L.gate_shexp = upload_mat(&h->gate_shexp, 1), L.up_shexp = upload_mat(&h->up_shexp, 1), L.down_shexp = upload_mat(&h->down_shexp, 1);
    L.shexp_gate = {T_F32, c->n_embd, 1, (const uint8_t *)upload_vec(h->shexp_gate, c->n_embd), (size_t)c->n_embd * 4, nullptr};
    return L;
}

static void state_init(State *s, const GpuConfig *c, const Layer *layers, int n_ctx, int cap, uint32_t k_type, uint32_t v_type) {
    size_t kvd = (size_t)c->n_head_kv * c->head_dim, ring = ring_floats(c), S = S_floats(c);
    s->n_ctx = n_ctx, s->k_type = k_type, s->v_type = v_type;
    uint8_t ***bytes[] = {&s->k, &s->v};
    for (uint8_t ***b : bytes) *b = (uint8_t **)xmalloc((size_t)c->n_layer * sizeof(uint8_t *));
    float ***floats[] = {&s->ring, &s->S, &s->log_u, &s->log_g, &s->log_beta};
    for (float ***f : floats) *f = (float **)xmalloc((size_t)c->n_layer * sizeof(float *));
    size_t S_at = (S + 63) & ~(size_t)63, per = S_at + ((ring + 63) & ~(size_t)63);   // a layer's floats in gdn: S, then ring (each 256-byte aligned)
    int n_rec = 0;
    for (int il = 0; il < c->n_layer; il++) n_rec += layers[il].recurrent;
    s->gdn_floats = per * n_rec;
    s->gdn = s->gdn_saved = nullptr;
    if (n_rec) {   // the state starts at zero, as on the CPU (calloc)
        s->gdn = dev_floats(s->gdn_floats), s->gdn_saved = dev_floats(s->gdn_floats);
        CUDA_CHECK(cudaMemset(s->gdn, 0, s->gdn_floats * 4));
    }
    for (int il = 0, k = 0; il < c->n_layer; il++) {
        s->k[il] = s->v[il] = nullptr;
        for (float ***f : floats) (*f)[il] = nullptr;
        if (layers[il].recurrent) {
            s->S[il] = s->gdn + per * k++, s->ring[il] = s->S[il] + S_at;
            s->log_u[il] = dev_floats((size_t)cap * c->conv_dim);
            s->log_g[il] = dev_floats((size_t)cap * c->n_v_heads), s->log_beta[il] = dev_floats((size_t)cap * c->n_v_heads);
        } else {
            s->k[il] = (uint8_t *)dev_alloc((size_t)n_ctx * kvd * cache_bytes(k_type));
            s->v[il] = (uint8_t *)dev_alloc((size_t)n_ctx * kvd * cache_bytes(v_type));
        }
    }
}

static void scratch_init(Scratch *s, const GpuConfig *c, int cap) {
    size_t T = (size_t)cap, E = (size_t)c->n_embd, K = (size_t)c->n_expert_used, H = (size_t)c->n_v_heads;
    size_t ff = widest_ff(c), q = (size_t)c->n_head * c->head_dim, kvd = (size_t)c->n_head_kv * c->head_dim;
    size_t maxin = widest_input(c);
    s->cap = cap;
    s->x = dev_floats(T * E), s->xn = dev_floats(T * E), s->mix = dev_floats(T * E), s->sh = dev_floats(T * E);
    s->sh_logit = dev_floats(T);
    s->qkv = dev_floats(T * c->conv_dim), s->conv = dev_floats(T * c->conv_dim);
    s->z = dev_floats(T * c->value_dim), s->o = dev_floats(T * c->value_dim), s->o_normed = dev_floats(T * c->value_dim);
    s->o_rev = dev_floats(T * c->value_dim);
    float **heads[] = {&s->beta_logit, &s->alpha, &s->beta, &s->g, &s->beta_rev_logit, &s->alpha_rev, &s->beta_rev, &s->g_rev};
    for (float **h : heads) *h = dev_floats(T * H);
    s->qg = dev_floats(T * 2 * q), s->ao = dev_floats(T * q), s->ao_gated = dev_floats(T * q);
    s->kr = dev_floats(T * kvd), s->vr = dev_floats(T * kvd);
    s->att = dev_floats(attention_part_floats(cap, c->n_head, c->head_dim));
    s->router_logits = dev_floats(T * c->n_expert), s->probs = dev_floats(T * c->n_expert);
    s->w = dev_floats(T * K), s->sel = (int *)dev_alloc(T * K * sizeof(int));
    s->ge = dev_floats(T * K * ff), s->ue = dev_floats(T * K * ff), s->he = dev_floats(T * K * ff), s->ye = dev_floats(T * K * E);
    s->hs = dev_floats(T * c->n_ff_shexp);
    s->done = (unsigned *)dev_alloc(sizeof(unsigned));
    CUDA_CHECK(cudaMemset(s->done, 0, sizeof(unsigned)));
    s->round_count = (unsigned *)dev_alloc(T * K * sizeof(unsigned));
    CUDA_CHECK(cudaMemset(s->round_count, 0, T * K * sizeof(unsigned)));
    size_t nc = T > H ? T : H;
    s->counts = (unsigned *)dev_alloc(nc * sizeof(unsigned));
    CUDA_CHECK(cudaMemset(s->counts, 0, nc * sizeof(unsigned)));
    s->hsq = (uint8_t *)dev_alloc(T * c->n_ff_shexp * 4), s->xq_sh = (uint8_t *)dev_alloc(T * E * 4);
    s->xq = (uint8_t *)dev_alloc(T * maxin * 4), s->xq2 = (uint8_t *)dev_alloc(T * K * maxin * 4);   // xq2: the experts' T*K rows too
    s->coreset = (uint8_t *)dev_alloc((size_t)c->n_expert);
    s->logits = dev_floats(T * c->n_vocab);
    s->pos = (int *)dev_alloc(sizeof(int)), s->token = (int *)dev_alloc(T * sizeof(int)), s->p_H = dev_floats(2 * T);
    CUDA_CHECK(cudaMallocHost(&s->x_host, T * E * sizeof(float)));
    CUDA_CHECK(cudaMallocHost(&s->logits_host, T * c->n_vocab * sizeof(float)));
    CUDA_CHECK(cudaMallocHost(&s->pos_host, sizeof(int)));
    CUDA_CHECK(cudaMallocHost(&s->token_host, T * sizeof(int)));
    CUDA_CHECK(cudaMallocHost(&s->p_H_host, 2 * T * sizeof(float)));
}

// Plan the device memory for n_ctx positions and batches of cap rows, print the plan, refuse
// clearly when it does not fit the free memory, then upload the weights and allocate the rest.
extern "C" Gpu *gpu_load(const GpuModel *m, int n_ctx, int cap, uint32_t k_type, uint32_t v_type) {
    if (m->size != sizeof(GpuModel)) {
        fprintf(stderr, "clover: error: internal: clover.c and clover.cu disagree on struct GpuModel\n");
        exit(1);
    }
    const GpuConfig *c = &m->c;
    Plan p = plan(m, n_ctx, cap, k_type, v_type);
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    double need = p.weights + p.kv + p.gdn + p.scratch;
    char w[32], k[32], g[32], sc[32], t[32], f[32];
    human(w, sizeof w, p.weights), human(k, sizeof k, p.kv), human(g, sizeof g, p.gdn);
    human(sc, sizeof sc, p.scratch), human(t, sizeof t, need), human(f, sizeof f, (double)free_b);
    if (need > 0.97 * (double)free_b) {   // a little room for the CUDA context's own allocations
        fprintf(stderr, "clover: error: the GPU needs %s (weights %s, KV cache %s for -c %d, GDN state %s, scratch %s for -ub %d) "
                        "but %s is free; use a smaller -c or -ub, a smaller quantization, or -ngl 0 for the CPU\n",
                t, w, k, n_ctx, g, sc, cap, f);
        exit(1);
    }
    fprintf(stderr, "clover: GPU memory: weights %s, KV cache %s (-c %d), GDN state %s, scratch %s (-ub %d): %s of %s free\n",
            w, k, n_ctx, g, sc, cap, t, f);
    Gpu *gpu = (Gpu *)xmalloc(sizeof(Gpu));
    memset(gpu, 0, sizeof *gpu);
    gpu->c = *c;
    gpu->dump = m->dump, gpu->dump_arg = m->dump_arg;
    gpu->output = upload_mat(&m->output, 1);
    gpu->output_norm = upload_vec(m->output_norm, c->n_embd);
    gpu->layers = (Layer *)xmalloc((size_t)c->n_layer * sizeof(Layer));
    for (int il = 0; il < c->n_layer; il++) gpu->layers[il] = upload_layer(c, &m->layers[il]);
    state_init(&gpu->st, c, gpu->layers, n_ctx, cap, k_type, v_type);
    scratch_init(&gpu->sc, c, cap);
    mma_split_init();
    return gpu;
}


// ================================================================================================
// 12. The forward pass on the device (clover.c section 9, "the whole pass")
// ================================================================================================
// The same steps in the same order as clover.c's forward pass, each a kernel (or a few) on the
// device; the host only launches. A row's result never depends on the batch around it: every
// kernel computes each row (or head, or expert row) in one fixed order, so a verify batch's rows
// equal single-token decoding's bit for bit, and exact draft-self prints what plain decoding prints.
enum Pass { CAUSAL, PREVIEW };

// --dump-tensors: every dump point of clover.c's pass (the names, shapes and places of its dump,
// dump3, dump_slice, dump_state and the dump_* helpers of its section 10), copied to the host and
// handed to clover.c's writer, so that test/dumpcmp.py compares the two builds op by op. What the
// device computes is copied as it is; the values clover.c recomputes only for its dumps are derived
// the same way here, on the host from the device's values (conv_input's layout, a_softplus, the SiLU
// of conv_output_silu, the q and gate halves, the gate and shared-expert sigmoids, the routing
// steps, the weighted expert rows; silu, sigmoid and softplus are host functions too). What a fused
// kernel keeps inside, it exposes while dumping: conv_output_raw by gdn_conv_gpu once more in its
// raw mode (the sums before the SiLU and the norms), Qcur_normed and Kcur_normed by attn_prep into
// dump buffers; and the experts' and the shared expert's gate and up run unfused (matmul_id_gpu or
// matmuls twice, then swiglu_gpu: swiglu_id's twins, the same bits, checked by --check-ops), so that
// their rows exist. A no-op without --dump-tensors; with it, the host waits at each point.

// host slot i (of gpu->dump_host) with room for n floats
static float *dump_buf(Gpu *gpu, int i, size_t n) {
    if (gpu->dump_n[i] < n) {
        free(gpu->dump_host[i]);
        gpu->dump_host[i] = (float *)xmalloc(n * sizeof(float));
        gpu->dump_n[i] = n;
    }
    return gpu->dump_host[i];
}
// the n floats (or ints) at device address x, copied into host slot i
static float *fetch(Gpu *gpu, int i, const void *x, size_t n) {
    float *h = dump_buf(gpu, i, n);
    host_copy(h, x, n * sizeof(float));
    return h;
}
// n values of each of `rows` host rows `stride` floats apart, packed into host slot i
static float *gather(Gpu *gpu, int i, const float *h, size_t stride, int rows, size_t n) {
    float *b = dump_buf(gpu, i, (size_t)rows * n);
    for (int r = 0; r < rows; r++) memcpy(b + r * n, h + r * stride, n * sizeof(float));
    return b;
}
// rows blocks of ne2 x ne1 x ne0 values in host memory, to the writer
static void dump_h(Gpu *gpu, const char *name, int il, const void *h, bool i32, int rows, int ne2, int ne1, int ne0) {
    gpu->dump(gpu->dump_arg, name, il, h, i32, rows, ne2, ne1, ne0);
}
// rows blocks of ne2 x ne1 x ne0 floats in device memory, stride floats apart
static void dump_nd(Gpu *gpu, const char *name, int il, const float *x, size_t stride, int rows, int ne2, int ne1, int ne0) {
    if (!gpu->dump) return;
    size_t row = (size_t)ne2 * ne1 * ne0;
    float *h = dump_buf(gpu, 0, (size_t)rows * row);
    for (int r = 0; r < rows; r++) host_copy(h + r * row, x + r * stride, row * sizeof(float));
    dump_h(gpu, name, il, h, false, rows, ne2, ne1, ne0);
}
static void dump(Gpu *gpu, const char *name, int il, const float *x, int T, int n) { dump_nd(gpu, name, il, x, (size_t)n, T, 1, 1, n); }
static void dump3(Gpu *gpu, const char *name, int il, const float *x, int T, int n1, int n0) {
    dump_nd(gpu, name, il, x, (size_t)n1 * n0, T, 1, n1, n0);
}
// n1 x n0 values of each of T rows stride floats apart
static void dump_slice(Gpu *gpu, const char *name, int il, const float *x, size_t stride, int T, int n1, int n0) {
    dump_nd(gpu, name, il, x, stride, T, 1, n1, n0);
}

// a_softplus = softplus(W_alpha a + dt_bias), gdn_gates' step before the product with ssm_a
static void dump_a_softplus(Gpu *gpu, int il, int T) {
    if (!gpu->dump) return;
    int H = gpu->c.n_v_heads;
    float *b = fetch(gpu, 1, gpu->sc.alpha, (size_t)T * H);
    const float *dt = fetch(gpu, 2, gpu->layers[il].dt, H);
    for (int i = 0; i < T * H; i++) b[i] = softplus(b[i] + dt[i % H]);
    dump_h(gpu, "a_softplus", il, b, false, T, 1, 1, H);
}

// Before gdn_advance moves the ring: conv_input (channel-major [ring | u]), conv_output_raw (the
// conv by gdn_conv_gpu's raw mode into s->conv, which gdn_advance then overwrites), conv_output_silu, q_conv,
// k_conv, and the state before the batch, state_predelta (clover.c's dump_gdn_conv).
static void dump_gdn_conv(Gpu *gpu, int il, int T) {
    if (!gpu->dump) return;
    const GpuConfig *c = &gpu->c;
    Scratch *s = &gpu->sc;
    int C = c->conv_dim, R = c->d_conv - 1, d = c->d_state;
    const float *ring = fetch(gpu, 1, gpu->st.ring[il], (size_t)R * C), *u = fetch(gpu, 2, s->qkv, (size_t)T * C);
    float *in = dump_buf(gpu, 3, (size_t)(R + T) * C);
    for (int ch = 0; ch < C; ch++)
        for (int j = 0; j < R + T; j++) in[(size_t)ch * (R + T) + j] = j < R ? ring[(size_t)j * C + ch] : u[(size_t)(j - R) * C + ch];
    dump_h(gpu, "conv_input", il, in, false, 1, 1, C, R + T);
    gdn_conv_gpu(gpu->layers[il].conv, nullptr, c->d_conv, C, gpu->st.ring[il], s->qkv, T, d, 2 * c->n_k_heads, c->eps, true, false, s->conv, Gates{});
    dump(gpu, "conv_output_raw", il, s->conv, T, C);
    float *y = fetch(gpu, 1, s->conv, (size_t)T * C);
    for (size_t i = 0; i < (size_t)T * C; i++) y[i] = silu(y[i]);
    dump_h(gpu, "conv_output_silu", il, y, false, T, 1, 1, C);
    dump_h(gpu, "q_conv", il, gather(gpu, 2, y, C, T, (size_t)c->n_k_heads * d), false, T, 1, c->n_k_heads, d);
    dump_h(gpu, "k_conv", il, gather(gpu, 2, y + c->key_dim, C, T, (size_t)c->n_k_heads * d), false, T, 1, c->n_k_heads, d);
    dump_nd(gpu, "state_predelta", il, gpu->st.S[il], 0, 1, c->n_v_heads, d, d);
}

// The q (part 0) or gate (part 1) halves of the attention's qg rows ([T][n_head][2 head_dim]), packed
// as [T][n_head][head_dim] in host slot 2
static float *qg_halves(Gpu *gpu, int T, int part) {
    int hd = gpu->c.head_dim, H = gpu->c.n_head;
    const float *qg = fetch(gpu, 1, gpu->sc.qg, (size_t)T * H * 2 * hd);
    return gather(gpu, 2, qg + (size_t)part * hd, (size_t)2 * hd, T * H, (size_t)hd);
}
static void dump_q_heads(Gpu *gpu, const char *name, int il, int T) {
    if (gpu->dump) dump_h(gpu, name, il, qg_halves(gpu, T, 0), false, T, 1, gpu->c.n_head, gpu->c.head_dim);
}
// gate_reshaped and gate_sigmoid (the attention kernel applies the sigmoid on the way)
static void dump_gates(Gpu *gpu, int il, int T) {
    if (!gpu->dump) return;
    int n = gpu->c.n_head * gpu->c.head_dim;
    float *g = qg_halves(gpu, T, 1);
    dump_h(gpu, "gate_reshaped", il, g, false, T, 1, 1, n);
    for (size_t i = 0; i < (size_t)T * n; i++) g[i] = sigmoid(g[i]);
    dump_h(gpu, "gate_sigmoid", il, g, false, T, 1, 1, n);
}

// The steps inside route_top_k, from its inputs and outputs: the chosen experts (int32), their
// probabilities, the sum (in double) and the clamped sum (clover.c's dump_routing).
static void dump_routing(Gpu *gpu, int il, int T) {
    if (!gpu->dump) return;
    int K = gpu->c.n_expert_used, X = gpu->c.n_expert;
    const int *sel = (const int *)fetch(gpu, 1, gpu->sc.sel, (size_t)T * K);
    const float *p = fetch(gpu, 2, gpu->sc.probs, (size_t)T * X);
    dump_h(gpu, "ffn_moe_topk", il, sel, true, T, 1, 1, K);
    float *w = dump_buf(gpu, 3, (size_t)T * (K + 2));
    for (int t = 0; t < T; t++) {
        double sum = 0;
        for (int r = 0; r < K; r++) {
            int e = sel[t * K + r];
            sum += w[t * K + r] = e >= 0 ? p[(size_t)t * X + e] : 0;
        }
        w[T * K + t] = (float)sum;
        w[T * (K + 1) + t] = fmaxf((float)sum, 6.103515625e-5f);
    }
    dump_h(gpu, "ffn_moe_weights", il, w, false, T, 1, K, 1);
    dump_h(gpu, "ffn_moe_weights_sum", il, w + T * K, false, T, 1, 1, 1);
    dump_h(gpu, "ffn_moe_weights_sum_clamped", il, w + T * (K + 1), false, T, 1, 1, 1);
}

// The expert rows by pair p = t*K + r, which is llama.cpp's [T][n_used][n] order (rank -1: the
// kernels wrote zeros), and each down row times its routing weight (ffn_moe_weighted).
static void dump_experts(Gpu *gpu, int il, int T) {
    if (!gpu->dump) return;
    const Scratch *s = &gpu->sc;
    int K = gpu->c.n_expert_used, F = gpu->c.n_ff, E = gpu->c.n_embd;
    dump3(gpu, "ffn_moe_gate", il, s->ge, T, K, F);
    dump3(gpu, "ffn_moe_up", il, s->ue, T, K, F);
    dump3(gpu, "ffn_moe_swiglu", il, s->he, T, K, F);
    dump3(gpu, "ffn_moe_down", il, s->ye, T, K, E);
    float *y = fetch(gpu, 1, s->ye, (size_t)T * K * E);
    const float *w = fetch(gpu, 2, s->w, (size_t)T * K);
    for (size_t i = 0; i < (size_t)T * K * E; i++) y[i] *= w[i / E];
    dump_h(gpu, "ffn_moe_weighted", il, y, false, T, 1, K, E);
}

// The shared expert's FFN rows, its gate logit, the sigmoid and the gated rows moe_shared adds
static void dump_shared_expert(Gpu *gpu, int il, int T) {
    if (!gpu->dump) return;
    const Scratch *s = &gpu->sc;
    int F = gpu->c.n_ff_shexp, E = gpu->c.n_embd;
    dump(gpu, "ffn_gate", il, s->ge, T, F);
    dump(gpu, "ffn_up", il, s->ue, T, F);
    dump(gpu, "ffn_swiglu", il, s->hs, T, F);
    dump(gpu, "ffn_shexp", il, s->sh, T, E);
    dump(gpu, "shared_expert_gate", il, s->sh_logit, T, 1);
    float *g = fetch(gpu, 1, s->sh_logit, (size_t)T), *y = fetch(gpu, 2, s->sh, (size_t)T * E);
    for (int t = 0; t < T; t++) g[t] = sigmoid(g[t]);
    for (size_t i = 0; i < (size_t)T * E; i++) y[i] *= g[i / E];
    dump_h(gpu, "shared_expert_gate_sigmoid", il, g, false, T, 1, 1, 1);
    dump_h(gpu, "ffn_shexp_gated", il, y, false, T, 1, 1, E);
}

// A matmul input: T rows of floats x and, where xq is not NULL, the same rows rounded to dot type dt
// there: what a norm leaves (add_norm_gpu, moe_out_gpu write xn and its rounding into sc.xq, and only
// they write sc.xq), so the first matrices after it read the rounding it made.
struct Input { const float *x; const void *xq; uint32_t dt; const void *xq_sh = nullptr; uint32_t dt_sh = 0; };   // xq_sh: a second rounding (the shared expert's)

// Whether the blocks of an expert kernel (matmul_id_gpu, swiglu_id_gpu) for T rows of matrix w
// round their input rows themselves (block_input): one row a job (a decode step; a few rows of a type
// without a batch form); a batch on the tensor cores reads rows rounded before it, by a launch.
static bool rows_by_block(const Mat *w, int T) { return T <= MAX_ROWS && !(T > 1 && mma_batch(w->type, w->n_in)); }

// in as a matmul with weights of type wtype reads it: x itself for F32, the input's rounding where it
// has this dot type; else, for a kernel of one row a job (by_block: matvec_kernel, swiglu_id_kernel)
// where the row fits, NULL: each block rounds the floats in.x itself (block_input), no launch; else
// rounded now into sc.xq2 (which no Input holds).
static const void *rounded(Gpu *gpu, Input in, uint32_t wtype, int64_t n, int T, bool by_block) {
    uint32_t dt = dot_type(wtype);
    if (dt == T_F32) return in.x;
    if (in.xq && in.dt == dt) return in.xq;
    if (in.xq_sh && in.dt_sh == dt) return in.xq_sh;
    if (by_block && rounds_in_block(dt, n)) return nullptr;
    quantize_row_gpu(wtype, in.x, gpu->sc.xq2, n, T);
    return gpu->sc.xq2;
}

// rounded()'s counterpart for rows a launch is about to make (a SwiGLU's): what the matrix of type
// wtype that reads them (by_block as rounded() takes it) needs rounded before it, as a Rounding of
// the rows into q by that launch (count: the scratch's); none where the matrix reads floats or its
// blocks round the row themselves.
static Rounding rounding_for(Gpu *gpu, uint32_t wtype, int64_t n, bool by_block, uint8_t *q) {
    uint32_t dt = dot_type(wtype);
    if (dt == T_F32 || (by_block && rounds_in_block(dt, n))) return Rounding{};
    return Rounding{q, act_bytes(dt, n), dt, gpu->sc.round_count};
}

// y_i = W_i x[t] for the n matrices that read one input (T rows), in order: one launch for each run of
// matrices of one type (a GDN layer's projections, attention's q, k and v, the router and the shared
// expert's gate), the input rounded once a run at most (a decode step's row: by the blocks).
// clover.c's matmul, for each of them.
// The trailing run of F32 matrices (a GDN layer's beta and alpha) of a decode step or of a verify or
// preview batch (T <= MAX_ROWS) rides with the run before it (riders). after (not NULL: a decode
// step's layer's last matrix): the residual step after it, by its launch (matmuls_gpu).
static void matmuls(Gpu *gpu, Input in, int T, int n, const Mat *const w[], float *const y[], const Residual *after = nullptr) {
    int k = n;   // w[k..n-1]: the riders
    while (T <= MAX_ROWS && k > 0 && w[k - 1]->type == T_F32) k--;
    if (k == 0) k = n;   // all F32: nothing to ride with
    Residual rs = after ? *after : Residual{};   // (its count: the scratch's)
    if (after) check_residual(rs), rs.count = gpu->sc.counts;
    for (int i = 0, j; i < k; i = j) {
        for (j = i + 1; j < k && w[j]->type == w[i]->type; j++) {}
        Rider rd = riders(w + k, j == k ? n - k : 0, in.x, y + k, T);
        matmuls_gpu(w + i, j - i, rounded(gpu, in, w[i]->type, w[i]->n_in, T, T == 1), in.x, T, y + i, rd, after && j == n ? &rs : nullptr);
    }
}

static void copy_floats(float *dst, const float *src, size_t n) {
    dev_to_dev(dst, src, n * sizeof(float));
}

// --- Gated DeltaNet ------------------------------------------------------------------------------
// The recurrent part for T rows of pre-conv input u: the conv over [ring | u], SiLU and the q/k L2
// norms, the ring advanced (and the gates gt computed, where given: they are g and beta), then the
// delta rule from S (clover.c's gdn_advance; also the rollback's replay, with the logged gates), and
// the gated norm nm in its launch (nm.y NULL: none).
static void gdn_advance(Gpu *gpu, int il, int T, const float *u, const float *g, const float *beta, Gates gt, GatedNorm nm) {
    const GpuConfig *c = &gpu->c;
    Scratch *s = &gpu->sc;
    float *ring = gpu->st.ring[il];
    gdn_conv_gpu(gpu->layers[il].conv, nullptr, c->d_conv, c->conv_dim, ring, u, T, c->d_state, 2 * c->n_k_heads, c->eps, false, true, s->conv, gt);
    delta_rule_gpu(gpu->st.S[il], gpu->st.S[il], s->conv, g, beta, s->o, T, false, c->n_v_heads, c->n_k_heads, c->d_state, c->conv_dim,
                   c->key_dim, c->value_dim, nm);
}

// The preview mixer (spec S2.4), never writing the committed state: the causal conv plus the
// right taps (and the gates gt), a forward scan from a copy of S, and, where the layer has it, a
// reverse scan from zero state mixed in per value head: o_t = o_fwd_t + gamma_h o_rev_t. nm: the
// gated norm in the forward scan's launch, for a layer without the reverse scan (nm.y NULL: none).
static void gdn_preview(Gpu *gpu, const Layer *L, int il, int T, Input in, Gates gt, GatedNorm nm) {
    const GpuConfig *c = &gpu->c;
    Scratch *s = &gpu->sc;
    int H = c->n_v_heads, d = c->d_state;
    gdn_conv_gpu(L->conv, L->conv_right, c->d_conv, c->conv_dim, gpu->st.ring[il], s->qkv, T, d, 2 * c->n_k_heads, c->eps, false, false, s->conv, gt);
    delta_rule_gpu(gpu->st.S[il], nullptr, s->conv, s->g, s->beta, s->o, T, false, H, c->n_k_heads, d, c->conv_dim, c->key_dim, c->value_dim, nm);
    if (!L->a_rev) return;
    const Mat *w[] = {&L->beta_rev, &L->alpha_rev};
    float *y[] = {s->beta_rev_logit, s->alpha_rev};
    matmuls(gpu, in, T, 2, w, y);   // W_beta_rev a, W_alpha_rev a
    gdn_gates_gpu(L->a_rev, L->dt_rev, s->alpha_rev, s->beta_rev_logit, T, H, s->g_rev, s->beta_rev);
    delta_rule_gpu(nullptr, nullptr, s->conv, s->g_rev, s->beta_rev, s->o_rev, T, true, H, c->n_k_heads, d, c->conv_dim, c->key_dim, c->value_dim,
                   GatedNorm{});
    gdn_rev_mix_gpu(s->o, s->o_rev, L->rev_mix, T, H, d);
}

// A Gated DeltaNet layer on the normed input in, the mixer output in s->mix; log: record the
// recurrence's inputs (rollback): the layer computes u, g and beta straight into its log (the
// scratch's three buffers stand in for the layer's log meanwhile), three copies a layer fewer.
// after: the residual step after it, by its last launch (NULL: none).
static void gdn_layer(Gpu *gpu, Pass pass, int il, int T, bool log, Input in, const Residual *after) {
    const GpuConfig *c = &gpu->c;
    const Layer *L = &gpu->layers[il];
    Scratch *s = &gpu->sc;
    float *scratch[] = {s->qkv, s->g, s->beta};
    if (log) s->qkv = gpu->st.log_u[il], s->g = gpu->st.log_g[il], s->beta = gpu->st.log_beta[il];
    int H = c->n_v_heads;
    int C = c->conv_dim, d = c->d_state;
    const Mat *w[] = {&L->qkv, &L->gate, &L->beta, &L->alpha};
    float *y[] = {s->qkv, s->z, s->beta_logit, s->alpha};
    matmuls(gpu, in, T, 4, w, y);   // u = W_qkv a, z = W_gate a, W_beta a, W_alpha a
    dump3(gpu, "beta", il, s->beta_logit, T, H, 1);
    dump(gpu, "alpha", il, s->alpha, T, H);
    dump(gpu, "linear_attn_qkv_mixed", il, s->qkv, T, C);
    dump(gpu, "z", il, s->z, T, c->value_dim);
    dump_a_softplus(gpu, il, T);
    Gates gt = {L->a, L->dt, s->alpha, s->beta_logit, s->g, s->beta, H};   // g, beta: computed by the conv's launch
    // RMSNorm(o_h) * SiLU(z_h), rounded for ssm_out: by the scan's launch where it is the last step,
    // in a pass of at most MAX_ROWS rows (a prompt's batch: a block a row, not a block a group of heads)
    bool fused = (pass == CAUSAL || !L->a_rev) && T <= MAX_ROWS;
    GatedNorm nm = fused ? gated_norm_in_scan(s->z, L->ssm_norm, c->eps, s->o_normed, L->ssm_out.type, s->xq2, s->counts, H, d) : GatedNorm{};
    if (pass == CAUSAL) {
        dump_gdn_conv(gpu, il, T);   // conv_input .. k_conv and state_predelta, from the ring before it moves
        gdn_advance(gpu, il, T, s->qkv, s->g, s->beta, gt, nm);
    } else gdn_preview(gpu, L, il, T, in, gt, nm);
    dump3(gpu, "beta_sigmoid", il, s->beta, T, H, 1);
    dump(gpu, "gate", il, s->g, T, H);
    dump_slice(gpu, "q_conv_predelta", il, s->conv, C, T, c->n_k_heads, d);
    dump_slice(gpu, "k_conv_predelta", il, s->conv + c->key_dim, C, T, c->n_k_heads, d);
    dump_slice(gpu, "v_conv_predelta", il, s->conv + 2 * c->key_dim, C, T, H, d);
    if (pass == CAUSAL) dump_nd(gpu, "new_state", il, gpu->st.S[il], 0, 1, H, d, d);
    dump3(gpu, "attn_output", il, s->o, T, H, d);
    if (!fused) gdn_gated_norm_gpu(s->o, s->z, L->ssm_norm, T, H, d, c->eps, s->o_normed, L->ssm_out.type, s->xq2);
    dump(gpu, "final_output", il, s->o_normed, T, c->value_dim);
    const Mat *out = &L->ssm_out;
    matmuls(gpu, {s->o_normed, s->xq2, dot_type(out->type)}, T, 1, &out, &s->mix, after);   // out = W_out [...]_h
    dump(gpu, "linear_attn_out", il, s->mix, T, c->n_embd);
    s->qkv = scratch[0], s->g = scratch[1], s->beta = scratch[2];
}

// --- gated attention -----------------------------------------------------------------------------
// Causal: row t sees positions <= pos + t. Preview: the block's K/V go to the cache rows after the
// committed prefix (nothing there is committed) and every row sees the prefix and the whole block.
// after: as for gdn_layer.
static void attn_layer(Gpu *gpu, Pass pass, int il, int T, Input in, const Residual *after) {
    const GpuConfig *c = &gpu->c;
    const Layer *L = &gpu->layers[il];
    Scratch *s = &gpu->sc;
    State *st = &gpu->st;
    int hd = c->head_dim, kvd = c->n_head_kv * hd;
    const Mat *w[] = {&L->wq, &L->wk, &L->wv};
    float *y[] = {s->qg, s->kr, s->vr};
    matmuls(gpu, in, T, 3, w, y);   // [q_h | gate_h] = W_q a, k = W_k a, v = W_v a
    dump(gpu, "Qcur_full", il, s->qg, T, 2 * c->n_head * hd);
    dump_q_heads(gpu, "Qcur_reshaped", il, T);
    dump_gates(gpu, il, T);   // gate_reshaped, gate_sigmoid
    dump(gpu, "Vcur", il, s->vr, T, kvd);
    // RMSNorm and rope of the q and k heads, the K and V rows into the cache at pos..
    attn_prep_gpu(s->qg, s->kr, s->vr, L->q_norm, L->k_norm, T, c->n_head, c->n_head_kv, hd, c->eps, c->n_rot, c->rope_base, s->pos, st->k_type,
                  st->k[il], st->v_type, st->v[il], gpu->dump ? s->ao : nullptr, gpu->dump ? s->ao_gated : nullptr);   // (ao, ao_gated: free until the attention)
    dump3(gpu, "Qcur_normed", il, s->ao, T, c->n_head, hd);
    dump3(gpu, "Kcur_normed", il, s->ao_gated, T, c->n_head_kv, hd);
    dump_q_heads(gpu, "Qcur", il, T);
    dump3(gpu, "Kcur", il, s->kr, T, c->n_head_kv, hd);
    attention_gpu(s->qg, st->k[il], st->v[il], st->k_type, st->v_type, s->pos, T, pass == CAUSAL, c->n_head, c->n_head_kv, hd,
                  c->kq_scale, s->att, s->ao, s->ao_gated, L->wo.type, s->xq2, s->counts);
    dump(gpu, "attn_pregate", il, s->ao, T, c->n_head * hd);
    dump(gpu, "attn_gated", il, s->ao_gated, T, c->n_head * hd);
    const Mat *wo = &L->wo;
    matmuls(gpu, {s->ao_gated, s->xq2, dot_type(wo->type)}, T, 1, &wo, &s->mix, after);   // out = W_o o
    dump(gpu, "attn_output", il, s->mix, T, c->n_embd);
}

// --- MoE -----------------------------------------------------------------------------------------
// Expert FFNs for T rows routed in s->sel / s->w: pair p = t*K + r runs expert sel[p] on row t,
//   ye_p = down_e(silu(gate_e m) * up_e m)
// (summed in rank order by moe_out_gpu). The expert ids stay on the device: each expert matmul reads
// them (matmul_id_gpu, swiglu_id_gpu).
static void moe_experts(Gpu *gpu, const Layer *L, int T, Input in) {
    const GpuConfig *c = &gpu->c;
    Scratch *s = &gpu->sc;
    int K = c->n_expert_used, E = c->n_embd, F = c->n_ff;
    bool batch = T > 1, down_by_block = rows_by_block(&L->down_exps, T);
    Input h = {s->he, nullptr, 0};
    if (L->gate_exps.type == L->up_exps.type && !gpu->dump) {   // h = silu(gate_e m) * up_e m in one launch (dumps: gate and up kept)
        const void *x = rounded(gpu, in, L->up_exps.type, E, T, rows_by_block(&L->up_exps, T));
        // and h rounded for the down projection in the same launch, into xq2 unless the launch reads its input there
        Rounding rq = x == s->xq2 ? Rounding{} : rounding_for(gpu, L->down_exps.type, F, down_by_block, s->xq2);
        swiglu_id_gpu(&L->gate_exps, &L->up_exps, s->sel, T * K, K, batch, x, in.x, s->he, Rider{}, Routing{}, rq);
        if (rq.q) h = {s->he, s->xq2, rq.dt};
    } else {   // (gate's rounding, if in xq2, is read before the next rounding there)
        matmul_id_gpu(&L->gate_exps, s->sel, T * K, K, batch, rounded(gpu, in, L->gate_exps.type, E, T, rows_by_block(&L->gate_exps, T)), in.x, s->ge);
        matmul_id_gpu(&L->up_exps, s->sel, T * K, K, batch, rounded(gpu, in, L->up_exps.type, E, T, rows_by_block(&L->up_exps, T)), in.x, s->ue);
        swiglu_gpu(s->ge, s->ue, s->he, (int64_t)T * K * F);
    }
    matmul_id_gpu(&L->down_exps, s->sel, T * K, 1, batch, rounded(gpu, h, L->down_exps.type, F, T * K, down_by_block), s->he, s->ye);
}

// Shared expert: sh = down_sh(hs), hs = silu(gate_sh m) * up_sh m (its gate sigmoid(g_sh . m) is
// applied by moe_out_gpu, g_sh . m computed with the router). rd: the router and g_sh riding with the
// gate and up, and rt the routing after them, in the same launch (a decode step; then hs is made
// before the routing, by moe_layer); NULL: not so. Returns hs as the down projection's input: in a
// batch, rounded for it by the same launch (into hsq).
static Input moe_shared_up(Gpu *gpu, const Layer *L, int T, Input in, const Rider *rd, Routing rt) {
    const GpuConfig *c = &gpu->c;
    Scratch *s = &gpu->sc;
    int E = c->n_embd, F = c->n_ff_shexp;
    Input hs = {s->hs, nullptr, 0};
    if (L->gate_shexp.type == L->up_shexp.type && !gpu->dump) {   // one launch (swiglu_id with one matrix; dumps: gate and up kept)
        const void *x = rounded(gpu, in, L->up_shexp.type, E, T, rows_by_block(&L->up_shexp, T));
        Rounding rq = rounding_for(gpu, L->down_shexp.type, F, T == 1, s->hsq);   // (matmuls' by_block: T == 1)
        swiglu_id_gpu(&L->gate_shexp, &L->up_shexp, nullptr, T, 1, T > 1, x, in.x, s->hs, rd ? *rd : Rider{}, rt, rq);
        if (rq.q) hs = {s->hs, s->hsq, rq.dt};
    } else {
        const Mat *w[] = {&L->up_shexp, &L->gate_shexp};
        float *y[] = {s->ue, s->ge};
        matmuls(gpu, in, T, 2, w, y);
        swiglu_gpu(s->ge, s->ue, s->hs, (int64_t)T * F);
    }
    return hs;
}

// The MoE FFN on the normed input in: route each row to its experts (in the preview, within the
// block's coreset), the experts, the shared expert; their sum (moe_out) follows, by the shared
// expert's last launch where after is not NULL.
static void moe_layer(Gpu *gpu, Pass pass, int il, int T, Input in, const Residual *after) {
    const GpuConfig *c = &gpu->c;
    const Layer *L = &gpu->layers[il];
    Scratch *s = &gpu->sc;
    int K = c->n_expert_used;
    const Mat *w[] = {&L->router, &L->shexp_gate};
    float *y[] = {s->router_logits, s->sh_logit};
    // W_router m, g_sh . m: riding with the shared expert's gate and up in a decode step or a verify or preview batch, else
    // one launch where both are F32, and the routing after them in the same launch (the last rider block routes the rows)
    bool ride = T <= MAX_ROWS && !gpu->dump && L->gate_shexp.type == L->up_shexp.type && L->router.type == T_F32 && L->shexp_gate.type == T_F32 &&
                c->n_expert <= MAX_EXPERT;
    bool use_coreset = pass == PREVIEW && c->coreset_top_p > 0;   // a coreset needs every row's probabilities first
    Input hs;   // the shared expert's SwiGLU rows (moe_shared_up)
    if (ride) {
        Rider rd = riders(w, 2, in.x, y, T);
        Routing rt = {s->router_logits, s->probs, s->sel, s->w, c->n_expert, K, c->expert_weights_scale, s->done};
        hs = moe_shared_up(gpu, L, T, in, &rd, use_coreset ? Routing{} : rt);
    } else matmuls(gpu, in, T, 2, w, y);
    dump(gpu, "ffn_moe_logits", il, s->router_logits, T, c->n_expert);
    if (!ride || use_coreset)
        route_gpu(s->router_logits, s->probs, nullptr, s->sel, s->w, T, c->n_expert, K, c->expert_weights_scale, true, !use_coreset);
    if (use_coreset) {
        coreset_gpu(s->probs, T, c->n_expert, c->coreset_top_p, s->coreset);
        route_gpu(nullptr, s->probs, s->coreset, s->sel, s->w, T, c->n_expert, K, c->expert_weights_scale, false, true);
    }
    dump(gpu, "ffn_moe_probs", il, s->probs, T, c->n_expert);
    dump_routing(gpu, il, T);   // ffn_moe_topk, ffn_moe_weights[_sum[_clamped]]: route_top_k's steps
    dump(gpu, "ffn_moe_weights_norm", il, s->w, T, K);
    moe_experts(gpu, L, T, in);
    dump_experts(gpu, il, T);   // ffn_moe_gate, _up, _swiglu, _down, _weighted, by pair
    if (!ride) hs = moe_shared_up(gpu, L, T, in, nullptr, Routing{});
    const Mat *down = &L->down_shexp;
    matmuls(gpu, hs, T, 1, &down, &s->sh, after);
    dump_shared_expert(gpu, il, T);   // ffn_gate .. ffn_shexp_gated (moe_out, after, overwrites sh; dumps: not fused)
}

// --- the whole pass ------------------------------------------------------------------------------
// the type of the first matrix that reads layer il's normed input (the output head after the last):
// the norm before it rounds for that type
static uint32_t first_reader(const Gpu *gpu, int il) {
    if (il == gpu->c.n_layer) return gpu->output.type;
    const Layer *L = &gpu->layers[il];
    return L->recurrent ? L->qkv.type : L->wq.type;
}

// Every layer over the T <= cap rows of embeddings in s->x, at positions *s->pos..; the residual
// stream ends in s->x, and its output norm (rounded for the head) in s->xn, s->xq. Each norm is one
// kernel with the residual add before it (a Residual: add_norm, moe_out) and the rounding for the
// matrices after it; in a decode step (without dumps, which read the rows between) the launch of the
// mixer's or the FFN's last matrix ends with it: two launches less a layer.
static Input forward_layers(Gpu *gpu, Pass pass, int T, bool log) {
    const GpuConfig *c = &gpu->c;
    Scratch *s = &gpu->sc;
    int E = c->n_embd, K = c->n_expert_used;
    uint32_t t0 = first_reader(gpu, 0);
    add_norm_gpu(s->x, nullptr, gpu->layers[0].attn_norm, E, c->eps, t0, s->xn, s->xq, T);
    Input in = {s->xn, s->xq, dot_type(t0)};
    for (int il = 0; il < c->n_layer; il++) {
        const Layer *L = &gpu->layers[il];
        dump(gpu, "attn_norm", il, s->xn, T, E);
        bool fuse = T == 1 && !gpu->dump;
        // x += mix; m = RMSNorm(x), rounded for the experts, and for the shared expert where it has
        // another dot type and a batch's launch would otherwise round it (rounded(): a node less)
        const Mat *sh = &L->up_shexp;
        void *xq_sh = dot_type(sh->type) != dot_type(L->up_exps.type) && !rows_by_block(sh, T) ? s->xq_sh : nullptr;
        Residual post = add_norm_step(s->x, s->mix, L->post_norm, E, c->eps, L->up_exps.type, s->xn, s->xq, sh->type, xq_sh);
        if (L->recurrent) gdn_layer(gpu, pass, il, T, log, in, fuse ? &post : nullptr);
        else attn_layer(gpu, pass, il, T, in, fuse ? &post : nullptr);
        if (!fuse) residual_gpu(post, T);
        in = {s->xn, s->xq, dot_type(L->up_exps.type), xq_sh, dot_type(sh->type)};
        dump(gpu, "attn_residual", il, s->x, T, E);
        dump(gpu, "attn_post_norm", il, s->xn, T, E);
        uint32_t next = first_reader(gpu, il + 1);
        const float *norm = il + 1 < c->n_layer ? gpu->layers[il + 1].attn_norm : gpu->output_norm;
        Residual out = moe_out_step(s->x, s->sel, s->w, s->ye, K, s->mix, s->sh, s->sh_logit, norm, E, c->eps, next, s->xn, s->xq);
        moe_layer(gpu, pass, il, T, in, fuse ? &out : nullptr);
        if (!fuse) residual_gpu(out, T);
        in = {s->xn, s->xq, dot_type(next)};
        dump(gpu, "ffn_moe_out", il, s->mix, T, E);
        dump(gpu, "ffn_out", il, s->sh, T, E);
        dump(gpu, "l_out", il, s->x, T, E);
    }
    return in;
}

// The LM head for rows first..first+n-1 of the output norm in (forward_layers'): logits in s->logits ([n][n_vocab]).
static void lm_head(Gpu *gpu, Input in, int first, int n) {
    const GpuConfig *c = &gpu->c;
    Scratch *s = &gpu->sc;
    const float *xn = in.x + (size_t)first * c->n_embd;
    dump(gpu, "result_norm", -1, xn, n, c->n_embd);
    Input rows = {xn, in.xq ? (const uint8_t *)in.xq + first * act_bytes(in.dt, c->n_embd) : nullptr, in.dt};
    const Mat *w = &gpu->output;
    matmuls(gpu, rows, n, 1, &w, &s->logits);
    dump(gpu, "result_output", -1, s->logits, n, c->n_vocab);
}

// The pass of shape k, from the layers to what it makes of its logits. Every pass of
// at most MAX_ROWS rows (a decode step, a verify or preview batch) runs as one CUDA graph, captured
// the first time its shape is met and replayed after: a launch instead of one per kernel (~460 at
// T = 1, ~540 in a verify), so the GPU runs the kernels back to back instead of waiting for the
// host to launch each. Longer passes (a prompt's prefill) and dumps (the host copies at each point)
// launch kernel by kernel.
static void run_pass(Gpu *gpu, PassShape k) {
    Scratch *s = &gpu->sc;
    int V = gpu->c.n_vocab;
    Input out = forward_layers(gpu, k.preview ? PREVIEW : CAUSAL, k.T, k.log);
    if (k.n == 0) return;
    lm_head(gpu, out, k.first, k.n);
    if (k.out == BEST) best_token_gpu(s->logits, V, k.n, k.skip, s->token, s->p_H, s->p_H + k.n);
    else if (k.out == ARGMAX) argmax_gpu(s->logits, V, k.n, s->token);
}

static bool same_shape(PassShape a, PassShape b) {
    return a.preview == b.preview && a.log == b.log && a.T == b.T && a.first == b.first && a.n == b.n && a.skip == b.skip && a.out == b.out;
}

static void run_pass_graph(Gpu *gpu, PassShape k) {
    int i = 0;
    while (i < gpu->n_graphs && !same_shape(gpu->graphs[i].k, k)) i++;
    if (k.T > MAX_ROWS || gpu->dump || i == MAX_GRAPHS) {   // (the last: never in draft-self, a graph per shape it meets)
        run_pass(gpu, k);
        return;
    }
    if (i == gpu->n_graphs) {
        cudaGraph_t g;
        CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        run_pass(gpu, k);
        CUDA_CHECK(cudaStreamEndCapture(stream, &g));
        size_t nodes = 0;
        CUDA_CHECK(cudaGraphGetNodes(g, nullptr, &nodes));
        CUDA_CHECK(cudaGraphInstantiate(&gpu->graphs[i].g, g, 0));
        CUDA_CHECK(cudaGraphDestroy(g));
        gpu->graphs[i].k = k;
        gpu->n_graphs++;
        if (k.T == 1 && !k.preview && !k.log && k.n == 1)   // a decode step (a prompt's -ub 1 rows before its last make no logits)
            fprintf(stderr, "clover: GPU decode step: one CUDA graph of %zu kernels and copies\n", nodes);
    }
    CUDA_CHECK(cudaGraphLaunch(gpu->graphs[i].g, stream));
}

// What clover.c calls (clover.c section 15). A causal or preview pass over T rows of embeddings x (host,
// [T][n_embd]) at n_past, logging the GDN inputs if asked (a verify batch), with the logits of rows
// first..first+n_logits-1 copied to `logits`; or, token non-NULL (a greedy decode step, a greedy
// verify batch), only the argmax of each of those rows: n_logits ids down instead of n_logits rows
// of n_vocab floats (16 rows of the 248,320-token vocabulary are 16 MB, ~0.6 ms over PCIe); or,
// token and p_H non-NULL (a preview's drafts), each row's best_token without `skip`, its p in p_H[i]
// and H in p_H[n_logits + i]. In stream order: the inputs up (through pinned memory), the pass, the
// logits or the ids down; the host waits once, for those.
extern "C" void gpu_forward(Gpu *gpu, bool preview, const float *x, int T, int n_past, bool log, float *logits, int first, int n_logits,
                            int *token, int skip, float *p_H) {
    Scratch *s = &gpu->sc;
    size_t E = (size_t)gpu->c.n_embd, V = (size_t)gpu->c.n_vocab;
    memcpy(s->x_host, x, (size_t)T * E * sizeof(float));
    *s->pos_host = n_past;
    CUDA_CHECK(cudaMemcpyAsync(s->x, s->x_host, (size_t)T * E * sizeof(float), cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaMemcpyAsync(s->pos, s->pos_host, sizeof(int), cudaMemcpyHostToDevice, stream));
    PassOut out = token && p_H ? BEST : token ? ARGMAX : LOGITS;
    run_pass_graph(gpu, {preview, log, T, n_logits > 0 ? first : 0, n_logits > 0 ? n_logits : 0, out == BEST ? skip : 0, out});
    if (p_H) CUDA_CHECK(cudaMemcpyAsync(s->p_H_host, s->p_H, 2 * (size_t)n_logits * sizeof(float), cudaMemcpyDeviceToHost, stream));
    if (token) CUDA_CHECK(cudaMemcpyAsync(s->token_host, s->token, (size_t)n_logits * sizeof(int), cudaMemcpyDeviceToHost, stream));
    else if (n_logits > 0)
        CUDA_CHECK(cudaMemcpyAsync(s->logits_host, s->logits, (size_t)n_logits * V * sizeof(float), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    if (p_H) memcpy(p_H, s->p_H_host, 2 * (size_t)n_logits * sizeof(float));
    if (token) memcpy(token, s->token_host, (size_t)n_logits * sizeof(int));
    else if (n_logits > 0) memcpy(logits, s->logits_host, (size_t)n_logits * V * sizeof(float));
}

// Before a verify batch: the committed GDN state of every recurrent layer, saved on the device in one
// copy (clover.c's gdn_copy, layer by layer there).
extern "C" void gpu_gdn_save(Gpu *gpu) {
    if (gpu->st.gdn_floats) copy_floats(gpu->st.gdn_saved, gpu->st.gdn, gpu->st.gdn_floats);
}

// Rollback after a partly accepted verify batch: the saved state back, then the first `rows` logged
// rows replayed through gdn_advance, the function the batch used (clover.c's rollback).
extern "C" void gpu_rollback(Gpu *gpu, int rows) {
    State *st = &gpu->st;
    if (st->gdn_floats) copy_floats(st->gdn, st->gdn_saved, st->gdn_floats);
    for (int il = 0; il < gpu->c.n_layer; il++)
        if (gpu->layers[il].recurrent) gdn_advance(gpu, il, rows, st->log_u[il], st->log_g[il], st->log_beta[il], Gates{}, GatedNorm{});
    CUDA_CHECK(cudaStreamSynchronize(stream));
}


// ================================================================================================
// 13. --check-ops: every kernel against its CPU twin on the same random inputs at the model's shapes
// ================================================================================================
// What clover.c hands over (declared identically there, gpu_check_ops's caller; `size` guards the
// layout): its CPU twins and the model's shapes and matrices.
struct GpuCheck {
    size_t size;
    void (*quantize_row)(uint32_t wtype, const float *x, void *y, int64_t n);
    float (*dot)(uint32_t wtype, int64_t n_rows, const void *w, const void *a, int64_t n);   // row order
    void (*rmsnorm)(float *y, const float *x, const float *w, int n, float eps);
    void (*l2norm)(float *x, int n, float eps);
    void (*softmax)(float *x, int n);
    void (*silu_row)(float *y, const float *x, int n);
    int (*argmax)(const float *x, int n);
    int (*best_token)(const float *z, int V, int skip, float *p, float *H);
    // GDN twins (section 8)
    void (*gdn_gates)(const float *a, const float *dt, const float *alpha, const float *beta_logit, int T, int H, float *g, float *beta);
    void (*gdn_conv)(const float *wc, int K, int C, const float *ring, const float *u, int T, int ch0, int ch1, float *y);
    void (*gdn_conv_right)(const float *wr, int K, int C, const float *u, int T, int ch0, int ch1, float *y);
    void (*gdn_qk_norm)(float *y, int C, int d, int n_qk, float eps);   // one row
    void (*gdn_ring_push)(float *ring, const float *u, int T, int K, int C);
    void (*gdn_scan_head)(float *S, const float *y, const float *g, const float *beta, float *o, int T, bool reverse,
                          int H, int n_k_heads, int d, int C, int key_dim, int value_dim, int h);
    void (*gdn_rev_mix)(float *o, const float *o_rev, const float *gamma, int T, int H, int d);
    void (*gdn_gated_norm)(const float *o, const float *z, const float *w, int H, int d, float eps, float *y);   // one row
    int n_k_heads, n_v_heads, d_conv, conv_dim, key_dim, value_dim;
    // attention and MoE twins (sections 9, 10), and their shapes; up/down_exps: layer 0's stacked experts
    void (*attn_qk_norm)(float *qg, float *kr, const float *q_norm, const float *k_norm, int T, int n_head, int n_head_kv, int hd, float eps);
    void (*attn_rope)(float *qg, float *kr, int T, int pos, int n_head, int n_head_kv, int hd, int n_rot, float base);
    void (*store_as)(uint32_t type, void *dst, const float *x, int n);
    void (*attend)(const float *q, const float *gate, const uint8_t *K, size_t kstride, uint32_t k_type, const uint8_t *V,
                   size_t vstride, uint32_t v_type, int n, int hd, float kq_scale, int lanes, float *sc, float *acc, float *o, float *og);
    void (*route_top_k)(const float *p, const bool *allowed, int n_expert, int k, float weights_scale, int *sel, float *w);
    void (*coreset)(const float *p, int T, int n_expert, float top_p, bool *allowed);
    void (*swiglu)(const float *g, const float *u, float *h, int64_t n);
    void (*moe_sum)(const int *slot, const float *w, const float *y, int K, int E, float *out);
    void (*moe_shared_gate)(float *mix, const float *sh, float sh_logit, int E);
    int n_head_kv, n_expert_used;
    float kq_scale, coreset_top_p, expert_weights_scale;
    GpuMat up_exps, down_exps, gate_exps;
    int n_embd, n_head, head_dim, n_rot, n_expert, n_ff, n_vocab, d_state;
    float eps, rope_base;
    int n_mats;
    const GpuMat *mats;
};

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng_next(void) {   // xorshift64*
    rng_state ^= rng_state >> 12, rng_state ^= rng_state << 25, rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ull;
}
static float rng_uniform(void) { return (float)(rng_next() >> 40) / 16777216.0f; }   // [0, 1)
static float rng_normal(void) {   // Box-Muller
    float u = rng_uniform() + 1e-7f, v = rng_uniform();
    return sqrtf(-2 * logf(u)) * cosf(6.2831853f * v);
}


struct Tally { int n, failed; };

// one line per op: the error, its limit (0: exact), PASS or FAIL
static void report(Tally *t, const char *op, double err, double limit, const char *unit) {
    bool ok = err <= limit;   // a NaN error fails
    printf("%-44s max %-10s %-10.3g limit %-8.3g %s\n", op, unit, err, limit, ok ? "PASS" : "FAIL");
    t->n++, t->failed += !ok;
}

// max |a - b| / max |b| over n floats (a normwise relative error; NaN or inf where they differ in
// kind); 0 when equal bit for bit
static double rel_err(const float *a, const float *b, int64_t n) {
    double e = 0, scale = 0;
    for (int64_t i = 0; i < n; i++) {
        if (memcmp(&a[i], &b[i], 4) == 0) continue;
        if (isnan(a[i]) || isnan(b[i]) || isinf(a[i]) || isinf(b[i])) return INFINITY;
        e = fmax(e, fabs((double)a[i] - b[i]));
    }
    for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs((double)b[i]));
    return e == 0 ? 0 : e / (scale > 0 ? scale : 1);
}

// bytes that differ
static double bytes_differ(const void *a, const void *b, size_t n) {
    size_t d = 0;
    for (size_t i = 0; i < n; i++) d += ((const uint8_t *)a)[i] != ((const uint8_t *)b)[i];
    return (double)d;
}

static const int BATCHES[] = {1, 7, 16};

// Activations for the rounding checks: normal values with a few edge cases planted (a NaN, +-0,
// exact ties of every rounding, an inf, a value past fp16's range, subnormals).
static void fill_activations(float *x, int64_t n, bool edges) {
    for (int64_t i = 0; i < n; i++) x[i] = rng_normal();
    if (!edges) return;
    static const float special[] = {0.0f, -0.0f, 65520.0f, -70000.0f, 1e-6f, -3e-8f, 1.00048828125f, 0.5f, 2.5f};
    for (int64_t i = 0; i + 40 < n; i += 97) x[i] = special[(i / 97) % 9];
    if (n > 300) x[300] = NAN, x[301] = -NAN;
    if (n > 700) x[700] = INFINITY;
}

// A row rounded by the CPU (clover.c's blocks) in the device's split layout (section 3): its
// act_content bytes
static void split_act(uint32_t dt, const uint8_t *cpu, int64_t n, uint8_t *out) {
    if (dt == T_Q8_0)
        for (int64_t b = 0; b < n / 32; b++) {
            BlockQ8_0 x;
            memcpy(&x, cpu + b * sizeof x, sizeof x);
            memcpy(out + 32 * b, x.qs, 32), memcpy(out + n + 2 * b, &x.d, 2);
        }
    else if (dt == T_Q8_K)
        for (int64_t b = 0; b < n / 256; b++) {
            BlockQ8_K x;
            memcpy(&x, cpu + b * sizeof x, sizeof x);
            memcpy(out + 256 * b, x.qs, 256), memcpy(out + n + 32 * b, x.bsums, 32), memcpy(out + n + n / 8 + 4 * b, &x.d, 4);
        }
    else memcpy(out, cpu, row_bytes(dt, n));
}

// quantize_row vs quantize_q8_0 / q8_K / f16 / bf16: the rounded bytes are equal (the CPU's rows
// split as the device lays them out)
static void check_quantize(Tally *tl, const GpuCheck *cpu, uint32_t wtype, int64_t n) {
    for (int T : BATCHES) {
        uint32_t dt = dot_type(wtype);
        size_t rb = row_bytes(dt, n), ab = act_bytes(dt, n), content = act_content(dt, n);
        float *x = (float *)xmalloc((size_t)(n * T) * 4);
        uint8_t *cpu_row = (uint8_t *)xmalloc(rb), *want = (uint8_t *)xmalloc(content * T), *got = (uint8_t *)xmalloc(ab * T);
        fill_activations(x, n * T, true);
        for (int t = 0; t < T; t++) {
            cpu->quantize_row(wtype, x + t * n, cpu_row, n);
            split_act(dt, cpu_row, n, want + t * content);
        }
        float *dx = (float *)dev_copy(x, (size_t)(n * T) * 4);
        void *dy = dev_alloc(ab * T);
        quantize_row_gpu(wtype, dx, dy, n, T);
        host_copy(got, dy, ab * T);
        double differ = 0;
        for (int t = 0; t < T; t++) differ += bytes_differ(got + t * ab, want + t * content, content);
        char op[96];
        snprintf(op, sizeof op, "quantize_row %s n=%lld T=%d", type_name(dt), (long long)n, T);
        report(tl, op, differ, 0, "bytes");
        CUDA_CHECK(cudaFree(dx));
        CUDA_CHECK(cudaFree(dy));
        free(x), free(cpu_row), free(want), free(got);
    }
}

// fp16_to_fp32 (section 2) of every half h = i, for check_fp16
__global__ void fp16_all_kernel(float *y) {
    int i = blockIdx.x * BLOCK + threadIdx.x;
    y[i] = fp16_to_fp32((uint16_t)i);
}

// fp16_to_fp32 for all 65536 halves against their values computed here from the definition (sign,
// exponent, mantissa; inf and NaN as clover.c keeps them): the same bits
static void check_fp16(Tally *tl) {
    float *got = (float *)xmalloc(65536 * 4), *want = (float *)xmalloc(65536 * 4);
    for (uint32_t h = 0; h < 65536; h++) {
        uint32_t sign = (h & 0x8000) << 16, e = (h >> 10) & 31, man = h & 0x3ff, bits;
        if (e == 31) bits = sign | 0x7f800000 | man << 13;
        else {
            float v = e ? ldexpf((float)(1024 + man), (int)e - 25) : ldexpf((float)man, -24);
            memcpy(&bits, &v, 4);
            bits |= sign;
        }
        memcpy(&want[h], &bits, 4);
    }
    float *dy = (float *)dev_alloc(65536 * 4);
    cudaLaunchConfig_t c = launch_config(65536 / BLOCK, BLOCK);
    CUDA_CHECK(cudaLaunchKernelEx(&c, fp16_all_kernel, dy));
    host_copy(got, dy, 65536 * 4);
    report(tl, "fp16_to_fp32 all 65536 halves", bytes_differ(got, want, 65536 * 4), 0, "bytes");
    CUDA_CHECK(cudaFree(dy));
    free(got), free(want);
}

// Random weights whose every product and sum is exact in float (scales powers of two, small
// values), so that any summation order gives the same bits: the matmul check with these is exact and
// proves the integer block sums and the unpacking equal to the CPU's.
static void fill_exact_weights(uint32_t type, uint8_t *w, int64_t n, int64_t rows) {
    size_t rb = row_bytes(type, n), all = rb * rows;
    for (size_t i = 0; i < all; i++) w[i] = (uint8_t)rng_next();
    const uint16_t d16 = 0x1800, dmin16 = 0x1000;   // fp16 2^-9 and 2^-11
    for (int64_t r = 0; r < rows; r++) {
        uint8_t *row = w + r * rb;
        switch (type) {
        case T_F32: for (int64_t i = 0; i < n; i++) ((float *)row)[i] = (float)((int)(rng_next() % 17) - 8) / 16; break;
        case T_F16: for (int64_t i = 0; i < n; i++) ((uint16_t *)row)[i] = 0x3c00 | (uint16_t)(rng_next() % 4 << 8) | (rng_next() % 2 ? 0x8000 : 0); break;
        case T_BF16: for (int64_t i = 0; i < n; i++) ((uint16_t *)row)[i] = 0x3f80 | (uint16_t)(rng_next() % 8 << 4) | (rng_next() % 2 ? 0x8000 : 0); break;
        case T_Q8_0: for (int64_t b = 0; b < n / 32; b++) ((BlockQ8_0 *)row)[b].d = d16; break;
        case T_Q4_0: for (int64_t b = 0; b < n / 32; b++) ((BlockQ4_0 *)row)[b].d = d16; break;
        case T_Q4_K: for (int64_t b = 0; b < n / 256; b++) ((BlockQ4_K *)row)[b].d = d16, ((BlockQ4_K *)row)[b].dmin = dmin16; break;
        case T_Q5_K: for (int64_t b = 0; b < n / 256; b++) ((BlockQ5_K *)row)[b].d = d16, ((BlockQ5_K *)row)[b].dmin = dmin16; break;
        case T_Q6_K: for (int64_t b = 0; b < n / 256; b++) ((BlockQ6_K *)row)[b].d = d16; break;
        }
    }
}

// activations k/8, |k| <= 3, with each 32-block's first value +-127/8: every rounding is exact
static void fill_exact_activations(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = i % 32 == 0 ? (rng_next() % 2 ? 127.f : -127.f) / 8 : (float)((int)(rng_next() % 7) - 3) / 8;
}

// matmul of T rows through quantize_row_gpu + matmul_gpu against quantize_row + dot per row; and
// each row of the T-row batch against the same row alone on the GPU (bit for bit)
static void check_matmul(Tally *tl, const GpuCheck *cpu, const GpuMat *m, bool exact, int64_t n_out) {
    int64_t n = m->n_in;
    uint32_t wt = m->type, dt = dot_type(wt);
    size_t wb = row_bytes(wt, n), ab = row_bytes(dt, n);
    uint8_t *w = (uint8_t *)m->data;
    if (exact) {
        w = (uint8_t *)xmalloc(wb * n_out);
        fill_exact_weights(wt, w, n, n_out);
    }
    Mat dm = upload_weights(wt, n, n_out, 1, w);
    const Mat *dm_p = &dm;
    size_t xb = act_bytes(dt, n);
    for (int T : BATCHES) {
        float *x = (float *)xmalloc((size_t)(n * T) * 4), *want = (float *)xmalloc((size_t)(n_out * T) * 4);
        float *got = (float *)xmalloc((size_t)(n_out * T) * 4), *one = (float *)xmalloc((size_t)n_out * 4);
        uint8_t *xq = (uint8_t *)xmalloc(ab);
        if (exact) fill_exact_activations(x, n * T);
        else fill_activations(x, n * T, false);
        for (int t = 0; t < T; t++) {
            cpu->quantize_row(wt, x + t * n, xq, n);
            for (int64_t o = 0; o < n_out; o++) want[t * n_out + o] = cpu->dot(wt, m->n_out, w + o * wb, xq, n);
        }
        float *dx = (float *)dev_copy(x, (size_t)(n * T) * 4), *dy = (float *)dev_alloc((size_t)(n_out * T) * 4);
        void *dxq = dev_alloc(xb * T);
        quantize_row_gpu(wt, dx, dxq, n, T);
        matmul_gpu(&dm, dxq, T, dy);
        host_copy(got, dy, (size_t)(n_out * T) * 4);
        char op[128];
        snprintf(op, sizeof op, "matmul %s%s %lldx%lld T=%d", type_name(wt), exact ? " exact" : "", (long long)n_out, (long long)n, T);
        report(tl, op, rel_err(got, want, n_out * T), exact ? 0 : 1e-5, exact ? "abs" : "rel");
        {   // in one launch with a second matrix (its first n_out - 5 rows: another block count), as matmuls runs a
            // GDN layer's projections: both as alone
            Mat part = dm;
            part.n_out = n_out > 5 ? n_out - 5 : n_out;
            const Mat *both[] = {&part, &dm};
            float *d2 = (float *)dev_alloc((size_t)(n_out * T) * 4), *dy2 = (float *)dev_alloc((size_t)(n_out * T) * 4), *ys[] = {d2, dy2};
            float *g2 = (float *)xmalloc((size_t)(n_out * T) * 4), *g1 = (float *)xmalloc((size_t)(part.n_out * T) * 4);
            matmuls_gpu(both, 2, dxq, nullptr, T, ys, Rider{});
            host_copy(g2, dy2, (size_t)(n_out * T) * 4);
            host_copy(g1, d2, (size_t)(part.n_out * T) * 4);
            double differ = bytes_differ(g2, got, (size_t)(n_out * T) * 4);
            for (int t = 0; t < T; t++) differ += bytes_differ(g1 + t * part.n_out, got + t * n_out, (size_t)part.n_out * 4);
            snprintf(op, sizeof op, "matmul %s%s %lldx%lld T=%d two in one launch = alone", type_name(wt), exact ? " exact" : "", (long long)n_out, (long long)n, T);
            report(tl, op, differ, 0, "bytes");
            CUDA_CHECK(cudaFree(d2));
            CUDA_CHECK(cudaFree(dy2));
            free(g2), free(g1);
        }
        if (T > 1 && mma_batch(wt, n)) {   // the tensor-core batch unsplit: the bits of the split one (MmaSplit), where that split
            by_type(wt, "check_matmul", [&](auto d) {
                using D = decltype(d);
                MatList L = {};
                L.n = 1, L.m[0] = dm, L.y[0] = dy;
                matmul_mma_gpu<D>(L, nullptr, 1, (const uint8_t *)dxq, xb, T, lanes_per_row(D::LPB, units_of<D>(n)), Rider{}, false);
            });
            float *un = (float *)xmalloc((size_t)(n_out * T) * 4);
            host_copy(un, dy, (size_t)(n_out * T) * 4);
            snprintf(op, sizeof op, "matmul %s%s %lldx%lld T=%d unsplit = split", type_name(wt), exact ? " exact" : "", (long long)n_out, (long long)n, T);
            report(tl, op, bytes_differ(un, got, (size_t)(n_out * T) * 4), 0, "bytes");
            free(un);
        }
        if (T > 1) {   // row T-1 alone (matvec_kernel) must give the bits it got in the batch (matmul_kernel)
            matmul_gpu(&dm, (uint8_t *)dxq + (T - 1) * xb, 1, dy);
            host_copy(one, dy, (size_t)n_out * 4);
            snprintf(op, sizeof op, "matmul %s%s %lldx%lld T=%d row %d = alone", type_name(wt), exact ? " exact" : "", (long long)n_out, (long long)n, T, T - 1);
            report(tl, op, bytes_differ(one, got + (T - 1) * n_out, (size_t)n_out * 4), 0, "bytes");
        }
        if (rounds_in_block(dt, n)) {   // row T-1 alone as floats, rounded by each block (block_input): the same bits
            matmuls_gpu(&dm_p, 1, nullptr, dx + (T - 1) * n, 1, &dy, Rider{});
            host_copy(one, dy, (size_t)n_out * 4);
            snprintf(op, sizeof op, "matmul %s%s %lldx%lld T=%d row %d rounded in the blocks = rounded first", type_name(wt), exact ? " exact" : "",
                     (long long)n_out, (long long)n, T, T - 1);
            report(tl, op, bytes_differ(one, got + (T - 1) * n_out, (size_t)n_out * 4), 0, "bytes");
        }
        CUDA_CHECK(cudaFree(dx));
        CUDA_CHECK(cudaFree(dy));
        CUDA_CHECK(cudaFree(dxq));
        free(x), free(want), free(got), free(one), free(xq);
    }
    CUDA_CHECK(cudaFree((void *)dm.data));
    if (exact) free(w);
}

// the row ops: T rows of n, GPU vs the CPU twin row by row
enum RowOp { OP_RMSNORM, OP_L2NORM, OP_SOFTMAX, OP_SILU };
static void check_row_op(Tally *tl, const GpuCheck *cpu, RowOp op, int n) {
    static const char *names[] = {"rmsnorm", "l2norm", "softmax", "silu_row"};
    static const double limits[] = {1e-6, 1e-6, 1e-6, 0};
    for (int T : BATCHES) {
        size_t bytes = (size_t)n * T * 4;
        float *x = (float *)xmalloc(bytes), *w = (float *)xmalloc((size_t)n * 4), *want = (float *)xmalloc(bytes), *got = (float *)xmalloc(bytes);
        for (int64_t i = 0; i < (int64_t)n * T; i++) x[i] = 3 * rng_normal();
        for (int i = 0; i < n; i++) w[i] = 1 + 0.2f * rng_normal();
        memcpy(want, x, bytes);
        for (int t = 0; t < T; t++) {
            float *r = want + (size_t)t * n;
            switch (op) {
            case OP_RMSNORM: cpu->rmsnorm(r, r, w, n, cpu->eps); break;
            case OP_L2NORM: cpu->l2norm(r, n, cpu->eps); break;
            case OP_SOFTMAX: cpu->softmax(r, n); break;
            case OP_SILU: cpu->silu_row(r, r, n); break;
            }
        }
        float *dx = (float *)dev_copy(x, bytes), *dw = (float *)dev_copy(w, (size_t)n * 4);
        switch (op) {
        case OP_RMSNORM: add_norm_gpu(dx, nullptr, dw, n, cpu->eps, T_F32, dx, nullptr, T); break;
        case OP_L2NORM: l2norm_gpu(dx, n, cpu->eps, T); break;
        case OP_SOFTMAX: softmax_gpu(dx, n, T); break;
        case OP_SILU: silu_row_gpu(dx, dx, (int64_t)n * T); break;
        }
        host_copy(got, dx, bytes);
        char name[96];
        snprintf(name, sizeof name, "%s n=%d T=%d", names[op], n, T);
        report(tl, name, rel_err(got, want, (int64_t)n * T), limits[op], "rel");
        CUDA_CHECK(cudaFree(dx));
        CUDA_CHECK(cudaFree(dw));
        free(x), free(w), free(want), free(got);
    }
}

static int *dev_int(int v) { return (int *)dev_copy(&v, sizeof v); }   // a position in device memory

// argmax over T rows of n with many ties (values from a small set) and NaNs planted
static void check_argmax(Tally *tl, const GpuCheck *cpu, int n) {
    for (int T : BATCHES) {
        float *x = (float *)xmalloc((size_t)n * T * 4);
        int *want = (int *)xmalloc(T * sizeof(int)), *got = (int *)xmalloc(T * sizeof(int));
        for (int64_t i = 0; i < (int64_t)n * T; i++) x[i] = (float)(rng_next() % 50);
        for (int t = 0; t < T; t++) {
            float *r = x + (size_t)t * n;
            if (t % 3 == 1) r[rng_next() % n] = NAN;
            if (t % 5 == 2) r[0] = NAN;
            if (t % 4 == 3) r[n - 1] = 1000;
            want[t] = cpu->argmax(r, n);
        }
        float *dx = (float *)dev_copy(x, (size_t)n * T * 4);
        int *dout = (int *)dev_alloc(T * sizeof(int));
        argmax_gpu(dx, n, T, dout);
        host_copy(got, dout, T * sizeof(int));
        char name[96];
        snprintf(name, sizeof name, "argmax n=%d T=%d", n, T);
        report(tl, name, bytes_differ(got, want, T * sizeof(int)), 0, "bytes");
        CUDA_CHECK(cudaFree(dx));
        CUDA_CHECK(cudaFree(dout));
        free(x), free(want), free(got);
    }
}

static float *dev_copy_floats(const float *h, int64_t n) { return (float *)dev_copy(h, (size_t)n * 4); }

// best_token over T rows of n (logits of a spread like a model's, ties and NaNs planted, the largest
// value at `skip` in some rows): the ids exactly, p and H to a few ulps (their sums in another order)
static void check_best_token(Tally *tl, const GpuCheck *cpu, int n, int skip) {
    for (int T : BATCHES) {
        float *x = (float *)xmalloc((size_t)n * T * 4), *want = (float *)xmalloc(2 * T * 4), *got = (float *)xmalloc(2 * T * 4);
        int *want_id = (int *)xmalloc(T * sizeof(int)), *got_id = (int *)xmalloc(T * sizeof(int));
        for (int64_t i = 0; i < (int64_t)n * T; i++) x[i] = (float)(rng_next() % 200) / 16 - 6;
        for (int t = 0; t < T; t++) {
            float *r = x + (size_t)t * n;
            if (t % 3 == 1) r[rng_next() % n] = NAN;
            if (t % 4 == 2 && skip >= 0) r[skip] = 20;
            if (t % 5 == 3) r[n - 1] = 9;
            want_id[t] = cpu->best_token(r, n, skip, &want[t], &want[T + t]);
        }
        float *dx = dev_copy_floats(x, (int64_t)n * T), *dp = dev_floats(2 * T);
        int *did = (int *)dev_alloc(T * sizeof(int));
        best_token_gpu(dx, n, T, skip, did, dp, dp + T);
        host_copy(got_id, did, T * sizeof(int));
        host_copy(got, dp, 2 * T * 4);
        char name[96];
        snprintf(name, sizeof name, "best_token n=%d skip=%d T=%d id", n, skip, T);
        report(tl, name, bytes_differ(got_id, want_id, T * sizeof(int)), 0, "bytes");
        snprintf(name, sizeof name, "best_token n=%d skip=%d T=%d p, H", n, skip, T);
        report(tl, name, rel_err(got, want, 2 * T), 1e-6, "rel");
        CUDA_CHECK(cudaFree(dx));
        CUDA_CHECK(cudaFree(dp));
        CUDA_CHECK(cudaFree(did));
        free(x), free(want), free(got), free(want_id), free(got_id);
    }
}

// n random normal floats times scale
static float *random_floats(int64_t n, float scale) {
    float *x = (float *)xmalloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) x[i] = scale * rng_normal();
    return x;
}

// bytes in which a norm kernel's rounding xq (T rows of n, device) differs from quantize_row_gpu of
// its own xn (itself checked against the CPU's quantize_row)
static double rounding_differs(uint32_t wtype, const float *dxn, const void *dxq, int64_t n, int T) {
    uint32_t dt = dot_type(wtype);
    if (dt == T_F32) return 0;
    size_t ab = act_bytes(dt, n), content = act_content(dt, n);
    void *dwant = dev_alloc(ab * T);
    quantize_row_gpu(wtype, dxn, dwant, n, T);
    uint8_t *got = (uint8_t *)xmalloc(ab * T), *want = (uint8_t *)xmalloc(ab * T);
    host_copy(got, dxq, ab * T);
    host_copy(want, dwant, ab * T);
    double d = 0;
    for (int t = 0; t < T; t++) d += bytes_differ(got + t * ab, want + t * ab, content);
    CUDA_CHECK(cudaFree(dwant));
    free(got), free(want);
    return d;
}

// add_norm (the residual add, the next rmsnorm and its rounding for weights of type wtype): x against
// clover.c's loop x[i] += mix[i] (exact), xn against rmsnorm (1e-6: its double sums' order), xq
// against quantize_row_gpu of that xn (bytes), and its second rounding (xq2, for Q8_0 weights: a
// shared expert's) likewise
static void check_add_norm(Tally *tl, const GpuCheck *cpu, int n, uint32_t wtype) {
    for (int T : BATCHES) {
        int64_t all = (int64_t)T * n;
        float *x = random_floats(all, 3), *mix = random_floats(all, 3), *w = random_floats(n, 0.2f), *xn = (float *)xmalloc((size_t)all * 4);
        float *gx = (float *)xmalloc((size_t)all * 4), *gxn = (float *)xmalloc((size_t)all * 4);
        for (int i = 0; i < n; i++) w[i] += 1;
        float *dx = dev_copy_floats(x, all), *dmix = dev_copy_floats(mix, all), *dw = dev_copy_floats(w, n), *dxn = (float *)dev_alloc((size_t)all * 4);
        void *dxq = dev_alloc(act_bytes(dot_type(wtype), n) * T), *dxq2 = dev_alloc(act_bytes(T_Q8_0, n) * T);
        add_norm_gpu(dx, dmix, dw, n, cpu->eps, wtype, dxn, dxq, T, T_Q8_0, dxq2);
        host_copy(gx, dx, (size_t)all * 4);
        host_copy(gxn, dxn, (size_t)all * 4);
        for (int64_t i = 0; i < all; i++) x[i] += mix[i];
        for (int t = 0; t < T; t++) cpu->rmsnorm(xn + (size_t)t * n, x + (size_t)t * n, w, n, cpu->eps);
        char name[96];
        snprintf(name, sizeof name, "add_norm %s n=%d T=%d x", type_name(dot_type(wtype)), n, T);
        report(tl, name, bytes_differ(gx, x, (size_t)all * 4), 0, "bytes");
        snprintf(name, sizeof name, "add_norm %s n=%d T=%d xn", type_name(dot_type(wtype)), n, T);
        report(tl, name, rel_err(gxn, xn, all), 1e-6, "rel");
        snprintf(name, sizeof name, "add_norm %s n=%d T=%d xq = quantize_row(xn)", type_name(dot_type(wtype)), n, T);
        report(tl, name, rounding_differs(wtype, dxn, dxq, n, T), 0, "bytes");
        snprintf(name, sizeof name, "add_norm %s n=%d T=%d xq2 (Q8_0) = quantize_row(xn)", type_name(dot_type(wtype)), n, T);
        report(tl, name, rounding_differs(T_Q8_0, dxn, dxq2, n, T), 0, "bytes");
        for (void *d : {(void *)dx, (void *)dmix, (void *)dw, (void *)dxn, dxq, dxq2}) CUDA_CHECK(cudaFree(d));
        free(x), free(mix), free(w), free(xn), free(gx), free(gxn);
    }
}


// gdn_gates: beta and g (with alpha + dt past 20 now and then, softplus's other branch); device
// expf / logf against libm's: 1e-6 relative
static void check_gdn_gates(Tally *tl, const GpuCheck *cpu) {
    int H = cpu->n_v_heads;
    for (int T : BATCHES) {
        int64_t n = (int64_t)T * H;
        float *a = random_floats(H, 1), *dt = random_floats(H, 1), *alpha = random_floats(n, 8), *logit = random_floats(n, 3);
        for (int h = 0; h < H; h++) a[h] = -expf(a[h]);
        float *g = (float *)xmalloc((size_t)n * 4), *beta = (float *)xmalloc((size_t)n * 4);
        float *got_g = (float *)xmalloc((size_t)n * 4), *got_beta = (float *)xmalloc((size_t)n * 4);
        cpu->gdn_gates(a, dt, alpha, logit, T, H, g, beta);
        float *da = dev_copy_floats(a, H), *ddt = dev_copy_floats(dt, H), *dalpha = dev_copy_floats(alpha, n), *dlogit = dev_copy_floats(logit, n);
        float *dg = (float *)dev_alloc((size_t)n * 4), *dbeta = (float *)dev_alloc((size_t)n * 4);
        gdn_gates_gpu(da, ddt, dalpha, dlogit, T, H, dg, dbeta);
        host_copy(got_g, dg, (size_t)n * 4);
        host_copy(got_beta, dbeta, (size_t)n * 4);
        char name[96];
        snprintf(name, sizeof name, "gdn_gates H=%d T=%d (g, beta)", H, T);
        report(tl, name, fmax(rel_err(got_g, g, n), rel_err(got_beta, beta, n)), 1e-6, "rel");
        for (float *p : {da, ddt, dalpha, dlogit, dg, dbeta}) CUDA_CHECK(cudaFree(p));
        free(a), free(dt), free(alpha), free(logit), free(g), free(beta), free(got_g), free(got_beta);
    }
}

// gdn_conv over [ring | u] (all channels), with the right taps or without, then silu and the q/k L2
// norms, against the CPU's gdn_conv, gdn_conv_right and gdn_qk_norm row by row: the conv's fmaf and
// product-and-sum chains are the CPU's, the norms' double sums in another order: 1e-6
static void check_gdn_conv(Tally *tl, const GpuCheck *cpu, bool right) {
    int K = cpu->d_conv, C = cpu->conv_dim, d = cpu->d_state, n_qk = 2 * cpu->n_k_heads;
    for (int T : BATCHES) {
        int64_t n = (int64_t)T * C;
        float *wc = random_floats((int64_t)C * K, 0.5f), *wr = random_floats((int64_t)C * (K - 1), 0.5f), *ring = random_floats((int64_t)(K - 1) * C, 1);
        float *u = random_floats(n, 1), *want = (float *)xmalloc((size_t)n * 4), *got = (float *)xmalloc((size_t)n * 4);
        float *dw = dev_copy_floats(wc, (int64_t)C * K), *dwr = dev_copy_floats(wr, (int64_t)C * (K - 1)), *dring = dev_copy_floats(ring, (int64_t)(K - 1) * C);
        float *du = dev_copy_floats(u, n), *dy = (float *)dev_alloc((size_t)n * 4);
        cpu->gdn_conv(wc, K, C, ring, u, T, 0, C, want);
        if (right) cpu->gdn_conv_right(wr, K, C, u, T, 0, C, want);
        for (int t = 0; t < T; t++) cpu->gdn_qk_norm(want + (int64_t)t * C, C, d, n_qk, cpu->eps);
        gdn_conv_gpu(dw, right ? dwr : nullptr, K, C, dring, du, T, d, n_qk, cpu->eps, false, false, dy, Gates{});
        host_copy(got, dy, (size_t)n * 4);
        char name[96];
        snprintf(name, sizeof name, "%s + qk_norm K=%d C=%d T=%d", right ? "gdn_conv + right" : "gdn_conv", K, C, T);
        report(tl, name, rel_err(got, want, n), 1e-6, "rel");
        for (float *p : {dw, dwr, dring, du, dy}) CUDA_CHECK(cudaFree(p));
        free(wc), free(wr), free(ring), free(u), free(want), free(got);
    }
}

// The conv's launch of a causal step (gdn_advance's): the ring pushed (gdn_ring_push: T = 1 keeps
// part of the ring, larger T only rows of u; a copy, so equal bytes) and the gates computed
// (gdn_gates_gpu's bits) on the way, its rows the bits of the conv alone
static void check_gdn_conv_push_gates(Tally *tl, const GpuCheck *cpu) {
    int K = cpu->d_conv, C = cpu->conv_dim, d = cpu->d_state, n_qk = 2 * cpu->n_k_heads, H = cpu->n_v_heads;
    int64_t nr = (int64_t)(K - 1) * C;
    for (int T : BATCHES) {
        int64_t n = (int64_t)T * C, ng = (int64_t)T * H;
        float *wc = random_floats((int64_t)C * K, 0.5f), *ring = random_floats(nr, 1), *u = random_floats(n, 1);
        float *a = random_floats(H, 1), *dt = random_floats(H, 1), *alpha = random_floats(ng, 8), *logit = random_floats(ng, 3);
        for (int h = 0; h < H; h++) a[h] = -expf(a[h]);
        float *got_ring = (float *)xmalloc((size_t)nr * 4), *y0 = (float *)xmalloc((size_t)n * 4), *y1 = (float *)xmalloc((size_t)n * 4);
        float *gates0 = (float *)xmalloc((size_t)ng * 8), *gates1 = (float *)xmalloc((size_t)ng * 8);
        float *dw = dev_copy_floats(wc, (int64_t)C * K), *dring = dev_copy_floats(ring, nr), *du = dev_copy_floats(u, n), *dy = (float *)dev_alloc((size_t)n * 4);
        float *da = dev_copy_floats(a, H), *ddt = dev_copy_floats(dt, H), *dalpha = dev_copy_floats(alpha, ng), *dlogit = dev_copy_floats(logit, ng);
        float *dgates = (float *)dev_alloc((size_t)ng * 8);   // g, then beta
        gdn_conv_gpu(dw, nullptr, K, C, dring, du, T, d, n_qk, cpu->eps, false, false, dy, Gates{});
        host_copy(y0, dy, (size_t)n * 4);
        gdn_gates_gpu(da, ddt, dalpha, dlogit, T, H, dgates, dgates + ng);
        host_copy(gates0, dgates, (size_t)ng * 8);
        CUDA_CHECK(cudaMemsetAsync(dgates, 0, (size_t)ng * 8, stream));
        gdn_conv_gpu(dw, nullptr, K, C, dring, du, T, d, n_qk, cpu->eps, false, true, dy, Gates{da, ddt, dalpha, dlogit, dgates, dgates + ng, H});
        host_copy(y1, dy, (size_t)n * 4);
        host_copy(got_ring, dring, (size_t)nr * 4);
        host_copy(gates1, dgates, (size_t)ng * 8);
        cpu->gdn_ring_push(ring, u, T, K, C);
        char name[128];
        snprintf(name, sizeof name, "gdn_conv + ring push + gates K=%d C=%d H=%d T=%d = ring_push, gdn_gates, conv", K, C, H, T);
        report(tl, name, bytes_differ(got_ring, ring, (size_t)nr * 4) + bytes_differ(y1, y0, (size_t)n * 4) + bytes_differ(gates1, gates0, (size_t)ng * 8), 0,
               "bytes");
        for (float *p : {dw, dring, du, dy, da, ddt, dalpha, dlogit, dgates}) CUDA_CHECK(cudaFree(p));
        free(wc), free(ring), free(u), free(a), free(dt), free(alpha), free(logit), free(got_ring), free(y0), free(y1), free(gates0), free(gates1);
    }
}

// the type of the model's first matrix with rows of n values (the reader of a kernel's rounding), F32 if none
static uint32_t type_reading(const GpuCheck *cpu, int64_t n) {
    for (int i = 0; i < cpu->n_mats; i++)
        if (cpu->mats[i].n_in == n) return cpu->mats[i].type;
    return T_F32;
}

// delta_rule over T rows in one direction from a random nonzero S: o and the S it leaves. q and k
// of about unit norm (as after gdn_qk_norm), beta in (0, 1), g < 0. The dot orders are the CPU's;
// the device's expf(g) may differ from libm's by 2 ulp a row, and over 16 rows the product of the
// decays by ~2e-6: 1e-5 relative. With g = 0 (decay exp(0) = 1 on both) every bit must agree: the
// dot orders themselves. T = 37: the launch stages its q and k rows in three turns. The model's
// heads, and d_state d (when not the model's: 2 value heads, 1 q/k head; d = 80, a dot with a tail
// past 64 after its 64, a shape no test model has). Forward, then, on the model's heads, with the
// gated norm in the launch (GatedNorm) from
// the same S, twice (a graph replays it: the counts must be back at zero): its y against the CPU's
// gdn_gated_norm of the launch's o (as check_gdn_gated_norm), its rounding against quantize_row (bytes).
static void check_delta_rule(Tally *tl, const GpuCheck *cpu, bool reverse, int d) {
    bool model = d == cpu->d_state;
    int H = model ? cpu->n_v_heads : 2, nk = model ? cpu->n_k_heads : 1, kd = nk * d, vd = H * d, C = 2 * kd + vd;
    int64_t ns = (int64_t)H * d * d;
    struct { int T; bool exact; } runs[] = {{1, false}, {7, false}, {16, false}, {37, false}, {16, true}};   // (exact: g = 0)
    for (auto [T, exact] : runs) {
        int64_t ny = (int64_t)T * C, ng = (int64_t)T * H, no = (int64_t)T * vd;
        float *S = random_floats(ns, 0.1f), *y = random_floats(ny, 1), *g = random_floats(ng, 1), *beta = random_floats(ng, 1);
        for (int64_t i = 0; i < ny; i++)
            if (i % C < 2 * kd) y[i] /= sqrtf((float)d);
        for (int64_t i = 0; i < ng; i++) g[i] = exact ? 0 : -0.5f * fabsf(g[i]), beta[i] = rng_uniform();
        float *dS = dev_copy_floats(S, ns), *dS0 = dev_copy_floats(S, ns), *dy = dev_copy_floats(y, ny), *dg = dev_copy_floats(g, ng),
              *dbeta = dev_copy_floats(beta, ng);
        float *o = (float *)xmalloc((size_t)no * 4), *got_o = (float *)xmalloc((size_t)no * 4), *got_S = (float *)xmalloc((size_t)ns * 4);
        float *dout = (float *)dev_alloc((size_t)no * 4);
        for (int h = 0; h < H; h++) cpu->gdn_scan_head(S, y, g, beta, o, T, reverse, H, nk, d, C, kd, vd, h);
        delta_rule_gpu(dS, dS, dy, dg, dbeta, dout, T, reverse, H, nk, d, C, kd, vd, GatedNorm{});
        host_copy(got_o, dout, (size_t)no * 4);
        host_copy(got_S, dS, (size_t)ns * 4);
        char name[128];
        snprintf(name, sizeof name, "delta_rule %s H=%d d=%d T=%d%s (o, S)", reverse ? "reverse" : "forward", H, d, T, exact ? " g=0" : "");
        report(tl, name, fmax(rel_err(got_o, o, no), rel_err(got_S, S, ns)), exact ? 0 : 1e-5, "rel");
        if (!reverse && !exact && model) {
            float *z = random_floats(no, 3), *w = random_floats(d, 0.2f), *want = (float *)xmalloc((size_t)no * 4), *got = (float *)xmalloc((size_t)no * 4);
            for (int i = 0; i < d; i++) w[i] += 1;
            float *dz = dev_copy_floats(z, no), *dw = dev_copy_floats(w, d), *dyn = (float *)dev_alloc((size_t)no * 4);
            uint32_t wt = type_reading(cpu, vd);
            void *dxq = dev_alloc(act_bytes(dot_type(wt), vd) * T);
            unsigned *counts = (unsigned *)dev_alloc(H * sizeof(unsigned));
            CUDA_CHECK(cudaMemset(counts, 0, H * sizeof(unsigned)));
            GatedNorm nm = gated_norm_in_scan(dz, dw, cpu->eps, dyn, wt, dxq, counts, H, d);
            for (int pass = 0; pass < 2; pass++) {
                CUDA_CHECK(cudaMemset(dyn, 0, (size_t)no * 4));
                delta_rule_gpu(dS0, nullptr, dy, dg, dbeta, dout, T, false, H, nk, d, C, kd, vd, nm);
            }
            host_copy(got_o, dout, (size_t)no * 4);
            host_copy(got, dyn, (size_t)no * 4);
            for (int t = 0; t < T; t++) cpu->gdn_gated_norm(got_o + (int64_t)t * vd, z + (int64_t)t * vd, w, H, d, cpu->eps, want + (int64_t)t * vd);
            snprintf(name, sizeof name, "delta_rule + gdn_gated_norm H=%d d=%d T=%d, %d heads a group (y, twice)", H, d, T, nm.group);
            report(tl, name, rel_err(got, want, no), 1e-6, "rel");
            snprintf(name, sizeof name, "delta_rule + gdn_gated_norm %s H=%d d=%d T=%d xq = quantize_row(y)", type_name(dot_type(wt)), H, d, T);
            report(tl, name, rounding_differs(wt, dyn, dxq, vd, T), 0, "bytes");
            for (float *p : {dz, dw, dyn}) CUDA_CHECK(cudaFree(p));
            CUDA_CHECK(cudaFree(dxq));
            CUDA_CHECK(cudaFree(counts));
            free(z), free(w), free(want), free(got);
        }
        for (float *p : {dS, dS0, dy, dg, dbeta, dout}) CUDA_CHECK(cudaFree(p));
        free(S), free(y), free(g), free(beta), free(o), free(got_o), free(got_S);
    }
}

// gdn_rev_mix: one product and one sum per element, exact
static void check_gdn_rev_mix(Tally *tl, const GpuCheck *cpu) {
    int H = cpu->n_v_heads, d = cpu->d_state;
    for (int T : BATCHES) {
        int64_t n = (int64_t)T * H * d;
        float *o = random_floats(n, 1), *o_rev = random_floats(n, 1), *gamma = random_floats(H, 1), *got = (float *)xmalloc((size_t)n * 4);
        float *dout = dev_copy_floats(o, n), *drev = dev_copy_floats(o_rev, n), *dgamma = dev_copy_floats(gamma, H);
        cpu->gdn_rev_mix(o, o_rev, gamma, T, H, d);
        gdn_rev_mix_gpu(dout, drev, dgamma, T, H, d);
        host_copy(got, dout, (size_t)n * 4);
        char name[96];
        snprintf(name, sizeof name, "gdn_rev_mix H=%d d=%d T=%d", H, d, T);
        report(tl, name, rel_err(got, o, n), 0, "abs");
        for (float *p : {dout, drev, dgamma}) CUDA_CHECK(cudaFree(p));
        free(o), free(o_rev), free(gamma), free(got);
    }
}

// gdn_gated_norm: rmsnorm's double sums in another order, silu exact: 1e-6 relative; its rounding for
// ssm_out against quantize_row_gpu of its output (bytes)
static void check_gdn_gated_norm(Tally *tl, const GpuCheck *cpu) {
    int H = cpu->n_v_heads, d = cpu->d_state, vd = cpu->value_dim;
    for (int T : BATCHES) {
        int64_t n = (int64_t)T * vd;
        float *o = random_floats(n, 3), *z = random_floats(n, 3), *w = random_floats(d, 0.2f);
        for (int i = 0; i < d; i++) w[i] += 1;
        float *want = (float *)xmalloc((size_t)n * 4), *got = (float *)xmalloc((size_t)n * 4);
        for (int t = 0; t < T; t++) cpu->gdn_gated_norm(o + (int64_t)t * vd, z + (int64_t)t * vd, w, H, d, cpu->eps, want + (int64_t)t * vd);
        float *dout = dev_copy_floats(o, n), *dz = dev_copy_floats(z, n), *dw = dev_copy_floats(w, d), *dy = (float *)dev_alloc((size_t)n * 4);
        uint32_t wt = type_reading(cpu, vd);
        void *dxq = dev_alloc(act_bytes(dot_type(wt), vd) * T);
        gdn_gated_norm_gpu(dout, dz, dw, T, H, d, cpu->eps, dy, wt, dxq);
        host_copy(got, dy, (size_t)n * 4);
        char name[96];
        snprintf(name, sizeof name, "gdn_gated_norm H=%d d=%d T=%d", H, d, T);
        report(tl, name, rel_err(got, want, n), 1e-6, "rel");
        snprintf(name, sizeof name, "gdn_gated_norm %s H=%d d=%d T=%d xq = quantize_row(y)", type_name(dot_type(wt)), H, d, T);
        report(tl, name, rounding_differs(wt, dy, dxq, vd, T), 0, "bytes");
        for (float *p : {dout, dz, dw, dy}) CUDA_CHECK(cudaFree(p));
        CUDA_CHECK(cudaFree(dxq));
        free(o), free(z), free(w), free(want), free(got);
    }
}


static const uint32_t CACHE_TYPES[] = {T_F32, T_F16, T_BF16};

// attn_prep on T rows at positions pos.. into caches of each type, against the CPU's attn_qk_norm and
// attn_rope (q heads at stride 2*hd, the gates left as they are, and k heads: 1e-6, the norms' double
// sums and the device's cosf/sinf) and store_as: the K rows the CPU's rounding of the kernel's own k
// (bytes), the V rows of values with fill_activations' edge cases (NaN, ties, overflow) the CPU's
// store_as of them (bytes); the cache rows before pos untouched
static void check_attn_prep(Tally *tl, const GpuCheck *cpu, int pos) {
    int hd = cpu->head_dim, nh = cpu->n_head, nkv = cpu->n_head_kv, kvd = nkv * hd;
    for (uint32_t type : CACHE_TYPES)
        for (int T : BATCHES) {
            int64_t nq = (int64_t)T * nh * 2 * hd, nk = (int64_t)T * kvd, rows = pos + T;
            size_t cb = cache_bytes(type), cache = (size_t)rows * kvd * cb, at = (size_t)pos * kvd * cb;
            float *qg = random_floats(nq, 3), *kr = random_floats(nk, 3), *vr = (float *)xmalloc((size_t)nk * 4);
            float *qn = random_floats(hd, 0.2f), *kn = random_floats(hd, 0.2f);
            fill_activations(vr, nk, true);
            for (int i = 0; i < hd; i++) qn[i] += 1, kn[i] += 1;
            float *dq = dev_copy_floats(qg, nq), *dk = dev_copy_floats(kr, nk), *dv = dev_copy_floats(vr, nk);
            float *dqn = dev_copy_floats(qn, hd), *dkn = dev_copy_floats(kn, hd);
            uint8_t *dK = (uint8_t *)dev_alloc(cache), *dV = (uint8_t *)dev_alloc(cache);
            CUDA_CHECK(cudaMemset(dK, 0x5a, cache));
            CUDA_CHECK(cudaMemset(dV, 0x5a, cache));
            int *dpos = dev_int(pos);
            attn_prep_gpu(dq, dk, dv, dqn, dkn, T, nh, nkv, hd, cpu->eps, cpu->n_rot, cpu->rope_base, dpos, type, dK, type, dV, nullptr, nullptr);
            cpu->attn_qk_norm(qg, kr, qn, kn, T, nh, nkv, hd, cpu->eps);
            cpu->attn_rope(qg, kr, T, pos, nh, nkv, hd, cpu->n_rot, cpu->rope_base);
            float *gq = (float *)xmalloc((size_t)nq * 4), *gk = (float *)xmalloc((size_t)nk * 4);
            uint8_t *gK = (uint8_t *)xmalloc(cache), *gV = (uint8_t *)xmalloc(cache), *want = (uint8_t *)xmalloc(cache);
            host_copy(gq, dq, (size_t)nq * 4);
            host_copy(gk, dk, (size_t)nk * 4);
            host_copy(gK, dK, cache);
            host_copy(gV, dV, cache);
            char name[128];
            snprintf(name, sizeof name, "attn_prep %s heads=%d+%dx%d pos=%d T=%d q, k", type_name(type), nh, nkv, hd, pos, T);
            report(tl, name, fmax(rel_err(gq, qg, nq), rel_err(gk, kr, nk)), 1e-6, "rel");
            memset(want, 0x5a, at);
            cpu->store_as(type, want + at, gk, (int)nk);
            double differ = bytes_differ(gK, want, cache);
            cpu->store_as(type, want + at, vr, (int)nk);
            differ += bytes_differ(gV, want, cache);
            snprintf(name, sizeof name, "attn_prep %s heads=%d+%dx%d pos=%d T=%d K, V rows", type_name(type), nh, nkv, hd, pos, T);
            report(tl, name, differ, 0, "bytes");
            for (void *d : {(void *)dq, (void *)dk, (void *)dv, (void *)dqn, (void *)dkn, (void *)dK, (void *)dV, (void *)dpos}) CUDA_CHECK(cudaFree(d));
            free(qg), free(kr), free(vr), free(qn), free(kn), free(gq), free(gk), free(gK), free(gV), free(want);
        }
}

// value i of a cache row of `type` on the host, from the definition (as check_fp16's reference)
static double cache_value(uint32_t type, const uint8_t *row, size_t i) {
    if (type == T_F32) { float f; memcpy(&f, row + 4 * i, 4); return f; }
    uint16_t h;
    memcpy(&h, row + 2 * i, 2);
    if (type == T_BF16) { uint32_t b = (uint32_t)h << 16; float f; memcpy(&f, &b, 4); return f; }
    int e = (h >> 10) & 31, man = h & 0x3ff;
    double v = e == 31 ? (man ? NAN : INFINITY) : e ? ldexp(1024 + man, e - 25) : ldexp(man, -24);
    return h & 0x8000 ? -v : v;
}

// Attention of T rows over a cache of n_keys = pos + T rows of one type: causal (row t sees pos + t + 1
// keys) or full (every row sees all). q and K hold k/4, |k| <= 7, so that every score is exact. Two
// comparisons: against a float64 evaluation of the same function (q rounded to the cache type, the
// exact softmax, the V sum, the gate) within 1e-5, which is the kernel's own error (online softmax,
// float sums, the device's expf); and against the CPU's attend, which rounds each p to the cache type
// before the V sum where the flash form keeps it in float: within half an ulp of that type per p
// (2^-11 for f16, 2^-8 for bf16) of the largest |V|, 1e-5 relative for f32. pos 3000: MAX_SPLITS splits. any_q: q of
// any value (not exact in the cache type: its rounding shows), against float64 only.
static void check_attention(Tally *tl, const GpuCheck *cpu, uint32_t type, int T, int pos, bool causal, bool any_q = false) {
    int hd = cpu->head_dim, nh = cpu->n_head, nkv = cpu->n_head_kv, n_keys = pos + T, kvd = nkv * hd;
    size_t cb = cache_bytes(type), stride = ((size_t)n_keys + 15) / 16 * 16 + 16;   // past the minimum
    int64_t nq = (int64_t)T * nh * 2 * hd, nkv_all = (int64_t)n_keys * kvd, no = (int64_t)T * nh * hd;
    float *qg = random_floats(nq, 1), *k = (float *)xmalloc((size_t)nkv_all * 4), *v = random_floats(nkv_all, 1);
    for (int64_t i = 0; i < nq; i++)
        if (i / hd % 2 == 0 && !any_q) qg[i] = (float)((int)(rng_next() % 15) - 7) / 4;   // q_h, not gate_h
    for (int64_t i = 0; i < nkv_all; i++) k[i] = (float)((int)(rng_next() % 15) - 7) / 4;
    uint8_t *K = (uint8_t *)xmalloc((size_t)nkv_all * cb), *V = (uint8_t *)xmalloc((size_t)nkv_all * cb), *qr = (uint8_t *)xmalloc((size_t)hd * cb);
    cpu->store_as(type, K, k, (int)nkv_all);
    cpu->store_as(type, V, v, (int)nkv_all);
    float *want = (float *)xmalloc((size_t)no * 8), *ref = (float *)xmalloc((size_t)no * 8), *got = (float *)xmalloc((size_t)no * 8);   // ao, ao_gated
    float *sc = (float *)xmalloc(stride * 4), *acc = (float *)xmalloc((size_t)64 * hd * 4);
    double *p = (double *)xmalloc((size_t)n_keys * sizeof(double));
    for (int t = 0; t < T; t++)
        for (int h = 0; h < nh; h++) {
            int kvh = h / (nh / nkv), n = causal ? pos + t + 1 : n_keys;
            const float *q = qg + ((size_t)t * nh + h) * 2 * hd;
            size_t at = ((size_t)t * nh + h) * hd;
            const uint8_t *Kh = K + (size_t)kvh * hd * cb, *Vh = V + (size_t)kvh * hd * cb;
            cpu->attend(q, q + hd, Kh, kvd * cb, type, Vh, kvd * cb, type, n, hd, cpu->kq_scale, 64, sc, acc, want + at, want + no + at);
            cpu->store_as(type, qr, q, hd);
            double m = -INFINITY, sum = 0;
            for (int j = 0; j < n; j++) {
                double d = 0;
                for (int i = 0; i < hd; i++) d += cache_value(type, Kh + (size_t)j * kvd * cb, i) * cache_value(type, qr, i);
                p[j] = d * cpu->kq_scale, m = fmax(m, p[j]);
            }
            for (int j = 0; j < n; j++) p[j] = exp(p[j] - m), sum += p[j];
            for (int i = 0; i < hd; i++) {
                double o = 0;
                for (int j = 0; j < n; j++) o += p[j] / sum * cache_value(type, Vh + (size_t)j * kvd * cb, i);
                ref[at + i] = (float)o, ref[no + at + i] = (float)(o / (1 + exp(-(double)q[hd + i])));
            }
        }
    float *dq = (float *)dev_copy(qg, (size_t)nq * 4), *datt = (float *)dev_alloc(attention_part_floats(T, nh, hd) * 4);
    void *dK = dev_copy(K, (size_t)nkv_all * cb), *dV = dev_copy(V, (size_t)nkv_all * cb);
    float *dout = (float *)dev_alloc((size_t)no * 8);
    int *dpos = dev_int(pos);
    uint32_t wt = type_reading(cpu, (int64_t)nh * hd);
    void *dxq = dev_alloc(act_bytes(dot_type(wt), (int64_t)nh * hd) * T);
    unsigned *counts = (unsigned *)dev_alloc(T * sizeof(unsigned));
    CUDA_CHECK(cudaMemset(counts, 0, T * sizeof(unsigned)));
    attention_gpu(dq, dK, dV, type, type, dpos, T, causal, nh, nkv, hd, cpu->kq_scale, datt, dout, dout + no, wt, dxq, counts);
    host_copy(got, dout, (size_t)no * 8);
    CUDA_CHECK(cudaFree(dpos));
    char name[128];
    snprintf(name, sizeof name, "attention %s %s h%d/%dx%d keys=%d T=%d%s float64", type_name(type), causal ? "causal" : "full", nh, nkv, hd, n_keys, T,
             any_q ? " any q" : "");
    report(tl, name, fmax(rel_err(got, ref, no), rel_err(got + no, ref + no, no)), 1e-5, "rel");
    snprintf(name, sizeof name, "attention %s %s h%d/%dx%d keys=%d T=%d CPU", type_name(type), causal ? "causal" : "full", nh, nkv, hd, n_keys, T);
    if (!any_q && type == T_F32) report(tl, name, fmax(rel_err(got, want, no), rel_err(got + no, want + no, no)), 1e-5, "rel");
    else if (!any_q) {   // |o - o_cpu| <= sum_j |dp_j| |V_j| <= half an ulp x max |V| (sigmoid(gate) <= 1 keeps it for ao_gated)
        double e = 0, vmax = 0;
        for (int64_t i = 0; i < 2 * no; i++) e = fmax(e, fabs((double)got[i] - want[i]));
        for (int64_t i = 0; i < nkv_all; i++) vmax = fmax(vmax, fabs(cache_value(type, V, (size_t)i)));
        report(tl, name, e / vmax, type == T_F16 ? 0x1p-11 : 0x1p-8, "of |V|");
    }
    snprintf(name, sizeof name, "attention %s h%d/%dx%d keys=%d T=%d%s xq = quantize_row(ao_gated)", type_name(dot_type(wt)), nh, nkv, hd, n_keys, T,
             any_q ? " any q" : "");
    report(tl, name, rounding_differs(wt, dout + no, dxq, (int64_t)nh * hd, T), 0, "bytes");
    if (causal && T > 1 && !any_q) {   // row T-1 alone, at its position, must get the bits it got in the batch
        int *dlast = dev_int(pos + T - 1);
        size_t row = (size_t)nh * hd;
        attention_gpu(dq + (T - 1) * 2 * row, dK, dV, type, type, dlast, 1, true, nh, nkv, hd, cpu->kq_scale, datt, dout, dout + row, wt, dxq, counts);
        float *one = (float *)xmalloc(row * 8);
        host_copy(one, dout, row * 4);
        host_copy(one + row, dout + row, row * 4);
        snprintf(name, sizeof name, "attention %s h%d/%dx%d keys=%d T=%d row %d = alone", type_name(type), nh, nkv, hd, n_keys, T, T - 1);
        report(tl, name, bytes_differ(one, got + (T - 1) * row, row * 4) + bytes_differ(one + row, got + no + (T - 1) * row, row * 4), 0, "bytes");
        CUDA_CHECK(cudaFree(dlast));
        free(one);
    }
    CUDA_CHECK(cudaFree(dq));
    CUDA_CHECK(cudaFree(dxq));
    CUDA_CHECK(cudaFree(counts));
    CUDA_CHECK(cudaFree(datt));
    CUDA_CHECK(cudaFree(dK));
    CUDA_CHECK(cudaFree(dV));
    CUDA_CHECK(cudaFree(dout));
    free(qg), free(k), free(v), free(K), free(V), free(qr), free(want), free(ref), free(got), free(sc), free(acc), free(p);
}

// Router: logits with exact ties planted (expert e copies e - 1 in some rows), three cases:
//   softmax + top-k over all experts, with the model's weights scale;
//   top-k on given p within an allowed set, scale 2.5;
//   top-k within fewer allowed experts than n_used (ranks -1, weight 0).
// In the given-p cases some rows hold NaNs, one row at its first allowed expert (the CPU's loop keeps
// that one). sel must be the same ints; p and w within the softmax's double-sum order (1e-6). At the
// model's n_expert and n_used, and at the real model's 256 and 8 (softmax groups of 16, 8 experts a lane).
static void check_route(Tally *tl, const GpuCheck *cpu, int E, int K) {
    for (int mode = 0; mode < 3; mode++)
        for (int T : BATCHES) {
            int64_t np = (int64_t)T * E, nw = (int64_t)T * K;
            float *logits = random_floats(np, 2), *p = (float *)xmalloc((size_t)np * 4), *w = (float *)xmalloc((size_t)nw * 4);
            int *sel = (int *)xmalloc((size_t)nw * sizeof(int));
            for (int t = 0; t < T; t++)
                for (int e = 1; e < E; e += 3)
                    if ((t + e) % 2) logits[(size_t)t * E + e] = logits[(size_t)t * E + e - 1];
            bool *allowed = (bool *)xmalloc((size_t)E);
            uint8_t *allowed8 = (uint8_t *)xmalloc((size_t)E);
            int n_allowed = mode == 1 ? (E + 1) / 2 : K - 1;
            for (int e = 0; e < E; e++) allowed[e] = false;
            for (int i = 0; i < n_allowed && i < E; i++) allowed[rng_next() % E] = true;
            for (int e = 0; e < E; e++) allowed8[e] = allowed[e];
            float scale = mode == 0 ? cpu->expert_weights_scale : 2.5f;
            memcpy(p, logits, (size_t)np * 4);
            for (int t = 0; t < T; t++) {
                float *pt = p + (size_t)t * E;
                cpu->softmax(pt, E);
                if (mode != 0 && t % 3 == 1) pt[rng_next() % E] = NAN;
                if (mode != 0 && t % 4 == 2)
                    for (int e = 0; e < E; e++)
                        if (allowed[e]) { pt[e] = NAN; break; }
                if (mode != 0) memcpy(logits + (size_t)t * E, pt, (size_t)E * 4);   // given p: the softmax of the logits, ties kept
                cpu->route_top_k(pt, mode == 0 ? NULL : allowed, E, K, scale, sel + (size_t)t * K, w + (size_t)t * K);
            }
            float *dl = (float *)dev_copy(logits, (size_t)np * 4), *dp = (float *)dev_alloc((size_t)np * 4), *dw = (float *)dev_alloc((size_t)nw * 4);
            int *dsel = (int *)dev_alloc((size_t)nw * sizeof(int));
            uint8_t *dal = (uint8_t *)dev_copy(allowed8, (size_t)E);
            if (mode == 0) route_gpu(dl, dp, NULL, dsel, dw, T, E, K, scale, true, true);
            else route_gpu(NULL, dl, dal, dsel, dw, T, E, K, scale, false, true);
            float *gp = (float *)xmalloc((size_t)np * 4), *gw = (float *)xmalloc((size_t)nw * 4);
            int *gsel = (int *)xmalloc((size_t)nw * sizeof(int));
            host_copy(gp, mode == 0 ? dp : dl, (size_t)np * 4);
            host_copy(gw, dw, (size_t)nw * 4);
            host_copy(gsel, dsel, (size_t)nw * sizeof(int));
            static const char *modes[] = {"softmax+top-k", "top-k allowed", "top-k few allowed"};
            char name[128];
            snprintf(name, sizeof name, "route %s n=%d K=%d T=%d sel", modes[mode], E, K, T);
            report(tl, name, bytes_differ(gsel, sel, (size_t)nw * sizeof(int)), 0, "bytes");
            snprintf(name, sizeof name, "route %s n=%d K=%d T=%d p, w", modes[mode], E, K, T);
            report(tl, name, fmax(rel_err(gp, p, np), rel_err(gw, w, nw)), 1e-6, "rel");
            CUDA_CHECK(cudaFree(dl));
            CUDA_CHECK(cudaFree(dp));
            CUDA_CHECK(cudaFree(dw));
            CUDA_CHECK(cudaFree(dsel));
            CUDA_CHECK(cudaFree(dal));
            free(logits), free(p), free(w), free(sel), free(allowed), free(allowed8), free(gp), free(gw), free(gsel);
        }
}

// coreset over T rows of probabilities, some experts' columns equal (exact ties in the sums), at the
// model's top_p (0.9 when it has none) and at 0.5; and with every expert tied (p = 1/n, so that the cut
// at top_p = 0.3 falls inside the ties and only the tie rule decides): the same allowed set
static void check_coreset(Tally *tl, const GpuCheck *cpu) {
    int E = cpu->n_expert;
    float top_ps[] = {cpu->coreset_top_p > 0 ? cpu->coreset_top_p : 0.9f, 0.5f, 0.3f};
    for (int c = 0; c < 3; c++)
        for (int T : BATCHES) {
            int64_t np = (int64_t)T * E;
            float *p = random_floats(np, 2), top_p = top_ps[c];
            for (int t = 0; t < T; t++) {
                float *pt = p + (size_t)t * E;
                cpu->softmax(pt, E);
                for (int e = 2; e < E; e += 5) pt[e] = pt[e - 2];
                if (c == 2)
                    for (int e = 0; e < E; e++) pt[e] = 1.0f / E;
            }
            bool *want = (bool *)xmalloc((size_t)E);
            uint8_t *want8 = (uint8_t *)xmalloc((size_t)E), *got = (uint8_t *)xmalloc((size_t)E);
            cpu->coreset(p, T, E, top_p, want);
            for (int e = 0; e < E; e++) want8[e] = want[e];
            float *dp = (float *)dev_copy(p, (size_t)np * 4);
            uint8_t *dal = (uint8_t *)dev_alloc((size_t)E);
            coreset_gpu(dp, T, E, top_p, dal);
            host_copy(got, dal, (size_t)E);
            char name[96];
            snprintf(name, sizeof name, "coreset n=%d top_p=%g%s T=%d", E, top_p, c == 2 ? " all tied" : "", T);
            report(tl, name, bytes_differ(got, want8, (size_t)E), 0, "bytes");
            CUDA_CHECK(cudaFree(dp));
            CUDA_CHECK(cudaFree(dal));
            free(p), free(want), free(want8), free(got);
        }
}

// matmul_id on the model's stacked experts m, n_pairs = T * n_used pairs with random experts (every
// fifth -1): against the CPU's dot per row (zeros for -1), and each pair of expert ids[0] bit for bit
// against matmul_gpu's row of W_e on the same activation rows. in_div: n_used (gate/up) or 1 (down).
static void check_matmul_id(Tally *tl, const GpuCheck *cpu, const GpuMat *m, int in_div) {
    int64_t n = m->n_in, n_out = m->n_out;
    int K = cpu->n_expert_used, E = cpu->n_expert;
    uint32_t wt = m->type;
    size_t wb = row_bytes(wt, n), ab = row_bytes(dot_type(wt), n), eb = wb * n_out, xb = act_bytes(dot_type(wt), n);
    Mat dm = upload_weights(wt, n, n_out, E, m->data);
    for (int T : BATCHES) {
        int n_pairs = T * K, rows = n_pairs / in_div;
        int *ids = (int *)xmalloc((size_t)n_pairs * sizeof(int));
        for (int p = 0; p < n_pairs; p++) ids[p] = p % 5 == 4 ? -1 : p < 3 * MMA_M && p % 4 != 1 ? 1 % E : (int)(rng_next() % E);   // (a run past MMA_M)
        float *x = random_floats(n * rows, 1), *want = (float *)xmalloc((size_t)(n_out * n_pairs) * 4);
        float *got = (float *)xmalloc((size_t)(n_out * n_pairs) * 4), *dense = (float *)xmalloc((size_t)(n_out * rows) * 4);
        uint8_t *xq = (uint8_t *)xmalloc(ab * rows);
        for (int r = 0; r < rows; r++) cpu->quantize_row(wt, x + r * n, xq + r * ab, n);
        for (int p = 0; p < n_pairs; p++)
            for (int64_t o = 0; o < n_out; o++)
                want[p * n_out + o] = ids[p] < 0 ? 0 : cpu->dot(wt, n_out, (const uint8_t *)m->data + ids[p] * eb + o * wb, xq + (p / in_div) * ab, n);
        float *dx = (float *)dev_copy(x, (size_t)(n * rows) * 4), *dy = (float *)dev_alloc((size_t)(n_out * n_pairs) * 4);
        float *dd = (float *)dev_alloc((size_t)(n_out * rows) * 4);
        int *dids = (int *)dev_copy(ids, (size_t)n_pairs * sizeof(int));
        void *dxq = dev_alloc(xb * rows);
        quantize_row_gpu(wt, dx, dxq, n, rows);
        matmul_id_gpu(&dm, dids, n_pairs, in_div, false, dxq, nullptr, dy);
        host_copy(got, dy, (size_t)(n_out * n_pairs) * 4);
        char name[128];
        snprintf(name, sizeof name, "matmul_id %s %lldx%lld x%d pairs=%d/%d T=%d", type_name(wt), (long long)n_out, (long long)n, E, n_pairs, in_div, T);
        report(tl, name, rel_err(got, want, n_out * n_pairs), 1e-5, "rel");
        if (rounds_in_block(dot_type(wt), n)) {   // the float rows, each block rounding its own (block_input): the same bits
            float *dy2 = (float *)dev_alloc((size_t)(n_out * n_pairs) * 4), *got2 = (float *)xmalloc((size_t)(n_out * n_pairs) * 4);
            matmul_id_gpu(&dm, dids, n_pairs, in_div, false, nullptr, dx, dy2);
            host_copy(got2, dy2, (size_t)(n_out * n_pairs) * 4);
            snprintf(name, sizeof name, "matmul_id %s %lldx%lld T=%d rounded in the blocks = rounded first", type_name(wt), (long long)n_out, (long long)n, T);
            report(tl, name, bytes_differ(got2, got, (size_t)(n_out * n_pairs) * 4), 0, "bytes");
            CUDA_CHECK(cudaFree(dy2));
            free(got2);
        }
        if (T > 1 && mma_batch(wt, n)) {   // the batch form (tensor cores, a tile an expert's run of pairs): the same bits
            CUDA_CHECK(cudaMemset(dy, 0xff, (size_t)(n_out * n_pairs) * 4));   // (NaNs where a row is not written)
            matmul_id_gpu(&dm, dids, n_pairs, in_div, true, dxq, nullptr, dy);
            host_copy(want, dy, (size_t)(n_out * n_pairs) * 4);
            snprintf(name, sizeof name, "matmul_id %s %lldx%lld T=%d batch = a job a pair", type_name(wt), (long long)n_out, (long long)n, T);
            report(tl, name, bytes_differ(want, got, (size_t)(n_out * n_pairs) * 4), 0, "bytes");
        }
        int e0 = ids[0];
        Mat de = expert(&dm, e0);
        matmul_gpu(&de, dxq, rows, dd);
        host_copy(dense, dd, (size_t)(n_out * rows) * 4);
        double differ = 0;
        for (int p = 0; p < n_pairs; p++)
            if (ids[p] == e0) differ += bytes_differ(got + p * n_out, dense + (p / in_div) * n_out, (size_t)n_out * 4);
        snprintf(name, sizeof name, "matmul_id %s %lldx%lld T=%d e%d = matmul", type_name(wt), (long long)n_out, (long long)n, T, e0);
        report(tl, name, differ, 0, "bytes");
        CUDA_CHECK(cudaFree(dx));
        CUDA_CHECK(cudaFree(dy));
        CUDA_CHECK(cudaFree(dd));
        CUDA_CHECK(cudaFree(dids));
        CUDA_CHECK(cudaFree(dxq));
        free(ids), free(x), free(want), free(got), free(dense), free(xq);
    }
    CUDA_CHECK(cudaFree((void *)dm.data));
}

// Riders (F32 matrices computed by extra blocks of another launch): two of them, 37 and 5 rows, in a
// matmul of expert 0 of up_exps (a decode step's matvec, a batch's tensor-core or tile kernel) and in
// the shared expert's form of swiglu_id, for T = 1, 7, 16 rows: every output the bits of its launch
// alone (the F32 matmul alone is checked against the CPU by check_matmul); and the routing of the
// first rider's rows after them in the swiglu_id launch, the bits of route_gpu's (checked against
// the CPU by check_route)
static void check_riders(Tally *tl, const GpuCheck *cpu) {
    const GpuMat *um = &cpu->up_exps;
    int64_t n = um->n_in, F = um->n_out, rows[2] = {37, 5};
    uint32_t wt = um->type;
    Mat du = upload_weights(wt, n, F, cpu->n_expert, um->data), u0 = expert(&du, 0), rm[2];
    float *wf[2];
    for (int i = 0; i < 2; i++) wf[i] = random_floats(n * rows[i], 1), rm[i] = upload_weights(T_F32, n, rows[i], 1, wf[i]);
    int K = cpu->n_expert_used < (int)rows[0] ? cpu->n_expert_used : (int)rows[0];
    unsigned *ddone = (unsigned *)dev_alloc(sizeof(unsigned));
    CUDA_CHECK(cudaMemset(ddone, 0, sizeof(unsigned)));
    for (int T : BATCHES) {
        float *dr[2], *dr1[2], *got[2], *want[2];
        for (int i = 0; i < 2; i++) {
            dr[i] = (float *)dev_alloc((size_t)(T * rows[i]) * 4), dr1[i] = (float *)dev_alloc((size_t)(T * rows[i]) * 4);
            got[i] = (float *)xmalloc((size_t)(T * rows[i]) * 4), want[i] = (float *)xmalloc((size_t)(T * rows[i]) * 4);
        }
        const Mat *rp[] = {&rm[1], &rm[0]}, *up = &u0;   // the routed rider last, as the router would be if it were
        float *yr[] = {dr[1], dr[0]};                    // last: a block that routes too early misses its logits
        float *x = random_floats(n * T, 1), *dx = dev_copy_floats(x, n * T);
        float *dy = (float *)dev_alloc((size_t)(F * T) * 4), *dy1 = (float *)dev_alloc((size_t)(F * T) * 4);
        float *y = (float *)xmalloc((size_t)(F * T) * 4), *y1 = (float *)xmalloc((size_t)(F * T) * 4);
        void *dxq = dev_alloc(act_bytes(dot_type(wt), n) * T);
        quantize_row_gpu(wt, dx, dxq, n, T);
        float *dp = (float *)dev_alloc((size_t)(T * rows[0]) * 8), *dw = (float *)dev_alloc((size_t)(T * K) * 8);   // riding, then alone
        int *dsel = (int *)dev_alloc((size_t)(T * K) * 2 * sizeof(int));
        double routed = 0;
        for (int form = 0; form < 2; form++) {   // 0: matmul, 1: swiglu_id of one matrix (gate = up = expert 0)
            Rider rd = riders(rp, 2, dx, yr, T);
            for (int i = 0; i < 2; i++) CUDA_CHECK(cudaMemsetAsync(dr[i], 0xff, (size_t)(T * rows[i]) * 4, stream));   // NaNs until written
            if (form == 0) {
                matmuls_gpu(&up, 1, dxq, nullptr, T, &dy, rd);
                matmul_gpu(&u0, dxq, T, dy1);
            } else {   // with the first rider's 37 rows as a router's logits, the rows routed after them (last_block)
                Routing rt = {dr[0], dp, dsel, dw, (int)rows[0], K, 1, ddone};
                swiglu_id_gpu(&u0, &u0, nullptr, T, 1, T > 1, dxq, nullptr, dy, rd, rt, Rounding{});
                swiglu_id_gpu(&u0, &u0, nullptr, T, 1, T > 1, dxq, nullptr, dy1, Rider{}, Routing{}, Rounding{});
                route_gpu(dr[0], dp + T * rows[0], nullptr, dsel + T * K, dw + T * K, T, (int)rows[0], K, 1, true, true);
                size_t np = (size_t)(T * rows[0]), nk = (size_t)(T * K);
                float *hp = (float *)xmalloc(np * 8), *hw = (float *)xmalloc(nk * 8);
                int *hs = (int *)xmalloc(nk * 2 * sizeof(int));
                host_copy(hp, dp, np * 8), host_copy(hw, dw, nk * 8), host_copy(hs, dsel, nk * 2 * sizeof(int));
                routed = bytes_differ(hp, hp + np, np * 4) + bytes_differ(hw, hw + nk, nk * 4) + bytes_differ(hs, hs + nk, nk * sizeof(int));
                free(hp), free(hw), free(hs);
            }
            for (int i = 0; i < 2; i++) matmul_gpu(&rm[i], dx, T, dr1[i]);
            host_copy(y, dy, (size_t)(F * T) * 4);
            host_copy(y1, dy1, (size_t)(F * T) * 4);
            double differ = bytes_differ(y, y1, (size_t)(F * T) * 4);
            for (int i = 0; i < 2; i++) {
                host_copy(got[i], dr[i], (size_t)(T * rows[i]) * 4);
                host_copy(want[i], dr1[i], (size_t)(T * rows[i]) * 4);
                differ += bytes_differ(got[i], want[i], (size_t)(T * rows[i]) * 4);
            }
            char name[128];
            snprintf(name, sizeof name, "%s %s %lldx%lld + F32 riders 37x%lld, 5x%lld T=%d = each alone", form ? "swiglu_id" : "matmul", type_name(wt),
                     (long long)F, (long long)n, (long long)n, (long long)n, T);
            report(tl, name, differ, 0, "bytes");
        }
        char name[128];
        snprintf(name, sizeof name, "swiglu_id + router riders + routing after them (last_block) T=%d = route alone", T);
        report(tl, name, routed, 0, "bytes");
        for (void *p : {(void *)dp, (void *)dw, (void *)dsel, (void *)dx, (void *)dy, (void *)dy1, dxq}) CUDA_CHECK(cudaFree(p));
        for (int i = 0; i < 2; i++) {
            for (void *p : {(void *)dr[i], (void *)dr1[i]}) CUDA_CHECK(cudaFree(p));
            free(got[i]), free(want[i]);
        }
        free(x), free(y), free(y1);
    }
    CUDA_CHECK(cudaFree(ddone));
    for (int i = 0; i < 2; i++) CUDA_CHECK(cudaFree((void *)rm[i].data)), free(wf[i]);
    CUDA_CHECK(cudaFree((void *)du.data));
}

// swiglu_id (gate, up and SwiGLU of the experts in one launch) against its plain twins on the GPU,
// matmul_id for gate and for up and then swiglu: bit for bit, with some ids -1. Gate: the model's
// gate_exps; up: its up_exps (of one type in the test models).
static void check_swiglu_id(Tally *tl, const GpuCheck *cpu) {
    const GpuMat *gm = &cpu->gate_exps, *um = &cpu->up_exps;
    if (gm->type != um->type) return;   // the forward pass runs the plain twins then
    int64_t n = um->n_in, F = um->n_out;
    int K = cpu->n_expert_used, E = cpu->n_expert;
    uint32_t wt = um->type;
    size_t xb = act_bytes(dot_type(wt), n);
    Mat dg = upload_weights(wt, n, F, E, gm->data), du = upload_weights(wt, n, F, E, um->data);
    // h's rows rounded for a down projection of this type by the launch that makes them (Rounding),
    // both poisoned first, against quantize_row_gpu of the rows it made (bytes)
    uint32_t rdt = dot_type(wt);
    size_t qb = act_bytes(rdt, F);
    auto check_rounding = [&](const char *what, float *dh, int rows, auto launch) {
        if (rdt == T_F32 || F % (rdt == T_Q8_K ? 256 : rdt == T_Q8_0 ? 32 : 1)) return;
        uint8_t *dq = (uint8_t *)dev_alloc(qb * rows), *dwant = (uint8_t *)dev_alloc(qb * rows);
        unsigned *dcount = (unsigned *)dev_alloc(rows * sizeof(unsigned));
        CUDA_CHECK(cudaMemset(dcount, 0, rows * sizeof(unsigned)));
        CUDA_CHECK(cudaMemset(dq, 0xff, qb * rows));
        CUDA_CHECK(cudaMemset(dwant, 0xff, qb * rows));
        CUDA_CHECK(cudaMemset(dh, 0xff, (size_t)(F * rows) * 4));   // (rows rounded before they are made differ)
        launch(Rounding{dq, qb, rdt, dcount});
        quantize_row_gpu(wt, dh, dwant, F, rows);
        uint8_t *got = (uint8_t *)xmalloc(qb * rows), *want = (uint8_t *)xmalloc(qb * rows);
        host_copy(got, dq, qb * rows);
        host_copy(want, dwant, qb * rows);
        char name[160];
        snprintf(name, sizeof name, "swiglu_id %s %lldx%lld %s, h rounded after = quantize_row", type_name(wt), (long long)F, (long long)n, what);
        report(tl, name, bytes_differ(got, want, qb * rows), 0, "bytes");
        for (void *p : {(void *)dq, (void *)dwant, (void *)dcount}) CUDA_CHECK(cudaFree(p));
        free(got), free(want);
    };
    for (int T : BATCHES) {
        int n_pairs = T * K;
        int *ids = (int *)xmalloc((size_t)n_pairs * sizeof(int));
        for (int p = 0; p < n_pairs; p++) ids[p] = p % 5 == 3 ? -1 : p < 3 * MMA_M && p % 4 != 1 ? 1 % E : (int)(rng_next() % E);   // (a run past MMA_M)
        float *x = random_floats(n * T, 1), *got = (float *)xmalloc((size_t)(F * n_pairs) * 4), *want = (float *)xmalloc((size_t)(F * n_pairs) * 4);
        float *dx = (float *)dev_copy(x, (size_t)(n * T) * 4), *dh = (float *)dev_alloc((size_t)(F * n_pairs) * 4);
        float *dgo = (float *)dev_alloc((size_t)(F * n_pairs) * 4), *duo = (float *)dev_alloc((size_t)(F * n_pairs) * 4);
        int *dids = (int *)dev_copy(ids, (size_t)n_pairs * sizeof(int));
        void *dxq = dev_alloc(xb * T);
        quantize_row_gpu(wt, dx, dxq, n, T);
        swiglu_id_gpu(&dg, &du, dids, n_pairs, K, false, dxq, nullptr, dh, Rider{}, Routing{}, Rounding{});
        host_copy(got, dh, (size_t)(F * n_pairs) * 4);
        matmul_id_gpu(&dg, dids, n_pairs, K, false, dxq, nullptr, dgo);
        matmul_id_gpu(&du, dids, n_pairs, K, false, dxq, nullptr, duo);
        swiglu_gpu(dgo, duo, dh, F * n_pairs);
        host_copy(want, dh, (size_t)(F * n_pairs) * 4);
        char name[128];
        snprintf(name, sizeof name, "swiglu_id %s %lldx%lld x%d pairs=%d T=%d = matmul_id x2 + swiglu", type_name(wt), (long long)F, (long long)n, E, n_pairs, T);
        report(tl, name, bytes_differ(got, want, (size_t)(F * n_pairs) * 4), 0, "bytes");
        snprintf(name, sizeof name, "pairs=%d T=%d", n_pairs, T);
        check_rounding(name, dh, n_pairs, [&](Rounding rq) { swiglu_id_gpu(&dg, &du, dids, n_pairs, K, false, dxq, nullptr, dh, Rider{}, Routing{}, rq); });
        if (rounds_in_block(dot_type(wt), n)) {   // the float rows, each block rounding its own (block_input)
            swiglu_id_gpu(&dg, &du, dids, n_pairs, K, false, nullptr, dx, dh, Rider{}, Routing{}, Rounding{});
            host_copy(want, dh, (size_t)(F * n_pairs) * 4);
            snprintf(name, sizeof name, "swiglu_id %s %lldx%lld T=%d rounded in the blocks = rounded first", type_name(wt), (long long)F, (long long)n, T);
            report(tl, name, bytes_differ(want, got, (size_t)(F * n_pairs) * 4), 0, "bytes");
        }
        bool mma = T > 1 && mma_batch(wt, n);
        if (mma) {   // the batch form (tensor cores, a tile an expert's run of pairs)
            CUDA_CHECK(cudaMemset(dh, 0xff, (size_t)(F * n_pairs) * 4));   // (NaNs where a row is not written)
            swiglu_id_gpu(&dg, &du, dids, n_pairs, K, true, dxq, nullptr, dh, Rider{}, Routing{}, Rounding{});
            host_copy(want, dh, (size_t)(F * n_pairs) * 4);
            snprintf(name, sizeof name, "swiglu_id %s %lldx%lld T=%d batch = a job a pair", type_name(wt), (long long)F, (long long)n, T);
            report(tl, name, bytes_differ(want, got, (size_t)(F * n_pairs) * 4), 0, "bytes");
            snprintf(name, sizeof name, "pairs=%d T=%d batch", n_pairs, T);
            check_rounding(name, dh, n_pairs, [&](Rounding rq) { swiglu_id_gpu(&dg, &du, dids, n_pairs, K, true, dxq, nullptr, dh, Rider{}, Routing{}, rq); });
        }
        // one matrix (the shared expert's form: ids NULL, row t of h from row t of x) against matmul x2 + swiglu
        Mat g0 = expert(&dg, 1 % E), u0 = expert(&du, 1 % E);
        swiglu_id_gpu(&g0, &u0, nullptr, T, 1, false, dxq, nullptr, dh, Rider{}, Routing{}, Rounding{});
        host_copy(got, dh, (size_t)(F * T) * 4);
        if (mma) {
            CUDA_CHECK(cudaMemset(dgo, 0xff, (size_t)(F * T) * 4));
            swiglu_id_gpu(&g0, &u0, nullptr, T, 1, true, dxq, nullptr, dgo, Rider{}, Routing{}, Rounding{});
            host_copy(want, dgo, (size_t)(F * T) * 4);
            snprintf(name, sizeof name, "swiglu_id %s %lldx%lld one matrix T=%d batch = a job a row", type_name(wt), (long long)F, (long long)n, T);
            report(tl, name, bytes_differ(want, got, (size_t)(F * T) * 4), 0, "bytes");
            snprintf(name, sizeof name, "one matrix T=%d batch", T);
            check_rounding(name, dgo, T, [&](Rounding rq) { swiglu_id_gpu(&g0, &u0, nullptr, T, 1, true, dxq, nullptr, dgo, Rider{}, Routing{}, rq); });
        }
        snprintf(name, sizeof name, "one matrix T=%d", T);
        check_rounding(name, dh, T, [&](Rounding rq) { swiglu_id_gpu(&g0, &u0, nullptr, T, 1, false, dxq, nullptr, dh, Rider{}, Routing{}, rq); });
        matmul_gpu(&g0, dxq, T, dgo);
        matmul_gpu(&u0, dxq, T, duo);
        swiglu_gpu(dgo, duo, dh, F * T);
        host_copy(want, dh, (size_t)(F * T) * 4);
        snprintf(name, sizeof name, "swiglu_id %s %lldx%lld one matrix T=%d = matmul x2 + swiglu", type_name(wt), (long long)F, (long long)n, T);
        report(tl, name, bytes_differ(got, want, (size_t)(F * T) * 4), 0, "bytes");
        for (void *p : {(void *)dx, (void *)dh, (void *)dgo, (void *)duo, (void *)dids, dxq}) CUDA_CHECK(cudaFree(p));
        free(ids), free(x), free(got), free(want);
    }
    CUDA_CHECK(cudaFree((void *)dg.data));
    CUDA_CHECK(cudaFree((void *)du.data));
}

// The shared expert's form of swiglu_id on the tensor cores where its launch is split by slot
// (MmaSplit): gate and up of random weights of up_exps's type with rows of 4 units (1024 values; 256
// rows: 16 row blocks, 4 slots each), 16 rows, against a job a row, bit for bit, and h's rounding
// after (its count of blocks a row: the row blocks, not their slots) against quantize_row_gpu of h
// (rounding_differs)
static void check_swiglu_split(Tally *tl, const GpuCheck *cpu) {
    uint32_t wt = cpu->up_exps.type, rdt = dot_type(wt);
    int64_t n = 1024, F = 256;
    int T = 16;
    if (!mma_batch(wt, n) || rdt == T_F32) return;
    size_t wb = row_bytes(wt, n) * F, xb = act_bytes(rdt, n), qb = act_bytes(rdt, F);
    uint8_t *wg = (uint8_t *)xmalloc(wb), *wu = (uint8_t *)xmalloc(wb);
    fill_exact_weights(wt, wg, n, F);
    fill_exact_weights(wt, wu, n, F);
    Mat g = upload_weights(wt, n, F, 1, wg), u = upload_weights(wt, n, F, 1, wu);
    float *x = random_floats(n * T, 1), *dx = dev_copy_floats(x, n * T), *dh = (float *)dev_alloc((size_t)(F * T) * 4), *dh2 = (float *)dev_alloc((size_t)(F * T) * 4);
    void *dxq = dev_alloc(xb * T);
    uint8_t *dq = (uint8_t *)dev_alloc(qb * T);
    unsigned *dcount = (unsigned *)dev_alloc(T * sizeof(unsigned));
    CUDA_CHECK(cudaMemset(dcount, 0, T * sizeof(unsigned)));
    CUDA_CHECK(cudaMemset(dq, 0xff, qb * T));
    CUDA_CHECK(cudaMemset(dh2, 0xff, (size_t)(F * T) * 4));
    quantize_row_gpu(wt, dx, dxq, n, T);
    swiglu_id_gpu(&g, &u, nullptr, T, 1, false, dxq, nullptr, dh, Rider{}, Routing{}, Rounding{});
    swiglu_id_gpu(&g, &u, nullptr, T, 1, true, dxq, nullptr, dh2, Rider{}, Routing{}, Rounding{dq, qb, rdt, dcount});
    float *h = (float *)xmalloc((size_t)(F * T) * 4), *h2 = (float *)xmalloc((size_t)(F * T) * 4);
    host_copy(h, dh, (size_t)(F * T) * 4);
    host_copy(h2, dh2, (size_t)(F * T) * 4);
    char name[128];
    snprintf(name, sizeof name, "swiglu_id %s %lldx%lld one matrix T=%d batch split by slot = a job a row", type_name(wt), (long long)F, (long long)n, T);
    report(tl, name, bytes_differ(h2, h, (size_t)(F * T) * 4), 0, "bytes");
    snprintf(name, sizeof name, "swiglu_id %s %lldx%lld one matrix T=%d split, h rounded after = quantize_row", type_name(wt), (long long)F, (long long)n, T);
    report(tl, name, rounding_differs(wt, dh2, dq, F, T), 0, "bytes");
    for (void *p : {(void *)g.data, (void *)u.data, (void *)dx, (void *)dh, (void *)dh2, dxq, (void *)dq, (void *)dcount}) CUDA_CHECK(cudaFree(p));
    free(wg), free(wu), free(x), free(h), free(h2);
}

// A decode step's residual steps by the matvec launch before them (Residual), add_norm's (with a
// second rounding, Q8_0) and moe_out's (K ranks, every seventh unused), against the same matvec and
// then the step's own launch (residual_gpu, checked against the CPU by check_add_norm and
// check_moe_out): every output the same bits (the norm's sums in the same order in a block of BLOCK
// threads as in one of ROW_BLOCK: sum_squares_row).
static void check_matvec_residual(Tally *tl, const GpuCheck *cpu, int K) {
    uint32_t wt = cpu->up_exps.type, dt = dot_type(wt);
    int E = cpu->n_embd;
    int64_t n = 256;
    uint8_t *wh = (uint8_t *)xmalloc(row_bytes(wt, n) * E);
    fill_exact_weights(wt, wh, n, E);
    Mat m = upload_weights(wt, n, E, 1, wh);
    float *xin = random_floats(n, 1), *dxin = dev_copy_floats(xin, n);
    void *dxinq = dev_alloc(act_bytes(dt, n));
    quantize_row_gpu(wt, dxin, dxinq, n, 1);
    int *sel = (int *)xmalloc((size_t)K * sizeof(int));
    for (int r = 0; r < K; r++) sel[r] = r % 7 == 3 ? -1 : (int)(rng_next() % cpu->n_expert);
    float *x = random_floats(E, 3), *nw = random_floats(E, 0.2f), *wr = random_floats(K, 0.3f), *ye = random_floats((int64_t)K * E, 1), *logit = random_floats(1, 3);
    for (int i = 0; i < E; i++) nw[i] += 1;
    int *dsel = (int *)dev_copy(sel, (size_t)K * sizeof(int));
    float *dnw = dev_copy_floats(nw, E), *dwr = dev_copy_floats(wr, K), *dye = dev_copy_floats(ye, (int64_t)K * E), *dl = dev_copy_floats(logit, 1);
    unsigned *dcount = (unsigned *)dev_alloc(sizeof(unsigned));
    CUDA_CHECK(cudaMemset(dcount, 0, sizeof(unsigned)));
    size_t qb = act_bytes(dt, E), qb2 = act_bytes(T_Q8_0, E);
    for (bool moe : {false, true}) {
        int nf = moe ? 4 : 3, nq = moe ? 1 : 2;   // what the step writes: x, xn, y (the matvec's row: mix or sh), moe's mix; xq, add_norm's xq2
        float *out[2][4];   // [fused][output]
        uint8_t *q[2][2];
        for (int f = 0; f < 2; f++) {
            float *dx = dev_copy_floats(x, E), *dxn = (float *)dev_alloc((size_t)E * 4), *dy = (float *)dev_alloc((size_t)E * 4),
                  *dmix = (float *)dev_alloc((size_t)E * 4);
            uint8_t *dq = (uint8_t *)dev_alloc(qb), *dq2 = (uint8_t *)dev_alloc(qb2);
            Residual r = moe ? moe_out_step(dx, dsel, dwr, dye, K, dmix, dy, dl, dnw, E, cpu->eps, wt, dxn, dq)
                             : add_norm_step(dx, dy, dnw, E, cpu->eps, wt, dxn, dq, T_Q8_0, dq2);
            r.count = dcount;
            const Mat *w = &m;
            float *y = dy;
            matmuls_gpu(&w, 1, dxinq, dxin, 1, &y, Rider{}, f ? &r : nullptr);
            if (!f) residual_gpu(r, 1);
            float *dev[4] = {dx, dxn, dy, dmix};
            for (int i = 0; i < nf; i++) host_copy(out[f][i] = (float *)xmalloc((size_t)E * 4), dev[i], (size_t)E * 4);
            uint8_t *devq[2] = {dq, dq2};
            size_t qbs[2] = {qb, qb2};
            for (int i = 0; i < nq; i++) host_copy(q[f][i] = (uint8_t *)xmalloc(qbs[i]), devq[i], qbs[i]);
            for (void *p : {(void *)dx, (void *)dxn, (void *)dy, (void *)dmix, (void *)dq, (void *)dq2}) CUDA_CHECK(cudaFree(p));
        }
        double d = 0;
        for (int i = 0; i < nf; i++) d += bytes_differ(out[1][i], out[0][i], (size_t)E * 4);
        for (int i = 0; i < nq; i++) d += bytes_differ(q[1][i], q[0][i], act_content(i ? T_Q8_0 : dt, E));
        char name[128];
        snprintf(name, sizeof name, "matvec %s %dx%lld + %s by its last block = its own launch (x, xn, rows, roundings)", type_name(wt), E, (long long)n,
                 moe ? "moe_out" : "add_norm");
        report(tl, name, d, 0, "bytes");
        for (int f = 0; f < 2; f++) {
            for (int i = 0; i < nf; i++) free(out[f][i]);
            for (int i = 0; i < nq; i++) free(q[f][i]);
        }
    }
    for (void *p : {(void *)m.data, (void *)dxin, dxinq, (void *)dsel, (void *)dnw, (void *)dwr, (void *)dye, (void *)dl, (void *)dcount}) CUDA_CHECK(cudaFree(p));
    free(wh), free(xin), free(sel), free(x), free(nw), free(wr), free(ye), free(logit);
}

// swiglu on T rows of n_ff: the same bits (expf_ggml is the CPU's)
static void check_swiglu(Tally *tl, const GpuCheck *cpu) {
    for (int T : BATCHES) {
        int64_t n = (int64_t)T * cpu->n_ff;
        float *g = random_floats(n, 3), *u = random_floats(n, 1), *want = (float *)xmalloc((size_t)n * 4), *got = (float *)xmalloc((size_t)n * 4);
        cpu->swiglu(g, u, want, n);
        float *dg = (float *)dev_copy(g, (size_t)n * 4), *du = (float *)dev_copy(u, (size_t)n * 4), *dh = (float *)dev_alloc((size_t)n * 4);
        swiglu_gpu(dg, du, dh, n);
        host_copy(got, dh, (size_t)n * 4);
        char name[96];
        snprintf(name, sizeof name, "swiglu n=%d T=%d", cpu->n_ff, T);
        report(tl, name, bytes_differ(got, want, (size_t)n * 4), 0, "bytes");
        CUDA_CHECK(cudaFree(dg));
        CUDA_CHECK(cudaFree(du));
        CUDA_CHECK(cudaFree(dh));
        free(g), free(u), free(want), free(got);
    }
}

// moe_out of T rows of K ranks from their pairs (every seventh rank -1), with the shared expert and the
// next norm for weights of type wtype, against the CPU's moe_sum (mix: the same bits), moe_shared_gate
// (ffn, in sh: the device's expf in the sigmoid, 1e-6), the residual add (x: 1e-6, from ffn) and
// rmsnorm (xn: 1e-6), and xq against quantize_row_gpu of xn (bytes). Two terms add alike in either
// order, so the rank order is seen only from K = 3: run with K = 8 too.
static void check_moe_out(Tally *tl, const GpuCheck *cpu, int K, uint32_t wtype) {
    int E = cpu->n_embd;
    for (int T : BATCHES) {
        int n_pairs = T * K;
        int64_t all = (int64_t)T * E;
        int *sel = (int *)xmalloc((size_t)n_pairs * sizeof(int)), *slot = (int *)xmalloc((size_t)n_pairs * sizeof(int));
        for (int p = 0; p < n_pairs; p++) {
            sel[p] = p % 7 == 3 ? -1 : (int)(rng_next() % cpu->n_expert);
            slot[p] = sel[p] < 0 ? -1 : p;
        }
        float *w = random_floats(n_pairs, 0.3f), *ye = random_floats((int64_t)n_pairs * E, 1), *sh = random_floats(all, 1), *logit = random_floats(T, 3);
        float *x = random_floats(all, 3), *nw = random_floats(E, 0.2f);
        for (int i = 0; i < E; i++) nw[i] += 1;
        float *moe = (float *)xmalloc((size_t)all * 4), *ffn = (float *)xmalloc((size_t)all * 4), *xn = (float *)xmalloc((size_t)all * 4);
        float *g[4];
        for (float *&p : g) p = (float *)xmalloc((size_t)all * 4);
        int *dsel = (int *)dev_copy(sel, (size_t)n_pairs * sizeof(int));
        float *dw = dev_copy_floats(w, n_pairs), *dye = dev_copy_floats(ye, (int64_t)n_pairs * E), *dsh = dev_copy_floats(sh, all), *dl = dev_copy_floats(logit, T);
        float *dx = dev_copy_floats(x, all), *dnw = dev_copy_floats(nw, E), *dmix = (float *)dev_alloc((size_t)all * 4), *dxn = (float *)dev_alloc((size_t)all * 4);
        void *dxq = dev_alloc(act_bytes(dot_type(wtype), E) * T);
        moe_out_gpu(dx, dsel, dw, dye, K, dmix, dsh, dl, dnw, E, cpu->eps, wtype, dxn, dxq, T);
        float *dev[4] = {dmix, dsh, dx, dxn};
        for (int i = 0; i < 4; i++) host_copy(g[i], dev[i], (size_t)all * 4);
        for (int t = 0; t < T; t++) {
            float *m = moe + (size_t)t * E, *f = ffn + (size_t)t * E, *xr = x + (size_t)t * E;
            cpu->moe_sum(slot + t * K, w + t * K, ye, K, E, m);
            memcpy(f, m, (size_t)E * 4);
            cpu->moe_shared_gate(f, sh + (size_t)t * E, logit[t], E);
            for (int i = 0; i < E; i++) xr[i] += f[i];
            cpu->rmsnorm(xn + (size_t)t * E, xr, nw, E, cpu->eps);
        }
        char name[96];
        snprintf(name, sizeof name, "moe_out K=%d n=%d T=%d moe (moe_sum)", K, E, T);
        report(tl, name, bytes_differ(g[0], moe, (size_t)all * 4), 0, "bytes");
        snprintf(name, sizeof name, "moe_out K=%d n=%d T=%d ffn, x, xn", K, E, T);
        report(tl, name, fmax(fmax(rel_err(g[1], ffn, all), rel_err(g[2], x, all)), rel_err(g[3], xn, all)), 1e-6, "rel");
        snprintf(name, sizeof name, "moe_out %s K=%d n=%d T=%d xq = quantize_row(xn)", type_name(dot_type(wtype)), K, E, T);
        report(tl, name, rounding_differs(wtype, dxn, dxq, E, T), 0, "bytes");
        for (void *d : {(void *)dsel, (void *)dw, (void *)dye, (void *)dsh, (void *)dl, (void *)dx, (void *)dnw, (void *)dmix, (void *)dxn, dxq})
            CUDA_CHECK(cudaFree(d));
        free(sel), free(slot), free(w), free(ye), free(sh), free(logit), free(x), free(nw), free(moe), free(ffn), free(xn);
        for (float *p : g) free(p);
    }
}

// Runs every check, prints one line per op and the summary; returns the number of failures.
extern "C" int gpu_check_ops(const GpuCheck *cpu) {
    if (cpu->size != sizeof(GpuCheck)) {
        fprintf(stderr, "clover: error: internal: clover.c and clover.cu disagree on struct GpuCheck\n");
        exit(1);
    }
    char info[512];
    if (!gpu_init(info, sizeof info)) {
        fprintf(stderr, "clover: error: --check-ops needs a GPU, but %s\n", info);
        exit(1);
    }
    printf("check-ops: %s\n", info);
    mma_split_init();
    Tally tl = {0, 0};
    check_fp16(&tl);
    // each distinct (type, shape) once; big matrices by their first rows (the CPU twin is slow there)
    for (int i = 0; i < cpu->n_mats; i++) {
        const GpuMat *m = &cpu->mats[i];
        bool seen_type = false, seen = false;
        for (int j = 0; j < i; j++) {
            seen_type |= cpu->mats[j].type == m->type;
            seen |= cpu->mats[j].type == m->type && cpu->mats[j].n_in == m->n_in && cpu->mats[j].n_out == m->n_out;
        }
        if (seen) continue;
        int64_t rows = m->n_out < 2048 ? m->n_out : 2048;
        bool seen_n = false;
        for (int j = 0; j < i; j++) seen_n |= dot_type(cpu->mats[j].type) == dot_type(m->type) && cpu->mats[j].n_in == m->n_in;
        if (!seen_n) check_quantize(&tl, cpu, m->type, m->n_in);
        if (!seen_type) check_matmul(&tl, cpu, m, true, rows);
        check_matmul(&tl, cpu, m, false, rows);
        if (!seen_type && m->n_in < 1024 && mma_batch(m->type, 1024)) {   // rows of 4 units (random weights): the tensor-core
            GpuMat w = *m;                                              // batch's slots, rotated and folded, against matvec's
            w.n_in = 1024, w.n_out = 96;
            uint8_t *data = (uint8_t *)xmalloc(row_bytes(w.type, w.n_in) * w.n_out);
            fill_exact_weights(w.type, data, w.n_in, w.n_out);
            w.data = data;
            check_matmul(&tl, cpu, &w, false, w.n_out);
            free(data);
        }
    }
    check_row_op(&tl, cpu, OP_RMSNORM, cpu->n_embd);
    check_row_op(&tl, cpu, OP_RMSNORM, cpu->head_dim);
    if (cpu->d_state != cpu->head_dim) check_row_op(&tl, cpu, OP_RMSNORM, cpu->d_state);
    check_row_op(&tl, cpu, OP_L2NORM, cpu->d_state);
    check_row_op(&tl, cpu, OP_SOFTMAX, cpu->n_expert);
    check_row_op(&tl, cpu, OP_SOFTMAX, 1000);
    check_row_op(&tl, cpu, OP_SILU, cpu->n_ff);
    check_argmax(&tl, cpu, cpu->n_vocab);
    for (int skip : {-1, 0, cpu->n_vocab - 2}) check_best_token(&tl, cpu, cpu->n_vocab, skip);
    for (int i = 0; i < cpu->n_mats; i++) {   // the norms' roundings: every dot type of an n_embd-wide matrix, once
        const GpuMat *m = &cpu->mats[i];
        bool seen = m->n_in != cpu->n_embd;
        for (int j = 0; j < i && !seen; j++) seen = cpu->mats[j].n_in == cpu->n_embd && dot_type(cpu->mats[j].type) == dot_type(m->type);
        if (!seen) check_add_norm(&tl, cpu, cpu->n_embd, m->type);
    }
    // GDN checks (section 8)
    if (cpu->n_v_heads > 0) {
        check_gdn_gates(&tl, cpu);
        check_gdn_conv(&tl, cpu, false);
        check_gdn_conv(&tl, cpu, true);
        check_gdn_conv_push_gates(&tl, cpu);
        for (int d : {cpu->d_state, 80}) check_delta_rule(&tl, cpu, false, d), check_delta_rule(&tl, cpu, true, d);
        check_gdn_rev_mix(&tl, cpu);
        check_gdn_gated_norm(&tl, cpu);
    }
    // attention and MoE checks (sections 9, 10)
    check_attn_prep(&tl, cpu, 3);
    check_attn_prep(&tl, cpu, 4000);
    for (uint32_t type : CACHE_TYPES)
        for (int T : BATCHES) {
            check_attention(&tl, cpu, type, T, 0, true);
            check_attention(&tl, cpu, type, T, 37, true);
            check_attention(&tl, cpu, type, T, 37, false);
            if (T != 7) check_attention(&tl, cpu, type, T, 3000, true);
            if (T == 7) check_attention(&tl, cpu, type, T, 37, true, true);
        }
    check_route(&tl, cpu, cpu->n_expert, cpu->n_expert_used);
    if (cpu->n_expert != 256) check_route(&tl, cpu, 256, 8);
    check_coreset(&tl, cpu);
    check_matmul_id(&tl, cpu, &cpu->up_exps, cpu->n_expert_used);
    check_matmul_id(&tl, cpu, &cpu->down_exps, 1);
    check_swiglu(&tl, cpu);
    check_swiglu_id(&tl, cpu);
    check_swiglu_split(&tl, cpu);
    check_riders(&tl, cpu);
    check_moe_out(&tl, cpu, cpu->n_expert_used, cpu->mats[0].type);
    check_matvec_residual(&tl, cpu, cpu->n_expert_used);
    if (cpu->n_expert_used != 8) check_moe_out(&tl, cpu, 8, cpu->up_exps.type);
    printf("check-ops: %d ops, %d passed, %d failed\n", tl.n, tl.n - tl.failed, tl.failed);
    return tl.failed;
}
