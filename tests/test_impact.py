"""Test impact (k3gen.review.impact): what `k3gen test` selects for a change, on a small project of
its own (test modules with and without READS), and the one rule that must never break: a change
it cannot attribute selects everything."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from k3gen.review.format import format_markdown
from k3gen.review.impact import Project, select
from k3gen.review.report import DiffReport

from support import ROOT

# What `k3gen test` selects this module by: besides k3gen/ and tests/, the specs (for test_compile's cells).
READS = ("specs/**",)

MODULES = {
    "test_reads_all.py": "",
    "test_compile_like.py": 'READS = ("specs/**", "generated/k3kernels/csrc/**")\nFAMILY_SCOPED = True\n',
    "test_docs_like.py": 'READS = ("README.md", "docs/**")\n',
    "test_template_like.py": 'READS = ("templates/**",)\n',
}
PROJECT = Project(
    families=["alpha", "beta"],
    templates={"alpha_t": ["alpha"], "beta_t": ["beta"]},
    owners={"specs/alpha.yaml": ["alpha"], "specs/beta.yaml": ["beta"], "specs/tuning/alpha.h100.yaml": ["alpha"]},
)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    for name, text in MODULES.items():
        (tmp_path / "tests").mkdir(exist_ok=True)
        (tmp_path / "tests" / name).write_text(f'"""A test module."""\n{text}')
    for family in PROJECT.families:
        (tmp_path / "generated/tests").mkdir(parents=True, exist_ok=True)
        (tmp_path / f"generated/tests/test_{family}.py").write_text("")
    return tmp_path


def _selected(impact) -> dict[str, tuple | None]:
    return {s.path: s.families for s in impact.selected}


def test_a_family_edit_selects_its_tests_and_the_readers_of_what_changed(root):
    changed = ["specs/alpha.yaml", "generated/k3kernels/csrc/alpha/alpha__x.cu", "generated/MANIFEST"]
    impact = select(root, changed, ["alpha"], PROJECT)
    assert impact.everything is None and impact.families == ["alpha"]
    assert _selected(impact) == {
        "generated/tests/test_alpha.py": None,
        "tests/test_reads_all.py": None,  # no READS: it reads everything
        "tests/test_compile_like.py": ("alpha",),  # only alpha's cells
    }
    unaffected = dict(impact.unaffected)
    assert set(unaffected) == {"generated/tests/test_beta.py", "tests/test_docs_like.py", "tests/test_template_like.py"}
    assert "none of it changed" in unaffected["tests/test_docs_like.py"]
    assert impact.scope() == "tests/test_compile_like.py=alpha"


def test_every_devices_table_is_its_familys(root):
    """A table of any device belongs to its family, one neither plan names (a new or unreadable one) too."""
    for table in ("specs/tuning/alpha.h100.yaml", "specs/tuning/alpha.h200.yaml", "specs/tuning/beta.mi300x.yaml"):
        family = table.split("/")[-1].split(".")[0]
        impact = select(root, [table], [], PROJECT)
        assert impact.everything is None and impact.families == [family], table
        assert f"generated/tests/test_{family}.py" in _selected(impact), table


def test_a_template_edit_touches_the_families_rendered_from_it(root):
    impact = select(root, ["templates/beta_t/kernel.cuh.j2"], [], PROJECT)
    assert impact.families == ["beta"]
    assert "tests/test_template_like.py" in _selected(impact) and "generated/tests/test_beta.py" in _selected(impact)
    shared = select(root, ["templates/common/variant.cu.j2"], [], PROJECT)
    assert shared.families == ["alpha", "beta"]


def test_a_shared_generated_file_touches_every_family_and_scopes_nothing(root):
    impact = select(root, ["generated/k3kernels/csrc/k3_backend.h"], [], PROJECT)
    assert impact.families == ["alpha", "beta"]
    assert _selected(impact)["tests/test_compile_like.py"] is None  # every cell compiles


def test_a_docs_edit_runs_only_what_reads_docs(root):
    impact = select(root, ["docs/cli.md"], [], PROJECT)
    assert set(_selected(impact)) == {"tests/test_docs_like.py", "tests/test_reads_all.py"}


@pytest.mark.parametrize(
    "path, why",
    [
        ("k3gen/runtime/build.py", "is the generator or the test harness"),
        ("tests/support.py", "is the generator or the test harness"),
        ("pyproject.toml", "is the generator or the test harness"),
        ("LICENSE-extra", "no test declares that it reads LICENSE-extra"),
    ],
)
def test_what_it_cannot_attribute_selects_everything(root, path, why):
    impact = select(root, [path], [], PROJECT)
    assert why in impact.everything
    assert not impact.unaffected and len(impact.selected) == len(MODULES) + len(PROJECT.families)
    assert impact.scope() == ""


def test_a_changed_test_module_selects_itself(root):
    impact = select(root, ["tests/test_docs_like.py"], [], PROJECT)
    assert impact.everything is None and "tests/test_docs_like.py" in _selected(impact)


def test_the_review_comment_lists_what_ran_and_what_did_not(root):
    impact = select(root, ["specs/alpha.yaml"], ["alpha"], PROJECT)
    report = DiffReport("main (abc)", "work tree", 2, [], [], [], [], [], [], tests=impact)
    text = format_markdown(report)
    assert "**Tests this change touches** (`k3gen test`): 3 files run, 3 unaffected." in text
    assert "| `tests/test_compile_like.py` | reads specs/alpha.yaml; only the tests of alpha |" in text
    assert "- `generated/tests/test_beta.py`: beta: no spec, table, template or generated file of it changed" in text


def test_the_scope_deselects_other_families_tests(tmp_path):
    """tests/conftest.py reads K3GEN_TEST_SCOPE: a scoped module runs its touched families' tests and
    those of no family; here on tests/test_compile.py's own cells (collected only, nothing compiled)."""
    families = sorted({c.split("-")[0] for c in _cells()})
    env = dict(os.environ, K3GEN_TEST_SCOPE=f"tests/test_compile.py={families[0]}")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q", "tests/test_compile.py"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    ids = [line for line in done.stdout.splitlines() if "::" in line]
    assert ids and all(f"[{families[0]}-" in i or "[" not in i for i in ids), done.stdout[-2000:]
    assert "deselected" in done.stdout.splitlines()[-1], done.stdout[-500:]


def _cells() -> list[str]:
    from k3gen.plan import resolve_all
    from k3gen.spec.load import load_specs

    return [f"{p.name}-{b}-{a}" for p in resolve_all(load_specs(ROOT), ROOT) for b in p.backends for a in p.archs(b)]
