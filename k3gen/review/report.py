"""The review report of `k3gen diff`: what changed between two trees, as plain data (k3gen.review.compare
builds it, k3gen.review.format prints it)."""

from __future__ import annotations

from dataclasses import dataclass, field

from k3gen.review.pricing import Pricing

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
    tests: object = None  # k3gen.review.impact.TestImpact: the tests the change touches

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
