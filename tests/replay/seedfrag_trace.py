#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Writes a cci text trace of the seedfrag workload (benchmarks' fragmentation seed) for any
number of steps, so that replay can count what compact mode does in steady state; the shared
seedfrag snapshot holds only 20 steps.

usage: seedfrag_trace.py STEPS [OUT]   (OUT: a file, default stdout)

Each step k, as the workload does it on one stream (PyTorch's caching off, so every tensor is an
allocation of its own):
    x = 10 tensors of 4 MiB * (1 + k % 4)       then every other one freed (x[::2])
    big = one tensor of 64 MiB + 8 MiB * (k % 3)
    big freed, then the rest of x in reverse order
The recorded addresses are made up (unique per live block): replay maps them to its own.
"""
import sys

MiB = 1 << 20


def events(steps):
    nxt = 0x10000000000
    free_list = []

    def alloc(size):
        nonlocal nxt
        addr = free_list.pop() if free_list else nxt
        if addr == nxt:
            nxt += 1 << 30
        yield f"alloc {addr:#x} {size} 0 0"
        return addr

    def free(addr, size):
        free_list.append(addr)
        yield f"free_requested {addr:#x} {size} 0 0"
        yield f"free_completed {addr:#x} {size} 0 0"

    for k in range(steps):
        s = 4 * MiB * (1 + k % 4)
        x = []
        for _ in range(10):
            addr = yield from alloc(s)
            x.append(addr)
        for addr in x[::2]:
            yield from free(addr, s)
        rest = x[1::2]
        b = 64 * MiB + 8 * MiB * (k % 3)
        big = yield from alloc(b)
        yield from free(big, b)
        for addr in reversed(rest):
            yield from free(addr, s)


def main():
    if len(sys.argv) not in (2, 3) or not sys.argv[1].isdigit():
        sys.stderr.write("usage: seedfrag_trace.py STEPS [OUT]\n")
        return 2
    lines = ["# cci-text-trace 1", "# device 0", "# source seedfrag_trace.py"]
    lines += events(int(sys.argv[1]))
    text = "\n".join(lines) + "\n"
    if len(sys.argv) == 3:
        with open(sys.argv[2], "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
