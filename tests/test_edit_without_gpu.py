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
from k3gen.plan import resolve_all
from k3gen.spec.load import load_specs

import spec_yaml
from support import ROOT

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="k3gen diff needs git")


# (family, its spec edit, a pytest -k picking the new cell's generated tests): each adds a dtype
# cell to whatever the spec holds (tests/spec_yaml.py edits fields, never committed text).
def _situ_fp8(spec: Path) -> None:
    spec_yaml.add(spec, ("dtypes", "axes", "in"), "fp8")
    for out, why in (("fp16", "fp16 is not a runner dtype"), ("fp32", "no consumer asks for a widening output")):
        spec_yaml.add(spec, ("dtypes", "exclude"), {"in": "fp8", "out": out, "reason": why})
    _add_key(spec, ("dtypes", "defaults", "out", "map"), "fp8", "bf16")


def _topk_fp16(spec: Path) -> None:
    spec_yaml.add(spec, ("dtypes", "axes", "score"), "fp16")
    spec_yaml.add(spec, ("dtypes", "exclude"), {"score": "fp16", "bias": "bf16", "reason": "fp16 scores, fp32 bias"})


def _fused_fp16(spec: Path) -> None:
    spec_yaml.add(spec, ("dtypes", "axes", "act"), "fp16")


def _add_key(spec: Path, path: tuple, key: str, value) -> None:
    spec_yaml.put(spec, path, {**spec_yaml.get(spec, path), key: value})


EDITS = [
    ("situ_and_mul", _situ_fp8, "in_fp8"),
    ("route_topk", _topk_fp16, "score_fp16"),
    ("route_quant_fused", _fused_fp16, "act_fp16"),
]


def _plan(root: Path, family: str):
    return next(p for p in resolve_all(load_specs(root), root) if p.name == family)


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


def _spec(root: Path, family: str) -> Path:
    return root / "specs" / f"{family}.yaml"


def _commit(root: Path, message: str) -> None:
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "commit", "-qam", message], check=True)


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


@pytest.mark.parametrize("family, edit, select", EDITS, ids=[e[0] for e in EDITS])
def test_a_new_cell_builds_untuned_beside_the_committed_table(repo, capsys, family, edit, select):
    before_plan = _plan(repo, family)
    tables = before_plan.tuning.tables
    if not tables:
        pytest.skip(f"{family} has no tuning table to build beside")
    if any(select in v.name for v in before_plan.variants):
        pytest.skip(f"{family} already generates a {select} cell")
    tuned = (repo / "generated/k3kernels/csrc" / family).glob("*.cu")
    before = {p.name: p.read_text() for p in tuned if p.name != "dispatch.cu"}
    edit(_spec(repo, family))
    rc, _, err = _run(repo, capsys, "build")
    assert rc == 0, err
    added = sorted({v.name for v in _plan(repo, family).variants} - {v.name for v in before_plan.variants})
    assert added and all(select in v for v in added), added
    variant = added[0]
    for tb in tables:  # one line per device's table
        note = _table_note(err, tb.file)
        assert f'(kernel "{family}", picks): ' in note and "no pick: " in note and variant in note
        assert f"until `k3gen tune --family {family}` runs on {tb.device_name}" in note
    rc, out, err = _run(repo, capsys, "check")
    assert rc == 0 and "k3gen check: generated/ is up to date" in out, err
    csrc = repo / "generated/k3kernels/csrc" / family
    untuned = ", ".join(["false"] * len(tables))  # no row of any device's table has a pick for it
    assert f"static constexpr bool tuned[tables] = {{{untuned}}};" in (csrc / f"{variant}.cu").read_text()
    for name, text in before.items():  # the tuned variants keep their units, picks included
        assert (csrc / name).read_text() == text, name
    done = _generated_tests(repo, family, select)
    assert done.returncode == 0 and " passed" in done.stdout.splitlines()[-1], done.stdout[-3000:] + done.stderr
    rc, out, err = _run(repo, capsys, "diff", "HEAD")
    assert rc == 0, err
    for tb in tables:
        assert f"  untuned {variant} on {tb.device}: added: untuned (default config): no pick in {tb.file}" in out


QUANT = "per_token_group_quant"
CUDA, PDL = ("targets", "cuda"), ("flags", "pdl", "archs")


def test_an_input_dtype_the_template_cannot_read_is_refused_with_its_reason(repo, capsys):
    axis = spec_yaml.add(_spec(repo, QUANT), ("dtypes", "axes", "in"), "fp8")
    rc, _, err = _run(repo, capsys, "build")
    assert rc == 2
    assert (
        f"(kernel \"{QUANT}\", dtypes.axes.in.{len(axis) - 1}): dtype fp8 on axis 'in' is beyond what "
        f"templates/{QUANT}/ supports"
    ) in err


def _without_sm_89(repo: Path) -> list[str]:
    """The quant spec's CUDA archs, sm_89 taken out first (and committed) where an edit added it."""
    spec = _spec(repo, QUANT)
    if "sm_89" in spec_yaml.get(spec, CUDA):
        spec_yaml.drop(spec, CUDA, "sm_89")
        spec_yaml.drop(spec, PDL, "sm_89")
        assert main(["--root", str(repo), "build"]) == 0
        _commit(repo, "without sm_89")
    return spec_yaml.get(spec, CUDA)


def test_sm_89_is_an_edit_of_the_spec(repo, capsys):
    """Ada has the fp8 conversion the quant template needs, and no PDL: the spec adds it to its targets
    and leaves it out of flags.pdl; the build says so in the docs and the diff."""
    archs = _without_sm_89(repo)
    capsys.readouterr()
    spec_yaml.add(_spec(repo, QUANT), CUDA, "sm_89", first=True)
    rc, _, err = _run(repo, capsys, "build")
    assert rc == 0, err
    rc, out, err = _run(repo, capsys, "check")
    assert rc == 0, err
    pdl = ", ".join(a for a in spec_yaml.get(_spec(repo, QUANT), PDL) if a in archs)
    doc = (repo / f"generated/docs/{QUANT}.md").read_text()
    assert f"per arch: on for {pdl}; off for sm_89" in doc
    rc, out, err = _run(repo, capsys, "diff", "HEAD")
    assert rc == 0, err
    assert f"  targets cuda: {', '.join(archs)} → {', '.join(['sm_89', *archs])}" in out
    flag = next(line for line in out.splitlines() if line.startswith("  flag pdl: "))
    assert "sm_89" not in flag.split(" → ")[0] and "off for sm_89" in flag.split(" → ")[1], flag
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        if os.environ.get("CI"):
            pytest.fail("nvcc not found in CI")
        pytest.skip("nvcc not found: the sm_89 unit was not compiled")
    from k3gen.runtime.toolchain import compile_flags

    csrc = repo / "generated/k3kernels/csrc"
    name = next(u for u in _plan(repo, QUANT).sources["cuda"] if u != "dispatch.cu")
    unit = csrc / QUANT / name
    cmd = [nvcc, *compile_flags("sm_89", ["-DK3_PDL=0"], csrc), "-c", str(unit), "-o", os.devnull]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize(
    "arch, pdl, message",
    [
        (
            "sm_80",
            False,
            f'(kernel "{QUANT}", targets.cuda.0): templates/{QUANT}/ needs fp8 e4m3 '
            "conversion instructions (sm_89 or newer; CDNA3 and newer), which sm_80 lacks "
            f"(templates/{QUANT}/limits.yaml:",
        ),
        (
            "sm_89",
            True,
            f'(kernel "{QUANT}", flags.pdl.archs.0): pdl is on for sm_89, which lacks programmatic '
            f"dependent launch (sm_90 or newer) (templates/{QUANT}/limits.yaml:",
        ),
    ],
    ids=["sm_80-lacks-fp8", "pdl-on-sm_89"],
)
def test_an_arch_the_template_cannot_serve_is_refused_with_the_reason(repo, capsys, arch, pdl, message):
    _without_sm_89(repo)
    spec = _spec(repo, QUANT)
    spec_yaml.add(spec, CUDA, arch, first=True)
    if pdl:
        spec_yaml.add(spec, PDL, arch, first=True)
    rc, _, err = _run(repo, capsys, "build")
    assert rc == 2
    assert message in err


KNOBS = ("tuning", "knobs")


def _table_note(err: str, table: str) -> str:
    return next(line for line in err.splitlines() if line.startswith(f"note: {table}:"))


@pytest.mark.parametrize("drop", ["candidate", "knob"], ids=["candidate-dropped", "knob-dropped"])
def test_new_knobs_leave_the_table_stale_not_malformed(repo, capsys, drop):
    """The table measured other configs than the spec now names: every variant runs the default
    config and the build says so; none of its picks is read as a config of the new knobs."""
    plan = _plan(repo, "route_topk")
    spec, knobs = _spec(repo, "route_topk"), spec_yaml.get(_spec(repo, "route_topk"), KNOBS)
    last = list(knobs)[-1]
    if drop == "candidate":
        spec_yaml.put(spec, (*KNOBS, last), knobs[last][:-1])
    else:
        spec_yaml.put(spec, KNOBS, {k: v for k, v in knobs.items() if k != next(iter(knobs))})
    rc, _, err = _run(repo, capsys, "build")
    assert rc == 0, err
    n = len(plan.variants)
    note = _table_note(err, plan.tuning.tables[0].file)
    assert f"{n} of {n} variants untuned (stale: " in note, note
    rc, out, err = _run(repo, capsys, "check")
    assert rc == 0 and "k3gen check: generated/ is up to date" in out, err


@pytest.mark.parametrize("stale", [False, True], ids=["current", "stale"])
def test_a_pick_of_no_candidate_config_is_malformed(repo, capsys, stale):
    """A row whose pick is none of the configs it timed was edited by hand: a located error, in a
    current table and in one the spec has since left stale (here: a bucket added)."""
    plan = _plan(repo, "route_topk")
    spec = _spec(repo, "route_topk")
    if stale:
        buckets = spec_yaml.get(spec, ("tuning", "buckets"))
        spec_yaml.put(spec, ("tuning", "buckets"), [buckets[0], (buckets[0] + buckets[1]) // 2 + 1, *buckets[1:]])
    file = plan.tuning.tables[0].file
    table = repo / file
    text = table.read_text()
    row = re.search(r'"config": \{[^}]*"block_threads": (\d+)', text)
    table.write_text(text[: row.start(1)] + "96" + text[row.end(1) :])
    line = text[: row.start(1)].count("\n") + 1
    rc, _, err = _run(repo, capsys, "build")
    assert rc == 2
    configs = len(plan.tuning.configs)
    assert f"{file}:{line} (" in err and f"is none of the {configs} configs its row timed" in err, err
