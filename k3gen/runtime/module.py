"""One family's compiled module: which arch the device is, build or load it, launch through the C ABI."""
from __future__ import annotations

import ctypes
import logging
import threading
from pathlib import Path

import torch

from .cache import BuildRequest, ensure_built
from .errors import K3BuildError, K3Error, K3UnsupportedError

log = logging.getLogger("k3gen")
ERR_LEN = 1024
# CUDA archs whose code is built arch-specific ("a" suffix): it runs only on that exact chip.
_ARCH_SPECIFIC = {(9, 0), (10, 0), (12, 0)}


def device_arch(device=None) -> str | None:
    """The spec spelling of the device's arch (sm_90a, gfx942), or None without a GPU."""
    if not torch.cuda.is_available():
        return None
    index = torch.device(device).index if device is not None else None
    props = torch.cuda.get_device_properties(index if index is not None else torch.cuda.current_device())
    if torch.version.hip:
        return props.gcnArchName.split(":")[0]
    cc = (props.major, props.minor)
    return f"sm_{cc[0]}{cc[1]}" + ("a" if cc in _ARCH_SPECIFIC else "")


class FamilyModule:
    """Serving and test gates of a family: supported_hardware(), build() raises, available() never does."""

    def __init__(self, family: str, args: type, sources: dict, headers: dict, arch_defines: dict,
                 package_file: str):
        self.family = family
        self.entry = f"k3_{family}_launch"
        self.args_type = args
        self.sources = sources
        self.headers = headers
        self.arch_defines = arch_defines
        self.csrc = Path(package_file).parent / "csrc"
        self._fns: dict[str, object] = {}
        self._lock = threading.Lock()
        self._warned = False

    def supported_hardware(self, device=None) -> bool:
        return device_arch(device) in self.arch_defines

    def request(self, arch: str) -> BuildRequest:
        backend = "hip" if arch.startswith("gfx") else "cuda"
        return BuildRequest(self.family, arch, self.csrc, tuple(self.sources[backend]),
                            tuple(self.headers[backend]), tuple(self.arch_defines[arch]))

    def build(self, device=None):
        """Build (or load from the cache) the module for the device's arch. Raises on any failure."""
        arch = device_arch(device)
        if arch not in self.arch_defines:
            raise K3BuildError(f"{self.family}: device arch {arch or '(no GPU)'} is not a target; "
                               f"targets: {', '.join(self.arch_defines)}")
        with self._lock:
            if arch not in self._fns:
                path = ensure_built(self.request(arch))
                try:
                    lib = ctypes.CDLL(str(path))
                except OSError as exc:
                    raise K3BuildError(f"{self.family}: cannot load {path}: {exc}") from None
                fn = getattr(lib, self.entry)
                fn.argtypes = [ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p,
                               ctypes.c_size_t]
                fn.restype = ctypes.c_int
                self._fns[arch] = fn
            return self._fns[arch]

    def available(self, device=None) -> bool:
        """For serving: False (and one warning) instead of an exception, so the caller can fall back."""
        if not self.supported_hardware(device):
            return False
        try:
            self.build(device)
        except K3BuildError as exc:
            if not self._warned:
                log.warning("k3gen: %s unavailable, falling back: %s", self.family, str(exc).splitlines()[0])
                self._warned = True
            return False
        return True

    def entry_for(self, device) -> tuple[object, int]:
        """The C entry point for `device` (built or loaded first) and the device's index."""
        device = torch.device(device)
        index = device.index if device.index is not None else torch.cuda.current_device()
        return self._fns.get(device_arch(device)) or self.build(device), index

    def launch(self, key: int, args, device) -> None:
        """Run the variant `key` on the current stream of `device` (so CUDA graphs capture it)."""
        fn, index = self.entry_for(device)
        err = ctypes.create_string_buffer(ERR_LEN)
        rc = fn(key, ctypes.byref(args), raw_stream(index), index, err, ERR_LEN)
        if rc:
            raise_launch_error(rc, err.value)


def raise_launch_error(rc: int, message: bytes) -> None:
    if rc == 1:  # a C++ gate refused: the Python gates should have caught it first
        raise K3UnsupportedError(message.decode(errors="replace"))
    raise K3Error(message.decode(errors="replace"))


# The current stream of a device, as the raw pointer the C entry takes (read per call, so CUDA
# graph capture sees its capture stream); torch's private accessor is 15x cheaper than the public one.
raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or \
    (lambda index: torch.cuda.current_stream(index).cuda_stream)
