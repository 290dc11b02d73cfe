"""`k3gen package --hub DIR`: a Kernel Hub repository that the `kernels` library itself loads.

One small family (situ_and_mul) is prebuilt for sm_90a with the real nvcc. Then, in a process
where the checkout's k3gen cannot be imported (what a Hub user has), the `kernels` library's own
local loader loads the variant, verifies its digest and imports it; the package answers covered()
and refuses a kernel call without a GPU with the one-line reason; the loader's variant resolution
takes the variant for a CUDA 13 torch >= 2.10 machine and rejects it, naming why, on this CPU; a
changed file fails the digest; kernel-abi-check passes on every library (manylinux_2_34 for a build
on this CI's Debian 12; see MANYLINUX). No network.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from k3gen.cli import main

from support import ROOT

# What `k3gen test` selects this module by (k3gen.review.impact): the paths it reads besides k3gen/ and tests/.
READS = ("specs/**", "templates/**", "generated/**", "README.md")
FAMILY_SCOPED = True  # only the touched families' tests run

IN_CI = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")
NVCC = shutil.which("nvcc") or shutil.which("/usr/local/cuda/bin/nvcc")
pytestmark = [
    pytest.mark.skipif(not NVCC and not IN_CI, reason="nvcc not found: the Hub libraries need it"),
    pytest.mark.family("situ_and_mul"),  # the one family it packages
]
try:
    import kernel_abi_check
    import kernels  # noqa: F401
except ImportError:  # CI installs both (pyproject's test extra): a missing one fails there
    if IN_CI:
        raise
    pytest.skip("kernels / kernel-abi-check not installed (pip install -e '.[test]')", allow_module_level=True)

# Runs in a fresh process: no k3gen of the checkout (its editable finder and its path entries go),
# so the package's own runtime in _k3gen/ must serve.
HIDE_CHECKOUT = textwrap.dedent("""
    import sys
    sys.meta_path = [f for f in sys.meta_path if "__editable__" not in getattr(f, "__module__", "")]
    sys.path = [p for p in sys.path if p and not __import__("os").path.isdir(p + "/k3gen")]
""")
LOAD = HIDE_CHECKOUT + textwrap.dedent("""
    import json, logging
    from pathlib import Path
    import torch
    import kernels
    from kernels._internals import digest
    from kernels import Metadata

    variant = Path(sys.argv[1])
    warnings = []
    logging.getLogger("kernels").addHandler(type("H", (logging.Handler,), {"emit": lambda s, r: warnings.append(r)})())
    k3 = kernels.get_local_kernel(variant)  # the loader's own path: metadata, digest, import
    meta = Metadata.read_from_file(variant / "metadata.json")
    assert k3.__name__ == meta.id, (k3.__name__, meta.id)
    assert not [w for w in warnings if w.levelno >= logging.WARNING], [w.getMessage() for w in warnings]
    result = digest.verify_digest(variant, metadata=meta, location=None, cache=False)
    assert isinstance(result, digest.DigestVerificationResult.Success), result

    import k3gen
    assert k3gen.__file__.startswith(str(variant / "_k3gen")), k3gen.__file__
    fam = k3.situ_and_mul
    x = torch.randn(4, 7168)
    assert not fam.supported_hardware() and not fam.covered(x, 4.0)
    try:
        fam.situ_and_mul(x, 4.0)
        raise SystemExit("a kernel call ran on the CPU")
    except k3gen.runtime.K3UnsupportedError as exc:
        print("refusal:", exc)
    from k3gen.integrations import engines
    hook = engines.vllm_routing_function("route_qwen3_moe", kernels=k3)
    print("families:", len(k3.FAMILIES), "hook:", hook.__name__)
""")


@pytest.fixture(scope="module")
def hub(tmp_path_factory) -> tuple[Path, Path]:
    """(the Hub repository, its one variant folder), built once per module."""
    tmp = tmp_path_factory.mktemp("hub")
    args = ["--root", str(ROOT), "package", "--family", "situ_and_mul", "--arch", "sm_90a"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("K3GEN_CACHE_DIR", str(tmp / "cache"))
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            rc = main([*args, "--aot", str(tmp / "aot"), "--hub", str(tmp / "repo")])
        assert rc == 0, printed.getvalue()
    (variant,) = (tmp / "repo" / "build").iterdir()
    return tmp / "repo", variant


def _run(code: str, *args) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "K3GEN_AOT_DIR")}
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True,
                          cwd="/", env=env, timeout=120)  # fmt: skip


def test_the_layout_is_kernel_builder_s(hub):
    repo, variant = hub
    assert variant.name.startswith("torch-stable-abi210-cu") and variant.name.endswith("-x86_64-linux"), variant.name
    meta = json.loads((variant / "metadata.json").read_text())
    assert meta["name"] == "k3kernels" and meta["backend"] == {"type": "cuda", "archs": ["9.0a"]}
    assert (variant / "k3kernels" / "prebuilt" / "situ_and_mul" / "sm_90a" / "lib.so").is_file()
    assert (variant / "_k3gen" / "k3gen" / "integrations" / "transformers.py").is_file()
    assert "get_kernel(" in (repo / "README.md").read_text()


def test_the_kernels_library_loads_it_and_a_kernel_call_is_refused_on_the_cpu(hub):
    _, variant = hub
    out = _run(LOAD, variant)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "refusal: situ_and_mul: x must be on a CUDA device, got cpu" in out.stdout, out.stdout
    assert "hook: k3gen_route_qwen3_moe" in out.stdout


def test_the_loader_picks_the_variant_for_a_cuda_13_torch_and_says_why_not_here(hub):
    repo, variant = hub
    code = HIDE_CHECKOUT + textwrap.dedent("""
        from pathlib import Path
        from packaging.version import Version
        import kernels
        from kernels._internals.backends import CUDA
        from kernels._internals.variants import get_variants_local, _resolve_variant_for_system
        variants = get_variants_local(Path(sys.argv[1]) / "build")
        def pick(cuda, torch):
            ok, trace = _resolve_variant_for_system(variants, CUDA(version=Version(cuda)), "x86_64", "linux",
                                                    Version(torch), True, None, python_version=Version("3.12"))
            return [v.variant_str for v in ok], [getattr(t, "reason", "") for t in trace]
        print("cu13.0 torch2.11", pick("13.0", "2.11"))
        print("cu13.2 torch2.13", pick("13.2", "2.13"))
        print("cu12.8 torch2.11", pick("12.8", "2.11"))
        print("torch2.9", pick("13.0", "2.9"))
        try:
            kernels.get_local_kernel(Path(sys.argv[1]))
        except FileNotFoundError as exc:
            print("here:", str(exc).replace(chr(10), " "))
    """)
    out = _run(code, repo)
    assert out.returncode == 0, out.stderr
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines())
    name = variant.name
    assert lines["cu13.0"].startswith(f"torch2.11 (['{name}']"), out.stdout
    assert lines["cu13.2"].startswith(f"torch2.13 (['{name}']"), out.stdout
    assert "([], " in lines["cu12.8"] and "not compatible with system CUDA version" in lines["cu12.8"], out.stdout
    assert "([], " in lines["torch2.9"] and "too new" in lines["torch2.9"], out.stdout
    assert "does not match selected backend (cpu)" in lines["here:"], out.stdout


def test_a_changed_file_fails_the_digest(hub, tmp_path):
    _, variant = hub
    copy = tmp_path / variant.name
    shutil.copytree(variant, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "k3kernels" / "situ_and_mul.py").write_text("raise SystemExit('tampered')\n")
    out = _run(HIDE_CHECKOUT + "import kernels, pathlib; kernels.get_local_kernel(pathlib.Path(sys.argv[1]))", copy)
    assert out.returncode != 0 and "do not match the digest" in out.stderr, out.stderr


# kernel-builder builds in a manylinux_2_28 image; libraries built on a newer system need what it
# has (here Debian 12, glibc 2.36, g++ 12: the CUDA runtime nvcc links in statically and libstdc++'s
# GLIBCXX_3.4.29 ask for glibc 2.34). `k3gen package --hub` run in a manylinux_2_28 image with nvcc
# gives 2_28 libraries; this pins what any build must meet: manylinux_2_34, CPython's abi3 from 3.10.
MANYLINUX = "manylinux_2_34"


def test_kernel_abi_check_passes_on_every_library(hub):
    _, variant = hub
    libraries = sorted(variant.rglob("*.so"))
    assert len(libraries) == 2, libraries  # situ_and_mul's kernels and the stable-ABI call path
    for lib in libraries:
        obj = kernel_abi_check.ObjectFile(lib)
        assert obj.check_manylinux(MANYLINUX) == [], lib
        assert obj.check_python_abi("3.10") == [], lib
