# drafts — spec S3.6: exact rule == none for every n_max and into -c, with and without reverse / coreset; --test-check-state; --test-drafts truth / random; relaxed rule
# seconds: 18
# The checks of spec S3.6 beyond group draft, on clover_moe models with several extras
# (draft_models, test/lib.sh). A 3-layer model has no attention layer; with shift_logits its first
# draft comes from preview row 0, which then sees exactly what causal row 0 sees, so about one draft
# per round is accepted and the rest rejected: partial acceptance and rollback in most rounds. The
# other models accept (almost) nothing on their own, so test-only drafts cover acceptance there:
# --test-drafts truth (every draft must be accepted), random (text unchanged) and the relaxed rule
# with random drafts (partial acceptance).

# plain MODEL ARGS...: the path of plain decoding's text (--spec-type none) of DRAFT_PROMPT, made once
plain() {
    local m=$1
    shift
    output_of clover -m "$m" --tokens "$DRAFT_PROMPT" --temp 0 -ctk f32 -ctv f32 "$@"
}

# same_as_none MODEL ARGS... : clover --spec-type draft-self ARGS must print plain decoding's text
# for the same -n and -c (the first two options of ARGS: -n N [-c C]); fails the check otherwise;
# its stderr is left in $TMP/ds.err
same_as_none() {
    local m=$1 want lim=("$2" "$3")
    shift
    [ "$3" = -c ] && lim+=("$3" "$4")
    if ! want=$(plain "$m" "${lim[@]}"); then
        fail "$(why)"
        return 1
    fi
    if ! clover -m "$m" --tokens "$DRAFT_PROMPT" --temp 0 -ctk f32 -ctv f32 --spec-type draft-self "$@" > "$TMP/ds.txt"; then
        fail "$(why)"
        return 1
    fi
    cp "$TMP/err" "$TMP/ds.err"
    if ! cmp -s "$TMP/ds.txt" "$want"; then
        fail "$(text_diff "$TMP/ds.txt" "$want")"
        return 1
    fi
    return 0
}

stat_of() { sed -n "s/^$1 *= *//p" "$TMP/ds.err" | head -n 1; }   # stat_of n_accept -> 12
rounds_of() { sed -n 's/^mean accepted length.*(\([0-9]*\) rounds).*/\1/p' "$TMP/ds.err"; }
models() { draft_models || { fail "cannot generate the models"; return 1; }; }

# 1. exact rule == --spec-type none, every n_max, also into -c (the 3-layer models)
for tag in A B C; do
    for ctx in 0 28; do
        [ "$tag" = C ] && [ "$ctx" = 28 ] && continue
        for n in 1 2 3 7 15 31; do
            [ "$ctx" = 28 ] && [ "$n" != 3 ] && [ "$n" != 31 ] && continue
            [ "$tag" = C ] && [ "$n" != 3 ] && [ "$n" != 31 ] && continue
            check "model $tag exact rule, --spec-draft-n-max $n == none (-n 20 -c $ctx)" || continue
            models || continue
            eval "m=\$DM_$tag"
            same_as_none "$m" -n 20 -c "$ctx" --spec-draft-n-max "$n" || continue
            acc=$(stat_of n_accept) drf=$(stat_of n_drafted)
            # model A must really accept some drafts and reject others, or the rollback after a
            # partial acceptance goes untested
            if [ "$tag" = A ] && [ "$n" -gt 1 ] && ! { [ "${acc:-0}" -gt 0 ] && [ "${acc:-0}" -lt "${drf:-0}" ]; }; then
                fail "expected partial acceptance: n_accept $acc of n_drafted $drf"
            else
                pass "$acc of $drf accepted"
            fi
        done
    done
done

# several denoising steps, the p-min cut and the n-min rule change the drafts, never the text
for args in "--spec-draft-steps 3" "--spec-draft-p-min 0.014 --spec-draft-n-min 2"; do
    check "model B exact rule, n_max 7 $args == none" || continue
    models || continue
    # shellcheck disable=SC2086
    same_as_none "$DM_B" -n 20 --spec-draft-n-max 7 $args && pass "$(stat_of n_accept) of $(stat_of n_drafted) accepted"
done

# 2. the committed state equals plain decoding's after every round, bit for bit
for tn in "A 3" "B 15" "C 3"; do
    read -r tag n <<< "$tn"
    check "model $tag --test-check-state, n_max $n" || continue
    models || continue
    eval "m=\$DM_$tag"
    same_as_none "$m" -n 16 --spec-draft-n-max "$n" --test-check-state || continue
    rounds=$(rounds_of)
    if [ -n "$rounds" ] && grep -q "^state check: $rounds rounds identical" "$TMP/ds.err"; then
        pass "$rounds rounds identical, $(stat_of n_accept) accepted"
    else
        fail "$(grep '^state check' "$TMP/ds.err") vs ${rounds:-?} rounds"
    fi
done
# partial acceptance through the relaxed rule with random drafts (entropy 0), f16 KV rows
if check "model C --test-check-state, relaxed rule with random drafts, f16 cache" && models; then
    if clover -m "$DM_C" --tokens "$DRAFT_PROMPT" -n 16 --temp 0 --spec-type draft-self --spec-draft-n-max 7 \
        --test-drafts random --seed 5 --spec-accept-ratio 0.05 --spec-accept-delta 0 --test-check-state > /dev/null; then
        cp "$TMP/err" "$TMP/ds.err"
        rounds=$(rounds_of)
        if [ -n "$rounds" ] && grep -q "^state check: $rounds rounds identical" "$TMP/ds.err" && [ "$(stat_of n_relaxed)" -gt 0 ]; then
            pass "$rounds rounds, $(stat_of n_relaxed) relaxed accepts"
        else
            fail "$(grep '^state check' "$TMP/ds.err"); n_relaxed $(stat_of n_relaxed)"
        fi
    else
        fail "$(why)"
    fi
fi

# 3. true-continuation drafts: all accepted; random drafts: the text is unchanged
for tn in "A 2" "A 15" "C 7"; do
    read -r tag n <<< "$tn"
    if check "model $tag --test-drafts truth, n_max $n: every draft accepted" && models; then
        eval "m=\$DM_$tag"
        if same_as_none "$m" -n 20 --spec-draft-n-max "$n" --test-drafts truth; then
            acc=$(stat_of n_accept) drf=$(stat_of n_drafted)
            if [ "${drf:-0}" -gt 0 ] && [ "$acc" = "$drf" ]; then pass "$acc of $drf"; else fail "n_accept $acc of n_drafted $drf"; fi
        fi
    fi
    if check "model $tag --test-drafts random, n_max $n: text unchanged" && models; then
        eval "m=\$DM_$tag"
        same_as_none "$m" -n 20 --spec-draft-n-max "$n" --test-drafts random && pass "$(stat_of n_accept) of $(stat_of n_drafted) accepted"
    fi
done
if check "model A --test-drafts truth into -c 28: every draft accepted" && models; then
    if same_as_none "$DM_A" -n 40 -c 28 --spec-draft-n-max 7 --test-drafts truth; then
        acc=$(stat_of n_accept) drf=$(stat_of n_drafted)
        if [ "${drf:-0}" -gt 0 ] && [ "$acc" = "$drf" ]; then pass "$acc of $drf"; else fail "n_accept $acc of n_drafted $drf"; fi
    fi
fi

# 3b. --spec-draft-adaptive drafts only as many tokens as pay, from measured times: whatever it
# chooses, the exact rule prints plain decoding's text (300 tokens, before this model's first end
# of generation); with true-continuation drafts, whose only cost is the verify batch, long drafts
# pay (n_max 15), so it drafts, and every draft is accepted
for args in "--test-drafts truth" "--test-drafts random" ""; do
    for n in 3 15; do
        check "--spec-draft-adaptive${args:+ $args}, n_max $n: text unchanged" || continue
        models || continue
        # shellcheck disable=SC2086
        same_as_none "$DM_A" -n 300 --spec-draft-n-max "$n" --spec-draft-adaptive $args || continue
        acc=$(stat_of n_accept) drf=$(stat_of n_drafted)
        if [ "$args" = "--test-drafts truth" ] && ! { [ "${drf:-0}" -gt 0 ] && [ "$acc" = "$drf" ]; }; then
            fail "true drafts: n_accept $acc of n_drafted $drf (expected all accepted, some drafted)"
        else
            pass "$acc of $drf accepted, $(rounds_of) rounds"
        fi
    done
done

# 4. the relaxed rule: deterministic, and every logged relaxed acceptance satisfies it (build/cmp
# relaxed)
for spec in "A 0.02 6.47" "C 0.05 0.5 --test-drafts random --seed 5"; do
    read -r tag ratio delta more <<< "$spec"
    args=(--spec-accept-ratio "$ratio" --spec-accept-delta "$delta" ${more:+$more})
    check "model $tag relaxed rule (${args[*]}): deterministic, every logged acceptance satisfies it" || continue
    models || continue
    eval "m=\$DM_$tag"
    if ! clover -m "$m" --tokens "$DRAFT_PROMPT" -n 20 --temp 0 --spec-type draft-self --spec-draft-n-max 7 "${args[@]}" > "$TMP/rl1.txt"; then
        fail "$(why)"
        continue
    fi
    cp "$TMP/err" "$TMP/rl1.err"
    if ! clover -m "$m" --tokens "$DRAFT_PROMPT" -n 20 --temp 0 --spec-type draft-self --spec-draft-n-max 7 "${args[@]}" > "$TMP/rl2.txt"; then
        fail "$(why)"
    elif ! cmp -s "$TMP/rl1.txt" "$TMP/rl2.txt"; then
        fail "not deterministic: $(text_diff "$TMP/rl1.txt" "$TMP/rl2.txt")"
    elif out=$("$CMP" relaxed "$TMP/rl1.err" "$ratio" "$delta" 2>&1); then
        pass "$out"
    else
        fail "$out"
    fi
done
