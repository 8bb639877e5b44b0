#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Fuzzes each target in tests/fuzz/ with clang's libFuzzer (plus ASan and UBSan) for MINUTES
# minutes and prints its execution count. The committed corpus seeds a working copy under
# build-fuzz/, so the tree is not touched; a crashing input is left in build-fuzz/artifacts/TARGET/
# and should be committed to tests/fuzz/corpus/TARGET/ with its fix (meson test then replays it).
#
# usage: scripts/fuzz.sh MINUTES [TARGET...]   (targets: config snapshot trace_bin trace_text replay)
#   FUZZ_PARALLEL=1  run the targets side by side instead of one after another
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${1:?usage: scripts/fuzz.sh MINUTES [TARGET...]}
[[ "$minutes" =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: MINUTES must be a whole number of minutes, 1 or more" >&2; exit 2; }
shift
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(config snapshot trace_bin trace_text replay)
CC=${CLANG:-clang}
command -v "$CC" >/dev/null || { echo "fuzz.sh: $CC not found (libFuzzer needs clang)" >&2; exit 2; }

out=build-fuzz
mkdir -p "$out"
# The core and the trace readers whole (a file added there is fuzzed without touching this list),
# and the replay engine the replay target drives.
sources=(src/core/*.c src/trace/*.c src/tools/replay.c)
flags=(-std=c11 -D_GNU_SOURCE -g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined
       -fno-sanitize-recover=undefined -DCCI_HAVE_LZMA -DCCI_HAVE_ZLIB
       -Iinclude -Isrc/core -Isrc/trace -Isrc/tools -Itests/fuzz)
for t in "${targets[@]}"; do
    [ -f "tests/fuzz/fuzz_$t.c" ] || { echo "fuzz.sh: no target '$t'" >&2; exit 2; }
    "$CC" "${flags[@]}" "tests/fuzz/fuzz_$t.c" "${sources[@]}" -o "$out/fuzz_$t" -llzma -lz -lm -lpthread
done

run_one() {
    local t=$1 work=$out/corpus-$1 art=$out/artifacts/$1/
    mkdir -p "$work" "$art"
    cp -n tests/fuzz/corpus/"$t"/* "$work"/ 2>/dev/null || true
    # 2 GiB and 10 s per input: a leak, a blow-up or a hang is a finding, not a stall.
    "$out/fuzz_$t" -max_total_time=$((minutes * 60)) -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
        -artifact_prefix="$art" "$work" >"$out/fuzz_$t.log" 2>&1 || true
    local execs crashes
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out/fuzz_$t.log" | tail -1)
    crashes=$(find "$art" -type f | wc -l)
    printf '%-11s %12s executions  %s finding(s)%s\n' "$t" "${execs:-?}" "$crashes" \
        "$([ "$crashes" -gt 0 ] && echo " in $art (log: $out/fuzz_$t.log)")"
}
if [ "${FUZZ_PARALLEL:-0}" = 1 ]; then
    for t in "${targets[@]}"; do run_one "$t" & done
    wait
else
    for t in "${targets[@]}"; do run_one "$t"; done
fi
