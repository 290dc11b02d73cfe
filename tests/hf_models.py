"""Tiny transformers models of every architecture k3gen routes: the published expert count, top-K,
grouping and scaling (the numbers tests/test_routers_hf.py pins against the specs), and hidden sizes
small enough for a CPU, random weights, no download. transformers is a test dependency only.

`build(name, **changes)` gives the model in eval mode; `changes` overrides config fields (a test
that needs another E or K to see a refusal). `moe_blocks(model)` lists the MoE blocks in order.
"""

from __future__ import annotations

import importlib

import torch

# Small sizes every config takes: two layers (the second is MoE everywhere), few heads.
SMALL = dict(
    hidden_size=64,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=32,
    vocab_size=128,
    max_position_embeddings=64,
)

# name -> (config module, config class, the published router numbers in that config's own field names)
ARCHITECTURES = {
    "deepseek_v3": ("deepseek_v3", "DeepseekV3Config", dict(
        n_routed_experts=256, num_experts_per_tok=8, n_group=8, topk_group=4, routed_scaling_factor=2.5,
        norm_topk_prob=True, moe_intermediate_size=16, first_k_dense_replace=1, n_shared_experts=1,
        q_lora_rank=16, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8, head_dim=8,
        num_key_value_heads=2)),
    "kimi_k2": ("deepseek_v3", "DeepseekV3Config", dict(
        n_routed_experts=384, num_experts_per_tok=8, n_group=1, topk_group=1, routed_scaling_factor=2.827,
        norm_topk_prob=True, moe_intermediate_size=16, first_k_dense_replace=1, n_shared_experts=1,
        q_lora_rank=16, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8, head_dim=8,
        num_key_value_heads=2)),
    "glm4_moe": ("glm4_moe", "Glm4MoeConfig", dict(
        n_routed_experts=160, num_experts_per_tok=8, n_group=1, topk_group=1, routed_scaling_factor=2.5,
        norm_topk_prob=True, moe_intermediate_size=16, first_k_dense_replace=1, n_shared_experts=1)),
    "minimax_m2": ("minimax_m2", "MiniMaxM2Config", dict(num_local_experts=256, num_experts_per_tok=8)),
    "qwen3_moe": ("qwen3_moe", "Qwen3MoeConfig", dict(
        num_experts=128, num_experts_per_tok=8, norm_topk_prob=True, moe_intermediate_size=16, decoder_sparse_step=1,
        mlp_only_layers=[0])),
    "qwen3_next": ("qwen3_next", "Qwen3NextConfig", dict(
        num_experts=512, num_experts_per_tok=10, norm_topk_prob=True, moe_intermediate_size=16,
        shared_expert_intermediate_size=16, layer_types=["linear_attention", "full_attention"],
        linear_num_value_heads=2, linear_num_key_heads=2, linear_key_head_dim=16, linear_value_head_dim=16)),
    "mixtral": ("mixtral", "MixtralConfig", dict(num_local_experts=8, num_experts_per_tok=2)),
    "gpt_oss": ("gpt_oss", "GptOssConfig", dict(num_local_experts=128, num_experts_per_tok=4)),
    "llama4": ("llama4", "Llama4TextConfig", dict(
        num_local_experts=128, num_experts_per_tok=1, intermediate_size_mlp=64, interleave_moe_layer_step=1)),
    "ernie4_5_moe": ("ernie4_5_moe", "Ernie4_5_MoeConfig", dict(
        moe_num_experts=64, moe_k=6, moe_norm_min=1e-12, moe_intermediate_size=16, moe_layer_start_index=1,
        moe_num_shared_experts=1)),
}  # fmt: skip
# The family each architecture's router should get (docs/kernels.md §3; tests/test_routers_hf.py).
FAMILY = {
    "deepseek_v3": "route_deepseek_v3",
    "kimi_k2": "route_kimi_k2",
    "glm4_moe": "route_glm45",
    "minimax_m2": "route_minimax_m2",
    "qwen3_moe": "route_qwen3_moe",
    "qwen3_next": "route_qwen3_next",
    "mixtral": "route_mixtral",
    "gpt_oss": "route_gpt_oss_120b",
    "llama4": "route_llama4_maverick",
    "ernie4_5_moe": "route_ernie45",
}


def config(name: str, **changes):
    module, cls, router = ARCHITECTURES[name]
    config_class = getattr(importlib.import_module(f"transformers.models.{module}.configuration_{module}"), cls)
    return config_class(**{**SMALL, **router, **changes})


def build(name: str, seed: int = 0, **changes) -> torch.nn.Module:
    """The model with random weights (the routers' too: transformers initializes some to zero), in eval mode."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config(name, **changes))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
        for n, b in model.named_buffers():
            if n.endswith("e_score_correction_bias"):  # a trained model's selection bias is not zero
                b.copy_(torch.randn(b.shape, generator=gen) * 0.01)
    return model.eval()


def moe_blocks(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The modules that hold the router (its parent), in model order."""
    names = ("gate", "router")
    return [m for m in model.modules() if any(type(getattr(m, n, None)).__name__.endswith(_ROUTER) for n in names)]


_ROUTER = ("Router", "TopkRouter", "TopKRouter")
