"""µs per call of the kernels a change touches, at bench.py's sizes, for a same-run before/after.

bench.py times one tree with its references (torch.compile, peers, a copy); a before/after needs
only the kernels, in two trees, in one run. Run once per tree, each in its own process (both trees
name their package k3kernels), alternating, on the GPU machine:

    PYTHONPATH=build/before:build/before/generated python3 bench/kernel_times.py --tag before --out X.jsonl
    PYTHONPATH=$PWD:$PWD/generated python3 bench/kernel_times.py --tag after --out X.jsonl

Each line of X.jsonl: {"tag", "family", "case", "M", "us"} (CUDA graph of 20 calls, median of 30
replays, as bench.py). `--family` narrows: situ_and_mul, per_token_group_quant, routers, route_quant_fused;
`--router` narrows the routers to those named (the ones a change touches).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    PTGQ_CASES,
    PTGQ_K,
    PTGQ_MS,
    RQF_MS,
    RQF_SHAPE,
    SITU_D,
    SITU_MS,
    SITU_PAIRS,
    router_ms,
    time_graph_us,
)

from k3gen.oracles.vocabulary import torch_dtype


def situ_and_mul():
    from k3gen.oracles import situ_and_mul as oracle
    from k3kernels import situ_and_mul as fam

    d, beta, linear_beta = SITU_D, oracle.BETA, oracle.LINEAR_BETA
    for dt_in, dt_out in SITU_PAIRS:
        for m in SITU_MS:
            x = torch.randn(m, 2 * d, device="cuda").mul_(6).to(torch_dtype(dt_in))
            out = torch.empty(m, d, device="cuda", dtype=torch_dtype(dt_out))
            yield f"{dt_in}->{dt_out}", m, lambda x=x, out=out: fam.situ_and_mul(x, beta, linear_beta, out=out)


def per_token_group_quant():
    from k3kernels import per_token_group_quant as fam

    for dt, g, fmt in PTGQ_CASES:
        for m in PTGQ_MS:
            x = torch.randn(m, PTGQ_K, device="cuda").to(torch_dtype(dt))
            q, scale = fam.per_token_group_quant(x, group_size=g, scale_format=fmt)
            call = lambda x=x, g=g, fmt=fmt, q=q, scale=scale: fam.per_token_group_quant(  # noqa: E731
                x, group_size=g, scale_format=fmt, out=q, out_scale=scale
            )
            yield f"{dt} G{g} {fmt}", m, call


def routers(only: list[str] | None = None):
    import k3kernels

    names = [n for n in sorted(k3kernels.FAMILIES) if n.startswith("route_") and n != "route_quant_fused"]
    unknown = sorted(set(only or ()) - set(names))
    if unknown:
        raise SystemExit(f"kernel_times: no router {', '.join(unknown)}; the routers: {', '.join(names)}")
    for name in names:
        if only and name not in only:
            continue
        fam = importlib.import_module(f"k3kernels.{name}")
        op, e, k = getattr(fam, name), fam.num_experts, fam.top_k
        has_bias = any(t[0] == "bias" for t in fam.TENSORS)
        for m in router_ms(name, e):
            scores = torch.randn(m, e, device="cuda").to(torch.bfloat16)
            bias = torch.randn(e, device="cuda") * 0.1
            args = (scores, bias) if has_bias else (scores,)
            w, ids = op(*args, k)
            yield name, m, lambda op=op, args=args, w=w, ids=ids: op(*args, k, out_weights=w, out_ids=ids)


def route_quant_fused():
    from k3kernels import route_quant_fused as fam

    e, k, h = RQF_SHAPE
    for dt in ("bfloat16", "float32"):
        for m in RQF_MS:
            s = torch.randn(m, e, device="cuda").to(getattr(torch, dt))
            b = torch.randn(e, device="cuda") * 0.1
            x = torch.randn(m, h, device="cuda").to(getattr(torch, dt))
            outs = dict(zip(("out_weights", "out_ids", "out_q", "out_scale"), fam.route_quant_fused(s, b, x, k)))
            call = lambda s=s, b=b, x=x, outs=outs: fam.route_quant_fused(s, b, x, k, **outs)  # noqa: E731
            yield f"route_quant_fused {dt}", m, call


FAMILIES = {
    "situ_and_mul": situ_and_mul,
    "per_token_group_quant": per_token_group_quant,
    "routers": routers,
    "route_quant_fused": route_quant_fused,
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tag", required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--family", action="append", choices=sorted(FAMILIES))
    ap.add_argument("--router", action="append", help="only these routers (of --family routers); default all")
    args = ap.parse_args()
    with args.out.open("a") as f:
        for family in args.family or sorted(FAMILIES):
            cases = FAMILIES[family](args.router) if family == "routers" else FAMILIES[family]()
            for case, m, fn in cases:
                row = {"tag": args.tag, "family": family, "case": case, "M": m, "us": round(time_graph_us(fn), 3)}
                f.write(json.dumps(row) + "\n")
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
