#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The tuner on a GPU, one unattended run of a few minutes (run from the repository root; logs and
# results under $CCI_GPU_OUT):
#   1. builds the preload and ccreplay (build-gpu/) and the examples with nvcc (-cudart shared);
#   2. runs each example under the preload with CCI_TRACE and a JSON exit report: the report's
#      recommendation (what_if_replay.recommended) and `ccreplay --sweep --json` on the recorded
#      trace must name the same configuration (docs/reports.md, "The tuner's rule");
#   3. runs each example in the compact and the expandable mode with a JSON exit report and prints
#      the host time per call that the preload's cost counters measured for each virtual-memory
#      call (vmm_*_ns / vmm_*_calls), beside the table in src/report/report_tuner.c (measured
#      2026-11-28 on an H100): the figures to refresh the table with when they differ.
# Results: $CCI_GPU_OUT/tuner.txt (the table and the verdicts). Exit status 1 when the two
# recommendations differ or a step fails.
#
# Environment: CCI_GPU_OUT (default build-gpu/out/), EXAMPLES (default: seedfrag pipeline asyncloop),
# NVCC, PYTHON.
set -u -o pipefail
# shellcheck source=scripts/gpu-common.sh
source "$(dirname "$0")/gpu-common.sh"
EXAMPLES=${EXAMPLES:-seedfrag pipeline asyncloop}
status=0

cci_find_nvcc || exit 1
cci_gpu_banner
cci_build_preload || exit 1
cci_run 240 "$CCI_GPU_OUT/build-ccreplay.log" ninja -C "$CCI_BUILD" src/tools/ccreplay || exit 1
CCREPLAY=$CCI_ROOT/$CCI_BUILD/src/tools/ccreplay

results=$CCI_GPU_OUT/tuner.txt
: >"$results"
for ex in $EXAMPLES; do
    cci_nvcc "$ex" "examples/$ex.c" || { status=1; continue; }
    dir=$CCI_GPU_OUT/tuner-$ex
    mkdir -p "$dir"
    # 2. One voice: the exit report and the sweep on the trace of the same run (the sweep's JSON
    # to a file of its own: cci_run mixes stdout and stderr in its log).
    # shellcheck disable=SC2016  # $0..$2 are the inner shell's
    if cci_run 120 "$dir/default.log" env LD_PRELOAD="$CCI_PRELOAD" CCI_TRACE="$dir/run.trace" \
           CCI_REPORT="$dir/default.json" "$CCI_BIN/$ex.shared" &&
       cci_run 300 "$dir/sweep.log" sh -c '"$0" --sweep --json "$1" >"$2"' "$CCREPLAY" "$dir/run.trace" \
           "$dir/sweep.json"; then
        "$PYTHON" - "$ex" "$dir/default.json" "$dir/sweep.json" >>"$results" <<'EOF' || status=1
import json, sys
ex, report, sweep = sys.argv[1:]
meta = json.load(open(report))["devices"][0]["what_if_replay"]
s = json.load(open(sweep))
a = meta["recommended"]["conf"] if meta.get("measured") else None
b = s["recommended"]["conf"]
print(f"{ex}: exit report recommends {a or '(defaults)'!s}, ccreplay --sweep {b or '(default)'}: "
      f"{'SAME' if a == b else 'DIFFERENT'} (trace {s['duration_us'] / 1e6:.2f} s)")
sys.exit(0 if a == b else 1)
EOF
    else
        status=1
    fi
    # 3. What each virtual-memory call cost this GPU, from the preload's counters.
    for mode in compact expandable; do
        cci_run 120 "$dir/$mode.log" env LD_PRELOAD="$CCI_PRELOAD" CCI_ALLOC_CONF="${mode}_segments:True" \
            CCI_REPORT="$dir/$mode.json" "$CCI_BIN/$ex.shared" || { status=1; continue; }
        "$PYTHON" - "$ex" "$mode" "$dir/$mode.json" >>"$results" <<'EOF' || status=1
import json, sys
ex, mode, path = sys.argv[1:]
costs = json.load(open(path))["devices"][0]["costs"]
table = {"create": 14, "map": 18, "set_access": 6, "unmap": 157, "release": 23}  # report_tuner.c
cells = []
for call, us in table.items():
    n, ns = costs.get(f"vmm_{call}_calls", 0), costs.get(f"vmm_{call}_ns", 0)
    cells.append(f"{call} {ns / n / 1000:.1f} us x{n} (table {us})" if n else f"{call} - (table {us})")
print(f"{ex} {mode}: " + ", ".join(cells))
EOF
    done
done
cat "$results"
cci_say "done: $( ((status)) && echo FAILED || echo PASSED )"
exit $status
