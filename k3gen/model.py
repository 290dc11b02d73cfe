"""What a spec file says: pydantic models of one kernel family, checked field by field.

Rules about one field live in field validators; rules that tie fields of one spec together live in
model validators; rules across spec files live in k3gen.load. Validators raise FieldError so the
error can point at the exact YAML line below the field.
"""
from __future__ import annotations

import ast
import difflib
import keyword
import re
from typing import Annotated, Literal, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from .dtypes import DTYPES
from .errors import FieldError
from .exprs import ExprError, Scope, parse_expr
from .routing import SigmoidSpec, TieOrderSpec, check_keys, check_routing

CUDA_ARCHS = ("sm_90a", "sm_100a", "sm_120a")
HIP_ARCHS = ("gfx942", "gfx950")
IDENT = re.compile(r"^[a-z][a-z0-9_]*$")
SYMBOL = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _suggest(value: str, known) -> str:
    close = difflib.get_close_matches(str(value), [str(k) for k in known], n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _check_dtype(value: str) -> str:
    if value not in DTYPES:
        raise FieldError(f"'{value}' is not a dtype{_suggest(value, DTYPES)}; known: {', '.join(DTYPES)}")
    return value


def _check_ident(value: str) -> str:
    if not IDENT.match(value):
        raise FieldError(f"'{value}' is not a valid name; use lower_snake_case: letters, digits, _")
    return value


def _check_symbol(value: str) -> str:
    if not SYMBOL.match(value) or keyword.iskeyword(value):
        raise FieldError(f"'{value}' is not a valid symbol; use letters, digits and _, e.g. M or num_tokens")
    return value


def _check_python_expr(value: str) -> str:
    try:
        ast.parse(str(value), mode="eval")
    except SyntaxError as exc:
        raise FieldError(f"'{value}' is not a Python expression: {exc.msg}") from None
    return str(value)


DtypeName = Annotated[str, AfterValidator(_check_dtype)]
Ident = Annotated[str, AfterValidator(_check_ident)]
Symbol = Annotated[str, AfterValidator(_check_symbol)]
PyExpr = Annotated[Union[str, int], AfterValidator(_check_python_expr)]


class SpecModel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


def _unique(values: list, what: str) -> list:
    seen: dict = {}
    for i, v in enumerate(values):
        if v in seen:
            raise FieldError(f"{what} '{v}' is listed twice (items {seen[v]} and {i}); list it once", (i,))
        seen[v] = i
    return values


class Targets(SpecModel):
    """Where the family is built. Every arch listed gets every specialization."""

    cuda: list[str] = Field(default_factory=list, description="CUDA archs, e.g. sm_90a")
    hip: list[str] = Field(default_factory=list, description="HIP archs, e.g. gfx942")

    @field_validator("cuda", "hip")
    @classmethod
    def _known_arch(cls, archs: list[str], info) -> list[str]:
        known = CUDA_ARCHS if info.field_name == "cuda" else HIP_ARCHS
        for i, a in enumerate(archs):
            if a not in known:
                raise FieldError(f"'{a}' is not a {info.field_name} arch{_suggest(a, known)}; known: {', '.join(known)}", (i,))
        return _unique(archs, "arch")

    @model_validator(mode="after")
    def _not_empty(self):
        if not self.cuda and not self.hip:
            raise FieldError("no targets; list at least one arch, e.g. `cuda: [sm_90a]`")
        return self


class DerivedDefault(SpecModel):
    """An axis value derived from another axis when the caller does not fix it (fp32 in → bf16 out)."""

    from_: str = Field(alias="from", description="the axis the default is read from")
    map: dict[str, DtypeName] = Field(description="value of `from` axis → default value of this axis")


class DtypeMatrix(SpecModel):
    """The product of the named axes, minus exclusions. Every cell is generated or excluded with a reason."""

    axes: dict[Ident, list[DtypeName]] = Field(description="axis name → dtypes, in dispatch order")
    exclude: list[dict[str, str]] = Field(default_factory=list,
                                          description="cells left out: one value per axis, plus `reason`")
    defaults: dict[str, DerivedDefault] = Field(default_factory=dict,
                                                description="axis → how its value is derived when not given")

    @field_validator("axes")
    @classmethod
    def _axes(cls, axes):
        if not axes:
            raise FieldError("the matrix has no axes; declare at least one, e.g. `in: [bf16]`")
        for name, values in axes.items():
            if not values:
                raise FieldError(f"axis '{name}' is empty; list at least one dtype", (name,))
            try:
                _unique(values, "dtype")
            except FieldError as e:
                raise FieldError(str(e), (name, *e.subpath)) from None
        return axes

    @model_validator(mode="after")
    def _cells(self):
        axes = self.axes
        for i, cell in enumerate(self.exclude):
            if "reason" not in cell or not str(cell["reason"]).strip():
                raise FieldError("exclusion has no reason; add `reason: \"why this cell is not generated\"`", ("exclude", i))
            for axis in axes:
                if axis not in cell:
                    raise FieldError(f"exclusion does not name axis '{axis}'; give one value per axis "
                                     f"({', '.join(axes)}) and a reason", ("exclude", i))
            for key, value in cell.items():
                if key == "reason":
                    continue
                if key not in axes:
                    raise FieldError(f"'{key}' is not an axis{_suggest(key, axes)}; axes: {', '.join(axes)}",
                                     ("exclude", i, key))
                if value not in axes[key]:
                    raise FieldError(f"exclusion names a missing cell: '{value}' is not on axis '{key}' "
                                     f"({', '.join(axes[key])})", ("exclude", i, key))
        cells = [tuple(c[a] for a in axes) for c in self.exclude]
        for i, c in enumerate(cells):
            if c in cells[:i]:
                raise FieldError(f"cell {dict(zip(axes, c))} is excluded twice; keep one", ("exclude", i))
        total = 1
        for values in axes.values():
            total *= len(values)
        if len(set(cells)) >= total:
            raise FieldError("every cell of the matrix is excluded; the family would generate nothing", ("exclude",))
        for axis, d in self.defaults.items():
            if axis not in axes:
                raise FieldError(f"'{axis}' is not an axis{_suggest(axis, axes)}; axes: {', '.join(axes)}", ("defaults", axis))
            if d.from_ not in axes or d.from_ == axis:
                raise FieldError(f"'from: {d.from_}' must name another axis: {', '.join(a for a in axes if a != axis)}",
                                 ("defaults", axis, "from"))
            for src, dst in d.map.items():
                if src not in axes[d.from_]:
                    raise FieldError(f"'{src}' is not on axis '{d.from_}' ({', '.join(axes[d.from_])})",
                                     ("defaults", axis, "map", src))
                cell = {d.from_: src, axis: dst}
                if not any(all(_cell_of(axes, c).get(k) == v for k, v in cell.items()) for c in self.generated_cells()):
                    raise FieldError(f"default {d.from_}={src} → {axis}={dst} points at no generated cell",
                                     ("defaults", axis, "map", src))
        return self

    def generated_cells(self) -> list[tuple[str, ...]]:
        import itertools
        excluded = {tuple(c[a] for a in self.axes) for c in self.exclude}
        return [c for c in itertools.product(*self.axes.values()) if c not in excluded]


def _cell_of(axes, cell: tuple) -> dict:
    return dict(zip(axes, cell))


class VectorOverride(SpecModel):
    """A different width for the matrix cells that match `when` (tuned per dtype pair)."""

    when: dict[str, DtypeName] = Field(description="axis → dtype; every named axis must match")
    bytes: int = Field(description="bytes per thread of the widest dtype for the matching cells")
    why: str = Field(description="the measurement that justifies the override")


class Vector(SpecModel):
    """Elements per thread: `bytes` of the widest dtype of the variant (moved in 16-byte accesses),
    or a fixed `elements` count."""

    bytes: int | None = Field(None, description="bytes per thread of the widest dtype (16 → 8 bf16 or 4 fp32)")
    elements: int | None = Field(None, description="a fixed element count, whatever the dtype")
    overrides: list[VectorOverride] = Field(default_factory=list, description="per-cell widths, first match wins")

    @model_validator(mode="after")
    def _one(self):
        if (self.bytes is None) == (self.elements is None):
            raise FieldError("give exactly one of `bytes: 16` or `elements: 16`")
        n = self.bytes if self.bytes is not None else self.elements
        if n <= 0 or n & (n - 1):
            raise FieldError(f"{n} is not a power of two; use 4, 8, 16, ...",
                             ("bytes" if self.bytes is not None else "elements",))
        for i, o in enumerate(self.overrides):
            if o.bytes <= 0 or o.bytes & (o.bytes - 1):
                raise FieldError(f"{o.bytes} is not a power of two; use 4, 8, 16, ...", ("overrides", i, "bytes"))
        return self


class Flag(SpecModel):
    """A compile-time bool: chosen per call (`select`) or per arch (`archs`)."""

    select: PyExpr | None = Field(None, description="Python expression over the wrapper's arguments; "
                                                    "its truth picks the specialization")
    kwarg: bool = Field(False, description="the wrapper takes a keyword argument of the flag's name")
    default: bool = Field(False, description="default of the keyword argument")
    archs: list[str] | None = Field(None, description="archs where the flag is on (e.g. PDL on sm_90a+)")

    @model_validator(mode="after")
    def _one(self):
        ways = [self.select is not None, self.kwarg, self.archs is not None]
        if sum(ways) != 1:
            raise FieldError("a flag is chosen one way: `select: EXPR`, `kwarg: true`, or `archs: [...]`")
        return self


class Param(SpecModel):
    """A non-dtype specialization axis chosen by a keyword argument of the wrapper."""

    values: list[Union[int, str]] = Field(description="allowed values, each a specialization")
    default: Union[int, str] = Field(description="the keyword argument's default")

    @model_validator(mode="after")
    def _default_listed(self):
        _unique(self.values, "value")
        if self.default not in self.values:
            raise FieldError(f"default {self.default!r} is not one of {self.values}", ("default",))
        return self


class FastMath(SpecModel):
    """Variants allowed approximate transcendentals, and what that costs in accuracy."""

    when: dict[str, list[Union[int, str]]] = Field(
        description="dtype axis → dtypes, or param → values; a variant matching every entry is fast-math")
    note: str = Field(description="the accuracy the tests accept for those variants, in words")


Layout = Literal["dense", "rows", "col_major"]


class TensorCase(SpecModel):
    """What changes in an output tensor for one value of a param (e.g. the scale format)."""

    dtype: str | None = None
    shape: list[PyExpr] | None = None
    layout: Layout | None = None


class TensorArg(SpecModel):
    """A tensor argument of the wrapper."""

    dtype: str = Field(description="a dtype axis name, or a fixed dtype")
    shape: list[PyExpr] = Field(description="one Python expression per dimension, over dims and params")
    layout: Layout = Field("dense", description=(
        "dense: contiguous; rows: last dim contiguous, row stride free (passed as T_stride0); "
        "col_major: transposed-contiguous 2-D"))
    output: bool = Field(False, description="allocated by the wrapper unless passed as a keyword")
    optional: bool = Field(False, description="an input that may be None")
    by: dict[str, dict[Union[int, str], TensorCase]] = Field(
        default_factory=dict, description="output only: param → value → dtype/shape/layout for that value")

    @model_validator(mode="after")
    def _cases(self):
        if self.by and not self.output:
            raise FieldError("`by` is for outputs; an input's dtype and shape are checked, not chosen", ("by",))
        if len(self.by) > 1:
            raise FieldError("`by` takes one param; split the output if it depends on two", ("by",))
        for param, cases in self.by.items():
            for value, case in cases.items():
                if case.shape is not None and len(case.shape) != len(self.shape):
                    raise FieldError(f"shape has rank {len(case.shape)}, the tensor has rank {len(self.shape)}",
                                     ("by", param, value, "shape"))
        return self


class ScalarArg(SpecModel):
    type: Literal["f32", "i32", "i64"]
    optional: bool = False
    default: Union[float, int, None] = None


class Signature(SpecModel):
    """The host wrapper's arguments, in call order: tensors, scalars, params/flags, outputs."""

    dims: dict[Symbol, PyExpr] = Field(description="size symbols bound from the inputs, e.g. M: x.shape[0]")
    tensors: dict[Ident, TensorArg]
    scalars: dict[Ident, ScalarArg] = Field(default_factory=dict)


class Gate(SpecModel):
    """A predicate every call must satisfy, checked in Python and again in C++."""

    check: Union[str, int] = Field(description="expression over dims, scalars, constants, vec, T.ptr, T.stride0")
    reason: str = Field(description="why the kernel needs it, shown in the error")


class Tests(SpecModel):
    """Generated test parametrization."""

    dims: dict[str, list[int]] = Field(description="dim → sizes; the tests take the product")
    layouts: list[Literal["dense", "strided"]] = Field(default_factory=lambda: ["dense"])
    cases: list[Ident] = Field(default_factory=list, description="edge cases: oracle function case_NAME")
    rejects: dict[Ident, int] = Field(default_factory=dict,
                                      description="oracle reject_NAME builds a call that gate N (0-based) must refuse")


class KernelSpec(SpecModel):
    """One kernel family: the single source of truth for its C++, dispatch, wrapper, tests and docs."""

    kernel: Ident = Field(description="family name; also the wrapper's function name")
    summary: str = Field(description="one line, shown in docs and --help")
    template: Ident = Field(description="folder under templates/ holding kernel.cuh.j2")
    targets: Targets
    constants: dict[Ident, Union[bool, int, float]] = Field(default_factory=dict)
    dtypes: DtypeMatrix
    params: dict[Ident, Param] = Field(default_factory=dict)
    flags: dict[Ident, Flag] = Field(default_factory=dict)
    vector: Vector
    fast_math: FastMath | None = Field(None, description="variants that may use approximate math")
    signature: Signature
    gates: list[Gate] = Field(default_factory=list)
    tie_order: TieOrderSpec = Field(
        "lowest_id", description="how equal keys are ordered: lowest_id, a table listing every index, "
                                 "earlier entries winning ties, or a rule with its table (`{rule: "
                                 "wave64_lane_table, ...}`); one for every backend or `{cuda: ..., hip: ...}` "
                                 "(routing families; see k3gen.routing)")
    sigmoid: SigmoidSpec = Field(
        "expf", description="the routing sigmoid: expf (torch.sigmoid's formula) or exp2 (aiter's); one for "
                            "every backend or `{cuda: ..., hip: ...}` (routing families)")
    oracle: str = Field(description="module holding reference(), make_args() and the test cases")
    tests: Tests

    @field_validator("tie_order", "sigmoid", mode="before")
    @classmethod
    def _routing_keys(cls, value, info):
        return check_keys(info.field_name, value)

    @model_validator(mode="after")
    def _routing(self):
        check_routing(self)  # per-backend maps cover the targets; tie orders are permutations of the experts
        return self

    @model_validator(mode="after")
    def _consistent(self):
        axes = self.dtypes.axes
        for name, t in self.signature.tensors.items():
            if t.dtype not in axes and t.dtype not in DTYPES:
                raise FieldError(f"dtype '{t.dtype}' is neither an axis ({', '.join(axes)}) nor a dtype "
                                 f"({', '.join(DTYPES)})", ("signature", "tensors", name, "dtype"))
        for name, t in self.signature.tensors.items():
            for param, cases in t.by.items():
                if param not in self.params:
                    raise FieldError(f"'{param}' is not a param{_suggest(param, self.params)}; params: "
                                     f"{', '.join(self.params) or 'none'}", ("signature", "tensors", name, "by", param))
                for value, case in cases.items():
                    where = ("signature", "tensors", name, "by", param, value)
                    if value not in self.params[param].values:
                        raise FieldError(f"{value!r} is not a value of '{param}' ({self.params[param].values})", where)
                    if case.dtype is not None and case.dtype not in DTYPES:
                        raise FieldError(f"'{case.dtype}' is not a dtype; known: {', '.join(DTYPES)}", where + ("dtype",))
        bound = {t.dtype for t in self.signature.tensors.values() if not t.output}
        for axis in axes:
            if not any(t.dtype == axis for t in self.signature.tensors.values()):
                raise FieldError(f"axis '{axis}' is not the dtype of any tensor; bind it with `dtype: {axis}`",
                                 ("dtypes", "axes", axis))
            if axis not in bound and axis not in self.dtypes.defaults:
                raise FieldError(f"axis '{axis}' is bound only by outputs, which callers may omit; "
                                 f"give it a default: `defaults: {{{axis}: {{from: AXIS, map: {{...}}}}}}`",
                                 ("dtypes", "axes", axis))
        for flag, f in self.flags.items():
            for i, a in enumerate(f.archs or []):
                if a not in (*self.targets.cuda, *self.targets.hip):
                    raise FieldError(f"'{a}' is not a target of this spec; targets: "
                                     f"{', '.join((*self.targets.cuda, *self.targets.hip))}", ("flags", flag, "archs", i))
        names = [*self.signature.dims, *self.signature.tensors, *self.signature.scalars, *self.params,
                 *self.flags, *self.constants]
        for kind, group in (("dims", self.signature.dims), ("scalars", self.signature.scalars),
                            ("params", self.params), ("flags", self.flags), ("constants", self.constants)):
            for n in group:
                if names.count(n) > 1:
                    raise FieldError(f"name '{n}' is used twice across dims, tensors, scalars, params, flags and "
                                     "constants; rename one", ((kind,) if kind in ("params", "flags", "constants") else
                                                               ("signature", kind)) + (n,))
        for d, sizes in self.tests.dims.items():
            if d not in self.signature.dims:
                raise FieldError(f"'{d}' is not a dim{_suggest(d, self.signature.dims)}; dims: "
                                 f"{', '.join(self.signature.dims)}", ("tests", "dims", d))
        for i, o in enumerate(self.vector.overrides):
            for axis, dtype in o.when.items():
                if axis not in axes:
                    raise FieldError(f"'{axis}' is not an axis{_suggest(axis, axes)}; axes: {', '.join(axes)}",
                                     ("vector", "overrides", i, "when", axis))
                if dtype not in axes[axis]:
                    raise FieldError(f"'{dtype}' is not on axis '{axis}' ({', '.join(axes[axis])})",
                                     ("vector", "overrides", i, "when", axis))
        for key, values in (self.fast_math.when.items() if self.fast_math else ()):
            allowed = axes.get(key) or (self.params[key].values if key in self.params else None)
            if allowed is None:
                known = [*axes, *self.params]
                raise FieldError(f"'{key}' is neither a dtype axis nor a param{_suggest(key, known)}; "
                                 f"known: {', '.join(known)}", ("fast_math", "when", key))
            for i, v in enumerate(values):
                if v not in allowed:
                    raise FieldError(f"{v!r} is not a value of '{key}' ({', '.join(map(str, allowed))})",
                                     ("fast_math", "when", key, i))
        scope = self.gate_scope()
        for i, gate in enumerate(self.gates):
            try:
                parse_expr(gate.check, scope)
            except ExprError as exc:
                raise FieldError(str(exc), ("gates", i, "check")) from None
        for name, idx in self.tests.rejects.items():
            if not 0 <= idx < len(self.gates):
                raise FieldError(f"gate index {idx} is out of range; this spec has gates 0..{len(self.gates) - 1}",
                                 ("tests", "rejects", name))
        return self

    def gate_scope(self) -> Scope:
        """Names a gate of this family may use (see k3gen.exprs)."""
        int_params = [p for p, prm in self.params.items() if all(isinstance(v, int) for v in prm.values)]
        return Scope(runtime=frozenset([*self.signature.dims, *self.signature.scalars]),
                     constants=dict(self.constants), tensors=frozenset(self.signature.tensors),
                     locals=frozenset(["vec", *int_params]))


# What a runner consumes, and the activation dtype that implies.
CONSUMES = {"fp32_strided": "fp32", "dense_bf16": "bf16"}


class Runner(SpecModel):
    """An expert-GEMM backend that consumes the routed activations of the front family."""

    name: Ident = Field(description="the name the engine asks about")
    archs: list[str] = Field(description="archs the runner runs on; each must be a target of the front family")
    consumes: Literal["fp32_strided", "dense_bf16"] = Field(
        description="fp32_strided: the fp32 slice as the front wrote it; dense_bf16: a dense bf16 copy")
    summary: str = Field(description="one line for the docs")

    @field_validator("archs")
    @classmethod
    def _known_archs(cls, archs: list[str]) -> list[str]:
        known = (*CUDA_ARCHS, *HIP_ARCHS)
        for i, a in enumerate(archs):
            if a not in known:
                raise FieldError(f"'{a}' is not an arch{_suggest(a, known)}; known: {', '.join(known)}", (i,))
        return _unique(archs, "arch")

    @property
    def activation_dtype(self) -> str:
        return CONSUMES[self.consumes]


class RunnerTable(SpecModel):
    """specs/runners.yaml: the runners of the MoE front and the family whose output they consume."""

    front: Ident = Field(description="the kernel family whose `act` dtype axis the runners read")
    runners: list[Runner]

    @field_validator("runners")
    @classmethod
    def _unique_names(cls, runners: list[Runner]) -> list[Runner]:
        names = [r.name for r in runners]
        for i, n in enumerate(names):
            if n in names[:i]:
                raise FieldError(f"runner '{n}' is listed twice; keep one", (i, "name"))
        return runners
