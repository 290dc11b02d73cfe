"""Bad calls to the generated wrappers, checked without a GPU: torch's fake CUDA tensors carry
shapes, strides and dtypes but no data, so every check before the pointer gates runs here (the
pointer and stride gates have generated GPU tests). Each error names the argument and what is
allowed, and no call reaches the launch."""

from __future__ import annotations

import re

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from k3gen.oracles.vocabulary import torch_dtype
from k3gen.runtime import K3UnsupportedError
from k3gen.runtime.dtypes import DTYPES
from k3gen.spec.load import load_specs
from k3kernels import per_token_group_quant, route_quant_fused, route_topk, situ_and_mul

from support import ROOT


@pytest.fixture(autouse=True)
def never_launch(monkeypatch):
    for family in (situ_and_mul, per_token_group_quant, route_topk, route_quant_fused):
        monkeypatch.setattr(family.MODULE, "launch", lambda *a, **k: pytest.fail("a bad call reached the launch"))


def cuda(*shape, dtype=torch.bfloat16, stride=None):
    return torch.empty_strided(shape, stride or _dense(shape), dtype=dtype, device="cuda")


def _dense(shape):
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= n
    return tuple(reversed(strides))


# Facts of the bundled specs, read from them (never pinned here: adding a dtype, a param value or a
# runner to a spec must not turn these tests red).
SPECS = {ls.spec.kernel: ls.spec for ls in load_specs(ROOT)}
SITU, QUANT, TOPK, FUSED = (
    SPECS[n] for n in ("situ_and_mul", "per_token_group_quant", "route_topk", "route_quant_fused")
)


def generated(spec) -> str:
    axes = ", ".join(spec.dtypes.axes)
    return f"generated ({axes}): " + ", ".join("(" + ", ".join(c) + ")" for c in spec.dtypes.generated_cells())


def off_axis(spec, axis: str) -> str:
    """A dtype k3gen knows that the axis does not list."""
    return next(d for d in DTYPES if d not in spec.dtypes.axes[axis])


def first_exclusion(spec) -> tuple[dict, str]:
    cell = spec.dtypes.exclude[0]
    return {a: cell[a] for a in spec.dtypes.axes}, cell["reason"]


SITU_OFF = off_axis(SITU, "in")
SITU_EXCLUDED, SITU_WHY = first_exclusion(SITU)
TOPK_EXCLUDED, TOPK_WHY = first_exclusion(TOPK)
FUSED_OFF = off_axis(FUSED, "act")
GROUPS = QUANT.params["group_size"].values
FORMATS = QUANT.params["scale_format"].values
NOT_A_GROUP = next(g for g in (16, 8, 4, 2) if g not in GROUPS)
GROUP = QUANT.params["group_size"].default
ODD_K = GROUP + 16  # no group size divides it: the gate's (K % group_size) is not 0
E, K, MAX_M, H = (
    TOPK.constants["num_experts"],
    TOPK.constants["top_k"],
    FUSED.constants["max_tokens"],  # route_topk serves any M; the fused decode kernel keeps a gate
    FUSED.constants["hidden"],
)
FUSED_E, FUSED_K = FUSED.constants["num_experts"], FUSED.constants["top_k"]
fp32 = torch.float32

CASES = [
    # (id, call, message the error must contain)
    (
        "cpu tensor",
        lambda: situ_and_mul.situ_and_mul(torch.empty(4, 512), 4.0),
        "situ_and_mul: x must be on a CUDA device, got cpu",
    ),
    ("not a tensor", lambda: situ_and_mul.situ_and_mul([1, 2], 4.0), "x must be a torch.Tensor, got list"),
    (
        "wrong rank",
        lambda: situ_and_mul.situ_and_mul(cuda(4, 2, 256), 4.0),
        "x must have 2 dimensions, got shape [4, 2, 256]",
    ),
    (
        "odd width",
        lambda: situ_and_mul.situ_and_mul(cuda(4, 513), 4.0),
        "x must have shape [M, 2 * D] = [4, 512], got [4, 513]",
    ),
    (
        "dtype outside the matrix",
        lambda: situ_and_mul.situ_and_mul(cuda(4, 512, dtype=torch_dtype(SITU_OFF)), 4.0),
        f"(in, out) = ({SITU_OFF}, ?) has no default for the missing dtype; {generated(SITU)}",
    ),
    (
        "excluded cell",
        lambda: situ_and_mul.situ_and_mul(
            cuda(4, 512, dtype=torch_dtype(SITU_EXCLUDED["in"])),
            4.0,
            out=cuda(4, 256, dtype=torch_dtype(SITU_EXCLUDED["out"])),
        ),
        f"(in, out) = ({SITU_EXCLUDED['in']}, {SITU_EXCLUDED['out']}) not generated: {SITU_WHY}",
    ),
    (
        "non-contiguous last dim",
        lambda: situ_and_mul.situ_and_mul(cuda(4, 512, stride=(1, 4)), 4.0),
        "x must have a contiguous last dim (stride 1), got strides [1, 4]",
    ),
    (
        "out of the wrong shape",
        lambda: situ_and_mul.situ_and_mul(cuda(4, 512), 4.0, out=cuda(4, 255)),
        "out must have shape [M, D] = [4, 256], got [4, 255]",
    ),
    (
        "out not contiguous",
        lambda: situ_and_mul.situ_and_mul(cuda(4, 512), 4.0, out=cuda(4, 256, stride=(1, 4))),
        "out must be contiguous, got strides [1, 4]",
    ),
    (
        "out on another device type",
        lambda: situ_and_mul.situ_and_mul(cuda(4, 512), 4.0, out=torch.empty(4, 256)),
        "out must be on a CUDA device, got cpu",
    ),
    (
        "group size not generated",
        lambda: per_token_group_quant.per_token_group_quant(cuda(4, 512), group_size=NOT_A_GROUP),
        f"group_size={NOT_A_GROUP} is not generated; allowed: {', '.join(map(str, GROUPS))}",
    ),
    (
        "scale format not generated",
        lambda: per_token_group_quant.per_token_group_quant(cuda(4, 512), scale_format="ue8m0_col"),
        f"scale_format='ue8m0_col' is not generated; allowed: {', '.join(map(repr, FORMATS))}",
    ),
    (
        "K not a multiple of the group",
        lambda: per_token_group_quant.per_token_group_quant(cuda(4, ODD_K)),
        f"gate `K % group_size == 0` failed (K = {ODD_K}, group_size = {GROUP})",
    ),
    (
        "quant out of the wrong dtype",
        lambda: per_token_group_quant.per_token_group_quant(cuda(4, 256), out=cuda(4, 256, dtype=torch.int8)),
        "out must be fp8, got int8",
    ),
    (
        "column-major scales given row-major",
        lambda: per_token_group_quant.per_token_group_quant(
            cuda(4, 2 * GROUP), scale_format="fp32_col", out_scale=cuda(4, 2, dtype=fp32)
        ),
        "out_scale must be column-major (its .t() contiguous), got strides [2, 1]",
    ),
    (
        "fused input of odd width",
        lambda: per_token_group_quant.per_token_group_quant(cuda(4, 257), fuse_silu_and_mul=True),
        "x must have shape [M, 2 * K if fuse_silu_and_mul else K] = [4, 256], got [4, 257]",
    ),
    (
        "too many experts",
        lambda: route_topk.route_topk(cuda(4, E + 1), cuda(E + 1, dtype=fp32), K),
        f"scores must have shape [M, num_experts] = [4, {E}], got [4, {E + 1}]",
    ),
    (
        "excluded routing cell",
        lambda: route_topk.route_topk(
            cuda(4, E, dtype=torch_dtype(TOPK_EXCLUDED["score"])), cuda(E, dtype=torch_dtype(TOPK_EXCLUDED["bias"])), K
        ),
        f"(score, bias) = ({TOPK_EXCLUDED['score']}, {TOPK_EXCLUDED['bias']}) not generated: {TOPK_WHY}",
    ),
    (
        "wrong top-k",
        lambda: route_topk.route_topk(cuda(4, E), cuda(E, dtype=fp32), K + 1),
        f"gate `topk == top_k` failed (topk = {K + 1}): K is compiled in",
    ),
    (
        "too many tokens",
        lambda: route_quant_fused.route_quant_fused(
            cuda(MAX_M + 1, FUSED_E), cuda(FUSED_E, dtype=fp32), cuda(MAX_M + 1, H), FUSED_K
        ),
        f"gate `M <= max_tokens` failed (M = {MAX_M + 1})",
    ),
    (
        "expert groups",
        lambda: route_topk.route_topk(cuda(4, E), cuda(E, dtype=fp32), K, 8, 4),
        "gate `num_expert_group == 1 and topk_group == 1` failed (num_expert_group = 8, topk_group = 4)",
    ),
    (
        "ids of the wrong dtype",
        lambda: route_topk.route_topk(cuda(4, E), cuda(E, dtype=fp32), K, out_ids=cuda(4, K, dtype=torch.int64)),
        "out_ids must be i32, got int64",
    ),
    (
        "fused: activations of another batch",
        lambda: route_quant_fused.route_quant_fused(cuda(4, FUSED_E), cuda(FUSED_E, dtype=fp32), cuda(5, H), FUSED_K),
        f"x must have shape [M, hidden] = [4, {H}], got [5, {H}]",
    ),
    (
        "fused: activations of a dtype off the matrix",
        lambda: route_quant_fused.route_quant_fused(
            cuda(4, FUSED_E), cuda(FUSED_E, dtype=fp32), cuda(4, H, dtype=torch_dtype(FUSED_OFF)), FUSED_K
        ),
        f"(score, act) = (bf16, {FUSED_OFF}) is not in the dtype matrix; {generated(FUSED)}",
    ),
]


@pytest.mark.parametrize("call,message", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_call_is_refused_with_a_clear_error(call, message):
    with FakeTensorMode(allow_non_fake_inputs=True), pytest.raises(K3UnsupportedError, match=re.escape(message)):
        call()
