/*
 * fuzz_gguf.c — libFuzzer harness for clover.c's GGUF reader, model loader and tokenizer loader.
 *
 * Each input is a whole GGUF file, parsed from memory (gguf_parse): the header, metadata and tensor
 * infos, then read_config and every tensor of TENSOR_NAMES (shapes, types, alignment; small vectors
 * dequantised), the tokenizer built from the file's vocabulary and merges, the memory plan's sizes
 * for the file's own context length, a short text encoded and decoded with that vocabulary, and,
 * when the state fits in 64 MiB, the forward pass over the file's weights (hostile values: NaN,
 * inf, huge scales) and the sampler on its logits.
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

    /* the memory plan's sizes at the file's own context (checked arithmetic: may reject) */
    size_t plan = kv_cache_bytes(&m, m.c.n_ctx_train, T_F32, T_F32);
    plan = add_size(plan, gdn_state_bytes(&m), "plan");
    plan = add_size(plan, scratch_bytes(&m.c, 512, m.c.n_ctx_train, 8), "plan");
    (void)plan;

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

    /* the file's weights at work, when the state is small: a causal batch of 3 rows, one decoding
     * step, a preview pass (clover_moe with a mask id), sampling from whatever logits come out */
    const int n_ctx = 8, cap = 4;
    size_t need = add_size(kv_cache_bytes(&m, n_ctx, T_F16, T_BF16), scratch_bytes(&m.c, cap, n_ctx, 1), "plan");
    if (add_size(need, gdn_state_bytes(&m), "plan") > ((size_t)64 << 20)) return;
    static Ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.m = &m;
    ctx.n_threads = ctx.n_threads_batch = 1;
    ctx.pool = pool_new(1);
    state_init(&ctx.st, &m, n_ctx, T_F16, T_BF16);
    scratch_init(&ctx.sc, &m.c, cap, n_ctx, 1);
    int V = m.c.n_vocab, toks[3] = {0, V / 2, V - 1};
    float *logits = xmalloc(mul_size((size_t)cap * V, sizeof(float), "logits"));
    ctx.tile_order = true;
    forward_causal(&ctx, toks, 3, logits, 3);
    ctx.tile_order = false;
    forward_causal(&ctx, toks, 1, logits, 1);
    if (m.c.mask_id >= 0) {
        int block[2] = {toks[1], m.c.mask_id};
        forward_preview(&ctx, block, 2, logits);
    }
    Sampler smp = {0.8f, 0.95f, 40, 1, xmalloc((size_t)V * sizeof(int)), xmalloc((size_t)V * sizeof(float))};
    sample(&smp, logits, V);
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
