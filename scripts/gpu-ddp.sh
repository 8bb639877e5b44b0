#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The DDP row of the GPU check, on a machine with two or more GPUs (one unattended run): a 6-layer
# encoder trained with DistributedDataParallel under torchrun, natively and with
# PYTORCH_NO_CUDA_MEMORY_CACHING=1 under the preload in the default mode and with
# immediate_reuse:True, REPEATS rounds of every configuration in a rotated order. Then
# tests/bench/gpu_report.py ddp prints wall time (median, spread, ratio of medians, paired ratio,
# verdict against the 3 % target) and, per rank, two peaks against native: the allocator's reserved
# figure and NVML's device memory of the process (the like-for-like one: it counts NCCL's and the
# libraries' memory in every configuration). With STACKS_RUN=1 one more, untimed run of ours
# default under CCI_STACKS=8 says how much of our reserved peak callers other than PyTorch held.
# result_sum must agree in every run, to within DDP's own last-bit noise (gpu_report.py,
# DDP_SUM_REL_TOL). NVLink multicast stays off (NCCL_NVLS_ENABLE=0).
#
# Environment: CCI_GPU_OUT (default build-gpu/out/), STEPS (default 20), NPROC (default 2), REPEATS (default 3), CONFIGS (default:
# native ours ours-immediate; also native-expandable, ours-expandable, ours-compact, ours-no-budget,
# ours-pluggable), STACKS_RUN (default 1), CCI_NVML_INTERVAL_MS (NVML sampling period,
# default 2), PYTHON.
set -u -o pipefail
# shellcheck source=scripts/gpu-common.sh
source "$(dirname "$0")/gpu-common.sh"
STEPS=${STEPS:-20}
NPROC=${NPROC:-2}
REPEATS=${REPEATS:-3}
CONFIGS=${CONFIGS:-native ours ours-immediate}
STACKS_RUN=${STACKS_RUN:-1}
for v in STEPS NPROC REPEATS; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { cci_say "$v=${!v}: expected a whole number from 1"; exit 1; }
done
ddp_configs="native native-expandable ours ours-immediate ours-expandable ours-compact ours-no-budget ours-pluggable ours-async ours-async-compact"
for c in $CONFIGS; do
    [[ " $ddp_configs " == *" $c "* ]] || { cci_say "CONFIGS: unknown configuration '$c' ($ddp_configs)"; exit 1; }
done
status=0
cci_build_preload || exit 1
export NCCL_NVLS_ENABLE=0
config_env() {  # CONFIG: sets the array CFG_ENV to its environment
    case $1 in
        native) CFG_ENV=(CCI_UNUSED=1) ;;
        ours) CFG_ENV=(PYTORCH_NO_CUDA_MEMORY_CACHING=1 "LD_PRELOAD=$CCI_PRELOAD" CCI_LOG=info) ;;
        ours-immediate) CFG_ENV=(PYTORCH_NO_CUDA_MEMORY_CACHING=1 "LD_PRELOAD=$CCI_PRELOAD"
            CCI_ALLOC_CONF=immediate_reuse:True) ;;
        native-expandable) CFG_ENV=(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) ;;
        ours-expandable) CFG_ENV=(PYTORCH_NO_CUDA_MEMORY_CACHING=1 "LD_PRELOAD=$CCI_PRELOAD" CCI_LOG=info
            CCI_ALLOC_CONF=expandable_segments:True) ;;
        ours-compact) CFG_ENV=(PYTORCH_NO_CUDA_MEMORY_CACHING=1 "LD_PRELOAD=$CCI_PRELOAD" CCI_LOG=info
            CCI_ALLOC_CONF=compact_segments:True) ;;
        # The default mode without the fence budget: the policy before it, for comparison.
        ours-no-budget) CFG_ENV=(PYTORCH_NO_CUDA_MEMORY_CACHING=1 "LD_PRELOAD=$CCI_PRELOAD" CCI_LOG=info
            CCI_ALLOC_CONF=fence_slack_mb:0) ;;
        # PyTorch's pluggable allocator on the preload's entry points: the stream comes with every call.
        ours-pluggable) CFG_ENV=(CCI_TORCH_PLUGGABLE=1 "LD_PRELOAD=$CCI_PRELOAD" CCI_LOG=info) ;;
        # PyTorch's own stream-ordered backend (cudaMallocAsync / cudaFreeAsync with the stream of
        # every tensor) served by the preload's pool: CCI_ALLOC_CONF, read first, keeps ours active.
        ours-async) CFG_ENV=(PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync CCI_ALLOC_CONF=backend:native
            "LD_PRELOAD=$CCI_PRELOAD" CCI_LOG=info) ;;
        ours-async-compact) CFG_ENV=(PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync
            CCI_ALLOC_CONF=compact_segments:True "LD_PRELOAD=$CCI_PRELOAD" CCI_LOG=info) ;;
    esac
}
run_ddp() {  # LOG [ddp_encoder.py args] -- ENV...
    local log=$1 args=()
    shift
    while [[ $1 != -- ]]; do args+=("$1"); shift; done
    shift
    cci_run 240 "$log" env "$@" torchrun --nproc-per-node "$NPROC" tests/bench/ddp_encoder.py \
        --steps "$STEPS" ${args[@]+"${args[@]}"}
}
# Rounds outermost, the order rotated each round (tests/bench/repeat_stats.py says why); a round
# that would not fit before the deadline is not started.
cci_rounds_begin
while cci_round_next 60; do
    for c in $CCI_ORDER; do
        config_env "$c"
        run_ddp "$CCI_GPU_OUT/ddp-$c-r$CCI_ROUND.log" -- "${CFG_ENV[@]}" || status=1
    done
done
(( CCI_ROUNDS_FAILED == 0 )) || status=1
if [[ $STACKS_RUN == 1 ]]; then
    # Not timed and not part of the rounds: recording call sites costs microseconds per cudaMalloc.
    config_env ours
    run_ddp "$CCI_GPU_OUT/ddp-stacks.log" --report "$CCI_GPU_OUT/report-ddp-stacks-rank{rank}.json" -- \
        "${CFG_ENV[@]}" CCI_STACKS=8 || status=1
fi
echo
CONFIGS="$CONFIGS" "$PYTHON" tests/bench/gpu_report.py ddp "$CCI_GPU_OUT" | tee "$CCI_GPU_OUT/summary-ddp.txt" || status=1
[[ -f $CCI_GPU_OUT/ddp-ours-r1.log ]] && grep -h "stream rule" "$CCI_GPU_OUT/ddp-ours-r1.log" | head -4
cci_say "gpu-ddp: $([[ $status == 0 ]] && echo PASSED || echo FAILED) in $((SECONDS - CCI_T0)) s in all; logs in $CCI_GPU_OUT"
exit $status
