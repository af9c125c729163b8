#!/usr/bin/env bash
# run.sh — build clover and run the model card's command line.
#   ./run.sh                 builds, generates a small random clover_moe model (build/demo.gguf),
#                            and runs the model card's draft-self command on it
#   ./run.sh MODEL.gguf [PROMPT_FILE]   the same command on your own GGUF
set -euo pipefail
cd "$(dirname "$0")"
make -s clover build/gen
model=${1:-}
if [ -z "$model" ]; then
    model=build/demo.gguf
    [ -f "$model" ] || build/gen -o "$model" --arch clover_moe --mask --right-conv --reverse --type q8_0 --seed 42 --ctx 8192
fi
prompt=${2:-build/demo-prompt.txt}
[ -f "$prompt" ] || printf 'Write a short story about a lighthouse keeper.\n' > "$prompt"
# The model card's command, with ./clover in place of llama-speculative-simple
# (-n 4096 on a random demo model would print noise for a while: -n 64 unless a model is given).
n=4096; [ -z "${1:-}" ] && n=64
exec ./clover -m "$model" -f "$prompt" --spec-type draft-self --spec-draft-n-max 15 \
    --spec-accept-ratio 0.9 --spec-accept-delta 0.6 --temp 0 --top-k 1 --seed 42 \
    -ctk bf16 -ctv bf16 -c 8192 -n "$n" -b 256 -ub 256 -ngl 99 -t "$(nproc)" -tb "$(nproc)" --flash-attn on --color off
