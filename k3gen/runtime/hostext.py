"""The C++ call path: a library shared by every family that serves cached calls without the interpreter.

Two builds of it, tried in this order (K3GEN_HOST_PATH=stable or =torch picks one; =python neither):

- on torch's stable ABI (csrc/k3stable.cpp, hostabi.py): one library for every torch >= 2.10 and
  CPython >= 3.10, so the one `k3gen package` puts in a wheel serves a newer or older torch too;
- per torch and Python build (csrc/k3host.cpp): torch's C++ API and torch_python, for a torch the
  stable one does not serve (older than 2.10) or refuses (its check at load failed).

Each is host code, compiled by the system C++ compiler into the JIT cache (<cache>/_host/<key>/),
under a lock and published by one atomic rename, its key hashing what changes the binary (the
source, the command line, the compiler's version; for the per-torch one also torch's version and
the Python ABI). When neither can be had (no C++ compiler, K3GEN_NO_JIT=1 and nothing built, a
CPU-only torch for the per-torch one), the wrappers keep the Python fast path
(fastpath.PyFastPath) and one log line says why.

Lookup order of each: a prebuilt library that `k3gen package` put beside this file (prebuilt/, named
by the content key, which holds no compiler, so a serving machine without one can match it), then
the JIT cache, then a build (never under K3GEN_NO_JIT=1).

Like every library k3gen loads, it is vouched for before it is loaded: beside it lies a record
(`<library>.json`: its sha256) written where it was built or packaged, and a library whose bytes do
not hash to its record (replaced, truncated) is never loaded. In the JIT cache it is rebuilt; a
prebuilt one (or any, under K3GEN_NO_JIT=1) is refused with one warning and the next build is tried.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import logging
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
from pathlib import Path

from . import hostabi
from .env import cache_root, jit_disabled, trusted_cache
from .errors import K3BuildError
from .files import Refused, locked, read_bytes, write_if_changed

log = logging.getLogger("k3gen")
SOURCE = Path(__file__).parent / "csrc" / "k3host.cpp"
PREBUILT = Path(__file__).parent / "prebuilt"
_NAME = "_k3host"
_lock = threading.Lock()
_state: dict = {}


def _command(torch, out: Path) -> list[str]:
    lib = Path(torch.__file__).parent / "lib"
    gpu_lib = "torch_hip" if torch.version.hip else "torch_cuda"
    abi = [f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"]
    libs = ["-lc10", "-ltorch_cpu", f"-l{gpu_lib}", "-ltorch_python", f"-Wl,-rpath,{lib}"]
    return hostabi.cxx_command(torch, SOURCE, out, abi, libs)


def content_key(torch) -> str:
    """What the binary is made of, minus the compiler (which a serving machine may lack)."""
    paths = ("-I", "-L", "-Wl,-rpath", "-o", "<out>", str(SOURCE))
    flags = [f for f in _command(torch, Path("<out>"))[1:] if not f.startswith(paths)]
    h = hashlib.sha256()
    for part in (
        SOURCE.read_bytes(),
        hostabi.PLANS.read_bytes(),
        "\0".join(flags).encode(),
        torch.__version__.encode(),
        str(torch.version.cuda or torch.version.hip).encode(),
        sysconfig.get_config_var("SOABI").encode(),
    ):
        h.update(part + b"\0")
    return h.hexdigest()[:32]


def _compiler_version(command: list[str]) -> str:
    try:
        return subprocess.run([command[0], "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def prebuilt_name(torch) -> str:
    return f"{_NAME}.{content_key(torch)}{importlib.machinery.EXTENSION_SUFFIXES[0]}"


MAX_LIB_BYTES = 1 << 30
RECORD_FORMAT = 1


def record_name(lib_name: str) -> str:
    """The record beside a library: `<library name>.json`."""
    return f"{lib_name}.json"


def record_text(lib_name: str, data: bytes, **about) -> str:
    """The record of a library: its name and sha256 (what vouches), and `about` it (information only)."""
    record = {"format": RECORD_FORMAT, "lib": lib_name, "lib_sha256": hashlib.sha256(data).hexdigest(), **about}
    return json.dumps(record, indent=1, sort_keys=True) + "\n"


def vouched(lib: Path) -> str | None:
    """None when `lib` hashes to the record beside it, else why not (no record, another file, other bytes)."""
    try:
        data = read_bytes(lib, lib.parent, MAX_LIB_BYTES)
        record = json.loads(read_bytes(lib.parent / record_name(lib.name), lib.parent, 1 << 16))
    except Refused as exc:
        return str(exc)
    except ValueError:
        return f"{record_name(lib.name)} is not a record"
    if not isinstance(record, dict) or record.get("lib") != lib.name:
        return f"{record_name(lib.name)} is not the record of {lib.name}"
    if record.get("lib_sha256") != hashlib.sha256(data).hexdigest():
        return f"{lib} does not hash to its record (replaced or truncated)"
    return None


def compile_to(torch, lib: Path, command=None) -> Path:
    """Compile the extension (`command(torch, out)`: the per-torch one by default) into `lib` (a
    staging file first, published by one atomic rename)."""
    command = command or _command
    lib.parent.mkdir(parents=True, exist_ok=True)
    with locked(lib.parent / f".{lib.name}.lock"):
        if lib.is_file() and vouched(lib) is None:
            return lib
        stage = Path(tempfile.mkdtemp(prefix=f".{lib.name}.", dir=lib.parent))
        try:
            r = subprocess.run(command(torch, stage / lib.name), capture_output=True, text=True, timeout=300)
            if r.returncode != 0:
                raise OSError(
                    f"{command(torch, lib)[0]} exited {r.returncode}: {(r.stderr or r.stdout).strip()[-400:]}"
                )
            data = (stage / lib.name).read_bytes()
            write_if_changed(lib, data, atomic=True)  # never half a library
            write_if_changed(lib.parent / record_name(lib.name), record_text(lib.name, data), atomic=True)
        finally:
            shutil.rmtree(stage, ignore_errors=True)
    return lib


def _lookup(torch, prebuilt: Path, name: str, command, content: str) -> Path:
    """The vouched library to load: `prebuilt`, else the JIT cache's `name` (rebuilt when its record
    does not vouch for it); OSError naming the file when none may be loaded. Under K3GEN_NO_JIT=1 the
    path returned may not exist (nothing built)."""
    if prebuilt.is_file():
        if (why := vouched(prebuilt)) is None:
            return prebuilt
        log.warning("k3gen: not loading the prebuilt C++ call path: %s", why)
    key = hashlib.sha256(f"{content}\0{_compiler_version(command(torch, Path('<out>')))}".encode()).hexdigest()[:32]
    lib = trusted_cache(cache_root()) / "_host" / key / name
    if lib.is_file() and (why := vouched(lib)) is not None:
        if jit_disabled():
            log.warning("k3gen: not loading the C++ call path: %s (K3GEN_NO_JIT=1: not rebuilt)", why)
            raise OSError(f"{why}; K3GEN_NO_JIT=1")
        log.warning("k3gen: rebuilding the C++ call path: %s", why)
    elif lib.is_file() or jit_disabled():
        return lib
    return compile_to(torch, lib, command)


def _build(torch) -> Path:
    """The per-torch library (csrc/k3host.cpp) to load."""
    name = _NAME + importlib.machinery.EXTENSION_SUFFIXES[0]
    return _lookup(torch, PREBUILT / prebuilt_name(torch), name, _command, content_key(torch))


def _build_stable(torch) -> Path:
    """The stable-ABI library (csrc/k3stable.cpp) to load."""
    name = hostabi.NAME + hostabi.SUFFIX
    return _lookup(torch, PREBUILT / hostabi.prebuilt_name(torch), name, hostabi.command, hostabi.content_key(torch))


def _import(name: str, lib: Path):
    if not lib.is_file():
        raise OSError(f"K3GEN_NO_JIT=1 and {lib} is not built")
    spec = importlib.util.spec_from_file_location(name, lib)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules.setdefault(name, module)
    return module


def _load_stable(torch):
    if why := hostabi.unsupported(torch):
        raise OSError(why)
    module = _import(hostabi.NAME, _build_stable(torch))
    hostabi.bind(module, torch)
    return module


def _load_per_torch(torch):
    if not (torch.version.cuda or torch.version.hip):
        raise OSError("torch has no CUDA or HIP")
    return _import(_NAME, _build(torch))


BUILDS = ("stable", "torch")  # in the order tried


def load():
    """The call path's module (`_k3stable` or `_k3host`), or None (logged once) when this process uses
    the Python fast path. `served()` then says which."""
    with _lock:
        if "module" in _state:
            return _state["module"]
        import torch

        module, path, why = None, "python", []
        mode = os.environ.get("K3GEN_HOST_PATH", "").strip().lower()
        if mode == "python":
            why.append("K3GEN_HOST_PATH=python")
        for name in [] if mode == "python" else [mode] if mode in BUILDS else BUILDS:
            try:
                module, path = (_load_stable if name == "stable" else _load_per_torch)(torch), name
                break
            except (OSError, ImportError, subprocess.SubprocessError, K3BuildError) as exc:
                why.append(f"{name}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
        if module is None:
            log.info("k3gen: the C++ call path is off (%s); wrappers use the Python fast path", "; ".join(why))
        elif why:
            log.info("k3gen: the C++ call path is the %s build (%s)", path, "; ".join(why))
        _state["module"], _state["served"] = module, path
        return module


def served() -> str | None:
    """Which call path load() chose: "stable", "torch" or "python"; None before it ran."""
    return _state.get("served")
