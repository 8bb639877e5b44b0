#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Writes a cci text trace that repeats another one COPIES times, as a long run of the same
training step: what the trace allocates and never frees (weights, optimizer state) is allocated
once and stays; everything it both allocates and frees is replayed again in every copy, under
addresses of its own. The shared snapshots hold one or two iterations, too few for compact mode's
churn count to trip; a repeated one shows what a long run on the GPU does.

usage: repeat_trace.py COPIES IN OUTPUT   (IN: a cci text trace, e.g. from scripts/snapshot2trace.py;
       OUTPUT: the file to write)

Only alloc, free_requested and free_completed events are kept (replay reads nothing else that
matters here; PyTorch's own segment events describe its pool, not the program).
"""
import sys

KEEP = ("alloc", "free_requested", "free_completed")
COPY_STRIDE = 1 << 44  # addresses of copy c: the original + c * COPY_STRIDE (never overlapping)


def main():
    if len(sys.argv) != 4 or not sys.argv[1].isdigit() or int(sys.argv[1]) < 1:
        sys.exit("usage: repeat_trace.py COPIES IN OUTPUT")
    copies, src, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    head, ev = [], []
    with open(src) as f:
        for line in f:
            if line.startswith("#"):
                head.append(line)
                continue
            fields = line.split()
            if fields and fields[0] in KEEP:
                ev.append(fields)
    # The allocations still live at the end (by event index: an address may be reused).
    live = {}
    for i, fields in enumerate(ev):
        if fields[0] == "alloc":
            live[fields[1]] = i
        elif fields[0] == "free_completed":
            live.pop(fields[1], None)
    persistent = set(live.values())
    with open(out, "w") as o:
        o.writelines(head)
        for c in range(copies):
            mine = set()  # addresses this copy allocated (a later copy skips the persistent ones)
            for i, fields in enumerate(ev):
                kind, addr = fields[0], fields[1]
                if kind == "alloc":
                    if c and i in persistent:
                        continue
                    mine.add(addr)
                elif addr not in mine:
                    continue  # a free of a block this copy did not allocate
                elif kind == "free_completed":
                    mine.discard(addr)
                o.write(" ".join([kind, hex(int(addr, 16) + c * COPY_STRIDE)] + fields[2:]) + "\n")


if __name__ == "__main__":
    main()
