"""Oracle for situ_and_mul (docs/kernels.md §1): fp32 math, one rounding to the output dtype."""

from __future__ import annotations

import torch

from k3gen.oracles.vocabulary import default_dtype, tolerance, torch_dtype
from k3gen.runtime import K3UnsupportedError

# What this oracle can check, read by k3gen at load without importing it (k3gen/spec/meaning/oracle_support.py):
# "float" is every float dtype of k3gen.runtime.dtypes, so a new one on either axis needs no edit here.
SUPPORTED = {"dtypes": {"in": "float", "out": "float"}}
BETA, LINEAR_BETA = 4.0, 25.0
# The accurate fp32 path's distance from torch's fp32 math (a few fp32 ulps, and near zero).
MATH_RTOL, MATH_ATOL = 2e-5, 1e-5


def reference(variant: dict, x, beta, linear_beta=None, out=None):
    xf = x.float()
    d = xf.shape[1] // 2
    g, u = xf[:, :d], xf[:, d:]
    gate = beta * torch.tanh(g / beta) * torch.sigmoid(g)
    up = linear_beta * torch.tanh(u / linear_beta) if linear_beta is not None else u
    return (gate * up).to(torch_dtype(variant["out"]))


def make_args(variant: dict, dims: dict, layout: str, seed: int, device: str = "cuda") -> dict:
    """x [M, 2D] of the variant's input dtype; `strided` takes x as a column slice of a wider buffer."""
    m, d = dims["M"], dims["D"]
    gen = torch.Generator(device="cpu").manual_seed(seed)
    pad = 64 if layout == "strided" else 0  # a multiple of every vector width keeps rows aligned
    wide = (torch.randn(m, 2 * d + pad, generator=gen) * 6).to(torch_dtype(variant["in"])).to(device)
    x = wide[:, pad:] if pad else wide
    out = None if _is_default_out(variant) else torch.empty(m, d, dtype=torch_dtype(variant["out"]), device=device)
    return {"x": x, "beta": BETA, "linear_beta": LINEAR_BETA if variant["has_linear_beta"] else None, "out": out}


def _is_default_out(variant: dict) -> bool:
    """Whether the wrapper picks this cell's output dtype by itself (the spec's dtypes.defaults)."""
    return variant["out"] == default_dtype(variant, "out")


def check(got, want, variant: dict) -> None:
    """One output ulp off at most (fast-math tanh, or the rounding of a value a few fp32 ulps away);
    wide outputs within the accurate path's fp32 error."""
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(
        got.float(), want.float(), **tolerance(variant["out"], ulps=1, math_rtol=MATH_RTOL, math_atol=MATH_ATOL)
    )


def case_empty(op, variant):
    args = make_args(variant, {"M": 0, "D": 256}, "dense", 1)
    out = op(**args)
    assert out.shape == (0, 256)


def case_nan(op, variant):
    args = make_args(variant, {"M": 4, "D": 256}, "dense", 2)
    x = args["x"]
    x[0, 3] = float("nan")  # gate element: row 0, col 3 of out
    x[1, 256 + 5] = float("nan")  # up element: row 1, col 5 of out
    out = op(**args).float()
    assert out[0, 3].isnan() and out[1, 5].isnan()
    mask = torch.ones_like(out, dtype=torch.bool)
    mask[0, 3] = mask[1, 5] = False
    assert not out[mask].isnan().any()


def case_no_linear_beta(op, variant):
    """Without linear_beta, up passes through: the result equals the oracle with linear_beta=None."""
    args = make_args(variant, {"M": 16, "D": 512}, "dense", 3)
    args["linear_beta"] = None
    args["out"] = None if _is_default_out(variant) else args["out"]
    got = op(**args)
    check(got, reference(dict(variant, has_linear_beta=False), **args), variant)


def case_out_given(op, variant):
    """A caller's out= is written in full (poisoned with NaN first) and returned."""
    args = make_args(variant, {"M": 33, "D": 1024}, "strided", 4)
    out = torch.full((33, 1024), float("nan"), dtype=torch_dtype(variant["out"]), device="cuda")
    args["out"] = out
    got = op(**args)
    assert got.data_ptr() == out.data_ptr()
    check(got, reference(variant, **args), variant)


def reject_odd_width(variant):
    """D = 258 is not a multiple of any vector width (vec >= 4)."""
    args = make_args(variant, {"M": 2, "D": 258}, "dense", 5)
    return args


def reject_misaligned_stride(variant):
    args = make_args(variant, {"M": 2, "D": 256}, "dense", 6)
    wide = torch.zeros(2, 512 + 2, dtype=args["x"].dtype, device="cuda")
    args["x"] = wide[:, :512]  # row stride 514 elements: not a multiple of the vector width
    return args


def reject_misaligned_pointer(variant):
    args = make_args(variant, {"M": 2, "D": 256}, "dense", 7)
    flat = torch.zeros(2 * 512 + 8, dtype=args["x"].dtype, device="cuda")
    args["x"] = flat[2 : 2 + 2 * 512].view(2, 512)  # data pointer 2 elements past an aligned address
    return args


__all__ = ["K3UnsupportedError", "check", "make_args", "reference"]
