#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The closing tables of scripts/gpu-check.sh and scripts/gpu-bench.sh, from what they left in $OUT.

  gpu_report.py check OUT     workloads in every configuration (CONFIGS) vs native; exit 1 on
                              a result_sum mismatch or a failed run
  gpu_report.py bench OUT     every ratio of the benchmark run, with the targets of issue 7

Inputs: OUT/torch-<workload>-<config>.log (a torch_run.py JSON line among the output),
OUT/bench_alloc.json (alloc_table.py), OUT/torch_loop-<config>.log (torch_loop.py).
"""
import json
import os
import sys

WORKLOADS = ["encoder", "resnet", "seedfrag"]
SIZE_NAMES = {512: "512 B", 64 << 10: "64 KiB", 1 << 20: "1 MiB", 20 << 20: "20 MiB", 256 << 20: "256 MiB"}


def last_json(path, key):
    try:
        with open(path, errors="replace") as f:
            lines = [l for l in f if l.startswith("{") and f'"{key}"' in l]
        return json.loads(lines[-1]) if lines else None
    except (OSError, ValueError):
        return None


def workload(out, name, config):
    return last_json(os.path.join(out, f"torch-{name}-{config}.log"), "workload")


def peak_reserved(r, ours):
    """Ours from the preload's statistics (PyTorch's figure is meaningless without its cache)."""
    if not r:
        return None
    if ours:
        c = r.get("cci") or {}
        return c.get("peak_reserved_mib")
    return r.get("peak_reserved_mib")


def f(v, spec=".1f", unit=""):
    return "-" if v is None else f"{v:{spec}}{unit}"


def div(a, b):
    return a / b if a is not None and b else None


def rx(v, suffix="x"):
    """A ratio with as many digits as its size deserves."""
    if v is None:
        return "-"
    return f"{v:.0f}{suffix}" if v >= 10 else f"{v:.2f}{suffix}"


CHECK_LABELS = {
    "native": "PyTorch native", "native-expandable": "PyTorch expandable",
    "ours": "ours default", "ours-immediate": "ours immediate", "ours-expandable": "ours expandable",
    "ours-compact": "ours compact",
}


def check(out):
    """One row per workload and configuration: peak reserved and wall time against PyTorch native,
    result_sum against native. Ours is read from the preload's statistics (PyTorch's reserved
    figure means nothing with its cache off)."""
    configs = os.environ.get("CONFIGS", "native ours").split()
    bad = []
    print("Workloads: peak reserved and wall time against PyTorch native (same run, same device)")
    # x alloc: peak reserved over the peak allocated bytes the same allocator saw (ours: every
    # cudaMalloc of the process, cuBLAS/cuDNN workspaces included; PyTorch: its own tensors).
    print(f"{'workload':<10}{'configuration':<22}{'peak reserved':>15}{'x native':>10}{'x alloc':>9}{'seconds':>10}"
          f"{'x native':>10}  {'result_sum':>22}  match  {'syncs':>6} {'fences':>7} {'waits':>6}")
    for w in WORKLOADS:
        n = workload(out, w, "native")
        if not n:
            print(f"{w:<10} native run failed: see torch-{w}-native.log")
            bad.append(f"{w}/native")
            continue
        for c in configs:
            o = workload(out, w, c)
            label = CHECK_LABELS.get(c, c)
            if not o:
                print(f"{w:<10}{label:<22} run failed: see torch-{w}-{c}.log")
                bad.append(f"{w}/{c}")
                continue
            ours = c.startswith("ours")
            cc = o.get("cci") or {}
            if ours and not cc.get("active"):
                print(f"{w:<10}{label:<22} the preload was not active (cci={o.get('cci')})")
                bad.append(f"{w}/{c}")
                continue
            match = o.get("result_sum") == n.get("result_sum")
            if not match:
                bad.append(f"{w}/{c}")
            pr, pn = peak_reserved(o, ours), peak_reserved(n, False)
            pa = (cc if ours else o).get("peak_allocated_mib")
            print(f"{w:<10}{label:<22}{f(pr, '.0f', ' MiB'):>15}{f(div(pr, pn), '.3f'):>10}{f(div(pr, pa), '.3f'):>9}"
                  f"{f(o['seconds'], '.3f'):>10}{f(div(o['seconds'], n['seconds']), '.3f'):>10}"
                  f"  {f(o.get('result_sum'), '.6f'):>22}  {'yes' if match else 'NO':<5}"
                  f"  {f(cc.get('num_sync_all_streams') if ours else None, 'd'):>6}"
                  f" {f(cc.get('num_fence_records') if ours else None, 'd'):>7}"
                  f" {f(cc.get('num_fence_waits') if ours else None, 'd'):>6}")
    for b in bad:
        print(f"FAILED: {b}")
    return 1 if bad else 0


def bench(out):
    rows = []  # (figure, ours, anchor, ratio text, target, verdict)

    def add(fig, ours, anchor, ratio, target="", ok=None):
        rows.append((fig, ours, anchor, ratio, target, "" if ok is None else ("met" if ok else "NOT met")))

    ba = None
    try:
        with open(os.path.join(out, "bench_alloc.json")) as fh:
            ba = json.load(fh)
    except (OSError, ValueError):
        pass
    def p99(label, size_name):
        r = (ba or {}).get("results", {}).get(label) or {}
        for e in r.get("sizes", []):
            if SIZE_NAMES.get(e["bytes"]) == size_name:
                return e["p99_ns"]
        return None

    def with_p99(v, label, size_name):
        q = p99(label, size_name)
        return f(v, ".0f", " ns") + ("" if q is None else f" (p99 {q:.0f})")

    if ba:
        table = {r["row"]: r for r in ba["table"]}
        for size in ("512 B", "1 MiB", "20 MiB", "256 MiB"):
            r = table.get(size, {})
            d, i, m, a = r.get("ours default"), r.get("ours immediate"), r.get("raw malloc"), r.get("raw async")
            add(f"pair {size}: ours default vs cudaMalloc", with_p99(d, "ours default", size), f(div(m, 1000), ".1f", " us"),
                rx(div(m, d)), "<= 150 ns" if size == "1 MiB" else "",
                d <= 150 if d is not None and size == "1 MiB" else None)
            add(f"pair {size}: ours default vs cudaMallocAsync", f(d, ".0f", " ns"), f(a, ".0f", " ns"),
                rx(div(a, d)), ">= 8x", div(a, d) >= 8 if div(a, d) else None)
            add(f"pair {size}: ours immediate vs cudaMallocAsync", with_p99(i, "ours immediate", size), f(a, ".0f", " ns"),
                rx(div(a, i)), "<= 60 ns" if size == "1 MiB" else "",
                i <= 60 if i is not None and size == "1 MiB" else None)
        r = table.get("mixed", {})
        d, m, a = r.get("ours default"), r.get("raw malloc"), r.get("raw async")
        add("mixed workload: ours default vs cudaMalloc", f(d, ".0f", " ns/op"), f(div(m, 1000), ".1f", " us/op"),
            rx(div(m, d)), "<= 100 ns/op", d <= 100 if d is not None else None)
        add("mixed workload: ours default vs cudaMallocAsync", f(d, ".0f", " ns/op"), f(a, ".0f", " ns/op"),
            rx(div(a, d)))
        static = ba["results"].get("static ours default") or {}
        if static and not static.get("failed"):
            add("static-cudart build under the preload", f"served {static.get('served')}", "", "",
                "0 until driver-level hooks")

    core = {}
    try:
        with open(os.path.join(out, "bench_core.txt")) as fh:
            for line in fh:
                parts = line.split()
                if len(parts) == 3 and parts[0].isdigit() and parts[2].endswith("x"):
                    core[int(parts[0])] = (float(parts[1]), float(parts[2][:-1]))
    except (OSError, ValueError):
        pass
    if 1 in core and 8 in core:
        add("core, 8 threads vs 1 (pairs/s)", f"{core[8][0] / 1e6:.1f} M/s", f"{core[1][0] / 1e6:.1f} M/s",
            rx(core[8][1]), ">= 4x", core[8][1] >= 4)

    def loop(config):
        r = last_json(os.path.join(out, f"torch_loop-{config}.log"), "label")
        return {s["bytes"]: s["median_ns"] for s in r["sizes"]} if r else {}

    native, ours, raw = loop("native"), loop("ours"), loop("nocache-raw")
    for size, name in ((512, "512 B"), (1 << 20, "1 MiB"), (256 << 20, "256 MiB")):
        n, o, u = native.get(size), ours.get(size), raw.get(size)
        add(f"torch.empty/del {name}: ours vs PyTorch cache", f(div(o, 1000), ".2f", " us"),
            f(div(n, 1000), ".2f", " us"), rx(div(o, n), "x the time"))
        if u:
            add(f"torch.empty/del {name}: ours vs no cache at all", f(div(o, 1000), ".2f", " us"),
                f(div(u, 1000), ".1f", " us"), rx(div(u, o), "x faster"))

    bad = []
    for w in WORKLOADS:
        n = workload(out, w, "native")
        if not n:
            add(f"{w}: end to end", "native run failed", "", "")
            continue
        for config, label in (("expandable", "expandable_segments"), ("async", "backend:cudaMallocAsync"),
                              ("ours", "ours"), ("ours-immediate", "ours immediate_reuse")):
            o = workload(out, w, config)
            if not o:
                add(f"{w}: {label}", "run failed", "", "")
                continue
            same = o.get("result_sum") == n.get("result_sum")
            if not same:
                bad.append(f"{w}/{config}")
            pr = peak_reserved(o, config.startswith("ours"))
            t = div(o["seconds"], n["seconds"])
            target = "<= 1.02x, peak <= 1.0x" if config.startswith("ours") else ""
            ok = ((t <= 1.02 and div(pr, n["peak_reserved_mib"]) <= 1.0) if config.startswith("ours") and t and pr
                  else None)
            add(f"{w}: {label} vs native", f"{o['seconds']:.2f} s, {f(pr, '.0f')} MiB",
                f"{n['seconds']:.2f} s, {n['peak_reserved_mib']:.0f} MiB",
                f"time {f(t, '.3f')}x, peak {f(div(pr, n['peak_reserved_mib']), '.3f')}x"
                + ("" if same else ", RESULT_SUM DIFFERS"), target, ok)

    w0 = max(len(r[0]) for r in rows) if rows else 10
    print("Ratios (same run, same device)")
    print(f"{'figure':<{w0}}  {'ours':>22}  {'anchor':>22}  {'ratio':<36}{'target':<24}")
    for fig, o, a, r, t, v in rows:
        print(f"{fig:<{w0}}  {o:>22}  {a:>22}  {r:<36}{t:<24}{v}")
    for b in bad:
        print(f"MISMATCH: result_sum differs from native in {b}")
    return 1 if bad else 0


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("check", "bench"):
        sys.exit(__doc__)
    return check(sys.argv[2]) if sys.argv[1] == "check" else bench(sys.argv[2])


if __name__ == "__main__":
    sys.exit(main())
