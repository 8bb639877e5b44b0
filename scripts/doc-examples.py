#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Regenerate the example outputs quoted in README.md and docs/*.md from the real tools.

    scripts/doc-examples.py BUILD_DIR           rewrite the marked blocks in place
    scripts/doc-examples.py --check BUILD_DIR   exit 1 if any marked block differs

A block is the text between `<!-- example: NAME -->` and `<!-- end example -->`. The inputs are
reproducible without a GPU: examples/seedfrag.c built against the fake CUDA of tests/fake, run
under the preload with a trace recorded, then `ccreplay` on that trace. Whatever varies from run
to run (times, pids, paths) is normalised. Outputs measured on a real GPU are not marked and not
checked.

Blocks of the encoder walk-through (docs/sweep-example.md) need the shared PyTorch snapshot
../shared/traces/encoder.pickle.xz beside the checkout: where it is missing (CI) they are left as
they are and reported as not checked.
"""
import argparse, os, re, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BLOCK = re.compile(r"(<!-- example: ([\w-]+) -->\n)(.*?)(<!-- end example -->)", re.S)


def normalise(text):
    text = re.sub(r"\(\d+\.\d+ s\)", "(0.00 s)", text)
    text = re.sub(r"\d+\.\d+ M events/s", "N M events/s", text)
    text = re.sub(r"\bpid \d+", "pid N", text)
    text = re.sub(r"0x[0-9a-f]{6,}", "0xADDR", text)
    return text


# What depends on how long the recorded run took (the tuner scales call costs by it, and the
# wrapped paragraphs break where those numbers end): compared with the numbers replaced and the
# white space collapsed, so a slower machine does not make a block stale.
DURATION = [
    (re.compile(r"duration, [\d.]+ (?:µs|ms|s) \([\d.]+ (?:µs|ms|s)\)"), "duration, D (A)"),
    (re.compile(r"[\d.]+ (?:µs|ms|s) more is [\d.]+ % of the run's [\d.]+ (?:µs|ms|s)"), "X more is P % of the run's D"),
    (re.compile(r"over the [\d.]+ ms allowed"), "over the A allowed"),
]


def loose(text):
    for pattern, repl in DURATION:
        text = pattern.sub(repl, re.sub(r"\s+", " ", text))
    return re.sub(r"\s+", " ", text)


def generate(build):
    build = os.path.abspath(build)
    exe = os.path.join(build, "examples", "seedfrag-fake")
    ccreplay = os.path.join(build, "src", "tools", "ccreplay")
    env = dict(os.environ, LD_PRELOAD=os.path.join(build, "preload", "libccinterpose.so"),
               LD_LIBRARY_PATH=os.path.join(build, "tests", "fake"), FAKECUDA_CAPACITY="4G",
               CCI_TRACE="seedfrag.trace")
    for k in ("CCI_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "CCI_REPORT",
              "CCI_DISABLE", "CCI_LOG"):
        env.pop(k, None)
    with tempfile.TemporaryDirectory() as tmp:
        run = subprocess.run([exe], cwd=tmp, env=env, capture_output=True, text=True, timeout=120)
        if run.returncode != 0:
            sys.exit(f"doc-examples: {exe} failed ({run.returncode}):\n{run.stderr}")
        lines = run.stderr.splitlines()
        start = next(i for i, l in enumerate(lines) if l.startswith("Advice, device 0:"))
        advice = [lines[start], lines[start + 1]]
        for l in lines[start + 2:]:
            if not l.startswith("    "):
                break
            advice.append(l)
        clean = {k: v for k, v in env.items() if k not in ("LD_PRELOAD", "CCI_TRACE")}
        sweep = subprocess.run([ccreplay, "--sweep", "seedfrag.trace"], cwd=tmp, env=clean,
                               capture_output=True, text=True, timeout=120)
        if sweep.returncode != 0:
            sys.exit(f"doc-examples: ccreplay --sweep failed:\n{sweep.stderr}")
    def fence(text):
        return "```text\n" + normalise(text).rstrip("\n") + "\n```\n"
    outputs = {"seedfrag-advice": fence("\n".join(advice)), "seedfrag-sweep": fence(sweep.stdout)}
    # The shared snapshot, named as the docs name it (relative to the checkout).
    trace = os.path.join("..", "shared", "traces", "encoder.pickle.xz")
    if os.path.exists(os.path.join(ROOT, trace)):
        enc = subprocess.run([ccreplay, "--sweep", trace], cwd=ROOT, env=clean, capture_output=True,
                             text=True, timeout=600)
        if enc.returncode != 0:
            sys.exit(f"doc-examples: ccreplay --sweep {trace} failed:\n{enc.stderr}")
        outputs["encoder-sweep"] = fence(enc.stdout)
        enc7 = subprocess.run([ccreplay, "--sweep", "--capacity", "7G", trace], cwd=ROOT, env=clean,
                              capture_output=True, text=True, timeout=600)
        if enc7.returncode != 0:
            sys.exit(f"doc-examples: ccreplay --sweep --capacity 7G {trace} failed:\n{enc7.stderr}")
        outputs["encoder-sweep-7g"] = fence(enc7.stdout)
    else:  # not available here: left unchecked
        outputs["encoder-sweep"] = outputs["encoder-sweep-7g"] = None
    return outputs


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare only; exit 1 on a difference")
    ap.add_argument("build_dir")
    args = ap.parse_args()
    outputs = generate(args.build_dir)
    files = [os.path.join(ROOT, "README.md")] + sorted(
        os.path.join(ROOT, "docs", f) for f in os.listdir(os.path.join(ROOT, "docs")) if f.endswith(".md"))
    stale, seen, unchecked = [], set(), set()
    for path in files:
        text = open(path, encoding="utf-8").read()
        def repl(m):
            name = m.group(2)
            if name not in outputs:
                sys.exit(f"doc-examples: {os.path.relpath(path, ROOT)}: unknown example '{name}'")
            if outputs[name] is None:
                unchecked.add(name)
                return m.group(0)
            seen.add(name)
            if loose(m.group(3)) != loose(outputs[name]):
                stale.append(f"{os.path.relpath(path, ROOT)}: {name}")
            return m.group(1) + outputs[name] + m.group(4)
        new = BLOCK.sub(repl, text)
        if new != text and not args.check:
            open(path, "w", encoding="utf-8").write(new)
    for name in sorted(unchecked):
        print(f"doc-examples: '{name}' not checked: its input (../shared/traces) is not here")
    if args.check:
        for s in stale:
            print(f"stale example block: {s} (run scripts/doc-examples.py BUILD_DIR)")
        if not seen:
            print("doc-examples: no example blocks found"); return 1
        return 1 if stale else 0
    print(f"doc-examples: {len(stale)} block(s) rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
