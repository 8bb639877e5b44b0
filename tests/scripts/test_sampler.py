#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""tests/bench/sampler.c and sample_report.py: the profiler the GPU hosts get instead of perf.

  test_sampler.py SAMPLER_SO SAMPLE_REPORT BENCH_THREADS_CORE

The core alone (bench_threads-core, the allocator linked in) runs for half a second of CPU under
the sampler: the samples must fall mostly in its own module, and the report must name the core's
functions there. Without SAMPLER_OUT the sampler writes nothing; a bad SAMPLER_HZ gets one line
and the program runs unchanged.
"""
import os
import re
import subprocess
import sys
import tempfile

sampler, report, bench = sys.argv[1:4]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


def bench_run(env_extra):
    env = dict(os.environ, LD_PRELOAD=sampler, **env_extra)
    return subprocess.run([bench, "--api", "core-now", "--threads", "1", "--budget-ms", "500"], env=env,
                          capture_output=True, text=True, timeout=120)


with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "samples.txt")
    p = bench_run({"SAMPLER_OUT": out})
    check(p.returncode == 0, f"bench under the sampler exited {p.returncode}: {p.stderr[-500:]}")
    check(os.path.exists(out), "no samples file written")
    if os.path.exists(out):
        head = open(out).readline()
        m = re.match(r"# sampler: (\d+) samples", head)
        check(m is not None and int(m.group(1)) >= 10, f"too few samples: {head!r}")
        r = subprocess.run([sys.executable, report, out, "--lib", bench], capture_output=True, text=True, timeout=120)
        print(r.stdout)
        check(r.returncode == 0, f"sample_report exited {r.returncode}: {r.stderr}")
        mod = re.search(r"^\s+\d+\s+([\d.]+)%\s+" + re.escape(os.path.basename(bench)) + r"$", r.stdout, re.M)
        check(mod is not None and float(mod.group(1)) >= 50,
              f"the core's own module should hold most samples: {mod.group(0) if mod else 'not listed'}")
        funcs = r.stdout.split("by function", 1)[-1].split("by source line", 1)[0]
        check(re.search(r"\bcci_\w+", funcs) is not None, "no cci_ function named among the top functions")
        check(re.search(r"by source line.*\n\s+\d+\s+[\d.]+%\s+\w+ \(\w+\.[ch]:\d+\)", r.stdout) is not None,
              "no source line attributed")

    before = set(os.listdir(tmp))
    quiet = bench_run({})
    check(quiet.returncode == 0, f"bench with the sampler loaded but off exited {quiet.returncode}")
    check(set(os.listdir(tmp)) == before and "sampler" not in quiet.stderr,
          "the sampler did something without SAMPLER_OUT")
    bad = bench_run({"SAMPLER_OUT": os.path.join(tmp, "bad.txt"), "SAMPLER_HZ": "0"})
    check(bad.returncode == 0, f"a bad SAMPLER_HZ stopped the program: exit {bad.returncode}")
    lines = [l for l in bad.stderr.splitlines() if l.startswith("sampler:")]
    check(len(lines) == 1 and "SAMPLER_HZ=0" in lines[0], f"a bad SAMPLER_HZ: expected one line, got {lines}")
    check(not os.path.exists(os.path.join(tmp, "bad.txt")), "a bad SAMPLER_HZ still wrote samples")

for f in failures:
    print("FAIL:", f)
sys.exit(1 if failures else 0)
