#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Runs a test program and checks its exit code and what it wrote to stderr.

run_expect.py [--rc N] [--stderr-lines N] [--count TEXT N]... [--stdout TEXT]... -- program args
"""
import argparse
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--rc', type=int, default=0)
    ap.add_argument('--stderr-lines', type=int)
    ap.add_argument('--count', nargs=2, action='append', default=[], metavar=('TEXT', 'N'))
    ap.add_argument('--stdout', action='append', default=[])
    ap.add_argument('cmd', nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == '--' else a.cmd
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    sys.stdout.write(p.stdout)
    sys.stdout.write(''.join('stderr| ' + line + '\n' for line in p.stderr.splitlines()))
    failed = False

    def check(ok, what):
        nonlocal failed
        print(('ok: ' if ok else 'FAIL: ') + what)
        failed |= not ok

    check(p.returncode == a.rc, f'exit code {p.returncode} (expected {a.rc})')
    lines = p.stderr.splitlines()
    if a.stderr_lines is not None:
        check(len(lines) == a.stderr_lines, f'{len(lines)} stderr lines (expected {a.stderr_lines})')
    for text, n in a.count:
        got = sum(text in line for line in lines)
        check(got == int(n), f'{got} stderr lines contain "{text}" (expected {n})')
    for text in a.stdout:
        check(text in p.stdout, f'stdout contains "{text}"')
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
