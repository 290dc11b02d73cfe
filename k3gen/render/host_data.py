"""What a family's host wrapper holds as data (templates/common/host.py.j2), ready for k3gen.render.pyformat.

The wrapper is data over k3gen.runtime (checks, the FastPath of cached calls): the dtype matrix and
its exclusions, the variants and their switch keys, the Args layout, the build inputs, the tensor
arguments and the gates' texts. What stays code is the spec compiled: dims, shapes and gate
predicates (k3gen.spec.exprs), one straight line per spec entry.
"""

from __future__ import annotations

from k3gen.plan.resolve import FamilyPlan
from k3gen.render.pyformat import Name
from k3gen.render.spellings import torch_dtype


def host_module_data(p: FamilyPlan, sources: dict, headers: dict, pointers: list[str], outputs: list[str]) -> dict:
    """Every data value host.py.j2 writes, by its name in the generated module."""
    s = p.spec
    defaults = {  # name -> (axis, the axis it derives from, table)
        f"DEFAULT_{axis.upper()}": (
            axis,
            d.from_,
            {Name(torch_dtype(a)): Name(torch_dtype(b)) for a, b in d.map.items()},
        )
        for axis, d in s.dtypes.defaults.items()
    }
    variants = {}
    for v in p.variants:
        parts = (*(Name(torch_dtype(d)) for d in v.dtypes.values()), *v.params.values(), *v.flags.values())
        variants[parts] = (Name(f"{v.key:#x}"), v.vec)
    ordered = sorted(s.signature.tensors.items(), key=lambda kv: kv[1].output)  # inputs first
    return {
        "MATRIX": [tuple(cell) for cell in s.dtypes.generated_cells()],
        "EXCLUDED": {tuple(cell.values()): reason for cell, reason in p.excluded},
        "AXES": list(s.dtypes.axes),
        "defaults": defaults,
        "VARIANTS": variants,
        "ARGS_FIELDS": [(f.name, Name(f"ctypes.{f.ctype}")) for f in p.args],
        "SOURCES": sources,
        "HEADERS": headers,
        "ARCH_DEFINES": {arch: p.arch_defines(arch) for b in p.backends for arch in p.archs(b)},
        "TENSORS": tuple(
            (n, len(t.shape), "output" if t.output else "optional" if t.optional else "input") for n, t in ordered
        ),
        "GATES": [(g.source, reason) for g, reason in p.gates],
        "POINTERS": pointers,
        "OUTPUT_SLOTS": tuple(pointers.index(o) for o in outputs),
    }
