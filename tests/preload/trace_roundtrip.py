#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Record -> replay round trip on the fake CUDA: run a program under the preload with CCI_TRACE
and a JSON report, replay the recorded trace with ccreplay under the same configuration, and
require the same peaks and device allocations as the live run.

usage: trace_roundtrip.py CCREPLAY PROGRAM [ARGS...]   (environment as the test sets it)
"""
import glob
import json
import os
import subprocess
import sys
import tempfile


def main():
    ccreplay, prog = sys.argv[1], sys.argv[2:]
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, CCI_TRACE=os.path.join(tmp, 'trace-%p.cct'),
                   CCI_REPORT=os.path.join(tmp, 'report-%p.json'))
        run = subprocess.run(prog, env=env, capture_output=True, text=True, timeout=300)
        if run.returncode != 0:
            print(run.stdout, run.stderr)
            print('FAIL: the program failed under the preload')
            return 1
        traces = glob.glob(os.path.join(tmp, 'trace-*.cct'))
        reports = glob.glob(os.path.join(tmp, 'report-*.json'))
        if len(traces) != 1 or len(reports) != 1:
            print(f'FAIL: expected one trace and one report, got {traces} {reports}')
            return 1
        live = json.load(open(reports[0]))['devices']
        conf = live[0]['config']
        rep = subprocess.run([ccreplay, '--json', '--conf', conf, traces[0]], capture_output=True,
                             text=True, timeout=300)
        if rep.returncode != 0:
            print(rep.stderr)
            print('FAIL: ccreplay failed')
            return 1
        replay = json.loads(rep.stdout)
        checks = [
            ('peak allocated', sum(d['stats']['allocated_bytes.all.peak'] for d in live),
             replay['peak_allocated_bytes']),
            ('peak reserved', sum(d['stats']['reserved_bytes.all.peak'] for d in live),
             replay['peak_reserved_bytes']),
            ('device allocations', sum(d['stats']['num_device_alloc'] for d in live),
             replay['num_device_alloc']),
            ('OOMs', sum(d['stats']['num_ooms'] for d in live), replay['num_ooms']),
        ]
        for what, want, got in checks:
            ok = want == got
            failed += not ok
            print(f"{'ok' if ok else 'FAIL'}: {what}: live {want}, replayed {got}")
        print(f"{replay['events']} events recorded over {len(live)} device(s), "
              f"{replay['missing_events']} missing, {replay['truncated_bytes']} bytes truncated")
        if replay['missing_events'] or replay['truncated_bytes']:
            failed += 1
            print('FAIL: the trace is incomplete')
    print(f'{len(checks) - failed if failed <= len(checks) else 0} passed, {failed} failed')
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
