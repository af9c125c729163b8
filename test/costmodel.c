/*
 * costmodel.c — predicted cost of clover-cuda's kernels on an H200, per kernel, from what the CUDA
 * emulation counted (CLOVER_EMU_COUNT, test/cuda_emu.h) and what the compiler reported (ptxas -v,
 * the sm_90a cubin's section sizes). Run by test/gpu.sh and `make costmodel`; the ptxas table alone
 * by `make ptxas`. Every time it prints is a prediction, not a measurement.
 *
 *   costmodel [--bw GBS] [--node-us US] [--ptxas LOG] [--sass LIST] [--slice L DECODE ROUND]... [--layers N]
 *
 *   --slice L DECODE ROUND  count files of a model slice of L layers: DECODE from a plain greedy run
 *                           (its last decode step, a CUDA graph, is taken), ROUND from a draft-self
 *                           run whose first round drafts 15 (segments 1-3 after the prompt: the
 *                           preview pass, the verify batch with its GDN save, the rollback; "-":
 *                           none, the decode step alone). With two
 *                           slices of L1 < L2 layers (the same layer pattern, period L2 - L1), every
 *                           count is extrapolated to N layers as c(L1) + (N - L1) / (L2 - L1) *
 *                           (c(L2) - c(L1)); with one, the slice is shown as it is.
 *   --ptxas LOG             nvcc -Xptxas -v output, demangled (c++filt): registers, spills, stack,
 *                           shared memory per kernel
 *   --sass LIST             readelf -SW of the sm_90a cubin, demangled: .text.KERNEL sizes; an sm_90
 *                           instruction is 16 bytes, so size / 16 is its SASS instruction count
 *   --bw GBS                HBM bandwidth (default 4800, the H200's nominal; test/gpu.sh passes the
 *                           copy bandwidth it measured)
 *   --node-us US            what a graph node's launch and drain cost (default 2; test/gpu.sh passes
 *                           what test/gpu_bw.cu measured for a chain of launches that fill the GPU)
 *
 * The model, per launch (constants below; leads from the H200/H100 datasheets and public
 * microbenchmarks, not measured here):
 *   HBM bytes  = cold reads + writes, from the emulation's pages (4 KiB each, once per launch): cold
 *                pages are those nothing wrote since the last host wait (weights, KV cache, state);
 *                hot ones (activations just written) are taken to be in L2 and cost no HBM time
 *   t_bytes    = cold reads / min(BW, Little's law: resident threads x bytes in flight each / 600 ns)
 *                + writes / BW: a load holds its thread until the data comes back, so the bytes in
 *                flight bound what few threads read; a store is posted to L2 (write-back, 50 MB) and
 *                the thread goes on, so writes take bandwidth but not latency (the launch's drain is
 *                in its NODE). Bytes in flight: 32 a thread, or where the kernel stages its reads
 *                by asynchronous copies, the bytes its threads had in flight when they waited for
 *                them (the emulation's IN_FLIGHT), if more. Resident threads: what the SMs hold by
 *                registers (ptxas) and by shared memory (ptxas's static bytes plus the launch's
 *                dynamic bytes, and 1 KiB the system keeps a block, of 228 KiB an SM)
 *   t_issue    = warp load instructions, from device and from shared memory, and warp shuffles /
 *                (SMs it fills x 1 per cycle): the memory-input pipe of an SM, which also moves the
 *                shuffles, issues about one warp instruction a cycle
 *   t_l1       = L1 wavefronts / (SMs it fills x 1 per cycle): each warp load instruction from
 *                device memory costs a wavefront per distinct 128-byte line its lanes touch (L1 and
 *                shared memory serve an SM about 128 bytes a cycle): a warp's 16-byte loads of 512
 *                consecutive bytes take 4, a broadcast 1, lanes 64 bytes apart 16; one from shared
 *                memory as many as the most distinct 4-byte words one of its 32 banks gives (a
 *                padded row a lane: 1)
 *   t_serial   = the busiest warp's loads x 20 cycles (an L1 hit's latency, partly overlapped)
 *   t_tensor   = tensor-core instructions (mma.sync m16n8k32 int8, 4096 multiply-adds each) x 2
 *                cycles / SMs it fills: the H200's dense int8 rate (about 1979 TOPS, ~4200
 *                multiply-adds a cycle per SM) is wgmma's; mma.sync is taken at half of it
 *   t_tail     = the busiest warp's loads after last_block (the emulation's TAIL_LOADS: what the block
 *                that comes last does once the others are done: a fold, a rounding, the routing, a
 *                residual step, a gated norm, an attention row's combine) x 20 cycles; it runs after
 *                the rest of the launch, so it adds
 *   t          = NODE (a graph node's launch and drain: 2 us, or --node-us) + max(t_bytes, t_issue, t_l1, t_serial, t_tensor) + t_tail
 * Copies: NODE + bytes read and written / BW on the device, bytes / 25 GB/s over PCIe.
 * Each pass is also given without its launches' NODE each: what fewer launches alone could reach.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SMS 132
#define CLOCK_HZ 1.755e9
#define THREADS_PER_SM 2048
#define REGS_PER_SM 65536
#define SMEM_PER_SM (228.0 * 1024)
#define SMEM_PER_BLOCK_RESERVED 1024.0
#define INFLIGHT_BYTES 32.0
#define LATENCY_S 600e-9
#define SERIAL_CYCLES 20.0
#define MMA_CYCLES 2.0
#define PCIE_BPS 25e9
#define MAX_KERNELS 256

static double BW = 4800e9, NODE_S = 2e-6;

static void die(const char *msg, const char *arg) {
    fprintf(stderr, "costmodel: %s%s%s\n", msg, arg ? " " : "", arg ? arg : "");
    exit(1);
}

/* ---- what the compiler said, per kernel ------------------------------------------------------ */
typedef struct { char name[160]; int regs, stack, spill_st, spill_ld, smem, sass; } Static;
static Static st[MAX_KERNELS];
static int n_st;

/* "void matmul_kernel<UnitK4<false> >(unsigned char const*, ...)" -> "matmul_kernel<UnitK4<false>>" */
static void norm_name(const char *in, char *out, size_t n) {
    while (*in == ' ') in++;
    if (!strncmp(in, "void ", 5)) in += 5;
    size_t k = 0;
    for (; *in && *in != '(' && *in != '\'' && k + 1 < n; in++)
        if (*in != ' ') out[k++] = *in;
    out[k] = 0;
}

/* A kernel template's launches are counted under its source name ("matmul_mma_kernel<D>"), the
 * compiler reports each instance ("matmul_mma_kernel<DotQ6_K>"): such a name gets the most of each
 * figure over the instances of its template. */
static Static *template_of(const char *name) {
    static Static t;
    const char *lt = strchr(name, '<');
    if (!lt) return NULL;
    size_t base = (size_t)(lt - name) + 1;
    int found = 0;
    for (int i = 0; i < n_st; i++) {
        const Static *s = &st[i];
        if (strncmp(s->name, name, base)) continue;
        if (!found) t = *s;
        found = 1;
        t.regs = s->regs > t.regs ? s->regs : t.regs, t.stack = s->stack > t.stack ? s->stack : t.stack;
        t.spill_st = s->spill_st > t.spill_st ? s->spill_st : t.spill_st, t.spill_ld = s->spill_ld > t.spill_ld ? s->spill_ld : t.spill_ld;
        t.smem = s->smem > t.smem ? s->smem : t.smem, t.sass = s->sass > t.sass ? s->sass : t.sass;
    }
    return found ? &t : NULL;
}

static Static *static_of(const char *name, int add) {
    for (int i = 0; i < n_st; i++)
        if (!strcmp(st[i].name, name)) return &st[i];
    if (!add) return template_of(name);
    if (n_st == MAX_KERNELS) return NULL;
    Static *s = &st[n_st++];
    memset(s, 0, sizeof *s);
    s->regs = s->sass = -1;
    snprintf(s->name, sizeof s->name, "%s", name);
    return s;
}

static void read_ptxas(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) die("cannot read", path);
    char line[4096];
    Static *cur = NULL;
    while (fgets(line, sizeof line, f)) {
        char *p;
        if ((p = strstr(line, "Compiling entry function '"))) {
            char nm[160];
            norm_name(p + strlen("Compiling entry function '"), nm, sizeof nm);
            cur = static_of(nm, 1);
        } else if (cur && (p = strstr(line, "bytes stack frame"))) {
            sscanf(line, " %d bytes stack frame, %d bytes spill stores, %d bytes spill loads", &cur->stack, &cur->spill_st, &cur->spill_ld);
        } else if (cur && (p = strstr(line, "Used "))) {
            sscanf(p, "Used %d registers", &cur->regs);
            char *s = strstr(p, "bytes smem");
            if (s) {
                while (s > p && s[-1] == ' ') s--;
                while (s > p && s[-1] >= '0' && s[-1] <= '9') s--;
                cur->smem = atoi(s);
            }
        }
    }
    fclose(f);
}

/* readelf -SW lines: "  [12] .text.NAME   PROGBITS   addr off size ..." (NAME demangled) */
static void read_sass(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) die("cannot read", path);
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        char *p = strstr(line, ".text."), *q = strstr(line, "PROGBITS");
        if (!p || !q) continue;
        char nm[160];
        *q = 0;
        norm_name(p + 6, nm, sizeof nm);
        unsigned long addr, off, size;
        if (sscanf(q + 8, " %lx %lx %lx", &addr, &off, &size) != 3) continue;
        Static *s = static_of(nm, 1);
        if (s) s->sass = (int)(size / 16);
    }
    fclose(f);
}

/* ---- the emulation's counts -------------------------------------------------------------------- */
typedef struct {
    char name[160];
    double launches, hbm, hot, warp_loads, thread_loads, load_bytes, max_warp, t;
    double t_bytes, t_issue, t_serial, t_l1;   /* of its launches, summed, for the bound it hits */
    double shared_loads, wavefronts, shuffles; /* warp loads from shared memory; L1 wavefronts (both kinds); warp shuffles */
    double mmas, t_tensor;                     /* tensor-core instructions, and their bound */
    double t_tail;                             /* the tails after last_block, in t */
} Row;
enum { ROW_SUMS = 18 };   /* the doubles of a Row from launches on, summed over launches and slices */
typedef struct { Row r[MAX_KERNELS]; int n; double rows; } Pass;   /* rows: the batch's T */
enum { DECODE, PREVIEW, VERIFY, ROLLBACK, N_PASSES };
static const char *PASS_NAMES[] = {"decode step", "preview, 16 rows", "verify, 16 rows", "rollback"};

static Row *row_of(Pass *p, const char *name) {
    for (int i = 0; i < p->n; i++)
        if (!strcmp(p->r[i].name, name)) return &p->r[i];
    if (p->n == MAX_KERNELS) die("too many kernels", NULL);
    Row *r = &p->r[p->n++];
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", name);
    return r;
}

/* one launch: its predicted seconds, and which bound */
static double predict(const char *name, double threads, double blocks, double cold, double written, double warp_loads, double wavefronts,
                      double max_warp, double mmas, double smem, double in_flight, double tail, double *tb, double *ti, double *tl, double *ts,
                      double *tt, double *tx) {
    Static *s = static_of(name, 0);
    double per_sm = THREADS_PER_SM, block = blocks > 0 ? threads / blocks : 1;
    if (s && s->regs > 0) per_sm = fmin(per_sm, floor(REGS_PER_SM / (double)s->regs / 32) * 32);
    per_sm = fmin(per_sm, floor(SMEM_PER_SM / ((s ? s->smem : 0) + smem + SMEM_PER_BLOCK_RESERVED)) * block);
    double resident = fmin(threads, SMS * per_sm);
    double bw = fmin(BW, resident * fmax(INFLIGHT_BYTES, in_flight) / LATENCY_S);
    *tb = cold / bw + written / BW;
    *ti = warp_loads > 0 ? warp_loads / (fmin(SMS, blocks) * CLOCK_HZ) : 0;
    *tl = wavefronts > 0 ? wavefronts / (fmin(SMS, blocks) * CLOCK_HZ) : 0;
    *ts = max_warp > 0 ? max_warp * SERIAL_CYCLES / CLOCK_HZ : 0;
    *tt = mmas > 0 ? mmas * MMA_CYCLES / (fmin(SMS, blocks) * CLOCK_HZ) : 0;
    *tx = tail > 0 ? tail * SERIAL_CYCLES / CLOCK_HZ : 0;
    return NODE_S + fmax(fmax(fmax(*tb, *tl), fmax(*ti, *ts)), *tt) + *tx;
}

/* Segments of a count file (split at "sync"); calls take(seg, line) for the lines of the wanted ones. */
typedef struct { char **lines; int n, cap; } Seg;
static Seg *read_segments(const char *path, int *n_seg) {
    FILE *f = fopen(path, "r");
    if (!f) die("cannot read", path);
    int cap = 64, n = 0;
    Seg *s = calloc((size_t)cap, sizeof *s);
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        if (n == cap) {
            s = realloc(s, (size_t)(cap *= 2) * sizeof *s);
            memset(s + n, 0, (size_t)(cap - n) * sizeof *s);
        }
        if (!strncmp(line, "sync", 4)) { n++; continue; }
        Seg *g = &s[n];
        if (g->n == g->cap) g->lines = realloc(g->lines, (size_t)(g->cap = g->cap ? 2 * g->cap : 256) * sizeof(char *));
        g->lines[g->n++] = strdup(line);
    }
    fclose(f);
    *n_seg = n;   /* (a trailing part with no sync is not a pass) */
    return s;
}

static double n_embd;   /* from the decode step's first upload: one row of floats */

static void add_segment(Pass *p, const Seg *g) {
    int first_h2d = 1;
    for (int i = 0; i < g->n; i++) {
        char kind[32], name[160];
        double v[20] = {0};
        if (sscanf(g->lines[i], "copy %31s %lf", kind, &v[0]) == 2) {
            if (!strcmp(kind, "h2d") && first_h2d) {
                first_h2d = 0;
                if (!n_embd) n_embd = v[0] / 4;
                p->rows = v[0] / 4 / n_embd;
            }
            int dev = !strcmp(kind, "d2d") || !strcmp(kind, "memset");
            double bytes = !strcmp(kind, "d2d") ? 2 * v[0] : v[0];
            Row *r = row_of(p, dev ? (!strcmp(kind, "d2d") ? "(copy device to device)" : "(memset)") : "(copy over PCIe)");
            r->launches++;
            r->hbm += dev ? bytes : 0;
            double t = dev ? bytes / BW : v[0] / PCIE_BPS;
            r->t += NODE_S + t, r->t_bytes += t;
            continue;
        }
        int got = sscanf(g->lines[i], "launch %159s %lf %lf %lf %lf %lf %lf %lf %lf %lf %lf %lf %lf %lf %lf %lf %lf %lf %lf %lf %lf", name, &v[0], &v[1],
                         &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9], &v[10], &v[11], &v[12], &v[13], &v[14], &v[15], &v[16], &v[17], &v[18], &v[19]);
        if (got != 21) continue;
        double blocks = v[0] * v[1] * v[2], threads = blocks * v[3] * v[4] * v[5], hbm = v[6] + v[8];
        double sh_loads = v[13] > 0 ? v[13] : 0, waves = v[14] > 0 ? v[14] : 0, shuffles = v[15] > 0 ? v[15] : 0, mmas = v[16] > 0 ? v[16] : 0;
        Row *r = row_of(p, name);
        double tb, ti, tl, ts, tt, tx;
        r->launches++;
        r->hbm += hbm, r->hot += v[7];
        if (v[9] >= 0) r->warp_loads += v[9], r->thread_loads += v[10], r->load_bytes += v[11], r->max_warp = fmax(r->max_warp, v[12]);
        r->shared_loads += sh_loads, r->wavefronts += waves, r->shuffles += shuffles, r->mmas += mmas;
        r->t += predict(name, threads, blocks, v[6], v[8], fmax(v[9], 0) + sh_loads + shuffles, waves, v[12], mmas, v[17], fmax(v[18], 0),
                        fmax(v[19], 0), &tb, &ti, &tl, &ts, &tt, &tx);
        r->t_bytes += tb, r->t_issue += ti, r->t_l1 += tl, r->t_serial += ts, r->t_tensor += tt, r->t_tail += tx;
    }
}

/* the slice's passes: the last decode step with a graph launch; the first round's three segments */
static void read_slice(Pass out[N_PASSES], const char *decode, const char *round) {
    int n;
    Seg *s = read_segments(decode, &n);
    int step = -1;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < s[i].n; j++)
            if (!strncmp(s[i].lines[j], "graph", 5)) step = i;
    if (step < 0) die("no decode step (a graph launch) in", decode);
    memset(out, 0, N_PASSES * sizeof *out);
    add_segment(&out[DECODE], &s[step]);
    if (!strcmp(round, "-")) return;
    s = read_segments(round, &n);
    if (n < 4) die("fewer than a prompt and a round's three passes in", round);
    for (int k = 1; k <= 3; k++) add_segment(&out[k], &s[k]);
}

/* c(L1) + f (c(L2) - c(L1)), kernel by kernel (a kernel missing from one slice counts 0 there) */
static void extrapolate(Pass *out, const Pass *a, const Pass *b, double f) {
    *out = *a;
    for (int i = 0; i < b->n; i++) row_of(out, b->r[i].name);
    for (int i = 0; i < out->n; i++) {
        Row *r = &out->r[i], z;
        memset(&z, 0, sizeof z);
        const Row *ra = &z, *rb = &z;
        for (int j = 0; j < a->n; j++) if (!strcmp(a->r[j].name, r->name)) ra = &a->r[j];
        for (int j = 0; j < b->n; j++) if (!strcmp(b->r[j].name, r->name)) rb = &b->r[j];
        double *o = &r->launches;
        const double *x = &ra->launches, *y = &rb->launches;
        for (int k = 0; k < ROW_SUMS; k++) o[k] = fmax(0, x[k] + f * (y[k] - x[k]));
        r->max_warp = fmax(ra->max_warp, rb->max_warp);
    }
}

static double total(const Pass *p, int field) {   /* 0 time, 1 HBM bytes, 2 launches */
    double s = 0;
    for (int i = 0; i < p->n; i++) s += field == 0 ? p->r[i].t : field == 1 ? p->r[i].hbm : p->r[i].launches;
    return s;
}

static int by_time(const void *a, const void *b) {
    double x = ((const Row *)a)->t, y = ((const Row *)b)->t;
    return x < y ? 1 : x > y ? -1 : 0;
}

static int watched(const char *name) {   /* the kernels the fast forms are about */
    return strstr(name, "matmul") || strstr(name, "swiglu_") || strstr(name, "attention") || strstr(name, "delta_rule") ||
           strstr(name, "route") || strstr(name, "coreset");
}

static void static_cols(const char *name, char *out, size_t n) {
    Static *s = static_of(name, 0);
    if (!s) { snprintf(out, n, "%4s %5s %6s %6s %7s", "-", "-", "-", "-", "-"); return; }
    snprintf(out, n, "%4d %5d %6d %6d %7d", s->regs, s->spill_st + s->spill_ld, s->stack, s->smem, s->sass);
}

static void print_pass(const char *title, Pass *p, double steps_of) {
    qsort(p->r, (size_t)p->n, sizeof(Row), by_time);
    double t = total(p, 0), b = total(p, 1);
    printf("\n%s (%.0f rows): PREDICTED %.3f ms, %.0f launches and copies, %.1f MB from HBM (%.3f ms at %.0f GB/s: %.1f%% of the bandwidth)",
           title, p->rows, 1e3 * t, total(p, 2), b / 1e6, 1e3 * b / BW, BW / 1e9, 100 * b / BW / t);
    if (steps_of > 0) printf("; %.2f decode steps, %.2fx its byte time", t / steps_of, t / (b / BW));
    double t_free = t - NODE_S * total(p, 2);   /* what no launch cost would leave: the kernels' bounds alone */
    printf("; without the %.0f us of its launches %.3f ms = %.2fx its byte time", 1e6 * (t - t_free), 1e3 * t_free, t_free / (b / BW));
    printf("\n%-40s %8s %9s %8s %9s %6s %8s %8s %7s %6s %4s %5s %6s %6s %7s %9s %7s %5s %s\n", "kernel", "launches", "HBM MB", "hot MB", "warp ld M",
           "B/ld", "shld M", "wavef M", "shfl M", "mma M", "regs", "spill", "stack", "smem", "SASS", "pred us", "tail us", "%", "bound");
    for (int i = 0; i < p->n; i++) {
        Row *r = &p->r[i];
        char sc[64];
        static_cols(r->name, sc, sizeof sc);
        double tm = fmax(fmax(fmax(r->t_bytes, r->t_l1), fmax(r->t_issue, r->t_serial)), r->t_tensor);
        const char *bound = tm == r->t_issue ? "issue" : tm == r->t_l1 ? "l1" : tm == r->t_serial ? "serial" : tm == r->t_tensor ? "tensor" : "bytes";
        if (r->t - NODE_S * r->launches < 0.5 * NODE_S * r->launches) bound = "launch";
        printf("%-40.40s %8.0f %9.2f %8.2f %9.2f %6.2f %8.2f %8.2f %7.2f %6.2f %s %9.1f %7.1f %5.1f %s\n", r->name, r->launches, r->hbm / 1e6,
               r->hot / 1e6, r->warp_loads / 1e6, r->thread_loads > 0 ? r->load_bytes / r->thread_loads : 0, r->shared_loads / 1e6,
               r->wavefronts / 1e6, r->shuffles / 1e6, r->mmas / 1e6, sc, 1e6 * r->t, 1e6 * r->t_tail, 100 * r->t / t, bound);
    }
}

static void print_ptxas(void) {
    printf("\nptxas -v, sm_90a (regs: per thread; spill: bytes stored + loaded; stack and smem: bytes; SASS: instructions)\n");
    printf("%-40s %4s %5s %6s %6s %7s %s\n", "kernel", "regs", "spill", "stack", "smem", "SASS", "flag");
    int flagged = 0;
    for (int i = 0; i < n_st; i++) {
        Static *s = &st[i];
        char sc[64];
        static_cols(s->name, sc, sizeof sc);
        int most = strstr(s->name, "_mma_kernel") ? 170 : 128;   /* (the tensor-core kernels: blocks of 128 threads, three an SM) */
        int f = watched(s->name) && (s->spill_st + s->spill_ld > 0 || s->stack > 0 || s->regs > most);
        flagged += f;
        printf("%-40.40s %s %s\n", s->name, sc, f ? "FLAG" : "");
    }
    printf("%d kernels; %d flagged (matmul, expert, attention, delta-rule and routing kernels with spills, a stack frame, or over 128 registers: "
           "a 256-thread block then holds an SM's registers alone; the tensor-core kernels, of 128-thread blocks, over 170)\n", n_st, flagged);
}

int main(int argc, char **argv) {
    const char *dec[2] = {0}, *rnd[2] = {0};
    int L[2] = {0}, n_slices = 0, layers = 40, want_ptxas = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--bw") && i + 1 < argc) BW = atof(argv[++i]) * 1e9;
        else if (!strcmp(argv[i], "--node-us") && i + 1 < argc) NODE_S = atof(argv[++i]) * 1e-6;
        else if (!strcmp(argv[i], "--ptxas") && i + 1 < argc) read_ptxas(argv[++i]), want_ptxas = 1;
        else if (!strcmp(argv[i], "--sass") && i + 1 < argc) read_sass(argv[++i]);
        else if (!strcmp(argv[i], "--layers") && i + 1 < argc) layers = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--slice") && i + 3 < argc && n_slices < 2) {
            L[n_slices] = atoi(argv[i + 1]), dec[n_slices] = argv[i + 2], rnd[n_slices] = argv[i + 3];
            n_slices++, i += 3;
        } else die("usage: costmodel [--bw GBS] [--node-us US] [--ptxas LOG] [--sass LIST] [--slice L DECODE ROUND]... [--layers N]", NULL);
    }
    if (!(BW > 0)) die("--bw must be positive", NULL);
    if (!(NODE_S >= 0 && NODE_S < 1e-3)) die("--node-us must be 0 to 1000", NULL);
    if (want_ptxas && !n_slices) { print_ptxas(); return 0; }
    if (!n_slices) die("nothing to do: give --slice or --ptxas", NULL);
    static Pass a[N_PASSES], b[N_PASSES], p[N_PASSES];
    read_slice(a, dec[0], rnd[0]);
    int target = L[0];
    if (n_slices == 2) {
        if (L[1] <= L[0]) die("the second --slice must have more layers", NULL);
        read_slice(b, dec[1], rnd[1]);
        for (int k = 0; k < N_PASSES; k++) extrapolate(&p[k], &a[k], &b[k], (double)(layers - L[0]) / (L[1] - L[0])), p[k].rows = a[k].rows;
        target = layers;
    } else memcpy(p, a, sizeof p);
    printf("== cost model: PREDICTIONS for an H200 (%d SMs, %.3f GHz, %.0f GB/s, %.2f us a graph node), %d layers%s; not measurements\n", SMS, CLOCK_HZ / 1e9,
           BW / 1e9, 1e6 * NODE_S, target, n_slices == 2 ? " (extrapolated from two slices)" : " (the slice as emulated)");
    double step = total(&p[DECODE], 0);
    int rounds = strcmp(rnd[0], "-") && (n_slices < 2 || strcmp(rnd[1], "-"));
    for (int k = 0; k < (rounds ? N_PASSES : 1); k++) print_pass(PASS_NAMES[k], &p[k], k == DECODE ? 0 : step);
    if (want_ptxas) print_ptxas();
    double b_step = total(&p[DECODE], 1);
    printf("\nsummary (PREDICTED, %d layers): decode %.3f ms/step = %.1f t/s, %.1f MB/step = %.1f%% of %.0f GB/s", target, 1e3 * step, 1 / step,
           b_step / 1e6, 100 * b_step / BW / step, BW / 1e9);
    if (rounds)
        printf("; verify-16 %.2f steps (%.2fx its byte time); preview-16 %.2f steps; rollback %.2f steps", total(&p[VERIFY], 0) / step,
               total(&p[VERIFY], 0) / (total(&p[VERIFY], 1) / BW), total(&p[PREVIEW], 0) / step, total(&p[ROLLBACK], 0) / step);
    else printf("; no draft-self round counted");
    printf("\n");
    return 0;
}
