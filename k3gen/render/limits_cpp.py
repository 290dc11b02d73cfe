"""A template's limits (k3gen/spec/meaning/limits.py) as static_asserts for the top of its launch(): the compiler
refuses what load would have, should a plan ever skip load (a second line of defence), and the C++
says what it supports where it is read."""

from __future__ import annotations

from k3gen.runtime.dtypes import DTYPES
from k3gen.spec.escape import c_string
from k3gen.spec.meaning.limits import Rule


def cpp_asserts(p) -> list[str]:
    """static_assert lines for launch() of the family's kernel template (k3gen.plan.FamilyPlan `p`):
    each limit of its limits.yaml over the template's parameters and constants."""
    limits = p.limits
    if limits is None:
        return []
    s, lines = p.spec, []

    def assert_(condition: str, name: str, line: int, text: str) -> None:
        lines.append(f"static_assert({condition}, {c_string(f'{name}: {limits.at(line)} allows {text}')});")

    for axis, rule in limits.section("dtypes").items():
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
    for kind, rule in limits.section("vector").items():
        width = "VEC" if kind == "elements" else f"(VEC * {_widest(list(s.dtypes.axes))})"
        assert_(_cpp_condition(width, rule), f"vector.{kind}", rule.line, rule.describe())
    for check in limits.checks:
        lines.append(
            f"static_assert({check.expr.cpp}, "
            f"{c_string(f'{limits.at(check.line)} requires {check.source}: {check.why}')});"
        )
    return lines


def _cpp_condition(name: str, rule: Rule) -> str:
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
