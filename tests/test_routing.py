"""Tie order and sigmoid per backend (k3gen.spec.routing, issue 15): what the bundled specs resolve to, that
k3gen's expansion of aiter's rule equals the oracle's own closed formula, and that each backend's choice
reaches the C++ header, the cache key and the generated tests. The GPU half is generated/tests."""

from __future__ import annotations

import dataclasses
import importlib.util
import re

import numpy as np
import pytest
import torch

from k3gen.oracles import route_topk as oracle
from k3gen.plan.family import BackendRouting
from k3gen.plan.resolve import resolve_family
from k3gen.render.render import make_env, render_family
from k3gen.spec import routing
from k3gen.spec.load import LoadedSpec, load_specs

from support import ROOT

# Issue 15: with every rank key equal, aiter's 16 winners in output order. Lane 63 has rank 0 and
# holds groups 63, 127, 191 (experts 252-255, 508-511, 764-767); lane 62 (rank 1) starts with group 62.
AITER_ALL_EQUAL_TOP16 = [252, 253, 254, 255, 508, 509, 510, 511, 764, 765, 766, 767, 248, 249, 250, 251]


@pytest.fixture(scope="module")
def loaded() -> dict[str, LoadedSpec]:
    return {ls.spec.kernel: ls for ls in load_specs(ROOT)}


@pytest.fixture(scope="module")
def plans(loaded):
    return {name: resolve_family(ls, ROOT) for name, ls in loaded.items()}


def by_backend(plan) -> dict[str, BackendRouting]:
    return {r.backend: r for r in plan.routing}


def test_the_k3_router_matches_aiter_on_hip_only(plans):
    r = by_backend(plans["route_topk"])
    assert (r["cuda"].tie_kind, r["cuda"].priority, r["cuda"].sigmoid) == ("lowest_id", None, "expf")
    assert (r["hip"].tie_kind, r["hip"].sigmoid) == ("wave64_lane_table", "exp2")


def test_the_aiter_instance_uses_aiter_on_every_backend(plans):
    p = plans["route_topk_aiter"]
    assert p.archs("cuda") == ["sm_90a", "sm_100a"] and p.archs("hip") == ["gfx942"]
    assert p.spec.constants["num_experts"] == 896 and p.spec.constants["top_k"] == 16
    for r in p.routing:
        assert (r.tie_kind, r.sigmoid) == ("wave64_lane_table", "exp2")
        assert r.priority == by_backend(plans["route_topk"])["hip"].priority


def test_the_fused_router_routes_as_route_topk_on_each_backend(plans):
    """docs/kernels.md §4: route_quant_fused is bit-identical to route_topk, so their routing must agree."""
    topk, fused = by_backend(plans["route_topk"]), by_backend(plans["route_quant_fused"])
    for backend in fused:
        assert (fused[backend].priority, fused[backend].sigmoid) == (topk[backend].priority, topk[backend].sigmoid)


@pytest.mark.parametrize(
    "family,backend",
    [("route_topk", "hip"), ("route_topk_aiter", "cuda"), ("route_topk_aiter", "hip"), ("route_quant_fused", "hip")],
)
def test_k3gen_expansion_equals_the_oracles_closed_formula(plans, family, backend):
    """k3gen expands the spec's lane table by traversal; the oracle computes issue 15's formula from
    its own copy of the table. Either side changing fails here, before any GPU runs."""
    r = by_backend(plans[family])[backend]
    assert list(r.priority) == oracle.tie_priorities(r.test_data, 896)


def test_aiter_priority_is_a_bijection_and_its_all_equal_winners_are_pinned(plans):
    r = by_backend(plans["route_topk_aiter"])["cuda"]
    assert sorted(r.priority) == list(range(896))
    assert sorted(range(896), key=r.priority.__getitem__)[:16] == AITER_ALL_EQUAL_TOP16
    variant = {"constants": {"num_experts": 896}, **r.test_data}
    assert oracle.tie_winners(variant, 16) == AITER_ALL_EQUAL_TOP16


def test_issue_formula_spelled_out_for_some_experts(plans):
    """The issue's formula by hand. e = 0: group 0, lane 0 (rank 56), bank 0, group_rank 96 + 24*4 = 192,
    priority 768. e = 765: group 191, lane 63 (rank 0), bank 2, group_rank 2, priority 9. e = 895:
    group 223, lane 31 (rank 32), bank 3, group_rank 96 + 0*4 + 3 = 99, priority 399."""
    priority = by_backend(plans["route_topk"])["hip"].priority
    assert (priority[0], priority[765], priority[895]) == (768, 9, 399)


def test_a_rule_for_fewer_experts_visits_the_lanes_by_rank():
    """256 experts, 4 to a group: one group per lane, so the order is the lanes' groups by rank."""
    lanes = list(range(63, -1, -1))  # lane 63 first
    rule = routing.TieRule(rule="wave64_lane_table", experts_per_group=4, lane_rank=lanes)
    order = routing.wave64_traversal(rule, 256, ("tie_order",))
    assert order[:8] == [252, 253, 254, 255, 248, 249, 250, 251] and sorted(order) == list(range(256))


def test_the_routing_choice_is_part_of_the_cache_key(loaded):
    """The same spec with another sigmoid on HIP: the HIP units' keys change (k3gen.render.keys hashes the
    rendered sources; the routing header holds each backend's row, so the CUDA units rebuild too)."""
    from k3gen.render.keys import SHARED_HEADERS, libraries

    ls = loaded["route_topk"]
    other = ls.spec.sigmoid.model_copy(update={"hip": "expf"})
    twin = LoadedSpec(ls.spec.model_copy(update={"sigmoid": other}), ls.file, ls.text, ls.located)

    def keys(spec) -> dict[str, str]:
        plan = resolve_family(spec, ROOT)
        # Without the tuning tables: they measured the bundled sigmoid, so the twin's render refuses them.
        plan.tuning = dataclasses.replace(plan.tuning, tables=())
        files = render_family(make_env(ROOT), plan, "")
        files.update(dict.fromkeys(SHARED_HEADERS, ""))  # shared by both sides: their bytes do not matter here
        return {u.identity: u.key for lib in libraries([plan], files) for u in lib.units}

    before, after = keys(ls), keys(twin)
    assert before.keys() == after.keys()
    assert all(before[i] != after[i] for i in before if "__gfx" in i and "__dispatch__" not in i)


def _backend_blocks(header: str) -> dict[str, str]:
    """The `#if K3_CUDA` / `#elif K3_HIP` blocks of a routing header's tie order and sigmoid, by
    backend (the first block that sets kRouteSigmoid: other helpers have backend blocks of their own)."""
    start = header.index("constexpr int kRouteSigmoid")
    begin = header.rindex("\n#if K3_", 0, start) + 1
    header = header[begin : header.index("\n#endif", start)]
    parts = re.split(r"^#(?:el)?if K3_(CUDA|HIP)\n", header, flags=re.M)
    return {name.lower(): body.split("\n#e", 1)[0] for name, body in zip(parts[1::2], parts[2::2])}


def test_each_backend_block_of_the_header_holds_its_choice(plans):
    p = plans["route_topk"]
    header = render_family(make_env(ROOT), p, "")["k3kernels/csrc/route_topk/route_topk.cuh"]
    blocks = _backend_blocks(header)
    assert "kRouteSigmoid = kSigmoidExpf;" in blocks["cuda"] and "tie_rank" not in blocks["cuda"]
    assert "kRouteSigmoid = kSigmoidExp2;" in blocks["hip"]
    table = re.search(r"tie_rank\[896\] = \{(.*?)\};", blocks["hip"], re.S).group(1)
    assert [int(x) for x in table.replace(",", " ").split()] == list(by_backend(p)["hip"].priority)
    assert "exp2f(-log2e * x)" in header and "1.44269504088896340736f" in header


@pytest.mark.parametrize("family", ["route_topk", "route_topk_aiter", "route_quant_fused", "route_topk_e256"])
def test_the_generated_tests_give_the_oracle_each_backends_routing(plans, family):
    path = ROOT / "generated" / "tests" / f"test_{family}.py"
    spec = importlib.util.spec_from_file_location(f"generated_test_{family}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # data and helper calls only: importing it runs no test
    assert {r.backend: r.test_data for r in plans[family].routing} == module.ROUTING


def test_the_oracle_knows_aiters_lane_table_only():
    other = list(oracle.AITER_LANE_RANK)
    other[0], other[1] = other[1], other[0]
    variant = {"tie_order": {"rule": "wave64_lane_table", "experts_per_group": 4, "lane_rank": other}}
    with pytest.raises(AssertionError, match="not aiter's"):
        oracle.tie_priorities(variant, 896)


def test_the_oracles_exp2_sigmoid_is_aiters_formula():
    """Against the formula in float64 after the one fp32 rounding it has before exp2 (of -log2e * x):
    within 2 ulp (the CPU's exp2f and the division), where torch.sigmoid is up to 15 ulp away."""
    x = torch.linspace(-20, 20, 40001)
    minus_log2e = np.float32(-1.44269504088896340736)
    exponent = (minus_log2e * x.numpy()).astype(np.float32).astype(np.float64)
    want = (1.0 / (1.0 + np.exp2(exponent))).astype(np.float32)

    def ulps(a) -> int:
        return int(np.abs(a.view(np.int32).astype(np.int64) - want.view(np.int32)).max())

    assert ulps(oracle.sigmoid({"sigmoid": "exp2"}, x).numpy()) <= 2
    assert ulps(torch.sigmoid(x).numpy()) > 2
    assert torch.equal(oracle.sigmoid({"sigmoid": "expf"}, x), torch.sigmoid(x))
