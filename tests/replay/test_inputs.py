# SPDX-License-Identifier: MIT
"""ccreplay knows the format from the first bytes: /dev/zero, an endless pipe of zeros and a random
file are refused with exit 2 after at most 64 KiB read and 64 MiB of memory; a zlib-compressed
snapshot is read. `--capacity` lists the first OOMs with the event, the size, what the device had
free and the largest cached free block.

usage: test_inputs.py CCREPLAY"""
import json
import os
import pickle
import random
import re
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

failures = []
SNIFF = 64 << 10
# The first-OOM figures below are ordinary segments' (the default is compact segments on the
# simulated device, which offers the virtual-memory API).
ORDINARY = "compact_segments:False"


def check(cond, msg):
    if not cond:
        failures.append(msg)


def refused(ccreplay, path, what, stdin=None):
    """Runs ccreplay on path: exit 2 and one line saying how much it read (at most 64 KiB)."""
    p = subprocess.Popen([ccreplay, path], stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, err = p.communicate(timeout=30)
    err = err.decode()
    m = re.search(r"stopped reading after ([0-9]+) bytes", err)
    check(p.returncode == 2 and len(err.splitlines()) == 1 and "not a trace" in err and m,
          f"{what}: exit {p.returncode}, stderr {err!r}")
    if m:
        check(int(m.group(1)) <= SNIFF, f"{what}: read {m.group(1)} bytes before refusing")


def main():
    ccreplay = sys.argv[1]
    # Peak RSS of one refusal, measured on a child of its own (the test's other children do not count).
    probe = subprocess.run([sys.executable, "-c", f"""
import resource, subprocess, sys
subprocess.run([{ccreplay!r}, "/dev/zero"], capture_output=True)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"""], capture_output=True, text=True, check=True)
    rss_mib = int(probe.stdout.strip()) / 1024
    check(rss_mib <= 64, f"/dev/zero: peak RSS {rss_mib:.1f} MiB")
    refused(ccreplay, "/dev/zero", "/dev/zero")
    cat = subprocess.Popen(["cat", "/dev/zero"], stdout=subprocess.PIPE)
    refused(ccreplay, "/dev/stdin", "a pipe of zeros", stdin=cat.stdout)
    cat.stdout.close()
    cat.kill()
    cat.wait()
    with tempfile.TemporaryDirectory() as tmp:
        rnd = Path(tmp, "random.bin")
        # Seeded: urandom's bytes began with a pickle header (0x80 and a protocol) about once in
        # 16 000 runs, and then the pickle reader refused them with its own message.
        rnd.write_bytes(random.Random(20261128).randbytes(256 << 10))
        refused(ccreplay, str(rnd), "a random file")
        # A zlib stream (zlib.compress) of a snapshot: recognised from its header and read.
        events = []
        for i in range(40):
            a = 0x7f0000000000 + i * (64 << 20)
            events.append({"action": "alloc", "addr": a, "size": 48 << 20, "stream": 0, "time_us": 100 * i})
        snap = {"device_traces": [events]}
        zpath = Path(tmp, "snap.pickle.zlib")
        zpath.write_bytes(zlib.compress(pickle.dumps(snap)))
        p = subprocess.run([ccreplay, "--json", "--capacity", "1G", "--conf", ORDINARY, str(zpath)], capture_output=True, text=True)
        check(p.returncode == 0, f"zlib snapshot: exit {p.returncode}, {p.stderr!r}")
        if p.returncode == 0:
            r = json.loads(p.stdout)
            # 40 blocks of 48 MiB never freed on 1 GiB: 21 fit (1008 MiB), the 19 after them fail.
            check(r["format"] == "snapshot" and r["num_ooms"] == 19 and r["simulated_device"] is True,
                  f"zlib snapshot replay: {r['format']}, {r['num_ooms']} OOMs")
            first = r["first_ooms"]
            check(len(first) == 10 and first[0]["size"] == 48 << 20 and first[0]["device_free"] < 48 << 20 and
                  first[0]["largest_free_block"] < 48 << 20, f"first OOMs: {first[:2]}")
            check([o["event"] for o in first] == list(range(21, 31)), f"first OOM events {[o['event'] for o in first]}")
        p = subprocess.run([ccreplay, "--capacity", "1G", "--conf", ORDINARY, str(zpath)], capture_output=True, text=True)
        check(re.search(r"^first OOMs +event 21 \(device 0\): 48\.0 MiB requested; device free 16\.0 MiB, reserved "
                            r"1008\.0 MiB, largest cached free block 0 B$", p.stdout, re.M),
              f"text: no first-OOM line in {p.stdout!r}")
        check("(9 more)" in p.stdout, "text: the OOMs past the first ten are not counted")
    for f in failures:
        print("FAIL:", f)
    print(f"{len(failures)} failure(s); refusing /dev/zero peaked at {rss_mib:.1f} MiB")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
