#!/usr/bin/env python3
"""gguf_edit.py: read and corrupt GGUF files for clover.c's error tests (python3 stdlib only).

  gguf_edit.py get FILE KEY          print a metadata value (arrays: comma-separated)
  gguf_edit.py token FILE TEXT       print the id of the vocabulary entry TEXT (-1 if absent)
  gguf_edit.py tensors FILE          print one line per tensor: name type dims offset nbytes
  gguf_edit.py edit IN OUT OP...     apply the edits in order and write OUT

The file is parsed into header, key/values, tensor infos and the data section; `edit` rewrites the
first three (re-padding to the alignment) and copies the data section unchanged, so tensor offsets
(relative to the data section) keep pointing at the same bytes. Edits:

  --set KEY TYPE VALUE     add or replace a scalar (TYPE: u8 i8 u16 i16 u32 i32 u64 i64 f32 f64 bool str)
  --del KEY                remove a key
  --drop-last KEY          remove the last element of an array
  --tensor NAME FIELD VAL  FIELD: name, type (ggml type id), offset (relative to the data section),
                           dims (comma-separated, ne0 first), add-offset (add VAL to the offset)
  --drop-tensor NAME       remove a tensor's info (its bytes stay in the data section)
  --arch NAME              set general.architecture to NAME and rename every '<old arch>.' key to 'NAME.'
  --version N  --magic STR --n-tensors N  --n-kv N   write these header fields as given (raw)
  --key-len N              write N as the length field of the first key (raw)
  --str-len KEY N          write N as the length field of string value KEY (raw)
  --arr-len KEY N          write N as the element count of array KEY (raw)
  --kv-type KEY N          write N as the value type of KEY (raw; the value bytes stay)
"""
import struct
import sys

SCALAR = {0: '<B', 1: '<b', 2: '<H', 3: '<h', 4: '<I', 5: '<i', 6: '<f', 7: '<?', 10: '<Q', 11: '<q', 12: '<d'}
TYPE_IDS = {'u8': 0, 'i8': 1, 'u16': 2, 'i16': 3, 'u32': 4, 'i32': 5, 'f32': 6, 'bool': 7, 'str': 8,
            'u64': 10, 'i64': 11, 'f64': 12}
STRING, ARRAY = 8, 9
# ggml type id -> (elements per block, bytes per block)
GGML = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34), 9: (32, 36),
        10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210), 15: (256, 292),
        30: (1, 2)}


class Reader:
    def __init__(self, data):
        self.d, self.o = data, 0

    def take(self, n):
        if self.o + n > len(self.d):
            raise ValueError('truncated GGUF')
        v = self.d[self.o:self.o + n]
        self.o += n
        return v

    def un(self, fmt):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self):
        return self.take(self.un('<Q'))

    def value(self, t):
        if t == STRING:
            return self.string()
        if t == ARRAY:
            et, n = self.un('<I'), self.un('<Q')
            return (et, [self.value(et) for _ in range(n)])
        return self.un(SCALAR[t])


def enc_value(t, v):
    if t == STRING:
        return struct.pack('<Q', len(v)) + v
    if t == ARRAY:
        et, items = v
        return struct.pack('<IQ', et, len(items)) + b''.join(enc_value(et, x) for x in items)
    return struct.pack(SCALAR[t], v)


class GGUF:
    def __init__(self, path):
        data = open(path, 'rb').read()
        r = Reader(data)
        self.magic = r.take(4)
        self.version = r.un('<I')
        nt, nk = r.un('<Q'), r.un('<Q')
        self.kv = []  # [key bytes, type, value]
        for _ in range(nk):
            k = r.string()
            t = r.un('<I')
            self.kv.append([k, t, r.value(t)])
        self.tensors = []  # [name bytes, dims, type, offset]
        for _ in range(nt):
            name = r.string()
            nd = r.un('<I')
            dims = [r.un('<Q') for _ in range(nd)]
            self.tensors.append([name, dims, r.un('<I'), r.un('<Q')])
        al = self.get('general.alignment', 32)
        if not isinstance(al, int) or al <= 0:
            al = 32
        start = (r.o + al - 1) // al * al
        self.data = data[start:]
        self.raw = {}  # raw overrides applied when writing

    def find(self, key):
        for e in self.kv:
            if e[0] == key.encode():
                return e
        return None

    def get(self, key, default=None):
        e = self.find(key)
        if e is None:
            return default
        if e[1] == ARRAY:
            return e[2][1]
        return e[2]

    def tensor(self, name):
        for t in self.tensors:
            if t[0] == name.encode():
                return t
        raise SystemExit('gguf_edit: no tensor %s' % name)

    def write(self, path):
        raw = self.raw
        out = bytearray()
        out += raw.get('magic', self.magic)
        out += struct.pack('<I', raw.get('version', self.version))
        out += struct.pack('<Q', raw.get('n_tensors', len(self.tensors)))
        out += struct.pack('<Q', raw.get('n_kv', len(self.kv)))
        for i, (k, t, v) in enumerate(self.kv):
            klen = raw['key_len'] if i == 0 and 'key_len' in raw else len(k)
            out += struct.pack('<Q', klen) + k + struct.pack('<I', t)
            t_raw = raw.get('kv_type', {}).get(k, t)
            out = out[:-4] + struct.pack('<I', t_raw)
            if t == STRING and k in raw.get('str_len', {}):
                out += struct.pack('<Q', raw['str_len'][k]) + v
            elif t == ARRAY and k in raw.get('arr_len', {}):
                e = enc_value(t, v)
                out += e[:4] + struct.pack('<Q', raw['arr_len'][k]) + e[12:]
            else:
                out += enc_value(t, v)
        for name, dims, t, off in self.tensors:
            out += struct.pack('<Q', len(name)) + name + struct.pack('<I', len(dims))
            out += b''.join(struct.pack('<Q', d) for d in dims) + struct.pack('<IQ', t, off)
        al = self.get('general.alignment', 32)
        if not isinstance(al, int) or al <= 0:
            al = 32
        out += b'\0' * ((-len(out)) % al)
        out += self.data
        with open(path, 'wb') as f:
            f.write(out)


def parse_scalar(tname, s):
    t = TYPE_IDS[tname]
    if t == STRING:
        return t, s.encode()
    if t in (6, 12):
        return t, float(s)
    if t == 7:
        return t, s in ('1', 'true')
    return t, int(s, 0)


def edit(g, ops):
    i = 0

    def arg():
        nonlocal i
        if i >= len(ops):
            raise SystemExit('gguf_edit: missing argument after %s' % ops[i - 1])
        i += 1
        return ops[i - 1]

    while i < len(ops):
        op = arg()
        if op == '--set':
            key, (t, v) = arg(), parse_scalar(arg(), arg())
            e = g.find(key)
            if e:
                e[1], e[2] = t, v
            else:
                g.kv.append([key.encode(), t, v])
        elif op == '--del':
            key = arg()
            g.kv = [e for e in g.kv if e[0] != key.encode()]
        elif op == '--drop-last':
            e = g.find(arg())
            if not e or e[1] != ARRAY:
                raise SystemExit('gguf_edit: --drop-last needs an array key')
            e[2][1].pop()
        elif op == '--tensor':
            t, field, val = g.tensor(arg()), arg(), arg()
            if field == 'name':
                t[0] = val.encode()
            elif field == 'type':
                t[2] = int(val, 0)
            elif field == 'offset':
                t[3] = int(val, 0)
            elif field == 'add-offset':
                t[3] += int(val, 0)
            elif field == 'dims':
                t[1] = [int(x, 0) for x in val.split(',')]
            else:
                raise SystemExit('gguf_edit: unknown tensor field %s' % field)
        elif op == '--drop-tensor':
            g.tensors.remove(g.tensor(arg()))
        elif op == '--arch':
            new = arg().encode()
            e = g.find('general.architecture')
            old = e[2] + b'.'
            e[2] = new
            for kv in g.kv:
                if kv[0].startswith(old):
                    kv[0] = new + b'.' + kv[0][len(old):]
        elif op == '--version':
            g.raw['version'] = int(arg(), 0)
        elif op == '--magic':
            g.raw['magic'] = arg().encode()[:4].ljust(4, b'\0')
        elif op == '--n-tensors':
            g.raw['n_tensors'] = int(arg(), 0)
        elif op == '--n-kv':
            g.raw['n_kv'] = int(arg(), 0)
        elif op == '--key-len':
            g.raw['key_len'] = int(arg(), 0)
        elif op == '--str-len':
            key, n = arg(), int(arg(), 0)
            g.raw.setdefault('str_len', {})[key.encode()] = n
        elif op == '--arr-len':
            key, n = arg(), int(arg(), 0)
            g.raw.setdefault('arr_len', {})[key.encode()] = n
        elif op == '--kv-type':
            key, n = arg(), int(arg(), 0)
            g.raw.setdefault('kv_type', {})[key.encode()] = n
        else:
            raise SystemExit('gguf_edit: unknown edit %s' % op)


def main(argv):
    if len(argv) < 3:
        raise SystemExit(__doc__)
    cmd = argv[1]
    if cmd == 'get' and len(argv) == 4:
        v = GGUF(argv[2]).get(argv[3])
        if v is None:
            raise SystemExit('gguf_edit: no key %s' % argv[3])
        show = lambda x: x.decode('utf-8', 'replace') if isinstance(x, bytes) else str(x)
        print(','.join(show(x) for x in v) if isinstance(v, list) else show(v))
    elif cmd == 'token' and len(argv) == 4:
        toks = GGUF(argv[2]).get('tokenizer.ggml.tokens', [])
        want = argv[3].encode()
        print(next((i for i, t in enumerate(toks) if t == want), -1))
    elif cmd == 'tensors' and len(argv) == 3:
        for name, dims, t, off in GGUF(argv[2]).tensors:
            n = 1
            for d in dims:
                n *= d
            blk, size = GGML.get(t, (1, 0))
            print(name.decode(), t, ','.join(map(str, dims)), off, n // blk * size)
    elif cmd == 'edit' and len(argv) >= 4:
        g = GGUF(argv[2])
        edit(g, argv[4:])
        g.write(argv[3])
    else:
        raise SystemExit(__doc__)


if __name__ == '__main__':
    main(sys.argv)
