"""The radix select of templates/route_topk/device.cuh.j2, emulated on the host (issue 13).

route_row's correctness rests on pick_digit: warp 0 reads the whole 256-bin histogram, lane l
holding digits [256 - n(l + 1), 256 - n l) (n = 256 / warp size), and exactly one (lane, bin) finds
the bin holding the k_left-th candidate. This emulates that rule, the passes (early exit when the
bin holds exactly k_left, or at most kBinGather keys) and the gather (keys >= prefix, ranked), and
checks that the gathered keys fit and their first K are the top K, for 32- and 64-lane warps; keys
below the floor never enter the select, whose first digit starts where floor and ceiling differ
(floor_and_ceiling). The kernel itself is tested on a GPU by the generated tests; this pins the
logic a reviewer reads.
"""

from __future__ import annotations

import math
import random

import pytest
import torch

from k3gen.oracles import route_topk as oracle

# What `k3gen test` selects this module by (k3gen.review.impact): the paths it reads besides k3gen/ and tests/.
READS = ("templates/route_topk/**",)

BIN_GATHER = 32  # kBinGather: stop once the threshold's bin holds at most this many keys
SPAN = 32  # kSpan: the experts a warp's lanes (half a wave's on HIP) hold in one key slot


def pick_digit(hist: list[int], k_left: int, warp: int) -> tuple[int, int, int]:
    per = 256 // warp
    totals = [sum(hist[256 - per * (lane + 1) : 256 - per * lane]) for lane in range(warp)]
    found = []
    for lane in range(warp):
        low = 256 - per * (lane + 1)
        above = sum(totals[:lane])  # the warp's inclusive scan minus the lane's own total
        for i in range(per - 1, -1, -1):
            if above < k_left <= above + hist[low + i]:
                found.append((low + i, hist[low + i], above))
            above += hist[low + i]
    assert len(found) == 1, found  # first_lane + shfl broadcast assume exactly one
    return found[0]


def floor_and_ceiling(ranks: list[int], k: int) -> tuple[int, int]:
    """The kernel's bounds on the rank keys of the top K (kSpan): the ceiling is the largest rank key;
    the floor the smallest of the spans' largest (SPAN consecutive experts a span), which at least as
    many keys reach as there are spans, when there are at least K spans; else the smallest rank key."""
    spans = [max(ranks[i : i + SPAN]) for i in range(0, len(ranks), SPAN)]
    return (min(spans) if len(spans) >= k else min(ranks)), max(ranks)


def select(keys: list[int], k: int, warp: int) -> list[int]:
    floor, ceiling = floor_and_ceiling([key >> 16 for key in keys], k)
    assert floor <= sorted(keys, reverse=True)[k - 1] >> 16  # no top-K key lies below the floor
    floor_key = floor << 16
    hi = 16 + (floor ^ ceiling).bit_length()  # the bits above are every candidate's
    mask = ((1 << 48) - 1) & ~((1 << hi) - 1)
    prefix = (ceiling << 16) & mask
    k_left = k
    while hi > 0:
        lo = max(hi - 8, 0)
        digit_mask = (1 << (hi - lo)) - 1
        hist = [0] * 256
        for key in keys:
            if key >= floor_key and key & mask == prefix:
                hist[(key >> lo) & digit_mask] += 1
        digit, count, above = pick_digit(hist, k_left, warp)
        assert count < 4096 and above < 64  # the packed word's fields
        prefix |= digit << lo
        mask |= digit_mask << lo
        hi = lo
        k_left -= above
        if k_left == count or count <= BIN_GATHER:
            break
    taken = [key for key in keys if key >= prefix and key >= floor_key]
    assert len(taken) == k - k_left + count <= k - 1 + BIN_GATHER or len(taken) == k
    assert len(taken) <= 64 + BIN_GATHER  # RouteShared's taken arrays
    ranked = sorted(taken, reverse=True)  # the kernel: position = how many gathered keys are larger
    return ranked[:k]


@pytest.mark.parametrize("warp", [32, 64])
@pytest.mark.parametrize("rows", ["random", "all_equal", "few_values", "straddle", "routing", "few_positive"])
def test_select_takes_exactly_the_top_k(warp, rows):
    rng = random.Random(f"{warp}{rows}")
    for _ in range(60):
        e = rng.choice([896, 256, 64, 16])
        k = min(rng.choice([1, 8, 16, 64]), e)
        if rows == "random":
            rank = [rng.getrandbits(32) for _ in range(e)]
        elif rows == "all_equal":
            rank = [0x80000000 | 12345] * e
        elif rows == "few_values":
            rank = [rng.choice([0, 7, 0x80000000, 0xFFFFFFFF]) for _ in range(e)]
        elif rows in ("routing", "few_positive"):  # sigmoid(score) + bias, as the kernel ranks them
            shift = 0.1 if rows == "routing" else -1.2  # few_positive: fewer than K keys are >= 0
            sig = [1 / (1 + math.exp(-rng.gauss(0, 1))) for _ in range(e)]
            values = torch.tensor([s + shift + 0.1 * rng.gauss(0, 1) for s in sig], dtype=torch.float32)
            rank = oracle.rank_keys(values).tolist()  # the oracle's copy of the kernel's rank_key
        else:  # k - 3 winners, then a tie across the cutoff
            rank = [0x90000000] * (k - 3 if k > 3 else 0) + [0x80000001] * 8
            rank += [rng.getrandbits(31) for _ in range(e - len(rank))]
            rng.shuffle(rank)
        keys = [(r << 16) | (0xFFFF - i) for i, r in enumerate(rank)]  # lowest_id tie priority
        assert select(keys, k, warp) == sorted(keys, reverse=True)[:k]
