#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""PyTorch's stream-ordered backend on our pool, on a GPU (docs/torch-streams.md). Run under
`ccinterpose --torch-streams` (or PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync with
CCI_ALLOC_CONF set and the preload loaded); prints one PASS/FAIL line per check and exits 1 on a
failure:

1. the tensors are ours: the preload's allocated bytes follow torch.cuda.memory_allocated();
2. PyTorch's own figures (read from the device's default pool) include ours: memory_reserved()
   and max_memory_reserved() are at least our reserved bytes, memory_allocated() our allocated;
3. reset_peak_memory_stats() resets ours, empty_cache() gives our cached segments back;
4. a tensor used on a side stream with record_stream, freed while that stream's slow kernel is
   still writing another buffer it reads, then the memory reused on the main stream: the side
   stream's result is intact (PyTorch's backend frees it on a stream of its own after both; we
   fence that cross-stream free).
"""
import ctypes
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
from torch_run import Stats  # noqa: E402

failed = 0


def check(ok, what):
    global failed
    failed += not ok
    print(f"{'PASS' if ok else 'FAIL'}: {what}", flush=True)


def ours():
    lib = ctypes.CDLL(None)
    get = lib.cci_get_stats
    get.argtypes = [ctypes.c_int, ctypes.POINTER(Stats)]
    s = Stats(size=ctypes.sizeof(Stats), version=3)
    if get(torch.cuda.current_device(), ctypes.byref(s)) != 0:
        return None
    return s


def main():
    backend = torch.cuda.memory.get_allocator_backend()
    check(backend == "cudaMallocAsync", f"PyTorch's backend is {backend}")
    mib = 1 << 20
    base = ours()
    check(base is not None, "the preload is active")
    if base is None:
        return 1
    xs = [torch.empty(64 * mib, dtype=torch.uint8, device="cuda") for _ in range(8)]
    torch.cuda.synchronize()
    s = ours()
    grown = s.allocated_bytes[0].current - base.allocated_bytes[0].current
    check(grown >= 8 * 64 * mib, f"our allocated bytes grew by {grown / mib:.0f} MiB for 512 MiB of tensors")
    alloc, reserved, peak = torch.cuda.memory_allocated(), torch.cuda.memory_reserved(), torch.cuda.max_memory_reserved()
    check(alloc >= s.allocated_bytes[0].current and reserved >= s.reserved_bytes[0].current and peak >= reserved,
          f"PyTorch reads ours: allocated {alloc / mib:.0f} MiB, reserved {reserved / mib:.0f} MiB, peak "
          f"{peak / mib:.0f} MiB (ours {s.allocated_bytes[0].current / mib:.0f} / {s.reserved_bytes[0].current / mib:.0f})")
    del xs
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    s = ours()
    check(s.allocated_bytes[0].peak == s.allocated_bytes[0].current,
          f"reset_peak_memory_stats reset ours (peak {s.allocated_bytes[0].peak / mib:.0f} MiB)")
    before = s.reserved_bytes[0].current
    torch.cuda.empty_cache()
    after = ours().reserved_bytes[0].current
    check(after < before, f"empty_cache gave our cache back: {before / mib:.0f} -> {after / mib:.0f} MiB reserved")

    # record_stream: the side stream's slow work reads `a` after the main stream freed it.
    side = torch.cuda.Stream()
    n = 32 * mib // 4
    a = torch.arange(n, device="cuda", dtype=torch.float32)
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU time before the side stream reads `a`
        out = a * 2
    a.record_stream(side)
    del a
    clobber = [torch.full((n,), -1.0, device="cuda") for _ in range(4)]  # would reuse `a` early
    torch.cuda.synchronize()
    want = torch.arange(n, device="cuda", dtype=torch.float32) * 2
    check(torch.equal(out, want), "record_stream: the side stream read its data intact")
    del clobber, out, want
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
