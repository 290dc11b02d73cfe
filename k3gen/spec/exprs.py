"""The spec's one expression language: gates, dims, tensor shapes and flag selects.

A spec is untrusted data, so its expressions are parsed into a closed grammar, every name is resolved
against what the spec declares, and only then rendered to Python (the host wrapper) and C++ (the
gate check in each translation unit). Nothing a spec writes is ever evaluated as Python.

The grammar: integer and bool literals, declared names, + - * // %, unary -, comparisons, and/or/not,
`a if c else b`, `T.ptr`, `T.stride0`, `T.shape[i]` (i a literal), and `X is None` / `X is not None`
for optional arguments. Types are checked (int, float, bool) so `and`/`or` never see integers.
`//` and `%` floor in both languages (Python's rule; C++ calls k3::floordiv/floormod), and their right
operand must be a positive integer known when the spec is loaded (a literal, constant, integer param
or vec): no division by zero, and the two languages agree on negative left operands.

This is the language's one walker: a checked expression (`Expr`) carries its Python and C++
spellings and decides itself for known values (`value`, `decide`), so the load-time checks (test
sizes against the gates, a template's limits checks), the generated wrapper and the C++ all read
the same tree. Values are Python's, which the generated wrapper runs; a name with no value (a
scalar argument, a tensor attribute such as x.ptr) is UNKNOWN, and and/or/not/if follow
three-valued logic: a gate is refused only when it is False whatever the unknowns are.
"""

from __future__ import annotations

import ast
import operator
from dataclasses import dataclass, field

MAX_SOURCE = 200  # characters of one expression
MAX_DEPTH = 12  # nesting of one expression's syntax tree

_ARITH = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*"}
_FLOOR = {ast.FloorDiv: ("//", "k3::floordiv"), ast.Mod: ("%", "k3::floormod")}
_CMPOPS = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}
GRAMMAR = (
    "integer arithmetic (+ - * // %), comparisons, and/or/not, `a if c else b`, declared names, "
    "T.ptr, T.stride0, T.shape[i] and `X is None`"
)


class ExprError(ValueError):
    """Why an expression is refused; `unknown` is the name it does not know, if that is why."""

    def __init__(self, message: str, unknown: str | None = None):
        super().__init__(message)
        self.unknown = unknown


@dataclass(frozen=True)
class Name:
    """A name an expression may use, its type and its spellings (cpp None: not readable in C++)."""

    type: str  # int, float or bool
    py: str
    cpp: str | None
    shown: bool = True  # its value is printed when a gate fails (constants are not: they never vary)
    positive: bool = False  # a positive integer known at load time: may divide
    value: object = None  # a constant's value (None: known only when an expression is evaluated)


def constant(value) -> Name:
    """A spec constant: inlined in both languages."""
    return Name(
        _type_of(value),
        _literal(value, "py"),
        _literal(value, "cpp"),
        shown=False,
        positive=type(value) is int and value > 0,
        value=value,
    )


class _Unknown:
    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN = _Unknown()  # the value of what only a real call has


@dataclass(frozen=True)
class Scope:
    """What one kind of expression may read; `cpp` when it is also rendered into C++."""

    names: dict[str, Name]
    tensors: dict[str, int] = field(default_factory=dict)  # tensor argument -> rank
    optional: frozenset[str] = frozenset()  # arguments that may be None
    cpp: bool = False
    want: str = "bool"  # the type the whole expression must have
    strided: frozenset[str] = frozenset()  # tensors whose row stride C++ receives (layout: rows)


@dataclass(frozen=True)
class Expr:
    source: str
    python: str
    cpp: str | None
    names: tuple[str, ...]  # Python spellings of the values shown when a gate fails
    # Every `T.ptr % N` modulus; None when a pointer is read any other way. A call's pointers then
    # matter to this expression only modulo their lcm (the wrapper's fast path keys on that).
    ptr_moduli: tuple[int, ...] | None = ()
    reads: tuple[str, ...] = ()  # the plain names it reads (tensors excluded), in order of first use
    tree: ast.expr | None = field(default=None, compare=False, repr=False)  # the checked syntax tree
    known: tuple = field(default=(), compare=False, repr=False)  # (name, value) of its constants

    def value(self, env: dict):
        """Its value, names taken from `env` (then the constants); UNKNOWN where it reads a name
        neither has, a tensor attribute or an optional argument's presence that `env` lacks."""
        return _evaluate(self.tree, {**dict(self.known), **env})

    def decide(self, env: dict) -> bool | None:
        """True or False when `env` settles it, None when it depends on what `env` lacks. Division by
        zero decides False: the wrapper's own check would raise there."""
        try:
            result = self.value(env)
        except ZeroDivisionError:
            return False
        return None if result is UNKNOWN else bool(result)

    @property
    def python_rhs(self) -> str:
        """`python` without the parentheses around all of it, as the right side of an assignment
        (where ruff format drops them); `python` itself stays safe to embed, e.g. after `not`."""
        text = self.python
        while text.startswith("(") and text.endswith(")"):
            depth = 0
            for i, c in enumerate(text):
                depth += {"(": 1, ")": -1}.get(c, 0)
                if depth == 0 and i < len(text) - 1:  # the first parenthesis closes before the end
                    return text
            text = text[1:-1]
        return text


def parse_expr(source, scope: Scope) -> Expr:
    """Parse, resolve and type-check `source`; raise ExprError saying what is not allowed."""
    if isinstance(source, bool) or not isinstance(source, (str, int)):
        raise ExprError(f"expected an expression (a string or an integer); got {type(source).__name__}")
    text = str(source)
    if len(text) > MAX_SOURCE:
        raise ExprError(
            f"the expression has {len(text)} characters; at most {MAX_SOURCE} (exprs.MAX_SOURCE): "
            "name a dim or a constant for the repeated part"
        )
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as exc:
        raise ExprError(f"'{text}' is not an expression: {exc.msg}") from None
    except (ValueError, RecursionError, MemoryError):  # NUL bytes; pathological nesting
        raise ExprError(f"'{text}' is not an expression; use {GRAMMAR}") from None
    _check_depth(tree)
    r = _Renderer(scope)
    py, cpp, typ = r.render(tree)
    if scope.cpp and cpp is None:
        raise ExprError(
            f"'{text}' is checked again in C++, which cannot read T.shape[i], `is None` or the "
            "stride0 of a tensor whose layout is not rows; use dims, scalars, constants, params, vec, "
            "T.ptr and T.stride0"
        )
    if typ != scope.want and not (scope.want == "int" and typ == "int"):
        raise ExprError(f"'{text}' is {_a(typ)} expression; {_a(scope.want)} is needed here")
    moduli = tuple(r.moduli) if len(r.moduli) == r.ptr_reads else None
    known = tuple((n, name.value) for n, name in scope.names.items() if name.value is not None)
    return Expr(
        text,
        py,
        cpp if scope.cpp else None,
        tuple(dict.fromkeys(r.shown)),
        moduli,
        tuple(dict.fromkeys(r.reads)),
        tree,
        known,
    )


def _a(typ: str) -> str:
    return {"int": "an integer", "float": "a float", "bool": "a true/false"}[typ]


def _check_depth(tree: ast.AST) -> None:
    todo = [(tree, 1)]
    while todo:
        node, depth = todo.pop()
        if depth > MAX_DEPTH:
            raise ExprError(
                f"the expression nests deeper than {MAX_DEPTH} levels (exprs.MAX_DEPTH); split it into named dims"
            )
        todo += [(child, depth + 1) for child in ast.iter_child_nodes(node)]


class _Renderer:
    def __init__(self, scope: Scope):
        self.scope = scope
        self.shown: list[str] = []
        self.ptr_reads = 0
        self.moduli: list[int] = []
        self.reads: list[str] = []

    def render(self, node) -> tuple[str, str | None, str]:
        """(Python, C++ or None, type) of one node."""
        method = getattr(self, f"_{type(node).__name__}", None)
        if method is None:
            raise ExprError(f"'{_unparse(node)}' is not allowed; use {GRAMMAR}")
        return method(node)

    def _typed(self, node, *types: str) -> tuple[str, str | None]:
        py, cpp, typ = self.render(node)
        if typ not in types:
            raise ExprError(f"'{_unparse(node)}' is {_a(typ)}; {' or '.join(_a(t) for t in types)} is needed here")
        return py, cpp

    def _Constant(self, node):
        v = node.value
        if type(v) not in (int, bool):
            raise ExprError(
                f"{v!r}: only integer and True/False literals are allowed (a float or text belongs in `constants`)"
            )
        return _literal(v, "py"), _literal(v, "cpp"), _type_of(v)

    def _Name(self, node):
        name = self.scope.names.get(node.id)
        if name is None:
            known = sorted([*self.scope.names, *self.scope.tensors])
            raise ExprError(f"unknown name '{node.id}'; known here: {', '.join(known) or 'none'}", node.id)
        if name.shown:
            self.shown.append(name.py)
        self.reads.append(node.id)
        return name.py, name.cpp, name.type

    def _UnaryOp(self, node):
        if isinstance(node.op, ast.Not):
            py, cpp = self._typed(node.operand, "bool")
            return f"(not {py})", _join(cpp, lambda c: f"(!{c})"), "bool"
        if isinstance(node.op, ast.USub):
            py, cpp, typ = self.render(node.operand)
            if typ == "bool":
                raise ExprError(f"'{_unparse(node)}': cannot negate a true/false value")
            return f"(-{py})", _join(cpp, lambda c: f"(-{c})"), typ
        raise ExprError(f"'{_unparse(node)}': only unary - and `not` are allowed")

    def _BinOp(self, node):
        op = type(node.op)
        if op in _ARITH:
            (lp, lc, lt), (rp, rc, rt) = self.render(node.left), self.render(node.right)
            if "bool" in (lt, rt):
                raise ExprError(f"'{_unparse(node)}': arithmetic on a true/false value")
            s = _ARITH[op]
            return (
                f"({lp} {s} {rp})",
                _join2(lc, rc, lambda a, b: f"({a} {s} {b})"),
                "float" if "float" in (lt, rt) else "int",
            )
        if op in _FLOOR:
            lp, lc = self._typed(node.left, "int")
            rp, rc = self._typed(node.right, "int")
            if not self._positive(node.right):
                raise ExprError(
                    f"'{_unparse(node)}': the right operand of {_FLOOR[op][0]} must be a positive "
                    "integer known when the spec is loaded (a literal, a constant, an integer param or "
                    "vec), so both languages agree and nothing divides by zero"
                )
            py_op, fn = _FLOOR[op]
            if op is ast.Mod and isinstance(node.left, ast.Attribute) and node.left.attr == "ptr":
                modulus = self._static_value(node.right)
                if modulus is not None:
                    self.moduli.append(modulus)
            return f"({lp} {py_op} {rp})", _join2(lc, rc, lambda a, b: f"{fn}({a}, {b})"), "int"
        raise ExprError(f"operator {_unparse(node)!r} is not allowed; use {GRAMMAR}")

    def _positive(self, node) -> bool:
        if isinstance(node, ast.Constant):
            return type(node.value) is int and node.value > 0
        if isinstance(node, ast.Name):
            return self.scope.names[node.id].positive
        return False

    def _static_value(self, node) -> int | None:
        if isinstance(node, ast.Constant):
            return node.value
        return self.scope.names[node.id].value if isinstance(node, ast.Name) else None

    def _BoolOp(self, node):
        parts = [self._typed(v, "bool") for v in node.values]
        py_op, cpp_op = ("and", "&&") if isinstance(node.op, ast.And) else ("or", "||")
        py = "(" + f" {py_op} ".join(p for p, _ in parts) + ")"
        cpps = [c for _, c in parts]
        cpp = None if None in cpps else "(" + f" {cpp_op} ".join(cpps) + ")"
        return py, cpp, "bool"

    def _Compare(self, node):
        if len(node.ops) == 1 and isinstance(node.ops[0], (ast.Is, ast.IsNot)):
            return self._is_none(node)
        py_parts, cpp_parts = [], []
        left = node.left
        for op, right in zip(node.ops, node.comparators):
            if type(op) not in _CMPOPS:
                raise ExprError(f"'{_unparse(node)}': use ==, !=, <, <=, >, >= (or `X is None` alone)")
            (lp, lc, lt), (rp, rc, rt) = self.render(left), self.render(right)
            if (lt == "bool") != (rt == "bool") or (lt == "bool" and type(op) not in (ast.Eq, ast.NotEq)):
                raise ExprError(f"'{_unparse(node)}': compares a true/false value with a number")
            s = _CMPOPS[type(op)]
            py_parts.append(f"({lp} {s} {rp})")
            cpp_parts.append(_join2(lc, rc, lambda a, b, s=s: f"({a} {s} {b})"))  # s bound now, not at call
            left = right
        if len(py_parts) == 1:
            return py_parts[0], cpp_parts[0], "bool"
        cpp = None if None in cpp_parts else "(" + " && ".join(cpp_parts) + ")"
        return "(" + " and ".join(py_parts) + ")", cpp, "bool"

    def _is_none(self, node):
        target, right = node.left, node.comparators[0]
        if not (isinstance(target, ast.Name) and isinstance(right, ast.Constant) and right.value is None):
            raise ExprError(f"'{_unparse(node)}': `is` only in `NAME is None` / `NAME is not None`")
        if target.id not in self.scope.optional:
            known = ", ".join(sorted(self.scope.optional)) or "none"
            raise ExprError(f"'{target.id}' is not an optional argument here; optional: {known}")
        neg = isinstance(node.ops[0], ast.IsNot)
        return f"({target.id} is {'not ' if neg else ''}None)", None, "bool"

    def _IfExp(self, node):
        tp, tc = self._typed(node.test, "bool")
        (ap, ac, at), (bp, bc, bt) = self.render(node.body), self.render(node.orelse)
        if at != bt:
            raise ExprError(f"'{_unparse(node)}': both branches must have the same type ({at} vs {bt})")
        cpp = None if None in (tc, ac, bc) else f"({tc} ? {ac} : {bc})"
        return f"({ap} if {tp} else {bp})", cpp, at

    def _Attribute(self, node):
        t = self._tensor(node.value, node)
        if node.attr == "ptr":
            self.ptr_reads += 1
            self.shown.append(f"{t}.data_ptr()")
            return f"{t}.data_ptr()", f"k3::address(a.{t})", "int"
        if node.attr == "stride0":
            self.shown.append(f"{t}.stride(0)")
            return f"{t}.stride(0)", f"a.{t}_stride0" if t in self.scope.strided else None, "int"
        raise ExprError(f"'{_unparse(node)}' is not readable; use {t}.ptr, {t}.stride0 or {t}.shape[i]")

    def _Subscript(self, node):
        value = node.value
        if not (isinstance(value, ast.Attribute) and value.attr == "shape"):
            raise ExprError(f"'{_unparse(node)}': only T.shape[i] may be indexed")
        t = self._tensor(value.value, node)
        index = node.slice
        if (
            isinstance(index, ast.UnaryOp)
            and isinstance(index.op, ast.USub)
            and isinstance(index.operand, ast.Constant)
        ):
            i = -index.operand.value if type(index.operand.value) is int else None
        else:
            i = index.value if isinstance(index, ast.Constant) and type(index.value) is int else None
        rank = self.scope.tensors[t]
        if i is None or not -rank <= i < rank:
            raise ExprError(
                f"'{_unparse(node)}': the index must be an integer literal in {-rank}..{rank - 1} ({t} has rank {rank})"
            )
        self.shown.append(f"{t}.shape[{i}]")
        return f"{t}.shape[{i}]", None, "int"

    def _tensor(self, node, whole) -> str:
        if not isinstance(node, ast.Name) or node.id not in self.scope.tensors:
            known = ", ".join(sorted(self.scope.tensors)) or "none"
            raise ExprError(
                f"'{_unparse(whole)}': attributes are read from tensor arguments only; tensors readable here: {known}"
            )
        return node.id


def _join(cpp, fn):
    return None if cpp is None else fn(cpp)


def _join2(a, b, fn):
    return None if a is None or b is None else fn(a, b)


def _unparse(node) -> str:
    try:
        return ast.unparse(node)
    except Exception:  # only for a message
        return type(node).__name__


def _type_of(value) -> str:
    return "bool" if isinstance(value, bool) else "int" if isinstance(value, int) else "float"


def _literal(value, lang: str) -> str:
    if isinstance(value, bool):
        return ("True" if value else "False") if lang == "py" else ("true" if value else "false")
    if isinstance(value, float):
        return repr(value) if lang == "py" else f"{value!r}f"
    return str(value)


# ------------------------------------------------------------------------------------------------
# Evaluation of a checked tree (Expr.value): Python's semantics, three-valued where names are unknown

_ARITH_FN = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}
_FLOOR_FN = {ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}
_CMP_FN = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}


def _evaluate(node, env: dict):
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return env.get(node.id, UNKNOWN)
    if isinstance(node, (ast.Attribute, ast.Subscript)):
        return UNKNOWN  # a tensor attribute: only a real call has it
    if isinstance(node, ast.UnaryOp):
        v = _evaluate(node.operand, env)
        return UNKNOWN if v is UNKNOWN else (not v) if isinstance(node.op, ast.Not) else -v
    if isinstance(node, ast.BinOp):
        left, right = _evaluate(node.left, env), _evaluate(node.right, env)
        if left is UNKNOWN or right is UNKNOWN:
            return UNKNOWN
        return {**_ARITH_FN, **_FLOOR_FN}[type(node.op)](left, right)
    if isinstance(node, ast.Compare):
        if isinstance(node.ops[0], (ast.Is, ast.IsNot)):  # `X is None`: known when env says whether X was given
            given = env.get(node.left.id, UNKNOWN)
            if given is UNKNOWN:
                return UNKNOWN
            return (given is None) == isinstance(node.ops[0], ast.Is)
        parts, left = [], _evaluate(node.left, env)
        for op, comparator in zip(node.ops, node.comparators):
            right = _evaluate(comparator, env)
            parts.append(UNKNOWN if UNKNOWN in (left, right) else _CMP_FN[type(op)](left, right))
            left = right
        return _all(parts)
    if isinstance(node, ast.BoolOp):
        parts = [_evaluate(v, env) for v in node.values]
        parts = [p if p is UNKNOWN else bool(p) for p in parts]
        if isinstance(node.op, ast.And):
            return _all(parts)
        return True if True in parts else (UNKNOWN if UNKNOWN in parts else False)
    if isinstance(node, ast.IfExp):
        test = _evaluate(node.test, env)
        if test is UNKNOWN:
            a, b = _evaluate(node.body, env), _evaluate(node.orelse, env)
            return a if a is not UNKNOWN and b is not UNKNOWN and a == b else UNKNOWN
        return _evaluate(node.body if test else node.orelse, env)
    raise ExprError(f"k3gen bug: '{_unparse(node)}' passed the checks but cannot be evaluated")


def _all(parts: list):
    """Three-valued `and`: False wins, then UNKNOWN."""
    if any(p is not UNKNOWN and not p for p in parts):
        return False
    return UNKNOWN if any(p is UNKNOWN for p in parts) else True
