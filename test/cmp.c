// cmp.c: compares two float32 logits files of shape [n][n_vocab] (row-major, as written by
// `build/ref --logits` and by clover's logits dump).
//
//   build/cmp A.bin B.bin N_VOCAB [--median X] [--p99 Y] [--max Z] [--argmax F]
//
// For every position (row) it computes, in double, the log-softmax of both rows and
// D = max over the vocab of |logsoftmax(A) - logsoftmax(B)|, and the argmax of both rows (ties to
// the lowest id). A row holding a NaN or an infinity gets D = inf and counts as an argmax
// disagreement. It prints one line
//
//   positions N  median D  p99 D  max D  argmax-agree P%
//
// (median: the middle value, or the mean of the two middle ones; p99: the nearest-rank 99th
// percentile, i.e. the ceil(0.99 N)-th smallest; P is rounded down to 2 decimals; "  nonfinite K"
// is appended when K rows held NaN/inf). Exit status: 0 when all given thresholds hold
// (median <= X, p99 <= Y, max <= Z, agreeing fraction >= F, F in [0,1]); 1 when one is violated, when the
// files differ in size, are empty or are not a multiple of N_VOCAB*4 bytes; 2 on bad usage or an
// unreadable file.

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

__attribute__((format(printf, 2, 3), noreturn)) static void fail(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "cmp: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(code);
}

static void usage(void) {
    fail(2, "usage: cmp A.bin B.bin N_VOCAB [--median X] [--p99 Y] [--max Z] [--argmax F]");
}

static double parse_num(const char *s, const char *what) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= 0)) fail(2, "bad %s: '%s'", what, s);
    return v;
}

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

static long argmax(const float *x, long n) {
    long best = -1;
    for (long i = 0; i < n; i++)
        if (x[i] == x[i] && (best < 0 || x[i] > x[best])) best = i;
    return best;
}

int main(int argc, char **argv) {
    if (argc < 4) usage();
    const char *pa = argv[1], *pb = argv[2];
    char *end;
    errno = 0;
    long nv = strtol(argv[3], &end, 10);
    if (errno || end == argv[3] || *end || nv <= 0) fail(2, "bad N_VOCAB: '%s'", argv[3]);
    double t_median = -1, t_p99 = -1, t_max = -1, t_agree = -1;
    for (int i = 4; i < argc; i++) {
        if (i + 1 >= argc) usage();
        if (!strcmp(argv[i], "--median")) t_median = parse_num(argv[++i], "--median");
        else if (!strcmp(argv[i], "--p99")) t_p99 = parse_num(argv[++i], "--p99");
        else if (!strcmp(argv[i], "--max")) t_max = parse_num(argv[++i], "--max");
        else if (!strcmp(argv[i], "--argmax")) {
            t_agree = parse_num(argv[++i], "--argmax");
            if (t_agree > 1) fail(2, "--argmax takes a fraction in [0,1], got %s", argv[i]);
        } else usage();
    }

    FILE *fa = fopen(pa, "rb"), *fb = fopen(pb, "rb");
    if (!fa) fail(2, "cannot open %s: %s", pa, strerror(errno));
    if (!fb) fail(2, "cannot open %s: %s", pb, strerror(errno));
    struct stat sa, sb;
    if (fstat(fileno(fa), &sa) || fstat(fileno(fb), &sb)) fail(2, "cannot stat the inputs");
    long long row_bytes = (long long)nv * 4;
    if (sa.st_size != sb.st_size)
        fail(1, "sizes differ: %s has %lld bytes, %s has %lld", pa, (long long)sa.st_size, pb, (long long)sb.st_size);
    if (sa.st_size % row_bytes)
        fail(1, "%lld bytes is not a multiple of N_VOCAB*4 = %lld", (long long)sa.st_size, row_bytes);
    long n = (long)(sa.st_size / row_bytes);
    if (n == 0) fail(1, "the files are empty");

    float *ra = malloc((size_t)row_bytes), *rb = malloc((size_t)row_bytes);
    double *d = malloc((size_t)n * sizeof *d);
    if (!ra || !rb || !d) fail(2, "out of memory");
    long agree = 0, nonfinite = 0;
    for (long p = 0; p < n; p++) {
        if (fread(ra, 4, (size_t)nv, fa) != (size_t)nv) fail(2, "cannot read %s", pa);
        if (fread(rb, 4, (size_t)nv, fb) != (size_t)nv) fail(2, "cannot read %s", pb);
        double la = lse(ra, nv), lb = lse(rb, nv);
        if (isnan(la) || isnan(lb)) {
            d[p] = INFINITY;
            nonfinite++;
        } else {
            double m = 0;
            for (long i = 0; i < nv; i++) {
                double x = fabs(((double)ra[i] - la) - ((double)rb[i] - lb));
                if (x > m) m = x;
            }
            d[p] = m;
        }
        long ia = argmax(ra, nv), ib = argmax(rb, nv);
        agree += (isfinite(d[p]) && ia == ib);
    }
    fclose(fa);
    fclose(fb);

    qsort(d, (size_t)n, sizeof *d, cmp_double);
    double median = (n % 2) ? d[n / 2] : 0.5 * (d[n / 2 - 1] + d[n / 2]);
    long k99 = (long)ceil(0.99 * (double)n);
    if (k99 < 1) k99 = 1;
    double p99 = d[k99 - 1], mx = d[n - 1];
    double frac = (double)agree / (double)n;

    printf("positions %ld  median %.3g  p99 %.3g  max %.3g  argmax-agree %.2f%%", n, median, p99, mx,
           floor(frac * 10000.0) / 100.0);
    if (nonfinite) printf("  nonfinite %ld", nonfinite);
    printf("\n");
    fflush(stdout);

    int bad = 0;
    if (t_median >= 0 && !(median <= t_median)) bad = 1;
    if (t_p99 >= 0 && !(p99 <= t_p99)) bad = 1;
    if (t_max >= 0 && !(mx <= t_max)) bad = 1;
    if (t_agree >= 0 && !(frac >= t_agree)) bad = 1;
    free(ra);
    free(rb);
    free(d);
    return bad;
}
