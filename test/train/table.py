#!/usr/bin/env python3
"""table.py [MODEL] [REPS]: the README's draft-self table for the tiny Clover (python3 stdlib only).

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
Prints a markdown table on stdout.
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
        for steps in (1, 2):
            args = ["--spec-type", "draft-self", "--spec-draft-n-max", str(n), "--spec-draft-steps", str(steps)]
            if relaxed:
                args += ["--spec-accept-ratio", "0.9", "--spec-accept-delta", "0.6"]
            configs.append(("%s-%d-%d" % ("relaxed" if relaxed else "exact", n, steps),
                            "draft-self %s, n_max %d, steps %d" % ("relaxed 0.9/0.6" if relaxed else "exact", n, steps), args))
configs.append(("diffusion", "`--diffusion` (threshold 0.9)", ["--diffusion"]))


def run(args, prompt):
    r = subprocess.run(["./clover", "-m", MODEL, "-f", prompt] + BASE + args, capture_output=True, text=True, check=True)
    e = r.stderr
    g = lambda pat, conv=float: conv(re.search(pat, e).group(1))
    st = {"tokens": g(r"decoded +(\d+) tokens", int), "time": g(r"decoded +\d+ tokens in +([0-9.]+) seconds"),
          "drafted": g(r"n_drafted = (\d+)", int), "accept": g(r"n_accept  = (\d+)", int),
          "relaxed": g(r"n_relaxed = (\d+)", int), "mal": g(r"mean accepted length = ([0-9.]+)"),
          "rounds": g(r"\((\d+) rounds\)", int), "text": r.stdout}
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
