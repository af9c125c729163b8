#!/usr/bin/env python3
"""corpus.py OUTDIR: the King James Bible (Debian's bible-kjv-text, read with `bible`) as plain
text, one verse per line (the reference prefix "Ge1:1 " removed), chapters separated by a blank
line, split by chapter: every chapter whose running index (0-based, Genesis 1 = 0, 1189 in all)
is 25 mod 50 goes to OUTDIR/heldout.txt (24 chapters, never seen in training), the rest to
OUTDIR/train.txt."""
import os
import re
import subprocess
import sys

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
raw = subprocess.run(["bible", "-f", "Genesis 1:1-Revelation 22:21"], check=True, capture_output=True,
                     text=True).stdout
chapters, last = [], None
for line in raw.splitlines():
    m = re.match(r"^(\S+?)(\d+):(\d+) (.*)$", line)
    if not m:
        continue
    key = (m.group(1), m.group(2))
    if key != last:
        chapters.append([])
        last = key
    chapters[-1].append(m.group(4).strip())
train = [c for i, c in enumerate(chapters) if i % 50 != 25]
held = [c for i, c in enumerate(chapters) if i % 50 == 25]
for name, cs in (("train.txt", train), ("heldout.txt", held)):
    with open(os.path.join(out, name), "w") as f:
        f.write("\n\n".join("\n".join(c) for c in cs) + "\n")
print("corpus: %d chapters, %d verses: train %d chapters, held out %d" %
      (len(chapters), sum(map(len, chapters)), len(train), len(held)), file=sys.stderr)
