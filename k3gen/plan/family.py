"""What generation needs of a family, resolved once: the plan render reads and never reaches behind.

Every value here is computed by k3gen.plan.resolve from a loaded spec (and, for the runner table's
front, from the family its contract names): the variants and their switch keys, the parsed gates,
dims, selects and tensor shapes (k3gen.spec.exprs), the Args layout with where each field comes from,
the call's parameters in order, the routing of each backend, each device's tuning table's picks and what it
claims to have measured, the build's sources, headers and defines. Render spells these fields
(k3gen.render.cpp, k3gen.render.python) into the views templates read; it resolves, parses and
checks nothing itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from k3gen.runtime.archs import UNIT_EXT
from k3gen.spec.errors import SpecError
from k3gen.spec.exprs import Expr

# One kernel header serves both backends: k3_backend.h picks the primitives (warp width, shuffles,
# scans, conversions) from the compiler's own macros; only the translation units differ per backend.
KERNEL_HEADER = "{name}.cuh"
TU_EXT = UNIT_EXT  # a translation unit's extension per backend (the runtime's own table)


# The Args field of a tuned family that holds the row of the device's tuning table (-1: none).
DEVICE_TABLE_FIELD = "k3_device_table"


@dataclass(frozen=True)
class ArgField:
    """One field of the family's C args struct, filled by the host wrapper from `source`: `tensor`
    (its data pointer), `stride0` (the row stride of `of`), `dim`, `scalar`, `optional_scalar` or
    `device_table` (the row of the tuning table of the call's device: k3gen.runtime.tables)."""

    name: str
    kind: str  # ptr, mut_ptr, i64, i32, f32 (k3gen.render.cpp.ARG_CTYPES)
    source: str
    of: str = ""  # the tensor of a stride0 field


@dataclass(frozen=True)
class TensorCase:
    """A tensor's dtype, shape and layout, for one value of a param (`when`) or by default (None)."""

    when: tuple[str, object] | None  # (param, value)
    dtype: str  # a dtype axis or a fixed dtype
    shape: tuple[Expr, ...]
    layout: str


@dataclass(frozen=True)
class TensorPlan:
    """A tensor argument: its rank, role and cases (the `by` cases first, the declared one last)."""

    name: str
    rank: int
    role: str  # input, optional or output
    cases: tuple[TensorCase, ...]

    @property
    def output(self) -> bool:
        return self.role == "output"

    @property
    def optional(self) -> bool:
        return self.role == "optional"


@dataclass(frozen=True)
class CallParam:
    """A parameter of the wrapper, in call order: tensors, scalars, params, keyword flags, outputs."""

    name: str
    role: str  # tensor, optional_tensor, scalar, param, flag, output
    annotation: str  # the custom op's Python type ("" for outputs, which the op returns)
    default: object = None
    has_default: bool = False


@dataclass(frozen=True)
class DtypeBinding:
    """Where a call's dtype of one axis comes from: `tensor`'s dtype, or, when that tensor may be
    omitted, the default derived from axis `derived_from`."""

    axis: str
    tensor: str
    derived_from: str | None


@dataclass(frozen=True)
class KeyLayout:
    """The switch key: one field of `bits` bits per part (dtype axes, params, call-time flags), lowest first."""

    parts: tuple[str, ...]
    bits: int


@dataclass(frozen=True)
class BackendRouting:
    """What one backend of a routing family compiles: its tie order (the spec's value and its
    expansion to a priority per expert) and its sigmoid."""

    backend: str
    tie_order: object  # the spec's value for this backend: "lowest_id", a list, or a k3gen.spec.routing.TieRule
    priority: tuple[int, ...] | None  # per expert, lower wins a tie; None: the id itself (lowest_id)
    sigmoid: str  # a key of k3gen.spec.routing.SIGMOIDS
    tie_kind: str  # lowest_id, table, or the rule's name
    test_data: dict  # what the generated tests hand the oracle: the tie order as the spec gives it, the sigmoid,
    # and the lanes of the backend's warp (the order the kernel sums a softmax in)


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


@dataclass(frozen=True)
class DenseBf16Call:
    """The call of the contract's family that the runner table's GPU test makes, sizes computed."""

    family: str
    inputs: dict  # tensor -> shape (integers)
    outputs: dict
    scalars: dict


@dataclass
class FamilyPlan:
    spec: object  # k3gen.spec.model.KernelSpec: its data (summary, axes, params...) for docs and the review
    file: str  # specs/NAME.yaml
    variants: list[Variant]
    specializations: list[Specialization]
    excluded: list[tuple[dict, str]]  # (cell, reason)
    gates: list[tuple[Expr, str]]  # (expression, reason)
    args: list[ArgField]
    backends: list[str]
    call_flags: list[str]  # flags chosen per call, in key order
    arch_flags: list[str]  # flags chosen per arch
    key: KeyLayout
    dims: list[tuple[str, Expr]]  # in binding order
    selects: dict[str, Expr]  # call-time flag -> its select expression
    tensors: tuple[TensorPlan, ...]  # inputs first
    call: tuple[CallParam, ...]  # the wrapper's parameters in call order
    dtype_bindings: tuple[DtypeBinding, ...]
    kwarg_flags: tuple[str, ...]  # flags the wrapper takes as keyword arguments
    param_enums: tuple[tuple[str, int], ...]  # C++ constants of string-valued params: scale_format_ue8m0 = 2
    call_alignment: int | None  # the gates read pointers only modulo this (None: otherwise)
    routing: tuple[BackendRouting, ...] | None  # per backend, for families that declare routing
    route: object  # k3gen.spec.model.Routing of a routing family (its defaults where the spec gives none), else None
    sources: dict[str, tuple[str, ...]]  # backend -> translation units, relative to csrc/<family>/
    headers: dict[str, tuple[str, ...]]  # backend -> headers, relative to csrc/<family>/
    defines: dict[str, tuple[str, ...]]  # arch -> its per-arch flags as compiler defines
    limits: object = None  # k3gen.spec.meaning.limits.TemplateLimits: the template's rules and checks (Exprs)
    located: object = None  # the spec's yaml_lines.LocatedData: plan and render errors name its lines
    tuning: object = None  # k3gen.plan.tuning.Tuning: knobs, configs and what the table says; None: no knobs
    runners: list = field(default_factory=list)  # model.Runner rows of specs/runners.yaml, if this is their front
    runners_file: str = ""
    dense_bf16_call: DenseBf16Call | None = None  # the runner table's GPU test, if this is their front

    @property
    def name(self) -> str:
        return self.spec.kernel

    @property
    def key_parts(self) -> tuple[str, ...]:
        return self.key.parts

    def error(self, path: tuple, message: str) -> SpecError:
        """A SpecError at the spec line of `path` (line 1 when the plan was built without a line map)."""
        line = self.located.line_of(path) if self.located is not None else 1
        return SpecError(self.file, line, self.name, ".".join(map(str, path)) or "<root>", message)

    def archs(self, backend: str) -> list[str]:
        return list(getattr(self.spec.targets, backend))
