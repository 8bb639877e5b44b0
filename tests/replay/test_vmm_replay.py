#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The two virtual-memory modes in replay, and `ccreplay --sweep --json`.

usage: test_vmm_replay.py CCREPLAY TRACES_DIR
  - expandable_segments:True must predict PyTorch's measured peak reserved within 2 % on the
    shared traces (H100, 2026-11-23: encoder 5990, resnet 3074, seedfrag 242 MiB);
  - compact_segments:True must stay within its targets: <= 1.03 x peak allocated on encoder and
    resnet, <= 242 MiB on seedfrag;
  - --sweep --json prints one JSON object whose `recommended` and `results` rows carry conf and
    both peaks, covers both modes, agrees with the single replays, and does not depend on --jobs.
Skipped (77) when the shared traces are absent.
"""
import json
import os
import subprocess
import sys

MiB = 1 << 20
PYTORCH_EXPANDABLE_MIB = {"encoder": 5990, "resnet": 3074, "seedfrag": 242}
COMPACT_LIMIT = {"encoder": ("ratio", 1.03), "resnet": ("ratio", 1.03), "seedfrag": ("mib", 242)}

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"FAIL: {what}")


def ccreplay(*args):
    p = subprocess.run([CCREPLAY, *args], capture_output=True, text=True, timeout=240)
    check(p.returncode == 0, f"ccreplay {args}: exit {p.returncode}: {p.stderr.strip()}")
    return p


def replay(trace, conf):
    p = ccreplay("--json", "--conf", conf, trace)
    return json.loads(p.stdout) if p.returncode == 0 else None


def test_modes():
    for name, want in PYTORCH_EXPANDABLE_MIB.items():
        path = os.path.join(TRACES, f"{name}.pickle.xz")
        r = replay(path, "expandable_segments:True")
        if r:
            got = r["peak_reserved_bytes"] / MiB
            print(f"{name}: expandable_segments:True {got:.1f} MiB (PyTorch {want})")
            check(abs(got - want) <= 0.02 * want, f"{name}: expandable {got:.1f} MiB not within 2 % of {want}")
            check(r["num_ooms"] == 0, f"{name}: expandable replay hit an OOM")
        c = replay(path, "compact_segments:True")
        if c:
            got, alloc = c["peak_reserved_bytes"], c["peak_allocated_bytes"]
            kind, limit = COMPACT_LIMIT[name]
            print(f"{name}: compact_segments:True {got / MiB:.1f} MiB, allocated {alloc / MiB:.1f} MiB")
            ok = got <= limit * alloc if kind == "ratio" else got <= limit * MiB
            check(ok, f"{name}: compact {got / MiB:.1f} MiB over its target ({kind} {limit})")
            check(c["num_ooms"] == 0, f"{name}: compact replay hit an OOM")
            if r:
                check(got <= r["peak_reserved_bytes"], f"{name}: compact reserves more than expandable")


def sweep_json(path, *extra):
    p = ccreplay("--sweep", "--json", *extra, path)
    if p.returncode != 0:
        return None
    try:
        return json.loads(p.stdout)
    except json.JSONDecodeError as e:
        check(False, f"--sweep --json output is not one JSON object: {e}: {p.stdout[:200]!r}")
        return None


def test_sweep_json():
    path = os.path.join(TRACES, "seedfrag.pickle.xz")
    one = sweep_json(path, "--jobs", "1")
    two = sweep_json(path, "--jobs", "2")
    if not one or not two:
        return
    check(one == two, "--sweep --json depends on --jobs")
    fields = ("conf", "peak_reserved_bytes", "peak_allocated_bytes")
    rec, results = one["recommended"], one["results"]
    check(all(f in rec for f in fields), f"recommended lacks a field: {rec}")
    check(all(all(f in r for f in fields) for r in results), "a result lacks a field")
    confs = [r["conf"] for r in results]
    check(len(set(confs)) == len(confs), "a configuration appears twice")
    check(rec in results, "the recommendation is one of the results")
    # The default ("") is compact segments on the simulated device; ordinary ones are one key away.
    for mode in ("expandable_segments:True", "compact_segments:False"):
        check(mode in confs, f"{mode} is not in the grid")
    check("" in confs, "the default is in the grid")
    check("compact_segments:True" not in confs, "the default is in the grid twice (as compact_segments:True)")
    peaks = [r["peak_reserved_bytes"] for r in results]
    check(peaks == sorted(peaks), "results are not in rank order (no OOMs here, so by peak)")
    # Each row agrees with a single replay of the same configuration.
    for conf in ("", "compact_segments:False"):
        row = next(r for r in results if r["conf"] == conf)
        single = replay(path, conf)
        if single:
            check(single["peak_reserved_bytes"] == row["peak_reserved_bytes"],
                  f"sweep row '{conf}' disagrees with a single replay")
    with_cap = sweep_json(path, "--capacity", "80G", "--jobs", "2")
    if with_cap:
        check(with_cap["capacity_bytes"] == 80 << 30, "capacity_bytes echoes --capacity")
        check(any(r["conf"].startswith("garbage_collection_threshold") for r in with_cap["results"]) and
              any("expandable_segments:True,garbage_collection_threshold" in r["conf"] for r in with_cap["results"]),
              "the gc variants of the VMM modes (the default's compact segments, expandable) are swept when a "
              "capacity is given")


def main():
    global CCREPLAY, TRACES
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    CCREPLAY, TRACES = sys.argv[1], sys.argv[2]
    if not all(os.path.exists(os.path.join(TRACES, f"{n}.pickle.xz")) for n in PYTORCH_EXPANDABLE_MIB):
        print(f"skip: shared traces not found in {TRACES}")
        return 77
    test_modes()
    test_sweep_json()
    print(f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
