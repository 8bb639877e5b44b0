#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""compact_segments:True in steady state, in replay: on a long repeating workload whose sizes
change from step to step (the seedfrag pattern, written by seedfrag_trace.py), the second half of
the run makes no VMM call at all (plain frees, and fenced frees on a device that keeps up), and
reserved stays under PyTorch's expandable segments on that
workload (242 MiB on an H100), with and without fenced frees.

usage: test_compact_steady.py CCREPLAY SEEDFRAG_TRACE_PY
"""
import json
import os
import subprocess
import sys
import tempfile

MiB = 1 << 20
PYTORCH_EXPANDABLE_MIB = 242
HALF = 120  # steps; ten periods of the pattern (12 steps)

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"FAIL: {what}")


def replay(trace, *extra):
    p = subprocess.run([CCREPLAY, "--json", "--conf", "compact_segments:True", *extra, trace],
                       capture_output=True, text=True, timeout=240)
    check(p.returncode == 0, f"ccreplay {extra} {trace}: exit {p.returncode}: {p.stderr.strip()}")
    return json.loads(p.stdout) if p.returncode == 0 else None


def main():
    with tempfile.TemporaryDirectory() as tmp:
        traces = {}
        for steps in (HALF, 2 * HALF):
            traces[steps] = os.path.join(tmp, f"seedfrag{steps}.trace")
            subprocess.run([sys.executable, GEN, str(steps), traces[steps]], check=True, timeout=60)
        for lag in (None, "0", "64"):  # None: plain frees, as the preload makes before any stream exists
            extra = ("--fenced-lag", lag) if lag else ()
            name = f"lag {lag}" if lag else "plain frees"
            half, full = replay(traces[HALF], *extra), replay(traces[2 * HALF], *extra)
            if not half or not full:
                continue
            peak = full["peak_reserved_bytes"]
            print(f"{name}: peak reserved {peak / MiB:.0f} MiB, allocated "
                  f"{full['peak_allocated_bytes'] / MiB:.0f} MiB, VMM calls {full['vmm_calls']}")
            check(full["peak_allocated_bytes"] == 160 * MiB, f"{name}: peak allocated is ten 16 MiB tensors")
            check(peak <= PYTORCH_EXPANDABLE_MIB * MiB,
                  f"{name}: peak reserved {peak / MiB:.0f} MiB above PyTorch expandable's {PYTORCH_EXPANDABLE_MIB}")
            check(full["num_ooms"] == 0, f"{name}: an OOM")
            if lag == "64":
                continue  # with fences lagging, staying under 242 MiB still needs some moves
            h, f = half["vmm_calls"], full["vmm_calls"]
            moved = {k: f[k] - h[k] for k in ("page_creates", "maps", "set_access", "unmaps", "page_releases")}
            check(not any(moved.values()), f"{name}: steps {HALF}-{2 * HALF} made VMM calls: {moved}")
    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.stderr.write(__doc__)
        sys.exit(2)
    CCREPLAY, GEN = sys.argv[1], sys.argv[2]
    sys.exit(main())
