"""What has been verified for each arch a spec declares: the facts behind the support matrix.

The generated docs (generated/docs/) and the README's support matrix both state these; change them
here, with the CI or GPU run that proves the new fact, and `k3gen build` updates the docs.
"""

from __future__ import annotations

# HIP archs that CI compiles (clang-19, --cuda-device-only); clang-19 does not know gfx950.
# CUDA needs no list: CI compiles every declared CUDA arch with nvcc 13.0.
HIP_COMPILED_IN_CI = ("gfx942",)
# Why a declared HIP arch outside that list is not compiled, in the docs' words.
HIP_NOT_COMPILED_WHY = "CI's clang-19 does not know it"
# Archs where the generated tests ran on a GPU, and which GPU (bench/results/gpu_tests.log).
RUN_ON_GPU = {"sm_90a": "NVIDIA H200"}

COMPILED, RUN, DECLARED = "compiled in CI", "run on a GPU", "declared only"


def arch_state(backend: str, arch: str) -> str:
    """The strongest verification of a declared arch: run on a GPU > compiled in CI > declared only."""
    if arch in RUN_ON_GPU:
        return RUN
    if backend == "cuda" or arch in HIP_COMPILED_IN_CI:
        return COMPILED
    return DECLARED
