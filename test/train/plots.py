#!/usr/bin/env python3
"""plots.py TRAIN.LOG DRAFT.TSV OUTDIR [BEFORE.TSV]: the README's figures of the tiny Clover, as PNG
files, from the measured logs (Debian's python3-matplotlib).

  OUTDIR/training.png    the losses against step from train.py's log (every stage, each one's steps
                         counted on from the last of the one before): LM and DIFF, the running
                         training means (every 10 steps) and the held-out evaluations; from stage
                         2 on DIFF is against the greedy continuation (--distill), so both its
                         curves are drawn.
  OUTDIR/acceptance.png  draft-self's acceptance by draft position (table.py's TSV: the fraction
                         of the drafts made at position j that the exact rule accepted, summed over
                         the held-out prompts) for n_max 15 and steps 1, 2, 4; with BEFORE.TSV, the
                         same measured on an earlier model, dashed.
"""
import os
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read_log(path):
    """-> training rows (step, lm, diff, stage) and held-out rows (step, {name: value}, stage)."""
    train, held, stage, offset, last = [], [], 0, 0, 0
    for line in open(path):
        if line.startswith("# tiny clover:"):
            stage += 1
            offset = last
            continue
        m = re.match(r"step (\d+) time \d+ lr \S+ train lm (\S+) diff (\S+)", line)
        if m:
            step = int(m.group(1)) + offset
            train.append((step, float(m.group(2)), float(m.group(3)), stage))
            last = step
        m = re.match(r"step (\d+) time \d+ held-out (.*)", line)
        if m:
            f = m.group(2).split()
            held.append((int(m.group(1)) + offset, {f[i]: float(f[i + 1]) for i in range(0, len(f), 2)}, stage))
    return train, held


def read_tsv(path):
    acc = {}
    for line in open(path):
        f = line.rstrip("\n").split("\t")
        if f[0] == "accept":
            acc.setdefault(f[1], []).append((int(f[2]), int(f[3]), int(f[4])))
    return acc


def training_figure(log, out):
    train, held = read_log(log)
    fig, ax = plt.subplots(figsize=(7.5, 4.2), dpi=100)
    stages = sorted(set(r[3] for r in train))
    for st in stages:
        rows = [r for r in train if r[3] == st]
        ax.plot([r[0] for r in rows], [r[1] for r in rows], "-", color="tab:blue", lw=1, alpha=0.6,
                label="LM, training" if st == 1 else None)
        ax.plot([r[0] for r in rows], [r[2] for r in rows], "-", color="tab:orange" if st == 1 else "tab:green",
                lw=1, alpha=0.6, label="DIFF, training (corpus targets)" if st == 1 else
                "DIFF, training (greedy-continuation targets)" if st == 2 else None)
    pts = lambda key: [(h[0], h[1][key]) for h in held if key in h[1]]
    for key, color, label in (("lm", "tab:blue", "LM, held-out"),
                              ("draft16", "tab:orange", "DIFF, held-out 16-row draft blocks, corpus targets"),
                              ("self16", "tab:green", "DIFF, held-out 16-row draft blocks, greedy targets")):
        p = pts(key)
        if p:
            ax.plot([s for s, _ in p], [v for _, v in p], "o--", color=color, ms=5, lw=1, label=label)
    for st in stages[1:]:   # each later stage (self-distillation) from where the one before it ended
        b = max(r[0] for r in train if r[3] == st - 1)
        ax.axvline(b, color="gray", lw=0.8, ls=":")
        ax.text(b, ax.get_ylim()[1], " stage %d" % st + (": self-distillation" if st == 2 else ""), va="top", fontsize=8, color="gray")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats per token)")
    ax.set_title("tiny Clover: training losses (test/tiny/train.log)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out)


def acceptance_figure(tsv, out, before=None):
    acc = read_tsv(tsv)
    fig, ax = plt.subplots(figsize=(7.5, 3.8), dpi=100)
    for steps, color in ((1, "tab:blue"), (2, "tab:orange"), (4, "tab:green")):
        rows = acc.get("exact-15-%d" % steps)
        if rows:
            ax.plot([r[0] for r in rows], [r[1] / r[2] if r[2] else 0 for r in rows], "o-", color=color, ms=4,
                    label="n_max 15, steps %d" % steps)
    if before:
        rows = read_tsv(before).get("exact-15-1")
        if rows:
            ax.plot([r[0] for r in rows], [r[1] / r[2] if r[2] else 0 for r in rows], "x--", color="gray", ms=4,
                    label="n_max 15, steps 1, before (stage 1 only)")
    ax.set_xlabel("draft position j")
    ax.set_ylabel("drafts at position j accepted")
    ax.set_ylim(0, 1)
    ax.set_xticks(range(1, 16))
    ax.set_title("draft-self acceptance by position, 6 held-out prompts (test/tiny/draft.tsv)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out)


def main():
    log, tsv, out = sys.argv[1], sys.argv[2], sys.argv[3]
    before = sys.argv[4] if len(sys.argv) > 4 else None
    os.makedirs(out, exist_ok=True)
    training_figure(log, os.path.join(out, "training.png"))
    acceptance_figure(tsv, os.path.join(out, "acceptance.png"), before)
    for f in ("training.png", "acceptance.png"):
        print("plots: %s (%d bytes)" % (os.path.join(out, f), os.path.getsize(os.path.join(out, f))), file=sys.stderr)


if __name__ == "__main__":
    main()
