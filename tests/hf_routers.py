"""The routers of the models themselves, from Hugging Face transformers (a test dependency only).

Each function runs the model's own router module (the class its MoE block calls) on given router
logits: the module is built from a tiny config with hidden_size = E and its weight set to the
identity, so F.linear(logits, I) gives the logits back bit for bit in fp32 (every product is x * 1
or x * 0), and everything after it (scoring, bias, groups, top-K, renormalization, scaling) is the
model's code. Each returns (weights fp32 [M, K], ids int64 [M, K]) in the order the model returns.
Keep the logits finite: inf * 0 is NaN inside the identity matmul.

The classes and their semantics, read from transformers 5.x: docs/kernels.md §3 (routers).
"""

from __future__ import annotations

import functools

import torch
from torch.overrides import TorchFunctionMode


def _identity(module: torch.nn.Module, bias: torch.Tensor | None = None) -> torch.nn.Module:
    with torch.no_grad():
        module.weight.copy_(torch.eye(*module.weight.shape, dtype=module.weight.dtype))
        if bias is not None:
            module.bias.copy_(bias)
    return module.eval()


class _TopkCalls(TorchFunctionMode):
    """Records what every torch.topk returns inside the block (Llama-4's router returns no ids)."""

    def __init__(self):
        super().__init__()
        self.results = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in (torch.topk, torch.Tensor.topk):
            self.results.append(out)
        return out


@functools.cache
def _deepseek_v3(e, k, n_group, topk_group, scale):
    from transformers.models.deepseek_v3.configuration_deepseek_v3 import DeepseekV3Config
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3TopkRouter

    cfg = DeepseekV3Config(hidden_size=e, n_routed_experts=e, num_experts_per_tok=k, n_group=n_group,
                           topk_group=topk_group, norm_topk_prob=True, routed_scaling_factor=scale,
                           num_hidden_layers=1)  # fmt: skip
    return _identity(DeepseekV3TopkRouter(cfg))


def _with_correction_bias(router, logits, bias):
    """A router that holds its selection bias as `e_score_correction_bias`, called on the logits."""
    with torch.no_grad():
        router.e_score_correction_bias.copy_(bias)
        _, w, ids = router(logits)
    return w.float(), ids


def deepseek_v3(logits, bias, k, n_group, topk_group, scale):
    """DeepseekV3TopkRouter (DeepSeek-V3/R1; Kimi-K2 is this architecture with one group)."""
    return _with_correction_bias(_deepseek_v3(logits.shape[1], k, n_group, topk_group, scale), logits, bias)


@functools.cache
def _glm45(e, k, scale):
    from transformers.models.glm4_moe.configuration_glm4_moe import Glm4MoeConfig
    from transformers.models.glm4_moe.modeling_glm4_moe import Glm4MoeTopkRouter

    cfg = Glm4MoeConfig(hidden_size=e, n_routed_experts=e, num_experts_per_tok=k, n_group=1, topk_group=1,
                        norm_topk_prob=True, routed_scaling_factor=scale, num_hidden_layers=1)  # fmt: skip
    return _identity(Glm4MoeTopkRouter(cfg))


def glm45(logits, bias, k, scale):
    return _with_correction_bias(_glm45(logits.shape[1], k, scale), logits, bias)


@functools.cache
def _deepseek_v4(e, k, scale):
    from transformers.models.deepseek_v4.configuration_deepseek_v4 import DeepseekV4Config
    from transformers.models.deepseek_v4.modeling_deepseek_v4 import DeepseekV4TopKRouter

    cfg = DeepseekV4Config(hidden_size=e, n_routed_experts=e, num_experts_per_tok=k, scoring_func="sqrtsoftplus",
                           routed_scaling_factor=scale, num_hidden_layers=4, vocab_size=1000)  # fmt: skip
    return _identity(DeepseekV4TopKRouter(cfg))


def deepseek_v4(logits, bias, k, scale):
    """DeepseekV4TopKRouter: the score-routed layers (the first ones route by a hash table)."""
    return _with_correction_bias(_deepseek_v4(logits.shape[1], k, scale), logits, bias)


@functools.cache
def _minimax_m2(e, k):
    from transformers.models.minimax_m2.configuration_minimax_m2 import MiniMaxM2Config
    from transformers.models.minimax_m2.modeling_minimax_m2 import MiniMaxM2TopKRouter

    return _identity(MiniMaxM2TopKRouter(MiniMaxM2Config(hidden_size=e, num_local_experts=e, num_experts_per_tok=k)))


def minimax_m2(logits, bias, k):
    """MiniMaxM2TopKRouter: the block passes its correction bias in."""
    with torch.no_grad():
        _, w, ids = _minimax_m2(logits.shape[1], k)(logits, bias)
    return w.float(), ids


@functools.cache
def _qwen3(e, k, next_model):
    if next_model:
        from transformers.models.qwen3_next.configuration_qwen3_next import Qwen3NextConfig as Config
        from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextTopKRouter as Router
    else:
        from transformers.models.qwen3_moe.configuration_qwen3_moe import Qwen3MoeConfig as Config
        from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeTopKRouter as Router
    # norm_topk_prob: the published checkpoints set it (Qwen3MoeConfig's own default is False)
    return _identity(Router(Config(hidden_size=e, num_experts=e, num_experts_per_tok=k, norm_topk_prob=True)))


def qwen3_moe(logits, k):
    with torch.no_grad():
        _, w, ids = _qwen3(logits.shape[1], k, False)(logits)
    return w.float(), ids


def qwen3_next(logits, k):
    with torch.no_grad():
        _, w, ids = _qwen3(logits.shape[1], k, True)(logits)
    return w.float(), ids


@functools.cache
def _mixtral(e, k):
    from transformers.models.mixtral.configuration_mixtral import MixtralConfig
    from transformers.models.mixtral.modeling_mixtral import MixtralTopKRouter

    return _identity(MixtralTopKRouter(MixtralConfig(hidden_size=e, num_local_experts=e, num_experts_per_tok=k)))


def mixtral(logits, k):
    with torch.no_grad():
        _, w, ids = _mixtral(logits.shape[1], k)(logits)
    return w.float(), ids


@functools.cache
def _gpt_oss(e, k):
    from transformers.models.gpt_oss.configuration_gpt_oss import GptOssConfig
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssTopKRouter

    router = GptOssTopKRouter(GptOssConfig(hidden_size=e, num_local_experts=e, num_experts_per_tok=k))
    return _identity(router, torch.zeros(e))


def gpt_oss(logits, k):
    """GptOssTopKRouter with its Linear bias zero: k3gen's kernel takes the logits after that Linear."""
    with torch.no_grad():
        _, w, ids = _gpt_oss(logits.shape[1], k)(logits)
    return w.float(), ids


@functools.cache
def _llama4(e, k):
    from transformers.models.llama4.configuration_llama4 import Llama4TextConfig
    from transformers.models.llama4.modeling_llama4 import Llama4Router

    return _identity(Llama4Router(Llama4TextConfig(hidden_size=e, num_local_experts=e, num_experts_per_tok=k)))


def llama4(logits, k):
    """Llama4Router returns dense scores [M, E] (sigmoid of the picked logits, 0 elsewhere) and the
    logits; the ids are those of its own topk call."""
    calls = _TopkCalls()
    with torch.no_grad(), calls:
        dense, _ = _llama4(logits.shape[1], k)(logits)
    (_, ids), *rest = calls.results
    assert not rest, "Llama4Router called topk more than once"
    return dense.gather(1, ids).float(), ids


@functools.cache
def _ernie45(e, k, norm_min):
    from transformers.models.ernie4_5_moe.configuration_ernie4_5_moe import Ernie4_5_MoeConfig
    from transformers.models.ernie4_5_moe.modeling_ernie4_5_moe import Ernie4_5_MoeTopKRouter

    return _identity(Ernie4_5_MoeTopKRouter(Ernie4_5_MoeConfig(hidden_size=e, moe_num_experts=e, moe_k=k,
                                                               moe_norm_min=norm_min)))  # fmt: skip


def ernie45(logits, bias, k, norm_min):
    """Ernie4_5_MoeTopKRouter: the bias (moe_statics) is added to the probabilities for selection."""
    router = _ernie45(logits.shape[1], k, norm_min)
    with torch.no_grad():
        router.moe_statics.e_score_correction_bias.copy_(bias.view(1, -1))
        _, w, ids = router(logits)
    return w.float(), ids
