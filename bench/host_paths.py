"""Host cost of one cached call, launch excluded: the C++ call path's two builds and the Python path,
each serving with a C no-op entry (no kernel), interleaved in one process, so every difference is
the call path's own (bench/host.py times whole eager calls, one process per tree).

    python bench/host_paths.py [--rounds 30] [--device cuda]

What it isolates: the signature, the lookup, the outputs' allocation, the entry call and the outputs'
Python objects (bench/host.py times the same on the GPU, launch included). The stable build
(csrc/k3stable.cpp) is built as hostabi builds it. The per-torch build (csrc/k3host.cpp) needs
torch's CUDA library, which a CPU-only torch lacks: for this measurement only it is compiled with its
three CUDA calls replaced by their CPU counterparts (empty_strided_cpu, the CPU dispatch key, no
stream), which cost alike. `--device cuda` (a GPU machine) serves CUDA tensors and builds k3host.cpp
as it is; there the stable library is timed twice, rebound between rounds: with torch's own CUDA
allocation, as it serves where that checks out ("stable"), and with the shim's, which goes through
the dispatcher ("stable, shim").
Needs a C++ compiler; builds into a temporary folder.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from k3gen.runtime import fastpath, hostabi, hostext  # noqa: E402

CPU_PORT = [  # (CUDA spelling in k3host.cpp, CPU spelling): the measurement-only port
    ("#include <ATen/cuda/EmptyTensor.h>", "#include <ATen/EmptyTensor.h>"),
    (
        "at::detail::empty_strided_cuda({plan.block_bytes}, {1}, c10::ScalarType::Byte,",
        "at::detail::empty_strided_cpu({plan.block_bytes}, {1}, c10::ScalarType::Byte); (void)(",
    ),
    ("c10::DispatchKeySet(c10::DispatchKey::CUDA)", "c10::DispatchKeySet(c10::DispatchKey::CPU)"),
    (
        "void* stream = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(dev).native_handle();",
        "void* stream = nullptr; (void)dev;",
    ),
]


def build(tmp: Path, device: str):
    """(per-torch module, stable module, address of a no-op entry); on the CPU, k3host.cpp's port."""
    per_torch = tmp / f"{hostext._NAME}.so"
    if device == "cuda":
        hostext.compile_to(torch, per_torch)
    else:
        source = hostext.SOURCE.read_text()
        for cuda, cpu in CPU_PORT:
            assert cuda in source, f"k3host.cpp changed: {cuda!r} not found; update CPU_PORT"
            source = source.replace(cuda, cpu)
        port = tmp / "k3host_cpu.cpp"
        port.write_text(source)
        cmd = [a for a in hostext._command(torch, per_torch) if a not in ("-ltorch_cuda", "-ltorch_hip")]
        cmd.insert(1, f"-I{hostext.SOURCE.parent}")  # the port is elsewhere: k3plans.h beside the original
        subprocess.run([port if a == str(hostext.SOURCE) else a for a in cmd], check=True)
    stable = hostext.compile_to(torch, tmp / hostabi.prebuilt_name(torch), hostabi.command)
    (tmp / "noop.c").write_text(
        "int noop(long long k, const void* a, void* s, int d, char* e, unsigned long n) { return 0; }\n"
    )
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", str(tmp / "noop.c"), "-o", str(tmp / "noop.so")], check=True)
    modules = []
    for name, lib in ((hostext._NAME, per_torch), (hostabi.NAME, stable)):
        spec = importlib.util.spec_from_file_location(name, lib)
        modules.append(importlib.util.module_from_spec(spec))
        spec.loader.exec_module(modules[-1])
    hostabi.bind(modules[1], torch)
    return modules[0], modules[1], ctypes.CDLL(str(tmp / "noop.so")).noop


class _One(ctypes.Structure):
    _fields_ = [("x", ctypes.c_void_p), ("out", ctypes.c_void_p), ("M", ctypes.c_int64)]


class _Two(ctypes.Structure):
    _fields_ = [("x", ctypes.c_void_p), ("q", ctypes.c_void_p), ("scale", ctypes.c_void_p)]


class _Route(ctypes.Structure):
    _fields_ = [
        ("scores", ctypes.c_void_p),
        ("bias", ctypes.c_void_p),
        ("w", ctypes.c_void_p),
        ("ids", ctypes.c_void_p),
    ]


def calls(ext, entry, device: str) -> dict:
    """The decode-shape calls of bench/host.py, as FastPath plans of a no-op kernel."""

    class Module:
        def __init__(self, args_type):
            self.args_type = args_type

        def entry_for(self, device, key=None):
            return entry, 0

    hostext.load = lambda: ext
    if device == "cpu":
        fastpath._raw_stream = lambda index: 0  # the Python path's stream: none on the CPU
    x = torch.randn(1, 7168, device=device).to(torch.bfloat16)
    out = torch.empty(1, 3584, dtype=torch.bfloat16, device=device)
    q, scale = torch.empty(1, 7168, dtype=torch.uint8, device=device), torch.empty(56, 1, device=device).t()
    scores, bias = torch.randn(1, 896, device=device), torch.randn(896, device=device)
    w, ids = torch.empty(1, 16, device=device), torch.empty(1, 16, dtype=torch.int32, device=device)
    one = fastpath.FastPath(Module(_One), ["x", "out"], (1,), align=16)
    one.remember(1, _One(), (out,), (x, None, 4.0, 2.0))
    given = fastpath.FastPath(Module(_One), ["x", "out"], (1,), align=16)
    given.remember(1, _One(), (out,), (x, out, 4.0, 2.0))
    two = fastpath.FastPath(Module(_Two), ["x", "q", "scale"], (1, 2), align=16)
    two.remember(2, _Two(), (q, scale), (x, None, None, 128, "ue8m0"))
    route = fastpath.FastPath(Module(_Route), ["scores", "bias", "w", "ids"], (2, 3), align=16)
    route.remember(3, _Route(), (w, ids), (scores, bias, None, None, 16, 2.5))
    return {
        "1 output": lambda: one.call(x, None, 4.0, 2.0),
        "out= given": lambda: given.call(x, out, 4.0, 2.0),
        "2 outputs + str": lambda: two.call(x, None, None, 128, "ue8m0"),
        "2 in, 2 out": lambda: route.call(scores, bias, None, None, 16, 2.5),
        "miss": lambda: given.call(x, out, 4.0, 3.0),
    }


def _bind(stable, allocation: str) -> None:
    """Bind the stable library with torch's own CUDA allocation ("torch") or without ("shim")."""
    symbol = hostabi.EMPTY_GPU
    if allocation == "shim":
        hostabi.EMPTY_GPU = "not a symbol"
    try:
        hostabi.bind(stable, torch)
    finally:
        hostabi.EMPTY_GPU = symbol
    assert stable.allocation() == allocation


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = ap.parse_args()
    if args.device == "cuda":
        torch.cuda.init()  # as in serving: the stable library binds torch's CUDA allocation only then
    with tempfile.TemporaryDirectory() as tmp:
        per_torch, stable, entry = build(Path(tmp), args.device)
        d = args.device
        paths = {
            "python": calls(None, entry, d),
            "per-torch": calls(per_torch, entry, d),
            "stable": calls(stable, entry, d),
        }
        allocation = {"stable": stable.allocation()}
        if allocation["stable"] == "torch":  # also the shim's allocation, the same library rebound
            paths["stable, shim"] = paths["stable"]
            allocation["stable, shim"] = "shim"
        times = {(p, c): [] for p, cs in paths.items() for c in cs}
        clock = time.perf_counter_ns
        for _ in range(args.rounds):  # every (path, call) in turn, so drift weighs on all alike
            for p, cs in paths.items():
                if p in allocation:
                    _bind(stable, allocation[p])
                for c, fn in cs.items():
                    for _ in range(50):
                        fn()
                    ts = times[(p, c)]
                    for _ in range(400):
                        t = clock()
                        fn()
                        ts.append(clock() - t)
    where = f"torch {torch.__version__}, CPython {sys.version.split()[0]}"
    print(f"{where}: median us per cached call ({args.device} tensors, no-op entry)")
    print("stable: GPU outputs from " + ("torch's own CUDA allocation" if "stable, shim" in paths else "the shim"))
    names = list(paths["python"])
    print(f"{'':12}" + "".join(f"{n:>17}" for n in names))
    for p in paths:
        print(f"{p:12}" + "".join(f"{statistics.median(times[(p, n)]) / 1e3:17.3f}" for n in names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
