# SPDX-License-Identifier: MIT
"""Usage: test_json.py FIXTURE | test_json.py --exit-report PROGRAM | test_json.py --exit-history [--trace CCREPLAY] PROGRAM ARGS...

The JSON report parses with Python's json module, names every statistic exactly as
torch.cuda.memory_stats() does, and its figures agree with the statistics (dumped by the fixture
from cci_alloc_stats by code of its own) and with each other."""
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

MiB = 1 << 20
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


def torch_keys():
    keys = set()
    for stem in ["allocation", "segment", "active", "inactive_split", "allocated_bytes",
                 "reserved_bytes", "active_bytes", "inactive_split_bytes", "requested_bytes"]:
        for pool in ["all", "small_pool", "large_pool"]:
            for field in ["current", "peak", "allocated", "freed"]:
                keys.add(f"{stem}.{pool}.{field}")
    for stem in ["oversize_allocations", "oversize_segments"]:
        for field in ["current", "peak", "allocated", "freed"]:
            keys.add(f"{stem}.{field}")
    keys |= {"num_alloc_retries", "num_ooms", "num_sync_all_streams", "num_device_alloc",
             "num_device_free", "max_split_size"}
    return keys


# The driver calls' costs (cci_stats version 4), ours alone: the device's own under "costs", those
# counted for the whole process (the CUDA fences) under "process_costs".
DEVICE_COSTS = [f"vmm_{k}_{f}" for k in ["create", "map", "set_access", "unmap", "release"] for f in ["calls", "ns"]]
PROCESS_COSTS = [f"fence_{k}" for k in [
    "record_calls", "record_events", "record_ns", "query_calls", "query_events", "query_ns", "wait_calls",
    "wait_events", "wait_ns", "order_calls", "order_ns", "catch_up_calls", "catch_up_events", "catch_up_ns",
    "barrier_records", "context_records", "stream_queries", "stream_idle_answers", "sweeps",
    "shared_event_queries", "looks_put_off", "orders_made", "orders_covered", "orders_refused", "orders_behind",
    "order_stream_waits", "order_skips", "context_orders", "watcher_rounds", "watcher_stream_queries",
    "watcher_looks_ahead", "watched_answers", "reuse_frees", "reuse_orders", "reuse_refused", "reuse_order_ns"]]


def check_costs(dev):
    """The two cost objects: exactly their keys, in the struct's order, every value a count."""
    d = dev["device"]
    costs, process = dev.get("costs"), dev.get("process_costs")
    check(isinstance(costs, dict) and list(costs) == DEVICE_COSTS, f"device {d}: costs keys {costs and list(costs)}")
    check(isinstance(process, dict) and list(process) == PROCESS_COSTS,
          f"device {d}: process_costs keys {process and list(process)}")
    for k, v in {**(costs or {}), **(process or {})}.items():
        check(is_count(v), f"device {d}: {k} = {v!r} is not a count")
    return {**(costs or {}), **(process or {})}


def check_device(dev, st):
    d = dev["device"]
    stats = dev["stats"]
    check(set(stats) == torch_keys(),
          f"device {d}: key set differs: extra {sorted(set(stats) - torch_keys())[:5]}, "
          f"missing {sorted(torch_keys() - set(stats))[:5]}")
    for k, v in stats.items():
        check(st.get(k) == v, f"device {d}: {k} = {v} in JSON, {st.get(k)} in cci_stats")
    check(dev["largest_free_block"] == st["largest_free_block"], f"device {d}: largest_free_block")
    for k, v in check_costs(dev).items():
        check(st.get(k) == v, f"device {d}: {k} = {v} in JSON, {st.get(k)} in cci_stats")

    f = dev["fragmentation"]["at_exit"]
    check(f["reserved"] == stats["reserved_bytes.all.current"], f"device {d}: reserved at exit")
    check(f["allocated"] == stats["allocated_bytes.all.current"], f"device {d}: allocated at exit")
    check(f["requested"] == stats["requested_bytes.all.current"], f"device {d}: requested at exit")
    check(f["pending"] == stats["active_bytes.all.current"] - stats["allocated_bytes.all.current"],
          f"device {d}: pending = active - allocated")
    check(f["allocated"] + f["pending"] + f["cached_free"] == f["reserved"],
          f"device {d}: allocated + pending + cached free = reserved")
    check(f["inactive_split"] == stats["inactive_split_bytes.all.current"], f"device {d}: inactive split")
    check(f["largest_free"] == st["largest_free_block"], f"device {d}: largest free")
    check(f["segments"] == stats["segment.all.current"], f"device {d}: segments")
    check(f["small_segments"] == stats["segment.small_pool.current"], f"device {d}: small segments")
    ratio = 1 - f["largest_free"] / f["cached_free"] if f["cached_free"] else 0.0
    check(abs(f["ratio"] - ratio) < 1e-5, f"device {d}: ratio {f['ratio']} vs {ratio}")
    hist = f["free_block_histogram"]
    check(sum(h["bytes"] for h in hist) == f["cached_free"], f"device {d}: histogram bytes")
    check(sum(h["count"] for h in hist) == f["free_blocks"], f"device {d}: histogram counts")
    for h in hist:
        check(h["min"] & (h["min"] - 1) == 0, f"device {d}: bucket {h['min']} not a power of two")

    peak = dev["fragmentation"]["at_peak"]
    check(peak is not None and peak["reserved"] == stats["reserved_bytes.all.peak"],
          f"device {d}: reserved at peak = reserved_bytes.all.peak")

    for when, frag in [("at_exit", f), ("at_peak", peak)]:
        segs = dev["segments"][when]
        check(sum(s["size"] for s in segs) == frag["reserved"], f"device {d}: {when} segment sizes")
        alloc = 0
        for s in segs:
            off = 0
            for (o, size, state, _req) in s["blocks"]:
                check(o == off, f"device {d}: {when} blocks not contiguous")
                off += size
                alloc += size if state == 1 else 0
            check(off == s["size"], f"device {d}: {when} blocks do not fill the segment")
        check(alloc == frag["allocated"], f"device {d}: {when} allocated blocks")

    tl = dev["timeline"]
    samples = tl["samples"]
    check(tl["clock"] == "events" and len(samples) > 1, f"device {d}: timeline")
    check(all(a[0] <= b[0] for a, b in zip(samples, samples[1:])), f"device {d}: time goes back")
    check(samples[-1][1] == stats["allocated_bytes.all.current"], f"device {d}: timeline allocated now")
    check(samples[-1][2] == stats["reserved_bytes.all.current"], f"device {d}: timeline reserved now")
    check(max(s[3] for s in samples) == stats["allocated_bytes.all.peak"], f"device {d}: timeline allocated peak")
    check(max(s[4] for s in samples) == stats["reserved_bytes.all.peak"], f"device {d}: timeline reserved peak")
    check(dev["advice"] and all(a["text"] and a["rule"] for a in dev["advice"]), f"device {d}: advice")
    return {a["rule"]: a["text"] for a in dev["advice"]}


def is_count(v):
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


ROW_KEYS = {"conf": str, "peak_reserved_bytes": int, "peak_allocated_bytes": int, "num_device_alloc": int,
            "num_ooms": int, "delta": int, "device_calls": int, "estimated_call_ms": float}


def check_row(d, r, cur_peak, where):
    check(isinstance(r, dict) and set(r) == set(ROW_KEYS), f"device {d}: {where} keys {sorted(r)}")
    for k, t in ROW_KEYS.items():
        v = r.get(k)
        check(isinstance(v, t) and not isinstance(v, bool), f"device {d}: {where}.{k} = {v!r} is not {t.__name__}")
        if t is float:
            check(v >= 0, f"device {d}: {where}.{k} negative")
        if t is int and k != "delta":
            check(is_count(v), f"device {d}: {where}.{k} negative")
    if cur_peak is not None:
        check(r["delta"] == r["peak_reserved_bytes"] - cur_peak, f"device {d}: {where} delta {r['delta']} "
              f"!= {r['peak_reserved_bytes']} - {cur_peak}")
    check(r["peak_allocated_bytes"] <= r["peak_reserved_bytes"], f"device {d}: {where} allocated above reserved")


def check_whatif_schema(dev, expect_measured):
    """what_if, what_if_replay and vmm: types, ranking, deltas against the current row."""
    d = dev["device"]
    wi, meta, vmm = dev.get("what_if"), dev.get("what_if_replay"), dev.get("vmm")
    check(isinstance(wi, list) and isinstance(meta, dict) and isinstance(vmm, dict), f"device {d}: what-if sections")
    if not (isinstance(wi, list) and isinstance(meta, dict) and isinstance(vmm, dict)):
        return
    check(meta.get("measured") is expect_measured, f"device {d}: measured = {meta.get('measured')!r}")
    check(isinstance(meta.get("note"), str), f"device {d}: note")
    for k in ["events", "events_dropped", "history_cap", "capacity_bytes", "configurations_planned",
              "configurations_replayed"]:
        check(is_count(meta.get(k)), f"device {d}: what_if_replay.{k} = {meta.get(k)!r}")
    for k in ["seconds", "bound_seconds"]:
        check(isinstance(meta.get(k), (int, float)) and meta[k] >= 0, f"device {d}: what_if_replay.{k}")
    check(meta["configurations_replayed"] <= meta["configurations_planned"], f"device {d}: replayed > planned")
    if not expect_measured:
        check(wi == [] and meta["current"] is None and meta.get("recommended", 0) is None,
              f"device {d}: unmeasured what-if not empty")
    else:
        cur = meta["current"]
        check_row(d, cur, None, "current")
        check(cur["delta"] == 0, f"device {d}: current delta {cur['delta']}")
        # The replay reproduces the run it came from: the current row's peak is the run's.
        check(cur["peak_reserved_bytes"] == dev["stats"]["reserved_bytes.all.peak"],
              f"device {d}: current replayed peak {cur['peak_reserved_bytes']} vs the run's")
        check(meta["events"] > 0 and meta["events_dropped"] == 0, f"device {d}: events {meta['events']}")
        # Every block event of the run is in the history, the fast paths' batched ones included
        # (a free reusable at once is kept as one record for its request and its completion, and
        # must come back as both): allocations, free requests, completions, out-of-memory events.
        s = dev["stats"]
        made = s["allocation.all.allocated"] + s["allocation.all.freed"] + s["active.all.freed"] + s["num_ooms"]
        check(meta["events"] == made, f"device {d}: {meta['events']} events in the history, the run made {made}")
        # Every replayed configuration but the current one is listed (the current one may repeat a
        # grid entry under another spelling, hence - 1 or not).
        check(len(wi) in (meta["configurations_replayed"] - 1, meta["configurations_replayed"]),
              f"device {d}: {len(wi)} rows for {meta['configurations_replayed']} replayed")
        for i, r in enumerate(wi):
            check_row(d, r, cur["peak_reserved_bytes"], f"what_if[{i}]")
        keys = [(r["num_ooms"], r["peak_reserved_bytes"], r["num_device_alloc"]) for r in wi]
        check(keys == sorted(keys), f"device {d}: what_if not ranked (OOMs, peak, device allocs)")
        confs = [r["conf"] for r in wi]
        check(len(set(confs)) == len(confs), f"device {d}: a configuration listed twice")
        # The tuner's choice is one of the rows (or the current one), and its rule is stated.
        rec = meta.get("recommended")
        check(isinstance(rec, dict) and (rec == cur or rec in wi), f"device {d}: recommended {rec!r} not a row")
        check(isinstance(meta.get("rule"), str) and meta["rule"].startswith("rule: fewest OOMs"),
              f"device {d}: rule {meta.get('rule')!r}")
        check(cur["conf"] == dev["config"] or cur["conf"] in dev["config"] or dev["config"].startswith(cur["conf"]),
              f"device {d}: current conf {cur['conf']!r} vs the run's {dev['config']!r}")
    for when in ["at_peak", "at_exit"]:
        v = vmm.get(when)
        frag = dev["fragmentation"][when]
        check((v is None) == (frag is None), f"device {d}: vmm.{when} present iff its layout is")
        if v is None:
            continue
        check(set(v) == {"segments", "address_space_bytes", "mapped_bytes", "unmapped_bytes", "unmapped_holes"}
              and all(is_count(x) for x in v.values()), f"device {d}: vmm.{when} = {v}")
        check(v["mapped_bytes"] <= frag["reserved"], f"device {d}: vmm.{when} mapped above reserved")
        check(v["unmapped_bytes"] <= v["address_space_bytes"], f"device {d}: vmm.{when} unmapped above space")


def exit_report(prog):
    """A real exit report: the Quick start program under the preload (env from meson)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "r.json")
        p = subprocess.run([prog], env=dict(os.environ, CCI_REPORT=str(path)), capture_output=True, text=True,
                           timeout=120)
        check(p.returncode == 0, f"{prog} failed: {p.stderr[-300:]}")
        rep = json.loads(path.read_text(encoding="utf-8"))
    for dev in rep["devices"]:
        check_whatif_schema(dev, True)
    wi = rep["devices"][0]["what_if"]
    check(wi and wi[0]["delta"] < 0, "the Quick start scenario has a lower setting in the grid")
    check(any(r["delta"] > 0 for r in wi), "some replayed settings peak higher: deltas of both signs")


def exit_history(argv):
    """A real exit report of any program (env from meson): every block event of the run is in the
    history. For a loop of fast-path pairs, whose thread caches hand their logs over full (the
    history keeps such a log as its records, tcache.c / history.c). With --trace CCREPLAY first,
    the run also writes a trace (an observer told one event at a time, from the same logs), which
    must hold every event too and peak where the statistics did."""
    replay = None
    if argv[0] == "--trace":
        replay, argv = argv[1], argv[2:]
    with tempfile.TemporaryDirectory() as tmp:
        path, trace = Path(tmp, "r.json"), Path(tmp, "t.bin")
        env = dict(os.environ, CCI_REPORT=str(path))
        if replay:
            env["CCI_TRACE"] = str(trace)
        p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
        check(p.returncode == 0, f"{argv[0]} failed: {p.stderr[-300:]}")
        rep = json.loads(path.read_text(encoding="utf-8"))
        if replay:
            r = subprocess.run([replay, "--json", str(trace)], capture_output=True, text=True, timeout=120)
            check(r.returncode == 0, f"ccreplay failed: {r.stderr[-300:]}")
            tr = json.loads(r.stdout)
    for dev in rep["devices"]:
        d, meta, s = dev["device"], dev["what_if_replay"], dev["stats"]
        costs = check_costs(dev)
        # Under the preload the backend counts every record the core's batches made (and more).
        check(costs.get("fence_record_calls", 0) >= dev["counters"]["num_fence_records"],
              f"device {d}: {costs.get('fence_record_calls')} fence records counted by the backend, "
              f"{dev['counters']['num_fence_records']} by the core")
        made = s["allocation.all.allocated"] + s["allocation.all.freed"] + s["active.all.freed"] + s["num_ooms"]
        check(s["allocation.all.allocated"] > 10000, f"device {d}: only {s['allocation.all.allocated']} allocations")
        if os.environ.get("CCI_HISTORY_MAX"):  # a cap below the run: every event kept or counted as dropped
            check(meta["events_dropped"] > 0 and meta["events"] + meta["events_dropped"] == made,
                  f"device {d}: {meta['events']} events kept and {meta['events_dropped']} dropped, the run made {made}")
        else:
            check(meta["events"] == made and meta["events_dropped"] == 0,
                  f"device {d}: {meta['events']} events in the history ({meta['events_dropped']} dropped), the run made {made}")
            # The records themselves, not only their count: replayed under the run's own setting,
            # the history allocates what the run did, up to the same peak.
            cur = meta["current"]
            check(cur is not None and cur["peak_allocated_bytes"] == s["allocated_bytes.all.peak"],
                  f"device {d}: the history replays to an allocated peak of "
                  f"{cur and cur['peak_allocated_bytes']}, the run peaked at {s['allocated_bytes.all.peak']}")
        # The timeline, which hears the fast paths' events in sums (its batch door): it ends at the
        # allocated bytes of the end and peaks at the run's peak.
        samples = dev["timeline"]["samples"]
        check(samples[-1][1] == s["allocated_bytes.all.current"] and
              max(x[3] for x in samples) == s["allocated_bytes.all.peak"],
              f"device {d}: the timeline ends at {samples[-1][1]} allocated and peaks at "
              f"{max(x[3] for x in samples)}, the run at {s['allocated_bytes.all.current']} and "
              f"{s['allocated_bytes.all.peak']}")
        if replay:
            segments = s["segment.all.allocated"] + s["segment.all.freed"]
            check(tr["events"] == made + segments and tr["missing_events"] == 0 and tr["unmatched_frees"] == 0,
                  f"device {d}: the trace holds {tr['events']} events, the run made {made} and {segments} segment events")
            check(tr["peak_allocated_bytes"] == s["allocated_bytes.all.peak"],
                  f"device {d}: the trace peaks at {tr['peak_allocated_bytes']}, the run at {s['allocated_bytes.all.peak']}")


def main():
    if sys.argv[1] == "--exit-history":
        exit_history(sys.argv[2:])
        for f in failures:
            print("FAIL:", f)
        print(f"{len(failures)} failure(s)")
        return 1 if failures else 0
    if sys.argv[1] == "--exit-report":
        exit_report(sys.argv[2])
        for f in failures:
            print("FAIL:", f)
        print(f"{len(failures)} failure(s)")
        return 1 if failures else 0
    fixture = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([fixture, "json", tmp], check=True)
        text = Path(tmp, "report.json").read_text(encoding="utf-8")
        report = json.loads(text)
        st = {}
        for line in Path(tmp, "stats.txt").read_text().splitlines():
            dev, key, value = line.split()
            st.setdefault(int(dev), {})[key] = int(value)
    check(report["process"]["program"] == './tr"ai\\n\n\t\x01 \u00e9', "escaped program name")
    check(report["process"]["pid"] == 4242, "process pid")
    devices = report["devices"]
    check([d["device"] for d in devices] == [0, 1, 2], "three devices")
    advice = [check_device(dev, st[dev["device"]]) for dev in devices]
    for dev in devices:
        check_whatif_schema(dev, False)  # the fixture measures no what-ifs: the sections say so
    check("max_split_size_mb:32" in devices[1]["config"], "device 1 configuration")
    check(devices[1]["stats"]["max_split_size"] == 32 * MiB, "device 1 max_split_size")
    check(devices[0]["stats"]["max_split_size"] == -1, "unlimited max_split_size reads -1 as in PyTorch")
    check("max_split_size_mb:64" in advice[2].get("max_split_size", ""), "device 2 split advice")
    check("oversize_idle" in advice[1], "device 1 oversize advice")
    check("peak_waste" in advice[0], "device 0 waste advice")
    m = devices[2]["fragmentation"]["misses"]
    check(m["large_count"] == 1 and m["large_min_request"] == 64 * MiB, f"device 2 misses {m}")
    check(devices[2]["stats"]["num_ooms"] == 1, "device 2 OOM")
    for f in failures:
        print("FAIL:", f)
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
