#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The GPU check, one unattended run of under 10 minutes (run from the repository root; logs under
# $CCI_GPU_OUT):
#   1. builds the preload (build-gpu/) and the examples with nvcc, -cudart shared and static;
#   2. runs every example natively and under the preload: the checksums must match, and the
#      shared builds must have been served by the preload (static ones are reported only: their
#      calls do not reach runtime-level hooks);
#   3. runs the reuse-hazard program (tests/gpu/hazard_gpu.cu) natively, under the preload, and
#      under immediate_reuse:True as a control;
#   4. runs torch_workloads.py (encoder, resnet, seedfrag) with PyTorch's allocator (native and
#      expandable segments) and with PYTORCH_NO_CUDA_MEMORY_CACHING=1 under the preload in each of
#      its modes: result_sum must be identical everywhere;
#      REPEATS rounds, every configuration once per round in a rotated order;
#   5. prints the tables (tests/bench/gpu_report.py check): peak reserved memory (median and max
#      over the rounds) and wall time of every configuration against native, then the wall-time
#      verdicts against the 3 % wall-time target (median, spread, ratio of medians, paired ratio),
#      and beside them each side's fastest timed run (the host's fast speed, repeat_stats.py).
# Exit status 1 on any mismatch or failed step. It prints its total time; a round that would not
# fit before the deadline (CCI_DEADLINE, gpu-common.sh) is not started, and the tables say how many
# rounds ran.
#
# Environment: CCI_GPU_OUT (default build-gpu/out/), STEPS (default 10), WARMUP_STEPS (untimed steps first,
# default 2) and TIMED_RUNS (runs of STEPS steps timed in each process, median kept, default 3): the
# wall time of a steady state, without CUDA's start-up (tests/bench/torch_run.py); REPEATS (rounds
# of the torch workloads, default 2), CONFIGS (configurations, below), WORKLOADS (default: encoder resnet
# seedfrag), CHECK_PARTS (default: examples hazards torch; e.g. CHECK_PARTS=torch for the timing
# alone), TORCH_WORKLOADS (path to torch_workloads.py), TORCH_NVML (set: each torch process also
# records its NVML peak, "nvml_peak_mib" in its JSON line), NVCC, PYTHON.
set -u -o pipefail
# shellcheck source=scripts/gpu-common.sh
source "$(dirname "$0")/gpu-common.sh"
STEPS=${STEPS:-10}
WARMUP_STEPS=${WARMUP_STEPS:-2}
TIMED_RUNS=${TIMED_RUNS:-3}
REPEATS=${REPEATS:-2}
WORKLOADS=${WORKLOADS:-encoder resnet seedfrag}
CONFIGS=${CONFIGS:-native native-expandable ours ours-immediate ours-expandable ours-compact}
CHECK_PARTS=${CHECK_PARTS:-examples hazards torch}
[[ $REPEATS =~ ^[1-9][0-9]*$ ]] || { cci_say "REPEATS=$REPEATS: expected a whole number from 1"; exit 1; }
[[ $STEPS =~ ^[1-9][0-9]*$ ]] || { cci_say "STEPS=$STEPS: expected a whole number from 1"; exit 1; }
[[ $WARMUP_STEPS =~ ^[0-9]+$ ]] || { cci_say "WARMUP_STEPS=$WARMUP_STEPS: expected a whole number"; exit 1; }
[[ $TIMED_RUNS =~ ^[1-9][0-9]*$ ]] || { cci_say "TIMED_RUNS=$TIMED_RUNS: expected a whole number from 1"; exit 1; }
# seedfrag's step takes ~0.4 ms: 10 steps would be 4 ms, below the workload's 1 ms rounding of its
# wall time, so it runs STEPS_seedfrag steps (its pattern repeats every 12, peaks are unchanged).
STEPS_seedfrag=${STEPS_seedfrag:-240}
[[ $STEPS_seedfrag =~ ^[1-9][0-9]*$ ]] || { cci_say "STEPS_seedfrag=$STEPS_seedfrag: expected a whole number from 1"; exit 1; }
timing_of() {  # WORKLOAD: sets `timing`, torch_run.py's timing options for it
    local steps=$STEPS
    [[ $1 == seedfrag ]] && steps=$STEPS_seedfrag
    timing=(--steps "$steps" --warmup-steps "$WARMUP_STEPS" --timed-runs "$TIMED_RUNS")
}
part_on() { [[ " $CHECK_PARTS " == *" $1 "* ]]; }
for c in $CONFIGS; do
    case $c in
        native | native-expandable | ours | ours-fences | ours-immediate | ours-expandable | ours-compact | ours-ordinary | \
            ours-torch-cache) ;;
        *) cci_say "CONFIGS: unknown configuration '$c'"; exit 1 ;;
    esac
done
[[ -n ${CONFIGS// /} ]] || { cci_say "CONFIGS is empty"; exit 1; }
status=0
: >"$CCI_GPU_OUT/summary.txt"

cci_find_nvcc || exit 1
cci_gpu_banner
cci_build_preload || exit 1
if part_on examples; then
    for ex in seedfrag pipeline asyncloop; do
        cci_nvcc "$ex" "examples/$ex.c" || status=1
    done
    cci_say "built the examples into $CCI_BIN"
fi

# ---- examples ------------------------------------------------------------------------------
if part_on examples; then
    : >"$CCI_GPU_OUT/examples.txt"
    run_example() {  # NAME BINARY EXPECT [extra compare_checksums.py args]
        local name=$1 bin=$2 expect=$3
        shift 3
        [[ -x $bin ]] || { echo "RESULT $name: FAIL not built" >>"$CCI_GPU_OUT/examples.txt"; status=1; return; }
        cci_run 150 "$CCI_GPU_OUT/examples/$name.compare.log" "$PYTHON" examples/compare_checksums.py \
            --preload "$CCI_PRELOAD" --expect-served "$expect" --timeout 60 --log-dir "$CCI_GPU_OUT/examples" \
            --name "$name" "$@" "$bin" || status=1
        grep '^RESULT' "$CCI_GPU_OUT/examples/$name.compare.log" >>"$CCI_GPU_OUT/examples.txt" ||
            echo "RESULT $name: FAIL (no result, see examples/$name.compare.log)" >>"$CCI_GPU_OUT/examples.txt"
    }
    mkdir -p "$CCI_GPU_OUT/examples"
    for ex in seedfrag pipeline asyncloop; do
        run_example "$ex.shared" "$CCI_BIN/$ex.shared" yes
        run_example "$ex.static" "$CCI_BIN/$ex.static" any
    done
    # Both virtual-memory modes: the same checksums as natively.
    for ex in seedfrag pipeline asyncloop; do
        run_example "$ex.shared.expandable" "$CCI_BIN/$ex.shared" yes --env CCI_ALLOC_CONF=expandable_segments:True
        run_example "$ex.shared.compact" "$CCI_BIN/$ex.shared" yes --env CCI_ALLOC_CONF=compact_segments:True
    done
    # Single-stream programs are safe in the immediate-reuse mode too.
    for ex in seedfrag asyncloop; do
        run_example "$ex.shared.immediate" "$CCI_BIN/$ex.shared" yes --env CCI_ALLOC_CONF=immediate_reuse:True
    done
    {
        echo "Examples: checksum natively vs under the preload; allocations the program made; served by the preload"
        sed 's/^RESULT /    /' "$CCI_GPU_OUT/examples.txt"
    } | tee -a "$CCI_GPU_OUT/summary.txt"
fi

# ---- reuse hazards on the real GPU ------------------------------------------------------------
if part_on hazards; then
    # tests/gpu/hazard_gpu.cu: natively and under the preload every scenario must be intact; with
    # immediate_reuse:True (unsafe by design) the cross-stream scenarios are expected to show
    # corruption, which proves the program sees the hazard.
    mkdir -p "$CCI_BIN"  # the examples part makes it, but it may be left out (CHECK_PARTS)
    if cci_run 120 "$CCI_GPU_OUT/nvcc-hazard.log" "$NVCC" -O2 -cudart shared tests/gpu/hazard_gpu.cu \
            -o "$CCI_BIN/hazard_gpu" -Xlinker -rpath -Xlinker "$CCI_CUDA_LIB" -lcuda; then
        cci_run 120 "$CCI_GPU_OUT/hazard-native.log" "$CCI_BIN/hazard_gpu" || status=1
        cci_run 120 "$CCI_GPU_OUT/hazard-ours.log" env LD_PRELOAD="$CCI_PRELOAD" CCI_LOG=info "$CCI_BIN/hazard_gpu" || status=1
        cci_run 120 "$CCI_GPU_OUT/hazard-ours-immediate.log" env LD_PRELOAD="$CCI_PRELOAD" \
            CCI_ALLOC_CONF=immediate_reuse:True "$CCI_BIN/hazard_gpu"  # a control: corruption expected
        # The large-block scenarios alone too: orders at reuse stop for good once a side stream was
        # seen busy, which the scenarios before them in the full run may have done.
        cci_run 120 "$CCI_GPU_OUT/hazard-ours-large.log" env LD_PRELOAD="$CCI_PRELOAD" CCI_LOG=info \
            "$CCI_BIN/hazard_gpu" large-legacy-then-nonblocking large-two-blocking-streams || status=1
        for v in native ours ours-large ours-immediate; do
            grep '^HAZARD' "$CCI_GPU_OUT/hazard-$v.log" | sed "s/^HAZARD/    $v:/"
        done | tee -a "$CCI_GPU_OUT/summary.txt"
    else
        status=1
    fi
fi

# ---- PyTorch workloads ---------------------------------------------------------------------
# Configurations: PyTorch's own allocator (native, expandable segments), and ours under
# PYTORCH_NO_CUDA_MEMORY_CACHING=1 in the default mode (compact segments where the device offers
# the virtual-memory API), immediate_reuse, PyTorch's expandable segments, our compacting mode by
# name and ordinary segments (ours-ordinary: compact_segments:False); ours-fences: the default mode with a fence per batch of frees
# (CCI_REUSE_ORDERS=0, the policy before orders at reuse); ours-torch-cache: ours in the default mode under PyTorch's own
# cache (the other way a PyTorch user can run us). CONFIGS selects a subset, WORKLOADS the
# workloads.
config_env() {
    case $1 in
        native) echo "CCI_UNUSED=1" ;;
        native-expandable) echo "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" ;;
        ours | ours-torch-cache) echo "CCI_UNUSED=1" ;;
        ours-fences) echo "CCI_REUSE_ORDERS=0" ;;
        ours-immediate) echo "CCI_ALLOC_CONF=immediate_reuse:True" ;;
        ours-expandable) echo "CCI_ALLOC_CONF=expandable_segments:True" ;;
        ours-compact) echo "CCI_ALLOC_CONF=${CCI_COMPACT_CONF:-compact_segments:True}" ;;
        ours-ordinary) echo "CCI_ALLOC_CONF=compact_segments:False" ;;
    esac
}
run_torch() {  # WORKLOAD CONFIG ROUND
    local w=$1 c=$2 r=$3
    local log="$CCI_GPU_OUT/torch-$w-$c-r$r.log" timing
    timing_of "$w"
    [[ -n ${TORCH_NVML:-} ]] && timing+=(--nvml)
    if [[ $c == native* ]]; then
        cci_run 150 "$log" env "$(config_env "$c")" \
            "$PYTHON" tests/bench/torch_run.py "$CCI_WORKLOADS" "$w" "${timing[@]}"
    else
        # CCI_REPORT: the exit-time report as JSON, one file per process; the text report is
        # written through cci_dump_report right after the workload (first round only: the
        # others would repeat it). Neither falls inside the workload's own timing.
        local text=() nocache=PYTORCH_NO_CUDA_MEMORY_CACHING=1
        (( r == 1 )) && text=(--report "$CCI_GPU_OUT/report-$w-$c.txt")
        [[ $c == ours-torch-cache ]] && nocache=CCI_UNUSED=1
        cci_run 150 "$log" env "$(config_env "$c")" "$nocache" \
            LD_PRELOAD="$CCI_PRELOAD" CCI_LOG=info CCI_REPORT="$CCI_GPU_OUT/report-$w-$c-r$r-%p.json" \
            "$PYTHON" tests/bench/torch_run.py "$CCI_WORKLOADS" "$w" "${timing[@]}" ${text[@]+"${text[@]}"}
    fi
}
if ! part_on torch; then
    cci_say "torch workloads skipped (CHECK_PARTS=$CHECK_PARTS)"
elif cci_find_workloads; then
    cci_say "torch workloads from $CCI_WORKLOADS: $WORKLOADS, $WARMUP_STEPS warm-up steps then $TIMED_RUNS timed runs of $STEPS steps (seedfrag: $STEPS_seedfrag) in each process, $REPEATS round(s); configurations: $CONFIGS"
    # Rounds outermost: each round runs every workload in every configuration once, in an order
    # rotated by one place per round, so that a host drifting over the call (clocks, caches, other
    # tenants) weighs on every configuration alike. A round starts only if the last one would
    # still fit before the deadline: then every workload has the same number of rounds.
    cci_rounds_begin
    while cci_round_next 30; do
        for w in $WORKLOADS; do
            for c in $CCI_ORDER; do
                run_torch "$w" "$c" "$CCI_ROUND" || status=1
            done
        done
    done
    (( CCI_ROUNDS_FAILED == 0 )) || status=1
    echo
    CONFIGS="$CONFIGS" WORKLOADS="$WORKLOADS" "$PYTHON" tests/bench/gpu_report.py check "$CCI_GPU_OUT" |
        tee -a "$CCI_GPU_OUT/summary.txt" || status=1
else
    status=1
fi

echo
[[ -f $CCI_GPU_OUT/examples.txt ]] && grep -q ': FAIL' "$CCI_GPU_OUT/examples.txt" && status=1
cci_say "gpu-check: $([[ $status == 0 ]] && echo PASSED || echo FAILED) in $((SECONDS - CCI_T0)) s in all; logs in $CCI_GPU_OUT"
exit $status
