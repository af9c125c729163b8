#!/usr/bin/env python3
"""table.py [MODEL] [REPS] [TSV]: the README's draft-self tables for the tiny Clover (python3 stdlib only).

Prompts: the first verse of 6 held-out chapters (test/tiny/heldout.txt, chapters 3, 6, 12, 17, 20,
24: never seen in training). Every configuration runs every prompt with the model card's flags
(greedy, -ctk/-ctv bf16, -c 8192, -b/-ub 256) and -n 128 -t 2 -tb 2; the configurations are
taken round-robin within each of REPS repetitions (default 5) so that load on the shared machine
falls on all of them alike. Acceptance figures are deterministic (summed over the prompts);
tokens/s is the median over the repetitions of (tokens decoded over all prompts / their decode
time). For the relaxed rule (the card's --spec-accept-ratio 0.9 --spec-accept-delta 0.6):
n_relaxed = drafts kept that the verifier's greedy choice rejected, and how many of the prompts'
texts differ from plain greedy decoding, with the mean number of generated tokens (clover
--tokenize of the texts) before the first difference.

Prints on stdout, as markdown: the table of every configuration; tokens per round (and acceptance)
of the exact rule for n_max 3/7/15 x steps 1/2/4; and how far greedy text runs before it repeats
itself, per prompt. "Repeats itself": R = the index (0-based, in generated tokens: the text
re-tokenized by clover --tokenize, the prompt's tokens removed) of the first generated token that
starts an 8-token sequence which already occurred earlier in the generated text; the text runs R
tokens before it repeats itself (R >= 121 of -n 128 when no 8-token sequence recurs: reported as
">= 121"). Writes TSV (default test/tiny/draft.tsv; plots.py reads it): for every draft-self
configuration and draft position 1..n_max, the drafts accepted and drafted there (clover's
"accept by position" line, summed over the prompts), and one "repeat" row per prompt.
"""
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
os.chdir(ROOT)
MODEL = sys.argv[1] if len(sys.argv) > 1 else "test/tiny/tiny-clover-q8_0.gguf"
REPS = int(sys.argv[2]) if len(sys.argv) > 2 else 5
TSV = sys.argv[3] if len(sys.argv) > 3 else "test/tiny/draft.tsv"
N = 128
TMP = "build/table"
os.makedirs(TMP, exist_ok=True)

chapters = open("test/tiny/heldout.txt").read().split("\n\n")
prompts = []
for i in (3, 6, 12, 17, 20, 24):
    p = os.path.join(TMP, "prompt%d.txt" % i)
    with open(p, "w") as f:
        f.write(chapters[i - 1].split("\n")[0] + "\n")
    prompts.append(p)

BASE = ["--temp", "0", "--top-k", "1", "--seed", "42", "-ctk", "bf16", "-ctv", "bf16", "-c", "8192", "-n", str(N),
        "-b", "256", "-ub", "256", "-t", "2", "-tb", "2", "--color", "off"]
configs = [("none", "`--spec-type none`", [])]
for relaxed in (False, True):
    for n in (3, 7, 15):
        for steps in ((1,) if relaxed else (1, 2, 4)):
            args = ["--spec-type", "draft-self", "--spec-draft-n-max", str(n), "--spec-draft-steps", str(steps)]
            if relaxed:
                args += ["--spec-accept-ratio", "0.9", "--spec-accept-delta", "0.6"]
            configs.append(("%s-%d-%d" % ("relaxed" if relaxed else "exact", n, steps),
                            "draft-self %s, n_max %d, steps %d" % ("relaxed 0.9/0.6" if relaxed else "exact", n, steps), args))
configs.append(("diffusion", "`--diffusion` (threshold 0.9)", ["--diffusion"]))


def run(args, prompt):
    r = subprocess.run(["./clover", "-m", MODEL, "-f", prompt] + BASE + args, capture_output=True, text=True, check=True)
    e = r.stderr
    def g(pat, conv=float):  # a draft-self line, 0 where the mode prints none (plain decoding)
        m = re.search(pat, e)
        return conv(m.group(1)) if m else 0
    st = {"tokens": g(r"decoded +(\d+) tokens", int), "time": g(r"decoded +\d+ tokens in +([0-9.]+) seconds"),
          "drafted": g(r"n_drafted = (\d+)", int), "accept": g(r"n_accept  = (\d+)", int),
          "relaxed": g(r"n_relaxed = (\d+)", int), "mal": g(r"mean accepted length = ([0-9.]+)"),
          "rounds": g(r"\((\d+) rounds\)", int), "text": r.stdout}
    m = re.search(r"accept by position = ([0-9/ ]+)", e)
    st["by_pos"] = [tuple(map(int, f.split("/"))) for f in m.group(1).split()] if m else []
    m = re.search(r"diffusion: (\d+) blocks, (\d+) passes", e)
    if m:
        st["blocks"], st["passes"] = int(m.group(1)), int(m.group(2))
    return st


def tokens(text):
    p = os.path.join(TMP, "t.txt")
    with open(p, "w") as f:
        f.write(text)  # the text ends with clover's newline, which -f drops
    r = subprocess.run(["./clover", "-m", MODEL, "--tokenize", "-f", p], capture_output=True, text=True, check=True)
    return r.stdout.strip().split(",")


res = {c[0]: [] for c in configs}
for rep in range(REPS):
    order = configs if rep % 2 == 0 else configs[::-1]
    for key, _, args in order:
        res[key].append([run(args, p) for p in prompts])

greedy = [s["text"] for s in res["none"][0]]
print("| configuration | accepted / drafted | accept | mean accepted length (tokens per round) | tokens/s (median of %d) | vs none | relaxed: n_relaxed, texts != greedy, tokens before the first change |" % REPS)
print("|---|---|---|---|---|---|---|")
speed = {}
for key, label, _ in configs:
    runs = res[key]
    tps = statistics.median(sum(s["tokens"] for s in r) / sum(s["time"] for s in r) for r in runs)
    speed[key] = tps
for key, label, _ in configs:
    r0 = res[key][0]
    dr, ac = sum(s["drafted"] for s in r0), sum(s["accept"] for s in r0)
    rounds = sum(s["rounds"] for s in r0)
    mal = sum(s["mal"] * s["rounds"] for s in r0) / rounds if rounds else 0
    for r in res[key][1:]:  # deterministic: every repetition must agree
        assert [s["text"] for s in r] == [s["text"] for s in r0], key
    extra = ""
    if key.startswith("relaxed"):
        diff = [k for k, s in enumerate(r0) if s["text"] != greedy[k]]
        before = []
        for k in diff:
            a, b = tokens(r0[k]["text"]), tokens(greedy[k])
            ptoks = len(tokens(open(prompts[k]).read()))
            i = next((j for j in range(min(len(a), len(b))) if a[j] != b[j]), min(len(a), len(b)))
            before.append(i - ptoks)
        extra = "%d, %d of %d%s" % (sum(s["relaxed"] for s in r0), len(diff), len(r0),
                                    (", %.1f" % statistics.mean(before)) if before else "")
    elif key.startswith("exact"):
        same = all(s["text"] == greedy[k] for k, s in enumerate(r0))
        extra = "(exact: texts == greedy: %s)" % ("yes" if same else "NO")
    if key == "diffusion":
        bl, pa = sum(s["blocks"] for s in r0), sum(s["passes"] for s in r0)
        extra = "%.2f passes per block (%d blocks), texts != greedy: %d of %d" % (
            pa / bl, bl, sum(1 for k, s in enumerate(r0) if s["text"] != greedy[k]), len(r0))
        print("| %s | | | | %.0f | %.2fx | %s |" % (label, speed[key], speed[key] / speed["none"], extra))
        continue
    if key == "none":
        print("| %s | | | | %.0f | 1.00x | |" % (label, speed[key]))
        continue
    print("| %s | %d / %d | %.1f%% | %.2f | %.0f | %.2fx | %s |" % (
        label, ac, dr, 100.0 * ac / dr if dr else 0, mal, speed[key], speed[key] / speed["none"], extra))

print()
print("Tokens per round (mean accepted length), exact rule; acceptance in parentheses:")
print()
print("| n_max | steps 1 | steps 2 | steps 4 |")
print("|---|---|---|---|")
for n in (3, 7, 15):
    cells = []
    for steps in (1, 2, 4):
        r0 = res["exact-%d-%d" % (n, steps)][0]
        rounds = sum(s["rounds"] for s in r0)
        mal = sum(s["mal"] * s["rounds"] for s in r0) / rounds
        cells.append("%.2f (%.1f%%)" % (mal, 100.0 * sum(s["accept"] for s in r0) / sum(s["drafted"] for s in r0)))
    print("| %d | %s |" % (n, " | ".join(cells)))


def repeat_at(ids, n=8):
    """Index of the first token that starts an n-token sequence seen earlier, or None."""
    seen = set()
    for i in range(len(ids) - n + 1):
        g = tuple(ids[i:i + n])
        if g in seen:
            return i
        seen.add(g)
    return None


rows = []
for k, text in enumerate(greedy):
    ids = tokens(text)[len(tokens(open(prompts[k]).read())):]
    rows.append((os.path.basename(prompts[k]), len(ids), repeat_at(ids)))
print()
print("Greedy text (`--spec-type none`, -n %d): generated tokens before the first repeated 8-token sequence:" % N)
print()
print("| prompt | " + " | ".join(r[0] for r in rows) + " |")
print("|---|" + "---|" * len(rows))
print("| tokens | " + " | ".join(str(r[2]) if r[2] is not None else ">= %d" % (r[1] - 7) for r in rows) + " |")

with open(TSV, "w") as f:
    f.write("# table.py %s: draft-self accepted/drafted by draft position (summed over %d held-out prompts); "
            "greedy text's generated tokens before the first repeated 8-token sequence (-1: none)\n" % (MODEL, len(prompts)))
    f.write("kind\tconfig\tposition\taccepted\tdrafted\n")
    for key, _, _ in configs:
        r0 = res[key][0]
        if not r0[0]["by_pos"]:
            continue
        for j in range(max(len(s["by_pos"]) for s in r0)):
            a = sum(s["by_pos"][j][0] for s in r0 if j < len(s["by_pos"]))
            d = sum(s["by_pos"][j][1] for s in r0 if j < len(s["by_pos"]))
            f.write("accept\t%s\t%d\t%d\t%d\n" % (key, j + 1, a, d))
    for name, n, r in rows:
        f.write("repeat\t%s\t%d\t%d\t%d\n" % (name, -1 if r is None else r, 0, n))
