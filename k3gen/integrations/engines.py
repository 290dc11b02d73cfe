"""k3kernels as the engines' routing hooks: one function a user passes to vLLM or SGLang.

Both engines call a custom routing function the same way, by keyword, and take (weights, ids) back:

- vLLM: `FusedMoE(..., custom_routing_function=fn)`; CustomRoutingRouter._compute_routing calls
  `fn(hidden_states=..., gating_output=..., topk=self.top_k, renormalize=self.renormalize)` and
  casts the weights to fp32 (vllm/model_executor/layers/fused_moe/router/custom_routing_router.py
  at ff8d577a972bbcd9bc37b196343f5f9a86609ccb; the reference hook with that signature is
  Llama4MoE.custom_routing_function in vllm/model_executor/models/llama4.py, ids int32).
- SGLang: `TopK(top_k, custom_routing_function=fn, ...)`; select_experts calls
  `fn(hidden_states=..., gating_output=..., topk=..., renormalize=...)` and returns the pair as
  StandardTopKOutput's topk_weights and topk_ids (python/sglang/srt/layers/moe/topk.py at
  06c48ca8da0b2c8aac15df74a768e6a012444064).

Neither passes a selection bias, the expert groups or a scaling factor to the hook: a family that
selects with a bias takes the layer's bias tensor here, once, and the groups are compiled in. The
scaling factor is the family's default (its spec) unless given; pass routed_scaling_factor=1.0
where the engine scales the expert outputs itself.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable

import torch


def _routing_function(family: str, bias, routed_scaling_factor, kernels) -> Callable:
    kernels = importlib.import_module("k3kernels") if kernels is None else kernels
    call = getattr(getattr(kernels, family), family)
    params = inspect.signature(call).parameters
    takes_bias = "bias" in params
    if takes_bias and bias is None:
        raise ValueError(f"{family} selects with a bias: pass the layer's correction bias (fp32 [E]) as bias=")
    if not takes_bias and bias is not None:
        raise ValueError(f"{family} selects without a bias; leave bias= out")
    scale = params["routed_scaling_factor"].default if routed_scaling_factor is None else routed_scaling_factor
    head = (bias,) if takes_bias else ()

    def route(
        hidden_states: torch.Tensor, gating_output: torch.Tensor, topk: int, renormalize: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        scores = gating_output if gating_output.is_contiguous() else gating_output.contiguous()
        return call(scores, *head, topk, renormalize=int(renormalize), routed_scaling_factor=scale)

    route.__name__ = route.__qualname__ = f"k3gen_{family}"
    route.__doc__ = f"k3kernels.{family} as a custom routing function: (weights fp32 [M, K], ids int32 [M, K])."
    return route


def vllm_routing_function(
    family: str, *, bias: torch.Tensor | None = None, routed_scaling_factor: float | None = None, kernels=None
) -> Callable:
    """`custom_routing_function` for vLLM's FusedMoE: (hidden_states, gating_output, topk, renormalize)
    -> (topk_weights, topk_ids). `family`: a k3kernels router (route_qwen3_moe, ...); `kernels`:
    the generated package (default `import k3kernels`) or a module loaded from the Kernel Hub."""
    return _routing_function(family, bias, routed_scaling_factor, kernels)


def sglang_routing_function(
    family: str, *, bias: torch.Tensor | None = None, routed_scaling_factor: float | None = None, kernels=None
) -> Callable:
    """`custom_routing_function` for SGLang's TopK: the same call and return as vLLM's (see the module
    docstring for the source of each)."""
    return _routing_function(family, bias, routed_scaling_factor, kernels)
