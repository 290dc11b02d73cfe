"""ruff, with the project's config (pyproject.toml), on every Python file of the project: lint and format.

CI runs the same two commands as a step of its own (.ci/run); this test is the local mirror, and
skips where ruff is not installed. The scaffold's oracle (`k3gen new`) is held to the same rules.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from k3gen.ship.scaffold import render_scaffold

from support import ROOT

# What `k3gen test` selects this module by (k3gen.review.impact): the paths it reads besides k3gen/ and tests/.
READS = ("**/*.py", "pyproject.toml")

RUFF = shutil.which("ruff")
PATHS = ["."]  # k3gen/, tests/, generated/, bench/: what CI checks

pytestmark = pytest.mark.skipif(RUFF is None, reason="ruff is not installed (pip install -e '.[test]')")


def ruff(*args: str, cwd=ROOT, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([RUFF, *args], cwd=cwd, input=stdin, capture_output=True, text=True, check=False)


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]], ids=["check", "format"])
def test_ruff_passes(command):
    out = ruff(*command, *PATHS)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]], ids=["check", "format"])
def test_the_scaffolded_oracle_passes_ruff(command):
    text = render_scaffold(ROOT, "my_copy")["k3gen/oracles/my_copy.py"]
    out = ruff(*command, "--stdin-filename", "k3gen/oracles/my_copy.py", "-", stdin=text)
    assert out.returncode == 0, out.stdout + out.stderr
