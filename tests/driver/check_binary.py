#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks on built code that behaviour tests cannot see directly.

check_binary.py trampoline LIBRARY
    The exported dlsym never returns through itself: its last instruction is an indirect jump
    (x86-64 `jmp *%rax`, AArch64 `br x16`) and it contains no return, so glibc sees the
    program's return address, not ours. Exit 77 (skip) on other architectures.
check_binary.py ref BINARY SYMBOL VERSION...
    BINARY references SYMBOL with one of the given versions (e.g. dlsym@GLIBC_2.2.5).
"""
import platform
import re
import subprocess
import sys


def objdump(*args):
    return subprocess.run(['objdump', *args], capture_output=True, text=True, check=True).stdout


def trampoline(lib):
    arch = platform.machine()
    want = {'x86_64': r'jmp\s+\*%rax', 'aarch64': r'br\s+x16'}.get(arch)
    if not want:
        print(f'skip: no trampoline check for {arch}')
        return 77
    out = objdump('-d', '--no-show-raw-insn', '--disassemble=dlsym', lib)
    body = out.split('<dlsym>:', 1)[1] if '<dlsym>:' in out else ''
    insns = [line.split(':', 1)[1].strip() for line in body.splitlines()
             if re.match(r'\s*[0-9a-f]+:\s', line)]
    print('\n'.join('  ' + i for i in insns))
    ok = bool(insns) and re.match(want, insns[-1]) and not any(
        re.match(r'(ret|retq)\b', i) for i in insns)
    print(('ok: ' if ok else 'FAIL: ') + f'dlsym ends in a tail jump ({want}) and never returns')
    return 0 if ok else 1


def ref(binary, symbol, versions):
    out = objdump('-T', binary)
    found = [l.split()[-2:] for l in out.splitlines() if l.split() and l.split()[-1] == symbol]
    got = {v.strip('()') for v, _ in found}
    ok = bool(got & set(versions))
    print(('ok: ' if ok else 'FAIL: ') +
          f'{binary} references {symbol} with version {sorted(got)} (want one of {versions})')
    return 0 if ok else 1


def main():
    if sys.argv[1] == 'trampoline':
        return trampoline(sys.argv[2])
    return ref(sys.argv[2], sys.argv[3], sys.argv[4:])


if __name__ == '__main__':
    sys.exit(main())
