/* llama_host.h — the two things test/ref.c and test/bench.c both do with llama.cpp's prebuilt
 * library (node-llama-cpp): load one of its CPU backend variants and evaluate one batch. Errors are returned, so
 * each program reports them its own way. */
#include <dirent.h>
#include <dlfcn.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml-backend.h"
#include "llama.h"

/* llama.cpp's CPU backend comes as variants (libggml-cpu-<name>.so: haswell, icelake, zen4,
 * sapphirerapids, ...) that round differently; left to itself llama.cpp loads the one with the
 * best score for this CPU, so an oracle would change from machine to machine. clover reproduces
 * the zen4 variant bit for bit (README "What is verified"): build/ref loads that one wherever this
 * CPU can execute it, else the best-scoring one; build/bench loads llama.cpp's own choice, the
 * best-scoring one (its speed is what a user gets). LLAMA_CPU_VARIANT=NAME forces one for both. */
#define REFERENCE_VARIANT "zen4"

/* The folder that holds libllama and the backends (the executable does not live there). */
static const char *backend_dir(void) {
    static char dir[PATH_MAX];
    Dl_info info;
    if (!dladdr((void *)llama_backend_init, &info) || !info.dli_fname) return NULL;
    snprintf(dir, sizeof dir, "%s", info.dli_fname);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    else snprintf(dir, sizeof dir, ".");
    return dir;
}

/* A variant's own ggml_backend_score(): 0 when this CPU lacks an instruction set the variant was
 * built for (running it would die with SIGILL), -1 when the variant is not installed. The score
 * function is built without the variant's instruction sets, so calling it is safe anywhere. */
static int variant_score(const char *dir, const char *name) {
    char path[PATH_MAX + 80];
    snprintf(path, sizeof path, "%s/libggml-cpu-%s.so", dir, name);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) return -1;
    int (*score)(void) = (int (*)(void))dlsym(h, "ggml_backend_score");
    int s = score ? score() : -1;
    dlclose(h);
    return s;
}

/* The variant to load: LLAMA_CPU_VARIANT, else `preferred` (NULL: none) if this CPU runs it, else
 * the best-scoring one. Writes its name to name[64]; returns NULL or what went wrong. */
static const char *choose_variant(const char *dir, const char *preferred, char name[64]) {
    static char err[PATH_MAX + 128];
    const char *forced = getenv("LLAMA_CPU_VARIANT");
    if (forced && *forced) {
        int s = variant_score(dir, forced);
        if (s < 0) snprintf(err, sizeof err, "LLAMA_CPU_VARIANT=%s: no %s/libggml-cpu-%s.so", forced, dir, forced);
        else if (s == 0) snprintf(err, sizeof err, "LLAMA_CPU_VARIANT=%s: this CPU lacks its instruction sets", forced);
        else {
            snprintf(name, 64, "%s", forced);
            return NULL;
        }
        return err;
    }
    if (preferred && variant_score(dir, preferred) > 0) {
        snprintf(name, 64, "%s", preferred);
        return NULL;
    }
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(err, sizeof err, "cannot list %s", dir);
        return err;
    }
    int best = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        char v[64];
        size_t n = strlen(e->d_name);
        if (strncmp(e->d_name, "libggml-cpu-", 12) || n < 16 || n - 15 >= sizeof v || strcmp(e->d_name + n - 3, ".so")) continue;
        snprintf(v, sizeof v, "%.*s", (int)(n - 15), e->d_name + 12);
        int s = variant_score(dir, v);
        if (s > best) {
            best = s;
            snprintf(name, 64, "%s", v);
        }
    }
    closedir(d);
    if (best > 0) return NULL;
    snprintf(err, sizeof err, "no CPU variant in %s runs on this CPU", dir);
    return err;
}

/* Loads the CPU variant choose_variant picks; writes its name to variant[64]. Returns NULL, or
 * what went wrong. */
static const char *load_backends(const char *preferred, char variant[64]) {
    static char err[PATH_MAX + 192];
    const char *dir = backend_dir();
    if (!dir) return "cannot locate libllama";
    char name[64];
    const char *why = choose_variant(dir, preferred, name);
    if (why) return why;
    char path[PATH_MAX + 80];
    snprintf(path, sizeof path, "%s/libggml-cpu-%s.so", dir, name);
    if (!ggml_backend_load(path) || ggml_backend_dev_count() == 0) {
        snprintf(err, sizeof err, "cannot load the ggml CPU backend %s", path);
        return err;
    }
    snprintf(variant, 64, "%s", name);
    return NULL;
}

/* Evaluates ids[0..n) at positions pos0.. in one batch, logits for every row or only the last;
 * returns llama_decode's status (0: done). */
static int eval_batch(struct llama_context *c, const llama_token *ids, int n, int pos0, bool all_logits) {
    struct llama_batch b = llama_batch_init(n, 0, 1);
    for (int i = 0; i < n; i++) {
        b.token[i] = ids[i];
        b.pos[i] = pos0 + i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = (int8_t)(all_logits || i == n - 1);
    }
    b.n_tokens = n;
    int r = llama_decode(c, b);
    llama_batch_free(b);
    return r;
}
