"""The vLLM and SGLang routing hooks (k3gen/integrations/engines.py).

Neither engine is installed here (both are heavy, GPU-only): the tests hold the hooks to the call
the engines' code makes, read from their sources (named below), call them exactly so, and on a GPU
compare what they return with the family's oracle, bit for bit as the generated tests do.
Needs torch and pytest only.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from pathlib import Path

import pytest
import torch

import k3kernels
from k3gen import runtime as rt
from k3gen.integrations import engines
from k3gen.oracles import route_topk as oracle

ROOT = Path(__file__).resolve().parents[1]
# The hook's parameters, in order, as both engines call it by keyword:
# vLLM vllm/model_executor/layers/fused_moe/router/custom_routing_router.py (ff8d577a) and its reference
# hook Llama4MoE.custom_routing_function(hidden_states, gating_output, topk, renormalize) in
# vllm/model_executor/models/llama4.py; SGLang python/sglang/srt/layers/moe/topk.py (06c48ca8), select_experts.
ENGINE_CALL = ["hidden_states", "gating_output", "topk", "renormalize"]
HOOKS = {"vllm": engines.vllm_routing_function, "sglang": engines.sglang_routing_function}
ROUTERS = ["route_qwen3_moe", "route_mixtral", "route_gpt_oss_120b", "route_deepseek_v3", "route_kimi_k2",
           "route_glm45", "route_minimax_m2", "route_ernie45", "route_llama4_maverick", "route_qwen3_next"]  # fmt: skip


def _needs_bias(family: str) -> bool:
    return "bias" in inspect.signature(getattr(getattr(k3kernels, family), family)).parameters


def _hook(engine: str, family: str, device="cpu", **kw):
    e = getattr(k3kernels, family).num_experts
    bias = None
    if _needs_bias(family):
        bias = torch.randn(e, generator=torch.Generator().manual_seed(1)).mul(0.1).to(device)
    return HOOKS[engine](family, bias=bias, **kw), bias


@pytest.mark.parametrize("engine", HOOKS)
@pytest.mark.parametrize("family", ROUTERS)
def test_the_hook_takes_the_engines_call(engine, family):
    hook, _ = _hook(engine, family)
    assert list(inspect.signature(hook).parameters) == ENGINE_CALL


def test_a_biased_family_needs_its_bias_and_an_unbiased_one_refuses_one():
    with pytest.raises(ValueError, match="route_deepseek_v3 selects with a bias"):
        engines.vllm_routing_function("route_deepseek_v3")
    with pytest.raises(ValueError, match="route_qwen3_moe selects without a bias"):
        engines.sglang_routing_function("route_qwen3_moe", bias=torch.zeros(128))


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU's refusal of a kernel call")
@pytest.mark.parametrize("engine", HOOKS)
def test_without_a_gpu_the_call_fails_with_one_line(engine):
    hook, _ = _hook(engine, "route_qwen3_moe")
    with pytest.raises(rt.K3UnsupportedError, match=r"^route_qwen3_moe: scores must be on a CUDA device, got cpu$"):
        hook(hidden_states=torch.zeros(4, 16), gating_output=torch.zeros(4, 128), topk=8, renormalize=True)


def _variants(family: str) -> dict:
    sys.path.insert(0, str(ROOT / "generated" / "tests"))
    try:
        return {v["score"]: v for v in importlib.import_module(f"test_{family}").VARIANTS}
    finally:
        sys.path.pop(0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("renormalize", [True, False])
@pytest.mark.parametrize("m", [1, 128, 1000])
@pytest.mark.parametrize("engine", HOOKS)
@pytest.mark.parametrize("family", ROUTERS)
def test_the_hook_routes_as_the_oracle(family, engine, m, renormalize):
    module = getattr(k3kernels, family)
    if not module.supported_hardware():
        pytest.skip(f"{family} does not target this GPU")
    hook, bias = _hook(engine, family, "cuda")
    gen = torch.Generator(device="cpu").manual_seed(m)
    for score, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        logits = torch.randn(m, module.num_experts, generator=gen).mul(2).to("cuda", dtype)
        got = hook(hidden_states=torch.zeros(m, 16, device="cuda", dtype=dtype), gating_output=logits,
                   topk=module.top_k, renormalize=renormalize)  # fmt: skip
        variant = _variants(family)[score]
        scale = inspect.signature(getattr(module, family)).parameters["routed_scaling_factor"].default
        want = oracle.reference(variant, logits, bias, module.top_k, renormalize=int(renormalize),
                                routed_scaling_factor=scale, **_groups(module, family))  # fmt: skip
        oracle.check(got, want, variant)


def _groups(module, family) -> dict:
    params = inspect.signature(getattr(module, family)).parameters
    return {n: params[n].default for n in ("num_expert_group", "topk_group")}
