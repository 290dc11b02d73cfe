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
The GPU's arithmetic and memory model are not emulated (one OS thread runs the fibers in turn): the
generated GPU tests on the H200 remain the kernels' test; this one pins their logic where no GPU is.
"""

from __future__ import annotations

import array
import importlib.util
import re
import shutil
import subprocess

import pytest
import torch

from k3gen.oracles import route_topk as oracle

from support import ROOT

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


def device_region(family: str) -> str:
    """The family's device code: the route template's fragment, up to the kernel. CUDA's reciprocal
    approximation becomes the division it and its Newton step round to (the kernel's own claim)."""
    src = (CSRC / family / f"{family}.cuh").read_text()
    start = src.index("// --- routing of one token")
    end = src.rindex("\ntemplate <", 0, src.index("__global__"))
    region = src[start:end]
    assert region.count(RCP) == 1
    return region.replace(RCP, "r = 1.0f / d;")


def routers() -> list[str]:
    """Every generated family that routes with the route template and checks against its oracle."""
    tests = sorted((ROOT / "generated" / "tests").glob("test_route_*.py"))
    return [t.stem[len("test_") :] for t in tests if "import k3gen.oracles.route_topk as oracle" in t.read_text()]


def compile_host(tmp_path, family: str, backend: str, source: str, *defines: str):
    (tmp_path / "region.inc").write_text(device_region(family))
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


def constant(family: str, name: str) -> int:
    abi = (CSRC / family / f"{family}_abi.h").read_text()
    return int(re.search(rf"constexpr int {name} = (\d+);", abi).group(1))


needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ (C++20)")


@needs_gxx
@pytest.mark.parametrize(("family", "backend"), CASES)
def test_route_strategies_on_the_host(tmp_path, family, backend):
    exe = compile_host(tmp_path, family, backend, "driver.cpp", f"-DK3_HOST_ROWS={ROWS}")
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
    exe = compile_host(tmp_path, family, backend, "rows.cpp")
    e, k, m = constant(family, "num_experts"), constant(family, "top_k"), 48
    scores, bias = router_rows(m, e)
    floats = array.array("f", scores.flatten().tolist() + bias.tolist())  # rows.cpp reads M, the scores, the bias
    (tmp_path / "in.bin").write_bytes(array.array("q", [m]).tobytes() + floats.tobytes())
    path = ROOT / "generated" / "tests" / f"test_{family}.py"  # the spec as the oracle needs it: SPEC, ROUTING
    generated = importlib.util.module_from_spec(importlib.util.spec_from_file_location(f"host_{family}", path))
    generated.__spec__.loader.exec_module(generated)
    variant = {**generated.SPEC, **generated.ROUTING[backend]}
    want_w, want_ids = oracle.reference(variant, scores, bias, topk=k, renormalize=1, routed_scaling_factor=1.0)
    ran = []
    for strategy in (1, 2, 3, 4):  # block, warp, warp rounds, thread
        for threads in (128, 256):
            out = tmp_path / "out.bin"
            args = [str(exe), str(tmp_path / "in.bin"), str(out), str(strategy), str(threads)]
            run = subprocess.run(args, capture_output=True, text=True, timeout=300)
            if run.returncode == 2:  # a strategy this family cannot take
                continue
            assert run.returncode == 0, run.stdout + run.stderr
            raw = out.read_bytes()
            w = torch.frombuffer(bytearray(raw[: m * k * 4]), dtype=torch.float32).view(m, k)
            ids = torch.frombuffer(bytearray(raw[m * k * 4 :]), dtype=torch.int32).view(m, k)
            assert torch.equal(ids, want_ids), f"strategy {strategy}, {threads} threads: other experts"
            apart = (w.view(torch.int32).long() - want_w.view(torch.int32).long()).abs()
            assert ((apart <= 4) | (w.isnan() & want_w.isnan())).all(), f"strategy {strategy}: weights apart"
            ran.append(strategy)
    assert 2 in ran and 3 in ran  # every router takes the warp strategies
