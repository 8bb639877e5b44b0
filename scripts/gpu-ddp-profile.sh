#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Where DDP's time goes, natively and under the preload: three steps of tests/bench/ddp_encoder.py
# on NPROC GPUs recorded with torch.profiler (CUDA activities) per configuration, then
# tests/bench/timeline.py's figures per rank (the GPU's busy and idle time, compute and NCCL and
# their overlap, the host's synchronisations, stream waits and event records) and one SVG lane
# picture per configuration of rank 0. Profiled runs are not timed runs: gpu-ddp.sh measures wall.
#
# Environment: CCI_GPU_OUT, NPROC (default 2), CONFIGS (default: native ours ours-immediate), PYTHON.
set -u -o pipefail
# shellcheck source=scripts/gpu-common.sh
source "$(dirname "$0")/gpu-common.sh"
NPROC=${NPROC:-2}
CONFIGS=${CONFIGS:-native ours ours-immediate}
status=0
cci_build_preload || exit 1
export NCCL_NVLS_ENABLE=0
for c in $CONFIGS; do
    case $c in
        native) env_c=(CCI_UNUSED=1) ;;
        ours) env_c=(PYTORCH_NO_CUDA_MEMORY_CACHING=1 "LD_PRELOAD=$CCI_PRELOAD" CCI_LOG=info) ;;
        ours-immediate) env_c=(PYTORCH_NO_CUDA_MEMORY_CACHING=1 "LD_PRELOAD=$CCI_PRELOAD" CCI_LOG=info
                               CCI_ALLOC_CONF=immediate_reuse:True) ;;
        ours-*) env_c=(PYTORCH_NO_CUDA_MEMORY_CACHING=1 "LD_PRELOAD=$CCI_PRELOAD" CCI_LOG=info
                       "CCI_ALLOC_CONF=${c#ours-}") ;;
        *) cci_say "CONFIGS: unknown configuration '$c'"; exit 1 ;;
    esac
    cci_run 240 "$CCI_GPU_OUT/profile-$c.log" env "${env_c[@]}" torchrun --nproc-per-node "$NPROC" \
        tests/bench/ddp_encoder.py --steps 8 --profile "$CCI_GPU_OUT/profile-$c" || status=1
    for r in $(seq 0 $((NPROC - 1))); do
        t=$CCI_GPU_OUT/profile-$c/trace-rank$r.json.gz
        [[ -f $t ]] && "$PYTHON" tests/bench/timeline.py summary "$t" | sed "s/^{/{\"config\": \"$c\", \"rank\": $r, /"
    done >>"$CCI_GPU_OUT/timeline.jsonl"
    t=$CCI_GPU_OUT/profile-$c/trace-rank0.json.gz
    [[ -f $t ]] && "$PYTHON" tests/bench/timeline.py svg "$t" "$CCI_GPU_OUT/timeline-$c.svg" --label "DDP step, rank 0, $c" --ms 150
done
"$PYTHON" - "$CCI_GPU_OUT/timeline.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
cols = ["window_ms", "busy_ms", "idle_ms", "idle_gaps", "longest_gap_ms", "compute_ms", "comm_ms",
        "comm_overlapped_ms", "sync_calls", "sync_ms", "wait_calls", "record_calls", "query_calls"]
print("| config | rank | " + " | ".join(cols) + " |")
print("|---|---|" + "---|" * len(cols))
for r in rows:
    print(f"| {r['config']} | {r['rank']} | " + " | ".join(str(r.get(c, "")) for c in cols) + " |")
PY
for c in $CONFIGS; do grep -h "stream rule\|fence costs\|context fences\|ordered on the GPU" "$CCI_GPU_OUT/profile-$c.log" 2>/dev/null | head -8; done
cci_say "gpu-ddp-profile: $([[ $status == 0 ]] && echo PASSED || echo FAILED) in $((SECONDS - CCI_T0)) s"
exit $status
