# test/lib_gpu.sh — the checks of the GPU forward pass (clover.cu, -ngl 99) in one thread order of
# the emulation (test/cuda_emu.h; or on a GPU, test/gpu.sh), shared by the groups gpu_forward (the
# forward order) and gpu_orders (the reverse and random orders): logits against the CPU build (F32
# within 1e-4 in log-probability; other types within SPREAD, the float-order spread of llama.cpp's
# CPU variants, since the GPU sums in another order), prompts in ubatches of 1, 5 and 512 rows
# bit-identical, the preview pass against the CPU's, exact draft-self == plain decoding on the GPU
# for several n_max with and without reverse scan and coreset, forced rollbacks (random drafts), and
# GPU text == CPU text. GPU_ORDERS (default all three) names the orders that run.
GPU_ORDERS=${GPU_ORDERS:-forward reverse random}
have_emu() { [ -x "$EMU" ] || { skip "$EMU is missing (no clang++?)"; return 1; }; }
emu_in() { local ORDER=$1; shift; emu "$@"; }   # emu_in ORDER ARGS...: emu in that order
emu() { CLOVER_EMU_ORDER=$ORDER $TO "$EMU" -ngl 99 "$@" 2> "$TMP/err" && return 0; echo "clover-emu exit $?: $(first_line "$TMP/err")" > "$TMP/why"; return 1; }
gpu_prompt() { prompts && GPU_PROMPT=$(cut -d, -f1-12 <<< "$P1"); }   # the first 12 ids of prompt 1
ALL_EXTRAS="--arch clover_moe --mask --right-conv --reverse --coreset 0.5 --shift-logits --block-size 8"

# gpu_logits TYPE ARGS...: GPU vs CPU logits of GPU_PROMPT
gpu_logits() {
    local t=$1 lim out
    shift
    if ! gpu_prompt; then
        fail "$(why)"
        return 1
    fi
    if ! clover -m "$m" --tokens "$GPU_PROMPT" --dump-logits "$TMP/gl_cpu.bin" "$@" > /dev/null ||
       ! emu -m "$m" --tokens "$GPU_PROMPT" --dump-logits "$TMP/gl_gpu.bin" "$@" > /dev/null; then
        fail "$(why)"
        return 1
    fi
    if [ "$t" = f32 ]; then lim="--max 1e-4 --argmax 1"
    # the GPU's float order is another variant's: one activation whose rounding ratio sits on a tie
    # (q4_0: 40.49999 against the CPU's 40.5) flips a quant and moves every later position, as the
    # variants' own flips do; so the median is bounded by the variants' max, the max by their max
    else lim="--median ${SPREAD_MAX[$t]} --max ${SPREAD_MAX[$t]} --argmax 0.9"; fi
    # shellcheck disable=SC2086
    if out=$("$CMP" "$TMP/gl_gpu.bin" "$TMP/gl_cpu.bin" $N_VOCAB $lim 2>&1); then pass "$out"
    else fail "$out (limits $lim)"; fi
}

# order_checks ORDER: the checks of one thread order; every check in the forward order, a sample in
# the others (the emulation runs ~10 rows a second). Counted but not run when GPU_ORDERS leaves
# ORDER out.
order_checks() {
    local ORDER=$1 on="" all="" t kv n tag ns m mm flags args want
    [[ " $GPU_ORDERS " == *" $ORDER "* ]] || on=off
    [ "$ORDER" = forward ] && all=1
    # logits, every weight type, and the f16/bf16 caches (their rounding of q and p takes the F16 /
    # BF16 weights' limits: a last-bit difference in a probability flips its rounding)
    for t in $TYPES; do
        [ -z "$all" ] && [ "$t" != f32 ] && [ "$t" != q4_k_m ] && continue
        check "$ORDER: logits $t vs the CPU build" $on && have_emu || continue
        m=$(model "$t") || { fail "cannot generate the model"; continue; }
        gpu_logits "$t" -ctk f32 -ctv f32
    done
    for kv in f16 bf16; do
        [ -n "$all" ] || continue
        check "$ORDER: logits f32, $kv cache" $on && have_emu || continue
        m=$(model f32) || { fail "cannot generate the model"; continue; }
        gpu_logits "$kv" -ctk "$kv" -ctv "$kv"
    done
    # a row's logits do not depend on the batch around it: ubatches of 1 and 5 rows vs 512, bit for bit
    for n in 1 5; do
        [ -z "$all" ] && [ "$n" = 5 ] && continue
        check "$ORDER: batch q4_k_m -ub $n == -ub 512, bit for bit" $on && have_emu || continue
        if ! m=$(model q4_k_m); then
            fail "cannot generate the model"
        elif ! gpu_prompt; then
            fail "$(why)"
        elif ! { [ -f "$TMP/gb512-$ORDER.bin" ] || emu -m "$m" --tokens "$GPU_PROMPT" --dump-logits "$TMP/gb512-$ORDER.bin" -ub 512 > /dev/null; }; then
            fail "$(why)"
        elif emu -m "$m" --tokens "$GPU_PROMPT" --dump-logits "$TMP/gb$n.bin" -ub "$n" > /dev/null && cmp -s "$TMP/gb$n.bin" "$TMP/gb512-$ORDER.bin"; then
            pass
        else
            fail "$(why)$("$CMP" "$TMP/gb$n.bin" "$TMP/gb512-$ORDER.bin" $N_VOCAB 2>&1)"
        fi
    done
    # the preview pass vs the CPU's, with the clover_moe extras
    if check "$ORDER: preview f32, right conv, reverse scan, coreset" $on && have_emu; then
        # shellcheck disable=SC2086
        if m=$(model f32 51 $ALL_EXTRAS); then
            gpu_logits f32 -ctk f32 -ctv f32 --preview-block 3,4,5,0,0,0,0,0
        else
            fail "cannot generate the model"
        fi
    fi
    # exact draft-self == plain decoding on the GPU; model A accepts some drafts and rejects others,
    # so the rollback (restore, replay of the logged GDN rows) runs on the device; B has the reverse
    # scan and coreset, C the right conv too. n_max: 1 3 7 15 on model A in the forward order, 7 on
    # B and C, 3 on A in the other orders
    for tag in A B C; do
        [ -z "$all" ] && [ "$tag" != A ] && continue
        ns=3
        [ -n "$all" ] && ns="1 3 7 15" && [ "$tag" != A ] && ns=7
        for n in $ns; do
            check "$ORDER: drafts model $tag exact rule, n_max $n == none on the GPU" $on && have_emu || continue
            if ! draft_models; then
                fail "cannot generate the models"
                continue
            fi
            eval "m=\$DM_$tag"
            if ! want=$(output_of emu_in "$ORDER" -m "$m" --tokens "$DRAFT_PROMPT" -n 8 --temp 0 -ctk f32 -ctv f32); then
                fail "$(why)"
            elif emu -m "$m" --tokens "$DRAFT_PROMPT" -n 8 --temp 0 -ctk f32 -ctv f32 --spec-type draft-self --spec-draft-n-max "$n" > "$TMP/gd.txt" &&
               cmp -s "$TMP/gd.txt" "$want"; then
                pass "$(sed -n 's/^n_accept *= *//p' "$TMP/err") of $(sed -n 's/^n_drafted *= *//p' "$TMP/err") accepted"
            else
                fail "$(why)$(text_diff "$TMP/gd.txt" "$want")"
            fi
        done
    done
    if check "$ORDER: drafts model C random drafts (rollbacks) == none" $on && have_emu; then
        if ! draft_models; then
            fail "cannot generate the models"
        elif want=$(output_of emu_in "$ORDER" -m "$DM_C" --tokens "$DRAFT_PROMPT" -n 8 --temp 0 -ctk f32 -ctv f32) &&
           emu -m "$DM_C" --tokens "$DRAFT_PROMPT" -n 8 --temp 0 -ctk f32 -ctv f32 --spec-type draft-self --spec-draft-n-max 7 --test-drafts random --seed 3 > "$TMP/gd.txt" &&
           cmp -s "$TMP/gd.txt" "$want"; then
            pass
        else
            fail "$(why)$(text_diff "$TMP/gd.txt" "${want:-/dev/null}")"
        fi
    fi
    # GPU text == CPU text: the trained tiny model (real drafts accepted), and diffusion (blocks of 4)
    for args in "test/tiny/tiny-clover-f32.gguf|-f test/tiny/prompt.txt -n 24 --spec-type none" \
                "test/tiny/tiny-clover-f32.gguf|-f test/tiny/prompt.txt -n 24 --spec-type draft-self --spec-draft-n-max 15" \
                "diffusion|--tokens $DRAFT_PROMPT -n 8 --diffusion"; do
        mm=${args%%|*} flags=${args#*|}
        check "$ORDER: text ${mm##*/} $flags: GPU == CPU" $on && have_emu || continue
        if [ "$mm" = diffusion ] && ! mm=$(model f32 53 --arch clover_moe --mask --reverse --coreset 0.5 --block-size 4); then
            fail "cannot generate the model"
            continue
        fi
        # shellcheck disable=SC2086
        if clover -m "$mm" --temp 0 $flags > "$TMP/gt.want" && emu -m "$mm" --temp 0 $flags > "$TMP/gt.txt" && cmp -s "$TMP/gt.txt" "$TMP/gt.want"; then
            # plain decoding runs each step as one captured CUDA graph (replayed at every position)
            if [[ "$flags" == *none* ]] && ! grep -q '^clover: GPU decode step: one CUDA graph of [0-9]* ' "$TMP/err"; then
                fail "no CUDA graph for the decode step: $(first_line "$TMP/err")"
            else pass "$(sed -n 's/^clover: GPU decode step: one CUDA graph of \([0-9]*\) .*/decode step: a graph of \1 kernels and copies/p' "$TMP/err")"; fi
        else fail "$(why)$(text_diff "$TMP/gt.txt" "$TMP/gt.want")"; fi
    done
    # the decode step's graph stays fused: at most 35 kernels and copies on the 4-layer q8_0 model
    # (3 GDN layers of 8, an attention layer of 8, the first norm, the head, the argmax)
    if [ -n "$all" ] && check "$ORDER: graph: a q8_0 decode step is at most 35 kernels and copies" $on && have_emu; then
        if emu -m "$(model q8_0)" --tokens "$GPU_PROMPT" -n 2 --temp 0 > /dev/null; then
            n=$(sed -n 's/^clover: GPU decode step: one CUDA graph of \([0-9]*\) .*/\1/p' "$TMP/err")
            if [ -n "$n" ] && [ "$n" -le 35 ]; then pass "$n"; else fail "${n:-no graph}"; fi
        else fail "$(why)"; fi
    fi
}
