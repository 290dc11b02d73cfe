"""Which tests a change touches: `k3gen test [REV]` and the Tests section of `k3gen diff`.

A change is the paths that differ from REV (git diff, untracked files included) and the plan diff
`k3gen diff` prices. Selected:
- generated/tests/test_<family>.py of every family the change touches: one the plan diff names, or
  one whose spec, tuning table, template or generated files changed;
- each module of tests/ whose READS matches a changed path. READS is a top-level tuple of path globs
  (`*` within a folder, `**` across folders), read from the module's source, never imported; a
  module without READS reads everything. A module with FAMILY_SCOPED = True marks each test with
  `pytest.mark.family(NAME)`: where only paths of touched families are what it reads, only their
  tests run (tests/conftest.py deselects the rest by K3GEN_TEST_SCOPE);
- everything, where a changed path is the generator or the test harness (HARNESS), or one that no
  module declares it reads: a change that cannot be attributed never selects less.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

# Paths every test depends on: the generator and runtime, the test harness, the build and CI setup.
# A changed test module is no such path: it selects itself.
HARNESS = ("k3gen/**", "pyproject.toml", ".ci/**", "tests/**", "generated/tests/conftest.py")
# Files of one family by their names: what k3gen.render generates for it, and its tuning tables, one
# per device (k3gen.plan.tuning; also in `owners`, but a table neither side could read is still its).
FAMILY_FILES = (
    "specs/tuning/{f}.*.yaml",
    "generated/k3kernels/csrc/{f}/**",
    "generated/k3kernels/{f}.py",
    "generated/k3kernels/tuning/{f}.json",
    "generated/docs/{f}.md",
    "generated/tests/test_{f}.py",
)
# Generated files no kernel reads: a change to them alone touches no family.
INERT = ("generated/MANIFEST", "generated/docs/README.md")
SCOPE_ENV = "K3GEN_TEST_SCOPE"  # module=family,family;module=...  (tests/conftest.py reads it)


@dataclass(frozen=True)
class TestModule:
    path: str  # relative to the project root
    reads: tuple[str, ...] | None  # None: everything
    family_scoped: bool = False


@dataclass
class Selected:
    path: str
    why: str
    families: tuple[str, ...] | None = None  # only these families' tests (a FAMILY_SCOPED module)


@dataclass
class TestImpact:
    changed: list[str]
    families: list[str]  # the families the change touches
    everything: str | None  # why every test is selected, or None
    selected: list[Selected] = field(default_factory=list)
    unaffected: list[tuple[str, str]] = field(default_factory=list)  # (path, why)

    def scope(self) -> str:
        """K3GEN_TEST_SCOPE for pytest: the modules that run only some families' tests."""
        return ";".join(f"{s.path}={','.join(s.families)}" for s in self.selected if s.families is not None)


def glob_regex(glob: str) -> re.Pattern:
    out, i = "", 0
    while i < len(glob):
        if glob.startswith("**", i):
            out, i = out + ".*", i + 2
        elif glob[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif glob[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(glob[i]), i + 1
    return re.compile(out + r"\Z")


def matches(path: str, globs: tuple[str, ...]) -> bool:
    return any(glob_regex(g).match(path) for g in globs)


def read_module(root: Path, path: str) -> TestModule:
    """READS and FAMILY_SCOPED of a test module, from its top-level literal assignments."""
    tree = ast.parse((root / path).read_text(), path)
    values = {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
        if isinstance(target, ast.Name) and target.id in ("READS", "FAMILY_SCOPED"):
            values[target.id] = ast.literal_eval(node.value)
    reads = values.get("READS")
    return TestModule(path, None if reads is None else (path, *reads), bool(values.get("FAMILY_SCOPED")))


def test_modules(root: Path) -> list[TestModule]:
    return [read_module(root, p.relative_to(root).as_posix()) for p in sorted((root / "tests").glob("test_*.py"))]


def _harness(path: str) -> bool:
    return matches(path, HARNESS) and not matches(path, ("tests/test_*.py",))


@dataclass(frozen=True)
class Project:
    """What the plans say of the files: every family of either side, the families of each template
    folder, and of each other path a plan names (its spec, tuning tables, runner table)."""

    families: list[str]
    templates: dict[str, list[str]]
    owners: dict[str, list[str]]


def families_of(path: str, project: Project) -> list[str] | None:
    """The families a changed path belongs to; None if it is no family's (a shared file)."""
    if path.startswith("templates/"):
        folder = path.split("/")[1] if path.count("/") >= 2 else None
        return list(project.families) if folder == "common" else project.templates.get(folder, [])
    if path in project.owners:
        return project.owners[path]
    own = [f for f in project.families if matches(path, tuple(g.format(f=f) for g in FAMILY_FILES))]
    return own or None


def select(root: Path, changed: list[str], touched: list[str], project: Project) -> TestImpact:
    """changed: paths relative to root; touched: the families the plan diff names."""
    families = project.families
    modules = test_modules(root)
    declared = [g for m in modules if m.reads is not None for g in m.reads]
    shared = []  # changed paths that are no family's: they touch every family's generated tests
    fams = set(touched)
    for path in changed:
        owners = families_of(path, project)
        if owners is None:
            if not matches(path, INERT) and path.startswith(("generated/", "templates/")):
                shared.append(path)
        else:
            fams.update(owners)
    everything = next(
        (
            f"{p} is the generator or the test harness" if _harness(p) else f"no test declares that it reads {p}"
            for p in changed
            if _harness(p) or not (matches(p, INERT) or matches(p, tuple(declared)))
        ),
        None,
    )
    if shared:
        fams.update(families)
    impact = TestImpact(changed, sorted(fams), everything)
    for f in families:
        path = f"generated/tests/test_{f}.py"
        if not (root / path).is_file():
            continue
        if everything or f in fams:
            impact.selected.append(Selected(path, everything or f"{f} changed"))
        else:
            impact.unaffected.append((path, f"{f}: no spec, table, template or generated file of it changed"))
    for m in modules:
        _place(impact, m, changed, project)
    return impact


def _place(impact: TestImpact, m: TestModule, changed: list[str], project: Project) -> None:
    if impact.everything:
        impact.selected.append(Selected(m.path, impact.everything))
        return
    if m.reads is None:
        impact.selected.append(Selected(m.path, "it does not declare what it reads (READS), so it reads everything"))
        return
    hits = [p for p in changed if matches(p, m.reads)]
    if not hits:
        what = ", ".join(m.reads[1:]) or "nothing besides k3gen/ and tests/"
        impact.unaffected.append((m.path, f"reads {what}: none of it changed"))
        return
    hits.sort(key=lambda p: matches(p, INERT))  # name a path that matters first
    why = f"reads {hits[0]}" + (f" and {len(hits) - 1} more changed paths" if len(hits) > 1 else "")
    owners = [families_of(p, project) for p in hits if not matches(p, INERT)]
    if m.family_scoped and owners and all(o is not None for o in owners):
        scoped = sorted({f for o in owners for f in o})
        impact.selected.append(Selected(m.path, f"{why}; only the tests of {', '.join(scoped)}", tuple(scoped)))
        return
    impact.selected.append(Selected(m.path, why))
