"""The layers of docs/design.md, checked on the source: who may import whom (one row per subpackage),
no import cycle, render reaches no further down than the plan's data, and one of each helper."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from support import ROOT

# What `k3gen test` selects this module by (k3gen.review.impact): the paths it reads besides k3gen/ and tests/.
READS = ("templates/**",)

K3GEN = ROOT / "k3gen"
STDLIB = set(sys.stdlib_module_names)
# subpackage (or top module) -> (the k3gen subpackages it may import, the third-party packages it may import)
LAYERS = {
    "runtime": ({"runtime"}, {"torch", "ninja"}),
    "oracles": ({"oracles", "runtime"}, {"torch", "pytest", "k3kernels"}),  # k3kernels: the generated package
    "spec": ({"spec", "runtime"}, {"pydantic", "yaml"}),
    "plan": ({"plan", "spec", "runtime", "tune"}, set()),  # tune: its table format alone (below)
    "render": ({"render", "plan", "spec", "runtime"}, {"jinja2"}),
    "ship": ({"ship", "render", "plan", "spec", "runtime"}, {"jinja2", "torch"}),
    "review": ({"review", "ship", "render", "plan", "spec", "runtime"}, {"jinja2"}),
    "tune": ({"tune", "runtime"}, {"torch"}),
    # integrations: runs where the wrappers run (a serving machine: torch and the generated package);
    # transformers, vLLM and SGLang are matched by class name and call signature, never imported
    "integrations": ({"integrations", "runtime"}, {"torch", "k3kernels"}),
}
TOP = {"cli", "__main__", "__init__"}  # the command sits above every stage
# What render may read of the stages below: the plan's data and the spellings' sources, never the
# resolving, parsing or checking code (render spells plan fields; it resolves nothing itself).
RENDER_MAY_NOT = (
    "k3gen.plan.resolve",
    "k3gen.spec.load",
    "k3gen.spec.rules",
    "k3gen.spec.scopes",
    "k3gen.spec.meaning",
)
RENDER_MAY_NOT_NAMES = {"parse_expr", "resolve_all", "resolve_family", "load_specs", "read_tables", "read_limits"}


def modules() -> dict[str, Path]:
    return {
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
        for p in sorted(K3GEN.rglob("*.py"))
    }


def imports(path: Path) -> set[str]:
    """Absolute names a module imports (relative imports resolved against its package)."""
    package = path.relative_to(ROOT).with_suffix("").parts[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else ()
            module = ".".join([*base, *([node.module] if node.module else [])])
            found.add(module)
            found |= {f"{module}.{a.name}" for a in node.names}
    return found


def layer_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


@pytest.mark.parametrize("layer", LAYERS)
def test_each_subpackage_imports_only_what_its_row_allows(layer):
    allowed, third = LAYERS[layer]
    for module, path in modules().items():
        if layer_of(module) != layer:
            continue
        for name in imports(path):
            top = name.split(".")[0]
            if top == "k3gen":
                if name in ("k3gen", "k3gen.__version__"):  # the package's face, importable from anywhere
                    continue
                assert layer_of(name) in allowed, f"{module} imports {name}: {layer} may import {sorted(allowed)}"
            else:
                assert top in STDLIB or top in third, f"{module} imports {name}: {layer} may use {sorted(third)}"


def test_the_plan_takes_only_the_table_format_of_tune_and_it_needs_nothing_else():
    for module, path in modules().items():
        if layer_of(module) == "plan":
            assert {n for n in imports(path) if n.startswith("k3gen.tune")} <= {
                "k3gen.tune.table",
                "k3gen.tune.table.FORMAT",
                "k3gen.tune.table.KEYS",
            }, module
    assert {n.split(".")[0] for n in imports(K3GEN / "tune/table.py")} <= STDLIB


def test_every_module_is_in_a_row():
    for module in modules():
        assert layer_of(module) in LAYERS or layer_of(module) in TOP, f"{module} belongs to no layer of LAYERS"


def test_no_import_cycle():
    graph = {m: set() for m in modules()}
    for module, path in modules().items():
        for name in imports(path):
            while name and name not in graph:
                name = name.rpartition(".")[0]
            if name and name != module and not module.startswith(name + "."):
                graph[module].add(name)
    done, stack = set(), []

    def visit(m: str) -> None:
        if m in stack:
            cycle = stack[stack.index(m) :] + [m]
            raise AssertionError("import cycle: " + " -> ".join(cycle))
        if m in done:
            return
        stack.append(m)
        for n in sorted(graph[m]):
            visit(n)
        stack.pop()
        done.add(m)

    for m in sorted(graph):
        visit(m)


def test_render_reads_the_plan_and_resolves_nothing():
    for module, path in modules().items():
        if layer_of(module) != "render":
            continue
        for name in imports(path):
            assert not name.startswith(RENDER_MAY_NOT), f"{module} imports {name}: render spells plan fields only"
            assert name.rsplit(".", 1)[-1] not in RENDER_MAY_NOT_NAMES, f"{module} imports {name}"


def test_templates_get_views_never_the_plan_or_the_spec():
    """Templates read the views render builds (k3gen.render.views): no `p.` or `spec.` in any of them."""
    import re

    for path in sorted((ROOT / "templates").rglob("*.j2")):
        code = "\n".join(re.findall(r"\{\{.*?\}\}|\{%.*?%\}", path.read_text(), re.S))
        assert not re.search(r"\b(p|spec|plan)\.", code), f"{path.relative_to(ROOT)} reads the plan or the spec"


def test_the_generated_tests_helper_imports_torch_pytest_the_standard_library_and_the_runtime_only():
    """k3gen.oracles.testing runs wherever the generated tests run: a machine with torch (and pytest) alone."""
    code = "import sys\nfor m in ('pydantic', 'jinja2', 'yaml'): sys.modules[m] = None\n"
    code += "import k3gen.oracles.testing\nprint('ok')"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_the_gpu_half_of_tune_runs_without_the_generator():
    code = (
        "import sys\nfor m in ('pydantic', 'jinja2', 'yaml'): sys.modules[m] = None\nimport k3gen.tune.run\nprint('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_the_dtype_table_is_importable_without_pydantic_or_jinja2_or_torch():
    code = (
        "import sys\nfor m in ('pydantic', 'jinja2', 'yaml', 'torch'): sys.modules[m] = None\n"
        "from k3gen.runtime.dtypes import DTYPES\nimport k3gen.runtime.cache, k3gen.runtime.files\n"
        "print(len(DTYPES))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "5"


def test_one_dtype_table_the_runtime_names_dtypes_from_it():
    import torch

    from k3gen.runtime import checks
    from k3gen.runtime.dtypes import DTYPES

    assert {checks.dtype_name(getattr(torch, d.torch)) for d in DTYPES.values()} == set(DTYPES)


def test_one_write_if_changed_and_one_file_lock():
    for path in sorted(K3GEN.rglob("*.py")):
        text = path.read_text()
        if path.name != "files.py":
            assert "fcntl" not in text, f"{path.relative_to(ROOT)} locks files itself; use k3gen.runtime.files.locked"
            assert "def write_if_changed" not in text, f"{path.relative_to(ROOT)} has its own write_if_changed"
            assert "os.replace(" not in text, f"{path.relative_to(ROOT)} renames files itself"


def test_package_init_needs_only_the_standard_library():
    assert {n.split(".")[0] for n in imports(K3GEN / "__init__.py")} <= STDLIB


def test_the_integrations_import_torch_the_standard_library_and_the_runtime_only():
    """k3gen.integrations serves from a machine with torch alone: no generator dependency, no model library."""
    blocked = ("pydantic", "jinja2", "yaml", "transformers", "vllm", "sglang")
    code = f"import sys\nfor m in {blocked!r}: sys.modules[m] = None\n"
    code += "import k3gen.integrations.transformers, k3gen.integrations.engines\nprint('ok')"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
