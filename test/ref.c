// ref.c: llama.cpp oracle for clover.c tests (links the prebuilt libllama from node-llama-cpp;
// set up with test/setup-llama.sh, build with `make build/ref`).
//
//   build/ref -m MODEL [-c N_CTX] [-t THREADS] --tokenize FILE   ids of FILE's bytes, comma-separated
//   build/ref -m MODEL [-c N_CTX] [-t THREADS] --logits IDS OUT  float32 logits [n_tokens][n_vocab] to OUT
//   build/ref -m MODEL [-c N_CTX] [-t THREADS] --greedy IDS N    N greedy ids after the prompt IDS (all but
//                                                                its last token in one batch, then one per step);
//                                                                --step-logits OUT: each step's float32 logits [N][n_vocab]
//   build/ref -m MODEL --detok IDS                               text of IDS (special tokens rendered)
//   build/ref --cpu-variant                                      the CPU variant of llama.cpp it loads
//
// Options: -c N_CTX (default 4096), -t THREADS (default 1: llama.cpp's spinning pool crawls on a shared 2-core machine; results do not
// depend on it, except with flash attention on for one row over 512 or more cache cells, where ggml splits the keys over the
// threads), -ctk T / -ctv T (K / V cache type: f32, f16, bf16; default f32), -fa on|off|auto (flash attention; default off;
// auto is llama.cpp's own default), --no-repack (keep quantized weights in
// their GGUF layout instead of llama.cpp's CPU repacked layouts, e.g. Q4_0 -> Q4_0_8x8; this
// can change float summation order).
//
// IDS is a comma-separated list of token ids, or @PATH to read that list from a file.
// The CPU variant (libggml-cpu-<name>.so) is zen4 where this CPU runs it, else the best one it
// runs; LLAMA_CPU_VARIANT=NAME forces one (test/llama_host.h).
// Context: n_ctx = n_batch = n_ubatch = N_CTX (default 4096), F32 K/V cache and flash attention off unless
// -ctk/-ctv/-fa say otherwise, CPU only. Every error prints one line on stderr and exits with status 1.

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ggml.h"
#include "llama_host.h"

// ---------------------------------------------------------------------------------------------
// errors and logging

static char g_lasterr[1024];  // last error-level text logged by llama.cpp/ggml, one line
static enum ggml_log_level g_lastlvl = GGML_LOG_LEVEL_NONE;

static void append_err(const char *text) {
    size_t n = strlen(g_lasterr);
    for (const char *p = text; *p && n + 1 < sizeof g_lasterr; p++) {
        char c = (*p == '\n' || *p == '\r' || *p == '\t') ? ' ' : *p;
        if (c == ' ' && (n == 0 || g_lasterr[n - 1] == ' ')) continue;
        g_lasterr[n++] = c;
    }
    g_lasterr[n] = 0;
}

// Keep only error-level messages (and their continuations), collected into g_lasterr so that
// our own one-line error message can quote them.
static void log_cb(enum ggml_log_level level, const char *text, void *ud) {
    (void)ud;
    if (level == GGML_LOG_LEVEL_CONT) level = g_lastlvl;
    else g_lastlvl = level;
    if (level != GGML_LOG_LEVEL_ERROR) return;
    append_err(text);
}

static void abort_cb(const char *msg) {
    fflush(stdout);
    char one[1024];
    size_t n = 0;
    for (const char *p = msg; *p && n + 1 < sizeof one; p++) one[n++] = (*p == '\n') ? ' ' : *p;
    one[n] = 0;
    fprintf(stderr, "ref: llama.cpp aborted: %s\n", one);
    _exit(1);
}

__attribute__((format(printf, 1, 2), noreturn)) static void die(const char *fmt, ...) {
    fflush(stdout);
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t n = strlen(g_lasterr);
    while (n > 0 && g_lasterr[n - 1] == ' ') g_lasterr[--n] = 0;
    if (n) fprintf(stderr, "ref: %s (llama.cpp: %s)\n", msg, g_lasterr);
    else fprintf(stderr, "ref: %s\n", msg);
    exit(1);
}

static void usage(void) {
    die("usage: ref -m MODEL [-c N_CTX] [-t THREADS] [--no-repack] [-ub N_UBATCH] [-ctk T] [-ctv T] [-fa on|off|auto] [--step-logits OUT] [--dump-tensors DIR] (--cpu-variant | --tokenize FILE | --logits IDS OUT | "
        "--greedy IDS N | --detok IDS); IDS = comma-separated ids or @FILE");
}

// ---------------------------------------------------------------------------------------------
// helpers

static long parse_long(const char *s, const char *what, long lo, long hi) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) die("bad %s: '%s'", what, s);
    return v;
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) die("cannot open %s: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    if (!buf) die("out of memory");
    for (;;) {
        if (n == cap) {
            cap *= 2;
            buf = realloc(buf, cap + 1);
            if (!buf) die("out of memory");
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) break;
    }
    if (ferror(f)) die("cannot read %s", path);
    fclose(f);
    buf[n] = 0;
    *len = n;
    return buf;
}

// Parses "1,2,3" (spaces and newlines around ids allowed) or "@PATH" holding such a list.
static llama_token *parse_ids(const char *arg, int *n_out) {
    size_t len;
    char *owned = NULL;
    const char *s = arg;
    if (arg[0] == '@') s = owned = read_file(arg + 1, &len);
    int cap = 64, n = 0;
    llama_token *ids = malloc(cap * sizeof *ids);
    if (!ids) die("out of memory");
    const char *p = s;
    while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t') p++;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX) die("bad token id list at '%.20s'", p);
        if (n == cap) {
            cap *= 2;
            ids = realloc(ids, cap * sizeof *ids);
            if (!ids) die("out of memory");
        }
        ids[n++] = (llama_token)v;
        p = end;
        while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t') p++;
        if (*p == ',') {
            p++;
            while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t') p++;
            if (!*p) die("bad token id list: trailing comma");
        } else if (*p) {
            die("bad token id list at '%.20s'", p);
        }
    }
    free(owned);
    *n_out = n;
    return ids;
}

static void print_ids(const llama_token *ids, int n) {
    for (int i = 0; i < n; i++) printf(i ? ",%d" : "%d", ids[i]);
    printf("\n");
    if (fflush(stdout) || ferror(stdout)) die("cannot write to stdout");
}

// ---------------------------------------------------------------------------------------------

struct opts {
    const char *model;
    int n_ctx, n_threads;
    bool no_repack;
    const char *dump_dir;   // --dump-tensors DIR: every named F32/I32 graph tensor as DIR/<name>.bin (+ index.tsv)
    int n_ubatch;           // -ub N: physical batch (default: n_ctx, one batch)
    const char *step_logits;  // --greedy: where each step's logits go (NULL: nowhere)
    enum ggml_type type_k, type_v;              // -ctk / -ctv (default F32)
    enum llama_flash_attn_type flash_attn;      // -fa (default off)
};

static enum ggml_type parse_cache_type(const char *s) {
    if (!strcmp(s, "f32")) return GGML_TYPE_F32;
    if (!strcmp(s, "f16")) return GGML_TYPE_F16;
    if (!strcmp(s, "bf16")) return GGML_TYPE_BF16;
    die("bad cache type '%s' (f32, f16 or bf16)", s);
}

// -fa's values, as llama.cpp's common/arg.cpp spells them
static enum llama_flash_attn_type parse_flash_attn(const char *s) {
    if (!strcmp(s, "on") || !strcmp(s, "enabled") || !strcmp(s, "true") || !strcmp(s, "1")) return LLAMA_FLASH_ATTN_TYPE_ENABLED;
    if (!strcmp(s, "off") || !strcmp(s, "disabled") || !strcmp(s, "false") || !strcmp(s, "0")) return LLAMA_FLASH_ATTN_TYPE_DISABLED;
    if (!strcmp(s, "auto") || !strcmp(s, "-1")) return LLAMA_FLASH_ATTN_TYPE_AUTO;
    die("bad -fa value '%s' (on, off or auto)", s);
}

// Graph callback: asked once per tensor whether we want its data (yes), then called with the data.
// Writes every F32 or I32 tensor named by the model's graph (like "attn_norm-0"; auto-named views
// such as "Kcur-3 (view)" are skipped) to DIR/<name>.bin in ggml order, ne0 fastest: a
// non-contiguous view (e.g. v_conv-0) is gathered through its strides. A name evaluated twice
// (e.g. Kcur-3 before and after RoPE) keeps the later value. DIR/index.tsv gets one line per name:
// name, dtype (f32|i32), ne0,ne1,ne2,ne3, ggml op (of the value kept). Unnamed nodes (node_N) are skipped.
static struct { char name[64], line[192]; } g_index[4096];
static int g_n_index;

static bool dump_cb(struct ggml_tensor *t, bool ask, void *user) {
    if (ask) return true;
    const char *dir = user;
    if ((t->type != GGML_TYPE_F32 && t->type != GGML_TYPE_I32) || !t->data || !t->name[0] || strstr(t->name, " (") ||
        !strncmp(t->name, "node_", 5) || !strncmp(t->name, "leaf_", 5))
        return true;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.bin", dir, t->name);
    for (char *p = path + strlen(dir) + 1; *p; p++) if (*p == '/' || *p == ' ') *p = '_';
    FILE *f = fopen(path, "wb");
    if (!f) die("cannot write %s", path);
    if (ggml_is_contiguous(t)) fwrite(t->data, 1, ggml_nbytes(t), f);
    else
        for (int64_t i3 = 0; i3 < t->ne[3]; i3++)
            for (int64_t i2 = 0; i2 < t->ne[2]; i2++)
                for (int64_t i1 = 0; i1 < t->ne[1]; i1++)
                    for (int64_t i0 = 0; i0 < t->ne[0]; i0++)
                        fwrite((const char *)t->data + i0 * t->nb[0] + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3], 4, 1, f);
    if (fclose(f)) die("cannot write %s", path);
    int i = 0;
    while (i < g_n_index && strcmp(g_index[i].name, t->name)) i++;
    if (i == g_n_index) {
        if (i == 4096) return true;
        snprintf(g_index[g_n_index++].name, sizeof g_index[0].name, "%s", t->name);
    }
    snprintf(g_index[i].line, sizeof g_index[i].line, "%s\t%s\t%lld,%lld,%lld,%lld\t%s", t->name, t->type == GGML_TYPE_F32 ? "f32" : "i32",
             (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3], ggml_op_desc(t));
    snprintf(path, sizeof path, "%s/index.tsv", dir);
    f = fopen(path, "w");
    if (!f) die("cannot write %s", path);
    for (int k = 0; k < g_n_index; k++) fprintf(f, "%s\n", g_index[k].line);
    if (fclose(f)) die("cannot write %s", path);
    return true;
}

static struct llama_model *load_model(const struct opts *o, bool vocab_only) {
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.vocab_only = vocab_only;
    mp.use_extra_bufts = !o->no_repack;
    struct llama_model *m = llama_model_load_from_file(o->model, mp);
    if (!m) die("cannot load model %s", o->model);
    return m;
}

static struct llama_context *new_ctx(const struct opts *o, struct llama_model *m, uint32_t n_outputs_max) {
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)o->n_ctx;
    cp.n_batch = (uint32_t)o->n_ctx;
    cp.n_ubatch = (uint32_t)(o->n_ubatch && o->n_ubatch < o->n_ctx ? o->n_ubatch : o->n_ctx);
    cp.n_seq_max = 1;
    cp.n_outputs_max = n_outputs_max;  // only sizes buffers; 0 would mean n_batch
    cp.n_threads = o->n_threads;
    cp.n_threads_batch = o->n_threads;
    cp.flash_attn_type = o->flash_attn;
    cp.type_k = o->type_k;
    cp.type_v = o->type_v;
    cp.offload_kqv = false;
    cp.op_offload = false;
    cp.no_perf = true;
    if (o->dump_dir) {
        char path[1024];
        snprintf(path, sizeof path, "%s/index.tsv", o->dump_dir);
        FILE *f = fopen(path, "w");
        if (!f || fclose(f)) die("cannot write %s", path);
        cp.cb_eval = dump_cb;
        cp.cb_eval_user_data = (void *)o->dump_dir;
    }
    struct llama_context *c = llama_init_from_model(m, cp);
    if (!c) die("cannot create context (n_ctx %d)", o->n_ctx);
    if (llama_n_ctx(c) < (uint32_t)o->n_ctx) die("context has %u positions, asked for %d", llama_n_ctx(c), o->n_ctx);
    return c;
}

static void check_ids(const struct llama_vocab *v, const llama_token *ids, int n) {
    int nv = llama_vocab_n_tokens(v);
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= nv) die("token id %d out of range [0,%d)", ids[i], nv);
}

// Evaluates ids[0..n) at positions pos0.. in one batch; logits for every row or only the last.
static void decode(struct llama_context *c, const llama_token *ids, int n, int pos0, bool all_logits) {
    int r = eval_batch(c, ids, n, pos0, all_logits);
    if (r != 0) die("llama_decode failed (%d) for %d tokens at position %d", r, n, pos0);
}

static llama_token argmax(const float *x, int n) {
    int best = -1;
    for (int i = 0; i < n; i++)
        if (x[i] == x[i] && (best < 0 || x[i] > x[best])) best = i;  // ties keep the lowest id; NaN never wins
    if (best < 0) die("all logits are NaN");
    return best;
}

int main(int argc, char **argv) {
    llama_log_set(log_cb, NULL);
    ggml_set_abort_callback(abort_cb);

    struct opts o = {NULL, 4096, 1, false, NULL, 0, NULL, GGML_TYPE_F32, GGML_TYPE_F32, LLAMA_FLASH_ATTN_TYPE_DISABLED};
    const char *mode = NULL, *a1 = NULL, *a2 = NULL;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if (!strcmp(s, "-m") && i + 1 < argc) o.model = argv[++i];
        else if (!strcmp(s, "-c") && i + 1 < argc) o.n_ctx = (int)parse_long(argv[++i], "-c", 1, 1 << 24);
        else if (!strcmp(s, "-t") && i + 1 < argc) o.n_threads = (int)parse_long(argv[++i], "-t", 1, 1024);
        else if (!strcmp(s, "--no-repack")) o.no_repack = true;
        else if (!strcmp(s, "--dump-tensors") && i + 1 < argc) o.dump_dir = argv[++i];
        else if (!strcmp(s, "-ub") && i + 1 < argc) o.n_ubatch = (int)parse_long(argv[++i], "-ub", 1, 1 << 24);
        else if (!strcmp(s, "--step-logits") && i + 1 < argc) o.step_logits = argv[++i];
        else if (!strcmp(s, "-ctk") && i + 1 < argc) o.type_k = parse_cache_type(argv[++i]);
        else if (!strcmp(s, "-ctv") && i + 1 < argc) o.type_v = parse_cache_type(argv[++i]);
        else if ((!strcmp(s, "-fa") || !strcmp(s, "--flash-attn")) && i + 1 < argc) o.flash_attn = parse_flash_attn(argv[++i]);
        else if ((!strcmp(s, "--tokenize") || !strcmp(s, "--detok")) && i + 1 < argc && !mode) {
            mode = s;
            a1 = argv[++i];
        } else if ((!strcmp(s, "--logits") || !strcmp(s, "--greedy")) && i + 2 < argc && !mode) {
            mode = s;
            a1 = argv[++i];
            a2 = argv[++i];
        } else if (!strcmp(s, "--cpu-variant") && !mode) mode = s;
        else usage();
    }
    if ((!o.model && strcmp(mode ? mode : "", "--cpu-variant")) || !mode) usage();

    llama_backend_init();
    char variant[64];
    const char *err = load_backends(REFERENCE_VARIANT, variant);
    if (err) die("%s", err);
    if (!strcmp(mode, "--cpu-variant")) {
        printf("%s\n", variant);
        return 0;
    }

    if (!strcmp(mode, "--tokenize")) {
        size_t len;
        char *text = read_file(a1, &len);
        if (len > INT32_MAX / 2) die("%s is too large", a1);
        struct llama_model *m = load_model(&o, true);
        const struct llama_vocab *v = llama_model_get_vocab(m);
        int cap = (int)len + 16;
        llama_token *ids = malloc((size_t)cap * sizeof *ids);
        if (!ids) die("out of memory");
        int n = llama_tokenize(v, text, (int32_t)len, ids, cap, false, true);
        if (n == INT32_MIN) die("tokenization overflow");
        if (n < 0) {
            cap = -n;
            ids = realloc(ids, (size_t)cap * sizeof *ids);
            if (!ids) die("out of memory");
            n = llama_tokenize(v, text, (int32_t)len, ids, cap, false, true);
            if (n < 0) die("tokenization failed (%d)", n);
        }
        print_ids(ids, n);
        llama_model_free(m);
    } else if (!strcmp(mode, "--detok")) {
        int n;
        llama_token *ids = parse_ids(a1, &n);
        struct llama_model *m = load_model(&o, true);
        const struct llama_vocab *v = llama_model_get_vocab(m);
        check_ids(v, ids, n);
        int cap = 256;
        char *buf = malloc(cap);
        if (!buf) die("out of memory");
        for (int i = 0; i < n; i++) {
            int k = llama_token_to_piece(v, ids[i], buf, cap, 0, true);
            if (k < 0) {
                cap = -k;
                buf = realloc(buf, cap);
                if (!buf) die("out of memory");
                k = llama_token_to_piece(v, ids[i], buf, cap, 0, true);
                if (k < 0) die("llama_token_to_piece failed for token %d", ids[i]);
            }
            fwrite(buf, 1, (size_t)k, stdout);
        }
        if (fflush(stdout) || ferror(stdout)) die("cannot write to stdout");
        llama_model_free(m);
    } else if (!strcmp(mode, "--logits")) {
        int n;
        llama_token *ids = parse_ids(a1, &n);
        if (n == 0) die("no token ids given");
        if (n > o.n_ctx) die("%d tokens do not fit in n_ctx %d", n, o.n_ctx);
        struct llama_model *m = load_model(&o, false);
        const struct llama_vocab *v = llama_model_get_vocab(m);
        check_ids(v, ids, n);
        int nv = llama_vocab_n_tokens(v);
        struct llama_context *c = new_ctx(&o, m, (uint32_t)n);
        decode(c, ids, n, 0, true);
        FILE *f = fopen(a2, "wb");
        if (!f) die("cannot create %s: %s", a2, strerror(errno));
        for (int i = 0; i < n; i++) {
            const float *row = llama_get_logits_ith(c, i);
            if (!row) die("no logits for row %d", i);
            if (fwrite(row, sizeof(float), (size_t)nv, f) != (size_t)nv) die("cannot write %s", a2);
        }
        if (fclose(f)) die("cannot write %s: %s", a2, strerror(errno));
        llama_free(c);
        llama_model_free(m);
    } else {  // --greedy
        int n;
        llama_token *ids = parse_ids(a1, &n);
        int n_gen = (int)parse_long(a2, "N", 0, INT_MAX);
        if (n == 0) die("no prompt token ids given");
        if ((long)n + n_gen - 1 > o.n_ctx) die("%d prompt + %d generated tokens do not fit in n_ctx %d", n, n_gen, o.n_ctx);
        struct llama_model *m = load_model(&o, false);
        const struct llama_vocab *v = llama_model_get_vocab(m);
        check_ids(v, ids, n);
        int nv = llama_vocab_n_tokens(v);
        struct llama_context *c = new_ctx(&o, m, 1);
        llama_token *out = malloc(((size_t)n_gen + 1) * sizeof *out);
        if (!out) die("out of memory");
        // as llama-speculative-simple (and clover) run it: the prompt but its last token in one
        // batch, then one token per step from the last prompt token on
        if (n_gen > 0 && n > 1) decode(c, ids, n - 1, 0, false);
        llama_token last = ids[n - 1];
        FILE *steps = o.step_logits ? fopen(o.step_logits, "wb") : NULL;
        if (o.step_logits && !steps) die("cannot create %s: %s", o.step_logits, strerror(errno));
        for (int i = 0; i < n_gen; i++) {
            decode(c, &last, 1, n - 1 + i, true);
            const float *row = llama_get_logits_ith(c, -1);
            if (!row) die("no logits at generation step %d", i);
            if (steps && fwrite(row, sizeof(float), (size_t)nv, steps) != (size_t)nv) die("cannot write %s", o.step_logits);
            last = out[i] = argmax(row, nv);
        }
        if (steps && fclose(steps)) die("cannot write %s: %s", o.step_logits, strerror(errno));
        print_ids(out, n_gen);
        llama_free(c);
        llama_model_free(m);
    }
    llama_backend_free();
    return 0;
}
