"""Generated reference docs (generated/docs/): what each page must state, computed from the plan."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from k3gen.plan import resolve_all
from k3gen.render import render_all, support
from k3gen.render.docs import matrix_table
from k3gen.spec.load import load_specs

from support import ROOT


@pytest.fixture(scope="module")
def plans():
    return {p.name: p for p in resolve_all(load_specs(ROOT), ROOT)}


@pytest.fixture(scope="module")
def docs(plans) -> dict[str, str]:
    return {path: text for path, text in render_all(list(plans.values()), ROOT).items() if path.startswith("docs/")}


def test_every_excluded_cell_is_in_its_row_and_column_with_its_reason(plans, docs):
    p, page = plans["situ_and_mul"], docs["docs/situ_and_mul.md"]
    rows_axis, cols_axis = p.spec.dtypes.axes
    columns = p.spec.dtypes.axes[cols_axis]
    assert p.excluded, "situ_and_mul excludes cells; this test needs some"
    for cell, reason in p.excluded:
        row = next(line for line in page.splitlines() if line.startswith(f"| **{cell[rows_axis]}** |"))
        cells = [c.strip() for c in row.strip("|").split(" | ")][1:]
        assert cells[columns.index(cell[cols_axis])] == f"excluded: {reason}"
    grid = [line.strip("|").split(" | ") for line in page.splitlines() if line.startswith("| **")]
    assert sum(c.strip() == "generated" for row in grid for c in row) == len(p.spec.dtypes.generated_cells())


def test_gates_in_words_with_the_test_that_rejects_them(plans, docs):
    p, page = plans["situ_and_mul"], docs["docs/situ_and_mul.md"]
    tested = {i: name for name, i in p.spec.tests.rejects.items()}
    for i, (gate, reason) in enumerate(p.gates):
        line = f"{i}. Requires `{gate.source}`: {reason}."
        assert line in page
        if i in tested:
            assert f"{line} Rejection tested by `reject_{tested[i]}`." in page


def test_arch_states(plans, docs):
    p, page = plans["situ_and_mul"], docs["docs/situ_and_mul.md"]
    for backend in p.backends:
        for arch in p.archs(backend):
            state = support.arch_state(backend, arch)
            assert any(
                line.startswith(f"| {arch} | {backend} |") and f"| **{state}** |" in line for line in page.splitlines()
            ), arch
    assert f"| sm_90a | cuda | yes | yes ({support.RUN_ON_GPU['sm_90a']}) | **run on a GPU** |" in page
    if "gfx950" in p.archs("hip"):  # device code only: CI cannot link HIP
        assert "| gfx950 | hip | device code only (clang++-22) | no | **compiled in CI** |" in page
    for state in (support.RUN, support.COMPILED, support.DECLARED):
        assert f"- **{state}**: " in page


def test_states_follow_ci_and_the_gpu_run():
    assert support.arch_state("cuda", "sm_90a") == support.RUN
    assert support.arch_state("cuda", "sm_100a") == support.COMPILED  # nvcc compiles every CUDA arch
    assert support.arch_state("hip", "gfx942") == support.COMPILED
    assert support.arch_state("hip", "gfx950") == support.COMPILED  # with clang-22 (tests/test_compile.py)
    assert support.arch_state("hip", "gfx90a") == support.DECLARED  # no arch of CI's list


def test_the_rest_of_the_page(plans, docs):
    p, page = plans["situ_and_mul"], docs["docs/situ_and_mul.md"]
    for heading in (
        "## Dtype matrix",
        "### Derived defaults",
        "## Params and flags",
        "## Vector width",
        "## Arch support",
        "## Gates",
        "## Constants",
        "## Tie order",
        "## Specializations",
    ):
        assert f"\n{heading}\n" in page
    assert f"= **{len(p.specializations)} specializations**" in page
    for v in p.variants:
        assert f"| {v.label.replace(', fast_math', '')} | {v.vec} |" in page
    for name, value in p.spec.constants.items():
        assert f"| `{name}` | {value!r} |" in page
    for flag in p.spec.flags:
        assert f"| `{flag}` |" in page


def test_the_index_lists_every_family(plans, docs):
    index = docs["docs/README.md"]
    assert set(docs) == {"docs/README.md", *(f"docs/{name}.md" for name in plans)}
    for name, p in plans.items():
        assert f"| [{name}]({name}.md) |" in index
        assert f"{len(p.specializations)} ({len(p.variants)} per arch)" in index


def test_deterministic_and_relative(plans, docs):
    again = {k: v for k, v in render_all(list(plans.values()), ROOT).items() if k.startswith("docs/")}
    assert again == docs
    for path, text in docs.items():
        assert str(ROOT) not in text, path
        assert "\n\n\n" not in text and text.endswith("\n") and not text.endswith("\n\n"), path


def test_matrix_shapes():
    """One axis: a row per dtype; two: a grid; three or more: one row per cell."""

    def fake(axes, excluded=()):
        return SimpleNamespace(spec=SimpleNamespace(dtypes=SimpleNamespace(axes=axes)), excluded=list(excluded))

    one = matrix_table(fake({"in": ["bf16", "fp32"]}, [({"in": "fp32"}, "too wide")]))
    assert one.header == ["in", "cell"] and one.rows == [["bf16", "generated"], ["fp32", "excluded: too wide"]]
    two = matrix_table(fake({"a": ["bf16"], "b": ["bf16", "fp32"]}, [({"a": "bf16", "b": "fp32"}, "x | y")]))
    assert two.header == ["a \\ b", "bf16", "fp32"] and two.rows == [["**bf16**", "generated", "excluded: x \\| y"]]
    three = matrix_table(fake({"a": ["bf16"], "b": ["bf16"], "c": ["bf16", "fp32"]}))
    assert three.header == ["a", "b", "c", "cell"]
    assert three.rows == [["bf16", "bf16", "bf16", "generated"], ["bf16", "bf16", "fp32", "generated"]]
