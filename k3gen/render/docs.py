"""The reference docs of each family (generated/docs/), computed from the plan as tables of text.

Every table is built here, cell by cell, so templates/common/doc.md.j2 only prints them. Text is
escaped for Markdown table cells; nothing depends on the time or the machine, so the pages are as
deterministic as the rest of generated/.
"""

from __future__ import annotations

import itertools
import json
import shlex
from dataclasses import dataclass

from k3gen.plan.family import BackendRouting, FamilyPlan
from k3gen.render.python import wrapper_signature
from k3gen.render.support import (
    COMPILED,
    DECLARED,
    HIP_COMPILED_IN_CI,
    HIP_NOT_COMPILED_WHY,
    RUN,
    RUN_ON_GPU,
    arch_state,
)
from k3gen.runtime.dtypes import DTYPES
from k3gen.runtime.toolchain import device_only_flags
from k3gen.spec.escape import markdown
from k3gen.spec.routing import SIGMOIDS, WAVE_LANES


@dataclass(frozen=True)
class Table:
    """A Markdown table: header cells and rows of cells, already escaped."""

    header: list[str]
    rows: list[list[str]]


def code(text) -> str:
    """Inline code, with a longer fence when the text itself holds a backtick."""
    text = str(text)
    fence = "``" if "`" in text else "`"
    pad = " " if fence == "``" else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _table(header, rows) -> Table:
    return Table([markdown(h) for h in header], [[markdown(c) for c in r] for r in rows])


def _status(p: FamilyPlan, values: tuple) -> str:
    cellmap = dict(zip(p.spec.dtypes.axes, values))
    for excluded, reason in p.excluded:
        if excluded == cellmap:
            return f"excluded: {reason}"
    return "generated"


def matrix_table(p: FamilyPlan) -> Table:
    """One axis: a row per dtype. Two: rows × columns. More: one row per cell of the product."""
    axes = p.spec.dtypes.axes
    names = list(axes)
    if len(names) == 1:
        return _table([names[0], "cell"], [[d, _status(p, (d,))] for d in axes[names[0]]])
    if len(names) == 2:
        rows_axis, cols_axis = names
        header = [f"{rows_axis} \\ {cols_axis}", *axes[cols_axis]]
        return _table(header, [[f"**{r}**", *(_status(p, (r, c)) for c in axes[cols_axis])] for r in axes[rows_axis]])
    return _table([*names, "cell"], [[*values, _status(p, values)] for values in itertools.product(*axes.values())])


def defaults_table(p: FamilyPlan) -> Table | None:
    bound = {b.axis: b.tensor for b in p.dtype_bindings}
    rows = [
        [axis, f"`{bound[axis]}` is not given", d.from_, ", ".join(f"{s} → {t}" for s, t in d.map.items())]
        for axis, d in p.spec.dtypes.defaults.items()
    ]
    return _table(["axis", "used when", "derived from", "map"], rows) if rows else None


def knobs_table(p: FamilyPlan) -> Table | None:
    """Params and flags: what they are, their values, and who chooses them."""
    s = p.spec
    targets = [*s.targets.cuda, *s.targets.hip]
    rows = []
    for name, prm in s.params.items():
        rows.append(
            [f"`{name}`", "param", ", ".join(map(str, prm.values)), f"keyword argument `{name}=`", str(prm.default)]
        )
    for name, f in s.flags.items():
        if f.archs is not None:
            off = [a for a in targets if a not in f.archs]
            chosen = f"per arch: on for {', '.join(f.archs)}" + (f"; off for {', '.join(off)}" if off else "")
            rows.append([f"`{name}`", "flag (per arch)", "on, off", chosen, "—"])
        elif f.select is not None:
            rows.append([f"`{name}`", "flag (per call)", "on, off", f"on when {code(f.select)}", "—"])
        else:
            rows.append(
                [f"`{name}`", "flag (per call)", "on, off", f"keyword argument `{name}=`", "on" if f.default else "off"]
            )
    return _table(["name", "kind", "values", "chosen", "default"], rows) if rows else None


def fast_math_text(p: FamilyPlan) -> str | None:
    fm = p.spec.fast_math
    if fm is None:
        return None
    when = " and ".join(f"`{k}` ∈ {{{', '.join(map(str, vs))}}}" for k, vs in fm.when.items())
    return f"variants where {when} may use approximate math: {fm.note}"


def vector_rule(p: FamilyPlan) -> str:
    v = p.spec.vector
    if v.elements is not None:
        rule = f"{v.elements} elements per thread, whatever the dtype."
    else:
        rule = f"{v.bytes} bytes of the variant's widest dtype per thread."
    for o in v.overrides:
        when = ", ".join(f"{a}={d}" for a, d in o.when.items())
        rule += f" Where {when}: {o.bytes} bytes ({o.why})."
    return rule


def vector_table(p: FamilyPlan) -> Table:
    rows = []
    for v in p.variants:
        widest = max(DTYPES[d].size for d in v.dtypes.values())
        rows.append(
            [v.label.replace(", fast_math", ""), str(v.vec), str(v.vec * widest), "yes" if v.fast_math else "no"]
        )
    return _table(["variant", "vec (elements)", "bytes of the widest dtype", "fast math"], rows)


def arch_table(p: FamilyPlan) -> Table:
    per_arch = len(p.variants)
    rows = []
    for backend in p.backends:
        for arch in p.archs(backend):
            state = arch_state(backend, arch)
            compiled = "yes" if state in (COMPILED, RUN) else "no"
            if backend == "hip" and state == COMPILED:  # never linked: CI has no ROCm (k3gen.render.support)
                compiled = f"device code only ({HIP_COMPILED_IN_CI[arch]})"
            ran = f"yes ({RUN_ON_GPU[arch]})" if state == RUN else "no"
            rows.append([arch, backend, compiled, ran, f"**{state}**", str(per_arch)])
    return _table(["arch", "backend", "compiled in CI", "run on a GPU", "state", "specializations"], rows)


# How CI compiles a HIP unit, spelled by the flags tests/test_compile.py runs.
HIP_DEVICE_ONLY = shlex.join(["clang++-NN", *device_only_flags("ARCH"), "-S"])


def arch_legend(declared: list[tuple[str, str]]) -> list[str]:
    """The three states in words, from k3gen.render.support, naming only the (backend, arch) pairs declared:
    an arch a spec drops leaves its pages."""

    def which(state: str, words) -> str:
        archs = [words(b, a) for b, a in declared if arch_state(b, a) == state]
        return f" (here: {', '.join(archs)})" if archs else " (here: none)"

    return [
        f"**{RUN}**: the generated tests ran and passed on a GPU of that arch"
        f"{which(RUN, lambda b, a: f'{a} on {RUN_ON_GPU[a]}')}; such an arch is compiled in CI too.",
        f"**{COMPILED}**: CI compiles every translation unit: every declared CUDA arch with nvcc; HIP as device "
        f"code only, each arch with the Debian clang named (`{HIP_DEVICE_ONLY}`): CI has no ROCm device "
        "libraries, so no HIP library is linked there, and building one (`k3gen compile`, the JIT) needs ROCm"
        f"{which(COMPILED, lambda b, a: f'{a} with {HIP_COMPILED_IN_CI[a]}' if b == 'hip' else a)}.",
        f"**{DECLARED}**: listed in the spec, neither compiled nor run"
        f"{which(DECLARED, lambda b, a: f'{a}: {HIP_NOT_COMPILED_WHY}' if b == 'hip' else a)}.",
        "Source of these facts: `k3gen/render/support.py`.",
    ]


def declared_archs(plans: list[FamilyPlan]) -> list[tuple[str, str]]:
    """(backend, arch) of every arch the plans declare, once each, in spec order."""
    return list(dict.fromkeys((b, a) for p in plans for b in p.backends for a in p.archs(b)))


def gate_items(p: FamilyPlan) -> list[dict]:
    tested = {idx: name for name, idx in p.spec.tests.rejects.items()}
    return [
        {
            "index": i,
            "check": code(g.source),
            "reason": reason,
            "test": f"`reject_{tested[i]}`" if i in tested else None,
        }
        for i, (g, reason) in enumerate(p.gates)
    ]


def constants_table(p: FamilyPlan) -> Table | None:
    def spelled(v) -> str:
        return ("true" if v else "false") if isinstance(v, bool) else repr(v)

    rows = [[f"`{n}`", spelled(v)] for n, v in p.spec.constants.items()]
    return _table(["name", "value"], rows) if rows else None


def tie_order(p: FamilyPlan) -> dict:
    """The tie order and sigmoid of each backend (k3gen.spec.routing) in words, and the rows of every
    table or rule they use (16 entries a line)."""
    if p.routing is None:
        return {
            "heading": "Tie order",
            "table": None,
            "blocks": [],
            "lines": [],
            "text": "Not declared; the default `lowest_id` applies (the lower index wins where keys tie).",
        }
    resolved = p.routing
    rows = [[r.backend, _tie_words(r), f"`{r.sigmoid}`: {SIGMOIDS[r.sigmoid]}"] for r in resolved]
    blocks = []
    for order in dict.fromkeys(_hashable(r.tie_order) for r in resolved if r.priority is not None):
        users = [r for r in resolved if _hashable(r.tie_order) == order]
        blocks += _order_blocks(users[0], ", ".join(r.backend for r in users))
    # lines: the rows of a table every backend shares, for doc templates from before per-backend
    # routing (`k3gen diff` renders older revs with this module).
    shared = [r.tie_order for r in resolved]
    lines = _lines(shared[0]) if isinstance(shared[0], list) and shared.count(shared[0]) == len(shared) else []
    return {
        "heading": "Tie order and sigmoid",
        "table": _table(["backend", "tie order", "sigmoid"], rows),
        "lines": lines,
        "blocks": blocks,
        "text": "Each backend compiles its own row; the generated tests give the oracle the row "
        "of the backend they run on.",
    }


def _tie_words(r: BackendRouting) -> str:
    if r.priority is None:
        return "`lowest_id`: among equal keys, the lower index wins"
    if isinstance(r.tie_order, list):
        return f"a table of {len(r.tie_order)} indices (below): among equal keys the one listed first wins"
    return (
        f"`{r.tie_kind}`, {r.tie_order.experts_per_group} experts to a group: lanes visited in the order of "
        "the lane table below (aiter's wave64 rule); among equal keys the one visited first wins"
    )


def _hashable(order):
    return json.dumps(order.model_dump() if hasattr(order, "model_dump") else order)


def _lines(values: list[int]) -> list[str]:
    lines = [", ".join(map(str, values[i : i + 16])) for i in range(0, len(values), 16)]
    return [line + ("," if i < len(lines) - 1 else "") for i, line in enumerate(lines)]


def _order_blocks(r: BackendRouting, backends: str) -> list[dict]:
    if isinstance(r.tie_order, list):
        return [{"text": f"The table ({backends}), first place first:", "lines": _lines(r.tie_order)}]
    rule = r.tie_order
    order = sorted(range(len(r.priority)), key=r.priority.__getitem__)
    shown = order[:64]
    return [
        {
            "text": (
                f"`{rule.rule}` ({backends}): groups of {rule.experts_per_group} consecutive experts are dealt "
                f"to {WAVE_LANES} lanes (group g on lane g % {WAVE_LANES}, bank "
                f"g // {WAVE_LANES}); lanes are visited by rank, a lane's banks in order, a group's "
                "experts by id. Rank of each lane, lane 0 first:"
            ),
            "lines": _lines(rule.lane_rank),
        },
        {
            "text": f"The resulting order, first place first (the first {len(shown)} of {len(order)} places):",
            "lines": _lines(shown),
        },
    ]


def runners_table(p: FamilyPlan) -> Table | None:
    """The runners of specs/runners.yaml that consume this family's output (its front only)."""
    rows = [[f"`{r.name}`", r.consumes, r.activation_dtype, ", ".join(r.archs), r.summary] for r in p.runners]
    return _table(["runner", "consumes", "act dtype", "archs", "summary"], rows) if rows else None


def specialization_text(p: FamilyPlan) -> str:
    s = p.spec
    n_cells = len(s.dtypes.generated_cells())
    factors = [f"{n_cells} dtype cell{'s' if n_cells != 1 else ''}"]
    factors += [f"{len(prm.values)} {name}" for name, prm in s.params.items()]
    factors += [f"2 {name}" for name in p.call_flags]
    archs = [a for b in p.backends for a in p.archs(b)]
    units = ", ".join(f"{len(p.variants)} {b}" for b in p.backends)
    return (
        f"{' × '.join(factors)} = {len(p.variants)} variants; × {len(archs)} archs ({', '.join(archs)}) = "
        f"**{len(p.specializations)} specializations**. Translation units: {units}, plus one dispatch "
        f"unit per backend. `k3gen list --family {p.name}` lists each with its cache key."
    )


def routing_table(p: FamilyPlan) -> Table | None:
    """A routing family's axes (the spec's `routing`, or its defaults) in words (docs/kernels.md §3)."""
    r = p.route
    if r is None:
        return None
    scoring = {"sigmoid": "sigmoid (the formula per backend, below)", "softmax": "softmax over the row",
               "sqrt_softplus": "sqrt(softplus(x))", "none": "the logits themselves"}  # fmt: skip
    where = "over every expert, then the top-K" if r.scoring_at == "before" else "over the K picks of the logits"
    bias = {"scores": "added to the scores for selection only", "logits": "added to the logits for selection only",
            "none": "none"}  # fmt: skip
    groups = (
        f"{r.groups.count} groups of consecutive experts; the {r.groups.keep} best "
        f"({'sum of their two best' if r.groups.score == 'sum_top2' else 'their best'} selection values) compete"
        if r.groups
        else "none: every expert competes"
    )
    renorm = {
        "positive": "w / sum where the sum is positive, else w",
        "add_eps": f"w / (sum + {r.renorm_eps:g})",
        "clamp": f"w / max(sum, {r.renorm_eps:g})",
    }
    rows = [
        ["scoring", code(r.scoring), f"{scoring[r.scoring]}, {where}"],
        ["bias", code(r.bias), bias[r.bias]],
        ["groups", code(f"{r.groups.count}/{r.groups.keep}") if r.groups else "—", groups],
        ["renormalize", code(r.renormalize), f"{renorm[r.renormalize]}, when the call asks (its `renormalize`)"],
        ["sorted", code(str(r.sorted).lower()), "by rank, descending" if r.sorted else "the picks in expert-id order"],
    ]
    return _table(["axis", "value", "meaning"], rows)


def tables_table(p: FamilyPlan) -> Table | None:
    """Which tuning table serves each GPU (k3gen.runtime.tables): a row per device with a table, and one
    for every other GPU."""
    t = p.tuning
    if t is None:
        return None
    rows = [[f"`{tb.device}`", _own_picks(t, tb, len(p.variants))] for tb in t.tables]
    rows.append(["another GPU" if t.tables else "every GPU", t.other_gpus()])
    return _table(["GPU (short name)", "picks"], rows)


def _own_picks(t, tb, total: int) -> str:
    """A device's own table, and how many variants it has no current pick for (settled: no pick, or
    stale) and what they run there."""
    own = f"its own: `{tb.file}`"
    if not tb.untuned:
        return own
    why = ", ".join(sorted(set(tb.untuned.values())))
    runs = t.untuned_runs(tb, list(tb.untuned))
    return f"{own}; {len(tb.untuned)} of {total} variants untuned ({why}) run {runs} until it is retuned"


def family_doc(p: FamilyPlan) -> dict:
    """Everything templates/common/doc.md.j2 prints for one family."""
    generated = len(p.spec.dtypes.generated_cells())
    axes = "; ".join(f"`{a}` ({', '.join(vs)})" for a, vs in p.spec.dtypes.axes.items())
    return {
        "call": f"{p.name}({wrapper_signature(p)['params']})",
        "axes": axes,
        "matrix": matrix_table(p),
        "matrix_counts": f"{generated} generated, {len(p.excluded)} excluded",
        "defaults": defaults_table(p),
        "knobs": knobs_table(p),
        "tables": tables_table(p),
        "fast_math": fast_math_text(p),
        "vector_rule": vector_rule(p),
        "vectors": vector_table(p),
        "archs": arch_table(p),
        "legend": arch_legend(declared_archs([p])),
        "gates": gate_items(p),
        "constants": constants_table(p),
        "routing": routing_table(p),
        "tie_order": tie_order(p),
        "specializations": specialization_text(p),
        "runners": runners_table(p),
        "runners_file": p.runners_file,
    }


def index_table(plans: list[FamilyPlan]) -> Table:
    rows = []
    for p in plans:
        archs = "; ".join(f"{a}: {arch_state(b, a)}" for b in p.backends for a in p.archs(b))
        rows.append(
            [
                f"[{p.name}]({p.name}.md)",
                p.spec.summary,
                f"{len(p.spec.dtypes.generated_cells())} generated, {len(p.excluded)} excluded",
                f"{len(p.specializations)} ({len(p.variants)} per arch)",
                archs,
            ]
        )
    return _table(["family", "summary", "dtype cells", "specializations", "archs"], rows)
