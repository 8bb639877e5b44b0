#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""tests/bench/programs.py (scripts/gpu-programs.sh) without a GPU: the summary on made-up JSON
lines (ratios to each family's reference, result_sum compared bit for bit, served counts, failed
processes, skips, missing configurations, lines that are not records), and the workloads where
their package is missing (a skip line and exit status 0, never a crash)."""
import json
import types
import os
import subprocess
import sys
import tempfile

programs = sys.argv[1]
sys.path.insert(0, os.path.dirname(os.path.abspath(programs)))
import programs as P  # noqa: E402


def rec(config, rnd, seconds, peak, result, **extra):
    x = {"workload": "w", "config": config, "round": rnd, "seconds": seconds, "peak_mib": peak,
         "peak_source": "process", "result_sum": result, "steps": 10}
    x.update(extra)
    return json.dumps(x)


def rows(text):
    """{config: its row} from the summary's text."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if line.startswith("  ") and parts and parts[0] != "config":
            out[parts[0]] = line
    return out


# A good run: every result identical, ratios against the reference, served counts summed.
good = []
for r in (1, 2, 3):
    good += [rec("jax-bfc", r, 10.0 + r / 10, 3000.0, 123.456789),
             rec("jax-platform", r, 11.0, 2500.0, 123.456789),
             rec("jax-platform-ours", r, 10.5, 2600.0, 123.456789, served_runtime=0, served_driver=400 + r,
                 vmm_creates=100, vmm_reused=96 + r, vmm_reused_pct=98.0),
             rec("cupy-pool", r, 2.0, 1000.0, -5.5),
             rec("cupy-nopool", r, 4.0, 800.0, -5.5),
             rec("cupy-nopool-ours", r, 2.2, 900.0, -5.5, served_runtime=1200, served_driver=3),
             rec("numba", r, 1.0, None, 7.0),
             rec("numba-ours", r, 0.5, None, 7.0, served_runtime=0, served_driver=4000)]
good += ["[  12s] a line of the script's own", "{not json", ""]
text, status = P.summarise(good)
print(text)
assert status == 0, "a good run passes"
R = rows(text)
assert " 1.000 " in R["jax-bfc"] and "True" in R["jax-bfc"], R["jax-bfc"]
assert "1.078" in R["jax-platform"], R["jax-platform"]                                   # 11 / 10.2
assert "0.833" in R["jax-platform"], R["jax-platform"]                                   # 2500 / 3000
assert "0/402" in R["jax-platform-ours"] and "(median)" in R["jax-platform-ours"], R["jax-platform-ours"]
assert "1200/3" in R["cupy-nopool-ours"], R["cupy-nopool-ours"]
assert "no record" in R["cupy-nopool-ours-compact"], "a configuration that never ran is shown"
assert " 0.500 " in R["numba-ours"] and "0/4000" in R["numba-ours"], R["numba-ours"]
assert R["numba"].split()[5] == "-", "no NVML figure: a dash, not an error"
assert R["jax-platform"].split()[4] == "1.078", "the median of the per-round ratios: " + R["jax-platform"]
assert "98/100 (98.0 % of the bytes)" in R["jax-platform-ours"], R["jax-platform-ours"]
assert "1 line(s) looked like JSON" in text, text

# A result that differs in the last bit fails, and says which.
bad = good + [rec("cupy-nopool-ours", 4, 2.2, 900.0, -5.500000000000001)]
text, status = P.summarise(bad)
assert status == 1 and "False" in rows(text)["cupy-nopool-ours"], text
assert "-5.500000000000001" in rows(text)["cupy-nopool-ours"], text
# The reference's own runs must agree with each other too.
text, status = P.summarise(good + [rec("numba", 4, 1.0, None, 7.5)])
assert status == 1 and "False" in rows(text)["numba"], text

# A failed process fails the run; its configuration's other runs still count.
text, status = P.summarise(good + [json.dumps({"config": "jax-platform-ours", "round": 4,
                                               "error": "exit 139 after its JSON line"})])
assert status == 1 and "1 FAILED (exit 139" in rows(text)["jax-platform-ours"], text
# A configuration with no successful run at all, and a reference with none: no ratios, no crash.
only_fail = [json.dumps({"config": "cupy-pool", "round": 1, "error": "exit 124 without a JSON line"}),
             rec("cupy-nopool", 1, 4.0, 800.0, -5.5)]
text, status = P.summarise(only_fail)
print(text)
assert status == 1 and "no successful run" in text, text
assert "n/a" in rows(text)["cupy-nopool"], text

# Skips: a whole family skipped is one line and fails nothing; a skip beside runs of its family
# (a package that imports only without the preload) fails.
skip = lambda c, r: json.dumps({"workload": "numba-loop", "config": c, "round": r,  # noqa: E731
                                "skip": "numba.cuda not importable (ModuleNotFoundError)"})
text, status = P.summarise([l for l in good if '"numba' not in l] + [skip("numba", 1), skip("numba-ours", 1)])
print(text)
assert status == 0 and "numba: SKIP (2 processes)" in text, text
text, status = P.summarise(good + [skip("numba-ours", 4)])
assert status == 1 and "SKIPPED while" in rows(text)["numba-ours"], text

# Nothing at all, and configurations of a family the table does not know.
text, status = P.summarise([])
assert status == 0 and "jax: no runs" in text, text
text, status = P.summarise([rec("tf-thing", 1, 1.0, 10.0, 1.0)])
assert status == 0 and "tf-thing" in rows(text) and "n/a" in rows(text)["tf-thing"], text

# The command line: summary FILE, and its exit status.
with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "results.jsonl")
    with open(path, "w") as f:
        f.write("\n".join(good) + "\n")
    out = subprocess.run([sys.executable, programs, "summary", path], capture_output=True, text=True)
    assert out.returncode == 0 and "jax-platform-ours" in out.stdout, out
    with open(path, "a") as f:
        f.write(rec("numba-ours", 9, 0.5, None, 8.0) + "\n")
    out = subprocess.run([sys.executable, programs, "summary", path], capture_output=True, text=True)
    assert out.returncode == 1, out
    out = subprocess.run([sys.executable, programs, "summary", os.path.join(d, "none")],
                         capture_output=True, text=True)
    assert out.returncode == 1 and "cannot read" in out.stdout, out

# A missing package: one JSON line with "skip", exit status 0. The stand-ins on sys.path make each
# import fail the way a missing installation does.
with tempfile.TemporaryDirectory() as d:
    for mod in ("jax", "cupy", "numba"):
        os.makedirs(os.path.join(d, mod))
        with open(os.path.join(d, mod, "__init__.py"), "w") as f:
            f.write(f"raise ImportError('no {mod} here')\n")
    env = dict(os.environ, PYTHONPATH=d, CCI_CONFIG_LABEL="lbl", CCI_CONFIG_ROUND="3")
    for wl in ("jax-train", "cupy-loop", "numba-loop"):
        out = subprocess.run([sys.executable, programs, wl, "--steps", "2"], capture_output=True,
                             text=True, env=env, timeout=60)
        lines = out.stdout.strip().splitlines()
        assert out.returncode == 0 and len(lines) == 1, (wl, out)
        x = json.loads(lines[0])
        assert x["workload"] == wl and x["config"] == "lbl" and x["round"] == 3 and "skip" in x, x
    out = subprocess.run([sys.executable, programs, "no-such-workload"], capture_output=True, text=True)
    assert out.returncode == 2, out
print("ok")

# numba-cuda's registries need names NumPy 2 removed: each one NumPy lacks is given as a function of
# its own that calls the new name; a name NumPy still has is left alone.
fake_np = types.ModuleType("numpy")
fake_np.vstack = lambda *a: ("vstack", a)
fake_np.trapz = "kept"
P._give_numpy_old_names(fake_np)
assert fake_np.row_stack(1, 2) == ("vstack", (1, 2)) and fake_np.row_stack is not fake_np.vstack
assert fake_np.trapz == "kept", "a name NumPy has is not replaced"
assert not hasattr(fake_np, "in1d"), "no alias where NumPy lacks the new name too"
print("ok")
