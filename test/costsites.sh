#!/usr/bin/env bash
# test/costsites.sh MODEL [N] — where the L1 wavefronts of the cost model (test/costmodel.sh) go, by
# line of clover.cu: build/clover-emu-count runs a prompt of two ids and the first draft-self round
# of 15 drafts (the preview pass, the 16-row verify batch, the rollback: costmodel.sh's round) on
# MODEL with CLOVER_EMU_SITES (test/cuda_emu.h), and each load site's wavefronts are summed by the
# kernel function and the source line that issue them (addr2line: the outermost inlined frame, so
# that a helper such as load16 is charged to the line that called it). Prints the N largest
# (default 30), in millions, with the total. A model slice as `make costmodel` makes them
# (build/gen --shape real --type q4_k_m --mask --layers 4; --vocab 4096 makes the LM head small:
# minutes instead of tens of them).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
[ $# -ge 1 ] || { echo "usage: test/costsites.sh MODEL [N]" >&2; exit 1; }
MODEL=$1 N=${2:-30} EMU=${EMU:-build/clover-emu-count}
[ -x "$EMU" ] || { echo "costsites.sh: $EMU is missing (make build/clover-emu-count)" >&2; exit 1; }
command -v addr2line > /dev/null || { echo "costsites.sh: addr2line (binutils) is missing" >&2; exit 1; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/clover-sites.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
CLOVER_EMU_SITES=$TMP/sites CLOVER_EMU_COUNT=$TMP/count CLOVER_EMU_COUNT_STOP=4 CLOVER_EMU_MEMORY=$((48 << 30)) \
    "$EMU" -m "$MODEL" -ngl 99 -c 256 --temp 0 --tokens 7,8 -n 16 --spec-type draft-self --spec-draft-n-max 15 --spec-draft-p-min 0 \
    > "$TMP/out" 2> "$TMP/err" || { echo "costsites.sh: the run failed: $(grep -m 1 error "$TMP/err")" >&2; exit 1; }
[ -s "$TMP/sites" ] || { echo "costsites.sh: no sites were written" >&2; exit 1; }
# one addr2line run for every site: -a prints the address, then -f -i function and file:line for each
# inlined frame, innermost first; a site is charged to its outermost frame in clover.cu with a known line
awk '{print "0x" $1}' "$TMP/sites" | addr2line -e "$EMU" -a -f -i -C |
    awk -v sites="$TMP/sites" -v n="$N" '
        function close_site() { if (k) sum[where != "" ? where : any != "" ? any : "(the emulator)"] += wf[k] }
        BEGIN { while ((getline l < sites) > 0) { split(l, f, " "); wf[++m] = f[2]; total += f[2] } }
        /^0x[0-9a-f]+$/ { close_site(); k++; where = any = ""; next }
        { fn = $0; getline loc; sub(/\(.*/, "", fn); sub(/ \(discriminator.*/, "", loc); sub(/.*\//, "", loc)
          if (loc ~ /^clover\.cu:[0-9]/) where = fn " " loc; else if (loc ~ /^clover\.cu:/) any = fn " clover.cu (line unknown)" }
        END { close_site(); printf "%8.2f M L1 wavefronts in all\n", total / 1e6
              for (w in sum) printf "%8.2f M  %s\n", sum[w] / 1e6, w | "sort -rn | head -" n }'
