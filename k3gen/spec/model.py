"""What a spec file says: pydantic models of one kernel family, checked field by field.

Rules about one field live in field validators; rules that tie fields of one spec together live in
model validators; rules across spec files live in k3gen.spec.load. Validators raise FieldError so the
error can point at the exact YAML line below the field.
"""

from __future__ import annotations

import difflib
import itertools
import math
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    field_validator,
    model_validator,
)

from k3gen.runtime import archs as arch_table
from k3gen.runtime.devices import SHORT_NAME
from k3gen.runtime.dtypes import DTYPES
from k3gen.spec import grammar
from k3gen.spec.bounds import KEY_FIELDS, MAX_PARAM_VALUES, MAX_TEST_DIM_SETS, MAX_TEST_ELEMENTS, MAX_VARIANTS
from k3gen.spec.errors import FieldError
from k3gen.spec.routing import SigmoidSpec, TieOrderSpec, check_keys

IDENT = grammar.IDENT  # k3gen new checks names with it too


def _suggest(value: str, known) -> str:
    close = difflib.get_close_matches(str(value), [str(k) for k in known], n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _check_dtype(value: str) -> str:
    if value not in DTYPES:
        raise FieldError(f"{ascii(value)[:60]} is not a dtype{_suggest(value, DTYPES)}; known: {', '.join(DTYPES)}")
    return value


def _checked(problem):
    def check(value):
        said = problem(value)
        if said:
            raise FieldError(said)
        return value

    return AfterValidator(check)


DtypeName = Annotated[str, AfterValidator(_check_dtype)]
# A name spelled bare in generated code (tensors, scalars, params, flags, constants): no reserved words.
Ident = Annotated[str, _checked(grammar.name_problem)]
# A name only ever spelled with a prefix or quoted (axes, param values, templates, cases, runners).
Word = Annotated[str, _checked(lambda v: grammar.name_problem(v, bare=False))]
Symbol = Annotated[str, _checked(lambda v: grammar.name_problem(v, grammar.SYMBOL))]
Text = Annotated[str, _checked(grammar.text_problem)]
Int32 = Annotated[StrictInt, _checked(grammar.int32_problem)]
Float32 = Annotated[
    StrictInt | StrictFloat,
    _checked(lambda v: grammar.float32_problem(float(v)) if abs(v) < 1e300 else f"{v} does not fit a C++ float"),
]
# An expression of k3gen.spec.exprs; checked against what the spec declares in k3gen.spec.rules.
ExprSource = StrictInt | str
Constant = Annotated[
    StrictBool | StrictInt | StrictFloat,
    _checked(
        lambda v: (
            None if type(v) is bool else grammar.int32_problem(v) if type(v) is int else grammar.float32_problem(v)
        )
    ),
]
ParamValue = Annotated[
    StrictInt | str,
    _checked(lambda v: grammar.int32_problem(v) if type(v) is int else grammar.name_problem(v, bare=False)),
]


class SpecModel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


def _duplicates(values: list, what: str) -> list[tuple[tuple, str]]:
    seen: dict = {}
    out = []
    for i, v in enumerate(values):
        if v in seen:
            out.append(((i,), f"{what} {v!r} is listed twice (items {seen[v]} and {i}); list it once"))
        seen.setdefault(v, i)
    return out


def _unique(values: list, what: str) -> list:
    FieldError.collect(_duplicates(values, what))
    return values


class Targets(SpecModel):
    """Where the family is built. Every arch listed gets every specialization."""

    cuda: list[str] = Field(default_factory=list, description="CUDA archs, e.g. sm_90a")
    hip: list[str] = Field(default_factory=list, description="HIP archs, e.g. gfx942")

    @field_validator("cuda", "hip")
    @classmethod
    def _known_arch(cls, archs: list[str], info) -> list[str]:
        known = arch_table.known(info.field_name)
        FieldError.collect(
            [
                (
                    (i,),
                    f"{ascii(a)[:60]} is not a {info.field_name} arch{_suggest(a, known)}; known: {', '.join(known)} "
                    "(a new arch is a row of k3gen/runtime/archs.py)",
                )
                for i, a in enumerate(archs)
                if a not in known
            ]
            + _duplicates(archs, "arch")
        )
        return archs

    @model_validator(mode="after")
    def _not_empty(self):
        if not self.cuda and not self.hip:
            raise FieldError("no targets; list at least one arch, e.g. `cuda: [sm_90a]`")
        return self

    @property
    def all(self) -> list[str]:
        return [*self.cuda, *self.hip]


class DerivedDefault(SpecModel):
    """An axis value derived from another axis when the caller does not fix it (fp32 in → bf16 out)."""

    from_: str = Field(alias="from", description="the axis the default is read from")
    map: dict[str, DtypeName] = Field(description="value of `from` axis → default value of this axis")


class DtypeMatrix(SpecModel):
    """The product of the named axes, minus exclusions. Every cell is generated or excluded with a reason."""

    axes: dict[Word, list[DtypeName]] = Field(description="axis name → dtypes, in dispatch order")
    exclude: list[dict[str, str]] = Field(
        default_factory=list, description="cells left out: one value per axis, plus `reason`"
    )
    defaults: dict[str, DerivedDefault] = Field(
        default_factory=dict, description="axis → how its value is derived when not given"
    )

    @field_validator("axes")
    @classmethod
    def _axes(cls, axes):
        if not axes:
            raise FieldError("the matrix has no axes; declare at least one, e.g. `in: [bf16]`")
        problems = []
        for name, values in axes.items():
            if not values:
                problems.append(((name,), f"axis '{name}' is empty; list at least one dtype"))
            problems += [((name, *sub), msg) for sub, msg in _duplicates(values, "dtype")]
        cells = 1
        for values in axes.values():
            cells *= max(1, len(values))
        if len(axes) > KEY_FIELDS or cells > MAX_VARIANTS:
            problems.append(
                (
                    (),
                    f"{len(axes)} axes make {cells} cells; a family has at most {MAX_VARIANTS} "
                    f"variants (bounds.MAX_VARIANTS) and {KEY_FIELDS} key fields (bounds.KEY_FIELDS)",
                )
            )
        FieldError.collect(problems)
        return axes

    @model_validator(mode="after")
    def _cells(self):
        FieldError.collect(list(self._cell_problems()))
        return self

    def _cell_problems(self):
        axes = self.axes
        cells = []
        for i, cell in enumerate(self.exclude):
            where = ("exclude", i)
            said = grammar.text_problem(cell.get("reason", ""))
            if "reason" not in cell or said:
                yield (
                    where + (("reason",) if "reason" in cell else ()),
                    'exclusion has no reason; add `reason: "why this cell is not generated"`'
                    if "reason" not in cell
                    else said,
                )
            missing = [a for a in axes if a not in cell]
            if missing:
                yield (
                    where,
                    (
                        f"exclusion does not name axis '{missing[0]}'; give one value per axis "
                        f"({', '.join(axes)}) and a reason"
                    ),
                )
            bad = False
            for key, value in cell.items():
                if key == "reason":
                    continue
                if key not in axes:
                    bad = True
                    yield (
                        where + (key,),
                        f"{ascii(key)[:60]} is not an axis{_suggest(key, axes)}; axes: {', '.join(axes)}",
                    )
                elif value not in axes[key]:
                    bad = True
                    yield (
                        where + (key,),
                        (
                            f"exclusion names a missing cell: {ascii(value)[:60]} is not on axis "
                            f"'{key}' ({', '.join(axes[key])})"
                        ),
                    )
            if missing or bad:
                continue
            c = tuple(cell[a] for a in axes)
            if c in cells:
                yield where, f"cell {dict(zip(axes, c))} is excluded twice; keep one"
            cells.append(c)
        total = 1
        for values in axes.values():
            total *= len(values)
        if len(set(cells)) >= total:
            yield ("exclude",), "every cell of the matrix is excluded; the family would generate nothing"
            return
        for axis, d in self.defaults.items():
            if axis not in axes:
                yield (
                    ("defaults", axis),
                    f"{ascii(axis)[:60]} is not an axis{_suggest(axis, axes)}; axes: {', '.join(axes)}",
                )
                continue
            if d.from_ not in axes or d.from_ == axis:
                yield (
                    ("defaults", axis, "from"),
                    f"'from: {ascii(d.from_)[:60]}' must name another axis: {', '.join(a for a in axes if a != axis)}",
                )
                continue
            generated = [dict(zip(axes, c)) for c in self.generated_cells()]
            for src, dst in d.map.items():
                if src not in axes[d.from_]:
                    yield (
                        ("defaults", axis, "map", src),
                        f"{ascii(src)[:60]} is not on axis '{d.from_}' ({', '.join(axes[d.from_])})",
                    )
                elif not any(c[d.from_] == src and c[axis] == dst for c in generated):
                    yield (
                        ("defaults", axis, "map", src),
                        f"default {d.from_}={src} → {axis}={dst} points at no generated cell",
                    )

    def generated_cells(self) -> list[tuple[str, ...]]:
        excluded = {tuple(c.get(a) for a in self.axes) for c in self.exclude}
        return [c for c in itertools.product(*self.axes.values()) if c not in excluded]


class VectorOverride(SpecModel):
    """A different width for the matrix cells that match `when` (tuned per dtype pair)."""

    when: dict[str, DtypeName] = Field(description="axis → dtype; every named axis must match")
    bytes: StrictInt = Field(description="bytes per thread of the widest dtype for the matching cells")
    why: Text = Field(description="the measurement that justifies the override")


def _positive(n: int) -> str | None:
    return None if 0 < n <= 1 << 40 else f"{n} is not a budget; give a positive integer"


def _power_of_two(n: int) -> bool:
    return 0 < n <= 1024 and not n & (n - 1)


def _not_power_of_two(n: int) -> str:
    return (
        f"{n} is more than 1024; use 4, 8, 16, ..."
        if n > 1024 and not n & (n - 1)
        else f"{n} is not a power of two; use 4, 8, 16, ..."
    )


class Vector(SpecModel):
    """Elements per thread: `bytes` of the widest dtype of the variant (moved in 16-byte accesses),
    or a fixed `elements` count."""

    bytes: StrictInt | None = Field(None, description="bytes per thread of the widest dtype (16 → 8 bf16 or 4 fp32)")
    elements: StrictInt | None = Field(None, description="a fixed element count, whatever the dtype")
    overrides: list[VectorOverride] = Field(default_factory=list, description="per-cell widths, first match wins")

    @model_validator(mode="after")
    def _one(self):
        if (self.bytes is None) == (self.elements is None):
            raise FieldError("give exactly one of `bytes: 16` or `elements: 16`")
        n = self.bytes if self.bytes is not None else self.elements
        problems = []
        if not _power_of_two(n):
            problems.append((("bytes" if self.bytes is not None else "elements",), _not_power_of_two(n)))
        problems += [
            (("overrides", i, "bytes"), _not_power_of_two(o.bytes))
            for i, o in enumerate(self.overrides)
            if not _power_of_two(o.bytes)
        ]
        FieldError.collect(problems)
        return self

    def elements_for(self, dtypes: dict[str, str]) -> int:
        """Elements per thread for one matrix cell (axis → dtype): the first matching override's
        bytes, else `bytes`, over the widest dtype of the cell; or the fixed `elements`."""
        if self.elements is not None:
            return self.elements
        nbytes = next((o.bytes for o in self.overrides if all(dtypes[a] == d for a, d in o.when.items())), self.bytes)
        return max(1, nbytes // max(DTYPES[d].size for d in dtypes.values()))


class Flag(SpecModel):
    """A compile-time bool: chosen per call (`select`) or per arch (`archs`)."""

    select: ExprSource | None = Field(
        None,
        description="expression over the wrapper's arguments (k3gen.spec.exprs); its truth picks the specialization",
    )
    kwarg: StrictBool = Field(False, description="the wrapper takes a keyword argument of the flag's name")
    default: StrictBool = Field(False, description="default of the keyword argument")
    archs: list[str] | None = Field(None, description="archs where the flag is on (e.g. PDL on sm_90a+)")

    @model_validator(mode="after")
    def _one(self):
        ways = [self.select is not None, self.kwarg, self.archs is not None]
        if sum(ways) != 1:
            raise FieldError("a flag is chosen one way: `select: EXPR`, `kwarg: true`, or `archs: [...]`")
        return self


class Param(SpecModel):
    """A non-dtype specialization axis chosen by a keyword argument of the wrapper."""

    values: list[ParamValue] = Field(description="allowed values (names or integers), each a specialization")
    default: ParamValue = Field(description="the keyword argument's default")

    @field_validator("values")
    @classmethod
    def _values(cls, values):
        problems = _duplicates(values, "value")
        if not values:
            problems.append(((), "a param needs at least one value"))
        if len(values) > MAX_PARAM_VALUES:
            problems.append(
                (
                    (),
                    f"{len(values)} values; a param has at most {MAX_PARAM_VALUES} (bounds.MAX_PARAM_VALUES: "
                    "its index is one switch-key field of bounds.KEY_BITS bits)",
                )
            )
        if len({type(v) for v in values}) > 1:
            problems.append(((), "mix of names and integers; give all values one kind"))
        FieldError.collect(problems)
        return values

    @model_validator(mode="after")
    def _default_listed(self):
        if self.default not in self.values:
            raise FieldError(f"default {self.default!r} is not one of {self.values}", ("default",))
        return self

    @property
    def is_int(self) -> bool:
        return all(type(v) is int for v in self.values)


class FastMath(SpecModel):
    """Variants allowed approximate transcendentals, and what that costs in accuracy."""

    when: dict[str, list[ParamValue]] = Field(
        description="dtype axis → dtypes, or param → values; a variant matching every entry is fast-math"
    )
    note: Text = Field(description="the accuracy the tests accept for those variants, in words")


Layout = Literal["dense", "rows", "col_major"]


class TensorCase(SpecModel):
    """What changes in an output tensor for one value of a param (e.g. the scale format)."""

    dtype: str | None = None
    shape: list[ExprSource] | None = None
    layout: Layout | None = None


class TensorArg(SpecModel):
    """A tensor argument of the wrapper."""

    dtype: str = Field(description="a dtype axis name, or a fixed dtype")
    shape: list[ExprSource] = Field(description="one expression per dimension (k3gen.spec.exprs), over dims and params")
    layout: Layout = Field(
        "dense",
        description=(
            "dense: contiguous; rows: last dim contiguous, row stride free (passed as T_stride0); "
            "col_major: transposed-contiguous 2-D"
        ),
    )
    output: StrictBool = Field(False, description="allocated by the wrapper unless passed as a keyword")
    optional: StrictBool = Field(False, description="an input that may be None")
    by: dict[str, dict[ParamValue, TensorCase]] = Field(
        default_factory=dict, description="output only: param → value → dtype/shape/layout for that value"
    )

    @model_validator(mode="after")
    def _cases(self):
        if not 1 <= len(self.shape) <= 8:
            raise FieldError(f"rank {len(self.shape)}; a tensor has 1 to 8 dimensions", ("shape",))
        if self.by and not self.output:
            raise FieldError("`by` is for outputs; an input's dtype and shape are checked, not chosen", ("by",))
        if len(self.by) > 1:
            raise FieldError("`by` takes one param; split the output if it depends on two", ("by",))
        FieldError.collect(
            [
                (
                    ("by", param, value, "shape"),
                    f"shape has rank {len(case.shape)}, the tensor has rank {len(self.shape)}",
                )
                for param, cases in self.by.items()
                for value, case in cases.items()
                if case.shape is not None and len(case.shape) != len(self.shape)
            ]
        )
        return self


class ScalarArg(SpecModel):
    type: Literal["f32", "i32", "i64"]
    optional: StrictBool = False
    default: Int32 | Float32 | None = None


class Signature(SpecModel):
    """The host wrapper's arguments, in call order: tensors, scalars, params/flags, outputs."""

    dims: dict[Symbol, ExprSource] = Field(description="size symbols bound from the inputs, e.g. M: x.shape[0]")
    tensors: dict[Ident, TensorArg]
    scalars: dict[Ident, ScalarArg] = Field(default_factory=dict)


class Gate(SpecModel):
    """A predicate every call must satisfy, checked in Python and again in C++."""

    check: ExprSource = Field(description="expression over dims, scalars, constants, vec, T.ptr, T.stride0")
    reason: Text = Field(description="why the kernel needs it, shown in the error")


class Tests(SpecModel):
    """Generated test parametrization."""

    dims: dict[
        str,
        list[
            Annotated[
                StrictInt, _checked(lambda v: None if 0 <= v <= 1 << 24 else f"{v} is not a test size in 0..{1 << 24}")
            ]
        ],
    ] = Field(description="dim → sizes; the tests take the product")
    layouts: list[Literal["dense", "strided"]] = Field(default_factory=lambda: ["dense"])
    cases: list[Word] = Field(default_factory=list, description="edge cases: oracle function case_NAME")
    rejects: dict[Word, StrictInt] = Field(
        default_factory=dict, description="oracle reject_NAME builds a call that gate N (0-based) must refuse"
    )

    @field_validator("dims")
    @classmethod
    def _bounded(cls, dims):
        n = 1
        for sizes in dims.values():
            n *= len(sizes)
        if n > MAX_TEST_DIM_SETS or len(dims) > 8:
            raise FieldError(f"the sizes make {n} combinations; at most {MAX_TEST_DIM_SETS} (bounds.MAX_TEST_DIM_SETS)")
        largest = math.prod(max(sizes, default=1) for sizes in dims.values())
        if largest > MAX_TEST_ELEMENTS:
            raise FieldError(
                f"the largest sizes make {largest} elements per tensor; a generated test allocates at most "
                f"{MAX_TEST_ELEMENTS} (bounds.MAX_TEST_ELEMENTS): use smaller sizes"
            )
        FieldError.collect([((d, *sub), msg) for d, sizes in dims.items() for sub, msg in _duplicates(sizes, "size")])
        return dims


class Budget(SpecModel):
    """What the family may cost to build, per arch; `k3gen check` and `k3gen diff --check-budget` fail
    when a change exceeds it. Bytes are priced from the compile-cost table (k3gen.ship.costs)."""

    units_per_arch: Annotated[StrictInt, _checked(_positive)] | None = Field(
        None, description="translation units compiled for each arch: one per variant, plus the dispatch"
    )
    bytes_per_arch: Annotated[StrictInt, _checked(_positive)] | None = Field(
        None, description="bytes of the family's library for each arch"
    )

    @model_validator(mode="after")
    def _something(self):
        if self.units_per_arch is None and self.bytes_per_arch is None:
            raise FieldError("an empty budget; give `units_per_arch: N`, `bytes_per_arch: N` or both")
        return self


def _device_problem(value: str) -> str | None:
    """Why `value` is not a device's short name, as a table's file name spells it (k3gen.runtime.devices)."""
    if SHORT_NAME.fullmatch(value):
        return None
    return f"{ascii(value)[:60]} is not a device's short name; write one of [a-z0-9_]{{1,64}}, e.g. h100 or h200"


class Tuning(SpecModel):
    """Knobs `k3gen tune` picks per bucket of M (specs/tuning/<family>.<device>.yaml holds a device's picks).

    A knob is a constant of the spec whose candidates are template arguments like the dtypes: every
    candidate config is compiled into each variant's unit, and each device's checked-in table chooses
    one per bucket. The GPU a call runs on takes its own table, else the `fallback` device's (per
    variant too: one its own table has no current pick for); the constant's own value is the default
    config, run where no table applies."""

    knobs: dict[Ident, list[Annotated[StrictInt, _checked(_positive)]]] = Field(
        description="constant -> its candidate values (the constant's value among them: the default)"
    )
    buckets: list[Annotated[StrictInt, _checked(_positive)]] = Field(
        description="upper bounds of M, increasing: bucket i holds buckets[i-1] < M <= buckets[i]"
    )
    fallback: Annotated[str, _checked(_device_problem)] | None = Field(
        None,
        description="the device whose table serves a GPU with no table of its own (a declared nearest device, "
        "e.g. h100 for an H800), and a variant whose own table has no current pick (stale: retune it); "
        "without it such a GPU or variant runs the default config",
    )

    @field_validator("knobs")
    @classmethod
    def _knobs(cls, knobs):
        if not knobs:
            raise FieldError("no knobs; name at least one constant with its candidates, or drop `tuning:`")
        FieldError.collect([((k, *sub), msg) for k, vs in knobs.items() for sub, msg in _duplicates(vs, "value")])
        empty = [k for k, vs in knobs.items() if not vs]
        if empty:
            raise FieldError(f"knob {empty[0]} has no candidates; list at least one value")
        if math.prod(len(vs) for vs in knobs.values()) > 8:
            raise FieldError("more than 8 candidate configs; tuning must stay quick (issue 13): drop candidates")
        return knobs

    @field_validator("buckets")
    @classmethod
    def _buckets(cls, buckets):
        if not buckets:
            raise FieldError("no buckets; list the upper bounds of M, e.g. [1, 128, 1024]")
        for i in range(1, len(buckets)):
            if buckets[i] <= buckets[i - 1]:
                FieldError.collect([((i,), f"bucket {buckets[i]} is not above {buckets[i - 1]}; list them increasing")])
        return buckets


class Groups(SpecModel):
    """Grouped selection (DeepSeek-V3's): experts in `count` groups of consecutive ids; each group's
    score is `score` of its experts' selection keys; the top-K is taken over the `keep` best groups."""

    count: Annotated[StrictInt, _checked(lambda n: None if 2 <= n <= 64 else f"{n} groups; give 2 to 64")]
    keep: Annotated[StrictInt, _checked(lambda n: None if n >= 1 else f"{n}; keep at least one group")]
    score: Literal["sum_top2", "max"] = Field(
        "sum_top2", description="a group's score: the sum of its two best keys (DeepSeek-V3), or its best key"
    )


class Routing(SpecModel):
    """How a routing family scores and selects (the route template's axes; docs/kernels.md §3). Each
    value is compiled into the kernel, so it is part of every unit's key. The weights never carry the
    selection bias."""

    scoring: Literal["sigmoid", "softmax", "sqrt_softplus", "none"] = Field(
        "sigmoid", description="sigmoid (the spec's `sigmoid` formula), softmax, sqrt(softplus(x)), or none"
    )
    scoring_at: Literal["before", "after"] = Field(
        "before", description="before: scored over every expert, then top-K; after: top-K on the logits, then scored"
    )
    bias: Literal["scores", "logits", "none"] = Field(
        "scores", description="where the bias is added for selection only: to the scores (probabilities), the logits"
    )
    groups: Groups | None = Field(None, description="grouped selection; none: every expert competes for every slot")
    renormalize: Literal["positive", "add_eps", "clamp"] = Field(
        "positive",
        description="renormalized weights divide by: the sum where it is positive, else 1; sum + renorm_eps; "
        "max(sum, renorm_eps)",
    )
    renorm_eps: Float32 = Field(0.0, description="the eps of add_eps and clamp (DeepSeek-V3: 1e-20; ERNIE: 1e-12)")
    sorted: StrictBool = Field(True, description="outputs by rank (descending); false: in expert-id order")


def _oracle_problem(value: str) -> str | None:
    """Oracles are modules of the project's oracle package, named by the grammar alone (no paths)."""
    if grammar.ORACLE.match(value):
        return None
    last = value.rsplit(".", 1)[-1]
    hint = f" (did you mean 'k3gen.oracles.{last}'?)" if grammar.IDENT.match(last) else ""
    return f"{ascii(value)[:80]} is not an oracle module{hint}; write k3gen.oracles.NAME (NAME in lower_snake_case)"


class KernelSpec(SpecModel):
    """One kernel family: the single source of truth for its C++, dispatch, wrapper, tests and docs.

    Each field is checked on its own here; rules that tie fields together live in k3gen.spec.rules,
    so they run, and report, even when another field is wrong.
    """

    kernel: Ident = Field(description="family name; also the wrapper's function name")
    summary: Text = Field(description="one line, shown in docs and --help")
    template: Word = Field(description="folder under templates/ holding kernel.cuh.j2")
    targets: Targets
    constants: dict[Ident, Constant] = Field(default_factory=dict)
    dtypes: DtypeMatrix
    params: dict[Ident, Param] = Field(default_factory=dict)
    flags: dict[Ident, Flag] = Field(default_factory=dict)
    vector: Vector
    fast_math: FastMath | None = Field(None, description="variants that may use approximate math")
    signature: Signature
    gates: list[Gate] = Field(default_factory=list)
    tie_order: TieOrderSpec = Field(
        "lowest_id",
        description="how equal keys are ordered: lowest_id, a table listing every index, "
        "earlier entries winning ties, or a rule with its table (`{rule: "
        "wave64_lane_table, ...}`); one for every backend or `{cuda: ..., hip: ...}` "
        "(routing families; see k3gen.spec.routing)",
    )
    sigmoid: SigmoidSpec = Field(
        "expf",
        description="the routing sigmoid: expf (torch.sigmoid's formula) or exp2 (aiter's); one for "
        "every backend or `{cuda: ..., hip: ...}` (routing families)",
    )
    oracle: Annotated[str, _checked(_oracle_problem)] = Field(
        description="module holding reference(), make_args() and the test cases: k3gen.oracles.NAME"
    )
    tests: Tests
    budget: Budget | None = Field(None, description="build cost the family may not exceed, per arch")
    tuning: Tuning | None = Field(None, description="knobs tuned per bucket of M by `k3gen tune`")
    routing: Routing | None = Field(None, description="how a routing family scores and selects (routing template)")

    @field_validator("tie_order", "sigmoid", mode="before")
    @classmethod
    def _routing_keys(cls, value, info):
        return check_keys(info.field_name, value)

    @property
    def call_flags(self) -> list[str]:
        return call_flags(self.flags)


def call_flags(flags: dict) -> list[str]:
    """The flags chosen per call, in key order (the others are chosen per arch)."""
    return [f for f, fl in flags.items() if fl.archs is None]


def param_points(params: dict):
    """Each combination of param values, as {param: value}, in the order the plan enumerates them."""
    for values in itertools.product(*(p.values for p in params.values())):
        yield dict(zip(params, values))


def variant_points(dtypes: DtypeMatrix, params: dict, flags: list[str] = ()):
    """The variant space, the one enumeration of it: each generated cell × param values × call-time
    flags, as (dtypes, params, flags) dicts; the plan makes a Variant of each, the load-time checks
    decide theirs over them."""
    for cell in dtypes.generated_cells():
        for chosen in param_points(params):
            for on in itertools.product((False, True), repeat=len(flags)):
                yield dict(zip(dtypes.axes, cell)), chosen, dict(zip(flags, on))


def tuning_configs(spec) -> list[dict]:
    """Every candidate config of a spec's knobs, its default (the constants) first, then in product order."""
    knobs = spec.tuning.knobs
    default = {k: spec.constants[k] for k in knobs}
    rest = [dict(zip(knobs, vs)) for vs in itertools.product(*knobs.values())]
    return [default, *(c for c in rest if c != default)]


# What a runner consumes, and the activation dtype that implies.
CONSUMES = {"fp32_strided": "fp32", "dense_bf16": "bf16"}


class Runner(SpecModel):
    """An expert-GEMM backend that consumes the routed activations of the front family."""

    name: Word = Field(description="the name the engine asks about")
    archs: list[str] = Field(description="archs the runner runs on; each must be a target of the front family")
    consumes: Literal["fp32_strided", "dense_bf16"] = Field(
        description="fp32_strided: the fp32 slice as the front wrote it; dense_bf16: a dense bf16 copy"
    )
    summary: Text = Field(description="one line for the docs")

    @field_validator("archs")
    @classmethod
    def _known_archs(cls, archs: list[str]) -> list[str]:
        known = arch_table.known()
        FieldError.collect(
            [
                ((i,), f"{ascii(a)[:60]} is not an arch{_suggest(a, known)}; known: {', '.join(known)}")
                for i, a in enumerate(archs)
                if a not in known
            ]
            + _duplicates(archs, "arch")
        )
        return archs

    @property
    def activation_dtype(self) -> str:
        return CONSUMES[self.consumes]


class DenseBf16Check(SpecModel):
    """The call the generated test of the dense-bf16 contract makes: the contract's family
    (k3gen.spec.meaning.contracts.DENSE_BF16) on fp32 input of these sizes, with these scalars."""

    dims: dict[
        Symbol,
        Annotated[
            StrictInt, _checked(lambda v: None if 1 <= v <= 1 << 24 else f"{v} is not a test size in 1..{1 << 24}")
        ],
    ] = Field(description="each signature dim of the family → its size")
    scalars: dict[Ident, Float32] = Field(
        default_factory=dict, description="the family's scalar arguments of the call, by name"
    )

    @field_validator("dims")
    @classmethod
    def _bounded(cls, dims):
        if math.prod(dims.values()) > MAX_TEST_ELEMENTS:
            raise FieldError(
                f"the sizes make {math.prod(dims.values())} elements; the GPU test allocates at most "
                f"{MAX_TEST_ELEMENTS} per tensor (bounds.MAX_TEST_ELEMENTS): use smaller sizes"
            )
        return dims


class RunnerTable(SpecModel):
    """specs/runners.yaml: the runners of the MoE front and the family whose output they consume."""

    front: Word = Field(description="the kernel family whose `act` dtype axis the runners read")
    runners: list[Runner] = Field(max_length=256)
    dense_bf16_check: DenseBf16Check | None = Field(
        None, description="the GPU test of the dense-bf16 contract; needed while a runner consumes dense_bf16"
    )

    @field_validator("runners")
    @classmethod
    def _unique_names(cls, runners: list[Runner]) -> list[Runner]:
        FieldError.collect(
            [
                ((i, "name"), f"runner '{r.name}' is listed twice; keep one")
                for i, r in enumerate(runners)
                if r.name in [x.name for x in runners[:i]]
            ]
        )
        return runners
