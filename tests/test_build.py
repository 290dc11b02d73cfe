"""`k3gen build` / `check` / `list` / `schema` on a throwaway copy of the project."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from k3gen.cli import main
from k3gen.plan import resolve_all
from k3gen.spec.load import load_specs

from support import ROOT, SPEC_FILE

# What `k3gen test` selects this module by (k3gen.review.impact): the paths it reads besides k3gen/ and tests/
# (its projects are copies of tests/data's frozen specs and of templates/).
READS = ("templates/**",)

WRAPPER = "k3kernels/situ_and_mul.py"


def k3gen(project: Path, *args: str) -> int:
    return main(["--root", str(project), *args])


def snapshot(project: Path) -> dict[str, tuple[str, int]]:
    """sha256 and mtime of every file under generated/, by relative path."""
    gen = project / "generated"
    return {
        p.relative_to(gen).as_posix(): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
        for p in sorted(gen.rglob("*"))
        if p.is_file()
    }


def summary_line(out: str) -> str:
    return out.strip().splitlines()[-1]


def test_build_twice_gives_identical_bytes_and_the_second_writes_nothing(project: Path, capsys):
    assert k3gen(project, "build") == 0
    first = snapshot(project)
    assert "; 0 written" not in summary_line(capsys.readouterr().out)
    assert k3gen(project, "build") == 0
    out = capsys.readouterr().out
    assert snapshot(project) == first  # same bytes, and untouched mtimes (ninja rebuilds nothing)
    assert "wrote" not in out
    assert "; 0 written, 0 removed (" in summary_line(out)


def test_check_passes_when_in_sync(built_project: Path, capsys):
    assert k3gen(built_project, "check") == 0
    assert capsys.readouterr().out == "k3gen check: generated/ is up to date\n"


def test_check_fails_with_a_diff_and_the_fix_after_a_hand_edit(built_project: Path, capsys):
    path = built_project / "generated" / WRAPPER
    path.write_text(path.read_text() + "# tweaked by hand\n")
    assert k3gen(built_project, "check") == 1
    out, err = capsys.readouterr()
    assert out.startswith(f"--- a/generated/{WRAPPER}\n+++ b/generated/{WRAPPER}\n")
    assert [line for line in out.splitlines() if line.startswith(("--- ", "+++ "))] == [
        f"--- a/generated/{WRAPPER}",
        f"+++ b/generated/{WRAPPER}",
    ]
    assert "\n-# tweaked by hand\n" in out
    assert err == (
        "\nk3gen check: generated/ does not match specs/ and templates/ (stale or edited by hand).\n"
        "Fix: run `k3gen build` and commit generated/.\n"
    )


def test_build_restores_a_hand_edited_file(built_project: Path, capsys):
    path = built_project / "generated" / WRAPPER
    original = path.read_bytes()
    path.write_text(path.read_text() + "# tweaked by hand\n")
    assert k3gen(built_project, "build") == 0
    assert f"  wrote   generated/{WRAPPER}\n" in capsys.readouterr().out
    assert path.read_bytes() == original
    assert k3gen(built_project, "check") == 0


def test_files_of_a_renamed_kernel_are_removed_as_stale(built_project: Path, capsys):
    spec = built_project / SPEC_FILE
    spec.write_text(spec.read_text().replace("kernel: situ_and_mul\n", "kernel: situ_mul\n"))
    assert k3gen(built_project, "build") == 0
    out = capsys.readouterr().out
    gen = built_project / "generated"
    assert f"  removed generated/{WRAPPER}\n" in out
    assert not (gen / WRAPPER).exists()
    assert not (gen / "k3kernels/csrc/situ_and_mul").exists()  # emptied folders go too
    assert (gen / "k3kernels/situ_mul.py").is_file()
    assert not any("situ_and_mul" in p for p in snapshot(built_project))


def test_a_file_recorded_in_manifest_but_no_longer_rendered_is_removed(built_project: Path, capsys):
    gen = built_project / "generated"
    (gen / "k3kernels/old_family.py").write_text("# left over\n")
    manifest = gen / "MANIFEST"
    manifest.write_text(manifest.read_text() + f"{'0' * 64}  k3kernels/old_family.py\n")
    assert k3gen(built_project, "build") == 0
    assert "  removed generated/k3kernels/old_family.py\n" in capsys.readouterr().out
    assert not (gen / "k3kernels/old_family.py").exists()
    assert "old_family" not in manifest.read_text()


def test_a_file_not_in_manifest_is_drift_and_build_removes_it(built_project: Path, capsys):
    """generated/ is k3gen's: a hand-added file (a conftest.py runs at collection) fails check, and
    build removes it, naming it."""
    mine = built_project / "generated" / "tests" / "conftest.py"
    mine.write_text("import os\n")
    capsys.readouterr()
    assert k3gen(built_project, "check") == 1
    assert "generated/tests/conftest.py: not listed in MANIFEST" in capsys.readouterr().out
    assert k3gen(built_project, "build") == 0
    assert "removed generated/tests/conftest.py" in capsys.readouterr().out
    assert not mine.exists()


def test_manifest_is_sorted_and_lists_the_sha256_of_every_file(built_project: Path):
    gen = built_project / "generated"
    lines = (gen / "MANIFEST").read_text().splitlines()
    assert lines[0].startswith("# @generated by k3gen")
    rows = [line.split("  ", 1) for line in lines[1:]]
    paths = [path for _, path in rows]
    assert paths == sorted(paths)
    on_disk = sorted(
        p.relative_to(gen).as_posix()
        for p in gen.rglob("*")
        if p.is_file() and p.name != "MANIFEST" and "__pycache__" not in p.parts
    )
    assert paths == on_disk
    for digest, path in rows:
        assert digest == hashlib.sha256((gen / path).read_bytes()).hexdigest(), path


def test_generated_files_hold_no_absolute_paths_and_no_timestamps(project: Path):
    assert k3gen(project, "build") == 0
    date_or_time = re.compile(r"\b(19|20)\d\d-\d\d-\d\d\b|\b\d\d:\d\d:\d\d\b")
    for p in (project / "generated").rglob("*"):
        if not p.is_file():
            continue
        text = p.read_text()
        for forbidden in (str(project), str(ROOT), "/work/", "/tmp/", "/home/"):
            assert forbidden not in text, f"{p.name} contains {forbidden!r}"
        assert not date_or_time.search(text), f"{p.name} contains a timestamp"


def test_list_prints_one_row_per_specialization(project: Path, capsys):
    assert k3gen(project, "list") == 0
    lines = capsys.readouterr().out.splitlines()
    plans = resolve_all(load_specs(project), project)
    identities = [sp.identity for p in plans for sp in p.specializations]
    assert lines[0].split() == ["identity", "backend", "params", "tuning", "tables", "unit", "key", "library", "key"]
    assert [line.split()[0] for line in lines[1:-1]] == identities
    start, end = lines[0].index("tuning tables"), lines[0].index("unit key")

    def tables(p) -> str:  # the devices with a table, and the fallback; "-" without knobs
        if p.tuning is None:
            return "-"
        fallback = f" (fallback {p.tuning.fallback})" if p.tuning.fallback else ""
        return (",".join(p.tuning.devices) or "none") + fallback

    assert [line[start:end].strip() for line in lines[1:-1]] == [tables(p) for p in plans for _ in p.specializations]
    assert lines[-1] == f"{len(identities)} specializations"


def test_schema_is_json_describing_a_spec(capsys):
    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert "dtypes" in schema["properties"]
    assert "kernel" in schema["required"]


# Keys, and which edits change them: tests/test_identity.py.
