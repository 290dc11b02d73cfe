"""Oracles follow the spec's vocabulary: dtypes from k3gen.runtime.dtypes (k3gen/oracles/vocabulary.py), and
what each can check declared as SUPPORTED and held against the generated cells at load
(k3gen/spec/meaning/oracle_support.py), reading the oracle's AST without importing it."""

from __future__ import annotations

import ast

import pytest
import torch

from k3gen.oracles import vocabulary
from k3gen.runtime.dtypes import DTYPES
from k3gen.spec.errors import SpecErrors
from k3gen.spec.load import load_specs
from k3gen.spec.meaning.oracle_support import read_supported

from support import ROOT, SPEC_FILE

ORACLE = "k3gen/oracles/situ_and_mul.py"
K = '(kernel "situ_and_mul", '


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


ORACLES = sorted(
    p.name for p in (ROOT / "k3gen" / "oracles").glob("*.py") if p.stem not in ("__init__", "vocabulary", "testing")
)


@pytest.mark.parametrize("name", ORACLES)
def test_every_oracle_declares_what_it_checks(name):
    supported, _, problem = read_supported(ast.parse((ROOT / "k3gen" / "oracles" / name).read_text()))
    assert problem is None and supported["dtypes"], name


def test_the_vocabulary_knows_every_dtype():
    for name, d in DTYPES.items():
        assert vocabulary.torch_dtype(name) == getattr(torch, d.torch)
    assert vocabulary.FLOAT_DTYPES == ["bf16", "fp16", "fp32", "fp8"]


def test_defaults_and_tolerances_come_from_the_spec_and_the_table():
    variant = {"in": "fp8", "out": "bf16", "defaults": {"out": {"from": "in", "map": {"fp8": "bf16"}}}}
    assert vocabulary.default_dtype(variant, "out") == "bf16"
    assert vocabulary.tolerance("bf16") == {"rtol": 2.0**-7, "atol": torch.finfo(torch.bfloat16).tiny * 2.0**-7}
    assert vocabulary.tolerance("fp8") == {"rtol": 2.0**-3, "atol": 2.0**-9}  # one e4m3 ulp; its subnormal step
    assert vocabulary.tolerance("fp32", math_rtol=2e-5, math_atol=1e-5) == {"rtol": 2e-5, "atol": 1e-5}


def test_an_oracle_without_a_declaration(project):
    _edit(project, ORACLE, 'SUPPORTED = {"dtypes": {"in": "float", "out": "float"}}\n', "")
    assert _errors(project) == [
        f"{SPEC_FILE}:{_line(project, SPEC_FILE, 'oracle:')} {K}oracle): oracle k3gen.oracles.situ_and_mul "
        f'({ORACLE}:1) declares no SUPPORTED; add `SUPPORTED = {{"dtypes": {{AXIS: "float"}}}}` saying what it '
        "can check"
    ]


def test_a_declaration_that_is_not_a_literal(project):
    _edit(
        project,
        ORACLE,
        'SUPPORTED = {"dtypes": {"in": "float", "out": "float"}}',
        'SUPPORTED = {"dtypes": {"in": FLOATS, "out": "float"}}',
    )
    assert _errors(project) == [
        f"{SPEC_FILE}:{_line(project, SPEC_FILE, 'oracle:')} {K}oracle): oracle k3gen.oracles.situ_and_mul "
        f"({ORACLE}:{_line(project, ORACLE, 'SUPPORTED = ')}) SUPPORTED is not a literal; write it as a dict of "
        "lists and strings"
    ]


def test_a_generated_cell_the_oracle_cannot_check(project):
    """fp8 outputs generated; the oracle (narrowed here) lists only three dtypes for `out`."""
    _edit(project, ORACLE, '"out": "float"', '"out": ["bf16", "fp16", "fp32"]')
    _edit(project, SPEC_FILE, "out: [bf16, fp16, fp32]", "out: [bf16, fp16, fp32, fp8]")
    _edit(
        project,
        SPEC_FILE,
        "  defaults:",
        '    - {in: bf16, out: fp8, reason: "a"}\n    - {in: fp16, out: fp8, reason: "b"}\n  defaults:',
    )
    assert _errors(project) == [
        f"{SPEC_FILE}:{_line(project, SPEC_FILE, 'out: [bf16, fp16, fp32, fp8]')} {K}dtypes.axes.out.3): oracle "
        f"k3gen.oracles.situ_and_mul cannot check out=fp8 ({ORACLE}:{_line(project, ORACLE, 'SUPPORTED = ')} "
        "supports bf16, fp16, fp32); exclude the cells, or teach the oracle the dtype"
    ]


def test_a_dtype_only_on_excluded_cells_needs_no_oracle(project):
    _edit(project, ORACLE, '"out": "float"', '"out": ["bf16", "fp16", "fp32"]')
    _edit(project, SPEC_FILE, "out: [bf16, fp16, fp32]", "out: [bf16, fp16, fp32, fp8]")
    _edit(
        project,
        SPEC_FILE,
        "  defaults:",
        '    - {in: bf16, out: fp8, reason: "a"}\n'
        '    - {in: fp16, out: fp8, reason: "b"}\n'
        '    - {in: fp32, out: fp8, reason: "c"}\n  defaults:',
    )
    assert [ls.spec.kernel for ls in load_specs(project)] == ["situ_and_mul"]


def test_an_axis_the_oracle_does_not_know(project):
    _edit(project, ORACLE, '"out": "float"}', '"output": "float"}')
    assert _errors(project) == [
        f"{SPEC_FILE}:{_line(project, SPEC_FILE, 'out: [bf16, fp16, fp32]')} {K}dtypes.axes.out): oracle "
        f"k3gen.oracles.situ_and_mul knows no dtype axis 'out' ({ORACLE}:{_line(project, ORACLE, 'SUPPORTED = ')} "
        "declares in, output); teach the oracle the axis first"
    ]
