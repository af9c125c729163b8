# preview — clover --preview-block vs build/preview_ref, an independent float64 evaluation of the preview pass, every combination of the clover_moe extras
# seconds: 14
# The preview pass (spec S2.2) against build/preview_ref, written from the specification
# (test/preview_ref.c): clover --preview-block commits the prompt causally and runs one preview pass
# over the block right after it. F32 models with every combination of the extras (right conv taps,
# reverse GDN branch, coreset routing with p = 0.5 / 0.9 / 0.1, the last one smaller than top-k);
# blocks with and without mask ids, of 1 to 32 rows; prompts of 1, 2 (conv ring partly zero) and 12
# tokens. The limit is on the largest |delta log-softmax| over all rows and the vocabulary; clover's
# float orders (llama.cpp's) leave about 2e-6 (PREVIEW_TOL and the prompt P3: test/lib.sh).
M=$((N_VOCAB - 1))   # build/gen's <|mask|> is the last id
B1=12                                                  # one row, no mask
B4=12,$M,$M,$M                                         # a draft-self block: id_last and masks
B8=5,$M,77,$M,$M,900,$M,3                              # masks and ids mixed
B16=981,929,143,248,24,627,1022,457,188,718,123,757,667,899,353,811   # Random(22), 16 ids below M
B32=9$(printf ",$M%.0s" $(seq 31))                     # a full 32-row block: id_last and 31 masks
PROMPTS=(7 7,300 "$P3") BLOCKS=("$B1" "$B4" "$B8" "$B16" "$B32")
PNAMES=(p1 p2 p12) BNAMES=(b1 b4 b8 b16 b32)
ALL_EXTRAS="--arch clover_moe --mask --right-conv --reverse --coreset 0.5 --shift-logits --block-size 8"

# preview_check MODEL PROMPT_IDS BLOCK_IDS: clover's preview logits vs preview_ref's
preview_check() {
    local m=$1 p=$2 b=$3 out
    if [ ! -x "$PREVIEW_REF" ]; then
        fail "$PREVIEW_REF is missing (make build/preview_ref)"
    elif ! clover -m "$m" --tokens "$p" --preview-block "$b" --dump-logits "$TMP/pv_a.bin" -ctk f32 -ctv f32 > /dev/null; then
        fail "$(why)"
    elif ! $TO "$PREVIEW_REF" "$m" "$p" "$b" "$TMP/pv_b.bin" -v 2> "$TMP/pv_ref.err"; then
        fail "preview_ref failed: $(first_line "$TMP/pv_ref.err")"
    elif out=$("$CMP" "$TMP/pv_a.bin" "$TMP/pv_b.bin" $N_VOCAB --max $PREVIEW_TOL 2>&1); then
        pass "max $(echo "$out" | sed -n 's/.* max \([^ ]*\) .*/\1/p')"
    else
        fail "$out; limit max $PREVIEW_TOL; $(grep -o 'smallest.*' "$TMP/pv_ref.err")"
    fi
}

# every combination of the extras, one model each (a seed of its own), with a multi-row block (the
# extras only act across rows); prompts and blocks rotate
i=0
for rc in "" --right-conv; do
    for rev in "" --reverse; do
        for core in 0 0.5 0.9 0.1; do
            seed=$((31 + i)) pi=$((i % 3)) bi=$((1 + i % 4))
            i=$((i + 1))
            check "f32 seed $seed ${rc:---no-right-conv} ${rev:---no-reverse} coreset $core ${PNAMES[$pi]} ${BNAMES[$bi]}" || continue
            # shellcheck disable=SC2086
            if m=$(model f32 "$seed" --arch clover_moe --mask $rc $rev --coreset "$core"); then
                preview_check "$m" "${PROMPTS[$pi]}" "${BLOCKS[$bi]}"
            else
                fail "cannot generate the model"
            fi
        done
    done
done
# everything at once, shifted logits (the logits are the same, only their reading changes) and a
# block size of 8, with blocks up to 32 rows (a preview pass is not limited to block_size)
for pb in "0 0" "1 2" "2 1" "2 2" "2 3" "2 4"; do
    read -r pi bi <<< "$pb"
    check "f32 seed 51 all extras, shift-logits, block-size 8: ${PNAMES[$pi]} ${BNAMES[$bi]}" || continue
    # shellcheck disable=SC2086
    if m=$(model f32 51 $ALL_EXTRAS); then
        preview_check "$m" "${PROMPTS[$pi]}" "${BLOCKS[$bi]}"
    else
        fail "cannot generate the model"
    fi
done
# no extras: bidirectional attention, the causal conv over [ring | block], a forward scan from a
# copy of S, plain top-k
if check "f32 seed 52 no extras: p12 b8"; then
    if m=$(model f32 52 --arch clover_moe --mask); then
        preview_check "$m" "$P3" "$B8"
    else
        fail "cannot generate the model"
    fi
fi
# threads and ubatch size do not change the preview pass (one batch, whatever -ub)
if check "-t 1 -ub 512 vs -t 2 -ub 2: bit-identical (f32 seed 51, p12 b16)"; then
    # shellcheck disable=SC2086
    if ! m=$(model f32 51 $ALL_EXTRAS); then
        fail "cannot generate the model"
    elif ! clover -m "$m" --tokens "$P3" --preview-block "$B16" --dump-logits "$TMP/pv_a.bin" -ctk f32 -ctv f32 -t 1 > /dev/null ||
        ! clover -m "$m" --tokens "$P3" --preview-block "$B16" --dump-logits "$TMP/pv_b.bin" -ctk f32 -ctv f32 -t 2 -tb 2 -ub 2 > /dev/null; then
        fail "$(why)"
    elif cmp -s "$TMP/pv_a.bin" "$TMP/pv_b.bin"; then
        pass
    else
        fail "$("$CMP" "$TMP/pv_a.bin" "$TMP/pv_b.bin" $N_VOCAB 2>&1)"
    fi
fi
# preview_ref's causal pass against clover --dump-logits: the committed state it builds is right
if check "preview_ref causal logits == clover --dump-logits (f32 seed 52, p12)"; then
    if ! m=$(model f32 52 --arch clover_moe --mask); then
        fail "cannot generate the model"
    elif ! clover -m "$m" --tokens "$P3" --dump-logits "$TMP/pv_c.bin" -ctk f32 -ctv f32 > /dev/null; then
        fail "$(why)"
    elif ! $TO "$PREVIEW_REF" "$m" "$P3" "$B1" "$TMP/pv_b.bin" --causal "$TMP/pv_d.bin" 2> "$TMP/pv_ref.err"; then
        fail "preview_ref failed: $(first_line "$TMP/pv_ref.err")"
    elif out=$("$CMP" "$TMP/pv_c.bin" "$TMP/pv_d.bin" $N_VOCAB --median $PREVIEW_TOL --p99 $PREVIEW_TOL 2>&1); then
        pass "$out"
    else
        fail "$out"
    fi
fi
