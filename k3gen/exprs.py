"""Gate predicates: a small, closed subset of Python expressions rendered to Python and C++.

A gate is written once in the spec and checked twice: in the generated host wrapper (Python) and
again in the generated C++ entry point (defence in depth). Only what both languages agree on is
allowed: integer arithmetic, comparisons, and/or/not, and names the plan knows.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass

# Tensor attributes a gate may read, with their Python and C++ spellings ({t} = tensor name).
TENSOR_ATTRS = {
    "ptr": ("{t}.data_ptr()", "reinterpret_cast<uintptr_t>(a.{t})"),
    "stride0": ("{t}.stride(0)", "a.{t}_stride0"),
}
_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: ("//", "/"), ast.Mod: "%"}
_CMPOPS = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}


class ExprError(ValueError):
    pass


@dataclass(frozen=True)
class Scope:
    """Names a gate may use. Runtime names become struct fields in C++; constants are inlined."""

    runtime: frozenset[str]  # dims, scalars and params: `a.NAME` in C++, a local in Python
    constants: dict  # name -> int/float/bool, inlined in both languages
    tensors: frozenset[str]  # tensor arguments whose TENSOR_ATTRS may be read
    locals: frozenset[str] = frozenset({"vec"})  # same spelling in both (a constexpr in C++)


@dataclass(frozen=True)
class Expr:
    source: str
    python: str
    cpp: str
    names: tuple[str, ...]  # Python spellings of the values shown when the gate fails


def parse_expr(source: str, scope: Scope) -> Expr:
    """Parse and check `source`; raise ExprError naming what is not allowed."""
    try:
        tree = ast.parse(str(source), mode="eval").body
    except SyntaxError as exc:
        raise ExprError(f"'{source}' is not an expression: {exc.msg}") from None
    names: list[str] = []
    py = _render(tree, scope, "py", names)
    cpp = _render(tree, scope, "cpp", [])
    return Expr(str(source), py, cpp, tuple(dict.fromkeys(names)))


def _render(node, scope: Scope, lang: str, names: list[str]) -> str:
    r = lambda n: _render(n, scope, lang, names)  # noqa: E731
    if isinstance(node, ast.BoolOp):
        op = {ast.And: ("and", "&&"), ast.Or: ("or", "||")}[type(node.op)][lang == "cpp"]
        return "(" + f" {op} ".join(r(v) for v in node.values) + ")"
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.USub)):
        op = "-" if isinstance(node.op, ast.USub) else ("not " if lang == "py" else "!")
        return f"({op}{r(node.operand)})"
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        op = _BINOPS[type(node.op)]
        if isinstance(op, tuple):
            op = op[lang == "cpp"]
        return f"({r(node.left)} {op} {r(node.right)})"
    if isinstance(node, ast.Compare):
        parts = []
        left = node.left
        for op, right in zip(node.ops, node.comparators):
            if type(op) not in _CMPOPS:
                raise ExprError(f"operator {type(op).__name__} is not allowed; use ==, !=, <, <=, >, >=")
            parts.append(f"({r(left)} {_CMPOPS[type(op)]} {r(right)})")
            left = right
        joiner = " and " if lang == "py" else " && "
        return parts[0] if len(parts) == 1 else "(" + joiner.join(parts) + ")"
    if isinstance(node, ast.Constant) and type(node.value) in (int, float, bool):
        return _literal(node.value, lang)
    if isinstance(node, ast.Name):
        name = node.id
        if name in scope.constants:
            return _literal(scope.constants[name], lang)
        if name in scope.runtime:
            names.append(name)
            return name if lang == "py" else f"a.{name}"
        if name in scope.locals:
            names.append(name)
            return name
        known = sorted({*scope.runtime, *scope.constants, *scope.locals})
        raise ExprError(f"unknown name '{name}'; known: {', '.join(known)}")
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        t, attr = node.value.id, node.attr
        if t not in scope.tensors:
            raise ExprError(f"'{t}.{attr}': '{t}' is not a tensor argument; tensors: {', '.join(sorted(scope.tensors))}")
        if attr not in TENSOR_ATTRS:
            raise ExprError(f"'{t}.{attr}' is not readable in a gate; use one of: {', '.join(TENSOR_ATTRS)}")
        spelling = TENSOR_ATTRS[attr][lang == "cpp"].format(t=t)
        names.append(TENSOR_ATTRS[attr][0].format(t=t))
        return spelling
    raise ExprError(f"'{ast.unparse(node)}' is not allowed in a gate; use integer arithmetic (+ - * // %), "
                    "comparisons, and/or/not, and names")


def _literal(value, lang: str) -> str:
    if isinstance(value, bool):
        return ("True" if value else "False") if lang == "py" else ("true" if value else "false")
    if isinstance(value, float):
        return repr(value) if lang == "py" else f"{value!r}f"
    return str(value)
