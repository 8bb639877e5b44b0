#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The GPU benchmark, everything side by side in the same run (logs under $CCI_GPU_OUT):
#   0. bench_core (the allocator core alone, thread scaling on this machine's CPUs);
#   1. bench_alloc (tests/bench/bench_alloc.c, built -cudart shared and static): raw cudaMalloc,
#      raw cudaMallocAsync on a pool with an unlimited release threshold, and both under the
#      preload (default and immediate-reuse modes, runtime and driver hooks), per size and for the
#      mixed workload, ending with the per-path table (one row per path);
#   1b. bench_threads (tests/bench/bench_threads.c, the same source the tests build against the
#      fake): the thread table, 64 KiB pairs at 1, 8 and 16 threads, each on its own stream;
#   1c. tests/bench/driver_table.py: the driver hooks called directly (a driver-API program) against
#      the same hooks behind a static cudart, per size: the static cudart's own share of a pair;
#   2. torch.empty/del from Python: PyTorch's caching allocator vs PYTORCH_NO_CUDA_MEMORY_CACHING=1
#      under the preload (and, as a floor, without any cache);
#   3. torch_workloads.py end to end: native, expandable_segments:True, backend:cudaMallocAsync, ours;
#   4. one table of ratios, last.
# About 5-7 minutes on an H100; every step is time-boxed and the table is printed regardless.
#
# Environment: CCI_GPU_OUT (default build-gpu/out/), STEPS (default 10), BENCH_ROUNDS (default 3), TORCH_WORKLOADS, NVCC, PYTHON,
# GPU_BENCH_TORCH=0 (leave out steps 2 and 3: the C tables alone take about a minute).
set -u -o pipefail
# shellcheck source=scripts/gpu-common.sh
source "$(dirname "$0")/gpu-common.sh"
STEPS=${STEPS:-10}
# bench_alloc's configurations each run BENCH_ROUNDS times in a rotated order (alloc_table.py
# --rounds): one process's pair cost varies by tens of percent from the next's on the H100 host.
BENCH_ROUNDS=${BENCH_ROUNDS:-3}
[[ $BENCH_ROUNDS =~ ^[1-9][0-9]?$ ]] || { echo "gpu-bench: BENCH_ROUNDS=$BENCH_ROUNDS: expected 1 to 99" >&2; exit 1; }
status=0

cci_find_nvcc || exit 1
cci_gpu_banner
cci_build_preload || exit 1
cci_nvcc bench_alloc tests/bench/bench_alloc.c tests/bench || exit 1
cci_nvcc bench_threads tests/bench/bench_threads.c tests/bench || exit 1
cci_say "built bench_alloc and bench_threads (shared and static)"

# ---- 0. the core alone, on this machine's CPUs (thread scaling needs more cores than a laptop) ----
if cci_run 120 "$CCI_GPU_OUT/build-core.log" ninja -C "$CCI_BUILD" src/core/libccicore.a &&
   cci_run 60 "$CCI_GPU_OUT/build-bench_core.log" "${CC:-cc}" -O2 -std=c11 -D_GNU_SOURCE -Iinclude -Isrc/core \
       tests/bench/bench_core.c "$CCI_BUILD/src/core/libccicore.a" -o "$CCI_BUILD/bench_core" -pthread -lm; then
    cci_run 90 "$CCI_GPU_OUT/bench_core.txt" "$CCI_BUILD/bench_core" || status=1
    cci_say "bench_core done ($(nproc) CPUs)"
fi

# ---- 1. the C benchmark ----------------------------------------------------------------------
cci_run $((70 * BENCH_ROUNDS + 60)) "$CCI_GPU_OUT/bench_alloc.txt" "$PYTHON" tests/bench/alloc_table.py --rounds "$BENCH_ROUNDS" --preload "$CCI_PRELOAD" \
    --exe "$CCI_BIN/bench_alloc.shared" --exe-static "$CCI_BIN/bench_alloc.static" \
    --log-dir "$CCI_GPU_OUT/bench_alloc" --json-out "$CCI_GPU_OUT/bench_alloc.json" --title "bench_alloc on the GPU" || status=1
sed -n '/^bench_alloc on the GPU/,$p' "$CCI_GPU_OUT/bench_alloc.txt"
cci_say "bench_alloc done"

# ---- 1b. thread scaling ------------------------------------------------------------------------
cci_run 150 "$CCI_GPU_OUT/bench_threads.txt" "$PYTHON" tests/bench/thread_table.py --gpu --preload "$CCI_PRELOAD" \
    --exe "$CCI_BIN/bench_threads.shared" --exe-static "$CCI_BIN/bench_threads.static" \
    --log-dir "$CCI_GPU_OUT/bench_threads" --json-out "$CCI_GPU_OUT/bench_threads.json" --title "bench_threads on the GPU" || status=1
sed -n '/^bench_threads on the GPU/,$p' "$CCI_GPU_OUT/bench_threads.txt"
cci_say "bench_threads done"

# ---- 1c. the driver level: our hooks called directly vs through a static cudart --------------------
cci_run 150 "$CCI_GPU_OUT/driver_table.txt" "$PYTHON" tests/bench/driver_table.py --preload "$CCI_PRELOAD" \
    --exe "$CCI_BIN/bench_threads.shared" --exe-static "$CCI_BIN/bench_threads.static" --rounds "$BENCH_ROUNDS" \
    --json-out "$CCI_GPU_OUT/driver_table.json" || status=1
sed -n '/^driver-level pairs/,$p' "$CCI_GPU_OUT/driver_table.txt"
cci_say "driver table done"

if [[ ${GPU_BENCH_TORCH:-1} != 0 ]]; then
# ---- 2. torch.empty/del ----------------------------------------------------------------------
cci_run 60 "$CCI_GPU_OUT/torch_loop-native.log" "$PYTHON" tests/bench/torch_loop.py "PyTorch caching allocator" || status=1
cci_run 60 "$CCI_GPU_OUT/torch_loop-ours.log" env PYTORCH_NO_CUDA_MEMORY_CACHING=1 LD_PRELOAD="$CCI_PRELOAD" \
    "$PYTHON" tests/bench/torch_loop.py "no PyTorch cache, libccinterpose" || status=1
cci_run 60 "$CCI_GPU_OUT/torch_loop-nocache-raw.log" env PYTORCH_NO_CUDA_MEMORY_CACHING=1 \
    "$PYTHON" tests/bench/torch_loop.py "no cache at all (cudaMalloc per tensor)" --budget 0.15 || true
cci_say "torch.empty/del done"

# ---- 3. end to end ---------------------------------------------------------------------------
# run_workload WORKLOAD CONFIG ENV-ASSIGNMENTS...
run_workload() {
    cci_run 150 "$CCI_GPU_OUT/torch-$1-$2.log" env "${@:3}" "$PYTHON" tests/bench/torch_run.py "$CCI_WORKLOADS" "$1" --steps "$STEPS"
}
if cci_find_workloads; then
    for w in encoder resnet seedfrag; do
        run_workload "$w" native || continue
        run_workload "$w" expandable PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
        run_workload "$w" async PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync
        run_workload "$w" ours PYTORCH_NO_CUDA_MEMORY_CACHING=1 LD_PRELOAD="$CCI_PRELOAD" || status=1
        # PyTorch's own rule (a block is reusable at once on its stream): safe for these
        # single-stream workloads, and what makes our figures comparable with PyTorch's.
        run_workload "$w" ours-immediate PYTORCH_NO_CUDA_MEMORY_CACHING=1 LD_PRELOAD="$CCI_PRELOAD" \
            CCI_ALLOC_CONF=immediate_reuse:True || status=1
        cci_say "$w done"
    done
else
    status=1
fi
else
    cci_say "GPU_BENCH_TORCH=0: torch steps left out"
fi

# ---- 4. the ratios -----------------------------------------------------------------------------
echo
"$PYTHON" tests/bench/gpu_report.py bench "$CCI_GPU_OUT" | tee "$CCI_GPU_OUT/summary.txt" || status=1
cci_say "gpu-bench: $([[ $status == 0 ]] && echo completed || echo 'completed with failures'); logs in $CCI_GPU_OUT"
exit $status
