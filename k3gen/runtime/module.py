"""One family's compiled module: which arch the device is, build or load it (the family or one
variant), launch through the C ABI, and record what was launched ($K3GEN_RECORD)."""

from __future__ import annotations

import ctypes
import functools
import json
import logging
import os
import threading
from pathlib import Path

import torch

from .archs import of_capability
from .cache import PREBUILT, PREBUILT_INDEX, BuildRequest, ensure_any, ensure_built
from .errors import K3BuildError, K3Error, K3UnsupportedError
from .files import Refused, read_text, write_inside

log = logging.getLogger("k3gen")
ERR_LEN = 1024


def device_arch(device=None) -> str | None:
    """The spec spelling of the device's arch (sm_90a, gfx942), or None without a GPU."""
    if not torch.cuda.is_available():
        return None
    index = torch.device(device).index if device is not None else None
    props = torch.cuda.get_device_properties(index if index is not None else torch.cuda.current_device())
    if torch.version.hip:
        return props.gcnArchName.split(":")[0]
    return of_capability(props.major, props.minor)


class FamilyModule:
    """Serving and test gates of a family: supported_hardware(), build() raises, available() never does.

    build() loads (or builds) the whole family's library. A launch needs only its variant's code:
    entry_for(device, key) takes the family library when an AOT build, the package's prebuilt
    libraries or the JIT cache already have it, else one variant's library (its unit alone, a few
    seconds to compile instead of the whole matrix). With $K3GEN_RECORD=FILE, each (family, variant,
    arch) a process launches is appended to FILE once: `k3gen compile --from-record FILE` builds
    exactly those.
    """

    def __init__(self, family: str, args: type, sources: dict, headers: dict, arch_defines: dict, package_file: str):
        self.family = family
        self.entry = f"k3_{family}_launch"
        self.args_type = args
        self.sources = sources
        self.headers = headers
        self.arch_defines = arch_defines
        self.csrc = Path(package_file).parent / "csrc"
        self._fns: dict[str, object] = {}  # arch -> the family library's entry
        self._by_key: dict[tuple[str, int], object] = {}  # (arch, key) -> the entry that serves it
        self._lock = threading.Lock()
        self._warned = False

    @functools.cached_property
    def prebuilt_archs(self) -> tuple[str, ...] | None:
        """The archs a prebuilt package (`k3gen package`) carries for this family; None outside one."""
        return prebuilt_archs(self.csrc.parent, self.family)

    def archs(self) -> list[str]:
        """The archs this install can run: the spec's targets, narrowed to a prebuilt package's."""
        built = self.prebuilt_archs
        return [a for a in self.arch_defines if built is None or a in built]

    def supported_hardware(self, device=None) -> bool:
        """Whether this install runs on the device's arch; False (and one warning) on a damaged one."""
        try:
            return device_arch(device) in self.archs()
        except K3BuildError as exc:
            self._warn(exc)
            return False

    def _warn(self, exc: Exception) -> None:
        if not self._warned:
            log.warning("k3gen: %s unavailable, falling back: %s", self.family, str(exc).splitlines()[0])
            self._warned = True

    def request(self, arch: str) -> BuildRequest:
        return BuildRequest.of(self.family, arch, self.csrc, self.sources, self.headers, self.arch_defines)

    def _check_arch(self, arch: str | None) -> None:
        if arch in self.archs():
            return
        if arch in self.arch_defines:  # a target of the spec that this package was not built for
            raise K3BuildError(
                f"{self.family}: this GPU is {arch}, and this k3kernels package was built for "
                f"{', '.join(self.prebuilt_archs) or 'no arch of this family'}; install the "
                f"package built for {arch} (`k3gen package --arch {arch}`)"
            )
        raise K3BuildError(
            f"{self.family}: device arch {arch or '(no GPU)'} is not a target; targets: {', '.join(self.archs())}"
        )

    def build(self, device=None):
        """Build (or load from the cache) the module for the device's arch. Raises on any failure."""
        arch = device_arch(device)
        self._check_arch(arch)
        with self._lock:
            if arch not in self._fns:
                self._fns[arch] = self._load(ensure_built(self.request(arch)), self.entry)
            return self._fns[arch]

    def _load(self, path: Path, symbol: str):
        try:
            lib = ctypes.CDLL(str(path))
        except OSError as exc:
            raise K3BuildError(f"{self.family}: cannot load {path}: {exc}") from None
        try:
            fn = getattr(lib, symbol)
        except AttributeError:
            raise K3BuildError(f"{self.family}: {path} has no entry {symbol}") from None
        fn.argtypes = [ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]
        fn.restype = ctypes.c_int
        return fn

    def available(self, device=None) -> bool:
        """For serving: False (and one warning) instead of an exception, so the caller can fall back."""
        if not self.supported_hardware(device):
            return False
        try:
            self.build(device)
        except K3Error as exc:
            self._warn(exc)
            return False
        return True

    def entry_for(self, device, key: int | None = None) -> tuple[object, int]:
        """The C entry point that runs variant `key` on `device` (loaded or built first: only that
        variant's code unless the family's library is at hand) and the device's index. Without a key,
        the family's library (build())."""
        device = torch.device(device)
        index = device.index if device.index is not None else torch.cuda.current_device()
        arch = device_arch(device)
        if key is None:
            return self._fns.get(arch) or self.build(device), index
        return self._by_key.get((arch, key)) or self._entry_for_key(arch, key), index

    def _entry_for_key(self, arch: str | None, key: int):
        self._check_arch(arch)
        with self._lock:
            if (arch, key) in self._by_key:
                return self._by_key[(arch, key)]
            family = self.request(arch)
            variant = family.variant_names().get(key)
            if variant is None:
                raise K3Error(f"{self.family}: no variant has key {key:#x}")
            record_launch(self.family, variant, arch, key)
            fn = self._fns.get(arch)
            if fn is None:
                req, path = ensure_any(
                    [family, family.variant_request(variant)], what=f"{self.family} variant {variant} (key {key:#x})"
                )
                fn = self._load(path, req.entry_symbol)
                if req.variant is None:
                    self._fns[arch] = fn
            self._by_key[(arch, key)] = fn
            return fn

    def launch(self, key: int, args, device) -> None:
        """Run the variant `key` on the current stream of `device` (so CUDA graphs capture it)."""
        fn, index = self.entry_for(device, key)
        err = ctypes.create_string_buffer(ERR_LEN)
        rc = fn(key, ctypes.byref(args), raw_stream(index), index, err, ERR_LEN)
        if rc:
            raise_launch_error(rc, err.value)


MAX_INDEX_BYTES = 1 << 20


def prebuilt_archs(package: Path, family: str) -> tuple[str, ...] | None:
    """From <package>/prebuilt/index.json, which `k3gen package` writes; None when there is none.
    Raise K3BuildError when it is not `{"families": {family: [arch, ...]}}` (a damaged install)."""
    path = package / PREBUILT / PREBUILT_INDEX
    if not path.exists() and not path.is_symlink():
        return None
    try:
        index = json.loads(read_text(path, package, MAX_INDEX_BYTES))
        archs = index["families"].get(family, [])
        if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
            raise TypeError("an arch list")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise K3BuildError(
            f'k3gen: {path} is not {{"families": {{FAMILY: [ARCH, ...]}}}} ({exc}); reinstall the k3kernels package'
        ) from None
    return tuple(archs)


_recorded: set = set()
_record_lock = threading.Lock()


def record_launch(family: str, variant: str, arch: str, key: int) -> None:
    """With $K3GEN_RECORD=FILE, append one JSON line per (family, variant, arch) this process launches."""
    path = os.environ.get("K3GEN_RECORD")
    if not path or (path, family, variant, arch) in _recorded:
        return
    line = json.dumps({"family": family, "variant": variant, "arch": arch, "key": f"{key:#x}"}, sort_keys=True)
    with _record_lock:
        # One write of one line in append mode: lines of concurrent processes never interleave. The
        # one writer: never through a link, and a missing folder is one line naming the variable.
        target = Path(path)
        try:
            write_inside(target, target.parent, line + "\n", append=True, shown=f"K3GEN_RECORD={path}")
        except Refused as exc:
            raise K3BuildError(f"k3gen: {exc}; point K3GEN_RECORD at a plain file in an existing folder") from None
        _recorded.add((path, family, variant, arch))


def raise_launch_error(rc: int, message: bytes) -> None:
    if rc == 1:  # a C++ gate refused: the Python gates should have caught it first
        raise K3UnsupportedError(message.decode(errors="replace"))
    raise K3Error(message.decode(errors="replace"))


# The current stream of a device, as the raw pointer the C entry takes (read per call, so CUDA
# graph capture sees its capture stream); torch's private accessor is 15x cheaper than the public one.
raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (
    lambda index: torch.cuda.current_stream(index).cuda_stream
)
