"""The README's figures, rendered from the committed files that measured them (issue 25).

The README quotes build, compile and benchmark numbers only between markers

    <!-- k3gen:figures NAME -->
    ...
    <!-- /k3gen:figures -->

and each such section is rendered here from `specs/compile_costs.json` and `bench/results/*.json`,
so a figure in the README is always one a committed file holds. `python -m k3gen.review.readme` rewrites the
sections; `python -m k3gen.review.readme --check` (and tests/test_readme.py) fails when they disagree.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import statistics
import sys
from pathlib import Path

from k3gen.runtime.files import write_if_changed
from k3gen.ship import costs

README = "README.md"
RESULTS = "bench/results"
SECTION = re.compile(r"(<!-- k3gen:figures (?P<name>[a-z_]+) -->\n)(?P<body>.*?)(<!-- /k3gen:figures -->)", re.S)
MAX_RESULT_BYTES = 4 * 1024 * 1024  # one bench result file


def _results(root: Path, name: str) -> dict | None:
    from k3gen.runtime.files import Refused, read_text

    path = root / RESULTS / f"{name}.json"
    if not path.is_file():
        return None
    try:
        return json.loads(read_text(path, root, MAX_RESULT_BYTES, f"{RESULTS}/{name}.json"))
    except (Refused, ValueError):
        return None


def compile_section(root: Path) -> str:
    """Per arch the table measured: units, one-core compile seconds (sum, median, largest), library bytes."""
    table = costs.load(root / costs.TABLE, root=root)
    rows = [
        "| arch | units measured | compile, one core (all units) | per unit: median / largest "
        "| libraries, all families | measured with |"
    ]
    rows.append("| --- | --- | --- | --- | --- | --- |")
    for arch, units in table.units.items():
        seconds = [u["seconds"] for u in units.values()]
        libs = table.libraries.get(arch, {})
        lib_bytes = sum(lib["bytes"] for lib in libs.values())
        rows.append(
            f"| {arch} | {len(units)} | {sum(seconds):.0f} s | {statistics.median(seconds):.1f} s / "
            f"{max(seconds):.1f} s | {lib_bytes / 1e6:.2f} MB ({len(libs)} libraries) | "
            f"{table.measured.get(arch, '?')} |"
        )
    return "\n".join([f"From `{costs.TABLE}` (`k3gen compile --record-costs`):", "", *rows]) + "\n"


def _us(value: float) -> str:
    return f"{value:.2f}" if value < 100 else f"{value:.0f}"


def bench_section(root: Path, family: str) -> str:
    """One family's results: µs per call, % of a device copy of the same bytes, × torch.compile of the
    oracle, per dtype row and batch size (`bench/results/<family>.json`)."""
    data = _results(root, family)
    if data is None:
        return f"No committed results (`{RESULTS}/{family}.json`).\n"
    rows = data["rows"]
    ms = sorted({r["M"] for r in rows})
    keys = list(dict.fromkeys(r["dtypes"] for r in rows))
    by = {(r["dtypes"], r["M"]): r for r in rows}
    head = "| dtypes | " + " | ".join(f"M = {m}" for m in ms) + " |"
    out = [head, "|" + " --- |" * (len(ms) + 1)]
    for k in keys:
        cells = []
        for m in ms:
            r = by.get((k, m))
            cells.append(
                "—"
                if r is None
                else f"{_us(r['us'])} µs, {100 * r['ratio_to_copy']:.0f}% copy, {r['speedup_vs_compile']:.2f}× compile"
            )
        out.append(f"| {k} | " + " | ".join(cells) + " |")
    meta = data.get("meta", {})
    said = f"{meta.get('device', '?')}, torch {meta.get('torch', '?')}; {meta.get('method', '')}".rstrip("; ")
    return "\n".join([f"`{RESULTS}/{family}.json` ({said}):", "", *out]) + "\n"


def host_section(root: Path) -> str:
    """The host path per call (`bench/results/host.json`): µs and the ratio to torch.sigmoid, per tree."""
    data = _results(root, "host")
    if data is None:
        return f"No committed results (`{RESULTS}/host.json`).\n"
    trees = list(dict.fromkeys(r["tree"] for r in data["rows"]))
    calls = list(dict.fromkeys(r["call"] for r in data["rows"]))
    by = {(r["tree"], r["call"]): r for r in data["rows"]}
    out = ["| call | " + " | ".join(trees) + " |", "|" + " --- |" * (len(trees) + 1)]
    for call in calls:
        cells = [
            f"{by[(tr, call)]['us']:.1f} µs ({by[(tr, call)]['ratio_to_sigmoid']:.2f}×)" if (tr, call) in by else "—"
            for tr in trees
        ]
        out.append(f"| {call} | " + " | ".join(cells) + " |")
    meta = data.get("meta", {})
    said = f"{meta.get('device', '?')}, torch {meta.get('torch', '?')}; {meta.get('method', '')}".rstrip("; ")
    return "\n".join([f"`{RESULTS}/host.json` ({said}; in parentheses: × torch.sigmoid):", "", *out]) + "\n"


def routers_section(root: Path) -> str:
    """The bundled routers (every spec of a routing template that declares `routing:`): what each
    computes, from its spec, and what its call refuses (its gates)."""
    from k3gen.plan import resolve_all
    from k3gen.spec.load import load_specs

    out = [
        "| router (spec) | E | K | scoring | selection bias | groups | renormalize (default) | scale (default) "
        "| output | score × bias dtypes | serves a call only if |",
        "|" + " --- |" * 11,
    ]
    for p in resolve_all(load_specs(root), root):
        s = p.spec
        if p.route is None or s.routing is None:
            continue
        r, scalars = p.route, s.signature.scalars
        scoring = f"{r.scoring} {'after' if r.scoring_at == 'after' else 'before'} the top-K"
        bias = {"scores": "on the scores", "logits": "on the logits", "none": "none"}[r.bias]
        groups = f"{r.groups.count}, keep {r.groups.keep} ({r.groups.score})" if r.groups else "none"
        renorm = {
            "positive": "w / sum",
            "add_eps": f"w / (sum + {r.renorm_eps:g})",
            "clamp": f"w / max(sum, {r.renorm_eps:g})",
        }
        default = "on" if scalars["renormalize"].default else "off"
        dtypes = ", ".join(" × ".join(c) for c in s.dtypes.generated_cells())
        refuses = " and ".join(f"`{g.check}`" for g in s.gates)
        out.append(
            f"| [{s.kernel}](specs/{s.kernel}.yaml) | {s.constants['num_experts']} | {s.constants['top_k']} | "
            f"{scoring} | {bias} | {groups} | {renorm[r.renormalize]} ({default}) | "
            f"{scalars['routed_scaling_factor'].default:g} | {'by rank' if r.sorted else 'by expert id'} | {dtypes} "
            f"| {refuses} |"
        )
    return "\n".join(out) + "\n"


def routers_speed_section(root: Path) -> str:
    """Every bundled router against its goal (`bench/results/routers.json`): µs at each M, the goal
    (SGLang's router measured on the same H200, or the issue's stricter target), × torch.compile of
    the model's own routing code; met where below the goal and (M <= 1024) at least 5× compile."""
    data = _results(root, "routers")
    if data is None:
        return f"No committed results (`{RESULTS}/routers.json`).\n"
    rows = data["rows"]
    ms = sorted({r["M"] for r in rows})
    by = {(r["family"], r["M"]): r for r in rows}
    out = ["| router | " + " | ".join(f"M = {m}" for m in ms) + " |", "|" + " --- |" * (len(ms) + 1)]
    for name in dict.fromkeys(r["family"] for r in rows):
        cells = []
        for m in ms:
            r = by.get((name, m))
            if r is None:
                cells.append("—")
                continue
            goal = r.get("goal_us")
            met = (goal is None or r["us"] < goal) and (m > 1024 or r["speedup_vs_compile"] >= 5.0)
            said = f"goal < {_us(goal)}" if goal is not None else "no goal"
            cells.append(
                f"{_us(r['us'])} µs ({said}), {r['speedup_vs_compile']:.1f}× compile: {'met' if met else '**missed**'}"
            )
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    meta = data.get("meta", {})
    said = f"{meta.get('device', '?')}, torch {meta.get('torch', '?')}; {meta.get('method', '')}".rstrip("; ")
    return "\n".join([f"`{RESULTS}/routers.json` ({said}; bf16 scores):", "", *out]) + "\n"


def render_section(root: Path, name: str) -> str:
    if name == "compile":
        return compile_section(root)
    if name == "routers":
        return routers_section(root)
    if name == "routers_speed":
        return routers_speed_section(root)
    if name == "host":
        return host_section(root)
    if name.startswith("bench_"):
        return bench_section(root, name.removeprefix("bench_"))
    raise ValueError(
        f"{README}: no figures section '{name}'; known: compile, host, routers, routers_speed, bench_<family>"
    )


def render(root: Path, text: str) -> str:
    """The README text with every figures section rendered anew."""

    def one(m: re.Match) -> str:
        return m.group(1) + render_section(root, m.group("name")) + m.group(4)

    return SECTION.sub(one, text)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m k3gen.review.readme", description="render the README's figures sections"
    )
    p.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[2])
    p.add_argument("--check", action="store_true", help="exit 1 with a diff when the README's figures are stale")
    args = p.parse_args(argv)
    path = args.root / README
    old = path.read_text(encoding="utf-8")
    new = render(args.root, old)
    if args.check:
        if old != new:
            sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), new.splitlines(True), README, README))
            print(f"{README}: figures are stale; run `python -m k3gen.review.readme`", file=sys.stderr)
            return 1
        return 0
    if old != new:
        write_if_changed(path, new)
        print(f"{README}: figures rendered")
    return 0


if __name__ == "__main__":
    sys.exit(main())
