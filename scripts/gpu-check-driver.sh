#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# GPU check of the driver level (docs/interception-levels.md), called by scripts/gpu-check.sh:
#
#   scripts/gpu-check-driver.sh BUILD_DIR OUT_DIR
#
# BUILD_DIR holds preload/libccinterpose.so; logs go to OUT_DIR/driver/. Every step runs natively and
# under the preload (CCI_LOG=info, whose exit line counts the allocations served at each level):
#   1. the examples built with nvcc defaults (static cudart): identical checksums, and caught at
#      driver level (a static cudart never reaches the runtime hooks);
#   2. CuPy with its own pool off (cupy.cuda.set_allocator(None)): identical results, every array
#      served at driver level;
#   3. a cuBLAS GEMM through cupy.matmul with CuPy's arrays in managed memory (which we never
#      intercept): whatever the driver level serves there is cuBLAS's own workspace;
#   4. PyTorch with its caching allocator ON: a matmul gives identical results (we serve its
#      segments at runtime level, and cuBLAS's workspace at driver level).
# Prints a table; exit status 1 on a mismatch, a failed run or an allocation not caught. A step
# whose Python module is missing is reported as SKIP and does not fail the check.
#
# Environment: NVCC, PYTHON, CCI_DEADLINE (seconds for the whole script, default 300).
set -u -o pipefail
if (( $# != 2 )); then
    echo "usage: $0 BUILD_DIR OUT_DIR" >&2
    exit 2
fi
# Both made absolute before gpu-common.sh changes to the repository root.
BUILD=$(cd "$1" 2>/dev/null && pwd) || { echo "no build directory $1" >&2; exit 1; }
CCI_GPU_OUT=$(mkdir -p "$2" && cd "$2" && pwd) || { echo "cannot use $2 for output" >&2; exit 1; }
CCI_DEADLINE=${CCI_DEADLINE:-300}
# shellcheck source=scripts/gpu-common.sh
source "$(dirname "$0")/gpu-common.sh"  # cd's to the repository root; cci_run, cci_say, cci_find_nvcc
PRELOAD=$BUILD/preload/libccinterpose.so
[[ -f $PRELOAD ]] || { cci_say "no $PRELOAD: build the preload first"; exit 1; }
LOGS=$CCI_GPU_OUT/driver
BIN=$BUILD/cuda-driver
mkdir -p "$LOGS" "$BIN"
status=0
ROWS=()

# "R D": allocations served at runtime and at driver level, summed over the processes' exit
# lines in LOG (a process that served nothing prints none: "0 0").
levels() {
    sed -n 's/.*allocations served: \([0-9]*\) at runtime level.*, \([0-9]*\) at driver level.*/\1 \2/p' "$1" |
        awk '{r += $1; d += $2} END {printf "%d %d\n", r, d}'
}

# row STEP NATIVE PRELOADED RUNTIME DRIVER VERDICT
row() { ROWS+=("$(printf '%-34s %-18s %-18s %8s %8s  %s' "$@")"); }

# runs NAME CMD...: the command natively (NAME.native.*) and under the preload (NAME.preload.*),
# stdout and stderr apart so results are read from stdout alone.
runs() {
    local name=$1
    shift
    # shellcheck disable=SC2016  # expanded by the inner bash: $0 is the output stem, $@ the command
    cci_run 150 "$LOGS/$name.native.log" bash -c '"$@" >"$0.out"' "$LOGS/$name.native" "$@" || return 1
    # shellcheck disable=SC2016  # as above
    cci_run 150 "$LOGS/$name.preload.log" env LD_PRELOAD="$PRELOAD" CCI_LOG=info CCI_REPORT=off \
        bash -c '"$@" >"$0.out"' "$LOGS/$name.preload" "$@" || return 1
}

# result NAME native|preload KEY: the value of the first "KEY: value" line of that run's stdout.
result() { sed -n "s/^$3: //p" "$LOGS/$1.$2.out" | head -n 1; }

# compare NAME KEY EXPECT LABEL: EXPECT = driver (the driver level must serve, the runtime level
# nothing), driver-note (the same, but serving nothing is only noted), runtime (the runtime level
# must serve).
compare() {
    local name=$1 key=$2 expect=$3 label=$4
    local a b r d verdict=ok
    a=$(result "$name" native "$key")
    b=$(result "$name" preload "$key")
    read -r r d < <(levels "$LOGS/$name.preload.log")
    if [[ -z $a || $a != "$b" ]]; then
        verdict="FAIL: results differ"
    elif [[ $expect == driver ]] && (( d == 0 || r != 0 )); then
        verdict="FAIL: not caught at driver level"
    elif [[ $expect == driver-note ]] && (( r != 0 )); then
        verdict="FAIL: runtime level served a static-cudart program"
    elif [[ $expect == driver-note ]] && (( d == 0 )); then
        verdict="ok (note: nothing allocated through cudart here)"
    elif [[ $expect == runtime ]] && (( r == 0 )); then
        verdict="FAIL: not caught at runtime level"
    fi
    [[ $verdict == ok* ]] || status=1
    row "$label" "${a:0:16}" "${b:0:16}" "$r" "$d" "$verdict"
}

has_module() { "$PYTHON" -c "import $1" >/dev/null 2>&1; }

cci_find_nvcc || exit 1
cci_say "driver-level check: preload $PRELOAD, logs $LOGS"

# ---- 1. examples, nvcc defaults (static cudart) --------------------------------------------
examples=(examples/*.c)
if [[ ! -f ${examples[0]} ]]; then
    row "examples (static cudart)" - - - - "FAIL: no examples/*.c"
    status=1
    examples=()
fi
for src in "${examples[@]}"; do
    ex=$(basename "$src" .c)
    exe=$BIN/$ex.static
    if [[ ! -x $exe || $src -nt $exe ]]; then
        cci_run 120 "$LOGS/nvcc-$ex.log" "$NVCC" -O2 -Iinclude -Iexamples "$src" -o "$exe" -ldl || {
            row "$ex (static cudart)" - - - - "FAIL: nvcc"
            status=1
            continue
        }
    fi
    if ! runs "$ex.static" "$exe"; then
        row "$ex (static cudart)" - - - - "FAIL: run (see $ex.static.*.log)"
        status=1
        continue
    fi
    compare "$ex.static" checksum driver "$ex (static cudart)"
done

# ---- 2. CuPy, its pool off -------------------------------------------------------------------
cat >"$LOGS/cupy_compute.py" <<'EOF'
# Many short-lived arrays through CuPy's kernels, FFT and reductions; bit-exact digest.
import hashlib
import numpy as np
import cupy as cp

cp.cuda.set_allocator(None)  # every array is a cudaMalloc of CuPy's own (static) cudart
rng = np.random.default_rng(1234)
x = cp.asarray(rng.standard_normal((1024, 1024)))
acc = cp.zeros((1024, 1024))
for i in range(60):
    y = cp.tanh(x * (1.0 + i / 60.0)) + cp.roll(x, i, axis=1)
    acc += cp.abs(cp.fft.ifft2(cp.fft.fft2(y))).real / (i + 1)
    x = y[::-1] * 0.5 + x * 0.5
total = float(acc.sum())
digest = hashlib.sha256(cp.asnumpy(acc).tobytes()).hexdigest()
print(f"digest: {digest}")
print(f"sum: {total!r}")
EOF
if has_module cupy; then
    if runs cupy "$PYTHON" "$LOGS/cupy_compute.py"; then
        compare cupy digest driver "cupy (set_allocator(None))"
    else
        row "cupy (set_allocator(None))" - - - - "FAIL: run (see cupy.*.log)"
        status=1
    fi
else
    row "cupy (set_allocator(None))" - - - - "SKIP: no cupy module"
fi

# ---- 3. cuBLAS GEMM workspace ---------------------------------------------------------------
cat >"$LOGS/cublas_gemm.py" <<'EOF'
# CuPy's arrays in managed memory (cudaMallocManaged, never intercepted): any allocation the
# driver level serves in this process is cuBLAS's own (its workspace), made by cuBLAS's static
# cudart through our resolver.
import hashlib
import numpy as np
import cupy as cp

cp.cuda.set_allocator(cp.cuda.malloc_managed)
rng = np.random.default_rng(42)
a = cp.asarray(rng.standard_normal((4096, 4096), dtype=np.float32))
b = cp.asarray(rng.standard_normal((4096, 4096), dtype=np.float32))
c = cp.matmul(a, b)
for _ in range(3):
    c = cp.matmul(c, b) * (1.0 / 64.0)
cp.cuda.Device().synchronize()
print(f"digest: {hashlib.sha256(cp.asnumpy(c).tobytes()).hexdigest()}")
EOF
if has_module cupy; then
    if runs cublas "$PYTHON" "$LOGS/cublas_gemm.py"; then
        # CuPy or cuBLAS may bring a workspace of their own: then the driver level has nothing
        # to serve, which is noted, not failed.
        compare cublas digest driver-note "cublas gemm (workspace)"
    else
        row "cublas gemm (workspace)" - - - - "FAIL: run (see cublas.*.log)"
        status=1
    fi
else
    row "cublas gemm (workspace)" - - - - "SKIP: no cupy module"
fi

# ---- 4. PyTorch with its caching allocator on -------------------------------------------------
cat >"$LOGS/torch_cached.py" <<'EOF'
# PyTorch's own cache stays on: we serve its segments (runtime level) and cuBLAS's workspace
# (driver level); the results must not change.
import hashlib
import torch

torch.manual_seed(7)
torch.backends.cuda.matmul.allow_tf32 = False
a = torch.randn(2048, 2048, device="cuda")
b = torch.randn(2048, 2048, device="cuda")
outs = []
for i in range(8):
    c = torch.relu(a @ b) / 2048.0
    outs.append(c.sum().item())
    a = c + a * 0.5
torch.cuda.synchronize()
print(f"digest: {hashlib.sha256(a.cpu().numpy().tobytes()).hexdigest()}")
print(f"sums: {outs!r}")
EOF
if has_module torch; then
    if runs torch "$PYTHON" "$LOGS/torch_cached.py"; then
        compare torch digest runtime "torch (caching allocator on)"
    else
        row "torch (caching allocator on)" - - - - "FAIL: run (see torch.*.log)"
        status=1
    fi
else
    row "torch (caching allocator on)" - - - - "SKIP: no torch module"
fi

# ---- table ------------------------------------------------------------------------------------
{
    echo "Driver level: results natively vs under the preload; allocations served per level"
    printf '    %-34s %-18s %-18s %8s %8s  %s\n' step native preload runtime driver verdict
    printf '    %s\n' "${ROWS[@]}"
} | tee "$LOGS/summary.txt"
cci_say "gpu-check-driver: $([[ $status == 0 ]] && echo PASSED || echo FAILED); logs in $LOGS"
exit $status
