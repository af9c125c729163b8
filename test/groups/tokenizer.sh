# tokenizer — clover --tokenize vs llama.cpp on every test/texts/*.txt; decoding of those texts
# seconds: 40
for f in test/texts/*.txt; do
    check "tokenize $(basename "$f" .txt)" || continue
    m=$(model q8_0) || { fail "cannot generate the model"; continue; }
    # clover's -f drops one trailing newline (as llama.cpp's examples do): add one, so both
    # tokenize exactly the file's bytes
    cp "$f" "$TMP/tok.txt" && printf '\n' >> "$TMP/tok.txt"
    if ! clover -m "$m" --tokenize -f "$TMP/tok.txt" > "$TMP/tok.clover" ||
        ! ref -m "$m" --tokenize "$f" > "$TMP/tok.ref"; then
        fail "$(why)"
    elif cmp -s "$TMP/tok.clover" "$TMP/tok.ref"; then
        pass "$(tr ',' '\n' < "$TMP/tok.ref" | wc -l) tokens"
    else
        fail "$("$CMP" ids "$TMP/tok.clover" "$TMP/tok.ref")"
    fi
done

if check "-f drops one trailing newline"; then
    printf 'Hello world\n\n' > "$TMP/nl2.txt"
    printf 'Hello world\n' > "$TMP/nl1.txt"
    if ! m=$(model q8_0); then
        fail "cannot generate the model"
    elif ! clover -m "$m" --tokenize -f "$TMP/nl2.txt" > "$TMP/nl.clover" || ! ref -m "$m" --tokenize "$TMP/nl1.txt" > "$TMP/nl.ref"; then
        fail "$(why)"
    elif cmp -s "$TMP/nl.clover" "$TMP/nl.ref"; then
        pass
    else
        fail "clover '$(cat "$TMP/nl.clover")' vs llama.cpp '$(cat "$TMP/nl.ref")'"
    fi
fi

# decoding: each corpus as prompt ids; clover prints their text and one greedy token (-n 0)
for f in test/texts/*.txt; do
    check "detokenize $(basename "$f" .txt)" || continue
    if ! mf=$(model f32); then
        fail "cannot generate the model"
    elif ! ids=$(ref -m "$mf" --tokenize "$f"); then
        fail "$(why)"
    else
        check_greedy_text "$mf" f32 "$ids" 0
    fi
done
