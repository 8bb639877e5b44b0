#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The GPU check, one device call (run from the repository root; logs under $OUT):
#   1. builds the preload (build-gpu/) and the examples with nvcc, -cudart shared and static;
#   2. runs every example natively and under the preload: the checksums must match, and the
#      shared builds must have been served by the preload (static ones are reported only: their
#      calls do not reach runtime-level hooks);
#   3. runs torch_workloads.py (encoder, resnet, seedfrag) natively and with
#      PYTORCH_NO_CUDA_MEMORY_CACHING=1 under the preload: result_sum must be identical;
#   4. prints the table: wall time and peak reserved memory, PyTorch's vs ours.
# Exit status 1 on any mismatch or failed step. About 3-5 minutes on an H100.
#
# Environment: OUT (default build-gpu/out/), STEPS (default 10), TORCH_WORKLOADS (path to
# torch_workloads.py), NVCC, PYTHON.
set -u -o pipefail
# shellcheck source=scripts/gpu-common.sh
source "$(dirname "$0")/gpu-common.sh"
STEPS=${STEPS:-10}
status=0

cci_find_nvcc || exit 1
cci_gpu_banner
cci_build_preload || exit 1
for ex in seedfrag pipeline asyncloop; do
    cci_nvcc "$ex" "examples/$ex.c" || status=1
done
cci_say "built the examples into $CCI_BIN"

# ---- examples ------------------------------------------------------------------------------
: >"$OUT/examples.txt"
run_example() {  # NAME BINARY EXPECT [extra compare_checksums.py args]
    local name=$1 bin=$2 expect=$3
    shift 3
    [[ -x $bin ]] || { echo "RESULT $name: FAIL not built" >>"$OUT/examples.txt"; status=1; return; }
    cci_run 150 "$OUT/examples/$name.compare.log" "$PYTHON" examples/compare_checksums.py \
        --preload "$CCI_PRELOAD" --expect-served "$expect" --timeout 60 --log-dir "$OUT/examples" \
        --name "$name" "$@" "$bin" || status=1
    grep '^RESULT' "$OUT/examples/$name.compare.log" >>"$OUT/examples.txt" ||
        echo "RESULT $name: FAIL (no result, see examples/$name.compare.log)" >>"$OUT/examples.txt"
}
mkdir -p "$OUT/examples"
for ex in seedfrag pipeline asyncloop; do
    run_example "$ex.shared" "$CCI_BIN/$ex.shared" yes
    run_example "$ex.static" "$CCI_BIN/$ex.static" any
done
# Single-stream programs are safe in the immediate-reuse mode too.
for ex in seedfrag asyncloop; do
    run_example "$ex.shared.immediate" "$CCI_BIN/$ex.shared" yes --env CCI_ALLOC_CONF=immediate_reuse:True
done
{
    echo "Examples: checksum natively vs under the preload; allocations the program made; served by the preload"
    sed 's/^RESULT /    /' "$OUT/examples.txt"
} | tee "$OUT/summary.txt"

# ---- PyTorch workloads ---------------------------------------------------------------------
if cci_find_workloads; then
    cci_say "torch workloads from $CCI_WORKLOADS, $STEPS steps each"
    for w in encoder resnet seedfrag; do
        cci_run 150 "$OUT/torch-$w-native.log" "$PYTHON" tests/bench/torch_run.py "$CCI_WORKLOADS" "$w" --steps "$STEPS"
        # CCI_REPORT: the exit-time report as JSON, one file per process; the text and HTML reports
        # are written through cci_dump_report right after the workload.
        cci_run 150 "$OUT/torch-$w-ours.log" env PYTORCH_NO_CUDA_MEMORY_CACHING=1 LD_PRELOAD="$CCI_PRELOAD" \
            CCI_LOG=info CCI_REPORT="$OUT/report-$w-%p.json" \
            "$PYTHON" tests/bench/torch_run.py "$CCI_WORKLOADS" "$w" --steps "$STEPS" \
            --report "$OUT/report-$w.txt" --report "$OUT/report-$w.html" || status=1
        cci_say "$w done"
    done
    echo
    "$PYTHON" tests/bench/gpu_report.py check "$OUT" | tee -a "$OUT/summary.txt" || status=1
else
    status=1
fi

echo
grep -q ': FAIL' "$OUT/examples.txt" && status=1
cci_say "gpu-check: $([[ $status == 0 ]] && echo PASSED || echo FAILED); logs in $OUT"
exit $status
