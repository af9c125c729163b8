# smoke — default options (f16 cache), sampling with a seed, --chat
# seconds: 1
if check "defaults (-p, f16 cache, sampling)"; then
    if ! m=$(model q8_0); then
        fail "cannot generate the model"
    elif ! s1=$(output_of clover -m "$m" -p "Hello world" -n 16 --seed 3); then
        fail "$(why)"
    elif [ "$(head -c 11 "$s1")" = "Hello world" ]; then
        pass
    else
        fail "output does not start with the prompt: '$(head -c 80 "$s1" | tr '\n' ' ')'"
    fi
fi
if check "same --seed, same text"; then
    if ! m=$(model q8_0); then
        fail "cannot generate the model"
    elif ! s1=$(output_of clover -m "$m" -p "Hello world" -n 16 --seed 3) ||
        ! clover -m "$m" -p "Hello world" -n 16 --seed 3 > "$TMP/s2.txt"; then
        fail "$(why)"
    elif cmp -s "$s1" "$TMP/s2.txt"; then
        pass
    else
        fail "$(text_diff "$TMP/s2.txt" "$s1")"
    fi
fi
if check "--chat"; then
    if ! m=$(model q8_0); then
        fail "cannot generate the model"
    elif ! clover -m "$m" -p "Hi" --chat -n 4 --temp 0 > "$TMP/s3.txt"; then
        fail "$(why)"
    elif grep -q '^<|im_start|>user' "$TMP/s3.txt" && grep -q '<|im_start|>assistant' "$TMP/s3.txt"; then
        pass
    else
        fail "no chat template in the output: '$(head -c 80 "$TMP/s3.txt" | tr '\n' ' ')'"
    fi
fi
