#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The preload's rooms call one way: no object of a room refers to a symbol defined in a room
above it or beside it, except the lazy start (base/start.h), which every room may call.

Each room's include folders already keep its headers from naming a room above (preload/meson.build);
this check reads the compiled objects (nm), so a call that bypasses the headers (an extern written
by hand, a symbol of the same name) is caught too.

check_rooms.py TOP_OBJECT_DIR NAME:FLOOR=LIBRARY.a [NAME:FLOOR=LIBRARY.a ...]
FLOOR: 0 for the bottom room; two rooms on one floor may not call each other. The objects in
TOP_OBJECT_DIR (lifecycle.c's) form the top floor.
"""
import os
import subprocess
import sys

# The one arrow that runs upward, by design: any hook may be the program's first call.
ALLOWED_UP = {'cci_preload_start'}


def symbols(path):
    """(defined, undefined) symbol sets of an archive or an object, per member."""
    out = subprocess.run(['nm', '-A', path], capture_output=True, text=True, check=True).stdout
    members = {}
    for line in out.splitlines():
        fields = line.split()
        if len(fields) < 2:
            continue
        member = fields[0].rstrip(':')
        kind, name = fields[-2], fields[-1]
        d, u = members.setdefault(member, (set(), set()))
        if kind == 'U':
            u.add(name)
        elif kind in 'TDBRVW':
            d.add(name)
    return members


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    top_dir = sys.argv[1]
    rooms = []  # (name, rank, path)
    for arg in sys.argv[2:]:
        name, _, path = arg.partition('=')
        name, _, rank = name.partition(':')
        rooms.append((name, int(rank), path))
    top_rank = max(r for _, r, _ in rooms) + 1
    objects = [os.path.join(top_dir, f) for f in sorted(os.listdir(top_dir)) if f.endswith('.o')]
    rooms.append(('top', top_rank, objects))

    owner = {}  # symbol -> (room, rank)
    uses = []   # (room, rank, member, undefined set)
    for name, rank, path in rooms:
        paths = path if isinstance(path, list) else [path]
        for p in paths:
            for member, (defined, undefined) in symbols(p).items():
                for s in defined:
                    owner[s] = (name, rank)
                uses.append((name, rank, member, undefined))

    bad = []
    arrows = set()
    for name, rank, member, undefined in uses:
        for s in undefined:
            if s not in owner:
                continue
            to, to_rank = owner[s]
            if to == name:
                continue
            arrows.add((name, to))
            if to_rank >= rank and s not in ALLOWED_UP:
                bad.append(f'{name} ({os.path.basename(member)}) -> {to}: {s}')
    print(f'{len(rooms)} rooms, {len(arrows)} arrows between rooms:',
          ', '.join(f'{a}->{b}' for a, b in sorted(arrows)))
    for line in sorted(bad):
        print('FAIL: upward or sideways:', line)
    if not arrows:
        print('FAIL: no arrow found between rooms: the check read nothing')
        return 1
    if bad:
        return 1
    up = sorted(a for a, b in arrows if b == 'top')
    print(f'ok: every arrow runs down; the lazy start runs up from {", ".join(up) or "no room"}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
