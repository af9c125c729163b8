# draft — --spec-type draft-self (exact rule) prints the same text as plain greedy decoding
# seconds: 6
# draft-self with the exact acceptance rule is lossless: its text must equal plain greedy decoding,
# for every draft length, prompt length, and when generation runs into -c (spec S3.6). Seed 1's q8_0
# twin accepts a few drafts after prompt pd.
PD=1,2,3,4,5,6,7,8,9,10,11,12
for pr in pd p1; do
    for ctx in 0 40; do
        [ "$pr" = p1 ] && [ "$ctx" = 40 ] && continue
        for n in 1 2 3 7 15 31; do
            [ "$pr" = p1 ] && [ "$n" != 7 ] && continue
            check "draft-self --spec-draft-n-max $n == greedy (prompt $pr, -c $ctx)" || continue
            if ! prompts; then
                fail "$(why)"
                continue
            fi
            ids=$PD
            [ "$pr" = p1 ] && ids=$P1
            if ! m=$(model q8_0 1 --arch clover_moe --mask); then
                fail "cannot generate the model"
            elif ! want=$(output_of clover -m "$m" --tokens "$ids" -n 48 -c "$ctx" --temp 0 -ctk f32 -ctv f32) ||
                ! clover -m "$m" --tokens "$ids" -n 48 -c "$ctx" --temp 0 -ctk f32 -ctv f32 \
                    --spec-type draft-self --spec-draft-n-max "$n" > "$TMP/d.got"; then
                fail "$(why)"
            elif cmp -s "$TMP/d.got" "$want"; then
                pass "$(sed -n 's/^n_accept *= *//p' "$TMP/err") accepted"
            else
                fail "$(text_diff "$TMP/d.got" "$want")"
            fi
        done
    done
done
if check "relaxed rule is deterministic"; then
    if ! m=$(model q8_0 1 --arch clover_moe --mask); then
        fail "cannot generate the model"
    elif ! clover -m "$m" --tokens "$PD" -n 32 --temp 0 --spec-type draft-self --spec-accept-ratio 0.3 --spec-accept-delta 10 > "$TMP/r1.txt" ||
        ! clover -m "$m" --tokens "$PD" -n 32 --temp 0 --spec-type draft-self --spec-accept-ratio 0.3 --spec-accept-delta 10 > "$TMP/r2.txt"; then
        fail "$(why)"
    elif cmp -s "$TMP/r1.txt" "$TMP/r2.txt"; then
        pass "$(sed -n 's/^n_relaxed *= *//p' "$TMP/err") relaxed"
    else
        fail "$(text_diff "$TMP/r1.txt" "$TMP/r2.txt")"
    fi
fi
