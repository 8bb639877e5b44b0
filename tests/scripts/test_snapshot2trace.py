# SPDX-License-Identifier: MIT
"""Tests for scripts/snapshot2trace.py.

Usage: test_snapshot2trace.py SCRIPT [TRACES_DIR]

The script is always run as a separate process, the way users run it, so that
exit codes and stderr are checked exactly as they are seen.  Cases that need
the shared real-world snapshots are skipped when TRACES_DIR does not exist.
"""

import collections
import gzip
import io
import lzma
import os
import pickle
import re
import subprocess
import sys
import tempfile
import time
import unittest

SCRIPT = None
TRACES_DIR = None

MAPPED = {
    "alloc": "alloc",
    "free_requested": "free_requested",
    "free_completed": "free_completed",
    "segment_alloc": "segment_alloc",
    "segment_free": "segment_free",
    "segment_map": "segment_alloc",
    "segment_unmap": "segment_free",
    "oom": "oom",
}

EVENT_RE = re.compile(
    r"(alloc|free_requested|free_completed|segment_alloc|segment_free|oom)"
    r" 0x(0|[1-9a-f][0-9a-f]*) (0|[1-9][0-9]*) (0|[1-9][0-9]*)"
    r" (0|[1-9][0-9]*)")
HEADER_RE = re.compile(r"# (device (0|[1-9][0-9]*)|source \S.*|settings [^=\s]+=\S*)")

REFUSAL_RE = re.compile(
    r"^snapshot2trace: .+: refusing to unpickle global '([^']+)' "
    r"\(a memory snapshot contains only plain data\)\n$")


def run(*args, timeout=60):
    return subprocess.run([sys.executable, SCRIPT, *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


class _Refuser(pickle.Unpickler):
    # The tests read the shared snapshots independently of the script, and
    # hold themselves to the same rule of never executing anything.
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"global {module}.{name} in snapshot")


def load_reference(path):
    with open(path, "rb") as f:
        raw = f.read()
    if raw.startswith(b"\xfd7zXZ\x00"):
        raw = lzma.decompress(raw)
    elif raw.startswith(b"\x1f\x8b"):
        raw = gzip.decompress(raw)
    return _Refuser(io.BytesIO(raw)).load()


def reference_counts(snapshot, device=None):
    counts = collections.Counter()
    for d, events in enumerate(snapshot["device_traces"]):
        if device is not None and d != device:
            continue
        for ev in events:
            if ev["action"] in MAPPED:
                counts[MAPPED[ev["action"]]] += 1
    return counts


def parse_trace(test, text):
    """Check TEXT line by line; return (headers, events as tuples)."""
    test.assertTrue(text.endswith("\n"), "trace does not end with a newline")
    lines = text.split("\n")[:-1]
    test.assertEqual(lines[0], "# cci-text-trace 1")
    headers, events = [], []
    for n, line in enumerate(lines[1:], start=2):
        if line.startswith("#"):
            test.assertFalse(events, f"line {n}: header after events")
            test.assertRegex(line, HEADER_RE, f"line {n}")
            headers.append(line)
            continue
        m = EVENT_RE.fullmatch(line)
        test.assertIsNotNone(m, f"line {n} does not parse: {line!r}")
        action, addr, size, stream, dev = m.groups()
        events.append((action, int(addr, 16), int(size), int(stream),
                       int(dev)))
    return headers, events


class SharedTraces(unittest.TestCase):
    """The real snapshots in the shared directory."""

    def setUp(self):
        if not TRACES_DIR or not os.path.isdir(TRACES_DIR):
            self.skipTest(f"shared traces directory {TRACES_DIR!r} is absent")
        self.paths = sorted(
            os.path.join(TRACES_DIR, n) for n in os.listdir(TRACES_DIR)
            if ".pickle" in n)
        if not self.paths:
            self.skipTest(f"no *.pickle* files in {TRACES_DIR}")

    def test_convert_each(self):
        for path in self.paths:
            with self.subTest(trace=os.path.basename(path)):
                snapshot = load_reference(path)
                started = time.perf_counter()
                r = run(path)
                elapsed = time.perf_counter() - started
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertEqual(r.stderr, "")
                headers, events = parse_trace(self, r.stdout)
                ndev = len(snapshot["device_traces"])
                self.assertEqual(
                    [h for h in headers if h.startswith("# device ")],
                    [f"# device {d}" for d in range(ndev)])
                self.assertIn(f"# source {os.path.basename(path)}", headers)
                got = collections.Counter(e[0] for e in events)
                want = reference_counts(snapshot)
                self.assertEqual(got, want)
                # The per-line values must be the snapshot's, in order.
                expected = [
                    (MAPPED[ev["action"]], ev["addr"], ev["size"],
                     ev["stream"] % (1 << 64), d)
                    for d, evs in enumerate(snapshot["device_traces"])
                    for ev in evs if ev["action"] in MAPPED]
                self.assertEqual(events, expected)
                print(f"  {os.path.basename(path)}: {len(events)} events "
                      f"{dict(sorted(got.items()))} in {elapsed:.2f} s",
                      flush=True)
                # Generous bound: the target is well under 2 s, but shared CI
                # machines can be slow.
                self.assertLess(elapsed, 20)

    def test_output_file_and_device_option(self):
        path = self.paths[0]
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "out.trace")
            r = run(path, "-o", out, "--device", "0", "--verbose")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stdout, "")
            self.assertEqual(r.stderr.count("\n"), 1, r.stderr)
            with open(out, encoding="utf-8") as f:
                text = f.read()
            self.assertEqual(os.listdir(tmp), ["out.trace"])
        headers, events = parse_trace(self, text)
        self.assertIn("# device 0", headers)
        self.assertTrue(all(e[4] == 0 for e in events))
        self.assertEqual(collections.Counter(e[0] for e in events),
                         reference_counts(load_reference(path), device=0))


def synthetic_snapshot():
    """Two devices, every action kind, and values at the edges."""
    big_stream = (1 << 63) + 12345
    dev0 = [
        {"action": "segment_alloc", "addr": 0x7F0000000000,
         "size": 20971520, "stream": 0, "time_us": 1},
        {"action": "alloc", "addr": 0x7F0000000000, "size": 512,
         "stream": 0, "time_us": 2, "frames": [{"filename": "x.py",
                                                "line": 3, "name": "f"}]},
        {"action": "snapshot", "addr": 0, "size": 0, "stream": 0,
         "time_us": 3},
        {"action": "free_requested", "addr": 0x7F0000000000, "size": 512,
         "stream": 0, "time_us": 4},
        {"action": "user_defined", "addr": 0, "size": 0, "stream": 0,
         "time_us": 5},
        {"action": "free_completed", "addr": 0x7F0000000000, "size": 512,
         "stream": 0, "time_us": 6},
        {"action": "oom", "addr": 1048576, "size": 1 << 40,
         "stream": big_stream, "time_us": 7},
        {"action": "segment_free", "addr": 0x7F0000000000,
         "size": 20971520, "stream": 0, "time_us": 8},
    ]
    dev1 = [
        {"action": "segment_map", "addr": 0x7E0000200000, "size": 2097152,
         "stream": 94000000000000, "time_us": 9},
        {"action": "alloc", "addr": 0x7E0000200000, "size": 0,
         "stream": -1, "time_us": 10},
        {"action": "segment_unmap", "addr": 0x7E0000200000,
         "size": 2097152, "stream": 94000000000000, "time_us": 11},
    ]
    return {
        "segments": [],
        "device_traces": [dev0, dev1],
        "allocator_settings": {
            "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
            "max_split_size": -1,
            "garbage_collection_threshold": 0.5,
            "expandable_segments": True,
            "roundup_power2_divisions": {"1": 0},
            "with space": "x",
            "note": "two words",
        },
    }


SYNTHETIC_EVENTS_0 = [
    "segment_alloc 0x7f0000000000 20971520 0 0",
    "alloc 0x7f0000000000 512 0 0",
    "free_requested 0x7f0000000000 512 0 0",
    "free_completed 0x7f0000000000 512 0 0",
    f"oom 0x100000 {1 << 40} {(1 << 63) + 12345} 0",
    "segment_free 0x7f0000000000 20971520 0 0",
]
SYNTHETIC_EVENTS_1 = [
    "segment_alloc 0x7e0000200000 2097152 94000000000000 1",
    f"alloc 0x7e0000200000 0 {(1 << 64) - 1} 1",
    "segment_free 0x7e0000200000 2097152 94000000000000 1",
]
SYNTHETIC_SETTINGS = [
    "# settings PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
    "# settings max_split_size=-1",
    "# settings garbage_collection_threshold=0.5",
    "# settings expandable_segments=true",
]


def expected_synthetic(name, devices):
    lines = ["# cci-text-trace 1"]
    lines += [f"# device {d}" for d in devices]
    lines.append(f"# source {name}")
    lines += SYNTHETIC_SETTINGS
    if 0 in devices:
        lines += SYNTHETIC_EVENTS_0
    if 1 in devices:
        lines += SYNTHETIC_EVENTS_1
    return "\n".join(lines) + "\n"


class Synthetic(unittest.TestCase):
    """A small snapshot built here, in every container the script accepts."""

    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.tmp = self._tmp.name
        self.data = pickle.dumps(synthetic_snapshot(), protocol=4)

    def tearDown(self):
        self._tmp.cleanup()

    def write(self, name, data):
        path = os.path.join(self.tmp, name)
        with open(path, "wb") as f:
            f.write(data)
        return path

    def test_plain_gz_xz(self):
        for name, data in (("s.pickle", self.data),
                           ("s.pickle.gz", gzip.compress(self.data)),
                           ("s.pickle.xz", lzma.compress(self.data))):
            with self.subTest(container=name):
                r = run(self.write(name, data))
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertEqual(r.stderr, "")
                self.assertEqual(r.stdout, expected_synthetic(name, (0, 1)))
                parse_trace(self, r.stdout)

    def test_container_detected_by_content(self):
        # Misleading or missing suffixes must not matter.
        for name, data in (("s.gz", lzma.compress(self.data)),
                           ("s.xz", gzip.compress(self.data)),
                           ("s.bin", lzma.compress(self.data)),
                           ("s.xz.pickle", self.data)):
            with self.subTest(name=name):
                r = run(self.write(name, data))
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertEqual(r.stdout, expected_synthetic(name, (0, 1)))

    def test_every_pickle_protocol(self):
        snap = synthetic_snapshot()
        for proto in range(pickle.HIGHEST_PROTOCOL + 1):
            with self.subTest(protocol=proto):
                r = run(self.write("p.pkl", pickle.dumps(snap, protocol=proto)))
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertEqual(r.stdout,
                                 expected_synthetic("p.pkl", (0, 1)))

    def test_device_option(self):
        path = self.write("s.pickle", self.data)
        for dev in (0, 1):
            with self.subTest(device=dev):
                r = run(path, "--device", dev)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertEqual(r.stdout,
                                 expected_synthetic("s.pickle", (dev,)))
        r = run(path, "--device", 2)
        self.assert_one_line_failure(r)
        self.assertIn("no device 2", r.stderr)

    def test_verbose_summary_and_output_file(self):
        path = self.write("s.pickle.xz", lzma.compress(self.data))
        out = os.path.join(self.tmp, "s.trace")
        r = run(path, "-o", out, "--verbose")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "")
        self.assertEqual(r.stderr.count("\n"), 1, r.stderr)
        self.assertIn("wrote 9 events", r.stderr)
        self.assertIn("skipped 2", r.stderr)
        self.assertIn("snapshot=1", r.stderr)
        self.assertIn("user_defined=1", r.stderr)
        with open(out, encoding="utf-8") as f:
            self.assertEqual(f.read(), expected_synthetic("s.pickle.xz",
                                                          (0, 1)))

    def test_empty_device_list(self):
        path = self.write("e.pickle", pickle.dumps({"device_traces": []}))
        r = run(path)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "# cci-text-trace 1\n# source e.pickle\n")

    def assert_one_line_failure(self, r):
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertEqual(r.stdout, "")
        self.assertEqual(r.stderr.count("\n"), 1, r.stderr)
        self.assertTrue(r.stderr.startswith("snapshot2trace: "), r.stderr)
        self.assertNotIn("Traceback", r.stderr)

    def test_bad_input(self):
        xz = lzma.compress(self.data)
        gz = gzip.compress(self.data)
        corrupt_xz = bytearray(xz)
        corrupt_xz[len(xz) // 2] ^= 0xFF
        garbage = bytes(range(256)) * 4
        cases = {
            "truncated.pickle.xz": xz[:len(xz) // 2],
            "header-only.pickle.xz": xz[:12],
            "corrupt.pickle.xz": bytes(corrupt_xz),
            "truncated.pickle.gz": gz[:len(gz) // 2],
            "truncated.pickle": self.data[:len(self.data) // 2],
            "garbage.pickle": garbage,
            "text.pickle": b"this is not a pickle\n",
            "garbage.pickle.xz": lzma.compress(garbage),
            "empty.pickle": b"",
            "list.pickle": pickle.dumps([1, 2, 3]),
            "no-traces.pickle": pickle.dumps({"segments": []}),
            "traces-not-list.pickle": pickle.dumps({"device_traces": 7}),
            "device-not-list.pickle": pickle.dumps({"device_traces": [{}]}),
            "event-not-dict.pickle": pickle.dumps(
                {"device_traces": [["alloc"]]}),
            "missing-addr.pickle": pickle.dumps({"device_traces": [[
                {"action": "alloc", "size": 1, "stream": 0}]]}),
            "str-size.pickle": pickle.dumps({"device_traces": [[
                {"action": "alloc", "addr": 1, "size": "1", "stream": 0}]]}),
            "negative-addr.pickle": pickle.dumps({"device_traces": [[
                {"action": "alloc", "addr": -1, "size": 1, "stream": 0}]]}),
            "persid.pickle": b"\x80\x02P1\n.",
            "unregistered-ext.pickle": b"\x80\x02\x82\x01.",
        }
        for name, data in cases.items():
            with self.subTest(case=name):
                r = run(self.write(name, data))
                self.assert_one_line_failure(r)
        with self.subTest(case="missing file"):
            r = run(os.path.join(self.tmp, "does-not-exist.pickle"))
            self.assert_one_line_failure(r)
            self.assertIn("no such file", r.stderr)
        with self.subTest(case="directory"):
            r = run(self.tmp)
            self.assert_one_line_failure(r)
        with self.subTest(case="unwritable output"):
            r = run(self.write("ok.pickle", self.data), "-o",
                    os.path.join(self.tmp, "no", "such", "dir", "t"))
            self.assert_one_line_failure(r)

    def test_memo_bomb_refused(self):
        # A memo bomb: 20 000 memo references to one list of 20 000
        # references to one event dict, an ~80 KB pickle that expands to
        # 400 M events.  Without a bound the script wrote tens of GB; with the
        # C reader's bound (values examined <= decompressed pickle bytes) it
        # stops at once with one line, and leaves no output file behind.
        event = {"action": "alloc", "addr": 0, "size": 512, "stream": 0}
        inner = [event] * 20000
        bomb = pickle.dumps({"device_traces": [inner] * 20000}, protocol=4)
        self.assertLess(len(bomb), 200_000)
        for name, data in (("bomb.pickle", bomb),
                           ("bomb.pickle.xz", lzma.compress(bomb))):
            with self.subTest(case=name):
                out = os.path.join(self.tmp, name + ".trace")
                started = time.monotonic()
                r = run(self.write(name, data), "-o", out, timeout=60)
                self.assertLess(time.monotonic() - started, 30)
                self.assert_one_line_failure(r)
                self.assertIn("expands past", r.stderr)
                self.assertFalse(os.path.exists(out), "output written anyway")
        # Sharing within the input's own size is still converted: one small
        # list shared by two devices.
        small = pickle.dumps({"device_traces": [inner[:3]] * 2}, protocol=4)
        out = os.path.join(self.tmp, "shared2.trace")
        r = run(self.write("shared2.pickle", small), "-o", out)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(out) as f:
            _, events = parse_trace(self, f.read())
        self.assertEqual(len(events), 6)
        self.assertEqual(sorted({e[4] for e in events}), [0, 1])


class _Reducer:
    """Pickles to a call of FUNC(*ARGS) on load; used only to build fixtures."""

    def __init__(self, func, args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


class Malicious(unittest.TestCase):
    """Pickles that would run code if loaded by an ordinary unpickler."""

    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.tmp = self._tmp.name
        self.marker = os.path.join(self.tmp, "marker")
        self.command = f"touch '{self.marker}'"

    def tearDown(self):
        self._tmp.cleanup()

    def write(self, name, data):
        path = os.path.join(self.tmp, name)
        with open(path, "wb") as f:
            f.write(data)
        return path

    def fixtures(self):
        cmd = self.command
        # The payload hidden inside a plausible snapshot.
        nested = pickle.dumps({"device_traces": [[]], "allocator_settings":
                               {"x": _Reducer(os.system, (cmd,))}})
        yield "reduce.pickle", pickle.dumps(_Reducer(os.system, (cmd,)))
        yield "reduce-p0.pickle", pickle.dumps(_Reducer(os.system, (cmd,)),
                                               protocol=0)
        yield "nested.pickle", nested
        yield "nested.pickle.xz", lzma.compress(nested)
        yield "nested.pickle.gz", gzip.compress(nested)
        # Hand-written opcodes, in case the pickler ever changes how it
        # spells a global: GLOBAL + REDUCE, and INST.
        arg = b"V" + cmd.encode("raw_unicode_escape") + b"\n"
        yield "global-op.pickle", b"cos\nsystem\n(" + arg + b"tR."
        yield "inst-op.pickle", b"(" + arg + b"ios\nsystem\n."

    def test_fixtures_really_are_malicious(self):
        # Control: an ordinary pickle.load of each fixture does create the
        # marker, so the refusal test below proves something.
        loader = ("import gzip, lzma, pickle, sys\n"
                  "raw = open(sys.argv[1], 'rb').read()\n"
                  "if raw[:2] == b'\\x1f\\x8b': raw = gzip.decompress(raw)\n"
                  "if raw[:6] == b'\\xfd7zXZ\\x00': raw = lzma.decompress(raw)\n"
                  "pickle.loads(raw)\n")
        for name, data in self.fixtures():
            with self.subTest(fixture=name):
                path = self.write(name, data)
                subprocess.run([sys.executable, "-c", loader, path],
                               capture_output=True, timeout=60)
                self.assertTrue(os.path.exists(self.marker),
                                f"{name} is not a working payload")
                os.unlink(self.marker)

    def test_refused(self):
        for name, data in self.fixtures():
            with self.subTest(fixture=name):
                path = self.write(name, data)
                r = run(path)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertEqual(r.stdout, "")
                m = REFUSAL_RE.match(r.stderr)
                self.assertIsNotNone(m, r.stderr)
                self.assertIn(m.group(1), ("posix.system", "os.system"))
                self.assertTrue(r.stderr.startswith(
                    f"snapshot2trace: {path}: refusing"), r.stderr)
                self.assertFalse(os.path.exists(self.marker),
                                 f"{name} executed its payload")

    def test_harmless_global_refused_too(self):
        # Any global is refused, not just a list of known-dangerous ones.
        path = self.write("collections.pickle", pickle.dumps(
            {"device_traces": [collections.OrderedDict()]}))
        r = run(path)
        self.assertEqual(r.returncode, 2, r.stderr)
        m = REFUSAL_RE.match(r.stderr)
        self.assertIsNotNone(m, r.stderr)
        self.assertEqual(m.group(1), "collections.OrderedDict")


def main(argv):
    global SCRIPT, TRACES_DIR
    if len(argv) not in (2, 3):
        print(f"usage: {argv[0]} SCRIPT [TRACES_DIR]", file=sys.stderr)
        return 2
    SCRIPT = os.path.abspath(argv[1])
    TRACES_DIR = os.path.abspath(argv[2]) if len(argv) == 3 else None
    if not os.path.isfile(SCRIPT):
        print(f"{argv[0]}: no script at {SCRIPT}", file=sys.stderr)
        return 2

    suite = unittest.TestSuite()
    loader = unittest.TestLoader()
    for case in (Synthetic, Malicious, SharedTraces):
        suite.addTests(loader.loadTestsFromTestCase(case))
    result = unittest.TextTestRunner(stream=sys.stdout, verbosity=2).run(suite)
    # A test with several failing subtests still counts once.
    failed = len({getattr(t, "test_case", t).id()
                  for t, _ in result.failures + result.errors}) + \
        len(result.unexpectedSuccesses)
    skipped = len(result.skipped)
    passed = result.testsRun - failed - skipped
    line = f"{passed} passed, {failed} failed"
    if skipped:
        line += f", {skipped} skipped"
    print(line)
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
