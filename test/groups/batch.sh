# batch — prompts in ubatches of 1 and 7 rows: vs llama.cpp at the same ubatch, and vs one batch (-ub 512) for F32 weights
# seconds: 10
# llama.cpp's float order depends on the ubatch (tile vs row order, repacked 4-row gemm vs gemv), and
# so does clover's, which follows it: measured here, llama.cpp's own -ub 1 vs one batch differ by
# median 0.036 / max 0.89 (q4_k) and p99 0.025-0.034 (q8_0, q4_0). So clover -ub N is compared with
# llama.cpp at the same ubatch (check_logits), and clover with itself across ubatches only for F32
# weights (BATCH_TOL), where llama.cpp itself agrees to about 5e-6.
#        type    median  p99    argmax-agree
BATCH_TOL="
         f32     1e-4    1e-4   1.0
"
declare -A BMED BP99 BARG
while read -r t m x a; do [ -n "$t" ] && BMED[$t]=$m BP99[$t]=$x BARG[$t]=$a; done <<< "$BATCH_TOL"

for t in $TYPES; do
    for ub in 1 7; do
        check "$t -ub $ub vs llama.cpp -ub $ub" || continue
        if ! "$REF" 2>&1 | grep -q -- '-ub'; then
            skip "build/ref has no -ub option"
        elif ! prompts; then
            fail "$(why)"
        elif ! m=$(model "$t"); then
            fail "cannot generate the model"
        elif ! clover -m "$m" --tokens "$P1" -ub "$ub" --dump-logits "$TMP/ub.bin" -ctk f32 -ctv f32 > /dev/null ||
            ! ref -m "$m" -ub "$ub" --logits "@$SHARED/p1.ids" "$TMP/ubref.bin" > /dev/null; then
            fail "$(why)"
        else
            check_logits "$t" "$TMP/ub.bin" "$TMP/ubref.bin" -m "$m" -ub "$ub" --logits "@$SHARED/p1.ids" "$TMP/theirs_ref.bin"
        fi
    done
done
for t in "${!BMED[@]}"; do
    for ub in 1 7; do
        check "$t -ub $ub vs -ub 512" || continue
        if ! prompts; then
            fail "$(why)"
        elif ! m=$(model "$t"); then
            fail "cannot generate the model"
        elif ! one=$(logits_of -m "$m" --tokens "$P1" -ub 512 -ctk f32 -ctv f32); then
            fail "$(why)"
        elif ! clover -m "$m" --tokens "$P1" -ub "$ub" --dump-logits "$TMP/ub.bin" -ctk f32 -ctv f32 > /dev/null; then
            fail "$(why)"
        elif out=$("$CMP" "$TMP/ub.bin" "$one" $N_VOCAB --median "${BMED[$t]}" --p99 "${BP99[$t]}" --argmax "${BARG[$t]}" 2>&1); then
            pass "$out"
        else
            fail "$out (limits: median ${BMED[$t]}, p99 ${BP99[$t]}, argmax ${BARG[$t]})"
        fi
    done
done
