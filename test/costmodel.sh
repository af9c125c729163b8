#!/usr/bin/env bash
# test/costmodel.sh — the cost model's runs: build/clover-emu-count (the CUDA emulation, counting what
# each launch touches: CLOVER_EMU_COUNT in test/cuda_emu.h) on one or two model slices, then
# build/costmodel (test/costmodel.c) over the counts. Run by `make costmodel` and test/gpu.sh.
#
#   test/costmodel.sh [--bw GBS] [--node-us US] [--ptxas LOG] [--sass LIST] [--emu BIN] [--work DIR] [--timeout S]
#                     [--decode-only] --slice L MODEL [--slice L MODEL]
#
# Per slice, two runs (in parallel, one process each), each after a prompt of two ids (one prefilled
# row): a plain greedy decode of 2 tokens (the model takes its last step, a CUDA graph), and
# draft-self with 15 drafts a round (--spec-draft-p-min 0), whose first round gives the preview pass,
# the 16-row verify batch and the rollback (a random model takes no draft), where the run is stopped
# (CLOVER_EMU_COUNT_STOP). Counts and logs go to DIR (default: a temporary folder). --timeout: each
# run's limit; a round out of time leaves the prediction to the decode step (the rounds emulate 16-row
# passes, the LM head's included: minutes at the real shape). --decode-only: no round at all.
# The prediction for 40 layers needs two slices of the same layer pattern (4 and 8 layers).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
EMU=build/clover-emu-count
WORK=
LIMIT=0
ROUNDS=1
ARGS=()
SLICES=()
while [ $# -gt 0 ]; do
    case $1 in
        --bw|--node-us|--ptxas|--sass) ARGS+=("$1" "$2"); shift 2 ;;
        --emu) EMU=$2; shift 2 ;;
        --work) WORK=$2; shift 2 ;;
        --timeout) LIMIT=$2; shift 2 ;;
        --decode-only) ROUNDS=; shift ;;
        --slice) SLICES+=("$2" "$3"); shift 3 ;;
        *) echo "costmodel.sh: unknown option $1" >&2; exit 1 ;;
    esac
done
[ ${#SLICES[@]} -gt 0 ] || { echo "costmodel.sh: no --slice L MODEL" >&2; exit 1; }
for t in "$EMU" build/costmodel; do [ -x "$t" ] || { echo "costmodel.sh: $t is missing (make build/clover-emu-count build/costmodel)" >&2; exit 1; }; done
if [ -z "$WORK" ]; then WORK=$(mktemp -d "${TMPDIR:-/tmp}/clover-cost.XXXXXX") || exit 1; fi
mkdir -p "$WORK" || exit 1

P=7,8
# counted NAME MODEL ARGS...: one counting run, its counts in $WORK/NAME.count, its stderr in NAME.err.
# CLOVER_EMU_MEMORY: the slices of the 35B model hold all 256 experts (several GB).
counted() {
    local n=$1 m=$2
    shift 2
    CLOVER_EMU_COUNT=$WORK/$n.count CLOVER_EMU_MEMORY=$((48 << 30)) timeout -k 5 "$LIMIT" "$EMU" -m "$m" -ngl 99 -c 256 --temp 0 --tokens "$P" "$@" \
        > "$WORK/$n.out" 2> "$WORK/$n.err"
}
declare -A PID
for ((i = 0; i < ${#SLICES[@]}; i += 2)); do
    L=${SLICES[i]} M=${SLICES[i + 1]}
    counted "decode-$L" "$M" -n 2 & PID[decode-$L]=$!
    [ -z "$ROUNDS" ] || { CLOVER_EMU_COUNT_STOP=4 counted "round-$L" "$M" -n 16 --spec-type draft-self --spec-draft-n-max 15 --spec-draft-p-min 0 & PID[round-$L]=$!; }
done
rounds=$ROUNDS
for ((i = 0; i < ${#SLICES[@]}; i += 2)); do
    L=${SLICES[i]}
    if ! wait "${PID[decode-$L]}"; then
        echo "costmodel.sh: the decode run on $L layers failed: $(grep -m 1 error "$WORK/decode-$L.err")" >&2
        exit 1
    fi
    [ -z "$ROUNDS" ] || wait "${PID[round-$L]}" || { rounds=; echo "costmodel.sh: the draft-self round on $L layers failed or ran out of time: the decode step alone" >&2; }
done
CM=()
for ((i = 0; i < ${#SLICES[@]}; i += 2)); do
    CM+=(--slice "${SLICES[i]}" "$WORK/decode-${SLICES[i]}.count" "$([ -n "$rounds" ] && echo "$WORK/round-${SLICES[i]}.count" || echo -)")
done
build/costmodel "${ARGS[@]}" "${CM[@]}"
