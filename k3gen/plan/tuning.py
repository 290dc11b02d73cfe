"""Tunables (issue 13): a spec's knobs, the configs they span, and the checked-in table of picks.

The spec's `tuning:` names knobs (constants the template reads, each with its candidates) and the
buckets of M. Every candidate config is a set of template arguments, compiled into each variant's
unit like the dtypes; `specs/tuning/<family>.<device>.yaml`, written by `k3gen tune` on a GPU
(k3gen.tune.run) and reviewed like a spec, picks one config per variant and bucket.

A table never blocks a build (issue 25). Each variant's entry names the identity of what was
measured: the family's rendered kernel code (kernel header and backend primitives, not the units
that hold the picks), its knobs, configs, buckets and test shape, and the variant itself (dtypes,
params, flags, vector width). A variant with no entry, or whose identity is no longer the current
one (the kernel, the knobs or their candidates, or the variant changed since), is *untuned*: it runs
the spec's default config, and `k3gen build`, `k3gen check` and `k3gen diff` say so, one located line
per family. What stays a located error is a table that is not a table: malformed, a pick that is none
of the configs its row timed (a hand edit, in a stale entry too), a variant the family does not generate,
a second table of one family, or a table of no family.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from k3gen.runtime.files import Refused, read_text
from k3gen.spec.bounds import MAX_TABLE_BYTES, MAX_TABLE_NODES
from k3gen.spec.errors import SpecError, SpecErrors
from k3gen.spec.model import tuning_configs
from k3gen.spec.yaml_lines import LocatedData, parse_yaml
from k3gen.tune.table import FORMAT, KEYS  # the format's one home: its writer is beside them

TABLE_DIR = "specs/tuning"
DEVICE = re.compile(r"[a-z0-9_]{1,64}")  # the device part of a table's file name (k3gen.tune.run.device_slug)
NO_TABLE, NO_PICK, STALE = "no table", "no pick", "stale"


@dataclass(frozen=True)
class Tuning:
    """A family's resolved tunables: configs (0 is the spec's default) and the picks of its table.

    `picks` and `claims` are what the table says; `settled()` keeps the picks whose claim is the
    current identity and names every other variant in `untuned` (variant -> NO_TABLE, NO_PICK or STALE).
    """

    knobs: list[str]
    configs: list[dict]  # config index -> {knob: value}
    buckets: list[int]  # upper bounds of M, increasing
    shape: dict  # the other dims the tuner times at (the largest test size of each)
    table_file: str | None = None  # specs/tuning/<family>.<device>.yaml; None: no table yet
    picks: dict = field(default_factory=dict)  # variant name -> config index per bucket
    claims: dict = field(default_factory=dict)  # variant name -> the identity the table says it measured
    device: str = ""
    located: LocatedData | None = None
    untuned: dict = field(default_factory=dict)  # after settled(): variant -> why it runs the default
    current: dict = field(default_factory=dict)  # after settled(): variant -> its identity now
    unreadable: str = ""  # read leniently (an older revision's table): the file this k3gen could not read

    def bucket_configs(self, variant: str) -> list[int]:
        """The config of each bucket for one variant: the table's picks, else the default."""
        return self.picks.get(variant, [0] * len(self.buckets))

    def tuned(self, variant: str) -> bool:
        return variant in self.picks

    def label(self, index: int) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.configs[index].items())

    def command(self, family: str) -> str:
        return f"k3gen tune --family {family}"

    def settled(self, variants: list[str], current: dict[str, str]) -> Tuning:
        """The picks that measured the current code (`current`: variant -> identity); the rest untuned."""
        picks, untuned = {}, {}
        for name in variants:
            if self.table_file is None:
                untuned[name] = NO_TABLE
            elif name not in self.claims:
                untuned[name] = NO_PICK
            elif self.claims[name] != current[name]:
                untuned[name] = STALE
            else:
                picks[name] = self.picks[name]
        return replace(self, picks=picks, untuned=untuned, current=dict(current))

    def untuned_note(self, family: str, spec_file: str, spec_line: int, total: int) -> SpecError | None:
        """The one located line a build prints for a family with untuned variants, else None."""
        if not self.untuned:
            return None
        default = self.label(0)
        if self.table_file is None:
            return SpecError(
                spec_file,
                spec_line,
                family,
                "tuning",
                f"untuned: no table {TABLE_DIR}/{family}.DEVICE.yaml yet; all {total} variants run the spec's "
                f"default config ({default}); tune on a GPU with `{self.command(family)}`",
            )
        by_reason: dict[str, list[str]] = {}
        for name, why in self.untuned.items():
            by_reason.setdefault(why, []).append(name)
        said = {
            NO_PICK: "no pick",
            STALE: "stale: the kernel code, knobs, shape or the variant changed since the table measured it",
        }
        parts = []
        for why, names in by_reason.items():
            shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
            parts.append(f"{said[why]}: {shown}")
        n = len(self.untuned)
        return SpecError(
            self.table_file,
            self.located.line_of(("picks",)) if self.located else 1,
            family,
            "picks",
            f"{n} of {total} variant{'s' * (total != 1)} untuned ({'; '.join(parts)}); "
            f"{'they run' if n != 1 else 'it runs'} the spec's default config ({default}) until "
            f"`{self.command(family)}` runs on {self.device or 'the device'}",
        )


def tables_of(root: Path, family: str) -> list[Path]:
    return sorted((Path(root) / TABLE_DIR).glob(f"{family}.*.yaml"))


def read_table(spec, file: str, root: Path, variant_names: list[str], lenient: bool = False) -> Tuning | None:
    """The family's tunables with what its table says, if it has one; raises SpecErrors when the
    table is not one (the picks' identities are checked later, against the rendered code: settled).
    lenient: such a table is left out instead (`unreadable` names it)."""
    if spec.tuning is None:
        return None
    try:
        return _read_table_file(spec, file, root, variant_names)
    except SpecErrors as exc:
        if not lenient:
            raise
        shape = {d: max(sizes) for d, sizes in spec.tests.dims.items() if d != "M"}
        base = Tuning(list(spec.tuning.knobs), tuning_configs(spec), list(spec.tuning.buckets), shape)
        return replace(base, unreadable=exc.errors[0].file)


def _read_table_file(spec, file: str, root: Path, variant_names: list[str]) -> Tuning:
    shape = {d: max(sizes) for d, sizes in spec.tests.dims.items() if d != "M"}
    base = Tuning(list(spec.tuning.knobs), tuning_configs(spec), list(spec.tuning.buckets), shape)
    tables = tables_of(root, spec.kernel)
    if not tables:
        return base
    if len(tables) > 1:  # no per-device choice in the generated code yet: one table per family
        names = ", ".join(f"{TABLE_DIR}/{t.name}" for t in tables)
        raise SpecErrors(
            [
                SpecError(
                    f"{TABLE_DIR}/{tables[1].name}",
                    1,
                    spec.kernel,
                    "<root>",
                    f"a second tuning table of {spec.kernel} ({names}); the generated dispatch "
                    "holds one table per family: keep the one for the serving device",
                )
            ]
        )
    rel = f"{TABLE_DIR}/{tables[0].name}"
    if not DEVICE.fullmatch(tables[0].name[len(spec.kernel) + 1 : -len(".yaml")]):  # the name reaches C++ comments
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
        text = read_text(tables[0], root, MAX_TABLE_BYTES, rel, "bounds.MAX_TABLE_BYTES")
    except Refused as exc:
        raise SpecErrors(
            [SpecError(rel, exc.line, spec.kernel, "<file>", f"{exc.reason}; a tuning table is a plain file")]
        ) from None
    located, errors = parse_yaml(text, rel, MAX_TABLE_NODES)
    if located is None:
        raise SpecErrors([replace(e, kernel=spec.kernel) for e in errors])
    picks, claims, device, errors = _read_table(located, rel, spec, base, variant_names)
    if errors:
        raise SpecErrors(errors)
    return replace(base, table_file=rel, picks=picks, claims=claims, device=device, located=located)


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
