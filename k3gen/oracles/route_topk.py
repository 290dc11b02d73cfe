"""Oracle for route_topk (docs/kernels.md §3), bit-exact.

s = sigmoid(float(score)); rank = s + float(bias) in fp32. Experts are ordered by rank descending,
NaN below every number (-inf included), -0.0 == +0.0, ties by the spec's tie order (lowest id, a
table, or aiter's wave64 rule). Weights are s; with renormalize they are divided by their sum (added
in rank order, one fp32 add at a time) when that sum is positive; then multiplied by
routed_scaling_factor. The sigmoid is torch.sigmoid (`expf`) or aiter's exp2 formula (`exp2`).

A variant names the tie order and sigmoid of the backend under test (the generated test reads them
from the spec per backend). aiter's rule is computed here from this module's own copy of aiter's
lane table and its closed formula, never from k3gen's expansion, so a change on either side fails
the tests instead of drifting silently.
"""

from __future__ import annotations

import torch

from k3gen.oracles.vocabulary import torch_dtype

# What this oracle can check, read by k3gen at load without importing it (k3gen/spec/meaning/oracle_support.py):
# "float" is every float dtype of k3gen.runtime.dtypes, so a new one on an axis needs no edit here.
SUPPORTED = {"dtypes": {"score": "float", "bias": "float"}}

# aiter's wave64 traversal (issue 15): lane -> rank, experts 4 to a group. Copied on purpose.
AITER_LANE_RANK = [
    56,
    57,
    58,
    59,
    63,
    62,
    61,
    60,
    52,
    53,
    54,
    55,
    51,
    50,
    49,
    48,
    40,
    41,
    42,
    43,
    47,
    46,
    45,
    44,
    36,
    37,
    38,
    39,
    35,
    34,
    33,
    32,
    24,
    25,
    26,
    27,
    31,
    30,
    29,
    28,
    20,
    21,
    22,
    23,
    19,
    18,
    17,
    16,
    8,
    9,
    10,
    11,
    15,
    14,
    13,
    12,
    4,
    5,
    6,
    7,
    3,
    2,
    1,
    0,
]
AITER_EXPERTS_PER_GROUP = 4
LOG2E = 1.44269504088896340736


def rank_keys(rank: torch.Tensor) -> torch.Tensor:
    """Order-preserving int64 keys: NaN lowest, -0.0 == +0.0 (the kernel's 32-bit key, widened)."""
    r = torch.where(rank == 0, torch.zeros_like(rank), rank)
    bits = r.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    key = torch.where(bits >= 0x80000000, 0xFFFFFFFF - bits, bits | 0x80000000)
    return torch.where(rank.isnan(), torch.zeros_like(key), key)


def aiter_priorities(rule: dict, e: int) -> list[int]:
    """aiter's tie priority of each expert (lower wins), by its closed formula (issue 15)."""
    assert rule["lane_rank"] == AITER_LANE_RANK and rule["experts_per_group"] == AITER_EXPERTS_PER_GROUP, (
        f"the spec's wave64 lane table is not aiter's: {rule}; this oracle knows aiter's only"
    )
    groups = e // 4
    few = groups // 64  # groups on the lanes visited first (3 for 896 experts); the rest hold one more
    n_few = 64 - groups % 64  # how many lanes hold `few` (32 for 896 experts)
    priority = []
    for x in range(e):
        group = x >> 2
        lane, bank = group & 63, group >> 6
        rank = AITER_LANE_RANK[lane]
        group_rank = rank * few + bank if rank < n_few else n_few * few + (rank - n_few) * (few + 1) + bank
        priority.append((group_rank << 2) + (x & 3))
    assert sorted(priority) == list(range(e)), f"aiter's formula is no bijection onto [0, {e})"
    return priority


def tie_priorities(variant: dict, e: int) -> list[int]:
    """Each expert's place in the variant's tie order: the lower place wins a tie."""
    order = variant.get("tie_order", "lowest_id")
    if order == "lowest_id":
        return list(range(e))
    if isinstance(order, list):  # the experts, first place first
        priority = [0] * e
        for place, expert in enumerate(order):
            priority[expert] = place
        return priority
    if isinstance(order, dict) and order.get("rule") == "wave64_lane_table":
        return aiter_priorities(order, e)
    raise ValueError(f"unknown tie order {order!r}")


def tie_winners(variant: dict, k: int) -> list[int]:
    """The k experts that win when every rank key is equal, in output order."""
    priority = tie_priorities(variant, variant["constants"]["num_experts"])
    return sorted(range(len(priority)), key=priority.__getitem__)[:k]


def sigmoid(variant: dict, x: torch.Tensor) -> torch.Tensor:
    """The variant's fp32 sigmoid: torch.sigmoid (expf), or aiter's 1 / (1 + exp2(-log2e * x))."""
    formula = variant.get("sigmoid", "expf")
    if formula == "expf":
        return torch.sigmoid(x)
    if formula == "exp2":
        minus_log2e = torch.tensor(-LOG2E, dtype=torch.float32, device=x.device)  # rounded to fp32 as in C++
        return torch.reciprocal(torch.exp2(x * minus_log2e) + 1)
    raise ValueError(f"unknown sigmoid formula {formula!r}")


def reference(
    variant: dict,
    scores,
    bias,
    topk,
    num_expert_group=1,
    topk_group=1,
    renormalize=1,
    routed_scaling_factor=1.0,
    out_weights=None,
    out_ids=None,
):
    s = sigmoid(variant, scores.float())
    rank = s + bias.float()
    m, e = rank.shape
    priority = torch.tensor(tie_priorities(variant, e), dtype=torch.int64, device=rank.device)
    composite = (rank_keys(rank) << 16) | (0xFFFF - priority)
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
    return {
        "scores": wide[:, pad:] if pad else wide,
        "bias": bias,
        "topk": c["top_k"],
        "renormalize": 1,
        "routed_scaling_factor": 2.5,
    }


def check(got, want, variant: dict) -> None:
    (w, ids), (w_ref, ids_ref) = got, want
    assert ids.dtype == torch.int32 and w.dtype == torch.float32 and ids.shape == ids_ref.shape
    bad = (ids != ids_ref).any(dim=1).nonzero()
    assert bad.numel() == 0, (
        f"{bad.numel()} rows pick other experts; first row {bad[0].item()}: "
        f"{ids[bad[0].item()].tolist()} vs {ids_ref[bad[0].item()].tolist()}"
    )
    # exp2 weights: within 1 ulp (torch's exp2 and the device's exp2f may round apart); expf: bit-exact.
    ulps = 1 if variant.get("sigmoid", "expf") == "exp2" else 0
    apart = (w.view(torch.int32).to(torch.int64) - w_ref.view(torch.int32).to(torch.int64)).abs()
    same = (apart <= ulps) | (w.isnan() & w_ref.isnan())
    assert same.all(), f"{int((~same).sum())} weights differ by more than {ulps} ulp"


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
    _, ids = _run(op, variant, args)
    expected = tie_winners(variant, variant["constants"]["top_k"])
    assert ids[0].tolist() == expected, f"tie order: got {ids[0].tolist()}, the oracle says {expected}"


def case_ties_at_k(op, variant):
    """A run of equal rank values straddles the K-th place."""
    args = _args(variant, 8, 2)
    k = variant["constants"]["top_k"]
    args["scores"][:, : k - 3] = 4.0
    args["scores"][:, 40:50] = 3.0  # ten experts tie for the last three places
    args["bias"].fill_(0.0)
    _run(op, variant, args)


def case_tie_straddles_k(op, variant):
    """Per row, 3 experts clear winners and 40 others, drawn from every lane and bank, tied for the
    last K - 3 places: the tie order picks which of the 40 win, and in what order."""
    m, e = 8, variant["constants"]["num_experts"]
    args = _args(variant, m, 17)
    gen = torch.Generator(device="cpu").manual_seed(17)
    low = -4.0 - torch.rand(m, e, generator=gen)  # below every tied score whatever the bias
    args["scores"].copy_(low.to(args["scores"].dtype))
    args["bias"].zero_()
    for row in range(m):
        chosen = torch.randperm(e, generator=gen)[:43].tolist()
        args["scores"][row, chosen[:3]] = 4.0
        args["scores"][row, chosen[3:]] = 3.0
    _, ids = _run(op, variant, args)
    priority = tie_priorities(variant, e)
    for row in range(m):
        tied = sorted(ids[row, 3:].tolist(), key=priority.__getitem__)
        assert ids[row, 3:].tolist() == tied, f"row {row}: the tied winners are not in tie order"


def case_sigmoid_formula(op, variant):
    """The weights are the sigmoids themselves (no bias, no renormalization, scale 1) of 1024 values
    spread over [-16, 16): the spec's formula, to the oracle's tolerance, across its range."""
    m, k = 64, variant["constants"]["top_k"]
    args = _args(variant, m, 18)
    probes = torch.linspace(-16, 16, m * k + 1)[:-1].reshape(m, k)
    args["scores"].fill_(float("nan"))  # NaN ranks below every number: the k probes win
    args["scores"][:, :k] = probes.to(args["scores"].dtype).to(args["scores"].device)
    args["bias"].zero_()
    args["renormalize"], args["routed_scaling_factor"] = 0, 1.0
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
    assert ids[0].tolist() == tie_winners(variant, variant["constants"]["top_k"])


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
