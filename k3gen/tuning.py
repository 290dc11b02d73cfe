"""Tunables (issue 13): a spec's knobs, the configs they span, and the checked-in table of picks.

The spec's `tuning:` names knobs (constants the template reads, each with its candidates) and the
buckets of M. Every candidate config is a set of template arguments, compiled into each variant's
unit like the dtypes; `specs/tuning/<family>.<device>.yaml`, written by `k3gen tune` on a GPU
(k3gen.tuning_run) and reviewed like a spec, picks one config per variant and bucket. This module
reads that table at `k3gen build`, checks it against the spec (located errors, never a silent
fallback) and gives the plan the picks, which the variant units compile into a lookup on M.

The table names the identity of what it measured: a hash of the family's rendered kernel code (the
kernel header and backend primitives, not the units that hold the picks), its knobs, configs,
buckets and variants. When the kernel changes the identity does, and the stale table is an error
naming the command that retunes it.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from .errors import SpecError, SpecErrors
from .routing import declares_routing
from .yaml_lines import LocatedData, parse_yaml

TABLE_DIR = "specs/tuning"
DEVICE = re.compile(r"[a-z0-9_]{1,64}")  # the device part of a table's file name (k3gen.tuning_run.device_slug)
FORMAT = 1


@dataclass(frozen=True)
class Tuning:
    """A family's resolved tunables: configs (0 is the spec's default) and the picks of its table."""

    knobs: list[str]
    configs: list[dict]  # config index -> {knob: value}
    buckets: list[int]  # upper bounds of M, increasing
    shape: dict  # the other dims the tuner times at (the largest test size of each)
    table_file: str | None = None  # specs/tuning/<family>.<device>.yaml; None: no table yet
    picks: dict = field(default_factory=dict)  # variant name -> config index per bucket
    claimed_identity: str = ""  # what the table says it measured (checked at render: check_identity)
    device: str = ""
    located: LocatedData | None = None

    def bucket_configs(self, variant: str) -> list[int]:
        """The config of each bucket for one variant: the table's picks, else the default."""
        return self.picks.get(variant, [0] * len(self.buckets))

    def label(self, index: int) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.configs[index].items())

    def command(self, family: str) -> str:
        return f"k3gen tune --family {family}"


def configs_of(spec) -> list[dict]:
    """Every candidate config, the spec's default (its constants) first, then in product order."""
    knobs = spec.tuning.knobs
    default = {k: spec.constants[k] for k in knobs}
    rest = [dict(zip(knobs, vs)) for vs in itertools.product(*knobs.values())]
    return [default, *(c for c in rest if c != default)]


def resolve(spec, file: str, root: Path, variant_names: list[str]) -> Tuning | None:
    """The family's tunables with the picks of its table, if it has one; raises SpecErrors."""
    if spec.tuning is None:
        return None
    shape = {d: max(sizes) for d, sizes in spec.tests.dims.items() if d != "M"}
    base = Tuning(list(spec.tuning.knobs), configs_of(spec), list(spec.tuning.buckets), shape)
    tables = sorted((root / TABLE_DIR).glob(f"{spec.kernel}.*.yaml"))
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
    located, errors = parse_yaml(tables[0].read_text(encoding="utf-8"), rel)
    if located is None:
        raise SpecErrors(errors)
    picks, claimed, device, errors = _read_table(located, rel, spec, base, variant_names)
    if errors:
        raise SpecErrors(errors)
    return Tuning(base.knobs, base.configs, base.buckets, base.shape, rel, picks, claimed, device, located)


def _read_table(located: LocatedData, rel: str, spec, base: Tuning, variant_names: list[str]):
    data, errors = located.data, []
    cmd = base.command(spec.kernel)

    def err(path: tuple, message: str) -> None:
        errors.append(SpecError(rel, located.line_of(path), spec.kernel, ".".join(map(str, path)) or "<root>", message))

    if not isinstance(data, dict):
        err((), f"a tuning table is a mapping written by `{cmd}`")
        return {}, "", "", errors
    if data.get("format") != FORMAT:
        err(("format",), f"format {data.get('format')!r} is not {FORMAT}; rerun `{cmd}`")
    if data.get("family") != spec.kernel:
        err(("family",), f"the table is of family {data.get('family')!r}, its file name says {spec.kernel}")
    if data.get("buckets") != base.buckets:
        err(
            ("buckets",),
            f"buckets {data.get('buckets')!r} are not the spec's {base.buckets} (tuning.buckets); rerun `{cmd}`",
        )
    picks: dict = {}
    table = data.get("picks") if isinstance(data.get("picks"), dict) else {}
    for name in variant_names:
        rows = table.get(name)
        if not isinstance(rows, list) or len(rows) != len(base.buckets):
            err(
                ("picks", name) if name in table else ("picks",),
                f"no pick per bucket for variant {name}; rerun `{cmd}`",
            )
            continue
        chosen = []
        for i, row in enumerate(rows):
            config = row.get("config") if isinstance(row, dict) else None
            if config not in base.configs:
                err(
                    ("picks", name, i, "config"),
                    f"config {config!r} is not a candidate of tuning.knobs "
                    f"({len(base.configs)} configs); rerun `{cmd}`",
                )
                chosen.append(0)
            else:
                chosen.append(base.configs.index(config))
        picks[name] = chosen
    for name in table:
        if name not in variant_names:
            err(("picks", name), f"{name} is no variant of {spec.kernel}; rerun `{cmd}`")
    claimed = data.get("identity")
    if not isinstance(claimed, str):
        err(("identity",), f"no identity; rerun `{cmd}`")
        claimed = ""
    return picks, claimed, str(data.get("device", "")), errors


def identity(p, kernel_header: str, backend_header: str) -> str:
    """What a table measured: the family's kernel code (rendered, before any picks) and its knobs."""
    t = p.tuning
    meaning = {
        "family": p.name,
        "knobs": t.knobs,
        "configs": t.configs,
        "buckets": t.buckets,
        "shape": t.shape,
        "variants": [v.name for v in p.variants],
    }
    h = hashlib.sha256(json.dumps(meaning, sort_keys=True).encode())
    for text in (kernel_header, backend_header):
        h.update(b"\0" + text.encode())
    return h.hexdigest()


def check_identity(p, current: str) -> None:
    """A table that measured another kernel is a located error naming the command that retunes it."""
    t = p.tuning
    if t is None or t.table_file is None or t.claimed_identity == current:
        return
    raise SpecErrors(
        [
            SpecError(
                t.table_file,
                t.located.line_of(("identity",)),
                p.name,
                "identity",
                f"the table measured another kernel or knobs (identity {t.claimed_identity[:16]}, "
                f"now {current[:16]}): its picks may be wrong for this code; rerun "
                f"`{t.command(p.name)}` on {t.device or 'the device'} and commit the table",
            )
        ]
    )


def tuner_data(p, current: str, oracle_spec: dict) -> dict:
    """What the GPU half (k3gen.tuning_run) needs, from generated/ alone (no spec loader there)."""
    t = p.tuning
    return {
        "format": FORMAT,
        "family": p.name,
        "spec": p.file,
        "identity": current,
        "knobs": t.knobs,
        "configs": t.configs,
        "buckets": t.buckets,
        "shape": t.shape,
        "oracle": p.spec.oracle,
        "oracle_spec": oracle_spec,
        "routing": {r.backend: r.test_data() for r in p.backend_routing()} if declares_routing(p.spec) else {},
        "cases": list(p.spec.tests.cases),
        "variants": [{"name": v.name, "variant": v.as_dict()} for v in p.variants],
    }
