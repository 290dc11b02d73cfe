"""What each kind of spec expression may read (k3gen.spec.exprs): one scope per place an expression lives.

Built from a validated spec (or the validated parts of one), so an unknown name is a located spec
error at load time, and the plan renders the very same resolution.
"""

from __future__ import annotations

from k3gen.spec.exprs import Name, Scope, constant
from k3gen.spec.model import call_flags

_SCALAR_TYPES = {"f32": "float", "i32": "int", "i64": "int"}


def _constants(s) -> dict[str, Name]:
    return {n: constant(v) for n, v in getattr(s, "constants", {}).items()}


def _int_params(s) -> dict[str, Name]:
    return {
        p: Name("int", p, p, positive=all(v > 0 for v in prm.values))
        for p, prm in getattr(s, "params", {}).items()
        if prm.is_int
    }


def _flags(s) -> dict[str, Name]:
    return {f: Name("bool", f, None) for f in call_flags(getattr(s, "flags", {}))}


def _ranks(s) -> dict[str, int]:
    return {n: len(t.shape) for n, t in s.signature.tensors.items()}


def gate_scope(s) -> Scope:
    """Gates: checked in the wrapper and again in C++, so only what the args struct carries."""
    names = {
        **_constants(s),
        **{d: Name("int", d, f"a.{d}") for d in s.signature.dims},
        **{n: Name(_SCALAR_TYPES[sc.type], n, f"a.{n}") for n, sc in s.signature.scalars.items()},
        **_int_params(s),
        "vec": Name("int", "vec", "vec", positive=True),
    }
    return Scope(
        names,
        tensors=_ranks(s),
        cpp=True,
        want="bool",
        strided=frozenset(n for n, t in s.signature.tensors.items() if t.layout == "rows"),
    )


def dim_scope(s, before: list[str]) -> Scope:
    """A dim: read from the inputs' shapes and strides, the params and flags, and the dims before it."""
    names = {**_constants(s), **_int_params(s), **_flags(s), **{d: Name("int", d, None) for d in before}}
    inputs = {n: r for n, r in _ranks(s).items() if not s.signature.tensors[n].output}
    return Scope(names, tensors=inputs, want="int")


def shape_scope(s) -> Scope:
    """A tensor dimension: over dims, params, flags and constants."""
    names = {**_constants(s), **_int_params(s), **_flags(s), **{d: Name("int", d, None) for d in s.signature.dims}}
    return Scope(names, want="int")


def select_scope(s) -> Scope:
    """A flag's select: which optional arguments were given, params and constants."""
    optional = [n for n, t in s.signature.tensors.items() if t.optional and not t.output]
    optional += [n for n, sc in s.signature.scalars.items() if sc.optional]
    return Scope({**_constants(s), **_int_params(s)}, optional=frozenset(optional), want="bool")
