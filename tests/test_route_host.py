"""The route template's strategies, run on the host (tests/route_host).

A routing family's generated device code is cut out of its .cuh and compiled with g++ against
tests/route_host/shim.h (every GPU thread of a block a fiber, every barrier, vote, shuffle and redux
a rendezvous of the threads it spans), for CUDA's 32-lane warps and HIP's 64-lane waves, tie tables
included: the HIP path runs nowhere else here (no AMD GPU). A lane that skips a collective its warp
reaches, or lanes that reach different ones, stop the run.
- The sigmoid-bias families (driver.cpp): rows of random, tied, all-equal, NaN, huge-negative and
  few-valued scores at every block size the tuner may pick; the outputs must equal a plain sort of
  the same composite keys, computed with the same host math, bit for bit.
- Every router of the template (rows.cpp): each strategy the family can take, against its oracle
  (k3gen.oracles.route_topk, every routing axis: softmax, groups, scoring after the top-K): the same
  experts, weights within a few ulp (the host's expf against torch's).
- route_quant_fused (fused.cpp): its whole kernel, routing and quant blocks, every tunable config,
  against its oracle; fp8 codes and scales exactly.
The GPU's arithmetic and memory model are not emulated (one OS thread runs the fibers in turn): the
generated GPU tests on the H200 remain the kernels' test; this one pins their logic where no GPU is.
"""

from __future__ import annotations

import array
import math
import re
import shutil
import subprocess

import pytest
import torch

from k3gen.oracles import route_quant_fused as fused_oracle
from k3gen.oracles import route_topk as oracle
from k3gen.tune import run as tune

from support import ROOT

# What `k3gen test` selects this module by (k3gen.review.impact): the paths it reads besides k3gen/ and tests/.
READS = ("specs/**", "generated/k3kernels/csrc/**", "generated/k3kernels/tuning/**")
FAMILY_SCOPED = True  # only the touched families' tests run

HOST = ROOT / "tests" / "route_host"
CSRC = ROOT / "generated" / "k3kernels" / "csrc"
ROWS = 256  # per block size: a select that errs only near the K-th key (a few rows in a hundred) still fails
# The sigmoid-bias families (the block strategy's routers), each backend whose tie order differs.
CASES = [
    ("route_topk", "cuda"),
    ("route_topk", "hip"),
    ("route_topk_unsorted", "cuda"),
    ("route_topk_e256", "cuda"),
    ("route_topk_e256", "hip"),
    ("route_topk_aiter", "cuda"),
]
RCP = 'asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(d));'
LINE = re.compile(r"strategy=(\d+) threads=(\d+) rows=(\d+) mismatches=(\d+)")


def cut(src: str, start: str, end: str) -> str:
    """From the line holding `start` up to the line holding `end`, which is left out."""
    a = src.rindex("\n", 0, src.index(start)) + 1
    return src[a : src.rindex("\n", 0, src.index(end, a)) + 1]


def backend_helpers() -> str:
    """The generated k3_backend.h's own helpers that the host can run (shim.h includes them): vectors,
    to_float, lane exchange over the shim's intrinsics, HIP's software fp8 conversion (the host's for
    both backends), the histogram and PDL (no-ops off the GPU)."""
    src = (CSRC / "k3_backend.h").read_text()
    parts = [
        cut(src, "// N elements of T", "template <typename T> K3_DEVICE T from_float(float x);"),
        "template <> K3_DEVICE float to_float<float>(float x) { return x; }\n",
        cut(src, "K3_DEVICE uint8_t fp8_e4m3(float x)", "#endif"),
        cut(src, "// Lane exchange within a warp", "// Inclusive prefix sum across a warp"),
        cut(src, "// hist[digit] += 1", "// Launch on `stream`"),
    ]
    return "namespace k3 {\n" + "".join(parts) + "}  // namespace k3\n"


def device_region(family: str, until: str = "__global__") -> str:
    """The family's device code: its constants (abi.h's constexprs), then the route template's
    fragment up to `until` (the kernel, or route_quant_fused's launch). Each CUDA reciprocal
    approximation becomes the division it and its Newton step round to (the kernel's own claim)."""
    abi = (CSRC / family / f"{family}_abi.h").read_text()
    constants = "".join(line + "\n" for line in abi.splitlines() if line.startswith("constexpr "))
    src = (CSRC / family / f"{family}.cuh").read_text()
    region = src[src.index("// --- routing of one token") : src.rindex("\ntemplate <", 0, src.index(until))]
    assert region.count(RCP) >= 1  # the sigmoid's; the lanes strategies' division has another
    return constants + region.replace(RCP, "r = 1.0f / d;")


def routers() -> list[str]:
    """Every generated family that routes with the route template and checks against its oracle."""
    tests = sorted((ROOT / "generated" / "tests").glob("test_route_*.py"))
    return [t.stem[len("test_") :] for t in tests if "import k3gen.oracles.route_topk as oracle" in t.read_text()]


def constant(family: str, name: str) -> int:
    abi = (CSRC / family / f"{family}_abi.h").read_text()
    return int(re.search(rf"constexpr int {name} = (\d+);", abi).group(1))


def compile_host(tmp_path, family: str, backend: str, source: str, region: str, *defines: str):
    """tests/route_host/`source` built for `backend` around `region` (K3_REGION) and the backend's helpers."""
    (tmp_path / "region.inc").write_text(region)
    (tmp_path / "backend.inc").write_text(backend_helpers())
    exe = tmp_path / source.removesuffix(".cpp")
    flags = [
        f"-DK3_{backend.upper()}=1",
        f"-DK3_HOST_E={constant(family, 'num_experts')}",
        f"-DK3_HOST_K={constant(family, 'top_k')}",
        '-DK3_REGION="region.inc"',
        *defines,
    ]
    cmd = ["g++", "-std=c++20", "-O2", *flags, f"-I{HOST}", f"-I{tmp_path}", str(HOST / source), "-o", str(exe)]
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=300)
    return exe


def oracle_variant(family: str, backend: str, **dtypes: str) -> dict:
    """The spec as the oracle needs it, for `backend` and `dtypes`, as `k3gen tune` builds it."""
    return tune.oracle_variant(tune.family_data(family), dtypes, backend)


def write_inputs(path, m: int, *tensors: torch.Tensor) -> None:
    """M (int64), then each tensor's fp32 values: what rows.cpp and fused.cpp read."""
    floats = array.array("f", [v for t in tensors for v in t.flatten().tolist()])
    path.write_bytes(array.array("q", [m]).tobytes() + floats.tobytes())


def read_outputs(path, *layout: tuple[torch.dtype, tuple[int, ...]]) -> list[torch.Tensor]:
    """The tensors a driver wrote one after another, each (dtype, shape)."""
    raw, at, out = bytearray(path.read_bytes()), 0, []
    for dtype, shape in layout:
        size = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
        out.append(torch.frombuffer(raw[at : at + size], dtype=dtype).view(shape))
        at += size
    assert at == len(raw)
    return out


def ulps_apart(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a.view(torch.int32).long() - b.view(torch.int32).long()).abs()


needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ (C++20)")


@needs_gxx
@pytest.mark.parametrize(("family", "backend"), CASES)
def test_route_strategies_on_the_host(tmp_path, family, backend):
    exe = compile_host(tmp_path, family, backend, "driver.cpp", device_region(family), f"-DK3_HOST_ROWS={ROWS}")
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    results = LINE.findall(run.stdout)
    assert {(int(s), int(t)) for s, t, _, _ in results} == {(1, 128), (1, 256), (1, 448), (1, 512), (2, 128), (2, 256)}
    assert all(int(m) == 0 for *_, m in results), run.stdout


def router_rows(m: int, e: int) -> tuple[torch.Tensor, torch.Tensor]:
    """m rows: random scores, then all-equal, few-valued and NaN-sprinkled rows; one bias."""
    g = torch.Generator().manual_seed(e)
    scores = torch.randn(m, e, generator=g)
    scores[1] = 0.5
    scores[2] = (torch.arange(e) % 3).float()
    scores[3, ::9] = float("nan")
    return scores, 0.1 * torch.randn(e, generator=g)


@needs_gxx
@pytest.mark.parametrize("backend", ["cuda", "hip"])
@pytest.mark.parametrize("family", routers())
def test_every_router_matches_its_oracle_on_the_host(tmp_path, family, backend):
    region = device_region(family)
    lanes = "route_lanes" in region  # the lanes strategies: only where the family may select them
    exe = compile_host(tmp_path, family, backend, "rows.cpp", region, f"-DK3_HOST_LANES={int(lanes)}")
    e, k, m = constant(family, "num_experts"), constant(family, "top_k"), 45  # spare groups of 8 and 4 lanes
    scores, bias = router_rows(m, e)
    write_inputs(tmp_path / "in.bin", m, scores, bias)
    want_w, want_ids = oracle.reference(
        oracle_variant(family, backend), scores, bias, topk=k, renormalize=1, routed_scaling_factor=1.0
    )
    ran = []
    for strategy in (1, 2, 3, 4, 5, 6) if lanes else (1, 2, 3, 4):  # block, warp, warp rounds, thread, lanes
        for threads in (128, 256):
            out = tmp_path / "out.bin"
            args = [str(exe), str(tmp_path / "in.bin"), str(out), str(strategy), str(threads)]
            run = subprocess.run(args, capture_output=True, text=True, timeout=300)
            if run.returncode == 2:  # a strategy this family cannot take
                continue
            assert run.returncode == 0, run.stdout + run.stderr
            w, ids = read_outputs(out, (torch.float32, (m, k)), (torch.int32, (m, k)))
            assert torch.equal(ids, want_ids), f"strategy {strategy}, {threads} threads: other experts"
            apart = ulps_apart(w, want_w)
            assert ((apart <= 4) | (w.isnan() & want_w.isnan())).all(), f"strategy {strategy}: weights apart"
            ran.append(strategy)
    assert 2 in ran and 3 in ran  # every router takes the warp strategies
    assert not lanes or (5 in ran and 6 in ran), ran


def fused_configs() -> list[str]:
    """route_quant_fused's tunable configs (its tuning data's candidates), as the kernel's template
    arguments after <T_score, T_act, FAST_MATH, VEC>."""
    src = (CSRC / "route_quant_fused" / "route_quant_fused.cuh").read_text()
    params = re.search(r"template <([^>]*)>\n__global__", src).group(1)
    names = [p.split()[-1] for p in params.split(",")][4:]
    configs = tune.family_data("route_quant_fused")["configs"]
    assert all(set(names) == set(c) for c in configs)  # every template argument after VEC is a knob
    return [", ".join(str(c[n]) for n in names) for c in configs]


@needs_gxx
@pytest.mark.family("route_quant_fused")
@pytest.mark.parametrize("backend", ["cuda", "hip"])
def test_route_quant_fused_matches_its_oracle_on_the_host(tmp_path, backend):
    """Its routing blocks and its quant blocks (however many rows each takes), every tunable config."""
    family = "route_quant_fused"
    e, k, h, g = (constant(family, n) for n in ("num_experts", "top_k", "hidden", "group_size"))
    words = (h // g + 3) // 4
    configs = fused_configs()
    defines = [f"-DK3_HOST_H={h}", f"-DK3_HOST_WORDS={words}"]
    defines.append("-DK3_HOST_CONFIGS=" + " ".join(f"CONFIG({c})" for c in configs))
    exe = compile_host(tmp_path, family, backend, "fused.cpp", device_region(family, "k3_error_t launch("), *defines)
    m = 37  # quant blocks with spare slots, whatever their rows
    scores, bias = router_rows(m, e)
    x = torch.randn(m, h, generator=torch.Generator().manual_seed(h)) * torch.logspace(-3, 3, m).unsqueeze(1)
    x[0] = 0.0  # every group's amax below eps
    x[2, ::17] = float("nan")
    write_inputs(tmp_path / "in.bin", m, scores, bias, x)
    variant = oracle_variant(family, backend, score="fp32", act="fp32")
    want_w, want_ids, want_q, want_scale = fused_oracle.reference(variant, scores, bias, x, topk=k)
    for i, config in enumerate(configs):
        out = tmp_path / "out.bin"
        run = subprocess.run(
            [str(exe), str(tmp_path / "in.bin"), str(out), str(i)], capture_output=True, text=True, timeout=300
        )
        assert run.returncode == 0, run.stdout + run.stderr
        layout = [(torch.float32, (m, k)), (torch.int32, (m, k)), (torch.uint8, (m, h)), (torch.int32, (m, words))]
        w, ids, q, scale = read_outputs(out, *layout)
        assert torch.equal(ids, want_ids), f"config <{config}>: other experts"
        assert (ulps_apart(w, want_w) <= 4).all(), f"config <{config}>: weights apart"
        assert torch.equal(q, want_q.view(torch.uint8)), f"config <{config}>: fp8 codes differ"
        assert torch.equal(scale, want_scale), f"config <{config}>: scales differ"
