#!/usr/bin/env bash
# test/run.sh — the clover.c test suite. Run from anywhere, after `make clover tools` (this is what
# `make test` does) and test/setup-llama.sh (llama.cpp, the oracle behind build/ref and build/unit).
#
#   test/run.sh [REGEX]    run the test groups whose function name (test_*) matches REGEX
#   CLOVER=./clover-cuda test/run.sh    test another build of clover
#   LLAMA_CPU_VARIANT=haswell test/run.sh    compare against another of llama.cpp's CPU variants
#   NO_LLAMA=1 test/run.sh gpu_forward    without llama.cpp (test/gpu.sh, on a GPU machine, where its
#                          libraries are not installed): only clover, build/gen and build/cmp are
#                          needed, no CPU variant is detected, and the prompts are tokenized by clover
#                          (test_tokenizer checks it against llama.cpp); groups that call build/ref or
#                          build/unit fail there
#
# llama.cpp's CPU backend comes in variants (haswell, icelake, zen4, sapphirerapids, ...) whose
# float orders differ; clover reproduces zen4's. The suite loads zen4 wherever this CPU runs it
# (else the best variant it runs; LLAMA_CPU_VARIANT=NAME forces one) and says which on its first
# line. Against zen4, logits, greedy texts and dumps are compared bit for bit. Against any other
# variant V, clover must be as close to V as llama.cpp's zen4 is, measured in the same run on the
# same model and prompt (plus 10% and 1e-6), and greedy texts are compared as far as zen4 and V
# agree; where this CPU cannot run zen4, the bound is SPREAD, llama.cpp's spread between its
# variants as measured on a machine that runs them all.
#
# Prints one line per check, `PASS name` or `FAIL name: reason`, and ends with `N passed, N failed`;
# exit status 1 if any check failed. Models are random tiny GGUFs (build/gen, fixed seeds) in a
# temporary folder removed at exit. Groups:
#   unit       build/unit and build/unit-avx2: half precision, dequantisation, activation rounding, dot products vs ggml
#   tokenizer  clover --tokenize vs llama.cpp on every test/texts/*.txt; decoding of those texts
#   logits     clover --dump-logits vs llama.cpp logits, every weight type, two prompts
#   greedy     64 greedy tokens, clover vs llama.cpp, every weight type (stdout: the raw bytes)
#   output     --utf8-replace: invalid UTF-8 as U+FFFD
#   twin       a clover_moe file and its qwen35moe twin give bit-identical logits
#   threads    -t 1 and -t 2 give bit-identical logits and text
#   simd       SIMD and scalar (CLOVER_SIMD=scalar) dot products give bit-identical logits, every type
#   batch      prompts in ubatches of 1 and 7 rows: vs llama.cpp at the same ubatch (when build/ref
#              has -ub), and vs one batch (-ub 512) for F32 weights (BATCH_TOL)
#   smoke      default options (f16 cache), sampling with a seed, --chat
#   draft      --spec-type draft-self (exact rule) prints the same text as plain greedy decoding
#   dumps      --dump-tensors vs llama.cpp's graph callback tensors, name by name (test/dumpcmp.py)
#   shapes     logits, dumps and greedy text on a narrow model (GDN state 16) and real-shape slices
#   trace      --trace: per-round accepted/drafted counts add up to n_accept/n_drafted
#   preview    clover --preview-block vs build/preview_ref (test/preview_ref.c), an independent
#              float64 evaluation of the preview pass, every combination of the clover_moe extras
#   drafts     draft-self.md section 6: exact rule == none for every n_max and into -c, with and
#              without reverse / coreset; --test-check-state; --test-drafts truth / random; relaxed rule
#   stats      the statistics lines: upstream's formats and their arithmetic
#   diffusion  --diffusion terminates, prints text, its blocks/passes report adds up; threshold 0
#              gives the argmax of one preview pass (shift_logits: position 0 from the last committed row)
#   errors     bad files, bad flags, bad prompts: exit 1, one line "clover: error: ...", no crash;
#              hard but valid input (invalid UTF-8, -n 0, -c 131072) works; the memory plan and its
#              refusal; every row of README.md's table "Hostile and mistaken input" is a check here
#   warnings   every clamped, ignored or overridden option: one "clover: warning:" line naming what is
#              used, the run works, the statistics show the value used; the sampler and seed printed
#   regressions  test/fuzz-regressions/: inputs the fuzzers found (make fuzz), replayed through clover
#   gpu        build/clover-emu (clover.cu on the CPU, test/cuda_emu.h): --check-ops on every weight type
#              in three thread orders; planted bugs (test/gpu_mutants.sh) must fail it
#   flash      -fa on/off/auto (llama.cpp's default, on) x f32/f16/bf16 caches vs llama.cpp with the same flags:
#              one batch (tiled), ubatches of 7 and 1, the split path past 256 positions (-t 2),
#              narrow and real-shape slices, greedy texts (the model card's flags), draft-self, the preview pass
#   tiny       the trained tiny Clover (test/tiny/, `make tiny-clover`): clover's causal and preview
#              logits vs the PyTorch implementation's float64 references (test/train/refs.py), F32 and
#              Q8_0; llama.cpp vs the same references; tokenizer; draft-self accepts drafts, losslessly
set -u

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
ONLY=${1:-.}

CLOVER=${CLOVER:-./clover}     # CLOVER=./clover-cuda test/run.sh tests the CUDA build
GEN=build/gen
REF=${REF:-build/ref}
CMP=build/cmp
EMU=${EMU:-build/clover-emu}   # the CUDA kernels executed on the CPU (make cuda-emu)
UNIT=build/unit
UNIT_AVX2=build/unit-avx2
EDIT="python3 test/gguf_edit.py"
TO="timeout 300"          # no single command may hang the suite
N_VOCAB=1024              # build/gen's tiny vocabulary

TYPES="f32 f16 bf16 q8_0 q4_0 q4_k q5_k q6_k q4_k_m"

# Where this CPU cannot run llama.cpp's reference variant (zen4), clover's logits are compared with
# the variant loaded within SPREAD: twice (+1e-6) the largest median and max over positions of
# max-over-vocab |dlogp| between zen4 and any of haswell, alderlake, skylakex, icelake,
# cascadelake and cooperlake, over this suite's logits, batch and shapes checks, measured
# 2026-12-01 on an Intel Xeon that runs them all (README "What is verified"; llama.cpp's logits
# depend only on the variant, the model and the prompt, so these are the same on any machine);
# and an argmax agreement of 0.9 (measured: 93.75% at worst).
#        type    median   max
SPREAD="
         f32     4.8e-6   2e-5
         f16     3.4e-3   1.4e-2
         bf16    2e-2     2.1e-1
         q8_0    8.5e-2   1.23
         q4_0    1e-6     7.5e-2
         q4_k    6.4e-2   1.77
         q5_k    6.8e-2   4.6e-1
         q6_k    6.4e-2   1.3e-1
         q4_k_m  2.1e-1   2.9e-1
"
# clover with itself: a prompt evaluated in ubatches of 1 and 7 rows vs one batch (-ub 512). Only
# F32 weights: with quantized or F16/BF16 weights llama.cpp's own logits depend on the ubatch by
# 1e-3 to 1e-1 (see test_batch), and clover follows llama.cpp, not a fixed order.
#        type    median  p99    argmax-agree
BATCH_TOL="
         f32     1e-4    1e-4   1.0
"

declare -A SPREAD_MEDIAN SPREAD_MAX
while read -r t m x; do [ -n "$t" ] && SPREAD_MEDIAN[$t]=$m SPREAD_MAX[$t]=$x; done <<< "$SPREAD"
declare -A BMED BP99 BARG
while read -r t m p a; do [ -n "$t" ] && BMED[$t]=$m BP99[$t]=$p BARG[$t]=$a; done <<< "$BATCH_TOL"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/clover-test.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
trap 'exit 130' INT TERM

n_pass=0
n_fail=0
pass() { echo "PASS $1"; echo "$1" >> "$TMP/passed"; n_pass=$((n_pass + 1)); }
fail() { echo "FAIL $1: $2"; n_fail=$((n_fail + 1)); }
# first line of a file, flattened, for reasons
first_line() { head -n 1 "$1" 2>/dev/null | tr -d '\r' | cut -c1-300; }
# clover ARGS... / ref ARGS...: run with a time limit, stderr to $TMP/err; on failure write the
# reason (tool, exit status, first stderr line) to $TMP/why, which `why` prints
# clover runs with -fa off (what build/ref runs by default) unless ARGS say otherwise: clover takes
# the last -fa, and test_flash passes its own
clover() {
    $TO "$CLOVER" -fa off "$@" 2> "$TMP/err" && return 0
    echo "clover exit $?: $(first_line "$TMP/err")" > "$TMP/why"
    return 1
}
ref() {
    $TO "$REF" "$@" 2> "$TMP/err" && return 0
    echo "ref exit $?: $(first_line "$TMP/err")" > "$TMP/why"
    return 1
}
why() { cat "$TMP/why" 2>/dev/null; }
ref_reference() { LLAMA_CPU_VARIANT=$REFERENCE ref "$@"; }   # build/ref with llama.cpp's reference variant

NO_LLAMA=${NO_LLAMA:-}
NEEDED=("$CLOVER" "$GEN" "$CMP")
[ -n "$NO_LLAMA" ] || NEEDED+=("$REF" "$UNIT")
for f in "${NEEDED[@]}"; do
    if [ ! -x "$f" ]; then
        echo "FAIL setup: $f is missing; run test/setup-llama.sh and make clover tools (make test does both builds)"
        echo "0 passed, 1 failed"
        exit 1
    fi
done

# llama.cpp's CPU variant: the loaded one (VARIANT, exported so that every build/ref run loads it)
# and the reference one, when this CPU runs it
REFERENCE=zen4
if [ -n "$NO_LLAMA" ]; then
    VARIANT=none
    echo "# NO_LLAMA=1: no llama.cpp; only the groups that need none (gpu_forward) can pass"
elif ! VARIANT=$("$REF" --cpu-variant 2> "$TMP/err"); then
    echo "FAIL setup: build/ref --cpu-variant: $(first_line "$TMP/err")"
    echo "0 passed, 1 failed"
    exit 1
elif [ "$VARIANT" = "$REFERENCE" ]; then
    echo "# llama.cpp CPU variant: $VARIANT, the one clover reproduces: logits, texts and dumps compared bit for bit"
elif LLAMA_CPU_VARIANT=$REFERENCE "$REF" --cpu-variant > /dev/null 2>&1; then
    REFERENCE_RUNS=1
    echo "# llama.cpp CPU variant: $VARIANT; clover reproduces $REFERENCE, so clover must be as close to $VARIANT as $REFERENCE is (measured in this run)"
else
    echo "# llama.cpp CPU variant: $VARIANT; this CPU cannot run $REFERENCE (the variant clover reproduces), so clover must be within SPREAD of $VARIANT"
fi
export LLAMA_CPU_VARIANT=$VARIANT
REFERENCE_RUNS=${REFERENCE_RUNS:-}

# ------------------------------------------------------------------------------------------------
# models and prompts (made on first use)

model() {   # model TYPE [SEED [gen options...]] -> prints the path; generated once
    local type=$1 seed=${2:-1}
    shift 2 2>/dev/null || shift $#
    local tag
    tag=$(echo "$type-$seed-$*" | tr -c 'A-Za-z0-9_-' '_')
    local f="$TMP/m-$tag.gguf"
    if [ ! -f "$f" ]; then
        $TO "$GEN" -o "$f.part" --type "$type" --seed "$seed" "$@" > "$TMP/gen.log" 2>&1 || {
            echo "gen failed: $(first_line "$TMP/gen.log")" >&2
            return 1
        }
        mv "$f.part" "$f"
    fi
    echo "$f"
}

# Prompt 1: the english corpus text (llama.cpp's tokenization). Prompt 2: 64 fixed pseudo-random
# ids over the whole vocabulary, special tokens included. Greedy prompt: the first 12 of prompt 1.
prompts() {
    [ -f "$TMP/p1.ids" ] && return 0
    local m
    m=$(model q8_0) || return 1
    if [ -n "$NO_LLAMA" ]; then   # clover's -f drops one trailing newline: add one, as test_tokenizer does
        cp test/texts/english.txt "$TMP/p1.txt" && printf '\n' >> "$TMP/p1.txt" &&
            clover -m "$m" --tokenize -f "$TMP/p1.txt" > "$TMP/p1.ids"
    else
        ref -m "$m" --tokenize test/texts/english.txt > "$TMP/p1.ids"
    fi || {
        echo "prompts: $(why)" >&2
        rm -f "$TMP/p1.ids"
        return 1
    }
    python3 -c "import random; r = random.Random(5); print(','.join(str(r.randrange($N_VOCAB)) for _ in range(64)))" > "$TMP/p2.ids"
    cut -d, -f1-12 "$TMP/p1.ids" > "$TMP/pg.ids"
}

# Ids that end generation, as clover finds them: the file's eos id, <|im_end|>, <|endoftext|>.
eog_ids() {
    local m=$1
    {
        $EDIT get "$m" tokenizer.ggml.eos_token_id 2>/dev/null
        $EDIT token "$m" '<|im_end|>'
        $EDIT token "$m" '<|endoftext|>'
    } | tr '\n' ',' | sed 's/,$//'
}

# The text clover must print for a greedy run: llama.cpp's prompt + generated ids, cut before the
# first end-of-generation id, rendered by llama.cpp (the tokens' raw bytes, as upstream prints
# them), plus the final newline. With "replace" as a fifth argument: as clover --utf8-replace prints
# it, invalid UTF-8 replaced by U+FFFD (maximal subparts, like Python's 'replace').
# expected_text MODEL PROMPT_IDS GEN_IDS OUT [replace]
expected_text() {
    local m=$1 p=$2 g=$3 out=$4 errors=${5:-surrogateescape} eog ids
    eog=$(eog_ids "$m")
    ids=$(python3 -c '
import sys
p, g, eog = sys.argv[1].split(","), sys.argv[2].split(","), set(sys.argv[3].split(","))
keep = []
for t in g:
    if t in eog: break
    keep.append(t)
print(",".join(p + keep))' "$p" "$g" "$eog")
    $TO "$REF" -m "$m" --detok "$ids" > "$out.raw" 2> "$out.err" || return 1
    python3 -c '
import sys
b = open(sys.argv[1], "rb").read().decode("utf-8", sys.argv[3]).encode("utf-8", "surrogateescape") + b"\n"
open(sys.argv[2], "wb").write(b)' "$out.raw" "$out" "$errors"
}

# where two text files first differ, for a reason line
text_diff() {
    python3 -c '
import sys
a, b = open(sys.argv[1], "rb").read(), open(sys.argv[2], "rb").read()
i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
print("differ at byte %d of %d/%d: clover %r vs llama.cpp %r" % (i, len(a), len(b), a[max(0, i - 10):i + 20], b[max(0, i - 10):i + 20]))' "$1" "$2"
}

# greedy_agreed MODEL TYPE PROMPT_IDS GEN_IDS: how many of the loaded variant's greedy ids GEN_IDS
# llama.cpp's reference variant also picks (all of them against the reference variant itself). Where
# this CPU cannot run the reference variant: the ids before the first step whose top-2 logit gap,
# in the loaded variant, is below twice SPREAD's max (a step the variants might decide differently).
greedy_agreed() {
    local m=$1 t=$2 p=$3 g=$4 gr
    if [ "$VARIANT" = "$REFERENCE" ]; then
        echo "$g" | tr ',' '\n' | grep -c .
    elif [ -n "$REFERENCE_RUNS" ]; then
        gr=$(ref_reference -m "$m" --greedy "$p" "$(echo "$g" | tr ',' '\n' | grep -c .)") || return 1
        python3 -c '
import sys
a, b = sys.argv[1].split(","), sys.argv[2].split(",")
print(next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b))))' "$g" "$gr"
    else
        ref -m "$m" --logits "$p,$g" "$TMP/gl.bin" > /dev/null || return 1
        python3 -c '
import array, sys
n_vocab, n_prompt, n_gen, gap = int(sys.argv[2]), len(sys.argv[3].split(",")), len(sys.argv[4].split(",")), 2 * float(sys.argv[5])
a = array.array("f")
a.frombytes(open(sys.argv[1], "rb").read())
for k in range(n_gen):
    row = sorted(a[(n_prompt - 1 + k) * n_vocab:(n_prompt + k) * n_vocab])
    if row[-1] - row[-2] < gap:
        break
else:
    k = n_gen
print(k)' "$TMP/gl.bin" $N_VOCAB "$p" "$g" "${SPREAD_MAX[$t]}"
    fi
}

# check_greedy_text NAME MODEL TYPE PROMPT_IDS N: clover -n N (greedy, f32 cache) prints the text of
# the prompt and llama.cpp's greedy continuation (N + 1 tokens: clover's -n counts as
# llama-speculative-simple does), byte for byte; against a variant other than the reference one,
# only as many tokens as greedy_agreed finds (none: skipped, said so in a comment line)
check_greedy_text() {
    local name=$1 m=$2 t=$3 ids=$4 n=$5 g k note=
    if ! g=$(ref -m "$m" --greedy "$ids" $((n + 1))) || ! k=$(greedy_agreed "$m" "$t" "$ids" "$g"); then
        fail "$name" "$(why)"
        return
    fi
    local as_far="as far as $REFERENCE and $VARIANT agree"
    [ -n "$REFERENCE_RUNS" ] || as_far="up to the first step within SPREAD of a tie"
    if [ "$k" -eq 0 ]; then
        echo "# skipped $name: nothing to compare $as_far"
        return
    elif [ "$k" -lt $((n + 1)) ]; then
        note=" (first $k of $((n + 1)) tokens, $as_far)"
        n=$((k - 1))
        g=$(echo "$g" | cut -d, -f1-"$k")
    fi
    if ! expected_text "$m" "$ids" "$g" "$TMP/gt.want"; then
        fail "$name" "ref --detok failed: $(first_line "$TMP/gt.want.err")"
    elif ! clover -m "$m" --tokens "$ids" -n "$n" --temp 0 -ctk f32 -ctv f32 > "$TMP/gt.got"; then
        fail "$name" "$(why)"
    elif cmp -s "$TMP/gt.got" "$TMP/gt.want"; then
        pass "$name$note"
    else
        fail "$name" "$(text_diff "$TMP/gt.got" "$TMP/gt.want")$note"
    fi
}

# check_logits NAME TYPE MINE THEIRS REF_ARGS...: clover's logits MINE vs llama.cpp's THEIRS (from
# the loaded variant). Against the reference variant: bit for bit. Against another one: no further
# from THEIRS than the reference variant's own logits, which `build/ref REF_ARGS` writes to
# $TMP/theirs_ref.bin (measured median, p99 and max |dlogp|, plus 10% and 1e-6; argmax agreement
# minus 1%), or within SPREAD where this CPU cannot run the reference variant.
check_logits() {
    local name=$1 t=$2 mine=$3 theirs=$4 lim out spread
    shift 4
    if [ "$VARIANT" = "$REFERENCE" ]; then
        lim="--median 0 --p99 0 --max 0 --argmax 1"
    elif [ -n "$REFERENCE_RUNS" ]; then
        ref_reference "$@" > /dev/null || { fail "$name" "$(why)"; return; }
        spread=$("$CMP" "$TMP/theirs_ref.bin" "$theirs" $N_VOCAB 2>&1) || { fail "$name" "cmp: $spread"; return; }
        lim=$(echo "$spread" | awk '{ printf "--median %.6g --p99 %.6g --max %.6g --argmax %.4f", $4 * 1.1 + 1e-6, $6 * 1.1 + 1e-6, $8 * 1.1 + 1e-6, $10 / 100 - 0.01 }')
    else
        lim="--median ${SPREAD_MEDIAN[$t]} --max ${SPREAD_MAX[$t]} --argmax 0.9"
    fi
    # shellcheck disable=SC2086
    if out=$("$CMP" "$mine" "$theirs" $N_VOCAB $lim 2>&1); then
        pass "$name ($out${spread:+; $REFERENCE vs $VARIANT: ${spread#positions * }})"
    else
        fail "$name" "$out (limits: ${lim//--/}${spread:+; $REFERENCE vs $VARIANT: $spread})"
    fi
}

# ------------------------------------------------------------------------------------------------
test_unit() {   # as built for this CPU, and for AVX2 without AVX-512 (the kernels' other code paths)
    for u in "$UNIT" "$UNIT_AVX2"; do
        if $TO "$u" > "$TMP/unit.out" 2>&1; then
            pass "$(basename "$u") ($(tail -n 1 "$TMP/unit.out"))"
        else
            fail "$(basename "$u")" "$(grep -m 3 '^FAIL\|error' "$TMP/unit.out" | tr '\n' ';') $(tail -n 1 "$TMP/unit.out")"
        fi
    done
}

test_tokenizer() {
    local m f name
    m=$(model q8_0) || { fail tokenizer "cannot generate the model"; return; }
    for f in test/texts/*.txt; do
        name=tokenizer/$(basename "$f" .txt)
        # clover's -f drops one trailing newline (as llama.cpp's examples do): add one, so both
        # tokenize exactly the file's bytes
        cp "$f" "$TMP/tok.txt" && printf '\n' >> "$TMP/tok.txt"
        if ! clover -m "$m" --tokenize -f "$TMP/tok.txt" > "$TMP/tok.clover" ||
            ! ref -m "$m" --tokenize "$f" > "$TMP/tok.ref"; then
            fail "$name" "$(why)"
        elif cmp -s "$TMP/tok.clover" "$TMP/tok.ref"; then
            pass "$name ($(tr ',' '\n' < "$TMP/tok.ref" | wc -l) tokens)"
        else
            fail "$name" "$(python3 -c '
import sys
a, b = open(sys.argv[1]).read().split(","), open(sys.argv[2]).read().split(",")
i = next((k for k in range(min(len(a), len(b))) if a[k].strip() != b[k].strip()), min(len(a), len(b)))
print("ids differ at %d (%d vs %d ids): clover %s vs llama.cpp %s" % (i, len(a), len(b), a[i:i+4], b[i:i+4]))' "$TMP/tok.clover" "$TMP/tok.ref")"
        fi
    done

    # -f drops exactly one trailing newline
    name="tokenizer/-f drops one trailing newline"
    printf 'Hello world\n\n' > "$TMP/nl2.txt"
    printf 'Hello world\n' > "$TMP/nl1.txt"
    if ! clover -m "$m" --tokenize -f "$TMP/nl2.txt" > "$TMP/nl.clover" || ! ref -m "$m" --tokenize "$TMP/nl1.txt" > "$TMP/nl.ref"; then
        fail "$name" "$(why)"
    elif cmp -s "$TMP/nl.clover" "$TMP/nl.ref"; then
        pass "$name"
    else
        fail "$name" "clover '$(cat "$TMP/nl.clover")' vs llama.cpp '$(cat "$TMP/nl.ref")'"
    fi

    # decoding: each corpus as prompt ids; clover prints their text and one greedy token (-n 0)
    local mf ids
    mf=$(model f32) || { fail detokenize "cannot generate the model"; return; }
    for f in test/texts/*.txt; do
        name=detokenize/$(basename "$f" .txt)
        if ! ids=$(ref -m "$mf" --tokenize "$f"); then
            fail "$name" "$(why)"
        else
            check_greedy_text "$name" "$mf" f32 "$ids" 0
        fi
    done
}

test_logits() {
    prompts || { fail logits "cannot make the prompts"; return; }
    local t m p name out
    for t in $TYPES; do
        m=$(model "$t") || { fail "logits/$t" "cannot generate the model"; continue; }
        for p in p1 p2; do
            name="logits/$t/$p"
            if ! clover -m "$m" --tokens "$(cat "$TMP/$p.ids")" --dump-logits "$TMP/a.bin" -ctk f32 -ctv f32 > /dev/null ||
                ! ref -m "$m" --logits "@$TMP/$p.ids" "$TMP/b.bin" > /dev/null; then
                fail "$name" "$(why)"
            else
                check_logits "$name" "$t" "$TMP/a.bin" "$TMP/b.bin" -m "$m" --logits "@$TMP/$p.ids" "$TMP/theirs_ref.bin"
            fi
        done
    done
}

test_greedy() {
    prompts || { fail greedy "cannot make the prompts"; return; }
    local t m name ids
    ids=$(cat "$TMP/pg.ids")
    for t in $TYPES; do
        name="greedy/$t"
        m=$(model "$t") || { fail "$name" "cannot generate the model"; continue; }
        check_greedy_text "$name" "$m" "$t" "$ids" 64
    done
}

# clover's stdout is the tokens' raw bytes (checked above, byte for byte against llama.cpp's
# rendering, on random models whose greedy texts are full of partial UTF-8 sequences); with
# --utf8-replace, each invalid sequence becomes U+FFFD
test_output() {
    prompts || { fail output "cannot make the prompts"; return; }
    local m g ids name
    ids=$(cat "$TMP/pg.ids")
    m=$(model q8_0) || { fail output "cannot generate the model"; return; }
    name="output/--utf8-replace: invalid UTF-8 of the greedy text as U+FFFD, the rest as without it"
    if ! g=$(ref -m "$m" --greedy "$ids" 65); then
        fail "$name" "$(why)"
    elif ! expected_text "$m" "$ids" "$g" "$TMP/ou.raw" || ! expected_text "$m" "$ids" "$g" "$TMP/ou.want" replace; then
        fail "$name" "ref --detok failed: $(first_line "$TMP/ou.raw.err")"
    elif cmp -s "$TMP/ou.raw" "$TMP/ou.want"; then
        fail "$name" "the greedy text is valid UTF-8: nothing to replace, choose another prompt"
    elif ! clover -m "$m" --tokens "$ids" -n 64 --temp 0 -ctk f32 -ctv f32 --utf8-replace > "$TMP/ou.got"; then
        fail "$name" "$(why)"
    elif cmp -s "$TMP/ou.got" "$TMP/ou.want"; then
        pass "$name"
    else
        fail "$name" "$(text_diff "$TMP/ou.got" "$TMP/ou.want")"
    fi
}

test_twin() {
    prompts || { fail twin "cannot make the prompts"; return; }
    local t a b name ids
    ids=$(cat "$TMP/p1.ids")
    for t in q8_0 f32 q4_k; do
        name="twin/$t (clover_moe --mask vs qwen35moe, seed 7)"
        a=$(model "$t" 7 --arch clover_moe --mask) && b=$(model "$t" 7 --arch qwen35moe) || { fail "$name" "cannot generate the models"; continue; }
        if ! clover -m "$a" --tokens "$ids" --dump-logits "$TMP/tw_a.bin" -ctk f32 -ctv f32 > /dev/null ||
            ! clover -m "$b" --tokens "$ids" --dump-logits "$TMP/tw_b.bin" -ctk f32 -ctv f32 > /dev/null; then
            fail "$name" "$(why)"
        elif cmp -s "$TMP/tw_a.bin" "$TMP/tw_b.bin"; then
            pass "$name"
        else
            fail "$name" "logits differ: $("$CMP" "$TMP/tw_a.bin" "$TMP/tw_b.bin" $N_VOCAB 2>&1)"
        fi
    done
}

test_threads() {
    prompts || { fail threads "cannot make the prompts"; return; }
    local t m ub name ids
    ids=$(cat "$TMP/p1.ids")
    for t in q8_0 f16 q4_k; do
        m=$(model "$t") || { fail "threads/$t" "cannot generate the model"; continue; }
        for ub in 512 5; do
            name="threads/$t -ub $ub: -t 1 vs -t 2 logits"
            if ! clover -m "$m" --tokens "$ids" -ub "$ub" -t 1 --dump-logits "$TMP/t1.bin" -ctk f32 -ctv f32 > /dev/null ||
                ! clover -m "$m" --tokens "$ids" -ub "$ub" -t 2 --dump-logits "$TMP/t2.bin" -ctk f32 -ctv f32 > /dev/null; then
                fail "$name" "$(why)"
            elif cmp -s "$TMP/t1.bin" "$TMP/t2.bin"; then
                pass "$name"
            else
                fail "$name" "not bit-identical: $("$CMP" "$TMP/t1.bin" "$TMP/t2.bin" $N_VOCAB 2>&1)"
            fi
        done
        name="threads/$t: -t 1 vs -t 2 greedy text"
        if ! clover -m "$m" --tokens "$(cat "$TMP/pg.ids")" -n 32 --temp 0 -t 1 > "$TMP/t1.txt" ||
            ! clover -m "$m" --tokens "$(cat "$TMP/pg.ids")" -n 32 --temp 0 -t 2 > "$TMP/t2.txt"; then
            fail "$name" "$(why)"
        elif cmp -s "$TMP/t1.txt" "$TMP/t2.txt"; then
            pass "$name"
        else
            fail "$name" "$(text_diff "$TMP/t1.txt" "$TMP/t2.txt")"
        fi
    done
}

# The SIMD dot products (AVX2, chosen at run time) and the scalar definitions (CLOVER_SIMD=scalar)
# give bit-identical logits: every weight type, in one batch (tile order, 4-row gemm), ubatches of 5
# (gemm plus gemv rows) and of 1 (row order, as decoding); f16 and bf16 caches for attention.
test_simd() {
    prompts || { fail simd "cannot make the prompts"; return; }
    local t m ub kv name ids
    ids=$(cat "$TMP/p1.ids")
    for t in $TYPES; do
        m=$(model "$t") || { fail "simd/$t" "cannot generate the model"; continue; }
        for ub in 512 5 1; do
            for kv in f32 f16 bf16; do
                [ "$kv" != f32 ] && [ "$t" != q8_0 ] && continue
                name="simd/$t -ub $ub -ctk $kv: SIMD vs scalar logits"
                if ! clover -m "$m" --tokens "$ids" -ub "$ub" --dump-logits "$TMP/s1.bin" -ctk "$kv" -ctv "$kv" > /dev/null ||
                    ! CLOVER_SIMD=scalar clover -m "$m" --tokens "$ids" -ub "$ub" --dump-logits "$TMP/s2.bin" -ctk "$kv" -ctv "$kv" > /dev/null; then
                    fail "$name" "$(why)"
                elif cmp -s "$TMP/s1.bin" "$TMP/s2.bin"; then
                    pass "$name"
                else
                    fail "$name" "not bit-identical: $("$CMP" "$TMP/s1.bin" "$TMP/s2.bin" $N_VOCAB 2>&1)"
                fi
            done
        done
    done
}

# Prompts evaluated in ubatches of 1 and 7 rows. llama.cpp's float order depends on the ubatch
# (tile vs row order, repacked 4-row gemm vs gemv), and so does clover's, which follows it: measured
# here, llama.cpp's own -ub 1 vs one batch differ by median 0.036 / max 0.89 (q4_k) and p99
# 0.025-0.034 (q8_0, q4_0). So clover -ub N is compared with llama.cpp at the same ubatch
# (check_logits; needs build/ref -ub), and clover with itself across ubatches only for F32 weights
# (BATCH_TOL), where llama.cpp itself agrees to about 5e-6.
test_batch() {
    prompts || { fail batch "cannot make the prompts"; return; }
    local t m ub name out ids
    ids=$(cat "$TMP/p1.ids")
    if "$REF" 2>&1 | grep -q -- '-ub'; then
        for t in $TYPES; do
            m=$(model "$t") || { fail "batch/$t" "cannot generate the model"; continue; }
            for ub in 1 7; do
                name="batch/$t -ub $ub vs llama.cpp -ub $ub"
                if ! clover -m "$m" --tokens "$ids" -ub "$ub" --dump-logits "$TMP/ub.bin" -ctk f32 -ctv f32 > /dev/null ||
                    ! ref -m "$m" -ub "$ub" --logits "@$TMP/p1.ids" "$TMP/ubref.bin" > /dev/null; then
                    fail "$name" "$(why)"
                else
                    check_logits "$name" "$t" "$TMP/ub.bin" "$TMP/ubref.bin" -m "$m" -ub "$ub" --logits "@$TMP/p1.ids" "$TMP/theirs_ref.bin"
                fi
            done
        done
    else
        echo "# test_batch: build/ref has no -ub option; the checks of clover -ub N against llama.cpp are skipped" >&2
    fi
    for t in "${!BMED[@]}"; do
        m=$(model "$t") || { fail "batch/$t" "cannot generate the model"; continue; }
        if ! clover -m "$m" --tokens "$ids" -ub 512 --dump-logits "$TMP/ub512.bin" -ctk f32 -ctv f32 > /dev/null; then
            fail "batch/$t" "$(why)"
            continue
        fi
        for ub in 1 7; do
            name="batch/$t -ub $ub vs -ub 512"
            if ! clover -m "$m" --tokens "$ids" -ub "$ub" --dump-logits "$TMP/ub.bin" -ctk f32 -ctv f32 > /dev/null; then
                fail "$name" "$(why)"
            elif out=$("$CMP" "$TMP/ub.bin" "$TMP/ub512.bin" $N_VOCAB --median "${BMED[$t]}" --p99 "${BP99[$t]}" --argmax "${BARG[$t]}" 2>&1); then
                pass "$name ($out)"
            else
                fail "$name" "$out (limits: median ${BMED[$t]}, p99 ${BP99[$t]}, argmax ${BARG[$t]})"
            fi
        done
    done
}

test_smoke() {
    local m name
    m=$(model q8_0) || { fail smoke "cannot generate the model"; return; }
    name="smoke/defaults (-p, f16 cache, sampling)"
    if ! clover -m "$m" -p "Hello world" -n 16 --seed 3 > "$TMP/s1.txt"; then
        fail "$name" "$(why)"
    elif [ "$(head -c 11 "$TMP/s1.txt")" = "Hello world" ]; then
        pass "$name"
    else
        fail "$name" "output does not start with the prompt: '$(head -c 80 "$TMP/s1.txt" | tr '\n' ' ')'"
    fi
    name="smoke/same --seed, same text"
    if ! clover -m "$m" -p "Hello world" -n 16 --seed 3 > "$TMP/s2.txt"; then
        fail "$name" "$(why)"
    elif cmp -s "$TMP/s1.txt" "$TMP/s2.txt"; then
        pass "$name"
    else
        fail "$name" "$(text_diff "$TMP/s2.txt" "$TMP/s1.txt")"
    fi
    name="smoke/--chat"
    if ! clover -m "$m" -p "Hi" --chat -n 4 --temp 0 > "$TMP/s3.txt"; then
        fail "$name" "$(why)"
    elif grep -q '^<|im_start|>user' "$TMP/s3.txt" && grep -q '<|im_start|>assistant' "$TMP/s3.txt"; then
        pass "$name"
    else
        fail "$name" "no chat template in the output: '$(head -c 80 "$TMP/s3.txt" | tr '\n' ' ')'"
    fi
}

# --spec-type draft-self with the exact acceptance rule is lossless: its text must equal plain greedy
# decoding, for every draft length, prompt length, and when generation runs into -c
# (shared/notes/draft-self.md section 6). Seed 1's q8_0 twin accepts a few drafts after prompt pd.
test_draft() {
    prompts || { fail draft "cannot make the prompts"; return; }
    local m name n pr ctx acc
    m=$(model q8_0 1 --arch clover_moe --mask) || { fail draft "cannot generate the model"; return; }
    echo 1,2,3,4,5,6,7,8,9,10,11,12 > "$TMP/pd.ids"
    for pr in pd p1; do
        for ctx in 0 40; do
            [ "$pr" = p1 ] && [ "$ctx" = 40 ] && continue
            if ! clover -m "$m" --tokens "$(cat "$TMP/$pr.ids")" -n 48 -c "$ctx" --temp 0 -ctk f32 -ctv f32 > "$TMP/d.want"; then
                fail "draft/$pr -c $ctx" "$(why)"
                continue
            fi
            for n in 1 2 3 7 15 31; do
                [ "$pr" = p1 ] && [ "$n" != 7 ] && continue
                name="draft/draft-self --spec-draft-n-max $n == greedy (prompt $pr, -c $ctx)"
                if ! clover -m "$m" --tokens "$(cat "$TMP/$pr.ids")" -n 48 -c "$ctx" --temp 0 -ctk f32 -ctv f32 \
                    --spec-type draft-self --spec-draft-n-max "$n" > "$TMP/d.got"; then
                    fail "$name" "$(why)"
                elif cmp -s "$TMP/d.got" "$TMP/d.want"; then
                    acc=$(sed -n 's/^n_accept *= *//p' "$TMP/err")
                    pass "$name (${acc:-?} accepted)"
                else
                    fail "$name" "$(text_diff "$TMP/d.got" "$TMP/d.want")"
                fi
            done
        done
    done
    name="draft/relaxed rule is deterministic"
    if ! clover -m "$m" --tokens "$(cat "$TMP/pd.ids")" -n 32 --temp 0 --spec-type draft-self --spec-accept-ratio 0.3 --spec-accept-delta 10 > "$TMP/r1.txt" ||
        ! clover -m "$m" --tokens "$(cat "$TMP/pd.ids")" -n 32 --temp 0 --spec-type draft-self --spec-accept-ratio 0.3 --spec-accept-delta 10 > "$TMP/r2.txt"; then
        fail "$name" "$(why)"
    elif cmp -s "$TMP/r1.txt" "$TMP/r2.txt"; then
        pass "$name ($(sed -n 's/^n_relaxed *= *//p' "$TMP/err") relaxed)"
    else
        fail "$name" "$(text_diff "$TMP/r1.txt" "$TMP/r2.txt")"
    fi
}

# --dump-tensors lines up with llama.cpp's graph callback, name by name (test/dumpcmp.py): every file
# clover writes for a prompt exists in build/ref's dump with the same size and dtype and agrees
# bit for bit with the reference variant (int32 ffn_moe_topk exactly); with another variant, as
# closely as the reference variant's own dump does (or within DUMP_TOL of the tensor's max |value|
# where this CPU cannot run the reference variant). llama.cpp names clover
# does not write are allowed only if they match DUMP_SKIP (README "Porting checklist" says why).
DUMP_TOL=1e-4
DUMP_SKIP='^(norm|conv_states|conv_states_reshaped|qkv_mixed_transposed|conv_state_last|conv_state_update|ffn_moe_argsort|kq|kq_soft_max|kqv)(-[0-9]+)?$|^h_nextn$'
# check_dumps NAME MODEL TYPE IDS_FILE DIR: clover's and llama.cpp's --dump-tensors (DIR/mine,
# DIR/theirs) and logits (DIR/mine.bin, DIR/theirs.bin) of the prompt in IDS_FILE in one batch,
# compared name by name as the comment above says. Where this CPU cannot run the reference variant,
# only F32 models are compared (measured: other variants' F32 tensors within 3e-6 of zen4's; those
# of rounded activations drift by 1e-3 and more within a few layers, and routing flips follow).
check_dumps() {
    local name=$1 m=$2 t=$3 ids=$4 d=$5 lim out
    rm -rf "$d" && mkdir -p "$d/theirs" "$d/reference"
    if [ "$VARIANT" = "$REFERENCE" ]; then
        lim="--tol 0"
    elif [ -n "$REFERENCE_RUNS" ]; then
        ref_reference -m "$m" --logits "@$ids" "$d/reference.bin" --dump-tensors "$d/reference" > /dev/null || { fail "$name" "$(why)"; return; }
        lim="--tol $DUMP_TOL --spread $d/reference"
    elif [ "$t" = f32 ]; then
        lim="--tol $DUMP_TOL"
    else
        echo "# skipped $name: $REFERENCE cannot run here, and $VARIANT's $t tensors differ from it"
        lim=skip
    fi
    if ! clover -m "$m" --tokens "$(cat "$ids")" --dump-logits "$d/mine.bin" --dump-tensors "$d/mine" -ctk f32 -ctv f32 > /dev/null ||
        ! ref -m "$m" --logits "@$ids" "$d/theirs.bin" --dump-tensors "$d/theirs" > /dev/null; then
        fail "$name" "$(why)"
    elif [ "$lim" = skip ]; then
        return
    elif out=$(python3 test/dumpcmp.py "$d/mine" "$d/theirs" $lim --skip "$DUMP_SKIP" 2>&1); then
        pass "$name ($out)"
    else
        fail "$name" "$(echo "$out" | tr '\n' ' ' | cut -c1-400)"
    fi
}

test_dumps() {
    prompts || { fail dumps "cannot make the prompts"; return; }
    local t m name out n
    for t in f32 q8_0; do
        name="dumps/$t: clover --dump-tensors vs llama.cpp's callback tensors (prompt p1)"
        m=$(model "$t") || { fail "$name" "cannot generate the model"; continue; }
        check_dumps "$name" "$m" "$t" "$TMP/p1.ids" "$TMP/d_$t"
    done
    name="dumps/the comparison catches a wrong model (f32 dumps vs q8_0 reference must disagree)"
    if [ -f "$TMP/d_f32/mine/index.tsv" ] && [ -f "$TMP/d_q8_0/theirs/index.tsv" ] &&
        ! python3 test/dumpcmp.py "$TMP/d_f32/mine" "$TMP/d_q8_0/theirs" --tol "$DUMP_TOL" --skip "$DUMP_SKIP" > "$TMP/dneg.txt" 2>&1 &&
        grep -q disagree "$TMP/dneg.txt"; then
        pass "$name ($(head -n 1 "$TMP/dneg.txt" | sed 's/;.*//'))"
    else
        fail "$name" "$(head -n 1 "$TMP/dneg.txt" 2>/dev/null)"
    fi
    name="dumps/--dump-filter '^l_out-' writes only l_out, index.tsv lists them; DIR and its parents are created"
    rm -rf "$TMP/dfp"
    local df=$TMP/dfp/new/df
    m=$(model q8_0)
    if ! clover -m "$m" --tokens 1,2,3,4,5 --dump-logits "$TMP/dl.bin" --dump-tensors "$df" --dump-filter '^l_out-' > /dev/null; then
        fail "$name" "$(why)"
    elif n=$(ls "$df" | grep -c '\.bin$') && [ "$n" = 4 ] && [ "$(ls "$df" | grep -v '^l_out-[0-9]*\.bin$' )" = index.tsv ] &&
        [ "$(grep -c '^l_out-' "$df/index.tsv")" = 4 ]; then
        pass "$name"
    else
        fail "$name" "files: $(ls "$df" | tr '\n' ' ' | cut -c1-200)"
    fi
    name="dumps/batches append rows: -ub 3 gives the same files as one batch (f32 weights)"
    rm -rf "$TMP/du" && mkdir "$TMP/du"
    m=$(model f32)
    if ! clover -m "$m" --tokens "$(cat "$TMP/p1.ids")" -ub 3 --dump-logits "$TMP/dl.bin" --dump-tensors "$TMP/du" -ctk f32 -ctv f32 --dump-filter '^(l_out|attn_output|ffn_moe_topk|result_output)' > /dev/null; then
        fail "$name" "$(why)"
    elif out=$(python3 test/dumpcmp.py "$TMP/du" "$TMP/d_f32/mine" --tol "$DUMP_TOL" --skip . 2>&1); then
        pass "$name ($out)"
    else
        fail "$name" "$(echo "$out" | tr '\n' ' ' | cut -c1-400)"
    fi
    name="dumps/preview pass: --preview-block writes preview.* names with the block's rows"
    rm -rf "$TMP/dp" && mkdir "$TMP/dp"
    m=$(model q8_0 7 --arch clover_moe --mask)
    local mask
    mask=$($EDIT get "$m" tokenizer.ggml.mask_token_id)
    if ! clover -m "$m" --tokens 1,2,3,4,5 --preview-block "5,$mask,$mask,$mask" --dump-logits "$TMP/dl.bin" --dump-tensors "$TMP/dp" > /dev/null; then
        fail "$name" "$(why)"
    elif grep -q "^preview.l_out-0	f32	4x" "$TMP/dp/index.tsv" && grep -q "^l_out-0	f32	5x" "$TMP/dp/index.tsv" &&
        [ "$(stat -c %s "$TMP/dp/preview.result_output.bin")" = $((4 * 4 * N_VOCAB)) ]; then
        pass "$name"
    else
        fail "$name" "index: $(grep 'l_out-0\|result_output' "$TMP/dp/index.tsv" | cut -f1-3 | tr '\n' ' ')"
    fi
}

# Shapes beyond the tiny models, the whole prompt (p2, 64 tokens) in one batch: logits and every
# dump as for the tiny models, and a greedy text. narrow: n_embd 64 and a GDN state of 16, rows
# shorter than one 64-lane step of ggml_vec_dot_f32 (whose float tail differs from the other
# dots'). real: the 35B model's layer shapes, 16 experts of which 8 are used (the sum of 8 routing
# weights, in double as ggml_sum_rows adds), 4 layers, the real vocabulary for Q4_K_M.
test_shapes() {
    prompts || { fail shapes "cannot make the prompts"; return; }
    local spec t shape opts m name n_vocab
    for spec in "f16 narrow" "bf16 narrow" "f32 narrow" "q8_0 narrow" "q4_k narrow" \
        "q4_k_m real --layers 4 --experts 16 --vocab 248320" "q8_0 real --layers 4 --experts 16 --vocab 32768"; do
        read -r t shape opts <<< "$spec"
        # shellcheck disable=SC2086
        m=$(model "$t" 1 --shape "$shape" $opts) || { fail "shapes/$t $shape" "cannot generate the model"; continue; }
        name="shapes/$t $shape${opts:+ ($opts)}"
        n_vocab=$(echo "$opts" | sed -n 's/.*--vocab \([0-9]*\).*/\1/p')
        check_dumps "$name: dumps" "$m" "$t" "$TMP/p2.ids" "$TMP/sh"
        [ -f "$TMP/sh/mine.bin" ] && [ -f "$TMP/sh/theirs.bin" ] &&
            N_VOCAB=${n_vocab:-$N_VOCAB} check_logits "$name: logits" "$t" "$TMP/sh/mine.bin" "$TMP/sh/theirs.bin" -m "$m" --logits "@$TMP/p2.ids" "$TMP/theirs_ref.bin"
        check_greedy_text "$name: greedy" "$m" "$t" "$(cat "$TMP/p2.ids")" $([ "$shape" = real ] && echo 7 || echo 31)
    done
}

# --trace prints one block per draft-self round (README "One draft-self round"): the per-round
# counts must add up to the final statistics, the text must not change, and tokens are escaped.
test_trace() {
    local m name ids out mode
    m=$(model q8_0 1 --arch clover_moe --mask) || { fail trace "cannot generate the model"; return; }
    ids=1,2,3,4,5,6,7,8,9,10,11,12
    for mode in model random truth relaxed; do
        local extra=()
        case $mode in
            random|truth) extra=(--test-drafts "$mode") ;;
            relaxed) extra=(--spec-accept-ratio 0.3 --spec-accept-delta 10) ;;
        esac
        name="trace/$mode drafts: per-round accepted and drafted counts sum to n_accept and n_drafted"
        if ! clover -m "$m" --tokens "$ids" -n 24 --temp 0 --spec-type draft-self --spec-draft-n-max 7 "${extra[@]}" > "$TMP/tr0.txt" ||
            ! clover -m "$m" --tokens "$ids" -n 24 --temp 0 --spec-type draft-self --spec-draft-n-max 7 "${extra[@]}" --trace > "$TMP/tr.txt"; then
            fail "$name" "$(why)"
            continue
        fi
        if ! cmp -s "$TMP/tr0.txt" "$TMP/tr.txt"; then
            fail "$name" "--trace changed the text: $(text_diff "$TMP/tr.txt" "$TMP/tr0.txt")"
        elif out=$(python3 - "$TMP/err" "$mode" <<'EOF'
import re, sys
err = open(sys.argv[1], 'rb').read()
mode = sys.argv[2]
bad = [l for l in err.split(b'\n') if any(c < 0x20 and c != 0x09 for c in l)]
if bad:
    sys.exit('raw control bytes in the trace: %r' % bad[0][:80])
text = err.decode('utf-8', 'replace')
heads = re.findall(r'^round (\d+) @pos (\d+) .*?: drafted (\d+) \(asked (\d+).*?\), accepted (\d+),', text, re.M)
stat = lambda k: int(re.search(r'^%s *= *(\d+)' % k, text, re.M).group(1))
rounds = int(re.search(r'\((\d+) rounds\)', text).group(1))
dr, ac = sum(int(h[2]) for h in heads), sum(int(h[4]) for h in heads)
relaxed = len(re.findall(r'\| accept \(relaxed\)', text))
stops = len(re.findall(r'\| STOP: draft != verifier', text))
msgs = []
if len(heads) != rounds: msgs.append('%d round blocks, %d rounds' % (len(heads), rounds))
if dr != stat('n_drafted'): msgs.append('drafted %d vs n_drafted %d' % (dr, stat('n_drafted')))
if ac != stat('n_accept'): msgs.append('accepted %d vs n_accept %d' % (ac, stat('n_accept')))
if relaxed != stat('n_relaxed'): msgs.append('%d relaxed lines vs n_relaxed %d' % (relaxed, stat('n_relaxed')))
if [int(h[0]) for h in heads] != list(range(1, len(heads) + 1)): msgs.append('round numbers not 1..n')
if mode == 'truth' and any(h[2] != h[4] for h in heads): msgs.append('a true-continuation draft was rejected')
if stops + sum(1 for h in heads if h[2] == h[4]) != len(heads): msgs.append('rounds without a stop or full acceptance')
if msgs: sys.exit('; '.join(msgs))
print('%d rounds, %d drafted, %d accepted, %d relaxed, %d stops' % (rounds, dr, ac, relaxed, stops))
EOF
        ); then
            pass "$name ($out)"
        else
            fail "$name" "$out"
        fi
    done
}

# ------------------------------------------------------------------------------------------------
# The preview pass (shared/notes/clover.md section 3) against build/preview_ref, an independent
# float64 evaluation written from the notes (test/preview_ref.c): clover --preview-block commits
# the prompt causally and runs one preview pass over the block right after it. F32 models with
# every combination of the extras (right conv taps, reverse GDN branch, coreset routing with
# p = 0.5 / 0.9 / 0.1, the last one smaller than top-k); blocks with and without mask ids, of 1 to
# 32 rows; prompts of 1, 2 (conv ring partly zero) and 12 tokens. The limit is on the largest
# |delta log-softmax| over all rows and the vocabulary; clover's float orders (llama.cpp's)
# leave about 2e-6.
PREVIEW_TOL=1e-4
PREVIEW_REF=build/preview_ref

# preview_check NAME MODEL PROMPT_IDS BLOCK_IDS
preview_check() {
    local name="preview/$1" m=$2 p=$3 b=$4 out mx
    if ! clover -m "$m" --tokens "$p" --preview-block "$b" --dump-logits "$TMP/pv_a.bin" -ctk f32 -ctv f32 > /dev/null; then
        fail "$name" "$(why)"
        return
    fi
    if ! $TO "$PREVIEW_REF" "$m" "$p" "$b" "$TMP/pv_b.bin" -v 2> "$TMP/pv_ref.err"; then
        fail "$name" "preview_ref failed: $(first_line "$TMP/pv_ref.err")"
        return
    fi
    out=$("$CMP" "$TMP/pv_a.bin" "$TMP/pv_b.bin" $N_VOCAB 2>&1)
    mx=$(echo "$out" | sed -n 's/.* max \([^ ]*\) .*/\1/p')
    if [ -n "$mx" ] && python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= float(sys.argv[2]) else 1)" "$mx" "$PREVIEW_TOL"; then
        pass "$name (max $mx)"
    else
        fail "$name" "$out; limit max $PREVIEW_TOL; $(grep -o 'smallest.*' "$TMP/pv_ref.err")"
    fi
}

test_preview() {
    if [ ! -x "$PREVIEW_REF" ]; then
        fail preview "$PREVIEW_REF is missing (make build/preview_ref)"
        return
    fi
    local M=$((N_VOCAB - 1))   # build/gen's <|mask|> is the last id
    local P1=7 P2=7,300 P3 B1 B4 B8 B16 B32 m name rc rev core seed i out
    P3=$(python3 -c "import random; r = random.Random(21); print(','.join(str(r.randrange($M)) for _ in range(12)))")
    B1=12                                           # one row, no mask
    B4=12,$M,$M,$M                                  # a draft-self block: id_last and masks
    B8=5,$M,77,$M,$M,900,$M,3                       # masks and ids mixed
    B16=$(python3 -c "import random; r = random.Random(22); print(','.join(str(r.randrange($M)) for _ in range(16)))")
    B32=9$(printf ",$M%.0s" $(seq 31))              # a full 32-row block: id_last and 31 masks
    local prompts=("$P1" "$P2" "$P3") blocks=("$B1" "$B4" "$B8" "$B16" "$B32")
    local pnames=(p1 p2 p12) bnames=(b1 b4 b8 b16 b32)
    # every combination of the extras, one model each (a seed of its own), with a multi-row block
    # (the extras only act across rows); prompts and blocks rotate
    i=0
    for rc in "" --right-conv; do
        for rev in "" --reverse; do
            for core in 0 0.5 0.9 0.1; do
                seed=$((31 + i))
                m=$(model f32 "$seed" --arch clover_moe --mask $rc $rev --coreset "$core") || { fail preview "cannot generate the model"; return; }
                local pi=$(( i % 3 )) bi=$(( 1 + i % 4 ))
                name="f32 seed $seed ${rc:---no-right-conv} ${rev:---no-reverse} coreset $core ${pnames[$pi]} ${bnames[$bi]}"
                preview_check "$name" "$m" "${prompts[$pi]}" "${blocks[$bi]}"
                i=$((i + 1))
            done
        done
    done
    # everything at once, shifted logits (the logits are the same, only their reading changes) and
    # a block size of 8, with blocks up to 32 rows (a preview pass is not limited to block_size)
    m=$(model f32 51 --arch clover_moe --mask --right-conv --reverse --coreset 0.5 --shift-logits --block-size 8) || { fail preview "cannot generate the model"; return; }
    for pb in "0 0" "1 2" "2 1" "2 2" "2 3" "2 4"; do
        set -- $pb
        preview_check "f32 seed 51 all extras, shift-logits, block-size 8: ${pnames[$1]} ${bnames[$2]}" "$m" "${prompts[$1]}" "${blocks[$2]}"
    done
    # no extras: bidirectional attention, the causal conv over [ring | block], a forward scan from a
    # copy of S, plain top-k
    m=$(model f32 52 --arch clover_moe --mask) || { fail preview "cannot generate the model"; return; }
    preview_check "f32 seed 52 no extras: p12 b8" "$m" "$P3" "$B8"
    # threads and ubatch size do not change the preview pass (one batch, whatever -ub)
    m=$(model f32 51 --arch clover_moe --mask --right-conv --reverse --coreset 0.5 --shift-logits --block-size 8)
    name="preview/-t 1 -ub 512 vs -t 2 -ub 2: bit-identical (f32 seed 51, p12 b16)"
    if ! clover -m "$m" --tokens "$P3" --preview-block "$B16" --dump-logits "$TMP/pv_a.bin" -ctk f32 -ctv f32 -t 1 > /dev/null ||
        ! clover -m "$m" --tokens "$P3" --preview-block "$B16" --dump-logits "$TMP/pv_b.bin" -ctk f32 -ctv f32 -t 2 -tb 2 -ub 2 > /dev/null; then
        fail "$name" "$(why)"
    elif cmp -s "$TMP/pv_a.bin" "$TMP/pv_b.bin"; then
        pass "$name"
    else
        fail "$name" "$("$CMP" "$TMP/pv_a.bin" "$TMP/pv_b.bin" $N_VOCAB 2>&1)"
    fi
    m=$(model f32 52 --arch clover_moe --mask)
    # preview_ref's causal pass against clover --dump-logits: the committed state it builds is right
    name="preview/preview_ref causal logits == clover --dump-logits (f32 seed 52, p12)"
    if ! clover -m "$m" --tokens "$P3" --dump-logits "$TMP/pv_c.bin" -ctk f32 -ctv f32 > /dev/null; then
        fail "$name" "$(why)"
    elif ! $TO "$PREVIEW_REF" "$m" "$P3" "$B1" "$TMP/pv_b.bin" --causal "$TMP/pv_d.bin" 2> "$TMP/pv_ref.err"; then
        fail "$name" "preview_ref failed: $(first_line "$TMP/pv_ref.err")"
    elif out=$("$CMP" "$TMP/pv_c.bin" "$TMP/pv_d.bin" $N_VOCAB --median $PREVIEW_TOL --p99 $PREVIEW_TOL 2>&1); then
        pass "$name ($out)"
    else
        fail "$name" "$out"
    fi
}

# ------------------------------------------------------------------------------------------------
# draft-self, the checks of shared/notes/draft-self.md section 6 beyond group draft, on clover_moe
# models with several extras. A 3-layer model has no attention layer; with shift_logits its
# first draft comes from preview row 0, which then sees exactly what causal row 0 sees, so about
# one draft per round is accepted and the rest rejected: partial acceptance and rollback in most
# rounds. The other models accept (almost) nothing on their own, so test-only drafts cover
# acceptance there: --test-drafts truth (every draft must be accepted), random (text unchanged)
# and the relaxed rule with random drafts (partial acceptance).
DRAFT_PROMPT=1,2,3,4,5,6,7,8,9,10,11,12

# draft_models: sets DM_A (3 layers, shift), DM_B (3 layers, shift, reverse, coreset 0.5),
# DM_C (4 layers, right conv, reverse, coreset 0.9, block size 16)
draft_models() {
    DM_A=$(model q8_0 71 --arch clover_moe --mask --layers 3 --shift-logits) &&
        DM_B=$(model q8_0 72 --arch clover_moe --mask --layers 3 --shift-logits --reverse --coreset 0.5) &&
        DM_C=$(model q8_0 73 --arch clover_moe --mask --right-conv --reverse --coreset 0.9 --block-size 16)
}

# same_as_none NAME MODEL WANT_FILE ARGS... : clover --spec-type draft-self ARGS must print
# WANT_FILE (fails NAME otherwise); its stderr is left in $TMP/ds.err
same_as_none() {
    local name=$1 m=$2 want=$3
    shift 3
    if ! clover -m "$m" --tokens "$DRAFT_PROMPT" --temp 0 -ctk f32 -ctv f32 --spec-type draft-self "$@" > "$TMP/ds.txt"; then
        fail "$name" "$(why)"
        return 1
    fi
    cp "$TMP/err" "$TMP/ds.err"
    if ! cmp -s "$TMP/ds.txt" "$want"; then
        fail "$name" "$(text_diff "$TMP/ds.txt" "$want")"
        return 1
    fi
    return 0
}

stat_of() { sed -n "s/^$1 *= *//p" "$TMP/ds.err" | head -n 1; }   # stat_of n_accept -> 12
rounds_of() { sed -n 's/^mean accepted length.*(\([0-9]*\) rounds).*/\1/p' "$TMP/ds.err"; }

test_drafts() {
    draft_models || { fail drafts "cannot generate the models"; return; }
    local m tag n name ctx acc drf rounds args out
    # 1. exact rule == --spec-type none, every n_max, also into -c (the 3-layer models)
    for tag in A B C; do
        eval "m=\$DM_$tag"
        for ctx in 0 28; do
            [ "$tag" = C ] && [ "$ctx" = 28 ] && continue
            if ! clover -m "$m" --tokens "$DRAFT_PROMPT" -n 20 -c "$ctx" --temp 0 -ctk f32 -ctv f32 > "$TMP/ds.want"; then
                fail "drafts/$tag -c $ctx" "$(why)"
                continue
            fi
            for n in 1 2 3 7 15 31; do
                [ "$ctx" = 28 ] && [ "$n" != 3 ] && [ "$n" != 31 ] && continue
                [ "$tag" = C ] && [ "$n" != 3 ] && [ "$n" != 31 ] && continue
                name="drafts/model $tag exact rule, --spec-draft-n-max $n == none (-n 20 -c $ctx)"
                if same_as_none "$name" "$m" "$TMP/ds.want" -n 20 -c "$ctx" --spec-draft-n-max "$n"; then
                    acc=$(stat_of n_accept) drf=$(stat_of n_drafted)
                    # model A must really accept some drafts and reject others, or the rollback
                    # after a partial acceptance goes untested
                    if [ "$tag" = A ] && [ "$n" -gt 1 ] && ! { [ "${acc:-0}" -gt 0 ] && [ "${acc:-0}" -lt "${drf:-0}" ]; }; then
                        fail "$name" "expected partial acceptance: n_accept $acc of n_drafted $drf"
                    else
                        pass "$name ($acc of $drf accepted)"
                    fi
                fi
            done
        done
    done

    # several denoising steps, the p-min cut and the n-min rule change the drafts, never the text
    clover -m "$DM_B" --tokens "$DRAFT_PROMPT" -n 20 --temp 0 -ctk f32 -ctv f32 > "$TMP/ds.want" || fail "drafts/B" "$(why)"
    for args in "--spec-draft-steps 3" "--spec-draft-p-min 0.014 --spec-draft-n-min 2"; do
        name="drafts/model B exact rule, n_max 7 $args == none"
        # shellcheck disable=SC2086
        same_as_none "$name" "$DM_B" "$TMP/ds.want" -n 20 --spec-draft-n-max 7 $args &&
            pass "$name ($(stat_of n_accept) of $(stat_of n_drafted) accepted)"
    done

    # 2. the committed state equals plain decoding's after every round, bit for bit
    for tn in "A 3" "B 15" "C 3"; do
        set -- $tn
        tag=$1
        eval "m=\$DM_$tag"
        clover -m "$m" --tokens "$DRAFT_PROMPT" -n 16 --temp 0 -ctk f32 -ctv f32 > "$TMP/cs.want" || { fail "drafts/state $tag" "$(why)"; continue; }
        for n in $2; do
            name="drafts/model $tag --test-check-state, n_max $n"
            if same_as_none "$name" "$m" "$TMP/cs.want" -n 16 --spec-draft-n-max "$n" --test-check-state; then
                rounds=$(rounds_of)
                if [ -n "$rounds" ] && grep -q "^state check: $rounds rounds identical" "$TMP/ds.err"; then
                    pass "$name ($rounds rounds identical, $(stat_of n_accept) accepted)"
                else
                    fail "$name" "$(grep '^state check' "$TMP/ds.err") vs ${rounds:-?} rounds"
                fi
            fi
        done
    done
    # partial acceptance through the relaxed rule with random drafts (entropy 0), f16 KV rows
    name="drafts/model C --test-check-state, relaxed rule with random drafts, f16 cache"
    if clover -m "$DM_C" --tokens "$DRAFT_PROMPT" -n 16 --temp 0 --spec-type draft-self --spec-draft-n-max 7 \
        --test-drafts random --seed 5 --spec-accept-ratio 0.05 --spec-accept-delta 0 --test-check-state > /dev/null; then
        cp "$TMP/err" "$TMP/ds.err"
        rounds=$(rounds_of)
        if [ -n "$rounds" ] && grep -q "^state check: $rounds rounds identical" "$TMP/ds.err" && [ "$(stat_of n_relaxed)" -gt 0 ]; then
            pass "$name ($rounds rounds, $(stat_of n_relaxed) relaxed accepts)"
        else
            fail "$name" "$(grep '^state check' "$TMP/ds.err"); n_relaxed $(stat_of n_relaxed)"
        fi
    else
        fail "$name" "$(why)"
    fi

    # 3. true-continuation drafts: all accepted; random drafts: the text is unchanged
    for tn in "A 2 15" "C 7"; do
        set -- $tn
        tag=$1
        shift
        eval "m=\$DM_$tag"
        clover -m "$m" --tokens "$DRAFT_PROMPT" -n 20 --temp 0 -ctk f32 -ctv f32 > "$TMP/tr.want" || { fail "drafts/truth $tag" "$(why)"; continue; }
        for n in "$@"; do
            name="drafts/model $tag --test-drafts truth, n_max $n: every draft accepted"
            if same_as_none "$name" "$m" "$TMP/tr.want" -n 20 --spec-draft-n-max "$n" --test-drafts truth; then
                acc=$(stat_of n_accept) drf=$(stat_of n_drafted)
                if [ "${drf:-0}" -gt 0 ] && [ "$acc" = "$drf" ]; then pass "$name ($acc of $drf)"; else fail "$name" "n_accept $acc of n_drafted $drf"; fi
            fi
            name="drafts/model $tag --test-drafts random, n_max $n: text unchanged"
            same_as_none "$name" "$m" "$TMP/tr.want" -n 20 --spec-draft-n-max "$n" --test-drafts random &&
                pass "$name ($(stat_of n_accept) of $(stat_of n_drafted) accepted)"
        done
    done
    name="drafts/model A --test-drafts truth into -c 28: every draft accepted"
    if clover -m "$DM_A" --tokens "$DRAFT_PROMPT" -n 40 -c 28 --temp 0 -ctk f32 -ctv f32 > "$TMP/tr.want" &&
        same_as_none "$name" "$DM_A" "$TMP/tr.want" -n 40 -c 28 --spec-draft-n-max 7 --test-drafts truth; then
        acc=$(stat_of n_accept) drf=$(stat_of n_drafted)
        if [ "${drf:-0}" -gt 0 ] && [ "$acc" = "$drf" ]; then pass "$name ($acc of $drf)"; else fail "$name" "n_accept $acc of n_drafted $drf"; fi
    elif [ ! -s "$TMP/tr.want" ]; then
        fail "$name" "$(why)"
    fi

    # 3b. --spec-draft-adaptive drafts only as many tokens as pay, from measured times: whatever it
    # chooses, the exact rule prints plain decoding's text (300 tokens, before this model's first
    # end of generation); with true-continuation drafts, whose only cost is the verify batch, long
    # drafts pay (n_max 15), so it drafts, and every draft is accepted
    clover -m "$DM_A" --tokens "$DRAFT_PROMPT" -n 300 --temp 0 -ctk f32 -ctv f32 > "$TMP/ad.want" || fail "drafts/adaptive" "$(why)"
    for args in "--test-drafts truth" "--test-drafts random" ""; do
        for n in 3 15; do
            name="drafts/--spec-draft-adaptive${args:+ $args}, n_max $n: text unchanged"
            # shellcheck disable=SC2086
            same_as_none "$name" "$DM_A" "$TMP/ad.want" -n 300 --spec-draft-n-max "$n" --spec-draft-adaptive $args || continue
            acc=$(stat_of n_accept) drf=$(stat_of n_drafted)
            if [ "$args" = "--test-drafts truth" ] && ! { [ "${drf:-0}" -gt 0 ] && [ "$acc" = "$drf" ]; }; then
                fail "$name" "true drafts: n_accept $acc of n_drafted $drf (expected all accepted, some drafted)"
            else
                pass "$name ($acc of $drf accepted, $(rounds_of) rounds)"
            fi
        done
    done

    # 4. the relaxed rule: deterministic, and every logged relaxed acceptance satisfies it
    for args in "A --spec-accept-ratio 0.02 --spec-accept-delta 6.47" "C --spec-accept-ratio 0.05 --spec-accept-delta 0.5 --test-drafts random --seed 5"; do
        set -- $args
        tag=$1
        shift
        eval "m=\$DM_$tag"
        name="drafts/model $tag relaxed rule ($*): deterministic, every logged acceptance satisfies it"
        if ! clover -m "$m" --tokens "$DRAFT_PROMPT" -n 20 --temp 0 --spec-type draft-self --spec-draft-n-max 7 "$@" > "$TMP/rl1.txt"; then
            fail "$name" "$(why)"
            continue
        fi
        cp "$TMP/err" "$TMP/rl1.err"
        if ! clover -m "$m" --tokens "$DRAFT_PROMPT" -n 20 --temp 0 --spec-type draft-self --spec-draft-n-max 7 "$@" > "$TMP/rl2.txt"; then
            fail "$name" "$(why)"
        elif ! cmp -s "$TMP/rl1.txt" "$TMP/rl2.txt"; then
            fail "$name" "not deterministic: $(text_diff "$TMP/rl1.txt" "$TMP/rl2.txt")"
        elif out=$(python3 - "$TMP/rl1.err" "$@" <<'EOF'
import re, sys
err = open(sys.argv[1]).read()
args = sys.argv[2:]
ratio = float(args[args.index('--spec-accept-ratio') + 1])
delta = float(args[args.index('--spec-accept-delta') + 1])
lines = re.findall(r'^clover: relaxed accept: row (\d+) draft (\d+) target (\d+) ratio ([0-9.]+) entropy ([0-9.]+)$', err, re.M)
n_relaxed = int(re.search(r'^n_relaxed = (\d+)$', err, re.M).group(1))
# the printed ratio and entropy are rounded to 1e-3
bad = [l for l in lines if l[1] == l[2] or float(l[3]) < ratio - 5e-4 or float(l[3]) > 1 + 5e-4 or float(l[4]) > delta + 5e-4]
if len(lines) != n_relaxed or n_relaxed == 0 or bad:
    print('%d logged lines, n_relaxed %d, violations %s' % (len(lines), n_relaxed, bad[:3]))
    sys.exit(1)
print('%d relaxed acceptances, min ratio %.3f, max entropy %.3f' % (n_relaxed, min(float(l[3]) for l in lines), max(float(l[4]) for l in lines)))
EOF
        ); then
            pass "$name ($out)"
        else
            fail "$name" "$out"
        fi
    done
}

# accept_by_position ERR_FILE: the "accept by position" line of a draft-self run with --trace must be
# what its rounds add up to: a round that drafted m and accepted a counts positions 1..m as drafted
# and 1..a as accepted; the sums are n_drafted and n_accept. Prints the counts, or what is wrong.
accept_by_position() {
    python3 - "$1" <<'EOF'
import re, sys
err = open(sys.argv[1]).read()
n_max = int(re.search(r'^n_draft   = (\d+)$', err, re.M).group(1))
want_d, want_a = [0] * n_max, [0] * n_max
for d, a in re.findall(r'^round \d+ @pos \d+ .*: drafted (\d+) \(asked \d+.*\), accepted (\d+), ', err, re.M):
    for j in range(int(d)):
        want_d[j] += 1
        want_a[j] += j < int(a)
want = ' '.join('%d/%d' % x for x in zip(want_a, want_d))
bp = re.search(r'^accept by position = (.*) \(accepted/drafted, positions 1\.\.n_draft\)$', err, re.M)
stat = lambda k: int(re.search(r'^%s += (\d+)$' % k, err, re.M).group(1))
if not bp or bp.group(1) != want:
    print('accept by position %r, the --trace rounds give %r' % (bp.group(1) if bp else None, want)); sys.exit(1)
if sum(want_d) != stat('n_drafted') or sum(want_a) != stat('n_accept'):
    print('accept by position sums %d/%d, n_accept/n_drafted %d/%d' % (sum(want_a), sum(want_d), stat('n_accept'), stat('n_drafted'))); sys.exit(1)
print(want)
EOF
}

# The statistics (draft-self.md section 5): upstream's line formats, and their arithmetic. The
# number of generated tokens comes from llama.cpp (build/ref --greedy on the qwen35moe twin). Draft
# lines only for draft-self; its "accept by position" (accepted/drafted per draft position) must be
# what the --trace rounds add up to. No rate from a duration under 1 ms (speed n/a).
test_stats() {
    local m tw g name out spec trace
    m=$(model q8_0 73 --arch clover_moe --mask --right-conv --reverse --coreset 0.9 --block-size 16) &&
        tw=$(model q8_0 73 --arch qwen35moe) || { fail stats "cannot generate the models"; return; }
    if ! g=$(ref -m "$tw" --greedy "$DRAFT_PROMPT" 17); then
        fail stats "$(why)"
        return
    fi
    for spec in "none" "draft-self --spec-draft-n-max 7 --test-drafts truth" "draft-self --spec-draft-n-max 3" "draft-self --spec-draft-n-max 2 --test-drafts random"; do
        name="stats/--spec-type $spec -n 16"
        trace=--trace
        [ "$spec" = none ] && trace=
        # shellcheck disable=SC2086
        if ! clover -m "$m" --tokens "$DRAFT_PROMPT" -n 16 --temp 0 -ctk f32 -ctv f32 --spec-type $spec $trace > /dev/null; then
            fail "$name" "$(why)"
            continue
        fi
        if out=$(python3 - "$TMP/err" "$g" "$(eog_ids "$tw")" "$spec" 2>&1 <<'EOF'
import re, sys
err = open(sys.argv[1]).read()
gen = sys.argv[2].strip().split(','); eog = set(sys.argv[3].split(',')); spec = sys.argv[4]
problems = []
# upstream's formats: "encoded %4d tokens in %8.3f seconds, speed: %8.3f t/s", then the n_* lines
# (this project: "speed:      n/a" for a duration under 1 ms)
F = r'[ 0-9]{3}[0-9]+'; T = r'[ 0-9.]{8,}'; S = r'[ 0-9.]{8,} t/s|     n/a'
enc = re.search(r'^encoded (%s) tokens in (%s) seconds, speed: (%s)$' % (F, T, S), err, re.M)
dec = re.search(r'^decoded (%s) tokens in (%s) seconds, speed: (%s)$' % (F, T, S), err, re.M)
kv = dict(re.findall(r'^(n_draft|n_predict|n_drafted|n_accept|accept) +=  ?(\S+)$', err, re.M))
order = re.findall(r'^(encoded|decoded|n_draft |n_predict|n_drafted|n_accept |accept  )', err, re.M)
draft = spec != 'none'
if not enc or not dec: problems.append('encoded/decoded line missing or malformed')
if draft and len(kv) != 5: problems.append('n_draft..accept lines: found %s' % sorted(kv))
if not draft and sorted(kv) != ['n_predict']: problems.append('without draft-self only n_predict, found %s' % sorted(kv))
want = ['encoded', 'decoded', 'n_draft ', 'n_predict', 'n_drafted', 'n_accept ', 'accept  '] if draft else ['encoded', 'decoded', 'n_predict']
if order != want: problems.append('line order %s' % order)
for line in ('n_draft   = ', 'n_predict = ', 'n_drafted = ', 'n_accept  = ', 'accept    = ') if draft else ('n_predict = ',):
    if not re.search('^' + re.escape(line) + r'\S', err, re.M): problems.append('no line %r' % line)
for line in ('n_relaxed', 'mean accepted length', 'draft time', 'accept by position'):
    if draft != bool(re.search('^' + line, err, re.M)): problems.append('line %r %s' % (line, 'missing' if draft else 'printed without draft-self'))
if not problems:
    for m in (enc, dec):
        sp = m.group(3)[:-4] if m.group(3).endswith(' t/s') else m.group(3)
        for x in (m.group(2), sp):
            if x != '     n/a' and (not re.fullmatch(r' *[0-9]+\.[0-9]{3}', x) or (len(x) != 8 and x[0] == ' ')): problems.append('%r is not %%8.3f' % x)
        if (float(m.group(2)) > 0.001 if sp == '     n/a' else float(m.group(2)) < 0.001):
            problems.append('speed %r after %s seconds: n/a is for under 1 ms, and only then' % (sp, m.group(2)))
        if len(m.group(1)) < 4 or (len(m.group(1)) > 4 and m.group(1)[0] == ' '): problems.append('%r is not %%4d' % m.group(1))
    n_pred, n_drafted, n_acc = int(kv['n_predict']), int(kv.get('n_drafted', 0)), int(kv.get('n_accept', 0))
    acc = kv.get('accept', '0.000%')
    want_acc = 100.0 * n_acc / n_drafted if n_drafted else 0.0
    if acc != '%.3f%%' % want_acc: problems.append('accept %s != 100*%d/%d' % (acc, n_acc, n_drafted))
    # generated tokens: llama.cpp's greedy ids up to and including the first end-of-generation one
    n_gen = next((i + 1 for i, t in enumerate(gen) if t in eog), len(gen))
    if n_pred != n_gen: problems.append('n_predict %d != %d generated tokens' % (n_pred, n_gen))
    if int(dec.group(1)) != n_pred: problems.append('decoded %s != n_predict %d' % (dec.group(1), n_pred))
    if int(enc.group(1)) != 12: problems.append('encoded %s != 12 prompt tokens' % enc.group(1))
    for m, n in ((enc, int(enc.group(1))), (dec, n_pred)):
        if m.group(3) == '     n/a': continue
        t, sp = float(m.group(2)), float(m.group(3)[:-4])
        if t >= 0.002:   # the printed seconds are rounded to 1e-3: bound the speed
            lo, hi = n / (t + 5e-4) - 5e-4, n / (t - 5e-4) + 5e-4
            if not lo <= sp <= hi: problems.append('speed %s is not %d tokens / %s s' % (sp, n, t))
    if draft:
        if int(kv['n_draft']) != int(spec.split()[2]): problems.append('n_draft %s != the configured n_max' % kv['n_draft'])
        rounds = re.search(r'^mean accepted length = ([0-9.]+) tokens per round \((\d+) rounds\)$', err, re.M)
        if not rounds: problems.append('no mean accepted length line')
        else:
            r = int(rounds.group(2))
            if rounds.group(1) != '%.3f' % (n_pred / r): problems.append('mean accepted length %s != %d/%d' % (rounds.group(1), n_pred, r))
            # per round n_predict += a + 1 (unless an end-of-generation token cut the round)
            if n_gen == len(gen) and n_pred != n_acc + r: problems.append('n_predict %d != n_accept %d + rounds %d' % (n_pred, n_acc, r))
        if 'truth' in spec and not (n_drafted > 0 and n_acc == n_drafted): problems.append('truth drafts: %d of %d accepted' % (n_acc, n_drafted))
if problems:
    print('; '.join(problems)); sys.exit(1)
print('n_predict %s, n_drafted %s, n_accept %s, accept %s' % (kv['n_predict'], n_drafted, n_acc, acc) if draft else 'n_predict %s, no draft lines' % kv['n_predict'])
EOF
        ); then
            if [ -z "$trace" ]; then pass "$name ($out)"
            elif by=$(accept_by_position "$TMP/err"); then pass "$name ($out; by position $by)"
            else fail "$name" "$by"
            fi
        else
            fail "$name" "$out"
        fi
    done
    # the tiny Clover accepts some drafts at the first positions and fewer further on
    name="stats/tiny Clover: accept by position is what the --trace rounds add up to"
    if ! clover -m test/tiny/tiny-clover-q8_0.gguf -f test/tiny/prompt.txt -n 40 --temp 0 --spec-type draft-self --spec-draft-n-max 7 --trace > /dev/null; then
        fail "$name" "$(why)"
    elif by=$(accept_by_position "$TMP/err") && [ "${by%%/*}" -gt 0 ]; then
        pass "$name ($by)"
    else
        fail "$name" "${by:-no drafts accepted at position 1}"
    fi
    # a one-token prompt evaluates nothing before decoding: its encode time is nanoseconds, no rate
    name="stats/one-token prompt: encode speed n/a, decode speed a number"
    if ! clover -m "$m" --tokens 5 -n 3 --temp 0 > /dev/null; then
        fail "$name" "$(why)"
    elif grep -q '^encoded    1 tokens in    0\.000 seconds, speed:      n/a$' "$TMP/err" &&
        grep -Eq '^decoded    4 tokens in +[0-9.]+ seconds, speed: +([0-9]+\.[0-9]{3} t/s|n/a)$' "$TMP/err"; then
        pass "$name"
    else
        fail "$name" "$(grep -E '^(en|de)coded' "$TMP/err" | tr '\n' '|')"
    fi
    name="stats/--diffusion: n_predict, no draft lines"
    if ! clover -m "$m" --tokens "$DRAFT_PROMPT" -n 8 --diffusion > /dev/null; then
        fail "$name" "$(why)"
    elif grep -q '^n_predict = 8$' "$TMP/err" && ! grep -Eq '^(n_draft|n_drafted|n_accept|accept|n_relaxed|mean accepted|draft time)' "$TMP/err"; then
        pass "$name"
    else
        fail "$name" "$(grep -E '^(n_|accept|mean|draft)' "$TMP/err" | tr '\n' '|')"
    fi
}

# ------------------------------------------------------------------------------------------------
# --diffusion (shared/notes/clover.md section 4): it terminates, prints the prompt and new text,
# and its report "diffusion: B blocks, P passes, X passes per block, Y tokens per pass" adds up
# with n_predict. Threshold 0 unmasks every position in the first pass (P == B), so the first
# block must be the rows' argmax (the mask excluded) of one preview pass over block_size masks
# (clover --preview-block, itself checked by group preview) — with shift_logits, position 0 is
# predicted by the last committed row (the prompt's causal logits, llama.cpp's greedy token) and
# position j by block row j-1. Threshold 1 unmasks one position per pass (P == 8 per block).

# diffusion_report NAME N_MAX_TOKENS [EXPECT_PASSES_PER_BLOCK]: checks $TMP/df.err of a --diffusion
# run with block size 8; prints a summary or fails
diffusion_report() {
    python3 - "$TMP/df.err" "$@" <<'EOF'
import math, re, sys
err, name, n_max = open(sys.argv[1]).read(), sys.argv[2], int(sys.argv[3])
ppb_want = int(sys.argv[4]) if len(sys.argv) > 4 else None
B = 8
m = re.search(r'^diffusion: (\d+) blocks, (\d+) passes, ([0-9.]+) passes per block, ([0-9.]+) tokens per pass$', err, re.M)
n = re.search(r'^n_predict = (\d+)$', err, re.M)
dec = re.search(r'^decoded +(\d+) tokens', err, re.M)
if not m or not n or not dec:
    print('no diffusion / n_predict / decoded line'); sys.exit(1)
blocks, passes, n_pred = int(m.group(1)), int(m.group(2)), int(n.group(1))
p = []
if m.group(3) != '%.2f' % (passes / blocks if blocks else 0): p.append('passes per block %s != %d/%d' % (m.group(3), passes, blocks))
if m.group(4) != '%.2f' % (n_pred / passes if passes else 0): p.append('tokens per pass %s != %d/%d' % (m.group(4), n_pred, passes))
if int(dec.group(1)) != n_pred: p.append('decoded %s != n_predict %d' % (dec.group(1), n_pred))
if not (blocks <= passes <= blocks * B): p.append('%d passes for %d blocks of %d' % (passes, blocks, B))
if not (0 < n_pred <= n_max): p.append('n_predict %d not in 1..%d' % (n_pred, n_max))
# every block but the last is committed whole; the last may stop early (limit or end of generation)
if blocks != math.ceil(n_pred / B) and not (n_pred < n_max and blocks == n_pred // B + 1): p.append('%d blocks for %d tokens' % (blocks, n_pred))
if ppb_want is not None and passes != ppb_want * blocks: p.append('%d passes for %d blocks, expected %d per block' % (passes, blocks, ppb_want))
if p:
    print('; '.join(p)); sys.exit(1)
print('%d tokens, %d blocks, %d passes' % (n_pred, blocks, passes))
EOF
}

test_diffusion() {
    local M=$((N_VOCAB - 1)) m tw sh ids=$DRAFT_PROMPT name out blk want g
    m=$(model q8_0 81 --arch clover_moe --mask --block-size 8 --right-conv --reverse --coreset 0.5) &&
        sh=$(model q8_0 81 --arch clover_moe --mask --block-size 8 --right-conv --reverse --coreset 0.5 --shift-logits) &&
        tw=$(model q8_0 81 --arch qwen35moe) || { fail diffusion "cannot generate the models"; return; }
    # defaults (threshold 0.9), -n 20: 3 blocks of 8 (the last cut to 4), the prompt then new text
    name="diffusion/-n 20, default threshold: terminates, prints text, the report adds up"
    if ! clover -m "$m" --tokens "$ids" -n 20 --diffusion -ctk f32 -ctv f32 > "$TMP/df.txt" || ! cp "$TMP/err" "$TMP/df.err"; then
        fail "$name" "$(why)"
    elif ! ref -m "$tw" --detok "$ids" > "$TMP/df.prompt"; then
        fail "$name" "$(why)"
    elif ! cmp -s "$TMP/df.prompt" <(head -c "$(wc -c < "$TMP/df.prompt")" "$TMP/df.txt"); then
        fail "$name" "the output does not start with the prompt text"
    elif [ "$(wc -c < "$TMP/df.txt")" -le "$(wc -c < "$TMP/df.prompt")" ]; then
        fail "$name" "no text after the prompt"
    elif out=$(diffusion_report "$name" 20); then
        pass "$name ($out)"
    else
        fail "$name" "$out"
    fi
    # into -c: 30 - 12 = 18 positions left, blocks of 8, 8 and 2
    name="diffusion/into -c 30: stops at the context, the report adds up"
    if ! clover -m "$m" --tokens "$ids" -n -1 -c 30 --diffusion --diffusion-threshold 0.5 -ctk f32 -ctv f32 > /dev/null || ! cp "$TMP/err" "$TMP/df.err"; then
        fail "$name" "$(why)"
    elif out=$(diffusion_report "$name" 18); then
        pass "$name ($out)"
    else
        fail "$name" "$out"
    fi
    name="diffusion/threshold 1: one position per pass"
    if ! clover -m "$m" --tokens "$ids" -n 12 --diffusion --diffusion-threshold 1 -ctk f32 -ctv f32 > /dev/null || ! cp "$TMP/err" "$TMP/df.err"; then
        fail "$name" "$(why)"
    elif out=$(diffusion_report "$name" 12 8); then
        pass "$name ($out)"
    else
        fail "$name" "$out"
    fi
    # threshold 0: one pass per block, the first block is the argmax of one preview pass
    blk=$M$(printf ",$M%.0s" $(seq 7))
    local f shift
    for f in "$m" "$sh"; do
        shift=0
        [ "$f" = "$sh" ] && shift=1
        name="diffusion/threshold 0, -n 8 (shift_logits $shift): one pass, the argmax of the preview rows"
        if ! clover -m "$f" --tokens "$ids" --preview-block "$blk" --dump-logits "$TMP/df.bin" -ctk f32 -ctv f32 > /dev/null ||
            ! clover -m "$f" --tokens "$ids" -n 8 --diffusion --diffusion-threshold 0 -ctk f32 -ctv f32 > "$TMP/df.txt" || ! cp "$TMP/err" "$TMP/df.err"; then
            fail "$name" "$(why)"
            continue
        fi
        if ! out=$(diffusion_report "$name" 8 1); then
            fail "$name" "$out"
            continue
        fi
        if ! g=$(ref -m "$tw" --greedy "$ids" 1); then
            fail "$name" "$(why)"
            continue
        fi
        want=$(python3 - "$TMP/df.bin" $N_VOCAB "$M" "$shift" "$g" <<'EOF'
import array, sys
z = array.array('f'); z.frombytes(open(sys.argv[1], 'rb').read())
V, mask, shift, greedy = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == '1', sys.argv[5].strip()
def argmax(row):
    best = None
    for i, v in enumerate(row):
        if i != mask and (best is None or v > row[best]): best = i
    return best
rows = [z[r * V:(r + 1) * V] for r in range(len(z) // V)]
ids = [argmax(r) for r in rows]
if shift: ids = [int(greedy)] + ids[:-1]   # row j-1 predicts position j; the last committed row position 0
print(','.join(map(str, ids)))
EOF
        )
        if ! expected_text "$tw" "$ids" "$want" "$TMP/df.want"; then
            fail "$name" "ref --detok failed: $(first_line "$TMP/df.want.err")"
        elif cmp -s "$TMP/df.txt" "$TMP/df.want"; then
            pass "$name ($out; ids $want)"
        else
            fail "$name" "expected ids $want: $(text_diff "$TMP/df.txt" "$TMP/df.want")"
        fi
    done
}

# expect_error NAME PATTERN ARGS... : clover ARGS must exit 1 with exactly one stderr line that
# starts with "clover: error:" and matches PATTERN (extended regex, case-insensitive).
expect_error() {
    local name="errors/$1" pat=$2 rc n
    shift 2
    $TO "$CLOVER" "$@" > /dev/null 2> "$TMP/e.err" < /dev/null
    rc=$?
    n=$(wc -l < "$TMP/e.err")
    if [ "$rc" -ge 124 ]; then
        fail "$name" "exit status $rc (crash, signal or timeout): $(first_line "$TMP/e.err")"
    elif [ "$rc" -ne 1 ]; then
        fail "$name" "exit status $rc, expected 1: $(first_line "$TMP/e.err")"
    elif [ "$n" -ne 1 ]; then
        fail "$name" "$n lines on stderr, expected 1: $(head -n 3 "$TMP/e.err" | tr '\n' '|' | cut -c1-300)"
    elif ! head -n 1 "$TMP/e.err" | grep -q '^clover: error: '; then
        fail "$name" "stderr does not start with 'clover: error: ': $(first_line "$TMP/e.err")"
    elif ! grep -Eqi -- "$pat" "$TMP/e.err"; then
        fail "$name" "message does not match /$pat/: $(first_line "$TMP/e.err")"
    else
        pass "$name"
    fi
}

# expect_ok NAME OUT_PATTERN ERR_PATTERN ARGS... : clover ARGS must exit 0 without an error line, its
# stdout must match OUT_PATTERN and its stderr ERR_PATTERN (extended regexes; '' matches anything).
# The check is named GROUP/NAME (GROUP: errors unless set).
expect_ok() {
    local name="${GROUP:-errors}/$1" out_pat=$2 err_pat=$3 rc
    shift 3
    $TO "$CLOVER" "$@" > "$TMP/ok.out" 2> "$TMP/ok.err" < /dev/null
    rc=$?
    if [ "$rc" -ne 0 ]; then
        fail "$name" "exit status $rc, expected 0: $(grep -m 1 -v '^clover: memory:' "$TMP/ok.err" | cut -c1-300)"
    elif grep -q '^clover: error' "$TMP/ok.err"; then
        fail "$name" "exit 0 but an error line: $(grep -m 1 '^clover: error' "$TMP/ok.err")"
    elif ! grep -Eaq -- "$out_pat" "$TMP/ok.out"; then
        fail "$name" "stdout does not match /$out_pat/: $(head -c 120 "$TMP/ok.out" | tr '\n' ' ')"
    elif ! grep -Eaq -- "$err_pat" "$TMP/ok.err"; then
        fail "$name" "stderr does not match /$err_pat/: $(head -n 2 "$TMP/ok.err" | tr '\n' '|' | cut -c1-300)"
    else
        pass "$name"
    fi
}

# corrupt NAME PATTERN EDITS... : a copy of the q8_0 model edited by test/gguf_edit.py must fail to load
corrupt() {
    local name=$1 pat=$2 f="$TMP/bad.gguf"
    shift 2
    if ! $EDIT edit "$BASE" "$f" "$@" 2> "$TMP/edit.err"; then
        fail "errors/$name" "gguf_edit failed: $(tail -n 1 "$TMP/edit.err")"
        return
    fi
    expect_error "$name" "$pat" -m "$f" --tokens 1,2,3 --dump-logits "$TMP/bad.bin"
}

# damage NAME MODE N MODEL: N damaged copies of MODEL (MODE random: bytes changed before the data
# section; truncate: cut at N offsets spread over the file; truncate-head: at 0..N-1), each loaded by
# clover: exit 0, or exit 1 with one error line (warnings and the memory plan aside), within 60 s.
damage() {
    local name="errors/$1" out
    if out=$(python3 - "$CLOVER" "$4" "$TMP/damaged.gguf" "$2" "$3" <<'EOF' 2>&1
import random, subprocess, sys
clover, model, out, mode, n = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
data = open(model, 'rb').read()
sys.path.insert(0, 'test')
import gguf_edit
end = len(data) - len(gguf_edit.GGUF(model).data)   # the data section starts here
rng = random.Random(11)
bad = []
for i in range(n):
    if mode == 'random':
        d = bytearray(data)
        for _ in range(rng.choice([1, 1, 2, 3, 8])):
            d[rng.randrange(end)] = rng.choice([rng.randrange(256), 0, 0xff, 0x7f, 0x80])
    elif mode == 'truncate':
        d = data[:i * len(data) // n]
    else:
        d = data[:i]
    open(out, 'wb').write(d)
    try:
        r = subprocess.run([clover, '-m', out, '-p', 'hello world', '--tokenize'], capture_output=True, timeout=60)
    except subprocess.TimeoutExpired:
        bad.append('case %d: timeout' % i)
        continue
    err = [l for l in r.stderr.decode('utf-8', 'replace').splitlines() if not l.startswith(('clover: warning:', 'clover: memory:'))]
    ok = r.returncode == 0 or (r.returncode == 1 and len(err) == 1 and err[0].startswith('clover: error: '))
    if not ok:
        bad.append('case %d (%d bytes): exit %d, stderr %r' % (i, len(d), r.returncode, err[:2]))
if bad:
    print('%d bad: %s' % (len(bad), '; '.join(bad[:3])))
    sys.exit(1)
EOF
    ); then
        pass "$name"
    else
        fail "$name" "$out"
    fi
}

# Every row of README.md's table "Hostile and mistaken input" names a check (first column, after
# "errors/") that must have passed in this run.
readme_rows() {
    local name="errors/README table: every row is a passing check" out
    if out=$(python3 - README.md "$TMP/passed" <<'EOF'
import sys
lines = open(sys.argv[1], encoding='utf-8').read().split('\n')
passed = set(open(sys.argv[2], encoding='utf-8').read().split('\n'))
start = lines.index('## Hostile and mistaken input')
rows = []
for l in lines[start + 1:]:
    if l.startswith('## '):
        break
    if l.startswith('| ') and not l.startswith('| check') and not l.startswith('|---'):
        rows.append(l.split('|')[1].strip().strip('`'))
missing = [r for r in rows if 'errors/' + r not in passed]
if missing or not rows:
    print('not passed: ' + '; '.join(missing[:5]) if missing else 'no rows')
    sys.exit(1)
print('%d rows' % len(rows))
EOF
    ); then
        pass "$name ($out)"
    else
        fail "$name" "$out"
    fi
}

test_errors() {
    local m ids size off
    m=$(model q8_0) || { fail errors "cannot generate the model"; return; }
    BASE=$m
    ids=1,2,3,4,5,6,7,8

    # command line and prompt
    expect_error "missing model file" "cannot open|no such" -m "$TMP/nonexistent.gguf" --tokens 1,2
    expect_error "no -m" "model" --tokens 1,2
    expect_error "unknown flag" "unknown" -m "$m" --tokens 1,2 --bogus-flag
    expect_error "missing flag value" "needs|value" -m "$m" --tokens 1,2 -n
    expect_error "malformed integer (-n 12x)" "integer" -m "$m" --tokens 1,2 -n 12x
    expect_error "integer out of range (-t 0)" "range" -m "$m" --tokens 1,2 -t 0
    expect_error "malformed number (--temp abc)" "number|temp" -m "$m" --tokens 1,2 --temp abc
    expect_error "--spec-type bogus" "spec-type" -m "$m" --tokens 1,2 --spec-type bogus
    expect_error "-ctk q8_0" "ctk|cache|support" -m "$m" --tokens 1,2 -ctk q8_0
    expect_error "-ctv q4_0" "ctv|cache|support" -m "$m" --tokens 1,2 -ctv q4_0
    expect_error "two prompts" "once|prompt" -m "$m" --tokens 1,2 -p hello
    expect_error "empty prompt (-p '')" "empty" -m "$m" -p ""
    expect_error "missing prompt file" "prompt file|cannot open" -m "$m" -f "$TMP/nonexistent.txt"
    expect_error "prompt longer than -b" "batch|-b" -m "$m" --tokens "$ids" -b 4
    expect_error "prompt >= -c" "context|-c" -m "$m" --tokens 1,2,3,4 -c 4
    expect_error "-c beyond the model's context" "context" -m "$m" --tokens 1,2 -c 100000
    expect_error "token id out of range" "id|token" -m "$m" --tokens 1,2,$N_VOCAB
    expect_error "negative token id" "id|token" -m "$m" --tokens 1,-2,3
    expect_error "malformed token list" "token|id|expected" -m "$m" --tokens 1,2x,3
    expect_error "unwritable --dump-logits" "cannot write|writ" -m "$m" --tokens 1,2 --dump-logits "$TMP/no/such/dir/x.bin"
    expect_error "--spec-draft-adaptive with the relaxed rule" "needs the exact rule" -m "$m" -p hi --spec-type draft-self --spec-draft-adaptive --spec-accept-ratio 0.9 --spec-accept-delta 0.6
    touch "$TMP/afile"
    expect_error "--dump-tensors on a file" "not a folder" -m "$m" --tokens 1,2 --dump-logits "$TMP/x.bin" --dump-tensors "$TMP/afile/sub"
    expect_error "value out of range (-ub 0)" "range" -m "$m" --tokens 1,2 -ub 0
    expect_error "negative value (-c -5)" "range" -m "$m" --tokens 1,2 -c -5
    expect_error "number out of range (--top-p 2)" "top-p" -m "$m" --tokens 1,2 --top-p 2
    expect_error "empty --tokens" "empty" -m "$m" --tokens ""
    : > "$TMP/empty.txt"
    expect_error "empty prompt file" "empty" -m "$m" -f "$TMP/empty.txt"
    expect_error "model is a directory" "regular file" -m "$TMP" --tokens 1,2
    expect_error "endless prompt file (-f /dev/zero)" "longer than .* bytes" -m "$m" -f /dev/zero
    expect_error "prompt file is a directory" "cannot read" -m "$m" -f "$TMP"
    : > "$TMP/empty.gguf"
    expect_error "empty model file" "too small" -m "$TMP/empty.gguf" --tokens 1,2

    # prompts and limits that must work
    expect_ok "invalid UTF-8 prompt (-p)" $'^\xef\xbf\xbd\xef\xbf\xbd abc' '' -m "$m" -p $'\xff\xfe abc \xc3' -n 2 --temp 0
    expect_ok "invalid UTF-8 prompt file (-f)" $'^ok \xef\xbf\xbd stray' '' -m "$m" -f test/texts/invalid_utf8.txt -n 2 --temp 0
    expect_ok "-n 0: the prompt and one token" '^Hello world' '^n_predict = 1$' -m "$m" -p "Hello world" -n 0 --temp 0
    expect_ok "memory plan printed before allocating" '' '^clover: memory: weights .* KV cache .* GDN state .* scratch .* available$' -m "$m" --tokens 1,2 -n 1 --temp 0
    # hostile weights: every byte of the data section overwritten, so that every weight (f32) or
    # every block scale (q8_0) is NaN or infinite; the forward pass and the sampler must still run
    local hw t pat name
    for t in "f32 nan 0000c07f" "f32 inf 0000807f" "q8_0 nan ffff"; do
        read -r t name pat <<< "$t"
        hw="$TMP/hostile-$t-$name.gguf"
        if python3 -c '
import sys
sys.path.insert(0, "test")
import gguf_edit
src, dst, pat = sys.argv[1], sys.argv[2], bytes.fromhex(sys.argv[3])
d = bytearray(open(src, "rb").read())
start = len(d) - len(gguf_edit.GGUF(src).data)
n = (len(d) - start) // len(pat)
d[start:start + n * len(pat)] = pat * n
open(dst, "wb").write(d)' "$(model "$t")" "$hw" "$pat"; then
            expect_ok "every weight $name ($t file): greedy decoding" '^Hello' '' -m "$hw" -p "Hello" -n 3 --temp 0
            expect_ok "every weight $name ($t file): sampling" '^Hello' '' -m "$hw" -p "Hello" -n 3 --temp 0.8 --seed 1
        else
            fail "errors/every weight $name ($t file)" "cannot write the file"
        fi
    done

    local big
    if big=$(model q8_0 1 --ctx 262144); then
        expect_ok "-c 131072 on a model with context 262144" '' 'KV cache .*-c 131072' -m "$big" --tokens 1,2,3 -n 2 --temp 0 -c 131072
    else
        fail "errors/-c 131072" "cannot generate the model"
    fi
    if big=$(model q8_0 1 --ctx 1073741824); then
        expect_error "-c beyond free memory (-c 2^30)" "needs .* available; use a smaller -c" -m "$big" --tokens 1,2 -c 1073741824
        expect_error "-c 0 takes the model's 2^30 context: beyond free memory" "needs .* available" -m "$big" --tokens 1,2 -c 0
    else
        fail "errors/-c beyond free memory" "cannot generate the model"
    fi

    # damaged files
    size=$(wc -c < "$m")
    printf 'GGUX' > "$TMP/magic.gguf" && tail -c +5 "$m" >> "$TMP/magic.gguf"
    expect_error "bad magic" "magic|not a gguf" -m "$TMP/magic.gguf" --tokens 1,2
    corrupt "version 2" "version" --version 2
    local cut
    for cut in "0 to 0 bytes" "10 to 10 bytes" "30 to 30 bytes (in the metadata)" "1000 to 1000 bytes" \
        "$((size / 2)) in the middle of the data" "$((size - 1)) by its last byte"; do
        head -c "${cut%% *}" "$m" > "$TMP/trunc.gguf"
        expect_error "truncated ${cut#* }" "truncat|too small|past the end|remain|hold" -m "$TMP/trunc.gguf" --tokens 1,2
    done
    corrupt "huge key length" "truncat|corrupt|remain" --key-len 0x7fffffffffffffff
    corrupt "huge string value length" "truncat|corrupt|remain" --str-len general.architecture 0x7ffffffffffffff0
    corrupt "huge string array count" "strings|hold|corrupt" --arr-len tokenizer.ggml.tokens 0x7fffffffffffffff
    corrupt "huge integer array count (size overflows)" "overflow|truncat|corrupt" --arr-len tokenizer.ggml.token_type 0x4000000000000001
    corrupt "huge tensor count" "tensor|hold" --n-tensors 0x7fffffffffffffff
    corrupt "huge metadata count" "metadata|hold" --n-kv 0x100000000
    corrupt "unknown metadata value type" "type" --kv-type general.alignment 99
    corrupt "alignment not a power of two" "alignment" --set general.alignment u32 48
    corrupt "alignment 0" "alignment" --set general.alignment u32 0
    corrupt "tensor dims product overflows" "overflow" --tensor blk.0.attn_gate.weight dims 2147483647,2147483647,2147483647,2147483647
    corrupt "tensor with 5 dims" "dimension" --tensor output_norm.weight dims 256,1,1,1,1
    corrupt "tensor dim 0" "dimension" --tensor output_norm.weight dims 0
    corrupt "tensor data past EOF" "past the end|truncat" --tensor output_norm.weight offset 0x10000000000
    corrupt "tensors overlap" "overlap" --tensor output_norm.weight offset 0
    corrupt "misaligned tensor offset" "align" --tensor output_norm.weight add-offset 4
    corrupt "misaligned tensor data (general.alignment 1)" "misaligned" --set general.alignment u32 1 --set general.pad str ab
    corrupt "duplicate tensor name" "twice|duplicate" --tensor output_norm.weight name token_embd.weight
    corrupt "missing tensor" "missing" --drop-tensor blk.1.ssm_out.weight
    corrupt "row not a multiple of the block" "multiple|block" --tensor output.weight dims 250,1024
    corrupt "wrong shape (expert_feed_forward_length edited)" "shape" --set qwen35moe.expert_feed_forward_length u32 512
    corrupt "wrong shape (embedding_length edited)" "shape" --set qwen35moe.embedding_length u32 128
    corrupt "unsupported tensor type (Q2_K)" "does not support" --tensor blk.0.attn_gate.weight type 10
    corrupt "unknown tensor type id 99" "type" --tensor blk.0.attn_gate.weight type 99
    corrupt "vocab size not matching the embedding" "shape|vocab" --drop-last tokenizer.ggml.tokens --drop-last tokenizer.ggml.token_type
    corrupt "token_type array of the wrong length" "token_type" --drop-last tokenizer.ggml.token_type
    corrupt "integer key of type string" "type|integer" --set qwen35moe.block_count str four
    corrupt "block_count 0" "range|block_count" --set qwen35moe.block_count u32 0
    corrupt "eos id out of range" "range|eos" --set tokenizer.ggml.eos_token_id u32 5000
    corrupt "unsupported architecture" "architecture" --set general.architecture str llama
    corrupt "missing required key" "missing|embedding" --del qwen35moe.embedding_length
    corrupt "head_count not a multiple of head_count_kv" "multiple|head" --set qwen35moe.attention.head_count_kv u32 3
    corrupt "tokenizer model not gpt2" "gpt2|tokenizer" --set tokenizer.ggml.model str llama
    local tw
    tw=$(model q8_0 7 --arch clover_moe --mask) || { fail "errors/mask id" "cannot generate the model"; return; }
    BASE=$tw corrupt "mask id out of range" "mask" --set tokenizer.ggml.mask_token_id u32 5000
    BASE=$tw corrupt "mask id negative" "mask|range" --set tokenizer.ggml.mask_token_id i32 -5

    # random damage to the header, metadata and tensor infos, and truncation at many offsets: never
    # a crash, never more than one error line
    damage "fuzz: 300 random header corruptions exit 0 or 1, one error line" random 300 "$m"
    damage "truncated at 200 offsets spread over the file" truncate 200 "$m"
    damage "truncated at every offset of the first 512 bytes" truncate-head 512 "$m"

    readme_rows
}

# Options that are clamped, ignored or overridden say so: one "clover: warning:" line naming what
# is used instead, the run still works (exit 0, the prompt and new text on stdout), and the
# statistics show the value used. The sampler chain and the seed in effect are printed (a clock
# seed, given back with --seed, repeats the run); --help lists the defaults.

# expect_warning NAME WARNING STATS ARGS... : clover ARGS must exit 0 with no error line, stdout
# starting with "Hello" (the prompt), exactly one "clover: warning:" line on stderr, WARNING
# matching the text after "clover: warning: ", and a stderr line matching STATS ('' for none) (extended regexes).
expect_warning() {
    local name="warnings/$1" pat=$2 stat=$3 n
    shift 3
    $TO "$CLOVER" -p Hello "$@" > "$TMP/w.out" 2> "$TMP/w.err" < /dev/null
    local rc=$?
    n=$(grep -c '^clover: warning: ' "$TMP/w.err")
    if [ "$rc" -ne 0 ]; then
        fail "$name" "exit status $rc, expected 0: $(grep -m 1 '^clover: error' "$TMP/w.err" | cut -c1-300)"
    elif [ "$(head -c 5 "$TMP/w.out")" != Hello ]; then
        fail "$name" "stdout does not start with the prompt: $(head -c 80 "$TMP/w.out" | tr '\n' ' ')"
    elif [ "$n" -ne 1 ]; then
        fail "$name" "$n warning lines, expected 1: $(grep '^clover: warning' "$TMP/w.err" | tr '\n' '|' | cut -c1-300)"
    elif ! grep -Eq -- "^clover: warning: $pat" "$TMP/w.err"; then
        fail "$name" "warning does not match /$pat/: $(grep -m 1 '^clover: warning' "$TMP/w.err")"
    elif [ -n "$stat" ] && ! grep -Eq -- "$stat" "$TMP/w.err"; then
        fail "$name" "no stderr line matches /$stat/"
    else
        pass "$name"
    fi
}

test_warnings() {
    local m cm cores seed
    m=$(model q8_0) && cm=$(model q8_0 7 --arch clover_moe --mask) || { fail warnings "cannot generate the models"; return; }
    cores=$(getconf _NPROCESSORS_ONLN)
    local ds="--spec-type draft-self --temp 0 -n 6"
    # shellcheck disable=SC2086
    {
    expect_warning "-t above the cores online" "-t $((cores + 1)) is more than the $cores cores online; running $((cores + 1)) threads anyway" '' \
        -m "$m" -n 2 --temp 0 -t $((cores + 1))
    expect_warning "-tb above the cores online" "-tb $((cores + 1)) is more than the $cores cores online" '' -m "$m" -n 2 --temp 0 -t 1 -tb $((cores + 1))
    expect_warning "-ub 64 -b 16: -ub 16 used" "-ub 64 is larger than the logical batch -b 16; using -ub 16$" 'scratch .*\(-ub 16\)' \
        -m "$m" -n 2 --temp 0 -ub 64 -b 16
    expect_warning "--spec-draft-n-max 100 on a block of 32: 31 used" "--spec-draft-n-max 100: .* at most 31 drafts .*; using 31$" '^n_draft   = 31$' \
        -m "$cm" $ds --spec-draft-n-max 100
    expect_warning "--spec-draft-n-min above --spec-draft-n-max: n-max used" "--spec-draft-n-min 9 is above --spec-draft-n-max 4.*using --spec-draft-n-min 4$" \
        '^n_drafted = [1-9]' -m "$cm" $ds --spec-draft-n-max 4 --spec-draft-n-min 9
    expect_warning "--spec-accept-ratio without --spec-accept-delta: exact rule" "--spec-accept-ratio has no effect without --spec-accept-delta; using the exact rule$" \
        '^n_relaxed = 0$' -m "$cm" $ds --spec-accept-ratio 0.01
    expect_warning "--spec-accept-delta without --spec-accept-ratio: exact rule" "--spec-accept-delta has no effect without --spec-accept-ratio; using the exact rule$" \
        '^n_relaxed = 0$' -m "$cm" $ds --spec-accept-delta 100
    expect_warning "--spec-accept-ratio 1: exact rule" "--spec-accept-ratio 1 relaxes nothing.*using the exact rule$" '^n_relaxed = 0$' \
        -m "$cm" $ds --spec-accept-ratio 1 --spec-accept-delta 100
    expect_warning "--diffusion with --spec-type draft-self: block diffusion runs" "--spec-type draft-self has no effect with --diffusion" '^diffusion: [0-9]+ blocks' \
        -m "$cm" $ds --diffusion
    expect_warning "--trace without draft-self" "--trace has no effect without --spec-type draft-self: this run decodes plainly" '' -m "$cm" --temp 0 -n 4 --trace
    expect_warning "--spec-draft-adaptive without draft-self" "--spec-draft-adaptive has no effect without --spec-type draft-self" '' \
        -m "$cm" --temp 0 -n 4 --spec-draft-adaptive
    expect_warning "--spec-draft-n-max with --spec-type none" "--spec-draft-n-max has no effect without --spec-type draft-self" '' \
        -m "$cm" --temp 0 -n 4 --spec-type none --spec-draft-n-max 4
    expect_warning "--trace and --spec-draft-p-min with --diffusion: one line" "--spec-draft-p-min, --trace have no effect with --diffusion" '' \
        -m "$cm" -n 4 --diffusion --trace --spec-draft-p-min 0.5
    }
    # the card's command (run.sh) on the tiny Clover: no warning
    name="warnings/the model card's command: no warning"
    if ! clover -m test/tiny/tiny-clover-q8_0.gguf -f test/tiny/prompt.txt --spec-type draft-self --spec-draft-n-max 15 --spec-accept-ratio 0.9 \
        --spec-accept-delta 0.6 --temp 0 --top-k 1 --seed 42 -ctk bf16 -ctv bf16 -c 8192 -n 8 -b 256 -ub 256 -t 1 -tb 1 --flash-attn on > /dev/null; then
        fail "$name" "$(why)"
    elif grep -q '^clover: warning' "$TMP/err"; then
        fail "$name" "$(grep -m 1 '^clover: warning' "$TMP/err")"
    else
        pass "$name"
    fi

    # the sampler and the seed in effect; a clock seed, given back, repeats the run
    local name="warnings/sampling defaults printed: chain and a clock seed; --seed with it repeats the text"
    if ! clover -m "$m" -p Hello -n 12 > "$TMP/w1.out"; then
        fail "$name" "$(why)"
    elif ! seed=$(sed -n 's/^clover: sampler: top-k 40 -> top-p 0\.950 -> temp 0\.800 -> draw, seed \([0-9]*\) (from the clock; --seed repeats the run)$/\1/p' "$TMP/err") ||
        [ -z "$seed" ]; then
        fail "$name" "no sampler line with a clock seed: $(grep -m 1 sampler "$TMP/err")"
    elif ! clover -m "$m" -p Hello -n 12 --seed "$seed" > "$TMP/w2.out"; then
        fail "$name" "$(why)"
    elif ! grep -q "^clover: sampler: top-k 40 -> top-p 0\.950 -> temp 0\.800 -> draw, seed $seed\$" "$TMP/err"; then
        fail "$name" "--seed $seed: $(grep -m 1 sampler "$TMP/err")"
    elif ! cmp -s "$TMP/w1.out" "$TMP/w2.out"; then
        fail "$name" "--seed $seed: $(text_diff "$TMP/w2.out" "$TMP/w1.out")"
    else
        pass "$name (seed $seed)"
    fi
    GROUP=warnings expect_ok "greedy sampler printed" '^Hello' '^clover: sampler: greedy \(--temp 0 or --top-k 1\)' -m "$m" -p Hello -n 2 --top-k 1
    GROUP=warnings expect_ok "--top-k 0 --top-p 0.5 --temp 2 --seed 9 printed" '^Hello' '^clover: sampler: top-k all -> top-p 0\.500 -> temp 2\.000 -> draw, seed 9$' \
        -m "$m" -p Hello -n 2 --top-k 0 --top-p 0.5 --temp 2 --seed 9
    name="warnings/--help lists the defaults"
    if "$CLOVER" --help 2>&1 | grep -q 'default 0.8, 40,' && "$CLOVER" --help 2>&1 | grep -q 'drafts per round (default 16'; then
        pass "$name"
    else
        fail "$name" "$("$CLOVER" --help 2>&1 | grep -E 'temp|n-max' | tr '\n' '|')"
    fi
}

# The GPU kernels (clover.cu) executed on the CPU by test/cuda_emu.h (build/clover-emu, make cuda-emu):
# --check-ops on a tiny model of every weight type in the forward, reverse and random thread orders,
# and on a narrow model and one real-shape layer in the forward order;
# the planted bugs of test/gpu_mutants.sh (a missing or divergent __syncthreads, an off-by-one index,
# a wrong rounding, a delta rule scanning its rows the wrong way) must each make it fail; the CPU
# build refuses --check-ops in one line. The emulation enforces sm_90's launch limits (build/emu_limits:
# each launch at a limit runs, each one past it is one error line), and a -ub 8192 batch with 8 experts
# used (65,536 expert rows, one past gridDim.y's limit) launches within them (CLOVER_EMU_LAUNCH_ONLY:
# every launch checked, none run).
test_gpu() {
    local t o m out n last
    if [ ! -x "$EMU" ]; then
        echo "# test_gpu: skipped: $EMU is missing (make cuda-emu builds it with clang++; make test does when clang++ is installed)" >&2
        echo "SKIP gpu: $EMU is missing (no clang++?)"
        return
    fi
    for t in $TYPES; do
        m=$(model "$t") || { fail "gpu/$t" "cannot generate the model"; continue; }
        for o in forward reverse random; do
            out="$TMP/gpu-$t-$o.txt"
            CLOVER_EMU_ORDER=$o $TO "$EMU" -m "$m" --check-ops > "$out" 2> "$TMP/err"
            local rc=$?
            last=$(tail -n 1 "$out")
            n=$(grep -c ' PASS$' "$out")
            if [ "$rc" -eq 0 ] && [ "$last" = "check-ops: $n ops, $n passed, 0 failed" ] && [ "$n" -gt 0 ] && ! grep -q FAIL "$out"; then
                pass "gpu/$t/$o: $last"
            else
                fail "gpu/$t/$o" "exit $rc: $(grep -m 1 FAIL "$out" | tr -s ' ')$(first_line "$TMP/err") | $last"
            fi
        done
    done
    local c want rc n_ok=0 n_cases=0
    if [ -x build/emu_limits ]; then
        while read -r c want; do
            n_cases=$((n_cases + 1))
            out=$(build/emu_limits "$c" 2> "$TMP/err")
            rc=$?
            if [ "$want" = fits ] && [ "$rc" -eq 0 ] && [ "$out" = ok ] && [ ! -s "$TMP/err" ]; then n_ok=$((n_ok + 1))
            elif [ "$want" = exceeds ] && [ "$rc" -eq 1 ] && [ -z "$out" ] && [ "$(wc -l < "$TMP/err")" -eq 1 ] && grep -q '^clover: error: ' "$TMP/err"; then
                n_ok=$((n_ok + 1))
            else fail "gpu/emu-limits/$c" "want $want, got exit $rc: $out $(first_line "$TMP/err")"; fi
        done < <(build/emu_limits)
        [ "$n_ok" -gt 0 ] && [ "$n_ok" -eq "$n_cases" ] &&
            pass "gpu/emu-limits: $n_ok launches at and past sm_90's limits (grid, block, static and dynamic shared memory, opt-in) run or fail as sm_90 would"
    else
        fail gpu/emu-limits "build/emu_limits is missing (make build/emu_limits)"
    fi
    m=$(model q8_0 1 --experts-used 8 --ctx 16384) || { fail gpu/ub8192 "cannot generate the model"; return; }
    python3 -c "import random; r = random.Random(3); print(','.join(str(r.randrange($N_VOCAB)) for _ in range(8192)))" > "$TMP/p8192.ids"
    name="gpu/launch limits: a -ub 8192 batch with 8 of 8 experts used (65,536 expert rows) launches within them"
    if CLOVER_EMU_LAUNCH_ONLY=1 $TO "$EMU" -ngl 99 -m "$m" --tokens "$(cat "$TMP/p8192.ids")" -c 8200 -b 8192 -ub 8192 --dump-logits "$TMP/l8192.bin" > /dev/null 2> "$TMP/err" &&
       grep -q 'scratch .* (-ub 8192)' "$TMP/err"; then pass "$name"
    else fail "$name" "$(grep -m 1 error "$TMP/err")"; fi
    rm -f "$TMP/l8192.bin"
    # shapes the tiny models do not reach: a GDN state of 16 (the delta rule's dot tail past 64) and
    # n_embd 64 (narrow), and one real-shape layer (rows of 2048: 8 K-quant blocks a row, several
    # blocks a lane's slot, Q6_K rows of several blocks split at upload; expert rows of 512; head dim 256)
    for spec in "q8_0|--shape narrow" "q4_k_m|--shape real --layers 1 --experts 8 --vocab 4096"; do
        t=${spec%%|*}
        # shellcheck disable=SC2086
        m=$(model "$t" 1 ${spec#*|}) || { fail "gpu/$t ${spec#*|}" "cannot generate the model"; continue; }
        out="$TMP/gpu-shape.txt"
        $TO "$EMU" -m "$m" --check-ops > "$out" 2> "$TMP/err"
        local rc=$?
        last=$(tail -n 1 "$out")
        n=$(grep -c ' PASS$' "$out")
        if [ "$rc" -eq 0 ] && [ "$last" = "check-ops: $n ops, $n passed, 0 failed" ] && [ "$n" -gt 0 ]; then pass "gpu/$t ${spec#*|}: $last"
        else fail "gpu/$t ${spec#*|}" "exit $rc: $(grep -m 1 FAIL "$out" | tr -s ' ')$(first_line "$TMP/err") | $last"; fi
    done
    m=$(model q4_0 1 --layers 1) || { fail gpu/mutants "cannot generate the model"; return; }
    if out=$(FIRST_CATCH=1 CXX_EMU=${CXX_EMU:-clang++} test/gpu_mutants.sh "$m" 2>&1); then
        pass "gpu/mutants: every planted bug caught: $(echo "$out" | sed 's/: caught.*//' | tr '\n' ';')"
    else
        fail gpu/mutants "$(echo "$out" | grep -v ': caught' | tr '\n' ';' | cut -c1-300)"
    fi
    m=$(model q8_0 1 --layers 1)
    if ! ./clover -m "$m" --check-ops > /dev/null 2> "$TMP/err" && [ "$(wc -l < "$TMP/err")" -eq 1 ] && grep -q '^clover: error: --check-ops' "$TMP/err"; then
        pass "gpu/cpu-build: ./clover --check-ops is one error line"
    else
        fail gpu/cpu-build "$(first_line "$TMP/err")"
    fi
}

# The GPU forward pass (clover.cu) with -ngl 99 on build/clover-emu, every launch executed on the CPU
# (test/cuda_emu.h), in each of the emulation's thread orders (GPU_ORDERS): logits against the CPU
# build (F32 within 1e-4 in log-probability; other types within SPREAD, the float-order spread of
# llama.cpp's CPU variants, since the GPU sums in another order), prompts in ubatches of 1, 7 and 512
# rows bit-identical, the preview pass against the CPU's, exact draft-self == plain decoding on the
# GPU for several n_max with and without reverse scan and coreset, forced rollbacks (random drafts),
# diffusion, --dump-tensors against the CPU's, and the refusals (-ngl split, a GPU too small).
GPU_ORDERS=${GPU_ORDERS:-forward reverse random}
emu() { CLOVER_EMU_ORDER=$ORDER $TO "$EMU" -ngl 99 "$@" 2> "$TMP/err" && return 0; echo "clover-emu exit $?: $(first_line "$TMP/err")" > "$TMP/why"; return 1; }

# gpu_logits NAME MODEL TYPE ARGS...: GPU vs CPU logits of prompt 1 (its first 24 ids)
gpu_logits() {
    local name=$1 m=$2 t=$3 lim
    shift 3
    if ! clover -m "$m" --tokens "$GPU_PROMPT" --dump-logits "$TMP/gl_cpu.bin" "$@" > /dev/null ||
       ! emu -m "$m" --tokens "$GPU_PROMPT" --dump-logits "$TMP/gl_gpu.bin" "$@" > /dev/null; then
        fail "$name" "$(why)"
        return 1
    fi
    if [ "$t" = f32 ]; then lim="--max 1e-4 --argmax 1"
    else lim="--median ${SPREAD_MEDIAN[$t]} --max ${SPREAD_MAX[$t]} --argmax 0.9"; fi
    local out
    # shellcheck disable=SC2086
    if out=$("$CMP" "$TMP/gl_gpu.bin" "$TMP/gl_cpu.bin" $N_VOCAB $lim 2>&1); then pass "$name: $out"
    else fail "$name" "$out (limits $lim)"; fi
}

test_gpu_forward() {
    if [ ! -x "$EMU" ]; then
        echo "SKIP gpu_forward: $EMU is missing (no clang++?)"
        return
    fi
    prompts || { fail gpu_forward "cannot make the prompts"; return; }
    GPU_PROMPT=$(tr ',' '\n' < "$TMP/p1.ids" | head -n 12 | paste -sd, -)
    draft_models || { fail gpu_forward "cannot generate the models"; return; }
    local t m n name ORDER all ids
    for ORDER in $GPU_ORDERS; do
        # the emulation runs ~10 rows a second: every check in the forward order, a sample in the others
        all=; [ "$ORDER" = forward ] && all=1
        # logits, every weight type, and the f16/bf16 caches (their rounding of q and p takes the F16 /
        # BF16 weights' limits: a last-bit difference in a probability flips its rounding)
        for t in $TYPES; do
            [ -z "$all" ] && [ "$t" != f32 ] && [ "$t" != q4_k_m ] && continue
            m=$(model "$t") || { fail "gpu_forward/$ORDER/logits $t" "cannot generate the model"; continue; }
            gpu_logits "gpu_forward/$ORDER/logits $t vs the CPU build" "$m" "$t" -ctk f32 -ctv f32
        done
        m=$(model f32)
        [ -n "$all" ] && gpu_logits "gpu_forward/$ORDER/logits f32, f16 cache" "$m" f16 -ctk f16 -ctv f16
        [ -n "$all" ] && gpu_logits "gpu_forward/$ORDER/logits f32, bf16 cache" "$m" bf16 -ctk bf16 -ctv bf16
        # a row's logits do not depend on the batch around it: ubatches of 1 and 5 rows vs 512, bit for bit
        m=$(model q4_k_m)
        if emu -m "$m" --tokens "$GPU_PROMPT" --dump-logits "$TMP/gb512.bin" -ub 512 > /dev/null; then
            for n in 1 5; do
                [ -z "$all" ] && [ "$n" = 5 ] && continue
                name="gpu_forward/$ORDER/batch q4_k_m -ub $n == -ub 512, bit for bit"
                if emu -m "$m" --tokens "$GPU_PROMPT" --dump-logits "$TMP/gb$n.bin" -ub "$n" > /dev/null && cmp -s "$TMP/gb$n.bin" "$TMP/gb512.bin"; then pass "$name"
                else fail "$name" "$(why)$("$CMP" "$TMP/gb$n.bin" "$TMP/gb512.bin" $N_VOCAB 2>&1)"; fi
            done
        else fail "gpu_forward/$ORDER/batch" "$(why)"; fi
        # every matrix Q4_K (token_embd and ssm_alpha/beta too, an F32 router), 2 of 4 experts, vocabulary
        # 512, 40 ids in one batch, two seeds: the GPU computes each row of a batch as a decode step,
        # which is the CPU's order with -ub 1 (llama.cpp's too), so it is held to F32's limits against
        # that. (The CPU's 40-row batch takes llama.cpp's batch kernels: on these seeds their float order
        # moves the Q8_K rounding of a SwiGLU row, and its logits leave its -ub 1's by a median of 3e-2
        # to 5e-2, as llama.cpp's own do; see test_batch.)
        for n in 6 7; do
            [ -n "$all" ] || continue
            name="gpu_forward/$ORDER/q4_k 40-row batch, seed $n, == the CPU's -ub 1 within 1e-4"
            m=$(model q4_k "$n" --experts 4 --vocab 512) || { fail "$name" "cannot generate the model"; continue; }
            ids=$(python3 -c "import random; r = random.Random($n); print(','.join(str(r.randrange(512)) for _ in range(40)))")
            if clover -m "$m" --tokens "$ids" --dump-logits "$TMP/gq_cpu.bin" -ctk f32 -ctv f32 -ub 1 > /dev/null &&
               emu -m "$m" --tokens "$ids" --dump-logits "$TMP/gq_gpu.bin" -ctk f32 -ctv f32 > /dev/null; then
                if out=$("$CMP" "$TMP/gq_gpu.bin" "$TMP/gq_cpu.bin" 512 --max 1e-4 --argmax 1 2>&1); then pass "$name: $out"
                else fail "$name" "$out"; fi
            else fail "$name" "$(why)"; fi
        done
        # the preview pass vs the CPU's, with the clover_moe extras
        m=$(model f32 51 --arch clover_moe --mask --right-conv --reverse --coreset 0.5 --shift-logits --block-size 8)
        gpu_logits "gpu_forward/$ORDER/preview f32, right conv, reverse scan, coreset" "$m" f32 -ctk f32 -ctv f32 --preview-block 3,4,5,0,0,0,0,0
        # exact draft-self == plain decoding on the GPU; model A accepts some drafts and rejects others,
        # so the rollback (restore, replay of the logged GDN rows) runs on the device; B has the reverse
        # scan and coreset, C the right conv too
        for tag in A B C; do
            [ -z "$all" ] && [ "$tag" != A ] && continue
            eval "m=\$DM_$tag"
            if ! emu -m "$m" --tokens "$DRAFT_PROMPT" -n 8 --temp 0 -ctk f32 -ctv f32 > "$TMP/gd.want"; then
                fail "gpu_forward/$ORDER/drafts $tag" "$(why)"
                continue
            fi
            local ns=3   # n_max: all four on model A in the forward order, 7 on B and C, 3 on A otherwise
            [ -n "$all" ] && ns="1 3 7 15" && [ "$tag" != A ] && ns=7
            for n in $ns; do
                name="gpu_forward/$ORDER/drafts model $tag exact rule, n_max $n == none on the GPU"
                if emu -m "$m" --tokens "$DRAFT_PROMPT" -n 8 --temp 0 -ctk f32 -ctv f32 --spec-type draft-self --spec-draft-n-max "$n" > "$TMP/gd.txt" &&
                   cmp -s "$TMP/gd.txt" "$TMP/gd.want"; then pass "$name ($(sed -n 's/^n_accept *= *//p' "$TMP/err") of $(sed -n 's/^n_drafted *= *//p' "$TMP/err") accepted)"
                else fail "$name" "$(why)$(text_diff "$TMP/gd.txt" "$TMP/gd.want")"; fi
            done
        done
        # the decode step's graph stays fused: at most 69 kernels and copies on the 4-layer q8_0 model
        # (3 GDN layers of 17, an attention layer of 15, the first norm, the head, the argmax)
        if [ -n "$all" ]; then
            name="gpu_forward/$ORDER/graph: a q8_0 decode step is at most 69 kernels and copies"
            if emu -m "$(model q8_0)" --tokens "$GPU_PROMPT" -n 2 --temp 0 > /dev/null; then
                n=$(sed -n 's/^clover: GPU decode step: one CUDA graph of \([0-9]*\) .*/\1/p' "$TMP/err")
                if [ -n "$n" ] && [ "$n" -le 69 ]; then pass "$name ($n)"; else fail "$name" "${n:-no graph}"; fi
            else fail "$name" "$(why)"; fi
        fi
        name="gpu_forward/$ORDER/drafts model C random drafts (rollbacks) == none"
        if emu -m "$DM_C" --tokens "$DRAFT_PROMPT" -n 8 --temp 0 -ctk f32 -ctv f32 > "$TMP/gd.want" &&
           emu -m "$DM_C" --tokens "$DRAFT_PROMPT" -n 8 --temp 0 -ctk f32 -ctv f32 --spec-type draft-self --spec-draft-n-max 7 --test-drafts random --seed 3 > "$TMP/gd.txt" &&
           cmp -s "$TMP/gd.txt" "$TMP/gd.want"; then pass "$name"
        else fail "$name" "$(why)$(text_diff "$TMP/gd.txt" "$TMP/gd.want")"; fi
        # GPU text == CPU text: the trained tiny model (real drafts accepted), and diffusion (blocks of 4)
        m=$(model f32 53 --arch clover_moe --mask --reverse --coreset 0.5 --block-size 4)
        for args in "test/tiny/tiny-clover-f32.gguf|-f test/tiny/prompt.txt -n 24 --spec-type none" \
                    "test/tiny/tiny-clover-f32.gguf|-f test/tiny/prompt.txt -n 24 --spec-type draft-self --spec-draft-n-max 15" \
                    "$m|--tokens $DRAFT_PROMPT -n 8 --diffusion"; do
            local mm=${args%%|*} flags=${args#*|}
            name="gpu_forward/$ORDER/text ${mm##*/} $flags: GPU == CPU"
            # shellcheck disable=SC2086
            if clover -m "$mm" --temp 0 $flags > "$TMP/gt.want" && emu -m "$mm" --temp 0 $flags > "$TMP/gt.txt" && cmp -s "$TMP/gt.txt" "$TMP/gt.want"; then
                # plain decoding runs each step as one captured CUDA graph (replayed at every position)
                if [[ "$flags" == *none* ]] && ! grep -q '^clover: GPU decode step: one CUDA graph of [0-9]* ' "$TMP/err"; then
                    fail "$name" "no CUDA graph for the decode step: $(first_line "$TMP/err")"
                else pass "$name$(sed -n 's/^clover: GPU decode step: one CUDA graph of \([0-9]*\) .*/ (decode step: a graph of \1 kernels and copies)/p' "$TMP/err")"; fi
            else fail "$name" "$(why)$(text_diff "$TMP/gt.txt" "$TMP/gt.want")"; fi
        done
    done
    # --dump-tensors on the GPU against the CPU's, name by name (test/dumpcmp.py, F32: 1e-4 of each
    # tensor's largest value): the GPU writes every name the CPU writes and no other (dumpcmp fails on
    # a name either side lacks); a prompt and 3 decode steps, and a preview pass with the extras; and
    # the comparison must fail against another model's dumps
    local d=$TMP/gdump
    m=$(model f32)
    for args in "f32|$m|--tokens $GPU_PROMPT -n 3" "preview|$(model f32 51 --arch clover_moe --mask --right-conv --reverse --coreset 0.5 --shift-logits --block-size 8)|--tokens 1,2,3 --preview-block 3,4,5,0,0,0,0,0 --dump-logits $TMP/gdump.bin"; do
        local tag=${args%%|*} rest=${args#*|}
        local mm=${rest%%|*} flags=${rest#*|}
        name="gpu_forward/dumps $tag: GPU --dump-tensors == CPU's, every name, within 1e-4"
        rm -rf "$d/$tag-cpu" "$d/$tag-gpu"
        # shellcheck disable=SC2086
        if clover -m "$mm" --temp 0 -ctk f32 -ctv f32 $flags --dump-tensors "$d/$tag-cpu" > /dev/null &&
           emu -m "$mm" --temp 0 -ctk f32 -ctv f32 $flags --dump-tensors "$d/$tag-gpu" > /dev/null &&
           out=$(python3 test/dumpcmp.py "$d/$tag-gpu" "$d/$tag-cpu" --tol 1e-4 2>&1); then pass "$name: $(echo "$out" | tail -n 1)"
        else fail "$name" "$(why)$(echo "$out" | tail -n 3 | tr '\n' ' ')"; fi
    done
    name="gpu_forward/dumps: the comparison fails against another model's CPU dumps"
    if clover -m "$(model f32 2)" --tokens "$GPU_PROMPT" -n 3 --temp 0 -ctk f32 -ctv f32 --dump-tensors "$d/other" > /dev/null &&
       ! python3 test/dumpcmp.py "$d/f32-gpu" "$d/other" --tol 1e-4 --skip . > "$TMP/gdneg.txt" 2>&1 && grep -q ' disagree' "$TMP/gdneg.txt"; then
        pass "$name ($(grep -m 1 ' disagree' "$TMP/gdneg.txt" | cut -c1-100))"
    else fail "$name" "$(why)dumpcmp.py passed"; fi

    # refusals: one line, exit 1 (-c 2^30: a KV cache of 512 GiB, more than any GPU has)
    m=$(model q8_0 1 --ctx 1073741824)
    for args in "-ngl 2|splitting" "-ngl 99 -c 1073741824|smaller -c or -ub"; do
        local flags=${args%%|*} want=${args#*|}
        name="gpu_forward/refused: $flags"
        # shellcheck disable=SC2086
        if ! $TO "$EMU" -m "$m" -p hello -n 4 $flags > /dev/null 2> "$TMP/err" &&
           [ "$(grep -c '^clover: error:' "$TMP/err")" -eq 1 ] && grep -q -- "$want" "$TMP/err"; then pass "$name: $(grep '^clover: error' "$TMP/err" | cut -c1-120)"
        else fail "$name" "$(first_line "$TMP/err")"; fi
    done
}

# Inputs the fuzzers (make fuzz) once crashed on, replayed through clover: GGUF files must load or be
# rejected with one error line; tokenizer inputs are prompt files that must tokenize and generate.
test_regressions() {
    local f m rc n=0
    m=$(model q8_0 1 --layers 1) || { fail regressions "cannot generate the model"; return; }
    for f in test/fuzz-regressions/gguf/*; do
        [ -f "$f" ] || continue
        $TO "$CLOVER" -m "$f" -p "hello world" -n 1 --temp 0 > /dev/null 2> "$TMP/r.err" < /dev/null
        rc=$?
        grep -v '^clover: warning:\|^clover: memory:' "$TMP/r.err" > "$TMP/r.err1"
        if [ "$rc" -eq 0 ] || { [ "$rc" -eq 1 ] && [ "$(wc -l < "$TMP/r.err1")" -eq 1 ] && grep -q '^clover: error: ' "$TMP/r.err1"; }; then
            n=$((n + 1))
        else
            fail "regressions/gguf/$(basename "$f")" "exit $rc: $(head -n 3 "$TMP/r.err1" | tr '\n' '|' | cut -c1-300)"
        fi
    done
    for f in test/fuzz-regressions/tokenizer/*; do
        [ -f "$f" ] || continue
        # generate only when the prompt is not empty and fits the model's context
        if clover -m "$m" -f "$f" --tokenize > "$TMP/r.ids" &&
            { [ "$(tr ',' '\n' < "$TMP/r.ids" | grep -c .)" -eq 0 ] || [ "$(tr ',' '\n' < "$TMP/r.ids" | wc -l)" -ge 4000 ] ||
              clover -m "$m" -f "$f" -n 1 --temp 0 -c 0 -b 4096 > /dev/null; }; then
            n=$((n + 1))
        else
            fail "regressions/tokenizer/$(basename "$f")" "$(why)"
        fi
    done
    pass "regressions: $n fuzzer inputs (test/fuzz-regressions/) load or are rejected cleanly"
}

# ------------------------------------------------------------------------------------------------
# The tiny trained Clover of test/tiny/ against the references its PyTorch implementation
# (test/train/model.py, written from the notes, not from clover.c) computed in float64 from the
# weights in each file (test/train/refs.py; `make tiny-clover-refs` recomputes them where torch is
# installed): held-out text, causal logits of every position and preview passes (draft-self blocks
# [id_last, MASK x n], a mixed 32-row block, 31 masks after a 1-token prompt). Limits on
# max |delta log-softmax| per row (build/cmp): F32 1e-4 on every row. Q8_0: the reference rounds
# each activation row entering a Q8_0 matrix as llama.cpp's CPU path does, so most rows agree to
# ~1e-6 too, but a float64 value landing on the other side of a rounding boundary than clover's
# float32 one moves a row by ~1e-3: median 1e-4, every row 1e-2.
TINY=test/tiny
TINY_VOCAB=3072
#        type    median  max
TINY_TOL="
         f32     1e-4    1e-4
         q8_0    1e-4    1e-2
"
declare -A TMED TMAX
while read -r t m x; do [ -n "$t" ] && TMED[$t]=$m TMAX[$t]=$x; done <<< "$TINY_TOL"

# tiny_cmp NAME A.bin REF.bin TYPE: max and median of |delta log-softmax| within TINY_TOL
tiny_cmp() {
    local name=$1 a=$2 b=$3 t=$4 out mx
    if ! out=$("$CMP" "$a" "$b" $TINY_VOCAB --median "${TMED[$t]}" 2>&1); then
        fail "$name" "$out (limits: median ${TMED[$t]}, max ${TMAX[$t]})"
        return
    fi
    mx=$(echo "$out" | sed -n 's/.* max \([^ ]*\) .*/\1/p')
    if [ -n "$mx" ] && python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= float(sys.argv[2]) else 1)" "$mx" "${TMAX[$t]}"; then
        pass "$name ($out)"
    else
        fail "$name" "$out (limits: median ${TMED[$t]}, max ${TMAX[$t]})"
    fi
}

test_tiny() {
    local name t p b f m drops ids acc
    if [ ! -f "$TINY/refs/manifest.tsv" ] || [ ! -f "$TINY/tiny-clover-f32.gguf" ]; then
        fail tiny "$TINY/ has no model or references (make tiny-clover)"
        return
    fi
    m=$TINY/tiny-clover-f32.gguf
    # tokenizer: clover and llama.cpp against the Python tokenizer's ids (test/train/bpe.py)
    ids=$(cat "$TINY/refs/sample.ids")
    python3 -c 'import sys; s = open(sys.argv[1]).read(); open(sys.argv[2], "w").write(s[:-1])' "$TINY/refs/sample.txt" "$TMP/tiny-sample.txt"
    if ! clover -m "$m" --tokenize -f "$TINY/refs/sample.txt" > "$TMP/tiny.ids"; then
        fail "tiny/tokenizer/clover" "$(why)"
    elif [ "$(cat "$TMP/tiny.ids")" = "$ids" ]; then
        pass "tiny/tokenizer/clover == bpe.py on held-out text ($(tr ',' '\n' <<< "$ids" | wc -l) tokens)"
    else
        fail "tiny/tokenizer/clover" "clover $(cut -c1-120 "$TMP/tiny.ids") vs bpe.py $(cut -c1-120 <<< "$ids")"
    fi
    # llama.cpp reads the causal part: the file as qwen35moe without the clover_moe extras (stored last)
    drops=$($EDIT tensors "$m" | awk '$1 ~ /_rev|ssm_conv1d_right/ {printf "--drop-tensor %s ", $1}')
    for t in f32 q8_0; do
        $EDIT edit "$TINY/tiny-clover-$t.gguf" "$TMP/tiny-twin-$t.gguf" --arch qwen35moe $drops > /dev/null 2>&1 ||
            { fail "tiny/llama.cpp/$t" "gguf_edit failed"; continue; }
    done
    if ! ref -m "$TMP/tiny-twin-f32.gguf" --tokenize "$TMP/tiny-sample.txt" > "$TMP/tiny.ids"; then
        fail "tiny/tokenizer/llama.cpp" "$(why)"
    elif [ "$(cat "$TMP/tiny.ids")" = "$ids" ]; then
        pass "tiny/tokenizer/llama.cpp == bpe.py on held-out text"
    else
        fail "tiny/tokenizer/llama.cpp" "llama.cpp $(cut -c1-120 "$TMP/tiny.ids") vs bpe.py $(cut -c1-120 <<< "$ids")"
    fi
    # clover vs the PyTorch references, every case of the manifest
    while IFS=$'\t' read -r name t p b f; do
        [ -n "$name" ] || continue
        if [ "$b" = "-" ]; then
            clover -m "$TINY/tiny-clover-$t.gguf" --tokens "$p" --dump-logits "$TMP/tiny.bin" -ctk f32 -ctv f32 > /dev/null
        else
            clover -m "$TINY/tiny-clover-$t.gguf" --tokens "$p" --preview-block "$b" --dump-logits "$TMP/tiny.bin" -ctk f32 -ctv f32 > /dev/null
        fi || { fail "tiny/$t/$name" "$(why)"; continue; }
        tiny_cmp "tiny/$t/$name vs pytorch" "$TMP/tiny.bin" "$TINY/refs/$f" "$t"
        if [ "$b" = "-" ]; then   # llama.cpp's causal logits vs the same reference
            if ref -m "$TMP/tiny-twin-$t.gguf" --logits "$p" "$TMP/tiny-ref.bin" > /dev/null; then
                tiny_cmp "tiny/$t/$name: llama.cpp vs pytorch" "$TMP/tiny-ref.bin" "$TINY/refs/$f" "$t"
            else
                fail "tiny/$t/$name: llama.cpp" "$(why)"
            fi
        fi
    done < "$TINY/refs/manifest.tsv"
    # draft-self on held-out text: the exact rule prints plain greedy decoding's text and accepts drafts
    for t in f32 q8_0; do
        m=$TINY/tiny-clover-$t.gguf
        name="tiny/$t/draft-self --spec-draft-n-max 7 == greedy and accepts drafts"
        if ! clover -m "$m" -f "$TINY/refs/sample.txt" -n 64 --temp 0 > "$TMP/tiny.want" ||
            ! clover -m "$m" -f "$TINY/refs/sample.txt" -n 64 --temp 0 --spec-type draft-self --spec-draft-n-max 7 > "$TMP/tiny.got"; then
            fail "$name" "$(why)"
        elif ! cmp -s "$TMP/tiny.got" "$TMP/tiny.want"; then
            fail "$name" "$(text_diff "$TMP/tiny.got" "$TMP/tiny.want")"
        else
            acc=$(sed -n 's/^accept *= *\([0-9.]*\)%.*/\1/p' "$TMP/err")
            if [ -n "$acc" ] && python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) >= 10 else 1)" "$acc"; then
                pass "$name (accept $acc%)"
            else
                fail "$name" "accept ${acc:-?}% < 10%"
            fi
        fi
    done
}

# ------------------------------------------------------------------------------------------------
# Flash attention (-fa on|off|auto, llama.cpp's default auto = on): clover computes what ggml's CPU
# flash-attention op computes on each of its paths (one row at a time; tiled for a prompt batch of
# >= 64 rows with an F16 K and V, an F32 cache being cast to F16; the keys split over the -t threads
# for one row over >= 512 cache cells), compared with llama.cpp run with the same -ctk/-ctv/-fa/-ub/-t.

# flash_logits NAME TYPE MODEL PROMPT ARGS...: clover --dump-logits vs build/ref --logits, both with ARGS
flash_logits() {
    local name=$1 t=$2 m=$3 p=$4
    shift 4
    if ! clover -m "$m" --tokens "$(cat "$TMP/$p.ids")" --dump-logits "$TMP/fa_a.bin" "$@" > /dev/null ||
        ! ref -m "$m" --logits "@$TMP/$p.ids" "$TMP/fa_b.bin" "$@" > /dev/null; then
        fail "$name" "$(why)"
    else
        check_logits "$name" "$t" "$TMP/fa_a.bin" "$TMP/fa_b.bin" -m "$m" --logits "@$TMP/$p.ids" "$TMP/theirs_ref.bin" "$@"
    fi
}

# flash_greedy NAME MODEL IDS N "CLOVER ARGS" "REF ARGS": clover -n N prints the prompt and llama.cpp's
# greedy continuation byte for byte (against the reference variant only: texts are not compared
# within a spread)
flash_greedy() {
    local name=$1 m=$2 ids=$3 n=$4 g
    local -a ca ra
    read -r -a ca <<< "$5"
    read -r -a ra <<< "$6"
    if [ "$VARIANT" != "$REFERENCE" ]; then
        echo "# skipped $name: greedy texts with flash attention are compared against $REFERENCE only"
    elif ! g=$(ref -m "$m" --greedy "$ids" $((n + 1)) "${ra[@]}"); then
        fail "$name" "$(why)"
    elif ! expected_text "$m" "$ids" "$g" "$TMP/fa_gt.want"; then
        fail "$name" "ref --detok failed: $(first_line "$TMP/fa_gt.want.err")"
    elif ! clover -m "$m" --tokens "$ids" -n "$n" --temp 0 "${ca[@]}" > "$TMP/fa_gt.got"; then
        fail "$name" "$(why)"
    elif cmp -s "$TMP/fa_gt.got" "$TMP/fa_gt.want"; then
        pass "$name"
    else
        fail "$name" "$(text_diff "$TMP/fa_gt.got" "$TMP/fa_gt.want")"
    fi
}

test_flash() {
    prompts || { fail flash "cannot make the prompts"; return; }
    local m kv fa ub th name out lim spec t shape opts nv p mode
    m=$(model q8_0) || { fail flash "cannot generate the model"; return; }
    # every cache type x -fa, prompt p1 (135 rows) in one batch (tiled for f32/f16, as 3 key tiles);
    # f16 and bf16 also in ubatches of 7 and of 1 row (one row at a time); K and V of different types
    # (an F32 K on the per-row path)
    for kv in f32 f16 bf16; do
        for fa in off on auto; do
            for ub in 512 7 1; do
                [ "$ub" != 512 ] && { [ "$fa" != on ] || [ "$kv" = f32 ]; } && continue
                flash_logits "flash/logits q8_0 -ctk $kv -ctv $kv -fa $fa -ub $ub" q8_0 "$m" p1 -ctk "$kv" -ctv "$kv" -fa "$fa" -ub "$ub"
            done
        done
    done
    flash_logits "flash/logits q8_0 -ctk bf16 -ctv f16 -fa on" q8_0 "$m" p1 -ctk bf16 -ctv f16 -fa on
    flash_logits "flash/logits q8_0 -ctk f32 -ctv bf16 -fa on -ub 7" q8_0 "$m" p1 -ctk f32 -ctv bf16 -fa on -ub 7
    for kv in f16 bf16; do   # the dot products' SIMD twins and their scalar definitions
        name="flash/-fa on -ctk $kv: SIMD vs CLOVER_SIMD=scalar logits bit-identical (q8_0, p1, -ub 512 and 7)"
        out=
        for ub in 512 7; do
            if ! clover -m "$m" --tokens "$(cat "$TMP/p1.ids")" --dump-logits "$TMP/fa_a.bin" -ctk "$kv" -ctv "$kv" -fa on -ub "$ub" > /dev/null ||
                ! CLOVER_SIMD=scalar clover -m "$m" --tokens "$(cat "$TMP/p1.ids")" --dump-logits "$TMP/fa_b.bin" -ctk "$kv" -ctv "$kv" -fa on -ub "$ub" > /dev/null; then
                out=$(why)
            elif ! cmp -s "$TMP/fa_a.bin" "$TMP/fa_b.bin"; then
                out="-ub $ub: $("$CMP" "$TMP/fa_a.bin" "$TMP/fa_b.bin" $N_VOCAB 2>&1)"
            fi
        done
        if [ -z "$out" ]; then pass "$name"; else fail "$name" "$out"; fi
    done

    # the split path: after a batch of 289 (519) rows, 8 steps at 512 (768) cache cells, two chunks
    # of 256 (384), each step's logits (clover: its result_output dump, whose first row is the batch's
    # last); llama.cpp's own steps depend on -t there, so -t 1 and -t 2 must differ (else the path
    # was not taken). -t 2 only: llama.cpp's spinning threads crawl when -t exceeds the cores.
    python3 -c "import random; r = random.Random(9); print(','.join(str(r.randrange($N_VOCAB)) for _ in range(520)))" > "$TMP/p520.ids"
    cut -d, -f1-290 "$TMP/p520.ids" > "$TMP/p290.ids"
    for spec in "f16 p290" "f32 p520"; do
        read -r kv p <<< "$spec"
        name="flash/split: 8 steps after $p, q8_0 -ctk $kv -fa on -t 2, each step's logits"
        rm -rf "$TMP/fa_d"
        if ! ref -m "$m" --greedy "@$TMP/$p.ids" 8 --step-logits "$TMP/fa_b.bin" -ctk "$kv" -ctv "$kv" -fa on -t 2 > /dev/null ||
            ! clover -m "$m" --tokens "$(cat "$TMP/$p.ids")" -n 7 --temp 0 -ctk "$kv" -ctv "$kv" -fa on -t 2 \
                --dump-tensors "$TMP/fa_d" --dump-filter '^result_output$' > /dev/null; then
            fail "$name" "$(why)"
            continue
        fi
        tail -c $((8 * N_VOCAB * 4)) "$TMP/fa_d/result_output.bin" > "$TMP/fa_a.bin"
        check_logits "$name" q8_0 "$TMP/fa_a.bin" "$TMP/fa_b.bin" -m "$m" --greedy "@$TMP/$p.ids" 8 --step-logits "$TMP/theirs_ref.bin" \
            -ctk "$kv" -ctv "$kv" -fa on -t 2
        if [ "$p" = p290 ]; then
            name="flash/split: llama.cpp's steps after p290 differ between -t 1 and -t 2 (the split path is taken)"
            if ! ref -m "$m" --greedy "@$TMP/$p.ids" 8 --step-logits "$TMP/fa_c.bin" -ctk "$kv" -ctv "$kv" -fa on -t 1 > /dev/null; then
                fail "$name" "$(why)"
            elif cmp -s "$TMP/fa_b.bin" "$TMP/fa_c.bin"; then
                fail "$name" "bit-identical: the steps did not take the split path"
            else
                pass "$name ($("$CMP" "$TMP/fa_b.bin" "$TMP/fa_c.bin" $N_VOCAB 2>&1))"
            fi
        fi
    done

    # a narrow model (head_dim 32: shorter than ggml's 64-wide vector steps) and a real-shape slice
    for spec in "f16 narrow" "q8_0 real --layers 4 --experts 16 --vocab 32768"; do
        read -r t shape opts <<< "$spec"
        # shellcheck disable=SC2086
        m=$(model "$t" 1 --shape "$shape" $opts) || { fail "flash/$t $shape" "cannot generate the model"; continue; }
        nv=$(echo "$opts" | sed -n 's/.*--vocab \([0-9]*\).*/\1/p')
        for kv in f16 bf16; do
            [ "$shape" = real ] && [ "$kv" = f16 ] && continue
            N_VOCAB=${nv:-$N_VOCAB} flash_logits "flash/logits $t $shape${opts:+ ($opts)} -ctk $kv -ctv $kv -fa on" "$t" "$m" p2 -ctk "$kv" -ctv "$kv" -fa on
        done
        [ "$shape" = narrow ] && flash_logits "flash/logits $t $shape -ctk f32 -ctv f32 -fa on -ub 7" "$t" "$m" p1 -ctk f32 -ctv f32 -fa on -ub 7
    done

    # greedy texts; the model card's flags (not on the real-shape slice: reading its vocabulary for
    # the end-of-generation ids costs more than the rest of this group)
    m=$(model q8_0)
    for kv in f32 f16 bf16; do
        flash_greedy "flash/greedy q8_0 -ctk $kv -ctv $kv -fa on: 32 tokens after p1" "$m" "$(cat "$TMP/p1.ids")" 32 \
            "-ctk $kv -ctv $kv -fa on" "-ctk $kv -ctv $kv -fa on"
    done
    local card="-ctk bf16 -ctv bf16 --flash-attn on -b 256 -ub 256"
    flash_greedy "flash/greedy q8_0, the model card's flags ($card): 64 tokens" "$m" "$(cat "$TMP/pg.ids")" 64 "$card" "-ctk bf16 -ctv bf16 -fa on -ub 256"

    # draft-self stays exactly plain decoding: a verify row computes what the single step at its
    # position computes (the split path past 256 positions included), whatever llama.cpp would do
    # with a verify batch; true-continuation drafts are all accepted and the committed state is
    # checked against plain decoding every round (8 layers: the second attention layer's K and V
    # depend on the first one's output)
    m=$(model q8_0 1 --arch clover_moe --mask --layers 8)
    echo 1,2,3,4,5,6,7,8,9,10,11,12 > "$TMP/pd.ids"
    for spec in "pd f16 2 model" "p290 f16 2 truth" "p290 f32 3 truth"; do
        read -r p kv th mode <<< "$spec"
        local extra=()
        [ "$mode" = truth ] && extra=(--test-drafts truth --test-check-state)
        name="flash/draft-self (-fa on -ctk $kv -t $th, prompt $p, $mode drafts) == plain greedy decoding"
        if ! clover -m "$m" --tokens "$(cat "$TMP/$p.ids")" -n 40 --temp 0 -ctk "$kv" -ctv "$kv" -fa on -t "$th" > "$TMP/fa_ds.want" ||
            ! clover -m "$m" --tokens "$(cat "$TMP/$p.ids")" -n 40 --temp 0 -ctk "$kv" -ctv "$kv" -fa on -t "$th" --spec-type draft-self "${extra[@]}" > "$TMP/fa_ds.got"; then
            fail "$name" "$(grep -m 1 '^clover: error' "$TMP/err" || why)"
        elif ! cmp -s "$TMP/fa_ds.got" "$TMP/fa_ds.want"; then
            fail "$name" "$(text_diff "$TMP/fa_ds.got" "$TMP/fa_ds.want")"
        elif [ "$mode" = truth ] && ! grep -q '^state check: [0-9]* rounds identical' "$TMP/err"; then
            fail "$name" "no state check line: $(first_line "$TMP/err")"
        else
            pass "$name ($(grep -o 'n_accept *= *[0-9]*' "$TMP/err")${extra:+, $(grep -o '^state check.*' "$TMP/err")})"
        fi
    done

    # the preview pass with -fa on: the bidirectional block against build/preview_ref's float64
    # evaluation, within twice llama.cpp's own -fa on distance from float64 on the causal pass of the
    # same tokens (its qwen35moe twin, measured here) plus PREVIEW_TOL; and batch-invariant
    local M=$((N_VOCAB - 1)) P3 blk mt lm
    P3=$(python3 -c "import random; r = random.Random(21); print(','.join(str(r.randrange($M)) for _ in range(12)))")
    m=$(model f32 52 --arch clover_moe --mask) && mt=$(model f32 52 --arch qwen35moe) || { fail flash/preview "cannot generate the models"; return; }
    for spec in "5,$M,77,$M,$M,900,$M,3 bf16" "9$(printf ",$M%.0s" $(seq 31)) f32"; do
        read -r blk kv <<< "$spec"
        name="flash/preview (-fa on -ctk $kv, f32 seed 52, p12, a $(echo "$blk" | tr ',' '\n' | wc -l)-row block) vs build/preview_ref"
        if ! $TO "$PREVIEW_REF" "$m" "$P3,$blk" 1 "$TMP/fa_pc.bin" --causal "$TMP/fa_pd.bin" 2> "$TMP/pv_ref.err" ||
            ! $TO "$PREVIEW_REF" "$m" "$P3" "$blk" "$TMP/fa_pb.bin" 2> "$TMP/pv_ref.err"; then
            fail "$name" "preview_ref failed: $(first_line "$TMP/pv_ref.err")"
        elif ! ref -m "$mt" --logits "$P3,$blk" "$TMP/fa_pr.bin" -ctk "$kv" -ctv "$kv" -fa on > /dev/null ||
            ! clover -m "$m" --tokens "$P3" --preview-block "$blk" --dump-logits "$TMP/fa_pa.bin" -ctk "$kv" -ctv "$kv" -fa on > /dev/null; then
            fail "$name" "$(why)"
        else
            lm=$("$CMP" "$TMP/fa_pr.bin" "$TMP/fa_pd.bin" $N_VOCAB 2>&1 | sed -n 's/.* max \([^ ]*\) .*/\1/p')
            lim=$(python3 -c "import sys; print('%.3g' % (2 * float(sys.argv[1]) + float(sys.argv[2])))" "${lm:-0}" "$PREVIEW_TOL")
            if out=$("$CMP" "$TMP/fa_pa.bin" "$TMP/fa_pb.bin" $N_VOCAB --max "$lim" 2>&1); then
                pass "$name ($out; limit $lim, llama.cpp's causal max $lm)"
            else
                fail "$name" "$out (limit max $lim: llama.cpp's -fa on causal max $lm vs float64)"
            fi
        fi
    done
    name="flash/preview -fa on: -t 1 -ub 512 vs -t 2 -ub 2 bit-identical (f32 seed 52, p12, 8-row block)"
    if ! clover -m "$m" --tokens "$P3" --preview-block "5,$M,77,$M,$M,900,$M,3" --dump-logits "$TMP/fa_pa.bin" -fa on -t 1 > /dev/null ||
        ! clover -m "$m" --tokens "$P3" --preview-block "5,$M,77,$M,$M,900,$M,3" --dump-logits "$TMP/fa_pb.bin" -fa on -t 2 -tb 2 -ub 2 > /dev/null; then
        fail "$name" "$(why)"
    elif cmp -s "$TMP/fa_pa.bin" "$TMP/fa_pb.bin"; then
        pass "$name"
    else
        fail "$name" "$("$CMP" "$TMP/fa_pa.bin" "$TMP/fa_pb.bin" $N_VOCAB 2>&1)"
    fi

    # -fa's spellings (llama.cpp's common/arg.cpp), and the default: auto, which is on
    m=$(model q8_0)
    local ids v want
    ids=$(cat "$TMP/pg.ids")
    name="flash/-fa spellings: on = enabled = true = 1 = auto = -1 = no -fa; off = disabled = false = 0; the two differ"
    out=
    for v in on enabled true 1 auto -1 none off disabled false 0; do
        if [ "$v" = none ]; then   # no -fa at all (the clover wrapper passes -fa off first)
            $TO "$CLOVER" -m "$m" --tokens "$ids" --dump-logits "$TMP/fa_f_$v.bin" > /dev/null 2> "$TMP/err" || { out="clover without -fa failed: $(first_line "$TMP/err")"; break; }
        else
            clover -m "$m" --tokens "$ids" --dump-logits "$TMP/fa_f_$v.bin" -fa "$v" > /dev/null || { out="-fa $v: $(why)"; break; }
        fi
        want=on
        case $v in off|disabled|false|0) want=off ;; esac
        cmp -s "$TMP/fa_f_$v.bin" "$TMP/fa_f_$want.bin" || { out="-fa $v differs from -fa $want"; break; }
    done
    [ -z "$out" ] && cmp -s "$TMP/fa_f_on.bin" "$TMP/fa_f_off.bin" && out="-fa on and -fa off give the same logits"
    if [ -z "$out" ]; then pass "$name"; else fail "$name" "$out"; fi
    name="flash/-fa maybe: exit 1, one clover: error: line"
    if clover -m "$m" --tokens "$ids" -n 1 -fa maybe > /dev/null; then
        fail "$name" "accepted"
    elif [ "$(grep -c . "$TMP/err")" = 1 ] && grep -q '^clover: error: -fa needs on, off or auto' "$TMP/err"; then
        pass "$name"
    else
        fail "$name" "$(first_line "$TMP/err")"
    fi
}

# ------------------------------------------------------------------------------------------------
t_start=$(date +%s)
for t in unit tokenizer logits greedy output twin threads simd batch smoke draft dumps shapes trace preview drafts stats diffusion errors warnings regressions tiny gpu gpu_forward flash; do
    if echo "test_$t" | grep -Eq -- "$ONLY"; then
        t0=$(date +%s)
        "test_$t"
        echo "# test_$t: $(( $(date +%s) - t0 )) s" >&2
    fi
done
echo "# total: $(( $(date +%s) - t_start )) s" >&2
echo "$n_pass passed, $n_fail failed"
[ "$n_fail" -eq 0 ]
