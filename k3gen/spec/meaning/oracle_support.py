"""What an oracle can check (its module-level SUPPORTED), read from its AST and held against the spec.

A generated cell the oracle cannot compute (a dtype it has no conversion for, a param value its
reference() does not branch on) would be a red test on a GPU; here it is a located error at load.
The oracle is never imported: SUPPORTED is a literal, read with ast.literal_eval.

    SUPPORTED = {"dtypes": {AXIS: "float" | [dtype, ...]},   # "float": every float dtype of k3gen.runtime.dtypes
                 "params": {PARAM: [value, ...]}}            # string params only; int params are free
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

from k3gen.runtime.dtypes import DTYPES
from k3gen.runtime.files import read_text
from k3gen.spec.bounds import MAX_SOURCE_BYTES
from k3gen.spec.errors import SpecError
from k3gen.spec.paths import plain_file_inside

DECLARATION = "SUPPORTED"
KINDS = {name: [n for n, d in DTYPES.items() if d.kind == name] for name in ("float", "int")}


def read_supported(tree: ast.Module) -> tuple[dict | None, int, str | None]:
    """(the declaration, its line, a problem with it or None)."""
    node = next(
        (
            n
            for n in tree.body
            if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == DECLARATION for t in n.targets)
        ),
        None,
    )
    if node is None:
        return (
            None,
            1,
            f'declares no {DECLARATION}; add `{DECLARATION} = {{"dtypes": {{AXIS: "float"}}}}` '
            "saying what it can check",
        )
    try:
        value = ast.literal_eval(node.value)
    except ValueError:
        return None, node.lineno, f"{DECLARATION} is not a literal; write it as a dict of lists and strings"
    problem = _shape_problem(value)
    return (None if problem else value), node.lineno, problem


def _shape_problem(value) -> str | None:
    if not isinstance(value, dict) or set(value) - {"dtypes", "params"}:
        return f"{DECLARATION} is a dict with keys `dtypes` and `params`"
    for axis, allowed in value.get("dtypes", {}).items():
        if isinstance(allowed, str):
            if allowed not in KINDS:
                return (
                    f"{DECLARATION}['dtypes'][{axis!r}] = {allowed!r}; use one of {', '.join(map(repr, KINDS))} "
                    "or a list of dtypes"
                )
        elif not isinstance(allowed, list) or any(d not in DTYPES for d in allowed):
            return f"{DECLARATION}['dtypes'][{axis!r}] lists a name that is not a dtype; known: {', '.join(DTYPES)}"
    for param, allowed in value.get("params", {}).items():
        if not isinstance(allowed, list):
            return f"{DECLARATION}['params'][{param!r}] is a list of values"
    return None


@functools.lru_cache(maxsize=32)
def parsed_source(text: str, rel: str) -> ast.Module:
    """An oracle module's syntax tree, once per process for the same text: k3gen.spec.load and this
    check both read it for every spec that names it. Callers only read the tree."""
    return ast.parse(text, filename=rel)


def check_oracle_support(ls, root: Path) -> list[SpecError]:
    """Every generated dtype and string param value of the spec is one the oracle declares. An oracle
    that is missing or does not parse is k3gen.spec.load's error already."""
    s = ls.spec
    rel = "/".join(s.oracle.split(".")) + ".py"
    path = Path(root) / rel
    if not plain_file_inside(path, Path(root) / "k3gen" / "oracles"):
        return []  # k3gen.spec.load refuses it; never read a FIFO or a link out of the project
    try:
        tree = parsed_source(read_text(path, Path(root) / "k3gen" / "oracles", MAX_SOURCE_BYTES, rel), rel)
    except (OSError, SyntaxError, ValueError):  # k3gen.spec.load names what is wrong with the file
        return []
    supported, line, problem = read_supported(tree)
    if problem:
        return [ls.error(("oracle",), f"oracle {s.oracle} ({rel}:{line}) {problem}")]
    at = f"{rel}:{line}"
    errors = []
    dtypes = supported.get("dtypes", {})
    generated = list(zip(*s.dtypes.generated_cells()))
    for (axis, values), used in zip(s.dtypes.axes.items(), generated):
        if axis not in dtypes:
            errors.append(
                ls.error(
                    ("dtypes", "axes", axis),
                    f"oracle {s.oracle} knows no dtype axis '{axis}' ({at} declares "
                    f"{', '.join(dtypes) or 'none'}); teach the oracle the axis first",
                )
            )
            continue
        allowed = KINDS[dtypes[axis]] if isinstance(dtypes[axis], str) else dtypes[axis]
        for i, dtype in enumerate(values):
            if dtype in used and dtype not in allowed:
                errors.append(
                    ls.error(
                        ("dtypes", "axes", axis, i),
                        f"oracle {s.oracle} cannot check {axis}={dtype} ({at} supports "
                        f"{', '.join(allowed)}); exclude the cells, or teach the oracle the dtype",
                    )
                )
    params = supported.get("params", {})
    for name, p in s.params.items():
        values = [v for v in p.values if isinstance(v, str)]
        if values and name not in params:
            errors.append(
                ls.error(
                    ("params", name),
                    f"oracle {s.oracle} declares no values for param '{name}' "
                    f"({at}); list the ones its reference() computes",
                )
            )
            continue
        for i, v in enumerate(p.values):
            if isinstance(v, str) and v not in params[name]:
                errors.append(
                    ls.error(
                        ("params", name, "values", i),
                        f"oracle {s.oracle} cannot check {name}={v!r} ({at} supports "
                        f"{', '.join(map(repr, params[name]))}); teach the oracle the value first",
                    )
                )
    return errors
