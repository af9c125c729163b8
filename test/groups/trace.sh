# trace — --trace: per-round accepted/drafted counts add up to n_accept/n_drafted
# seconds: 1
# --trace prints one block per draft-self round (README "One draft-self round"): the per-round
# counts must add up to the final statistics, the text must not change, and tokens are escaped
# (build/cmp trace).
for mode in model random truth relaxed; do
    check "$mode drafts: per-round accepted and drafted counts sum to n_accept and n_drafted" || continue
    extra=()
    case $mode in
        random|truth) extra=(--test-drafts "$mode") ;;
        relaxed) extra=(--spec-accept-ratio 0.3 --spec-accept-delta 10) ;;
    esac
    args=(--tokens "$DRAFT_PROMPT" -n 24 --temp 0 --spec-type draft-self --spec-draft-n-max 7 "${extra[@]}")
    if ! m=$(model q8_0 1 --arch clover_moe --mask); then
        fail "cannot generate the model"
    elif ! clover -m "$m" "${args[@]}" > "$TMP/tr0.txt" || ! clover -m "$m" "${args[@]}" --trace > "$TMP/tr.txt"; then
        fail "$(why)"
    elif ! cmp -s "$TMP/tr0.txt" "$TMP/tr.txt"; then
        fail "--trace changed the text: $(text_diff "$TMP/tr.txt" "$TMP/tr0.txt")"
    elif out=$("$CMP" trace "$TMP/err" "$mode" 2>&1); then
        pass "$out"
    else
        fail "$out"
    fi
done
