"""Read spec files into models; turn every problem into a located SpecError, all reported together."""
from __future__ import annotations

import ast
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
        return None, errors + [SpecError(file, 1, "", "<root>", "a spec is a mapping; start with `kernel: NAME`")]
    kernel = data.get("kernel") if isinstance(data.get("kernel"), str) else ""
    try:
        spec = KernelSpec.model_validate(data)
    except ValidationError as exc:
        return None, errors + [_located(e, located, file, kernel) for e in _dedupe(exc.errors(), data)]
    loaded = LoadedSpec(spec, file, text, located)
    return (None if errors else loaded), errors


def _dedupe(raw: list[dict], data) -> list[tuple[tuple, dict]]:
    """Map pydantic locations onto data paths (dropping union tags); keep one error per path."""
    seen, out = set(), []
    for e in raw:
        path = _data_path(e["loc"], data)
        err = e.get("ctx", {}).get("error")
        if isinstance(err, FieldError):
            path = path + err.subpath
        if path not in seen:
            seen.add(path)
            out.append((path, e))
    return out


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


def _located(item: tuple[tuple, dict], located: LocatedData, file: str, kernel: str) -> SpecError:
    path, e = item
    return SpecError(file, located.line_of(path), kernel, _dotted(path), _message(e, path))


def _message(e: dict, path: tuple) -> str:
    kind, err = e["type"], e.get("ctx", {}).get("error")
    if isinstance(err, FieldError):
        return str(err)
    if kind == "extra_forbidden":
        allowed = _allowed_keys(e["loc"][:-1])
        return f"unknown key '{path[-1]}'{_suggest(path[-1], allowed)}; allowed here: {', '.join(allowed)}"
    if kind == "missing":
        return f"required key '{path[-1]}' is missing; add it"
    got = e.get("input")
    return f"{e['msg']}; got {got!r}" if not isinstance(got, (dict, list)) else e["msg"]


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
        return [ls.error(("oracle",), f"module '{s.oracle}' not found (looked for {module.relative_to(root)}); "
                                      "give a dotted module path such as k3gen.oracles.NAME")]
    defined = {n.name for n in ast.parse(module.read_text()).body if isinstance(n, ast.FunctionDef)}
    needed = [(("oracle",), f) for f in ("reference", "make_args", "check")]
    needed += [(("tests", "cases", i), f"case_{c}") for i, c in enumerate(s.tests.cases)]
    needed += [(("tests", "rejects", n), f"reject_{n}") for n in s.tests.rejects]
    return [ls.error(path, f"oracle {s.oracle} has no function {fn}(); define it or remove the entry")
            for path, fn in needed if fn not in defined]


def _dotted(path: tuple) -> str:
    return ".".join(str(p) for p in path) or "<root>"
