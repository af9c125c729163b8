# gpu — build/clover-emu (clover.cu on the CPU, test/cuda_emu.h): --check-ops on every weight type in three thread orders; planted bugs (test/gpu_mutants.sh) must fail it
# seconds: 110
# The GPU kernels (clover.cu) executed on the CPU by test/cuda_emu.h (build/clover-emu, make
# cuda-emu): --check-ops on a tiny model of every weight type in the forward, reverse and random
# thread orders; the planted bugs of test/gpu_mutants.sh (a missing or divergent __syncthreads, an
# off-by-one index, a wrong rounding, a delta rule scanning its rows the wrong way) must each make
# it fail; the CPU build refuses --check-ops in one line. The emulation enforces sm_90's launch
# limits (build/emu_limits: each launch at a limit runs, each one past it is one error line), and a
# -ub 8192 batch with 8 experts used (65,536 expert rows, one past gridDim.y's limit) launches
# within them (CLOVER_EMU_LAUNCH_ONLY: every launch checked, none run).
have_emu() { [ -x "$EMU" ] || { skip "$EMU is missing (make cuda-emu builds it with clang++; make test does when clang++ is installed)"; return 1; }; }

for t in $TYPES; do
    for o in forward reverse random; do
        check "check-ops $t, $o order" && have_emu || continue
        if ! m=$(model "$t"); then
            fail "cannot generate the model"
            continue
        fi
        out="$TMP/gpu-$t-$o.txt"
        CLOVER_EMU_ORDER=$o $TO "$EMU" -m "$m" --check-ops > "$out" 2> "$TMP/err"
        rc=$?
        last=$(tail -n 1 "$out")
        n=$(grep -c ' PASS$' "$out")
        if [ "$rc" -eq 0 ] && [ "$last" = "check-ops: $n ops, $n passed, 0 failed" ] && [ "$n" -gt 0 ] && ! grep -q FAIL "$out"; then
            pass "$last"
        else
            fail "exit $rc: $(grep -m 1 FAIL "$out" | tr -s ' ')$(first_line "$TMP/err") | $last"
        fi
    done
done
# mutants NAME MODEL-ARGS FILTER...: the planted bugs of test/gpu_mutants.sh that FILTER picks (ONLY=
# or SKIP=), on a model of MODEL-ARGS: each must be caught
mutants() {
    local name=$1 margs=$2 m out
    shift 2
    check "$name" && have_emu || return
    if ! m=$(model $margs); then
        fail "cannot generate the model"
    elif out=$(env "$@" FIRST_CATCH=1 CXX_EMU=${CXX_EMU:-clang++} test/gpu_mutants.sh "$m" 2>&1); then
        pass "$(echo "$out" | sed 's/: caught.*//' | tr '\n' ';')"
    else
        fail "$(echo "$out" | grep -v ': caught' | tr '\n' ';' | cut -c1-300)"
    fi
}
mutants "mutants: every planted bug caught" "q4_0 1 --layers 1" SKIP='^(mma|q8_0|q8_k)-'
mutants "mutants on the tensor cores (K-quant batches): every planted bug caught" "q4_k_m 1 --layers 1" ONLY='^(mma|q8_k)-'
mutants "mutants on the tensor cores (Q8_0 batches): every planted bug caught" "q8_0 1 --layers 1" ONLY='^q8_0-'
if check "cpu-build: ./clover --check-ops is one error line"; then
    if ! m=$(model q8_0 1 --layers 1); then
        fail "cannot generate the model"
    elif ! ./clover -m "$m" --check-ops > /dev/null 2> "$TMP/err" && [ "$(wc -l < "$TMP/err")" -eq 1 ] && grep -q '^clover: error: --check-ops' "$TMP/err"; then
        pass
    else
        fail "$(first_line "$TMP/err")"
    fi
fi
if check "emu-limits: launches at and past sm_90's limits (grid, block, static and dynamic shared memory, opt-in) run or fail as sm_90 would" && have_emu; then
    if [ ! -x build/emu_limits ]; then
        fail "build/emu_limits is missing (make build/emu_limits)"
    else
        n_ok=0 n_cases=0 bad=
        while read -r c want; do
            n_cases=$((n_cases + 1))
            out=$(build/emu_limits "$c" 2> "$TMP/err")
            rc=$?
            if [ "$want" = fits ] && [ "$rc" -eq 0 ] && [ "$out" = ok ] && [ ! -s "$TMP/err" ]; then n_ok=$((n_ok + 1))
            elif [ "$want" = exceeds ] && [ "$rc" -eq 1 ] && [ -z "$out" ] && [ "$(wc -l < "$TMP/err")" -eq 1 ] && grep -q '^clover: error: ' "$TMP/err"; then
                n_ok=$((n_ok + 1))
            else bad="$bad$c: want $want, got exit $rc: $out $(first_line "$TMP/err"); "; fi
        done < <(build/emu_limits)
        if [ "$n_ok" -gt 0 ] && [ "$n_ok" -eq "$n_cases" ]; then pass "$n_ok launches"
        else fail "$n_ok of $n_cases cases as sm_90: ${bad:-no cases listed}"; fi
    fi
fi
if check "launch limits: a -ub 8192 batch with 8 of 8 experts used (65,536 expert rows) launches within them" && have_emu; then
    if ! m=$(model q8_0 1 --experts-used 8 --ctx 16384); then
        fail "cannot generate the model"
    elif ! "$CMP" random 3 8192 $N_VOCAB > "$TMP/p8192.ids"; then
        fail "build/cmp random failed"
    elif CLOVER_EMU_LAUNCH_ONLY=1 $TO "$EMU" -ngl 99 -m "$m" --tokens "$(cat "$TMP/p8192.ids")" -c 8200 -b 8192 -ub 8192 --dump-logits "$TMP/l8192.bin" > /dev/null 2> "$TMP/err" &&
        grep -q 'scratch .* (-ub 8192)' "$TMP/err"; then
        pass
    else
        fail "$(grep -m 1 error "$TMP/err")"
    fi
    rm -f "$TMP/l8192.bin"
fi
# shapes the tiny models do not reach: a GDN state of 16 (the delta rule's dot tail past 64) and
# n_embd 64 (narrow), and one real-shape layer (rows of 2048: 8 K-quant blocks a row, several
# blocks a lane's slot, Q6_K rows of several blocks split at upload; expert rows of 512; head dim 256)
for spec in "q8_0|--shape narrow" "q4_k_m|--shape real --layers 1 --experts 8 --vocab 4096"; do
    t=${spec%%|*}
    check "check-ops $t ${spec#*|}" && have_emu || continue
    # shellcheck disable=SC2086
    if ! m=$(model "$t" 1 ${spec#*|}); then
        fail "cannot generate the model"
        continue
    fi
    out="$TMP/gpu-shape.txt"
    $TO "$EMU" -m "$m" --check-ops > "$out" 2> "$TMP/err"
    rc=$?
    last=$(tail -n 1 "$out")
    n=$(grep -c ' PASS$' "$out")
    if [ "$rc" -eq 0 ] && [ "$last" = "check-ops: $n ops, $n passed, 0 failed" ] && [ "$n" -gt 0 ]; then pass "$last"
    else fail "exit $rc: $(grep -m 1 FAIL "$out" | tr -s ' ')$(first_line "$TMP/err") | $last"; fi
done
