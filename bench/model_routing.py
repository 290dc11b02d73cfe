"""The models' own routing code in plain torch, for torch.compile baselines on a GPU machine without
transformers: each function is the body of the model's router forward in transformers 5.x after its
router Linear (from the logits on), operation for operation. tests/test_routers_hf.py checks each one
against transformers itself on the CPU.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def deepseek_v3(logits, bias, top_k, n_group, topk_group, scale):
    """DeepseekV3TopkRouter.forward (also Kimi-K2 with one group, GLM-4.5's Glm4MoeTopkRouter)."""
    scores = logits.float().sigmoid()
    choice = scores + bias
    m, e = choice.shape
    group_scores = choice.view(m, n_group, e // n_group).topk(2, dim=-1)[0].sum(dim=-1)
    group_idx = torch.topk(group_scores, k=topk_group, dim=-1, sorted=False)[1]
    group_mask = torch.zeros_like(group_scores).scatter_(1, group_idx, 1)
    score_mask = group_mask.unsqueeze(-1).expand(m, n_group, e // n_group).reshape(m, e)
    choice = choice.masked_fill(~score_mask.bool(), float("-inf"))
    ids = torch.topk(choice, k=top_k, dim=-1, sorted=False)[1]
    w = scores.gather(1, ids)
    w = w / (w.sum(dim=-1, keepdim=True) + 1e-20)
    return w * scale, ids


def deepseek_v4(logits, bias, top_k, scale):
    """DeepseekV4TopKRouter.forward: sqrt(softplus) scores."""
    scores = F.softplus(logits.float()).sqrt()
    ids = torch.topk(scores + bias, top_k, dim=-1, sorted=False).indices
    w = scores.gather(1, ids)
    w = w / (w.sum(dim=-1, keepdim=True) + 1e-20)
    return w * scale, ids


def minimax_m2(logits, bias, top_k):
    """MiniMaxM2TopKRouter.forward."""
    scores = torch.sigmoid(logits.float())
    ids = torch.topk(scores + bias, top_k, dim=-1, sorted=False)[1]
    w = scores.gather(1, ids)
    return w / w.sum(dim=-1, keepdim=True), ids


def softmax_topk(logits, top_k):
    """Qwen3MoeTopKRouter / Qwen3NextTopKRouter (norm_topk_prob) and MixtralTopKRouter.forward."""
    probs = F.softmax(logits, dtype=torch.float, dim=-1)
    w, ids = torch.topk(probs, top_k, dim=-1)
    return w / w.sum(dim=-1, keepdim=True), ids


def gpt_oss(logits, top_k):
    """GptOssTopKRouter.forward after its Linear (whose bias is part of the logits)."""
    v, ids = torch.topk(logits, top_k, dim=-1)
    return F.softmax(v, dim=1, dtype=v.dtype), ids


def llama4(logits, top_k):
    """Llama4Router.forward: dense sigmoid scores of the top-K logits; (their weights, ids) here."""
    v, ids = torch.topk(logits, top_k, dim=1)
    dense = torch.full_like(logits, float("-inf")).scatter_(1, ids, v)
    dense = torch.sigmoid(dense.float()).to(dense.dtype)
    return dense.gather(1, ids), ids


def ernie45(logits, bias, top_k, norm_min=1e-12):
    """Ernie4_5_MoeTopKRouter.forward: the bias on the probabilities, selection only."""
    probs = F.softmax(logits.float(), dim=1, dtype=torch.float)
    ids = torch.topk(probs + bias, top_k, dim=-1)[1]
    w = torch.gather(probs, dim=-1, index=ids)
    return w / torch.clamp(w.sum(dim=-1, keepdim=True), min=norm_min), ids


def route_sigmoid_bias(logits, bias, top_k, scale):
    """The K3 router's reference (route_topk's contract: sigmoid + bias, renormalized, scaled)."""
    scores = torch.sigmoid(logits.float())
    ids = torch.topk(scores + bias, top_k, dim=-1)[1]
    w = scores.gather(1, ids)
    return w / w.sum(dim=-1, keepdim=True) * scale, ids


# kernel -> (the model's routing as a function of (logits, bias)); numbers as the specs state them.
ROUTERS = {
    "route_deepseek_v3": lambda x, b: deepseek_v3(x, b, 8, 8, 4, 2.5),
    "route_kimi_k2": lambda x, b: deepseek_v3(x, b, 8, 1, 1, 2.827),
    "route_glm45": lambda x, b: deepseek_v3(x, b, 8, 1, 1, 2.5),
    "route_minimax_m2": lambda x, b: minimax_m2(x, b, 8),
    "route_deepseek_v4_flash": lambda x, b: deepseek_v4(x, b, 6, 1.5),
    "route_qwen3_moe": lambda x, b: softmax_topk(x, 8),
    "route_qwen3_next": lambda x, b: softmax_topk(x, 10),
    "route_mixtral": lambda x, b: softmax_topk(x, 2),
    "route_gpt_oss_120b": lambda x, b: gpt_oss(x, 4),
    "route_llama4_maverick": lambda x, b: llama4(x, 1),
    "route_ernie45": lambda x, b: ernie45(x, b, 6),
    "route_topk": lambda x, b: route_sigmoid_bias(x, b, 16, 2.5),
    "route_topk_unsorted": lambda x, b: route_sigmoid_bias(x, b, 16, 2.5),
    "route_topk_e256": lambda x, b: route_sigmoid_bias(x, b, 8, 2.5),
}
