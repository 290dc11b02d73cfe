"""Read spec files into models; turn every problem into a located SpecError, all reported together."""
from __future__ import annotations

import ast
import difflib
import re
from dataclasses import replace
from pathlib import Path

from pydantic import ValidationError

from .errors import FieldError, SpecError, SpecErrors
from .model import KernelSpec, _suggest
from .yaml_lines import LocatedData, parse_yaml


class LoadedSpec:
    """A validated spec, where it came from, and its line map (for later, cross-file errors)."""

    def __init__(self, spec: KernelSpec, file: str, text: str, located: LocatedData):
        self.spec, self.file, self.text, self.located = spec, file, text, located

    def error(self, path: tuple, message: str) -> SpecError:
        return SpecError(self.file, self.located.line_of(path), self.spec.kernel, _dotted(path), message)


def load_specs(root: Path, files: list[Path] | None = None) -> list[LoadedSpec]:
    """Load every spec under root/specs (or the given files); raise SpecErrors with all problems."""
    root = Path(root)
    files = sorted(files if files is not None else (root / "specs").glob("*.yaml"))
    loaded, errors = [], []
    for f in files:
        rel = Path(f).resolve().relative_to(root.resolve()).as_posix() if Path(f).is_absolute() else Path(f).as_posix()
        text = (root / rel).read_text() if not Path(f).is_absolute() else Path(f).read_text()
        spec, errs = parse_spec(text, rel)
        errors += errs
        if spec is not None:
            loaded.append(spec)
    errors += check_across(loaded, root)
    if errors:
        raise SpecErrors(errors)
    return loaded


def parse_spec(text: str, file: str) -> tuple[LoadedSpec | None, list[SpecError]]:
    """Parse and validate one spec's text; `file` is the name errors print."""
    located, errors = parse_yaml(text, file)
    if located is None:
        return None, errors
    data = located.data
    if not isinstance(data, dict):
        return None, errors + [SpecError(file, located.line_of(()), "", "<root>",
                                         f"the file holds {_kind(data)}, but a spec is a mapping; "
                                         "start with `kernel: NAME`")]
    kernel = data.get("kernel") if isinstance(data.get("kernel"), str) else ""
    errors = [replace(e, kernel=kernel) if not e.kernel else e for e in errors]
    try:
        spec = KernelSpec.model_validate(data)
    except ValidationError as exc:
        groups = _explained_missing_dropped(_grouped(exc.errors(), data))
        unreadable = {e.field for e in errors}  # a value YAML could not read is already reported
        return None, errors + [_located(path, group, located, file, kernel) for path, group in groups
                               if _dotted(path) not in unreadable]
    loaded = LoadedSpec(spec, file, text, located)
    return (None if errors else loaded), errors


def _grouped(raw: list[dict], data) -> list[tuple[tuple, list[dict]]]:
    """Map pydantic locations onto data paths (dropping union tags); one group of errors per path.

    A union (`int | float | bool`) fails once per member at the same data path; the group becomes
    one message listing what would have been accepted.
    """
    groups: dict[tuple, list[dict]] = {}
    for e in raw:
        path = _data_path(e["loc"], data)
        err = e.get("ctx", {}).get("error")
        if isinstance(err, FieldError):
            path = path + err.subpath
        groups.setdefault(path, []).append(e)
    return list(groups.items())


def _explained_missing_dropped(groups: list[tuple[tuple, list[dict]]]) -> list[tuple[tuple, list[dict]]]:
    """`sumary:` gives both "unknown key 'sumary' (did you mean 'summary'?)" and "'summary' is missing";
    the first says it all, so drop the second."""
    suggested = set()
    for path, group in groups:
        if group[0]["type"] == "extra_forbidden":
            close = difflib.get_close_matches(str(path[-1]), _allowed_keys(group[0]["loc"][:-1]), n=1)
            suggested |= {path[:-1] + (c,) for c in close}
    return [(path, group) for path, group in groups if not (group[0]["type"] == "missing" and path in suggested)]


def _data_path(loc: tuple, data) -> tuple:
    path, node = [], data
    for i, part in enumerate(loc):
        if part == "[key]":
            continue
        if isinstance(node, dict) and part in node:
            node = node[part]
            path.append(part)
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
            path.append(part)
        elif isinstance(node, dict) and i == len(loc) - 1:
            path.append(part)  # a missing key: point at its parent's line, name the key
    return tuple(path)


def _located(path: tuple, group: list[dict], located: LocatedData, file: str, kernel: str) -> SpecError:
    return SpecError(file, located.line_of(path), kernel, _dotted(path), _message(group, path))


# What a pydantic type error expected, in a spec author's words (key: the error type's first word).
EXPECTED = {"bool": "`true`/`false`", "int": "an integer", "float": "a number", "string": "a string",
            "list": "a list such as `[a, b]`", "dict": "a mapping such as `{key: value}`",
            "model": "a mapping such as `{key: value}`"}


def _message(group: list[dict], path: tuple) -> str:
    e = group[0]
    kind, err, got = e["type"], e.get("ctx", {}).get("error"), e.get("input")
    if isinstance(err, FieldError):
        return str(err)
    if kind == "extra_forbidden":
        allowed = _allowed_keys(e["loc"][:-1])
        return f"unknown key '{path[-1]}'{_suggest(path[-1], allowed)}; allowed here: {', '.join(allowed)}"
    if kind == "missing":
        return f"required key '{path[-1]}' is missing; add it"
    if kind == "literal_error":
        choices = re.findall(r"'([^']*)'", e["ctx"]["expected"])
        return f"{got!r} is not allowed here{_suggest(got, choices)}; use one of: {', '.join(choices)}"
    wanted = [EXPECTED.get(x["type"].split("_")[0]) for x in group]
    if all(wanted):
        wanted = list(dict.fromkeys(wanted))
        said = wanted[0] if len(wanted) == 1 else ", ".join(wanted[:-1]) + " or " + wanted[-1]
        return f"expected {said}; got {_shown(got)}"
    return f"{e['msg']}; got {_shown(got)}"


def _shown(value) -> str:
    return _kind(value) if isinstance(value, (dict, list)) else repr(value)


def _kind(value) -> str:
    return {dict: "a mapping", list: "a list", str: "a string"}.get(type(value), f"a {type(value).__name__}")


def _allowed_keys(loc: tuple) -> list[str]:
    """Field names (aliases where set) of the model class reached by following loc from KernelSpec."""
    import typing

    cls = KernelSpec
    for part in loc:
        if isinstance(part, int) or part == "[key]":
            continue
        field = next((f for n, f in cls.model_fields.items() if part in (n, f.alias)), None)
        if field is None:
            continue
        cls = _model_in(field.annotation, typing) or cls
    return [f.alias or n for n, f in cls.model_fields.items()]


def _model_in(annotation, typing):
    from pydantic import BaseModel

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_in(arg, typing)
        if found:
            return found
    return None


def check_across(loaded: list[LoadedSpec], root: Path) -> list[SpecError]:
    """Rules no single spec can check: unique names, templates and oracle functions that exist."""
    errors = []
    first: dict[str, LoadedSpec] = {}
    for ls in loaded:
        s = ls.spec
        if s.kernel in first:
            other = first[s.kernel]
            errors.append(ls.error(("kernel",), f"kernel '{s.kernel}' is already defined at "
                                                f"{other.file}:{other.located.line_of(('kernel',))}; rename one"))
        first.setdefault(s.kernel, ls)
        if not (root / "templates" / s.template / "kernel.cuh.j2").is_file():
            known = sorted(p.parent.name for p in (root / "templates").glob("*/kernel.cuh.j2"))
            errors.append(ls.error(("template",), f"templates/{s.template}/kernel.cuh.j2 does not exist"
                                                  f"{_suggest(s.template, known)}; known: {', '.join(known) or 'none'}"))
        errors += _check_oracle(ls, root)
    return errors


def _check_oracle(ls: LoadedSpec, root: Path) -> list[SpecError]:
    """The oracle module must define what the generated tests call; read its AST, never import it."""
    s = ls.spec
    module = root.joinpath(*s.oracle.split(".")).with_suffix(".py")
    if not module.is_file():
        known = sorted(p.stem for p in (root / "k3gen" / "oracles").glob("*.py") if p.stem != "__init__")
        close = difflib.get_close_matches(s.oracle.split(".")[-1], known, n=1)
        hint = f" (did you mean 'k3gen.oracles.{close[0]}'?)" if close else ""
        return [ls.error(("oracle",), f"module '{s.oracle}' not found (looked for "
                                      f"{module.relative_to(root).as_posix()}){hint}; "
                                      "give a dotted module path such as k3gen.oracles.NAME")]
    try:
        tree = ast.parse(module.read_text(), filename=str(module))
    except SyntaxError as exc:
        return [ls.error(("oracle",), f"oracle {s.oracle} does not parse: {exc.msg} at "
                                      f"{module.relative_to(root).as_posix()}:{exc.lineno}; fix the module")]
    defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    needed = [(("oracle",), f, "define it") for f in ("reference", "make_args", "check")]
    needed += [(("tests", "cases", i), f"case_{c}", "define it or remove the entry")
               for i, c in enumerate(s.tests.cases)]
    needed += [(("tests", "rejects", n), f"reject_{n}", "define it or remove the entry") for n in s.tests.rejects]
    return [ls.error(path, f"oracle {s.oracle} has no function {fn}(); {fix}")
            for path, fn, fix in needed if fn not in defined]


def _dotted(path: tuple) -> str:
    return ".".join(str(p) for p in path) or "<root>"
