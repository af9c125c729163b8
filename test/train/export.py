#!/usr/bin/env python3
"""export.py WORKDIR OUTDIR [NAME]: the trained checkpoint WORKDIR/NAME.pt (default stage3, the
last stage of make.sh) as clover_moe GGUFs,
OUTDIR/tiny-clover-f32.gguf and OUTDIR/tiny-clover-q8_0.gguf (every key and extra tensor of
README.md's spec S2.1; the Q8_0 file keeps norms, conv taps, ssm_a, biases, the
router and the reverse mix in F32)."""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
import gguf  # noqa: E402
from model import Clover, Config  # noqa: E402


def main():
    work, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    tok = bpe.Tokenizer(os.path.join(work, "vocab.json"))
    cfg = Config(n_vocab=len(tok.tokens))
    model = Clover(cfg)
    name = sys.argv[3] if len(sys.argv) > 3 else "stage3"
    st = torch.load(os.path.join(work, name + ".pt"))
    model.load_state_dict(st["model"])
    tensors = model.gguf_tensors()
    for qt, qname in ((gguf.F32, "f32"), (gguf.Q8_0, "q8_0")):
        path = os.path.join(out, "tiny-clover-%s.gguf" % qname)
        gguf.write(path, cfg, tok, tensors, qt, "tiny clover (King James Bible, %s: %d steps) %s" % (name, st["step"], qname.upper()))
        print("export: %s (%d bytes)" % (path, os.path.getsize(path)), file=sys.stderr)


if __name__ == "__main__":
    main()
