"""`k3gen diff`: a spec change in a throwaway git repo, reported in text, Markdown and JSON.

The change adds a dtype to situ_and_mul's `in` axis. The matrix is total, so the edit also says
what becomes of each new cell: fp8 → bf16 is generated (and is fp8's default output), fp8 → fp16
and fp8 → fp32 are excluded with reasons.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from k3gen.cli import main
from k3gen.plan import resolve_all
from k3gen.render import render_all
from k3gen.review import diff_rev
from k3gen.review.compare import compare
from k3gen.review.format import format_json, format_markdown, format_text
from k3gen.spec.load import load_specs

from support import ROOT, SPEC_FILE, copy_project

NEW_CELL = {"in": "fp8", "out": "bf16"}
ARCHS = ["sm_90a", "sm_100a", "gfx942", "gfx950"]
NEW_UNITS = [
    f"generated/k3kernels/csrc/situ_and_mul/situ_and_mul__in_fp8__out_bf16__has_linear_beta_{f}.{ext}"
    for f in ("off", "on")
    for ext in ("cu", "hip")
]


def add_fp8_input(text: str) -> str:
    """The spec edit a reviewer would see: one axis value, two exclusions, one default."""
    edits = [
        ("    in: [bf16, fp16, fp32]\n", "    in: [bf16, fp16, fp32, fp8]\n"),
        (
            'fp16 is not a runner dtype"}\n',
            'fp16 is not a runner dtype"}\n'
            '    - {in: fp8, out: fp16, reason: "fp8 activations feed bf16 runners; fp16 is not a runner dtype"}\n'
            '    - {in: fp8, out: fp32, reason: "a widening output doubles write traffic; no consumer asks for it"}\n',
        ),
        ("map: {bf16: bf16, fp16: fp16, fp32: bf16}}", "map: {bf16: bf16, fp16: fp16, fp32: bf16, fp8: bf16}}"),
    ]
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repo on branch main holding the project's situ_and_mul spec, templates and oracles."""
    root = copy_project(tmp_path / "repo")
    git(root, "init", "-q", "-b", "main")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "add", "-A")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "base")
    return root


@pytest.fixture
def changed(repo: Path) -> Path:
    spec = repo / SPEC_FILE
    spec.write_text(add_fp8_input(spec.read_text()))
    return repo


def test_adding_a_dtype_reports_specializations_keys_and_files(changed: Path):
    report = diff_rev(changed)
    assert report.base.startswith("merge base of HEAD and main (")
    assert [f.family for f in report.families] == ["situ_and_mul"]
    fam = report.families[0]
    assert fam.status == "changed" and not fam.removed
    assert sorted((r.arch, r.flags["has_linear_beta"]) for r in fam.added) == sorted(
        (a, b) for a in ARCHS for b in (False, True)
    )
    assert all(r.dtypes == NEW_CELL for r in fam.added)
    # keys hash what is compiled: the ABI header every unit includes names no variant, so the
    # existing units keep their keys; only the dispatch (and each library) changes
    assert fam.invalidated == []
    assert [(c.family, c.arch) for c in report.libraries] == [("situ_and_mul", a) for a in ARCHS]
    for arch in ARCHS:
        p = report.pricing.families["situ_and_mul"][arch]
        assert (p.specializations_added, p.units_added, p.units_removed, p.units_changed, p.units) == (2, 2, 0, 1, 11)
    changes = {(c.kind, c.name): (c.old, c.new) for c in fam.changes}
    assert changes[("axis", "in")] == ("bf16, fp16, fp32", "bf16, fp16, fp32, fp8")
    assert changes[("exclusion", "in=fp8, out=fp16")] == (
        None,
        "fp8 activations feed bf16 runners; fp16 is not a runner dtype",
    )
    assert changes[("default", "out")] == (
        "{bf16: bf16, fp16: fp16, fp32: bf16}",
        "{bf16: bf16, fp16: fp16, fp32: bf16, fp8: bf16}",
    )
    assert report.units_added == NEW_UNITS and not report.units_removed
    assert "generated/k3kernels/csrc/situ_and_mul/dispatch.cu" in report.files_changed
    assert "generated/docs/situ_and_mul.md" in report.files_changed
    assert "generated/MANIFEST" in report.files_changed


def test_the_three_formats(changed: Path):
    report = diff_rev(changed)
    text = format_text(report)
    assert "situ_and_mul: changed; specializations +8 -0, 0 cache keys invalidated" in text
    assert (
        f"  + in=fp8, out=bf16 [has_linear_beta=off; has_linear_beta=on] on {', '.join(ARCHS)}: "
        "8 specializations" in text
    )
    assert "  axis in: bf16, fp16, fp32 → bf16, fp16, fp32, fp8" in text
    assert "->" not in text  # one arrow style
    assert "cost per arch (" in text and "  sm_90a   +2 -0" in text
    assert "translation units: +4 -0" in text
    assert all(f"  A {u}" in text for u in NEW_UNITS)

    md = format_markdown(report)
    assert "| `situ_and_mul` | changed | 8 | 0 | 0 | 4 |" in md
    assert "| sm_90a | +2 −0 | +2 −0, 1 changed; 11 in all |" in md
    assert f"| added | in=fp8, out=bf16 | has_linear_beta=off; has_linear_beta=on | {', '.join(ARCHS)} | 8 |" in md
    assert "cache keys invalidated</summary>" not in md
    assert "translation units: **+4 −0**" in md
    assert all(f"- `{u}`" in md for u in NEW_UNITS)

    data = json.loads(format_json(report))
    assert data["totals"]["specializations_added"] == 8
    assert data["totals"]["cache_keys_invalidated"] == 0
    assert data["totals"]["libraries_changed"] == 4
    assert data["pricing"]["archs"]["gfx942"]["units_added"] == 2
    assert data["units_added"] == NEW_UNITS
    fam = data["families"][0]
    assert {r["identity"] for r in fam["added"]} == {
        f"situ_and_mul__in_fp8__out_bf16__has_linear_beta_{f}__{a}" for f in ("off", "on") for a in ARCHS
    }
    assert fam["invalidated"] == []
    assert format_json(report) == format_json(diff_rev(changed))  # stable for tools


def test_cli_exits_0_with_or_without_differences(repo: Path, capsys):
    assert main(["--root", str(repo), "diff"]) == 0
    assert "no differences" in capsys.readouterr().out
    spec = repo / SPEC_FILE
    spec.write_text(add_fp8_input(spec.read_text()))
    assert main(["--root", str(repo), "diff", "HEAD"]) == 0
    assert "situ_and_mul: changed" in capsys.readouterr().out
    assert main(["--root", str(repo), "diff", "HEAD", "--format", "markdown"]) == 0
    assert capsys.readouterr().out.startswith("### k3gen diff: HEAD (")
    assert main(["--root", str(repo), "diff", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["totals"]["units_added"] == 4


def test_a_new_family_and_a_removed_one(repo: Path, capsys):
    assert main(["--root", str(repo), "new", "my_copy"]) == 0
    (repo / SPEC_FILE).unlink()
    report = diff_rev(repo, "HEAD")
    assert report.families_added == ["my_copy"] and report.families_removed == ["situ_and_mul"]
    by = {f.family: f for f in report.families}
    assert by["my_copy"].status == "added" and len(by["my_copy"].added) == 2  # bf16, fp32 on sm_90a
    assert by["situ_and_mul"].status == "removed" and len(by["situ_and_mul"].removed) == 32
    assert len(report.units_added) == 3 and len(report.units_removed) == 18  # 8 variants + dispatch, 2 backends


def test_spec_errors_on_either_side_exit_2(repo: Path, capsys):
    spec = repo / SPEC_FILE
    good = spec.read_text()
    spec.write_text(good.replace("in: [bf16, fp16, fp32]", "in: [bf16, fp16, fp61]"))
    assert main(["--root", str(repo), "diff"]) == 2
    assert "specs/situ_and_mul.yaml:13" in capsys.readouterr().err
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-am", "broken")
    short = git(repo, "rev-parse", "--short", "HEAD").strip()
    spec.write_text(good)
    assert main(["--root", str(repo), "diff"]) == 2
    assert f"{short}:specs/situ_and_mul.yaml:13" in capsys.readouterr().err


def test_an_unknown_rev_is_refused(repo: Path, capsys):
    assert main(["--root", str(repo), "diff", "no-such-rev"]) == 1
    assert "no-such-rev" in capsys.readouterr().err


def test_gates_constants_tie_order_and_flags_old_to_new(tmp_path: Path):
    """compare() on two plans, no git: each kind of spec change, named old → new."""
    old_root, new_root = copy_project(tmp_path / "old"), copy_project(tmp_path / "new")
    spec = new_root / SPEC_FILE
    text = spec.read_text()
    text = text.replace("  block_threads: 256", "  block_threads: 128\n  num_experts: 4")
    text = text.replace('{select: "linear_beta is not None"}', "{kwarg: true}")
    text = text.replace(
        "oracle: k3gen.oracles.situ_and_mul", "tie_order: [3, 2, 1, 0]\noracle: k3gen.oracles.situ_and_mul"
    )
    text = text.replace('reason: "rows start on a 16-byte boundary', 'reason: "rows start on a vector boundary')
    spec.write_text(text)
    old, new = (resolve_all(load_specs(r), r) for r in (old_root, new_root))
    report = compare(old, new, render_all(old, old_root), render_all(new, new_root))
    changes = {(c.kind, c.name): (c.old, c.new) for c in report.families[0].changes}
    assert changes[("constant", "block_threads")] == ("256", "128")
    assert changes[("constant", "num_experts")] == (None, "4")
    assert changes[("flag", "has_linear_beta")] == (
        "per call: on when linear_beta is not None",
        "keyword argument, default off",
    )
    assert changes[("tie_order", "tie_order")] == ("lowest_id", "table of 4: 3, 2, 1, 0")
    gate = next(k for k in changes if k[0] == "gate")
    assert changes[gate][0].startswith("rows start on a 16-byte") and changes[gate][1].startswith(
        "rows start on a vector"
    )
    text = format_text(report)
    assert "  constant block_threads: 256 → 128" in text
    assert "  tie_order tie_order: lowest_id → table of 4: 3, 2, 1, 0" in text


def test_templates_new_since_rev_are_borrowed_and_said_so(repo: Path):
    """A rev from before an output kind existed still renders: the new template comes from the work
    tree (so its files read as unchanged), and the report names it."""
    git(repo, "rm", "-q", "--cached", "templates/common/doc.md.j2")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "before docs")
    report = diff_rev(repo, "HEAD")
    short = git(repo, "rev-parse", "--short", "HEAD").strip()
    assert report.notes == [f"templates not at {short}, taken from the work tree: common/doc.md.j2"]
    assert not report.files_changed and not report.families
    assert f"note: {report.notes[0]}" in format_text(report)


def test_a_rev_from_before_limits_and_oracle_declarations(repo: Path):
    """A rev older than template limits and SUPPORTED still loads: its limits come from the work tree
    like any new template file, and an oracle without SUPPORTED is read in its work-tree form (oracles
    are checked, never rendered); the report says both."""
    oracle = repo / "k3gen/oracles/situ_and_mul.py"
    current = oracle.read_text()
    oracle.write_text("\n".join(line for line in current.splitlines() if not line.startswith("SUPPORTED =")) + "\n")
    git(repo, "rm", "-q", "--cached", "templates/situ_and_mul/limits.yaml")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-am", "before limits")
    oracle.write_text(current)
    report = diff_rev(repo, "HEAD")
    short = git(repo, "rev-parse", "--short", "HEAD").strip()
    assert report.notes == [
        f"templates not at {short}, taken from the work tree: situ_and_mul/limits.yaml",
        f"oracles without SUPPORTED at {short}, read from the work tree: situ_and_mul",
    ]
    assert not report.families


# Pricing and budgets -------------------------------------------------------------------------------

UNITS_SM90 = [
    "situ_and_mul__in_bf16__out_bf16",
    "situ_and_mul__in_fp16__out_fp16",
    "situ_and_mul__in_fp32__out_bf16",
    "situ_and_mul__in_fp32__out_fp32",
]


def cost_table(root: Path) -> None:
    """sm_90a measured: each variant unit 2 s and 100 kB, the dispatch 1 s and 50 kB, the library
    1 MB (its objects: 850 kB); no other arch measured."""
    units = {
        f"situ_and_mul/{u}__has_linear_beta_{b}.cu": {"seconds": 2.0, "bytes": 100_000}
        for u in UNITS_SM90
        for b in ("off", "on")
    }
    units["situ_and_mul/dispatch.cu"] = {"seconds": 1.0, "bytes": 50_000}
    table = {
        "format": 1,
        "units": {"sm_90a": units},
        "libraries": {"sm_90a": {"situ_and_mul": {"bytes": 1_000_000, "unit_bytes": 850_000}}},
        "measured": {"sm_90a": "by hand"},
    }
    (root / "specs" / "compile_costs.json").write_text(json.dumps(table))


def test_the_change_is_priced_per_arch_from_the_table(changed: Path):
    cost_table(changed)
    report = diff_rev(changed)
    sm90, sm100 = report.pricing.archs["sm_90a"], report.pricing.archs["sm_100a"]
    # two new units at the family's median (2 s, 100 kB), the dispatch recompiled (1 s, measured)
    assert (sm90.units_added, sm90.units_changed, sm90.seconds, sm90.estimated) == (2, 1, 5.0, 2)
    assert sm90.estimated_units == [
        f"situ_and_mul/situ_and_mul__in_fp8__out_bf16__has_linear_beta_{b}.cu" for b in ("off", "on")
    ]
    assert (sm90.bytes_old, sm90.bytes_new) == (1_000_000, 1_200_000)
    # nothing measured for sm_100a: every unit at the family's median over the archs that are, and
    # the library at its objects plus what linking added on sm_90a (150 kB)
    assert (sm100.seconds, sm100.estimated, sm100.bytes_new) == (6.0, 11, 11 * 100_000 + 150_000)
    text = format_text(report)
    assert "  sm_90a   +2 -0            +2 -0, 1 changed; 9 in all" not in text  # 11 after the change
    assert "sm_90a   +2 -0            +2 -0, 1 changed; 11 in all  5.0 s" in text
    assert "1.00 MB → 1.20 MB (+0.20 MB)  2 of 11 units estimated" in text
    assert "cost on sm_90a: units +2 -0, 1 changed (11 in all); 5.0 s to compile" in text
    md = format_markdown(report)
    assert (
        "| sm_90a | +2 −0 | +2 −0, 1 changed; 11 in all | 5.0 s | "
        "1.00 MB → 1.20 MB (+0.20 MB) | 2 of 11 units estimated |" in md
    )


def test_a_malformed_cost_table_exits_2_naming_it(changed: Path, capsys):
    (changed / "specs" / "compile_costs.json").write_text(
        '{"format": 1, "units": {"sm_90a": {"x/y.cu": {"seconds": -1}}}}'
    )
    assert main(["--root", str(changed), "diff"]) == 2
    assert (
        "specs/compile_costs.json: entries that are not finite non-negative numbers within bounds.MAX_UNIT_SECONDS "
        "and bounds.MAX_ARTIFACT_BYTES: units.sm_90a.x/y.cu" in capsys.readouterr().err
    )


def test_a_budget_fails_check_and_diff_check_budget_naming_family_and_numbers(changed: Path, capsys):
    cost_table(changed)
    spec = changed / SPEC_FILE
    spec.write_text(spec.read_text() + "budget: {units_per_arch: 10, bytes_per_arch: 1100000}\n")
    line = len(spec.read_text().splitlines())
    assert main(["--root", str(changed), "diff"]) == 0  # the report shows it; only --check-budget fails
    assert "over budget (`k3gen diff --check-budget` and `k3gen check` fail):" in capsys.readouterr().out
    assert main(["--root", str(changed), "diff", "--check-budget"]) == 1
    err = capsys.readouterr().err
    units = (
        f'specs/situ_and_mul.yaml:{line} (kernel "situ_and_mul", budget.units_per_arch): situ_and_mul '
        "compiles 11 translation units for {arch} (10 specializations and the dispatch), over its budget of 10"
    )
    assert all(units.format(arch=a) in err for a in ARCHS)
    assert (
        f'specs/situ_and_mul.yaml:{line} (kernel "situ_and_mul", budget.bytes_per_arch): situ_and_mul\'s '
        "library for sm_90a is 1,200,000 bytes (priced from the compile-cost table, 2 of its units estimated), "
        "over its budget of 1,100,000"
    ) in err
    assert main(["--root", str(changed), "build"]) == 0
    capsys.readouterr()
    assert main(["--root", str(changed), "check"]) == 1
    assert units.format(arch="gfx950") in capsys.readouterr().err
    spec.write_text(spec.read_text().replace("units_per_arch: 10", "units_per_arch: 11").replace("1100000", "1300000"))
    assert main(["--root", str(changed), "check"]) == 0  # a budget edit changes no generated file
    assert main(["--root", str(changed), "diff", "--check-budget"]) == 0


def test_diff_of_one_family_and_an_unknown_family(changed: Path, capsys):
    assert main(["--root", str(changed), "diff", "--family", "situ_and_mul", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [f["family"] for f in data["families"]] == ["situ_and_mul"]
    assert "generated/MANIFEST" not in data["files_changed"]  # shared files belong to no one family
    assert main(["--root", str(changed), "diff", "--family", "nosuch"]) == 2
    assert capsys.readouterr().err == "k3gen diff: unknown family 'nosuch'; families: situ_and_mul\n"


@pytest.mark.parametrize(
    "budget, message",
    [
        ('budget: {units_per_arch: "10"}', "budget.units_per_arch): expected an integer; got '10'"),
        ("budget: {units_per_arch: 0}", "budget.units_per_arch): 0 is not a budget; give a positive integer"),
        ("budget: {bytes_per_arch: 1500000.0}", "budget.bytes_per_arch): expected an integer; got 1500000.0"),
        ("budget: {}", "budget): an empty budget; give `units_per_arch: N`, `bytes_per_arch: N` or both"),
        ("budget: {units: 10}", "budget.units): unknown key 'units'"),
    ],
)
def test_a_budget_is_strict(budget, message):
    from k3gen.spec.load import parse_spec

    text = (ROOT / SPEC_FILE).read_text() + budget + "\n"
    spec, errors = parse_spec(text, SPEC_FILE)
    assert spec is None
    line = len(text.splitlines())
    assert str(errors[0]).startswith(f'{SPEC_FILE}:{line} (kernel "situ_and_mul", {message}')


def test_a_rev_that_keeps_its_k3gen_is_rendered_by_its_own_code(tmp_path: Path):
    """REV with k3gen/ beside its specs renders in a child interpreter with REV's own code (so today's
    code carries nothing for older templates): a file only REV's renderer writes shows as removed."""
    import shutil

    root = copy_project(tmp_path / "repo")
    shutil.rmtree(root / "k3gen")
    shutil.copytree(ROOT / "k3gen", root / "k3gen", ignore=shutil.ignore_patterns("__pycache__"))
    render = root / "k3gen/render/render.py"
    current = render.read_text()
    marked = current.replace(
        '    put("k3kernels/__init__.py",',
        '    put("docs/REV_ONLY.md", "rendered by the code at REV\\n")\n    put("k3kernels/__init__.py",',
    )
    assert marked != current
    render.write_text(marked)
    git(root, "init", "-q", "-b", "main")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "add", "-A")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "rev")
    render.write_text(current)
    report = diff_rev(root, "HEAD")
    assert report.files_removed == ["generated/docs/REV_ONLY.md"]
    assert not report.families and not report.files_added
