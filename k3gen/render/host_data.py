"""What a family's host wrapper holds as data (templates/common/host.py.j2), ready for k3gen.render.pyformat.

The wrapper is data over k3gen.runtime (checks, the FastPath of cached calls): the dtype matrix and
its exclusions, the variants and their switch keys, the Args layout, the build inputs, the tensor
arguments and the gates' texts. What stays code is the spec compiled: dims, shapes and gate
predicates (k3gen.spec.exprs), one straight line per spec entry.
"""

from __future__ import annotations

from k3gen.plan.family import FamilyPlan
from k3gen.render.cpp import ARG_CTYPES
from k3gen.render.pyformat import Name
from k3gen.render.python import torch_dtype


def host_module_data(p: FamilyPlan, pointers: list[str], outputs: list[str]) -> dict:
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
    return {
        "MATRIX": [tuple(cell) for cell in s.dtypes.generated_cells()],
        "EXCLUDED": {tuple(cell.values()): reason for cell, reason in p.excluded},
        "AXES": list(s.dtypes.axes),
        "defaults": defaults,
        "VARIANTS": variants,
        "ARGS_FIELDS": [(f.name, Name(f"ctypes.{ARG_CTYPES[f.kind][1]}")) for f in p.args],
        "SOURCES": {b: list(srcs) for b, srcs in p.sources.items()},
        "HEADERS": {b: list(hs) for b, hs in p.headers.items()},
        "ARCH_DEFINES": {arch: list(d) for arch, d in p.defines.items()},
        "TENSORS": tuple((t.name, t.rank, t.role) for t in p.tensors),
        "GATES": [(g.source, reason) for g, reason in p.gates],
        "POINTERS": pointers,
        "OUTPUT_SLOTS": tuple(pointers.index(o) for o in outputs),
    }
