"""The figures of the README and docs/, rendered from the committed files that measured them.

README.md and docs/*.md quote build, compile and benchmark numbers only between markers

    <!-- k3gen:figures NAME [DEVICE] -->
    ...
    <!-- /k3gen:figures -->

and each such section is rendered here: from `specs/compile_costs.json`, from the specs, or from
`bench/results/<DEVICE>/*.json` (one folder per device, named as bench/bench.py names it). The same
tables make `bench/results/README.md`, the summary of every device's results. So a figure in the
prose is always one a committed file holds. `python -m k3gen.review.figures` rewrites the sections
and the summary; `--check` (and tests/test_figures.py) fails when they disagree.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import statistics
import sys
from pathlib import Path

from k3gen.runtime.files import write_if_changed
from k3gen.ship import costs
from k3gen.spec.escape import markdown

README = "README.md"
DOCS = "docs"
RESULTS = "bench/results"
SUMMARY = f"{RESULTS}/README.md"
SECTION = re.compile(
    r"(<!-- k3gen:figures (?P<name>[a-z_]+)(?: (?P<device>[a-z0-9][a-z0-9-]*))? -->\n)(?P<body>.*?)"
    r"(<!-- /k3gen:figures -->)",
    re.S,
)
MAX_RESULT_BYTES = 4 * 1024 * 1024  # one bench result file
# The batch sizes of the summary table: decode, a mid-size batch, prefill; plus each family's largest.
SUMMARY_MS = (1, 128, 1024)


def devices(root: Path) -> list[str]:
    """The device folders of bench/results that hold results."""
    base = root / RESULTS
    return sorted(d.name for d in base.iterdir() if d.is_dir() and any(d.glob("*.json"))) if base.is_dir() else []


def figure_files(root: Path) -> list[str]:
    """The prose files whose figures sections are rendered: the README and every page of docs/."""
    return [README, *sorted(f"{DOCS}/{p.name}" for p in (root / DOCS).glob("*.md"))]


def _results(root: Path, device: str, name: str) -> dict | None:
    from k3gen.runtime.files import Refused, read_text

    rel = f"{RESULTS}/{device}/{name}.json"
    if not (root / rel).is_file():
        return None
    try:
        return json.loads(read_text(root / rel, root, MAX_RESULT_BYTES, rel))
    except (Refused, ValueError):
        return None


def _said(data: dict) -> str:
    meta = data.get("meta", {})
    return f"{meta.get('device', '?')}, torch {meta.get('torch', '?')}; {meta.get('method', '')}".rstrip("; ")


def _missing(device: str, name: str) -> str:
    return f"No committed results (`{RESULTS}/{device}/{name}.json`).\n"


def _link(here: str, target: str) -> str:
    """`target` (relative to the root) as a link relative to the file `here`."""
    return os.path.relpath(target, os.path.dirname(here) or ".").replace(os.sep, "/")


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


def bench_section(root: Path, device: str, family: str) -> str:
    """One family's results: µs per call, % of a device copy of the same bytes, × torch.compile of the
    oracle, per dtype row and batch size (`bench/results/<device>/<family>.json`)."""
    data = _results(root, device, family)
    if data is None:
        return _missing(device, family)
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
    return "\n".join([f"`{RESULTS}/{device}/{family}.json` ({_said(data)}):", "", *out]) + "\n"


# bench/host.py's trees, as a user reads them: the C++ call path (the default) and the Python path.
HOST_TREES = {"after": "C++ call path (default)", "python path": "Python path (`K3GEN_HOST_PATH=python`)"}


def host_section(root: Path, device: str) -> str:
    """The host cost per eager call (`bench/results/<device>/host.json`): µs and the ratio to
    torch.sigmoid in the same process, for each call path."""
    data = _results(root, device, "host")
    if data is None:
        return _missing(device, "host")
    trees = [t for t in HOST_TREES if any(r["tree"] == t for r in data["rows"])]
    calls = list(dict.fromkeys(r["call"] for r in data["rows"] if r["tree"] in trees))
    by = {(r["tree"], r["call"]): r for r in data["rows"]}
    out = ["| call | " + " | ".join(HOST_TREES[t] for t in trees) + " |", "|" + " --- |" * (len(trees) + 1)]
    for call in calls:
        cells = [
            f"{by[(tr, call)]['us']:.1f} µs ({by[(tr, call)]['ratio_to_sigmoid']:.2f}×)" if (tr, call) in by else "—"
            for tr in trees
        ]
        out.append(f"| {call} | " + " | ".join(cells) + " |")
    head = f"`{RESULTS}/{device}/host.json` ({_said(data)}; in parentheses: × torch.sigmoid):"
    return "\n".join([head, "", *out]) + "\n"


def routers_section(root: Path, here: str = README, plans: list | None = None) -> str:
    """The bundled routers (every spec of a routing template that declares `routing:`): what each
    computes, from its spec, and what its call refuses (its gates)."""
    from k3gen.plan import resolve_all
    from k3gen.spec.load import load_specs

    out = [
        "| router (spec) | E | K | scoring | selection bias | groups | renormalize (default) | scale (default) "
        "| output | score × bias dtypes | serves a call only if |",
        "|" + " --- |" * 11,
    ]
    for p in plans if plans is not None else resolve_all(load_specs(root), root):
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
        spec = _link(here, f"specs/{s.kernel}.yaml")
        out.append(
            f"| [{s.kernel}]({spec}) | {s.constants['num_experts']} | {s.constants['top_k']} | "
            f"{scoring} | {bias} | {groups} | {renorm[r.renormalize]} ({default}) | "
            f"{scalars['routed_scaling_factor'].default:g} | {'by rank' if r.sorted else 'by expert id'} | {dtypes} "
            f"| {refuses} |"
        )
    return "\n".join(out) + "\n"


def routers_speed_section(root: Path, device: str) -> str:
    """Every bundled router (`bench/results/<device>/routers.json`): µs at each M, the peer (SGLang's
    router timed on the same device, where one serves the model) and × torch.compile of the model's
    own routing code."""
    data = _results(root, device, "routers")
    if data is None:
        return _missing(device, "routers")
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
            peer = r.get("peer_us")
            said = f"SGLang {_us(peer)}" if peer is not None else "no peer"
            cells.append(f"{_us(r['us'])} µs ({said}), {r['speedup_vs_compile']:.1f}× compile")
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join([f"`{RESULTS}/{device}/routers.json` ({_said(data)}; bf16 scores):", "", *out]) + "\n"


def goals_section(root: Path, device: str) -> str:
    """Each goal bench/bench.py holds for this device, met or missed: the routers' (the stricter of the
    peer and a stated goal) and route_quant_fused's (route_topk timed in the same run, plus a margin)."""
    out = ["| kernel | M | k3gen | peer | goal | |", "| --- | --- | --- | --- | --- | --- |"]
    said = None
    for name in ("routers", "route_quant_fused"):
        data = _results(root, device, name)
        if data is None:
            continue
        said = said or _said(data)
        for r in data["rows"]:
            if r.get("goal_us") is None:
                continue
            kernel = r["family"] if name == "routers" else f"route_quant_fused ({r['dtypes']})"
            peer = r.get("peer_us")
            if peer is not None:
                peer_said = f"{_us(peer)} µs"
            else:
                peer_said = f"route_topk {_us(r['route_topk_us'])} µs" if "route_topk_us" in r else "—"
            verdict = "met" if r["us"] <= r["goal_us"] else "missed"
            out.append(
                f"| {kernel} | {r['M']} | {_us(r['us'])} µs | {peer_said} | ≤ {_us(r['goal_us'])} µs | {verdict} |"
            )
    if said is None:
        return f"No committed results (`{RESULTS}/{device}/`).\n"
    met = sum(line.endswith("| met |") for line in out)
    head = f"`{RESULTS}/{device}/` ({said}): {met} of {len(out) - 2} goals met."
    return "\n".join([head, "", *out]) + "\n"


E2E = "adoption/e2e_routing"  # bench/e2e_routing.py's results, beside the kernels' (not a family's table)
E2E_MS = (1, 128, 8192)


def e2e_section(root: Path, device: str) -> str:
    """The routing step of one MoE layer inside a transformers model (the router's GEMM and its select),
    the stock model against the model after use_k3gen_routing, per architecture at decode to prefill M."""
    data = _results(root, device, E2E)
    if data is None:
        return _missing(device, E2E)
    by = {(r["arch"], r["M"]): r for r in data["rows"]}
    out = ["| architecture | family | " + " | ".join(f"M = {m}" for m in E2E_MS) + " |"]
    out.append("|" + " --- |" * (len(E2E_MS) + 2))
    for arch in dict.fromkeys(r["arch"] for r in data["rows"]):
        cells = []
        for m in E2E_MS:
            r = by.get((arch, m))
            cells.append("—" if r is None else f"{_us(r['stock_us'])} → {_us(r['k3gen_us'])} µs ({r['speedup']:.2f}×)")
        out.append(f"| {arch} | {by[next(k for k in by if k[0] == arch)]['family']} | " + " | ".join(cells) + " |")
    speedups = [r["speedup"] for r in data["rows"]]
    meta = data.get("meta", {})
    head = (
        f"`{RESULTS}/{device}/{E2E}.json` ({meta.get('device', '?')}, torch {meta.get('torch', '?')}, "
        f"{meta.get('dtype', '?')}; CUDA-graph replay): stock → swapped, {min(speedups):.2f}× to "
        f"{max(speedups):.2f}× faster over {len(speedups)} cases (M = {min(r['M'] for r in data['rows'])} to "
        f"{max(r['M'] for r in data['rows'])}):"
    )
    return "\n".join([head, "", *out]) + "\n"


def _summary_rows(root: Path, device: str) -> list[tuple[str, str, dict[int, dict]]]:
    """(family, case, {M: row}): every router of routers.json, then the first case of each other
    family's file (route_topk.json repeats a router of routers.json, host.json is no kernel)."""
    out = []
    routers = _results(root, device, "routers")
    if routers is not None:
        for name in dict.fromkeys(r["family"] for r in routers["rows"]):
            out.append((name, "bf16 scores", {r["M"]: r for r in routers["rows"] if r["family"] == name}))
    seen = {name for name, _, _ in out}
    for path in sorted((root / RESULTS / device).glob("*.json")):
        if path.stem in seen or path.stem in ("routers", "host"):
            continue
        data = _results(root, device, path.stem)
        if data is None or not data.get("rows"):
            continue
        case = data["rows"][0]["dtypes"]
        out.append((path.stem, case, {r["M"]: r for r in data["rows"] if r["dtypes"] == case}))
    return sorted(out)


def _cell(r: dict) -> str:
    return f"{_us(r['us'])} µs ({r['speedup_vs_compile']:.1f}×)"


def summary_section(root: Path, device: str, here: str = README) -> str:
    """One row per kernel on one device: µs per call and × torch.compile at decode, mid and prefill
    batch sizes and at the largest M timed. The per-case tables are docs/performance.md's."""
    rows = _summary_rows(root, device)
    if not rows:
        return f"No committed results (`{RESULTS}/{device}/`).\n"
    out = [
        "| kernel | case | " + " | ".join(f"M = {m}" for m in SUMMARY_MS) + " | largest M |",
        "|" + " --- |" * (len(SUMMARY_MS) + 3),
    ]
    for family, case, by_m in rows:
        cells = [
            f"{_us(by_m[m]['us'])} µs ({by_m[m]['speedup_vs_compile']:.1f}×)" if m in by_m else "—" for m in SUMMARY_MS
        ]
        top = max(by_m)
        cells.append(f"{_us(by_m[top]['us'])} µs ({by_m[top]['speedup_vs_compile']:.1f}×) at {top}")
        page = _link(here, f"generated/docs/{family}.md")
        out.append(f"| [{family}]({page}) | {case} | " + " | ".join(cells) + " |")
    first = _results(root, device, rows[0][0]) or _results(root, device, "routers") or {}
    head = (
        f"`{RESULTS}/{device}/` ({_said(first)}). In parentheses: × torch.compile of the same computation "
        "in plain torch (for a router, of the model's own routing code):"
    )
    return "\n".join([head, "", *out]) + "\n"


def families_section(root: Path, here: str = README, plans: list | None = None) -> str:
    """Every bundled family with what it computes and its specializations, linked to its generated page."""
    from k3gen.plan import resolve_all
    from k3gen.spec.load import load_specs

    out = ["| family | what it computes | dtype cells | per arch | archs |", "| --- | --- | --- | --- | --- |"]
    for p in sorted(plans if plans is not None else resolve_all(load_specs(root), root), key=lambda p: p.name):
        archs = ", ".join(a for b in p.backends for a in p.archs(b))
        page = _link(here, f"generated/docs/{p.name}.md")
        out.append(
            f"| [{p.name}]({page}) | {markdown(p.spec.summary)} | {len(p.spec.dtypes.generated_cells())} "
            f"| {len(p.variants)} | {archs} |"
        )
    return "\n".join(out) + "\n"


def _schema_type(prop: dict) -> str:
    """A JSON Schema property's type in words, a definition as a link to its table."""
    if "$ref" in prop:
        name = prop["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    if "anyOf" in prop:
        return " or ".join(dict.fromkeys(_schema_type(p) for p in prop["anyOf"]))
    if "enum" in prop:
        return " \\| ".join(f"`{v}`" for v in prop["enum"])
    if "const" in prop:
        return f"`{prop['const']}`"
    kind = prop.get("type", "any")
    if kind == "array":
        return f"list of {_schema_type(prop.get('items', {}))}"
    if kind == "object" and isinstance(prop.get("additionalProperties"), dict):
        return f"map to {_schema_type(prop['additionalProperties'])}"
    return {"null": "null", "integer": "int", "string": "str", "boolean": "bool", "number": "number"}.get(kind, kind)


def _refs(prop: dict) -> list[str]:
    """The definitions a property refers to, directly or through a list, map or union."""
    if "$ref" in prop:
        return [prop["$ref"].rsplit("/", 1)[-1]]
    inner = [*prop.get("anyOf", ()), prop.get("items"), prop.get("additionalProperties")]
    return [name for p in inner if isinstance(p, dict) and p for name in _refs(p)]


def _schema_table(title: str, node: dict, defs: dict) -> list[str]:
    required = set(node.get("required", ()))
    out = [f"### {title}", ""]
    if node.get("description"):
        out += [markdown(" ".join(node["description"].split())), ""]
    out += ["| field | type | required | what it says |", "| --- | --- | --- | --- |"]
    for name, prop in node.get("properties", {}).items():
        what = prop.get("description") or next(
            (defs[r].get("description", "").split(". ")[0].rstrip(".") for r in _refs(prop) if r in defs), ""
        )
        default = f"default: `{json.dumps(prop['default'])}`" if "default" in prop else ""
        said = "; ".join(markdown(" ".join(s.split())) for s in (what, default) if s)
        out.append(f"| `{name}` | {_schema_type(prop)} | {'yes' if name in required else 'no'} | {said} |")
    return [*out, ""]


def spec_fields_section(root: Path) -> str:
    """Every field of a spec file, from the model's JSON Schema (`k3gen schema`): the spec file's own
    fields, then each definition it refers to, in name order."""
    from k3gen.spec.model import KernelSpec

    schema = KernelSpec.model_json_schema(by_alias=True)
    defs = schema.get("$defs", {})
    out = _schema_table("KernelSpec", schema, defs)
    for name, node in sorted(defs.items()):
        out += _schema_table(name, node, defs)
    return "\n".join(out).rstrip("\n") + "\n"


SECTIONS = (
    "compile, families, routers, spec_fields, host DEVICE, routers_speed DEVICE, summary DEVICE, goals DEVICE, "
    "end_to_end DEVICE, bench_<family> DEVICE"
)


def render_section(root: Path, name: str, device: str | None, here: str = README, plans: list | None = None) -> str:
    if name == "compile":
        return compile_section(root)
    if name == "routers":
        return routers_section(root, here, plans)
    if name == "families":
        return families_section(root, here, plans)
    if name == "spec_fields":
        return spec_fields_section(root)
    if device is not None:
        if name == "routers_speed":
            return routers_speed_section(root, device)
        if name == "host":
            return host_section(root, device)
        if name == "summary":
            return summary_section(root, device, here)
        if name == "goals":
            return goals_section(root, device)
        if name == "end_to_end":
            return e2e_section(root, device)
        if name.startswith("bench_"):
            return bench_section(root, device, name.removeprefix("bench_"))
    raise ValueError(f"{here}: no figures section '{name}{' ' + device if device else ''}'; known: {SECTIONS}")


def render(root: Path, text: str, here: str = README, plans: list | None = None) -> str:
    """The text of `here` with every figures section rendered anew (`plans`: the specs' plans, when
    the caller has them: k3gen build)."""

    def one(m: re.Match) -> str:
        return m.group(1) + render_section(root, m.group("name"), m.group("device"), here, plans) + m.group(5)

    return SECTION.sub(one, text)


def summary_text(root: Path) -> str:
    """bench/results/README.md: per device, the summary table and every family's table."""
    out = [
        "<!-- @generated by python -m k3gen.review.figures from bench/results/*/*.json — do not edit. -->",
        "# Benchmark results",
        "",
        "The current results of `bench/bench.py`, one folder per device (a JSON and a plot per family).",
        "How they are measured, and what they are compared with: "
        f"[docs/performance.md]({_link(SUMMARY, 'docs/performance.md')}).",
    ]
    for device in devices(root):
        out += ["", f"## {device}", "", summary_section(root, device, SUMMARY).rstrip("\n")]
        for path in sorted((root / RESULTS / device).glob("*.json")):
            section = {"host": host_section, "routers": routers_speed_section}.get(path.stem)
            body = section(root, device) if section else bench_section(root, device, path.stem)
            plot = f"{path.stem}.png"
            out += ["", f"### {path.stem}", "", body.rstrip("\n")]
            if (path.parent / plot).is_file():
                out += ["", f"![{path.stem} on {device}]({device}/{plot})"]
    return "\n".join(out) + "\n"


def _targets(root: Path, plans: list | None = None) -> dict[str, str]:
    """{relative path: its rendered text} for every file this module writes."""
    if plans is None:
        from k3gen.plan import resolve_all
        from k3gen.spec.load import load_specs

        plans = resolve_all(load_specs(root), root)
    out = {}
    for rel in figure_files(root):
        if (root / rel).is_file():
            out[rel] = render(root, (root / rel).read_text(encoding="utf-8"), rel, plans)
    out[SUMMARY] = summary_text(root)
    return out


def write_figures(root: Path, plans: list) -> list[str]:
    """Render every figures section anew from `plans` and the committed results; the files it rewrote.
    k3gen build calls it, so an edit's figures (a new arch in the families table) follow the spec."""
    written = []
    for rel, new in _targets(root, plans).items():
        path = root / rel
        if not path.is_file():  # a project without the page keeps without it
            continue
        if path.read_text(encoding="utf-8") != new:
            write_if_changed(path, new)
            written.append(rel)
    return written


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m k3gen.review.figures",
        description="render the figures sections of README.md and docs/, and bench/results/README.md",
    )
    p.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[2])
    p.add_argument("--check", action="store_true", help="exit 1 with a diff when a figure is stale")
    args = p.parse_args(argv)
    stale = 0
    for rel, new in _targets(args.root).items():
        path = args.root / rel
        old = path.read_text(encoding="utf-8") if path.is_file() else ""
        if old == new:
            continue
        if args.check:
            sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), new.splitlines(True), rel, rel))
            print(f"{rel}: figures are stale; run `python -m k3gen.review.figures`", file=sys.stderr)
            stale = 1
        else:
            write_if_changed(path, new)
            print(f"{rel}: figures rendered")
    return stale


if __name__ == "__main__":
    sys.exit(main())
