#!/usr/bin/env python3
"""train.py: train the tiny Clover (model.py) on the King James Bible.

  train.py WORKDIR [--steps N] [--batch B] [--seq T] [--lr LR] [--seed S] [--init CKPT] [--distill]
                    [--name NAME] [--unlikely W] [--rollout R] [--draft-prob P] [--eval-every N]

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

--distill (self-distillation, stages 2 and 3 of make.sh): DIFF's targets are not the corpus tokens
but what draft-self's verifier accepts, the causal model's own greedy continuation of each block:
row 0 keeps the corpus token at the block start (id_last), row j (1..L-1) is the token that greedy
decoding from the clean prefix produces j steps later. Draft position j is accepted exactly when
all drafts before it were and it equals that token, so this is the target of acceptance itself; and
unlike the corpus continuation it is a function of the prefix, which the preview pass can learn.
The continuations of all blocks are decoded at once, one row per step, from the causal pass's
committed state at each block start (model.greedy_blocks; no gradient). The corpus LM loss stays,
so the causal model keeps learning the text.
--init CKPT starts from the weights of another run's checkpoint (or a tiny-clover-f32.gguf) with a
fresh optimizer and schedule.
--unlikely W (with --distill) adds W * UNLIKELY, sequence-level unlikelihood training against greedy
repetition: for every greedy token of those continuations that completes a 6-token sequence
already present in the text before it (train.py repeats), -log(1 - p) of the causal model's
probability of that token (the causal pass over the block rows with gradient), summed and divided
by the number of rows, so that a penalised token weighs as much as one token of LM. (Averaged over
the penalised rows alone, a few percent of them, it outweighed LM and DIFF: the training LM loss
rose by 0.1-0.15 in 50 steps and drafts matched the greedy continuation less often.)

--rollout R (experiments, not in make.sh; README "Where the time went"), without --distill: DIFF on
the model's own text instead, the R-1 greedy rows that continue each window's first T-R+1 tokens, with the rollout
itself as target (draft-shaped blocks with probability --draft-prob); with --unlikely, UNLIKELY on the
rollout's tokens that complete a 6-token sequence already in it. With --distill, --rollout R keeps the
distillation objective on the corpus windows and moves UNLIKELY to the rollout instead: the causal
pass over the window whose last R-1 tokens are the model's own greedy text (no gradient through
the rollout itself), -log(1 - p) of each of its tokens that completes a 6-token sequence already in
it, over the rollout's rows (README "Where the time went"). Every evaluation also reports own16
and run (own_text): accepted drafts per 16-row round inside such a rollout, and its greedy tokens
before the first repeated 8-token sequence.

AdamW (betas 0.9/0.95, weight decay 0.1 on matrices), linear warmup then cosine decay to 10%,
gradient clipping at 1. Checkpoints WORKDIR/NAME.pt (NAME: --name, default stage1) every 50 steps
(a rerun resumes); appends to WORKDIR/NAME.log: every 10 steps the running training losses, every 200 steps and at the end the
held-out losses (64 fixed windows: LM, and DIFF for L = 32 at random rates and for draft-shaped
blocks of L = 4, 16, 32; on 32 of them self16, DIFF for draft-shaped 16-row blocks against the
greedy continuation, and acceptedL, the drafts draft-self's exact rule would accept per round
from an L-row draft block, L = 4, 8, 16).
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
import gguf  # noqa: E402
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


def greedy_blocks(model, x, cache, L):
    """x [B, T] -> every block [s, s+L) as greedy causal decoding continues it from the clean prefix
    (row 0 = x[s]); no gradient. model.greedy_blocks decodes one row of all blocks per step."""
    with torch.no_grad():
        return model.greedy_blocks(x, cache, L)


def greedy_blocks_jacobi(model, x, logits, cache, L):
    """The same by Jacobi iteration (each causal pass over all block rows, model.preview(...,
    causal=True), fixes at least one more row; a fixed point is the greedy continuation): slower,
    independent of model.greedy_blocks, which a --distill run checks against it when it starts."""
    T = x.shape[1]
    first = (torch.arange(T) % L == 0)[None, :]
    with torch.no_grad():
        y = torch.where(first, x, logits.argmax(-1).roll(1, dims=1))
        for _ in range(1, L):
            a = model.preview(y, cache, L, causal=True).argmax(-1)
            ny = torch.where(first, x, a.roll(1, dims=1))   # row j takes the greedy choice after row j-1
            if torch.equal(ny, y):
                break
            y = ny
    return y


def diff_loss(model, x, L, mask_id, gen, draft_prob=0.5, distill=False):
    logits, cache, _ = model.causal(x, every=L)
    y = greedy_blocks(model, x, cache, L) if distill else x
    noisy, m = mask_blocks(y, L, mask_id, gen, draft_prob)
    out = model.preview(noisy, cache, L, m)
    return F.cross_entropy(out, y[m]), out, y, m


def repeats(x, y, L, n=6):
    """[B, T] bool: the rows j >= 1 of each block whose greedy token y completes an n-token sequence
    that already occurs earlier in the text it continues (the window's corpus tokens before the
    block, then the greedy rows before it): where greedy decoding starts to repeat itself."""
    B, T = x.shape
    out = torch.zeros(B, T, dtype=torch.bool)
    xl, yl = x.tolist(), y.tolist()
    for b in range(B):
        for s in range(0, T, L):
            seq = xl[b][:s + 1]
            seen = set(tuple(seq[i:i + n]) for i in range(len(seq) - n + 1))
            for j in range(1, L):
                seq.append(yl[b][s + j])
                if len(seq) >= n:
                    g = tuple(seq[-n:])
                    out[b, s + j] = g in seen
                    seen.add(g)
    return out


def accepted(model, x, L, mask_id):
    """Mean number of drafts draft-self's exact rule would accept from a draft-shaped block of L rows
    (leading rows whose preview argmax equals the causal greedy continuation): tokens per round - 1."""
    logits, cache, _ = model.causal(x, every=L)
    y = greedy_blocks(model, x, cache, L)
    first = (torch.arange(x.shape[1]) % L == 0)[None, :]
    d = model.preview(torch.where(first, x, torch.full_like(x, mask_id)), cache, L).argmax(-1)
    ok = (d == y).reshape(x.shape[0], -1, L)[:, :, 1:].long()
    return ok.cumprod(-1).sum(-1).float().mean().item()


def rollout(model, x, cache, R):
    """x [B, T] corpus windows, cache = causal(x, every=R) -> z [B, T]: x's first T-R+1 tokens, then
    the R-1 tokens greedy decoding continues them with (the last block of model.greedy_blocks; no
    gradient): the model's own text after a corpus prompt, as draft-self meets it after a few rounds."""
    y = greedy_blocks(model, x, cache, R)
    return torch.cat([x[:, :-R], y[:, -R:]], dim=1)


def rollout_unlikely(z, lz, R):
    """UNLIKELY on a rollout z [B, T] (its last R-1 tokens greedy) with the causal logits lz of z:
    -log(1 - p) of every greedy token that completes a 6-token sequence already in the rollout (p:
    its probability at the row before it), over the rollout's rows; and the fraction of them."""
    B, T = z.shape
    g = z[:, T - R:]            # id_last of the rollout's first round, then its greedy rows
    r = F.pad(repeats(g, g, R), (T - R, 0))
    ul = torch.zeros(())
    if r.any():
        p = lz[r.roll(-1, dims=1)].softmax(-1)
        ul = -torch.log((1 - p.gather(-1, z[r][:, None])).clamp_min(1e-5)).sum() / (B * (R - 1))
    return ul, r.float().sum().item() / (B * (R - 1))


def own_text(model, x, mask_id, R=128, L=16):
    """On the model's own greedy text (rollout after T-R corpus tokens): the drafts draft-self's exact
    rule would accept per round from L-row draft blocks inside the greedy part, and the greedy tokens
    generated before the first one that starts an 8-token sequence already seen in that greedy part
    (table.py's measure of repetition; R-1 when none recurs)."""
    _, cache, _ = model.causal(x, every=R)
    z = rollout(model, x, cache, R)
    _, cz, _ = model.causal(z, every=L)
    T = z.shape[1]
    first = (torch.arange(T) % L == 0)[None, :]
    d = model.preview(torch.where(first, z, torch.full_like(z, mask_id)), cz, L).argmax(-1)
    ok = (d == z).reshape(z.shape[0], -1, L)[:, (T - R) // L:, 1:].long()
    g = z[:, T - R + 1:]                        # the greedy rows: a token completing a repeat starts it 7 before
    runs = [row.index(True) - 7 if True in row else R - 1 for row in repeats(g, g, R - 1, n=8).tolist()]
    return ok.cumprod(-1).sum(-1).float().mean().item(), sum(runs) / len(runs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("work")
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--init", default=None)
    ap.add_argument("--distill", action="store_true")
    ap.add_argument("--name", default="stage1")
    ap.add_argument("--unlikely", type=float, default=0.0)
    ap.add_argument("--rollout", type=int, default=0)
    ap.add_argument("--draft-prob", type=float, default=0.5)
    ap.add_argument("--eval-every", type=int, default=200)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    work = args.work
    tok = bpe.Tokenizer(os.path.join(work, "vocab.json"))
    train_ids, held_ids = load_ids(work, "train", tok), load_ids(work, "heldout", tok)
    cfg = Config(n_vocab=len(tok.tokens))
    torch.manual_seed(args.seed)
    model = Clover(cfg, seed=args.seed)
    if args.init and args.init.endswith(".gguf"):
        model.load_gguf_tensors(gguf.read_tensors(args.init))
    elif args.init:
        model.load_state_dict(torch.load(args.init)["model"])
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    other = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    ckpt = os.path.join(work, args.name + ".pt")
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
    log = open(os.path.join(work, args.name + ".log"), "a")

    def say(s):
        print(s, flush=True)
        log.write(s + "\n")
        log.flush()

    n_params = sum(p.numel() for p in model.parameters())
    if step == 0:
        say("# tiny clover: %d parameters; n_embd %d, %d layers, %d experts top-%d, vocab %d; batch %d x %d, %d steps, lr %g%s%s"
            % (n_params, cfg.n_embd, cfg.n_layer, cfg.n_expert, cfg.n_expert_used, cfg.n_vocab, args.batch, args.seq,
               args.steps, args.lr, "; init " + os.path.basename(args.init) if args.init else "",
               "; self-distillation" if args.distill else "") + ("; unlikelihood %g" % args.unlikely if args.unlikely else ""))
    T = args.seq
    if args.distill and step == 0:
        with torch.no_grad():
            x = torch.stack([held_ids[s * T:(s + 1) * T] for s in range(2)])
            logits, cache, _ = model.causal(x, every=16)
            same = torch.equal(greedy_blocks(model, x, cache, 16), greedy_blocks_jacobi(model, x, logits, cache, 16))
        say("# check: greedy_blocks == Jacobi iteration on 2 held-out windows, blocks of 16: %s" % same)
        if not same:
            sys.exit("train.py: error: model.greedy_blocks disagrees with the Jacobi iteration")
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
            # against the greedy continuation (the --distill target), and the accepted drafts per round
            xs = x[:32]
            out["self16"] = diff_loss(model, xs, 16, tok.mask_id, g, draft_prob=1.0, distill=True)[0].item()
            for L in (4, 8, 16):
                out["accepted%d" % L] = accepted(model, xs, L, tok.mask_id)
            out["own16"], out["run"] = own_text(model, xs, tok.mask_id)
        model.train()
        return " ".join("%s %.4f" % kv for kv in out.items())

    Ls, Lp = [32, 16, 8, 4], [0.4, 0.25, 0.2, 0.15]
    if args.distill:
        Ls, Lp = [16, 8, 4, 32], [0.45, 0.2, 0.15, 0.2]
    R = args.rollout
    if R and not args.distill:
        Ls, Lp = [16, 8, 32, 4], [0.55, 0.15, 0.2, 0.1]
    if R:
        late = torch.arange(T)[None, :] > T - R     # the greedy rows of a rollout
    run = {"lm": 0.0, "diff": 0.0, "aux": 0.0, "n": 0, "ul": 0.0, "rep": 0.0}
    t0 = time.time() - elapsed
    while step < args.steps:
        L = rng.choices(Ls, Lp)[0]
        starts = [rng.randrange(len(train_ids) - T - 1) for _ in range(args.batch)]
        x = torch.stack([train_ids[s:s + T] for s in starts])
        y = torch.stack([train_ids[s + 1:s + T + 1] for s in starts])
        for gp in opt.param_groups:
            gp["lr"] = lr_at(step)
        logits, cache, aux = model.causal(x, every=L if args.distill else R or L)
        lm = F.cross_entropy(logits.reshape(-1, cfg.n_vocab), y.reshape(-1))
        ul = torch.zeros(())
        if R and not args.distill:   # DIFF on the greedy rows of a rollout (targets: the rollout itself), UNLIKELY on its repeats
            z = rollout(model, x, cache, R)
            lz, cache, auxz = model.causal(z, every=L)
            noisy, m = mask_blocks(z, L, tok.mask_id, gen, args.draft_prob)
            m = m & late
            dl = F.cross_entropy(model.preview(noisy, cache, L, m), z[m])
            loss = lm + dl + 0.005 * (aux + auxz)
            ul_z, rep = rollout_unlikely(z, lz, R)
            run["rep"] += rep
            if args.unlikely > 0:
                ul = ul_z
                loss = loss + args.unlikely * ul
        else:
            tgt = greedy_blocks(model, x, cache, L) if args.distill else x
            noisy, m = mask_blocks(tgt, L, tok.mask_id, gen, args.draft_prob)
            dl = F.cross_entropy(model.preview(noisy, cache, L, m), tgt[m])
            loss = lm + dl + 0.01 * aux
            if args.unlikely > 0 and R:   # UNLIKELY on the repeats of a rollout, as in the branch above
                with torch.no_grad():
                    z = rollout(model, x, model.causal(x, every=R)[1], R)
                ul, rep = rollout_unlikely(z, model.causal(z)[0], R)
                run["rep"] += rep
                loss = loss + args.unlikely * ul
            elif args.unlikely > 0:
                r = repeats(x, tgt, L)
                run["rep"] += r.float().sum().item() / (r.numel() * (L - 1) / L)
                if r.any():   # the causal logits of the row before each repeating greedy token
                    p = model.preview(tgt, cache, L, r.roll(-1, dims=1), causal=True).softmax(-1)
                    ul = -torch.log((1 - p.gather(-1, tgt[r][:, None])).clamp_min(1e-5)).sum() / r.numel()
                    loss = loss + args.unlikely * ul
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        run["lm"] += lm.item()
        run["diff"] += dl.item()
        run["aux"] += float(aux)
        run["ul"] += ul.item()
        run["n"] += 1
        if step % 10 == 0 or step == args.steps:
            k = run["n"]
            say("step %d time %.0f lr %.2e train lm %.4f diff %.4f balance %.3f%s"
                % (step, time.time() - t0, lr_at(step - 1), run["lm"] / k, run["diff"] / k, run["aux"] / k,
                   " unlikely %.4f repeated %.4f" % (run["ul"] / k, run["rep"] / k) if args.unlikely > 0 or R else ""))
            run = {"lm": 0.0, "diff": 0.0, "aux": 0.0, "n": 0, "ul": 0.0, "rep": 0.0}
        if step % args.eval_every == 0 or step == args.steps:
            say("step %d time %.0f held-out %s" % (step, time.time() - t0, evaluate()))
        if step % 50 == 0 or step == args.steps:
            st = {"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "elapsed": time.time() - t0,
                  "gen": gen.get_state(), "rng": rng.getstate()}
            torch.save(st, ckpt + ".part")
            os.replace(ckpt + ".part", ckpt)
    say("# done: %d steps in %.0f s" % (step, time.time() - t0))


if __name__ == "__main__":
    main()
