"""Oracle for route_quant_fused (docs/kernels.md §4): route_topk's oracle on the scores and
per_token_group_quant's (UE8M0, groups of constants.group_size) on x, both bit-exact."""

from __future__ import annotations

import torch

from k3gen.oracles import per_token_group_quant as quant
from k3gen.oracles import route_topk as routing
from k3gen.oracles.vocabulary import torch_dtype

# What this oracle can check, read by k3gen at load without importing it (k3gen/spec/meaning/oracle_support.py):
# "float" is every float dtype of k3gen.runtime.dtypes, so a new one on an axis needs no edit here.
SUPPORTED = {"dtypes": {"score": "float", "act": "float"}}


def _quant_variant(variant: dict) -> dict:
    return {
        "in": variant["act"],
        "group_size": variant["constants"]["group_size"],
        "scale_format": "ue8m0",
        "fuse_silu_and_mul": False,
        "fast_math": False,
    }


def _route_variant(variant: dict) -> dict:
    return {
        "score": variant["score"],
        "bias": "fp32",
        "constants": variant["constants"],
        "tie_order": variant.get("tie_order", "lowest_id"),
        "sigmoid": variant.get("sigmoid", "expf"),
    }


def reference(
    variant: dict,
    scores,
    bias,
    x,
    topk,
    num_expert_group=1,
    topk_group=1,
    renormalize=1,
    routed_scaling_factor=1.0,
    **outputs,
):
    w, ids = routing.reference(
        _route_variant(variant), scores, bias, topk, num_expert_group, topk_group, renormalize, routed_scaling_factor
    )
    q, scale = quant.reference(_quant_variant(variant), x, variant["constants"]["group_size"], "ue8m0")
    return w, ids, q, scale


def make_args(variant: dict, dims: dict, layout: str, seed: int, device: str = "cuda") -> dict:
    args = routing.make_args(_route_variant(variant), dims, layout, seed, device)
    c = variant["constants"]
    gen = torch.Generator(device="cpu").manual_seed(seed + 1)
    pad = 64 if layout == "strided" else 0
    wide = torch.randn(dims["M"], c["hidden"] + pad, generator=gen).to(torch_dtype(variant["act"])).to(device)
    args["x"] = wide[:, pad:] if pad else wide
    return args


def check(got, want, variant: dict) -> None:
    routing.check(got[:2], want[:2], _route_variant(variant))
    quant.check(got[2:], want[2:], _quant_variant(variant))


def case_matches_separate(op, variant):
    """Bit-identical to route_topk and per_token_group_quant run separately."""
    from k3kernels import per_token_group_quant, route_topk

    args = make_args(variant, {"M": 64}, "strided", 21)
    fused = op(**args)
    w, ids = route_topk.route_topk(
        args["scores"],
        args["bias"],
        args["topk"],
        renormalize=args["renormalize"],
        routed_scaling_factor=args["routed_scaling_factor"],
    )
    q, scale = per_token_group_quant.per_token_group_quant(
        args["x"], group_size=variant["constants"]["group_size"], scale_format="ue8m0"
    )
    for a, b in zip(fused, (w, ids, q, scale)):
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def case_nan(op, variant):
    args = make_args(variant, {"M": 4}, "dense", 22)
    args["scores"][0, :10] = float("nan")
    args["x"][1, 3] = float("nan")
    check(op(**args), reference(variant, **args), variant)


def case_graph_replay(op, variant):
    args = make_args(variant, {"M": 8}, "dense", 23)
    outs = op(**args)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    names = ("out_weights", "out_ids", "out_q", "out_scale")
    with torch.cuda.graph(graph):
        op(**args, **dict(zip(names, outs)))
    fresh = make_args(variant, {"M": 8}, "dense", 24)
    args["scores"].copy_(fresh["scores"])
    args["x"].copy_(fresh["x"])
    graph.replay()
    torch.cuda.synchronize()
    check(outs, reference(variant, **args), variant)


def reject_wrong_topk(variant):
    args = make_args(variant, {"M": 2}, "dense", 25)
    args["topk"] += 1
    return args


def reject_too_many_tokens(variant):
    return make_args(variant, {"M": variant["constants"]["max_tokens"] + 1}, "dense", 26)


def reject_misaligned_x(variant):
    args = make_args(variant, {"M": 2}, "dense", 27)
    h = variant["constants"]["hidden"]
    args["x"] = torch.zeros(2, h + 8, dtype=args["x"].dtype, device="cuda")[:, :h]
    return args
