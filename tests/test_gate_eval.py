"""k3gen.spec.gate_eval: gates decided for known values by walking their AST, never eval()."""

from __future__ import annotations

import pytest

from k3gen.spec import gate_eval
from k3gen.spec.gate_eval import GateEvalError, decide, names


@pytest.mark.parametrize(
    "source,values,expected",
    [
        ("K % group_size == 0", {"K": 512, "group_size": 256}, True),
        ("K % group_size == 0", {"K": 128, "group_size": 256}, False),
        ("M <= max_tokens", {"M": 1025, "max_tokens": 1024}, False),
        ("-7 // 2 == -4 and -7 % 2 == 1", {}, True),  # Python's floor semantics, as the wrapper runs them
        ("1 < K < 8", {"K": 8}, False),
        ("not (D % vec == 0)", {"D": 258, "vec": 8}, True),
        ("hidden // vec <= block_threads", {"hidden": 3584, "vec": 16, "block_threads": 256}, True),
        ("fp8_max == 448.0 and flag", {"fp8_max": 448.0, "flag": True}, True),
    ],
)
def test_known_values_decide(source, values, expected):
    assert decide(source, values) is expected


@pytest.mark.parametrize(
    "source,values,expected",
    [
        ("x.ptr % 16 == 0", {}, None),  # a tensor attribute: only a real call has it
        ("topk == top_k", {"top_k": 16}, None),  # a scalar argument: not a test dim
        ("K % 8 == 0 and x.ptr % 16 == 0", {"K": 12}, False),  # False whatever the pointer is
        ("K % 8 == 0 and x.ptr % 16 == 0", {"K": 16}, None),
        ("K > 0 or x.stride0 % 8 == 0", {"K": 1}, True),
        ("K > 0 or x.stride0 % 8 == 0", {"K": 0}, None),
        ("not x.ptr", {}, None),
        ("K % group_size == 0", {"K": 128, "group_size": 0}, False),  # the wrapper's own check would raise
    ],
)
def test_unknowns_follow_three_valued_logic(source, values, expected):
    assert decide(source, values) is expected


@pytest.mark.parametrize(
    "source", ["len(x) > 0", "a if b else c", "'s' == 's'", "x[0] == 1", "2 ** 3 == 8", "__import__('os')", "K /"]
)
def test_outside_the_gate_language_is_refused(source):
    with pytest.raises(GateEvalError):
        decide(source, {"x": 1, "a": 1, "b": 1, "c": 1})


def test_names_in_order_without_tensors():
    assert names("K % group_size == 0 and x.ptr % vec == 0 and K > 1") == ["K", "group_size", "vec"]


def test_never_evaluates_text():
    """The evaluator reads nodes; nothing in it calls eval, exec or compile."""
    import ast
    import inspect

    calls = {
        n.func.id
        for n in ast.walk(ast.parse(inspect.getsource(gate_eval)))
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
    }
    assert not calls & {"eval", "exec", "compile", "__import__"}
