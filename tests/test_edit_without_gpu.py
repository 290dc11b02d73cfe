"""A spec edit works on a machine without a GPU, with every committed tuning table in place (issue 25).

One realistic edit per template, on a copy of the bundled specs and tables: the build succeeds and
says which variants are untuned, `k3gen check` is clean after it, the new cell's generated CPU tests
pass, and `k3gen diff` reports the new variants as untuned (default config). The tuned variants keep
their picks. A new arch is an edit of the spec too: accepted where the template can serve it,
refused by the template's limits with the reason where it cannot.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from k3gen.cli import main

from support import ROOT

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="k3gen diff needs git")

SITU_FP8 = [
    ("in: [bf16, fp16, fp32]\n", "in: [bf16, fp16, fp32, fp8]\n"),
    (
        "  defaults:\n    out: {from: in, map: {bf16: bf16, fp16: fp16, fp32: bf16}}",
        '    - {in: fp8, out: fp16, reason: "fp8 activations feed bf16 runners; fp16 is not a runner dtype"}\n'
        '    - {in: fp8, out: fp32, reason: "a widening output doubles write traffic; no consumer asks for it"}\n'
        "  defaults:\n    out: {from: in, map: {bf16: bf16, fp16: fp16, fp32: bf16, fp8: bf16}}",
    ),
]
# (family, edits of its spec, a pytest -k picking the new cell's generated tests, a new variant)
EDITS = [
    ("situ_and_mul", SITU_FP8, "in_fp8", "situ_and_mul__in_fp8__out_bf16__has_linear_beta_off"),
    (
        "per_token_group_quant",
        [("    in: [bf16, fp16, fp32]\n", "    in: [bf16, fp16, fp32, fp8]\n")],
        None,  # refused: the template reads 16-bit and 32-bit inputs only (below)
        None,
    ),
    (
        "route_topk",
        [
            ("    score: [bf16, fp32]\n", "    score: [bf16, fp32, fp16]\n"),
            (
                "  exclude:\n",
                '  exclude:\n    - {score: fp16, bias: bf16, reason: "fp16 scores come with an fp32 bias"}\n',
            ),
        ],
        "score_fp16",
        "route_topk__score_fp16__bias_fp32",
    ),
    (
        "route_quant_fused",
        [("    act: [bf16, fp32]\n", "    act: [bf16, fp32, fp16]\n")],
        "act_fp16",
        "route_quant_fused__score_bf16__act_fp16",
    ),
]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """The bundled project (specs, committed tuning tables, templates, oracles, generated/) in a git
    repository of its own, so `k3gen diff HEAD` compares the edit with it."""
    root = tmp_path / "repo"
    for part in ("specs", "templates", "k3gen/oracles", "generated"):
        shutil.copytree(ROOT / part, root / part, ignore=shutil.ignore_patterns("__pycache__"))
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "bundled"], check=True)
    return root


def _edit(root: Path, family: str, edits: list[tuple[str, str]]) -> None:
    path = root / "specs" / f"{family}.yaml"
    text = path.read_text()
    for old, new in edits:
        assert text.count(old) == 1, f"{old!r} in {path.name}"
        text = text.replace(old, new)
    path.write_text(text)


def _run(root: Path, capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(["--root", str(root), *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _generated_tests(root: Path, family: str, select: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(root / "generated")]))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"generated/tests/test_{family}.py"]
        + ["-k", select],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.parametrize(
    "family, edits, select, variant", [e for e in EDITS if e[2]], ids=[e[0] for e in EDITS if e[2]]
)
def test_a_new_cell_builds_untuned_beside_the_committed_table(repo, capsys, family, edits, select, variant):
    table = f"specs/tuning/{family}.h200.yaml"
    assert (repo / table).is_file()
    tuned = (repo / "generated/k3kernels/csrc" / family).glob("*.cu")
    before = {p.name: p.read_text() for p in tuned if p.name != "dispatch.cu"}
    _edit(repo, family, edits)
    rc, _, err = _run(repo, capsys, "build")
    assert rc == 0, err
    note = next(line for line in err.splitlines() if line.startswith(f"note: {table}:"))
    assert f'(kernel "{family}", picks): ' in note and "no pick: " in note and variant in note
    assert f"until `k3gen tune --family {family}` runs on NVIDIA H200" in note
    rc, out, err = _run(repo, capsys, "check")
    assert rc == 0 and "k3gen check: generated/ is up to date" in out, err
    csrc = repo / "generated/k3kernels/csrc" / family
    assert "k3::untuned_config(" in (csrc / f"{variant}.cu").read_text()
    for name, text in before.items():  # the tuned variants keep their units, picks included
        assert (csrc / name).read_text() == text, name
    done = _generated_tests(repo, family, select)
    assert done.returncode == 0 and " passed" in done.stdout.splitlines()[-1], done.stdout[-3000:] + done.stderr
    rc, out, err = _run(repo, capsys, "diff", "HEAD")
    assert rc == 0, err
    assert (f"  untuned {variant}: added: untuned (default config): no pick in specs/tuning/{family}.h200.yaml") in out


def test_an_input_dtype_the_template_cannot_read_is_refused_with_its_reason(repo, capsys):
    _edit(repo, "per_token_group_quant", EDITS[1][1])
    rc, _, err = _run(repo, capsys, "build")
    assert rc == 2
    assert (
        "(kernel \"per_token_group_quant\", dtypes.axes.in.3): dtype fp8 on axis 'in' is beyond what "
        "templates/per_token_group_quant/ supports"
    ) in err


def test_sm_89_is_an_edit_of_the_spec(repo, capsys):
    """Ada has the fp8 conversion the quant template needs, and no PDL: the spec adds it to its targets
    and leaves it out of flags.pdl; the build says so in the docs and the diff."""
    _edit(repo, "per_token_group_quant", [("  cuda: [sm_90a, sm_100a]\n", "  cuda: [sm_89, sm_90a, sm_100a]\n")])
    rc, _, err = _run(repo, capsys, "build")
    assert rc == 0, err
    rc, out, err = _run(repo, capsys, "check")
    assert rc == 0, err
    doc = (repo / "generated/docs/per_token_group_quant.md").read_text()
    assert "per arch: on for sm_90a, sm_100a; off for sm_89" in doc
    rc, out, err = _run(repo, capsys, "diff", "HEAD")
    assert rc == 0, err
    assert "  targets cuda: sm_90a, sm_100a → sm_89, sm_90a, sm_100a" in out
    assert (
        "  flag pdl: per arch: on for sm_90a, sm_100a; off for gfx942, gfx950 → "
        "per arch: on for sm_90a, sm_100a; off for sm_89, gfx942, gfx950" in out
    )
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        if os.environ.get("CI"):
            pytest.fail("nvcc not found in CI")
        pytest.skip("nvcc not found: the sm_89 unit was not compiled")
    from k3gen.runtime.toolchain import compile_flags

    csrc = repo / "generated/k3kernels/csrc"
    name = "per_token_group_quant__in_bf16__group_size_128__scale_format_ue8m0__fuse_silu_and_mul_off"
    unit = csrc / "per_token_group_quant" / f"{name}.cu"
    cmd = [nvcc, *compile_flags("sm_89", ["-DK3_PDL=0"], csrc), "-c", str(unit), "-o", os.devnull]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize(
    "edits, message",
    [
        (
            [("  cuda: [sm_90a, sm_100a]\n", "  cuda: [sm_80, sm_90a, sm_100a]\n")],
            '(kernel "per_token_group_quant", targets.cuda.0): templates/per_token_group_quant/ needs fp8 e4m3 '
            "conversion instructions (sm_89 or newer; CDNA3 and newer), which sm_80 lacks "
            "(templates/per_token_group_quant/limits.yaml:",
        ),
        (
            [
                ("  cuda: [sm_90a, sm_100a]\n", "  cuda: [sm_89, sm_90a, sm_100a]\n"),
                ("  pdl: {archs: [sm_90a, sm_100a]}", "  pdl: {archs: [sm_89, sm_90a, sm_100a]}"),
            ],
            '(kernel "per_token_group_quant", flags.pdl.archs.0): pdl is on for sm_89, which lacks programmatic '
            "dependent launch (sm_90 or newer) (templates/per_token_group_quant/limits.yaml:",
        ),
    ],
    ids=["sm_80-lacks-fp8", "pdl-on-sm_89"],
)
def test_an_arch_the_template_cannot_serve_is_refused_with_the_reason(repo, capsys, edits, message):
    _edit(repo, "per_token_group_quant", edits)
    rc, _, err = _run(repo, capsys, "build")
    assert rc == 2
    assert message in err


TOPK_KNOBS = "knobs: {strategy: [1, 2], block_threads: [256, 128, 448, 512]}"


@pytest.mark.parametrize(
    "edit",
    [
        (TOPK_KNOBS, "knobs: {strategy: [1, 2], block_threads: [256, 128]}"),
        (TOPK_KNOBS, "knobs: {block_threads: [256, 128, 448, 512]}"),
    ],
    ids=["candidate-dropped", "knob-dropped"],
)
def test_new_knobs_leave_the_table_stale_not_malformed(repo, capsys, edit):
    """The table measured other configs than the spec now names: every variant runs the default
    config and the build says so; none of its picks is read as a config of the new knobs."""
    _edit(repo, "route_topk", [edit])
    rc, _, err = _run(repo, capsys, "build")
    assert rc == 0, err
    note = next(line for line in err.splitlines() if line.startswith("note: specs/tuning/route_topk.h200.yaml:"))
    assert "3 of 3 variants untuned (stale: " in note, note
    rc, out, err = _run(repo, capsys, "check")
    assert rc == 0 and "k3gen check: generated/ is up to date" in out, err


@pytest.mark.parametrize("stale", [False, True], ids=["current", "stale"])
def test_a_pick_of_no_candidate_config_is_malformed(repo, capsys, stale):
    """A row whose pick is none of the configs it timed was edited by hand: a located error, in a
    current table and in one the spec has since left stale (here: a bucket added)."""
    if stale:
        _edit(repo, "route_topk", [("buckets: [1, 16, ", "buckets: [1, 8, 16, ")])
    table = repo / "specs/tuning/route_topk.h200.yaml"
    text = table.read_text()
    row = re.search(r'"config": \{[^}]*"block_threads": (\d+)', text)
    table.write_text(text[: row.start(1)] + "96" + text[row.end(1) :])
    line = text[: row.start(1)].count("\n") + 1
    rc, _, err = _run(repo, capsys, "build")
    assert rc == 2
    assert f"specs/tuning/route_topk.h200.yaml:{line} (" in err and "is none of the 8 configs its row timed" in err, err
