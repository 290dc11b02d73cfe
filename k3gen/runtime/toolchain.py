"""Find the device compiler and ninja, and spell the compile and link commands for one arch."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path

from .archs import ARCHS, backend_of
from .errors import K3ToolchainMissing


@functools.cache
def find_compiler(backend: str) -> str:
    if backend == "cuda":
        env, names = "K3GEN_NVCC", ["nvcc"]
        home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
        fallbacks = [Path(home) / "bin" / "nvcc"]
    else:
        env, names = "K3GEN_HIPCC", ["hipcc", "clang++-19", "clang++"]
        fallbacks = [Path(os.environ.get("ROCM_PATH", "/opt/rocm")) / "bin" / "hipcc"]
    if chosen := os.environ.get(env):
        # An explicit choice is never silently replaced by another compiler found on PATH.
        found = shutil.which(chosen)
        if found is None:
            raise K3ToolchainMissing(
                f"k3gen: {env}={chosen} is not an executable file; point {env} at the "
                "compiler, or unset it to search PATH"
            )
        return found
    for name in names:
        if found := shutil.which(name):
            return found
    for path in fallbacks:
        if path.is_file():
            return str(path)
    what = "nvcc (the CUDA toolkit)" if backend == "cuda" else "hipcc or clang++ (ROCm)"
    raise K3ToolchainMissing(f"k3gen: {what} not found; install it, put it on PATH, or set {env}")


@functools.cache
def find_ninja() -> str:
    if found := shutil.which("ninja"):
        return found
    try:
        import ninja  # the PyPI package ships the binary

        return str(Path(ninja.BIN_DIR) / "ninja")
    except ImportError:
        raise K3ToolchainMissing("k3gen: ninja not found; `pip install ninja` or install it on PATH") from None


@functools.cache
def compiler_version(compiler: str) -> str:
    """The compiler's own version text: part of every cache key."""
    try:
        out = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=60)
    except OSError as exc:
        raise K3ToolchainMissing(f"k3gen: cannot run {compiler}: {exc}") from None
    return out.stdout.strip()


def compiler_name(compiler: str) -> str:
    """The compiler's file name (nvcc, clang++-19): shown in records and errors, not hashed."""
    return Path(compiler).name


def compile_flags(arch: str, defines: list[str], include: Path) -> list[str]:
    common = ["-O3", "-std=c++17", *defines, f"-I{include}"]
    target = ARCHS[arch].compile_flags()
    if backend_of(arch) == "cuda":
        return [*common, "-Xcompiler=-fPIC", *target]
    return [*common, *target, "-fPIC"]


def link_flags(arch: str) -> list[str]:
    """-Xlinker=-x drops local symbols from the library: nvcc names each object's STT_FILE symbol
    after its temporary file (tmpxft_<pid>_..., or sccache's x_0...), so without it no two builds of
    the same sources give the same lib.so; with it every build does, plain or through a compile
    cache, in any checkout. The entries the runtime looks up are global symbols, and stay."""
    return ["-shared", "-Xlinker=-x"] if backend_of(arch) == "cuda" else ["-shared", "--hip-link"]


def launcher() -> list[str]:
    """$K3GEN_COMPILER_LAUNCHER (e.g. `sccache`), split like a shell would: it prefixes every compile
    (never a link), in JIT and AOT builds alike. It changes no output, so no key hashes it.

    Checked before any unit builds: a value that does not split, or whose program is not an
    executable, is one K3ToolchainMissing line instead of one shell error per unit."""
    import shlex

    value = os.environ.get("K3GEN_COMPILER_LAUNCHER", "")
    shown = ascii(value)[1:-1][:200]
    try:
        argv = shlex.split(value)
    except ValueError as exc:
        raise K3ToolchainMissing(
            f"k3gen: K3GEN_COMPILER_LAUNCHER='{shown}' does not split into words ({exc}); fix its quoting, "
            "e.g. K3GEN_COMPILER_LAUNCHER=sccache"
        ) from None
    if argv and shutil.which(argv[0]) is None:
        raise K3ToolchainMissing(
            f"k3gen: K3GEN_COMPILER_LAUNCHER='{shown}': {ascii(argv[0])[1:-1][:120]} is not an executable "
            "(not found on PATH, or not executable); install it, or unset K3GEN_COMPILER_LAUNCHER"
        )
    return argv


# clang's message when it has no ROCm device bitcode to link HIP code against (one per unit).
_NO_ROCM_DEVICE_LIBS = "cannot find ROCm device library"


def explain_failure(output: str, arch: str) -> str | None:
    """One line naming what is missing, for a build that failed for want of a part of the toolchain."""
    if _NO_ROCM_DEVICE_LIBS in output:
        return (
            f'k3gen: building for {arch} needs the ROCm device libraries (clang: "{_NO_ROCM_DEVICE_LIBS}"), '
            "which are not installed: install them (apt-get install rocm-device-libs, or a ROCm install) and "
            "set ROCM_PATH (or K3GEN_HIPCC=$ROCM_PATH/bin/hipcc) if they are not under /opt/rocm; without "
            "them only device code compiles (clang --cuda-device-only -nogpulib), which is what CI checks "
            "for HIP"
        )
    return None
