"""Resolve a validated spec into its plan: every specialization, its identity and C++ spellings.

Templates receive the plan, never the raw spec: C++ types, template arguments, switch keys, struct
fields and gate expressions are all computed here, so templates only substitute and loop. Cache
keys are not computed here: they hash what is compiled, the rendered sources (k3gen.render.keys).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path

from k3gen.plan import tuning
from k3gen.render import spellings
from k3gen.runtime.dtypes import DTYPES
from k3gen.spec import routing
from k3gen.spec.bounds import KEY_BITS
from k3gen.spec.errors import SpecError, SpecErrors
from k3gen.spec.exprs import Expr, parse_expr
from k3gen.spec.load import LoadedSpec
from k3gen.spec.meaning.limits import read_limits
from k3gen.spec.model import KernelSpec
from k3gen.spec.scopes import dim_scope, gate_scope, select_scope

BACKENDS = ("cuda", "hip")


@dataclass(frozen=True)
class ArgField:
    """One field of the family's C args struct, filled by the host wrapper."""

    name: str
    kind: str  # key of spellings.ARG_CTYPES

    @property
    def cpp(self) -> str:
        return spellings.ARG_CTYPES[self.kind][0]

    @property
    def ctype(self) -> str:
        return spellings.ARG_CTYPES[self.kind][1]


@dataclass(frozen=True)
class Variant:
    """One generated point: a matrix cell × params × call-time flags. One translation unit per backend."""

    name: str
    dtypes: dict  # axis -> dtype name
    params: dict  # param -> value
    flags: dict  # call-time flag -> bool
    fast_math: bool  # approximate math allowed (the spec's fast_math.when)
    vec: int  # elements per vector access
    key: int  # switch key, the same number in the Python table and the C++ switch

    def as_dict(self) -> dict:
        """Every parameter by name, as the oracle and the generated tests see a variant."""
        return {**self.dtypes, **self.params, **self.flags, "fast_math": self.fast_math, "vec": self.vec}

    @property
    def label(self) -> str:
        parts = [f"{a}={d}" for a, d in self.dtypes.items()]
        parts += [f"{p}={v}" for p, v in self.params.items()]
        parts += [f"{f}={'on' if v else 'off'}" for f, v in self.flags.items()]
        parts += ["fast_math"] if self.fast_math else []
        return ", ".join(parts)


@dataclass(frozen=True)
class Specialization:
    """A variant compiled for one arch: the unit of identity (its key: k3gen.render.keys)."""

    variant: Variant
    backend: str
    arch: str
    arch_flags: dict  # arch-derived flag -> bool
    identity: str


@dataclass
class FamilyPlan:
    spec: KernelSpec
    file: str  # specs/NAME.yaml
    variants: list[Variant]
    specializations: list[Specialization]
    excluded: list[tuple[dict, str]]  # (cell, reason)
    gates: list[tuple[Expr, str]]  # (expression, reason)
    args: list[ArgField]
    backends: list[str]
    call_flags: list[str]  # flags chosen per call, in key order
    arch_flags: list[str]  # flags chosen per arch
    key_parts: list[str] = field(default_factory=list)  # names of the switch-key components, in order
    runners: list = field(default_factory=list)  # model.Runner rows of specs/runners.yaml, if this is their front
    runners_file: str = ""
    dense_bf16_check: object = None  # model.DenseBf16Check of specs/runners.yaml, if this is their front
    dims: list[tuple[str, Expr]] = field(default_factory=list)  # in binding order
    selects: dict[str, Expr] = field(default_factory=dict)  # call-time flag -> its select expression
    limits: object = None  # k3gen.spec.meaning.limits.TemplateLimits of the template: static_asserts in launch()
    located: object = None  # the spec's yaml_lines.LocatedData: plan and render errors name its lines
    tuning: object = None  # k3gen.plan.tuning.Tuning: knobs, configs and the table's picks; None: no knobs

    @property
    def name(self) -> str:
        return self.spec.kernel

    def error(self, path: tuple, message: str) -> SpecError:
        """A SpecError at the spec line of `path` (line 1 when the plan was built without a line map)."""
        line = self.located.line_of(path) if self.located is not None else 1
        return SpecError(self.file, line, self.name, ".".join(map(str, path)) or "<root>", message)

    def archs(self, backend: str) -> list[str]:
        return list(getattr(self.spec.targets, backend))

    # C++ spellings of the plan live in k3gen.render.spellings; templates reach them through these names.
    def template_params(self) -> str:
        return spellings.template_params(self)

    def template_param_names(self) -> str:
        return spellings.template_param_names(self)

    def template_args(self, v: Variant, backend: str, config: int = 0) -> str:
        return spellings.template_args(self, v, backend, config)

    def param_enums(self) -> list[tuple[str, int]]:
        return spellings.param_enums(self)

    def backend_routing(self) -> list[routing.BackendRouting]:
        """Tie order (expanded to a priority per expert) and sigmoid of each backend (k3gen.spec.routing)."""
        return [routing.resolve(self.spec, b) for b in self.backends]

    @property
    def call_alignment(self) -> int | None:
        """Pointers matter to the gates only modulo this (see k3gen.runtime.fastpath); None: the gates
        read pointers otherwise, and every call is checked in full."""
        moduli = [g.ptr_moduli for g, _ in self.gates]
        if any(m is None for m in moduli):
            return None
        return math.lcm(1, *(n for m in moduli for n in m))

    def shape_python(self, shape: list) -> list[str]:
        return spellings.shape_python(self, shape)

    def arch_defines(self, arch: str) -> list[str]:
        return spellings.arch_defines(self, arch)


def resolve_all(loaded: list[LoadedSpec], root: Path) -> list[FamilyPlan]:
    """Every spec's plan; raise SpecErrors with every spec that cannot be resolved, located."""
    plans, errors = [], []
    for ls in loaded:
        try:
            plans.append(resolve_family(ls, root))
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
    errors += tuning.check_tables(root, {ls.spec.kernel: ls.file for ls in loaded})
    if errors:
        raise SpecErrors(errors)
    _assert_unique_identities(plans)
    return plans


def resolve_family(ls: LoadedSpec, root: Path) -> FamilyPlan:
    s = ls.spec
    axes = s.dtypes.axes
    call_flags = [f for f, fl in s.flags.items() if fl.archs is None]
    arch_flags = [f for f, fl in s.flags.items() if fl.archs is not None]
    variants = []
    cells = s.dtypes.generated_cells()
    param_values = [prm.values for prm in s.params.values()]
    for cell, pvals, fvals in itertools.product(
        cells, itertools.product(*param_values), itertools.product((False, True), repeat=len(call_flags))
    ):
        dtypes = dict(zip(axes, cell))
        params = dict(zip(s.params, pvals))
        flags = dict(zip(call_flags, fvals))
        name = "__".join(
            [
                s.kernel,
                *(f"{a}_{d}" for a, d in dtypes.items()),
                *(f"{p}_{v}" for p, v in params.items()),
                *(f"{f}_{'on' if b else 'off'}" for f, b in flags.items()),
            ]
        )
        comps = [DTYPES[d].code for d in cell] + [s.params[p].values.index(v) for p, v in params.items()]
        comps += [int(b) for b in fvals]
        key = sum(c << (KEY_BITS * i) for i, c in enumerate(comps))
        chosen = {**dtypes, **params}
        fast = s.fast_math is not None and all(chosen[k] in vs for k, vs in s.fast_math.when.items())
        variants.append(Variant(name, dtypes, params, flags, fast, s.vector.elements_for(dtypes), key))
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
    return FamilyPlan(
        s,
        ls.file,
        variants,
        specs,
        excluded,
        gates,
        _arg_fields(s),
        [b for b in BACKENDS if getattr(s.targets, b)],
        call_flags,
        arch_flags,
        [*axes, *s.params, *call_flags],
        list(runners),
        ls.runners.file if ls.runners else "",
        ls.runners.table.dense_bf16_check if ls.runners else None,
        dims,
        selects,
        read_limits(root, s.template)[0],
        ls.located,
        tuning.read_table(s, ls.file, root, [v.name for v in variants]),
    )


def _arg_fields(s: KernelSpec) -> list[ArgField]:
    fields = []
    for name, t in s.signature.tensors.items():
        fields.append(ArgField(name, "mut_ptr" if t.output else "ptr"))
        if t.layout == "rows":
            fields.append(ArgField(f"{name}_stride0", "i64"))
    fields += [ArgField(d, "i64") for d in s.signature.dims]
    fields += [ArgField(n, sc.type) for n, sc in s.signature.scalars.items()]
    return fields


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
