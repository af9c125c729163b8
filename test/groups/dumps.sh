# dumps — --dump-tensors vs llama.cpp's graph callback tensors, name by name (test/dumpcmp.py)
# seconds: 7
for t in f32 q8_0; do
    check "$t: clover --dump-tensors vs llama.cpp's callback tensors (prompt p1)" || continue
    if ! prompts; then
        fail "$(why)"
    elif ! m=$(model "$t"); then
        fail "cannot generate the model"
    elif ! make_dumps "$m" "$P1" "$TMP/d_$t"; then
        fail "$(why)"
    else
        check_dumps "$t" "$TMP/d_$t"
    fi
done
if check "the comparison catches a wrong model (f32 dumps vs q8_0 reference must disagree)"; then
    if ! prompts; then
        fail "$(why)"
    elif ! mf=$(model f32) || ! mq=$(model q8_0); then
        fail "cannot generate the model"
    elif ! make_dumps "$mf" "$P1" "$TMP/d_f32" || ! make_dumps "$mq" "$P1" "$TMP/d_q8_0"; then
        fail "$(why)"
    elif ! python3 test/dumpcmp.py "$TMP/d_f32/mine" "$TMP/d_q8_0/theirs" --tol "$DUMP_TOL" --skip "$DUMP_SKIP" > "$TMP/dneg.txt" 2>&1 &&
        grep -q disagree "$TMP/dneg.txt"; then
        pass "$(head -n 1 "$TMP/dneg.txt" | sed 's/;.*//')"
    else
        fail "$(head -n 1 "$TMP/dneg.txt" 2>/dev/null)"
    fi
fi
if check "--dump-filter '^l_out-' writes only l_out, index.tsv lists them; DIR and its parents are created"; then
    rm -rf "$TMP/dfp"
    df=$TMP/dfp/new/df
    if ! m=$(model q8_0); then
        fail "cannot generate the model"
    elif ! clover -m "$m" --tokens 1,2,3,4,5 --dump-logits "$TMP/dl.bin" --dump-tensors "$df" --dump-filter '^l_out-' > /dev/null; then
        fail "$(why)"
    elif n=$(ls "$df" | grep -c '\.bin$') && [ "$n" = 4 ] && [ "$(ls "$df" | grep -v '^l_out-[0-9]*\.bin$' )" = index.tsv ] &&
        [ "$(grep -c '^l_out-' "$df/index.tsv")" = 4 ]; then
        pass
    else
        fail "files: $(ls "$df" | tr '\n' ' ' | cut -c1-200)"
    fi
fi
if check "batches append rows: -ub 3 gives the same files as one batch (f32 weights)"; then
    rm -rf "$TMP/du" && mkdir "$TMP/du"
    if ! prompts; then
        fail "$(why)"
    elif ! m=$(model f32); then
        fail "cannot generate the model"
    elif ! make_dumps "$m" "$P1" "$TMP/d_f32" ||
        ! clover -m "$m" --tokens "$P1" -ub 3 --dump-logits "$TMP/dl.bin" --dump-tensors "$TMP/du" -ctk f32 -ctv f32 --dump-filter '^(l_out|attn_output|ffn_moe_topk|result_output)' > /dev/null; then
        fail "$(why)"
    elif out=$(python3 test/dumpcmp.py "$TMP/du" "$TMP/d_f32/mine" --tol "$DUMP_TOL" --skip . 2>&1); then
        pass "$out"
    else
        fail "$(echo "$out" | tr '\n' ' ' | cut -c1-400)"
    fi
fi
if check "preview pass: --preview-block writes preview.* names with the block's rows"; then
    rm -rf "$TMP/dp" && mkdir "$TMP/dp"
    if ! m=$(model q8_0 7 --arch clover_moe --mask); then
        fail "cannot generate the model"
    elif ! mask=$($EDIT get "$m" tokenizer.ggml.mask_token_id) ||
        ! clover -m "$m" --tokens 1,2,3,4,5 --preview-block "5,$mask,$mask,$mask" --dump-logits "$TMP/dl.bin" --dump-tensors "$TMP/dp" > /dev/null; then
        fail "$(why)"
    elif grep -q "^preview.l_out-0	f32	4x" "$TMP/dp/index.tsv" && grep -q "^l_out-0	f32	5x" "$TMP/dp/index.tsv" &&
        [ "$(stat -c %s "$TMP/dp/preview.result_output.bin")" = $((4 * 4 * N_VOCAB)) ]; then
        pass
    else
        fail "index: $(grep 'l_out-0\|result_output' "$TMP/dp/index.tsv" | cut -f1-3 | tr '\n' ' ')"
    fi
fi
