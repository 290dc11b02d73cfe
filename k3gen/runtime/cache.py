"""Find or build a family's library for one arch: AOT output first, then a JIT cache that cannot lie.

The content key hashes what the generated tree decides: family, arch, sources and headers (path and
bytes), compile and link flags (with the csrc path written as a placeholder, so a relocated tree
keeps its keys). It is the library's identity: `k3gen list` and `k3gen diff` compute it with this
same method over the sources they render in memory (k3gen.render.keys), both build records store it,
and the JIT entry's folder starts with it. The cache key binds it to the compiler's own version text
(artifact.full_key), which only the machine that builds can know.

Lookup order (ensure_built; ensure_any tries a family's library, then one variant's, at each step):
1. AOT: each directory of $K3GEN_AOT_DIR (os.pathsep-separated), or, when that is unset, the
   project's build/aot next to generated/ if it exists, then a package's k3kernels/prebuilt/
   (`k3gen package`); the entry <dir>/<family>/<arch>/ (a variant's: .../variants/<variant>/) is used
   when its record has this family, arch and key and its lib.so still hashes to the record.
   Without a compiler here the key cannot be computed: the content key must match instead (always,
   for a package's prebuilt libraries: they serve whatever compiler the machine has).
2. K3GEN_NO_JIT=1: stop here; a missing AOT artifact is a K3BuildError naming the command to build it.
3. JIT cache: <cache>/<family>/<arch>/<content key[:32]>-<key[:16]>/ (artifact.jit_entry_name),
   built under a file lock in a staging directory
   and made visible by one atomic rename, with the same record; an invalid entry is rebuilt. A
   variant's library is built only when the family's is not already there.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import posixpath
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from . import artifact, ninja
from .archs import UNIT_EXT
from .env import cache_root, jit_disabled, trusted_cache
from .errors import K3BuildError, K3ToolchainMissing
from .files import locked, read_bytes, write_if_changed
from .jobs import default_jobs
from .stage import stage, unstaged
from .toolchain import (
    backend_of,
    compile_flags,
    compiler_name,
    compiler_version,
    explain_failure,
    find_compiler,
    link_flags,
)
from .variants import dispatch_table, entry_symbol, included_headers

log = logging.getLogger("k3gen")
CSRC_PLACEHOLDER = "<csrc>"
LIB, RECORD = artifact.LIB, artifact.RECORD
PREBUILT = "prebuilt"  # k3kernels/prebuilt/<family>/<arch>/: the libraries a `k3gen package` wheel carries
PREBUILT_INDEX = "index.json"  # k3kernels/prebuilt/index.json: {"families": {family: [arch, ...]}}


@dataclass(frozen=True)
class BuildRequest:
    family: str
    arch: str
    csrc: Path  # generated/k3kernels/csrc
    sources: tuple[str, ...]  # relative to csrc/<family>
    headers: tuple[str, ...]
    defines: tuple[str, ...]
    variant: str | None = None  # one variant's library (its unit alone); None: the whole family

    @classmethod
    def of(cls, family: str, arch: str, csrc: Path, sources: dict, headers: dict, defines: dict) -> BuildRequest:
        """A family's library for one arch, from its tables (the generated wrapper's SOURCES, HEADERS
        and ARCH_DEFINES; the generator's plan has the same): the one place a request is made."""
        backend = backend_of(arch)
        return cls(family, arch, csrc, tuple(sources[backend]), tuple(headers[backend]), tuple(defines[arch]))

    @property
    def entry_symbol(self) -> str:
        return entry_symbol(self.family, self.variant)

    @property
    def backend(self) -> str:
        return backend_of(self.arch)

    def files(self) -> list[Path]:
        d = self.csrc / self.family
        return [d / f for f in (*self.sources, *self.headers)]

    def flags(self) -> tuple[list[str], list[str]]:
        return compile_flags(self.arch, list(self.defines), self.csrc), link_flags(self.arch)

    def commands(self) -> tuple[str, list[str], list[str]]:
        return (find_compiler(self.backend), *self.flags())

    def units(self) -> list[tuple[Path, list[str]]]:
        """(source, compile flags) of each unit as it is compiled: its staged copy (k3gen.runtime.stage:
        the unit and the headers it includes, at a path named by their bytes), -I that copy. The same
        command in every checkout and on every machine, and a new one whenever any of those bytes change."""
        out = []
        for unit in self.sources:
            names = [posixpath.normpath(posixpath.join(self.family, rel)) for rel in (unit, *self._included(unit))]
            folder = stage({name: _read(self.csrc / name) for name in names})
            out.append((folder / self.family / unit, compile_flags(self.arch, list(self.defines), folder)))
        return out

    def _included(self, unit: str) -> tuple[str, ...]:
        return included_headers(lambda rel: _text_or_none(self.csrc / rel), self.family, unit)

    def content_key(self, read=None) -> str:
        """Everything but the compiler: computable on a machine that has no compiler.

        read(rel) -> bytes gives a file's bytes by its name relative to csrc/<family>/ (the generator
        passes its rendered files; default: the files on disk).
        """
        cflags, lflags = self.flags()
        here = str(self.csrc)
        normalized = [[f.replace(here, CSRC_PLACEHOLDER) for f in fs] for fs in (cflags, lflags)]
        h = hashlib.sha256()
        for part in ("k3gen-content-1", self.family, self.arch, json.dumps(normalized)):
            h.update(part.encode() + b"\0")
        for rel, f in zip((*self.sources, *self.headers), self.files()):
            h.update(rel.encode() + b"\0" + (read(rel) if read else _read(f)) + b"\0")
        return h.hexdigest()

    def key(self, content_key: str | None = None) -> str:
        """The cache key; pass the content key when it is already known, to hash the sources once."""
        return artifact.full_key(content_key or self.content_key(), compiler_version(find_compiler(self.backend)))

    def compile_command(self) -> str:
        """What builds this artifact ahead of time; errors quote it."""
        if self.variant is None:
            return f"k3gen compile --arch {self.arch} --family {self.family}"
        return f"k3gen compile --from-record {os.environ.get('K3GEN_RECORD') or 'FILE'}"

    def variant_request(self, variant: str) -> BuildRequest:
        """The library of one variant of this family: its unit alone, with the headers it includes, so
        its content key is the unit key of `k3gen list`."""
        unit = f"{variant}.{UNIT_EXT[self.backend]}"
        if unit not in self.sources:
            raise K3BuildError(f"k3gen: {self.family} has no variant {variant} for {self.arch}")
        return replace(self, sources=(unit,), headers=self._included(unit), variant=variant)

    def variant_names(self) -> dict[int, str]:
        """{switch key: variant name}, from the family's dispatch unit."""
        dispatch = next(s for s in self.sources if s.startswith("dispatch."))
        return dispatch_table(_read(self.csrc / self.family / dispatch).decode())


MAX_SOURCE_BYTES = 16 << 20  # one generated source or header, as the runtime hashes it


def _text_or_none(path: Path) -> str | None:
    try:
        return read_bytes(path, _csrc_of(path), MAX_SOURCE_BYTES).decode()
    except (OSError, UnicodeDecodeError):
        return None


def _csrc_of(path: Path) -> Path:
    """The csrc/ folder a generated source lies in: the root its reads stay inside."""
    for parent in path.parents:
        if parent.name == "csrc":
            return parent
    return path.parent


def _read(path: Path) -> bytes:
    try:  # the one reader: a plain file inside csrc/, bounded
        return read_bytes(path, _csrc_of(path), MAX_SOURCE_BYTES)
    except OSError as exc:
        raise K3BuildError(f"k3gen: generated source missing or unreadable: {exc}; run `k3gen build`") from None


def aot_dirs(req: BuildRequest) -> list[Path]:
    """Where AOT builds are looked for, in order."""
    dirs = [Path(d) for d in env.split(os.pathsep) if d] if (env := os.environ.get("K3GEN_AOT_DIR")) else []
    if not dirs:
        parents = req.csrc.resolve().parents  # <project>/generated/k3kernels/csrc -> <project>
        default = parents[2] / "build" / "aot" if len(parents) > 2 else None
        dirs = [default] if default and default.is_dir() else []
    # A prebuilt package (`k3gen package`) carries its libraries beside the sources.
    prebuilt = req.csrc.parent / PREBUILT
    return dirs + [prebuilt] if prebuilt.is_dir() else dirs


def aot_entry(d: Path, req: BuildRequest) -> Path:
    """Where an AOT directory holds req's library: <family>/<arch>/, or .../variants/<variant>/."""
    entry = d / req.family / req.arch
    return entry / "variants" / req.variant if req.variant else entry


def find_aot(req: BuildRequest, key: str | None, content_key: str) -> tuple[Path | None, list[str]]:
    """(library path, []) for the first AOT entry that is this artifact, else (None, why each was not)."""
    why = []
    prebuilt = req.csrc.parent / PREBUILT
    for d in aot_dirs(req):
        entry = aot_entry(d, req)
        # A package's library serves whatever compiler this machine has (or lacks): its content key,
        # and the record's key bound to the compiler that built it, must match.
        record, reason = artifact.check(
            entry, req.family, req.arch, key=None if d == prebuilt else key, content_key=content_key
        )
        if record:
            return entry / LIB, []
        why.append(reason)
    return None, why


def ensure_built(req: BuildRequest, root: Path | None = None) -> Path:
    """The library for req: from an AOT build, else from (or built into) the JIT cache. Raises
    K3BuildError (K3ToolchainMissing when it is the compiler that is missing) on any failure."""
    return ensure_any([req], root)[1]


def ensure_any(
    reqs: list[BuildRequest], root: Path | None = None, what: str | None = None
) -> tuple[BuildRequest, Path]:
    """The first of `reqs` (libraries that would all serve the caller, best first: a family's, then
    one variant's) found built, AOT first, then in the JIT cache; else the last one, built by the JIT.
    Under K3GEN_NO_JIT=1 a miss is a K3BuildError naming `what` (default: the last request's family
    and variant), each library key and the command that builds it."""
    found = []
    for req in reqs:
        content_key = req.content_key()
        try:
            key, missing = req.key(content_key), None
        except K3ToolchainMissing as exc:  # an AOT artifact may still serve: match its content key
            key, missing = None, exc
        lib, rejected = find_aot(req, key, content_key)
        if lib:
            log.debug("k3gen: %s %s from AOT build %s", req.family, req.arch, lib)
            return req, lib
        found.append((req, key, content_key, missing, rejected))
    if jit_disabled():
        raise K3BuildError(_no_jit_message(found, what))
    req, key, content_key, missing, _ = found[-1]
    if missing:
        raise missing
    root = trusted_cache(root or cache_root())
    try:
        for other, okey, ocontent, _, _ in found[:-1]:  # a family library the JIT already has serves too
            entry = root / other.family / other.arch / artifact.jit_entry_name(ocontent, okey)
            if artifact.check(entry, other.family, other.arch, key=okey)[0]:
                return other, entry / LIB
        return req, _ensure_jit(req, key, content_key, root)
    except OSError as exc:  # read-only cache, a file where a folder should be, a full disk
        where = exc.filename or root
        raise K3BuildError(
            f"k3gen: cannot use the JIT cache for {req.family} ({req.arch}) at {where}: "
            f"{exc.strerror or exc}; point K3GEN_CACHE_DIR at a folder you can write "
            f"(now: {root})"
        ) from None


def _no_jit_message(found: list, what: str | None) -> str:
    req = found[-1][0]
    what = what or (f"{req.family} variant {req.variant}" if req.variant else req.family)
    parts = []
    for r, key, content_key, _, rejected in found:
        expected = f"key {key}" if key else f"content key {content_key} (no compiler here for the full key)"
        looked = "; ".join(rejected) or "no AOT directory (set K3GEN_AOT_DIR, or build into <project>/build/aot)"
        name = "" if len(found) == 1 else f"variant {r.variant}: " if r.variant else "family library: "
        parts.append(f"{name}expected {expected}; looked at: {looked}")
    builds = " or ".join(f"`{r.compile_command()}`" for r, *_ in reversed(found))
    return (
        f"k3gen: {what} for {req.arch} has no AOT build and JIT is off (K3GEN_NO_JIT=1); "
        f"{'; '.join(parts)}. Build it: {builds} (with --out DIR, also set K3GEN_AOT_DIR=DIR), "
        "or unset K3GEN_NO_JIT"
    )


def _ensure_jit(req: BuildRequest, key: str, content_key: str, root: Path) -> Path:
    """Build once across threads and processes; never return an entry its record does not vouch for."""
    parent = root / req.family / req.arch
    name = artifact.jit_entry_name(content_key, key)
    final = parent / name
    if artifact.check(final, req.family, req.arch, key=key)[0]:
        return final / LIB
    parent.mkdir(parents=True, exist_ok=True)
    with locked(parent / f"{name}.lock"):
        if artifact.check(final, req.family, req.arch, key=key)[0]:  # another process finished it first
            return final / LIB
        # Holding the lock, anything else for this key is debris of an interrupted build.
        for debris in [final, *parent.glob(f".staging-{key[:12]}-*")]:
            shutil.rmtree(debris, ignore_errors=True)
        staging = Path(tempfile.mkdtemp(prefix=f".staging-{key[:12]}-", dir=parent))
        try:
            _build(req, staging)
            if req.content_key() != content_key:  # a concurrent `k3gen build` rewrote the sources
                raise K3BuildError(
                    f"k3gen: the sources of {req.family} changed while it was being built; "
                    "call again once `k3gen build` has finished"
                )
            compiler = find_compiler(req.backend)
            record = artifact.make_record(
                req.family,
                req.arch,
                content_key,
                compiler_name(compiler),
                compiler_version(compiler),
                staging / LIB,
                "jit",
                variant=req.variant,
            )
            artifact.write_record(staging, record)
            os.rename(staging, final)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return final / LIB


def write_ninja(req: BuildRequest, build_dir: Path) -> Path:
    compiler, _, lflags = req.commands()
    lines, lib = ninja.library_edges(req.units(), compiler, lflags, "", f"{req.family}/{req.arch}")
    path = build_dir / "build.ninja"
    write_if_changed(path, "\n".join([ninja.RULES, *lines, f"default {lib}", ""]))
    return path


def _build(req: BuildRequest, build_dir: Path) -> None:
    write_ninja(req, build_dir)
    proc = ninja.run(build_dir, default_jobs(len(req.sources), req.arch)[0], capture=True)
    if proc.returncode != 0:
        output = unstaged(proc.stdout + proc.stderr, req.csrc)
        if missing := explain_failure(output, req.arch, req.commands()[0]):  # one line, not one per unit
            raise K3ToolchainMissing(missing)
        raise K3BuildError(f"k3gen: building {req.family} for {req.arch} failed:\n{output}")
