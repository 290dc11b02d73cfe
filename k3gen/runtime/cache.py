"""Build a family's module for one arch into a cache directory that cannot lie.

The key hashes everything that changes the binary: sources and headers (bytes), compiler and its
version, flags and arch. A build happens under a file lock in a staging directory and becomes
visible by one atomic rename; a finished entry records its library's sha256, so a truncated or
corrupted artifact is detected at load and rebuilt.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .errors import K3BuildError
from .toolchain import compile_flags, compiler_version, find_compiler, find_ninja, link_flags, backend_of

LIB = "lib.so"
RECORD = "k3gen-build.json"


def cache_root() -> Path:
    if d := os.environ.get("K3GEN_CACHE_DIR"):
        return Path(d)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "k3gen"


@dataclass(frozen=True)
class BuildRequest:
    family: str
    arch: str
    csrc: Path  # generated/k3kernels/csrc
    sources: tuple[str, ...]  # relative to csrc/<family>
    headers: tuple[str, ...]
    defines: tuple[str, ...]

    @property
    def backend(self) -> str:
        return backend_of(self.arch)

    def files(self) -> list[Path]:
        d = self.csrc / self.family
        return [d / f for f in (*self.sources, *self.headers)]

    def commands(self) -> tuple[str, list[str], list[str]]:
        compiler = find_compiler(self.backend)
        return compiler, compile_flags(self.arch, list(self.defines), self.csrc), link_flags(self.arch)

    def key(self) -> str:
        compiler, cflags, lflags = self.commands()
        h = hashlib.sha256()
        for part in (self.family, self.arch, compiler, compiler_version(compiler), json.dumps([cflags, lflags])):
            h.update(part.encode() + b"\0")
        for f in self.files():
            h.update(f.name.encode() + b"\0" + _read(f) + b"\0")
        return h.hexdigest()


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise K3BuildError(f"k3gen: generated source missing: {path} ({exc}); run `k3gen build`") from None


def ensure_built(req: BuildRequest, root: Path | None = None) -> Path:
    """Return the path of the built library, building it once across threads and processes."""
    key = req.key()
    parent = (root or cache_root()) / req.family / req.arch
    final = parent / key[:32]
    if _valid(final, req.arch):
        return final / LIB
    parent.mkdir(parents=True, exist_ok=True)
    with _locked(parent / f"{key[:32]}.lock"):
        if _valid(final, req.arch):  # another process finished it while we waited
            return final / LIB
        if final.exists():
            shutil.rmtree(final)  # interrupted or corrupted: rebuild from scratch
        staging = Path(tempfile.mkdtemp(prefix=f".staging-{key[:12]}-", dir=parent))
        try:
            _build(req, staging)
            lib_sha = hashlib.sha256((staging / LIB).read_bytes()).hexdigest()
            record = {"family": req.family, "arch": req.arch, "key": key, "lib_sha256": lib_sha}
            (staging / RECORD).write_text(json.dumps(record, indent=1, sort_keys=True))
            os.rename(staging, final)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return final / LIB


def _valid(entry: Path, arch: str) -> bool:
    try:
        record = json.loads((entry / RECORD).read_text())
        lib = (entry / LIB).read_bytes()
    except (OSError, ValueError):
        return False
    return record.get("arch") == arch and record.get("lib_sha256") == hashlib.sha256(lib).hexdigest()


@contextlib.contextmanager
def _locked(path: Path):
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def write_ninja(req: BuildRequest, build_dir: Path) -> Path:
    compiler, cflags, lflags = req.commands()
    lines = ["ninja_required_version = 1.3", f"cxx = {compiler}", f"cflags = {' '.join(cflags)}",
             f"ldflags = {' '.join(lflags)}", "",
             "rule compile", "  command = $cxx $cflags -c $in -o $out", "  description = compile $in", "",
             "rule link", "  command = $cxx $ldflags $in -o $out", "  description = link $out", ""]
    objs = []
    for src in req.sources:
        obj = f"obj/{Path(src).stem}.o"
        objs.append(obj)
        lines.append(f"build {obj}: compile {req.csrc / req.family / src}")
    lines += [f"build {LIB}: link {' '.join(objs)}", f"default {LIB}", ""]
    path = build_dir / "build.ninja"
    path.write_text("\n".join(lines))
    return path


def _build(req: BuildRequest, build_dir: Path) -> None:
    write_ninja(req, build_dir)
    jobs = os.environ.get("K3GEN_JOBS") or str(os.cpu_count() or 1)
    proc = subprocess.run([find_ninja(), "-C", str(build_dir), "-j", jobs], capture_output=True, text=True)
    if proc.returncode != 0:
        raise K3BuildError(f"k3gen: building {req.family} for {req.arch} failed:\n{proc.stdout}{proc.stderr}")
