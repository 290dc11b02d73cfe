"""One escaping function per output language: the only door for spec text that is not a grammar token.

Identifiers, numbers and module names reach output through k3gen.spec.grammar; free text (summaries,
reasons, notes) is one printable line by the model's rule, and leaves through exactly one of these.
Each is safe on any input, so a grammar slip still cannot open a string, a comment or a docstring.
"""

from __future__ import annotations

import html


def py_literal(value) -> str:
    """A Python literal of str/int/float/bool/None and lists, tuples and dicts of them, spelled as
    `ruff format` spells it (k3gen.render.pyformat lays out the long ones)."""
    if isinstance(value, str):
        return py_string(value)
    if isinstance(value, (bool, int, type(None))):
        return repr(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"k3gen bug: {value!r} has no Python literal")
        return repr(value).replace("e+", "e")  # ruff drops an exponent's plus sign
    if isinstance(value, tuple):
        inner = ", ".join(py_literal(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, list):
        return "[" + ", ".join(py_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{py_literal(k)}: {py_literal(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"k3gen bug: no Python literal for {type(value).__name__}")


def py_string(text: str) -> str:
    """A Python string literal: double quotes unless that takes more escapes (ruff format's choice)."""
    r = repr(str(text))
    body = r[1:-1].replace("\\'", "'") if r[0] == "'" else r[1:-1]  # every quote now unescaped
    quote = "'" if body.count('"') > body.count("'") else '"'
    return quote + body.replace(quote, "\\" + quote) + quote


def c_string(text) -> str:
    """A C/C++ string literal: printable ASCII as is, everything else as 3-digit octal escapes of UTF-8."""
    out = []
    for b in str(text).encode("utf-8", "backslashreplace"):
        c = chr(b)
        if c in '"\\?':
            out.append("\\" + c)
        elif 0x20 <= b < 0x7F:
            out.append(c)
        else:
            out.append(f"\\{b:03o}")
    return '"' + "".join(out) + '"'


def visible(text) -> str:
    """Control characters and lone surrogates as their escapes: a text stays one line of real characters."""
    return "".join(c if c.isprintable() and not 0xD800 <= ord(c) <= 0xDFFF else ascii(c)[1:-1] for c in str(text))


def one_line(text) -> str:
    """Text for a comment of any language: one line, no control characters, no C comment end."""
    return visible(text).replace("*/", "* /")


def docstring(text) -> str:
    """Text inside a triple-quoted Python docstring: backslashes and quotes cannot end or bend it."""
    return visible(text).replace("\\", "\\\\").replace('"', '\\"')


def markdown(text) -> str:
    """Text inside a Markdown page or table cell: one line, no HTML, no table break."""
    return html.escape(" ".join(one_line(text).split()), quote=False).replace("|", "\\|")
