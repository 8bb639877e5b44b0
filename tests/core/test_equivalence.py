#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""PyTorch equivalence: replaying the shared H100 training snapshots through our core on ordinary
segments (compact_segments:False: PyTorch's native policy; our default is compact segments where
the device offers the virtual-memory API) must reproduce PyTorch's own peak reserved memory within
2 %.

usage: test_equivalence.py SNAPSHOT2TRACE CCREPLAY TRACES_DIR
"""
import json
import os
import subprocess
import sys
import tempfile

# PyTorch's peak reserved memory on the H100 for each shared trace, MiB (from the snapshot runs).
PYTORCH_PEAK_RESERVED_MIB = {"encoder": 7022, "resnet": 3498, "seedfrag": 256}
TOLERANCE = 0.02


def main():
    conv, replay, traces = sys.argv[1:4]
    if not os.path.isdir(traces):
        print(f"SKIP: {traces} not found (the shared traces live beside the project)")
        return 77
    passed = failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, want in sorted(PYTORCH_PEAK_RESERVED_MIB.items()):
            src = os.path.join(traces, f"{name}.pickle.xz")
            out = os.path.join(tmp, f"{name}.trace")
            subprocess.run([sys.executable, conv, src, "-o", out], check=True)
            res = json.loads(subprocess.run([replay, "--json", "--conf", "compact_segments:False", out], check=True, capture_output=True,
                                            text=True).stdout)
            got = res["peak_reserved_bytes"] / 2**20
            alloc = res["peak_allocated_bytes"] / 2**20
            err = (got - want) / want
            ok = abs(err) <= TOLERANCE and res["num_ooms"] == 0 and res["unmatched_frees"] == 0
            print(f"{name:9s} peak reserved: ours {got:8.1f} MiB, PyTorch {want:6d} MiB, "
                  f"difference {err * 100:+.2f} %  (peak allocated {alloc:.1f} MiB, "
                  f"{res['events']} events) {'ok' if ok else 'FAIL'}")
            passed += ok
            failed += not ok
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
