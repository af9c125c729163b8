# flash — -fa on/off/auto x f32/f16/bf16 caches vs llama.cpp with the same flags: one batch (tiled), ubatches of 7 and 1, the split path past 256 positions, narrow and real-shape slices, greedy texts (the model card's flags), draft-self, the preview pass
# seconds: 45
# Flash attention (-fa on|off|auto, llama.cpp's default auto = on): clover computes what ggml's CPU
# flash-attention op computes on each of its paths (one row at a time; tiled for a prompt batch of
# >= 64 rows with an F16 K and V, an F32 cache being cast to F16; the keys split over the -t threads
# for one row over >= 512 cache cells), compared with llama.cpp run with the same -ctk/-ctv/-fa/-ub/-t.
# (lib.sh's clover wrapper passes -fa off first; each check's own -fa comes later and wins.)

# base: P1, PG and m, the q8_0 model of most checks
base() { prompts && m=$(model q8_0) || { fail "cannot make the prompts or the model: $(why)"; return 1; }; }
# long_prompts: $TMP/p520.ids (520 ids of Python's random.Random(9)), p290.ids (its first 290),
# pd.ids (DRAFT_PROMPT)
long_prompts() {
    [ -s "$TMP/p520.ids" ] && return 0
    "$CMP" random 9 520 $N_VOCAB > "$TMP/p520.ids.part" && cut -d, -f1-290 "$TMP/p520.ids.part" > "$TMP/p290.ids" &&
        echo "$DRAFT_PROMPT" > "$TMP/pd.ids" && mv "$TMP/p520.ids.part" "$TMP/p520.ids" && return 0
    fail "build/cmp random failed"
    return 1
}

# flash_logits TYPE MODEL IDS_FILE ARGS...: clover --dump-logits vs build/ref --logits, both with ARGS
flash_logits() {
    local t=$1 mm=$2 f=$3
    shift 3
    if ! clover -m "$mm" --tokens "$(cat "$f")" --dump-logits "$TMP/fa_a.bin" "$@" > /dev/null ||
        ! ref -m "$mm" --logits "@$f" "$TMP/fa_b.bin" "$@" > /dev/null; then
        fail "$(why)"
    else
        check_logits "$t" "$TMP/fa_a.bin" "$TMP/fa_b.bin" -m "$mm" --logits "@$f" "$TMP/theirs_ref.bin" "$@"
    fi
}

# flash_greedy MODEL IDS N "CLOVER ARGS" "REF ARGS": clover -n N prints the prompt and llama.cpp's
# greedy continuation byte for byte (against the reference variant only: texts are not compared
# within a spread)
flash_greedy() {
    local mm=$1 ids=$2 n=$3 g
    local -a ca ra
    read -r -a ca <<< "$4"
    read -r -a ra <<< "$5"
    if [ "$VARIANT" != "$REFERENCE" ]; then
        skip "greedy texts with flash attention are compared against $REFERENCE only"
    elif ! g=$(ref -m "$mm" --greedy "$ids" $((n + 1)) "${ra[@]}"); then
        fail "$(why)"
    elif ! expected_text "$mm" "$ids" "$g" "$TMP/fa_gt.want"; then
        fail "ref --detok failed: $(first_line "$TMP/fa_gt.want.err")"
    elif ! clover -m "$mm" --tokens "$ids" -n "$n" --temp 0 "${ca[@]}" > "$TMP/fa_gt.got"; then
        fail "$(why)"
    elif cmp -s "$TMP/fa_gt.got" "$TMP/fa_gt.want"; then
        pass
    else
        fail "$(text_diff "$TMP/fa_gt.got" "$TMP/fa_gt.want")"
    fi
}

# every cache type x -fa, prompt p1 (135 rows) in one batch (tiled for f32/f16, as 3 key tiles);
# f16 and bf16 also in ubatches of 7 and of 1 row (one row at a time); K and V of different types
# (an F32 K on the per-row path)
for kv in f32 f16 bf16; do
    for fa in off on auto; do
        for ub in 512 7 1; do
            [ "$ub" != 512 ] && { [ "$fa" != on ] || [ "$kv" = f32 ]; } && continue
            check "logits q8_0 -ctk $kv -ctv $kv -fa $fa -ub $ub" && base || continue
            flash_logits q8_0 "$m" "$SHARED/p1.ids" -ctk "$kv" -ctv "$kv" -fa "$fa" -ub "$ub"
        done
    done
done
check "logits q8_0 -ctk bf16 -ctv f16 -fa on" && base && flash_logits q8_0 "$m" "$SHARED/p1.ids" -ctk bf16 -ctv f16 -fa on
check "logits q8_0 -ctk f32 -ctv bf16 -fa on -ub 7" && base && flash_logits q8_0 "$m" "$SHARED/p1.ids" -ctk f32 -ctv bf16 -fa on -ub 7
for kv in f16 bf16; do   # the dot products' SIMD twins and their scalar definitions
    check "-fa on -ctk $kv: SIMD vs CLOVER_SIMD=scalar logits bit-identical (q8_0, p1, -ub 512 and 7)" && base || continue
    out=
    for ub in 512 7; do
        if ! clover -m "$m" --tokens "$P1" --dump-logits "$TMP/fa_a.bin" -ctk "$kv" -ctv "$kv" -fa on -ub "$ub" > /dev/null ||
            ! CLOVER_SIMD=scalar clover -m "$m" --tokens "$P1" --dump-logits "$TMP/fa_b.bin" -ctk "$kv" -ctv "$kv" -fa on -ub "$ub" > /dev/null; then
            out=$(why)
        elif ! cmp -s "$TMP/fa_a.bin" "$TMP/fa_b.bin"; then
            out="-ub $ub: $("$CMP" "$TMP/fa_a.bin" "$TMP/fa_b.bin" $N_VOCAB 2>&1)"
        fi
    done
    if [ -z "$out" ]; then pass; else fail "$out"; fi
done

# the split path: after a batch of 289 (519) rows, 8 steps at 512 (768) cache cells, two chunks
# of 256 (384), each step's logits (clover: its result_output dump, whose first row is the batch's
# last); llama.cpp's own steps depend on -t there, so -t 1 and -t 2 must differ (else the path
# was not taken). -t 2 only: llama.cpp's spinning threads crawl when -t exceeds the cores.
# ref_steps P KV T: llama.cpp's 8 greedy steps' logits after prompt P, -fa on -t T, made once: prints the file
ref_steps() {
    local f="$TMP/fa_steps_$1_$2_t$3.bin"
    if [ ! -f "$f" ]; then
        ref -m "$m" --greedy "@$TMP/$1.ids" 8 --step-logits "$f.part" -ctk "$2" -ctv "$2" -fa on -t "$3" > /dev/null && mv "$f.part" "$f" || return 1
    fi
    echo "$f"
}
for spec in "f16 p290" "f32 p520"; do
    read -r kv p <<< "$spec"
    if check "split: 8 steps after $p, q8_0 -ctk $kv -fa on -t 2, each step's logits" && base && long_prompts; then
        rm -rf "$TMP/fa_d"
        if ! theirs=$(ref_steps "$p" "$kv" 2) ||
            ! clover -m "$m" --tokens "$(cat "$TMP/$p.ids")" -n 7 --temp 0 -ctk "$kv" -ctv "$kv" -fa on -t 2 \
                --dump-tensors "$TMP/fa_d" --dump-filter '^result_output$' > /dev/null; then
            fail "$(why)"
        else
            tail -c $((8 * N_VOCAB * 4)) "$TMP/fa_d/result_output.bin" > "$TMP/fa_a.bin"
            check_logits q8_0 "$TMP/fa_a.bin" "$theirs" -m "$m" --greedy "@$TMP/$p.ids" 8 --step-logits "$TMP/theirs_ref.bin" \
                -ctk "$kv" -ctv "$kv" -fa on -t 2
        fi
    fi
    if [ "$p" = p290 ] && check "split: llama.cpp's steps after p290 differ between -t 1 and -t 2 (the split path is taken)" && base && long_prompts; then
        if ! t2=$(ref_steps "$p" "$kv" 2) || ! t1=$(ref_steps "$p" "$kv" 1); then
            fail "$(why)"
        elif cmp -s "$t2" "$t1"; then
            fail "bit-identical: the steps did not take the split path"
        else
            pass "$("$CMP" "$t2" "$t1" $N_VOCAB 2>&1)"
        fi
    fi
done

# a narrow model (head_dim 32: shorter than ggml's 64-wide vector steps) and a real-shape slice
for spec in "f16 narrow" "q8_0 real --layers 4 --experts 16 --vocab 32768"; do
    read -r t shape opts <<< "$spec"
    nv=$(echo "$opts" | sed -n 's/.*--vocab \([0-9]*\).*/\1/p')
    for kv in f16 bf16; do
        [ "$shape" = real ] && [ "$kv" = f16 ] && continue
        check "logits $t $shape${opts:+ ($opts)} -ctk $kv -ctv $kv -fa on" && base || continue
        # shellcheck disable=SC2086
        mm=$(model "$t" 1 --shape "$shape" $opts) || { fail "cannot generate the model"; continue; }
        N_VOCAB=${nv:-$N_VOCAB} flash_logits "$t" "$mm" "$SHARED/p2.ids" -ctk "$kv" -ctv "$kv" -fa on
    done
    if [ "$shape" = narrow ] && check "logits $t $shape -ctk f32 -ctv f32 -fa on -ub 7" && base; then
        if mm=$(model "$t" 1 --shape "$shape"); then
            flash_logits "$t" "$mm" "$SHARED/p1.ids" -ctk f32 -ctv f32 -fa on -ub 7
        else
            fail "cannot generate the model"
        fi
    fi
done

# greedy texts; the model card's flags (not on the real-shape slice: reading its vocabulary for
# the end-of-generation ids costs more than the rest of this group)
for kv in f32 f16 bf16; do
    check "greedy q8_0 -ctk $kv -ctv $kv -fa on: 32 tokens after p1" && base || continue
    flash_greedy "$m" "$P1" 32 "-ctk $kv -ctv $kv -fa on" "-ctk $kv -ctv $kv -fa on"
done
card="-ctk bf16 -ctv bf16 --flash-attn on -b 256 -ub 256"
check "greedy q8_0, the model card's flags ($card): 64 tokens" && base && flash_greedy "$m" "$PG" 64 "$card" "-ctk bf16 -ctv bf16 -fa on -ub 256"

# draft-self stays exactly plain decoding: a verify row computes what the single step at its
# position computes (the split path past 256 positions included), whatever llama.cpp would do
# with a verify batch; true-continuation drafts are all accepted and the committed state is
# checked against plain decoding every round (8 layers: the second attention layer's K and V
# depend on the first one's output); n_max 31: verify batches of 32 rows, which the per-row path
# takes 16 at a time
for spec in "pd f16 2 model" "p290 f16 2 truth" "p290 f32 3 truth" "p290 f16 2 truth 31"; do
    read -r p kv th mode nmax <<< "$spec"
    extra=()
    [ "$mode" = truth ] && extra=(--test-drafts truth --test-check-state)
    [ -n "$nmax" ] && extra+=(--spec-draft-n-max "$nmax")
    check "draft-self (-fa on -ctk $kv -t $th, prompt $p, $mode drafts${nmax:+, n_max $nmax}) == plain greedy decoding" && long_prompts || continue
    if ! mm=$(model q8_0 1 --arch clover_moe --mask --layers 8); then
        fail "cannot generate the model"
    elif ! clover -m "$mm" --tokens "$(cat "$TMP/$p.ids")" -n 40 --temp 0 -ctk "$kv" -ctv "$kv" -fa on -t "$th" > "$TMP/fa_ds.want" ||
        ! clover -m "$mm" --tokens "$(cat "$TMP/$p.ids")" -n 40 --temp 0 -ctk "$kv" -ctv "$kv" -fa on -t "$th" --spec-type draft-self "${extra[@]}" > "$TMP/fa_ds.got"; then
        fail "$(grep -m 1 '^clover: error' "$TMP/err" || why)"
    elif ! cmp -s "$TMP/fa_ds.got" "$TMP/fa_ds.want"; then
        fail "$(text_diff "$TMP/fa_ds.got" "$TMP/fa_ds.want")"
    elif [ "$mode" = truth ] && ! grep -q '^state check: [0-9]* rounds identical' "$TMP/err"; then
        fail "no state check line: $(first_line "$TMP/err")"
    else
        pass "$(grep -o 'n_accept *= *[0-9]*' "$TMP/err")${extra:+, $(grep -o '^state check.*' "$TMP/err")}"
    fi
done

# the preview pass with -fa on: the bidirectional block against build/preview_ref's float64
# evaluation, within twice llama.cpp's own -fa on distance from float64 on the causal pass of the
# same tokens (its qwen35moe twin, measured here) plus PREVIEW_TOL; and batch-invariant
M=$((N_VOCAB - 1))   # build/gen's <|mask|> is the last id
pv_models() { pm=$(model f32 52 --arch clover_moe --mask) && pmt=$(model f32 52 --arch qwen35moe) || { fail "cannot generate the models"; return 1; }; }
for spec in "5,$M,77,$M,$M,900,$M,3 bf16" "9$(printf ",$M%.0s" $(seq 31)) f32"; do
    read -r blk kv <<< "$spec"
    check "preview (-fa on -ctk $kv, f32 seed 52, p12, a $(echo "$blk" | tr ',' '\n' | wc -l)-row block) vs build/preview_ref" && pv_models || continue
    if ! $TO "$PREVIEW_REF" "$pm" "$P3,$blk" 1 "$TMP/fa_pc.bin" --causal "$TMP/fa_pd.bin" 2> "$TMP/pv_ref.err" ||
        ! $TO "$PREVIEW_REF" "$pm" "$P3" "$blk" "$TMP/fa_pb.bin" 2> "$TMP/pv_ref.err"; then
        fail "preview_ref failed: $(first_line "$TMP/pv_ref.err")"
    elif ! ref -m "$pmt" --logits "$P3,$blk" "$TMP/fa_pr.bin" -ctk "$kv" -ctv "$kv" -fa on > /dev/null ||
        ! clover -m "$pm" --tokens "$P3" --preview-block "$blk" --dump-logits "$TMP/fa_pa.bin" -ctk "$kv" -ctv "$kv" -fa on > /dev/null; then
        fail "$(why)"
    else
        lm=$("$CMP" "$TMP/fa_pr.bin" "$TMP/fa_pd.bin" $N_VOCAB 2>&1 | sed -n 's/.* max \([^ ]*\) .*/\1/p')
        lim=$(awk -v a="${lm:-0}" -v b="$PREVIEW_TOL" 'BEGIN { printf "%.3g", 2 * a + b }')
        if out=$("$CMP" "$TMP/fa_pa.bin" "$TMP/fa_pb.bin" $N_VOCAB --max "$lim" 2>&1); then
            pass "$out; limit $lim, llama.cpp's causal max $lm"
        else
            fail "$out (limit max $lim: llama.cpp's -fa on causal max $lm vs float64)"
        fi
    fi
done
if check "preview -fa on: -t 1 -ub 512 vs -t 2 -ub 2 bit-identical (f32 seed 52, p12, 8-row block)" && pv_models; then
    if ! clover -m "$pm" --tokens "$P3" --preview-block "5,$M,77,$M,$M,900,$M,3" --dump-logits "$TMP/fa_pa.bin" -fa on -t 1 > /dev/null ||
        ! clover -m "$pm" --tokens "$P3" --preview-block "5,$M,77,$M,$M,900,$M,3" --dump-logits "$TMP/fa_pb.bin" -fa on -t 2 -tb 2 -ub 2 > /dev/null; then
        fail "$(why)"
    elif cmp -s "$TMP/fa_pa.bin" "$TMP/fa_pb.bin"; then
        pass
    else
        fail "$("$CMP" "$TMP/fa_pa.bin" "$TMP/fa_pb.bin" $N_VOCAB 2>&1)"
    fi
fi

# -fa's spellings (llama.cpp's common/arg.cpp), and the default: auto, which is on
if check "-fa spellings: on = enabled = true = 1 = auto = -1 = no -fa; off = disabled = false = 0; the two differ" && base; then
    out=
    for v in on enabled true 1 auto -1 none off disabled false 0; do
        if [ "$v" = none ]; then   # no -fa at all (the clover wrapper passes -fa off first)
            $TO "$CLOVER" -m "$m" --tokens "$PG" --dump-logits "$TMP/fa_f_$v.bin" > /dev/null 2> "$TMP/err" || { out="clover without -fa failed: $(first_line "$TMP/err")"; break; }
        else
            clover -m "$m" --tokens "$PG" --dump-logits "$TMP/fa_f_$v.bin" -fa "$v" > /dev/null || { out="-fa $v: $(why)"; break; }
        fi
        want=on
        case $v in off | disabled | false | 0) want=off ;; esac
        cmp -s "$TMP/fa_f_$v.bin" "$TMP/fa_f_$want.bin" || { out="-fa $v differs from -fa $want"; break; }
    done
    [ -z "$out" ] && cmp -s "$TMP/fa_f_on.bin" "$TMP/fa_f_off.bin" && out="-fa on and -fa off give the same logits"
    if [ -z "$out" ]; then pass; else fail "$out"; fi
fi
if check "-fa maybe: exit 1, one clover: error: line" && base; then
    if clover -m "$m" --tokens "$PG" -n 1 -fa maybe > /dev/null; then
        fail "accepted"
    elif [ "$(grep -c . "$TMP/err")" = 1 ] && grep -q '^clover: error: -fa needs on, off or auto' "$TMP/err"; then
        pass
    else
        fail "$(first_line "$TMP/err")"
    fi
fi
