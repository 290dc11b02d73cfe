"""Fixtures: throwaway copies of the project (see support.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from k3gen.cli import main

from support import ROOT, copy_project

pytest_plugins = ["fake_cc"]  # the fake device compiler fixture of the cache and AOT tests

# Under pytest-xdist (the test command runs a worker per core) each worker compiles with its share
# of the cores ($K3GEN_JOBS, read by the runtime's builds): a worker's ninja never crowds out the
# other worker, so the time bounds (a hostile spec answers within 2 s) hold as in a serial run. The
# compile test, the run's critical path, takes every core at the lowest priority instead.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1 and "K3GEN_JOBS" not in os.environ:
    os.environ["K3GEN_JOBS"] = str(max(1, (os.cpu_count() or 1) // _WORKERS))


@pytest.fixture(autouse=True, scope="session")
def _source_stage(tmp_path_factory):
    """Units compile from staged copies (k3gen.runtime.stage): in a folder of this test run, so the
    tests neither read nor leave anything in /tmp/k3gen-src (a test that needs the default says so)."""
    if "K3GEN_SOURCE_STAGE" not in os.environ:
        os.environ["K3GEN_SOURCE_STAGE"] = str(tmp_path_factory.mktemp("stage"))
    yield


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the project holding the bundled situ_and_mul spec, without generated/."""
    return copy_project(tmp_path / "proj")


@pytest.fixture
def built_project(project: Path, capsys) -> Path:
    """The same, built: generated/ as `k3gen build` leaves it.

    Built here rather than copied from the work tree so these tests hold while other specs are
    being written; that the checked-in generated/ matches a build is test_golden's concern.
    """
    assert main(["--root", str(project), "build"]) == 0
    capsys.readouterr()
    return project


def _family_of(item) -> str | None:
    """The family a test is of: its `family` mark, else its `family` or `cell` parameter."""
    mark = item.get_closest_marker("family")
    if mark is not None:
        return mark.args[0]
    params = getattr(getattr(item, "callspec", None), "params", {})
    if "family" in params:
        return params["family"]
    cell = params.get("cell")
    return cell[0] if isinstance(cell, tuple) else None


def pytest_configure(config):
    config.addinivalue_line("markers", "family(name): the test is of this family (k3gen test runs only those touched)")


def pytest_collection_modifyitems(config, items):
    """`k3gen test` runs a FAMILY_SCOPED module for some families only ($K3GEN_TEST_SCOPE, written by
    k3gen.review.impact): its other families' tests are deselected; a test of no family runs."""
    scope = {}
    for part in filter(None, os.environ.get("K3GEN_TEST_SCOPE", "").split(";")):
        module, _, families = part.partition("=")
        scope[module] = set(families.split(","))
    if not scope:
        return
    keep, drop = [], []
    for item in items:
        families = scope.get(Path(str(item.fspath)).relative_to(ROOT).as_posix())
        family = _family_of(item) if families is not None else None
        (drop if family is not None and family not in families else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
