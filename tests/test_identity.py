"""Identity from meaning, not text: which spec edits change which generated files and keys.

Keys (k3gen.render.keys) hash what is compiled: the rendered sources and headers, flags and arch. So an
edit of the spec's form (comments, whitespace, key order, YAML style) changes nothing; an edit of a
text only messages show (a reason, the summary, a note) changes the wrapper, tests or docs but no
translation unit and no key; an edit of what is compiled changes the keys of exactly the units whose
bytes change. And the key `k3gen list` shows is the one the runtime computes and uses on disk.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from k3gen.cli import main
from k3gen.plan import resolve_all
from k3gen.render import render_all
from k3gen.render.keys import libraries
from k3gen.runtime.cache import ensure_built
from k3gen.spec.load import load_specs

from support import ROOT, SPEC_FILE, copy_project

FAMILY = "situ_and_mul"
WRAPPER, TESTS, DOC, INDEX = (
    f"k3kernels/{FAMILY}.py",
    f"tests/test_{FAMILY}.py",
    f"docs/{FAMILY}.md",
    "docs/README.md",
)


def replaced(*pairs: tuple[str, str]):
    """An edit: each old text (present exactly once) replaced by its new text."""

    def edit(text: str) -> str:
        for old, new in pairs:
            assert text.count(old) == 1, old
            text = text.replace(old, new)
        return text

    return edit


def without_comments(text: str) -> str:
    lines = [re.sub(r"\s+#.*$", "", line) for line in text.splitlines() if not line.startswith("#")]
    return "\n".join(lines) + "\n"


# name: (edit of the frozen spec text, the generated files it may change)
NO_OP = {
    "comments added": replaced(
        ("kernel: situ_and_mul\n", "# reviewed again\nkernel: situ_and_mul  # the family\n"),
        ("layouts: [dense, strided]", "layouts: [dense, strided]   # both"),
    ),
    "comments removed": without_comments,
    "whitespace": replaced(
        (
            "targets:\n  cuda: [sm_90a, sm_100a]\n  hip: [gfx942, gfx950]\n",
            "targets:\n\n    cuda:   [ sm_90a,sm_100a ]\n    hip: [gfx942, gfx950]   \n\n",
        ),
        ("{in: bf16, out: fp16,", "{ in: bf16,  out: fp16 ,"),
    ),
    "top-level key order": replaced(
        ('summary: "out = beta', 'template: situ_and_mul\nsummary: "out = beta'),
        ("template: situ_and_mul\ntargets:", "targets:"),
    ),
    "key order inside mappings": replaced(
        ('x: {dtype: in, shape: [M, "2 * D"], layout: rows}', 'x: {layout: rows, shape: [M, "2 * D"], dtype: in}'),
        (
            '  - check: "D % vec == 0"\n    reason: "each thread moves one 16-byte vector, so D must be a multiple of '
            'the vector width"\n',
            '  - reason: "each thread moves one 16-byte vector, so D must be a multiple of the vector width"\n'
            '    check: "D % vec == 0"\n',
        ),
        ("{in: fp32, out: fp16, reason:", "{out: fp16, in: fp32, reason:"),
    ),
    "flow and block style": replaced(
        (
            "targets:\n  cuda: [sm_90a, sm_100a]\n  hip: [gfx942, gfx950]\n",
            "targets: {cuda: [sm_90a, sm_100a], hip: [gfx942, gfx950]}\n",
        ),
        ("vector: {bytes: 16}", "vector:\n  bytes: 16\n"),
        ('  dims: {M: "x.shape[0]", D: "x.shape[1] // 2"}\n', "  dims:\n    M: x.shape[0]\n    D: x.shape[1] // 2\n"),
        ("  layouts: [dense, strided]\n", "  layouts:\n    - dense\n    - 'strided'\n"),
    ),
    "quoting": replaced(
        ("kernel: situ_and_mul\n", 'kernel: "situ_and_mul"\n'),
        ("template: situ_and_mul\n", "template: 'situ_and_mul'\n"),
    ),
}
MESSAGES = {
    "a gate reason": (
        replaced(("need 16-byte aligned data pointers", "need data pointers on 16-byte boundaries")),
        {WRAPPER, DOC},
    ),
    "the summary": (
        replaced(("g|u = halves of x's rows\"", 'g|u = the two halves of each row of x"')),
        {WRAPPER, DOC, INDEX},
    ),
    "an exclusion reason": (
        replaced(("cast the bf16 output instead", "cast bf16 outputs downstream")),
        {WRAPPER, TESTS, DOC},
    ),
    "the fast-math note": (replaced(("one output ulp off the oracle at most", "at most one output ulp off")), {DOC}),
}


def rendered(project: Path) -> tuple[dict[str, str], dict[tuple[str, str], object]]:
    plans = resolve_all(load_specs(project), project)
    files = render_all(plans, project)
    return files, {(lib.family, lib.arch): lib for lib in libraries(plans, files)}


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> tuple[Path, dict, dict]:
    project = copy_project(tmp_path_factory.mktemp("identity") / "proj")
    return project, *rendered(project)


@pytest.fixture
def edited(base, tmp_path):
    """edited(edit) -> (changed generated files, libraries) of a copy with the spec edited."""

    def run(edit):
        project = copy_project(tmp_path / "proj")
        spec = project / SPEC_FILE
        spec.write_text(edit(spec.read_text()))
        files, libs = rendered(project)
        changed = {p for p in files.keys() | base[1].keys() if files.get(p) != base[1].get(p)}
        return changed, libs

    return run


@pytest.mark.parametrize("name", NO_OP)
def test_an_edit_of_form_changes_no_generated_file_and_no_key(base, edited, name):
    changed, libs = edited(NO_OP[name])
    assert changed == set()
    assert libs == base[2]  # every library key and every unit key


@pytest.mark.parametrize("name", MESSAGES)
def test_a_text_only_messages_show_changes_no_unit_and_no_key(base, edited, name):
    edit, allowed = MESSAGES[name]
    changed, libs = edited(edit)
    assert changed == allowed
    assert not any(p.endswith((".cu", ".hip", ".h", ".cuh")) for p in changed)
    assert libs == base[2]


def test_a_constant_changes_every_unit_of_the_family(base, edited):
    _, libs = edited(replaced(("block_threads: 256", "block_threads: 128")))
    for key, lib in base[2].items():
        assert libs[key].key != lib.key
        assert all(a.key != b.key for a, b in zip(libs[key].units, lib.units))


def test_a_new_dtype_cell_compiles_its_units_and_the_dispatch_only(base, edited):
    """The ABI header every unit includes names no variant, so the other units keep their keys."""
    _, libs = edited(
        replaced(
            (
                '    - {in: fp32, out: fp16, reason: "fp32 GEMM outputs feed bf16 runners; fp16 is not '
                'a runner dtype"}\n',
                "",
            )
        )
    )
    for key, lib in base[2].items():
        old, new = {u.file: u.key for u in lib.units}, {u.file: u.key for u in libs[key].units}
        ext = lib.units[0].file.rsplit(".", 1)[1]
        assert [f for f in new if f not in old] == [
            f"{FAMILY}__in_fp32__out_fp16__has_linear_beta_{b}.{ext}" for b in ("off", "on")
        ]
        assert [f for f in old if old[f] != new[f]] == [f"dispatch.{ext}"]


def test_a_template_edit_changes_the_units_whose_bytes_change(base, tmp_path):
    project = copy_project(tmp_path / "proj")
    kernel = project / "templates" / FAMILY / "kernel.cuh.j2"
    kernel.write_text(kernel.read_text() + "{# a template comment renders nothing #}\n")
    assert rendered(project)[1] == base[2]
    kernel.write_text(kernel.read_text() + "// a line of the kernel header\n")
    libs = rendered(project)[1]
    for key, lib in base[2].items():
        moved = [u.file for u, v in zip(lib.units, libs[key].units) if u.key != v.key]
        assert moved == [u.file for u in lib.units if not u.file.startswith("dispatch.")]  # dispatch omits it


def test_keys_are_unique_across_the_bundled_matrix():
    plans = resolve_all(load_specs(ROOT), ROOT)
    libs = libraries(plans, render_all(plans, ROOT))
    keys = [lib.key for lib in libs] + [u.key for lib in libs for u in lib.units]
    assert len(keys) == len(set(keys))
    assert sum(len(lib.units) for lib in libs) == sum(len(p.specializations) for p in plans) + len(libs)


def test_the_listed_library_key_is_the_runtimes_key_for_every_family_and_arch(capsys):
    """`k3gen list` over the work tree shows, per library, what FamilyModule.request(arch).content_key()
    computes from generated/ (what the JIT folder is named by and the AOT record stores)."""
    assert main(["--root", str(ROOT), "list"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:-1]]
    listed = {row[0]: row[-1] for row in rows}
    plans = resolve_all(load_specs(ROOT), ROOT)
    assert len(listed) == sum(len(p.specializations) for p in plans)
    for p in plans:
        module = importlib.import_module(f"k3kernels.{p.name}").MODULE
        for sp in p.specializations:
            assert module.request(sp.arch).content_key().startswith(listed[sp.identity]), sp.identity


def test_the_jit_folder_starts_with_the_library_key(fake_cc, tmp_path, capsys):
    project = copy_project(tmp_path / "proj")
    assert main(["--root", str(project), "build"]) == 0
    assert main(["--root", str(project), "list", "--family", FAMILY]) == 0
    listed = {line.split()[0]: line.split()[-1] for line in capsys.readouterr().out.splitlines()[1:-1]}
    from k3gen.render.keys import request_for

    plan = resolve_all(load_specs(project), project)[0]
    lib = ensure_built(request_for(plan, "sm_90a", project / "generated" / "k3kernels" / "csrc"))
    assert lib.parent.name.startswith(listed[f"{FAMILY}__in_bf16__out_bf16__has_linear_beta_off__sm_90a"])
