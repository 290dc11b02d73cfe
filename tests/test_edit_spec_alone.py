""" "Edit the spec alone": one edit of one spec file in a copy of the project, a rebuild, and every
layer follows: the C++ dispatch, the wrapper's whitelist and gates, the generated tests, the docs,
the MANIFEST, and the CUDA sources still compile. No template or Python file is touched."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from k3gen.cli import main
from k3gen.runtime.toolchain import compile_flags

from support import ROOT, copy_frozen_project

# What `k3gen test` selects this module by (k3gen.review.impact): besides k3gen/ and tests/ (the
# frozen specs of tests/data its copies start from), the templates.
READS = ("templates/**",)


@pytest.fixture
def project(tmp_path):
    """Every frozen spec (tests/data): the edits below are text, so they must not follow the bundled specs."""
    return copy_frozen_project(tmp_path / "proj")


def edit(project, spec, old, new):
    path = project / "specs" / spec
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} in {spec}"
    path.write_text(text.replace(old, new))


def build(project, capsys) -> str:
    assert main(["--root", str(project), "build"]) == 0
    return capsys.readouterr().out


def read(project, rel) -> str:
    return (project / "generated" / rel).read_text()


def manifest(project) -> list[str]:
    return [line.split("  ", 1)[1] for line in read(project, "MANIFEST").splitlines() if not line.startswith("#")]


def compile_units(project, family, units, arch="sm_90a"):
    """nvcc -c on the given units with the runtime's flags; skipped without nvcc (a failure in CI)."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        if os.environ.get("CI"):
            pytest.fail("nvcc not found in CI")
        pytest.skip("nvcc not found")
    csrc = project / "generated" / "k3kernels" / "csrc"
    defines = ["-DK3_PDL=1"]
    for unit in units:
        cmd = [nvcc, *compile_flags(arch, defines, csrc), "-c", str(csrc / family / unit), "-o", os.devnull]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        assert proc.returncode == 0, f"{unit}:\n{proc.stdout}{proc.stderr}"


def test_add_fp16_to_an_axis(project, capsys):
    build(project, capsys)
    edit(project, "route_topk.yaml", "score: [bf16, fp32]", "score: [bf16, fp32, fp16]")
    out = build(project, capsys)
    new = ["route_topk__score_fp16__bias_fp32.cu", "route_topk__score_fp16__bias_bf16.cu"]
    for unit in new:
        assert f"generated/k3kernels/csrc/route_topk/{unit}" in out
        assert f"k3kernels/csrc/route_topk/{unit}" in manifest(project)
    dispatch = read(project, "k3kernels/csrc/route_topk/dispatch.cu")
    assert "return route_topk__score_fp16__bias_fp32(*a, s, err, err_len);  // score=fp16, bias=fp32" in dispatch
    wrapper = read(project, "k3kernels/route_topk.py")
    assert "(torch.float16, torch.float32): (" in wrapper and '("fp16", "bf16")' in wrapper
    tests = read(project, "tests/test_route_topk.py")
    assert '"score_fp16__bias_fp32"' in tests and '("fp16", "fp32", False, 1)' in tests
    assert "| **fp16** | generated | generated |" in read(project, "docs/route_topk.md")
    compile_units(project, "route_topk", [*new, "dispatch.cu"])


def test_add_an_exclusion(project, capsys):
    build(project, capsys)
    reason = "bf16 biases are being retired"
    edit(
        project,
        "route_topk.yaml",
        "  exclude:\n",
        f'  exclude:\n    - {{score: bf16, bias: bf16, reason: "{reason}"}}\n',
    )
    out = build(project, capsys)
    gone = "k3kernels/csrc/route_topk/route_topk__score_bf16__bias_bf16.cu"
    assert f"removed generated/{gone}" in out and gone not in manifest(project)
    assert not (project / "generated" / gone).exists()
    assert "score=bf16, bias=bf16" not in read(project, "k3kernels/csrc/route_topk/dispatch.cu")
    wrapper = read(project, "k3kernels/route_topk.py")
    assert f'("bf16", "bf16"): "{reason}",' in wrapper
    assert "(torch.bfloat16, torch.bfloat16)" not in wrapper
    assert f'({{"score": "bf16", "bias": "bf16"}}, "{reason}")' in read(project, "tests/test_route_topk.py")
    assert f"excluded: {reason}" in read(project, "docs/route_topk.md")
    compile_units(project, "route_topk", ["dispatch.cu"])


def test_drop_an_arch(project, capsys):
    build(project, capsys)
    edit(project, "situ_and_mul.yaml", "  cuda: [sm_90a, sm_100a]", "  cuda: [sm_90a]")
    edit(project, "situ_and_mul.yaml", "pdl: {archs: [sm_90a, sm_100a]}", "pdl: {archs: [sm_90a]}")
    build(project, capsys)
    wrapper = read(project, "k3kernels/situ_and_mul.py")
    assert '"sm_100a"' not in wrapper and '"sm_90a": ["-DK3_PDL=1"]' in wrapper
    assert "| sm_100a |" not in read(project, "docs/situ_and_mul.md")
    compile_units(project, "situ_and_mul", ["situ_and_mul__in_bf16__out_bf16__has_linear_beta_on.cu"])


def test_add_a_runner(project, capsys, monkeypatch):
    build(project, capsys)
    path = project / "specs" / "runners.yaml"
    path.write_text(
        path.read_text() + "  - name: deepgemm_fp8\n    archs: [sm_90a, sm_100a]\n"
        '    consumes: dense_bf16\n    summary: "DeepGEMM fp8 grouped GEMM"\n'
    )
    out = build(project, capsys)
    assert "generated/k3kernels/runners.py" in out
    lookup = read(project, "k3kernels/runners.py")
    assert (
        '("deepgemm_fp8", ("sm_90a", "sm_100a"), "dense_bf16", torch.bfloat16, "DeepGEMM fp8 grouped GEMM"),' in lookup
    )
    assert '("deepgemm_fp8", ["sm_90a", "sm_100a"], "dense_bf16", torch.bfloat16),' in read(
        project, "tests/test_runners.py"
    )
    assert "| `deepgemm_fp8` | dense_bf16 | bf16 | sm_90a, sm_100a | DeepGEMM fp8 grouped GEMM |" in read(
        project, "docs/route_quant_fused.md"
    )
    # The lookup answers for the new runner without any code change.
    import importlib.util

    spec = importlib.util.spec_from_file_location("runners_copy", project / "generated/k3kernels/runners.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(__import__("sys").modules, "runners_copy", module)  # dataclasses look it up
    spec.loader.exec_module(module)
    assert module.needs_dense_bf16("deepgemm_fp8") and "deepgemm_fp8" in module.runners_for_arch("sm_100a")


def test_drop_a_hip_arch_and_it_leaves_every_file_of_the_family(project, capsys):
    """Docs, wrapper, tests and dispatch agree with the runtime: gfx950 dropped is gone from all."""
    build(project, capsys)
    assert "gfx950" in read(project, "docs/per_token_group_quant.md")
    edit(project, "per_token_group_quant.yaml", "  hip: [gfx942, gfx950]", "  hip: [gfx942]")
    build(project, capsys)
    gen = project / "generated"
    family = [
        p
        for p in gen.rglob("*")
        if p.is_file() and "per_token_group_quant" in p.as_posix() and "__pycache__" not in p.parts
    ]
    assert len(family) > 100
    assert [p.relative_to(gen).as_posix() for p in family if "gfx950" in p.read_text()] == []
    assert main(["--root", str(project), "list", "--family", "per_token_group_quant"]) == 0
    assert "gfx950" not in capsys.readouterr().out


# A new model's router (issue 24): 288 experts, top-8, softmax over the row, renormalized. The spec
# is the whole change; the route template, its limits and its oracle serve it as they are.
NEW_ROUTER = """\
kernel: route_e288
summary: "a 288-expert top-8 softmax router"
template: route_topk
targets:
  cuda: [sm_90a]
  hip: [gfx942]
constants: {num_experts: 288, top_k: 8, strategy: 2, block_threads: 128}
routing: {scoring: softmax, bias: none}
dtypes:
  axes:
    score: [bf16, fp32]
flags:
  pdl: {archs: [sm_90a]}
vector: {elements: 1}
signature:
  dims: {M: "scores.shape[0]"}
  tensors:
    scores: {dtype: score, shape: [M, num_experts], layout: rows}
    out_weights: {dtype: fp32, shape: [M, top_k], output: true}
    out_ids: {dtype: i32, shape: [M, top_k], output: true}
  scalars:
    topk: {type: i32}
    num_expert_group: {type: i32, optional: true, default: 1}
    topk_group: {type: i32, optional: true, default: 1}
    renormalize: {type: i32, optional: true, default: 1}
    routed_scaling_factor: {type: f32, optional: true, default: 1.0}
gates:
  - {check: "topk == top_k", reason: "K is compiled in"}
  - {check: "num_expert_group == 1 and topk_group == 1", reason: "no expert grouping"}
oracle: k3gen.oracles.route_topk
tests:
  dims: {M: [1, 16, 300]}
  layouts: [dense, strided]
  cases: [all_equal, ties_at_k, tie_straddles_k, score_formula, nan, signed_zero, renormalize_off, scaling_factor]
  rejects: {wrong_topk: 0, expert_groups: 1}
"""


def test_a_new_router_is_a_spec(project, capsys):
    """Add the spec, build: its kernel compiles and its generated CPU tests (the fake-tensor outputs
    against the oracle, the refused CPU tensor) pass; the GPU ones skip here and run on a GPU."""
    import sys

    (project / "specs" / "route_e288.yaml").write_text(NEW_ROUTER)
    out = build(project, capsys)
    assert "generated/k3kernels/csrc/route_e288/route_e288__score_bf16.cu" in out
    header = read(project, "k3kernels/csrc/route_e288/route_e288.cuh")
    assert "constexpr int kScoring = kScoringSoftmax;" in header and "constexpr int kBiasAt = kBiasNone;" in header
    assert '"scoring": "softmax"' in read(project, "tests/test_route_e288.py")
    compile_units(project, "route_e288", ["route_e288__score_bf16.cu", "dispatch.cu"])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(project / "generated"), str(ROOT)]))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "generated/tests/test_route_e288.py"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert " 0 passed" not in done.stdout and "passed" in done.stdout, done.stdout[-500:]
