"""Find the device compiler and ninja, and spell the compile and link commands for one arch."""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

from .archs import ARCHS, backend_of
from .errors import K3ToolchainMissing


@functools.cache
def find_compiler(backend: str) -> str:
    env = "K3GEN_NVCC" if backend == "cuda" else "K3GEN_HIPCC"
    if chosen := os.environ.get(env):
        # An explicit choice is never silently replaced by another compiler found on PATH.
        found = shutil.which(chosen)
        if found is None:
            raise K3ToolchainMissing(
                f"k3gen: {env}={chosen} is not an executable file; point {env} at the "
                "compiler, or unset it to search PATH"
            )
        return found
    if backend == "cuda":
        home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
        candidates = [shutil.which("nvcc"), Path(home) / "bin" / "nvcc"]
        missing = f"k3gen: nvcc (the CUDA toolkit) not found; install it, put it on PATH, or set {env}"
    else:
        if rocm := os.environ.get("K3GEN_ROCM_PATH"):  # a named ROCm install is an explicit choice too
            hipcc = Path(rocm) / "bin" / "hipcc"
            if hipcc.is_file() and os.access(hipcc, os.X_OK):
                return str(hipcc)
            raise K3ToolchainMissing(
                f"k3gen: K3GEN_ROCM_PATH={rocm} holds no bin/hipcc; point it at a ROCm install (the folder "
                "holding bin/hipcc), or unset it to search PATH and /opt/rocm"
            )
        # ROCm's hipcc before a bare clang: only ROCm brings the device libraries a HIP library links,
        # so a Debian clang on PATH must not shadow /opt/rocm.
        rocm_home = Path(os.environ.get("ROCM_PATH", "/opt/rocm"))
        candidates = [
            shutil.which("hipcc"),
            rocm_home / "bin" / "hipcc",
            shutil.which("clang++-19"),
            shutil.which("clang++"),
        ]
        missing = (
            "k3gen: hipcc or clang++ (ROCm) not found; install ROCm under /opt/rocm (or set K3GEN_ROCM_PATH to "
            f"its folder), put hipcc or clang++ on PATH, or set {env}"
        )
    for found in candidates:
        if found is not None and Path(found).is_file():
            return str(found)
    raise K3ToolchainMissing(missing)


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


def device_only_flags(arch: str) -> list[str]:
    """A HIP unit's device code alone, linking no ROCm device library: what CI compiles for HIP (with
    -S), and all that a clang without ROCm can do."""
    offload = ARCHS[arch].offload if arch in ARCHS else arch
    return ["-x", "hip", f"--offload-arch={offload}", "--cuda-device-only", "-nogpulib", "-O3", "-std=c++17"]


# clang's messages when --offload-arch names a processor it does not know, and when it has no ROCm
# device bitcode to link HIP code against (one per unit).
_UNKNOWN_ARCH = "invalid target ID"
_NO_ROCM_DEVICE_LIBS = "cannot find ROCm device library"


def _without_rocm(arch: str, clang: str, which: str = "") -> str:
    """What to install, why Debian's package is not it (rocm-device-libs 5.2.3-2, as its file list
    shows), and what compiles without it (with `clang`, spelled in the command)."""
    return (
        "install ROCm under /opt/rocm, or set K3GEN_ROCM_PATH to a ROCm install (k3gen then builds with its "
        "bin/hipcc); Debian's rocm-device-libs (5.2.3) is not enough: it puts its bitcode under "
        "/usr/lib/<multiarch>/amdgcn/bitcode, where clang does not look, and has none for gfx942 or gfx950; "
        f"without ROCm only device code compiles{which} ({shlex.join([clang, *device_only_flags(arch), '-S'])}), "
        "which is what CI checks for HIP"
    )


def explain_failure(output: str, arch: str, compiler: str | None = None) -> str | None:
    """One line naming what is missing, for a HIP build for `arch` that failed for want of a part of
    the toolchain (`output`: the compiler's), or None for any other failure."""
    cc = compiler or "clang"
    if f"{_UNKNOWN_ARCH} '{arch}'" in output:
        return (
            f"k3gen: {cc} does not know {arch} (clang: \"{_UNKNOWN_ARCH} '{arch}'\"); a {arch} library needs "
            "a ROCm whose clang knows it: " + _without_rocm(arch, "clang++-NN", f", with a clang that knows {arch}")
        )
    if _NO_ROCM_DEVICE_LIBS in output:
        return (
            f'k3gen: building for {arch} needs the ROCm device libraries (clang: "{_NO_ROCM_DEVICE_LIBS}"), '
            f"which {cc} did not find, so no {arch} library links here: "
            + _without_rocm(arch, compiler_name(compiler) if compiler else "clang++")
        )
    return None


def explain_hip_arch(compiler: str, arch: str) -> str | None:
    """Before a HIP build: explain_failure's line when `compiler` cannot build a library for `arch`,
    found by compiling a one-line kernel with the build's own flags (clang's driver says either
    before it compiles anything); None when it can, or fails for another reason, which the build
    itself then shows."""
    with tempfile.TemporaryDirectory(prefix="k3gen-probe-") as tmp:
        src, obj = Path(tmp) / "probe.hip", Path(tmp) / "probe.o"
        src.write_text("__global__ void k3_probe(int* p) { *p = 1; }\n")
        cmd = [compiler, *compile_flags(arch, [], Path(tmp)), "-c", str(src), "-o", str(obj)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired):
            return None
    return None if proc.returncode == 0 else explain_failure(proc.stdout + proc.stderr, arch, compiler)
