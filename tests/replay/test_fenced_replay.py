#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""ccreplay --fenced-lag on the shared PyTorch snapshots: every free replayed as a fenced free on a
simulated device that runs N allocations behind the host.

usage: test_fenced_replay.py CCREPLAY TRACES_DIR
Skipped (77) when TRACES_DIR is absent. What it proves, per trace:
  - lag 0 (a device that keeps up): fences are recorded, the host never waits for a fence that has
    not passed, and the peak stays within 35 % of immediate reuse (blocks in the open batch, not
    yet behind a fence, are what separates the two: docs/reuse-modes.md has the table);
  - a device far behind (lag 1000000): the host does wait, and the peak is at least immediate
    reuse's and at least lag 0's (blocks the device has not passed cannot be reused);
  - immediate_reuse ignores the option: its peak is the plain replay's;
  - the replay is deterministic: the same figures on a second run;
  - --fenced-streams 32 (a program with many streams, as PyTorch's pool makes resnet on the GPU):
    fences are dear, so a poor fit no longer puts the open batch behind a fence of its own: no
    more fence records than with one stream (fewer over the traces), the queries are counted, and
    the peak stays within 35 % of immediate reuse;
  - --fenced-busy 32 against idle side streams (lag 64): with idle ones a poor fit waits even for
    the newest batches, so the host waits at least as often (more over the traces).
Bad values of the option get exit 2 and one line.
"""
import json
import os
import subprocess
import sys

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"FAIL: {what}")


def replay(ccreplay, *args):
    # Ordinary segments, whose fenced frees these figures were taken on (the default is compact
    # segments where the device offers the virtual-memory API, as the simulated one does).
    args = list(args)
    if "--conf" in args:
        args[args.index("--conf") + 1] += ",compact_segments:False"
    else:
        args[:0] = ["--conf", "compact_segments:False"]
    p = subprocess.run([ccreplay, "--json", *args], capture_output=True, text=True, timeout=240)
    check(p.returncode == 0, f"ccreplay {args}: exit {p.returncode}: {p.stderr.strip()}")
    return json.loads(p.stdout) if p.returncode == 0 else {}


def bad_values(ccreplay, trace):
    for args, needle in ((["--fenced-lag", "x"], "--fenced-lag: 'x'"),
                         (["--fenced-lag", "-1"], "--fenced-lag: '-1'"),
                         (["--fenced-lag=2000000000"], "--fenced-lag: '2000000000'"),
                         (["--fenced-lag", "2", "--sweep"], "cannot be combined with --sweep"),
                         (["--fenced-lag", "0", "--fenced-streams", "0"], "--fenced-streams: '0'"),
                         (["--fenced-lag", "0", "--fenced-streams", "many"], "--fenced-streams: 'many'"),
                         (["--fenced-streams", "4"], "--fenced-streams needs --fenced-lag"),
                         (["--fenced-busy", "0"], "--fenced-busy needs --fenced-lag"),
                         (["--fenced-order"], "--fenced-order needs --fenced-lag"),
                         (["--fenced-lag", "0", "--fenced-order=1"], "--fenced-order takes no value"),
                         (["--fenced-lag", "0", "--fenced-busy", "x"], "--fenced-busy: 'x'"),
                         (["--fenced-lag", "0", "--fenced-streams", "4", "--fenced-busy", "5"],
                          "more busy streams than --fenced-streams")):
        p = subprocess.run([ccreplay, *args, trace], capture_output=True, text=True, timeout=60)
        lines = p.stderr.splitlines()
        check(p.returncode == 2 and len(lines) == 1 and needle in lines[0] and p.stdout == "",
              f"{args}: want exit 2 and one line with {needle!r}; got {p.returncode} {p.stderr!r}")


def main():
    ccreplay, traces = sys.argv[1:3]
    names = ["encoder", "resnet", "seedfrag"]
    paths = [os.path.join(traces, n + ".pickle.xz") for n in names]
    if not all(os.path.exists(p) for p in paths):
        print(f"SKIP: shared traces not found in {traces}")
        return 77
    bad_values(ccreplay, paths[2])
    global fewer_records
    fewer_records = []  # per trace: records with one stream minus with 32
    waited_more = []  # per trace: host waits with idle side streams minus with busy ones
    for name, path in zip(names, paths):
        imm = replay(ccreplay, path)
        lag0 = replay(ccreplay, "--fenced-lag", "0", path)
        far = replay(ccreplay, "--fenced-lag", "1000000", path)
        again = replay(ccreplay, "--fenced-lag=1000000", path)
        ignored = replay(ccreplay, "--conf", "immediate_reuse:True", "--fenced-lag", "8", path)
        if not (imm and lag0 and far and again and ignored):
            continue
        print(f"{name}: immediate {imm['peak_reserved_bytes'] >> 20} MiB, fenced lag 0 "
              f"{lag0['peak_reserved_bytes'] >> 20} MiB, far behind {far['peak_reserved_bytes'] >> 20} MiB "
              f"({far['num_blocking_waits']} blocking waits)")
        check(lag0["num_fence_records"] > 0, f"{name}: lag 0 recorded no fence: frees were not fenced")
        check(lag0["num_blocking_waits"] == 0, f"{name}: lag 0 blocked the host {lag0['num_blocking_waits']} times")
        check(lag0["peak_reserved_bytes"] <= imm["peak_reserved_bytes"] * 1.35,  # seedfrag: 336 vs 256 MiB since poor fits harvest
              f"{name}: lag 0 peak {lag0['peak_reserved_bytes']} vs immediate {imm['peak_reserved_bytes']}")
        check(far["num_blocking_waits"] > 0, f"{name}: a device far behind never made the host wait")
        check(far["peak_reserved_bytes"] >= imm["peak_reserved_bytes"],
              f"{name}: far behind {far['peak_reserved_bytes']} < immediate {imm['peak_reserved_bytes']}")
        check(far["peak_reserved_bytes"] >= lag0["peak_reserved_bytes"],
              f"{name}: far behind {far['peak_reserved_bytes']} < lag 0 {lag0['peak_reserved_bytes']}")
        many = replay(ccreplay, "--fenced-lag", "0", "--fenced-streams", "32", path)
        if many:
            print(f"{name}: 32 streams: {many['num_fence_records']} fences ({lag0['num_fence_records']} with "
                  f"one), {many['num_fence_queries']} queries, peak {many['peak_reserved_bytes'] >> 20} MiB")
            check(many["fence_streams"] == 32 and lag0["fence_streams"] == 1, f"{name}: streams not echoed")
            check(many["num_fence_records"] <= lag0["num_fence_records"],
                  f"{name}: 32 streams recorded more fences ({many['num_fence_records']}) than one")
            check(many["num_fence_queries"] > 0, f"{name}: no fence query counted")
            check(many["peak_reserved_bytes"] <= imm["peak_reserved_bytes"] * 1.35,
                  f"{name}: 32 streams peak {many['peak_reserved_bytes']} vs immediate {imm['peak_reserved_bytes']}")
            fewer_records.append(lag0["num_fence_records"] - many["num_fence_records"])
        # Many idle side streams (the default) against many busy ones, on a device far behind:
        # with idle ones a poor fit waits even for the newest batches, so the host waits at
        # least as often; both stay safe and are echoed.
        idle = replay(ccreplay, "--fenced-lag", "64", "--fenced-streams", "32", path)
        busy = replay(ccreplay, "--fenced-lag", "64", "--fenced-streams", "32", "--fenced-busy", "32", path)
        if idle and busy:
            print(f"{name}: lag 64, 32 streams: idle peak {idle['peak_reserved_bytes'] >> 20} MiB, "
                  f"{idle['num_fence_waits']} waits; busy peak {busy['peak_reserved_bytes'] >> 20} MiB, "
                  f"{busy['num_fence_waits']} waits")
            check(idle["fence_busy"] == 0 and busy["fence_busy"] == 32, f"{name}: busy streams not echoed")
            check(idle["num_fence_waits"] >= busy["num_fence_waits"],
                  f"{name}: idle side streams waited less ({idle['num_fence_waits']}) than busy ones")
            waited_more.append(idle["num_fence_waits"] - busy["num_fence_waits"])
            # THE ORDER (--fenced-order): with idle streams, orders at reuse instead of fences; with
            # more busy streams than the backend sweeps (32 > 4), every order refused.
            ordered = replay(ccreplay, "--fenced-lag", "64", "--fenced-streams", "32", "--fenced-order", path)
            refused = replay(ccreplay, "--fenced-lag", "64", "--fenced-streams", "32", "--fenced-busy", "32",
                             "--fenced-order", path)
            if ordered and refused:
                print(f"{name}: lag 64, 32 idle streams, ordering: peak {ordered['peak_reserved_bytes'] >> 20} MiB, "
                      f"{ordered['num_fence_orders']} orders, {ordered['num_blocking_waits']} blocking waits")
                check(ordered["fence_order"] is True and idle["fence_order"] is False, f"{name}: order not echoed")
                # With every side stream idle the frees skip their fences (orders at reuse): the
                # layout and peak are immediate reuse's, with no fence and no host wait.
                check(ordered["num_reuse_orders"] > 0 and ordered["num_blocking_waits"] == 0
                      and ordered["num_fence_records"] == 0,
                      f"{name}: idle streams: {ordered['num_reuse_orders']} orders at reuse, "
                      f"{ordered['num_fence_records']} fences, {ordered['num_blocking_waits']} blocking waits "
                      f"(expected only orders)")
                check(ordered["peak_reserved_bytes"] == imm["peak_reserved_bytes"],
                      f"{name}: ordering at reuse peak {ordered['peak_reserved_bytes']} vs immediate "
                      f"{imm['peak_reserved_bytes']}")
                check(refused["num_reuse_frees"] == 0, f"{name}: busy streams skipped fences")
                check(refused["num_fence_orders"] == 0 and refused["num_fence_waits"] == busy["num_fence_waits"],
                      f"{name}: 32 busy streams: {refused['num_fence_orders']} orders, "
                      f"{refused['num_fence_waits']} waits (expected {busy['num_fence_waits']}, none ordered)")
        drop = ("replay_seconds",)
        check({k: v for k, v in far.items() if k not in drop} == {k: v for k, v in again.items() if k not in drop},
              f"{name}: two fenced replays differ")
        check(ignored["peak_reserved_bytes"] == replay(ccreplay, "--conf", "immediate_reuse:True", path)
              .get("peak_reserved_bytes"), f"{name}: immediate_reuse did not ignore --fenced-lag")
        check("fence_lag" not in imm, f"{name}: a plain replay reports a fence lag")
    check(sum(waited_more) > 0, f"idle side streams never waited more than busy ones ({waited_more})")
    check(sum(fewer_records) > 0, f"32 streams recorded no fewer fences than one over the traces ({fewer_records})")
    print("FAIL" if failures else "ok", f"({len(failures)} failures)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
