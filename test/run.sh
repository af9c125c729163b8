#!/usr/bin/env bash
# test/run.sh — the clover.c test suite. Run from anywhere, after `make clover tools` (this is what
# `make test` does) and test/setup-llama.sh (llama.cpp, the oracle behind build/ref and build/unit).
#
#   test/run.sh [REGEX]    run the test groups whose function name (test_*) matches REGEX
#   CLOVER=./clover-cuda test/run.sh    test another build of clover
#
# Prints one line per check, `PASS name` or `FAIL name: reason`, and ends with `N passed, N failed`;
# exit status 1 if any check failed. Models are random tiny GGUFs (build/gen, fixed seeds) in a
# temporary folder removed at exit. Groups:
#   unit       build/unit: half precision, dequantisation, activation rounding, dot products vs ggml
#   tokenizer  clover --tokenize vs llama.cpp on every test/texts/*.txt; decoding of those texts
#   logits     clover --dump-logits vs llama.cpp logits, every weight type, two prompts (TOL table)
#   greedy     64 greedy tokens, clover vs llama.cpp, every weight type
#   twin       a clover_moe file and its qwen35moe twin give bit-identical logits
#   threads    -t 1 and -t 2 give bit-identical logits and text
#   batch      prompts in ubatches of 1 and 7 rows: vs llama.cpp at the same ubatch (when build/ref
#              has -ub), and vs one batch (-ub 512) for F32 weights (BATCH_TOL)
#   smoke      default options (f16 cache), sampling with a seed, --chat
#   draft      --spec-type draft-self (exact rule) prints the same text as plain greedy decoding
#   errors     bad files, bad flags, bad prompts: exit 1, one line "clover: error: ...", no crash;
#              hard but valid input (invalid UTF-8, -n 0, -c 131072) works; the memory plan and its
#              refusal; every row of README.md's table "Hostile and mistaken input" is a check here
#   regressions  test/fuzz-regressions/: inputs the fuzzers found (make fuzz), replayed through clover
set -u

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
ONLY=${1:-.}

CLOVER=${CLOVER:-./clover}     # CLOVER=./clover-cuda test/run.sh tests the CUDA build
GEN=build/gen
REF=${REF:-build/ref}
CMP=build/cmp
UNIT=build/unit
EDIT="python3 test/gguf_edit.py"
TO="timeout 300"          # no single command may hang the suite
N_VOCAB=1024              # build/gen's tiny vocabulary

TYPES="f32 f16 bf16 q8_0 q4_0 q4_k q5_k q6_k q4_k_m"

# Tolerances of clover vs llama.cpp logits (build/cmp on log-softmax rows): the issue's values.
#        type    median  p99    argmax-agree
TOL="
         f32     1e-4    1e-2   0.99
         f16     1e-3    1e-2   0.99
         bf16    1e-3    1e-2   0.99
         q8_0    1e-3    1e-2   0.99
         q4_0    1e-3    1e-2   0.99
         q4_k    1e-3    1e-2   0.99
         q5_k    1e-3    1e-2   0.99
         q6_k    1e-3    1e-2   0.99
         q4_k_m  1e-3    1e-2   0.99
"
# clover with itself: a prompt evaluated in ubatches of 1 and 7 rows vs one batch (-ub 512). Only
# F32 weights: with quantized or F16/BF16 weights llama.cpp's own logits depend on the ubatch by
# 1e-3 to 1e-1 (see test_batch), and clover follows llama.cpp, not a fixed order.
#        type    median  p99    argmax-agree
BATCH_TOL="
         f32     1e-4    1e-4   1.0
"

declare -A MED P99 ARG
while read -r t m p a; do [ -n "$t" ] && MED[$t]=$m P99[$t]=$p ARG[$t]=$a; done <<< "$TOL"
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
clover() {
    $TO "$CLOVER" "$@" 2> "$TMP/err" && return 0
    echo "clover exit $?: $(first_line "$TMP/err")" > "$TMP/why"
    return 1
}
ref() {
    $TO "$REF" "$@" 2> "$TMP/err" && return 0
    echo "ref exit $?: $(first_line "$TMP/err")" > "$TMP/why"
    return 1
}
why() { cat "$TMP/why" 2>/dev/null; }

for f in "$CLOVER" "$GEN" "$REF" "$CMP" "$UNIT"; do
    if [ ! -x "$f" ]; then
        echo "FAIL setup: $f is missing; run test/setup-llama.sh and make clover tools (make test does both builds)"
        echo "0 passed, 1 failed"
        exit 1
    fi
done

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
    ref -m "$m" --tokenize test/texts/english.txt > "$TMP/p1.ids" || {
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
# first end-of-generation id, rendered by llama.cpp, invalid UTF-8 replaced as clover's streaming
# printer does (maximal subparts -> U+FFFD, like Python's 'replace'), plus the final newline.
# expected_text MODEL PROMPT_IDS GEN_IDS OUT
expected_text() {
    local m=$1 p=$2 g=$3 out=$4 eog ids
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
b = open(sys.argv[1], "rb").read().decode("utf-8", "replace").encode("utf-8") + b"\n"
open(sys.argv[2], "wb").write(b)' "$out.raw" "$out"
}

# where two text files first differ, for a reason line
text_diff() {
    python3 -c '
import sys
a, b = open(sys.argv[1], "rb").read(), open(sys.argv[2], "rb").read()
i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
print("differ at byte %d of %d/%d: clover %r vs llama.cpp %r" % (i, len(a), len(b), a[max(0, i - 10):i + 20], b[max(0, i - 10):i + 20]))' "$1" "$2"
}

# ------------------------------------------------------------------------------------------------
test_unit() {
    if $TO "$UNIT" > "$TMP/unit.out" 2>&1; then
        pass "unit ($(tail -n 1 "$TMP/unit.out"))"
    else
        fail unit "$(grep -m 3 '^FAIL\|error' "$TMP/unit.out" | tr '\n' ';') $(tail -n 1 "$TMP/unit.out")"
    fi
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
    local mf ids g
    mf=$(model f32) || { fail detokenize "cannot generate the model"; return; }
    for f in test/texts/*.txt; do
        name=detokenize/$(basename "$f" .txt)
        if ! ids=$(ref -m "$mf" --tokenize "$f") || ! g=$(ref -m "$mf" --greedy "$ids" 1); then
            fail "$name" "$(why)"
        elif ! expected_text "$mf" "$ids" "$g" "$TMP/dt.want"; then
            fail "$name" "ref --detok failed: $(first_line "$TMP/dt.want.err")"
        elif ! clover -m "$mf" --tokens "$ids" -n 0 --temp 0 -ctk f32 -ctv f32 > "$TMP/dt.got"; then
            fail "$name" "$(why)"
        elif cmp -s "$TMP/dt.got" "$TMP/dt.want"; then
            pass "$name"
        else
            fail "$name" "$(text_diff "$TMP/dt.got" "$TMP/dt.want")"
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
            elif out=$("$CMP" "$TMP/a.bin" "$TMP/b.bin" $N_VOCAB --median "${MED[$t]}" --p99 "${P99[$t]}" --argmax "${ARG[$t]}" 2>&1); then
                pass "$name ($out)"
            else
                fail "$name" "$out (limits: median ${MED[$t]}, p99 ${P99[$t]}, argmax ${ARG[$t]})"
            fi
        done
    done
}

test_greedy() {
    prompts || { fail greedy "cannot make the prompts"; return; }
    local t m name g ids
    ids=$(cat "$TMP/pg.ids")
    for t in $TYPES; do
        name="greedy/$t"
        m=$(model "$t") || { fail "$name" "cannot generate the model"; continue; }
        # clover's -n counts as llama-speculative-simple does: -n 64 generates 65 tokens
        if ! g=$(ref -m "$m" --greedy "$ids" 65); then
            fail "$name" "$(why)"
        elif ! expected_text "$m" "$ids" "$g" "$TMP/g.want"; then
            fail "$name" "ref --detok failed: $(first_line "$TMP/g.want.err")"
        elif ! clover -m "$m" --tokens "$ids" -n 64 --temp 0 -ctk f32 -ctv f32 > "$TMP/g.got"; then
            fail "$name" "$(why)"
        elif cmp -s "$TMP/g.got" "$TMP/g.want"; then
            pass "$name"
        else
            fail "$name" "$(text_diff "$TMP/g.got" "$TMP/g.want")"
        fi
    done
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

# Prompts evaluated in ubatches of 1 and 7 rows. llama.cpp's float order depends on the ubatch
# (tile vs row order, repacked 4-row gemm vs gemv), and so does clover's, which follows it: measured
# here, llama.cpp's own -ub 1 vs one batch differ by median 0.036 / max 0.89 (q4_k) and p99
# 0.025-0.034 (q8_0, q4_0). So clover -ub N is compared with llama.cpp at the same ubatch (TOL
# table; needs build/ref -ub), and clover with itself across ubatches only for F32 weights
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
                elif out=$("$CMP" "$TMP/ub.bin" "$TMP/ubref.bin" $N_VOCAB --median "${MED[$t]}" --p99 "${P99[$t]}" --argmax "${ARG[$t]}" 2>&1); then
                    pass "$name ($out)"
                else
                    fail "$name" "$out (limits: median ${MED[$t]}, p99 ${P99[$t]}, argmax ${ARG[$t]})"
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
expect_ok() {
    local name="errors/$1" out_pat=$2 err_pat=$3 rc
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
t_start=$(date +%s)
for t in unit tokenizer logits greedy twin threads batch smoke draft errors regressions; do
    if echo "test_$t" | grep -Eq -- "$ONLY"; then
        t0=$(date +%s)
        "test_$t"
        echo "# test_$t: $(( $(date +%s) - t0 )) s" >&2
    fi
done
echo "# total: $(( $(date +%s) - t_start )) s" >&2
echo "$n_pass passed, $n_fail failed"
[ "$n_fail" -eq 0 ]
