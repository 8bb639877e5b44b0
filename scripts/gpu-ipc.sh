#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# CUDA IPC on the GPU, natively and under the preload (logs under $CCI_GPU_OUT/ipc/, all of them
# packed into $CCI_GPU_OUT/ipc-logs.tar.gz at the end; the table last):
#   1. builds the preload and tests/gpu/ipc_pair.c with nvcc (-cudart shared and static);
#   2. runs each scenario of ipc_pair in a process pair of its own, under the preload with
#      CCI_ALLOC_CONF unset (the default), compact_segments:True and expandable_segments:True;
#      natively both-ways and open-close-time, which must pass there too (native CUDA IPC's own
#      open+close times are the anchor); the static-cudart build's both-ways natively and under
#      the preload; no-ptrace once more under `setpriv --bounding-set -sys_ptrace --inh-caps
#      -sys_ptrace` where setpriv exists and may drop the capability;
#   3. tests/gpu/torch_ipc.py natively and under the preload, with PYTORCH_NO_CUDA_MEMORY_CACHING=1
#      (every tensor its own cudaMalloc) and with PyTorch's cache (the preload serving its
#      segments): checksums identical to native. Where PyTorch itself refuses to share uncached
#      tensors (before any CUDA call), the preloaded run of that mode is left out and nothing fails;
#   4. prints the table: scenario x configuration, ok or FAIL, and open+close median/p90 in µs.
# The scenarios (each one JSON line, ok true only if everything held):
#   both-ways           A cudaMallocs 1 GiB (a position-dependent pattern, markers at the first
#                       bytes, across a 2 MiB page boundary, mid-way, at the last bytes) and
#                       3/5/64 MiB, 512 KiB/512 KiB/3 MiB after it, of which 5 MiB, 64 MiB and the
#                       second 512 KiB are shared too (with the preload, blocks inside segments); B
#                       opens each (cudaIpcMemLazyEnablePeerAccess), compares every byte, writes
#                       over part (a memset of odd length, its own pattern up to the last byte),
#                       closes; A finds B's writes and its unshared buffers untouched. Then B owns
#                       and A imports the same way.
#   open-close-time     A exports 2 MiB, 64 MiB, 1 GiB; B opens and closes each 50 times: median,
#                       p90, first and max µs per size (the first and last mappings read at both
#                       ends). Target: p90 <= 1000 µs (IPC_TARGET_US); under the preload a miss
#                       fails the run unless IPC_TIME_STRICT=0.
#   free-while-open     B opens 64 MiB; A frees it and fills 8 new 64 MiB buffers with another
#                       byte; B must still read the original bytes, then writes its own over them
#                       and closes; A's new buffers must be unchanged; then A allocates as usual.
#   importer-dies       one importer _exit()s and one is SIGKILLed while holding the handle open;
#                       A then frees, allocates 4 x 64 MiB + 1 GiB, checks them, cudaMemGetInfo, and
#                       a third importer opens a new export: nothing fails or hangs.
#   no-ptrace           both processes drop CAP_SYS_PTRACE (bounding, ambient, effective,
#                       permitted) and install a seccomp filter making pidfd_getfd and ptrace fail
#                       with EPERM (probed) before any CUDA call; then both-ways.
#   no-preload-importer B runs without LD_PRELOAD: cudaIpcOpenMemHandle on the preload's handle
#                       must fail (its error name is printed) and give no pointer. Preload only.
#   fork-child          A exports, fork()s a child that never calls CUDA and leaves through exit();
#                       A exports a second buffer after that; B opens and writes both, A sees it.
# Every wait has a time limit (alarm(60) in every process), so a hang is a failure.
# Exit status 1 when a run that should pass did not (native runs only where they are judged).
#
# Environment: CCI_GPU_OUT (default build-gpu/out/), IPC_CONFIGS (default: native ours
# ours-compact ours-expandable static-native static-ours setpriv-ours; setpriv-native and
# native-ref, the native runs of free-while-open, importer-dies, fork-child and no-ptrace, shown
# but not judged, on request), IPC_SCENARIOS (default: all seven), IPC_TORCH (default 1; 0 leaves
# PyTorch out), IPC_TIME_STRICT (default 1), IPC_TARGET_US (default 1000), CCI_DEADLINE (default
# 270 s: no run starts after it; about 3 minutes of runs on an H200 are expected, plus the build),
# NVCC, PYTHON.
set -u -o pipefail
# shellcheck source=scripts/gpu-common.sh
source "$(dirname "$0")/gpu-common.sh"
CCI_DEADLINE=${CCI_DEADLINE:-270}
ALL_SCENARIOS="both-ways open-close-time free-while-open importer-dies no-ptrace no-preload-importer fork-child"
SCENARIOS=${IPC_SCENARIOS:-$ALL_SCENARIOS}
CONFIGS=${IPC_CONFIGS:-native ours ours-compact ours-expandable static-native static-ours setpriv-ours}
STRICT=${IPC_TIME_STRICT:-1}
export IPC_TARGET_US=${IPC_TARGET_US:-1000}
for c in $CONFIGS; do
    case $c in
        native | native-ref | ours | ours-compact | ours-expandable | static-native | static-ours | \
            setpriv-native | setpriv-ours) ;;
        *) cci_say "IPC_CONFIGS: unknown configuration '$c'"; exit 1 ;;
    esac
done
for s in $SCENARIOS; do
    [[ " $ALL_SCENARIOS " == *" $s "* ]] || { cci_say "IPC_SCENARIOS: unknown scenario '$s'"; exit 1; }
done
IPC_LOGS=$CCI_GPU_OUT/ipc
rm -rf "$IPC_LOGS" && mkdir -p "$IPC_LOGS"
RESULTS=$IPC_LOGS/results.jsonl
: >"$RESULTS"
status=0

cci_find_nvcc || exit 1
cci_gpu_banner
cci_build_preload || exit 1
cci_nvcc ipc_pair tests/gpu/ipc_pair.c || exit 1
cci_say "built $CCI_BIN/ipc_pair.shared and .static"

on() { [[ " $CONFIGS " == *" $1 "* ]]; }
# What runs where. Natively, no-preload-importer means nothing, and the scenarios that check what
# the preload promises beyond CUDA's own IPC are shown only on request (native-ref).
scenarios_of() {
    case $1 in
        native) echo "both-ways open-close-time" ;;
        native-ref) echo "free-while-open importer-dies fork-child no-ptrace" ;;
        ours | ours-compact | ours-expandable) echo "$ALL_SCENARIOS" ;;
        static-*) echo "both-ways" ;;
        setpriv-*) echo "no-ptrace" ;;
    esac
}
judged() { [[ $1 != native-ref && $1 != setpriv-native ]]; }
# run_ipc CONFIG SCENARIO: one ipc_pair process (it spawns A and B), its JSON line into
# results.jsonl with the configuration and whether it is judged.
run_ipc() {
    local c=$1 sc=$2 rc=0 line bin=$CCI_BIN/ipc_pair.shared log=$IPC_LOGS/$1-$2.log
    local envs=(-u LD_PRELOAD -u CCI_ALLOC_CONF -u PYTORCH_NO_CUDA_MEMORY_CACHING CCI_REPORT=off) wrap=()
    local ours=("LD_PRELOAD=$CCI_PRELOAD" CCI_LOG=info)
    case $c in
        ours | static-ours | setpriv-ours) envs+=("${ours[@]}") ;;
        ours-compact) envs+=("${ours[@]}" CCI_ALLOC_CONF=compact_segments:True) ;;
        ours-expandable) envs+=("${ours[@]}" CCI_ALLOC_CONF=expandable_segments:True) ;;
    esac
    [[ $c == static-* ]] && bin=$CCI_BIN/ipc_pair.static
    [[ $c == setpriv-* ]] && wrap=(setpriv --bounding-set -sys_ptrace --inh-caps -sys_ptrace)
    cci_run 100 "$log" ${wrap[@]+"${wrap[@]}"} env "${envs[@]}" "$bin" "$sc" || rc=$?
    line=$(grep '^{"scenario"' "$log" | tail -n 1)
    [[ -n $line ]] || line="{\"scenario\": \"$sc\", \"ok\": false, \"why\": \"exit $rc without a JSON line ($(basename "$log"))\"}"
    local j=false verdict=ok
    judged "$c" && j=true
    echo "{\"config\": \"$c\", \"judged\": $j, \"rc\": $rc, ${line#\{}" >>"$RESULTS"
    if (( rc != 0 )) || [[ $line != *'"ok": true'* ]]; then
        verdict=FAIL
        [[ $j == true ]] && status=1
    elif [[ $sc == open-close-time && $c != native* && $line == *'"target_met": false'* ]]; then
        verdict="correct, but p90 over the ${IPC_TARGET_US} µs target"
        [[ $STRICT == 1 ]] && status=1 && verdict+=": FAIL (IPC_TIME_STRICT=1)"
    fi
    cci_say "$c $sc: $verdict$([[ $j == false ]] && echo ' (reference, not judged)')"
}

if on setpriv-ours || on setpriv-native; then
    if ! command -v setpriv >/dev/null; then
        cci_say "no setpriv: the setpriv runs are left out"
        CONFIGS=" $CONFIGS "
        CONFIGS=${CONFIGS// setpriv-ours / }
        CONFIGS=${CONFIGS// setpriv-native / }
    elif ! setpriv --bounding-set -sys_ptrace --inh-caps -sys_ptrace true 2>"$IPC_LOGS/setpriv-probe.log"; then
        cci_say "setpriv may not drop CAP_SYS_PTRACE here ($(head -c 200 "$IPC_LOGS/setpriv-probe.log")): left out"
        CONFIGS=" $CONFIGS "
        CONFIGS=${CONFIGS// setpriv-ours / }
        CONFIGS=${CONFIGS// setpriv-native / }
    fi
fi

# torch_ipc.py: MODE (nocache, cache) and CONFIG (native, ours); its JSON line into torch.jsonl.
run_torch() {
    local m=$1 c=$2 rc=0 line log=$IPC_LOGS/torch-$1-$2.log
    local envs=(-u LD_PRELOAD -u CCI_ALLOC_CONF -u PYTORCH_NO_CUDA_MEMORY_CACHING CCI_REPORT=off)
    [[ $m == nocache ]] && envs+=(PYTORCH_NO_CUDA_MEMORY_CACHING=1)
    [[ $c == ours ]] && envs+=("LD_PRELOAD=$CCI_PRELOAD" CCI_LOG=info)
    cci_run 200 "$log" env "${envs[@]}" "$PYTHON" tests/gpu/torch_ipc.py || rc=$?
    line=$(grep '^{' "$log" | tail -n 1)
    [[ -n $line ]] || line="{\"ok\": false, \"error\": \"exit $rc without a JSON line\"}"
    echo "{\"config\": \"$c\", \"torch_mode\": \"$m\", \"rc\": $rc, ${line#\{}" >>"$IPC_LOGS/torch.jsonl"
    cci_say "torch_ipc $m $c: exit $rc ${line:0:200}"
    return $rc
}

# Most telling first, so that a run cut short by the deadline loses the least: the native
# anchors, the default mode, PyTorch, then the other modes and builds.
for c in native ours; do
    on "$c" || continue
    for sc in $(scenarios_of "$c"); do
        [[ " $SCENARIOS " == *" $sc "* ]] && run_ipc "$c" "$sc"
    done
done
if [[ ${IPC_TORCH:-1} != 0 ]]; then
    : >"$IPC_LOGS/torch.jsonl"
    for m in nocache cache; do
        rc=0
        run_torch "$m" native || rc=$?
        if [[ $m == nocache ]] && (( rc == 3 )); then
            cci_say "PyTorch refuses to share tensors under PYTORCH_NO_CUDA_MEMORY_CACHING=1 natively: its preloaded run is left out"
            continue
        fi
        run_torch "$m" ours || true
    done
fi
for c in ours-compact ours-expandable static-native static-ours setpriv-ours setpriv-native native-ref; do
    on "$c" || continue
    for sc in $(scenarios_of "$c"); do
        [[ " $SCENARIOS " == *" $sc "* ]] && run_ipc "$c" "$sc"
    done
done

# The table (and the torch verdicts: identical checksums, or the same refusal as natively).
"$PYTHON" - "$IPC_LOGS" >"$IPC_LOGS/table.txt" 2>&1 <<'EOF' || status=1
import json, os, sys
out = sys.argv[1]
def load(name):
    p = os.path.join(out, name)
    return [json.loads(l) for l in open(p) if l.strip()] if os.path.exists(p) else []
runs, torch_runs = load("results.jsonl"), load("torch.jsonl")
configs = list(dict.fromkeys(r["config"] for r in runs))
target = float(os.environ.get("IPC_TARGET_US", "1000"))
rows, notes, bad = [], [], False
def cell(r):
    if r is None:
        return "-"
    s = "ok" if r.get("ok") and r.get("rc") == 0 else "FAIL"
    if s == "ok" and r.get("target_met") is False and not r["config"].startswith("native"):
        s = "ok, slow"
    if s == "FAIL":
        notes.append(f"{r['config']} {r['scenario']}: {r.get('why', '')[:300]}")
    return s + ("" if r.get("judged", True) else " (ref)")
order = ["both-ways", "open-close-time", "free-while-open", "importer-dies", "no-ptrace",
         "no-preload-importer", "fork-child"]
by = {(r["config"], r["scenario"]): r for r in runs}
for sc in order:
    if not any(k[1] == sc for k in by):
        continue
    rows.append([sc] + [cell(by.get((c, sc))) for c in configs])
    if sc != "open-close-time":
        continue
    for i, size in enumerate(["2 MiB", "64 MiB", "1 GiB"]):
        row = [f"  open+close {size}"]
        for c in configs:
            r = by.get((c, sc))
            if not r or "median_us" not in r:
                row.append("-")
                continue
            med, p90 = r["median_us"][i], r["p90_us"][i]
            row.append(f"{med:.0f}/{p90:.0f}" + ("!" if p90 > target else ""))
        rows.append(row)
head = ["scenario"] + configs
w = [max(len(str(x[i])) for x in rows + [head]) for i in range(len(head))]
print("CUDA IPC: ok or FAIL per run; open+close: median/p90 µs of 50 pairs (! over "
      f"{target:.0f} µs); (ref): shown, not judged; -: not run")
for x in [head] + rows:
    print("  ".join(str(v).ljust(w[i]) for i, v in enumerate(x)))
for n in notes:
    print("  FAIL " + n)
if torch_runs:
    print("\nPyTorch (torch_ipc.py): native and under the preload, checksums compared")
    t = {(r["torch_mode"], r["config"]): r for r in torch_runs}
    for m in ("nocache", "cache"):
        nat, ours = t.get((m, "native")), t.get((m, "ours"))
        if nat and nat.get("refused"):
            print(f"  {m:8} native: refused by PyTorch ({nat['refused'][:120]}); preload: not run")
            continue
        if not nat or not ours:
            print(f"  {m:8} FAIL: a run is missing"); bad = True
            continue
        same = nat.get("checksums") == ours.get("checksums")
        good = nat.get("ok") and ours.get("ok") and same
        bad |= not good
        print(f"  {m:8} native: {'ok' if nat.get('ok') else 'FAIL'} ({nat.get('seconds')} s), "
              f"preload: {'ok' if ours.get('ok') else 'FAIL'} ({ours.get('seconds')} s), checksums "
              f"{'identical' if same else 'DIFFER'}{'' if good else ': FAIL'}")
        for r in (nat, ours):
            if not r.get("ok"):
                print(f"           {r['config']}: {r.get('error') or r.get('refused') or r.get('checks')}")
sys.exit(1 if bad else 0)
EOF
extra=()
for f in "$CCI_GPU_OUT"/nvcc-ipc_pair.*.log "$CCI_GPU_OUT"/build-*.log; do
    [[ -f $f ]] && extra+=("$(basename "$f")")
done
tar -czf "$CCI_GPU_OUT/ipc-logs.tar.gz" -C "$CCI_GPU_OUT" ipc ${extra[@]+"${extra[@]}"} || cci_say "tar failed"
echo
cci_say "gpu-ipc: $([[ $status == 0 ]] && echo PASSED || echo FAILED) in $((SECONDS - CCI_T0)) s; logs in $IPC_LOGS and $CCI_GPU_OUT/ipc-logs.tar.gz"
cat "$IPC_LOGS/table.txt"
exit $status
