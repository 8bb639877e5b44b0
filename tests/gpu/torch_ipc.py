#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""CUDA tensors shared between two processes with torch.multiprocessing (spawn start method).

The parent makes a 1 GiB float32 tensor of known values (i % 1021) and a few small ones (one a
view at an offset into a larger storage, so that its handle names the storage and the offset),
and puts them on a Queue. The child checksums each (float64 sums on the GPU), writes in place into
three of them (a small tensor, the last elements of the 1 GiB one, the view) and sends back a new
1 GiB tensor of its own. The parent checks that the child saw what it sent, that the writes are
visible in its own memory and nowhere else, and the checksum of the child's tensor. All values are
integers, so the float64 sums are exact: the same figures natively and under the preload.

Run under PYTORCH_NO_CUDA_MEMORY_CACHING=1 every tensor is its own cudaMalloc, which the preload
serves; some PyTorch releases refuse to share such tensors ("invalid device pointer", before any
CUDA IPC call): that is reported as "refused" with exit status 3, so that a caller can tell it
from a failure. One JSON line on stdout; exit status 0 only if every check held.

Usage: torch_ipc.py [--mib 1024] [--timeout 150]
"""
import argparse
import faulthandler
import json
import os
import pickle
import sys
import time

MOD_PARENT, MOD_CHILD = 1021, 997
TAIL = 1000  # elements at the end of the 1 GiB tensor that the child overwrites
VIEW = (1234, 5678)  # the shared view: base[1234:5678] of a 10000-element storage


def series_sum(n, mod):
    """sum(i % mod for i in range(n)), exactly."""
    q, r = divmod(n, mod)
    return q * mod * (mod - 1) // 2 + r * (r - 1) // 2


def checksum(t):
    import torch

    return float(torch.sum(t, dtype=torch.float64).item())


def preload_loaded():
    with open("/proc/self/maps") as f:
        return "libccinterpose" in f.read()


def dumps(obj):
    """Pickled as the queue would, but here: a reduction error inside Queue.put's feeder thread is
    only printed and the peer would wait for nothing; raised here, it is reported."""
    from multiprocessing.reduction import ForkingPickler

    import torch.multiprocessing  # noqa: F401  (registers the CUDA tensor reductions)

    return bytes(ForkingPickler.dumps(obj))


def child_main(q_in, q_out, n, timeout):
    faulthandler.dump_traceback_later(timeout + 30, exit=True)
    import torch
    import torch.multiprocessing  # noqa: F401  (registers the CUDA tensor reductions)

    try:
        got = pickle.loads(q_in.get(timeout=timeout))
        seen = {k: checksum(v) for k, v in got.items()}
        got["w"].fill_(2.5)
        got["w"][::3] = -1.0
        got["big"][-TAIL:] = 12345.0
        got["view"].mul_(2.0)
        own = (torch.arange(n, device="cuda", dtype=torch.int32) % MOD_CHILD).to(torch.float32) * 2.0 - 5.0
        own_sum = checksum(own)
        # Nothing orders the parent's reads after this process's queued work but a synchronize.
        torch.cuda.synchronize()
        q_out.put(dumps({"seen": seen, "own": own, "own_sum": own_sum, "preload": preload_loaded()}))
        q_in.get(timeout=timeout)  # the parent is done with `own`: it may go now
        del got, own
        torch.cuda.synchronize()
    except Exception as e:  # reported to the parent, which prints the verdict
        q_out.put(pickle.dumps({"error": f"{type(e).__name__}: {e}"}))
        sys.exit(1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=1024, help="size of each large tensor (default 1024)")
    ap.add_argument("--timeout", type=float, default=150.0, help="seconds for each wait (default 150)")
    a = ap.parse_args()
    faulthandler.dump_traceback_later(3 * a.timeout, exit=True)
    t0 = time.monotonic()
    import torch
    import torch.multiprocessing as mp

    out = {
        "ok": False,
        "mode": "nocache" if os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING") else "torch-cache",
        "torch": torch.__version__,
        "preload": preload_loaded(),
        "mib": a.mib,
    }

    def finish(code, **kw):
        out.update(kw)
        out["seconds"] = round(time.monotonic() - t0, 2)
        print(json.dumps(out, sort_keys=True), flush=True)
        sys.exit(code)

    if not torch.cuda.is_available():
        finish(1, error="torch.cuda.is_available() is False")
    n = a.mib * 2**20 // 4
    dev = torch.device("cuda", 0)
    big = (torch.arange(n, device=dev, dtype=torch.int32) % MOD_PARENT).to(torch.float32)
    base = torch.arange(10000, device=dev, dtype=torch.float32)
    sent = {
        "big": big,
        "threes": torch.full((1000,), 3.0, device=dev),
        "f64": torch.arange(4096, device=dev, dtype=torch.float64) * 0.25,
        "i64": torch.arange(7, device=dev, dtype=torch.int64) * 1000003,
        "view": base[VIEW[0] : VIEW[1]],
        "w": torch.zeros(65536, device=dev),
    }
    torch.cuda.synchronize()
    mine = {k: checksum(v) for k, v in sent.items()}
    base_before = base.clone()
    expect_big = float(series_sum(n, MOD_PARENT))
    if mine["big"] != expect_big:
        finish(1, error=f"the parent's own 1 GiB sum {mine['big']} is not {expect_big}")
    try:
        payload = dumps(sent)
    except RuntimeError as e:
        finish(3, refused=f"{type(e).__name__}: {e}"[:300], checksums={"parent": mine})

    ctx = mp.get_context("spawn")
    q_in, q_out = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=child_main, args=(q_in, q_out, n, a.timeout))
    p.start()
    try:
        q_in.put(payload)
        reply = pickle.loads(q_out.get(timeout=a.timeout))
    except Exception as e:
        p.kill()
        finish(1, error=f"no reply from the child: {type(e).__name__}: {e}", checksums={"parent": mine})
    if "error" in reply:
        p.join(a.timeout)
        finish(1, error="child: " + reply["error"], checksums={"parent": mine})

    # What the parent sees after the child's writes (the child synchronized before replying).
    w_expect = torch.full((65536,), 2.5, device=dev)
    w_expect[::3] = -1.0
    base_expect = base_before.clone()
    base_expect[VIEW[0] : VIEW[1]] *= 2.0
    own = reply["own"]
    own_expect = float(2 * series_sum(n, MOD_CHILD) - 5 * n)
    checks = {
        "child_saw_what_was_sent": reply["seen"] == mine,
        "small_write_visible": bool(torch.equal(sent["w"], w_expect)),
        "big_tail_written": bool((big[-TAIL:] == 12345.0).all().item()),
        "big_rest_intact": checksum(big[:-TAIL]) == float(series_sum(n - TAIL, MOD_PARENT)),
        "view_write_in_place_only": bool(torch.equal(base, base_expect)),
        "others_intact": all(checksum(sent[k]) == mine[k] for k in ("threes", "f64", "i64")),
        "child_tensor_sum": checksum(own) == reply["own_sum"] == own_expect,
        "child_preload_as_parent": reply["preload"] == out["preload"],
    }
    sums = {
        "parent": mine,
        "child_seen": reply["seen"],
        "after_child_writes": {k: checksum(v) for k, v in sent.items()},
        "child_own": reply["own_sum"],
        "child_own_received": checksum(own),
    }
    del own, reply
    torch.cuda.synchronize()
    torch.cuda.ipc_collect()
    q_in.put(b"done")
    p.join(a.timeout)
    if p.exitcode is None:
        p.kill()
    checks["child_exit_0"] = p.exitcode == 0
    ok = all(checks.values())
    finish(0 if ok else 1, ok=ok, checks=checks, checksums=sums, child_exit=p.exitcode)


if __name__ == "__main__":
    main()
