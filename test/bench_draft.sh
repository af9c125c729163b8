#!/usr/bin/env bash
# test/bench_draft.sh — decoding speed of plain decoding vs draft-self on one model, alternating the
# variants run by run (these machines drift), medians of the decode t/s that clover prints.
#
#   test/bench_draft.sh MODEL PROMPT_FILE [REPS [THREADS [N_PREDICT]]]    (defaults: 5, 2, 64)
#
# Variants: --spec-type none; draft-self (exact rule) with n_max 15; the same with
# --spec-draft-adaptive. Prints one line per variant: median t/s, the runs, and the acceptance.
set -u
[ $# -ge 2 ] || { sed -n 2,8p "$0"; exit 2; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODEL=$1 PROMPT=$2 REPS=${3:-5} THREADS=${4:-2} N=${5:-64}
VARIANTS=("--spec-type none" "--spec-type draft-self --spec-draft-n-max 15" "--spec-type draft-self --spec-draft-n-max 15 --spec-draft-adaptive")
declare -A runs accept
for ((r = 0; r < REPS; r++)); do
    for v in "${VARIANTS[@]}"; do
        # shellcheck disable=SC2086
        "$ROOT/clover" -m "$MODEL" -f "$PROMPT" -n "$N" --temp 0 -t "$THREADS" -tb "$THREADS" $v > /dev/null 2> /tmp/bench_draft.$$ ||
            { echo "clover failed: $(head -n 1 /tmp/bench_draft.$$)"; rm -f /tmp/bench_draft.$$; exit 1; }
        runs[$v]+=" $(sed -n 's/^decoded .* speed: *\([0-9.]*\) t\/s/\1/p' /tmp/bench_draft.$$)"
        accept[$v]=$(sed -n 's/^accept *= *//p' /tmp/bench_draft.$$)
    done
done
rm -f /tmp/bench_draft.$$
for v in "${VARIANTS[@]}"; do
    med=$(echo "${runs[$v]}" | tr ' ' '\n' | grep . | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }')
    printf '%-70s median %8.2f t/s  (runs:%s; accept %s)\n' "$v" "$med" "${runs[$v]}" "${accept[$v]}"
done
