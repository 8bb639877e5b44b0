#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The offline part of scripts/gpu-bench.sh: its table printers (tests/bench/alloc_table.py,
tests/bench/thread_table.py --gpu and tests/bench/driver_table.py) run against the fake CUDA build, in the layout the GPU run uses,
and every row and cell of the hook fast path's tables must come out filled.

  test_gpu_tables.py ALLOC_TABLE THREAD_TABLE BENCH_ALLOC BENCH_THREADS PRELOAD FAKE_LIB_DIR

The fake has no static cudart: the runtime build stands in for the static one, which exercises the
same collection and printing (the driver hooks' own figures are the GPU's to give). The fake's raw
cudaMallocAsync loop in bench_alloc outruns its stream workers, so that configuration is skipped
and its row must show '-'.
"""
import os
import re
import subprocess
import sys

alloc_table, thread_table, bench_alloc, bench_threads, preload, libdir = sys.argv[1:7]
env = dict(os.environ, FAKECUDA_CAPACITY="16G", CCI_REPORT="off")
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


def run(cmd):
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        print(p.stdout[-4000:], p.stderr[-4000:], sep="\n")
    else:
        print(p.stdout[-6000:])  # the tables, for the log
    check(p.returncode == 0, f"{os.path.basename(cmd[1])} exited {p.returncode}")
    return p.stdout


CELL = r"(\d+(?:\.\d+)? (?:ns|us)|-)"

# ---- the per-size table, one row per path ----------------------------------------------------
out = run([sys.executable, alloc_table, "--preload", preload, "--libdir", libdir, "--exe", bench_alloc,
           "--exe-static", bench_alloc, "--quick", "--title", "fake", "--skip", "raw async",
           "--skip", "static raw async", "--rounds", "2", "--warmup-ms", "20"])
# --rounds 2: every configuration twice, in a rotated order, and a table of each figure's range.
check(re.search(r"^round 2 of 2: ", out, re.M) is not None, "alloc_table --rounds 2 ran no second round")
ranges = out.split("range over the 2 rounds", 1)
check(len(ranges) == 2, "alloc_table --rounds 2 printed no range table")
RANGE = r"(\d+(?:\.\d+)? (?:ns|us)-\d+(?:\.\d+)? (?:ns|us)|-)"
ranged = {}
for line in (ranges[1] if len(ranges) == 2 else "").splitlines()[2:]:
    m = re.match(r"(\S.*?)\s{2,}" + r"\s+".join([RANGE] * 5) + r"\s*$", line)
    if m:
        ranged[m.group(1)] = m.groups()[1:]
check(all(c != "-" for c in ranged.get("ours default, runtime hooks", ["-"])),
      f"range table: ours default's cells not all filled: {ranged.get('ours default, runtime hooks')}")
check(all(c == "-" for c in ranged.get("raw cudaMallocAsync+cudaFreeAsync", ["x"])),
      "range table: the skipped configuration must show -")
layout = out.split("path by size", 1)
check(len(layout) == 2, "alloc_table printed no path-by-size table")
rows = {}
for line in (layout[1] if len(layout) == 2 else "").splitlines()[1:]:
    m = re.match(r"(\S.*?)\s{2,}" + r"\s+".join([CELL] * 5) + r"\s*$", line)
    if m:
        rows[m.group(1)] = m.groups()[1:]
expected = ["raw cudaMalloc+cudaFree", "raw cudaMallocAsync+cudaFreeAsync", "ours default, runtime hooks",
            "ours default, driver hooks (static)", "ours immediate_reuse, runtime hooks",
            "ours async pair, runtime hooks", "ours async pair, driver hooks (static)"]
check(header := re.search(r"^path\s+512 B\s+1 MiB\s+20 MiB\s+256 MiB\s+mixed$", out, re.M),
      "the path-by-size table's header is not path, 512 B, 1 MiB, 20 MiB, 256 MiB, mixed")
for name in expected:
    check(name in rows, f"row missing or malformed: {name}")
for name, cells in rows.items():
    skipped = name == "raw cudaMallocAsync+cudaFreeAsync"
    check(all(c == "-" for c in cells) if skipped else all(c != "-" for c in cells),
          f"{name}: cells {cells} ({'a skipped configuration must show -' if skipped else 'every cell filled'})")

# ---- the thread table, --gpu layout ------------------------------------------------------------
out = run([sys.executable, thread_table, "--gpu", "--exe", bench_threads, "--exe-static", bench_threads,
           "--preload", preload, "--libdir", libdir, "--budget-ms", "40", "--warmup-ms", "20", "--repeat", "1",
           "--title", "fake"])
lines = out.splitlines()
head = next((l for l in lines if l.startswith("threads ")), "")
for col in ("CUDA cudaMallocAsync", "ours default cudaMalloc", "ours immediate_reuse", "ours async",
            "ours default, driver hooks"):
    check(col in head, f"thread table: column {col!r} missing")
RATE = r"\d+\.\d+ [Mk]"
for t in (1, 8, 16):
    line = next((l for l in lines if re.match(rf"{t}\s", l)), None)
    check(line is not None, f"thread table: no row for {t} threads")
    if line is None:
        continue
    cells = re.findall(RATE + (r" \((\d+\.\d\d)x\)" if t != 1 else ""), line)
    check(len(cells) == 6, f"thread table, {t} threads: {len(cells)} of 6 cells filled: {line!r}")
    if t != 1:
        check(all(float(c) > 0 for c in cells), f"thread table, {t} threads: a ratio to one thread is 0")
check("PROBLEM" not in out, "thread table reported a problem")

# ---- the driver-level table: every path and size filled -----------------------------------------
driver_table = os.path.join(os.path.dirname(thread_table), "driver_table.py")
out = run([sys.executable, driver_table, "--exe", bench_threads, "--exe-static", bench_threads, "--preload", preload,
           "--libdir", libdir, "--rounds", "1", "--budget-ms", "30", "--warmup-ms", "10"])
for row in ("static cudart cudaMalloc+cudaFree", "driver API cuMemAlloc_v2+cuMemFree_v2",
            "static cudart cudaMallocAsync+FreeAsync", "driver API cuMemAllocAsync+FreeAsync"):
    line = next((l for l in out.splitlines() if l.startswith(row)), "")
    cells = re.findall(r"\d+ \[\d+-\d+\]", line)
    check(len(cells) == 4, f"driver table, {row}: {len(cells)} of 4 sizes filled: {line!r}")

for f in failures:
    print("FAIL:", f)
sys.exit(1 if failures else 0)
