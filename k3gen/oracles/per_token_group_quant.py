"""Oracle for per_token_group_quant (docs/kernels.md §2), bit-exact for every scale format.

amax ignores NaN (as fmaxf does) and is floored at 1e-10; s = amax * fp32(1/448); UE8M0 rounds s up
to a power of two from its bits; q = clamp(x / s, ±448) with NaN → +448, cast to e4m3 (nearest even).
With fuse_silu_and_mul the quantized value is g / (1 + exp(-g)) * up, each step rounded to fp32.
"""

from __future__ import annotations

import torch

from k3gen.oracles.vocabulary import torch_dtype
from k3gen.runtime import K3UnsupportedError

# What this oracle can check, read by k3gen at load without importing it (k3gen/spec/meaning/oracle_support.py):
# "float" is every float dtype of k3gen.runtime.dtypes, so a new one on an axis needs no edit here.
SUPPORTED = {"dtypes": {"in": "float"}, "params": {"scale_format": ["fp32_row", "fp32_col", "ue8m0"]}}
FP8_MAX = 448.0
EPS = 1e-10


def activation(x: torch.Tensor, fuse: bool) -> torch.Tensor:
    xf = x.float()
    if not fuse:
        return xf
    k = xf.shape[1] // 2
    g, up = xf[:, :k], xf[:, k:]
    return g / (1.0 + torch.exp(-g)) * up


def reference(
    variant: dict, x, group_size=128, scale_format="fp32_row", fuse_silu_and_mul=False, out=None, out_scale=None
):
    a = activation(x, fuse_silu_and_mul)
    m, k = a.shape
    groups = a.view(m, k // group_size, group_size)
    magnitude = groups.abs()
    amax = torch.where(magnitude.isnan(), torch.zeros_like(magnitude), magnitude).amax(-1)
    s = amax.clamp_min(EPS) * torch.tensor(1.0 / FP8_MAX, dtype=torch.float32, device=a.device)
    if scale_format == "ue8m0":
        bits = s.view(torch.int32)
        exponent = ((bits >> 23) & 0xFF) + ((bits & 0x7FFFFF) != 0).to(torch.int32)
        s = (exponent << 23).view(torch.float32)
    t = groups / s.unsqueeze(-1)
    t = torch.where(t.isnan(), torch.full_like(t, FP8_MAX), t.clamp(-FP8_MAX, FP8_MAX))
    q = t.view(m, k).to(torch.float8_e4m3fn)
    if scale_format == "ue8m0":
        n = exponent.shape[1]
        padded = torch.zeros(m, (n + 3) // 4 * 4, dtype=torch.uint8, device=a.device)
        padded[:, :n] = exponent.to(torch.uint8)
        scale = padded.view(torch.int32)  # little-endian: group g is byte g % 4 of word g / 4
    elif scale_format == "fp32_col":
        scale = s.t().contiguous().t()
    else:
        scale = s
    return q, scale


def make_args(variant: dict, dims: dict, layout: str, seed: int, device: str = "cuda") -> dict:
    m, k = dims["M"], dims["K"]
    width = 2 * k if variant["fuse_silu_and_mul"] else k
    gen = torch.Generator(device="cpu").manual_seed(seed)
    pad = 64 if layout == "strided" else 0
    # Per-row magnitudes spread over decades so scales differ between groups.
    mag = torch.exp2(torch.randint(-12, 12, (m, 1), generator=gen).float())
    wide = (torch.randn(m, width + pad, generator=gen) * mag).to(torch_dtype(variant["in"])).to(device)
    x = wide[:, pad:] if pad else wide
    return {
        "x": x,
        "group_size": variant["group_size"],
        "scale_format": variant["scale_format"],
        "fuse_silu_and_mul": variant["fuse_silu_and_mul"],
    }


def check(got, want, variant: dict) -> None:
    """Scale bits exact (with the layout's strides); q bytes exact, or one fp8 code off where the
    spec declares fast-math (fp32 scales: x * (1/s) rounds differently from x / s near a tie)."""
    (q, scale), (q_ref, scale_ref) = got, want
    assert q.dtype == torch.float8_e4m3fn and q.shape == q_ref.shape
    codes, ref_codes = q.view(torch.uint8).int(), q_ref.view(torch.uint8).int()
    if variant["fast_math"]:  # same sign, magnitudes (the low 7 bits are ordered) at most one apart
        off = ((codes & 0x7F) - (ref_codes & 0x7F)).abs() > 1
        off |= ((codes ^ ref_codes) & 0x80).bool() & ((codes | ref_codes) & 0x7F).bool()
    else:
        off = codes != ref_codes
    mismatch = off.nonzero()
    assert mismatch.numel() == 0, (
        f"{len(mismatch)} q codes differ, first at {mismatch[0].tolist()}: "
        f"{codes[tuple(mismatch[0])]} vs {ref_codes[tuple(mismatch[0])]}"
    )
    assert scale.dtype == scale_ref.dtype and scale.shape == scale_ref.shape
    strides = [[st for st, n in zip(t.stride(), t.shape) if n > 1] for t in (scale, scale_ref)]
    assert strides[0] == strides[1], f"scale strides {scale.stride()} != {scale_ref.stride()} (layout)"
    bits = scale.contiguous().view(torch.int32)
    ref_bits = scale_ref.contiguous().view(torch.int32)
    assert torch.equal(bits, ref_bits), f"{int((bits != ref_bits).sum())} scale words differ"


def _call_and_check(op, variant, args):
    check(op(**args), reference(variant, **args), variant)


def case_empty(op, variant):
    args = make_args(variant, {"M": 0, "K": 256}, "dense", 1)
    q, scale = op(**args)
    assert q.shape == (0, 256) and scale.shape[0] == 0


def case_zeros(op, variant):
    """All-zero groups: amax floors at eps, q is all zero codes."""
    args = make_args(variant, {"M": 3, "K": 512}, "dense", 2)
    args["x"].zero_()
    q, _ = op(**args)
    assert not q.view(torch.uint8).any()
    _call_and_check(op, variant, args)


def case_nan(op, variant):
    args = make_args(variant, {"M": 2, "K": 256}, "dense", 3)
    args["x"][0, 5] = float("nan")
    args["x"][1, 0:40] = float("nan")
    _call_and_check(op, variant, args)


def case_inf(op, variant):
    args = make_args(variant, {"M": 2, "K": 256}, "dense", 4)
    args["x"][0, 7] = float("inf")
    args["x"][1, 200] = float("-inf")
    _call_and_check(op, variant, args)


def case_fp8_limits(op, variant):
    """Values at ±448 and just above, where the scale puts them at the edge of the fp8 range."""
    args = make_args(variant, {"M": 4, "K": 256}, "dense", 5)
    x = args["x"]
    x[0, :8] = torch.tensor([448, -448, 449, -449, 464, -464, 480, 1e4])
    x[1].fill_(448)
    x[2, ::2] = 448.5
    _call_and_check(op, variant, args)


def case_subnormal(op, variant):
    """Subnormal inputs: with bf16/fp32 the group amax is below eps and takes the eps floor."""
    args = make_args(variant, {"M": 2, "K": 256}, "dense", 6)
    x = args["x"]
    x.mul_(0)
    tiny = torch.finfo(x.dtype).tiny
    x[0, :16] = tiny / 4
    x[1, :] = tiny * 3
    _call_and_check(op, variant, args)


def case_out_given(op, variant):
    """Caller-given outputs (poisoned first) are written in full and returned."""
    args = make_args(variant, {"M": 17, "K": 1024}, "strided", 7)
    q_ref, s_ref = reference(variant, **args)
    q = torch.full_like(q_ref.view(torch.uint8), 0x7F).view(torch.float8_e4m3fn)
    scale = torch.full_like(s_ref.contiguous(), -1)
    if variant["scale_format"] == "fp32_col":
        scale = scale.t().contiguous().t()
    got = op(**args, out=q, out_scale=scale)
    assert got[0].data_ptr() == q.data_ptr() and got[1].data_ptr() == scale.data_ptr()
    check(got, (q_ref, s_ref), variant)


def case_noncontiguous(op, variant):
    """A last dim with stride != 1 is refused before any launch."""
    args = make_args(variant, {"M": 4, "K": 256}, "dense", 8)
    args["x"] = args["x"].t().contiguous().t()
    try:
        op(**args)
    except K3UnsupportedError as exc:
        assert "contiguous last dim" in str(exc)
    else:
        raise AssertionError("a non-contiguous last dim was accepted")


def reject_k_not_multiple(variant):
    return make_args(variant, {"M": 2, "K": 144}, "dense", 9)  # 144 = 128 + 16: no group size divides it


def reject_misaligned_stride(variant):
    args = make_args(variant, {"M": 2, "K": 256}, "dense", 10)
    width = args["x"].shape[1]
    args["x"] = torch.zeros(2, width + 8, dtype=args["x"].dtype, device="cuda")[:, :width]
    return args


def reject_misaligned_pointer(variant):
    args = make_args(variant, {"M": 2, "K": 256}, "dense", 11)
    width = args["x"].shape[1]
    flat = torch.zeros(2 * width + 16, dtype=args["x"].dtype, device="cuda")
    args["x"] = flat[1 : 1 + 2 * width].view(2, width)  # one element past a 16-byte boundary
    return args
