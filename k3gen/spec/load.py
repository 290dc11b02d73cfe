"""Read spec files into models; turn every problem into a located SpecError, all reported together."""

from __future__ import annotations

import ast
import difflib
import re
from dataclasses import replace
from pathlib import Path

from pydantic import ValidationError

from k3gen.runtime.files import Refused, read_text
from k3gen.spec.bounds import MAX_SOURCE_BYTES, MAX_SPEC_BYTES
from k3gen.spec.errors import FieldError, SpecError, SpecErrors
from k3gen.spec.grammar import IDENT, spec_file_problem
from k3gen.spec.meaning import check_meaning
from k3gen.spec.meaning.oracle_support import parsed_source
from k3gen.spec.model import KernelSpec, RunnerTable, _suggest
from k3gen.spec.paths import plain_file_inside
from k3gen.spec.rules import check_spec
from k3gen.spec.yaml_lines import LocatedData, parse_yaml

RUNNERS_FILE = "runners.yaml"  # in specs/: the runner table, not a kernel family


class LoadedSpec:
    """A validated spec, where it came from, and its line map (for later, cross-file errors).

    The front family of the runner table also carries that table (`runners`), so the plan and the
    generated lookup follow the spec that the runners consume.
    """

    def __init__(self, spec: KernelSpec, file: str, text: str, located: LocatedData):
        self.spec, self.file, self.text, self.located = spec, file, text, located
        self.runners: LoadedRunners | None = None

    def error(self, path: tuple, message: str) -> SpecError:
        return SpecError(self.file, self.located.line_of(path), self.spec.kernel, _dotted(path), message)


class LoadedRunners:
    """The validated runner table (specs/runners.yaml) and its line map."""

    def __init__(self, table: RunnerTable, file: str, text: str, located: LocatedData):
        self.table, self.file, self.text, self.located = table, file, text, located

    def error(self, path: tuple, message: str) -> SpecError:
        return SpecError(self.file, self.located.line_of(path), "", _dotted(path), message)


def load_specs(root: Path, files: list[Path] | None = None) -> list[LoadedSpec]:
    """Load every spec under root/specs (or the given files); raise SpecErrors with all problems."""
    root = Path(root)
    errors = [] if files is not None else misnamed_specs(root)
    files = sorted(files if files is not None else (root / "specs").glob("*.yaml"))
    loaded, runners = [], None
    for f in files:
        rel = _relative(Path(f), root)
        text, errs = read_spec(root, Path(f) if Path(f).is_absolute() else root / rel, rel)
        errors += errs
        if text is None:
            continue
        parse = parse_runners if Path(rel).name == RUNNERS_FILE else parse_spec
        doc, errs = parse(text, rel)
        errors += errs
        if isinstance(doc, LoadedRunners):
            runners = doc
        elif doc is not None:
            loaded.append(doc)
    errors += check_across(loaded, root)
    errors += check_meaning(loaded, runners, root, complete=not errors)  # limits, oracles, totality, contracts
    if runners is not None:
        errors += attach_runners(runners, loaded)
    if errors:
        raise SpecErrors(errors)
    return loaded


def misnamed_specs(root: Path) -> list[SpecError]:
    """A file in specs/ that looks like a spec but is not NAME.yaml (x.yml, x.YAML) would be ignored:
    refuse it at line 1 instead, naming the one extension k3gen reads."""
    errors = []
    for f in sorted((root / "specs").iterdir()):
        if f.suffix.lower() in (".yml", ".yaml") and f.suffix != ".yaml":
            errors.append(
                SpecError(
                    f"specs/{ascii(f.name)[1:-1]}",
                    1,
                    "",
                    "<file>",
                    f"k3gen reads spec files named NAME.yaml only, so this file would be ignored; rename it to "
                    f"specs/{ascii(f.stem)[1:-1]}.yaml",
                )
            )
    return errors


def _relative(f: Path, root: Path) -> str:
    """The name errors print: the path below the project, taken lexically (a link is never followed
    to name it; read_spec refuses links)."""
    if not f.is_absolute():
        return f.as_posix()
    for base in (root, root.resolve()):
        try:
            return f.relative_to(base).as_posix()
        except ValueError:
            continue
    return f"specs/{f.name}"


def read_spec(root: Path, path: Path, rel: str) -> tuple[str | None, list[SpecError]]:
    """A spec's text, or why it cannot be read: a bad file name, a link, too many bytes, not UTF-8.

    The file name is printed in every generated banner, so it must be a plain NAME.yaml; a link could
    make k3gen read outside the project.
    """
    shown = ascii(rel)[1:-1]
    problem = spec_file_problem(Path(rel).name)
    if problem:
        return None, [SpecError(shown, 1, "", "<file>", problem)]
    try:
        return read_text(path, root, MAX_SPEC_BYTES, shown, "bounds.MAX_SPEC_BYTES"), []
    except Refused as exc:
        said = {
            "link": "not a regular file (a symbolic link); a spec is a plain file inside specs/",
            "not_regular": "not a regular file (a folder, device or pipe); a spec is a plain file inside specs/",
            "too_large": f"the file is larger than {MAX_SPEC_BYTES} bytes (bounds.MAX_SPEC_BYTES); a spec is a "
            "short file",
            "not_utf8": exc.reason.replace("save it as", "save the spec as"),
        }
        return None, [SpecError(shown, exc.line, "", "<file>", said.get(exc.kind, exc.reason))]


def parse_spec(text: str, file: str) -> tuple[LoadedSpec | None, list[SpecError]]:
    """Parse and validate one spec's text; `file` is the name errors print."""
    located, errors = parse_yaml(text, file)
    if located is None:
        return None, errors
    data = located.data
    if not isinstance(data, dict):
        return None, errors + [
            SpecError(
                file,
                located.line_of(()),
                "",
                "<root>",
                f"the file holds {_kind(data)}, but a spec is a mapping; start with `kernel: NAME`",
            )
        ]
    kernel = data.get("kernel") if isinstance(data.get("kernel"), str) and IDENT.match(data["kernel"]) else ""
    errors = [replace(e, kernel=kernel) if not e.kernel else e for e in errors]
    try:
        spec = KernelSpec.model_validate(data)
    except ValidationError as exc:
        errors += _validation_errors(exc, data, located, file, kernel, KernelSpec, errors)
        parts = _valid_parts(data, {e["loc"][0] for e in exc.errors() if e["loc"]})
        return None, errors + _rule_errors(check_spec(parts), located, file, kernel)
    errors += _rule_errors(check_spec({n: getattr(spec, n) for n in KernelSpec.model_fields}), located, file, kernel)
    loaded = LoadedSpec(spec, file, text, located)
    return (None if errors else loaded), errors


def _valid_parts(data: dict, failed: set) -> dict:
    """The top-level fields that validated (or took their default), so the cross-field rules can
    still run on them when another field is wrong."""
    parts = {}
    for name, field in KernelSpec.model_fields.items():
        if name in failed:
            continue
        if name in data:
            parts[name] = _adapter(name).validate_python(data[name])
        elif not field.is_required():
            parts[name] = field.get_default(call_default_factory=True)
    return parts


_ADAPTERS: dict = {}


def _adapter(name: str):
    from typing import Annotated

    from pydantic import TypeAdapter

    if name not in _ADAPTERS:
        field = KernelSpec.model_fields[name]
        _ADAPTERS[name] = TypeAdapter(
            Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation
        )
    return _ADAPTERS[name]


def _rule_errors(problems, located: LocatedData, file: str, kernel: str) -> list[SpecError]:
    return [SpecError(file, located.line_of(path), kernel, _dotted(path), msg) for path, msg in problems]


def parse_runners(text: str, file: str) -> tuple[LoadedRunners | None, list[SpecError]]:
    """Parse and validate the runner table (specs/runners.yaml)."""
    located, errors = parse_yaml(text, file)
    if located is None:
        return None, errors
    if not isinstance(located.data, dict):
        return None, errors + [
            SpecError(
                file, 1, "", "<root>", "the runner table is a mapping; start with `front: FAMILY` and `runners: [...]`"
            )
        ]
    try:
        table = RunnerTable.model_validate(located.data)
    except ValidationError as exc:
        return None, errors + _validation_errors(exc, located.data, located, file, "", RunnerTable, errors)
    return (None if errors else LoadedRunners(table, file, text, located)), errors


def attach_runners(runners: LoadedRunners, loaded: list[LoadedSpec]) -> list[SpecError]:
    """Every runner's activation dtype and archs must be generated by the front family; both files
    and lines are named. The table then travels with the front family's spec."""
    table = runners.table
    front = next((ls for ls in loaded if ls.spec.kernel == table.front), None)
    if front is None:
        known = [ls.spec.kernel for ls in loaded]
        return [
            runners.error(
                ("front",),
                f"'{table.front}' is not a kernel family{_suggest(table.front, known)}; families: {', '.join(known)}",
            )
        ]
    act = front.spec.dtypes.axes.get("act")
    if act is None:
        return [
            runners.error(
                ("front",),
                f"{front.file} has no `act` dtype axis for runners to consume; "
                f"its axes: {', '.join(front.spec.dtypes.axes)}",
            )
        ]
    errors = []
    act_at = f"{front.file}:{front.located.line_of(('dtypes', 'axes', 'act'))}"
    targets = [*front.spec.targets.cuda, *front.spec.targets.hip]
    targets_at = f"{front.file}:{front.located.line_of(('targets',))}"
    for i, r in enumerate(table.runners):
        if r.activation_dtype not in act:
            errors.append(
                runners.error(
                    ("runners", i, "consumes"),
                    (
                        f"runner '{r.name}' consumes {r.consumes} "
                        f"({r.activation_dtype}), which {front.spec.kernel} does "
                        f"not generate: its act axis at {act_at} is [{', '.join(act)}]; add {r.activation_dtype} there "
                        "or change the runner"
                    ),
                )
            )
        for j, arch in enumerate(r.archs):
            if arch not in targets:
                errors.append(
                    runners.error(
                        ("runners", i, "archs", j),
                        (
                            f"runner '{r.name}' runs on {arch}, which is not a target of {front.spec.kernel} "
                            f"({targets_at}: {', '.join(targets)}); add it there or drop it here"
                        ),
                    )
                )
    if not errors:
        front.runners = runners
    return errors


def _validation_errors(
    exc: ValidationError, data, located: LocatedData, file: str, kernel: str, model, earlier: list[SpecError]
) -> list[SpecError]:
    groups = _explained_missing_dropped(_grouped(exc.errors(), data), model)
    unreadable = {e.field for e in earlier}  # a value YAML could not read is already reported
    return [
        _located(path, group, located, file, kernel, model) for path, group in groups if _dotted(path) not in unreadable
    ]


def _grouped(raw: list[dict], data) -> list[tuple[tuple, list[dict]]]:
    """Map pydantic locations onto data paths (dropping union tags); one group of errors per path.

    A union (`int | float | bool`) fails once per member at the same data path; the group becomes
    one message listing what would have been accepted.
    """
    groups: dict[tuple, list[dict]] = {}
    for e in raw:
        path = _data_path(e["loc"], data)
        err = e.get("ctx", {}).get("error")
        if isinstance(err, FieldError):  # one validator may report several problems
            for sub, message in err.items:
                groups.setdefault(path + sub, []).append(dict(e, ctx={"error": FieldError(message)}))
            continue
        groups.setdefault(path, []).append(e)
    return list(groups.items())


def _explained_missing_dropped(groups: list[tuple[tuple, list[dict]]], model) -> list[tuple[tuple, list[dict]]]:
    """`sumary:` gives both "unknown key 'sumary' (did you mean 'summary'?)" and "'summary' is missing";
    the first says it all, so drop the second."""
    suggested = set()
    for path, group in groups:
        if group[0]["type"] == "extra_forbidden":
            close = difflib.get_close_matches(str(path[-1]), _allowed_keys(group[0]["loc"][:-1], model), n=1)
            suggested |= {path[:-1] + (c,) for c in close}
    return [(path, group) for path, group in groups if not (group[0]["type"] == "missing" and path in suggested)]


def _data_path(loc: tuple, data) -> tuple:
    path, node = [], data
    for i, part in enumerate(loc):
        if part == "[key]":
            continue
        if (isinstance(node, dict) and part in node) or (
            isinstance(node, list) and isinstance(part, int) and part < len(node)
        ):
            node = node[part]
            path.append(part)
        elif isinstance(node, dict) and i == len(loc) - 1:
            path.append(part)  # a missing key: point at its parent's line, name the key
    return tuple(path)


def _located(path: tuple, group: list[dict], located: LocatedData, file: str, kernel: str, model) -> SpecError:
    return SpecError(file, located.line_of(path), kernel, _dotted(path), _message(group, path, model))


# What a pydantic type error expected, in a spec author's words (key: the error type's first word).
EXPECTED = {
    "bool": "`true`/`false`",
    "int": "an integer",
    "float": "a number",
    "string": "a string",
    "list": "a list such as `[a, b]`",
    "dict": "a mapping such as `{key: value}`",
    "model": "a mapping such as `{key: value}`",
}


def _message(group: list[dict], path: tuple, model) -> str:
    e = group[0]
    kind, err, got = e["type"], e.get("ctx", {}).get("error"), e.get("input")
    if isinstance(err, FieldError):
        return str(err)
    if kind == "extra_forbidden":
        allowed = _allowed_keys(e["loc"][:-1], model)
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


def _allowed_keys(loc: tuple, model) -> list[str]:
    """Field names (aliases where set) of the model class reached by following loc from KernelSpec."""
    import typing

    cls = model
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
            errors.append(
                ls.error(
                    ("kernel",),
                    f"kernel '{s.kernel}' is already defined at "
                    f"{other.file}:{other.located.line_of(('kernel',))}; rename one",
                )
            )
        first.setdefault(s.kernel, ls)
        if not plain_file_inside(root / "templates" / s.template / "kernel.cuh.j2", root / "templates"):
            known = sorted(p.parent.name for p in (root / "templates").glob("*/kernel.cuh.j2"))
            errors.append(
                ls.error(
                    ("template",),
                    f"templates/{s.template}/kernel.cuh.j2 does not exist"
                    f"{_suggest(s.template, known)}; known: {', '.join(known) or 'none'}",
                )
            )
        errors += _check_oracle(ls, root)
    return errors


def _check_oracle(ls: LoadedSpec, root: Path) -> list[SpecError]:
    """The oracle module must define what the generated tests call; read its AST, never import it."""
    s = ls.spec
    module = root.joinpath(*s.oracle.split(".")).with_suffix(".py")  # the model's grammar: k3gen.oracles.NAME
    if not plain_file_inside(module, root / "k3gen" / "oracles"):
        known = sorted(p.stem for p in (root / "k3gen" / "oracles").glob("*.py") if p.stem != "__init__")
        close = difflib.get_close_matches(s.oracle.split(".")[-1], known, n=1)
        hint = f" (did you mean 'k3gen.oracles.{close[0]}'?)" if close else ""
        return [
            ls.error(
                ("oracle",),
                f"module '{s.oracle}' not found (looked for "
                f"{module.relative_to(root).as_posix()}){hint}; "
                "give a dotted module path such as k3gen.oracles.NAME",
            )
        ]
    rel = module.relative_to(root).as_posix()
    try:
        tree = parsed_source(read_text(module, root / "k3gen" / "oracles", MAX_SOURCE_BYTES, rel), rel)
    except Refused as exc:
        return [ls.error(("oracle",), f"oracle {s.oracle}: {exc}")]
    except SyntaxError as exc:
        return [
            ls.error(
                ("oracle",),
                f"oracle {s.oracle} does not parse: {exc.msg} at "
                f"{module.relative_to(root).as_posix()}:{exc.lineno}; fix the module",
            )
        ]
    defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    needed = [(("oracle",), f, "define it") for f in ("reference", "make_args", "check")]
    needed += [
        (("tests", "cases", i), f"case_{c}", "define it or remove the entry") for i, c in enumerate(s.tests.cases)
    ]
    needed += [(("tests", "rejects", n), f"reject_{n}", "define it or remove the entry") for n in s.tests.rejects]
    return [
        ls.error(path, f"oracle {s.oracle} has no function {fn}(); {fix}")
        for path, fn, fix in needed
        if fn not in defined
    ]


def _dotted(path: tuple) -> str:
    return ".".join(str(p) for p in path) or "<root>"
