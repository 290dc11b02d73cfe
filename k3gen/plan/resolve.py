"""Resolve a validated spec into its plan (k3gen.plan.family): everything render reads, computed once.

The dtype matrix expanded into variants and switch keys, the gates, dims, selects and tensor shapes
parsed (k3gen.spec.exprs), the Args layout and where each field comes from, the call's parameters,
the routing of each backend expanded, the tuning table read, the build's files and defines, and for
the runner table's front the call its contract's family makes in the GPU test. Cache keys are not
computed here: they hash what is compiled, the rendered sources (k3gen.render.keys).
"""

from __future__ import annotations

import math
from pathlib import Path

from k3gen.plan import tuning
from k3gen.plan.family import (
    DEVICE_TABLE_FIELD,
    KERNEL_HEADER,
    TU_EXT,
    ArgField,
    BackendRouting,
    CallParam,
    DenseBf16Call,
    DtypeBinding,
    FamilyPlan,
    KeyLayout,
    Specialization,
    TensorCase,
    TensorPlan,
    Variant,
)
from k3gen.runtime.dtypes import DTYPES
from k3gen.spec import routing
from k3gen.spec.bounds import KEY_BITS
from k3gen.spec.errors import SpecErrors
from k3gen.spec.exprs import parse_expr
from k3gen.spec.load import LoadedSpec
from k3gen.spec.meaning.contracts import DENSE_BF16
from k3gen.spec.meaning.limits import effective_routing, read_limits
from k3gen.spec.model import KernelSpec, variant_points
from k3gen.spec.scopes import dim_scope, gate_scope, select_scope, shape_scope

BACKENDS = ("cuda", "hip")
PY_SCALAR = {"f32": "float", "i32": "int", "i64": "int"}  # Python annotation of a spec scalar type
WARP_LANES = {"cuda": 32, "hip": 64}  # lanes of a warp (a wave on HIP): k3_backend.h's K3_WARP_SIZE


def resolve_all(loaded: list[LoadedSpec], root: Path, lenient_tables: bool = False) -> list[FamilyPlan]:
    """Every spec's plan; raise SpecErrors with every spec that cannot be resolved, located.
    lenient_tables: a tuning table this k3gen cannot read leaves its family without one (the review
    of an older revision, whose tables may be of an older format), instead of an error."""
    plans, errors = [], []
    for ls in loaded:
        try:
            plans.append(resolve_family(ls, root, lenient_tables))
        except SpecErrors as exc:  # a tuning table that does not fit the spec (k3gen.plan.tuning)
            errors += exc.errors
        except (KeyError, ValueError, TypeError, IndexError) as exc:  # the loader's checks let it through
            errors.append(
                ls.error(
                    ("kernel",),
                    f"k3gen cannot resolve this spec ({type(exc).__name__}: {exc}); "
                    "a rule k3gen.spec.rules lacks: report it with this spec",
                )
            )
    if not lenient_tables:
        errors += tuning.check_tables(root, {ls.spec.kernel: ls.file for ls in loaded})
    if errors:
        raise SpecErrors(errors)
    _assert_unique_identities(plans)
    by_name = {p.name: p for p in plans}
    for ls, p in zip(loaded, plans):
        if ls.runners and ls.runners.table.dense_bf16_check is not None and DENSE_BF16.family in by_name:
            p.dense_bf16_call = _dense_bf16_call(by_name[DENSE_BF16.family], ls.runners.table.dense_bf16_check)
    return plans


def resolve_family(ls: LoadedSpec, root: Path, lenient_tables: bool = False) -> FamilyPlan:
    s = ls.spec
    axes = s.dtypes.axes
    call_flags = s.call_flags
    arch_flags = [f for f in s.flags if f not in call_flags]
    variants = _variants(s, call_flags)
    specs = []
    for backend in BACKENDS:
        for arch in getattr(s.targets, backend):
            aflags = {f: arch in (s.flags[f].archs or []) for f in arch_flags}
            specs += [Specialization(v, backend, arch, aflags, f"{v.name}__{arch}") for v in variants]
    excluded = [({a: c[a] for a in axes}, c["reason"]) for c in s.dtypes.exclude]
    scope = gate_scope(s)
    gates = [(parse_expr(g.check, scope), g.reason) for g in s.gates]
    names = list(s.signature.dims)
    dims = [(d, parse_expr(src, dim_scope(s, names[:i]))) for i, (d, src) in enumerate(s.signature.dims.items())]
    selects = {f: parse_expr(fl.select, select_scope(s)) for f, fl in s.flags.items() if fl.select is not None}
    runners = ls.runners.table.runners if ls.runners else []
    backends = [b for b in BACKENDS if getattr(s.targets, b)]
    moduli = [g.ptr_moduli for g, _ in gates]
    return FamilyPlan(
        spec=s,
        file=ls.file,
        variants=variants,
        specializations=specs,
        excluded=excluded,
        gates=gates,
        args=_arg_fields(s),
        backends=backends,
        call_flags=call_flags,
        arch_flags=arch_flags,
        key=KeyLayout((*axes, *s.params, *call_flags), KEY_BITS),
        dims=dims,
        selects=selects,
        tensors=_tensors(s),
        call=_call(s),
        dtype_bindings=_dtype_bindings(s),
        kwarg_flags=tuple(n for n, f in s.flags.items() if f.kwarg),
        param_enums=tuple(
            (f"{n}_{val}", i) for n, prm in s.params.items() for i, val in enumerate(prm.values) if isinstance(val, str)
        ),
        # Pointers matter to the gates only modulo this (k3gen.runtime.fastpath); None: a gate reads a
        # pointer otherwise, and every call is checked in full.
        call_alignment=None if any(m is None for m in moduli) else math.lcm(1, *(n for m in moduli for n in m)),
        routing=tuple(_routing(s, b) for b in backends) if routing.declares_routing(s) else None,
        route=effective_routing(s) if routing.declares_routing(s) else None,
        sources={b: (*(f"{v.name}.{TU_EXT[b]}" for v in variants), f"dispatch.{TU_EXT[b]}") for b in backends},
        headers={
            b: (KERNEL_HEADER.format(name=s.kernel), f"{s.kernel}_abi.h", "../k3_hip_compat.h", "../k3_backend.h")
            for b in backends
        },
        defines={
            a: tuple(f"-DK3_{f.upper()}={int(a in (s.flags[f].archs or []))}" for f in arch_flags)
            for b in backends
            for a in getattr(s.targets, b)
        },
        limits=read_limits(root, s.template)[0],
        located=ls.located,
        tuning=tuning.read_tables(s, ls.file, root, [v.name for v in variants], lenient_tables, ls.located),
        runners=list(runners),
        runners_file=ls.runners.file if ls.runners else "",
    )


def _variants(s: KernelSpec, call_flags: list[str]) -> list[Variant]:
    """A Variant of each point of the variant space (k3gen.spec.model.variant_points), with its switch key."""
    variants = []
    for dtypes, params, flags in variant_points(s.dtypes, s.params, call_flags):
        name = "__".join(
            [
                s.kernel,
                *(f"{a}_{d}" for a, d in dtypes.items()),
                *(f"{p}_{v}" for p, v in params.items()),
                *(f"{f}_{'on' if b else 'off'}" for f, b in flags.items()),
            ]
        )
        comps = [DTYPES[d].code for d in dtypes.values()] + [s.params[p].values.index(v) for p, v in params.items()]
        comps += [int(b) for b in flags.values()]
        key = sum(c << (KEY_BITS * i) for i, c in enumerate(comps))
        chosen = {**dtypes, **params}
        fast = s.fast_math is not None and all(chosen[k] in vs for k, vs in s.fast_math.when.items())
        variants.append(Variant(name, dtypes, params, flags, fast, s.vector.elements_for(dtypes), key))
    return variants


def _arg_fields(s: KernelSpec) -> list[ArgField]:
    fields = []
    for name, t in s.signature.tensors.items():
        fields.append(ArgField(name, "mut_ptr" if t.output else "ptr", "tensor"))
        if t.layout == "rows":
            fields.append(ArgField(f"{name}_stride0", "i64", "stride0", of=name))
    fields += [ArgField(d, "i64", "dim") for d in s.signature.dims]
    fields += [
        ArgField(n, sc.type, "optional_scalar" if sc.optional else "scalar") for n, sc in s.signature.scalars.items()
    ]
    if s.tuning is not None:  # the row of the GPU's tuning table (k3gen.plan.tuning); k3 names are no spec's
        fields.append(ArgField(DEVICE_TABLE_FIELD, "i32", "device_table"))
    return fields


def _tensors(s: KernelSpec) -> tuple[TensorPlan, ...]:
    """Each tensor, inputs first, with its `by` cases (their shapes parsed) before the declared one."""
    scope = shape_scope(s)

    def case(when, dtype, shape, layout) -> TensorCase:
        return TensorCase(when, dtype, tuple(parse_expr(d, scope) for d in shape), layout)

    out = []
    for name, t in sorted(s.signature.tensors.items(), key=lambda kv: kv[1].output):
        cases = [
            case((param, value), c.dtype or t.dtype, c.shape or t.shape, c.layout or t.layout)
            for param, by_value in t.by.items()
            for value, c in by_value.items()
        ]
        cases.append(case(None, t.dtype, t.shape, t.layout))
        role = "output" if t.output else "optional" if t.optional else "input"
        out.append(TensorPlan(name, len(t.shape), role, tuple(cases)))
    return tuple(out)


def _call(s: KernelSpec) -> tuple[CallParam, ...]:
    """The wrapper's parameters in call order, each with the custom op's annotation and its default."""
    sig, out = s.signature, []
    for n, t in sig.tensors.items():
        if not t.output:
            role = "optional_tensor" if t.optional else "tensor"
            out.append(CallParam(n, role, "torch.Tensor | None" if t.optional else "torch.Tensor", None, t.optional))
    for n, sc in sig.scalars.items():
        py = PY_SCALAR[sc.type]
        out.append(CallParam(n, "scalar", f"{py} | None" if sc.optional else py, sc.default, sc.optional))
    for n, prm in s.params.items():
        annotation = "str" if any(isinstance(v, str) for v in prm.values) else "int"
        out.append(CallParam(n, "param", annotation, prm.default, True))
    out += [CallParam(n, "flag", "bool", f.default, True) for n, f in s.flags.items() if f.kwarg]
    out += [CallParam(n, "output", "", None, True) for n, t in sig.tensors.items() if t.output]
    return tuple(out)


def _dtype_bindings(s: KernelSpec) -> tuple[DtypeBinding, ...]:
    """Each dtype axis: the tensor it is read from (an input if any has it), and the axis its default
    derives from when that tensor may be omitted."""
    out = []
    for axis in s.dtypes.axes:
        tensors = [(n, t) for n, t in s.signature.tensors.items() if t.dtype == axis]
        name, t = min(tensors, key=lambda nt: nt[1].output or nt[1].optional)
        out.append(DtypeBinding(axis, name, s.dtypes.defaults[axis].from_ if (t.output or t.optional) else None))
    return tuple(out)


def _routing(s: KernelSpec, backend: str) -> BackendRouting:
    """One backend's tie order (expanded to a priority per expert) and sigmoid."""
    order = routing.for_backend(s.tie_order, backend)
    priority = routing.expert_priorities(order, s.constants.get("num_experts"), ("tie_order",))
    kind = order.rule if isinstance(order, routing.TieRule) else ("table" if isinstance(order, list) else order)
    shown = order.model_dump() if isinstance(order, routing.TieRule) else order
    sigmoid = routing.for_backend(s.sigmoid, backend)
    return BackendRouting(
        backend,
        order,
        tuple(priority) if priority is not None else None,
        sigmoid,
        kind,
        {"tie_order": shown, "sigmoid": sigmoid, "lanes": WARP_LANES[backend]},
    )


def _dense_bf16_call(producer: FamilyPlan, check) -> DenseBf16Call:
    """The contract family's call in the runner table's GPU test, with its tensors' sizes computed."""

    def sizes(t: TensorPlan) -> list[int]:
        return [d.value(check.dims) for d in t.cases[-1].shape]

    return DenseBf16Call(
        producer.name,
        {t.name: sizes(t) for t in producer.tensors if t.role == "input"},
        {t.name: sizes(t) for t in producer.tensors if t.output},
        dict(check.scalars),
    )


def _assert_unique_identities(plans: list[FamilyPlan]) -> None:
    """Identities name build folders, test ids and table rows: two specializations never share one.
    (That their compiled code never shares a key is k3gen.render.keys's check, on the rendered sources.)"""
    seen: dict[str, FamilyPlan] = {}
    errors = []
    for p in plans:
        for sp in p.specializations:
            if sp.identity in seen:
                errors.append(
                    p.error(
                        ("kernel",),
                        f"specialization {sp.identity} is also one of {seen[sp.identity].file}; rename one family",
                    )
                )
            seen.setdefault(sp.identity, p)
    if errors:
        raise SpecErrors(errors)
