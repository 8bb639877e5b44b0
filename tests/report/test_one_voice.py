# SPDX-License-Identifier: MIT
"""One voice: the exit report's first suggestion and `ccreplay --sweep`'s recommendation name the
same configuration for the same run, and the exit report spells each suggestion out once.

usage: test_one_voice.py CCREPLAY PROGRAM
Runs PROGRAM (the preload and the fake CUDA come from the environment) with CCI_TRACE and a JSON
exit report, then `ccreplay --sweep --json` on the recorded trace. Both rank with the tuner's rule
(src/report/tuner.h); the old rules (the report's lowest peak, the sweep's device-allocation
budget) disagreed on the pipeline example."""
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)


def main():
    ccreplay, prog = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as tmp:
        trace, report = Path(tmp, "run.trace"), Path(tmp, "report.json")
        env = dict(os.environ, CCI_TRACE=str(trace), CCI_REPORT=str(report))
        subprocess.run([prog], env=env, check=True, stdout=subprocess.DEVNULL)
        dev = json.loads(report.read_text(encoding="utf-8"))["devices"][0]
        meta = dev["what_if_replay"]
        check(meta["measured"], f"what-ifs not measured: {meta['note']}")
        exit_rec = meta["recommended"]["conf"]
        # The first suggestion of the advice is the recommendation, in the tuner's words.
        first = dev["advice"][0]
        check(first["rule"] == "what_if", f"first advice is {first['rule']}, not the what-if recommendation")
        said = re.search(r"recommended: (?:CCI_ALLOC_CONF='([^']*)'|(the defaults)|keep)", first["text"])
        check(said is not None, f"no recommendation in: {first['text'][:200]}")
        if said:
            named = said.group(1) if said.group(1) is not None else ""
            check(named == exit_rec or (said.group(0).endswith("keep") and exit_rec == meta["current"]["conf"]),
                  f"advice names {said.group(0)!r}, the table {exit_rec!r}")
        # Each distinct suggestion in full once; later paragraphs point back to it.
        texts = " ".join(a["text"] for a in dev["advice"])
        gains = re.findall(r"(\S+) would have peaked at", texts)
        check(len(gains) == len(set(gains)), f"a suggestion repeated in the advice: {gains}")
        if exit_rec:
            check(texts.count(f"{exit_rec} would have peaked") == 0,
                  "the recommendation is repeated in full after the first paragraph")
        check("until the device synchronises" not in texts, "advice describes frees as held for a device sync")
        out = subprocess.run([ccreplay, "--sweep", "--json", str(trace)], check=True, capture_output=True,
                             text=True).stdout
        sweep = json.loads(out)
        sweep_rec = sweep["recommended"]["conf"]
        print(f"exit report recommends {exit_rec or '(defaults)'}; ccreplay --sweep recommends "
              f"{sweep_rec or '(default)'}; trace {sweep['duration_us']} us")
        check(exit_rec == sweep_rec, f"exit report recommends {exit_rec!r}, ccreplay --sweep {sweep_rec!r}")
        # The same rule in the same words (the scale, the trace's duration, differs a little).
        check(sweep["rule"].split(" of ")[0] == meta["rule"].split(" of ")[0], "the two rules are worded differently")
        check(sweep["duration_us"] > 0, "the binary trace carries no duration")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
