#!/usr/bin/env bash
# test/fuzz.sh — run the libFuzzer harnesses for a bounded time (what `make fuzz` runs).
#
#   test/fuzz.sh [SECONDS]     default 60; both harnesses run at once (CI has 2 cores);
#                              FUZZ_JOBS=N runs N workers per harness
#
# Seeds: build/gen --shape micro models (both architectures, several weight types) for fuzz_gguf;
# the texts of test/texts/ for fuzz_tokenizer (vocabulary: a tiny build/gen model); and the files of
# test/fuzz-regressions/. The corpora grow in build/fuzz/corpus-*/ across runs. A crash, leak, hang
# (> 10 s per input), run past 2 GB or sanitizer report stops the harness and leaves the input in
# build/fuzz/crash-*; this script then exits 1. Turn each such file into a regression test: copy it
# to test/fuzz-regressions/gguf/ or test/fuzz-regressions/tokenizer/ (test/run.sh, group
# `regressions`, replays them through clover).
set -u
cd "$(dirname "$0")/.." || exit 1
SECONDS_EACH=${1:-60}
JOBS=${FUZZ_JOBS:-1}
F=$PWD/build/fuzz
for b in $F/fuzz_gguf $F/fuzz_tokenizer build/gen; do
    [ -x "$b" ] || { echo "fuzz.sh: $b is missing; run make fuzz" >&2; exit 1; }
done

mkdir -p $F/seeds-gguf $F/seeds-tokenizer $F/corpus-gguf $F/corpus-tokenizer
gen() { build/gen -o "$F/seeds-gguf/$1.gguf" --shape micro --layers 2 "${@:2}" > /dev/null 2>&1 || exit 1; }
gen q35-f32 --type f32
gen q35-q8_0 --type q8_0 --nextn 1
gen q35-mix --type q4_k_m --layers 4
gen q35-bf16 --type bf16 --experts 4 --experts-used 2
gen clover-q4_0 --type q4_0 --arch clover_moe --mask --right-conv --reverse --block-size 4
build/gen -o $F/model.gguf --type q8_0 --layers 1 > /dev/null 2>&1 || exit 1
cp test/texts/*.txt $F/seeds-tokenizer/
cp test/fuzz-regressions/tokenizer/* $F/seeds-tokenizer/ 2>/dev/null
cp test/fuzz-regressions/gguf/* $F/seeds-gguf/ 2>/dev/null

# run_one HARNESS: in its own folder (libFuzzer's -jobs writes fuzz-N.log into the current one).
# -close_fd_mask=3: clover's stdout and its one-line rejections on stderr are silenced; libFuzzer's
# and the sanitizers' reports still come through (libFuzzer keeps its own descriptor).
run_one() {
    local h=$1
    rm -rf "$F/run-$h" && mkdir -p "$F/run-$h" && rm -f "$F"/crash-$h-*
    (cd "$F/run-$h" && FUZZ_MODEL=$F/model.gguf "$F/fuzz_$h" "$F/corpus-$h" "$F/seeds-$h" \
        -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 -close_fd_mask=3 -print_final_stats=1 \
        -jobs="$JOBS" -workers="$JOBS" -artifact_prefix="$F/crash-$h-" > "$F/fuzz_$h.log" 2>&1)
}

echo "== fuzz_gguf and fuzz_tokenizer: $SECONDS_EACH s each, $JOBS worker(s) each"
run_one gguf & pid_gguf=$!
run_one tokenizer & pid_tokenizer=$!
status=0
for h in gguf tokenizer; do
    pid=pid_$h
    wait "${!pid}"
    rc=$?
    grep -h -E 'stat::number_of_executed_units|ERROR|SUMMARY|Done [0-9]+ runs' "$F/fuzz_$h.log" "$F/run-$h"/fuzz-*.log 2>/dev/null | sort -u | head -20
    if [ $rc -ne 0 ] || ls "$F"/crash-$h-* > /dev/null 2>&1; then
        echo "FAIL fuzz_$h: exit $rc; inputs: $(ls "$F"/crash-$h-* 2>/dev/null | tr '\n' ' '); log: $F/fuzz_$h.log"
        status=1
    else
        echo "PASS fuzz_$h"
    fi
done
exit $status
