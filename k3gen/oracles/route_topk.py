"""Oracle for route_topk (KERNELS.md §3), bit-exact.

s = sigmoid(float(score)); rank = s + float(bias) in fp32. Experts are ordered by rank descending,
NaN below every number (-inf included), -0.0 == +0.0, ties by the spec's tie order (lowest id, or a
table). Weights are s; with renormalize they are divided by their sum (added in rank order, one fp32
add at a time) when that sum is positive; then multiplied by routed_scaling_factor.
"""
from __future__ import annotations

import torch

from k3gen.oracles.vocabulary import torch_dtype

# What this oracle can check, read by k3gen at load without importing it (k3gen/oracle_support.py):
# "float" is every float dtype of k3gen.dtypes, so a new one on an axis needs no edit here.
SUPPORTED = {"dtypes": {"score": "float", "bias": "float"}}


def rank_keys(rank: torch.Tensor) -> torch.Tensor:
    """Order-preserving int64 keys: NaN lowest, -0.0 == +0.0 (the kernel's 32-bit key, widened)."""
    r = torch.where(rank == 0, torch.zeros_like(rank), rank)
    bits = r.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    key = torch.where(bits >= 0x80000000, 0xFFFFFFFF - bits, bits | 0x80000000)
    return torch.where(rank.isnan(), torch.zeros_like(key), key)


def tie_rank(variant: dict, e: int, device) -> torch.Tensor:
    table = variant.get("tie_order", "lowest_id")
    if table == "lowest_id":
        return torch.arange(e, device=device)
    rank = torch.empty(e, dtype=torch.int64)
    rank[torch.tensor(table)] = torch.arange(e)
    return rank.to(device)


def reference(variant: dict, scores, bias, topk, num_expert_group=1, topk_group=1, renormalize=1,
              routed_scaling_factor=1.0, out_weights=None, out_ids=None):
    s = torch.sigmoid(scores.float())
    rank = s + bias.float()
    m, e = rank.shape
    composite = (rank_keys(rank) << 16) | (0xFFFF - tie_rank(variant, e, rank.device))
    order = composite.argsort(dim=1, descending=True)[:, :topk]
    w = s.gather(1, order)
    if renormalize:
        total = torch.zeros(m, dtype=torch.float32, device=w.device)
        for j in range(topk):  # rank order, one fp32 add at a time
            total = total + w[:, j]
        w = w / torch.where(total > 0, total, torch.ones_like(total)).unsqueeze(1)
    w = w * torch.tensor(routed_scaling_factor, dtype=torch.float32)
    return w, order.to(torch.int32)


def make_args(variant: dict, dims: dict, layout: str, seed: int, device: str = "cuda") -> dict:
    c = variant["constants"]
    m, e = dims["M"], c["num_experts"]
    gen = torch.Generator(device="cpu").manual_seed(seed)
    pad = 32 if layout == "strided" else 0
    wide = (torch.randn(m, e + pad, generator=gen) * 3).to(torch_dtype(variant["score"])).to(device)
    bias = (torch.randn(e, generator=gen) * 0.1).to(torch_dtype(variant["bias"])).to(device)
    return {"scores": wide[:, pad:] if pad else wide, "bias": bias, "topk": c["top_k"], "renormalize": 1,
            "routed_scaling_factor": 2.5}


def check(got, want, variant: dict) -> None:
    (w, ids), (w_ref, ids_ref) = got, want
    assert ids.dtype == torch.int32 and w.dtype == torch.float32 and ids.shape == ids_ref.shape
    bad = (ids != ids_ref).any(dim=1).nonzero()
    assert bad.numel() == 0, f"{bad.numel()} rows pick other experts; first row {bad[0].item()}: " \
        f"{ids[bad[0].item()].tolist()} vs {ids_ref[bad[0].item()].tolist()}"
    same = (w.view(torch.int32) == w_ref.view(torch.int32)) | (w.isnan() & w_ref.isnan())
    assert same.all(), f"{int((~same).sum())} weights differ in their bits"


def _run(op, variant, args):
    got = op(**args)
    check(got, reference(variant, **args), variant)
    return got


def _args(variant, m=16, seed=0):
    return make_args(variant, {"M": m}, "dense", seed)


def case_all_equal(op, variant):
    """Every score equal: the tie order alone decides, and the test pins it."""
    args = _args(variant, 4, 1)
    args["scores"].fill_(0.5)
    args["bias"].fill_(0.0)
    w, ids = _run(op, variant, args)
    k = variant["constants"]["top_k"]
    table = variant.get("tie_order", "lowest_id")
    expected = list(range(k)) if table == "lowest_id" else list(table[:k])
    assert ids[0].tolist() == expected, f"tie order: got {ids[0].tolist()}, spec says {expected}"


def case_ties_at_k(op, variant):
    """A run of equal rank values straddles the K-th place."""
    args = _args(variant, 8, 2)
    k = variant["constants"]["top_k"]
    args["scores"][:, : k - 3] = 4.0
    args["scores"][:, 40:50] = 3.0  # ten experts tie for the last three places
    args["bias"].fill_(0.0)
    _run(op, variant, args)


def case_nan(op, variant):
    """NaN scores never win while numbers are left; an all-NaN row still returns K experts."""
    args = _args(variant, 3, 3)
    args["scores"][0, :100] = float("nan")
    args["scores"][1, :] = float("nan")
    _, ids = _run(op, variant, args)
    assert (ids[0] >= 100).all()


def case_signed_zero(op, variant):
    """Scores of -0.0 and +0.0 (and biases of -0.0/+0.0) rank equal: the tie order decides."""
    args = _args(variant, 2, 4)
    args["scores"].zero_()
    args["scores"][:, ::2] = -0.0
    args["bias"].zero_()
    args["bias"][1::3] = -0.0
    _, ids = _run(op, variant, args)
    table = variant.get("tie_order", "lowest_id")
    k = variant["constants"]["top_k"]
    assert ids[0].tolist() == (list(range(k)) if table == "lowest_id" else list(table[:k]))


def case_huge_negative_bias(op, variant):
    args = _args(variant, 4, 5)
    args["bias"][: variant["constants"]["num_experts"] // 2] = -1e30
    _, ids = _run(op, variant, args)
    assert (ids >= variant["constants"]["num_experts"] // 2).all()


def case_saturated(op, variant):
    """Scores so large that sigmoid is exactly 1.0: the bias alone orders them."""
    args = _args(variant, 4, 6)
    args["scores"].fill_(100.0)
    _run(op, variant, args)


def case_renormalize_off(op, variant):
    args = _args(variant, 16, 7)
    args["renormalize"] = 0
    _run(op, variant, args)


def case_nonpositive_sum(op, variant):
    """NaN weights make the sum not positive: weights are divided by 1, not by the sum."""
    args = _args(variant, 2, 8)
    args["scores"].fill_(float("nan"))
    _run(op, variant, args)


def case_scaling_factor(op, variant):
    args = _args(variant, 8, 9)
    args["routed_scaling_factor"] = 0.37
    _run(op, variant, args)


def case_graph_replay(op, variant):
    """Captured in a CUDA graph, replays give the eager result on new inputs."""
    args = _args(variant, 32, 10)
    w, ids = op(**args)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        op(**args, out_weights=w, out_ids=ids)
    for seed in (11, 12):
        fresh = _args(variant, 32, seed)
        args["scores"].copy_(fresh["scores"])
        graph.replay()
        torch.cuda.synchronize()
        check((w, ids), reference(variant, **args), variant)


def case_reproducible(op, variant):
    """Ten runs give the same bits."""
    args = _args(variant, 255, 13)
    first = op(**args)
    for _ in range(10):
        again = op(**args)
        assert torch.equal(again[1], first[1]) and torch.equal(again[0].view(torch.int32), first[0].view(torch.int32))


def reject_wrong_topk(variant):
    args = _args(variant, 4, 14)
    args["topk"] = variant["constants"]["top_k"] + 1
    return args


def reject_too_many_tokens(variant):
    return make_args(variant, {"M": variant["constants"]["max_tokens"] + 1}, "dense", 15)


def reject_expert_groups(variant):
    args = _args(variant, 4, 16)
    args["num_expert_group"] = 8
    return args
