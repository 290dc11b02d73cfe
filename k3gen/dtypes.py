"""The dtypes a spec may name, with their sizes, torch names, ABI codes and C++ spellings.

The one table of the spec's dtype vocabulary: the generator, the load-time checks and the oracles
(k3gen/oracles/vocabulary.py) all read it. Plain dataclasses, so torch-only machines import it too.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Dtype:
    name: str  # spec spelling
    size: int  # bytes per element
    torch: str  # attribute of the torch module
    code: int  # value passed through the C ABI; stable, never reuse
    cuda: str  # C++ element type under nvcc
    hip: str  # C++ element type under hip-clang (see k3_backend.h: bf16/fp8 are k3 types there)
    kind: str = "float"  # "float" or "int": what an oracle can do with it (k3gen/oracle_support.py)

    def cpp(self, backend: str) -> str:
        return getattr(self, backend)


DTYPES: dict[str, Dtype] = {
    d.name: d
    for d in (
        Dtype("bf16", 2, "bfloat16", 1, "__nv_bfloat16", "k3_bf16"),
        Dtype("fp16", 2, "float16", 2, "__half", "__half"),
        Dtype("fp32", 4, "float32", 3, "float", "float"),
        Dtype("fp8", 1, "float8_e4m3fn", 4, "__nv_fp8_e4m3", "k3_fp8"),
        Dtype("i32", 4, "int32", 5, "int32_t", "int32_t", kind="int"),
    )
}
