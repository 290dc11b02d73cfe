"""The wrappers' steady state (k3gen.runtime.fastpath): a cached resolution serves only calls whose
signature equals the checked one; strides, alignment, dtype, device and shape changes are checked again.
The CPU half tests the keys and the cache; the GPU half calls the generated wrappers."""
from __future__ import annotations

import threading

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from k3gen.oracles import situ_and_mul as situ_oracle
from k3gen.runtime import K3UnsupportedError
from k3gen.runtime import fastpath
from k3gen.runtime.fastpath import CallCache, FastCall, tensor_key

A = 16


def test_a_key_changes_with_every_checked_property():
    base = torch.zeros(4, 64, dtype=torch.bfloat16)
    key = tensor_key(base, A)
    assert tensor_key(torch.zeros(4, 64, dtype=torch.bfloat16), A)[:4] == key[:4]  # another tensor, same class
    others = {
        "dtype": torch.zeros(4, 64, dtype=torch.float16),
        "shape": torch.zeros(4, 32, dtype=torch.bfloat16),
        "strides": torch.zeros(4, 128, dtype=torch.bfloat16)[:, :64],
        "alignment": torch.zeros(4 * 64 + 1, dtype=torch.bfloat16)[1:].view(4, 64),
    }
    for what, t in others.items():
        assert tensor_key(t, A) != key, what


def test_the_device_is_its_index_and_minus_one_off_the_gpu():
    """Entries are made only by calls the checked path accepted, all on a GPU: a CPU or meta tensor
    (-1) never finds one, and two GPUs have two indices."""
    assert tensor_key(torch.zeros(2), A)[3] == -1


def test_alignment_is_the_pointer_modulo_the_gates_alignment():
    storage = torch.zeros(64, dtype=torch.float32)
    assert tensor_key(storage[4:8], A)[4] == tensor_key(storage[0:4], A)[4] == storage.data_ptr() % A
    assert tensor_key(storage[1:5], A)[4] != tensor_key(storage[0:4], A)[4]


def test_non_tensors_are_their_own_key_and_tensor_subclasses_are_never_keyed():
    assert tensor_key(None, A) is None
    assert tensor_key(2.5, A) == 2.5
    with FakeTensorMode(), pytest.raises(TypeError):
        tensor_key(torch.empty(2, 2), A)


def test_each_thread_has_its_own_cache_and_it_is_bounded():
    cache = CallCache()
    cache.remember(("sig",), "call")
    seen = []
    t = threading.Thread(target=lambda: seen.append(dict(cache.entries)))
    t.start()
    t.join()
    assert seen == [{}] and cache.entries == {("sig",): "call"}
    for i in range(5000):
        cache.remember((i,), i)
    assert len(cache.entries) <= 1024


class _Module:
    """Records launches instead of running them."""

    def __init__(self):
        self.launched = []

    def entry_for(self, device):
        def entry(key, args_ref, stream, index, err, err_len):
            self.launched.append((key, args_ref._obj.x, args_ref._obj.out))
            return 0
        return entry, 0


@pytest.fixture
def no_cuda_stream(monkeypatch):
    monkeypatch.setattr(fastpath, "_raw_stream", lambda index: 0)


def _args():
    import ctypes

    class Args(ctypes.Structure):
        _fields_ = [("x", ctypes.c_void_p), ("out", ctypes.c_void_p), ("M", ctypes.c_int64)]
    return Args(M=4)


def test_a_fast_call_allocates_with_the_checked_strides_and_updates_pointers(no_cuda_stream):
    module = _Module()
    x, out = torch.zeros(4, 8), torch.empty(8, 4).t()  # the checked path made a column-major output
    call = FastCall(module, 0x12, _args(), (x, out), ("x", "out"), (1,), (x, None))
    x2 = torch.ones(4, 8)
    (got,) = call.run((x2, None))
    assert got.shape == out.shape and got.stride() == out.stride() and got.data_ptr() != out.data_ptr()
    assert module.launched == [(0x12, x2.data_ptr(), got.data_ptr())]
    mine = torch.empty(8, 4).t()
    call_given = FastCall(module, 0x12, _args(), (x, mine), ("x", "out"), (1,), (x, mine))
    assert call_given.run((x2, mine))[0] is mine  # a given output is used, never replaced


def test_a_fast_call_with_an_empty_output_launches_nothing(no_cuda_stream):
    module = _Module()
    x, out = torch.zeros(0, 8), torch.empty(0, 4)
    FastCall(module, 1, _args(), (x, out), ("x", "out"), (1,), (x, None)).run((x, None))
    assert module.launched == []


gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")


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


@gpu
def test_every_changed_property_is_checked_again_on_the_gpu():
    fam = _situ()
    beta, lbeta = situ_oracle.BETA, situ_oracle.LINEAR_BETA
    x = torch.randn(8, 512, device="cuda").to(torch.bfloat16)
    for _ in range(3):  # the second and third calls take the cached resolution
        _close(fam.situ_and_mul(x, beta, lbeta), _expected(x))
    storage = torch.randn(8 * 512 + 8, device="cuda").to(torch.bfloat16)
    misaligned = storage[1:1 + 8 * 512].view(8, 512)  # same dtype, shape, strides; pointer off by 2 bytes
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
def test_the_cached_path_equals_the_checked_path_bit_for_bit():
    fam = _situ()
    x = torch.randn(64, 7168, device="cuda").to(torch.bfloat16)
    checked = fam._run(*fam._resolve(x, 4.0, 2.0))
    fam.situ_and_mul(x, 4.0, 2.0)
    cached = fam.situ_and_mul(x, 4.0, 2.0)
    assert torch.equal(checked, cached)


@gpu
def test_threads_do_not_share_a_cached_args():
    fam = _situ()
    xs = [torch.randn(16, 1024, device="cuda").to(torch.bfloat16) for _ in range(4)]
    want = [fam._run(*fam._resolve(x, 4.0, 2.0)) for x in xs]
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
def test_a_cached_call_is_captured_by_a_cuda_graph():
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
    assert torch.equal(out, fam._run(*fam._resolve(x, 4.0, 2.0)))
