"""`k3gen new NAME`: a new family's spec, kernel template (with its limits) and oracle, from templates/scaffold/.

The scaffold is a minimal real family (a row copy over bf16/fp32 for sm_90a) that `k3gen build`
accepts and whose kernel compiles; its oracle's reference() raises NotImplementedError, so the
generated tests are red, saying what to fill in, until someone writes the contract.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import jinja2

from k3gen.runtime.files import Refused, check_inside, read_text, write_inside
from k3gen.spec.bounds import MAX_SPEC_BYTES
from k3gen.spec.grammar import name_problem

# Scaffold sources are templates of templates: the kernel template keeps its own {{ }} for
# `k3gen build`, so the scaffold substitutes with [[ ]] and [% %] instead.
SCAFFOLD_DELIMITERS = dict(
    variable_start_string="[[",
    variable_end_string="]]",
    block_start_string="[%",
    block_end_string="%]",
    comment_start_string="[#",
    comment_end_string="#]",
)
# (template under templates/scaffold/, file it becomes, relative to the project root)
FILES = [
    ("spec.yaml.j2", "specs/{name}.yaml"),
    ("kernel.cuh.j2.j2", "templates/{name}/kernel.cuh.j2"),
    ("oracle.py.j2", "k3gen/oracles/{name}.py"),
    ("limits.yaml.j2", "templates/{name}/limits.yaml"),
]
# Names taken by something else: template folders, the csrc/ folder and the package's own attribute.
RESERVED = {"common", "scaffold", "csrc", "import_module"}


class ScaffoldError(ValueError):
    """The name cannot be scaffolded; the message says why and what to do."""


def check_name(root: Path, name: str) -> None:
    """Refuse a name that is not a valid family name, or that a spec, template or oracle already uses."""
    said = name_problem(name)
    if said:  # the spec's own rule for kernel names, so a scaffold always loads
        raise ScaffoldError(f"k3gen new: {said}; e.g. my_kernel")
    if name in RESERVED:
        raise ScaffoldError(f"k3gen new: '{name}' is reserved ({', '.join(sorted(RESERVED))}); pick another name")
    # lexists: a dangling link is taken too (writing through it would leave the project)
    taken = [rel.format(name=name) for _, rel in FILES if os.path.lexists(root / rel.format(name=name))]
    if os.path.lexists(root / "templates" / name) and f"templates/{name}/kernel.cuh.j2" not in taken:
        taken.append(f"templates/{name}/")
    declared = re.compile(rf"^kernel:\s*[\"']?{re.escape(name)}[\"']?\s*(#.*)?$", re.M)
    taken += [
        f"specs/{f.name} (kernel: {name})"
        for f in sorted((root / "specs").glob("*.yaml"))
        if f.name != f"{name}.yaml" and declared.search(_text(root, f))
    ]
    if taken:
        raise ScaffoldError(
            f"k3gen new: family '{name}' already exists: {', '.join(taken)}; pick another name, or edit that spec"
        )


def _text(root: Path, spec: Path) -> str:
    try:
        return read_text(spec, root, MAX_SPEC_BYTES)
    except Refused:
        return ""  # not a spec k3gen reads (`k3gen validate` says why); it declares nothing


def render_scaffold(root: Path, name: str) -> dict[str, str]:
    """{path relative to the project: text} of the new family's files."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(root / "templates" / "scaffold")),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
        **SCAFFOLD_DELIMITERS,
    )
    return {rel.format(name=name): env.get_template(src).render(name=name) for src, rel in FILES}


def scaffold(root: Path, name: str) -> list[str]:
    """Write the new family's files; return their paths (spec, kernel, oracle, the kernel's limits)."""
    root = Path(root)
    check_name(root, name)
    files = render_scaffold(root, name)
    try:  # the one writer: inside the project, never through a link; every path checked before any write
        for rel in files:
            check_inside(root / rel, root, rel)
        for rel, text in files.items():
            write_inside(root / rel, root, text, shown=rel)
    except Refused as exc:
        raise ScaffoldError(f"k3gen new: {exc}; write the family's files inside the project") from None
    return list(files)
