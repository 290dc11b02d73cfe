"""Spec files → LoadedSpec: read (one reader, bounded), parsed line-aware, validated by the model
(k3gen.spec.model) and its rules across fields (k3gen.spec.rules), then checked for what they mean
(k3gen.spec.meaning: the template's limits, the oracle, totality, contracts). Every problem of a run
is a located SpecError, reported together."""

from k3gen.spec.errors import SpecError, SpecErrors
from k3gen.spec.load import LoadedSpec, load_specs

__all__ = ["LoadedSpec", "SpecError", "SpecErrors", "load_specs"]
