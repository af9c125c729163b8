# simd — SIMD and scalar (CLOVER_SIMD=scalar) dot products give bit-identical logits, every type
# seconds: 30
# Every weight type, in one batch (tile order, 4-row gemm), ubatches of 5 (gemm plus gemv rows) and
# of 1 (row order, as decoding); f16 and bf16 caches for attention.
for t in $TYPES; do
    for ub in 512 5 1; do
        for kv in f32 f16 bf16; do
            [ "$kv" != f32 ] && [ "$t" != q8_0 ] && continue
            check "$t -ub $ub -ctk $kv: SIMD vs scalar logits" || continue
            if ! prompts; then
                fail "$(why)"
            elif ! m=$(model "$t"); then
                fail "cannot generate the model"
            elif ! clover -m "$m" --tokens "$P1" -ub "$ub" --dump-logits "$TMP/s1.bin" -ctk "$kv" -ctv "$kv" > /dev/null ||
                ! CLOVER_SIMD=scalar clover -m "$m" --tokens "$P1" -ub "$ub" --dump-logits "$TMP/s2.bin" -ctk "$kv" -ctv "$kv" > /dev/null; then
                fail "$(why)"
            elif cmp -s "$TMP/s1.bin" "$TMP/s2.bin"; then
                pass
            else
                fail "not bit-identical: $("$CMP" "$TMP/s1.bin" "$TMP/s2.bin" $N_VOCAB 2>&1)"
            fi
        done
    done
done
