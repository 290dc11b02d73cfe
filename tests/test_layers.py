"""The layers DESIGN.md draws, checked on the source: who may import whom, and one of each helper."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from support import ROOT

K3GEN = ROOT / "k3gen"
STDLIB = set(sys.stdlib_module_names)


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


def test_docs_and_render_do_not_import_each_other_both_use_spellings():
    docs, render = imports(K3GEN / "render/docs.py"), imports(K3GEN / "render/render.py")
    assert not any(m.startswith("k3gen.render.render") for m in docs)
    assert "k3gen.render.spellings" in docs and "k3gen.render.spellings" in render


def test_the_runtime_imports_torch_the_standard_library_and_itself_only():
    for path in sorted((K3GEN / "runtime").glob("*.py")):
        for name in imports(path):
            top = name.split(".")[0]
            assert top in STDLIB or top in ("torch", "ninja") or name.startswith("k3gen.runtime") or name == "k3gen", (
                f"{path.name} imports {name}"
            )


def test_the_generated_tests_helper_imports_torch_pytest_the_standard_library_and_the_runtime_only():
    """k3gen.testing runs wherever the generated tests run: a machine with torch (and pytest) alone."""
    for name in imports(K3GEN / "testing.py"):
        top = name.split(".")[0]
        assert top in STDLIB or top in ("torch", "pytest") or name.startswith("k3gen.runtime") or name == "k3gen", (
            f"testing.py imports {name}"
        )
    code = (
        "import sys\nfor m in ('pydantic', 'jinja2', 'yaml'): sys.modules[m] = None\nimport k3gen.testing\nprint('ok')"
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
