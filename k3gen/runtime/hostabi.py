"""The C++ call path on torch's stable ABI (csrc/k3stable.cpp): one library for every torch from
2.10 on and every CPython from 3.10 on, so a wheel built with one torch serves another without a
compiler. hostext.py finds, vouches for and loads it (before the per-torch library, csrc/k3host.cpp,
which stays the fallback); this module says how it is built and named, and binds it to the running
torch.

Why one binary serves several torch and Python builds: it reaches torch only through the stable C
shim (aoti_torch_*, in libtorch_cpu, needed by soname: no path of the build machine), and Python
only through the limited API (an abi3 module). Its name and key hold no torch or Python version.
What a torch may lack (the CUDA/HIP stream, a CPU-only build) and the two crossings between a Python
tensor and a shim handle are looked up here in the running torch and handed over by `bind`:
torch >= 2.14 has stable interop shims for them; 2.10-2.13 have none, and the library takes the
tensor's `_cdata` (or, where `_cdata_offset` finds it, the at::Tensor inside the tensor object,
without an attribute call) and THPVariable_Wrap there, facts of those released builds that `_check`
verifies before any call uses them (a library that fails it is not used: the per-torch one is tried
next).
With CUDA it also takes torch's own CUDA allocation (EMPTY_GPU, what the per-torch library calls;
2.10-2.14 export it): the shim's allocation goes through the dispatcher, 0.5 us a call more on the
H200. A torch without the symbol, one whose allocation fails `_allocates_as_asked`, or a process
that has not started CUDA (binding never starts it) gets the shim's allocation.

Why 2.10: the stable headers can target no older torch (TORCH_TARGET_VERSION starts there), and
the shim functions the library uses are all in 2.10.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import sysconfig
from pathlib import Path

log = logging.getLogger("k3gen")
SOURCE = Path(__file__).parent / "csrc" / "k3stable.cpp"
PLANS = SOURCE.with_name("k3plans.h")  # what both C++ call paths share: part of both keys
NAME = "_k3stable"
SUFFIX = ".abi3.so"  # what CPython calls a limited-API extension; any 3.10+ interpreter loads it
OLDEST = (2, 10)  # the oldest torch it serves
INTEROP = (2, 14)  # from here on the crossings are torch's stable interop shims
WRAP = "_Z16THPVariable_WrapRKN2at10TensorBaseE"  # THPVariable_Wrap(const at::TensorBase&), 2.10-2.13
# at::detail::empty_strided_cuda(IntArrayRef, IntArrayRef, ScalarType, std::optional<Device>), 2.10-2.14
EMPTY_GPU = "_ZN2at6detail18empty_strided_cudaEN3c108ArrayRefIlEES3_NS1_10ScalarTypeESt8optionalINS1_6DeviceEE"


def torch_version(torch) -> tuple[int, int]:
    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    return int(major), int(minor)


def unsupported(torch) -> str | None:
    """Why this torch cannot use the library (None when it can)."""
    if torch_version(torch) < OLDEST:
        return f"torch {torch.__version__} is older than {'.'.join(map(str, OLDEST))}, the stable ABI's oldest target"
    return None


def cxx_command(torch, source: Path, out: Path, flags: list[str], libs: list[str]) -> list[str]:
    """A C++ call path's build, one shape for both (this one and hostext's per-torch one): `source`
    against torch's and Python's headers into the shared library `out`, with `flags` and `libs`."""
    root = Path(torch.__file__).parent
    return [
        os.environ.get("CXX", "c++"),
        *("-O2", "-std=c++17", "-fPIC", "-shared", "-w"),
        *flags,
        f"-I{root / 'include'}",
        f"-I{sysconfig.get_paths()['include']}",
        str(source),
        "-o",
        str(out),
        f"-L{root / 'lib'}",
        *libs,
    ]


def command(torch, out: Path) -> list[str]:
    """The build: against any torch >= 2.10's headers, linked to libtorch_cpu by soname only."""
    return cxx_command(torch, SOURCE, out, ["-fvisibility=hidden"], ["-ltorch_cpu"])


def content_key(torch) -> str:
    """Source and flags, never the torch or Python it was built with: one key for every machine."""
    paths = ("-I", "-L", "-o", "<out>", str(SOURCE))
    flags = [f for f in command(torch, Path("<out>"))[1:] if not f.startswith(paths)]
    h = hashlib.sha256(SOURCE.read_bytes() + b"\0" + PLANS.read_bytes() + b"\0" + "\0".join(flags).encode())
    return h.hexdigest()[:32]


def prebuilt_name(torch) -> str:
    return f"{NAME}.{content_key(torch)}{SUFFIX}"


def _address(lib: Path, symbol: str) -> int:
    """The address of `symbol` in `lib`, a library the running torch has loaded; 0 when either is absent."""
    if not lib.is_file():
        return 0
    try:
        found = getattr(ctypes.CDLL(str(lib), mode=os.RTLD_NOLOAD | os.RTLD_LAZY), symbol)
    except (OSError, AttributeError):
        return 0
    return ctypes.cast(found, ctypes.c_void_p).value or 0


def bind(module, torch) -> None:
    """Hand the library what it takes from the running torch, then check it reads and makes tensors
    as Python sees them; OSError (one line) when this torch lacks something or the check fails."""
    lib = Path(torch.__file__).parent / "lib"
    gpu = lib / ("libtorch_hip.so" if torch.version.hip else "libtorch_cuda.so")
    empty_gpu = 0  # the shim's allocation, unless torch's own CUDA one is there and checks out
    offset = 0
    if torch_version(torch) >= INTEROP:
        cpu = lib / "libtorch_cpu.so"
        from_py, to_py, wrap = _address(cpu, "torch_tensor_from_pyobject"), _address(cpu, "torch_tensor_to_pyobject"), 0
    else:
        from_py, to_py, wrap = 0, 0, _address(lib / "libtorch_python.so", WRAP)
        offset = _cdata_offset(torch)
    if torch.version.cuda and torch.cuda.is_initialized():
        empty_gpu = _address(gpu, EMPTY_GPU)
    if not (from_py and to_py) and not wrap:
        raise OSError(f"torch {torch.__version__} exports neither the interop shims nor THPVariable_Wrap")
    stream = _address(gpu, "aoti_torch_get_current_cuda_stream")
    if (torch.version.cuda or torch.version.hip) and not stream:
        raise OSError(f"torch {torch.__version__} has no aoti_torch_get_current_cuda_stream in {gpu.name}")
    module.bind(torch.Tensor, from_py, to_py, wrap, stream, empty_gpu, offset)
    _check(module, torch)
    if empty_gpu and not _allocates_as_asked(module, torch):
        log.warning(
            "k3gen: torch %s's CUDA allocation misbehaves by address; outputs come from the shim", torch.__version__
        )
        module.bind(torch.Tensor, from_py, to_py, wrap, stream, 0, offset)


def _cdata_offset(torch) -> int:
    """Where a plain tensor object of torch 2.10-2.13 holds its at::Tensor (whose one word is the
    TensorImpl* that `_cdata` gives), when it is right after the object header, as 2.13 lays it out;
    else 0 (the library reads `_cdata`, a Python attribute call per tensor)."""
    offset = object.__basicsize__
    tensors = (torch.empty(0), torch.arange(6.0).reshape(2, 3).t(), torch.zeros(3, dtype=torch.int8)[1:])
    same = all(ctypes.c_void_p.from_address(id(t) + offset).value == t._cdata for t in tensors)
    return offset if same and torch.Tensor.__basicsize__ >= offset + ctypes.sizeof(ctypes.c_void_p) else 0


def _check(module, torch) -> None:
    """A view with a storage offset, read and remade through the library, must be the tensor Python
    sees: same sizes, strides, pointer, dtype and memory."""
    t = torch.arange(24, dtype=torch.float32).reshape(4, 6)[1:, 2:5]
    sizes, strides, ptr, view = module.probe(t)
    same = (
        sizes == tuple(t.shape)
        and strides == t.stride()
        and ptr == t.data_ptr()
        and type(view) is torch.Tensor
        and view is not t
        and view.dtype == t.dtype
        and view.shape == t.shape
        and view.stride() == t.stride()
        and view.data_ptr() == t.data_ptr()
        and torch.equal(view, t)
    )
    if not same:
        raise OSError(f"the stable call path misreads torch {torch.__version__}'s tensors; not used")


def _allocates_as_asked(module, torch) -> bool:
    """Whether an output allocated through torch's own CUDA allocation is the tensor asked for, on the
    current device, from the caching allocator (so that record_stream holds it)."""
    device = torch.cuda.current_device()
    before = torch.cuda.memory_allocated(device)
    t = module.probe_allocation(device, (3, 5), (1, 3))
    same = (
        type(t) is torch.Tensor
        and t.device == torch.device("cuda", device)
        and t.dtype == torch.float32
        and t.shape == (3, 5)
        and t.stride() == (1, 3)
        and torch.cuda.memory_allocated(device) > before
    )
    if same:
        t.copy_(torch.arange(15, dtype=torch.float32, device=t.device).reshape(5, 3).t())
        t.record_stream(torch.cuda.current_stream(device))
        same = t.sum().item() == 105.0 and t[2, 4].item() == 14.0
    return same
