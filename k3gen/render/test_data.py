"""What a family's generated test module holds: its data, each value ready for k3gen.render.pyformat.

The module is data over k3gen.oracles.testing (templates/common/test.py.j2): variants as a table (their
parameter names once, then one row each), test sizes, layouts, cases, excluded cells, gate
rejections and what the spec says of the call. Long number lists (a 256-entry tie order, a lane
table) become named tables of 16 a row, written once however often the data names them.
"""

from __future__ import annotations

import itertools

from k3gen.plan.family import FamilyPlan
from k3gen.render import pyformat
from k3gen.render.python import torch_dtype, wrapper_signature

ROW = 16  # numbers per row of a table


def test_dims(p: FamilyPlan) -> list[dict]:
    """The product of the spec's test sizes, in spec order."""
    dims = p.spec.tests.dims
    return [dict(zip(dims, sizes)) for sizes in itertools.product(*dims.values())]


def oracle_spec(p: FamilyPlan) -> dict:
    """What the oracle needs of the spec besides a variant's own parameters (k3gen/oracles/vocabulary.py
    reads the defaults)."""
    s = p.spec
    order = {"tie_order": s.tie_order} if isinstance(s.tie_order, (str, list)) else {}  # else per backend: ROUTING
    route = {"routing": p.route.model_dump(mode="json")} if p.route is not None else {}
    return {
        "constants": dict(s.constants),
        **order,
        **route,
        "defaults": {axis: {"from": d.from_, "map": dict(d.map)} for axis, d in s.dtypes.defaults.items()},
    }


def test_module_data(p: FamilyPlan) -> dict:
    """Every value test.py.j2 writes, by the name it has in the generated module."""
    call = wrapper_signature(p)
    variants = [v.as_dict() for v in p.variants]
    keys = list(variants[0])
    if any(list(v) != keys for v in variants):
        raise ValueError(f"k3gen bug: the variants of {p.name} name different parameters")
    tables: dict[str, list] = {}
    spec = _hoist(oracle_spec(p), tables)
    backends = None
    if p.routing is not None:
        backends = _hoist({r.backend: r.test_data for r in p.routing}, tables)
    rejects = [(name, p.gates[idx][0].source) for name, idx in p.spec.tests.rejects.items()]
    return {
        "tables": {name: pyformat.Call("testing.flat", _rows(v)) for name, v in tables.items()},
        "SPEC": spec,
        "ROUTING": backends,
        "VARIANT_KEYS": keys,
        "VARIANT_ROWS": [tuple(v.values()) for v in variants],
        "VARIANT_IDS": [v.name[len(p.name) + 2 :] for v in p.variants],
        "DIMS": test_dims(p),
        "LAYOUTS": list(p.spec.tests.layouts),
        "CASES": list(p.spec.tests.cases),
        "EXCLUDED": [tuple(e) for e in p.excluded],
        "REJECTS": rejects,
        "OP_ARGS": call["op_names"],
        "OP_DEFAULTS": call["op_defaults"],
        "INPUTS": call["inputs"],
        "DTYPE_ARGS": call["dtype_arg_outputs"],
        "OUTPUTS": call["outputs"],
    }


def _hoist(value, tables: dict, key: str = "table"):
    """`value` with each long list of numbers replaced by the name of a table (added to `tables`)."""
    if isinstance(value, dict):
        return {k: _hoist(v, tables, str(k)) for k, v in value.items()}
    if isinstance(value, list) and len(value) > ROW and all(type(x) is int for x in value):
        names = itertools.chain([key.upper()], (f"{key.upper()}_{i}" for i in itertools.count(2)))
        name = next(n for n in names if tables.get(n, value) == value)
        tables[name] = value
        return pyformat.Name(name)
    if isinstance(value, list):
        return [_hoist(v, tables, key) for v in value]
    return value


def _rows(numbers: list) -> list[list]:
    return [numbers[i : i + ROW] for i in range(0, len(numbers), ROW)]


def runner_test_data(p: FamilyPlan) -> dict:
    """What test_runners.py.j2 writes: the runner table and, while a runner consumes dense_bf16, the
    call of the contract's family that its GPU test makes (specs/runners.yaml, dense_bf16_check;
    k3gen.spec.meaning.contracts checked it at load, the plan computed its sizes)."""
    rows = [(r.name, list(r.archs), r.consumes, pyformat.Name(torch_dtype(r.activation_dtype))) for r in p.runners]
    act = [pyformat.Name(torch_dtype(d)) for d in p.spec.dtypes.axes["act"]]
    call = p.dense_bf16_call
    if call is None:
        return {"TABLE": rows, "ACT_DTYPES": act, "producer": None}
    return {
        "TABLE": rows,
        "ACT_DTYPES": act,
        "producer": call.family,
        "DENSE_BF16_INPUTS": call.inputs,
        "DENSE_BF16_OUTPUTS": call.outputs,
        "DENSE_BF16_SCALARS": call.scalars,
    }
