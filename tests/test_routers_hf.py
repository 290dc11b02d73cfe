"""Every bundled router spec against the model's own routing code (transformers, on the CPU).

For each spec that declares `routing:`, the project's oracle (k3gen.oracles.route_topk, the function
the kernels are tested against bit for bit) and the model's router module in transformers route
the same logits: the same expert sets on every row (the rows have no exact ties: the models break
those by torch.topk's order, which is not defined), the same weights within TOLERANCE, and the
spec's numbers are the published model's. The routers without a transformers model (the K3 specs)
are left out by name. transformers is a test dependency only (pyproject's `test` extra).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import model_routing

from k3gen.oracles import route_topk as oracle
from k3gen.plan import resolve_all
from k3gen.render.test_data import oracle_spec
from k3gen.spec.load import load_specs

ROOT = Path(__file__).resolve().parents[1]
IN_CI = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")
try:
    import hf_routers as hf
    import transformers  # noqa: F401
except ImportError:  # CI installs it (pyproject's test extra): a missing one fails there
    if IN_CI:
        raise
    pytest.skip("transformers is not installed (pip install -e '.[test]')", allow_module_level=True)

M = 64
# fp32 weights apart by at most this relative error: the models add the K weights (and a softmax its
# row) in torch's own order, k3gen in the fixed order its kernels use (docs/kernels.md §3).
TOLERANCE = {"rtol": 4e-6, "atol": 1e-7}
# Kimi-K3's shape (896/16), not a transformers model
NOT_IN_TRANSFORMERS = {"route_topk", "route_topk_aiter", "route_topk_e256", "route_topk_unsorted", "route_quant_fused"}


@dataclass(frozen=True)
class Model:
    name: str
    published: dict  # the model's numbers (its config.json), as the spec must state them
    route: object  # (logits fp32 [M, E], bias fp32 [E] or None) -> (weights, ids): the model's code


def _numbers(e, k, groups=(1, 1), scale=1.0, renormalize=1):
    return {"num_experts": e, "top_k": k, "groups": groups, "scale": scale, "renormalize": renormalize}


MODELS = {
    "route_deepseek_v3": Model(
        "DeepSeek-V3", _numbers(256, 8, (8, 4), 2.5), lambda x, b: hf.deepseek_v3(x, b, 8, 8, 4, 2.5)
    ),
    "route_kimi_k2": Model("Kimi-K2", _numbers(384, 8, scale=2.827), lambda x, b: hf.deepseek_v3(x, b, 8, 1, 1, 2.827)),
    "route_glm45": Model("GLM-4.5", _numbers(160, 8, scale=2.5), lambda x, b: hf.glm45(x, b, 8, 2.5)),
    "route_minimax_m2": Model("MiniMax-M2", _numbers(256, 8), lambda x, b: hf.minimax_m2(x, b, 8)),
    "route_deepseek_v4_flash": Model(
        "DeepSeek-V4-Flash", _numbers(256, 6, scale=1.5), lambda x, b: hf.deepseek_v4(x, b, 6, 1.5)
    ),
    "route_qwen3_moe": Model("Qwen3-30B-A3B", _numbers(128, 8), lambda x, b: hf.qwen3_moe(x, 8)),
    "route_qwen3_next": Model("Qwen3-Next-80B-A3B", _numbers(512, 10), lambda x, b: hf.qwen3_next(x, 10)),
    "route_mixtral": Model("Mixtral-8x7B", _numbers(8, 2), lambda x, b: hf.mixtral(x, 2)),
    "route_gpt_oss_120b": Model("gpt-oss-120b", _numbers(128, 4, renormalize=0), lambda x, b: hf.gpt_oss(x, 4)),
    "route_llama4_maverick": Model("Llama-4-Maverick", _numbers(128, 1, renormalize=0), lambda x, b: hf.llama4(x, 1)),
    "route_ernie45": Model("ERNIE-4.5-21B-A3B", _numbers(64, 6), lambda x, b: hf.ernie45(x, b, 6, 1e-12)),
}

PLANS = {p.name: p for p in resolve_all(load_specs(ROOT), ROOT) if p.route is not None}
ROUTERS = sorted(n for n in PLANS if n in MODELS)  # each checked against its model below


def test_every_router_spec_has_its_model():
    """Each bundled router is checked against its model or named as having none; a router spec
    added since (a user's own model) is said to be unchecked until its model joins MODELS."""
    assert not set(MODELS) & NOT_IN_TRANSFORMERS, "a router is both checked and named as having no model"
    assert set(MODELS) <= set(PLANS), f"models without their router spec: {sorted(set(MODELS) - set(PLANS))}"
    unchecked = sorted(set(PLANS) - set(MODELS) - NOT_IN_TRANSFORMERS)
    if unchecked:
        pytest.skip(f"not checked against a model: {', '.join(unchecked)}; add it to MODELS here to check it")


def _variant(plan, score: str) -> dict:
    cuda = next(r for r in plan.routing if r.backend == "cuda")
    axes = {"score": score, **({"bias": "fp32"} if "bias" in plan.spec.dtypes.axes else {})}
    return {**axes, **oracle_spec(plan), **cuda.test_data}


def _scalars(plan) -> dict:
    return {name: s.default for name, s in plan.spec.signature.scalars.items() if s.optional}


def _logits(e: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """M rows of distinct logits (no exact ties anywhere in a row): bf16 rows are drawn without
    replacement from the bf16 numbers of [-4, 4), fp32 rows are normal."""
    gen = torch.Generator().manual_seed(seed)
    if dtype == torch.float32:
        return torch.randn(M, e, generator=gen) * 2
    grid = torch.arange(-4.0, 4.0, 2**-6).to(torch.bfloat16).unique()
    assert grid.numel() >= e
    return torch.stack([grid[torch.randperm(grid.numel(), generator=gen)[:e]] for _ in range(M)])


def _by_id(w, ids):
    ids, order = ids.to(torch.int64).sort(dim=1)
    return w.gather(1, order), ids


@pytest.mark.parametrize("score", ["fp32", "bf16"])
@pytest.mark.parametrize("name", ROUTERS)
def test_oracle_routes_as_the_model(name, score):
    plan, model = PLANS[name], MODELS[name]
    e = plan.spec.constants["num_experts"]
    x = _logits(e, torch.float32 if score == "fp32" else torch.bfloat16, seed=len(name))
    has_bias = "bias" in plan.spec.dtypes.axes
    bias = torch.randn(e, generator=torch.Generator().manual_seed(7)) * 0.1 if has_bias else None
    scalars = _scalars(plan)
    got = oracle.reference(_variant(plan, score), x, bias, plan.spec.constants["top_k"], **scalars)
    want = model.route(x.float(), bias)
    (w, ids), (w_model, ids_model) = _by_id(*got), _by_id(*want)
    differ = (ids != ids_model).any(dim=1)
    assert not differ.any(), (
        f"{model.name}: {int(differ.sum())} of {M} rows pick other experts; row {int(differ.nonzero()[0])}: "
        f"k3gen {ids[differ][0].tolist()}, transformers {ids_model[differ][0].tolist()}"
    )
    torch.testing.assert_close(w, w_model, **TOLERANCE, msg=lambda m: f"{model.name} weights: {m}")


@pytest.mark.parametrize("name", ROUTERS)
def test_spec_states_the_published_numbers(name):
    spec, published = PLANS[name].spec, MODELS[name].published
    groups = PLANS[name].route.groups
    scalars = _scalars(PLANS[name])
    stated = {
        "num_experts": spec.constants["num_experts"],
        "top_k": spec.constants["top_k"],
        "groups": (groups.count, groups.keep) if groups else (1, 1),
        "scale": scalars["routed_scaling_factor"],
        "renormalize": scalars["renormalize"],
    }
    assert stated == published, f"specs/{name}.yaml states {stated}; {MODELS[name].name} publishes {published}"


@pytest.mark.parametrize("name", ROUTERS)
def test_bench_baseline_is_the_model(name):
    """bench/model_routing.py (the torch.compile baseline, run where transformers is not installed)
    routes as transformers does."""
    plan = PLANS[name]
    e = plan.spec.constants["num_experts"]
    x = _logits(e, torch.float32, seed=3)
    bias = torch.randn(e, generator=torch.Generator().manual_seed(5)) * 0.1
    (w, ids), (w_model, ids_model) = (
        _by_id(*model_routing.ROUTERS[name](x, bias)),
        _by_id(*MODELS[name].route(x, bias if "bias" in plan.spec.dtypes.axes else None)),
    )
    assert torch.equal(ids, ids_model)
    torch.testing.assert_close(w, w_model, **TOLERANCE)
