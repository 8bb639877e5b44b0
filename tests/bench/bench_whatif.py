#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Exit-replay benchmark (the target: a 400 000-event history replayed at exit within the
default 2 s bound on this machine's cores). Runs tests/bench/whatif_workload under the preload on
the fake CUDA with a JSON exit report, and prints from the report's what_if_replay object the
events replayed, the replay's wall clock and how many of the grid's configurations finished
within the bound; also the whole exit (process end minus the workload's own run, measured with
the replay off).

Usage: bench_whatif.py PROGRAM [EVENTS...]   (LD_PRELOAD / LD_LIBRARY_PATH come from the env)"""
import json
import os
import resource
import subprocess
import sys
import tempfile
import time


def run(prog, events, extra):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "r.json")
        env = dict(os.environ, CCI_REPORT=path, **extra)
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.monotonic()
        p = subprocess.run([prog, str(events)], env=env, capture_output=True, text=True, timeout=300)
        wall = time.monotonic() - t0
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
        if p.returncode != 0:
            sys.exit(f"bench_whatif: {prog} failed ({p.returncode}): {p.stderr.strip()[-400:]}")
        with open(path) as f:
            return wall, cpu, json.load(f)["devices"][0]["what_if_replay"]


def main():
    prog = sys.argv[1]
    sizes = [int(a) for a in sys.argv[2:]] or [400000]
    print(f"exit replay of the allocation history on {os.cpu_count()} CPU(s) (fake CUDA; bound "
          f"CCI_WHATIF_SECONDS={os.environ.get('CCI_WHATIF_SECONDS', '2 (default)')})")
    print("(replay s: the report's wall clock for the grid; CPU s: the whole grid's CPU time, from a run\n"
          " without the bound, which divided by the cores is the wall clock on an idle machine; the\n"
          " machine is shared, so wall clock here depends on the load)")
    print(f"{'events':>9}  {'replay s':>8}  {'bound s':>7}  {'configs done':>12}  {'exit cost s':>11}  "
          f"{'grid CPU s':>10}  cut short")
    for n in sizes:
        off_wall, off_cpu, _ = run(prog, n, {"CCI_WHATIF_SECONDS": "0"})
        wall, _, w = run(prog, n, {})
        _, full_cpu, _ = run(prog, n, {"CCI_WHATIF_SECONDS": "600"})
        done, planned = w["configurations_replayed"], w["configurations_planned"]
        print(f"{w['events']:>9}  {w['seconds']:>8.2f}  {w['bound_seconds']:>7.2f}  {done:>5} of {planned:<4}  "
              f"{wall - off_wall:>11.2f}  {full_cpu - off_cpu:>10.2f}  {'yes' if done < planned else 'no'}")
        # A few events of the run may not be in the history (recorded before it attached): the
        # figure printed is what was replayed; far fewer means the workload is not what it says.
        if abs(w["events"] - n) > n // 100:
            sys.exit(f"bench_whatif: the history holds {w['events']} events, not about {n}")


if __name__ == "__main__":
    main()
