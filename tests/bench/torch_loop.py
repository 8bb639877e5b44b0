#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Framework-level allocation cost: torch.empty + del in a Python loop, per size.

  torch_loop.py LABEL [--budget SECONDS_PER_SIZE]

Run it once natively (PyTorch's caching allocator answers every request) and once with
PYTORCH_NO_CUDA_MEMORY_CACHING=1 under the preload (every tensor becomes a cudaMalloc/cudaFree
that libccinterpose answers): the Python and dispatcher overhead is the same on both sides, so the
difference is the allocators'. Prints a table and one JSON line.
"""
import json
import statistics
import sys
import time

import torch

SIZES = [512, 64 << 10, 1 << 20, 20 << 20, 256 << 20]
BATCH = 100  # pairs per timed sample: one pair is a few microseconds


def main():
    label = sys.argv[1] if len(sys.argv) > 1 else "torch"
    budget = float(sys.argv[sys.argv.index("--budget") + 1]) if "--budget" in sys.argv else 0.4
    dev = torch.device("cuda")
    torch.cuda.init()
    torch.empty(1, device=dev)
    torch.cuda.synchronize()
    rows = []
    for n in SIZES:
        for _ in range(20):
            t = torch.empty(n, dtype=torch.uint8, device=dev)
            del t
        samples = []
        end = time.perf_counter() + budget
        while len(samples) < 5 or (time.perf_counter() < end and len(samples) < 2000):
            t0 = time.perf_counter_ns()
            for _ in range(BATCH):
                t = torch.empty(n, dtype=torch.uint8, device=dev)
                del t
            samples.append((time.perf_counter_ns() - t0) / BATCH)
        torch.cuda.synchronize()
        samples.sort()
        rows.append({"bytes": n, "median_ns": round(statistics.median(samples), 1),
                     "p99_ns": round(samples[min(len(samples) - 1, int(0.99 * (len(samples) - 1) + 0.5))], 1),
                     "samples": len(samples)})
    print(f"{label}: torch.empty + del, ns per pair (batches of {BATCH})")
    for r in rows:
        print(f"  {r['bytes']:>10} B  median {r['median_ns']:>10.0f}  p99 {r['p99_ns']:>10.0f}")
    print(json.dumps({"label": label, "sizes": rows}), flush=True)


if __name__ == "__main__":
    main()
