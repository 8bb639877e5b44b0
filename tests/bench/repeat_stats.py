#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Repeated GPU runs: the order of each round, and the figures a verdict may rest on.

  repeat_stats.py order ROUND CONFIG...   prints the configurations in round ROUND's order (1-based)

Wall time of the same configuration moved 10-35 % between runs on the H100, so one run per
configuration proves nothing about a 3 % target. scripts/gpu-check.sh and scripts/gpu-ddp.sh run
every configuration once per round, the order rotated by one place each round: a host that warms
up or slows down over the call then weighs on every configuration in turn, not always on the first.
gpu_report.py reads the rounds back and judges them with time_figures().
"""
import sys

TIME_TARGET = 0.03   # the wall-time target: within 3 % of PyTorch native


def rotated(configs, round_no):
    """Round round_no (1-based) runs configs rotated left by round_no - 1 places."""
    if not configs:
        return []
    k = (round_no - 1) % len(configs)
    return list(configs[k:]) + list(configs[:k])


def median(values):
    xs = sorted(values)
    if not xs:
        return None
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2


def spread(values):
    """(max - min) / median: how far apart the runs of one configuration landed."""
    m = median(values)
    return (max(values) - min(values)) / m if m else None


def paired_ratios(ours, native):
    """ours_r / native_r for every round r both ran ({round: seconds} each). Pairing cancels what
    a round shares (the host's state at that moment); the median of the pairs then drops the
    round where one of the two was disturbed."""
    return [ours[r] / native[r] for r in sorted(ours) if r in native and native[r]]


def ratio_interval(ours, native, level=0.95, resamples=4000, seed=12):
    """A bootstrap interval for median(ours) / median(native), the runs of each side resampled
    on their own (each run is one process: the processes of a configuration are independent
    draws, and the H100's process-to-process noise, 20-50 % on resnet, dwarfs a round's).
    Seeded, so the same logs always give the same interval. With few runs the interval is wide,
    never narrow: the median of 3 resampled runs is one of the 3 runs."""
    import random
    rnd = random.Random(seed)
    o, n = list(ours), list(native)
    ratios = sorted(median(rnd.choices(o, k=len(o))) / median(rnd.choices(n, k=len(n)))
                    for _ in range(resamples))
    tail = (1 - level) / 2
    return ratios[int(tail * (resamples - 1))], ratios[int((1 - tail) * (resamples - 1))]


MIN_RUNS = 3  # fewer runs on a side give no interval worth the name


def fastest_ratio(ours_runs, native_runs):
    """The fastest timed run of ours over native's fastest (every run of every process, each side).

    The H100 host runs each process at one of two speeds, host-bound code ~1.5x slower in the slow
    one, and a process can change speed within seconds: the median of a few processes lands in
    either cluster, and ratios of medians jumped between 1.00 and 1.06 for the same build
    (docs/benchmarks.md, "the host's two speeds", 2026-11-24, 3dddbde). Over several processes each side's fastest run is one in the fast speed, so
    this ratio compares the two at one speed. Shown beside the verdict, never as one: a minimum has
    no interval worth the name. None when either side has no run."""
    o = [x for x in ours_runs if x]
    n = [x for x in native_runs if x]
    return min(o) / min(n) if o and n else None


def quantile(values, q):
    """The q-quantile of values (the nearest rank, no interpolation)."""
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))]


def quartile_ratio(ours_runs, native_runs):
    """The first quartile of ours' timed runs over native's (every run of every process, each side).

    A second figure beside fastest_ratio that a single lucky run cannot move: with six timed runs a
    process the quarter of the fastest runs holds runs of several processes. On resnet (24-60 runs
    a side) it read within 0.04 of the fastest and median ratios for every configuration
    (docs/benchmarks.md, "more runs per configuration", 2026-11-24, 8124dec). Shown, never a verdict. None when either side has fewer than 4 runs."""
    o = [x for x in ours_runs if x]
    n = [x for x in native_runs if x]
    if len(o) < 4 or len(n) < 4:
        return None
    return quantile(o, 0.25) / quantile(n, 0.25)


def time_figures(ours, native, target=TIME_TARGET):
    """The wall-time row of one configuration against native ({round: seconds} each).

    The verdict rests on a 95 % interval for the ratio of the medians (ratio_interval): "met"
    when all of it is within the target, "NOT met" when all of it is beyond, "not resolvable at
    this noise" when it straddles the target (more rounds narrow it), and "not resolvable" with
    fewer than MIN_RUNS runs on either side. The ratio of medians and the median paired ratio are
    shown beside it."""
    o, n = list(ours.values()), list(native.values())
    fig = {"runs": len(o), "median": median(o), "min": min(o) if o else None, "max": max(o) if o else None,
           "spread": spread(o) if o else None, "native_spread": spread(n) if n else None,
           "x_medians": None, "x_paired": None, "x_interval": None, "verdict": "no runs"}
    if not o or not n:
        return fig
    fig["x_medians"] = fig["median"] / median(n) if median(n) else None
    pairs = paired_ratios(ours, native)
    fig["x_paired"] = median(pairs)
    if len(n) < 2:
        fig["verdict"] = "not resolvable: one native run, its noise unknown"
    elif min(len(o), len(n)) < MIN_RUNS or not all(n):
        fig["verdict"] = f"not resolvable: {min(len(o), len(n))} runs, an interval needs {MIN_RUNS}"
    else:
        lo, hi = fig["x_interval"] = ratio_interval(o, n)
        if hi <= 1 + target:
            fig["verdict"] = "met"
        elif lo > 1 + target:
            fig["verdict"] = "NOT met"
        else:
            fig["verdict"] = (f"not resolvable at this noise (interval straddles +{target * 100:.0f} %; "
                              f"native spread {fig['native_spread'] * 100:.1f} %)")
    return fig


def main():
    if len(sys.argv) < 4 or sys.argv[1] != "order" or not sys.argv[2].isdigit() or int(sys.argv[2]) < 1:
        sys.exit(__doc__)
    print(" ".join(rotated(sys.argv[3:], int(sys.argv[2]))))


if __name__ == "__main__":
    main()
