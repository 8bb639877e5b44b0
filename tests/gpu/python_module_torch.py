#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The module ccinterpose under PyTorch on a GPU (scripts/gpu-python.sh runs it under the
launcher): what the module reports against what PyTorch itself counts, in both ways of running.

python_module_torch.py OUT.json
  default: PyTorch caches on top of us, so every segment PyTorch holds is one of our
    allocations: PyTorch's reserved bytes must equal our requested bytes, its segments our live
    allocations. After torch.cuda.empty_cache() we hold nothing allocated; after
    ccinterpose.empty_cache() nothing reserved.
  PYTORCH_NO_CUDA_MEMORY_CACHING=1: every tensor is one of our allocations: a tensor of N bytes
    must raise our requested bytes by exactly N.
Prints one PASS or FAIL line per check and writes every figure to OUT.json; exit 1 on a FAIL.
"""
import json
import os
import sys

import torch

import ccinterpose

results = {'checks': [], 'mode': 'no-caching' if os.environ.get('PYTORCH_NO_CUDA_MEMORY_CACHING') == '1'
           else 'default', 'module': ccinterpose.__file__, 'torch': torch.__version__}


def check(ok, what, **figures):
    results['checks'].append({'ok': bool(ok), 'what': what, **figures})
    print(('PASS: ' if ok else 'FAIL: ') + what + (f'  {figures}' if figures else ''), flush=True)


def ours(key):
    return ccinterpose.memory_stats(0).get(key)


def main(out):
    check(ccinterpose.is_active(), 'is_active() under the launcher')
    torch.cuda.init()
    x = torch.randn(4096, 4096, device='cuda')                 # 64 MiB
    ys = [torch.empty(n, device='cuda', dtype=torch.uint8) for n in (1000, 3 << 20, 50 << 20)]
    z = x @ x                                                   # cuBLAS and its workspace
    torch.cuda.synchronize()
    t = torch.cuda.memory_stats(0)
    s = ccinterpose.memory_stats(0)
    results['torch_stats'], results['our_stats'] = dict(t), s
    if results['mode'] == 'default':
        check(t['reserved_bytes.all.current'] == s['requested_bytes.all.current'],
              "PyTorch's reserved bytes are our requested bytes",
              torch_reserved=t['reserved_bytes.all.current'], ours_requested=s['requested_bytes.all.current'])
        check(t['segment.all.current'] == s['allocation.all.current'],
              "PyTorch's segments are our live allocations",
              torch_segments=t['segment.all.current'], ours_allocations=s['allocation.all.current'])
        del x, ys, z
        torch.cuda.empty_cache()
        check(ours('allocated_bytes.all.current') == 0, 'after torch.cuda.empty_cache(): nothing allocated of ours',
              ours_allocated=ours('allocated_bytes.all.current'))
        check(ccinterpose.empty_cache(0) and ours('reserved_bytes.all.current') == 0,
              'after ccinterpose.empty_cache(): nothing reserved', ours_reserved=ours('reserved_bytes.all.current'))
    else:
        before = ours('requested_bytes.all.current')
        w = torch.empty(7 << 20, device='cuda', dtype=torch.uint8)
        after = ours('requested_bytes.all.current')
        check(after - before == 7 << 20, 'a tensor of 7 MiB raises our requested bytes by 7 MiB',
              delta=after - before)
        del w
        check(ours('requested_bytes.all.current') == before, 'freeing it takes them back',
              now=ours('requested_bytes.all.current'), before=before)
    summary = ccinterpose.memory_summary()
    check('memory summary, device ID 0' in summary, 'memory_summary() is our table')
    report = os.path.splitext(out)[0] + '-report.json'
    check(ccinterpose.dump_report(report) and os.path.exists(report), 'dump_report() wrote ' + report)
    with open(out, 'w') as f:
        json.dump(results, f, indent=1)
    return 0 if all(c['ok'] for c in results['checks']) else 1


if __name__ == '__main__':
    sys.exit(main(sys.argv[1]))
