#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Where a step's time goes, from a torch.profiler Chrome trace (CUDA activities on).

  timeline.py summary TRACE.json[.gz]            one JSON line of figures
  timeline.py svg TRACE.json[.gz] OUT.svg [--label TEXT] [--ms N]

summary: over the profiled window (first to last GPU activity), the GPU's busy time (the union of
kernels, copies and sets on every stream), compute and communication (NCCL kernels) apart and
their overlap, the GPU's idle gaps (count, total, longest), and the host's calls that can hold it
back: synchronisations (runtime and driver), stream waits and event records, with their time.
svg: the same window drawn as lanes (host waits, compute, communication), no dependencies.
"""
import gzip
import json
import sys

SYNC_CALLS = ("cudaEventSynchronize", "cudaStreamSynchronize", "cudaDeviceSynchronize",
              "cuEventSynchronize", "cuStreamSynchronize", "cuCtxSynchronize")
WAIT_CALLS = ("cudaStreamWaitEvent", "cuStreamWaitEvent")
RECORD_CALLS = ("cudaEventRecord", "cuEventRecord", "cuEventRecordWithFlags", "cudaEventRecordWithFlags",
                "cuCtxRecordEvent")
QUERY_CALLS = ("cudaEventQuery", "cuEventQuery", "cudaStreamQuery", "cuStreamQuery")
GAP_US = 20.0  # an idle stretch shorter than this is launch latency, not a stall


def load(path):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rt") as f:
        data = json.load(f)
    return data.get("traceEvents", data) if isinstance(data, dict) else data


def union(intervals):
    out = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def total(iv):
    return sum(e - s for s, e in iv)


def intersect(a, b):
    i = j = 0
    out = []
    while i < len(a) and j < len(b):
        s, e = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if s < e:
            out.append([s, e])
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def classify(events):
    gpu, comm, host = [], [], {}
    for ev in events:
        if ev.get("ph") != "X" or "dur" not in ev:
            continue
        cat, name = ev.get("cat", ""), ev.get("name", "")
        span = (float(ev["ts"]), float(ev["ts"]) + float(ev["dur"]))
        if cat in ("kernel", "gpu_memcpy", "gpu_memset"):
            (comm if "nccl" in name.lower() else gpu).append(span)
        elif cat in ("cuda_runtime", "cuda_driver"):
            for group, names in (("sync", SYNC_CALLS), ("wait", WAIT_CALLS), ("record", RECORD_CALLS),
                                 ("query", QUERY_CALLS)):
                if name in names:
                    host.setdefault(group, []).append(span)
    return gpu, comm, host


def summary(path):
    gpu, comm, host = classify(load(path))
    busy = union(gpu + comm)
    if not busy:
        return {"trace": path, "error": "no GPU activity in the trace (CUDA activities off?)"}
    t0, t1 = busy[0][0], busy[-1][1]
    gaps = [b[0] - a[1] for a, b in zip(busy, busy[1:]) if b[0] - a[1] >= GAP_US]
    cu, co = union(gpu), union(comm)
    out = {"window_ms": round((t1 - t0) / 1e3, 3), "busy_ms": round(total(busy) / 1e3, 3),
           "compute_ms": round(total(cu) / 1e3, 3), "comm_ms": round(total(co) / 1e3, 3),
           "comm_overlapped_ms": round(total(intersect(cu, co)) / 1e3, 3),
           "idle_gaps": len(gaps), "idle_ms": round(sum(gaps) / 1e3, 3),
           "longest_gap_ms": round(max(gaps, default=0) / 1e3, 3)}
    for group in ("sync", "wait", "record", "query"):
        spans = host.get(group, [])
        out[group + "_calls"] = len(spans)
        out[group + "_ms"] = round(sum(e - s for s, e in spans) / 1e3, 3)
    return out


def svg(path, dest, label, ms):
    gpu, comm, host = classify(load(path))
    busy = union(gpu + comm)
    if not busy:
        sys.exit(f"timeline: {path}: no GPU activity")
    t0 = busy[0][0]
    t1 = min(busy[-1][1], t0 + ms * 1e3) if ms else busy[-1][1]
    width, lane, left = 1200, 18, 150
    scale = (width - left - 10) / max(t1 - t0, 1.0)
    lanes = [("host: synchronise", host.get("sync", []), "#c0392b"),
             ("host: stream wait", host.get("wait", []), "#e67e22"),
             ("GPU: compute", union(gpu), "#2471a3"),
             ("GPU: NCCL", union(comm), "#27ae60")]
    h = 30 + lane * 1.5 * len(lanes) + 20
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{h:.0f}" '
             f'font-family="sans-serif" font-size="12">',
             f'<text x="4" y="16">{label} ({(t1 - t0) / 1e3:.1f} ms shown)</text>']
    for i, (name, spans, colour) in enumerate(lanes):
        y = 30 + i * lane * 1.5
        parts.append(f'<text x="4" y="{y + 13:.0f}">{name}</text>')
        parts.append(f'<rect x="{left}" y="{y:.0f}" width="{width - left - 10}" height="{lane}" fill="#f2f3f4"/>')
        for s, e in spans:
            if e < t0 or s > t1:
                continue
            x = left + (max(s, t0) - t0) * scale
            w = max((min(e, t1) - max(s, t0)) * scale, 0.5)
            parts.append(f'<rect x="{x:.1f}" y="{y:.0f}" width="{w:.1f}" height="{lane}" fill="{colour}"/>')
    parts.append("</svg>")
    with open(dest, "w") as f:
        f.write("\n".join(parts) + "\n")


def main(argv):
    if len(argv) >= 2 and argv[0] == "summary":
        for p in argv[1:]:
            print(json.dumps({"trace": p, **summary(p)}))
        return 0
    if len(argv) >= 3 and argv[0] == "svg":
        label = argv[argv.index("--label") + 1] if "--label" in argv else argv[1]
        ms = float(argv[argv.index("--ms") + 1]) if "--ms" in argv else 0
        svg(argv[1], argv[2], label, ms)
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
