"""Host cost of one eager call: Python entry to kernel enqueued, all checks included (decode shapes, M=1).

    python bench/host.py [--calls 2000] [--json FILE]

Times each call on its own (perf_counter_ns) and reports the median over `--calls` calls, beside
torch.sigmoid and torch.topk timed the same way in the same process, so the ratio is machine-free.
Imports k3kernels from PYTHONPATH: point it at another checkout to time that one's wrappers.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch


def per_call_us(fns: dict, calls: int, rounds: int = 10) -> dict:
    """Median µs per call of each function, each call timed alone. The functions take turns in
    `rounds` blocks, so a machine that slows down or speeds up mid-run weighs on all of them alike."""
    for fn in fns.values():
        for _ in range(200):  # build, load, allocator, the wrapper's first (checked) call
            fn()
    torch.cuda.synchronize()
    clock = time.perf_counter_ns
    times: dict = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            ts = times[name]
            for _ in range(calls // rounds):
                t = clock()
                fn()
                ts.append(clock() - t)
            torch.cuda.synchronize()
    return {name: statistics.median(ts) / 1e3 for name, ts in times.items()}


def calls() -> dict:
    """family -> a zero-argument eager call at its decode shape."""
    import k3kernels

    cuda = dict(device="cuda")
    x7168 = torch.randn(1, 7168, **cuda).to(torch.bfloat16)
    x3584 = torch.randn(1, 3584, **cuda).to(torch.bfloat16)
    s896 = torch.randn(1, 896, **cuda).to(torch.bfloat16)
    b896 = torch.randn(896, **cuda) * 0.1
    s256 = torch.randn(1, 256, **cuda).to(torch.bfloat16)
    b256 = torch.randn(256, **cuda) * 0.1
    out = {"torch.sigmoid": lambda: torch.sigmoid(x7168), "torch.topk": lambda: torch.topk(s896, 16)}
    families = set(getattr(k3kernels, "FAMILIES", ()))
    fam = {name: __import__(f"k3kernels.{name}", fromlist=[name]) for name in families}
    if "situ_and_mul" in fam:
        out["situ_and_mul"] = lambda: fam["situ_and_mul"].situ_and_mul(x7168, 4.0, 2.0)
    if "per_token_group_quant" in fam:
        out["per_token_group_quant"] = lambda: fam["per_token_group_quant"].per_token_group_quant(
            x7168, group_size=128, scale_format="ue8m0"
        )
    if "route_topk" in fam:
        out["route_topk"] = lambda: fam["route_topk"].route_topk(s896, b896, 16)
    if "route_topk_e256" in fam:
        out["route_topk_e256"] = lambda: fam["route_topk_e256"].route_topk_e256(s256, b256, 8)
    if "route_topk_aiter" in fam:
        out["route_topk_aiter"] = lambda: fam["route_topk_aiter"].route_topk_aiter(s896, b896, 16)
    if "route_quant_fused" in fam:
        out["route_quant_fused"] = lambda: fam["route_quant_fused"].route_quant_fused(s896, b896, x3584, 16)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--json", help="write {call: median us} here")
    args = ap.parse_args()
    results = per_call_us(calls(), args.calls)
    from k3gen.runtime import hostext

    ext = hostext.load()
    allocation = f" (GPU outputs: {ext.allocation()} allocation)" if hasattr(ext, "allocation") else ""
    print(f"C++ call path: {hostext.served()} {getattr(ext, '__file__', '')}{allocation}")
    for name, us in results.items():
        print(f"{name:>24} {us:7.2f} us/call  x{us / results['torch.sigmoid']:.2f} torch.sigmoid")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
