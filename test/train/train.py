#!/usr/bin/env python3
"""train.py: train the tiny Clover (model.py) on the King James Bible.

  train.py WORKDIR [--steps N] [--batch B] [--seq T] [--lr LR] [--seed S]

WORKDIR holds train.txt, heldout.txt and vocab.json (corpus.py, bpe.py). Every step takes B random
windows of T+1 tokens from the training text and minimises

  loss = LM + DIFF + 0.01 * BALANCE

  LM       causal next-token cross-entropy over the T positions (the qwen35moe forward);
  DIFF     block diffusion: the sequence is cut into blocks of L rows (L = 32 with probability 0.4,
           else 16, 8 or 4: the block lengths draft-self uses for n_max 31, 15, 7, 3); in each block
           tokens are replaced by <|mask|> either at a random rate t ~ U(0,1) (each token masked with
           probability t) or, with probability 1/2, all but the block's first row (the shape of a
           draft-self block [id_last, MASK x n]); the preview pass (spec S2.2) predicts each
           masked token at its own position (shift_logits = false) from the noisy block and the
           committed state of the clean prefix (the causal pass's K/V, pre-conv rows and GDN state at
           the block start); cross-entropy over the masked positions;
  BALANCE  switch-style expert load balancing (n_expert * sum_e fraction_e * mean_prob_e) of the
           causal pass, averaged over layers.

AdamW (betas 0.9/0.95, weight decay 0.1 on matrices), linear warmup then cosine decay to 10%,
gradient clipping at 1. Checkpoints WORKDIR/ckpt.pt every 50 steps (a rerun resumes); appends to
WORKDIR/train.log: every 10 steps the running training losses, every 200 steps and at the end the
held-out losses (64 fixed windows: LM, and DIFF for L = 32 at random rates and for draft-shaped
blocks of L = 4, 16, 32).
"""
import argparse
import math
import os
import random
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
from model import Clover, Config  # noqa: E402


def load_ids(work, name, tok):
    cache = os.path.join(work, name + ".ids.pt")
    if os.path.exists(cache):
        return torch.load(cache)
    ids = torch.tensor(tok.encode(open(os.path.join(work, name + ".txt")).read()), dtype=torch.long)
    torch.save(ids, cache)
    return ids


def mask_blocks(x, L, mask_id, gen, draft_prob=0.5):
    """x [B, T] -> noisy copy and the boolean mask of replaced positions."""
    B, T = x.shape
    nb = T // L
    rate = torch.rand(B, nb, 1, generator=gen)
    m = torch.rand(B, nb, L, generator=gen) < rate
    draft = torch.rand(B, nb, 1, generator=gen) < draft_prob
    shape = torch.ones(L, dtype=torch.bool)
    shape[0] = False
    m = torch.where(draft, shape[None, None, :], m).reshape(B, T)
    return torch.where(m, torch.full_like(x, mask_id), x), m


def diff_loss(model, x, L, mask_id, gen, draft_prob=0.5):
    logits, cache, _ = model.causal(x, every=L)
    noisy, m = mask_blocks(x, L, mask_id, gen, draft_prob)
    return F.cross_entropy(model.preview(noisy, cache, L, m), x[m]), logits


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("work")
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    work = args.work
    tok = bpe.Tokenizer(os.path.join(work, "vocab.json"))
    train_ids, held_ids = load_ids(work, "train", tok), load_ids(work, "heldout", tok)
    cfg = Config(n_vocab=len(tok.tokens))
    torch.manual_seed(args.seed)
    model = Clover(cfg, seed=args.seed)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    other = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    ckpt = os.path.join(work, "ckpt.pt")
    step, elapsed = 0, 0.0
    gen = torch.Generator().manual_seed(args.seed)
    rng = random.Random(args.seed)
    if os.path.exists(ckpt):
        st = torch.load(ckpt)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        step, elapsed = st["step"], st["elapsed"]
        gen.set_state(st["gen"])
        rng.setstate(st["rng"])
    log = open(os.path.join(work, "train.log"), "a")

    def say(s):
        print(s, flush=True)
        log.write(s + "\n")
        log.flush()

    n_params = sum(p.numel() for p in model.parameters())
    if step == 0:
        say("# tiny clover: %d parameters; n_embd %d, %d layers, %d experts top-%d, vocab %d; batch %d x %d, %d steps, lr %g"
            % (n_params, cfg.n_embd, cfg.n_layer, cfg.n_expert, cfg.n_expert_used, cfg.n_vocab, args.batch, args.seq,
               args.steps, args.lr))
    T = args.seq
    warm = max(1, min(100, args.steps // 10))

    def lr_at(s):
        if s < warm:
            return args.lr * (s + 1) / warm
        p = (s - warm) / max(1, args.steps - warm)
        return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, p))))

    def evaluate():
        model.eval()
        g = torch.Generator().manual_seed(1234)
        n = (len(held_ids) - 1) // T
        starts = [i * T for i in range(min(n, 64))]
        x = torch.stack([held_ids[s:s + T] for s in starts])
        y = torch.stack([held_ids[s + 1:s + T + 1] for s in starts])
        out = {}
        with torch.no_grad():
            logits, _, _ = model.causal(x)
            out["lm"] = F.cross_entropy(logits.reshape(-1, cfg.n_vocab), y.reshape(-1)).item()
            out["diff32"] = diff_loss(model, x, 32, tok.mask_id, g, draft_prob=0.0)[0].item()
            for L in (4, 16, 32):
                out["draft%d" % L] = diff_loss(model, x, L, tok.mask_id, g, draft_prob=1.0)[0].item()
        model.train()
        return " ".join("%s %.4f" % kv for kv in out.items())

    Ls, Lp = [32, 16, 8, 4], [0.4, 0.25, 0.2, 0.15]
    run = {"lm": 0.0, "diff": 0.0, "aux": 0.0, "n": 0}
    t0 = time.time() - elapsed
    while step < args.steps:
        L = rng.choices(Ls, Lp)[0]
        starts = [rng.randrange(len(train_ids) - T - 1) for _ in range(args.batch)]
        x = torch.stack([train_ids[s:s + T] for s in starts])
        y = torch.stack([train_ids[s + 1:s + T + 1] for s in starts])
        for gp in opt.param_groups:
            gp["lr"] = lr_at(step)
        logits, cache, aux = model.causal(x, every=L)
        lm = F.cross_entropy(logits.reshape(-1, cfg.n_vocab), y.reshape(-1))
        noisy, m = mask_blocks(x, L, tok.mask_id, gen)
        dl = F.cross_entropy(model.preview(noisy, cache, L, m), x[m])
        loss = lm + dl + 0.01 * aux
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        run["lm"] += lm.item()
        run["diff"] += dl.item()
        run["aux"] += float(aux)
        run["n"] += 1
        if step % 10 == 0 or step == args.steps:
            k = run["n"]
            say("step %d time %.0f lr %.2e train lm %.4f diff %.4f balance %.3f"
                % (step, time.time() - t0, lr_at(step - 1), run["lm"] / k, run["diff"] / k, run["aux"] / k))
            run = {"lm": 0.0, "diff": 0.0, "aux": 0.0, "n": 0}
        if step % 200 == 0 or step == args.steps:
            say("step %d time %.0f held-out %s" % (step, time.time() - t0, evaluate()))
        if step % 50 == 0 or step == args.steps:
            st = {"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "elapsed": time.time() - t0,
                  "gen": gen.get_state(), "rng": rng.getstate()}
            torch.save(st, ckpt + ".part")
            os.replace(ckpt + ".part", ckpt)
    say("# done: %d steps in %.0f s" % (step, time.time() - t0))


if __name__ == "__main__":
    main()
