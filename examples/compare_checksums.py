#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Run an example natively and under the preload; the checksums must match.

  compare_checksums.py --preload LIB [--libdir DIR] [--env K=V ...]
                       [--expect-served yes|no|any] [--timeout S] [--log-dir DIR] EXE [ARGS...]

--libdir goes first on LD_LIBRARY_PATH of both runs (the fake CUDA libraries in the tests).
--env applies to the preloaded run only (e.g. CCI_ALLOC_CONF=immediate_reuse:True).
--expect-served yes: the preload must report it served allocations (proves the hooks caught the
program; otherwise a "match" would only compare the program with itself). no: it must serve none
(a static-cudart build before driver-level hooks exist). any: report only.

Prints one summary line beginning with RESULT; exit status 0 only when everything held.
"""
import argparse
import os
import re
import subprocess
import sys

CHECKSUM = re.compile(r"^checksum: ([0-9a-f]+)$", re.M)
ALLOCS = re.compile(r"^(\S+): (\d+) allocations$", re.M)
SERVED = re.compile(r"^ccinterpose: loaded, served (\d+) allocations, (\d+) device allocations", re.M)


def run(cmd, env, timeout, log):
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        out, err, rc = p.stdout, p.stderr, p.returncode
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = (e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")) + \
            f"\n(timed out after {timeout} s)\n"
        rc = 124
    if log:
        with open(log, "w") as f:
            f.write(f"$ {' '.join(cmd)}\n--- stdout ---\n{out}--- stderr ---\n{err}--- exit {rc}\n")
    return rc, out, err


def one(pattern, text):
    m = pattern.search(text)
    return m.groups() if m else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preload", required=True)
    ap.add_argument("--libdir")
    ap.add_argument("--env", action="append", default=[])
    ap.add_argument("--expect-served", choices=["yes", "no", "any"], default="yes")
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--log-dir")
    ap.add_argument("--name")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    if not a.cmd:
        ap.error("no program given")
    name = a.name or os.path.basename(a.cmd[0])

    base = dict(os.environ)
    base.pop("LD_PRELOAD", None)
    if a.libdir:
        base["LD_LIBRARY_PATH"] = a.libdir + (":" + base["LD_LIBRARY_PATH"] if base.get("LD_LIBRARY_PATH") else "")
    pre = dict(base)
    pre["LD_PRELOAD"] = os.path.abspath(a.preload)
    for kv in a.env:
        k, _, v = kv.partition("=")
        pre[k] = v

    logs = [None, None]
    if a.log_dir:
        os.makedirs(a.log_dir, exist_ok=True)
        logs = [os.path.join(a.log_dir, f"{name}.native.log"), os.path.join(a.log_dir, f"{name}.preload.log")]
    rc_n, out_n, err_n = run(a.cmd, base, a.timeout, logs[0])
    rc_p, out_p, err_p = run(a.cmd, pre, a.timeout, logs[1])

    problems = []
    for label, rc, out, err in (("native", rc_n, out_n, err_n), ("preload", rc_p, out_p, err_p)):
        if rc != 0:
            problems.append(f"{label} run exited {rc}")
            sys.stderr.write(f"--- {name} {label}: stdout ---\n{out}--- stderr ---\n{err}")
    sum_n, sum_p = one(CHECKSUM, out_n), one(CHECKSUM, out_p)
    if not sum_n or not sum_p:
        problems.append("no checksum line")
    elif sum_n != sum_p:
        problems.append(f"checksum mismatch: native {sum_n[0]} vs preload {sum_p[0]}")
    al_n, al_p = one(ALLOCS, out_n), one(ALLOCS, out_p)
    if al_n != al_p:
        problems.append(f"allocation counts differ: {al_n} vs {al_p}")
    served = one(SERVED, out_p)
    n_served = int(served[0]) if served else 0
    if a.expect_served == "yes" and n_served == 0:
        problems.append("the preload served no allocation (hooks not reached, or the preload did not load)")
    if a.expect_served == "no" and n_served != 0:
        problems.append(f"the preload served {n_served} allocations where none were expected")

    print(f"RESULT {name}: {'ok' if not problems else 'FAIL'}"
          f" checksum native={sum_n[0] if sum_n else '-'} preload={sum_p[0] if sum_p else '-'}"
          f" allocations={al_n[1] if al_n else '-'} served_by_preload={n_served}"
          f" device_allocations={served[1] if served else '-'}"
          + ("" if not problems else " :: " + "; ".join(problems)))
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
