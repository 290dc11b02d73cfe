"""Spec files → LoadedSpec: read (one reader, bounded), parsed line-aware, validated by the model
(k3gen.spec.model) and its rules across fields (k3gen.spec.rules), then checked for what they mean
(k3gen.spec.meaning: the template's limits, the oracle, totality, contracts). Every problem of a run
is a located SpecError, reported together.

The loader (pydantic) is imported on first use: the CLI's GPU half (`k3gen tune`) imports this
package for its error types on a machine that has torch and PyYAML alone."""

from k3gen.spec.errors import SpecError, SpecErrors

__all__ = ["LoadedSpec", "SpecError", "SpecErrors", "load_specs"]


def __getattr__(name: str):
    if name in ("LoadedSpec", "load_specs"):
        from k3gen.spec import load

        return getattr(load, name)
    raise AttributeError(f"module 'k3gen.spec' has no attribute {name!r}")
