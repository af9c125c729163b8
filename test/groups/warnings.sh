# warnings — every clamped, ignored or overridden option: one "clover: warning:" line naming what is used, the run works, the statistics show the value used; the sampler and seed printed
# seconds: 5
# Options that are clamped, ignored or overridden say so: one "clover: warning:" line naming what
# is used instead, the run still works (exit 0, the prompt and new text on stdout), and the
# statistics show the value used. The sampler chain and the seed in effect are printed (a clock
# seed, given back with --seed, repeats the run); --help lists the defaults.
m=$(model_path q8_0)                              # plain decoding
cm=$(model_path q8_0 7 --arch clover_moe --mask)  # draft-self and diffusion (block size 32)
models() { model q8_0 > /dev/null && model q8_0 7 --arch clover_moe --mask > /dev/null || { fail "cannot generate the models"; return 1; }; }
cores=$(getconf _NPROCESSORS_ONLN)

# clover_warning WARNING STATS ARGS... : clover -p Hello ARGS must exit 0 with no error line, stdout
# starting with "Hello" (the prompt), exactly one "clover: warning:" line on stderr, WARNING
# matching the text after "clover: warning: ", and a stderr line matching STATS ('' for none)
# (extended regexes)
clover_warning() {
    local pat=$1 stat=$2 n rc
    shift 2
    $TO "$CLOVER" -p Hello "$@" > "$TMP/w.out" 2> "$TMP/w.err" < /dev/null
    rc=$?
    n=$(grep -c '^clover: warning: ' "$TMP/w.err")
    if [ "$rc" -ne 0 ]; then
        fail "exit status $rc, expected 0: $(grep -m 1 '^clover: error' "$TMP/w.err" | cut -c1-300)"
    elif [ "$(head -c 5 "$TMP/w.out")" != Hello ]; then
        fail "stdout does not start with the prompt: $(head -c 80 "$TMP/w.out" | tr '\n' ' ')"
    elif [ "$n" -ne 1 ]; then
        fail "$n warning lines, expected 1: $(grep '^clover: warning' "$TMP/w.err" | tr '\n' '|' | cut -c1-300)"
    elif ! grep -Eq -- "^clover: warning: $pat" "$TMP/w.err"; then
        fail "warning does not match /$pat/: $(grep -m 1 '^clover: warning' "$TMP/w.err")"
    elif [ -n "$stat" ] && ! grep -Eq -- "$stat" "$TMP/w.err"; then
        fail "no stderr line matches /$stat/"
    else
        pass
    fi
}
expect_warning() { check "$1" && models && clover_warning "${@:2}"; }   # expect_warning NAME WARNING STATS ARGS...
expect_ok() { check "$1" && models && clover_ok "${@:2}"; }             # expect_ok NAME OUT_PATTERN ERR_PATTERN ARGS... (clover_ok: lib.sh)

ds="--spec-type draft-self --temp 0 -n 6"
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
if check "the model card's command: no warning"; then
    if ! clover -m test/tiny/tiny-clover-q8_0.gguf -f test/tiny/prompt.txt --spec-type draft-self --spec-draft-n-max 15 --spec-accept-ratio 0.9 \
        --spec-accept-delta 0.6 --temp 0 --top-k 1 --seed 42 -ctk bf16 -ctv bf16 -c 8192 -n 8 -b 256 -ub 256 -t 1 -tb 1 --flash-attn on > /dev/null; then
        fail "$(why)"
    elif grep -q '^clover: warning' "$TMP/err"; then
        fail "$(grep -m 1 '^clover: warning' "$TMP/err")"
    else
        pass
    fi
fi

# the sampler and the seed in effect; a clock seed, given back, repeats the run
if check "sampling defaults printed: chain and a clock seed; --seed with it repeats the text" && models; then
    if ! clover -m "$m" -p Hello -n 12 > "$TMP/w1.out"; then
        fail "$(why)"
    elif ! seed=$(sed -n 's/^clover: sampler: top-k 40 -> top-p 0\.950 -> temp 0\.800 -> draw, seed \([0-9]*\) (from the clock; --seed repeats the run)$/\1/p' "$TMP/err") ||
        [ -z "$seed" ]; then
        fail "no sampler line with a clock seed: $(grep -m 1 sampler "$TMP/err")"
    elif ! clover -m "$m" -p Hello -n 12 --seed "$seed" > "$TMP/w2.out"; then
        fail "$(why)"
    elif ! grep -q "^clover: sampler: top-k 40 -> top-p 0\.950 -> temp 0\.800 -> draw, seed $seed\$" "$TMP/err"; then
        fail "--seed $seed: $(grep -m 1 sampler "$TMP/err")"
    elif ! cmp -s "$TMP/w1.out" "$TMP/w2.out"; then
        fail "--seed $seed: $(text_diff "$TMP/w2.out" "$TMP/w1.out")"
    else
        pass "seed $seed"
    fi
fi
expect_ok "greedy sampler printed" '^Hello' '^clover: sampler: greedy \(--temp 0 or --top-k 1\)' -m "$m" -p Hello -n 2 --top-k 1
expect_ok "--top-k 0 --top-p 0.5 --temp 2 --seed 9 printed" '^Hello' '^clover: sampler: top-k all -> top-p 0\.500 -> temp 2\.000 -> draw, seed 9$' \
    -m "$m" -p Hello -n 2 --top-k 0 --top-p 0.5 --temp 2 --seed 9
if check "--help lists the defaults"; then
    if "$CLOVER" --help 2>&1 | grep -q 'default 0.8, 40,' && "$CLOVER" --help 2>&1 | grep -q 'drafts per round (default 16'; then
        pass
    else
        fail "$("$CLOVER" --help 2>&1 | grep -E 'temp|n-max' | tr '\n' '|')"
    fi
fi
