"""What has been verified for each arch a spec declares: the facts behind the support matrix.

The generated docs (generated/docs/) and the README's support matrix both state these; change them
here, with the CI or GPU run that proves the new fact, and `k3gen build` updates the docs.
"""

from __future__ import annotations

# HIP archs that CI compiles, and with which Debian clang (tests/test_compile.py: the first of its
# HIP_CLANGS that knows the arch; under CI it fails where this says otherwise). Device code only
# (k3gen.runtime.toolchain.device_only_flags): CI has no ROCm device libraries, so no HIP library is
# linked. CUDA needs no list: CI compiles every declared CUDA arch with nvcc 13.0.
HIP_COMPILED_IN_CI = {"gfx942": "clang++-19", "gfx950": "clang++-22"}
# Why a declared HIP arch outside that list is not compiled, in the docs' words.
HIP_NOT_COMPILED_WHY = "no clang of CI's knows it"
# Archs where every generated test ran on a GPU, and which GPUs (bench/results/<device>/gpu_tests*.log).
RUN_ON_GPU = {"sm_90a": "NVIDIA H100, NVIDIA H200"}

COMPILED, RUN, DECLARED = "compiled in CI", "run on a GPU", "declared only"


def arch_state(backend: str, arch: str) -> str:
    """The strongest verification of a declared arch: run on a GPU > compiled in CI > declared only."""
    if arch in RUN_ON_GPU:
        return RUN
    if backend == "cuda" or arch in HIP_COMPILED_IN_CI:
        return COMPILED
    return DECLARED
