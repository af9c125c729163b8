#!/usr/bin/env python3
"""refs.py MODELDIR: reference logits of the tiny Clover from the PyTorch implementation (model.py,
float64), for clover's test group `tiny` (test/run.sh).

For each of MODELDIR/tiny-clover-f32.gguf and -q8_0.gguf the weights are read back from the file
(Q8_0 dequantised: the values clover multiplies with; the activation row entering a Q8_0 matrix is
rounded to Q8_0 first, as llama.cpp's CPU path and clover do, spec S1.7), and evaluated in
float64 on held-out text
(MODELDIR/refs/sample.txt, from the held-out split, never seen in training):
  causal   the logits of every prompt position (clover --tokens IDS --dump-logits)
  preview  one preview pass over a block right after a committed prompt
           (clover --tokens P --preview-block B --dump-logits): draft-self blocks [id_last, MASK x n]
           for n = 3 and 15, a 32-row block of tokens and masks, and 31 masks after a 1-token prompt
Writes MODELDIR/refs/<name>-<type>.bin (float32 [rows][n_vocab]) and MODELDIR/refs/manifest.tsv:
  name  type  prompt_ids  block_ids (or -)  file
"""
import os
import random
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
import gguf  # noqa: E402
from model import Clover, Config  # noqa: E402


def main():
    d = sys.argv[1]
    rd = os.path.join(d, "refs")
    os.makedirs(rd, exist_ok=True)
    tok = bpe.Tokenizer(os.path.join(d, "vocab.json"))
    held = open(os.path.join(d, "heldout.txt")).read()
    chapters = held.split("\n\n")
    sample = chapters[2][:400]
    ids = tok.encode(sample)[:64]
    sample = tok.decode(ids)
    assert tok.encode(sample) == ids
    with open(os.path.join(rd, "sample.txt"), "w") as f:
        f.write(sample + "\n")          # clover -f drops one trailing newline
    with open(os.path.join(rd, "sample.ids"), "w") as f:
        f.write(",".join(map(str, ids)) + "\n")
    M = tok.mask_id
    r = random.Random(7)
    b32 = [t if r.random() < 0.5 else M for t in ids[8:40]]
    cases = [("causal", ids, None),
             ("draft-n3", ids[:40], [ids[40]] + [M] * 3),
             ("draft-n15", ids[:24], [ids[24]] + [M] * 15),
             ("block32-mixed", ids[:8], b32),
             ("draft-n31-after-1", ids[:1], [ids[1]] + [M] * 31)]
    cfg = Config(n_vocab=len(tok.tokens))
    rows = []
    for ty in ("f32", "q8_0"):
        model = Clover(cfg).double()
        tensors, qnames = gguf.read_tensors(os.path.join(d, "tiny-clover-%s.gguf" % ty), with_types=True)
        model.load_gguf_tensors(tensors)
        model.q8_act = frozenset(qnames)
        with torch.no_grad():
            for name, p, b in cases:
                P = torch.tensor([p])
                lg = model.causal(P)[0][0] if b is None else model.preview_block(P, torch.tensor([b]))[0]
                fn = "%s-%s.bin" % (name, ty)
                lg.float().contiguous().numpy().tofile(os.path.join(rd, fn))
                rows.append("\t".join([name, ty, ",".join(map(str, p)), ",".join(map(str, b)) if b else "-", fn]))
                print("refs: %s %s: %d rows" % (name, ty, lg.shape[0]), file=sys.stderr)
    with open(os.path.join(rd, "manifest.tsv"), "w") as f:
        f.write("\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
