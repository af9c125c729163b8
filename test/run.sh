#!/usr/bin/env bash
# test/run.sh — the clover.c test suite: runs the groups of checks in test/groups/*.sh and ends with
# the line `N passed, N failed` (exit status 1 if a check failed). Run from anywhere, after
# `make clover tools` and test/setup-llama.sh (llama.cpp, the oracle behind build/ref and build/unit);
# `make test` does both, and `make cuda-emu` for the gpu groups.
#
#   test/run.sh                         every group
#   test/run.sh drafts                  one group, test/groups/drafts.sh
#   test/run.sh drafts.3                one check, by its id
#   test/run.sh drafts.3 drafts.5 tiny  several checks and groups
#   test/run.sh --list                  the groups, each with the first line of its file
#   test/run.sh --list drafts           the ids and names of a group's checks (nothing runs)
#
# Each check prints one line: `PASS id: name`, `FAIL id: name -- reason` or `SKIP id: name -- why`
# (not counted), a measurement after " -- " on a PASS line. The id is GROUP.N: N counts the group's
# checks in the order the group file opens them, so it stays the same from run to run and does not
# depend on which checks run. Groups run JOBS at a time (default 2, or fewer cores), the longest
# first; each one's lines are printed when it ends, then `# group NAME: S s` on stderr.
#
# Environment:
#   CLOVER=./clover-cuda            test another build of clover (make sanitize: build/san/clover)
#   LLAMA_CPU_VARIANT=haswell       compare against another of llama.cpp's CPU variants (below)
#   NO_LLAMA=1                      without llama.cpp (test/gpu.sh runs `test/run.sh gpu_forward` so,
#                                   on a GPU machine where its libraries are not installed): only
#                                   clover, build/gen and build/cmp are needed, no CPU variant is
#                                   detected, the prompts are tokenized by clover (group tokenizer
#                                   checks it against llama.cpp); groups that call build/ref or
#                                   build/unit fail there
#   REF=..., EMU=...                other builds of build/ref and of the GPU side (build/clover-emu)
#   GPU_ORDERS="forward"            the emulation's thread orders that gpu_forward and gpu_orders run
#   JOBS=1                          one group at a time (its lines as they come)
#
# llama.cpp's CPU backend comes in variants (haswell, icelake, zen4, sapphirerapids, ...) whose
# float orders differ; clover reproduces zen4's. The suite loads zen4 wherever this CPU runs it
# (else the best variant it runs; LLAMA_CPU_VARIANT=NAME forces one) and says which on its first
# line. Against zen4, logits, greedy texts and dumps are compared bit for bit. Against any other
# variant V, clover must be as close to V as llama.cpp's zen4 is, measured in the same run on the
# same model and prompt (plus 10% and 1e-6), and greedy texts are compared as far as zen4 and V
# agree; where this CPU cannot run zen4, the bound is SPREAD (test/lib.sh), llama.cpp's spread
# between its variants as measured on a machine that runs them all.
#
# Models are random tiny GGUFs (build/gen, fixed seeds), written once into build/models/ and shared
# by the groups; the other files of a run live in a temporary folder removed at exit.
#
# Adding a group: write test/groups/NAME.sh. Its first line `# NAME — what it checks` is what
# --list shows; a line `# seconds: S` says roughly how many CPU seconds it takes (the runner starts
# the longest groups first). The file is sourced, after test/lib.sh, in a subshell of its own with
# GROUP=NAME and its own scratch folder $TMP; its checks follow lib.sh's protocol:
# `check NAME || continue` (or `if check NAME; then ... fi`), then one `pass`, `fail REASON` or
# `skip WHY`. Add checks at the end of a group, so that the ids before them stay.
set -u

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
. test/lib.sh

# the groups: one file each
ALL_GROUPS=()
for f in test/groups/*.sh; do ALL_GROUPS+=("$(basename "$f" .sh)"); done
is_group() { [ -f "test/groups/$1.sh" ]; }
about() { head -n 1 "test/groups/$1.sh" | sed 's/^# *//'; }
seconds() { sed -n 's/^# seconds: *\([0-9]*\).*/\1/p' "test/groups/$1.sh" | head -n 1; }
give_up() { echo "FAIL setup: $1"; echo "0 passed, 1 failed"; exit 1; }

# the selection: WANT_GROUP[group] = all, or the numbers of the checks asked for
declare -A WANT_GROUP
LIST=
SELECTED=()
for a in "$@"; do
    case $a in
        --list) LIST=1 ;;
        -h | --help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *.*)
            g=${a%%.*} n=${a#*.}
            is_group "$g" && [[ "$n" =~ ^[1-9][0-9]*$ ]] || give_up "'$a' is not GROUP.N of a group (test/run.sh --list)"
            [ -n "${WANT_GROUP[$g]:-}" ] || SELECTED+=("$g")
            [ "${WANT_GROUP[$g]:-}" = all ] || WANT_GROUP[$g]="${WANT_GROUP[$g]:-} $n" ;;
        *)
            is_group "$a" || give_up "no group '$a'; the groups: ${ALL_GROUPS[*]}"
            [ -n "${WANT_GROUP[$a]:-}" ] || SELECTED+=("$a")
            WANT_GROUP[$a]=all ;;
    esac
done
if [ ${#SELECTED[@]} -eq 0 ]; then
    SELECTED=("${ALL_GROUPS[@]}")
    for g in "${SELECTED[@]}"; do WANT_GROUP[$g]=all; done
    [ -z "$LIST" ] || { for g in "${ALL_GROUPS[@]}"; do printf '%-12s %s\n' "$g" "$(about "$g" | sed "s/^$g *[—-]* *//")"; done; exit 0; }
fi

RUN=$(mktemp -d "${TMPDIR:-/tmp}/clover-test.XXXXXX") || exit 1
trap 'rm -rf "$RUN"' EXIT
trap 'exit 130' INT TERM
SHARED=$RUN/shared
mkdir -p "$SHARED"

# run_group NAME: the group's checks, in this (sub)shell; its tally "passed failed seconds" into
# $RUN/NAME.tally. Checks asked for by id that the group does not have fail.
run_group() {
    GROUP=$1 TMP=$RUN/$1 CHECK_N=0 CHECK_OPEN="" N_PASS=0 N_FAIL=0 WANT=${WANT_GROUP[$1]} WANT_ALL=""
    [ "$WANT" != all ] || WANT_ALL=1
    mkdir -p "$TMP" || return 1
    local t0 n
    t0=$(date +%s)
    # shellcheck disable=SC1090
    . "test/groups/$GROUP.sh"
    [ -z "$CHECK_OPEN" ] || verdict FAIL "test bug: the check ended without a verdict"
    for n in ${WANT_ALL:+}$([ -n "$WANT_ALL" ] || echo "$WANT"); do
        [ "$n" -le "$CHECK_N" ] && continue
        echo "FAIL $GROUP.$n: no such check (group $GROUP has $CHECK_N)"
        N_FAIL=$((N_FAIL + 1))
    done
    # the group's CPU time: its children's user and system seconds, as `times` prints them
    local cpu
    times > "$TMP/times"
    cpu=$(tail -n 1 "$TMP/times" | awk '{ for (i = 1; i <= 2; i++) { split($i, t, /[ms]/); s += 60 * t[1] + t[2] } printf "%.0f", s }')
    echo "$N_PASS $N_FAIL $(( $(date +%s) - t0 )) $cpu" > "$RUN/$GROUP.tally"
}

if [ -n "$LIST" ]; then
    MODELS=$RUN/none   # nothing is made: checks only print themselves
    for g in "${SELECTED[@]}"; do (run_group "$g"); done
    exit 0
fi

NEEDED=("$CLOVER" "$GEN" "$CMP")
[ -n "$NO_LLAMA" ] || NEEDED+=("$REF" "$UNIT")
for f in "${NEEDED[@]}"; do
    [ -x "$f" ] || give_up "$f is missing; run test/setup-llama.sh and make clover tools (make test does both builds)"
done

# the model cache: build/models/GEN, GEN a hash of build/gen; the folders of other builds go
MODELS=build/models/$(md5sum < "$GEN" | cut -c1-12)
mkdir -p "$MODELS" || give_up "cannot create $MODELS"
for d in build/models/*; do [ "$d" = "$MODELS" ] || rm -rf "$d"; done

# llama.cpp's CPU variant: the loaded one (VARIANT, exported so that every build/ref run loads it)
# and the reference one, when this CPU runs it
REFERENCE=zen4
REFERENCE_RUNS=
if [ -n "$NO_LLAMA" ]; then
    VARIANT=none
    echo "# NO_LLAMA=1: no llama.cpp; only the groups that need none (gpu_forward) can pass"
elif ! VARIANT=$("$REF" --cpu-variant 2> "$RUN/err"); then
    give_up "build/ref --cpu-variant: $(first_line "$RUN/err")"
elif [ "$VARIANT" = "$REFERENCE" ]; then
    echo "# llama.cpp CPU variant: $VARIANT, the one clover reproduces: logits, texts and dumps compared bit for bit"
elif LLAMA_CPU_VARIANT=$REFERENCE "$REF" --cpu-variant > /dev/null 2>&1; then
    REFERENCE_RUNS=1
    echo "# llama.cpp CPU variant: $VARIANT; clover reproduces $REFERENCE, so clover must be as close to $VARIANT as $REFERENCE is (measured in this run)"
else
    echo "# llama.cpp CPU variant: $VARIANT; this CPU cannot run $REFERENCE (the variant clover reproduces), so clover must be within SPREAD of $VARIANT"
fi
export LLAMA_CPU_VARIANT=$VARIANT

# the longest groups first, JOBS at a time
ORDER=$(for g in "${SELECTED[@]}"; do echo "$(seconds "$g") $g"; done | sort -k1,1nr -k2 | cut -d' ' -f2)
JOBS=${JOBS:-2}
[ "$(nproc)" -ge "$JOBS" ] || JOBS=$(nproc)
[ ${#SELECTED[@]} -gt 1 ] || JOBS=1
t_start=$(date +%s)
ended() {   # ended NAME: its lines (when they went to a file) and its time
    [ "$JOBS" -eq 1 ] || cat "$RUN/$1.log"
    local p f s c
    read -r p f s c 2> /dev/null < "$RUN/$1.tally"
    echo "# group $1: ${s:-?} s (CPU ${c:-?} s)" >&2
}
declare -A PID_OF
running=0
reap() {   # waits for one group to end
    local pid
    wait -n -p pid
    ended "${PID_OF[$pid]}"
    running=$((running - 1))
}
for g in $ORDER; do
    if [ "$JOBS" -eq 1 ]; then
        (run_group "$g")
        ended "$g"
        continue
    fi
    [ "$running" -lt "$JOBS" ] || reap
    (run_group "$g") > "$RUN/$g.log" 2>&1 &
    PID_OF[$!]=$g
    running=$((running + 1))
done
while [ "$running" -gt 0 ]; do reap; done

n_pass=0 n_fail=0
for g in "${SELECTED[@]}"; do
    if read -r p f _ 2> /dev/null < "$RUN/$g.tally"; then
        n_pass=$((n_pass + p)) n_fail=$((n_fail + f))
    else
        echo "FAIL $g: the group ended early (no tally)"
        n_fail=$((n_fail + 1))
    fi
done
echo "# total: $(( $(date +%s) - t_start )) s" >&2
echo "$n_pass passed, $n_fail failed"
[ "$n_fail" -eq 0 ]
