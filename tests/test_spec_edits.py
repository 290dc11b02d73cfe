"""Every legal spec edit yields correct kernels or a located error (the catalog: tests/spec_edits.py).

On a copy of the frozen project per edit: a refused edit fails at load with exactly its pinned
errors (file:line and message); a valid one builds, its family's generated tests pass on the CPU
(fake-tensor outputs against the oracle, CPU refusals; GPU tests skip here), and the units it adds
compile with nvcc (`-k compile`; the GPU half is tests/spec_edits_gpu.py). The edits of the bundled
specs themselves, and the tests that read them: tests/test_documented_edits.py.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from k3gen.cli import main
from k3gen.spec.errors import SpecErrors
from k3gen.spec.load import load_specs

from spec_edits import EDITS, expected_errors, make_copy
from support import ROOT

# What `k3gen test` selects this module by (k3gen.review.impact): besides k3gen/ and tests/ (the
# frozen specs of tests/data its copies start from), the templates.
READS = ("templates/**",)

REFUSED = [e for e in EDITS if not e.valid]
VALID = [e for e in EDITS if e.valid]


def _ids(edits):
    return [e.name for e in edits]


def test_the_catalog():
    names = _ids(EDITS)
    assert len(names) == len(set(names)) and all(re.fullmatch(r"[a-z0-9_]+", n) for n in names)
    assert all(e.units or e.tests or e.family.startswith("situ") for e in VALID)


@pytest.mark.parametrize("edit", REFUSED, ids=_ids(REFUSED))
def test_an_edit_the_kernels_cannot_do_is_a_located_error(edit, tmp_path):
    project = make_copy(edit, tmp_path / "proj")
    with pytest.raises(SpecErrors) as info:
        load_specs(project)
    assert [str(e) for e in info.value.errors] == expected_errors(edit, project)


def build(project, capsys) -> None:
    assert main(["--root", str(project), "build"]) == 0
    capsys.readouterr()


def run_generated_tests(project, files: list[str], timeout: int = 600) -> str:
    """pytest on the copy's generated tests in a fresh interpreter: the copy's own k3kernels package
    (its custom ops would collide with the work tree's in this process); k3gen from the work tree."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(project / "generated"), str(ROOT)]))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *files],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-6000:]
    return out


@pytest.mark.parametrize("edit", VALID, ids=_ids(VALID))
def test_a_valid_edit_builds_and_its_cpu_tests_pass(edit, tmp_path, capsys):
    project = make_copy(edit, tmp_path / "proj")
    build(project, capsys)
    out = run_generated_tests(project, edit.test_files())
    passed = re.search(r"(\d+) passed", out)
    assert passed and int(passed.group(1)) > 0, out[-3000:]
    assert "failed" not in out and "error" not in out.lower().replace("errors=", ""), out[-3000:]


@pytest.mark.parametrize("edit", [e for e in VALID if e.units], ids=_ids([e for e in VALID if e.units]))
def test_compile_the_units_a_valid_edit_adds(edit, tmp_path, capsys):
    """nvcc -c, with the runtime's flags, of the units the edit adds or changes (for its arch)."""
    from k3gen.runtime.toolchain import compile_flags

    nvcc = shutil.which("nvcc")
    if nvcc is None:
        if os.environ.get("CI"):
            pytest.fail("nvcc not found in CI")
        pytest.skip("nvcc not found")
    project = make_copy(edit, tmp_path / "proj")
    build(project, capsys)
    csrc = project / "generated" / "k3kernels" / "csrc"
    for unit in edit.units:
        cmd = [
            nvcc,
            *compile_flags(edit.arch, ["-DK3_PDL=1"], csrc),
            "-c",
            str(csrc / edit.family / unit),
            "-o",
            os.devnull,
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{unit} [{edit.arch}]:\n{done.stdout}{done.stderr}"


def test_the_gpu_half_prepares_copies_that_run_with_torch_alone(tmp_path):
    """tests/spec_edits_gpu.py here, then the copied runner with k3gen's build dependencies made
    unimportable: the prepared copies need torch and pytest only (GPU tests skip on this machine)."""
    from spec_edits_gpu import prepare

    out = tmp_path / "spec_edits"
    assert prepare(out, ["situ_drop_sm_100a"]) == ["situ_drop_sm_100a"]
    blocked = tmp_path / "blocked"
    for name in ("pydantic", "jinja2", "yaml"):
        (blocked / name).mkdir(parents=True)
        (blocked / name / "__init__.py").write_text(f"raise ImportError('{name} is not on the GPU machine')\n")
    env = dict(os.environ, PYTHONPATH=str(blocked))
    done = subprocess.run(
        [sys.executable, str(out / "run.py"), "--json", str(tmp_path / "r.json")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    line = done.stdout.splitlines()[0]
    assert re.match(r"PASS situ_drop_sm_100a +situ_and_mul +passed=\d+ failed=0 errors=0 skipped=\d+ rc=0", line), line
    assert done.stdout.splitlines()[1].startswith("1/1 edits pass: passed=")


# --- the hand-written tests follow the bundled specs as they grow ----------------------------------------
