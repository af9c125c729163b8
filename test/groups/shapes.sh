# shapes — logits, dumps and greedy text on a narrow model (GDN state 16) and real-shape slices
# seconds: 95
# Shapes beyond the tiny models, the whole prompt (p2, 64 tokens) in one batch: logits and every
# dump as for the tiny models, and a greedy text. narrow: n_embd 64 and a GDN state of 16, rows
# shorter than one 64-lane step of ggml_vec_dot_f32 (whose float tail differs from the other
# dots'). real: the 35B model's layer shapes, 16 experts of which 8 are used (the sum of 8 routing
# weights, in double as ggml_sum_rows adds), 4 layers, the real vocabulary for Q4_K_M.
for spec in "f16 narrow" "bf16 narrow" "f32 narrow" "q8_0 narrow" "q4_k narrow" \
    "q4_k_m real --layers 4 --experts 16 --vocab 248320" "q8_0 real --layers 4 --experts 16 --vocab 32768"; do
    read -r t shape opts <<< "$spec"
    name="$t $shape${opts:+ ($opts)}"
    n_vocab=$(echo "$opts" | sed -n 's/.*--vocab \([0-9]*\).*/\1/p')
    d=$TMP/sh-$t-$shape
    for what in dumps logits greedy; do
        check "$name: $what" || continue
        # shellcheck disable=SC2086
        if ! m=$(model "$t" 1 --shape "$shape" $opts); then
            fail "cannot generate the model"
        elif [ "$what" = greedy ]; then
            check_greedy_text "$m" "$t" "$P2" $([ "$shape" = real ] && echo 7 || echo 31)
        elif ! make_dumps "$m" "$P2" "$d"; then
            fail "$(why)"
        elif [ "$what" = dumps ]; then
            check_dumps "$t" "$d"
        else
            N_VOCAB=${n_vocab:-$N_VOCAB} check_logits "$t" "$d/mine.bin" "$d/theirs.bin" -m "$m" --logits "@$d/ids" "$TMP/theirs_ref.bin"
        fi
    done
done
