"""Golden test: the bundled specs, rendered in memory, equal the checked-in generated/ byte for byte."""

from __future__ import annotations

import pytest

from k3gen.plan import resolve_all
from k3gen.render import render_all
from k3gen.ship.tree import MANIFEST, with_manifest
from k3gen.spec.load import load_specs

from support import ROOT

GENERATED = ROOT / "generated"
FIX = "generated/ is stale or was edited by hand; run `k3gen build` and commit generated/"


@pytest.fixture(scope="module")
def rendered() -> dict[str, bytes]:
    files = with_manifest(render_all(resolve_all(load_specs(ROOT), ROOT), ROOT))
    return {path: text.encode() for path, text in files.items()}


def checked_in() -> list[str]:
    return sorted(
        p.relative_to(GENERATED).as_posix()
        for p in GENERATED.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    )


def test_the_same_files(rendered: dict[str, bytes]):
    missing = sorted(set(rendered) - set(checked_in()))
    extra = sorted(set(checked_in()) - set(rendered))
    assert not missing and not extra, f"not on disk: {missing}; not rendered: {extra}; {FIX}"


@pytest.mark.parametrize("path", checked_in())
def test_file_matches(path: str, rendered: dict[str, bytes]):
    assert path in rendered, f"generated/{path} is not rendered from any spec; {FIX}"
    assert (GENERATED / path).read_bytes() == rendered[path], f"generated/{path} differs; {FIX}"


def test_manifest_is_rendered_too(rendered: dict[str, bytes]):
    assert MANIFEST in rendered
