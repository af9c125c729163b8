#!/usr/bin/env bash
# test/gpu_mutants.sh MODEL — shows that the GPU checks bite: builds mutants of clover.cu (each one
# planted bug, applied by sed to a temporary copy: a missing or divergent barrier, the matmul row
# fold, the activation rounding, the delta rule's row order, its lanes' butterfly, its staged rows read too early, its state read before the others' copies land, its dot tail, the Q4_0 dp4a sum, the routing's tie
# rule, the online softmax's rescaling, the attention's q pieces and p and
# its rows' combine, the matvec blocks' own rounding, the conv's ring push and
# gates, the riders' rows (a batch's too), the norm's second rounding, the routing after the riders, moe_out's unused ranks; on the tensor cores:
# the A fragment's rows, the slots' fold, the K-quant mins' rows, the tile's pairs of bsums, an expert's run of pairs, the
# gate's cells in swiglu_mma and its warps' rows, the tile's pieces, the rows g + 8 of a 16-row tile, Q6_K's scale groups,
# a split batch's slots (their fold's pairs, their parts' quarters, the units a slot's block stages, the blocks a split
# SwiGLU row counts before its rounding); the block-scaled
# batches' sum of a unit's blocks, their rows' scales, Q4_0's q - 8, Q8_0's pieces; the weight stages (a
# wait one group short, no warp barrier after it, a unit staged over the one being read); the SwiGLU rows rounded
# after them (too early, a tile's first row alone); the gated norm in the delta rule's launch (its
# group's heads, the values it rounds); the residual step by a matvec launch's last block (the
# norm's sums in a smaller block, too early); best_token's skip and p) into clover-emu and runs --check-ops on MODEL in the three thread
# orders of test/cuda_emu.h. The mma-* mutants need a model with K-quants (gen --type q4_k_m), the
# block-* ones (the Q8_0 and Q4_0 batches on the tensor cores) one with Q4_0, the q8_0-* ones Q8_0,
# the q8_k-* ones Q8_K rounding blocks that span two heads of the delta rule (gen --type q4_k_m);
# ONLY=REGEX: only the mutants whose names match; SKIP=REGEX: not those. Prints one line per
# mutant and order: `caught` with the first failure line (a check-ops FAIL or a cuda-emu error), or
# `missed`. Exit status 1 when a mutant does not apply (the sed changed nothing) or is missed in all
# three orders. Needs build/clover-emu.o (make cuda-emu) and clang++ (CXX_EMU). FIRST_CATCH=1: stop
# at the first order that catches a mutant.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODEL=$1
CXX_EMU=${CXX_EMU:-clang++}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/clover-mutants.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT

# name | sed script: each plants one bug
MUTANTS='missing-syncthreads|/pi\[threadIdx.x \/ WARP\] = at;/{n;/__syncthreads();/d}
divergent-syncthreads|/part\[threadIdx.x \/ WARP\] = m;/{n;s/__syncthreads();/if (threadIdx.x < BLOCK \/ 2) __syncthreads();/}
fold-off-by-one|s/for (int o = lpr \/ 2; o >= D::LPB; o \/= 2) {/for (int o = lpr \/ 2; o > D::LPB; o \/= 2) {/
wrong-rounding|s/(int8_t)__float2int_rn(v \* id)/(int8_t)(int)(v * id)/
delta-rule-rows-forward|s/int t = reverse ? T - 1 - n : n;/int t = n;/
delta-rule-butterfly-reversed|s/for (int o = DR_R \/ 2; o >= 1; o \/= 2) s += __shfl_xor_sync/for (int o = 1; o <= DR_R \/ 2; o *= 2) s += __shfl_xor_sync/
delta-rule-rows-staged-no-barrier|/kq\[(n - n0) \* row + (qk \* DR_R/{n;n;/__syncthreads();/d}
delta-rule-state-copies-no-barrier|/copy16_async(kq + 4 \* x/{n;n;n;/__syncthreads();/d}
delta-rule-tail-from-warp-lanes|s/s += __shfl_sync(0xffffffffu, p\[i\], b, DR_R);/s += __shfl_sync(0xffffffffu, p[i], b);/
q4_0-dp4a-offset|s/return s - 8 \* sa;/return s - 7 * sa;/
route-tie-to-higher|s/(bv2 == best_v \&\& b2 < best)/(bv2 == best_v \&\& b2 > best)/
attention-no-rescale|s/float a = o\[i\] \* c;/float a = o[i];/
attention-q-pieces-swapped|s/qv = load_vec<F4>(\&qr\[w\]\[i\]);/qv = load_vec<F4>(\&qr[w][i ^ 4]);/
attention-p-of-next-keys|s/F4 v = load_vec<F4>(\&p\[w\]\[k\]);/F4 v = load_vec<F4>(\&p[w][(k + 4) % KV_TILE]);/
block-input-no-barrier|/round_row_block(xf + r \* n, (int)n, dt, xs);/{n;/__syncthreads();/d}
conv-push-window-off-by-one|s/if (r < R) ring\[(int64_t)r \* C + c\] = win\[r\];/if (r < R) ring[(int64_t)r * C + c] = win[r + 1];/
conv-gates-skip-block-0|s/if (gt.g)$/if (gt.g \&\& b > 0)/
rider-row-off-by-one|s/(b - b0) \* (blockDim.x \/ rd.lpr)/(b - b0 + 1) * (blockDim.x \/ rd.lpr)/
rider-batch-row-zero|s/(const uint8_t \*)(rd.x + (t0 + k) \* m.n_in)/(const uint8_t *)(rd.x + k * m.n_in)/
last-block-too-early|s/last = atomicAdd(count, 1u) == blocks - 1;/last = atomicAdd(count, 1u) == blocks - 2;/
moe-out-unused-rank|s/if (!used\[k\]) continue;/if (!used[k] \&\& k > 0) continue;/
mma-a-rows-swapped|s/a\[2 \* i + e\] = Q5 ? /a[2 * i + 1 - e] = Q5 ? /
mma-fold-order|s/if (slots == 4) a\[0\]\[e\] += a\[2\]\[e\], a\[1\]\[e\] += a\[3\]\[e\];/if (slots == 4) a[0][e] += a[1][e], a[1][e] = a[2][e] + a[3][e];/
mma-mins-one-row|s/sm\[e\] += (int)((mins\[e\]\[j \/ 4\]/sm[e] += (int)((mins[0][j \/ 4]/
mma-pairs-one-bsum|s/(int16_t)b.w\[2 \* k\] + (int16_t)(b.w\[2 \* k\] >> 16)/(int16_t)b.w[2 * k]/
mma-expert-run-start|s/for (int p = lane; p < y; p += WARP) before += ids\[p\] == e;/for (int p = lane; p <= y; p += WARP) before += ids[p] == e;/
mma-swiglu-gate-cells|s/gs\[cell_tile_row(c)\]\[16 \* hw + cell_weight_row(c)\] = v\[c\]/gs[cell_tile_row(c)][16 * hw + (cell_weight_row(c) ^ 8)] = v[c]/
mma-swiglu-warps-rows|s/hw = w % (MMA_WARPS \/ 2);/hw = w \/ 2 % 2;/
mma-tile-pieces-unordered|s/+ 32 \* j + 8 \* tile_piece(j, t)) : W2{}/+ 32 * j + 8 * t) : W2{}/
mma-no-upper-rows|s/tr.R > MMA_M \/ 2, acc, accm)/tr.R > MMA_M, acc, accm)/g
mma-split-slots-paired-wrong|s/(q < 2 ? acc\[k\] : accm\[k\])/(q < 2 ? acc[k % 3 ? 3 - k : k] : accm[k % 3 ? 3 - k : k])/
mma-split-part-quarters-shared|s/((at \* sp.split + s) \* 4 + q) \* blockDim.x/((at * sp.split + s) * 4) * blockDim.x/
mma-split-stages-slot-0|s/stage_tile<D>(x, x_bytes, (int)m.n_in, tr, xs, s, sp.split)/stage_tile<D>(x, x_bytes, (int)m.n_in, tr, xs, 0, sp.split)/
round-after-too-early|s/if (rounds_after(rq, job, (unsigned)row_blocks))/if (rounds_after(rq, job, (unsigned)row_blocks - 1))/
add-norm-xq2-row-0|s/k ? r.xq2 + t \* r.xq2_bytes : r.xq/k ? r.xq2 : r.xq/
block-tree-butterfly-reversed|s/for (int o = 1; o < 8; o \*= 2) v += __shfl_xor_sync(0xffffffffu, v, o);/for (int o = 4; o >= 1; o \/= 2) v += __shfl_xor_sync(0xffffffffu, v, o);/
block-mma-row-scales-upper|s/scale_of(da\[r % 2 + 2 \* hf\], j)/scale_of(da[r % 2], j)/
block-mma-q4_0-minus-7|s/- 0x08080808u) ^ 0x80808080u/- 0x07070707u) ^ 0x80808080u/
block-tile-scales-unit-0|s/load16(x + tr.act\[r\] \* x_bytes + n + 16 \* u)/load16(x + tr.act[r] * x_bytes + n + 16 * u0)/
q8_0-mma-pieces-unordered|s/return load8(row + 32 \* j + 8 \* tile_piece(j, t));/return load8(row + 32 * j + 8 * t);/
mma-split-swiglu-stages-slot-0|s/tr, xs, (int)(blockIdx.x % sp.split), sp.split);/tr, xs, 0, sp.split);/
mma-split-swiglu-rounding-count|s/if (rounds_after(rq, blockIdx.y, row_blocks))/if (rounds_after(rq, blockIdx.y, gridDim.x - rider_blocks(rd)))/
mma-round-after-first-row|s/for (int r = 0; r < tr.R; r++) round_row_block(h/for (int r = 0; r < 1; r++) round_row_block(h/
mma-stages-wait-one-short|s/copies_wait<MMA_STAGES - 2>();/copies_wait<MMA_STAGES - 1>();/
mma-stages-no-warp-barrier|/copies_wait<MMA_STAGES - 2>();/{n;/__syncwarp();/d}
mma-stages-ring-overwrites|s/ws + ahead % MMA_STAGES \* SB/ws + (ahead - 1) % MMA_STAGES * SB/
mma-q6_k-groups-by-lane|s/lo\[2 \* i + e\] = t % 2 == 0 ? q : 0, hi\[2 \* i + e\] = t % 2 == 0 ? 0 : q;/lo[2 * i + e] = t < 2 ? q : 0, hi[2 * i + e] = t < 2 ? 0 : q;/
attention-combine-block-stride|s/for (int k = threadIdx.x; k < n_head \* hd; k += blockDim.x) {/for (int k = threadIdx.x; k < n_head * hd; k += BLOCK) {/
residual-sums-by-real-warp|s/if (v % WARP == 0) part\[v \/ WARP\] = ss;/if (v % WARP == 0) part[threadIdx.x \/ WARP] = ss;/
residual-before-last-rows|s/if (rs.x \&\& last_block(rs.count, gridDim.x))/if (rs.x \&\& last_block(rs.count, gridDim.x - 1))/
scan-gated-norm-head-0|s/int h0 = h \/ nm.group \* nm.group;/int h0 = 0;/
q8_k-scan-gated-norm-rounds-one-head|s/(h0 + nm.group) \* d);/(h0 + 1) * d);/
best-token-skip-taken|s/if (i != skip \&\& z\[i\] > v) v = z\[i\], at = i;/if (z[i] > v) v = z[i], at = i;/
best-token-p-of-max|s/p\[blockIdx.x\] = (float)(exp((double)top\[1\] - max) \/ S);/p[blockIdx.x] = (float)(exp((double)top[0] - max) \/ S);/'

status=0
while IFS='|' read -r name script; do
    [[ "$name" =~ ${ONLY:-.} ]] || continue
    [ -z "${SKIP:-}" ] || ! [[ "$name" =~ $SKIP ]] || continue
    sed "$script" "$ROOT/clover.cu" > "$TMP/clover.cu"
    if cmp -s "$ROOT/clover.cu" "$TMP/clover.cu"; then
        echo "mutant $name: does not apply (clover.cu changed?)"
        status=1
        continue
    fi
    if ! $CXX_EMU -O1 -std=c++17 -ffp-contract=off -DCLOVER_EMU -I"$ROOT" -x c++ -c "$TMP/clover.cu" -o "$TMP/cu.o" 2> "$TMP/cc.err" ||
       ! $CXX_EMU -o "$TMP/clover-emu" "$ROOT/build/clover-emu.o" "$TMP/cu.o" -lm -lpthread 2>> "$TMP/cc.err"; then
        echo "mutant $name: does not build: $(head -n 1 "$TMP/cc.err")"
        status=1
        continue
    fi
    caught=0
    for order in forward reverse random; do
        # (the first failure ends the run: grep leaves, and the check's next write meets a closed pipe)
        CLOVER_EMU_ORDER=$order timeout 120 "$TMP/clover-emu" -m "$MODEL" --check-ops 2>&1 | grep -m 1 'FAIL\|clover: error' > "$TMP/first"
        rc=${PIPESTATUS[0]}
        first=$(tr -s ' ' < "$TMP/first" | cut -c1-160)
        if [ "$rc" -ne 0 ] && [ -n "$first" ]; then
            echo "mutant $name, $order order: caught (exit $rc): $first"
            caught=$((caught + 1))
            [ -z "${FIRST_CATCH:-}" ] || break
        else
            echo "mutant $name, $order order: missed (exit $rc)"
        fi
    done
    [ "$caught" -gt 0 ] || status=1
done <<< "$MUTANTS"
exit $status
