# stats — the statistics lines: upstream's formats and their arithmetic; draft lines for draft-self only; accept by position
# seconds: 8
# The statistics (spec S3.5): upstream's line formats, and their arithmetic (build/cmp stats). The
# number of generated tokens comes from llama.cpp (build/ref --greedy on the qwen35moe twin). Draft
# lines only for draft-self; its "accept by position" (accepted/drafted per draft position) must be
# what the --trace rounds add up to (build/cmp by-position). No rate from a duration under 1 ms
# (speed n/a).
stats_models() {
    m=$(model q8_0 73 --arch clover_moe --mask --right-conv --reverse --coreset 0.9 --block-size 16) &&
        tw=$(model q8_0 73 --arch qwen35moe) || { fail "cannot generate the models"; return 1; }
}
for spec in "none" "draft-self --spec-draft-n-max 7 --test-drafts truth" "draft-self --spec-draft-n-max 3" "draft-self --spec-draft-n-max 2 --test-drafts random"; do
    check "--spec-type $spec -n 16" && stats_models || continue
    trace=--trace
    [ "$spec" = none ] && trace=
    if ! g=$(output_of ref -m "$tw" --greedy "$DRAFT_PROMPT" 17); then
        fail "$(why)"
    # shellcheck disable=SC2086
    elif ! clover -m "$m" --tokens "$DRAFT_PROMPT" -n 16 --temp 0 -ctk f32 -ctv f32 --spec-type $spec $trace > /dev/null; then
        fail "$(why)"
    elif ! out=$("$CMP" stats "$TMP/err" "$(cat "$g")" "$(eog_ids "$tw")" "$spec" 2>&1); then
        fail "$out"
    elif [ -z "$trace" ]; then
        pass "$out"
    elif by=$("$CMP" by-position "$TMP/err" 2>&1); then
        pass "$out; by position $by"
    else
        fail "$by"
    fi
done

# the tiny Clover accepts some drafts at the first positions and fewer further on
if check "tiny Clover: accept by position is what the --trace rounds add up to"; then
    if ! clover -m test/tiny/tiny-clover-q8_0.gguf -f test/tiny/prompt.txt -n 40 --temp 0 --spec-type draft-self --spec-draft-n-max 7 --trace > /dev/null; then
        fail "$(why)"
    elif by=$("$CMP" by-position "$TMP/err" 2>&1) && [ "${by%%/*}" -gt 0 ]; then
        pass "$by"
    else
        fail "${by:-no drafts accepted at position 1}"
    fi
fi
# a one-token prompt evaluates nothing before decoding: its encode time is nanoseconds, no rate
if check "one-token prompt: encode speed n/a, decode speed a number" && stats_models; then
    if ! clover -m "$m" --tokens 5 -n 3 --temp 0 > /dev/null; then
        fail "$(why)"
    elif grep -q '^encoded    1 tokens in    0\.000 seconds, speed:      n/a$' "$TMP/err" &&
        grep -Eq '^decoded    4 tokens in +[0-9.]+ seconds, speed: +([0-9]+\.[0-9]{3} t/s|n/a)$' "$TMP/err"; then
        pass
    else
        fail "$(grep -E '^(en|de)coded' "$TMP/err" | tr '\n' '|')"
    fi
fi
if check "--diffusion: n_predict, no draft lines" && stats_models; then
    if ! clover -m "$m" --tokens "$DRAFT_PROMPT" -n 8 --diffusion > /dev/null; then
        fail "$(why)"
    elif grep -q '^n_predict = 8$' "$TMP/err" && ! grep -Eq '^(n_draft|n_drafted|n_accept|accept|n_relaxed|mean accepted|draft time)' "$TMP/err"; then
        pass
    else
        fail "$(grep -E '^(n_|accept|mean|draft)' "$TMP/err" | tr '\n' '|')"
    fi
fi
