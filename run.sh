#!/usr/bin/env bash
# run.sh — build clover and run the model card's command line.
#   ./run.sh                 builds, and runs the model card's draft-self command on the tiny Clover
#                            trained on the King James Bible (test/tiny/tiny-clover-q8_0.gguf, made
#                            by `make tiny-clover`) with a held-out verse as the prompt; accepted
#                            drafts in green when stdout is a terminal (--color on)
#   ./run.sh --random        the same on a small random clover_moe model (build/demo.gguf)
#   ./run.sh MODEL.gguf [PROMPT_FILE]   the same command on your own GGUF
set -euo pipefail
cd "$(dirname "$0")"
make -s clover build/gen
model=${1:-}
prompt=${2:-}
n=4096
color=off; [ -t 1 ] && color=on
if [ -z "$model" ]; then
    # the trained tiny model: -n 200 (its attention layer saw 256-token windows in training)
    model=test/tiny/tiny-clover-q8_0.gguf
    prompt=${prompt:-test/tiny/prompt.txt}
    n=200
elif [ "$model" = --random ]; then
    model=build/demo.gguf
    [ -f "$model" ] || build/gen -o "$model" --arch clover_moe --mask --right-conv --reverse --type q8_0 --seed 42 --ctx 8192
    prompt=${prompt:-build/demo-prompt.txt}
    [ -f "$prompt" ] || printf 'Write a short story about a lighthouse keeper.\n' > "$prompt"
    n=64    # -n 4096 on a random model would print noise for a while
fi
[ -n "$prompt" ] || { echo "run.sh: give a prompt file after the model" >&2; exit 1; }
# The model card's command, with ./clover in place of llama-speculative-simple
exec ./clover -m "$model" -f "$prompt" --spec-type draft-self --spec-draft-n-max 15 \
    --spec-accept-ratio 0.9 --spec-accept-delta 0.6 --temp 0 --top-k 1 --seed 42 \
    -ctk bf16 -ctv bf16 -c 8192 -n "$n" -b 256 -ub 256 -ngl 99 -t "$(nproc)" -tb "$(nproc)" --flash-attn on --color "$color"
