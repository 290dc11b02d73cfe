"""The README states only figures that committed files hold (issue 25): its figures sections are
rendered from specs/compile_costs.json and bench/results/*.json, and this test fails when they disagree."""

from __future__ import annotations

import json
import shutil

from k3gen.review import readme

from support import ROOT


def test_the_readme_figures_are_the_committed_measurements():
    text = (ROOT / readme.README).read_text(encoding="utf-8")
    assert readme.SECTION.search(text), "the README has no figures section"
    assert readme.render(ROOT, text) == text, "README figures are stale: run `python -m k3gen.review.readme`"


def test_a_figure_that_disagrees_with_its_file_fails_the_check(tmp_path, capsys):
    for rel in (readme.README, "specs/compile_costs.json"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    shutil.copytree(ROOT / readme.RESULTS, tmp_path / readme.RESULTS)
    for rel in ("specs", "templates", "k3gen/oracles"):  # the routers table is rendered from the specs
        shutil.copytree(ROOT / rel, tmp_path / rel, ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True)
    assert readme.main(["--root", str(tmp_path), "--check"]) == 0
    table = json.loads((tmp_path / "specs/compile_costs.json").read_text())
    arch = next(iter(table["units"]))
    unit = next(iter(table["units"][arch]))
    table["units"][arch][unit]["seconds"] += 1000.0
    (tmp_path / "specs/compile_costs.json").write_text(json.dumps(table))
    assert readme.main(["--root", str(tmp_path), "--check"]) == 1
    assert "README.md: figures are stale; run `python -m k3gen.review.readme`" in capsys.readouterr().err
    assert readme.main(["--root", str(tmp_path)]) == 0
    assert readme.main(["--root", str(tmp_path), "--check"]) == 0
