/*
 * fuzz_gguf.c — libFuzzer harness for clover.c's GGUF reader, model loader and tokenizer loader.
 *
 * Each input is a whole GGUF file, parsed from memory (gguf_parse): the header, metadata and tensor
 * infos, then read_config and every tensor of TENSOR_NAMES (shapes, types, alignment; small vectors
 * dequantised), the tokenizer built from the file's vocabulary and merges, the memory plan's sizes
 * for the file's own context length, and a short text encoded and decoded with that vocabulary.
 * A rejected file (fatal) is a normal outcome; a crash, hang, leak or sanitizer report is a bug.
 * Built and run by `make fuzz` (seeds: small models from build/gen --shape micro); see fuzz.h.
 */
#include "fuzz.h"

static FILE *devnull;

static void load(const uint8_t *data, size_t size) {
    Model m;
    memset(&m, 0, sizeof m);
    m.file.path = "input.gguf";
    m.file.base = data;
    m.file.size = size;
    gguf_parse(&m.file);
    model_init(&m);
    Tokenizer tok;
    EogSet eog;
    tokenizer_load(&tok, &eog, &m);

    Args a = {.k_type = T_F32, .v_type = T_F32};   /* the largest cache type */
    size_t need = kv_cache_bytes(&m, m.c.n_ctx_train, a.k_type, a.v_type);
    need = add_size(need, gdn_state_bytes(&m), "plan");
    need = add_size(need, scratch_bytes(&m.c, 512, m.c.n_ctx_train, 8), "plan");
    (void)need;

    static const char text[] = "Hello <|im_start|>user\n wörld  12345 \xf0\x9f\x98\x80<|im_end|>\xff";
    int n;
    int *ids = tokenizer_encode(&tok, text, sizeof text - 1, true, &n);
    if (!ids) fatal("out of memory");
    Utf8Stream out = {{0}, 0};
    char buf[512];
    for (int i = 0; i < n + m.c.n_vocab && i < n + 4096; i++) {   /* the text's ids, then the vocabulary's */
        int len = tokenizer_decode(&tok, i < n ? ids[i] : i - n, buf, sizeof buf);
        if (len > 0) utf8_stream_write(&out, buf, len, devnull);
    }
    utf8_stream_flush(&out, devnull);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    devnull = fopen("/dev/null", "w");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_run(load, data, size);
    return 0;
}
