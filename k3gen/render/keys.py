"""The keys of what is compiled, computed from the rendered sources: one identity everywhere.

What the runtime builds, caches and loads is a family's library for one arch. Its key is the
runtime's own `BuildRequest.content_key()` (k3gen.runtime.cache), which hashes the family, the arch,
the compile and link flags and the bytes of every source and header; `k3gen compile` writes it into
each AOT record and the JIT cache names its folders by it. Here the same request is made for every
family × arch of the plans and hashed over the files rendered in memory, so the `library key` that
`k3gen list` and `k3gen diff` show is, byte for byte, the key the runtime computes from generated/.

A specialization's key is the same function over a library of its one translation unit and the
headers that unit includes (#include "..." followed through the rendered files): it changes exactly
when that unit's object must be recompiled, which is what `k3gen diff` prices.

Both follow from what is compiled and nothing else. The spec's text is not hashed, so a comment,
whitespace, key order or YAML style edit, and a reason or summary that only messages and docs show,
change no key; a template edit changes the keys of the units whose bytes it changes. The compiler's
version is bound in by the runtime (artifact.full_key) on the machine that builds.

A tuning table's claims are checked here too: each variant's pick stands only while the table's
identity of it is the one its rendered code has now (k3gen.plan.tuning: else it is untuned).
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from dataclasses import dataclass, replace
from pathlib import Path

from k3gen.plan.family import KERNEL_HEADER, TU_EXT, FamilyPlan
from k3gen.plan.tuning import FORMAT
from k3gen.render.code_only import code_only
from k3gen.runtime.cache import CSRC_PLACEHOLDER, BuildRequest
from k3gen.runtime.variants import included_headers
from k3gen.spec.errors import SpecError, SpecErrors

CSRC = "k3kernels/csrc"  # under generated/
BACKEND_HEADER = f"{CSRC}/k3_backend.h"
# HIP's headers under every supported clang (included first by each family's ABI header): part of
# every library's key like the backend header, and of no CUDA tuning table's identity (nvcc reads
# none of it).
HIP_COMPAT_HEADER = f"{CSRC}/k3_hip_compat.h"
SHARED_HEADERS = (BACKEND_HEADER, HIP_COMPAT_HEADER)  # rendered once, included by every family


@dataclass(frozen=True)
class Unit:
    """One translation unit compiled for one arch: a specialization's, or the family's dispatch."""

    file: str  # relative to csrc/<family>/, e.g. situ_and_mul__in_bf16__out_bf16__has_linear_beta_off.cu
    identity: str  # the specialization's identity; <family>__dispatch__<arch> for the dispatch unit
    key: str


@dataclass(frozen=True)
class Library:
    """One family's library for one arch: what the runtime loads and `k3gen compile` builds."""

    family: str
    arch: str
    backend: str
    key: str  # BuildRequest.content_key(): the runtime's key, stored in every build record
    units: tuple[Unit, ...]


def request_for(p: FamilyPlan, arch: str, csrc: Path) -> BuildRequest:
    """The request the generated wrapper's FamilyModule.request(arch) makes: the same constructor over
    the same tables (SOURCES, HEADERS and ARCH_DEFINES in the wrapper are these plan fields)."""
    return BuildRequest.of(p.name, arch, csrc, p.sources, p.headers, p.defines)


def libraries(plans: list[FamilyPlan], files: dict[str, str]) -> list[Library]:
    """Every family × declared arch, keyed from `files` (rendered: {path under generated/: text})."""
    out = []
    for p in plans:
        read = _reader(files, p.name)
        for backend in p.backends:
            for arch in p.archs(backend):
                req = request_for(p, arch, Path(CSRC_PLACEHOLDER))
                ids = {
                    f"{sp.variant.name}.{TU_EXT[backend]}": sp.identity for sp in p.specializations if sp.arch == arch
                }
                alone = {
                    src: replace(req, sources=(src,), headers=_included(files, p.name, src)) for src in req.sources
                }
                units = tuple(
                    Unit(src, ids.get(src, f"{p.name}__dispatch__{arch}"), alone[src].content_key(read))
                    for src in req.sources
                )
                out.append(Library(p.name, arch, backend, req.content_key(read), units))
    return out


def unit_keys(libs: list[Library]) -> dict[str, str]:
    """{specialization identity: its key}, dispatch units left out."""
    return {u.identity: u.key for lib in libs for u in lib.units if not u.identity.endswith(f"__dispatch__{lib.arch}")}


def check_unique(plans: list[FamilyPlan], libs: list[Library]) -> None:
    """Two specializations never share a binary, two libraries never share a key: SpecErrors naming
    the spec of the second, else nothing."""
    by_name = {p.name: p for p in plans}
    seen: dict[str, str] = {}
    errors = []
    for lib in libs:
        for what, key in [
            (f"library {lib.family} for {lib.arch}", lib.key),
            *((f"specialization {u.identity}", u.key) for u in lib.units),
        ]:
            if key in seen:
                errors.append(
                    by_name[lib.family].error(
                        ("kernel",), f"{what} has the key of {seen[key]}; two variants must never share a binary"
                    )
                )
            seen.setdefault(key, what)
    if errors:
        raise SpecErrors(errors)


def keyed(plans: list[FamilyPlan], files: dict[str, str]) -> list[Library]:
    """libraries(), checked unique."""
    libs = libraries(plans, files)
    check_unique(plans, libs)
    return libs


def _reader(files: dict[str, str], family: str):
    def read(rel: str) -> bytes:
        return files[posixpath.normpath(f"{CSRC}/{family}/{rel}")].encode()

    return read


def _included(files: dict[str, str], family: str, unit: str) -> tuple[str, ...]:
    """The generated headers a unit includes, transitively, relative to csrc/<family>/, sorted: the
    runtime's own walk (k3gen.runtime.variants), so a variant library's key is its unit key."""
    return included_headers(lambda rel: files.get(posixpath.normpath(f"{CSRC}/{rel}")), family, unit)


# ---------------------------------------------------------------------- a tuning table's claims


def identities(p: FamilyPlan, kernel_header: str, backend_header: str) -> dict[str, str]:
    """What a table measures, per variant: the family's kernel code (rendered, before any picks; its
    comments and static_asserts left out, as they compile to nothing), its knobs, configs, buckets and
    shape, and the variant's parameters."""
    t = p.tuning
    meaning = {"family": p.name, "knobs": t.knobs, "configs": t.configs, "buckets": t.buckets, "shape": t.shape}
    h = hashlib.sha256(json.dumps(meaning, sort_keys=True).encode())
    for text in (kernel_header, backend_header):
        h.update(b"\0" + code_only(text).encode())
    out = {}
    for v in p.variants:
        hv = h.copy()
        hv.update(b"\0" + json.dumps({"variant": v.name, **v.as_dict()}, sort_keys=True).encode())
        out[v.name] = hv.hexdigest()
    return out


def settled_tuning(p: FamilyPlan, kernel_header: str, backend_header: str):
    """The family's tuning with each pick checked against the code rendered now, or None."""
    if p.tuning is None:
        return None
    return p.tuning.settled([v.name for v in p.variants], identities(p, kernel_header, backend_header))


def settled_from(p: FamilyPlan, files: dict[str, str]):
    """settled_tuning over a whole rendered tree (`files`: {path under generated/: text})."""
    kernel = files.get(f"{CSRC}/{p.name}/{KERNEL_HEADER.format(name=p.name)}")
    if p.tuning is None or kernel is None:
        return p.tuning
    return settled_tuning(p, kernel, files[BACKEND_HEADER])


def untuned_notes(plans: list[FamilyPlan], files: dict[str, str]) -> list[SpecError]:
    """One located line per family without a table, and per table, whose variants run the default config
    for want of a current pick."""
    notes = []
    for p in plans:
        t = settled_from(p, files)
        if t is not None:
            line = p.located.line_of(("tuning",)) if p.located is not None else 1
            notes += t.untuned_notes(p.name, p.file, line, len(p.variants))
    return notes


def tuner_data(p: FamilyPlan, current: dict[str, str], oracle_spec: dict) -> dict:
    """What the GPU half (k3gen.tune.run) needs, from generated/ alone (no spec loader there)."""
    t = p.tuning
    return {
        "format": FORMAT,
        "family": p.name,
        "spec": p.file,
        "knobs": t.knobs,
        "configs": t.configs,
        "buckets": t.buckets,
        "shape": t.shape,
        "oracle": p.spec.oracle,
        "oracle_spec": oracle_spec,
        "routing": {r.backend: r.test_data for r in p.routing} if p.routing else {},
        "cases": list(p.spec.tests.cases),
        "variants": [{"name": v.name, "variant": v.as_dict(), "identity": current[v.name]} for v in p.variants],
    }
