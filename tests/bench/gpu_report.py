#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The closing tables of scripts/gpu-check.sh and scripts/gpu-bench.sh, from the logs they left in
their log folder (LOG_DIR below).

  gpu_report.py check LOG_DIR   workloads (WORKLOADS) in every configuration (CONFIGS) vs native,
                                over every round; exit 1 on a result_sum mismatch or a failed run
  gpu_report.py ddp LOG_DIR     the DDP rows (scripts/gpu-ddp.sh): wall time, and per rank the
                                allocator's and NVML's peaks vs native; exit 1 as for check
  gpu_report.py bench LOG_DIR   every ratio of the benchmark run, each with its target where it
                                has one

Inputs: LOG_DIR/torch-<workload>-<config>-r<round>.log (a torch_run.py JSON line among the output;
a lone torch-<workload>-<config>.log is round 1), LOG_DIR/ddp-<config>-r<round>.log
(ddp_encoder.py), LOG_DIR/report-ddp-stacks-rank<r>.json (the preload's report under CCI_STACKS),
LOG_DIR/bench_alloc.json (alloc_table.py), LOG_DIR/torch_loop-<config>.log (torch_loop.py).
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from repeat_stats import TIME_TARGET, fastest_ratio, median, quartile_ratio, time_figures  # noqa: E402

WORKLOADS = ["encoder", "resnet", "seedfrag"]
SIZE_NAMES = {512: "512 B", 64 << 10: "64 KiB", 1 << 20: "1 MiB", 20 << 20: "20 MiB", 256 << 20: "256 MiB"}


def last_json(path, key):
    try:
        with open(path, errors="replace") as f:
            lines = [l for l in f if l.startswith("{") and f'"{key}"' in l]
        return json.loads(lines[-1]) if lines else None
    except (OSError, ValueError):
        return None


def workload(log_dir, name, config):
    return last_json(os.path.join(log_dir, f"torch-{name}-{config}.log"), "workload")


def peak_reserved(r, ours):
    """Ours from the preload's statistics (PyTorch's figure is meaningless without its cache)."""
    if not r:
        return None
    if ours:
        c = r.get("cci") or {}
        return c.get("peak_reserved_mib")
    return r.get("peak_reserved_mib")


def f(v, spec=".1f", unit=""):
    return "-" if v is None else f"{v:{spec}}{unit}"


def div(a, b):
    return a / b if a is not None and b else None


def rx(v, suffix="x"):
    """A ratio with as many digits as its size deserves."""
    if v is None:
        return "-"
    return f"{v:.0f}{suffix}" if v >= 10 else f"{v:.2f}{suffix}"


CHECK_LABELS = {
    "native": "PyTorch native", "native-expandable": "PyTorch expandable",
    "ours": "ours default", "ours-fences": "ours, fences per batch", "ours-immediate": "ours immediate", "ours-expandable": "ours expandable",
    "ours-compact": "ours compact", "ours-ordinary": "ours ordinary segments", "ours-torch-cache": "ours + PyTorch cache",
    "ours-no-budget": "ours, no fence budget", "ours-pluggable": "ours as PyTorch's pluggable allocator",
    "ours-async": "ours behind PyTorch's backend:cudaMallocAsync",
    "ours-async-compact": "ours compact behind backend:cudaMallocAsync",
}


def load_rounds(log_dir, stem, key):
    """{round: JSON line or None} from LOG_DIR/STEM-r<k>.log (None: the run left no result). A lone
    LOG_DIR/STEM.log, as written before REPEATS, counts as round 1."""
    rounds = {}
    try:
        names = os.listdir(log_dir)
    except OSError:
        return rounds
    for name in names:
        m = re.fullmatch(re.escape(stem) + r"-r(\d+)\.log", name)
        if m:
            rounds[int(m.group(1))] = last_json(os.path.join(log_dir, name), key)
    if not rounds and os.path.exists(os.path.join(log_dir, f"{stem}.log")):
        rounds[1] = last_json(os.path.join(log_dir, f"{stem}.log"), key)
    return rounds


# DDP's result_sum is not bit-reproducible natively: in ten identical trials of one torchrun job
# on two H200s (with and without torch.use_deterministic_algorithms) every trial's
# per-step losses differed from the others' in their last bit (NCCL and the backward pass's
# reductions), and the sum of 44 losses (~43.8) came out 1 ulp apart once in 30 runs of ours and
# of immediate reuse. A block reused early changes a loss at the 1e-3 level or makes it NaN. So the
# DDP check allows a relative difference of DDP_SUM_REL_TOL (about 11 ulps at that sum); the
# single-GPU workloads stay exact. (docs/benchmarks.md, "DDP on two GPUs", 2026-11-24, b27df32.)
DDP_SUM_REL_TOL = 1e-6


def sums_agree(a, b, rel_tol):
    if a is None or b is None or rel_tol == 0:
        return a == b
    return abs(a - b) <= rel_tol * max(abs(a), abs(b))


def check_result_sums(what, runs_by_config, rel_tol=0.0):
    """Every run of every configuration must give native's first result_sum (else the first
    one found), within rel_tol: a list of failure lines, empty when all agree."""
    ref = None
    for c in ["native"] + sorted(runs_by_config):
        for r in sorted(runs_by_config.get(c, {})):
            run = runs_by_config[c][r]
            if run and ref is None:
                ref = (run.get("result_sum"), c, r)
    if ref is None:
        return []
    bad = []
    for c, rounds in runs_by_config.items():
        for r, run in sorted(rounds.items()):
            if run and not sums_agree(run.get("result_sum"), ref[0], rel_tol):
                bad.append(f"{what}/{c} round {r}: result_sum {run.get('result_sum')} differs from "
                           f"{ref[1]} round {ref[2]}'s {ref[0]}")
    return bad


def med(values):
    vals = [v for v in values if v is not None]
    return median(vals) if vals else None


def mx(values):
    vals = [v for v in values if v is not None]
    return max(vals) if vals else None


def seconds_by_round(rounds):
    return {r: run["seconds"] for r, run in rounds.items() if run and run.get("seconds") is not None}


def every_timed_run(rounds):
    """Every timed run of every process (torch_run.py's seconds_runs; a line without it, its
    seconds), for fastest_ratio and quartile_ratio."""
    runs = []
    for run in rounds.values():
        if run and run.get("seconds") is not None:
            runs.extend(run.get("seconds_runs") or [run["seconds"]])
    return runs


def time_table_row(what, label, fig):
    spread_text = "-" if fig["min"] is None else f"{fig['min']:.3f}-{fig['max']:.3f}"
    iv = fig.get("x_interval")
    iv_text = "-" if iv is None else f"{iv[0]:.3f}-{iv[1]:.3f}"
    return (f"{what:<10}{label:<22}{fig['runs']:>5}{f(fig['median'], '.3f'):>10}{spread_text:>15}"
            f"{f(None if fig['spread'] is None else fig['spread'] * 100, '.1f', ' %'):>9}"
            f"{f(fig['x_medians'], '.3f'):>10}{f(fig['x_paired'], '.3f'):>9}{iv_text:>14}"
            f"{f(fig.get('x_fastest'), '.3f'):>9}{f(fig.get('x_quartile'), '.3f'):>9}  {fig['verdict']}")


TIME_HEADER = (f"{'':<10}{'configuration':<22}{'runs':>5}{'median s':>10}{'min-max s':>15}{'spread':>9}"
               f"{'x native':>10}{'paired':>9}{'95 % interval':>14}{'fastest':>9}{'p25':>9}"
               f"  verdict (target: within {TIME_TARGET * 100:.0f} % of native)")


def check(log_dir):
    """Per workload and configuration over every round: peak reserved (median and max) and wall
    time (median) against PyTorch native in one table, then the wall-time verdicts. Ours is read
    from the preload's statistics (PyTorch's reserved figure means nothing with its cache off).
    Fails on a missing run, an inactive preload, or any result_sum differing from native's."""
    configs = os.environ.get("CONFIGS", "native ours").split()
    workloads = os.environ.get("WORKLOADS", " ".join(WORKLOADS)).split()
    bad = []
    times = []   # (workload, label, time figures) for the second table
    nvml = []    # (workload, label, median, max, x native, x PyTorch expandable): the NVML table
    nrounds = 0
    print("Workloads: peak reserved and wall time against PyTorch native (same call, same device; medians "
          "over the rounds, 'peak max' the largest peak of any round)")
    # x alloc: peak reserved over the peak allocated bytes the same allocator saw (ours: every
    # cudaMalloc of the process, cuBLAS/cuDNN workspaces included; PyTorch: its own tensors).
    print(f"{'workload':<10}{'configuration':<22}{'peak reserved':>15}{'peak max':>10}{'x native':>10}{'x alloc':>9}"
          f"{'seconds':>10}{'x native':>10}  {'result_sum':>22}  match  {'syncs':>6} {'fences':>7} {'waits':>6} {'catch-ups':>9}")
    for w in workloads:
        runs = {c: load_rounds(log_dir, f"torch-{w}-{c}", "workload") for c in configs}
        native = runs.get("native") or load_rounds(log_dir, f"torch-{w}-native", "workload")
        nrounds = max([nrounds] + [len(r) for r in runs.values()])
        good_native = {r: x for r, x in native.items() if x}
        if not good_native:
            print(f"{w:<10} native run failed: see torch-{w}-native-r*.log")
            bad.append(f"{w}/native")
            continue
        mismatches = check_result_sums(w, {**runs, "native": native})
        bad.extend(mismatches)
        n_peak = med(peak_reserved(x, False) for x in good_native.values())
        n_nvml = med(x.get("nvml_peak_mib") for x in good_native.values())
        e_nvml = med(x.get("nvml_peak_mib") for x in (runs.get("native-expandable") or {}).values() if x)
        n_secs = seconds_by_round(good_native)
        for c in configs:
            label = CHECK_LABELS.get(c, c)
            rounds = runs[c]
            failed = sorted(r for r, x in rounds.items() if not x)
            for r in failed:
                print(f"{w:<10}{label:<22} round {r} failed: see torch-{w}-{c}-r{r}.log")
                bad.append(f"{w}/{c} round {r}")
            good = {r: x for r, x in rounds.items() if x}
            if not good:
                if not rounds:
                    print(f"{w:<10}{label:<22} no run found (torch-{w}-{c}-r*.log)")
                    bad.append(f"{w}/{c}")
                continue
            ours = c.startswith("ours")
            inactive = [r for r, x in good.items() if ours and not (x.get("cci") or {}).get("active")]
            if inactive:
                print(f"{w:<10}{label:<22} the preload was not active in round(s) {inactive}")
                bad.append(f"{w}/{c}")
                continue
            ccs = [(x.get("cci") or {}) for x in good.values()]
            peaks = [peak_reserved(x, ours) for x in good.values()]
            pr, pmax = med(peaks), mx(peaks)
            pa = med((cc if ours else x).get("peak_allocated_mib") for cc, x in zip(ccs, good.values()))
            secs = seconds_by_round(good)
            fig = time_figures(secs, n_secs)
            fig["x_fastest"] = fastest_ratio(every_timed_run(good), every_timed_run(good_native))
            fig["x_quartile"] = quartile_ratio(every_timed_run(good), every_timed_run(good_native))
            times.append((w, label, fig, c.startswith("ours")))
            nv = [x.get("nvml_peak_mib") for x in good.values()]
            if med(nv) is not None:
                nvml.append((w, label, med(nv), mx(nv), div(med(nv), n_nvml), div(med(nv), e_nvml)))
            match = not any(f"{w}/{c} round" in m for m in mismatches)
            sums = sorted({x.get("result_sum") for x in good.values()}, key=str)
            counter = (lambda k: med(cc.get(k) for cc in ccs)) if ours else (lambda k: None)
            print(f"{w:<10}{label:<22}{f(pr, '.0f', ' MiB'):>15}{f(pmax, '.0f'):>10}{f(div(pr, n_peak), '.3f'):>10}"
                  f"{f(div(pr, pa), '.3f'):>9}{f(fig['median'], '.3f'):>10}{f(fig['x_medians'], '.3f'):>10}"
                  f"  {f(sums[0] if len(sums) == 1 else None, '.6f'):>22}  {'yes' if match else 'NO':<5}"
                  f"  {f(counter('num_sync_all_streams'), '.0f'):>6}"
                  f" {f(counter('num_fence_records'), '.0f'):>7}"
                  f" {f(counter('num_fence_waits'), '.0f'):>6}"
                  f" {f(counter('num_fence_catch_ups'), '.0f'):>9}")
    if nvml:
        # What the device gave the whole process (torch_run.py --nvml): the one figure that counts
        # alike on both sides what PyTorch's counters never see under its own allocator (cuBLAS's
        # cudaMalloc at handle creation, which reaches our pool under the preload).
        print()
        print("NVML peaks: the process's device memory, the CUDA context and every library's own allocations "
              "included on both sides (medians over the rounds)")
        print(f"{'workload':<10}{'configuration':<22}{'NVML peak':>12}{'peak max':>10}{'x native':>10}{'x PT expandable':>17}")
        for w, label, m, top, xn, xe in nvml:
            print(f"{w:<10}{label:<22}{f(m, '.0f', ' MiB'):>12}{f(top, '.0f'):>10}{f(xn, '.4f'):>10}{f(xe, '.4f'):>17}")
    if times:
        print()
        print(f"Wall time over {nrounds} round(s), every configuration once per round, the order rotated "
              f"each round; spread = (max - min) / median; paired = median of ours_r / native_r; "
              f"95 % interval: bootstrap of the ratio of medians over the processes; fastest = the "
              f"fastest timed run over native's, both in the host's fast speed; p25 = the first quartile "
              f"of every timed run over native's (repeat_stats.py)")
        print(TIME_HEADER)
        for w, label, fig, judged in times:
            if not judged:
                fig = dict(fig, verdict="(no target)" if label != "PyTorch native" else "(the reference)")
            print(time_table_row(w, label, fig))
    for b in bad:
        print(f"FAILED: {b}")
    return 1 if bad else 0


def bench(log_dir):
    rows = []  # (figure, ours, anchor, ratio text, target, verdict)

    def add(fig, ours, anchor, ratio, target="", ok=None):
        rows.append((fig, ours, anchor, ratio, target, "" if ok is None else ("met" if ok else "NOT met")))

    ba = None
    try:
        with open(os.path.join(log_dir, "bench_alloc.json")) as fh:
            ba = json.load(fh)
    except (OSError, ValueError):
        pass
    def p99(label, size_name):
        r = (ba or {}).get("results", {}).get(label) or {}
        for e in r.get("sizes", []):
            if SIZE_NAMES.get(e["bytes"]) == size_name:
                return e["p99_ns"]
        return None

    def with_p99(v, label, size_name):
        q = p99(label, size_name)
        return f(v, ".0f", " ns") + ("" if q is None else f" (p99 {q:.0f})")

    if ba:
        # The hook fast path's targets, each against its anchor in the same run: a cached default
        # pair <= 100 ns at every size through the runtime and the driver hooks, >= 12x under
        # cudaMallocAsync+cudaFreeAsync; the same-stream async pair through our hooks <= 60 ns;
        # the mixed workload <= 150 ns/op on every path. The table holds each configuration's
        # median over alloc_table.py's rounds.
        table = {r["row"]: r for r in ba["table"]}
        for size in ("512 B", "1 MiB", "20 MiB", "256 MiB"):
            r = table.get(size, {})
            d, i, m, a = r.get("ours default"), r.get("ours immediate"), r.get("raw malloc"), r.get("raw async")
            add(f"pair {size}: ours default vs cudaMalloc", with_p99(d, "ours default", size),
                f(div(m, 1000), ".1f", " us"), rx(div(m, d)), "<= 100 ns", d <= 100 if d is not None else None)
            add(f"pair {size}: ours default vs cudaMallocAsync", f(d, ".0f", " ns"), f(a, ".0f", " ns"),
                rx(div(a, d)), ">= 12x", div(a, d) >= 12 if div(a, d) else None)
            sd = r.get("static ours default")
            add(f"pair {size}: ours default, driver hooks (static)", f(sd, ".0f", " ns"), f(a, ".0f", " ns"),
                rx(div(a, sd)), "<= 100 ns", sd <= 100 if sd is not None else None)
            oa = r.get("ours async")
            add(f"pair {size}: ours async pair (same stream)", f(oa, ".0f", " ns"), f(a, ".0f", " ns"),
                rx(div(a, oa)), "<= 60 ns", oa <= 60 if oa is not None else None)
            add(f"pair {size}: ours immediate vs cudaMallocAsync", with_p99(i, "ours immediate", size),
                f(a, ".0f", " ns"), rx(div(a, i)))
        r = table.get("mixed", {})
        m, a = r.get("raw malloc"), r.get("raw async")
        for label in ("ours default", "ours immediate", "ours async"):
            d = r.get(label)
            add(f"mixed workload: {label}", f(d, ".0f", " ns/op"), f(a, ".0f", " ns/op"), rx(div(a, d)),
                "<= 150 ns/op", d <= 150 if d is not None else None)
        # The H100 host runs each process at one of two speeds (a cached pair cost ~48 or ~78 ns a
        # process, older and newer code alike: docs/benchmarks.md, "the H100 host's two speeds",
        # 2026-11-24, 30571c4), and a median over three processes lands on either. So the same
        # targets are judged on each configuration's fastest process too (the lowest of its
        # processes' figures), beside the medians above.
        def fastest(label, pick):
            procs = (ba["results"].get(label) or {}).get("rounds") or []
            vals = [v for v in (pick(x) for x in procs) if v is not None]
            return min(vals) if vals else None

        def size_ns(size):
            return lambda x: next((e["median_ns"] for e in x.get("sizes", []) if SIZE_NAMES.get(e["bytes"]) == size),
                                  None)

        for size in ("512 B", "1 MiB", "20 MiB", "256 MiB"):
            for label, what, target in (("ours default", "ours default", 100), ("ours async", "ours async pair", 60)):
                v = fastest(label, size_ns(size))
                add(f"fastest process, pair {size}: {what}", f(v, ".0f", " ns"),
                    f(fastest("raw async", size_ns(size)), ".0f", " ns"), "", f"<= {target} ns",
                    v <= target if v is not None else None)
        for label in ("ours default", "ours async"):
            v = fastest(label, lambda x: x.get("mixed_warm_ns_per_op"))
            add(f"fastest process, mixed: {label}", f(v, ".0f", " ns/op"),
                f(fastest("raw async", lambda x: x.get("mixed_warm_ns_per_op")), ".0f", " ns/op"), "",
                "<= 150 ns/op", v <= 150 if v is not None else None)
        static = ba["results"].get("static ours default") or {}
        if static and not static.get("failed"):
            add("static-cudart build under the preload", f"served {static.get('served')}", "", "",
                "")

    # The driver level split (driver_table.py): our driver hooks called directly, and what a static
    # cudart adds in front of them, medians over its rounds. Figures only: the target above is the
    # static row's.
    try:
        with open(os.path.join(log_dir, "driver_table.json")) as fh:
            drv = json.load(fh)
    except (OSError, ValueError):
        drv = {}
    for b in (512, 1 << 20, 20 << 20, 256 << 20):
        direct = med(drv.get(f"driver API cuMemAlloc_v2+cuMemFree_v2|{b}") or [])
        static = med(drv.get(f"static cudart cudaMalloc+cudaFree|{b}") or [])
        if direct is not None and static is not None:
            add(f"pair {SIZE_NAMES.get(b, b)}: driver hooks alone (driver API)", f(direct, ".0f", " ns"),
                f(static, ".0f", " ns"), f"cudart +{static - direct:.0f} ns")

    core = {}
    try:
        with open(os.path.join(log_dir, "bench_core.txt")) as fh:
            for line in fh:
                parts = line.split()
                if len(parts) == 3 and parts[0].isdigit() and parts[2].endswith("x"):
                    core[int(parts[0])] = (float(parts[1]), float(parts[2][:-1]))
    except (OSError, ValueError):
        pass
    if 1 in core and 8 in core:
        add("core, 8 threads vs 1 (pairs/s)", f"{core[8][0] / 1e6:.1f} M/s", f"{core[1][0] / 1e6:.1f} M/s",
            rx(core[8][1]), ">= 4x", core[8][1] >= 4)
    # The fast path's thread target through the hooks: 8 threads on their own streams against one.
    try:
        with open(os.path.join(log_dir, "bench_threads.json")) as fh:
            thread_rows = dict(json.load(fh).get("results", []))
    except (OSError, ValueError, TypeError):
        thread_rows = {}
    for name in ("ours async", "ours immediate_reuse", "CUDA cudaMallocAsync"):
        cells = (thread_rows.get(name) or {}).get("cells") or {}
        one, eight = cells.get("1"), cells.get("8")
        if one and eight:
            target = name.startswith("ours")
            add(f"threads: {name}, 8 vs 1 (pairs/s)", f"{eight / 1e6:.2f} M/s", f"{one / 1e6:.2f} M/s",
                rx(eight / one), ">= 4x" if target else "", (eight / one >= 4) if target else None)

    def loop(config):
        r = last_json(os.path.join(log_dir, f"torch_loop-{config}.log"), "label")
        return {s["bytes"]: s["median_ns"] for s in r["sizes"]} if r else {}

    native, ours, raw = loop("native"), loop("ours"), loop("nocache-raw")
    for size, name in ((512, "512 B"), (1 << 20, "1 MiB"), (256 << 20, "256 MiB")):
        n, o, u = native.get(size), ours.get(size), raw.get(size)
        add(f"torch.empty/del {name}: ours vs PyTorch cache", f(div(o, 1000), ".2f", " us"),
            f(div(n, 1000), ".2f", " us"), rx(div(o, n), "x the time"))
        if u:
            add(f"torch.empty/del {name}: ours vs no cache at all", f(div(o, 1000), ".2f", " us"),
                f(div(u, 1000), ".1f", " us"), rx(div(u, o), "x faster"))

    bad = []
    for w in WORKLOADS:
        n = workload(log_dir, w, "native")
        if not n:
            ran = os.path.exists(os.path.join(log_dir, f"torch-{w}-native.log"))
            add(f"{w}: end to end", "native run failed" if ran else "not run", "", "")
            continue
        for config, label in (("expandable", "expandable_segments"), ("async", "backend:cudaMallocAsync"),
                              ("ours", "ours"), ("ours-immediate", "ours immediate_reuse")):
            o = workload(log_dir, w, config)
            if not o:
                add(f"{w}: {label}", "run failed", "", "")
                continue
            same = o.get("result_sum") == n.get("result_sum")
            if not same:
                bad.append(f"{w}/{config}")
            pr = peak_reserved(o, config.startswith("ours"))
            t = div(o["seconds"], n["seconds"])
            target = "<= 1.02x, peak <= 1.0x" if config.startswith("ours") else ""
            ok = ((t <= 1.02 and div(pr, n["peak_reserved_mib"]) <= 1.0) if config.startswith("ours") and t and pr
                  else None)
            add(f"{w}: {label} vs native", f"{o['seconds']:.2f} s, {f(pr, '.0f')} MiB",
                f"{n['seconds']:.2f} s, {n['peak_reserved_mib']:.0f} MiB",
                f"time {f(t, '.3f')}x, peak {f(div(pr, n['peak_reserved_mib']), '.3f')}x"
                + ("" if same else ", RESULT_SUM DIFFERS"), target, ok)

    w0 = max(len(r[0]) for r in rows) if rows else 10
    print("Ratios (same run, same device)")
    print(f"{'figure':<{w0}}  {'ours':>22}  {'anchor':>22}  {'ratio':<36}{'target':<24}")
    for fig, o, a, r, t, v in rows:
        print(f"{fig:<{w0}}  {o:>22}  {a:>22}  {r:<36}{t:<24}{v}")
    for b in bad:
        print(f"MISMATCH: result_sum differs from native in {b}")
    return 1 if bad else 0


# Native frames of PyTorch's own allocator: with PYTORCH_NO_CUDA_MEMORY_CACHING=1 every tensor's
# cudaMalloc comes from c10's CUDA allocator in libc10_cuda.so. Any other caller (NCCL, cuBLAS,
# cuDNN, the CUDA runtime itself) asked for its memory directly.
PYTORCH_FRAME = re.compile(r"libc10_cuda|CUDACachingAllocator|c10::cuda")
LIBRARY_OF_FRAME = re.compile(r"\(([^()\s]+?)\+0x[0-9a-f]+\)$|^([^\s()]+?)\+0x[0-9a-f]+$")


def callers_at_peak(report, device=None):
    """From a preload JSON report written with CCI_STACKS: who held the live blocks when reserved
    memory made its peak. Returns None when the report has no call sites, else a dict with
    reserved, live, pytorch, other (bytes; pytorch + other cover the top call sites kept at the
    peak) and unclassified (live bytes of the smaller sites the peak did not keep), and
    other_by_library {library: bytes}."""
    devices = (report or {}).get("devices") or []
    dev = next((d for d in devices if device is None or d.get("device") == device), None)
    peak = ((dev or {}).get("holders") or {}).get("at_peak")
    if not peak:
        return None
    res = {"reserved": peak.get("reserved", 0), "live": peak.get("bytes", 0), "pytorch": 0, "other": 0,
           "other_by_library": {}}
    for site in peak.get("sites", []):
        frames = site.get("frames", [])
        if any(PYTORCH_FRAME.search(fr) for fr in frames):
            res["pytorch"] += site["bytes"]
            continue
        res["other"] += site["bytes"]
        lib = next((m.group(1) or m.group(2) for m in map(LIBRARY_OF_FRAME.search, frames) if m), "unknown")
        res["other_by_library"][lib] = res["other_by_library"].get(lib, 0) + site["bytes"]
    res["unclassified"] = max(0, res["live"] - res["pytorch"] - res["other"])
    return res


def ddp_callers(log_dir):
    """Lines saying how much of our reserved peak other callers than PyTorch asked for, from the
    one untimed run under CCI_STACKS (report-ddp-stacks-rank<r>.json)."""
    mib = 1 << 20
    files = sorted(n for n in (os.listdir(log_dir) if os.path.isdir(log_dir) else [])
                   if re.fullmatch(r"report-ddp-stacks-rank\d+\.json", n))
    if not files:
        return ["Callers at our reserved peak: n/a (no CCI_STACKS run: STACKS_RUN=1 gives it)"]
    lines = ["Callers at our reserved peak (one extra untimed run of ours default with CCI_STACKS=8; "
             "its peak may differ from the timed runs'):"]
    for name in files:
        rank = re.search(r"rank(\d+)", name).group(1)
        try:
            with open(os.path.join(log_dir, name)) as fh:
                c = callers_at_peak(json.load(fh))
        except (OSError, ValueError) as e:
            lines.append(f"  rank {rank}: n/a ({name}: {e})")
            continue
        if c is None:
            lines.append(f"  rank {rank}: n/a (the report holds no call sites)")
            continue
        libs = ", ".join(f"{k} {v / mib:.0f}" for k, v in sorted(c["other_by_library"].items(), key=lambda kv: -kv[1]))
        lines.append(f"  rank {rank}: reserved {c['reserved'] / mib:.0f} MiB, live {c['live'] / mib:.0f} MiB: "
                     f"PyTorch {c['pytorch'] / mib:.0f} MiB, other callers {c['other'] / mib:.0f} MiB"
                     f"{f' ({libs})' if libs else ''}, smaller sites not kept {c['unclassified'] / mib:.0f} MiB")
    return lines


MEMORY_TARGET = 0.10   # DDP's target: peak reserved within 10 % of native per rank


def ddp(log_dir):
    """The DDP rows: wall time over the rounds with its verdict, then per rank the allocator's
    peak reserved and NVML's device peak (median and max over the rounds) against native. The
    allocator figures are not like for like (native: PyTorch's cache only; ours: every cudaMalloc
    of the process); NVML's are. Fails on a missing run or a result_sum differing from native's."""
    configs = os.environ.get("CONFIGS", "native ours ours-immediate").split()
    runs = {c: load_rounds(log_dir, f"ddp-{c}", "workload") for c in configs}
    native = {r: x for r, x in (runs.get("native") or load_rounds(log_dir, "ddp-native", "workload")).items() if x}
    sums = dict(runs)
    if os.path.exists(os.path.join(log_dir, "ddp-stacks.log")):   # the untimed call-site run must agree too
        sums["stacks"] = {1: last_json(os.path.join(log_dir, "ddp-stacks.log"), "workload")}
    bad = check_result_sums("ddp", sums, DDP_SUM_REL_TOL)
    world = next((x["world"] for x in native.values()), None)
    nrounds = max([0] + [len(r) for r in runs.values()])
    print(f"DDP encoder, {world or '?'} GPUs, {nrounds} round(s) (order rotated each round): wall time against native")
    print(TIME_HEADER)
    n_secs = seconds_by_round(native)
    for c in configs:
        label = CHECK_LABELS.get(c, c)
        failed = sorted(r for r, x in runs[c].items() if not x)
        bad.extend(f"ddp/{c} round {r}" for r in failed)
        good = {r: x for r, x in runs[c].items() if x}
        if not good or not native:
            print(f"{'ddp':<10}{label:<22} no usable run: see ddp-{c}-r*.log")
            bad.append(f"ddp/{c}")
            continue
        fig = time_figures(seconds_by_round(good), n_secs)
        if c == "native":
            fig = dict(fig, verdict="(the reference)")
        print(time_table_row("ddp", label, fig) + (f"  [round(s) {failed} failed]" if failed else ""))

    def per_rank(rounds, key):
        by_rank = {}
        for x in rounds.values():
            for p in x.get("ranks", []):
                by_rank.setdefault(p["rank"], []).append(p.get(key))
        return by_rank

    print()
    print(f"Peak memory per rank, median (max) over the rounds; target: within {MEMORY_TARGET * 100:.0f} % of native.")
    print("  reserved: the allocator's own figure (native: PyTorch's cache only; ours: every cudaMalloc through")
    print("  our hooks, NCCL's and cuBLAS's included). NVML: the process's device memory whoever asked, CUDA")
    print("  context included: the like-for-like figure.")
    print(f"{'configuration':<22}{'rank':>5}{'reserved MiB':>20}{'x native':>10}{'NVML MiB':>20}{'x native':>10}"
          f"  {'NVML source':<14}verdict (reserved / NVML)")
    n_res, n_nvml = per_rank(native, "peak_reserved_mib"), per_rank(native, "nvml_peak_mib")
    n_src = {x.get("nvml_source") for r in native.values() for x in r.get("ranks", [])}
    for c in configs:
        good = {r: x for r, x in runs[c].items() if x}
        if not good or not native:
            continue
        res, nvml = per_rank(good, "peak_reserved_mib"), per_rank(good, "nvml_peak_mib")
        srcs = per_rank(good, "nvml_source")
        errs = per_rank(good, "nvml_error")
        for rank in sorted(res):
            r_med, r_max = med(res[rank]), mx(res[rank])
            v_med, v_max = med(nvml.get(rank, [])), mx(nvml.get(rank, []))
            xr, xv = div(r_med, med(n_res.get(rank, []))), div(v_med, med(n_nvml.get(rank, [])))
            src = "/".join(sorted({s for s in srcs.get(rank, []) if s})) or "n/a"
            if src != "n/a" and len(n_src - {None}) and {src} != n_src - {None} and c != "native":
                src += " (native: " + "/".join(sorted(n_src - {None})) + ")"

            def verdict(x):
                return "n/a" if x is None else ("met" if x <= 1 + MEMORY_TARGET else "NOT met")
            why = next((e for e in errs.get(rank, []) if e), None)
            print(f"{label_of(c):<22}{rank:>5}{f(r_med, '.0f') + ' (' + f(r_max, '.0f') + ')':>20}{f(xr, '.3f'):>10}"
                  f"{(f(v_med, '.0f') + ' (' + f(v_max, '.0f') + ')') if v_med is not None else 'n/a':>20}"
                  f"{f(xv, '.3f') if xv is not None else 'n/a':>10}  {src:<14}"
                  + ("(the reference)" if c == "native" else f"{verdict(xr)} / {verdict(xv)}")
                  + (f"  [NVML: {why}]" if v_med is None and why else ""))
    print()
    for line in ddp_callers(log_dir):
        print(line)
    for b in bad:
        print(f"FAILED: {b}")
    return 1 if bad else 0


def label_of(config):
    return CHECK_LABELS.get(config, config)


def main():
    commands = {"check": check, "bench": bench, "ddp": ddp}
    if len(sys.argv) != 3 or sys.argv[1] not in commands:
        sys.exit(__doc__)
    return commands[sys.argv[1]](sys.argv[2])


if __name__ == "__main__":
    sys.exit(main())
