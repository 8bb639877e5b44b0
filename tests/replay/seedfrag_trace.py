#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Writes a cci text trace of the seedfrag workload (torch_workloads.py's fragmentation pattern)
for any number of steps, so that replay can count what compact mode does in steady state; the
shared seedfrag snapshot holds only 20 steps.

usage: seedfrag_trace.py [--runs R] STEPS [OUTPUT]   (OUTPUT: a file, default stdout)

Each step k, as the workload does it on one stream (PyTorch's caching off, so every tensor is an
allocation of its own):
    x = 10 tensors of 4 MiB * (1 + k % 4)       then every other one freed (x[::2])
    big = one tensor of 64 MiB + 8 MiB * (k % 3)
    big freed, then the rest of x in reverse order
The recorded addresses are made up (unique per live block): replay maps them to its own.

--runs R: the shape of tests/bench/torch_run.py's process on the GPU instead (2 warm-up steps, then
R runs of STEPS steps, k starting at 0 in each), with what the workload keeps beside the tensors:
each step's loss, a 512 B tensor in the small pool, held until the run ends. Those scalars raise
the allocated peak by a few bytes at a time, which is what a trace of the tensors alone misses.
"""
import sys

MiB = 1 << 20


def events(steps, runs=0):
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

    def step(k, losses):
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
        if losses is not None:
            losses.append((yield from alloc(512)))
        yield from free(big, b)
        for addr in reversed(rest):
            yield from free(addr, s)

    if not runs:
        for k in range(steps):
            yield from step(k, None)
        return
    for n in [2] + [steps] * runs:  # the warm-up, then the timed runs
        losses = []
        for k in range(n):
            yield from step(k, losses)
        for addr in reversed(losses):
            yield from free(addr, 512)


def main():
    args = sys.argv[1:]
    runs = 0
    if args[:1] == ["--runs"] and len(args) > 1 and args[1].isdigit() and int(args[1]) > 0:
        runs = int(args[1])
        args = args[2:]
    if len(args) not in (1, 2) or not args[0].isdigit():
        sys.stderr.write("usage: seedfrag_trace.py [--runs R] STEPS [OUTPUT]\n")
        return 2
    lines = ["# cci-text-trace 1", "# device 0", "# source seedfrag_trace.py"]
    lines += events(int(args[0]), runs)
    text = "\n".join(lines) + "\n"
    if len(args) == 2:
        with open(args[1], "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
