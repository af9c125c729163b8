# twin — a clover_moe file and its qwen35moe twin give bit-identical logits
# seconds: 2
for t in q8_0 f32 q4_k; do
    check "$t clover_moe --mask vs qwen35moe, seed 7" || continue
    if ! prompts; then
        fail "$(why)"
    elif ! a=$(model "$t" 7 --arch clover_moe --mask) || ! b=$(model "$t" 7 --arch qwen35moe); then
        fail "cannot generate the models"
    elif ! clover -m "$a" --tokens "$P1" --dump-logits "$TMP/tw_a.bin" -ctk f32 -ctv f32 > /dev/null ||
        ! clover -m "$b" --tokens "$P1" --dump-logits "$TMP/tw_b.bin" -ctk f32 -ctv f32 > /dev/null; then
        fail "$(why)"
    elif cmp -s "$TMP/tw_a.bin" "$TMP/tw_b.bin"; then
        pass
    else
        fail "logits differ: $("$CMP" "$TMP/tw_a.bin" "$TMP/tw_b.bin" $N_VOCAB 2>&1)"
    fi
done
