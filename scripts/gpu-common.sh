#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Shared by scripts/gpu-check.sh and scripts/gpu-bench.sh (sourced, not run): find the tools,
# build the preload and the CUDA programs, run commands under a time limit with their output kept
# under $CCI_GPU_OUT. Both scripts are meant to run unattended on a GPU machine with a hard time
# limit and possibly no network, so nothing here may wait on a prompt or the network, and every
# step has a timeout.

CCI_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$CCI_ROOT" || exit 1
CCI_BUILD=${CCI_BUILD:-build-gpu}
# CCI_GPU_OUT: where the logs go (default: inside the git-ignored build directory).
CCI_GPU_OUT=${CCI_GPU_OUT:-$CCI_ROOT/$CCI_BUILD/out}
mkdir -p "$CCI_GPU_OUT"
CCI_GPU_OUT=$(cd "$CCI_GPU_OUT" && pwd)
CCI_PRELOAD=$CCI_ROOT/$CCI_BUILD/preload/libccinterpose.so
CCI_BIN=$CCI_ROOT/$CCI_BUILD/cuda
CCI_T0=$SECONDS
PYTHON=${PYTHON:-python3}

cci_say() { printf '[%4ds] %s\n' $((SECONDS - CCI_T0)) "$*"; }

# Seconds left before the script's own deadline (CCI_DEADLINE, default 510 s: leaves room under a
# 600 s limit on the whole run for the summary to be printed).
cci_left() { echo $(( ${CCI_DEADLINE:-510} - (SECONDS - CCI_T0) )); }

# Rounds: `cci_rounds_begin; while cci_round_next MARGIN; do ... CCI_ROUND, CCI_ORDER ...; done`.
# REPEATS rounds, each with every configuration of CONFIGS in an order rotated from round to round
# (tests/bench/repeat_stats.py says why), logged in $CCI_GPU_OUT/rounds.txt. A round starts only if the
# last one, plus MARGIN seconds, would still fit before the deadline, so every configuration gets
# the same number of rounds. cci_round_next also reports the round just done; it fails (ending the
# loop) after the last round, at the deadline, or when the order cannot be made (CCI_ROUNDS_FAILED=1).
cci_rounds_begin() {
    : >"$CCI_GPU_OUT/rounds.txt"
    CCI_ROUND=0 CCI_ORDER='' CCI_ROUNDS_FAILED=0 _cci_round_t=$SECONDS _cci_round_secs=0
}
cci_round_next() {
    local margin=$1
    if (( CCI_ROUND > 0 )); then
        _cci_round_secs=$((SECONDS - _cci_round_t))
        cci_say "round $CCI_ROUND of $REPEATS done in ${_cci_round_secs}s (order: $CCI_ORDER)"
    fi
    (( CCI_ROUND < REPEATS )) || return 1
    if (( CCI_ROUND > 0 && $(cci_left) < _cci_round_secs + margin )); then
        cci_say "STOPPED after $CCI_ROUND of $REPEATS rounds: round $CCI_ROUND took ${_cci_round_secs}s, $(cci_left)s are left"
        return 1
    fi
    CCI_ROUND=$((CCI_ROUND + 1))
    _cci_round_t=$SECONDS
    # shellcheck disable=SC2086  # CONFIGS is a list of words
    if ! CCI_ORDER=$("$PYTHON" tests/bench/repeat_stats.py order "$CCI_ROUND" $CONFIGS); then
        # shellcheck disable=SC2034  # read by the scripts that source this file
        CCI_ROUNDS_FAILED=1
        return 1
    fi
    echo "round $CCI_ROUND: $CCI_ORDER" >>"$CCI_GPU_OUT/rounds.txt"
}

# cci_run SECONDS LOG CMD...: runs CMD with its output in LOG; prints the tail when it fails.
cci_run() {
    local limit=$1 log=$2
    shift 2
    local left
    left=$(cci_left)
    if (( left < 5 )); then
        echo "skipped: out of time" >"$log"
        cci_say "SKIPPED (out of time): $*"
        return 125
    fi
    (( limit > left )) && limit=$left
    local rc=0
    timeout --kill-after=10 "$limit" "$@" >"$log" 2>&1 || rc=$?
    if (( rc != 0 )); then
        local why="exit $rc"
        (( rc == 124 || rc == 137 )) && why="timed out after ${limit}s"
        cci_say "FAILED ($why): $*"
        tail -n 25 "$log" | sed 's/^/    | /'
    fi
    return $rc
}

# torch_workloads.py: $TORCH_WORKLOADS, else the shared copy beside the repository, else the copy
# put into the tree's shared-gpu/ for the device (the device gets the repository only).
cci_find_workloads() {
    local c
    for c in "${TORCH_WORKLOADS:-}" "$CCI_ROOT/../shared/gpu/torch_workloads.py" "$CCI_ROOT/shared-gpu/torch_workloads.py"; do
        if [[ -n $c && -f $c ]]; then
            # shellcheck disable=SC2034  # read by the scripts that source this file
            CCI_WORKLOADS=$(cd "$(dirname "$c")" && pwd)/$(basename "$c")
            return 0
        fi
    done
    cci_say "torch_workloads.py not found (set TORCH_WORKLOADS, or copy it to shared-gpu/)"
    return 1
}

cci_find_nvcc() {
    NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
    [[ -x $NVCC ]] || { cci_say "nvcc not found"; return 1; }
    CCI_CUDA_LIB=$(cd "$(dirname "$NVCC")/.." && pwd)/lib64
}

# The core needs uthash.h at build time. Where the system lacks it, a copy beside the repository
# or in shared-gpu/ (put there by whoever copies the tree to the device) is used through CPATH.
cci_need_uthash() {
    if echo '#include <uthash.h>' | ${CC:-cc} -E -x c - >/dev/null 2>&1; then
        return 0
    fi
    local d
    for d in "${CCI_UTHASH_DIR:-}" "$CCI_ROOT/shared-gpu" "$CCI_ROOT/../shared/gpu"; do
        if [[ -n $d && -f $d/uthash.h ]]; then
            export CPATH=$d${CPATH:+:$CPATH}
            cci_say "using uthash.h from $d"
            return 0
        fi
    done
    cci_say "uthash.h not found: install uthash-dev or put uthash.h into shared-gpu/"
    return 1
}

# Only the preload is built: the device needs nothing else from Meson, and a test that does not
# compile there must not stop the measurement.
cci_build_preload() {
    cci_need_uthash || return 1
    if [[ ! -f $CCI_BUILD/build.ninja ]]; then
        cci_run 120 "$CCI_GPU_OUT/build-setup.log" meson setup "$CCI_BUILD" --buildtype=release -Dtests=false || return 1
    fi
    cci_run 240 "$CCI_GPU_OUT/build-ninja.log" ninja -C "$CCI_BUILD" preload/libccinterpose.so || return 1
    [[ -f $CCI_PRELOAD ]] || { cci_say "no $CCI_PRELOAD after the build"; return 1; }
    cci_say "built $CCI_PRELOAD"
}

# cci_nvcc NAME SOURCE [extra include dirs...]: NAME.shared (-cudart shared, what the preload
# intercepts today) and NAME.static (nvcc's default static cudart, reached only by driver-level
# hooks) under $CCI_BIN. NVCC_LIBS: more libraries to link (-lcuda for a program that calls the
# driver API itself).
cci_nvcc() {
    local name=$1 src=$2
    shift 2
    # Finds nvcc itself when the caller has not (nvcc is often not on PATH on GPU hosts).
    [[ -n ${CCI_CUDA_LIB:-} ]] || cci_find_nvcc || return 1
    local inc=(-Iinclude -Iexamples)
    local d libs
    for d in "$@"; do inc+=("-I$d"); done
    read -r -a libs <<<"${NVCC_LIBS:-}"
    mkdir -p "$CCI_BIN"
    cci_run 120 "$CCI_GPU_OUT/nvcc-$name.shared.log" "$NVCC" -O2 -cudart shared "${inc[@]}" "$src" -o "$CCI_BIN/$name.shared" \
        -Xlinker -rpath -Xlinker "$CCI_CUDA_LIB" -ldl ${libs[@]+"${libs[@]}"} || return 1
    cci_run 120 "$CCI_GPU_OUT/nvcc-$name.static.log" "$NVCC" -O2 "${inc[@]}" "$src" -o "$CCI_BIN/$name.static" -ldl \
        ${libs[@]+"${libs[@]}"} || return 1
}

cci_gpu_banner() {
    cci_say "repository $CCI_ROOT, output $CCI_GPU_OUT"
    { nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; } 2>&1 | sed 's/^/    /'
    "$NVCC" --version 2>&1 | tail -n 1 | sed 's/^/    nvcc: /'
    "$PYTHON" -c 'import torch; print("    torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1 | tail -n 1
}
