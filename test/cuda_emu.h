// test/cuda_emu.h — the subset of the CUDA runtime that clover.cu uses, executed on the CPU, so that
// the kernels run and are checked on machines without a GPU (make cuda-emu builds build/clover-emu
// with clang++; see README.md, "GPU", "CUDA executed on the CPU"). Test only:
// clover.cu includes it instead of <cuda_runtime.h> when CLOVER_EMU is defined.
//
// Model: a launch runs its blocks one after another; each thread of a block is a fiber with its own
// stack that gives up the CPU only at __syncthreads and at warp operations. The scheduler runs the
// runnable fibers in the order CLOVER_EMU_ORDER names (forward: thread 0 first; reverse; random: a
// new permutation each round, seeded by CLOVER_EMU_SEED), so code that reads what another thread
// has not yet written (a missing barrier) sees different values in different orders. It checks:
//   - __syncthreads: every thread of the block arrives, all at the same call (file:line); a thread
//     that has returned, or one waiting at another barrier or warp operation, is an error;
//   - warp operations (__shfl_*_sync, and the tensor cores' mma, computed as the PTX ISA lays out
//     its fragments): the mask is full, all 32 lanes of the warp take part, at the same call, with the same offset and width (__shfl_sync may take a width: lane src of each group of width lanes);
//   - a block whose threads all wait with nothing to release is a deadlock, reported with who waits where;
//   - device memory (cudaMalloc) is filled with 0xff bytes (a float NaN) so a read of unwritten memory
//     shows; __shared__ arrays live in one linker section, set to 0xff before each block; each
//     allocation has a guard zone after it, checked after each launch (a write past the end);
//   - cudaMemcpy's direction against where its pointers really are;
//   - sm_90's launch limits, at every launch (see "launch limits" below): grid and block sizes, and
//     shared memory per block (the static arrays a kernel writes plus the launch's dynamic bytes,
//     48 KiB, or up to 227 KiB after cudaFuncSetAttribute's opt-in).
// Any failure is one line `clover: error: cuda-emu: ...` (naming the kernel where there is one) and
// exit status 1.
// CLOVER_EMU_LAUNCH_ONLY=1: every launch's configuration is checked, no block runs and device memory
// is not poisoned, so a batch far too large to emulate (-ub 8192) shows in seconds whether every
// launch fits the limits; what it computes is garbage.
// CLOVER_EMU_COUNT=FILE: the device memory each launch and copy touches, written to FILE (the cost
// model of test/costmodel.c reads it; see "counting" below). A measurement mode: the same results,
// but device memory is neither poisoned nor guarded. CLOVER_EMU_COUNT_STOP=N: the program ends
// (exit 0) at its N-th host wait, so that a run measured for its first passes need not finish.
// What it cannot check: races between blocks, the memory model, timing, inline PTX.
#pragma once
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <elf.h>
#include <signal.h>
#include <ucontext.h>
#include <sys/mman.h>
#include <algorithm>
#include <map>
#include <dlfcn.h>
#include <functional>
#include <tuple>
#include <utility>
#include <vector>

// ---- types and constants of the runtime API --------------------------------------------------
struct dim3 {
    unsigned x = 1, y = 1, z = 1;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
enum cudaError_t { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2, cudaErrorInvalidConfiguration = 9 };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
enum cudaMemcpyKind { cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2, cudaMemcpyDeviceToDevice = 3 };
struct cudaDeviceProp { char name[256]; size_t totalGlobalMem; int major, minor, multiProcessorCount; };
struct cudaLaunchAttribute;
struct cudaLaunchConfig_t {
    dim3 gridDim, blockDim;
    size_t dynamicSmemBytes;
    void *stream;
    cudaLaunchAttribute *attrs;
    unsigned numAttrs;
};
typedef void *cudaStream_t;
// A graph is the list of what was captured, replayed in order (the emulation is synchronous).
struct EmuGraph { std::vector<std::function<void()>> ops; };
typedef EmuGraph *cudaGraph_t;
typedef EmuGraph *cudaGraphExec_t;
typedef void *cudaGraphNode_t;
enum cudaStreamCaptureMode { cudaStreamCaptureModeGlobal = 0, cudaStreamCaptureModeThreadLocal = 1, cudaStreamCaptureModeRelaxed = 2 };
static EmuGraph *emu_capture;   // the graph being captured (cudaStreamBeginCapture .. EndCapture), or NULL

#define __global__
#define __device__
#define __host__
#define __launch_bounds__(...)
#define __forceinline__ inline
// Static shared arrays become function-static storage in one section (valid: blocks run one at a
// time), so the scheduler can poison all of it before each block.
#define __shared__ __attribute__((section("emu_shared"))) static
extern "C" char __start_emu_shared[], __stop_emu_shared[];
// Dynamic shared memory (CUDA's `extern __shared__ T name[]`, whose size the launch gives): declared
// in a kernel as DYNAMIC_SHARED(T, name); (clover.cu defines the macro as that extern declaration for
// nvcc where a kernel uses it). Here one buffer of the largest size a block may have, poisoned as the
// static arrays are, with a guard zone after the launch's bytes.
enum { EMU_SMEM_OPTIN = 227 * 1024, EMU_SMEM_GUARD = 64 };
alignas(16) static unsigned char emu_dynamic_smem[EMU_SMEM_OPTIN + EMU_SMEM_GUARD];
#define DYNAMIC_SHARED(T, name) T *name = (T *)emu_dynamic_smem

static void emu_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
#include <stdarg.h>
static void emu_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fflush(stdout);   // what the program printed before comes first
    fprintf(stderr, "clover: error: cuda-emu: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

// ---- fibers: a context switch of the callee-saved registers (System V x86-64) ----------------
// emu_switch(&from_sp, to_sp): pushes rbp, rbx, r12-r15, saves rsp in *from_sp, loads to_sp, pops.
extern "C" void emu_switch(void **from_sp, void *to_sp);
asm(".text\n.globl emu_switch\n.type emu_switch,@function\nemu_switch:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n  ret\n"
    ".size emu_switch, .-emu_switch\n");

enum EmuState { EMU_RUNNABLE, EMU_AT_BARRIER, EMU_AT_WARP, EMU_DONE };
enum EmuWarpOp { EMU_SHFL_XOR, EMU_SHFL_DOWN, EMU_SHFL_UP, EMU_SHFL_IDX, EMU_MMA, EMU_SYNCWARP };
struct EmuCopy { uint8_t *dst; uint8_t v[16]; uint64_t group; };   // an asynchronous copy in flight
struct EmuThread {
    void *sp;
    EmuState state;
    const char *file;   // where it waits
    int line;
    EmuWarpOp op;
    unsigned mask;
    int arg, width;
    uint64_t in, out;   // a warp operation's value and result
    uint32_t mma_a[4], mma_b[2];  // an mma's fragments (EMU_MMA) and its result
    int32_t mma_d[4];
    uint64_t loads, load_bytes;   // counting: its loads from device memory in this block
    uint64_t sloads;              // and from shared memory
    uint64_t tail_loads;          // counting: its loads (device and shared) after emu_tail()
    uint64_t shuffles;            // counting: its warp operations (the same pipe as the loads)
    uint64_t mmas;                // counting: its tensor-core instructions
    std::vector<EmuCopy> copies;  // its asynchronous copies in flight, in issue order
    uint64_t groups;              // the groups it has committed
    uint64_t waits, waited_bytes; // counting: its waits for copies, and the bytes in flight at each, summed
    std::vector<uintptr_t> lines; // counting: each of its loads, in order: from device memory its 128-byte
                                  // line(s); from shared memory, tagged, its address and size (EMU_SHARED_LOAD)
    std::vector<const void *> sites; // CLOVER_EMU_SITES: the code address of each of lines' loads
};

enum { EMU_MAX_THREADS = 1024, EMU_STACK = 256 * 1024 };
struct Emu {
    int order;                      // 0 forward, 1 reverse, 2 random
    uint64_t rng;
    EmuThread th[EMU_MAX_THREADS];
    char *stacks;
    int n, cur;                     // threads in the block, the one running
    void *sched_sp;
    void (*body)(void *);
    void *body_arg;
    const char *kernel;
    size_t dynamic_smem;            // the launch's dynamic shared memory bytes
    bool launch_only;               // CLOVER_EMU_LAUNCH_ONLY: check each launch, run no block
};
static Emu emu;
// the built-in variables, set by the scheduler before each switch into a fiber
static dim3 threadIdx, blockIdx, blockDim, gridDim;

static void emu_count_init(void);   // (counting, below)
static void emu_init(void) {
    if (emu.stacks) return;
    emu_count_init();
    const char *o = getenv("CLOVER_EMU_ORDER");
    if (!o || !strcmp(o, "forward")) emu.order = 0;
    else if (!strcmp(o, "reverse")) emu.order = 1;
    else if (!strcmp(o, "random")) emu.order = 2;
    else emu_fail("CLOVER_EMU_ORDER=%s: expected forward, reverse or random", o);
    const char *s = getenv("CLOVER_EMU_SEED");
    emu.rng = s ? strtoull(s, NULL, 10) * 2654435761u + 1 : 88172645463325252ull;
    const char *lo = getenv("CLOVER_EMU_LAUNCH_ONLY");
    emu.launch_only = lo && strcmp(lo, "0") && *lo;
    emu.stacks = (char *)mmap(NULL, (size_t)EMU_MAX_THREADS * EMU_STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (emu.stacks == MAP_FAILED) emu_fail("cannot map %d fiber stacks", EMU_MAX_THREADS);
}

static uint64_t emu_random(void) {   // xorshift64*
    emu.rng ^= emu.rng >> 12, emu.rng ^= emu.rng << 25, emu.rng ^= emu.rng >> 27;
    return emu.rng * 2685821657736338717ull;
}

static void emu_set_thread(int t) {
    emu.cur = t;
    threadIdx = dim3(t % blockDim.x, t / blockDim.x % blockDim.y, t / (blockDim.x * blockDim.y));
}

// a fiber's first frame: run the kernel body, then report done and never return
static void emu_fiber_main(void) {
    emu.body(emu.body_arg);
    if (!emu.th[emu.cur].copies.empty())
        emu_fail("%s block (%u,%u): thread %d returned with %zu asynchronous copies in flight (no wait covered them)", emu.kernel, blockIdx.x,
                 blockIdx.y, emu.cur, emu.th[emu.cur].copies.size());
    emu.th[emu.cur].state = EMU_DONE;
    emu_switch(&emu.th[emu.cur].sp, emu.sched_sp);
    __builtin_unreachable();
}

static void emu_yield(void) { emu_switch(&emu.th[emu.cur].sp, emu.sched_sp); }

static const char *emu_state_name(const EmuThread *t) {
    static char buf[600];
    switch (t->state) {
    case EMU_DONE: return "returned";
    case EMU_RUNNABLE: return "running";
    case EMU_AT_BARRIER: snprintf(buf, sizeof buf, "at __syncthreads %s:%d", t->file, t->line); return buf;
    case EMU_AT_WARP: snprintf(buf, sizeof buf, "at a warp operation %s:%d", t->file, t->line); return buf;
    }
    return "?";
}

// the first thread whose state or call site differs from thread `a`'s, or -1
static int emu_first_unlike(int a, int from, int to) {
    for (int t = from; t < to; t++) {
        const EmuThread *x = &emu.th[t], *y = &emu.th[a];
        if (x->state != y->state || x->line != y->line || (x->file != y->file && strcmp(x->file, y->file))) return t;
    }
    return -1;
}

// mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 over the 32 lanes x[0..31] of a warp, as the PTX ISA
// lays out its fragments: lane l = 4 g + t holds A (16 x 32, row-major) bytes i of register r at
// row g + 8 (r % 2), column 4 t + i + 16 (r / 2); B (32 x 8) bytes i of register r at row 4 t + i +
// 16 r, column g; D (16 x 8) register r at row g + 8 (r / 2), column 2 t + r % 2.
// D = A B (C zero, as clover.cu issues it), exact in int32 (wrapping, as the device's adder does).
static void emu_mma_resolve(EmuThread *x) {
    int8_t A[16][32], B[32][8];
    for (int l = 0; l < 32; l++) {
        int g = l / 4, t = l % 4;
        for (int r = 0; r < 4; r++)
            for (int i = 0; i < 4; i++) A[g + 8 * (r % 2)][4 * t + i + 16 * (r / 2)] = (int8_t)(x[l].mma_a[r] >> (8 * i));
        for (int r = 0; r < 2; r++)
            for (int i = 0; i < 4; i++) B[4 * t + i + 16 * r][g] = (int8_t)(x[l].mma_b[r] >> (8 * i));
    }
    for (int l = 0; l < 32; l++) {
        int g = l / 4, t = l % 4;
        for (int r = 0; r < 4; r++) {
            int m = g + 8 * (r / 2), n = 2 * t + r % 2;
            uint32_t d = 0;
            for (int k = 0; k < 32; k++) d += (uint32_t)(A[m][k] * B[k][n]);
            x[l].mma_d[r] = (int32_t)d;
        }
    }
}

// All 32 lanes of warp w wait at one warp operation: check it and compute every lane's result.
static bool emu_resolve_warp(int w) {
    int t0 = 32 * w;
    for (int l = 0; l < 32; l++)
        if (emu.th[t0 + l].state != EMU_AT_WARP) return false;
    int u = emu_first_unlike(t0, t0, t0 + 32);
    if (u >= 0)
        emu_fail("%s block (%u,%u): warp %d diverged: thread %d %s, thread %d %s", emu.kernel, blockIdx.x, blockIdx.y, w, t0,
                 emu_state_name(&emu.th[t0]), u, emu_state_name(&emu.th[u]));
    for (int l = 0; l < 32; l++) {
        EmuThread *x = &emu.th[t0 + l];
        if (x->mask != 0xffffffffu) emu_fail("%s: warp operation at %s:%d with mask %#x: clover.cu's warp operations take the full mask", emu.kernel, x->file, x->line, x->mask);
        int wd = x->width;
        if (x->op != emu.th[t0].op || x->arg != emu.th[t0].arg || wd != emu.th[t0].width || wd < 1 || wd > 32 || (wd & (wd - 1)) ||
            (x->op != EMU_SHFL_IDX && wd != 32))
            emu_fail("%s: warp operation at %s:%d: lanes disagree on its offset or width, or the width is not a power of two up to 32 (a width: __shfl_sync only)", emu.kernel, x->file, x->line);
    }
    if (emu.th[t0].op == EMU_MMA || emu.th[t0].op == EMU_SYNCWARP) {   // (a __syncwarp only releases the lanes)
        if (emu.th[t0].op == EMU_MMA) emu_mma_resolve(&emu.th[t0]);
        for (int l = 0; l < 32; l++) emu.th[t0 + l].state = EMU_RUNNABLE;
        return true;
    }
    for (int l = 0; l < 32; l++) {
        EmuThread *x = &emu.th[t0 + l];
        int src = l;
        switch (x->op) {
        case EMU_SHFL_XOR: src = l ^ x->arg; break;
        case EMU_SHFL_DOWN: src = l + x->arg < 32 ? l + x->arg : l; break;
        case EMU_SHFL_UP: src = l - x->arg >= 0 ? l - x->arg : l; break;
        case EMU_SHFL_IDX: src = (l & ~(x->width - 1)) + (x->arg & (x->width - 1)); break;   // (lane arg of each width lanes)
        case EMU_MMA: case EMU_SYNCWARP: break;   // (resolved above)
        }
        x->out = emu.th[t0 + src].in;
    }
    for (int l = 0; l < 32; l++) emu.th[t0 + l].state = EMU_RUNNABLE;
    return true;
}

// the guard after the block's dynamic shared memory, untouched (the emulator's own loads: not counted,
// so not inlined into an instrumented caller)
__attribute__((no_sanitize("coverage"), noinline)) static void emu_check_smem_guard(void) {
    for (int g = 0; g < EMU_SMEM_GUARD; g++)
        if (emu_dynamic_smem[emu.dynamic_smem + g] != 0xa5)
            emu_fail("%s block (%u,%u) wrote past its %zu bytes of dynamic shared memory (byte %d after them)", emu.kernel, blockIdx.x, blockIdx.y,
                     emu.dynamic_smem, g);
}
// Run one block to completion: sweep the runnable fibers in the chosen order until none is left,
// then release a warp operation or the barrier, or report why the block cannot go on.
static void emu_run_block(void) {
    int n = emu.n;
    memset(__start_emu_shared, 0xff, (size_t)(__stop_emu_shared - __start_emu_shared));
    memset(emu_dynamic_smem, 0xff, emu.dynamic_smem);
    memset(emu_dynamic_smem + emu.dynamic_smem, 0xa5, EMU_SMEM_GUARD);
    for (int t = 0; t < n; t++) {
        void **sp = (void **)(emu.stacks + (size_t)(t + 1) * EMU_STACK);
        *--sp = NULL;                          // keeps the entry's stack aligned as after a call
        *--sp = (void *)emu_fiber_main;        // where the first switch "returns" to
        for (int r = 0; r < 6; r++) *--sp = NULL;
        emu.th[t].sp = sp;
        emu.th[t].state = EMU_RUNNABLE;
        emu.th[t].loads = emu.th[t].load_bytes = emu.th[t].sloads = emu.th[t].tail_loads = emu.th[t].shuffles = emu.th[t].mmas = 0;
        emu.th[t].copies.clear(), emu.th[t].groups = emu.th[t].waits = emu.th[t].waited_bytes = 0;
        emu.th[t].lines.clear(), emu.th[t].sites.clear();
    }
    int order[EMU_MAX_THREADS], arrived[EMU_MAX_THREADS / 32] = {0};   // lanes of each warp at a warp operation
    for (int t = 0; t < n; t++) order[t] = emu.order == 1 ? n - 1 - t : t;
    for (;;) {
        if (emu.order == 2)
            for (int t = n - 1; t > 0; t--) {
                int j = (int)(emu_random() % (uint64_t)(t + 1)), s = order[t];
                order[t] = order[j], order[j] = s;
            }
        bool ran = false;
        for (int i = 0; i < n; i++) {
            int t = order[i];
            if (emu.th[t].state != EMU_RUNNABLE) continue;
            emu_set_thread(t);
            emu_switch(&emu.sched_sp, emu.th[t].sp);
            ran = true;
            // the warp's last lane arrived: release it now (its lanes later in this sweep run in it)
            if (emu.th[t].state == EMU_AT_WARP && ++arrived[t / 32] == 32 && emu_resolve_warp(t / 32)) arrived[t / 32] = 0;
        }
        if (ran) continue;
        bool released = false;
        for (int w = 0; w < n / 32; w++) released |= emu_resolve_warp(w);
        if (released) continue;
        int at_barrier = 0, done = 0, first = -1;
        for (int t = 0; t < n; t++) {
            if (emu.th[t].state == EMU_DONE) done++;
            if (emu.th[t].state == EMU_AT_BARRIER) at_barrier++, first = first < 0 ? t : first;
        }
        if (done == n) {
            emu_check_smem_guard();
            return;
        }
        if (at_barrier == 0 || at_barrier + done < n || done > 0) {
            int a = first >= 0 ? first : 0, u = emu_first_unlike(a, 0, n);
            for (int t = 0; t < n && u < 0; t++) if (emu.th[t].state != emu.th[a].state) u = t;
            if (u < 0) u = a;
            char sa[600];
            snprintf(sa, sizeof sa, "%s", emu_state_name(&emu.th[a]));
            emu_fail("%s block (%u,%u): deadlock or divergent barrier: thread %d %s, thread %d %s (%d of %d threads at a barrier, %d returned)",
                     emu.kernel, blockIdx.x, blockIdx.y, a, sa, u, emu_state_name(&emu.th[u]), at_barrier, n, done);
        }
        int u = emu_first_unlike(first, 0, n);
        if (u >= 0) {
            char sa[600];
            snprintf(sa, sizeof sa, "%s", emu_state_name(&emu.th[first]));
            emu_fail("%s block (%u,%u): divergent __syncthreads: thread %d %s, thread %d %s", emu.kernel, blockIdx.x, blockIdx.y, first, sa, u, emu_state_name(&emu.th[u]));
        }
        for (int t = 0; t < n; t++) emu.th[t].state = EMU_RUNNABLE;
    }
}

// ---- the device-side functions ----------------------------------------------------------------
static inline void emu_syncthreads(const char *file, int line) {
    EmuThread *t = &emu.th[emu.cur];
    t->state = EMU_AT_BARRIER, t->file = file, t->line = line;
    emu_yield();
}
#define __syncthreads() emu_syncthreads(__FILE__, __LINE__)

// the running lane arrives at a warp operation (its inputs are set next; emu_yield waits for the warp)
static EmuThread *emu_warp_arrive(EmuWarpOp op, unsigned mask, int arg, int width, const char *file, int line) {
    if (blockDim.x * blockDim.y * blockDim.z % 32) emu_fail("%s: warp operation at %s:%d in a block of %u threads (not whole warps)", emu.kernel, file, line, blockDim.x * blockDim.y * blockDim.z);
    EmuThread *t = &emu.th[emu.cur];
    t->state = EMU_AT_WARP, t->file = file, t->line = line, t->op = op, t->mask = mask, t->arg = arg, t->width = width;
    return t;
}
template <typename T>
static T emu_shfl(EmuWarpOp op, unsigned mask, T v, int arg, int width, const char *file, int line) {
    static_assert(sizeof(T) <= 8, "warp operations on values of at most 8 bytes");
    EmuThread *t = emu_warp_arrive(op, mask, arg, width, file, line);
    t->shuffles++;
    t->in = 0;
    memcpy(&t->in, &v, sizeof v);
    emu_yield();
    T r;
    memcpy(&r, &emu.th[emu.cur].out, sizeof r);
    return r;
}
// the mma above for the running lane (clover.cu's mma_s8): every lane of the warp takes part
static void emu_mma_s8(int32_t d[4], const uint32_t a[4], const uint32_t b[2], const char *file, int line) {
    EmuThread *t = emu_warp_arrive(EMU_MMA, 0xffffffffu, 0, 32, file, line);
    t->mmas++;
    memcpy(t->mma_a, a, sizeof t->mma_a), memcpy(t->mma_b, b, sizeof t->mma_b);
    emu_yield();
    memcpy(d, emu.th[emu.cur].mma_d, sizeof emu.th[emu.cur].mma_d);
}
// __syncwarp(): the 32 lanes of the warp meet (clover.cu's warp barrier: its shared-memory writes and
// landed copies are then every lane's)
static void emu_syncwarp(const char *file, int line) {
    emu_warp_arrive(EMU_SYNCWARP, 0xffffffffu, 0, 32, file, line);
    emu_yield();
}
#define __syncwarp() emu_syncwarp(__FILE__, __LINE__)

// Asynchronous copies (cp.async: clover.cu's copy16_async, copies_commit, copies_wait). A copy is in
// flight from its issue to the wait that covers its group: its destination holds 0xff bytes from the
// issue and the data from that wait on, so that a read before the wait (a missing wait or
// __syncwarp), or a copy into a stage that another lane still reads, gives wrong values. Counting:
// the bytes a thread has in flight at each of its waits (the cost model's bytes in flight).
static void emu_copy16_async(void *dst, const void *v) {
    EmuThread *t = &emu.th[emu.cur];
    EmuCopy c;
    c.dst = (uint8_t *)dst, c.group = t->groups;
    memcpy(c.v, v, 16);
    memset(dst, 0xff, 16);
    t->copies.push_back(c);
}
static void emu_copies_commit(void) { emu.th[emu.cur].groups++; }
static void emu_copies_wait(int n) {
    EmuThread *t = &emu.th[emu.cur];
    uint64_t in_flight = 0;
    for (const EmuCopy &c : t->copies) in_flight += c.group < t->groups ? 16 : 0;
    t->waits++, t->waited_bytes += in_flight;
    size_t kept = 0;
    for (size_t i = 0; i < t->copies.size(); i++) {
        EmuCopy &c = t->copies[i];
        if (c.group + (uint64_t)n < t->groups) memcpy(c.dst, c.v, 16);
        else t->copies[kept++] = c;
    }
    t->copies.resize(kept);
}

#define __shfl_xor_sync(mask, v, lane_mask) emu_shfl(EMU_SHFL_XOR, mask, v, lane_mask, 32, __FILE__, __LINE__)
#define __shfl_down_sync(mask, v, delta) emu_shfl(EMU_SHFL_DOWN, mask, v, delta, 32, __FILE__, __LINE__)
#define __shfl_up_sync(mask, v, delta) emu_shfl(EMU_SHFL_UP, mask, v, delta, 32, __FILE__, __LINE__)
#define __shfl_sync(...) emu_shfl_idx(__VA_ARGS__, 32)   // (mask, v, src[, width]): width 32 unless given
#define emu_shfl_idx(mask, v, src, width, ...) emu_shfl(EMU_SHFL_IDX, mask, v, src, width, __FILE__, __LINE__)

// Atomics and fences: the blocks of a launch run one after another, and a block's threads switch only
// at barriers and warp operations, so a plain read-modify-write is atomic here and every write is
// visible to the blocks after it (the order in which blocks finish is the thread order's).
static inline unsigned atomicAdd(unsigned *p, unsigned v) {
    unsigned old = *p;
    *p = old + v;
    return old;
}
static inline void __threadfence(void) {}

static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
// as the device's cvt.rni.s32.f32: nearest, ties to even; NaN gives 0; out of range saturates
static inline int __float2int_rn(float x) {
    if (x != x) return 0;
    if (x >= 2147483648.0f) return 2147483647;
    if (x < -2147483648.0f) return (-2147483647 - 1);
    return (int)rintf(x);
}

// ---- device memory: tagged, poisoned, guarded ---------------------------------------------------
enum { EMU_GUARD = 64, EMU_MAX_ALLOCS = 4096 };
struct EmuAlloc { char *p; size_t n; uint8_t *pages; };   // pages: counting's flags, one per 4 KiB page
static EmuAlloc emu_allocs[EMU_MAX_ALLOCS];
static int emu_n_allocs;

static const EmuAlloc *emu_find(const void *p, size_t n) {
    for (int i = 0; i < emu_n_allocs; i++) {
        const EmuAlloc *a = &emu_allocs[i];
        if ((const char *)p >= a->p && (const char *)p < a->p + a->n) {
            if ((const char *)p + n > a->p + a->n) emu_fail("a copy of %zu bytes runs past the end of a device allocation of %zu bytes", n, a->n);
            return a;
        }
    }
    return NULL;
}

// ---- counting (CLOVER_EMU_COUNT) -------------------------------------------------------------------
// Device memory is mapped with no access, so the first read and the first write of each 4 KiB page by
// a launch's blocks fault; the handler records the page and opens it (reads: read-only, so that a
// later write faults too). At the launch's end its pages are closed again and summed: bytes read from
// pages no launch or copy wrote since the last host wait ("cold": weights, KV cache, the state; what
// must come from HBM) and from pages written since ("hot": the activations the kernels before it
// wrote, in L2 on a GPU), and bytes written. A page counts once per launch, at its first touch, and
// whole (but never past its allocation's end). Built with CLOVER_EMU_COUNT_LOADS and clang's
// -fsanitize-coverage=inline-8bit-counters,trace-loads (make build/clover-emu-count), every load the
// kernels make from device memory is counted too, per thread as the C++ is written (scalar code,
// no vectorizing), in a sample of about 64 blocks a launch, scaled to all of them: a warp executes a
// load instruction as often as its busiest lane loads, so a launch's warp loads are the sum over its
// warps of their lanes' largest count; loads from shared memory (the static __shared__ section and
// the dynamic buffer) are counted alike, apart. A vector load (clover.cu's load16: one 128-bit load
// instruction on the device, which clang would split into two 8-byte loads here) is counted as one
// (emu_load_vec). One line per launch, copy, graph launch and host wait:
//   launch NAME GX GY GZ BX BY BZ COLD HOT WRITTEN WARP_LOADS THREAD_LOADS LOAD_BYTES MAX_WARP_LOADS
//          SHARED_WARP_LOADS L1_WAVEFRONTS WARP_SHUFFLES WARP_MMAS DYNAMIC_SMEM IN_FLIGHT TAIL_LOADS
//   copy KIND BYTES | graph | sync
// (the load counts -1 when not counted; MAX_WARP_LOADS counts both kinds; L1_WAVEFRONTS: the
// wavefronts of each warp load instruction, summed: what L1 and shared memory serve at about one a
// cycle; from device memory the distinct 128-byte lines its lanes touch, so that a warp's 16-byte
// loads of 512 consecutive bytes take 4, a broadcast 1, and lanes 64 bytes apart twice the lines;
// from shared memory its bank wavefronts (emu_bank_wavefronts: 1 for a padded row a lane); WARP_SHUFFLES: warp operations, counted as
// warp loads are; WARP_MMAS: tensor-core instructions, alike; DYNAMIC_SMEM: the launch's dynamic
// shared memory bytes a block; IN_FLIGHT: the bytes of asynchronous copies a thread has in flight
// when it waits for them, on average over its waits, 0 where it issues none; TAIL_LOADS: the loads,
// from device and shared memory, of the busiest warp of any block after its emu_tail(), which
// clover.cu's last_block calls in the block that comes last: the work a block does once the others
// are done, which runs after the rest of the launch; every block, not a sample). The emulator's own
// accesses (copies, memsets) open and close the pages they touch.
// CLOVER_EMU_SITES=FILE as well: the L1 wavefronts of each load instruction of the kernels' code,
// summed over the run (scaled as the launch's), written at its end as lines "OFFSET WAVEFRONTS",
// OFFSET the load's address in the executable in hex (for addr2line: test/costsites.sh), so that a
// kernel's wavefronts can be traced to the lines of clover.cu that cost them.
enum { EMU_PAGE = 4096, EMU_READ = 1, EMU_WRITE = 2, EMU_HOT = 4 };
struct EmuTouch { uint8_t *flag; char *page; size_t bytes; };
// a shared-memory load in EmuThread::lines: this bit, its size in bytes at bit 48, its address below
static const uintptr_t EMU_SHARED_LOAD = (uintptr_t)1 << 63;

// The wavefronts of one warp load instruction from shared memory: its 32 banks serve one 4-byte word
// each a cycle (words w and w + 32 share a bank), the same word to any number of lanes (a broadcast),
// so it takes as many as the most distinct words any one bank holds: 1 for lanes reading a row each
// of a padded array or one value, 4 for 16-byte loads of 512 consecutive bytes, 16 for 4-byte loads
// 64 bytes apart.
static int emu_bank_wavefronts(const uintptr_t *loads, int n) {
    uintptr_t words[32][32];
    int count[32] = {0}, most = 0;
    for (int i = 0; i < n; i++) {
        uintptr_t a = loads[i] & (((uintptr_t)1 << 48) - 1), size = (loads[i] & ~EMU_SHARED_LOAD) >> 48;
        for (uintptr_t w = a >> 2; w <= (a + size - 1) >> 2; w++) {
            int b = (int)(w % 32), k = 0;
            while (k < count[b] && words[b][k] != w) k++;
            if (k == count[b] && k < 32) words[b][count[b]++] = w;
        }
    }
    for (int b = 0; b < 32; b++) most = count[b] > most ? count[b] : most;
    return most;
}

struct EmuCount {
    FILE *f;
    bool in_launch;
    bool sampling;                   // this block's loads are counted
    std::vector<std::pair<uintptr_t, uintptr_t>> ranges;   // device allocations [start, end), sorted (other
                                     // memory lies between them: the fiber stacks, the host's buffers)
    double warp_loads, thread_loads, load_bytes, max_warp_loads;   // this launch's, sampled blocks only
    double shared_warp_loads, wavefronts, shuffles, mmas;
    double waits, waited_bytes;      // waits for asynchronous copies, and the bytes in flight at them
    unsigned sampled;
    bool tail;                       // the running block has called emu_tail(): its loads from then on are its tail's
    double max_tail_loads;           // this launch's busiest warp's tail loads, over every block (not a sample)
    std::vector<EmuTouch> touched;   // this launch's pages, in fault order
    std::vector<uint8_t *> hot;      // pages written since the last host wait
    bool sites;                      // CLOVER_EMU_SITES
    std::map<const void *, double> site_launch, site_run;   // wavefronts by load site: this launch's (sampled), the run's
};
static EmuCount emu_count;

#ifdef CLOVER_EMU_COUNT_LOADS
// a load of n bytes at p by the running thread (clang's trace-loads callbacks)
__attribute__((no_sanitize("coverage"))) static void emu_load(const void *p, unsigned n, const void *site) {   // (its own loads are not counted)
    if (!emu_count.sampling && !emu_count.tail) return;
    const char *a = (const char *)p;
    const std::vector<std::pair<uintptr_t, uintptr_t>> &r = emu_count.ranges;
    auto at = std::upper_bound(r.begin(), r.end(), std::make_pair((uintptr_t)a, UINTPTR_MAX));   // the first range starting after a
    EmuThread &h = emu.th[emu.cur];
    bool device = at != r.begin() && (uintptr_t)a < (at - 1)->second;
    bool shared = (a >= __start_emu_shared && a < __stop_emu_shared) || (a >= (const char *)emu_dynamic_smem && a < (const char *)emu_dynamic_smem + EMU_SMEM_OPTIN);
    if (emu_count.tail && (device || shared)) h.tail_loads++;
    if (!emu_count.sampling) return;
    if (!device && !shared) return;   // (so the vectors' own code, instrumented, never comes back here while they grow)
    if (device) {
        h.loads++, h.load_bytes += n;
        h.lines.push_back((uintptr_t)a >> 7);
        if (((uintptr_t)a + n - 1) >> 7 != (uintptr_t)a >> 7) h.lines.push_back(((uintptr_t)a + n - 1) >> 7);   // (across a line: two)
    } else {
        h.sloads++;
        h.lines.push_back(EMU_SHARED_LOAD | (uintptr_t)n << 48 | ((uintptr_t)a & (((uintptr_t)1 << 48) - 1)));
    }
    if (emu_count.sites) h.sites.resize(h.lines.size(), site);
}
extern "C" void __sanitizer_cov_load1(uint8_t *p) { emu_load(p, 1, __builtin_return_address(0)); }
extern "C" void __sanitizer_cov_load2(uint16_t *p) { emu_load(p, 2, __builtin_return_address(0)); }
extern "C" void __sanitizer_cov_load4(uint32_t *p) { emu_load(p, 4, __builtin_return_address(0)); }
extern "C" void __sanitizer_cov_load8(uint64_t *p) { emu_load(p, 8, __builtin_return_address(0)); }
extern "C" void __sanitizer_cov_load16(__int128 *p) { emu_load(p, 16, __builtin_return_address(0)); }
extern "C" void __sanitizer_cov_8bit_counters_init(char *, char *) {}
static const bool emu_counts_loads = true;
// one load of a T (16 bytes) from p, counted as the one instruction it is on the device; the
// copy itself is outside the instrumentation (not inlined into an instrumented caller)
template <typename T> __attribute__((no_sanitize("coverage"), noinline)) T emu_load_vec(const void *p) {
    emu_load(p, sizeof(T), __builtin_return_address(0));
    T v;
    memcpy(&v, p, sizeof v);
    return v;
}
#else
static const bool emu_counts_loads = false;
template <typename T> T emu_load_vec(const void *p) { return *(const T *)p; }
#endif
// what the running block does from here on is a tail (TAIL_LOADS above); every thread of the block calls it
static void emu_tail(void) { emu_count.tail = emu_count.f && emu_counts_loads; }

static EmuAlloc *emu_alloc_of(const void *p) {
    for (int i = 0; i < emu_n_allocs; i++)
        if ((const char *)p >= emu_allocs[i].p && (const char *)p < emu_allocs[i].p + emu_allocs[i].n) return &emu_allocs[i];
    return NULL;
}

static void emu_segv(int sig, siginfo_t *si, void *uc) {
    char *a = (char *)si->si_addr;
    EmuAlloc *al = emu_count.in_launch ? emu_alloc_of(a) : NULL;
    if (!al) {   // not counting's: the default action, at the same access again
        signal(sig, SIG_DFL);
        return;
    }
    bool write = ((ucontext_t *)uc)->uc_mcontext.gregs[REG_ERR] & 2;   // x86-64 page fault code: bit 1, a write
    size_t pg = (size_t)(a - al->p) / EMU_PAGE;
    uint8_t *f = &al->pages[pg];
    char *page = al->p + pg * EMU_PAGE;
    if (!(*f & (EMU_READ | EMU_WRITE))) {
        size_t left = al->n - pg * EMU_PAGE;
        emu_count.touched.push_back({f, page, left < EMU_PAGE ? left : (size_t)EMU_PAGE});
    }
    *f |= write ? EMU_WRITE : EMU_READ;
    mprotect(page, EMU_PAGE, write ? PROT_READ | PROT_WRITE : PROT_READ);
}

// CLOVER_EMU_SITES's file: each load site's wavefronts, its address as an offset in the executable
static void emu_sites_write(void) {
    const char *path = getenv("CLOVER_EMU_SITES");
    Dl_info di;
    FILE *f;
    if (!emu_count.sites || !dladdr((void *)&emu_sites_write, &di)) return;
    if (!(f = fopen(path, "w"))) emu_fail("CLOVER_EMU_SITES=%s: cannot write it", path);
    for (auto &kv : emu_count.site_run) fprintf(f, "%lx %.0f\n", (unsigned long)((const char *)kv.first - (const char *)di.dli_fbase), kv.second);
    fclose(f);
}
static void emu_count_init(void) {
    const char *path = getenv("CLOVER_EMU_COUNT");
    if (!path || !*path) return;
    if (!(emu_count.f = fopen(path, "w"))) emu_fail("CLOVER_EMU_COUNT=%s: cannot write it", path);
    const char *sites = getenv("CLOVER_EMU_SITES");
    if (emu_counts_loads && sites && *sites) emu_count.sites = true, atexit(emu_sites_write);
    emu_count.touched.reserve((size_t)1 << 22);   // (the handler should not allocate)
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = emu_segv;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigaction(SIGSEGV, &sa, NULL);
}

// the pages of [p, p + n) in device memory opened for the emulator itself, or closed again
static void emu_open(const void *p, size_t n, bool open) {
    EmuAlloc *al = emu_count.f && n ? emu_alloc_of(p) : NULL;
    if (!al) return;
    size_t first = (size_t)((const char *)p - al->p) / EMU_PAGE, last = (size_t)((const char *)p + n - 1 - al->p) / EMU_PAGE;
    mprotect(al->p + first * EMU_PAGE, (last - first + 1) * EMU_PAGE, open ? PROT_READ | PROT_WRITE : PROT_NONE);
}
// a copy or memset's bytes; the device pages it wrote become hot
static void emu_count_copy(const char *kind, const void *dst, size_t n) {
    if (!emu_count.f) return;
    fprintf(emu_count.f, "copy %s %zu\n", kind, n);
    EmuAlloc *al = n ? emu_alloc_of(dst) : NULL;
    if (!al) return;
    for (size_t pg = (size_t)((const char *)dst - al->p) / EMU_PAGE; pg * EMU_PAGE < (size_t)((const char *)dst - al->p) + n; pg++)
        if (!(al->pages[pg] & EMU_HOT)) al->pages[pg] |= EMU_HOT, emu_count.hot.push_back(&al->pages[pg]);
}
static void emu_count_line(const char *line) {
    if (!emu_count.f) return;
    fprintf(emu_count.f, "%s\n", line);
    if (!strcmp(line, "sync")) {   // a host wait: nothing is hot any more
        for (uint8_t *f : emu_count.hot) *f &= (uint8_t)~EMU_HOT;
        emu_count.hot.clear();
        static int n_syncs;
        const char *stop = getenv("CLOVER_EMU_COUNT_STOP");
        if (stop && ++n_syncs == atoi(stop)) {
            fclose(emu_count.f);
            fflush(stdout);
            emu_sites_write();
            _exit(0);
        }
    }
}
static void emu_count_begin(void) {
    emu_count.in_launch = emu_count.f != NULL;
    emu_count.warp_loads = emu_count.thread_loads = emu_count.load_bytes = emu_count.max_warp_loads = 0;
    emu_count.shared_warp_loads = emu_count.wavefronts = emu_count.shuffles = emu_count.mmas = 0;
    emu_count.waits = emu_count.waited_bytes = 0;
    emu_count.sampled = 0;
    emu_count.tail = false, emu_count.max_tail_loads = 0;
}
// block b of n: counted when it is one of about 64 evenly spaced ones
static void emu_count_block_begin(unsigned long long b, unsigned long long n) {
    unsigned long long every = n > 64 ? n / 64 : 1;
    emu_count.sampling = emu_count.f && emu_counts_loads && b % every == 0;
}
static void emu_count_block_end(void) {
    if (emu_count.tail) {   // its tail's busiest warp: the largest count of its lanes
        for (int w0 = 0; w0 < emu.n; w0 += 32) {
            uint64_t m = 0;
            for (int t = w0; t < emu.n && t < w0 + 32; t++) m = emu.th[t].tail_loads > m ? emu.th[t].tail_loads : m;
            if ((double)m > emu_count.max_tail_loads) emu_count.max_tail_loads = (double)m;
        }
        emu_count.tail = false;
    }
    if (!emu_count.sampling) return;
    emu_count.sampling = false;
    emu_count.sampled++;
    for (int w0 = 0; w0 < emu.n; w0 += 32) {
        uint64_t m = 0, ms = 0, mall = 0, mw = 0, mm = 0;
        for (int t = w0; t < emu.n && t < w0 + 32; t++) {
            const EmuThread &h = emu.th[t];
            m = h.loads > m ? h.loads : m, ms = h.sloads > ms ? h.sloads : ms, mw = h.shuffles > mw ? h.shuffles : mw;
            mall = h.loads + h.sloads > mall ? h.loads + h.sloads : mall, mm = h.mmas > mm ? h.mmas : mm;
            emu_count.thread_loads += (double)h.loads, emu_count.load_bytes += (double)h.load_bytes;
            emu_count.waits += (double)h.waits, emu_count.waited_bytes += (double)h.waited_bytes;
        }
        emu_count.warp_loads += (double)m, emu_count.shared_warp_loads += (double)ms, emu_count.shuffles += (double)mw, emu_count.mmas += (double)mm;
        if ((double)mall > emu_count.max_warp_loads) emu_count.max_warp_loads = (double)mall;
        // L1 wavefronts: the i-th load of each lane taken as one warp instruction (convergent code),
        // which costs from device memory a wavefront per distinct 128-byte line its lanes touch (one
        // for a broadcast), from shared memory its bank wavefronts (emu_bank_wavefronts)
        size_t most = 0;
        for (int t = w0; t < emu.n && t < w0 + 32; t++) most = emu.th[t].lines.size() > most ? emu.th[t].lines.size() : most;
        for (size_t i = 0; i < most; i++) {
            uintptr_t seen[32], sh[32];
            int n_seen = 0, n_sh = 0;
            for (int t = w0; t < emu.n && t < w0 + 32; t++) {
                if (i >= emu.th[t].lines.size()) continue;
                uintptr_t l = emu.th[t].lines[i];
                if (l & EMU_SHARED_LOAD) {
                    sh[n_sh++] = l;
                    continue;
                }
                bool dup = false;
                for (int k = 0; k < n_seen && !dup; k++) dup = seen[k] == l;
                if (!dup) seen[n_seen++] = l;
            }
            int wf = n_seen + (n_sh ? emu_bank_wavefronts(sh, n_sh) : 0);
            emu_count.wavefronts += wf;
            for (int t = w0; emu_count.sites && t < emu.n && t < w0 + 32; t++)   // (the site of the first lane that made the i-th load)
                if (i < emu.th[t].sites.size()) {
                    emu_count.site_launch[emu.th[t].sites[i]] += wf;
                    break;
                }
        }
    }
}
// the launch's pages: summed, closed (runs of neighbouring pages in one call), forgotten
static void emu_count_end(const char *name, const dim3 &g, const dim3 &b) {
    if (!emu_count.f) return;
    emu_count.in_launch = false;
    size_t cold = 0, hot = 0, written = 0;
    std::vector<EmuTouch> &t = emu_count.touched;
    for (EmuTouch &x : t) {
        if (*x.flag & EMU_READ) (*x.flag & EMU_HOT ? hot : cold) += x.bytes;
        if (*x.flag & EMU_WRITE) written += x.bytes;
    }
    for (EmuTouch &x : t) {
        if ((*x.flag & EMU_WRITE) && !(*x.flag & EMU_HOT)) *x.flag |= EMU_HOT, emu_count.hot.push_back(x.flag);
        *x.flag &= (uint8_t)~(EMU_READ | EMU_WRITE);
    }
    std::sort(t.begin(), t.end(), [](const EmuTouch &a, const EmuTouch &c) { return a.page < c.page; });
    for (size_t i = 0; i < t.size();) {
        size_t j = i + 1;
        while (j < t.size() && t[j].page == t[j - 1].page + EMU_PAGE) j++;
        mprotect(t[i].page, (j - i) * EMU_PAGE, PROT_NONE);
        i = j;
    }
    t.clear();
    char nm[512];
    size_t k = 0;
    for (const char *c = name; *c && k + 1 < sizeof nm; c++)
        if (*c != ' ') nm[k++] = *c;
    nm[k] = 0;
    double blocks = (double)g.x * g.y * g.z, scale = emu_count.sampled ? blocks / emu_count.sampled : 0;
    double in_flight = emu_count.waits ? emu_count.waited_bytes / emu_count.waits : 0;
    for (auto &kv : emu_count.site_launch) emu_count.site_run[kv.first] += kv.second * scale;
    emu_count.site_launch.clear();
    if (emu_counts_loads)
        fprintf(emu_count.f, "launch %s %u %u %u %u %u %u %zu %zu %zu %.0f %.0f %.0f %.0f %.0f %.0f %.0f %.0f %zu %.1f %.0f\n", nm, g.x, g.y, g.z, b.x, b.y,
                b.z, cold, hot, written, emu_count.warp_loads * scale, emu_count.thread_loads * scale, emu_count.load_bytes * scale,
                emu_count.max_warp_loads, emu_count.shared_warp_loads * scale, emu_count.wavefronts * scale, emu_count.shuffles * scale,
                emu_count.mmas * scale, emu.dynamic_smem, in_flight, emu_count.max_tail_loads);
    else
        fprintf(emu_count.f, "launch %s %u %u %u %u %u %u %zu %zu %zu -1 -1 -1 -1 -1 -1 -1 -1 %zu -1 -1\n", nm, g.x, g.y, g.z, b.x, b.y, b.z, cold, hot,
                written, emu.dynamic_smem);
}

static void emu_check_guards(const char *after) {
    if (emu_count.f) return;   // (counting: not guarded)
    for (int i = 0; i < emu_n_allocs; i++)
        for (int g = 0; g < EMU_GUARD; g++)
            if ((unsigned char)emu_allocs[i].p[emu_allocs[i].n + g] != 0xa5)
                emu_fail("%s wrote past the end of a device allocation of %zu bytes (byte %d after it)", after, emu_allocs[i].n, g);
}

// Its memory: CLOVER_EMU_MEMORY bytes (default 8 GiB), so that a test can ask for a small GPU; the
// free memory is that less what cudaMalloc handed out, and cudaMalloc fails past it.
static size_t emu_total_memory(void) {
    const char *m = getenv("CLOVER_EMU_MEMORY");
    return m ? (size_t)strtoull(m, NULL, 10) : (size_t)8 << 30;
}
static cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b) {
    size_t used = 0;
    for (int i = 0; i < emu_n_allocs; i++) used += emu_allocs[i].n;
    *total_b = emu_total_memory();
    *free_b = used < *total_b ? *total_b - used : 0;
    return cudaSuccess;
}

static void emu_not_capturing(const char *call) {
    if (emu_capture) emu_fail("%s during stream capture (a CUDA graph may hold only work on the capturing stream)", call);
}

static cudaError_t cudaMalloc(void **p, size_t n) {
    emu_not_capturing("cudaMalloc");
    size_t free_b, total_b;
    cudaMemGetInfo(&free_b, &total_b);
    if (emu_n_allocs == EMU_MAX_ALLOCS || n > free_b) return cudaErrorMemoryAllocation;
    emu_init();
    if (emu_count.f) {   // counting: whole pages of no access (see "counting")
        size_t pages = (n + EMU_PAGE - 1) / EMU_PAGE + (n == 0);
        char *m = (char *)mmap(NULL, pages * EMU_PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        uint8_t *flags = (uint8_t *)calloc(pages, 1);
        if (m == MAP_FAILED || !flags) return cudaErrorMemoryAllocation;
        emu_allocs[emu_n_allocs++] = {m, n, flags};
        auto range = std::make_pair((uintptr_t)m, (uintptr_t)m + pages * EMU_PAGE);
        emu_count.ranges.insert(std::upper_bound(emu_count.ranges.begin(), emu_count.ranges.end(), range), range);
        *p = m;
        return cudaSuccess;
    }
    char *m = (char *)aligned_alloc(256, (n + EMU_GUARD + 255) / 256 * 256);
    if (!m) return cudaErrorMemoryAllocation;
    if (!emu.launch_only) memset(m, 0xff, n);   // (launch only: the pages stay untouched)
    memset(m + n, 0xa5, EMU_GUARD);
    emu_allocs[emu_n_allocs++] = {m, n, NULL};
    *p = m;
    return cudaSuccess;
}
template <typename T> static cudaError_t cudaMalloc(T **p, size_t n) { return cudaMalloc((void **)p, n); }

static cudaError_t cudaFree(void *p) {
    if (!p) return cudaSuccess;
    for (int i = 0; i < emu_n_allocs; i++)
        if (emu_allocs[i].p == p) {
            emu_check_guards("a kernel");
            if (emu_allocs[i].pages) {
                munmap(p, ((emu_allocs[i].n + EMU_PAGE - 1) / EMU_PAGE + (emu_allocs[i].n == 0)) * EMU_PAGE), free(emu_allocs[i].pages);
                std::vector<std::pair<uintptr_t, uintptr_t>> &r = emu_count.ranges;
                r.erase(std::remove_if(r.begin(), r.end(), [&](const std::pair<uintptr_t, uintptr_t> &x) { return x.first == (uintptr_t)p; }), r.end());
            } else free(p);
            emu_allocs[i] = emu_allocs[--emu_n_allocs];
            return cudaSuccess;
        }
    emu_fail("cudaFree of a pointer that cudaMalloc did not return");
}

static cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind kind) {
    emu_not_capturing("cudaMemcpy");
    bool dd = emu_find(dst, n) != NULL, sd = emu_find(src, n) != NULL;
    bool want_dd = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    bool want_sd = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    static const char *names[] = {"HostToHost", "HostToDevice", "DeviceToHost", "DeviceToDevice"};
    if (dd != want_dd || sd != want_sd)
        emu_fail("cudaMemcpy%s from %s memory to %s memory", names[kind], sd ? "device" : "host", dd ? "device" : "host");
    emu_open(dst, n, true), emu_open(src, n, true);
    memmove(dst, src, n);
    emu_open(dst, n, false), emu_open(src, n, false);
    static const char *counted[] = {"h2h", "h2d", "d2h", "d2d"};
    emu_count_copy(counted[kind], dd ? dst : NULL, n);
    return cudaSuccess;
}

static cudaError_t cudaMemset(void *p, int v, size_t n) {
    emu_not_capturing("cudaMemset");
    if (!emu_find(p, n)) emu_fail("cudaMemset of %zu bytes of host memory", n);
    emu_open(p, n, true);
    memset(p, v, n);
    emu_open(p, n, false);
    emu_count_copy("memset", p, n);
    return cudaSuccess;
}

// Page-locked host memory: ordinary host memory here (cudaMemcpy's direction checks see it as host).
static cudaError_t cudaMallocHost(void **p, size_t n) {
    emu_not_capturing("cudaMallocHost");
    *p = malloc(n ? n : 1);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
template <typename T> static cudaError_t cudaMallocHost(T **p, size_t n) { return cudaMallocHost((void **)p, n); }

// The stream-ordered calls: done at once, or recorded while a graph is being captured.
static cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind kind, cudaStream_t) {
    if (!emu_capture) return cudaMemcpy(dst, src, n, kind);
    emu_capture->ops.push_back([=] { cudaMemcpy(dst, src, n, kind); });
    return cudaSuccess;
}
static cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t) {
    if (!emu_capture) return cudaMemset(p, v, n);
    emu_capture->ops.push_back([=] { cudaMemset(p, v, n); });
    return cudaSuccess;
}
static cudaError_t cudaStreamCreate(cudaStream_t *s) {
    static int the_stream;
    *s = &the_stream;
    return cudaSuccess;
}
static cudaError_t cudaStreamSynchronize(cudaStream_t) {
    emu_not_capturing("cudaStreamSynchronize");
    emu_count_line("sync");
    return cudaSuccess;
}
static cudaError_t cudaStreamBeginCapture(cudaStream_t, cudaStreamCaptureMode) {
    if (emu_capture) emu_fail("cudaStreamBeginCapture while capturing");
    emu_capture = new EmuGraph;
    return cudaSuccess;
}
static cudaError_t cudaStreamEndCapture(cudaStream_t, cudaGraph_t *g) {
    if (!emu_capture) emu_fail("cudaStreamEndCapture without cudaStreamBeginCapture");
    *g = emu_capture;
    emu_capture = NULL;
    return cudaSuccess;
}
static cudaError_t cudaGraphGetNodes(cudaGraph_t g, cudaGraphNode_t *nodes, size_t *n) {
    if (nodes) emu_fail("cudaGraphGetNodes: only the count is emulated");
    *n = g->ops.size();
    return cudaSuccess;
}
static cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long) {
    *e = new EmuGraph(*g);
    return cudaSuccess;
}
static cudaError_t cudaGraphDestroy(cudaGraph_t g) {
    delete g;
    return cudaSuccess;
}
static cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t) {
    emu_not_capturing("cudaGraphLaunch");
    emu_count_line("graph");
    for (auto &op : e->ops) op();
    return cudaSuccess;
}

// ---- the rest of the runtime: one synchronous device ---------------------------------------------
static cudaError_t cudaGetDeviceCount(int *n) { *n = 1; return cudaSuccess; }
static cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int) {
    emu_init();   // the thread order its name reports
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "cuda-emu (CUDA executed on the CPU, %s thread order)", emu.order == 0 ? "forward" : emu.order == 1 ? "reverse" : "random");
    // an H200's 132 SMs: the device whose occupancy clover.cu's launches are shaped for (matmul_mma_gpu's split)
    p->totalGlobalMem = emu_total_memory(), p->major = 9, p->minor = 0, p->multiProcessorCount = 132;
    return cudaSuccess;
}
static inline cudaError_t cudaDeviceSynchronize(void) {
    emu_not_capturing("cudaDeviceSynchronize");
    emu_count_line("sync");
    return cudaSuccess;
}
static const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    }
    return "unknown error";
}

template <typename... P> struct EmuCall {
    void (*kernel)(P...);
    std::tuple<P...> args;
};
template <typename... P> static void emu_call(void *p) {
    EmuCall<P...> *c = (EmuCall<P...> *)p;
    std::apply(c->kernel, c->args);
}

// ---- launch limits -----------------------------------------------------------------------------
// sm_90's (CUDA C++ Programming Guide, compute capability 9.0): gridDim.x <= 2^31 - 1, gridDim.y
// and .z <= 65535; blockDim.x and .y <= 1024, .z <= 64, at most 1024 threads; shared memory per block
// at most 48 KiB, static and dynamic together, unless the kernel opted in with
// cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, n): then dynamic <= n and
// static + dynamic <= 227 KiB (static alone stays <= 48 KiB: ptxas refuses more).
// A kernel's static shared memory is measured: the __shared__ arrays of the emu_shared section that
// its blocks write (an array it only read would be a read of unwritten memory anyway), sized from
// the program's own symbol table (function-static arrays keep local symbols); without one (a
// stripped binary) the whole section counts, an upper bound.
enum { EMU_SMEM_DEFAULT = 48 * 1024, EMU_MAX_BLOCK = 1024, EMU_MAX_BLOCK_Z = 64, EMU_MAX_GRID_YZ = 65535 };
static const unsigned EMU_MAX_GRID_X = 2147483647u;

struct EmuSharedVar { size_t offset, size; };
static std::vector<EmuSharedVar> emu_shared_vars;   // the section's arrays, by offset

static void emu_read_shared_vars(void) {
    static bool done;
    if (done) return;
    done = true;
    size_t section = (size_t)(__stop_emu_shared - __start_emu_shared);
    FILE *f = fopen("/proc/self/exe", "rb");
    Elf64_Ehdr eh;
    std::vector<Elf64_Shdr> sh;
    if (f && fread(&eh, sizeof eh, 1, f) == 1 && !memcmp(eh.e_ident, ELFMAG, SELFMAG) && eh.e_shentsize == sizeof(Elf64_Shdr)) {
        sh.resize(eh.e_shnum);
        if (fseek(f, (long)eh.e_shoff, SEEK_SET) || fread(sh.data(), sizeof(Elf64_Shdr), sh.size(), f) != sh.size()) sh.clear();
    }
    int idx = -1, symtab = -1;
    if (!sh.empty() && eh.e_shstrndx < sh.size()) {
        std::vector<char> names(sh[eh.e_shstrndx].sh_size + 1, 0);
        if (!fseek(f, (long)sh[eh.e_shstrndx].sh_offset, SEEK_SET) && fread(names.data(), 1, names.size() - 1, f) == names.size() - 1)
            for (size_t i = 0; i < sh.size(); i++) {
                if (sh[i].sh_name < names.size() && !strcmp(&names[sh[i].sh_name], "emu_shared")) idx = (int)i;
                if (sh[i].sh_type == SHT_SYMTAB) symtab = (int)i;
            }
    }
    if (idx >= 0 && symtab >= 0) {
        std::vector<Elf64_Sym> syms(sh[symtab].sh_size / sizeof(Elf64_Sym));
        if (!fseek(f, (long)sh[symtab].sh_offset, SEEK_SET) && fread(syms.data(), sizeof(Elf64_Sym), syms.size(), f) == syms.size())
            for (const Elf64_Sym &y : syms)
                if (y.st_shndx == idx && ELF64_ST_TYPE(y.st_info) == STT_OBJECT && y.st_size > 0 && y.st_value >= sh[idx].sh_addr &&
                    y.st_value - sh[idx].sh_addr + y.st_size <= section)
                    emu_shared_vars.push_back({(size_t)(y.st_value - sh[idx].sh_addr), (size_t)y.st_size});
    }
    if (f) fclose(f);
    if (emu_shared_vars.empty() && section > 0) emu_shared_vars.push_back({0, section});
}

// bytes of the static shared arrays the block that just ran wrote (any byte no longer 0xff)
static size_t emu_static_smem_written(void) {
    size_t n = 0;
    for (const EmuSharedVar &v : emu_shared_vars)
        for (size_t i = 0; i < v.size; i++)
            if ((unsigned char)__start_emu_shared[v.offset + i] != 0xff) {
                n += v.size;
                break;
            }
    return n;
}

// cudaFuncSetAttribute's opt-ins: kernel -> its largest dynamic shared memory
struct EmuOptIn { const void *kernel; int max_dynamic; };
static std::vector<EmuOptIn> emu_opt_ins;
template <typename... P> static cudaError_t cudaFuncSetAttribute(void (*kernel)(P...), cudaFuncAttribute attr, int value) {
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) emu_fail("cudaFuncSetAttribute: only cudaFuncAttributeMaxDynamicSharedMemorySize is emulated");
    if (value < 0 || value > EMU_SMEM_OPTIN) return cudaErrorInvalidValue;
    for (EmuOptIn &o : emu_opt_ins)
        if (o.kernel == (const void *)kernel) return o.max_dynamic = value, cudaSuccess;
    emu_opt_ins.push_back({(const void *)kernel, value});
    return cudaSuccess;
}
static int emu_opt_in(const void *kernel) {   // -1: none
    for (const EmuOptIn &o : emu_opt_ins)
        if (o.kernel == kernel) return o.max_dynamic;
    return -1;
}

// The grid, the block and the dynamic shared memory against the limits: one error line naming the
// kernel and the limit when one is passed.
static void emu_check_config(const cudaLaunchConfig_t *c, const void *kernel, const char *name) {
    const dim3 &g = c->gridDim, &b = c->blockDim;
    unsigned long long nt = (unsigned long long)b.x * b.y * b.z;
    if (!g.x || !g.y || !g.z || !b.x || !b.y || !b.z)
        emu_fail("%s: launch of grid (%u,%u,%u) x block (%u,%u,%u): a size of 0", name, g.x, g.y, g.z, b.x, b.y, b.z);
    if (g.x > EMU_MAX_GRID_X) emu_fail("%s: gridDim.x = %u is over sm_90's limit of %u", name, g.x, EMU_MAX_GRID_X);
    if (g.y > EMU_MAX_GRID_YZ) emu_fail("%s: gridDim.y = %u is over sm_90's limit of %d", name, g.y, EMU_MAX_GRID_YZ);
    if (g.z > EMU_MAX_GRID_YZ) emu_fail("%s: gridDim.z = %u is over sm_90's limit of %d", name, g.z, EMU_MAX_GRID_YZ);
    if (b.x > EMU_MAX_BLOCK || b.y > EMU_MAX_BLOCK || b.z > EMU_MAX_BLOCK_Z || nt > EMU_MAX_BLOCK)
        emu_fail("%s: block (%u,%u,%u) of %llu threads is over sm_90's limits (x, y <= %d, z <= %d, %d threads)", name, b.x, b.y, b.z, nt,
                 EMU_MAX_BLOCK, EMU_MAX_BLOCK_Z, EMU_MAX_BLOCK);
    int opt = emu_opt_in(kernel);
    size_t limit = opt >= 0 ? (size_t)opt : EMU_SMEM_DEFAULT;
    if (c->dynamicSmemBytes > limit)
        emu_fail("%s: %zu bytes of dynamic shared memory, over %s %zu", name, c->dynamicSmemBytes,
                 opt >= 0 ? "its cudaFuncSetAttribute(MaxDynamicSharedMemorySize) of" : "sm_90's default limit per block (no opt-in) of", limit);
}

// After a block: its static shared arrays with the launch's dynamic bytes, against the limit.
static void emu_check_smem(const cudaLaunchConfig_t &c, const void *kernel, const char *name) {
    size_t st = emu_static_smem_written(), dyn = c.dynamicSmemBytes;
    int opt = emu_opt_in(kernel);
    if (st > EMU_SMEM_DEFAULT)
        emu_fail("%s: %zu bytes of static shared memory, over sm_90's %d (ptxas refuses it)", name, st, EMU_SMEM_DEFAULT);
    if (opt < 0 && st + dyn > EMU_SMEM_DEFAULT)
        emu_fail("%s: %zu bytes of static + %zu of dynamic shared memory, over sm_90's default limit per block of %d "
                 "(more needs cudaFuncSetAttribute(MaxDynamicSharedMemorySize))", name, st, dyn, EMU_SMEM_DEFAULT);
    if (st + dyn > EMU_SMEM_OPTIN)
        emu_fail("%s: %zu bytes of static + %zu of dynamic shared memory, over sm_90's %d per block", name, st, dyn, EMU_SMEM_OPTIN);
}

// Every block of one launch, one after another, each checked for its shared memory; then the
// guard zones.
template <typename... P> static void emu_run(const cudaLaunchConfig_t &c, EmuCall<P...> &call, const char *name) {
    if (emu.launch_only) return;
    emu_read_shared_vars();
    emu.body = emu_call<P...>, emu.body_arg = &call, emu.kernel = name, emu.n = (int)(c.blockDim.x * c.blockDim.y * c.blockDim.z);
    emu.dynamic_smem = c.dynamicSmemBytes;
    gridDim = c.gridDim, blockDim = c.blockDim;
    emu_count_begin();
    for (unsigned z = 0; z < gridDim.z; z++)
        for (unsigned y = 0; y < gridDim.y; y++)
            for (unsigned x = 0; x < gridDim.x; x++) {
                blockIdx = dim3(x, y, z);
                emu_count_block_begin(((unsigned long long)z * gridDim.y + y) * gridDim.x + x, (unsigned long long)gridDim.x * gridDim.y * gridDim.z);
                emu_run_block();
                emu_count_block_end();
                emu_check_smem(c, (const void *)call.kernel, name);
            }
    emu_count_end(name, c.gridDim, c.blockDim);
    emu_check_guards(name);
}

// cudaLaunchKernelEx(&config, kernel, args...): the configuration checked, the arguments converted
// to the kernel's parameter types, as the real template does; then run (or, while a graph is being
// captured, recorded).
template <typename... P, typename... A>
static cudaError_t emu_launch(const cudaLaunchConfig_t *c, void (*kernel)(P...), const char *name, A &&...args) {
    emu_init();
    emu_check_config(c, (const void *)kernel, name);
    EmuCall<P...> call{kernel, std::tuple<P...>(std::forward<A>(args)...)};
    if (emu_capture) emu_capture->ops.push_back([cfg = *c, call, name]() mutable { emu_run(cfg, call, name); });
    else emu_run(*c, call, name);
    return cudaSuccess;
}
#define cudaLaunchKernelEx(config, kernel, ...) emu_launch(config, kernel, #kernel, __VA_ARGS__)
