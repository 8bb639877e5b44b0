#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The pinned pipeline's table (scripts/gpu-pinned.sh): one row per configuration, from the JSON
line bench_pinned prints last in each log (LOG_DIR/CONFIG-rROUND.log), every configuration's
median time per batch against the reference's over the rounds, judged with repeat_stats'
interval (target: per-batch pinning under the preload within 5 % of pinning up front).

  pinned_table.py LOG_DIR [--reference raw-upfront] [--judge ours-per-batch] [--target 0.05]

Exit status 1 when a log says its data arrived corrupted (a buffer handed out too early) or the
judged configuration has no runs; the verdict itself is printed, never turned into a status.
"""
import argparse
import glob
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import repeat_stats  # noqa: E402


def read_runs(log_dir):
    """{config: {round: median us per batch}}, and the logs whose data check failed."""
    runs, corrupt = {}, []
    for path in sorted(glob.glob(os.path.join(log_dir, "*-r*.log"))):
        m = re.match(r"(.+)-r(\d+)\.log$", os.path.basename(path))
        if not m:
            continue
        last = None
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("{"):
                    last = line
        if last is None:
            continue
        try:
            rec = json.loads(last)
        except ValueError:
            continue
        if rec.get("data_ok") is not True:
            corrupt.append(path)
        runs.setdefault(m.group(1), {})[int(m.group(2))] = rec["median_us_per_batch"]
    return runs, corrupt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("log_dir")
    ap.add_argument("--reference", default="raw-upfront")
    ap.add_argument("--judge", default="ours-per-batch")
    ap.add_argument("--target", type=float, default=0.05)
    a = ap.parse_args()
    runs, corrupt = read_runs(a.log_dir)
    ref = runs.get(a.reference, {})
    print(f"pinned pipeline: median us per batch, against {a.reference} (target for {a.judge}: "
          f"within {a.target * 100:.0f} %)")
    print(f"{'configuration':28} {'runs':>4} {'median us':>10} {'x ref':>7}  verdict")
    for config in sorted(runs):
        fig = repeat_stats.time_figures(runs[config], ref, target=a.target)
        x = f"{fig['x_medians']:.3f}" if fig["x_medians"] else "-"
        verdict = fig["verdict"] if config != a.reference else "(reference)"
        if fig["x_interval"] and config != a.reference:
            verdict += f" [95 % interval {fig['x_interval'][0]:.3f}-{fig['x_interval'][1]:.3f}]"
        print(f"{config:28} {fig['runs']:>4} {fig['median']:>10.1f} {x:>7}  {verdict}")
    for path in corrupt:
        print(f"DATA CORRUPTED: {path}")
    if corrupt or a.judge not in runs:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
