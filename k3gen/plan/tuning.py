"""Tunables (issue 13): a spec's knobs, the configs they span, and the checked-in tables of picks.

The spec's `tuning:` names knobs (constants the template reads, each with its candidates) and the
buckets of M. Every candidate config is a set of template arguments, compiled into each variant's
unit like the dtypes; `specs/tuning/<family>.<device>.yaml`, written by `k3gen tune` on a GPU
(k3gen.tune.run) and reviewed like a spec, picks one config per variant and bucket for that device.

A family has a table per device it was tuned on (none, one or several), in device order. Every
variant unit compiles the picks of every table, a row each, and the wrapper passes the row of the
GPU a call runs on (k3gen.runtime.tables): the table whose device is that GPU's short name
(k3gen.runtime.devices.device_slug), else the one the spec's `tuning.fallback` declares, else none
and the spec's default config runs.

A table never blocks a build (issue 25). Each variant's entry names the identity of what was
measured: the family's rendered kernel code (kernel header and backend primitives, not the units
that hold the picks), its knobs, configs, buckets and test shape, and the variant itself (dtypes,
params, flags, vector width). A variant with no entry, or whose identity is no longer the current
one (the kernel, the knobs or their candidates, or the variant changed since), is *untuned* in that
table: on that device it runs the picks of the spec's `tuning.fallback` device where that table has a
current one, else the spec's default config, and `k3gen build`, `k3gen check` and `k3gen diff` say
so, one located line per table. What stays a located error is a table that is not a
table: malformed, a pick that is none of the configs its row timed (a hand edit, in a stale entry
too), a variant the family does not generate, a file name that is not FAMILY.DEVICE.yaml, a table of
no family; and a `tuning.fallback` that names no table of the family.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field, replace
from pathlib import Path

from k3gen.runtime.devices import SHORT_NAME, device_slug
from k3gen.runtime.files import Refused, read_text
from k3gen.spec.bounds import MAX_TABLE_BYTES, MAX_TABLE_NODES
from k3gen.spec.errors import SpecError, SpecErrors
from k3gen.spec.model import tuning_configs
from k3gen.spec.yaml_lines import LocatedData, parse_yaml
from k3gen.tune.table import FORMAT, KEYS  # the format's one home: its writer is beside them

TABLE_DIR = "specs/tuning"
DEVICE = SHORT_NAME  # the device part of a table's file name
NO_TABLE, NO_PICK, STALE = "no table", "no pick", "stale"


@dataclass(frozen=True)
class Table:
    """What one device's table of a family says: `specs/tuning/<family>.<device>.yaml`.

    `picks` and `claims` are what the file says; after Tuning.settled(), `picks` keeps the picks whose
    claim is the current identity and `untuned` names every other variant (NO_PICK or STALE).
    """

    device: str  # the file name's DEVICE: the short name of the GPU it was tuned on
    file: str
    device_name: str = ""  # that GPU as the table names it (torch.cuda.get_device_name)
    picks: dict = field(default_factory=dict)  # variant name -> config index per bucket
    claims: dict = field(default_factory=dict)  # variant name -> the identity the table says it measured
    located: LocatedData | None = None
    untuned: dict = field(default_factory=dict)  # after settled(): variant -> why it runs the default here

    def tuned(self, variant: str) -> bool:
        return variant in self.picks


@dataclass(frozen=True)
class Tuning:
    """A family's resolved tunables: configs (0 is the spec's default) and its tables, one per device.

    `untuned` (after settled()) names every variant when the family has no table at all (NO_TABLE);
    with tables, each table names its own untuned variants.
    """

    knobs: list[str]
    configs: list[dict]  # config index -> {knob: value}
    buckets: list[int]  # upper bounds of M, increasing
    shape: dict  # the other dims the tuner times at (the largest test size of each)
    tables: tuple[Table, ...] = ()  # by device name; the row a variant unit compiles for each, in this order
    fallback: str | None = None  # the device whose table serves a GPU with none of its own (the spec's)
    untuned: dict = field(default_factory=dict)  # after settled(): variant -> NO_TABLE when there is no table
    current: dict = field(default_factory=dict)  # after settled(): variant -> its identity now
    unreadable: tuple[str, ...] = ()  # read leniently (an older revision's tables): the files left out

    @property
    def devices(self) -> list[str]:
        return [t.device for t in self.tables]

    def serving(self, table: Table, variant: str) -> Table | None:
        """The table whose picks a variant runs on `table`'s GPU: its own where it has a current pick,
        else the spec's fallback device's where that one has (the declared nearest device measured
        this code: a better guess than the default), else None, the default config."""
        if table.tuned(variant):
            return table
        fallback = next((t for t in self.tables if t.device == self.fallback), None)
        return fallback if fallback is not None and fallback.tuned(variant) else None

    def bucket_configs(self, table: Table, variant: str) -> list[int]:
        """The config of each bucket for one variant on one table's GPU (serving): picks, else the default."""
        source = self.serving(table, variant)
        return source.picks[variant] if source is not None else [0] * len(self.buckets)

    def untuned_runs(self, table: Table, variants: list[str]) -> str:
        """What variants untuned in `table` run on its GPU, in words: the fallback's picks, the default
        config, or each for some."""
        default = f"the spec's default config ({self.label(0)})"
        served = sum(self.serving(table, v) is not None for v in variants)
        if not served:
            return default
        picks = f"the {self.fallback} table's picks (the spec's fallback)"
        if served == len(variants):
            return picks
        return f"{picks} where it has them ({served} of {len(variants)}), else {default}"

    def label(self, index: int) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.configs[index].items())

    def command(self, family: str) -> str:
        return f"k3gen tune --family {family}"

    def other_gpus(self) -> str:
        """What serves a GPU that has no table of its own, in words."""
        if self.fallback in self.devices:
            return f"the {self.fallback} table (the spec's fallback)"
        return f"the spec's default config ({self.label(0)})"

    def settled(self, variants: list[str], current: dict[str, str]) -> Tuning:
        """The picks that measured the current code (`current`: variant -> identity); the rest untuned."""
        tables = []
        for t in self.tables:
            picks, untuned = {}, {}
            for name in variants:
                if name not in t.claims:
                    untuned[name] = NO_PICK
                elif t.claims[name] != current[name]:
                    untuned[name] = STALE
                else:
                    picks[name] = t.picks[name]
            tables.append(replace(t, picks=picks, untuned=untuned))
        untuned = {} if self.tables else dict.fromkeys(variants, NO_TABLE)
        return replace(self, tables=tuple(tables), untuned=untuned, current=dict(current))

    def untuned_notes(self, family: str, spec_file: str, spec_line: int, total: int) -> list[SpecError]:
        """The located lines a build prints for a family with untuned variants: one for a family
        without a table, else one per table with any."""
        default = self.label(0)
        if not self.tables:
            if not self.untuned:
                return []
            return [
                SpecError(
                    spec_file,
                    spec_line,
                    family,
                    "tuning",
                    f"untuned: no table {TABLE_DIR}/{family}.DEVICE.yaml yet; all {total} variants run the spec's "
                    f"default config ({default}); tune on a GPU with `{self.command(family)}`",
                )
            ]
        said = {
            NO_PICK: "no pick",
            STALE: "stale: the kernel code, knobs, shape or the variant changed since the table measured it",
        }
        notes = []
        for t in self.tables:
            if not t.untuned:
                continue
            by_reason: dict[str, list[str]] = {}
            for name, why in t.untuned.items():
                by_reason.setdefault(why, []).append(name)
            parts = []
            for why, names in by_reason.items():
                shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
                parts.append(f"{said[why]}: {shown}")
            n = len(t.untuned)
            notes.append(
                SpecError(
                    t.file,
                    t.located.line_of(("picks",)) if t.located else 1,
                    family,
                    "picks",
                    f"{n} of {total} variant{'s' * (total != 1)} untuned ({'; '.join(parts)}); "
                    f"{'they run' if n != 1 else 'it runs'} {self.untuned_runs(t, list(t.untuned))} until "
                    f"`{self.command(family)}` runs on {t.device_name or t.device}",
                )
            )
        return notes


def tables_of(root: Path, family: str) -> list[Path]:
    return sorted((Path(root) / TABLE_DIR).glob(f"{family}.*.yaml"))


def device_of(family: str, path: Path) -> str:
    """The DEVICE of a table file FAMILY.DEVICE.yaml (checked by the reader: DEVICE)."""
    return path.name[len(family) + 1 : -len(".yaml")]


def read_tables(
    spec, file: str, root: Path, variant_names: list[str], lenient: bool = False, located: LocatedData | None = None
) -> Tuning | None:
    """The family's tunables with what each of its tables says; raises SpecErrors, every table's
    together, when a table is not one or `tuning.fallback` names no table (the picks' identities are
    checked later, against the rendered code: settled). `located`: the spec's line map.
    lenient: such a table is left out instead (`unreadable` names it), and the fallback not checked."""
    if spec.tuning is None:
        return None
    shape = {d: max(sizes) for d, sizes in spec.tests.dims.items() if d != "M"}
    base = Tuning(list(spec.tuning.knobs), tuning_configs(spec), list(spec.tuning.buckets), shape)
    tables, unreadable, errors = [], [], []
    for path in tables_of(root, spec.kernel):
        try:
            tables.append(_read_table_file(spec, path, root, base, variant_names))
        except SpecErrors as exc:
            if lenient:
                unreadable.append(exc.errors[0].file)
            else:
                errors += exc.errors
    tables.sort(key=lambda t: t.device)
    fallback = spec.tuning.fallback
    devices = [t.device for t in tables]
    if fallback is not None and fallback not in devices and not lenient and not errors:
        there = ", ".join(f"{TABLE_DIR}/{spec.kernel}.{d}.yaml" for d in devices) or "none"
        errors.append(
            SpecError(
                file,
                located.line_of(("tuning", "fallback")) if located is not None else 1,
                spec.kernel,
                "tuning.fallback",
                f"fallback {fallback} names no table: {TABLE_DIR}/{spec.kernel}.{fallback}.yaml does not exist "
                f"(the tables there are: {there}); name a device that has one, or drop `fallback:` (a GPU "
                "without a table of its own then runs the spec's default config)",
            )
        )
    if errors:
        raise SpecErrors(errors)
    return replace(base, tables=tuple(tables), fallback=fallback, unreadable=tuple(unreadable))


def _read_table_file(spec, path: Path, root: Path, base: Tuning, variant_names: list[str]) -> Table:
    rel = f"{TABLE_DIR}/{path.name}"
    device = device_of(spec.kernel, path)
    if not DEVICE.fullmatch(device):  # the name reaches C++ comments and the wrapper
        raise SpecErrors(
            [
                SpecError(
                    rel,
                    1,
                    spec.kernel,
                    "<root>",
                    f"the file name is not {spec.kernel}.DEVICE.yaml "
                    "with DEVICE in [a-z0-9_]+ (as `k3gen tune` names it)",
                )
            ]
        )
    try:
        text = read_text(path, root, MAX_TABLE_BYTES, rel, "bounds.MAX_TABLE_BYTES")
    except Refused as exc:
        raise SpecErrors(
            [SpecError(rel, exc.line, spec.kernel, "<file>", f"{exc.reason}; a tuning table is a plain file")]
        ) from None
    located, errors = _parsed_table(text, rel)
    if located is None:
        raise SpecErrors([replace(e, kernel=spec.kernel) for e in errors])
    picks, claims, name, errors = _read_table(located, rel, spec, base, variant_names)
    if not errors and name and device_slug(name) != device:
        errors.append(
            SpecError(
                rel,
                located.line_of(("device",)),
                spec.kernel,
                "device",
                f"the table measured {ascii(name)[1:-1][:80]}, whose short name is {device_slug(name)}, not "
                f"{device} as its file name says; rename it {TABLE_DIR}/{spec.kernel}.{device_slug(name)}.yaml "
                f"(a GPU without a table of its own takes the one `tuning.fallback` names)",
            )
        )
    if errors:
        raise SpecErrors(errors)
    return Table(device, rel, name, picks, claims, located)


@functools.lru_cache(maxsize=64)
def _parsed_table(text: str, rel: str) -> tuple[LocatedData | None, list[SpecError]]:
    """A table's parse, once per process for the same bytes and name: a table holds hundreds of rows,
    and every resolve of the project (k3gen diff resolves two trees; the tests resolve many copies)
    reads the same ones. Callers only read what it returns."""
    return parse_yaml(text, rel, MAX_TABLE_NODES)


def _read_table(located: LocatedData, rel: str, spec, base: Tuning, variant_names: list[str]):
    data, errors = located.data, []
    cmd = base.command(spec.kernel)

    def err(path: tuple, message: str) -> None:
        errors.append(SpecError(rel, located.line_of(path), spec.kernel, ".".join(map(str, path)) or "<root>", message))

    if not isinstance(data, dict):
        err((), f"a tuning table is a mapping written by `{cmd}`")
        return {}, {}, "", errors
    if data.get("format") != FORMAT:
        err(("format",), f"format {data.get('format')!r} is not {FORMAT}; rerun `{cmd}` (or delete the table)")
        return {}, {}, "", errors
    for key in data:
        if key not in KEYS:
            err((key,), f"{ascii(key)[:60]} is not a key of a tuning table ({', '.join(KEYS)})")
    if data.get("family") != spec.kernel:
        err(("family",), f"the table is of family {data.get('family')!r}, its file name says {spec.kernel}")
    device = data.get("device")
    if not isinstance(device, str) or len(device) > 200:
        err(("device",), "the device is a name of at most 200 characters, as `k3gen tune` writes it")
        device = ""
    table = data.get("picks")
    if not isinstance(table, dict):
        err(("picks",), f"picks is a mapping of variant -> {{identity, rows}}; rerun `{cmd}`")
        table = {}
    picks, claims = {}, {}
    # A table measured under other knobs or candidates than the spec's now (a knob added, dropped or
    # given other values): its picks are stale like any other edit's, not malformed (issue 25).
    spec_configs = {json.dumps(c, sort_keys=True) for c in base.configs}
    same_knobs = data.get("knobs") == base.knobs
    for name, entry in table.items():
        where = ("picks", name)
        if name not in variant_names:
            err(
                where,
                f"{ascii(name)[:80]} is no variant of {spec.kernel} (the spec no longer generates it); "
                f"delete its entry, or rerun `{cmd}`",
            )
            continue
        if not isinstance(entry, dict) or set(entry) != {"identity", "rows"} or not isinstance(entry["identity"], str):
            err(where, f"an entry is {{identity: HASH, rows: [one row per bucket]}}; rerun `{cmd}`")
            continue
        claims[name] = entry["identity"]
        rows = entry["rows"]
        if not isinstance(rows, list):
            picks[name] = [0] * len(base.buckets)
            continue
        chosen = []
        for i, row in enumerate(rows):
            config = row.get("config") if isinstance(row, dict) else None
            measured = row.get("all_us") if isinstance(row, dict) else None
            if isinstance(measured, dict) and measured and _config_key(config) not in measured:
                # A hand edit, whatever the spec says now: so checked in stale rows too.
                timed = "; ".join(ascii(k)[1:-1] if isinstance(k, str) else ascii(k) for k in list(measured)[:8])
                err(
                    (*where, "rows", i, "config"),
                    f"config {ascii(config)[:120]} is none of the {len(measured)} configs its row timed "
                    f"(all_us: {timed[:400]}); picks are the tuner's: restore the row, or rerun `{cmd}`",
                )
                chosen.append(0)
            elif config in base.configs:
                chosen.append(base.configs.index(config))
            elif not same_knobs or (isinstance(measured, dict) and not set(measured) <= spec_configs):
                chosen.append(0)  # the identity names the configs too: settled() finds the entry stale
            else:
                err(
                    (*where, "rows", i, "config"),
                    f"config {ascii(config)[:120]} is not a candidate of tuning.knobs "
                    f"({len(base.configs)} configs: {'; '.join(base.label(c) for c in range(len(base.configs)))}); "
                    f"rerun `{cmd}`",
                )
                chosen.append(0)
        # rows of other buckets belong to another identity: stale, not malformed (settled says so)
        picks[name] = chosen if len(chosen) == len(base.buckets) else [0] * len(base.buckets)
    return picks, claims, device, errors


def _config_key(config) -> str | None:
    """A config as `k3gen tune` keys its row's timings (k3gen.tune.run), or None for no config."""
    if not isinstance(config, dict) or not all(isinstance(k, str) for k in config):
        return None
    return json.dumps(config, sort_keys=True, default=repr)


def check_tables(root: Path, families: dict[str, str]) -> list[SpecError]:
    """Every file under specs/tuning/ is a table of a family (`families`: kernel -> its spec file):
    one of no family is a located error naming both files, a file of another kind is refused."""
    folder = Path(root) / TABLE_DIR
    if not folder.is_dir():
        return []
    errors = []
    for path in sorted(folder.iterdir()):
        rel = f"{TABLE_DIR}/{path.name}"
        if not path.name.endswith(".yaml"):
            errors.append(
                SpecError(
                    ascii(rel)[1:-1],
                    1,
                    "",
                    "<file>",
                    "specs/tuning/ holds tuning tables, FAMILY.DEVICE.yaml, only"
                    + ("; rename it to end in .yaml" if path.name.endswith(".yml") else "; move it elsewhere"),
                )
            )
            continue
        family = path.name.split(".", 1)[0]
        if family not in families:
            stem_spec = f"specs/{family}.yaml"
            spec_now = next((f for k, f in families.items() if f == stem_spec), None)
            why = (
                f"{stem_spec} now declares kernel {next(k for k, f in families.items() if f == stem_spec)!r}"
                if spec_now
                else f"{stem_spec} is gone"
            )
            errors.append(
                SpecError(
                    ascii(rel)[1:-1],
                    1,
                    family,
                    "<file>",
                    f"a tuning table of family {family}, which no spec declares ({why}); delete it, or "
                    f"rerun `k3gen tune` for the family that replaced it",
                )
            )
    return errors
