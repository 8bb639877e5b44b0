#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""torch_run.py's steady-state timing on a stand-in workloads file and a stand-in torch (no GPU).

  test_torch_run.py

The stand-in main() prints the JSON line torch_workloads.py prints, with "seconds" taken from a
script of durations (one per call) and result_sum from the steps' results, which come from the
same seeds on every call unless told otherwise. Checks: the warm-up call is made and left out,
"seconds" is the median of the timed runs, every run is listed, equal result_sums are kept, a
differing one empties result_sum (so the GPU check's comparison fails), bad options get a
one-line error, and without the new options the output is one plain run, as before.
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
RUN = os.path.join(HERE, "torch_run.py")

STAND_IN = r'''
import argparse, json, os
LOSSES = []
CALLS = []
DURATIONS = [float(x) for x in os.environ["FAKE_SECONDS"].split(",")]
DRIFT_ON_CALL = int(os.environ.get("FAKE_DRIFT_ON_CALL", "-1"))

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("name")
    ap.add_argument("--steps", type=int, default=20)
    a = ap.parse_args()
    call = len(CALLS)
    CALLS.append(a.steps)
    for k in range(a.steps):
        LOSSES.append(float(k) + (0.5 if call == DRIFT_ON_CALL else 0.0))
    print("noise before the line")
    print(json.dumps({"workload": a.name, "steps": a.steps, "seconds": DURATIONS[call],
                      "calls_so_far": list(CALLS), "result_sum": sum(LOSSES)}))
'''

TORCH = "class cuda:\n    @staticmethod\n    def current_device():\n        return 0\n"

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


def run(tmp, args, seconds, drift=-1):
    env = dict(os.environ, PYTHONPATH=tmp, FAKE_SECONDS=seconds, FAKE_DRIFT_ON_CALL=str(drift))
    p = subprocess.run([sys.executable, RUN, os.path.join(tmp, "wl.py"), "enc"] + args,
                       capture_output=True, text=True, env=env)
    return p.returncode, p.stdout, p.stderr


with tempfile.TemporaryDirectory() as tmp:
    with open(os.path.join(tmp, "wl.py"), "w") as fh:
        fh.write(STAND_IN)
    with open(os.path.join(tmp, "torch.py"), "w") as fh:
        fh.write(TORCH)

    # Warm-up of 2 steps (9.0 s, left out), then three timed runs of 4 steps.
    rc, out, err = run(tmp, ["--steps", "4", "--warmup-steps", "2", "--timed-runs", "3"], "9.0,1.3,1.1,1.2")
    check(rc == 0, f"warm-up + 3 runs: exit {rc}: {err}")
    res = json.loads(out.splitlines()[-1]) if rc == 0 else {}
    check(res.get("calls_so_far") == [2, 4, 4, 4], f"calls made: {res.get('calls_so_far')}")
    check(res.get("seconds") == 1.2, f"median of 1.3, 1.1, 1.2: {res.get('seconds')}")
    check(res.get("seconds_runs") == [1.3, 1.1, 1.2], f"runs listed: {res.get('seconds_runs')}")
    check(res.get("warmup_steps") == 2, "warm-up steps recorded")
    check(res.get("result_sum") == 6.0, f"result_sum of one run's steps (0+1+2+3): {res.get('result_sum')}")
    check("result_sum_runs" not in res, "equal sums: no result_sum_runs")
    check(res.get("cci") is None, "no preload: cci is null")

    # An even number of runs: the mean of the middle two.
    rc, out, err = run(tmp, ["--steps", "1", "--timed-runs", "2"], "2.0,3.0")
    res = json.loads(out.splitlines()[-1]) if rc == 0 else {}
    check(res.get("seconds") == 2.5, f"median of 2.0, 3.0: {res.get('seconds')}")

    # One timed run differs (call 2 of 0-based calls: warm-up is call 0): result_sum must go.
    rc, out, err = run(tmp, ["--steps", "3", "--warmup-steps", "1", "--timed-runs", "3"], "5,1,1,1", drift=2)
    res = json.loads(out.splitlines()[-1]) if rc == 0 else {}
    check(rc == 0 and res.get("result_sum") is None, f"differing runs: result_sum {res.get('result_sum')}")
    check(res.get("result_sum_runs") == [3.0, 4.5, 3.0], f"sums listed: {res.get('result_sum_runs')}")

    # Without the new options: one run, as before.
    rc, out, err = run(tmp, ["--steps", "5"], "0.7")
    res = json.loads(out.splitlines()[-1]) if rc == 0 else {}
    check(res.get("calls_so_far") == [5] and res.get("seconds") == 0.7, f"plain run: {res}")

    # Bad options: one line on stderr, non-zero exit, no traceback.
    for bad in (["--timed-runs", "0"], ["--warmup-steps", "x"], ["--timed-runs"]):
        rc, out, err = run(tmp, bad, "1")
        check(rc != 0 and "torch_run.py:" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1,
              f"bad option {bad}: exit {rc}, stderr {err!r}")

if failures:
    print("FAILED:\n  " + "\n  ".join(failures))
    sys.exit(1)
print("test_torch_run: all checks passed")
