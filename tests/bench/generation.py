#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A generation workload: a Llama-shaped model from Hugging Face transformers with random weights
(no download), greedy generate() over a fixed mix of batch sizes (1-8), prompt lengths (64-1500)
and new-token counts (16-64), as a server answering requests of every shape would.

  python3 tests/bench/generation.py [--requests N] [--layers N] [--hidden N]

One JSON line, as ../shared/gpu/torch_workloads.py prints: wall seconds of the timed requests
(after two warm-up requests), peak reserved memory (PyTorch's figure, or libccinterpose's when the
preload is active: run it with PYTORCH_NO_CUDA_MEMORY_CACHING=1 then), peak allocated, the
preload's own figures, and result_sum (the sum of every generated token id), which must be
identical with and without the preload.
"""
import argparse
import json
import os
import random
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_run import cci_figures, use_pluggable_allocator  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=24)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=2048)
    args = ap.parse_args()
    use_pluggable_allocator()  # (CCI_TORCH_PLUGGABLE=1: PyTorch allocates through the preload)
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(1234)
    cfg = LlamaConfig(vocab_size=32000, hidden_size=args.hidden, intermediate_size=args.hidden * 11 // 4,
                      num_hidden_layers=args.layers, num_attention_heads=args.hidden // 128,
                      num_key_value_heads=args.hidden // 256, max_position_embeddings=4096)
    dev = torch.device("cuda")
    with torch.device(dev):  # initialised on the GPU: seconds, not a minute, of random weights
        model = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    rnd = random.Random(11)
    shapes = [(rnd.choice([1, 2, 4, 8]), rnd.randint(64, 1500), rnd.choice([16, 32, 64]))
              for _ in range(args.requests + 2)]
    gen = torch.Generator(device=dev)
    gen.manual_seed(5)
    total = 0
    t0 = None
    with torch.inference_mode():
        for i, (batch, prompt, new) in enumerate(shapes):
            if i == 2:
                torch.cuda.synchronize()
                t0 = time.perf_counter()
            ids = torch.randint(3, cfg.vocab_size, (batch, prompt), device=dev, generator=gen)
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new,
                                 min_new_tokens=new, do_sample=False, pad_token_id=0)
            total += int(out[:, prompt:].sum().item())
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    cci = cci_figures(torch.cuda.current_device(), [])
    mib = 1 << 20
    active = bool((cci or {}).get("active"))
    print(json.dumps({
        "workload": "generation", "seconds": round(seconds, 3), "requests": args.requests,
        "peak_reserved_mib": cci["peak_reserved_mib"] if active else round(torch.cuda.max_memory_reserved() / mib, 1),
        "peak_allocated_mib": cci["peak_allocated_mib"] if active else round(torch.cuda.max_memory_allocated() / mib, 1),
        "result_sum": total, "cci": cci}), flush=True)


if __name__ == "__main__":
    main()
