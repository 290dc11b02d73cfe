"""Render every output file of the plan into memory: {relative path under generated/: text}.

One function per output kind; templates get the plan (C++ spellings and keys already computed).
"""
from __future__ import annotations

import itertools
from pathlib import Path

import jinja2

from . import escape, routing
from .bounds import KEY_BITS
from .contracts import DENSE_BF16
from .dtypes import DTYPES
from .limits_cpp import cpp_asserts
from .plan import FamilyPlan, Variant

# One kernel header serves both backends: k3_backend.h picks the primitives (warp width, shuffles,
# scans, conversions) from the compiler's own macros; only the translation units differ per backend.
KERNEL_HEADER = "{name}.cuh"
TU_EXT = {"cuda": "cu", "hip": "hip"}
PY_SCALAR = {"f32": "float", "i32": "int", "i64": "int"}


def make_env(root: Path) -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(root / "templates")),
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                             keep_trailing_newline=True, autoescape=False)
    # Spec text leaves only through k3gen.escape (one function per language) or as a grammar token.
    env.filters["c_string"] = escape.c_string
    env.filters["py"] = escape.py_literal
    env.filters["docstring"] = escape.docstring
    env.filters["comment"] = escape.one_line
    env.filters["md"] = escape.markdown
    env.filters["tuple"] = tuple
    env.filters["torch_dtype_of"] = lambda name: _torch_dtype(name)
    env.filters["py_raw"] = lambda xs: "[" + ", ".join(xs) + "]"  # a list of Python spellings
    env.filters["prefix"] = lambda s, pre: f"{pre}{s}"
    env.filters["index_in"] = lambda item, items: list(items).index(item)
    env.filters["replace_axis"] = lambda name, axes: f"dtype_{name}" if name in axes else name
    return env


def render_all(plans: list[FamilyPlan], root: Path) -> dict[str, str]:
    env = make_env(root)
    files: dict[str, str] = {}

    def put(path: str, text: str) -> None:
        if path in files:  # two templates claiming one file would make output order-dependent
            raise RuntimeError(f"k3gen bug: {path} rendered twice")
        files[path] = text

    put("k3kernels/csrc/k3_backend.h", _render(env, "common/k3_backend.h.j2", None))
    for p in plans:
        for path, text in render_family(env, p).items():
            put(path, text)
    put("k3kernels/__init__.py", _render(env, "common/package_init.py.j2", None, plans=plans))
    for path, text in render_docs(env, plans).items():
        put(path, text)
    return files


def kernel_sources(p: FamilyPlan, backend: str) -> list[str]:
    """Translation units of one family's module for one backend, relative to csrc/<family>/."""
    ext = TU_EXT[backend]
    return [f"{v.name}.{ext}" for v in p.variants] + [f"dispatch.{ext}"]


def kernel_headers(p: FamilyPlan, backend: str) -> list[str]:
    return [KERNEL_HEADER.format(name=p.name), f"{p.name}_abi.h", "../k3_backend.h"]


def render_family(env: jinja2.Environment, p: FamilyPlan) -> dict[str, str]:
    out = {}
    csrc = f"k3kernels/csrc/{p.name}"
    resolved = p.backend_routing()
    # tie_rank: the one tie order of templates from before per-backend routing, which `k3gen diff`
    # still renders for older revs (whose specs give one order for every backend).
    common = dict(spec=p.spec, constants=_cpp_constants(p), key_bits=KEY_BITS,
                  matrix_text=matrix_text(p), routing=resolved, routing_declared=routing.declares_routing(p.spec),
                  tie_rank=resolved[0].priority if resolved else None, limit_asserts=cpp_asserts(p))
    out[f"{csrc}/{p.name}_abi.h"] = _render(env, "common/abi.h.j2", p, p=p, **common)
    header = KERNEL_HEADER.format(name=p.name)
    out[f"{csrc}/{header}"] = _render(env, f"{p.spec.template}/kernel.cuh.j2", p, p=p, **common)
    for backend in p.backends:
        ctx = dict(common, backend=backend, kernel_header=header)
        for v in p.variants:
            out[f"{csrc}/{v.name}.{TU_EXT[backend]}"] = _render(env, "common/variant.cu.j2", p, p=p, v=v, **ctx)
        out[f"{csrc}/dispatch.{TU_EXT[backend]}"] = _render(env, "common/dispatch.cu.j2", p, p=p, **ctx)
    host = dict(common, sources={b: kernel_sources(p, b) for b in p.backends},
                headers={b: kernel_headers(p, b) for b in p.backends}, torch_dtype=_torch_dtype,
                dims=test_dims(p), call=wrapper_signature(p), variant_keys=variant_keys(p), oracle_spec=oracle_spec(p),
                tensors=host_tensors(p), dtype_bindings=dtype_bindings(p),
                outputs=[n for n, t in p.spec.signature.tensors.items() if t.output],
                pointers=pointer_tensors(p))
    out[f"k3kernels/{p.name}.py"] = _render(env, "common/host.py.j2", p, p=p, **host)
    out[f"tests/test_{p.name}.py"] = _render(env, "common/test.py.j2", p, p=p, **host)
    if p.runners:  # this family is the front of the runner table
        out["k3kernels/runners.py"] = _render(env, "common/runners.py.j2", p, p=p, torch_dtype=_torch_dtype)
        out["tests/test_runners.py"] = _render(env, "common/test_runners.py.j2", p, p=p, torch_dtype=_torch_dtype,
                                               dense_bf16=DENSE_BF16)
    return out


def render_docs(env: jinja2.Environment, plans: list[FamilyPlan]) -> dict[str, str]:
    """generated/docs/: one reference page per family and an index; k3gen.docs computes the tables."""
    from . import docs  # imported here: k3gen.docs reads this module's wrapper_signature and dtype_bindings

    out = {f"docs/{p.name}.md": _render(env, "common/doc.md.j2", p, p=p, spec=p.spec, doc=docs.family_doc(p))
           for p in plans}
    out["docs/README.md"] = _render(env, "common/docs_index.md.j2", None, families=docs.index_table(plans),
                                    legend=docs.arch_legend())
    return out


def wrapper_signature(p: FamilyPlan) -> dict[str, str]:
    """The wrapper's parameter list and the names to forward: inputs, scalars, params, flags, outputs."""
    s, sig = p.spec, p.spec.signature
    params = [n + ("=None" if t.optional else "") for n, t in sig.tensors.items() if not t.output]
    params += [n + (f"={sc.default!r}" if sc.optional else "") for n, sc in sig.scalars.items()]
    params += [f"{n}={prm.default!r}" for n, prm in s.params.items()]
    params += [f"{n}={f.default!r}" for n, f in s.flags.items() if f.kwarg]
    params += [f"{n}=None" for n, t in sig.tensors.items() if t.output]
    names = [x.split("=")[0] for x in params]
    # The torch custom op: functional (outputs are returned, never passed), every argument typed.
    typed = [(n, "Optional[torch.Tensor]" if t.optional else "torch.Tensor")
             for n, t in sig.tensors.items() if not t.output]
    typed += [(n, f"Optional[{PY_SCALAR[sc.type]}]" if sc.optional else PY_SCALAR[sc.type])
              for n, sc in sig.scalars.items()]
    typed += [(n, "str" if any(isinstance(v, str) for v in prm.values) else "int") for n, prm in s.params.items()]
    typed += [(n, "bool") for n, f in s.flags.items() if f.kwarg]
    # A dtype axis read from an output (situ_and_mul's `out`) becomes a dtype argument of the op,
    # which returns its outputs instead of taking them.
    dtype_args = [f"{axis}_dtype" for axis, _, derived in dtype_bindings(p) if derived]
    typed += [(n, "Optional[torch.dtype]") for n in dtype_args]
    outputs = [n for n, t in sig.tensors.items() if t.output]
    returns = "torch.Tensor" if len(outputs) == 1 else f"tuple[{', '.join(['torch.Tensor'] * len(outputs))}]"
    defaults = {n: sc.default for n, sc in sig.scalars.items() if sc.optional}
    defaults |= {n: prm.default for n, prm in s.params.items()}
    defaults |= {n: f.default for n, f in s.flags.items() if f.kwarg}
    defaults |= {n: None for n, t in sig.tensors.items() if t.optional and not t.output}
    defaults |= {n: None for n in dtype_args}
    return {"params": ", ".join(params), "names": ", ".join(names), "op_defaults": defaults,
            "inputs": [n for n, t in sig.tensors.items() if not t.output], "outputs": outputs,
            "op_params": ", ".join(f"{n}: {t}" for n, t in typed), "op_names": ", ".join(n for n, _ in typed),
            "resolve_from_op": ", ".join([*(n for n, _ in typed if n not in dtype_args),
                                          *(f"{n}={n}" for n in dtype_args)]),
            "op_from_call": ", ".join([*(n for n, _ in typed if n not in dtype_args),
                                       *(f"{b[1]}.dtype if {b[1]} is not None else None"
                                         for b in dtype_bindings(p) if b[2])]),
            "dtype_args": dtype_args,
            "dtype_arg_outputs": {f"{axis}_dtype": t for axis, t, derived in dtype_bindings(p) if derived},
            "op_returns": returns}


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
                cases.append((f"{param} == {value!r}", *_tensor_case(p, *spec)))
        cases.append((None, *_tensor_case(p, *base)))
        out.append({"name": name, "rank": len(t.shape), "optional": t.optional, "output": t.output,
                    "device": "" if i == 0 else ", device=device", "cases": cases})
    return out


def _tensor_case(p: FamilyPlan, dtype: str, shape: list, layout: str) -> tuple[str, str, str, str]:
    dtype_py = f"dtype_{dtype}" if dtype in p.spec.dtypes.axes else _torch_dtype(dtype)
    dims = p.shape_python(shape)
    shape_py = "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"
    return dtype_py, shape_py, ", ".join(str(d) for d in shape), layout


def pointer_tensors(p: FamilyPlan) -> list[str]:
    """The tensors whose data pointers the Args struct holds, in field order."""
    return [f.name for f in p.args if f.kind in ("ptr", "mut_ptr")]


def dtype_bindings(p: FamilyPlan) -> list[tuple[str, str, str | None]]:
    """(axis, tensor it is read from, axis its default derives from when that tensor may be omitted)."""
    s = p.spec
    out = []
    for axis in s.dtypes.axes:
        tensors = [(n, t) for n, t in s.signature.tensors.items() if t.dtype == axis]
        name, t = min(tensors, key=lambda nt: (nt[1].output or nt[1].optional))
        derived = s.dtypes.defaults[axis].from_ if (t.output or t.optional) else None
        out.append((axis, name, derived))
    return out


def variant_keys(p: FamilyPlan) -> list[tuple[str, Variant]]:
    """Python spelling of each variant's lookup tuple: (torch.bfloat16, torch.bfloat16, True)."""
    out = []
    for v in p.variants:
        parts = [_torch_dtype(d) for d in v.dtypes.values()] + [repr(x) for x in v.params.values()]
        parts += [repr(b) for b in v.flags.values()]
        out.append(("(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")", v))
    return out


def oracle_spec(p: FamilyPlan) -> dict:
    """What the oracle needs of the spec besides a variant's own parameters (k3gen/oracles/vocabulary.py
    reads the defaults)."""
    s = p.spec
    order = {"tie_order": s.tie_order} if isinstance(s.tie_order, (str, list)) else {}  # else per backend: ROUTING
    return {"constants": dict(s.constants), **order,
            "defaults": {axis: {"from": d.from_, "map": dict(d.map)} for axis, d in s.dtypes.defaults.items()}}


def test_dims(p: FamilyPlan) -> list[dict]:
    """The product of the spec's test sizes, in spec order."""
    dims = p.spec.tests.dims
    return [dict(zip(dims, sizes)) for sizes in itertools.product(*dims.values())]


def matrix_text(p: FamilyPlan) -> str:
    """The generated cells, for error messages: (in, out) in {(bf16, bf16), (fp32, bf16)}."""
    axes = tuple(p.spec.dtypes.axes)
    cells = ", ".join("(" + ", ".join(c) + ")" for c in p.spec.dtypes.generated_cells())
    return f"({', '.join(axes)}) in {{{cells}}}"


def _torch_dtype(name: str) -> str:
    return f"torch.{DTYPES[name].torch}"


def _cpp_constants(p: FamilyPlan) -> list[tuple[str, tuple[str, str]]]:
    out = []
    for name, value in p.spec.constants.items():
        if isinstance(value, bool):
            out.append((name, ("bool", "true" if value else "false")))
        elif isinstance(value, int):
            out.append((name, ("int", str(value))))
        else:
            out.append((name, ("float", f"{value!r}f")))
    return out


def _render(env: jinja2.Environment, template: str, plan: FamilyPlan | None, **ctx) -> str:
    def banner(comment: str) -> str:
        if plan is None:
            return f"{comment} @generated by k3gen — do not edit; run `k3gen build`."
        return (f"{comment} @generated by k3gen from {plan.file} — do not edit; run `k3gen build`.\n"
                f"{comment} spec sha256: {plan.spec_sha256}")

    return env.get_template(template).render(banner=banner, **ctx)
