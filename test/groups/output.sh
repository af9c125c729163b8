# output — --utf8-replace: invalid UTF-8 as U+FFFD
# seconds: 5
# clover's stdout is the tokens' raw bytes (group greedy checks them byte for byte against llama.cpp's
# rendering, on random models whose greedy texts are full of partial UTF-8 sequences); with
# --utf8-replace, each invalid sequence becomes U+FFFD
if check "--utf8-replace: invalid UTF-8 of the greedy text as U+FFFD, the rest as without it"; then
    if ! prompts; then
        fail "$(why)"
    elif ! m=$(model q8_0); then
        fail "cannot generate the model"
    elif ! g=$(ref -m "$m" --greedy "$PG" 65); then
        fail "$(why)"
    elif ! expected_text "$m" "$PG" "$g" "$TMP/ou.raw" || ! expected_text "$m" "$PG" "$g" "$TMP/ou.want" replace; then
        fail "ref --detok failed: $(first_line "$TMP/ou.raw.err")"
    elif cmp -s "$TMP/ou.raw" "$TMP/ou.want"; then
        fail "the greedy text is valid UTF-8: nothing to replace, choose another prompt"
    elif ! clover -m "$m" --tokens "$PG" -n 64 --temp 0 -ctk f32 -ctv f32 --utf8-replace > "$TMP/ou.got"; then
        fail "$(why)"
    elif cmp -s "$TMP/ou.got" "$TMP/ou.want"; then
        pass
    else
        fail "$(text_diff "$TMP/ou.got" "$TMP/ou.want")"
    fi
fi
