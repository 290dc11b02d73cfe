"""Total specs (k3gen/spec/meaning/totality.py): maps over an axis cover every generated value, and every test
shape the generated tests call passes the gates of every generated variant. Edits of the frozen
fixtures (tests/data), errors pinned to the letter."""

from __future__ import annotations

import pytest

from k3gen.spec.errors import SpecErrors
from k3gen.spec.load import load_specs

from support import SPEC_FILE, copy_project

# What `k3gen test` selects this module by (k3gen.review.impact): the paths it reads besides k3gen/ and tests/
# (its projects are copies of tests/data's frozen specs and of templates/).
READS = ("templates/**",)

QUANT = "specs/per_token_group_quant.yaml"
K = '(kernel "situ_and_mul", '
Q = '(kernel "per_token_group_quant", '


@pytest.fixture
def project(tmp_path):
    return copy_project(tmp_path / "proj", (SPEC_FILE, QUANT))


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


def test_a_default_map_missing_a_generated_value(project):
    _edit(project, SPEC_FILE, "fp32: bf16}}", "}}")
    assert _errors(project) == [
        f"{SPEC_FILE}:{_line(project, SPEC_FILE, 'map: {')} {K}dtypes.defaults.out.map): no default out for "
        "in=fp32, which is generated (in=fp32, out=bf16, in=fp32, out=fp32); a call that omits out would be "
        "refused: add `fp32: DTYPE`, one of bf16, fp32 to the map"
    ]


def test_an_override_no_generated_cell_matches(project):
    _edit(
        project,
        SPEC_FILE,
        "vector: {bytes: 16}",
        'vector:\n  bytes: 16\n  overrides:\n    - {when: {in: fp16, out: bf16}, bytes: 32, why: "x"}',
    )
    assert _errors(project) == [
        f"{SPEC_FILE}:{_line(project, SPEC_FILE, '{when: {in: fp16')} {K}vector.overrides.0.when): the override for "
        "in=fp16, out=bf16 matches no generated cell; remove it or fix `when`"
    ]


def test_a_dim_without_test_sizes(project):
    _edit(project, SPEC_FILE, "dims: {M: [1, 7, 128, 4096], D: [256, 2048, 3584]}", "dims: {M: [1, 7, 128, 4096]}")
    assert _errors(project) == [
        f"{SPEC_FILE}:{_line(project, SPEC_FILE, 'dims: {M: [1, 7')} {K}tests.dims): no test sizes for dim 'D'; the "
        "generated tests build every input from these: add `D: [...]`"
    ]


def test_a_dim_with_an_empty_list(project):
    _edit(project, SPEC_FILE, "D: [256, 2048, 3584]", "D: []")
    assert _errors(project) == [
        f"{SPEC_FILE}:{_line(project, SPEC_FILE, 'D: []')} {K}tests.dims.D): dim 'D' has no test sizes; list at "
        "least one"
    ]


def test_test_sizes_a_gate_refuses_for_every_variant(project):
    """D = 258 is not a multiple of any vector width: every variant's gate 0 refuses it."""
    _edit(project, SPEC_FILE, "D: [256, 2048, 3584]", "D: [256, 258]")
    assert _errors(project) == [
        f"{SPEC_FILE}:{_line(project, SPEC_FILE, 'D: [256, 258]')} {K}tests.dims.D): the generated tests would call "
        "shapes gate 0 `D % vec == 0` refuses: D = 258 for 4 generated variants (in=bf16, out=bf16; in=fp16, "
        "out=fp16; in=fp32, out=bf16 and 1 more); use test sizes every generated variant accepts"
    ]


def test_test_sizes_a_gate_refuses_for_some_variants(project):
    """D = 4 passes the fp32-input variants (vec 4: fp32 is the widest dtype) but no half variant (vec 8)."""
    _edit(project, SPEC_FILE, "D: [256, 2048, 3584]", "D: [4, 256]")
    assert _errors(project) == [
        f"{SPEC_FILE}:{_line(project, SPEC_FILE, 'D: [4, 256]')} {K}tests.dims.D): the generated tests would call "
        "shapes gate 0 `D % vec == 0` refuses: D = 4 for 2 generated variants (in=bf16, out=bf16; in=fp16, "
        "out=fp16); use test sizes every generated variant accepts"
    ]


def test_gates_on_pointers_and_strides_pass(project):
    """`x.stride0 % vec == 0` and the pointer gates cannot be decided from dims: the generated tests'
    dense and strided layouts meet them, so they never count as refusing."""
    assert {ls.spec.kernel for ls in load_specs(project)} == {"situ_and_mul", "per_token_group_quant"}


def test_a_gate_over_params_and_dims(project):
    _edit(project, QUANT, "values: [32, 64, 128], default: 128", "values: [32, 64, 128, 256], default: 128")
    _edit(project, QUANT, "K: [128, 3584, 7168]", "K: [128, 256, 3584, 7168]")
    errors = _errors(project)
    assert errors == [
        f"{QUANT}:{_line(project, QUANT, 'K: [128, 256')} {Q}tests.dims.K): the generated tests would call shapes "
        "gate 0 `K % group_size == 0` refuses: K = 128 for 9 generated variants (in=bf16, group_size=256, "
        "scale_format=fp32_row; in=bf16, group_size=256, scale_format=fp32_col; in=bf16, group_size=256, "
        "scale_format=ue8m0 and 6 more); use test sizes every generated variant accepts"
    ]


def test_a_gate_with_an_if_is_decided_like_any_other(project):
    """The one walker decides `a if c else b` too: this gate refuses the test sizes D = 256 and 3584
    (not multiples of 1024), which the evaluator before the one walker could not decide and let load."""
    _edit(
        project,
        SPEC_FILE,
        '  - check: "D % vec == 0"\n',
        '  - check: "(D if D > 0 else 1) % 1024 == 0"\n    reason: "whole pages"\n  - check: "D % vec == 0"\n',
    )
    assert _errors(project) == [
        f"{SPEC_FILE}:{_line(project, SPEC_FILE, 'D: [256, 2048, 3584]')} {K}tests.dims.D): the generated tests "
        "would call shapes gate 0 `(D if D > 0 else 1) % 1024 == 0` refuses: D = 256; D = 3584 for 4 "
        "generated variants (in=bf16, out=bf16; in=fp16, out=fp16; in=fp32, out=bf16 and 1 more); use test sizes "
        "every generated variant accepts"
    ]
