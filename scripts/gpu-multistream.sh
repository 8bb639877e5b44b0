#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The multi-stream benchmarks (docs/benchmarks.md, "Multi-stream"), one unattended run on a machine
# with two GPUs:
#   1. DDP (gpu-ddp.sh): DDP_ROUNDS rounds of native, ours and ours behind PyTorch's
#      backend:cudaMallocAsync (the stream of every tensor reaches our pool) for wall time;
#      MEM_ROUNDS rounds of PyTorch expandable, ours expandable, ours compact (also behind
#      backend:cudaMallocAsync) and ours as PyTorch's pluggable allocator;
#   2. then, side by side, on GPU 0 the threaded server pattern (tests/bench/bench_threads.c:
#      T threads, each its own non-blocking stream, cached 64 KiB pairs) through cudaMallocAsync,
#      ours, ours once its history is full and ours without a history, in rotated rounds; on GPU 1 the generation
#      workload (tests/bench/generation.py) natively, natively without PyTorch's cache, under
#      ours, ours immediate, ours behind backend:cudaMallocAsync, ours as the pluggable allocator,
#      PyTorch expandable, ours expandable and ours compact, in rotated rounds (the two references
#      say whether a result_sum that differs from native's is the allocator's doing).
# Environment: PARTS (default "ddp threads generation"), CCI_GPU_OUT, DDP_ROUNDS (default 7),
# MEM_ROUNDS (default 1), MEM_SECONDS (kept for them, default 95), GEN_ROUNDS (default 2),
# THREAD_ROUNDS (default 3; the protocol for a wall-time verdict is 7), GEN_REQUESTS (default 6),
# GEN_CONFIGS (the generation's configurations, default all of the above and ours-fences: the
# default mode with a fence per batch, CCI_REUSE_ORDERS=0), GEN_GPU (default 1; 0 on a machine with
# one GPU), STEPS (DDP steps, default 20), CCI_DEADLINE, PYTHON.
set -u -o pipefail
# shellcheck source=scripts/gpu-common.sh
source "$(dirname "$0")/gpu-common.sh"
status=0
PARTS=${PARTS:-ddp threads generation}
cci_build_preload || exit 1
here=$(dirname "$0")
out=$CCI_GPU_OUT
part() { [[ " $PARTS " == *" $1 "* ]]; }
if part ddp; then
    # (Each torchrun process takes ~16 s on two H200s: 7 rounds of three configurations and one of
    # five more fit one 10-minute call; the memory configurations' peaks vary less than wall time.)
    CCI_GPU_OUT=$out/ddp REPEATS=${DDP_ROUNDS:-7} CONFIGS="native ours ours-async" STACKS_RUN=0 \
        CCI_DEADLINE=$(( $(cci_left) - ${MEM_SECONDS:-95} )) "$here/gpu-ddp.sh" >"$out/ddp-time.txt" 2>&1 || status=1
    CCI_GPU_OUT=$out/ddp REPEATS=${MEM_ROUNDS:-1} STACKS_RUN=0 \
        CONFIGS="native-expandable ours-expandable ours-compact ours-async-compact ours-pluggable" \
        CCI_DEADLINE=$(( $(cci_left) - 10 )) "$here/gpu-ddp.sh" >"$out/ddp-memory.txt" 2>&1 || status=1
    CCI_GPU_OUT=$out/ddp CONFIGS="native ours ours-async native-expandable ours-expandable ours-compact ours-async-compact ours-pluggable" \
        "$PYTHON" tests/bench/gpu_report.py ddp "$out/ddp" >"$out/ddp-summary.txt" 2>&1 || status=1
    tail -n 30 "$out/ddp-summary.txt"
fi
part threads || part generation || exit $status

# nvcc only where the threaded pattern runs (a PARTS=generation call has nothing to build).
if part threads; then
    cci_find_nvcc || exit 1
    mkdir -p "$CCI_BIN"
    "$NVCC" -O2 -cudart shared -Iinclude -Iexamples -Itests/bench tests/bench/bench_threads.c -o "$CCI_BIN/bench_threads" \
        -ldl -Xlinker -rpath -Xlinker "$CCI_CUDA_LIB" || status=1
fi
# Each thread count of ours runs in a process of its own, so that every cell starts as cold as
# the others (the history's fill, the pool the kept batches grew, the allowance spent); with
# CCI_LOG=info, each process's line of how often the allocator's lock was taken, and why.
threads() {
    for r in $(seq 1 "${THREAD_ROUNDS:-3}"); do
        for c in $("$PYTHON" tests/bench/repeat_stats.py order "$r" async ours ours-warm ours-nohistory); do
            if [[ $c == async ]]; then
                env CUDA_VISIBLE_DEVICES=0 "$CCI_BIN/bench_threads" --api async --threads 1,8,16 --budget-ms 300 --label "async-r$r"
                continue
            fi
            local e=(CUDA_VISIBLE_DEVICES=0 "LD_PRELOAD=$CCI_PRELOAD" CCI_REPORT=off CCI_LOG=info) extra=()
            # The history keeps the first CCI_HISTORY_MAX events for the exit's what-ifs: 1.5 s
            # of untimed pairs first fill it (the steady state of a long-running server); and
            # with no history at all, what keeping it costs.
            [[ $c == ours-warm ]] && extra=(--warmup-ms 1500)
            [[ $c == ours-nohistory ]] && e+=(CCI_HISTORY_MAX=0)
            for t in 1 8 16; do
                env "${e[@]}" "$CCI_BIN/bench_threads" --api malloc --threads "$t" --budget-ms 300 \
                    --label "$c-r$r" ${extra[@]+"${extra[@]}"} 2>&1 | grep -E '^\{|under the allocator' |
                    sed "s/^ccinterpose\[[0-9]*\]: info: /lock $c $t: /"
            done
        done
    done
}
generation() {
    for r in $(seq 1 "${GEN_ROUNDS:-2}"); do
        # shellcheck disable=SC2086  # GEN_CONFIGS: a list
        for c in $("$PYTHON" tests/bench/repeat_stats.py order "$r" ${GEN_CONFIGS:-native native-nocache ours ours-fences ours-immediate ours-async ours-pluggable native-expandable ours-expandable ours-compact}); do
            local e=("CUDA_VISIBLE_DEVICES=${GEN_GPU:-1}")
            case $c in
                native) ;;
                native-expandable) e+=(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) ;;
                # result_sum's references: PyTorch with no cache of its own (cuBLAS's workspace then
                # comes from cudaMalloc, as under ours), and ours reusing at once (no fences).
                native-nocache) e+=(PYTORCH_NO_CUDA_MEMORY_CACHING=1) ;;
                ours-async) e+=(PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync CCI_ALLOC_CONF=backend:native
                                "LD_PRELOAD=$CCI_PRELOAD" CCI_REPORT=off CCI_LOG=info) ;;
                ours) e+=(PYTORCH_NO_CUDA_MEMORY_CACHING=1 "LD_PRELOAD=$CCI_PRELOAD" CCI_REPORT=off CCI_LOG=info) ;;
                ours-fences) e+=(PYTORCH_NO_CUDA_MEMORY_CACHING=1 "LD_PRELOAD=$CCI_PRELOAD" CCI_REPORT=off CCI_LOG=info
                                 CCI_REUSE_ORDERS=0) ;;
                ours-pluggable) e+=(CCI_TORCH_PLUGGABLE=1 "LD_PRELOAD=$CCI_PRELOAD" CCI_REPORT=off CCI_LOG=info) ;;
                ours-*) conf=
                        [[ $c == ours-expandable ]] && conf=expandable_segments:True
                        [[ $c == ours-compact ]] && conf=compact_segments:True
                        [[ $c == ours-immediate ]] && conf=immediate_reuse:True
                        [[ $c == ours-ordinary ]] && conf=compact_segments:False
                        e+=(PYTORCH_NO_CUDA_MEMORY_CACHING=1 "LD_PRELOAD=$CCI_PRELOAD" CCI_REPORT=off CCI_LOG=info "CCI_ALLOC_CONF=$conf") ;;
            esac
            (( $(cci_left) < 45 )) && { echo "== out of time before $c round $r"; return 1; }
            echo "== $c round $r"
            timeout 120 env "${e[@]}" "$PYTHON" tests/bench/generation.py --requests "${GEN_REQUESTS:-6}" 2>&1 | grep -E '^\{|stream rule|fence costs|ordered on|orders at reuse' | sed "s/^{/{\"config\": \"$c\", \"round\": $r, /"
        done
    done
}
tp='' gp=''
part threads && { threads >"$out/threads.txt" 2>&1 & tp=$!; }
part generation && { generation >"$out/generation.txt" 2>&1 & gp=$!; }
[[ -z $tp ]] || wait "$tp" || status=1
[[ -z $gp ]] || wait "$gp" || status=1
part threads && "$PYTHON" - "$out/threads.txt" <<'PY'
import collections, json, re, statistics, sys
cell = collections.defaultdict(dict)  # (config, threads) -> {round: M pairs/s}
locks = collections.defaultdict(list)
for line in open(sys.argv[1]):
    if line.startswith("{"):
        x = json.loads(line)
        config, r = x["label"].rsplit("-r", 1)
        for c in x["cells"]:
            cell[(config, c["threads"])][int(r)] = c["pairs_per_s"] / 1e6
    m = re.match(r"lock (\S+) (\d+): under the allocator's lock: (\d+) allocations and (\d+) frees", line)
    if m:
        locks[(m.group(1), int(m.group(2)))].append(int(m.group(3)) + int(m.group(4)))
print("threads: config, threads, median M pairs/s, each round, locked operations a process (median)")
for k in sorted(cell):
    v = cell[k]
    lk = locks.get(k)
    print(f"  {k[0]:<15} {k[1]:3d} {statistics.median(v.values()):7.2f}  "
          + " ".join(f"{v[r]:.2f}" for r in sorted(v)) + (f"  locked {statistics.median(lk):.0f}" if lk else ""))
print("per-round paired ratios (median; target: 8 threads >= 4x one thread's aggregate, above async everywhere)")
for config in sorted({k[0] for k in cell} - {"async"}):
    for t in (8, 16):
        a, b = cell.get((config, t), {}), cell.get((config, 1), {})
        rs = [a[r] / b[r] for r in sorted(a) if r in b]
        if rs:
            print(f"  {config:<15} {t:2d} / 1 thread: {statistics.median(rs):5.2f}  (" + " ".join(f"{x:.2f}" for x in rs) + ")")
    for t in (1, 8, 16):
        a, b = cell.get((config, t), {}), cell.get(("async", t), {})
        rs = [a[r] / b[r] for r in sorted(a) if r in b]
        if rs:
            print(f"  {config:<15} {t:2d} threads / async: {statistics.median(rs):6.1f}x")
PY
part generation && "$PYTHON" - "$out/generation.txt" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    if line.startswith('{"config"'):
        x = json.loads(line)
        rows.setdefault(x["config"], []).append(x)
nat = rows.get("native", [])
ns = statistics.median(x["seconds"] for x in nat) if nat else None
npk = statistics.median(x["peak_reserved_mib"] for x in nat) if nat else None
print("generation: config, median s, x native, peak reserved MiB, x native, result_sum match")
for c, xs in rows.items():
    s = statistics.median(x["seconds"] for x in xs)
    p = statistics.median(x["peak_reserved_mib"] for x in xs)
    same = all(x["result_sum"] == nat[0]["result_sum"] for x in xs) if nat else None
    sums = sorted({x["result_sum"] for x in xs})
    print(f"  {c:<18} {s:8.3f} {s / ns if ns else 0:6.3f} {p:9.1f} {p / npk if npk else 0:6.3f} {same} {sums}")
PY
cci_say "gpu-multistream: $([[ $status == 0 ]] && echo PASSED || echo FAILED) in $((SECONDS - CCI_T0)) s"
exit $status
