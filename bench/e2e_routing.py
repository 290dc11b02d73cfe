"""One MoE layer's routing step inside a transformers model, stock against k3gen-swapped, on the GPU.

For each architecture k3gen routes (tests/hf_models.py: the published expert count, top-K and
grouping), the model's own router module is built at the published hidden size (the F.linear that
makes the logits is part of the step, in both), its weights random, in bf16 as served; it routes
M tokens of hidden states (M = 1, 16, 128, 1024, 8192) through its stock forward and through the
forward use_k3gen_routing installs. Each step is captured in a CUDA graph and replayed (eager
timing where capture fails, marked in the row); REPS rounds of ITERS replays, interleaved, medians.

    python bench/e2e_routing.py --out DIR [--arch deepseek_v3,qwen3_moe] [--m 1,128]

Writes DIR/e2e_routing.json (rows and the device) and DIR/e2e_routing.svg (speedup per M, one line
per architecture; no plotting library needed). Needs torch, transformers and a CUDA GPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "generated"), str(ROOT / "tests")]

import hf_models  # noqa: E402

from k3gen.integrations import transformers as k3t  # noqa: E402

# The published hidden sizes (config.json of each model), so the logits GEMM is the served one.
HIDDEN = {
    "deepseek_v3": 7168,
    "kimi_k2": 7168,
    "glm4_moe": 5120,
    "minimax_m2": 3072,
    "qwen3_moe": 2048,
    "qwen3_next": 2048,
    "mixtral": 4096,
    "gpt_oss": 2880,
    "llama4": 5120,
    "ernie4_5_moe": 2560,
}
MS = [1, 16, 128, 1024, 8192]
ITERS, REPS = 50, 7


def router_of(name: str) -> torch.nn.Module:
    """The MoE layer's router module, as the model builds it, at the published hidden size."""
    tiny = hf_models.build(name)
    (router,) = [m for m in tiny.modules() if type(m).__name__ in k3t.ROUTERS][-1:]
    cfg = hf_models.config(name, hidden_size=HIDDEN[name])
    big = type(router)(cfg)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in big.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.02)
        for n, b in big.named_buffers():
            if n.endswith("e_score_correction_bias"):
                b.copy_(torch.randn(b.shape, generator=gen) * 0.01)
    return big.to("cuda", torch.bfloat16).eval()


def step(router, h, extra):
    def run():
        return router(h, *extra)

    return run


def timed(fn) -> tuple[list[float], bool]:
    """Microseconds per call over REPS rounds, and whether a CUDA graph replays it."""
    with torch.no_grad():
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        graph, graphed = torch.cuda.CUDAGraph(), True
        try:
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                fn()
            torch.cuda.current_stream().wait_stream(stream)
            with torch.cuda.graph(graph):
                fn()
            run = graph.replay
        except Exception:  # capture is not possible for this path: time it eagerly and say so
            graphed, run = False, fn
        times = []
        for _ in range(REPS):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(ITERS):
                run()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1000 / ITERS)
    return times, graphed


def bench(name: str, ms: list[int]) -> list[dict]:
    router = router_of(name)
    holder = torch.nn.Module()
    holder.router = router
    rows = []
    for m in ms:
        h = torch.randn(m, HIDDEN[name], device="cuda", dtype=torch.bfloat16)
        passes_bias = type(router).__name__ == "MiniMaxM2TopKRouter"  # its block hands it the bias
        extra = (torch.zeros(router.num_experts, device="cuda"),) if passes_bias else ()
        stock_t, stock_g = timed(step(router, h, extra))
        report = k3t.use_k3gen_routing(holder, verbose=False)
        try:
            k3_t, k3_g = timed(step(router, h, extra))
        finally:
            k3t.restore_stock_routing(holder)
        stock, k3 = statistics.median(stock_t), statistics.median(k3_t)
        rows.append({
            "arch": name, "family": report.swapped[0].family, "M": m, "hidden": HIDDEN[name],
            "stock_us": round(stock, 2), "k3gen_us": round(k3, 2), "speedup": round(stock / k3, 3),
            "cuda_graph": {"stock": stock_g, "k3gen": k3_g},
        })  # fmt: skip
        print(f"{name:14} M={m:5}  stock {stock:8.2f} us  k3gen {k3:8.2f} us  {stock / k3:5.2f}x", flush=True)
    return rows


def svg(rows: list[dict], title: str) -> str:
    """Speedup (stock / k3gen) against M, log-scaled M, one polyline per architecture."""
    w, h, pad = 760, 420, 60
    ms = sorted({r["M"] for r in rows})
    top = max(2.0, max(r["speedup"] for r in rows) * 1.1)

    def x(m):
        return pad + (w - 2 * pad) * (ms.index(m) / max(1, len(ms) - 1))

    def y(s):
        return h - pad - (h - 2 * pad) * s / top

    colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd"]
    colors += ["#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
           f'<text x="{w / 2}" y="20" text-anchor="middle" font-size="14">{title}</text>',
           f'<line x1="{pad}" y1="{y(1)}" x2="{w - pad}" y2="{y(1)}" stroke="#999" stroke-dasharray="4"/>',
           f'<text x="{pad - 6}" y="{y(1) + 4}" text-anchor="end">1x</text>',
           f'<text x="{pad - 6}" y="{y(top) + 4}" text-anchor="end">{top:.1f}x</text>']  # fmt: skip
    out += [f'<text x="{x(m)}" y="{h - pad + 18}" text-anchor="middle">M={m}</text>' for m in ms]
    for i, arch in enumerate(dict.fromkeys(r["arch"] for r in rows)):
        pts = [(x(r["M"]), y(r["speedup"])) for r in rows if r["arch"] == arch]
        c = colors[i % len(colors)]
        points = " ".join(f"{a:.1f},{b:.1f}" for a, b in pts)
        out.append(f'<polyline fill="none" stroke="{c}" stroke-width="2" points="{points}"/>')
        out.append(f'<text x="{w - pad + 4}" y="{pad + 14 * i}" fill="{c}">{arch}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--arch", default=",".join(HIDDEN), help="architectures, comma-separated")
    p.add_argument("--m", default=",".join(map(str, MS)), help="token counts, comma-separated")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("e2e_routing: needs a CUDA GPU (torch.cuda.is_available() is False); nothing timed", file=sys.stderr)
        return 2
    ms = [int(m) for m in args.m.split(",")]
    rows = [r for name in args.arch.split(",") for r in bench(name, ms)]
    device = torch.cuda.get_device_name()
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {"device": device, "torch": torch.__version__, "dtype": "bf16", "iters": ITERS, "reps": REPS}
    (args.out / "e2e_routing.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    (args.out / "e2e_routing.svg").write_text(svg(rows, f"routing step, stock / k3gen, {device}"))
    print(f"wrote {args.out}/e2e_routing.json and .svg")
    return 0


if __name__ == "__main__":
    sys.exit(main())
