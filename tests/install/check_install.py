#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""What a user gets: the installed files (or the build-tree launcher), used as a user would.

check_install.py --layout installed ...   `meson install --destdir` into a temporary directory,
                                           then the installed launcher, header and ccinterpose.pc
check_install.py --layout build-tree ...  build/scripts/ccinterpose on the same programs

Every check prints one `ok:` or `FAIL:` line; the status is 1 when any failed. The programs run
on the fake CUDA libraries (LD_LIBRARY_PATH), never on a GPU.
"""
import argparse
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile

failed = False


def check(ok, what, detail=''):
    global failed
    print(('ok: ' if ok else 'FAIL: ') + what)
    if not ok:
        failed = True
        if detail:
            print('  ' + detail.rstrip().replace('\n', '\n  '))
    return ok


def run(cmd, env=None, cwd=None):
    return subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, errors='replace',
                          timeout=240)


def show(r):
    return f'status {r.returncode}\n--- stdout\n{r.stdout}--- stderr\n{r.stderr}'


def preload_line(r):
    m = re.search(r'^LD_PRELOAD=(.*)$', r.stdout, flags=re.M)
    return m.group(1) if m else None


def reads_variable(lib, name):
    """Whether the library reads an environment variable: its name, alone, among the constants.

    A build whose preload does not read CCI_REPORT or CCI_TRACE does not name them; the checks
    that need the file they name are then reported as not run instead of failing.
    """
    out = run(['readelf', '-p', '.rodata', lib]).stdout
    return any(line.split(']', 1)[-1].strip() == name for line in out.splitlines())


def under(destdir, path):
    return os.path.join(destdir, path.lstrip('/')) if destdir else path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--layout', choices=['installed', 'build-tree'], required=True)
    ap.add_argument('--builddir', required=True)
    ap.add_argument('--meson', default='meson')
    ap.add_argument('--pkg-config', default='')
    ap.add_argument('--prefix', required=True)
    ap.add_argument('--bindir', required=True)
    ap.add_argument('--libdir', required=True)
    ap.add_argument('--includedir', required=True)
    ap.add_argument('--source-include', required=True)
    ap.add_argument('--version', required=True)
    ap.add_argument('--cc', required=True)
    ap.add_argument('--cxx', default='')
    ap.add_argument('--fake-include', required=True)
    ap.add_argument('--fake-libdir', required=True)
    ap.add_argument('--dummy-preload', required=True)
    ap.add_argument('--probe-src', required=True)
    ap.add_argument('--example', required=True)
    a = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix='cci-install-')
    try:
        if a.layout == 'installed':
            test_installed(a, tmp)
        else:
            test_build_tree(a, tmp)
    finally:
        if not failed:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f'(files kept in {tmp})')
    return 1 if failed else 0


def base_env(a):
    env = dict(os.environ)
    for k in ('LD_PRELOAD', 'CCI_ALLOC_CONF', 'PYTORCH_CUDA_ALLOC_CONF', 'PYTORCH_ALLOC_CONF',
              'PYTORCH_NO_CUDA_MEMORY_CACHING', 'CCI_DISABLE', 'CCI_LOG', 'CCI_REPORT',
              'CCI_REPORT_FORMAT', 'CCI_TRACE', 'CCI_DUMP_SIGNAL', 'CCI_PRELOAD_LIB'):
        env.pop(k, None)
    env['LD_LIBRARY_PATH'] = a.fake_libdir + (':' + env['LD_LIBRARY_PATH'] if env.get('LD_LIBRARY_PATH') else '')
    env['FAKECUDA_CAPACITY'] = '4G'
    return env


def build_probe(a, tmp, cflags):
    """The user's program: the header through cflags, the fake runtime, and no libccinterpose."""
    probe = os.path.join(tmp, 'api_probe')
    cmd = shlex.split(a.cc) + ['-std=c11', '-pedantic', '-Wall', '-Wextra', '-Werror'] + cflags + [
        '-I', a.fake_include, a.probe_src, '-o', probe, '-L', a.fake_libdir, '-lcudart']
    r = run(cmd)
    if not check(r.returncode == 0, 'a program using the opt-in API builds with ' + ' '.join(cflags) +
                 ' and no library', ' '.join(cmd) + '\n' + show(r)):
        return None
    dyn = run(['readelf', '-dW', '--dyn-syms', probe]).stdout
    check('libccinterpose' not in ''.join(l for l in dyn.splitlines() if '(NEEDED)' in l),
          'the program does not need libccinterpose.so', dyn)
    weak = {l.split()[-1] for l in dyn.splitlines() if ' WEAK ' in l and ' UND ' in l}
    want = {'cci_is_active', 'cci_get_stats', 'cci_empty_cache', 'cci_config_string', 'cci_dump_report'}
    check(want <= weak, 'its references to the API are weak and undefined', dyn)
    return probe


def check_launcher(a, tmp, launcher, lib, probe, layout):
    """The launcher on the probe: library found, exit codes, signals, LD_PRELOAD, bad options."""
    env = base_env(a)
    r = run([probe, 'inactive'], env=env)
    check(r.returncode == 0, 'without the preload the program runs and the API answers "not active"', show(r))

    r = run([launcher, '--', probe, 'active'], env=env)
    check(r.returncode == 0, f'{layout} launcher: the preload is active and serves a cached pair', show(r))
    check(preload_line(r) == lib, f'{layout} launcher preloads {lib}', show(r))

    r = run([launcher, probe, 'exit', '3'], env=env)
    check(r.returncode == 3, 'the exit status is the program\'s own (3), program given without --', show(r))

    r = run([launcher, '--', probe, 'signal'], env=env)
    check(r.returncode == -signal.SIGTERM,
          'a program killed by SIGTERM leaves the launcher\'s process killed by SIGTERM (exec)', show(r))

    r = run([launcher, '--', probe, 'active'], env=dict(env, LD_PRELOAD=a.dummy_preload))
    check(r.returncode == 0 and 'cci-dummy-preload: loaded' in r.stderr,
          'an existing preload still loads, and ours still caches', show(r))
    check(preload_line(r) == a.dummy_preload + ':' + lib, 'LD_PRELOAD is appended to, not replaced', show(r))

    r = run([launcher, '--', probe, 'active'], env=dict(env, LD_PRELOAD=lib))
    check(r.returncode == 0 and preload_line(r) == lib, 'our library is not added twice', show(r))

    # torchrun's workers are children of children: they must inherit the preload and the options.
    r = run([launcher, '-c', 'max_split_size_mb:64', '--', 'sh', '-c', '"$0" active', probe], env=env)
    m = re.search(r'^config=(.*)$', r.stdout, flags=re.M)
    check(r.returncode == 0 and m and 'max_split_size_mb:64' in m.group(1).split(','),
          'a child process inherits the preload and --conf', show(r))

    r = run([launcher, '-c', 'max_split_size_mb:64', '-r', 'rep-%p.html', '-f', 'json', '-t', 'tr-%r', '-q',
             '--dump-signal', 'USR2', '--', 'env'], env=env)
    want = {'CCI_ALLOC_CONF': 'max_split_size_mb:64', 'CCI_REPORT': 'rep-%p.html', 'CCI_REPORT_FORMAT': 'json',
            'CCI_TRACE': 'tr-%r', 'CCI_LOG': 'error', 'CCI_DUMP_SIGNAL': 'USR2'}
    got = dict(l.split('=', 1) for l in r.stdout.splitlines() if l.startswith('CCI_'))
    check(r.returncode == 0 and got == want, 'each option exports its variable, and only those', show(r))
    r = run([launcher, '-v', '-v', '--', 'env'], env=env)
    check('CCI_LOG=debug' in r.stdout.splitlines(), '-v -v sets CCI_LOG=debug', show(r))

    # --torch-streams: PyTorch's backend key for PyTorch, the user's other keys for us.
    def streams_env(extra, *args):
        r = run([launcher, '--torch-streams'] + list(args) + ['--', 'env'], env=dict(env, **extra))
        return r, dict(l.split('=', 1) for l in r.stdout.splitlines() if '=' in l)
    r, got = streams_env({})
    check(r.returncode == 0 and got.get('PYTORCH_CUDA_ALLOC_CONF') == 'backend:cudaMallocAsync'
          and got.get('CCI_ALLOC_CONF') == 'backend:native', '--torch-streams alone', show(r))
    r, got = streams_env({'PYTORCH_CUDA_ALLOC_CONF': 'expandable_segments:True, backend:native,max_split_size_mb:64'})
    check(got.get('CCI_ALLOC_CONF') == 'expandable_segments:True,max_split_size_mb:64'
          and got.get('PYTORCH_CUDA_ALLOC_CONF') == 'backend:cudaMallocAsync',
          "--torch-streams: the user's PyTorch keys become ours, without the backend key", show(r))
    r, got = streams_env({'PYTORCH_CUDA_ALLOC_CONF': 'garbage_collection_threshold:0.8',
                          'CCI_ALLOC_CONF': 'compact_segments:True'})
    check(got.get('CCI_ALLOC_CONF') == 'compact_segments:True', '--torch-streams keeps CCI_ALLOC_CONF', show(r))
    r, got = streams_env({'PYTORCH_NO_CUDA_MEMORY_CACHING': '1'}, '-c', 'roundup_power2_divisions:4')
    check(got.get('CCI_ALLOC_CONF') == 'roundup_power2_divisions:4' and 'PYTORCH_NO_CUDA_MEMORY_CACHING' not in got
          and len(r.stderr.splitlines()) == 1 and 'PYTORCH_NO_CUDA_MEMORY_CACHING' in r.stderr,
          '--torch-streams: --conf wins, and PyTorch\'s no-caching switch is unset with one line', show(r))
    r = run([launcher, '--torch-streams', '--', probe, 'active'], env=env)
    check(r.returncode == 0, '--torch-streams: a program without PyTorch is served as before', show(r))

    r = run([launcher, '--disable', '--', probe, 'inactive'], env=env)
    check(r.returncode == 0, '--disable: loaded, yet the API says not active', show(r))

    bad = [
        (['--confg', 'x', '--', probe, 'active'], "unknown option '--confg' (see ccinterpose --help)"),
        (['-x', probe], "unknown option '-x'"),
        (['-c'], "option '-c' needs an argument"),
        (['--report', '--', probe], "option '--report' needs an argument"),
        (['-c', '', probe], 'non-empty'),
        (['--conf=', probe], 'non-empty'),
        (['-f', 'xml', '--', probe], "'xml' is not a report format"),
        (['--dump-signal', 'USR3', '--', probe], "'USR3' is not a signal"),
        (['--dump-signal=9', '--', probe], 'signal 9 cannot be used'),
    ]
    for args, text in bad:
        r = run([launcher] + args, env=env)
        lines = r.stderr.splitlines()
        check(r.returncode == 2 and len(lines) == 1 and lines[0].startswith('ccinterpose: ') and text in lines[0]
              and r.stdout == '', f'refused with status 2 and one line: ccinterpose {shlex.join(args)}', show(r))

    r = run([launcher], env=env)
    check(r.returncode == 2 and 'Usage: ccinterpose' in r.stderr and r.stdout == '',
          'no program: usage on stderr, status 2', show(r))
    r = run([launcher, '-v'], env=env)
    check(r.returncode == 2 and 'Usage: ccinterpose' in r.stderr, 'options but no program: status 2', show(r))
    r = run([launcher, '--help'], env=env)
    check(r.returncode == 0 and 'Usage: ccinterpose' in r.stdout and '--report' in r.stdout, '--help', show(r))
    r = run([launcher, '--version'], env=env)
    check(r.returncode == 0 and r.stdout.strip().endswith(a.version), f'--version says {a.version}', show(r))
    r = run([launcher, '--', os.path.join(tmp, 'no-such-program')], env=env)
    check(r.returncode == 127 and len(r.stderr.splitlines()) == 1 and 'command not found' in r.stderr,
          'a missing program: one line, status 127', show(r))

    r = run([launcher, '--', probe, 'active'], env=dict(env, CCI_PRELOAD_LIB=os.path.join(tmp, 'nope.so')))
    check(r.returncode == 1 and len(r.stderr.splitlines()) == 1 and 'CCI_PRELOAD_LIB' in r.stderr
          and r.stdout == '', 'CCI_PRELOAD_LIB naming no file: one line, status 1', show(r))


def check_example(a, tmp, launcher, lib):
    """A fake-CUDA example under the launcher: the exit summary, and the report and trace files
    once the preload reads CCI_REPORT / CCI_TRACE."""
    env = base_env(a)
    if not check(os.access(a.example, os.X_OK), f'the example {a.example} is built'):
        return
    report = os.path.join(tmp, 'report-%p.json')
    trace = os.path.join(tmp, 'trace-%p.cct')
    r = run([launcher, '-v', '-r', report, '-t', trace, '--', a.example], env=env)
    check(r.returncode == 0 and re.search(r'ccinterpose\[\d+\]: info: device 0: peak reserved', r.stderr),
          'the example runs under the launcher; -v shows the exit summary', show(r))
    files = os.listdir(tmp)
    if reads_variable(lib, 'CCI_REPORT'):
        reports = [f for f in files if re.fullmatch(r'report-\d+\.json', f)]
        ok = len(reports) == 1
        if ok:
            try:
                with open(os.path.join(tmp, reports[0])) as f:
                    json.load(f)
            except ValueError as e:
                ok = False
                r.stderr += f'\n{reports[0]}: {e}'
        check(ok, '-r report-%p.json writes one JSON report named after the pid', show(r) + f'\nfiles: {files}')
    else:
        print('not run: the report file check (the preload does not read CCI_REPORT yet)')
    if reads_variable(lib, 'CCI_TRACE'):
        traces = [f for f in files if re.fullmatch(r'trace-\d+\.cct', f)]
        if check(len(traces) == 1, '-t trace-%p.cct records one trace', f'files: {files}'):
            ccreplay = os.path.join(os.path.dirname(launcher), 'ccreplay')
            if not os.access(ccreplay, os.X_OK):
                ccreplay = os.path.join(a.builddir, 'src', 'tools', 'ccreplay')
            rr = run([ccreplay, os.path.join(tmp, traces[0])], env=env)
            check(rr.returncode == 0, 'ccreplay replays the recorded trace', show(rr))
    else:
        print('not run: the trace file check (the preload does not read CCI_TRACE yet)')


def check_header(a, tmp, cflags):
    """The installed header alone, as C11 and as C++11, both pedantic with warnings as errors."""
    calls = '''
    cci_stats s;
    s.size = sizeof s;
    int (*f)(void) = cci_is_active;
    int bad = f() != 0 || cci_get_stats(0, &s) != -1 || cci_empty_cache(0) != -1 ||
              cci_config_string()[0] != '\\0' || cci_dump_report(0) != -1;
'''
    c_alone = os.path.join(tmp, 'header_alone.c')
    with open(c_alone, 'w') as f:
        f.write('#include <ccinterpose.h>\n')
    cmd = shlex.split(a.cc) + ['-std=c11', '-pedantic', '-Werror', '-Wall', '-Wextra'] + cflags + [
        '-c', c_alone, '-o', os.path.join(tmp, 'header_alone.o')]
    r = run(cmd)
    check(r.returncode == 0, 'the header compiles alone: -std=c11 -pedantic -Werror -Wall -Wextra',
          ' '.join(cmd) + '\n' + show(r))
    if not a.cxx:
        print('not run: the C++ header check (no C++ compiler found)')
        return
    cxx_src = os.path.join(tmp, 'header_cxx.cc')
    with open(cxx_src, 'w') as f:
        f.write('#include <ccinterpose.h>\n\nint main()\n{' + calls + '    return bad;\n}\n')
    exe = os.path.join(tmp, 'header_cxx')
    cmd = shlex.split(a.cxx) + ['-std=c++11', '-pedantic', '-Werror', '-Wall', '-Wextra'] + cflags + [
        cxx_src, '-o', exe]
    r = run(cmd)
    if check(r.returncode == 0, 'the header compiles as C++: -std=c++11 -pedantic -Werror -Wall -Wextra',
             ' '.join(cmd) + '\n' + show(r)):
        r = run([exe], env=base_env(a))
        check(r.returncode == 0, 'the C++ program runs without the preload; the API answers "not active"', show(r))


def test_installed(a, tmp):
    destdir = os.path.join(tmp, 'dest')
    r = run([a.meson, 'install', '-C', a.builddir, '--destdir', destdir, '--no-rebuild', '--quiet'])
    if not check(r.returncode == 0, f'meson install --destdir {destdir}', show(r)):
        return
    prefix_path = lambda d: d if os.path.isabs(d) else os.path.join(a.prefix, d)
    bindir, libdir, includedir = (under(destdir, prefix_path(d)) for d in (a.bindir, a.libdir, a.includedir))
    launcher = os.path.join(bindir, 'ccinterpose')
    lib = os.path.realpath(os.path.join(libdir, 'libccinterpose.so'))  # the launcher names it physically
    for path, exe in ((launcher, True), (os.path.join(bindir, 'ccreplay'), True), (lib, False),
                      (os.path.join(includedir, 'ccinterpose.h'), False),
                      (os.path.join(libdir, 'pkgconfig', 'ccinterpose.pc'), False)):
        check(os.path.isfile(path) and (not exe or os.access(path, os.X_OK)),
              f'installed: {os.path.relpath(path, destdir)}' + (' (executable)' if exe else ''))

    cflags = ['-I' + includedir]
    if a.pkg_config:
        # PKG_CONFIG_SYSROOT_DIR: how pkg-config is pointed at a staged (DESTDIR) installation.
        env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(libdir, 'pkgconfig'), PKG_CONFIG_SYSROOT_DIR=destdir)
        r = run([a.pkg_config, '--cflags', 'ccinterpose'], env=env)
        if check(r.returncode == 0 and r.stdout.strip(), 'pkg-config --cflags ccinterpose', show(r)):
            cflags = shlex.split(r.stdout)
        r = run([a.pkg_config, '--libs', 'ccinterpose'], env=env)
        check(r.returncode == 0 and r.stdout.strip() == '', 'pkg-config --libs ccinterpose is empty: nothing to link',
              show(r))
        r = run([a.pkg_config, '--modversion', 'ccinterpose'], env=env)
        check(r.stdout.strip() == a.version, f'pkg-config --modversion ccinterpose is {a.version}', show(r))
        r = run([a.pkg_config, '--variable=preload', 'ccinterpose'], env=env)
        value = r.stdout.strip()
        if value.startswith(destdir):  # pkgconf before 1.9 leaves variables without the sysroot
            value = value[len(destdir):]
        check(value == os.path.join(prefix_path(a.libdir), 'libccinterpose.so') and
              os.path.isfile(under(destdir, value)), 'pkg-config --variable=preload names the installed library',
              show(r))
    else:
        print('not run: the pkg-config checks (no pkg-config found); the header is used with -I')

    check_header(a, tmp, cflags)
    probe = build_probe(a, tmp, cflags)
    if probe:
        check_launcher(a, tmp, launcher, lib, probe, 'installed')

        # A symbolic link to the launcher from elsewhere (~/bin) still finds the installation's library.
        link_dir = os.path.join(tmp, 'elsewhere')
        os.makedirs(link_dir)
        link = os.path.join(link_dir, 'ccinterpose')
        os.symlink(launcher, link)
        r = run([link, '--', probe, 'active'], env=base_env(a))
        check(r.returncode == 0 and preload_line(r) == lib, 'a symbolic link to the launcher finds the library',
              show(r))
        # CCI_PRELOAD_LIB wins over the launcher's own library.
        other = os.path.join(a.builddir, 'preload', 'libccinterpose.so')
        r = run([launcher, '--', probe, 'active'], env=dict(base_env(a), CCI_PRELOAD_LIB=other))
        check(r.returncode == 0 and preload_line(r) == os.path.realpath(other), 'CCI_PRELOAD_LIB is preloaded instead',
              show(r))
        # A copy away from its libdir falls back to the configured (non-DESTDIR) path.
        copy = os.path.join(tmp, 'copy-of-ccinterpose')
        shutil.copy(launcher, copy)
        configured = os.path.join(prefix_path(a.libdir), 'libccinterpose.so')
        if not os.path.exists(configured):
            r = run([copy, '--', probe, 'active'], env=base_env(a))
            check(r.returncode == 1 and len(r.stderr.splitlines()) == 1 and 'cannot find libccinterpose.so' in r.stderr
                  and configured.rsplit('/', 1)[0] in r.stderr,
                  'a launcher away from its library says where it looked, status 1', show(r))
    check_example(a, tmp, launcher, lib)


def test_build_tree(a, tmp):
    launcher = os.path.join(a.builddir, 'scripts', 'ccinterpose')
    lib = os.path.realpath(os.path.join(a.builddir, 'preload', 'libccinterpose.so'))
    probe = build_probe(a, tmp, ['-I' + a.source_include])
    if probe:
        check_launcher(a, tmp, launcher, lib, probe, 'build-tree')
    check_example(a, tmp, launcher, lib)


if __name__ == '__main__':
    sys.exit(main())
