"""What every generated test module does, written once: generated/tests/test_<family>.py is data
(variants, dims, cases, excluded cells, gate rejections) and thin pytest functions that call these.

Imports torch, the standard library and k3gen.runtime only (the family's oracle module and host
wrapper come in as arguments): generated tests run on a machine that has torch alone.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass, field

import pytest
import torch

from k3gen import runtime as rt

GPU_REASON = "needs a GPU of a target arch"
# Inputs of the dense-bf16 check are randn * this: saturates tanh and sigmoid as real GEMM outputs do.
DENSE_BF16_SPREAD = 6


def flat(rows: list) -> list:
    """A long table given as rows (so a reviewer reads it as the spec lists it), as one list."""
    return [x for row in rows for x in row]


def seed(*parts) -> int:
    """A seed that depends on the test's parameters only (not on order or process)."""
    return zlib.crc32(repr(parts).encode())


def dims_id(dims: dict) -> str:
    """The test id of one set of sizes: `M1-D256`."""
    return "-".join(f"{k}{v}" for k, v in dims.items())


def needs_gpu(family):
    """Skip unless this machine has a GPU of one of the family's target archs."""
    return pytest.mark.skipif(not family.supported_hardware(), reason=GPU_REASON)


def as_tuple(x) -> tuple:
    return x if isinstance(x, tuple) else (x,)


def layout(t: torch.Tensor) -> tuple:
    """What torch.compile promises of an output: dtype, shape, and the strides of dims longer than 1."""
    return t.dtype, tuple(t.shape), [s for s, n in zip(t.stride(), t.shape) if n > 1]


def backend() -> str:
    """The backend this torch runs on."""
    return "hip" if torch.version.hip else "cuda"


@dataclass
class FamilyTests:
    """One family's generated tests: its op, its oracle, and what the spec says of its call.

    `spec` is what the oracle needs besides a variant's own parameters; `routing` the tie order and
    sigmoid per backend (routing families only), merged over `spec` for the backend under test.
    """

    family: object  # the host wrapper module, k3kernels.<family>
    name: str
    oracle: object  # the family's oracle module (k3gen.oracles.*)
    spec: dict
    dims: list  # test sizes, each {dim: size}
    layouts: list
    op_args: list  # the custom op's arguments in order
    op_defaults: dict  # defaults of those a call may leave out
    inputs: list  # input tensors, by name
    dtype_args: dict  # op argument -> the output whose dtype it carries
    outputs: list  # output tensors, by name
    routing: dict = field(default_factory=dict)

    def __post_init__(self):
        self.spec = {**self.spec, **self.routing.get(backend(), {})}

    @property
    def op(self):
        return getattr(self.family, self.name)

    def variants(self, keys: list, rows: list) -> list[dict]:
        """Each row of parameters as the oracle sees a variant: by name, then the spec's data."""
        return [dict(dict(zip(keys, row)), **self.spec) for row in rows]

    def matches_oracle(self, variant: dict, dims: dict, layout_name: str) -> None:
        args = self.oracle.make_args(variant, dims, layout_name, seed(variant, dims, layout_name))
        got = self.op(**args)
        self.oracle.check(got, self.oracle.reference(variant, **args), variant)

    def edge_case(self, variant: dict, case: str) -> None:
        getattr(self.oracle, f"case_{case}")(self.op, variant)

    def excluded_cell_is_refused(self, variant: dict, cell: dict, reason: str) -> None:
        """A call in an excluded cell (the rest as `variant`) is refused with the spec's reason."""
        args = self.oracle.make_args(dict(variant, **cell), self.dims[0], "dense", 0)
        with pytest.raises(rt.K3UnsupportedError, match=r"not generated: " + re.escape(reason)):
            self.op(**args)
        assert not self.family.covered(**args)

    def gate_refuses(self, variant: dict, name: str, gate: str) -> None:
        args = getattr(self.oracle, f"reject_{name}")(variant)
        with pytest.raises(rt.K3UnsupportedError, match=re.escape(f"gate `{gate}` failed")):
            self.op(**args)
        assert not self.family.covered(**args)

    def op_call(self, args: dict):
        """The custom op itself (torch.ops.k3kernels.<family>), every argument positional."""
        return getattr(torch.ops.k3kernels, self.name)(*[args.get(n, self.op_defaults.get(n)) for n in self.op_args])

    def fake_outputs_match_oracle(self, variant: dict) -> None:
        """What torch.compile sees of the custom op (fake tensors: no GPU, no data) matches the oracle's
        output dtypes, shapes and strides."""
        from torch._subclasses.fake_tensor import FakeTensorMode

        real = self.oracle.make_args(variant, self.dims[0], self.layouts[-1], 0, device="cpu")
        real |= {arg: real[out].dtype for arg, out in self.dtype_args.items() if real.get(out) is not None}
        real = {k: v for k, v in real.items() if k not in self.outputs}
        inputs = {k: v for k, v in real.items() if k not in self.dtype_args}
        want = as_tuple(self.oracle.reference(variant, **inputs))  # the oracle is plain torch: it runs on the CPU
        with FakeTensorMode(allow_non_fake_inputs=True):
            args = {
                k: torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device="cuda")
                if isinstance(v, torch.Tensor)
                else v
                for k, v in real.items()
            }
            got = as_tuple(self.op_call(args))
        assert [layout(t) for t in got] == [layout(t) for t in want]

    def torch_compile_fullgraph(self, variant: dict) -> None:
        """Under torch.compile(fullgraph=True) the op is one opaque node: no graph break, same results."""
        torch._dynamo.reset()
        args = self.oracle.make_args(variant, self.dims[0], self.layouts[-1], seed("compile", variant))
        op = self.op
        compiled = torch.compile(lambda kw: op(**kw), fullgraph=True)
        self.oracle.check(compiled(args), self.oracle.reference(variant, **args), variant)

    def cuda_graph_replay(self, variant: dict) -> None:
        """Captured once in a CUDA graph, a replay on new inputs matches the oracle."""
        dims = self.dims[len(self.dims) // 2]
        args = self.oracle.make_args(variant, dims, "dense", seed("graph", variant))
        outputs = as_tuple(self.op(**args))
        captured = dict(args, **dict(zip(self.outputs, outputs)))
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.op(**captured)
        fresh = self.oracle.make_args(variant, dims, "dense", seed("graph", variant) + 1)
        for name in self.inputs:
            if captured.get(name) is not None:
                captured[name].copy_(fresh[name])
        graph.replay()
        torch.cuda.synchronize()
        got = outputs if len(outputs) > 1 else outputs[0]
        inputs = {k: v for k, v in captured.items() if k not in self.outputs}
        self.oracle.check(got, self.oracle.reference(variant, **inputs), variant)

    def cpu_tensor_is_refused(self, variant: dict) -> None:
        args = self.oracle.make_args(variant, self.dims[0], "dense", 0, device="cpu")
        with pytest.raises(rt.K3UnsupportedError, match="must be on a CUDA device"):
            self.op(**args)


def dense_bf16_equals_bf16(op, inputs: dict, outputs: dict, scalars: dict) -> tuple:
    """The dense-bf16 contract on the GPU: `op` on fp32 inputs of the given shapes, once into fp32
    outputs (`out=`) and once with the outputs it picks itself (bf16 for fp32 input); bf16 of the
    first must equal the second bit for bit. Returns the narrow output's dtype, for the caller's check."""
    args = {name: torch.randn(*shape, device="cuda") * DENSE_BF16_SPREAD for name, shape in inputs.items()}
    wide = as_tuple(op(**args, **scalars, **{n: torch.empty(*s, device="cuda") for n, s in outputs.items()}))
    narrow = as_tuple(op(**args, **scalars))
    for w, n in zip(wide, narrow):
        assert n.dtype == torch.bfloat16
        assert torch.equal(w.to(torch.bfloat16).view(torch.int16), n.view(torch.int16))
    return narrow[0].dtype
