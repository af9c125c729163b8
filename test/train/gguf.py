"""gguf.py: write the tiny Clover as a clover_moe GGUF (F32 or Q8_0) and read GGUF tensors back
(F32, Q8_0), with torch. Keys and tensors: README.md's spec S1.1-S1.2 and the
clover_moe contract of spec S2.1."""
import struct

import torch

ALIGN = 32
F32, Q8_0 = 0, 8
U32, I32, F32V, BOOL, STR, ARR = 4, 5, 6, 7, 8, 9

CHAT_TEMPLATE = ("{%- for message in messages %}"
                 "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
                 "{%- endfor %}"
                 "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n<think>\\n' }}{%- endif %}")


def _s(x):
    b = x.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


class KV:
    def __init__(self):
        self.parts, self.n = [], 0

    def add(self, key, t, v):
        out = _s(key) + struct.pack("<I", t)
        if t == U32:
            out += struct.pack("<I", v)
        elif t == I32:
            out += struct.pack("<i", v)
        elif t == F32V:
            out += struct.pack("<f", v)
        elif t == BOOL:
            out += struct.pack("<B", 1 if v else 0)
        elif t == STR:
            out += _s(v)
        else:
            et, items = v
            out += struct.pack("<IQ", et, len(items))
            for x in items:
                out += _s(x) if et == STR else struct.pack("<i" if et == I32 else "<I", x)
        self.parts.append(out)
        self.n += 1


def quantize_q8_0(x):
    """ggml's quantize_row_q8_0_ref: per 32 values d = max|x|/127, q = roundf(x/d), d as fp16."""
    x = x.float().reshape(-1, 32)
    amax = x.abs().max(dim=1).values
    d = amax / 127.0
    idv = torch.where(d > 0, 1.0 / torch.where(d > 0, d, torch.ones_like(d)), torch.zeros_like(d))
    v = x * idv[:, None]
    q = (torch.sign(v) * torch.floor(v.abs() + 0.5)).clamp(-128, 127).to(torch.int8)
    dh = d.half()
    blocks = torch.cat([dh.view(torch.int16).reshape(-1, 1).view(torch.uint8).reshape(-1, 2), q.view(torch.uint8)], 1)
    return blocks.contiguous().numpy().tobytes()


def dequantize_q8_0(raw, n):
    b = torch.frombuffer(bytearray(raw), dtype=torch.uint8).reshape(-1, 34)
    d = b[:, :2].contiguous().view(torch.float16).float().reshape(-1, 1)
    q = b[:, 2:].contiguous().view(torch.int8).float()
    return (q * d).reshape(-1)[:n]


# matrices stored as Q8_0 in the Q8_0 file; everything else (norms, conv taps, ssm_a, dt biases,
# the router, the shared-expert gate vector, the reverse mix) stays F32, as llama-quantize does
def is_quantized(name):
    if name.endswith("ffn_gate_inp.weight") or name.endswith("ffn_gate_inp_shexp.weight"):
        return False
    return any(name.endswith(s) for s in (
        "token_embd.weight", "output.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight",
        "attn_output.weight", "attn_qkv.weight", "attn_gate.weight", "ssm_beta.weight", "ssm_alpha.weight",
        "ssm_out.weight", "ssm_alpha_rev.weight", "ssm_beta_rev.weight", "_exps.weight", "_shexp.weight"))


def write(path, cfg, tok, tensors, qtype, name):
    a = "clover_moe"
    kv = KV()
    kv.add("general.architecture", STR, a)
    kv.add("general.name", STR, name)
    kv.add("general.alignment", U32, ALIGN)
    kv.add("general.file_type", U32, 7 if qtype == Q8_0 else 0)
    kv.add("general.license", STR, "public domain (weights trained on the King James Bible; see README)")
    c = cfg
    for k, t, v in [
            ("block_count", U32, c.n_layer), ("context_length", U32, c.n_ctx), ("embedding_length", U32, c.n_embd),
            ("feed_forward_length", U32, c.n_ff_exp), ("attention.head_count", U32, c.n_head),
            ("attention.head_count_kv", U32, c.n_head_kv), ("attention.key_length", U32, c.head_dim),
            ("attention.value_length", U32, c.head_dim), ("attention.layer_norm_rms_epsilon", F32V, c.eps),
            ("rope.freq_base", F32V, c.rope_base), ("rope.dimension_count", U32, c.n_rot),
            ("rope.dimension_sections", ARR, (I32, [11, 11, 10, 0])),
            ("expert_count", U32, c.n_expert), ("expert_used_count", U32, c.n_expert_used),
            ("expert_feed_forward_length", U32, c.n_ff_exp), ("expert_shared_feed_forward_length", U32, c.n_ff_shexp),
            ("ssm.conv_kernel", U32, c.ssm_conv), ("ssm.state_size", U32, c.ssm_state),
            ("ssm.group_count", U32, c.ssm_groups), ("ssm.time_step_rank", U32, c.ssm_v_heads),
            ("ssm.inner_size", U32, c.value_dim), ("full_attention_interval", U32, c.attn_interval),
            ("diffusion.block_size", U32, c.block_size), ("diffusion.shift_logits", BOOL, False),
            ("diffusion.coreset_top_p", F32V, c.coreset_top_p)]:
        kv.add(a + "." + k, t, v)
    types = [3 if t in tok.special else 1 for t in tok.tokens]
    kv.add("tokenizer.ggml.model", STR, "gpt2")
    kv.add("tokenizer.ggml.pre", STR, "qwen35")
    kv.add("tokenizer.ggml.tokens", ARR, (STR, tok.tokens))
    kv.add("tokenizer.ggml.token_type", ARR, (I32, types))
    kv.add("tokenizer.ggml.merges", ARR, (STR, tok.merges))
    kv.add("tokenizer.ggml.eos_token_id", U32, tok.eos_id)
    kv.add("tokenizer.ggml.bos_token_id", U32, tok.eot_id)
    kv.add("tokenizer.ggml.padding_token_id", U32, tok.eot_id)
    kv.add("tokenizer.ggml.add_bos_token", BOOL, False)
    kv.add("tokenizer.ggml.mask_token_id", U32, tok.mask_id)
    kv.add("tokenizer.chat_template", STR, CHAT_TEMPLATE)

    infos, datas, off = [], [], 0
    # the clover_moe extras last: a qwen35moe twin for llama.cpp is then this file without their
    # infos (test/gguf_edit.py --arch qwen35moe --drop-tensor ...), the remaining data contiguous
    extra = lambda n: "_rev" in n or "ssm_conv1d_right" in n
    for n, t in sorted(tensors.items(), key=lambda kv: extra(kv[0])):
        ne = list(reversed(t.shape))  # ggml order: ne[0] is the contiguous dimension
        ty = Q8_0 if (qtype == Q8_0 and is_quantized(n) and ne[0] % 32 == 0) else F32
        data = quantize_q8_0(t) if ty == Q8_0 else t.float().contiguous().numpy().tobytes()
        infos.append(_s(n) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", x) for x in ne) +
                     struct.pack("<IQ", ty, off))
        pad = (-len(data)) % ALIGN
        datas.append(data + b"\0" * pad)
        off += len(data) + pad
    head = b"GGUF" + struct.pack("<IQQ", 3, len(infos), kv.n) + b"".join(kv.parts) + b"".join(infos)
    head += b"\0" * ((-len(head)) % ALIGN)
    with open(path, "wb") as f:
        f.write(head)
        for d in datas:
            f.write(d)


def read_tensors(path, with_types=False):
    """name -> float32 tensor in torch layout (reversed ne), dequantised (and, with_types, the
    names of the Q8_0 tensors)."""
    data = open(path, "rb").read()
    o = [0]

    def un(fmt):
        v = struct.unpack_from(fmt, data, o[0])
        o[0] += struct.calcsize(fmt)
        return v[0]

    def st():
        n = un("<Q")
        o[0] += n
        return data[o[0] - n:o[0]]

    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def skip(t):
        if t == STR:
            st()
        elif t == ARR:
            et, n = un("<I"), un("<Q")
            for _ in range(n):
                skip(et)
        else:
            o[0] += sizes[t]

    assert data[:4] == b"GGUF"
    o[0] = 4
    un("<I")
    nt, nk = un("<Q"), un("<Q")
    for _ in range(nk):
        st()
        skip(un("<I"))
    infos = []
    for _ in range(nt):
        name = st().decode()
        nd = un("<I")
        ne = [un("<Q") for _ in range(nd)]
        infos.append((name, ne, un("<I"), un("<Q")))
    base = o[0] + ((-o[0]) % ALIGN)
    out = {}
    for name, ne, ty, off in infos:
        n = 1
        for x in ne:
            n *= x
        if ty == F32:
            t = torch.frombuffer(bytearray(data[base + off:base + off + 4 * n]), dtype=torch.float32).clone()
        elif ty == Q8_0:
            t = dequantize_q8_0(data[base + off:base + off + n // 32 * 34], n)
        else:
            raise ValueError("type %d" % ty)
        out[name] = t.reshape(list(reversed(ne)))
    if with_types:
        return out, [name for name, ne, ty, off in infos if ty == Q8_0]
    return out
