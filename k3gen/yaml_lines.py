"""Line-aware YAML loading: plain Python data plus a map from field path to 1-based line."""
from __future__ import annotations

import yaml

from .errors import SpecError

Path = tuple  # of str keys and int indices


class LocatedData:
    """The parsed document and where each path came from."""

    def __init__(self, data, lines: dict[Path, int]):
        self.data = data
        self.lines = lines

    def line_of(self, path: Path) -> int:
        """Line of the deepest known prefix of `path` (a missing key points at its parent)."""
        path = tuple(path)
        while path and path not in self.lines:
            path = path[:-1]
        return self.lines.get(path, 1)


def parse_yaml(text: str, file: str) -> tuple[LocatedData | None, list[SpecError]]:
    """Parse one YAML document; on failure return the errors (bad syntax, duplicate keys)."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 1
        problem = " ".join(p for p in (exc.context, exc.problem) if p)
        return None, [SpecError(file, line, "", "<yaml>", f"not valid YAML: {problem}; fix the syntax")]
    finally:
        loader.dispose()
    if node is None:
        return None, [SpecError(file, 1, "", "<yaml>", "the file is empty; write a mapping starting with `kernel: NAME`")]
    lines: dict[Path, int] = {(): node.start_mark.line + 1}
    errors: list[SpecError] = []
    data = _build(node, (), lines, errors, file, yaml.SafeLoader(""))
    return LocatedData(data, lines), errors


def _build(node, path: Path, lines, errors, file, constructor):
    if isinstance(node, yaml.MappingNode):
        out = {}
        for key_node, value_node in node.value:
            key = constructor.construct_object(key_node)
            if not isinstance(key, (str, int, float, bool)):
                key = str(key)
            sub = path + (key,)
            if key in out:
                errors.append(SpecError(file, key_node.start_mark.line + 1, "", _dotted(sub),
                                        f"duplicate key '{key}' (first at line {lines[sub]}); keep one"))
                continue
            lines[sub] = key_node.start_mark.line + 1
            out[key] = _build(value_node, sub, lines, errors, file, constructor)
        return out
    if isinstance(node, yaml.SequenceNode):
        items = []
        for i, item in enumerate(node.value):
            lines[path + (i,)] = item.start_mark.line + 1
            items.append(_build(item, path + (i,), lines, errors, file, constructor))
        return items
    return constructor.construct_object(node)


def _dotted(path: Path) -> str:
    return ".".join(str(p) for p in path) or "<root>"
