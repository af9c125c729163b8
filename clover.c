/*
 * clover.c — inference for Clover-35B-A3B-Preview (GGUF arch `clover_moe`) and Qwen3.5/3.6-MoE
 * (`qwen35moe`) in one C file: GGUF reader, dequantisation, the hybrid Gated-DeltaNet / gated
 * attention / MoE forward pass, tokenizer, sampler, and draft-self decoding (the model drafts a
 * block with its bidirectional diffusion pass and verifies it with its own causal pass).
 *
 * Read it top to bottom; each section is one concept, in the order data flows. The method first:
 *    1. errors and checked arithmetic          9. the forward pass: embedding, GDN, attention, MoE,
 *    2. half precision                            head; the causal pass and the preview pass
 *    3. GGUF reader                           10. decoding: plain steps, draft-self (drafts,
 *    4. block layouts and dequantisation          verification, acceptance, rollback), diffusion
 *    5. activation rounding and dot products
 *    6. the model: hyper-parameters, names    then the machinery it runs on:
 *    7. state, scratch and the context        11. tensor dumps (--dump-tensors)
 *    8. matmul                                12. the SIMD twins of the kernels; the thread pool
 *                                             13. tokenizer, and printing tokens
 *                                             14. sampler
 *                                             15. the GPU side: clover.cu's interface
 *                                             16. the command line, the reports and main
 * "spec Sx.y" cites README.md's Specification, which states the formats and rules this code follows.
 * The numerics follow llama.cpp's CPU path (activations rounded to the weight's dot type, integer
 * dots inside blocks) so that logits match it; see README.md for the tour and the checks.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <regex.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Float expressions are evaluated as written: a * b + c rounds twice, and a fused multiply-add is
 * written as fmaf where llama.cpp's compiled code has one. GCC in ISO C mode (-std=c11) does not
 * fuse on its own; clang does within an expression unless told not to. */
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

/* ============================================================================================== */
/* 1. Errors and checked arithmetic                                                               */
/* ============================================================================================== */
/* Every failure is one line on stderr (what, where, what to do) and exit status 1. */
static void fatal(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("clover: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) fatal("out of memory allocating %zu bytes; use a smaller -c, -b or -ub", n);
    return p;
}

static void *xcalloc(size_t count, size_t size) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) fatal("out of memory allocating %zu x %zu bytes; use a smaller -c, -b or -ub", count, size);
    return p;
}

/* a*b for sizes, or fatal: no size computed from file contents may wrap around. */
static size_t mul_size(size_t a, size_t b, const char *what) {
    if (b != 0 && a > SIZE_MAX / b) fatal("size overflow computing %s (%zu x %zu)", what, a, b);
    return a * b;
}

/* a+b for sizes, or fatal. */
static size_t add_size(size_t a, size_t b, const char *what) {
    if (a > SIZE_MAX - b) fatal("size overflow computing %s (%zu + %zu)", what, a, b);
    return a + b;
}

/* n bytes on 2 MiB boundaries, marked for transparent huge pages: for the KV cache, which a decoding
 * step reads row after row with a stride of a whole cache row (a kv head's 512 bytes of every 1 KiB
 * row at head_dim 256), after the step's weights have pushed it and its page tables out of the
 * caches. On 4 KiB pages every fourth key was a new page, a page walk from memory, and a point
 * where the hardware prefetchers stop: a decoding step at 2080 keys (q4_k_m 32768 slice, 2 threads,
 * zen4, `build/bench -s 1 -p 2048`, 4 alternating runs) spent 2.09-3.36 ms in attention, where
 * its kernels take ~0.5 ms with the rows in cache; on 2 MiB pages 0.94-1.00 ms. */
static void *xmalloc_huge(size_t n) {
    const size_t huge = (size_t)1 << 21;
    uint8_t *p = xmalloc(add_size(n, huge, "a 2 MiB-aligned buffer"));   /* (never freed: the state lives as long as the program) */
    uint8_t *a = p + (huge - (uintptr_t)p % huge) % huge;
    madvise(a, n, MADV_HUGEPAGE);   /* a hint: where the kernel has no transparent huge pages, 4 KiB pages */
    return a;
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ============================================================================================== */
/* 2. Half precision: IEEE binary16 (fp16) and bfloat16, converted bit-exactly                     */
/* ============================================================================================== */
static float fp16_to_fp32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0x1f) bits = sign | 0x7f800000 | (man << 13);           /* inf, nan */
    else if (exp != 0) bits = sign | ((exp + 112) << 23) | (man << 13); /* normal: rebias 15 -> 127 */
    else if (man == 0) bits = sign;                                     /* zero */
    else {                                                              /* subnormal: normalise */
        int e = -1;
        do { man <<= 1; e++; } while (!(man & 0x400));
        bits = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ff) << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Round to nearest even, as the F16C instruction llama.cpp uses does. */
static uint16_t fp32_to_fp16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000, ax = x & 0x7fffffff;
    if (ax >= 0x7f800000) return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000 ? 0x200 : 0));
    if (ax >= 0x477ff000) return (uint16_t)(sign | 0x7c00);            /* rounds past 65504: inf */
    if (ax < 0x38800000) {                                             /* below 2^-14: subnormal */
        if (ax < 0x33000000) return (uint16_t)sign;                    /* below half the smallest */
        uint32_t man = (ax & 0x7fffff) | 0x800000, shift = 126 - (ax >> 23); /* units of 2^-24 */
        uint32_t r = man >> shift, rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = ax - 0x38000000;                                      /* rebias 127 -> 15 */
    r = (r + 0xfff + ((r >> 13) & 1)) >> 13;
    return (uint16_t)(sign | r);
}

static float bf16_to_fp32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static uint16_t fp32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffff) > 0x7f800000) return (uint16_t)((x >> 16) | 64); /* quiet nan */
    return (uint16_t)((x + (0x7fff + ((x >> 16) & 1))) >> 16);
}

/* unaligned little-endian loads from the file */
static uint16_t rd16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static uint32_t rd32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t rd64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

/* ============================================================================================== */
/* 3. GGUF reader                                                                                 */
/* ============================================================================================== */
/* A GGUF v3 file: header, key/value metadata, tensor infos, then the aligned data section. The
 * file is mapped read-only and weights are used in place. Nothing in it is trusted: every length,
 * count, offset and dimension is checked before it is used. */
typedef struct { const char *ptr; uint64_t len; } GGUFString;

enum { GGUF_U8, GGUF_I8, GGUF_U16, GGUF_I16, GGUF_U32, GGUF_I32, GGUF_F32, GGUF_BOOL, GGUF_STRING,
       GGUF_ARRAY, GGUF_U64, GGUF_I64, GGUF_F64, GGUF_NTYPES };
static const char *GGUF_TYPE_NAMES[GGUF_NTYPES] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32",
                                                   "bool", "string", "array", "u64", "i64", "f64"};
static const uint64_t GGUF_TYPE_SIZE[GGUF_NTYPES] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

typedef struct {
    GGUFString key;
    uint32_t type;          /* value type; for arrays the element type is arr_type */
    const uint8_t *value;   /* the scalar value, or the first array element */
    uint32_t arr_type;
    uint64_t arr_n;
    GGUFString *strings;    /* string values (arr_n of them for a string array, 1 for a string) */
} GGUFKV;

typedef struct {
    GGUFString name;
    uint32_t n_dims, type;
    int64_t ne[4];          /* ne[0] is the contiguous dimension; unused dims are 1 */
    uint64_t offset;        /* relative to the data section */
    const uint8_t *data;
    size_t nbytes;
    bool used;              /* claimed by the loader; the rest are reported as unknown */
} GGUFTensor;

typedef struct {
    const char *path;
    const uint8_t *base;
    size_t size;
    uint32_t version;
    uint64_t n_kv, n_tensors;
    GGUFKV *kv;
    GGUFTensor *tensors;
    uint64_t alignment;
} GGUF;

/* Tensor types: elements per block and bytes per block, for every ggml type id a file may hold,
 * so that any file can be bounds-checked; `supported` marks those clover computes with. */
enum { T_F32 = 0, T_F16 = 1, T_Q4_0 = 2, T_Q8_0 = 8, T_Q4_K = 12, T_Q5_K = 13, T_Q6_K = 14,
       T_Q8_K = 15, T_BF16 = 30, T_NTYPES = 40 };
typedef struct { const char *name; uint32_t block, bytes; bool supported; } TypeInfo;
static const TypeInfo TYPES[T_NTYPES] = {
    [0] = {"F32", 1, 4, true},      [1] = {"F16", 1, 2, true},      [2] = {"Q4_0", 32, 18, true},
    [3] = {"Q4_1", 32, 20, false},  [6] = {"Q5_0", 32, 22, false},  [7] = {"Q5_1", 32, 24, false},
    [8] = {"Q8_0", 32, 34, true},   [9] = {"Q8_1", 32, 36, false},  [10] = {"Q2_K", 256, 84, false},
    [11] = {"Q3_K", 256, 110, false}, [12] = {"Q4_K", 256, 144, true}, [13] = {"Q5_K", 256, 176, true},
    [14] = {"Q6_K", 256, 210, true}, [15] = {"Q8_K", 256, 292, false}, [16] = {"IQ2_XXS", 256, 66, false},
    [17] = {"IQ2_XS", 256, 74, false}, [18] = {"IQ3_XXS", 256, 98, false}, [19] = {"IQ1_S", 256, 50, false},
    [20] = {"IQ4_NL", 32, 18, false}, [21] = {"IQ3_S", 256, 110, false}, [22] = {"IQ2_S", 256, 82, false},
    [23] = {"IQ4_XS", 256, 136, false}, [24] = {"I8", 1, 1, false},  [25] = {"I16", 1, 2, false},
    [26] = {"I32", 1, 4, false},    [27] = {"I64", 1, 8, false},    [28] = {"F64", 1, 8, false},
    [29] = {"IQ1_M", 256, 56, false}, [30] = {"BF16", 1, 2, true},  [34] = {"TQ1_0", 256, 54, false},
    [35] = {"TQ2_0", 256, 66, false}, [39] = {"MXFP4", 32, 17, false},
};

/* A read cursor over the mapped file. Reading past the end is a clear error, never a crash. */
typedef struct { const GGUF *f; const uint8_t *p; } Cursor;

static const uint8_t *take(Cursor *c, uint64_t n, const char *what) {
    uint64_t left = (uint64_t)(c->f->base + c->f->size - c->p);
    if (n > left)
        fatal("%s: truncated or corrupt GGUF: %s needs %llu bytes at offset %zu but only %llu remain",
              c->f->path, what, (unsigned long long)n, (size_t)(c->p - c->f->base), (unsigned long long)left);
    const uint8_t *p = c->p;
    c->p += n;
    return p;
}

static GGUFString take_string(Cursor *c, const char *what) {
    uint64_t len = rd64(take(c, 8, what));
    GGUFString s = {(const char *)take(c, len, what), len};
    return s;
}

/* printable prefix of a string from the file, for error messages */
static const char *show(GGUFString s) {
    static char buf[4][96];
    static int k;
    char *b = buf[k++ & 3];
    size_t n = s.len < 80 ? s.len : 80, j = 0;
    for (size_t i = 0; i < n; i++) b[j++] = (s.ptr[i] >= 32 && s.ptr[i] < 127) ? s.ptr[i] : '?';
    if (s.len > 80) { b[j++] = '.'; b[j++] = '.'; }
    b[j] = 0;
    return b;
}

static bool str_eq(GGUFString s, const char *z) { return s.len == strlen(z) && memcmp(s.ptr, z, s.len) == 0; }

static void read_kv(Cursor *c, GGUFKV *kv) {
    kv->key = take_string(c, "metadata key");
    kv->type = rd32(take(c, 4, "metadata value type"));
    if (kv->type >= GGUF_NTYPES)
        fatal("%s: metadata key '%s' has unknown value type %u; the file is corrupt", c->f->path, show(kv->key), kv->type);
    uint32_t et = kv->type;
    uint64_t n = 1;
    if (kv->type == GGUF_ARRAY) {
        et = rd32(take(c, 4, "array element type"));
        n = rd64(take(c, 8, "array length"));
        if (et >= GGUF_NTYPES || et == GGUF_ARRAY)
            fatal("%s: metadata array '%s' has unsupported element type %u", c->f->path, show(kv->key), et);
        kv->arr_type = et;
        kv->arr_n = n;
    }
    kv->value = c->p;
    if (et == GGUF_STRING) {
        /* each string takes at least its 8-byte length, which bounds n before we allocate */
        if (n > (uint64_t)(c->f->base + c->f->size - c->p) / 8)
            fatal("%s: metadata '%s' claims %llu strings, more than the file can hold", c->f->path, show(kv->key), (unsigned long long)n);
        kv->strings = xmalloc(mul_size(n, sizeof(GGUFString), "string array"));
        for (uint64_t i = 0; i < n; i++) kv->strings[i] = take_string(c, "metadata string");
    } else {
        if (n > UINT64_MAX / GGUF_TYPE_SIZE[et]) fatal("%s: metadata '%s' array length overflows", c->f->path, show(kv->key));
        take(c, n * GGUF_TYPE_SIZE[et], "metadata value");
    }
}

static int cmp_tensor_offset(const void *a, const void *b) {
    const GGUFTensor *x = *(GGUFTensor *const *)a, *y = *(GGUFTensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static int cmp_tensor_name(const void *a, const void *b) {
    const GGUFTensor *x = *(GGUFTensor *const *)a, *y = *(GGUFTensor *const *)b;
    size_t n = x->name.len < y->name.len ? x->name.len : y->name.len;
    int r = memcmp(x->name.ptr, y->name.ptr, n);
    return r ? r : (x->name.len > y->name.len) - (x->name.len < y->name.len);
}

static const GGUFKV *gguf_find(const GGUF *f, const char *key) {
    for (uint64_t i = 0; i < f->n_kv; i++)
        if (str_eq(f->kv[i].key, key)) return &f->kv[i];
    return NULL;
}

static void read_tensor_info(Cursor *c, GGUFTensor *t) {
    const char *path = c->f->path;
    t->name = take_string(c, "tensor name");
    t->n_dims = rd32(take(c, 4, "tensor dimension count"));
    if (t->n_dims < 1 || t->n_dims > 4)
        fatal("%s: tensor '%s' has %u dimensions (1 to 4 allowed); the file is corrupt", path, show(t->name), t->n_dims);
    uint64_t count = 1;
    for (int d = 0; d < 4; d++) {
        t->ne[d] = 1;
        if ((uint32_t)d >= t->n_dims) continue;
        uint64_t ne = rd64(take(c, 8, "tensor dimension"));
        if (ne == 0 || ne > INT32_MAX)
            fatal("%s: tensor '%s' dimension %d is %llu (must be 1..2^31-1)", path, show(t->name), d, (unsigned long long)ne);
        if (count > (uint64_t)INT64_MAX / ne)
            fatal("%s: tensor '%s' element count overflows", path, show(t->name));
        count *= ne;
        t->ne[d] = (int64_t)ne;
    }
    t->type = rd32(take(c, 4, "tensor type"));
    t->offset = rd64(take(c, 8, "tensor offset"));
    if (t->type >= T_NTYPES || !TYPES[t->type].name)
        fatal("%s: tensor '%s' has unknown type id %u", path, show(t->name), t->type);
    const TypeInfo *ti = &TYPES[t->type];
    if (t->ne[0] % ti->block)
        fatal("%s: tensor '%s' row of %lld elements is not a multiple of the %s block (%u)", path, show(t->name),
              (long long)t->ne[0], ti->name, ti->block);
    uint64_t rows = count / (uint64_t)t->ne[0], row_bytes = (uint64_t)t->ne[0] / ti->block * ti->bytes;
    if (rows && row_bytes > SIZE_MAX / rows) fatal("%s: tensor '%s' byte size overflows", path, show(t->name));
    t->nbytes = (size_t)(rows * row_bytes);
}

/* Parse the file at f->base (f->size bytes, f->path for messages): the mapped file, or any buffer
 * (the fuzz harness, test/fuzz_gguf.c, parses from memory). */
static void gguf_parse(GGUF *f) {
    const char *path = f->path;
    Cursor c = {f, f->base};
    if (memcmp(take(&c, 4, "magic"), "GGUF", 4) != 0) fatal("%s: not a GGUF file (bad magic)", path);
    f->version = rd32(take(&c, 4, "version"));
    if (f->version != 3) fatal("%s: GGUF version %u is not supported (only version 3)", path, f->version);
    f->n_tensors = rd64(take(&c, 8, "tensor count"));
    f->n_kv = rd64(take(&c, 8, "metadata count"));
    /* each key/value needs at least 12 bytes and each tensor info at least 24: bound the counts */
    if (f->n_kv > f->size / 12 || f->n_tensors > f->size / 24)
        fatal("%s: header claims %llu metadata entries and %llu tensors, more than the file can hold; the file is truncated or corrupt", path,
              (unsigned long long)f->n_kv, (unsigned long long)f->n_tensors);
    f->kv = xcalloc(f->n_kv, sizeof(GGUFKV));
    for (uint64_t i = 0; i < f->n_kv; i++) read_kv(&c, &f->kv[i]);

    f->alignment = 32;
    const GGUFKV *al = gguf_find(f, "general.alignment");
    if (al) {
        if (al->type != GGUF_U32) fatal("%s: general.alignment must be a u32", path);
        f->alignment = rd32(al->value);
        if (f->alignment == 0 || (f->alignment & (f->alignment - 1)) || f->alignment > 65536)
            fatal("%s: general.alignment %llu is not a power of two up to 65536", path, (unsigned long long)f->alignment);
    }
    f->tensors = xcalloc(f->n_tensors, sizeof(GGUFTensor));
    for (uint64_t i = 0; i < f->n_tensors; i++) read_tensor_info(&c, &f->tensors[i]);

    uint64_t data_start = ((uint64_t)(c.p - f->base) + f->alignment - 1) / f->alignment * f->alignment;
    GGUFTensor **by = xmalloc(mul_size(f->n_tensors, sizeof *by, "tensor index"));
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        GGUFTensor *t = &f->tensors[i];
        by[i] = t;
        if (t->offset % f->alignment)
            fatal("%s: tensor '%s' data offset %llu is not aligned to %llu", path, show(t->name),
                  (unsigned long long)t->offset, (unsigned long long)f->alignment);
        if (data_start > f->size || t->offset > f->size - data_start || t->nbytes > f->size - data_start - t->offset)
            fatal("%s: tensor '%s' data (offset %llu, %zu bytes) lies past the end of the file (%zu bytes); the file is truncated",
                  path, show(t->name), (unsigned long long)t->offset, t->nbytes, f->size);
        t->data = f->base + data_start + t->offset;
    }
    qsort(by, f->n_tensors, sizeof *by, cmp_tensor_offset);
    for (uint64_t i = 1; i < f->n_tensors; i++)
        if (by[i - 1]->offset + by[i - 1]->nbytes > by[i]->offset)
            fatal("%s: tensors '%s' and '%s' overlap in the data section", path, show(by[i - 1]->name), show(by[i]->name));
    qsort(by, f->n_tensors, sizeof *by, cmp_tensor_name);
    for (uint64_t i = 1; i < f->n_tensors; i++)
        if (cmp_tensor_name(&by[i - 1], &by[i]) == 0) fatal("%s: tensor name '%s' appears twice", path, show(by[i]->name));
    free(by);
}

static void gguf_open(GGUF *f, const char *path) {
    memset(f, 0, sizeof *f);
    f->path = path;
    int fd = open(path, O_RDONLY);
    if (fd < 0) fatal("cannot open model '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) fatal("model '%s' is not a regular file", path);
    f->size = (size_t)st.st_size;
    if (f->size < 24) fatal("%s: file of %zu bytes is too small to be a GGUF", path, f->size);
    void *m = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED) fatal("cannot map model '%s': %s", path, strerror(errno));
    f->base = m;
    gguf_parse(f);
}

/* Typed metadata getters. A key of the wrong type is an error; integers of any width are accepted
 * when the value fits. */
static bool kv_int(const GGUF *f, const GGUFKV *kv, int64_t *out) {
    const uint8_t *v = kv->value;
    switch (kv->type) {
    case GGUF_U8: *out = v[0]; return true;
    case GGUF_I8: *out = (int8_t)v[0]; return true;
    case GGUF_U16: *out = rd16(v); return true;
    case GGUF_I16: *out = (int16_t)rd16(v); return true;
    case GGUF_U32: *out = rd32(v); return true;
    case GGUF_I32: *out = (int32_t)rd32(v); return true;
    case GGUF_U64: if (rd64(v) > INT64_MAX) break; *out = (int64_t)rd64(v); return true;
    case GGUF_I64: *out = (int64_t)rd64(v); return true;
    case GGUF_BOOL: *out = v[0] != 0; return true;
    }
    fatal("%s: metadata '%s' has type %s, expected an integer", f->path, show(kv->key), GGUF_TYPE_NAMES[kv->type]);
    return false;
}

/* An integer key in [lo, hi]; `def` when absent, or fatal when def < lo (required). */
static int64_t gguf_int(const GGUF *f, const char *key, int64_t def, int64_t lo, int64_t hi) {
    const GGUFKV *kv = gguf_find(f, key);
    if (!kv) {
        if (def < lo) fatal("%s: required metadata '%s' is missing; is this a qwen35moe/clover_moe GGUF?", f->path, key);
        return def;
    }
    int64_t v;
    kv_int(f, kv, &v);
    if (v < lo || v > hi) fatal("%s: metadata '%s' = %lld is out of range [%lld, %lld]", f->path, key, (long long)v, (long long)lo, (long long)hi);
    return v;
}

static float gguf_float(const GGUF *f, const char *key, float def) {
    const GGUFKV *kv = gguf_find(f, key);
    if (!kv) return def;
    if (kv->type == GGUF_F32) { float v; memcpy(&v, kv->value, 4); return v; }
    if (kv->type == GGUF_F64) { double v; memcpy(&v, kv->value, 8); return (float)v; }
    fatal("%s: metadata '%s' has type %s, expected f32", f->path, key, GGUF_TYPE_NAMES[kv->type]);
    return 0;
}

static const GGUFKV *gguf_array(const GGUF *f, const char *key, uint32_t elem_type, bool required) {
    const GGUFKV *kv = gguf_find(f, key);
    if (!kv) {
        if (required) fatal("%s: required metadata array '%s' is missing", f->path, key);
        return NULL;
    }
    if (kv->type != GGUF_ARRAY || kv->arr_type != elem_type)
        fatal("%s: metadata '%s' must be an array of %s", f->path, key, GGUF_TYPE_NAMES[elem_type]);
    return kv;
}

/* Element i of an integer array, as int64 (arrays of any integer type). */
static int64_t gguf_arr_int(const GGUF *f, const GGUFKV *kv, uint64_t i) {
    GGUFKV e = *kv;
    e.type = kv->arr_type;
    e.value = kv->value + i * GGUF_TYPE_SIZE[kv->arr_type];
    int64_t v;
    kv_int(f, &e, &v);
    return v;
}

/* ============================================================================================== */
/* 4. Block layouts and dequantisation                                                            */
/* ============================================================================================== */
/* Quantised rows are sequences of blocks; each struct mirrors one block in the file. The K-quants
 * pack 256 weights as 8 or 16 sub-blocks with their own small scales. Each layout is unpacked in
 * exactly one function, used both to dequantise and by the integer dot products below. */
typedef struct { uint16_t d; uint8_t qs[16]; } BlockQ4_0;                 /* w = d*(q-8), q in 0..15 */
typedef struct { uint16_t d; int8_t qs[32]; } BlockQ8_0;                  /* w = d*q */
typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[128]; } BlockQ4_K; /* w = d*sc*q - dmin*m */
typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; } BlockQ5_K;
typedef struct { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; uint16_t d; } BlockQ6_K; /* w = d*sc*(q-32) */
typedef struct { float d; int8_t qs[256]; int16_t bsums[16]; } BlockQ8_K;  /* activations only */
_Static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_K) == 144 &&
               sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210 && sizeof(BlockQ8_K) == 292,
               "block structs must match the GGUF layout");

static void unpack_q4_0(const BlockQ4_0 *b, int8_t q[32]) {
    for (int j = 0; j < 16; j++) {
        q[j] = (int8_t)((b->qs[j] & 15) - 8);
        q[j + 16] = (int8_t)((b->qs[j] >> 4) - 8);
    }
}

/* The 12 scale bytes of Q4_K/Q5_K hold eight 6-bit scales and eight 6-bit mins. */
static void unpack_scales_k4(const uint8_t s[12], uint8_t sc[8], uint8_t mn[8]) {
    for (int j = 0; j < 4; j++) {
        sc[j] = s[j] & 63;
        mn[j] = s[j + 4] & 63;
        sc[j + 4] = (uint8_t)((s[j + 8] & 15) | ((s[j] >> 6) << 4));
        mn[j + 4] = (uint8_t)((s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4));
    }
}

/* Q4_K: sub-block j (32 weights) of chunk p = j/2 takes the low nibbles (j even) or high nibbles. */
static void unpack_q4_K(const BlockQ4_K *b, uint8_t q[256], uint8_t sc[8], uint8_t mn[8]) {
    unpack_scales_k4(b->scales, sc, mn);
    for (int p = 0; p < 4; p++)
        for (int l = 0; l < 32; l++) {
            q[64 * p + l] = b->qs[32 * p + l] & 15;
            q[64 * p + 32 + l] = b->qs[32 * p + l] >> 4;
        }
}

/* Q5_K: Q4_K plus a fifth bit from qh (bit 2p for the low half of chunk p, bit 2p+1 for the high). */
static void unpack_q5_K(const BlockQ5_K *b, uint8_t q[256], uint8_t sc[8], uint8_t mn[8]) {
    unpack_scales_k4(b->scales, sc, mn);
    for (int p = 0; p < 4; p++)
        for (int l = 0; l < 32; l++) {
            q[64 * p + l] = (uint8_t)((b->qs[32 * p + l] & 15) | (((b->qh[l] >> (2 * p)) & 1) << 4));
            q[64 * p + 32 + l] = (uint8_t)((b->qs[32 * p + l] >> 4) | (((b->qh[l] >> (2 * p + 1)) & 1) << 4));
        }
}

/* Q6_K: two halves of 128; each weight is 4 low bits (ql) and 2 high bits (qh), minus 32; one
 * signed 8-bit scale per 16 weights. */
static void unpack_q6_K(const BlockQ6_K *b, int8_t q[256]) {
    for (int n = 0; n < 2; n++) {
        const uint8_t *ql = b->ql + 64 * n, *qh = b->qh + 32 * n;
        int8_t *y = q + 128 * n;
        for (int l = 0; l < 32; l++) {
            y[l] = (int8_t)(((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4)) - 32);
            y[l + 32] = (int8_t)(((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32);
            y[l + 64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
            y[l + 96] = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
        }
    }
}

/* Dequantise n values (n a multiple of the block) of a row of type `type` into float. */
static void dequant_row(uint32_t type, const void *src, float *y, int64_t n) {
    switch (type) {
    case T_F32: memcpy(y, src, (size_t)n * 4); break;
    case T_F16: for (int64_t i = 0; i < n; i++) y[i] = fp16_to_fp32(((const uint16_t *)src)[i]); break;
    case T_BF16: for (int64_t i = 0; i < n; i++) y[i] = bf16_to_fp32(((const uint16_t *)src)[i]); break;
    case T_Q8_0:
        for (int64_t b = 0; b < n / 32; b++) {
            const BlockQ8_0 *x = (const BlockQ8_0 *)src + b;
            float d = fp16_to_fp32(x->d);
            for (int j = 0; j < 32; j++) y[32 * b + j] = x->qs[j] * d;
        }
        break;
    case T_Q4_0:
        for (int64_t b = 0; b < n / 32; b++) {
            const BlockQ4_0 *x = (const BlockQ4_0 *)src + b;
            int8_t q[32];
            unpack_q4_0(x, q);
            float d = fp16_to_fp32(x->d);
            for (int j = 0; j < 32; j++) y[32 * b + j] = q[j] * d;
        }
        break;
    case T_Q4_K:
    case T_Q5_K:
        for (int64_t b = 0; b < n / 256; b++) {
            uint8_t q[256], sc[8], mn[8];
            uint16_t d16, dmin16;
            if (type == T_Q4_K) {
                const BlockQ4_K *x = (const BlockQ4_K *)src + b;
                unpack_q4_K(x, q, sc, mn);
                d16 = x->d, dmin16 = x->dmin;
            } else {
                const BlockQ5_K *x = (const BlockQ5_K *)src + b;
                unpack_q5_K(x, q, sc, mn);
                d16 = x->d, dmin16 = x->dmin;
            }
            float d = fp16_to_fp32(d16), dmin = fp16_to_fp32(dmin16);
            for (int j = 0; j < 8; j++) {
                float s = d * sc[j], m = dmin * mn[j];
                for (int l = 0; l < 32; l++) y[256 * b + 32 * j + l] = s * q[32 * j + l] - m;
            }
        }
        break;
    case T_Q6_K:
        for (int64_t b = 0; b < n / 256; b++) {
            const BlockQ6_K *x = (const BlockQ6_K *)src + b;
            int8_t q[256];
            unpack_q6_K(x, q);
            float d = fp16_to_fp32(x->d);
            for (int g = 0; g < 16; g++) {
                float s = d * x->scales[g];
                for (int l = 0; l < 16; l++) y[256 * b + 16 * g + l] = s * q[16 * g + l];
            }
        }
        break;
    default: fatal("internal: dequant_row of unsupported type %u", type);
    }
}

/* ============================================================================================== */
/* 5. Activation rounding and dot products                                                        */
/* ============================================================================================== */
/* llama.cpp's CPU matmul first rounds the activation row to the weight type's "dot type" and then
 * takes integer dot products inside blocks. Doing the same makes our logits match it, and it is
 * also the fast path: int8 x int8 multiply-adds.
 *   weights F32 -> activation F32      weights F16 -> F16       weights BF16 -> BF16
 *   weights Q4_0, Q8_0 -> Q8_0 (32 per block, d = amax/127)
 *   weights Q4_K, Q5_K, Q6_K -> Q8_K (256 per block, d = max/-127 of the signed extreme, bsums) */
static uint32_t dot_type(uint32_t wtype) {
    switch (wtype) {
    case T_Q4_0: case T_Q8_0: return T_Q8_0;
    case T_Q4_K: case T_Q5_K: case T_Q6_K: return T_Q8_K;
    default: return wtype;
    }
}

static size_t row_bytes(uint32_t type, int64_t n) { return (size_t)(n / TYPES[type].block) * TYPES[type].bytes; }

/* Q8_0: per 32 values d = amax/127, q = round(x/d) (twin: quantize_q8_0_avx2) */
static void quantize_q8_0(const float *x, BlockQ8_0 *y, int64_t n) {
    for (int64_t b = 0; b < n / 32; b++) {
        const float *v = x + 32 * b;
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(v[j]));
        float d = amax / 127, id = amax != 0 ? 127.f / amax : 0;   /* as llama.cpp's x86 code: 127/amax */
        y[b].d = fp32_to_fp16(d);
        for (int j = 0; j < 32; j++) y[b].qs[j] = (int8_t)lrintf(v[j] * id);  /* nearest, ties to even */
    }
}

/* Q8_K: per 256 values the signed extreme maps to -127, plus the sums of 16 (twin: quantize_q8_K_avx2) */
static void quantize_q8_K(const float *x, BlockQ8_K *y, int64_t n) {
    for (int64_t b = 0; b < n / 256; b++) {
        const float *v = x + 256 * b;
        float amax = 0, max = 0;
        for (int j = 0; j < 256; j++)
            if (fabsf(v[j]) > amax) { amax = fabsf(v[j]); max = v[j]; }
        if (amax == 0) {
            memset(&y[b], 0, sizeof y[b]);
            continue;
        }
        float iscale = -127.f / max;   /* the extreme value maps to -127 exactly */
        for (int j = 0; j < 256; j++) {
            int q = (int)lrintf(iscale * v[j]);   /* nearest, ties to even */
            y[b].qs[j] = (int8_t)(q < 127 ? q : 127);
        }
        for (int g = 0; g < 16; g++) {
            int s = 0;
            for (int l = 0; l < 16; l++) s += y[b].qs[16 * g + l];
            y[b].bsums[g] = (int16_t)s;
        }
        y[b].d = 1 / iscale;
    }
}

/* Round an activation row to the dot type of weights of type wtype. */
static void quantize_row(uint32_t wtype, const float *x, void *y, int64_t n) {
    switch (dot_type(wtype)) {
    case T_F32: memcpy(y, x, (size_t)n * 4); break;
    case T_F16: for (int64_t i = 0; i < n; i++) ((uint16_t *)y)[i] = fp32_to_fp16(x[i]); break;
    case T_BF16: for (int64_t i = 0; i < n; i++) ((uint16_t *)y)[i] = fp32_to_bf16(x[i]); break;
    case T_Q8_0: quantize_q8_0(x, y, n); break;
    case T_Q8_K: quantize_q8_K(x, y, n); break;
    }
}

/* Float dot products. A float sum depends on its order, and with F16/BF16 weights the rounding of
 * the next activation magnifies any difference, so these add in the orders of llama.cpp's x86
 * AVX-512 kernels:
 *   row order  (ggml_vec_dot_*: single rows, expert matmuls, the GDN recurrence): element i goes
 *              to accumulator i % 64; the tail past the last multiple of 64 is added in double,
 *              but for F32, whose ggml_vec_dot_f32 keeps a float sum: the folded lanes rounded
 *              to float, then each tail product added in float (mul, then add: not fused). This
 *              shows where rows are not multiples of 64, e.g. a GDN state of 16;
 *   tile order (llamafile tinyBLAS: dense matmuls of two or more rows): element i to lane i % 16.
 * Accumulators are then folded by halving (64 -> 32 -> ... -> 1). BF16 products are taken in pairs,
 * odd element first, as the AVX512-BF16 dot instruction does. fp16 and bf16 products are exact in
 * fp32, so only the order of the additions matters. */
static float fold(float *acc, int n) {
    for (int w = n / 2; w >= 1; w /= 2)
        for (int l = 0; l < w; l++) acc[l] += acc[l + w];
    return acc[0];
}

static float f32_at(const void *p, int64_t i) { return ((const float *)p)[i]; }
static float f16_at(const void *p, int64_t i) { return fp16_to_fp32(((const uint16_t *)p)[i]); }
static float bf16_at(const void *p, int64_t i) { return bf16_to_fp32(((const uint16_t *)p)[i]); }

/* row order over the first np elements (a multiple of 64), folded */
static float dot_float_lanes(float (*at)(const void *, int64_t), const void *x, const void *y, int64_t np) {
    float acc[64] = {0};
    for (int64_t i = 0; i < np; i += 64)
        for (int l = 0; l < 64; l++) acc[l] = fmaf(at(x, i + l), at(y, i + l), acc[l]);
    return fold(acc, 64);
}

/* twins: dot_f32_avx2, dot_f16_avx2 */
static float dot_f32_row(const void *w, const void *a, int64_t n) {
    const float *x = w, *y = a;
    int64_t np = n & ~(int64_t)63;
    float sum = dot_float_lanes(f32_at, x, y, np);
    for (int64_t i = np; i < n; i++) sum += x[i] * y[i];
    return sum;
}

static float dot_f16_row(const void *x, const void *y, int64_t n) {
    int64_t np = n & ~(int64_t)63;
    double sum = dot_float_lanes(f16_at, x, y, np);
    for (int64_t i = np; i < n; i++) sum += f16_at(x, i) * f16_at(y, i);
    return (float)sum;
}

/* tile order; the callers hand rows that are not multiples of 16 to the row order, as tinyBLAS
 * declines them */
static float dot_float_tile(float (*at)(const void *, int64_t), const void *x, const void *y, int64_t n) {
    float acc[16] = {0};
    for (int64_t i = 0; i < n; i += 16)
        for (int l = 0; l < 16; l++) acc[l] = fmaf(at(x, i + l), at(y, i + l), acc[l]);
    return fold(acc, 16);
}

/* one AVX512-BF16 step: lane l += x[2l+1] y[2l+1], then += x[2l] y[2l], over 32 elements */
static void bf16_pairs(float acc[16], const void *x, const void *y, int64_t i) {
    for (int l = 0; l < 16; l++) {
        acc[l] += bf16_at(x, i + 2 * l + 1) * bf16_at(y, i + 2 * l + 1);
        acc[l] += bf16_at(x, i + 2 * l) * bf16_at(y, i + 2 * l);
    }
}

/* twins: dot_bf16_avx2, dot_bf16_tile_avx2 */
static float dot_bf16_row(const void *x, const void *y, int64_t n) {
    float c1[16] = {0}, c2[16] = {0};
    int64_t np = n & ~(int64_t)63;
    for (int64_t i = 0; i < np; i += 64) {
        bf16_pairs(c1, x, y, i);
        bf16_pairs(c2, x, y, i + 32);
    }
    double sum = (double)fold(c1, 16) + (double)fold(c2, 16);
    for (int64_t i = np; i < n; i++) sum += bf16_at(x, i) * bf16_at(y, i);
    return (float)sum;
}

static float dot_bf16_tile(const void *x, const void *y, int64_t n) {
    if (n % 32) return dot_bf16_row(x, y, n);
    float acc[16] = {0};
    for (int64_t i = 0; i < n; i += 32) bf16_pairs(acc, x, y, i);
    return fold(acc, 16);
}

/* twins: dot_f32_tile_avx2, dot_f16_tile_avx2 */
static float dot_f32_tile(const void *w, const void *a, int64_t n) { return n % 16 ? dot_f32_row(w, a, n) : dot_float_tile(f32_at, w, a, n); }
static float dot_f16_tile(const void *w, const void *a, int64_t n) { return n % 16 ? dot_f16_row(w, a, n) : dot_float_tile(f16_at, w, a, n); }

static int32_t dot_i8(const int8_t *x, const int8_t *y, int n) {
    int32_t s = 0;
    for (int i = 0; i < n; i++) s += x[i] * y[i];
    return s;
}

static int32_t dot_u8i8(const uint8_t *x, const int8_t *y, int n) {
    int32_t s = 0;
    for (int i = 0; i < n; i++) s += x[i] * y[i];
    return s;
}

/* One 32-element block into 8 float lanes, as ggml's x86 Q8_0-activation kernels do it
 * (ggml_vec_dot_q8_0_q8_0 / _q4_0_q8_0 AVX2, llamafile tinyBLAS_Q0_AVX): lane l holds the integer
 * sum of elements 4l..4l+3 (mul_sum_i8_pairs_float), and acc[l] = fma(d_w * d_a, lane, acc[l]).
 * The 8 lanes are folded by halving at the end (hsum_float_8). */
static void q8_0_block_lanes(float acc[8], const int8_t *q, const int8_t *a, float d) {
    for (int l = 0; l < 8; l++) acc[l] = fmaf(d, (float)dot_i8(q + 4 * l, a + 4 * l, 4), acc[l]);
}

/* twins: dot_q8_0_avx2, and rows_q8_0_avx2 on several activation rows */
static float dot_q8_0(const void *w, const void *a, int64_t n) {
    const BlockQ8_0 *x = w, *y = a;
    float acc[8] = {0};
    for (int64_t b = 0; b < n / 32; b++)
        q8_0_block_lanes(acc, x[b].qs, y[b].qs, fp16_to_fp32(x[b].d) * fp16_to_fp32(y[b].d));
    return fold(acc, 8);
}

/* twins: dot_q4_0_avx2, rows_q4_0_avx2 */
static float dot_q4_0(const void *w, const void *a, int64_t n) {
    const BlockQ4_0 *x = w;
    const BlockQ8_0 *y = a;
    float acc[8] = {0};
    for (int64_t b = 0; b < n / 32; b++) {
        int8_t q[32];
        unpack_q4_0(&x[b], q);
        q8_0_block_lanes(acc, q, y[b].qs, fp16_to_fp32(x[b].d) * fp16_to_fp32(y[b].d));
    }
    return fold(acc, 8);
}

/* Q4_K/Q5_K . Q8_K = d_w d_a sum_j sc_j (q_j . a_j) - dmin_w d_a sum_j m_j (sum of a over sub-block j);
 * the activation's bsums give the second sum without touching the weights.
 * k4_lanes: the integer part as ggml's AVX2 kernels hold it, 8 int32 lanes where lane l collects
 * elements 4l..4l+3 of every 32-element sub-block j, times sc_j (maddubs + madd with the scales). */
static void k4_lanes(const uint8_t q[256], const uint8_t sc[8], const int8_t *a, int32_t lane[8]) {
    for (int l = 0; l < 8; l++) {
        lane[l] = 0;
        for (int j = 0; j < 8; j++) lane[l] += sc[j] * dot_u8i8(q + 32 * j + 4 * l, a + 32 * j + 4 * l, 4);
    }
}

static int32_t k4_summ(const uint8_t mn[8], const BlockQ8_K *y) {
    int32_t summ = 0;
    for (int j = 0; j < 8; j++) summ += mn[j] * (y->bsums[2 * j] + y->bsums[2 * j + 1]);
    return summ;
}

/* ggml_vec_dot_q4_K_q8_K (AVX2): acc[l] = fma(d, lane_l, acc[l]) with d = d_a d_w; the mins in 4
 * lanes, lane m = m_2m s_2m + m_2m+1 s_2m+1 (s_k = bsum pair k), acc_m = fma(-d_a dmin_w, lane, acc_m);
 * result hsum(acc) + hsum(acc_m). Twins: dot_q4_K_avx2, rows_q4_K_avx2. */
static float dot_q4_K(const void *w, const void *a, int64_t n) {
    const BlockQ4_K *x = w;
    const BlockQ8_K *y = a;
    float acc[8] = {0}, accm[4] = {0};
    for (int64_t b = 0; b < n / 256; b++) {
        uint8_t q[256], sc[8], mn[8];
        int32_t lane[8];
        unpack_q4_K(&x[b], q, sc, mn);
        k4_lanes(q, sc, y[b].qs, lane);
        float d = y[b].d * fp16_to_fp32(x[b].d), dmin = -y[b].d * fp16_to_fp32(x[b].dmin);
        for (int l = 0; l < 8; l++) acc[l] = fmaf(d, (float)lane[l], acc[l]);
        for (int m = 0; m < 4; m++) {
            int32_t p = 0;
            for (int k = 2 * m; k < 2 * m + 2; k++) p += mn[k] * (y[b].bsums[2 * k] + y[b].bsums[2 * k + 1]);
            accm[m] = fmaf(dmin, (float)p, accm[m]);
        }
    }
    return fold(acc, 8) + fold(accm, 4);
}

/* Q4_K weights with a multiple of 8 rows are repacked by llama.cpp (Q4_K_8x8) and multiplied by
 * ggml_gemv/gemm_q4_K_8x8_q8_K: whole-block integer sums, acc = fma(sumi, d_w d_a, acc) and
 * acc_min = fma(summ, dmin_w d_a, acc_min), result acc - acc_min. Twins: dot_q4_K_8x8_avx2,
 * rows_q4_K_8x8_avx2. */
static float dot_q4_K_8x8(const void *w, const void *a, int64_t n) {
    const BlockQ4_K *x = w;
    const BlockQ8_K *y = a;
    float acc = 0, accm = 0;
    for (int64_t b = 0; b < n / 256; b++) {
        uint8_t q[256], sc[8], mn[8];
        int32_t lane[8], sumi = 0;
        unpack_q4_K(&x[b], q, sc, mn);
        k4_lanes(q, sc, y[b].qs, lane);
        for (int l = 0; l < 8; l++) sumi += lane[l];
        acc = fmaf((float)sumi, fp16_to_fp32(x[b].d) * y[b].d, acc);
        accm = fmaf((float)k4_summ(mn, &y[b]), fp16_to_fp32(x[b].dmin) * y[b].d, accm);
    }
    return acc - accm;
}

/* ggml_gemm_q4_K_8x8_q8_K (the batch of 4 activation rows at a time, used for the first T - T % 4
 * rows of a prompt batch of T > 3): as dot_q4_K_8x8 but with a fused multiply-add per pair of
 * 32-element sub-blocks (sb = 0..3) instead of per 256-element block. Twins: dot_q4_K_8x8_gemm_avx2,
 * rows_q4_K_8x8_gemm_avx2. */
static float dot_q4_K_8x8_gemm(const void *w, const void *a, int64_t n) {
    const BlockQ4_K *x = w;
    const BlockQ8_K *y = a;
    float acc = 0, accm = 0;
    for (int64_t b = 0; b < n / 256; b++) {
        uint8_t q[256], sc[8], mn[8];
        unpack_q4_K(&x[b], q, sc, mn);
        float d = fp16_to_fp32(x[b].d) * y[b].d, dmin = fp16_to_fp32(x[b].dmin) * y[b].d;
        for (int sb = 0; sb < 4; sb++) {
            int32_t si = 0, sm = 0;
            for (int j = 2 * sb; j < 2 * sb + 2; j++) {
                si += sc[j] * dot_u8i8(q + 32 * j, y[b].qs + 32 * j, 32);
                sm += mn[j] * (y[b].bsums[2 * j] + y[b].bsums[2 * j + 1]);
            }
            acc = fmaf((float)si, d, acc);
            accm = fmaf((float)sm, dmin, accm);
        }
    }
    return acc - accm;
}

/* ggml_vec_dot_q5_K_q8_K (AVX2): as Q4_K, but the mins go into one scalar,
 * summs = fma(-d_a dmin_w, summ, summs) (the C compiler contracts it); result hsum(acc) + summs.
 * Twins: dot_q5_K_avx2, rows_q5_K_avx2. */
static float dot_q5_K(const void *w, const void *a, int64_t n) {
    const BlockQ5_K *x = w;
    const BlockQ8_K *y = a;
    float acc[8] = {0}, summs = 0;
    for (int64_t b = 0; b < n / 256; b++) {
        uint8_t q[256], sc[8], mn[8];
        int32_t lane[8];
        unpack_q5_K(&x[b], q, sc, mn);
        k4_lanes(q, sc, y[b].qs, lane);
        float d = y[b].d * fp16_to_fp32(x[b].d), dmin = -y[b].d * fp16_to_fp32(x[b].dmin);
        for (int l = 0; l < 8; l++) acc[l] = fmaf(d, (float)lane[l], acc[l]);
        summs = fmaf(dmin, (float)k4_summ(mn, &y[b]), summs);
    }
    return fold(acc, 8) + summs;
}

/* ggml_vec_dot_q6_K_q8_K (AVX2): unsigned 6-bit q (0..63) in 8 lanes, lane l = sum over the 32-element
 * chunks c of sc[2c + (l >= 4)] * (elements 4l..4l+3 of chunk c), minus the offset
 * 32 (bsum_2l sc_2l + bsum_2l+1 sc_2l+1); acc[l] = fma(d_a d_w, lane_l, acc[l]); hsum at the end.
 * Twins: dot_q6_K_avx2, rows_q6_K_avx2. */
static float dot_q6_K(const void *w, const void *a, int64_t n) {
    const BlockQ6_K *x = w;
    const BlockQ8_K *y = a;
    float acc[8] = {0};
    for (int64_t b = 0; b < n / 256; b++) {
        int8_t q[256];
        uint8_t u[256];
        unpack_q6_K(&x[b], q);
        for (int i = 0; i < 256; i++) u[i] = (uint8_t)(q[i] + 32);
        const int8_t *sc = x[b].scales;
        float d = y[b].d * fp16_to_fp32(x[b].d);
        for (int l = 0; l < 8; l++) {
            int32_t lane = 0;
            for (int c = 0; c < 8; c++) lane += sc[2 * c + (l >= 4)] * dot_u8i8(u + 32 * c + 4 * l, y[b].qs + 32 * c + 4 * l, 4);
            lane -= 32 * (y[b].bsums[2 * l] * sc[2 * l] + y[b].bsums[2 * l + 1] * sc[2 * l + 1]);
            acc[l] = fmaf(d, (float)lane, acc[l]);
        }
    }
    return fold(acc, 8);
}

/* Q4_0 weights with a multiple of 8 rows are repacked by llama.cpp (Q4_0_8x8) and multiplied by
 * ggml_gemv/gemm_q4_0_8x8_q8_0: whole-block integer sums, acc = fma(isum, d_w d_a, acc). Twins:
 * dot_q4_0_8x8_avx2, rows_q4_0_8x8_avx2. */
static float dot_q4_0_8x8(const void *w, const void *a, int64_t n) {
    const BlockQ4_0 *x = w;
    const BlockQ8_0 *y = a;
    float acc = 0;
    for (int64_t b = 0; b < n / 32; b++) {
        int8_t q[32];
        unpack_q4_0(&x[b], q);
        acc = fmaf((float)dot_i8(q, y[b].qs, 32), fp16_to_fp32(x[b].d) * fp16_to_fp32(y[b].d), acc);
    }
    return acc;
}

/* --- The kernels, chosen once -----------------------------------------------------------------
 * The dot products by summation order and layout (dot_kernel picks one for a matrix), and every
 * other function whose inner loop has a SIMD twin, in one table. KERNELS_PLAIN holds the plain
 * definitions, written next to the math they serve; KERNELS_AVX2 holds their x86-64 twins
 * (section 12), which compute the same bits; kernels() is the table chosen for this CPU. */
typedef float (*DotFn)(const void *w, const void *a, int64_t n);
/* R <= MAX_ROWS activation rows at once against one weight row (matmul_rows, section 8) */
typedef void (*DotRowsFn)(const void *w, const void *a, size_t stride, int R, int64_t n, float *out);
/* four weight rows, spacing bytes apart, against R <= W4_MAX_ROWS activation rows, stride bytes
 * apart (decoding: one; an expert's rows in a verify batch: a few): out[4 r + i] =
 * dot(w + i spacing, a + r stride, n), bit for bit. Where a row's dot is one chain of dependent float
 * operations (Q8_0, Q4_0), four rows are four chains that overlap; where a block's integer sum
 * must be reduced alone (repacked Q4_0, Q4_K), four rows' sums are reduced together. */
typedef void (*DotW4Fn)(const void *w, size_t spacing, const void *a, size_t stride, int R, int64_t n, float *out);
/* eight weight rows (row_bytes apart) against R <= MAX_ROWS rows of a packed group (BlockQ8_0x8):
 * y[r ystride + i] = dot(w + i row_bytes, activation row r, n), bit for bit (prompt and verify
 * batches, where the weights are repacked by llama.cpp) */
typedef void (*DotTileFn)(const void *w, size_t row_bytes, const void *a, int R, int64_t n, float *y, size_t ystride);
/* sixteen weight rows (row_bytes apart) against T <= TILE_T activation rows (stride bytes apart):
 * y[t ystride + i] = dot(w + i row_bytes, activation row t, n), bit for bit (prompt batches) */
typedef void (*DotGemm16Fn)(const void *w, size_t row_bytes, const void *a, size_t stride, int T, int64_t n, float *y, size_t ystride);
enum { K_F32, K_F32_TILE, K_F16, K_F16_TILE, K_BF16, K_BF16_TILE, K_Q8_0, K_Q4_0, K_Q4_0_8X8,
       K_Q4_K, K_Q4_K_8X8, K_Q4_K_8X8_GEMM, K_Q5_K, K_Q6_K, N_KERNELS };
typedef struct {
    DotFn dot[N_KERNELS];
    DotRowsFn dot_rows[N_KERNELS];   /* NULL: one activation row at a time (all plain kernels) */
    DotW4Fn dot_w4[N_KERNELS];       /* NULL: one weight row at a time */
    DotTileFn dot_tile[N_KERNELS];   /* NULL: one weight row at a time */
    DotGemm16Fn dot_gemm16[N_KERNELS];   /* NULL: one weight row at a time */
    void (*quantize_q8_0)(const float *x, BlockQ8_0 *y, int64_t n);
    void (*quantize_q8_K)(const float *x, BlockQ8_K *y, int64_t n);
    double (*exp_sum)(float *x, int n, float max);
    void (*softmax)(float *x, int n);
    void (*silu_row)(float *y, const float *x, int n);
    void (*gdn_conv)(const float *w, int d_conv, int C, const float *ring, const float *u, int T, int ch0, int ch1, float *y);
    void (*delta_rule)(float *S, const float *q, const float *k, const float *v, float g, float beta, int d, float *o);
    void (*round_row_as)(uint32_t type, float *p, int n);
    void (*attn_v_sum)(uint32_t type, const uint8_t *V, size_t vstride, const float *p, int n, int lanes, int hd, float *acc, float *o);
    /* flash attention (section 9) */
    void (*to_f16)(uint16_t *y, const float *x, int n);
    void (*fa_tile)(uint32_t k_type, const uint8_t *K, size_t kstride, uint32_t v_type, const uint8_t *V, size_t vstride, int nt, int hd,
                    float *kt, float *vf);
    void (*fa_scores)(const float *q, size_t qstride, int nh, const float *kt, int nt, int hd, float *s);
    void (*fa_mad_keys)(float *acc, int nh, const float *vf, const float *p, int nt, int hd);
    void (*fa_kdots16)(const uint16_t *q, int G, const uint8_t *K, size_t kstride, int nt, int hd, float *s);
    void (*fa_mad)(float *y, uint32_t type, const void *v, float w, int n);
    void (*fa_mad16_keys)(uint16_t *y, int G, uint32_t type, const uint8_t *V, size_t vstride, const float *ms, const float *vs, int nt, int n);
} Kernels;
static const Kernels *kernels(void);   /* section 12 */

/* quantize_row with the chosen kernels: the Q8_0 and Q8_K rounding have SIMD twins */
static void round_row(uint32_t wtype, const float *x, void *y, int64_t n) {
    switch (dot_type(wtype)) {
    case T_Q8_0: kernels()->quantize_q8_0(x, y, n); break;
    case T_Q8_K: kernels()->quantize_q8_K(x, y, n); break;
    default: quantize_row(wtype, x, y, n);
    }
}

/* n_rows: the matrix's row count; llama.cpp repacks Q4_0 and Q4_K matrices whose row count is a
 * multiple of 8 (ggml_repack_get_optimal_repack_type on AVX2), which changes their float order. */
static int dot_kernel(uint32_t wtype, bool tile, int64_t n_rows) {
    bool repacked = n_rows % 8 == 0;
    switch (wtype) {
    case T_F32: return tile ? K_F32_TILE : K_F32;
    case T_F16: return tile ? K_F16_TILE : K_F16;
    case T_BF16: return tile ? K_BF16_TILE : K_BF16;
    case T_Q8_0: return K_Q8_0;
    case T_Q4_0: return repacked ? K_Q4_0_8X8 : K_Q4_0;
    case T_Q4_K: return repacked ? K_Q4_K_8X8 : K_Q4_K;
    case T_Q5_K: return K_Q5_K;
    case T_Q6_K: return K_Q6_K;
    }
    fatal("internal: no dot product for type %u", wtype);
    return 0;
}

/* The dot product for weights of type wtype; tile: the order of a dense batch (see above). */
static DotFn dot_fn(uint32_t wtype, bool tile, int64_t n_rows) { return kernels()->dot[dot_kernel(wtype, tile, n_rows)]; }

/* Row order F32 (single rows, the GDN recurrence). */
static float dot_f32(const void *w, const void *a, int64_t n) { return kernels()->dot[K_F32](w, a, n); }

/* ============================================================================================== */
/* 6. The model: hyper-parameters and the one table of GGUF names                                 */
/* ============================================================================================== */
/* A weight matrix in the file: n_out rows of n_in values, row o at data + o*row_bytes. */
typedef struct {
    const uint8_t *data;
    uint32_t type;
    int64_t n_in, n_out;
    size_t row_bytes;
    const GGUFTensor *t;
} Mat;

/* Expert e of a stacked [n_expert][n_out][n_in] tensor. */
static Mat mat_expert(const Mat *m, int e) {
    Mat r = *m;
    r.data = m->data + (size_t)e * (size_t)m->n_out * m->row_bytes;
    return r;
}

typedef struct {
    char arch[16];             /* "qwen35moe" or "clover_moe": the prefix of every model key */
    int n_embd, n_layer, n_vocab, n_ctx_train;
    int n_head, n_head_kv, head_dim, n_rot;            /* gated full attention */
    float eps, rope_base, kq_scale;
    int n_expert, n_expert_used, n_ff, n_ff_shexp;     /* MoE */
    float expert_weights_scale;
    int d_conv, n_k_heads, n_v_heads, d_state;         /* Gated DeltaNet: head dim d_state for k and v */
    int key_dim, value_dim, conv_dim;                  /* n_k_heads*d_state, n_v_heads*d_state, 2*key+value */
    int mask_id;                                       /* -1 when the file has none */
    int block_size;                                    /* diffusion block; drafts are at most block_size-1 */
    bool shift_logits;
    float coreset_top_p;
} Config;

typedef struct {
    bool recurrent;                       /* GDN layer (else gated full attention) */
    float *attn_norm, *post_norm;
    /* Gated DeltaNet */
    Mat qkv, gate, beta, alpha, ssm_out;
    float *conv, *dt, *a, *ssm_norm;      /* conv: [conv_dim][d_conv], tap d_conv-1 is the current row */
    /* clover_moe preview extras (NULL / n_out 0 when absent) */
    float *conv_right, *a_rev, *dt_rev, *rev_mix;
    Mat alpha_rev, beta_rev;
    /* gated attention */
    Mat wq, wk, wv, wo;
    float *q_norm, *k_norm;
    /* MoE with shared expert */
    Mat router, gate_exps, up_exps, down_exps, gate_shexp, up_shexp, down_shexp;
    float *shexp_gate;
} Layer;

typedef struct {
    GGUF file;
    Config c;
    Mat tok_embd, output;
    float *output_norm;
    Layer *layers;
} Model;

/* Dimensions a tensor's shape is checked against. */
typedef enum { D_NONE, D_EMBD, D_VOCAB, D_CONV, D_VALUE, D_VHEADS, D_DCONV, D_RIGHT, D_STATE, D_QG, D_KV,
               D_Q, D_HEAD, D_EXPERT, D_FF, D_FFSH } Dim;
static int64_t dim_size(const Config *c, Dim d) {
    switch (d) {
    case D_NONE: return 1;
    case D_EMBD: return c->n_embd;
    case D_VOCAB: return c->n_vocab;
    case D_CONV: return c->conv_dim;
    case D_VALUE: return c->value_dim;
    case D_VHEADS: return c->n_v_heads;
    case D_DCONV: return c->d_conv;
    case D_RIGHT: return c->d_conv - 1;
    case D_STATE: return c->d_state;
    case D_QG: return 2 * (int64_t)c->n_head * c->head_dim;
    case D_KV: return (int64_t)c->n_head_kv * c->head_dim;
    case D_Q: return (int64_t)c->n_head * c->head_dim;
    case D_HEAD: return c->head_dim;
    case D_EXPERT: return c->n_expert;
    case D_FF: return c->n_ff;
    case D_FFSH: return c->n_ff_shexp;
    }
    return 0;
}

typedef enum { IN_MODEL, IN_ALL, IN_GDN, IN_ATTN } Where;
typedef enum { REQUIRED, OPTIONAL, CLOVER_EXTRA } Need;   /* CLOVER_EXTRA: optional, read only for clover_moe (the preview pass) */
typedef enum { AS_MAT, AS_VEC } Kind;                /* matrix used in place, or small vector read as f32 */
typedef struct { const char *name; Where where; Need need; Kind kind; size_t field; Dim ne[3]; } TensorName;

/* Every tensor clover reads, with its shape (ggml order: ne[0] is the row length). When the official
 * clover_moe names are known, this table is the one place to change. */
static const TensorName TENSOR_NAMES[] = {
    {"token_embd.weight", IN_MODEL, REQUIRED, AS_MAT, offsetof(Model, tok_embd), {D_EMBD, D_VOCAB}},
    {"output_norm.weight", IN_MODEL, REQUIRED, AS_VEC, offsetof(Model, output_norm), {D_EMBD}},
    {"output.weight", IN_MODEL, OPTIONAL, AS_MAT, offsetof(Model, output), {D_EMBD, D_VOCAB}},
    {"blk.%d.attn_norm.weight", IN_ALL, REQUIRED, AS_VEC, offsetof(Layer, attn_norm), {D_EMBD}},
    {"blk.%d.post_attention_norm.weight", IN_ALL, REQUIRED, AS_VEC, offsetof(Layer, post_norm), {D_EMBD}},
    {"blk.%d.attn_qkv.weight", IN_GDN, REQUIRED, AS_MAT, offsetof(Layer, qkv), {D_EMBD, D_CONV}},
    {"blk.%d.attn_gate.weight", IN_GDN, REQUIRED, AS_MAT, offsetof(Layer, gate), {D_EMBD, D_VALUE}},
    {"blk.%d.ssm_beta.weight", IN_GDN, REQUIRED, AS_MAT, offsetof(Layer, beta), {D_EMBD, D_VHEADS}},
    {"blk.%d.ssm_alpha.weight", IN_GDN, REQUIRED, AS_MAT, offsetof(Layer, alpha), {D_EMBD, D_VHEADS}},
    {"blk.%d.ssm_conv1d.weight", IN_GDN, REQUIRED, AS_VEC, offsetof(Layer, conv), {D_DCONV, D_CONV}},
    {"blk.%d.ssm_dt.bias", IN_GDN, REQUIRED, AS_VEC, offsetof(Layer, dt), {D_VHEADS}},
    {"blk.%d.ssm_a", IN_GDN, REQUIRED, AS_VEC, offsetof(Layer, a), {D_VHEADS}},
    {"blk.%d.ssm_norm.weight", IN_GDN, REQUIRED, AS_VEC, offsetof(Layer, ssm_norm), {D_STATE}},
    {"blk.%d.ssm_out.weight", IN_GDN, REQUIRED, AS_MAT, offsetof(Layer, ssm_out), {D_VALUE, D_EMBD}},
    {"blk.%d.ssm_conv1d_right.weight", IN_GDN, CLOVER_EXTRA, AS_VEC, offsetof(Layer, conv_right), {D_RIGHT, D_CONV}},
    {"blk.%d.ssm_a_rev", IN_GDN, CLOVER_EXTRA, AS_VEC, offsetof(Layer, a_rev), {D_VHEADS}},
    {"blk.%d.ssm_dt_rev.bias", IN_GDN, CLOVER_EXTRA, AS_VEC, offsetof(Layer, dt_rev), {D_VHEADS}},
    {"blk.%d.ssm_alpha_rev.weight", IN_GDN, CLOVER_EXTRA, AS_MAT, offsetof(Layer, alpha_rev), {D_EMBD, D_VHEADS}},
    {"blk.%d.ssm_beta_rev.weight", IN_GDN, CLOVER_EXTRA, AS_MAT, offsetof(Layer, beta_rev), {D_EMBD, D_VHEADS}},
    {"blk.%d.ssm_rev_mix", IN_GDN, CLOVER_EXTRA, AS_VEC, offsetof(Layer, rev_mix), {D_VHEADS}},
    {"blk.%d.attn_q.weight", IN_ATTN, REQUIRED, AS_MAT, offsetof(Layer, wq), {D_EMBD, D_QG}},
    {"blk.%d.attn_k.weight", IN_ATTN, REQUIRED, AS_MAT, offsetof(Layer, wk), {D_EMBD, D_KV}},
    {"blk.%d.attn_v.weight", IN_ATTN, REQUIRED, AS_MAT, offsetof(Layer, wv), {D_EMBD, D_KV}},
    {"blk.%d.attn_q_norm.weight", IN_ATTN, REQUIRED, AS_VEC, offsetof(Layer, q_norm), {D_HEAD}},
    {"blk.%d.attn_k_norm.weight", IN_ATTN, REQUIRED, AS_VEC, offsetof(Layer, k_norm), {D_HEAD}},
    {"blk.%d.attn_output.weight", IN_ATTN, REQUIRED, AS_MAT, offsetof(Layer, wo), {D_Q, D_EMBD}},
    {"blk.%d.ffn_gate_inp.weight", IN_ALL, REQUIRED, AS_MAT, offsetof(Layer, router), {D_EMBD, D_EXPERT}},
    {"blk.%d.ffn_gate_exps.weight", IN_ALL, REQUIRED, AS_MAT, offsetof(Layer, gate_exps), {D_EMBD, D_FF, D_EXPERT}},
    {"blk.%d.ffn_up_exps.weight", IN_ALL, REQUIRED, AS_MAT, offsetof(Layer, up_exps), {D_EMBD, D_FF, D_EXPERT}},
    {"blk.%d.ffn_down_exps.weight", IN_ALL, REQUIRED, AS_MAT, offsetof(Layer, down_exps), {D_FF, D_EMBD, D_EXPERT}},
    {"blk.%d.ffn_gate_inp_shexp.weight", IN_ALL, REQUIRED, AS_VEC, offsetof(Layer, shexp_gate), {D_EMBD}},
    {"blk.%d.ffn_gate_shexp.weight", IN_ALL, REQUIRED, AS_MAT, offsetof(Layer, gate_shexp), {D_EMBD, D_FFSH}},
    {"blk.%d.ffn_up_shexp.weight", IN_ALL, REQUIRED, AS_MAT, offsetof(Layer, up_shexp), {D_EMBD, D_FFSH}},
    {"blk.%d.ffn_down_shexp.weight", IN_ALL, REQUIRED, AS_MAT, offsetof(Layer, down_shexp), {D_FFSH, D_EMBD}},
};
/* Metadata keys beyond "<arch>.*": the tokenizer and the diffusion extras. */
#define KEY_MASK_ID "tokenizer.ggml.mask_token_id"

static const GGUFTensor *find_tensor(const GGUF *f, const char *name) {
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (str_eq(f->tensors[i].name, name)) return &f->tensors[i];
    return NULL;
}

/* Claim tensor `name`, check its shape and type, and store it as a matrix or an f32 vector. */
static bool load_tensor(Model *m, const TensorName *tn, int il, void *base) {
    char name[96];
    snprintf(name, sizeof name, tn->name, il);
    GGUFTensor *t = (GGUFTensor *)find_tensor(&m->file, name);
    if (!t) {
        if (tn->need == REQUIRED) fatal("%s: tensor '%s' is missing; the file is incomplete or not a %s model", m->file.path, name, m->c.arch);
        return false;
    }
    int64_t want[4] = {dim_size(&m->c, tn->ne[0]), dim_size(&m->c, tn->ne[1]), dim_size(&m->c, tn->ne[2]), 1};
    if (memcmp(want, t->ne, sizeof want) != 0)
        fatal("%s: tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld, %lld] from the metadata",
              m->file.path, name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3],
              (long long)want[0], (long long)want[1], (long long)want[2]);
    if (!TYPES[t->type].supported)
        fatal("%s: tensor '%s' has type %s, which clover does not support (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K); requantize the file",
              m->file.path, name, TYPES[t->type].name);
    if ((uintptr_t)t->data % 4)
        fatal("%s: tensor '%s' data is misaligned", m->file.path, name);
    t->used = true;
    if (tn->kind == AS_MAT) {
        Mat *mat = (Mat *)((char *)base + tn->field);
        *mat = (Mat){t->data, t->type, t->ne[0], t->ne[1], row_bytes(t->type, t->ne[0]), t};
    } else {
        size_t n = (size_t)(t->ne[0] * t->ne[1]);
        float *v = xmalloc(mul_size(n, sizeof(float), name));
        dequant_row(t->type, t->data, v, (int64_t)n);
        *(float **)((char *)base + tn->field) = v;
    }
    return true;
}

static int model_int(const GGUF *f, const char *arch, const char *key, int64_t def, int64_t lo, int64_t hi) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    return (int)gguf_int(f, k, def, lo, hi);
}

static float model_float(const GGUF *f, const char *arch, const char *key, float def) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    return gguf_float(f, k, def);
}

static void read_config(Model *m) {
    const GGUF *f = &m->file;
    Config *c = &m->c;
    const GGUFKV *a = gguf_find(f, "general.architecture");
    if (!a || a->type != GGUF_STRING) fatal("%s: general.architecture is missing; not a model GGUF", f->path);
    if (!str_eq(a->strings[0], "qwen35moe") && !str_eq(a->strings[0], "clover_moe"))
        fatal("%s: architecture '%s' is not supported (qwen35moe or clover_moe)", f->path, show(a->strings[0]));
    snprintf(c->arch, sizeof c->arch, "%s", str_eq(a->strings[0], "qwen35moe") ? "qwen35moe" : "clover_moe");
    const char *A = c->arch;
    const int64_t BIG = 1 << 20;
    int blocks = model_int(f, A, "block_count", -1, 1, 4096);
    int nextn = model_int(f, A, "nextn_predict_layers", 0, 0, blocks - 1);
    c->n_layer = blocks - nextn;
    c->n_embd = model_int(f, A, "embedding_length", -1, 1, BIG);
    c->n_ctx_train = model_int(f, A, "context_length", -1, 1, INT32_MAX);
    c->n_head = model_int(f, A, "attention.head_count", -1, 1, 4096);
    c->n_head_kv = model_int(f, A, "attention.head_count_kv", -1, 1, c->n_head);
    c->head_dim = model_int(f, A, "attention.key_length", -1, 1, 4096);
    if (model_int(f, A, "attention.value_length", c->head_dim, 1, 4096) != c->head_dim)
        fatal("%s: attention key_length and value_length differ; not supported", f->path);
    if (c->n_head % c->n_head_kv) fatal("%s: head_count %d is not a multiple of head_count_kv %d", f->path, c->n_head, c->n_head_kv);
    c->n_rot = model_int(f, A, "rope.dimension_count", c->head_dim, 2, c->head_dim);
    if (c->n_rot % 2) fatal("%s: rope.dimension_count %d must be even", f->path, c->n_rot);
    c->eps = model_float(f, A, "attention.layer_norm_rms_epsilon", 1e-6f);
    c->rope_base = model_float(f, A, "rope.freq_base", 1e7f);
    c->kq_scale = model_float(f, A, "attention.scale", 1.0f / sqrtf((float)c->head_dim));
    if (!(c->eps > 0 && c->eps < 1) || !(c->rope_base > 1) || !(c->kq_scale > 0))
        fatal("%s: rms epsilon, rope.freq_base or attention.scale out of range", f->path);
    c->n_expert = model_int(f, A, "expert_count", -1, 1, 65536);
    c->n_expert_used = model_int(f, A, "expert_used_count", -1, 1, c->n_expert);
    int n_ff = model_int(f, A, "feed_forward_length", 0, 0, BIG);
    c->n_ff = model_int(f, A, "expert_feed_forward_length", n_ff ? n_ff / c->n_expert_used : -1, 1, BIG);
    c->n_ff_shexp = model_int(f, A, "expert_shared_feed_forward_length", n_ff ? n_ff : c->n_ff, 1, BIG);
    c->expert_weights_scale = model_float(f, A, "expert_weights_scale", 0);
    c->d_conv = model_int(f, A, "ssm.conv_kernel", -1, 2, 64);
    c->d_state = model_int(f, A, "ssm.state_size", -1, 1, 4096);
    c->n_k_heads = model_int(f, A, "ssm.group_count", -1, 1, 4096);
    c->n_v_heads = model_int(f, A, "ssm.time_step_rank", -1, 1, 4096);
    int inner = model_int(f, A, "ssm.inner_size", -1, 1, BIG);
    if (inner != c->n_v_heads * c->d_state)
        fatal("%s: ssm.inner_size %d != time_step_rank %d x state_size %d (value and key head dims must match)", f->path, inner, c->n_v_heads, c->d_state);
    if (c->n_v_heads % c->n_k_heads) fatal("%s: ssm.time_step_rank %d is not a multiple of ssm.group_count %d", f->path, c->n_v_heads, c->n_k_heads);
    c->key_dim = c->n_k_heads * c->d_state;
    c->value_dim = inner;
    c->conv_dim = 2 * c->key_dim + c->value_dim;

    m->layers = xcalloc((size_t)c->n_layer, sizeof(Layer));
    char key[128];
    snprintf(key, sizeof key, "%s.attention.recurrent_layers", A);
    const GGUFKV *rl = gguf_find(f, key);
    int interval = model_int(f, A, "full_attention_interval", 4, 1, 4096);
    if (rl && (rl->type != GGUF_ARRAY || rl->arr_n < (uint64_t)c->n_layer)) fatal("%s: %s must be an array of %d flags", f->path, key, c->n_layer);
    for (int il = 0; il < c->n_layer; il++)
        m->layers[il].recurrent = rl ? gguf_arr_int(f, rl, (uint64_t)il) != 0 : (il + 1) % interval != 0;

    const GGUFKV *toks = gguf_array(f, "tokenizer.ggml.tokens", GGUF_STRING, true);
    if (toks->arr_n < 1 || toks->arr_n > INT32_MAX) fatal("%s: tokenizer.ggml.tokens has %llu entries", f->path, (unsigned long long)toks->arr_n);
    c->n_vocab = (int)toks->arr_n;
    c->mask_id = (int)gguf_int(f, KEY_MASK_ID, -1, -1, INT32_MAX);
    if (c->mask_id >= c->n_vocab) fatal("%s: %s = %d is not a token id (vocabulary has %d)", f->path, KEY_MASK_ID, c->mask_id, c->n_vocab);
    c->block_size = model_int(f, A, "diffusion.block_size", 32, 2, 4096);
    c->shift_logits = model_int(f, A, "diffusion.shift_logits", 0, 0, 1) != 0;
    c->coreset_top_p = model_float(f, A, "diffusion.coreset_top_p", 0);
    if (!(c->coreset_top_p >= 0 && c->coreset_top_p <= 1)) fatal("%s: diffusion.coreset_top_p must be in [0, 1]", f->path);
}

/* Read the hyper-parameters and claim every tensor of the parsed file m->file. */
static void model_init(Model *m) {
    read_config(m);
    const Config *c = &m->c;
    bool clover = strcmp(c->arch, "clover_moe") == 0;
    for (size_t i = 0; i < sizeof TENSOR_NAMES / sizeof TENSOR_NAMES[0]; i++) {
        const TensorName *tn = &TENSOR_NAMES[i];
        if (tn->need == CLOVER_EXTRA && !clover) continue;
        if (tn->where == IN_MODEL) { load_tensor(m, tn, 0, m); continue; }
        for (int il = 0; il < c->n_layer; il++) {
            Layer *L = &m->layers[il];
            if ((tn->where == IN_GDN && !L->recurrent) || (tn->where == IN_ATTN && L->recurrent)) continue;
            load_tensor(m, tn, il, L);
        }
    }
    if (!m->output.data) m->output = m->tok_embd;   /* tied head, as llama.cpp falls back */
    for (int il = 0; il < c->n_layer; il++) {        /* the reverse branch needs all five tensors */
        Layer *L = &m->layers[il];
        if (!(L->a_rev && L->dt_rev && L->rev_mix && L->alpha_rev.data && L->beta_rev.data)) L->a_rev = NULL;
    }
    /* one warning line for tensors we do not know (MTP layers past the trunk are known and skipped) */
    char list[512] = "";
    int unknown = 0;
    for (uint64_t i = 0; i < m->file.n_tensors; i++) {
        const GGUFTensor *t = &m->file.tensors[i];
        int blk;
        if (t->used || (sscanf(show(t->name), "blk.%d.", &blk) == 1 && blk >= c->n_layer)) continue;
        if (unknown++ < 8) snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", unknown > 1 ? ", " : "", show(t->name));
    }
    if (unknown) fprintf(stderr, "clover: warning: %d tensor%s not used by clover: %s%s\n", unknown, unknown > 1 ? "s" : "", list, unknown > 8 ? ", ..." : "");
}

static void model_load(Model *m, const char *path) {
    memset(m, 0, sizeof *m);
    gguf_open(&m->file, path);
    model_init(m);
}
/* ============================================================================================== */
/* 7. State, scratch and the context                                                              */
/* ============================================================================================== */
/* The committed state of one sequence after n_past tokens. Attention layers keep K and V rows per
 * position (f32, f16 or bf16: -ctk/-ctv); GDN layers keep the last d_conv-1 pre-conv rows (the conv
 * ring, oldest first) and one d_state x d_state matrix S_h per value head. S_h is stored
 * transposed, mem[j*d_state + i] = S_h[i][j] (i: key dim, j: value dim), so the loops over i are
 * contiguous. */
typedef struct {
    int n_ctx, n_past;
    uint32_t k_type, v_type;
    uint8_t **k, **v;    /* per attention layer: [n_ctx][n_head_kv*head_dim] */
    float **ring;        /* per GDN layer: [d_conv-1][conv_dim] */
    float **S;           /* per GDN layer: [n_v_heads][d_state*d_state] */
} State;

static size_t kv_bytes(const Config *c, uint32_t type, int n_ctx) {
    return mul_size(mul_size((size_t)n_ctx, (size_t)c->n_head_kv * c->head_dim, "KV cache"), TYPES[type].bytes, "KV cache");
}
static size_t ring_floats(const Config *c) { return (size_t)(c->d_conv - 1) * c->conv_dim; }
static size_t S_floats(const Config *c) { return (size_t)c->n_v_heads * c->d_state * c->d_state; }

/* What state_init will allocate, for the memory plan: KV rows of the attention layers, and the
 * conv ring and S of the GDN layers. */
static size_t kv_cache_bytes(const Model *m, int n_ctx, uint32_t k_type, uint32_t v_type) {
    size_t per_layer = add_size(kv_bytes(&m->c, k_type, n_ctx), kv_bytes(&m->c, v_type, n_ctx), "KV cache");
    size_t total = 0;
    for (int il = 0; il < m->c.n_layer; il++)
        if (!m->layers[il].recurrent) total = add_size(total, per_layer, "KV cache");
    return total;
}

static size_t gdn_state_bytes(const Model *m) {
    size_t per_layer = mul_size(add_size(ring_floats(&m->c), S_floats(&m->c), "GDN state"), sizeof(float), "GDN state");
    size_t total = 0;
    for (int il = 0; il < m->c.n_layer; il++)
        if (m->layers[il].recurrent) total = add_size(total, per_layer, "GDN state");
    return total;
}

static void state_init(State *s, const Model *m, int n_ctx, uint32_t k_type, uint32_t v_type) {
    const Config *c = &m->c;
    memset(s, 0, sizeof *s);
    s->n_ctx = n_ctx;
    s->k_type = k_type;
    s->v_type = v_type;
    s->k = xcalloc((size_t)c->n_layer, sizeof(uint8_t *));
    s->v = xcalloc((size_t)c->n_layer, sizeof(uint8_t *));
    s->ring = xcalloc((size_t)c->n_layer, sizeof(float *));
    s->S = xcalloc((size_t)c->n_layer, sizeof(float *));
    for (int il = 0; il < c->n_layer; il++) {
        if (m->layers[il].recurrent) {
            s->ring[il] = xcalloc(ring_floats(c), sizeof(float));
            s->S[il] = xcalloc(S_floats(c), sizeof(float));
        } else {
            s->k[il] = xmalloc_huge(kv_bytes(c, k_type, n_ctx));
            s->v[il] = xmalloc_huge(kv_bytes(c, v_type, n_ctx));
        }
    }
}

/* Store n floats rounded to a cache type, and read them back. */
static void store_as(uint32_t type, void *dst, const float *x, int n) {
    for (int i = 0; i < n; i++) {
        if (type == T_F32) ((float *)dst)[i] = x[i];
        else if (type == T_F16) ((uint16_t *)dst)[i] = fp32_to_fp16(x[i]);
        else ((uint16_t *)dst)[i] = fp32_to_bf16(x[i]);
    }
}

static float load_as(uint32_t type, const void *src, int i) {
    if (type == T_F32) return ((const float *)src)[i];
    if (type == T_F16) return fp16_to_fp32(((const uint16_t *)src)[i]);
    return bf16_to_fp32(((const uint16_t *)src)[i]);
}

/* x as it reads back after a round trip through a cache type (f32: unchanged). */
static float round_as(uint32_t type, float x) {
    if (type == T_F32) return x;
    uint16_t h;
    store_as(type, &h, &x, 1);
    return load_as(type, &h, 0);
}

/* Scratch for one batch of up to `cap` rows. */
typedef struct {
    int cap;
    float *x, *xn;                  /* residual stream and its normed copy [cap][n_embd] */
    float *qkv, *z;                 /* GDN: pre-conv rows u, output gate z */
    float *o, *o_normed;            /* GDN: delta-rule output o, RMSNorm(o_h) * ssm_norm * silu(z_h) [cap][value_dim] */
    float *beta_logit, *alpha;      /* GDN: W_beta a, W_alpha a [cap][n_v_heads] */
    float *beta, *g;                /* GDN: beta = sigmoid(W_beta a), log-decay g [cap][n_v_heads] */
    float *conv;                    /* GDN: q|k|v = SiLU(conv(u)), q and k heads L2-normed [cap][conv_dim] */
    float *qg, *kr, *vr;            /* attention: per head [q | gate], k, v */
    float *ao, *ao_gated;           /* attention: head outputs o_h, and o_h * sigmoid(gate_h) [cap][n_head*head_dim] */
    float *att;                     /* attention scores, [n_threads][n_ctx] */
    float *vacc;                    /* attention: the V sum's lane accumulators, [n_threads][64][head_dim] */
    float *fa;                      /* flash attention: the tiled path's tile and job states, or the split path's
                                       chunk results, [n_threads][fa_thread_floats] */
    float *router_logits, *probs;   /* MoE: W_router m and its softmax p [cap][n_expert] */
    float *w;                       /* MoE: the chosen experts' weights [cap][n_used] */
    int *sel;                       /* MoE: chosen experts [cap][n_used] */
    float *ge, *ue, *he;            /* MoE: gate, up, silu(gate)*up [cap*n_used][n_ff], by row j */
    float *ye;                      /* MoE: expert outputs [cap*n_used][n_embd], by row j */
    int *slot;                      /* MoE: row j of the pair (t, r), [cap][n_used] (see group_by_expert) */
    float *sh;                      /* shared expert output [cap][n_embd] */
    float *sh_logit;                /* shared expert gate logit [cap] */
    float *mix;                     /* [cap][n_embd] mixer / FFN output */
    uint8_t *xq;                    /* rounded activations for matmul and the FFNs */
    uint8_t *xq2;                   /* FFNs: the rounded input of gate, where its dot type is not up's */
    uint8_t *pack;                  /* matmul_rows' packed activations, [n_threads][packed_bytes(widest input)] */
    /* preview pass: a copy of the committed GDN state S, and the reverse branch */
    float *S, *S_rev, *beta_rev_logit, *alpha_rev, *beta_rev, *g_rev, *o_rev;
    bool *coreset;                  /* [n_expert] experts the block's rows may use */
} Scratch;

/* attention scores of one thread: n_ctx rounded up to whole groups of 16 (see attn_softmax) */
static size_t att_stride(int n_ctx) { return ((size_t)n_ctx + 15) & ~(size_t)15; }

static size_t packed_bytes(int64_t n);   /* matmul_rows' packed activations per thread (section 8) */
static size_t fa_thread_floats(const Config *c);   /* flash attention's per thread (section 9) */

/* The bytes scratch_init allocates (below; keep the two in step), for the memory plan: computed with
 * checked arithmetic, so that once the plan fits, scratch_init's own products cannot wrap. */
static size_t scratch_bytes(const Config *c, int cap, int n_ctx, int n_threads) {
    size_t T = (size_t)cap, K = (size_t)c->n_expert_used, ff = (size_t)(c->n_ff > c->n_ff_shexp ? c->n_ff : c->n_ff_shexp);
    size_t maxin = (size_t)c->n_embd;
    size_t ins[] = {(size_t)c->value_dim, (size_t)c->n_head * c->head_dim, (size_t)c->n_ff, (size_t)c->n_ff_shexp};
    for (int i = 0; i < 4; i++) if (ins[i] > maxin) maxin = ins[i];
    size_t per_row = 4 * (size_t)c->n_embd + 2 * (size_t)c->conv_dim + 4 * (size_t)c->value_dim + 8 * (size_t)c->n_v_heads +
                     4 * (size_t)c->n_head * c->head_dim + 2 * (size_t)c->n_head_kv * c->head_dim + 2 * (size_t)c->n_expert +
                     3 * K + 2 * K * (size_t)c->n_embd + 3 * K * ff + K * maxin + 1;
    size_t floats = mul_size(T, per_row, "scratch");
    floats = add_size(floats, mul_size((size_t)n_threads, att_stride(n_ctx), "attention scratch"), "scratch");
    floats = add_size(floats, mul_size((size_t)n_threads, 64 * (size_t)c->head_dim, "attention scratch"), "scratch");
    floats = add_size(floats, mul_size((size_t)n_threads, fa_thread_floats(c), "attention scratch"), "scratch");
    floats = add_size(floats, 2 * S_floats(c), "scratch");
    size_t bytes = add_size(mul_size(floats, 4, "scratch"), (size_t)c->n_expert, "scratch");
    return add_size(bytes, mul_size((size_t)n_threads, packed_bytes((int64_t)maxin), "scratch"), "scratch");
}

static void scratch_init(Scratch *s, const Config *c, int cap, int n_ctx, int n_threads) {
    size_t T = (size_t)cap, E = (size_t)c->n_embd, K = (size_t)c->n_expert_used;
    size_t maxin = (size_t)c->n_embd;
    size_t ins[] = {(size_t)c->value_dim, (size_t)c->n_head * c->head_dim, (size_t)c->n_ff, (size_t)c->n_ff_shexp};
    for (int i = 0; i < 4; i++) if (ins[i] > maxin) maxin = ins[i];
    s->cap = cap;
    s->x = xcalloc(T * E, 4);
    s->xn = xcalloc(T * E, 4);
    s->mix = xcalloc(T * E, 4);
    s->sh = xcalloc(T * E, 4);
    s->sh_logit = xcalloc(T, 4);
    s->qkv = xcalloc(T * (size_t)c->conv_dim, 4);
    s->conv = xcalloc(T * (size_t)c->conv_dim, 4);
    s->z = xcalloc(T * (size_t)c->value_dim, 4);
    s->o = xcalloc(T * (size_t)c->value_dim, 4);
    s->o_normed = xcalloc(T * (size_t)c->value_dim, 4);
    s->beta_logit = xcalloc(T * (size_t)c->n_v_heads, 4);
    s->alpha = xcalloc(T * (size_t)c->n_v_heads, 4);
    s->beta = xcalloc(T * (size_t)c->n_v_heads, 4);
    s->g = xcalloc(T * (size_t)c->n_v_heads, 4);
    s->qg = xcalloc(T * 2 * (size_t)c->n_head * c->head_dim, 4);
    s->ao = xcalloc(T * (size_t)c->n_head * c->head_dim, 4);
    s->ao_gated = xcalloc(T * (size_t)c->n_head * c->head_dim, 4);
    s->kr = xcalloc(T * (size_t)c->n_head_kv * c->head_dim, 4);
    s->vr = xcalloc(T * (size_t)c->n_head_kv * c->head_dim, 4);
    s->att = xcalloc(mul_size((size_t)n_threads, att_stride(n_ctx), "attention scratch"), 4);
    s->vacc = xcalloc(mul_size((size_t)n_threads, 64 * (size_t)c->head_dim, "attention scratch"), 4);
    s->fa = xcalloc(mul_size((size_t)n_threads, fa_thread_floats(c), "attention scratch"), 4);
    s->router_logits = xcalloc(T * (size_t)c->n_expert, 4);
    s->probs = xcalloc(T * (size_t)c->n_expert, 4);
    s->w = xcalloc(T * K, 4);
    s->sel = xcalloc(T * K, sizeof(int));
    s->slot = xcalloc(T * K, sizeof(int));
    s->xq2 = xcalloc(T * K * E, 4);
    s->ge = xcalloc(T * K * (size_t)(c->n_ff > c->n_ff_shexp ? c->n_ff : c->n_ff_shexp), 4);
    s->ue = xcalloc(T * K * (size_t)(c->n_ff > c->n_ff_shexp ? c->n_ff : c->n_ff_shexp), 4);
    s->he = xcalloc(T * K * (size_t)(c->n_ff > c->n_ff_shexp ? c->n_ff : c->n_ff_shexp), 4);
    s->ye = xcalloc(T * K * E, 4);
    s->xq = xcalloc(T * K * maxin, 4);
    s->pack = xcalloc((size_t)n_threads, packed_bytes((int64_t)maxin));
    s->S = xcalloc(S_floats(c), 4);
    s->S_rev = xcalloc(S_floats(c), 4);
    s->beta_rev_logit = xcalloc(T * (size_t)c->n_v_heads, 4);
    s->alpha_rev = xcalloc(T * (size_t)c->n_v_heads, 4);
    s->beta_rev = xcalloc(T * (size_t)c->n_v_heads, 4);
    s->g_rev = xcalloc(T * (size_t)c->n_v_heads, 4);
    s->o_rev = xcalloc(T * (size_t)c->value_dim, 4);
    s->coreset = xcalloc((size_t)c->n_expert, sizeof(bool));
}

/* Threads (the pool itself is in section 12): pool_run(pool, fn, arg) calls fn(arg, ith, nth) on
 * nth threads, the caller being thread 0, and returns when all are done; pool_use sets nth for the
 * tasks that follow (-t for single-token steps, -tb for batches). Work shared by the threads of one
 * task: items 0..n-1 go to whichever thread claims them next (work_next), so a thread that starts
 * late or is descheduled just takes fewer. Which thread computes an item, and when, changes no
 * result. A phase that reads what an earlier one wrote first waits until all of that phase's items
 * are done (work_wait): it waits for claimed work, never for a thread, so a thread that claimed
 * nothing holds nobody up. */
typedef struct Pool Pool;
typedef void (*TaskFn)(void *arg, int ith, int nth);
typedef struct { _Atomic int next, done; } Work;
static Pool *pool_new(int n_threads);
static void pool_use(Pool *p, int n_threads);   /* at most pool_new's n_threads */
static void pool_run(Pool *p, TaskFn fn, void *arg);
static int work_next(Work *w);
static void work_done(Work *w);
static void work_wait(Work *w, int n);

typedef struct Gpu Gpu;   /* the model, state and scratch on the device (clover.cu), behind gpu_* (section 15) */

typedef struct {
    Model *m;
    State st;
    Scratch sc;
    Gpu *gpu;                       /* -ngl: every layer on the GPU (NULL: the CPU); then st and sc hold only
                                       n_past / n_ctx and the host's embedding rows */
    Pool *pool;
    int n_threads, n_threads_batch;
    bool flash_attn;                /* -fa: attention as ggml's CPU flash-attention op computes it */
    int fa_threads;                 /* -t: the threads over which that op splits a decoding step's keys */
    bool tile_order;                /* dense matmuls add in batch (tile) order: prompt processing only;
                                       decoding and verification use row order, so that every row of
                                       a verify batch equals single-token decoding bit for bit */
    const char *dump_dir;           /* --dump-tensors: where intermediate activations go, or NULL */
    regex_t dump_filter;            /* --dump-filter: which names (default: all) */
    struct Dumps *dumps;            /* --dump-tensors: the files written so far, scratch (see dump_nd) */
    bool dump_preview;              /* the pass being dumped is a preview pass (names "preview.*") */
} Ctx;

/* ============================================================================================== */
/* 8. Matmul: weights times a batch of activation rows                                            */
/* ============================================================================================== */
enum { MAX_ROWS = 8 };   /* activation rows one multi-row kernel call takes (see below) */

/* A group of R <= MAX_ROWS Q8_0 activation rows as the multi-row kernels take them: block b of
 * every row in one record, the scales converted to float once (not once per weight row) and row
 * r's quants at qs[r], so that one pointer walks all the rows (scales past R are 0). Where the
 * build targets AVX512-VNNI the quants are stored plus PACK_OFFSET = 128, as unsigned bytes: its
 * vpdpbusd multiplies unsigned by signed bytes, and sum (a + 128) q = sum a q + 128 sum q, the
 * second term a property of the weight block alone (q8_0_packed_lanes_avx2). */
#if defined(__x86_64__) && defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define VNNI 1
#else
#define VNNI 0
#endif
/* ... and AVX-512 BW too: the K-quant kernels' 512-bit form (section 12) */
#if VNNI && defined(__AVX512BW__)
#define ZMM 1
#else
#define ZMM 0
#endif
/* ... and AMX (tile registers and their int8 products, Sapphire Rapids on): the sixteen-row Q4_K
 * and Q4_0 batch kernels' integer sums (section 12), where the kernel grants the tiles (choose_kernels) */
#if ZMM && defined(__AMX_TILE__) && defined(__AMX_INT8__)
#define AMX 1
#else
#define AMX 0
#endif
enum { PACK_OFFSET = VNNI ? 128 : 0 };
typedef struct { float d[MAX_ROWS]; int8_t qs[MAX_ROWS][32]; int16_t sum[MAX_ROWS]; } BlockQ8_0x8;   /* sum: of qs (before the offset) */

static void pack_q8_0_rows(const uint8_t *x, size_t stride, int R, int64_t n, BlockQ8_0x8 *p) {
    for (int64_t b = 0; b < n / 32; b++) {
        for (int r = 0; r < R; r++) {
            const BlockQ8_0 *y = (const BlockQ8_0 *)(x + (size_t)r * stride) + b;
            p[b].d[r] = fp16_to_fp32(y->d);
            memcpy(p[b].qs[r], y->qs, 32);
            int sum = 0;
            for (int i = 0; i < 32; i++) sum += y->qs[i];
            p[b].sum[r] = (int16_t)sum;   /* |sum| <= 32 x 128 */
            if (PACK_OFFSET)
                for (int i = 0; i < 32; i++) p[b].qs[r][i] ^= (int8_t)0x80;   /* + 128 modulo 256 */
        }
        for (int r = R; r < MAX_ROWS; r++) p[b].d[r] = 0, p[b].sum[r] = 0;
    }
}

/* Bytes of one activation row of n values rounded for weights of type wtype. */
static size_t rounded_bytes(uint32_t wtype, int64_t n) { return row_bytes(dot_type(wtype), n); }

/* Round T rows of x (n values each) for weights of type wtype into xq (stride bytes apart), the
 * rows shared among the threads; returns when all T are rounded. */
static void round_rows(Work *wk, uint32_t wtype, const float *x, int T, int64_t n, uint8_t *xq, size_t stride) {
    for (int t = work_next(wk); t < T; t = work_next(wk)) {
        round_row(wtype, x + (size_t)t * n, xq + (size_t)t * stride, n);
        work_done(wk);
    }
    work_wait(wk, T);
}

/* y[t*ystride + o] = dot(W[o], x[t]) for the output rows o in [o0, o1) and T rounded activation
 * rows x[t] (stride bytes apart); batch: a dense batch of prompt processing, in llama.cpp's order
 * for it. In tiles, so that the data a dot needs is in cache: TILE_T activation rows (in L2)
 * against TILE_O weight rows at a time (in L1), the weight rows read from memory once per TILE_T
 * activations (once for decoding). Where a kernel takes several activation rows at once, each
 * weight block is unpacked once for MAX_ROWS of them; Q8_0 activations are first packed into
 * `pack` (this thread's, packed_bytes(n_in)) by groups of MAX_ROWS. The order of tiles changes no
 * sum. */
enum { TILE_T = 64, TILE_O = 16 };
/* the sixteen-row kernels (DotGemm16Fn) gather their weights once per block: worth it from this
 * many activation rows on (the 256-bit Q4_K ones too: one thread, rows in L2, zen5 built for AVX2,
 * against the row kernels: 4 rows 1.14-1.15x, 8 rows 1.18-1.24x, 64 rows 1.40-1.56x) */
enum { GEMM16_MIN_ROWS = 4 };
/* Up to this many activation rows (an expert's rows in a verify batch, mostly: 16 rows choose about
 * 100 of 256 experts, a fifth of them for 2 or 3 rows) go through the four-weight-row kernels
 * (DotW4Fn), the rows against the four weight rows while they are in L1 (the K-quants unpack each
 * block once for them; a 16-row verify of the q4_k_m 32768 slice, zen5, 2 threads, 100 rounds:
 * 3.60-3.67 -> 3.48-3.50 s with that for Q4_K alone, against a row at a time): the kernels that
 * unpack a block once for several rows read adjacent weight rows in step, a pattern the
 * prefetchers follow badly (one thread, 200 expert gates of 512 x 2048 from memory, 2 rows:
 * Q4_K 24.4 -> 12.8 ms, Q4_0 22.8 -> 12.4, Q6_K 32.0 -> 15.7, Q8_0 25.8 -> 21.3; 3 rows: Q4_K
 * 32.9 -> 18.9, Q8_0 unchanged; from 4 rows on the block-sharing kernels win for Q8_0 and Q4_0,
 * from 6 for Q4_K). */
enum { W4_MAX_ROWS = 3 };

/* Where a weight row serves several activation rows, the dots take long enough per byte that the
 * hardware prefetcher (which stops at page boundaries) falls behind; the first pass over each row
 * asks for the bytes PREFETCH_BYTES ahead of it (a 16-row verify, zen4: 4-5% less CPU time). */
enum { PREFETCH_BYTES = 4096 };

/* a row's length of w's bytes from row + ahead on, as far as the matrix goes */
static void prefetch_ahead(const Mat *w, const uint8_t *row, size_t ahead) {
    const uint8_t *p = row + ahead, *end = w->data + (size_t)w->n_out * w->row_bytes;
    for (size_t b = 0; b < w->row_bytes && p + b < end; b += 64) __builtin_prefetch(p + b);
}

static size_t packed_bytes(int64_t n) { return (size_t)(TILE_T / MAX_ROWS) * (size_t)(n / 32) * sizeof(BlockQ8_0x8); }

static void matmul_rows(const Mat *w, bool batch, const uint8_t *xq, size_t stride, int T, float *y, size_t ystride,
                        int64_t o0, int64_t o1, uint8_t *pack) {
    /* llamafile_sgemm (tinyBLAS) takes a dense batch only when the row count is a multiple of 4
     * (tinyBLAS::matmul); other matrices (router rows, beta/alpha heads) use ggml_vec_dot_*. */
    bool tile = batch && T >= 2 && w->n_out % 4 == 0;
    int k = dot_kernel(w->type, tile, w->n_out), k4 = k;
    /* repacked Q4_K in a prompt batch of T > 3 rows: the first T - T % 4 rows go through the 4-row
     * gemm (ggml_gemm_q4_K_8x8_q8_K), the rest through gemv (forward_mul_mat_one_chunk, repack.cpp) */
    int T4 = 0;
    if (tile && T > 3 && w->type == T_Q4_K && w->n_out % 8 == 0) {
        k4 = K_Q4_K_8X8_GEMM;
        T4 = T - T % 4;
    }
    const DotRowsFn *rows_fns = kernels()->dot_rows;
    const DotFn *dot_fns = kernels()->dot;
    bool packed = rows_fns[k] && dot_type(w->type) == T_Q8_0 && T > 1;   /* (no T4 split for these) */
    size_t group_bytes = (size_t)(w->n_in / 32) * sizeof(BlockQ8_0x8);
    DotW4Fn w4 = T <= W4_MAX_ROWS ? kernels()->dot_w4[k] : NULL;
    if (w4 && o1 - o0 >= 4) {
        /* up to W4_MAX_ROWS activation rows: four weight rows at a time, a quarter of the range
         * apart, so that each is a sequential stream of its own (adjacent rows read in step defeat
         * the hardware prefetchers: measured here 10 GB/s against 25 for one row at a time), each
         * activation row against them while they are in L1; the rest below */
        int64_t q = (o1 - o0) / 4;
        for (int64_t o = o0; o < o0 + q; o++) {
            float out[4 * W4_MAX_ROWS];
            w4(w->data + (size_t)o * w->row_bytes, (size_t)q * w->row_bytes, xq, stride, T, w->n_in, out);
            for (int t = 0; t < T; t++)
                for (int i = 0; i < 4; i++) y[(size_t)t * ystride + o + i * q] = out[4 * t + i];
        }
        o0 += 4 * q;
    }
    for (int t0 = 0; t0 < T; t0 += TILE_T) {
        int t1 = t0 + TILE_T < T ? t0 + TILE_T : T;
        for (int t = t0; packed && t < t1; t += MAX_ROWS)
            pack_q8_0_rows(xq + t * stride, stride, t1 - t < MAX_ROWS ? t1 - t : MAX_ROWS, w->n_in,
                           (BlockQ8_0x8 *)(pack + (t - t0) / MAX_ROWS * group_bytes));
        /* each tile's outputs gather in yt and go to y a whole row of the tile at a time (64 bytes):
         * written value by value, the lines of a batch's rows, which lie a power of two apart in y
         * for most matrices (16 rows of 32768 logits: 128 KiB), fall in one cache set and are
         * evicted between writes. 16 rows of a Q6_K head of 32768 x 2048 from memory, one thread,
         * zen5: 12.1 -> 9.9 ms (7.3 with the weights in cache) */
        float yt[TILE_T * TILE_O];
        for (int64_t ob = o0; ob < o1; ob += TILE_O) {
            int64_t oe = ob + TILE_O < o1 ? ob + TILE_O : o1;
            /* sixteen weight rows at once against all the rows of the tile: those before T4, then the rest */
            int t = t0;
            DotGemm16Fn gemm16 = kernels()->dot_gemm16[k4], gemm16_rest = kernels()->dot_gemm16[k];
            int te = T4 < t1 ? T4 : t1;
            if (gemm16 && te - t >= GEMM16_MIN_ROWS && oe - ob == 16) {
                gemm16(w->data + (size_t)ob * w->row_bytes, w->row_bytes, xq + t * stride, stride, te - t, w->n_in,
                       yt + (size_t)(t - t0) * TILE_O, TILE_O);
                t = te;
            }
            if (gemm16_rest && t1 - t >= GEMM16_MIN_ROWS && oe - ob == 16) {
                gemm16_rest(w->data + (size_t)ob * w->row_bytes, w->row_bytes, xq + t * stride, stride, t1 - t, w->n_in,
                            yt + (size_t)(t - t0) * TILE_O, TILE_O);
                t = t1;
            }
            while (t < t1) {
                int kt = t < T4 ? k4 : k;
                DotRowsFn rows = rows_fns[kt];
                DotFn dot = dot_fns[kt];
                /* R rows of the same kernel: no group straddles T4 */
                int t_end = t < T4 && T4 < t1 ? T4 : t1, R = rows ? (t_end - t < MAX_ROWS ? t_end - t : MAX_ROWS) : 1;
                const uint8_t *x = packed ? pack + (t - t0) / MAX_ROWS * group_bytes : xq + t * stride;
                DotTileFn tile8 = packed && R > 1 ? kernels()->dot_tile[kt] : NULL;
                for (int64_t o = ob; o < oe; o++) {
                    const uint8_t *row = w->data + (size_t)o * w->row_bytes;
                    if (t == t0 && T > 1) prefetch_ahead(w, row, PREFETCH_BYTES);
                    /* the last pass over a tile of weight rows, which come from L1: ask for the next
                     * tile's row meanwhile, so that memory is not idle while the rows of a batch
                     * after the first reuse the tile (the K-quant row kernels; the packed Q8_0 ones
                     * prefetch within the row themselves). One thread, 16 rows of 200 expert-sized
                     * matrices from memory: Q6_K 61 -> 56.5 ms (51 in cache), Q5_K 78 -> 75, Q8_0
                     * unchanged. */
                    else if (!packed && t + R >= t1) prefetch_ahead(w, row, TILE_O * w->row_bytes);
                    if (tile8 && o + 8 <= oe) {   /* eight weight rows at once */
                        for (int i = 1; i < 8 && t == t0; i++) prefetch_ahead(w, row + i * w->row_bytes, PREFETCH_BYTES);
                        tile8(row, w->row_bytes, x, R, w->n_in, yt + (size_t)(t - t0) * TILE_O + (o - ob), TILE_O);
                        o += 7;
                        continue;
                    }
                    float out[MAX_ROWS];
                    if (R > 1) rows(row, x, stride, R, w->n_in, out);
                    else out[0] = dot(row, xq + t * stride, w->n_in);
                    for (int r = 0; r < R; r++) yt[(size_t)(t - t0 + r) * TILE_O + (o - ob)] = out[r];
                }
                t += R;
            }
            for (t = t0; t < t1; t++) memcpy(y + (size_t)t * ystride + ob, yt + (size_t)(t - t0) * TILE_O, (size_t)(oe - ob) * sizeof(float));
        }
    }
}

/* Output rows per work item when nth threads share n_rows rows of row_bytes each (of one or more
 * matrices): whole TILE_O blocks, up to CHUNKS_PER_THREAD items per thread (few claims, yet a late
 * thread leaves little to the others) but none under CHUNK_MIN_BYTES of weights where the matrix
 * allows (each item is a stream the prefetchers start anew: a decode step's shared expert, 1.8 MB a
 * layer in items of 37-73 KB, read at 40 GB/s where the experts read at 64) and none over CHUNK_BYTES
 * (so that the threads finish a large matrix within a small item of each other), at most max_rows
 * (one matrix). */
enum { CHUNKS_PER_THREAD = 8, CHUNK_MIN_BYTES = 1 << 18, CHUNK_BYTES = 1 << 20 };

static int64_t chunk_rows(int64_t n_rows, size_t row_bytes, int nth, int64_t max_rows) {
    int64_t per_thread = (int64_t)((double)n_rows * row_bytes / nth / CHUNK_MIN_BYTES);
    per_thread = per_thread < 1 ? 1 : per_thread > CHUNKS_PER_THREAD ? CHUNKS_PER_THREAD : per_thread;
    int64_t r = ((n_rows + nth * per_thread - 1) / (nth * per_thread) + TILE_O - 1) / TILE_O * TILE_O;
    int64_t cap = (int64_t)(CHUNK_BYTES / row_bytes) / TILE_O * TILE_O;
    if (r > cap) r = cap;
    if (r < TILE_O) r = TILE_O;
    return r < max_rows ? r : max_rows;
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

typedef struct {
    const Mat *w;
    const float *x;      /* T activation rows of n_in values */
    int T;
    bool batch;
    float *y;            /* y[t*n_out + o] */
    uint8_t *xq;         /* x rounded, stride bytes apart */
    size_t stride;
    uint8_t *pack;       /* per thread, packed_bytes(n_in) apart (matmul_rows) */
    Work round, rows;
} MatmulTask;

/* The threads round the T activation rows, then share the output rows in chunks. */
static void matmul_task(void *p, int ith, int nth) {
    MatmulTask *mt = p;
    const Mat *w = mt->w;
    round_rows(&mt->round, w->type, mt->x, mt->T, w->n_in, mt->xq, mt->stride);
    int64_t r = chunk_rows(w->n_out, w->row_bytes, nth, w->n_out);
    int n = (int)((w->n_out + r - 1) / r);
    for (int i = work_next(&mt->rows); i < n; i = work_next(&mt->rows))
        matmul_rows(w, mt->batch, mt->xq, mt->stride, mt->T, mt->y, (size_t)w->n_out, i * r, min64((i + 1) * r, w->n_out),
                    mt->pack + ith * packed_bytes(w->n_in));
}

/* y[t] = W x[t] for T rows of x (stride n_in) into y (stride n_out), on the context's threads and
 * scratch (the rounded activations and their packed groups), in the context's order (tile_order: a
 * dense batch of prompt processing, see matmul_rows). This and the SwiGLU FFN (section 9) are
 * where weights are multiplied. */
static void matmul(Ctx *ctx, const Mat *w, const float *x, int T, float *y) {
    MatmulTask mt = {w, x, T, ctx->tile_order, y, ctx->sc.xq, rounded_bytes(w->type, w->n_in), ctx->sc.pack, {0}, {0}};
    pool_run(ctx->pool, matmul_task, &mt);
}

/* ============================================================================================== */
/* 9. The forward pass                                                                            */
/* ============================================================================================== */
/* --dump-tensors hooks (section 11): dump(ctx, name, il, x, T, n) writes T rows of n floats as
 * <name>-<il>.bin (il < 0: <name>.bin), the name llama.cpp's graph callback gives the same value;
 * nothing happens unless --dump-tensors was given. */
static void dump(const Ctx *ctx, const char *name, int il, const float *x, int T, int n);
static void dump3(const Ctx *ctx, const char *name, int il, const float *x, int T, int n1, int n0);
static void dump_slice(const Ctx *ctx, const char *name, int il, const float *x, size_t stride, int T, int n1, int n0);
static void dump_state(const Ctx *ctx, const char *name, int il);   /* layer il's S, one block per batch */
/* values the math does not keep, recomputed from what it keeps (section 11) */
static void dump_a_softplus(const Ctx *ctx, int il, int T);
static void dump_gdn_conv(const Ctx *ctx, int il, int T);
static void dump_q_heads(const Ctx *ctx, const char *name, int il, int T);
static void dump_gates(const Ctx *ctx, int il, int T);
static void dump_routing(const Ctx *ctx, int il, int T);
static void dump_experts(const Ctx *ctx, int il, int T);
static void dump_shared_expert(const Ctx *ctx, int il, int T);

/* The two passes over a batch of rows: CAUSAL appends the rows to the state, each computed exactly
 * as if the tokens came one at a time; PREVIEW is the block-diffusion pass over a block
 * [id_last, MASK x n] (spec S2.2), which reads the state and never writes it. */
typedef enum { CAUSAL, PREVIEW } Pass;

/* --- primitives, as llama.cpp's CPU ops compute them ------------------------------------------ */
/* RMSNorm: y = x / sqrt(mean(x^2) + eps) * w; the sum of squares is accumulated in double. */
static void rmsnorm(float *y, const float *x, const float *w, int n, float eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)(x[i] * x[i]);
    float scale = 1.0f / sqrtf((float)(ss / n) + eps);
    for (int i = 0; i < n; i++) y[i] = x[i] * scale * w[i];
}

/* L2 norm: y = x / max(||x||, eps). */
static void l2norm(float *x, int n, float eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)(x[i] * x[i]);
    float scale = 1.0f / fmaxf(sqrtf((float)ss), eps);
    for (int i = 0; i < n; i++) x[i] *= scale;
}

/* exp as llama.cpp's vector code computes it (ggml_v_expf), used where llama.cpp uses it (SiLU and
 * softmax): exp(x) = 2^n p(b), n = round(x / ln 2), b = x - n ln 2 in two fused steps, p a degree-5
 * polynomial. It differs from libm's expf in the last bit now and then, and a last bit is enough to
 * flip the rounding of a later quantized activation. */
static float expf_ggml(float x) {
    const float r = 0x1.8p23f;                    /* adding and subtracting it rounds to an integer */
    float n = fmaf(x, 0x1.715476p+0f, r) - r;
    float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
    if (!(fabsf(n) <= 192)) return n <= 0 ? 0.0f : x + INFINITY;   /* NaN in (hostile weights): NaN out, no (int)NaN */
    float u = b * b;
    float p = fmaf(fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)), u,
                   fmaf(0x1.ffffecp-1f, b, 1.0f));
    return ldexpf(p, (int)n);
}

static float silu(float x) { return x / (1.0f + expf_ggml(-x)); }
static float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
static float softplus(float x) { return x > 20.0f ? x : logf(1.0f + expf(x)); }

/* x_j <- exp(x_j - max) for j < n, and their sum, as ggml_vec_soft_max_f32 computes them: whole
 * groups of 16 use expf_ggml and are summed by halving, each group's sum added in double; the tail
 * uses libm. */
static double exp_sum(float *x, int n, float max) {
    double sum = 0;
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        float g[16];
        for (int l = 0; l < 16; l++) g[l] = x[i + l] = expf_ggml(x[i + l] - max);
        sum += fold(g, 16);
    }
    for (; i < n; i++) { x[i] = expf(x[i] - max); sum += x[i]; }
    return sum;
}

/* softmax in place: subtract the max, exponentiate, normalise by a double-precision sum (exp_sum).
 * Twin: softmax_avx2. */
static void softmax(float *x, int n) {
    float max = -INFINITY;
    for (int i = 0; i < n; i++)   /* ggml_vec_max_f32's MAX(); fmaxf would be a libm call per score */
        if (x[i] > max) max = x[i];
    double sum = exp_sum(x, n, max);
    float inv = (float)(1.0 / sum);
    for (int j = 0; j < n; j++) x[j] *= inv;
}

/* y[i] = silu(x[i]) (y may be x; twin: silu_row_avx2) */
static void silu_row(float *y, const float *x, int n) {
    for (int i = 0; i < n; i++) y[i] = silu(x[i]);
}


/* NEOX rotary embedding on the first n_rot dims: pairs (i, i + n_rot/2) rotate by pos * base^(-2i/n_rot).
 * rope_angles: the cosines and sines of a position's n_rot/2 angles, the angle advanced by repeated
 * float multiplication, as ggml does (once a row: every head of the row turns by the same angles). */
static void rope_angles(int n_rot, int pos, float base, float *cs, float *sn) {
    float theta_scale = powf(base, -2.0f / n_rot), th = (float)pos;
    for (int i = 0; i < n_rot / 2; i++) {
        cs[i] = cosf(th), sn[i] = sinf(th);
        th *= theta_scale;
    }
}

static void rope(float *x, int n_rot, const float *cs, const float *sn) {
    int half = n_rot / 2;
    for (int i = 0; i < half; i++) {
        float x0 = x[i], x1 = x[i + half];
        /* rotate_pairs (ops.cpp): x0*cos - x1*sin and x0*sin + x1*cos, the first product fused */
        x[i] = fmaf(x0, cs[i], -(x1 * sn[i]));
        x[i + half] = fmaf(x0, sn[i], x1 * cs[i]);
    }
}

static void embed(const Model *m, int token, float *x) {
    const Mat *e = &m->tok_embd;
    dequant_row(e->type, e->data + (size_t)token * e->row_bytes, x, e->n_in);
}

/* --- Gated DeltaNet --------------------------------------------------------------------------- */
/* Depthwise causal conv (before SiLU) of T rows u_t, channels [ch0, ch1): over X = [ring | u],
 * the ring's d_conv-1 rows (oldest first) then the T rows, y_t[c] = sum_j w[c][j] X[t+j][c]; tap
 * d_conv-1 is u_t itself; wc: the taps [C][K]. Each channel is independent, so threads may take
 * channel ranges. Twin: gdn_conv_avx2. */
static void gdn_conv(const float *wc, int K, int C, const float *ring, const float *u, int T, int ch0, int ch1, float *y) {
    for (int t = 0; t < T; t++) {
        const float *X[64];   /* rows t .. t+K-1 of X (d_conv <= 64) */
        for (int j = 0; j < K; j++) X[j] = t + j < K - 1 ? ring + (size_t)(t + j) * C : u + (size_t)(t + j - (K - 1)) * C;
        for (int ch = ch0; ch < ch1; ch++) {
            const float *w = wc + (size_t)ch * K;
            /* ggml_compute_forward_ssm_conv_f32: sumf += s*c, which the C++ build contracts to fma */
            float s = 0;
            for (int j = 0; j < K; j++) s = fmaf(X[j][ch], w[j], s);
            y[(size_t)t * C + ch] = s;
        }
    }
}

/* The ring (K-1 rows of C) keeps the last K-1 rows of [ring | u]. */
static void gdn_ring_push(float *ring, const float *u, int T, int K, int C) {
    int R = K - 1, keep = R - T < 0 ? 0 : R - T;
    memmove(ring, ring + (size_t)(R - keep) * C, (size_t)keep * C * sizeof(float));
    memcpy(ring + (size_t)keep * C, u + (size_t)(T - (R - keep)) * C, (size_t)(R - keep) * C * sizeof(float));
}

/* SiLU over the d channels of block b of a post-conv row [q | k | v], then the L2 norm if the
 * block is a q or k head (b < n_qk = 2 n_k_heads). */
static void gdn_qk_norm_head(float *y, int b, int d, int n_qk, float eps) {
    float *yh = y + (size_t)b * d;
    kernels()->silu_row(yh, yh, d);
    if (b < n_qk) l2norm(yh, d, eps);
}

/* SiLU, then L2-normalise every q and k head of a post-conv row of C channels. */
static void gdn_qk_norm(float *y, int C, int d, int n_qk, float eps) {
    for (int b = 0; b < C / d; b++) gdn_qk_norm_head(y, b, d, n_qk, eps);
}

/* The gated delta rule for one value head and one row, on S (transposed, see State):
 *   S <- exp(g) S;  delta = beta (v - S^T k);  S <- S + k delta^T;  o = (S^T q) / sqrt(d)
 * Value head h reads q/k head h % n_k_heads (the GGUF's tiled head order). Twins: delta_rule_avx2,
 * delta_rule_zmm. */
static void delta_rule(float *S, const float *q, const float *k, const float *v, float g, float beta, int d, float *o) {
    float decay = expf(g), scale = 1.0f / sqrtf((float)d);
    for (int j = 0; j < d; j++) {
        float *Sj = S + (size_t)j * d;
        for (int i = 0; i < d; i++) Sj[i] *= decay;
        float delta = (v[j] - dot_f32(Sj, k, d)) * beta;
        for (int i = 0; i < d; i++) Sj[i] = fmaf(k[i], delta, Sj[i]);
        o[j] = dot_f32(Sj, q, d) * scale;
    }
}

typedef struct {
    const Config *c;
    float *S;                         /* [n_v_heads][d*d] */
    const float *y, *g, *beta;        /* post-conv rows [T][conv_dim], [T][n_v_heads] x2 */
    float *o;                         /* [T][value_dim] */
    int T;
    bool reverse;                     /* scan rows T-1 .. 0 from a zero state (the preview's reverse branch) */
    const float *S0;                  /* non-NULL: each head's state copied from here first (the preview's forward branch) */
} ScanTask;

/* The delta rule of value head h (of H) over T post-conv rows y [T][C] (q at kh*d, k at
 * key_dim + kh*d, v at 2*key_dim + h*d, kh = h % n_k_heads), in order or from row T-1 down:
 * S [H][d*d], g and beta [T][H], o [T][value_dim]. */
static void gdn_scan_head(float *S, const float *y, const float *g, const float *beta, float *o, int T, bool reverse,
                          int H, int n_k_heads, int d, int C, int key_dim, int value_dim, int h) {
    int kh = h % n_k_heads;
    for (int i = 0; i < T; i++) {
        int t = reverse ? T - 1 - i : i;
        const float *yt = y + (size_t)t * C;
        kernels()->delta_rule(S + (size_t)h * d * d, yt + (size_t)kh * d, yt + key_dim + (size_t)kh * d,
             yt + 2 * key_dim + (size_t)h * d, g[(size_t)t * H + h], beta[(size_t)t * H + h], d,
             o + (size_t)t * value_dim + (size_t)h * d);
    }
}

/* Heads are independent, so threads take heads and each runs its rows in order (setting the head's
 * start state first, where the scan does not continue S: in cache just before its rows use it).
 * A thread takes a contiguous range of heads: with heads taken in turn, each thread's prefetchers
 * ran on from its head's S (64 KiB) into the next, the other thread's (q4_k_m 32768, zen5, the
 * stage: prefill 62.6-64.1 -> 35.4-40.4 ms, decode step 0.195-0.221 -> 0.099-0.108, verify
 * 1.88-2.01 -> 1.25-1.33, preview 2.01-2.11 -> 1.42-1.64). */
static void gdn_scan_task(void *p, int ith, int nth) {
    const ScanTask *st = p;
    const Config *c = st->c;
    size_t head = (size_t)c->d_state * c->d_state;
    for (int h = c->n_v_heads * ith / nth; h < c->n_v_heads * (ith + 1) / nth; h++) {
        if (st->S0) memcpy(st->S + h * head, st->S0 + h * head, head * sizeof(float));
        else if (st->reverse) memset(st->S + h * head, 0, head * sizeof(float));
        gdn_scan_head(st->S, st->y, st->g, st->beta, st->o, st->T, st->reverse, c->n_v_heads, c->n_k_heads, c->d_state,
                      c->conv_dim, c->key_dim, c->value_dim, h);
    }
}

typedef struct {
    const Config *c;
    const Layer *L;
    const float *ring, *u;            /* conv ring before the batch, pre-conv rows [T][conv_dim] */
    float *y;                         /* post-conv rows [T][conv_dim] */
    int T;
    bool right;                       /* the preview: the right taps (L->conv_right) too, before the norms */
} ConvTask;

/* The preview's right taps: y_t[c] += sum_{d=1..K-1, t+d<T} wr[c][d-1] * u_{t+d}[c], over the
 * block's own later rows (before SiLU), for channels ch0..ch1-1 of C; wr: [C][K-1]. */
static void gdn_conv_right(const float *wr, int K, int C, const float *u, int T, int ch0, int ch1, float *y) {
    int R = K - 1;
    for (int t = 0; t < T; t++)
        for (int d = 1; d <= R && t + d < T; d++)
            for (int ch = ch0; ch < ch1; ch++)
                y[(size_t)t * C + ch] += wr[(size_t)ch * R + d - 1] * u[(size_t)(t + d) * C + ch];
}

/* gdn_conv (and the preview's right taps) and gdn_qk_norm for T rows: threads take blocks of
 * d_state channels (whole heads, so an L2 norm never spans two threads), a thread a contiguous
 * range of them (in a decoding step the taps and the ring come from memory: one stream a thread,
 * not blocks taken in turn: 0.06-0.11 -> 0.04-0.05 ms a step of q4_k_m 32768, zen5), every row of
 * a block in turn. Each channel's values are its own, so the blocks give the whole rows' bits. */
static void gdn_conv_task(void *p, int ith, int nth) {
    const ConvTask *ct = p;
    const Config *c = ct->c;
    int d = c->d_state;
    int nb = c->conv_dim / d;
    for (int b = nb * ith / nth; b < nb * (ith + 1) / nth; b++) {
        kernels()->gdn_conv(ct->L->conv, c->d_conv, c->conv_dim, ct->ring, ct->u, ct->T, b * d, (b + 1) * d, ct->y);
        if (ct->right) gdn_conv_right(ct->L->conv_right, c->d_conv, c->conv_dim, ct->u, ct->T, b * d, (b + 1) * d, ct->y);
        for (int t = 0; t < ct->T; t++) gdn_qk_norm_head(ct->y + (size_t)t * c->conv_dim, b, d, 2 * c->n_k_heads, c->eps);
    }
}

/* The recurrent part of a GDN layer for T rows of pre-conv input u: advances the conv ring and S
 * exactly as T single-token steps would, in one pool_run. Used by decoding, batches, and the
 * rollback replay. */
static void gdn_advance(Ctx *ctx, int il, int T, const float *u, const float *g, const float *beta) {
    const Config *c = &ctx->m->c;
    float *ring = ctx->st.ring[il], *y = ctx->sc.conv;
    ConvTask ct = {c, &ctx->m->layers[il], ring, u, y, T, false};
    pool_run(ctx->pool, gdn_conv_task, &ct);
    gdn_ring_push(ring, u, T, c->d_conv, c->conv_dim);
    ScanTask st = {c, ctx->st.S[il], y, g, beta, ctx->sc.o, T, false, NULL};
    pool_run(ctx->pool, gdn_scan_task, &st);
}

/* beta = sigmoid(W_beta x), g = softplus(W_alpha x + dt_bias) * a (a = -exp(A_log) < 0: g is a
 * log-decay), per value head; beta_logit = W_beta x, alpha = W_alpha x. */
static void gdn_gates(const float *a, const float *dt, const float *alpha, const float *beta_logit, int T, int H,
                      float *g, float *beta) {
    for (size_t i = 0; i < (size_t)T * H; i++) {
        int h = (int)(i % H);
        beta[i] = sigmoid(beta_logit[i]);
        g[i] = softplus(alpha[i] + dt[h]) * a[h];
    }
}

typedef struct {
    const Config *c;
    const Layer *L;
    const float *o, *z;
    float *y;         /* [T][value_dim] each */
    int T;
    Work rows;
} GatedNormTask;

/* One row of H value heads of d: y_h = rmsnorm(o_h) * w * silu(z_h) (w = ssm_norm, shared by all
 * heads); SiLU by the kernels' silu_row, 64 values at a time. */
static void gdn_gated_norm(const float *o, const float *z, const float *w, int H, int d, float eps, float *y) {
    for (int h = 0; h < H; h++) {
        size_t at = (size_t)h * d;
        float *yh = y + at;
        rmsnorm(yh, o + at, w, d, eps);
        for (int j0 = 0; j0 < d; j0 += 64) {
            float sz[64];
            int m = d - j0 < 64 ? d - j0 : 64;
            kernels()->silu_row(sz, z + at + j0, m);
            for (int j = 0; j < m; j++) yh[j0 + j] *= sz[j];
        }
    }
}

/* gdn_gated_norm over T rows; rows and heads are independent, so threads take rows, or, with fewer
 * rows than threads (decoding), parts of a row's heads: a decode step's 32 heads on one thread took
 * 50 us a layer. */
static void gdn_gated_norm_task(void *p, int ith, int nth) {
    (void)ith;
    GatedNormTask *gn = p;
    const Config *c = gn->c;
    int H = c->n_v_heads, parts = gn->T < nth ? nth : 1, per = (H + parts - 1) / parts;
    for (int job = work_next(&gn->rows); job < gn->T * parts; job = work_next(&gn->rows)) {
        int t = job / parts, h0 = job % parts * per, h1 = h0 + per < H ? h0 + per : H;
        size_t at = (size_t)t * c->value_dim + (size_t)h0 * c->d_state;
        if (h0 < h1) gdn_gated_norm(gn->o + at, gn->z + at, gn->L->ssm_norm, h1 - h0, c->d_state, c->eps, gn->y + at);
    }
}

/* The preview's mix of the reverse scan into the forward one: o[t][h*d+j] += gamma[h] o_rev[t][h*d+j]. */
static void gdn_rev_mix(float *o, const float *o_rev, const float *gamma, int T, int H, int d) {
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++)
            for (int j = 0; j < d; j++) {
                size_t i = ((size_t)t * H + h) * d + j;
                o[i] += gamma[h] * o_rev[i];
            }
}

/* Optional record of a batch's GDN inputs, so a partially accepted verify batch can be replayed. */
typedef struct {
    float **u, **g, **beta;           /* per GDN layer: [cap][conv_dim], [cap][n_v_heads] x2 */
} GdnLog;

/* The preview mixer (spec S2.4) over a block of T rows, never writing the committed state: the
 * causal conv over [ring | block] plus the right taps, a forward scan from a copy of S, and, when
 * the layer has it, a reverse scan from zero state mixed in per value head:
 * o_t = o_fwd_t + gamma_h * o_rev_t. */
static void gdn_preview(Ctx *ctx, const Layer *L, int il, int T) {
    const Config *c = &ctx->m->c;
    Scratch *s = &ctx->sc;
    ConvTask ct = {c, L, ctx->st.ring[il], s->qkv, s->conv, T, L->conv_right != NULL};
    pool_run(ctx->pool, gdn_conv_task, &ct);
    ScanTask fwd = {.c = c, .S = s->S, .y = s->conv, .g = s->g, .beta = s->beta, .o = s->o, .T = T, .S0 = ctx->st.S[il]};
    pool_run(ctx->pool, gdn_scan_task, &fwd);
    if (!L->a_rev) return;
    matmul(ctx, &L->beta_rev, s->xn, T, s->beta_rev_logit);
    matmul(ctx, &L->alpha_rev, s->xn, T, s->alpha_rev);
    gdn_gates(L->a_rev, L->dt_rev, s->alpha_rev, s->beta_rev_logit, T, c->n_v_heads, s->g_rev, s->beta_rev);
    ScanTask rev = {.c = c, .S = s->S_rev, .y = s->conv, .g = s->g_rev, .beta = s->beta_rev, .o = s->o_rev, .T = T, .reverse = true};
    pool_run(ctx->pool, gdn_scan_task, &rev);
    gdn_rev_mix(s->o, s->o_rev, L->rev_mix, T, c->n_v_heads, c->d_state);
}

/* A Gated DeltaNet layer (spec S1.4), the mixer output in s->mix. */
static void gdn_layer(Ctx *ctx, Pass pass, int il, int T, GdnLog *log) {
    const Config *c = &ctx->m->c;
    const Layer *L = &ctx->m->layers[il];
    Scratch *s = &ctx->sc;
    int H = c->n_v_heads, C = c->conv_dim, d = c->d_state;
    matmul(ctx, &L->qkv, s->xn, T, s->qkv);            /* u = W_qkv a */
    matmul(ctx, &L->gate, s->xn, T, s->z);             /* z = W_gate a */
    matmul(ctx, &L->beta, s->xn, T, s->beta_logit);    /* W_beta a */
    matmul(ctx, &L->alpha, s->xn, T, s->alpha);        /* W_alpha a */
    dump3(ctx, "beta", il, s->beta_logit, T, H, 1);
    dump(ctx, "alpha", il, s->alpha, T, H);
    gdn_gates(L->a, L->dt, s->alpha, s->beta_logit, T, H, s->g, s->beta);   /* beta, g */
    dump(ctx, "linear_attn_qkv_mixed", il, s->qkv, T, C);
    dump(ctx, "z", il, s->z, T, c->value_dim);
    dump3(ctx, "beta_sigmoid", il, s->beta, T, H, 1);
    dump_a_softplus(ctx, il, T);
    dump(ctx, "gate", il, s->g, T, H);
    if (log) {   /* the recurrence's inputs, for a replay (rollback) */
        memcpy(log->u[il], s->qkv, (size_t)T * C * sizeof(float));
        memcpy(log->g[il], s->g, (size_t)T * H * sizeof(float));
        memcpy(log->beta[il], s->beta, (size_t)T * H * sizeof(float));
    }
    if (pass == CAUSAL) {   /* conv over [ring | u], SiLU, L2 norms, the delta rule: ring and S advance */
        dump_gdn_conv(ctx, il, T);   /* conv_input .. k_conv and state_predelta, from the ring before it moves */
        gdn_advance(ctx, il, T, s->qkv, s->g, s->beta);
    } else gdn_preview(ctx, L, il, T);   /* the same over the block, plus right taps and the reverse scan */
    dump_slice(ctx, "q_conv_predelta", il, s->conv, C, T, c->n_k_heads, d);
    dump_slice(ctx, "k_conv_predelta", il, s->conv + c->key_dim, C, T, c->n_k_heads, d);
    dump_slice(ctx, "v_conv_predelta", il, s->conv + 2 * c->key_dim, C, T, H, d);
    if (pass == CAUSAL) dump_state(ctx, "new_state", il);
    dump3(ctx, "attn_output", il, s->o, T, H, d);
    GatedNormTask gn = {.c = c, .L = L, .o = s->o, .z = s->z, .y = s->o_normed, .T = T};
    pool_run(ctx->pool, gdn_gated_norm_task, &gn);   /* RMSNorm(o_h, ssm_norm) * SiLU(z_h) */
    dump(ctx, "final_output", il, s->o_normed, T, c->value_dim);
    matmul(ctx, &L->ssm_out, s->o_normed, T, s->mix);   /* out = W_out [...]_h */
    dump(ctx, "linear_attn_out", il, s->mix, T, c->n_embd);
}

/* --- gated attention -------------------------------------------------------------------------- */
/* How a batch's rows attend: without flash attention (-fa off) as llama.cpp's soft_max + mul_mat
 * graph does; with it, as one of the paths of ggml's CPU flash-attention op (below), chosen per
 * row: FA_TILED and FA_ROWS where llama.cpp's choice for a prompt batch is that path; FA_STEP (each
 * row as a single decoding step at its position computes it) everywhere else. */
typedef enum { FA_NONE, FA_TILED, FA_ROWS, FA_STEP } FaPath;

typedef struct {
    Ctx *ctx;
    int il, T, pos;
    const uint8_t *K, *V;    /* key/value rows for positions 0..n_keys-1 */
    uint32_t k_type, v_type;
    int n_keys;
    int causal_from;         /* row t sees keys < causal_from + t + 1 (causal), or all n_keys if < 0 */
    bool tile;               /* prompt batch: the V sum in tinyBLAS order */
    FaPath fa;
    Work *sync;              /* the threads' barrier between the split path's chunks and their merge */
} AttnTask;

/* soft_max_ext over one row of scores, as ggml_vec_soft_max_f32 sees it: llama.cpp's row spans the
 * whole (padded) cache with masked scores at -inf, so every aligned group of 16 goes through
 * ggml_v_expf and the halving sum; we pad our n scores the same way (x must hold n rounded up to 16). */
static void attn_softmax(float *x, int n) {
    int np = (n + 15) & ~15;
    for (int i = n; i < np; i++) x[i] = -INFINITY;
    kernels()->softmax(x, np);
}

/* p_j <- round_as(type, p_j) for j < n: the probabilities as the V sum's matmul rounds them
 * (twin: round_row_as_avx2) */
static void round_row_as(uint32_t type, float *p, int n) {
    for (int j = 0; j < n; j++) p[j] = round_as(type, p[j]);
}

/* kqv = mul_mat(V^T, kq) for one head: o[i] = sum_j p_j V_j[i] over keys j < n, i < hd, with V_j
 * at V + j*vstride in cache type `type`. llamafile tinyBLAS (a prompt batch) puts key j in lane
 * j % 16, ggml_vec_dot_f32 (one row) in lane j % 64, by fused multiply-adds; lanes are then folded
 * by halving, as fold() does. Masked positions add exact zeros in llama.cpp, so they are skipped.
 * acc holds the lanes x hd accumulators; each V row is read once, whole. Twin: attn_v_sum_avx2. */
static void attn_v_sum(uint32_t type, const uint8_t *V, size_t vstride, const float *p, int n, int lanes, int hd, float *acc, float *o) {
    memset(acc, 0, (size_t)lanes * hd * sizeof(float));
    for (int j = 0; j < n; j++) {
        const uint8_t *vrow = V + (size_t)j * vstride;
        float *a = acc + (size_t)(j % lanes) * hd;
        for (int i = 0; i < hd; i++) a[i] = fmaf(p[j], load_as(type, vrow, i), a[i]);
    }
    for (int w = lanes / 2; w >= 1; w /= 2)
        for (int l = 0; l < w; l++)
            for (int i = 0; i < hd; i++) acc[(size_t)l * hd + i] += acc[(size_t)(l + w) * hd + i];
    memcpy(o, acc, (size_t)hd * sizeof(float));
}

/* One head of one row: o = sum_j softmax_j(q.K_j * kq_scale) V_j over keys j < n, and og = o * sigmoid(gate).
 * K_j, V_j: the kv head's slice of cache row j (kstride, vstride bytes apart) in k_type / v_type. q is
 * rounded to the cache type before the dot and p before the V sum, as llama.cpp's matmuls do with an
 * f16/bf16 cache. sc: n rounded up to 16 scores; acc: the V sum's lanes x hd accumulators. */
static void attend(const float *q, const float *gate, const uint8_t *K, size_t kstride, uint32_t k_type, const uint8_t *V,
                   size_t vstride, uint32_t v_type, int n, int hd, float kq_scale, int lanes, float *sc, float *acc, float *o, float *og) {
    uint8_t qr[4 * 4096];   /* q in the cache type (head_dim <= 4096, model_config) */
    store_as(k_type, qr, q, hd);
    DotFn kdot = dot_fn(k_type, false, 1);
    for (int j = 0; j < n; j++) sc[j] = kdot(K + j * kstride, qr, hd) * kq_scale;
    attn_softmax(sc, n);
    kernels()->round_row_as(v_type, sc, n);
    kernels()->attn_v_sum(v_type, V, vstride, sc, n, lanes, hd, acc, o);
    for (int i = 0; i < hd; i++) og[i] = o[i] * sigmoid(gate[i]);
}

/* --- flash attention (-fa on) ----------------------------------------------------------------- */
/* ggml's CPU flash_attn_ext op (ggml_compute_forward_flash_attn_ext_f16) never forms a row of
 * probabilities: per row it keeps the running max M of the scores s_j = (q . K_j) * kq_scale, the
 * running sum S = sum_j exp(s_j - M) and the unnormalised output acc = sum_j exp(s_j - M) V_j,
 * rescaling S and acc by exp(M_old - M) when M grows (the online softmax), and divides by S once at
 * the end. K and V reach it as F16 or BF16: llama.cpp casts an F32 cache to F16 first, so an F32
 * cache computes what an F16 cache does. Which path computes a row depends on the batch:
 *   - per row (fa_chunk): any cache types; q rounded to K's type, the K dot of that type;
 *   - tiled (fa_tiled_rows): a batch of >= 64 rows with an F16 K and V (head_dim a multiple of 16);
 *   - split (fa_splits, fa_merge): a single row over >= 512 cache cells with an F16 K and V: the
 *     cells in one chunk per thread, merged in chunk order, so the bits depend on the thread count
 *     (-t). */
static uint32_t fa_type(uint32_t cache_type) { return cache_type == T_F32 ? T_F16 : cache_type; }

/* The op's vector steps, over rows of the cache as stored (F16, BF16, or F32 read as F16); each has
 * a twin in section 12. */
static float fa_load(uint32_t cache_type, const void *row, int i) {
    return cache_type == T_F32 ? round_as(T_F16, ((const float *)row)[i]) : load_as(cache_type, row, i);
}

/* y = x rounded to F16 (twin: to_f16_avx2) */
static void to_f16(uint16_t *y, const float *x, int n) {
    for (int i = 0; i < n; i++) y[i] = fp32_to_fp16(x[i]);
}

/* The tiled path reads a tile of nt <= 64 keys once for all the rows and query heads of a job
 * (fa_tiled_rows): the keys transposed, kt[d * 64 + t] = fa_load(K_t, d), so that a score's chain
 * runs down a column, columns nt..63 zero; and the values as floats, vf[t * hd + i] = fa_load(V_t, i).
 * Twin: fa_tile_avx2. */
static void fa_tile(uint32_t k_type, const uint8_t *K, size_t kstride, uint32_t v_type, const uint8_t *V, size_t vstride, int nt, int hd,
                    float *kt, float *vf) {
    for (int d = 0; d < hd; d++)
        for (int t = 0; t < 64; t++) kt[(size_t)d * 64 + t] = t < nt ? fa_load(k_type, K + (size_t)t * kstride, d) : 0;
    for (int t = 0; t < nt; t++)
        for (int i = 0; i < hd; i++) vf[(size_t)t * hd + i] = fa_load(v_type, V + (size_t)t * vstride, i);
}

/* s_t = q . K_t for the tile's first nt keys (kt: fa_tile's columns), for the queries of nh heads
 * (q, q + qstride, ...; their scores s, s + 64, ...): a plain fused chain over the dims from dim 0, q
 * in F32 (the tiled path's GEMM, simd_gemm). Twins: fa_scores_avx2 (a head's 64 keys in eight
 * registers, eight chains at once), fa_scores_zmm (two heads' in eight registers). */
static void fa_scores(const float *q, size_t qstride, int nh, const float *kt, int nt, int hd, float *s) {
    for (int h = 0; h < nh; h++)
        for (int t = 0; t < nt; t++) {
            float d = 0;
            for (int i = 0; i < hd; i++) d = fmaf(q[h * qstride + i], kt[(size_t)i * 64 + t], d);
            s[h * 64 + t] = d;
        }
}

/* s_gt = K_t . q_g for the nt F16 rows K_t = K + t kstride (bytes) and the G queries q_g = q + g hd,
 * rounded to F16 (their scores s + 64 g): the per-row path's K dot, each key in ggml_vec_dot_f16's
 * order (dot_f16_row). Twins: fa_kdots16_avx2, which converts q to floats once for the tile instead
 * of once a key, and fa_kdots16_zmm, which also converts each K row once for four heads and folds
 * the dots of 16 keys together. */
static void fa_kdots16(const uint16_t *q, int G, const uint8_t *K, size_t kstride, int nt, int hd, float *s) {
    for (int g = 0; g < G; g++)
        for (int t = 0; t < nt; t++) s[g * 64 + t] = dot_f16_row(K + (size_t)t * kstride, q + (size_t)g * hd, hd);
}

/* y_i = fma(v_i, w, y_i), an F32 accumulator (ggml_vec_mad_f32 after the V row's conversion: the
 * per-row path's V sum with a BF16 V). Twin: fa_mad_avx2. */
static void fa_mad(float *y, uint32_t type, const void *v, float w, int n) {
    for (int i = 0; i < n; i++) y[i] = fmaf(fa_load(type, v, i), w, y[i]);
}

/* acc_i = fma(v_ti, p_t, acc_i) over the tile's keys t < nt in turn (vf: fa_tile's rows), F32, for
 * nh heads (acc, acc + hd, ...; their weights p, p + 64, ...): the tiled path's V sum,
 * ggml_vec_mad_f32 key by key. Twins: fa_mad_keys_avx2 (64 values of a head at a time, held in
 * registers across the keys), fa_mad_keys_zmm (64 values of two heads). */
static void fa_mad_keys(float *acc, int nh, const float *vf, const float *p, int nt, int hd) {
    for (int h = 0; h < nh; h++)
        for (int t = 0; t < nt; t++)
            for (int i = 0; i < hd; i++) acc[(size_t)h * hd + i] = fmaf(vf[(size_t)t * hd + i], p[h * 64 + t], acc[(size_t)h * hd + i]);
}

/* y_i = fp16(fma(v_i, w, y_i)), an F16 accumulator (ggml_vec_mad_f16) */
static void fa_mad16(uint16_t *y, uint32_t type, const void *v, float w, int n) {
    for (int i = 0; i < n; i++) y[i] = fp32_to_fp16(fmaf(fa_load(type, v, i), w, fp16_to_fp32(y[i])));
}

/* y_i = fp16(y_i s), the F16 accumulator rescaled when the running max grows (ggml_vec_scale_f16) */
static void fa_scale16(uint16_t *y, float s, int n) {
    for (int i = 0; i < n; i++) y[i] = fp32_to_fp16(fp16_to_fp32(y[i]) * s);
}

/* The F16 accumulators of G heads (y + g n) over nt keys (rows V + t vstride), key by key as ggml's
 * loop takes them: a key with ms_gt != 1 raised head g's running max, y_g = fp16(y_g ms_gt); then
 * y_g = fp16(fma(v_t, vs_gt, y_g)) (ms_gt, vs_gt at ms + 64 g + t). Twins: fa_mad16_keys_avx2 and
 * fa_mad16_keys_zmm, which hold each group of values in a register across the keys instead of
 * storing it as F16 after every key (the order of each value's steps is the same); the zmm twin
 * also converts each group of V once for four heads. */
static void fa_mad16_keys(uint16_t *y, int G, uint32_t type, const uint8_t *V, size_t vstride, const float *ms, const float *vs, int nt, int n) {
    for (int g = 0; g < G; g++) {
        uint16_t *yg = y + (size_t)g * n;
        for (int t = 0; t < nt; t++) {
            if (ms[g * 64 + t] != 1) fa_scale16(yg, ms[g * 64 + t], n);
            fa_mad16(yg, type, V + (size_t)t * vstride, vs[g * 64 + t], n);
        }
    }
}

/* Scratch of one thread's flash attention for the G <= FA_HEADS query heads of a job, carved from
 * its V-sum accumulators (64 x head_dim floats): head g's rows at g * hd. */
enum { FA_HEADS = 16 };
typedef struct {
    float *acc;                    /* F32 outputs [G][hd] */
    uint16_t *acc16;               /* the F16 accumulators [G][hd] (F16 V) */
    uint16_t *qr;                  /* q rounded to K's type [G][hd] */
    uint16_t *krow;                /* an F32 cache's K row as F16 */
} FaScratch;

/* The per-row path (ggml's _one_chunk) for one head over keys [j0, j1): s_j = kdot(K_j, qr) *
 * scale in K's type; a new max M scales acc and S by ms = expf(M_old - M) and the key enters with
 * weight vs = 1, any other key with vs = expf(s_j - M) (libm's expf here, not ggml_v_expf); then
 * acc += vs V_j and S = S ms + vs. With an F16 V the accumulator is F16 and every update rounds
 * to F16 (ggml_vec_scale_f16, ggml_vec_mad_f16: fused, on AVX-512 and in their scalar tails); else
 * it is F32. Leaves the F32 acc (not yet divided by S), M and S. The keys go in tiles of 64: the
 * tile's dots (fa_kdots16 for an F16 K), scores and weights (ms = 1 for a key that did not raise
 * the max) first, then its V sum, so that the kernels see the whole tile (fa_mad16_keys).
 * Query heads h0..h0+G-1 go together (K, V: the cache's rows from kv head 0), each computed as it
 * would be alone: tile by tile, and in it kv head by kv head, the dots of that kv head's heads,
 * their scores and weights, then their V sums, so that each tile is read from memory once for all of them (a head at
 * a time, a step over 3000 keys read its K and V from L3 eight times over) and the kernels may
 * share a K or V row's conversion between the heads of a kv head. acc [G][hd], M and S [G]. */
static void fa_chunk(const AttnTask *at, const FaScratch *w, int h0, int G, const uint8_t *K, size_t kstride, const uint8_t *V, size_t vstride,
                     int j0, int j1, int hd, float *acc, float *M, float *S) {
    DotFn kdot = dot_fn(fa_type(at->k_type), false, 1);
    bool f16 = fa_type(at->v_type) == T_F16;
    const Config *c = &at->ctx->m->c;
    int group = c->n_head / c->n_head_kv;
    size_t k_head = (size_t)hd * TYPES[at->k_type].bytes, v_head = (size_t)hd * TYPES[at->v_type].bytes;
    float scale = c->kq_scale;
    for (int g = 0; g < G; g++) M[g] = -INFINITY, S[g] = 0;
    if (f16) memset(w->acc16, 0, (size_t)G * hd * sizeof(uint16_t));
    else memset(acc, 0, (size_t)G * hd * sizeof(float));
    for (int j = j0; j < j1; j += 64) {
        int nt = j1 - j < 64 ? j1 - j : 64;
        float ms[FA_HEADS * 64], vs[FA_HEADS * 64], dots[FA_HEADS * 64];   /* head g's at 64 g */
        for (int g0 = 0, g1; g0 < G; g0 = g1) {   /* the heads g0..g1-1 of kv head kvh */
            int kvh = (h0 + g0) / group;
            g1 = (kvh + 1) * group - h0 < G ? (kvh + 1) * group - h0 : G;
            const uint8_t *Kt = K + (size_t)j * kstride + kvh * k_head, *Vt = V + (size_t)j * vstride + kvh * v_head;
            if (at->k_type == T_F16) kernels()->fa_kdots16(w->qr + (size_t)g0 * hd, g1 - g0, Kt, kstride, nt, hd, dots + 64 * g0);
            else
                for (int g = g0; g < g1; g++)
                    for (int t = 0; t < nt; t++) {
                        const uint8_t *k = Kt + (size_t)t * kstride;
                        if (at->k_type == T_F32) {
                            kernels()->to_f16(w->krow, (const float *)k, hd);
                            k = (const uint8_t *)w->krow;
                        }
                        dots[g * 64 + t] = kdot(k, w->qr + (size_t)g * hd, hd);
                    }
            for (int g = g0; g < g1; g++)
                for (int t = 0; t < nt; t++) {
                    float s = dots[g * 64 + t] * scale, *ms_t = &ms[g * 64 + t], *vs_t = &vs[g * 64 + t];
                    *ms_t = 1, *vs_t = 1;
                    if (s > M[g]) {
                        *ms_t = expf(M[g] - s);
                        M[g] = s;
                    } else {
                        *vs_t = expf(s - M[g]);
                    }
                    float S_ms = S[g] * *ms_t;   /* rounded on its own, as ggml's build computes it: a statement apart, so no compiler fuses it */
                    S[g] = S_ms + *vs_t;
                }
            if (f16) kernels()->fa_mad16_keys(w->acc16 + (size_t)g0 * hd, g1 - g0, at->v_type, Vt, vstride, ms + 64 * g0, vs + 64 * g0, nt, hd);
            else
                for (int g = g0; g < g1; g++)
                    for (int t = 0; t < nt; t++) {
                        float *a = acc + (size_t)g * hd;
                        if (ms[g * 64 + t] != 1) for (int i = 0; i < hd; i++) a[i] *= ms[g * 64 + t];
                        kernels()->fa_mad(a, at->v_type, Vt + (size_t)t * vstride, vs[g * 64 + t], hd);
                    }
        }
    }
    if (f16) for (size_t i = 0; i < (size_t)G * hd; i++) acc[i] = fp16_to_fp32(w->acc16[i]);
}

/* The keys row t of a batch sees: the causal prefix, or all of them (the preview's block) */
static int fa_row_keys(const AttnTask *at, int t) { return at->causal_from < 0 ? at->n_keys : at->causal_from + t + 1; }

/* o = acc / S (S = 0: zeros) and og = o * sigmoid(gate): a head's output, from its online softmax */
static void fa_finish(const float *acc, float S, const float *gate, int hd, float *o, float *og) {
    float inv = S == 0 ? 0 : 1.0f / S;
    for (int i = 0; i < hd; i++) {
        o[i] = acc[i] * inv;
        og[i] = o[i] * sigmoid(gate[i]);
    }
}

/* The tiled path (ggml's _tiled; F16 K and V) for rows t0..t1-1 of the batch and the query heads of kv
 * head kvh (R = t1 - t0 <= FA_JOB_ROWS rows): the keys in tiles of 64 from key 0, each read once for
 * all of them (fa_tile). Each (row, head) keeps its running max M, sum S and acc (in w, after the
 * tile); per tile the scores s_j = (q . K_j) * scale by a plain fused chain over the dims in F32 (q
 * not rounded), the tile's max; if the running max grows, acc and S scale by expf(M_old - M); then
 * p_j = exp(s_j - M) and S += sum_j p_j as ggml_vec_soft_max_f32 computes them (exp_sum; S float, the
 * sum double), and acc += p_j V_j, a fused chain over the tile's keys. */
enum { FA_JOB_ROWS = 16 };
static size_t fa_tiled_floats(const Config *c) {   /* w's size: a tile, a row's scores, and the states of a job's rows */
    size_t group = (size_t)(c->n_head / c->n_head_kv);
    return 128 * (size_t)c->head_dim + 64 * group + FA_JOB_ROWS * group * ((size_t)c->head_dim + 2);
}
static void fa_tiled_rows(const AttnTask *at, float *w, int t0, int t1, int kvh) {
    const Config *c = &at->ctx->m->c;
    Scratch *s = &at->ctx->sc;
    int hd = c->head_dim, group = c->n_head / c->n_head_kv, kvd = c->n_head_kv * hd, jobs = (t1 - t0) * group;
    size_t kstride = (size_t)kvd * TYPES[at->k_type].bytes, vstride = (size_t)kvd * TYPES[at->v_type].bytes;
    const uint8_t *K = at->K + (size_t)kvh * hd * TYPES[at->k_type].bytes, *V = at->V + (size_t)kvh * hd * TYPES[at->v_type].bytes;
    float *kt = w, *vf = kt + 64 * (size_t)hd, *p = vf + 64 * (size_t)hd, *acc = p + 64 * (size_t)group, *M = acc + (size_t)jobs * hd,
          *S = M + jobs;
    float scale = c->kq_scale;
    memset(acc, 0, (size_t)jobs * hd * sizeof(float));
    for (int k = 0; k < jobs; k++) M[k] = -INFINITY, S[k] = 0;
    int n_all = fa_row_keys(at, t1 - 1);   /* the most keys a row of the job sees */
    for (int j0 = 0; j0 < n_all; j0 += 64) {
        kernels()->fa_tile(at->k_type, K + (size_t)j0 * kstride, kstride, at->v_type, V + (size_t)j0 * vstride, vstride,
                           n_all - j0 < 64 ? n_all - j0 : 64, hd, kt, vf);
        for (int t = t0; t < t1; t++) {   /* the kv head's query heads of row t, g = 0..group-1 */
            int n = fa_row_keys(at, t), k0 = (t - t0) * group;
            if (j0 >= n) continue;
            int nt = n - j0 < 64 ? n - j0 : 64;
            for (int i = 0; i < 64 * group; i++) p[i] = -INFINITY;
            kernels()->fa_scores(s->qg + (size_t)t * 2 * c->n_head * hd + (size_t)kvh * group * 2 * hd, 2 * (size_t)hd, group, kt, nt, hd, p);
            for (int g = 0; g < group; g++) {
                float *pg = p + 64 * g, tile_max = -INFINITY, *a = acc + (size_t)(k0 + g) * hd;
                for (int i = 0; i < nt; i++) {
                    pg[i] *= scale;
                    if (pg[i] > tile_max) tile_max = pg[i];
                }
                float M_new = fmaxf(M[k0 + g], tile_max);
                if (M_new > M[k0 + g]) {
                    float ms = expf(M[k0 + g] - M_new);
                    for (int i = 0; i < hd; i++) a[i] *= ms;
                    S[k0 + g] *= ms;
                }
                M[k0 + g] = M_new;
                S[k0 + g] = (float)(S[k0 + g] + kernels()->exp_sum(pg, 64, M[k0 + g]));
            }
            kernels()->fa_mad_keys(acc + (size_t)k0 * hd, group, vf, p, nt, hd);
        }
    }
    for (int k = 0; k < jobs; k++) {
        int t = t0 + k / group, h = kvh * group + k % group;
        size_t head = (size_t)t * c->n_head * hd + (size_t)h * hd;
        fa_finish(acc + (size_t)k * hd, S[k], s->qg + (size_t)t * 2 * c->n_head * hd + (size_t)h * 2 * hd + hd, hd, s->ao + head,
                  s->ao_gated + head);
    }
}

/* llama.cpp's KV cells for a step that sees n keys: the used cells rounded up to 256, at least 256
 * (llama_kv_cache::get_n_kv; never past the context, which llama.cpp also rounds up to 256). */
static int fa_cells(int n) { return n <= 256 ? 256 : (n + 255) / 256 * 256; }

/* The split path (F16 K and V; one row over n_kv >= 512 cells, n of them visible): the cells in nth
 * chunks of ceil(n_kv / nth), each by fa_chunk; whether row t takes it. */
static bool fa_splits(const AttnTask *at, int t) {
    return at->fa == FA_STEP && fa_type(at->k_type) == T_F16 && fa_type(at->v_type) == T_F16 && fa_cells(fa_row_keys(at, t)) >= 512;
}

/* A split row's head from its chunks' results (acc [hd], then M and S; chunks with no visible key
 * skipped), merged in chunk order: M' = max(M, M_c), acc = acc so + acc_c sn and S = S so + S_c sn
 * with so = expf(M - M'), sn = expf(M_c - M'), the first product fused. part: chunk 0's result,
 * chunk c's `stride` floats after it. */
static void fa_merge(const float *part, size_t stride, int n_chunks, int n, int n_kv, int hd, float *acc, float *M_out, float *S_out) {
    float M = -INFINITY, S = 0;
    memset(acc, 0, (size_t)hd * sizeof(float));
    int chunk = (n_kv + n_chunks - 1) / n_chunks;
    for (int c = 0; c < n_chunks; c++) {
        if (c * chunk >= n) continue;
        const float *r = part + (size_t)c * stride;
        float M_c = r[hd], S_c = r[hd + 1];
        float M_new = fmaxf(M, M_c), so = expf(M - M_new), sn = expf(M_c - M_new);
        for (int i = 0; i < hd; i++) acc[i] = fmaf(acc[i], so, r[i] * sn);
        S = fmaf(S, so, S_c * sn);
        M = M_new;
    }
    *M_out = M;
    *S_out = S;
}

/* s->fa, a thread's share: the tiled path's scratch, or the split path's results of a chunk of up to
 * FA_STEP_ROWS rows, n_head heads of hd + 2 floats each (see fa_merge), chunk c's in share c. */
enum { FA_STEP_ROWS = 16 };
static size_t fa_thread_floats(const Config *c) {
    size_t parts = (size_t)FA_STEP_ROWS * c->n_head * ((size_t)c->head_dim + 2);
    return parts > fa_tiled_floats(c) ? parts : fa_tiled_floats(c);
}

/* The keys [j0, j1) of row t that chunk ch of C holds: a split row's chunk of its cells (llama.cpp's
 * chunks, by the thread count; the last may hold few keys or none), else all of them in chunk 0 */
static void fa_job_keys(const AttnTask *at, int t, int ch, int C, int *j0, int *j1) {
    int n = fa_row_keys(at, t), chunk = fa_splits(at, t) ? (fa_cells(n) + C - 1) / C : ch == 0 ? n : 0;
    *j0 = ch * chunk < n ? ch * chunk : n;
    *j1 = *j0 + chunk < n ? *j0 + chunk : n;
}

/* Heads h0..h1-1 of row t (in rows t0.. of the batch) over chunk ch of C of the row's keys where it
 * takes the split path (else all of them, chunk 0): with flash attention by fa_chunk, finished into
 * ao and ao_gated, or, a split row's chunk, its results into s->fa (fa_merge); without, by attend
 * (sc: its scores). */
static void attend_heads(const AttnTask *at, const FaScratch *w, int t, int t0, int ch, int C, int h0, int h1, float *sc) {
    const Config *c = &at->ctx->m->c;
    Scratch *s = &at->ctx->sc;
    int hd = c->head_dim, kvd = c->n_head_kv * hd, group = c->n_head / c->n_head_kv, n = fa_row_keys(at, t);
    size_t kb = TYPES[at->k_type].bytes, vb = TYPES[at->v_type].bytes;
    const float *q = s->qg + (size_t)t * 2 * c->n_head * hd;   /* head h: q at 2 h hd, its gate hd after */
    float *o = s->ao + (size_t)t * c->n_head * hd, *og = s->ao_gated + (size_t)t * c->n_head * hd;
    if (at->fa == FA_NONE) {
        for (int h = h0; h < h1; h++)
            attend(q + (size_t)h * 2 * hd, q + (size_t)h * 2 * hd + hd, at->K + (size_t)(h / group) * hd * kb, (size_t)kvd * kb, at->k_type,
                   at->V + (size_t)(h / group) * hd * vb, (size_t)kvd * vb, at->v_type, n, hd, c->kq_scale, at->tile ? 16 : 64, sc, w->acc,
                   o + (size_t)h * hd, og + (size_t)h * hd);
        return;
    }
    bool split = fa_splits(at, t);
    int j0, j1;
    fa_job_keys(at, t, ch, C, &j0, &j1);
    if (j0 >= j1) return;
    float M[FA_HEADS], S[FA_HEADS];
    for (int h = h0; h < h1; h++) store_as(fa_type(at->k_type), w->qr + (size_t)(h - h0) * hd, q + (size_t)h * 2 * hd, hd);
    fa_chunk(at, w, h0, h1 - h0, at->K, (size_t)kvd * kb, at->V, (size_t)kvd * vb, j0, j1, hd, w->acc, M, S);
    for (int h = h0; h < h1; h++) {
        const float *a = w->acc + (size_t)(h - h0) * hd;
        if (!split) {
            fa_finish(a, S[h - h0], q + (size_t)h * 2 * hd + hd, hd, o + (size_t)h * hd, og + (size_t)h * hd);
            continue;
        }
        float *r = s->fa + (size_t)ch * fa_thread_floats(c) + ((size_t)(t - t0) * c->n_head + h) * (hd + 2);
        memcpy(r, a, (size_t)hd * sizeof(float));
        r[hd] = M[h - h0], r[hd + 1] = S[h - h0];
    }
}

/* For each (row t, head h), attend over the keys row t may see (GQA: head h reads kv head h / group).
 * The tiled path goes by jobs of up to FA_JOB_ROWS rows and one kv head, about four a thread, so that
 * each tile of keys is read once for the rows and query heads of a job (fa_tiled_rows). */
static void attn_task(void *p, int ith, int nth) {
    const AttnTask *at = p;
    const Config *c = &at->ctx->m->c;
    Scratch *s = &at->ctx->sc;
    int hd = c->head_dim;
    if (at->fa == FA_TILED) {
        int R = at->T * c->n_head_kv / (4 * nth);
        R = R < 1 ? 1 : R > FA_JOB_ROWS ? FA_JOB_ROWS : R;
        int blocks = (at->T + R - 1) / R;
        for (int job = ith; job < blocks * c->n_head_kv; job += nth) {
            int t0 = job / c->n_head_kv * R;
            fa_tiled_rows(at, s->fa + (size_t)ith * fa_thread_floats(c), t0, t0 + R < at->T ? t0 + R : at->T, job % c->n_head_kv);
        }
        return;
    }
    /* The other paths by rows, up to FA_STEP_ROWS at a time, in jobs of one row, one chunk of its
     * keys (the split path's, else all of them) and G of its heads, as many heads as leave every
     * thread a job, at most 4 where rows split. Each thread takes a run of the jobs in that order
     * holding about its share of their keys x heads: a split row's chunks are llama.cpp's, and the
     * last may hold far fewer keys than the others (at 544 keys and 2 threads, 384 and 160; with a
     * chunk a thread, one thread's attention took 2.4x the other's). So a thread mostly reads whole
     * rows of the cache (by kv head, each thread fetched its half of every row while the
     * prefetchers brought in the other half beside it). A split row's chunks are merged once every
     * thread is past its jobs. */
    float *vacc = s->vacc + (size_t)ith * 64 * hd;
    int barriers = 0;
    for (int t0 = 0; t0 < at->T; t0 += FA_STEP_ROWS) {
        int R = at->T - t0 < FA_STEP_ROWS ? at->T - t0 : FA_STEP_ROWS;
        bool any_split = fa_splits(at, t0 + R - 1);   /* (the last row sees the most keys) */
        int C = any_split && at->ctx->fa_threads > 1 ? at->ctx->fa_threads : 1;
        int P = (nth + R * C - 1) / (R * C), P_min = C > 1 ? (c->n_head + 3) / 4 : (c->n_head + FA_HEADS - 1) / FA_HEADS;
        P = P < P_min ? P_min : P > c->n_head ? c->n_head : P;
        int G = (c->n_head + P - 1) / P;
        uint16_t *acc16 = (uint16_t *)(vacc + (size_t)G * hd);
        FaScratch w = {vacc, acc16, acc16 + (size_t)G * hd, acc16 + 2 * (size_t)G * hd};
        int64_t work = 0, before = 0;   /* keys x heads: of all the jobs (a row's chunks hold its keys), of those before this one */
        for (int t = t0; t < t0 + R; t++) work += (int64_t)fa_row_keys(at, t) * c->n_head;
        for (int job = 0; job < R * C * P; job++) {
            int t = t0 + job / (C * P), ch = job / P % C, h0 = job % P * G, h1 = h0 + G < c->n_head ? h0 + G : c->n_head, j0, j1;
            fa_job_keys(at, t, ch, C, &j0, &j1);
            int64_t w_job = h1 > h0 ? (int64_t)(j1 - j0) * (h1 - h0) : 0;
            bool mine = (2 * before + w_job) * nth / (2 * work) == ith;   /* the job's middle in this thread's share */
            before += w_job;
            if (mine && w_job > 0) attend_heads(at, &w, t, t0, ch, C, h0, h1, s->att + (size_t)ith * att_stride(at->ctx->st.n_ctx));
        }
        if (!any_split) continue;
        work_done(at->sync);   /* every chunk's results written */
        work_wait(at->sync, nth * ++barriers);
        for (int job = ith; job < R * c->n_head; job += nth) {
            int t = t0 + job / c->n_head, h = job % c->n_head, n = fa_row_keys(at, t);
            if (!fa_splits(at, t)) continue;
            float M, S;
            size_t head = (size_t)t * c->n_head * hd + (size_t)h * hd;
            fa_merge(s->fa + ((size_t)(t - t0) * c->n_head + h) * (hd + 2), fa_thread_floats(c), C, n, fa_cells(n), hd, w.acc, &M, &S);
            fa_finish(w.acc, S, s->qg + (size_t)t * 2 * c->n_head * hd + (size_t)h * 2 * hd + hd, hd, s->ao + head, s->ao_gated + head);
        }
        work_done(at->sync);   /* the results read: the next rows may write theirs */
        work_wait(at->sync, nth * ++barriers);
    }
}

/* RMSNorm of every q head (in place inside qg, [T][n_head][q_h | gate_h]) and k head (in kr), with their own weights. */
static void attn_qk_norm(float *qg, float *kr, const float *q_norm, const float *k_norm, int T, int n_head, int n_head_kv, int hd, float eps) {
    for (int t = 0; t < T; t++) {
        for (int h = 0; h < n_head; h++) {
            float *q = qg + (size_t)t * 2 * n_head * hd + (size_t)h * 2 * hd;
            rmsnorm(q, q, q_norm, hd, eps);
        }
        for (int g = 0; g < n_head_kv; g++) {
            float *k = kr + ((size_t)t * n_head_kv + g) * hd;
            rmsnorm(k, k, k_norm, hd, eps);
        }
    }
}

/* RoPE of every q and k head, row t at position pos + t. */
static void attn_rope(float *qg, float *kr, int T, int pos, int n_head, int n_head_kv, int hd, int n_rot, float base) {
    float cs[2048], sn[2048];   /* n_rot / 2 <= head_dim / 2 (model_config) */
    for (int t = 0; t < T; t++) {
        rope_angles(n_rot, pos + t, base, cs, sn);
        for (int h = 0; h < n_head; h++) rope(qg + (size_t)t * 2 * n_head * hd + (size_t)h * 2 * hd, n_rot, cs, sn);
        for (int g = 0; g < n_head_kv; g++) rope(kr + ((size_t)t * n_head_kv + g) * hd, n_rot, cs, sn);
    }
}

/* A gated attention layer (spec S1.5), the mixer output in s->mix.
 * Causal: row t sees positions <= pos + t. Preview: the block's K/V go to the cache rows after the
 * committed prefix (scratch: nothing there is committed) and every row sees the whole prefix and
 * the whole block. */
static void attn_layer(Ctx *ctx, Pass pass, int il, int T, int pos) {
    const Config *c = &ctx->m->c;
    const Layer *L = &ctx->m->layers[il];
    Scratch *s = &ctx->sc;
    State *st = &ctx->st;
    int hd = c->head_dim, kvd = c->n_head_kv * hd;
    matmul(ctx, &L->wq, s->xn, T, s->qg);   /* [q_h | gate_h] = W_q a */
    matmul(ctx, &L->wk, s->xn, T, s->kr);   /* k = W_k a */
    matmul(ctx, &L->wv, s->xn, T, s->vr);   /* v = W_v a */
    dump(ctx, "Qcur_full", il, s->qg, T, 2 * c->n_head * hd);
    dump_q_heads(ctx, "Qcur_reshaped", il, T);
    dump_gates(ctx, il, T);   /* gate_reshaped, gate_sigmoid */
    dump(ctx, "Vcur", il, s->vr, T, kvd);
    attn_qk_norm(s->qg, s->kr, L->q_norm, L->k_norm, T, c->n_head, c->n_head_kv, hd, c->eps);
    dump_q_heads(ctx, "Qcur_normed", il, T);
    dump3(ctx, "Kcur_normed", il, s->kr, T, c->n_head_kv, hd);
    attn_rope(s->qg, s->kr, T, pos, c->n_head, c->n_head_kv, hd, c->n_rot, c->rope_base);
    dump_q_heads(ctx, "Qcur", il, T);
    dump3(ctx, "Kcur", il, s->kr, T, c->n_head_kv, hd);
    for (int t = 0; t < T; t++) {   /* K and V rows into the cache at their positions */
        store_as(st->k_type, st->k[il] + (size_t)(pos + t) * kvd * TYPES[st->k_type].bytes, s->kr + (size_t)t * kvd, kvd);
        store_as(st->v_type, st->v[il] + (size_t)(pos + t) * kvd * TYPES[st->v_type].bytes, s->vr + (size_t)t * kvd, kvd);
    }
    /* flash attention: a prompt batch (tile_order) takes llama.cpp's path for its row count;
     * decoding, verification and the preview compute each row as its own decoding step would */
    bool f16_kv = fa_type(st->k_type) == T_F16 && fa_type(st->v_type) == T_F16;
    FaPath fa = !ctx->flash_attn ? FA_NONE
              : !ctx->tile_order || pass == PREVIEW || T == 1 ? FA_STEP
              : T >= 64 && f16_kv && hd % 16 == 0 ? FA_TILED : FA_ROWS;
    Work sync = {0};
    AttnTask at = {ctx, il, T, pos, st->k[il], st->v[il], st->k_type, st->v_type, pos + T, pass == PREVIEW ? -1 : pos,
                   ctx->tile_order && T >= 2 && hd % 4 == 0, fa, &sync};
    pool_run(ctx->pool, attn_task, &at);   /* o_h = softmax(q_h . K / sqrt(d_h)) V, and o_h * sigmoid(gate_h) */
    dump(ctx, "attn_pregate", il, s->ao, T, c->n_head * hd);
    dump(ctx, "attn_gated", il, s->ao_gated, T, c->n_head * hd);
    matmul(ctx, &L->wo, s->ao_gated, T, s->mix);   /* out = W_o o */
    dump(ctx, "attn_output", il, s->mix, T, c->n_embd);
}

/* --- MoE --------------------------------------------------------------------------------------- */
/* Router: p = softmax(W_r m); take the n_used largest (ties to the lower expert), renormalise. */
static void route_top_k(const float *p, const bool *allowed, int n_expert, int k, float weights_scale, int *sel, float *w) {
    for (int r = 0; r < k; r++) {
        int best = -1;
        for (int e = 0; e < n_expert; e++) {
            if (allowed && !allowed[e]) continue;
            bool taken = false;
            for (int q = 0; q < r; q++) taken |= sel[q] == e;
            if (!taken && (best < 0 || p[e] > p[best])) best = e;
        }
        sel[r] = best;
        w[r] = best >= 0 ? p[best] : 0;
    }
    double total = 0;   /* ggml_sum_rows adds in double (ggml_vec_sum_f32) */
    for (int r = 0; r < k; r++) total += w[r];
    float sum = fmaxf((float)total, 6.103515625e-5f);   /* smallest normal fp16, llama.cpp's clamp */
    for (int r = 0; r < k; r++) {
        w[r] /= sum;
        if (weights_scale != 0 && weights_scale != 1) w[r] *= weights_scale;
    }
}

/* SwiGLU FFNs over groups of rows, in one pool_run. Group g (an expert, or the shared expert) owns
 * rows j in [first[g], first[g+1]) and has its own matrices:
 *   u_j = up_g x_j,   g_j = gate_g x_j,   h_j = silu(g_j) * u_j,   y_j = down_g h_j
 * Row j's input is one of the T rows of x: slot[t*M + m] = j for the M rows that read x[t] (-1:
 * none; slot NULL: M = 1 and row j = t). The phases, each waiting for the one before:
 *   round    each x[t] once, copied to its rows (up and gate share it where their dot types agree)
 *   up/gate  every group's output rows, in chunks
 *   h        per row, rounded for down
 *   down     every group's output rows, in chunks
 * All threads share every phase however the rows fall into groups: decoding's n_used experts of
 * one row each are as parallel as a prompt's hundreds of experts of a few rows. A row's dot
 * products are those of a matmul of its group's rows (the same kernels on the same inputs). */
typedef struct {
    const Mat *up, *gate, *down;     /* stacked [n_expert] tensors, group g using expert[g]; or, expert NULL, one each */
    const int *expert, *first;
    int n_groups;
    const float *x;                  /* [T][n_in] */
    int T, M;
    const int *slot;
    bool batch;                      /* a dense batch of prompt processing (the shared expert), see matmul_rows */
    float *u, *g, *h, *y;            /* per row j: [n_ff] x3, [n_out of down] */
    uint8_t *xu, *xg, *xh;           /* rounded inputs of up, gate (xu where the types agree), down (may be xu:
                                        written only once up and gate are done) */
    uint8_t *pack;                   /* per thread (matmul_rows) */
    struct { Work round, up_gate, act, down; } work;
} FfnTask;

static Mat ffn_mat(const FfnTask *f, const Mat *m, int g) { return f->expert ? mat_expert(m, f->expert[g]) : *m; }

/* x (n values) rounded for weights of type wtype into rows js[0..M-1] of xq (-1: none): rounded
 * once, then copied. */
static void round_to_rows(uint32_t wtype, const float *x, int64_t n, uint8_t *xq, size_t stride, const int *js, int M) {
    uint8_t *first = NULL;
    for (int m = 0; m < M; m++) {
        if (js[m] < 0) continue;
        uint8_t *row = xq + (size_t)js[m] * stride;
        if (first) memcpy(row, first, stride);
        else round_row(wtype, x, first = row, n);
    }
}

static void ffn_round(FfnTask *f) {
    int64_t n = f->up->n_in;
    for (int t = work_next(&f->work.round); t < f->T; t = work_next(&f->work.round)) {
        const int *js = f->slot ? f->slot + (size_t)t * f->M : &t;
        const float *x = f->x + (size_t)t * n;
        round_to_rows(f->up->type, x, n, f->xu, rounded_bytes(f->up->type, n), js, f->M);
        if (f->xg != f->xu) round_to_rows(f->gate->type, x, n, f->xg, rounded_bytes(f->gate->type, n), js, f->M);
        work_done(&f->work.round);
    }
    work_wait(&f->work.round, f->T);
}

/* Items: per group, the chunks of up's output rows, then those of gate's. */
static void ffn_up_gate(FfnTask *f, int ith, int nth) {
    int64_t F = f->up->n_out, r = chunk_rows(2 * F * f->n_groups, f->up->row_bytes, nth, F);
    int nch = (int)((F + r - 1) / r), n = 2 * nch * f->n_groups;
    for (int i = work_next(&f->work.up_gate); i < n; i = work_next(&f->work.up_gate)) {
        int g = i / (2 * nch), j0 = f->first[g];
        bool gate = i / nch % 2;
        int64_t o0 = i % nch * r;
        Mat w = ffn_mat(f, gate ? f->gate : f->up, g);
        size_t stride = rounded_bytes(w.type, w.n_in);
        matmul_rows(&w, f->batch, (gate ? f->xg : f->xu) + (size_t)j0 * stride, stride, f->first[g + 1] - j0,
                    (gate ? f->g : f->u) + (size_t)j0 * F, (size_t)F, o0, min64(o0 + r, F), f->pack + ith * packed_bytes(w.n_in));
        work_done(&f->work.up_gate);
    }
    work_wait(&f->work.up_gate, n);
}

/* h = silu(g) * u over n values */
static void swiglu(const float *g, const float *u, float *h, int64_t n) {
    for (int64_t i = 0; i < n; i++) h[i] = silu(g[i]) * u[i];
}

static void ffn_act(FfnTask *f) {
    int64_t F = f->up->n_out;
    size_t stride = rounded_bytes(f->down->type, F);
    int rows = f->first[f->n_groups];
    for (int j = work_next(&f->work.act); j < rows; j = work_next(&f->work.act)) {
        float *h = f->h + (size_t)j * F;
        swiglu(f->g + (size_t)j * F, f->u + (size_t)j * F, h, F);
        round_row(f->down->type, h, f->xh + (size_t)j * stride, F);
        work_done(&f->work.act);
    }
    work_wait(&f->work.act, rows);
}

static void ffn_down(FfnTask *f, int ith, int nth) {
    int64_t E = f->down->n_out, r = chunk_rows(E * f->n_groups, f->down->row_bytes, nth, E);
    int nch = (int)((E + r - 1) / r), n = nch * f->n_groups;
    size_t stride = rounded_bytes(f->down->type, f->down->n_in);
    for (int i = work_next(&f->work.down); i < n; i = work_next(&f->work.down)) {
        int g = i / nch, j0 = f->first[g];
        int64_t o0 = i % nch * r;
        Mat w = ffn_mat(f, f->down, g);
        matmul_rows(&w, f->batch, f->xh + (size_t)j0 * stride, stride, f->first[g + 1] - j0, f->y + (size_t)j0 * E,
                    (size_t)E, o0, min64(o0 + r, E), f->pack + ith * packed_bytes(w.n_in));
    }
}

static void ffn_task(void *p, int ith, int nth) {
    FfnTask *f = p;
    ffn_round(f);
    ffn_up_gate(f, ith, nth);
    ffn_act(f);
    ffn_down(f, ith, nth);
}

/* Scratch for the rounded input of gate: xq itself where up's rounding serves it too. */
static uint8_t *gate_input(const Scratch *s, const Mat *up, const Mat *gate) {
    return dot_type(up->type) == dot_type(gate->type) ? s->xq : s->xq2;
}

/* Pairs (t, r) routed to the same expert become consecutive rows of the expert buffers, so that an
 * expert's weights are read once for all its rows: group g, expert expert[g], owns rows
 * first[g]..first[g+1]-1, and slot[t*K + r] = j (-1 for rank -1). Returns the number of groups. */
static int group_by_expert(const Config *c, const int *sel, int T, int *first, int *expert, int *slot) {
    int n_pairs = T * c->n_expert_used, n = 0, j = 0;
    int next[c->n_expert];   /* rows per expert, then expert e's next row */
    for (int e = 0; e < c->n_expert; e++) next[e] = 0;
    for (int i = 0; i < n_pairs; i++)
        if (sel[i] >= 0) next[sel[i]]++;
    for (int e = 0; e < c->n_expert; e++) {
        if (!next[e]) continue;
        expert[n] = e;
        first[n] = j;
        j += next[e];
        next[e] = first[n++];
    }
    first[n] = j;
    for (int i = 0; i < n_pairs; i++) slot[i] = sel[i] >= 0 ? next[sel[i]]++ : -1;
    return n;
}

typedef struct {
    const Config *c;
    const int *slot;
    const float *w, *y;   /* [T][n_used] weights; expert outputs [rows][n_embd] */
    float *out;           /* [T][n_embd] */
    int T;
    Work rows;
} MoeSumTask;

/* One row: out = sum_r w_r y_slot[r] in rank order r = 0, 1, ... (a float sum depends on its order),
 * each term rounded to float before it is added (llama.cpp's ffn_moe_weighted, then the sum). Rank
 * -1 (a coreset smaller than n_used) adds nothing. slot, w: the row's K entries; y: [rows][E]. */
static void moe_sum(const int *slot, const float *w, const float *y, int K, int E, float *out) {
    memset(out, 0, (size_t)E * sizeof(float));
    for (int r = 0; r < K; r++) {
        if (slot[r] < 0) continue;
        const float *yr = y + (size_t)slot[r] * E;
        for (int i = 0; i < E; i++) {
            float term = yr[i] * w[r];
            out[i] += term;
        }
    }
}

static void moe_sum_task(void *p, int ith, int nth) {
    (void)ith, (void)nth;
    MoeSumTask *ms = p;
    int K = ms->c->n_expert_used, E = ms->c->n_embd;
    for (int t = work_next(&ms->rows); t < ms->T; t = work_next(&ms->rows))
        moe_sum(ms->slot + (size_t)t * K, ms->w + (size_t)t * K, ms->y, K, E, ms->out + (size_t)t * E);
}

/* Expert FFNs for T rows whose choices are in s->sel/s->w, then
 *   moe[t] = sum_r w_r * down_e(silu(gate_e m) * up_e m),  summed in rank order r = 0, 1, ... */
static void moe_experts(Ctx *ctx, const Layer *L, int T) {
    const Config *c = &ctx->m->c;
    Scratch *s = &ctx->sc;
    int first[c->n_expert + 1], expert[c->n_expert];
    int n_groups = group_by_expert(c, s->sel, T, first, expert, s->slot);
    FfnTask f = {.up = &L->up_exps, .gate = &L->gate_exps, .down = &L->down_exps, .expert = expert, .first = first,
                 .n_groups = n_groups, .x = s->xn, .T = T, .M = c->n_expert_used, .slot = s->slot, .batch = false,
                 .u = s->ue, .g = s->ge, .h = s->he, .y = s->ye, .xu = s->xq, .xg = gate_input(s, &L->up_exps, &L->gate_exps), .xh = s->xq,
                 .pack = s->pack};
    pool_run(ctx->pool, ffn_task, &f);
    MoeSumTask ms = {.c = c, .slot = s->slot, .w = s->w, .y = s->ye, .out = s->mix, .T = T};
    pool_run(ctx->pool, moe_sum_task, &ms);
}

/* One row: mix += sh * sigmoid(sh_logit) over E values */
static void moe_shared_gate(float *mix, const float *sh, float sh_logit, int E) {
    float gate = sigmoid(sh_logit);
    for (int i = 0; i < E; i++) mix[i] += sh[i] * gate;
}

/* Shared expert, gated by a sigmoid scalar: mix += sigmoid(g . m) * down(silu(gate m) * up m). */
static void moe_shared(Ctx *ctx, const Layer *L, int T) {
    const Config *c = &ctx->m->c;
    Scratch *s = &ctx->sc;
    int E = c->n_embd;
    int first[2] = {0, T};
    FfnTask f = {.up = &L->up_shexp, .gate = &L->gate_shexp, .down = &L->down_shexp, .expert = NULL, .first = first,
                 .n_groups = 1, .x = s->xn, .T = T, .M = 1, .slot = NULL, .batch = ctx->tile_order,
                 .u = s->ue, .g = s->ge, .h = s->he, .y = s->sh, .xu = s->xq, .xg = gate_input(s, &L->up_shexp, &L->gate_shexp), .xh = s->xq,
                 .pack = s->pack};
    pool_run(ctx->pool, ffn_task, &f);
    for (int t = 0; t < T; t++) {
        /* a one-row mul_mat: tinyBLAS declines it (rows % 4 != 0), so ggml_vec_dot_f32 order */
        s->sh_logit[t] = dot_f32(L->shexp_gate, s->xn + (size_t)t * E, E);
        moe_shared_gate(s->mix + (size_t)t * E, s->sh + (size_t)t * E, s->sh_logit[t], E);
    }
}

typedef struct {
    const Config *c;
    const float *logits;  /* [T][n_expert] router logits */
    float *p;             /* [T][n_expert] their softmax */
    const bool *allowed;  /* the coreset, or NULL */
    int *sel;
    float *w;             /* [T][n_used] each */
    int T;
    bool softmax, route;
    Work rows;
} RouteTask;

/* Per row: p = softmax(router logits), and/or choose its experts from p (route_top_k); rows are
 * independent, so threads take rows. */
static void route_task(void *p, int ith, int nth) {
    (void)ith, (void)nth;
    RouteTask *rt = p;
    const Config *c = rt->c;
    for (int t = work_next(&rt->rows); t < rt->T; t = work_next(&rt->rows)) {
        float *pt = rt->p + (size_t)t * c->n_expert;
        if (rt->softmax) {
            memcpy(pt, rt->logits + (size_t)t * c->n_expert, (size_t)c->n_expert * sizeof(float));
            kernels()->softmax(pt, c->n_expert);
        }
        if (rt->route)
            route_top_k(pt, rt->allowed, c->n_expert, c->n_expert_used, c->expert_weights_scale, rt->sel + (size_t)t * c->n_expert_used,
                        rt->w + (size_t)t * c->n_expert_used);
    }
}

/* Coreset routing (spec S2.5): sum the block rows' router probabilities, sort experts by the
 * sum (ties to the lower index), keep the shortest prefix whose sum reaches top_p * T. */
static void coreset(const float *p, int T, int n_expert, float top_p, bool *allowed) {
    int E = n_expert;
    double total[E];
    int order[E];
    for (int e = 0; e < E; e++) {
        total[e] = 0;
        for (int t = 0; t < T; t++) total[e] += p[(size_t)t * E + e];
        order[e] = e;
        allowed[e] = false;
    }
    for (int i = 1; i < E; i++)   /* insertion sort, stable: equal sums keep the lower index first */
        for (int j = i; j > 0 && total[order[j]] > total[order[j - 1]]; j--) {
            int tmp = order[j]; order[j] = order[j - 1]; order[j - 1] = tmp;
        }
    double cum = 0;
    for (int i = 0; i < E && cum < (double)top_p * T; i++) {
        allowed[order[i]] = true;
        cum += total[order[i]];
    }
}

/* The MoE FFN (spec S1.6), its output in s->mix: route each row to its
 * n_expert_used experts (in the preview, within the block's coreset), the experts, the shared expert. */
static void moe_layer(Ctx *ctx, Pass pass, int il, int T) {
    const Config *c = &ctx->m->c;
    const Layer *L = &ctx->m->layers[il];
    Scratch *s = &ctx->sc;
    matmul(ctx, &L->router, s->xn, T, s->router_logits);   /* W_router m */
    dump(ctx, "ffn_moe_logits", il, s->router_logits, T, c->n_expert);
    /* a coreset needs every row's probabilities before any row is routed */
    bool use_coreset = pass == PREVIEW && c->coreset_top_p > 0;
    RouteTask rt = {.c = c, .logits = s->router_logits, .p = s->probs, .sel = s->sel, .w = s->w, .T = T, .softmax = true, .route = !use_coreset};
    pool_run(ctx->pool, route_task, &rt);
    if (use_coreset) {
        coreset(s->probs, T, c->n_expert, c->coreset_top_p, s->coreset);
        RouteTask rc = {.c = c, .p = s->probs, .allowed = s->coreset, .sel = s->sel, .w = s->w, .T = T, .route = true};
        pool_run(ctx->pool, route_task, &rc);
    }
    dump(ctx, "ffn_moe_probs", il, s->probs, T, c->n_expert);
    dump_routing(ctx, il, T);   /* ffn_moe_topk, ffn_moe_weights[_sum[_clamped]]: route_top_k's steps */
    dump(ctx, "ffn_moe_weights_norm", il, s->w, T, c->n_expert_used);
    moe_experts(ctx, L, T);   /* mix = sum_r w_r down_e(SiLU(gate_e m) * up_e m) */
    dump_experts(ctx, il, T);   /* ffn_moe_gate, _up, _swiglu, _down, _weighted, by chosen slot */
    dump(ctx, "ffn_moe_out", il, s->mix, T, c->n_embd);
    moe_shared(ctx, L, T);    /* mix += sigmoid(g_sh . m) down_sh(SiLU(gate_sh m) * up_sh m) */
    dump_shared_expert(ctx, il, T);   /* ffn_gate .. ffn_shexp_gated */
    dump(ctx, "ffn_out", il, s->mix, T, c->n_embd);
}

/* --- the whole pass ---------------------------------------------------------------------------- */
/* Final norm and LM head for rows first..first+n-1 of the residual stream: logits [n][n_vocab]. */
static void lm_head(Ctx *ctx, int first, int n, float *logits) {
    const Config *c = &ctx->m->c;
    Scratch *s = &ctx->sc;
    for (int r = 0; r < n; r++)
        rmsnorm(s->xn + (size_t)r * c->n_embd, s->x + (size_t)(first + r) * c->n_embd, ctx->m->output_norm, c->n_embd, c->eps);
    dump(ctx, "result_norm", -1, s->xn, n, c->n_embd);
    matmul(ctx, &ctx->m->output, s->xn, n, logits);
    dump(ctx, "result_output", -1, logits, n, c->n_vocab);
}

/* Every layer over T <= cap tokens at positions n_past..n_past+T-1, leaving the residual stream in
 * s->x; log: where the causal pass records the GDN inputs (for the rollback), or NULL. */
static void forward_layers(Ctx *ctx, Pass pass, const int *tokens, int T, GdnLog *log) {
    const Config *c = &ctx->m->c;
    Scratch *s = &ctx->sc;
    int E = c->n_embd, pos = ctx->st.n_past;
    pool_use(ctx->pool, T == 1 ? ctx->n_threads : ctx->n_threads_batch);
    ctx->dump_preview = pass == PREVIEW;
    for (int t = 0; t < T; t++) embed(ctx->m, tokens[t], s->x + (size_t)t * E);
    dump(ctx, "model.input_embed", -1, s->x, T, E);
    for (int il = 0; il < c->n_layer; il++) {
        const Layer *L = &ctx->m->layers[il];
        for (int t = 0; t < T; t++) rmsnorm(s->xn + (size_t)t * E, s->x + (size_t)t * E, L->attn_norm, E, c->eps);
        dump(ctx, "attn_norm", il, s->xn, T, E);
        if (L->recurrent) gdn_layer(ctx, pass, il, T, log);
        else attn_layer(ctx, pass, il, T, pos);
        for (size_t i = 0; i < (size_t)T * E; i++) s->x[i] += s->mix[i];
        dump(ctx, "attn_residual", il, s->x, T, E);
        for (int t = 0; t < T; t++) rmsnorm(s->xn + (size_t)t * E, s->x + (size_t)t * E, L->post_norm, E, c->eps);
        dump(ctx, "attn_post_norm", il, s->xn, T, E);
        moe_layer(ctx, pass, il, T);
        for (size_t i = 0; i < (size_t)T * E; i++) s->x[i] += s->mix[i];
        dump(ctx, "l_out", il, s->x, T, E);
    }
}

/* The same pass on the GPU (section 15): the host looks up the embeddings, the device does the rest
 * (log: record the GDN inputs); logits of rows first..first+n_logits-1, or, token non-NULL (a greedy
 * decode step, a greedy verify batch), only the argmax of each of those rows; or, p_H non-NULL too
 * (a preview's drafts), each row's best_token without the mask, p_H[i] its p, p_H[n_logits + i] H. */
static void gpu_pass(Ctx *ctx, Pass pass, const int *tokens, int T, bool log, float *logits, int first, int n_logits, int *token,
                     float *p_H);
/* draft-self's save of the device's GDN state before a verify batch, and its rollback to the first
 * `rows` rows of that batch (clover.cu; no-ops in the CPU build, which never calls them) */
void gpu_gdn_save(Gpu *gpu);
void gpu_rollback(Gpu *gpu, int rows);

/* The causal pass: appends T tokens to the state, every row computed exactly as if the tokens were
 * fed one at a time (in decoding order; on the CPU, prompt prefill may use the batch order,
 * tile_order); logits of the last n_logits rows, [n_logits][n_vocab] (0: none). */
static void forward_causal(Ctx *ctx, const int *tokens, int T, float *logits, int n_logits) {
    if (ctx->gpu) gpu_pass(ctx, CAUSAL, tokens, T, false, logits, T - n_logits, n_logits, NULL, NULL);
    else {
        forward_layers(ctx, CAUSAL, tokens, T, NULL);
        if (n_logits > 0) lm_head(ctx, T - n_logits, n_logits, logits);
    }
    ctx->st.n_past += T;
}

/* draft-self's verification: the causal pass with every row's logits, the GDN inputs logged so
 * that a partly accepted batch can be rolled back and replayed (rollback). targets non-NULL (the
 * GPU, a greedy run with the exact rule): instead of the logits, each row's argmax, taken on the
 * device, so that T ids cross the bus instead of T x n_vocab floats. */
static void forward_verify(Ctx *ctx, const int *tokens, int T, float *logits, int *targets, GdnLog *log) {
    if (ctx->gpu) gpu_pass(ctx, CAUSAL, tokens, T, log != NULL, logits, 0, T, targets, NULL);
    else {
        forward_layers(ctx, CAUSAL, tokens, T, log);
        lm_head(ctx, 0, T, logits);
    }
    ctx->st.n_past += T;
}

/* The preview pass (spec S2.2) over a block of T rows after the committed prefix: reads the
 * state, never writes it; logits of every row. */
static void forward_preview(Ctx *ctx, const int *block, int T, float *logits) {
    if (ctx->gpu) gpu_pass(ctx, PREVIEW, block, T, false, logits, 0, T, NULL, NULL);
    else {
        forward_layers(ctx, PREVIEW, block, T, NULL);
        lm_head(ctx, 0, T, logits);
    }
}

/* ============================================================================================== */
/* 10. Decoding: plain steps, draft-self, block diffusion                                         */
/* ============================================================================================== */
/* How a run turns the forward pass into text. Plain decoding feeds one token per step; draft-self
 * (spec S3) drafts a block with the preview pass and verifies it with one causal batch; --diffusion
 * (spec S2.6) fills whole blocks with preview passes. What decoding uses from the machinery after
 * this section: the sampler (section 14), the tokenizer and the token printer (section 13), the
 * --trace report (section 16). */
typedef struct Tokenizer Tokenizer;
typedef struct Sampler Sampler;
typedef struct Printer Printer;
static int argmax(const float *x, int n);
static bool sampler_greedy(const Sampler *s);
static int sample(Sampler *s, const float *logits, int n_vocab);
static float random_uniform(uint64_t *state);
static void print_token(Printer *pr, int id);
static void print_colored(Printer *pr, int id, bool drafted, bool color);

/* The options of a run, as the command line gives them (parse_args, section 16). */
typedef struct {
    const char *model, *prompt_file, *prompt, *tokens, *dump_logits, *spec_type, *preview_block;
    const char *dump_tensors, *dump_filter;
    const char *test_drafts;   /* test only: "random" or "truth" drafts replace the model's */
    bool test_check_state;     /* test only: compare the committed state with plain decoding each round */
    int n_predict, n_ctx, n_batch, n_ubatch, n_threads, n_threads_batch, n_gpu_layers;
    int draft_n_max, draft_n_min, draft_steps;
    float draft_p_min, accept_ratio, accept_delta;
    float temp, top_p;
    int top_k;
    long long seed;
    uint32_t k_type, v_type;
    bool tokenize, chat, color, diffusion, check_ops;
    bool trace;                /* --trace: one block per draft-self round on stderr */
    bool utf8_replace;         /* --utf8-replace: print valid UTF-8 only (else the tokens' raw bytes) */
    bool draft_adaptive;       /* --spec-draft-adaptive: each round drafts as many tokens as pay (draft_size) */
    bool flash_attn;           /* -fa on (or auto, the default) */
    float diffusion_threshold;
} Args;

/* Token ids that end generation: the file's eos id and the chat terminators, found by text. */
typedef struct { int ids[4]; int n; } EogSet;

static bool is_eog(const EogSet *e, int id) {
    for (int i = 0; i < e->n; i++)
        if (e->ids[i] == id) return true;
    return false;
}

/* What a run counts and times, for the statistics (spec S3.5). */
typedef struct {
    int n_encoded, n_predict, n_drafted, n_accept, n_relaxed, n_rounds;
    double t_encode, t_decode, t_draft, t_verify;
    int *drafted_at, *accepted_at;   /* draft-self, [n_draft]: rounds that drafted / kept draft position j + 1 */
} Stats;

/* What a generation run works with; main sets it up (run_init). */
typedef struct {
    Ctx *ctx;
    const Args *a;
    EogSet eog;
    Sampler *smp;
    Printer *pr;       /* text to stdout */
    Stats stats;
    uint64_t seed;     /* --seed, or the time */
} Run;

/* Evaluate tokens[0..n) causally in chunks of at most cap rows; logits of the last row, or of every
 * row streamed to `dump` when it is given. */
static void prefill(Ctx *ctx, const int *tokens, int n, float *logits, FILE *dump) {
    int cap = ctx->sc.cap, V = ctx->m->c.n_vocab;
    ctx->tile_order = true;
    for (int i = 0; i < n; i += cap) {
        int T = n - i < cap ? n - i : cap;
        forward_causal(ctx, tokens + i, T, logits, dump ? T : logits && i + T == n ? 1 : 0);
        if (dump && fwrite(logits, sizeof(float) * (size_t)V, (size_t)T, dump) != (size_t)T) fatal("writing logits: %s", strerror(errno));
    }
    ctx->tile_order = false;
}

/* A greedy decode step: the causal pass over one token and the argmax of its logits (the sampler's
 * greedy choice); on the GPU the argmax is taken there and only the id comes back. */
static int forward_greedy(Ctx *ctx, int token, float *logits) {
    if (!ctx->gpu) {
        forward_causal(ctx, &token, 1, logits, 1);
        return argmax(logits, ctx->m->c.n_vocab);
    }
    int id;
    gpu_pass(ctx, CAUSAL, &token, 1, false, NULL, 0, 1, &id, NULL);
    ctx->st.n_past++;
    return id;
}

/* Plain causal decoding (--spec-type none): one token per step, the loop of
 * llama-speculative-simple with no drafts. */
static void generate_causal(Run *r, const int *prompt, int n_prompt) {
    Ctx *ctx = r->ctx;
    Stats *stats = &r->stats;
    int V = ctx->m->c.n_vocab;
    float *logits = xmalloc((size_t)V * sizeof(float));
    double t0 = now_seconds();
    prefill(ctx, prompt, n_prompt - 1, logits, NULL);
    stats->t_encode = now_seconds() - t0;
    stats->n_encoded = n_prompt;
    int id_last = prompt[n_prompt - 1];
    t0 = now_seconds();
    while ((r->a->n_predict < 0 || stats->n_predict <= r->a->n_predict) && ctx->st.n_past < ctx->st.n_ctx) {
        int id;
        if (sampler_greedy(r->smp)) id = forward_greedy(ctx, id_last, logits);
        else {
            forward_causal(ctx, &id_last, 1, logits, 1);
            id = sample(r->smp, logits, V);
        }
        stats->n_predict++;
        stats->n_rounds++;
        if (is_eog(&r->eog, id)) break;
        print_token(r->pr, id);
        id_last = id;
    }
    stats->t_decode = now_seconds() - t0;
    free(logits);
}

/* draft-self (spec S3). One round:
 *   1. draft:  preview pass over [id_last, MASK x n] at n_past..n_past+n; row j proposes d_j.
 *   2. verify: one causal batch [id_last, d_1..d_m]; row j's target t_j is the verifier's token.
 *   3. accept: walk the rows; keep d_{j+1} while accept_draft() says so; the first rejecting row
 *              contributes its own token (or the last row a bonus token if all were kept).
 *   4. commit: keep the KV rows of the a+1 committed tokens; restore the GDN state saved before
 *              the batch and replay its recurrence over those rows (logged inputs, same function). */
typedef struct { int id; float p, H; } Draft;   /* token, drafter probability, drafter entropy (nats) */

/* Greedy token of softmax(z) excluding `skip` (the mask id; -1 for none), its probability and the
 * distribution's entropy H = log S - sum_i p_i (z_i - max). */
static int best_token(const float *z, int V, int skip, float *p_top, float *H) {
    int best = skip == 0 ? 1 : 0;
    float max = -INFINITY;
    for (int i = 0; i < V; i++) {
        max = fmaxf(max, z[i]);
        if (i != skip && z[i] > z[best]) best = i;
    }
    double S = 0, Sz = 0;
    for (int i = 0; i < V; i++) {
        double e = exp((double)z[i] - max);
        S += e;
        Sz += e * ((double)z[i] - max);
    }
    *p_top = (float)(exp((double)z[best] - max) / S);
    *H = (float)(log(S) - Sz / S);
    return best;
}

/* best_token of rows i = ith, ith + nth, ... of n rows of logits: each row's double exps take
 * 1.6 ms at the real vocabulary, 25 ms a 16-row preview on one thread */
typedef struct { const float *logits; int V, skip, n; Draft *cand; } CandTask;
static void candidates_task(void *p, int ith, int nth) {
    const CandTask *ct = p;
    for (int i = ith; i < ct->n; i += nth)
        ct->cand[i].id = best_token(ct->logits + (size_t)i * ct->V, ct->V, ct->skip, &ct->cand[i].p, &ct->cand[i].H);
}

/* A preview pass over block[0..T-1] and its candidates: cand[i] = best_token of logits row first + i
 * (i < n), the mask excluded. On the GPU they are taken on the device (clover.cu's twin), so that n
 * ids and 2n floats come back instead of n rows of logits (16 MB for 16 rows of the real vocabulary). */
static void preview_candidates(Ctx *ctx, const int *block, int T, int first, int n, float *logits, Draft *cand) {
    const Config *c = &ctx->m->c;
    if (ctx->gpu) {
        int ids[n];
        float p_H[2 * n];
        gpu_pass(ctx, PREVIEW, block, T, false, NULL, first, n, ids, p_H);
        for (int i = 0; i < n; i++) cand[i] = (Draft){ids[i], p_H[i], p_H[n + i]};
        return;
    }
    forward_preview(ctx, block, T, logits);
    CandTask ct = {logits + (size_t)first * c->n_vocab, c->n_vocab, c->mask_id, n, cand};
    pool_run(ctx->pool, candidates_task, &ct);
}

/* Draft up to n tokens after id_last with --spec-draft-steps denoising steps; returns how many to
 * verify after the p-min cut, the end-of-generation cut and the n-min rule. */
static int draft_block(Ctx *ctx, const Args *a, const EogSet *eog, int id_last, int n, Draft *d, int *block, float *logits) {
    const Config *c = &ctx->m->c;
    block[0] = id_last;
    for (int j = 1; j <= n; j++) block[j] = c->mask_id;
    for (int step = 0; step < a->draft_steps; step++) {
        bool last = step == a->draft_steps - 1, leftmost = true;
        Draft cand[n];   /* row j's: logits row j, or j - 1 with shift_logits */
        preview_candidates(ctx, block, n + 1, c->shift_logits ? 0 : 1, n, logits, cand);
        for (int j = 1; j <= n; j++) {
            if (block[j] != c->mask_id) continue;
            if (last || leftmost || cand[j - 1].p >= 0.9f) {   /* unmask the leftmost and the confident */
                block[j] = cand[j - 1].id;
                d[j - 1] = cand[j - 1];
            }
            leftmost = false;
        }
    }
    int m = n;
    for (int j = 0; j < n; j++) {
        if (d[j].p < a->draft_p_min) { m = j; break; }
        if (is_eog(eog, d[j].id)) { m = j + 1; break; }
    }
    return m < a->draft_n_min ? 0 : m;
}

/* The acceptance rule (spec S3.3), the only place it is decided. Row logits z, the
 * verifier's token t and a draft d with drafter entropy H:
 *   accept  iff  d == t  or  (relaxed and z[d] - z[t] >= ln(ratio) and H <= delta),
 *   relaxed iff  0 < ratio < 1 and delta >= 0  (otherwise the rule is exact and lossless). */
static bool rule_relaxed(float ratio, float delta) { return ratio > 0 && ratio < 1 && delta >= 0; }

static bool accept_draft(const float *z, int t, const Draft *d, float ratio, float delta, bool *relaxed) {
    *relaxed = false;
    if (d->id == t) return true;
    if (!rule_relaxed(ratio, delta)) return false;
    *relaxed = z[d->id] - z[t] >= logf(ratio) && d->H <= delta;
    return *relaxed;
}

/* The committed GDN state of every recurrent layer, saved before a verify batch. */
typedef struct { float **ring, **S; } GdnSave;

/* Per recurrent layer: room for cap rows of GDN inputs (the verify batch's log), and for a copy of
 * the committed ring and S. */
static void gdn_log_init(GdnLog *log, GdnSave *save, const Model *m, int cap) {
    const Config *c = &m->c;
    *log = (GdnLog){xcalloc((size_t)c->n_layer, sizeof(float *)), xcalloc((size_t)c->n_layer, sizeof(float *)), xcalloc((size_t)c->n_layer, sizeof(float *))};
    *save = (GdnSave){xcalloc((size_t)c->n_layer, sizeof(float *)), xcalloc((size_t)c->n_layer, sizeof(float *))};
    for (int il = 0; il < c->n_layer; il++) {
        if (!m->layers[il].recurrent) continue;
        log->u[il] = xmalloc((size_t)cap * c->conv_dim * sizeof(float));
        log->g[il] = xmalloc((size_t)cap * c->n_v_heads * sizeof(float));
        log->beta[il] = xmalloc((size_t)cap * c->n_v_heads * sizeof(float));
        save->ring[il] = xmalloc(ring_floats(c) * sizeof(float));
        save->S[il] = xmalloc(S_floats(c) * sizeof(float));
    }
}

/* ring[il] = from_ring[il] and S[il] = from_S[il] for every recurrent layer (a save or a restore) */
static void gdn_copy(const Model *m, float **ring, float **S, float *const *from_ring, float *const *from_S) {
    for (int il = 0; il < m->c.n_layer; il++) {
        if (!m->layers[il].recurrent) continue;
        memcpy(ring[il], from_ring[il], ring_floats(&m->c) * sizeof(float));
        memcpy(S[il], from_S[il], S_floats(&m->c) * sizeof(float));
    }
}

/* Rollback after a of m drafts were accepted: positions past n_past0 + a + 1 are forgotten (KV rows
 * there are overwritten later), and the GDN layers go back to the saved state and replay the
 * logged rows 0..a through gdn_advance, the same function the batch used. */
static void rollback(Ctx *ctx, const GdnSave *sv, const GdnLog *log, int n_past0, int a) {
    const Model *m = ctx->m;
    if (ctx->gpu) gpu_rollback(ctx->gpu, a + 1);   /* the same on the device, with its own save and log */
    else {
        gdn_copy(m, ctx->st.ring, ctx->st.S, sv->ring, sv->S);
        for (int il = 0; il < m->c.n_layer; il++)
            if (m->layers[il].recurrent) gdn_advance(ctx, il, a + 1, log->u[il], log->g[il], log->beta[il]);
    }
    ctx->st.n_past = n_past0 + a + 1;
}

/* One round (spec S3.1): the drafts, the verify batch and its rows' logits, what the
 * acceptance walk found, and what the commit needs. */
typedef struct {
    int pos, id_last;      /* id_last: the last committed token, fed at pos (not yet in the state) */
    int n, m;              /* drafts asked for, drafts verified */
    Draft *d;              /* [m] drafts */
    int *batch;            /* [id_last, d_1 .. d_m]; also the preview's block */
    float *logits;         /* [m + 1][n_vocab]: the verifier's rows (and the preview's) */
    int *t;                /* [rows] the verifier's token per row walked */
    bool targets;          /* t was filled by the verify batch itself (forward_verify's targets) */
    bool *relaxed;         /* [rows] accepted by the relaxed rule */
    int acc, rows;         /* drafts accepted; rows walked (acc + 1, or acc if an accepted EOG ended it) */
    bool eog_stop;         /* the walk stopped at an accepted end-of-generation draft */
    int *out, n_out;       /* the tokens the round commits */
    GdnLog log;            /* the verify batch's GDN inputs */
    GdnSave save;          /* the GDN state before it */
} Round;

static void round_init(Round *rd, const Model *m, int n_max, int cap) {
    size_t n = (size_t)n_max + 1;
    *rd = (Round){.d = xmalloc(n * sizeof(Draft)), .batch = xmalloc(n * sizeof(int)),
                  .logits = xmalloc(mul_size(n * (size_t)m->c.n_vocab, sizeof(float), "draft logits")),
                  .t = xmalloc(n * sizeof(int)), .relaxed = xmalloc(n * sizeof(bool)), .out = xmalloc(n * sizeof(int))};
    gdn_log_init(&rd->log, &rd->save, m, cap);
}

/* Test-only drafts (--test-drafts): random tokens, or the true greedy continuation. */
typedef struct { int kind; const int *truth; int n_truth; uint64_t rng; } TestDrafts;
enum { DRAFTS_MODEL, DRAFTS_RANDOM, DRAFTS_TRUTH };

/* --test-drafts: n random tokens, or the true continuation after the n_done tokens predicted so far
 * (as far as it is known); returns how many */
static int test_drafts(TestDrafts *td, int n, int n_done, int V, Draft *d) {
    int m = 0;
    if (td->kind == DRAFTS_RANDOM)
        for (; m < n; m++) d[m] = (Draft){(int)(random_uniform(&td->rng) * V) % V, 1, 0};
    else
        for (; m < n && n_done + m < td->n_truth; m++) d[m] = (Draft){td->truth[n_done + m], 1, 0};
    return m;
}

typedef struct { Ctx *ctx; int rounds; } StateCheck;   /* --test-check-state: a plain decoder in lockstep */

static void check_state(StateCheck *chk, const Ctx *ctx, const int *tokens, int n) {
    Ctx *sh = chk->ctx;
    for (int i = 0; i < n; i++) forward_causal(sh, &tokens[i], 1, NULL, 0);
    const Model *m = ctx->m;
    const Config *c = &m->c;
    if (sh->st.n_past != ctx->st.n_past) fatal("state check: n_past %d != plain decoding's %d", ctx->st.n_past, sh->st.n_past);
    for (int il = 0; il < c->n_layer; il++) {
        bool same;
        if (m->layers[il].recurrent)
            same = !memcmp(sh->st.S[il], ctx->st.S[il], S_floats(c) * 4) && !memcmp(sh->st.ring[il], ctx->st.ring[il], ring_floats(c) * 4);
        else
            same = !memcmp(sh->st.k[il], ctx->st.k[il], kv_bytes(c, ctx->st.k_type, ctx->st.n_past)) &&
                   !memcmp(sh->st.v[il], ctx->st.v[il], kv_bytes(c, ctx->st.v_type, ctx->st.n_past));
        if (!same) fatal("state check: layer %d differs from plain causal decoding after round %d", il, chk->rounds + 1);
    }
    chk->rounds++;
}

/* --trace: the round as a table on stderr (section 16) */
static void trace_round(const Round *r, int round, int V, const Printer *pr, const Args *a, const EogSet *eog);

/* The acceptance walk (step 3 of a round): keep d_j while accept_draft says so; the first
 * rejecting row commits the verifier's token t_j instead, the last row a bonus token when all m
 * were kept; an accepted end-of-generation draft ends the round. */
static void accept_round(Run *r, Round *rd) {
    const Args *a = r->a;
    int V = r->ctx->m->c.n_vocab;
    rd->n_out = rd->acc = rd->rows = 0;
    rd->eog_stop = false;
    for (int j = 0; j <= rd->m; j++) {
        const float *z = rd->targets ? NULL : rd->logits + (size_t)j * V;   /* (the exact rule reads no z) */
        int t = rd->targets ? rd->t[j] : sample(r->smp, z, V);
        bool relaxed = false;
        rd->t[j] = t;
        rd->relaxed[j] = false;
        rd->rows = j + 1;
        if (j < rd->m && accept_draft(z, t, &rd->d[j], a->accept_ratio, a->accept_delta, &relaxed)) {
            rd->out[rd->n_out++] = rd->d[j].id;
            rd->acc++;
            rd->relaxed[j] = relaxed;
            if (relaxed) {
                r->stats.n_relaxed++;
                fprintf(stderr, "clover: relaxed accept: row %d draft %d target %d ratio %.3f entropy %.3f\n", j, rd->d[j].id, t,
                        expf(z[rd->d[j].id] - z[t]), rd->d[j].H);
            }
            if (is_eog(&r->eog, rd->d[j].id)) { rd->eog_stop = true; break; }
            continue;
        }
        rd->out[rd->n_out++] = t;
        break;
    }
}

/* Print the round's committed tokens; true when generation is over (an end-of-generation token, or
 * past -n). */
static bool print_round(Run *r, const Round *rd) {
    for (int i = 0; i < rd->n_out; i++) {
        r->stats.n_predict++;
        if (is_eog(&r->eog, rd->out[i])) return true;
        print_colored(r->pr, rd->out[i], i < rd->acc, r->a->color);
    }
    return r->a->n_predict >= 0 && r->stats.n_predict > r->a->n_predict;
}

/* --spec-draft-adaptive: how many tokens a round drafts. A round of n drafts, each accepted with
 * probability q once the ones before it were, commits 1 + q + ... + q^n tokens on average and costs
 * a preview and a verify batch of n + 1 rows, modelled as t(n + 1 rows) = step + n row (the running
 * means of the measured times); plain decoding (n = 0) commits 1 token per step. With q estimated
 * from the drafts tried so far (a round that accepts a of m tried a + 1 drafts, a if all were
 * accepted), the round drafts the n <= n_max with the most tokens per second if that beats plain
 * decoding by MARGIN: exploitation, q = accepted / (tried + 1). Otherwise it may probe: the best n
 * under the optimistic q = (accepted + 1) / (tried + 1) (the first probe: one draft, whose cost is
 * guessed as 3 steps), once the plain rounds since the last drafted one have cost 1 / PROBE_SHARE
 * times what that probe costs beyond a step, so at most 2% of the time goes to probes and short
 * runs (under about 150 tokens) may never draft. Any n keeps the exact rule lossless. */
static const double MARGIN = 1.1, PROBE_SHARE = 0.02;
typedef struct {
    double step, preview_row, verify_row;   /* seconds; < 0: not measured yet */
    double accepted, tried;                 /* drafts, over every drafted round */
    int plain_rounds;                       /* rounds since the last drafted one */
} Adaptive;

static double running_mean(double mean, double x) { return mean < 0 ? x : 0.75 * mean + 0.25 * x; }

/* The n <= n_max with the most tokens per second at acceptance q; its rate in *rate. */
static int best_draft(const Adaptive *ad, int n_max, double q, double *rate) {
    double row = ad->preview_row + ad->verify_row, tokens = 1, qn = 1;
    int best = 0;
    *rate = 1 / ad->step;
    for (int n = 1; n <= n_max; n++) {
        qn *= q;
        tokens += qn;
        double r = tokens / (2 * ad->step + n * row);
        if (r > *rate) *rate = r, best = n;
    }
    return best;
}

static int draft_size(Adaptive *ad, int n_max) {
    if (n_max == 0 || ad->step < 0) return 0;
    int probe = 1;                  /* the first probe: one draft, its cost guessed as 3 steps */
    double extra = 3 * ad->step;
    if (ad->preview_row >= 0) {     /* row costs measured: exploit, or size the probe */
        double rate;
        int n = best_draft(ad, n_max, ad->accepted / (ad->tried + 1), &rate);
        if (n > 0 && rate >= MARGIN / ad->step) return n;
        probe = best_draft(ad, n_max, (ad->accepted + 1) / (ad->tried + 1), &rate);
        extra = ad->step + probe * (ad->preview_row + ad->verify_row);
    }
    if (probe == 0 || ++ad->plain_rounds * ad->step * PROBE_SHARE < extra) return 0;
    return probe;
}

/* What a round measured: its preview and verify times, m drafts of which acc were accepted. */
static void draft_costs(Adaptive *ad, double t_draft, double t_verify, int m, int acc) {
    if (m == 0) {
        ad->step = running_mean(ad->step, t_verify);
        return;
    }
    ad->plain_rounds = 0;
    double row_p = (t_draft - ad->step) / m, row_v = (t_verify - ad->step) / m;
    ad->preview_row = running_mean(ad->preview_row, row_p > 0 ? row_p : 0);
    ad->verify_row = running_mean(ad->verify_row, row_v > 0 ? row_v : 0);
    ad->accepted += acc;
    ad->tried += acc < m ? acc + 1 : acc;
}

/* --spec-type draft-self: rounds of draft, verify, accept, commit (spec S3.1);
 * td: where the drafts come from (the model, or test drafts); chk: a plain decoder to compare the
 * committed state with after every round, or NULL. */
static void generate_draft_self(Run *r, const int *prompt, int n_prompt, TestDrafts *td, StateCheck *chk) {
    Ctx *ctx = r->ctx;
    const Args *a = r->a;
    const Config *c = &ctx->m->c;
    Stats *stats = &r->stats;
    int cap = ctx->sc.cap;
    int n_max = a->draft_n_max < c->block_size - 1 ? a->draft_n_max : c->block_size - 1;
    if (n_max > cap - 1) n_max = cap - 1;
    Round rd;
    round_init(&rd, ctx->m, n_max, cap);
    /* greedy with the exact rule: the GPU's verify batch returns each row's argmax, not its logits */
    rd.targets = ctx->gpu && sampler_greedy(r->smp) && !rule_relaxed(a->accept_ratio, a->accept_delta) && !a->trace;
    stats->drafted_at = xcalloc((size_t)n_max + 1, sizeof(int));
    stats->accepted_at = xcalloc((size_t)n_max + 1, sizeof(int));
    double t0 = now_seconds();
    prefill(ctx, prompt, n_prompt - 1, rd.logits, NULL);
    stats->t_encode = now_seconds() - t0;
    stats->n_encoded = n_prompt;
    int id_last = prompt[n_prompt - 1];
    bool done = false;
    Adaptive ad = {.step = -1, .preview_row = -1, .verify_row = -1};
    t0 = now_seconds();
    while (!done && ctx->st.n_past < ctx->st.n_ctx) {
        rd.pos = ctx->st.n_past;
        rd.id_last = id_last;
        rd.n = a->draft_adaptive ? draft_size(&ad, n_max) : n_max;   /* as many as fit before -c and -n */
        if (ctx->st.n_ctx - ctx->st.n_past - 2 < rd.n) rd.n = ctx->st.n_ctx - ctx->st.n_past - 2;
        if (a->n_predict >= 0 && a->n_predict - stats->n_predict - 1 < rd.n) rd.n = a->n_predict - stats->n_predict - 1;
        if (rd.n < 0) rd.n = 0;
        /* 1. DRAFT: a preview pass over [id_last, MASK x n] (or test drafts) */
        double td0 = now_seconds();
        rd.m = rd.n == 0 ? 0 : td->kind == DRAFTS_MODEL ? draft_block(ctx, a, &r->eog, id_last, rd.n, rd.d, rd.batch, rd.logits)
                                                        : test_drafts(td, rd.n, stats->n_predict, c->n_vocab, rd.d);
        double t_draft = now_seconds() - td0;
        stats->t_draft += t_draft;
        /* 2. VERIFY: save the GDN state; one causal batch [id_last, d_1 .. d_m], in decoding order,
         * every row's logits, the GDN inputs logged for the rollback */
        double tv0 = now_seconds();
        rd.batch[0] = id_last;
        for (int j = 0; j < rd.m; j++) rd.batch[j + 1] = rd.d[j].id;
        if (rd.m > 0 && ctx->gpu) gpu_gdn_save(ctx->gpu);   /* no drafts: nothing to roll back */
        else if (rd.m > 0) gdn_copy(ctx->m, rd.save.ring, rd.save.S, ctx->st.ring, ctx->st.S);
        forward_verify(ctx, rd.batch, rd.m + 1, rd.logits, rd.targets ? rd.t : NULL, rd.m > 0 ? &rd.log : NULL);
        /* 3. ACCEPT */
        accept_round(r, &rd);
        if (a->trace) trace_round(&rd, stats->n_rounds + 1, c->n_vocab, r->pr, a, &r->eog);
        /* 4. COMMIT: the KV rows of the a + 1 new tokens stay; the GDN layers roll back and replay them */
        if (rd.acc < rd.m) rollback(ctx, &rd.save, &rd.log, rd.pos, rd.acc);
        double t_verify = now_seconds() - tv0;
        stats->t_verify += t_verify;
        draft_costs(&ad, t_draft, t_verify, rd.m, rd.acc);
        stats->n_drafted += rd.m;
        stats->n_accept += rd.acc;
        for (int j = 0; j < rd.m; j++) {   /* drafts are kept front to back: position j only if all before it */
            stats->drafted_at[j]++;
            stats->accepted_at[j] += j < rd.acc;
        }
        stats->n_rounds++;
        if (chk) check_state(chk, ctx, rd.batch, rd.acc + 1);
        done = print_round(r, &rd);
        id_last = rd.out[rd.n_out - 1];
    }
    stats->t_decode = now_seconds() - t0;
}

/* --diffusion (spec S2.6): fill a block of block_size masks by repeated preview passes,
 * unmasking every position whose top-1 probability reaches the threshold (at least the most
 * confident one), then commit the block causally; stop at the first end-of-generation token. */
static void generate_diffusion(Run *r, const int *prompt, int n_prompt) {
    Ctx *ctx = r->ctx;
    const Args *a = r->a;
    Stats *stats = &r->stats;
    const Config *c = &ctx->m->c;
    int V = c->n_vocab, B = c->block_size < ctx->sc.cap ? c->block_size : ctx->sc.cap;
    float *logits = xmalloc(mul_size((size_t)B * V, sizeof(float), "diffusion logits"));
    int *block = xmalloc((size_t)B * sizeof(int));
    /* the last committed row's logits: with shift_logits they predict block position 0 */
    float *last = xmalloc((size_t)V * sizeof(float));
    double t0 = now_seconds();
    prefill(ctx, prompt, n_prompt, last, NULL);
    stats->t_encode = now_seconds() - t0;
    stats->n_encoded = n_prompt;
    t0 = now_seconds();
    int passes = 0, blocks = 0;
    bool done = false;
    while (!done && (a->n_predict < 0 || stats->n_predict < a->n_predict)) {
        int n = B;
        if (ctx->st.n_past + n > ctx->st.n_ctx) n = ctx->st.n_ctx - ctx->st.n_past;
        if (n <= 0) break;
        for (int j = 0; j < n; j++) block[j] = c->mask_id;
        for (int masked = n; masked > 0;) {
            Draft cand[n + 1];   /* position j's: row j, or, shifted, row j - 1 (the last committed row's for j = 0) */
            if (c->shift_logits) cand[0].id = best_token(last, V, c->mask_id, &cand[0].p, &cand[0].H);
            preview_candidates(ctx, block, n, 0, c->shift_logits ? n - 1 : n, logits, cand + c->shift_logits);
            passes++;
            int best_j = -1;
            for (int j = 0; j < n; j++)
                if (block[j] == c->mask_id && (best_j < 0 || cand[j].p > cand[best_j].p)) best_j = j;
            for (int j = 0; j < n; j++)
                if (block[j] == c->mask_id && cand[j].p >= a->diffusion_threshold) { block[j] = cand[j].id; masked--; }
            if (block[best_j] == c->mask_id) { block[best_j] = cand[best_j].id; masked--; }
        }
        int keep = n;
        for (int j = 0; j < n; j++)
            if (is_eog(&r->eog, block[j]) || (a->n_predict >= 0 && stats->n_predict + j >= a->n_predict)) { keep = j; done = true; break; }
        prefill(ctx, block, keep, last, NULL);
        for (int j = 0; j < keep; j++) print_token(r->pr, block[j]);
        stats->n_predict += keep;
        blocks++;
    }
    stats->t_decode = now_seconds() - t0;
    fprintf(stderr, "\ndiffusion: %d blocks, %d passes, %.2f passes per block, %.2f tokens per pass\n", blocks, passes,
            blocks ? (double)passes / blocks : 0.0, passes ? (double)stats->n_predict / passes : 0.0);
    free(logits);
    free(block);
    free(last);
}

/* ============================================================================================== */
/* 11. Tensor dumps (--dump-tensors)                                                              */
/* ============================================================================================== */
/* --dump-tensors DIR: every intermediate activation as DIR/<name>.bin, named as llama.cpp's graph
 * callback names the same value (cb(cur, "attn_norm", il) -> "attn_norm-0"), with the same element
 * order (ggml's ne0 fastest, i.e. row-major [tokens][...]), so that a port can be diffed with clover,
 * or clover with llama.cpp, op by op (test/run.sh group dumps does the latter). The first write of a
 * name in a run creates its file and later batches append their rows; a tensor whose first axis is
 * not tokens (conv_input, state_predelta, new_state) gets one block per batch. Preview passes write
 * the same names prefixed "preview." (llama.cpp has no preview pass). DIR/index.tsv lists every file:
 * name, dtype, shape (row-major, outermost first), and what it holds (DUMP_NAMES). */
static const struct { const char *name, *meaning; } DUMP_NAMES[] = {
    {"model.input_embed", "token embedding rows (tok_embd, dequantised): the residual stream x entering layer 0"},
    {"attn_norm", "RMSNorm(x) * attn_norm: the mixer input"},
    /* Gated DeltaNet layers */
    {"linear_attn_qkv_mixed", "GDN: u = attn_qkv . attn_norm, the pre-conv q|k|v row"},
    {"z", "GDN: z = attn_gate . attn_norm, the output gate"},
    {"beta", "GDN: ssm_beta . attn_norm (before the sigmoid)"},
    {"beta_sigmoid", "GDN: beta = sigmoid(ssm_beta . attn_norm), the delta-rule step size per value head"},
    {"alpha", "GDN: ssm_alpha . attn_norm"},
    {"a_softplus", "GDN: softplus(alpha + ssm_dt.bias)"},
    {"gate", "GDN: g = a_softplus * ssm_a, the log-decay per value head (ssm_a = -exp(A_log) < 0)"},
    {"conv_input", "GDN: [conv ring (d_conv-1 committed pre-conv rows) | u rows], CHANNEL-major: [conv_dim][d_conv-1+T] per batch"},
    {"conv_output_raw", "GDN: depthwise causal conv over conv_input with ssm_conv1d, before SiLU"},
    {"conv_output_silu", "GDN: SiLU(conv_output_raw) = q|k|v"},
    {"q_conv", "GDN: the q heads of conv_output_silu [n_k_heads][d_state]"},
    {"k_conv", "GDN: the k heads of conv_output_silu"},
    {"q_conv_predelta", "GDN: q after L2 norm per head, as the delta rule reads it"},
    {"k_conv_predelta", "GDN: k after L2 norm per head"},
    {"v_conv_predelta", "GDN: the v heads of conv_output_silu [n_v_heads][d_state]"},
    {"state_predelta", "GDN: recurrent state S before the batch, [n_v_heads][d_state (value j)][d_state (key i)] per batch"},
    {"new_state", "GDN: recurrent state S after the batch, same layout as state_predelta"},
    {"final_output", "GDN: RMSNorm(o_h) * ssm_norm * SiLU(z_h) per value head (gated norm)"},
    {"linear_attn_out", "GDN: ssm_out . final_output, the mixer output"},
    /* gated attention layers */
    {"Qcur_full", "attention: attn_q . attn_norm = per head [q | gate] (2*head_dim)"},
    {"Qcur_reshaped", "attention: the q halves of Qcur_full [n_head][head_dim]"},
    {"Qcur_normed", "attention: RMSNorm(q) * attn_q_norm per head"},
    {"Qcur", "attention: Qcur_normed after NEOX RoPE on the first n_rot dims (true positions)"},
    {"Kcur_normed", "attention: RMSNorm(attn_k . attn_norm) * attn_k_norm per kv head"},
    {"Kcur", "attention: Kcur_normed after RoPE (the row written to the K cache)"},
    {"Vcur", "attention: attn_v . attn_norm (the row written to the V cache)"},
    {"gate_reshaped", "attention: the gate halves of Qcur_full"},
    {"gate_sigmoid", "attention: sigmoid(gate_reshaped)"},
    {"attn_pregate", "attention: softmax(q.K/sqrt(head_dim) + causal mask) V per head"},
    {"attn_gated", "attention: attn_pregate * gate_sigmoid"},
    {"attn_output", "attention layer: attn_output . attn_gated, the mixer output; GDN layer: the delta-rule output o [n_v_heads][d_state] (before the gated norm)"},
    /* every layer: residual, MoE, shared expert */
    {"attn_residual", "x + mixer output"},
    {"attn_post_norm", "RMSNorm(attn_residual) * post_attention_norm: the FFN input m"},
    {"ffn_moe_logits", "router logits ffn_gate_inp . m [n_expert]"},
    {"ffn_moe_probs", "softmax(ffn_moe_logits)"},
    {"ffn_moe_topk", "int32: the n_expert_used chosen experts, by decreasing probability (ties: lower index)"},
    {"ffn_moe_weights", "probabilities of the chosen experts, in ffn_moe_topk order"},
    {"ffn_moe_weights_sum", "sum of ffn_moe_weights"},
    {"ffn_moe_weights_sum_clamped", "max(ffn_moe_weights_sum, 2^-14)"},
    {"ffn_moe_weights_norm", "ffn_moe_weights / ffn_moe_weights_sum_clamped"},
    {"ffn_moe_gate", "per chosen expert slot: gate_exps[e] . m [n_expert_used][n_ff]"},
    {"ffn_moe_up", "per slot: up_exps[e] . m"},
    {"ffn_moe_swiglu", "per slot: SiLU(ffn_moe_gate) * ffn_moe_up"},
    {"ffn_moe_down", "per slot: down_exps[e] . ffn_moe_swiglu [n_expert_used][n_embd]"},
    {"ffn_moe_weighted", "per slot: ffn_moe_down * ffn_moe_weights_norm"},
    {"ffn_moe_out", "sum over slots of ffn_moe_weighted, in slot order"},
    {"ffn_gate", "shared expert: gate_shexp . m"},
    {"ffn_up", "shared expert: up_shexp . m"},
    {"ffn_swiglu", "shared expert: SiLU(ffn_gate) * ffn_up"},
    {"ffn_shexp", "shared expert: down_shexp . ffn_swiglu"},
    {"shared_expert_gate", "shared expert gate logit ffn_gate_inp_shexp . m [1]"},
    {"shared_expert_gate_sigmoid", "sigmoid(shared_expert_gate)"},
    {"ffn_shexp_gated", "ffn_shexp * shared_expert_gate_sigmoid"},
    {"ffn_out", "ffn_moe_out + ffn_shexp_gated"},
    {"l_out", "attn_residual + ffn_out: the residual stream leaving the layer"},
    /* head */
    {"result_norm", "RMSNorm(l_out of the last layer) * output_norm, for the rows that get logits"},
    {"result_output", "logits output . result_norm [n_vocab]"},
};

typedef struct { char tag[96]; bool i32; int ne[3]; long rows; } DumpEntry;
typedef struct Dumps {
    DumpEntry *e;
    int n, cap;
    float *buf[10];                 /* scratch for values only the dumps need */
    size_t buf_n[10];
} Dumps;

static bool dumping(const Ctx *ctx) { return ctx->dump_dir != NULL; }

/* dump scratch slot i with room for n floats (ints) */
static float *dump_buf(const Ctx *ctx, int i, size_t n) {
    Dumps *d = ctx->dumps;
    if (d->buf_n[i] < n) {
        free(d->buf[i]);
        d->buf[i] = xmalloc(n * sizeof(float));
        d->buf_n[i] = n;
    }
    return d->buf[i];
}

/* Write `rows` blocks of ne2 x ne1 x ne0 values (row-major; ggml ne = {ne0, ne1, ne2, rows}) as
 * DIR/<name>-<il>.bin (il < 0: DIR/<name>.bin). */
static void dump_nd(const Ctx *ctx, const char *name, int il, const void *x, bool i32, int rows, int ne2, int ne1, int ne0) {
    if (!ctx->dump_dir) return;
    char tag[96], path[1024];
    snprintf(tag, sizeof tag, il >= 0 ? "%s%s-%d" : "%s%s", ctx->dump_preview ? "preview." : "", name, il);
    if (regexec(&ctx->dump_filter, tag, 0, NULL, 0) != 0) return;
    Dumps *d = ctx->dumps;
    DumpEntry *e = NULL;
    for (int i = d->n - 1; i >= 0 && !e; i--)
        if (!strcmp(d->e[i].tag, tag)) e = &d->e[i];
    if (!e) {
        if (d->n == d->cap) {
            d->cap = d->cap ? 2 * d->cap : 256;
            d->e = realloc(d->e, (size_t)d->cap * sizeof *d->e);
            if (!d->e) fatal("out of memory");
        }
        e = &d->e[d->n++];
        *e = (DumpEntry){"", i32, {ne0, ne1, ne2}, 0};
        snprintf(e->tag, sizeof e->tag, "%s", tag);
    }
    snprintf(path, sizeof path, "%s/%s.bin", ctx->dump_dir, tag);
    size_t n = (size_t)rows * ne2 * ne1 * ne0;
    FILE *f = fopen(path, e->rows ? "ab" : "wb");
    if (!f || fwrite(x, 4, n, f) != n || fclose(f) != 0) fatal("cannot write tensor dump '%s': %s", path, strerror(errno));
    e->rows += rows;
}

/* T rows of n floats, or of n1 x n0 */
static void dump(const Ctx *ctx, const char *name, int il, const float *x, int T, int n) { dump_nd(ctx, name, il, x, false, T, 1, 1, n); }
static void dump3(const Ctx *ctx, const char *name, int il, const float *x, int T, int n1, int n0) {
    dump_nd(ctx, name, il, x, false, T, 1, n1, n0);
}

/* The recurrent state S of GDN layer il as [n_v_heads][d_state][d_state], one block per batch */
static void dump_state(const Ctx *ctx, const char *name, int il) {
    const Config *c = &ctx->m->c;
    dump_nd(ctx, name, il, ctx->st.S[il], false, 1, c->n_v_heads, c->d_state, c->d_state);
}

/* T rows of n1 x n0 floats that sit `stride` floats apart (a slice of wider rows) */
static void dump_slice(const Ctx *ctx, const char *name, int il, const float *x, size_t stride, int T, int n1, int n0) {
    if (!dumping(ctx)) return;
    size_t n = (size_t)n1 * n0;
    float *b = dump_buf(ctx, 4, (size_t)T * n);
    for (int t = 0; t < T; t++) memcpy(b + (size_t)t * n, x + (size_t)t * stride, n * sizeof(float));
    dump3(ctx, name, il, b, T, n1, n0);
}

/* Creates the folder path and its parents where missing (mkdir -p), so that --dump-tensors DIR
 * works on a fresh path. */
static void make_dirs(const char *path) {
    char p[1024];
    if (snprintf(p, sizeof p, "%s", path) >= (int)sizeof p) fatal("--dump-tensors: the path '%.40s...' is too long", path);
    for (char *c = p + (p[0] == '/'); ; c++) {   /* each prefix ending before a '/', then the whole */
        if (*c != '/' && *c) continue;
        char was = *c;
        *c = 0;
        struct stat st;
        if (mkdir(p, 0777) != 0 && errno != EEXIST) fatal("--dump-tensors: cannot create '%s': %s", p, strerror(errno));
        if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode)) fatal("--dump-tensors: '%s' is not a folder", p);
        if (!was) return;
        *c = was;
    }
}

/* DIR/index.tsv: one line per file written in this run. */
static void dump_index(const Ctx *ctx) {
    if (!ctx->dump_dir) return;
    char path[1024];
    snprintf(path, sizeof path, "%s/index.tsv", ctx->dump_dir);
    FILE *f = fopen(path, "w");
    if (!f) fatal("cannot write '%s': %s", path, strerror(errno));
    fprintf(f, "# name\tdtype\tshape (row-major, outermost first; first axis: tokens, or batches where the meaning says per batch)\tmeaning\n");
    const Dumps *d = ctx->dumps;
    for (int i = 0; i < d->n; i++) {
        const DumpEntry *e = &d->e[i];
        char base[96], shape[96];
        const char *b = strncmp(e->tag, "preview.", 8) ? e->tag : e->tag + 8;
        snprintf(base, sizeof base, "%s", b);
        char *dash = strrchr(base, '-');
        if (dash && dash[1] >= '0' && dash[1] <= '9') *dash = 0;
        const char *meaning = "?";
        for (size_t k = 0; k < sizeof DUMP_NAMES / sizeof DUMP_NAMES[0]; k++)
            if (!strcmp(DUMP_NAMES[k].name, base)) meaning = DUMP_NAMES[k].meaning;
        int n = snprintf(shape, sizeof shape, "%ld", e->rows);
        for (int k = 2; k >= 0; k--)
            if (e->ne[k] > 1 || k == 0) n += snprintf(shape + n, sizeof shape - (size_t)n, "x%d", e->ne[k]);
        fprintf(f, "%s\t%s\t%s\t%s%s\n", e->tag, e->i32 ? "i32" : "f32", shape, b != e->tag ? "preview pass: " : "", meaning);
    }
    if (fclose(f) != 0) fatal("cannot write '%s': %s", path, strerror(errno));
}

/* --- Values the math does not keep, recomputed from what it keeps ------------------------------ */
/* a_softplus = softplus(W_alpha a + dt_bias), gdn_gates' step before the product with ssm_a */
static void dump_a_softplus(const Ctx *ctx, int il, int T) {
    if (!dumping(ctx)) return;
    int H = ctx->m->c.n_v_heads;
    const float *dt = ctx->m->layers[il].dt;
    float *b = dump_buf(ctx, 0, (size_t)T * H);
    for (int i = 0; i < T * H; i++) b[i] = softplus(ctx->sc.alpha[i] + dt[i % H]);
    dump(ctx, "a_softplus", il, b, T, H);
}

/* The causal conv, recomputed from the ring before gdn_advance moves it, with the kernel
 * gdn_advance uses: conv_input (channel-major [ring | u]), conv_output_raw, conv_output_silu,
 * q_conv, k_conv; and the state before the batch, state_predelta. */
static void dump_gdn_conv(const Ctx *ctx, int il, int T) {
    if (!dumping(ctx)) return;
    const Config *c = &ctx->m->c;
    const float *ring = ctx->st.ring[il], *u = ctx->sc.qkv;
    int C = c->conv_dim, R = c->d_conv - 1, d = c->d_state;
    float *in = dump_buf(ctx, 2, (size_t)(R + T) * C), *raw = dump_buf(ctx, 3, (size_t)T * C);
    for (int ch = 0; ch < C; ch++)
        for (int j = 0; j < R + T; j++) in[(size_t)ch * (R + T) + j] = j < R ? ring[(size_t)j * C + ch] : u[(size_t)(j - R) * C + ch];
    dump_nd(ctx, "conv_input", il, in, false, 1, 1, C, R + T);
    kernels()->gdn_conv(ctx->m->layers[il].conv, c->d_conv, C, ring, u, T, 0, C, raw);
    dump(ctx, "conv_output_raw", il, raw, T, C);
    for (size_t i = 0; i < (size_t)T * C; i++) raw[i] = silu(raw[i]);
    dump(ctx, "conv_output_silu", il, raw, T, C);
    dump_slice(ctx, "q_conv", il, raw, C, T, c->n_k_heads, d);
    dump_slice(ctx, "k_conv", il, raw + c->key_dim, C, T, c->n_k_heads, d);
    dump_state(ctx, "state_predelta", il);
}

/* The q (part 0) or gate (part 1) halves of the attention's qg rows, as [T][n_head][head_dim] */
static float *qg_halves(const Ctx *ctx, int T, int part) {
    const Config *c = &ctx->m->c;
    int hd = c->head_dim, H = c->n_head;
    float *b = dump_buf(ctx, 5, (size_t)T * H * hd);
    for (size_t th = 0; th < (size_t)T * H; th++) memcpy(b + th * hd, ctx->sc.qg + th * 2 * hd + (size_t)part * hd, (size_t)hd * sizeof(float));
    return b;
}

static void dump_q_heads(const Ctx *ctx, const char *name, int il, int T) {
    if (dumping(ctx)) dump3(ctx, name, il, qg_halves(ctx, T, 0), T, ctx->m->c.n_head, ctx->m->c.head_dim);
}

/* gate_reshaped and gate_sigmoid (the attention task applies the sigmoid on the way) */
static void dump_gates(const Ctx *ctx, int il, int T) {
    if (!dumping(ctx)) return;
    int n = ctx->m->c.n_head * ctx->m->c.head_dim;
    float *g = qg_halves(ctx, T, 1);
    dump(ctx, "gate_reshaped", il, g, T, n);
    for (size_t i = 0; i < (size_t)T * n; i++) g[i] = sigmoid(g[i]);
    dump(ctx, "gate_sigmoid", il, g, T, n);
}

/* The steps inside route_top_k, from its inputs and outputs: the chosen experts (int32), their
 * probabilities, the sum and the clamped sum. */
static void dump_routing(const Ctx *ctx, int il, int T) {
    if (!dumping(ctx)) return;
    const Config *c = &ctx->m->c;
    const Scratch *s = &ctx->sc;
    int K = c->n_expert_used;
    dump_nd(ctx, "ffn_moe_topk", il, s->sel, true, T, 1, 1, K);
    float *w = dump_buf(ctx, 0, (size_t)T * (K + 2));
    for (int t = 0; t < T; t++) {
        double sum = 0;
        for (int r = 0; r < K; r++) {
            int e = s->sel[(size_t)t * K + r];
            sum += w[(size_t)t * K + r] = e >= 0 ? s->probs[(size_t)t * c->n_expert + e] : 0;
        }
        w[(size_t)T * K + t] = (float)sum;
        w[(size_t)T * (K + 1) + t] = fmaxf((float)sum, 6.103515625e-5f);
    }
    dump3(ctx, "ffn_moe_weights", il, w, T, K, 1);
    dump(ctx, "ffn_moe_weights_sum", il, w + (size_t)T * K, T, 1);
    dump(ctx, "ffn_moe_weights_sum_clamped", il, w + (size_t)T * (K + 1), T, 1);
}

/* An expert buffer's rows (n values each) in llama.cpp's order [T][n_used][n] (rank -1: zeros),
 * each times its routing weight when w is not NULL (ffn_moe_weighted). */
static void dump_pairs(const Ctx *ctx, const char *name, int il, const float *x, int n, int T, const float *w) {
    int K = ctx->m->c.n_expert_used;
    float *d = dump_buf(ctx, 9, (size_t)T * K * n);
    for (int i = 0; i < T * K; i++) {
        int j = ctx->sc.slot[i];
        for (int k = 0; k < n; k++) {
            float v = j < 0 ? 0 : x[(size_t)j * n + k];
            d[(size_t)i * n + k] = w ? v * w[i] : v;
        }
    }
    dump3(ctx, name, il, d, T, K, n);
}

static void dump_experts(const Ctx *ctx, int il, int T) {
    if (!dumping(ctx)) return;
    const Scratch *s = &ctx->sc;
    int F = ctx->m->c.n_ff, E = ctx->m->c.n_embd;
    dump_pairs(ctx, "ffn_moe_gate", il, s->ge, F, T, NULL);
    dump_pairs(ctx, "ffn_moe_up", il, s->ue, F, T, NULL);
    dump_pairs(ctx, "ffn_moe_swiglu", il, s->he, F, T, NULL);
    dump_pairs(ctx, "ffn_moe_down", il, s->ye, E, T, NULL);
    dump_pairs(ctx, "ffn_moe_weighted", il, s->ye, E, T, s->w);
}

/* The shared expert's FFN buffers, its gate logit, the sigmoid and the gated rows moe_shared adds */
static void dump_shared_expert(const Ctx *ctx, int il, int T) {
    if (!dumping(ctx)) return;
    const Scratch *s = &ctx->sc;
    int F = ctx->m->c.n_ff_shexp, E = ctx->m->c.n_embd;
    dump(ctx, "ffn_gate", il, s->ge, T, F);
    dump(ctx, "ffn_up", il, s->ue, T, F);
    dump(ctx, "ffn_swiglu", il, s->he, T, F);
    dump(ctx, "ffn_shexp", il, s->sh, T, E);
    float *b = dump_buf(ctx, 6, (size_t)T * (E + 1));   /* the sigmoid per row, then the gated rows */
    for (int t = 0; t < T; t++) {
        float gate = sigmoid(s->sh_logit[t]);
        b[t] = gate;
        for (int i = 0; i < E; i++) b[T + (size_t)t * E + i] = s->sh[(size_t)t * E + i] * gate;
    }
    dump(ctx, "shared_expert_gate", il, s->sh_logit, T, 1);
    dump(ctx, "shared_expert_gate_sigmoid", il, b, T, 1);
    dump(ctx, "ffn_shexp_gated", il, b + T, T, E);
}

/* ============================================================================================== */
/* 12. SIMD twins of the kernels, and the thread pool                                             */
/* ============================================================================================== */
/* Each kernel of the table (section 5) has its plain definition next to the math it serves and, here,
 * its x86-64 twin, which performs the per-lane operations of the plain definition in the same order.
 *
 * --- The dot products --------------------------------------------------------------------------
 * The 8 float lanes of the quantized dots are one 256-bit register, the 64 accumulators of
 * the row order are eight, the 16 of the tile order two. Integer sums inside a block are exact
 * whatever their grouping (no pair sum of maddubs can saturate: |q| <= 128, |a| <= 127, and the
 * unsigned K-quant values are at most 63), and fp16 scales convert exactly with F16C, so every
 * float operation sees the same operands as the plain code and the results are bit-identical
 * (checked by test/unit.c and the `simd` group of test/run.sh). CLOVER_SIMD=scalar forces the
 * plain definitions. */
#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#define SIMD __attribute__((target("avx2,fma,f16c")))
#define SIMD_INLINE __attribute__((target("avx2,fma,f16c"), always_inline))   /* small helpers: keep vectors in registers */

static inline SIMD_INLINE float f16c(uint16_t h) { return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h))); }

/* fold(acc, 8) of one register: lanes l += l+4, then l += l+2, then 0 += 1 */
static inline SIMD_INLINE float fold8_avx2(__m256 v) {
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
}

/* fold(acc, 64) of eight registers (register r holds accumulators 8r..8r+7) */
static inline SIMD_INLINE float fold64_avx2(__m256 a[8]) {
#pragma GCC unroll 4   /* unrolled, the accumulators stay in registers instead of a stack array */
    for (int r = 0; r < 4; r++) a[r] = _mm256_add_ps(a[r], a[r + 4]);
#pragma GCC unroll 2
    for (int r = 0; r < 2; r++) a[r] = _mm256_add_ps(a[r], a[r + 2]);
    return fold8_avx2(_mm256_add_ps(a[0], a[1]));
}

/* 8 fp32 values from 8 fp16 or bf16 values */
static inline SIMD_INLINE __m256 load_f16_avx2(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
static inline SIMD_INLINE __m256 load_f32_avx2(const float *p) { return _mm256_loadu_ps(p); }

/* The end of dot_f32_avx2 for accumulators acc over x, y[0..np): fold, then the tail np..n in
 * ggml_vec_dot_f32's float sum (see dot_f32_row; also used by the GDN recurrence, which fills acc
 * itself). */
static inline SIMD_INLINE float dot_f32_finish_avx2(__m256 acc[8], const float *x, const float *y, int64_t np, int64_t n) {
    float sum = (float)fold64_avx2(acc);
    for (int64_t i = np; i < n; i++) sum += x[i] * y[i];
    return sum;
}

SIMD static float dot_f32_avx2(const void *w, const void *a, int64_t n) {
    const float *x = w, *y = a;
    __m256 acc[8];
    for (int r = 0; r < 8; r++) acc[r] = _mm256_setzero_ps();
    int64_t np = n & ~(int64_t)63;
    for (int64_t i = 0; i < np; i += 64)
#pragma GCC unroll 8   /* acc in registers */
        for (int r = 0; r < 8; r++) acc[r] = _mm256_fmadd_ps(load_f32_avx2(x + i + 8 * r), load_f32_avx2(y + i + 8 * r), acc[r]);
    return dot_f32_finish_avx2(acc, x, y, np, n);
}

SIMD static float dot_f16_avx2(const void *w, const void *a, int64_t n) {
    const uint16_t *x = w, *y = a;
    __m256 acc[8];
    for (int r = 0; r < 8; r++) acc[r] = _mm256_setzero_ps();
    int64_t np = n & ~(int64_t)63;
    for (int64_t i = 0; i < np; i += 64)
#pragma GCC unroll 8   /* acc in registers */
        for (int r = 0; r < 8; r++) acc[r] = _mm256_fmadd_ps(load_f16_avx2(x + i + 8 * r), load_f16_avx2(y + i + 8 * r), acc[r]);
    double sum = fold64_avx2(acc);
    for (int64_t i = np; i < n; i++) sum += f16c(x[i]) * f16c(y[i]);
    return (float)sum;
}

SIMD static float dot_f16_tile_avx2(const void *w, const void *a, int64_t n) {
    if (n % 16) return dot_f16_avx2(w, a, n);
    const uint16_t *x = w, *y = a;
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t i = 0; i < n; i += 16)
        for (int r = 0; r < 2; r++) acc[r] = _mm256_fmadd_ps(load_f16_avx2(x + i + 8 * r), load_f16_avx2(y + i + 8 * r), acc[r]);
    return fold8_avx2(_mm256_add_ps(acc[0], acc[1]));
}

/* bf16_pairs on 16 lanes in two registers: a 32-bit word l holds elements 2l (low half) and 2l+1
 * (high half), so masking gives the odd element and shifting the even one, as fp32. Products of
 * two bf16 are exact, so fma equals the scalar multiply-then-add. */
static inline SIMD_INLINE void bf16_pairs_avx2(__m256 acc[2], const uint16_t *x, const uint16_t *y) {
    const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
    for (int r = 0; r < 2; r++) {
        __m256i vx = _mm256_loadu_si256((const __m256i *)(x + 16 * r)), vy = _mm256_loadu_si256((const __m256i *)(y + 16 * r));
        acc[r] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(vx, hi)), _mm256_castsi256_ps(_mm256_and_si256(vy, hi)), acc[r]);
        acc[r] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(vx, 16)), _mm256_castsi256_ps(_mm256_slli_epi32(vy, 16)), acc[r]);
    }
}

SIMD static float dot_bf16_avx2(const void *w, const void *a, int64_t n) {
    const uint16_t *x = w, *y = a;
    __m256 c1[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()}, c2[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    int64_t np = n & ~(int64_t)63;
    for (int64_t i = 0; i < np; i += 64) {
        bf16_pairs_avx2(c1, x + i, y + i);
        bf16_pairs_avx2(c2, x + i + 32, y + i + 32);
    }
    double sum = (double)fold8_avx2(_mm256_add_ps(c1[0], c1[1])) + (double)fold8_avx2(_mm256_add_ps(c2[0], c2[1]));
    for (int64_t i = np; i < n; i++) sum += bf16_to_fp32(x[i]) * bf16_to_fp32(y[i]);
    return (float)sum;
}

/* The tile order's F32 and BF16 dots (n a multiple of 16, BF16 32) of one weight row against R
 * activation rows stride bytes apart: per row two 8-lane chains over the pieces of 16 (BF16:
 * bf16_pairs_avx2's steps), folded by fold8; each load of the weight row serves the R rows (a
 * prompt batch's F32 router and BF16 gates were bound by their loads: two per multiply-add) */
static inline SIMD_INLINE void float_tile_rows_avx2(const void *w, bool bf16, const void *a, size_t stride, const int R, int64_t n, float *out) {
    __m256 acc[MAX_ROWS][2];
    #pragma GCC unroll 8
    for (int r = 0; r < R; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    if (bf16) {   /* bf16_pairs_avx2's steps */
        const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
        for (int64_t i = 0; i < n; i += 32)
            for (int k = 0; k < 2; k++) {
                __m256i vx = _mm256_loadu_si256((const __m256i *)((const uint16_t *)w + i + 16 * k));
                __m256 xo = _mm256_castsi256_ps(_mm256_and_si256(vx, hi)), xe = _mm256_castsi256_ps(_mm256_slli_epi32(vx, 16));
                #pragma GCC unroll 8
                for (int r = 0; r < R; r++) {
                    __m256i vy = _mm256_loadu_si256((const __m256i *)((const uint16_t *)((const uint8_t *)a + r * stride) + i + 16 * k));
                    acc[r][k] = _mm256_fmadd_ps(xo, _mm256_castsi256_ps(_mm256_and_si256(vy, hi)), acc[r][k]);
                    acc[r][k] = _mm256_fmadd_ps(xe, _mm256_castsi256_ps(_mm256_slli_epi32(vy, 16)), acc[r][k]);
                }
            }
    } else {
        for (int64_t i = 0; i < n; i += 16) {
            __m256 x0 = _mm256_loadu_ps((const float *)w + i), x1 = _mm256_loadu_ps((const float *)w + i + 8);
            #pragma GCC unroll 8
            for (int r = 0; r < R; r++) {
                const float *y = (const float *)((const uint8_t *)a + r * stride) + i;
                acc[r][0] = _mm256_fmadd_ps(x0, _mm256_loadu_ps(y), acc[r][0]);
                acc[r][1] = _mm256_fmadd_ps(x1, _mm256_loadu_ps(y + 8), acc[r][1]);
            }
        }
    }
    #pragma GCC unroll 8
    for (int r = 0; r < R; r++) out[r] = fold8_avx2(_mm256_add_ps(acc[r][0], acc[r][1]));
}

/* the single dots of the tile order: one activation row (lengths it does not cover: the row order) */
SIMD static float dot_f32_tile_avx2(const void *w, const void *a, int64_t n) {
    if (n % 16) return dot_f32_avx2(w, a, n);
    float o;
    float_tile_rows_avx2(w, false, a, 0, 1, n, &o);
    return o;
}
SIMD static float dot_bf16_tile_avx2(const void *w, const void *a, int64_t n) {
    if (n % 32) return dot_bf16_avx2(w, a, n);
    float o;
    float_tile_rows_avx2(w, true, a, 0, 1, n, &o);
    return o;
}

/* 8 int32 lanes of q . a for signed bytes q and a, lane l = elements 4l..4l+3 (ggml's
 * mul_sum_i8_pairs): |q| times a with q's sign, as unsigned x signed products; one instruction
 * where the build targets AVX512-VNNI, maddubs + madd otherwise (same sums: nothing saturates). */
static inline SIMD_INLINE __m256i lanes_i8_avx2(__m256i qa, __m256i q, __m256i a) {   /* qa = |q| */
    __m256i as = _mm256_sign_epi8(a, q);
#if VNNI
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), qa, as);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(qa, as), _mm256_set1_epi16(1));
#endif
}

/* acc plus 8 int32 lanes from 32 unsigned q (0..63), 32 signed a and an int16 scale s per pair of
 * products: lane l += sum over elements 4l..4l+3 of s q a (no pair sum of maddubs can saturate);
 * with AVX512-VNNI the scaling madd and the add are one vpdpwssd (the 512-bit builds: below) */
#if !ZMM
static inline SIMD_INLINE __m256i lanes_u8i8_avx2(__m256i acc, __m256i q, __m256i a, __m256i s) {
#if VNNI
    return _mm256_dpwssd_epi32(acc, _mm256_maddubs_epi16(q, a), s);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(q, a), s));
#endif
}
#endif

/* Where the build targets AVX-512 (BW and VNNI), the K-quant kernels put two 32-element chunks of a
 * block side by side in one 512-bit register: chunk 2p's lanes in the low half, chunk 2p+1's in the
 * high half, the halves added at the end of the block. Integer sums are exact in any grouping, so
 * each block's 8 lanes, and every float operation after them, are those of the 256-bit code: the
 * same bits from half the multiply instructions. */
#if ZMM
/* lanes_u8i8_avx2 on a pair of chunks; a: the pair's 64 activation bytes */
static inline SIMD_INLINE __m512i lanes_u8i8_zmm(__m512i acc, __m512i q, const int8_t *a, __m512i s) {
    return _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(q, _mm512_loadu_si512((const void *)a)), s);
}
/* the 8 lanes of a block: low half + high half */
static inline SIMD_INLINE __m256i fold_pair_zmm(__m512i v) { return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1)); }
/* 16-bit lanes holding lo in the low half and hi in the high half (per-lane shift counts) */
static inline SIMD_INLINE __m512i halves16_zmm(short lo, short hi) {
    return _mm512_inserti64x4(_mm512_set1_epi16(lo), _mm256_set1_epi16(hi), 1);
}
/* 32 bytes in both halves */
static inline SIMD_INLINE __m512i twice_zmm(const uint8_t *p) { return _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)p)); }
#endif

/* The quantized kernels take R <= MAX_ROWS activation rows at once (a, a + stride, ..., or for Q8_0
 * activations a packed group, BlockQ8_0x8) against one weight row: the weight block is unpacked once
 * and dotted with every row, each row keeping its own accumulators, so each result is exactly the
 * single-row dot (the wrappers at the end: R = 1, or for Q8_0 activations a kernel of its own on the
 * plain row). Each kernel is written once as an inline body for a constant R and instantiated for
 * each R (rows_*_avx2 below), unrolled, so that the compiler keeps every row's accumulators in
 * registers. */
static inline SIMD_INLINE const void *act_block(const void *a, size_t stride, int r, size_t block_bytes, int64_t b) {
    return (const uint8_t *)a + r * stride + (size_t)b * block_bytes;
}

/* [sum v0, sum v1, sum v2, sum v3] of four 8-lane int32 vectors */
static inline SIMD_INLINE __m128i hsum4_i32_avx2(__m256i v0, __m256i v1, __m256i v2, __m256i v3) {
    __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(v0, v1), _mm256_hadd_epi32(v2, v3));
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

/* dot_q8_0 / dot_q4_0: acc = fma(d_w d_a, lanes, acc) per block, 8 float lanes; q is the block's
 * weights as signed bytes (Q4_0: unpacked first), qa = |q|, qs the activation block's quants. */
static inline SIMD_INLINE __m256 q8_0_block_avx2(__m256i qa, __m256i q, const int8_t *qs, float d, __m256 acc) {
    __m256i l = lanes_i8_avx2(qa, q, _mm256_loadu_si256((const __m256i *)qs));
    return _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(l), acc);
}

/* The lanes of lanes_i8_avx2 for row r of a packed block: with VNNI, (a + 128) q summed from
 * the start value nc = -128 sum q (q8_0_packed_start_avx2, once per weight block), which leaves
 * exactly sum a q; else from |q| and a as above. */
static inline SIMD_INLINE __m256i q8_0_packed_start_avx2(__m256i q) {
#if VNNI
    __m256i zero = _mm256_setzero_si256();
    return _mm256_sub_epi32(zero, _mm256_dpbusd_epi32(zero, _mm256_set1_epi8((char)PACK_OFFSET), q));
#else
    (void)q;
    return _mm256_setzero_si256();
#endif
}
static inline SIMD_INLINE __m256i q8_0_packed_lanes_avx2(__m256i qa, __m256i q, __m256i nc, const int8_t *qs) {
    __m256i a = _mm256_loadu_si256((const __m256i *)qs);
#if VNNI
    (void)qa;
    return _mm256_dpbusd_epi32(nc, a, q);
#else
    (void)nc;
    return lanes_i8_avx2(qa, q, a);
#endif
}

/* The same for R rows of a packed group (BlockQ8_0x8): the R products d_w d_a in one multiply. */
static inline SIMD_INLINE void q8_0_block_rows_avx2(__m256i q, float dw, const BlockQ8_0x8 *y, const int R, __m256 acc[MAX_ROWS]) {
    __m256i qa = _mm256_sign_epi8(q, q), nc = q8_0_packed_start_avx2(q);
    __m256 d = _mm256_mul_ps(_mm256_set1_ps(dw), _mm256_loadu_ps(y->d));
    #pragma GCC unroll 8
    for (int r = 0; r < R; r++) {   /* lane r of d in every lane */
        __m256 dr = _mm256_permutevar8x32_ps(d, _mm256_set1_epi32(r));
        acc[r] = _mm256_fmadd_ps(dr, _mm256_cvtepi32_ps(q8_0_packed_lanes_avx2(qa, q, nc, y->qs[r])), acc[r]);
    }
}

/* unpack_q4_0: low nibbles are elements 0..15, high nibbles 16..31, minus 8 (nibbles_q4_0_avx2:
 * the nibbles alone, 0..15) */
static inline SIMD_INLINE __m256i nibbles_q4_0_avx2(const BlockQ4_0 *b) {
    __m256i x = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)b->qs));   /* in both halves */
    return _mm256_and_si256(_mm256_srlv_epi64(x, _mm256_set_epi64x(4, 4, 0, 0)), _mm256_set1_epi8(15));
}
static inline SIMD_INLINE __m256i unpack_q4_0_avx2(const BlockQ4_0 *b) { return _mm256_sub_epi8(nibbles_q4_0_avx2(b), _mm256_set1_epi8(8)); }

/* q4: the weights are Q4_0 blocks (else Q8_0) */
static inline SIMD_INLINE __m256i q8_0_weights_avx2(const void *w, bool q4, int64_t b) {
    return q4 ? unpack_q4_0_avx2((const BlockQ4_0 *)w + b) : _mm256_loadu_si256((const __m256i *)((const BlockQ8_0 *)w)[b].qs);
}
static inline SIMD_INLINE float q8_0_weight_d(const void *w, bool q4, int64_t b) {
    return f16c(q4 ? ((const BlockQ4_0 *)w)[b].d : ((const BlockQ8_0 *)w)[b].d);
}

static inline SIMD_INLINE float q8_0_dot_avx2(const void *w, bool q4, const void *a, int64_t n) {
    const BlockQ8_0 *y = a;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / 32; b++) {
        __m256i q = q8_0_weights_avx2(w, q4, b);
        acc = q8_0_block_avx2(_mm256_sign_epi8(q, q), q, y[b].qs, q8_0_weight_d(w, q4, b) * f16c(y[b].d), acc);
    }
    return fold8_avx2(acc);
}

/* The multi-row kernels are compute-bound, and their first pass over a tile of weight rows waits for
 * memory (matmul_rows): they ask for the bytes PREFETCH_AHEAD ahead of the block in hand, which at
 * their pace arrive about when needed (measured: 4-5% off a 16-row verify on Q8_0 weights). The
 * decode kernels stream each row so too: the further ahead, the more bytes in flight, which a
 * machine with more bandwidth per core needs (Little's law). On a zen5 EPYC reading 65-70 GB/s
 * with two cores, a Q8_0 output head of 540 MB took 9.0-9.3 ms at 1024 bytes ahead, 7.4-7.6 at
 * 2048, 7.3-7.4 at 4096; the Q6_K head 6.0-6.4 / 5.6-6.2 / 6.2-6.6 ms. */
enum { PREFETCH_AHEAD = 2048 };
/* The batch kernels that take a weight row at a time (or two) ask, block by block, for the same block
 * of the row ROWS_AHEAD rows on (the rows of a matrix lie one after another): about one row ahead was
 * too close, and 16 rows of a 32768 x 2048 matrix from memory on one thread took 1.25-1.7x their
 * time in cache (Q6_K 9.1 -> 7.5-7.8 ms with it, 7.3 in cache; Q8_0 in tile_q8_0_zmm 14.0 -> 8.4,
 * 8.1 in cache) */
enum { ROWS_AHEAD = 8 };

/* The sixteen-row kernels' reads: the next sixteen rows (the bytes after these sixteen, which lie one
 * after another) asked for in nb equal parts in address order, part b while block b of nb is worked
 * on, so that the next tile has come by the time it is wanted. (Asking for block b of each of the
 * next sixteen rows, lines a row apart, left a 16-row batch of a Q4_K 32768 x 2048 matrix from
 * memory on one thread at 8.1-8.2 ms; in parts 7.0-7.4; in cache 6.5.) */
static inline SIMD_INLINE void prefetch_next16(const void *w, size_t row_bytes, int64_t b, int64_t nb) {
    size_t span = 16 * row_bytes, part = (span / (size_t)nb + 63) & ~(size_t)63;
    const char *next = (const char *)w + span + (size_t)b * part;
    for (size_t c = 0; c < part; c += 64) _mm_prefetch(next + c, _MM_HINT_T0);
}

/* q8_0_dot_avx2 for four weight rows and one activation row (dot_w4_q8_0_avx2 takes its rows in
 * turn): their chains side by side */
static inline SIMD_INLINE void q8_0_dot_w4_avx2(const void *w, size_t spacing, bool q4, const void *a, int64_t n, float out[4]) {
    const BlockQ8_0 *y = a;
    __m256 acc[4];
    for (int i = 0; i < 4; i++) acc[i] = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / 32; b++) {
        float dy = f16c(y[b].d);
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            const uint8_t *wi = (const uint8_t *)w + i * spacing;
            _mm_prefetch((const char *)wi + b * (q4 ? 18 : 34) + PREFETCH_AHEAD, _MM_HINT_T0);
            __m256i q = q8_0_weights_avx2(wi, q4, b);
            acc[i] = q8_0_block_avx2(_mm256_sign_epi8(q, q), q, y[b].qs, q8_0_weight_d(wi, q4, b) * dy, acc[i]);
        }
    }
    for (int i = 0; i < 4; i++) out[i] = fold8_avx2(acc[i]);
}


static inline SIMD_INLINE void q8_0_rows_avx2(const void *w, bool q4, const void *a, const int R, int64_t n, float *out) {
    const BlockQ8_0x8 *y = a;
    __m256 acc[MAX_ROWS];
    #pragma GCC unroll 8
    for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / 32; b++) {
        _mm_prefetch((const char *)w + b * (q4 ? 18 : 34) + PREFETCH_AHEAD, _MM_HINT_T0);
        q8_0_block_rows_avx2(q8_0_weights_avx2(w, q4, b), q8_0_weight_d(w, q4, b), &y[b], R, acc);
    }
    #pragma GCC unroll 8
    for (int r = 0; r < R; r++) out[r] = fold8_avx2(acc[r]);
}

/* [sum v[0], ..., sum v[7]] of eight 8-lane int32 vectors */
static inline SIMD_INLINE __m256i hsum8_i32_avx2(const __m256i v[8]) {
    __m256i h0 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    __m256i h1 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(h0, h1, 0x20), _mm256_permute2x128_si256(h0, h1, 0x31));
}

/* dot_q4_0_8x8: one integer sum per block, acc = fma(isum, d_w d_a, acc). Reducing each block's
 * lanes to its sum alone cost more than its products (the kernel ran at 8 GB/s): four blocks'
 * lanes are reduced together and their d_w d_a formed in one register, then added to acc one
 * block at a time, in block order. */
static inline SIMD_INLINE float q4_0_8x8_dot_avx2(const void *w, const void *a, int64_t n) {
    const BlockQ4_0 *x = w;
    const BlockQ8_0 *y = a;
    int64_t nb = n / 32, b = 0;
    float acc = 0;
    for (; b + 4 <= nb; b += 4) {
        __m256i l[4];
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            __m256i q = unpack_q4_0_avx2(&x[b + i]);
            l[i] = lanes_i8_avx2(_mm256_sign_epi8(q, q), q, _mm256_loadu_si256((const __m256i *)y[b + i].qs));
        }
        __m128 isum = _mm_cvtepi32_ps(hsum4_i32_avx2(l[0], l[1], l[2], l[3]));
        __m128i dw = _mm_setr_epi16((short)x[b].d, (short)x[b + 1].d, (short)x[b + 2].d, (short)x[b + 3].d, 0, 0, 0, 0);
        __m128i da = _mm_setr_epi16((short)y[b].d, (short)y[b + 1].d, (short)y[b + 2].d, (short)y[b + 3].d, 0, 0, 0, 0);
        __m128 d = _mm_mul_ps(_mm_cvtph_ps(dw), _mm_cvtph_ps(da));
        acc = fmaf(_mm_cvtss_f32(isum), _mm_cvtss_f32(d), acc);
        acc = fmaf(_mm_cvtss_f32(_mm_movehdup_ps(isum)), _mm_cvtss_f32(_mm_movehdup_ps(d)), acc);
        acc = fmaf(_mm_cvtss_f32(_mm_unpackhi_ps(isum, isum)), _mm_cvtss_f32(_mm_unpackhi_ps(d, d)), acc);
        acc = fmaf(_mm_cvtss_f32(_mm_shuffle_ps(isum, isum, 3)), _mm_cvtss_f32(_mm_shuffle_ps(d, d, 3)), acc);
    }
    for (; b < nb; b++) {
        __m256i q = unpack_q4_0_avx2(&x[b]);
        __m256i l = lanes_i8_avx2(_mm256_sign_epi8(q, q), q, _mm256_loadu_si256((const __m256i *)y[b].qs));
        __m128i s = _mm_add_epi32(_mm256_castsi256_si128(l), _mm256_extracti128_si256(l, 1));
        s = _mm_hadd_epi32(s, s);
        acc = fmaf((float)_mm_cvtsi128_si32(_mm_hadd_epi32(s, s)), f16c(x[b].d) * f16c(y[b].d), acc);
    }
    return acc;
}

#if ZMM
/* Four blocks of four weight rows at once (the 512-bit builds): 128-bit lane j of a register holds
 * block j, so one instruction works on four blocks. Every field of a Q4_0 or Q8_0 block starts at
 * an even byte (18- and 34-byte blocks, 2-byte d), so word permutes (vpermt2w, AVX512BW) gather
 * the nibbles, the scales and the activation halves straight from plain loads of the rows; the
 * 16 int32 sums (block j, row i) come out in lane 4j + i of one register after three pairwise
 * adds, and the rows' chains take their fma one block at a time, in block order, as below. Each
 * row asks for its bytes PREFETCH_AHEAD ahead (the hardware prefetcher alone kept the Q4_0 decode
 * at 22 GB/s here, against 28-30 with it). */
static inline SIMD_INLINE __m512i words_zmm(__m512i lo, const short idx[32], __m512i hi) {
    return _mm512_permutex2var_epi16(lo, _mm512_loadu_si512((const void *)idx), hi);
}
/* lanes [a0+a1, a2+a3, b0+b1, b2+b3] in each 128-bit lane (vphaddd per lane) */
static inline SIMD_INLINE __m512i hadd_zmm(__m512i a, __m512i b) {
    __m512 x = _mm512_castsi512_ps(a), y = _mm512_castsi512_ps(b);
    return _mm512_add_epi32(_mm512_castps_si512(_mm512_shuffle_ps(x, y, 0x88)), _mm512_castps_si512(_mm512_shuffle_ps(x, y, 0xdd)));
}
/* Word indices (32 + k: word k of the second table). A 72-byte run of four Q4_0 blocks is loaded as
 * its first 64 bytes and the 16 bytes at 56 (block 3's nibbles); four Q8_0 blocks (136 bytes) as
 * bytes 0..127 (the low halves of the quants, the scales) and 8..135 (the high halves). */
static const short Q4_0_NIBBLES[32] = {1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 12, 13, 14, 15, 16, 17,
                                       19, 20, 21, 22, 23, 24, 25, 26, 32, 33, 34, 35, 36, 37, 38, 39};
static const short Q4_0_D01[32] = {0, 32, 0, 0, 9, 41, 0, 0, 18, 50, 0, 0, 27, 59, 0, 0};   /* d of rows 0, 1 */
static const short Q4_0_D23[32] = {0, 0, 0, 32, 0, 0, 9, 41, 0, 0, 18, 50, 0, 0, 27, 59};   /* d of rows 2, 3 */
static const short Q8_0_LOW[32] = {1, 2, 3, 4, 5, 6, 7, 8, 18, 19, 20, 21, 22, 23, 24, 25,
                                   35, 36, 37, 38, 39, 40, 41, 42, 52, 53, 54, 55, 56, 57, 58, 59};
static const short Q8_0_HIGH[32] = {5, 6, 7, 8, 9, 10, 11, 12, 22, 23, 24, 25, 26, 27, 28, 29,
                                    39, 40, 41, 42, 43, 44, 45, 46, 56, 57, 58, 59, 60, 61, 62, 63};
static const short Q8_0_D[32] = {0, 0, 0, 0, 17, 17, 17, 17, 34, 34, 34, 34, 51, 51, 51, 51};

/* acc (row i in lane i) after blocks b..b+3 of the four rows x[i] against the activations y */
static inline SIMD_INLINE __m128 q4_0_8x8_w4_group_zmm(const BlockQ4_0 *const x[4], const BlockQ8_0 *y, int64_t b, __m128 acc) {
    const uint8_t *ya = (const uint8_t *)(y + b);
    __m512i a0 = _mm512_loadu_si512((const void *)ya), a1 = _mm512_loadu_si512((const void *)(ya + 64));
    __m512i alo = words_zmm(a0, Q8_0_LOW, a1);   /* elements 0..15 of block j in lane j */
    __m512i ahi = words_zmm(_mm512_loadu_si512((const void *)(ya + 8)), Q8_0_HIGH, _mm512_loadu_si512((const void *)(ya + 72)));
    __m512i eight = _mm512_set1_epi8(8), m15 = _mm512_set1_epi8(15);
    __m512i start = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), eight, alo), eight, ahi));
    __m512i l[4], w[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        const uint8_t *p = (const uint8_t *)(x[i] + b);
        _mm_prefetch((const char *)p + PREFETCH_AHEAD, _MM_HINT_T0);
        _mm_prefetch((const char *)p + PREFETCH_AHEAD + 64, _MM_HINT_T0);
        w[i] = _mm512_loadu_si512((const void *)p);
        __m512i q = words_zmm(w[i], Q4_0_NIBBLES, _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(p + 56))));
        l[i] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(start, _mm512_and_si512(q, m15), alo), _mm512_and_si512(_mm512_srli_epi16(q, 4), m15), ahi);
    }
    __m512 isum = _mm512_cvtepi32_ps(hadd_zmm(hadd_zmm(l[0], l[1]), hadd_zmm(l[2], l[3])));   /* lane 4j + i */
    __m512i dw = _mm512_mask_blend_epi16(0xcccc, words_zmm(w[0], Q4_0_D01, w[1]), words_zmm(w[2], Q4_0_D23, w[3]));
    __m512 da = _mm512_cvtph_ps(_mm512_castsi512_si256(words_zmm(a0, Q8_0_D, a1)));
    __m512 d = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_castsi512_si256(dw)), da);   /* d_w d_a */
    acc = _mm_fmadd_ps(_mm512_castps512_ps128(isum), _mm512_castps512_ps128(d), acc);
    acc = _mm_fmadd_ps(_mm512_extractf32x4_ps(isum, 1), _mm512_extractf32x4_ps(d, 1), acc);
    acc = _mm_fmadd_ps(_mm512_extractf32x4_ps(isum, 2), _mm512_extractf32x4_ps(d, 2), acc);
    return _mm_fmadd_ps(_mm512_extractf32x4_ps(isum, 3), _mm512_extractf32x4_ps(d, 3), acc);
}
#endif

/* q4_0_8x8_dot_avx2 for four weight rows and one activation row (dot_w4_q4_0_8x8_avx2 takes its rows
 * in turn): the rows' chains in the lanes of one register, their block sums reduced together */
static inline SIMD_INLINE void q4_0_8x8_dot_w4_avx2(const void *w, size_t spacing, const void *a, int64_t n, float out[4]) {
    const BlockQ8_0 *y = a;
    const BlockQ4_0 *x[4];
    for (int i = 0; i < 4; i++) x[i] = (const BlockQ4_0 *)((const uint8_t *)w + i * spacing);
    __m128 acc = _mm_setzero_ps();
    int64_t b = 0;
#if ZMM
    for (; b + 4 <= n / 32; b += 4) acc = q4_0_8x8_w4_group_zmm(x, y, b, acc);
#endif
    for (; b < n / 32; b++) {
        /* row i's sum (q - 8) . a, exact in integers whatever their order: its pairs' sums
         * (maddubs on the nibbles q, less those of 8 a: at most 2 x 8 x 128 in size), added two by
         * two across the four rows (two rounds of vphaddw: at most 8,192), then in pairs into
         * lane i of each 128-bit half, and the halves */
        __m256i ya = _mm256_loadu_si256((const __m256i *)y[b].qs), c = _mm256_maddubs_epi16(_mm256_set1_epi8(8), ya), m[4];
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            _mm_prefetch((const char *)&x[i][b] + PREFETCH_AHEAD, _MM_HINT_T0);
            m[i] = _mm256_sub_epi16(_mm256_maddubs_epi16(nibbles_q4_0_avx2(&x[i][b]), ya), c);
        }
        __m256i s = _mm256_madd_epi16(_mm256_hadd_epi16(_mm256_hadd_epi16(m[0], m[1]), _mm256_hadd_epi16(m[2], m[3])), _mm256_set1_epi16(1));
        __m128i isum = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        __m128i dw = _mm_setr_epi16((short)x[0][b].d, (short)x[1][b].d, (short)x[2][b].d, (short)x[3][b].d, 0, 0, 0, 0);
        __m128 d = _mm_mul_ps(_mm_cvtph_ps(dw), _mm_set1_ps(f16c(y[b].d)));   /* d_w d_a per row */
        acc = _mm_fmadd_ps(_mm_cvtepi32_ps(isum), d, acc);
    }
    _mm_storeu_ps(out, acc);
}

/* The same for R rows of a packed group, whose accumulators sit in the lanes of one register. */
static inline SIMD_INLINE void q4_0_8x8_rows_avx2(const void *w, const void *a, const int R, int64_t n, float *out) {
    const BlockQ4_0 *x = w;
    const BlockQ8_0x8 *y = a;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / 32; b++) {
        __m256i q = unpack_q4_0_avx2(&x[b]), qa = _mm256_sign_epi8(q, q), nc = q8_0_packed_start_avx2(q), l[MAX_ROWS];
        #pragma GCC unroll 8
        for (int r = 0; r < MAX_ROWS; r++) l[r] = r < R ? q8_0_packed_lanes_avx2(qa, q, nc, y[b].qs[r]) : _mm256_setzero_si256();
        __m256 d = _mm256_mul_ps(_mm256_set1_ps(f16c(x[b].d)), _mm256_loadu_ps(y[b].d));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hsum8_i32_avx2(l)), d, acc);
    }
    float o[MAX_ROWS];
    _mm256_storeu_ps(o, acc);
    #pragma GCC unroll 8
    for (int r = 0; r < R; r++) out[r] = o[r];
}

/* The 16 bytes at p of eight rows row_bytes apart, as 4-byte words transposed: T[m] lane i holds word
 * m of row i. Rows i and i + 4 are loaded into the two 128-bit halves of a register, then words are
 * transposed 4 x 4 within each half (words16_zmm is the same in 512 bits). */
static inline SIMD_INLINE void words4_avx2(const uint8_t *p, size_t row_bytes, __m256i T[4]) {
    __m256i Y[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        Y[i] = _mm256_set_m128i(_mm_loadu_si128((const __m128i *)(p + (i + 4) * row_bytes)), _mm_loadu_si128((const __m128i *)(p + i * row_bytes)));
    __m256i t0 = _mm256_unpacklo_epi32(Y[0], Y[1]), t1 = _mm256_unpackhi_epi32(Y[0], Y[1]);
    __m256i t2 = _mm256_unpacklo_epi32(Y[2], Y[3]), t3 = _mm256_unpackhi_epi32(Y[2], Y[3]);
    T[0] = _mm256_unpacklo_epi64(t0, t2), T[1] = _mm256_unpackhi_epi64(t0, t2);
    T[2] = _mm256_unpacklo_epi64(t1, t3), T[3] = _mm256_unpackhi_epi64(t1, t3);
}

/* dot_q4_0_8x8 for eight weight rows against R rows of a packed group (DotTileFn), as llama.cpp's
 * repacked gemm lays out the work: the eight rows' block b transposed into eight registers W_g
 * whose lane i holds row i's values 4g..4g+3, so that each activation row's four values, broadcast,
 * meet all eight weight rows at once, and the block's eight sums land in eight lanes with no
 * reduction across lanes. With VNNI one vpdpbusd a group: the packed activations are stored + 128
 * (unsigned), the weights taken signed (q - 8), and the 128 sum q term of each weight row is one
 * start value per block, shared by the R rows. Without it, vpmaddubsw takes the weights as
 * unsigned nibbles q against the signed activations (a pair's sum at most 2 x 15 x 128, eight
 * groups' at most 30,720: no int16 overflow), vpmaddwd adds each lane's two halves, and the
 * -8 sum a term is the packed row's sum. Per (weight row, activation row) acc = fma(isum, d_w d_a,
 * acc) in block order, as the single-row kernels. */
static inline SIMD_INLINE void q4_0_8x8_tile_avx2(const void *w, size_t row_bytes, const void *a, const int R, int64_t n, float *y,
                                                  size_t ystride) {
    const BlockQ8_0x8 *p = a;
    __m256 acc[MAX_ROWS];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / 32; b++) {
        const BlockQ4_0 *x[8];
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) x[i] = (const BlockQ4_0 *)((const uint8_t *)w + i * row_bytes) + b;
        __m256i T[4], W[8];   /* T[m] lane i: word m of row i's quants, values 4m.. (low nibbles) and 16+4m.. (high) */
        words4_avx2(x[0]->qs, row_bytes, T);
        const __m256i bias = _mm256_set1_epi8(VNNI ? 8 : 0);
#pragma GCC unroll 4
        for (int m = 0; m < 4; m++) {
            W[m] = _mm256_sub_epi8(_mm256_and_si256(T[m], _mm256_set1_epi8(15)), bias);
            W[m + 4] = _mm256_sub_epi8(_mm256_and_si256(_mm256_srli_epi16(T[m], 4), _mm256_set1_epi8(15)), bias);
        }
#if VNNI
        __m256i start = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) start = _mm256_dpbusd_epi32(start, _mm256_set1_epi8((char)PACK_OFFSET), W[g]);
        start = _mm256_sub_epi32(_mm256_setzero_si256(), start);
#endif
        __m256 dw = _mm256_cvtph_ps(_mm_setr_epi16((short)x[0]->d, (short)x[1]->d, (short)x[2]->d, (short)x[3]->d, (short)x[4]->d,
                                                   (short)x[5]->d, (short)x[6]->d, (short)x[7]->d));
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            const int8_t *q = p[b].qs[r];
#if VNNI
            __m256i l[2] = {start, _mm256_setzero_si256()};   /* two chains of four (one of eight: 20% slower) */
#else
            __m256i l[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};   /* int16 pair sums */
#endif
#pragma GCC unroll 8
            for (int g = 0; g < 8; g++) {   /* W[g] holds values 4g..4g+3 (words g, or g - 4 shifted) */
                int32_t v;
                memcpy(&v, q + 4 * g, 4);
#if VNNI
                l[g % 2] = _mm256_dpbusd_epi32(l[g % 2], _mm256_set1_epi32(v), W[g]);
#else
                l[g % 2] = _mm256_add_epi16(l[g % 2], _mm256_maddubs_epi16(W[g], _mm256_set1_epi32(v)));
#endif
            }
#if VNNI
            __m256i isum = _mm256_add_epi32(l[0], l[1]);
#else
            __m256i isum = _mm256_sub_epi32(_mm256_madd_epi16(_mm256_add_epi16(l[0], l[1]), _mm256_set1_epi16(1)), _mm256_set1_epi32(8 * p[b].sum[r]));
#endif
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, _mm256_set1_ps(p[b].d[r])), acc[r]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) _mm256_storeu_ps(y + (size_t)r * ystride, acc[r]);
}
/* A tile kernel's body (DotTileFn's arguments, R constant) for R = 1..8, R as a constant in each
 * instance, so that the rows' accumulators stay in registers */
typedef void KTileFn(const void *w, size_t row_bytes, const void *a, const int R, int64_t n, float *y, size_t ystride);
static inline SIMD_INLINE void tile_upto_eight_avx2(KTileFn *k, const void *w, size_t row_bytes, const void *a, int R, int64_t n, float *y,
                                                    size_t ystride) {
    switch (R) {
    case 1: k(w, row_bytes, a, 1, n, y, ystride); break;
    case 2: k(w, row_bytes, a, 2, n, y, ystride); break;
    case 3: k(w, row_bytes, a, 3, n, y, ystride); break;
    case 4: k(w, row_bytes, a, 4, n, y, ystride); break;
    case 5: k(w, row_bytes, a, 5, n, y, ystride); break;
    case 6: k(w, row_bytes, a, 6, n, y, ystride); break;
    case 7: k(w, row_bytes, a, 7, n, y, ystride); break;
    default: k(w, row_bytes, a, 8, n, y, ystride); break;
    }
}
SIMD static void tile_q4_0_8x8_avx2(const void *w, size_t row_bytes, const void *a, int R, int64_t n, float *y, size_t ystride) {
    tile_upto_eight_avx2(q4_0_8x8_tile_avx2, w, row_bytes, a, R, n, y, ystride);
}

#if ZMM
/* rows_q8_0_avx2 for eight weight rows against R rows of a packed group (DotTileFn), two weight rows
 * at a time in the halves of 512-bit registers: lanes 0..7 hold weight row i's eight lanes, lanes
 * 8..15 row i+1's, and each activation row's block, broadcast to both halves, meets the two rows in
 * one vpdpbusd; its d_w d_a for the two rows come from one product of the rows' d_w with the
 * group's eight d_a. Per (weight row, activation row) the single-row kernel's
 * fma(d_w d_a, lane, acc) in block order, and a fold of each half at the end: the same bits, with
 * half the operations a block (a 256-bit register holds one row's eight lanes). */
static inline SIMD_INLINE void q8_0_tile_zmm(const void *w, size_t row_bytes, const void *a, const int R, int64_t n, float *y,
                                             size_t ystride) {
    const BlockQ8_0x8 *p = a;
    for (int i = 0; i < 8; i += 2) {
        const BlockQ8_0 *x0 = (const BlockQ8_0 *)((const uint8_t *)w + i * row_bytes), *x1 = (const BlockQ8_0 *)((const uint8_t *)w + (i + 1) * row_bytes);
        __m512 acc[MAX_ROWS];
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
        for (int64_t b = 0; b < n / 32; b++) {
            _mm_prefetch((const char *)&x0[b] + ROWS_AHEAD * row_bytes, _MM_HINT_T0);
            _mm_prefetch((const char *)&x1[b] + ROWS_AHEAD * row_bytes, _MM_HINT_T0);
            __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)x0[b].qs)),
                                           _mm256_loadu_si256((const __m256i *)x1[b].qs), 1);
            /* the start value -128 sum q of each lane (the activations are packed + 128) */
            __m512i nc = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8((char)PACK_OFFSET), q));
            __m512 dw = _mm512_insertf32x8(_mm512_set1_ps(f16c(x0[b].d)), _mm256_set1_ps(f16c(x1[b].d)), 1);
            __m512 d = _mm512_mul_ps(dw, _mm512_broadcast_f32x8(_mm256_loadu_ps(p[b].d)));   /* lane j: d_w(half) d_a[j % 8] */
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) {
                __m512i l = _mm512_dpbusd_epi32(nc, _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)p[b].qs[r])), q);
                __m512 dr = _mm512_permutexvar_ps(_mm512_inserti64x4(_mm512_set1_epi32(r), _mm256_set1_epi32(8 + r), 1), d);
                acc[r] = _mm512_fmadd_ps(dr, _mm512_cvtepi32_ps(l), acc[r]);
            }
        }
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            y[(size_t)r * ystride + i] = fold8_avx2(_mm512_castps512_ps256(acc[r]));
            y[(size_t)r * ystride + i + 1] = fold8_avx2(_mm512_extractf32x8_ps(acc[r], 1));
        }
    }
}
SIMD static void tile_q8_0_zmm(const void *w, size_t row_bytes, const void *a, int R, int64_t n, float *y, size_t ystride) {
    tile_upto_eight_avx2(q8_0_tile_zmm, w, row_bytes, a, R, n, y, ystride);
}
#endif

/* unpack_scales_k4 in one register: bytes 0..7 the eight scales, bytes 8..15 the eight mins.
 * With s = the 12 scale bytes: A = [s0..3, s8..11, s4..7, s8..11] gives the low bits (6 of s0..7,
 * the low or high nibble of s8..11) and B = [-, s0..3, -, s4..7] the top two bits of scales and
 * mins 4..7. Reads 16 bytes; in a Q4_K/Q5_K block the quants follow the scales. */
static inline SIMD_INLINE __m128i scales_k4_avx2(const uint8_t *s) {
    __m128i v = _mm_loadu_si128((const __m128i *)s);
    __m128i A = _mm_shuffle_epi8(v, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11));
    __m128i B = _mm_shuffle_epi8(v, _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7));
    __m128i lo = _mm_or_si128(_mm_and_si128(A, _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0)),
                              _mm_and_si128(_mm_srli_epi16(A, 4), _mm_setr_epi32(0, 0, 0, 0x0f0f0f0f)));
    __m128i hi = _mm_and_si128(_mm_srli_epi16(B, 2), _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
    return _mm_or_si128(lo, hi);
}

/* The eight scales as int16 in both 128-bit halves, and (256-bit code) shuffles that broadcast scale j */
static inline SIMD_INLINE __m256i scales16_k4_avx2(__m128i scm) { return _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(scm)); }
#if !ZMM
static inline SIMD_INLINE __m256i scale_k4_avx2(__m256i sc16, int j) { return _mm256_shuffle_epi8(sc16, _mm256_set1_epi16((short)(0x0100 * (2 * j + 1) + 2 * j))); }

/* Sub-block j (32 unsigned bytes) of a Q4_K/Q5_K block (unpack_q4_K, unpack_q5_K): the low (j even)
 * or high nibbles of qs[32 (j/2) ..], plus bit j of qh as the fifth bit for Q5_K. */
static inline SIMD_INLINE __m256i k4_sub_q_avx2(const uint8_t *qs, const uint8_t *qh, int j) {
    __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * (j / 2)));
    __m256i q = _mm256_and_si256(j % 2 ? _mm256_srli_epi16(v, 4) : v, _mm256_set1_epi8(15));
    if (!qh) return q;
    __m256i h = _mm256_and_si256(_mm256_srli_epi16(_mm256_loadu_si256((const __m256i *)qh), j), _mm256_set1_epi8(1));
    return _mm256_or_si256(q, _mm256_slli_epi16(h, 4));
}

/* acc + sc_j (q_j . a_j) in 8 lanes (lane l: elements 4l..4l+3 of sub-block j) */
static inline SIMD_INLINE __m256i k4_sub_avx2(__m256i acc, __m256i q, __m256i s, const int8_t *a, int j) {
    return lanes_u8i8_avx2(acc, q, _mm256_loadu_si256((const __m256i *)(a + 32 * j)), s);
}
#endif

#if ZMM
/* Sub-blocks 2p and 2p+1 in the two halves: the low and the high nibbles of qs[32p ..] (plus bits
 * 2p and 2p+1 of qh for Q5_K), and their scales */
static inline SIMD_INLINE __m512i k4_pair_q_zmm(const uint8_t *qs, const uint8_t *qh, int p) {
    __m512i q = _mm512_and_si512(_mm512_srlv_epi16(twice_zmm(qs + 32 * p), halves16_zmm(0, 4)), _mm512_set1_epi8(15));
    if (!qh) return q;
    /* bit j = 2p (low half), 2p+1 (high half) of each qh byte moved to bit 4: shifted by 4 - j */
    __m512i h = twice_zmm(qh);
    h = p < 2 ? _mm512_sllv_epi16(h, halves16_zmm((short)(4 - 2 * p), (short)(3 - 2 * p)))
              : _mm512_srlv_epi16(h, halves16_zmm((short)(2 * p - 4), (short)(2 * p - 3)));
    return _mm512_ternarylogic_epi32(q, h, _mm512_set1_epi8(0x10), 0xF8);   /* q | (h & 0x10) */
}
static inline SIMD_INLINE __m512i k4_pair_scale_zmm(__m256i sc16, int p) {
    return _mm512_shuffle_epi8(_mm512_broadcast_i64x4(sc16), halves16_zmm((short)(0x0100 * (4 * p + 1) + 4 * p), (short)(0x0100 * (4 * p + 3) + 4 * p + 2)));
}
/* lanes[r] += the block's sub-block products for R rows (k4_sub_avx2 over j = 0..7), by pairs */
static inline SIMD_INLINE void k4_block_zmm(const uint8_t *qs, const uint8_t *qh, __m256i sc16, const void *a, size_t stride, const int R,
                                            int64_t b, __m256i *lanes) {
    __m512i lz[MAX_ROWS];
    #pragma GCC unroll 8
    for (int r = 0; r < R; r++) lz[r] = _mm512_zextsi256_si512(lanes[r]);
    #pragma GCC unroll 4
    for (int p = 0; p < 4; p++) {
        __m512i q = k4_pair_q_zmm(qs, qh, p), sp = k4_pair_scale_zmm(sc16, p);
        #pragma GCC unroll 8
        for (int r = 0; r < R; r++) lz[r] = lanes_u8i8_zmm(lz[r], q, ((const BlockQ8_K *)act_block(a, stride, r, sizeof(BlockQ8_K), b))->qs + 64 * p, sp);
    }
    #pragma GCC unroll 8
    for (int r = 0; r < R; r++) lanes[r] = fold_pair_zmm(lz[r]);
}

/* The 12 scale bytes of four Q4_K blocks (and 4 bytes after each), a block a 128-bit lane, unpacked
 * as scales_k4_avx2 unpacks one: lane i bytes 0..7 block i's scales, 8..15 its mins */
static inline SIMD_INLINE __m512i scales_k4_x4_zmm(const uint8_t *s0, const uint8_t *s1, const uint8_t *s2, const uint8_t *s3) {
    __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)s0));
    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)s1), 1);
    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)s2), 2);
    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)s3), 3);
    __m512i A = _mm512_shuffle_epi8(v, _mm512_broadcast_i32x4(_mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11)));
    __m512i B = _mm512_shuffle_epi8(v, _mm512_broadcast_i32x4(_mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7)));
    __m512i lo = _mm512_or_si512(_mm512_and_si512(A, _mm512_broadcast_i32x4(_mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0))),
                                 _mm512_and_si512(_mm512_srli_epi16(A, 4), _mm512_broadcast_i32x4(_mm_setr_epi32(0, 0, 0, 0x0f0f0f0f))));
    __m512i hi = _mm512_and_si512(_mm512_srli_epi16(B, 2), _mm512_broadcast_i32x4(_mm_setr_epi32(0, 0x30303030, 0, 0x30303030)));
    return _mm512_or_si512(lo, hi);
}

/* The sub-blocks of an activation block paired as a weight block's two 64-byte loads pair them:
 * A[2G + h] = [sub-block 4G + h | sub-block 4G + h + 2] (h = 0: the loads' low nibbles, 1: high) */
static inline SIMD_INLINE void k4_act_pairs_zmm(const int8_t *qs, __m512i A[4]) {
    for (int G = 0; G < 2; G++) {
        __m512i l0 = _mm512_loadu_si512((const void *)(qs + 128 * G)), l1 = _mm512_loadu_si512((const void *)(qs + 128 * G + 64));
        A[2 * G] = _mm512_shuffle_i64x2(l0, l1, _MM_SHUFFLE(1, 0, 1, 0));
        A[2 * G + 1] = _mm512_shuffle_i64x2(l0, l1, _MM_SHUFFLE(3, 2, 3, 2));
    }
}

/* The integer sums of four Q4_K/Q5_K blocks (blk[i]; scm4: their scales_k4_x4_zmm) against one
 * activation block (A: k4_act_pairs_zmm), for decoding, in fewer instructions than k4_block_zmm
 * a block: a block's 128 quant bytes are two 64-byte loads, whose low nibbles are sub-blocks
 * [0 | 2] and [4 | 6] and high nibbles [1 | 3] and [5 | 7] (Q5_K: plus bit j of qh); vpdpbusd
 * gives sums of four products (at most 4 * 31 * 128: an int16), two such registers become one of
 * int16 and one vpdpwssd applies both their scales, placed by one vpermw from the four blocks'
 * scales as words. Either (lanes) lane l and l + 8 of sums[i] add up to lane l of k4_lanes (the
 * two registers' words interleaved), or (whole: the repacked Q4_K order, which needs only the
 * block's sum) the sixteen lanes add up to the block's sum (packed by packs_epi32). Integer sums
 * are exact, so the order of their terms does not matter. */
static inline SIMD_INLINE void k4_sums_x4_zmm(const uint8_t *const blk[4], bool q5, bool whole, const __m512i A[4], __m512i scm4, __m512i sums[4]) {
    __m512i wd[2] = {_mm512_cvtepu8_epi16(_mm512_castsi512_si256(scm4)), _mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(scm4, 1))};
    #pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        const uint8_t *qs = q5 ? ((const BlockQ5_K *)blk[i])->qs : ((const BlockQ4_K *)blk[i])->qs;
        __m512i h = q5 ? twice_zmm(((const BlockQ5_K *)blk[i])->qh) : _mm512_setzero_si512(), s = _mm512_setzero_si512();
        #pragma GCC unroll 2
        for (int G = 0; G < 2; G++) {
            __m512i v = _mm512_loadu_si512((const void *)(qs + 64 * G)), d[2];
            #pragma GCC unroll 2
            for (int hi = 0; hi < 2; hi++) {
                int j = 4 * G + hi;   /* sub-blocks j and j + 2 */
                __m512i q = _mm512_and_si512(hi ? _mm512_srli_epi16(v, 4) : v, _mm512_set1_epi8(15));
                if (q5) {   /* bits j and j + 2 of qh moved to bit 4 */
                    __m512i b = j < 4 ? _mm512_sllv_epi16(h, halves16_zmm((short)(4 - j), (short)(2 - j)))
                                      : _mm512_srlv_epi16(h, halves16_zmm((short)(j - 4), (short)(j - 2)));
                    q = _mm512_ternarylogic_epi32(q, b, _mm512_set1_epi8(0x10), 0xF8);   /* q | (b & 0x10) */
                }
                d[hi] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, A[2 * G + hi]);
            }
            /* word w's scale: that of sub-block 4G + 2 (w >= 16) + (which of d) of block i, word
             * 16 (i % 2) + sub-block of wd[i / 2] */
            __m512i base = halves16_zmm((short)(16 * (i % 2) + 4 * G), (short)(16 * (i % 2) + 4 * G + 2)), p, idx;
            if (whole) {   /* words 8k..8k+3: d[0]'s lanes 4k..4k+3, 8k+4..8k+7: d[1]'s (so w >= 16 is k >= 2) */
                p = _mm512_packs_epi32(d[0], d[1]);
                idx = _mm512_add_epi16(base, _mm512_broadcast_i32x4(_mm_setr_epi16(0, 0, 0, 0, 1, 1, 1, 1)));
            } else {       /* words 2m, 2m + 1: lane m of d[0], of d[1] */
                p = _mm512_mask_blend_epi16(0xAAAAAAAA, d[0], _mm512_slli_epi32(d[1], 16));
                idx = _mm512_add_epi16(base, _mm512_set1_epi32(0x10000));
            }
            s = _mm512_dpwssd_epi32(s, p, _mm512_permutexvar_epi16(idx, wd[i / 2]));
        }
        sums[i] = s;
    }
}

#endif

/* 4 int32 sums m_2s (b_4s + b_4s+1) + m_2s+1 (b_4s+2 + b_4s+3) over the bsums b of a Q8_K block:
 * the mins of sub-block pair s (k4_summ taken by pairs); scm holds the mins in bytes 8..15 */
static inline SIMD_INLINE __m128i k4_mins_avx2(__m128i scm, const BlockQ8_K *y) {
    __m128i b = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)y->bsums), _mm_loadu_si128((const __m128i *)(y->bsums + 8)));
    return _mm_madd_epi16(b, _mm_cvtepu8_epi16(_mm_srli_si128(scm, 8)));
}

/* The mins per sub-block in 8 int32 lanes, m_j (b_2j + b_2j+1): one madd of the 16 bsums with
 * mn16, the eight mins of scm each twice as int16 */
static inline SIMD_INLINE __m256i k4_mins16_avx2(__m128i scm) { return _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(scm, scm)); }
static inline SIMD_INLINE __m256i k4_mins8_avx2(__m256i mn16, const BlockQ8_K *y) {
    return _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y->bsums), mn16);
}

/* dot_q4_K / dot_q5_K: per row, acc = fma(d_a d_w, lanes, acc) in 8 float lanes; the mins
 * either in 4 lanes (Q4_K: fma(-d_a dmin_w, pair sum, accm), folded at the end) or one scalar
 * (Q5_K: summs = fma(-d_a dmin_w, k4_summ, summs)). */
/* the integer lanes of Q4_K/Q5_K block blk (block b of its row; scm: its scales_k4_avx2) against
 * block b of R activation rows */
static inline SIMD_INLINE void k4_lanes_avx2(const uint8_t *blk, bool q5, __m128i scm, const void *a, size_t stride, const int R, int64_t b,
                                            __m256i lanes[]) {
    const uint8_t *qh = q5 ? ((const BlockQ5_K *)blk)->qh : NULL;
    const uint8_t *qs = q5 ? ((const BlockQ5_K *)blk)->qs : ((const BlockQ4_K *)blk)->qs;
    __m256i sc16 = scales16_k4_avx2(scm);
    #pragma GCC unroll 8
    for (int r = 0; r < R; r++) lanes[r] = _mm256_setzero_si256();
#if ZMM
    k4_block_zmm(qs, qh, sc16, a, stride, R, b, lanes);
#else
    #pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
        __m256i q = k4_sub_q_avx2(qs, qh, j), s = scale_k4_avx2(sc16, j);
        #pragma GCC unroll 8
        for (int r = 0; r < R; r++)
            lanes[r] = k4_sub_avx2(lanes[r], q, s, ((const BlockQ8_K *)act_block(a, stride, r, sizeof(BlockQ8_K), b))->qs, j);
    }
#endif
}

/* one row's block terms: acc += (d_a d_w) lanes, acc_min += (-d_a dmin_w) mins, from the weight
 * block's scm (scales_k4_avx2), d_w and dmin_w */
static inline SIMD_INLINE void k4_add_avx2(__m128i scm, float dw, float dmw, bool q5, const BlockQ8_K *y, __m256i lanes, __m256 *acc, __m128 *accm) {
    *acc = _mm256_fmadd_ps(_mm256_set1_ps(y->d * dw), _mm256_cvtepi32_ps(lanes), *acc);
    __m128i mins = k4_mins_avx2(scm, y);
    if (q5) {   /* one scalar: summs in lane 0 */
        __m128i m2 = _mm_add_epi32(mins, _mm_shuffle_epi32(mins, 0x4e));
        __m128i summ = _mm_add_epi32(m2, _mm_shuffle_epi32(m2, 0xb1));
        *accm = _mm_fmadd_ss(_mm_set_ss(-y->d * dmw), _mm_cvtepi32_ps(summ), *accm);
    } else {
        *accm = _mm_fmadd_ps(_mm_set1_ps(-y->d * dmw), _mm_cvtepi32_ps(mins), *accm);
    }
}

/* a row's dot from its two accumulators: fold(accm, 4) is lanes 0 += 2, 1 += 3, then 0 += 1
 * (Q5_K: lanes 1..3 are 0, lane 0 is the sum) */
static inline SIMD_INLINE float k4_result_avx2(__m256 acc, __m128 accm, bool q5) {
    __m128 m = _mm_add_ps(accm, _mm_movehl_ps(accm, accm));
    m = _mm_add_ss(m, _mm_movehdup_ps(m));
    return q5 ? fold8_avx2(acc) + _mm_cvtss_f32(accm) : fold8_avx2(acc) + _mm_cvtss_f32(m);
}

static inline SIMD_INLINE void k4_rows_avx2(const uint8_t *blocks, size_t block_bytes, bool q5, const void *a, size_t stride,
                                           const int R, int64_t n, float *out) {
    __m256 acc[MAX_ROWS];
    __m128 accm[MAX_ROWS];
    __m256i lanes[MAX_ROWS];
    #pragma GCC unroll 8
    for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps(), accm[r] = _mm_setzero_ps();
    for (int64_t b = 0; b < n / 256; b++) {
        const uint8_t *blk = blocks + (size_t)b * block_bytes;
        for (size_t c = 0; c < block_bytes; c += 64) _mm_prefetch((const char *)blk + ROWS_AHEAD * (n / 256) * block_bytes + c, _MM_HINT_T0);
        const BlockQ4_K *k = (const BlockQ4_K *)blk;   /* d, dmin and scales sit at the same offsets in both */
        __m128i scm = scales_k4_avx2(k->scales);
        float dw = f16c(k->d), dmw = f16c(k->dmin);
        k4_lanes_avx2(blk, q5, scm, a, stride, R, b, lanes);
        #pragma GCC unroll 8
        for (int r = 0; r < R; r++) k4_add_avx2(scm, dw, dmw, q5, act_block(a, stride, r, sizeof(BlockQ8_K), b), lanes[r], &acc[r], &accm[r]);
    }
    #pragma GCC unroll 8
    for (int r = 0; r < R; r++) out[r] = k4_result_avx2(acc[r], accm[r], q5);
}

#if ZMM
/* k4_w4_avx2 for one activation row (R = 1, decoding) on AVX-512: the integer sums by
 * k4_sums_x4_zmm, the float steps the same */
static inline SIMD_INLINE void k4_gemv1_w4_zmm(const uint8_t *w, size_t spacing, size_t block_bytes, bool q5, const void *a, int64_t n, float *out) {
    const BlockQ8_K *y = a;
    __m256 acc[4];
    __m128 accm[4];
    for (int i = 0; i < 4; i++) acc[i] = _mm256_setzero_ps(), accm[i] = _mm_setzero_ps();
    for (int64_t b = 0; b < n / 256; b++) {
        const uint8_t *blk[4];
        const BlockQ4_K *k[4];   /* d, dmin and scales sit at the same offsets in Q5_K */
        #pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            blk[i] = w + i * spacing + (size_t)b * block_bytes;
            k[i] = (const BlockQ4_K *)blk[i];
            for (size_t c = 0; c < block_bytes; c += 64) _mm_prefetch((const char *)blk[i] + PREFETCH_AHEAD + c, _MM_HINT_T0);
        }
        __m512i A[4], sums[4];
        k4_act_pairs_zmm(y[b].qs, A);
        __m512i scm4 = scales_k4_x4_zmm(k[0]->scales, k[1]->scales, k[2]->scales, k[3]->scales);
        k4_sums_x4_zmm(blk, q5, false, A, scm4, sums);
        __m128i scm[4];   /* each block's, as scales_k4_avx2 gives it */
        _mm512_storeu_si512((void *)scm, scm4);
        #pragma GCC unroll 4
        for (int i = 0; i < 4; i++) k4_add_avx2(scm[i], f16c(k[i]->d), f16c(k[i]->dmin), q5, &y[b], fold_pair_zmm(sums[i]), &acc[i], &accm[i]);
    }
    for (int i = 0; i < 4; i++) out[i] = k4_result_avx2(acc[i], accm[i], q5);
}
#endif

/* k4_rows_avx2 for four weight rows spacing bytes apart and R <= W4_MAX_ROWS activation rows stride
 * bytes apart (DotW4Fn): out[4 r + i] = row i . activation r. Each weight row's chains in the single
 * row's order, a block unpacked once for the R rows (k4_lanes_avx2); four independent weight rows,
 * each asking for its bytes PREFETCH_AHEAD ahead */
static inline SIMD_INLINE void k4_w4_avx2(const uint8_t *w, size_t spacing, size_t block_bytes, bool q5, const void *a, size_t stride,
                                         const int R, int64_t n, float *out) {
#if ZMM
    if (R == 1) {
        k4_gemv1_w4_zmm(w, spacing, block_bytes, q5, a, n, out);
        return;
    }
#endif
    __m256 acc[4][W4_MAX_ROWS];
    __m128 accm[4][W4_MAX_ROWS];
    #pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        #pragma GCC unroll 3
        for (int r = 0; r < R; r++) acc[i][r] = _mm256_setzero_ps(), accm[i][r] = _mm_setzero_ps();
    for (int64_t b = 0; b < n / 256; b++) {
        #pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            const uint8_t *blk = w + i * spacing + (size_t)b * block_bytes;
            for (size_t c = 0; c < block_bytes; c += 64) _mm_prefetch((const char *)blk + PREFETCH_AHEAD + c, _MM_HINT_T0);
            const BlockQ4_K *k = (const BlockQ4_K *)blk;
            __m128i scm = scales_k4_avx2(k->scales);
            float dw = f16c(k->d), dmw = f16c(k->dmin);
            __m256i lanes[W4_MAX_ROWS];
            k4_lanes_avx2(blk, q5, scm, a, stride, R, b, lanes);
            #pragma GCC unroll 3
            for (int r = 0; r < R; r++)
                k4_add_avx2(scm, dw, dmw, q5, act_block(a, stride, r, sizeof(BlockQ8_K), b), lanes[r], &acc[i][r], &accm[i][r]);
        }
    }
    #pragma GCC unroll 3
    for (int r = 0; r < R; r++)
        for (int i = 0; i < 4; i++) out[4 * r + i] = k4_result_avx2(acc[i][r], accm[i][r], q5);
}

static inline SIMD_INLINE void q4_K_rows_avx2(const void *w, const void *a, size_t stride, const int R, int64_t n, float *out) {
    k4_rows_avx2(w, sizeof(BlockQ4_K), false, a, stride, R, n, out);
}

static inline SIMD_INLINE void q5_K_rows_avx2(const void *w, const void *a, size_t stride, const int R, int64_t n, float *out) {
    k4_rows_avx2(w, sizeof(BlockQ5_K), true, a, stride, R, n, out);
}

/* The scale of Q8_K block b of activation row r, or 0 for a row past the R rows given. */
static inline SIMD_INLINE float q8_K_d(const void *a, size_t stride, int r, const int R, int64_t b) {
    return r < R ? ((const BlockQ8_K *)act_block(a, stride, r, sizeof(BlockQ8_K), b))->d : 0;
}

/* the pairs' mins of four rows as [row 0 .. row 3] for each pair s: pair sums, then a transpose */
static inline SIMD_INLINE void k4_pair_mins4_avx2(const __m256i m[4], __m128 fm[4]) {
    __m256i h01 = _mm256_hadd_epi32(m[0], m[1]), h23 = _mm256_hadd_epi32(m[2], m[3]);
    __m256i lo = _mm256_unpacklo_epi32(h01, h23), hi = _mm256_unpackhi_epi32(h01, h23);
    __m256 m02 = _mm256_cvtepi32_ps(_mm256_unpacklo_epi32(lo, hi)), m13 = _mm256_cvtepi32_ps(_mm256_unpackhi_epi32(lo, hi));
    fm[0] = _mm256_castps256_ps128(m02), fm[1] = _mm256_castps256_ps128(m13);
    fm[2] = _mm256_extractf128_ps(m02, 1), fm[3] = _mm256_extractf128_ps(m13, 1);
}

/* The repacked Q4_K kernels add one float term per row at a time: per block (gemv) or per pair s of
 * sub-blocks (gemm); the R <= 8 rows' accumulators sit in the lanes of one register (unused lanes: 0),
 * so that each weight block is unpacked once for all of them.
 *   gemv: acc = fma(sumi, d_w d_a, acc),  acc_min = fma(summ, dmin_w d_a, acc_min),  result acc - acc_min
 *   gemm: the same with sumi and summ split by pair s = 0..3, added in that order. */
static inline SIMD_INLINE void q4_K_8x8_rows_avx2(const void *w, const void *a, size_t stride, const int R, bool gemm,
                                                 int64_t n, float *out) {
    const BlockQ4_K *x = w;
    __m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / 256; b++) {
        __m128i scm = scales_k4_avx2(x[b].scales);
        __m256i sc16 = scales16_k4_avx2(scm), lanes[MAX_ROWS];
        __m256 yd = _mm256_setr_ps(q8_K_d(a, stride, 0, R, b), q8_K_d(a, stride, 1, R, b), q8_K_d(a, stride, 2, R, b), q8_K_d(a, stride, 3, R, b),
                                   q8_K_d(a, stride, 4, R, b), q8_K_d(a, stride, 5, R, b), q8_K_d(a, stride, 6, R, b), q8_K_d(a, stride, 7, R, b));
        __m256 d = _mm256_mul_ps(_mm256_set1_ps(f16c(x[b].d)), yd), dmin = _mm256_mul_ps(_mm256_set1_ps(f16c(x[b].dmin)), yd);
        #pragma GCC unroll 8
        for (int r = 0; r < MAX_ROWS; r++) lanes[r] = _mm256_setzero_si256();
#if ZMM
        if (!gemm) k4_block_zmm(x[b].qs, NULL, sc16, a, stride, R, b, lanes);
#endif
        #pragma GCC unroll 4
        for (int s = 0; s < 4; s++) {
#if ZMM
            if (gemm) {   /* pair s is sub-blocks 2s, 2s+1 */
                __m512i q = k4_pair_q_zmm(x[b].qs, NULL, s), sp = k4_pair_scale_zmm(sc16, s);
                #pragma GCC unroll 8
                for (int r = 0; r < R; r++)
                    lanes[r] = fold_pair_zmm(lanes_u8i8_zmm(_mm512_setzero_si512(), q, ((const BlockQ8_K *)act_block(a, stride, r, sizeof(BlockQ8_K), b))->qs + 64 * s, sp));
            }
#else
            #pragma GCC unroll 2
            for (int j = 2 * s; j < 2 * s + 2; j++) {
                __m256i q = k4_sub_q_avx2(x[b].qs, NULL, j), sj = scale_k4_avx2(sc16, j);
                #pragma GCC unroll 8
                for (int r = 0; r < R; r++)
                    lanes[r] = k4_sub_avx2(lanes[r], q, sj, ((const BlockQ8_K *)act_block(a, stride, r, sizeof(BlockQ8_K), b))->qs, j);
            }
#endif
            if (gemm) {   /* pair s's term, rows in lanes (acc and acc_min are separate chains) */
                acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hsum8_i32_avx2(lanes)), d, acc);
                #pragma GCC unroll 8
                for (int r = 0; r < R; r++) lanes[r] = _mm256_setzero_si256();
            }
        }
        /* row r's mins per sub-block (in lanes, for R rows), then acc_min */
        __m256i mn16 = k4_mins16_avx2(scm), mins[MAX_ROWS];
        #pragma GCC unroll 8
        for (int r = 0; r < MAX_ROWS; r++)
            mins[r] = r < R ? k4_mins8_avx2(mn16, act_block(a, stride, r, sizeof(BlockQ8_K), b)) : _mm256_setzero_si256();
        if (gemm) {
            __m128 lo[4], hi[4] = {_mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps()};
            k4_pair_mins4_avx2(mins, lo);
            if (R > 4) k4_pair_mins4_avx2(mins + 4, hi);
            #pragma GCC unroll 4
            for (int s = 0; s < 4; s++) accm = _mm256_fmadd_ps(_mm256_set_m128(hi[s], lo[s]), dmin, accm);
        } else {
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hsum8_i32_avx2(lanes)), d, acc);
            accm = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hsum8_i32_avx2(mins)), dmin, accm);
        }
    }
    float o[MAX_ROWS];
    _mm256_storeu_ps(o, _mm256_sub_ps(acc, accm));
    #pragma GCC unroll 8
    for (int r = 0; r < R; r++) out[r] = o[r];
}

/* The gemv order for one activation row (decoding), where reducing each block's lanes to its sum
 * would cost as much as the block's products: the sums of four blocks are reduced together, then
 * added to acc and acc_min one block at a time, in block order, as above. */
static inline SIMD_INLINE void q4_K_8x8_gemv1_avx2(const void *w, const void *a, int64_t n, float *out) {
    const BlockQ4_K *x = w;
    const BlockQ8_K *y = a;
    float acc = 0, accm = 0;
    int64_t nb = n / 256;
    for (int64_t b0 = 0; b0 < nb; b0 += 4) {
        __m256i lanes[4], mins[4];
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            lanes[i] = mins[i] = _mm256_setzero_si256();
            if (b0 + i >= nb) continue;
            const BlockQ4_K *k = &x[b0 + i];
            __m128i scm = scales_k4_avx2(k->scales);
            __m256i sc16 = scales16_k4_avx2(scm);
#if ZMM
            k4_block_zmm(k->qs, NULL, sc16, &y[b0 + i], 0, 1, 0, &lanes[i]);
#else
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++)
                lanes[i] = k4_sub_avx2(lanes[i], k4_sub_q_avx2(k->qs, NULL, j), scale_k4_avx2(sc16, j), y[b0 + i].qs, j);
#endif
            mins[i] = k4_mins8_avx2(k4_mins16_avx2(scm), &y[b0 + i]);
        }
        int32_t sumi[4], summ[4];
        _mm_storeu_si128((__m128i *)sumi, hsum4_i32_avx2(lanes[0], lanes[1], lanes[2], lanes[3]));
        _mm_storeu_si128((__m128i *)summ, hsum4_i32_avx2(mins[0], mins[1], mins[2], mins[3]));
        for (int i = 0; i < 4 && b0 + i < nb; i++) {
            acc = fmaf((float)sumi[i], f16c(x[b0 + i].d) * y[b0 + i].d, acc);
            accm = fmaf((float)summ[i], f16c(x[b0 + i].dmin) * y[b0 + i].d, accm);
        }
    }
    *out = acc - accm;
}

#if ZMM
/* q4_K_8x8_gemv_w4_avx2 for one activation row (R = 1, decoding) on AVX-512: the integer sums by
 * k4_sums_x4_zmm, the mins of the four rows from their scales as words at once, the float steps
 * the same */
static inline SIMD_INLINE void q4_K_8x8_gemv1_w4_zmm(const void *w, size_t spacing, const void *a, int64_t n, float *out) {
    const BlockQ4_K *x[4];
    for (int i = 0; i < 4; i++) x[i] = (const BlockQ4_K *)((const uint8_t *)w + i * spacing);
    const BlockQ8_K *y = a;
    /* min v / 2 of the first (words 0..15) and second (16..31) block of a pair, each twice */
    const __m512i mins_twice = _mm512_add_epi16(halves16_zmm(8, 24), _mm512_broadcast_i64x4(_mm256_setr_epi16(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7)));
    __m128 acc = _mm_setzero_ps(), accm = _mm_setzero_ps();
    for (int64_t b = 0; b < n / 256; b++) {
        const uint8_t *blk[4];
        uint32_t dm[4];   /* d | dmin << 16 of each row's block */
        #pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            blk[i] = (const uint8_t *)&x[i][b];
            for (int c = 0; c < 3; c++) _mm_prefetch((const char *)blk[i] + PREFETCH_AHEAD + 64 * c, _MM_HINT_T0);   /* the block's 144 bytes */
            memcpy(&dm[i], &x[i][b].d, 4);
        }
        __m512i A[4], sums[4];
        k4_act_pairs_zmm(y[b].qs, A);
        __m512i scm4 = scales_k4_x4_zmm(x[0][b].scales, x[1][b].scales, x[2][b].scales, x[3][b].scales);
        k4_sums_x4_zmm(blk, false, true, A, scm4, sums);
        /* the mins: m_j (b_2j + b_2j+1), lanes 0..7 the first block of a pair, 8..15 the second */
        __m512i bs = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)y[b].bsums));
        __m512i m01 = _mm512_madd_epi16(_mm512_permutexvar_epi16(mins_twice, _mm512_cvtepu8_epi16(_mm512_castsi512_si256(scm4))), bs);
        __m512i m23 = _mm512_madd_epi16(_mm512_permutexvar_epi16(mins_twice, _mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(scm4, 1))), bs);
        /* as in q4_K_8x8_gemv_w4_avx2 */
        __m256 f = _mm256_permutevar8x32_ps(_mm256_cvtph_ps(_mm_setr_epi32((int)dm[0], (int)dm[1], (int)dm[2], (int)dm[3])),
                                            _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7));
        __m256 fr = _mm256_mul_ps(f, _mm256_set1_ps(y[b].d));
        __m128i sumi = hsum4_i32_avx2(fold_pair_zmm(sums[0]), fold_pair_zmm(sums[1]), fold_pair_zmm(sums[2]), fold_pair_zmm(sums[3]));
        __m128i summ = hsum4_i32_avx2(_mm512_castsi512_si256(m01), _mm512_extracti64x4_epi64(m01, 1), _mm512_castsi512_si256(m23),
                                      _mm512_extracti64x4_epi64(m23, 1));
        acc = _mm_fmadd_ps(_mm_cvtepi32_ps(sumi), _mm256_castps256_ps128(fr), acc);
        accm = _mm_fmadd_ps(_mm_cvtepi32_ps(summ), _mm256_extractf128_ps(fr, 1), accm);
    }
    _mm_storeu_ps(out, _mm_sub_ps(acc, accm));
}
#endif

/* q4_K_8x8_gemv1_avx2 for four weight rows and R <= W4_MAX_ROWS activation rows (DotW4Fn): a block
 * unpacked once for the R rows, its lanes of the four weight rows reduced together, and each
 * activation row's acc and acc_min chains for the four in the lanes of two registers (vector fused
 * multiply-adds instead of eight scalar ones a block). Each weight row asks for its bytes
 * PREFETCH_AHEAD ahead: one thread streaming, 16-23 GB/s without, 22-28 with (measured, alternating
 * runs). */
static inline SIMD_INLINE void q4_K_8x8_gemv_w4_avx2(const void *w, size_t spacing, const void *a, size_t stride, const int R, int64_t n,
                                                    float *out) {
#if ZMM
    if (R == 1) {
        q4_K_8x8_gemv1_w4_zmm(w, spacing, a, n, out);
        return;
    }
#endif
    const BlockQ4_K *x[4];
    for (int i = 0; i < 4; i++) x[i] = (const BlockQ4_K *)((const uint8_t *)w + i * spacing);
    __m128 acc[W4_MAX_ROWS], accm[W4_MAX_ROWS];
    #pragma GCC unroll 3
    for (int r = 0; r < R; r++) acc[r] = accm[r] = _mm_setzero_ps();
    for (int64_t b = 0; b < n / 256; b++) {
        __m256i lanes[4][W4_MAX_ROWS], mins[4][W4_MAX_ROWS];
        uint32_t dm[4];   /* d | dmin << 16 of each row's block */
        #pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            const BlockQ4_K *k = &x[i][b];
            for (int c = 0; c < 3; c++) _mm_prefetch((const char *)k + PREFETCH_AHEAD + 64 * c, _MM_HINT_T0);   /* the block's 144 bytes */
            __m128i scm = scales_k4_avx2(k->scales);
            __m256i sc16 = scales16_k4_avx2(scm), mn16 = k4_mins16_avx2(scm);
            #pragma GCC unroll 3
            for (int r = 0; r < R; r++) lanes[i][r] = _mm256_setzero_si256();
#if ZMM
            k4_block_zmm(k->qs, NULL, sc16, a, stride, R, b, lanes[i]);
#else
            #pragma GCC unroll 8
            for (int j = 0; j < 8; j++) {
                __m256i q = k4_sub_q_avx2(k->qs, NULL, j), sj = scale_k4_avx2(sc16, j);
                #pragma GCC unroll 3
                for (int r = 0; r < R; r++)
                    lanes[i][r] = k4_sub_avx2(lanes[i][r], q, sj, ((const BlockQ8_K *)act_block(a, stride, r, sizeof(BlockQ8_K), b))->qs, j);
            }
#endif
            #pragma GCC unroll 3
            for (int r = 0; r < R; r++) mins[i][r] = k4_mins8_avx2(mn16, act_block(a, stride, r, sizeof(BlockQ8_K), b));
            memcpy(&dm[i], &k->d, 4);
        }
        /* [d_0 .. d_3 | dmin_0 .. dmin_3], then times each row's d_a */
        __m256 f = _mm256_permutevar8x32_ps(_mm256_cvtph_ps(_mm_setr_epi32((int)dm[0], (int)dm[1], (int)dm[2], (int)dm[3])),
                                            _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7));
        #pragma GCC unroll 3
        for (int r = 0; r < R; r++) {
            __m256 fr = _mm256_mul_ps(f, _mm256_set1_ps(((const BlockQ8_K *)act_block(a, stride, r, sizeof(BlockQ8_K), b))->d));
            acc[r] = _mm_fmadd_ps(_mm_cvtepi32_ps(hsum4_i32_avx2(lanes[0][r], lanes[1][r], lanes[2][r], lanes[3][r])), _mm256_castps256_ps128(fr), acc[r]);
            accm[r] = _mm_fmadd_ps(_mm_cvtepi32_ps(hsum4_i32_avx2(mins[0][r], mins[1][r], mins[2][r], mins[3][r])), _mm256_extractf128_ps(fr, 1), accm[r]);
        }
    }
    #pragma GCC unroll 3
    for (int r = 0; r < R; r++) _mm_storeu_ps(out + 4 * r, _mm_sub_ps(acc[r], accm[r]));
}

static inline SIMD_INLINE void q4_K_8x8_gemv_rows_avx2(const void *w, const void *a, size_t stride, const int R, int64_t n, float *out) {
    if (R == 1) q4_K_8x8_gemv1_avx2(w, a, n, out);
    else q4_K_8x8_rows_avx2(w, a, stride, R, false, n, out);
}

static inline SIMD_INLINE void q4_K_8x8_gemm_rows_avx2(const void *w, const void *a, size_t stride, const int R, int64_t n, float *out) {
    q4_K_8x8_rows_avx2(w, a, stride, R, true, n, out);
}

#if ZMM
/* The repacked Q4_K orders for sixteen weight rows against T <= TILE_T activation rows (DotGemm16Fn,
 * the 512-bit builds): the weight rows in the lanes of a register, as llama.cpp's repacked layout
 * puts them, so that no sum is reduced across lanes. Per block the sixteen rows are gathered once
 * into wt (group g of sub-block j: its bytes 4g..4g+3 of every row, as nibbles), then every
 * activation row runs over it: 4-byte groups broadcast against wt by vpdpbusd give a sub-block's
 * sum in each lane. gemm: a pair's si = sc_2s dot_2s + sc_2s+1 dot_2s+1 is formed in float,
 * exactly (|si| < 2^24: |dot| <= 32 * 15 * 128, sc <= 63); gemv: the block's sumi in integers. The
 * float operations after them are the plain ones (dot_q4_K_8x8_gemm, dot_q4_K_8x8). */
#if AMX
/* The AMX form of the sub-block sums (Intel's Advanced Matrix Extensions: eight 1 KiB tile
 * registers and a unit that multiplies them): for rows r0..r0+R-1 (R <= 16) of the activations and
 * the sixteen gathered weight rows, C_j[r][i] = sum_k a_r[32 j + k] w_i[32 j + k] for the eight
 * sub-blocks j of block b, the same integers vpdpbusd adds up, by one tdpbsud (signed activations
 * in the rows of tile A, 16 x 32 bytes; unsigned nibbles in tile B, whose layout, 4-byte groups
 * of the sixteen rows, is wt's) into tile C, 16 x 16 int32, stored to cs[j]. A group of fewer
 * than 16 rows is copied into xa first, so that no tile reads past the activations. Tiles 0-5,
 * configured by each call of a kernel that uses them (amx_tiles) and, at its end, given back as
 * they were (amx_restore): other code in the thread may keep a configuration of its own across
 * calls, as llama.cpp's AMX kernels do (in build/bench, one process with both, a configuration
 * kept from an earlier call of clover's died of SIGILL after llama.cpp released the tiles, and a
 * release by clover made llama.cpp's next tile instruction die). */
typedef struct { uint8_t palette, start_row, reserved[14]; uint16_t colsb[16]; uint8_t rows[16]; } TileConfig;
static inline SIMD_INLINE void amx_tiles(TileConfig *saved) {
    static const TileConfig cfg = {.palette = 1, .colsb = {32, 64, 64, 32, 64, 64}, .rows = {16, 8, 16, 16, 8, 16}};
    _tile_storeconfig(saved);   /* palette 0: none */
    _tile_loadconfig(&cfg);
}
static inline SIMD_INLINE void amx_restore(const TileConfig *saved) {
    if (saved->palette) _tile_loadconfig(saved);
    else _tile_release();
}
/* The quants (len bytes at offset qs in each block of block_bytes) of block b of activation rows
 * r0..r0+R-1, as tile A reads them: in place, *xs = stride apart, or, fewer than 16 rows, copied
 * into xa, *xs = len apart, so that no tile reads past the activations */
static inline SIMD_INLINE const uint8_t *tile_rows_amx(const void *a, size_t stride, int r0, int R, size_t block_bytes, size_t qs,
                                                       size_t len, int64_t b, uint8_t *xa, size_t *xs) {
    *xs = stride;
    if (R == 16) return (const uint8_t *)act_block(a, stride, r0, block_bytes, b) + qs;
    for (int r = 0; r < R; r++) memcpy(xa + r * len, (const uint8_t *)act_block(a, stride, r0 + r, block_bytes, b) + qs, len);
    *xs = len;
    return xa;
}
static inline SIMD_INLINE void q4_K_sums16_amx(const uint8_t wt[8][8][64], const void *a, size_t stride, int r0, int R,
                                               int64_t b, uint8_t xa[16][256], int32_t cs[8][16][16]) {
    size_t xs;
    const uint8_t *x = tile_rows_amx(a, stride, r0, R, sizeof(BlockQ8_K), offsetof(BlockQ8_K, qs), 256, b, xa[0], &xs);
    for (int p = 0; p < 4; p++) {   /* sub-blocks 2p (tiles 0, 1 -> 2) and 2p + 1 (3, 4 -> 5) */
        _tile_loadd(0, x + 64 * p, xs);
        _tile_loadd(3, x + 64 * p + 32, xs);
        _tile_loadd(1, wt[2 * p], 64);
        _tile_loadd(4, wt[2 * p + 1], 64);
        _tile_zero(2);
        _tile_zero(5);
        _tile_dpbsud(2, 0, 1);
        _tile_dpbsud(5, 3, 4);
        _tile_stored(2, cs[2 * p], 64);
        _tile_stored(5, cs[2 * p + 1], 64);
    }
}
#endif

/* Four 4-byte words (the 16 bytes at p) of sixteen rows row_bytes apart, transposed: T[m] lane i
 * holds word m of row i. Rows i, i + 4, i + 8, i + 12 are loaded into the four 128-bit lanes of
 * Y[i], then words are transposed 4 x 4 within each lane (as the eight-row tile kernel does in 256
 * bits): plain loads and shuffles, where a gather per word costs a load per lane. */
static inline SIMD_INLINE void words16_zmm(const uint8_t *p, size_t row_bytes, __m512i T[4]) {
    __m512i Y[4];
    for (int i = 0; i < 4; i++) {   /* (the lane of an insert must be a constant) */
        const uint8_t *r = p + i * row_bytes;
        __m512i y = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)r));
        y = _mm512_inserti32x4(y, _mm_loadu_si128((const __m128i *)(r + 4 * row_bytes)), 1);
        y = _mm512_inserti32x4(y, _mm_loadu_si128((const __m128i *)(r + 8 * row_bytes)), 2);
        Y[i] = _mm512_inserti32x4(y, _mm_loadu_si128((const __m128i *)(r + 12 * row_bytes)), 3);
    }
    __m512i t0 = _mm512_unpacklo_epi32(Y[0], Y[1]), t1 = _mm512_unpackhi_epi32(Y[0], Y[1]);
    __m512i t2 = _mm512_unpacklo_epi32(Y[2], Y[3]), t3 = _mm512_unpackhi_epi32(Y[2], Y[3]);
    T[0] = _mm512_unpacklo_epi64(t0, t2), T[1] = _mm512_unpackhi_epi64(t0, t2);
    T[2] = _mm512_unpacklo_epi64(t1, t3), T[3] = _mm512_unpackhi_epi64(t1, t3);
}

static inline SIMD_INLINE void q4_K_8x8_rows16_zmm(const void *w, size_t row_bytes, const void *a, size_t stride, int T,
                                                  int64_t n, float *y, size_t ystride, const bool gemm, const bool amx) {
    _Alignas(64) float acc[TILE_T][16], accm[TILE_T][16], sc[8][16], dw[16], dmw[16];
    _Alignas(64) int32_t sci[8][16];
    _Alignas(64) uint8_t wt[8][8][64];
    _Alignas(64) int32_t mn[4][16];   /* mn_2s | mn_2s+1 << 16 of each row */
    _Alignas(64) uint8_t scm[16][16];  /* each row's scales_k4_avx2: 8 scales, then 8 mins */
    memset(acc, 0, (size_t)T * sizeof acc[0]), memset(accm, 0, (size_t)T * sizeof accm[0]);
#if AMX
    _Alignas(64) int32_t cs[8][16][16];   /* the AMX sums: cs[j][r % 16][i] */
    _Alignas(64) uint8_t xa[16][256] = {{0}};
    _Alignas(64) TileConfig saved;
    if (amx) amx_tiles(&saved);
#endif
    const __m512i offs = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                            _mm512_set1_epi32((int)row_bytes));
    const __m512i m15 = _mm512_set1_epi8(15), m255 = _mm512_set1_epi32(255);
    for (int64_t b = 0; b < n / 256; b++) {
        const uint8_t *blk = (const uint8_t *)((const BlockQ4_K *)w + b);
        /* the next sixteen rows: the reads below stall on lines from memory (measured when they
         * were gathers: one thread, 16 rows of 200 expert gates from memory: 36.9 -> 28.3 ms with the
         * next rows' block b asked for; 20.3 in cache; a prefetch 4 KiB ahead of each row, as
         * matmul_rows gives the other kernels, gained nothing) -- a prefetch past the matrix's end
         * reads nothing and cannot fault */
        prefetch_next16(w, row_bytes, b, n / 256);
        for (int i = 0; i < 16; i++) _mm_store_si128((__m128i *)scm[i], scales_k4_avx2(((const BlockQ4_K *)(blk + i * row_bytes))->scales));
        __m512i sw[4];   /* lane i: row i's scales 0-3, 4-7, mins 0-3, 4-7 */
        words16_zmm(scm[0], 16, sw);
        for (int j = 0; j < 8; j++) {   /* scale j of row i in lane i */
            __m512i v = _mm512_and_si512(_mm512_srli_epi32(sw[j / 4], 8 * (j % 4)), m255);
            _mm512_store_si512((void *)sci[j], v), _mm512_store_ps(sc[j], _mm512_cvtepi32_ps(v));
        }
        for (int p = 0; p < 4; p++) {   /* mins 2p, 2p+1 */
            __m512i v = _mm512_srli_epi32(sw[2 + p / 2], 16 * (p % 2));
            _mm512_store_si512((void *)mn[p], _mm512_or_si512(_mm512_and_si512(v, m255), _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(v, 8), m255), 16)));
        }
        __m512i dd = _mm512_i32gather_epi32(offs, (const void *)blk, 1);   /* d | dmin << 16 */
        _mm512_store_ps(dw, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dd)));
        _mm512_store_ps(dmw, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dd, 16))));
        const uint8_t *qs = blk + offsetof(BlockQ4_K, qs);
        for (int k = 0; k < 8; k++) {   /* words 4k..4k+3 of the rows' qs: word 8p + g holds sub-blocks 2p, 2p+1's values 4g.. */
            __m512i v[4];
            words16_zmm(qs + 16 * k, row_bytes, v);
            for (int m = 0; m < 4; m++) {
                int p = k / 2, g = 4 * (k % 2) + m;
                _mm512_store_si512((void *)wt[2 * p][g], _mm512_and_si512(v[m], m15));
                _mm512_store_si512((void *)wt[2 * p + 1][g], _mm512_and_si512(_mm512_srli_epi16(v[m], 4), m15));
            }
        }
        for (int r = 0; r < T; r++) {
            const BlockQ8_K *yb = (const BlockQ8_K *)act_block(a, stride, r, sizeof(BlockQ8_K), b);
#if AMX
            if (amx && r % 16 == 0) q4_K_sums16_amx(wt, a, stride, r, T - r < 16 ? T - r : 16, b, xa, cs);
#endif
            __m512 ya = _mm512_set1_ps(yb->d), A = _mm512_load_ps(acc[r]), Am = _mm512_load_ps(accm[r]);
            __m512 d = _mm512_mul_ps(_mm512_load_ps(dw), ya), dmin = _mm512_mul_ps(_mm512_load_ps(dmw), ya);
            __m512i sumi = _mm512_setzero_si512(), summ = _mm512_setzero_si512();
#pragma GCC unroll 4
            for (int p = 0; p < 4; p++) {
                __m512i l0 = _mm512_setzero_si512(), l1 = _mm512_setzero_si512();
#if AMX
                if (amx) {
                    l0 = _mm512_load_si512((const void *)cs[2 * p][r % 16]);
                    l1 = _mm512_load_si512((const void *)cs[2 * p + 1][r % 16]);
                }
#endif
                int32_t a4[16];
                memcpy(a4, yb->qs + 64 * p, 64);
#pragma GCC unroll 8
                for (int g = 0; g < 8 && !amx; g++) {
                    l0 = _mm512_dpbusd_epi32(l0, _mm512_load_si512((const void *)wt[2 * p][g]), _mm512_set1_epi32(a4[g]));
                    l1 = _mm512_dpbusd_epi32(l1, _mm512_load_si512((const void *)wt[2 * p + 1][g]), _mm512_set1_epi32(a4[8 + g]));
                }
                int32_t bs = (uint16_t)(yb->bsums[4 * p] + yb->bsums[4 * p + 1]) | (uint32_t)(uint16_t)(yb->bsums[4 * p + 2] + yb->bsums[4 * p + 3]) << 16;
                __m512i sm = _mm512_dpwssd_epi32(gemm ? _mm512_setzero_si512() : summ, _mm512_load_si512((const void *)mn[p]), _mm512_set1_epi32(bs));
                if (gemm) {
                    __m512 si = _mm512_fmadd_ps(_mm512_cvtepi32_ps(l1), _mm512_load_ps(sc[2 * p + 1]),
                                                _mm512_mul_ps(_mm512_cvtepi32_ps(l0), _mm512_load_ps(sc[2 * p])));
                    A = _mm512_fmadd_ps(si, d, A);
                    Am = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sm), dmin, Am);
                } else {
                    sumi = _mm512_add_epi32(sumi, _mm512_mullo_epi32(l0, _mm512_load_si512((const void *)sci[2 * p])));
                    sumi = _mm512_add_epi32(sumi, _mm512_mullo_epi32(l1, _mm512_load_si512((const void *)sci[2 * p + 1])));
                    summ = sm;
                }
            }
            if (!gemm) {
                A = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), d, A);
                Am = _mm512_fmadd_ps(_mm512_cvtepi32_ps(summ), dmin, Am);
            }
            _mm512_store_ps(acc[r], A), _mm512_store_ps(accm[r], Am);
        }
    }
#if AMX
    if (amx) amx_restore(&saved);
#endif
    for (int r = 0; r < T; r++) _mm512_storeu_ps(y + (size_t)r * ystride, _mm512_sub_ps(_mm512_load_ps(acc[r]), _mm512_load_ps(accm[r])));
}
SIMD static void gemm16_q4_K_8x8_gemm_zmm(const void *w, size_t row_bytes, const void *a, size_t stride, int T, int64_t n, float *y, size_t ystride) {
    q4_K_8x8_rows16_zmm(w, row_bytes, a, stride, T, n, y, ystride, true, false);
}
SIMD static void gemm16_q4_K_8x8_zmm(const void *w, size_t row_bytes, const void *a, size_t stride, int T, int64_t n, float *y, size_t ystride) {
    q4_K_8x8_rows16_zmm(w, row_bytes, a, stride, T, n, y, ystride, false, false);
}
/* Block b of sixteen Q4_0 weight rows (row_bytes apart, offs their offsets) in the lanes of
 * registers: W[g] lane i holds row i's values 4g..4g+3, signed (q - 8), low nibbles for g < 4, the
 * high ones (values 16 + 4(g - 4)..) after; their scales d_w as floats (one gather). Each activation
 * row's four values, broadcast, then meet all sixteen weight rows at once, and the block's sixteen
 * sums land in sixteen lanes with no reduction across lanes. */
static inline SIMD_INLINE __m512 q4_0_rows16_zmm(const void *w, size_t row_bytes, __m512i offs, int64_t b, __m512i W[8]) {
    const uint8_t *blk = (const uint8_t *)((const BlockQ4_0 *)w + b);
    const __m512i m15 = _mm512_set1_epi8(15), eight = _mm512_set1_epi8(8);
    __m512i T[4];
    words16_zmm(blk + offsetof(BlockQ4_0, qs), row_bytes, T);
    for (int g = 0; g < 4; g++) {
        W[g] = _mm512_sub_epi8(_mm512_and_si512(T[g], m15), eight);
        W[g + 4] = _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(T[g], 4), m15), eight);
    }
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_i32gather_epi32(offs, (const void *)blk, 1)));
}

/* dot_q4_0_8x8 for sixteen weight rows against T <= TILE_T activation rows (DotGemm16Fn) with
 * AVX512-VNNI (CPUs without AMX tiles, below): vpdpbusd multiplies unsigned by signed bytes, so each
 * activation row's block is taken plus 128 (a + 128, unsigned) against the signed weights, and
 * sum (a + 128)(q - 8) = sum a (q - 8) + 128 sum (q - 8): every row's sum starts from the second
 * term's negation, a property of the weight block alone. Then acc = fma(isum, d_w d_a, acc) in
 * block order, the single-row kernel's float steps. In a zen5 prompt of 512 rows the 8-row
 * tile kernel took 98 ms for attn_qkv where the Q4_K sixteen-row kernel takes 78. */
SIMD static void gemm16_q4_0_8x8_zmm(const void *w, size_t row_bytes, const void *a, size_t stride, int T, int64_t n, float *y, size_t ystride) {
    _Alignas(64) float acc[TILE_T][16];
    _Alignas(32) uint32_t ua[8];
    memset(acc, 0, (size_t)T * sizeof acc[0]);
    const __m512i offs = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                            _mm512_set1_epi32((int)row_bytes));
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    for (int64_t b = 0; b < n / 32; b++) {
        prefetch_next16(w, row_bytes, b, n / 32);
        __m512i W[8], start = _mm512_setzero_si512();
        __m512 dw = q4_0_rows16_zmm(w, row_bytes, offs, b, W);
        for (int g = 0; g < 8; g++) start = _mm512_dpbusd_epi32(start, _mm512_set1_epi8((char)128), W[g]);
        start = _mm512_sub_epi32(_mm512_setzero_si512(), start);
        for (int r = 0; r < T; r++) {
            const BlockQ8_0 *yb = act_block(a, stride, r, sizeof(BlockQ8_0), b);
            _mm256_store_si256((__m256i *)ua, _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)yb->qs), flip));
            __m512i l[2] = {start, _mm512_setzero_si512()};   /* two chains of four */
#pragma GCC unroll 8
            for (int g = 0; g < 8; g++) l[g % 2] = _mm512_dpbusd_epi32(l[g % 2], _mm512_set1_epi32((int)ua[g]), W[g]);
            __m512 A = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(l[0], l[1])), _mm512_mul_ps(dw, _mm512_set1_ps(f16c(yb->d))),
                                       _mm512_load_ps(acc[r]));
            _mm512_store_ps(acc[r], A);
        }
    }
    for (int r = 0; r < T; r++) _mm512_storeu_ps(y + (size_t)r * ystride, _mm512_load_ps(acc[r]));
}
#if AMX
SIMD static void gemm16_q4_K_8x8_gemm_amx(const void *w, size_t row_bytes, const void *a, size_t stride, int T, int64_t n, float *y, size_t ystride) {
    q4_K_8x8_rows16_zmm(w, row_bytes, a, stride, T, n, y, ystride, true, true);
}
SIMD static void gemm16_q4_K_8x8_amx(const void *w, size_t row_bytes, const void *a, size_t stride, int T, int64_t n, float *y, size_t ystride) {
    q4_K_8x8_rows16_zmm(w, row_bytes, a, stride, T, n, y, ystride, false, true);
}

/* dot_q4_0_8x8 for sixteen weight rows against T <= TILE_T activation rows (DotGemm16Fn) on the
 * AMX tiles: per block, the sixteen rows' 32 values in lanes (q4_0_rows16_zmm) and stored as tile
 * B's layout (group g: values 4g..4g+3 of every row), each group of up to 16 activation rows
 * loaded as it lies into tile A, tdpbssd gives every (activation row, weight row) its block sum,
 * and acc = fma(isum, d_w d_a, acc) in block order, the single-row kernel's float steps. */
SIMD static void gemm16_q4_0_8x8_amx(const void *w, size_t row_bytes, const void *a, size_t stride, int T, int64_t n, float *y, size_t ystride) {
    _Alignas(64) float acc[TILE_T][16];
    _Alignas(64) int8_t wt[8][64];
    _Alignas(64) int32_t cs[16][16];
    _Alignas(64) uint8_t xa[16][32] = {{0}};
    memset(acc, 0, (size_t)T * sizeof acc[0]);
    _Alignas(64) TileConfig saved;
    amx_tiles(&saved);
    const __m512i offs = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                            _mm512_set1_epi32((int)row_bytes));
    for (int64_t b = 0; b < n / 32; b++) {
        prefetch_next16(w, row_bytes, b, n / 32);
        __m512i W[8];
        __m512 dw = q4_0_rows16_zmm(w, row_bytes, offs, b, W);
        for (int g = 0; g < 8; g++) _mm512_store_si512((void *)wt[g], W[g]);
        _tile_loadd(1, wt, 64);
        for (int r0 = 0; r0 < T; r0 += 16) {
            int R = T - r0 < 16 ? T - r0 : 16;
            size_t xs;
            const uint8_t *x = tile_rows_amx(a, stride, r0, R, sizeof(BlockQ8_0), offsetof(BlockQ8_0, qs), 32, b, xa[0], &xs);
            _tile_loadd(0, x, xs);
            _tile_zero(2);
            _tile_dpbssd(2, 0, 1);
            _tile_stored(2, cs, 64);
            for (int r = 0; r < R; r++) {
                float da = f16c(((const BlockQ8_0 *)act_block(a, stride, r0 + r, sizeof(BlockQ8_0), b))->d);
                __m512 A = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512((const void *)cs[r])), _mm512_mul_ps(dw, _mm512_set1_ps(da)),
                                           _mm512_load_ps(acc[r0 + r]));
                _mm512_store_ps(acc[r0 + r], A);
            }
        }
    }
    amx_restore(&saved);
    for (int r = 0; r < T; r++) _mm512_storeu_ps(y + (size_t)r * ystride, _mm512_load_ps(acc[r]));
}
#endif
#endif

#if !ZMM
/* The repacked Q4_K orders for sixteen weight rows against T <= TILE_T activation rows in 256-bit
 * code (DotGemm16Fn where the build has no AVX-512; q4_K_8x8_rows16_zmm's twin): the sixteen rows
 * in the lanes of two registers (rows 0-7, 8-15), so that no sum is reduced across lanes. Per block
 * the rows' quants are transposed once into wt (group g of sub-block j: bytes 4g..4g+3 of every
 * row, as nibbles), their scales, mins, d and dmin by row; then an activation row's four bytes of
 * a group, broadcast, meet the sixteen rows in two maddubs. A sub-block's eight groups add up in
 * int16 (at most 8 x 2 x 15 x 127 = 30,480) before one madd by the rows' scales gives sc_j dot_j
 * in each lane. gemm: a pair's si = sc_2s dot_2s + sc_2s+1 dot_2s+1 (an integer below 2^24, exact
 * in float) meets d per pair; gemv: the block's sumi. The float operations after them are the
 * plain ones (dot_q4_K_8x8_gemm, dot_q4_K_8x8). Against eight weight rows a call (the row kernels),
 * the adds across lanes go and each activation byte is loaded once for sixteen rows. */

/* eight rows' 32 bytes at p, row_bytes apart, transposed as 32-bit words: out[m] lane i = word m of row i */
static inline SIMD_INLINE void words8_avx2(const uint8_t *p, size_t row_bytes, __m256i out[8]) {
    words4_avx2(p, row_bytes, out);
    words4_avx2(p + 16, row_bytes, out + 4);
}

/* One block of the sixteen rows (wt; sc, mn, dw, dmw: row i's in lane i % 8 of half i / 8) against
 * activation row yb: acc and accm, the row's sixteen lanes each. */
static inline SIMD_INLINE void q4_K_block16_avx2(const uint8_t wt[8][8][64], const __m256i sc[8][2], const __m256i mn[4][2],
                                                const __m256 dw[2], const __m256 dmw[2], const BlockQ8_K *yb, const bool gemm,
                                                float *acc, float *accm) {
    __m256 ya = _mm256_set1_ps(yb->d), d[2], dmin[2], A[2], Am[2];
    __m256i sumi[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()}, summ[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
    for (int h = 0; h < 2; h++) {
        d[h] = _mm256_mul_ps(dw[h], ya), dmin[h] = _mm256_mul_ps(dmw[h], ya);
        A[h] = _mm256_loadu_ps(acc + 8 * h), Am[h] = _mm256_loadu_ps(accm + 8 * h);
    }
    for (int p = 0; p < 4; p++) {
        __m256i l[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
        for (int j = 2 * p; j < 2 * p + 2; j++) {
            __m256i s[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
#pragma GCC unroll 8
            for (int g = 0; g < 8; g++) {
                int32_t x4;
                memcpy(&x4, yb->qs + 32 * j + 4 * g, 4);
                __m256i x = _mm256_set1_epi32(x4);
                s[0] = _mm256_add_epi16(s[0], _mm256_maddubs_epi16(_mm256_load_si256((const __m256i *)wt[j][g]), x));
                s[1] = _mm256_add_epi16(s[1], _mm256_maddubs_epi16(_mm256_load_si256((const __m256i *)(wt[j][g] + 32)), x));
            }
            for (int h = 0; h < 2; h++) l[h] = _mm256_add_epi32(l[h], _mm256_madd_epi16(s[h], sc[j][h]));
        }
        int32_t bs = (uint16_t)(yb->bsums[4 * p] + yb->bsums[4 * p + 1]) | (uint32_t)(uint16_t)(yb->bsums[4 * p + 2] + yb->bsums[4 * p + 3]) << 16;
        for (int h = 0; h < 2; h++) {
            __m256i sm = _mm256_madd_epi16(mn[p][h], _mm256_set1_epi32(bs));
            if (gemm) {
                A[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(l[h]), d[h], A[h]);
                Am[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sm), dmin[h], Am[h]);
            } else {
                sumi[h] = _mm256_add_epi32(sumi[h], l[h]);
                summ[h] = _mm256_add_epi32(summ[h], sm);
            }
        }
    }
    for (int h = 0; h < 2; h++) {
        if (!gemm) {
            A[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[h]), d[h], A[h]);
            Am[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(summ[h]), dmin[h], Am[h]);
        }
        _mm256_storeu_ps(acc + 8 * h, A[h]), _mm256_storeu_ps(accm + 8 * h, Am[h]);
    }
}

/* Bytes k0 and k1 of each 32-bit lane as its two int16 halves */
static inline SIMD_INLINE __m256i bytes16_avx2(__m256i v, int k0, int k1) {
    uint32_t c = 0x80008000u | (uint32_t)k1 << 16 | (uint32_t)k0;   /* the shuffle's control for the lane at byte 0 */
    __m128i ctl = _mm_setr_epi32((int)c, (int)(c + 0x00040004u), (int)(c + 0x00080008u), (int)(c + 0x000c000cu));
    return _mm256_shuffle_epi8(v, _mm256_broadcastsi128_si256(ctl));
}

static inline SIMD_INLINE void q4_K_8x8_rows16_avx2(const void *w, size_t row_bytes, const void *a, size_t stride, int T,
                                                   int64_t n, float *y, size_t ystride, const bool gemm) {
    _Alignas(32) float acc[TILE_T][16], accm[TILE_T][16];
    _Alignas(32) uint8_t wt[8][8][64];   /* group g of sub-block j: row i's four nibbles at 4i */
    memset(acc, 0, (size_t)T * sizeof acc[0]), memset(accm, 0, (size_t)T * sizeof accm[0]);
    const __m256i m15 = _mm256_set1_epi8(15), m63 = _mm256_set1_epi8(63), m48 = _mm256_set1_epi8(48);
    for (int64_t b = 0; b < n / 256; b++) {
        const uint8_t *blk = (const uint8_t *)((const BlockQ4_K *)w + b);
        prefetch_next16(w, row_bytes, b, n / 256);   /* as the 512-bit kernel asks for the next rows */
        __m256i sc[8][2], mn[4][2];   /* by lane: scale j in both int16 halves; mins 2p | 2p+1 << 16 */
        __m256 dw[2], dmw[2];
        for (int h = 0; h < 2; h++) {
            /* words 0-3 of rows 8h..8h+7: d | dmin << 16, then the twelve scale bytes q; unpack_scales_k4 by bytes:
             * scales 0-3 = q0-3 & 63, 4-7 = (q8-11 & 15) | (q0-3 >> 6) << 4, mins 0-3 = q4-7 & 63,
             * 4-7 = (q8-11 >> 4) | (q4-7 >> 6) << 4 */
            __m256i v[8];
            words8_avx2(blk + 8 * h * row_bytes, row_bytes, v);
            __m256i ddm = _mm256_permute4x64_epi64(   /* [d of the eight rows | their dmin] */
                _mm256_shuffle_epi8(v[0], _mm256_broadcastsi128_si256(_mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15))), 0xd8);
            dw[h] = _mm256_cvtph_ps(_mm256_castsi256_si128(ddm)), dmw[h] = _mm256_cvtph_ps(_mm256_extracti128_si256(ddm, 1));
            __m256i s03 = _mm256_and_si256(v[1], m63), m03 = _mm256_and_si256(v[2], m63);
            __m256i s47 = _mm256_or_si256(_mm256_and_si256(v[3], m15), _mm256_and_si256(_mm256_srli_epi32(v[1], 2), m48));
            __m256i m47 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(v[3], 4), m15), _mm256_and_si256(_mm256_srli_epi32(v[2], 2), m48));
            for (int j = 0; j < 4; j++) sc[j][h] = bytes16_avx2(s03, j, j), sc[4 + j][h] = bytes16_avx2(s47, j, j);
            for (int p = 0; p < 2; p++) mn[p][h] = bytes16_avx2(m03, 2 * p, 2 * p + 1), mn[2 + p][h] = bytes16_avx2(m47, 2 * p, 2 * p + 1);
        }
        const uint8_t *qs = blk + offsetof(BlockQ4_K, qs);
        for (int h = 0; h < 2; h++)
            for (int p = 0; p < 4; p++) {   /* words 8p..8p+7 of rows 8h..8h+7: sub-blocks 2p (low nibbles), 2p+1 (high) */
                __m256i v[8];
                words8_avx2(qs + 32 * p + 8 * h * row_bytes, row_bytes, v);
                for (int g = 0; g < 8; g++) {
                    _mm256_store_si256((__m256i *)(wt[2 * p][g] + 32 * h), _mm256_and_si256(v[g], m15));
                    _mm256_store_si256((__m256i *)(wt[2 * p + 1][g] + 32 * h), _mm256_and_si256(_mm256_srli_epi16(v[g], 4), m15));
                }
            }
        for (int r = 0; r < T; r++)
            q4_K_block16_avx2(wt, sc, mn, dw, dmw, act_block(a, stride, r, sizeof(BlockQ8_K), b), gemm, acc[r], accm[r]);
    }
    for (int r = 0; r < T; r++)
        for (int h = 0; h < 2; h++)
            _mm256_storeu_ps(y + (size_t)r * ystride + 8 * h, _mm256_sub_ps(_mm256_load_ps(acc[r] + 8 * h), _mm256_load_ps(accm[r] + 8 * h)));
}
SIMD static void gemm16_q4_K_8x8_gemm_avx2(const void *w, size_t row_bytes, const void *a, size_t stride, int T, int64_t n, float *y, size_t ystride) {
    q4_K_8x8_rows16_avx2(w, row_bytes, a, stride, T, n, y, ystride, true);
}
SIMD static void gemm16_q4_K_8x8_avx2(const void *w, size_t row_bytes, const void *a, size_t stride, int T, int64_t n, float *y, size_t ystride) {
    q4_K_8x8_rows16_avx2(w, row_bytes, a, stride, T, n, y, ystride, false);
}
#endif

#if !ZMM
/* Scales 2k and 2k+1 of a group of eight int16 scales (in both halves of s8), as int16 in the
 * low and the high 128 bits: bytes 4k, 4k+1 and 4k+2, 4k+3 of each half */
static inline SIMD_INLINE __m256i scales_q6_avx2(__m256i s8, int k) {
    return _mm256_shuffle_epi8(s8, _mm256_set_m128i(_mm_set1_epi16((short)(0x0100 * (4 * k + 3) + 4 * k + 2)),
                                                     _mm_set1_epi16((short)(0x0100 * (4 * k + 1) + 4 * k))));
}
#endif

/* dot_q6_K: chunk c (32 elements) of u = q + 32 is a nibble of ql with two bits of qh above it;
 * its first 16 elements take scale 2c, the last 16 scale 2c+1 (int16 lanes 0..7 and 8..15 of madd).
 * q6_K_lanes_avx2: the integer lanes of weight block x[b] against block b of R activation rows,
 * the block unpacked once for all of them. */
static inline SIMD_INLINE void q6_K_lanes_avx2(const BlockQ6_K *x, int64_t b, const void *a, size_t stride, const int R, __m256i lane[]) {
    const int8_t *sc = x[b].scales;
    __m256i s16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)sc));
    #pragma GCC unroll 8
    for (int r = 0; r < R; r++) {   /* the offset: lane l = -32 (bsum_2l sc_2l + bsum_2l+1 sc_2l+1) */
        const BlockQ8_K *y = act_block(a, stride, r, sizeof *y, b);
        lane[r] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(_mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y->bsums), s16), 5));
    }
#if ZMM
    /* chunks 2p, 2p+1 (p = 2 half + j): ql[64 half ..] is both chunks' low nibbles (j = 0) or
     * high nibbles (j = 1), qh[32 half ..] their high bits at shifts 4|2 (left, j = 0), 0|2 (right) */
    const __m512i m4z = _mm512_set1_epi8(15), m2z = _mm512_set1_epi8(0x30), s512 = _mm512_castsi256_si512(s16);
    __m512i lz[MAX_ROWS];
    #pragma GCC unroll 8
    for (int r = 0; r < R; r++) lz[r] = _mm512_zextsi256_si512(lane[r]);
    #pragma GCC unroll 2
    for (int half = 0; half < 2; half++) {
        __m512i l = _mm512_loadu_si512((const void *)(x[b].ql + 64 * half)), h = twice_zmm(x[b].qh + 32 * half);
        __m512i u[2] = {_mm512_or_si512(_mm512_and_si512(l, m4z), _mm512_and_si512(_mm512_sllv_epi16(h, halves16_zmm(4, 2)), m2z)),
                        _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4z), _mm512_and_si512(_mm512_srlv_epi16(h, halves16_zmm(0, 2)), m2z))};
        #pragma GCC unroll 2
        for (int j = 0; j < 2; j++) {
            int p = 2 * half + j;   /* scales 4p, 4p+1 (chunk 2p's halves), 4p+2, 4p+3 (chunk 2p+1's) per 128 bits */
            __m512i idx = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set_m128i(_mm_set1_epi16((short)(4 * p + 1)), _mm_set1_epi16((short)(4 * p)))),
                                             _mm256_set_m128i(_mm_set1_epi16((short)(4 * p + 3)), _mm_set1_epi16((short)(4 * p + 2))), 1);
            __m512i sp = _mm512_permutexvar_epi16(idx, s512);
            #pragma GCC unroll 8
            for (int r = 0; r < R; r++)
                lz[r] = lanes_u8i8_zmm(lz[r], u[j], ((const BlockQ8_K *)act_block(a, stride, r, sizeof(BlockQ8_K), b))->qs + 64 * p, sp);
        }
    }
    #pragma GCC unroll 8
    for (int r = 0; r < R; r++) lane[r] = fold_pair_zmm(lz[r]);
#else
    const __m256i m4 = _mm256_set1_epi8(15), m2 = _mm256_set1_epi8(0x30);
    __m256i s2 = _mm256_permute4x64_epi64(s16, 0x44), s2h = _mm256_permute4x64_epi64(s16, 0xee);   /* sc 0..7 | 0..7, 8..15 | 8..15 */
    #pragma GCC unroll 8
    for (int c = 0; c < 8; c++) {
        int half = c / 4, k = c % 4;
        __m256i l = _mm256_loadu_si256((const __m256i *)(x[b].ql + 64 * half + 32 * (k % 2)));
        __m256i h = _mm256_loadu_si256((const __m256i *)(x[b].qh + 32 * half));
        __m256i lo = _mm256_and_si256(k < 2 ? l : _mm256_srli_epi16(l, 4), m4);
        __m256i hi = _mm256_and_si256(k == 0 ? _mm256_slli_epi16(h, 4) : k == 1 ? _mm256_slli_epi16(h, 2) : k == 2 ? h : _mm256_srli_epi16(h, 2), m2);
        __m256i u = _mm256_or_si256(lo, hi);
        __m256i s = scales_q6_avx2(c < 4 ? s2 : s2h, c % 4);
        #pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            const BlockQ8_K *y = act_block(a, stride, r, sizeof *y, b);
            lane[r] = lanes_u8i8_avx2(lane[r], u, _mm256_loadu_si256((const __m256i *)(y->qs + 32 * c)), s);
        }
    }
#endif
}

/* the R rows' sums: acc_r += (d_a d_w) lanes per block, one fold at the end */
static inline SIMD_INLINE void q6_K_rows_avx2(const void *w, const void *a, size_t stride, const int R, int64_t n, float *out) {
    const BlockQ6_K *x = w;
    __m256 acc[MAX_ROWS];
    __m256i lane[MAX_ROWS];
    #pragma GCC unroll 8
    for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / 256; b++) {
        for (int c = 0; c < 4; c++) _mm_prefetch((const char *)&x[b + ROWS_AHEAD * (n / 256)] + 64 * c, _MM_HINT_T0);   /* its 210 bytes */
        q6_K_lanes_avx2(x, b, a, stride, R, lane);
        float dw = f16c(x[b].d);
        #pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            const BlockQ8_K *y = act_block(a, stride, r, sizeof *y, b);
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(y->d * dw), _mm256_cvtepi32_ps(lane[r]), acc[r]);
        }
    }
    #pragma GCC unroll 8
    for (int r = 0; r < R; r++) out[r] = fold8_avx2(acc[r]);
}

/* q6_K_rows_avx2 for four weight rows and R <= W4_MAX_ROWS activation rows (DotW4Fn), each weight
 * row's operations in the single row's order, a block unpacked once for the R rows: four
 * independent weight rows, each asking for its bytes PREFETCH_AHEAD ahead */
static inline SIMD_INLINE void q6_K_w4_avx2(const void *w, size_t spacing, const void *a, size_t stride, const int R, int64_t n, float *out) {
    const BlockQ6_K *x[4];
    __m256 acc[4][W4_MAX_ROWS];
    #pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        x[i] = (const BlockQ6_K *)((const uint8_t *)w + i * spacing);
        #pragma GCC unroll 3   /* (else a memset of a stack array: acc in memory) */
        for (int r = 0; r < R; r++) acc[i][r] = _mm256_setzero_ps();
    }
    for (int64_t b = 0; b < n / 256; b++) {
        #pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            for (int c = 0; c < 4; c++) _mm_prefetch((const char *)&x[i][b] + PREFETCH_AHEAD + 64 * c, _MM_HINT_T0);   /* the block's 210 bytes */
            float dw = f16c(x[i][b].d);
            __m256i lane[W4_MAX_ROWS];
            q6_K_lanes_avx2(x[i], b, a, stride, R, lane);
            #pragma GCC unroll 3
            for (int r = 0; r < R; r++) {
                const BlockQ8_K *y = act_block(a, stride, r, sizeof *y, b);
                acc[i][r] = _mm256_fmadd_ps(_mm256_set1_ps(y->d * dw), _mm256_cvtepi32_ps(lane[r]), acc[i][r]);
            }
        }
    }
    #pragma GCC unroll 3
    for (int r = 0; r < R; r++)
        for (int i = 0; i < 4; i++) out[4 * r + i] = fold8_avx2(acc[i][r]);
}

/* --- Activation rounding with SIMD: quantize_q8_0 and quantize_q8_K, the same float operations --- */
/* max |x| over 8 lanes as fmaxf(amax, fabsf(x)) in any order: max_ps keeps its second operand when
 * the first is NaN, so a NaN never becomes the maximum (fmaxf ignores NaN the same way) */
static inline SIMD_INLINE __m256 amax_avx2(__m256 amax, __m256 x) {
    return _mm256_max_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), x), amax);
}

static inline SIMD_INLINE float hmax8_avx2(__m256 v) {
    __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_max_ps(x, _mm_movehl_ps(x, x));
    return _mm_cvtss_f32(_mm_max_ss(x, _mm_movehdup_ps(x)));
}

/* lrintf(x * id) of 32 values as bytes: round to nearest even (the default mode), and a NaN or an
 * out-of-range product, which lrintf turns into a long whose low byte is 0, becomes 0 too */
static inline SIMD_INLINE __m256i round_bytes_avx2(const float *x, __m256 id, int clamp127) {
    __m256i q[4];
    for (int k = 0; k < 4; k++) {
        __m256i v = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), id));
        v = _mm256_andnot_si256(_mm256_cmpeq_epi32(v, _mm256_set1_epi32(INT32_MIN)), v);
        q[k] = clamp127 ? _mm256_min_epi32(v, _mm256_set1_epi32(127)) : v;
    }
    /* packs saturate, but every value is in -128..127 here; then undo the lane interleave */
    __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

SIMD static void quantize_q8_0_avx2(const float *x, BlockQ8_0 *y, int64_t n) {
    for (int64_t b = 0; b < n / 32; b++) {
        const float *v = x + 32 * b;
        __m256 m = _mm256_setzero_ps();
        for (int k = 0; k < 4; k++) m = amax_avx2(m, _mm256_loadu_ps(v + 8 * k));
        float amax = hmax8_avx2(m);
        float d = amax / 127, id = amax != 0 ? 127.f / amax : 0;
        y[b].d = fp32_to_fp16(d);
        _mm256_storeu_si256((__m256i *)y[b].qs, round_bytes_avx2(v, _mm256_set1_ps(id), 0));
    }
}

SIMD static void quantize_q8_K_avx2(const float *x, BlockQ8_K *y, int64_t n) {
    for (int64_t b = 0; b < n / 256; b++) {
        const float *v = x + 256 * b;
        __m256 m = _mm256_setzero_ps();
        for (int k = 0; k < 32; k++) m = amax_avx2(m, _mm256_loadu_ps(v + 8 * k));
        float amax = hmax8_avx2(m);
        if (amax == 0) {
            memset(&y[b], 0, sizeof y[b]);
            continue;
        }
        float max = 0;   /* the first value of largest magnitude, with its sign */
        for (int k = 0; k < 32; k++) {
            int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), _mm256_loadu_ps(v + 8 * k)),
                                                       _mm256_set1_ps(amax), _CMP_EQ_OQ));
            if (hit) {
                max = v[8 * k + __builtin_ctz((unsigned)hit)];
                break;
            }
        }
        float iscale = -127.f / max;
        for (int k = 0; k < 8; k++) {
            __m256i q = round_bytes_avx2(v + 32 * k, _mm256_set1_ps(iscale), 1);
            _mm256_storeu_si256((__m256i *)(y[b].qs + 32 * k), q);
            /* bsums of the two groups of 16: sign-extended bytes summed by madd and a horizontal add */
            __m256i s = _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm256_castsi256_si128(q)), _mm256_set1_epi16(1));
            __m256i t = _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm256_extracti128_si256(q, 1)), _mm256_set1_epi16(1));
            __m256i h = _mm256_hadd_epi32(s, t);   /* [s01 s23 t01 t23 | s45 s67 t45 t67] */
            h = _mm256_hadd_epi32(h, h);           /* [s0-3 t0-3 .. | s4-7 t4-7 ..] */
            __m128i g = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
            y[b].bsums[2 * k] = (int16_t)_mm_cvtsi128_si32(g);
            y[b].bsums[2 * k + 1] = (int16_t)_mm_extract_epi32(g, 1);
        }
        y[b].d = 1 / iscale;
    }
}

/* The kernels on R <= MAX_ROWS = 8 activation rows: k is one of the inline bodies above, so that
 * after inlining each call is an instance for a constant row count. Those on Q8_0 activations take a
 * packed group (BlockQ8_0x8, stride unused) and all eight rows at once (their per-row work is small
 * beside the weight block's); the K-quants take rows stride bytes apart, four at a time (eight where
 * AVX-512's 32 registers hold their accumulators, and the repacked Q4_K, whose rows' sums are reduced
 * into the lanes of one register as they go). */
typedef void KRowsFn(const void *w, const void *a, size_t stride, const int R, int64_t n, float *out);
static inline SIMD_INLINE void rows_upto_four_avx2(KRowsFn *k, const void *w, const void *a, size_t stride, int R, int64_t n,
                                                   float *out) {
    switch (R) {
    case 1: k(w, a, stride, 1, n, out); break;
    case 2: k(w, a, stride, 2, n, out); break;
    case 3: k(w, a, stride, 3, n, out); break;
    default: k(w, a, stride, 4, n, out); break;
    }
}
/* R <= 8 rows in one call: the Q8_0-activation kernels, and the K-quants whose eight rows'
 * accumulators fit AVX-512's 32 registers */
static inline SIMD_INLINE void rows_upto_eight_avx2(KRowsFn *k, const void *w, const void *a, size_t stride, int R, int64_t n,
                                                    float *out) {
    switch (R) {
    case 1: k(w, a, stride, 1, n, out); break;
    case 2: k(w, a, stride, 2, n, out); break;
    case 3: k(w, a, stride, 3, n, out); break;
    case 4: k(w, a, stride, 4, n, out); break;
    case 5: k(w, a, stride, 5, n, out); break;
    case 6: k(w, a, stride, 6, n, out); break;
    case 7: k(w, a, stride, 7, n, out); break;
    default: k(w, a, stride, 8, n, out); break;
    }
}
/* the Q8_0-activation bodies in the K-quants' form (stride unused) */
static inline SIMD_INLINE void q8_0_k_rows_avx2(const void *w, const void *a, size_t stride, const int R, int64_t n, float *out) {
    (void)stride;
    q8_0_rows_avx2(w, false, a, R, n, out);
}
static inline SIMD_INLINE void q4_0_k_rows_avx2(const void *w, const void *a, size_t stride, const int R, int64_t n, float *out) {
    (void)stride;
    q8_0_rows_avx2(w, true, a, R, n, out);
}
static inline SIMD_INLINE void q4_0_8x8_k_rows_avx2(const void *w, const void *a, size_t stride, const int R, int64_t n, float *out) {
    (void)stride;
    q4_0_8x8_rows_avx2(w, a, R, n, out);
}
SIMD static void rows_q8_0_avx2(const void *w, const void *a, size_t stride, int R, int64_t n, float *out) {
    rows_upto_eight_avx2(q8_0_k_rows_avx2, w, a, stride, R, n, out);
}
SIMD static void rows_q4_0_avx2(const void *w, const void *a, size_t stride, int R, int64_t n, float *out) {
    rows_upto_eight_avx2(q4_0_k_rows_avx2, w, a, stride, R, n, out);
}
SIMD static void rows_q4_0_8x8_avx2(const void *w, const void *a, size_t stride, int R, int64_t n, float *out) {
    rows_upto_eight_avx2(q4_0_8x8_k_rows_avx2, w, a, stride, R, n, out);
}

static inline SIMD_INLINE void rows_by_four_avx2(KRowsFn *k, const void *w, const void *a, size_t stride, int R, int64_t n,
                                                 float *out) {
    if (R > 4) {   /* four, then the rest */
        k(w, a, stride, 4, n, out);
        rows_upto_four_avx2(k, w, (const uint8_t *)a + 4 * stride, stride, R - 4, n, out + 4);
    } else {
        rows_upto_four_avx2(k, w, a, stride, R, n, out);
    }
}

static inline SIMD_INLINE void f32_tile_k_rows_avx2(const void *w, const void *a, size_t stride, const int R, int64_t n, float *out) {
    float_tile_rows_avx2(w, false, a, stride, R, n, out);
}
static inline SIMD_INLINE void bf16_tile_k_rows_avx2(const void *w, const void *a, size_t stride, const int R, int64_t n, float *out) {
    float_tile_rows_avx2(w, true, a, stride, R, n, out);
}
/* (a length the tile order does not cover, not a multiple of 16 (F32) or 32 (BF16): the single dots) */
SIMD static void rows_f32_tile_avx2(const void *w, const void *a, size_t stride, int R, int64_t n, float *out) {
    if (n % 16) for (int r = 0; r < R; r++) out[r] = dot_f32_tile_avx2(w, (const uint8_t *)a + r * stride, n);
    else if (ZMM) rows_upto_eight_avx2(f32_tile_k_rows_avx2, w, a, stride, R, n, out);
    else rows_by_four_avx2(f32_tile_k_rows_avx2, w, a, stride, R, n, out);
}
SIMD static void rows_bf16_tile_avx2(const void *w, const void *a, size_t stride, int R, int64_t n, float *out) {
    if (n % 32) for (int r = 0; r < R; r++) out[r] = dot_bf16_tile_avx2(w, (const uint8_t *)a + r * stride, n);
    else if (ZMM) rows_upto_eight_avx2(bf16_tile_k_rows_avx2, w, a, stride, R, n, out);
    else rows_by_four_avx2(bf16_tile_k_rows_avx2, w, a, stride, R, n, out);
}

SIMD static void rows_q4_K_avx2(const void *w, const void *a, size_t stride, int R, int64_t n, float *out) {
    if (ZMM) rows_upto_eight_avx2(q4_K_rows_avx2, w, a, stride, R, n, out);
    else rows_by_four_avx2(q4_K_rows_avx2, w, a, stride, R, n, out);
}
SIMD static void rows_q4_K_8x8_avx2(const void *w, const void *a, size_t stride, int R, int64_t n, float *out) {
    rows_upto_eight_avx2(q4_K_8x8_gemv_rows_avx2, w, a, stride, R, n, out);
}
SIMD static void rows_q4_K_8x8_gemm_avx2(const void *w, const void *a, size_t stride, int R, int64_t n, float *out) {
    rows_upto_eight_avx2(q4_K_8x8_gemm_rows_avx2, w, a, stride, R, n, out);
}
SIMD static void rows_q5_K_avx2(const void *w, const void *a, size_t stride, int R, int64_t n, float *out) {
    if (ZMM) rows_upto_eight_avx2(q5_K_rows_avx2, w, a, stride, R, n, out);
    else rows_by_four_avx2(q5_K_rows_avx2, w, a, stride, R, n, out);
}
SIMD static void rows_q6_K_avx2(const void *w, const void *a, size_t stride, int R, int64_t n, float *out) {
    if (ZMM) rows_upto_eight_avx2(q6_K_rows_avx2, w, a, stride, R, n, out);
    else rows_by_four_avx2(q6_K_rows_avx2, w, a, stride, R, n, out);
}

/* Four weight rows against R <= W4_MAX_ROWS activation rows: as the row kernels above, each body an
 * instance for a constant R. The K-quants unpack a block once for the R rows; the Q8_0-activation
 * kernels (small blocks, little to share) take the rows one after another. */
typedef void KW4Fn(const void *w, size_t spacing, const void *a, size_t stride, const int R, int64_t n, float *out);
static inline SIMD_INLINE void w4_upto_three_avx2(KW4Fn *k, const void *w, size_t spacing, const void *a, size_t stride, int R, int64_t n,
                                                  float *out) {
    switch (R) {
    case 1: k(w, spacing, a, stride, 1, n, out); break;
    case 2: k(w, spacing, a, stride, 2, n, out); break;
    default: k(w, spacing, a, stride, 3, n, out); break;
    }
}
static inline SIMD_INLINE void q4_K_w4_avx2(const void *w, size_t spacing, const void *a, size_t stride, const int R, int64_t n, float *out) {
    k4_w4_avx2(w, spacing, sizeof(BlockQ4_K), false, a, stride, R, n, out);
}
static inline SIMD_INLINE void q5_K_w4_avx2(const void *w, size_t spacing, const void *a, size_t stride, const int R, int64_t n, float *out) {
    k4_w4_avx2(w, spacing, sizeof(BlockQ5_K), true, a, stride, R, n, out);
}
SIMD static void dot_w4_q8_0_avx2(const void *w, size_t spacing, const void *a, size_t stride, int R, int64_t n, float *out) {
    for (int r = 0; r < R; r++) q8_0_dot_w4_avx2(w, spacing, false, (const uint8_t *)a + r * stride, n, out + 4 * r);
}
SIMD static void dot_w4_q4_0_avx2(const void *w, size_t spacing, const void *a, size_t stride, int R, int64_t n, float *out) {
    for (int r = 0; r < R; r++) q8_0_dot_w4_avx2(w, spacing, true, (const uint8_t *)a + r * stride, n, out + 4 * r);
}
SIMD static void dot_w4_q4_0_8x8_avx2(const void *w, size_t spacing, const void *a, size_t stride, int R, int64_t n, float *out) {
    for (int r = 0; r < R; r++) q4_0_8x8_dot_w4_avx2(w, spacing, (const uint8_t *)a + r * stride, n, out + 4 * r);
}
SIMD static void dot_w4_q4_K_8x8_avx2(const void *w, size_t spacing, const void *a, size_t stride, int R, int64_t n, float *out) {
    w4_upto_three_avx2(q4_K_8x8_gemv_w4_avx2, w, spacing, a, stride, R, n, out);
}
SIMD static void dot_w4_q4_K_avx2(const void *w, size_t spacing, const void *a, size_t stride, int R, int64_t n, float *out) {
    w4_upto_three_avx2(q4_K_w4_avx2, w, spacing, a, stride, R, n, out);
}
SIMD static void dot_w4_q5_K_avx2(const void *w, size_t spacing, const void *a, size_t stride, int R, int64_t n, float *out) {
    w4_upto_three_avx2(q5_K_w4_avx2, w, spacing, a, stride, R, n, out);
}
SIMD static void dot_w4_q6_K_avx2(const void *w, size_t spacing, const void *a, size_t stride, int R, int64_t n, float *out) {
    w4_upto_three_avx2(q6_K_w4_avx2, w, spacing, a, stride, R, n, out);
}

/* single rows */
SIMD static float dot_q8_0_avx2(const void *w, const void *a, int64_t n) { return q8_0_dot_avx2(w, false, a, n); }
SIMD static float dot_q4_0_avx2(const void *w, const void *a, int64_t n) { return q8_0_dot_avx2(w, true, a, n); }
SIMD static float dot_q4_0_8x8_avx2(const void *w, const void *a, int64_t n) { return q4_0_8x8_dot_avx2(w, a, n); }
SIMD static float dot_q4_K_avx2(const void *w, const void *a, int64_t n) { float o; rows_q4_K_avx2(w, a, 0, 1, n, &o); return o; }
SIMD static float dot_q4_K_8x8_avx2(const void *w, const void *a, int64_t n) { float o; rows_q4_K_8x8_avx2(w, a, 0, 1, n, &o); return o; }
SIMD static float dot_q4_K_8x8_gemm_avx2(const void *w, const void *a, int64_t n) { float o; rows_q4_K_8x8_gemm_avx2(w, a, 0, 1, n, &o); return o; }
SIMD static float dot_q5_K_avx2(const void *w, const void *a, int64_t n) { float o; rows_q5_K_avx2(w, a, 0, 1, n, &o); return o; }
SIMD static float dot_q6_K_avx2(const void *w, const void *a, int64_t n) { float o; rows_q6_K_avx2(w, a, 0, 1, n, &o); return o; }

/* y[l] = expf_ggml(x[l]) for 8 lanes, the same fused steps per lane. 2^n is applied as two powers of two,
 * 2^floor(n/2) and 2^(n - floor(n/2)), both normal for |n| <= 192: the first product is exact and
 * the second rounds once, correctly, as ldexpf does. Lanes with n < -192 (masked scores: -inf) are
 * 0, as in expf_ggml; a group with a lane past n <= 192 (or NaN) goes through the scalar expf_ggml. */
static inline SIMD_INLINE void expf_ggml8_avx2(const float *x, float *y) {
    const __m256 r = _mm256_set1_ps(0x1.8p23f), sign = _mm256_set1_ps(-0.0f);
    __m256 v = _mm256_loadu_ps(x);
    __m256 n = _mm256_sub_ps(_mm256_fmadd_ps(v, _mm256_set1_ps(0x1.715476p+0f), r), r), neg_n = _mm256_xor_ps(n, sign);
    __m256 b = _mm256_fmadd_ps(neg_n, _mm256_set1_ps(0x1.7f7d1cp-20f), _mm256_fmadd_ps(neg_n, _mm256_set1_ps(0x1.62e4p-1f), v));
    __m256 tiny = _mm256_cmp_ps(n, _mm256_set1_ps(-192.0f), _CMP_LT_OQ);
    if (_mm256_movemask_ps(_mm256_or_ps(tiny, _mm256_cmp_ps(_mm256_andnot_ps(sign, n), _mm256_set1_ps(192.0f), _CMP_LE_OQ))) != 0xff) {
        for (int l = 0; l < 8; l++) y[l] = expf_ggml(x[l]);
        return;
    }
    n = _mm256_andnot_ps(tiny, n), b = _mm256_andnot_ps(tiny, b);   /* (those lanes' result is masked below) */
    __m256 u = _mm256_mul_ps(b, b);
    __m256 p = _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f)), u,
                                               _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f))),
                               u, _mm256_fmadd_ps(_mm256_set1_ps(0x1.ffffecp-1f), b, _mm256_set1_ps(1.0f)));
    __m256i ni = _mm256_cvtps_epi32(n), n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1), bias = _mm256_set1_epi32(127);
    __m256 two_n1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    __m256 two_n2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
    _mm256_storeu_ps(y, _mm256_andnot_ps(tiny, _mm256_mul_ps(_mm256_mul_ps(p, two_n1), two_n2)));
}

/* exp_sum with each group of 16 exponentials in two registers: lanes l and l+8 added first, then
 * fold8_avx2, which is fold(g, 16). The libm tail and the sums are the scalar's. */
SIMD static double exp_sum_avx2(float *x, int n, float max) {
    __m256 max8 = _mm256_set1_ps(max);
    double sum = 0;
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        for (int h = 0; h < 16; h += 8) {
            _mm256_storeu_ps(x + i + h, _mm256_sub_ps(_mm256_loadu_ps(x + i + h), max8));
            expf_ggml8_avx2(x + i + h, x + i + h);
        }
        sum += fold8_avx2(_mm256_add_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(x + i + 8)));
    }
    for (; i < n; i++) { x[i] = expf(x[i] - max); sum += x[i]; }
    return sum;
}

/* softmax with exp_sum_avx2; the max is the scalar's */
SIMD static void softmax_avx2(float *x, int n) {
    float max = -INFINITY;
    for (int i = 0; i < n; i++)
        if (x[i] > max) max = x[i];
    float inv = (float)(1.0 / exp_sum_avx2(x, n, max));
    __m256 inv8 = _mm256_set1_ps(inv);
    int j = 0;
    for (; j + 8 <= n; j += 8) _mm256_storeu_ps(x + j, _mm256_mul_ps(_mm256_loadu_ps(x + j), inv8));
    for (; j < n; j++) x[j] *= inv;
}

/* silu_row 8 at a time: x / (1 + expf_ggml(-x)) per lane */
SIMD static void silu_row_avx2(float *y, const float *x, int n) {
    const __m256 sign = _mm256_set1_ps(-0.0f), one = _mm256_set1_ps(1.0f);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        float e[8];
        __m256 v = _mm256_loadu_ps(x + i);
        _mm256_storeu_ps(e, _mm256_xor_ps(v, sign));
        expf_ggml8_avx2(e, e);
        _mm256_storeu_ps(y + i, _mm256_div_ps(v, _mm256_add_ps(one, _mm256_loadu_ps(e))));
    }
    for (; i < n; i++) y[i] = silu(x[i]);
}

/* gdn_conv on 8 channels per register: the taps of up to 128 channels transposed once to
 * w[j][channel], then each row's chain of fused multiply-adds over j is the scalar's, one channel
 * per lane. */
SIMD static void gdn_conv_avx2(const float *wc, int K, int C, const float *ring, const float *u, int T, int ch0, int ch1, float *y) {
    float w[64][128];
    for (int c0 = ch0; c0 < ch1; c0 += 128) {
        int nc = ch1 - c0 < 128 ? ch1 - c0 : 128, nv = nc & ~7, i0 = 0;
        if (K == 4)   /* eight channels' taps, [8][4] -> [4][8], by shuffles (a decoding step's conv is mostly this) */
            for (; i0 < nv; i0 += 8) {
                const float *p = wc + (size_t)(c0 + i0) * 4;   /* channels (0 1) (2 3) (4 5) (6 7), four taps each */
                __m256 r0 = _mm256_loadu_ps(p), r1 = _mm256_loadu_ps(p + 8), r2 = _mm256_loadu_ps(p + 16), r3 = _mm256_loadu_ps(p + 24);
                __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1), t2 = _mm256_unpacklo_ps(r2, r3),
                       t3 = _mm256_unpackhi_ps(r2, r3);
                __m256 tap[4] = {_mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0)), _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2)),
                                 _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0)), _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2))};
                for (int j = 0; j < 4; j++)   /* channels 0 2 4 6 1 3 5 7 back in order */
                    _mm256_storeu_ps(w[j] + i0, _mm256_permutevar8x32_ps(tap[j], _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
            }
        for (int j = 0; j < K; j++)
            for (int i = i0; i < nc; i++) w[j][i] = wc[(size_t)(c0 + i) * K + j];
        for (int t = 0; t < T; t++) {
            const float *X[64];
            for (int j = 0; j < K; j++) X[j] = t + j < K - 1 ? ring + (size_t)(t + j) * C : u + (size_t)(t + j - (K - 1)) * C;
            float *yt = y + (size_t)t * C + c0;
            for (int i = 0; i < nv; i += 8) {
                __m256 s = _mm256_setzero_ps();
                for (int j = 0; j < K; j++) s = _mm256_fmadd_ps(_mm256_loadu_ps(X[j] + c0 + i), _mm256_loadu_ps(w[j] + i), s);
                _mm256_storeu_ps(yt + i, s);
            }
            for (int i = nv; i < nc; i++) {
                float s = 0;
                for (int j = 0; j < K; j++) s = fmaf(X[j][c0 + i], w[j][i], s);
                yt[i] = s;
            }
        }
    }
}

/* delta_rule in two passes over each column S_j instead of four: S_j[i] *= decay and
 * S_j[i] += k[i] delta are per element, so each lane does the scalar's operation, and each pass
 * feeds the updated values straight into the 64 accumulators of dot_f32's SIMD twin (same lanes,
 * same fold, same tail). */
SIMD static void delta_rule_avx2(float *S, const float *q, const float *k, const float *v, float g, float beta, int d, float *o) {
    float decay = expf(g), scale = 1.0f / sqrtf((float)d);
    int np = d & ~63;
    __m256 decay8 = _mm256_set1_ps(decay);
    for (int j = 0; j < d; j++) {
        float *Sj = S + (size_t)j * d;
        __m256 acc[8];
#pragma GCC unroll 8   /* (else a memset of a stack array) */
        for (int r = 0; r < 8; r++) acc[r] = _mm256_setzero_ps();
        for (int i = 0; i < np; i += 64)   /* S_j *= decay, and S_j . k in dot_f32's accumulators */
#pragma GCC unroll 8   /* acc in registers */
            for (int r = 0; r < 8; r++) {
                __m256 s = _mm256_mul_ps(_mm256_loadu_ps(Sj + i + 8 * r), decay8);
                _mm256_storeu_ps(Sj + i + 8 * r, s);
                acc[r] = _mm256_fmadd_ps(s, _mm256_loadu_ps(k + i + 8 * r), acc[r]);
            }
        for (int i = np; i < d; i++) Sj[i] *= decay;
        float delta = (v[j] - dot_f32_finish_avx2(acc, Sj, k, np, d)) * beta;
        __m256 delta8 = _mm256_set1_ps(delta);
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) acc[r] = _mm256_setzero_ps();
        for (int i = 0; i < np; i += 64)   /* S_j += k delta, and S_j . q */
#pragma GCC unroll 8   /* acc in registers */
            for (int r = 0; r < 8; r++) {
                __m256 s = _mm256_fmadd_ps(_mm256_loadu_ps(k + i + 8 * r), delta8, _mm256_loadu_ps(Sj + i + 8 * r));
                _mm256_storeu_ps(Sj + i + 8 * r, s);
                acc[r] = _mm256_fmadd_ps(s, _mm256_loadu_ps(q + i + 8 * r), acc[r]);
            }
        for (int i = np; i < d; i++) Sj[i] = fmaf(k[i], delta, Sj[i]);
        o[j] = dot_f32_finish_avx2(acc, Sj, q, np, d) * scale;
    }
}

#if ZMM
/* fold64_avx2 of the 64 accumulators in four 512-bit registers (register r: accumulators 16r..16r+15) */
static inline SIMD_INLINE float fold64_zmm(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
    __m512 a = _mm512_add_ps(_mm512_add_ps(a0, a2), _mm512_add_ps(a1, a3));
    return fold8_avx2(_mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1)));
}

/* delta_rule_avx2 on C columns at once in 512-bit registers: the columns are independent, so the C
 * chains (dot, delta, update, dot) overlap, where one column alone waits on its folds (what a
 * batch's rows, which find S in cache, spend their time on). Each value's steps and each dot's
 * lanes and fold are those of delta_rule_avx2. A decode step reads S from memory: the columns 8 on
 * are asked for ahead. */
static inline SIMD_INLINE void delta_rule_cols_zmm(float *Sj, const float *q, const float *k, const float *v, __m512 decay16, float beta,
                                                   float scale, int d, const int C, float *o) {
    for (int i = 0; i < C * d; i += 16) _mm_prefetch((const char *)(Sj + 8 * d + i), _MM_HINT_T0);   /* past S's end: a prefetch never faults */
    __m512 a[4][4];
#pragma GCC unroll 4
    for (int c = 0; c < C; c++)
        for (int r = 0; r < 4; r++) a[c][r] = _mm512_setzero_ps();
    for (int i = 0; i < d; i += 64)   /* S_j *= decay, and S_j . k */
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            __m512 kk = _mm512_loadu_ps(k + i + 16 * r);
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) {
                __m512 x = _mm512_mul_ps(_mm512_loadu_ps(Sj + (size_t)c * d + i + 16 * r), decay16);
                _mm512_storeu_ps(Sj + (size_t)c * d + i + 16 * r, x);
                a[c][r] = _mm512_fmadd_ps(x, kk, a[c][r]);
            }
        }
    __m512 dl[4];
#pragma GCC unroll 4
    for (int c = 0; c < C; c++) {
        dl[c] = _mm512_set1_ps((v[c] - fold64_zmm(a[c][0], a[c][1], a[c][2], a[c][3])) * beta);
        for (int r = 0; r < 4; r++) a[c][r] = _mm512_setzero_ps();
    }
    for (int i = 0; i < d; i += 64)   /* S_j += k delta, and S_j . q */
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            __m512 kk = _mm512_loadu_ps(k + i + 16 * r), qq = _mm512_loadu_ps(q + i + 16 * r);
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) {
                __m512 x = _mm512_fmadd_ps(kk, dl[c], _mm512_loadu_ps(Sj + (size_t)c * d + i + 16 * r));
                _mm512_storeu_ps(Sj + (size_t)c * d + i + 16 * r, x);
                a[c][r] = _mm512_fmadd_ps(x, qq, a[c][r]);
            }
        }
#pragma GCC unroll 4
    for (int c = 0; c < C; c++) o[c] = fold64_zmm(a[c][0], a[c][1], a[c][2], a[c][3]) * scale;
}
static void delta_rule_zmm(float *S, const float *q, const float *k, const float *v, float g, float beta, int d, float *o) {
    if (d % 64) {
        delta_rule_avx2(S, q, k, v, g, beta, d, o);
        return;
    }
    float decay = expf(g), scale = 1.0f / sqrtf((float)d);
    for (int j = 0; j < d; j += 4)   /* d a multiple of 64: the columns go in fours */
        delta_rule_cols_zmm(S + (size_t)j * d, q, k, v + j, _mm512_set1_ps(decay), beta, scale, d, 4, o + j);
}
#endif

/* round_row_as 8 at a time: F16C's round-to-nearest-even for f16, the same integer rounding as
 * fp32_to_bf16 for bf16. Both keep a NaN's payload where the scalar makes a canonical quiet NaN,
 * so a group holding a NaN goes through the scalar definition. */
SIMD static void round_row_as_avx2(uint32_t type, float *p, int n) {
    int j = 0;
    if (type != T_F32)
        for (; j + 8 <= n; j += 8) {
            __m256 v = _mm256_loadu_ps(p + j);
            if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q))) {
                round_row_as(type, p + j, 8);
                continue;
            }
            if (type == T_F16) {
                v = _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
            } else {   /* (x + 0x7fff + bit 16 of x) with the low 16 bits cleared */
                __m256i x = _mm256_castps_si256(v), lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
                x = _mm256_add_epi32(x, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb));
                v = _mm256_castsi256_ps(_mm256_and_si256(x, _mm256_set1_epi32((int)0xffff0000u)));
            }
            _mm256_storeu_ps(p + j, v);
        }
    round_row_as(type, p + j, n - j);
}

/* 8 values of a cache row from element i, as fp32 (exact conversions, as load_as) */
static inline SIMD_INLINE __m256 load_as_avx2(uint32_t type, const void *src, int i) {
    if (type == T_F32) return _mm256_loadu_ps((const float *)src + i);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)src + i));
    if (type == T_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* One lane's chain of the V sum over 64 dims from i0: a[i] = sum p_j V_j[i0 + i] over the keys
 * j = l, l + lanes, ... < n, fused, in key order, in eight registers; stored to out[0..64). */
static inline SIMD_INLINE void v_lane64_avx2(uint32_t type, const uint8_t *V, size_t vstride, const float *p, int l, int n, int lanes,
                                             int i0, float *out) {
    __m256 a[8];
#pragma GCC unroll 8   /* (else a memset of a stack array) */
    for (int r = 0; r < 8; r++) a[r] = _mm256_setzero_ps();
    for (int j = l; j < n; j += lanes) {
        const uint8_t *vrow = V + (size_t)j * vstride;
        __m256 pj = _mm256_set1_ps(p[j]);
#pragma GCC unroll 8   /* a[] in registers */
        for (int r = 0; r < 8; r++) a[r] = _mm256_fmadd_ps(pj, load_as_avx2(type, vrow, i0 + 8 * r), a[r]);
    }
    for (int r = 0; r < 8; r++) _mm256_storeu_ps(out + 8 * r, a[r]);
}

/* attn_v_sum, 64 dims at a time: for each block of 64 dims, each lane's chain in registers
 * (v_lane64_avx2), then the block's lanes x 64 floats (16 KB at 64 lanes: in L1) folded by the
 * scalar's halving; dims past the last full block by the scalar chain. Every element's chain and
 * fold are the scalar's, in the same order. (Accumulating key by key into the lanes' rows moved
 * the whole lanes x hd array through L2 for every key.) */
SIMD static void attn_v_sum_avx2(uint32_t type, const uint8_t *V, size_t vstride, const float *p, int n, int lanes, int hd, float *acc, float *o) {
    int nb = hd & ~63;
    for (int i0 = 0; i0 < hd; i0 += 64) {
        int i1 = i0 + 64 < hd ? i0 + 64 : hd;
        for (int l = 0; l < lanes; l++) {
            float *al = acc + (size_t)l * hd;
            if (i0 < nb) {   /* the type as a constant in each call, so the loads are specialised */
                if (type == T_F16) v_lane64_avx2(T_F16, V, vstride, p, l, n, lanes, i0, al + i0);
                else if (type == T_BF16) v_lane64_avx2(T_BF16, V, vstride, p, l, n, lanes, i0, al + i0);
                else v_lane64_avx2(T_F32, V, vstride, p, l, n, lanes, i0, al + i0);
                continue;
            }
            for (int i = i0; i < i1; i++) {
                float a = 0;
                for (int j = l; j < n; j += lanes) a = fmaf(p[j], load_as(type, V + (size_t)j * vstride, i), a);
                al[i] = a;
            }
        }
        for (int w = lanes / 2; w >= 1; w /= 2)
            for (int l = 0; l < w; l++) {
                float *a = acc + (size_t)l * hd, *b = acc + (size_t)(l + w) * hd;
                int i = i0;
                for (; i + 8 <= i1; i += 8) _mm256_storeu_ps(a + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
                for (; i < i1; i++) a[i] += b[i];
            }
    }
    memcpy(o, acc, (size_t)hd * sizeof(float));
}

/* --- flash attention's steps (section 9): F16C conversions (round to nearest even, as fp32_to_fp16)
 * and per-lane fused multiply-adds in the plain order. A NaN may get another payload from F16C
 * than from fp32_to_fp16, so a group of 8 with a NaN result is redone by the plain definition. */
static inline SIMD_INLINE bool any_nan_avx2(__m256 v) { return _mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)) != 0; }

/* 8 values of a K or V row as flash attention reads them (fa_load) */
static inline SIMD_INLINE __m256 fa_load_avx2(uint32_t type, const void *row, int i) {
    if (type != T_F32) return load_as_avx2(type, row, i);
    return _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps((const float *)row + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

SIMD static void to_f16_avx2(uint16_t *y, const float *x, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        if (any_nan_avx2(v)) to_f16(y + i, x + i, 8);
        else _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    to_f16(y + i, x + i, n - i);
}

/* fa_tile with F16C: 8 x 8 blocks of the keys' rows transposed in registers, the values converted
 * 8 at a time; a group of 8 with a NaN goes through fa_load (hd a multiple of 8, as the tiled path's) */
SIMD static void fa_tile_avx2(uint32_t k_type, const uint8_t *K, size_t kstride, uint32_t v_type, const uint8_t *V, size_t vstride, int nt,
                              int hd, float *kt, float *vf) {
    for (int t = 0; t < 64; t += 8)
        for (int d = 0; d < hd; d += 8) {
            __m256 r[8], u[8], c[8];
            for (int k = 0; k < 8; k++) {
                const uint8_t *row = K + (size_t)(t + k) * kstride;
                if (t + k >= nt) {
                    r[k] = _mm256_setzero_ps();
                    continue;
                }
                r[k] = fa_load_avx2(k_type, row, d);
                if (any_nan_avx2(r[k])) {
                    float f[8];
                    for (int i = 0; i < 8; i++) f[i] = fa_load(k_type, row, d + i);
                    r[k] = _mm256_loadu_ps(f);
                }
            }
            for (int k = 0; k < 8; k += 2) {
                u[k] = _mm256_unpacklo_ps(r[k], r[k + 1]);
                u[k + 1] = _mm256_unpackhi_ps(r[k], r[k + 1]);
            }
            for (int k = 0; k < 8; k += 4) {   /* columns j and j+4 of keys k..k+3, in 128-bit halves */
                r[k] = _mm256_shuffle_ps(u[k], u[k + 2], _MM_SHUFFLE(1, 0, 1, 0));
                r[k + 1] = _mm256_shuffle_ps(u[k], u[k + 2], _MM_SHUFFLE(3, 2, 3, 2));
                r[k + 2] = _mm256_shuffle_ps(u[k + 1], u[k + 3], _MM_SHUFFLE(1, 0, 1, 0));
                r[k + 3] = _mm256_shuffle_ps(u[k + 1], u[k + 3], _MM_SHUFFLE(3, 2, 3, 2));
            }
            for (int j = 0; j < 4; j++) {
                c[j] = _mm256_permute2f128_ps(r[j], r[j + 4], 0x20);
                c[j + 4] = _mm256_permute2f128_ps(r[j], r[j + 4], 0x31);
            }
            for (int j = 0; j < 8; j++) _mm256_storeu_ps(kt + (size_t)(d + j) * 64 + t, c[j]);
        }
    for (int t = 0; t < nt; t++)
        for (int i = 0; i < hd; i += 8) {
            const uint8_t *row = V + (size_t)t * vstride;
            __m256 v = fa_load_avx2(v_type, row, i);
            if (any_nan_avx2(v))
                for (int k = 0; k < 8; k++) vf[(size_t)t * hd + i + k] = fa_load(v_type, row, i + k);
            else _mm256_storeu_ps(vf + (size_t)t * hd + i, v);
        }
}

/* The first nt of a head's 64 scores a (the SIMD chains' lanes) into s, by groups of L keys: a group
 * with a NaN is redone by the definition (its payload may differ; past nt: zero columns, or keys of
 * the tile this row does not see) */
static void fa_scores_out(const float *q, const float *kt, int nt, int hd, const float *a, int L, float *s) {
    for (int j = 0; j < nt; j += L) {
        int n = nt - j < L ? nt - j : L;
        bool nan = false;
        for (int i = 0; i < L; i++) nan |= isnan(a[j + i]);
        if (nan) fa_scores(q, 0, 1, kt + j, n, hd, s + j);
        else memcpy(s + j, a + j, (size_t)n * sizeof(float));
    }
}

/* fa_scores for the 64 columns at once, 8 keys a register: lane l of register g runs key 8g + l's
 * chain over the dims, eight chains in flight; a group with a NaN is redone by the definition */
static inline SIMD_INLINE void fa_scores_head_avx2(const float *q, const float *kt, int nt, int hd, float *s) {
    __m256 acc[8];
#pragma GCC unroll 8   /* (else a memset of a stack array) */
    for (int g = 0; g < 8; g++) acc[g] = _mm256_setzero_ps();
    for (int d = 0; d < hd; d++) {
        __m256 qd = _mm256_set1_ps(q[d]);
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) acc[g] = _mm256_fmadd_ps(qd, _mm256_loadu_ps(kt + (size_t)d * 64 + 8 * g), acc[g]);
    }
    float a[8][8];
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++) _mm256_storeu_ps(a[g], acc[g]);
    fa_scores_out(q, kt, nt, hd, &a[0][0], 8, s);
}
SIMD static void fa_scores_avx2(const float *q, size_t qstride, int nh, const float *kt, int nt, int hd, float *s) {
    for (int h = 0; h < nh; h++) fa_scores_head_avx2(q + h * qstride, kt, nt, hd, s + 64 * h);
}

/* fa_mad_keys for W <= 8 groups of 8 values of a head (from value i0), in registers updated key by
 * key; a group with a NaN result is redone by the definition from its values before */
static inline SIMD_INLINE void fa_mad_keys_groups_avx2(float *acc, const float *vf, const float *p, int nt, int hd, int i0, const int W) {
    __m256 a[8];
#pragma GCC unroll 8
    for (int k = 0; k < W; k++) a[k] = _mm256_loadu_ps(acc + i0 + 8 * k);
    for (int t = 0; t < nt; t++) {
        __m256 pt = _mm256_set1_ps(p[t]);
        const float *v = vf + (size_t)t * hd + i0;
#pragma GCC unroll 8
        for (int k = 0; k < W; k++) a[k] = _mm256_fmadd_ps(_mm256_loadu_ps(v + 8 * k), pt, a[k]);
    }
#pragma GCC unroll 8
    for (int k = 0; k < W; k++) {
        float *y = acc + i0 + 8 * k;
        if (!any_nan_avx2(a[k])) {
            _mm256_storeu_ps(y, a[k]);
            continue;
        }
        for (int t = 0; t < nt; t++)
            for (int i = 0; i < 8; i++) y[i] = fmaf(vf[(size_t)t * hd + i0 + 8 * k + i], p[t], y[i]);
    }
}
/* 64 values at a time, then 8 (hd a multiple of 8, as the tiled path's) */
SIMD static void fa_mad_keys_avx2(float *acc, int nh, const float *vf, const float *p, int nt, int hd) {
    for (int h = 0; h < nh; h++) {
        int i0 = 0;
        for (; i0 + 64 <= hd; i0 += 64) fa_mad_keys_groups_avx2(acc + (size_t)h * hd, vf, p + 64 * h, nt, hd, i0, 8);
        for (; i0 < hd; i0 += 8) fa_mad_keys_groups_avx2(acc + (size_t)h * hd, vf, p + 64 * h, nt, hd, i0, 1);
    }
}

SIMD static void fa_mad_avx2(float *y, uint32_t type, const void *v, float w, int n) {
    __m256 w8 = _mm256_set1_ps(w);
    size_t vb = TYPES[type].bytes;
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 r = _mm256_fmadd_ps(fa_load_avx2(type, v, i), w8, _mm256_loadu_ps(y + i));
        if (any_nan_avx2(r)) fa_mad(y + i, type, (const uint8_t *)v + i * vb, w, 8);
        else _mm256_storeu_ps(y + i, r);
    }
    fa_mad(y + i, type, (const uint8_t *)v + i * vb, w, n - i);
}

/* dot_f16_avx2 key by key, head by head, q converted to floats once (exact: every F16 is a float) */
SIMD static void fa_kdots16_avx2(const uint16_t *q, int G, const uint8_t *K, size_t kstride, int nt, int hd, float *s) {
    float qf[4096];   /* head_dim <= 4096 (model_config) */
    int np = hd & ~63;
    for (int g = 0; g < G; g++, q += hd, s += 64) {
        for (int i = 0; i < hd; i++) qf[i] = f16c(q[i]);
        for (int t = 0; t < nt; t++) {
            const uint16_t *k = (const uint16_t *)(K + (size_t)t * kstride);
            if (g == 0)   /* the row 16 keys on, as fa_kdots16_heads_zmm asks for it */
                for (int c = 0; c < 2 * hd; c += 64) _mm_prefetch((const char *)k + 16 * kstride + c, _MM_HINT_T0);
            __m256 acc[8];
            for (int r = 0; r < 8; r++) acc[r] = _mm256_setzero_ps();
            for (int i = 0; i < np; i += 64)
#pragma GCC unroll 8   /* acc in registers */
                for (int r = 0; r < 8; r++) acc[r] = _mm256_fmadd_ps(load_f16_avx2(k + i + 8 * r), _mm256_loadu_ps(qf + i + 8 * r), acc[r]);
            double sum = fold64_avx2(acc);
            for (int i = np; i < hd; i++) sum += f16c(k[i]) * qf[i];
            s[t] = (float)sum;
        }
    }
}

#if !ZMM
/* C groups of 8 values from i on, each in a register across the nt keys, rounded to F16 after every
 * step as fa_mad16_keys stores them (x -> F16 -> float is that rounding). The C chains are
 * independent, so their steps overlap (one group alone waits on its fma and two conversions a
 * key). A NaN stays NaN to the end, so one look at the end finds any: such a group is done again
 * by the scalar definition, whose NaN bits the conversion instructions need not share. */
static inline SIMD_INLINE void fa_mad16_groups_avx2(uint16_t *y, uint32_t type, const uint8_t *V, size_t vstride, const float *ms,
                                                   const float *vs, int nt, int i, const int C) {
    enum { RND = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC };   /* a constant expression, as the conversion's immediate must be */
    __m256 acc[8];
#pragma GCC unroll 8
    for (int c = 0; c < C; c++) acc[c] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(y + i + 8 * c)));
    for (int t = 0; t < nt; t++) {
        const uint8_t *v = V + (size_t)t * vstride;
        if (ms[t] != 1) {
#pragma GCC unroll 8
            for (int c = 0; c < C; c++) acc[c] = _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_mul_ps(acc[c], _mm256_set1_ps(ms[t])), RND));
        }
#pragma GCC unroll 8
        for (int c = 0; c < C; c++)
            acc[c] = _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_fmadd_ps(fa_load_avx2(type, v, i + 8 * c), _mm256_set1_ps(vs[t]), acc[c]), RND));
    }
#pragma GCC unroll 8
    for (int c = 0; c < C; c++) {
        if (any_nan_avx2(acc[c])) fa_mad16_keys(y + i + 8 * c, 1, type, V + (size_t)(i + 8 * c) * TYPES[type].bytes, vstride, ms, vs, nt, 8);
        else _mm_storeu_si128((__m128i *)(y + i + 8 * c), _mm256_cvtps_ph(acc[c], RND));
    }
}

SIMD static void fa_mad16_keys_avx2(uint16_t *y, int G, uint32_t type, const uint8_t *V, size_t vstride, const float *ms, const float *vs, int nt, int n) {
    for (int g = 0; g < G; g++, y += n, ms += 64, vs += 64) {
        int i = 0;
        for (; i + 64 <= n; i += 64) fa_mad16_groups_avx2(y, type, V, vstride, ms, vs, nt, i, 8);
        for (; i + 8 <= n; i += 8) fa_mad16_groups_avx2(y, type, V, vstride, ms, vs, nt, i, 1);
        if (i < n) fa_mad16_keys(y + i, 1, type, V + (size_t)i * TYPES[type].bytes, vstride, ms, vs, nt, n - i);
    }
}

#else
/* The 512-bit forms (AVX-512 builds): the same operations on each value in 16 lanes.
 * fold(v_k, 16) of 16 registers at once, register k's in lane k: each halving step (lanes l and
 * l + w added, l < w) pairs two registers, a shuffle setting lane l + w of each under its lane l,
 * so that one add does the step for both; after four steps lane 4m + c holds register m + 4c's. */
static inline SIMD_INLINE __m512 fold16x16_zmm(const __m512 v[16]) {
    __m512 u[8], w4[4], w2[2];
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++)   /* w = 8: lanes 0-7 register 2j's, 8-15 register 2j+1's */
        u[j] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * j], v[2 * j + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_f32x4(v[2 * j], v[2 * j + 1], _MM_SHUFFLE(3, 2, 3, 2)));
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++)   /* w = 4: 128-bit quarter m register 4j+m's */
        w4[j] = _mm512_add_ps(_mm512_shuffle_f32x4(u[2 * j], u[2 * j + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                              _mm512_shuffle_f32x4(u[2 * j], u[2 * j + 1], _MM_SHUFFLE(3, 1, 3, 1)));
#pragma GCC unroll 2
    for (int j = 0; j < 2; j++)   /* w = 2: quarter m, lanes 0-1 register 8j+m's, 2-3 register 8j+4+m's */
        w2[j] = _mm512_add_ps(_mm512_shuffle_ps(w4[2 * j], w4[2 * j + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                              _mm512_shuffle_ps(w4[2 * j], w4[2 * j + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    __m512 r = _mm512_add_ps(_mm512_shuffle_ps(w2[0], w2[1], _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_ps(w2[0], w2[1], _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), r);
}

/* fa_kdots16 for H <= 4 heads (head_dim a multiple of 64): each K row converted once for the H
 * heads, head h's 64 accumulators in four registers (register r: dot_f16_avx2's accumulators
 * 16r..16r+15), their first two halving steps as fold64_zmm takes them, the other four for 16
 * keys at once (fold16x16_zmm). */
static inline SIMD_INLINE void fa_kdots16_heads_zmm(const uint16_t *q, const uint8_t *K, size_t kstride, int nt, int hd, float *s, const int H) {
    float qf[4 * 4096];   /* head_dim <= 4096 (model_config) */
    for (int i = 0; i < H * hd; i += 16) _mm512_storeu_ps(qf + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(q + i))));
    for (int t0 = 0; t0 < nt; t0 += 16) {
        __m512 red[4][16];
        for (int k = 0; k < 16; k++) {
            __m512 a[4][4];
#pragma GCC unroll 4
            for (int h = 0; h < H; h++)
                for (int r = 0; r < 4; r++) a[h][r] = _mm512_setzero_ps();
            const uint16_t *kr = (const uint16_t *)(K + (size_t)(t0 + k < nt ? t0 + k : t0) * kstride);   /* (keys past nt: any row, unused) */
            /* the row 16 keys on asked for: a decoding step finds the cache in memory, and the rows, a
             * cache row apart, came in one at a time (a step at 2,080 keys, q4_k_m 32768, zen4, 6
             * alternating runs: the attention stage 1.06-1.50 -> 0.81-1.17 ms); past the cache's
             * end a prefetch never faults */
            for (int c = 0; c < 2 * hd; c += 64) _mm_prefetch((const char *)K + (size_t)(t0 + k + 16) * kstride + c, _MM_HINT_T0);
            for (int i = 0; i < hd; i += 64) {
                __m512 kv[4];
#pragma GCC unroll 4
                for (int r = 0; r < 4; r++) kv[r] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(kr + i + 16 * r)));
#pragma GCC unroll 4
                for (int h = 0; h < H; h++)
#pragma GCC unroll 4
                    for (int r = 0; r < 4; r++) a[h][r] = _mm512_fmadd_ps(kv[r], _mm512_loadu_ps(qf + (size_t)h * hd + i + 16 * r), a[h][r]);
            }
#pragma GCC unroll 4
            for (int h = 0; h < H; h++) red[h][k] = _mm512_add_ps(_mm512_add_ps(a[h][0], a[h][2]), _mm512_add_ps(a[h][1], a[h][3]));
        }
        int m = nt - t0 < 16 ? nt - t0 : 16;
        for (int h = 0; h < H; h++) {
            float out[16];
            _mm512_storeu_ps(out, fold16x16_zmm(red[h]));
            memcpy(s + h * 64 + t0, out, (size_t)m * sizeof(float));
        }
    }
}

/* (head_dim not a multiple of 64: head by head, dot_f16_avx2's steps with its tail) */
static void fa_kdots16_zmm(const uint16_t *q, int G, const uint8_t *K, size_t kstride, int nt, int hd, float *s) {
    if (hd % 64) {
        fa_kdots16_avx2(q, G, K, kstride, nt, hd, s);
        return;
    }
    int g = 0;
    for (; g + 4 <= G; g += 4) fa_kdots16_heads_zmm(q + (size_t)g * hd, K, kstride, nt, hd, s + 64 * g, 4);
    for (; g < G; g++) fa_kdots16_heads_zmm(q + (size_t)g * hd, K, kstride, nt, hd, s + 64 * g, 1);
}

/* fa_mad16_groups_avx2 with groups of 16 values, for H heads (y + h n, ms + 64 h, vs + 64 h): C
 * groups of each head in registers (H C <= 16), each group of V converted once for the H heads */
static inline SIMD_INLINE __m512 fa_load_zmm(uint32_t type, const uint8_t *row, int i) {
    if (type == T_F16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)row + i)));
    return _mm512_cvtph_ps(_mm512_cvtps_ph(_mm512_loadu_ps((const float *)row + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
static inline SIMD_INLINE void fa_mad16_groups_zmm(uint16_t *y, int n, uint32_t type, const uint8_t *V, size_t vstride, const float *ms,
                                                  const float *vs, int nt, int i, const int H, const int C) {
    enum { RND = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC };
    __m512 acc[16];
#pragma GCC unroll 16
    for (int k = 0; k < H * C; k++) acc[k] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(y + (size_t)(k / C) * n + i + 16 * (k % C))));
    for (int t = 0; t < nt; t++) {
        const uint8_t *v = V + (size_t)t * vstride;
        __m512 vv[16];
#pragma GCC unroll 16
        for (int c = 0; c < C; c++) vv[c] = fa_load_zmm(type, v, i + 16 * c);
#pragma GCC unroll 4
        for (int h = 0; h < H; h++) {
            if (ms[64 * h + t] != 1) {
#pragma GCC unroll 16
                for (int c = 0; c < C; c++)
                    acc[h * C + c] = _mm512_cvtph_ps(_mm512_cvtps_ph(_mm512_mul_ps(acc[h * C + c], _mm512_set1_ps(ms[64 * h + t])), RND));
            }
#pragma GCC unroll 16
            for (int c = 0; c < C; c++)
                acc[h * C + c] = _mm512_cvtph_ps(_mm512_cvtps_ph(_mm512_fmadd_ps(vv[c], _mm512_set1_ps(vs[64 * h + t]), acc[h * C + c]), RND));
        }
    }
#pragma GCC unroll 16
    for (int k = 0; k < H * C; k++) {
        uint16_t *yk = y + (size_t)(k / C) * n + i + 16 * (k % C);
        if (_mm512_cmp_ps_mask(acc[k], acc[k], _CMP_UNORD_Q))
            fa_mad16_keys(yk, 1, type, V + (size_t)(i + 16 * (k % C)) * TYPES[type].bytes, vstride, ms + 64 * (k / C), vs + 64 * (k / C), nt, 16);
        else _mm256_storeu_si256((__m256i *)yk, _mm512_cvtps_ph(acc[k], RND));
    }
}

/* four heads at a time, 64 values of each (then 16), the rest of the heads one at a time, 256 values
 * at a time (then 64, 16); values past the last 16 by the definition */
static void fa_mad16_keys_zmm(uint16_t *y, int G, uint32_t type, const uint8_t *V, size_t vstride, const float *ms, const float *vs, int nt, int n) {
    int g = 0, i;
    for (; g + 4 <= G; g += 4) {
        uint16_t *yg = y + (size_t)g * n;
        for (i = 0; i + 64 <= n; i += 64) fa_mad16_groups_zmm(yg, n, type, V, vstride, ms + 64 * g, vs + 64 * g, nt, i, 4, 4);
        for (; i + 16 <= n; i += 16) fa_mad16_groups_zmm(yg, n, type, V, vstride, ms + 64 * g, vs + 64 * g, nt, i, 4, 1);
        if (i < n)
            for (int h = g; h < g + 4; h++)
                fa_mad16_keys(y + (size_t)h * n + i, 1, type, V + (size_t)i * TYPES[type].bytes, vstride, ms + 64 * h, vs + 64 * h, nt, n - i);
    }
    for (; g < G; g++) {
        uint16_t *yg = y + (size_t)g * n;
        for (i = 0; i + 256 <= n; i += 256) fa_mad16_groups_zmm(yg, n, type, V, vstride, ms + 64 * g, vs + 64 * g, nt, i, 1, 16);
        for (; i + 64 <= n; i += 64) fa_mad16_groups_zmm(yg, n, type, V, vstride, ms + 64 * g, vs + 64 * g, nt, i, 1, 4);
        for (; i + 16 <= n; i += 16) fa_mad16_groups_zmm(yg, n, type, V, vstride, ms + 64 * g, vs + 64 * g, nt, i, 1, 1);
        if (i < n) fa_mad16_keys(yg + i, 1, type, V + (size_t)i * TYPES[type].bytes, vstride, ms + 64 * g, vs + 64 * g, nt, n - i);
    }
}

/* fa_scores two heads at a time: a head's 64 keys in four registers, 16 keys each, the two heads'
 * eight chains sharing each load of the tile (the L2 cache's bandwidth, not the fused multiply-adds,
 * bounded one head at a time); a group of 16 with a NaN is redone by the definition */
static void fa_scores_zmm(const float *q, size_t qstride, int nh, const float *kt, int nt, int hd, float *s) {
    int h = 0;
    for (; h + 2 <= nh; h += 2) {
        const float *q0 = q + h * qstride, *q1 = q0 + qstride;
        __m512 a[8];
        for (int g = 0; g < 8; g++) a[g] = _mm512_setzero_ps();
        for (int d = 0; d < hd; d++) {
            __m512 x0 = _mm512_set1_ps(q0[d]), x1 = _mm512_set1_ps(q1[d]);
#pragma GCC unroll 4
            for (int g = 0; g < 4; g++) {
                __m512 k = _mm512_loadu_ps(kt + (size_t)d * 64 + 16 * g);
                a[g] = _mm512_fmadd_ps(x0, k, a[g]);
                a[4 + g] = _mm512_fmadd_ps(x1, k, a[4 + g]);
            }
        }
        float r[2][64];
        __mmask16 nan = 0;
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) _mm512_storeu_ps(r[g / 4] + 16 * (g % 4), a[g]), nan |= _mm512_cmp_ps_mask(a[g], a[g], _CMP_UNORD_Q);
        if (!nan) {   /* (else by groups, fa_scores_out) */
            memcpy(s + 64 * h, r[0], (size_t)nt * sizeof(float));
            memcpy(s + 64 * (h + 1), r[1], (size_t)nt * sizeof(float));
            continue;
        }
        fa_scores_out(q0, kt, nt, hd, r[0], 16, s + 64 * h);
        fa_scores_out(q1, kt, nt, hd, r[1], 16, s + 64 * (h + 1));
    }
    if (h < nh) fa_scores_avx2(q + h * qstride, qstride, nh - h, kt, nt, hd, s + 64 * h);
}

/* fa_mad_keys two heads at a time: W <= 4 groups of 16 values of each (from value i0) in registers,
 * updated key by key, each load of the tile's values serving both; a group with a NaN result is
 * redone by the definition from its values before */
static inline SIMD_INLINE void fa_mad_keys2_zmm(float *acc0, float *acc1, const float *vf, const float *p0, const float *p1, int nt, int hd,
                                                int i0, const int W) {
    __m512 a[8];
#pragma GCC unroll 4
    for (int k = 0; k < W; k++) a[k] = _mm512_loadu_ps(acc0 + i0 + 16 * k), a[4 + k] = _mm512_loadu_ps(acc1 + i0 + 16 * k);
    for (int t = 0; t < nt; t++) {
        __m512 x0 = _mm512_set1_ps(p0[t]), x1 = _mm512_set1_ps(p1[t]);
        const float *v = vf + (size_t)t * hd + i0;
#pragma GCC unroll 4
        for (int k = 0; k < W; k++) {
            __m512 vv = _mm512_loadu_ps(v + 16 * k);
            a[k] = _mm512_fmadd_ps(vv, x0, a[k]);
            a[4 + k] = _mm512_fmadd_ps(vv, x1, a[4 + k]);
        }
    }
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) {
        if (k % 4 >= W) continue;
        float *y = (k < 4 ? acc0 : acc1) + i0 + 16 * (k % 4);
        const float *ph = k < 4 ? p0 : p1;
        if (!_mm512_cmp_ps_mask(a[k], a[k], _CMP_UNORD_Q)) {
            _mm512_storeu_ps(y, a[k]);
            continue;
        }
        for (int t = 0; t < nt; t++)
            for (int i = 0; i < 16; i++) y[i] = fmaf(vf[(size_t)t * hd + i0 + 16 * (k % 4) + i], ph[t], y[i]);
    }
}
/* (hd a multiple of 16, as the tiled path's; else the 256-bit form) */
static void fa_mad_keys_zmm(float *acc, int nh, const float *vf, const float *p, int nt, int hd) {
    int h = hd % 16 ? nh : 0;
    for (; h + 2 <= nh; h += 2) {
        float *acc0 = acc + (size_t)h * hd, *acc1 = acc0 + hd;
        const float *p0 = p + 64 * h, *p1 = p0 + 64;
        int i0 = 0;
        for (; i0 + 64 <= hd; i0 += 64) fa_mad_keys2_zmm(acc0, acc1, vf, p0, p1, nt, hd, i0, 4);
        for (; i0 < hd; i0 += 16) fa_mad_keys2_zmm(acc0, acc1, vf, p0, p1, nt, hd, i0, 1);
    }
    if (h < nh) fa_mad_keys_avx2(acc + (size_t)h * hd, nh - h, vf, p + 64 * h, nt, hd);
}
#endif
#endif

/* --- The kernel tables (section 5) ---------------------------------------------------------- */
static const Kernels KERNELS_PLAIN = {
    .dot = {dot_f32_row, dot_f32_tile, dot_f16_row, dot_f16_tile, dot_bf16_row, dot_bf16_tile, dot_q8_0, dot_q4_0,
            dot_q4_0_8x8, dot_q4_K, dot_q4_K_8x8, dot_q4_K_8x8_gemm, dot_q5_K, dot_q6_K},
    .quantize_q8_0 = quantize_q8_0, .quantize_q8_K = quantize_q8_K, .exp_sum = exp_sum, .softmax = softmax, .silu_row = silu_row,
    .gdn_conv = gdn_conv, .delta_rule = delta_rule, .round_row_as = round_row_as, .attn_v_sum = attn_v_sum,
    .to_f16 = to_f16, .fa_tile = fa_tile, .fa_scores = fa_scores, .fa_mad_keys = fa_mad_keys, .fa_kdots16 = fa_kdots16, .fa_mad = fa_mad,
    .fa_mad16_keys = fa_mad16_keys,
};
#if defined(__x86_64__)
static const Kernels KERNELS_AVX2 = {
    .dot = {dot_f32_avx2, dot_f32_tile_avx2, dot_f16_avx2, dot_f16_tile_avx2, dot_bf16_avx2, dot_bf16_tile_avx2,
            dot_q8_0_avx2, dot_q4_0_avx2, dot_q4_0_8x8_avx2, dot_q4_K_avx2, dot_q4_K_8x8_avx2, dot_q4_K_8x8_gemm_avx2,
            dot_q5_K_avx2, dot_q6_K_avx2},
    .dot_rows = {[K_F32_TILE] = rows_f32_tile_avx2, [K_BF16_TILE] = rows_bf16_tile_avx2,
                 [K_Q8_0] = rows_q8_0_avx2, [K_Q4_0] = rows_q4_0_avx2, [K_Q4_0_8X8] = rows_q4_0_8x8_avx2,
                 [K_Q4_K] = rows_q4_K_avx2, [K_Q4_K_8X8] = rows_q4_K_8x8_avx2, [K_Q4_K_8X8_GEMM] = rows_q4_K_8x8_gemm_avx2,
                 [K_Q5_K] = rows_q5_K_avx2, [K_Q6_K] = rows_q6_K_avx2},
    .dot_w4 = {[K_Q8_0] = dot_w4_q8_0_avx2, [K_Q4_0] = dot_w4_q4_0_avx2, [K_Q4_0_8X8] = dot_w4_q4_0_8x8_avx2,
               [K_Q4_K] = dot_w4_q4_K_avx2, [K_Q4_K_8X8] = dot_w4_q4_K_8x8_avx2, [K_Q5_K] = dot_w4_q5_K_avx2, [K_Q6_K] = dot_w4_q6_K_avx2},
#if ZMM
    .dot_tile = {[K_Q4_0_8X8] = tile_q4_0_8x8_avx2, [K_Q8_0] = tile_q8_0_zmm},
#else
    .dot_tile = {[K_Q4_0_8X8] = tile_q4_0_8x8_avx2},
#endif
#if ZMM
    .dot_gemm16 = {[K_Q4_K_8X8] = gemm16_q4_K_8x8_zmm, [K_Q4_K_8X8_GEMM] = gemm16_q4_K_8x8_gemm_zmm, [K_Q4_0_8X8] = gemm16_q4_0_8x8_zmm},
#else
    .dot_gemm16 = {[K_Q4_K_8X8] = gemm16_q4_K_8x8_avx2, [K_Q4_K_8X8_GEMM] = gemm16_q4_K_8x8_gemm_avx2},
#endif
    .quantize_q8_0 = quantize_q8_0_avx2, .quantize_q8_K = quantize_q8_K_avx2, .exp_sum = exp_sum_avx2, .softmax = softmax_avx2,
    .silu_row = silu_row_avx2, .gdn_conv = gdn_conv_avx2,
    .round_row_as = round_row_as_avx2, .attn_v_sum = attn_v_sum_avx2,
    .to_f16 = to_f16_avx2, .fa_tile = fa_tile_avx2, .fa_mad = fa_mad_avx2,
#if ZMM
    .delta_rule = delta_rule_zmm, .fa_kdots16 = fa_kdots16_zmm, .fa_mad16_keys = fa_mad16_keys_zmm,
    .fa_scores = fa_scores_zmm, .fa_mad_keys = fa_mad_keys_zmm,
#else
    .delta_rule = delta_rule_avx2, .fa_kdots16 = fa_kdots16_avx2, .fa_mad16_keys = fa_mad16_keys_avx2,
    .fa_scores = fa_scores_avx2, .fa_mad_keys = fa_mad_keys_avx2,
#endif
};
#endif

/* AVX2 with FMA and F16C where the CPU has them (and AMX tiles where built with them and granted),
 * unless CLOVER_SIMD=scalar asks for the plain definitions (the tests compare the two). */
static const Kernels *kernels_chosen = &KERNELS_PLAIN;
#if AMX
static Kernels kernels_amx;   /* KERNELS_AVX2 with the AMX forms of the sixteen-row kernels */
#endif
static pthread_once_t kernels_once = PTHREAD_ONCE_INIT;

static void choose_kernels(void) {
    const char *env = getenv("CLOVER_SIMD");
    if (env && !strcmp(env, "scalar")) return;
#if defined(__x86_64__)
    __builtin_cpu_init();
    unsigned eax, ebx, ecx, edx;   /* F16C via cpuid: not every compiler's __builtin_cpu_supports knows it */
    bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C);
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c) kernels_chosen = &KERNELS_AVX2;
#if AMX
    /* Linux hands out the tile registers' 8 KiB of state only on request (arch_prctl
     * ARCH_REQ_XCOMP_PERM 0x1023 for XFEATURE_XTILEDATA 18); CLOVER_SIMD=noamx keeps the AVX-512 kernels */
    if (kernels_chosen == &KERNELS_AVX2 && !(env && !strcmp(env, "noamx")) && syscall(SYS_arch_prctl, 0x1023, 18) == 0) {
        kernels_amx = KERNELS_AVX2;
        kernels_amx.dot_gemm16[K_Q4_K_8X8] = gemm16_q4_K_8x8_amx;
        kernels_amx.dot_gemm16[K_Q4_K_8X8_GEMM] = gemm16_q4_K_8x8_gemm_amx;
        kernels_amx.dot_gemm16[K_Q4_0_8X8] = gemm16_q4_0_8x8_amx;
        kernels_chosen = &kernels_amx;
    }
#endif
#endif
}

static const Kernels *kernels(void) {
    pthread_once(&kernels_once, choose_kernels);
    return kernels_chosen;
}

/* --- The thread pool (its use: section 7) -----------------------------------------------------
 * A fixed set of worker threads. A decoding step runs dozens of short tasks, so a waiting side
 * first spins briefly on an atomic counter (a new task: `generation` moves; all done: `busy`
 * reaches 0) and only then sleeps on a condition variable. A sleeper says so (`sleepers`, `caller_sleeps`) before its last look at the
 * counter, and the other side looks at that after moving the counter (both sequentially
 * consistent), so one of the two always sees the other: no wakeup is lost, and the mutex and signal
 * are skipped in the common case, a task that starts or ends while the other side still spins.
 * Spinning is short so that an oversubscribed machine still makes progress. */
enum { POOL_SPIN = 500, POOL_YIELD_US = 300 };
struct Pool {
    int n_threads, active;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t start, done;
    TaskFn fn;
    void *arg;
    _Atomic uint64_t generation;
    _Atomic int busy;
    _Atomic int sleepers;        /* workers waiting on `start` */
    _Atomic int caller_sleeps;   /* thread 0 waiting on `done` */
    void (*observe)(TaskFn fn, void *arg, bool done);   /* test/bench.c's stage profile: called as each task starts and ends */
};
typedef struct { Pool *pool; int ith; } Worker;

static void cpu_relax(void) {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
}

/* Round i of a wait that has not ended yet: a pause instruction for the first POOL_SPIN rounds (a
 * few microseconds), then sched_yield, which gives the CPU to another runnable thread where there
 * is one (an oversubscribed machine) and returns at once where there is none, until POOL_YIELD_US
 * have passed since the first yield (*t0, 0 until then); false then: time to sleep. A decode step
 * has gaps of tens of microseconds between tasks (the sampler, the embedding) that a pause-only
 * spin did not bridge: a worker asleep there wakes late for the next task. */
static bool pool_spin(int i, double *t0) {
    if (i < POOL_SPIN) {
        cpu_relax();
        return true;
    }
    double t = now_seconds();
    if (*t0 == 0) *t0 = t;
    if (t - *t0 > POOL_YIELD_US * 1e-6) return false;
    sched_yield();
    return true;
}

/* A worker's wait for the task after generation `seen`: spin, then sleep; returns its generation. */
static uint64_t pool_next_task(Pool *pool, uint64_t seen) {
    double t0 = 0;
    for (int i = 0; atomic_load(&pool->generation) == seen && pool_spin(i, &t0); i++) {}
    if (atomic_load(&pool->generation) == seen) {
        pthread_mutex_lock(&pool->mu);
        atomic_fetch_add(&pool->sleepers, 1);
        while (atomic_load(&pool->generation) == seen) pthread_cond_wait(&pool->start, &pool->mu);
        atomic_fetch_sub(&pool->sleepers, 1);
        pthread_mutex_unlock(&pool->mu);
    }
    return atomic_load(&pool->generation);
}

/* Workers live as long as the process. */
static _Noreturn void *pool_worker(void *p) {
    Worker *w = p;
    Pool *pool = w->pool;
    for (uint64_t seen = 0;;) {
        seen = pool_next_task(pool, seen);
        int nth = pool->active;
        if (w->ith < nth) pool->fn(pool->arg, w->ith, nth);
        if (atomic_fetch_sub(&pool->busy, 1) == 1 && atomic_load(&pool->caller_sleeps)) {
            pthread_mutex_lock(&pool->mu);
            pthread_cond_signal(&pool->done);
            pthread_mutex_unlock(&pool->mu);
        }
    }
}

static Pool *pool_new(int n_threads) {
    Pool *p = xcalloc(1, sizeof *p);
    p->n_threads = p->active = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->start, NULL);
    pthread_cond_init(&p->done, NULL);
    p->threads = xcalloc((size_t)n_threads, sizeof(pthread_t));
    Worker *w = xcalloc((size_t)n_threads, sizeof(Worker));
    for (int i = 1; i < n_threads; i++) {
        w[i] = (Worker){p, i};
        if (pthread_create(&p->threads[i], NULL, pool_worker, &w[i]) != 0) fatal("cannot start thread %d of %d; use a smaller -t", i, n_threads);
    }
    return p;
}

static void pool_use(Pool *p, int n_threads) { p->active = n_threads; }

/* fn on the active threads, the caller as thread 0: wake the workers, run, wait for them */
static void pool_fan_out(Pool *p, TaskFn fn, void *arg) {
    p->fn = fn;
    p->arg = arg;
    atomic_store(&p->busy, p->n_threads - 1);
    atomic_fetch_add(&p->generation, 1);
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->start);
        pthread_mutex_unlock(&p->mu);
    }
    fn(arg, 0, p->active);
    double t0 = 0;
    for (int i = 0; atomic_load(&p->busy) > 0 && pool_spin(i, &t0); i++) {}
    if (atomic_load(&p->busy) > 0) {
        pthread_mutex_lock(&p->mu);
        atomic_store(&p->caller_sleeps, 1);
        while (atomic_load(&p->busy) > 0) pthread_cond_wait(&p->done, &p->mu);
        atomic_store(&p->caller_sleeps, 0);
        pthread_mutex_unlock(&p->mu);
    }
}

static void pool_run(Pool *p, TaskFn fn, void *arg) {
    if (p->observe) p->observe(fn, arg, false);
    if (p->n_threads == 1 || p->active == 1) fn(arg, 0, 1);
    else pool_fan_out(p, fn, arg);
    if (p->observe) p->observe(fn, arg, true);
}

/* Work items (section 7): a shared counter of claimed items and one of finished items. */
static int work_next(Work *w) { return atomic_fetch_add(&w->next, 1); }
static void work_done(Work *w) { atomic_fetch_add(&w->done, 1); }

static void work_wait(Work *w, int n) {
    for (int i = 0; atomic_load(&w->done) < n; i++) {
        if (i < POOL_SPIN) cpu_relax();
        else sched_yield();   /* the thread we wait for may need this CPU */
    }
}

/* ============================================================================================== */
/* 13. Tokenizer                                                                                  */
/* ============================================================================================== */
/* ----------------------------------------------------------------------------------------------
 * Tokenizer: byte-level BPE with the "qwen35" pre-tokenizer, matching llama.cpp's llama_tokenize
 * (src/llama-vocab.cpp, src/unicode.cpp) token for token.
 *
 * encode = split at special tokens -> split each remaining fragment into pieces (qwen35 scanner)
 *          -> map each piece's bytes to GPT-2 "byte characters" -> merge pairs by rank (BPE)
 *          -> look up each final symbol in the vocabulary.
 * -------------------------------------------------------------------------------------------- */

/* GGUF token types (tokenizer.ggml.token_type) */
enum { TOKEN_TYPE_NORMAL = 1, TOKEN_TYPE_UNKNOWN = 2, TOKEN_TYPE_CONTROL = 3, TOKEN_TYPE_USER_DEFINED = 4,
       TOKEN_TYPE_UNUSED = 5, TOKEN_TYPE_BYTE = 6 };

/* Per-token flags, derived from the type when the tokenizer is built. */
enum {
    TOKEN_FLAG_CONTROL = 1,       /* matched in text only when parse_special (CONTROL or UNKNOWN type) */
    TOKEN_FLAG_USER_DEFINED = 2,  /* always matched in text */
    TOKEN_FLAG_VERBATIM = 4,      /* decodes to its stored text (not through the byte map) */
    TOKEN_FLAG_BYTE = 8,          /* "<0xHH>" byte token */
};

struct Tokenizer {
    int n_vocab;
    char *token_text;           /* every token's text, back to back */
    uint32_t *token_offset;     /* token i is token_text[token_offset[i] .. token_offset[i+1]) */
    uint8_t *token_flags;       /* TOKEN_FLAG_* per token */
    int *token_slots;           /* open-addressing hash table: token text -> id, -1 = empty */
    uint32_t token_mask;        /* number of slots - 1 (a power of two) */

    int n_merges;
    char *merge_text;           /* every merge "A B", back to back; rank = index */
    uint32_t *merge_offset;     /* merge r is merge_text[merge_offset[r] .. merge_offset[r+1]) */
    int *merge_slots;           /* open-addressing hash table: merge text -> rank, -1 = empty */
    uint32_t merge_mask;
    uint32_t max_merge_len;     /* longest merge text: longer pairs cannot be merges */

    int *specials;              /* ids of CONTROL/USER_DEFINED/UNKNOWN tokens, longest text first */
    int n_specials;

    char byte_char[256][2];     /* GPT-2 byte map: byte -> UTF-8 of its printable stand-in character */
    uint8_t byte_char_len[256];
    int16_t char_byte[0x144];   /* inverse map: stand-in codepoint (all are < U+0144) -> byte, or -1 */
};

/* ---- Unicode character classes for the pre-tokenizer --------------------------------------- */

typedef struct { uint32_t first, last; } CodepointRange;
/* Generated by test/unicode_tables.py from Python 3.11.7 unicodedata 14.0.0 plus the Unicode 15.0/15.1
   letters, marks and numbers (llama.cpp's tables are Unicode 15.1). Do not edit by hand. */
/* general category L* or M* (725 ranges) */
static const CodepointRange letter_mark_ranges[] = {
    {0x00041, 0x0005A}, {0x00061, 0x0007A}, {0x000AA, 0x000AA}, {0x000B5, 0x000B5}, {0x000BA, 0x000BA},
    {0x000C0, 0x000D6}, {0x000D8, 0x000F6}, {0x000F8, 0x002C1}, {0x002C6, 0x002D1}, {0x002E0, 0x002E4},
    {0x002EC, 0x002EC}, {0x002EE, 0x002EE}, {0x00300, 0x00374}, {0x00376, 0x00377}, {0x0037A, 0x0037D},
    {0x0037F, 0x0037F}, {0x00386, 0x00386}, {0x00388, 0x0038A}, {0x0038C, 0x0038C}, {0x0038E, 0x003A1},
    {0x003A3, 0x003F5}, {0x003F7, 0x00481}, {0x00483, 0x0052F}, {0x00531, 0x00556}, {0x00559, 0x00559},
    {0x00560, 0x00588}, {0x00591, 0x005BD}, {0x005BF, 0x005BF}, {0x005C1, 0x005C2}, {0x005C4, 0x005C5},
    {0x005C7, 0x005C7}, {0x005D0, 0x005EA}, {0x005EF, 0x005F2}, {0x00610, 0x0061A}, {0x00620, 0x0065F},
    {0x0066E, 0x006D3}, {0x006D5, 0x006DC}, {0x006DF, 0x006E8}, {0x006EA, 0x006EF}, {0x006FA, 0x006FC},
    {0x006FF, 0x006FF}, {0x00710, 0x0074A}, {0x0074D, 0x007B1}, {0x007CA, 0x007F5}, {0x007FA, 0x007FA},
    {0x007FD, 0x007FD}, {0x00800, 0x0082D}, {0x00840, 0x0085B}, {0x00860, 0x0086A}, {0x00870, 0x00887},
    {0x00889, 0x0088E}, {0x00898, 0x008E1}, {0x008E3, 0x00963}, {0x00971, 0x00983}, {0x00985, 0x0098C},
    {0x0098F, 0x00990}, {0x00993, 0x009A8}, {0x009AA, 0x009B0}, {0x009B2, 0x009B2}, {0x009B6, 0x009B9},
    {0x009BC, 0x009C4}, {0x009C7, 0x009C8}, {0x009CB, 0x009CE}, {0x009D7, 0x009D7}, {0x009DC, 0x009DD},
    {0x009DF, 0x009E3}, {0x009F0, 0x009F1}, {0x009FC, 0x009FC}, {0x009FE, 0x009FE}, {0x00A01, 0x00A03},
    {0x00A05, 0x00A0A}, {0x00A0F, 0x00A10}, {0x00A13, 0x00A28}, {0x00A2A, 0x00A30}, {0x00A32, 0x00A33},
    {0x00A35, 0x00A36}, {0x00A38, 0x00A39}, {0x00A3C, 0x00A3C}, {0x00A3E, 0x00A42}, {0x00A47, 0x00A48},
    {0x00A4B, 0x00A4D}, {0x00A51, 0x00A51}, {0x00A59, 0x00A5C}, {0x00A5E, 0x00A5E}, {0x00A70, 0x00A75},
    {0x00A81, 0x00A83}, {0x00A85, 0x00A8D}, {0x00A8F, 0x00A91}, {0x00A93, 0x00AA8}, {0x00AAA, 0x00AB0},
    {0x00AB2, 0x00AB3}, {0x00AB5, 0x00AB9}, {0x00ABC, 0x00AC5}, {0x00AC7, 0x00AC9}, {0x00ACB, 0x00ACD},
    {0x00AD0, 0x00AD0}, {0x00AE0, 0x00AE3}, {0x00AF9, 0x00AFF}, {0x00B01, 0x00B03}, {0x00B05, 0x00B0C},
    {0x00B0F, 0x00B10}, {0x00B13, 0x00B28}, {0x00B2A, 0x00B30}, {0x00B32, 0x00B33}, {0x00B35, 0x00B39},
    {0x00B3C, 0x00B44}, {0x00B47, 0x00B48}, {0x00B4B, 0x00B4D}, {0x00B55, 0x00B57}, {0x00B5C, 0x00B5D},
    {0x00B5F, 0x00B63}, {0x00B71, 0x00B71}, {0x00B82, 0x00B83}, {0x00B85, 0x00B8A}, {0x00B8E, 0x00B90},
    {0x00B92, 0x00B95}, {0x00B99, 0x00B9A}, {0x00B9C, 0x00B9C}, {0x00B9E, 0x00B9F}, {0x00BA3, 0x00BA4},
    {0x00BA8, 0x00BAA}, {0x00BAE, 0x00BB9}, {0x00BBE, 0x00BC2}, {0x00BC6, 0x00BC8}, {0x00BCA, 0x00BCD},
    {0x00BD0, 0x00BD0}, {0x00BD7, 0x00BD7}, {0x00C00, 0x00C0C}, {0x00C0E, 0x00C10}, {0x00C12, 0x00C28},
    {0x00C2A, 0x00C39}, {0x00C3C, 0x00C44}, {0x00C46, 0x00C48}, {0x00C4A, 0x00C4D}, {0x00C55, 0x00C56},
    {0x00C58, 0x00C5A}, {0x00C5D, 0x00C5D}, {0x00C60, 0x00C63}, {0x00C80, 0x00C83}, {0x00C85, 0x00C8C},
    {0x00C8E, 0x00C90}, {0x00C92, 0x00CA8}, {0x00CAA, 0x00CB3}, {0x00CB5, 0x00CB9}, {0x00CBC, 0x00CC4},
    {0x00CC6, 0x00CC8}, {0x00CCA, 0x00CCD}, {0x00CD5, 0x00CD6}, {0x00CDD, 0x00CDE}, {0x00CE0, 0x00CE3},
    {0x00CF1, 0x00CF3}, {0x00D00, 0x00D0C}, {0x00D0E, 0x00D10}, {0x00D12, 0x00D44}, {0x00D46, 0x00D48},
    {0x00D4A, 0x00D4E}, {0x00D54, 0x00D57}, {0x00D5F, 0x00D63}, {0x00D7A, 0x00D7F}, {0x00D81, 0x00D83},
    {0x00D85, 0x00D96}, {0x00D9A, 0x00DB1}, {0x00DB3, 0x00DBB}, {0x00DBD, 0x00DBD}, {0x00DC0, 0x00DC6},
    {0x00DCA, 0x00DCA}, {0x00DCF, 0x00DD4}, {0x00DD6, 0x00DD6}, {0x00DD8, 0x00DDF}, {0x00DF2, 0x00DF3},
    {0x00E01, 0x00E3A}, {0x00E40, 0x00E4E}, {0x00E81, 0x00E82}, {0x00E84, 0x00E84}, {0x00E86, 0x00E8A},
    {0x00E8C, 0x00EA3}, {0x00EA5, 0x00EA5}, {0x00EA7, 0x00EBD}, {0x00EC0, 0x00EC4}, {0x00EC6, 0x00EC6},
    {0x00EC8, 0x00ECE}, {0x00EDC, 0x00EDF}, {0x00F00, 0x00F00}, {0x00F18, 0x00F19}, {0x00F35, 0x00F35},
    {0x00F37, 0x00F37}, {0x00F39, 0x00F39}, {0x00F3E, 0x00F47}, {0x00F49, 0x00F6C}, {0x00F71, 0x00F84},
    {0x00F86, 0x00F97}, {0x00F99, 0x00FBC}, {0x00FC6, 0x00FC6}, {0x01000, 0x0103F}, {0x01050, 0x0108F},
    {0x0109A, 0x0109D}, {0x010A0, 0x010C5}, {0x010C7, 0x010C7}, {0x010CD, 0x010CD}, {0x010D0, 0x010FA},
    {0x010FC, 0x01248}, {0x0124A, 0x0124D}, {0x01250, 0x01256}, {0x01258, 0x01258}, {0x0125A, 0x0125D},
    {0x01260, 0x01288}, {0x0128A, 0x0128D}, {0x01290, 0x012B0}, {0x012B2, 0x012B5}, {0x012B8, 0x012BE},
    {0x012C0, 0x012C0}, {0x012C2, 0x012C5}, {0x012C8, 0x012D6}, {0x012D8, 0x01310}, {0x01312, 0x01315},
    {0x01318, 0x0135A}, {0x0135D, 0x0135F}, {0x01380, 0x0138F}, {0x013A0, 0x013F5}, {0x013F8, 0x013FD},
    {0x01401, 0x0166C}, {0x0166F, 0x0167F}, {0x01681, 0x0169A}, {0x016A0, 0x016EA}, {0x016F1, 0x016F8},
    {0x01700, 0x01715}, {0x0171F, 0x01734}, {0x01740, 0x01753}, {0x01760, 0x0176C}, {0x0176E, 0x01770},
    {0x01772, 0x01773}, {0x01780, 0x017D3}, {0x017D7, 0x017D7}, {0x017DC, 0x017DD}, {0x0180B, 0x0180D},
    {0x0180F, 0x0180F}, {0x01820, 0x01878}, {0x01880, 0x018AA}, {0x018B0, 0x018F5}, {0x01900, 0x0191E},
    {0x01920, 0x0192B}, {0x01930, 0x0193B}, {0x01950, 0x0196D}, {0x01970, 0x01974}, {0x01980, 0x019AB},
    {0x019B0, 0x019C9}, {0x01A00, 0x01A1B}, {0x01A20, 0x01A5E}, {0x01A60, 0x01A7C}, {0x01A7F, 0x01A7F},
    {0x01AA7, 0x01AA7}, {0x01AB0, 0x01ACE}, {0x01B00, 0x01B4C}, {0x01B6B, 0x01B73}, {0x01B80, 0x01BAF},
    {0x01BBA, 0x01BF3}, {0x01C00, 0x01C37}, {0x01C4D, 0x01C4F}, {0x01C5A, 0x01C7D}, {0x01C80, 0x01C88},
    {0x01C90, 0x01CBA}, {0x01CBD, 0x01CBF}, {0x01CD0, 0x01CD2}, {0x01CD4, 0x01CFA}, {0x01D00, 0x01F15},
    {0x01F18, 0x01F1D}, {0x01F20, 0x01F45}, {0x01F48, 0x01F4D}, {0x01F50, 0x01F57}, {0x01F59, 0x01F59},
    {0x01F5B, 0x01F5B}, {0x01F5D, 0x01F5D}, {0x01F5F, 0x01F7D}, {0x01F80, 0x01FB4}, {0x01FB6, 0x01FBC},
    {0x01FBE, 0x01FBE}, {0x01FC2, 0x01FC4}, {0x01FC6, 0x01FCC}, {0x01FD0, 0x01FD3}, {0x01FD6, 0x01FDB},
    {0x01FE0, 0x01FEC}, {0x01FF2, 0x01FF4}, {0x01FF6, 0x01FFC}, {0x02071, 0x02071}, {0x0207F, 0x0207F},
    {0x02090, 0x0209C}, {0x020D0, 0x020F0}, {0x02102, 0x02102}, {0x02107, 0x02107}, {0x0210A, 0x02113},
    {0x02115, 0x02115}, {0x02119, 0x0211D}, {0x02124, 0x02124}, {0x02126, 0x02126}, {0x02128, 0x02128},
    {0x0212A, 0x0212D}, {0x0212F, 0x02139}, {0x0213C, 0x0213F}, {0x02145, 0x02149}, {0x0214E, 0x0214E},
    {0x02183, 0x02184}, {0x02C00, 0x02CE4}, {0x02CEB, 0x02CF3}, {0x02D00, 0x02D25}, {0x02D27, 0x02D27},
    {0x02D2D, 0x02D2D}, {0x02D30, 0x02D67}, {0x02D6F, 0x02D6F}, {0x02D7F, 0x02D96}, {0x02DA0, 0x02DA6},
    {0x02DA8, 0x02DAE}, {0x02DB0, 0x02DB6}, {0x02DB8, 0x02DBE}, {0x02DC0, 0x02DC6}, {0x02DC8, 0x02DCE},
    {0x02DD0, 0x02DD6}, {0x02DD8, 0x02DDE}, {0x02DE0, 0x02DFF}, {0x02E2F, 0x02E2F}, {0x03005, 0x03006},
    {0x0302A, 0x0302F}, {0x03031, 0x03035}, {0x0303B, 0x0303C}, {0x03041, 0x03096}, {0x03099, 0x0309A},
    {0x0309D, 0x0309F}, {0x030A1, 0x030FA}, {0x030FC, 0x030FF}, {0x03105, 0x0312F}, {0x03131, 0x0318E},
    {0x031A0, 0x031BF}, {0x031F0, 0x031FF}, {0x03400, 0x04DBF}, {0x04E00, 0x0A48C}, {0x0A4D0, 0x0A4FD},
    {0x0A500, 0x0A60C}, {0x0A610, 0x0A61F}, {0x0A62A, 0x0A62B}, {0x0A640, 0x0A672}, {0x0A674, 0x0A67D},
    {0x0A67F, 0x0A6E5}, {0x0A6F0, 0x0A6F1}, {0x0A717, 0x0A71F}, {0x0A722, 0x0A788}, {0x0A78B, 0x0A7CA},
    {0x0A7D0, 0x0A7D1}, {0x0A7D3, 0x0A7D3}, {0x0A7D5, 0x0A7D9}, {0x0A7F2, 0x0A827}, {0x0A82C, 0x0A82C},
    {0x0A840, 0x0A873}, {0x0A880, 0x0A8C5}, {0x0A8E0, 0x0A8F7}, {0x0A8FB, 0x0A8FB}, {0x0A8FD, 0x0A8FF},
    {0x0A90A, 0x0A92D}, {0x0A930, 0x0A953}, {0x0A960, 0x0A97C}, {0x0A980, 0x0A9C0}, {0x0A9CF, 0x0A9CF},
    {0x0A9E0, 0x0A9EF}, {0x0A9FA, 0x0A9FE}, {0x0AA00, 0x0AA36}, {0x0AA40, 0x0AA4D}, {0x0AA60, 0x0AA76},
    {0x0AA7A, 0x0AAC2}, {0x0AADB, 0x0AADD}, {0x0AAE0, 0x0AAEF}, {0x0AAF2, 0x0AAF6}, {0x0AB01, 0x0AB06},
    {0x0AB09, 0x0AB0E}, {0x0AB11, 0x0AB16}, {0x0AB20, 0x0AB26}, {0x0AB28, 0x0AB2E}, {0x0AB30, 0x0AB5A},
    {0x0AB5C, 0x0AB69}, {0x0AB70, 0x0ABEA}, {0x0ABEC, 0x0ABED}, {0x0AC00, 0x0D7A3}, {0x0D7B0, 0x0D7C6},
    {0x0D7CB, 0x0D7FB}, {0x0F900, 0x0FA6D}, {0x0FA70, 0x0FAD9}, {0x0FB00, 0x0FB06}, {0x0FB13, 0x0FB17},
    {0x0FB1D, 0x0FB28}, {0x0FB2A, 0x0FB36}, {0x0FB38, 0x0FB3C}, {0x0FB3E, 0x0FB3E}, {0x0FB40, 0x0FB41},
    {0x0FB43, 0x0FB44}, {0x0FB46, 0x0FBB1}, {0x0FBD3, 0x0FD3D}, {0x0FD50, 0x0FD8F}, {0x0FD92, 0x0FDC7},
    {0x0FDF0, 0x0FDFB}, {0x0FE00, 0x0FE0F}, {0x0FE20, 0x0FE2F}, {0x0FE70, 0x0FE74}, {0x0FE76, 0x0FEFC},
    {0x0FF21, 0x0FF3A}, {0x0FF41, 0x0FF5A}, {0x0FF66, 0x0FFBE}, {0x0FFC2, 0x0FFC7}, {0x0FFCA, 0x0FFCF},
    {0x0FFD2, 0x0FFD7}, {0x0FFDA, 0x0FFDC}, {0x10000, 0x1000B}, {0x1000D, 0x10026}, {0x10028, 0x1003A},
    {0x1003C, 0x1003D}, {0x1003F, 0x1004D}, {0x10050, 0x1005D}, {0x10080, 0x100FA}, {0x101FD, 0x101FD},
    {0x10280, 0x1029C}, {0x102A0, 0x102D0}, {0x102E0, 0x102E0}, {0x10300, 0x1031F}, {0x1032D, 0x10340},
    {0x10342, 0x10349}, {0x10350, 0x1037A}, {0x10380, 0x1039D}, {0x103A0, 0x103C3}, {0x103C8, 0x103CF},
    {0x10400, 0x1049D}, {0x104B0, 0x104D3}, {0x104D8, 0x104FB}, {0x10500, 0x10527}, {0x10530, 0x10563},
    {0x10570, 0x1057A}, {0x1057C, 0x1058A}, {0x1058C, 0x10592}, {0x10594, 0x10595}, {0x10597, 0x105A1},
    {0x105A3, 0x105B1}, {0x105B3, 0x105B9}, {0x105BB, 0x105BC}, {0x10600, 0x10736}, {0x10740, 0x10755},
    {0x10760, 0x10767}, {0x10780, 0x10785}, {0x10787, 0x107B0}, {0x107B2, 0x107BA}, {0x10800, 0x10805},
    {0x10808, 0x10808}, {0x1080A, 0x10835}, {0x10837, 0x10838}, {0x1083C, 0x1083C}, {0x1083F, 0x10855},
    {0x10860, 0x10876}, {0x10880, 0x1089E}, {0x108E0, 0x108F2}, {0x108F4, 0x108F5}, {0x10900, 0x10915},
    {0x10920, 0x10939}, {0x10980, 0x109B7}, {0x109BE, 0x109BF}, {0x10A00, 0x10A03}, {0x10A05, 0x10A06},
    {0x10A0C, 0x10A13}, {0x10A15, 0x10A17}, {0x10A19, 0x10A35}, {0x10A38, 0x10A3A}, {0x10A3F, 0x10A3F},
    {0x10A60, 0x10A7C}, {0x10A80, 0x10A9C}, {0x10AC0, 0x10AC7}, {0x10AC9, 0x10AE6}, {0x10B00, 0x10B35},
    {0x10B40, 0x10B55}, {0x10B60, 0x10B72}, {0x10B80, 0x10B91}, {0x10C00, 0x10C48}, {0x10C80, 0x10CB2},
    {0x10CC0, 0x10CF2}, {0x10D00, 0x10D27}, {0x10E80, 0x10EA9}, {0x10EAB, 0x10EAC}, {0x10EB0, 0x10EB1},
    {0x10EFD, 0x10F1C}, {0x10F27, 0x10F27}, {0x10F30, 0x10F50}, {0x10F70, 0x10F85}, {0x10FB0, 0x10FC4},
    {0x10FE0, 0x10FF6}, {0x11000, 0x11046}, {0x11070, 0x11075}, {0x1107F, 0x110BA}, {0x110C2, 0x110C2},
    {0x110D0, 0x110E8}, {0x11100, 0x11134}, {0x11144, 0x11147}, {0x11150, 0x11173}, {0x11176, 0x11176},
    {0x11180, 0x111C4}, {0x111C9, 0x111CC}, {0x111CE, 0x111CF}, {0x111DA, 0x111DA}, {0x111DC, 0x111DC},
    {0x11200, 0x11211}, {0x11213, 0x11237}, {0x1123E, 0x11241}, {0x11280, 0x11286}, {0x11288, 0x11288},
    {0x1128A, 0x1128D}, {0x1128F, 0x1129D}, {0x1129F, 0x112A8}, {0x112B0, 0x112EA}, {0x11300, 0x11303},
    {0x11305, 0x1130C}, {0x1130F, 0x11310}, {0x11313, 0x11328}, {0x1132A, 0x11330}, {0x11332, 0x11333},
    {0x11335, 0x11339}, {0x1133B, 0x11344}, {0x11347, 0x11348}, {0x1134B, 0x1134D}, {0x11350, 0x11350},
    {0x11357, 0x11357}, {0x1135D, 0x11363}, {0x11366, 0x1136C}, {0x11370, 0x11374}, {0x11400, 0x1144A},
    {0x1145E, 0x11461}, {0x11480, 0x114C5}, {0x114C7, 0x114C7}, {0x11580, 0x115B5}, {0x115B8, 0x115C0},
    {0x115D8, 0x115DD}, {0x11600, 0x11640}, {0x11644, 0x11644}, {0x11680, 0x116B8}, {0x11700, 0x1171A},
    {0x1171D, 0x1172B}, {0x11740, 0x11746}, {0x11800, 0x1183A}, {0x118A0, 0x118DF}, {0x118FF, 0x11906},
    {0x11909, 0x11909}, {0x1190C, 0x11913}, {0x11915, 0x11916}, {0x11918, 0x11935}, {0x11937, 0x11938},
    {0x1193B, 0x11943}, {0x119A0, 0x119A7}, {0x119AA, 0x119D7}, {0x119DA, 0x119E1}, {0x119E3, 0x119E4},
    {0x11A00, 0x11A3E}, {0x11A47, 0x11A47}, {0x11A50, 0x11A99}, {0x11A9D, 0x11A9D}, {0x11AB0, 0x11AF8},
    {0x11C00, 0x11C08}, {0x11C0A, 0x11C36}, {0x11C38, 0x11C40}, {0x11C72, 0x11C8F}, {0x11C92, 0x11CA7},
    {0x11CA9, 0x11CB6}, {0x11D00, 0x11D06}, {0x11D08, 0x11D09}, {0x11D0B, 0x11D36}, {0x11D3A, 0x11D3A},
    {0x11D3C, 0x11D3D}, {0x11D3F, 0x11D47}, {0x11D60, 0x11D65}, {0x11D67, 0x11D68}, {0x11D6A, 0x11D8E},
    {0x11D90, 0x11D91}, {0x11D93, 0x11D98}, {0x11EE0, 0x11EF6}, {0x11F00, 0x11F10}, {0x11F12, 0x11F3A},
    {0x11F3E, 0x11F42}, {0x11FB0, 0x11FB0}, {0x12000, 0x12399}, {0x12480, 0x12543}, {0x12F90, 0x12FF0},
    {0x13000, 0x1342F}, {0x13440, 0x13455}, {0x14400, 0x14646}, {0x16800, 0x16A38}, {0x16A40, 0x16A5E},
    {0x16A70, 0x16ABE}, {0x16AD0, 0x16AED}, {0x16AF0, 0x16AF4}, {0x16B00, 0x16B36}, {0x16B40, 0x16B43},
    {0x16B63, 0x16B77}, {0x16B7D, 0x16B8F}, {0x16E40, 0x16E7F}, {0x16F00, 0x16F4A}, {0x16F4F, 0x16F87},
    {0x16F8F, 0x16F9F}, {0x16FE0, 0x16FE1}, {0x16FE3, 0x16FE4}, {0x16FF0, 0x16FF1}, {0x17000, 0x187F7},
    {0x18800, 0x18CD5}, {0x18D00, 0x18D08}, {0x1AFF0, 0x1AFF3}, {0x1AFF5, 0x1AFFB}, {0x1AFFD, 0x1AFFE},
    {0x1B000, 0x1B122}, {0x1B132, 0x1B132}, {0x1B150, 0x1B152}, {0x1B155, 0x1B155}, {0x1B164, 0x1B167},
    {0x1B170, 0x1B2FB}, {0x1BC00, 0x1BC6A}, {0x1BC70, 0x1BC7C}, {0x1BC80, 0x1BC88}, {0x1BC90, 0x1BC99},
    {0x1BC9D, 0x1BC9E}, {0x1CF00, 0x1CF2D}, {0x1CF30, 0x1CF46}, {0x1D165, 0x1D169}, {0x1D16D, 0x1D172},
    {0x1D17B, 0x1D182}, {0x1D185, 0x1D18B}, {0x1D1AA, 0x1D1AD}, {0x1D242, 0x1D244}, {0x1D400, 0x1D454},
    {0x1D456, 0x1D49C}, {0x1D49E, 0x1D49F}, {0x1D4A2, 0x1D4A2}, {0x1D4A5, 0x1D4A6}, {0x1D4A9, 0x1D4AC},
    {0x1D4AE, 0x1D4B9}, {0x1D4BB, 0x1D4BB}, {0x1D4BD, 0x1D4C3}, {0x1D4C5, 0x1D505}, {0x1D507, 0x1D50A},
    {0x1D50D, 0x1D514}, {0x1D516, 0x1D51C}, {0x1D51E, 0x1D539}, {0x1D53B, 0x1D53E}, {0x1D540, 0x1D544},
    {0x1D546, 0x1D546}, {0x1D54A, 0x1D550}, {0x1D552, 0x1D6A5}, {0x1D6A8, 0x1D6C0}, {0x1D6C2, 0x1D6DA},
    {0x1D6DC, 0x1D6FA}, {0x1D6FC, 0x1D714}, {0x1D716, 0x1D734}, {0x1D736, 0x1D74E}, {0x1D750, 0x1D76E},
    {0x1D770, 0x1D788}, {0x1D78A, 0x1D7A8}, {0x1D7AA, 0x1D7C2}, {0x1D7C4, 0x1D7CB}, {0x1DA00, 0x1DA36},
    {0x1DA3B, 0x1DA6C}, {0x1DA75, 0x1DA75}, {0x1DA84, 0x1DA84}, {0x1DA9B, 0x1DA9F}, {0x1DAA1, 0x1DAAF},
    {0x1DF00, 0x1DF1E}, {0x1DF25, 0x1DF2A}, {0x1E000, 0x1E006}, {0x1E008, 0x1E018}, {0x1E01B, 0x1E021},
    {0x1E023, 0x1E024}, {0x1E026, 0x1E02A}, {0x1E030, 0x1E06D}, {0x1E08F, 0x1E08F}, {0x1E100, 0x1E12C},
    {0x1E130, 0x1E13D}, {0x1E14E, 0x1E14E}, {0x1E290, 0x1E2AE}, {0x1E2C0, 0x1E2EF}, {0x1E4D0, 0x1E4EF},
    {0x1E7E0, 0x1E7E6}, {0x1E7E8, 0x1E7EB}, {0x1E7ED, 0x1E7EE}, {0x1E7F0, 0x1E7FE}, {0x1E800, 0x1E8C4},
    {0x1E8D0, 0x1E8D6}, {0x1E900, 0x1E94B}, {0x1EE00, 0x1EE03}, {0x1EE05, 0x1EE1F}, {0x1EE21, 0x1EE22},
    {0x1EE24, 0x1EE24}, {0x1EE27, 0x1EE27}, {0x1EE29, 0x1EE32}, {0x1EE34, 0x1EE37}, {0x1EE39, 0x1EE39},
    {0x1EE3B, 0x1EE3B}, {0x1EE42, 0x1EE42}, {0x1EE47, 0x1EE47}, {0x1EE49, 0x1EE49}, {0x1EE4B, 0x1EE4B},
    {0x1EE4D, 0x1EE4F}, {0x1EE51, 0x1EE52}, {0x1EE54, 0x1EE54}, {0x1EE57, 0x1EE57}, {0x1EE59, 0x1EE59},
    {0x1EE5B, 0x1EE5B}, {0x1EE5D, 0x1EE5D}, {0x1EE5F, 0x1EE5F}, {0x1EE61, 0x1EE62}, {0x1EE64, 0x1EE64},
    {0x1EE67, 0x1EE6A}, {0x1EE6C, 0x1EE72}, {0x1EE74, 0x1EE77}, {0x1EE79, 0x1EE7C}, {0x1EE7E, 0x1EE7E},
    {0x1EE80, 0x1EE89}, {0x1EE8B, 0x1EE9B}, {0x1EEA1, 0x1EEA3}, {0x1EEA5, 0x1EEA9}, {0x1EEAB, 0x1EEBB},
    {0x20000, 0x2A6DF}, {0x2A700, 0x2B739}, {0x2B740, 0x2B81D}, {0x2B820, 0x2CEA1}, {0x2CEB0, 0x2EBE0},
    {0x2EBF0, 0x2EE5D}, {0x2F800, 0x2FA1D}, {0x30000, 0x3134A}, {0x31350, 0x323AF}, {0xE0100, 0xE01EF},
};

/* general category N* (137 ranges) */
static const CodepointRange number_ranges[] = {
    {0x00030, 0x00039}, {0x000B2, 0x000B3}, {0x000B9, 0x000B9}, {0x000BC, 0x000BE}, {0x00660, 0x00669},
    {0x006F0, 0x006F9}, {0x007C0, 0x007C9}, {0x00966, 0x0096F}, {0x009E6, 0x009EF}, {0x009F4, 0x009F9},
    {0x00A66, 0x00A6F}, {0x00AE6, 0x00AEF}, {0x00B66, 0x00B6F}, {0x00B72, 0x00B77}, {0x00BE6, 0x00BF2},
    {0x00C66, 0x00C6F}, {0x00C78, 0x00C7E}, {0x00CE6, 0x00CEF}, {0x00D58, 0x00D5E}, {0x00D66, 0x00D78},
    {0x00DE6, 0x00DEF}, {0x00E50, 0x00E59}, {0x00ED0, 0x00ED9}, {0x00F20, 0x00F33}, {0x01040, 0x01049},
    {0x01090, 0x01099}, {0x01369, 0x0137C}, {0x016EE, 0x016F0}, {0x017E0, 0x017E9}, {0x017F0, 0x017F9},
    {0x01810, 0x01819}, {0x01946, 0x0194F}, {0x019D0, 0x019DA}, {0x01A80, 0x01A89}, {0x01A90, 0x01A99},
    {0x01B50, 0x01B59}, {0x01BB0, 0x01BB9}, {0x01C40, 0x01C49}, {0x01C50, 0x01C59}, {0x02070, 0x02070},
    {0x02074, 0x02079}, {0x02080, 0x02089}, {0x02150, 0x02182}, {0x02185, 0x02189}, {0x02460, 0x0249B},
    {0x024EA, 0x024FF}, {0x02776, 0x02793}, {0x02CFD, 0x02CFD}, {0x03007, 0x03007}, {0x03021, 0x03029},
    {0x03038, 0x0303A}, {0x03192, 0x03195}, {0x03220, 0x03229}, {0x03248, 0x0324F}, {0x03251, 0x0325F},
    {0x03280, 0x03289}, {0x032B1, 0x032BF}, {0x0A620, 0x0A629}, {0x0A6E6, 0x0A6EF}, {0x0A830, 0x0A835},
    {0x0A8D0, 0x0A8D9}, {0x0A900, 0x0A909}, {0x0A9D0, 0x0A9D9}, {0x0A9F0, 0x0A9F9}, {0x0AA50, 0x0AA59},
    {0x0ABF0, 0x0ABF9}, {0x0FF10, 0x0FF19}, {0x10107, 0x10133}, {0x10140, 0x10178}, {0x1018A, 0x1018B},
    {0x102E1, 0x102FB}, {0x10320, 0x10323}, {0x10341, 0x10341}, {0x1034A, 0x1034A}, {0x103D1, 0x103D5},
    {0x104A0, 0x104A9}, {0x10858, 0x1085F}, {0x10879, 0x1087F}, {0x108A7, 0x108AF}, {0x108FB, 0x108FF},
    {0x10916, 0x1091B}, {0x109BC, 0x109BD}, {0x109C0, 0x109CF}, {0x109D2, 0x109FF}, {0x10A40, 0x10A48},
    {0x10A7D, 0x10A7E}, {0x10A9D, 0x10A9F}, {0x10AEB, 0x10AEF}, {0x10B58, 0x10B5F}, {0x10B78, 0x10B7F},
    {0x10BA9, 0x10BAF}, {0x10CFA, 0x10CFF}, {0x10D30, 0x10D39}, {0x10E60, 0x10E7E}, {0x10F1D, 0x10F26},
    {0x10F51, 0x10F54}, {0x10FC5, 0x10FCB}, {0x11052, 0x1106F}, {0x110F0, 0x110F9}, {0x11136, 0x1113F},
    {0x111D0, 0x111D9}, {0x111E1, 0x111F4}, {0x112F0, 0x112F9}, {0x11450, 0x11459}, {0x114D0, 0x114D9},
    {0x11650, 0x11659}, {0x116C0, 0x116C9}, {0x11730, 0x1173B}, {0x118E0, 0x118F2}, {0x11950, 0x11959},
    {0x11C50, 0x11C6C}, {0x11D50, 0x11D59}, {0x11DA0, 0x11DA9}, {0x11F50, 0x11F59}, {0x11FC0, 0x11FD4},
    {0x12400, 0x1246E}, {0x16A60, 0x16A69}, {0x16AC0, 0x16AC9}, {0x16B50, 0x16B59}, {0x16B5B, 0x16B61},
    {0x16E80, 0x16E96}, {0x1D2C0, 0x1D2D3}, {0x1D2E0, 0x1D2F3}, {0x1D360, 0x1D378}, {0x1D7CE, 0x1D7FF},
    {0x1E140, 0x1E149}, {0x1E2F0, 0x1E2F9}, {0x1E4F0, 0x1E4F9}, {0x1E8C7, 0x1E8CF}, {0x1E950, 0x1E959},
    {0x1EC71, 0x1ECAB}, {0x1ECAD, 0x1ECAF}, {0x1ECB1, 0x1ECB4}, {0x1ED01, 0x1ED2D}, {0x1ED2F, 0x1ED3D},
    {0x1F100, 0x1F10C}, {0x1FBF0, 0x1FBF9},
};

/* White_Space as llama.cpp lists it (10 ranges) */
static const CodepointRange whitespace_ranges[] = {
    {0x00009, 0x0000D}, {0x00020, 0x00020}, {0x00085, 0x00085}, {0x000A0, 0x000A0}, {0x01680, 0x01680},
    {0x02000, 0x0200A}, {0x02028, 0x02029}, {0x0202F, 0x0202F}, {0x0205F, 0x0205F}, {0x03000, 0x03000},
};


/* The classes the qwen35 scanner distinguishes. Every codepoint inside the text has a class;
   CHAR_NONE stands for "past the end of the fragment" (llama.cpp's empty flags). Codepoints that
   are neither letters, marks, numbers nor white space -- punctuation, symbols, controls, unassigned
   codepoints, U+FFFD -- are CHAR_OTHER. */
typedef enum { CHAR_NONE, CHAR_LETTER, CHAR_NUMBER, CHAR_SPACE, CHAR_OTHER } CharClass;

static bool in_ranges(uint32_t cp, const CodepointRange *r, int n) {
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < r[mid].first) hi = mid - 1;
        else if (cp > r[mid].last) lo = mid + 1;
        else return true;
    }
    return false;
}

/* CHAR_LETTER covers letters (L*) and combining marks (M*): qwen35 never tells them apart. */
static CharClass char_class(uint32_t cp) {
    if (cp < 0x80) {  /* ASCII, the common case, without a table search */
        if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return CHAR_LETTER;
        if (cp >= '0' && cp <= '9') return CHAR_NUMBER;
        if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D)) return CHAR_SPACE;
        return CHAR_OTHER;
    }
    if (in_ranges(cp, letter_mark_ranges, (int)(sizeof letter_mark_ranges / sizeof(CodepointRange))))
        return CHAR_LETTER;
    if (in_ranges(cp, number_ranges, (int)(sizeof number_ranges / sizeof(CodepointRange))))
        return CHAR_NUMBER;
    if (in_ranges(cp, whitespace_ranges, (int)(sizeof whitespace_ranges / sizeof(CodepointRange))))
        return CHAR_SPACE;
    return CHAR_OTHER;
}

/* ---- UTF-8 ------------------------------------------------------------------------------------ */

static bool is_continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

/* Decode one codepoint the way llama.cpp's unicode_cpt_from_utf8 does: the lead byte gives the
   length and the continuation bytes must be 10xxxxxx, but overlong forms, surrogates and values up to
   0x1FFFFF are accepted. Anything else (a stray continuation byte, a truncated sequence, F8..FF)
   is one byte of U+FFFD. Sets *used to the number of bytes consumed. */
static uint32_t utf8_decode_lenient(const unsigned char *s, size_t len, size_t *used) {
    unsigned char c = s[0];
    size_t n;
    uint32_t cp;
    if (c < 0x80) { *used = 1; return c; }
    if ((c & 0xE0) == 0xC0) { n = 2; cp = c & 0x1F; }
    else if ((c & 0xF0) == 0xE0) { n = 3; cp = c & 0x0F; }
    else if ((c & 0xF8) == 0xF0) { n = 4; cp = c & 0x07; }
    else { *used = 1; return 0xFFFD; }  /* continuation byte or F8..FF as a lead */
    if (n > len) { *used = 1; return 0xFFFD; }
    for (size_t i = 1; i < n; i++) {
        if (!is_continuation(s[i])) { *used = 1; return 0xFFFD; }
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    *used = n;
    return cp;
}

/* Encode cp as UTF-8 into out (room for 4 bytes); returns the length. llama.cpp throws on values
   above U+10FFFF (only reachable from malformed 4-byte input); those become U+FFFD here. */
static int utf8_encode(uint32_t cp, unsigned char *out) {
    if (cp > 0x10FFFF) cp = 0xFFFD;
    if (cp < 0x80) { out[0] = (unsigned char)cp; return 1; }
    if (cp < 0x800) {
        out[0] = (unsigned char)(0xC0 | (cp >> 6));
        out[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (unsigned char)(0xE0 | (cp >> 12));
        out[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (unsigned char)(0xF0 | (cp >> 18));
    out[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* ---- hash tables (FNV-1a, open addressing with linear probing) -------------------------------- */

static uint64_t hash_bytes(uint64_t h, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001B3ULL;
    }
    return h;
}

static const uint64_t HASH_SEED = 0xCBF29CE484222325ULL;

/* Smallest power of two >= 2n, so that the tables stay at most half full. */
static uint32_t table_size_for(int n) {
    uint32_t size = 16;
    while (size < 2u * (uint32_t)n) size *= 2;
    return size;
}

static const char *token_text_of(const Tokenizer *t, int id, size_t *len) {
    *len = t->token_offset[id + 1] - t->token_offset[id];
    return t->token_text + t->token_offset[id];
}

static int find_token_span(const Tokenizer *t, const char *s, size_t n) {
    uint32_t slot = (uint32_t)hash_bytes(HASH_SEED, s, n) & t->token_mask;
    for (;; slot = (slot + 1) & t->token_mask) {
        int id = t->token_slots[slot];
        if (id < 0) return -1;
        size_t len;
        const char *text = token_text_of(t, id, &len);
        if (len == n && memcmp(text, s, n) == 0) return id;
    }
}

static int tokenizer_find(const Tokenizer *t, const char *text) {
    return find_token_span(t, text, strlen(text));
}

/* Rank of the merge "left right", or -1. Merges are stored as their GGUF text "A B"; llama.cpp splits
   that at the first space after the first byte. The symbols BPE compares are byte-mapped and never
   contain a space, so comparing "left" + ' ' + "right" with the whole text is the same test. */
static int find_merge_rank(const Tokenizer *t, const char *left, size_t nl, const char *right, size_t nr) {
    if (nl + 1 + nr > t->max_merge_len) return -1;
    uint64_t h = hash_bytes(HASH_SEED, left, nl);
    h = hash_bytes(h, " ", 1);
    h = hash_bytes(h, right, nr);
    for (uint32_t slot = (uint32_t)h & t->merge_mask;; slot = (slot + 1) & t->merge_mask) {
        int rank = t->merge_slots[slot];
        if (rank < 0) return -1;
        const char *text = t->merge_text + t->merge_offset[rank];
        size_t len = t->merge_offset[rank + 1] - t->merge_offset[rank];
        if (len == nl + 1 + nr && memcmp(text, left, nl) == 0 && text[nl] == ' ' &&
            memcmp(text + nl + 1, right, nr) == 0)
            return rank;
    }
}

/* ---- building the tokenizer ------------------------------------------------------------------- */

/* GPT-2's byte map: printable bytes stand for themselves; the others (controls, space, 0x7F..0xA0,
   0xAD) take the codepoints U+0100, U+0101, ... in byte order, so every byte has a visible character. */
static void init_byte_map(Tokenizer *t) {
    int next = 0x100;
    for (int i = 0; i < 0x144; i++) t->char_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        int cp = printable ? b : next++;
        unsigned char utf8[4];
        int n = utf8_encode((uint32_t)cp, utf8);
        memcpy(t->byte_char[b], utf8, (size_t)n);
        t->byte_char_len[b] = (uint8_t)n;
        t->char_byte[cp] = (int16_t)b;
    }
}

/* llama.cpp forces CONTROL on tokens whose text marks an end of turn or a fill-in-the-middle role,
   even when the GGUF types them otherwise (llama_vocab::impl::load). These are the ones a Qwen
   vocabulary can hold. */
static bool looks_like_control(const char *s, size_t n) {
    static const char *const names[] = {
        "<|im_end|>", "<|endoftext|>", "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>",
        "<|fim_pad|>", "<|fim_repo|>", "<|repo_name|>", "<|file_sep|>",
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strlen(names[i]) == n && memcmp(names[i], s, n) == 0) return true;
    return false;
}

static uint8_t token_flags_for(int type, const char *text, size_t len) {
    uint8_t flags = 0;
    if (type == TOKEN_TYPE_CONTROL || type == TOKEN_TYPE_UNKNOWN) flags |= TOKEN_FLAG_CONTROL;
    if (type == TOKEN_TYPE_USER_DEFINED) flags |= TOKEN_FLAG_USER_DEFINED;
    if (looks_like_control(text, len)) flags |= TOKEN_FLAG_CONTROL;
    if (type == TOKEN_TYPE_BYTE) flags |= TOKEN_FLAG_BYTE;
    else if (type != TOKEN_TYPE_NORMAL) flags |= TOKEN_FLAG_VERBATIM;
    return flags;
}

/* llama.cpp reads GGUF strings as C strings, so a NUL byte ends them. */
static size_t gguf_text_len(const GGUFString *s) {
    if (s->len == 0) return 0;
    const char *nul = memchr(s->ptr, 0, (size_t)s->len);
    return nul ? (size_t)(nul - s->ptr) : (size_t)s->len;
}

/* An empty token text is renamed "[EMPTY_<id>]" by llama.cpp; do the same so lookups agree. */
static size_t empty_token_name(int id, char *out) {
    return (size_t)sprintf(out, "[EMPTY_%d]", id);
}

static const char *load_tokens(Tokenizer *t, int n_vocab, const GGUFString *tokens, const int32_t *types) {
    if (n_vocab <= 0) return "tokenizer: empty vocabulary";
    uint64_t total = 0;
    for (int i = 0; i < n_vocab; i++) {
        size_t len = gguf_text_len(&tokens[i]);
        total += len ? len : 24;
    }
    if (total >= UINT32_MAX) return "tokenizer: token texts too large";
    t->token_text = malloc(total + 1);
    t->token_offset = malloc(((size_t)n_vocab + 1) * sizeof(uint32_t));
    t->token_flags = malloc((size_t)n_vocab);
    if (!t->token_text || !t->token_offset || !t->token_flags) return "out of memory";
    uint32_t at = 0;
    for (int i = 0; i < n_vocab; i++) {
        size_t len = gguf_text_len(&tokens[i]);
        t->token_offset[i] = at;
        if (len) memcpy(t->token_text + at, tokens[i].ptr, len);
        else len = empty_token_name(i, t->token_text + at);
        int type = types ? types[i] : TOKEN_TYPE_NORMAL;
        t->token_flags[i] = token_flags_for(type, t->token_text + at, len);
        at += (uint32_t)len;
    }
    t->token_offset[n_vocab] = at;

    t->token_mask = table_size_for(n_vocab) - 1;
    t->token_slots = malloc(((size_t)t->token_mask + 1) * sizeof(int));
    if (!t->token_slots) return "out of memory";
    memset(t->token_slots, 0xFF, ((size_t)t->token_mask + 1) * sizeof(int));  /* all -1 */
    for (int i = 0; i < n_vocab; i++) {
        size_t len;
        const char *text = token_text_of(t, i, &len);
        uint32_t slot = (uint32_t)hash_bytes(HASH_SEED, text, len) & t->token_mask;
        bool duplicate = false;
        for (; t->token_slots[slot] >= 0; slot = (slot + 1) & t->token_mask) {
            size_t other_len;
            const char *other = token_text_of(t, t->token_slots[slot], &other_len);
            if (other_len == len && memcmp(other, text, len) == 0) { duplicate = true; break; }
        }
        if (!duplicate) t->token_slots[slot] = i;  /* a duplicate text keeps the first id */
    }
    return NULL;
}

static const char *load_merges(Tokenizer *t, int n_merges, const GGUFString *merges) {
    uint64_t total = 0;
    for (int i = 0; i < n_merges; i++) total += gguf_text_len(&merges[i]);
    if (total >= UINT32_MAX) return "tokenizer: merge texts too large";
    t->n_merges = n_merges;
    t->merge_text = malloc(total + 1);
    t->merge_offset = malloc(((size_t)n_merges + 1) * sizeof(uint32_t));
    t->merge_mask = table_size_for(n_merges) - 1;
    t->merge_slots = malloc(((size_t)t->merge_mask + 1) * sizeof(int));
    if (!t->merge_text || !t->merge_offset || !t->merge_slots) return "out of memory";
    memset(t->merge_slots, 0xFF, ((size_t)t->merge_mask + 1) * sizeof(int));
    uint32_t at = 0;
    t->max_merge_len = 0;
    for (int r = 0; r < n_merges; r++) {
        size_t len = gguf_text_len(&merges[r]);
        const char *text = t->merge_text + at;
        t->merge_offset[r] = at;
        if (len) memcpy(t->merge_text + at, merges[r].ptr, len);
        at += (uint32_t)len;
        if (len > t->max_merge_len) t->max_merge_len = (uint32_t)len;
        /* A merge without a space can never match a pair (llama.cpp files it under an empty pair),
           so it is simply stored; a repeated merge keeps its first (lowest) rank. */
        uint32_t slot = (uint32_t)hash_bytes(HASH_SEED, text, len) & t->merge_mask;
        bool duplicate = false;
        for (; t->merge_slots[slot] >= 0; slot = (slot + 1) & t->merge_mask) {
            int other = t->merge_slots[slot];
            size_t other_len = t->merge_offset[other + 1] - t->merge_offset[other];
            if (other_len == len && memcmp(t->merge_text + t->merge_offset[other], text, len) == 0) {
                duplicate = true;
                break;
            }
        }
        if (!duplicate) t->merge_slots[slot] = r;
    }
    t->merge_offset[n_merges] = at;
    return NULL;
}

typedef struct { uint32_t len; int id; } SpecialEntry;

/* Longest text first, as llama.cpp sorts its special-token cache; equal lengths by id. */
static int compare_specials(const void *a, const void *b) {
    const SpecialEntry *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static const char *collect_specials(Tokenizer *t) {
    int n = 0;
    for (int i = 0; i < t->n_vocab; i++)
        if (t->token_flags[i] & (TOKEN_FLAG_CONTROL | TOKEN_FLAG_USER_DEFINED)) n++;
    SpecialEntry *entries = malloc((size_t)(n ? n : 1) * sizeof(SpecialEntry));
    t->specials = malloc((size_t)(n ? n : 1) * sizeof(int));
    if (!entries || !t->specials) { free(entries); return "out of memory"; }
    n = 0;
    for (int i = 0; i < t->n_vocab; i++) {
        if (!(t->token_flags[i] & (TOKEN_FLAG_CONTROL | TOKEN_FLAG_USER_DEFINED))) continue;
        entries[n].len = t->token_offset[i + 1] - t->token_offset[i];
        entries[n].id = i;
        n++;
    }
    qsort(entries, (size_t)n, sizeof(SpecialEntry), compare_specials);
    for (int i = 0; i < n; i++) t->specials[i] = entries[i].id;
    t->n_specials = n;
    free(entries);
    return NULL;
}

static void tokenizer_free(Tokenizer *t) {
    free(t->token_text);
    free(t->token_offset);
    free(t->token_flags);
    free(t->token_slots);
    free(t->merge_text);
    free(t->merge_offset);
    free(t->merge_slots);
    free(t->specials);
    memset(t, 0, sizeof(*t));
}

static const char *tokenizer_init(Tokenizer *t, int n_vocab, const GGUFString *tokens, const int32_t *types,
                           int n_merges, const GGUFString *merges) {
    memset(t, 0, sizeof(*t));
    if (n_merges < 0) return "tokenizer: negative merge count";
    t->n_vocab = n_vocab;
    init_byte_map(t);
    const char *err = load_tokens(t, n_vocab, tokens, types);
    if (!err) err = load_merges(t, n_merges, merges);
    if (!err) err = collect_specials(t);
    if (err) tokenizer_free(t);
    return err;
}

/* ---- growable arrays used while encoding ------------------------------------------------------ */

typedef struct { int *ids; size_t n, cap; } IdList;

static bool id_list_push(IdList *l, int id) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        int *ids = realloc(l->ids, cap * sizeof(int));
        if (!ids) return false;
        l->ids = ids;
        l->cap = cap;
    }
    l->ids[l->n++] = id;
    return true;
}

/* ---- step 1: split at special tokens ---------------------------------------------------------- */

/* A stretch of the input: raw text (token < 0) or one special token. */
typedef struct { size_t start, len; int token; } Segment;

typedef struct { Segment *items; size_t n, cap; } SegmentList;

static bool segment_push(SegmentList *l, size_t start, size_t len, int token) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        Segment *items = realloc(l->items, cap * sizeof(Segment));
        if (!items) return false;
        l->items = items;
        l->cap = cap;
    }
    l->items[l->n++] = (Segment){start, len, token};
    return true;
}

/* Cut every raw segment of `in` at the occurrences of one special token (left to right, not
   overlapping), appending the result to `out`. */
static bool split_at_token(const char *text, const SegmentList *in, const char *tok, size_t tok_len, int id,
                           SegmentList *out) {
    out->n = 0;
    for (size_t i = 0; i < in->n; i++) {
        Segment s = in->items[i];
        if (s.token >= 0) {
            if (!segment_push(out, s.start, s.len, s.token)) return false;
            continue;
        }
        size_t pos = s.start, end = s.start + s.len;
        while (pos < end) {
            const char *hit = memmem(text + pos, end - pos, tok, tok_len);
            if (!hit) break;
            size_t at = (size_t)(hit - text);
            if (at > pos && !segment_push(out, pos, at - pos, -1)) return false;
            if (!segment_push(out, at, tok_len, id)) return false;
            pos = at + tok_len;
        }
        if (pos < end && !segment_push(out, pos, end - pos, -1)) return false;
    }
    return true;
}

/* llama.cpp's tokenizer_st_partition: take the special tokens one at a time, longest first, and split
   the still-raw text at each. So a longer token wins over a shorter one inside it, and an earlier
   match of a longer token wins over an overlapping later one. No spaces are stripped around them
   (llama.cpp sets lstrip/rstrip only for a few other model families). */
static bool split_special(const Tokenizer *t, const char *text, size_t len, bool parse_special,
                          SegmentList *segs) {
    SegmentList other = {0};
    segs->n = 0;
    if (len > 0 && !segment_push(segs, 0, len, -1)) return false;
    for (int k = 0; k < t->n_specials; k++) {
        int id = t->specials[k];
        if (!parse_special && (t->token_flags[id] & TOKEN_FLAG_CONTROL)) continue;
        size_t tok_len;
        const char *tok = token_text_of(t, id, &tok_len);
        if (!split_at_token(text, segs, tok, tok_len, id, &other)) { free(other.items); return false; }
        SegmentList swap = *segs;
        *segs = other;
        other = swap;
    }
    free(other.items);
    return true;
}

/* ---- step 2: the qwen35 pre-tokenizer --------------------------------------------------------- */

static CharClass class_at(const uint32_t *cp, size_t n, size_t pos) {
    return pos < n ? char_class(cp[pos]) : CHAR_NONE;
}

static uint32_t ascii_lower(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

/* End of the piece that starts at pos, following llama.cpp's unicode_regex_split_custom_qwen35, which
   implements the regex
     (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}
     | ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
   The first rule that applies wins. */
static size_t pretokenize_next(const uint32_t *cp, size_t n, size_t pos) {
    uint32_t c = cp[pos];
    CharClass cls = char_class(c);

    /* contractions: 's 't 'm 'd 're 've 'll, any case (only ASCII letters lowercase to these) */
    if (c == '\'' && pos + 1 < n) {
        uint32_t c1 = ascii_lower(cp[pos + 1]);
        if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return pos + 2;
        if (pos + 2 < n) {
            uint32_t c2 = ascii_lower(cp[pos + 2]);
            if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return pos + 3;
        }
    }

    /* a word: letters/marks, optionally led by one character that is not \r, \n or a number */
    if (!(c == '\r' || c == '\n' || cls == CHAR_NUMBER)) {
        if (cls == CHAR_LETTER || class_at(cp, n, pos + 1) == CHAR_LETTER) {
            pos++;
            while (class_at(cp, n, pos) == CHAR_LETTER) pos++;
            return pos;
        }
    }

    /* numbers are single digits */
    if (cls == CHAR_NUMBER) return pos + 1;

    /* punctuation/symbol run, optionally led by a space, with trailing newlines. A lone space at the
       very end also lands here (the class after it is CHAR_NONE), as in llama.cpp. */
    CharClass next = (c == ' ') ? class_at(cp, n, pos + 1) : cls;
    if (next == CHAR_OTHER || next == CHAR_NONE) {
        if (c == ' ') pos++;
        while (class_at(cp, n, pos) == CHAR_OTHER) pos++;
        while (pos < n && (cp[pos] == '\r' || cp[pos] == '\n')) pos++;
        return pos;
    }

    /* white space */
    size_t run = 0, after_last_newline = 0;
    while (class_at(cp, n, pos + run) == CHAR_SPACE) {
        if (cp[pos + run] == '\r' || cp[pos + run] == '\n') after_last_newline = pos + run + 1;
        run++;
    }
    if (after_last_newline > 0) return after_last_newline;       /* \s*[\r\n]+ */
    if (run > 1 && pos + run < n) return pos + run - 1;          /* \s+(?!\S): leave one for the next word */
    if (run > 0) return pos + run;                               /* \s+ */
    return pos + 1;
}

/* ---- step 3 and 4: byte map and BPE ----------------------------------------------------------- */

/* One symbol of the piece being merged: a span of the byte-mapped piece, in a doubly linked list. */
typedef struct { int start, len, prev, next; } Symbol;

/* A candidate merge of symbols left and right; size is their combined length when it was queued,
   so a candidate whose symbols have changed since is recognised and dropped. */
typedef struct { int rank, left, right, size; } Bigram;

/* Scratch space reused across pieces; grown to fit the largest piece. */
typedef struct {
    uint32_t *cps;            /* codepoints of the current fragment */
    size_t cps_cap;
    unsigned char *utf8;      /* a piece re-encoded as UTF-8 */
    char *mapped;             /* the piece through the byte map */
    Symbol *symbols;
    Bigram *heap;
    size_t piece_cap;         /* utf8/symbols hold piece_cap, mapped 2x, heap 3x */
} Workspace;

static void workspace_free(Workspace *w) {
    free(w->cps);
    free(w->utf8);
    free(w->mapped);
    free(w->symbols);
    free(w->heap);
}

static bool workspace_reserve_piece(Workspace *w, size_t nbytes) {
    if (nbytes <= w->piece_cap) return true;
    size_t cap = nbytes < 256 ? 256 : nbytes;
    free(w->utf8); free(w->mapped); free(w->symbols); free(w->heap);
    w->utf8 = malloc(cap);
    w->mapped = malloc(2 * cap);
    w->symbols = malloc(cap * sizeof(Symbol));
    w->heap = malloc(3 * cap * sizeof(Bigram));  /* n-1 initial pairs + at most 2 per merge */
    w->piece_cap = (w->utf8 && w->mapped && w->symbols && w->heap) ? cap : 0;
    return w->piece_cap != 0;
}

/* Min-heap order: lower rank first, then the leftmost pair, like llama.cpp's llm_bigram_bpe queue. */
static bool bigram_before(const Bigram *a, const Bigram *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static void heap_push(Bigram *heap, int *n, Bigram b) {
    int i = (*n)++;
    while (i > 0) {
        int parent = (i - 1) / 2;
        if (!bigram_before(&b, &heap[parent])) break;
        heap[i] = heap[parent];
        i = parent;
    }
    heap[i] = b;
}

static Bigram heap_pop(Bigram *heap, int *n) {
    Bigram top = heap[0];
    Bigram last = heap[--(*n)];
    int i = 0;
    for (;;) {
        int child = 2 * i + 1;
        if (child >= *n) break;
        if (child + 1 < *n && bigram_before(&heap[child + 1], &heap[child])) child++;
        if (!bigram_before(&heap[child], &last)) break;
        heap[i] = heap[child];
        i = child;
    }
    if (*n > 0) heap[i] = last;
    return top;
}

/* Queue the merge of symbols left and right if the merges list has it. */
static void queue_pair(const Tokenizer *t, const char *mapped, const Symbol *sym, Bigram *heap, int *n,
                       int left, int right) {
    if (left < 0 || right < 0) return;
    const Symbol *l = &sym[left], *r = &sym[right];
    int rank = find_merge_rank(t, mapped + l->start, (size_t)l->len, mapped + r->start, (size_t)r->len);
    if (rank >= 0) heap_push(heap, n, (Bigram){rank, left, right, l->len + r->len});
}

/* Emit the tokens of one symbol. A symbol missing from the vocabulary falls back, like llama.cpp, to
   looking up each byte of its mapped text as a one-byte token, skipping bytes that have none. */
static bool emit_symbol(const Tokenizer *t, const char *s, size_t n, IdList *out) {
    int id = find_token_span(t, s, n);
    if (id >= 0) return id_list_push(out, id);
    for (size_t i = 0; i < n; i++) {
        int byte_id = find_token_span(t, s + i, 1);
        if (byte_id >= 0 && !id_list_push(out, byte_id)) return false;
    }
    return true;
}

/* Byte-map and BPE-merge one piece (UTF-8 bytes), appending its token ids. */
static bool bpe_piece(const Tokenizer *t, Workspace *w, const unsigned char *bytes, size_t nbytes, IdList *out) {
    /* Each byte becomes one initial symbol: the UTF-8 of its stand-in character. */
    Symbol *sym = w->symbols;
    int nsym = (int)nbytes, at = 0;
    for (int i = 0; i < nsym; i++) {
        unsigned char b = bytes[i];
        memcpy(w->mapped + at, t->byte_char[b], t->byte_char_len[b]);
        sym[i] = (Symbol){at, t->byte_char_len[b], i - 1, i + 1 < nsym ? i + 1 : -1};
        at += t->byte_char_len[b];
    }

    int nheap = 0;
    for (int i = 0; i + 1 < nsym; i++) queue_pair(t, w->mapped, sym, w->heap, &nheap, i, i + 1);

    while (nheap > 0) {
        Bigram b = heap_pop(w->heap, &nheap);
        Symbol *l = &sym[b.left], *r = &sym[b.right];
        if (l->len == 0 || r->len == 0 || l->len + r->len != b.size) continue;  /* stale */
        l->len += r->len;  /* merge right into left: right's span follows left's */
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = b.left;
        queue_pair(t, w->mapped, sym, w->heap, &nheap, l->prev, b.left);
        queue_pair(t, w->mapped, sym, w->heap, &nheap, b.left, l->next);
    }

    for (int i = 0; i >= 0 && i < nsym; i = sym[i].next)
        if (!emit_symbol(t, w->mapped + sym[i].start, (size_t)sym[i].len, out)) return false;
    return true;
}

/* Tokenize one fragment of raw text (no special tokens in it). Invalid UTF-8 is read as U+FFFD, and each
   piece is re-encoded from its codepoints before BPE, exactly as llama.cpp does: so an invalid byte is
   tokenized as the three bytes of U+FFFD. */
static bool encode_fragment(const Tokenizer *t, Workspace *w, const unsigned char *s, size_t len, IdList *out) {
    if (len > w->cps_cap) {
        free(w->cps);
        w->cps = malloc(len * sizeof(uint32_t));
        w->cps_cap = w->cps ? len : 0;
        if (!w->cps) return false;
    }
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        size_t used;
        w->cps[n++] = utf8_decode_lenient(s + i, len - i, &used);
        i += used;
    }
    for (size_t pos = 0; pos < n;) {
        size_t end = pretokenize_next(w->cps, n, pos);
        if (end - pos > (size_t)INT32_MAX / 16) return false;  /* symbol indices are ints */
        if (!workspace_reserve_piece(w, 4 * (end - pos))) return false;
        size_t nbytes = 0;
        for (size_t i = pos; i < end; i++) nbytes += (size_t)utf8_encode(w->cps[i], w->utf8 + nbytes);
        if (!bpe_piece(t, w, w->utf8, nbytes, out)) return false;
        pos = end;
    }
    return true;
}

static int *tokenizer_encode(const Tokenizer *t, const char *text, size_t len, bool parse_special, int *n) {
    *n = 0;
    SegmentList segs = {0};
    Workspace w = {0};
    IdList out = {0};
    bool ok = split_special(t, text, len, parse_special, &segs);
    for (size_t i = 0; ok && i < segs.n; i++) {
        Segment s = segs.items[i];
        if (s.token >= 0) ok = id_list_push(&out, s.token);
        else ok = encode_fragment(t, &w, (const unsigned char *)text + s.start, s.len, &out);
    }
    if (ok && out.n > (size_t)INT32_MAX) ok = false;
    if (ok && !out.ids) ok = (out.ids = malloc(sizeof(int))) != NULL;  /* empty result: still not NULL */
    free(segs.items);
    workspace_free(&w);
    if (!ok) { free(out.ids); return NULL; }
    *n = (int)out.n;
    return out.ids;
}

/* ---- decoding --------------------------------------------------------------------------------- */

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

static int tokenizer_decode(const Tokenizer *t, int id, char *out, int cap) {
    if (id < 0 || id >= t->n_vocab || cap < 0) return -1;
    size_t len;
    const char *s = token_text_of(t, id, &len);
    uint8_t flags = t->token_flags[id];
    if ((flags & TOKEN_FLAG_BYTE) && len == 6 && memcmp(s, "<0x", 3) == 0 && s[5] == '>' &&
        hex_digit(s[3]) >= 0 && hex_digit(s[4]) >= 0) {
        if (cap < 1) return 0;
        out[0] = (char)(hex_digit(s[3]) * 16 + hex_digit(s[4]));
        return 1;
    }
    if (flags & TOKEN_FLAG_VERBATIM) {
        size_t n = len < (size_t)cap ? len : (size_t)cap;
        memcpy(out, s, n);
        return (int)n;
    }
    /* Normal token: each character stands for one byte. A character outside the byte map (not
       produced by GPT-2 byte-level vocabularies) is copied through as it is. */
    int n = 0;
    for (size_t i = 0; i < len;) {
        size_t used;
        uint32_t cp = utf8_decode_lenient((const unsigned char *)s + i, len - i, &used);
        if (cp < 0x144 && t->char_byte[cp] >= 0 && used == (size_t)(cp < 0x80 ? 1 : 2)) {
            if (n >= cap) break;
            out[n++] = (char)t->char_byte[cp];
        } else {
            if (n + (int)used > cap) break;
            memcpy(out + n, s + i, used);
            n += (int)used;
        }
        i += used;
    }
    return n;
}

/* ---- streaming UTF-8 output ------------------------------------------------------------------- */

typedef struct { unsigned char pending[4]; int n; } Utf8Stream;

static void write_replacement(FILE *out) { fputs("\xEF\xBF\xBD", out); }

/* Length of the sequence a lead byte starts (strict UTF-8), or 0 if it cannot start one. */
static int utf8_sequence_length(unsigned char c) {
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return 2;
    if (c >= 0xE0 && c <= 0xEF) return 3;
    if (c >= 0xF0 && c <= 0xF4) return 4;
    return 0;
}

/* Whether c may follow the bytes already pending: this rules out overlong forms, surrogates and
   values above U+10FFFF as early as their second byte. */
static bool utf8_continues(const unsigned char *pending, int n, unsigned char c) {
    if (!is_continuation(c)) return false;
    if (n == 1) {
        switch (pending[0]) {
        case 0xE0: return c >= 0xA0;
        case 0xED: return c <= 0x9F;
        case 0xF0: return c >= 0x90;
        case 0xF4: return c <= 0x8F;
        default: return true;
        }
    }
    return true;
}

static void utf8_stream_byte(Utf8Stream *s, unsigned char c, FILE *out) {
    if (s->n > 0) {
        if (utf8_continues(s->pending, s->n, c)) {
            s->pending[s->n++] = c;
            if (s->n == utf8_sequence_length(s->pending[0])) {
                fwrite(s->pending, 1, (size_t)s->n, out);
                s->n = 0;
            }
            return;
        }
        /* the pending sequence is broken: one U+FFFD for it, then c starts afresh */
        write_replacement(out);
        s->n = 0;
    }
    int need = utf8_sequence_length(c);
    if (need == 1) fputc(c, out);
    else if (need == 0) write_replacement(out);
    else s->pending[s->n++] = c;
}

static void utf8_stream_write(Utf8Stream *s, const char *bytes, int n, FILE *out) {
    for (int i = 0; i < n; i++) utf8_stream_byte(s, (unsigned char)bytes[i], out);
}

static void utf8_stream_flush(Utf8Stream *s, FILE *out) {
    if (s->n > 0) write_replacement(out);
    s->n = 0;
}
/* end of tokenizer */

/* ---- printing tokens -------------------------------------------------------------------------- */
/* Stream tokens to stdout: their raw bytes, as llama.cpp's examples print them (so the output can be
 * diffed with upstream's byte for byte), or with --utf8-replace as whole UTF-8 characters, each
 * invalid sequence one U+FFFD (for a terminal). */
struct Printer { const Tokenizer *tok; bool utf8_replace; Utf8Stream utf8; };

static void print_token(Printer *pr, int id) {
    char buf[512];
    int n = tokenizer_decode(pr->tok, id, buf, sizeof buf);
    if (n > 0 && pr->utf8_replace) utf8_stream_write(&pr->utf8, buf, n, stdout);
    else if (n > 0) fwrite(buf, 1, (size_t)n, stdout);
    fflush(stdout);
}

/* Print a token, coloured when it came from an accepted draft (--color on). */
static void print_colored(Printer *pr, int id, bool drafted, bool color) {
    bool paint = color && drafted && pr->utf8.n == 0;
    if (paint) fputs("\033[32m", stdout);
    print_token(pr, id);
    if (paint) fputs("\033[0m", stdout);
}

/* ============================================================================================== */
/* 14. Sampler                                                                                    */
/* ============================================================================================== */
/* Greedy when --temp <= 0 or --top-k 1 (argmax, ties to the lowest id, as llama.cpp). Otherwise,
 * in llama.cpp's order: keep the top-k logits, keep the smallest set whose probability reaches
 * top-p, then sample from softmax(logits / temp) with a seeded generator (deterministic). */
struct Sampler {
    float temp, top_p;
    int top_k;
    uint64_t rng;
    int *idx;      /* [n_vocab] candidate ids */
    float *p;      /* [n_vocab] candidate probabilities */
};

static int argmax(const float *x, int n) {
    int best = 0;
    float m = x[0];   /* x[best] in a register: a reload a step would chain every compare to the last */
    for (int i = 1; i < n; i++)
        if (x[i] > m) m = x[i], best = i;
    return best;
}

static bool sampler_greedy(const Sampler *s) { return s->temp <= 0 || s->top_k == 1; }

/* xorshift64*: a small, well-mixed generator; uniform in [0, 1). */
static float random_uniform(uint64_t *state) {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    return (float)((*state * 0x2545F4914F6CDD1DULL) >> 40) / 16777216.0f;
}

static const float *sort_logits;
/* a logit as the sort ranks it: NaN (hostile weights) as -inf, so it sorts last and qsort gets a
 * consistent order */
static float logit_rank(float x) { return isnan(x) ? -INFINITY : x; }

static int cmp_by_logit(const void *a, const void *b) {
    float x = logit_rank(sort_logits[*(const int *)a]), y = logit_rank(sort_logits[*(const int *)b]);
    if (x != y) return x > y ? -1 : 1;
    return *(const int *)a - *(const int *)b;
}

/* The k first ids of the whole sort by cmp_by_logit, in that order, without sorting the whole
 * vocabulary (a 248,320-id sort is ~30 ms a token, as long as a decode step of the real model):
 * a heap of the k best ids seen so far, the one that sorts last at its root; id i, larger than
 * every id in the heap, enters only if its logit (NaN as -inf) exceeds the root's, since on a tie
 * the lower id sorts first. Then the k are sorted (k = n: the whole sort, the heap a formality). */
static void heap_sift_down(int *h, int k, int j) {
    for (;;) {
        int c = 2 * j + 1;
        if (c >= k) return;
        if (c + 1 < k && cmp_by_logit(&h[c + 1], &h[c]) > 0) c++;
        if (cmp_by_logit(&h[c], &h[j]) <= 0) return;
        int t = h[c];
        h[c] = h[j], h[j] = t, j = c;
    }
}

static void top_k_ids(const float *logits, int n, int k, int *idx) {
    sort_logits = logits;
    for (int i = 0; i < k; i++) idx[i] = i;
    for (int j = k / 2 - 1; j >= 0; j--) heap_sift_down(idx, k, j);
    float worst = logit_rank(logits[idx[0]]);
    for (int i = k; i < n; i++)
        if (logits[i] > worst) {
            idx[0] = i;
            heap_sift_down(idx, k, 0);
            worst = logit_rank(logits[idx[0]]);
        }
    qsort(idx, (size_t)k, sizeof(int), cmp_by_logit);
}

static int sample(Sampler *s, const float *logits, int n_vocab) {
    if (sampler_greedy(s)) return argmax(logits, n_vocab);
    int n = s->top_k > 0 && s->top_k < n_vocab ? s->top_k : n_vocab;
    top_k_ids(logits, n_vocab, n, s->idx);
    /* top-p over the probabilities at temperature 1 */
    double sum = 0, cum = 0;
    for (int i = 0; i < n; i++) sum += exp((double)logits[s->idx[i]] - logits[s->idx[0]]);
    for (int i = 0; i < n; i++) {
        cum += exp((double)logits[s->idx[i]] - logits[s->idx[0]]) / sum;
        if (cum >= s->top_p) { n = i + 1; break; }
    }
    for (int i = 0; i < n; i++) s->p[i] = logits[s->idx[i]] / s->temp;
    softmax(s->p, n);
    float u = random_uniform(&s->rng), acc = 0;
    for (int i = 0; i < n; i++) {
        acc += s->p[i];
        if (u < acc) return s->idx[i];
    }
    return s->idx[n - 1];
}

/* ============================================================================================== */
/* 15. The GPU side: clover.cu's interface                                                        */
/* ============================================================================================== */
/* --- The GPU side (clover.cu), called through these functions only ------------------------------
 * gpu_init finds the device; gpu_load uploads the model (GpuModel: every tensor as stored, by the
 * field names of Config / Layer / Model) after planning the device memory; gpu_forward runs a
 * causal or preview pass; gpu_gdn_save and gpu_rollback are draft-self's save and replay of the GDN
 * state; gpu_check_ops runs every GPU kernel against its CPU twin, handed over in GpuCheck with the
 * model's shapes and matrices. clover.cu declares the same structs (their `size` is checked). */
typedef struct { uint32_t type; int64_t n_in, n_out; const void *data; } GpuMat;
typedef struct {
    int n_embd, n_layer, n_vocab;
    int n_head, n_head_kv, head_dim, n_rot;
    float eps, rope_base, kq_scale;
    int n_expert, n_expert_used, n_ff, n_ff_shexp;
    float expert_weights_scale;
    int d_conv, n_k_heads, n_v_heads, d_state, key_dim, value_dim, conv_dim;
    float coreset_top_p;
} GpuConfig;
typedef struct {
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
} GpuLayer;
/* dump: the --dump-tensors writer (gpu_dump; NULL: no dumps), given host copies of the values */
typedef void (*GpuDumpFn)(void *arg, const char *name, int il, const void *x, bool i32, int rows, int ne2, int ne1, int ne0);
typedef struct {
    size_t size;
    GpuConfig c;
    GpuMat output;
    const float *output_norm;
    const GpuLayer *layers;
    GpuDumpFn dump;
    void *dump_arg;
} GpuModel;
typedef struct {
    size_t size;
    void (*quantize_row)(uint32_t wtype, const float *x, void *y, int64_t n);
    float (*dot)(uint32_t wtype, int64_t n_rows, const void *w, const void *a, int64_t n);   /* row order */
    void (*rmsnorm)(float *y, const float *x, const float *w, int n, float eps);
    void (*l2norm)(float *x, int n, float eps);
    void (*softmax)(float *x, int n);
    void (*silu_row)(float *y, const float *x, int n);
    int (*argmax)(const float *x, int n);
    int (*best_token)(const float *z, int V, int skip, float *p, float *H);
    /* GDN twins (clover.cu section 8) */
    void (*gdn_gates)(const float *a, const float *dt, const float *alpha, const float *beta_logit, int T, int H, float *g, float *beta);
    void (*gdn_conv)(const float *wc, int K, int C, const float *ring, const float *u, int T, int ch0, int ch1, float *y);
    void (*gdn_conv_right)(const float *wr, int K, int C, const float *u, int T, int ch0, int ch1, float *y);
    void (*gdn_qk_norm)(float *y, int C, int d, int n_qk, float eps);   /* one row */
    void (*gdn_ring_push)(float *ring, const float *u, int T, int K, int C);
    void (*gdn_scan_head)(float *S, const float *y, const float *g, const float *beta, float *o, int T, bool reverse,
                          int H, int n_k_heads, int d, int C, int key_dim, int value_dim, int h);
    void (*gdn_rev_mix)(float *o, const float *o_rev, const float *gamma, int T, int H, int d);
    void (*gdn_gated_norm)(const float *o, const float *z, const float *w, int H, int d, float eps, float *y);   /* one row */
    int n_k_heads, n_v_heads, d_conv, conv_dim, key_dim, value_dim;
    /* attention and MoE twins (clover.cu sections 9, 10), and their shapes; up/down_exps: layer 0's stacked experts */
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
} GpuCheck;

#ifdef CLOVER_CUDA
bool gpu_init(char *info, size_t n);
int gpu_check_ops(const GpuCheck *c);
Gpu *gpu_load(const GpuModel *m, int n_ctx, int cap, uint32_t k_type, uint32_t v_type);
void gpu_forward(Gpu *gpu, bool preview, const float *x, int T, int n_past, bool log, float *logits, int first, int n_logits,
                 int *token, int skip, float *p_H);
#endif

/* the single-row dot product of a matrix of n_rows rows (the CPU's matmul for one row) */
static float dot_row_order(uint32_t wtype, int64_t n_rows, const void *w, const void *a, int64_t n) {
    return dot_fn(wtype, false, n_rows)(w, a, n);
}

static GpuMat gpu_mat(const Mat *w) { return (GpuMat){w->type, w->n_in, w->n_out, w->data}; }

/* --check-ops: the model's matrices (expert 0 of stacked ones) and shapes to clover.cu; exit 1 if a
 * kernel differs from its CPU twin beyond its limit. */
static void check_ops(const Model *m) {
    size_t n_names = sizeof TENSOR_NAMES / sizeof TENSOR_NAMES[0];
    GpuMat *mats = xcalloc(2 + (size_t)m->c.n_layer * n_names, sizeof *mats);
    int n = 0;
    const Mat *top[] = {&m->tok_embd, &m->output};
    for (int i = 0; i < 2; i++)
        if (top[i]->data) mats[n++] = (GpuMat){top[i]->type, top[i]->n_in, top[i]->n_out, top[i]->data};
    for (int il = 0; il < m->c.n_layer; il++)
        for (size_t k = 0; k < n_names; k++) {
            const TensorName *tn = &TENSOR_NAMES[k];
            if (tn->kind != AS_MAT || tn->where == IN_MODEL) continue;
            const Mat *w = (const Mat *)((const char *)&m->layers[il] + tn->field);
            if (w->data) mats[n++] = (GpuMat){w->type, w->n_in, w->n_out, w->data};
        }
    const Config *c = &m->c;
    GpuCheck g = {.size = sizeof g, .quantize_row = quantize_row, .dot = dot_row_order, .rmsnorm = rmsnorm, .l2norm = l2norm,
                  .softmax = softmax, .silu_row = silu_row, .argmax = argmax, .best_token = best_token,
                  /* GDN twins (clover.cu section 8) */
                  .gdn_gates = gdn_gates, .gdn_conv = kernels()->gdn_conv, .gdn_conv_right = gdn_conv_right,
                  .gdn_qk_norm = gdn_qk_norm, .gdn_ring_push = gdn_ring_push, .gdn_scan_head = gdn_scan_head,
                  .gdn_rev_mix = gdn_rev_mix, .gdn_gated_norm = gdn_gated_norm, .n_k_heads = c->n_k_heads,
                  .n_v_heads = c->n_v_heads, .d_conv = c->d_conv, .conv_dim = c->conv_dim, .key_dim = c->key_dim,
                  .value_dim = c->value_dim,
                  /* attention and MoE twins (clover.cu sections 9, 10) */
                  .attn_qk_norm = attn_qk_norm, .attn_rope = attn_rope, .store_as = store_as, .attend = attend,
                  .route_top_k = route_top_k, .coreset = coreset, .swiglu = swiglu, .moe_sum = moe_sum,
                  .moe_shared_gate = moe_shared_gate, .n_head_kv = c->n_head_kv, .n_expert_used = c->n_expert_used,
                  .kq_scale = c->kq_scale, .coreset_top_p = c->coreset_top_p, .expert_weights_scale = c->expert_weights_scale,
                  .up_exps = gpu_mat(&m->layers[0].up_exps), .down_exps = gpu_mat(&m->layers[0].down_exps),
                  .gate_exps = gpu_mat(&m->layers[0].gate_exps),
                  .n_embd = c->n_embd, .n_head = c->n_head, .head_dim = c->head_dim, .n_rot = c->n_rot,
                  .n_expert = c->n_expert, .n_ff = c->n_ff, .n_vocab = c->n_vocab, .d_state = c->d_state,
                  .eps = c->eps, .rope_base = c->rope_base, .n_mats = n, .mats = mats};
#ifdef CLOVER_CUDA
    exit(gpu_check_ops(&g) ? 1 : 0);
#else
    (void)g;
    fatal("--check-ops compares the GPU kernels with the CPU, and this is the CPU build (make cuda builds clover-cuda, make cuda-emu build/clover-emu)");
#endif
}

#ifdef CLOVER_CUDA

/* The model as gpu_load takes it: pointers into the mapped file (layers: n_layer of them). */
static GpuModel gpu_model(const Model *m, GpuLayer *layers) {
    const Config *c = &m->c;
    for (int il = 0; il < c->n_layer; il++) {
        const Layer *L = &m->layers[il];
        layers[il] = (GpuLayer){
            .recurrent = L->recurrent, .attn_norm = L->attn_norm, .post_norm = L->post_norm,
            .qkv = gpu_mat(&L->qkv), .gate = gpu_mat(&L->gate), .beta = gpu_mat(&L->beta), .alpha = gpu_mat(&L->alpha),
            .ssm_out = gpu_mat(&L->ssm_out), .conv = L->conv, .dt = L->dt, .a = L->a, .ssm_norm = L->ssm_norm,
            .conv_right = L->conv_right, .a_rev = L->a_rev, .dt_rev = L->dt_rev, .rev_mix = L->rev_mix,
            .alpha_rev = gpu_mat(&L->alpha_rev), .beta_rev = gpu_mat(&L->beta_rev),
            .wq = gpu_mat(&L->wq), .wk = gpu_mat(&L->wk), .wv = gpu_mat(&L->wv), .wo = gpu_mat(&L->wo),
            .q_norm = L->q_norm, .k_norm = L->k_norm,
            .router = gpu_mat(&L->router), .gate_exps = gpu_mat(&L->gate_exps), .up_exps = gpu_mat(&L->up_exps),
            .down_exps = gpu_mat(&L->down_exps), .gate_shexp = gpu_mat(&L->gate_shexp), .up_shexp = gpu_mat(&L->up_shexp),
            .down_shexp = gpu_mat(&L->down_shexp), .shexp_gate = L->shexp_gate};
    }
    GpuConfig g = {.n_embd = c->n_embd, .n_layer = c->n_layer, .n_vocab = c->n_vocab, .n_head = c->n_head, .n_head_kv = c->n_head_kv,
                   .head_dim = c->head_dim, .n_rot = c->n_rot, .eps = c->eps, .rope_base = c->rope_base, .kq_scale = c->kq_scale,
                   .n_expert = c->n_expert, .n_expert_used = c->n_expert_used, .n_ff = c->n_ff, .n_ff_shexp = c->n_ff_shexp,
                   .expert_weights_scale = c->expert_weights_scale, .d_conv = c->d_conv, .n_k_heads = c->n_k_heads,
                   .n_v_heads = c->n_v_heads, .d_state = c->d_state, .key_dim = c->key_dim, .value_dim = c->value_dim,
                   .conv_dim = c->conv_dim, .coreset_top_p = c->coreset_top_p};
    return (GpuModel){sizeof(GpuModel), g, gpu_mat(&m->output), m->output_norm, layers, NULL, NULL};
}

/* --dump-tensors on the GPU: clover.cu hands over its dump points' values, written as the CPU's */
static void gpu_dump(void *arg, const char *name, int il, const void *x, bool i32, int rows, int ne2, int ne1, int ne0) {
    dump_nd(arg, name, il, x, i32, rows, ne2, ne1, ne0);
}

static void gpu_pass(Ctx *ctx, Pass pass, const int *tokens, int T, bool log, float *logits, int first, int n_logits, int *token,
                     float *p_H) {
    int E = ctx->m->c.n_embd;
    for (int t = 0; t < T; t++) embed(ctx->m, tokens[t], ctx->sc.x + (size_t)t * E);
    ctx->dump_preview = pass == PREVIEW;
    dump(ctx, "model.input_embed", -1, ctx->sc.x, T, E);
    gpu_forward(ctx->gpu, pass == PREVIEW, ctx->sc.x, T, ctx->st.n_past, log, logits, first, n_logits, token, ctx->m->c.mask_id, p_H);
}

/* -ngl N: the whole model on the GPU when N is at least the layer count (or -1), the CPU for 0; a
 * split between the two is not supported. On the GPU the device holds the state and scratch, and
 * the host keeps only n_past / n_ctx and the rows of embeddings it looks up. Returns whether the
 * GPU runs the model. */
static bool gpu_setup(Ctx *ctx, Model *m, const Args *a, int n_ctx, int cap) {
    const Config *c = &m->c;
    if (a->n_gpu_layers == 0) return false;
    if (a->n_gpu_layers > 0 && a->n_gpu_layers < c->n_layer)
        fatal("-ngl %d: splitting the %d layers between GPU and CPU is not supported; use -ngl %d (all on the GPU) or -ngl 0 (the CPU)",
              a->n_gpu_layers, c->n_layer, c->n_layer);
    char info[256];
    if (!gpu_init(info, sizeof info)) fatal("-ngl %d asks for the GPU but %s; use -ngl 0 to run on the CPU", a->n_gpu_layers, info);
    if (a->test_check_state) fatal("--test-check-state compares the CPU's state; it does not work with -ngl (use -ngl 0)");
    fprintf(stderr, "clover: GPU %s: all %d layers on the GPU\n", info, c->n_layer);
    ctx->st = (State){.n_ctx = n_ctx, .k_type = a->k_type, .v_type = a->v_type};
    ctx->sc = (Scratch){.cap = cap, .x = xmalloc(mul_size(mul_size((size_t)cap, (size_t)c->n_embd, "scratch"), sizeof(float), "scratch"))};
    GpuLayer *layers = xcalloc((size_t)c->n_layer, sizeof(GpuLayer));
    GpuModel gm = gpu_model(m, layers);
    if (ctx->dump_dir) gm.dump = gpu_dump, gm.dump_arg = ctx;
    ctx->gpu = gpu_load(&gm, n_ctx, cap, a->k_type, a->v_type);
    free(layers);
    return true;
}

#else   /* the CPU build: gpu_setup leaves ctx->gpu NULL, so the other three are never reached */
static bool gpu_setup(Ctx *ctx, Model *m, const Args *a, int n_ctx, int cap) {
    (void)ctx, (void)m, (void)n_ctx, (void)cap;
    if (a->n_gpu_layers != 0) fprintf(stderr, "clover: note: -ngl %d has no effect in this CPU build (make cuda builds clover-cuda)\n", a->n_gpu_layers);
    return false;
}
static void gpu_pass(Ctx *ctx, Pass pass, const int *tokens, int T, bool log, float *logits, int first, int n_logits, int *token,
                     float *p_H) {
    (void)ctx, (void)pass, (void)tokens, (void)T, (void)log, (void)logits, (void)first, (void)n_logits, (void)token, (void)p_H;
}
void gpu_gdn_save(Gpu *gpu) { (void)gpu; }
void gpu_rollback(Gpu *gpu, int rows) { (void)gpu, (void)rows; }
#endif

/* ============================================================================================== */
/* 16. The command line, the reports and main                                                     */
/* ============================================================================================== */
static void usage(void) {
    fprintf(stderr,
        "usage: clover -m MODEL.gguf (-p TEXT | -f FILE | --tokens IDS) [options]\n"
        "  -n N                      tokens to predict (-1: until end or context; default -1)\n"
        "  -c N                      context size (0: the model's; default 4096)\n"
        "  -b N, -ub N               logical / physical batch (default 2048 / 512, -ub at most -b); the prompt must fit in -b\n"
        "  -t N, -tb N               threads for decoding / batches (default: the cores online; -tb: -t)\n"
        "  -ctk T, -ctv T            KV cache type: f32, f16, bf16 (default f16)\n"
        "  --temp X --top-k N --top-p X --seed N   sampling: top-k, then top-p, then temperature (default 0.8, 40,\n"
        "                            0.95, seed -1: from the clock, printed); greedy: --temp 0 or --top-k 1\n"
        "  --spec-type none|draft-self   plain causal decoding (default) or self-speculative decoding; draft-self only:\n"
        "  --spec-draft-n-max N      drafts per round (default 16; at most the model's block size - 1)\n"
        "  --spec-draft-n-min N      drop a draft shorter than N (default 0; at most n-max)\n"
        "  --spec-draft-p-min P      cut the draft at the first token with drafter probability < P (default 0)\n"
        "  --spec-draft-steps N      denoising passes per draft (default 1)\n"
        "  --spec-accept-ratio R --spec-accept-delta D   relaxed (lossy) acceptance, both needed, 0 < R < 1, D >= 0\n"
        "                            (default: the exact rule, whose text is plain decoding's)\n"
        "  --spec-draft-adaptive     each round drafts as many tokens (up to n-max) as pay, from measured costs\n"
        "  --diffusion --diffusion-threshold P       native block-diffusion generation (default P 0.9)\n"
        "  --chat                    wrap the prompt in the chat template (thinking on)\n"
        "  --color on|off            mark accepted drafts in the output (default off)\n"
        "  --utf8-replace            print invalid UTF-8 in the output as U+FFFD (default: the tokens' raw bytes)\n"
        "  --trace                   draft-self: print each round (drafts, verifier tokens, why acceptance stopped)\n"
        "  -ngl N                    GPU builds: N >= the layer count (or -1) runs the whole model on the GPU; 0: the CPU\n"
        "  -fa, --flash-attn on|off|auto   attention as llama.cpp's CPU flash attention computes it (default auto: on)\n"
        "  --tokenize                print the prompt's token ids and exit\n"
        "  --check-ops               GPU builds: every GPU kernel vs its CPU twin at the model's shapes, then exit\n"
        "  --dump-logits FILE        write float32 logits of every prompt position and exit\n"
        "  --preview-block IDS       with --dump-logits: logits of one preview pass over IDS after the prompt\n"
        "  --dump-tensors DIR        write every intermediate activation as DIR/<llama.cpp name>.bin (float32;\n"
        "                            ffn_moe_topk int32), listed with shape and meaning in DIR/index.tsv\n"
        "  --dump-filter REGEX       only the names matching REGEX (POSIX extended; preview passes: preview.<name>)\n");
}

/* One line "clover: warning: ..." on stderr: an option that is clamped, ignored or overridden, and
 * what the run uses instead. */
static void warn(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("clover: warning: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static long long parse_int(const char *flag, const char *v, long long lo, long long hi) {
    char *end;
    errno = 0;
    long long x = v ? strtoll(v, &end, 10) : 0;
    if (!v || errno || end == v || *end) fatal("%s needs an integer value, got '%s'; see --help", flag, v ? v : "(nothing)");
    if (x < lo || x > hi) fatal("%s %lld is out of range [%lld, %lld]", flag, x, lo, hi);
    return x;
}

static float parse_float(const char *flag, const char *v, float lo, float hi) {
    char *end;
    errno = 0;
    float x = v ? strtof(v, &end) : 0;
    if (!v || errno || end == v || *end || !(x >= lo && x <= hi))
        fatal("%s needs a number in [%g, %g], got '%s'", flag, lo, hi, v ? v : "(nothing)");
    return x;
}

static bool parse_onoff(const char *flag, const char *v) {
    if (v && (!strcmp(v, "on") || !strcmp(v, "auto") || !strcmp(v, "1"))) return true;
    if (v && (!strcmp(v, "off") || !strcmp(v, "0"))) return false;
    fatal("%s needs on, off or auto, got '%s'", flag, v ? v : "(nothing)");
    return false;
}

/* -fa's values as llama.cpp spells them; auto is on, as llama.cpp's CPU backend resolves it */
static bool parse_flash_attn(const char *flag, const char *v) {
    const char *on[] = {"on", "enabled", "true", "1", "auto", "-1"}, *off[] = {"off", "disabled", "false", "0"};
    for (int i = 0; v && i < 6; i++) if (!strcmp(v, on[i])) return true;
    for (int i = 0; v && i < 4; i++) if (!strcmp(v, off[i])) return false;
    fatal("%s needs on, off or auto, got '%s'", flag, v ? v : "(nothing)");
    return false;
}

static uint32_t parse_cache_type(const char *flag, const char *v) {
    if (v && !strcmp(v, "f32")) return T_F32;
    if (v && !strcmp(v, "f16")) return T_F16;
    if (v && !strcmp(v, "bf16")) return T_BF16;
    fatal("%s '%s' is not supported; use f32, f16 or bf16", flag, v ? v : "(nothing)");
    return 0;
}

static Args parse_args(int argc, char **argv) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    Args a = {.n_predict = -1, .n_ctx = 4096, .n_batch = 2048, .n_ubatch = 0,   /* 0, -1: set by settle_options */
              .n_threads = cores > 0 ? (int)cores : 1, .n_threads_batch = -1, .spec_type = "none",
              .draft_n_max = -1, .draft_n_min = 0, .draft_steps = 1, .draft_p_min = 0,
              .accept_ratio = 0, .accept_delta = -1, .temp = 0.8f, .top_p = 0.95f, .top_k = 40,
              .seed = -1, .k_type = T_F16, .v_type = T_F16, .flash_attn = true, .diffusion_threshold = 0.9f};
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool takes = true;
        if (!strcmp(f, "-h") || !strcmp(f, "--help")) { usage(); exit(0); }
        else if (!strcmp(f, "-m") || !strcmp(f, "--model")) a.model = v;
        else if (!strcmp(f, "-f") || !strcmp(f, "--file")) a.prompt_file = v;
        else if (!strcmp(f, "-p") || !strcmp(f, "--prompt")) a.prompt = v;
        else if (!strcmp(f, "--tokens")) a.tokens = v;
        else if (!strcmp(f, "-n") || !strcmp(f, "--n-predict")) a.n_predict = (int)parse_int(f, v, -1, INT32_MAX);
        else if (!strcmp(f, "-c") || !strcmp(f, "--ctx-size")) a.n_ctx = (int)parse_int(f, v, 0, INT32_MAX);
        else if (!strcmp(f, "-b") || !strcmp(f, "--batch-size")) a.n_batch = (int)parse_int(f, v, 1, 1 << 20);
        else if (!strcmp(f, "-ub") || !strcmp(f, "--ubatch-size")) a.n_ubatch = (int)parse_int(f, v, 1, 1 << 16);
        else if (!strcmp(f, "-t") || !strcmp(f, "--threads")) a.n_threads = (int)parse_int(f, v, 1, 1024);
        else if (!strcmp(f, "-tb") || !strcmp(f, "--threads-batch")) a.n_threads_batch = (int)parse_int(f, v, 1, 1024);
        else if (!strcmp(f, "-ngl") || !strcmp(f, "--n-gpu-layers") || !strcmp(f, "--gpu-layers")) a.n_gpu_layers = (int)parse_int(f, v, -1, INT32_MAX);
        else if (!strcmp(f, "-ctk") || !strcmp(f, "--cache-type-k")) a.k_type = parse_cache_type(f, v);
        else if (!strcmp(f, "-ctv") || !strcmp(f, "--cache-type-v")) a.v_type = parse_cache_type(f, v);
        else if (!strcmp(f, "-fa") || !strcmp(f, "--flash-attn")) a.flash_attn = parse_flash_attn(f, v);
        else if (!strcmp(f, "--color")) a.color = parse_onoff(f, v);
        else if (!strcmp(f, "--temp")) a.temp = parse_float(f, v, 0, 1e6f);
        else if (!strcmp(f, "--top-k")) a.top_k = (int)parse_int(f, v, 0, INT32_MAX);
        else if (!strcmp(f, "--top-p")) a.top_p = parse_float(f, v, 0, 1);
        else if (!strcmp(f, "--seed") || !strcmp(f, "-s")) a.seed = parse_int(f, v, -1, UINT32_MAX);
        else if (!strcmp(f, "--spec-type")) a.spec_type = v;
        else if (!strcmp(f, "--spec-draft-n-max") || !strcmp(f, "--draft-max")) a.draft_n_max = (int)parse_int(f, v, 0, 4096);
        else if (!strcmp(f, "--spec-draft-n-min") || !strcmp(f, "--draft-min")) a.draft_n_min = (int)parse_int(f, v, 0, 4096);
        else if (!strcmp(f, "--spec-draft-p-min") || !strcmp(f, "--draft-p-min")) a.draft_p_min = parse_float(f, v, 0, 1);
        else if (!strcmp(f, "--spec-draft-steps")) a.draft_steps = (int)parse_int(f, v, 1, 4096);
        else if (!strcmp(f, "--spec-accept-ratio")) a.accept_ratio = parse_float(f, v, 0, 1);
        else if (!strcmp(f, "--spec-accept-delta")) a.accept_delta = parse_float(f, v, 0, 1e6f);
        else if (!strcmp(f, "--diffusion-threshold")) a.diffusion_threshold = parse_float(f, v, 0, 1);
        else if (!strcmp(f, "--dump-logits")) a.dump_logits = v;
        else if (!strcmp(f, "--preview-block")) a.preview_block = v;
        else if (!strcmp(f, "--dump-tensors")) a.dump_tensors = v;
        else if (!strcmp(f, "--dump-filter")) a.dump_filter = v;
        else if (!strcmp(f, "--test-drafts")) a.test_drafts = v;
        else {
            takes = false;
            if (!strcmp(f, "--tokenize")) a.tokenize = true;
            else if (!strcmp(f, "--check-ops")) a.check_ops = true;
            else if (!strcmp(f, "--chat")) a.chat = true;
            else if (!strcmp(f, "--diffusion")) a.diffusion = true;
            else if (!strcmp(f, "--test-check-state")) a.test_check_state = true;
            else if (!strcmp(f, "--trace")) a.trace = true;
            else if (!strcmp(f, "--utf8-replace")) a.utf8_replace = true;
            else if (!strcmp(f, "--spec-draft-adaptive")) a.draft_adaptive = true;
            else fatal("unknown argument '%s'; see --help", f);
        }
        if (takes) {
            if (!v) fatal("%s needs a value; see --help", f);
            i++;
        }
    }
    if (!a.model) fatal("no model given; use -m MODEL.gguf (see --help)");
    if (!a.check_ops && !!a.prompt + !!a.prompt_file + !!a.tokens != 1) fatal("give the prompt exactly once: -p TEXT, -f FILE or --tokens IDS");
    if (strcmp(a.spec_type, "none") && strcmp(a.spec_type, "draft-self"))
        fatal("--spec-type '%s' is not supported; use none or draft-self", a.spec_type);
    if (a.n_threads_batch < 0) a.n_threads_batch = a.n_threads;
    if (a.test_drafts && strcmp(a.test_drafts, "random") && strcmp(a.test_drafts, "truth"))
        fatal("--test-drafts '%s': use random or truth", a.test_drafts);
    if (a.draft_adaptive && rule_relaxed(a.accept_ratio, a.accept_delta))
        fatal("--spec-draft-adaptive needs the exact rule: with --spec-accept-ratio and --spec-accept-delta the text would depend on timing");
    return a;
}

/* "1,2,3" -> ids; every id must be a token of the model. */
static int *parse_ids(const char *s, int n_vocab, int *n) {
    int cap = 16, *ids = xmalloc((size_t)cap * sizeof(int));
    *n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v >= n_vocab)
            fatal("token list '%.40s': bad id at '%.20s' (ids are 0..%d, comma-separated)", s, p, n_vocab - 1);
        if (*n == cap) { cap *= 2; ids = realloc(ids, (size_t)cap * sizeof(int)); if (!ids) fatal("out of memory"); }
        ids[(*n)++] = (int)v;
        p = end;
        if (*p == ',') p++;
        else if (*p) fatal("token list '%.40s': expected ',' at '%.20s'", s, p);
    }
    return ids;
}

/* The prompt file, at most `max` bytes: anything longer cannot fit in -b (see main), and a
 * device such as /dev/zero must not fill memory first. */
static char *read_file(const char *path, size_t max, size_t *len) {
    FILE *fp = fopen(path, "rb");
    if (!fp) fatal("cannot open prompt file '%s': %s", path, strerror(errno));
    size_t cap = 4096, n = 0;
    char *buf = xmalloc(cap);
    size_t r;
    while ((r = fread(buf + n, 1, cap - n, fp)) > 0) {
        n += r;
        if (n > max) fatal("prompt file '%s' is longer than %zu bytes, more than -b tokens can hold; raise -b or shorten it", path, max);
        if (n == cap) { cap *= 2; buf = realloc(buf, cap); if (!buf) fatal("out of memory reading '%s'", path); }
    }
    if (ferror(fp)) fatal("cannot read prompt file '%s': %s", path, strerror(errno));
    fclose(fp);
    *len = n;
    return buf;
}

static void tokenizer_load(Tokenizer *tok, EogSet *eog, const Model *m) {
    const GGUF *f = &m->file;
    const GGUFKV *model = gguf_find(f, "tokenizer.ggml.model");
    if (!model || model->type != GGUF_STRING || !str_eq(model->strings[0], "gpt2"))
        fatal("%s: tokenizer.ggml.model must be \"gpt2\" (byte-level BPE)", f->path);
    const GGUFKV *toks = gguf_array(f, "tokenizer.ggml.tokens", GGUF_STRING, true);
    const GGUFKV *merges = gguf_array(f, "tokenizer.ggml.merges", GGUF_STRING, true);
    const GGUFKV *types = gguf_find(f, "tokenizer.ggml.token_type");
    int32_t *type = NULL;
    if (types) {
        if (types->type != GGUF_ARRAY || types->arr_n != toks->arr_n)
            fatal("%s: tokenizer.ggml.token_type must be an array of %llu integers", f->path, (unsigned long long)toks->arr_n);
        type = xmalloc(mul_size(types->arr_n, sizeof(int32_t), "token types"));
        for (uint64_t i = 0; i < types->arr_n; i++) type[i] = (int32_t)gguf_arr_int(f, types, i);
    }
    if (merges->arr_n > INT32_MAX) fatal("%s: too many merges", f->path);
    const char *err = tokenizer_init(tok, (int)toks->arr_n, toks->strings, type, (int)merges->arr_n, merges->strings);
    if (err) fatal("%s: tokenizer: %s", f->path, err);
    free(type);
    eog->n = 0;
    int eos = (int)gguf_int(f, "tokenizer.ggml.eos_token_id", -1, -1, m->c.n_vocab - 1);
    if (eos >= 0) eog->ids[eog->n++] = eos;
    const char *names[] = {"<|im_end|>", "<|endoftext|>"};
    for (int i = 0; i < 2; i++) {
        int id = tokenizer_find(tok, names[i]);
        if (id >= 0 && !is_eog(eog, id)) eog->ids[eog->n++] = id;
    }
}

/* Memory this process may use: /proc/meminfo's MemAvailable, or the cgroup's limit when lower
 * (a container's limit is not in MemAvailable, and going past it gets the process killed). 0: unknown. */
static uint64_t read_number(const char *path, const char *format) {
    FILE *fp = fopen(path, "r");
    char line[256];
    unsigned long long v = 0;
    bool found = false;
    while (fp && !found && fgets(line, sizeof line, fp)) found = sscanf(line, format, &v) == 1;
    if (fp) fclose(fp);
    return found ? v : 0;
}

static uint64_t available_memory(void) {
    uint64_t avail = read_number("/proc/meminfo", "MemAvailable: %llu kB") * 1024;
    const char *limits[] = {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"};
    for (int i = 0; i < 2; i++) {
        uint64_t lim = read_number(limits[i], "%llu");   /* "max" (no limit) reads as 0 */
        if (lim && (!avail || lim < avail)) avail = lim;
    }
    return avail;
}

static void human_bytes(char *buf, size_t n, double b) {
    const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    int u = 0;
    while (b >= 1024 && u < 5) { b /= 1024; u++; }
    snprintf(buf, n, u ? "%.1f %s" : "%.0f %s", b, unit[u]);
}

/* Before anything big is allocated: one line saying what the run needs, and a refusal when the
 * allocations cannot fit (the weights are mapped from the file and paged in on demand, so they
 * are reported but not counted against free memory). */
static void memory_plan(const Model *m, const Args *a, int n_ctx, int cap, int n_threads, size_t logits_floats) {
    size_t kv = kv_cache_bytes(m, n_ctx, a->k_type, a->v_type), gdn = gdn_state_bytes(m);
    size_t scratch = add_size(scratch_bytes(&m->c, cap, n_ctx, n_threads), mul_size(logits_floats, sizeof(float), "logits"), "scratch");
    size_t total = add_size(add_size(kv, gdn, "memory plan"), scratch, "memory plan");
    uint64_t avail = available_memory();
    char w[32], k[32], g[32], sc[32], t[32], av[32];
    human_bytes(w, sizeof w, (double)m->file.size);
    human_bytes(k, sizeof k, (double)kv);
    human_bytes(g, sizeof g, (double)gdn);
    human_bytes(sc, sizeof sc, (double)scratch);
    human_bytes(t, sizeof t, (double)total);
    human_bytes(av, sizeof av, (double)avail);
    if (avail && total > avail)
        fatal("this run needs %s (KV cache %s for -c %d, GDN state %s, scratch %s for -ub %d) but only %s is available; use a smaller -c or -ub",
              t, k, n_ctx, g, sc, cap, av);
    fprintf(stderr, "clover: memory: weights %s (mapped from the file), KV cache %s (-c %d, %s/%s), GDN state %s, scratch %s (-ub %d): %s of %s available\n",
            w, k, n_ctx, TYPES[a->k_type].name, TYPES[a->v_type].name, g, sc, cap, t, avail ? av : "unknown");
}

/* "%8.3f t/s", or n/a for a duration under 1 ms, the precision the seconds are printed with (a
 * one-token prompt "encodes" in nanoseconds: no evaluation at all) */
static const char *rate(char *buf, size_t n, int tokens, double seconds) {
    if (seconds < 1e-3) snprintf(buf, n, "%8s", "n/a");
    else snprintf(buf, n, "%8.3f t/s", tokens / seconds);
    return buf;
}

/* llama-speculative-simple's statistics (spec S3.5), then this project's additions; the draft lines
 * only for a run that drafted (draft-self, not --diffusion). */
static void print_stats(const Args *a, const Stats *s) {
    char r1[32], r2[32];
    fprintf(stderr, "\n\nencoded %4d tokens in %8.3f seconds, speed: %s\n", s->n_encoded, s->t_encode, rate(r1, sizeof r1, s->n_encoded, s->t_encode));
    fprintf(stderr, "decoded %4d tokens in %8.3f seconds, speed: %s\n\n", s->n_predict, s->t_decode, rate(r2, sizeof r2, s->n_predict, s->t_decode));
    if (a->diffusion || strcmp(a->spec_type, "draft-self")) {
        fprintf(stderr, "n_predict = %d\n", s->n_predict);
        return;
    }
    fprintf(stderr, "n_draft   = %d\n", a->draft_n_max);
    fprintf(stderr, "n_predict = %d\n", s->n_predict);
    fprintf(stderr, "n_drafted = %d\n", s->n_drafted);
    fprintf(stderr, "n_accept  = %d\n", s->n_accept);
    fprintf(stderr, "accept    = %.3f%%\n", s->n_drafted ? 100.0 * s->n_accept / s->n_drafted : 0.0);
    fprintf(stderr, "n_relaxed = %d\n", s->n_relaxed);
    fprintf(stderr, "mean accepted length = %.3f tokens per round (%d rounds)\n",
            s->n_rounds ? (double)s->n_predict / s->n_rounds : 0.0, s->n_rounds);
    fprintf(stderr, "draft time = %.3f s, verify time = %.3f s\n", s->t_draft, s->t_verify);
    /* accepted / drafted at draft position 1..n_draft: a draft is kept only when every one before it
     * was, so the counts fall with the position; they sum to n_accept / n_drafted */
    fputs("accept by position =", stderr);
    for (int j = 0; j < a->draft_n_max; j++) fprintf(stderr, " %d/%d", s->accepted_at[j], s->drafted_at[j]);
    fputs(" (accepted/drafted, positions 1..n_draft)\n", stderr);
}

/* --trace: a token's text, quoted and escaped so that one token is one cell: printable ASCII and
 * whole valid UTF-8 characters as they are; \n \t \' \\ ; any other byte \xNN; cut at ~20 bytes. */
static void trace_token(const Tokenizer *tok, int id, char *out, size_t cap) {
    char buf[256];
    int n = tokenizer_decode(tok, id, buf, sizeof buf);
    size_t o = 0;
    out[o++] = '\'';
    for (int i = 0; i < n && o + 12 < cap; ) {
        unsigned char ch = (unsigned char)buf[i];
        int len = ch < 0x80 ? 1 : (ch & 0xE0) == 0xC0 ? 2 : (ch & 0xF0) == 0xE0 ? 3 : (ch & 0xF8) == 0xF0 ? 4 : 0;
        bool valid = len > 1 && i + len <= n;
        for (int k = 1; valid && k < len; k++) valid = ((unsigned char)buf[i + k] & 0xC0) == 0x80;
        if (o > 22) { o += (size_t)snprintf(out + o, cap - o, "..."); break; }
        if (ch == '\n') o += (size_t)snprintf(out + o, cap - o, "\\n");
        else if (ch == '\t') o += (size_t)snprintf(out + o, cap - o, "\\t");
        else if (ch == '\'' || ch == '\\') o += (size_t)snprintf(out + o, cap - o, "\\%c", ch);
        else if (ch >= 0x20 && ch < 0x7f) out[o++] = (char)ch;
        else if (valid) { memcpy(out + o, buf + i, (size_t)len); o += (size_t)len; i += len; continue; }
        else o += (size_t)snprintf(out + o, cap - o, "\\x%02X", ch);
        i++;
    }
    out[o++] = '\'';
    out[o] = 0;
}

/* s padded with spaces to w columns (one column per UTF-8 character) */
static const char *trace_pad(const char *s, int w, char *out, size_t cap) {
    int cols = 0;
    for (const char *p = s; *p; p++) cols += ((unsigned char)*p & 0xC0) != 0x80;
    snprintf(out, cap, "%s%*s", s, cols < w ? w - cols : 0, "");
    return out;
}

/* One block per round on stderr: a header with the counts, one line per drafted position (the
 * draft, its drafter probability p_q and entropy H_q in nats; the verifier's token at that
 * position, the verifier's entropy H_p, and log p(d)/p(t) = z[d] - z[t]; the decision), the
 * position after the last draft when the last row gave a bonus token, and the committed tokens. */
static void trace_round(const Round *r, int round, int V, const Printer *pr, const Args *a, const EogSet *eog) {
    const Tokenizer *tok = pr->tok;
    char dt[96], tt[96], p1[128], p2[128];
    bool relaxed_rule = rule_relaxed(a->accept_ratio, a->accept_delta);
    const char *cut = "";
    if (r->m < r->n) {
        if (r->m == 0 && a->draft_n_min > 0 && a->draft_p_min <= 0) cut = ", dropped: shorter than --spec-draft-n-min";
        else if (r->m > 0 && is_eog(eog, r->d[r->m - 1].id)) cut = ", cut after an end-of-generation draft";
        else cut = ", cut by --spec-draft-p-min or dropped by --spec-draft-n-min";
    }
    trace_token(tok, r->id_last, tt, sizeof tt);
    fprintf(stderr, "round %d @pos %d %s: drafted %d (asked %d%s), accepted %d, %s -> %d new token%s\n", round, r->pos, tt, r->m, r->n,
            cut, r->acc, r->eog_stop ? "stopped at an accepted end-of-generation draft" : r->m == 0 ? "+1 verifier token (no drafts: a plain step)"
            : r->acc == r->m ? "+1 bonus token" : "+1 verifier token",
            r->acc + !r->eog_stop, r->acc + !r->eog_stop == 1 ? "" : "s");
    if (r->m > 0)
        fprintf(stderr, "  %6s  %-24s %5s %6s | %-24s %6s %9s | %s\n", "pos", "draft", "p_q", "H_q", "verifier", "H_p", "z[d]-z[t]", "decision");
    for (int j = 0; r->m > 0 && j <= r->m; j++) {
        const float *z = r->logits + (size_t)j * V;
        if (j < r->m) trace_token(tok, r->d[j].id, dt, sizeof dt);
        if (j >= r->rows) {   /* past the stop: drafted, never compared */
            if (j < r->m) fprintf(stderr, "  %6d  %s %5.2f %6.2f | %-24s %6s %9s | not reached\n", r->pos + 1 + j, trace_pad(dt, 24, p1, sizeof p1), r->d[j].p, r->d[j].H, "", "", "");
            continue;
        }
        float p_top, Hp;
        best_token(z, V, -1, &p_top, &Hp);
        trace_token(tok, r->t[j], tt, sizeof tt);
        if (j == r->m) {
            fprintf(stderr, "  %6d  %-24s %5s %6s | %s %6.2f %9s | bonus token (every draft accepted)\n", r->pos + 1 + j, "-", "", "", trace_pad(tt, 24, p2, sizeof p2), Hp, "");
            continue;
        }
        float lr = z[r->d[j].id] - z[r->t[j]];
        char why[200];
        if (r->d[j].id == r->t[j]) snprintf(why, sizeof why, "accept: same token");
        else if (r->relaxed[j])
            snprintf(why, sizeof why, "accept (relaxed): p(d)/p(t) %.3f >= %.3g and H_q %.2f <= %.3g", expf(lr), a->accept_ratio, r->d[j].H, a->accept_delta);
        else if (!relaxed_rule) snprintf(why, sizeof why, "STOP: draft != verifier (exact rule); commit the verifier's token");
        else {
            bool r_ok = lr >= logf(a->accept_ratio), h_ok = r->d[j].H <= a->accept_delta;
            char rs[64] = "", hs[64] = "";
            if (!r_ok) snprintf(rs, sizeof rs, "p(d)/p(t) %.3f < %.3g", expf(lr), a->accept_ratio);
            if (!h_ok) snprintf(hs, sizeof hs, "H_q %.2f > %.3g", r->d[j].H, a->accept_delta);
            snprintf(why, sizeof why, "STOP: draft != verifier, %s%s%s; commit the verifier's token", rs, !r_ok && !h_ok ? ", " : "", hs);
        }
        if (j < r->acc && is_eog(eog, r->d[j].id)) strncat(why, "; end of generation", sizeof why - strlen(why) - 1);
        fprintf(stderr, "  %6d  %s %5.2f %6.2f | %s %6.2f %9.3f | %s\n", r->pos + 1 + j, trace_pad(dt, 24, p1, sizeof p1), r->d[j].p, r->d[j].H,
                trace_pad(tt, 24, p2, sizeof p2), Hp, lr, why);
    }
    fputs("  commit:", stderr);
    for (int j = 0; j < r->acc + !r->eog_stop; j++) {
        trace_token(tok, j < r->acc ? r->d[j].id : r->t[j], tt, sizeof tt);
        fprintf(stderr, " %s", tt);
    }
    fputc('\n', stderr);
}

/* The prompt: token ids (--tokens), or text (-p, -f: a prompt file loses one trailing newline, as
 * upstream), wrapped in the chat template with --chat, then tokenized. */
static int *read_prompt(const Args *a, const Tokenizer *tok, int n_vocab, int *n_prompt) {
    if (a->tokens) return parse_ids(a->tokens, n_vocab, n_prompt);
    size_t len = 0;
    /* no token is longer than 1 KiB of text, so a prompt that fits in -b is at most that per token */
    char *text = a->prompt_file ? read_file(a->prompt_file, mul_size((size_t)a->n_batch, 1024, "prompt size"), &len) : strdup(a->prompt);
    if (!text) fatal("out of memory");
    if (a->prompt) len = strlen(text);
    if (a->prompt_file && len > 0 && text[len - 1] == '\n') len--;
    if (a->chat) {
        const char *pre = "<|im_start|>user\n", *post = "<|im_end|>\n<|im_start|>assistant\n<think>\n";
        char *w = xmalloc(strlen(pre) + len + strlen(post) + 1);
        sprintf(w, "%s%.*s%s", pre, (int)len, text, post);
        free(text);
        text = w;
        len = strlen(w);
    }
    int *prompt = tokenizer_encode(tok, text, len, true, n_prompt);
    if (!prompt) fatal("out of memory tokenizing the prompt");
    free(text);
    return prompt;
}

/* The options against the model and the prompt: the context size (-c 0: the model's), which the
 * prompt must fit in, as in -b; block diffusion needs a clover_moe file with a mask token. */
static int check_run(const Args *a, const Config *c, int n_prompt) {
    if (n_prompt == 0) fatal("the prompt is empty; give some text with -p or -f");
    int n_ctx = a->n_ctx ? a->n_ctx : c->n_ctx_train;
    if (n_ctx > c->n_ctx_train) fatal("-c %d is beyond the model's context length %d; use -c %d or less", n_ctx, c->n_ctx_train, c->n_ctx_train);
    if (n_prompt > a->n_batch) fatal("the prompt has %d tokens, more than the batch size -b %d; raise -b", n_prompt, a->n_batch);
    if (n_prompt >= n_ctx) fatal("the prompt has %d tokens, which does not fit in the context -c %d; raise -c", n_prompt, n_ctx);
    bool draft_self = !strcmp(a->spec_type, "draft-self");
    if ((draft_self || a->diffusion || a->preview_block) && c->mask_id < 0)
        fatal("%s: %s needs a clover_moe model with a mask token (%s); this %s file has none",
              a->model, a->diffusion ? "--diffusion" : a->preview_block ? "--preview-block" : "--spec-type draft-self", KEY_MASK_ID, c->arch);
    if ((draft_self || a->diffusion || a->preview_block) && strcmp(c->arch, "clover_moe"))
        fatal("%s: block diffusion needs a clover_moe model; this is %s (plain causal decoding works with --spec-type none)", a->model, c->arch);
    return n_ctx;
}

/* The options as the run will use them: the defaults that depend on the model, and every option that
 * is clamped, ignored or overridden by another, each with one warning that says what is used instead
 * (the statistics then show the values that ran). */
static void settle_options(Args *a, const Config *c) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int t_max = a->n_threads > a->n_threads_batch ? a->n_threads : a->n_threads_batch;
    if (cores > 0 && t_max > cores)
        warn("%s %d is more than the %ld cores online; running %d threads anyway, which take turns on the cores (slow): use %s %ld or fewer",
             t_max == a->n_threads ? "-t" : "-tb", t_max, cores, t_max, t_max == a->n_threads ? "-t" : "-tb", cores);
    if (!a->n_ubatch) a->n_ubatch = a->n_batch < 512 ? a->n_batch : 512;
    else if (a->n_ubatch > a->n_batch) {
        warn("-ub %d is larger than the logical batch -b %d; using -ub %d", a->n_ubatch, a->n_batch, a->n_batch);
        a->n_ubatch = a->n_batch;
    }
    /* the draft-self options (and --trace) given to a run that does not draft */
    bool draft_self = !strcmp(a->spec_type, "draft-self") && !a->diffusion;
    if (!draft_self) {
        char list[256] = "";
        const char *given[] = {a->diffusion && !strcmp(a->spec_type, "draft-self") ? "--spec-type draft-self" : NULL,
                               a->draft_n_max >= 0 ? "--spec-draft-n-max" : NULL, a->draft_n_min > 0 ? "--spec-draft-n-min" : NULL,
                               a->draft_p_min > 0 ? "--spec-draft-p-min" : NULL, a->draft_steps != 1 ? "--spec-draft-steps" : NULL,
                               a->accept_ratio > 0 ? "--spec-accept-ratio" : NULL, a->accept_delta >= 0 ? "--spec-accept-delta" : NULL,
                               a->draft_adaptive ? "--spec-draft-adaptive" : NULL, a->trace ? "--trace" : NULL};
        int n = 0;
        for (size_t i = 0; i < sizeof given / sizeof *given; i++)
            if (given[i]) snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", n++ ? ", " : "", given[i]);
        if (n && a->diffusion) warn("%s ha%s no effect with --diffusion: this run generates by block diffusion", list, n > 1 ? "ve" : "s");
        else if (n) warn("%s ha%s no effect without --spec-type draft-self: this run decodes plainly (--spec-type none)", list, n > 1 ? "ve" : "s");
        return;
    }
    int n_max = c->block_size - 1;   /* a draft block is [id_last, MASK x n] within one block */
    if (a->draft_n_max < 0) a->draft_n_max = 16 < n_max ? 16 : n_max;
    else if (a->draft_n_max > n_max) {
        warn("--spec-draft-n-max %d: a draft block of this model holds at most %d drafts (block size %d); using %d",
             a->draft_n_max, n_max, c->block_size, n_max);
        a->draft_n_max = n_max;
    }
    if (a->draft_n_min > a->draft_n_max) {
        warn("--spec-draft-n-min %d is above --spec-draft-n-max %d, so every draft would be dropped; using --spec-draft-n-min %d",
             a->draft_n_min, a->draft_n_max, a->draft_n_max);
        a->draft_n_min = a->draft_n_max;
    }
    bool ratio = a->accept_ratio > 0, delta = a->accept_delta >= 0;
    if (ratio && !delta) warn("--spec-accept-ratio has no effect without --spec-accept-delta; using the exact rule");
    else if (delta && !ratio) warn("--spec-accept-delta has no effect without --spec-accept-ratio; using the exact rule");
    else if (ratio && a->accept_ratio >= 1) warn("--spec-accept-ratio 1 relaxes nothing (the relaxed rule needs a ratio below 1); using the exact rule");
}

/* Rows per batch: a ubatch, a verify batch, a diffusion block, the preview block. */
static int batch_rows(const Args *a, const Config *c, int n_block) {
    bool draft_self = !strcmp(a->spec_type, "draft-self");
    int cap = a->n_ubatch;
    if (draft_self && a->draft_n_max + 1 > cap) cap = a->draft_n_max + 1 < c->block_size ? a->draft_n_max + 1 : c->block_size;
    if ((a->diffusion || draft_self) && c->block_size > cap) cap = c->block_size;
    return n_block > cap ? n_block : cap;
}

/* The context for n_ctx positions and batches of cap rows, after the memory plan (logit_rows: the
 * rows of logits the caller will hold). */
static void ctx_init(Ctx *ctx, Model *m, const Args *a, int n_ctx, int cap, int logit_rows) {
    ctx->m = m;
    ctx->n_threads = a->n_threads;
    ctx->n_threads_batch = a->n_threads_batch;
    ctx->flash_attn = a->flash_attn;
    ctx->fa_threads = a->n_threads;
    ctx->dump_dir = a->dump_tensors;
    if (ctx->dump_dir) make_dirs(ctx->dump_dir);
    static Dumps dumps;
    ctx->dumps = &dumps;
    if (regcomp(&ctx->dump_filter, a->dump_filter ? a->dump_filter : "", REG_EXTENDED | REG_NOSUB) != 0)
        fatal("--dump-filter '%s' is not a valid regular expression", a->dump_filter);
    if (gpu_setup(ctx, m, a, n_ctx, cap)) return;
    int n_threads = a->n_threads > a->n_threads_batch ? a->n_threads : a->n_threads_batch;
    memory_plan(m, a, n_ctx, cap, n_threads, mul_size((size_t)logit_rows, (size_t)m->c.n_vocab, "logits"));
    ctx->pool = pool_new(n_threads);
    state_init(&ctx->st, m, n_ctx, a->k_type, a->v_type);
    scratch_init(&ctx->sc, &m->c, cap, n_ctx, n_threads);
}

/* --dump-logits: the logits of every prompt position, causally; or, with --preview-block, commit the
 * prompt and write those of one preview pass over the block right after it. */
static void write_logits(Ctx *ctx, FILE *fp, const int *prompt, int n_prompt, const int *block, int n_block) {
    size_t V = (size_t)ctx->m->c.n_vocab;
    float *logits = xmalloc(mul_size(mul_size((size_t)ctx->sc.cap, V, "logits"), sizeof(float), "logits"));
    if (!block) prefill(ctx, prompt, n_prompt, logits, fp);
    else {
        prefill(ctx, prompt, n_prompt, logits, NULL);
        forward_preview(ctx, block, n_block, logits);
        if (fwrite(logits, sizeof(float) * V, (size_t)n_block, fp) != (size_t)n_block) fatal("writing logits: %s", strerror(errno));
    }
    free(logits);
}

/* The sampler (seeded), the printer, the end-of-generation ids; the prompt printed. */
static void run_init(Run *r, Ctx *ctx, const Args *a, const Tokenizer *tok, const EogSet *eog, const int *prompt, int n_prompt) {
    int V = ctx->m->c.n_vocab;
    *r = (Run){.ctx = ctx, .a = a, .eog = *eog};
    r->smp = xmalloc(sizeof(Sampler));
    *r->smp = (Sampler){a->temp, a->top_p, a->top_k, 0, xmalloc((size_t)V * sizeof(int)), xmalloc((size_t)V * sizeof(float))};
    r->seed = a->seed < 0 ? (uint64_t)time(NULL) : (uint64_t)a->seed;
    r->smp->rng = r->seed * 0x9E3779B97F4A7C15ULL + 0x632BE59BD9B4E019ULL;
    /* the sampler and the seed in effect, so that a run can be repeated (as llama.cpp prints them) */
    if (a->diffusion) fprintf(stderr, "clover: sampler: none: --diffusion takes each position's most probable token\n");
    else if (sampler_greedy(r->smp)) fprintf(stderr, "clover: sampler: greedy (--temp 0 or --top-k 1): the argmax of the logits, ties to the lowest id\n");
    else {
        char k[16] = "all";
        if (a->top_k > 0) snprintf(k, sizeof k, "%d", a->top_k);
        fprintf(stderr, "clover: sampler: top-k %s -> top-p %.3f -> temp %.3f -> draw, seed %llu%s\n", k, a->top_p, a->temp,
                (unsigned long long)r->seed, a->seed < 0 ? " (from the clock; --seed repeats the run)" : "");
    }
    r->pr = xmalloc(sizeof(Printer));
    *r->pr = (Printer){tok, a->utf8_replace, {{0}, 0}};
    for (int i = 0; i < n_prompt; i++) print_token(r->pr, prompt[i]);
}

/* Test only, on a shadow context over the same model (one thread): --test-drafts truth first
 * decodes the greedy continuation plainly; --test-check-state keeps a plain decoder in lockstep
 * with the rounds (check_state). */
static void test_setup(Run *r, const int *prompt, int n_prompt, TestDrafts *td, StateCheck *chk) {
    const Args *a = r->a;
    Ctx *ctx = r->ctx;
    const Model *m = ctx->m;
    int n_ctx = ctx->st.n_ctx, V = m->c.n_vocab;
    static Ctx shadow;
    *td = (TestDrafts){DRAFTS_MODEL, NULL, 0, r->seed + 1};
    *chk = (StateCheck){&shadow, 0};
    if (!a->test_drafts && !a->test_check_state) return;
    shadow = *ctx;   /* shares the model; runs on the calling thread only, on the CPU */
    shadow.gpu = NULL;
    shadow.n_threads = shadow.n_threads_batch = 1;
    shadow.pool = pool_new(1);
    int n_threads = a->n_threads > a->n_threads_batch ? a->n_threads : a->n_threads_batch;
    state_init(&shadow.st, m, n_ctx, a->k_type, a->v_type);
    scratch_init(&shadow.sc, &m->c, ctx->sc.cap, n_ctx, n_threads);
    if (a->test_drafts && !strcmp(a->test_drafts, "random")) td->kind = DRAFTS_RANDOM;
    if (a->test_drafts && !strcmp(a->test_drafts, "truth")) {   /* the greedy continuation, decoded plainly */
        Sampler greedy = *r->smp;
        greedy.temp = 0;
        int limit = a->n_predict >= 0 && a->n_predict < n_ctx ? a->n_predict + 1 : n_ctx;   /* -n N runs N+1 */
        int *truth = xmalloc((size_t)limit * sizeof(int));
        float *z = xmalloc((size_t)V * sizeof(float));
        prefill(&shadow, prompt, n_prompt - 1, z, NULL);
        int last = prompt[n_prompt - 1];
        while (td->n_truth < limit && shadow.st.n_past < n_ctx) {
            forward_causal(&shadow, &last, 1, z, 1);
            last = truth[td->n_truth++] = sample(&greedy, z, V);
        }
        td->kind = DRAFTS_TRUTH;
        td->truth = truth;
        state_init(&shadow.st, m, n_ctx, a->k_type, a->v_type);
    }
    if (a->test_check_state) prefill(&shadow, prompt, n_prompt - 1, NULL, NULL);
}

#ifndef TESTING
/* parse -> load -> run */
int main(int argc, char **argv) {
    Args a = parse_args(argc, argv);
    static Model m;
    model_load(&m, a.model);
    if (a.check_ops) check_ops(&m);
    Tokenizer tok;
    EogSet eog;
    tokenizer_load(&tok, &eog, &m);
    int n_prompt = 0, *prompt = read_prompt(&a, &tok, m.c.n_vocab, &n_prompt);
    if (a.tokenize) {
        for (int i = 0; i < n_prompt; i++) printf("%s%d", i ? "," : "", prompt[i]);
        printf("\n");
        return 0;
    }
    int n_ctx = check_run(&a, &m.c, n_prompt);
    settle_options(&a, &m.c);
    int n_block = 0, *block = a.preview_block ? parse_ids(a.preview_block, m.c.n_vocab, &n_block) : NULL;
    if (a.preview_block && (!a.dump_logits || n_block == 0)) fatal("--preview-block needs --dump-logits FILE and at least one id");
    if (n_prompt + n_block > n_ctx) fatal("the prompt and the preview block (%d tokens) do not fit in -c %d", n_prompt + n_block, n_ctx);
    FILE *fp = a.dump_logits ? fopen(a.dump_logits, "wb") : NULL;   /* fail before the big allocations */
    if (a.dump_logits && !fp) fatal("cannot write '%s': %s", a.dump_logits, strerror(errno));
    int cap = batch_rows(&a, &m.c, n_block);
    static Ctx ctx;
    ctx_init(&ctx, &m, &a, n_ctx, cap, fp ? cap : 1);

    if (fp) {
        write_logits(&ctx, fp, prompt, n_prompt, block, n_block);
        if (fclose(fp) != 0) fatal("writing '%s': %s", a.dump_logits, strerror(errno));
        dump_index(&ctx);
        return 0;
    }
    Run r;
    run_init(&r, &ctx, &a, &tok, &eog, prompt, n_prompt);
    if (a.diffusion) generate_diffusion(&r, prompt, n_prompt);
    else if (strcmp(a.spec_type, "draft-self")) generate_causal(&r, prompt, n_prompt);
    else {
        TestDrafts td;
        StateCheck chk;
        test_setup(&r, prompt, n_prompt, &td, &chk);
        generate_draft_self(&r, prompt, n_prompt, &td, a.test_check_state ? &chk : NULL);
        if (a.test_check_state) fprintf(stderr, "state check: %d rounds identical to plain causal decoding\n", chk.rounds);
    }
    utf8_stream_flush(&r.pr->utf8, stdout);
    printf("\n");
    fflush(stdout);
    print_stats(&a, &r.stats);
    dump_index(&ctx);
    return 0;
}
#endif
