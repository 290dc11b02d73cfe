"""What a spec change does, for review: the plans and rendered files of two trees, compared.

`k3gen diff [REV]` renders the specs and templates at REV and in the work tree, both with the
current k3gen code, and reports per family the specializations added and removed, the keys that
changed (k3gen.render.keys: the same keys `k3gen list` shows and the runtime uses), and the gates,
constants, tie orders, flags and params changed; what the change costs to build per arch (k3gen.review.pricing,
from the compile-cost table); then the generated files and translation units touched. `compare` is a
pure function of two plans and two file sets; `format_text`, `format_markdown` and `format_json`
print its report; `export_rev` is the git plumbing.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from k3gen.plan.family import FamilyPlan, Specialization
from k3gen.render import keys as identity
from k3gen.review.pricing import Price, Pricing, price
from k3gen.ship import costs
from k3gen.spec.escape import markdown

# What a rev must provide to be rendered: the specs, the templates, and its k3gen (whose oracles the
# loader checks and whose renderer renders REV).
EXPORTED = ("specs", "templates", "k3gen")
TU_SUFFIXES = (".cu", ".hip")


class DiffError(Exception):
    """The two trees cannot be compared (an unknown rev, no git, templates that no longer render)."""


@dataclass(frozen=True)
class SpecializationRef:
    """One specialization as the report names it: identity, where it is built, its matrix cell."""

    identity: str
    backend: str
    arch: str
    dtypes: dict
    params: dict
    flags: dict
    cache_key: str  # the specialization's unit key (k3gen.render.keys)


@dataclass(frozen=True)
class LibraryChange:
    """A family's library for one arch whose key changed: what the runtime and `k3gen compile` rebuild."""

    family: str
    arch: str
    old: str | None  # key; None: the library is new
    new: str | None  # None: the library is gone


@dataclass(frozen=True)
class Change:
    """One spec-level change of a family: `kind` (gate, constant, tie_order, sigmoid, flag, param,
    targets, axis, exclusion, default, runner, field) and `name` say what; old/new are text, None when absent."""

    kind: str
    name: str
    old: str | None
    new: str | None


@dataclass
class FamilyDiff:
    family: str
    status: str  # added, removed or changed
    added: list[SpecializationRef] = field(default_factory=list)
    removed: list[SpecializationRef] = field(default_factory=list)
    invalidated: list[str] = field(default_factory=list)  # identities on both sides whose key changed
    changes: list[Change] = field(default_factory=list)


@dataclass
class DiffReport:
    base: str  # what the old side is, e.g. "main's merge base 74a2312"
    head: str  # what the new side is: "work tree"
    families_compared: int
    families_added: list[str]
    families_removed: list[str]
    families: list[FamilyDiff]  # only families with something to report, by name
    files_added: list[str]  # paths under generated/
    files_removed: list[str]
    files_changed: list[str]
    notes: list[str] = field(default_factory=list)
    libraries: list[LibraryChange] = field(default_factory=list)  # by family, archs in spec order
    pricing: Pricing | None = None
    over_budget: list[str] = field(default_factory=list)  # the work tree's budget errors, located

    @property
    def units_added(self) -> list[str]:
        return [f for f in self.files_added if f.endswith(TU_SUFFIXES)]

    @property
    def units_removed(self) -> list[str]:
        return [f for f in self.files_removed if f.endswith(TU_SUFFIXES)]

    @property
    def units_changed(self) -> list[str]:
        return [f for f in self.files_changed if f.endswith(TU_SUFFIXES)]

    def totals(self) -> dict[str, int]:
        fams = self.families
        return {
            "specializations_added": sum(len(f.added) for f in fams),
            "specializations_removed": sum(len(f.removed) for f in fams),
            "cache_keys_invalidated": sum(len(f.invalidated) for f in fams),
            "libraries_changed": len(self.libraries),
            "files_added": len(self.files_added),
            "files_removed": len(self.files_removed),
            "files_changed": len(self.files_changed),
            "units_added": len(self.units_added),
            "units_removed": len(self.units_removed),
            "units_changed": len(self.units_changed),
        }

    def __bool__(self) -> bool:
        return bool(self.families or self.files_added or self.files_removed or self.files_changed)


# ---------------------------------------------------------------------------------------------
# Comparing


def compare(
    old: list[FamilyPlan],
    new: list[FamilyPlan],
    old_files: dict[str, str],
    new_files: dict[str, str],
    base: str = "base",
    head: str = "work tree",
    notes: list[str] | None = None,
    table: costs.CostTable | None = None,
    table_name: str = costs.TABLE,
    only: set[str] | None = None,
) -> DiffReport:
    """The report of going from (old plans, old rendered files) to (new plans, new rendered files).

    table: the compile-cost table that prices the change (none: every unit estimated at 0 s);
    only: report these families alone (their files, libraries and price).
    """
    if only is not None:
        old, new = [p for p in old if p.name in only], [p for p in new if p.name in only]
        old_files, new_files = _files_of(old_files, only), _files_of(new_files, only)
    table = table or costs.CostTable()
    old_libs, new_libs = identity.libraries(old, old_files), identity.libraries(new, new_files)
    okeys, nkeys = identity.unit_keys(old_libs), identity.unit_keys(new_libs)
    olds, news = {p.name: p for p in old}, {p.name: p for p in new}
    families = []
    for name in sorted(olds.keys() | news.keys()):
        fd = _family_diff(olds.get(name), news.get(name), okeys, nkeys, old_files, new_files)
        if fd.added or fd.removed or fd.invalidated or fd.changes or fd.status != "changed":
            families.append(fd)
    added = sorted(f"generated/{p}" for p in new_files.keys() - old_files.keys())
    removed = sorted(f"generated/{p}" for p in old_files.keys() - new_files.keys())
    changed = sorted(f"generated/{p}" for p in new_files.keys() & old_files.keys() if new_files[p] != old_files[p])
    from k3gen.review.pricing import over_budget

    return DiffReport(
        base,
        head,
        len(olds.keys() | news.keys()),
        sorted(news.keys() - olds.keys()),
        sorted(olds.keys() - news.keys()),
        families,
        added,
        removed,
        changed,
        list(notes or []),
        _library_changes(old_libs, new_libs),
        price(old_libs, new_libs, table, table_name),
        [str(e) for e in over_budget(new, new_libs, table)],
    )


def _files_of(files: dict[str, str], families: set[str]) -> dict[str, str]:
    """The rendered files that belong to these families alone (not the shared index, MANIFEST, ...)."""

    def mine(path: str) -> bool:
        return any(
            path.startswith(f"k3kernels/csrc/{f}/")
            or path in (f"k3kernels/{f}.py", f"tests/test_{f}.py", f"docs/{f}.md")
            for f in families
        )

    return {p: t for p, t in files.items() if mine(p) or p == "k3kernels/csrc/k3_backend.h"}


def _library_changes(old: list[identity.Library], new: list[identity.Library]) -> list[LibraryChange]:
    o = {(lib.family, lib.arch): lib.key for lib in old}
    n = {(lib.family, lib.arch): lib.key for lib in new}
    keys = list(dict.fromkeys([*n, *o]))
    ordered = sorted(keys, key=lambda k: (k[0], keys.index(k)))  # by family, archs as the specs list them
    return [LibraryChange(f, a, o.get((f, a)), n.get((f, a))) for f, a in ordered if o.get((f, a)) != n.get((f, a))]


def _ref(sp: Specialization, keys: dict[str, str]) -> SpecializationRef:
    v = sp.variant
    return SpecializationRef(
        sp.identity, sp.backend, sp.arch, dict(v.dtypes), dict(v.params), dict(v.flags), keys[sp.identity]
    )


def _family_diff(
    old: FamilyPlan | None,
    new: FamilyPlan | None,
    okeys: dict[str, str],
    nkeys: dict[str, str],
    old_files: dict[str, str],
    new_files: dict[str, str],
) -> FamilyDiff:
    if old is None or new is None:
        p = old or new
        refs = [_ref(sp, okeys if new is None else nkeys) for sp in p.specializations]
        return FamilyDiff(
            p.name,
            "added" if old is None else "removed",
            added=refs if old is None else [],
            removed=refs if new is None else [],
        )
    o = {sp.identity: sp for sp in old.specializations}
    n = {sp.identity: sp for sp in new.specializations}
    return FamilyDiff(
        new.name,
        "changed",
        added=[_ref(n[i], nkeys) for i in n if i not in o],
        removed=[_ref(o[i], okeys) for i in o if i not in n],
        invalidated=[i for i in n if i in o and nkeys[i] != okeys[i]],
        changes=spec_changes(old, new, old_files, new_files),
    )


def spec_changes(
    old: FamilyPlan, new: FamilyPlan, old_files: dict[str, str] | None = None, new_files: dict[str, str] | None = None
) -> list[Change]:
    """The spec-level changes of one family, old → new, in a fixed order. With the rendered files of
    both sides, also the tuning picks and the untuned variants (k3gen.plan.tuning: checked against the code)."""
    a, b = old.spec, new.spec
    out: list[Change] = []
    out += _keyed(
        "targets",
        {"cuda": a.targets.cuda, "hip": a.targets.hip},
        {"cuda": b.targets.cuda, "hip": b.targets.hip},
        lambda v: ", ".join(v) or "none",
    )
    out += _keyed("axis", a.dtypes.axes, b.dtypes.axes, ", ".join)
    out += _keyed("exclusion", _exclusions(old), _exclusions(new), str)
    out += _keyed(
        "default",
        {k: d.map for k, d in a.dtypes.defaults.items()},
        {k: d.map for k, d in b.dtypes.defaults.items()},
        # as the spec writes it, so that → means old → new only
        lambda m: "{" + ", ".join(f"{s}: {t}" for s, t in m.items()) + "}",
    )
    out += _keyed("gate", {g.source: r for g, r in old.gates}, {g.source: r for g, r in new.gates}, str)
    out += _keyed("constant", a.constants, b.constants, repr)
    if a.tie_order != b.tie_order:
        out.append(Change("tie_order", "tie_order", *_tie_texts(a.tie_order, b.tie_order)))
    if a.sigmoid != b.sigmoid:
        out.append(Change("sigmoid", "sigmoid", _per_backend_text(a.sigmoid, str), _per_backend_text(b.sigmoid, str)))
    out += _keyed("param", a.params, b.params, lambda p: f"values {', '.join(map(str, p.values))}; default {p.default}")
    out += _keyed(
        "flag",
        {n: _flag_text(f, a.targets.all) for n, f in a.flags.items()},
        {n: _flag_text(f, b.targets.all) for n, f in b.flags.items()},
        str,
    )
    out += _keyed(
        "runner",
        {r.name: r for r in getattr(old, "runners", [])},
        {r.name: r for r in getattr(new, "runners", [])},
        _dumped,
    )
    ot, nt = _settled(old, old_files), _settled(new, new_files)
    out += _keyed("tuning table", _table(ot), _table(nt), str)
    out += _keyed("tuning pick", _picks(old, ot), _picks(new, nt), str)  # specs/tuning/<family>.<device>.yaml
    out += _keyed("untuned", _untuned(ot), _untuned(nt), str)
    for name in ("summary", "template", "vector", "fast_math", "signature", "oracle", "tests", "budget", "tuning"):
        va, vb = _dumped(getattr(a, name)), _dumped(getattr(b, name))
        if va != vb:
            out.append(Change("field", name, va, vb))
    return out


def _folded(changes: list[Change], most: int = 3) -> list[Change]:
    """For the text and markdown reports: changes of one kind that say the same thing (old → new) of
    many names, as one naming the first `most` and how many more (54 variants going untuned read as
    one line; --format json keeps every change)."""
    groups: dict[tuple, list[Change]] = {}
    for c in changes:
        groups.setdefault((c.kind, c.old, c.new), []).append(c)
    out = []
    for (kind, old, new), cs in groups.items():
        if len(cs) <= most:
            out += cs
            continue
        names = ", ".join(c.name for c in cs[:most])
        out.append(Change(kind, f"{len(cs)} variants ({names} and {len(cs) - most} more)", old, new))
    return out


def _settled(p: FamilyPlan, files: dict[str, str] | None):
    """The family's tuning with its picks checked against its rendered code (k3gen.render)."""
    from k3gen.render.keys import settled_from

    if p.tuning is None or files is None:
        return p.tuning
    return settled_from(p, files)


def _table(t) -> dict[str, str]:
    """{"table": its file} when the family has a tuning table."""
    return {"file": t.table_file} if t is not None and t.table_file else {}


def _untuned(t) -> dict[str, str]:
    """Each variant that runs the spec's default config for want of a current pick, and why."""
    if t is None:
        return {}
    where = f" in {t.table_file}" if t.table_file else ""
    return {v: f"untuned (default config): {why}{where}" for v, why in t.untuned.items()}


def _picks(p: FamilyPlan, t) -> dict[str, str]:
    """The config the family's tuning table picks per tuned variant and bucket (nothing without a table)."""
    if t is None or t.table_file is None:
        return {}
    low, out = 0, {}
    for i, high in enumerate(t.buckets):
        for v in p.variants:
            if not t.tuned(v.name):
                continue
            config = t.bucket_configs(v.name)[i]
            out[f"{v.name} {low} < M <= {high}"] = t.label(config) + (" (default)" if config == 0 else "")
        low = high
    return out


def _keyed(kind: str, old: dict, new: dict, text) -> list[Change]:
    """Entries removed, added or changed between two mappings, in the new mapping's order."""
    out = [Change(kind, str(k), text(old[k]), None) for k in old if k not in new]
    for k, v in new.items():
        if k not in old:
            out.append(Change(kind, str(k), None, text(v)))
        elif old[k] != v:
            out.append(Change(kind, str(k), text(old[k]), text(v)))
    return out


def _exclusions(p: FamilyPlan) -> dict[str, str]:
    return {", ".join(f"{a}={d}" for a, d in cell.items()): reason for cell, reason in p.excluded}


def _flag_text(f, targets: list[str]) -> str:
    if f.archs is not None:  # a target the list leaves out has the flag off: say so, never silently
        off = [a for a in targets if a not in f.archs]
        return f"per arch: on for {', '.join(f.archs) or 'none'}" + (f"; off for {', '.join(off)}" if off else "")
    if f.select is not None:
        return f"per call: on when {f.select}"
    return f"keyword argument, default {'on' if f.default else 'off'}"


def _per_backend_text(value, text) -> str:
    """`cuda: X; hip: Y` for a per-backend choice (k3gen.spec.routing), else the one value's text."""
    if hasattr(value, "cuda") and hasattr(value, "hip"):
        return "; ".join(f"{b}: {text(getattr(value, b))}" for b in ("cuda", "hip") if getattr(value, b) is not None)
    return text(value)


def _tie_texts(old, new) -> tuple[str, str]:
    def text(t, places=()):
        if hasattr(t, "rule"):
            return (
                f"{t.rule}: {t.experts_per_group} experts to a group, lane_rank "
                + ", ".join(map(str, t.lane_rank[:8]))
                + ", …"
            )
        if not isinstance(t, list):
            return _per_backend_text(t, text) if hasattr(t, "cuda") else str(t)
        if places:
            return f"table of {len(t)}; at places {', '.join(map(str, places))}: " + ", ".join(
                str(t[i]) for i in places
            )
        return f"table of {len(t)}: " + ", ".join(map(str, t[:8])) + (", …" if len(t) > 8 else "")

    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        places = [i for i, (x, y) in enumerate(zip(old, new)) if x != y][:6]
        return text(old, places), text(new, places)
    return text(old), text(new)


def _dumped(value) -> str:
    if hasattr(value, "model_dump"):
        value = value.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


# ---------------------------------------------------------------------------------------------
# Formatting


def _cell_text(ref: SpecializationRef) -> str:
    return ", ".join(f"{a}={d}" for a, d in ref.dtypes.items())


def _variant_text(ref: SpecializationRef) -> str:
    parts = [f"{p}={v}" for p, v in ref.params.items()] + [f"{f}={'on' if b else 'off'}" for f, b in ref.flags.items()]
    return ", ".join(parts)


def grouped(refs: list[SpecializationRef]) -> list[tuple[str, list[str], list[str], int]]:
    """(dtype cell, its variants' other parameters, archs, specializations) per cell, in first-seen order."""
    cells: dict[str, tuple[dict, dict, int]] = {}
    for r in refs:
        variants, archs, n = cells.get(_cell_text(r), ({}, {}, 0))
        variants[_variant_text(r)] = None
        archs[r.arch] = None
        cells[_cell_text(r)] = (variants, archs, n + 1)
    return [(c, [v for v in vs if v], list(archs), n) for c, (vs, archs, n) in cells.items()]


ARROW = "→"  # the one arrow of every format: old → new


def _change_text(c: Change) -> str:
    if c.old is None:
        return f"{c.kind} {c.name}: added: {c.new}"
    if c.new is None:
        return f"{c.kind} {c.name}: removed (was: {c.old})"
    return f"{c.kind} {c.name}: {c.old} {ARROW} {c.new}"


def _family_line(f: FamilyDiff) -> str:
    head = {"added": "new family", "removed": "family removed", "changed": "changed"}[f.status]
    return (
        f"{head}; specializations +{len(f.added)} -{len(f.removed)}, "
        f"{len(f.invalidated)} cache key{'s' if len(f.invalidated) != 1 else ''} invalidated"
    )


def _mb(n: int) -> str:
    return f"{n / 1e6:.2f} MB"


def _bytes_text(p: Price) -> str:
    delta = p.bytes_new - p.bytes_old
    return f"{_mb(p.bytes_old)} {ARROW} {_mb(p.bytes_new)} ({'+' if delta >= 0 else '-'}{_mb(abs(delta))})"


def _estimated_text(p: Price) -> str:
    return f"{p.estimated} of {p.units} units estimated" if p.estimated else "measured"


def price_rows(r: DiffReport, minus: str = "-") -> list[list[str]]:
    """One row per arch whose build changed: specializations, units, compile seconds, library bytes."""
    if r.pricing is None:
        return []
    return [
        [
            arch,
            f"+{p.specializations_added} {minus}{p.specializations_removed}",
            f"+{p.units_added} {minus}{p.units_removed}, {p.units_changed} changed; {p.units} in all",
            f"{p.seconds:.1f} s",
            _bytes_text(p),
            _estimated_text(p),
        ]
        for arch, p in r.pricing.archs.items()
    ]


PRICE_HEADER = [
    "arch",
    "specializations",
    "translation units",
    "compile (one core)",
    "library bytes, all families",
    "prices",
]


def _aligned(rows: list[list[str]], indent: str = "  ") -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [indent + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def _price_note(r: DiffReport) -> str:
    return (
        f"compile seconds of the units added and changed, and library bytes, from {r.pricing.table}; "
        "a unit not in it is priced at its family's median and counted as estimated"
    )


def _family_price_lines(r: DiffReport, family: str) -> list[str]:
    prices = r.pricing.families.get(family, {}) if r.pricing else {}
    return [
        f"  cost on {arch}: units +{p.units_added} -{p.units_removed}, {p.units_changed} changed "
        f"({p.units} in all); {p.seconds:.1f} s to compile; library {_bytes_text(p)}; {_estimated_text(p)}"
        for arch, p in prices.items()
    ]


def _library_text(c: LibraryChange) -> str:
    old, new = (k[:16] if k else "none" for k in (c.old, c.new))
    return f"{c.arch} {old} {ARROW} {new}"


def format_text(r: DiffReport, verbose: bool = False) -> str:
    """For a terminal: one block per family, the cost per arch, then the files."""
    t = r.totals()
    lines = [f"k3gen diff: {r.base} {ARROW} {r.head}"]
    lines += [f"note: {n}" for n in r.notes]
    if not r:
        return "\n".join(lines + ["no differences in specializations, cache keys or generated files"]) + "\n"
    lines.append(
        f"families: {r.families_compared} compared, +{len(r.families_added)} "
        f"({', '.join(r.families_added) or 'none'}), -{len(r.families_removed)} "
        f"({', '.join(r.families_removed) or 'none'})"
    )
    for f in r.families:
        lines.append(f"\n{f.family}: {_family_line(f)}")
        for sign, refs in (("+", f.added), ("-", f.removed)):
            for cell, variants, archs, n in grouped(refs):
                detail = f" [{'; '.join(variants)}]" if variants else ""
                lines.append(f"  {sign} {cell}{detail} on {', '.join(archs)}: {n} specialization{'s' * (n != 1)}")
        for c in _folded(f.changes):
            lines.append(f"  {_change_text(c)}")
        libs = [c for c in r.libraries if c.family == f.family]
        if libs:
            lines.append(f"  library keys changed: {'; '.join(_library_text(c) for c in libs)}")
        lines += _family_price_lines(r, f.family)
        if f.invalidated:
            lines.append(f"  cache keys invalidated ({len(f.invalidated)}):")
            shown = f.invalidated if verbose or len(f.invalidated) <= 12 else f.invalidated[:10]
            lines += [f"    {i}" for i in shown]
            if len(shown) < len(f.invalidated):
                lines.append(f"    ... {len(f.invalidated) - len(shown)} more (--format json lists all)")
    if rows := price_rows(r):
        lines += ["", f"cost per arch ({_price_note(r)}):", *_aligned([PRICE_HEADER, *rows])]
    if r.over_budget:
        lines += ["", "over budget (`k3gen diff --check-budget` and `k3gen check` fail):"]
        lines += [f"  {e}" for e in r.over_budget]
    lines.append(
        f"\ngenerated files: {t['files_added']} added, {t['files_removed']} removed, {t['files_changed']} changed"
    )
    lines.append(f"translation units: +{t['units_added']} -{t['units_removed']} ({t['units_changed']} changed)")
    for sign, files in (("A", r.files_added), ("D", r.files_removed), ("M", r.files_changed)):
        lines += [f"  {sign} {p}" for p in files]
    return "\n".join(lines) + "\n"


def format_markdown(r: DiffReport) -> str:
    """For a PR comment: a summary table, the cost per arch, then per-family details, long lists folded."""
    t = r.totals()
    out = [f"### k3gen diff: {r.base} {ARROW} {r.head}", ""]
    out += [f"> {n}" for n in r.notes] + ([""] if r.notes else [])
    if not r:
        return "\n".join(out + ["No differences in specializations, cache keys or generated files.", ""])
    out += [
        "| family | status | specializations added | removed | cache keys invalidated | libraries rebuilt |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    out += [
        f"| `{f.family}` | {f.status} | {len(f.added)} | {len(f.removed)} | {len(f.invalidated)} | "
        f"{sum(c.family == f.family for c in r.libraries)} |"
        for f in r.families
    ]
    out += [
        "",
        f"Generated files: **{t['files_added']} added, {t['files_removed']} removed, "
        f"{t['files_changed']} changed**; translation units: **+{t['units_added']} −{t['units_removed']}** "
        f"({t['units_changed']} changed).",
        "",
    ]
    if rows := price_rows(r, minus="−"):
        out += [
            f"**Cost per arch**: {_price_note(r)}.",
            "",
            "| " + " | ".join(PRICE_HEADER) + " |",
            "|" + " --- |" * len(PRICE_HEADER),
        ]
        out += ["| " + " | ".join(markdown(c) for c in row) + " |" for row in rows] + [""]
    if r.over_budget:
        out += ["**Over budget** (`k3gen diff --check-budget` and `k3gen check` fail):", ""]
        out += [f"- {markdown(e)}" for e in r.over_budget] + [""]
    for f in r.families:
        out += [f"#### `{f.family}`", ""]
        if f.added or f.removed:
            out += ["| change | dtype cell | variants | archs | specializations |", "| --- | --- | --- | --- | --- |"]
            for sign, refs in (("added", f.added), ("removed", f.removed)):
                for cell, variants, archs, n in grouped(refs):
                    shown = markdown("; ".join(variants) or "—")
                    out.append(f"| {sign} | {markdown(cell)} | {shown} | {', '.join(archs)} | {n} |")
            out.append("")
        if f.changes:
            out += ["| what | name | old | new |", "| --- | --- | --- | --- |"]
            out += [
                f"| {c.kind} | `{markdown(c.name)}` | {markdown(c.old) if c.old is not None else '—'} | "
                f"{markdown(c.new) if c.new is not None else '—'} |"
                for c in _folded(f.changes)
            ]
            out.append("")
        prices = r.pricing.families.get(f.family, {}) if r.pricing else {}
        if prices:
            out += [
                "| arch | units + / − / changed | compile | library bytes | library key | prices |",
                "| --- | --- | --- | --- | --- | --- |",
            ]
            keys = {c.arch: c for c in r.libraries if c.family == f.family}
            for arch, p in prices.items():
                key = f"`{_library_text(keys[arch]).split(' ', 1)[1]}`" if arch in keys else "unchanged"
                out.append(
                    f"| {arch} | +{p.units_added} / −{p.units_removed} / {p.units_changed} | "
                    f"{p.seconds:.1f} s | {_bytes_text(p)} | {key} | {_estimated_text(p)} |"
                )
            out.append("")
        if f.invalidated:
            out += [f"<details><summary>{len(f.invalidated)} cache keys invalidated</summary>", ""]
            out += [f"- `{i}`" for i in f.invalidated] + ["", "</details>", ""]
    for title, files in (("added", r.files_added), ("removed", r.files_removed), ("changed", r.files_changed)):
        if files:
            out += [f"<details><summary>{len(files)} generated files {title}</summary>", ""]
            out += [f"- `{p}`" for p in files] + ["", "</details>", ""]
    return "\n".join(out)


def format_json(r: DiffReport) -> str:
    """For tools: every list in full, keys sorted, totals precomputed."""
    data = asdict(r)
    data["totals"] = r.totals()
    data["units_added"], data["units_removed"], data["units_changed"] = r.units_added, r.units_removed, r.units_changed
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


FORMATS = {"text": format_text, "markdown": format_markdown, "json": format_json}


# ---------------------------------------------------------------------------------------------
# Git plumbing


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
        f"{p.tuning.unreadable} at {short} is not a tuning table this k3gen reads: its picks are not compared"
        for p in old_plans
        if p.tuning is not None and p.tuning.unreadable
    ]
    return compare(
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
