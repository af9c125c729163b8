/*
 * fuzz_tokenizer.c — libFuzzer harness for clover.c's tokenizer and its UTF-8 output.
 *
 * The vocabulary is loaded once from FUZZ_MODEL (default build/fuzz/model.gguf, a build/gen model).
 * Each input is prompt text, any bytes: it is encoded with special tokens parsed and not parsed,
 * every id is decoded and streamed through the UTF-8 printer, and, for valid UTF-8 text without
 * special-token parsing, decoding the ids must give back the text exactly (byte-level BPE loses
 * nothing); a mismatch aborts. The ids part also feeds parse_ids (the --tokens list).
 * Built and run by `make fuzz`; see fuzz.h (memory clover.c allocates, and the harness's own, goes
 * through fuzz_malloc so that a fatal() halfway leaks nothing).
 */
#include "fuzz.h"

static Model model;
static Tokenizer tok;
static FILE *devnull;

static bool valid_utf8(const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n;) {
        int len = utf8_sequence_length(s[i]);
        if (!len || i + (size_t)len > n) return false;
        for (int k = 1; k < len; k++)
            if (!utf8_continues(s + i, k, s[i + k])) return false;
        i += (size_t)len;
    }
    return true;
}

static void encode(const uint8_t *data, size_t size) {
    for (int special = 0; special < 2; special++) {
        int n;
        int *ids = tokenizer_encode(&tok, (const char *)data, size, special, &n);
        if (!ids) fatal("out of memory");
        Utf8Stream out = {{0}, 0};
        char buf[512];
        size_t len = 0;
        bool same = true;   /* the decoded bytes so far equal the input's */
        for (int i = 0; i < n; i++) {
            int k = tokenizer_decode(&tok, ids[i], buf, sizeof buf);
            if (k < 0) abort();
            utf8_stream_write(&out, buf, k, devnull);
            /* invalid UTF-8 comes back as U+FFFD, longer than the input: compare only what fits */
            same = same && len + (size_t)k <= size && memcmp(data + len, buf, (size_t)k) == 0;
            len += (size_t)k;
        }
        utf8_stream_flush(&out, devnull);
        if (!special && valid_utf8(data, size) && !(same && len == size)) abort();
        fuzz_free(ids);
    }
    /* the same bytes as a --tokens list (mostly rejected: a fatal, caught) */
    char *s = fuzz_malloc(size + 1);
    memcpy(s, data, size);
    s[size] = 0;
    int n;
    fuzz_free(parse_ids(s, model.c.n_vocab, &n));
    fuzz_free(s);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *path = getenv("FUZZ_MODEL") ? getenv("FUZZ_MODEL") : "build/fuzz/model.gguf";
    EogSet eog;
    if (setjmp(fuzz_env) != 0) {
        fprintf(stderr, "fuzz_tokenizer: cannot load %s (set FUZZ_MODEL)\n", path);
        _Exit(1);
    }
    model_load(&model, path);
    tokenizer_load(&tok, &eog, &model);
    fuzz_keep_all();
    devnull = fopen("/dev/null", "w");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_run(encode, data, size);
    return 0;
}
