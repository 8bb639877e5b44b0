#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""ccreplay end to end: every input format, every failure mode, the safety of snapshot reading,
and the determinism of --sweep.

usage: test_ccreplay.py CCREPLAY SNAPSHOT2TRACE TRACES_DIR [errors|shared]
  errors  synthetic inputs only (always runs)
  shared  the shared PyTorch snapshots: the C snapshot reader must agree with the script's
          text conversion, in every container; skipped (77) when TRACES_DIR is absent
"""
import gzip
import io
import json
import lzma
import os
import pickle
import random
import struct
import subprocess
import sys
import tempfile

CCREPLAY = SNAP2TRACE = TRACES = TMP = None
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"FAIL: {what}")


def run(*args):
    return subprocess.run([CCREPLAY, *args], capture_output=True, text=True, timeout=120)


def replay_json(path, *extra):
    p = run("--json", *extra, path)
    check(p.returncode == 0, f"ccreplay --json {path} {extra}: exit {p.returncode}: {p.stderr.strip()}")
    return json.loads(p.stdout) if p.returncode == 0 else {}


def write(name, data):
    path = os.path.join(TMP, name)
    with open(path, "wb") as f:
        f.write(data)
    return path


def expect_error(path_or_args, needle, what):
    """ccreplay must exit 2 with exactly one line on stderr containing needle, nothing on stdout."""
    args = path_or_args if isinstance(path_or_args, list) else [path_or_args]
    p = run(*args)
    lines = p.stderr.splitlines()
    ok = p.returncode == 2 and len(lines) == 1 and lines[0].startswith("ccreplay: ") and \
        needle in lines[0] and p.stdout == ""
    check(ok, f"{what}: want exit 2 and one line with {needle!r}; got exit {p.returncode}, "
              f"stderr {p.stderr!r}, stdout {p.stdout[:80]!r}")


# ---- synthetic traces ---------------------------------------------------------------------

ACTIONS = ["alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "oom"]


def synthetic_events(seed, n):
    """A PyTorch-like history: (action, addr, size, stream, device), frees completing in order."""
    rnd = random.Random(seed)
    live, ev, addr = [], [], 0x7f0000000000
    while len(ev) < n:
        if live and rnd.random() < 0.48:
            a, s, st = live.pop(rnd.randrange(len(live)))
            ev.append(("free_requested", a, s, st, 0))
            ev.append(("free_completed", a, s, st, 0))
        else:
            s = rnd.choice([rnd.randint(1, 1 << 20), rnd.randint(1 << 20, 10 << 20), rnd.randint(10 << 20, 300 << 20)])
            st = rnd.choice([0, 0, 140000000001])
            addr += 1 << 21  # recorded addresses only need to be unique while live
            live.append((addr, s, st))
            ev.append(("alloc", addr, s, st, 0))
    return ev


def text_trace(events):
    lines = ["# cci-text-trace 1", "# device 0"]
    lines += [f"{a} 0x{addr:x} {size} {stream} {dev}" for a, addr, size, stream, dev in events]
    return ("\n".join(lines) + "\n").encode()


def binary_trace(events, config="", capacity=0, shuffle_seed=None, version=1):
    """Written from docs/trace-format.md alone: a header, then 48-byte little-endian records."""
    conf = config.encode()
    hsize = (64 + len(conf) + 1 + 7) & ~7
    hdr = bytearray(hsize)
    hdr[0:8] = b"CCITRACE"
    struct.pack_into("<IIII", hdr, 8, version, hsize, 48, 0)
    struct.pack_into("<QQIiI", hdr, 24, capacity, 1700000000 * 10**9, 4242, -1, len(conf))
    hdr[64:64 + len(conf)] = conf
    recs = [(0, 6, 0, 0, capacity, 0)]  # seq 0: the device record
    for i, (a, addr, size, stream, dev) in enumerate(events):
        act = ACTIONS.index(a)
        req = size if act in (0, 5) else 0
        recs.append((i + 1, act, addr, stream, size, req))
    if shuffle_seed is not None:  # threads flush independently: order must come from seq
        random.Random(shuffle_seed).shuffle(recs)
    out = bytearray(hdr)
    for seq, act, addr, stream, size, req in recs:
        out += struct.pack("<QQQQQQ", seq * 100, seq, addr, stream, size, req | act << 48 | 0 << 56)
    return bytes(out)


def snapshot(events, extra=None):
    traces = [[{"action": a, "addr": addr, "size": size, "stream": stream, "time_us": i,
                "frames": [{"filename": "x.py", "line": 1, "name": "f"}]}
               for i, (a, addr, size, stream, dev) in enumerate(events)]]
    snap = {"segments": [], "device_traces": traces,
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1}}
    if extra:
        snap.update(extra)
    return snap


class Evil:
    """Unpickling this runs os.system: the canonical malicious pickle."""
    def __init__(self, cmd):
        self.cmd = cmd

    def __reduce__(self):
        return (os.system, (self.cmd,))


def formats_agree():
    ev = synthetic_events(1, 6000)
    ref = replay_json(write("syn.trace", text_trace(ev)))
    snap = snapshot(ev)
    variants = {
        "binary": binary_trace(ev),
        "binary, records out of order": binary_trace(ev, shuffle_seed=7),
        "binary.gz": gzip.compress(binary_trace(ev)),
        "binary.xz": lzma.compress(binary_trace(ev)),
        "text.gz": gzip.compress(text_trace(ev)),
        "snapshot, protocol 2": pickle.dumps(snap, protocol=2),
        "snapshot, protocol 4": pickle.dumps(snap, protocol=4),
        "snapshot, protocol 5": pickle.dumps(snap, protocol=5),
        "snapshot, protocol 1": pickle.dumps(snap, protocol=1),
        "snapshot.gz": gzip.compress(pickle.dumps(snap)),
        "snapshot.xz": lzma.compress(pickle.dumps(snap)),
    }
    keys = ("events", "peak_allocated_bytes", "peak_reserved_bytes", "num_device_alloc", "num_ooms",
            "unmatched_frees")
    for i, (name, data) in enumerate(variants.items()):
        got = replay_json(write(f"variant{i}", data))
        check(all(got.get(k) == ref.get(k) for k in keys),
              f"{name}: {[(k, got.get(k), ref.get(k)) for k in keys if got.get(k) != ref.get(k)]}")
    for conf in ("max_split_size_mb:128", "roundup_power2_divisions:4"):
        a = replay_json(write("c.trace", text_trace(ev)), "--conf", conf)
        b = replay_json(write("c.bin", binary_trace(ev)), "--conf", conf)
        check(a.get("peak_reserved_bytes") == b.get("peak_reserved_bytes"), f"text vs binary under {conf}")
    # A binary trace with OOMs replays them as attempts; the capacity recorded is reported.
    p = run(write("cap.bin", binary_trace(ev, config="max_split_size_mb:256", capacity=8 << 30)))
    check(p.returncode == 0 and "recorded under      max_split_size_mb:256" in p.stdout,
          f"recorded configuration shown: {p.stdout!r} {p.stderr!r}")


def malformed():
    ev = synthetic_events(2, 400)
    good_bin = binary_trace(ev)
    # Binary: a cut inside the final record is a crash mid-write: replay the prefix, warn once.
    p = run("--json", write("cut.bin", good_bin[:-20]))
    lines = p.stderr.splitlines()
    check(p.returncode == 0 and len(lines) == 1 and "incomplete" in lines[0] and
          json.loads(p.stdout or "{}").get("events") == len(ev) - 1,
          f"binary cut mid-record: exit {p.returncode}, {p.stderr!r}")
    expect_error(write("hdr.bin", good_bin[:40]), "truncated binary trace", "binary header cut short")
    expect_error(write("hdr2.bin", good_bin[:70]), "truncated binary trace", "binary cut in the config string")
    expect_error(write("ver.bin", binary_trace(ev, version=9)), "version 9", "binary of a future version")
    bad = bytearray(good_bin)
    hsize = (64 + 1 + 7) & ~7  # no configuration string
    struct.pack_into("<Q", bad, hsize + 48 * 3 + 40, 43 << 48)  # record 3 gets action 43
    expect_error(write("act.bin", bytes(bad)), "unknown action", "binary record with an unknown action")
    dup = good_bin + good_bin[-48:]
    expect_error(write("dup.bin", dup), "appears twice", "binary record repeated")
    # Text.
    good_txt = text_trace(ev)
    expect_error(write("cut.trace", good_txt[:-7]), "truncated", "text cut mid-line")
    expect_error(write("bad.trace", good_txt.replace(b"alloc 0x", b"alloc 0y", 1)), "malformed event",
                 "text with a malformed event")
    expect_error(write("hdr.trace", b"# cci-text-trace 2\n"), "not a cci text trace", "text of another version")
    # Pickles and their containers.
    raw = pickle.dumps(snapshot(ev), protocol=4)
    expect_error(write("cut.pickle", raw[: len(raw) // 2]), "truncated", "pickle cut in half")
    expect_error(write("cut.pickle.xz", lzma.compress(raw)[:-30]), "xz data is truncated", "xz cut short")
    expect_error(write("cut.pickle.gz", gzip.compress(raw)[:-30]), "gzip data is truncated", "gzip cut short")
    corrupt = bytearray(gzip.compress(raw))
    corrupt[len(corrupt) // 2] ^= 0xff
    expect_error(write("bad.pickle.gz", bytes(corrupt)), "gzip data", "gzip corrupted")
    expect_error(write("list.pickle", pickle.dumps([1, 2, 3])), "not a memory snapshot", "pickle of a list")
    expect_error(write("nokey.pickle", pickle.dumps({"segments": []})), "no 'device_traces'", "dict without traces")
    s = snapshot(ev)
    del s["device_traces"][0][5]["addr"]
    expect_error(write("noaddr.pickle", pickle.dumps(s)), "'addr' is missing", "event without addr")
    s = snapshot(ev)
    s["device_traces"][0][5]["size"] = "big"
    expect_error(write("strsize.pickle", pickle.dumps(s)), "'size' is not an integer", "event with a string size")
    expect_error(write("garbage", b"\x00\x01garbage"), "not a trace", "unrecognised content")
    expect_error(write("empty", b""), "empty", "empty file")
    expect_error(os.path.join(TMP, "does-not-exist"), "cannot open", "missing file")
    expect_error(TMP, "directory", "a directory")
    # Options.
    t = write("ok.trace", good_txt)
    expect_error(["--capacity", "12Q", t], "--capacity", "bad capacity")
    expect_error(["--conf", "max_split_size_mb:banana", t], "max_split_size_mb", "bad configuration")
    expect_error(["--sweep", "--jobs", "0", t], "--jobs", "bad job count")
    expect_error(["--jobs", "2", t], "--jobs", "--jobs without --sweep")
    expect_error(["--sweep", "--conf", "max_split_size_mb:128", t], "--sweep", "--conf with --sweep")
    expect_error(["--frobnicate", t], "--frobnicate", "unknown option")


def malicious():
    marker = os.path.join(TMP, "PWNED")
    cmd = f"touch {marker}"
    payloads = {
        "os.system, protocol 0": pickle.dumps(Evil(cmd), protocol=0),
        "os.system, protocol 2": pickle.dumps(Evil(cmd), protocol=2),
        "os.system, protocol 4": pickle.dumps(Evil(cmd), protocol=4),
        "os.system inside a snapshot": pickle.dumps(snapshot(synthetic_events(3, 50), {"x": Evil(cmd)}), protocol=4),
        "os.system, xz": lzma.compress(pickle.dumps(Evil(cmd), protocol=4)),
        "os.system, gzip": gzip.compress(pickle.dumps(Evil(cmd), protocol=2)),
    }
    for i, (name, data) in enumerate(payloads.items()):
        expect_error(write(f"evil{i}.pickle", data), "refusing to unpickle global", name)
        check(not os.path.exists(marker), f"{name}: the payload ran")
    # REDUCE and BUILD with no global in reach are refused by name as well.
    expect_error(write("reduce.pickle", b"\x80\x02N)R."), "REDUCE", "bare REDUCE")
    expect_error(write("build.pickle", b"\x80\x02}}b."), "BUILD", "bare BUILD")
    expect_error(write("persid.pickle", b"\x80\x02X\x01\x00\x00\x00aQ."), "BINPERSID", "persistent id")


def run_bounded(args, seconds, mem_bytes):
    """ccreplay under a wall-clock limit and, except under a sanitizer (whose shadow memory needs
    terabytes of address space), an address-space limit: exceeding either fails the check."""
    import resource
    sanitized = any(k in os.environ for k in ("ASAN_OPTIONS", "TSAN_OPTIONS"))

    def limit():
        if not sanitized:
            resource.setrlimit(resource.RLIMIT_AS, (mem_bytes, mem_bytes))
    try:
        return subprocess.run([CCREPLAY, *args], capture_output=True, text=True, timeout=seconds, preexec_fn=limit)
    except subprocess.TimeoutExpired:
        return None


def expect_bounded_error(args, needle, what, seconds, mem_bytes):
    p = run_bounded(args, seconds, mem_bytes)
    lines = p.stderr.splitlines() if p else []
    check(p is not None and p.returncode == 2 and len(lines) == 1 and needle in lines[0],
          f"{what}: want exit 2 within {seconds} s and {mem_bytes >> 20} MiB with one line containing "
          f"{needle!r}; got " + (f"exit {p.returncode}, stderr {p.stderr[-300:]!r}" if p else "a timeout"))


def hostile():
    """Hostile input: small or endless input must fail fast in bounded memory."""
    # Memo references sharing one container: 20 000 references to a list of 20 000 references to
    # one event dict is an ~80 KB pickle that expands to 400 M events.
    event = {"action": "alloc", "addr": 0, "size": 512, "stream": 0}
    inner = [event] * 20000
    bomb = pickle.dumps({"device_traces": [inner] * 20000}, protocol=4)
    check(len(bomb) < 200_000, f"the hostile pickle should be small, is {len(bomb)} bytes")
    for name, data in (("plain", bomb), ("xz", lzma.compress(bomb))):
        expect_bounded_error([write(f"bomb.{name}", data)], "expands past", f"memo-sharing pickle ({name})",
                             20, 1 << 30)
    # Sharing that stays within the input's own size is still read: a list shared by two devices.
    small = pickle.dumps({"device_traces": [inner[:3]] * 2}, protocol=4)
    got = replay_json(write("shared2.pickle", small))
    check(got.get("events") == 6, f"a list shared twice: want 6 events, got {got.get('events')}")
    # Endless input that is not a regular file: a character device and a FIFO fed without end.
    # /dev/zero starts no trace format: refused after the first 64 KiB (tests/replay/test_inputs.py
    # checks the bytes and the memory); an endless stream that starts like a trace hits the limit.
    expect_bounded_error(["/dev/zero"], "stopped reading after 65536 bytes", "/dev/zero", 60, 3 << 30)
    fifo = os.path.join(TMP, "endless.fifo")
    os.mkfifo(fifo)
    writer = subprocess.Popen(["sh", "-c", f"{{ printf 'CCITRACE'; exec cat /dev/zero; }} > {fifo}"],
                              stderr=subprocess.DEVNULL)
    try:
        expect_bounded_error([fifo], "from a pipe or device", "endless FIFO", 60, 3 << 30)
    finally:
        writer.kill()
        writer.wait()
    # A FIFO carrying a real trace still works.
    import threading

    def feed():
        with open(fifo, "wb") as f:  # blocks until ccreplay opens the FIFO
            f.write(text_trace(synthetic_events(5, 100)))
    feeder = threading.Thread(target=feed)
    feeder.start()
    p = run("--json", fifo)
    feeder.join()
    got = json.loads(p.stdout) if p.returncode == 0 else {}
    check(got.get("events", 0) >= 100, f"a text trace through a FIFO: exit {p.returncode} {p.stderr.strip()}")


def sweep_deterministic(path, capacity):
    outs = []
    for jobs in (None, "1", "2", "3"):
        args = ["--sweep", path] + (["--capacity", capacity] if capacity else []) + (["--jobs", jobs] if jobs else [])
        p = run(*args)
        check(p.returncode == 0, f"sweep {args}: exit {p.returncode} {p.stderr.strip()}")
        outs.append(p.stdout)
    check(all(o == outs[0] for o in outs), f"sweep of {path} differs between runs / job counts")
    check("recommended:" in outs[0] and "rank" in outs[0], f"sweep output incomplete: {outs[0][:200]!r}")
    return outs[0]


def shared():
    if not os.path.isdir(TRACES):
        print(f"SKIP: {TRACES} not found")
        return 77
    names = sorted(f[: -len(".pickle.xz")] for f in os.listdir(TRACES) if f.endswith(".pickle.xz"))
    keys = ("events", "peak_allocated_bytes", "peak_reserved_bytes", "num_device_alloc", "num_ooms",
            "unmatched_frees")
    for name in names:
        src = os.path.join(TRACES, f"{name}.pickle.xz")
        txt = os.path.join(TMP, f"{name}.trace")
        subprocess.run([sys.executable, SNAP2TRACE, src, "-o", txt], check=True)
        with lzma.open(src) as f:
            raw = f.read()
        plain, gz = write(f"{name}.pickle", raw), write(f"{name}.pickle.gz", gzip.compress(raw))
        for conf in ([], ["--conf", "max_split_size_mb:128"], ["--conf", "roundup_power2_divisions:4"]):
            ref = replay_json(txt, *conf)
            for path in (src, plain, gz):
                got = replay_json(path, *conf)
                diff = [(k, got.get(k), ref.get(k)) for k in keys if got.get(k) != ref.get(k)]
                check(not diff, f"{os.path.basename(path)} {conf} vs the script's text trace: {diff}")
            print(f"{name:9s} {' '.join(conf) or '(default)':32s} snapshot = text: peak reserved "
                  f"{ref.get('peak_reserved_bytes', 0) / 2**20:.1f} MiB, {ref.get('events')} events")
    if "encoder" in names:
        sweep_deterministic(os.path.join(TRACES, "encoder.pickle.xz"), None)
        sweep_deterministic(os.path.join(TRACES, "encoder.pickle.xz"), "7G")
    return 0


def newest_keys():
    """PyTorch's newest keys reach the replayed allocator: eight 4 MiB requests share 20 MiB
    segments by default, one 64 MiB segment under large_segment_size_mb:64, 8 MiB ones under :8;
    throw_on_cudamalloc_oom leaves a replay that fits unchanged and still fails what does not. All
    on ordinary segments (compact_segments:False), whose sizes these keys set."""
    lines = [b"# cci-text-trace 1\n# device 0\n"]
    lines += [b"alloc 0x%x 4194304 0 0\n" % (0x100000000 + i * 0x400000) for i in range(8)]
    path = write("newest.trace", b"".join(lines))
    for conf, segments, reserved in (("", 2, 40), ("large_segment_size_mb:64", 1, 64),
                                     ("large_segment_size_mb:8", 4, 32)):
        got = replay_json(path, "--conf", ",".join(filter(None, ("compact_segments:False", conf))))
        check(got.get("num_device_alloc") == segments and got.get("peak_reserved_bytes") == reserved << 20,
              f"replay under '{conf}': {got.get('num_device_alloc')} segments, {got.get('peak_reserved_bytes')} bytes")
    plain = replay_json(path, "--capacity", "36M", "--conf", "compact_segments:False")
    thrown = replay_json(path, "--capacity", "36M", "--conf", "compact_segments:False,throw_on_cudamalloc_oom:True")
    check(plain.get("num_ooms") == thrown.get("num_ooms") and plain.get("num_ooms", 0) > 0 and
          plain.get("peak_reserved_bytes") == thrown.get("peak_reserved_bytes"),
          f"throw_on_cudamalloc_oom changes what a replay can hold: {plain} vs {thrown}")


def main():
    global CCREPLAY, SNAP2TRACE, TRACES, TMP
    CCREPLAY, SNAP2TRACE, TRACES = sys.argv[1:4]
    mode = sys.argv[4] if len(sys.argv) > 4 else "errors"
    with tempfile.TemporaryDirectory() as TMP:
        if mode == "shared":
            rc = shared()
            if rc == 77:
                return 77
        else:
            formats_agree()
            newest_keys()
            malformed()
            malicious()
            hostile()
            ev = synthetic_events(4, 20000)
            sweep_deterministic(write("sweep.trace", text_trace(ev)), None)
            sweep_deterministic(write("sweep.bin", binary_trace(ev)), "6G")
    print(f"{len(failures)} failure(s)" if failures else "all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
