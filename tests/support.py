"""The real project root and throwaway copies of the project, for tests that build or validate."""
from __future__ import annotations

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEC_FILE = "specs/situ_and_mul.yaml"
# A frozen copy of that spec: the error corpus edits it by text and pins line numbers, so tuning the
# bundled spec (a vector width, a comment) must not move them. The templates and oracle it names
# are the project's own.
FROZEN_SPEC = Path(__file__).resolve().parent / "data" / "situ_and_mul.yaml"


def copy_project(dest: Path, specs: tuple[str, ...] = (SPEC_FILE,)) -> Path:
    """A project k3gen can run on: the given specs, templates/ and the oracles (found by path, never
    imported); the k3gen package itself is imported from ROOT.

    Only the named specs are copied, so tests of the generator's mechanics do not depend on every
    spec in the work tree being finished; tests/test_golden.py covers the whole project.
    """
    (dest / "specs").mkdir(parents=True)
    for spec in specs:
        shutil.copy(FROZEN_SPEC if spec == SPEC_FILE else ROOT / spec, dest / spec)
    shutil.copytree(ROOT / "templates", dest / "templates")
    shutil.copytree(ROOT / "k3gen" / "oracles", dest / "k3gen" / "oracles",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return dest
