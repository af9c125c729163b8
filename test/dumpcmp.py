#!/usr/bin/env python3
"""dumpcmp.py: compare two --dump-tensors folders name by name, in forward order.

    python3 test/dumpcmp.py MINE REF [--tol 1e-4] [--spread OTHER] [--skip REGEX] [-v]

MINE and REF hold <name>.bin files and an index.tsv (clover --dump-tensors writes
name/dtype/shape/meaning, build/ref --dump-tensors writes name/dtype/ne/op). Every file listed in
MINE's index must exist in REF with the same size and dtype; f32 values must agree within
max|a - b| <= tol * max|b| (per tensor), i32 exactly. REF names that MINE lacks are listed unless
they match --skip (llama.cpp names with no clover counterpart). Prints one line per name with -v,
else a summary and the first names that disagree (the first one in forward order is where a port
goes wrong); exit status 1 on any disagreement or missing file.

--spread OTHER: OTHER is a second dump of REF's model and prompt by another program (llama.cpp's
reference CPU variant, when REF comes from another variant): each tensor of MINE may then differ
from REF by as much as OTHER does, plus 25% (i32 tensors: differ where OTHER differs).
"""
import array
import os
import re
import sys


def index(folder):
    rows = {}
    order = []
    with open(os.path.join(folder, "index.tsv")) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            cols = line.rstrip("\n").split("\t")
            rows[cols[0]] = cols[1]
            order.append(cols[0])
    return order, rows


def load(path, dtype):
    a = array.array("i" if dtype == "i32" else "f")
    with open(path, "rb") as f:
        a.frombytes(f.read())
    return a


def relative_diff(a, b, dtype):
    """max|a - b| / max|b| (inf where they differ and are i32, or where a NaN is involved)."""
    if a.tobytes() == b.tobytes():
        return 0.0
    if dtype == "i32":
        return float("inf")
    scale = max(abs(v) for v in b) or 1.0
    d = max(abs(x - y) for x, y in zip(a, b))
    return d / scale if d == d else float("inf")


def main():
    args = sys.argv[1:]
    tol, skip, verbose, spread = 1e-4, None, False, None
    pos = []
    i = 0
    while i < len(args):
        if args[i] == "--tol":
            tol = float(args[i + 1]); i += 2
        elif args[i] == "--spread":
            spread = args[i + 1]; i += 2
        elif args[i] == "--skip":
            skip = re.compile(args[i + 1]); i += 2
        elif args[i] == "-v":
            verbose = True; i += 1
        else:
            pos.append(args[i]); i += 1
    if len(pos) != 2:
        sys.exit(__doc__)
    mine, ref = pos
    order, dt = index(mine)
    ref_order, ref_dt = index(ref)
    bad, n_exact, worst, worst_name = [], 0, 0.0, ""
    for name in order:
        pa, pb = os.path.join(mine, name + ".bin"), os.path.join(ref, name + ".bin")
        if not os.path.exists(pb):
            bad.append("%s: not in %s" % (name, ref))
            continue
        if os.path.getsize(pa) != os.path.getsize(pb):
            bad.append("%s: %d bytes vs %d" % (name, os.path.getsize(pa), os.path.getsize(pb)))
            continue
        if ref_dt.get(name, dt[name]) != dt[name]:
            bad.append("%s: dtype %s vs %s" % (name, dt[name], ref_dt[name]))
            continue
        a, b = load(pa, dt[name]), load(pb, dt[name])
        lim = tol
        if spread:
            po = os.path.join(spread, name + ".bin")
            if not os.path.exists(po) or os.path.getsize(po) != os.path.getsize(pb):
                bad.append("%s: not in %s or of another size" % (name, spread))
                continue
            s = relative_diff(load(po, dt[name]), b, dt[name])
            lim = max(tol, 1.25 * s)
        rel = relative_diff(a, b, dt[name])
        if not rel <= lim:
            if dt[name] == "i32":
                k = next(j for j in range(len(a)) if a[j] != b[j])
                bad.append("%s: int32 differs at element %d: %d vs %d" % (name, k, a[k], b[k]))
            else:
                bad.append("%s: max|diff| = %.3g of max|ref| (limit %.3g)" % (name, rel, lim))
            continue
        n_exact += a.tobytes() == b.tobytes()
        if rel >= worst:
            worst, worst_name = rel, name
        if verbose:
            print("%-34s %-4s ok   rel %.3g" % (name, dt[name], rel))
    missing = [n for n in ref_order if n not in dt and not (skip and skip.search(n))]
    print("%d names: %d agree (%d bit-identical, worst %.3g at %s), %d disagree; %d llama.cpp names not dumped%s"
          % (len(order), len(order) - len(bad), n_exact, worst, worst_name or "-", len(bad), len(missing),
             (": " + " ".join(missing[:8]) + (" ..." if len(missing) > 8 else "")) if missing else ""))
    for line in bad[:5]:
        print("  " + line)
    sys.exit(1 if bad or missing or not order else 0)


if __name__ == "__main__":
    main()
