"""Line-aware YAML loading: plain Python data plus a map from field path to 1-based line."""

from __future__ import annotations

import yaml

from k3gen.spec.bounds import MAX_YAML_DEPTH, MAX_YAML_NODES
from k3gen.spec.errors import SpecError

# Tags a spec may carry, explicitly or as YAML resolves plain scalars; anything else is refused.
PLAIN_TAGS = {f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null", "seq", "map")}

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


def parse_yaml(text: str, file: str, max_nodes: int = MAX_YAML_NODES) -> tuple[LocatedData | None, list[SpecError]]:
    """Parse one YAML document; on failure return the errors (bad syntax, duplicate keys).
    max_nodes: the most values it may hold (a spec's bound; a tuning table has more rows)."""
    node = _fast_node(text, file, max_nodes)
    if node is None:
        node, errors = _checked_node(text, file, max_nodes)
        if errors:
            return None, errors
    if node is None:
        return None, [
            SpecError(file, 1, "", "<yaml>", "the file is empty; write a mapping starting with `kernel: NAME`")
        ]
    lines: dict[Path, int] = {(): node.start_mark.line + 1}
    errors: list[SpecError] = []
    data = _build(node, (), lines, errors, file, yaml.SafeLoader(""))
    return LocatedData(data, lines), errors


def _fast_node(text: str, file: str, max_nodes: int):
    """The document's node through libyaml (a tenth of the pure-Python parser's time: every build
    parses every spec and table), or None where anything is amiss: the pure-Python path then says
    what, so an error reads the same with or without libyaml. Text the pure reader would refuse
    never takes this path."""
    if not yaml.__with_libyaml__ or not text.strip() or yaml.reader.Reader.NON_PRINTABLE.search(text):
        return None
    try:
        loader = yaml.CSafeLoader(text)
        try:
            if _refuse_unbounded(loader, file, max_nodes):
                return None
        finally:
            loader.dispose()
        loader = yaml.CSafeLoader(text)
        try:
            return loader.get_single_node()
        finally:
            loader.dispose()
    except (yaml.YAMLError, ValueError):
        return None


def _checked_node(text: str, file: str, max_nodes: int):
    """(node, []) or (None, the errors), through the pure-Python parser, whose marks and messages
    the errors quote."""
    try:
        loader = yaml.SafeLoader(text)
    except yaml.reader.ReaderError as exc:  # a control character YAML refuses to read at all
        return None, [_unreadable(exc, text, file)]
    try:
        refused = _refuse_unbounded(loader, file, max_nodes)
    except yaml.MarkedYAMLError as exc:
        return None, [_syntax_error(exc, file)]
    except yaml.reader.ReaderError as exc:
        return None, [_unreadable(exc, text, file)]
    finally:
        loader.dispose()
    if refused:
        return None, [refused]
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
    except yaml.MarkedYAMLError as exc:
        return None, [_syntax_error(exc, file)]
    except yaml.reader.ReaderError as exc:
        return None, [_unreadable(exc, text, file)]
    finally:
        loader.dispose()
    return node, []


def _refuse_unbounded(loader, file: str, max_nodes: int) -> SpecError | None:
    """Walk the event stream (no document is built yet) and refuse what could make the document
    unbounded or not plain data: anchors and aliases (an alias bomb expands a few bytes into
    gigabytes), nesting deeper than MAX_YAML_DEPTH, more than MAX_YAML_NODES nodes, foreign tags.
    The error names the field where it happens (the path is tracked as events go by)."""
    frames: list[list] = []  # per open collection: [path, is_mapping, next key or index, expecting a key]
    nodes = 0
    while True:
        event = loader.get_event()
        if event is None or isinstance(event, yaml.StreamEndEvent):
            return None
        if isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            frames.pop()
            _advance(frames)
            continue
        if not isinstance(event, (yaml.ScalarEvent, yaml.AliasEvent, yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            continue
        is_key = bool(frames) and frames[-1][1] and frames[-1][3]
        path = _path_of(frames)
        line = event.start_mark.line + 1

        def refuse(message: str, line=line, path=path) -> SpecError:  # this event's line and path, bound now
            return SpecError(file, line, "", _dotted(path) if path else "<yaml>", message)

        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            return refuse("YAML anchors and aliases (&name, *name) are not allowed in a spec; write the value out")
        tag = getattr(event, "tag", None)
        if tag and tag not in PLAIN_TAGS and tag not in ("!", "?"):
            return refuse(f"the tag {ascii(tag)[:80]} is not allowed; remove it and write a plain value")
        nodes += 1
        if nodes > max_nodes:
            name = "bounds.MAX_YAML_NODES" if max_nodes == MAX_YAML_NODES else "bounds.MAX_TABLE_NODES"
            return refuse(f"more than {max_nodes} values ({name}); such a file is short")
        if isinstance(event, yaml.ScalarEvent):
            if is_key:
                frames[-1][2], frames[-1][3] = event.value, False
            else:
                _advance(frames)
            continue
        if len(frames) >= MAX_YAML_DEPTH:
            return refuse(f"nesting deeper than {MAX_YAML_DEPTH} levels (bounds.MAX_YAML_DEPTH); a spec is shallow")
        frames.append([path, isinstance(event, yaml.MappingStartEvent), 0, True])


def _path_of(frames: list[list]) -> tuple:
    if not frames:
        return ()
    path, is_mapping, at, expecting_key = frames[-1]
    return path if (is_mapping and expecting_key) else path + (at,)


def _advance(frames: list[list]) -> None:
    """A value (scalar or collection) ended: a mapping now expects a key, a list its next item."""
    if not frames:
        return
    if frames[-1][1]:
        frames[-1][3] = True
    else:
        frames[-1][2] += 1


def _unreadable(exc: yaml.reader.ReaderError, text: str, file: str) -> SpecError:
    line = text[: exc.position].count("\n") + 1
    char = chr(exc.character) if isinstance(exc.character, int) else exc.character
    return SpecError(
        file,
        line,
        "",
        "<yaml>",
        f"not valid YAML: character {char!r} is not allowed; remove it (specs are plain UTF-8 text)",
    )


def _syntax_error(exc: yaml.MarkedYAMLError, file: str) -> SpecError:
    """Point at the construct left open (a flow `[`/`{`, a quote, a key) rather than where the parser
    gave up, which is often the next, innocent line; otherwise the problem line is the culprit."""
    problem_line = exc.problem_mark.line + 1 if exc.problem_mark else None
    context_line = exc.context_mark.line + 1 if exc.context_mark else None
    opened = bool(exc.context) and exc.context.startswith(("while parsing a flow", "while scanning a "))
    line = (context_line if opened else problem_line) or context_line or problem_line or 1
    parts = [(text, at) for text, at in ((exc.context, context_line), (exc.problem, problem_line)) if text]
    said = ", ".join(text + (f" (line {at})" if at and at != line else "") for text, at in parts)
    fix = "indent with spaces, not tabs" if "'\\t'" in (exc.problem or "") else "fix the syntax"
    return SpecError(file, line, "", "<yaml>", f"not valid YAML: {said}; {fix}")


def _build(node, path: Path, lines, errors, file, constructor):
    if isinstance(node, yaml.MappingNode):
        out = {}
        for key_node, value_node in node.value:
            key = constructor.construct_object(key_node)
            if not isinstance(key, (str, int, float, bool)):
                key = str(key)
            sub = path + (key,)
            if key in out:
                errors.append(
                    SpecError(
                        file,
                        key_node.start_mark.line + 1,
                        "",
                        _dotted(sub),
                        f"duplicate key '{key}' (first at line {lines[sub]}); keep one",
                    )
                )
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
    try:
        return constructor.construct_object(node)
    except (yaml.YAMLError, ValueError) as exc:  # an explicit tag (!!python/object, !!int abc) SafeLoader refuses
        errors.append(
            SpecError(
                file,
                node.start_mark.line + 1,
                "",
                _dotted(path),
                f"cannot read the value tagged {node.tag!r} ({_first_line(exc)}); "
                "remove the tag and write a plain value",
            )
        )
        return None


def _first_line(exc: Exception) -> str:
    return str(getattr(exc, "problem", None) or exc).splitlines()[0]


def _dotted(path: Path) -> str:
    return ".".join(str(p) for p in path) or "<root>"
