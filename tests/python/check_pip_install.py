#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""`pip install .` as a user does it, in a fresh virtual environment, without the network; then
the installed launcher, ccreplay, ccreport-merge and module on the fake CUDA. Run by .ci/run's
pip step (plain part) after the build tree's tests, whose fake libraries and example it uses.

check_pip_install.py --source-root DIR --builddir DIR [--keep DIR]

Run it with the interpreter that has meson-python (Debian: /usr/bin/python3 with
python3-mesonpy): the environment is made with --system-site-packages, because
--no-build-isolation imports the build backend from the environment pip installs into, and a
bare venv has no meson-python (nor can it fetch one without the network).
Every check prints one `ok:` or `FAIL:` line; the status is 1 when any failed.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

failed = False


def check(ok, what, detail=''):
    global failed
    print(('ok: ' if ok else 'FAIL: ') + what, flush=True)
    if not ok:
        failed = True
        if detail:
            print('  ' + str(detail).rstrip().replace('\n', '\n  ')[-6000:], flush=True)
    return ok


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, errors='replace', timeout=300, **kw)


def show(r):
    return f'status {r.returncode}\n--- stdout\n{r.stdout}--- stderr\n{r.stderr}'


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--source-root', required=True)
    ap.add_argument('--builddir', required=True, help='a built tree: its fake CUDA and example')
    ap.add_argument('--keep', help='make the environment here and keep it (default: a temporary one)')
    opts = ap.parse_args()
    build = os.path.abspath(opts.builddir)
    fake_libdir = os.path.join(build, 'tests', 'fake')
    example = os.path.join(build, 'examples', 'seedfrag-fake')
    with tempfile.TemporaryDirectory(prefix='cci-pip-') as tmp:
        venv = os.path.abspath(opts.keep) if opts.keep else os.path.join(tmp, 'venv')
        bindir = os.path.join(venv, 'bin')
        py = os.path.join(bindir, 'python')
        r = run([sys.executable, '-m', 'venv', '--system-site-packages', venv])
        if not check(r.returncode == 0, 'python3 -m venv --system-site-packages', show(r)):
            return 1
        env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK='1', PIP_NO_CACHE_DIR='1')
        r = run([py, '-m', 'pip', 'install', '--no-build-isolation', '--no-index', '-q',
                 os.path.abspath(opts.source_root)], env=env, cwd=tmp)
        if not check(r.returncode == 0, 'pip install --no-build-isolation --no-index .', show(r)):
            return 1

        for name in ('ccinterpose', 'ccreplay', 'ccreport-merge'):
            path = os.path.join(bindir, name)
            check(os.access(path, os.X_OK), f"{name} on the environment's bin/")
        # The module this environment imports: the installed one, with its library beside it.
        r = run([py, '-c', 'import ccinterpose as c; print(c.__file__); print(c.library_path())'], cwd=tmp)
        lines = r.stdout.split()
        check(r.returncode == 0 and len(lines) == 2 and all(p.startswith(venv + '/') for p in lines),
              'import ccinterpose: the installed module and library', show(r))
        library = os.path.realpath(lines[1]) if len(lines) == 2 else None

        run_env = dict(os.environ, LD_LIBRARY_PATH=fake_libdir, FAKECUDA_CAPACITY='4G', CCI_REPORT='off')
        run_env.pop('LD_PRELOAD', None)
        # The launcher preloads the environment's library, never a build tree's or another install's.
        r = run([os.path.join(bindir, 'ccinterpose'), '--', 'env'], env=run_env, cwd=tmp)
        preloaded = [l.split('=', 1)[1] for l in r.stdout.splitlines() if l.startswith('LD_PRELOAD=')]
        check(r.returncode == 0 and preloaded and os.path.realpath(preloaded[0]) == library,
              "the launcher preloads the package's library", show(r))
        report = os.path.join(tmp, 'seedfrag.json')
        r = run([os.path.join(bindir, 'ccinterpose'), '-r', report, '--', example], env=run_env, cwd=tmp)
        try:
            rep = json.load(open(report))
            peak = rep['devices'][0]['stats']['allocated_bytes.all.peak']
            program = rep['process']['program']
        except (OSError, ValueError, KeyError, IndexError) as e:
            peak, program = 0, str(e)
        check(r.returncode == 0 and peak > 0 and program == example,
              'ccinterpose -r REPORT -- seedfrag-fake: served by the installed library', show(r) + program)
        r = run([os.path.join(bindir, 'ccreport-merge'), report], cwd=tmp)
        check(r.returncode == 0 and f'({report}, host' in r.stdout, 'ccreport-merge reads the report', show(r))

        # The module under the installed launcher: every function, figures checked.
        here = os.path.dirname(os.path.abspath(__file__))
        for scenario in ('active', 'absent'):
            r = run([py, os.path.join(here, 'check_module.py'), '--installed', '--scenario', scenario,
                     '--launcher', os.path.join(bindir, 'ccinterpose'), '--fake-libdir', fake_libdir,
                     '--other-preload', os.path.join(build, 'tests', 'install', 'libcci_dummy_preload.so')],
                    cwd=tmp)
            print(r.stdout, end='')
            check(r.returncode == 0, f'the installed module, scenario {scenario}', r.stderr)
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
