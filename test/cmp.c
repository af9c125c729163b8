// cmp.c: the test suite's comparisons and checks of clover's output, in C (test/run.sh and its
// groups call it; none of it is clover's own code). Usage:
//
//   build/cmp A.bin B.bin N_VOCAB [--median X] [--p99 Y] [--max Z] [--argmax F] [--spread C.bin]
//       two float32 logits files of shape [n][N_VOCAB] (row-major, as `build/ref --logits` and
//       clover's --dump-logits write them). For every row, in double: the log-softmax of both rows,
//       D = max over the vocab of |logsoftmax(A) - logsoftmax(B)|, and the argmax of both (ties to
//       the lowest id). A row holding a NaN or an infinity gets D = inf and counts as an argmax
//       disagreement. Prints one line
//           positions N  median D  p99 D  max D  argmax-agree P%
//       (median: the middle value, or the mean of the two middle ones; p99: the nearest-rank 99th
//       percentile, the ceil(0.99 N)-th smallest; P rounded down to 2 decimals; "  nonfinite K"
//       appended when K rows held NaN/inf). Exit 0 when all given limits hold (median <= X,
//       p99 <= Y, max <= Z, agreeing fraction >= F, F in [0,1]). --spread C.bin: the limits are
//       C.bin's own distance from B.bin, measured the same way, plus 10% and 1e-6 (agreement minus
//       0.01), printed after "; spread " (llama.cpp's reference CPU variant C vs the loaded one B)
//   build/cmp gap L.bin N_VOCAB N_PROMPT N_GEN GAP
//       of the N_GEN greedy steps after an N_PROMPT-token prompt in logits L.bin (rows N_PROMPT-1 ...):
//       prints how many come before the first whose top-2 logit gap is below GAP
//   build/cmp argmax L.bin N_VOCAB EXCLUDE   each row's argmax, id EXCLUDE left out, comma-separated
//   build/cmp text IN OUT [replace]          OUT = IN's bytes plus "\n"; with replace, every maximal
//       ill-formed UTF-8 subpart becomes U+FFFD (Unicode's "maximal subpart" practice)
//   build/cmp diff A B                       where two files first differ, for a reason line
//   build/cmp ids A B                        where two comma-separated id lists first differ
//   build/cmp fill MODEL.gguf OUT HEX        a copy with the data section overwritten by the bytes
//       HEX repeated (as many whole copies as fit)
//   build/cmp damage MODEL.gguf OUT MODE N CLOVER ARGS...   N damaged copies of MODEL, one after
//       another in OUT, each loaded by CLOVER ARGS (ARGS naming OUT), which must exit 0 or exit 1
//       with one line "clover: error: ..." on stderr (warnings and the memory plan aside), within
//       60 s. MODE random: 1 to 8 bytes before the data section changed, from one MT19937 stream
//       seeded 11 (the generator and draws of Python's random.Random(11): the same files as the
//       suite's earlier Python); truncate: the first I*size/N bytes of case I; truncate-head: the
//       first I bytes
//   build/cmp random SEED N BELOW  N ids, comma-separated: Python's random.Random(SEED).randrange(BELOW)
//   build/cmp trace ERR MODE       clover --trace's stderr: round blocks numbered 1..n, per-round
//       drafted and accepted counts adding up to n_drafted and n_accept, relaxed lines to
//       n_relaxed, every round stopped or fully accepted, no raw control bytes; MODE truth: every
//       draft accepted
//   build/cmp relaxed ERR RATIO DELTA   every logged relaxed acceptance satisfies the rule
//       (p(d)/p(t) >= RATIO, entropy <= DELTA, draft != target, as printed to 1e-3); one per n_relaxed
//   build/cmp stats ERR GEN_IDS EOG_IDS SPEC   the statistics lines: upstream's formats, their
//       order and arithmetic; the generated count from llama.cpp's greedy ids GEN_IDS cut after the
//       first of EOG_IDS; SPEC: "none" (then n_predict is the only count: no draft lines) or
//       "draft-self --spec-draft-n-max N ..."; "speed:      n/a" exactly when the time is under 1 ms
//   build/cmp by-position ERR   a draft-self --trace run's "accept by position" line is what its
//       rounds add up to (a round that drafted d and accepted a: positions 1..d drafted, 1..a
//       accepted), summing to n_drafted and n_accept; prints the counts
//   build/cmp diffusion ERR N_MAX [PASSES_PER_BLOCK]   the --diffusion report (block size 8) adds up
//
// The checks print one summary line and exit 0, or print what is wrong and exit 1. Exit 2 on bad
// usage or an unreadable file.

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

__attribute__((format(printf, 2, 3), noreturn)) static void fail(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "cmp: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(code);
}

static const char *USAGE =
    "usage: cmp A.bin B.bin N_VOCAB [--median X] [--p99 Y] [--max Z] [--argmax F] [--spread C.bin]\n"
    "       cmp gap|argmax|text|diff|ids|fill|damage|random|trace|relaxed|stats|by-position|diffusion ... (see test/cmp.c)";

static void usage(void) { fail(2, "%s", USAGE); }

static double parse_num(const char *s, const char *what) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= 0)) fail(2, "bad %s: '%s'", what, s);
    return v;
}

static long parse_long(const char *s, const char *what) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < 0) fail(2, "bad %s: '%s'", what, s);
    return v;
}

// A whole file in memory, NUL-terminated (n bytes before the NUL).
typedef struct {
    char *p;
    long n;
} Buf;

static Buf read_all(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) fail(2, "cannot open %s: %s", path, strerror(errno));
    Buf b = {NULL, 0};
    long cap = 0;
    for (;;) {
        if (b.n + 65536 + 1 > cap) {
            cap = 2 * cap + 65536 + 1;
            b.p = realloc(b.p, (size_t)cap);
            if (!b.p) fail(2, "out of memory reading %s", path);
        }
        size_t got = fread(b.p + b.n, 1, 65536, f);
        b.n += (long)got;
        if (got < 65536) break;
    }
    if (ferror(f)) fail(2, "cannot read %s", path);
    fclose(f);
    b.p[b.n] = 0;
    return b;
}

static void write_all(const char *path, const void *p, long n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, (size_t)n, f) != (size_t)n || fclose(f)) fail(2, "cannot write %s", path);
}

// The lines of a text, split in place.
typedef struct {
    char **l;
    int n;
} Lines;

static Lines lines_of(Buf *b) {
    Lines s = {malloc(((size_t)b->n + 1) * sizeof(char *)), 0};
    if (!s.l) fail(2, "out of memory");
    for (char *p = b->p;;) {
        char *e = memchr(p, '\n', (size_t)(b->p + b->n - p));
        if (e) *e = 0;
        s.l[s.n++] = p;
        if (!e) break;
        p = e + 1;
    }
    return s;
}

// ------------------------------------------------------------------------------------------------
// logits: D per row, and its median, p99 and max

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// Log-sum-exp of a row in double; returns NAN if the row holds a non-finite value.
static double lse(const float *x, long n) {
    double mx = -INFINITY;
    for (long i = 0; i < n; i++) {
        if (!isfinite(x[i])) return NAN;
        if (x[i] > mx) mx = x[i];
    }
    double s = 0;
    for (long i = 0; i < n; i++) s += exp((double)x[i] - mx);
    return mx + log(s);
}

static long argmax(const float *x, long n, long exclude) {
    long best = -1;
    for (long i = 0; i < n; i++)
        if (i != exclude && x[i] == x[i] && (best < 0 || x[i] > x[best])) best = i;
    return best;
}

// A logits file as rows of nv floats: n rows (1 when it is not a whole number of rows).
typedef struct {
    float *x;
    long n;
} Logits;

static Logits read_logits(const char *path, long nv) {
    struct stat st;
    if (stat(path, &st)) fail(2, "cannot stat %s: %s", path, strerror(errno));
    long long row_bytes = (long long)nv * 4;
    if (st.st_size % row_bytes)
        fail(1, "%s: %lld bytes is not a multiple of N_VOCAB*4 = %lld", path, (long long)st.st_size, row_bytes);
    Buf b = read_all(path);
    return (Logits){(float *)(void *)b.p, (long)(b.n / row_bytes)};
}

typedef struct {
    long n, nonfinite;
    double median, p99, max, agree;   // agree: the fraction of rows whose argmax agree
} Dist;

static Dist distance(Logits a, Logits b, long nv, const char *pa, const char *pb) {
    if (a.n != b.n) fail(1, "sizes differ: %s has %ld rows, %s has %ld", pa, a.n, pb, b.n);
    if (a.n == 0) fail(1, "the files are empty");
    long n = a.n, agree = 0;
    Dist r = {.n = n};
    double *d = malloc((size_t)n * sizeof *d);
    if (!d) fail(2, "out of memory");
    for (long p = 0; p < n; p++) {
        const float *ra = a.x + p * nv, *rb = b.x + p * nv;
        double la = lse(ra, nv), lb = lse(rb, nv);
        if (isnan(la) || isnan(lb)) {
            d[p] = INFINITY;
            r.nonfinite++;
        } else {
            double m = 0;
            for (long i = 0; i < nv; i++) {
                double x = fabs(((double)ra[i] - la) - ((double)rb[i] - lb));
                if (x > m) m = x;
            }
            d[p] = m;
        }
        agree += (isfinite(d[p]) && argmax(ra, nv, -1) == argmax(rb, nv, -1));
    }
    qsort(d, (size_t)n, sizeof *d, cmp_double);
    r.median = (n % 2) ? d[n / 2] : 0.5 * (d[n / 2 - 1] + d[n / 2]);
    long k99 = (long)ceil(0.99 * (double)n);
    if (k99 < 1) k99 = 1;
    r.p99 = d[k99 - 1];
    r.max = d[n - 1];
    r.agree = (double)agree / (double)n;
    free(d);
    return r;
}

static void print_dist(Dist r) {
    printf("positions %ld  median %.3g  p99 %.3g  max %.3g  argmax-agree %.2f%%", r.n, r.median, r.p99, r.max,
           floor(r.agree * 10000.0) / 100.0);
    if (r.nonfinite) printf("  nonfinite %ld", r.nonfinite);
}

static int cmd_logits(int argc, char **argv) {
    if (argc < 4) usage();
    const char *pa = argv[1], *pb = argv[2], *spread = NULL;
    long nv = parse_long(argv[3], "N_VOCAB");
    if (nv <= 0) fail(2, "bad N_VOCAB: '%s'", argv[3]);
    double t_median = -1, t_p99 = -1, t_max = -1, t_agree = -1;
    for (int i = 4; i < argc; i++) {
        if (i + 1 >= argc) usage();
        if (!strcmp(argv[i], "--median")) t_median = parse_num(argv[++i], "--median");
        else if (!strcmp(argv[i], "--p99")) t_p99 = parse_num(argv[++i], "--p99");
        else if (!strcmp(argv[i], "--max")) t_max = parse_num(argv[++i], "--max");
        else if (!strcmp(argv[i], "--spread")) spread = argv[++i];
        else if (!strcmp(argv[i], "--argmax")) {
            t_agree = parse_num(argv[++i], "--argmax");
            if (t_agree > 1) fail(2, "--argmax takes a fraction in [0,1], got %s", argv[i]);
        } else usage();
    }
    Logits a = read_logits(pa, nv), b = read_logits(pb, nv);
    Dist r = distance(a, b, nv, pa, pb);
    print_dist(r);
    if (spread) {   // limits: the reference variant's own distance, plus 10% and 1e-6
        Dist s = distance(read_logits(spread, nv), b, nv, spread, pb);
        t_median = s.median * 1.1 + 1e-6, t_p99 = s.p99 * 1.1 + 1e-6, t_max = s.max * 1.1 + 1e-6;
        t_agree = floor(s.agree * 10000.0) / 10000.0 - 0.01;
        printf("; spread ");
        print_dist(s);
    }
    printf("\n");
    fflush(stdout);
    if (t_median >= 0 && !(r.median <= t_median)) return 1;
    if (t_p99 >= 0 && !(r.p99 <= t_p99)) return 1;
    if (t_max >= 0 && !(r.max <= t_max)) return 1;
    if (t_agree >= 0 && !(r.agree >= t_agree)) return 1;
    return 0;
}

static int cmd_gap(int argc, char **argv) {
    if (argc != 7) usage();
    long nv = parse_long(argv[3], "N_VOCAB"), np = parse_long(argv[4], "N_PROMPT"), ng = parse_long(argv[5], "N_GEN");
    double gap = parse_num(argv[6], "GAP");
    Logits z = read_logits(argv[2], nv);
    if (np < 1 || np - 1 + ng > z.n) fail(1, "%s has %ld rows, need %ld", argv[2], z.n, np - 1 + ng);
    long k = 0;
    for (; k < ng; k++) {   // the largest and second largest of the row
        const float *r = z.x + (np - 1 + k) * nv;
        float a = -INFINITY, b = -INFINITY;
        for (long i = 0; i < nv; i++) {
            if (r[i] > a) b = a, a = r[i];
            else if (r[i] > b) b = r[i];
        }
        if ((double)a - (double)b < gap) break;
    }
    printf("%ld\n", k);
    return 0;
}

static int cmd_argmax(int argc, char **argv) {
    if (argc != 5) usage();
    long nv = parse_long(argv[3], "N_VOCAB"), ex = parse_long(argv[4], "EXCLUDE");
    Logits z = read_logits(argv[2], nv);
    for (long r = 0; r < z.n; r++) printf("%s%ld", r ? "," : "", argmax(z.x + r * nv, nv, ex));
    printf("\n");
    return 0;
}

// ------------------------------------------------------------------------------------------------
// texts

// The length of the well-formed UTF-8 sequence at s (n bytes left), or -k when its first k bytes are
// a maximal ill-formed subpart (k >= 1). Table 3-7 of the Unicode standard: the second byte's range
// depends on the first.
static int utf8_seq(const unsigned char *s, long n) {
    unsigned char c = s[0];
    if (c < 0x80) return 1;
    int len;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else return -1;
    for (int k = 1; k < len; k++) {
        if (k >= n || s[k] < lo || s[k] > hi) return -k;
        lo = 0x80, hi = 0xBF;
    }
    return len;
}

static int cmd_text(int argc, char **argv) {
    if (argc != 4 && !(argc == 5 && !strcmp(argv[4], "replace"))) usage();
    Buf in = read_all(argv[2]);
    char *out = malloc((size_t)in.n * 3 + 2);
    if (!out) fail(2, "out of memory");
    long o = 0;
    for (long i = 0; i < in.n;) {
        int k = argc == 5 ? utf8_seq((unsigned char *)in.p + i, in.n - i) : 1;
        if (k > 0) memcpy(out + o, in.p + i, (size_t)k), o += k, i += k;
        else memcpy(out + o, "\xEF\xBF\xBD", 3), o += 3, i += -k;
    }
    out[o++] = '\n';
    write_all(argv[3], out, o);
    return 0;
}

static void put_escaped(const char *p, long n) {
    putchar('"');
    for (long i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == '\\' || c == '"') printf("\\%c", c);
        else if (c == '\n') printf("\\n");
        else if (c >= 0x20 && c < 0x7F) putchar(c);
        else printf("\\x%02x", c);
    }
    putchar('"');
}

static int cmd_diff(int argc, char **argv) {
    if (argc != 4) usage();
    Buf a = read_all(argv[2]), b = read_all(argv[3]);
    long m = a.n < b.n ? a.n : b.n, i = 0;
    while (i < m && a.p[i] == b.p[i]) i++;
    long lo = i > 10 ? i - 10 : 0;
    long ea = i + 20 < a.n ? i + 20 : a.n, eb = i + 20 < b.n ? i + 20 : b.n;
    printf("differ at byte %ld of %ld/%ld: clover ", i, a.n, b.n);
    put_escaped(a.p + lo, ea - lo);
    printf(" vs llama.cpp ");
    put_escaped(b.p + lo, eb - lo);
    printf("\n");
    return 0;
}

// The comma-separated fields of a line (split in place; spaces and newlines around them dropped).
static int split_ids(char *s, char **f, int max) {
    int n = 0;
    for (char *t = s;; t++) {
        char *e = strchr(t, ',');
        if (e) *e = 0;
        while (*t == ' ' || *t == '\n' || *t == '\r') t++;
        char *z = t + strlen(t);
        while (z > t && (z[-1] == ' ' || z[-1] == '\n' || z[-1] == '\r')) *--z = 0;
        if (n < max) f[n++] = t;
        if (!e) break;
        t = e;
    }
    return n;
}

enum { MAX_IDS = 1 << 20 };

static int cmd_ids(int argc, char **argv) {
    if (argc != 4) usage();
    Buf a = read_all(argv[2]), b = read_all(argv[3]);
    char **fa = malloc(MAX_IDS * sizeof *fa), **fb = malloc(MAX_IDS * sizeof *fb);
    if (!fa || !fb) fail(2, "out of memory");
    int na = split_ids(a.p, fa, MAX_IDS), nb = split_ids(b.p, fb, MAX_IDS), m = na < nb ? na : nb, i = 0;
    while (i < m && !strcmp(fa[i], fb[i])) i++;
    printf("ids differ at %d (%d vs %d ids): clover", i, na, nb);
    for (int k = i; k < i + 4 && k < na; k++) printf(" %s", fa[k]);
    printf(" vs llama.cpp");
    for (int k = i; k < i + 4 && k < nb; k++) printf(" %s", fb[k]);
    printf("\n");
    return 0;
}

// ------------------------------------------------------------------------------------------------
// damaged GGUF files

// Where a GGUF file's data section starts: after the header, the metadata and the tensor infos,
// aligned to general.alignment (32 when absent or not a positive u32). -1 when the file is cut short.
typedef struct {
    const unsigned char *p;
    long n, o;
    int bad;
} Rd;

static uint64_t rd(Rd *r, int bytes) {
    if (r->bad || r->o + bytes > r->n) { r->bad = 1; return 0; }
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++) v |= (uint64_t)r->p[r->o + i] << (8 * i);
    r->o += bytes;
    return v;
}

static void skip(Rd *r, uint64_t bytes) {
    if (r->bad || bytes > (uint64_t)(r->n - r->o)) r->bad = 1;
    else r->o += (long)bytes;
}

static void skip_value(Rd *r, uint32_t type) {
    static const int size[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    if (type == 8) skip(r, rd(r, 8));
    else if (type == 9) {
        uint32_t t = (uint32_t)rd(r, 4);
        uint64_t n = rd(r, 8);
        for (uint64_t i = 0; i < n && !r->bad; i++) skip_value(r, t);
    } else if (type < 13) skip(r, (uint64_t)size[type]);
    else r->bad = 1;
}

static long gguf_data_start(const Buf *m) {
    Rd r = {(const unsigned char *)m->p, m->n, 0, 0};
    skip(&r, 8);   // magic and version
    uint64_t nt = rd(&r, 8), nk = rd(&r, 8), align = 32;
    for (uint64_t i = 0; i < nk && !r.bad; i++) {
        uint64_t kl = rd(&r, 8);
        int is_align = !r.bad && kl == 17 && r.o + 17 <= r.n && !memcmp(r.p + r.o, "general.alignment", 17);
        skip(&r, kl);
        uint32_t t = (uint32_t)rd(&r, 4);
        if (is_align && t == 4) {
            uint64_t a = rd(&r, 4);
            if (a > 0) align = a;
        } else skip_value(&r, t);
    }
    for (uint64_t i = 0; i < nt && !r.bad; i++) {
        skip(&r, rd(&r, 8));
        skip(&r, 8 * rd(&r, 4) + 4 + 8);   // dims, type, offset
    }
    return r.bad ? -1 : (long)((r.o + align - 1) / align * align);
}

static int cmd_fill(int argc, char **argv) {
    if (argc != 5) usage();
    Buf m = read_all(argv[2]);
    long start = gguf_data_start(&m), np = (long)strlen(argv[4]) / 2;
    if (start < 0) fail(1, "%s: cannot find the data section", argv[2]);
    unsigned char pat[64];
    if (np < 1 || np > 64 || (long)strlen(argv[4]) != 2 * np) fail(2, "bad HEX: '%s'", argv[4]);
    for (long i = 0; i < np; i++) {
        unsigned v;
        if (sscanf(argv[4] + 2 * i, "%2x", &v) != 1) fail(2, "bad HEX: '%s'", argv[4]);
        pat[i] = (unsigned char)v;
    }
    for (long o = start; o + np <= m.n; o += np) memcpy(m.p + o, pat, (size_t)np);
    write_all(argv[3], m.p, m.n);
    return 0;
}

// MT19937 as Python's random module seeds and draws it: Random(s) for a small s is init_by_array
// with the key {s}; randbelow(n) draws k = bit_length(n) bits (the top k of a 32-bit output) until
// the value is below n.
typedef struct {
    uint32_t mt[624];
    int i;
} Mt;

static void mt_seed(Mt *g, uint32_t s) {
    uint32_t *mt = g->mt;
    mt[0] = 19650218u;
    for (int i = 1; i < 624; i++) mt[i] = 1812433253u * (mt[i - 1] ^ (mt[i - 1] >> 30)) + (uint32_t)i;
    int i = 1;
    for (int k = 624; k; k--) {   // init_by_array with a key of one word
        mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1664525u)) + s;
        if (++i >= 624) mt[0] = mt[623], i = 1;
    }
    for (int k = 623; k; k--) {
        mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1566083941u)) - (uint32_t)i;
        if (++i >= 624) mt[0] = mt[623], i = 1;
    }
    mt[0] = 0x80000000u;
    g->i = 624;
}

static uint32_t mt_next(Mt *g) {
    uint32_t *mt = g->mt;
    if (g->i >= 624) {
        for (int k = 0; k < 624; k++) {
            uint32_t y = (mt[k] & 0x80000000u) | (mt[(k + 1) % 624] & 0x7fffffffu);
            mt[k] = mt[(k + 397) % 624] ^ (y >> 1) ^ ((y & 1) ? 0x9908b0dfu : 0);
        }
        g->i = 0;
    }
    uint32_t y = mt[g->i++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    return y ^ (y >> 18);
}

static uint32_t mt_below(Mt *g, uint32_t n) {
    int k = 0;
    while (k < 32 && (n >> k)) k++;
    uint32_t r;
    do r = mt_next(g) >> (32 - k);
    while (r >= n);
    return r;
}

// N ids of Python's random.Random(SEED).randrange(BELOW), comma-separated (the suite's random prompts)
static int cmd_random(int argc, char **argv) {
    if (argc != 5) usage();
    long seed = parse_long(argv[2], "SEED"), n = parse_long(argv[3], "N"), below = parse_long(argv[4], "BELOW");
    if (seed < 0 || seed > 0xffffffffL || n < 1 || below < 1 || below > 0xffffffffL) usage();
    Mt g;
    mt_seed(&g, (uint32_t)seed);
    for (long i = 0; i < n; i++) printf("%s%u", i ? "," : "", mt_below(&g, (uint32_t)below));
    printf("\n");
    return 0;
}

// Runs argv with stdin and stdout on /dev/null, stderr into the file err, for at most 60 s (an
// alarm, which survives exec). Returns the exit status, or 128 + the signal that ended it.
static int run_for_60s(char **argv, const char *err) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) fail(2, "cannot fork: %s", strerror(errno));
    if (pid == 0) {
        int in = open("/dev/null", O_RDONLY), out = open("/dev/null", O_WRONLY), e = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (in < 0 || out < 0 || e < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(e, 2) < 0) _exit(126);
        alarm(60);
        execvp(argv[0], argv);
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) fail(2, "waitpid: %s", strerror(errno));
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

// A load ends well: exit 0, or exit 1 with one line "clover: error: ..." (warnings and the memory
// plan aside).
static int ended_well(int rc, const char *err, char *why, size_t n) {
    Buf b = read_all(err);
    Lines s = lines_of(&b);
    int n_err = 0, first = -1;
    for (int i = 0; i < s.n; i++) {
        if ((i == s.n - 1 && !s.l[i][0]) || !strncmp(s.l[i], "clover: warning:", 16) || !strncmp(s.l[i], "clover: memory:", 15)) continue;
        if (first < 0) first = i;
        n_err++;
    }
    int ok = rc == 0 || (rc == 1 && n_err == 1 && !strncmp(s.l[first], "clover: error: ", 15));
    if (!ok) snprintf(why, n, "exit %d, %d stderr lines: %.150s", rc, n_err, first >= 0 ? s.l[first] : "");
    free(s.l);
    free(b.p);
    return ok;
}

static int cmd_damage(int argc, char **argv) {
    if (argc < 8) usage();
    Buf m = read_all(argv[2]);
    const char *out = argv[3], *mode = argv[4];
    long n = parse_long(argv[5], "N");
    char **run = argv + 6, err[4096], why[256];
    snprintf(err, sizeof err, "%s.err", out);
    long end = gguf_data_start(&m);
    int random = !strcmp(mode, "random"), head = !strcmp(mode, "truncate-head");
    if (!random && !head && strcmp(mode, "truncate")) usage();
    if (random && end <= 0) fail(1, "%s: cannot find the data section", argv[2]);
    // one file, changed in place from case to case: random cases patch bytes of a whole copy and
    // put them back; truncated ones grow (their sizes do not decrease)
    int fd = open(out, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || (random && pwrite(fd, m.p, (size_t)m.n, 0) != m.n)) fail(2, "cannot write %s", out);
    Mt g;
    mt_seed(&g, 11);
    static const int n_changes[5] = {1, 1, 2, 3, 8};
    long n_bad = 0, size = random ? m.n : 0;
    char bad[3][320];
    for (long c = 0; c < n; c++) {
        long at[8];
        int k = 0;
        if (random) {   // k bytes changed (Python evaluates the value, then the index)
            k = n_changes[mt_below(&g, 5)];
            for (int j = 0; j < k; j++) {
                int choice[5] = {(int)mt_below(&g, 256), 0, 0xff, 0x7f, 0x80};
                char v = (char)choice[mt_below(&g, 5)];
                at[j] = mt_below(&g, (uint32_t)end);
                if (pwrite(fd, &v, 1, at[j]) != 1) fail(2, "cannot write %s", out);
            }
        } else {
            long want = head ? (c < m.n ? c : m.n) : c * m.n / n;
            if (pwrite(fd, m.p + size, (size_t)(want - size), size) != want - size) fail(2, "cannot write %s", out);
            size = want;
        }
        if (!ended_well(run_for_60s(run, err), err, why, sizeof why)) {
            if (n_bad < 3) snprintf(bad[n_bad], sizeof bad[0], "case %ld (%ld bytes): %s", c, size, why);
            n_bad++;
        }
        for (int j = 0; j < k; j++)
            if (pwrite(fd, m.p + at[j], 1, at[j]) != 1) fail(2, "cannot write %s", out);
    }
    close(fd);
    if (!n_bad) {
        printf("%ld cases\n", n);
        return 0;
    }
    printf("%ld bad of %ld: %s%s%s%s%s\n", n_bad, n, bad[0], n_bad > 1 ? "; " : "", n_bad > 1 ? bad[1] : "", n_bad > 2 ? "; " : "",
           n_bad > 2 ? bad[2] : "");
    return 1;
}

// ------------------------------------------------------------------------------------------------
// clover's stderr: the trace, the relaxed rule's log, the statistics, the diffusion report

// The number after "KEY = " on the first line that starts with KEY, spaces and '=' (-1 if none).
static long stat_of(Lines s, const char *key) {
    size_t k = strlen(key);
    for (int i = 0; i < s.n; i++) {
        const char *p = s.l[i];
        if (strncmp(p, key, k)) continue;
        p += k;
        while (*p == ' ') p++;
        if (*p++ != '=') continue;
        while (*p == ' ') p++;
        if (*p >= '0' && *p <= '9') return strtol(p, NULL, 10);
    }
    return -1;
}

static long count_of(const Buf *b, const char *needle) {
    long n = 0;
    for (const char *p = b->p; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

// Problems found, joined by "; " into one line.
static char problems[4096];

__attribute__((format(printf, 1, 2))) static void problem(const char *fmt, ...) {
    size_t n = strlen(problems);
    if (n + 3 >= sizeof problems) return;
    if (n) strcpy(problems + n, "; "), n += 2;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(problems + n, sizeof problems - n, fmt, ap);
    va_end(ap);
}

static int verdict(void) {
    if (!problems[0]) return 0;
    printf("%s\n", problems);
    return 1;
}

// line is exactly what fmt prints with these values (sscanf's blanks match any run of spaces: this
// holds a line parsed by sscanf to its one spelling)
__attribute__((format(printf, 2, 3))) static int is_line(const char *line, const char *fmt, ...) {
    char want[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(want, sizeof want, fmt, ap);
    va_end(ap);
    return !strcmp(line, want);
}

// "number" at p: digits, written to *v; returns the text after them, or NULL
static const char *digits(const char *p, long *v) {
    if (*p < '0' || *p > '9') return NULL;
    char *e;
    *v = strtol(p, &e, 10);
    return e;
}

// A round's first trace line, "round R @pos P ...: drafted D (asked A...), accepted C, ...": R, D, C
static int round_head(const char *p, long *rn, long *d, long *c) {
    long pos, a;
    const char *q;
    if (strncmp(p, "round ", 6) || !(p = digits(p + 6, rn)) || strncmp(p, " @pos ", 6) || !(p = digits(p + 6, &pos))) return 0;
    if (!(q = strstr(p, ": drafted ")) || !(q = digits(q + 10, d)) || strncmp(q, " (asked ", 8) || !(q = digits(q + 8, &a))) return 0;
    return (q = strstr(q, "), accepted ")) && (q = digits(q + 12, c)) && *q == ',';
}

static int cmd_trace(int argc, char **argv) {
    if (argc != 4) usage();
    Buf b = read_all(argv[2]);
    int truth = !strcmp(argv[3], "truth");
    for (long i = 0; i < b.n; i++) {
        unsigned char c = (unsigned char)b.p[i];
        if (c < 0x20 && c != '\t' && c != '\n') {
            long s = i;
            while (s > 0 && b.p[s - 1] != '\n') s--;
            printf("raw control bytes in the trace: byte 0x%02x at %ld, in the line ", c, i);
            put_escaped(b.p + s, i - s + 20 < b.n - s ? i - s + 20 : b.n - s);
            printf("\n");
            return 1;
        }
    }
    long relaxed = count_of(&b, "| accept (relaxed)"), stops = count_of(&b, "| STOP: draft != verifier");
    const char *r = strstr(b.p, " rounds)");
    long rounds = -1;
    if (r) {   // "(N rounds)"
        const char *s = r;
        while (s > b.p && s[-1] >= '0' && s[-1] <= '9') s--;
        if (s < r && s > b.p && s[-1] == '(') rounds = strtol(s, NULL, 10);
    }
    Lines s = lines_of(&b);
    long heads = 0, dr = 0, ac = 0, full = 0, numbered = 1, rejected_truth = 0;
    for (int i = 0; i < s.n; i++) {
        long rn, d, c;
        if (!round_head(s.l[i], &rn, &d, &c)) continue;
        heads++;
        numbered &= rn == heads;
        dr += d, ac += c, full += d == c;
        rejected_truth += d != c;
    }
    long n_drafted = stat_of(s, "n_drafted"), n_accept = stat_of(s, "n_accept"), n_relaxed = stat_of(s, "n_relaxed");
    if (rounds < 0 || n_drafted < 0 || n_accept < 0 || n_relaxed < 0) problem("no '(N rounds)' or n_drafted, n_accept, n_relaxed line");
    if (heads != rounds) problem("%ld round blocks, %ld rounds", heads, rounds);
    if (dr != n_drafted) problem("drafted %ld vs n_drafted %ld", dr, n_drafted);
    if (ac != n_accept) problem("accepted %ld vs n_accept %ld", ac, n_accept);
    if (relaxed != n_relaxed) problem("%ld relaxed lines vs n_relaxed %ld", relaxed, n_relaxed);
    if (!numbered) problem("round numbers not 1..n");
    if (truth && rejected_truth) problem("a true-continuation draft was rejected");
    if (stops + full != heads) problem("rounds without a stop or full acceptance");
    if (verdict()) return 1;
    printf("%ld rounds, %ld drafted, %ld accepted, %ld relaxed, %ld stops\n", rounds, dr, ac, relaxed, stops);
    return 0;
}

static int cmd_relaxed(int argc, char **argv) {
    if (argc != 5) usage();
    double ratio = parse_num(argv[3], "RATIO"), delta = parse_num(argv[4], "DELTA");
    Buf b = read_all(argv[2]);
    Lines s = lines_of(&b);
    long n = 0, n_bad = 0, n_relaxed = -1;
    double min_ratio = INFINITY, max_entropy = -INFINITY;
    char bad[256] = "";
    for (int i = 0; i < s.n; i++) {
        long row, d, t;
        char qs[32], hs[32];
        if (sscanf(s.l[i], "n_relaxed = %ld", &row) == 1 && is_line(s.l[i], "n_relaxed = %ld", row)) {
            if (n_relaxed < 0) n_relaxed = row;
            continue;
        }
        if (sscanf(s.l[i], "clover: relaxed accept: row %ld draft %ld target %ld ratio %31[0-9.] entropy %31[0-9.]", &row, &d, &t, qs, hs) != 5 ||
            !is_line(s.l[i], "clover: relaxed accept: row %ld draft %ld target %ld ratio %s entropy %s", row, d, t, qs, hs))
            continue;
        double q = atof(qs), h = atof(hs);
        n++;
        if (q < min_ratio) min_ratio = q;
        if (h > max_entropy) max_entropy = h;
        // the printed ratio and entropy are rounded to 1e-3
        if (d == t || q < ratio - 5e-4 || q > 1 + 5e-4 || h > delta + 5e-4) {
            if (n_bad++ < 3) snprintf(bad + strlen(bad), sizeof bad - strlen(bad), " [%s]", s.l[i] + 24);
        }
    }
    if (n != n_relaxed || n_relaxed <= 0 || n_bad) {
        printf("%ld logged lines, n_relaxed %ld, violations %ld:%s\n", n, n_relaxed, n_bad, bad);
        return 1;
    }
    printf("%ld relaxed acceptances, min ratio %.3f, max entropy %.3f\n", n_relaxed, min_ratio, max_entropy);
    return 0;
}

// s[0..n) consists of the characters in set only
static int all_in(const char *s, long n, const char *set) {
    for (long i = 0; i < n; i++)
        if (!s[i] || !strchr(set, s[i])) return 0;
    return 1;
}

// "WORD C tokens in T seconds, speed: S t/s" with C as upstream's %4d and T, S as %8.3f, or with
// "speed:      n/a" (this project's spelling for a duration under 1 ms). Fills the fields (as text;
// speed "     n/a" for n/a) from the first line that has this shape, else returns 0.
typedef struct {
    char count[32], secs[32], speed[32];
    int na;
} Speed;

static const char *NA = "     n/a";

static int speed_line(Lines s, const char *word, Speed *out) {
    size_t w = strlen(word);
    for (int i = 0; i < s.n; i++) {
        const char *p = s.l[i], *a, *b, *e;
        if (strncmp(p, word, w) || p[w] != ' ') continue;
        p += w + 1;
        if (!(a = strstr(p, " tokens in ")) || !(b = strstr(a, " seconds, speed: "))) continue;
        const char *sp = b + 17, *ta = a + 11;
        int na = !strcmp(sp, NA);
        e = sp + strlen(sp);
        if (!na && (e - sp < 4 || strcmp(e - 4, " t/s"))) continue;
        if (!na) e -= 4;
        // the count: [ 0-9]{3}[0-9]+; times: [ 0-9.]{8,}
        if (a - p < 4 || a - p > 31 || !all_in(p, 3, " 0123456789") || !all_in(p + 3, a - p - 3, "0123456789")) continue;
        if (b - ta < 8 || b - ta > 31 || !all_in(ta, b - ta, " 0123456789.")) continue;
        if (e - sp < 8 || e - sp > 31 || (!na && !all_in(sp, e - sp, " 0123456789."))) continue;
        snprintf(out->count, sizeof out->count, "%.*s", (int)(a - p), p);
        snprintf(out->secs, sizeof out->secs, "%.*s", (int)(b - ta), ta);
        snprintf(out->speed, sizeof out->speed, "%.*s", (int)(e - sp), sp);
        out->na = na;
        return 1;
    }
    return 0;
}

// %8.3f as printed: spaces, digits, '.', three digits; padded to 8 only
static int is_8_3f(const char *x) {
    size_t n = strlen(x), i = 0;
    while (x[i] == ' ') i++;
    size_t d = i;
    while (x[i] >= '0' && x[i] <= '9') i++;
    if (i == d || x[i] != '.' || n != i + 4 || !all_in(x + i + 1, 3, "0123456789")) return 0;
    return n == 8 || x[0] != ' ';
}

// Some line starts with s.
static int has_line(Lines s, const char *start) {
    for (int i = 0; i < s.n; i++)
        if (!strncmp(s.l[i], start, strlen(start))) return 1;
    return 0;
}

static int cmd_stats(int argc, char **argv) {
    if (argc != 6) usage();
    Buf b = read_all(argv[2]);
    Lines s = lines_of(&b);
    const char *spec = argv[5];
    int draft = strcmp(spec, "none") != 0;   // the draft lines are printed for draft-self only
    static char *gen[MAX_IDS], *eog[64];
    int n_gen_ids = split_ids(argv[3], gen, MAX_IDS), n_eog = split_ids(argv[4], eog, 64);
    // upstream's formats: "encoded %4d tokens in %8.3f seconds, speed: %8.3f t/s", then the n_* lines
    Speed enc, dec;
    int has_enc = speed_line(s, "encoded", &enc), has_dec = speed_line(s, "decoded", &dec);
    static const char *keys[5] = {"n_draft", "n_predict", "n_drafted", "n_accept", "accept"};
    char kv[5][64] = {{0}};
    const char *order[16];
    int n_order = 0;
    static const char *heads[7] = {"encoded", "decoded", "n_draft ", "n_predict", "n_drafted", "n_accept ", "accept  "};
    for (int i = 0; i < s.n; i++) {
        const char *p = s.l[i];
        for (int h = 0; h < 7; h++)
            if (!strncmp(p, heads[h], strlen(heads[h]))) {
                if (n_order < 16) order[n_order++] = heads[h];
                break;
            }
        // "KEY +=  ?VALUE" with VALUE free of spaces, to the end of the line; the last one counts
        for (int k = 0; k < 5; k++) {
            size_t n = strlen(keys[k]);
            const char *q = p + n;
            if (strncmp(p, keys[k], n) || *q != ' ') continue;
            while (*q == ' ') q++;
            if (q[0] != '=' || q[1] != ' ') continue;
            q += 2 + (q[2] == ' ');
            if (!*q || strpbrk(q, " \t") || strlen(q) >= 64) continue;
            strcpy(kv[k], q);
        }
    }
    if (!has_enc || !has_dec) problem("encoded/decoded line missing or malformed");
    int n_kv = 0, only_predict = !!kv[1][0];
    for (int k = 0; k < 5; k++) n_kv += !!kv[k][0], only_predict &= k == 1 || !kv[k][0];
    if (draft && n_kv != 5) problem("n_draft..accept lines: found %d of 5", n_kv);
    if (!draft && !only_predict) problem("without draft-self only n_predict, found %d of the lines n_draft..accept", n_kv);
    // exactly these lines, in this order, among those starting with a head
    static const int want_draft[7] = {0, 1, 2, 3, 4, 5, 6}, want_plain[3] = {0, 1, 3};
    const int *want_order = draft ? want_draft : want_plain;
    int n_want = draft ? 7 : 3, in_order = n_order == n_want;
    for (int h = 0; h < n_want && in_order; h++) in_order = order[h] == heads[want_order[h]];
    if (!in_order) {
        char got[256] = "";
        for (int h = 0; h < n_order; h++) snprintf(got + strlen(got), sizeof got - strlen(got), "%s'%s'", h ? ", " : "", order[h]);
        problem("line order [%s]", got);
    }
    static const char *exact[5] = {"n_draft   = ", "n_predict = ", "n_drafted = ", "n_accept  = ", "accept    = "};
    for (int k = 0; k < 5; k++) {
        if (!draft && k != 1) continue;
        int found = 0;
        for (int i = 0; i < s.n && !found; i++)
            found = !strncmp(s.l[i], exact[k], strlen(exact[k])) && s.l[i][strlen(exact[k])] > ' ';
        if (!found) problem("no line '%s'", exact[k]);
    }
    static const char *draft_only[4] = {"n_relaxed", "mean accepted length", "draft time", "accept by position"};
    for (int k = 0; k < 4; k++)
        if (draft != has_line(s, draft_only[k])) problem("line '%s' %s", draft_only[k], draft ? "missing" : "printed without draft-self");
    if (problems[0]) return verdict();
    Speed *sp[2] = {&enc, &dec};
    for (int k = 0; k < 2; k++) {
        if (!is_8_3f(sp[k]->secs)) problem("'%s' is not %%8.3f", sp[k]->secs);
        if (!sp[k]->na && !is_8_3f(sp[k]->speed)) problem("'%s' is not %%8.3f", sp[k]->speed);
        // n/a is for a duration under 1 ms (printed 0.000 or 0.001), and only then
        if (sp[k]->na ? atof(sp[k]->secs) > 0.001 : atof(sp[k]->secs) < 0.001)
            problem("speed '%s' after %s seconds: n/a is for under 1 ms, and only then", sp[k]->speed, sp[k]->secs);
        size_t n = strlen(sp[k]->count);
        if (n < 4 || (n > 4 && sp[k]->count[0] == ' ')) problem("'%s' is not %%4d", sp[k]->count);
    }
    long n_pred = atol(kv[1]), n_drafted = atol(kv[2]), n_acc = atol(kv[3]);   // missing: 0
    const char *acc = kv[4][0] ? kv[4] : "0.000%";
    char want[64];
    snprintf(want, sizeof want, "%.3f%%", n_drafted ? 100.0 * (double)n_acc / (double)n_drafted : 0.0);
    if (strcmp(acc, want)) problem("accept %s != 100*%ld/%ld", acc, n_acc, n_drafted);
    // generated tokens: llama.cpp's greedy ids up to and including the first end-of-generation one
    long n_gen = n_gen_ids;
    for (int i = 0; i < n_gen_ids && n_gen == n_gen_ids; i++)
        for (int e = 0; e < n_eog; e++)
            if (!strcmp(gen[i], eog[e])) n_gen = i + 1;
    if (n_pred != n_gen) problem("n_predict %ld != %ld generated tokens", n_pred, n_gen);
    if (atol(dec.count) != n_pred) problem("decoded %s != n_predict %ld", dec.count, n_pred);
    if (atol(enc.count) != 12) problem("encoded %s != 12 prompt tokens", enc.count);
    long counts[2] = {atol(enc.count), n_pred};
    for (int k = 0; k < 2; k++) {
        double t = atof(sp[k]->secs), v = atof(sp[k]->speed);
        if (!sp[k]->na && t >= 0.002) {   // the printed seconds are rounded to 1e-3: bound the speed
            double lo = (double)counts[k] / (t + 5e-4) - 5e-4, hi = (double)counts[k] / (t - 5e-4) + 5e-4;
            if (!(lo <= v && v <= hi)) problem("speed %s is not %ld tokens / %s s", sp[k]->speed, counts[k], sp[k]->secs);
        }
    }
    if (draft) {
        long n_max = -1;
        sscanf(spec, "%*s %*s %ld", &n_max);
        if (atol(kv[0]) != n_max) problem("n_draft %s != the configured n_max", kv[0]);
        long r = -1;
        char mean[32] = "";
        for (int i = 0; i < s.n && r < 0; i++)
            if (sscanf(s.l[i], "mean accepted length = %31[0-9.] tokens per round (%ld rounds)", mean, &r) != 2 ||
                !is_line(s.l[i], "mean accepted length = %s tokens per round (%ld rounds)", mean, r))
                r = -1;
        if (r < 0) problem("no mean accepted length line");
        else {
            snprintf(want, sizeof want, "%.3f", r ? (double)n_pred / (double)r : 0.0);
            if (!r || strcmp(mean, want)) problem("mean accepted length %s != %ld/%ld", mean, n_pred, r);
            // per round n_predict += a + 1 (unless an end-of-generation token cut the round)
            if (n_gen == n_gen_ids && n_pred != n_acc + r) problem("n_predict %ld != n_accept %ld + rounds %ld", n_pred, n_acc, r);
        }
        if (strstr(spec, "truth") && !(n_drafted > 0 && n_acc == n_drafted)) problem("truth drafts: %ld of %ld accepted", n_acc, n_drafted);
    }
    if (verdict()) return 1;
    if (draft) printf("n_predict %s, n_drafted %ld, n_accept %ld, accept %s\n", kv[1], n_drafted, n_acc, acc);
    else printf("n_predict %s, no draft lines\n", kv[1]);
    return 0;
}

// "KEY = N" exactly (KEY padded as the statistics pad it): N, or -1 when no line is so
static long exact_stat(Lines s, const char *key) {
    for (int i = 0; i < s.n; i++) {
        long v;
        char fmt[64];
        snprintf(fmt, sizeof fmt, "%s = %%ld", key);
        if (sscanf(s.l[i], fmt, &v) == 1 && v >= 0 && is_line(s.l[i], fmt, v)) return v;
    }
    return -1;
}

// "accept by position" must be what the --trace rounds add up to: a round that drafted d and
// accepted a counts positions 1..d as drafted and 1..a as accepted; the sums are n_drafted and
// n_accept.
static int cmd_by_position(int argc, char **argv) {
    if (argc != 3) usage();
    Buf b = read_all(argv[2]);
    Lines s = lines_of(&b);
    long n_max = exact_stat(s, "n_draft  "), n_drafted = exact_stat(s, "n_drafted"), n_accept = exact_stat(s, "n_accept ");
    if (n_max <= 0 || n_max > 4096 || n_drafted < 0 || n_accept < 0) {
        printf("no lines n_draft (1..4096), n_drafted, n_accept\n");
        return 1;
    }
    long *want_d = calloc((size_t)n_max, sizeof *want_d), *want_a = calloc((size_t)n_max, sizeof *want_a), sum_d = 0, sum_a = 0;
    if (!want_d || !want_a) fail(2, "out of memory");
    for (int i = 0; i < s.n; i++) {
        long rn, d, a;
        if (!round_head(s.l[i], &rn, &d, &a)) continue;
        if (d > n_max) {
            printf("round %ld drafted %ld, accepted %ld, n_draft %ld\n", rn, d, a, n_max);
            return 1;
        }
        for (long j = 0; j < d; j++) want_d[j]++, want_a[j] += j < a;
        sum_d += d, sum_a += a < d ? a : d;
    }
    static char want[65536], got[65536];
    for (long j = 0; j < n_max; j++) snprintf(want + strlen(want), sizeof want - strlen(want), "%s%ld/%ld", j ? " " : "", want_a[j], want_d[j]);
    const char *head = "accept by position = ", *tail = " (accepted/drafted, positions 1..n_draft)";
    for (int i = 0; i < s.n && !got[0]; i++) {
        size_t n = strlen(s.l[i]), h = strlen(head), t = strlen(tail);
        if (!strncmp(s.l[i], head, h) && n >= h + t && !strcmp(s.l[i] + n - t, tail) && n - h - t < sizeof got)
            snprintf(got, sizeof got, "%.*s", (int)(n - h - t), s.l[i] + h);
    }
    if (strcmp(got, want)) {
        printf("accept by position '%s', the --trace rounds give '%s'\n", got[0] ? got : "(no line)", want);
        return 1;
    }
    if (sum_d != n_drafted || sum_a != n_accept) {
        printf("accept by position sums %ld/%ld, n_accept/n_drafted %ld/%ld\n", sum_a, sum_d, n_accept, n_drafted);
        return 1;
    }
    printf("%s\n", want);
    return 0;
}

static int cmd_diffusion(int argc, char **argv) {
    if (argc != 4 && argc != 5) usage();
    Buf b = read_all(argv[2]);
    Lines s = lines_of(&b);
    long n_max = parse_long(argv[3], "N_MAX"), ppb_want = argc == 5 ? parse_long(argv[4], "PASSES_PER_BLOCK") : -1;
    const long B = 8;
    long blocks = -1, passes = -1, n_pred = -1, decoded = -1;
    char ppb[32] = "", tpp[32] = "";
    for (int i = 0; i < s.n; i++) {
        long x, y;
        char u[32], v[32];
        const char *l = s.l[i];
        if (blocks < 0 && sscanf(l, "diffusion: %ld blocks, %ld passes, %31[0-9.] passes per block, %31[0-9.] tokens per pass", &x, &y, u, v) == 4 &&
            is_line(l, "diffusion: %ld blocks, %ld passes, %s passes per block, %s tokens per pass", x, y, u, v))
            blocks = x, passes = y, strcpy(ppb, u), strcpy(tpp, v);
        if (n_pred < 0 && sscanf(l, "n_predict = %ld", &x) == 1 && is_line(l, "n_predict = %ld", x)) n_pred = x;
        if (decoded < 0 && !strncmp(l, "decoded ", 8) && sscanf(l + 8, "%ld tokens", &x) == 1) decoded = x;
    }
    if (blocks < 0 || n_pred < 0 || decoded < 0) {
        printf("no diffusion / n_predict / decoded line\n");
        return 1;
    }
    char want[64];
    snprintf(want, sizeof want, "%.2f", blocks ? (double)passes / (double)blocks : 0.0);
    if (strcmp(ppb, want)) problem("passes per block %s != %ld/%ld", ppb, passes, blocks);
    snprintf(want, sizeof want, "%.2f", passes ? (double)n_pred / (double)passes : 0.0);
    if (strcmp(tpp, want)) problem("tokens per pass %s != %ld/%ld", tpp, n_pred, passes);
    if (decoded != n_pred) problem("decoded %ld != n_predict %ld", decoded, n_pred);
    if (!(blocks <= passes && passes <= blocks * B)) problem("%ld passes for %ld blocks of %ld", passes, blocks, B);
    if (!(0 < n_pred && n_pred <= n_max)) problem("n_predict %ld not in 1..%ld", n_pred, n_max);
    // every block but the last is committed whole; the last may stop early (limit or end of generation)
    if (blocks != (n_pred + B - 1) / B && !(n_pred < n_max && blocks == n_pred / B + 1)) problem("%ld blocks for %ld tokens", blocks, n_pred);
    if (ppb_want >= 0 && passes != ppb_want * blocks) problem("%ld passes for %ld blocks, expected %ld per block", passes, blocks, ppb_want);
    if (verdict()) return 1;
    printf("%ld tokens, %ld blocks, %ld passes\n", n_pred, blocks, passes);
    return 0;
}

int main(int argc, char **argv) {
    static const struct {
        const char *name;
        int (*fn)(int, char **);
    } cmds[] = {{"gap", cmd_gap},       {"argmax", cmd_argmax}, {"text", cmd_text},       {"diff", cmd_diff},
                {"ids", cmd_ids},       {"fill", cmd_fill},     {"damage", cmd_damage},   {"trace", cmd_trace},
                {"relaxed", cmd_relaxed}, {"stats", cmd_stats}, {"by-position", cmd_by_position}, {"diffusion", cmd_diffusion},
                {"random", cmd_random}};
    if (argc < 2) usage();
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (!strcmp(argv[1], cmds[i].name)) return cmds[i].fn(argc, argv);
    return cmd_logits(argc, argv);
}
