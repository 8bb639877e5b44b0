#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The Python module ccinterpose from the source tree, against the build tree's preload and the
fake CUDA: each scenario runs module_probe.py in processes of its own and checks what it saw.

check_module.py --scenario active|absent|disabled|older-library|layout --source DIR
                --preload LIB --fake-libdir DIR --ccreplay-dir DIR --other-preload LIB
                --older-api LIB --header include/ccinterpose.h
check_module.py --installed --launcher BIN/ccinterpose --scenario active|absent ...
    the pip-installed package instead (check_pip_install.py): run by the environment's python,
    which imports the installed module; probes run under the installed launcher, replay() finds
    the package's own ccreplay, and the child under the preload gets the package's library.

Every check prints one `ok:` or `FAIL:` line; the status is 1 when any failed.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

failed = False

# Sizes whose rounding is known (PyTorch's: requests round up to 512 bytes): a large-pool block,
# a small-pool block, and one past the fake device's 256 MiB, which must fail as an OOM.
LARGE, SMALL, TOO_BIG, CHILD = 5_000_000, 1000, 1 << 30, 9_000_000


def round512(n):
    return (n + 511) // 512 * 512


def check(ok, what, detail=''):
    global failed
    print(('ok: ' if ok else 'FAIL: ') + what)
    if not ok:
        failed = True
        if detail:
            print('  ' + str(detail).rstrip().replace('\n', '\n  ')[:4000])
    return ok


def probe(opts, env_changes, *args):
    """module_probe.py ARGS in a fresh process; its JSON, or None (reported) when it failed."""
    env = dict(os.environ)
    for k in ('LD_PRELOAD', 'PYTHONPATH'):
        env.pop(k, None)
    if opts.source:
        env['PYTHONPATH'] = opts.source
    env.update({'LD_LIBRARY_PATH': opts.fake_libdir, 'FAKECUDA_CAPACITY': '256M', 'CCI_REPORT': 'off',
                'CCI_WHATIF_SECONDS': '0'})
    env.update(env_changes)
    cmd = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), 'module_probe.py')]
    if opts.launcher and env.get('LD_PRELOAD') == opts.preload:
        del env['LD_PRELOAD']  # the installed launcher must find its library by itself
        cmd = [opts.launcher, '--'] + cmd
    r = subprocess.run(cmd + [str(a) for a in args], env=env,
                       capture_output=True, text=True, errors='replace', timeout=120)
    if not check(r.returncode == 0, f'probe {" ".join(map(str, args))} ran',
                 f'status {r.returncode}\n--- stdout\n{r.stdout}--- stderr\n{r.stderr}'):
        return None
    return json.loads(r.stdout)


def check_not_active(v, what):
    import ccinterpose
    check(v['active'] is False, f'{what}: is_active() is False', v['active'])
    check(v['stats'] == {}, f'{what}: memory_stats() is {{}}', v['stats'])
    check(v['summary'] == ccinterpose.NOT_ACTIVE, f'{what}: memory_summary() says not active', v['summary'])
    check(v['dumped'] is False and v['report'] is None, f'{what}: dump_report(path) is False, no file')
    check(v['config'] == '', f'{what}: config_string() is empty', v['config'])


def scenario_active(opts):
    import ccinterpose
    with tempfile.TemporaryDirectory() as tmp:
        # memory_summary()'s temporary file lands in a folder whose name the library would
        # expand (%p) unless the module doubles the '%'.
        odd_tmp = os.path.join(tmp, 'tmp%p')
        os.mkdir(odd_tmp)
        v = probe(opts, {'LD_PRELOAD': opts.preload, 'CCI_ALLOC_CONF': 'max_split_size_mb:64',
                         'CCI_TRACE': os.path.join(tmp, 'run-%p.trace'), 'TMPDIR': odd_tmp,
                         'PROBE_TMP': tmp},
                  'allocate', '--child', CHILD, LARGE, SMALL, TOO_BIG)
        if v is None:
            return
        s = v['stats']
        check(v['active'] is True, 'under the preload: is_active() is True')
        check(v['loaded_library'] and os.path.samefile(v['loaded_library'], opts.preload),
              'loaded_library() names the preloaded library (for use_as_torch_allocator)', v['loaded_library'])
        check(v['malloc_codes'][:2] == [0, 0] and v['malloc_codes'][2] != 0,
              'the fake cudart served two allocations and refused the one past its capacity', v['malloc_codes'])
        # The process's own figures, with PyTorch's names and rounding.
        expect = {
            'requested_bytes.all.current': LARGE + SMALL,
            'allocated_bytes.all.current': round512(LARGE) + round512(SMALL),
            'allocated_bytes.small_pool.current': round512(SMALL),
            'allocated_bytes.large_pool.current': round512(LARGE),
            'allocation.all.current': 2,
            'num_ooms': 1,
            'max_split_size': 64 << 20,
        }
        got = {k: s.get(k) for k in expect}
        check(got == expect, 'memory_stats(): this process\'s allocations under PyTorch\'s key names',
              f'expected {expect}\ngot      {got}')
        check(s.get('reserved_bytes.all.current', 0) >= expect['allocated_bytes.all.current'] and
              s.get('reserved_bytes.all.peak', 0) >= s.get('reserved_bytes.all.current', 0) and
              s.get('num_device_alloc', 0) >= 1,
              'memory_stats(): reserved bytes cover the allocations, from device allocations', s)
        check(list(s) == sorted(s), 'memory_stats(): keys sorted, as PyTorch returns them')
        # Whose figures: a child process under the same preload allocated something else.
        c = v.get('child', {})
        check(c.get('active') is True and c.get('pid') != v['pid'] and
              c.get('stats', {}).get('allocated_bytes.all.current') == round512(CHILD) and
              c.get('stats', {}).get('num_ooms') == 0,
              'a child process sees only its own allocation, the parent only its own', c)
        check(c.get('stats', {}).get('max_split_size') == -1,
              'the child\'s default max_split_size: -1 (unlimited), as PyTorch reports it',
              c.get('stats', {}).get('max_split_size'))
        # The report the module writes is this process's, and its figures are the same data.
        rep = v['report'] or {}
        check(v['dumped'] is True and rep.get('process', {}).get('pid') == v['pid'],
              'dump_report(\'report-%p.json\'): this process\'s report, %p its pid', rep.get('process'))
        dev = (rep.get('devices') or [{}])[0]
        report_figures = dict(dev.get('stats', {}))
        for group in ('counters', 'costs', 'process_costs'):
            report_figures.update(dev.get(group, {}))
        for key in ('largest_free_block', 'device_capacity'):
            report_figures[key] = dev.get(key)
        # Memory passed to CUDA and counted (managed, other pools): families and figures.
        for key, value in dev.get('outside', {}).items():
            if isinstance(value, dict):
                report_figures.update({f'{key}.{part}': n for part, n in value.items()})
            else:
                report_figures[key] = value
        # The process's sections: the pinned host cache under "pinned_host", the program's own
        # virtual-memory allocations under "program_vmm", each written only when the process used
        # it; otherwise memory_stats() must hold its figures all as zero.
        for section, prefix in (('pinned_host', 'pinned_'), ('program_vmm', 'program_vmm_')):
            figures = rep.get(section)
            if figures is None:
                mine = {k: v for k, v in s.items() if k.startswith(prefix)}
                check(all(v == 0 for v in mine.values()), f'no {section} section: its figures are zero', mine)
                report_figures.update({k: 0 for k in mine})
                continue
            for key, value in figures.items():
                if isinstance(value, dict):
                    report_figures.update({f'{key}.{part}': n for part, n in value.items()})
                else:
                    report_figures[key] = value
        check(set(report_figures) == set(s), 'memory_stats() has every figure of the JSON report and no other',
              f'only in the report: {sorted(set(report_figures) - set(s))}\n'
              f'only in memory_stats(): {sorted(set(s) - set(report_figures))}')
        # The fence and VMM costs move with the watcher's timing; the allocator's figures do not.
        steady = [k for k in s if not k.startswith(('fence_', 'vmm_'))]
        diff = {k: (s[k], report_figures.get(k)) for k in steady if s[k] != report_figures.get(k)}
        check(not diff, 'memory_stats() and the report agree on every allocator figure', diff)
        check(f'pid {v["pid"]},' in v['summary'] and 'memory summary, device ID 0' in v['summary'],
              'memory_summary(): the library\'s table, of this process (TMPDIR holding a %)',
              v['summary'][:400])
        check('max_split_size_mb:64' in v['config'], 'config_string(): the effective configuration', v['config'])
        check(v['bad_arguments'] == {"'cuda:0'": 'TypeError', '-1': 'ValueError', 'True': 'TypeError',
                                     '1.5': 'TypeError'},
              'a bad device argument raises TypeError or ValueError', v['bad_arguments'])
        check(v['unknown_device'] == {'stats': {}, 'empty_cache': False},
              'a device the fake does not have: {} and False', v['unknown_device'])
        after = v['after_empty']
        check(v['empty_cache'] is True and after.get('reserved_bytes.all.current') == 0 and
              after.get('num_device_free', 0) >= 1,
              'empty_cache() after the frees gives every segment back', after)

        # replay(): the installed-or-PATH ccreplay on the trace this process recorded.
        if opts.ccreplay_dir:
            os.environ['PATH'] = opts.ccreplay_dir + os.pathsep + os.environ.get('PATH', '')
        trace = os.path.join(tmp, f'run-{v["pid"]}.trace')
        try:
            # On the fake's 256 MiB the recorded 1 GiB request fails again, as it did in the run.
            r = ccinterpose.replay(trace, capacity='256M')
            check(r.get('peak_allocated_bytes') == expect['allocated_bytes.all.current'] and
                  r.get('num_ooms') == 1, 'replay(trace, capacity): ccreplay\'s result, parsed', r)
            r = ccinterpose.replay(trace, conf='expandable_segments:True')
            check(r.get('peak_allocated_bytes') == expect['allocated_bytes.all.current'] + TOO_BIG and
                  r.get('vmm_calls'), 'replay(trace, conf): the configuration reaches ccreplay', r)
        except ccinterpose.ReplayError as e:
            check(False, 'replay(trace) ran', e)
        for bad, words in ((dict(trace=trace, conf='max_split_size_mb:5'), 'max_split_size_mb'),
                           (dict(trace=os.path.join(tmp, 'missing.trace')), 'cannot open')):
            try:
                ccinterpose.replay(**bad)
                check(False, f'replay({bad}) raises ReplayError')
            except ccinterpose.ReplayError as e:
                check(words in str(e) and '\n' not in str(e), f'replay: "{words}" as one line', e)


def scenario_absent(opts):
    v = probe(opts, {}, 'absent')
    if v:
        check_not_active(v, 'no preload')
        check(v['empty_cache'] is False and v['dump_stderr'] is False,
              'no preload: empty_cache() and dump_report() are False')
        check(v['loaded_library'] is None and v['torch_allocator'] is False and not v['torch_imported'],
              'no preload: no loaded library, use_as_torch_allocator() is False without importing torch', v)
    v = probe(opts, {'LD_PRELOAD': opts.other_preload}, 'absent')
    if v:
        check_not_active(v, 'another library preloaded')
    # The parent without the preload, its child under it: the parent must not report the child.
    v = probe(opts, {'PROBE_CHILD_PRELOAD': opts.preload}, 'allocate', '--child', CHILD, SMALL)
    if v:
        check(v['malloc_codes'] == [0], 'no preload: the fake cudart served the allocation')
        check_not_active(v, 'no preload, a child under it')
        c = v.get('child', {})
        check(c.get('active') is True and
              c.get('stats', {}).get('allocated_bytes.all.current') == round512(CHILD),
              'the child under the preload reports its own allocation', c)


def scenario_disabled(opts):
    v = probe(opts, {'LD_PRELOAD': opts.preload, 'CCI_DISABLE': '1'}, 'disabled', SMALL)
    if v:
        check(v['malloc_codes'] == [0], 'CCI_DISABLE=1: the allocation passed through to the fake')
        check_not_active(v, 'preloaded with CCI_DISABLE=1')


def scenario_older_library(opts):
    # tests/python/older_api.c: the API of a library whose cci_stats ends at device_capacity.
    v = probe(opts, {'LD_PRELOAD': opts.older_api}, 'absent')
    if not v:
        return
    s = v['stats']
    check(s.get('allocated_bytes.all.current') == 12345 and s.get('device_capacity') == 1 << 20,
          'an older library: the fields it filled', s)
    newer = [k for k in s if k.startswith(('num_fence_', 'fence_', 'vmm_'))]
    check(not newer, 'an older library: the fields it never filled are left out, not 0', newer)


def header_fields(header):
    """cci_stats's fields as (name, count of int64-sized words) in order, and CCI_STATS_VERSION."""
    text = open(header).read()
    version = int(re.search(r'#define CCI_STATS_VERSION (\d+)', text).group(1))
    body = re.search(r'typedef struct cci_stats \{(.*?)\} cci_stats;', text, re.S).group(1)
    body = re.sub(r'/\*.*?\*/', '', body, flags=re.S)
    fields = []
    for m in re.finditer(r'\b(uint32_t|uint64_t|cci_stat)\s+(\w+)(\[CCI_POOL_KINDS\])?\s*;', body):
        fields.append((m.group(2), m.group(1), bool(m.group(3))))
    return version, fields


def scenario_layout(opts):
    import ctypes
    from ccinterpose import _binding
    version, fields = header_fields(opts.header)
    check(version == _binding.STATS_VERSION, 'the module asks for the header\'s CCI_STATS_VERSION',
          f'header {version}, module {_binding.STATS_VERSION}')
    ctype_of = {'uint32_t': ctypes.c_uint32, 'uint64_t': ctypes.c_uint64, 'cci_stat': _binding.Stat}
    expect = [(name, ctype_of[t] * 3 if pooled else ctype_of[t]) for name, t, pooled in fields]
    got = _binding.Stats._fields_
    same = len(expect) == len(got) and all(
        a[0] == b[0] and ctypes.sizeof(a[1]) == ctypes.sizeof(b[1]) for a, b in zip(expect, got))
    mismatch = [(a[0], b[0]) for a, b in zip(expect, got) if a[0] != b[0]][:5]
    check(same and len(fields) > 60, f'the module\'s cci_stats has the header\'s {len(fields)} fields in order',
          f'header {len(expect)} fields, module {len(got)}; first differences {mismatch}')


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--scenario', required=True,
                    choices=['active', 'absent', 'disabled', 'older-library', 'layout'])
    ap.add_argument('--installed', action='store_true', help='check the module this python imports')
    ap.add_argument('--launcher', help='the installed ccinterpose (with --installed)')
    ap.add_argument('--source', help='the folder holding the package ccinterpose (the source tree)')
    ap.add_argument('--preload')
    ap.add_argument('--fake-libdir')
    ap.add_argument('--ccreplay-dir')
    ap.add_argument('--other-preload')
    ap.add_argument('--older-api')
    ap.add_argument('--header')
    opts = ap.parse_args()
    if opts.installed:
        import ccinterpose
        opts.source, opts.preload = None, ccinterpose.library_path()
        check(opts.preload is not None and opts.launcher is not None,
              f'the installed module ({ccinterpose.__file__}) has its library beside it', opts.preload)
        if failed:
            return 1
    else:
        sys.path.insert(0, opts.source)
    {'active': scenario_active, 'absent': scenario_absent, 'disabled': scenario_disabled,
     'older-library': scenario_older_library, 'layout': scenario_layout}[opts.scenario](opts)
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
