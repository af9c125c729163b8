# threads — -t 1 and -t 2 give bit-identical logits and text
# seconds: 4
for t in q8_0 f16 q4_k; do
    for ub in 512 5; do
        check "$t -ub $ub: -t 1 vs -t 2 logits" || continue
        if ! prompts; then
            fail "$(why)"
        elif ! m=$(model "$t"); then
            fail "cannot generate the model"
        elif ! clover -m "$m" --tokens "$P1" -ub "$ub" -t 1 --dump-logits "$TMP/t1.bin" -ctk f32 -ctv f32 > /dev/null ||
            ! clover -m "$m" --tokens "$P1" -ub "$ub" -t 2 --dump-logits "$TMP/t2.bin" -ctk f32 -ctv f32 > /dev/null; then
            fail "$(why)"
        elif cmp -s "$TMP/t1.bin" "$TMP/t2.bin"; then
            pass
        else
            fail "not bit-identical: $("$CMP" "$TMP/t1.bin" "$TMP/t2.bin" $N_VOCAB 2>&1)"
        fi
    done
    check "$t: -t 1 vs -t 2 greedy text" || continue
    if ! prompts; then
        fail "$(why)"
    elif ! m=$(model "$t"); then
        fail "cannot generate the model"
    elif ! clover -m "$m" --tokens "$PG" -n 32 --temp 0 -t 1 > "$TMP/t1.txt" ||
        ! clover -m "$m" --tokens "$PG" -n 32 --temp 0 -t 2 > "$TMP/t2.txt"; then
        fail "$(why)"
    elif cmp -s "$TMP/t1.txt" "$TMP/t2.txt"; then
        pass
    else
        fail "$(text_diff "$TMP/t1.txt" "$TMP/t2.txt")"
    fi
done
