#!/usr/bin/env python3
"""bpe.py: the qwen35 byte-level BPE tokenizer of the tiny trained Clover (python3 stdlib only).

Written from the specification (README.md, spec S1.9), not from clover.c:
  - pre-tokenizer: the qwen35 rules (contractions; letter/mark runs with one optional leading
    non-letter; single digits; punctuation runs with an optional leading space and trailing
    newlines; whitespace runs with the \\s*[\\r\\n]+, \\s+(?!\\S) and \\s+ cases);
  - GPT-2 byte -> unicode map; BPE by merge rank (lowest rank first, leftmost on ties);
  - special tokens split out first, longest first.

  bpe.py train CORPUS N_VOCAB OUT.json   learn merges until the vocabulary (256 bytes + merges +
                                         SPECIALS) has N_VOCAB entries
  bpe.py encode VOCAB.json FILE          print the ids of FILE's text, comma-separated
"""
import json
import sys
import unicodedata

# The model's special tokens (control tokens, type 3), stored after the learned ones; <|mask|> is
# the diffusion mask token (tokenizer.ggml.mask_token_id).
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>",
            "<tool_call>", "</tool_call>", "<|mask|>"]

WHITE = set([0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000] +
            list(range(0x2000, 0x200B)))


def is_space(c):
    return ord(c) in WHITE


def is_lm(c):
    return unicodedata.category(c)[0] in "LM"


def is_num(c):
    return unicodedata.category(c)[0] == "N"


def is_nl(c):
    return c in "\r\n"


def pretokenize(s):
    """Split s into pre-tokens (the qwen35 rules, spec S1.9)."""
    out, i, n = [], 0, len(s)
    while i < n:
        c = s[i]
        j = None
        if c == "'" and i + 1 < n:  # 1. contractions
            c1 = s[i + 1].lower()
            if c1 in "stmd":
                j = i + 2
            elif i + 2 < n and (c1 + s[i + 2].lower()) in ("re", "ve", "ll"):
                j = i + 3
        if j is None and not is_nl(c) and not is_num(c) and (is_lm(c) or (i + 1 < n and is_lm(s[i + 1]))):
            j = i + 1  # 2. [^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+
            while j < n and is_lm(s[j]):
                j += 1
        if j is None and is_num(c):
            j = i + 1  # 3. one digit
        if j is None:
            f = s[i + 1] if (c == " " and i + 1 < n) else c
            if not is_space(f) and not is_lm(f) and not is_num(f):
                j = i + 1 if c == " " else i  # 4. ' ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*'
                while j < n and not is_space(s[j]) and not is_lm(s[j]) and not is_num(s[j]):
                    j += 1
                while j < n and is_nl(s[j]):
                    j += 1
        if j is None and is_space(c):
            k, last_nl = i, -1
            while k < n and is_space(s[k]):
                if is_nl(s[k]):
                    last_nl = k
                k += 1
            if last_nl >= 0:
                j = last_nl + 1      # 5. \s*[\r\n]+
            elif k - i > 1 and k < n:
                j = k - 1            # 6. \s+(?!\S)
            else:
                j = k                #    \s+
        if j is None:
            j = i + 1                # 7. one code point
        out.append(s[i:j])
        i = j
    return out


def byte_map():
    keep = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    m, n = {}, 0
    for b in range(256):
        if b in keep:
            m[b] = chr(b)
        else:
            m[b] = chr(0x100 + n)
            n += 1
    return m


BYTE = byte_map()
UNBYTE = {v: k for k, v in BYTE.items()}


def mapped(piece):
    return "".join(BYTE[b] for b in piece.encode("utf-8"))


def train(text, n_vocab):
    """Learn merges on the pre-tokens of text (most frequent pair first; ties: the pair whose
    symbol ids are lowest). Returns (tokens, merges)."""
    counts = {}
    for p in pretokenize(text):
        w = mapped(p)
        counts[w] = counts.get(w, 0) + 1
    tokens = [BYTE[b] for b in range(256)]
    ids = {t: i for i, t in enumerate(tokens)}
    words = [[ids[ch] for ch in w] for w in counts]
    freq = list(counts.values())
    pairs, where = {}, {}
    for wi, w in enumerate(words):
        for a, b in zip(w, w[1:]):
            pairs[(a, b)] = pairs.get((a, b), 0) + freq[wi]
            where.setdefault((a, b), set()).add(wi)
    merges = []
    n_normal = n_vocab - len(SPECIALS)
    while len(tokens) < n_normal and pairs:
        best = max(pairs.items(), key=lambda kv: (kv[1], -kv[0][0], -kv[0][1]))
        (a, b), c = best
        if c < 2:
            break
        text_ab = tokens[a] + tokens[b]
        merges.append(tokens[a] + " " + tokens[b])
        if text_ab in ids:
            nid = ids[text_ab]
        else:
            nid = len(tokens)
            tokens.append(text_ab)
            ids[text_ab] = nid
        for wi in list(where.get((a, b), ())):
            w = words[wi]
            f = freq[wi]
            for x, y in zip(w, w[1:]):  # remove this word's pairs
                pairs[(x, y)] -= f
                if pairs[(x, y)] == 0:
                    del pairs[(x, y)]
                where[(x, y)].discard(wi)
            o, k = [], 0
            while k < len(w):
                if k + 1 < len(w) and w[k] == a and w[k + 1] == b:
                    o.append(nid)
                    k += 2
                else:
                    o.append(w[k])
                    k += 1
            words[wi] = o
            for x, y in zip(o, o[1:]):
                pairs[(x, y)] = pairs.get((x, y), 0) + f
                where.setdefault((x, y), set()).add(wi)
    return tokens + SPECIALS, merges


class Tokenizer:
    def __init__(self, path):
        d = json.load(open(path))
        self.tokens, self.merges = d["tokens"], d["merges"]
        self.ids = {t: i for i, t in enumerate(self.tokens)}
        self.rank = {tuple(m.split(" ")): r for r, m in enumerate(self.merges)}
        self.special = [t for t in self.tokens if t in SPECIALS]
        self.cache = {}
        self.mask_id = self.ids["<|mask|>"]
        self.eos_id = self.ids["<|im_end|>"]
        self.eot_id = self.ids["<|endoftext|>"]

    def bpe(self, piece):
        if piece in self.cache:
            return self.cache[piece]
        sym = list(mapped(piece))
        while len(sym) > 1:
            best, bi = None, -1
            for k in range(len(sym) - 1):
                r = self.rank.get((sym[k], sym[k + 1]))
                if r is not None and (best is None or r < best):
                    best, bi = r, k
            if best is None:
                break
            sym[bi:bi + 2] = [sym[bi] + sym[bi + 1]]
        out = []
        for s in sym:
            if s in self.ids:
                out.append(self.ids[s])
            else:
                out.extend(self.ids[ch] for ch in s)
        self.cache[piece] = out
        return out

    def encode(self, text, special=True):
        frags = [text]
        if special:
            for sp in sorted(self.special, key=len, reverse=True):
                nf = []
                for f in frags:
                    if isinstance(f, int):
                        nf.append(f)
                        continue
                    parts = f.split(sp)
                    for k, p in enumerate(parts):
                        if k:
                            nf.append(self.ids[sp])
                        if p:
                            nf.append(p)
                frags = nf
        out = []
        for f in frags:
            if isinstance(f, int):
                out.append(f)
            else:
                for p in pretokenize(f):
                    out.extend(self.bpe(p))
        return out

    def decode(self, ids):
        b = bytearray()
        for i in ids:
            t = self.tokens[i]
            if t in SPECIALS:
                b += t.encode()
            else:
                b += bytes(UNBYTE[ch] for ch in t)
        return b.decode("utf-8", "replace")


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "train":
        text = open(sys.argv[2], encoding="utf-8").read()
        tokens, merges = train(text, int(sys.argv[3]))
        json.dump({"tokens": tokens, "merges": merges}, open(sys.argv[4], "w"), ensure_ascii=False)
        print("bpe: %d tokens (%d merges, %d special)" % (len(tokens), len(merges), len(SPECIALS)), file=sys.stderr)
    elif len(sys.argv) == 4 and sys.argv[1] == "encode":
        tok = Tokenizer(sys.argv[2])
        print(",".join(map(str, tok.encode(open(sys.argv[3], encoding="utf-8").read()))))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
