"""The spec's expression language: one source, a Python and a C++ rendering, errors for the rest,
and // and % meaning the same in both languages (negative operands included)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from k3gen.spec.exprs import MAX_DEPTH, MAX_SOURCE, Expr, ExprError, Name, Scope, constant, parse_expr

# What `k3gen test` selects this module by (k3gen.review.impact): the paths it reads besides k3gen/ and tests/.
READS = ("templates/common/**",)

ROOT = Path(__file__).resolve().parents[1]
GATE = Scope(
    {
        "M": Name("int", "M", "a.M"),
        "D": Name("int", "D", "a.D"),
        "beta": Name("float", "beta", "a.beta"),
        "block_threads": constant(256),
        "strict": constant(True),
        "zero": constant(0),
        "vec": Name("int", "vec", "vec", positive=True),
    },
    tensors={"x": 2, "out": 2},
    cpp=True,
    strided=frozenset({"x"}),
)
DIM = Scope(
    {"fused": Name("bool", "fused", None), "group": Name("int", "group", "group", positive=True)},
    tensors={"x": 2},
    want="int",
)
SELECT = Scope({}, optional=frozenset({"bias"}))

RENDERINGS = [
    # (scope, source, Python, C++)
    (GATE, "D % vec == 0", "((D % vec) == 0)", "(k3::floormod(a.D, vec) == 0)"),
    (
        GATE,
        "x.ptr % 16 == 0 and out.ptr % 16 == 0",
        "(((x.data_ptr() % 16) == 0) and ((out.data_ptr() % 16) == 0))",
        "((k3::floormod(k3::address(a.x), 16) == 0) && (k3::floormod(k3::address(a.out), 16) == 0))",
    ),
    (GATE, "x.stride0 % vec == 0", "((x.stride(0) % vec) == 0)", "(k3::floormod(a.x_stride0, vec) == 0)"),
    (GATE, "M > 0 or not strict", "((M > 0) or (not True))", "((a.M > 0) || (!true))"),
    (GATE, "D // 2 * 2 == D", "(((D // 2) * 2) == D)", "((k3::floordiv(a.D, 2) * 2) == a.D)"),
    (GATE, "0 < M <= block_threads", "((0 < M) and (M <= 256))", "((0 < a.M) && (a.M <= 256))"),
    (GATE, "-M + 1 != 0", "(((-M) + 1) != 0)", "(((-a.M) + 1) != 0)"),
    (GATE, "(M if strict else D) > 1", "((M if True else D) > 1)", "((true ? a.M : a.D) > 1)"),
    (DIM, "x.shape[1] // 2 if fused else x.shape[-1]", "((x.shape[1] // 2) if fused else x.shape[-1])", None),
    (DIM, "(x.shape[1] // group + 3) // 4", "(((x.shape[1] // group) + 3) // 4)", None),
    (SELECT, "bias is not None", "(bias is not None)", None),
]


@pytest.mark.parametrize("scope, source, python, cpp", RENDERINGS, ids=[r[1] for r in RENDERINGS])
def test_renderings(scope, source, python, cpp):
    expr = parse_expr(source, scope)
    assert (expr.source, expr.python, expr.cpp) == (source, python, cpp)


def test_names_shown_on_failure_are_runtime_values_in_first_use_order():
    assert parse_expr("x.ptr % vec == 0 and D > M and D < 2 * M", GATE).names == ("x.data_ptr()", "vec", "D", "M")


def test_constants_are_inlined_not_named():
    assert parse_expr("M <= block_threads", GATE).names == ("M",)


ERRORS = [
    # (scope, source, message fragment): each is refused, never evaluated
    (GATE, "N > 0", "unknown name 'N'; known here: D, M, beta, block_threads, out, strict, vec, x, zero"),
    (GATE, "x.size % 2 == 0", "'x.size' is not readable; use x.ptr, x.stride0 or x.shape[i]"),
    (GATE, "y.ptr % 16 == 0", "attributes are read from tensor arguments only; tensors readable here: out, x"),
    (GATE, "len(D) > 0", "'len(D)' is not allowed"),
    (GATE, "__import__('os').system('true')", "is not allowed"),
    (GATE, "(lambda: 1)() == 1", "is not allowed"),
    (GATE, "f'{M}' == 1", "is not allowed"),
    (GATE, "[i for i in (1,)] == 1", "is not allowed"),
    (GATE, "x.shape[0] > 0", "is checked again in C++"),
    (GATE, "out.stride0 > 0", "is checked again in C++"),
    (GATE, "M / 2 > 1", "operator 'M / 2' is not allowed"),
    (GATE, "M ** 2 > 1", "operator 'M ** 2' is not allowed"),
    (GATE, "M in (1, 2)", "use ==, !=, <, <=, >, >="),
    (GATE, "M is None", "'M' is not an optional argument here; optional: none"),
    (SELECT, "bias is 0", "`is` only in"),
    (GATE, "M >", "'M >' is not an expression: invalid syntax"),
    (GATE, "M % D == 0", "the right operand of % must be a positive integer known when the spec is loaded"),
    (GATE, "M // zero == 0", "the right operand of // must be a positive integer"),
    (GATE, "M // -2 == 0", "the right operand of // must be a positive integer"),
    (GATE, "M and D", "'M' is an integer; a true/false is needed here"),
    (GATE, "M + 1", "is an integer expression; a true/false is needed here"),
    (GATE, "7", "is an integer expression; a true/false is needed here"),
    (GATE, "M > 1.5", "only integer and True/False literals are allowed"),
    (GATE, "M == 'a'", "only integer and True/False literals are allowed"),
    (GATE, "strict + 1 > 0", "arithmetic on a true/false value"),
    (DIM, "x.shape[2]", "the index must be an integer literal in -2..1"),
    (DIM, "x.shape[M]", "the index must be an integer literal"),
    (DIM, "x.stride(0)", "is not allowed"),
    (DIM, "x.shape.__class__", "attributes are read from tensor arguments only"),
    (DIM, "fused", "is a true/false expression; an integer is needed here"),
    (SELECT, "x is None", "'x' is not an optional argument here; optional: bias"),
    (GATE, "M + " * 60 + "1 > 0", f"at most {MAX_SOURCE} (exprs.MAX_SOURCE)"),
    (GATE, "(" * 15 + "M" + " + 1)" * 15 + " > 0", f"nests deeper than {MAX_DEPTH} levels"),
    (GATE, "-" * 30 + "M > 0", f"nests deeper than {MAX_DEPTH} levels"),
    (GATE, "M\0 > 0", "is not an expression"),
]


@pytest.mark.parametrize("scope, source, message", ERRORS, ids=[e[1][:40] for e in ERRORS])
def test_errors(scope, source, message):
    with pytest.raises(ExprError) as info:
        parse_expr(source, scope)
    assert message in str(info.value)


def _cpp_helpers() -> str:
    """The k3::floordiv/floormod definitions exactly as k3_backend.h has them."""
    text = (ROOT / "templates/common/k3_backend.h.j2").read_text()
    return "\n".join(line for line in text.splitlines() if re.match(r"constexpr int64_t (floordiv|floormod)", line))


PAIRS = [(a, b) for a in (-17, -16, -9, -8, -1, 0, 1, 7, 8, 9, 17) for b in (1, 2, 3, 8, 16)]


@pytest.mark.skipif(not shutil.which("c++"), reason="no host C++ compiler")
def test_floor_division_agrees_in_python_and_cpp(tmp_path):
    gates = [parse_expr(f"M // {b} == {a // b} and M % {b} == {a % b}", GATE) for a, b in PAIRS]
    src = tmp_path / "t.cc"
    src.write_text(
        "#include <cstdint>\n#include <cstdio>\nnamespace k3 {\n" + _cpp_helpers() + "\n}\n"
        "struct A { int64_t M; };\nint main() {\n"
        + "".join(f'  {{ A a{{{a}}}; std::printf("%d\\n", (int){g.cpp}); }}\n' for (a, _), g in zip(PAIRS, gates))
        + "}\n"
        # constexpr: a template's limits checks are static_asserts over the same spelling
        + "".join(f"static_assert({g.cpp.replace('a.M', str(a))});\n" for (a, _), g in zip(PAIRS, gates))
    )
    subprocess.run(["c++", "-std=c++17", "-o", tmp_path / "t", src], check=True)
    got = subprocess.run([tmp_path / "t"], check=True, capture_output=True, text=True).stdout.split()
    assert got == ["1"] * len(PAIRS)  # every gate holds in C++, as it does in Python by construction
    for (a, _), g in zip(PAIRS, gates):
        assert eval(g.python, {}, {"M": a}) is True  # rendered from our own literal source


def test_python_rhs_drops_only_parentheses_around_all_of_it():
    def rhs(py: str) -> str:
        return Expr(source="", python=py, cpp=None, names=()).python_rhs

    assert rhs("(x.shape[1] // 2)") == "x.shape[1] // 2"
    assert rhs("((a is not None))") == "a is not None"
    assert rhs("(a + 1) * (b + 1)") == "(a + 1) * (b + 1)"  # two groups: nothing encloses it all
    assert rhs("M") == "M"


# --- the one walker decides: Expr.value / Expr.decide (what gate_eval.py did, on the checked tree) ---

DECIDE_SCOPE = Scope(
    {
        "K": Name("int", "K", "a.K"),
        "M": Name("int", "M", "a.M"),
        "D": Name("int", "D", "a.D"),
        "topk": Name("int", "topk", "a.topk"),
        "group_size": Name("int", "group_size", "group_size", positive=True),
        "vec": Name("int", "vec", "vec", positive=True),
        "max_tokens": constant(1024),
        "top_k": constant(16),
    },
    tensors={"x": 2},
    cpp=True,
    strided=frozenset({"x"}),
)


@pytest.mark.parametrize(
    "source,values,expected",
    [
        ("K % group_size == 0", {"K": 512, "group_size": 256}, True),
        ("K % group_size == 0", {"K": 128, "group_size": 256}, False),
        ("M <= max_tokens", {"M": 1025}, False),
        ("-7 // 2 == -4 and -7 % 2 == 1", {}, True),  # Python's floor semantics, as the wrapper runs them
        ("1 < K < 8", {"K": 8}, False),
        ("not (D % vec == 0)", {"D": 258, "vec": 8}, True),
        ("(D if D > 0 else 1) % 1024 == 0", {"D": 256}, False),  # the `if` the old evaluator could not decide
        ("(D if D > 0 else 1) % 1024 == 0", {"D": 2048}, True),
    ],
)
def test_known_values_decide(source, values, expected):
    assert parse_expr(source, DECIDE_SCOPE).decide(values) is expected


@pytest.mark.parametrize(
    "source,values,expected",
    [
        ("x.ptr % 16 == 0", {}, None),  # a tensor attribute: only a real call has it
        ("topk == top_k", {}, None),  # a scalar argument: not a test dim
        ("K % 8 == 0 and x.ptr % 16 == 0", {"K": 12}, False),  # False whatever the pointer is
        ("K % 8 == 0 and x.ptr % 16 == 0", {"K": 16}, None),
        ("K > 0 or x.stride0 % 8 == 0", {"K": 1}, True),
        ("K > 0 or x.stride0 % 8 == 0", {"K": 0}, None),
        ("K % group_size == 0", {"K": 128, "group_size": 0}, False),  # the wrapper's own check would raise
        ("(M if K > 0 else M) <= max_tokens", {"M": 4}, True),  # both branches agree: decided
    ],
)
def test_unknowns_follow_three_valued_logic(source, values, expected):
    assert parse_expr(source, DECIDE_SCOPE).decide(values) is expected


def test_reads_are_plain_names_in_order_without_tensors():
    e = parse_expr("K % group_size == 0 and x.ptr % vec == 0 and K > 1", DECIDE_SCOPE)
    assert e.reads == ("K", "group_size", "vec")


def test_a_value_is_computed_from_the_tree_with_constants_inlined():
    shape = parse_expr("2 * D + top_k", Scope(DECIDE_SCOPE.names, want="int"))
    assert shape.value({"D": 3584}) == 2 * 3584 + 16


def test_the_walker_never_evaluates_text():
    """Evaluation reads nodes; nothing in the module calls eval, exec or compile."""
    import ast
    import inspect

    from k3gen.spec import exprs

    calls = {
        n.func.id
        for n in ast.walk(ast.parse(inspect.getsource(exprs)))
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
    }
    assert not calls & {"eval", "exec", "compile", "__import__"}
