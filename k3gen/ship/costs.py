"""The compile-cost table: seconds and object bytes per translation unit, library bytes, per arch.

`k3gen compile` measures what it builds (ninja's own log gives each object's compile time; the
files give the bytes) and writes the table of that output directory, build/aot/compile_costs.json.
`k3gen compile --record-costs` also merges it into the checked-in table, specs/compile_costs.json,
which `k3gen diff` and `k3gen check` read to price a change. Format (JSON, keys sorted):

    {"format": 1,
     "units": {ARCH: {"FAMILY/UNIT_FILE": {"seconds": 1.2, "bytes": 123456}}},
     "libraries": {ARCH: {"FAMILY": {"bytes": 2345678, "unit_bytes": 2300000}}},
     "measured": {ARCH: "how: compiler, -j, cores"}}

Seconds are ninja's wall time per object under the run's -j, so they add up to compile time on one
core. A library's `unit_bytes` is the sum of its objects' bytes when it was measured, so a changed
unit set is priced as the library plus the objects added, minus those removed; a library never
measured is its objects plus the median of what linking added to those that were.

A unit the table lacks is priced at the median of its family's units on that arch (else on any
arch, else of the whole table) and counted as estimated, so a report can say how much is guessed.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from k3gen.runtime.files import write_if_changed

TABLE = "specs/compile_costs.json"  # relative to the project root; checked in
FORMAT = 1


class CostTableError(ValueError):
    """The table is not the format above; the message names the file and the entry."""


@dataclass(frozen=True)
class Cost:
    """What one unit costs: compile seconds and object bytes; `estimated` when not measured."""

    seconds: float
    bytes: int
    estimated: bool = False


@dataclass
class CostTable:
    units: dict[str, dict[str, dict]] = field(default_factory=dict)  # arch -> "family/unit" -> entry
    libraries: dict[str, dict[str, dict]] = field(default_factory=dict)  # arch -> family -> entry
    measured: dict[str, str] = field(default_factory=dict)  # arch -> how

    def to_json(self) -> str:
        data = {"format": FORMAT, "units": self.units, "libraries": self.libraries, "measured": self.measured}
        return json.dumps(data, indent=1, sort_keys=True) + "\n"

    def merge(self, other: CostTable) -> CostTable:
        """This table with every entry `other` measured put over it."""
        out = CostTable(
            {a: dict(u) for a, u in self.units.items()},
            {a: dict(lib) for a, lib in self.libraries.items()},
            dict(self.measured),
        )
        for arch, units in other.units.items():
            out.units.setdefault(arch, {}).update(units)
        for arch, libs in other.libraries.items():
            out.libraries.setdefault(arch, {}).update(libs)
        out.measured.update(other.measured)
        return out

    # ------------------------------------------------------------------ prices

    def unit(self, family: str, arch: str, unit: str) -> Cost:
        entry = self.units.get(arch, {}).get(f"{family}/{unit}")
        if entry is not None:
            return Cost(entry["seconds"], entry["bytes"])
        for pool in (self._family(family, arch), self._family(family, None), self._all()):
            if pool:
                return Cost(
                    statistics.median(e["seconds"] for e in pool),
                    int(statistics.median(e["bytes"] for e in pool)),
                    estimated=True,
                )
        return Cost(0.0, 0, estimated=True)

    def library_bytes(self, family: str, arch: str, units: list[str]) -> tuple[int, int]:
        """(estimated bytes of the family's library built from `units`, how many units were estimated)."""
        costs = [self.unit(family, arch, u) for u in units]
        guessed = sum(c.estimated for c in costs)
        recorded = self.libraries.get(arch, {}).get(family)
        total = sum(c.bytes for c in costs)
        if recorded is not None:
            return max(0, recorded["bytes"] + total - recorded["unit_bytes"]), guessed
        # Not measured: its objects plus what linking adds to the libraries that were (the runtime
        # linked in), on this arch if any were measured there.
        everywhere = [e for libs in self.libraries.values() for e in libs.values()]
        for pool in (list(self.libraries.get(arch, {}).values()), everywhere):
            if pool:
                return total + int(statistics.median(e["bytes"] - e["unit_bytes"] for e in pool)), guessed
        return total, guessed

    def _family(self, family: str, arch: str | None) -> list[dict]:
        archs = [arch] if arch else sorted(self.units)
        return [e for a in archs for k, e in self.units.get(a, {}).items() if k.split("/", 1)[0] == family]

    def _all(self) -> list[dict]:
        return [e for units in self.units.values() for e in units.values()]


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not a number a cost table holds")


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > 15:  # far above MAX_ARTIFACT_BYTES: never a 4,001-digit number
        raise ValueError(f"the integer {text[:20]}... has {len(text)} digits")
    return int(text)


def load(path: Path, shown: str = TABLE, root: Path | None = None) -> CostTable:
    """The table at path (read through the one reader: a plain file inside `root`, default its
    folder, at most MAX_COST_TABLE_BYTES); an empty one when there is none. Raise CostTableError
    when malformed or when a number is not finite, negative or beyond MAX_UNIT_SECONDS /
    MAX_ARTIFACT_BYTES."""
    from k3gen.runtime.files import Refused, read_text
    from k3gen.spec.bounds import MAX_COST_TABLE_BYTES

    if not path.exists() and not path.is_symlink():
        return CostTable()
    try:
        text = read_text(path, root or path.parent, MAX_COST_TABLE_BYTES, shown, "bounds.MAX_COST_TABLE_BYTES")
        data = json.loads(text, parse_constant=_refuse_constant, parse_int=_bounded_int)
    except Refused as exc:
        raise CostTableError(f"{shown}: {exc.reason}; a cost table is a plain file") from None
    except (OSError, ValueError) as exc:
        raise CostTableError(
            f"{shown}: not readable JSON ({exc}); rerun `k3gen compile --record-costs` or restore it from git"
        ) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise CostTableError(f"{shown}: not a format {FORMAT} cost table (see k3gen/ship/costs.py)")
    table = CostTable(data.get("units", {}), data.get("libraries", {}), data.get("measured", {}))
    problems = [
        f"units.{a}.{k}"
        for a, units in _items(table.units)
        for k, e in _items(units)
        if not _entry_ok(e, ("seconds", "bytes"))
    ]
    problems += [
        f"libraries.{a}.{k}"
        for a, libs in _items(table.libraries)
        for k, e in _items(libs)
        if not _entry_ok(e, ("bytes", "unit_bytes"))
    ]
    if problems or not isinstance(table.measured, dict):
        raise CostTableError(
            f"{shown}: entries that are not finite non-negative numbers within bounds.MAX_UNIT_SECONDS and "
            f"bounds.MAX_ARTIFACT_BYTES: {', '.join(problems[:5]) or 'measured'}{' …' if len(problems) > 5 else ''}"
        )
    return table


def save(path: Path, table: CostTable) -> bool:
    return write_if_changed(path, table.to_json())


def _items(mapping) -> list:
    return list(mapping.items()) if isinstance(mapping, dict) else [("?", None)]


def _entry_ok(entry, fields: tuple[str, ...]) -> bool:
    from k3gen.spec.bounds import MAX_ARTIFACT_BYTES, MAX_UNIT_SECONDS

    def ok(name: str) -> bool:
        v = entry.get(name)
        top = MAX_UNIT_SECONDS if name == "seconds" else MAX_ARTIFACT_BYTES
        return isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= top  # NaN fails both

    return isinstance(entry, dict) and all(ok(f) for f in fields)


# ---------------------------------------------------------------------- measuring a `k3gen compile`


def ninja_times(build_dir: Path) -> dict[str, float]:
    """{output path: seconds} of the last build of each output in ninja's log (.ninja_log)."""
    times: dict[str, float] = {}
    try:
        lines = (build_dir / ".ninja_log").read_text().splitlines()
    except OSError:
        return times
    for line in lines:
        parts = line.split("\t")
        if line.startswith("#") or len(parts) < 4:
            continue
        try:
            times[parts[3]] = (int(parts[1]) - int(parts[0])) / 1000
        except ValueError:
            continue
    return times


def measure(out: Path, targets: list, how: dict[str, str]) -> CostTable:
    """The table of what `k3gen compile` left in `out` for these targets (k3gen.ship.aot.Target): each
    object whose time ninja logged and that exists, each library that exists."""
    times = ninja_times(out)
    table = CostTable(measured=dict(how))
    for t in targets:
        req = t.request
        units = {}
        for src in req.sources:
            obj = f"{t.entry}/obj/{Path(src).stem}.o"
            if obj in times and (out / obj).is_file():
                units[f"{req.family}/{src}"] = {"seconds": round(times[obj], 2), "bytes": (out / obj).stat().st_size}
        table.units.setdefault(req.arch, {}).update(units)
        lib = out / t.entry / "lib.so"
        if lib.is_file() and len(units) == len(req.sources):
            table.libraries.setdefault(req.arch, {})[req.family] = {
                "bytes": lib.stat().st_size,
                "unit_bytes": sum(u["bytes"] for u in units.values()),
            }
    return table
