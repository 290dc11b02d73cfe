"""Input checks the generated wrappers call. Each error names the argument and what is allowed."""

from __future__ import annotations

import torch

from .dtypes import DTYPES
from .errors import K3UnsupportedError

# Spec spellings in messages (bf16, not torch.bfloat16), from the one dtype table.
_DTYPE_NAMES = {getattr(torch, d.torch): d.name for d in DTYPES.values()}


def dtype_name(dtype) -> str:
    return _DTYPE_NAMES.get(dtype, str(dtype).replace("torch.", ""))


def check_tensor(fn: str, name: str, t, *, rank: int, device=None) -> None:
    """Type, device and rank; layout, dtype and shape follow once the variant is known."""
    if not isinstance(t, torch.Tensor):
        raise K3UnsupportedError(f"{fn}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.device.type != "cuda":
        raise K3UnsupportedError(f"{fn}: {name} must be on a CUDA device, got {t.device}")
    if device is not None and t.device != device:
        raise K3UnsupportedError(f"{fn}: {name} is on {t.device} but the inputs are on {device}")
    if t.dim() != rank:
        raise K3UnsupportedError(f"{fn}: {name} must have {rank} dimensions, got shape {list(t.shape)}")


def check_tensors(fn: str, declared: tuple, tensors: tuple):
    """check_tensor for each (name, rank, kind) declared and its tensor (kind "input", "optional" or
    "output"; an omitted optional one or output is None); every tensor must be on the first one's
    device, which is returned."""
    device = None
    for (name, rank, kind), t in zip(declared, tensors):
        if t is None and kind != "input":
            continue
        check_tensor(fn, name, t, rank=rank, device=device)
        device = device or t.device
    return device


def check_dtype(fn: str, name: str, t, dtype) -> None:
    if t.dtype != dtype:
        raise K3UnsupportedError(f"{fn}: {name} must be {dtype_name(dtype)}, got {dtype_name(t.dtype)}")


def check_shape(fn: str, name: str, t, shape: tuple, spelled: str) -> None:
    if tuple(t.shape) != tuple(shape):
        raise K3UnsupportedError(f"{fn}: {name} must have shape [{spelled}] = {list(shape)}, got {list(t.shape)}")


def check_choice(fn: str, name: str, value, allowed: list) -> None:
    if value not in allowed:
        raise K3UnsupportedError(f"{fn}: {name}={value!r} is not generated; allowed: {', '.join(map(repr, allowed))}")


def uncovered(fn: str, axes: list[str], dtypes: list, matrix: list[tuple], excluded: dict) -> K3UnsupportedError:
    """The error for a dtype combination outside the generated matrix."""
    cell = tuple(dtype_name(d) if d is not None else "?" for d in dtypes)
    allowed = ", ".join("(" + ", ".join(c) + ")" for c in matrix)
    where = f"({', '.join(axes)}) = ({', '.join(cell)})"
    if cell in excluded:
        why = f"not generated: {excluded[cell]}"
    elif len(axes) == len(cell) and any(c == "?" for c in cell):
        why = "has no default for the missing dtype"
    else:
        why = "is not in the dtype matrix"
    return K3UnsupportedError(f"{fn}: {where} {why}; generated ({', '.join(axes)}): {allowed}")


def gate_failed(fn: str, source: str, reason: str, values: dict) -> K3UnsupportedError:
    shown = ", ".join(f"{k} = {v}" for k, v in values.items())
    return K3UnsupportedError(f"{fn}: gate `{source}` failed ({shown}): {reason}")


def empty(shape: tuple, dtype, device, layout: str):
    """An output tensor of the declared layout."""
    if layout == "col_major":
        return torch.empty(tuple(reversed(shape)), dtype=dtype, device=device).t()
    return torch.empty(shape, dtype=dtype, device=device)


def data_ptr(t) -> int:
    return 0 if t is None else t.data_ptr()


def check_layout(fn: str, name: str, t, layout: str) -> None:
    if layout == "dense" and not t.is_contiguous():
        raise K3UnsupportedError(f"{fn}: {name} must be contiguous, got strides {list(t.stride())}")
    if layout == "rows" and t.size(-1) > 1 and t.stride(-1) != 1:
        raise K3UnsupportedError(
            f"{fn}: {name} must have a contiguous last dim (stride 1), got strides {list(t.stride())}"
        )
    if layout == "col_major" and not t.t().is_contiguous():
        raise K3UnsupportedError(
            f"{fn}: {name} must be column-major (its .t() contiguous), got strides {list(t.stride())}"
        )


def check_input(fn: str, name: str, t, dtype, shape: tuple, layout: str, spelled: str) -> None:
    """Dtype (for fixed-dtype inputs; axis dtypes were matched by the variant lookup), shape, layout."""
    check_dtype(fn, name, t, dtype)
    check_shape(fn, name, t, shape, spelled)
    check_layout(fn, name, t, layout)


def prepare_output(fn: str, name: str, t, dtype, shape: tuple, layout: str, spelled: str, device):
    """Allocate the output, or check the caller's: dtype, shape and layout as the spec declares."""
    if t is None:
        return empty(shape, dtype, device, layout)
    check_input(fn, name, t, dtype, shape, layout, spelled)
    return t
