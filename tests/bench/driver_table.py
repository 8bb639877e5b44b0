#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Where a driver-level pair's time goes: our driver hooks called directly (a driver-API program's
cuMemAlloc_v2+cuMemFree_v2, cuMemAllocAsync+cuMemFreeAsync) against the same hooks reached through a
static cudart's cudaMalloc+cudaFree / cudaMallocAsync+cudaFreeAsync, one thread, per size.

  driver_table.py --exe BENCH_THREADS_SHARED --exe-static BENCH_THREADS_STATIC --preload LIB [--rounds R]

The difference between the two rows of a size is the static cudart's own code (and the driver calls
it makes itself): time the preload cannot remove, since it never sees those calls.
Every figure is the median over --rounds processes (each one cell of --budget-ms after
--warmup-ms of untimed pairs); the range follows in brackets.
"""
import argparse
import json
import statistics
import sys

from thread_table import run_once

SIZES = [512, 1 << 20, 20 << 20, 256 << 20]
# (row, which executable, bench_threads --api, extra arguments)
ROWS = [("static cudart cudaMalloc+cudaFree", "static", "malloc", ["--no-streams"]),
        ("driver API cuMemAlloc_v2+cuMemFree_v2", "shared", "driver", ["--no-streams"]),
        ("static cudart cudaMallocAsync+FreeAsync", "static", "async", []),
        ("driver API cuMemAllocAsync+FreeAsync", "shared", "driver-async", [])]


def size_name(n):
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n} B"


def one(args, exe, api, size, extra):
    """ns per pair of one process (thread_table.run_once), or None (the reason is printed)."""
    r = run_once(args, exe, api, [1], True, {}, f"{api} {size}", ["--size", str(size)] + extra)
    if "failed" in r:
        print(f"  {api} {size}: {r['failed']}", file=sys.stderr)
        return None
    return 1e9 / r["cells"][1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--exe", required=True, help="bench_threads built -cudart shared")
    ap.add_argument("--exe-static", required=True, help="bench_threads built with the static cudart")
    ap.add_argument("--preload", required=True)
    ap.add_argument("--libdir")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--budget-ms", type=int, default=200)
    ap.add_argument("--warmup-ms", type=int, default=300)
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--log-dir", help="one log per process (bench_threads.*.log)")
    ap.add_argument("--json-out")
    args = ap.parse_args()
    exes = {"shared": args.exe, "static": args.exe_static}
    got = {(r, s): [] for r, *_ in ROWS for s in SIZES}
    for _ in range(args.rounds):
        for row, which, api, extra in ROWS:
            for size in SIZES:
                v = one(args, exes[which], api, size, extra)
                if v is not None:
                    got[(row, size)].append(v)
    print(f"driver-level pairs through our hooks, one thread, ns per pair: median of {args.rounds} processes [range]")
    print(f"{'path':<42}" + "".join(f"{size_name(s):>20}" for s in SIZES))
    for row, *_ in ROWS:
        cells = []
        for s in SIZES:
            v = got[(row, s)]
            cells.append(f"{statistics.median(v):.0f} [{min(v):.0f}-{max(v):.0f}]" if v else "-")
        print(f"{row:<42}" + "".join(f"{c:>20}" for c in cells))
    print("static cudart row minus driver API row: the static cudart's own share (out of the preload's reach)")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({f"{r}|{s}": v for (r, s), v in got.items()}, f, indent=1)
    return 0 if all(got.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
