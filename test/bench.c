/* bench.c — clover.c vs llama.cpp speed on the same GGUF with the same threads (make bench).
 *
 *   build/bench -m MODEL [-l LLAMA_MODEL] [-t THREADS] [-r REPS] [-p PROMPT] [-n DECODE] [-v VERIFY] [-s 1] [-c cpu]
 *
 * One process holds both programs: clover.c itself (included with TESTING defined, as test/unit.c
 * does) and llama.cpp's prebuilt library (as test/ref.c drives it). Each repetition runs clover
 * and llama.cpp one after the other, alternating which goes first, on the same token ids:
 *   prefill  a PROMPT-token prompt (default 512) in one batch                       -> tokens/s
 *   decode   DECODE single-token steps after it (default 64), logits of every step    -> tokens/s
 *   verify   one VERIFY-row batch (default 16) with logits of every row, after those -> seconds,
 *            and its cost in decode steps (clover computes it in row order, as draft-self does)
 *   preview  clover only, where the model has a mask token (clover_moe): one VERIFY-row preview
 *            after the verify, draft-self's block (the last token, then masks) -> seconds, steps
 * llama.cpp loads LLAMA_MODEL (default MODEL): for a clover_moe MODEL its qwen35moe twin, the same
 * file without the preview's tensors (test/bench.sh writes it), which llama.cpp does not know.
 * These machines drift by 30-50% between runs, so the summary gives medians over repetitions of
 * each figure and of the per-repetition clover/llama.cpp ratios. It also measures the memory
 * bandwidth (THREADS threads streaming a 1 GiB buffer, the best of 2 reads by each of four forms: a
 * plain sum, 32-byte loads into four sums, and those over 16 or 8 parts read in step with a
 * prefetch ahead; in every repetition, so that it sees the same machine as the programs; their
 * median) and the fraction of it that decoding reaches: the bytes one decode step
 * moves (the weights it reads: every matrix, the n_used experts of each expert tensor, one embedding
 * row; each GDN layer's state read and written; the K and V rows of the step in the middle of the
 * decode) times the repetition's decode rate over the repetition's bandwidth, the median of those.
 * clover uses an F16 KV cache and flash attention (its defaults); llama.cpp runs with its own
 * defaults (F16 cache, flash attention auto, which its CPU backend turns on).
 *
 * Then clover's stage tables: where the time of the prefill, a decode step and the verify batch goes (every
 * task of the thread pool timed and named: each matrix family, the experts, attention, the delta
 * rule, ...; weight bytes and GB/s per stage; the serial time between tasks; the cost of waking
 * the threads), what the last decode step's products cost at in-cache kernel speed (where that
 * is near the step's time, decoding is bound by the kernels, not by memory), and the verify's own
 * cost: the weight bytes it must read (every dense matrix once, the union of the experts its rows
 * chose) over the bandwidth, its compute floor (its products at in-cache kernel speed, plus the
 * measured time of the stages that read no weights), and the floor of the two together (the same
 * for the preview, where there is one): the pool
 * runs one task at a time, so each task that reads weights takes at least the larger of its bytes
 * at the bandwidth and its kernels (a batch's dense matrices are bound by the one, its experts by
 * the other), and the pass at least the sum of those plus the rest.
 * -s 1: the stage tables only (no llama.cpp). -c cpu: time them in the calling thread's CPU time,
 * which with -t 1 leaves out the time spent waiting for a CPU on a machine shared with other work.
 * The summary ends in machine-readable lines `BENCH key=value ...`: the verify's, and the preview's
 * where there is one. */
#define TESTING
#pragma GCC diagnostic ignored "-Wunused-function"   /* clover.c's command-line half is not used here */
#include "../clover.c"

#include "llama_host.h"

static void quiet_log(enum ggml_log_level level, const char *text, void *ud) {
    (void)ud;
    if (level == GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

typedef struct { double prefill, decode, verify, preview; } Times;   /* seconds for each phase */

/* --- clover ----------------------------------------------------------------------------------- */
static void clover_reset(Ctx *ctx) {
    const Config *c = &ctx->m->c;
    ctx->st.n_past = 0;
    for (int il = 0; il < c->n_layer; il++)
        if (ctx->m->layers[il].recurrent) {
            memset(ctx->st.ring[il], 0, ring_floats(c) * sizeof(float));
            memset(ctx->st.S[il], 0, S_floats(c) * sizeof(float));
        }
}

/* A preview block after the committed tokens: the last committed token, then V - 1 masks (a
 * draft-self round's block) */
static void preview_block(const Config *c, const int *ids, int committed, int V, int *block) {
    block[0] = ids[committed - 1];
    for (int j = 1; j < V; j++) block[j] = c->mask_id;
}

static Times clover_run(Ctx *ctx, const int *ids, int P, int N, int V, float *logits) {
    Times t;
    clover_reset(ctx);
    double t0 = now_seconds();
    prefill(ctx, ids, P, logits, NULL);
    t.prefill = now_seconds() - t0;
    t0 = now_seconds();
    for (int i = 0; i < N; i++) forward_causal(ctx, ids + P + i, 1, logits, 1);
    t.decode = now_seconds() - t0;
    t0 = now_seconds();
    forward_causal(ctx, ids + P + N, V, logits, V);
    t.verify = now_seconds() - t0;
    t.preview = 0;
    if (ctx->m->c.mask_id >= 0) {
        int block[V];
        preview_block(&ctx->m->c, ids, P + N + V, V, block);
        t0 = now_seconds();
        forward_preview(ctx, block, V, logits);
        t.preview = now_seconds() - t0;
    }
    return t;
}

/* --- llama.cpp -------------------------------------------------------------------------------- */
static void llama_eval(struct llama_context *c, const int *ids, int n, int pos0, bool all_logits) {
    if (eval_batch(c, ids, n, pos0, all_logits) != 0) fatal("llama_decode failed for %d tokens at position %d", n, pos0);
}

static Times llama_run(struct llama_context *c, const int *ids, int P, int N, int V) {
    Times t;
    llama_memory_clear(llama_get_memory(c), true);
    double t0 = now_seconds();
    llama_eval(c, ids, P, 0, false);
    t.prefill = now_seconds() - t0;
    t0 = now_seconds();
    for (int i = 0; i < N; i++) llama_eval(c, ids + P + i, 1, P + i, true);
    t.decode = now_seconds() - t0;
    t0 = now_seconds();
    llama_eval(c, ids + P + N, V, P + N, true);
    t.verify = now_seconds() - t0;
    return t;
}

/* The clock of the stage tables: wall time, or with -c cpu the calling thread's CPU time (on a
 * machine shared with other work, with -t 1, this leaves out the time the thread waited for a CPU). */
static bool cpu_clock;

static double stage_clock(void) {
    if (!cpu_clock) return now_seconds();
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* --- memory bandwidth and bytes per decode step ----------------------------------------------- */
/* How a thread reads its share: a plain sum (parts 0), or 32-byte loads into four independent sums
 * over `parts` equal parts of the share read in step, each part asking for its bytes `ahead`
 * bytes ahead (0: the hardware prefetchers alone). Which is fastest depends on the machine. The
 * meter had the first two until 2026-12-07 (neither always the faster; one stream of 64-byte loads
 * with a prefetch was slower than both on the EPYC that chose them); on an Intel Xeon they read 11
 * and 13-17 GB/s (2 threads, 1 GiB) while 16 parts with a prefetch 512 bytes ahead read 27-30, and
 * clover's decode step, whose kernels read several rows in step and ask for them ahead, moved 31
 * GB/s: a meter slower than the program it measures reports fractions above 1. So
 * memory_bandwidth takes the best of them all. */
typedef uint64_t U64x4 __attribute__((vector_size(32)));
typedef struct { int parts; size_t ahead; } ReadForm;
static const ReadForm READ_FORMS[] = {{0, 0}, {1, 0}, {16, 512}, {8, 1024}};
typedef struct { const uint64_t *p; size_t n; ReadForm form; uint64_t sum, bytes; } StreamTask;   /* bytes: read, all threads */

static void stream_task(void *arg, int ith, int nth) {
    StreamTask *st = arg;
    size_t i0 = st->n / 16 * ith / nth * 16, i1 = st->n / 16 * (ith + 1) / nth * 16;
    uint64_t sum = 0, bytes = (i1 - i0) * 8;
    if (st->form.parts > 0) {
        int parts = st->form.parts;
        size_t len = (i1 - i0) / parts / 16 * 16;   /* uint64 of each part (the remainder, < 16 x parts, unread) */
        bytes = len * parts * 8;
        U64x4 s[4] = {{0}, {0}, {0}, {0}};
        for (size_t i = 0; i < len; i += 16)
            for (int j = 0; j < parts; j++) {
                const uint64_t *q = st->p + i0 + j * len + i;   /* 128 bytes of part j */
                if (st->form.ahead) {
                    __builtin_prefetch((const char *)q + st->form.ahead);
                    __builtin_prefetch((const char *)q + st->form.ahead + 64);
                }
                for (int k = 0; k < 4; k++) {
                    U64x4 v;
                    memcpy(&v, q + 4 * k, sizeof v);
                    s[k] += v;
                }
            }
        U64x4 t = s[0] + s[1] + s[2] + s[3];
        sum = t[0] + t[1] + t[2] + t[3];
    } else {
        for (size_t i = i0; i < i1; i++) sum += st->p[i];
    }
    __atomic_fetch_add(&st->sum, sum, __ATOMIC_RELAXED);
    __atomic_fetch_add(&st->bytes, bytes, __ATOMIC_RELAXED);
}

static double memory_bandwidth(Pool *pool, uint64_t *p, size_t n) {   /* bytes/s, best of 2 reads of p[0..n) by each form */
    double best = 0;
    int n_forms = (int)(sizeof READ_FORMS / sizeof READ_FORMS[0]);
    for (int r = 0; r < 2 * n_forms; r++) {
        StreamTask st = {p, n, READ_FORMS[r % n_forms], 0, 0};
        double t0 = stage_clock();
        pool_run(pool, stream_task, &st);
        double bw = st.bytes / (stage_clock() - t0);
        if (st.sum == 1) fatal("impossible");   /* keeps the reads */
        if (bw > best) best = bw;
    }
    return best;
}

/* The bytes of the weights one decode step reads: every tensor, the used share of each expert
 * tensor, one embedding row; not the preview's tensors (CLOVER_EXTRA in clover.c's table of names). */
static double decode_bytes(const Model *m) {
    const GGUF *f = &m->file;
    const Config *c = &m->c;
    double bytes = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const GGUFTensor *t = &f->tensors[i];
        double b = (double)t->nbytes;
        if (memmem(t->name.ptr, t->name.len, "_exps", 5)) b *= (double)c->n_expert_used / c->n_expert;
        else if (t->name.len == 17 && !memcmp(t->name.ptr, "token_embd.weight", 17)) b /= c->n_vocab;
        bytes += b;
    }
    for (size_t k = 0; k < sizeof TENSOR_NAMES / sizeof TENSOR_NAMES[0]; k++)
        for (int il = 0; il < c->n_layer && TENSOR_NAMES[k].need == CLOVER_EXTRA; il++) {
            char name[96];
            snprintf(name, sizeof name, TENSOR_NAMES[k].name, il);
            const GGUFTensor *t = find_tensor(f, name);
            if (t) bytes -= (double)t->nbytes;
        }
    return bytes;
}

/* The other bytes a decode step must move, at n_keys keys of context: each GDN layer's state (S and the
 * conv ring) read and written, each attention layer's K and V rows read. */
static double decode_state_bytes(const Model *m, const State *st, int n_keys) {
    const Config *c = &m->c;
    double kv = 0;
    for (int il = 0; il < c->n_layer; il++)
        if (!m->layers[il].recurrent)
            kv += (double)n_keys * c->n_head_kv * c->head_dim * (TYPES[st->k_type].bytes + TYPES[st->v_type].bytes);
    return 2.0 * (double)gdn_state_bytes(m) + kv;
}

/* --- where a pass's time goes: every task of the pool timed by its observer ------------------ */
typedef struct { char name[40]; int calls; double seconds, bytes; } Stage;
static Stage stages[64];
static int n_stages;

static Stage *stage(const char *name) {
    for (int i = 0; i < n_stages; i++)
        if (!strcmp(stages[i].name, name)) return &stages[i];
    if (n_stages == 64) fatal("bench: too many stages");
    Stage *s = &stages[n_stages++];
    *s = (Stage){0};
    snprintf(s->name, sizeof s->name, "%s", name);
    return s;
}

static double mat_bytes(const Mat *w) { return (double)w->n_out * w->row_bytes; }

/* A matrix's family: its tensor name without "blk.N." and ".weight". */
static void mat_family(const Mat *w, char *name, size_t size) {
    const char *p = w->t->name.ptr, *end = p + w->t->name.len;
    if (end - p > 4 && !memcmp(p, "blk.", 4)) {
        p += 4;
        while (p < end && *p != '.') p++;
        p++;
    }
    if (end - p > 7 && !memcmp(end - 7, ".weight", 7)) end -= 7;
    snprintf(name, size, "%.*s", (int)(end - p), p);
}

/* The products a pass asked for, when `recording`: each a matrix times T activation rows, in the
 * n_tasks-th task that read weights (task_bytes of them): the pool runs one task at a time, so a
 * pass takes at least the sum over its tasks of the larger of their bytes' time and their kernels'. */
typedef struct { Mat w; int T; bool batch; int task; } Product;
static Product products[8192];
static int n_products, n_tasks;
static double task_bytes[8192];
static bool recording;

static void record(const Mat *w, int T, bool batch) {
    if (recording && n_products < (int)(sizeof products / sizeof *products)) products[n_products++] = (Product){*w, T, batch, n_tasks};
}

/* The stage a task belongs to, and the weight bytes it reads. */
static void observe(TaskFn fn, void *arg, bool done) {
    static double t0;
    if (!done) {
        t0 = stage_clock();
        return;
    }
    double seconds = stage_clock() - t0;
    char name[40];
    double bytes = 0;
    if (fn == matmul_task) {
        const MatmulTask *mt = arg;
        mat_family(mt->w, name, sizeof name);
        bytes = mat_bytes(mt->w);
        record(mt->w, mt->T, mt->batch);
    } else if (fn == ffn_task) {
        const FfnTask *f = arg;
        snprintf(name, sizeof name, f->expert ? "experts (up, gate, down)" : "shared expert");
        for (int g = 0; g < f->n_groups; g++) {   /* each expert the rows chose, read once */
            const Mat *m[3] = {f->up, f->gate, f->down};
            for (int k = 0; k < 3; k++) {
                Mat w = ffn_mat(f, m[k], g);
                bytes += mat_bytes(&w);
                record(&w, f->first[g + 1] - f->first[g], f->batch);
            }
        }
    } else if (fn == gdn_conv_task) snprintf(name, sizeof name, "gdn conv, silu, l2 norm");
    else if (fn == gdn_scan_task) snprintf(name, sizeof name, "gdn delta rule");
    else if (fn == gdn_gated_norm_task) snprintf(name, sizeof name, "gdn gated norm");
    else if (fn == attn_task) snprintf(name, sizeof name, "attention (scores, softmax, V)");
    else if (fn == route_task) snprintf(name, sizeof name, "router softmax, top-k");
    else if (fn == moe_sum_task) snprintf(name, sizeof name, "expert weighted sum");
    else snprintf(name, sizeof name, "other task");
    if (recording && bytes > 0 && n_tasks < (int)(sizeof task_bytes / sizeof *task_bytes)) task_bytes[n_tasks++] = bytes;   /* after its products */
    Stage *s = stage(name);
    s->calls++;
    s->seconds += seconds;
    s->bytes += bytes;
}

static void empty_task(void *arg, int ith, int nth) { (void)arg, (void)ith, (void)nth; }

/* Seconds of one pool_run of a task that does nothing: waking the workers and waiting for them. */
static double pool_overhead(Pool *pool) {
    int n = 20000;
    double t0 = now_seconds();
    for (int i = 0; i < n; i++) pool_run(pool, empty_task, NULL);
    return (now_seconds() - t0) / n;
}

/* The stages of `passes` passes that took `total` seconds, per pass: calls, time, weight bytes. */
static void print_stages(const char *what, int passes, double total, double bw, double overhead) {
    double timed = 0, bytes = 0;
    int calls = 0;
    for (int i = 0; i < n_stages; i++) timed += stages[i].seconds, bytes += stages[i].bytes, calls += stages[i].calls;
    printf("%s: %.2f ms, %.0f MB of weights (%.2f ms at %.1f GB/s), %d tasks; per stage:\n", what, 1e3 * total / passes,
           bytes / passes / 1e6, 1e3 * bytes / passes / bw, bw / 1e9, calls / passes);
    printf("  %-32s %6s %9s %6s %9s %8s %7s\n", "stage", "tasks", "ms", "%", "MB", "GB/s", "of bw");
    for (int i = 0; i < n_stages; i++) {
        const Stage *s = &stages[i];
        printf("  %-32s %6.1f %9.3f %5.1f%% %9.2f", s->name, (double)s->calls / passes, 1e3 * s->seconds / passes,
               100 * s->seconds / total, s->bytes / passes / 1e6);
        if (s->bytes > 0) printf(" %8.1f %6.0f%%", s->bytes / s->seconds / 1e9, 100 * s->bytes / s->seconds / bw);
        printf("\n");
    }
    printf("  %-32s %6s %9.3f %5.1f%%   (norms, residuals, gates, embedding: serial)\n", "between tasks", "",
           1e3 * (total - timed) / passes, 100 * (total - timed) / total);
    printf("  %-32s %6s %9.3f %5.1f%%   (%.1f us per task with nothing to do, included above)\n", "pool wake-up and join", "",
           1e3 * overhead * calls / passes, 100 * overhead * calls / total, 1e6 * overhead);
}

/* The compute floor of the recorded products: each one's kernels timed on a slice of its matrix
 * small enough to stay in cache (the best of 3), scaled to the whole matrix, shared by nth threads.
 * *per_task (bw > 0): the sum over the recorded tasks of the larger of that and their bytes over bw. */
static double compute_floor(Ctx *ctx, int nth, double bw, double *per_task) {
    static double task_kernels[8192];
    memset(task_kernels, 0, sizeof task_kernels);
    Scratch *s = &ctx->sc;
    static float y[TILE_T * 4096];
    double total = 0;
    for (int i = 0; i < n_products; i++) {
        const Product *p = &products[i];
        size_t stride = rounded_bytes(p->w.type, p->w.n_in);
        int64_t rows = min64(p->w.n_out, ((int64_t)(1 << 16) / (int64_t)p->w.row_bytes + TILE_O) / TILE_O * TILE_O);
        rows = min64(rows, (int64_t)(sizeof y / sizeof *y) / p->T);
        memset(s->xq, 0, stride * p->T);   /* zeros: no denormals in the float kernels */
        double best = INFINITY;
        for (int r = 0; r < 4; r++) {   /* the first warms the cache */
            double t0 = stage_clock();
            matmul_rows(&p->w, p->batch, s->xq, stride, p->T, y, (size_t)rows, 0, rows, s->pack);
            double t = stage_clock() - t0;
            if (r > 0 && t < best) best = t;
        }
        total += best * (double)p->w.n_out / rows;
        if (p->task < (int)(sizeof task_kernels / sizeof *task_kernels)) task_kernels[p->task] += best * (double)p->w.n_out / rows / nth;
    }
    if (per_task) {
        *per_task = 0;
        for (int i = 0; i < n_tasks; i++) *per_task += fmax(task_bytes[i] / bw, task_kernels[i]);
    }
    return total / nth;
}

/* What a batch (the verify, the preview) must cost: the weight bytes it reads (every dense matrix
 * once, the union of the experts its rows chose) and its compute floor (its products at in-cache
 * kernel speed, plus the measured time of everything that reads no weights). */
typedef struct { double bytes, floor, staged; } BatchCost;

/* The stage table and the cost of the batch that just ran, `total` seconds, recorded. */
static BatchCost batch_cost(Ctx *ctx, const char *what, double total, double bw, int nth, double overhead) {
    print_stages(what, 1, total, bw, overhead);
    BatchCost bc = {0, 0, 0};
    double weights_time = 0;
    for (int i = 0; i < n_stages; i++)
        if (stages[i].bytes > 0) bc.bytes += stages[i].bytes, weights_time += stages[i].seconds;
    double kernels = compute_floor(ctx, nth, bw, &bc.staged);
    bc.floor = kernels + (total - weights_time);
    bc.staged += total - weights_time;
    printf("  its cost: %.0f MB of weights = %.2f ms at %.1f GB/s; compute floor %.2f ms (%d products at in-cache kernel "
           "speed on %d threads %.2f ms, the rest as measured %.2f ms)\n", bc.bytes / 1e6, 1e3 * bc.bytes / bw, bw / 1e9,
           1e3 * bc.floor, n_products, nth, 1e3 * kernels, 1e3 * (total - weights_time));
    printf("  per task (%d read weights, one at a time) the larger of its bytes at the bandwidth and its kernels, plus the rest: "
           "%.2f ms\n", n_tasks, 1e3 * bc.staged);
    return bc;
}

/* The stage tables of a P-token prompt, N decode steps after it and the V-row verify after them
 * (the same tokens and state as clover_run's, so the same routing), and, where the model has a
 * mask token (clover_moe), of a V-row preview after the verify: its cost in *pc. */
static BatchCost profile(Ctx *ctx, const int *ids, int P, int N, int V, float *logits, double bw, int nth, BatchCost *pc) {
    double overhead = pool_overhead(ctx->pool);
    clover_reset(ctx);
    prefill(ctx, ids, P, logits, NULL);   /* once untimed: the first pass over the mapped weights faults them in */
    clover_reset(ctx);
    ctx->pool->observe = observe;
    n_stages = 0;
    double t0 = stage_clock();
    prefill(ctx, ids, P, logits, NULL);
    print_stages("prefill", 1, stage_clock() - t0, bw, overhead);
    n_stages = 0;
    t0 = stage_clock();
    for (int i = 0; i < N; i++) {
        recording = i == N - 1;   /* the last step's products, for its compute floor */
        forward_causal(ctx, ids + P + i, 1, logits, 1);
    }
    recording = false;
    print_stages("decode step", N, stage_clock() - t0, bw, overhead);
    printf("  its products at in-cache kernel speed on %d threads: %.2f ms\n", nth, 1e3 * compute_floor(ctx, nth, 0, NULL));
    n_stages = n_products = n_tasks = 0;
    recording = true;
    t0 = stage_clock();
    forward_causal(ctx, ids + P + N, V, logits, V);
    double total = stage_clock() - t0;
    recording = false;
    BatchCost vc = batch_cost(ctx, "verify batch", total, bw, nth, overhead);
    if (ctx->m->c.mask_id >= 0) {
        int block[V];
        preview_block(&ctx->m->c, ids, P + N + V, V, block);
        ctx->pool->observe = NULL;
        forward_preview(ctx, block, V, logits);   /* once untimed: its own scratch (the states it starts from) faulted in */
        ctx->pool->observe = observe;
        n_stages = n_products = n_tasks = 0;
        recording = true;
        t0 = stage_clock();
        forward_preview(ctx, block, V, logits);
        total = stage_clock() - t0;
        recording = false;
        *pc = batch_cost(ctx, "preview pass", total, bw, nth, overhead);
    }
    ctx->pool->observe = NULL;
    return vc;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *x, int n) {
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return n % 2 ? x[n / 2] : (x[n / 2 - 1] + x[n / 2]) / 2;
}

int main(int argc, char **argv) {
    const char *path = NULL, *llama_path = NULL;
    int threads = 2, reps = 5, P = 512, N = 64, V = 16, stages_only = 0;
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc) fatal("usage: bench -m MODEL [-l LLAMA_MODEL] [-t THREADS] [-r REPS] [-p PROMPT] [-n DECODE] [-v VERIFY] [-s 1] [-c cpu]");
        const char *o = argv[i], *v = argv[++i];
        if (!strcmp(o, "-m")) path = v;
        else if (!strcmp(o, "-l")) llama_path = v;
        else if (!strcmp(o, "-t")) threads = atoi(v);
        else if (!strcmp(o, "-r")) reps = atoi(v);
        else if (!strcmp(o, "-p")) P = atoi(v);
        else if (!strcmp(o, "-n")) N = atoi(v);
        else if (!strcmp(o, "-v")) V = atoi(v);
        else if (!strcmp(o, "-s")) stages_only = atoi(v);
        else if (!strcmp(o, "-c")) cpu_clock = !strcmp(v, "cpu");
        else fatal("unknown option %s", o);
    }
    if (!path || threads < 1 || reps < 1 || P < 2 || N < 1 || V < 1) fatal("bench: bad arguments");
    int n_ctx = P + N + 2 * V;   /* the preview after the verify puts its block's K and V in the V cells after it */

    static Model m;
    model_load(&m, path);
    const Config *c = &m.c;
    static Ctx ctx;
    ctx.m = &m;
    ctx.n_threads = ctx.n_threads_batch = ctx.fa_threads = threads;
    ctx.flash_attn = true;   /* the program's default (-fa on), as llama.cpp's auto turns it on */
    int cap = P > V ? P : V;
    ctx.pool = pool_new(threads);
    state_init(&ctx.st, &m, n_ctx, T_F16, T_F16);
    scratch_init(&ctx.sc, c, cap, n_ctx, threads);
    float *logits = xmalloc((size_t)cap * c->n_vocab * sizeof(float));
    memset(logits, 0, (size_t)cap * c->n_vocab * sizeof(float));   /* its pages mapped now, not in a timed pass */
    int *ids = xmalloc((size_t)(P + N + V) * sizeof(int));
    uint64_t rng = 42;
    for (int i = 0; i < P + N + V; i++) ids[i] = (int)(random_uniform(&rng) * (c->n_vocab - 1));
    size_t n_stream = (size_t)1 << 27;   /* 1 GiB of uint64 for memory_bandwidth */
    uint64_t *stream = xmalloc(n_stream * 8);
    for (size_t i = 0; i < n_stream; i++) stream[i] = i;
    if (cpu_clock && !stages_only) fatal("bench: -c cpu times the stage tables only (-s 1)");
    if (stages_only) {   /* -s 1: clover's stage tables only */
        BatchCost pc;
        profile(&ctx, ids, P, N, V, logits, memory_bandwidth(ctx.pool, stream, n_stream), threads, &pc);
        return 0;
    }

    llama_log_set(quiet_log, NULL);
    llama_backend_init();
    char variant[64];
    const char *err = load_backends(NULL, variant);
    if (err) fatal("%s", err);
    fprintf(stderr, "bench: llama.cpp CPU variant %s\n", variant);
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    if (!llama_path) llama_path = path;
    struct llama_model *lm = llama_model_load_from_file(llama_path, mp);
    if (!lm) fatal("llama.cpp cannot load %s", llama_path);
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)n_ctx;
    cp.n_batch = cp.n_ubatch = (uint32_t)cap;
    cp.n_seq_max = 1;
    cp.n_threads = cp.n_threads_batch = threads;   /* the rest llama.cpp's defaults: flash attention auto, F16 cache */
    cp.no_perf = true;
    struct llama_context *lc = llama_init_from_model(lm, cp);
    if (!lc) fatal("llama.cpp cannot make a context of %d", n_ctx);


    printf("model %s: %d layers, vocabulary %d, %d threads; prompt %d, decode %d, verify %d rows\n", path, c->n_layer,
           c->n_vocab, threads, P, N, V);
    printf("%-4s %-10s %12s %12s %12s %12s\n", "rep", "program", "prefill t/s", "decode t/s", "verify ms", "verify/step");
    double *bws = xmalloc(reps * sizeof(double));
    double *cr[4], *lr[3], *ratio[5];   /* cr[3], ratio[4]: clover's preview, ms and decode steps */
    for (int k = 0; k < 4; k++) cr[k] = xmalloc(reps * sizeof(double));
    for (int k = 0; k < 3; k++) lr[k] = xmalloc(reps * sizeof(double));
    for (int k = 0; k < 5; k++) ratio[k] = xmalloc(reps * sizeof(double));
    for (int r = 0; r < reps; r++) {
        Times tc, tl;
        if (r % 2 == 0) {
            tc = clover_run(&ctx, ids, P, N, V, logits);
            tl = llama_run(lc, ids, P, N, V);
        } else {
            tl = llama_run(lc, ids, P, N, V);
            tc = clover_run(&ctx, ids, P, N, V, logits);
        }
        const Times *tt[2] = {&tc, &tl};
        double *out[2][3] = {{&cr[0][r], &cr[1][r], &cr[2][r]}, {&lr[0][r], &lr[1][r], &lr[2][r]}};
        for (int k = 0; k < 2; k++) {
            *out[k][0] = P / tt[k]->prefill;
            *out[k][1] = N / tt[k]->decode;
            *out[k][2] = tt[k]->verify;
            printf("%-4d %-10s %12.2f %12.2f %12.1f %12.2f\n", r, k ? "llama.cpp" : "clover", *out[k][0], *out[k][1],
                   1e3 * tt[k]->verify, tt[k]->verify / (tt[k]->decode / N));
        }
        bws[r] = memory_bandwidth(ctx.pool, stream, n_stream);
        ratio[0][r] = cr[0][r] / lr[0][r];
        ratio[1][r] = cr[1][r] / lr[1][r];
        ratio[2][r] = tc.verify / (tc.decode / N);   /* verify cost in decode steps */
        ratio[3][r] = tl.verify / (tl.decode / N);
        cr[3][r] = tc.preview;
        ratio[4][r] = tc.preview / (tc.decode / N);
        if (tc.preview > 0) printf("%-4d %-10s %12s %12s %12s %12s   preview %.1f ms = %.2f steps\n", r, "clover", "", "", "", "",
                                   1e3 * tc.preview, ratio[4][r]);
        fflush(stdout);
    }
    free(stream);
    double bw = median(bws, reps), weights = decode_bytes(&m), state = decode_state_bytes(&m, &ctx.st, P + N / 2), bytes = weights + state;
    double *frac[2] = {xmalloc(reps * sizeof(double)), xmalloc(reps * sizeof(double))};
    for (int r = 0; r < reps; r++) {   /* each repetition's decode rate over the bandwidth measured beside it */
        frac[0][r] = bytes * cr[1][r] / bws[r];
        frac[1][r] = bytes * lr[1][r] / bws[r];
    }
    double f_c = median(frac[0], reps), f_l = median(frac[1], reps);
    BatchCost pc = {0, 0, 0}, vc = profile(&ctx, ids, P, N, V, logits, bw, threads, &pc);
    double c_pre = median(cr[0], reps), c_dec = median(cr[1], reps), c_ver = median(cr[2], reps);
    double l_pre = median(lr[0], reps), l_dec = median(lr[1], reps), l_ver = median(lr[2], reps);
    double r_pre = median(ratio[0], reps), r_dec = median(ratio[1], reps);
    double c_vs = median(ratio[2], reps), l_vs = median(ratio[3], reps);
    printf("medians of %d runs:\n", reps);
    printf("  prefill %d tokens: clover %.2f t/s, llama.cpp %.2f t/s, ratio %.2fx\n", P, c_pre, l_pre, r_pre);
    printf("  decode  %d tokens: clover %.2f t/s, llama.cpp %.2f t/s, ratio %.2fx\n", N, c_dec, l_dec, r_dec);
    printf("  verify  %d rows:   clover %.1f ms = %.2f steps, llama.cpp %.1f ms = %.2f steps\n", V, 1e3 * c_ver, c_vs,
           1e3 * l_ver, l_vs);
    double v_bytes = vc.bytes / bw, v_cost = v_bytes > vc.floor ? v_bytes : vc.floor;
    printf("  verify's cost: %.0f MB of weights = %.1f ms at the bandwidth, compute floor %.1f ms; clover takes %.2fx the "
           "larger\n", vc.bytes / 1e6, 1e3 * v_bytes, 1e3 * vc.floor, c_ver / v_cost);
    printf("  per task the larger of bytes and kernels, plus the rest: %.1f ms; clover takes %.2fx that\n", 1e3 * vc.staged,
           c_ver / vc.staged);
    printf("  memory bandwidth %.1f GB/s (%d threads); a decode step moves %.0f MB (%.0f MB of weights, %.1f MB of recurrent state read "
           "and written and of K/V read at %d keys): clover reaches %.0f%%, llama.cpp %.0f%% (medians of the repetitions' fractions)\n",
           bw / 1e9, threads, bytes / 1e6, weights / 1e6, state / 1e6, P + N / 2, 100 * f_c, 100 * f_l);
    printf("BENCH prefill_clover=%.2f prefill_llama=%.2f prefill_ratio=%.2f decode_clover=%.2f decode_llama=%.2f "
           "decode_ratio=%.2f verify_clover_ms=%.1f verify_llama_ms=%.1f verify_steps_clover=%.2f verify_steps_llama=%.2f "
           "bandwidth_gbs=%.1f decode_mb=%.0f decode_bw_clover=%.2f decode_bw_llama=%.2f verify_mb=%.0f verify_bytes_ms=%.1f "
           "verify_floor_ms=%.1f verify_vs_cost=%.2f verify_staged_ms=%.1f verify_vs_staged=%.2f\n",
           c_pre, l_pre, r_pre, c_dec, l_dec, r_dec, 1e3 * c_ver, 1e3 * l_ver, c_vs, l_vs, bw / 1e9, bytes / 1e6,
           f_c, f_l, vc.bytes / 1e6, 1e3 * v_bytes, 1e3 * vc.floor, c_ver / v_cost, 1e3 * vc.staged, c_ver / vc.staged);
    if (c->mask_id >= 0) {   /* the preview: clover's alone (llama.cpp has no such pass) */
        double c_pv = median(cr[3], reps), c_ps = median(ratio[4], reps), p_bytes = pc.bytes / bw;
        double p_cost = p_bytes > pc.floor ? p_bytes : pc.floor;
        printf("  preview %d rows:   clover %.1f ms = %.2f steps; its cost: %.0f MB of weights = %.1f ms at the bandwidth, compute "
               "floor %.1f ms: clover takes %.2fx the larger; per task %.1f ms: %.2fx that\n", V, 1e3 * c_pv, c_ps, pc.bytes / 1e6,
               1e3 * p_bytes, 1e3 * pc.floor, c_pv / p_cost, 1e3 * pc.staged, c_pv / pc.staged);
        printf("BENCH preview_clover_ms=%.1f preview_steps_clover=%.2f preview_mb=%.0f preview_bytes_ms=%.1f preview_floor_ms=%.1f "
               "preview_vs_cost=%.2f preview_staged_ms=%.1f preview_vs_staged=%.2f\n", 1e3 * c_pv, c_ps, pc.bytes / 1e6,
               1e3 * p_bytes, 1e3 * pc.floor, c_pv / p_cost, 1e3 * pc.staged, c_pv / pc.staged);
    }
    llama_free(lc);
    llama_model_free(lm);
    llama_backend_free();
    return 0;
}
