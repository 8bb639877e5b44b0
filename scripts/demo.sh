#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The Quick start demo: builds if needed, then runs the fragmentation scenario
# (examples/seedfrag.c) natively and under the preload, and shows the checksums agree.
# On a machine with an NVIDIA GPU and nvcc it runs on the GPU; otherwise on the fake CUDA of the
# test suite (host memory), and says so. The preload's summary (stderr, at exit) is shown in line
# with the program's output.
#
#   scripts/demo.sh            (BUILD=dir to use another build directory)
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 1
BUILD=${BUILD:-build}

if [[ ! -f $BUILD/build.ninja ]]; then
    meson setup "$BUILD" || exit 1
fi
ninja -C "$BUILD" || exit 1
BUILD=$(cd "$BUILD" && pwd)  # absolute from here on: it goes into LD_PRELOAD and LD_LIBRARY_PATH
PRELOAD=$BUILD/preload/libccinterpose.so
# Show what the preload did even before a report is configured; an explicit CCI_LOG wins.
export CCI_LOG=${CCI_LOG:-info}

NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && [[ -x $NVCC ]]; then
    echo "== GPU: $(nvidia-smi -L | head -n 1)"
    mkdir -p "$BUILD/demo"
    # -cudart shared: the program then calls cudaMalloc in libcudart.so.13, where the preload
    # catches it (nvcc's default static cudart is not reachable from LD_PRELOAD).
    "$NVCC" -O2 -cudart shared -Iinclude -Iexamples examples/seedfrag.c -o "$BUILD/demo/seedfrag" \
        -Xlinker -rpath -Xlinker "$(dirname "$NVCC")/../lib64" || exit 1
    PROG=$BUILD/demo/seedfrag
    LIBDIR=
else
    PROG=$BUILD/examples/seedfrag-fake
    LIBDIR=$BUILD/tests/fake
    if [[ ! -x $PROG || ! -e $LIBDIR/libcudart.so.13 ]]; then
        echo "demo: $PROG or the fake CUDA libraries are missing (configure with -Dtests=true)" >&2
        exit 1
    fi
    echo "=================================================================="
    echo " SIMULATED DEVICE (no GPU found): fake CUDA over host memory"
    echo " (tests/fake: a libcudart.so.13 and libcuda.so.1 that hand out"
    echo "  host memory; timings here say nothing about a GPU)"
    echo "=================================================================="
fi

run() {
    env ${LIBDIR:+LD_LIBRARY_PATH=$LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}} "$@" "$PROG"
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo
echo "== 1. natively: $PROG"
run env -u LD_PRELOAD 2>&1 | tee "$tmp/native" || exit 1
echo
echo "== 2. under the preload: LD_PRELOAD=$PRELOAD $PROG"
run env LD_PRELOAD="$PRELOAD" 2>&1 | tee "$tmp/ours" || exit 1
echo
a=$(grep '^checksum:' "$tmp/native")
b=$(grep '^checksum:' "$tmp/ours")
if [[ -n $a && $a == "$b" ]]; then
    echo "== checksums match (${a#checksum: }): same results, allocations served by libccinterpose"
else
    echo "== CHECKSUMS DIFFER: native '${a}' vs preload '${b}'" >&2
    exit 1
fi
