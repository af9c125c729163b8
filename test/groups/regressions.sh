# regressions — test/fuzz-regressions/: inputs the fuzzers found (make fuzz), replayed through clover
# seconds: 1
# Inputs the fuzzers once crashed on: GGUF files must load or be rejected with one error line;
# tokenizer inputs are prompt files that must tokenize and generate.
if check "fuzzer inputs (test/fuzz-regressions/) load or are rejected cleanly"; then
    n=0 bad=()
    if ! m=$(model q8_0 1 --layers 1); then
        bad+=("cannot generate the model")
    fi
    for f in test/fuzz-regressions/gguf/*; do
        [ -f "$f" ] || continue
        $TO "$CLOVER" -m "$f" -p "hello world" -n 1 --temp 0 > /dev/null 2> "$TMP/r.err" < /dev/null
        rc=$?
        grep -v '^clover: warning:\|^clover: memory:' "$TMP/r.err" > "$TMP/r.err1"
        if [ "$rc" -eq 0 ] || { [ "$rc" -eq 1 ] && [ "$(wc -l < "$TMP/r.err1")" -eq 1 ] && grep -q '^clover: error: ' "$TMP/r.err1"; }; then
            n=$((n + 1))
        else
            bad+=("gguf/$(basename "$f"): exit $rc: $(head -n 3 "$TMP/r.err1" | tr '\n' '|' | cut -c1-300)")
        fi
    done
    for f in test/fuzz-regressions/tokenizer/*; do
        [ -f "$f" ] && [ -n "$m" ] || continue
        # generate only when the prompt is not empty and fits the model's context
        if clover -m "$m" -f "$f" --tokenize > "$TMP/r.ids" &&
            { [ "$(tr ',' '\n' < "$TMP/r.ids" | grep -c .)" -eq 0 ] || [ "$(tr ',' '\n' < "$TMP/r.ids" | wc -l)" -ge 4000 ] ||
              clover -m "$m" -f "$f" -n 1 --temp 0 -c 0 -b 4096 > /dev/null; }; then
            n=$((n + 1))
        else
            bad+=("tokenizer/$(basename "$f"): $(why)")
        fi
    done
    if [ ${#bad[@]} -eq 0 ]; then
        pass "$n fuzzer inputs"
    else
        fail "${#bad[@]} of $((n + ${#bad[@]})) inputs: $(printf '%s; ' "${bad[@]:0:3}")"
    fi
fi
