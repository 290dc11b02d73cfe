"""Python data laid out the way `ruff format` lays it out (line length 120), by k3gen itself.

Generated modules must pass `ruff format --check`, but `k3gen build` never runs ruff: its output
must not depend on an installed tool's version. Data is the only part of a generated module that
varies with the spec, so this is all the formatting k3gen does; the fixed code around it is written
formatted in the templates. The rules are ruff's for literals: a value that fits on its line stays
flat; one that does not opens its brackets, one element per line, each with a trailing comma.
Scalars are spelled by k3gen.escape.py_literal (double quotes, as ruff chooses them). A string too long
for any line keeps its line and says `# noqa: E501`. `tests/test_pyformat.py` holds this to ruff.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

from k3gen.spec.escape import py_literal

LINE_LENGTH = 120
INDENT = "    "


@dataclass(frozen=True)
class Name:
    """A module-level name (or dotted reference) spelled as is, e.g. a table defined above."""

    text: str


@dataclass(frozen=True)
class Call:
    """`func(arg)`: one argument, laid out like ruff does (the argument splits before the call does)."""

    func: str
    arg: object


def flat(value) -> str:
    """The one-line spelling of a literal (k3gen.escape.py_literal), a Name, a Call, and lists, tuples
    and dicts of them."""
    if isinstance(value, Name):
        return value.text
    if isinstance(value, Call):
        return f"{value.func}({flat(value.arg)})"
    if isinstance(value, tuple):
        inner = ", ".join(flat(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, list):
        return "[" + ", ".join(flat(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{flat(k)}: {flat(v)}" for k, v in value.items()) + "}"
    return py_literal(value)


def width(text: str) -> int:
    """Columns a line takes, as ruff counts them: wide East Asian characters two, combining marks none."""
    return sum(0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def assign(name: str, value, depth: int = 0) -> str:
    """`name = value` laid out (indented `depth` levels), ending in a newline. A comment goes on the
    line above: ruff counts a trailing one in the width, which this layout does not."""
    return "\n".join(_lines(value, depth, f"{name} = ", "")) + "\n"


def _lines(value, depth: int, head: str, tail: str) -> list[str]:
    pad = INDENT * depth
    one = pad + head + flat(value) + tail
    if width(one) <= LINE_LENGTH:
        return [one]
    if isinstance(value, Call):
        return [f"{pad}{head}{value.func}(", *_lines(value.arg, depth + 1, "", ""), f"{pad}){tail}"]
    if isinstance(value, (list, tuple, dict)) and value:
        opening, closing = {list: "[]", tuple: "()", dict: "{}"}[type(value)]
        if isinstance(value, dict):
            items = [line for k, v in value.items() for line in _lines(v, depth + 1, f"{flat(k)}: ", ",")]
        else:
            items = [line for v in value for line in _lines(v, depth + 1, "", ",")]
        return [f"{pad}{head}{opening}", *items, f"{pad}{closing}{tail}"]
    return [one + "  # noqa: E501"]  # a string or number no layout can shorten


def call(head: str, args: list[str], tail: str = "", depth: int = 0, close: str = ")") -> str:
    """Code `head(args)tail` (args spelled already; `head` ends in the opening bracket) laid out as
    ruff format lays out a call or a def: flat when it fits; else the arguments on one line of their
    own; else one a line, each with a trailing comma. No trailing newline."""
    pad, inner = INDENT * depth, INDENT * (depth + 1)
    one = f"{pad}{head}{', '.join(args)}{close}{tail}"
    if width(one) <= LINE_LENGTH or not args:
        return one
    if width(inner + ", ".join(args)) <= LINE_LENGTH:
        return f"{pad}{head}\n{inner}{', '.join(args)}\n{pad}{close}{tail}"
    return "\n".join([f"{pad}{head}", *(f"{inner}{a}," for a in args), f"{pad}{close}{tail}"])
