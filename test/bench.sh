#!/usr/bin/env bash
# test/bench.sh — `make bench`: clover vs llama.cpp speed on real-shape slices of Qwen3.6-35B-A3B.
#
#   test/bench.sh [THREADS [REPS]]     (defaults: 2 threads, 5 repetitions)
#
# For each weight mix (a Q4_K_M-like mix, Q8_0 and Q4_0: the three official files) and each
# vocabulary (the real 248320 tokens, and 32768, where the layers rather than the output head
# dominate the bytes read per token), build/gen writes a 4-layer clover_moe slice with every
# per-layer shape of the 35B model and the preview's tensors (2-5 GB, in $BENCH_DIR or /tmp, deleted
# after use), test/gguf_edit.py its qwen35moe twin for llama.cpp (the same file without the preview's
# tensors, which build/gen stores last), and build/bench measures prefill (512-token prompt), decode
# (64 tokens) and one 16-row verify batch, alternating clover and llama.cpp run by run (medians of
# each figure and of the per-run ratios; llama.cpp at its own defaults: flash attention auto, F16
# cache), and clover's 16-row preview (draft-self's block: the last token and 15 masks; llama.cpp has
# no such pass), then clover's stage tables and the verify's and the preview's byte cost and compute
# floor (test/bench.c). The q4_k_m 32768 slice runs a second time after a 2048-token prompt, where
# a decoding step's attention reads four times the cache rows. Ends with a markdown table of the
# medians, as README's "Speed" section shows it. llama.cpp runs the CPU variant it picks
# itself (the best this CPU runs; LLAMA_CPU_VARIANT=NAME forces one), named in the table's heading.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
THREADS=${1:-2}
REPS=${2:-5}
make -s build/gen build/bench || exit 1   # (run directly, this script would time whatever binary was built last)
DIR=$(mktemp -d "${BENCH_DIR:-/tmp}/clover-bench.XXXXXX") || exit 1
trap 'rm -rf "$DIR"' EXIT
trap 'exit 130' INT TERM

rows=()
for type in q4_k_m q8_0 q4_0; do
    for vocab in 248320 32768; do
        f="$DIR/$type-$vocab.gguf" twin="$DIR/$type-$vocab-qwen35moe.gguf"
        echo "== $type, vocabulary $vocab: build/gen --arch clover_moe --mask --right-conv --reverse --shape real --type $type --layers 4 --vocab $vocab"
        build/gen -o "$f" --arch clover_moe --mask --right-conv --reverse --shape real --type "$type" --layers 4 --vocab "$vocab" > "$DIR/gen.log" 2>&1 ||
            { echo "gen failed: $(head -n 1 "$DIR/gen.log")"; exit 1; }
        head -c 64M "$f" > "$DIR/head.gguf"   # the header and the tensor list (gguf_edit.py reads whole files)
        drops=$(python3 test/gguf_edit.py tensors "$DIR/head.gguf" | awk '$1 ~ /_rev|ssm_conv1d_right/ {printf "--drop-tensor %s ", $1}') &&
            python3 test/gguf_edit.py edit "$f" "$twin" --arch qwen35moe $drops || { echo "cannot write the qwen35moe twin of $f"; exit 1; }
        prompts=512
        [ "$type-$vocab" = q4_k_m-32768 ] && prompts="512 2048"
        for P in $prompts; do
            [ "$P" = 512 ] || echo "== $type, vocabulary $vocab, a $P-token prompt"
            build/bench -m "$f" -l "$twin" -t "$THREADS" -r "$REPS" -p "$P" 2> "$DIR/err.txt" | tee "$DIR/out.txt" || { cat "$DIR/err.txt"; exit 1; }
            variant=$(sed -n 's/^bench: llama.cpp CPU variant //p' "$DIR/err.txt")
            grep -q '^BENCH ' "$DIR/out.txt" || exit 1
            line=$(sed -n 's/^BENCH //p' "$DIR/out.txt" | tr '\n' ' ')   # the verify's line and the preview's
            declare -A v=()
            for kv in $line; do v[${kv%%=*}]=${kv#*=}; done
            rows+=("| $type | $vocab | $P | ${v[prefill_clover]} / ${v[prefill_llama]} = **${v[prefill_ratio]}x** | ${v[decode_clover]} / ${v[decode_llama]} = **${v[decode_ratio]}x** | ${v[verify_clover_ms]} ms = ${v[verify_steps_clover]} steps / ${v[verify_llama_ms]} ms = ${v[verify_steps_llama]} steps | ${v[decode_mb]} MB, ${v[bandwidth_gbs]} GB/s: ${v[decode_bw_clover]} / ${v[decode_bw_llama]} | ${v[verify_mb]} MB = ${v[verify_bytes_ms]} ms, floor ${v[verify_floor_ms]} ms: **${v[verify_vs_cost]}x**; per task ${v[verify_staged_ms]} ms: **${v[verify_vs_staged]}x** | ${v[preview_clover_ms]} ms = ${v[preview_steps_clover]} steps; ${v[preview_mb]} MB = ${v[preview_bytes_ms]} ms, floor ${v[preview_floor_ms]} ms: **${v[preview_vs_cost]}x**; per task **${v[preview_vs_staged]}x** |")
            unset v
        done
        rm -f "$f" "$twin"
    done
done
echo
echo "$(date -u +%Y-%m-%d), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $THREADS threads, llama.cpp's CPU variant ${variant:-?}, medians of $REPS runs (clover / llama.cpp):"
echo
echo "| weights | vocabulary | prompt | prefill t/s | decode t/s (64) | 16-row verify (cost in decode steps) | bytes/step, bandwidth: fraction reached | clover's verify vs its cost (bytes at the bandwidth, compute floor: the larger; per task the larger of the two, summed) | clover's 16-row preview (decode steps; vs its cost, as for the verify) |"
echo "|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
