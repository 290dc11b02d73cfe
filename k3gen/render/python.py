"""How a plan is spelled in Python: torch dtypes, the wrapper's and the custom op's signatures, each
tensor's checks, the Args initialisers. Only grammar tokens and checked expressions (Expr.python)
are spelled here; free text leaves through k3gen.spec.escape.
"""

from __future__ import annotations

from k3gen.plan.family import FamilyPlan, TensorCase
from k3gen.runtime.dtypes import DTYPES
from k3gen.spec.escape import py_literal


def torch_dtype(name: str) -> str:
    """`torch.bfloat16` for bf16."""
    return f"torch.{DTYPES[name].torch}"


def tensor_case(p: FamilyPlan, case: TensorCase) -> tuple[str | None, str, str, str, str]:
    """(condition, dtype, shape, shape as the spec wrote it, layout) of one case of a tensor."""
    axes = p.spec.dtypes.axes
    cond = f"{case.when[0]} == {py_literal(case.when[1])}" if case.when else None
    dtype = f"dtype_{case.dtype}" if case.dtype in axes else torch_dtype(case.dtype)
    dims = [e.python for e in case.shape]
    shape = "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"
    return cond, dtype, shape, ", ".join(e.source for e in case.shape), case.layout


def host_tensors(p: FamilyPlan) -> list[dict]:
    """Per tensor, inputs first: its role and its (condition, dtype, shape, spelled shape, layout) cases."""
    return [
        {
            "name": t.name,
            "rank": t.rank,
            "optional": t.optional,
            "output": t.output,
            "cases": [tensor_case(p, c) for c in t.cases],
        }
        for t in p.tensors
    ]


def arg_inits(p: FamilyPlan) -> list[tuple[str, str]]:
    """(Args field, the expression the wrapper fills it with), in field order."""
    spell = {
        "tensor": lambda f: f"rt.data_ptr({f.name})",
        "stride0": lambda f: f"{f.of}.stride(0)",
        "optional_scalar": lambda f: f"{f.name} if {f.name} is not None else 0",
        "dim": lambda f: f.name,
        "scalar": lambda f: f.name,
        "device_table": lambda f: "TABLES.row(device)",  # the wrapper's k3gen.runtime.tables.DeviceTables
    }
    return [(f.name, spell[f.source](f)) for f in p.args]


def wrapper_signature(p: FamilyPlan) -> dict:
    """The wrapper's parameter list and the names to forward: inputs, scalars, params, flags, outputs;
    and the custom op's typed parameters (outputs returned, a derived output dtype passed instead)."""
    call = p.call
    params = [c.name if not c.has_default else f"{c.name}={py_literal(c.default)}" for c in call]
    names = [c.name for c in call]
    typed = [(c.name, c.annotation) for c in call if c.role != "output"]
    derived = [b for b in p.dtype_bindings if b.derived_from]
    dtype_args = [f"{b.axis}_dtype" for b in derived]
    typed += [(n, "torch.dtype | None") for n in dtype_args]
    outputs = [c.name for c in call if c.role == "output"]
    returns = "torch.Tensor" if len(outputs) == 1 else f"tuple[{', '.join(['torch.Tensor'] * len(outputs))}]"
    roles = {c.name: c for c in call}
    defaults = {n: c.default for n, c in roles.items() if c.role == "scalar" and c.has_default}
    defaults |= {n: c.default for n, c in roles.items() if c.role in ("param", "flag")}
    defaults |= {n: None for n, c in roles.items() if c.role == "optional_tensor"}
    defaults |= {n: None for n in dtype_args}
    plain = [n for n, _ in typed if n not in dtype_args]
    return {
        "params": ", ".join(params),
        "op_defaults": defaults,
        "lists": {
            "params": params,
            "names": names,
            "op_params": [f"{n}: {t}" for n, t in typed],
            "resolve_from_op": [*plain, *(f"{n}={n}" for n in dtype_args)],
            "op_from_call": [*plain, *(f"{b.tensor}.dtype if {b.tensor} is not None else None" for b in derived)],
        },
        "inputs": [c.name for c in call if c.role in ("tensor", "optional_tensor")],
        "outputs": outputs,
        "op_names": [n for n, _ in typed],
        "dtype_args": dtype_args,
        "dtype_arg_outputs": {f"{b.axis}_dtype": b.tensor for b in derived},
        "op_returns": returns,
    }
