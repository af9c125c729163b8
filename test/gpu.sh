#!/usr/bin/env bash
# test/gpu.sh — the one script run on a lent GPU machine (one H200, 16 cores, no network; README.md,
# "GPU", "On a GPU machine: test/gpu.sh"): it builds clover-cuda, checks it and times it in a single
# call of under 8 minutes, from this repository alone. Through the device tool: `run` with command
# `test/gpu.sh`; the results come back from $OUT.
#
#   test/gpu.sh                  on the GPU machine ($OUT: a temporary folder when unset)
#   GPU_SH_DRY=1 test/gpu.sh     dry run on a machine without a GPU: build/clover-emu (make cuda-emu)
#                                in place of clover-cuda, tiny shapes and short runs, and no nvcc,
#                                nvidia-smi, bandwidth copy (KINDS.md's 4300 GB/s stands in) or
#                                sanitizer; it exercises the control flow, the parsing of clover's
#                                output and the table
#   GPU_SH_DRY=1 GPU_SH_DRY_BIN=./clover test/gpu.sh    the dry run with another binary (./clover
#                                prints the same statistics lines; its --check-ops refuses)
#
# Steps, each under `timeout` and all before one deadline, 420 s after the start:
#   1. make, cc, nvcc and nvidia-smi on PATH, else one line and exit 1; nvidia-smi and
#      nvcc --version into env.txt
#   2. build ./clover, build/gen and build/cmp (not build/ref, build/unit and the other tools that
#      link llama.cpp, whose libraries do not travel), then clover-cuda for sm_90a alone (the H200's
#      own code: no PTX for other GPUs, which would run nvcc's front end a second time; measured on
#      the 2-core build machine, 2026-12-01: 111 s of CPU for sm_90a, 216 s with compute_90 PTX),
#      with ptxas -v and the cubin kept for the cost model, and build/gpu_bw (test/gpu_bw.cu), in one
#      make -j; build/gen writes the real-shape models in the background meanwhile, one process each,
#      and the emulation's counting build and test/costmodel.c are built too. build/gpu_bw measures
#      the device-to-device copy bandwidth that steps 5 and 7 use, and what a graph node costs
#      (step 7's launch cost, in place of the model's 2 us)
#   3. clover-cuda --check-ops on a tiny model of every weight type, then on real-shape slices of the
#      35B model (q4_k_m, q8_0, q4_0; 4 layers: 3 GDN and the attention layer, the real vocabulary,
#      and every clover_moe extra, so that each matrix shape is there)
#   4. test/run.sh gpu_forward against clover-cuda (NO_LLAMA=1: llama.cpp is not there): GPU vs CPU
#      logits, batches, the preview pass, exact draft-self, rollbacks, refusals, on tiny models
#   5. the benchmark on real-shape clover_moe q4_k_m slices of 4 and 8 layers with the real vocabulary (40 layers would not be generated in
#      time): decode t/s (-n 64), prefill t/s (512 ids), the cost of one draft-self round of 15
#      drafts (preview pass, and the 16-row verify with its GDN save and rollback) in decode steps,
#      the bytes one decode step must read and what fraction of the copy bandwidth that reaches;
#      repeated REPS times, the runs of a repetition in turn, medians. A layer's cost is the
#      difference of the two slices over 4 layers, and the 40-layer figures are the 4-layer slice
#      plus 36 such layers
#   6. compute-sanitizer memcheck and racecheck over draft-self on a tiny clover_moe model, if there
#   7. the cost model (test/costmodel.sh, in the background after step 3): the emulation counts what
#      each kernel touches on the two benchmark slices, test/costmodel.c predicts each kernel's time on
#      the H200 at the measured bandwidth with the build's ptxas report, for 40 layers: its table in
#      cost.txt, its summary line here, beside the measured figures of step 5 (PREDICTIONS)
# Then the summary table, last on stdout (the tool returns the last 12,000 characters) and in
# $OUT/summary.txt: one line per item, PASS / FAIL / SKIP, or INFO with the figure. Files under $OUT
# (the tool brings back at most 8): summary.txt env.txt build.log ops.log forward.log bench.log
# sanitizer.log cost.txt. Exit status 1 if any line is FAIL or a step was skipped for want of time.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
DRY=${GPU_SH_DRY:-}
T0=$(date +%s)
DEADLINE=$((T0 + 420))     # the device tool's call must end well inside 8 minutes
if [ -z "${OUT:-}" ]; then OUT=$(mktemp -d "${TMPDIR:-/tmp}/clover-gpu-out.XXXXXX") || exit 1; fi
mkdir -p "$OUT" || exit 1
W=$(mktemp -d "${TMPDIR:-/tmp}/clover-gpu.XXXXXX") || exit 1    # models (gigabytes): never under $OUT
EDIT="python3 test/gguf_edit.py"
ARCH="-gencode arch=compute_90a,code=sm_90a"   # the H200's code only (step 2)
KEEP=build/nvcc-keep                           # nvcc's kept files: the cubin the cost model sizes
declare -A GENPID GENRC
GENS=                      # what each background generator wrote, in how long, and when it was waited for
# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {   # the generators still running, then the models
    local n
    for n in "${!GENPID[@]}"; do [ -n "${GENRC[$n]:-}" ] || kill "${GENPID[$n]}" 2> /dev/null; done
    rm -rf "$W"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# N_DRAFT: draft-self's tokens; a random model accepts ~no draft, so a run is ~N_DRAFT rounds, of
# which the last 15 are cut short by -n: 128 makes the mean round 14 drafts (the table says it)
if [ -n "$DRY" ]; then
    SHAPE=tiny REPS=1 N_DEC=8 N_PRE=32 N_DRAFT=8
else
    SHAPE=real REPS=3 N_DEC=64 N_PRE=512 N_DRAFT=128
fi
N_PROMPT=16                # the decode and draft-self runs' prompt

ROWS=()
row() { ROWS+=("$(printf '%-4s %-34s %s' "$1" "$2" "$3")"); }   # row STATUS ITEM DETAIL
say() { echo "gpu.sh: $(( $(date +%s) - T0 )) s: $*"; }          # progress, before the table
left() { echo $((DEADLINE - $(date +%s))); }
# tl N CMD...: CMD under timeout, N seconds or what is left before the deadline (124 when nothing is)
tl() {
    local s
    s=$(left)
    [ "$s" -gt "$1" ] && s=$1
    shift
    [ "$s" -ge 5 ] || return 124
    timeout -k 5 "$s" "$@"
}
# in_time ITEM: true when at least 20 s are left, else a SKIP line for ITEM
in_time() { [ "$(left)" -ge 20 ] && return 0; row SKIP "$1" "out of time (deadline $((DEADLINE - T0)) s)"; return 1; }
median() { tr ' ' '\n' | grep . | sort -g | awk '{ a[NR] = $1 } END { if (NR) print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
calc() { awk "BEGIN { printf \"%.$1f\", $2 }"; }   # calc DIGITS EXPR (its inputs checked non-empty)
first() { head -n 1 "$1" 2> /dev/null | tr -d '\r' | cut -c1-160; }

finish() {
    local r fails=0
    {
        echo
        echo "== test/gpu.sh summary, $(date -u '+%Y-%m-%d %H:%M UTC'), ${GPU_NAME:-no GPU}${DRY:+ (DRY RUN: $GPU on the CPU)}, $(( $(date +%s) - T0 )) s; logs in $OUT"
        for r in "${ROWS[@]}"; do echo "$r"; done
    } | tee "$OUT/summary.txt"
    # a step skipped for want of time is a finding too: the script is sized to fit
    for r in "${ROWS[@]}"; do [ "${r:0:4}" = FAIL ] || [[ $r == SKIP*"out of time"* ]] && fails=$((fails + 1)); done
    exit $((fails > 0))
}

# --- 1. tools -------------------------------------------------------------------------------------
# CUDA's folder, where it is installed but not on PATH (nvcc and compute-sanitizer live there)
[ -d /usr/local/cuda/bin ] && PATH=$PATH:/usr/local/cuda/bin
need=(make cc python3)
[ -n "$DRY" ] || need+=(nvcc nvidia-smi)
missing=()
for t in "${need[@]}"; do command -v "$t" > /dev/null || missing+=("$t"); done
if [ ${#missing[@]} -gt 0 ]; then
    echo "gpu.sh: FAIL: not on PATH: ${missing[*]} (PATH=$PATH)"
    exit 1
fi
{
    echo "== $(date -u), $(uname -srm), $(nproc) cores, $(grep -m 1 'model name' /proc/cpuinfo | cut -d: -f2)"
    free -g
    df -h "$W"
    git log -1 --oneline 2>&1
    if [ -z "$DRY" ]; then
        tl 30 nvidia-smi
        tl 30 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,power.limit --format=csv
        tl 30 nvcc --version
    fi
} > "$OUT/env.txt" 2>&1
if [ -z "$DRY" ]; then
    GPU_NAME=$(tl 30 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -n 1)
    row INFO "GPU" "$GPU_NAME; $(tl 30 nvcc --version | grep -m 1 release | sed 's/.*release/nvcc/')"
fi

# --- 2. build -------------------------------------------------------------------------------------
say "make clover build/gen build/cmp"
t=$(date +%s)
if tl 120 make -j16 clover build/gen build/cmp > "$OUT/build.log" 2>&1; then
    row PASS "build clover gen cmp" "$(( $(date +%s) - t )) s"
else
    row FAIL "build clover gen cmp" "$(grep -m 1 -i error "$OUT/build.log" | cut -c1-160) (build.log)"
    finish
fi

# gen_bg NAME GEN_ARGS...: build/gen writes $W/NAME.gguf in the background
gen_bg() {
    local n=$1
    shift
    timeout 240 build/gen -o "$W/$n.gguf" --arch clover_moe --mask --shape "$SHAPE" "$@" > "$W/$n.gen" 2>&1 &
    GENPID[$n]=$!
}
# model_ready NAME: waits for NAME's generator; M is then its file (false, with the reason in WHY, if it failed)
model_ready() {
    local n=$1
    if [ -z "${GENRC[$n]:-}" ]; then
        wait "${GENPID[$n]}"
        GENRC[$n]=$?
        echo "== gen $n (exit ${GENRC[$n]}): $(tail -n 1 "$W/$n.gen")" >> "$OUT/build.log"
        GENS+=" $n $(sed -n 's/^gen: wrote .* \([0-9.]* MB in [0-9.]* s\)$/\1/p' "$W/$n.gen"), ready at $(( $(date +%s) - T0 )) s;"
    fi
    M=$W/$n.gguf
    [ "${GENRC[$n]}" -eq 0 ] && return 0
    WHY="build/gen exit ${GENRC[$n]}: $(first "$W/$n.gen")"
    return 1
}
# every clover_moe extra, so that --check-ops meets each matrix shape of the architecture
EXTRAS="--right-conv --reverse --coreset 0.5 --shift-logits"
for t in q4_k_m q8_0 q4_0; do
    # shellcheck disable=SC2086
    gen_bg "ops-$t" --type "$t" --layers 4 $EXTRAS
done
gen_bg bench-4 --type q4_k_m --layers 4
gen_bg bench-8 --type q4_k_m --layers 8

t=$(date +%s)
rc=0
# the cost model's counting emulation: with clang++ its loads are counted too (trace-loads), else the
# plain emulation built with g++ counts only the pages each launch touches
if command -v clang++ > /dev/null; then COUNT_EMU=build/clover-emu-count COUNT_MAKE=(build/clover-emu-count)
else COUNT_EMU=build/clover-emu COUNT_MAKE=(build/clover-emu CXX_EMU=g++); fi
if [ -n "$DRY" ]; then
    GPU=${GPU_SH_DRY_BIN:-build/clover-emu}
    if [ -z "${GPU_SH_DRY_BIN:-}" ]; then
        say "make cuda-emu build/costmodel ${COUNT_MAKE[*]} (dry run)"
        tl 300 make -j16 cuda-emu build/costmodel "${COUNT_MAKE[@]}" >> "$OUT/build.log" 2>&1 || rc=$?
    fi
else
    GPU=./clover-cuda
    say "make clover-cuda build/gpu_bw build/costmodel ${COUNT_MAKE[*]} CUDA_ARCH=\"$ARCH\""
    mkdir -p "$KEEP"
    tl 300 make -j16 clover-cuda build/gpu_bw build/costmodel "${COUNT_MAKE[@]}" CUDA_ARCH="$ARCH" NVCCFLAGS="-Xptxas -v -keep -keep-dir $KEEP" \
        >> "$OUT/build.log" 2>&1 || rc=$?
    # ptxas's report (in build.log) and the cubin's kernel sizes, demangled, for costmodel
    c++filt < "$OUT/build.log" > "$W/ptxas.txt"
    readelf -SW "$KEEP/clover.cubin" 2> /dev/null | sed 's/\.text\./.text. /' | c++filt > "$W/sass.txt"
fi
GPU_OK=
if [ "$rc" -eq 0 ] && [ -x "$GPU" ]; then
    GPU_OK=1
    row PASS "build $GPU" "$(( $(date +%s) - t )) s"
else
    row FAIL "build $GPU" "$(grep -m 1 -i 'error' "$OUT/build.log" | cut -c1-160) (build.log)"
fi
# gpu_ok ITEM: false, with a SKIP line for ITEM, when there is no GPU binary to run
gpu_ok() { [ -n "$GPU_OK" ] && return 0; row SKIP "$1" "no $GPU"; return 1; }

BW= NODE=
if [ -n "$DRY" ]; then
    BW=4300
    row INFO "bandwidth" "$BW GB/s: KINDS.md's H200 figure (dry run, not measured)"
    row INFO "graph node" "2 us: the cost model's own figure (dry run, not measured)"
elif in_time "bandwidth (build/gpu_bw)"; then
    say "build/gpu_bw"
    if [ -x build/gpu_bw ] && tl 60 build/gpu_bw 4 > "$W/bw.txt" 2>&1; then
        BW=$(sed -n 's/.*copy: median \([0-9.]*\) GB\/s.*/\1/p' "$W/bw.txt")
        NODE=$(sed -n 's/.*: [0-9.-]* us of 1 block, \([0-9.]*\) us of .*/\1/p' "$W/bw.txt")
        row INFO "bandwidth (build/gpu_bw)" "$(grep -m 1 'copy: median' "$W/bw.txt" | sed 's/^gpu_bw: //')"
        row INFO "graph node (build/gpu_bw)" "$(grep -m 1 'a graph node' "$W/bw.txt" | sed 's/^gpu_bw: //')"
    else
        row FAIL "bandwidth (build/gpu_bw)" "$(tail -n 1 "$W/bw.txt" 2> /dev/null)$(grep -m 1 error "$OUT/build.log" | cut -c1-120)"
    fi
    cat "$W/bw.txt" >> "$OUT/bench.log" 2> /dev/null
fi

# --- 3. --check-ops -------------------------------------------------------------------------------
# ops ITEM MODEL: clover-cuda --check-ops, judged as run.sh's test_gpu judges it
ops() {
    local item=$1 m=$2 rc last n t
    t=$(date +%s)
    tl 90 "$GPU" -m "$m" --check-ops > "$W/ops.out" 2> "$W/ops.err"
    rc=$?
    { echo "== $item: exit $rc, $(( $(date +%s) - t )) s"; cat "$W/ops.out" "$W/ops.err"; } >> "$OUT/ops.log"
    last=$(tail -n 1 "$W/ops.out")
    n=$(grep -c ' PASS$' "$W/ops.out")
    if [ "$rc" -eq 0 ] && [ "$last" = "check-ops: $n ops, $n passed, 0 failed" ] && [ "$n" -gt 0 ] && ! grep -q FAIL "$W/ops.out"; then
        row PASS "$item" "$n ops ($(( $(date +%s) - t )) s)"
    else
        row FAIL "$item" "exit $rc: $(grep -m 1 FAIL "$W/ops.out" | tr -s ' ' | cut -c1-100)$(first "$W/ops.err") | $last"
    fi
}
if gpu_ok "check-ops"; then
    for t in f32 f16 bf16 q8_0 q4_0 q4_k q5_k q6_k q4_k_m; do
        in_time "ops tiny $t" || continue
        say "check-ops tiny $t"
        if tl 30 build/gen -o "$W/tiny-$t.gguf" --type "$t" > "$W/gen.log" 2>&1; then
            ops "ops tiny $t" "$W/tiny-$t.gguf"
        else
            row FAIL "ops tiny $t" "build/gen: $(first "$W/gen.log")"
        fi
    done
    for t in q4_k_m q8_0 q4_0; do
        in_time "ops $SHAPE $t, 4 layers" || continue
        say "check-ops $SHAPE $t"
        if model_ready "ops-$t"; then ops "ops $SHAPE $t, 4 layers" "$M"; else row FAIL "ops $SHAPE $t, 4 layers" "$WHY"; fi
        rm -f "$M"
    done
fi

# --- 7 (started here). the cost model, in the background: the emulation's counts take minutes -------
# Its bandwidth: the copy's where it was measured, else the H200's nominal 4800 GB/s; its cost of a
# graph node: gpu_bw's chain of launches of 4 blocks an SM where measured, else 2 us. The dry run
# models the 4-layer slice's decode step alone (its two cores are the emulation's already), the GPU
# run both slices' steps and rounds (40 layers, extrapolated).
COST_PID=
if [ ! -x build/costmodel ] || [ ! -x "$COUNT_EMU" ]; then row SKIP "cost model" "no build/costmodel or $COUNT_EMU (build.log)"
elif in_time "cost model"; then
    if model_ready bench-4 && model_ready bench-8; then
        cost_args=(--bw "$([ -n "$DRY" ] && echo 4800 || echo "${BW:-4800}")" --node-us "${NODE:-2}" --emu "$COUNT_EMU" --work "$W/cost" --slice 4 "$W/bench-4.gguf")
        if [ -n "$DRY" ]; then cost_args+=(--decode-only); else cost_args+=(--slice 8 "$W/bench-8.gguf"); fi
        grep -q 'Compiling entry' "$W/ptxas.txt" 2> /dev/null && cost_args+=(--ptxas "$W/ptxas.txt" --sass "$W/sass.txt")
        say "test/costmodel.sh in the background"
        # each emulated run until 30 s before the deadline (a round out of time: the decode step alone)
        timeout -k 5 "$(( $(left) - 10 ))" test/costmodel.sh "${cost_args[@]}" --timeout "$(( $(left) - 30 ))" > "$OUT/cost.txt" 2>&1 &
        COST_PID=$!
    else row FAIL "cost model" "$WHY"; fi
fi

# --- 4. the GPU forward pass on tiny models (test/run.sh gpu_forward) -----------------------------
if gpu_ok "gpu_forward" && in_time "gpu_forward"; then
    say "test/run.sh gpu_forward"
    t=$(date +%s)
    tl 180 env NO_LLAMA=1 EMU="$GPU" GPU_ORDERS=forward CLOVER=./clover test/run.sh gpu_forward > "$OUT/forward.log" 2>&1
    rc=$?
    tally=$(tail -n 1 "$OUT/forward.log")
    n=$(grep -c '^PASS ' "$OUT/forward.log")
    if [ "$rc" -eq 0 ] && [ "$n" -gt 0 ] && [ "$tally" = "$n passed, 0 failed" ]; then
        row PASS "gpu_forward (test/run.sh)" "$tally ($(( $(date +%s) - t )) s)"
    else
        [ "$n" -gt 0 ] || tally="$tally: no check ran (no test_gpu_forward in test/run.sh?)"
        row FAIL "gpu_forward (test/run.sh)" "exit $rc: $tally ($(( $(date +%s) - t )) s)"
        while read -r line; do row FAIL "  gpu_forward" "${line#FAIL gpu_forward/}"; done < <(grep '^FAIL ' "$OUT/forward.log" | head -n 5 | cut -c1-200)
    fi
fi

# --- 5. the benchmark -----------------------------------------------------------------------------
# step_bytes MODEL POS: the bytes one decode step at position POS must read, "total dense experts
# kv gdn": every weight but the embedding table (one row, looked up on the host) once, the experts'
# by n_used / n_expert, the F16 K and V rows of POS positions in each attention layer, and each GDN
# layer's F32 state (n_v_heads x d_state x d_state) read and written. The bench models carry no
# preview-only tensors (no clover_moe extras). gguf_edit.py reads a whole file (seconds for gigabytes,
# four times): it is given the first 64 MiB, which hold the header, the vocabulary and the tensor list.
step_bytes() {
    local m=$W/header.gguf pos=$2 arch used n_exp tensors
    head -c 64M "$1" > "$m" || return 1
    arch=$($EDIT get "$m" general.architecture) && used=$($EDIT get "$m" "$arch.expert_used_count") &&
        n_exp=$($EDIT get "$m" "$arch.expert_count") && tensors=$($EDIT tensors "$m") || return 1
    awk -v used="$used" -v ne="$n_exp" -v pos="$pos" '
        $1 == "token_embd.weight" { next }
        $1 ~ /_exps\.weight$/ { exps += $5 * used / ne; next }
        { dense += $5 }
        $1 ~ /attn_k\.weight$/ { split($3, d, ","); kv += pos * 2 * d[2] * 2 }
        $1 ~ /ssm_a$/ { n_gdn++; nv = $3 }
        $1 ~ /ssm_norm\.weight$/ { ds = $3 }
        END { gdn = n_gdn * 2 * nv * ds * ds * 4; printf "%.0f %.0f %.0f %.0f %.0f\n", dense + exps + kv + gdn, dense, exps, kv, gdn }' <<< "$tensors"
}

# bench_run KIND MODEL ARGS...: one timed run; its stderr in $W/b.err and bench.log (on failure, WHY).
# CUDA_MODULE_LOADING=EAGER: the kernels load with the context, not at their first launch inside
# the timed prefill (CUDA loads them lazily by default)
bench_run() {
    local kind=$1 m=$2
    shift 2
    CUDA_MODULE_LOADING=EAGER tl 60 "$GPU" -m "$m" -ngl 99 -c 4096 -ctk f16 -ctv f16 --temp 0 "$@" > /dev/null 2> "$W/b.err"
    local rc=$?
    { echo "== $kind $(basename "$m") (exit $rc): $*"; cat "$W/b.err"; } >> "$OUT/bench.log"
    [ "$rc" -eq 0 ] || WHY="$kind: exit $rc: $(grep -m 1 error "$W/b.err" | cut -c1-160)"
    return $rc
}
errstat() { sed -n "$1" "$W/b.err" | head -n 1; }   # errstat SED_SCRIPT: its first match in the last run's stderr

declare -A V              # V[L:metric]: the runs' values, space-separated
# bench L: one run of each kind on the L-layer slice; false when one fails (WHY says why)
bench() {
    local L=$1 m=$W/bench-$1.gguf n t d v r nd
    bench_run decode "$m" --tokens "$P_SHORT" -n "$N_DEC" || return 1
    read -r n t < <(errstat 's/^decoded *\([0-9]*\) tokens in *\([0-9.]*\) seconds.*/\1 \2/p')
    [ -n "${t:-}" ] || { WHY="decode: no 'decoded' line"; return 1; }
    V[$L:step_ms]+=" $(calc 3 "1000 * $t / $n")"
    V[$L:plan]=$(errstat 's/^clover: GPU memory: //p')
    V[$L:graph]=$(errstat 's/^clover: GPU decode step: one CUDA graph of \([0-9]*\) .*/\1/p')
    bench_run prefill "$m" --tokens "$P_LONG" -n 0 -b "$N_PRE" -ub "$N_PRE" || return 1
    v=$(errstat 's/^encoded .*speed: *\([0-9.]*\) t\/s/\1/p')
    [ -n "$v" ] || { WHY="prefill: no 'encoded' line"; return 1; }
    V[$L:prefill]+=" $v"
    bench_run draft-self "$m" --tokens "$P_SHORT" -n "$N_DRAFT" --spec-type draft-self --spec-draft-n-max 15 --spec-draft-p-min 0 || return 1
    read -r d v < <(errstat 's/^draft time = \([0-9.]*\) s, verify time = \([0-9.]*\) s/\1 \2/p')
    r=$(errstat 's/^mean accepted length.*(\([0-9]*\) rounds).*/\1/p')
    nd=$(errstat 's/^n_drafted *= *//p')
    if [ -z "${v:-}" ] || [ -z "$nd" ] || [ "${r:-0}" -eq 0 ]; then
        WHY="draft-self: no statistics lines"
        return 1
    fi
    V[$L:preview_ms]+=" $(calc 3 "1000 * $d / $r")"
    V[$L:verify_ms]+=" $(calc 3 "1000 * $v / $r")"
    V[$L:rows]+=" $(calc 2 "1 + $nd / $r")"
}

# med L METRIC: the median of that metric's runs
med() { echo "${V[$1:$2]:-}" | median; }
# bw_line ITEM STEP_MS BYTES: the bytes of a step over its time, and that against the copy bandwidth
bw_line() {
    local name=$1 ms=$2 bytes=$3 gbs
    gbs=$(calc 1 "$bytes / ($ms / 1000) / 1e9")
    row INFO "$name" "$(calc 1 "$bytes / 1e6") MB in $ms ms = $gbs GB/s${BW:+ = $(calc 1 "100 * $gbs / $BW")% of the copy bandwidth, $BW GB/s}"
}

if gpu_ok "bench" && in_time "bench"; then
    # prompts: fixed pseudo-random byte-token ids (every vocabulary has them)
    RANDOM=7
    ids=()
    for ((i = 0; i < N_PRE; i++)); do ids+=($((RANDOM % 256))); done
    P_LONG=$(IFS=,; echo "${ids[*]}")
    P_SHORT=$(IFS=,; echo "${ids[*]:0:$N_PROMPT}")
    ok=1                   # no run failed (a failure or the deadline stops the repetitions)
    for L in 4 8; do
        model_ready "bench-$L" || { row FAIL "bench $L layers" "$WHY"; ok=; }
    done
    for ((rep = 1; rep <= REPS; rep++)); do
        [ -n "$ok" ] || break
        for L in 4 8; do
            in_time "bench repetition $rep" || { ok=; break; }
            say "bench repetition $rep, $L layers"
            bench "$L" || { row FAIL "bench $L layers" "$WHY (bench.log)"; ok=; break; }
        done
    done
    # the figures, from the repetitions that ran, when every metric of both slices has a value
    ok=1
    for L in 4 8; do
        for k in step_ms prefill preview_ms verify_ms rows; do [ -n "${V[$L:$k]:-}" ] || ok=; done
    done
    if [ -n "$ok" ]; then
        declare -A B
        for L in 4 8; do
            read -r "B[$L:total]" "B[$L:dense]" "B[$L:exps]" "B[$L:kv]" "B[$L:gdn]" < <(step_bytes "$W/bench-$L.gguf" $((N_PROMPT + N_DEC / 2)))
            [ -n "${B[$L:gdn]:-}" ] || { row FAIL "bytes/step $L layers" "cannot read the model's tensors (test/gguf_edit.py)"; ok=; }
            step=$(med "$L" step_ms)
            row INFO "$SHAPE q4_k_m $L layers: GPU memory" "${V[$L:plan]:-(no plan line)}"
            row INFO "  decode ($N_DEC tokens)" "$(calc 1 "1000 / $step") t/s, $step ms/step (runs:${V[$L:step_ms]}); one CUDA graph of ${V[$L:graph]:-?} kernels and copies per step"
            row INFO "  prefill ($N_PRE ids, -ub $N_PRE)" "$(med "$L" prefill) t/s (runs:${V[$L:prefill]})"
            row INFO "  verify, 15 drafts" "$(med "$L" verify_ms) ms/round = $(calc 2 "$(med "$L" verify_ms) / $step") decode steps ($(med "$L" rows) rows; GDN save and rollback included)"
            row INFO "  preview, 15 masks" "$(med "$L" preview_ms) ms/round = $(calc 2 "$(med "$L" preview_ms) / $step") decode steps"
            [ -n "$ok" ] || continue
            row INFO "  bytes/step (pos $((N_PROMPT + N_DEC / 2)))" "$(calc 1 "${B[$L:total]} / 1e6") MB: dense $(calc 1 "${B[$L:dense]} / 1e6"), experts $(calc 1 "${B[$L:exps]} / 1e6"), KV $(calc 2 "${B[$L:kv]} / 1e6"), GDN state $(calc 1 "${B[$L:gdn]} / 1e6")"
            bw_line "  bandwidth reached" "$step" "${B[$L:total]}"
        done
    fi
    if [ -n "$ok" ]; then
        # one layer = (8 layers - 4 layers) / 4 (the 3:1 GDN:attention pattern repeats every 4)
        s4=$(med 4 step_ms) s8=$(med 8 step_ms)
        lay_ms=$(calc 4 "($s8 - $s4) / 4")
        lay_b=$(calc 0 "(${B[8:total]} - ${B[4:total]}) / 4")
        row INFO "per layer ((8 - 4 layers) / 4)" "$lay_ms ms/step, $(calc 1 "$lay_b / 1e6") MB/step; verify $(calc 4 "($(med 8 verify_ms) - $(med 4 verify_ms)) / 4") ms, preview $(calc 4 "($(med 8 preview_ms) - $(med 4 preview_ms)) / 4") ms per round"
        est_ms=$(calc 3 "$s4 + 36 * $lay_ms")
        row INFO "est. 40 layers (4 + 36 x per layer)" "decode $(calc 1 "1000 / $est_ms") t/s, $est_ms ms/step; verify $(calc 2 "($(med 4 verify_ms) + 9 * ($(med 8 verify_ms) - $(med 4 verify_ms))) / $est_ms") and preview $(calc 2 "($(med 4 preview_ms) + 9 * ($(med 8 preview_ms) - $(med 4 preview_ms))) / $est_ms") decode steps"
        bw_line "  est. bandwidth reached" "$est_ms" "$(calc 0 "${B[4:total]} + 36 * $lay_b")"
    fi
fi
# --- 7. the cost model's result (started before step 4) ---------------------------------------------
if [ -n "$COST_PID" ]; then
    say "waiting for test/costmodel.sh"
    if wait "$COST_PID"; then
        row INFO "cost model (PREDICTED)" "$(grep '^summary' "$OUT/cost.txt" | sed 's/^summary (PREDICTED, /(/') (cost.txt)"
    else row FAIL "cost model" "exit $?: $(tail -n 1 "$OUT/cost.txt" | cut -c1-160) (cost.txt)"; fi
fi
rm -f "$W"/bench-*.gguf

[ -z "$GENS" ] || row INFO "build/gen in the background" "${GENS%;}"

# --- 6. compute-sanitizer -------------------------------------------------------------------------
if [ -n "$DRY" ]; then
    row SKIP "compute-sanitizer" "dry run"
elif ! command -v compute-sanitizer > /dev/null; then
    row SKIP "compute-sanitizer" "not installed"
elif gpu_ok "compute-sanitizer"; then
    # draft-self on a tiny clover_moe model with every extra: the causal, verify and preview passes and the rollback
    # shellcheck disable=SC2086
    if tl 30 build/gen -o "$W/san.gguf" --arch clover_moe --mask --type q4_k_m $EXTRAS > "$W/gen.log" 2>&1; then
        for tool in memcheck racecheck; do
            in_time "compute-sanitizer $tool" || continue
            say "compute-sanitizer --tool $tool"
            tl 120 compute-sanitizer --tool "$tool" --error-exitcode 99 "$GPU" -m "$W/san.gguf" --tokens 1,2,3,4,5,6 -n 8 --temp 0 -ngl 99 \
                --spec-type draft-self --spec-draft-n-max 7 > "$W/san.txt" 2>&1
            rc=$?
            { echo "== $tool: exit $rc"; cat "$W/san.txt"; } >> "$OUT/sanitizer.log"
            s=$(grep -m 1 'ERROR SUMMARY\|RACECHECK SUMMARY' "$W/san.txt" | sed 's/^=* *//')
            if [ "$rc" -eq 0 ]; then row PASS "compute-sanitizer $tool" "${s:-no summary line}"
            else row FAIL "compute-sanitizer $tool" "exit $rc: ${s:-$(grep -m 1 -i error "$W/san.txt" | cut -c1-160)} (sanitizer.log)"; fi
        done
    else
        row FAIL "compute-sanitizer" "build/gen: $(first "$W/gen.log")"
    fi
fi

finish
