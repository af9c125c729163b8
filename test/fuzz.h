/*
 * fuzz.h — what test/fuzz_gguf.c and test/fuzz_tokenizer.c share: clover.c compiled into a
 * libFuzzer harness, with its two exits from an input made recoverable.
 *
 * clover.c rejects bad input with fatal(), which prints one line and calls exit(1). libFuzzer
 * counts an exit as a crash, and a rejected input is the expected outcome, so here:
 *   - exit() inside clover.c is fuzz_exit(), which longjmps back to the harness (fuzz_run);
 *   - malloc/calloc/realloc/free inside clover.c go through a list of live blocks, and every block
 *     still live when an input ends (rejected halfway, or accepted and not torn down, since the
 *     program itself never frees its model) is freed then. So LeakSanitizer stays on and quiet,
 *     and memory does not grow across millions of inputs.
 * The renames are macros defined only here, after the system headers clover.c uses were included
 * (their declarations keep the real names); clover.c itself is unchanged. fatal() still prints its
 * line to stderr: `make fuzz` runs with -close_fd_mask=2, which silences it while libFuzzer's and
 * the sanitizers' reports still reach the terminal (libFuzzer keeps a duplicate of fd 2 for them).
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <regex.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* A live block: the header sits right before the bytes handed out, aligned like malloc's. */
typedef union Block {
    struct { union Block *prev, *next; size_t size; } h;
    max_align_t align;
} Block;

static Block fuzz_live = {.h = {&fuzz_live, &fuzz_live, 0}};   /* circular list of live blocks */
static jmp_buf fuzz_env;

static void fuzz_link(Block *b) {
    b->h.prev = &fuzz_live;
    b->h.next = fuzz_live.h.next;
    fuzz_live.h.next->h.prev = b;
    fuzz_live.h.next = b;
}

static void fuzz_unlink(Block *b) {
    b->h.prev->h.next = b->h.next;
    b->h.next->h.prev = b->h.prev;
}

static void *fuzz_malloc(size_t n) {
    if (n > SIZE_MAX - sizeof(Block)) return NULL;
    Block *b = malloc(sizeof(Block) + n);
    if (!b) return NULL;
    b->h.size = n;
    fuzz_link(b);
    return b + 1;
}

static void *fuzz_calloc(size_t count, size_t size) {
    if (size && count > SIZE_MAX / size) return NULL;
    void *p = fuzz_malloc(count * size);
    if (p) memset(p, 0, count * size);
    return p;
}

static void fuzz_free(void *p) {
    if (!p) return;
    Block *b = (Block *)p - 1;
    fuzz_unlink(b);
    free(b);
}

static void *fuzz_realloc(void *p, size_t n) {
    if (!p) return fuzz_malloc(n);
    void *q = fuzz_malloc(n);
    if (!q) return NULL;
    size_t old = ((Block *)p - 1)->h.size;
    memcpy(q, p, old < n ? old : n);
    fuzz_free(p);
    return q;
}

/* Keep every block live so far for good (what LLVMFuzzerInitialize loaded for all inputs). */
static inline void fuzz_keep_all(void) { fuzz_live.h.prev = fuzz_live.h.next = &fuzz_live; }

/* Free every block clover.c left live. */
static void fuzz_free_all(void) {
    while (fuzz_live.h.next != &fuzz_live) fuzz_free(fuzz_live.h.next + 1);
}

_Noreturn static void fuzz_exit(int status) { longjmp(fuzz_env, status + 1); }

#define malloc fuzz_malloc
#define calloc fuzz_calloc
#define realloc fuzz_realloc
#define free fuzz_free
#define exit fuzz_exit
#define TESTING
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "../clover.c"
#pragma GCC diagnostic pop
#undef malloc
#undef calloc
#undef realloc
#undef free
#undef exit

/* Run one input through fn; a fatal() inside ends it early. Frees what clover.c allocated. */
static void fuzz_run(void (*fn)(const uint8_t *, size_t), const uint8_t *data, size_t size) {
    if (setjmp(fuzz_env) == 0) fn(data, size);
    fuzz_free_all();
}

