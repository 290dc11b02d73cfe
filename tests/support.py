"""The real project root and throwaway copies of the project, for tests that build or validate."""

from __future__ import annotations

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"
SPEC_FILE = "specs/situ_and_mul.yaml"
# Frozen copies of the bundled specs (tests/data/README.md): tests edit them by text and pin line
# numbers and messages, so tuning or extending a bundled spec (a vector width, a dtype, a runner)
# must not move them. The templates, limits and oracles they name are the project's own.
FROZEN_SPEC = DATA / "situ_and_mul.yaml"
FROZEN_SPECS = sorted(f"specs/{p.name}" for p in DATA.glob("*.yaml"))


def copy_project(dest: Path, specs: tuple[str, ...] = (SPEC_FILE,)) -> Path:
    """A project k3gen can run on: the frozen copies of the given specs, templates/ and the oracles
    (found by path, never imported); the k3gen package itself is imported from ROOT.

    Only the named specs are copied, so tests of the generator's mechanics do not depend on every
    spec in the work tree being finished; tests/test_golden.py covers the whole project.
    """
    (dest / "specs").mkdir(parents=True)
    for spec in specs:
        frozen = DATA / Path(spec).name
        shutil.copy(frozen if frozen.is_file() else ROOT / spec, dest / spec)
    shutil.copytree(ROOT / "templates", dest / "templates")
    shutil.copytree(
        ROOT / "k3gen" / "oracles", dest / "k3gen" / "oracles", ignore=shutil.ignore_patterns("__pycache__")
    )
    return dest


def copy_frozen_project(dest: Path) -> Path:
    """A copy holding every frozen spec: the whole MoE front, runner table included."""
    return copy_project(dest, tuple(FROZEN_SPECS))
