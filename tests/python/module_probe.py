#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""One process's view through the module: run by check_module.py, under the preload or not.

module_probe.py MODE [ARGS]; prints one JSON object on stdout.
  allocate N...   allocates each N bytes through the fake cudart (ctypes, as CuPy does), then
                  reports what the module sees; with --child N, first starts a copy of itself
                  (same environment but for CCI_ALLOC_CONF: the defaults; LD_PRELOAD set to
                  $PROBE_CHILD_PRELOAD when that is set) that allocates N
                  and reports, to show whose figures each process reads
  disabled N      allocates N, reports (the preload present but passing through)
  absent          reports without allocating (no CUDA library loaded at all)
"""
import ctypes
import json
import os
import subprocess
import sys
import tempfile

import ccinterpose


def cudart():
    rt = ctypes.CDLL('libcudart.so.13')
    rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    rt.cudaFree.argtypes = [ctypes.c_void_p]
    return rt


def view(extra=None):
    """What the module answers now, plus the report it writes (JSON) and its summary text."""
    out = {'pid': os.getpid(), 'active': ccinterpose.is_active(),
           'stats': ccinterpose.memory_stats(), 'config': ccinterpose.config_string(),
           'summary': ccinterpose.memory_summary(), 'loaded_library': ccinterpose.loaded_library()}
    # $PROBE_TMP: a plain folder for our files, where TMPDIR may hold a '%' for the module's.
    with tempfile.TemporaryDirectory(dir=os.environ.get('PROBE_TMP')) as tmp:
        # %p in the path is this process's pid, as the library expands it for CCI_REPORT.
        out['dumped'] = ccinterpose.dump_report(os.path.join(tmp, 'report-%p.json'))
        path = os.path.join(tmp, f'report-{os.getpid()}.json')
        out['report'] = json.load(open(path)) if os.path.exists(path) else None
    out.update(extra or {})
    return out


def bad_arguments():
    """Each bad device argument must raise its own clear exception, never reach the library."""
    seen = {}
    for arg in ('cuda:0', -1, True, 1.5):
        try:
            ccinterpose.memory_stats(arg)
            seen[repr(arg)] = 'accepted'
        except (TypeError, ValueError) as e:
            seen[repr(arg)] = type(e).__name__
    return seen


def main():
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == 'absent':
        # Not active: the allocator is left alone, and PyTorch is not even imported.
        print(json.dumps(view({'empty_cache': ccinterpose.empty_cache(),
                               'dump_stderr': ccinterpose.dump_report(),
                               'torch_allocator': ccinterpose.use_as_torch_allocator(),
                               'torch_imported': 'torch' in sys.modules})))
        return 0
    child = None
    if args[:1] == ['--child']:
        child, args = int(args[1]), args[2:]
    rt = cudart()
    ptrs, codes = [], []
    for n in map(int, args):
        p = ctypes.c_void_p()
        codes.append(rt.cudaMalloc(ctypes.byref(p), n))
        if codes[-1] == 0:
            ptrs.append(p)
    extra = {'malloc_codes': codes}
    if child is not None:
        env = dict(os.environ)
        env.pop('CCI_ALLOC_CONF', None)  # the child's own configuration: PyTorch's defaults
        if 'PROBE_CHILD_PRELOAD' in env:  # a child under the preload, its parent without it
            env['LD_PRELOAD'] = env.pop('PROBE_CHILD_PRELOAD')
        r = subprocess.run([sys.executable, __file__, 'allocate', str(child)], capture_output=True,
                           text=True, timeout=60, env=env)
        extra['child'] = json.loads(r.stdout) if r.returncode == 0 else {'failed': r.stderr}
    if mode == 'disabled':
        print(json.dumps(view(extra)))
        return 0
    before = view(extra)
    before['bad_arguments'] = bad_arguments()
    before['unknown_device'] = {'stats': ccinterpose.memory_stats(99),
                                'empty_cache': ccinterpose.empty_cache(99)}
    for p in ptrs:
        rt.cudaFree(p)
    before['empty_cache'] = ccinterpose.empty_cache(0)
    before['after_empty'] = ccinterpose.memory_stats(0)
    print(json.dumps(before))
    return 0


if __name__ == '__main__':
    sys.exit(main())
