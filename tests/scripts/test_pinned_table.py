#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""tests/bench/pinned_table.py on logs written the way scripts/gpu-pinned.sh names them: the
ratio against the reference, the verdict for the judged configuration, and exit status 1 when a
log says the data arrived corrupted."""
import json
import os
import subprocess
import sys
import tempfile

table = sys.argv[1]


def write(d, config, rnd, us, ok=True):
    rec = {"bench": "pinned", "mode": "x", "median_us_per_batch": us, "data_ok": ok}
    with open(os.path.join(d, f"{config}-r{rnd}.log"), "w") as f:
        f.write("per-batch round 1: ...\n" + json.dumps(rec) + "\n")


with tempfile.TemporaryDirectory() as d:
    for r, (ref, ours) in enumerate([(1000, 1010), (1002, 1012), (998, 1003), (1001, 1011)], 1):
        write(d, "raw-upfront", r, ref)
        write(d, "ours-per-batch", r, ours)
        write(d, "raw-per-batch", r, 40 * ref)
    out = subprocess.run([sys.executable, table, d], capture_output=True, text=True)
    print(out.stdout, out.stderr)
    assert out.returncode == 0, "good logs pass"
    rows = {line.split()[0]: line for line in out.stdout.splitlines()[2:]}
    assert " met " in rows["ours-per-batch"] + " ", rows["ours-per-batch"]
    assert "NOT met" in rows["raw-per-batch"], rows["raw-per-batch"]
    assert "1.010" in rows["ours-per-batch"] or "1.009" in rows["ours-per-batch"], rows["ours-per-batch"]
    write(d, "ours-per-batch", 5, 1000, ok=False)
    out = subprocess.run([sys.executable, table, d], capture_output=True, text=True)
    assert out.returncode == 1 and "DATA CORRUPTED" in out.stdout, out.stdout
print("ok")
