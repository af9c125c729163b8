# gpu_forward — the GPU forward pass (clover.cu, -ngl 99) on build/clover-emu vs the CPU build, forward thread order: logits, batches, the preview pass, exact draft-self, rollbacks, diffusion, dumps, refusals
# seconds: 175
# The checks of test/lib_gpu.sh in the emulation's forward order (test/gpu.sh runs this group
# against clover-cuda on a GPU, GPU_ORDERS=forward), then --dump-tensors against the CPU's and the
# refusals (-ngl split, a GPU too small), in the last order of GPU_ORDERS. Group gpu_orders repeats
# a sample of lib_gpu.sh's checks in the other two orders.
. test/lib_gpu.sh
order_checks forward
ORDER=${GPU_ORDERS##* }   # the checks below run in the last order

# --dump-tensors on the GPU against the CPU's, name by name (test/dumpcmp.py, F32: 1e-4 of each
# tensor's largest value): the GPU writes every name the CPU writes and no other (dumpcmp fails on
# a name either side lacks); a prompt and 3 decode steps, and a preview pass with the extras; and
# the comparison must fail against another model's dumps
d=$TMP/gdump
# gpu_dumps TAG: the CPU's and the GPU's dumps of case TAG (f32 or preview) in $d/TAG-cpu, $d/TAG-gpu, made once
gpu_dumps() {
    local mm flags
    [ -f "$d/$1.done" ] && return 0
    gpu_prompt || return 1
    if [ "$1" = f32 ]; then
        mm=$(model f32) && flags="--tokens $GPU_PROMPT -n 3" || return 1
    else
        # shellcheck disable=SC2086
        mm=$(model f32 51 $ALL_EXTRAS) && flags="--tokens 1,2,3 --preview-block 3,4,5,0,0,0,0,0 --dump-logits $TMP/gdump.bin" || return 1
    fi
    rm -rf "$d/$1-cpu" "$d/$1-gpu"
    # shellcheck disable=SC2086
    clover -m "$mm" --temp 0 -ctk f32 -ctv f32 $flags --dump-tensors "$d/$1-cpu" > /dev/null &&
        emu -m "$mm" --temp 0 -ctk f32 -ctv f32 $flags --dump-tensors "$d/$1-gpu" > /dev/null && touch "$d/$1.done"
}
for tag in f32 preview; do
    check "dumps $tag: GPU --dump-tensors == CPU's, every name, within 1e-4" && have_emu || continue
    if gpu_dumps "$tag" && out=$(python3 test/dumpcmp.py "$d/$tag-gpu" "$d/$tag-cpu" --tol 1e-4 2>&1); then
        pass "$(echo "$out" | tail -n 1)"
    else
        fail "$(why)$(echo "${out:-}" | tail -n 3 | tr '\n' ' ')"
    fi
done
if check "dumps: the comparison fails against another model's CPU dumps" && have_emu; then
    if gpu_dumps f32 && m=$(model f32 2) &&
       clover -m "$m" --tokens "$GPU_PROMPT" -n 3 --temp 0 -ctk f32 -ctv f32 --dump-tensors "$d/other" > /dev/null &&
       ! python3 test/dumpcmp.py "$d/f32-gpu" "$d/other" --tol 1e-4 --skip . > "$TMP/gdneg.txt" 2>&1 && grep -q ' disagree' "$TMP/gdneg.txt"; then
        pass "$(grep -m 1 ' disagree' "$TMP/gdneg.txt" | cut -c1-100)"
    else
        fail "$(why)dumpcmp.py passed"
    fi
fi

# refusals: one line, exit 1 (-c 2^30: a KV cache of 512 GiB, more than any GPU has)
for args in "-ngl 2|splitting" "-ngl 99 -c 1073741824|smaller -c or -ub"; do
    flags=${args%%|*} want=${args#*|}
    check "refused: $flags" && have_emu || continue
    # shellcheck disable=SC2086
    if ! m=$(model q8_0 1 --ctx 1073741824); then
        fail "cannot generate the model"
    elif ! $TO "$EMU" -m "$m" -p hello -n 4 $flags > /dev/null 2> "$TMP/err" &&
       [ "$(grep -c '^clover: error:' "$TMP/err")" -eq 1 ] && grep -q -- "$want" "$TMP/err"; then
        pass "$(grep '^clover: error' "$TMP/err" | cut -c1-120)"
    else
        fail "$(first_line "$TMP/err")"
    fi
done

# every matrix Q4_K (token_embd and ssm_alpha/beta too, an F32 router), 2 of 4 experts, vocabulary
# 512, 40 ids in one batch, two seeds, in the forward order: the GPU computes each row of a batch
# as a decode step, which is the CPU's order with -ub 1 (llama.cpp's too), so it is held to F32's
# limits against that. (The CPU's 40-row batch takes llama.cpp's batch kernels: on these seeds
# their float order moves the Q8_K rounding of a SwiGLU row, and its logits leave its -ub 1's by a
# median of 3e-2 to 5e-2, as llama.cpp's own do; see group batch.)
on=
[[ " $GPU_ORDERS " == *" forward "* ]] || on=off
for n in 6 7; do
    check "forward: q4_k 40-row batch, seed $n, == the CPU's -ub 1 within 1e-4" $on && have_emu || continue
    if ! m=$(model q4_k "$n" --experts 4 --vocab 512); then
        fail "cannot generate the model"
    elif ! ids=$("$CMP" random "$n" 40 512); then
        fail "build/cmp random failed"
    elif clover -m "$m" --tokens "$ids" --dump-logits "$TMP/gq_cpu.bin" -ctk f32 -ctv f32 -ub 1 > /dev/null &&
        emu_in forward -m "$m" --tokens "$ids" --dump-logits "$TMP/gq_gpu.bin" -ctk f32 -ctv f32 > /dev/null; then
        if out=$("$CMP" "$TMP/gq_gpu.bin" "$TMP/gq_cpu.bin" 512 --max 1e-4 --argmax 1 2>&1); then pass "$out"
        else fail "$out"; fi
    else
        fail "$(why)"
    fi
done
