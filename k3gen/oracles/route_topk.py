"""Oracle for route_topk (docs/kernels.md §3), bit-exact.

A variant's `routing` (the spec's routing axes; sigmoid-bias before the top-K where it gives none)
says how a row of logits x is scored and selected. Before: s = score(x) over every expert (sigmoid,
sqrt(softplus), none, or a softmax over the row, summed in the order the kernel's warp sums it);
the selection value is s + bias (`bias: scores`), or x itself for an unbiased softmax (the logits
rank as the probabilities do). After: the top-K is taken on x (+ bias on the logits), then scored
over the K picks. Grouped selection keeps the `keep` best groups of consecutive experts (a group's
score: the sum of its two best selection values, or the best) and ranks only their experts.

Selection values are ordered descending, NaN below every number (-inf included), -0.0 == +0.0, ties
by the spec's tie order (lowest id, a table, or aiter's wave64 rule); groups tie to the lower group.
Weights never carry the bias; with renormalize they are divided by their sum (added in rank order, one
fp32 add at a time): where it is positive (else by 1), by sum + eps, or by max(sum, eps); then
multiplied by routed_scaling_factor. Outputs are by rank, or by expert id (`sorted: false`).
The sigmoid is torch.sigmoid (`expf`) or aiter's exp2 formula (`exp2`).

A variant names the tie order, sigmoid and warp lanes of the backend under test (the generated test
reads them from the spec per backend). aiter's rule is computed here from this module's own copy of
aiter's lane table and its closed formula, never from k3gen's expansion, so a change on either side
fails the tests instead of drifting silently.
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
    """The k experts that win when every selection value is equal, in output order: by tie order among
    the experts of the first `keep` groups (equal groups tie to the lower one)."""
    e = variant["constants"]["num_experts"]
    priority = tie_priorities(variant, e)
    g = routing(variant)["groups"]
    eligible = range(e) if g is None else range(g["keep"] * (e // g["count"]))
    winners = sorted(eligible, key=priority.__getitem__)[:k]
    return winners if routing(variant)["sorted"] else sorted(winners)


def sigmoid(variant: dict, x: torch.Tensor) -> torch.Tensor:
    """The variant's fp32 sigmoid: torch.sigmoid (expf), or aiter's 1 / (1 + exp2(-log2e * x))."""
    formula = variant.get("sigmoid", "expf")
    if formula == "expf":
        return torch.sigmoid(x)
    if formula == "exp2":
        minus_log2e = torch.tensor(-LOG2E, dtype=torch.float32, device=x.device)  # rounded to fp32 as in C++
        return torch.reciprocal(torch.exp2(x * minus_log2e) + 1)
    raise ValueError(f"unknown sigmoid formula {formula!r}")


# What a routing family's variant means where its spec declares no `routing` (k3gen.spec.model.Routing).
ROUTING_DEFAULTS = {
    "scoring": "sigmoid",
    "scoring_at": "before",
    "bias": "scores",
    "groups": None,
    "renormalize": "positive",
    "renorm_eps": 0.0,
    "sorted": True,
}


def routing(variant: dict) -> dict:
    return {**ROUTING_DEFAULTS, **variant.get("routing", {})}


def score(variant: dict, x: torch.Tensor) -> torch.Tensor:
    """An elementwise scoring in fp32 (softmax is over a row: softmax_rows)."""
    scoring = routing(variant)["scoring"]
    if scoring == "sigmoid":
        return sigmoid(variant, x)
    if scoring == "sqrt_softplus":  # torch's softplus: x itself past 20
        return torch.where(x > 20, x, torch.log1p(torch.exp(x))).sqrt()
    if scoring == "none":
        return x
    raise ValueError(f"{scoring!r} is not elementwise")


def _row_max(x: torch.Tensor) -> torch.Tensor:
    """The largest number of each row, NaN ignored (fmaxf), -inf for a row of NaN."""
    return x.nan_to_num(nan=float("-inf"), posinf=float("inf"), neginf=float("-inf")).amax(dim=1, keepdim=True)


def _in_order(columns: torch.Tensor) -> torch.Tensor:
    """The sum over dim 1, one fp32 add at a time from 0.0, in column order."""
    total = torch.zeros(columns.shape[0], *columns.shape[2:], dtype=torch.float32, device=columns.device)
    for j in range(columns.shape[1]):
        total = total + columns[:, j]
    return total


def softmax_rows(x: torch.Tensor, lanes: int) -> torch.Tensor:
    """softmax over each row in the kernel's order: expert e = j * lanes + lane is added by its lane
    in order of j, then the lanes' sums by a butterfly (d = lanes/2 .. 1: v += v[lane ^ d])."""
    m, e = x.shape
    ex = torch.exp(x - _row_max(x))
    n = -(-e // lanes)
    padded = torch.zeros(m, n * lanes, dtype=torch.float32, device=x.device)
    padded[:, :e] = ex
    v = _in_order(padded.view(m, n, lanes))
    d = lanes // 2
    while d:
        v = v + v[:, torch.arange(lanes, device=x.device) ^ d]
        d //= 2
    return ex / v[:, :1]


def _softmax_picked(w: torch.Tensor) -> torch.Tensor:
    """softmax over the K picks of each row, summed in rank order (scoring after the top-K)."""
    ex = torch.exp(w - _row_max(w))
    return ex / _in_order(ex).unsqueeze(1)


def _keep_groups(r: dict, value: torch.Tensor, composite: torch.Tensor) -> torch.Tensor:
    """The composite keys with the experts of every group but the `keep` best set to -1 (below all)."""
    g = r["groups"]
    m, e = value.shape
    count, per = g["count"], e // g["count"]
    best = composite.view(m, count, per).topk(2 if g["score"] == "sum_top2" else 1, dim=2).indices
    picked = value.view(m, count, per).gather(2, best)
    group_score = picked[..., 0] + picked[..., 1] if g["score"] == "sum_top2" else picked[..., 0]
    group_key = (rank_keys(group_score) << 8) | (255 - torch.arange(count, device=value.device))
    kept = torch.zeros(m, count, dtype=torch.bool, device=value.device)
    kept.scatter_(1, group_key.topk(g["keep"], dim=1).indices, True)
    return torch.where(kept.repeat_interleave(per, dim=1), composite, torch.full_like(composite, -1))


def _denominator(r: dict, total: torch.Tensor) -> torch.Tensor:
    eps = torch.tensor(r["renorm_eps"], dtype=torch.float32, device=total.device)
    if r["renormalize"] == "add_eps":
        return total + eps
    if r["renormalize"] == "clamp":  # torch.clamp: NaN stays NaN
        return torch.where(total < eps, eps, total)
    return torch.where(total > 0, total, torch.ones_like(total))


def reference(
    variant: dict,
    scores,
    bias=None,
    topk=None,
    num_expert_group=1,
    topk_group=1,
    renormalize=1,
    routed_scaling_factor=1.0,
    out_weights=None,
    out_ids=None,
):
    r = routing(variant)
    x = scores.float()
    b = bias.float() if bias is not None and r["bias"] != "none" else None
    if r["scoring_at"] == "after":
        weight = x
        value = x + b if b is not None else x
    elif r["scoring"] == "softmax":
        weight = softmax_rows(x, variant.get("lanes", 32))
        value = weight + b if b is not None else x
    else:
        weight = score(variant, x)
        value = weight + b if b is not None else weight
    e = value.shape[1]
    priority = torch.tensor(tie_priorities(variant, e), dtype=torch.int64, device=value.device)
    composite = (rank_keys(value) << 16) | (0xFFFF - priority)
    if r["groups"] is not None:
        composite = _keep_groups(r, value, composite)
    order = composite.argsort(dim=1, descending=True)[:, :topk]
    w = weight.gather(1, order)
    if r["scoring_at"] == "after":
        w = _softmax_picked(w) if r["scoring"] == "softmax" else score(variant, w)
    if renormalize:
        w = w / _denominator(r, _in_order(w)).unsqueeze(1)
    w = w * torch.tensor(routed_scaling_factor, dtype=torch.float32)
    if not r["sorted"]:  # the same picks in expert-id order
        order, by_id = order.sort(dim=1)
        w = w.gather(1, by_id)
    return w, order.to(torch.int32)


def make_args(variant: dict, dims: dict, layout: str, seed: int, device: str = "cuda") -> dict:
    c = variant["constants"]
    m, e = dims["M"], c["num_experts"]
    gen = torch.Generator(device="cpu").manual_seed(seed)
    pad = 32 if layout == "strided" else 0
    wide = (torch.randn(m, e + pad, generator=gen) * 3).to(torch_dtype(variant["score"])).to(device)
    bias = (
        (torch.randn(e, generator=gen) * 0.1).to(torch_dtype(variant["bias"])).to(device) if "bias" in variant else None
    )
    return {
        "scores": wide[:, pad:] if pad else wide,
        **({"bias": bias} if bias is not None else {}),
        "topk": c["top_k"],
        "renormalize": 1,
        "routed_scaling_factor": 2.5,
        **_groups_args(variant),
    }


def _groups_args(variant: dict) -> dict:
    g = routing(variant)["groups"]
    return {} if g is None else {"num_expert_group": g["count"], "topk_group": g["keep"]}


def check(got, want, variant: dict) -> None:
    (w, ids), (w_ref, ids_ref) = got, want
    assert ids.dtype == torch.int32 and w.dtype == torch.float32 and ids.shape == ids_ref.shape
    bad = (ids != ids_ref).any(dim=1).nonzero()
    assert bad.numel() == 0, (
        f"{bad.numel()} rows pick other experts; first row {bad[0].item()}: "
        f"{ids[bad[0].item()].tolist()} vs {ids_ref[bad[0].item()].tolist()}"
    )
    # exp2 weights: within 1 ulp (torch's exp2 and the device's exp2f may round apart); expf: bit-exact.
    r = routing(variant)
    ulps = 1 if variant.get("sigmoid", "expf") == "exp2" and r["scoring"] == "sigmoid" else 0
    apart = (w.view(torch.int32).to(torch.int64) - w_ref.view(torch.int32).to(torch.int64)).abs()
    same = (apart <= ulps) | (w.isnan() & w_ref.isnan())
    assert same.all(), f"{int((~same).sum())} weights differ by more than {ulps} ulp"


def _run(op, variant, args):
    got = op(**args)
    check(got, reference(variant, **args), variant)
    return got


def _args(variant, m=16, seed=0):
    return make_args(variant, {"M": m}, "dense", seed)


def _zero_bias(args):
    if "bias" in args:
        args["bias"].zero_()


def _k(variant) -> int:
    return variant["constants"]["top_k"]


def _e(variant) -> int:
    return variant["constants"]["num_experts"]


def case_all_equal(op, variant):
    """Every score equal: the tie order alone decides, and the test pins it."""
    args = _args(variant, 4, 1)
    args["scores"].fill_(0.5)
    _zero_bias(args)
    _, ids = _run(op, variant, args)
    expected = tie_winners(variant, _k(variant))
    assert ids[0].tolist() == expected, f"tie order: got {ids[0].tolist()}, the oracle says {expected}"


def case_ties_at_k(op, variant):
    """A run of equal values straddles the K-th place: K - 3 clear winners (at least none), then ten
    experts (fewer where E is small) tied for the last places."""
    args = _args(variant, 8, 2)
    k, e = _k(variant), _e(variant)
    clear = max(k - 3, 0)
    start = min(40, e - min(10, e - clear))
    args["scores"][:, :clear] = 4.0
    args["scores"][:, max(start, clear) : max(start, clear) + 10] = 3.0
    _zero_bias(args)
    _run(op, variant, args)


def case_tie_straddles_k(op, variant):
    """Per row, 3 experts clear winners (fewer for a small K) and up to 40 others, drawn from every
    lane and bank, tied for the last places: the tie order picks which of them win, and in what order."""
    m, e, k = 8, _e(variant), _k(variant)
    clear = min(3, k - 1)
    tied = min(40, e - clear)
    args = _args(variant, m, 17)
    gen = torch.Generator(device="cpu").manual_seed(17)
    low = -4.0 - torch.rand(m, e, generator=gen)  # below every tied score whatever the bias
    args["scores"].copy_(low.to(args["scores"].dtype))
    _zero_bias(args)
    for row in range(m):
        chosen = torch.randperm(e, generator=gen)[: clear + tied].tolist()
        args["scores"][row, chosen[:clear]] = 4.0
        args["scores"][row, chosen[clear:]] = 3.0
    _, ids = _run(op, variant, args)
    if not routing(variant)["sorted"]:
        return  # outputs in id order: the oracle's ids, compared above, are the check
    priority = tie_priorities(variant, e)
    for row in range(m):
        tied_ids = sorted(ids[row, clear:].tolist(), key=priority.__getitem__)
        assert ids[row, clear:].tolist() == tied_ids, f"row {row}: the tied winners are not in tie order"


def case_sigmoid_formula(op, variant):
    """The weights are the sigmoids themselves (no bias, no renormalization, scale 1) of 1024 values
    spread over [-16, 16): the spec's formula, to the oracle's tolerance, across its range."""
    assert routing(variant)["scoring"] == "sigmoid", "sigmoid_formula is a case of sigmoid routers: use score_formula"
    case_score_formula(op, variant)


def case_score_formula(op, variant):
    """K probes per row spread over [-16, 16) win (the other experts: NaN, which ranks below every
    number; -inf for a softmax over the row, whose NaN would reach every weight); no bias, no
    renormalization, scale 1: the weights are the scoring function itself across its range."""
    m, k, r = 64, _k(variant), routing(variant)
    args = _args(variant, m, 18)
    probes = torch.linspace(-16, 16, m * k + 1)[:-1].reshape(m, k)
    softmax_first = r["scoring"] == "softmax" and r["scoring_at"] == "before"
    args["scores"].fill_(float("-inf") if softmax_first else float("nan"))
    args["scores"][:, :k] = probes.to(args["scores"].dtype).to(args["scores"].device)
    _zero_bias(args)
    args["renormalize"], args["routed_scaling_factor"] = 0, 1.0
    if r["groups"] is not None:  # the probes' groups are kept: every group at least the probes' count
        per = _e(variant) // r["groups"]["count"]
        args["scores"][:, k : r["groups"]["keep"] * per] = -20.0
    _run(op, variant, args)


def case_nan(op, variant):
    """NaN scores never win while numbers are left; an all-NaN row still returns K experts. (A softmax
    whose probabilities select, biased, is NaN over the whole row: the tie order picks, as the oracle says.)"""
    args = _args(variant, 3, 3)
    n = min(100, _e(variant) - _k(variant))
    args["scores"][0, :n] = float("nan")
    args["scores"][1, :] = float("nan")
    _, ids = _run(op, variant, args)
    r = routing(variant)
    if not (r["scoring"] == "softmax" and r["scoring_at"] == "before" and r["bias"] != "none"):
        assert (ids[0] >= n).all()


def case_signed_zero(op, variant):
    """Scores of -0.0 and +0.0 (and biases of -0.0/+0.0) rank equal: the tie order decides."""
    args = _args(variant, 2, 4)
    args["scores"].zero_()
    args["scores"][:, ::2] = -0.0
    if "bias" in args:
        args["bias"].zero_()
        args["bias"][1::3] = -0.0
    _, ids = _run(op, variant, args)
    assert ids[0].tolist() == tie_winners(variant, _k(variant))


def case_huge_negative_bias(op, variant):
    args = _args(variant, 4, 5)
    args["bias"][: _e(variant) // 2] = -1e30
    _, ids = _run(op, variant, args)
    assert (ids >= _e(variant) // 2).all()


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


def case_groups_decide(op, variant):
    """Grouped selection: the best experts of a group outside the kept ones never win. Each row's
    single best expert sits alone in a group whose second best is poor, so the group's sum-of-two
    (or max) is what ranks it."""
    g = routing(variant)["groups"]
    assert g is not None, "groups_decide is a case of grouped routers"
    args = _args(variant, 16, 19)
    _run(op, variant, args)  # random rows: the groups are computed as the oracle computes them
    per = _e(variant) // g["count"]
    args["scores"].fill_(-2.0)
    _zero_bias(args)
    last = (g["count"] - 1) * per  # the last group holds the best expert, its others poor
    args["scores"][:, last] = 8.0
    args["scores"][:, last + 1 : last + per] = -8.0
    for group in range(g["keep"]):  # the kept groups: two good experts each (7 + 7 beats 8 - 8 in every scoring)
        args["scores"][:, group * per : group * per + 2] = 7.0
    _, ids = _run(op, variant, args)
    if g["score"] == "sum_top2" and g["keep"] < g["count"]:
        assert (ids != last).all(), "an expert of a dropped group won"


def reject_wrong_topk(variant):
    args = _args(variant, 4, 14)
    args["topk"] = _k(variant) + 1
    return args


def reject_expert_groups(variant):
    """Groups other than the spec's (its own count, or 1 where it has none)."""
    args = _args(variant, 4, 16)
    g = routing(variant)["groups"]
    args["num_expert_group"] = 8 if g is None else 2 * g["count"]
    return args


def reject_too_many_tokens(variant):
    """One token past a spec's `max_tokens` gate (a spec may keep one, e.g. for a decode-only instance)."""
    return make_args(variant, {"M": variant["constants"]["max_tokens"] + 1}, "dense", 15)
