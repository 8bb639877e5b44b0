#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The preload exports exactly the names of its version script and needs no CUDA library.

check_exports.py LIBRARY MAPFILE
"""
import re
import subprocess
import sys


def main():
    lib, mapfile = sys.argv[1], sys.argv[2]
    text = re.sub(r'/\*.*?\*/', '', open(mapfile).read(), flags=re.S)
    m = re.search(r'global:(.*?)local:', text, flags=re.S)
    listed = {n.strip() for n in m.group(1).split(';') if n.strip()}
    anonymous = re.match(r'\s*\{', text) is not None
    out = subprocess.run(['nm', '-D', '--defined-only', lib], capture_output=True, text=True,
                         check=True).stdout
    exported = {line.split()[-1] for line in out.splitlines() if line.strip()}
    dyn = subprocess.run(['readelf', '-dW', lib], capture_output=True, text=True, check=True).stdout
    needed = re.findall(r'\(NEEDED\).*\[(.*)\]', dyn)
    vers = subprocess.run(['readelf', '-VW', lib], capture_output=True, text=True, check=True).stdout

    failed = False

    def check(ok, what):
        nonlocal failed
        print(('ok: ' if ok else 'FAIL: ') + what)
        failed |= not ok

    check(anonymous, f'{mapfile} is an anonymous version script')
    check(exported == listed, f'nm -D --defined-only lists the {len(listed)} names of the version script')
    for name in sorted(exported - listed):
        print('  exported but not listed:', name)
    for name in sorted(listed - exported):
        print('  listed but not exported:', name)
    check(all(x.split('@')[0] == x for x in exported), 'no exported name carries a version')
    check('Version definition' not in vers, 'the library defines no version node')
    bad = [n for n in needed if n.startswith(('libcuda.', 'libcudart.'))]
    check(not bad, f'no NEEDED on libcuda/libcudart (NEEDED: {", ".join(needed)})')
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
