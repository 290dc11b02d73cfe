"""The archs k3gen knows: one row each, with what the generator, the templates' limits and the
runtime need to know of it. A spec may target any arch here; supporting a new one is one row (and,
where a template cannot serve it, a `needs:` in that template's limits.yaml saying why).

Standard library only: the runtime reads it to spell compile flags and to name the device's arch.
"""

from __future__ import annotations

from dataclasses import dataclass

# What a template's limits may require of an arch (templates/<t>/limits.yaml `archs: {needs: [...]}`,
# and a per-arch flag's `needs:`), in the words its error prints.
FEATURES = {
    "fp8": "fp8 e4m3 conversion instructions (sm_89 or newer; CDNA3 and newer)",
    "pdl": "programmatic dependent launch (sm_90 or newer)",
}


@dataclass(frozen=True)
class Arch:
    name: str  # as specs and `k3gen compile --arch` spell it
    backend: str  # cuda or hip
    warp: int  # lanes of a warp (CUDA) or wavefront (HIP); k3_backend.h reads the compiler's own macro
    features: frozenset[str]  # keys of FEATURES the arch has
    offload: str  # what the compiler calls it: nvcc -gencode=..., clang --offload-arch=...
    capability: tuple[int, int] | None = None  # the compute capability a CUDA device reports

    def compile_flags(self) -> list[str]:
        if self.backend == "cuda":
            return [f"-gencode={self.offload}"]
        return ["-x", "hip", f"--offload-arch={self.offload}"]


def _cuda(name: str, cc: tuple[int, int], *features: str) -> Arch:
    # Arch-specific targets (the "a" suffix: wgmma, setmaxnreg, tcgen05) run on that exact chip only.
    compute = name.replace("sm_", "compute_")
    return Arch(name, "cuda", 32, frozenset(features), f"arch={compute},code={name}", cc)


ARCHS: dict[str, Arch] = {
    a.name: a
    for a in (
        _cuda("sm_80", (8, 0)),
        _cuda("sm_89", (8, 9), "fp8"),
        _cuda("sm_90a", (9, 0), "fp8", "pdl"),
        _cuda("sm_100a", (10, 0), "fp8", "pdl"),
        _cuda("sm_120a", (12, 0), "fp8", "pdl"),
        Arch("gfx942", "hip", 64, frozenset({"fp8"}), "gfx942"),
        Arch("gfx950", "hip", 64, frozenset({"fp8"}), "gfx950"),
    )
}
BACKENDS = ("cuda", "hip")
UNIT_EXT = {"cuda": "cu", "hip": "hip"}  # a translation unit's file extension per backend


def known(backend: str | None = None) -> list[str]:
    """The arch names of one backend (or all), in table order."""
    return [a.name for a in ARCHS.values() if backend is None or a.backend == backend]


def backend_of(arch: str) -> str:
    """cuda or hip; an arch outside the table by its spelling (gfx...: HIP), so that a record or a
    flag from a newer k3gen still names its backend."""
    found = ARCHS.get(arch)
    if found is not None:
        return found.backend
    return "hip" if arch.startswith("gfx") else "cuda"


def of_capability(major: int, minor: int) -> str:
    """The spec spelling of a CUDA device of this compute capability (sm_90a for 9.0, sm_86 for 8.6)."""
    for a in ARCHS.values():
        if a.capability == (major, minor):
            return a.name
    return f"sm_{major}{minor}"
