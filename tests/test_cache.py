"""The runtime's build cache, with a fake compiler (tests/fake_cc.py): no GPU, no nvcc.

Keys are injective over every input; concurrent callers build once; interrupted, corrupted,
wrong-arch and failed builds are never served; a missing compiler says which variable to set.
"""

from __future__ import annotations

import importlib
import multiprocessing
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from k3gen.runtime import K3BuildError, K3ToolchainMissing
from k3gen.runtime.artifact import LIB, RECORD, jit_entry_name
from k3gen.runtime.cache import BuildRequest, ensure_built
from k3gen.runtime.toolchain import find_compiler

from fake_cc import build_in_child
from support import ROOT

SOURCES = ("fam__a.cu", "fam__b.cu", "dispatch.cu")
HEADERS = ("fam.cuh", "fam_abi.h", "../k3_backend.h")
FILES = {
    "k3_backend.h": "#pragma once\n// backend\n",
    "fam/fam_abi.h": '#pragma once\n#include "../k3_backend.h"\nstruct Args { int n; };\n',
    "fam/fam.cuh": '#pragma once\n#include "fam_abi.h"\ntemplate <int N> __global__ void k() {}\n',
    "fam/fam__a.cu": '#include "fam.cuh"\nvoid a() { k<1><<<1, 1>>>(); }\n',
    "fam/fam__b.cu": '#include "fam.cuh"\nvoid b() { k<2><<<1, 1>>>(); }\n',
    "fam/dispatch.cu": '#include "fam_abi.h"\nextern "C" int k3_fam_launch() { return 0; }\n',
}


def make_csrc(root: Path) -> Path:
    for rel, text in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


@pytest.fixture
def csrc(tmp_path: Path) -> Path:
    return make_csrc(tmp_path / "gen" / "k3kernels" / "csrc")


def request(csrc: Path, arch: str = "sm_90a", defines: tuple[str, ...] = ("-DK3_PDL=1",)) -> BuildRequest:
    return BuildRequest("fam", arch, csrc, SOURCES, HEADERS, defines)


def entry_of(req: BuildRequest, cache: Path) -> Path:
    return cache / req.family / req.arch / jit_entry_name(req.content_key(), req.key())


# (a) injectivity ---------------------------------------------------------------------------------


def test_identical_inputs_give_one_key_even_relocated(fake_cc, csrc, tmp_path):
    other = make_csrc(tmp_path / "elsewhere" / "csrc")
    assert request(csrc).key() == request(csrc).key() == request(other).key()
    assert request(csrc).content_key() == request(other).content_key()


def _append(path: Path, text: str) -> None:
    path.write_text(path.read_text() + text)


CHANGES = {
    "source byte": lambda c, fake: _append(c / "fam" / "fam__b.cu", " "),
    "kernel header byte": lambda c, fake: _append(c / "fam" / "fam.cuh", "\n"),
    "shared header byte": lambda c, fake: _append(c / "k3_backend.h", "//"),
    "compiler version text": lambda c, fake: fake.set("FAKE_CC_VERSION", "fake-cc release 1.1"),
}


@pytest.mark.parametrize("change", CHANGES, ids=list(CHANGES))
def test_key_changes_with_each_file_and_the_compiler(fake_cc, csrc, change):
    before = request(csrc).key()
    CHANGES[change](csrc, fake_cc)
    assert request(csrc).key() != before


@pytest.mark.parametrize(
    "other",
    [
        dict(arch="sm_100a"),
        dict(defines=("-DK3_PDL=0",)),
        dict(defines=("-DK3_PDL=1", "-DK3_X=1")),
        dict(defines=()),
    ],
    ids=["arch", "define value", "extra define", "no define"],
)
def test_key_changes_with_arch_and_flags(fake_cc, csrc, other):
    assert request(csrc, **other).key() != request(csrc).key()


def test_key_changes_with_the_unit_list_and_family(fake_cc, csrc):
    base = request(csrc)
    fewer = BuildRequest("fam", "sm_90a", csrc, SOURCES[1:], HEADERS, base.defines)
    shutil.copytree(csrc / "fam", csrc / "fam2")  # a copy: the runtime never reads through a link
    renamed = BuildRequest("fam2", "sm_90a", csrc, SOURCES, HEADERS, base.defines)
    assert len({base.key(), fewer.key(), renamed.key()}) == 3


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_flipping_any_byte_of_any_input_changes_the_key(fake_cc, csrc, data):
    rel = data.draw(st.sampled_from(sorted(FILES)))
    path = csrc / rel
    original = path.read_bytes()
    i = data.draw(st.integers(0, len(original) - 1))
    before = request(csrc).key()
    try:
        path.write_bytes(original[:i] + bytes([original[i] ^ data.draw(st.integers(1, 255))]) + original[i + 1 :])
        assert request(csrc).key() != before
    finally:
        path.write_bytes(original)


def test_every_family_and_arch_of_generated_has_its_own_key(fake_cc):
    """The whole real matrix, as the generated wrappers ask for it, CUDA and HIP archs alike."""
    families = importlib.import_module("k3kernels").FAMILIES
    keys = {}
    for name in families:
        module = importlib.import_module(f"k3kernels.{name}").MODULE
        assert module.csrc == ROOT / "generated" / "k3kernels" / "csrc"
        for arch in module.arch_defines:
            keys[(name, arch)] = module.request(arch).key()
    assert len(keys) >= 2 * len(families)
    assert len(set(keys.values())) == len(keys)


# (b) concurrency ---------------------------------------------------------------------------------


def test_concurrent_processes_build_once_and_agree(fake_cc, csrc, tmp_path):
    fake_cc.set("FAKE_CC_SLEEP_LINK", "0.5")  # hold the build open while the others arrive
    n = 4
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=build_in_child, args=(request(csrc), barrier, results)) for _ in range(n)]
    for p in procs:
        p.start()
    paths = [results.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert len(set(paths)) == 1
    assert fake_cc.count("link") == 1
    assert fake_cc.count("compile") == len(SOURCES)
    assert Path(paths[0]) == entry_of(request(csrc), _cache(tmp_path)) / LIB


# (c) interrupted builds --------------------------------------------------------------------------


def _cache(tmp_path: Path) -> Path:
    return tmp_path / "cache"


def test_a_staging_dir_left_behind_is_removed_and_the_build_done(fake_cc, csrc, tmp_path):
    req = request(csrc)
    parent = _cache(tmp_path) / "fam" / "sm_90a"
    debris = parent / f".staging-{req.key()[:12]}-killed"
    (debris / "obj").mkdir(parents=True)
    (debris / LIB).write_text("half a library")
    lib = ensure_built(req)
    assert lib == entry_of(req, _cache(tmp_path)) / LIB
    assert not debris.exists() and not list(parent.glob(".staging-*"))
    assert fake_cc.count("link") == 1


@pytest.mark.parametrize("damage", ["no record", "bad json", "no library"])
def test_a_final_dir_without_a_valid_record_is_rebuilt(fake_cc, csrc, tmp_path, damage):
    req = request(csrc)
    lib = ensure_built(req)
    good = lib.read_bytes()
    {
        "no record": lambda: (lib.parent / RECORD).unlink(),
        "bad json": lambda: (lib.parent / RECORD).write_text('{"key": '),
        "no library": lambda: lib.unlink(),
    }[damage]()
    assert ensure_built(req) == lib
    assert fake_cc.count("link") == 2
    assert lib.read_bytes() == good  # deterministic rebuild, now vouched for by a fresh record
    assert ensure_built(req) == lib and fake_cc.count("link") == 2


# (d) corruption ----------------------------------------------------------------------------------


def test_a_corrupted_library_is_detected_and_rebuilt(fake_cc, csrc):
    req = request(csrc)
    lib = ensure_built(req)
    good = lib.read_bytes()
    lib.write_bytes(good[:-2] + b"!\n")  # same size, other bytes
    assert ensure_built(req) == lib
    assert lib.read_bytes() == good
    assert fake_cc.count("link") == 2


# (e) wrong arch ----------------------------------------------------------------------------------


def test_an_entry_of_another_arch_under_the_key_path_is_never_loaded(fake_cc, csrc, tmp_path):
    sm90, sm100 = request(csrc, "sm_90a"), request(csrc, "sm_100a")
    lib90 = ensure_built(sm90)
    planted = entry_of(sm100, _cache(tmp_path))
    shutil.copytree(lib90.parent, planted)  # a valid sm_90a entry where sm_100a's belongs
    lib100 = ensure_built(sm100)
    assert lib100 == planted / LIB
    assert fake_cc.count("link") == 2
    assert '"arch": "sm_100a"' in (planted / RECORD).read_text()


def test_an_aot_entry_of_another_arch_is_never_loaded(fake_cc, csrc, tmp_path):
    sm90, sm100 = request(csrc, "sm_90a"), request(csrc, "sm_100a")
    lib100 = ensure_built(sm100)
    aot = tmp_path / "aot"
    shutil.copytree(lib100.parent, aot / "fam" / "sm_90a")  # sm_100a's library filed as sm_90a's
    fake_cc.set("K3GEN_AOT_DIR", str(aot))
    fake_cc.set("K3GEN_NO_JIT", "1")
    with pytest.raises(K3BuildError, match=r"is for fam sm_100a, not fam sm_90a"):
        ensure_built(sm90)
    fake_cc.set("K3GEN_NO_JIT", None)
    assert ensure_built(sm90) == entry_of(sm90, _cache(tmp_path)) / LIB  # JIT instead
    assert fake_cc.count("link") == 2


# (f) failed builds -------------------------------------------------------------------------------


@pytest.mark.parametrize("step", ["compile", "link"])
def test_a_failed_build_raises_with_the_compiler_output_and_leaves_nothing(fake_cc, csrc, tmp_path, step):
    req = request(csrc)
    fake_cc.set("FAKE_CC_FAIL", step)
    with pytest.raises(K3BuildError, match=f"building fam for sm_90a failed:(.|\n)*{step} of .* failed on purpose"):
        ensure_built(req)
    parent = _cache(tmp_path) / "fam" / "sm_90a"
    assert not entry_of(req, _cache(tmp_path)).exists()
    assert not list(parent.glob(".staging-*"))
    fake_cc.set("FAKE_CC_FAIL", None)
    assert ensure_built(req).is_file()


# (g) missing compiler ----------------------------------------------------------------------------


def test_no_compiler_anywhere_names_the_variable(fake_cc, csrc, tmp_path):
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    fake_cc.set("PATH", str(empty))
    fake_cc.set("CUDA_HOME", str(tmp_path / "no-cuda"))
    fake_cc.set("K3GEN_NVCC", None)
    with pytest.raises(K3ToolchainMissing, match=r"nvcc \(the CUDA toolkit\) not found.*K3GEN_NVCC"):
        ensure_built(request(csrc))
    fake_cc.set("K3GEN_HIPCC", None)
    fake_cc.set("ROCM_PATH", str(tmp_path / "no-rocm"))
    with pytest.raises(K3ToolchainMissing, match=r"hipcc or clang\+\+ \(ROCm\) not found.*K3GEN_HIPCC"):
        ensure_built(request(csrc, "gfx942", ()))


def test_a_rocm_install_comes_before_a_bare_clang(fake_cc, tmp_path):
    """Only ROCm brings the device libraries a HIP library links: its hipcc (K3GEN_ROCM_PATH, hipcc on
    PATH, $ROCM_PATH or /opt/rocm) is taken before a Debian clang on PATH."""
    rocm, bin_dir = tmp_path / "rocm", tmp_path / "bin"
    (rocm / "bin").mkdir(parents=True)
    bin_dir.mkdir()
    shutil.copy(fake_cc.path, rocm / "bin" / "hipcc")
    shutil.copy(fake_cc.path, bin_dir / "clang++-19")
    fake_cc.set("K3GEN_HIPCC", None)
    fake_cc.set("PATH", str(bin_dir))
    fake_cc.set("ROCM_PATH", str(rocm))
    assert find_compiler("hip") == str(rocm / "bin" / "hipcc")
    fake_cc.set("ROCM_PATH", str(tmp_path / "no-rocm"))
    assert find_compiler("hip") == str(bin_dir / "clang++-19")
    fake_cc.set("K3GEN_ROCM_PATH", str(rocm))
    assert find_compiler("hip") == str(rocm / "bin" / "hipcc")
    fake_cc.set("K3GEN_ROCM_PATH", str(tmp_path / "not-rocm"))  # named, so never silently replaced
    with pytest.raises(K3ToolchainMissing, match=r"K3GEN_ROCM_PATH=.*not-rocm holds no bin/hipcc"):
        find_compiler("hip")


def test_a_compiler_variable_naming_nothing_says_so(fake_cc, csrc, tmp_path):
    fake_cc.set("K3GEN_NVCC", str(tmp_path / "nvcc-not-here"))
    with pytest.raises(K3ToolchainMissing, match=r"K3GEN_NVCC=.*nvcc-not-here is not an executable file"):
        ensure_built(request(csrc))
