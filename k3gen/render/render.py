"""Render every output file of the plans into memory: {relative path under generated/: text}.

One function per output kind. Templates get views of the plan with every value spelled
(k3gen.render.views); render spells plan fields and checks the tuning table's claims against the
code it renders (k3gen.render.keys), and resolves, parses or looks up nothing itself.
"""

from __future__ import annotations

import json
import re
import textwrap
from dataclasses import replace
from pathlib import Path

import jinja2

from k3gen.plan.family import KERNEL_HEADER, TU_EXT, FamilyPlan
from k3gen.render import docs, keys, pyformat
from k3gen.render.host_data import host_module_data
from k3gen.render.python import host_tensors, torch_dtype, wrapper_signature
from k3gen.render.test_data import oracle_spec, runner_test_data, test_module_data
from k3gen.render.views import family_view, host_view, unit_view
from k3gen.spec import escape
from k3gen.spec.errors import SpecError, SpecErrors


def make_env(root: Path) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(root / "templates")),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    # Spec text leaves only through k3gen.spec.escape (one function per language) or as a grammar token.
    env.filters["c_string"] = escape.c_string
    env.filters["py"] = escape.py_literal
    env.globals["py_assign"] = pyformat.assign  # `NAME = value`, laid out as ruff format would
    env.globals["py_call"] = pyformat.call  # `f(args)`, laid out as ruff format would
    env.globals["tensor_spec"] = lambda dtype, shape, layout, spelled: (
        pyformat.Name(dtype),
        pyformat.Name(shape),
        layout,
        spelled,
    )
    env.globals["gate_values"] = lambda names: {n: pyformat.Name(n) for n in names}
    env.filters["wrap_lines"] = _wrap_lines
    env.filters["docstring"] = escape.docstring
    env.filters["comment"] = escape.one_line
    env.filters["md"] = escape.markdown
    return env


def render_all(plans: list[FamilyPlan], root: Path) -> dict[str, str]:
    env = make_env(root)
    files: dict[str, str] = {}

    def put(path: str, text: str) -> None:
        if path in files:  # two templates claiming one file would make output order-dependent
            raise RuntimeError(f"k3gen bug: {path} rendered twice")
        files[path] = text

    backend_header = _render(env, "common/k3_backend.h.j2", None)
    put(keys.BACKEND_HEADER, backend_header)
    put(keys.HIP_COMPAT_HEADER, _render(env, "common/k3_hip_compat.h.j2", None))
    errors = []
    for p in plans:
        try:
            rendered = render_family(env, p, backend_header)
        except (jinja2.TemplateError, KeyError, ValueError, TypeError, IndexError, AttributeError) as exc:
            errors.append(located(p, exc, root))
            continue
        for path, text in rendered.items():
            put(path, text)
    if errors:  # every family that failed, each at its spec's `template:` line, naming the template line
        raise SpecErrors(errors)
    put("k3kernels/__init__.py", _render(env, "common/package_init.py.j2", None, names=[p.name for p in plans]))
    put(
        "docs/README.md",
        _render(
            env,
            "common/docs_index.md.j2",
            None,
            families=docs.index_table(plans),
            legend=docs.arch_legend(docs.declared_archs(plans)),
        ),
    )
    return files


def located(p: FamilyPlan, exc: Exception, root: Path) -> SpecError:
    """A render failure as a spec error: the spec's `template:` line, the template file and line."""
    where = None
    if isinstance(exc, jinja2.TemplateSyntaxError) and exc.name:
        where = f"templates/{exc.name}:{exc.lineno}"
    tb = exc.__traceback__
    while tb is not None:  # jinja2 maps template code to template lines: the innermost .j2 frame is it
        name = tb.tb_frame.f_code.co_filename
        if name.endswith(".j2"):
            path = Path(name)
            shown = path.relative_to(root).as_posix() if path.is_relative_to(root) else path.name
            where = f"{shown}:{tb.tb_lineno}"
        tb = tb.tb_next
    return p.error(
        ("template",),
        f"rendering {where or 'its templates'} failed: {type(exc).__name__}: {exc}; "
        "the spec asks for something the template does not support, or the template "
        "has a bug",
    )


def render_family(env: jinja2.Environment, p: FamilyPlan, backend_header: str) -> dict[str, str]:
    """One family's files; `backend_header`: the rendered k3_backend.h (what a tuning table measured)."""
    out = {}
    csrc = f"k3kernels/csrc/{p.name}"
    fam = family_view(p)
    out[f"{csrc}/{p.name}_abi.h"] = _render(env, "common/abi.h.j2", p, fam=fam)
    header = KERNEL_HEADER.format(name=p.name)
    out[f"{csrc}/{header}"] = _render(env, f"{p.spec.template}/kernel.cuh.j2", p, fam=fam)
    tuned = None
    if p.tuning is not None:  # what a tuning table measures: the kernel code, before any picks
        tuned = keys.settled_tuning(p, out[f"{csrc}/{header}"], backend_header)
        data = {
            "@generated": f"by k3gen from {p.file}; do not edit; run `k3gen build`",
            **keys.tuner_data(p, tuned.current, oracle_spec(p)),
        }
        out[f"k3kernels/tuning/{p.name}.json"] = json.dumps(data, indent=1, sort_keys=True) + "\n"
    for backend in p.backends:
        for v in p.variants:
            unit = unit_view(p, v, backend, tuned)
            out[f"{csrc}/{v.name}.{TU_EXT[backend]}"] = _render(
                env, "common/variant.cu.j2", p, fam=fam, u=unit, kernel_header=header
            )
        out[f"{csrc}/dispatch.{TU_EXT[backend]}"] = _render(env, "common/dispatch.cu.j2", p, fam=fam)
    host = dict(
        call=wrapper_signature(p),
        tensors=host_tensors(p),
        outputs=[t.name for t in p.tensors if t.output],
        pointers=pointer_tensors(p),
        **host_view(p),
    )
    host["fast_args"] = fast_path_args(p, host["pointers"], host["call"]["lists"]["names"])
    host["data"] = host_module_data(p, host["pointers"], host["outputs"])
    host["code"] = host_code(p, host)
    host["fast_call"] = tuple(pyformat.Name(n) for n in host["fast_args"])
    # The wrapper's first-call line says where the GPU's own table leaves variants untuned (settled).
    host_fam = fam if tuned is None else family_view(replace(p, tuning=tuned))
    out[f"k3kernels/{p.name}.py"] = _render(env, "common/host.py.j2", p, fam=host_fam, **host)
    out[f"tests/test_{p.name}.py"] = _render(env, "common/test.py.j2", p, fam=fam, data=test_module_data(p))
    if p.runners:  # this family is the front of the runner table
        rows = [
            (r.name, tuple(r.archs), r.consumes, pyformat.Name(torch_dtype(r.activation_dtype)), r.summary)
            for r in p.runners
        ]
        out["k3kernels/runners.py"] = _render(env, "common/runners.py.j2", p, fam=fam, rows=rows)
        imports = sorted(
            [f"from k3kernels import {p.name} as front", "from k3kernels import runners"],
            key=lambda line: line.split()[3],
        )
        out["tests/test_runners.py"] = _render(
            env, "common/test_runners.py.j2", p, fam=fam, k3kernels_imports=imports, data=runner_test_data(p)
        )
    # The doc says which tables serve, and where a table's picks no longer stand (its code changed).
    out.update(render_doc(env, p if tuned is None else replace(p, tuning=tuned)))
    return out


def render_doc(env: jinja2.Environment, p: FamilyPlan) -> dict[str, str]:
    """generated/docs/<family>.md; k3gen.render.docs computes its tables (the index: render_all)."""
    fam = family_view(p)
    return {f"docs/{p.name}.md": _render(env, "common/doc.md.j2", p, fam=fam, doc=docs.family_doc(p))}


def _tuple(names: list[str]) -> str:
    return f"({names[0]},)" if len(names) == 1 else f"({', '.join(names)})"


def host_code(p: FamilyPlan, host: dict) -> dict:
    """The host wrapper's argument lists and small tuples, spelled (pyformat.call lays them out)."""
    lists = host["call"]["lists"]
    axes = host["data"]["AXES"]
    return {
        "params": lists["params"],
        "names": lists["names"],
        "resolve_params": [*lists["params"], "*", *(f"{n}=None" for n in host["call"]["dtype_args"]), "fake=False"],
        "op_params": lists["op_params"],
        "resolve_from_op": lists["resolve_from_op"],
        "op_from_call": lists["op_from_call"],
        "tensor_tuple": _tuple([t["name"] for t in host["tensors"]]),
        "variant_tuple": _tuple([f"dtype_{k}" if k in axes else k for k in p.key.parts]),
        "dtype_list": "[" + ", ".join(f"dtype_{a}" for a in axes) + "]",
        "outputs_tuple": _tuple(host["outputs"]),
        "given": tuple(pyformat.Name(o) for o in host["outputs"]),
        # vec is read by a gate or a shape, or unpacked as `_`
        "uses_vec": any("vec" in g.names for g, _ in p.gates)
        or any(re.search(r"\bvec\b", c[2]) for t in host["tensors"] for c in t["cases"]),
    }


def _wrap_lines(text: str, depth: int) -> str:
    """Docstring text (escaped already) broken at spaces to fit 120 columns at `depth` indents (E501);
    the first line also holds the opening quotes."""
    pad = pyformat.INDENT * depth
    lines = textwrap.wrap(
        text, width=pyformat.LINE_LENGTH - len(pad) - 3, break_long_words=False, break_on_hyphens=False
    )
    return ("\n" + pad).join(lines)


def fast_path_args(p: FamilyPlan, pointers: list[str], names: list[str]) -> list[str]:
    """A call as the fast path takes it (k3gen.runtime.fastpath): Args tensors, then the rest in call order."""
    return [*pointers, *(n for n in names if n not in pointers)]


def pointer_tensors(p: FamilyPlan) -> list[str]:
    """The tensors whose data pointers the Args struct holds, in field order."""
    return [f.name for f in p.args if f.kind in ("ptr", "mut_ptr")]


def _render(env: jinja2.Environment, template: str, plan: FamilyPlan | None, **ctx) -> str:
    # No hash of the spec's text: a comment in the spec must change no generated file (k3gen.render.keys).
    def banner(comment: str) -> str:
        if plan is None:
            return f"{comment} @generated by k3gen — do not edit; run `k3gen build`."
        return f"{comment} @generated by k3gen from {plan.file} — do not edit; run `k3gen build`."

    return env.get_template(template).render(banner=banner, **ctx)
