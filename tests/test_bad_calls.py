"""Bad calls to the generated wrappers, checked without a GPU: torch's fake CUDA tensors carry
shapes, strides and dtypes but no data, so every check before the pointer gates runs here (the
pointer and stride gates have generated GPU tests). Each error names the argument and what is
allowed, and no call reaches the launch."""
from __future__ import annotations

import re

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from k3gen.runtime import K3UnsupportedError
from k3kernels import per_token_group_quant, route_quant_fused, route_topk, situ_and_mul


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


CASES = [
    # (id, call, message the error must contain)
    ("cpu tensor", lambda: situ_and_mul.situ_and_mul(torch.empty(4, 512), 4.0),
     "situ_and_mul: x must be on a CUDA device, got cpu"),
    ("not a tensor", lambda: situ_and_mul.situ_and_mul([1, 2], 4.0), "x must be a torch.Tensor, got list"),
    ("wrong rank", lambda: situ_and_mul.situ_and_mul(cuda(4, 2, 256), 4.0),
     "x must have 2 dimensions, got shape [4, 2, 256]"),
    ("odd width", lambda: situ_and_mul.situ_and_mul(cuda(4, 513), 4.0),
     "x must have shape [M, 2 * D] = [4, 512], got [4, 513]"),
    ("dtype outside the matrix", lambda: situ_and_mul.situ_and_mul(cuda(4, 512, dtype=torch.int32), 4.0),
     "(in, out) = (i32, ?) has no default for the missing dtype; generated (in, out): (bf16, bf16), (fp16, fp16), "
     "(fp32, bf16), (fp32, fp32)"),
    ("excluded cell", lambda: situ_and_mul.situ_and_mul(cuda(4, 512), 4.0, out=cuda(4, 256, dtype=torch.float16)),
     "(in, out) = (bf16, fp16) not generated: no consumer mixes half formats"),
    ("non-contiguous last dim", lambda: situ_and_mul.situ_and_mul(cuda(4, 512, stride=(1, 4)), 4.0),
     "x must have a contiguous last dim (stride 1), got strides [1, 4]"),
    ("out of the wrong shape", lambda: situ_and_mul.situ_and_mul(cuda(4, 512), 4.0, out=cuda(4, 255)),
     "out must have shape [M, D] = [4, 256], got [4, 255]"),
    ("out not contiguous", lambda: situ_and_mul.situ_and_mul(cuda(4, 512), 4.0, out=cuda(4, 256, stride=(1, 4))),
     "out must be contiguous, got strides [1, 4]"),
    ("out on another device type", lambda: situ_and_mul.situ_and_mul(cuda(4, 512), 4.0, out=torch.empty(4, 256)),
     "out must be on a CUDA device, got cpu"),
    ("group size not generated", lambda: per_token_group_quant.per_token_group_quant(cuda(4, 512), group_size=16),
     "group_size=16 is not generated; allowed: 32, 64, 128"),
    ("scale format not generated",
     lambda: per_token_group_quant.per_token_group_quant(cuda(4, 512), scale_format="ue8m0_col"),
     "scale_format='ue8m0_col' is not generated; allowed: 'fp32_row', 'fp32_col', 'ue8m0'"),
    ("K not a multiple of the group", lambda: per_token_group_quant.per_token_group_quant(cuda(4, 144)),
     "gate `K % group_size == 0` failed (K = 144, group_size = 128)"),
    ("quant out of the wrong dtype",
     lambda: per_token_group_quant.per_token_group_quant(cuda(4, 256), out=cuda(4, 256, dtype=torch.int8)),
     "out must be fp8, got int8"),
    ("column-major scales given row-major",
     lambda: per_token_group_quant.per_token_group_quant(cuda(4, 256), scale_format="fp32_col",
                                                         out_scale=cuda(4, 2, dtype=torch.float32)),
     "out_scale must be column-major (its .t() contiguous), got strides [2, 1]"),
    ("fused input of odd width",
     lambda: per_token_group_quant.per_token_group_quant(cuda(4, 257), fuse_silu_and_mul=True),
     "x must have shape [M, 2 * K if fuse_silu_and_mul else K] = [4, 256], got [4, 257]"),
    ("too many experts", lambda: route_topk.route_topk(cuda(4, 897), cuda(897, dtype=torch.float32), 16),
     "scores must have shape [M, num_experts] = [4, 896], got [4, 897]"),
    ("fp32 scores with a bf16 bias",
     lambda: route_topk.route_topk(cuda(4, 896, dtype=torch.float32), cuda(896), 16),
     "(score, bias) = (fp32, bf16) not generated: the bias is fp32 or the score dtype"),
    ("wrong top-k", lambda: route_topk.route_topk(cuda(4, 896), cuda(896, dtype=torch.float32), 8),
     "gate `topk == top_k` failed (topk = 8): K is compiled in"),
    ("too many tokens", lambda: route_topk.route_topk(cuda(1025, 896), cuda(896, dtype=torch.float32), 16),
     "gate `M <= max_tokens` failed (M = 1025)"),
    ("expert groups", lambda: route_topk.route_topk(cuda(4, 896), cuda(896, dtype=torch.float32), 16, 8, 4),
     "gate `num_expert_group == 1 and topk_group == 1` failed (num_expert_group = 8, topk_group = 4)"),
    ("ids of the wrong dtype",
     lambda: route_topk.route_topk(cuda(4, 896), cuda(896, dtype=torch.float32), 16,
                                   out_ids=cuda(4, 16, dtype=torch.int64)),
     "out_ids must be i32, got int64"),
    ("fused: activations of another batch",
     lambda: route_quant_fused.route_quant_fused(cuda(4, 896), cuda(896, dtype=torch.float32), cuda(5, 3584), 16),
     "x must have shape [M, hidden] = [4, 3584], got [5, 3584]"),
    ("fused: fp16 activations", lambda: route_quant_fused.route_quant_fused(
        cuda(4, 896), cuda(896, dtype=torch.float32), cuda(4, 3584, dtype=torch.float16), 16),
     "(score, act) = (bf16, fp16) is not in the dtype matrix; generated (score, act): (bf16, bf16), (bf16, fp32), "
     "(fp32, bf16), (fp32, fp32)"),
]


@pytest.mark.parametrize("call,message", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_call_is_refused_with_a_clear_error(call, message):
    with FakeTensorMode(allow_non_fake_inputs=True):
        with pytest.raises(K3UnsupportedError, match=re.escape(message)):
            call()
