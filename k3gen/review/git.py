"""`k3gen diff [REV]`: the git plumbing and the two renders. REV's specs, templates and k3gen are
exported from git; REV is rendered by its own k3gen in a child interpreter (today's code carries
nothing for older templates), the work tree by this one; k3gen.review.compare compares them.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

from k3gen.review.compare import compare
from k3gen.review.report import DiffError, DiffReport
from k3gen.ship import costs

# What a rev must provide to be rendered: the specs, the templates, and its k3gen (whose oracles the
# loader checks and whose renderer renders REV).
EXPORTED = ("specs", "templates", "k3gen")


def _git(root: Path, *args: str, binary: bool = False):
    try:
        done = subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, check=False, text=not binary, timeout=120
        )
    except FileNotFoundError:
        raise DiffError("k3gen diff: git not found; install git or run from a git checkout") from None
    if done.returncode != 0:
        err = done.stderr.decode(errors="replace") if binary else done.stderr
        raise DiffError(f"k3gen diff: git {' '.join(args[:2])} failed: {err.strip()}")
    return done.stdout


def default_rev(root: Path) -> tuple[str, str]:
    """(rev, how it was chosen): the merge base of HEAD with main, or HEAD where there is none
    (on main itself the merge base is HEAD)."""
    try:
        return _git(root, "merge-base", "HEAD", "main").strip(), "merge base of HEAD and main"
    except DiffError:
        return "HEAD", "HEAD"


def export_rev(root: Path, rev: str, dest: Path) -> tuple[Path, str]:
    """Write rev's specs/, templates/ and k3gen/oracles/ under dest; return (the project root in dest,
    rev's short commit id). Folders rev lacks are skipped (a rev before the first spec has none)."""
    try:
        top = Path(_git(root, "rev-parse", "--show-toplevel").strip())
    except DiffError:
        raise DiffError(
            f"k3gen diff: {root} is not in a git repository; diff compares the work tree with a commit"
        ) from None
    try:
        short = _git(root, "rev-parse", "--short", "--verify", "--quiet", f"{rev}^{{commit}}").strip()
    except DiffError:
        raise DiffError(
            f"k3gen diff: '{rev}' is not a commit here; give a branch, tag or commit, or none for "
            "the merge base of HEAD and main"
        ) from None
    prefix = Path(root).resolve().relative_to(top.resolve()).as_posix()  # the project may sit below the top
    prefix = "" if prefix == "." else prefix + "/"
    paths = [f"{prefix}{p}" for p in EXPORTED]
    present = _git(top, "ls-tree", "--name-only", short, "--", *paths).split()
    (dest / prefix / "specs").mkdir(parents=True, exist_ok=True)
    if present:
        data = _git(top, "archive", "--format=tar", short, "--", *present, binary=True)
        try:  # the "data" filter refuses links out of dest, absolute paths, devices: said in one line
            with tarfile.open(fileobj=io.BytesIO(data)) as tar:
                tar.extractall(dest, filter="data")
        except tarfile.TarError as exc:
            raise DiffError(
                f"k3gen diff: {short} holds a file k3gen will not unpack ({type(exc).__name__}: "
                f"{ascii(str(exc))[1:-1][:200]}); specs/, templates/ and k3gen/oracles/ hold plain files only"
            ) from None
    return dest / prefix, short


# Run in a child interpreter whose k3gen is REV's own (exported beside its specs and templates): it
# renders REV as REV's code did, so today's code carries no knowledge of older templates. Import paths
# of both layouts: the stage folders, and the flat modules before them.
_RENDER_REV = r"""
import json, sys
from pathlib import Path
root = Path(sys.argv[1])
sys.path.insert(0, str(root))
try:
    from k3gen.spec import SpecErrors, load_specs
    from k3gen.plan import resolve_all
    from k3gen.render import render_all
except ImportError:  # a revision from before the stage folders
    from k3gen.errors import SpecErrors
    from k3gen.load import load_specs
    from k3gen.plan import resolve_all
    from k3gen.render import render_all
try:
    files = render_all(resolve_all(load_specs(root), root), root)
except SpecErrors as exc:
    print(json.dumps({"errors": [str(e) for e in exc.errors]}))
else:
    print(json.dumps({"files": files}))
"""


def render_rev(old_root: Path, short: str) -> dict[str, str]:
    """The files REV's own k3gen renders from REV's specs and templates (a child interpreter)."""
    import os

    env = {**os.environ, "PYTHONPATH": str(old_root), "PYTHONDONTWRITEBYTECODE": "1"}
    try:
        done = subprocess.run(
            [sys.executable, "-c", _RENDER_REV, str(old_root)],
            cwd=old_root,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        out = json.loads(done.stdout) if done.returncode == 0 else None
    except (OSError, subprocess.SubprocessError, ValueError):
        out = None
    if not isinstance(out, dict) or not isinstance(out.get("files", out.get("errors")), (dict, list)):
        tail = ascii((done.stderr or "")[-300:])[1:-1] if "done" in locals() else ""
        raise DiffError(f"k3gen diff: the k3gen of {short} could not render {short}'s specs ({tail})")
    if "errors" in out:
        raise DiffError(f"k3gen diff: {short} does not render with its own k3gen: " + "; ".join(out["errors"][:3]))
    return out["files"]


def diff_rev(root: Path, rev: str | None = None, families: list[str] | None = None) -> DiffReport:
    """Compare REV (default: default_rev) with the work tree, priced by the work tree's compile-cost
    table (k3gen.ship.costs.TABLE). `families`: report only these.

    Each side is rendered by its own code: the work tree by this k3gen, REV by REV's k3gen in a child
    interpreter (render_rev). Both sides' specs are read by this k3gen's loader, which reads every
    older spec (REV's tuning tables leniently: a table of an older format is left out, and said).
    Raises SpecErrors (files named `REV:specs/x.yaml` for rev's), UnknownFamilyError, CostTableError
    and DiffError.
    """
    import tempfile
    from dataclasses import replace

    from k3gen.plan import resolve_all
    from k3gen.render import render_all
    from k3gen.ship.tree import with_manifest
    from k3gen.spec import SpecErrors, load_specs
    from k3gen.spec.errors import UnknownFamilyError

    root = Path(root)
    how = "rev"
    if rev is None:
        rev, how = default_rev(root)
    new_plans = resolve_all(load_specs(root), root)
    new_files = with_manifest(render_all(new_plans, root))
    table = costs.load(root / costs.TABLE, root=root)
    with tempfile.TemporaryDirectory(prefix="k3gen-diff-") as tmp:
        old_root, short = export_rev(root, rev, Path(tmp))
        # Oracles are read at load, never rendered: one from before SUPPORTED declarations (a rev
        # older than k3gen/spec/meaning/oracle_support.py) is checked in its work-tree form.
        undeclared = _borrow_undeclared_oracles(root, old_root)
        borrowed = [] if _own_code(old_root) else _borrow_new_templates(root, old_root)
        try:
            old_plans = resolve_all(load_specs(old_root), old_root, lenient_tables=True)
            # REV's own k3gen renders REV; a project whose k3gen is installed, not kept beside its
            # specs, has only this one (then templates REV lacks come from the work tree).
            rendered = render_rev(old_root, short) if _own_code(old_root) else render_all(old_plans, old_root)
        except SpecErrors as exc:
            raise SpecErrors([replace(e, file=f"{short}:{e.file}") for e in exc.errors]) from None
        old_files = with_manifest(rendered)
    if families:
        known = sorted({p.name for p in (*old_plans, *new_plans)})
        UnknownFamilyError.check(families, known)
    base = f"{rev} ({short})" if how == "rev" and rev != short else f"{how} ({short})" if how != "rev" else short
    notes = [f"templates not at {short}, taken from the work tree: {', '.join(borrowed)}"] if borrowed else []
    notes += (
        [f"oracles without SUPPORTED at {short}, read from the work tree: {', '.join(undeclared)}"]
        if undeclared
        else []
    )
    notes += [
        f"{file} at {short} is not a tuning table this k3gen reads: its picks are not compared"
        for p in old_plans
        if p.tuning is not None
        for file in p.tuning.unreadable
    ]
    report = compare(
        old_plans,
        new_plans,
        old_files,
        new_files,
        base=base,
        head="work tree",
        notes=notes,
        table=table,
        only=set(families) if families else None,
    )
    report.tests = _impact(root, short, report, old_plans, new_plans)
    return report


def changed_paths(root: Path, rev: str) -> list[str]:
    """Paths (relative to root) where the work tree differs from rev, untracked files included."""
    tracked = _git(root, "diff", "--name-only", "--relative", "--no-renames", rev, "--").splitlines()
    untracked = _git(root, "ls-files", "--others", "--exclude-standard").splitlines()
    return sorted({p for p in (*tracked, *untracked) if p})


def _impact(root: Path, short: str, report: DiffReport, old_plans, new_plans):
    from k3gen.review.impact import Project, select

    plans = {p.name: p for p in (*old_plans, *new_plans)}
    templates: dict[str, list[str]] = {}
    owners: dict[str, list[str]] = {}
    for p in plans.values():
        templates.setdefault(p.spec.template, []).append(p.name)
        # The runner table's generated lookup and test are its front family's (k3gen.render).
        runner_files = (p.runners_file, "generated/k3kernels/runners.py", "generated/tests/test_runners.py")
        tables = [tb.file for tb in p.tuning.tables] if p.tuning is not None else []
        for path in (p.file, *tables, *(runner_files if p.runners_file else ())):
            owners.setdefault(path, []).append(p.name)
    touched = [f.family for f in report.families] + report.families_added + report.families_removed
    project = Project(sorted(plans), templates, {k: sorted(set(v)) for k, v in owners.items()})
    return select(root, changed_paths(root, short), touched, project)


def _own_code(old_root: Path) -> bool:
    """Whether REV keeps its k3gen beside its specs (this project does; a user's may install it)."""
    return (old_root / "k3gen" / "__init__.py").is_file() and (old_root / "k3gen" / "cli.py").is_file()


def _borrow_new_templates(root: Path, old_root: Path) -> list[str]:
    """For a REV rendered by this k3gen: copy the work tree's templates REV lacks (a new output kind),
    so that REV renders at all; their names, for the report."""
    import shutil

    borrowed = []
    for path in sorted((root / "templates").rglob("*")):
        twin = old_root / path.relative_to(root)
        if path.is_file() and not twin.exists():
            twin.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, twin)
            borrowed.append(path.relative_to(root / "templates").as_posix())
    return borrowed


def _borrow_undeclared_oracles(root: Path, old_root: Path) -> list[str]:
    """Copy the work tree's oracle over each oracle of old_root that declares no SUPPORTED; their names."""
    import ast
    import shutil

    from k3gen.runtime.files import read_text
    from k3gen.spec.bounds import MAX_SOURCE_BYTES
    from k3gen.spec.meaning.oracle_support import read_supported

    borrowed = []
    for path in sorted((old_root / "k3gen" / "oracles").glob("*.py")):
        mine = root / "k3gen" / "oracles" / path.name
        if not mine.is_file():
            continue
        try:
            undeclared = read_supported(ast.parse(read_text(path, old_root, MAX_SOURCE_BYTES)))[0] is None
            declared = read_supported(ast.parse(read_text(mine, root, MAX_SOURCE_BYTES)))[0] is not None
        except (SyntaxError, OSError, ValueError):
            continue
        if undeclared and declared:
            shutil.copy(mine, path)
            borrowed.append(path.stem)
    return borrowed
