"""Decide a gate for known values, without eval(): a walk over the gate's restricted AST.

k3gen.spec.meaning.totality asks whether the generated tests call shapes the gates accept, and k3gen.spec.meaning.limits
whether a template's checks hold for a spec's constants. Semantics are Python's, which is what the
generated wrapper runs (`//` and `%` floor). A name with no value here (a scalar argument, or a
tensor attribute such as `x.ptr`, which only a real call has) is UNKNOWN, and and/or/not follow
three-valued logic: a gate counts as refused only when it is False whatever the unknowns are.
"""

from __future__ import annotations

import ast
import operator


class _Unknown:
    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN = _Unknown()

_ARITH = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_COMPARE = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}


class GateEvalError(ValueError):
    """The expression uses syntax outside the gate language; it cannot be decided here."""


def parse(source) -> ast.expr:
    """The expression's AST, refused unless every node is one the gate language has."""
    try:
        tree = ast.parse(str(source), mode="eval").body
    except SyntaxError as exc:
        raise GateEvalError(f"'{source}' is not an expression: {exc.msg}") from None
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED):
            raise GateEvalError(f"'{ast.unparse(node)}' is outside the gate language")
    return tree


_ALLOWED = (
    ast.BoolOp,
    ast.And,
    ast.Or,
    ast.UnaryOp,
    ast.Not,
    ast.USub,
    ast.BinOp,
    *_ARITH,
    ast.Compare,
    *_COMPARE,
    ast.Constant,
    ast.Name,
    ast.Attribute,
    ast.Load,
)


def names(source) -> list[str]:
    """Plain names the expression reads, in order of first use (tensor attributes excluded)."""
    tree = parse(source)
    found = [n.id for n in ast.walk(tree) if isinstance(n, ast.Name)]
    attrs = {n.value.id for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)}
    return [n for n in dict.fromkeys(found) if n not in attrs]


def decide(source, values: dict) -> bool | None:
    """True or False when `values` settle the expression, None when it depends on what they lack.

    Division by zero decides False: the wrapper's own check would raise there.
    """
    try:
        result = _value(parse(source), values)
    except ZeroDivisionError:
        return False
    return None if result is UNKNOWN else bool(result)


def value(source, values: dict):
    """The value of an expression (a shape, say) for known names; UNKNOWN when it reads others."""
    return _value(parse(source), values)


def _value(node, values: dict):
    if isinstance(node, ast.Constant):
        if type(node.value) not in (int, float, bool):
            raise GateEvalError(f"constant {node.value!r} is not a number")
        return node.value
    if isinstance(node, ast.Name):
        return values.get(node.id, UNKNOWN)
    if isinstance(node, ast.Attribute):
        return UNKNOWN  # a tensor attribute: only a real call has it
    if isinstance(node, ast.UnaryOp):
        v = _value(node.operand, values)
        if v is UNKNOWN:
            return UNKNOWN
        return (not v) if isinstance(node.op, ast.Not) else -v
    if isinstance(node, ast.BinOp):
        left, right = _value(node.left, values), _value(node.right, values)
        if left is UNKNOWN or right is UNKNOWN:
            return UNKNOWN
        return _ARITH[type(node.op)](left, right)
    if isinstance(node, ast.Compare):
        parts, left = [], _value(node.left, values)
        for op, comparator in zip(node.ops, node.comparators):
            right = _value(comparator, values)
            parts.append(UNKNOWN if UNKNOWN in (left, right) else _COMPARE[type(op)](left, right))
            left = right
        return _all(parts)
    if isinstance(node, ast.BoolOp):
        parts = [_value(v, values) for v in node.values]
        parts = [p if p is UNKNOWN else bool(p) for p in parts]
        if isinstance(node.op, ast.And):
            return _all(parts)
        return True if True in parts else (UNKNOWN if UNKNOWN in parts else False)
    raise GateEvalError(f"'{ast.unparse(node)}' is outside the gate language")


def _all(parts: list):
    """Three-valued `and`: False wins, then UNKNOWN."""
    if any(p is not UNKNOWN and not p for p in parts):
        return False
    return UNKNOWN if any(p is UNKNOWN for p in parts) else True
