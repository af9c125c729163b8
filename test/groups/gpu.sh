# gpu — build/clover-emu (clover.cu on the CPU, test/cuda_emu.h): --check-ops on every weight type in three thread orders; planted bugs (test/gpu_mutants.sh) must fail it
# seconds: 110
# The GPU kernels (clover.cu) executed on the CPU by test/cuda_emu.h (build/clover-emu, make
# cuda-emu): --check-ops on a tiny model of every weight type in the forward, reverse and random
# thread orders; the planted bugs of test/gpu_mutants.sh (a missing or divergent __syncthreads, an
# off-by-one index, a wrong rounding, a delta rule scanning its rows the wrong way) must each make
# it fail; the CPU build refuses --check-ops in one line.
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
if check "mutants: every planted bug caught" && have_emu; then
    if ! m=$(model q4_0 1 --layers 1); then
        fail "cannot generate the model"
    elif out=$(FIRST_CATCH=1 CXX_EMU=${CXX_EMU:-clang++} test/gpu_mutants.sh "$m" 2>&1); then
        pass "$(echo "$out" | sed 's/: caught.*//' | tr '\n' ';')"
    else
        fail "$(echo "$out" | grep -v ': caught' | tr '\n' ';' | cut -c1-300)"
    fi
fi
if check "cpu-build: ./clover --check-ops is one error line"; then
    if ! m=$(model q8_0 1 --layers 1); then
        fail "cannot generate the model"
    elif ! ./clover -m "$m" --check-ops > /dev/null 2> "$TMP/err" && [ "$(wc -l < "$TMP/err")" -eq 1 ] && grep -q '^clover: error: --check-ops' "$TMP/err"; then
        pass
    else
        fail "$(first_line "$TMP/err")"
    fi
fi
