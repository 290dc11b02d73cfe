"""The spec's dtype vocabulary in torch terms, for every oracle: conversions, defaults, tolerances.

Everything comes from k3gen.runtime.dtypes.DTYPES (the table the specs are checked against) or from the
variant the generated tests pass (the spec's own defaults), so a dtype k3gen knows needs no oracle
edit. torch and the standard library only: the generated tests import it on GPU machines.
"""

from __future__ import annotations

import torch

from k3gen.runtime.dtypes import DTYPES

# Every dtype of kind "float": what `"float"` means in an oracle's SUPPORTED declaration.
FLOAT_DTYPES = [name for name, d in DTYPES.items() if d.kind == "float"]


def torch_dtype(name: str) -> torch.dtype:
    """torch.bfloat16 for "bf16", and so on for every dtype a spec may name."""
    return getattr(torch, DTYPES[name].torch)


def default_dtype(variant: dict, axis: str) -> str | None:
    """The dtype the wrapper picks for `axis` when the caller leaves it out (the spec's dtypes.defaults);
    None where there is none (a value only on excluded cells, which the generated tests also call)."""
    rule = variant["defaults"][axis]
    return rule["map"].get(variant[rule["from"]])


def tolerance(name: str, ulps: int = 1, math_rtol: float = 0.0, math_atol: float = 0.0) -> dict:
    """assert_close arguments for a result rounded once to `name` and at most `ulps` of its units off,
    on top of the oracle's own fp32 math error (math_rtol, math_atol): one ulp of x is at most
    eps * |x|, and near zero the dtype's smallest subnormal step."""
    info = torch.finfo(torch_dtype(name))
    return {"rtol": max(ulps * info.eps, math_rtol), "atol": max(ulps * info.tiny * info.eps, math_atol)}
