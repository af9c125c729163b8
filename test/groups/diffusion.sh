# diffusion — --diffusion terminates, prints text, its blocks/passes report adds up; threshold 0 gives the argmax of one preview pass
# seconds: 7
# --diffusion (spec S2.6): it terminates, prints the prompt and new text, and its report
# "diffusion: B blocks, P passes, X passes per block, Y tokens per pass" adds up with n_predict
# (build/cmp diffusion, block size 8). Threshold 0 unmasks every position in the first pass
# (P == B), so the first block must be the rows' argmax (the mask excluded) of one preview pass
# over block_size masks (clover --preview-block, itself checked by group preview) — with
# shift_logits, position 0 is predicted by the last committed row (the prompt's causal logits,
# llama.cpp's greedy token) and position j by block row j-1. Threshold 1 unmasks one position per
# pass (P == 8 per block).
M=$((N_VOCAB - 1))
EXTRAS="--arch clover_moe --mask --block-size 8 --right-conv --reverse --coreset 0.5"
# shellcheck disable=SC2086
models() {
    m=$(model q8_0 81 $EXTRAS) && sh=$(model q8_0 81 $EXTRAS --shift-logits) && tw=$(model q8_0 81 --arch qwen35moe) ||
        { fail "cannot generate the models"; return 1; }
}
# defaults (threshold 0.9), -n 20: 3 blocks of 8 (the last cut to 4), the prompt then new text
if check "-n 20, default threshold: terminates, prints text, the report adds up" && models; then
    if ! clover -m "$m" --tokens "$DRAFT_PROMPT" -n 20 --diffusion -ctk f32 -ctv f32 > "$TMP/df.txt" || ! cp "$TMP/err" "$TMP/df.err"; then
        fail "$(why)"
    elif ! ref -m "$tw" --detok "$DRAFT_PROMPT" > "$TMP/df.prompt"; then
        fail "$(why)"
    elif ! cmp -s "$TMP/df.prompt" <(head -c "$(wc -c < "$TMP/df.prompt")" "$TMP/df.txt"); then
        fail "the output does not start with the prompt text"
    elif [ "$(wc -c < "$TMP/df.txt")" -le "$(wc -c < "$TMP/df.prompt")" ]; then
        fail "no text after the prompt"
    elif out=$("$CMP" diffusion "$TMP/df.err" 20 2>&1); then
        pass "$out"
    else
        fail "$out"
    fi
fi
# into -c: 30 - 12 = 18 positions left, blocks of 8, 8 and 2
if check "into -c 30: stops at the context, the report adds up" && models; then
    if ! clover -m "$m" --tokens "$DRAFT_PROMPT" -n -1 -c 30 --diffusion --diffusion-threshold 0.5 -ctk f32 -ctv f32 > /dev/null; then
        fail "$(why)"
    elif out=$("$CMP" diffusion "$TMP/err" 18 2>&1); then
        pass "$out"
    else
        fail "$out"
    fi
fi
if check "threshold 1: one position per pass" && models; then
    if ! clover -m "$m" --tokens "$DRAFT_PROMPT" -n 12 --diffusion --diffusion-threshold 1 -ctk f32 -ctv f32 > /dev/null; then
        fail "$(why)"
    elif out=$("$CMP" diffusion "$TMP/err" 12 8 2>&1); then
        pass "$out"
    else
        fail "$out"
    fi
fi
# threshold 0: one pass per block, the first block is the argmax of one preview pass
blk=$M$(printf ",$M%.0s" $(seq 7))
for shift in 0 1; do
    check "threshold 0, -n 8 (shift_logits $shift): one pass, the argmax of the preview rows" || continue
    models || continue
    f=$m
    [ "$shift" = 1 ] && f=$sh
    if ! clover -m "$f" --tokens "$DRAFT_PROMPT" --preview-block "$blk" --dump-logits "$TMP/df.bin" -ctk f32 -ctv f32 > /dev/null ||
        ! clover -m "$f" --tokens "$DRAFT_PROMPT" -n 8 --diffusion --diffusion-threshold 0 -ctk f32 -ctv f32 > "$TMP/df.txt"; then
        fail "$(why)"
    elif ! out=$("$CMP" diffusion "$TMP/err" 8 1 2>&1); then
        fail "$out"
    elif ! g=$(ref -m "$tw" --greedy "$DRAFT_PROMPT" 1) || ! want=$("$CMP" argmax "$TMP/df.bin" $N_VOCAB "$M" 2>&1); then
        fail "$(why)$want"
    else
        # with shift_logits, row j-1 predicts position j, and the last committed row position 0
        [ "$shift" = 1 ] && want=$g,${want%,*}
        if ! expected_text "$tw" "$DRAFT_PROMPT" "$want" "$TMP/df.want"; then
            fail "ref --detok failed: $(first_line "$TMP/df.want.err")"
        elif cmp -s "$TMP/df.txt" "$TMP/df.want"; then
            pass "$out; ids $want"
        else
            fail "expected ids $want: $(text_diff "$TMP/df.txt" "$TMP/df.want")"
        fi
    fi
done
