"""The wrappers' steady state (k3gen.runtime.fastpath): a cached resolution serves only calls whose
signature equals the checked one; strides, alignment, dtype, device and shape changes are checked again.
The CPU half tests the keys and the cache, on the Python path and on the stable-ABI C++ path (which
serves CPU tensors too, so its calls are tested here with a recording entry); the GPU half calls the
generated wrappers."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from k3gen.oracles import situ_and_mul as situ_oracle
from k3gen.runtime import K3UnsupportedError, fastpath, hostabi, hostext
from k3gen.runtime.env import jit_disabled
from k3gen.runtime.fastpath import FastPath, PyFastPath

# What `k3gen test` selects this module by (k3gen.review.impact): the paths it reads besides k3gen/ and tests/.
READS = ("generated/k3kernels/**",)

A = 16
IN_CI = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _sig(*args, n_tensors=1):
    return PyFastPath(n_tensors, A, None)._signature(args)


def test_a_signature_changes_with_every_checked_property():
    base = torch.zeros(4, 64, dtype=torch.bfloat16)
    key = _sig(base)
    assert _sig(torch.zeros(4, 64, dtype=torch.bfloat16)) == key  # another tensor, same class
    others = {
        "dtype": torch.zeros(4, 64, dtype=torch.float16),
        "shape": torch.zeros(4, 32, dtype=torch.bfloat16),
        "strides": torch.zeros(4, 128, dtype=torch.bfloat16)[:, :64],
        "alignment": torch.zeros(4 * 64 + 1, dtype=torch.bfloat16)[1:].view(4, 64),
        "device": torch.zeros(4, 64, dtype=torch.bfloat16, device="meta"),
    }
    for what, t in others.items():
        assert _sig(t) != key, what


def test_alignment_is_the_pointer_modulo_the_gates_alignment():
    storage = torch.zeros(64, dtype=torch.float32)
    assert _sig(storage[4:8]) == _sig(storage[0:4])
    assert _sig(storage[1:5]) != _sig(storage[0:4])


def test_scalars_are_keyed_by_type_and_value():
    t = torch.zeros(2)
    assert _sig(t, 4.0, "ue8m0") == _sig(t, 4.0, "".join(["ue8", "m0"]))  # equal strings, other objects
    assert _sig(t, 4.0) != _sig(t, 4)  # an int and a float: two signatures (and two checks)
    assert _sig(t, True) != _sig(t, 1)
    assert _sig(None, 2.5) == ((type(None), None)[1], (float, 2.5))


def test_tensor_subclasses_and_unhashable_arguments_are_never_cached():
    impl = PyFastPath(1, A, None)
    with FakeTensorMode():
        fake = torch.empty(2, 2)
    assert impl.remember(_PLAN, fake) is False and impl.call(fake) is None
    assert impl.remember(_PLAN, torch.zeros(2), [1, 2]) is False


def test_each_thread_has_its_own_plans_and_they_are_bounded():
    impl = PyFastPath(0, A, None)
    impl.remember(_PLAN, "sig")
    seen = []
    t = threading.Thread(target=lambda: seen.append(dict(impl._plans())))
    t.start()
    t.join()
    assert seen == [{}] and len(impl._plans()) == 1
    for i in range(5000):
        impl.remember(_PLAN, i)
    assert len(impl._plans()) <= 1024


_ENTRY_TYPE = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t
)


class _Args(ctypes.Structure):
    _fields_ = [("x", ctypes.c_void_p), ("M", ctypes.c_int64), ("out", ctypes.c_void_p)]


class _Module:
    """Records launches (key, x pointer, out pointer, M) instead of running them."""

    args_type = _Args

    def __init__(self, rc=0):
        self.launched = []

        def entry(key, args, stream, index, err, err_len):
            a = _Args.from_address(args)
            self.launched.append((key, a.x, a.out, a.M))
            if rc:
                ctypes.memmove(err, b"C++ gate refused", 17)
            return rc

        self.entry = _ENTRY_TYPE(entry)

    def entry_for(self, device, key=None):
        return self.entry, 0


_PLAN = (1, bytes(16), (), (), (0,), False, False, 1, 0)


@pytest.fixture(scope="session")
def stable_module(tmp_path_factory):
    """The stable-ABI call path bound to this torch: an installed wheel's, else built for this test
    session (a C++ compiler is all it needs)."""
    lib = hostext.PREBUILT / hostabi.prebuilt_name(torch)  # an installed wheel's, else one built now
    if not (lib.is_file() and hostext.vouched(lib) is None):
        lib = tmp_path_factory.mktemp("k3stable") / hostabi.prebuilt_name(torch)
        try:
            hostext.compile_to(torch, lib, hostabi.command)
        except OSError as exc:
            if IN_CI:
                raise
            pytest.skip(f"no C++ compiler for the stable call path: {exc}")
    module = hostext._import(hostabi.NAME, lib)
    hostabi.bind(module, torch)
    return module


@pytest.fixture(params=["python", "stable"])
def cpu_path(request, monkeypatch):
    """FastPath on the CPU, no CUDA stream: each test on the Python implementation and the C++ one."""
    module = request.getfixturevalue("stable_module") if request.param == "stable" else None
    monkeypatch.setattr(hostext, "load", lambda: module)
    monkeypatch.setattr(fastpath, "_raw_stream", lambda index: 0)
    return request.param


def _served_by(fast, path):
    assert type(fast.impl).__module__ == {"python": fastpath.__name__, "stable": hostabi.NAME}[path]


def _remembered(module, x, out, given_out=None):
    fast = FastPath(module, ["x", "out"], (1,), align=A)
    assert fast.call(x, given_out, 2.0) is None  # nothing is cached before a checked call
    fast.remember(0x12, _Args(x=x.data_ptr(), M=4, out=out.data_ptr()), (out,), (x, given_out, 2.0))
    return fast


def test_a_cached_call_allocates_with_the_checked_strides_and_updates_pointers(cpu_path):
    module = _Module()
    x, out = torch.zeros(4, 8), torch.empty(8, 4).t()  # the checked path made a column-major output
    fast = _remembered(module, x, out)
    x2 = torch.ones(4, 8)
    got = fast.call(x2, None, 2.0)
    _served_by(fast, cpu_path)
    assert got.shape == out.shape and got.stride() == out.stride() and got.data_ptr() != out.data_ptr()
    assert module.launched == [(0x12, x2.data_ptr(), got.data_ptr(), 4)]
    assert fast.call(x2, None, 3.0) is None  # another scalar: checked again
    assert fast.call(torch.ones(4, 8, dtype=torch.float64), None, 2.0) is None  # another dtype
    mine = torch.empty(8, 4).t()
    fast_given = _remembered(module, x, mine, given_out=mine)
    assert fast_given.call(x2, mine, 2.0) is mine  # a given output is used, never replaced


def test_a_cached_call_with_an_empty_output_launches_nothing(cpu_path):
    module = _Module()
    x, out = torch.zeros(0, 8), torch.empty(0, 4)
    fast = _remembered(module, x, out)
    assert fast.call(x, None, 2.0).shape == (0, 4)
    assert module.launched == []


def test_a_launch_error_of_a_cached_call_raises(cpu_path):
    fast = _remembered(_Module(rc=1), torch.zeros(4, 8), torch.empty(4, 4))
    with pytest.raises(K3UnsupportedError, match=r"C\+\+ gate refused"):
        fast.call(torch.zeros(4, 8), None, 2.0)


@pytest.mark.parametrize("crossing", ["in the object", "_cdata"])
def test_the_stable_path_reads_a_tensor_in_its_object_or_through_cdata(stable_module, monkeypatch, crossing):
    """torch 2.13 holds a tensor's at::Tensor right after the object header: the library takes its
    handle there, without an attribute call; a torch that does not is read through `_cdata`. Both
    serve a call alike, a view's storage offset included."""
    if hostabi.torch_version(torch) >= hostabi.INTEROP:
        pytest.skip("torch >= 2.14 crosses through its interop shims")
    if crossing == "_cdata":
        monkeypatch.setattr(hostabi, "_cdata_offset", lambda torch: 0)
    elif hostabi.torch_version(torch) == (2, 13):
        assert hostabi._cdata_offset(torch) == object.__basicsize__
    try:
        hostabi.bind(stable_module, torch)
        monkeypatch.setattr(hostext, "load", lambda: stable_module)
        monkeypatch.setattr(fastpath, "_raw_stream", lambda index: 0)
        module = _Module()
        x, out = torch.zeros(5, 8)[1:], torch.empty(4, 4)
        fast = _remembered(module, x, out)
        x2 = torch.ones(5, 8)[1:]
        got = fast.call(x2, None, 2.0)
        _served_by(fast, "stable")
        assert module.launched == [(0x12, x2.data_ptr(), got.data_ptr(), 4)] and got.shape == (4, 4)
    finally:
        monkeypatch.undo()
        hostabi.bind(stable_module, torch)


class _Args3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_void_p), ("q", ctypes.c_void_p), ("scale", ctypes.c_void_p)]


def test_the_stable_path_allocates_each_output_with_its_layout_and_keys_str_scalars(stable_module, monkeypatch):
    """Two outputs of two dtypes, each with the checked layout (a transposed one included), cut from
    one allocation at 256-byte offsets; an equal string built per call hits, another value misses."""
    monkeypatch.setattr(hostext, "load", lambda: stable_module)
    launched = []

    def entry(key, args, stream, index, err, err_len):
        a = _Args3.from_address(args)
        launched.append((key, a.x, a.q, a.scale, stream))
        return 0

    module = _Module()
    module.args_type, module.entry = _Args3, _ENTRY_TYPE(entry)
    fast = FastPath(module, ["x", "q", "scale"], (1, 2), align=A)
    x, q, scale = torch.zeros(8, 64), torch.empty(8, 64, dtype=torch.uint8), torch.empty(2, 8).t()
    args = _Args3(x=x.data_ptr(), q=q.data_ptr(), scale=scale.data_ptr())
    fast.remember(7, args, (q, scale), (x, None, None, 128, "ue8m0"))
    _served_by(fast, "stable")
    got_q, got_scale = fast.call(x, None, None, 128, "".join(["ue8", "m0"]))
    assert (got_q.dtype, got_q.shape, got_q.stride()) == (torch.uint8, q.shape, q.stride())
    assert (got_scale.dtype, got_scale.shape, got_scale.stride()) == (torch.float32, scale.shape, scale.stride())
    assert launched == [(7, x.data_ptr(), got_q.data_ptr(), got_scale.data_ptr(), None)]
    block = got_q.untyped_storage()
    assert got_scale.untyped_storage().data_ptr() == block.data_ptr() and block.nbytes() >= 512 + 16 * 4
    assert (got_q.data_ptr() - block.data_ptr(), got_scale.data_ptr() - block.data_ptr()) == (0, 512)
    assert fast.call(x, None, None, 128, "fp32_row") is None and fast.impl.cached() == 1
    got_scale.fill_(1.0)
    assert got_scale.sum().item() == 16.0 and got_q.data_ptr() not in (q.data_ptr(), got_scale.data_ptr())


def test_the_stable_library_links_nothing_of_one_torch_or_python_build(stable_module):
    """What makes one binary serve several torch and Python versions, read off the binary: no path of
    this machine, no libpython or torch_python, and of torch only the stable C shim, by name."""
    nm, readelf = shutil.which("nm"), shutil.which("readelf")
    if not (nm and readelf):
        pytest.skip("binutils (nm, readelf) not installed")
    lib = stable_module.__file__
    assert lib.endswith(".abi3.so") and hostabi.content_key(torch) in lib
    dynamic = subprocess.run([readelf, "-d", lib], capture_output=True, text=True, check=True).stdout
    needed = {line.split("[")[1].rstrip("]") for line in dynamic.splitlines() if "(NEEDED)" in line}
    system = {"libstdc++.so.6", "libgcc_s.so.1", "libm.so.6", "libc.so.6"}
    assert {n for n in needed if not n.startswith("ld-linux")} <= {"libtorch_cpu.so", *system}, needed
    assert "RPATH" not in dynamic and "RUNPATH" not in dynamic
    undefined = subprocess.run([nm, "-D", "--undefined-only", lib], capture_output=True, text=True, check=True)
    # weak references (w/v: GCC's transactional-memory operator new/delete on Ubuntu 24.04) need no
    # definition to load: only strong undefined symbols bind the library to a build
    names = [line.split()[-1] for line in undefined.stdout.splitlines() if line.split()[:1] == ["U"]]
    unversioned = [n for n in names if "@" not in n]  # libc and libstdc++ symbols carry their version
    torch_side = [n for n in unversioned if not n.startswith(("Py", "_Py", "_ITM_", "__gmon_start__"))]
    assert torch_side and all(n.startswith("aoti_torch_") for n in torch_side), torch_side


def _other_pythons() -> list[Path]:
    """CPython 3.10+ interpreters beside this one (pyenv keeps them side by side), this one's version excluded."""
    found = {}
    for exe in sorted(Path(sys.base_prefix).parent.glob("3.*/bin/python3")):
        version = tuple(int(v) for v in exe.parents[1].name.split(".")[:2] if v.isdigit())
        if len(version) == 2 and version >= (3, 10) and version != sys.version_info[:2]:
            found[version] = exe
    return list(found.values())


def test_the_stable_library_initializes_in_other_pythons(stable_module):
    """The abi3 library built under this CPython loads in another 3.10+ one (no torch there: the shim
    it needs by soname comes from this torch's folder) and stops at bind(), which needs torch."""
    others = _other_pythons()
    if not others:
        pytest.skip("no other CPython 3.10+ beside this one")
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location({hostabi.NAME!r}, sys.argv[1])\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "try:\n    m.Family(1, 16, print)\nexcept RuntimeError as exc:\n    print(sys.version_info[:2], exc)\n"
    )
    env = {**os.environ, "LD_LIBRARY_PATH": str(Path(torch.__file__).parent / "lib")}
    for exe in others[-2:]:
        r = subprocess.run([str(exe), "-c", code, stable_module.__file__], capture_output=True, text=True, env=env)
        assert r.returncode == 0 and "bind() first" in r.stdout, (exe, r.stdout + r.stderr)


def test_a_torch_the_stable_library_cannot_serve_falls_back(stable_module, monkeypatch, caplog):
    """Older than 2.10: not tried. A torch whose crossings are missing, or that fails the check at
    load: refused with one line, and the next build (here none: a CPU-only torch) or Python serves."""
    monkeypatch.setattr(torch, "__version__", "2.9.1")
    assert "older than 2.10" in hostabi.unsupported(torch)
    monkeypatch.setattr(torch, "__version__", "2.14.0")  # no interop shims in this torch's libraries
    with pytest.raises(OSError, match="neither the interop shims nor THPVariable_Wrap"):
        hostabi.bind(stable_module, torch)
    monkeypatch.undo()
    hostabi.bind(stable_module, torch)

    class Misreads:
        bind = staticmethod(stable_module.bind)

        @staticmethod
        def probe(t):
            sizes, strides, ptr, view = stable_module.probe(t)
            return sizes, strides, ptr + 4, view

    with pytest.raises(OSError, match="misreads"):
        hostabi.bind(Misreads, torch)
    hostabi.bind(stable_module, torch)
    monkeypatch.setattr(hostext, "_state", {})
    monkeypatch.setattr(hostext, "_load_stable", lambda torch: hostabi.bind(Misreads, torch))
    monkeypatch.setenv("K3GEN_HOST_PATH", "")
    if not (torch.version.cuda or torch.version.hip):
        with caplog.at_level("INFO", logger="k3gen"):
            assert hostext.load() is None and hostext.served() == "python"
        assert "stable: the stable call path misreads" in caplog.text and "torch: torch has no CUDA" in caplog.text
    hostabi.bind(stable_module, torch)


gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")


@pytest.fixture(params=["stable", "torch", "python"])
def host_path(request, monkeypatch):
    """Each GPU test runs on each implementation (K3GEN_HOST_PATH picks it), each wrapper with a fresh
    cache. The per-torch build is skipped where it cannot be built (a serving machine: no compiler)."""
    monkeypatch.setattr(hostext, "_state", {})
    monkeypatch.setenv("K3GEN_HOST_PATH", request.param)
    if torch.cuda.is_available() and request.param != "python":
        torch.cuda.init()  # as in serving, where the library loads after a call ran on the GPU
        if hostext.load() is None:
            if request.param == "torch" and (jit_disabled() or not shutil.which(os.environ.get("CXX", "c++"))):
                pytest.skip("the per-torch C++ call path needs a C++ compiler here")
            raise AssertionError(f"the {request.param} C++ call path must load on a GPU machine")
        assert hostext.served() == request.param
    import k3kernels

    for name in k3kernels.FAMILIES:
        module = __import__(f"k3kernels.{name}", fromlist=["_FAST"])
        old = module._FAST
        monkeypatch.setattr(module, "_FAST", FastPath(old.module, old.pointers, old.outputs, old.align))
    return request.param


_IMPL_MODULE = {"stable": hostabi.NAME, "torch": "_k3host", "python": fastpath.__name__}


def _situ():
    from k3kernels import situ_and_mul

    if not situ_and_mul.supported_hardware():
        pytest.skip("needs a GPU of a target arch")
    return situ_and_mul


def _expected(x, out_dtype=None):
    dt = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}
    out = out_dtype or {torch.float32: torch.bfloat16}.get(x.dtype, x.dtype)
    return situ_oracle.reference({"out": dt[out]}, x, situ_oracle.BETA, situ_oracle.LINEAR_BETA)


def _close(got, want):
    torch.testing.assert_close(got.float(), want.float(), rtol=2e-2, atol=2e-2)


def test_the_stable_path_allocates_gpu_outputs_as_the_per_torch_path_does_where_torch_allows(
    stable_module, monkeypatch, caplog
):
    """With CUDA initialized, GPU outputs come from torch's own CUDA allocation (by address, checked
    at bind); one that misallocates is dropped for the shim's, with a warning. A CPU-only torch, or a
    process that has not started CUDA, allocates through the shim."""
    hostabi.bind(stable_module, torch)
    if not torch.cuda.is_available():
        assert stable_module.allocation() == "shim"
        return
    torch.cuda.init()
    hostabi.bind(stable_module, torch)
    direct = bool(torch.version.cuda)
    assert stable_module.allocation() == ("torch" if direct else "shim")
    t = stable_module.probe_allocation(torch.cuda.current_device(), (4, 2), (2, 1))
    assert t.is_cuda and t.shape == (4, 2) and t.stride() == (2, 1) and t.dtype == torch.float32
    if direct:
        monkeypatch.setattr(hostabi, "_allocates_as_asked", lambda module, torch: False)
        with caplog.at_level("WARNING", logger="k3gen"):
            hostabi.bind(stable_module, torch)
        assert stable_module.allocation() == "shim" and "outputs come from the shim" in caplog.text
        monkeypatch.undo()
        hostabi.bind(stable_module, torch)
        assert stable_module.allocation() == "torch"


@gpu
def test_every_changed_property_is_checked_again_on_the_gpu(host_path):
    fam = _situ()
    beta, lbeta = situ_oracle.BETA, situ_oracle.LINEAR_BETA
    x = torch.randn(8, 512, device="cuda").to(torch.bfloat16)
    for _ in range(3):  # the second and third calls take the cached resolution
        _close(fam.situ_and_mul(x, beta, lbeta), _expected(x))
    storage = torch.randn(8 * 512 + 8, device="cuda").to(torch.bfloat16)
    misaligned = storage[1 : 1 + 8 * 512].view(8, 512)  # same dtype, shape, strides; pointer off by 2 bytes
    with pytest.raises(K3UnsupportedError, match=r"x\.ptr % 16 == 0"):
        fam.situ_and_mul(misaligned, beta, lbeta)
    odd_rows = torch.randn(8, 516, device="cuda").to(torch.bfloat16)[:, :512]  # row stride 516: not a vec multiple
    with pytest.raises(K3UnsupportedError, match=r"x\.stride0 % vec == 0"):
        fam.situ_and_mul(odd_rows, beta, lbeta)
    x32 = x.float()  # another dtype: another variant
    _close(fam.situ_and_mul(x32, beta, lbeta), _expected(x32))
    wide = torch.randn(3, 1024, device="cuda").to(torch.bfloat16)  # another shape
    _close(fam.situ_and_mul(wide, beta, lbeta), _expected(wide))
    with pytest.raises(K3UnsupportedError, match="must be on a CUDA device"):
        fam.situ_and_mul(x.cpu(), beta, lbeta)
    with pytest.raises(K3UnsupportedError, match="must be contiguous"):
        fam.situ_and_mul(x, beta, lbeta, out=torch.empty(512, 8, device="cuda", dtype=torch.bfloat16).t()[:, :256])
    _close(fam.situ_and_mul(x, beta, lbeta), _expected(x))  # the cached call still serves


@gpu
def test_the_cached_path_equals_the_checked_path_bit_for_bit(host_path):
    fam = _situ()
    x = torch.randn(64, 7168, device="cuda").to(torch.bfloat16)
    checked = fam._FAST.run(*fam._resolve(x, 4.0, 2.0))
    fam.situ_and_mul(x, 4.0, 2.0)
    assert type(fam._FAST.impl).__module__ == _IMPL_MODULE[host_path]  # the path asked for serves the next call
    assert fam._FAST.impl.call(x, None, 4.0, 2.0) is not None
    cached = fam.situ_and_mul(x, 4.0, 2.0)
    assert torch.equal(checked, cached)


@gpu
def test_threads_get_their_own_outputs_and_pointers(host_path):
    fam = _situ()
    xs = [torch.randn(16, 1024, device="cuda").to(torch.bfloat16) for _ in range(4)]
    want = [fam._FAST.run(*fam._resolve(x, 4.0, 2.0)) for x in xs]
    failures = []

    def work(i):
        for _ in range(200):
            if not torch.equal(fam.situ_and_mul(xs[i], 4.0, 2.0), want[i]):
                failures.append(i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    torch.cuda.synchronize()
    assert failures == []


@gpu
def test_a_cached_call_is_captured_by_a_cuda_graph(host_path):
    fam = _situ()
    x = torch.randn(8, 512, device="cuda").to(torch.bfloat16)
    out = torch.empty(8, 256, device="cuda", dtype=torch.bfloat16)
    fam.situ_and_mul(x, 4.0, 2.0, out=out)  # cached before the capture
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fam.situ_and_mul(x, 4.0, 2.0, out=out)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fam.situ_and_mul(x, 4.0, 2.0, out=out)
    x.copy_(torch.randn_like(x.float()).to(torch.bfloat16))
    out.zero_()
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, fam._FAST.run(*fam._resolve(x, 4.0, 2.0)))


@gpu
def test_multi_output_families_and_str_scalars_cache_correctly(host_path):
    """route_topk returns a tuple; per_token_group_quant takes a str scalar, here an equal string
    built per call (a hit) and another value (a miss, checked again)."""
    from k3kernels import per_token_group_quant as ptgq
    from k3kernels import route_topk

    if not route_topk.supported_hardware():
        pytest.skip("needs a GPU of a target arch")
    scores = torch.randn(4, 896, device="cuda").to(torch.bfloat16)
    bias = torch.randn(896, device="cuda").to(torch.bfloat16)
    want = route_topk._FAST.run(*route_topk._resolve(scores, bias, 16))
    for _ in range(3):
        got = route_topk.route_topk(scores, bias, 16)
        assert isinstance(got, tuple) and all(torch.equal(g, w) for g, w in zip(got, want))
    x = torch.randn(8, 512, device="cuda").to(torch.bfloat16)
    for fmt in ("ue8m0", "".join(["ue8", "m0"]), "fp32_row", "fp32_col"):
        want = ptgq._FAST.run(*ptgq._resolve(x, 128, fmt))
        for _ in range(2):
            got = ptgq.per_token_group_quant(x, 128, fmt)
            same = [
                torch.equal(g.contiguous().view(torch.uint8), w.contiguous().view(torch.uint8))
                for g, w in zip(got, want)
            ]
            assert all(same) and [g.stride() for g in got] == [w.stride() for w in want], fmt
    assert type(ptgq._FAST.impl).__module__ == _IMPL_MODULE[host_path]  # which path served
    q, scale = ptgq.per_token_group_quant(x, 128, "fp32_col")
    assert scale.stride() == want[1].stride() and not scale.is_contiguous()
    if host_path == "torch":  # the per-torch build allocates a call's outputs as one block, each 256-byte aligned
        assert q.untyped_storage().data_ptr() == scale.untyped_storage().data_ptr()
        assert q.data_ptr() % 256 == 0 and scale.data_ptr() % 256 == 0 and q.data_ptr() != scale.data_ptr()


def test_the_cpp_path_is_keyed_without_paths_and_off_where_it_cannot_run(monkeypatch, tmp_path, caplog):
    """The content key (the name `k3gen package` ships it under) holds no path of this machine;
    K3GEN_HOST_PATH=python, or a CPU-only torch, leaves the Python path on, and one log line says why."""
    key = hostext.content_key(torch)
    assert len(key) == 32 and key == hostext.content_key(torch)
    assert hostext.prebuilt_name(torch).startswith(f"_k3host.{key}.")
    monkeypatch.setattr(hostext, "SOURCE", tmp_path / "k3host.cpp")
    (tmp_path / "k3host.cpp").write_bytes(
        hostext.Path(hostext.__file__).with_name("csrc").joinpath("k3host.cpp").read_bytes()
    )
    assert hostext.content_key(torch) == key  # the same source elsewhere: the same key
    cases = [("K3GEN_HOST_PATH", "python", "K3GEN_HOST_PATH=python")]
    if not (torch.version.cuda or torch.version.hip):  # the per-torch build needs torch's CUDA library
        cases.append(("K3GEN_HOST_PATH", "torch", "torch: torch has no CUDA or HIP"))
    for var, value, why in cases:
        monkeypatch.setattr(hostext, "_state", {})
        monkeypatch.setenv(var, value)
        caplog.clear()
        with caplog.at_level("INFO", logger="k3gen"):
            assert hostext.load() is None
        assert why in caplog.text
