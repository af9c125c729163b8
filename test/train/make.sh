#!/usr/bin/env bash
# test/train/make.sh (make tiny-clover): the whole recipe of test/tiny/, about an hour on 2 cores.
#   1. setup.sh: python3-torch, OpenBLAS, the King James Bible (apt-get, as root)
#   2. corpus.py: the text, one verse per line; 24 chapters held out (build/train/heldout.txt)
#   3. bpe.py: a 3072-token byte-level BPE vocabulary learned from the training split
#   4. train.py: STEPS (default 750) steps, checkpointed in build/train/ckpt.pt (a rerun resumes;
#      rm -rf build/train to start over), log build/train/train.log
#   5. export.py: test/tiny/tiny-clover-f32.gguf and -q8_0.gguf
#   6. refs.py: test/tiny/refs/, the PyTorch float64 references for test group `tiny`
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
nice -n 15 $PY test/train/train.py "$W" --steps "${STEPS:-750}"
cp "$W/vocab.json" "$W/heldout.txt" "$W/train.log" "$O/"
$PY test/train/export.py "$W" "$O"
$PY test/train/refs.py "$O"
ls -l "$O" "$O/refs"
