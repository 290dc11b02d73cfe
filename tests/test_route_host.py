"""The route template's block and warp strategies, run on the host (tests/route_host).

The generated device code of each sigmoid-bias routing family is cut out of its .cuh, compiled with
g++ against tests/route_host/shim.h (every GPU thread of a block a fiber, every barrier, vote,
shuffle and redux a rendezvous of the threads it spans) and run over rows of random, tied,
all-equal, NaN, huge-negative and few-valued scores at every block size the tuner may pick; its
outputs must equal a plain sort of the same composite keys bit for bit. CUDA's 32-lane warps and
HIP's 64-lane waves, tie tables included: the HIP path runs nowhere else here (no AMD GPU). A lane
that skips a collective its warp reaches, or lanes that reach different ones, stop the run. The
GPU's memory model is not emulated (one OS thread runs the fibers in turn): the generated GPU tests
on the H200 remain the kernels' test; this one pins their logic where no GPU is.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from support import ROOT

HOST = ROOT / "tests" / "route_host"
CSRC = ROOT / "generated" / "k3kernels" / "csrc"
ROWS = 256  # per block size: enough that a floor one span too high (K - 1) fails at every block size
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


def constant(family: str, name: str) -> int:
    abi = (CSRC / family / f"{family}_abi.h").read_text()
    return int(re.search(rf"constexpr int {name} = (\d+);", abi).group(1))


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ (C++20)")
@pytest.mark.parametrize(("family", "backend"), CASES)
def test_route_strategies_on_the_host(tmp_path, family, backend):
    (tmp_path / "region.inc").write_text(device_region(family))
    exe = tmp_path / "route_host"
    flags = [
        f"-DK3_{backend.upper()}=1",
        f"-DK3_HOST_E={constant(family, 'num_experts')}",
        f"-DK3_HOST_K={constant(family, 'top_k')}",
        f"-DK3_HOST_ROWS={ROWS}",
        '-DK3_REGION="region.inc"',
    ]
    cmd = ["g++", "-std=c++20", "-O2", *flags, f"-I{HOST}", f"-I{tmp_path}", str(HOST / "driver.cpp"), "-o", str(exe)]
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=300)
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    results = LINE.findall(run.stdout)
    assert {(int(s), int(t)) for s, t, _, _ in results} == {(1, 128), (1, 256), (1, 448), (1, 512), (2, 128), (2, 256)}
    assert all(int(m) == 0 for *_, m in results), run.stdout
