"""model.py: the tiny Clover in PyTorch, written from the specification in README.md (spec
S1.3-S1.6 and S2.2-S2.5), independently of clover.c.

Parameters are kept under their GGUF names and in ggml's memory layout (a matrix with ggml ne
{in, out} is a torch [out, in] tensor, experts [n_expert, out, in], ssm_conv1d [conv_dim, 4],
ssm_conv1d_right [conv_dim, 3]), so the export is a plain copy. Norm weights are the multipliers
the GGUF stores (no +1 convention here); ssm_a / ssm_a_rev are parametrised as A_log and exported
as -exp(A_log).

  causal(tokens)                 the causal qwen35moe forward: logits [B, T, V] and, per layer, what a
                                 preview pass reads from the committed prefix (K/V, pre-conv rows, S)
  preview(tokens, cache, L)      the clover_moe preview pass over every block [s, s+L) of the sequence
                                 at once, block b reading the committed state of positions < b*L
                                 (spec S2.2-S2.5: bidirectional block attention over the committed prefix,
                                 right conv, forward scan from the committed state, reverse scan from
                                 0, coreset routing)

Both run in float32 for training and in float64 for the references (model.double()).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Config:
    def __init__(self, **kw):
        self.n_vocab = 3072
        self.n_embd = 128
        self.n_layer = 4
        self.attn_interval = 4          # layer il is full attention iff (il + 1) % 4 == 0
        self.n_head, self.n_head_kv, self.head_dim, self.n_rot = 4, 2, 32, 16
        self.rope_base = 10000.0
        self.ssm_groups, self.ssm_v_heads, self.ssm_state, self.ssm_conv = 2, 4, 32, 4
        self.n_expert, self.n_expert_used, self.n_ff_exp, self.n_ff_shexp = 16, 2, 96, 128
        self.eps = 1e-6
        self.block_size = 32
        self.coreset_top_p = 0.9
        self.n_ctx = 8192
        self.__dict__.update(kw)

    def is_attn(self, il):
        return (il + 1) % self.attn_interval == 0

    @property
    def key_dim(self):
        return self.ssm_groups * self.ssm_state

    @property
    def value_dim(self):
        return self.ssm_v_heads * self.ssm_state

    @property
    def conv_dim(self):
        return 2 * self.key_dim + self.value_dim


# ------------------------------------------------------------------------------------------------
# primitives (spec S1.3)

def rmsnorm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def l2norm(x, eps):
    return x / x.norm(dim=-1, keepdim=True).clamp_min(eps)


def q8_0_round(x):
    """An activation row as llama.cpp's CPU matmul rounds it before a dot with Q8_0 weights
    (llama.cpp's reference quantize_row_q8_0; spec S1.7): per 32 values d = max|x|/127, q = roundf(x/d), x ~ q*fp16(d)."""
    sh = x.shape
    b = x.reshape(*sh[:-1], sh[-1] // 32, 32)
    d = b.abs().amax(-1, keepdim=True) / 127.0
    idv = torch.where(d > 0, 1.0 / torch.where(d > 0, d, torch.ones_like(d)), torch.zeros_like(d))
    v = b * idv
    q = torch.sign(v) * torch.floor(v.abs() + 0.5)
    return (q * d.to(torch.float16).to(x.dtype)).reshape(sh)


def rope_neox(x, pos, n_rot, base):
    """x [B, T, H, D]; rotate dims [0, n_rot) in NEOX pairs (i, i + n_rot/2) by pos * base^(-2i/n_rot)."""
    half = n_rot // 2
    inv = base ** (-2.0 * torch.arange(half, dtype=torch.float64) / n_rot)
    th = (pos.to(torch.float64)[:, None] * inv[None, :]).to(x.dtype)  # [T, half]
    c, s = th.cos()[None, :, None, :], th.sin()[None, :, None, :]
    x0, x1, rest = x[..., :half], x[..., half:n_rot], x[..., n_rot:]
    return torch.cat([x0 * c - x1 * s, x0 * s + x1 * c, rest], dim=-1)


def gdn_chunk(q, k, v, g, beta, S, inner=()):
    """The gated delta rule over one chunk, all rows at once (the WY form of the recurrence of
    spec S1.4):  S_t = e^{g_t} S_{t-1} + k_t d_t^T,  d_t = beta_t (v_t - e^{g_t} S_{t-1}^T k_t),
    o_t = S_t^T q_t / sqrt(d_k).
    q, k [N, H, C, dk], v [N, H, C, dv], g, beta [N, H, C], S [N, H, dk, dv] (the state before the
    chunk). Returns o [N, H, C, dv], the state after the chunk, and the states after the rows in
    `inner` ([N, H, len(inner), dk, dv]).
    With G_t = sum_{i<=t} g_i: D = (I + L)^{-1} (beta V - beta e^G K S), L[t,s] = beta_t e^{G_t-G_s} k_t.k_s (s<t);
    o_t = (e^{G_t} q_t S + sum_{s<=t} e^{G_t-G_s} (q_t.k_s) D_s) / sqrt(dk)."""
    C = q.shape[-2]
    G = g.cumsum(-1)
    tri = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
    strict = tri & ~torch.eye(C, dtype=torch.bool, device=q.device)
    diff = G[..., :, None] - G[..., None, :]
    decay = torch.where(tri, diff, torch.full_like(diff, -math.inf)).exp()      # e^{G_t-G_s}, s<=t
    kk = k @ k.transpose(-1, -2)
    Lm = torch.where(strict, kk * decay * beta[..., :, None], torch.zeros_like(kk))
    eye = torch.eye(C, dtype=q.dtype, device=q.device)
    rhs = beta[..., None] * (v - G.exp()[..., None] * (k @ S))
    # (I + L)^{-1} for strictly lower L (nilpotent: L^C = 0) as the product (I - L)(I + L^2)(I + L^4)...;
    # exact algebra; gdn_scan passes chunks of at most 8 rows, where the terms stay small in float32
    Mp, inv, nl = -Lm, eye + (-Lm), 2
    while nl < C:
        Mp = Mp @ Mp
        inv = inv + inv @ Mp
        nl *= 2
    D = inv @ rhs
    qk = torch.where(tri, (q @ k.transpose(-1, -2)) * decay, torch.zeros_like(kk))
    o = (G.exp()[..., None] * (q @ S) + qk @ D) / math.sqrt(q.shape[-1])
    Gl = G[..., -1:]
    S_new = Gl.exp()[..., None] * S + (k * (Gl - G).exp()[..., None]).transpose(-1, -2) @ D
    states = None
    if inner:
        idx = torch.tensor(inner, device=q.device)
        Gi = G[..., idx]                                                   # [N, H, I]
        M = torch.where(torch.arange(C, device=q.device)[None, :] <= idx[:, None],
                        (Gi[..., :, None] - G[..., None, :]), torch.full(G.shape[:-1] + (len(inner), C), -math.inf,
                                                                        dtype=G.dtype, device=G.device)).exp()
        states = Gi.exp()[..., None, None] * S[..., None, :, :] + torch.einsum("nhis,nhsk,nhsv->nhikv", M, k, D)
    return o, S_new, states


def gdn_scan(q, k, v, g, beta, S, chunk=8, every=None):
    """The recurrence over T rows in chunks of `chunk` rows, starting from state S. Returns o, the
    final state and the states at positions 0, every, 2*every, ... < T ([N, H, T/every, dk, dv])."""
    T = q.shape[-2]
    outs, states = [], []
    for c0 in range(0, T, chunk):
        c1 = min(T, c0 + chunk)
        if every and c0 % every == 0:
            states.append(S[:, :, None])
        inner = tuple(t - c0 - 1 for t in range(c0 + 1, c1) if every and t % every == 0)
        o, S, st = gdn_chunk(q[:, :, c0:c1], k[:, :, c0:c1], v[:, :, c0:c1], g[:, :, c0:c1], beta[:, :, c0:c1], S, inner)
        if st is not None:
            states.append(st)
        outs.append(o)
    return torch.cat(outs, dim=2), S, (torch.cat(states, dim=2) if states else None)


# ------------------------------------------------------------------------------------------------

class Clover(nn.Module):
    def __init__(self, cfg, seed=0):
        super().__init__()
        self.cfg = c = cfg
        gen = torch.Generator().manual_seed(seed)
        self.names = []
        E = c.n_embd

        def P(name, *shape, std=None, fill=None):
            t = torch.empty(*shape)
            if fill is not None:
                t.fill_(fill)
            else:
                t.normal_(0.0, std, generator=gen)
            p = nn.Parameter(t)
            self.register_parameter(name.replace(".", "__"), p)
            self.names.append(name)

        s = 0.02
        P("token_embd.weight", c.n_vocab, E, std=s)
        P("output_norm.weight", E, fill=1.0)
        P("output.weight", c.n_vocab, E, std=s)
        out_std = s / math.sqrt(2 * c.n_layer)
        for il in range(c.n_layer):
            b = "blk.%d." % il
            P(b + "attn_norm.weight", E, fill=1.0)
            P(b + "post_attention_norm.weight", E, fill=1.0)
            if c.is_attn(il):
                D = c.head_dim
                P(b + "attn_q.weight", 2 * c.n_head * D, E, std=s)
                P(b + "attn_k.weight", c.n_head_kv * D, E, std=s)
                P(b + "attn_v.weight", c.n_head_kv * D, E, std=s)
                P(b + "attn_q_norm.weight", D, fill=1.0)
                P(b + "attn_k_norm.weight", D, fill=1.0)
                P(b + "attn_output.weight", E, c.n_head * D, std=out_std)
            else:
                V = c.ssm_v_heads
                P(b + "attn_qkv.weight", c.conv_dim, E, std=s)
                P(b + "attn_gate.weight", c.value_dim, E, std=s)
                P(b + "ssm_beta.weight", V, E, std=s)
                P(b + "ssm_alpha.weight", V, E, std=s)
                P(b + "ssm_conv1d.weight", c.conv_dim, c.ssm_conv, std=0.3)
                P(b + "ssm_dt.bias", V, fill=0.0)
                P(b + "A_log", V, fill=0.0)                 # exported as ssm_a = -exp(A_log)
                P(b + "ssm_norm.weight", c.ssm_state, fill=1.0)
                P(b + "ssm_out.weight", E, c.value_dim, std=out_std)
                # clover_moe extras (spec S2.1)
                P(b + "ssm_conv1d_right.weight", c.conv_dim, 3, std=0.05)
                P(b + "A_log_rev", V, fill=0.0)             # exported as ssm_a_rev = -exp(A_log_rev)
                P(b + "ssm_dt_rev.bias", V, fill=0.0)
                P(b + "ssm_alpha_rev.weight", V, E, std=s)
                P(b + "ssm_beta_rev.weight", V, E, std=s)
                P(b + "ssm_rev_mix", V, fill=0.5)
            X, Fe, Fs = c.n_expert, c.n_ff_exp, c.n_ff_shexp
            P(b + "ffn_gate_inp.weight", X, E, std=s)
            P(b + "ffn_gate_exps.weight", X, Fe, E, std=s)
            P(b + "ffn_up_exps.weight", X, Fe, E, std=s)
            P(b + "ffn_down_exps.weight", X, E, Fe, std=out_std)
            P(b + "ffn_gate_inp_shexp.weight", E, std=s)
            P(b + "ffn_gate_shexp.weight", Fs, E, std=s)
            P(b + "ffn_up_shexp.weight", Fs, E, std=s)
            P(b + "ffn_down_shexp.weight", E, Fs, std=out_std)
        with torch.no_grad():  # decay rates spread over heads, as Mamba-style inits do
            for il in range(c.n_layer):
                if not c.is_attn(il):
                    V = c.ssm_v_heads
                    self.w("blk.%d.A_log" % il).copy_(torch.log(torch.linspace(1.0, 8.0, V)))
                    self.w("blk.%d.A_log_rev" % il).copy_(torch.log(torch.linspace(1.0, 8.0, V)))
                    self.w("blk.%d.ssm_dt.bias" % il).fill_(-2.0)
                    self.w("blk.%d.ssm_dt_rev.bias" % il).fill_(-2.0)

    def w(self, name):
        return getattr(self, name.replace(".", "__"))

    def gguf_tensors(self):
        """name -> tensor (float32, ggml layout) as the GGUF stores it."""
        out = {}
        for n in self.names:
            t = self.w(n).detach().float()
            if n.endswith(".A_log"):
                n, t = n[:-len("A_log")] + "ssm_a", -t.exp()
            elif n.endswith(".A_log_rev"):
                n, t = n[:-len("A_log_rev")] + "ssm_a_rev", -t.exp()
            out[n] = t.contiguous()
        return out

    def load_gguf_tensors(self, tensors):
        with torch.no_grad():
            for n in self.names:
                src = n
                if n.endswith(".A_log"):
                    src = n[:-len("A_log")] + "ssm_a"
                elif n.endswith(".A_log_rev"):
                    src = n[:-len("A_log_rev")] + "ssm_a_rev"
                t = tensors[src].to(self.w(n).dtype).reshape(self.w(n).shape)
                if src != n:
                    t = torch.log(-t)
                self.w(n).copy_(t)

    # --------------------------------------------------------------------------------------------
    # layers

    q8_act = frozenset()   # names of Q8_0 weights: their activations are rounded as llama.cpp's CPU does

    def act(self, x, name):
        return q8_0_round(x) if name in self.q8_act else x

    def lin(self, x, name):
        return self.act(x, name) @ self.w(name).transpose(0, 1)

    def gdn_proj(self, a, b):
        c = self.cfg
        u = self.lin(a, b + "attn_qkv.weight")
        z = self.lin(a, b + "attn_gate.weight")
        beta = torch.sigmoid(self.lin(a, b + "ssm_beta.weight"))
        g = F.softplus(self.lin(a, b + "ssm_alpha.weight") + self.w(b + "ssm_dt.bias")) * -self.w(b + "A_log").exp()
        return u, z, beta, g

    def gdn_qkv(self, y):
        """conv output (after SiLU) -> q, k, v [B, H, T, d] with value head h reading q/k head h % n_k."""
        c = self.cfg
        B, T = y.shape[:2]
        K, V, d = c.ssm_groups, c.ssm_v_heads, c.ssm_state
        q = l2norm(y[..., :c.key_dim].reshape(B, T, K, d), c.eps)
        k = l2norm(y[..., c.key_dim:2 * c.key_dim].reshape(B, T, K, d), c.eps)
        v = y[..., 2 * c.key_dim:].reshape(B, T, V, d)
        q, k = q.repeat(1, 1, V // K, 1), k.repeat(1, 1, V // K, 1)   # tiled: head h -> h % K
        return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

    def gdn_out(self, o, z, b):
        c = self.cfg
        B, T = z.shape[:2]
        o = o.transpose(1, 2)                                          # [B, T, V, d]
        o = rmsnorm(o, self.w(b + "ssm_norm.weight"), c.eps) * F.silu(z.reshape(B, T, c.ssm_v_heads, c.ssm_state))
        return self.lin(o.reshape(B, T, c.value_dim), b + "ssm_out.weight")

    def gdn_causal(self, a, b, every):
        c = self.cfg
        B, T, _ = a.shape
        u, z, beta, g = self.gdn_proj(a, b)
        w = self.w(b + "ssm_conv1d.weight")                          # [C, 4], tap 3 = current row
        up = F.pad(u, (0, 0, c.ssm_conv - 1, 0))
        y = sum(up[:, j:j + T] * w[:, j] for j in range(c.ssm_conv))
        q, k, v = self.gdn_qkv(F.silu(y))
        S0 = a.new_zeros(B, c.ssm_v_heads, c.ssm_state, c.ssm_state)
        o, S, states = gdn_scan(q, k, v, g.transpose(1, 2), beta.transpose(1, 2), S0, every=every)
        return self.gdn_out(o, z, b), {"u": u, "S": states, "S_final": S}

    def gdn_preview_one(self, a, b, cache):
        """One block [s, s+n) after a committed prefix of s rows (spec S2.4, literally): the conv
        over U = [last 3 committed pre-conv rows | block rows] plus the right taps, the forward scan
        from the committed S, the reverse scan from 0."""
        c = self.cfg
        B, n, _ = a.shape
        u, z, beta, g = self.gdn_proj(a, b)
        ring = cache["u"][:, -(c.ssm_conv - 1):]
        ring = F.pad(ring, (0, 0, c.ssm_conv - 1 - ring.shape[1], 0))   # zeros before position 0
        U = torch.cat([ring, u], dim=1)
        w, r = self.w(b + "ssm_conv1d.weight"), self.w(b + "ssm_conv1d_right.weight")
        y = sum(U[:, j:j + n] * w[:, j] for j in range(c.ssm_conv))
        for d in range(1, 4):
            y = y + F.pad(u, (0, 0, 0, d))[:, d:] * r[:, d - 1]
        q, k, v = self.gdn_qkv(F.silu(y))
        of, _, _ = gdn_scan(q, k, v, g.transpose(1, 2), beta.transpose(1, 2), cache["S_final"])
        br = torch.sigmoid(self.lin(a, b + "ssm_beta_rev.weight")).transpose(1, 2)
        gr = (F.softplus(self.lin(a, b + "ssm_alpha_rev.weight") + self.w(b + "ssm_dt_rev.bias"))
              * -self.w(b + "A_log_rev").exp()).transpose(1, 2)
        fl = lambda x: x.flip(2)
        orv, _, _ = gdn_scan(fl(q), fl(k), fl(v), fl(gr), fl(br), torch.zeros_like(cache["S_final"]))
        o = of + self.w(b + "ssm_rev_mix")[None, :, None, None] * fl(orv)
        return self.gdn_out(o, z, b)

    def gdn_preview(self, a, b, cache, L, causal=False):
        """Every block [s, s+L) at once; block rows see the committed pre-conv rows u of positions
        < s (the causal pass's) in the conv, and start the forward scan from its state at s.
        causal: the causal layer over the block instead (no right taps, no reverse branch)."""
        c = self.cfg
        B, T, _ = a.shape
        nb = T // L
        u, z, beta, g = self.gdn_proj(a, b)
        uc = cache["u"]
        w, r = self.w(b + "ssm_conv1d.weight"), self.w(b + "ssm_conv1d_right.weight")
        t = torch.arange(T, device=a.device) % L                      # row index inside its block
        y = 0
        for j in range(c.ssm_conv):
            o = c.ssm_conv - 1 - j                                    # tap j reads the row o back
            sp = F.pad(u, (0, 0, o, 0))[:, :T]
            sc = F.pad(uc, (0, 0, o, 0))[:, :T]
            y = y + torch.where((t >= o)[None, :, None], sp, sc) * w[:, j]
        for d in range(1, 4 if not causal else 1):                    # right taps: rows t+d < L of the block
            sr = F.pad(u, (0, 0, 0, d))[:, d:]
            y = y + torch.where((t + d < L)[None, :, None], sr, torch.zeros_like(sr)) * r[:, d - 1]
        q, k, v = self.gdn_qkv(F.silu(y))                             # [B, H, T, d]
        H, d = c.ssm_v_heads, c.ssm_state

        def blocks(x):                                                # [B, H, T, ...] -> [B*nb, H, L, ...]
            x = x.reshape(B, H, nb, L, *x.shape[3:]).transpose(1, 2)
            return x.reshape(B * nb, H, L, *x.shape[4:])

        qb, kb, vb = blocks(q), blocks(k), blocks(v)
        gb, bb = blocks(g.transpose(1, 2)), blocks(beta.transpose(1, 2))
        S0 = cache["S"].transpose(1, 2).reshape(B * nb, H, d, d)      # committed state at each block start
        of, _, _ = gdn_scan(qb, kb, vb, gb, bb, S0)
        if causal:
            return self.gdn_out(of.reshape(B, nb, H, L, d).transpose(1, 2).reshape(B, H, T, d), z, b)
        # reverse branch: its own beta and decay, from S = 0, rows n-1 .. 0
        br = torch.sigmoid(self.lin(a, b + "ssm_beta_rev.weight")).transpose(1, 2)
        gr = (F.softplus(self.lin(a, b + "ssm_alpha_rev.weight") + self.w(b + "ssm_dt_rev.bias"))
              * -self.w(b + "A_log_rev").exp()).transpose(1, 2)
        fl = lambda x: x.flip(2)
        orv, _, _ = gdn_scan(fl(qb), fl(kb), fl(vb), fl(blocks(gr)), fl(blocks(br)), torch.zeros_like(S0))
        ob = of + self.w(b + "ssm_rev_mix")[None, :, None, None] * fl(orv)
        o = ob.reshape(B, nb, H, L, d).transpose(1, 2).reshape(B, H, T, d)
        return self.gdn_out(o, z, b)

    def attn_qkv(self, a, b, pos):
        c = self.cfg
        B, T, _ = a.shape
        D = c.head_dim
        qg = self.lin(a, b + "attn_q.weight").reshape(B, T, c.n_head, 2 * D)
        q, gate = qg[..., :D], qg[..., D:]
        k = self.lin(a, b + "attn_k.weight").reshape(B, T, c.n_head_kv, D)
        v = self.lin(a, b + "attn_v.weight").reshape(B, T, c.n_head_kv, D)
        q = rope_neox(rmsnorm(q, self.w(b + "attn_q_norm.weight"), c.eps), pos, c.n_rot, c.rope_base)
        k = rope_neox(rmsnorm(k, self.w(b + "attn_k_norm.weight"), c.eps), pos, c.n_rot, c.rope_base)
        return q, gate, k, v

    def attn_out(self, q, gate, k, v, allow, b):
        """q [B, T, H, D]; k, v [B, S, Hkv, D]; allow [T, S] bool."""
        c = self.cfg
        B, T = q.shape[:2]
        r = c.n_head // c.n_head_kv
        k, v = k.repeat_interleave(r, dim=2), v.repeat_interleave(r, dim=2)   # q head h -> kv head h / r
        s = torch.einsum("bthd,bshd->bhts", q, k) / math.sqrt(c.head_dim)
        s = s.masked_fill(~allow, -math.inf)
        o = torch.einsum("bhts,bshd->bthd", s.softmax(-1), v) * torch.sigmoid(gate)
        return self.lin(o.reshape(B, T, c.n_head * c.head_dim), b + "attn_output.weight")

    def moe(self, m, b, L=None):
        """MoE of spec S1.6; with L (a preview pass) and coreset_top_p > 0, each row of a block
        [s, s+L) routes among the block's coreset only (spec S2.5). Returns (out, aux stats)."""
        c = self.cfg
        B, T, E = m.shape
        X, k = c.n_expert, c.n_expert_used
        logits = self.lin(m, b + "ffn_gate_inp.weight")
        p = logits.softmax(-1)
        if L is not None and c.coreset_top_p > 0:
            pb = p.reshape(B, T // L, L, X)
            tot = pb.sum(2)                                             # [B, nb, X]
            srt, order = torch.sort(tot, dim=-1, descending=True, stable=True)
            cum = srt.cumsum(-1)
            n_core = ((cum < c.coreset_top_p * L).sum(-1, keepdim=True) + 1).clamp_max(X)
            in_sorted = torch.arange(X, device=m.device) < n_core
            core = torch.zeros_like(in_sorted).scatter(-1, order, in_sorted)  # [B, nb, X]
            core = core[:, :, None, :].expand(B, T // L, L, X).reshape(B, T, X)
            pm = torch.where(core, p, torch.full_like(p, -1.0))
            top, sel = pm.topk(k, dim=-1)
            wsel = torch.where(top >= 0, p.gather(-1, sel), torch.zeros_like(top))
        else:
            wsel, sel = p.topk(k, dim=-1)
        wsel = wsel / wsel.sum(-1, keepdim=True).clamp_min(6.103515625e-5)
        mf, self_sel, wf = m.reshape(-1, E), sel.reshape(-1, k), wsel.reshape(-1, k)
        out = torch.zeros_like(mf)
        gw, uw, dw = self.w(b + "ffn_gate_exps.weight"), self.w(b + "ffn_up_exps.weight"), self.w(b + "ffn_down_exps.weight")
        for e in range(X):
            rows, slot = (self_sel == e).nonzero(as_tuple=True)
            if rows.numel() == 0:
                continue
            x = self.act(mf[rows], b + "ffn_up_exps.weight")
            h = F.silu(x @ gw[e].t()) * (x @ uw[e].t())
            h = self.act(h, b + "ffn_down_exps.weight")
            out = out.index_add(0, rows, (h @ dw[e].t()) * wf[rows, slot, None])
        sh = self.lin(F.silu(self.lin(mf, b + "ffn_gate_shexp.weight")) * self.lin(mf, b + "ffn_up_shexp.weight"),
                      b + "ffn_down_shexp.weight")
        sg = torch.sigmoid(mf @ self.w(b + "ffn_gate_inp_shexp.weight"))[:, None]
        out = (out + sh * sg).reshape(B, T, E)
        # load-balancing statistics (switch style): fraction of routed slots and mean probability
        frac = F.one_hot(sel.reshape(-1), X).to(m.dtype).mean(0).detach()
        return out, (frac * p.reshape(-1, X).mean(0)).sum() * X

    def head(self, x):
        return self.lin(rmsnorm(x, self.w("output_norm.weight"), self.cfg.eps), "output.weight")

    # --------------------------------------------------------------------------------------------
    # the two passes

    def causal(self, tokens, every=32):
        c = self.cfg
        B, T = tokens.shape
        pos = torch.arange(T, device=tokens.device)
        x = self.w("token_embd.weight")[tokens]
        cache, aux = [], 0.0
        causal_mask = torch.ones(T, T, dtype=torch.bool, device=tokens.device).tril()
        for il in range(c.n_layer):
            b = "blk.%d." % il
            a = rmsnorm(x, self.w(b + "attn_norm.weight"), c.eps)
            if c.is_attn(il):
                q, gate, k, v = self.attn_qkv(a, b, pos)
                x = x + self.attn_out(q, gate, k, v, causal_mask, b)
                cache.append({"k": k, "v": v})
            else:
                o, st = self.gdn_causal(a, b, every)
                x = x + o
                cache.append(st)
            mo, lb = self.moe(rmsnorm(x, self.w(b + "post_attention_norm.weight"), c.eps), b)
            x = x + mo
            aux = aux + lb
        return self.head(x), cache, aux / c.n_layer

    def preview(self, tokens, cache, L, rows=None, causal=False):
        """tokens [B, T] (mask ids allowed), T a multiple of L; cache from causal(clean, every=L).
        With rows (a [B, T] bool mask), only those rows go through the head (training).
        causal: instead of the preview pass, the causal pass over each block's rows after the same
        committed prefix (what the verifier computes for a draft; train.py's teacher)."""
        c = self.cfg
        B, T = tokens.shape
        pos = torch.arange(T, device=tokens.device)
        blk = pos // L
        # block row p sees committed rows j < start(p) and every row of its own block (causal: rows <= p)
        own = blk[None, :] == blk[:, None]
        if causal:
            own = own & (pos[None, :] <= pos[:, None])
        allow = torch.cat([pos[None, :] < (blk * L)[:, None], own], dim=1)   # [T, 2T]
        x = self.w("token_embd.weight")[tokens]
        for il in range(c.n_layer):
            b = "blk.%d." % il
            a = rmsnorm(x, self.w(b + "attn_norm.weight"), c.eps)
            if c.is_attn(il):
                q, gate, k, v = self.attn_qkv(a, b, pos)
                kk = torch.cat([cache[il]["k"], k], dim=1)
                vv = torch.cat([cache[il]["v"], v], dim=1)
                x = x + self.attn_out(q, gate, kk, vv, allow, b)
            else:
                x = x + self.gdn_preview(a, b, cache[il], L, causal)
            mo, _ = self.moe(rmsnorm(x, self.w(b + "post_attention_norm.weight"), c.eps), b, None if causal else L)
            x = x + mo
        return self.head(x if rows is None else x[rows])

    def greedy_blocks(self, x, cache, L):
        """x [B, T] clean tokens, cache = causal(x, every=L): every block [s, s+L) with row 0 = x[s]
        and rows 1..L-1 the tokens that greedy causal decoding produces after the prefix x[< s+1],
        all blocks decoded at once, one row per step (train.py's self-distillation targets)."""
        c = self.cfg
        B, T = x.shape
        nb = T // L
        starts = torch.arange(nb, device=x.device) * L
        Nc = c.ssm_conv - 1
        state = []
        for il in range(c.n_layer):
            if c.is_attn(il):
                state.append({"k": [], "v": []})
            else:
                uc = F.pad(cache[il]["u"], (0, 0, Nc, 0))              # zeros before position 0
                ring = torch.stack([uc[:, starts + j] for j in range(Nc)], dim=2)   # [B, nb, 3, C]
                S = cache[il]["S"].transpose(1, 2).reshape(B * nb, c.ssm_v_heads, c.ssm_state, c.ssm_state)
                state.append({"ring": ring, "S": S})
        committed = torch.arange(T, device=x.device)[None, :] < starts[:, None]    # [nb, T]
        tok = x[:, starts]
        rows = [tok]
        for r in range(L - 1):
            pos = starts + r
            h = self.w("token_embd.weight")[tok]                       # [B, nb, E]
            for il in range(c.n_layer):
                b = "blk.%d." % il
                a = rmsnorm(h, self.w(b + "attn_norm.weight"), c.eps)
                st = state[il]
                if c.is_attn(il):
                    q, gate, k, v = self.attn_qkv(a, b, pos)
                    st["k"].append(k)
                    st["v"].append(v)
                    kb = torch.stack(st["k"], dim=2).reshape(B, nb * (r + 1), c.n_head_kv, c.head_dim)
                    vb = torch.stack(st["v"], dim=2).reshape(B, nb * (r + 1), c.n_head_kv, c.head_dim)
                    own = torch.eye(nb, dtype=torch.bool, device=x.device).repeat_interleave(r + 1, dim=1)
                    allow = torch.cat([committed, own], dim=1)
                    h = h + self.attn_out(q, gate, torch.cat([cache[il]["k"], kb], 1),
                                          torch.cat([cache[il]["v"], vb], 1), allow, b)
                else:
                    u, z, beta, g = self.gdn_proj(a, b)
                    w = self.w(b + "ssm_conv1d.weight")
                    y = sum(st["ring"][:, :, j] * w[:, j] for j in range(Nc)) + u * w[:, Nc]
                    st["ring"] = torch.cat([st["ring"][:, :, 1:], u[:, :, None]], dim=2)
                    q, k, v = self.gdn_qkv(F.silu(y))                  # [B, H, nb, d]
                    one = lambda t: t.transpose(1, 2).reshape(B * nb, t.shape[1], 1, *t.shape[3:])
                    o, st["S"], _ = gdn_chunk(one(q), one(k), one(v), one(g.transpose(1, 2)[..., None])[..., 0],
                                              one(beta.transpose(1, 2)[..., None])[..., 0], st["S"])
                    o = o.reshape(B, nb, c.ssm_v_heads, c.ssm_state).transpose(1, 2)
                    h = h + self.gdn_out(o, z, b)
                mo, _ = self.moe(rmsnorm(h, self.w(b + "post_attention_norm.weight"), c.eps), b)
                h = h + mo
            tok = self.head(h).argmax(-1)
            rows.append(tok)
        return torch.stack(rows, dim=2).reshape(B, T)

    def preview_block(self, prompt, block):
        """One preview pass over block [B, n] (mask ids allowed) right after the committed prompt
        [B, s] (s >= 0), as clover --tokens PROMPT --preview-block BLOCK computes it."""
        c = self.cfg
        B, n = block.shape
        s = prompt.shape[1]
        if s > 0:
            _, cache, _ = self.causal(prompt)
        else:
            cache = []
            for il in range(c.n_layer):
                if c.is_attn(il):
                    z = self.w("token_embd.weight").new_zeros(B, 0, c.n_head_kv, c.head_dim)
                    cache.append({"k": z, "v": z})
                else:
                    cache.append({"u": self.w("token_embd.weight").new_zeros(B, 0, c.conv_dim),
                                  "S_final": self.w("token_embd.weight").new_zeros(B, c.ssm_v_heads, c.ssm_state, c.ssm_state)})
        pos = torch.arange(s, s + n, device=block.device)
        allow = torch.ones(n, s + n, dtype=torch.bool, device=block.device)
        x = self.w("token_embd.weight")[block]
        for il in range(c.n_layer):
            b = "blk.%d." % il
            a = rmsnorm(x, self.w(b + "attn_norm.weight"), c.eps)
            if c.is_attn(il):
                q, gate, k, v = self.attn_qkv(a, b, pos)
                x = x + self.attn_out(q, gate, torch.cat([cache[il]["k"], k], 1), torch.cat([cache[il]["v"], v], 1), allow, b)
            else:
                x = x + self.gdn_preview_one(a, b, cache[il])
            mo, _ = self.moe(rmsnorm(x, self.w(b + "post_attention_norm.weight"), c.eps), b, n)
            x = x + mo
        return self.head(x)
