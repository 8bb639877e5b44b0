#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# The Quick start scenario (examples/seedfrag.c) under the preload on the fake CUDA: the exit
# report carries measured advice. Checks, in the JSON and the text report of one run each:
#  - a what_if list with conf / peak_reserved_bytes / delta, ranked, delta = peak - current;
#  - every advice item that names a setting gives its replayed figure, or refers to the item above
#    that gave it (each suggestion is spelled out once);
#  - no advice paragraph is cut (each ends a sentence);
#  - the text report has the what-if table.
# With --default the run keeps the defaults (compact segments, the fake offers the virtual-memory
# API): the advice keeps them, never names compact_segments:True, and states what the other segment
# kinds (compact_segments:False, expandable_segments:True) would have peaked at.
# Usage: measured_advice.py [--default] PROGRAM (LD_PRELOAD / LD_LIBRARY_PATH come from the test's env).
import json
import os
import subprocess
import sys
import tempfile


def run(prog, env_extra):
    env = dict(os.environ, **env_extra)
    return subprocess.run([prog], env=env, capture_output=True, text=True, timeout=60)


def check_default(prog):
    with tempfile.TemporaryDirectory() as tmp:
        jpath = os.path.join(tmp, "r.json")
        env = {"CCI_REPORT": jpath}
        p = subprocess.run([prog], env={k: v for k, v in dict(os.environ, **env).items()
                                        if k not in ("CCI_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")},
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        d = json.load(open(jpath))["devices"][0]
        assert "compact_segments:True" in d["config"], d["config"]
        assert d["what_if_replay"]["recommended"]["conf"] == "", d["what_if_replay"]["recommended"]
        confs = [r["conf"] for r in d["what_if"]]
        assert "" not in confs and "compact_segments:True" not in confs, confs
        text = {a["rule"]: a["text"] for a in d["advice"]}["what_if"]
        assert "keep this run's setting" in text, text
        for alt in ("compact_segments:False would have peaked at", "expandable_segments:True would have peaked at"):
            assert alt in text, (alt, text)
        for a in d["advice"]:
            assert "compact_segments:True" not in a["text"], a
        print("default: compact segments kept; the other segment kinds stated")


def main():
    if sys.argv[1] == "--default":
        return check_default(sys.argv[2])
    prog = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        jpath = os.path.join(tmp, "r.json")
        p = run(prog, {"CCI_REPORT": jpath})
        assert p.returncode == 0, p.stderr
        rep = json.load(open(jpath))
        d = rep["devices"][0]
        wi, meta = d["what_if"], d["what_if_replay"]
        assert meta["measured"] is True, meta
        assert meta["events"] > 0 and meta["configurations_replayed"] >= 30, meta
        cur = meta["current"]["peak_reserved_bytes"]
        assert cur == d["stats"]["reserved_bytes.all.peak"], (cur, "replay must reproduce the run's peak")
        assert wi, "empty what_if list"
        keys = [(r["num_ooms"], r["peak_reserved_bytes"], r["num_device_alloc"]) for r in wi]
        assert keys == sorted(keys), "what_if not ranked"
        for r in wi:
            assert set(r) >= {"conf", "peak_reserved_bytes", "delta"}, r
            assert r["delta"] == r["peak_reserved_bytes"] - cur, r
        assert wi[0]["peak_reserved_bytes"] < cur, "seedfrag must have a better setting in the grid"
        rules = {a["rule"]: a["text"] for a in d["advice"]}
        assert "what_if" in rules, rules
        for rule, text in rules.items():
            assert text.rstrip().endswith((".", ")")), (rule, text)
            # A setting comes with its replayed figure, or points back to the paragraph that gave it.
            if any(k in text for k in ("_mb:", "segments:True", "CCI_ALLOC_CONF='")):
                assert ("would have peaked at" in text or "instead of" in text or "(above)" in text), (rule, text)
        print("json: %d what-ifs, best %s at %.1f MiB vs %.1f MiB" %
              (len(wi), wi[0]["conf"], wi[0]["peak_reserved_bytes"] / 2**20, cur / 2**20))
        p = run(prog, {"CCI_REPORT": "-"})
        assert p.returncode == 0
        assert "What-ifs, device 0:" in p.stderr and "<- this run's setting" in p.stderr, p.stderr
        p = run(prog, {"CCI_REPORT": "-", "CCI_WHATIF_SECONDS": "0"})
        assert "What-ifs, device 0: not measured: CCI_WHATIF_SECONDS=0" in p.stderr, p.stderr
        assert "would have peaked" not in p.stderr
        print("text: what-if table present; CCI_WHATIF_SECONDS=0 turns it off")


if __name__ == "__main__":
    main()
