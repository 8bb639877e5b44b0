#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Profile first: instructions per alloc+free pair through the hooks on the fake CUDA,
# split by part of the code and by function, counted by callgrind (repeatable, unlike timings).
#
#   scripts/profile-hooks.sh [BUILD_DIR]        (default: build; needs valgrind)
#
# Every scenario runs tests/bench/bench_threads.c (one thread) twice under callgrind, with N1 and
# N2 pairs; tests/bench/profile_table.py prints (run N2 - run N1) / (N2 - N1): the cost of one more
# pair, start-up and exit excluded. CCI_REPORT=off leaves out the exit report and its what-if
# replay (which grow with the number of events); every observer still runs on every call.
# Environment: PAIRS_SHORT (default 2000), PAIRS_LONG (default 12000), KEEP (a folder: keep the
# callgrind files there), TOP (functions listed per scenario, default 14).
set -eu -o pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
build=$(cd "$build" && pwd)
n1=${PAIRS_SHORT:-2000}
n2=${PAIRS_LONG:-12000}
top=${TOP:-14}
exe=$build/tests/bench/bench_threads-fake
preload=$build/preload/libccinterpose.so
command -v valgrind >/dev/null || { echo "profile-hooks: valgrind not found" >&2; exit 1; }
ninja -C "$build" tests/bench/bench_threads-fake tests/bench/bench_threads-core preload/libccinterpose.so tests/fake/libcuda.so.1 \
    tests/fake/libcudart.so.13 >/dev/null
work=${KEEP:-$(mktemp -d)}
mkdir -p "$work"
[[ -n ${KEEP:-} ]] || trap 'rm -rf "$work"' EXIT

# scenario NAME TITLE [VAR=VALUE...] -- BENCH_THREADS ARGS...   (under the preload, over the fake)
# CORE=1 scenario ...: the core-alone build instead, no preload (the reference for the hook path).
scenario() {
    local name=$1 title=$2 prog=$exe pre=$preload
    [[ -n ${CORE:-} ]] && { prog=$build/tests/bench/bench_threads-core; pre=; }
    shift 2
    local envs=()
    while [[ $1 != -- ]]; do envs+=("$1"); shift; done
    shift
    local n
    for n in "$n1" "$n2"; do
        env FAKECUDA_CAPACITY=16G CCI_REPORT=off LD_LIBRARY_PATH="$build/tests/fake" LD_PRELOAD="$pre" \
            ${envs[@]+"${envs[@]}"} valgrind --tool=callgrind --callgrind-out-file="$work/$name.$n" \
            "$prog" --threads 1 --pairs "$n" "$@" >"$work/$name.$n.log" 2>&1 ||
            { echo "profile-hooks: $name ($n pairs) failed:" >&2; tail -n 20 "$work/$name.$n.log" >&2; exit 1; }
        [[ -z $pre ]] || grep -q "ccinterpose: loaded, served [1-9]" "$work/$name.$n.log" ||
            { echo "profile-hooks: $name: the preload served nothing" >&2; exit 1; }
    done
    python3 "$root/tests/bench/profile_table.py" --pairs "$n1" "$n2" --top "$top" --title "$title" \
        "$work/$name.$n1" "$work/$name.$n2"
}

echo "Instructions per alloc+free pair under the preload, fake CUDA, callgrind ($n2 - $n1 pairs)"
echo
scenario malloc "cudaMalloc+cudaFree 64 KiB, default mode, no streams" -- --api malloc --no-streams
scenario immediate "cudaMalloc+cudaFree 64 KiB, immediate_reuse" CCI_ALLOC_CONF=immediate_reuse:True -- \
    --api malloc --no-streams
scenario fenced "cudaMalloc+cudaFree 64 KiB, default mode, the thread has a non-blocking stream" -- --api malloc
scenario fenced-big "cudaMalloc+cudaFree 20 MiB, default mode, the thread has a non-blocking stream" -- \
    --api malloc --size 20971520
scenario async "cudaMallocAsync+cudaFreeAsync 64 KiB, one non-blocking stream (a sync every 256 pairs)" -- \
    --api async
scenario big "cudaMalloc+cudaFree 20 MiB, default mode, no streams" -- --api malloc --no-streams --size 20971520
scenario driver "cuMemAlloc_v2+cuMemFree_v2 64 KiB, default mode, no streams" -- --api driver --no-streams
scenario driver-async "cuMemAllocAsync+cuMemFreeAsync 64 KiB, one non-blocking stream (a sync every 256 pairs)" -- \
    --api driver-async
CORE=1 scenario core-now "the core alone: cci_malloc+cci_free(NOW) 64 KiB, simulated device" -- --api core-now
CORE=1 scenario core-fenced "the core alone: cci_malloc+cci_free(FENCED) 64 KiB, simulated device" -- \
    --api core-fenced
