"""How a plan is spelled in Python and C++: the one place that spells a type (torchgen's `api/`).

Torch dtype names, C++ element types, ctypes fields, kernel template parameters and arguments,
C++ constants, the wrapper's signature and lookup tuples are computed here from the plan; the
renderers (k3gen.render) and the reference docs (k3gen.render.docs) both import this module and nothing
else spells them, so neither needs the other. Spec text never passes through here: only grammar
tokens (names, dtypes, numbers) are spelled; free text leaves through k3gen.spec.escape.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from k3gen.runtime.dtypes import DTYPES
from k3gen.spec.escape import py_literal
from k3gen.spec.exprs import parse_expr
from k3gen.spec.scopes import shape_scope

if TYPE_CHECKING:
    from k3gen.plan.resolve import FamilyPlan, Variant

# Args-struct field kinds: (C++ type, ctypes type).
ARG_CTYPES = {
    "ptr": ("const void*", "c_void_p"),
    "mut_ptr": ("void*", "c_void_p"),
    "i64": ("int64_t", "c_int64"),
    "i32": ("int32_t", "c_int32"),
    "f32": ("float", "c_float"),
}
# Python annotation of a spec scalar type.
PY_SCALAR = {"f32": "float", "i32": "int", "i64": "int"}


def torch_dtype(name: str) -> str:
    """`torch.bfloat16` for bf16."""
    return f"torch.{DTYPES[name].torch}"


def cpp_type(name: str, backend: str) -> str:
    """The C++ element type of a dtype under a backend's compiler."""
    return DTYPES[name].cpp(backend)


def cpp_bool(value: bool) -> str:
    return "true" if value else "false"


# ----------------------------------------------------------------------------------------------
# C++


def template_params(p: FamilyPlan) -> str:
    """The kernel template's parameter list, in the order template_args() fills it."""
    ps = [f"typename T_{a}" for a in p.spec.dtypes.axes]
    ps += [f"int {n}" for n in p.spec.params]
    ps += [f"bool {f}" for f in p.call_flags]
    knobs = [f"int {k}" for k in p.tuning.knobs] if p.tuning else []  # a knob's name shadows its constant
    return ", ".join([*ps, "bool FAST_MATH", "int VEC", *knobs])


def template_param_names(p: FamilyPlan) -> str:
    return ", ".join(x.split()[-1] for x in template_params(p).split(", "))


def param_cpp(p: FamilyPlan, param: str, value) -> int:
    """A param value in C++: its index for a named value (see param_enums), else the integer."""
    values = p.spec.params[param].values
    return values.index(value) if isinstance(value, str) else value


def template_args(p: FamilyPlan, v: Variant, backend: str, config: int = 0) -> str:
    """launch<...>'s arguments for variant v with tuning config `config` (0: the spec's default)."""
    xs = [cpp_type(d, backend) for d in v.dtypes.values()]
    xs += [str(param_cpp(p, n, val)) for n, val in v.params.items()]
    xs += [cpp_bool(b) for b in v.flags.values()]
    knobs = [f"/*{k}=*/{val}" for k, val in p.tuning.configs[config].items()] if p.tuning else []
    return ", ".join([*xs, cpp_bool(v.fast_math), str(v.vec), *knobs])


def param_enums(p: FamilyPlan) -> list[tuple[str, int]]:
    """C++ constants for string-valued params: scale_format_ue8m0 = 2."""
    return [
        (f"{n}_{val}", i)
        for n, prm in p.spec.params.items()
        for i, val in enumerate(prm.values)
        if isinstance(val, str)
    ]


def cpp_constants(p: FamilyPlan) -> list[tuple[str, tuple[str, str]]]:
    """(name, (C++ type, C++ literal)) of each spec constant."""
    out = []
    for name, value in p.spec.constants.items():
        if isinstance(value, bool):
            out.append((name, ("bool", cpp_bool(value))))
        elif isinstance(value, int):
            out.append((name, ("int", str(value))))
        else:
            out.append((name, ("float", f"{value!r}f")))
    return out


def arch_defines(p: FamilyPlan, arch: str) -> list[str]:
    """The per-arch flags as compiler defines: -DK3_PDL=1."""
    return [f"-DK3_{f.upper()}={int(arch in (p.spec.flags[f].archs or []))}" for f in p.arch_flags]


def matrix_text(p: FamilyPlan) -> str:
    """The generated cells, for error messages: (in, out) in {(bf16, bf16), (fp32, bf16)}."""
    axes = tuple(p.spec.dtypes.axes)
    cells = ", ".join("(" + ", ".join(c) + ")" for c in p.spec.dtypes.generated_cells())
    return f"({', '.join(axes)}) in {{{cells}}}"


# ----------------------------------------------------------------------------------------------
# Python


def shape_python(p: FamilyPlan, shape: list) -> list[str]:
    """Python spellings of a tensor's dimensions (k3gen.spec.exprs; the model checked them)."""
    scope = shape_scope(p.spec)
    return [parse_expr(d, scope).python for d in shape]


def dtype_bindings(p: FamilyPlan) -> list[tuple[str, str, str | None]]:
    """(axis, tensor it is read from, axis its default derives from when that tensor may be omitted)."""
    s = p.spec
    out = []
    for axis in s.dtypes.axes:
        tensors = [(n, t) for n, t in s.signature.tensors.items() if t.dtype == axis]
        name, t = min(tensors, key=lambda nt: nt[1].output or nt[1].optional)
        derived = s.dtypes.defaults[axis].from_ if (t.output or t.optional) else None
        out.append((axis, name, derived))
    return out


def host_tensors(p: FamilyPlan) -> list[dict]:
    """Per tensor, inputs first: its checks and its (condition, dtype, shape, spelled shape, layout) cases."""
    s = p.spec
    ordered = sorted(s.signature.tensors.items(), key=lambda kv: kv[1].output)
    out = []
    for i, (name, t) in enumerate(ordered):
        base = (t.dtype, t.shape, t.layout)
        cases = []
        for param, by_value in t.by.items():
            for value, case in by_value.items():
                spec = (case.dtype or t.dtype, case.shape or t.shape, case.layout or t.layout)
                cases.append((f"{param} == {py_literal(value)}", *_tensor_case(p, *spec)))
        cases.append((None, *_tensor_case(p, *base)))
        out.append(
            {
                "name": name,
                "rank": len(t.shape),
                "optional": t.optional,
                "output": t.output,
                "device": "" if i == 0 else ", device=device",
                "cases": cases,
            }
        )
    return out


def _tensor_case(p: FamilyPlan, dtype: str, shape: list, layout: str) -> tuple[str, str, str, str]:
    dtype_py = f"dtype_{dtype}" if dtype in p.spec.dtypes.axes else torch_dtype(dtype)
    dims = shape_python(p, shape)
    shape_py = "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"
    return dtype_py, shape_py, ", ".join(str(d) for d in shape), layout


def wrapper_signature(p: FamilyPlan) -> dict[str, str]:
    """The wrapper's parameter list and the names to forward: inputs, scalars, params, flags, outputs."""
    s, sig = p.spec, p.spec.signature
    params = [n + ("=None" if t.optional else "") for n, t in sig.tensors.items() if not t.output]
    params += [n + (f"={py_literal(sc.default)}" if sc.optional else "") for n, sc in sig.scalars.items()]
    params += [f"{n}={py_literal(prm.default)}" for n, prm in s.params.items()]
    params += [f"{n}={py_literal(f.default)}" for n, f in s.flags.items() if f.kwarg]
    params += [f"{n}=None" for n, t in sig.tensors.items() if t.output]
    names = [x.split("=")[0] for x in params]
    # The torch custom op: functional (outputs are returned, never passed), every argument typed.
    typed = [
        (n, "torch.Tensor | None" if t.optional else "torch.Tensor") for n, t in sig.tensors.items() if not t.output
    ]
    typed += [
        (n, f"{PY_SCALAR[sc.type]} | None" if sc.optional else PY_SCALAR[sc.type]) for n, sc in sig.scalars.items()
    ]
    typed += [(n, "str" if any(isinstance(v, str) for v in prm.values) else "int") for n, prm in s.params.items()]
    typed += [(n, "bool") for n, f in s.flags.items() if f.kwarg]
    # A dtype axis read from an output (situ_and_mul's `out`) becomes a dtype argument of the op,
    # which returns its outputs instead of taking them.
    bindings = dtype_bindings(p)
    dtype_args = [f"{axis}_dtype" for axis, _, derived in bindings if derived]
    typed += [(n, "torch.dtype | None") for n in dtype_args]
    outputs = [n for n, t in sig.tensors.items() if t.output]
    returns = "torch.Tensor" if len(outputs) == 1 else f"tuple[{', '.join(['torch.Tensor'] * len(outputs))}]"
    defaults = {n: sc.default for n, sc in sig.scalars.items() if sc.optional}
    defaults |= {n: prm.default for n, prm in s.params.items()}
    defaults |= {n: f.default for n, f in s.flags.items() if f.kwarg}
    defaults |= {n: None for n, t in sig.tensors.items() if t.optional and not t.output}
    defaults |= {n: None for n in dtype_args}
    resolve_from_op = [*(n for n, _ in typed if n not in dtype_args), *(f"{n}={n}" for n in dtype_args)]
    op_from_call = [
        *(n for n, _ in typed if n not in dtype_args),
        *(f"{b[1]}.dtype if {b[1]} is not None else None" for b in bindings if b[2]),
    ]
    return {
        "params": ", ".join(params),
        "names": ", ".join(names),
        "op_defaults": defaults,
        "lists": {
            "params": params,
            "names": names,
            "op_params": [f"{n}: {t}" for n, t in typed],
            "resolve_from_op": resolve_from_op,
            "op_from_call": op_from_call,
        },
        "inputs": [n for n, t in sig.tensors.items() if not t.output],
        "outputs": outputs,
        "op_params": ", ".join(f"{n}: {t}" for n, t in typed),
        "op_names": ", ".join(n for n, _ in typed),
        "resolve_from_op": ", ".join(
            [*(n for n, _ in typed if n not in dtype_args), *(f"{n}={n}" for n in dtype_args)]
        ),
        "op_from_call": ", ".join(
            [
                *(n for n, _ in typed if n not in dtype_args),
                *(f"{b[1]}.dtype if {b[1]} is not None else None" for b in bindings if b[2]),
            ]
        ),
        "dtype_args": dtype_args,
        "dtype_arg_outputs": {f"{axis}_dtype": t for axis, t, derived in bindings if derived},
        "op_returns": returns,
    }
