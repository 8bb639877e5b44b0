#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Run one torch_workloads.py workload in this process, then add libccinterpose's own figures.

  torch_run.py WORKLOADS_PY NAME [--steps N] [--report FILE]...

Prints one JSON line: torch_workloads.py's own line (wall seconds, PyTorch's statistics,
result_sum) plus "cci": the preload's statistics for the current device when it is loaded and
active, else null. Under PYTORCH_NO_CUDA_MEMORY_CACHING=1 PyTorch's reserved figures say nothing
(every tensor is its own cudaMalloc), so the preload's peak reserved is the one to compare.
--report writes the preload's report there (cci_dump_report; the format follows the extension:
.txt, .json, .html) after the workload, while CUDA is still up. It may be given several times.
"""
import contextlib
import ctypes
import io
import json
import runpy
import sys


class Stat(ctypes.Structure):
    _fields_ = [("current", ctypes.c_int64), ("peak", ctypes.c_int64),
                ("allocated", ctypes.c_int64), ("freed", ctypes.c_int64)]


POOLS = 3  # all, small, large
# The layout of cci_stats in include/ccinterpose.h, version 2. The library copies only as many
# bytes as both sides know, so an older or newer library cannot write past this struct.
_ARRAYS = ["allocation", "segment", "active", "inactive_split", "allocated_bytes", "reserved_bytes",
           "active_bytes", "inactive_split_bytes", "requested_bytes"]
_COUNTERS = ["num_alloc_retries", "num_ooms", "num_sync_all_streams", "num_device_alloc", "num_device_free",
             "max_split_size", "largest_free_block", "device_capacity",
             "num_fence_records", "num_fence_waits"]  # version 2


class Stats(ctypes.Structure):
    _fields_ = ([("size", ctypes.c_uint32), ("version", ctypes.c_uint32)]
                + [(n, Stat * POOLS) for n in _ARRAYS]
                + [("oversize_allocations", Stat), ("oversize_segments", Stat)]
                + [(n, ctypes.c_uint64) for n in _COUNTERS])


def cci_figures(device, reports):
    lib = ctypes.CDLL(None)  # the global scope: a preloaded library's exports are in it
    try:
        get = lib.cci_get_stats
    except AttributeError:
        return None
    get.argtypes = [ctypes.c_int, ctypes.POINTER(Stats)]
    s = Stats(size=ctypes.sizeof(Stats), version=2)
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
    }
    if reports:
        lib.cci_dump_report.argtypes = [ctypes.c_char_p]
        out["reports"] = [r for r in reports if lib.cci_dump_report(r.encode()) == 0]
    return out


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    path, name, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
    reports = []
    while "--report" in rest:
        i = rest.index("--report")
        reports.append(rest[i + 1])
        del rest[i:i + 2]
    sys.argv = [path, name] + rest
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        runpy.run_path(path, run_name="__main__")
    line = [l for l in buf.getvalue().splitlines() if l.startswith("{")][-1]
    res = json.loads(line)
    import torch  # already imported by the workload; only its current device is needed here
    res["cci"] = cci_figures(torch.cuda.current_device(), reports)
    print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
