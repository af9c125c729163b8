# stats — the statistics lines: upstream's formats and their arithmetic
# seconds: 10
# The statistics (spec S3.5): upstream's line formats, and their arithmetic (build/cmp stats). The
# number of generated tokens comes from llama.cpp (build/ref --greedy on the qwen35moe twin).
for spec in "none" "draft-self --spec-draft-n-max 7 --test-drafts truth" "draft-self --spec-draft-n-max 3" "draft-self --spec-draft-n-max 2 --test-drafts random"; do
    check "--spec-type $spec -n 16" || continue
    # shellcheck disable=SC2086
    if ! m=$(model q8_0 73 --arch clover_moe --mask --right-conv --reverse --coreset 0.9 --block-size 16) ||
        ! tw=$(model q8_0 73 --arch qwen35moe); then
        fail "cannot generate the models"
    elif ! g=$(output_of ref -m "$tw" --greedy "$DRAFT_PROMPT" 17); then
        fail "$(why)"
    elif ! clover -m "$m" --tokens "$DRAFT_PROMPT" -n 16 --temp 0 -ctk f32 -ctv f32 --spec-type $spec > /dev/null; then
        fail "$(why)"
    elif out=$("$CMP" stats "$TMP/err" "$(cat "$g")" "$(eog_ids "$tw")" "$spec" 2>&1); then
        pass "$out"
    else
        fail "$out"
    fi
done
