"""Template limits (templates/<family>/limits.yaml, k3gen.spec.meaning.limits): parsed strictly, held against every
spec at load with both lines named, and repeated as static_asserts the compiler enforces.

Edits of the frozen fixtures (tests/data) and their pinned errors; the spec-edit suite
(tests/test_spec_edits.py) covers the limits a kernel engineer's realistic edits run into."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from k3gen.plan.resolve import resolve_family
from k3gen.render import render_all
from k3gen.ship.tree import write_files
from k3gen.spec.errors import SpecErrors
from k3gen.spec.load import load_specs, parse_spec
from k3gen.spec.meaning.limits import read_limits

from support import ROOT, SPEC_FILE, copy_project

LIMITS = "templates/situ_and_mul/limits.yaml"
K = '(kernel "situ_and_mul", '


def family_templates() -> list[str]:
    return sorted(p.parent.name for p in (ROOT / "templates").glob("*/kernel.cuh.j2"))


def _line(project, rel, needle) -> int:
    hits = [n for n, line in enumerate((project / rel).read_text().splitlines(), 1) if needle in line]
    assert len(hits) == 1, (needle, hits)
    return hits[0]


def _edit(project, rel, old, new):
    path = project / rel
    text = path.read_text()
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new))


def _errors(project) -> list[str]:
    with pytest.raises(SpecErrors) as info:
        load_specs(project)
    return [str(e) for e in info.value.errors]


@pytest.mark.parametrize("template", family_templates())
def test_every_family_template_declares_its_limits(template):
    limits, errors = read_limits(ROOT, template)
    assert errors == [] and limits is not None, f"templates/{template}/limits.yaml: {errors}"
    assert limits.rules.get("dtypes"), "a template reads at least one dtype axis"


BAD_LIMITS = """\
dtypes:
  in: {values: [bf16, bf61], why: "x"}
  out: {why: "no values"}
parms: {}
params:
  p: {values: [1], wy: "typo"}
constants:
  block_threads: {min: many, why: "x"}
vector:
  lanes: {values: [16], why: "x"}
checks:
  - {check: "vec <= nope", why: "x"}
  - {check: "len(x) > 0", why: "x"}
"""


def test_a_malformed_limits_file_is_located_in_itself(project):
    (project / LIMITS).write_text(BAD_LIMITS)
    assert _errors(project) == [
        f"{LIMITS}:2 (dtypes.in.values.1): 'bf61' is not a dtype; known: bf16, fp16, fp32, fp8, i32",
        f"{LIMITS}:3 (dtypes.out): a dtype rule lists its dtypes: `values: [bf16, ...]`",
        f"{LIMITS}:4 (parms): unknown section 'parms'; sections: dtypes, params, flags, constants, vector, "
        "routing, archs, checks",
        f'{LIMITS}:6 (params.p): every limit says `why: "..."` (the error a spec gets shows it)',
        f"{LIMITS}:6 (params.p.wy): unknown key 'wy'; allowed here: values, min, max, multiple_of, why",
        f"{LIMITS}:8 (constants.block_threads.min): `min` is a number",
        f"{LIMITS}:10 (vector.lanes): unknown vector kind 'lanes'; use one of: bytes, elements",
        f"{LIMITS}:12 (checks.0.check): 'nope' is not a constant or param listed in this file, nor vec; list it "
        "above first",
        f"{LIMITS}:13 (checks.1.check): 'len(x)' is not allowed; use integer arithmetic (+ - * // %), comparisons, "
        "and/or/not, `a if c else b`, declared names, T.ptr, T.stride0, T.shape[i] and `X is None`; a check uses "
        "integer arithmetic, comparisons and the names listed here",
    ]


def test_a_template_without_limits(project):
    (project / LIMITS).unlink()
    assert _errors(project) == [
        f"{SPEC_FILE}:{_line(project, SPEC_FILE, 'template:')} {K}template): templates/situ_and_mul/ declares no "
        f"limits ({LIMITS} is missing); list the dtypes, params, flags, constants and vector widths the template "
        "supports"
    ]


def test_a_name_the_template_reads_is_missing(project):
    _edit(project, SPEC_FILE, '  has_linear_beta: {select: "linear_beta is not None"}', "")
    _edit(project, SPEC_FILE, "  block_threads: 256", "  warps: 8")
    assert _errors(project) == [
        f"{SPEC_FILE}:{_line(project, SPEC_FILE, 'constants:')} {K}constants): the template reads constant "
        f"'block_threads' ({LIMITS}:{_line(project, LIMITS, 'block_threads:')}); declare it, e.g. "
        "`block_threads: 64`",
        f"{SPEC_FILE}:{_line(project, SPEC_FILE, 'flags:')} {K}flags): the template reads flag 'has_linear_beta' "
        f"({LIMITS}:{_line(project, LIMITS, 'has_linear_beta:')}); declare it under `flags:`",
    ]


def test_a_name_the_template_ignores_is_refused(project):
    _edit(project, SPEC_FILE, "flags:\n", "params:\n  unroll: {values: [1, 2], default: 1}\nflags:\n")
    assert _errors(project) == [
        f"{SPEC_FILE}:{_line(project, SPEC_FILE, 'unroll:')} {K}params.unroll): templates/situ_and_mul/ reads no "
        f"param 'unroll' ({LIMITS} lists: none); the kernel would ignore it and build the same code twice: remove "
        "it, or extend the template and its limits"
    ]


def test_the_vector_kind_of_the_template(project):
    _edit(project, SPEC_FILE, "vector: {bytes: 16}", "vector: {elements: 8}")
    assert _errors(project) == [
        f"{SPEC_FILE}:{_line(project, SPEC_FILE, 'vector:')} {K}vector): templates/situ_and_mul/ sizes its vectors "
        f"in bytes ({LIMITS}:{_line(project, LIMITS, 'bytes:')}); write `vector: {{bytes: 16}}`"
    ]


def test_every_limit_is_a_static_assert_in_the_kernel():
    from k3gen.plan import resolve_all
    from k3gen.render.cpp import static_asserts

    for p in resolve_all(load_specs(ROOT), ROOT):
        header = (ROOT / "generated" / "k3kernels" / "csrc" / p.name / f"{p.name}.cuh").read_text()
        lines = static_asserts(p)
        rules = [r for section in p.limits.rules.values() for r in section.values()]
        for rule in rules:
            absent = rule.section == "dtypes" and rule.optional and rule.name not in p.spec.dtypes.axes
            if rule.section != "flags" and not absent:
                assert f"{p.limits.file}:{rule.line} allows" in header, (p.name, rule.name)
        for check in p.limits.checks:
            assert f"{p.limits.file}:{check.line} requires {check.source}" in header, (p.name, check.source)
        assert all(line in header for line in lines)


def test_compile_refuses_a_spec_that_bypassed_load(tmp_path, capsys):
    """The static_asserts are the second line: a plan rendered without load's check does not compile."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        if os.environ.get("CI"):
            pytest.fail("nvcc not found in CI")
        pytest.skip("nvcc not found")
    from k3gen.runtime.toolchain import compile_flags

    spec = "specs/per_token_group_quant.yaml"
    project = copy_project(tmp_path / "proj", (spec,))
    _edit(project, spec, "values: [32, 64, 128], default: 128", "values: [32, 64, 128, 512], default: 128")
    text = (project / spec).read_text()
    ls, errors = parse_spec(text, spec)  # the model alone: no limits
    assert errors == []
    write_files(render_all([resolve_family(ls, project)], project), project / "generated")
    csrc = project / "generated" / "k3kernels" / "csrc"
    unit = (
        csrc
        / "per_token_group_quant"
        / "per_token_group_quant__in_bf16__group_size_512__scale_format_ue8m0__fuse_silu_and_mul_off.cu"
    )
    done = subprocess.run(
        [nvcc, *compile_flags("sm_90a", ["-DK3_PDL=1"], csrc), "-c", str(unit), "-o", os.devnull],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode != 0
    line = _line(project, "templates/per_token_group_quant/limits.yaml", "group_size:")
    assert f"group_size: templates/per_token_group_quant/limits.yaml:{line} allows 32, 64, 128, 256" in done.stderr
