#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# GPU check of pitched, 3-D, managed and pool allocations (docs/interception-levels.md):
#
#   scripts/gpu-reach.sh        (logs and reach.txt under $CCI_GPU_OUT/reach/)
#
# 0. tests/gpu/pitch_probe.c: the driver's texture alignments and its pitch for each width and
#    element size, natively (pitch_probe.txt).
# 1. tests/gpu/reach_check.cu "results", built with -cudart shared and with the static cudart,
#    natively and under the preload: the pitches, the error codes, a created pool's figures and the
#    checksum of the data must be identical (a pitch the driver would not have chosen shows here
#    first).
# 2. "bench": ns per cudaMallocPitch/cudaFree pair and per cudaMalloc/cudaFree pair of the same
#    bytes, natively and under the preload; a served pitched pair should cost about a plain
#    served pair (one device-attribute answer cached per device, no driver call per pair). The
#    preloaded bench's exit line (CCI_LOG=info) counts the allocations served at each level.
# Exit status 1 on a difference or a failed run.
set -u -o pipefail
# shellcheck source=scripts/gpu-common.sh
source "$(dirname "$0")/gpu-common.sh"
CCI_DEADLINE=${CCI_DEADLINE:-300}
OUT=$CCI_GPU_OUT/reach
mkdir -p "$OUT"
status=0
cci_build_preload || exit 1
# 0. What this GPU's driver answers (the facts the pitch rule rests on), natively, for the record.
mkdir -p "$CCI_BIN"
if cci_run 60 "$OUT/pitch_probe.build.log" "${CC:-cc}" -O1 tests/gpu/pitch_probe.c -o "$CCI_BIN/pitch_probe" -ldl; then
    cci_run 60 "$OUT/pitch_probe.txt" "$CCI_BIN/pitch_probe" || status=1
    cci_say "driver: $(head -n 1 "$OUT/pitch_probe.txt")"
fi
NVCC_LIBS=-lcuda cci_nvcc reach_check tests/gpu/reach_check.cu || exit 1
for kind in shared static; do
    bin=$CCI_BIN/reach_check.$kind
    cci_run 60 "$OUT/results.$kind.native.txt" "$bin" results || status=1
    cci_run 60 "$OUT/results.$kind.preload.txt" env LD_PRELOAD="$CCI_PRELOAD" CCI_REPORT=off "$bin" results || status=1
    if diff "$OUT/results.$kind.native.txt" "$OUT/results.$kind.preload.txt" >"$OUT/results.$kind.diff"; then
        cci_say "results ($kind cudart): identical natively and under the preload"
    else
        cci_say "results ($kind cudart): DIFFER, see $OUT/results.$kind.diff"
        status=1
    fi
    cci_run 120 "$OUT/bench.$kind.native.txt" "$bin" bench 20000 || status=1
    cci_run 120 "$OUT/bench.$kind.preload.txt" env LD_PRELOAD="$CCI_PRELOAD" CCI_REPORT=off CCI_LOG=info "$bin" bench 20000 || status=1
    cci_say "bench ($kind cudart), native:  $(tr '\n' ' ' <"$OUT/bench.$kind.native.txt")"
    cci_say "bench ($kind cudart), preload: $(grep ' ns ' "$OUT/bench.$kind.preload.txt" | tr '\n' ' ')"
done
cci_say "reach check $( ((status == 0)) && echo PASSED || echo FAILED ), logs in $OUT"
exit $status
