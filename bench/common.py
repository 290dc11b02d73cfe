"""Timing helpers for the benchmarks: CUDA graphs, medians, a same-size device copy as the ceiling."""

from __future__ import annotations

import statistics

import torch

CALLS_PER_GRAPH = 20
REPLAYS = 30

# The sizes timed, shared by bench.py (with its references) and kernel_times.py (kernels alone).
SITU_D = 3584
SITU_PAIRS = (("bf16", "bf16"), ("fp32", "bf16"), ("fp16", "fp16"), ("fp32", "fp32"))
SITU_MS = (1, 128, 4096, 16384)
PTGQ_K = 7168
PTGQ_CASES = tuple(
    (dt, g, fmt) for dt in ("bf16", "fp16", "fp32") for g, fmt in ((128, "ue8m0"), (128, "fp32_row"), (32, "ue8m0"))
)
PTGQ_MS = (1, 128, 4096, 16384)
RQF_SHAPE = (896, 16, 3584)  # E, K, hidden
RQF_MS = (1, 16, 64, 128, 256, 1024)


def router_ms(name: str, num_experts: int) -> tuple[int, ...]:
    """Every router at 1, 128, 1024, 8192; the 896/16 instances also at 16 and prefill sizes, ERNIE-4.5
    (whose goal is at prefill) also at 65536."""
    if name.startswith("route_topk") and num_experts == 896:
        return (1, 16, 128, 1024, 4096, 8192, 65536)
    return (1, 128, 1024, 8192, 65536) if name == "route_ernie45" else (1, 128, 1024, 8192)


def time_graph_us(fn, calls: int = CALLS_PER_GRAPH, replays: int = REPLAYS) -> float:
    """Median µs per call of `fn` captured `calls` times in one CUDA graph (launch gaps shrink)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):  # warm up: module load, compile, allocator
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / calls)
    return statistics.median(times)


def copy_us(nbytes_moved: int) -> float:
    """A device-to-device copy moving the same bytes (read + write) as the kernel."""
    n = max(1, nbytes_moved // 2)
    src = torch.empty(n, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    return time_graph_us(lambda: dst.copy_(src))


def measure(kernel, compiled, nbytes: int, **fields) -> dict:
    """One row: the kernel, torch.compile of the oracle, and a copy of the same bytes, in this run."""
    return record(
        **fields, bytes=nbytes, us=time_graph_us(kernel), copy_us=copy_us(nbytes), compile_us=time_graph_us(compiled)
    )


def bandwidth_verdict(r: dict, ok: bool, width: int) -> str:
    return (
        f"{'ok  ' if ok else 'MISS'} {r['dtypes']:>{width}} M={r['M']:<6} {r['us']:8.2f} us {r['gbps']:7.0f} GB/s "
        f"copy {r['ratio_to_copy']:5.1%}  vs compile x{r['speedup_vs_compile']:.2f}"
    )


def record(**kw) -> dict:
    us, nbytes = kw["us"], kw["bytes"]
    kw["gbps"] = nbytes / (us * 1e-6) / 1e9
    kw["copy_gbps"] = nbytes / (kw["copy_us"] * 1e-6) / 1e9
    kw["ratio_to_copy"] = kw["gbps"] / kw["copy_gbps"]
    kw["speedup_vs_compile"] = kw["compile_us"] / us
    return kw
