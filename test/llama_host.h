/* llama_host.h — the two things test/ref.c and test/bench.c both do with llama.cpp's prebuilt
 * library (node-llama-cpp): load its CPU backends and evaluate one batch. Errors are returned, so
 * each program reports them its own way. */
#include <dlfcn.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "ggml-backend.h"
#include "llama.h"

/* Loads the ggml backends (the CPU variant best for this machine) from the folder that holds
 * libllama, since the executable does not live there. Returns NULL, or what went wrong. */
static const char *load_backends(void) {
    static char err[PATH_MAX + 64];
    Dl_info info;
    if (!dladdr((void *)llama_backend_init, &info) || !info.dli_fname) return "cannot locate libllama";
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", info.dli_fname);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    else snprintf(dir, sizeof dir, ".");
    ggml_backend_load_all_from_path(dir);
    if (ggml_backend_dev_count() > 0) return NULL;
    snprintf(err, sizeof err, "no ggml backend found in %s", dir);
    return err;
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
