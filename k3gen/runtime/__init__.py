"""k3gen.runtime: what generated wrappers need at run time. torch and the standard library only.

The input checks and the module loader import torch when first used (PEP 562): the build cache,
the errors and `k3gen compile` run without it, and a process that only builds skips its import.
"""

from importlib import import_module

from .errors import K3BuildError, K3Error, K3ToolchainMissing, K3UnsupportedError  # noqa: F401 (re-exported)

_LAZY = {
    name: "checks"
    for name in (
        "check_choice",
        "check_dtype",
        "check_input",
        "check_layout",
        "check_shape",
        "check_tensor",
        "check_tensors",
        "data_ptr",
        "dtype_name",
        "empty",
        "gate_failed",
        "prepare_output",
        "uncovered",
    )
}
_LAZY.update(FamilyModule="module", device_arch="module", FastPath="fastpath", DeviceTables="tables")

__all__ = sorted(["K3BuildError", "K3Error", "K3ToolchainMissing", "K3UnsupportedError", *_LAZY])


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f".{_LAZY[name]}", __name__), name)
    globals()[name] = value  # later lookups skip this hook
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
