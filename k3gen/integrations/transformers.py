"""Route a loaded transformers MoE model through k3kernels: `use_k3gen_routing(model)`.

Each router module of a supported class (ROUTERS; the classes and their code read from
transformers 5.x, transformers/models/<model>/modeling_<model>.py, the same classes
tests/test_routers_hf.py checks the oracles against) is matched against the bundled families that
can serve it: the compiled-in expert count, top-K and grouping (the wrapper's `num_experts`,
`top_k` and its group defaults) must be the router's, plus any per-class condition (ERNIE's
norm_min). The router's renormalize and scaling factor are call arguments of the kernels and pass
through. A router that matches no family is refused with the reason, and then nothing is swapped
(strict=True): the model never routes half through k3gen without saying so.

A swap replaces the router's `forward` on the instance (its parameters, buffers, state_dict and
`.to()` stay the stock module's); `restore_stock_routing` removes it. The new forward computes the
logits exactly as the stock one (same F.linear, same dtypes), routes them with the family and
returns what the stock forward returns: the same tuple layout, weights in the dtype the stock code
casts them to, ids int64. Kernel calls refuse what the kernels do not cover (a CPU tensor, an
uncovered dtype) with K3UnsupportedError's one-line reason; nothing falls back to torch silently.
"""

from __future__ import annotations

import importlib
import inspect
import types
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F


class RoutingRefused(ValueError):
    """A model (or one of its routers) that no bundled family serves; the message says why, per router."""


@dataclass(frozen=True)
class Numbers:
    """What a router computes, read from the module (the values its forward uses)."""

    num_experts: int
    top_k: int
    groups: tuple[int, int]  # (groups, groups kept); (1, 1) without grouping
    renormalize: int
    scale: float


@dataclass(frozen=True)
class Router:
    """One transformers router class: the families that may serve it and how its forward reads."""

    families: tuple[str, ...]
    numbers: Callable[[torch.nn.Module], Numbers]
    logits: Callable  # (router, hidden_states, *forward args) -> logits [M, E], as the stock forward
    bias: Callable  # (router, hidden_states, *forward args) -> fp32 [E] or None (the family takes no bias)
    outputs: Callable  # (router, logits, weights fp32, ids int64, hidden_states) -> the stock return value
    check: Callable = lambda router: None  # a reason this router's code differs from the families', or None


def _flat(router, h):
    return h.reshape(-1, router.hidden_dim)


def _logits_fp32(router, h, *_):
    # DeepseekV3TopkRouter / Glm4MoeTopkRouter.forward: F.linear in fp32
    return F.linear(_flat(router, h).type(torch.float32), router.weight.type(torch.float32))


def _logits_model_dtype(router, h, *_):
    # Qwen3MoeTopKRouter / Qwen3NextTopKRouter / MixtralTopKRouter / DeepseekV4TopKRouter.forward
    return F.linear(_flat(router, h), router.weight)


def _logits_minimax(router, h, *_):
    return F.linear(_flat(router, h).to(router.weight.dtype), router.weight)  # MiniMaxM2TopKRouter.forward


def _logits_gpt_oss(router, h, *_):
    return F.linear(h, router.weight, router.bias)  # GptOssTopKRouter.forward: the Linear bias is in the logits


def _logits_llama4(router, h, *_):
    return F.linear(h, router.weight)  # Llama4Router is an nn.Linear without bias


def _logits_ernie(router, h, *_):
    # Ernie4_5_MoeTopKRouter.forward: fp32 with autocast off
    with torch.autocast(device_type=h.device.type, enabled=False):
        return F.linear(h.float(), router.weight.float())


def _correction_bias(router, *_):
    return router.e_score_correction_bias.float()  # bf16 -> fp32 is exact; the stock code adds in fp32


def _passed_bias(router, h, bias):
    return bias.float()  # MiniMaxM2SparseMoeBlock passes its buffer to the router


def _ernie_bias(router, *_):
    return router.moe_statics.e_score_correction_bias.float().reshape(-1)


def _no_bias(router, *_):
    return None


def _triple(dtype_of):
    """(router_logits, weights, ids): the stock return of every router but Llama-4's."""

    def outputs(router, logits, w, ids, h):
        return logits, w.to(dtype_of(logits, h)), ids

    return outputs


def _llama4_outputs(router, logits, w, ids, h):
    # Llama4Router.forward: (scores [M, E]: sigmoid of the picks, 0 elsewhere, in the logits' dtype, logits)
    dense = torch.zeros_like(logits).scatter_(1, ids, w.to(logits.dtype))
    return dense, logits


def _grouped(router) -> Numbers:
    return Numbers(router.num_experts, router.top_k, (router.num_group, router.topk_group),
                   int(bool(router.norm_topk_prob)), float(router.routed_scaling_factor))  # fmt: skip


def _plain(renormalize: Callable[[torch.nn.Module], int]):
    def numbers(router) -> Numbers:
        return Numbers(router.num_experts, router.top_k, (1, 1), renormalize(router), 1.0)

    return numbers


def _ernie_check(router):
    # the family's renormalization is max(sum, 1e-12) (specs/route_ernie45.yaml, routing.renormalize: clamp)
    if router.norm_min != 1e-12:
        return f"moe_norm_min is {router.norm_min}; route_ernie45 clamps the sum at 1e-12"
    return None


def _v4_check(router):
    # DeepseekV4TopKRouter scores with ACT2FN[config.scoring_func]; route_deepseek_v4_flash is sqrt(softplus)
    name = type(router.score_fn).__name__
    return None if name == "SqrtSoftplusActivation" else f"scoring {name}; route_deepseek_v4_flash is sqrt(softplus)"


_FP32 = _triple(lambda logits, h: torch.float32)
_LOGITS_DTYPE = _triple(lambda logits, h: logits.dtype)
# transformers class name -> how it routes (transformers 5.x, models/<model>/modeling_<model>.py)
ROUTERS: dict[str, Router] = {
    "DeepseekV3TopkRouter": Router(("route_deepseek_v3", "route_kimi_k2"), _grouped, _logits_fp32,
                                   _correction_bias, _FP32),
    "Glm4MoeTopkRouter": Router(("route_glm45",), _grouped, _logits_fp32, _correction_bias, _FP32),
    "DeepseekV4TopKRouter": Router(("route_deepseek_v4_flash",),
                                   lambda r: Numbers(r.num_experts, r.top_k, (1, 1), 1, float(r.routed_scaling_factor)),
                                   _logits_model_dtype, _correction_bias, _LOGITS_DTYPE, _v4_check),
    "MiniMaxM2TopKRouter": Router(("route_minimax_m2",), _plain(lambda r: 1), _logits_minimax, _passed_bias, _FP32),
    "Qwen3MoeTopKRouter": Router(("route_qwen3_moe",), _plain(lambda r: int(bool(r.norm_topk_prob))),
                                 _logits_model_dtype, _no_bias, _LOGITS_DTYPE),
    "Qwen3NextTopKRouter": Router(("route_qwen3_next",), _plain(lambda r: int(bool(r.norm_topk_prob))),
                                  _logits_model_dtype, _no_bias, _LOGITS_DTYPE),
    "MixtralTopKRouter": Router(("route_mixtral",), _plain(lambda r: 1), _logits_model_dtype, _no_bias, _FP32),
    "GptOssTopKRouter": Router(("route_gpt_oss_120b",), _plain(lambda r: 0), _logits_gpt_oss, _no_bias,
                               _LOGITS_DTYPE),
    "Llama4Router": Router(("route_llama4_maverick",), _plain(lambda r: 0), _logits_llama4, _no_bias,
                           _llama4_outputs),
    "Ernie4_5_MoeTopKRouter": Router(("route_ernie45",), _plain(lambda r: 1), _logits_ernie, _ernie_bias,
                                     _triple(lambda logits, h: h.dtype), _ernie_check),
}  # fmt: skip
# Router-like classes of transformers that k3gen knowingly leaves alone, and why.
NOT_ROUTED = {
    "DeepseekV4HashRouter": "hash-routed layer: experts come from a token-id table, not a top-K",
}


@dataclass(frozen=True)
class Family:
    """What a family compiles in, read from its generated wrapper (module constants and defaults)."""

    name: str
    num_experts: int
    top_k: int
    groups: tuple[int, int]
    call: Callable
    takes_bias: bool


def family_of(kernels, name: str) -> Family:
    module = getattr(kernels, name)
    call = getattr(module, name)
    params = inspect.signature(call).parameters
    groups = (params["num_expert_group"].default, params["topk_group"].default)
    return Family(name, module.num_experts, module.top_k, groups, call, "bias" in params)


def mismatch(numbers: Numbers, family: Family) -> str | None:
    """Why `family` cannot route a router with these numbers, or None."""
    if numbers.num_experts != family.num_experts:
        return f"{family.name} has {family.num_experts} experts, the router {numbers.num_experts}"
    if numbers.top_k != family.top_k:
        return f"{family.name} picks top-{family.top_k}, the router top-{numbers.top_k}"
    if numbers.groups != family.groups:
        (g, kg), (fg, fkg) = numbers.groups, family.groups
        return f"{family.name} keeps {fkg} of {fg} expert groups, the router {kg} of {g}"
    return None


@dataclass(frozen=True)
class Swapped:
    path: str
    router: str
    family: str
    numbers: Numbers

    def __str__(self) -> str:
        n = self.numbers
        return (f"  {self.path} ({self.router}) -> k3kernels.{self.family} "
                f"(renormalize={n.renormalize}, routed_scaling_factor={n.scale:g})")  # fmt: skip


@dataclass(frozen=True)
class Refused:
    path: str
    router: str
    reason: str

    def __str__(self) -> str:
        return f"  {self.path} ({self.router}): {self.reason}"


@dataclass
class Report:
    """What use_k3gen_routing did: every router it found, swapped, refused or kept stock with the reason."""

    model: str
    swapped: list[Swapped] = field(default_factory=list)
    refused: list[Refused] = field(default_factory=list)
    kept: list[Refused] = field(default_factory=list)

    def __str__(self) -> str:
        lines = [f"k3gen routing for {self.model}: {len(self.swapped)} routers swapped, {len(self.refused)} refused"]
        lines += [str(s) for s in self.swapped]
        lines += ["refused (stock routing kept):", *map(str, self.refused)] if self.refused else []
        lines += ["not top-K routers (stock routing kept):", *map(str, self.kept)] if self.kept else []
        return "\n".join(lines)


def _plan(router: torch.nn.Module, kernels) -> tuple[Family | None, Numbers | None, str]:
    spec = ROUTERS[type(router).__name__]
    if (reason := spec.check(router)) is not None:
        return None, None, reason
    numbers = spec.numbers(router)
    reasons = []
    for name in spec.families:
        family = family_of(kernels, name)
        if (why := mismatch(numbers, family)) is None:
            return family, numbers, ""
        reasons.append(why)
    return None, numbers, "; ".join(reasons)


def _forward(spec: Router, family: Family, numbers: Numbers):
    scalars = {"renormalize": numbers.renormalize, "routed_scaling_factor": numbers.scale}

    def forward(self, hidden_states, *args):
        logits = spec.logits(self, hidden_states, *args)
        bias = spec.bias(self, hidden_states, *args)
        scores = logits if logits.is_contiguous() else logits.contiguous()
        head = (scores, bias) if family.takes_bias else (scores,)
        w, ids = family.call(*head, numbers.top_k, **scalars)
        return spec.outputs(self, logits, w, ids.long(), hidden_states)

    return forward


def _load_kernels(kernels):
    return importlib.import_module("k3kernels") if kernels is None else kernels


def plan_routing(model: torch.nn.Module, kernels=None) -> tuple[Report, list]:
    """The report use_k3gen_routing would give, and the (router, forward) pairs it would install."""
    kernels = _load_kernels(kernels)
    report, installs = Report(type(model).__name__), []
    for path, module in model.named_modules():
        name = type(module).__name__
        if name in NOT_ROUTED:
            report.kept.append(Refused(path, name, NOT_ROUTED[name]))
        if name not in ROUTERS:
            continue
        family, numbers, reason = _plan(module, kernels)
        if family is None:
            report.refused.append(Refused(path, name, reason))
            continue
        report.swapped.append(Swapped(path, name, family.name, numbers))
        installs.append((module, _forward(ROUTERS[name], family, numbers), family.name))
    return report, installs


def use_k3gen_routing(model: torch.nn.Module, *, kernels=None, strict: bool = True, verbose: bool = True) -> Report:
    """Swap the router of every supported MoE layer of `model` for its k3kernels family; return the report.

    `kernels`: the generated package (default `import k3kernels`), or the module
    `kernels.get_kernel(...)` loaded from a Hub package. Raises RoutingRefused, swapping nothing, when
    the model has no supported router or (strict=True) when any router matches no bundled family;
    with strict=False those keep their stock routing and the report lists them. Prints the report
    unless verbose=False.
    """
    report, installs = plan_routing(model, kernels)
    if not report.swapped and not report.refused:
        found = sorted({type(m).__name__ for m in model.modules() if type(m).__name__.endswith(("Router", "Gate"))})
        raise RoutingRefused(
            f"{report.model}: no router k3gen routes (supported: {', '.join(sorted(ROUTERS))}); "
            f"router-like modules found: {', '.join(found) or 'none'}"
        )
    if report.refused and (strict or not report.swapped):
        raise RoutingRefused(f"{report}\nnothing swapped" + ("; strict=False swaps the rest" if report.swapped else ""))
    for module, forward, family in installs:
        module.forward = types.MethodType(forward, module)
        module.k3gen_family = family
    if verbose:
        print(report)
    return report


def restore_stock_routing(model: torch.nn.Module) -> int:
    """Undo use_k3gen_routing: every swapped router runs its class's forward again. Returns how many."""
    restored = 0
    for module in model.modules():
        if "k3gen_family" in vars(module):
            del module.forward, module.k3gen_family
            restored += 1
    return restored
