#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Replay throughput: ccreplay on the shared PyTorch traces, events per second.

  bench_replay.py CCREPLAY SNAPSHOT2TRACE TRACES_DIR

Each *.pickle.xz snapshot in TRACES_DIR is replayed as it is (ccreplay reads PyTorch snapshots)
and as a text trace made by scripts/snapshot2trace.py (conversion not timed), five times each;
the best run counts (noise only ever slows a run). Two figures: the replay itself as ccreplay
times it (replay_seconds), and the whole process including reading and decompressing the file.
Prints "skipped" and exits 0 when the directory holds no trace.
"""
import glob
import json
import os
import subprocess
import sys
import tempfile
import time


def replay(ccreplay, path):
    """The fastest of five runs, or the error text."""
    best = None
    for _ in range(5):
        t0 = time.perf_counter()
        p = subprocess.run([ccreplay, "--json", path], capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if p.returncode != 0:
            return p.stderr.strip() or f"exit {p.returncode}"
        r = json.loads(p.stdout)
        r["wall"] = wall
        if best is None or r["replay_seconds"] < best["replay_seconds"]:
            best = r
    return best


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    ccreplay, converter, traces = sys.argv[1:]
    snaps = sorted(glob.glob(os.path.join(traces, "*.pickle.xz")))
    if not snaps:
        print(f"replay throughput: skipped (no *.pickle.xz in {traces})")
        return 0
    print("Replay throughput (ccreplay --json, default configuration, best of 5 runs)")
    print(f"{'trace':<10}{'input':<10}{'events':>9}{'replay s':>10}{'M events/s':>12}{'incl. reading':>15}"
          f"{'peak reserved':>15}")
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for snap in snaps:
            name = os.path.basename(snap).split(".")[0]
            inputs = [("snapshot", snap)]
            trace = os.path.join(tmp, name + ".trace")
            conv = subprocess.run([sys.executable, converter, snap, "-o", trace], capture_output=True, text=True)
            if conv.returncode == 0:
                inputs.append(("text", trace))
            else:
                print(f"{name:<10}conversion to a text trace failed: {conv.stderr.strip()}")
                failed += 1
            for kind, path in inputs:
                best = replay(ccreplay, path)
                if isinstance(best, str):
                    print(f"{name:<10}{kind:<10}ccreplay failed: {best}")
                    failed += 1
                    continue
                ev, secs = best["events"], best["replay_seconds"]
                print(f"{name:<10}{kind:<10}{ev:>9}{secs:>10.4f}{ev / secs / 1e6 if secs else 0:>12.1f}"
                      f"{ev / best['wall'] / 1e6:>15.1f}{best['peak_reserved_bytes'] / 2**20:>11.1f} MiB")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
