"""How a plan is spelled in C++ (torchgen's `api/`): element types, Args fields, kernel template
parameters and arguments, constants, the matrix in messages, and a template's limits as
static_asserts. Only grammar tokens (names, dtypes, numbers) and checked expressions are spelled
here; free text leaves through k3gen.spec.escape.
"""

from __future__ import annotations

from k3gen.plan.family import FamilyPlan, Variant
from k3gen.runtime.dtypes import DTYPES
from k3gen.spec.escape import c_string

# Args-struct field kinds: (C++ type, ctypes type).
ARG_CTYPES = {
    "ptr": ("const void*", "c_void_p"),
    "mut_ptr": ("void*", "c_void_p"),
    "i64": ("int64_t", "c_int64"),
    "i32": ("int32_t", "c_int32"),
    "f32": ("float", "c_float"),
}


# The routing sigmoid formulas (k3gen.spec.routing.SIGMOIDS) as the constant of the routing fragment
# (templates/route_topk/device.cuh.j2) that selects one.
SIGMOID_CPP = {"expf": "kSigmoidExpf", "exp2": "kSigmoidExp2"}


# The routing axes (k3gen.spec.model.Routing) as the constants of the routing fragment that select them.
SCORING_CPP = {"sigmoid": "kScoringSigmoid", "softmax": "kScoringSoftmax", "sqrt_softplus": "kScoringSqrtSoftplus",
               "none": "kScoringNone"}  # fmt: skip
BIAS_CPP = {"scores": "kBiasScores", "logits": "kBiasLogits", "none": "kBiasNone"}
GROUP_SCORE_CPP = {"sum_top2": "kGroupSumTop2", "max": "kGroupMax"}
RENORM_CPP = {"positive": "kRenormPositive", "add_eps": "kRenormAddEps", "clamp": "kRenormClamp"}


# A routing axis of limits.yaml -> the constant that holds it and the spelling of each value.
ROUTING_AXES_CPP = {
    "scoring": ("kScoring", SCORING_CPP),
    "scoring_at": ("kScoringAfter", {"before": "false", "after": "true"}),
    "bias": ("kBiasAt", BIAS_CPP),
    "group_score": ("kGroupScore", GROUP_SCORE_CPP),
    "renormalize": ("kRenorm", RENORM_CPP),
    "sorted": ("kSorted", {True: "true", False: "false"}),
}


def route_constants(p: FamilyPlan) -> list[tuple[str, str, str]]:
    """(C++ type, name, value) of a routing family's axes, in the routing fragment's names; and the
    true/false names a routing template's limits checks read (k3gen.spec.meaning.limits.ROUTING_NAMES)."""
    r = p.route
    if r is None:
        return []
    g = r.groups
    return [
        ("int", "kScoring", SCORING_CPP[r.scoring]),
        ("bool", "kScoringAfter", cpp_bool(r.scoring_at == "after")),
        ("int", "kBiasAt", BIAS_CPP[r.bias]),
        ("int", "kGroups", str(g.count if g else 1)),
        ("int", "kKeepGroups", str(g.keep if g else 1)),
        ("int", "kGroupScore", GROUP_SCORE_CPP[g.score if g else "sum_top2"]),
        ("int", "kRenorm", RENORM_CPP[r.renormalize]),
        ("float", "kRenormEps", f"{float(r.renorm_eps)!r}f"),
        ("bool", "kSorted", cpp_bool(r.sorted)),
        ("bool", "grouped", cpp_bool(g is not None)),
        ("bool", "softmax", cpp_bool(r.scoring == "softmax")),
        ("bool", "scoring_after", cpp_bool(r.scoring_at == "after")),
    ]


def cpp_type(name: str, backend: str) -> str:
    """The C++ element type of a dtype under a backend's compiler."""
    return DTYPES[name].cpp(backend)


def cpp_bool(value: bool) -> str:
    return "true" if value else "false"


def template_params(p: FamilyPlan) -> str:
    """The kernel template's parameter list, in the order template_args() fills it."""
    ps = [f"typename T_{a}" for a in p.spec.dtypes.axes]
    ps += [f"int {n}" for n in p.spec.params]
    ps += [f"bool {f}" for f in p.call_flags]
    knobs = [f"int {k}" for k in p.tuning.knobs] if p.tuning else []  # a knob's name shadows its constant
    return ", ".join([*ps, "bool FAST_MATH", "int VEC", *knobs])


def template_param_names(p: FamilyPlan) -> str:
    return ", ".join(x.split()[-1] for x in template_params(p).split(", "))


def param_cpp(p: FamilyPlan, param: str, value) -> int:
    """A param value in C++: its index for a named value (see FamilyPlan.param_enums), else the integer."""
    values = p.spec.params[param].values
    return values.index(value) if isinstance(value, str) else value


def template_args(p: FamilyPlan, v: Variant, backend: str, config: int = 0) -> str:
    """launch<...>'s arguments for variant v with tuning config `config` (0: the spec's default)."""
    xs = [cpp_type(d, backend) for d in v.dtypes.values()]
    xs += [str(param_cpp(p, n, val)) for n, val in v.params.items()]
    xs += [cpp_bool(b) for b in v.flags.values()]
    knobs = [f"/*{k}=*/{val}" for k, val in p.tuning.configs[config].items()] if p.tuning else []
    return ", ".join([*xs, cpp_bool(v.fast_math), str(v.vec), *knobs])


def constants(p: FamilyPlan) -> list[tuple[str, tuple[str, str]]]:
    """(name, (C++ type, C++ literal)) of each spec constant."""
    out = []
    for name, value in p.spec.constants.items():
        if isinstance(value, bool):
            out.append((name, ("bool", cpp_bool(value))))
        elif isinstance(value, int):
            out.append((name, ("int", str(value))))
        else:
            out.append((name, ("float", f"{value!r}f")))
    return out


def matrix_text(p: FamilyPlan) -> str:
    """The generated cells, for error messages: (in, out) in {(bf16, bf16), (fp32, bf16)}."""
    axes = tuple(p.spec.dtypes.axes)
    cells = ", ".join("(" + ", ".join(c) + ")" for c in p.spec.dtypes.generated_cells())
    return f"({', '.join(axes)}) in {{{cells}}}"


def static_asserts(p: FamilyPlan) -> list[str]:
    """static_assert lines for launch() of the family's kernel template: each limit of its limits.yaml
    over the template's parameters and constants (the compiler refuses what load would have, should a
    plan ever skip load; and the C++ says what it supports where it is read)."""
    limits = p.limits
    if limits is None:
        return []
    s, lines = p.spec, []

    def assert_(condition: str, name: str, line: int, text: str) -> None:
        lines.append(f"static_assert({condition}, {c_string(f'{name}: {limits.at(line)} allows {text}')});")

    for axis, rule in limits.section("dtypes").items():
        if axis not in s.dtypes.axes:  # an optional axis the spec does not have: the template reads none
            continue
        for backend, guard in (("cuda", "#if K3_CUDA"), ("hip", "#else")):
            lines.append(guard)
            same = " || ".join(f"std::is_same<T_{axis}, {DTYPES[d].cpp(backend)}>::value" for d in rule.values)
            assert_(same, axis, rule.line, rule.describe())
        lines.append("#endif")
    for name, rule in limits.section("params").items():
        if name in s.params:
            values = [v for v in s.params[name].values if rule.allows(v)]
            if any(isinstance(v, str) for v in values):  # string params are enum constants (plan.param_enums)
                if values:
                    assert_(" || ".join(f"{name} == {name}_{v}" for v in values), name, rule.line, rule.describe())
            else:
                assert_(_cpp_condition(name, rule), name, rule.line, rule.describe())
    for name, rule in limits.section("constants").items():
        assert_(_cpp_condition(name, rule), name, rule.line, rule.describe())
    for name, rule in limits.section("routing").items():
        constant, spelled = ROUTING_AXES_CPP[name]
        values = " || ".join(f"{constant} == {spelled[v]}" for v in rule.values)
        assert_(f"({values})", f"routing.{name}", rule.line, rule.describe())
    for kind, rule in limits.section("vector").items():
        width = "VEC" if kind == "elements" else f"(VEC * {_widest(list(s.dtypes.axes))})"
        assert_(_cpp_condition(width, rule), f"vector.{kind}", rule.line, rule.describe())
    for check in limits.checks:
        lines.append(
            f"static_assert({check.expr.cpp}, "
            f"{c_string(f'{limits.at(check.line)} requires {check.source}: {check.why}')});"
        )
    return lines


def _cpp_condition(name: str, rule) -> str:
    parts = []
    if rule.values is not None:
        parts.append("(" + " || ".join(f"{name} == {_cpp_literal(v)}" for v in rule.values) + ")")
    if rule.min is not None:
        parts.append(f"{name} >= {_cpp_literal(rule.min)}")
    if rule.max is not None:
        parts.append(f"{name} <= {_cpp_literal(rule.max)}")
    if rule.multiple_of is not None:
        parts.append(f"{name} % {rule.multiple_of} == 0")
    return " && ".join(parts) or "true"


def _widest(axes: list[str]) -> str:
    """sizeof of the widest dtype of the variant, as the plan sizes `vector.bytes`."""
    expr = f"sizeof(T_{axes[0]})"
    for axis in axes[1:]:
        expr = f"(sizeof(T_{axis}) > {expr} ? sizeof(T_{axis}) : {expr})"
    return f"int({expr})"


def _cpp_literal(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value!r}f"
    return str(value)
