#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""DDP on several GPUs: a 6-layer transformer encoder trained with DistributedDataParallel.

  torchrun --nproc-per-node 2 tests/bench/ddp_encoder.py [--steps N] [--report FILE] [--profile DIR]

Rank 0 prints one JSON line: wall seconds of the timed steps (after two warm-up steps), per rank
the peak reserved memory (PyTorch's figure, or libccinterpose's when the preload is active: with
PYTORCH_NO_CUDA_MEMORY_CACHING=1 PyTorch's reserved figure means nothing) and the peak device
memory of the process as NVML saw it (nvml_peak.py: the like-for-like figure, since it counts what
NCCL and the libraries take in every configuration; null when NVML is absent), and result_sum,
which must be identical with and without the preload. --report writes the preload's report of
each rank there ("{rank}" in FILE becomes the rank) while CUDA is still up. Set
NCCL_NVLS_ENABLE=0 on machines where NVLink multicast is not to be used. --profile records three
steps after the warm-up with torch.profiler (CPU and CUDA activities) and writes each rank's
Chrome trace to DIR/trace-rank{rank}.json.gz (tests/bench/timeline.py reads it); such a run's
wall time includes the profiler's and means nothing.
"""
import argparse
import json
import os
import random
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nvml_peak import sampler_for_torch_device  # noqa: E402
from torch_run import cci_figures, use_pluggable_allocator  # noqa: E402  (the preload's figures)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--report", help="the preload's report of each rank; {rank} becomes the rank")
    ap.add_argument("--profile", help="a folder for each rank's torch.profiler trace of three steps")
    args = ap.parse_args()
    use_pluggable_allocator()  # (CCI_TORCH_PLUGGABLE=1: PyTorch allocates through the preload)
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    dev = torch.device("cuda")
    # From before the model and NCCL's communicator (made by DDP's first broadcast) to the end.
    nvml = sampler_for_torch_device(torch.cuda.current_device())
    torch.manual_seed(1234)  # the same weights on every rank and in every run
    model = torch.nn.TransformerEncoder(
        torch.nn.TransformerEncoderLayer(d_model=1024, nhead=16, dim_feedforward=4096, batch_first=True),
        num_layers=6).to(dev)
    model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    rnd = random.Random(7 + rank)
    gen = torch.Generator(device=dev)
    gen.manual_seed(99 + rank)
    losses = []
    t0 = None
    prof = None
    for step in range(args.steps + 2):
        if step == 2:
            torch.cuda.synchronize()
            dist.barrier()
            t0 = time.perf_counter()
        if args.profile and step == 4:
            acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
            prof = torch.profiler.profile(activities=acts)
            prof.__enter__()
        if prof is not None and step == 7:
            torch.cuda.synchronize()
            prof.__exit__(None, None, None)
            os.makedirs(args.profile, exist_ok=True)
            prof.export_chrome_trace(os.path.join(args.profile, f"trace-rank{rank}.json.gz"))
            prof = None
        L = rnd.choice([128, 256, 384, 512])
        x = torch.randn(16, L, 1024, device=dev, generator=gen)
        y = model(x).float().pow(2).mean()
        y.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(y.detach())
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    local = torch.stack(losses).sum()
    dist.all_reduce(local)
    device_peak = nvml.stop()
    reports = [args.report.replace("{rank}", str(rank))] if args.report else []
    cci = cci_figures(torch.cuda.current_device(), reports)
    peak = (cci or {}).get("peak_reserved_mib") if (cci or {}).get("active") else \
        round(torch.cuda.max_memory_reserved() / (1 << 20), 1)
    peaks = [None] * world
    dist.all_gather_object(peaks, {"rank": rank, "peak_reserved_mib": peak, **device_peak, "cci": cci})
    if rank == 0:
        print(json.dumps({"workload": "ddp-encoder", "world": world, "steps": args.steps,
                          "seconds": round(seconds, 3), "result_sum": float(local.item()),
                          "ranks": peaks}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
