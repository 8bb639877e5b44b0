#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Instructions per alloc+free pair, split by function and by part of the code, from two callgrind
runs of the same program that differ only in their number of pairs (scripts/profile-hooks.sh).

  profile_table.py --pairs N1 N2 --title TEXT SHORT.callgrind LONG.callgrind [--top K]

Start-up, the first segment and exit cost the same in both runs, so (LONG - SHORT) / (N2 - N1) is
the cost of one more pair, whole program: every thread (the fake CUDA's stream workers too), with
nothing toggled. Exclusive: instructions in the function's own code (inlined helpers included,
except uthash's macros, which get their own line in the split). Inclusive: the function and
everything it calls (a function's calls to itself are not counted twice).
"""
import argparse
import re
import sys
from collections import defaultdict

# (category, test on the source file or object) in order; the first that matches wins.
CATEGORIES = [
    ("hooks (exported entry points)", lambda f, o: re.search(r"preload/hooks/hooks_(runtime|driver)\.c$", f)),
    ("intercept, levels, base, state", lambda f, o: re.search(
        r"preload/(intercept/\w+|serve/(levels|state)|base/\w+|hooks/(resolver|dlsym_hook)|lifecycle)\.[ch]$", f)),
    ("serve", lambda f, o: re.search(r"preload/serve/(serve|observers|addr_map)\.[ch]$", f)),
    ("stream registry, rule checks", lambda f, o: re.search(
        r"preload/(serve/stream_rule|cuda/stream_registry|cuda/captures)\.[ch]$", f)),
    ("backend (fences, segments)", lambda f, o: "preload/cuda/" in f),
    ("uthash (macros, inlined)", lambda f, o: f.endswith("uthash.h")),
    ("core: cci_malloc, cci_free", lambda f, o: "src/core/" in f),
    ("observer: history", lambda f, o: f.endswith("preload/observe/history.c")),
    ("observer: timeline", lambda f, o: "src/report/report_timeline" in f),
    ("observer: callsites", lambda f, o: re.search(r"preload/observe/(callsites|python_frames)\.[ch]$", f)),
    ("observer: trace", lambda f, o: "src/trace/" in f),
    ("report, other preload", lambda f, o: "src/report/" in f or "/preload/" in f),
    ("the fake CUDA", lambda f, o: "tests/fake/" in f or re.search(r"lib(cudart|cuda)\.so", o)),
    ("benchmark loop", lambda f, o: "tests/bench/" in f),
    ("libc: locks", lambda f, o: re.search(r"pthread_mutex|lowlevellock|futex", f)),
    ("libc, ld.so: other", lambda f, o: True),
]


FAKE = re.compile(r"tests/fake/")


def category(file, obj):
    for name, test in CATEGORIES:
        if test(file, obj):
            return name
    return CATEGORIES[-1][0]


def parse(path):
    """Returns (exclusive by function, inclusive by function, exclusive by category, total), all in Ir.
    A function is named 'name (file)' by the file callgrind gives for it (fl=)."""
    names = {"fl": {}, "fn": {}, "ob": {}}
    excl, incl, cat = defaultdict(int), defaultdict(int), defaultdict(int)
    real = defaultdict(int)  # calls from our code (or the program) into the fake CUDA, by callee
    fl = fi = fn = ob = ""
    cfn = cfl = None
    pending_call = False
    total = 0

    def name_of(kind, value):
        # Compressed names: "(id) name" defines an id, "(id)" reuses it.
        m = re.match(r"\((\d+)\)\s*(.*)", value)
        if not m:
            return value
        if m.group(2):
            names[kind][m.group(1)] = m.group(2)
        return names[kind].get(m.group(1), value)

    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line[0] == "#":
                continue
            key, _, value = line.partition("=")
            if line[0].isalpha() and _ and key in ("fl", "fi", "fe", "fn", "ob", "cfn", "cfl", "cfi", "cob",
                                                    "calls", "jump", "jcnd"):
                if key == "fl":
                    fl = fi = name_of("fl", value)
                elif key in ("fi", "fe"):
                    fi = name_of("fl", value)
                elif key == "fn":
                    fn = f"{name_of('fn', value)} ({fl})"
                    fi = fl
                elif key == "ob":
                    ob = name_of("ob", value)
                elif key == "cob":
                    name_of("ob", value)
                elif key in ("cfl", "cfi"):
                    cfl = name_of("fl", value)
                elif key == "cfn":
                    cfn = name_of("fn", value)
                elif key == "calls":
                    pending_call = True
                    # A call into the fake CUDA from outside it: one real CUDA call (on a GPU, an
                    # entry into libcuda or libcudart, whatever its instruction count here).
                    callee = cfl if cfl is not None else fl
                    if FAKE.search(callee) and not FAKE.search(fl):
                        real[cfn] += int(value.split()[0])
                    cfl = None
                continue
            if not (line[0].isdigit() or line[0] in "+-*"):
                continue  # header lines (events:, positions:, totals:, ...)
            parts = line.split()
            cost = int(parts[1]) if len(parts) > 1 else 0
            if pending_call:
                # The inclusive cost of the call(s) just declared: the callee's, added to the caller.
                if not fn.startswith(f"{cfn} ("):
                    incl[fn] += cost
                pending_call = False
                continue
            cfl = None
            excl[fn] += cost
            incl[fn] += cost
            cat[category(fi if fi.endswith("uthash.h") else fl, ob)] += cost
            total += cost
    return excl, incl, cat, total, real


def per_pair(long, short, pairs):
    keys = set(long) | set(short)
    return {k: (long.get(k, 0) - short.get(k, 0)) / pairs for k in keys}


def short_name(fn):
    m = re.match(r"(.*) \((.*)\)$", fn)
    if not m:
        return fn
    name, file = m.groups()
    file = re.sub(r".*/(preload|src/\w+|tests/\w+)/", r"\1/", file)
    file = re.sub(r"^\./.*/", "", file)
    return f"{name} [{file}]"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", nargs=2, type=int, required=True, metavar=("N1", "N2"))
    ap.add_argument("--title", default="")
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("short")
    ap.add_argument("long")
    args = ap.parse_args()
    n = args.pairs[1] - args.pairs[0]
    if n <= 0:
        ap.error("N2 must be larger than N1")
    s_ex, s_in, s_cat, s_tot, s_real = parse(args.short)
    l_ex, l_in, l_cat, l_tot, l_real = parse(args.long)
    total = (l_tot - s_tot) / n
    ex, inc, cat = per_pair(l_ex, s_ex, n), per_pair(l_in, s_in, n), per_pair(l_cat, s_cat, n)
    print(f"{args.title}: {total:.0f} instructions per pair")
    print(f"  {'part of the code (exclusive)':<36}{'Ir/pair':>9}{'share':>8}")
    for name, _ in CATEGORIES:
        v = cat.get(name, 0)
        if abs(v) >= 0.5:
            print(f"  {name:<36}{v:>9.0f}{100 * v / total if total else 0:>7.1f}%")
    real = {k: v for k, v in per_pair(l_real, s_real, n).items() if abs(v) >= 0.005}
    calls = ", ".join(f"{k} {v:.2f}" for k, v in sorted(real.items(), key=lambda kv: -kv[1]))
    print(f"  real CUDA calls per pair: {sum(real.values()):.2f}" + (f" ({calls})" if calls else ""))
    print(f"  {'function (top by inclusive)':<58}{'incl':>8}{'excl':>8}")
    # The thread's own frames (start_thread, the benchmark loop) contain everything: left out.
    frames = re.compile(r"^(clone|start_thread|\(below main\)|0x[0-9a-f]+) |\(.*tests/bench/")
    listed = [kv for kv in inc.items() if not frames.search(kv[0])]
    for fn, v in sorted(listed, key=lambda kv: -kv[1])[:args.top]:
        print(f"  {short_name(fn)[:58]:<58}{v:>8.0f}{ex.get(fn, 0):>8.0f}")
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
