"""`k3gen package`: a wheel that serves without a compiler, checked the way a serving machine uses it.

One small family (situ_and_mul) is prebuilt for sm_90a with the real nvcc; the wheel is installed
into a fresh venv (torch from the system site-packages, nothing else) and imported by a process
that has no nvcc on PATH, CUDA_HOME pointing nowhere and K3GEN_NO_JIT=1. Without a GPU it checks
the gates, that the prebuilt library is what the runtime finds (by content key: no compiler to
compute the full key), that a GPU the wheel was not built for is refused naming both archs, that every miss under
K3GEN_NO_JIT=1 names its key and the command that builds it, and that the C++ call path served is
the wheel's stable-ABI library (built here, whatever torch this is: it serves torch >= 2.10).
Then the same wheel is installed beside another torch taken from this machine's disk (in CI, torch
2.14.1 beside the 2.13.0 it was built with; no download) and must serve a cached call through that
stable library without a compiler.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from k3gen.cli import main

from support import ROOT

# What `k3gen test` selects this module by (k3gen.review.impact): the paths it reads besides k3gen/ and tests/.
READS = ("specs/**", "templates/**", "generated/**")
FAMILY_SCOPED = True  # only the touched families' tests run

IN_CI = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")
NVCC = shutil.which("nvcc") or (shutil.which("/usr/local/cuda/bin/nvcc"))

pytestmark = [
    pytest.mark.skipif(not NVCC and not IN_CI, reason="nvcc not found: the wheel's libraries need it"),
    pytest.mark.family("situ_and_mul"),  # the one family it packages
]

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


def _package_args(tmp: Path) -> list[str]:
    out = ["--aot", str(tmp / "aot"), "--out", str(tmp / "dist")]
    return ["--root", str(ROOT), "package", "--family", "situ_and_mul", "--arch", "sm_90a", *out]


@pytest.fixture(scope="module")
def packaged(tmp_path_factory) -> tuple[Path, list[str], str]:
    """(wheel, the `k3gen package` arguments that made it, what it printed): built once per module."""
    tmp = tmp_path_factory.mktemp("package")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("K3GEN_CACHE_DIR", str(tmp / "cache"))
        mp.setenv("SOURCE_DATE_EPOCH", "1700000000")
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            rc = main(_package_args(tmp))
        assert rc == 0, printed.getvalue()
    (wheel,) = (tmp / "dist").glob("k3kernels-*.whl")
    return wheel, _package_args(tmp), printed.getvalue()


def test_wheel_serves_without_a_compiler(packaged, tmp_path: Path, monkeypatch):
    wheel, args, out = packaged
    monkeypatch.setenv("K3GEN_CACHE_DIR", str(wheel.parent.parent / "cache"))
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    assert "  sm_90a " in out and "1 libraries" in out  # the size per arch
    assert "C++ call path: stable ABI, built with torch" in out and "serves torch >= 2.10, CPython >= 3.10" in out
    first = wheel.read_bytes()
    assert main(args) == 0  # nothing to compile: the same bytes again
    assert wheel.read_bytes() == first
    names = zipfile.ZipFile(wheel).namelist()
    assert "k3kernels/prebuilt/situ_and_mul/sm_90a/lib.so" in names and "k3gen/runtime/cache.py" in names
    (host,) = [n for n in names if n.startswith("k3gen/runtime/prebuilt/_k3stable.") and n.endswith(".abi3.so")]
    assert f"{host}.json" in names
    assert not [n for n in names if n.startswith(("k3gen/oracles", "k3gen/model", "specs/"))]

    py = _venv(tmp_path / "venv", wheel)
    run = [str(py), "-c", CHECK, str(tmp_path / "venv")]
    proc = subprocess.run(run, cwd=tmp_path, env=_serving(tmp_path), capture_output=True, text=True)
    assert proc.returncode == 0 and "wheel ok" in proc.stdout, proc.stdout + proc.stderr


def _venv(venv: Path, *wheels: Path) -> Path:
    """A fresh venv over the system site-packages (torch, unless a wheel brings another) with `wheels`
    installed; its python."""
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", "--no-index"]
    subprocess.run([*pip, *map(str, wheels)], check=True)
    return py


def _serving(tmp_path: Path) -> dict[str, str]:
    """A serving machine's environment: no nvcc (PATH without its folder, CUDA_HOME nowhere), no JIT,
    nothing built in its cache, nothing of the checkout on the path."""
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
    return env


# Under another torch: the wheel's stable library (built above with this torch) binds and serves a
# cached call, CPU tensors and a recording entry standing in for the kernel (no GPU here).
OTHER_TORCH_CHECK = textwrap.dedent("""
    import ctypes, sys
    import torch
    from k3gen.runtime import fastpath, hostabi, hostext
    from k3gen.runtime.fastpath import FastPath
    venv, built_with = sys.argv[1], sys.argv[2]
    assert torch.__file__.startswith(venv) and torch.__version__ != built_with, (torch.__file__, torch.__version__)
    ext = hostext.load()
    assert hostext.served() == "stable", hostext.served()
    assert ext.__file__.startswith(venv) and "/k3gen/runtime/prebuilt/_k3stable." in ext.__file__, ext.__file__

    ENTRY = ctypes.CFUNCTYPE(
        ctypes.c_int, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t
    )

    class Args(ctypes.Structure):
        _fields_ = [("x", ctypes.c_void_p), ("M", ctypes.c_int64), ("out", ctypes.c_void_p)]

    launched = []

    def entry(key, args, stream, index, err, err_len):
        a = Args.from_address(args)
        launched.append((key, a.x, a.out, a.M))
        return 0

    class Module:
        args_type, entry = Args, ENTRY(entry)

        def entry_for(self, device, key=None):
            return self.entry, 0

    fastpath._raw_stream = lambda index: 0  # CPU tensors: no stream
    fast = FastPath(Module(), ["x", "out"], (1,), align=16)
    x, out = torch.zeros(4, 8), torch.empty(8, 4).t()  # the checked path made a column-major output
    assert fast.call(x, None, 2.0) is None
    fast.remember(0x12, Args(x=x.data_ptr(), M=4, out=out.data_ptr()), (out,), (x, None, 2.0))
    assert type(fast.impl).__module__ == hostabi.NAME, type(fast.impl)
    x2 = torch.ones(4, 8)
    got = fast.call(x2, None, 2.0)
    assert got.shape == out.shape and got.stride() == out.stride(), (got.shape, got.stride())
    assert launched == [(0x12, x2.data_ptr(), got.data_ptr(), 4)], launched
    assert fast.call(x2, None, 3.0) is None  # another scalar: checked again
    crossing = "interop shims" if hostabi.torch_version(torch) >= hostabi.INTEROP else "_cdata and THPVariable_Wrap"
    print(f"served torch {torch.__version__} through the stable library ({crossing})")
""")


def _local_wheels() -> list[Path]:
    """The wheels pip may install here without a download: those in its find-links folders and in
    its file:// indexes (as `pip config list` names them)."""
    config = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    wheels = []
    for line in config.splitlines():
        key, _, value = line.partition("=")
        for place in value.strip("'\"").split() if key.endswith(("find-links", "index-url")) else []:
            folder = Path(place.removeprefix("file://"))
            if key.endswith("find-links") and folder.is_dir():
                wheels += folder.glob("*.whl")
            elif place.startswith("file://") and folder.is_dir():  # a simple index: <project>/index.html
                for page in folder.glob("*/index.html"):
                    for href in re.findall(r'href="([^"#]+\.whl)', page.read_text(errors="replace")):
                        wheels.append((page.parent / href).resolve())
    return sorted({w for w in wheels if w.is_file()})


def _other_torch(wheels: list[Path]) -> tuple[Path, list[Path]] | None:
    """The newest torch >= 2.10 on local disk for this CPython that is not the torch running here,
    with every NVIDIA library wheel beside it (a PyPI torch loads them at import; resolving them by
    name would need packages that are not on disk, e.g. cuda-bindings and triton, which import torch
    does not)."""
    import torch

    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    this = torch.__version__.split("+")[0]
    found = []
    for w in wheels:
        m = re.fullmatch(rf"torch-(\d+)\.(\d+)\.(\d+)(\+\w+)?-{tag}-{tag}-\w*linux\w*x86_64\.whl", w.name)
        if m and (int(m[1]), int(m[2])) >= (2, 10) and ".".join(m.group(1, 2, 3)) != this:
            found.append(((int(m[1]), int(m[2]), int(m[3])), w))
    if not found:
        return None
    newest = max(found)[1]
    libs = {}
    for w in wheels:
        if w.name.startswith("nvidia_"):
            libs.setdefault(w.name.split("-")[0], w)  # one wheel per library
    return newest, sorted(libs.values())


def test_the_wheel_serves_another_torch_through_its_stable_library(packaged, tmp_path: Path):
    """The real case of one wheel for several torch versions, on the CPU: the wheel built above with
    this torch, installed beside another torch taken from this machine's disk (no download), serves a
    cached call through its stable-ABI library, without a compiler."""
    import torch

    other = _other_torch(_local_wheels())
    if other is None:
        pytest.skip(f"no torch >= 2.10 other than {torch.__version__} among the wheels on this machine's disk")
    torch_wheel, libs = other
    wheel, _, _ = packaged
    try:
        py = _venv(tmp_path / "venv", torch_wheel, *libs, wheel)
        proc = subprocess.run(
            [str(py), "-c", OTHER_TORCH_CHECK, str(tmp_path / "venv"), torch.__version__],
            cwd=tmp_path,
            env=_serving(tmp_path),
            capture_output=True,
            text=True,
        )
    finally:
        shutil.rmtree(tmp_path / "venv", ignore_errors=True)  # about 4 GB with the CUDA libraries
    assert proc.returncode == 0 and "served torch" in proc.stdout, proc.stdout + proc.stderr
    print(proc.stdout.strip())
