"""What each template reads: views of a plan with every value already spelled (sqlc's tmplCtx).

Templates get these, never the plan: they substitute and loop over names, numbers and spelled
C++/Python; the plan's fields are spelled here by k3gen.render.cpp and k3gen.render.python, and
free text leaves through k3gen.spec.escape (the templates' filters).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from k3gen.plan.family import FamilyPlan, Variant
from k3gen.render import cpp
from k3gen.render.python import arg_inits
from k3gen.spec.escape import c_string


@dataclass(frozen=True)
class RoutingView:
    """One backend's tie order and sigmoid, as the routing fragment (route_topk/device.cuh.j2) writes them."""

    backend: str
    sigmoid_cpp: str
    tie_kind: str
    priority: tuple[int, ...] | None  # per expert; None: lowest_id


@dataclass(frozen=True)
class FamilyView:
    """What every template of a family reads of it."""

    name: str
    file: str  # specs/NAME.yaml
    summary: str
    template: str
    oracle: str
    constants: dict  # name -> value, as the spec gives them (comments and docs)
    cpp_constants: list  # (name, (C++ type, literal))
    param_enums: tuple  # (name, index) of string-valued params
    arch_flags: list  # names of per-arch flags (each is a K3_<NAME> define)
    args: list  # (C++ type, field name) of the Args struct
    template_params: str
    template_param_names: str
    key_bits: int
    key_parts: tuple
    matrix_text: str
    limit_asserts: list  # static_assert lines of the template's limits
    routing: list  # RoutingView per backend ([] for families without routing)
    route: list  # (C++ type, name, value) of the routing axes ([] for families without routing)
    has_bias: bool  # the family's call has a bias tensor (routing: where it is added)
    tuned: bool  # the spec declares knobs (the dispatch exports the tuner's hooks)
    variants: list  # (name, key as hex, label) per variant, in key order of the spec
    runners_file: str
    call_alignment: int | None
    knobs: dict = field(default_factory=dict)  # knob -> its candidates (docs)
    buckets: list = field(default_factory=list)  # tuning buckets of M (docs)
    tables: dict = field(default_factory=dict)  # device -> its tuning table's file, in row order
    fallback: str = ""  # the device whose table serves a GPU with none of its own ("" : the default config)
    untuned_tables: dict = field(default_factory=dict)  # device -> what its table's untuned variants run there
    # The values its `strategy` constant and knob may take: a routing header carries the code of a
    # strategy that only some families select (the lanes strategies) for those alone.
    strategies: tuple = ()


def family_view(p: FamilyPlan) -> FamilyView:
    s = p.spec
    routes = [RoutingView(r.backend, cpp.SIGMOID_CPP[r.sigmoid], r.tie_kind, r.priority) for r in (p.routing or ())]
    return FamilyView(
        name=p.name,
        file=p.file,
        summary=s.summary,
        template=s.template,
        oracle=s.oracle,
        constants=dict(s.constants),
        cpp_constants=cpp.constants(p),
        param_enums=p.param_enums,
        arch_flags=list(p.arch_flags),
        args=[(cpp.ARG_CTYPES[f.kind][0], f.name) for f in p.args],
        template_params=cpp.template_params(p),
        template_param_names=cpp.template_param_names(p),
        key_bits=p.key.bits,
        key_parts=p.key.parts,
        matrix_text=cpp.matrix_text(p),
        limit_asserts=cpp.static_asserts(p),
        routing=routes,
        route=cpp.route_constants(p),
        has_bias="bias" in s.signature.tensors,
        tuned=p.tuning is not None,
        variants=[(v.name, f"{v.key:#x}", v.label) for v in p.variants],
        runners_file=p.runners_file,
        call_alignment=p.call_alignment,
        knobs=dict(s.tuning.knobs) if s.tuning else {},
        buckets=list(p.tuning.buckets) if p.tuning else [],
        tables={tb.device: tb.file for tb in p.tuning.tables} if p.tuning else {},
        fallback=(p.tuning.fallback or "") if p.tuning else "",
        untuned_tables=_untuned_tables(p),
        strategies=_strategies(s),
    )


def _untuned_tables(p: FamilyPlan) -> dict[str, str]:
    """device -> what the variants its own table has no current pick for run there, in words (the
    wrapper's first-call line says it): only the tables with any."""
    t = p.tuning
    if t is None:
        return {}
    total = len(p.variants)
    return {
        tb.device: f"{len(tb.untuned)} of {total} variants untuned there run {t.untuned_runs(tb, list(tb.untuned))}"
        for tb in t.tables
        if tb.untuned
    }


def _strategies(s) -> tuple:
    if "strategy" not in s.constants:
        return ()
    knob = s.tuning.knobs.get("strategy", []) if s.tuning else []
    return tuple(sorted({s.constants["strategy"], *knob}))


@dataclass(frozen=True)
class TableRow:
    """One device's row of a variant's picks (common/variant.cu.j2)."""

    device: str
    comment: str  # the table file, and why the variant runs the default there (for a comment)
    configs: str  # the config index per bucket, spelled
    tuned: bool  # the variant has a current pick in this table
    note: str  # the C string printed on a miss (tuned) or on the first call (untuned)


@dataclass(frozen=True)
class UnitView:
    """One variant's translation unit (common/variant.cu.j2) for one backend."""

    name: str
    label: str
    vec: int
    int_params: list  # (name, value) of integer params, compiled in as constants
    gates: list  # (C++ condition, the C string of its failure message)
    key: str  # hex
    only_message: str  # the C string a variant library says for another key
    cases: list  # (config index, config label, launch<> arguments): the tuned configs other than the default
    default_case: tuple  # (label, launch<> arguments) of the spec's default config
    tuning: str  # "", "tuned" (a row per device's table) or "untuned" (no table at all)
    rows: list = field(default_factory=list)  # TableRow per device's table, in row order
    bucket_max: str = ""
    buckets: int = 0
    note: str = ""  # the C string printed on the first call: untuned, or (tuned) on a GPU no table serves
    untuned_why: str = ""


def unit_view(p: FamilyPlan, v: Variant, backend: str, tuned) -> UnitView:
    """`tuned`: the family's tuning with its picks checked against the rendered code (k3gen.render.keys)."""
    name = p.name
    gates = [(g.cpp, c_string(f"{name}: gate `{g.source}` failed")) for g, _ in p.gates]
    only = c_string(f"{name}: this library holds only variant {v.name} (key {v.key:#x})")
    common = dict(
        name=v.name,
        label=v.label,
        vec=v.vec,
        int_params=[(n, val) for n, val in v.params.items() if isinstance(val, int) and not isinstance(val, bool)],
        gates=gates,
        key=f"{v.key:#x}",
        only_message=only,
    )
    if tuned is None:
        return UnitView(**common, cases=[], default_case=("", cpp.template_args(p, v, backend)), tuning="")
    t = tuned
    cases = [(c, t.label(c), cpp.template_args(p, v, backend, c)) for c in range(1, len(t.configs))]
    default = (t.label(0), cpp.template_args(p, v, backend, 0))
    ran = f"ran the spec's default config ({t.label(0)}); tune with `{t.command(name)}`"
    if not t.tables:
        why = t.untuned[v.name]
        return UnitView(
            **common,
            cases=cases,
            default_case=default,
            tuning="untuned",
            note=c_string(f"{v.name} is untuned ({why}); {ran}"),
            untuned_why=why,
        )
    rows = []
    for tb in t.tables:
        if tb.tuned(v.name):
            rows.append(
                TableRow(
                    tb.device, tb.file, _spelled(t.bucket_configs(tb, v.name)), True, c_string(f"{tb.file}; {ran}")
                )
            )
        elif (source := t.serving(tb, v.name)) is not None:  # the spec's fallback device's picks
            why = f"untuned ({tb.untuned[v.name]} in {tb.file}): {source.file}'s picks (the spec's fallback)"
            configs = _spelled(t.bucket_configs(tb, v.name))
            rows.append(TableRow(tb.device, why, configs, True, c_string(f"{v.name} is {why}; {ran}")))
        else:
            why = f"untuned ({tb.untuned[v.name]} in {tb.file})"
            note = c_string(f"{v.name} is {why}; {ran}")
            rows.append(TableRow(tb.device, why, _spelled([0] * len(t.buckets)), False, note))
    served = ", ".join(t.devices)
    return UnitView(
        **common,
        cases=cases,
        default_case=default,
        tuning="tuned",
        rows=rows,
        note=c_string(f"{v.name} is untuned on this GPU (tables: {served}; none serves it); {ran}"),
        bucket_max=_spelled(t.buckets),
        buckets=len(t.buckets),
    )


def _spelled(values) -> str:
    return ", ".join(map(str, values))


def host_view(p: FamilyPlan) -> dict:
    """What the host wrapper (common/host.py.j2) reads besides its data tables."""
    s = p.spec
    return {
        "choices": [(n, prm.values) for n, prm in s.params.items()],
        "selects": [(n, e.python_rhs) for n, e in p.selects.items()],
        "kwarg_flags": list(p.kwarg_flags),
        "dims": [(d, e.python_rhs) for d, e in p.dims],
        "bindings": [(b.axis, b.tensor, b.derived_from) for b in p.dtype_bindings],
        "gates": [(g.python, g.names) for g, _ in p.gates],
        "arg_inits": arg_inits(p),
    }
