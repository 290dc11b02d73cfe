"""The tuning table's format, the one home of its writer and of the names its reader checks.

`k3gen tune` (k3gen.tune.run, on a GPU, without the generator) writes a table with `write`; `k3gen
build` reads it back with located errors (k3gen.plan.tuning, which takes FORMAT and KEYS from here).
YAML with JSON flow values, so each row is one line a reviewer can read. Standard library only.
"""

from __future__ import annotations

import json

FORMAT = 2
KEYS = ("format", "family", "device", "provenance", "knobs", "buckets", "picks", "discarded")  # in file order


def write(data: dict, picks: dict, discarded: list, device: str, provenance: dict) -> str:
    """The table of one family (`data`: its generated/k3kernels/tuning/<family>.json; `picks`:
    variant -> one row per bucket; `discarded`: the configs the oracle refused)."""
    j = lambda v: json.dumps(v, sort_keys=True)  # noqa: E731
    lines = [
        f"# Tuning table of {data['family']} on {device}, written by `k3gen tune --family {data['family']}`.",
        "# Review it like a spec: `k3gen build` checks it against " + data["spec"] + " and compiles one",
        "# config per variant and bucket of M into the variant units. A variant's identity is what was",
        "# measured (kernel code, knobs, shape, the variant); where it is no longer current, or a variant",
        "# has no entry, that variant runs the spec's default config until this table is retuned.",
        "# A row: the bucket's bound M (timed there), the pick and its us per call, the runner-up and",
        "# margin = runner-up us / pick us - 1 (negative: faster, but not by --min-gain over the default).",
        f"format: {FORMAT}",
        f"family: {data['family']}",
        f"device: {j(device)}",
        f"provenance: {j(provenance)}",
        f"knobs: {j(data['knobs'])}",
        f"buckets: {j(data['buckets'])}",
        "picks:",
    ]
    measured = {v["name"]: v["identity"] for v in data["variants"]}
    for name, rows in picks.items():
        lines += [f"  {name}:", f"    identity: {j(measured[name])}", "    rows:"]
        lines += [f"      - {j(row)}" for row in rows]
    lines.append("discarded:" + ("" if discarded else " []"))
    lines += [f"  - {j(d)}" for d in discarded]
    return "\n".join(lines) + "\n"
