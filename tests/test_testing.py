"""k3gen.oracles.testing, the helpers every generated test module calls, on the CPU: ids, seeds, the variant
table, refusals, and the op's fake outputs. The GPU halves run in generated/tests on a GPU."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from k3gen.oracles import testing
from k3gen.runtime import K3UnsupportedError

# What `k3gen test` selects this module by (k3gen.review.impact): the paths it reads besides k3gen/ and tests/.
READS = ()


def test_dims_id_and_seed():
    assert testing.dims_id({"M": 1, "D": 256}) == "M1-D256"
    assert testing.seed({"in": "bf16"}, {"M": 1}, "dense") == testing.seed({"in": "bf16"}, {"M": 1}, "dense")
    assert testing.seed("graph", {"in": "bf16"}) != testing.seed("compile", {"in": "bf16"})


def test_as_tuple_and_layout():
    t = torch.empty(4, 8)[:, :6]
    assert testing.as_tuple(t) == (t,) and testing.as_tuple((t, t)) == (t, t)
    assert testing.layout(t) == (torch.float32, (4, 6), [8, 1])
    assert testing.layout(torch.empty(1, 5)) == (torch.float32, (1, 5), [1])  # a dim of 1 has no stride to keep


def test_a_table_is_flat_again():
    assert testing.flat([[1, 2], [3], []]) == [1, 2, 3]


DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
REASON = "no consumer mixes half formats"


def _kit(**routing) -> testing.FamilyTests:
    """A family of one generated cell (bf16) whose op runs nowhere: fp16 is excluded, CPU tensors refused."""

    def op(x, beta=1.0, out=None):
        if x.dtype == torch.float16:
            raise K3UnsupportedError(f"fam: (in) = (fp16) not generated: {REASON}; generated (in): (bf16)")
        if x.device.type != "cuda":
            raise K3UnsupportedError("fam: x must be on a CUDA device")
        return x

    def make_args(variant, dims, layout, seed, device="cuda"):
        return {"x": torch.zeros(dims["M"], dtype=DTYPES[variant["in"]])}

    family = SimpleNamespace(fam=op, covered=lambda **args: False, supported_hardware=lambda: False)
    oracle = SimpleNamespace(make_args=make_args)
    return testing.FamilyTests(
        family=family,
        name="fam",
        oracle=oracle,
        spec={"constants": {"n": 1}},
        dims=[{"M": 2}],
        layouts=["dense"],
        op_args=["x", "beta"],
        op_defaults={},
        inputs=["x"],
        dtype_args={},
        outputs=["out"],
        routing=routing,
    )


def test_variants_are_rows_by_name_then_the_spec():
    kit = _kit(cuda={"tie_order": "lowest_id"}, hip={"tie_order": "table"})
    want = {"constants": {"n": 1}, "tie_order": "table" if torch.version.hip else "lowest_id"}
    assert kit.variants(["in", "vec"], [("bf16", 8)]) == [{"in": "bf16", "vec": 8, **want}]


def test_a_refusal_must_name_its_reason():
    kit = _kit()
    kit.cpu_tensor_is_refused({"in": "bf16"})
    kit.excluded_cell_is_refused({"in": "bf16"}, {"in": "fp16"}, REASON)
    with pytest.raises(AssertionError, match="Regex pattern did not match"):
        kit.excluded_cell_is_refused({"in": "bf16"}, {"in": "fp16"}, "another reason")


def test_needs_gpu_skips_without_a_target_gpu():
    mark = testing.needs_gpu(SimpleNamespace(supported_hardware=lambda: False))
    assert mark.args == (True,) and mark.kwargs["reason"] == testing.GPU_REASON
