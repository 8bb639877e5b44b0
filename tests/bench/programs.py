#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Real programs other than PyTorch on the GPU: one workload per process (scripts/gpu-programs.sh).

  programs.py WORKLOAD [--steps N]    jax-train, cupy-loop or numba-loop
  programs.py summary FILE            the table of a run's JSON lines (FILE, one line a process)

Why: PyTorch keeps a cache of its own, so most of what the preload has been measured on is
PyTorch's allocator with its cache off. JAX (XLA's platform allocator), CuPy with its pool off and
Numba (no pool at all) allocate and free device memory through CUDA directly, each in its own way
and at its own level; these workloads show what the preload does for them, against their own
allocators.

  jax-train   a plain-JAX MLP (4096 -> 3 x 8192 -> 4096, ReLU) trained with SGD under jit, the
              batch cycling over four sizes: each step XLA allocates new parameters and frees the
              old ones, and the programs of the four shapes need temporary buffers of four sizes
              (about 3 GiB at the peak). XLA_PYTHON_CLIENT_* are the caller's to set (never set
              here). XLA's GEMM autotuning times candidates and may pick another algorithm in
              another process, which changes the bits of the result: XLA_FLAGS gets
              --xla_gpu_autotune_level=0 --xla_gpu_deterministic_ops=true appended (PROGRAMS_XLA_FLAGS
              replaces those two flags; set it empty for none). Result: the sum of the final
              parameters.
  cupy-loop   FFT and matmul with n cycling over 128..2048: a = random((n, n)) from a seeded
              RandomState, b = fft2(a).real, c = b @ a, the float of c.sum() accumulated. CUPY_POOL=off
              turns CuPy's device pool and its pinned pool off (set_allocator(None),
              set_pinned_memory_allocator(None)) before anything is allocated. Result: the sum.
  numba-loop  numba.cuda device arrays of 1K..16M float32 elements allocated and dropped in a loop,
              filled and scaled by two small kernels, a few elements copied back and summed.
              Numba keeps no pool: each array is a cuMemAlloc of its own (freed in batches later).

Each process prints exactly one JSON line on stdout at its end: workload, config (CCI_CONFIG_LABEL,
else "unlabelled"), round (CCI_CONFIG_ROUND, when set), seconds (the timed loop only: after a
warm-up of one step of each shape, which compiles what there is to compile, and with the device
synchronised before the clock stops), peak_mib and peak_source (the process's peak device memory
as NVML saw it, sampled by a thread: nvml_peak.py; null with peak_error when NVML gives nothing),
result_sum (fixed seeds, reduced on the host in float64: bit-identical between two runs of one
configuration) and steps. A package that is not installed gives {"skip": reason} and exit status 0;
any other failure gives {"error": ...} and exit status 1.
"""
import argparse
import contextlib
import importlib.util
import json
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nvml_peak  # noqa: E402
from repeat_stats import median  # noqa: E402

DEFAULT_STEPS = {"jax-train": 200, "cupy-loop": 300, "numba-loop": 2000}

JAX_DIMS = (4096, 8192, 8192, 8192, 4096)   # input, three hidden layers, output
JAX_BATCHES = (4096, 2048, 3072, 1024)       # one jitted program per batch size
JAX_LR = 1e-3
JAX_DETERMINISM_FLAGS = "--xla_gpu_autotune_level=0 --xla_gpu_deterministic_ops=true"
CUPY_SIZES = (128, 256, 384, 512, 768, 1024, 1536, 2048)
NUMBA_SIZES = (1 << 10, 3000, 1 << 14, 100_000, 1 << 18, 1_000_000, 1 << 22, 9_000_000, 1 << 24)


class Skip(Exception):
    """The workload's package is not installed: a SKIP line, not a failure."""


def missing(package, e):
    return Skip(f"{package} not importable ({type(e).__name__}: {e})")


# ---- the workloads -----------------------------------------------------------------------------
# Each returns {"seconds", "result_sum", "steps", ...}; the sampler runs around the whole call.

def jax_cuda_plugin_installed():
    """Whether a JAX CUDA plugin is installed (then a JAX without a GPU backend is a failure)."""
    for name in ("jax_cuda13_plugin", "jax_cuda12_plugin", "jax_plugins.xla_cuda13",
                 "jax_plugins.xla_cuda12", "jaxlib.cuda"):
        try:
            if importlib.util.find_spec(name) is not None:
                return True
        except (ImportError, ValueError):
            continue
    return False


def jax_train(steps):
    flags = os.environ.get("PROGRAMS_XLA_FLAGS", JAX_DETERMINISM_FLAGS)
    if flags:
        # Read when the backend starts: before the import.
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + flags).strip()
    try:
        import numpy as np
        import jax
        import jax.numpy as jnp
    except ImportError as e:
        raise missing("jax", e) from None
    try:
        dev = jax.devices("gpu")[0]
    except RuntimeError as e:
        if not jax_cuda_plugin_installed():
            raise Skip(f"jax has no GPU backend and no CUDA plugin is installed ({e})") from None
        raise
    new_key = getattr(jax.random, "PRNGKey", None) or jax.random.key

    def forward(params, x):
        h = x
        for w, b in params[:-1]:
            h = jax.nn.relu(h @ w + b)
        w, b = params[-1]
        return h @ w + b

    def loss_fn(params, x, y):
        return jnp.mean((forward(params, x) - y) ** 2)

    @jax.jit
    def step(params, x, y):
        # Parameters not donated: the new ones are allocated while the old ones still live.
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        return jax.tree_util.tree_map(lambda p, g: p - JAX_LR * g, params, grads), loss

    def batch(key, i, n):
        k = jax.random.fold_in(key, i)
        x = jax.random.normal(k, (n, JAX_DIMS[0]), jnp.float32)
        y = jnp.tanh(x[:, :JAX_DIMS[-1]]) + 0.1 * jnp.sin(x[:, -JAX_DIMS[-1]:])
        return x, y

    batch = jax.jit(batch, static_argnums=2)

    # (The GPU is JAX's default device whenever one is found; jax.default_device is a config
    # state, not a function, in newer releases.)
    with contextlib.nullcontext():
        key = new_key(0)
        params = []
        for i, (a, b) in enumerate(zip(JAX_DIMS[:-1], JAX_DIMS[1:])):
            w = jax.random.normal(jax.random.fold_in(key, i), (a, b), jnp.float32) * jnp.float32((2.0 / a) ** 0.5)
            params.append((w, jnp.zeros((b,), jnp.float32)))
        data_key = new_key(1)

        def one(i, params):
            x, y = batch(data_key, np.uint32(i), JAX_BATCHES[i % len(JAX_BATCHES)])
            return step(params, x, y)

        warm = len(JAX_BATCHES)
        for i in range(warm):           # compiles the program of every batch size
            params, loss = one(i, params)
        jax.block_until_ready((params, loss))
        # PROGRAMS_JAX_BLOCK=1: the host waits for each step, as XLA makes it wait under an
        # allocator that cannot free asynchronously (the platform allocator): what that wait alone
        # costs under BFC, the anchor that separates it from what serving the buffers costs.
        block = os.environ.get("PROGRAMS_JAX_BLOCK") == "1"
        t0 = time.perf_counter()
        for i in range(warm, warm + steps):
            params, loss = one(i, params)
            if block:
                jax.block_until_ready((params, loss))
        jax.block_until_ready((params, loss))
        seconds = time.perf_counter() - t0
    total = 0.0
    for leaf in jax.tree_util.tree_leaves(params):
        total += float(np.asarray(leaf).astype(np.float64).sum())
    return {"seconds": seconds, "result_sum": total, "steps": steps, "final_loss": float(loss),
            "device": str(dev), "xla_flags": os.environ.get("XLA_FLAGS", "")}


def timed_sum(one, warm, steps, synchronize):
    """Runs one(i) for i < warm untimed, then for i < steps timed with the device synchronised at
    both ends; returns (seconds, the sum of the timed calls' results)."""
    for i in range(warm):
        one(i)
    synchronize()
    t0 = time.perf_counter()
    total = 0.0
    for i in range(steps):
        total += one(i)
    synchronize()
    return time.perf_counter() - t0, total


def cupy_loop(steps):
    try:
        import cupy
    except ImportError as e:
        raise missing("cupy", e) from None
    pool_off = os.environ.get("CUPY_POOL", "").strip().lower() == "off"
    if pool_off:
        # Before the first allocation: every array is then CuPy's own cudaMalloc.
        cupy.cuda.set_allocator(None)
        cupy.cuda.set_pinned_memory_allocator(None)
    dev = cupy.cuda.Device(0)
    dev.use()
    rs = cupy.random.RandomState(1234)

    def one(i):
        n = CUPY_SIZES[i % len(CUPY_SIZES)]
        a = rs.random_sample((n, n), dtype=cupy.float64)
        b = cupy.fft.fft2(a).real
        c = b @ a
        return float(c.sum())

    # (Warm-up: cuFFT plans and cuBLAS's handle for every size.)
    seconds, total = timed_sum(one, len(CUPY_SIZES), steps, dev.synchronize)
    return {"seconds": seconds, "result_sum": total, "steps": steps, "cupy_pool": not pool_off,
            "cupy_version": getattr(cupy, "__version__", None)}


cuda = None  # numba.cuda, imported by numba_loop: the kernels below name it as a global


def _numba_fill(d, scale, offset):
    i = cuda.grid(1)
    if i < d.size:
        d[i] = (i % 97) * scale + offset


def _numba_scale_add(dst, src, s):
    i = cuda.grid(1)
    if i < dst.size:
        dst[i] = dst[i] * s + src[i % src.size]


# Names NumPy 2 removed that numba-cuda still registers overloads for (numba-cuda 0.68 with NumPy
# 2.5 fails at its first kernel on numpy.row_stack), and what NumPy calls them now. Each one the
# installed NumPy lacks is given as a function of its own that calls the new name, before numba
# is imported: only so that numba's registries load, the loop below calls none of them.
NUMPY_RENAMED = {"row_stack": "vstack", "trapz": "trapezoid", "in1d": "isin", "product": "prod",
                 "cumproduct": "cumprod", "sometrue": "any", "alltrue": "all", "round_": "round"}


def _give_numpy_old_names(np):
    for old, new in NUMPY_RENAMED.items():
        if hasattr(np, old) or not hasattr(np, new):
            continue
        target = getattr(np, new)

        def forward(*args, _target=target, **kwargs):
            return _target(*args, **kwargs)

        forward.__name__ = old
        setattr(np, old, forward)


def numba_loop(steps):
    global cuda
    # Numba warns at every small grid (the 1K-element arrays); the warning is no finding here.
    os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")
    try:
        import numpy as np
        _give_numpy_old_names(np)
        from numba import cuda
    except ImportError as e:
        raise missing("numba.cuda", e) from None
    except AttributeError as e:
        # Failing inside its own import even with the old names given: not importable, as for a
        # missing package.
        raise missing("numba.cuda", e) from None
    if not cuda.is_available():
        raise RuntimeError("numba.cuda is installed but finds no usable GPU (cuda.is_available() is False)")
    fill = cuda.jit(_numba_fill)
    scale_add = cuda.jit(_numba_scale_add)
    threads = 256

    def one(i):
        n = NUMBA_SIZES[i % len(NUMBA_SIZES)]
        d = cuda.device_array(n, dtype=np.float32)
        t = cuda.device_array(n // 3 + 1, dtype=np.float32)
        fill[(n + threads - 1) // threads, threads](d, np.float32(1 + (i % 7) * 0.125), np.float32(i % 5))
        fill[(t.size + threads - 1) // threads, threads](t, np.float32(0.5), np.float32(1.0))
        scale_add[(n + threads - 1) // threads, threads](d, t, np.float32(0.25))
        head = d[:4].copy_to_host().astype(np.float64)
        tail = d[n - 4:].copy_to_host().astype(np.float64)
        del d, t                        # dropped: numba frees them in its next batch of frees
        return float(head.sum() + tail.sum())

    seconds, total = timed_sum(one, len(NUMBA_SIZES), steps, cuda.synchronize)  # (warm-up: compiles)
    return {"seconds": seconds, "result_sum": total, "steps": steps}


WORKLOADS = {"jax-train": jax_train, "cupy-loop": cupy_loop, "numba-loop": numba_loop}


# ---- one process ---------------------------------------------------------------------------------

def start_sampler():
    """NVML's peak sampler for the first visible device (by UUID when CUDA_VISIBLE_DEVICES names
    one, else by index): nothing here starts CUDA, so it runs before the framework does."""
    try:
        interval = float(os.environ.get("CCI_NVML_INTERVAL_MS", "2")) / 1000
    except ValueError:
        interval = 0.002
    uuid = index = None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        index = 0
    else:
        first = visible.split(",")[0].strip()
        if first.isdigit():
            index = int(first)
        elif first.startswith(("GPU-", "MIG-")):
            uuid = first
    dev, why = nvml_peak.Device.open(uuid=uuid, index=index)
    if dev is None:
        return nvml_peak.Unavailable(why).start()
    return nvml_peak.PeakSampler(dev.reader(os.getpid()), interval).start()


def labels(workload):
    rec = {"workload": workload, "config": os.environ.get("CCI_CONFIG_LABEL") or "unlabelled"}
    r = os.environ.get("CCI_CONFIG_ROUND")
    if r:
        rec["round"] = int(r) if r.isdigit() else r
    return rec


def run_workload(workload, steps):
    """Runs one workload; returns (the JSON record, exit status)."""
    rec = labels(workload)
    try:
        sampler = start_sampler()
    except Exception as e:  # noqa: BLE001  (a monitor must never take the measured program down)
        sampler = nvml_peak.Unavailable(f"{type(e).__name__}: {e}")
    try:
        fig = WORKLOADS[workload](steps)
    except Skip as e:
        sampler.stop()
        rec["skip"] = str(e)
        return rec, 0
    except Exception as e:  # noqa: BLE001  (reported as a JSON line, the traceback on stderr)
        traceback.print_exc()
        sampler.stop()
        rec["error"] = f"{type(e).__name__}: {e}"
        return rec, 1
    peak = sampler.stop()
    rec.update({"seconds": round(fig.pop("seconds"), 6), "peak_mib": peak["nvml_peak_mib"],
                "peak_source": peak["nvml_source"], "result_sum": fig.pop("result_sum"),
                "steps": fig.pop("steps")})
    if peak["nvml_error"]:
        rec["peak_error"] = peak["nvml_error"]
    rec.update(fig)
    return rec, 0


# ---- the summary ---------------------------------------------------------------------------------

# The configurations of scripts/gpu-programs.sh by family, the family's reference first.
FAMILIES = {
    "jax": ["jax-bfc", "jax-platform-ours", "jax-platform", "jax-bfc-blocking"],
    "cupy": ["cupy-pool", "cupy-nopool", "cupy-nopool-ours", "cupy-nopool-ours-compact"],
    "numba": ["numba", "numba-ours"],
}


def family_of(config):
    return config.split("-")[0]


def read_records(lines):
    """The JSON objects with a config among lines; the number of lines that looked like JSON but
    did not parse."""
    recs, bad = [], 0
    for line in lines:
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            x = json.loads(line)
        except ValueError:
            bad += 1
            continue
        if isinstance(x, dict) and x.get("config"):
            recs.append(x)
        else:
            bad += 1
    return recs, bad


def fmt(x, spec):
    return "-" if x is None else format(x, spec)


def summarise(lines):
    """(text, status) for a run's JSON lines: per configuration the runs, the median seconds and
    peak MiB with their ratios to the family's reference, whether every result_sum equals the
    reference's, and (under the preload) the allocations served at runtime and driver level.
    Status 1 on a failed process, a result that differs, or a configuration that skipped while
    another of its family ran (a package that imports only without the preload is a failure)."""
    recs, bad = read_records(lines)
    by = {}
    for x in recs:
        by.setdefault(x["config"], []).append(x)
    out, status = [], 0
    if bad:
        out.append(f"note: {bad} line(s) looked like JSON but were not a configuration's record")
    head = (f"{'config':<26} {'runs':>4} {'median s':>9} {'x ref':>6} {'paired':>6} {'peak MiB':>9} "
            f"{'x ref':>6} {'same result':<12} served runtime/driver; own VMM buffers kept/created")
    families = {fam: list(cs) + sorted(c for c in by if family_of(c) == fam and c not in cs)
                for fam, cs in FAMILIES.items()}
    for c in sorted(by):
        if family_of(c) not in families:
            families[family_of(c)] = sorted(x for x in by if family_of(x) == family_of(c))
    for fam, configs in families.items():
        if not any(c in by for c in configs):
            out.append(f"{fam}: no runs")
            continue
        records = [x for c in configs for x in by.get(c, [])]
        if all("skip" in x for x in records):
            out.append(f"{fam}: SKIP ({len(records)} processes): {records[0]['skip']}")
            continue
        ref = configs[0] if fam in FAMILIES else None
        ran = [c for c in configs if any("seconds" in x for x in by.get(c, []))]
        ok_ref = [x for x in by.get(ref, []) if "seconds" in x] if ref else []
        ref_s = median([x["seconds"] for x in ok_ref]) if ok_ref else None
        ref_peaks = [x["peak_mib"] for x in ok_ref if x.get("peak_mib") is not None]
        ref_p = median(ref_peaks) if ref_peaks else None
        ref_sum = ok_ref[0]["result_sum"] if ok_ref else None
        out.append(f"{fam}: reference {ref or '(none)'}" + ("" if ok_ref else " (no successful run)"))
        out.append("  " + head)
        for c in configs:
            xs = by.get(c, [])
            if not xs:
                out.append(f"  {c:<26} no record")
                continue
            ok = [x for x in xs if "seconds" in x and "error" not in x]
            errors = [x for x in xs if "error" in x]
            skips = [x for x in xs if "skip" in x]
            notes = []
            if errors:
                status = 1
                notes.append(f"{len(errors)} FAILED ({errors[0]['error']})")
            if skips:
                if ran:
                    status = 1
                    notes.append(f"SKIPPED while {', '.join(ran)} ran: {skips[0]['skip']}")
                else:
                    notes.append(f"SKIP: {skips[0]['skip']}")
            if not ok:
                out.append(f"  {c:<26} {0:>4} " + "; ".join(notes))
                continue
            s = median([x["seconds"] for x in ok])
            peaks = [x["peak_mib"] for x in ok if x.get("peak_mib") is not None]
            p = median(peaks) if peaks else None
            if ref_sum is None:
                same = "n/a"
            else:
                same = str(all(x.get("result_sum") == ref_sum for x in ok))
                if same == "False":
                    status = 1
                    sums = sorted({repr(x.get("result_sum")) for x in ok})
                    notes.append(f"result_sum {', '.join(sums[:3])} against {ref_sum!r}")
            served = [(x["served_runtime"], x["served_driver"]) for x in ok
                      if x.get("served_runtime") is not None and x.get("served_driver") is not None]
            if served:
                srv = f"{median([r for r, _ in served]):.0f}/{median([d for _, d in served]):.0f}"
                if len(set(served)) > 1:
                    srv += " (median)"
            else:
                srv = "?" if "ours" in c else "-"
            vmm = [x for x in ok if x.get("vmm_creates")]
            if vmm:
                srv += (f"; {median([x['vmm_reused'] for x in vmm]):.0f}/{median([x['vmm_creates'] for x in vmm]):.0f}"
                        f" ({median([x['vmm_reused_pct'] for x in vmm]):.1f} % of the bytes)")
            xs_ = s / ref_s if ref_s else None
            xp = p / ref_p if p is not None and ref_p else None
            # The protocol's figure: the median of the per-round ratios to the reference's process
            # of the same round (host noise moves whole rounds, not configurations).
            ref_by_round = {x.get("round"): x["seconds"] for x in ok_ref if x.get("round") is not None}
            pairs = [x["seconds"] / ref_by_round[x["round"]] for x in ok
                     if x.get("round") in ref_by_round and ref_by_round[x["round"]] > 0]
            paired = median(pairs) if pairs else None
            row = (f"  {c:<26} {len(ok):>4} {s:>9.3f} {fmt(xs_, '6.3f'):>6} {fmt(paired, '6.3f'):>6} "
                   f"{fmt(p, '9.1f'):>9} {fmt(xp, '6.3f'):>6} {same:<12} {srv}")
            out.append(row + ("  " + "; ".join(notes) if notes else ""))
    return "\n".join(out), status


def summary_main(path):
    try:
        with open(path, errors="replace") as f:
            lines = f.readlines()
    except OSError as e:
        print(f"summary: cannot read {path}: {e}")
        return 1
    text, status = summarise(lines)
    print(text)
    return status


def main(argv):
    if argv[:1] == ["summary"]:
        if len(argv) != 2:
            sys.exit("usage: programs.py summary FILE")
        return summary_main(argv[1])
    ap = argparse.ArgumentParser(description="One real-program workload on the GPU; one JSON line.")
    ap.add_argument("workload", choices=sorted(WORKLOADS))
    ap.add_argument("--steps", type=int, help="timed steps (default: jax-train 200, cupy-loop 300, numba-loop 2000)")
    args = ap.parse_args(argv)
    steps = args.steps if args.steps is not None else DEFAULT_STEPS[args.workload]
    if steps < 1:
        ap.error("--steps must be at least 1")
    rec, status = run_workload(args.workload, steps)
    sys.stderr.flush()
    print(json.dumps(rec), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
