"""The prose states only figures that committed files hold: the figures sections of README.md and
docs/*.md, and bench/results/README.md, are rendered from specs/compile_costs.json, the specs and
bench/results/<device>/*.json by k3gen.review.figures; these tests fail when they disagree."""

from __future__ import annotations

import json
import shutil

import pytest

from k3gen.review import figures

from support import ROOT

# What `k3gen test` selects this module by (k3gen.review.impact): the paths it reads besides k3gen/ and tests/.
READS = ("README.md", "docs/**", "bench/**", "specs/**")


def test_every_figure_is_the_committed_measurement():
    texts = {rel: (ROOT / rel).read_text(encoding="utf-8") for rel in figures.figure_files(ROOT)}
    assert figures.SECTION.search(texts[figures.README]), "the README has no figures section"
    for rel, text in texts.items():
        assert figures.render(ROOT, text, rel) == text, f"{rel}: stale figures; run `python bench/summary.py`"


def test_the_results_summary_is_rendered_from_the_results():
    summary = (ROOT / figures.SUMMARY).read_text(encoding="utf-8")
    assert summary == figures.summary_text(ROOT), f"{figures.SUMMARY} is stale; run `python bench/summary.py`"
    for device in figures.devices(ROOT):
        assert f"\n## {device}\n" in summary
        for path in (ROOT / figures.RESULTS / device).glob("*.json"):
            assert f"\n### {path.stem}\n" in summary, path


def test_results_live_in_a_folder_per_device():
    base = ROOT / figures.RESULTS
    assert figures.devices(ROOT), "no device folder under bench/results"
    assert sorted(p.name for p in base.iterdir() if p.is_file()) == ["README.md"], "loose files in bench/results"
    for device in figures.devices(ROOT):
        for path in (base / device).glob("*.json"):
            meta = json.loads(path.read_text())["meta"]
            assert meta.get("device"), path  # every result names the GPU it ran on


def test_a_figure_that_disagrees_with_its_file_fails_the_check(tmp_path, capsys):
    for rel in (*figures.figure_files(ROOT), figures.SUMMARY, "specs/compile_costs.json"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    for rel in ("specs", "templates", "k3gen/oracles", figures.RESULTS):  # tables read the specs and results
        shutil.copytree(ROOT / rel, tmp_path / rel, ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True)
    assert figures.main(["--root", str(tmp_path), "--check"]) == 0
    table = json.loads((tmp_path / "specs/compile_costs.json").read_text())
    arch = next(iter(table["units"]))
    unit = next(iter(table["units"][arch]))
    table["units"][arch][unit]["seconds"] += 1000.0
    (tmp_path / "specs/compile_costs.json").write_text(json.dumps(table))
    device = figures.devices(tmp_path)[0]
    result = tmp_path / figures.RESULTS / device / "situ_and_mul.json"
    data = json.loads(result.read_text())
    data["rows"][0]["us"] += 1.0
    result.write_text(json.dumps(data))
    assert figures.main(["--root", str(tmp_path), "--check"]) == 1
    err = capsys.readouterr().err
    assert f"{figures.SUMMARY}: figures are stale; run `python -m k3gen.review.figures`" in err
    assert any(f"{rel}: figures are stale" in err for rel in figures.figure_files(tmp_path))
    assert figures.main(["--root", str(tmp_path)]) == 0
    assert figures.main(["--root", str(tmp_path), "--check"]) == 0


def test_an_unknown_section_is_named():
    with pytest.raises(ValueError, match="no figures section 'bench_situ_and_mul'"):
        figures.render(ROOT, "<!-- k3gen:figures bench_situ_and_mul -->\n<!-- /k3gen:figures -->", "docs/x.md")


def test_the_spec_reference_lists_every_field_of_the_schema():
    from k3gen.spec.model import KernelSpec

    schema = KernelSpec.model_json_schema(by_alias=True)
    page = figures.spec_fields_section(ROOT)
    for title, node in [("KernelSpec", schema), *schema["$defs"].items()]:
        assert f"\n### {title}\n" in "\n" + page, title
        for field in node.get("properties", {}):
            assert f"| `{field}` |" in page, (title, field)
