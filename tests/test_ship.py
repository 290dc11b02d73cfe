"""Serving without a compiler: per-variant first calls, K3GEN_RECORD and `compile --from-record`,
K3GEN_COMPILER_LAUNCHER (sccache itself: tests/test_farm.py), memory-bounded jobs, and the one-line
error for missing ROCm device libraries.

The fake compiler (tests/fake_cc.py) stands in for nvcc, except where a test says it needs the real one.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from test_aot import compile_, k3gen, wrapper

from k3gen.runtime import K3BuildError, K3ToolchainMissing, jobs
from k3gen.runtime import module as runtime_module
from k3gen.runtime.cache import ensure_built
from k3gen.runtime.toolchain import explain_failure

from support import SPEC_FILE, copy_project

# What `k3gen test` selects this module by (k3gen.review.impact): the paths it reads besides k3gen/ and tests/
# (its projects are copies of tests/data's frozen specs and of templates/).
READS = ("templates/**",)

IN_CI = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


@pytest.fixture
def proj(tmp_path: Path, capfd) -> Path:
    project = copy_project(tmp_path / "proj", (SPEC_FILE, "specs/route_topk.yaml"))
    assert k3gen(project, "build") == 0
    capfd.readouterr()
    return project


@pytest.fixture
def loads(monkeypatch):
    """FamilyModule without a GPU: the device is an sm_90a, and loading a library returns what
    would have been loaded (path, entry symbol) instead of calling into it."""
    monkeypatch.setattr(runtime_module, "device_arch", lambda device=None: "sm_90a")
    monkeypatch.setattr(runtime_module.FamilyModule, "_load", lambda self, path, symbol: (path, symbol))
    monkeypatch.setattr(runtime_module, "_recorded", set())


def test_a_first_call_builds_only_its_variant_and_is_recorded(fake_cc, proj, loads, tmp_path):
    record = tmp_path / "warm.jsonl"
    fake_cc.set("K3GEN_RECORD", str(record))
    module = wrapper(proj, "situ_and_mul")
    table = module.request("sm_90a").variant_names()
    key, other = sorted(table)[:2]
    path, symbol = module._entry_for_key("sm_90a", key)
    assert symbol == f"k3_{table[key]}_launch"
    assert (fake_cc.count("compile"), fake_cc.count("link")) == (1, 1)  # one unit, not the 9 of the family
    assert module._entry_for_key("sm_90a", key) == (path, symbol)  # served from memory
    wrapper(proj, "situ_and_mul")._entry_for_key("sm_90a", key)  # a new process: from the JIT cache
    assert fake_cc.count("compile") == 1
    module._entry_for_key("sm_90a", other)
    assert fake_cc.count("compile") == 2
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    assert lines == [
        {"arch": "sm_90a", "family": "situ_and_mul", "key": hex(k), "variant": table[k]} for k in (key, other)
    ]
    # Once the family's library is in the cache, every later key takes it: no variant build.
    ensure_built(module.request("sm_90a"))
    n = fake_cc.count("compile")
    third = sorted(table)[2]
    assert wrapper(proj, "situ_and_mul")._entry_for_key("sm_90a", third)[1] == "k3_situ_and_mul_launch"
    assert fake_cc.count("compile") == n


def test_the_variant_library_key_is_the_unit_key_k3gen_list_shows(fake_cc, proj, capfd):
    assert k3gen(proj, "list", "--family", "situ_and_mul") == 0
    rows = [line.split() for line in capfd.readouterr().out.splitlines()[1:-1]]
    req = wrapper(proj, "situ_and_mul").request("sm_90a")
    names = req.variant_names()
    unit_keys = {r[0]: r[-2] for r in rows if r[0].endswith("__sm_90a")}
    for name in names.values():
        (identity,) = [i for i in unit_keys if i.startswith(name)]
        assert req.variant_request(name).content_key().startswith(unit_keys[identity])


def test_compile_from_record_builds_exactly_those_and_serves_them_without_jit(fake_cc, proj, loads, tmp_path, capfd):
    module = wrapper(proj, "route_topk")
    table = module.request("sm_90a").variant_names()
    key, missing_key = sorted(table)[:2]
    record = tmp_path / "warm.jsonl"
    record.write_text(
        json.dumps({"family": "route_topk", "variant": table[key], "arch": "sm_90a", "key": hex(key)}) + "\n" + "\n"
    )
    n = fake_cc.count("compile")
    assert compile_(proj, "--from-record", str(record)) == 0
    assert fake_cc.count("compile") - n == 1 and "1/1 libraries up to date" in capfd.readouterr().out
    entry = proj / "aot" / "route_topk" / "sm_90a" / "variants" / table[key]
    assert json.loads((entry / "k3gen-build.json").read_text())["variant"] == table[key]
    fake_cc.set("K3GEN_AOT_DIR", str(proj / "aot"))
    fake_cc.set("K3GEN_NO_JIT", "1")
    fake_cc.set("K3GEN_RECORD", str(record))
    assert module._entry_for_key("sm_90a", key) == (entry / "lib.so", f"k3_{table[key]}_launch")
    with pytest.raises(K3BuildError) as err:
        module._entry_for_key("sm_90a", missing_key)
    text = str(err.value)
    assert (
        f"route_topk variant {table[missing_key]} (key {missing_key:#x}) for sm_90a has no AOT build and JIT is off"
    ) in text
    assert f"`k3gen compile --from-record {record}`" in text
    assert "`k3gen compile --arch sm_90a --family route_topk`" in text
    assert fake_cc.count("compile") - n == 1  # nothing built under K3GEN_NO_JIT=1


def test_a_bad_record_is_refused_naming_its_line(fake_cc, proj, tmp_path, capfd):
    record = tmp_path / "warm.jsonl"
    record.write_text('{"family": "route_topk", "variant": "route_topk__nope", "arch": "sm_90a"}\n')
    assert compile_(proj, "--from-record", str(record)) == 2
    assert f"{record}:1: route_topk has no variant route_topk__nope" in capfd.readouterr().err
    record.write_text("garbage\n")
    assert compile_(proj, "--from-record", str(record)) == 2
    assert f"{record}:1: not a K3GEN_RECORD line" in capfd.readouterr().err


def test_the_compiler_launcher_prefixes_compiles_and_changes_no_key(fake_cc, proj, tmp_path):
    log = tmp_path / "launcher.log"
    launcher = tmp_path / "launch"
    launcher.write_text(f'#!/bin/sh\necho "$@" >> {log}\nexec "$@"\n')
    launcher.chmod(0o755)
    req = wrapper(proj, "route_topk").request("sm_90a")
    key = req.key()
    fake_cc.set("K3GEN_COMPILER_LAUNCHER", str(launcher))
    assert req.key() == key
    ensure_built(req)
    lines = log.read_text().splitlines()
    assert len(lines) == len(req.sources) and all(line.startswith(str(fake_cc.path)) for line in lines)
    assert compile_(proj, "--family", "route_topk", "--arch", "sm_90a") == 0
    assert len(log.read_text().splitlines()) == 2 * len(req.sources)  # AOT compiles go through it too


def test_jobs_are_bounded_by_memory(monkeypatch, tmp_path):
    monkeypatch.setenv("K3GEN_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("K3GEN_JOBS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    monkeypatch.setattr(jobs, "available_memory", lambda: 3 << 30)
    assert jobs.default_jobs(100, ["sm_90a"])[0] == 3  # 3 GiB / the 1 GiB assumed per unit
    jobs.record_peak("sm_90a", 200 << 20)
    n, why = jobs.default_jobs(100, ["sm_90a"])
    assert n == 15 and "measured" in why  # 3 GiB / 200 MiB
    assert jobs.default_jobs(4, ["sm_90a"])[0] == 4  # never more than the units
    monkeypatch.setenv("K3GEN_JOBS", "7")
    assert jobs.default_jobs(100, ["sm_90a"]) == (7, "K3GEN_JOBS")


CLANG = shutil.which("clang++-19")


@pytest.mark.skipif(not CLANG and not IN_CI, reason="clang++-19 not installed")
def test_hip_without_rocm_device_libs_says_what_is_missing_in_one_line(fake_cc, proj, capfd):
    fake_cc.set("K3GEN_HIPCC", CLANG)
    fake_cc.set("ROCM_PATH", str(proj / "no-rocm"))
    probe = subprocess.run(
        [CLANG, "-x", "hip", "--offload-arch=gfx942", "-c", "/dev/null", "-o", "/dev/null"],
        capture_output=True,
        text=True,
    )
    if probe.returncode == 0:
        pytest.skip("this clang finds ROCm device libraries")
    with pytest.raises(K3ToolchainMissing) as err:
        ensure_built(wrapper(proj, "situ_and_mul").request("gfx942"))
    text = str(err.value)
    assert "\n" not in text and "needs the ROCm device libraries" in text and f"which {CLANG} did not find" in text
    _names_what_works(text, f"{Path(CLANG).name} -x hip --offload-arch=gfx942 --cuda-device-only -nogpulib")
    assert compile_(proj, "--family", "situ_and_mul", "--arch", "gfx942") == 1
    captured = capfd.readouterr()
    assert captured.err.count("cannot find ROCm device library") == 1, captured.err  # once, in our line
    # Said before building: no unit ran, and the line names what was not built.
    assert "k3gen compile: gfx942: nothing built (situ_and_mul): building for gfx942 needs" in captured.err
    assert "[1/" not in captured.out + captured.err


def _names_what_works(line: str, device_only: str) -> None:
    """The ROCm advice: what to install that works, why Debian's package does not, what CI compiles."""
    for words in (
        "install ROCm under /opt/rocm, or set K3GEN_ROCM_PATH",
        "Debian's rocm-device-libs (5.2.3) is not enough",
        "/usr/lib/<multiarch>/amdgcn/bitcode, where clang does not look, and has none for gfx942 or gfx950",
        device_only,
    ):
        assert words in line, words


@pytest.mark.skipif(not CLANG and not IN_CI, reason="clang++-19 not installed")
def test_an_arch_the_hip_compiler_does_not_know_is_one_line_before_any_build(fake_cc, proj, capfd):
    fake_cc.set("K3GEN_HIPCC", CLANG)  # clang 19 predates gfx950
    assert compile_(proj, "--arch", "gfx950") == 1
    captured = capfd.readouterr()
    lines = (captured.out + captured.err).splitlines()
    assert len(lines) == 1, lines  # not one ninja failure per unit
    assert lines[0].startswith(
        f"k3gen compile: gfx950: nothing built (route_topk, situ_and_mul): {CLANG} does not know gfx950 "
        "(clang: \"invalid target ID 'gfx950'\"); a gfx950 library needs a ROCm whose clang knows it"
    ), lines[0]
    _names_what_works(lines[0], "with a clang that knows gfx950 (clang++-NN -x hip --offload-arch=gfx950")
    assert not (proj / "aot").exists()  # not even its folder: nothing ran


def test_explain_failure_leaves_other_errors_alone():
    assert explain_failure("error: expected ';'", "gfx942") is None
    # nvcc's unknown arch is no HIP toolchain problem; clang's for another arch is not this one's
    assert explain_failure("nvcc fatal   : Unsupported gpu architecture 'compute_100a'", "sm_100a") is None
    assert explain_failure("error: invalid target ID 'gfx950'", "gfx942") is None


def test_a_prebuilt_package_serves_any_compiler_and_only_its_archs(fake_cc, proj, loads):
    """k3kernels/prebuilt/ (what a `k3gen package` wheel installs): found by content key even when
    this machine's compiler differs from the one that built it; other archs are not supported."""
    assert compile_(proj, "--family", "situ_and_mul", "--arch", "sm_90a") == 0
    prebuilt = proj / "generated" / "k3kernels" / "prebuilt"
    shutil.copytree(
        proj / "aot" / "situ_and_mul" / "sm_90a",
        prebuilt / "situ_and_mul" / "sm_90a",
        ignore=shutil.ignore_patterns("obj"),
    )
    (prebuilt / "index.json").write_text('{"families": {"situ_and_mul": ["sm_90a"]}}\n')
    fake_cc.set("FAKE_CC_VERSION", "another fake-cc 2.0")
    n = fake_cc.count("compile")
    module = wrapper(proj, "situ_and_mul")
    assert ensure_built(module.request("sm_90a")) == prebuilt / "situ_and_mul" / "sm_90a" / "lib.so"
    assert module.archs() == ["sm_90a"] and module.supported_hardware()
    assert fake_cc.count("compile") == n
    runtime_module.device_arch = lambda device=None: "sm_100a"  # restored by the `loads` fixture
    assert not module.supported_hardware()
    with pytest.raises(K3BuildError, match="this GPU is sm_100a, and this k3kernels package was built for sm_90a"):
        module.build()
