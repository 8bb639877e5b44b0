#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The DDP row of the GPU check, on a machine with two or more GPUs (one device call): a 6-layer
# encoder trained with DistributedDataParallel under torchrun, natively and with
# PYTORCH_NO_CUDA_MEMORY_CACHING=1 under the preload in the default mode and with
# immediate_reuse:True. Prints wall time and each rank's peak reserved memory against native;
# result_sum must be identical. NVLink multicast stays off (NCCL_NVLS_ENABLE=0).
set -u -o pipefail
# shellcheck source=scripts/gpu-common.sh
source "$(dirname "$0")/gpu-common.sh"
STEPS=${STEPS:-20}
NPROC=${NPROC:-2}
status=0
cci_build_preload || exit 1
export NCCL_NVLS_ENABLE=0
run_ddp() {  # NAME ENV...
    local name=$1
    shift
    cci_run 240 "$OUT/ddp-$name.log" env "$@" torchrun --nproc-per-node "$NPROC" tests/bench/ddp_encoder.py \
        --steps "$STEPS" || status=1
}
run_ddp native CCI_UNUSED=1
run_ddp ours PYTORCH_NO_CUDA_MEMORY_CACHING=1 LD_PRELOAD="$CCI_PRELOAD" CCI_LOG=info
run_ddp ours-immediate PYTORCH_NO_CUDA_MEMORY_CACHING=1 LD_PRELOAD="$CCI_PRELOAD" CCI_ALLOC_CONF=immediate_reuse:True
"$PYTHON" - "$OUT" <<'PY' || status=1
import json, os, sys
out = sys.argv[1]
def load(name):
    try:
        lines = [l for l in open(os.path.join(out, f"ddp-{name}.log"), errors="replace") if l.startswith("{")]
        return json.loads(lines[-1]) if lines else None
    except OSError:
        return None
n = load("native")
print(f"DDP encoder, {n and n['world']} GPUs: wall time and peak reserved per rank against native")
print(f"{'configuration':<16}{'seconds':>9}{'x native':>10}  {'peak reserved per rank (MiB)':<34}{'x native':>14}  result_sum match")
bad = 0
for name in ("native", "ours", "ours-immediate"):
    r = load(name)
    if not r or not n:
        print(f"{name:<16} run failed: see ddp-{name}.log"); bad = 1; continue
    peaks = [p["peak_reserved_mib"] for p in r["ranks"]]
    npk = [p["peak_reserved_mib"] for p in n["ranks"]]
    ratios = "/".join(f"{a / b:.3f}" for a, b in zip(peaks, npk))
    same = r["result_sum"] == n["result_sum"]
    bad |= not same
    print(f"{name:<16}{r['seconds']:>9.3f}{r['seconds'] / n['seconds']:>10.3f}  {' / '.join(f'{p:.0f}' for p in peaks):<34}"
          f"{ratios:>14}  {r['result_sum']:.6f} {'yes' if same else 'NO'}")
sys.exit(bad)
PY
grep -h "stream rule" "$OUT"/ddp-ours.log | head -4
exit $status
