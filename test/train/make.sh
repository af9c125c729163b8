#!/usr/bin/env bash
# test/train/make.sh (make tiny-clover): the whole recipe of test/tiny/, about 2.7 hours on 2 cores.
#   1. setup.sh: python3-torch, python3-matplotlib, OpenBLAS, the King James Bible (apt-get, as root)
#   2. corpus.py: the text, one verse per line; 24 chapters held out (build/train/heldout.txt)
#   3. bpe.py: a 3072-token byte-level BPE vocabulary learned from the training split
#   4. train.py, stage 1: STEPS1 (default 750) steps of LM + block diffusion from random weights
#      (build/train/stage1.pt, stage1.log); stage 2: STEPS2 (default 400) steps from stage 1's
#      weights, LM + self-distillation of the preview pass onto the causal model's greedy
#      continuation + unlikelihood of its repetitions (stage2.pt, stage2.log); stage 3: STEPS3
#      (default 600) more of stage 2's objective from stage 2's weights, a fresh schedule (lr 7e-4)
#      and other windows (seed 3) (stage3.pt, stage3.log). Checkpoints every 50 steps; a rerun
#      resumes (rm -rf build/train to start over)
#   5. export.py: test/tiny/tiny-clover-f32.gguf and -q8_0.gguf (stage 3), and stage 1 in build/train/stage1/
#   6. refs.py: test/tiny/refs/, the PyTorch float64 references for test group `tiny`
#   7. table.py (./clover on held-out prompts): build/train/table.md, test/tiny/draft.tsv (and
#      test/tiny/draft-stage1.tsv for stage 1); plots.py: test/tiny/training.png, acceptance.png
# Training runs under nice -n 15 with 2 threads (OMP_WAIT_POLICY=PASSIVE: with busy-waiting
# OpenMP threads a step took 10x longer on a loaded 2-core machine).
set -euo pipefail
cd "$(dirname "$0")/../.."
W=build/train
O=test/tiny
PY=/usr/bin/python3
test/train/setup.sh
mkdir -p "$W" "$O"
export OMP_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE
[ -f "$W/train.txt" ] || $PY test/train/corpus.py "$W"
[ -f "$W/vocab.json" ] || $PY test/train/bpe.py train "$W/train.txt" 3072 "$W/vocab.json"
nice -n 15 $PY test/train/train.py "$W" --name stage1 --steps "${STEPS1:-750}"
nice -n 15 $PY test/train/train.py "$W" --name stage2 --init "$W/stage1.pt" --distill --unlikely 1 \
    --steps "${STEPS2:-400}" --lr 1e-3
nice -n 15 $PY test/train/train.py "$W" --name stage3 --init "$W/stage2.pt" --distill --unlikely 1 \
    --steps "${STEPS3:-600}" --lr 7e-4 --seed 3 --eval-every 100
cat "$W/stage1.log" "$W/stage2.log" "$W/stage3.log" > "$O/train.log"
cp "$W/vocab.json" "$W/heldout.txt" "$O/"
$PY test/train/export.py "$W" "$O" stage3
$PY test/train/export.py "$W" "$W/stage1" stage1
$PY test/train/refs.py "$O"
$PY test/train/table.py "$W/stage1/tiny-clover-q8_0.gguf" 1 "$O/draft-stage1.tsv" > "$W/table-stage1.md"
$PY test/train/table.py "$O/tiny-clover-q8_0.gguf" 5 "$O/draft.tsv" > "$W/table.md"
$PY test/train/plots.py "$O/train.log" "$O/draft.tsv" "$O" "$O/draft-stage1.tsv"
ls -l "$O" "$O/refs"
