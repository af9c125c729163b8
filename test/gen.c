/*
 * gen.c — write a random-weight GGUF model for clover.c tests and benchmarks.
 *
 *   build/gen -o FILE [--arch qwen35moe|clover_moe] [--type T] [--shape tiny|real|narrow|micro]
 *             [--layers N] [--vocab N] [--seed S] [--nextn 0|1] [--ctx N]
 *             [--experts N] [--experts-used N] [--mask] [--right-conv] [--reverse]
 *             [--coreset P] [--block-size N] [--shift-logits]
 *
 * The file is a GGUF v3 `qwen35moe` model (README.md, spec S1.1-S1.2) that llama.cpp loads,
 * or its `clover_moe` twin (spec S2.1): the same keys under the
 * `clover_moe.` prefix, the same tensors, plus optional diffusion keys and extra GDN tensors.
 *
 * Every tensor draws its values from its own RNG stream, seeded by (seed, tensor name). So two
 * files made with the same seed and type hold byte-identical copies of every tensor they share,
 * whatever the architecture and extras: a clover_moe twin is the qwen35moe file plus extras.
 * The vocabulary is always the same too (it always contains <|mask|>; --mask only adds the key).
 *
 * Weight values. Float tensors are uniform with the intended standard deviation (std 1 for
 * token_embd, 1/sqrt(ne0) for matrices) so activations stay O(1) and logits are sane.
 * Quantised tensors are not quantised floats: each block is written directly with random bits
 * and scales chosen so the dequantised values are zero-mean with the same standard deviation:
 *   Q8_0  d·q,          q uniform in [-127,127]                 (-128 is replaced by 0)
 *   Q4_0  d·(q-8),      q uniform in 0..15, 0 replaced by 8, so q-8 is in [-7,7] with mean 0
 *   Q4_K  d·sc·q - dmin·m with m = sc and dmin = 7.5·d, i.e. d·sc·(q-7.5), q uniform 0..15
 *   Q5_K  the same with dmin = 15.5·d, q uniform 0..31
 *   Q6_K  d·sc·(q-32),  q uniform 0..63, sub-block scale sc with a random sign
 * Per-block d is jittered by ±20% and sub-block scales are random, so values vary across rows,
 * blocks and sub-blocks. The nominal sub-block scale range is [32,63]; when that would make d a
 * subnormal fp16 (small std, e.g. ne0 = 4096) the range is shrunk instead, so every fp16 scale
 * stored is a finite normal number (>= ~1.6e-4).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

// ------------------------------------------------------------------------------------------------
// ggml tensor types used here

enum { T_F32 = 0, T_F16 = 1, T_Q4_0 = 2, T_Q8_0 = 8, T_Q4_K = 12, T_Q5_K = 13, T_Q6_K = 14, T_BF16 = 30 };

typedef struct { int id; const char *name; int blck; int bytes; } TypeInfo;

static const TypeInfo TYPES[] = {
    { T_F32,  "f32",  1,   4   },
    { T_F16,  "f16",  1,   2   },
    { T_BF16, "bf16", 1,   2   },
    { T_Q8_0, "q8_0", 32,  34  },
    { T_Q4_0, "q4_0", 32,  18  },
    { T_Q4_K, "q4_k", 256, 144 },
    { T_Q5_K, "q5_k", 256, 176 },
    { T_Q6_K, "q6_k", 256, 210 },
};
#define N_TYPES (int)(sizeof(TYPES) / sizeof(TYPES[0]))

static const TypeInfo *type_info(int id) {
    for (int i = 0; i < N_TYPES; i++) if (TYPES[i].id == id) return &TYPES[i];
    fprintf(stderr, "gen: internal error: unknown type %d\n", id);
    exit(1);
}

static void die(const char *msg, const char *arg) {
    fprintf(stderr, "gen: %s%s%s\n", msg, arg ? " " : "", arg ? arg : "");
    exit(1);
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) die("out of memory", NULL);
    return p;
}

static void *xrealloc(void *p, size_t n) {
    p = realloc(p, n ? n : 1);
    if (!p) die("out of memory", NULL);
    return p;
}

// ------------------------------------------------------------------------------------------------
// Random numbers: splitmix64. One 64-bit step gives 8 random bytes, which is what makes
// writing gigabytes of random quant blocks cheap.

typedef struct { uint64_t s; } Rng;

static uint64_t rng_next(Rng *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

// uniform in [0,1) and in [-1,1), 24 bits of resolution (all a float holds)
static float rng_unit(Rng *r) { return (float)(rng_next(r) >> 40) * (1.0f / 16777216.0f); }
static float rng_sym(Rng *r) { return 2.0f * rng_unit(r) - 1.0f; }

static uint64_t fnv1a(const char *s) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ULL;
    return h;
}

// Each tensor gets its own stream, so adding or removing a tensor never shifts another's values.
static Rng rng_for_tensor(uint64_t seed, const char *name) {
    Rng r = { seed ^ fnv1a(name) };
    rng_next(&r);
    r.s ^= rng_next(&r); // decorrelate streams whose seeds differ in few bits
    return r;
}

static void fill_random_bytes(uint8_t *p, int n, Rng *r) { // n is a multiple of 8
    for (int i = 0; i < n; i += 8) {
        uint64_t w = rng_next(r);
        memcpy(p + i, &w, 8);
    }
}

// ------------------------------------------------------------------------------------------------
// fp16 / bf16 conversion (round to nearest even)

static uint16_t f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000, exp8 = (x >> 23) & 0xff, m = x & 0x7fffff;
    if (exp8 == 0xff) return (uint16_t)(sign | 0x7c00 | (m ? 0x200 : 0));
    int e = (int)exp8 - 127 + 15;
    if (e >= 31) return (uint16_t)(sign | 0x7c00);
    if (e <= 0) { // subnormal half (never produced for scales, but keep the conversion correct)
        if (e < -10) return (uint16_t)sign;
        m |= 0x800000;
        int shift = 14 - e;
        uint32_t h = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1))) h++;
        return (uint16_t)(sign | h);
    }
    uint32_t h = ((uint32_t)e << 10) | (m >> 13), rem = m & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++; // a carry into the exponent is correct
    return (uint16_t)(sign | h);
}

static float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, x;
    if (e == 0) {
        float v = (float)m * (1.0f / 16777216.0f); // m · 2^-24
        return sign ? -v : v;
    }
    if (e == 31) x = sign | 0x7f800000 | (m << 13);
    else x = sign | ((e + 112) << 23) | (m << 13);
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static uint16_t f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    return (uint16_t)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

static void put_u16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }

// ------------------------------------------------------------------------------------------------
// Model configuration

typedef struct {
    const char *out, *arch;
    int type;          // a TYPES id, or -1 for the q4_k_m mix
    const char *type_name;
    const char *shape; // --shape: tiny (default), real, narrow, micro
    int n_layer, n_vocab, n_ctx, nextn;
    int n_embd, n_head, n_head_kv, head_dim, n_rot;
    int ssm_groups, ssm_v_heads, ssm_state, ssm_inner, ssm_conv;
    int n_expert, n_expert_used, n_ff_exp, n_ff_shexp;
    int attn_interval;
    float eps, rope_base;
    uint64_t seed;
    int mask, right_conv, reverse, shift_logits, block_size;
    float coreset;
} Config;

static int is_full_attention(const Config *c, int il) {
    return il >= c->n_layer || (il + 1) % c->attn_interval == 0; // the MTP block is attention
}

static int conv_dim(const Config *c) { return 2 * c->ssm_groups * c->ssm_state + c->ssm_inner; }

// ------------------------------------------------------------------------------------------------
// Tensor table

// How a tensor's values are drawn.
enum { FILL_MATRIX, FILL_NORM, FILL_SSM_A, FILL_DT_BIAS, FILL_CONV, FILL_REV_MIX };

// What a matrix is, for picking its storage type (the q4_k_m mix is per role).
enum {
    R_NONE, R_EMBD, R_OUTPUT, R_ATTN_Q, R_ATTN_K, R_ATTN_V, R_ATTN_OUT, R_ATTN_QKV, R_ATTN_GATE,
    R_SSM_OUT, R_SSM_ALPHA, R_SSM_BETA, R_ROUTER, R_EXP_GATE, R_EXP_UP, R_EXP_DOWN, R_SHEXP, R_EH_PROJ
};

typedef struct {
    char name[64];
    int n_dims;
    uint64_t ne[3];
    int type, fill;
    float sigma;              // std of FILL_MATRIX values
    uint64_t offset, nbytes;  // offset relative to the data section
} Tensor;

typedef struct { Tensor *t; int n, cap; } TensorList;

// Storage type of a matrix in the q4_k_m mix (modelled on a real Q4_K_M Qwen3.6 file).
static int q4_k_m_type(int role, int il) {
    switch (role) {
    case R_OUTPUT: case R_ATTN_V: return T_Q6_K;
    case R_EXP_DOWN: return il % 2 == 0 ? T_Q5_K : T_Q6_K;
    case R_SHEXP: return T_Q8_0;
    case R_SSM_ALPHA: case R_SSM_BETA: return il == 0 ? T_BF16 : T_F32;
    case R_ROUTER: return T_F32;
    default: return T_Q4_K; // embd, attention, GDN projections, gate/up experts, nextn eh_proj
    }
}

// What llama-quantize does with a row length the block size does not divide.
static int fallback_type(int type, uint64_t ne0) {
    int blck = type_info(type)->blck;
    if (ne0 % (uint64_t)blck == 0) return type;
    return ne0 % 32 == 0 ? T_Q8_0 : T_F32;
}

static int matrix_type(const Config *c, int role, int il, uint64_t ne0) {
    int t;
    if (c->type < 0) t = q4_k_m_type(role, il);
    else if (role == R_ROUTER) t = (c->type == T_F16 || c->type == T_BF16) ? c->type : T_F32;
    else t = c->type;
    return fallback_type(t, ne0);
}

static Tensor *add_tensor(TensorList *l, const char *name, int n_dims, uint64_t ne0, uint64_t ne1, uint64_t ne2) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 256;
        l->t = xrealloc(l->t, (size_t)l->cap * sizeof(Tensor));
    }
    Tensor *t = &l->t[l->n++];
    memset(t, 0, sizeof *t);
    if (strlen(name) >= sizeof t->name) die("tensor name too long:", name);
    strcpy(t->name, name);
    t->n_dims = n_dims;
    t->ne[0] = ne0; t->ne[1] = ne1; t->ne[2] = ne2;
    return t;
}

// A 1-D or small F32 tensor (norms, ssm_a, biases, conv taps): never quantised.
static void add_f32(TensorList *l, const char *name, int fill, uint64_t ne0, uint64_t ne1) {
    Tensor *t = add_tensor(l, name, ne1 > 1 ? 2 : 1, ne0, ne1, 1);
    t->type = T_F32;
    t->fill = fill;
}

static void add_matrix(TensorList *l, const Config *c, const char *name, int role, int il,
                       uint64_t ne0, uint64_t ne1, uint64_t ne2, float sigma) {
    Tensor *t = add_tensor(l, name, ne2 > 1 ? 3 : 2, ne0, ne1, ne2);
    t->type = matrix_type(c, role, il, ne0);
    t->fill = FILL_MATRIX;
    t->sigma = sigma;
}

static const char *blk(int il, const char *suffix) {
    static char buf[64];
    snprintf(buf, sizeof buf, "blk.%d.%s", il, suffix);
    return buf;
}

static void add_attention(TensorList *l, const Config *c, int il) {
    uint64_t E = c->n_embd, D = c->head_dim, q_dim = (uint64_t)c->n_head * D, kv_dim = (uint64_t)c->n_head_kv * D;
    float se = 1.0f / sqrtf((float)E);
    add_matrix(l, c, blk(il, "attn_q.weight"), R_ATTN_Q, il, E, 2 * q_dim, 1, se); // q and gate, per head
    add_matrix(l, c, blk(il, "attn_k.weight"), R_ATTN_K, il, E, kv_dim, 1, se);
    add_matrix(l, c, blk(il, "attn_v.weight"), R_ATTN_V, il, E, kv_dim, 1, se);
    add_f32(l, blk(il, "attn_q_norm.weight"), FILL_NORM, D, 1);
    add_f32(l, blk(il, "attn_k_norm.weight"), FILL_NORM, D, 1);
    add_matrix(l, c, blk(il, "attn_output.weight"), R_ATTN_OUT, il, q_dim, E, 1, 1.0f / sqrtf((float)q_dim));
}

static void add_gdn(TensorList *l, const Config *c, int il) {
    uint64_t E = c->n_embd, V = c->ssm_v_heads, C = conv_dim(c), inner = c->ssm_inner;
    float se = 1.0f / sqrtf((float)E);
    add_matrix(l, c, blk(il, "attn_qkv.weight"), R_ATTN_QKV, il, E, C, 1, se);
    add_matrix(l, c, blk(il, "attn_gate.weight"), R_ATTN_GATE, il, E, inner, 1, se);
    add_matrix(l, c, blk(il, "ssm_beta.weight"), R_SSM_BETA, il, E, V, 1, se);
    add_matrix(l, c, blk(il, "ssm_alpha.weight"), R_SSM_ALPHA, il, E, V, 1, se);
    add_f32(l, blk(il, "ssm_conv1d.weight"), FILL_CONV, c->ssm_conv, C);
    add_f32(l, blk(il, "ssm_dt.bias"), FILL_DT_BIAS, V, 1);
    add_f32(l, blk(il, "ssm_a"), FILL_SSM_A, V, 1);
    add_f32(l, blk(il, "ssm_norm.weight"), FILL_NORM, c->ssm_state, 1);
    add_matrix(l, c, blk(il, "ssm_out.weight"), R_SSM_OUT, il, inner, E, 1, 1.0f / sqrtf((float)inner));
}

// the clover_moe extras of GDN layer il (spec S2.1)
static void add_gdn_extras(TensorList *l, const Config *c, int il) {
    uint64_t E = c->n_embd, V = c->ssm_v_heads, C = conv_dim(c);
    float se = 1.0f / sqrtf((float)E);
    if (c->right_conv) add_f32(l, blk(il, "ssm_conv1d_right.weight"), FILL_CONV, 3, C);
    if (c->reverse) {
        add_f32(l, blk(il, "ssm_a_rev"), FILL_SSM_A, V, 1);
        add_f32(l, blk(il, "ssm_dt_rev.bias"), FILL_DT_BIAS, V, 1);
        add_matrix(l, c, blk(il, "ssm_alpha_rev.weight"), R_SSM_ALPHA, il, E, V, 1, se);
        add_matrix(l, c, blk(il, "ssm_beta_rev.weight"), R_SSM_BETA, il, E, V, 1, se);
        add_f32(l, blk(il, "ssm_rev_mix"), FILL_REV_MIX, V, 1);
    }
}

static void add_moe(TensorList *l, const Config *c, int il) {
    uint64_t E = c->n_embd, X = c->n_expert, F = c->n_ff_exp, S = c->n_ff_shexp;
    float se = 1.0f / sqrtf((float)E);
    // the router is 3x wider than a plain matrix so routing is far from uniform
    add_matrix(l, c, blk(il, "ffn_gate_inp.weight"), R_ROUTER, il, E, X, 1, 3.0f * se);
    add_matrix(l, c, blk(il, "ffn_gate_exps.weight"), R_EXP_GATE, il, E, F, X, se);
    add_matrix(l, c, blk(il, "ffn_up_exps.weight"), R_EXP_UP, il, E, F, X, se);
    add_matrix(l, c, blk(il, "ffn_down_exps.weight"), R_EXP_DOWN, il, F, E, X, 1.0f / sqrtf((float)F));
    Tensor *g = add_tensor(l, blk(il, "ffn_gate_inp_shexp.weight"), 1, E, 1, 1);
    g->type = T_F32; g->fill = FILL_MATRIX; g->sigma = se;
    add_matrix(l, c, blk(il, "ffn_gate_shexp.weight"), R_SHEXP, il, E, S, 1, se);
    add_matrix(l, c, blk(il, "ffn_up_shexp.weight"), R_SHEXP, il, E, S, 1, se);
    add_matrix(l, c, blk(il, "ffn_down_shexp.weight"), R_SHEXP, il, S, E, 1, 1.0f / sqrtf((float)S));
}

static void build_tensors(TensorList *l, const Config *c) {
    uint64_t E = c->n_embd;
    add_matrix(l, c, "token_embd.weight", R_EMBD, -1, E, c->n_vocab, 1, 1.0f);
    add_f32(l, "output_norm.weight", FILL_NORM, E, 1);
    add_matrix(l, c, "output.weight", R_OUTPUT, -1, E, c->n_vocab, 1, 1.0f / sqrtf((float)E));
    int n_blocks = c->n_layer + c->nextn;
    for (int il = 0; il < n_blocks; il++) {
        add_f32(l, blk(il, "attn_norm.weight"), FILL_NORM, E, 1);
        add_f32(l, blk(il, "post_attention_norm.weight"), FILL_NORM, E, 1);
        if (is_full_attention(c, il)) add_attention(l, c, il);
        else add_gdn(l, c, il);
        add_moe(l, c, il);
        if (il >= c->n_layer) { // the MTP block (ignored by the runtime)
            add_matrix(l, c, blk(il, "nextn.eh_proj.weight"), R_EH_PROJ, il, 2 * E, E, 1, 1.0f / sqrtf((float)(2 * E)));
            add_f32(l, blk(il, "nextn.enorm.weight"), FILL_NORM, E, 1);
            add_f32(l, blk(il, "nextn.hnorm.weight"), FILL_NORM, E, 1);
        }
    }
    // the clover_moe extras last: dropping them (test/gguf_edit.py --drop-tensor) leaves a qwen35moe
    // twin whose tensor data is contiguous, as llama.cpp's loader requires (test/bench.sh)
    for (int il = 0; il < n_blocks; il++)
        if (!is_full_attention(c, il)) add_gdn_extras(l, c, il);
}

static uint64_t tensor_nbytes(const Tensor *t) {
    const TypeInfo *ti = type_info(t->type);
    return t->ne[0] / (uint64_t)ti->blck * (uint64_t)ti->bytes * t->ne[1] * t->ne[2];
}

#define ALIGN 32
static uint64_t align_up(uint64_t x) { return (x + ALIGN - 1) / ALIGN * ALIGN; }

static uint64_t layout_tensors(TensorList *l) {
    uint64_t off = 0;
    for (int i = 0; i < l->n; i++) {
        l->t[i].nbytes = tensor_nbytes(&l->t[i]);
        l->t[i].offset = off;
        off = align_up(off + l->t[i].nbytes);
    }
    return off;
}

// ------------------------------------------------------------------------------------------------
// Tensor values

#define SQRT3 1.7320508f

static float fill_value(const Tensor *t, Rng *r) {
    float u = rng_sym(r); // uniform noise with std 1/sqrt(3)
    switch (t->fill) {
    case FILL_NORM:    return 1.0f + 0.1f * SQRT3 * u;  // norm weights have the +1 baked in
    case FILL_SSM_A:   return -expf(u);                 // -exp(A_log), always negative
    case FILL_DT_BIAS: return 0.5f * SQRT3 * u;
    case FILL_CONV:    return 0.5f * SQRT3 * u;
    case FILL_REV_MIX: return 0.5f + 0.25f * u;
    default:           return t->sigma * SQRT3 * u;
    }
}

// Scales of a quantised tensor: nominal block scale d and the range of the sub-block scales.
typedef struct { float d; int sc_lo, sc_hi; } QuantScale;

#define D_MIN 2e-4f // smallest nominal fp16 scale; with the ±20% jitter it stays >= 1.6e-4, normal

// d such that d·sc·q has standard deviation sigma, for sc uniform in [lo, hi] and q of std q_std
static float scale_for(float sigma, float q_std, int lo, int hi) {
    double sum_sq = 0;
    for (int k = lo; k <= hi; k++) sum_sq += (double)k * k;
    return sigma / (sqrtf((float)(sum_sq / (hi - lo + 1))) * q_std);
}

// q_std: std of the integer factor of a value (e.g. q-7.5 for Q4_K). sc_max: largest sub-block
// scale (0 for types without sub-blocks). Sub-block scales are uniform in [sc_max/2+1, sc_max];
// the range is lowered until d is a comfortably normal fp16.
static QuantScale quant_scale(float sigma, float q_std, int sc_max) {
    QuantScale s = { 0, 1, 1 };
    if (sc_max) {
        for (s.sc_hi = sc_max;; s.sc_hi--) {
            s.sc_lo = s.sc_hi / 2 + 1;
            if (s.sc_hi == 2 || scale_for(sigma, q_std, s.sc_lo, s.sc_hi) >= D_MIN) break;
        }
    }
    s.d = scale_for(sigma, q_std, s.sc_lo, s.sc_hi);
    if (s.d < D_MIN) s.d = D_MIN; // only for tiny sigma, which this generator never asks for
    return s;
}

static float jitter(float d, Rng *r) { return d * (0.8f + 0.4f * rng_unit(r)); }

static void rand_scales(int *sc, int n, const QuantScale *s, Rng *r) {
    uint64_t w = rng_next(r);
    int span = s->sc_hi - s->sc_lo + 1;
    for (int i = 0; i < n; i++) {
        if (i % 8 == 0 && i) w = rng_next(r);
        sc[i] = s->sc_lo + (int)((w >> (8 * (i % 8))) & 0xff) % span;
    }
}

static void gen_q8_0(uint8_t *b, const QuantScale *s, Rng *r) {
    put_u16(b, f32_to_f16(jitter(s->d, r)));
    fill_random_bytes(b + 2, 32, r);
    for (int i = 2; i < 34; i++) if (b[i] == 0x80) b[i] = 0; // -128 -> 0: symmetric, zero mean
}

static void gen_q4_0(uint8_t *b, const QuantScale *s, Rng *r) {
    put_u16(b, f32_to_f16(jitter(s->d, r)));
    uint8_t tmp[16];
    fill_random_bytes(tmp, 16, r);
    for (int i = 0; i < 16; i++) { // nibble 0 -> 8 so q-8 is symmetric in [-7,7]
        uint8_t lo = tmp[i] & 15, hi = tmp[i] >> 4;
        if (!lo) lo = 8;
        if (!hi) hi = 8;
        b[2 + i] = (uint8_t)(lo | hi << 4);
    }
}

// Pack eight 6-bit (scale, min) pairs the way get_scale_min_k4 reads them.
static void pack_scales_k4(uint8_t *s, const int *sc, const int *m) {
    for (int j = 0; j < 4; j++) {
        s[j]     = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        s[j + 4] = (uint8_t)((m[j] & 63) | ((m[j + 4] >> 4) << 6));
        s[j + 8] = (uint8_t)((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
    }
}

// Q4_K and Q5_K: value = d·sc·q - dmin·m. With m = sc and dmin = centre·d this is d·sc·(q - centre),
// zero-mean for uniform q.
static void gen_k_with_min(uint8_t *b, const QuantScale *s, Rng *r, float centre) {
    uint16_t d = f32_to_f16(jitter(s->d, r));
    put_u16(b, d);
    put_u16(b + 2, f32_to_f16(centre * f16_to_f32(d)));
    int sc[8];
    rand_scales(sc, 8, s, r);
    pack_scales_k4(b + 4, sc, sc);
}

static void gen_q4_k(uint8_t *b, const QuantScale *s, Rng *r) {
    gen_k_with_min(b, s, r, 7.5f);
    fill_random_bytes(b + 16, 128, r); // qs
}

static void gen_q5_k(uint8_t *b, const QuantScale *s, Rng *r) {
    gen_k_with_min(b, s, r, 15.5f);
    fill_random_bytes(b + 16, 32 + 128, r); // qh then qs: every bit of q is uniform
}

static void gen_q6_k(uint8_t *b, const QuantScale *s, Rng *r) {
    fill_random_bytes(b, 128 + 64, r); // ql, qh
    int sc[16];
    rand_scales(sc, 16, s, r);
    uint64_t signs = rng_next(r);
    for (int i = 0; i < 16; i++) b[192 + i] = (uint8_t)(int8_t)((signs >> i & 1) ? -sc[i] : sc[i]);
    put_u16(b + 208, f32_to_f16(jitter(s->d, r)));
}

#define CHUNK (8u << 20) // bytes generated per fwrite

static void write_float_data(FILE *f, const Tensor *t, Rng *r, uint8_t *buf) {
    int esize = type_info(t->type)->bytes;
    uint64_t n = t->ne[0] * t->ne[1] * t->ne[2], per_chunk = CHUNK / (uint64_t)esize;
    for (uint64_t done = 0; done < n;) {
        uint64_t k = n - done < per_chunk ? n - done : per_chunk;
        for (uint64_t i = 0; i < k; i++) {
            float v = fill_value(t, r);
            if (t->type == T_F32) memcpy(buf + 4 * i, &v, 4);
            else put_u16(buf + 2 * i, t->type == T_F16 ? f32_to_f16(v) : f32_to_bf16(v));
        }
        if (fwrite(buf, (size_t)(k * (uint64_t)esize), 1, f) != 1) die("write failed", NULL);
        done += k;
    }
}

static void write_quant_data(FILE *f, const Tensor *t, Rng *r, uint8_t *buf) {
    const TypeInfo *ti = type_info(t->type);
    void (*gen)(uint8_t *, const QuantScale *, Rng *);
    QuantScale s;
    switch (t->type) {
    case T_Q8_0: gen = gen_q8_0; s = quant_scale(t->sigma, 73.6f, 0); break;     // std of q in [-127,127]
    case T_Q4_0: gen = gen_q4_0; s = quant_scale(t->sigma, 4.18f, 0); break;     // std of q-8 in [-7,7]
    case T_Q4_K: gen = gen_q4_k; s = quant_scale(t->sigma, 4.61f, 63); break;    // std of uniform 0..15
    case T_Q5_K: gen = gen_q5_k; s = quant_scale(t->sigma, 9.23f, 63); break;    // std of uniform 0..31
    case T_Q6_K: gen = gen_q6_k; s = quant_scale(t->sigma, 18.47f, 63); break;   // std of uniform -32..31
    default: die("internal error: not a quant type", t->name); return;
    }
    uint64_t n_blocks = t->ne[0] * t->ne[1] * t->ne[2] / (uint64_t)ti->blck;
    uint64_t per_chunk = CHUNK / (uint64_t)ti->bytes;
    for (uint64_t done = 0; done < n_blocks;) {
        uint64_t k = n_blocks - done < per_chunk ? n_blocks - done : per_chunk;
        for (uint64_t i = 0; i < k; i++) gen(buf + i * (uint64_t)ti->bytes, &s, r);
        if (fwrite(buf, (size_t)(k * (uint64_t)ti->bytes), 1, f) != 1) die("write failed", NULL);
        done += k;
    }
}

static void write_tensor_data(FILE *f, const Tensor *t, uint64_t seed, uint8_t *buf) {
    Rng r = rng_for_tensor(seed, t->name);
    if (type_info(t->type)->blck == 1) write_float_data(f, t, &r, buf);
    else write_quant_data(f, t, &r, buf);
}

// ------------------------------------------------------------------------------------------------
// Tokenizer: byte-level BPE learned from a small embedded multilingual corpus.

// The corpus exercises what the qwen35 pre-tokenizer distinguishes: contractions, letter runs with
// a leading space, single digits, punctuation runs, whitespace runs and newlines, code indentation,
// accented Latin (precomposed and with combining marks), Greek, Cyrillic, CJK, Hangul and emoji.
static const char *CORPUS[] = {
    "The quick brown fox jumps over the lazy dog. I don't think we'll ever know why it's there, "
    "but I'll keep looking. You're right: they've been here before, and we'd seen them too. "
    "She's the one who'd know; isn't she? I'm not sure what they're doing, and I can't say "
    "I haven't tried. We're going to the market, and then we'll go home. It's a long way home.\n",
    "When the weather is good, the people in the town go to the river. The river is long and the "
    "water is cold, but the children don't mind. They swim, they play, and they laugh. In the "
    "evening, the parents call them home, and the children walk back along the road, tired and happy. "
    "The town is quiet again, and the river keeps running through the night.\n\n",
    "Reading, writing and thinking are the things that matter. Nothing is more important than "
    "learning how to learn. Teachers, students and parents: everyone is learning something.\n",
    "def tokenize(text):\n    tokens = []\n    for word in text.split():\n        if word:\n"
    "            tokens.append(word.lower())\n    return tokens\n\n\n"
    "def main():\n    text = \"Hello, world! Hello again.\"\n    print(tokenize(text))\n\n"
    "if __name__ == \"__main__\":\n    main()\n",
    "int main(int argc, char **argv) {\n\tfor (int i = 0; i < argc; i++) {\n\t\tprintf(\"%d: %s\\n\", i, argv[i]);\n"
    "\t}\n\treturn 0;\n}\n\nstatic float dot(const float *a, const float *b, int n) {\n"
    "    float sum = 0.0f;\n    for (int i = 0; i < n; i++) sum += a[i] * b[i];\n    return sum;\n}\n",
    "In 2024 the population was 1,234,567 and in 2025 it was 1,250,000. The value of pi is about "
    "3.14159265358979, and e is about 2.71828. Call 555-0100 or 555-0199 before 10:30 on 12/31/2025. "
    "Prices: $19.99, $5.00, 100%, 42 items, 7 days, 365 days.\n",
    "Lots   of    spaces     here.\n\n\n    Indented line.\n\t\tTabbed line.\n   \n  trailing   \n",
    "!!! ??? ... --- *** ### @@@ ((( ))) [[[ ]]] {{{ }}} <<< >>> === +++ /// \\\\\\ ||| &&& ;;; ::: ,,, ''' \"\"\"\n"
    "a = b + c; x -= 1; y *= 2; z /= 3; if (a >= b && c <= d || e != f) { return; }\n",
    "Le caf\xc3\xa9 est tr\xc3\xa8s bon. O\xc3\xb9 est la biblioth\xc3\xa8que ? L'\xc3\xa9t\xc3\xa9 dernier, nous \xc3\xa9tions "
    "\xc3\xa0 Montr\xc3\xa9" "al. Voil\xc3\xa0 une id\xc3\xa9" "e na\xc3\xafve et d\xc3\xa9j\xc3\xa0 vue.\n",
    "El ni\xc3\xb1o comi\xc3\xb3 una manzana. \xc2\xbf" "D\xc3\xb3nde est\xc3\xa1 la estaci\xc3\xb3n? \xc2\xa1Qu\xc3\xa9 bonito d\xc3\xad" "a! "
    "Die Stra\xc3\x9f" "e ist sch\xc3\xb6n, und die M\xc3\xa4" "dchen sind gl\xc3\xbc" "cklich. \xc3\x9c" "ber alles, sch\xc3\xb6ne Gr\xc3\xbc\xc3\x9f" "e. "
    "S\xc3\xa3o Paulo \xc3\xa9 uma cidade grande. Ti\xe1\xba\xbfng Vi\xe1\xbb\x87t r\xe1\xba\xa5t hay.\n",
    // combining marks: e + U+0301, a + U+0300, n + U+0303, o + U+0308
    "Cafe\xcc\x81 cafe\xcc\x81 re\xcc\x81sume\xcc\x81 na\xcc\x80 pin\xcc\x83" "a pin\xcc\x83" "ata co\xcc\x88operate co\xcc\x88operation.\n",
    "\xce\x97 \xce\xb3\xce\xbb\xcf\x8e\xcf\x83\xcf\x83\xce\xb1 \xce\xb5\xce\xaf\xce\xbd\xce\xb1\xce\xb9 \xcf\x89\xcf\x81\xce\xb1\xce\xaf\xce\xb1. "
    "\xce\x9a\xce\xb1\xce\xbb\xce\xb7\xce\xbc\xce\xad\xcf\x81\xce\xb1 \xce\xba\xcf\x8c\xcf\x83\xce\xbc\xce\xb5! \xce\xb1\xce\xb2\xce\xb3 \xce\xb1\xce\xb2\xce\xb3\xce\xb4.\n",
    "\xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82, \xd0\xbc\xd0\xb8\xd1\x80! \xd0\x9a\xd0\xb0\xd0\xba \xd0\xb4\xd0\xb5\xd0\xbb\xd0\xb0? "
    "\xd0\xa1\xd0\xbf\xd0\xb0\xd1\x81\xd0\xb8\xd0\xb1\xd0\xbe, \xd1\x85\xd0\xbe\xd1\x80\xd0\xbe\xd1\x88\xd0\xbe. \xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82 "
    "\xd0\xb5\xd1\x89\xd1\x91 \xd1\x80\xd0\xb0\xd0\xb7, \xd0\xbc\xd0\xb8\xd1\x80.\n",
    "\xe4\xbd\xa0\xe5\xa5\xbd\xef\xbc\x8c\xe4\xb8\x96\xe7\x95\x8c\xef\xbc\x81\xe6\x88\x91\xe4\xbb\xac\xe5\xad\xa6\xe4\xb9\xa0\xe4\xb8\xad\xe6\x96\x87\xe3\x80\x82"
    "\xe4\xbd\xa0\xe5\xa5\xbd\xe5\x90\x97\xef\xbc\x9f\xe6\x88\x91\xe5\xbe\x88\xe5\xa5\xbd\xe3\x80\x82"
    "\xe3\x81\x93\xe3\x82\x93\xe3\x81\xab\xe3\x81\xa1\xe3\x81\xaf\xe3\x80\x81\xe4\xb8\x96\xe7\x95\x8c\xe3\x80\x82"
    "\xe3\x81\x93\xe3\x82\x93\xe3\x81\xab\xe3\x81\xa1\xe3\x81\xaf\xe3\x80\x82"
    "\xec\x95\x88\xeb\x85\x95\xed\x95\x98\xec\x84\xb8\xec\x9a\x94 \xec\x84\xb8\xea\xb3\x84 \xec\x95\x88\xeb\x85\x95\xed\x95\x98\xec\x84\xb8\xec\x9a\x94.\n",
    "Emoji: \xf0\x9f\x98\x80 \xf0\x9f\x98\x80\xf0\x9f\x98\x80 \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd \xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7 "
    "\xe2\x9d\xa4\xef\xb8\x8f \xf0\x9f\x9a\x80 \xf0\x9f\x98\x80 \xf0\x9f\x9a\x80\xf0\x9f\x9a\x80.\n",
    "User: What's the weather like today?\nAssistant: It's sunny and warm, about 25 degrees. "
    "Don't forget your hat!\nUser: Thanks, I'll remember that.\nAssistant: You're welcome.\n",
    "The model reads the tokens, the layers transform the hidden state, and the output layer "
    "predicts the next token. Attention layers look at the whole context; recurrent layers keep a "
    "state. Experts are selected by the router, and the shared expert is always used.\n",
};
#define N_CORPUS (int)(sizeof(CORPUS) / sizeof(CORPUS[0]))

// Special tokens, stored at the end of the vocabulary in this order, as plain (unmapped) text.
static const struct { const char *text; int type; } SPECIALS[] = {
    { "<|endoftext|>", 3 }, { "<|im_start|>", 3 }, { "<|im_end|>", 3 }, { "<think>", 3 },
    { "</think>", 3 }, { "<tool_call>", 3 }, { "</tool_call>", 3 }, { "<custom>", 4 }, { "<|mask|>", 3 },
};
#define N_SPECIALS (int)(sizeof(SPECIALS) / sizeof(SPECIALS[0]))

#define MAX_MERGES 4000 // enough for the tiny vocab; larger vocabs are padded with unused tokens

// GPT-2 byte -> code point map: printable Latin-1 bytes map to themselves, the other 68 bytes to
// U+0100 + n in increasing byte order (space -> U+0120 'Ġ', '\n' -> U+010A 'Ċ').
static int byte_to_cp(int b) {
    if ((b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff)) return b;
    int n = 0;
    for (int x = 0; x < b; x++)
        if (!((x >= 0x21 && x <= 0x7e) || (x >= 0xa1 && x <= 0xac) || (x >= 0xae && x <= 0xff))) n++;
    return 0x100 + n;
}

static int put_utf8(char *out, int cp) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) { out[0] = (char)(0xc0 | cp >> 6); out[1] = (char)(0x80 | (cp & 63)); return 2; }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | cp >> 12); out[1] = (char)(0x80 | ((cp >> 6) & 63)); out[2] = (char)(0x80 | (cp & 63));
        return 3;
    }
    out[0] = (char)(0xf0 | cp >> 18); out[1] = (char)(0x80 | ((cp >> 12) & 63));
    out[2] = (char)(0x80 | ((cp >> 6) & 63)); out[3] = (char)(0x80 | (cp & 63));
    return 4;
}

// Decode one UTF-8 code point at s (len bytes left); invalid input becomes U+FFFD, 1 byte.
static int get_utf8(const unsigned char *s, int len, int *cp) {
    int n = s[0] < 0x80 ? 1 : (s[0] >> 5) == 6 ? 2 : (s[0] >> 4) == 14 ? 3 : (s[0] >> 3) == 30 ? 4 : 0;
    if (n == 0 || n > len) { *cp = 0xfffd; return 1; }
    int c = n == 1 ? s[0] : s[0] & (0x7f >> n);
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80) { *cp = 0xfffd; return 1; }
        c = c << 6 | (s[i] & 63);
    }
    *cp = c;
    return n;
}

// Approximate Unicode classes, good enough for the scripts in the corpus.
static int is_space(int c) {
    return (c >= 9 && c <= 13) || c == 0x20 || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}
static int is_digit(int c) { return c >= '0' && c <= '9'; }
static int is_mark(int c) {
    return (c >= 0x300 && c <= 0x36f) || (c >= 0x483 && c <= 0x489) || (c >= 0x20d0 && c <= 0x20ff) ||
           (c >= 0xfe00 && c <= 0xfe0f) || (c >= 0xfe20 && c <= 0xfe2f) || (c >= 0x3099 && c <= 0x309a);
}
static int is_letter(int c) {
    if (c < 0x80) return (c | 32) >= 'a' && (c | 32) <= 'z';
    if (c == 0xaa || c == 0xb5 || c == 0xba) return 1;
    if (c >= 0xc0 && c <= 0x2c1) return c != 0xd7 && c != 0xf7;
    if (c >= 0x370 && c <= 0x3ff) return c != 0x375 && c != 0x37e && c != 0x384 && c != 0x385 && c != 0x387;
    if (c >= 0x400 && c <= 0x52f) return !(c >= 0x482 && c <= 0x489);
    return (c >= 0x531 && c <= 0x587) || (c >= 0x5d0 && c <= 0x5ea) || (c >= 0x620 && c <= 0x64a) ||
           (c >= 0xe01 && c <= 0xe30) || (c >= 0x1e00 && c <= 0x1fff) || (c >= 0x3041 && c <= 0x3096) ||
           (c >= 0x30a1 && c <= 0x30fa) || (c >= 0x3400 && c <= 0x4dbf) || (c >= 0x4e00 && c <= 0x9fff) ||
           (c >= 0xac00 && c <= 0xd7a3) || (c >= 0xf900 && c <= 0xfaff);
}
static int is_lm(int c) { return is_letter(c) || is_mark(c); }
static int is_other(int c) { return !is_space(c) && !is_lm(c) && !is_digit(c); }
static int is_nl(int c) { return c == '\r' || c == '\n'; }
static int lower_ascii(int c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

// Length, in code points, of the pre-token starting at cp[i] (qwen35 rules, spec S1.9).
static int pretoken_len(const int *cp, int n, int i) {
    int c = cp[i];
    if (c == '\'' && i + 1 < n) { // contractions
        int c1 = lower_ascii(cp[i + 1]);
        if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
        if (i + 2 < n) {
            int c2 = lower_ascii(cp[i + 2]);
            if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
        }
    }
    if (!is_nl(c) && !is_digit(c) && (is_lm(c) || (i + 1 < n && is_lm(cp[i + 1])))) { // letter run
        int j = i + 1;
        while (j < n && is_lm(cp[j])) j++;
        return j - i;
    }
    if (is_digit(c)) return 1; // numbers split into single digits
    int f = (c == ' ' && i + 1 < n) ? cp[i + 1] : c;
    if (is_other(f)) { // punctuation run with optional leading space and trailing newlines
        int j = c == ' ' ? i + 1 : i;
        while (j < n && is_other(cp[j])) j++;
        while (j < n && is_nl(cp[j])) j++;
        return j - i;
    }
    if (is_space(c)) {
        int j = i, last_nl = -1;
        while (j < n && is_space(cp[j])) { if (is_nl(cp[j])) last_nl = j; j++; }
        if (last_nl >= 0) return last_nl + 1 - i;   // \s*[\r\n]+
        if (j - i > 1 && j < n) return j - i - 1;    // \s+(?!\S): leave one space for the next word
        return j - i;
    }
    return 1;
}

// A string -> int hash table (open addressing), used for the vocabulary and the corpus words.
typedef struct { char **key; int *val; int cap, n; } StrMap;

static uint64_t hash_bytes(const char *s) { return fnv1a(s); }

static void strmap_init(StrMap *m, int cap) {
    m->cap = cap; m->n = 0;
    m->key = xmalloc((size_t)cap * sizeof(char *));
    m->val = xmalloc((size_t)cap * sizeof(int));
    memset(m->key, 0, (size_t)cap * sizeof(char *));
}

static int *strmap_slot(StrMap *m, const char *k, int insert) {
    if (insert && 2 * (m->n + 1) > m->cap) { // grow
        StrMap g;
        strmap_init(&g, 2 * m->cap);
        for (int i = 0; i < m->cap; i++) if (m->key[i]) *strmap_slot(&g, m->key[i], 1) = m->val[i];
        free(m->key); free(m->val);
        *m = g;
    }
    uint64_t h = hash_bytes(k) & (uint64_t)(m->cap - 1);
    while (m->key[h]) {
        if (!strcmp(m->key[h], k)) return &m->val[h];
        h = (h + 1) & (uint64_t)(m->cap - 1);
    }
    if (!insert) return NULL;
    m->key[h] = strdup(k);
    if (!m->key[h]) die("out of memory", NULL);
    m->val[h] = 0;
    m->n++;
    return &m->val[h];
}

typedef struct {
    int n, cap;
    char **text; // as stored in GGUF (normal tokens byte-mapped, specials plain)
    int *type;
    StrMap ids;
    int n_merges;
    char **merges;
} Vocab;

static int vocab_find(Vocab *v, const char *text) {
    int *p = strmap_slot(&v->ids, text, 0);
    return p ? *p : -1;
}

static int vocab_add(Vocab *v, const char *text, int type) {
    if (v->n == v->cap) {
        v->cap = v->cap ? 2 * v->cap : 1024;
        v->text = xrealloc(v->text, (size_t)v->cap * sizeof(char *));
        v->type = xrealloc(v->type, (size_t)v->cap * sizeof(int));
    }
    v->text[v->n] = strdup(text);
    if (!v->text[v->n]) die("out of memory", NULL);
    v->type[v->n] = type;
    *strmap_slot(&v->ids, text, 1) = v->n;
    return v->n++;
}

// Byte-map raw UTF-8 bytes into GGUF token text.
static void map_bytes(const unsigned char *s, int len, char *out) {
    int o = 0;
    for (int i = 0; i < len; i++) o += put_utf8(out + o, byte_to_cp(s[i]));
    out[o] = 0;
}

// Split the corpus into pre-tokens and count each distinct one (the key is its byte-mapped text).
static void count_words(StrMap *words) {
    for (int p = 0; p < N_CORPUS; p++) {
        const unsigned char *s = (const unsigned char *)CORPUS[p];
        int len = (int)strlen(CORPUS[p]);
        int *cp = xmalloc((size_t)(len + 1) * sizeof(int)), *at = xmalloc((size_t)(len + 1) * sizeof(int));
        int n = 0;
        for (int i = 0; i < len;) { at[n] = i; i += get_utf8(s + i, len - i, &cp[n]); n++; }
        at[n] = len;
        char *mapped = xmalloc((size_t)len * 2 + 1);
        for (int i = 0; i < n;) {
            int k = pretoken_len(cp, n, i);
            map_bytes(s + at[i], at[i + k] - at[i], mapped);
            (*strmap_slot(words, mapped, 1))++;
            i += k;
        }
        free(cp); free(at); free(mapped);
    }
}

typedef struct { int *sym; int len, count; } Word;

// Pair counts, with a generation stamp per slot so the table is not cleared every round.
typedef struct { uint64_t key; int count, stamp; } PairSlot;
#define PAIR_CAP (1 << 16)

static int learn_merge(Word *w, int n_words, PairSlot *tab, int stamp, int *best_a, int *best_b) {
    int best = 0;
    for (int i = 0; i < n_words; i++)
        for (int j = 0; j + 1 < w[i].len; j++) {
            uint64_t key = (uint64_t)w[i].sym[j] << 32 | (uint32_t)w[i].sym[j + 1];
            uint64_t h = (key * 0x9E3779B97F4A7C15ULL) >> 48;
            while (tab[h].stamp == stamp && tab[h].key != key) h = (h + 1) & (PAIR_CAP - 1);
            if (tab[h].stamp != stamp) { tab[h].stamp = stamp; tab[h].key = key; tab[h].count = 0; }
            int c = (tab[h].count += w[i].count);
            int a = w[i].sym[j], b = w[i].sym[j + 1];
            // most frequent pair; ties go to the lower (a, b) so the result is deterministic
            if (c > best || (c == best && (a < *best_a || (a == *best_a && b < *best_b)))) {
                best = c; *best_a = a; *best_b = b;
            }
        }
    return best;
}

static void apply_merge(Word *w, int n_words, int a, int b, int id) {
    for (int i = 0; i < n_words; i++) {
        int o = 0;
        for (int j = 0; j < w[i].len; j++) {
            if (j + 1 < w[i].len && w[i].sym[j] == a && w[i].sym[j + 1] == b) { w[i].sym[o++] = id; j++; }
            else w[i].sym[o++] = w[i].sym[j];
        }
        w[i].len = o;
    }
}

// ids 0..255 bytes, then merges learned on the corpus, then unused padding, then the specials.
static void build_vocab(Vocab *v, int n_vocab) {
    memset(v, 0, sizeof *v);
    strmap_init(&v->ids, 1024);
    int n_normal = n_vocab - N_SPECIALS;
    char buf[64];
    for (int b = 0; b < 256; b++) {
        unsigned char byte = (unsigned char)b;
        map_bytes(&byte, 1, buf);
        vocab_add(v, buf, 1);
    }

    StrMap words;
    strmap_init(&words, 4096);
    count_words(&words);
    Word *w = xmalloc((size_t)words.n * sizeof(Word));
    int n_words = 0;
    for (int i = 0; i < words.cap; i++) {
        if (!words.key[i]) continue;
        const char *s = words.key[i];
        Word *x = &w[n_words++];
        x->count = words.val[i];
        x->sym = xmalloc(strlen(s) * sizeof(int));
        x->len = 0;
        for (int k = 0, len = (int)strlen(s); k < len;) { // each mapped char is one byte token
            int cp, m = get_utf8((const unsigned char *)s + k, len - k, &cp);
            char one[8];
            memcpy(one, s + k, (size_t)m); one[m] = 0;
            x->sym[x->len++] = vocab_find(v, one);
            k += m;
        }
    }

    PairSlot *tab = xmalloc(PAIR_CAP * sizeof(PairSlot));
    memset(tab, 0, PAIR_CAP * sizeof(PairSlot));
    v->merges = xmalloc(MAX_MERGES * sizeof(char *));
    for (int round = 1; v->n < n_normal && v->n_merges < MAX_MERGES; round++) {
        int a = 1 << 30, b = 1 << 30;
        if (learn_merge(w, n_words, tab, round, &a, &b) < 2) break; // no pair occurs twice
        size_t la = strlen(v->text[a]), lb = strlen(v->text[b]);
        char *merged = xmalloc(la + lb + 1), *rule = xmalloc(la + lb + 2);
        sprintf(merged, "%s%s", v->text[a], v->text[b]);
        sprintf(rule, "%s %s", v->text[a], v->text[b]);
        int id = vocab_find(v, merged); // another merge path may already have made this text
        if (id < 0) id = vocab_add(v, merged, 1);
        v->merges[v->n_merges++] = rule;
        apply_merge(w, n_words, a, b, id);
        free(merged);
    }
    int n_learned = v->n;
    for (int u = 0; v->n < n_normal; u++) { // unused tokens; digits never merge, so these are unique
        snprintf(buf, sizeof buf, "[unused%d]", u);
        if (vocab_find(v, buf) < 0) vocab_add(v, buf, 1);
    }
    for (int i = 0; i < N_SPECIALS; i++) {
        if (vocab_find(v, SPECIALS[i].text) >= 0) die("special token collides with a learned token:", SPECIALS[i].text);
        vocab_add(v, SPECIALS[i].text, SPECIALS[i].type);
    }
    fprintf(stderr, "gen: vocab %d = 256 bytes + %d learned (%d merges) + %d unused + %d special\n",
            v->n, n_learned - 256, v->n_merges, n_normal - n_learned, N_SPECIALS);

    for (int i = 0; i < n_words; i++) free(w[i].sym);
    free(w); free(tab);
    for (int i = 0; i < words.cap; i++) free(words.key[i]);
    free(words.key); free(words.val);
}

// ------------------------------------------------------------------------------------------------
// GGUF metadata, built in memory so the KV count is known before the header is written.

enum { G_U8 = 0, G_U32 = 4, G_I32 = 5, G_F32 = 6, G_BOOL = 7, G_STRING = 8, G_ARRAY = 9, G_U64 = 10 };

typedef struct { uint8_t *p; size_t n, cap; uint64_t n_kv; } Buf;

static void buf_put(Buf *b, const void *data, size_t n) {
    if (b->n + n > b->cap) {
        while (b->n + n > b->cap) b->cap = b->cap ? 2 * b->cap : 1 << 16;
        b->p = xrealloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
}
static void put_u32(Buf *b, uint32_t v) { buf_put(b, &v, 4); } // the host is little endian (x86-64)
static void put_u64(Buf *b, uint64_t v) { buf_put(b, &v, 8); }
static void put_str(Buf *b, const char *s) { put_u64(b, strlen(s)); buf_put(b, s, strlen(s)); }

static void kv_key(Buf *b, const char *prefix, const char *key, uint32_t type) {
    char full[256];
    snprintf(full, sizeof full, "%s%s%s", prefix ? prefix : "", prefix ? "." : "", key);
    put_str(b, full);
    put_u32(b, type);
    b->n_kv++;
}
static void kv_u32(Buf *b, const char *prefix, const char *key, uint32_t v) { kv_key(b, prefix, key, G_U32); put_u32(b, v); }
static void kv_f32(Buf *b, const char *prefix, const char *key, float v) { kv_key(b, prefix, key, G_F32); buf_put(b, &v, 4); }
static void kv_bool(Buf *b, const char *prefix, const char *key, int v) { uint8_t x = (uint8_t)!!v; kv_key(b, prefix, key, G_BOOL); buf_put(b, &x, 1); }
static void kv_str(Buf *b, const char *prefix, const char *key, const char *v) { kv_key(b, prefix, key, G_STRING); put_str(b, v); }
static void kv_arr_head(Buf *b, const char *key, uint32_t elem_type, uint64_t n) {
    kv_key(b, NULL, key, G_ARRAY);
    put_u32(b, elem_type);
    put_u64(b, n);
}

static const char *CHAT_TEMPLATE =
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n<think>\\n' }}{%- endif %}";

// llama_ftype of the file, for display only.
static uint32_t file_type(const Config *c) {
    switch (c->type) {
    case T_F32: return 0; case T_F16: return 1; case T_Q4_0: return 2; case T_Q8_0: return 7;
    case T_Q4_K: return 14; case T_Q5_K: return 16; case T_Q6_K: return 18; case T_BF16: return 32;
    default: return 15; // MOSTLY_Q4_K_M
    }
}

static void build_metadata(Buf *b, const Config *c, const Vocab *v) {
    const char *a = c->arch;
    char name[128];
    snprintf(name, sizeof name, "clover.c random %s %s %s", a, c->shape, c->type_name);
    kv_str(b, "general", "architecture", a);
    kv_str(b, "general", "name", name);
    kv_u32(b, "general", "alignment", ALIGN);
    kv_u32(b, "general", "file_type", file_type(c));

    kv_u32(b, a, "block_count", (uint32_t)(c->n_layer + c->nextn));
    if (c->nextn) kv_u32(b, a, "nextn_predict_layers", (uint32_t)c->nextn);
    kv_u32(b, a, "context_length", (uint32_t)c->n_ctx);
    kv_u32(b, a, "embedding_length", (uint32_t)c->n_embd);
    kv_u32(b, a, "feed_forward_length", (uint32_t)c->n_ff_exp);
    kv_u32(b, a, "attention.head_count", (uint32_t)c->n_head);
    kv_u32(b, a, "attention.head_count_kv", (uint32_t)c->n_head_kv);
    kv_u32(b, a, "attention.key_length", (uint32_t)c->head_dim);
    kv_u32(b, a, "attention.value_length", (uint32_t)c->head_dim);
    kv_f32(b, a, "attention.layer_norm_rms_epsilon", c->eps);
    kv_f32(b, a, "rope.freq_base", c->rope_base);
    kv_u32(b, a, "rope.dimension_count", (uint32_t)c->n_rot);
    char key[128];
    snprintf(key, sizeof key, "%s.rope.dimension_sections", a);
    kv_arr_head(b, key, G_I32, 4);
    int32_t sections[4] = { 11, 11, 10, 0 };
    buf_put(b, sections, sizeof sections);
    kv_u32(b, a, "expert_count", (uint32_t)c->n_expert);
    kv_u32(b, a, "expert_used_count", (uint32_t)c->n_expert_used);
    kv_u32(b, a, "expert_feed_forward_length", (uint32_t)c->n_ff_exp);
    kv_u32(b, a, "expert_shared_feed_forward_length", (uint32_t)c->n_ff_shexp);
    kv_u32(b, a, "ssm.conv_kernel", (uint32_t)c->ssm_conv);
    kv_u32(b, a, "ssm.state_size", (uint32_t)c->ssm_state);
    kv_u32(b, a, "ssm.group_count", (uint32_t)c->ssm_groups);
    kv_u32(b, a, "ssm.time_step_rank", (uint32_t)c->ssm_v_heads);
    kv_u32(b, a, "ssm.inner_size", (uint32_t)c->ssm_inner);
    kv_u32(b, a, "full_attention_interval", (uint32_t)c->attn_interval);

    // diffusion keys (spec S2.1)
    if (c->block_size) kv_u32(b, a, "diffusion.block_size", (uint32_t)c->block_size);
    if (c->shift_logits) kv_bool(b, a, "diffusion.shift_logits", 1);
    if (c->coreset > 0) kv_f32(b, a, "diffusion.coreset_top_p", c->coreset);

    kv_str(b, "tokenizer.ggml", "model", "gpt2");
    kv_str(b, "tokenizer.ggml", "pre", "qwen35");
    kv_arr_head(b, "tokenizer.ggml.tokens", G_STRING, (uint64_t)v->n);
    for (int i = 0; i < v->n; i++) put_str(b, v->text[i]);
    kv_arr_head(b, "tokenizer.ggml.token_type", G_I32, (uint64_t)v->n);
    for (int i = 0; i < v->n; i++) put_u32(b, (uint32_t)v->type[i]);
    kv_arr_head(b, "tokenizer.ggml.merges", G_STRING, (uint64_t)v->n_merges);
    for (int i = 0; i < v->n_merges; i++) put_str(b, v->merges[i]);
    int eot = v->n - N_SPECIALS; // <|endoftext|>
    kv_u32(b, "tokenizer.ggml", "eos_token_id", (uint32_t)(eot + 2)); // <|im_end|>
    kv_u32(b, "tokenizer.ggml", "bos_token_id", (uint32_t)eot);
    kv_u32(b, "tokenizer.ggml", "padding_token_id", (uint32_t)eot);
    kv_bool(b, "tokenizer.ggml", "add_bos_token", 0);
    if (c->mask) kv_u32(b, "tokenizer.ggml", "mask_token_id", (uint32_t)(v->n - 1)); // <|mask|> is last
    kv_str(b, "tokenizer", "chat_template", CHAT_TEMPLATE);
}

static void write_tensor_infos(Buf *b, const TensorList *l) {
    for (int i = 0; i < l->n; i++) {
        const Tensor *t = &l->t[i];
        put_str(b, t->name);
        put_u32(b, (uint32_t)t->n_dims);
        for (int d = 0; d < t->n_dims; d++) put_u64(b, t->ne[d]);
        put_u32(b, (uint32_t)t->type);
        put_u64(b, t->offset);
    }
}

// ------------------------------------------------------------------------------------------------
// Command line

static void usage(void) {
    fprintf(stderr,
        "usage: gen -o FILE [--arch qwen35moe|clover_moe] [--type T] [--shape tiny|real|narrow|micro]\n"
        "           [--layers N] [--vocab N] [--seed S] [--nextn 0|1] [--ctx N]\n"
        "           [--experts N] [--experts-used N] [--mask] [--right-conv] [--reverse]\n"
        "           [--coreset P] [--block-size N] [--shift-logits]\n"
        "  T: f32 f16 bf16 q8_0 q4_0 q4_k q5_k q6_k q4_k_m (default q8_0)\n");
    exit(1);
}

static long parse_int(const char *s, long lo, long hi, const char *opt) {
    char *end;
    long v = strtol(s, &end, 0);
    if (!*s || *end || v < lo || v > hi) die("bad value for", opt);
    return v;
}

static void set_shape(Config *c) {
    if (!strcmp(c->shape, "real")) { // Qwen3.6-35B-A3B
        c->n_embd = 2048; c->n_head = 16; c->n_head_kv = 2; c->head_dim = 256; c->n_rot = 64;
        c->ssm_groups = 16; c->ssm_v_heads = 32; c->ssm_state = 128; c->ssm_inner = 4096;
        c->n_expert = 256; c->n_expert_used = 8; c->n_ff_exp = 512; c->n_ff_shexp = 512;
        c->n_vocab = 248320; c->n_ctx = 262144;
    } else if (!strcmp(c->shape, "narrow")) { // n_embd 64 and state 16: GDN rows shorter than a SIMD step
        c->n_embd = 64; c->n_head = 2; c->n_head_kv = 1; c->head_dim = 32; c->n_rot = 16;
        c->ssm_groups = 1; c->ssm_v_heads = 2; c->ssm_state = 16; c->ssm_inner = 32;
        c->n_expert = 4; c->n_expert_used = 2; c->n_ff_exp = 64; c->n_ff_shexp = 64;
        c->n_vocab = 1024; c->n_ctx = 4096;
    } else if (!strcmp(c->shape, "micro")) { // small seeds for test/fuzz_gguf.c (K-quant rows fall back to Q8_0)
        c->n_embd = 32; c->n_head = 2; c->n_head_kv = 1; c->head_dim = 16; c->n_rot = 8;
        c->ssm_groups = 1; c->ssm_v_heads = 2; c->ssm_state = 16; c->ssm_inner = 32;
        c->n_expert = 2; c->n_expert_used = 1; c->n_ff_exp = 32; c->n_ff_shexp = 32;
        c->n_vocab = 300; c->n_ctx = 4096;
    } else {
        c->n_embd = 256; c->n_head = 4; c->n_head_kv = 2; c->head_dim = 64; c->n_rot = 16;
        c->ssm_groups = 2; c->ssm_v_heads = 4; c->ssm_state = 64; c->ssm_inner = 256;
        c->n_expert = 8; c->n_expert_used = 2; c->n_ff_exp = 256; c->n_ff_shexp = 256;
        c->n_vocab = 1024; c->n_ctx = 4096;
    }
    c->ssm_conv = 4; c->attn_interval = 4; c->n_layer = 4;
    c->eps = 1e-6f; c->rope_base = 1e7f;
}

static void parse_args(Config *c, int argc, char **argv) {
    memset(c, 0, sizeof *c);
    c->arch = "qwen35moe"; c->shape = "tiny"; c->type = T_Q8_0; c->type_name = "q8_0"; c->seed = 1; c->block_size = -1;
    // the shape sets defaults that other options override, so find it first
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--shape")) {
            c->shape = argv[i + 1];
            if (strcmp(c->shape, "tiny") && strcmp(c->shape, "real") && strcmp(c->shape, "narrow") && strcmp(c->shape, "micro"))
                die("unknown shape", c->shape);
        }
    set_shape(c);
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        int has = i + 1 < argc;
        const char *val = has ? argv[i + 1] : NULL;
        if (!strcmp(o, "--mask")) c->mask = 1;
        else if (!strcmp(o, "--right-conv")) c->right_conv = 1;
        else if (!strcmp(o, "--reverse")) c->reverse = 1;
        else if (!strcmp(o, "--shift-logits")) c->shift_logits = 1;
        else if (!strcmp(o, "-h") || !strcmp(o, "--help")) usage();
        else {
            if (!has) usage();
            i++;
            if (!strcmp(o, "-o")) c->out = val;
            else if (!strcmp(o, "--arch")) {
                if (strcmp(val, "qwen35moe") && strcmp(val, "clover_moe")) die("unknown arch", val);
                c->arch = val;
            } else if (!strcmp(o, "--type")) {
                c->type_name = val;
                if (!strcasecmp(val, "q4_k_m")) c->type = -1;
                else {
                    c->type = -2;
                    for (int t = 0; t < N_TYPES; t++) if (!strcasecmp(val, TYPES[t].name)) c->type = TYPES[t].id;
                    if (c->type == -2) die("unknown type", val);
                }
            } else if (!strcmp(o, "--shape")) { /* handled above */ }
            else if (!strcmp(o, "--layers")) c->n_layer = (int)parse_int(val, 1, 1000, o);
            else if (!strcmp(o, "--vocab")) c->n_vocab = (int)parse_int(val, 256 + N_SPECIALS, 1 << 24, o);
            else if (!strcmp(o, "--seed")) c->seed = (uint64_t)strtoull(val, NULL, 0);
            else if (!strcmp(o, "--nextn")) c->nextn = (int)parse_int(val, 0, 1, o);
            else if (!strcmp(o, "--ctx")) c->n_ctx = (int)parse_int(val, 1, 1 << 30, o);
            else if (!strcmp(o, "--experts")) c->n_expert = (int)parse_int(val, 1, 4096, o);
            else if (!strcmp(o, "--experts-used")) c->n_expert_used = (int)parse_int(val, 1, 4096, o);
            else if (!strcmp(o, "--block-size")) c->block_size = (int)parse_int(val, 1, 1 << 20, o);
            else if (!strcmp(o, "--coreset")) {
                char *end;
                c->coreset = strtof(val, &end);
                if (*end || !(c->coreset >= 0 && c->coreset <= 1)) die("bad value for", o);
            } else die("unknown option", o);
        }
    }
    if (!c->out) usage();
    if (c->n_expert_used > c->n_expert) die("--experts-used exceeds --experts", NULL);
    if (c->block_size < 0) c->block_size = strcmp(c->arch, "clover_moe") ? 0 : 32;
    if (!strcmp(c->arch, "qwen35moe") && (c->right_conv || c->reverse))
        fprintf(stderr, "gen: warning: clover extras in a qwen35moe file; llama.cpp will reject the extra tensors\n");
}

// ------------------------------------------------------------------------------------------------

static const uint8_t ZEROS[ALIGN];

static void write_zeros(FILE *f, uint64_t n) { // alignment padding, always < ALIGN bytes
    if (n && fwrite(ZEROS, (size_t)n, 1, f) != 1) die("write failed", NULL);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    Config c;
    parse_args(&c, argc, argv);
    double t0 = now();

    TensorList tensors = { 0 };
    build_tensors(&tensors, &c);
    uint64_t data_size = layout_tensors(&tensors);

    Vocab vocab;
    build_vocab(&vocab, c.n_vocab);

    Buf head = { 0 }, kv = { 0 };
    build_metadata(&kv, &c, &vocab);
    buf_put(&head, "GGUF", 4);
    put_u32(&head, 3);
    put_u64(&head, (uint64_t)tensors.n);
    put_u64(&head, kv.n_kv);
    buf_put(&head, kv.p, kv.n);
    write_tensor_infos(&head, &tensors);
    buf_put(&head, ZEROS, align_up(head.n) - head.n);

    FILE *f = fopen(c.out, "wb");
    if (!f) die("cannot open", c.out);
    static char iobuf[1 << 22];
    setvbuf(f, iobuf, _IOFBF, sizeof iobuf);
    if (fwrite(head.p, head.n, 1, f) != 1) die("write failed", c.out);
    uint8_t *buf = xmalloc(CHUNK);
    uint64_t pos = 0;
    for (int i = 0; i < tensors.n; i++) {
        const Tensor *t = &tensors.t[i];
        write_zeros(f, t->offset - pos);
        write_tensor_data(f, t, c.seed, buf);
        pos = t->offset + t->nbytes;
    }
    write_zeros(f, data_size - pos);
    if (fclose(f)) die("write failed", c.out);

    uint64_t n_params = 0;
    for (int i = 0; i < tensors.n; i++) n_params += tensors.t[i].ne[0] * tensors.t[i].ne[1] * tensors.t[i].ne[2];
    fprintf(stderr, "gen: wrote %s: %s %s, %d layers%s, %d tensors, %.3g params, %.1f MB in %.1f s\n",
            c.out, c.arch, c.type_name, c.n_layer, c.nextn ? " + MTP" : "", tensors.n, (double)n_params,
            (double)(head.n + data_size) / 1e6, now() - t0);
    free(buf);
    return 0;
}
