# test/lib.sh — what the groups of test/groups/ share: the tools, the check protocol, the models and
# prompts, and the comparisons against llama.cpp. Sourced by test/run.sh (see there), not run alone.

# shellcheck disable=SC2034  # the variables below are for the groups
CLOVER=${CLOVER:-./clover}     # CLOVER=./clover-cuda test/run.sh tests the CUDA build
GEN=build/gen
REF=${REF:-build/ref}
CMP=build/cmp
EMU=${EMU:-build/clover-emu}   # the CUDA kernels executed on the CPU (make cuda-emu)
UNIT=build/unit
UNIT_AVX2=build/unit-avx2
PREVIEW_REF=build/preview_ref
EDIT="python3 test/gguf_edit.py"
TO="timeout 300"          # no single command may hang the suite
N_VOCAB=1024              # build/gen's tiny vocabulary
NO_LLAMA=${NO_LLAMA:-}

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
declare -A SPREAD_MEDIAN SPREAD_MAX
while read -r t m x; do [ -n "$t" ] && SPREAD_MEDIAN[$t]=$m SPREAD_MAX[$t]=$x; done <<< "$SPREAD"

# ------------------------------------------------------------------------------------------------
# The check protocol. A group is a list of checks, each opened by `check NAME` and closed by exactly
# one verdict: pass [MEASUREMENT], fail REASON or skip WHY. Its id is GROUP.N, N counting the
# group's checks in the order they are opened, whether they run or not; a check's work goes inside
# it (the models and files it needs come from the cached helpers below), so that it runs alone and
# `--list` runs nothing. Lines: `PASS id: name`, `FAIL id: name -- reason`, `SKIP id: name -- why`,
# a measurement after " -- " on a PASS line.

# check NAME [off]: opens the next check; 0 when it is to run, 1 when it is not selected (or with
# off: counted, not run; or --list: printed)
check() {
    [ -z "$CHECK_OPEN" ] || verdict FAIL "test bug: the check ended without a verdict"
    CHECK_N=$((CHECK_N + 1))
    CHECK_ID=$GROUP.$CHECK_N CHECK_NAME=$1
    if [ -n "$LIST" ]; then
        echo "$CHECK_ID: $CHECK_NAME"
        return 1
    fi
    [ "${2:-}" != off ] || return 1
    [ -n "$WANT_ALL" ] || [[ " $WANT " == *" $CHECK_N "* ]] || return 1
    CHECK_OPEN=1
    rm -f "$TMP/why"
}
pass() { verdict PASS "${1:-}"; }
fail() { verdict FAIL "$1"; }
skip() { verdict SKIP "$1"; }
verdict() {   # verdict PASS|FAIL|SKIP [TEXT]
    if [ -z "$CHECK_OPEN" ]; then
        echo "FAIL $CHECK_ID: $CHECK_NAME -- test bug: a verdict outside a check ($1 ${2:-})"
        N_FAIL=$((N_FAIL + 1))
        return
    fi
    CHECK_OPEN=
    echo "$1 $CHECK_ID: $CHECK_NAME${2:+ -- $2}"
    case $1 in
        PASS) N_PASS=$((N_PASS + 1)) && echo "$CHECK_NAME" >> "$TMP/passed" ;;
        FAIL) N_FAIL=$((N_FAIL + 1)) ;;
    esac
}

# first line of a file, flattened, for reasons
first_line() { head -n 1 "$1" 2>/dev/null | tr -d '\r' | cut -c1-300; }
# clover ARGS... / ref ARGS...: run with a time limit, stderr to $TMP/err; on failure write the
# reason (tool, exit status, first stderr line) to $TMP/why, which `why` prints. clover runs with
# -fa off (what build/ref runs by default) unless ARGS say otherwise: clover takes the last -fa, and
# group flash passes its own
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
# clover_ok OUT_PATTERN ERR_PATTERN ARGS... : clover ARGS (as given: no -fa off) must exit 0 without
# an error line, its stdout must match OUT_PATTERN and its stderr ERR_PATTERN (extended regexes; ''
# matches anything): the check's verdict (groups errors and warnings)
clover_ok() {
    local out_pat=$1 err_pat=$2 rc
    shift 2
    $TO "$CLOVER" "$@" > "$TMP/ok.out" 2> "$TMP/ok.err" < /dev/null
    rc=$?
    if [ "$rc" -ne 0 ]; then
        fail "exit status $rc, expected 0: $(grep -m 1 -v '^clover: memory:' "$TMP/ok.err" | cut -c1-300)"
    elif grep -q '^clover: error' "$TMP/ok.err"; then
        fail "exit 0 but an error line: $(grep -m 1 '^clover: error' "$TMP/ok.err")"
    elif ! grep -Eaq -- "$out_pat" "$TMP/ok.out"; then
        fail "stdout does not match /$out_pat/: $(head -c 120 "$TMP/ok.out" | tr '\n' ' ')"
    elif ! grep -Eaq -- "$err_pat" "$TMP/ok.err"; then
        fail "stderr does not match /$err_pat/: $(head -n 2 "$TMP/ok.err" | tr '\n' '|' | cut -c1-300)"
    else
        pass
    fi
}
ref_reference() { LLAMA_CPU_VARIANT=$REFERENCE ref "$@"; }   # build/ref with llama.cpp's reference variant
text_diff() { "$CMP" diff "$1" "$2"; }                      # where two texts first differ, for a reason
ids_of() { tr ',' '\n' <<< "$1" | grep -c .; }              # how many ids a comma-separated list has

# ------------------------------------------------------------------------------------------------
# models and prompts, made on first use and shared by the groups (which may run at the same time)

# model TYPE [SEED [gen options...]] -> prints the path. build/gen writes each model once into
# build/models/GEN/ (GEN: a hash of build/gen, so a changed generator makes new files); the lock
# lets groups running at the same time wait for one writer.
model() {
    local type=$1 seed=${2:-1} f
    f=$(model_path "$@")
    shift 2 2>/dev/null || shift $#
    if [ ! -f "$f" ]; then
        {
            flock 9
            [ -f "$f" ] || { $TO "$GEN" -o "$f.part" --type "$type" --seed "$seed" "$@" > "$f.log" 2>&1 && mv "$f.part" "$f"; }
        } 9> "$f.lock"
        [ -f "$f" ] || { echo "gen failed: $(first_line "$f.log")" >&2; return 1; }
    fi
    echo "$f"
}

model_path() {   # model_path TYPE [SEED [gen options...]]: where model writes that model
    local type=$1 seed=${2:-1}
    shift 2 2>/dev/null || shift $#
    echo "$MODELS/$(printf %s "$type-$seed-$*" | tr -c 'A-Za-z0-9_-' '_').gguf"
}

# The prompts, as comma-separated ids. P1: the english corpus text (llama.cpp's tokenization, made
# once per run by `prompts`). P2: 64 fixed pseudo-random ids over the whole vocabulary, special
# tokens included (Python's random.Random(5).randrange(1024), as first drawn). PG, the greedy
# prompt: the first 12 of P1. DRAFT_PROMPT: the draft-self and diffusion groups' prompt.
P2=523,734,59,953,510,106,321,231,761,960,504,779,208,510,26,443,835,572,372,797,326,147,284,911,259,270,3,10,428,441,339,340,592,642,407,419,372,403,784,611,44,739,849,339,298,540,133,679,617,6,692,135,634,727,626,984,646,378,985,967,360,116,524,46
DRAFT_PROMPT=1,2,3,4,5,6,7,8,9,10,11,12
# The preview pass (groups preview and flash): P3, 12 ids below the mask id (Python's
# random.Random(21).randrange(1023)), and PREVIEW_TOL, the limit on the largest |delta log-softmax|
# against build/preview_ref's float64 evaluation
P3=168,428,706,428,650,288,490,863,221,1013,811,486
PREVIEW_TOL=1e-4

# prompts: sets P1 and PG (and the files $SHARED/p1.ids, $SHARED/p2.ids), or fails with a reason in
# $TMP/why. With NO_LLAMA, clover tokenizes (group tokenizer checks it against llama.cpp).
prompts() {
    local f=$SHARED/p1.ids m
    if [ ! -s "$f" ]; then
        m=$(model q8_0) || { echo "cannot generate the model" > "$TMP/why"; return 1; }
        {
            flock 9
            [ -s "$f" ] || if [ -n "$NO_LLAMA" ]; then   # clover's -f drops one trailing newline: add one
                cp test/texts/english.txt "$TMP/p1.txt" && printf '\n' >> "$TMP/p1.txt" &&
                    clover -m "$m" --tokenize -f "$TMP/p1.txt" > "$f.part" && mv "$f.part" "$f"
            else
                ref -m "$m" --tokenize test/texts/english.txt > "$f.part" && mv "$f.part" "$f"
            fi
        } 9> "$f.lock"
        [ -s "$f" ] || { echo "prompts: $(why)" > "$TMP/why"; return 1; }
    fi
    [ -s "$SHARED/p2.ids" ] || echo "$P2" > "$SHARED/p2.ids"
    P1=$(cat "$f")
    PG=$(cut -d, -f1-12 <<< "$P1")
}

# Ids that end generation, as clover finds them: the file's eos id, <|im_end|>, <|endoftext|>; read
# once per model and run
eog_ids() {
    local m=$1 f part
    f="$SHARED/eog-$(md5sum <<< "$m" | cut -c1-16)"
    part=$f.$BASHPID
    if [ ! -f "$f" ]; then
        {
            $EDIT get "$m" tokenizer.ggml.eos_token_id 2>/dev/null
            $EDIT token "$m" '<|im_end|>'
            $EDIT token "$m" '<|endoftext|>'
        } | tr '\n' ',' | sed 's/,$//' > "$part" && mv "$part" "$f"
    fi
    cat "$f"
}

# expected_text MODEL PROMPT_IDS GEN_IDS OUT [replace]: the text clover must print for a greedy run:
# llama.cpp's prompt + generated ids, cut before the first end-of-generation id, rendered by llama.cpp
# (the tokens' raw bytes, as upstream prints them), plus the final newline. With replace: as clover
# --utf8-replace prints it, each maximal ill-formed UTF-8 subpart as U+FFFD.
expected_text() {
    local m=$1 p=$2 g=$3 out=$4 eog ids t
    eog=",$(eog_ids "$m"),"
    ids=$p
    for t in ${g//,/ }; do
        [[ "$eog" == *",$t,"* ]] && break
        ids=$ids,$t
    done
    $TO "$REF" -m "$m" --detok "$ids" > "$out.raw" 2> "$out.err" || return 1
    "$CMP" text "$out.raw" "$out" ${5:-}
}

# greedy_agreed MODEL TYPE PROMPT_IDS GEN_IDS: how many of the loaded variant's greedy ids GEN_IDS
# llama.cpp's reference variant also picks (all of them against the reference variant itself). Where
# this CPU cannot run the reference variant: the ids before the first step whose top-2 logit gap,
# in the loaded variant, is below twice SPREAD's max (a step the variants might decide differently).
greedy_agreed() {
    local m=$1 t=$2 p=$3 g=$4 gr k=0
    if [ "$VARIANT" = "$REFERENCE" ]; then
        ids_of "$g"
    elif [ -n "$REFERENCE_RUNS" ]; then
        gr=$(ref_reference -m "$m" --greedy "$p" "$(ids_of "$g")") || return 1
        local a=(${g//,/ }) b=(${gr//,/ })
        while [ "$k" -lt "${#a[@]}" ] && [ "$k" -lt "${#b[@]}" ] && [ "${a[$k]}" = "${b[$k]}" ]; do k=$((k + 1)); done
        echo "$k"
    else
        ref -m "$m" --logits "$p,$g" "$TMP/gl.bin" > /dev/null || return 1
        "$CMP" gap "$TMP/gl.bin" $N_VOCAB "$(ids_of "$p")" "$(ids_of "$g")" "$(awk -v x="${SPREAD_MAX[$t]}" 'BEGIN { print 2 * x }')"
    fi
}

# check_greedy_text MODEL TYPE PROMPT_IDS N: clover -n N (greedy, f32 cache) prints the text of the
# prompt and llama.cpp's greedy continuation (N + 1 tokens: clover's -n counts as
# llama-speculative-simple does), byte for byte; against a variant other than the reference one,
# only as many tokens as greedy_agreed finds (none: skipped)
check_greedy_text() {
    local m=$1 t=$2 ids=$3 n=$4 g k note=
    if ! g=$(ref -m "$m" --greedy "$ids" $((n + 1))) || ! k=$(greedy_agreed "$m" "$t" "$ids" "$g"); then
        fail "$(why)"
        return
    fi
    local as_far="as far as $REFERENCE and $VARIANT agree"
    [ -n "$REFERENCE_RUNS" ] || as_far="up to the first step within SPREAD of a tie"
    if [ "$k" -eq 0 ]; then
        skip "nothing to compare $as_far"
        return
    elif [ "$k" -lt $((n + 1)) ]; then
        note="first $k of $((n + 1)) tokens, $as_far"
        n=$((k - 1))
        g=$(echo "$g" | cut -d, -f1-"$k")
    fi
    if ! expected_text "$m" "$ids" "$g" "$TMP/gt.want"; then
        fail "ref --detok failed: $(first_line "$TMP/gt.want.err")"
    elif ! clover -m "$m" --tokens "$ids" -n "$n" --temp 0 -ctk f32 -ctv f32 > "$TMP/gt.got"; then
        fail "$(why)"
    elif cmp -s "$TMP/gt.got" "$TMP/gt.want"; then
        pass "$note"
    else
        fail "$(text_diff "$TMP/gt.got" "$TMP/gt.want")${note:+ ($note)}"
    fi
}

# check_logits TYPE MINE THEIRS REF_ARGS...: clover's logits MINE vs llama.cpp's THEIRS (from the
# loaded variant). Against the reference variant: bit for bit. Against another one: no further from
# THEIRS than the reference variant's own logits, which `build/ref REF_ARGS` writes to
# $TMP/theirs_ref.bin (measured median, p99 and max |dlogp|, plus 10% and 1e-6; argmax agreement
# minus 1%: build/cmp --spread), or within SPREAD where this CPU cannot run the reference variant.
check_logits() {
    local t=$1 mine=$2 theirs=$3 lim out
    shift 3
    if [ "$VARIANT" = "$REFERENCE" ]; then
        lim="--median 0 --p99 0 --max 0 --argmax 1"
    elif [ -n "$REFERENCE_RUNS" ]; then
        ref_reference "$@" > /dev/null || { fail "$(why)"; return; }
        lim="--spread $TMP/theirs_ref.bin"
    else
        lim="--median ${SPREAD_MEDIAN[$t]} --max ${SPREAD_MAX[$t]} --argmax 0.9"
    fi
    # shellcheck disable=SC2086
    if out=$("$CMP" "$mine" "$theirs" $N_VOCAB $lim 2>&1); then
        pass "$out"
    else
        fail "$out (limits: ${lim//--/})"
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

# make_dumps MODEL IDS DIR: clover's and llama.cpp's --dump-tensors (DIR/mine, DIR/theirs) and
# logits (DIR/mine.bin, DIR/theirs.bin) of the prompt IDS in one batch, made once (DIR/done); with a
# variant other than the reference one, also the reference variant's (DIR/reference) where it runs
make_dumps() {
    local m=$1 ids=$2 d=$3
    [ -f "$d/done" ] && return 0
    rm -rf "$d" && mkdir -p "$d/theirs" "$d/reference" && echo "$ids" > "$d/ids" || return 1
    if [ "$VARIANT" != "$REFERENCE" ] && [ -n "$REFERENCE_RUNS" ]; then
        ref_reference -m "$m" --logits "@$d/ids" "$d/reference.bin" --dump-tensors "$d/reference" > /dev/null || return 1
    fi
    clover -m "$m" --tokens "$ids" --dump-logits "$d/mine.bin" --dump-tensors "$d/mine" -ctk f32 -ctv f32 > /dev/null &&
        ref -m "$m" --logits "@$d/ids" "$d/theirs.bin" --dump-tensors "$d/theirs" > /dev/null && touch "$d/done"
}

# check_dumps TYPE DIR: the dumps of make_dumps compared name by name as the comment above says.
# Where this CPU cannot run the reference variant, only F32 models are compared (measured: other
# variants' F32 tensors within 3e-6 of zen4's; those of rounded activations drift by 1e-3 and more
# within a few layers, and routing flips follow).
check_dumps() {
    local t=$1 d=$2 lim out
    if [ "$VARIANT" = "$REFERENCE" ]; then
        lim="--tol 0"
    elif [ -n "$REFERENCE_RUNS" ]; then
        lim="--tol $DUMP_TOL --spread $d/reference"
    elif [ "$t" = f32 ]; then
        lim="--tol $DUMP_TOL"
    else
        skip "$REFERENCE cannot run here, and $VARIANT's $t tensors differ from it"
        return
    fi
    # shellcheck disable=SC2086
    if out=$(python3 test/dumpcmp.py "$d/mine" "$d/theirs" $lim --skip "$DUMP_SKIP" 2>&1); then
        pass "$out"
    else
        fail "$(echo "$out" | tr '\n' ' ' | cut -c1-400)"
    fi
}

# draft_models: sets DM_A (3 layers, shift), DM_B (3 layers, shift, reverse, coreset 0.5),
# DM_C (4 layers, right conv, reverse, coreset 0.9, block size 16): clover_moe models of groups drafts
# and gpu_forward
draft_models() {
    DM_A=$(model q8_0 71 --arch clover_moe --mask --layers 3 --shift-logits) &&
        DM_B=$(model q8_0 72 --arch clover_moe --mask --layers 3 --shift-logits --reverse --coreset 0.5) &&
        DM_C=$(model q8_0 73 --arch clover_moe --mask --right-conv --reverse --coreset 0.9 --block-size 16)
}

# output_of RUNNER ARGS...: RUNNER (clover, or a group's emu) ARGS' stdout, run once per group and
# kept: prints the file's path (the reference texts that several checks compare with)
output_of() {
    local f
    f="$TMP/out-$(printf '%s\n' "$@" | md5sum | cut -c1-16)"
    if [ ! -f "$f" ]; then
        "$@" > "$f.part" || return 1
        mv "$f.part" "$f"
    fi
    echo "$f"
}

# logits_of ARGS...: the file of clover ARGS --dump-logits, made once per group: prints its path
logits_of() {
    local f
    f="$TMP/logits-$(printf '%s\n' "$@" | md5sum | cut -c1-16).bin"
    if [ ! -f "$f" ]; then
        clover "$@" --dump-logits "$f.part" > /dev/null || return 1
        mv "$f.part" "$f"
    fi
    echo "$f"
}
