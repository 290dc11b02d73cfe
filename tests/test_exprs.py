"""Gate expressions: one source, a Python and a C++ rendering, and the errors for what is not allowed."""
from __future__ import annotations

import pytest

from k3gen.exprs import ExprError, Scope, parse_expr

SCOPE = Scope(runtime=frozenset({"M", "D", "beta"}),
              constants={"block_threads": 256, "scale": 0.5, "strict": True},
              tensors=frozenset({"x", "out"}))
KNOWN = "D, M, beta, block_threads, scale, strict, vec"
NOT_ALLOWED = "is not allowed in a gate; use integer arithmetic (+ - * // %), comparisons, and/or/not, and names"

RENDERINGS = [
    # (source, Python, C++)
    ("D % vec == 0", "((D % vec) == 0)", "((a.D % vec) == 0)"),
    ("x.ptr % 16 == 0 and out.ptr % 16 == 0",
     "(((x.data_ptr() % 16) == 0) and ((out.data_ptr() % 16) == 0))",
     "(((reinterpret_cast<uintptr_t>(a.x) % 16) == 0) && ((reinterpret_cast<uintptr_t>(a.out) % 16) == 0))"),
    ("x.stride0 % vec == 0", "((x.stride(0) % vec) == 0)", "((a.x_stride0 % vec) == 0)"),
    ("M > 0 or not strict", "((M > 0) or (not True))", "((a.M > 0) || (!true))"),
    ("not (M < 4)", "(not (M < 4))", "(!(a.M < 4))"),
    ("D // 2 * 2 == D", "(((D // 2) * 2) == D)", "(((a.D / 2) * 2) == a.D)"),
    ("0 < M <= block_threads", "((0 < M) and (M <= 256))", "((0 < a.M) && (a.M <= 256))"),
    ("beta * scale >= 1.5", "((beta * 0.5) >= 1.5)", "((a.beta * 0.5f) >= 1.5f)"),
    ("-M + 1 != 0", "(((-M) + 1) != 0)", "(((-a.M) + 1) != 0)"),
    ("M <= 1e6", "(M <= 1000000.0)", "(a.M <= 1000000.0f)"),
]


@pytest.mark.parametrize("source, python, cpp", RENDERINGS, ids=[r[0] for r in RENDERINGS])
def test_renderings(source: str, python: str, cpp: str):
    expr = parse_expr(source, SCOPE)
    assert (expr.source, expr.python, expr.cpp) == (source, python, cpp)


def test_python_rendering_evaluates_like_the_source():
    env = {"M": 7, "D": 256, "beta": 4.0, "vec": 8}
    consts = {"block_threads": 256, "scale": 0.5, "strict": True}
    for source, python, _ in RENDERINGS:
        if ".ptr" in source or ".stride0" in source:
            continue
        assert eval(python, {}, env) == eval(source, {}, {**env, **consts}), source


def test_names_shown_on_failure_are_runtime_values_in_first_use_order():
    assert parse_expr("x.ptr % vec == 0 and D > M and D < 2 * M", SCOPE).names == ("x.data_ptr()", "vec", "D", "M")


def test_constants_are_inlined_not_named():
    assert parse_expr("M <= block_threads", SCOPE).names == ("M",)


def test_an_integer_gate_is_accepted():
    assert (parse_expr(7, SCOPE).python, parse_expr(7, SCOPE).cpp) == ("7", "7")


def test_bool_literals():
    expr = parse_expr("True and M > 0", SCOPE)
    assert (expr.python, expr.cpp) == ("(True and (M > 0))", "(true && (a.M > 0))")


ERRORS = [
    ("N > 0", f"unknown name 'N'; known: {KNOWN}"),
    ("x > 0", f"unknown name 'x'; known: {KNOWN}"),
    ("x.size % 2 == 0", "'x.size' is not readable in a gate; use one of: ptr, stride0"),
    ("y.ptr % 16 == 0", "'y.ptr': 'y' is not a tensor argument; tensors: out, x"),
    ("len(D) > 0", f"'len(D)' {NOT_ALLOWED}"),
    ("x.shape[0] > 0", f"'x.shape[0]' {NOT_ALLOWED}"),
    ("M / 2 > 1", f"'M / 2' {NOT_ALLOWED}"),
    ("M ** 2 > 1", f"'M ** 2' {NOT_ALLOWED}"),
    ("M if D else 1", f"'M if D else 1' {NOT_ALLOWED}"),
    ("M in (1, 2)", "operator In is not allowed; use ==, !=, <, <=, >, >="),
    ("M is None", "operator Is is not allowed; use ==, !=, <, <=, >, >="),
    ("M >", "'M >' is not an expression: invalid syntax"),
]


@pytest.mark.parametrize("source, message", ERRORS, ids=[e[0] for e in ERRORS])
def test_error_text(source: str, message: str):
    with pytest.raises(ExprError) as info:
        parse_expr(source, SCOPE)
    assert str(info.value) == message
