"""Edits of a spec or tuning table by field path, as its author would make them: the field's value
is replaced in place (comments and the rest of the file kept), whatever the committed text of it is.
Tests that edit a copy of specs/ use these and read what they expect from the file, so an edit a
user has made to the bundled specs never turns them red."""

from __future__ import annotations

from pathlib import Path

import yaml

FieldPath = tuple  # of str keys and int indices


def _node(text: str, path: FieldPath):
    node = yaml.compose(text)
    for step in path:
        if isinstance(node, yaml.MappingNode):
            node = next((v for k, v in node.value if k.value == step), None)
        else:
            node = node.value[step] if isinstance(step, int) and step < len(node.value) else None
        if node is None:
            raise KeyError(f"no field {'.'.join(map(str, path))}")
    return node


def get(file: Path, path: FieldPath):
    """The field's value (plain data)."""
    value = yaml.safe_load(Path(file).read_text())
    for step in path:
        value = value[step]
    return value


def flow(value) -> str:
    """value as one line of YAML."""
    text = yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=1 << 30).strip()
    return text.removesuffix("\n...").strip()


def put(file: Path, path: FieldPath, value) -> None:
    """Set the field at path (which must exist) to value, written in flow style where it stood."""
    file = Path(file)
    text = file.read_text()
    node = _node(text, path)
    start, end = node.start_mark.index, node.end_mark.index
    while end > start and text[end - 1] in " \n":  # a block collection's span runs to the next token
        end -= 1
    file.write_text(text[:start] + flow(value) + text[end:])


def add(file: Path, path: FieldPath, item, first: bool = False) -> list:
    """Append (or prepend) item to the list at path; return the new list."""
    items = list(get(file, path))
    items = [item, *items] if first else [*items, item]
    put(file, path, items)
    return items


def drop(file: Path, path: FieldPath, item) -> list:
    """Remove item from the list at path if it is there; return the new list."""
    items = [i for i in get(file, path) if i != item]
    put(file, path, items)
    return items
