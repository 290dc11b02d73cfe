"""A DiffReport printed: plain text for a terminal, Markdown for a PR comment, JSON for tools."""

from __future__ import annotations

import json
from dataclasses import asdict

from k3gen.review.pricing import Price
from k3gen.review.report import Change, DiffReport, FamilyDiff, LibraryChange, SpecializationRef
from k3gen.spec.escape import markdown


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
        lines.append("no differences in specializations, cache keys or generated files")
        return "\n".join(lines + _test_lines(r)) + "\n"
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
    return "\n".join(lines + _test_lines(r)) + "\n"


def _test_lines(r: DiffReport) -> list[str]:
    """What `k3gen test` runs for this change, and why; the unaffected counted (markdown lists them)."""
    t = r.tests
    if t is None:
        return []
    lines = [f"\ntests this change touches (`k3gen test`): {len(t.selected)} files, {len(t.unaffected)} unaffected"]
    if t.everything:
        return lines + [f"  every test: {t.everything}"]
    return lines + [f"  {s.path}: {s.why}" for s in t.selected]


def _test_markdown(r: DiffReport) -> list[str]:
    t = r.tests
    if t is None:
        return []
    out = [
        f"**Tests this change touches** (`k3gen test`): {len(t.selected)} files run, {len(t.unaffected)} unaffected.",
        "",
    ]
    if t.everything:
        return out + [f"Every test runs: {markdown(t.everything)}.", ""]
    out += ["| test file | why it runs |", "| --- | --- |"]
    out += [f"| `{markdown(s.path)}` | {markdown(s.why)} |" for s in t.selected] + [""]
    if t.unaffected:
        out += [f"<details><summary>{len(t.unaffected)} test files unaffected</summary>", ""]
        out += [f"- `{markdown(path)}`: {markdown(why)}" for path, why in t.unaffected] + ["", "</details>", ""]
    return out


def format_markdown(r: DiffReport) -> str:
    """For a PR comment: a summary table, the cost per arch, then per-family details, long lists folded."""
    t = r.totals()
    out = [f"### k3gen diff: {r.base} {ARROW} {r.head}", ""]
    out += [f"> {n}" for n in r.notes] + ([""] if r.notes else [])
    if not r:
        return "\n".join(
            out + ["No differences in specializations, cache keys or generated files.", "", *_test_markdown(r)]
        )
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
    return "\n".join(out + _test_markdown(r))


def format_json(r: DiffReport) -> str:
    """For tools: every list in full, keys sorted, totals precomputed."""
    data = asdict(r)
    data["totals"] = r.totals()
    data["units_added"], data["units_removed"], data["units_changed"] = r.units_added, r.units_removed, r.units_changed
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


FORMATS = {"text": format_text, "markdown": format_markdown, "json": format_json}
