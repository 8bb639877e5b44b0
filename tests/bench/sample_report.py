#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Reads a tests/bench/sampler.c profile and prints where the samples fell: by module, then, for
each module given with --lib (one with debug information: line numbers and inlining), by function
(the outermost function of an inlined chain: what the code calls) and by source line (the
innermost: where the time goes).

  sample_report.py SAMPLES [--lib [MODULE=]PATH]... [--top N]

A module is matched by its file name; MODULE=PATH names a copy of the library that ran (brought
back from the GPU host under another name), e.g. --lib libccinterpose.so=out/lib.so.
"""
import argparse
import collections
import os
import subprocess
import sys


def read_samples(path):
    rows = []
    with open(path) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            count, module, offset = line.split()
            rows.append((int(count), module, int(offset, 16)))
    return rows


def symbolize(lib, offsets):
    """{offset: [(function, file:line), ...] innermost first} through one addr2line run."""
    args = ["addr2line", "-a", "-f", "-i", "-e", lib] + [hex(o) for o in offsets]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout.splitlines()
    chains, cur = {}, None
    i = 0
    while i < len(out):
        if out[i].startswith("0x"):
            cur = int(out[i], 16)
            chains[cur] = []
            i += 1
            continue
        fn = out[i]
        where = out[i + 1] if i + 1 < len(out) else "?"
        chains[cur].append((fn, os.path.basename(where.split(" ")[0])))
        i += 2
    return chains


def table(title, counter, total, top):
    print(title)
    for name, c in counter.most_common(top):
        print(f"  {c:7d} {100.0 * c / total:5.1f}%  {name}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("samples")
    ap.add_argument("--lib", action="append", default=[], help="[MODULE=]PATH: a module to break down (with debug info)")
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args()
    try:
        rows = read_samples(args.samples)
    except (OSError, ValueError) as e:
        print(f"sample_report: {args.samples}: {e}", file=sys.stderr)
        return 1
    total = sum(c for c, _, _ in rows)
    if not total:
        print(f"sample_report: {args.samples}: no samples", file=sys.stderr)
        return 1
    modules = collections.Counter()
    for c, m, _ in rows:
        modules[os.path.basename(m)] += c
    table(f"{total} samples, by module:", modules, total, args.top)
    for spec in args.lib:
        name, _, lib = spec.rpartition("=")
        name = name or os.path.basename(lib)
        mine = [(c, o) for c, m, o in rows if os.path.basename(m) == name]
        if not mine:
            print(f"{name}: no samples")
            continue
        try:
            chains = symbolize(lib, sorted({o for _, o in mine}))
        except (OSError, subprocess.CalledProcessError) as e:
            print(f"sample_report: addr2line on {lib}: {e}", file=sys.stderr)
            return 1
        outer, inner = collections.Counter(), collections.Counter()
        for c, o in mine:
            chain = chains.get(o) or [("??", "??:0")]
            outer[chain[-1][0]] += c
            inner[f"{chain[0][0]} ({chain[0][1]})"] += c
        table(f"{name}, by function (outermost of an inlined chain):", outer, total, args.top)
        table(f"{name}, by source line (innermost):", inner, total, args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
