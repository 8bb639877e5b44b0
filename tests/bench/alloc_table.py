#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Run bench_alloc raw and under the preload, side by side in one run, and print the ratios.

  alloc_table.py --preload LIB --exe BENCH_ALLOC [--exe-static BENCH_ALLOC_STATIC]
                 [--libdir DIR] [--quick] [--log-dir DIR] [--json-out FILE] [--title TEXT]

  [--rounds R]: every configuration R times, the order rotated each round; each figure is then the
  median over the rounds of each process's median, with the range over the rounds beside it. On
  the H100 host one process's pair cost varies by 30-60 % from the next's (the machine's CPU speed
  as another process sees it: docs/benchmarks.md), so one process per configuration cannot tell
  70 ns from 100 ns.

Configurations (each a separate process, in this order, so all share the machine's state):
  raw malloc       cudaMalloc+cudaFree, no preload               (the anchor a program has today)
  raw async        cudaMallocAsync+cudaFreeAsync, no preload     (CUDA's own pool, unlimited threshold)
  ours default     cudaMalloc+cudaFree under the preload         (frees wait for the device, batched)
  ours immediate   the same with CCI_ALLOC_CONF=immediate_reuse:True
  ours expandable / ours compact   the same in the two virtual-memory modes
  ours async       cudaMallocAsync+cudaFreeAsync under the preload
With --exe-static also: the static-cudart build raw and under the preload (whose hooks a static
cudart reaches only through the driver-level hooks), and the static build's async pair under the preload.
"""
import argparse
import json
import os
import re
import subprocess
import sys

SERVED = re.compile(r"^ccinterpose: loaded, served (\d+) allocations", re.M)
SIZE_NAMES = {512: "512 B", 64 << 10: "64 KiB", 1 << 20: "1 MiB", 20 << 20: "20 MiB", 256 << 20: "256 MiB"}


def fmt_ns(v):
    if v is None:
        return "-"
    if v >= 100000:
        return f"{v / 1000:.0f} us"
    if v >= 10000:
        return f"{v / 1000:.1f} us"
    return f"{v:.0f} ns"


def ratio(a, b):
    return f"{a / b:.1f}x" if a and b else "-"


def bench_env(args, preload, env_extra):
    """The environment of one benchmark process: ours (args.preload) only when `preload`, the
    fake's libraries first when args.libdir is set, then the configuration's own variables."""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if args.libdir:
        env["LD_LIBRARY_PATH"] = args.libdir + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    if preload:
        env["LD_PRELOAD"] = os.path.abspath(args.preload)
    env.update(env_extra or {})
    return env


def run_config(label, exe, api, preload, env_extra, args, log_dir):
    env = bench_env(args, preload, env_extra)
    cmd = [exe, "--api", api, "--label", label, "--warmup-ms", str(args.warmup_ms)] + (["--quick"] if args.quick else [])
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
        out, err, rc = p.stdout, p.stderr, p.returncode
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err, rc = f"timed out after {args.timeout} s", 124
    if log_dir:
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", label)
        with open(os.path.join(log_dir, f"bench_alloc.{name}.log"), "w") as f:
            f.write(f"$ {' '.join(f'{k}={v}' for k, v in env_extra.items())} "
                    f"{'LD_PRELOAD=' + args.preload + ' ' if preload else ''}{' '.join(cmd)}\n"
                    f"{out}--- stderr ---\n{err}--- exit {rc}\n")
    sys.stdout.write(out.split("\n{", 1)[0].rstrip("\n") + "\n\n")
    res = None
    for line in out.splitlines():
        if line.startswith("{"):
            res = json.loads(line)
    if rc != 0 or res is None:
        sys.stdout.write(f"{label}: FAILED (exit {rc})\n{err[-2000:]}\n\n")
        return {"label": label, "failed": True, "exit": rc}
    m = SERVED.search(out)
    res["served"] = int(m.group(1)) if m else None
    res["preload"] = preload
    return res


# The path-by-size table: one row per path, sizes across. (row name, configuration label)
PATH_ROWS = [("raw cudaMalloc+cudaFree", "raw malloc"),
              ("raw cudaMallocAsync+cudaFreeAsync", "raw async"),
              ("ours default, runtime hooks", "ours default"),
              ("ours default, driver hooks (static)", "static ours default"),
              ("ours immediate_reuse, runtime hooks", "ours immediate"),
              ("ours async pair, runtime hooks", "ours async"),
              ("ours async pair, driver hooks (static)", "static ours async"),
              ("ours expandable_segments, runtime hooks", "ours expandable"),
              ("ours compact_segments, runtime hooks", "ours compact")]
TABLE_SIZES = [512, 1 << 20, 20 << 20, 256 << 20]


def path_table(title, med, mixed):
    """Prints the path-by-size table from the same results; a configuration not run shows '-'."""
    print(f"\n{title}, path by size: median ns per pair (mixed: ns/op)")
    print(f"{'path':<40}" + "".join(f"{SIZE_NAMES[s]:>10}" for s in TABLE_SIZES) + f"{'mixed':>10}")
    for name, label in PATH_ROWS:
        print(f"{name:<40}" + "".join(f"{fmt_ns(med(label, s)):>10}" for s in TABLE_SIZES)
              + f"{fmt_ns(mixed(label)):>10}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preload", required=True)
    ap.add_argument("--exe", required=True)
    ap.add_argument("--exe-static")
    ap.add_argument("--libdir")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--warmup-ms", type=int, default=500,
                    help="untimed 64 KiB pairs before the sizes (bench_alloc --warmup-ms; its rate is logged)")
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--log-dir")
    ap.add_argument("--json-out")
    ap.add_argument("--title", default="bench_alloc")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--skip", action="append", default=[],
                    help="leave out a configuration by its label (the fake's stream-ordered free runs on a "
                         "worker thread, so a raw cudaMallocAsync loop there outruns it and fails)")
    args = ap.parse_args()
    if not 1 <= args.rounds <= 100:
        ap.error(f"--rounds {args.rounds}: expected 1 to 100")
    if args.log_dir:
        os.makedirs(args.log_dir, exist_ok=True)
    sys.stdout.reconfigure(line_buffering=True)

    imm = {"CCI_ALLOC_CONF": "immediate_reuse:True"}
    plan = [("raw malloc", args.exe, "malloc", False, {}),
            ("raw async", args.exe, "async", False, {}),
            ("ours default", args.exe, "malloc", True, {}),
            ("ours immediate", args.exe, "malloc", True, imm),
            ("ours async", args.exe, "async", True, {}),
            # The VMM modes' target: a cached pair costs what it costs with ordinary segments
            # (the driver's VMM calls happen only when the pool grows or shrinks).
            ("ours expandable", args.exe, "malloc", True, {"CCI_ALLOC_CONF": "expandable_segments:True"}),
            ("ours compact", args.exe, "malloc", True, {"CCI_ALLOC_CONF": "compact_segments:True"})]
    if args.exe_static:
        plan += [("static raw malloc", args.exe_static, "malloc", False, {}),
                 ("static raw async", args.exe_static, "async", False, {}),
                 ("static ours default", args.exe_static, "malloc", True, {}),
                 ("static ours async", args.exe_static, "async", True, {})]
    plan = [p for p in plan if p[0] not in args.skip]
    runs = {p[0]: [] for p in plan}
    for r in range(args.rounds):
        order = plan[r % len(plan):] + plan[:r % len(plan)] if plan else []
        if args.rounds > 1:
            print(f"round {r + 1} of {args.rounds}: {', '.join(p[0] for p in order)}\n")
        for label, exe, api, pre, env in order:
            log_label = label if args.rounds == 1 else f"{label} r{r + 1}"
            runs[label].append(run_config(log_label, exe, api, pre, env, args, args.log_dir))
    # A configuration that failed in any round counts as failed; otherwise its first round's
    # result stands for it in the JSON, with every round's figures beside it.
    results = {}
    for label, rs in runs.items():
        bad = next((x for x in rs if x.get("failed")), None)
        results[label] = dict(bad, label=label) if bad else dict(rs[0], rounds=rs)

    problems = []
    for label, r in results.items():
        if r.get("failed"):
            problems.append(f"{label}: failed")
        elif r["preload"] and not label.startswith("static") and not r.get("served"):
            problems.append(f"{label}: the preload served no allocation (not intercepted)")

    def over_rounds(label, pick):
        """The figure `pick` takes from one process's result, for every round (None: failed)."""
        r = results.get(label)
        if not r or r.get("failed"):
            return None
        vals = [pick(x) for x in r["rounds"]]
        return None if any(v is None for v in vals) else sorted(vals)

    def middle(vals):
        if not vals:
            return None
        n = len(vals)
        return vals[n // 2] if n % 2 else (vals[n // 2 - 1] + vals[n // 2]) / 2

    def pick_size(size):
        return lambda x: next((s["median_ns"] for s in x["sizes"] if s["bytes"] == size), None)

    def med(label, size):
        return middle(over_rounds(label, pick_size(size)))

    def mixed(label):
        return middle(over_rounds(label, lambda x: x["mixed_warm_ns_per_op"]))

    def spread(label, size):
        vals = over_rounds(label, pick_size(size) if size else lambda x: x["mixed_warm_ns_per_op"])
        return (vals[0], vals[-1]) if vals and len(vals) > 1 else None

    cols = ["raw malloc", "raw async", "ours default", "ours immediate", "ours async"]
    print(f"{args.title}: median ns per alloc+free pair (mixed: ns per op, best warm pass)")
    print(f"{'size':<9}" + "".join(f"{c:>16}" for c in cols)
          + f"{'malloc/ours':>13}{'async/ours':>12}{'async/imm':>11}")
    rows = [(SIZE_NAMES[s], lambda c, s=s: med(c, s)) for s in sorted(SIZE_NAMES)] + [("mixed", mixed)]
    summary = []
    for name, get in rows:
        v = {c: get(c) for c in cols}
        print(f"{name:<9}" + "".join(f"{fmt_ns(v[c]):>16}" for c in cols)
              + f"{ratio(v['raw malloc'], v['ours default']):>13}"
              + f"{ratio(v['raw async'], v['ours default']):>12}"
              + f"{ratio(v['raw async'], v['ours immediate']):>11}")
        # Every configuration's median over the rounds, the columns not printed here included
        # (gpu_report.py reads its targets from this table).
        summary.append({"row": name, **{label: get(label) for label in results}})
    if args.exe_static:
        st = {c: results.get(c) for c in ("static raw malloc", "static raw async", "static ours default")}
        served = st["static ours default"].get("served") if st["static ours default"] else None
        print(f"static-cudart build: raw malloc 1 MiB {fmt_ns(med('static raw malloc', 1 << 20))}, "
              f"raw async {fmt_ns(med('static raw async', 1 << 20))}, under the preload "
              f"{fmt_ns(med('static ours default', 1 << 20))} (preload served {served} allocations)")
    path_table(args.title, med, mixed)
    if args.rounds > 1:
        print(f"\n{args.title}: range over the {args.rounds} rounds (min-max of each process's median; "
              f"mixed: best warm pass)")
        print(f"{'path':<40}" + "".join(f"{SIZE_NAMES[s]:>16}" for s in TABLE_SIZES) + f"{'mixed':>16}")
        for name, label in PATH_ROWS:
            cells = []
            for size in TABLE_SIZES + [None]:
                sp = spread(label, size)
                cells.append(f"{fmt_ns(sp[0])}-{fmt_ns(sp[1])}" if sp else "-")
            print(f"{name:<40}" + "".join(f"{c:>16}" for c in cells))
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"title": args.title, "results": results, "table": summary, "problems": problems}, f,
                      indent=1)
    for p in problems:
        print(f"PROBLEM: {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
