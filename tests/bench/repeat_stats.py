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

TIME_TARGET = 0.03   # issue 12: wall time within 3 % of PyTorch native


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


def time_figures(ours, native, target=TIME_TARGET):
    """The wall-time row of one configuration against native ({round: seconds} each).

    The verdict is "met" when both the ratio of medians and the median paired ratio are within
    the target, "NOT met" when both exceed it, "undecided" when they straddle it, and "not
    resolvable" when native itself moved by more than the target (or ran once, so its noise is
    unknown): no figure can then tell a 3 % difference from the noise."""
    o, n = list(ours.values()), list(native.values())
    fig = {"runs": len(o), "median": median(o), "min": min(o) if o else None, "max": max(o) if o else None,
           "spread": spread(o) if o else None, "native_spread": spread(n) if n else None,
           "x_medians": None, "x_paired": None, "verdict": "no runs"}
    if not o or not n:
        return fig
    fig["x_medians"] = fig["median"] / median(n) if median(n) else None
    pairs = paired_ratios(ours, native)
    fig["x_paired"] = median(pairs)
    if len(n) < 2:
        fig["verdict"] = "not resolvable: one native run, its noise unknown"
    elif fig["native_spread"] > target:
        fig["verdict"] = f"not resolvable at this noise (native spread {fig['native_spread'] * 100:.1f} %)"
    elif fig["x_medians"] is None or fig["x_paired"] is None:
        fig["verdict"] = "no paired rounds"
    else:
        ratios = (fig["x_medians"], fig["x_paired"])
        if max(ratios) <= 1 + target:
            fig["verdict"] = "met"
        elif min(ratios) > 1 + target:
            fig["verdict"] = "NOT met"
        else:
            fig["verdict"] = f"undecided (the two ratios straddle {target * 100:.0f} %)"
    return fig


def main():
    if len(sys.argv) < 4 or sys.argv[1] != "order" or not sys.argv[2].isdigit() or int(sys.argv[2]) < 1:
        sys.exit(__doc__)
    print(" ".join(rotated(sys.argv[3:], int(sys.argv[2]))))


if __name__ == "__main__":
    main()
