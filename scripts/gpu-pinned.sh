#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The pinned host-to-device pipeline on the GPU (tests/bench/bench_pinned.c, logs under
# $CCI_GPU_OUT/pinned/): cudaHostAlloc per batch against one set of buffers pinned up front,
# without and with the preload, REPEATS rounds in a rotated order. Target: per-batch pinning under
# the preload (ours-per-batch) within 5 % of pinning up front without it (raw-upfront). Every run
# also checks that the copied data arrived intact (a buffer handed out while its copy was still
# queued would corrupt it). Before the timing, tests/gpu/pinned_gpu.cu checks the hazard on the GPU
# (natively, under the preload, and as a control under CCI_DEBUG_UNSAFE=no-fences, which must show
# the corruption) and the questions on buffers carved from a reserve segment. About 2 minutes on
# an H100.
#
# Environment: CCI_GPU_OUT, REPEATS (default 5), PINNED_SIZE (bytes, default 16 MiB),
# PINNED_BATCHES (default 300), PINNED_STREAMS (default 4), NVCC, PYTHON.
set -u -o pipefail
# shellcheck source=scripts/gpu-common.sh
source "$(dirname "$0")/gpu-common.sh"
REPEATS=${REPEATS:-5}
SIZE=${PINNED_SIZE:-16777216}
BATCHES=${PINNED_BATCHES:-300}
STREAMS=${PINNED_STREAMS:-4}
status=0

cci_find_nvcc || exit 1
cci_gpu_banner
cci_build_preload || exit 1
cci_nvcc bench_pinned tests/bench/bench_pinned.c tests/bench || exit 1
OUT=$CCI_GPU_OUT/pinned
rm -rf "$OUT" && mkdir -p "$OUT"

# ---- safety and the questions, on the GPU --------------------------------------------------------
if cci_run 120 "$CCI_GPU_OUT/nvcc-pinned_gpu.log" "$NVCC" -O2 -cudart shared tests/gpu/pinned_gpu.cu \
        -o "$CCI_BIN/pinned_gpu" -Xlinker -rpath -Xlinker "$CCI_CUDA_LIB"; then
    cci_run 60 "$OUT/hazard-native.log" "$CCI_BIN/pinned_gpu" hazard || status=1
    cci_run 60 "$OUT/hazard-ours.log" env LD_PRELOAD="$CCI_PRELOAD" CCI_LOG=info "$CCI_BIN/pinned_gpu" hazard || status=1
    cci_run 60 "$OUT/hazard-ours-background.log" env LD_PRELOAD="$CCI_PRELOAD" \
        CCI_ALLOC_CONF=pinned_use_background_threads:True "$CCI_BIN/pinned_gpu" hazard || status=1
    # The control: without the fence the buffer comes back at once and the copy reads the new bytes.
    if cci_run 60 "$OUT/hazard-control.log" env LD_PRELOAD="$CCI_PRELOAD" CCI_DEBUG_UNSAFE=no-fences \
            "$CCI_BIN/pinned_gpu" hazard; then
        cci_say "CONTROL FAILED: no corruption without the fence (the hazard test cannot see the hazard)"
        status=1
    fi
    cci_run 60 "$OUT/questions-ours.log" env LD_PRELOAD="$CCI_PRELOAD" "$CCI_BIN/pinned_gpu" questions || status=1
    cci_run 60 "$OUT/questions-reserve.log" env LD_PRELOAD="$CCI_PRELOAD" \
        CCI_ALLOC_CONF=pinned_reserve_segment_size_mb:4 "$CCI_BIN/pinned_gpu" questions || status=1
    grep -h '^hazard:\|: ok$\|WRONG' "$OUT"/hazard-*.log "$OUT"/questions-*.log | sed 's/^/    /'
    cci_say "pinned_gpu done"
else
    status=1
fi

# run CONFIG: one process of the configuration, its log named for the round.
run() {
    local args=(--size "$SIZE" --batches "$BATCHES" --streams "$STREAMS" --rounds 3 --label "$1")
    local envs=(CCI_REPORT=off)
    case $1 in
        raw-per-batch) args+=(--mode per-batch) ;;
        raw-upfront) args+=(--mode upfront) ;;
        ours-per-batch) args+=(--mode per-batch --expect-reuse); envs+=(LD_PRELOAD="$CCI_PRELOAD") ;;
        ours-upfront) args+=(--mode upfront); envs+=(LD_PRELOAD="$CCI_PRELOAD") ;;
        ours-per-batch-register) args+=(--mode per-batch --expect-reuse)
            envs+=(LD_PRELOAD="$CCI_PRELOAD" "CCI_ALLOC_CONF=pinned_use_cuda_host_register:True,pinned_num_register_threads:8") ;;
        ours-per-batch-background) args+=(--mode per-batch --expect-reuse)
            envs+=(LD_PRELOAD="$CCI_PRELOAD" CCI_ALLOC_CONF=pinned_use_background_threads:True) ;;
    esac
    cci_run 90 "$OUT/$1-r$CCI_ROUND.log" env "${envs[@]}" "$CCI_BIN/bench_pinned.shared" "${args[@]}" || status=1
}

CONFIGS="raw-upfront ours-per-batch raw-per-batch ours-upfront ours-per-batch-register ours-per-batch-background"
cci_rounds_begin
while cci_round_next 30; do
    for c in $CCI_ORDER; do run "$c"; done
done
(( CCI_ROUNDS_FAILED )) && status=1

"$PYTHON" tests/bench/pinned_table.py "$OUT" | tee "$CCI_GPU_OUT/pinned_table.txt" || status=1
exit $status
