# logits — clover --dump-logits vs llama.cpp logits, every weight type, two prompts
# seconds: 17
for t in $TYPES; do
    for p in p1 p2; do
        check "$t $p" || continue
        if ! prompts; then
            fail "$(why)"
        elif ! m=$(model "$t"); then
            fail "cannot generate the model"
        elif ! clover -m "$m" --tokens "$(cat "$SHARED/$p.ids")" --dump-logits "$TMP/a.bin" -ctk f32 -ctv f32 > /dev/null ||
            ! ref -m "$m" --logits "@$SHARED/$p.ids" "$TMP/b.bin" > /dev/null; then
            fail "$(why)"
        else
            check_logits "$t" "$TMP/a.bin" "$TMP/b.bin" -m "$m" --logits "@$SHARED/$p.ids" "$TMP/theirs_ref.bin"
        fi
    done
done
