#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Run bench_threads in its configurations, side by side in one run, and print one table.

Offline (the fake CUDA; meson test --benchmark):
  thread_table.py --exe BENCH_THREADS_FAKE --core-exe BENCH_THREADS_CORE --preload LIB --libdir DIR
  For each call pair (cudaMalloc+cudaFree, the same in immediate_reuse, cudaMallocAsync+cudaFreeAsync
  on the thread's stream, cuMemAlloc_v2+cuMemFree_v2) and each thread count: the fake's raw calls,
  the core alone doing what the hooks ask of it, and the hook path over the fake; hook/core last.

On the GPU (scripts/gpu-bench.sh):
  thread_table.py --gpu --exe BENCH_THREADS_SHARED [--exe-static BENCH_THREADS_STATIC] --preload LIB
  The GPU thread table: pairs/s at 1, 8 and 16 threads with the ratio to one thread.

ns/pair is per thread (threads / pairs per second): what one thread waits for a pair, its share of
the CPUs included (16 threads on 2 CPUs wait at least 8x longer even with a perfect allocator).
Every cell runs for a time budget, not a fixed count, so the whole table takes a known time. Each
cell's threads first run --warmup-ms of untimed pairs, so that what a process pays once (the
what-if history's fill under the preload) is in no cell: ratios compare steady states.
"""
import argparse
import json
import os
import re
import subprocess
import sys

from alloc_table import bench_env  # the same process environment as the per-size table

SERVED = re.compile(r"^ccinterpose: loaded, served (\d+) allocations", re.M)
IMMEDIATE = {"CCI_ALLOC_CONF": "immediate_reuse:True"}


def parse_output(out):
    """bench_threads' JSON line as {threads: pairs/s}, and how many allocations the preload served
    (None: no preload, or a build without the probe)."""
    cells = None
    for line in out.splitlines():
        if line.startswith("{"):
            cells = {c["threads"]: c["pairs_per_s"] for c in json.loads(line)["cells"]}
    m = SERVED.search(out)
    return cells, int(m.group(1)) if m else None


def run(args, exe, api, threads, preload=False, env_extra=None, label=""):
    """--repeat processes; per thread count the best of them (other programs on the machine only ever
    slow a cell down). Returns {"cells": {threads: pairs/s}, "served": n} or {"failed": reason}."""
    best = None
    for _ in range(args.repeat):
        r = run_once(args, exe, api, threads, preload, env_extra, label)
        if "failed" in r:
            return r
        if best is None:
            best = r
        else:
            best["cells"] = {t: max(v, r["cells"].get(t, 0)) for t, v in best["cells"].items()}
    return best


def run_once(args, exe, api, threads, preload, env_extra, label, extra=()):
    """One bench_threads process (`extra`: more of its options, e.g. --size). Returns as run()."""
    env = bench_env(args, preload, env_extra)
    cmd = [exe, "--api", api, "--threads", ",".join(map(str, threads)), "--budget-ms", str(args.budget_ms),
           "--warmup-ms", str(args.warmup_ms), "--label", label] + list(extra)
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
        out, err, rc = p.stdout, p.stderr, p.returncode
    except subprocess.TimeoutExpired:
        out, err, rc = "", f"timed out after {args.timeout} s", 124
    if args.log_dir:
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{label or api}")
        with open(os.path.join(args.log_dir, f"bench_threads.{name}.log"), "w") as f:
            f.write(f"$ {' '.join(f'{k}={v}' for k, v in (env_extra or {}).items())} "
                    f"{'LD_PRELOAD=' + args.preload + ' ' if preload else ''}{' '.join(cmd)}\n"
                    f"{out}--- stderr ---\n{err}--- exit {rc}\n")
    cells, served = parse_output(out)
    if rc != 0 or cells is None:
        return {"failed": f"exit {rc}: {err.strip().splitlines()[-1] if err.strip() else 'no output'}"}
    if preload and not served:
        return {"failed": "the preload served no allocation (not intercepted)"}
    return {"cells": cells, "served": served}


def rate_text(v):
    if v is None:
        return "-"
    return f"{v / 1e6:.2f} M" if v >= 1e5 else f"{v / 1e3:.1f} k"


def ns_text(v, threads):
    return f"{1e9 * threads / v:.0f}" if v else "-"


def cell(res, threads):
    return None if not res or "cells" not in res else res["cells"].get(threads)


def offline_table(args):
    threads = [1, 2, 4, 8, 16]
    # (row name, api, hook environment, the core variant the hooks' free mode corresponds to)
    rows = [("cudaMalloc+cudaFree", "malloc", {}, "core-fenced"),
            ("  immediate_reuse", "malloc", IMMEDIATE, "core-now"),
            ("cudaMallocAsync+FreeAsync", "async", {}, "core-now"),
            ("cuMemAlloc_v2+cuMemFree_v2", "driver", {}, "core-fenced")]
    core = {v: run(args, args.core_exe, v, threads, label=f"core {v}") for v in ("core-fenced", "core-now")}
    results = []
    for name, api, env, core_variant in rows:
        raw = run(args, args.exe, api, threads, label=f"fake raw {api}") if not env else None
        hook = run(args, args.exe, api, threads, preload=True, env_extra=env, label=f"hook {name.strip()}")
        results.append((name, raw, core[core_variant], hook, core_variant))

    print(f"{args.title}: 64 KiB pairs, one non-blocking stream per thread, best of {args.repeat} x "
          f"{args.budget_ms} ms a cell; pairs/s of all threads, ns per pair per thread")
    hdr = (f"{'call pair':<27}{'thr':>4}{'fake raw':>10}{'ns':>8}{'core':>10}{'ns':>7}{'hook':>10}{'ns':>8}"
           f"{'hook/core':>10}")
    print(hdr)
    problems = []
    for name, raw, core_res, hook, core_variant in results:
        for t in threads:
            r, c, h = cell(raw, t), cell(core_res, t), cell(hook, t)
            ratio = f"{c / h:.2f}x" if c and h else "-"
            print(f"{name if t == 1 else '':<27}{t:>4}{rate_text(r) if raw else '(above)':>10}"
                  f"{ns_text(r, t) if raw else '':>8}{rate_text(c):>10}{ns_text(c, t):>7}{rate_text(h):>10}"
                  f"{ns_text(h, t):>8}{ratio:>10}")
        for what, res in (("fake raw", raw), ("core " + core_variant, core_res), ("hook", hook)):
            if res and "failed" in res:
                problems.append(f"{name.strip()}, {what}: {res['failed']}")
    print("core: the allocator core on the simulated device in the free mode the hooks use for that row "
          "(core-fenced: one stream key for all threads, fences that pass at once; core-now: the thread's own "
          "key). hook/core = core pairs/s / hook pairs/s (the offline target: <= 1.5x).")
    return results, problems


def gpu_table(args):
    threads = [1, 8, 16]
    cols = [("CUDA cudaMallocAsync", args.exe, "async", False, {}),
            ("CUDA cudaMalloc", args.exe, "malloc", False, {}),
            ("ours default cudaMalloc", args.exe, "malloc", True, {}),
            ("ours immediate_reuse", args.exe, "malloc", True, IMMEDIATE),
            ("ours async", args.exe, "async", True, {})]
    if args.exe_static:
        cols.append(("ours default, driver hooks", args.exe_static, "malloc", True, {}))
    res = [(name, run(args, exe, api, threads, preload=pre, env_extra=env, label=name))
           for name, exe, api, pre, env in cols]
    print(f"{args.title}: 64 KiB pairs, each thread on its own non-blocking stream, best of {args.repeat} x "
          f"{args.budget_ms} ms a cell; "
          f"pairs per second of all threads (ratio to one thread)")
    print(f"{'threads':<8}" + "".join(f"{name:>28}" for name, _ in res))
    for t in threads:
        line = f"{t:<8}"
        for _, r in res:
            v, one = cell(r, t), cell(r, 1)
            line += f"{(rate_text(v) + (f' ({v / one:.2f}x)' if v and one and t != 1 else '')) if v else '-':>28}"
        print(line)
    problems = [f"{name}: {r['failed']}" for name, r in res if "failed" in r]
    return res, problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--exe", required=True, help="bench_threads built against a CUDA (the fake, or nvcc)")
    ap.add_argument("--core-exe", help="bench_threads built with -DBENCH_THREADS_CORE (offline table)")
    ap.add_argument("--exe-static", help="the static-cudart build (--gpu: the driver hooks' column)")
    ap.add_argument("--preload", required=True)
    ap.add_argument("--libdir")
    ap.add_argument("--gpu", action="store_true", help="print the GPU thread table instead")
    ap.add_argument("--budget-ms", type=int, default=200, help="per cell and process")
    ap.add_argument("--warmup-ms", type=int, default=300,
                    help="untimed pairs in each cell's threads before it is timed (bench_threads --warmup-ms)")
    ap.add_argument("--repeat", type=int, default=2, help="processes per configuration, best cell kept")
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--log-dir")
    ap.add_argument("--json-out")
    ap.add_argument("--title", default="bench_threads")
    args = ap.parse_args()
    if not args.gpu and not args.core_exe:
        ap.error("the offline table needs --core-exe")
    if args.log_dir:
        os.makedirs(args.log_dir, exist_ok=True)
    sys.stdout.reconfigure(line_buffering=True)
    results, problems = gpu_table(args) if args.gpu else offline_table(args)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"title": args.title, "results": results, "problems": problems}, f, indent=1, default=str)
    for p in problems:
        print(f"PROBLEM: {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
