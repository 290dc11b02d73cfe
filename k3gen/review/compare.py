"""Two trees compared: their plans and rendered files in, a DiffReport out; a pure function.

Per family the specializations added and removed, the keys that changed (k3gen.render.keys: the keys
`k3gen list` shows and the runtime uses), the spec-level changes (gates, constants, tie orders,
flags, params, tuning picks, untuned variants) and what the change costs to build per arch
(k3gen.review.pricing, from the compile-cost table); then the generated files and units touched.
"""

from __future__ import annotations

import json

from k3gen.plan.family import FamilyPlan, Specialization
from k3gen.render import keys as identity
from k3gen.review.pricing import price
from k3gen.review.report import Change, DiffReport, FamilyDiff, LibraryChange, SpecializationRef
from k3gen.ship import costs


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

    return {p: t for p, t in files.items() if mine(p) or p in identity.SHARED_HEADERS}


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


def _settled(p: FamilyPlan, files: dict[str, str] | None):
    """The family's tuning with its picks checked against its rendered code (k3gen.render)."""
    from k3gen.render.keys import settled_from

    if p.tuning is None or files is None:
        return p.tuning
    return settled_from(p, files)


def _table(t) -> dict[str, str]:
    """Each device's tuning table, by device, and the device the spec names to serve the others."""
    if t is None:
        return {}
    out = {tb.device: tb.file for tb in t.tables}
    if t.fallback:
        out["fallback"] = f"{t.fallback} (serves a GPU with no table of its own, and a variant its own has no pick for)"
    return out


def _untuned(t) -> dict[str, str]:
    """Each variant without a current pick, what it runs instead (the fallback device's picks, or the
    spec's default config) and why: per table (`variant on device`), or per variant where the family has
    no table at all."""
    if t is None:
        return {}
    out = {v: f"untuned (default config): {why}" for v, why in t.untuned.items()}
    for tb in t.tables:
        for v, why in tb.untuned.items():
            runs = "default config" if t.serving(tb, v) is None else f"the {t.fallback} table's picks"
            out[f"{v} on {tb.device}"] = f"untuned ({runs}): {why} in {tb.file}"
    return out


def _picks(p: FamilyPlan, t) -> dict[str, str]:
    """The config each device runs per variant and bucket where a table picks it, its own or the spec's
    fallback's (nothing without a table)."""
    if t is None:
        return {}
    out = {}
    for tb in t.tables:
        low = 0
        for i, high in enumerate(t.buckets):
            for v in p.variants:
                if t.serving(tb, v.name) is None:
                    continue
                config = t.bucket_configs(tb, v.name)[i]
                out[f"{v.name} on {tb.device}, {low} < M <= {high}"] = t.label(config) + (
                    " (default)" if config == 0 else ""
                )
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
