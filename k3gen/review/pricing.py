"""What a change costs to build, per arch, and the budgets specs declare.

`price` compares the libraries of two trees (k3gen.render.keys: every unit with its key) and prices, per
family and arch, the translation units added, removed and changed (a changed key: the object is
recompiled), the compile seconds of what must be compiled, and the library's bytes before and after,
from the compile-cost table (k3gen.ship.costs). `over_budget` checks one tree against each spec's
`budget:`; `k3gen check` and `k3gen diff --check-budget` fail on what it returns.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from k3gen.plan.family import FamilyPlan
from k3gen.render.keys import Library
from k3gen.ship.costs import CostTable
from k3gen.spec.errors import SpecError


@dataclass
class Price:
    """The cost of going from the old units to the new ones, for one family × arch or summed."""

    specializations_added: int = 0
    specializations_removed: int = 0
    units_added: int = 0
    units_removed: int = 0
    units_changed: int = 0
    units: int = 0  # translation units compiled for the arch after the change
    seconds: float = 0.0  # compile seconds of the units added and changed (on one core)
    bytes_old: int = 0
    bytes_new: int = 0
    estimated: int = 0  # units after the change priced at a median (not in the table)
    estimated_units: list[str] = field(default_factory=list)  # "family/unit" of those, sorted

    def add(self, other: Price) -> None:
        for name in (
            "specializations_added",
            "specializations_removed",
            "units_added",
            "units_removed",
            "units_changed",
            "units",
            "seconds",
            "bytes_old",
            "bytes_new",
            "estimated",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.estimated_units = sorted({*self.estimated_units, *other.estimated_units})
        self.seconds = round(self.seconds, 2)

    def __bool__(self) -> bool:
        return bool(self.units_added or self.units_removed or self.units_changed or self.bytes_old != self.bytes_new)


@dataclass
class Pricing:
    table: str  # where the prices come from
    archs: dict[str, Price]  # arch -> the sum over every family (units, bytes: the arch's whole build), for
    #                          the archs where some family changed
    families: dict[str, dict[str, Price]]  # family -> arch -> its price, changed only


def price(old: list[Library], new: list[Library], table: CostTable, table_name: str) -> Pricing:
    olds = {(lib.family, lib.arch): lib for lib in old}
    news = {(lib.family, lib.arch): lib for lib in new}
    order = list(dict.fromkeys(lib.arch for lib in new + old))  # archs as the specs list them
    families: dict[str, dict[str, Price]] = {}
    archs: dict[str, Price] = {}
    for fam, arch in sorted(olds.keys() | news.keys(), key=lambda k: (k[0], order.index(k[1]))):
        p = _price_library(olds.get((fam, arch)), news.get((fam, arch)), table, fam, arch)
        archs.setdefault(arch, Price()).add(p)  # totals over every family: the arch's whole build
        if p:
            families.setdefault(fam, {})[arch] = p
    changed = {a for prices in families.values() for a in prices}
    return Pricing(table_name, {a: archs[a] for a in order if a in changed}, families)


def _price_library(old: Library | None, new: Library | None, table: CostTable, family: str, arch: str) -> Price:
    o = {u.file: u for u in old.units} if old else {}
    n = {u.file: u for u in new.units} if new else {}
    added = [f for f in n if f not in o]
    removed = [f for f in o if f not in n]
    changed = [f for f in n if f in o and n[f].key != o[f].key]
    compiled = [table.unit(family, arch, f) for f in (*added, *changed)]
    bytes_old, _ = table.library_bytes(family, arch, list(o)) if o else (0, 0)
    bytes_new, _ = table.library_bytes(family, arch, list(n)) if n else (0, 0)
    guessed = sorted(f"{family}/{f}" for f in n if table.unit(family, arch, f).estimated)  # of the units after

    def is_spec(f: str) -> bool:  # one unit per specialization but the dispatch
        return not f.startswith("dispatch.")

    return Price(
        specializations_added=sum(map(is_spec, added)),
        specializations_removed=sum(map(is_spec, removed)),
        units_added=len(added),
        units_removed=len(removed),
        units_changed=len(changed),
        units=len(n),
        seconds=round(sum(c.seconds for c in compiled), 2),
        bytes_old=bytes_old,
        bytes_new=bytes_new,
        estimated=len(guessed),
        estimated_units=guessed,
    )


def over_budget(plans: list[FamilyPlan], libs: list[Library], table: CostTable) -> list[SpecError]:
    """One located error per family × arch × limit exceeded, naming the numbers."""
    by_family: dict[str, list[Library]] = {}
    for lib in libs:
        by_family.setdefault(lib.family, []).append(lib)
    errors = []
    for p in plans:
        budget = p.spec.budget
        if budget is None:
            continue
        for lib in by_family.get(p.name, []):
            units = [u.file for u in lib.units]
            if budget.units_per_arch is not None and len(units) > budget.units_per_arch:
                errors.append(
                    p.error(
                        ("budget", "units_per_arch"),
                        (
                            f"{p.name} compiles {len(units)} translation units for {lib.arch} ({len(units) - 1} "
                            f"specializations and the dispatch), over its budget of {budget.units_per_arch}; "
                            "drop variants, or raise the budget in review"
                        ),
                    )
                )
            if budget.bytes_per_arch is not None:
                size, guessed = table.library_bytes(p.name, lib.arch, units)
                if size > budget.bytes_per_arch:
                    how = f", {guessed} of its units estimated" if guessed else ""
                    errors.append(
                        p.error(
                            ("budget", "bytes_per_arch"),
                            (
                                f"{p.name}'s library for {lib.arch} is {size:,} bytes (priced from the compile-cost "
                                f"table{how}), over its budget of {budget.bytes_per_arch:,}; drop variants, or raise "
                                "the budget in review"
                            ),
                        )
                    )
    return errors
