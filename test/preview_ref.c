/*
 * preview_ref.c — an independent float64 evaluation of the clover_moe preview pass, for tests.
 *
 *   build/preview_ref MODEL.gguf PROMPT_IDS BLOCK_IDS OUT.bin [--causal OUT2.bin] [-v]
 *
 * PROMPT_IDS and BLOCK_IDS are comma-separated token ids (the mask id is an ordinary id here).
 * The program evaluates, in double precision throughout:
 *   1. the causal forward pass of README.md's spec S1.3-S1.6 over the prompt, keeping the
 *      committed state (per attention layer the K/V rows, per GDN layer the conv ring = the last 3
 *      pre-conv rows and the recurrent state S);
 *   2. the preview pass of spec S2.2-S2.5 over the block, placed at positions
 *      n_prompt .. n_prompt+n_block-1 right after the prompt;
 * and writes the float32 logits of the block rows, row-major [n_block][n_vocab], to OUT.bin.
 * --causal also writes the causal logits of every prompt position [n_prompt][n_vocab] (a check
 * of step 1 against `clover --dump-logits`). -v prints the routing margins (see below).
 *
 * It is written from the specification only and shares no code with clover.c: its own GGUF reader, every
 * tensor dequantised once to double (F32/F16/BF16 here; other types through ggml's to_float,
 * which the Makefile links, exactly as build/unit does).
 *
 * Its readings of the preview pass (spec S2.2-S2.5), where a choice had to be made:
 * - shift_logits changes which row predicts which token, not the logits: all block rows are written.
 * - The right conv term is added before the SiLU, together with the causal taps; missing taps past
 *   the end of the block (t+d >= n) are zero. A missing ssm_conv1d_right tensor means r = 0.
 * - The reverse branch uses the same q_t, k_t, v_t (after conv, SiLU and L2 norm) as the forward
 *   branch, its own g^r, beta^r, starts from S_r = 0 at t = n-1, and its read includes the same
 *   1/sqrt(head_v_dim) output scale ("the same recurrence"). gamma_h multiplies o^r of value head h
 *   before the gated RMSNorm.
 * - Coreset routing (coreset_top_p = p > 0): the summed router probabilities P_e over the n block
 *   rows, experts sorted by P_e descending (ties: lower index), the coreset is the shortest prefix
 *   whose cumulative sum is >= p*n. Each row takes its top-k (ties: lower index) among the coreset
 *   experts by its own probabilities (all coreset experts if fewer than k) and divides their
 *   probabilities by their sum (with the same 6.103515625e-5 floor as the plain top-k rule).
 *   Coreset routing applies to preview passes only, never to the causal prefix.
 * - Plain top-k routing: the k largest probabilities, ties to the lower index, renormalised.
 *   Discrete choices (top-k sets, coreset size) can flip between a float and a double evaluation
 *   when two values are nearly equal; -v prints the smallest such margin so a mismatch can be
 *   told apart from a bug.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#include "ggml.h"

static void die(const char *fmt, const char *a) {
    fprintf(stderr, "preview_ref: ");
    fprintf(stderr, fmt, a ? a : "");
    fprintf(stderr, "\n");
    exit(1);
}

static void *xcalloc(size_t n, size_t s) {
    void *p = calloc(n ? n : 1, s);
    if (!p) die("out of memory%s", NULL);
    return p;
}

// ------------------------------------------------------------------------------------------------
// GGUF reader (spec S1.1)

typedef struct { const uint8_t *p, *end; } Rd;

static void need(Rd *r, uint64_t n) { if ((uint64_t)(r->end - r->p) < n) die("truncated file%s", NULL); }
static uint32_t rd_u32(Rd *r) { uint32_t v; need(r, 4); memcpy(&v, r->p, 4); r->p += 4; return v; }
static uint64_t rd_u64(Rd *r) { uint64_t v; need(r, 8); memcpy(&v, r->p, 8); r->p += 8; return v; }
static void rd_str(Rd *r, const char **s, uint64_t *n) { *n = rd_u64(r); need(r, *n); *s = (const char *)r->p; r->p += *n; }

static const int SCALAR_SIZE[13] = { 1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8 };

typedef struct { char key[128]; uint32_t type; const uint8_t *val; } KV;
typedef struct { char name[128]; int n_dims; uint64_t ne[4]; uint32_t type; uint64_t off; } TInfo;

typedef struct {
    const uint8_t *base; size_t size;
    KV *kv; int n_kv;
    TInfo *t; int n_t;
    const uint8_t *data;
} Gguf;

static void skip_value(Rd *r, uint32_t type) {
    if (type == 8) { const char *s; uint64_t n; rd_str(r, &s, &n); return; }
    if (type == 9) {
        uint32_t et = rd_u32(r);
        uint64_t n = rd_u64(r);
        for (uint64_t i = 0; i < n; i++) skip_value(r, et);
        return;
    }
    if (type > 12 || !SCALAR_SIZE[type]) die("bad value type%s", NULL);
    need(r, (uint64_t)SCALAR_SIZE[type]);
    r->p += SCALAR_SIZE[type];
}

static void gguf_open(Gguf *g, const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) die("cannot open %s", path);
    struct stat st;
    fstat(fd, &st);
    g->size = (size_t)st.st_size;
    g->base = mmap(NULL, g->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (g->base == MAP_FAILED) die("cannot map %s", path);
    close(fd);
    Rd r = { g->base, g->base + g->size };
    if (rd_u32(&r) != 0x46554747) die("not a GGUF file%s", NULL);
    if (rd_u32(&r) != 3) die("not GGUF version 3%s", NULL);
    uint64_t n_t = rd_u64(&r), n_kv = rd_u64(&r);
    g->kv = xcalloc(n_kv, sizeof(KV));
    g->t = xcalloc(n_t, sizeof(TInfo));
    uint64_t align = 32;
    for (uint64_t i = 0; i < n_kv; i++) {
        const char *s; uint64_t n;
        rd_str(&r, &s, &n);
        KV *kv = &g->kv[g->n_kv++];
        if (n >= sizeof kv->key) die("key too long%s", NULL);
        memcpy(kv->key, s, n);
        kv->type = rd_u32(&r);
        kv->val = r.p;
        skip_value(&r, kv->type);
        if (!strcmp(kv->key, "general.alignment")) { uint32_t a; memcpy(&a, kv->val, 4); align = a; }
    }
    for (uint64_t i = 0; i < n_t; i++) {
        const char *s; uint64_t n;
        rd_str(&r, &s, &n);
        TInfo *t = &g->t[g->n_t++];
        if (n >= sizeof t->name) die("tensor name too long%s", NULL);
        memcpy(t->name, s, n);
        t->n_dims = (int)rd_u32(&r);
        if (t->n_dims < 1 || t->n_dims > 4) die("bad dims%s", NULL);
        for (int d = 0; d < 4; d++) t->ne[d] = 1;
        for (int d = 0; d < t->n_dims; d++) t->ne[d] = rd_u64(&r);
        t->type = rd_u32(&r);
        t->off = rd_u64(&r);
    }
    size_t pos = (size_t)(r.p - g->base);
    pos = (pos + align - 1) / align * align;
    g->data = g->base + pos;
}

static const KV *kv_find(const Gguf *g, const char *key) {
    for (int i = 0; i < g->n_kv; i++) if (!strcmp(g->kv[i].key, key)) return &g->kv[i];
    return NULL;
}

static double kv_num(const Gguf *g, const char *key, int required, double dflt) {
    const KV *kv = kv_find(g, key);
    if (!kv) { if (required) die("missing key %s", key); return dflt; }
    switch (kv->type) {
    case 0: return *(const uint8_t *)kv->val;
    case 4: { uint32_t v; memcpy(&v, kv->val, 4); return v; }
    case 5: { int32_t v; memcpy(&v, kv->val, 4); return v; }
    case 6: { float v; memcpy(&v, kv->val, 4); return v; }
    case 7: return *(const uint8_t *)kv->val;
    case 10: { uint64_t v; memcpy(&v, kv->val, 8); return (double)v; }
    default: die("key %s has an unexpected type", key);
    }
    return 0;
}

static const char *kv_arch(const Gguf *g) {
    const KV *kv = kv_find(g, "general.architecture");
    if (!kv || kv->type != 8) die("no general.architecture%s", NULL);
    static char a[64];
    uint64_t n; memcpy(&n, kv->val, 8);
    if (n >= sizeof a) die("architecture too long%s", NULL);
    memcpy(a, kv->val + 8, n); a[n] = 0;
    return a;
}

static double f16_to_double(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
    return s ? -v : v;
}

// A tensor dequantised to double; NULL when absent (if optional).
typedef struct { double *v; uint64_t ne[4]; } Ten;

static Ten *tensor(const Gguf *g, const char *name, int required) {
    const TInfo *t = NULL;
    for (int i = 0; i < g->n_t; i++) if (!strcmp(g->t[i].name, name)) { t = &g->t[i]; break; }
    if (!t) { if (required) die("missing tensor %s", name); return NULL; }
    Ten *x = xcalloc(1, sizeof(Ten));
    uint64_t n = 1;
    for (int d = 0; d < 4; d++) { x->ne[d] = t->ne[d]; n *= t->ne[d]; }
    x->v = xcalloc(n, sizeof(double));
    const uint8_t *src = g->data + t->off;
    if (t->type == 0) {
        for (uint64_t i = 0; i < n; i++) { float f; memcpy(&f, src + 4 * i, 4); x->v[i] = f; }
    } else if (t->type == 1) {
        for (uint64_t i = 0; i < n; i++) { uint16_t h; memcpy(&h, src + 2 * i, 2); x->v[i] = f16_to_double(h); }
    } else if (t->type == 30) {
        for (uint64_t i = 0; i < n; i++) { uint16_t h; memcpy(&h, src + 2 * i, 2); uint32_t b = (uint32_t)h << 16; float f; memcpy(&f, &b, 4); x->v[i] = f; }
    } else {
        const struct ggml_type_traits *tt = ggml_get_type_traits((enum ggml_type)t->type);
        if (!tt || !tt->to_float || tt->blck_size <= 0) die("unsupported tensor type in %s", name);
        uint64_t ne0 = t->ne[0], rows = n / ne0;
        size_t row_bytes = ne0 / (uint64_t)tt->blck_size * tt->type_size;
        float *tmp = xcalloc(ne0, sizeof(float));
        for (uint64_t r = 0; r < rows; r++) {
            tt->to_float(src + r * row_bytes, tmp, (int64_t)ne0);
            for (uint64_t i = 0; i < ne0; i++) x->v[r * ne0 + i] = tmp[i];
        }
        free(tmp);
    }
    return x;
}

// ------------------------------------------------------------------------------------------------
// The model

typedef struct {
    Ten *attn_norm, *post_norm;
    // attention
    Ten *wq, *wk, *wv, *q_norm, *k_norm, *wo;
    // GDN
    Ten *qkv, *gate, *beta, *alpha, *conv, *dt, *a, *ssm_norm, *ssm_out;
    Ten *conv_right, *a_rev, *dt_rev, *alpha_rev, *beta_rev, *rev_mix;
    // MoE
    Ten *router, *exp_gate, *exp_up, *exp_down, *sh_gate_inp, *sh_gate, *sh_up, *sh_down;
    int is_attn;
} Layer;

typedef struct {
    int n_layer, E, n_vocab;
    int n_head, n_head_kv, hd, n_rot;
    double eps, rope_base, kq_scale;
    int d_conv, dk, Hk, Hv, dv, conv_dim;
    int n_exp, k_used, ff, ff_sh;
    double coreset_p;
    Ten *embd, *out_norm, *out;
    Layer *L;
} Model;

static void load_model(Model *m, const Gguf *g) {
    const char *arch = kv_arch(g);
    if (strcmp(arch, "qwen35moe") && strcmp(arch, "clover_moe")) die("unsupported architecture %s", arch);
    char key[256];
#define K(name, req, d) (snprintf(key, sizeof key, "%s." name, arch), kv_num(g, key, req, d))
    int n_blocks = (int)K("block_count", 1, 0);
    m->n_layer = n_blocks - (int)K("nextn_predict_layers", 0, 0);
    m->E = (int)K("embedding_length", 1, 0);
    m->n_head = (int)K("attention.head_count", 1, 0);
    m->n_head_kv = (int)K("attention.head_count_kv", 1, 0);
    m->hd = (int)K("attention.key_length", 1, 0);
    m->eps = K("attention.layer_norm_rms_epsilon", 1, 0);
    m->rope_base = K("rope.freq_base", 1, 0);
    m->n_rot = (int)K("rope.dimension_count", 1, 0);
    m->kq_scale = K("attention.scale", 0, 0);
    if (m->kq_scale == 0) m->kq_scale = 1.0 / sqrt((double)m->hd);
    m->n_exp = (int)K("expert_count", 1, 0);
    m->k_used = (int)K("expert_used_count", 1, 0);
    m->ff = (int)K("expert_feed_forward_length", 1, 0);
    m->ff_sh = (int)K("expert_shared_feed_forward_length", 1, 0);
    m->d_conv = (int)K("ssm.conv_kernel", 1, 0);
    m->dk = (int)K("ssm.state_size", 1, 0);
    m->Hk = (int)K("ssm.group_count", 1, 0);
    m->Hv = (int)K("ssm.time_step_rank", 1, 0);
    int inner = (int)K("ssm.inner_size", 1, 0);
    m->dv = inner / m->Hv;
    m->conv_dim = 2 * m->Hk * m->dk + inner;
    int interval = (int)K("full_attention_interval", 0, 4);
    m->coreset_p = K("diffusion.coreset_top_p", 0, 0);
    double ews = K("expert_weights_scale", 0, 0);
    if (ews != 0 && ews != 1) die("expert_weights_scale is not supported here%s", NULL);
    if (kv_find(g, "qwen35moe.attention.recurrent_layers") || kv_find(g, "clover_moe.attention.recurrent_layers"))
        die("attention.recurrent_layers is not supported here%s", NULL);
    if (m->d_conv != 4) die("ssm.conv_kernel must be 4%s", NULL);
#undef K
    m->embd = tensor(g, "token_embd.weight", 1);
    m->n_vocab = (int)m->embd->ne[1];
    m->out_norm = tensor(g, "output_norm.weight", 1);
    m->out = tensor(g, "output.weight", 0);
    if (!m->out) m->out = m->embd;
    m->L = xcalloc((size_t)m->n_layer, sizeof(Layer));
    for (int il = 0; il < m->n_layer; il++) {
        Layer *l = &m->L[il];
#define T(suffix, req) (snprintf(key, sizeof key, "blk.%d." suffix, il), tensor(g, key, req))
        l->is_attn = (il + 1) % interval == 0;
        l->attn_norm = T("attn_norm.weight", 1);
        l->post_norm = T("post_attention_norm.weight", 1);
        if (l->is_attn) {
            l->wq = T("attn_q.weight", 1); l->wk = T("attn_k.weight", 1); l->wv = T("attn_v.weight", 1);
            l->q_norm = T("attn_q_norm.weight", 1); l->k_norm = T("attn_k_norm.weight", 1);
            l->wo = T("attn_output.weight", 1);
        } else {
            l->qkv = T("attn_qkv.weight", 1); l->gate = T("attn_gate.weight", 1);
            l->beta = T("ssm_beta.weight", 1); l->alpha = T("ssm_alpha.weight", 1);
            l->conv = T("ssm_conv1d.weight", 1); l->dt = T("ssm_dt.bias", 1); l->a = T("ssm_a", 1);
            l->ssm_norm = T("ssm_norm.weight", 1); l->ssm_out = T("ssm_out.weight", 1);
            l->conv_right = T("ssm_conv1d_right.weight", 0);
            l->a_rev = T("ssm_a_rev", 0); l->dt_rev = T("ssm_dt_rev.bias", 0);
            l->alpha_rev = T("ssm_alpha_rev.weight", 0); l->beta_rev = T("ssm_beta_rev.weight", 0);
            l->rev_mix = T("ssm_rev_mix", 0);
            if (!(l->a_rev && l->dt_rev && l->alpha_rev && l->beta_rev && l->rev_mix))
                l->a_rev = l->dt_rev = l->alpha_rev = l->beta_rev = l->rev_mix = NULL; // all five or none
        }
        l->router = T("ffn_gate_inp.weight", 1);
        l->exp_gate = T("ffn_gate_exps.weight", 1); l->exp_up = T("ffn_up_exps.weight", 1);
        l->exp_down = T("ffn_down_exps.weight", 1);
        l->sh_gate_inp = T("ffn_gate_inp_shexp.weight", 1);
        l->sh_gate = T("ffn_gate_shexp.weight", 1); l->sh_up = T("ffn_up_shexp.weight", 1);
        l->sh_down = T("ffn_down_shexp.weight", 1);
#undef T
    }
}

// ------------------------------------------------------------------------------------------------
// Primitives, in double

// y[o] = sum_i W[o*in + i] * x[i] for o in [0, out); W is ggml {in, out} (optionally offset)
static void matvec(const double *W, int in, int out, const double *x, double *y) {
    for (int o = 0; o < out; o++) {
        const double *w = W + (size_t)o * in;
        double s = 0;
        for (int i = 0; i < in; i++) s += w[i] * x[i];
        y[o] = s;
    }
}

static void rmsnorm(const double *x, const double *w, int n, double eps, double *y) {
    double s = 0;
    for (int i = 0; i < n; i++) s += x[i] * x[i];
    double sc = 1.0 / sqrt(s / n + eps);
    for (int i = 0; i < n; i++) y[i] = x[i] * sc * w[i];
}

static void l2norm(double *x, int n, double eps) {
    double s = 0;
    for (int i = 0; i < n; i++) s += x[i] * x[i];
    double sc = 1.0 / fmax(sqrt(s), eps);
    for (int i = 0; i < n; i++) x[i] *= sc;
}

static double silu(double x) { return x / (1.0 + exp(-x)); }
static double sigm(double x) { return 1.0 / (1.0 + exp(-x)); }
static double softplus(double x) { return x > 20 ? x : log1p(exp(x)); }

static double g_min_margin = INFINITY; // smallest gap at a discrete routing decision (-v)
static void margin(double m) { m = fabs(m); if (m < g_min_margin) g_min_margin = m; }

// ------------------------------------------------------------------------------------------------
// State

typedef struct {
    // attention: K and V rows (after norm and rope), [pos][n_head_kv*hd]
    double *K, *V;
    // GDN: ring [3][conv_dim] oldest first, S [Hv][dk][dv]
    double *ring, *S;
} LState;

typedef struct { LState *l; int n_past, cap; } State;

// ------------------------------------------------------------------------------------------------
// Layers. Every layer function takes the normed inputs a[n][E] of n rows and writes out[n][E].

static void rope(const Model *m, double *x, int pos) {
    int half = m->n_rot / 2;
    for (int i = 0; i < half; i++) {
        double th = pos * pow(m->rope_base, -2.0 * i / m->n_rot);
        double c = cos(th), s = sin(th), x0 = x[i], x1 = x[i + half];
        x[i] = x0 * c - x1 * s;
        x[i + half] = x0 * s + x1 * c;
    }
}

// Attention over rows at positions pos0..pos0+n-1. causal: each row sees committed rows and block
// rows up to itself, and the rows are appended to the cache; otherwise (preview) each row sees the
// committed rows and all n rows, and the cache is left unchanged.
static void attn_layer(const Model *m, const Layer *l, LState *st, int n_past, int cap, const double *a, int n, int causal, double *out) {
    int E = m->E, hd = m->hd, H = m->n_head, Hkv = m->n_head_kv, kvd = Hkv * hd;
    double *qg = xcalloc((size_t)n * 2 * H * hd, sizeof(double));
    double *Kb = xcalloc((size_t)n * kvd, sizeof(double)), *Vb = xcalloc((size_t)n * kvd, sizeof(double));
    for (int t = 0; t < n; t++) {
        double *q = qg + (size_t)t * 2 * H * hd, *k = Kb + (size_t)t * kvd, *v = Vb + (size_t)t * kvd;
        matvec(l->wq->v, E, 2 * H * hd, a + (size_t)t * E, q);
        matvec(l->wk->v, E, kvd, a + (size_t)t * E, k);
        matvec(l->wv->v, E, kvd, a + (size_t)t * E, v);
        for (int h = 0; h < H; h++) {
            double *qh = q + (size_t)h * 2 * hd;
            rmsnorm(qh, l->q_norm->v, hd, m->eps, qh);
            rope(m, qh, n_past + t);
        }
        for (int g = 0; g < Hkv; g++) {
            rmsnorm(k + g * hd, l->k_norm->v, hd, m->eps, k + g * hd);
            rope(m, k + g * hd, n_past + t);
        }
    }
    if (causal && n_past + n > cap) die("context overflow%s", NULL);
    int n_keys = n_past + n;
    double *sc = xcalloc((size_t)n_keys, sizeof(double)), *o = xcalloc((size_t)H * hd, sizeof(double));
    for (int t = 0; t < n; t++) {
        const double *q = qg + (size_t)t * 2 * H * hd;
        int last = causal ? n_past + t : n_past + n - 1; // the last key this row sees
        for (int h = 0; h < H; h++) {
            int g = h / (H / Hkv);
            const double *qh = q + (size_t)h * 2 * hd, *gate = qh + hd;
            double mx = -INFINITY;
            for (int j = 0; j <= last; j++) {
                const double *kj = j < n_past ? st->K + (size_t)j * kvd + g * hd : Kb + (size_t)(j - n_past) * kvd + g * hd;
                double s = 0;
                for (int i = 0; i < hd; i++) s += qh[i] * kj[i];
                sc[j] = s * m->kq_scale;
                if (sc[j] > mx) mx = sc[j];
            }
            double sum = 0;
            for (int j = 0; j <= last; j++) { sc[j] = exp(sc[j] - mx); sum += sc[j]; }
            double *oh = o + (size_t)h * hd;
            for (int i = 0; i < hd; i++) oh[i] = 0;
            for (int j = 0; j <= last; j++) {
                const double *vj = j < n_past ? st->V + (size_t)j * kvd + g * hd : Vb + (size_t)(j - n_past) * kvd + g * hd;
                double p = sc[j] / sum;
                for (int i = 0; i < hd; i++) oh[i] += p * vj[i];
            }
            for (int i = 0; i < hd; i++) oh[i] *= sigm(gate[i]);
        }
        matvec(l->wo->v, H * hd, E, o, out + (size_t)t * E);
    }
    if (causal) {
        memcpy(st->K + (size_t)n_past * kvd, Kb, (size_t)n * kvd * sizeof(double));
        memcpy(st->V + (size_t)n_past * kvd, Vb, (size_t)n * kvd * sizeof(double));
    }
    free(qg); free(Kb); free(Vb); free(sc); free(o);
}

// One step of the gated delta rule on one value head: S [dk][dv] (S[i][j], i key dim, j value dim).
static void delta_step(double *S, int dk, int dv, const double *q, const double *k, const double *v, double g, double beta, double *o) {
    double decay = exp(g);
    for (int x = 0; x < dk * dv; x++) S[x] *= decay;
    double *delta = xcalloc((size_t)dv, sizeof(double));
    for (int j = 0; j < dv; j++) {
        double s = 0;
        for (int i = 0; i < dk; i++) s += S[i * dv + j] * k[i];
        delta[j] = (v[j] - s) * beta;
    }
    for (int i = 0; i < dk; i++)
        for (int j = 0; j < dv; j++) S[i * dv + j] += k[i] * delta[j];
    double scale = 1.0 / sqrt((double)dv);
    for (int j = 0; j < dv; j++) {
        double s = 0;
        for (int i = 0; i < dk; i++) s += S[i * dv + j] * q[i];
        o[j] = s * scale;
    }
    free(delta);
}

// GDN over n rows. causal: the normal layer, advancing the ring and S. preview: spec S2.4,
// reading the ring and S without changing them.
static void gdn_layer(const Model *m, const Layer *l, LState *st, const double *a, int n, int preview, double *out) {
    int E = m->E, C = m->conv_dim, Hk = m->Hk, Hv = m->Hv, dk = m->dk, dv = m->dv, inner = Hv * dv;
    double *U = xcalloc((size_t)(n + 3) * C, sizeof(double)); // [ring(3) | u_0..u_{n-1}]
    double *z = xcalloc((size_t)n * inner, sizeof(double));
    double *beta = xcalloc((size_t)n * Hv, sizeof(double)), *gg = xcalloc((size_t)n * Hv, sizeof(double));
    double *betar = xcalloc((size_t)n * Hv, sizeof(double)), *ggr = xcalloc((size_t)n * Hv, sizeof(double));
    double *y = xcalloc((size_t)n * C, sizeof(double));
    double *tmp = xcalloc((size_t)Hv, sizeof(double));
    int rev = preview && l->rev_mix;
    memcpy(U, st->ring, (size_t)3 * C * sizeof(double));
    for (int t = 0; t < n; t++) {
        const double *x = a + (size_t)t * E;
        matvec(l->qkv->v, E, C, x, U + (size_t)(t + 3) * C);
        matvec(l->gate->v, E, inner, x, z + (size_t)t * inner);
        matvec(l->beta->v, E, Hv, x, tmp);
        for (int h = 0; h < Hv; h++) beta[t * Hv + h] = sigm(tmp[h]);
        matvec(l->alpha->v, E, Hv, x, tmp);
        for (int h = 0; h < Hv; h++) gg[t * Hv + h] = softplus(tmp[h] + l->dt->v[h]) * l->a->v[h];
        if (rev) {
            matvec(l->beta_rev->v, E, Hv, x, tmp);
            for (int h = 0; h < Hv; h++) betar[t * Hv + h] = sigm(tmp[h]);
            matvec(l->alpha_rev->v, E, Hv, x, tmp);
            for (int h = 0; h < Hv; h++) ggr[t * Hv + h] = softplus(tmp[h] + l->dt_rev->v[h]) * l->a_rev->v[h];
        }
    }
    // conv: causal taps over U, plus right taps over the following block rows (preview only)
    for (int t = 0; t < n; t++)
        for (int c = 0; c < C; c++) {
            double s = 0;
            for (int j = 0; j < 4; j++) s += l->conv->v[(size_t)c * 4 + j] * U[(size_t)(t + j) * C + c];
            if (preview && l->conv_right)
                for (int d = 1; d <= 3 && t + d < n; d++) s += l->conv_right->v[(size_t)c * 3 + (d - 1)] * U[(size_t)(t + 3 + d) * C + c];
            y[(size_t)t * C + c] = silu(s);
        }
    for (int t = 0; t < n; t++) {
        double *yt = y + (size_t)t * C;
        for (int kh = 0; kh < Hk; kh++) { l2norm(yt + kh * dk, dk, m->eps); l2norm(yt + Hk * dk + kh * dk, dk, m->eps); }
    }
    // forward scan (S itself when causal, a copy when preview)
    size_t sz = (size_t)Hv * dk * dv;
    double *S = preview ? xcalloc(sz, sizeof(double)) : st->S;
    if (preview) memcpy(S, st->S, sz * sizeof(double));
    double *o = xcalloc((size_t)n * inner, sizeof(double));
    for (int t = 0; t < n; t++) {
        const double *yt = y + (size_t)t * C;
        for (int h = 0; h < Hv; h++) {
            int kh = h % Hk; // tiled v-head order (spec S1.2)
            delta_step(S + (size_t)h * dk * dv, dk, dv, yt + kh * dk, yt + Hk * dk + kh * dk, yt + 2 * Hk * dk + h * dv,
                       gg[t * Hv + h], beta[t * Hv + h], o + (size_t)t * inner + h * dv);
        }
    }
    if (preview) free(S);
    if (rev) {
        double *Sr = xcalloc(sz, sizeof(double)), *orv = xcalloc((size_t)dv, sizeof(double));
        for (int t = n - 1; t >= 0; t--) {
            const double *yt = y + (size_t)t * C;
            for (int h = 0; h < Hv; h++) {
                int kh = h % Hk;
                delta_step(Sr + (size_t)h * dk * dv, dk, dv, yt + kh * dk, yt + Hk * dk + kh * dk, yt + 2 * Hk * dk + h * dv,
                           ggr[t * Hv + h], betar[t * Hv + h], orv);
                for (int j = 0; j < dv; j++) o[(size_t)t * inner + h * dv + j] += l->rev_mix->v[h] * orv[j];
            }
        }
        free(Sr); free(orv);
    }
    // gated RMSNorm per head, then ssm_out
    for (int t = 0; t < n; t++) {
        double *ot = o + (size_t)t * inner;
        for (int h = 0; h < Hv; h++) {
            rmsnorm(ot + h * dv, l->ssm_norm->v, dv, m->eps, ot + h * dv);
            for (int j = 0; j < dv; j++) ot[h * dv + j] *= silu(z[(size_t)t * inner + h * dv + j]);
        }
        matvec(l->ssm_out->v, inner, E, ot, out + (size_t)t * E);
    }
    if (!preview) memcpy(st->ring, U + (size_t)n * C, (size_t)3 * C * sizeof(double)); // last 3 rows
    free(U); free(z); free(beta); free(gg); free(betar); free(ggr); free(y); free(tmp); free(o);
}

// MoE over n rows of normed inputs. coreset: spec S2.5 with p = m->coreset_p.
static void moe_layer(const Model *m, const Layer *l, const double *a, int n, int coreset, double *out) {
    int E = m->E, X = m->n_exp, K = m->k_used, F = m->ff, FS = m->ff_sh;
    double *p = xcalloc((size_t)n * X, sizeof(double));
    for (int t = 0; t < n; t++) {
        double *pt = p + (size_t)t * X;
        matvec(l->router->v, E, X, a + (size_t)t * E, pt);
        double mx = -INFINITY, sum = 0;
        for (int e = 0; e < X; e++) if (pt[e] > mx) mx = pt[e];
        for (int e = 0; e < X; e++) { pt[e] = exp(pt[e] - mx); sum += pt[e]; }
        for (int e = 0; e < X; e++) pt[e] /= sum;
    }
    char *allowed = xcalloc((size_t)X, 1);
    for (int e = 0; e < X; e++) allowed[e] = 1;
    if (coreset && m->coreset_p > 0) {
        double *P = xcalloc((size_t)X, sizeof(double));
        int *ord = xcalloc((size_t)X, sizeof(int));
        for (int t = 0; t < n; t++) for (int e = 0; e < X; e++) P[e] += p[(size_t)t * X + e];
        for (int e = 0; e < X; e++) ord[e] = e;
        for (int i = 0; i < X; i++) // selection sort: descending P, ties to the lower index
            for (int j = i + 1; j < X; j++)
                if (P[ord[j]] > P[ord[i]] || (P[ord[j]] == P[ord[i]] && ord[j] < ord[i])) { int s = ord[i]; ord[i] = ord[j]; ord[j] = s; }
        for (int i = 0; i + 1 < X; i++) margin(P[ord[i]] - P[ord[i + 1]]);
        double target = m->coreset_p * n, cum = 0;
        for (int e = 0; e < X; e++) allowed[e] = 0;
        for (int i = 0; i < X; i++) {
            allowed[ord[i]] = 1;
            cum += P[ord[i]];
            margin(cum - target);
            if (cum >= target) break;
        }
        free(P); free(ord);
    }
    double *hg = xcalloc((size_t)(F > FS ? F : FS), sizeof(double)), *hu = xcalloc((size_t)(F > FS ? F : FS), sizeof(double));
    double *y = xcalloc((size_t)E, sizeof(double));
    int *sel = xcalloc((size_t)K, sizeof(int));
    char *used = xcalloc((size_t)X, 1);
    for (int t = 0; t < n; t++) {
        const double *x = a + (size_t)t * E, *pt = p + (size_t)t * X;
        double *ot = out + (size_t)t * E;
        for (int i = 0; i < E; i++) ot[i] = 0;
        memset(used, 0, (size_t)X);
        int ns = 0;
        double wsum = 0;
        for (int r = 0; r < K; r++) {
            int best = -1;
            for (int e = 0; e < X; e++)
                if (allowed[e] && !used[e] && (best < 0 || pt[e] > pt[best])) best = e;
            if (best < 0) break;
            used[best] = 1;
            sel[ns++] = best;
            wsum += pt[best];
        }
        // margin between the last chosen and the best unchosen allowed expert
        if (ns > 0) {
            for (int e = 0; e < X; e++) if (allowed[e] && !used[e]) margin(pt[sel[ns - 1]] - pt[e]);
        }
        if (wsum < 6.103515625e-5) wsum = 6.103515625e-5;
        for (int r = 0; r < ns; r++) {
            int e = sel[r];
            double w = pt[e] / wsum;
            matvec(l->exp_gate->v + (size_t)e * F * E, E, F, x, hg);
            matvec(l->exp_up->v + (size_t)e * F * E, E, F, x, hu);
            for (int i = 0; i < F; i++) hg[i] = silu(hg[i]) * hu[i];
            matvec(l->exp_down->v + (size_t)e * E * F, F, E, hg, y);
            for (int i = 0; i < E; i++) ot[i] += w * y[i];
        }
        // shared expert
        matvec(l->sh_gate->v, E, FS, x, hg);
        matvec(l->sh_up->v, E, FS, x, hu);
        for (int i = 0; i < FS; i++) hg[i] = silu(hg[i]) * hu[i];
        matvec(l->sh_down->v, FS, E, hg, y);
        double sg = 0;
        for (int i = 0; i < E; i++) sg += l->sh_gate_inp->v[i] * x[i];
        sg = sigm(sg);
        for (int i = 0; i < E; i++) ot[i] += y[i] * sg;
    }
    free(p); free(allowed); free(hg); free(hu); free(y); free(sel); free(used);
}

// The whole model over n rows (token ids) at positions st->n_past..; causal (advancing the state)
// or preview (spec S2.2, state unchanged). Writes logits [n][n_vocab] as float.
static void forward(const Model *m, State *st, const int *tok, int n, int preview, float *logits) {
    int E = m->E;
    double *x = xcalloc((size_t)n * E, sizeof(double)), *a = xcalloc((size_t)n * E, sizeof(double));
    double *o = xcalloc((size_t)n * E, sizeof(double));
    for (int t = 0; t < n; t++) memcpy(x + (size_t)t * E, m->embd->v + (size_t)tok[t] * E, (size_t)E * sizeof(double));
    for (int il = 0; il < m->n_layer; il++) {
        const Layer *l = &m->L[il];
        for (int t = 0; t < n; t++) rmsnorm(x + (size_t)t * E, l->attn_norm->v, E, m->eps, a + (size_t)t * E);
        if (l->is_attn) attn_layer(m, l, &st->l[il], st->n_past, st->cap, a, n, !preview, o);
        else gdn_layer(m, l, &st->l[il], a, n, preview, o);
        for (size_t i = 0; i < (size_t)n * E; i++) x[i] += o[i];
        for (int t = 0; t < n; t++) rmsnorm(x + (size_t)t * E, l->post_norm->v, E, m->eps, a + (size_t)t * E);
        moe_layer(m, l, a, n, preview, o);
        for (size_t i = 0; i < (size_t)n * E; i++) x[i] += o[i];
    }
    double *lg = xcalloc((size_t)m->n_vocab, sizeof(double));
    for (int t = 0; t < n; t++) {
        rmsnorm(x + (size_t)t * E, m->out_norm->v, E, m->eps, a);
        matvec(m->out->v, E, m->n_vocab, a, lg);
        for (int v = 0; v < m->n_vocab; v++) logits[(size_t)t * m->n_vocab + v] = (float)lg[v];
    }
    if (!preview) st->n_past += n;
    free(x); free(a); free(o); free(lg);
}

// ------------------------------------------------------------------------------------------------

static int *parse_ids(const char *s, int *n, int n_vocab) {
    int cap = 16, k = 0;
    int *ids = xcalloc((size_t)cap, sizeof(int));
    const char *p = s;
    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v >= n_vocab) die("bad token list: %s", s);
        if (k == cap) { cap *= 2; ids = realloc(ids, (size_t)cap * sizeof(int)); if (!ids) die("out of memory%s", NULL); }
        ids[k++] = (int)v;
        p = end;
        if (*p == ',') p++;
        else if (*p) die("bad token list: %s", s);
    }
    if (!k) die("empty token list%s", NULL);
    *n = k;
    return ids;
}

static void write_f32(const char *path, const float *x, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(x, sizeof(float), n, f) != n || fclose(f)) die("cannot write %s", path);
}

int main(int argc, char **argv) {
    const char *pos[4] = { 0 }, *causal_out = NULL;
    int n_pos = 0, verbose = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--causal") && i + 1 < argc) causal_out = argv[++i];
        else if (!strcmp(argv[i], "-v")) verbose = 1;
        else if (n_pos < 4) pos[n_pos++] = argv[i];
        else n_pos = 5;
    }
    if (n_pos != 4) {
        fprintf(stderr, "usage: preview_ref MODEL.gguf PROMPT_IDS BLOCK_IDS OUT.bin [--causal OUT2.bin] [-v]\n");
        return 2;
    }
    Gguf g = { 0 };
    gguf_open(&g, pos[0]);
    Model m = { 0 };
    load_model(&m, &g);
    int n_p, n_b;
    int *prompt = parse_ids(pos[1], &n_p, m.n_vocab), *block = parse_ids(pos[2], &n_b, m.n_vocab);

    State st = { 0 };
    st.cap = n_p;
    st.l = xcalloc((size_t)m.n_layer, sizeof(LState));
    for (int il = 0; il < m.n_layer; il++) {
        LState *s = &st.l[il];
        if (m.L[il].is_attn) {
            s->K = xcalloc((size_t)st.cap * m.n_head_kv * m.hd, sizeof(double));
            s->V = xcalloc((size_t)st.cap * m.n_head_kv * m.hd, sizeof(double));
        } else {
            s->ring = xcalloc((size_t)3 * m.conv_dim, sizeof(double));
            s->S = xcalloc((size_t)m.Hv * m.dk * m.dv, sizeof(double));
        }
    }
    float *lp = xcalloc((size_t)n_p * m.n_vocab, sizeof(float));
    forward(&m, &st, prompt, n_p, 0, lp);
    if (causal_out) write_f32(causal_out, lp, (size_t)n_p * m.n_vocab);
    double causal_margin = g_min_margin;
    g_min_margin = INFINITY;
    float *lb = xcalloc((size_t)n_b * m.n_vocab, sizeof(float));
    forward(&m, &st, block, n_b, 1, lb);
    write_f32(pos[3], lb, (size_t)n_b * m.n_vocab);
    if (verbose)
        fprintf(stderr, "preview_ref: prompt %d, block %d rows; smallest routing margin: causal %.3g, preview %.3g%s\n",
                n_p, n_b, causal_margin, g_min_margin, m.coreset_p > 0 ? " (coreset)" : "");
    return 0;
}
