# SPDX-License-Identifier: MIT
"""scripts/ccreport-merge on reports written by the real JSON printer (report_fixture rank: one
device per rank, workloads that peak differently), checked against figures read from the same
files by this test's own code; then bad input: each case one line on stderr, exit status 2.

Usage: test_merge.py MERGE_SCRIPT REPORT_FIXTURE"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

MiB = 1 << 20
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


def merge(script, *args):
    return subprocess.run([sys.executable, script, *map(str, args)], capture_output=True, text=True, timeout=60)


def expected(paths):
    """Per rank: (rank, [(device, reserved peak, allocated peak, ooms, frag at peak)])."""
    out = {}
    for p in paths:
        rep = json.loads(Path(p).read_text(encoding="utf-8"))
        out[rep["process"]["rank"]] = [
            (d["device"], d["stats"]["reserved_bytes.all.peak"], d["stats"]["allocated_bytes.all.peak"],
             d["stats"]["num_ooms"], d["fragmentation"]["at_peak"]) for d in rep["devices"]]
    return out


def check_job(script, paths):
    exp = expected(paths)
    peaks = {r: max(d[1] for d in devs) for r, devs in exp.items()}
    check(len(set(peaks.values())) > 1, f"fixture ranks should peak differently: {peaks}")
    p = merge(script, *reversed(paths))  # order of arguments must not matter
    check(p.returncode == 0 and not p.stderr, f"merge failed: {p.returncode} {p.stderr}")
    text = p.stdout
    # One table per rank, in rank order, each row with the figures of its device.
    starts = [text.find(f"rank {r}  (") for r in sorted(exp)]
    check(all(s >= 0 for s in starts) and starts == sorted(starts), f"rank tables missing or unordered:\n{text}")
    for r, devs in exp.items():
        block = text[text.find(f"rank {r}  ("):].split("\n\n")[0]
        for dev, res, alloc, ooms, frag in devs:
            row = [line.split() for line in block.splitlines()[2:] if line.split()[0] == str(dev)]
            check(len(row) == 1, f"rank {r}: no row for device {dev}:\n{block}")
            if row:
                cells = row[0]
                check(cells[1] == f"{res / MiB:.1f}" and cells[2] == f"{alloc / MiB:.1f}" and cells[3] == str(ooms),
                      f"rank {r} device {dev}: {cells[:4]} vs {res}, {alloc}, {ooms}")
                check(cells[4] == f"{frag['ratio']:.2f}", f"rank {r}: fragmentation {cells[4]} vs {frag['ratio']}")
                check(f"{frag['largest_free'] / MiB:.1f} of {frag['cached_free'] / MiB:.1f} MiB" in block,
                      f"rank {r}: largest free vs free total")
    top = max(peaks, key=lambda r: (peaks[r], -r))
    low = min(peaks, key=lambda r: (peaks[r], r))
    check(f"rank that peaked: {top} at {peaks[top] / MiB:.1f} MiB reserved" in text, f"peak rank:\n{text}")
    spread = peaks[top] - peaks[low]
    check(f"max - min = {spread / MiB:.1f} MiB" in text, f"spread:\n{text}")
    check(f"max / min = {peaks[top] / peaks[low]:.3f}" in text, f"ratio:\n{text}")
    total_ooms = sum(d[3] for devs in exp.values() for d in devs)
    check(f"out-of-memory failures in the job: {total_ooms}" in text, "job OOM total")
    # The same in JSON.
    p = merge(script, "--json", *paths)
    check(p.returncode == 0, f"--json failed: {p.stderr}")
    j = json.loads(p.stdout)
    check(j["peak_rank"] == top and j["spread_bytes"] == spread, f"--json peak/spread {j['peak_rank']} {j['spread_bytes']}")
    check([r["rank"] for r in j["ranks"]] == sorted(exp), "--json ranks")
    check(all(r["peak"] == peaks[r["rank"]] for r in j["ranks"]), "--json rank peaks")
    print(text)


def check_bad(script, tmp, good):
    t = Path(tmp)
    (t / "notjson.json").write_text("{ this is not json\n")
    (t / "other.json").write_text(json.dumps({"report": "somebody-else", "version": 1}))
    rep = json.loads(Path(good).read_text(encoding="utf-8"))
    del rep["devices"][0]["stats"]["reserved_bytes.all.peak"]
    (t / "nostats.json").write_text(json.dumps(rep))
    (t / "binary.json").write_bytes(b"\xff\xfe\x00garbage")
    cases = [
        ("missing file", [t / "absent.json"], "absent.json: cannot read"),
        ("not JSON", [good, t / "notjson.json"], "notjson.json: not JSON"),
        ("not UTF-8", [t / "binary.json"], "binary.json: not JSON"),
        ("another tool's JSON", [t / "other.json"], 'other.json: not a libccinterpose report (no "report"'),
        ("a statistic missing", [t / "nostats.json"], "no reserved_bytes.all.peak"),
        ("the same rank twice", [good, good], "already given by"),
        ("no argument", [], "usage: ccreport-merge"),
    ]
    for what, args, msg in cases:
        p = merge(script, *args)
        lines = p.stderr.splitlines()
        check(p.returncode == 2, f"{what}: exit status {p.returncode}, not 2")
        check(len(lines) == 1 and msg in lines[0], f"{what}: stderr {p.stderr!r}")
        check(p.stdout == "", f"{what}: printed a table anyway")


def main():
    script, fixture = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for rank in range(4):
            path = Path(tmp, f"cci-rank{rank}.json")
            subprocess.run([fixture, "rank", path, str(rank)], check=True)
            paths.append(str(path))
        check_job(script, paths)
        check_bad(script, tmp, paths[0])
    for f in failures:
        print("FAIL:", f)
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
