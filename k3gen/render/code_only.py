"""The part of rendered C++ that the compiler turns into instructions: what a tuning table measured.

A table's pick stands while the code it timed stands (k3gen.render.keys.identities). Comments and
static_asserts emit no instruction, so neither is part of that code: a reworded comment, a limit's
message or line number in templates/<family>/limits.yaml, or a new limit that the code already
meets keeps every table current, while any edit of a statement, declaration or preprocessor line
stales the tables of the headers it reaches. Blank lines and indentation go too; line breaks stay
(the preprocessor reads lines).
"""

from __future__ import annotations

import re

_STATIC_ASSERT = re.compile(r"\bstatic_assert\s*\(")


def code_only(text: str) -> str:
    """`text` without comments, static_asserts, blank lines and each line's outer whitespace."""
    kept = _without_static_asserts(_without_comments(text))
    return "\n".join(line.strip() for line in kept.splitlines() if line.strip())


def _literal_end(text: str, i: int) -> int:
    """The index past the string or character literal that opens at text[i]."""
    quote, i = text[i], i + 1
    while i < len(text) and text[i] != quote and text[i] != "\n":
        i += 2 if text[i] == "\\" else 1
    return i + 1


def _without_comments(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c in "\"'":
            end = _literal_end(text, i)
            out.append(text[i:end])
            i = end
        elif text.startswith("//", i):
            i = text.find("\n", i)
            i = len(text) if i < 0 else i
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = len(text) if end < 0 else end + 2
            out.append(" ")
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _without_static_asserts(text: str) -> str:
    out, at = [], 0
    for m in _STATIC_ASSERT.finditer(text):
        if m.start() < at:  # inside one already cut (a static_assert's message naming another)
            continue
        depth, i = 1, m.end()
        while i < len(text) and depth:
            if text[i] in "\"'":
                i = _literal_end(text, i)
                continue
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        while i < len(text) and text[i] in " \t":
            i += 1
        if text.startswith(";", i):
            i += 1
        out.append(text[at : m.start()])
        at = i
    out.append(text[at:])
    return "".join(out)
