/*
 * unit.c — unit tests of clover.c's numeric kernels against llama.cpp's ggml (build/unit).
 *
 * Built by `make build/unit` (links the prebuilt ggml from test/setup-llama.sh). It includes
 * clover.c itself with TESTING defined (no main), so it reaches the static functions:
 *   - half precision: fp16_to_fp32 on all 65536 values, fp32_to_fp16 and fp32_to_bf16 on every
 *     rounding boundary and on random bit patterns, bf16_to_fp32, all vs ggml's conversions;
 *   - dequant_row of F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K on random valid blocks vs ggml's
 *     to_float, bit for bit;
 *   - quantize_q8_0 vs ggml's quantize_row_q8_0_ref: the scale bit for bit; the quants equal except
 *     at exact or near ties (clover follows the x86 AVX code: id = 127/amax, ties to even; the
 *     reference takes 1/d and rounds ties away from zero), where they may differ by one;
 *   - quantize_q8_K vs quantize_row_q8_K_ref, bit for bit (d, quants, bsums);
 *   - the SIMD twins of the forward pass's kernels (flash attention's steps among them) vs their
 *     plain definitions, bit for bit;
 *   - every dot product (dot_fn: row and tile orders, plain and repacked layouts) vs a float64 sum over ggml's dequantized
 *     weight and activation: |error| <= 1e-5 * sum |w_i a_i|.
 * Prints PASS/FAIL per check and "N passed, N failed"; exit status 1 if any failed.
 */
#define TESTING
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "../clover.c"
#pragma GCC diagnostic pop

#include "ggml.h"

/* exported by libggml-base but declared only in its private headers */
void quantize_row_q8_K_ref(const float *GGML_RESTRICT x, void *GGML_RESTRICT y, int64_t k);
void dequantize_row_q8_K(const void *GGML_RESTRICT x, float *GGML_RESTRICT y, int64_t k);

static int n_pass, n_fail;

/* whether kernels() chose the SIMD twins (not on a CPU without them, nor with CLOVER_SIMD=scalar) */
static bool simd_chosen(void) { return kernels() != &KERNELS_PLAIN; }

static void check(bool ok, const char *name, const char *fmt, ...) {
    if (ok) {
        printf("PASS %s\n", name);
        n_pass++;
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    printf("FAIL %s: ", name);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    n_fail++;
}

/* xorshift64*, fixed seed: the tests are deterministic */
static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;
static uint64_t rnd64(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1DULL;
}
static uint32_t rnd32(void) { return (uint32_t)(rnd64() >> 32); }
static float rnd_uniform(float lo, float hi) { return lo + (hi - lo) * (float)((rnd64() >> 40) / 16777216.0); }
static float rnd_normal(void) {   /* Box-Muller */
    double u = ((rnd64() >> 11) + 0.5) / 9007199254740992.0, v = (rnd64() >> 11) / 9007199254740992.0;
    return (float)(sqrt(-2 * log(u)) * cos(2 * M_PI * v));
}
static void rnd_bytes(void *p, size_t n) {
    for (size_t i = 0; i < n; i++) ((uint8_t *)p)[i] = (uint8_t)rnd64();
}
static uint32_t bits_of(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float float_of(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* a random finite fp16 with exponent field in [lo_exp, hi_exp] (1..30 normal, 0 subnormal), random sign */
static uint16_t rnd_fp16(int lo_exp, int hi_exp, bool allow_negative) {
    uint32_t e = (uint32_t)(lo_exp + (int)(rnd32() % (uint32_t)(hi_exp - lo_exp + 1)));
    uint16_t h = (uint16_t)((e << 10) | (rnd32() & 0x3ff));
    if (allow_negative && (rnd32() & 1)) h |= 0x8000;
    return h;
}

/* ---------------------------------------------------------------------------------------------- */
/* half precision                                                                                 */
/* ---------------------------------------------------------------------------------------------- */
static void test_fp16_to_fp32(void) {
    int bad = 0, first = -1;
    for (uint32_t h = 0; h < 65536; h++) {
        float a = fp16_to_fp32((uint16_t)h), b = ggml_fp16_to_fp32((ggml_fp16_t)h);
        bool ok = isnan(a) ? isnan(b) : bits_of(a) == bits_of(b);
        if (!ok && bad++ == 0) first = (int)h;
    }
    check(bad == 0, "fp16_to_fp32 (all 65536 values)", "%d differ, first 0x%04x", bad, first);
}

/* fp32 inputs that probe every fp16 rounding boundary: each fp16 value, the midpoints between
 * neighbours and one float ulp either side of them, plus random bit patterns. */
static void test_fp32_to_fp16(void) {
    int bad = 0, n = 0;
    float first = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t h = 0; h < 0x7c00; h++) {
            float lo = ggml_fp16_to_fp32((ggml_fp16_t)h), hi = ggml_fp16_to_fp32((ggml_fp16_t)(h + 1));
            float mid = h + 1 == 0x7c00 ? 65520.0f : (float)(((double)lo + hi) / 2);
            float probe[6] = {lo, mid, nextafterf(mid, 0), nextafterf(mid, INFINITY), nextafterf(lo, INFINITY), nextafterf(lo, 0)};
            for (int k = 0; k < 6; k++) {
                float x = pass ? -probe[k] : probe[k];
                uint16_t a = fp32_to_fp16(x), b = ggml_fp32_to_fp16(x);
                n++;
                if (a != b && bad++ == 0) first = x;
            }
        }
    }
    for (int i = 0; i < 2000000; i++) {
        float x = float_of(rnd32());
        uint16_t a = fp32_to_fp16(x), b = ggml_fp32_to_fp16(x);
        bool ok = isnan(x) ? ((a & 0x7c00) == 0x7c00 && (a & 0x3ff) && (b & 0x7c00) == 0x7c00 && (b & 0x3ff)) : a == b;
        n++;
        if (!ok && bad++ == 0) first = x;
    }
    float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, 65504.0f, 65519.99f, 65520.0f, 1e-8f, 2.98e-8f, 5.96e-8f, 6.1e-5f, 1e30f};
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) {
        uint16_t a = fp32_to_fp16(special[i]), b = ggml_fp32_to_fp16(special[i]);
        n++;
        if (a != b && bad++ == 0) first = special[i];
    }
    check(bad == 0, "fp32_to_fp16 (boundaries and random bits)", "%d of %d differ, first %a", bad, n, first);
}

static void test_bf16(void) {
    int bad = 0, n = 0;
    uint32_t first = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        ggml_bf16_t g = {(uint16_t)h};
        float a = bf16_to_fp32((uint16_t)h), b = ggml_bf16_to_fp32(g);
        n++;
        if (bits_of(a) != bits_of(b) && bad++ == 0) first = h;
    }
    check(bad == 0, "bf16_to_fp32 (all 65536 values)", "%d differ, first 0x%04x", bad, first);
    bad = n = 0;
    for (int i = 0; i < 3000000; i++) {
        uint32_t u = rnd32();
        if (i % 3 == 1) u = (u & 0xffff0000u) | 0x8000u;              /* exact tie */
        if (i % 3 == 2) u = (u & 0xffff0000u) | (0x8000u + (rnd32() & 1 ? 1 : -1)); /* next to it */
        float x = float_of(u);
        uint16_t a = fp32_to_bf16(x), b = ggml_fp32_to_bf16(x).bits;
        n++;
        if (a != b && bad++ == 0) first = u;
    }
    check(bad == 0, "fp32_to_bf16 (ties and random bits)", "%d of %d differ, first bits 0x%08x", bad, n, first);
}

/* ---------------------------------------------------------------------------------------------- */
/* dequantisation                                                                                 */
/* ---------------------------------------------------------------------------------------------- */
/* Fill n elements of type `type` with random valid data: finite fp16/bf16 values, fp16 scales that
 * are finite (normal or subnormal), random quant bits. */
static void random_row(uint32_t type, void *dst, int64_t n) {
    switch (type) {
    case T_F32: for (int64_t i = 0; i < n; i++) ((float *)dst)[i] = rnd_normal(); break;
    case T_F16: for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = rnd_fp16(0, 30, true); break;
    case T_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            do h = (uint16_t)rnd32(); while (((h >> 7) & 0xff) == 0xff);   /* no inf/nan */
            ((uint16_t *)dst)[i] = h;
        }
        break;
    case T_Q8_0:
        for (int64_t b = 0; b < n / 32; b++) {
            BlockQ8_0 *x = (BlockQ8_0 *)dst + b;
            rnd_bytes(x->qs, sizeof x->qs);
            x->d = rnd_fp16(b % 7 == 3 ? 0 : 5, 16, true);
        }
        break;
    case T_Q4_0:
        for (int64_t b = 0; b < n / 32; b++) {
            BlockQ4_0 *x = (BlockQ4_0 *)dst + b;
            rnd_bytes(x->qs, sizeof x->qs);
            x->d = rnd_fp16(b % 7 == 3 ? 0 : 5, 16, true);
        }
        break;
    case T_Q4_K:
        for (int64_t b = 0; b < n / 256; b++) {
            BlockQ4_K *x = (BlockQ4_K *)dst + b;
            rnd_bytes(x, sizeof *x);
            x->d = rnd_fp16(b % 5 == 2 ? 0 : 3, 14, true);
            x->dmin = rnd_fp16(b % 5 == 2 ? 0 : 3, 14, true);
        }
        break;
    case T_Q5_K:
        for (int64_t b = 0; b < n / 256; b++) {
            BlockQ5_K *x = (BlockQ5_K *)dst + b;
            rnd_bytes(x, sizeof *x);
            x->d = rnd_fp16(b % 5 == 2 ? 0 : 3, 14, true);
            x->dmin = rnd_fp16(b % 5 == 2 ? 0 : 3, 14, true);
        }
        break;
    case T_Q6_K:
        for (int64_t b = 0; b < n / 256; b++) {
            BlockQ6_K *x = (BlockQ6_K *)dst + b;
            rnd_bytes(x, sizeof *x);
            x->d = rnd_fp16(b % 5 == 2 ? 0 : 3, 14, true);
        }
        break;
    default: fatal("unit: random_row of type %u", type);
    }
}

/* ggml's dequantisation of a weight row (or, for Q8_K, of an activation row) */
static void ggml_dequant(uint32_t type, const void *src, float *y, int64_t n) {
    if (type == T_Q8_K) { dequantize_row_q8_K(src, y, n); return; }
    if (type == T_F32) { memcpy(y, src, (size_t)n * 4); return; }
    ggml_get_type_traits((enum ggml_type)type)->to_float(src, y, n);
}

static const uint32_t WEIGHT_TYPES[] = {T_F32, T_F16, T_BF16, T_Q8_0, T_Q4_0, T_Q4_K, T_Q5_K, T_Q6_K};
#define N_WEIGHT_TYPES (int)(sizeof WEIGHT_TYPES / sizeof WEIGHT_TYPES[0])

static void test_dequant(void) {
    const int64_t n = 256 * 64;
    void *src = xmalloc(row_bytes(T_F32, n));
    float *a = xmalloc((size_t)n * 4), *b = xmalloc((size_t)n * 4);
    for (int t = 1; t < N_WEIGHT_TYPES; t++) {
        uint32_t type = WEIGHT_TYPES[t];
        char name[64];
        snprintf(name, sizeof name, "dequant_row %s", TYPES[type].name);
        char lname[64];
        snprintf(lname, sizeof lname, "block layout %s matches ggml", TYPES[type].name);
        check(ggml_get_type_traits((enum ggml_type)type)->blck_size == TYPES[type].block &&
              ggml_get_type_traits((enum ggml_type)type)->type_size == TYPES[type].bytes,
              lname, "%s: ggml has %lld elements / %zu bytes per block", TYPES[type].name,
              (long long)ggml_get_type_traits((enum ggml_type)type)->blck_size, ggml_get_type_traits((enum ggml_type)type)->type_size);
        int bad = 0;
        int64_t first = -1;
        for (int rep = 0; rep < 4; rep++) {
            random_row(type, src, n);
            dequant_row(type, src, a, n);
            ggml_dequant(type, src, b, n);
            for (int64_t i = 0; i < n; i++)
                if (bits_of(a[i]) != bits_of(b[i]) && bad++ == 0) first = i;
        }
        check(bad == 0, name, "%d of %lld values differ from ggml's to_float, first at %lld", bad, (long long)(4 * n), (long long)first);
    }
    free(src), free(a), free(b);
}

/* ---------------------------------------------------------------------------------------------- */
/* activation quantisation                                                                        */
/* ---------------------------------------------------------------------------------------------- */
/* Activation-like rows: normal values, heavy-tailed ones, an all-zero block, blocks with exact ties
 * (amax = 127 so that x = k + 0.5 lands on a tie), tiny values. */
static void activation_row(float *x, int64_t n, int kind) {
    for (int64_t i = 0; i < n; i++) {
        switch (kind) {
        case 0: x[i] = rnd_normal(); break;
        case 1: x[i] = rnd_normal() * expf(rnd_uniform(-6, 6)); break;
        case 2: x[i] = (i / 32) % 3 == 0 ? 0.0f : rnd_uniform(-1e-3f, 1e-3f); break;
        case 3: x[i] = (i % 32 == 0) ? 127.0f : (float)((int)(rnd32() % 254) - 127) + 0.5f; break;
        default: x[i] = rnd_uniform(-4, 4); break;
        }
    }
    if (kind == 3) for (int64_t i = 0; i < n; i += 32) x[i] = (i / 32) % 2 ? 127.0f : -127.0f;
}

/* R activation rows rounded for weight type `type` into out, stride bytes apart: row 0 is x, the
 * others drawn anew (kinds rep + r), so that the rows differ in their quants and a multi-row kernel
 * giving one row another's integer sums fails (scaled copies of one row round to the same quants) */
static void activation_rows(uint32_t type, const float *x, int64_t n, int rep, int R, uint8_t *out, size_t stride) {
    float *xr = xmalloc((size_t)n * 4);
    for (int r = 0; r < R; r++) {
        if (r == 0) memcpy(xr, x, (size_t)n * 4);
        else activation_row(xr, n, (rep + r) % 5);
        quantize_row(type, xr, out + r * stride, n);
    }
    free(xr);
}

static void test_quantize_q8_0(void) {
    const int64_t n = 32 * 512;
    float *x = xmalloc((size_t)n * 4);
    BlockQ8_0 *a = xmalloc(row_bytes(T_Q8_0, n)), *b = xmalloc(row_bytes(T_Q8_0, n));
    ggml_from_float_t ref = ggml_get_type_traits(GGML_TYPE_Q8_0)->from_float_ref;
    int bad_d = 0, bad_q = 0, ties = 0, n_q = 0;
    for (int kind = 0; kind < 5; kind++)
        for (int rep = 0; rep < 4; rep++) {
            activation_row(x, n, kind);
            memset(a, 0, row_bytes(T_Q8_0, n));
            memset(b, 0, row_bytes(T_Q8_0, n));
            quantize_q8_0(x, a, n);
            ref(x, b, n);
            for (int64_t blk = 0; blk < n / 32; blk++) {
                if (a[blk].d != b[blk].d) bad_d++;
                float amax = 0;
                for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[32 * blk + j]));
                for (int j = 0; j < 32; j++) {
                    int qa = a[blk].qs[j], qb = b[blk].qs[j];
                    n_q++;
                    if (qa == qb) continue;
                    /* allowed: one step apart, where x * 127/amax is within 1e-4 of a tie */
                    float v = fabsf(x[32 * blk + j] * (127.f / amax));
                    if (abs(qa - qb) == 1 && fabsf(v - floorf(v) - 0.5f) < 1e-4f) ties++;
                    else bad_q++;
                }
            }
        }
    check(bad_d == 0, "quantize_q8_0 scale d vs quantize_row_q8_0_ref", "%d block scales differ", bad_d);
    check(bad_q == 0, "quantize_q8_0 quants vs quantize_row_q8_0_ref", "%d of %d quants differ away from a tie", bad_q, n_q);
    check(ties > 0, "quantize_q8_0 rounds ties to even (differs from the reference only there)",
          "no tie disagreements seen; the tie test rows did not exercise rounding");
    free(x), free(a), free(b);
}

/* The SIMD twins of the activation rounding (round_row) against quantize_row, byte for byte:
 * activation-like rows, and blocks with NaN, infinities, denormals, signed zeros and a largest
 * magnitude that occurs with both signs (the first one sets Q8_K's scale). */
static void test_round_row_simd(void) {
    if (!simd_chosen()) {
        check(true, "SIMD activation rounding vs scalar (no SIMD kernels on this CPU or CLOVER_SIMD=scalar: skipped)", "");
        return;
    }
    const int64_t n = 256 * 16;
    float *x = xmalloc((size_t)n * 4);
    uint8_t *a = xmalloc(row_bytes(T_Q8_K, n) + row_bytes(T_Q8_0, n)), *b = xmalloc(row_bytes(T_Q8_K, n) + row_bytes(T_Q8_0, n));
    const uint32_t wtypes[] = {T_Q8_0, T_Q4_K};   /* dot types Q8_0 and Q8_K */
    int bad = 0, n_rows = 0;
    char detail[128] = "";
    for (int kind = 0; kind < 8; kind++)
        for (int rep = 0; rep < 6; rep++) {
            activation_row(x, n, kind % 5);
            if (kind >= 5)
                for (int64_t i = 0; i < n; i += 1 + (int64_t)(rnd32() % 61)) {
                    const float odd[] = {NAN, -NAN, INFINITY, -INFINITY, 1e-40f, -1e-45f, -0.0f, 3e38f, -3e38f};
                    x[i] = kind == 7 ? -x[i - i % 256] : odd[rnd32() % 9];
                }
            for (int w = 0; w < 2; w++) {
                size_t bytes = row_bytes(dot_type(wtypes[w]), n);
                memset(a, 0, bytes), memset(b, 0, bytes);
                quantize_row(wtypes[w], x, a, n);
                round_row(wtypes[w], x, b, n);
                n_rows++;
                if (memcmp(a, b, bytes) && bad++ == 0)
                    snprintf(detail, sizeof detail, "%s, row kind %d, repetition %d", TYPES[dot_type(wtypes[w])].name, kind, rep);
            }
        }
    check(bad == 0, "SIMD activation rounding (Q8_0, Q8_K) vs scalar, byte for byte", "%d of %d rows differ; first: %s", bad, n_rows, detail);
    free(x), free(a), free(b);
}

static void test_quantize_q8_K(void) {
    const int64_t n = 256 * 64;
    float *x = xmalloc((size_t)n * 4);
    BlockQ8_K *a = xmalloc(row_bytes(T_Q8_K, n)), *b = xmalloc(row_bytes(T_Q8_K, n));
    int bad = 0, first_kind = -1;
    for (int kind = 0; kind < 5; kind++)
        for (int rep = 0; rep < 4; rep++) {
            activation_row(x, n, kind);
            if (kind == 2) for (int64_t i = 0; i < 256; i++) x[i] = 0;   /* one all-zero block */
            memset(a, 0, row_bytes(T_Q8_K, n));
            memset(b, 0, row_bytes(T_Q8_K, n));
            quantize_q8_K(x, a, n);
            quantize_row_q8_K_ref(x, b, n);
            for (int64_t blk = 0; blk < n / 256; blk++)
                if (memcmp(&a[blk], &b[blk], sizeof a[blk]) != 0 && bad++ == 0) first_kind = kind;
        }
    check(bad == 0, "quantize_q8_K vs quantize_row_q8_K_ref (bit for bit)", "%d blocks differ (first in row kind %d)", bad, first_kind);
    free(x), free(a), free(b);
}

/* ---------------------------------------------------------------------------------------------- */
/* dot products                                                                                   */
/* ---------------------------------------------------------------------------------------------- */
static void test_dots(void) {
    const int64_t sizes[] = {4096, 256, 1000, 80, 37};
    float *x = xmalloc(4096 * 4), *wd = xmalloc(4096 * 4), *ad = xmalloc(4096 * 4);
    void *w = xmalloc(4096 * 4), *act = xmalloc(4096 * 4 + 1024);
    for (int t = 0; t < N_WEIGHT_TYPES; t++) {
        uint32_t type = WEIGHT_TYPES[t];
        for (int variant = 0; variant < 4; variant++) {
            bool tile = variant & 1;
            int64_t n_rows = variant & 2 ? 8 : 7;   /* llama.cpp repacks Q4_0/Q4_K matrices of 8k rows */
            double worst = 0;
            int bad = 0, n_checks = 0;
            char detail[160] = "";
            for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
                int64_t n = sizes[s];
                if (n % TYPES[type].block || n % TYPES[dot_type(type)].block) continue;
                for (int rep = 0; rep < 20; rep++) {
                    random_row(type, w, n);
                    if (type == T_BF16)   /* finite products: weights of moderate size */
                        for (int64_t i = 0; i < n; i++) ((uint16_t *)w)[i] = ggml_fp32_to_bf16(rnd_normal() * expf(rnd_uniform(-8, 8))).bits;
                    activation_row(x, n, rep % 5 == 3 ? 0 : rep % 5);
                    quantize_row(type, x, act, n);
                    float got = dot_fn(type, tile, n_rows)(w, act, n);
                    ggml_dequant(type, w, wd, n);
                    ggml_dequant(dot_type(type), act, ad, n);
                    double want = 0, mag = 0;
                    for (int64_t i = 0; i < n; i++) {
                        want += (double)wd[i] * ad[i];
                        mag += fabs((double)wd[i] * ad[i]);
                    }
                    double err = fabs(got - want) / (mag > 0 ? mag : 1);
                    n_checks++;
                    if (err > worst) worst = err;
                    if (!(err <= 1e-5) && bad++ == 0)
                        snprintf(detail, sizeof detail, "n=%lld: got %.9g, float64 %.9g (sum|wa| %.3g)", (long long)n, got, want, mag);
                }
            }
            char name[96];
            snprintf(name, sizeof name, "dot %s (%s order, matrix of %lld rows) vs float64", TYPES[type].name,
                     tile ? "tile" : "row", (long long)n_rows);
            check(bad == 0 && n_checks > 0, name, "%d of %d beyond 1e-5 relative (worst %.3g); %s", bad, n_checks, worst, detail);
        }
    }
    free(x), free(wd), free(ad), free(w), free(act);
}

/* y[r C + i] of a kernel that takes C weight rows (rb bytes apart) and R activation rows (ab bytes
 * apart) against the plain dot of kernel k, bit for bit */
static void check_outputs(int k, const uint8_t *w, size_t rb, int C, const uint8_t *act, size_t ab, int R, int64_t n,
                          const float *y, const char *what, int *n_checks, int *bad, char detail[160]) {
    for (int r = 0; r < R; r++)
        for (int i = 0; i < C; i++) {
            float want = KERNELS_PLAIN.dot[k](w + i * rb, act + r * ab, n);
            (*n_checks)++;
            if (memcmp(&want, &y[r * C + i], 4) && (*bad)++ == 0)
                snprintf(detail, 160, "n=%lld, %s, %d activation rows: row %d, weight row %d: scalar %.9g, simd %.9g",
                         (long long)n, what, R, r, i, want, y[r * C + i]);
        }
}

/* Every kernel's SIMD twin against its scalar definition, bit for bit, over lengths with and
 * without tails and activations of every kind (the gemm kernel included). */
static void test_simd_dots(void) {
    const DotFn *simd = kernels()->dot;
    if (!simd_chosen()) {
        check(true, "SIMD dots vs scalar (no SIMD kernels on this CPU or CLOVER_SIMD=scalar: skipped)", "");
        return;
    }
    const int64_t sizes[] = {4096, 2048, 1792, 1280, 512, 256, 1000, 224, 96, 80, 64, 37};   /* 1792, 1280: 7 and 5 K-quant blocks, groups of 4 with tails; 224: 7 blocks of 32 */
    float *x = xmalloc(4096 * 4);
    void *w = xmalloc(4096 * 4), *act = xmalloc(4096 * 4 + 1024);
    uint8_t *rows_act = xmalloc(MAX_ROWS * (4096 * 4 + 1024));
    BlockQ8_0x8 *packed = xmalloc(4096 / 32 * sizeof *packed);
    uint8_t *w4rows = xmalloc(8 * (4096 * 4 + 64));
    for (int k = 0; k < N_KERNELS; k++) {
        uint32_t type = 0;
        for (int t = 0; t < N_WEIGHT_TYPES; t++)
            for (int v = 0; v < 4; v++)
                if (dot_kernel(WEIGHT_TYPES[t], v & 1, v & 2 ? 8 : 7) == k) type = WEIGHT_TYPES[t];
        if (k == K_Q4_K_8X8_GEMM) type = T_Q4_K;
        int bad = 0, n_checks = 0;
        char detail[160] = "";
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            int64_t n = sizes[s];
            if (n % TYPES[type].block || n % TYPES[dot_type(type)].block) continue;
            for (int rep = 0; rep < 50; rep++) {
                random_row(type, w, n);
                if (type == T_BF16)
                    for (int64_t i = 0; i < n; i++) ((uint16_t *)w)[i] = ggml_fp32_to_bf16(rnd_normal() * expf(rnd_uniform(-8, 8))).bits;
                activation_row(x, n, rep % 5 == 3 ? 0 : rep % 5);
                quantize_row(type, x, act, n);
                float a = KERNELS_PLAIN.dot[k](w, act, n), b = simd[k](w, act, n);
                n_checks++;
                if (memcmp(&a, &b, 4) && bad++ == 0)
                    snprintf(detail, sizeof detail, "n=%lld: scalar %.9g, simd %.9g", (long long)n, a, b);
                /* the multi-row kernel on R rows (activation_rows: row 0 this activation) */
                DotRowsFn rows = kernels()->dot_rows[k];
                size_t stride = row_bytes(dot_type(type), n);
                for (int R = 1; rows && R <= MAX_ROWS; R++) {
                    activation_rows(type, x, n, rep, R, rows_act, stride);
                    float out[MAX_ROWS];
                    if (dot_type(type) == T_Q8_0) {   /* these take a packed group (as matmul_rows gives them) */
                        pack_q8_0_rows(rows_act, stride, R, n, packed);
                        rows(w, packed, stride, R, n, out);
                    } else rows(w, rows_act, stride, R, n, out);
                    for (int r = 0; r < R; r++) {
                        float want = KERNELS_PLAIN.dot[k](w, rows_act + r * stride, n);
                        n_checks++;
                        if (memcmp(&want, &out[r], 4) && bad++ == 0)
                            snprintf(detail, sizeof detail, "n=%lld, %d rows, row %d: scalar %.9g, simd %.9g", (long long)n, R, r, want, out[r]);
                    }
                    /* the tile kernel: eight weight rows (row 0 this one) against the same packed group */
                    DotTileFn tile = kernels()->dot_tile[k];
                    if (tile && rep % 5 == 0) {
                        size_t rb = row_bytes(type, n);
                        memcpy(w4rows, w, rb);
                        for (int i = 1; i < 8; i++) random_row(type, w4rows + i * rb, n);
                        float yt[MAX_ROWS * 8];
                        tile(w4rows, rb, packed, R, n, yt, 8);
                        check_outputs(k, w4rows, rb, 8, rows_act, stride, R, n, yt, "tile", &n_checks, &bad, detail);
                    }
                }
                /* the sixteen-weight-row kernel: row 0 this weight row, against T activation rows
                 * (activation_rows) */
                /* (where the AMX forms are chosen, KERNELS_AVX2's AVX-512 ones are checked too) */
                DotGemm16Fn gemm16s[2] = {kernels()->dot_gemm16[k], NULL};
#if defined(__x86_64__)
                if (kernels()->dot_gemm16[k] != KERNELS_AVX2.dot_gemm16[k]) gemm16s[1] = KERNELS_AVX2.dot_gemm16[k];
#endif
                for (int g = 0; g < 2 && rep % 8 == 0; g++) {
                    DotGemm16Fn gemm16 = gemm16s[g];
                    if (!gemm16) continue;
                    const char *what = g ? "sixteen-row kernel (AVX-512)" : "sixteen-row kernel";
                    const int Ts[] = {1, 4, 7, 16, 20, TILE_T};
                    int T = Ts[rep / 8 % 6];
                    size_t rb = row_bytes(type, n), ab = row_bytes(dot_type(type), n);
                    uint8_t *w16 = xmalloc(16 * rb), *acts = xmalloc((size_t)T * ab);
                    float *yt = xmalloc((size_t)T * 16 * 4);
                    memcpy(w16, w, rb);
                    for (int i = 1; i < 16; i++) random_row(type, w16 + i * rb, n);
                    activation_rows(type, x, n, rep, T, acts, ab);
#if AMX
                    /* other code in the thread may have released the tiles, or configured them its own way and
                     * expect to find them so after the call (llama.cpp's AMX kernels do both) */
                    _Alignas(64) TileConfig other = {.palette = 1, .colsb = {64, 64}, .rows = {3, 5}}, after;
                    if (rep % 16 == 0) _tile_release();
                    else _tile_loadconfig(&other);
#endif
                    gemm16(w16, rb, acts, ab, T, n, yt, 16);
#if AMX
                    _tile_storeconfig(&after);
                    if (rep % 16 && memcmp(&after, &other, sizeof other) && bad++ == 0)
                        snprintf(detail, sizeof detail, "n=%lld, %s: the tile configuration before the call not restored", (long long)n, what);
                    _tile_release();
#endif
                    check_outputs(k, w16, rb, 16, acts, ab, T, n, yt, what, &n_checks, &bad, detail);
                    free(w16), free(acts), free(yt);
                }
                /* the four-weight-row kernel: row 0 this weight row, rows 1..3 others, a row and 64 bytes apart,
                 * against R = 1..W4_MAX_ROWS activation rows (activation_rows) */
                DotW4Fn w4 = kernels()->dot_w4[k];
                for (int R = 1; w4 && R <= W4_MAX_ROWS; R++) {
                    size_t spacing = row_bytes(type, n) + 64;
                    memcpy(w4rows, w, row_bytes(type, n));
                    for (int i = 1; i < 4; i++) random_row(type, w4rows + i * spacing, n);
                    activation_rows(type, x, n, rep, R, rows_act, stride);
                    float out[4 * W4_MAX_ROWS];
                    w4(w4rows, spacing, rows_act, stride, R, n, out);
                    for (int r = 0; r < R; r++)
                        for (int i = 0; i < 4; i++) {
                            float want = KERNELS_PLAIN.dot[k](w4rows + i * spacing, rows_act + r * stride, n);
                            n_checks++;
                            if (memcmp(&want, &out[4 * r + i], 4) && bad++ == 0)
                                snprintf(detail, sizeof detail, "n=%lld, weight row %d of 4, activation row %d of %d: scalar %.9g, simd %.9g",
                                         (long long)n, i, r, R, want, out[4 * r + i]);
                        }
                }
            }
        }
        char name[96];
        snprintf(name, sizeof name, "SIMD dot kernel %d (%s) vs scalar, bit for bit", k, TYPES[type].name);
        check(bad == 0 && n_checks > 0, name, "%d of %d differ; %s", bad, n_checks, detail);
    }
    free(x), free(w), free(act), free(rows_act), free(packed), free(w4rows);
}

/* The forward pass's SIMD twins (the GDN delta rule, the attention's V sum) against their scalar
 * definitions, bit for bit, at sizes with and without 8- and 64-element tails. */
static void test_simd_forward(void) {
    if (!simd_chosen()) {
        check(true, "SIMD delta rule and V sum vs scalar (no SIMD kernels on this CPU or CLOVER_SIMD=scalar: skipped)", "");
        return;
    }
#if defined(__x86_64__)
    const int dims[] = {128, 64, 16, 37, 130};
    int bad = 0, n_checks = 0;
    char detail[160] = "";
    for (size_t s = 0; s < sizeof dims / sizeof dims[0]; s++) {
        int d = dims[s];
        float *S1 = xmalloc((size_t)d * d * 4), *S2 = xmalloc((size_t)d * d * 4), *qkv = xmalloc(3 * (size_t)d * 4);
        float *o1 = xmalloc((size_t)d * 4), *o2 = xmalloc((size_t)d * 4);
        for (int i = 0; i < d * d; i++) S1[i] = S2[i] = rnd_normal();
        for (int rep = 0; rep < 8; rep++) {
            for (int i = 0; i < 3 * d; i++) qkv[i] = rnd_normal() * 0.3f;
            float g = -rnd_uniform(0, 2), beta = rnd_uniform(0, 1);
            delta_rule(S1, qkv, qkv + d, qkv + 2 * d, g, beta, d, o1);
            KERNELS_AVX2.delta_rule(S2, qkv, qkv + d, qkv + 2 * d, g, beta, d, o2);
            n_checks++;
            if ((memcmp(S1, S2, (size_t)d * d * 4) || memcmp(o1, o2, (size_t)d * 4)) && bad++ == 0)
                snprintf(detail, sizeof detail, "delta rule d=%d, step %d", d, rep);
        }
        free(S1), free(S2), free(qkv), free(o1), free(o2);
    }
    const uint32_t types[] = {T_F32, T_F16, T_BF16};
    for (size_t s = 0; s < sizeof dims / sizeof dims[0]; s++)
        for (int ty = 0; ty < 3; ty++)
            for (int lanes = 16; lanes <= 64; lanes *= 4)
                for (int n = 1; n <= 200; n += 33) {
                    int hd = dims[s];
                    size_t vstride = 2 * (size_t)hd * TYPES[types[ty]].bytes;   /* two KV heads per row */
                    uint8_t *V = xmalloc((size_t)n * vstride);
                    float *row = xmalloc(2 * (size_t)hd * 4), *p = xmalloc((size_t)n * 4), *acc = xmalloc(64 * (size_t)hd * 4);
                    float *o1 = xmalloc((size_t)hd * 4), *o2 = xmalloc((size_t)hd * 4);
                    for (int j = 0; j < n; j++) {
                        for (int i = 0; i < 2 * hd; i++) row[i] = rnd_normal();
                        store_as(types[ty], V + (size_t)j * vstride, row, 2 * hd);
                        p[j] = round_as(types[ty], rnd_uniform(0, 1));
                    }
                    const uint8_t *V1 = V + (size_t)hd * TYPES[types[ty]].bytes;   /* the second head */
                    attn_v_sum(types[ty], V1, vstride, p, n, lanes, hd, acc, o1);
                    attn_v_sum_avx2(types[ty], V1, vstride, p, n, lanes, hd, acc, o2);
                    n_checks++;
                    if (memcmp(o1, o2, (size_t)hd * 4) && bad++ == 0)
                        snprintf(detail, sizeof detail, "V sum %s hd=%d lanes=%d n=%d", TYPES[types[ty]].name, hd, lanes, n);
                    free(V), free(row), free(p), free(acc), free(o1), free(o2);
                }
    /* softmax (rows of scores, some -inf padded) and SiLU, over magnitudes that reach the
     * subnormal and overflowing ends of expf_ggml and its scalar fallback, NaN and inf included */
    for (int rep = 0; rep < 400; rep++) {
        int n = 1 + (int)(rnd64() % 300);
        float *x = xmalloc((size_t)n * 4), *a = xmalloc((size_t)n * 4), *b = xmalloc((size_t)n * 4);
        float mag = expf(rnd_uniform(-4, 5.5f));
        for (int i = 0; i < n; i++) x[i] = rnd_normal() * mag;
        if (rep % 7 == 3) x[rnd64() % n] = rep % 2 ? NAN : INFINITY;
        if (rep % 5 == 1) for (int i = n - n % 16; i < n; i++) x[i] = -INFINITY;
        if (rep % 5 == 2) for (int i = (int)(rnd64() % 3); i < n; i += 3) x[i] = -INFINITY;   /* masked keys inside groups */
        silu_row(a, x, n);
        silu_row_avx2(b, x, n);
        n_checks++;
        if (memcmp(a, b, (size_t)n * 4) && bad++ == 0) snprintf(detail, sizeof detail, "silu n=%d scale %g", n, mag);
        memcpy(a, x, (size_t)n * 4), memcpy(b, x, (size_t)n * 4);
        softmax(a, n);
        softmax_avx2(b, n);
        n_checks++;
        if (memcmp(a, b, (size_t)n * 4) && bad++ == 0) snprintf(detail, sizeof detail, "softmax n=%d scale %g", n, mag);
        free(x), free(a), free(b);
    }
    /* the causal conv: several kernel sizes, batches shorter than the ring, channel ranges with tails */
    for (int K = 2; K <= 5; K++)
        for (int T = 1; T <= 9; T += 4) {
            Config c = {.d_conv = K, .conv_dim = 300};
            Layer L = {0};
            float *w = xmalloc((size_t)c.conv_dim * K * 4), *ring = xmalloc((size_t)(K - 1) * c.conv_dim * 4);
            float *u = xmalloc((size_t)T * c.conv_dim * 4), *y1 = xcalloc((size_t)T * c.conv_dim, 4), *y2 = xcalloc((size_t)T * c.conv_dim, 4);
            for (int i = 0; i < c.conv_dim * K; i++) w[i] = rnd_normal();
            for (int i = 0; i < (K - 1) * c.conv_dim; i++) ring[i] = rnd_normal();
            for (int i = 0; i < T * c.conv_dim; i++) u[i] = rnd_normal();
            L.conv = w;
            gdn_conv(L.conv, c.d_conv, c.conv_dim, ring, u, T, 3, 290, y1);
            gdn_conv_avx2(L.conv, c.d_conv, c.conv_dim, ring, u, T, 3, 290, y2);
            n_checks++;
            if (memcmp(y1, y2, (size_t)T * c.conv_dim * 4) && bad++ == 0) snprintf(detail, sizeof detail, "conv K=%d T=%d", K, T);
            free(w), free(ring), free(u), free(y1), free(y2);
        }
    /* rounding to the cache type: random bit patterns (every exponent, NaN and inf among them) */
    for (int ty = 0; ty < 3; ty++)
        for (int rep = 0; rep < 2000; rep++) {
            float a[37], b[37];
            for (int i = 0; i < 37; i++) {
                uint32_t bits = rnd32();
                memcpy(&a[i], &bits, 4);
            }
            memcpy(b, a, sizeof a);
            round_row_as(types[ty], a, 37);
            round_row_as_avx2(types[ty], b, 37);
            n_checks++;
            if (memcmp(a, b, sizeof a) && bad++ == 0) snprintf(detail, sizeof detail, "round to %s", TYPES[types[ty]].name);
        }
    check(bad == 0 && n_checks > 0, "SIMD delta rule, conv, attention V sum, softmax, SiLU, cache rounding vs scalar, bit for bit", "%d of %d differ; %s", bad, n_checks, detail);
#endif
}

/* flash attention's steps (clover.c section 9) vs their AVX2 twins, bit for bit: rows with tails,
 * F32 rows of random bit patterns (NaN, inf, subnormals) read as F16, F16 and BF16 rows */
static void test_fa_simd(void) {
    if (!simd_chosen()) {
        printf("# SIMD kernels not chosen on this CPU (or CLOVER_SIMD=scalar): flash attention twins not compared\n");
        return;
    }
#if defined(__x86_64__)
    const int dims[] = {64, 32, 37, 16, 130, 7, 256, 320};
    const uint32_t types[] = {T_F32, T_F16, T_BF16};
    int bad = 0, n_checks = 0;
    char detail[160] = "";
    for (size_t s = 0; s < sizeof dims / sizeof dims[0]; s++)
        for (int ty = 0; ty < 3; ty++)
            for (int rep = 0; rep < 40; rep++) {
                int hd = dims[s], nt = 1 + (int)(rnd64() % 21);
                uint32_t type = types[ty];
                size_t stride = 2 * (size_t)hd * TYPES[type].bytes;   /* two heads per row */
                uint8_t *K = xmalloc((size_t)nt * stride);
                float *row = xmalloc(2 * (size_t)hd * 4), *q = xmalloc((size_t)hd * 4);
                float *y1 = xmalloc((size_t)hd * 4), *y2 = xmalloc((size_t)hd * 4);
                uint16_t *h1 = xmalloc((size_t)hd * 2), *h2 = xmalloc((size_t)hd * 2);
                for (int j = 0; j < nt; j++) {
                    for (int i = 0; i < 2 * hd; i++) {
                        uint32_t bits = rnd32();
                        if (rep % 4) row[i] = rnd_normal() * 3;
                        else memcpy(&row[i], &bits, 4);
                    }
                    store_as(type, K + (size_t)j * stride, row, 2 * hd);
                }
                for (int i = 0; i < hd; i++) {
                    q[i] = rnd_normal();
                    y1[i] = y2[i] = rnd_normal();
                }
                const uint8_t *K1 = K + (size_t)hd * TYPES[type].bytes;   /* the second head */
                float w = rnd_uniform(0, 1);
                if (type != T_BF16 && hd % 8 == 0) {   /* the tiled path's steps (hd a multiple of 16 there), three heads */
                    float *kt1 = xmalloc(64 * (size_t)hd * 4), *kt2 = xmalloc(64 * (size_t)hd * 4);
                    float *vf1 = xmalloc((size_t)nt * hd * 4), *vf2 = xmalloc((size_t)nt * hd * 4), p[3 * 64], t1[3 * 64], t2[3 * 64];
                    float *q3 = xmalloc(3 * (size_t)hd * 4), *a1 = xmalloc(3 * (size_t)hd * 4), *a2 = xmalloc(3 * (size_t)hd * 4);
                    memset(kt2, 0xff, 64 * (size_t)hd * 4);   /* (stale NaNs: columns past nt must come out zero) */
                    fa_tile(type, K1, stride, type, K, stride, nt, hd, kt1, vf1);
                    KERNELS_AVX2.fa_tile(type, K1, stride, type, K, stride, nt, hd, kt2, vf2);
                    n_checks++;
                    if ((memcmp(kt1, kt2, 64 * (size_t)hd * 4) || memcmp(vf1, vf2, (size_t)nt * hd * 4)) && bad++ == 0)
                        snprintf(detail, sizeof detail, "tile %s hd=%d nt=%d", TYPES[type].name, hd, nt);
                    for (int i = 0; i < 3 * hd; i++) q3[i] = i < hd ? q[i] : rnd_normal(), a1[i] = a2[i] = rnd_normal();
                    for (int i = 0; i < 3 * 64; i++) t1[i] = t2[i] = -INFINITY, p[i] = rnd_uniform(0, 1);
                    fa_scores(q3, hd, 3, kt1, nt, hd, t1);
                    KERNELS_AVX2.fa_scores(q3, hd, 3, kt1, nt, hd, t2);
                    n_checks++;
                    if (memcmp(t1, t2, sizeof t1) && bad++ == 0) snprintf(detail, sizeof detail, "scores %s hd=%d nt=%d", TYPES[type].name, hd, nt);
                    fa_mad_keys(a1, 3, vf1, p, nt, hd);
                    KERNELS_AVX2.fa_mad_keys(a2, 3, vf1, p, nt, hd);
                    n_checks++;
                    if (memcmp(a1, a2, 3 * (size_t)hd * 4) && bad++ == 0) snprintf(detail, sizeof detail, "mad over keys %s hd=%d nt=%d", TYPES[type].name, hd, nt);
                    free(kt1), free(kt2), free(vf1), free(vf2), free(q3), free(a1), free(a2);
                }
                int G = 1 + rep % 6;   /* query heads at once: four, and one at a time */
                if (type != T_BF16) {
                    /* the F16 accumulators of G heads over the nt keys: a third of them raise a head's
                     * max (ms < 1), the accumulators large or of random bits every other time (inf, NaN) */
                    float ms[6 * 64], vs[6 * 64];
                    uint16_t *g1 = xmalloc((size_t)G * hd * 2), *g2 = xmalloc((size_t)G * hd * 2);
                    for (int t = 0; t < G * 64; t++) ms[t] = rnd64() % 3 ? 1 : rnd_uniform(0, 1), vs[t] = rnd_uniform(0, 1);
                    for (int i = 0; i < G * hd; i++)
                        g1[i] = g2[i] = rep % 2 == 0 ? fp32_to_fp16(rnd_normal()) : rep % 4 == 1 ? fp32_to_fp16(rnd_normal() * 1e4f) : (uint16_t)rnd32();
                    fa_mad16_keys(g1, G, type, K1, stride, ms, vs, nt, hd);
                    KERNELS_AVX2.fa_mad16_keys(g2, G, type, K1, stride, ms, vs, nt, hd);
                    n_checks++;
                    if (memcmp(g1, g2, (size_t)G * hd * 2) && bad++ == 0)
                        snprintf(detail, sizeof detail, "F16 mad over %d keys, %d heads, %s hd=%d", nt, G, TYPES[type].name, hd);
                    free(g1), free(g2);
                }
                if (type == T_F16) {   /* the per-row path's K dots of G heads, q rounded to F16 */
                    uint16_t *q16 = xmalloc((size_t)G * hd * 2);
                    float d1[6 * 64], d2[6 * 64];
                    to_f16(q16, q, hd);
                    for (int i = hd; i < G * hd; i++) q16[i] = fp32_to_fp16(rnd_normal());
                    fa_kdots16(q16, G, K1, stride, nt, hd, d1);
                    KERNELS_AVX2.fa_kdots16(q16, G, K1, stride, nt, hd, d2);
                    n_checks++;
                    for (int g = 0; g < G; g++)
                        for (int t = 0; t < nt; t++)   /* a NaN may come out with either sign, as from the dot twins */
                            if (memcmp(&d1[g * 64 + t], &d2[g * 64 + t], 4) && !(isnan(d1[g * 64 + t]) && isnan(d2[g * 64 + t])) && bad++ == 0)
                                snprintf(detail, sizeof detail, "F16 K dots hd=%d nt=%d, head %d of %d", hd, nt, g, G);
                    free(q16);
                }
                fa_mad(y1, type, K1, w, hd);
                fa_mad_avx2(y2, type, K1, w, hd);
                n_checks++;
                if (memcmp(y1, y2, (size_t)hd * 4) && bad++ == 0) snprintf(detail, sizeof detail, "F32 mad %s hd=%d", TYPES[type].name, hd);
                if (type == T_F32) {
                    to_f16(h1, (const float *)K1, hd);
                    to_f16_avx2(h2, (const float *)K1, hd);
                    n_checks++;
                    if (memcmp(h1, h2, (size_t)hd * 2) && bad++ == 0) snprintf(detail, sizeof detail, "to F16 hd=%d", hd);
                }
                free(K), free(row), free(q), free(y1), free(y2), free(h1), free(h2);
            }
    check(bad == 0 && n_checks > 0, "SIMD flash attention steps (tile, scores, mad over keys, F16 K dots, F32 mad, F16 mad and scale over keys, to F16) vs scalar, bit for bit", "%d of %d differ; %s", bad, n_checks, detail);
#endif
}

/* The sampler's top-k (top_k_ids: a heap, then the k sorted) vs the whole vocabulary sorted by the
 * same comparator, its first k ids in order: logits with ties (values on a coarse grid), NaN, +-inf */
static void test_top_k(void) {
    int bad = 0, n_checks = 0;
    char detail[160] = "";
    const int ks[] = {1, 2, 3, 40, 100, 511};
    for (int rep = 0; rep < 60; rep++) {
        int n = 512 + (int)(rnd64() % 3000);
        float *x = xmalloc((size_t)n * 4);
        int *all = xmalloc((size_t)n * 4), *top = xmalloc((size_t)n * 4);
        for (int i = 0; i < n; i++) {
            uint64_t r = rnd64() % 100;
            x[i] = rep % 3 == 0 ? (float)(int)(rnd_normal() * 4) : rnd_normal() * 5;   /* every third: many ties */
            if (rep % 2 && r < 3) x[i] = NAN;
            else if (rep % 2 && r < 5) x[i] = r == 3 ? INFINITY : -INFINITY;
        }
        for (int i = 0; i < n; i++) all[i] = i;
        sort_logits = x;
        qsort(all, (size_t)n, sizeof(int), cmp_by_logit);
        for (size_t j = 0; j <= sizeof ks / sizeof ks[0]; j++) {   /* and k = n: the whole sort */
            int k = j < sizeof ks / sizeof ks[0] ? ks[j] : n;
            top_k_ids(x, n, k, top);
            n_checks++;
            if (memcmp(top, all, (size_t)k * sizeof(int)) && bad++ == 0) snprintf(detail, sizeof detail, "n=%d k=%d rep %d", n, k, rep);
        }
        free(x), free(all), free(top);
    }
    check(bad == 0 && n_checks > 0, "sampler top-k (a heap) vs the whole sort's first k ids, in order (ties, NaN, inf; k up to n)", "%d of %d differ; %s", bad, n_checks, detail);
}

int main(void) {
    test_fp16_to_fp32();
    test_fp32_to_fp16();
    test_bf16();
    test_dequant();
    test_quantize_q8_0();
    test_quantize_q8_K();
    test_dots();
    test_simd_dots();
    test_simd_forward();
    test_round_row_simd();
    test_fa_simd();
    test_top_k();
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
