"""Rules that tie the fields of one spec together.

Each rule names the top-level fields it reads and runs whenever those fields are valid, even if
others are not, so one run reports every problem of a spec. A rule yields (path, message) pairs; the
loader turns them into located SpecErrors.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

from k3gen.runtime.dtypes import DTYPES
from k3gen.spec import grammar
from k3gen.spec.bounds import KEY_FIELDS, MAX_FILE_NAME, MAX_VARIANTS
from k3gen.spec.errors import FieldError
from k3gen.spec.exprs import ExprError, parse_expr
from k3gen.spec.model import _suggest, call_flags
from k3gen.spec.routing import check_routing
from k3gen.spec.scopes import dim_scope, gate_scope, select_scope, shape_scope

RULES: list[tuple[tuple[str, ...], object]] = []


def rule(*needs: str):
    def register(fn):
        RULES.append((needs, fn))
        return fn

    return register


def check_spec(parts: dict) -> list[tuple[tuple, str]]:
    """Every problem the rules find among the valid top-level fields in `parts`."""
    s = SimpleNamespace(**parts)
    problems = []
    for needs, fn in RULES:
        if all(n in parts for n in needs):
            problems += list(fn(s))
    return problems


def _expr(source, scope, path):
    try:
        parse_expr(source, scope)
    except ExprError as exc:
        yield path, str(exc)


@rule("dtypes", "params", "flags")
def _bounded_matrix(s):
    """Count the variants before anything expands them."""
    cells = len(s.dtypes.generated_cells())
    per_cell = math.prod(len(p.values) for p in s.params.values())
    flags = call_flags(s.flags)
    variants = cells * per_cell * 2 ** len(flags)
    fields = len(s.dtypes.axes) + len(s.params) + len(flags)
    where = ("flags",) if flags else ("params",) if s.params else ("dtypes",)
    if variants > MAX_VARIANTS:
        yield (
            where,
            (
                f"{cells} dtype cells x {per_cell} param combinations x 2^{len(flags)} call-time flags = "
                f"{variants} variants; a family has at most {MAX_VARIANTS} (bounds.MAX_VARIANTS): split it"
            ),
        )
    elif fields > KEY_FIELDS:
        yield (
            where,
            (f"{fields} axes, params and call-time flags; the switch key has {KEY_FIELDS} fields (bounds.KEY_FIELDS)"),
        )


@rule("kernel", "dtypes", "params", "flags")
def _file_names(s):
    """A variant's name is a file name: keep it under what filesystems allow."""
    longest = len(s.kernel) + sum(3 + len(a) + max(len(d) for d in ds) for a, ds in s.dtypes.axes.items())
    longest += sum(3 + len(p) + max(len(str(v)) for v in prm.values) for p, prm in s.params.items())
    longest += sum(6 + len(f) for f in call_flags(s.flags))
    if longest + 12 > MAX_FILE_NAME:
        yield (
            (),
            (
                f"variant file names reach {longest + 12} characters; at most {MAX_FILE_NAME} "
                "(bounds.MAX_FILE_NAME): shorten the kernel, axis, param or flag names"
            ),
        )


@rule("dtypes", "signature")
def _tensor_dtypes(s):
    axes = s.dtypes.axes
    unknown = [(n, t) for n, t in s.signature.tensors.items() if t.dtype not in axes and t.dtype not in DTYPES]
    for name, t in unknown:
        yield (
            ("signature", "tensors", name, "dtype"),
            (f"dtype '{t.dtype}' is neither an axis ({', '.join(axes)}) nor a dtype ({', '.join(DTYPES)})"),
        )
    if unknown:  # an unbound axis is then most likely that typo, already reported
        return
    bound = {t.dtype for t in s.signature.tensors.values() if not t.output}
    for axis in axes:
        if not any(t.dtype == axis for t in s.signature.tensors.values()):
            yield (
                ("dtypes", "axes", axis),
                f"axis '{axis}' is not the dtype of any tensor; bind it with `dtype: {axis}`",
            )
        elif axis not in bound and axis not in s.dtypes.defaults:
            yield (
                ("dtypes", "axes", axis),
                (
                    f"axis '{axis}' is bound only by outputs, which callers may omit; give it a "
                    f"default: `defaults: {{{axis}: {{from: AXIS, map: {{...}}}}}}`"
                ),
            )


@rule("params", "signature")
def _tensor_cases(s):
    for name, t in s.signature.tensors.items():
        for param, cases in t.by.items():
            if param not in s.params:
                yield (
                    ("signature", "tensors", name, "by", param),
                    (
                        f"{ascii(param)[:60]} is not a param{_suggest(param, s.params)}; "
                        f"params: {', '.join(s.params) or 'none'}"
                    ),
                )
                continue
            for value, case in cases.items():
                where = ("signature", "tensors", name, "by", param, value)
                if value not in s.params[param].values:
                    yield where, f"{value!r} is not a value of '{param}' ({s.params[param].values})"
                if case.dtype is not None and case.dtype not in DTYPES:
                    yield where + ("dtype",), f"{ascii(case.dtype)[:60]} is not a dtype; known: {', '.join(DTYPES)}"


@rule("flags", "targets")
def _flag_archs(s):
    for flag, f in s.flags.items():
        for i, a in enumerate(f.archs or []):
            if a not in s.targets.all:
                yield (
                    ("flags", flag, "archs", i),
                    (f"{ascii(a)[:60]} is not a target of this spec; targets: {', '.join(s.targets.all)}"),
                )


@rule("signature", "params", "flags", "constants")
def _unique_names(s):
    groups = (
        (("signature", "dims"), s.signature.dims),
        (("signature", "tensors"), s.signature.tensors),
        (("signature", "scalars"), s.signature.scalars),
        (("params",), s.params),
        (("flags",), s.flags),
        (("constants",), s.constants),
    )
    names = [n for _, g in groups for n in g]
    for where, group in groups:
        for n in group:
            if names.count(n) > 1:
                yield (
                    where + (n,),
                    (
                        "name '" + n + "' is used twice across dims, tensors, scalars, params, flags and "
                        "constants; rename one"
                    ),
                )


@rule("signature", "params", "flags", "constants")
def _expressions(s):
    """Dims, shapes, selects: the expression language, names resolved against the spec."""
    dims = list(s.signature.dims)
    for i, (d, source) in enumerate(s.signature.dims.items()):
        yield from _expr(source, dim_scope(s, dims[:i]), ("signature", "dims", d))
    shapes = shape_scope(s)
    for name, t in s.signature.tensors.items():
        for i, source in enumerate(t.shape):
            yield from _expr(source, shapes, ("signature", "tensors", name, "shape", i))
        for param, cases in t.by.items():
            for value, case in cases.items():
                for i, source in enumerate(case.shape or []):
                    yield from _expr(source, shapes, ("signature", "tensors", name, "by", param, value, "shape", i))
    selects = select_scope(s)
    for flag, f in s.flags.items():
        if f.select is not None:
            yield from _expr(f.select, selects, ("flags", flag, "select"))


@rule("signature", "params", "constants", "gates")
def _gates(s):
    scope = gate_scope(s)
    for i, gate in enumerate(s.gates):
        yield from _expr(gate.check, scope, ("gates", i, "check"))


@rule("signature")
def _scalar_defaults(s):
    for n, sc in s.signature.scalars.items():
        where = ("signature", "scalars", n, "default")
        if sc.default is None or sc.type == "f32":
            continue  # the model checked f32 defaults: finite, in float range
        if type(sc.default) is not int:
            yield where, f"{sc.default!r} is not an integer; {n} is {sc.type}"
        elif sc.type == "i32" and grammar.int32_problem(sc.default):
            yield where, f"{grammar.int32_problem(sc.default)}; {n} is i32"
        elif not -(2**63) <= sc.default < 2**63:
            yield where, f"{sc.default} does not fit int64_t; {n} is i64"


@rule("gates", "tests")
def _rejects(s):
    for name, idx in s.tests.rejects.items():
        if not 0 <= idx < len(s.gates):
            yield (
                ("tests", "rejects", name),
                (f"gate index {idx} is out of range; this spec has gates 0..{len(s.gates) - 1}"),
            )


@rule("signature", "tests")
def _test_dims(s):
    for d in s.tests.dims:
        if d not in s.signature.dims:
            yield (
                ("tests", "dims", d),
                (f"{ascii(d)[:60]} is not a dim{_suggest(d, s.signature.dims)}; dims: {', '.join(s.signature.dims)}"),
            )


@rule("dtypes", "vector")
def _vector_overrides(s):
    axes = s.dtypes.axes
    for i, o in enumerate(s.vector.overrides):
        for axis, dtype in o.when.items():
            where = ("vector", "overrides", i, "when", axis)
            if axis not in axes:
                yield where, f"{ascii(axis)[:60]} is not an axis{_suggest(axis, axes)}; axes: {', '.join(axes)}"
            elif dtype not in axes[axis]:
                yield where, f"'{dtype}' is not on axis '{axis}' ({', '.join(axes[axis])})"


@rule("dtypes", "params", "fast_math")
def _fast_math(s):
    axes = s.dtypes.axes
    for key, values in s.fast_math.when.items() if s.fast_math else ():
        allowed = axes.get(key) or (s.params[key].values if key in s.params else None)
        if allowed is None:
            known = [*axes, *s.params]
            yield (
                ("fast_math", "when", key),
                (
                    f"{ascii(key)[:60]} is neither a dtype axis nor a param"
                    f"{_suggest(key, known)}; known: {', '.join(known)}"
                ),
            )
            continue
        for i, v in enumerate(values):
            if v not in allowed:
                yield ("fast_math", "when", key, i), f"{v!r} is not a value of '{key}' ({', '.join(map(str, allowed))})"


@rule("tie_order", "sigmoid", "targets", "constants")
def _routing(s):
    """Per-backend maps cover the targets; every tie order is a permutation of the experts."""
    try:
        check_routing(s)
    except FieldError as exc:
        yield from exc.items


@rule("tuning", "constants", "signature", "tests")
def _tuning(s):
    """Knobs are constants with their own value among the candidates; every bucket holds a test size,
    so the generated tests run every config a table can pick (issue 13)."""
    if s.tuning is None:
        return
    for knob, values in s.tuning.knobs.items():
        if knob not in s.constants:
            yield (
                ("tuning", "knobs", knob),
                (
                    f"{ascii(knob)[:60]} is not a constant{_suggest(knob, s.constants)}; "
                    f"a knob is a constant the template reads: "
                    f"{', '.join(s.constants) or 'none declared'}"
                ),
            )
        elif s.constants[knob] not in values:
            yield (
                ("tuning", "knobs", knob),
                (
                    f"the default {knob} = {s.constants[knob]} (constants.{knob}) is not a "
                    f"candidate; list it among {values}"
                ),
            )
    if "M" not in s.signature.dims:
        yield ("tuning", "buckets"), "buckets are on dim M, which the signature does not declare"
        return
    sizes = s.tests.dims.get("M", [])
    low = 0
    for i, high in enumerate(s.tuning.buckets):
        if not any(low < m <= high for m in sizes):
            yield (
                ("tuning", "buckets", i),
                (
                    f"no test size lies in bucket {low} < M <= {high}; add one to "
                    "tests.dims.M, so the generated tests run the config it picks"
                ),
            )
        low = high


@rule("routing", "constants", "signature")
def _route_mode(s):
    """The routing axes fit together, the experts and K, and the signature (docs/kernels.md §3)."""
    r = s.routing
    if r is None:
        return
    e, k = s.constants.get("num_experts"), s.constants.get("top_k")
    if r.bias == "logits" and r.scoring_at == "before" and r.scoring != "none":
        yield (
            ("routing", "bias"),
            "a bias on the logits is for selecting on the logits: give `scoring_at: after` (or `scoring: none`), "
            "or add the bias to the scores (`bias: scores`)",
        )
    if r.bias == "scores" and r.scoring_at == "after":
        yield (
            ("routing", "bias"),
            "with `scoring_at: after` the top-K is taken on the logits, before any score exists: write `bias: logits`",
        )
    has_bias = "bias" in s.signature.tensors
    if r.bias != "none" and not has_bias:
        yield ("routing", "bias"), f"`bias: {r.bias}` adds a tensor `bias` the signature does not have; declare it"
    if r.bias == "none" and has_bias:
        yield (
            ("signature", "tensors", "bias"),
            "`routing.bias: none`: the kernel reads no bias; remove the tensor, or say where it is added",
        )
    if (r.renormalize == "positive") != (r.renorm_eps == 0):
        yield (
            ("routing", "renorm_eps"),
            "renorm_eps is the eps of `renormalize: add_eps` or `clamp` (a positive number); `positive` reads none",
        )
    g = r.groups
    if g is not None:
        if r.scoring_at == "after":
            yield ("routing", "groups"), "groups are scored on the scores before the top-K: give `scoring_at: before`"
        if g.keep > g.count:
            yield ("routing", "groups", "keep"), f"keep {g.keep} of {g.count} groups: keep at most {g.count}"
        if isinstance(e, int) and not isinstance(e, bool):
            if e % g.count:
                yield (
                    ("routing", "groups", "count"),
                    f"{g.count} groups do not divide num_experts = {e}; groups hold consecutive experts, equally many",
                )
            elif g.score == "sum_top2" and e // g.count < 2:
                yield ("routing", "groups", "score"), "sum_top2 needs at least 2 experts per group"
            elif isinstance(k, int) and g.keep * (e // g.count) < k:
                yield (
                    ("routing", "groups", "keep"),
                    f"{g.keep} groups of {e // g.count} experts hold fewer than top_k = {k}: keep more groups",
                )
