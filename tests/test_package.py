"""`k3gen package`: a wheel that serves without a compiler, checked the way a serving machine uses it.

One small family (situ_and_mul) is prebuilt for sm_90a with the real nvcc; the wheel is installed
into a fresh venv (torch from the system site-packages, nothing else) and imported by a process
that has no nvcc on PATH, CUDA_HOME pointing nowhere and K3GEN_NO_JIT=1. Without a GPU it checks
the gates, that the prebuilt library is what the runtime finds (by content key: no compiler to
compute the full key), that a GPU the wheel was not built for is refused naming both archs, that every miss under
K3GEN_NO_JIT=1 names its key and the command that builds it, and that the C++ call path served is
the wheel's stable-ABI library (built here, whatever torch this is: it serves torch >= 2.10).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from k3gen.cli import main

from support import ROOT

IN_CI = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")
NVCC = shutil.which("nvcc") or (shutil.which("/usr/local/cuda/bin/nvcc"))

pytestmark = pytest.mark.skipif(not NVCC and not IN_CI, reason="nvcc not found: the wheel's libraries need it")

CHECK = textwrap.dedent("""
    import os, sys
    import k3kernels
    from k3kernels import situ_and_mul as fam, route_topk as other
    from k3gen import runtime as rt
    from k3gen.runtime import cache, module, toolchain
    venv = sys.argv[1]
    for m in (k3kernels, rt, fam):
        assert m.__file__.startswith(venv), (m.__name__, m.__file__)  # the wheel's, not the checkout's
    try:
        toolchain.find_compiler("cuda")
        raise SystemExit("nvcc is visible")
    except rt.K3ToolchainMissing:
        pass

    # No GPU here: the gates say so, and build() names why.
    assert not fam.supported_hardware() and not fam.available()
    try:
        fam.build()
        raise SystemExit("build() without a GPU")
    except rt.K3BuildError as exc:
        assert "(no GPU)" in str(exc), exc

    # The prebuilt library serves sm_90a without a compiler: family and per-variant lookups find it.
    lib = cache.ensure_built(fam.MODULE.request("sm_90a"))
    assert "/k3kernels/prebuilt/situ_and_mul/sm_90a/" in str(lib), lib
    req = fam.MODULE.request("sm_90a")
    key = min(req.variant_names())
    found, path = cache.ensure_any([req, req.variant_request(req.variant_names()[key])])
    assert found.variant is None and path == lib

    # A GPU the wheel was not built for: not supported, and build() names both archs.
    module.device_arch = lambda device=None: "sm_100a"
    assert not fam.supported_hardware() and not fam.available()
    try:
        fam.build()
        raise SystemExit("build() on sm_100a")
    except rt.K3BuildError as exc:
        assert "this GPU is sm_100a" in str(exc) and "built for sm_90a" in str(exc), exc

    # The GPU it was built for: supported, and the library loads (no launch without a GPU).
    module.device_arch = lambda device=None: "sm_90a"
    assert fam.supported_hardware()
    assert fam.build() is not None
    assert not other.supported_hardware()  # a family the wheel did not prebuild

    # K3GEN_NO_JIT=1: a miss is an error naming the key and the command, never a build.
    try:
        cache.ensure_built(fam.MODULE.request("sm_100a"))
        raise SystemExit("no error")
    except rt.K3BuildError as exc:
        text = str(exc)
        assert "JIT is off (K3GEN_NO_JIT=1)" in text and "content key" in text, text
        assert "`k3gen compile --arch sm_100a --family situ_and_mul`" in text, text
    treq = other.MODULE.request("sm_90a")
    tkey = min(treq.variant_names())
    try:
        cache.ensure_any([treq, treq.variant_request(treq.variant_names()[tkey])])
        raise SystemExit("no error")
    except rt.K3BuildError as exc:
        text = str(exc)
        assert f"route_topk variant {treq.variant_names()[tkey]} for sm_90a" in text, text
        assert "`k3gen compile --from-record FILE`" in text, text

    # The C++ call path: the wheel's stable-ABI library, loaded without a compiler and bound to this torch.
    from k3gen.runtime import hostext
    ext = hostext.load()
    assert hostext.served() == "stable", hostext.served()
    assert ext.__file__.startswith(venv) and "/k3gen/runtime/prebuilt/_k3stable." in ext.__file__, ext.__file__
    print("wheel ok")
""")


def test_wheel_serves_without_a_compiler(tmp_path: Path, monkeypatch, capfd):
    monkeypatch.setenv("K3GEN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    args = [
        "--root",
        str(ROOT),
        "package",
        "--family",
        "situ_and_mul",
        "--arch",
        "sm_90a",
        "--aot",
        str(tmp_path / "aot"),
        "--out",
        str(tmp_path / "dist"),
    ]
    assert main(args) == 0, capfd.readouterr()
    out = capfd.readouterr().out
    assert "  sm_90a " in out and "1 libraries" in out  # the size per arch
    assert "C++ call path: stable ABI, built with torch" in out and "serves torch >= 2.10, CPython >= 3.10" in out
    (wheel,) = (tmp_path / "dist").glob("k3kernels-*.whl")
    first = wheel.read_bytes()
    assert main(args) == 0  # nothing to compile: the same bytes again
    assert wheel.read_bytes() == first
    names = zipfile.ZipFile(wheel).namelist()
    assert "k3kernels/prebuilt/situ_and_mul/sm_90a/lib.so" in names and "k3gen/runtime/cache.py" in names
    (host,) = [n for n in names if n.startswith("k3gen/runtime/prebuilt/_k3stable.") and n.endswith(".abi3.so")]
    assert f"{host}.json" in names
    assert not [n for n in names if n.startswith(("k3gen/oracles", "k3gen/model", "specs/"))]

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", "--no-index", str(wheel)],
        check=True,
    )
    # No nvcc: PATH without the folder that holds it, and CUDA_HOME (the runtime's fallback) nowhere.
    nvcc_dirs = {str(Path(p).parent) for p in (NVCC, "/usr/local/cuda/bin/nvcc") if p}
    path = os.pathsep.join(d for d in os.environ["PATH"].split(os.pathsep) if d not in nvcc_dirs)
    env = {
        **os.environ,
        "PATH": path,
        "CUDA_HOME": str(tmp_path / "no-cuda"),
        "K3GEN_NO_JIT": "1",
        "K3GEN_AOT_DIR": "",
        "PYTHONPATH": "",
        "K3GEN_CACHE_DIR": str(tmp_path / "serving-cache"),  # nothing built here: the wheel's libraries serve
        "K3GEN_HOST_PATH": "",
    }
    for var in ("K3GEN_NVCC", "CUDA_PATH", "K3GEN_RECORD"):
        env.pop(var, None)
    proc = subprocess.run([str(py), "-c", CHECK, str(venv)], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert proc.returncode == 0 and "wheel ok" in proc.stdout, proc.stdout + proc.stderr
