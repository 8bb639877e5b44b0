#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Real programs other than PyTorch on the GPU (tests/bench/programs.py), logs under
# $CCI_GPU_OUT/programs/. PyTorch keeps a cache of its own; JAX, CuPy with its pool off and Numba
# allocate through CUDA directly, each at its own level, so these show what the preload does for
# programs that were never written with it in mind, against their own allocators:
#   jax-train   jax-bfc (JAX's BFC allocator, XLA_PYTHON_CLIENT_PREALLOCATE=false: the reference),
#               jax-platform (XLA_PYTHON_CLIENT_ALLOCATOR=platform: a cudaMalloc-like call per
#               buffer), jax-platform-ours (the same under the preload) and jax-bfc-blocking
#               (BFC with the host waiting for every step, as XLA waits under the platform
#               allocator: the part of the platform allocator's time that no serving can remove);
#   cupy-loop   cupy-pool (CuPy's own pool: the reference), cupy-nopool (CUPY_POOL=off),
#               cupy-nopool-ours and cupy-nopool-ours-compact (compact_segments:True), under the preload;
#   numba-loop  numba (the reference: Numba keeps no pool) and numba-ours.
# First, once, a JAX probe: five steps under the preload with CCI_LOG=debug and the platform
# allocator, and which driver functions the log shows JAX looking up and allocating through
# (cuMemCreate, cuMemAlloc, cuMemAllocAsync, cuMemAllocFromPoolAsync), to tell which path XLA's
# buffers take (the preload's own debug log names them: LD_DEBUG=files is not needed). The probe
# also settles XLA_FLAGS: programs.py asks XLA for deterministic GEMMs (no autotuning, deterministic
# ops) so that result_sum can be compared bit for bit; an XLA that refuses a flag aborts, and the
# probe then retries with fewer flags and keeps what worked (PROGRAMS_XLA_FLAGS).
# Then ROUNDS rounds of every configuration, the order rotated each round (repeat_stats.py), each
# process under a time limit; none starts with less than 40 s left. Every process's JSON line (with
# the allocations the preload served at runtime and at driver level, from its exit line) goes to
# results.jsonl; its stdout and stderr stay in CONFIG-rROUND.out and .log, and the preload's lines
# that matter (allocations served, peak reserved, warnings, errors) are printed. At the end, the
# table of programs.py summary: median seconds and peak MiB (NVML) against the family's reference,
# and whether result_sum is identical to the reference's. Exit status 1 on a failed process or a
# result that differs; a package that is not installed is a SKIP and fails nothing. Not run on a
# GPU yet.
#
# Environment: CCI_GPU_OUT, ROUNDS (default 3), PROGRAMS_CONFIGS (default: all nine), JAX_STEPS,
# CUPY_STEPS, NUMBA_STEPS (programs.py's defaults: 200, 300, 2000), PROGRAMS_XLA_FLAGS (skips the
# probe's choice), CCI_DEADLINE (gpu-common.sh's 510 s by default; a round of all nine configurations
# is estimated, not measured, at two to three minutes, so three rounds want about 600), PYTHON.
set -u -o pipefail
# shellcheck source=scripts/gpu-common.sh
source "$(dirname "$0")/gpu-common.sh"
REPEATS=${ROUNDS:-3}
CONFIGS=${PROGRAMS_CONFIGS:-"jax-bfc jax-platform-ours jax-platform cupy-pool cupy-nopool cupy-nopool-ours cupy-nopool-ours-compact numba numba-ours"}
status=0

cci_say "repository $CCI_ROOT, output $CCI_GPU_OUT/programs"
timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | sed 's/^/    /'
# shellcheck disable=SC2016  # the Python code's own quoting
timeout 120 "$PYTHON" -c '
import importlib
for m in ("jax", "jaxlib", "cupy", "numba", "numba_cuda"):
    try:
        print("   ", m, getattr(importlib.import_module(m), "__version__", "?"))
    except Exception as e:
        print("   ", m, "not importable:", type(e).__name__, e)
' 2>&1 | grep -v '^[A-Z][0-9]\{4\} '
cci_build_preload || exit 1
OUT=$CCI_GPU_OUT/programs
rm -rf "$OUT" && mkdir -p "$OUT"
CCI_GPU_OUT=$OUT  # cci_rounds_begin's rounds.txt goes here too
RESULTS=$OUT/results.jsonl
: >"$RESULTS"

# What a process must not inherit from the caller: every configuration sets its own.
CLEAN=(-u LD_PRELOAD -u CCI_ALLOC_CONF -u CCI_LOG -u CCI_REPORT -u CUPY_POOL
       -u XLA_PYTHON_CLIENT_ALLOCATOR -u XLA_PYTHON_CLIENT_PREALLOCATE -u XLA_PYTHON_CLIENT_MEM_FRACTION)

# proc STEM LIMIT VAR=VALUE... CMD...: one process under cci_run's time limit, its environment
# cleaned and then set; its stdout in STEM.out, its stderr in STEM.log.
proc() {
    local stem=$1 limit=$2
    shift 2
    # shellcheck disable=SC2016  # expanded by the inner bash: $0 is the stem, $@ the command
    cci_run "$limit" "$stem.log" bash -c '"$@" >"$0.out"' "$stem" env "${CLEAN[@]}" "$@"
}

# The preload's lines worth reading in a log: its exit lines and anything it warned about.
preload_lines() {
    grep -E '^ccinterpose\[[0-9]+\]: ' "$1" | grep -E 'allocations served|own virtual-memory|peak reserved|warning|error' | head -n "${2:-12}"
}

# served LOG: '"served_runtime": R, "served_driver": D, ' summed over the exit lines in LOG (a
# compiler the program started under the preload serves nothing), or nothing without such a line;
# then, where the program made virtual-memory allocations of its own, '"vmm_creates": N,
# "vmm_reused": M, "vmm_reused_pct": P, ' (the buffers answered with a kept one, and their share
# of the bytes).
served() {
    sed -n 's/.*allocations served: \([0-9]*\) at runtime level.*, \([0-9]*\) at driver level.*/\1 \2/p' "$1" |
        awk '{r += $1; d += $2; n++} END {if (n) printf "\"served_runtime\": %d, \"served_driver\": %d, ", r, d}'
    sed -n 's/.*own virtual-memory allocations: \([0-9]*\) cuMemCreate (\([0-9.]*\) MiB), \([0-9]*\) answered with a kept buffer (\([0-9.]*\) %.*/\1 \2 \3 \4/p' "$1" |
        awk '{c += $1; b += $2; u += $3; ub += $2 * $4 / 100; n++}
             END {if (n) printf "\"vmm_creates\": %d, \"vmm_reused\": %d, \"vmm_reused_pct\": %.1f, ", c, u, b ? 100 * ub / b : 0}'
}

# ---- the JAX probe -------------------------------------------------------------------------------
probe() {
    local stem=$OUT/jax-probe rc flags tries=()
    if [[ -n ${PROGRAMS_XLA_FLAGS+set} ]]; then
        tries=("$PROGRAMS_XLA_FLAGS")
    else
        tries=("--xla_gpu_autotune_level=0 --xla_gpu_deterministic_ops=true" "--xla_gpu_autotune_level=0" "")
    fi
    for flags in "${tries[@]}"; do
        export PROGRAMS_XLA_FLAGS=$flags
        rc=0
        proc "$stem" 180 CCI_CONFIG_LABEL=jax-probe XLA_PYTHON_CLIENT_ALLOCATOR=platform \
            LD_PRELOAD="$CCI_PRELOAD" CCI_LOG=debug CCI_REPORT=off \
            "$PYTHON" tests/bench/programs.py jax-train --steps 5 || rc=$?
        grep -q 'Unknown flag' "$stem.log" || break
        cci_say "XLA refused XLA_FLAGS '$flags' (jax-probe.log); trying fewer flags"
        rc=1
    done
    local line
    line=$(grep '^{' "$stem.out" 2>/dev/null | tail -n 1)
    cci_say "JAX probe (exit $rc, PROGRAMS_XLA_FLAGS='$PROGRAMS_XLA_FLAGS'): ${line:-no JSON line}"
    if [[ $line == *'"skip"'* ]]; then
        return 0
    fi
    (( rc == 0 )) || status=1
    echo "  cuGetProcAddress lookups in the preload's debug log:"
    grep -o 'cuGetProcAddress("[A-Za-z0-9_]*"' "$stem.log" | sort | uniq -c | sed 's/^/    /'
    echo "  lines mentioning dlsym:"
    grep -i dlsym "$stem.log" | head -n 20 | sed 's/^/    /'
    echo "  lines mentioning each allocation entry point (the exit line, which names cuMemAlloc_v2, left out):"
    local fn
    for fn in cuMemCreate cuMemAlloc cuMemAllocAsync cuMemAllocFromPoolAsync; do
        printf '    %-26s %s\n' "$fn" \
            "$(grep -v 'allocations served' "$stem.log" | grep -cE "${fn}(_v2|_ptsz)?([^A-Za-z0-9_]|\$)")"
    done
    echo "  the preload's exit lines:"
    preload_lines "$stem.log" 20 | sed 's/^/    /'
}
probe >"$OUT/jax-probe-summary.txt" 2>&1
cat "$OUT/jax-probe-summary.txt"

# ---- the rounds ----------------------------------------------------------------------------------
# run_one CONFIG ROUND: one process of the configuration; its record appended to results.jsonl.
run_one() {
    local c=$1 r=$2 wl limit=150 steps=
    local e=("CCI_CONFIG_LABEL=$c" "CCI_CONFIG_ROUND=$r")
    local ours=("LD_PRELOAD=$CCI_PRELOAD" CCI_LOG=info CCI_REPORT=off)
    case $c in
        jax-*) wl=jax-train limit=300 steps=${JAX_STEPS:-} ;;
        cupy-*) wl=cupy-loop steps=${CUPY_STEPS:-} ;;
        numba*) wl=numba-loop steps=${NUMBA_STEPS:-} ;;
    esac
    case $c in
        jax-bfc) e+=(XLA_PYTHON_CLIENT_PREALLOCATE=false) ;;
        jax-bfc-blocking) e+=(XLA_PYTHON_CLIENT_PREALLOCATE=false PROGRAMS_JAX_BLOCK=1) ;;
        jax-platform) e+=(XLA_PYTHON_CLIENT_ALLOCATOR=platform) ;;
        jax-platform-ours) e+=(XLA_PYTHON_CLIENT_ALLOCATOR=platform "${ours[@]}") ;;
        cupy-pool) ;;
        cupy-nopool) e+=(CUPY_POOL=off) ;;
        cupy-nopool-ours) e+=(CUPY_POOL=off "${ours[@]}") ;;
        cupy-nopool-ours-compact) e+=(CUPY_POOL=off "${ours[@]}" CCI_ALLOC_CONF=compact_segments:True) ;;
        numba) ;;
        numba-ours) e+=("${ours[@]}") ;;
        *) cci_say "unknown configuration $c"; status=1; return ;;
    esac
    local args=("$wl")
    [[ -n $steps ]] && args+=(--steps "$steps")
    local stem=$OUT/$c-r$r rc=0 line
    proc "$stem" "$limit" "${e[@]}" "$PYTHON" tests/bench/programs.py "${args[@]}" || rc=$?
    line=$(grep '^{' "$stem.out" 2>/dev/null | tail -n 1)
    if [[ -z $line ]]; then
        printf '{"config": "%s", "round": %d, "workload": "%s", "error": "exit %d without a JSON line (%s)"}\n' \
            "$c" "$r" "$wl" "$rc" "$(basename "$stem").log" >>"$RESULTS"
        line="exit $rc, no JSON line"
        status=1
    elif (( rc != 0 )) && [[ $line != *'"error"'* ]]; then
        # It printed its figures, then failed (at exit, under the preload?): a failure all the same.
        echo "${line%\}}, \"error\": \"exit $rc after its JSON line\"}" >>"$RESULTS"
        status=1
    else
        (( rc == 0 )) || status=1
        echo "{$(served "$stem.log")${line#\{}" >>"$RESULTS"
    fi
    if [[ $line == *'"skip"'* ]]; then
        cci_say "SKIP $c round $r: $line"
    else
        cci_say "$c round $r: ${line:0:260}"
    fi
    preload_lines "$stem.log" | sed "s/^/    $c r$r | /" | tee -a "$OUT/preload-lines.txt"
}

cci_rounds_begin
while cci_round_next 40; do
    for c in $CCI_ORDER; do
        if (( $(cci_left) < 40 )); then
            cci_say "STOPPED: $(cci_left)s left; $c round $CCI_ROUND and the rest not started"
            break 2
        fi
        run_one "$c" "$CCI_ROUND"
    done
done
(( CCI_ROUNDS_FAILED )) && status=1

cci_say "summary (results.jsonl, $(wc -l <"$RESULTS") processes; rounds in rounds.txt)"
"$PYTHON" tests/bench/programs.py summary "$RESULTS" | tee "$OUT/summary.txt" || status=1
cci_say "gpu-programs: $([[ $status == 0 ]] && echo PASSED || echo FAILED) in $((SECONDS - CCI_T0)) s"
exit $status
