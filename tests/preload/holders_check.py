#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Runs a program under the preload with CCI_STACKS and a JSON report, then checks the holders.

usage: holders_check.py REPORT_DIR --peak FUNC --leak FUNC [--leak-blocks N] [--gone FUNC] -- PROGRAM ARGS...
--peak: a frame of the largest holder at peak reserved must contain FUNC; --leak: a frame of the
largest site still allocated at exit must contain FUNC (with N blocks); --gone: no site still
allocated at exit may name FUNC (its blocks were freed)."""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def main():
    argv = sys.argv[1:]
    if "--" not in argv:
        fail("usage: holders_check.py [options] -- PROGRAM ARGS...")
    cut = argv.index("--")
    ap = argparse.ArgumentParser()
    ap.add_argument("--peak", required=True)
    ap.add_argument("--leak", required=True)
    ap.add_argument("--leak-blocks", type=int)
    ap.add_argument("--gone")
    ap.add_argument("--skip-if-no-python-frames", action="store_true")
    opts = ap.parse_args(argv[:cut])
    cmd = argv[cut + 1:]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "report.json")
        env = dict(os.environ, CCI_REPORT=path)
        env.setdefault("CCI_STACKS", "8")
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
        sys.stdout.write(r.stdout)
        if r.returncode == 77:
            print(r.stderr.strip())
            sys.exit(77)
        if r.returncode != 0:
            fail(f"{cmd} exited {r.returncode}: {r.stderr.strip()[-2000:]}")
        with open(path) as f:
            report = json.load(f)
    dev = report["devices"][0]
    holders, leaks = dev["holders"], dev["leaks"]
    if holders["stacks"] != int(env["CCI_STACKS"]):
        fail(f"holders.stacks is {holders['stacks']}")
    if holders["allocations"] < 1:
        fail("no allocation recorded")
    peak = holders["at_peak"]
    if not peak or not peak["sites"]:
        fail("no holders at peak reserved")
    top = peak["sites"][0]
    if not any(opts.peak in fr for fr in top["frames"]):
        if opts.skip_if_no_python_frames and not any(".py:" in fr for s in peak["sites"] for fr in s["frames"]):
            print("no Python frame recorded (this Python does not expose its C API to dlsym?): skipped")
            sys.exit(77)
        fail(f"the largest holder at peak does not name {opts.peak}: {top['frames']}")
    if peak["reserved"] <= 0 or peak["bytes"] < top["bytes"]:
        fail(f"peak totals inconsistent: {peak}")
    by_site = leaks["by_site"]
    if not by_site or not by_site["sites"]:
        fail("no call site for the blocks still allocated")
    lead = by_site["sites"][0]
    if not any(opts.leak in fr for fr in lead["frames"]):
        fail(f"the largest site still allocated does not name {opts.leak}: {lead['frames']}")
    if opts.leak_blocks is not None and lead["blocks"] != opts.leak_blocks:
        fail(f"{lead['blocks']} blocks still allocated at {opts.leak}, expected {opts.leak_blocks}")
    if "oldest_age_ms" not in lead or lead["first_seq"] < 1:
        fail(f"no age for the blocks still allocated: {lead}")
    if by_site["blocks"] != leaks["held_blocks"]:
        fail(f"sites count {by_site['blocks']} blocks, the layout {leaks['held_blocks']} held")
    if opts.gone and any(opts.gone in fr for s in by_site["sites"] for fr in s["frames"]):
        fail(f"{opts.gone} freed its blocks but is still listed as holding memory")
    print(f"holders ok: peak led by {top['frames'][0]}; {lead['blocks']} block(s) still allocated at "
          f"{lead['frames'][0]}, oldest {lead['oldest_age_ms']} ms")


if __name__ == "__main__":
    main()
