#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Kernel speed on memory from each allocator (GPU only, not part of the test suite).

  [LD_PRELOAD=libccinterpose.so PYTORCH_NO_CUDA_MEMORY_CACHING=1 CCI_ALLOC_CONF=...] layout_probe.py TAG

Allocates its buffers once, then times a bf16 matmul (8192^2), an in-place add over 2 GiB and a
random gather, with no allocation inside the timed loops: whatever differs between allocators
here is the memory itself (page size, physical layout), not the allocator's calls. Prints one
JSON line. Compact mode's 2 MiB pages run these kernels at native speed (docs/benchmarks.md,
"where compact mode's wall time is not", 2026-11-24, 46d4516).
"""

import json
import sys
import time

import torch

dev = torch.device("cuda")
torch.manual_seed(0)
def timed(fn, reps):
    fn(); torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(reps): fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / reps * 1e3
res = {}
a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
c = torch.empty(8192, 8192, device=dev, dtype=torch.bfloat16)
res["matmul_ms"] = timed(lambda: torch.matmul(a, b, out=c), 50)
x = torch.randn(512 << 20, device=dev)   # 2 GiB fp32
y = torch.randn(512 << 20, device=dev)
res["add_2GiB_ms"] = timed(lambda: x.add_(y), 50)
idx = torch.randint(0, x.numel(), (64 << 20,), device=dev)
out = torch.empty(64 << 20, device=dev)
res["gather_ms"] = timed(lambda: torch.index_select(x, 0, idx, out=out), 50)
res["sum"] = float(c.float().sum() + out.sum())
print(json.dumps({"tag": sys.argv[1], **{k: round(v, 4) for k, v in res.items()}}))
