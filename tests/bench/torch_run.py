#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Run one torch_workloads.py workload in this process, then add libccinterpose's own figures.

  torch_run.py WORKLOADS_PY NAME [--steps N] [--warmup-steps W] [--timed-runs R] [--report FILE]...

Prints one JSON line: torch_workloads.py's own line (wall seconds, PyTorch's statistics,
result_sum) plus "cci": the preload's statistics for the current device when it is loaded and
active, else null.

Wall time in steady state: a run of a few steps measures start-up (CUDA modules loading, cuBLAS
and cuDNN picking kernels) as much as the allocator, and that start-up varies by 15-60 % between
processes. --warmup-steps W first runs the workload for W steps (untimed, its results dropped),
then --timed-runs R runs it R times with N steps in the same process, each from the same seeds;
"seconds" is then the median of the R runs ("seconds_runs" lists them all), and every run must
give the same result_sum (else "result_sum_runs" lists them and the check fails on the mismatch).
Peak figures cover the whole process, warm-up included, in every configuration alike. Under PYTORCH_NO_CUDA_MEMORY_CACHING=1 PyTorch's reserved figures say nothing
(every tensor is its own cudaMalloc), so the preload's peak reserved is the one to compare.
--report writes the preload's report there (cci_dump_report; the format follows the extension:
.txt, .json, .html) after the workload, while CUDA is still up. It may be given several times.
--nvml adds the process's peak device memory as NVML saw it, sampled every 2 ms (nvml_peak.py):
the like-for-like figure beside PyTorch's reserved one, since under the preload libraries' own
cudaMalloc calls (cuBLAS, cuDNN) reach our pool, while PyTorch's reserved figure never holds them.
"""
import contextlib
import ctypes
import io
import json
import runpy
import sys
from pathlib import Path


class Stat(ctypes.Structure):
    _fields_ = [("current", ctypes.c_int64), ("peak", ctypes.c_int64),
                ("allocated", ctypes.c_int64), ("freed", ctypes.c_int64)]


POOLS = 3  # all, small, large
# The layout of cci_stats in include/ccinterpose.h, version 3. The library copies only as many
# bytes as both sides know, so an older or newer library cannot write past this struct.
_ARRAYS = ["allocation", "segment", "active", "inactive_split", "allocated_bytes", "reserved_bytes",
           "active_bytes", "inactive_split_bytes", "requested_bytes"]
_COUNTERS = ["num_alloc_retries", "num_ooms", "num_sync_all_streams", "num_device_alloc", "num_device_free",
             "max_split_size", "largest_free_block", "device_capacity",
             "num_fence_records", "num_fence_waits",  # version 2
             "num_fence_catch_ups"]  # version 3


class Stats(ctypes.Structure):
    _fields_ = ([("size", ctypes.c_uint32), ("version", ctypes.c_uint32)]
                + [(n, Stat * POOLS) for n in _ARRAYS]
                + [("oversize_allocations", Stat), ("oversize_segments", Stat)]
                + [(n, ctypes.c_uint64) for n in _COUNTERS])


def use_pluggable_allocator():
    """With CCI_TORCH_PLUGGABLE=1 and the preload loaded: PyTorch allocates through the preload's
    pluggable allocator entry points (cci_torch_alloc / cci_torch_free), which receive the stream
    of every call, instead of its caching allocator (preload/hooks/torch_pluggable.c). Call before
    the first CUDA allocation. Returns True when installed."""
    import os
    if os.environ.get("CCI_TORCH_PLUGGABLE") != "1":
        return False
    import torch
    lib = next((p for p in os.environ.get("LD_PRELOAD", "").replace(":", " ").split()
                if p.endswith("libccinterpose.so")), None)
    if not lib:
        raise SystemExit("CCI_TORCH_PLUGGABLE=1 needs libccinterpose.so in LD_PRELOAD")
    alloc = torch.cuda.memory.CUDAPluggableAllocator(lib, "cci_torch_alloc", "cci_torch_free")
    torch.cuda.memory.change_current_allocator(alloc)
    return True


def cci_figures(device, reports):
    lib = ctypes.CDLL(None)  # the global scope: a preloaded library's exports are in it
    try:
        get = lib.cci_get_stats
    except AttributeError:
        return None
    get.argtypes = [ctypes.c_int, ctypes.POINTER(Stats)]
    s = Stats(size=ctypes.sizeof(Stats), version=3)
    if get(device, ctypes.byref(s)) != 0:
        return {"active": False}
    mib = 1 << 20
    out = {
        "active": True,
        "peak_reserved_mib": round(s.reserved_bytes[0].peak / mib, 1),
        "peak_allocated_mib": round(s.allocated_bytes[0].peak / mib, 1),
        "allocations": s.allocation[0].allocated,
        "num_device_alloc": s.num_device_alloc,
        "num_alloc_retries": s.num_alloc_retries,
        "num_ooms": s.num_ooms,
        "num_sync_all_streams": s.num_sync_all_streams,
        "num_fence_records": s.num_fence_records,
        "num_fence_waits": s.num_fence_waits,
        # (0 from a library of version 2, which copies only what it knows)
        "num_fence_catch_ups": s.num_fence_catch_ups,
    }
    if reports:
        lib.cci_dump_report.argtypes = [ctypes.c_char_p]
        out["reports"] = [r for r in reports if lib.cci_dump_report(r.encode()) == 0]
    return out


def workload_line(main, workloads_path, name, steps, rest, losses):
    """One call of torch_workloads.py's main() with N steps: its JSON line, as a dict."""
    del losses[:]  # the module's per-step results: result_sum covers this call's steps alone
    sys.argv = [workloads_path, name, "--steps", str(steps)] + rest
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        main()
    return json.loads([l for l in buf.getvalue().splitlines() if l.startswith("{")][-1])


def take_option(rest, flag, default):
    """Removes `flag VALUE` from rest; the value as a whole number >= its minimum, or exits."""
    if flag not in rest:
        return default
    i = rest.index(flag)
    try:
        value = int(rest[i + 1])
    except (IndexError, ValueError):
        sys.exit(f"torch_run.py: {flag} needs a whole number")
    del rest[i:i + 2]
    if value < (1 if flag == "--timed-runs" else 0):
        sys.exit(f"torch_run.py: {flag} {value} is out of range")
    return value


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    path, name, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
    reports = []
    while "--report" in rest:
        i = rest.index("--report")
        reports.append(rest[i + 1])
        del rest[i:i + 2]
    nvml = "--nvml" in rest
    if nvml:
        rest.remove("--nvml")
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from nvml_peak import sampler_for_torch_device
        sampler = sampler_for_torch_device(0)
    steps = take_option(rest, "--steps", 20)
    warmup = take_option(rest, "--warmup-steps", 0)
    timed = take_option(rest, "--timed-runs", 1)
    module = runpy.run_path(path, run_name="torch_workloads")  # defines, does not run, main()
    wl_main, losses = module["main"], module["LOSSES"]
    if warmup:
        workload_line(wl_main, path, name, warmup, rest, losses)
    runs = [workload_line(wl_main, path, name, steps, rest, losses) for _ in range(timed)]
    res = runs[-1]  # its statistics are the process's, warm-up and every run included
    seconds = sorted(r["seconds"] for r in runs)
    res["seconds"] = seconds[len(seconds) // 2] if len(seconds) % 2 else round(
        (seconds[len(seconds) // 2 - 1] + seconds[len(seconds) // 2]) / 2, 4)
    res["seconds_runs"] = [r["seconds"] for r in runs]
    res["warmup_steps"] = warmup
    sums = [r["result_sum"] for r in runs]
    if len(set(map(repr, sums))) > 1:
        res["result_sum_runs"] = sums
        res["result_sum"] = None  # never equal to another configuration's: the check fails
    import torch  # already imported by the workload; only its current device is needed here
    res["cci"] = cci_figures(torch.cuda.current_device(), reports)
    if nvml:
        res.update(sampler.stop())
    print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
