# SPDX-License-Identifier: MIT
"""Usage: costs_check.py PROGRAM [ARGS...]

Runs PROGRAM (tests/preload/costs.c, under the preload with CCI_LOG=info) and checks that the
exit lines of what fences and VMM calls cost the host (cuda/fence_costs.c, cuda/vmm.c) show the
figures the program read from cci_get_stats last ("stat NAME VALUE" on stdout): one source. The
program also writes its JSON report, whose "costs" (the device's own) and "process_costs" must
hold the same figures: every device the process's fence figures, the devices' VMM figures summed."""
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

N = r"(\d+)"
MS = r"(\d+\.\d)"
LINES = {
    "fence": (rf"fence costs on the host: {N} records \({N} events, {N} barriers\) {MS} ms; {N} queries "
              rf"\({N} events\) {MS} ms; {N} waits \({N} events\) blocked {MS} ms; non-blocking streams, "
              rf"looked at lazily: {N} stream queries \({N} idle\), {N} sweeps recorded, {N} sweep/retired "
              rf"event queries, {N} looks put off",
              ["fence_record_calls", "fence_record_events", "fence_barrier_records", "fence_record_ns",
               "fence_query_calls", "fence_query_events", "fence_query_ns", "fence_wait_calls",
               "fence_wait_events", "fence_wait_ns", "fence_stream_queries", "fence_stream_idle_answers",
               "fence_sweeps", "fence_shared_event_queries", "fence_looks_put_off"]),
    "context": (rf"context fences \(one event for every stream of a device\): {N} of the records above, "
                rf"{N} orders; {N} times the host first waited for the GPU to reach the last order, "
                rf"blocked {MS} ms; now",
                ["fence_context_records", "fence_context_orders", "fence_catch_up_calls", "fence_catch_up_ns"]),
    "orders": (rf"fences ordered on the GPU instead of waited for: {N} rounds, {N} more covered by an "
               rf"earlier round \({N} stream waits queued, {MS} ms; {N} streams not asked, found idle "
               rf"since\); {N} refused \(the host waited\); {N} answered behind the last order",
               ["fence_orders_made", "fence_orders_covered", "fence_order_stream_waits", "fence_order_ns",
                "fence_order_skips", "fence_orders_refused", "fence_orders_behind"]),
    "reuse": (rf"orders at reuse: {N} frees joined the pool at once, their fence skipped; {N} orders "
              rf"before such blocks went to new owners, {MS} ms; {N} refused \(the allocation waited for "
              rf"a fence\)",
              ["fence_reuse_frees", "fence_reuse_orders", "fence_reuse_order_ns", "fence_reuse_refused"]),
    "vmm": (rf"virtual-memory calls on the host: {N} cuMemCreate {MS} ms, {N} cuMemMap {MS} ms, "
            rf"{N} cuMemSetAccess {MS} ms, {N} cuMemUnmap {MS} ms, {N} cuMemRelease {MS} ms",
            ["vmm_create_calls", "vmm_create_ns", "vmm_map_calls", "vmm_map_ns", "vmm_set_access_calls",
             "vmm_set_access_ns", "vmm_unmap_calls", "vmm_unmap_ns", "vmm_release_calls", "vmm_release_ns"]),
}
# Lines that must be there for this program: it records, waits and maps pages.
REQUIRED = {"fence", "vmm"}


def check_report(rep, stats, failures):
    devices = rep["devices"]
    summed = {}
    for dev in devices:
        costs, process = dev.get("costs", {}), dev.get("process_costs", {})
        if set(costs) != {k for k in stats if k.startswith("vmm_")} or \
                set(process) != {k for k in stats if k.startswith("fence_")}:
            failures.append(f"device {dev['device']}: report keys {sorted(costs)} / {sorted(process)}")
            return
        for k, v in process.items():
            if v != stats[k]:
                failures.append(f"device {dev['device']}: process_costs.{k} = {v}, the statistics {stats[k]}")
        for k, v in costs.items():
            summed[k] = summed.get(k, 0) + v
    for k, v in summed.items():
        if v != stats[k]:
            failures.append(f"the devices' costs.{k} add up to {v}, the statistics {stats[k]}")
    print(f"ok: the JSON report of {len(devices)} device(s) holds the same cost figures")


def main():
    tmp = tempfile.TemporaryDirectory()
    report = Path(tmp.name, "report.json")
    p = subprocess.run(sys.argv[1:] + ["--report", str(report)], capture_output=True, text=True, timeout=120)
    sys.stdout.write(p.stdout)
    failures = []
    if p.returncode != 0:
        print(f"FAIL: the program failed ({p.returncode}): {p.stderr[-500:]}")
        return 1
    stats = {}
    for line in p.stdout.splitlines():
        if line.startswith("stat "):
            _, name, value = line.split()
            stats[name] = int(value)
    if len(stats) != 46:
        failures.append(f"{len(stats)} cost figures printed, not 46")
    for what, (pattern, names) in LINES.items():
        found = re.findall(pattern, p.stderr)
        if not found:
            if what in REQUIRED:
                failures.append(f"no '{what}' exit line in: {p.stderr[-800:]}")
            elif what == "orders" and (stats.get("fence_orders_made") or stats.get("fence_orders_refused")
                                       or stats.get("fence_orders_behind")):
                failures.append("no orders line, though orders were decided")
            elif what == "reuse" and stats.get("fence_reuse_frees"):
                failures.append("no orders-at-reuse line, though frees skipped their fence")
            continue
        before = len(failures)
        if len(found) != 1:
            failures.append(f"the '{what}' line {len(found)} times")
        for name, shown in zip(names, found[-1]):
            want = stats.get(name)
            if want is None:
                failures.append(f"{name} not printed by the program")
            elif name.endswith("_ns"):
                if shown != f"{want / 1e6:.1f}":
                    failures.append(f"{what} line: {name} shows {shown} ms, the statistics {want} ns")
            elif int(shown) != want:
                failures.append(f"{what} line: {name} shows {shown}, the statistics {want}")
        if len(failures) == before:
            print(f"ok: the '{what}' exit line shows the statistics' {len(names)} figures")
    check_report(json.loads(report.read_text(encoding="utf-8")), stats, failures)
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
