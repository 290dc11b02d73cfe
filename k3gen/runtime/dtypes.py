"""The one dtype table: spec names, sizes, torch names, ABI codes and C++ element types.

It lives in the runtime so the generated wrappers, the input checks and the oracles read the same
table the generator does; plain dataclasses, so importing it needs neither torch nor pydantic
(`torch_dtype` imports torch when called). The generator imports it as k3gen.runtime.dtypes.
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
    kind: str = "float"  # "float" or "int": what an oracle can do with it (k3gen/spec/meaning/oracle_support.py)

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


def torch_dtype(name: str):
    """The torch dtype of a spec dtype name (bf16 -> torch.bfloat16)."""
    import torch

    return getattr(torch, DTYPES[name].torch)


def torch_dtypes(*names: str) -> dict:
    """{spec name: torch dtype} for the names given (all when none are)."""
    return {n: torch_dtype(n) for n in (names or DTYPES)}
