# greedy — 64 greedy tokens, clover vs llama.cpp, every weight type (stdout: the raw bytes)
# seconds: 30
for t in $TYPES; do
    check "$t" || continue
    if ! prompts; then
        fail "$(why)"
    elif ! m=$(model "$t"); then
        fail "cannot generate the model"
    else
        check_greedy_text "$m" "$t" "$PG" 64
    fi
done
