"""`k3gen compile` and the runtime's use of its output, with the fake compiler (tests/fake_cc.py).

A throwaway project with two families (situ_and_mul, route_topk): one ninja build of the matrix,
a rerun that does nothing, an edit that rebuilds only what it touched, and a runtime that takes the
AOT library when, and only when, its record vouches for exactly the request.
"""

from __future__ import annotations

import importlib
import importlib.util
import shutil
from pathlib import Path

import pytest

from k3gen.cli import main
from k3gen.runtime import K3BuildError, K3ToolchainMissing
from k3gen.runtime.artifact import LIB, RECORD
from k3gen.runtime.cache import ensure_built

from support import ROOT, SPEC_FILE, copy_project

FAMILIES = ("situ_and_mul", "route_topk")
CUDA_ARCHS = ("sm_90a", "sm_100a")


@pytest.fixture
def proj(tmp_path: Path, capfd) -> Path:
    project = copy_project(tmp_path / "proj", (SPEC_FILE, "specs/route_topk.yaml"))
    assert main(["--root", str(project), "build"]) == 0
    capfd.readouterr()
    return project


def k3gen(project: Path, *args: str) -> int:
    return main(["--root", str(project), *args])


def compile_(project: Path, *args: str) -> int:
    return k3gen(project, "compile", "--out", str(project / "aot"), *args)


def units(project: Path, family: str) -> int:
    return len(list((project / "generated" / "k3kernels" / "csrc" / family).glob("*.cu")))


def wrapper(project: Path, family: str):
    """The project's generated FamilyModule: the runtime's own view of what to load."""
    path = project / "generated" / "k3kernels" / f"{family}.py"
    spec = importlib.util.spec_from_file_location(f"_k3_aot_test_{family}_{id(project)}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.MODULE


def mtimes(project: Path) -> dict[str, int]:
    aot = project / "aot"
    return {
        p.relative_to(aot).as_posix(): p.stat().st_mtime_ns
        for p in aot.rglob("*")
        if p.is_file() and not p.name.startswith(".ninja")
    }


def test_compile_builds_the_matrix_once_and_the_runtime_takes_it(fake_cc, proj, capfd):
    assert compile_(proj) == 0
    out = capfd.readouterr().out
    assert "link situ_and_mul/sm_90a" in out  # ninja's progress, shown
    assert "4/4 libraries up to date" in out
    n_units = sum(units(proj, f) for f in FAMILIES) * len(CUDA_ARCHS)
    assert fake_cc.count("compile") == n_units and fake_cc.count("link") == 4
    assert sorted(p.parent.relative_to(proj / "aot").as_posix() for p in (proj / "aot").rglob(RECORD)) == sorted(
        f"{f}/{a}" for f in FAMILIES for a in CUDA_ARCHS
    )  # default: CUDA archs only
    fake_cc.set("K3GEN_AOT_DIR", str(proj / "aot"))
    fake_cc.set("K3GEN_NO_JIT", "1")
    for family in FAMILIES:
        module = wrapper(proj, family)
        for arch in CUDA_ARCHS:
            assert ensure_built(module.request(arch)) == proj / "aot" / family / arch / LIB
    assert fake_cc.count("link") == 4  # nothing was built at run time
    # (the cache holds only compile_memory.json: the per-unit memory peak that `k3gen compile` measured)
    assert [p.name for p in (proj.parent / "cache").rglob("*")] == ["compile_memory.json"]


def test_each_record_holds_the_library_key_k3gen_list_shows_and_the_costs_are_measured(fake_cc, proj):
    import json

    from k3gen.plan import resolve_all
    from k3gen.render import render_all
    from k3gen.render.keys import libraries
    from k3gen.ship.costs import TABLE, load
    from k3gen.spec.load import load_specs

    assert compile_(proj) == 0
    plans = resolve_all(load_specs(proj), proj)
    libs = {(lib.family, lib.arch): lib for lib in libraries(plans, render_all(plans, proj))}
    for family in FAMILIES:
        for arch in CUDA_ARCHS:
            record = json.loads((proj / "aot" / family / arch / RECORD).read_text())
            assert record["content_key"] == libs[(family, arch)].key
    table = load(proj / "aot" / "compile_costs.json")
    for (family, arch), lib in libs.items():
        if arch in CUDA_ARCHS:
            assert {f"{family}/{u.file}" for u in lib.units} <= table.units[arch].keys()
            assert table.libraries[arch][family]["bytes"] == (proj / "aot" / family / arch / LIB).stat().st_size
    assert "fake-cc release 1.0" in table.measured["sm_90a"]
    assert not (proj / TABLE).exists()  # the checked-in table changes only when asked
    assert compile_(proj, "--record-costs") == 0
    assert load(proj / TABLE).units == table.units


def test_compile_and_the_runtime_agree_on_every_key_of_the_real_matrix(fake_cc):
    """What `k3gen compile` records is what each generated wrapper asks for, CUDA and HIP alike."""
    from k3gen.plan import resolve_all
    from k3gen.ship.aot import select, targets_for
    from k3gen.spec.load import load_specs

    plans = resolve_all(load_specs(ROOT), ROOT)
    archs = list(dict.fromkeys(a for p in plans for b in p.backends for a in p.archs(b)))
    targets = targets_for(select(plans, archs, []), ROOT / "generated" / "k3kernels" / "csrc")
    assert len(targets) == sum(len(p.archs(b)) for p in plans for b in p.backends)
    for t in targets:
        module = importlib.import_module(f"k3kernels.{t.request.family}").MODULE
        assert module.request(t.request.arch) == t.request, t.entry


def test_a_rerun_does_nothing_and_an_edited_spec_rebuilds_only_its_family(fake_cc, proj, capfd):
    assert compile_(proj, "--arch", "sm_90a") == 0
    before, calls = mtimes(proj), len(fake_cc.calls())
    capfd.readouterr()
    assert compile_(proj, "--arch", "sm_90a") == 0
    out = capfd.readouterr().out
    assert "no work to do" in out and "(0 records written" in out
    assert len(fake_cc.calls()) == calls
    assert mtimes(proj) == before

    spec = proj / "specs" / "route_topk.yaml"
    spec.write_text(spec.read_text() + "# a comment changes no generated file: nothing to rebuild\n")
    assert k3gen(proj, "build") == 0
    assert compile_(proj, "--arch", "sm_90a") == 0
    assert len(fake_cc.calls()) == calls and mtimes(proj) == before
    spec.write_text(spec.read_text().replace("top_k: 16", "top_k: 8"))  # a constant: in every unit
    assert k3gen(proj, "build") == 0
    assert compile_(proj, "--arch", "sm_90a") == 0
    rebuilt = fake_cc.calls()[calls:]
    assert len([c for c in rebuilt if c.startswith("compile")]) == units(proj, "route_topk")
    assert all("/route_topk/sm_90a/" in c for c in rebuilt)
    after = mtimes(proj)
    assert {k for k in after if after[k] != before[k]} >= {f"route_topk/sm_90a/{LIB}", f"route_topk/sm_90a/{RECORD}"}
    assert all(after[k] == before[k] for k in before if k.startswith("situ_and_mul/"))


def test_a_header_edit_rebuilds_the_units_that_include_it(fake_cc, proj):
    """Only the variant units include route_topk.cuh (dispatch.cu does not): their staged copies
    (k3gen.runtime.stage) are new folders, so their commands are new; dispatch.cu's is not."""
    assert compile_(proj, "--arch", "sm_90a") == 0
    calls = len(fake_cc.calls())
    kernel = proj / "templates" / "route_topk" / "kernel.cuh.j2"
    kernel.write_text(kernel.read_text() + "// a template edit reaches route_topk.cuh only\n")
    assert k3gen(proj, "build") == 0
    assert compile_(proj, "--arch", "sm_90a") == 0
    rebuilt = [c for c in fake_cc.calls()[calls:] if c.startswith("compile")]
    assert len(rebuilt) == units(proj, "route_topk") - 1
    assert not any(c.endswith("/dispatch.o") for c in rebuilt)


def test_a_stale_aot_build_is_never_loaded(fake_cc, proj):
    assert compile_(proj, "--family", "situ_and_mul", "--arch", "sm_90a") == 0
    spec = proj / "specs" / "situ_and_mul.yaml"
    spec.write_text(spec.read_text().replace("block_threads: 256", "block_threads: 128"))  # after the AOT build
    assert k3gen(proj, "build") == 0  # generated/ changes, build/aot does not
    fake_cc.set("K3GEN_AOT_DIR", str(proj / "aot"))
    req = wrapper(proj, "situ_and_mul").request("sm_90a")
    fake_cc.set("K3GEN_NO_JIT", "1")
    with pytest.raises(K3BuildError) as err:
        ensure_built(req)
    text = str(err.value)
    assert f"situ_and_mul for sm_90a has no AOT build and JIT is off (K3GEN_NO_JIT=1); expected key {req.key()}" in text
    assert "stale:" in text
    assert "`k3gen compile --arch sm_90a --family situ_and_mul`" in text
    fake_cc.set("K3GEN_NO_JIT", None)
    lib = ensure_built(req)  # JIT builds what the AOT output lacks
    assert lib.is_relative_to(proj.parent / "cache")
    assert (proj / "aot" / "situ_and_mul" / "sm_90a" / LIB) != lib


def test_a_damaged_aot_entry_is_not_loaded(fake_cc, proj):
    assert compile_(proj, "--family", "route_topk") == 0
    aot = proj / "aot" / "route_topk"
    lib = aot / "sm_90a" / LIB
    lib.write_text(lib.read_text().upper())
    shutil.rmtree(aot / "sm_100a")
    shutil.copytree(aot / "sm_90a", aot / "sm_100a")  # an sm_90a entry filed as sm_100a's
    fake_cc.set("K3GEN_AOT_DIR", str(proj / "aot"))
    fake_cc.set("K3GEN_NO_JIT", "1")
    module = wrapper(proj, "route_topk")
    with pytest.raises(K3BuildError, match=r"corrupted: .* does not hash to its record's lib_sha256"):
        ensure_built(module.request("sm_90a"))
    with pytest.raises(K3BuildError, match="is for route_topk sm_90a, not route_topk sm_100a"):
        ensure_built(module.request("sm_100a"))


def test_the_default_aot_dir_is_the_projects_build_aot(fake_cc, proj):
    assert k3gen(proj, "compile", "--family", "route_topk", "--arch", "sm_100a") == 0
    fake_cc.set("K3GEN_AOT_DIR", None)
    fake_cc.set("K3GEN_NO_JIT", "1")
    module = wrapper(proj, "route_topk")
    assert ensure_built(module.request("sm_100a")) == proj / "build" / "aot" / "route_topk" / "sm_100a" / LIB
    with pytest.raises(K3BuildError, match=r"route_topk for sm_90a has no AOT build.*no record"):
        ensure_built(module.request("sm_90a"))


def test_a_machine_without_a_compiler_loads_a_matching_aot_build(fake_cc, proj, tmp_path):
    assert compile_(proj, "--family", "situ_and_mul", "--arch", "sm_90a") == 0
    req = wrapper(proj, "situ_and_mul").request("sm_90a")
    fake_cc.set("K3GEN_AOT_DIR", str(proj / "aot"))
    fake_cc.set("K3GEN_NVCC", str(tmp_path / "no-nvcc"))
    assert ensure_built(req) == proj / "aot" / "situ_and_mul" / "sm_90a" / LIB  # by content key
    with pytest.raises(K3ToolchainMissing, match="K3GEN_NVCC"):
        ensure_built(wrapper(proj, "route_topk").request("sm_90a"))  # not built ahead: JIT needs nvcc
    fake_cc.set("K3GEN_NO_JIT", "1")
    with pytest.raises(K3BuildError, match=r"expected content key [0-9a-f]{64} \(no compiler here"):
        ensure_built(wrapper(proj, "route_topk").request("sm_90a"))


def test_selection_by_family_and_arch(fake_cc, proj):
    assert compile_(proj, "--family", "situ_and_mul", "--arch", "sm_100a") == 0
    assert [p.parent.name for p in (proj / "aot").rglob(RECORD)] == ["sm_100a"]
    assert fake_cc.count("link") == 1
    assert compile_(proj, "--family", "route_topk", "situ_and_mul", "--arch", "sm_90a,sm_100a") == 0
    assert fake_cc.count("link") == 4  # the other three; the one built before stays built


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--arch", "sm_80"],
            "arch sm_80 is declared by none of route_topk, situ_and_mul; declared: sm_90a, sm_100a, gfx942",
        ),
        (["--family", "nope"], "k3gen compile: unknown family 'nope'; families: route_topk, situ_and_mul"),
    ],
)
def test_bad_selections_exit_2_naming_what_is_declared(fake_cc, proj, capfd, args, message):
    assert compile_(proj, *args) == 2
    assert message in capfd.readouterr().err


def test_a_hip_arch_without_a_hip_compiler_names_the_variable(fake_cc, proj, capfd):
    fake_cc.set("K3GEN_HIPCC", str(proj / "no-hipcc"))
    assert compile_(proj, "--arch", "gfx942") == 1
    assert "K3GEN_HIPCC" in capfd.readouterr().err


def test_a_failed_unit_fails_the_command_and_leaves_no_record(fake_cc, proj, capfd):
    fake_cc.set("FAKE_CC_FAIL", "compile")
    assert compile_(proj, "--family", "route_topk") == 1
    out, err = capfd.readouterr()
    assert "failed on purpose" in out + err
    assert "failed: route_topk/sm_90a, route_topk/sm_100a" in err
    assert not list((proj / "aot").rglob(RECORD))
    fake_cc.set("FAKE_CC_FAIL", None)
    assert compile_(proj, "--family", "route_topk") == 0


def test_a_stale_generated_tree_is_refused(fake_cc, proj, capfd):
    spec = proj / "specs" / "route_topk.yaml"
    spec.write_text(spec.read_text().replace("top_k: 16", "top_k: 8"))  # not built yet
    assert compile_(proj) == 1
    assert "run `k3gen build` first" in capfd.readouterr().err
    assert fake_cc.count("compile") == 0
