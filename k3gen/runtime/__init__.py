"""k3gen.runtime: what generated wrappers need at run time. torch and the standard library only."""
from .checks import (check_choice, check_dtype, check_input, check_layout, check_shape, check_tensor, data_ptr,
                     dtype_name, empty, gate_failed, prepare_output, uncovered)
from .errors import K3BuildError, K3Error, K3ToolchainMissing, K3UnsupportedError
from .module import FamilyModule, device_arch

__all__ = ["FamilyModule", "K3BuildError", "K3Error", "K3ToolchainMissing", "K3UnsupportedError",
           "check_choice", "check_dtype", "check_input", "check_layout", "check_shape", "check_tensor", "data_ptr", "device_arch",
           "dtype_name", "empty", "gate_failed", "prepare_output", "uncovered"]
