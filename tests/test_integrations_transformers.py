"""use_k3gen_routing on every transformers MoE architecture k3gen routes (k3gen/integrations/transformers.py).

Each model is built from its transformers config class with the published expert count, top-K and
grouping, tiny hidden sizes and random weights (tests/hf_models.py). On the CPU: the swap (which
router gets which family), the refusals, the restore, and that a kernel call without a GPU fails
with its one-line reason. The equivalence test runs the stock and the swapped routers and MoE
blocks on the same inputs with the families' oracle in place of the kernels (on the CPU, anywhere)
and with the kernels themselves (on a GPU the families target; skipped without one): the same
expert sets on every row and, by docs/kernels.md §3, the weights (and so the block outputs) within
4e-6 relative of the model's code, whose sums run in torch's order, not the kernels' fixed one.
Needs torch, transformers and pytest only (no pydantic: it runs on the device as it is).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import sys
import types
from pathlib import Path

import pytest
import torch

import k3kernels
from k3gen import runtime as rt
from k3gen.integrations import transformers as k3t
from k3gen.oracles import route_topk as oracle

ROOT = Path(__file__).resolve().parents[1]
IN_CI = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")
try:
    import hf_models
    import transformers  # noqa: F401
except ImportError:  # CI installs it (pyproject's test extra): a missing one fails there
    if IN_CI:
        raise
    pytest.skip("transformers is not installed (pip install -e '.[test]')", allow_module_level=True)

ARCHS = list(hf_models.ARCHITECTURES)
# Weights: the contract with the models' own code (docs/kernels.md §3, tests/test_routers_hf.py).
WEIGHTS = {"rtol": 4e-6, "atol": 1e-7}
# MoE block outputs: sums of K experts' outputs scaled by those weights, in fp32.
OUTPUTS = {"rtol": 2e-5, "atol": 1e-6}
ON_GPU = torch.cuda.is_available()


def _generated_test(family: str):
    """generated/tests/test_<family>.py: the oracle's view of the spec (no pydantic needed)."""
    sys.path.insert(0, str(ROOT / "generated" / "tests"))
    try:
        return importlib.import_module(f"test_{family}")
    finally:
        sys.path.pop(0)


def _oracle_family(family: str):
    """A stand-in for k3kernels.<family> whose call is the family's oracle (any device, any M)."""
    real = getattr(k3kernels, family)
    call = getattr(real, family)
    variants = {v["score"]: v for v in _generated_test(family).VARIANTS}

    @functools.wraps(call)
    def route(*args, **kwargs):
        bound = inspect.signature(call).bind(*args, **kwargs)
        bound.apply_defaults()
        a = dict(bound.arguments)
        return oracle.reference(variants[rt.dtype_name(a["scores"].dtype)], **a)

    return types.SimpleNamespace(num_experts=real.num_experts, top_k=real.top_k, **{family: route})


class OracleKernels:
    """The generated package's face, every family's call replaced by its oracle."""

    def __getattr__(self, name):
        return _oracle_family(name)


def _routers(model):
    return [(p, m) for p, m in model.named_modules() if type(m).__name__ in k3t.ROUTERS]


@functools.cache
def _model(name: str):
    return hf_models.build(name)


@pytest.mark.parametrize("name", ARCHS)
def test_every_router_gets_its_family(name):
    model = hf_models.build(name)
    report = k3t.use_k3gen_routing(model, verbose=False)
    try:
        routers = _routers(model)
        assert routers, f"{name}: the tiny model has no MoE router"
        assert [s.path for s in report.swapped] == [p for p, _ in routers] and not report.refused
        assert {s.family for s in report.swapped} == {hf_models.FAMILY[name]}
        assert all(m.k3gen_family == hf_models.FAMILY[name] for _, m in routers)
    finally:
        assert k3t.restore_stock_routing(model) == len(report.swapped)
    assert all("forward" not in vars(m) for _, m in _routers(model))


@pytest.mark.skipif(ON_GPU, reason="the CPU's refusal of a kernel call")
@pytest.mark.parametrize("name", ["deepseek_v3", "qwen3_moe", "llama4"])
def test_a_kernel_call_without_a_gpu_fails_with_one_line(name):
    model = hf_models.build(name)
    k3t.use_k3gen_routing(model, verbose=False)
    family = hf_models.FAMILY[name]
    with pytest.raises(rt.K3UnsupportedError) as err, torch.no_grad():
        model(torch.randint(0, 128, (1, 4)))
    assert str(err.value) == f"{family}: scores must be on a CUDA device, got cpu"


def test_restore_gives_the_stock_outputs_back():
    model, ids = hf_models.build("mixtral"), torch.randint(0, 128, (1, 6))
    with torch.no_grad():
        before = model(ids).logits
        k3t.use_k3gen_routing(model, verbose=False)
        k3t.restore_stock_routing(model)
        assert torch.equal(model(ids).logits, before)


@pytest.mark.parametrize(
    ("name", "changes", "reason"),
    [
        ("deepseek_v3", {"n_routed_experts": 64},
         "route_deepseek_v3 has 256 experts, the router 64; route_kimi_k2 has 384 experts, the router 64"),
        ("deepseek_v3", {"n_group": 4, "topk_group": 2},
         "route_deepseek_v3 keeps 4 of 8 expert groups, the router 2 of 4"),
        ("qwen3_moe", {"num_experts_per_tok": 4}, "route_qwen3_moe picks top-8, the router top-4"),
        ("glm4_moe", {"n_group": 8, "topk_group": 4}, "route_glm45 keeps 1 of 1 expert groups, the router 4 of 8"),
        ("ernie4_5_moe", {"moe_norm_min": 1e-6}, "moe_norm_min is 1e-06; route_ernie45 clamps the sum at 1e-12"),
    ],
)  # fmt: skip
def test_a_router_no_family_serves_is_refused_with_the_reason(name, changes, reason):
    model = hf_models.build(name, **changes)
    with pytest.raises(k3t.RoutingRefused) as err:
        k3t.use_k3gen_routing(model)
    assert reason in str(err.value) and "nothing swapped" in str(err.value)
    assert all("forward" not in vars(m) for _, m in _routers(model)), "a refused model was partly swapped"


def test_strict_false_swaps_the_routers_that_match_and_lists_the_rest():
    model = hf_models.build("mixtral")
    (p0, r0), (p1, _) = _routers(model)
    r0.top_k = 1  # as if layer 0 routed top-1
    with pytest.raises(k3t.RoutingRefused, match="strict=False swaps the rest"):
        k3t.use_k3gen_routing(model)
    report = k3t.use_k3gen_routing(model, strict=False, verbose=False)
    assert [s.path for s in report.swapped] == [p1]
    assert [(r.path, r.reason) for r in report.refused] == [(p0, "route_mixtral picks top-2, the router top-1")]
    assert "forward" not in vars(r0)


def test_a_model_without_a_supported_router_is_refused():
    with pytest.raises(k3t.RoutingRefused, match="no router k3gen routes"):
        k3t.use_k3gen_routing(torch.nn.Sequential(torch.nn.Linear(4, 4)))


def test_the_report_prints_what_was_swapped(capsys):
    k3t.use_k3gen_routing(hf_models.build("qwen3_moe"))
    out = capsys.readouterr().out
    assert "Qwen3MoeForCausalLM: 1 routers swapped, 0 refused" in out
    assert "model.layers.1.mlp.gate (Qwen3MoeTopKRouter) -> k3kernels.route_qwen3_moe" in out


def test_the_router_classes_exist_with_the_forward_the_table_reads():
    """Each class of ROUTERS is in transformers, and its forward takes what the swapped one passes on."""
    import transformers.models as models

    found = {}
    for module in ("deepseek_v3", "glm4_moe", "deepseek_v4", "minimax_m2", "qwen3_moe", "qwen3_next", "mixtral",
                   "gpt_oss", "llama4", "ernie4_5_moe"):  # fmt: skip
        code = importlib.import_module(f"{models.__name__}.{module}.modeling_{module}")
        found |= {n: c for n, c in vars(code).items() if n in k3t.ROUTERS}
    assert sorted(found) == sorted(k3t.ROUTERS)
    for name, cls in found.items():
        params = list(inspect.signature(cls.forward).parameters)
        assert params[:2] == ["self", "hidden_states"], name
        assert len(params) == (3 if name == "MiniMaxM2TopKRouter" else 2), f"{name}.forward{params}"


def test_the_ernie_clamp_is_the_spec_s():
    assert _generated_test("route_ernie45").SPEC["routing"]["renorm_eps"] == 1e-12


# -- equivalence: the stock routers and MoE blocks against the swapped ones, on the same inputs


def _record(model, tokens: int, seed: int):
    """Run the stock model once on `tokens` tokens; return each router's and block's (args, output)."""
    calls = []
    blocks = hf_models.moe_blocks(model)
    routers = [m for b in blocks for n in ("gate", "router") if (m := getattr(b, n, None)) is not None]
    hooks = [m.register_forward_hook(lambda m, a, out: calls.append((m, a, out))) for m in routers + blocks]
    ids = torch.randint(0, 128, (1, tokens), generator=torch.Generator().manual_seed(seed))
    try:
        with torch.no_grad():
            model(ids.to(next(model.parameters()).device))
    finally:
        for h in hooks:
            h.remove()
    return calls


def _ids_by_row(out):
    """The expert ids a router's output picks, sorted per row (the models' top-K order is not defined)."""
    if isinstance(out, tuple) and len(out) == 3:
        return out[2].to(torch.int64).sort(dim=1).values
    dense = out[0]  # Llama4Router: dense scores, sigmoid of the picks and 0 elsewhere
    return (dense != 0).nonzero()[:, 1].view(dense.shape[0], -1)


def _weights_by_row(out):
    if isinstance(out, tuple) and len(out) == 3:
        _, order = out[2].to(torch.int64).sort(dim=1)
        return out[1].gather(1, order)
    return out[0]


def _compare(name: str, kernels, device: str, tokens: int):
    model = _model(name).to(device)
    try:
        calls = _record(model, tokens, seed=tokens)
        report = k3t.use_k3gen_routing(model, kernels=kernels, verbose=False)
        assert report.swapped
        with torch.no_grad():
            for module, args, stock in calls:
                got = module(*args)
                if isinstance(got, torch.Tensor):  # a MoE block
                    torch.testing.assert_close(got, stock, **OUTPUTS, msg=lambda m: f"{name} block: {m}")
                    continue
                if isinstance(stock, tuple) and len(stock) == 2 and isinstance(got[0], torch.Tensor):
                    got, stock = (got[0], got[1]), (stock[0], stock[1])
                assert torch.equal(_ids_by_row(got), _ids_by_row(stock)), f"{name}: other experts"
                assert got[-2 if len(got) == 3 else 0].dtype == stock[-2 if len(stock) == 3 else 0].dtype
                torch.testing.assert_close(_weights_by_row(got), _weights_by_row(stock), **WEIGHTS)
    finally:
        k3t.restore_stock_routing(model)
        model.to("cpu")


@pytest.mark.parametrize("name", ARCHS)
def test_swapped_routing_matches_the_model_with_the_oracle(name):
    """The adapter's logits, bias, dtypes and output layout, with the oracle as the kernel."""
    _compare(name, OracleKernels(), "cpu", tokens=24)


@pytest.mark.skipif(not ON_GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("tokens", [1, 16, 300])
@pytest.mark.parametrize("name", ARCHS)
def test_swapped_routing_matches_the_model_on_the_gpu(name, tokens):
    family = getattr(k3kernels, hf_models.FAMILY[name])
    if not family.supported_hardware():
        pytest.skip(f"{family.FAMILY} does not target this GPU")
    _compare(name, None, "cuda", tokens)
