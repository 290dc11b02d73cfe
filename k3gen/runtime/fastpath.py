"""The steady state of a wrapper call: one dict lookup, fresh outputs, pointer updates, one launch.

The checked path (the generated `_resolve`) decides everything about a call from its *signature*:
each tensor's dtype, shape, strides, device and data pointer modulo the largest alignment a gate asks
for, and every other argument's value. So a call whose signature was checked before is served by
the resolution cached for it; a call that differs in any of those (strides, alignment, dtype,
device, shape) misses and is checked again. A family whose gates read a pointer other than as
`T.ptr % N` has no alignment class, and its generated wrapper always takes the checked path.
"""
from __future__ import annotations

import ctypes
import threading

import torch

from .module import ERR_LEN, raise_launch_error, raw_stream as _raw_stream

_Tensor = torch.Tensor
_empty_strided = torch.empty_strided
_MAX_ENTRIES = 1024  # signatures remembered per thread; an engine sees a handful per family


def tensor_key(t, align: int):
    """A tensor's part of the call signature; anything else is its own key (None, a number)."""
    if type(t) is _Tensor:  # subclasses (fake and functional tensors) take the checked path
        return t.dtype, t.shape, t.stride(), t.get_device(), t.data_ptr() % align  # device: -1 off the GPU
    if isinstance(t, _Tensor):
        raise TypeError("not a plain tensor")  # never cached
    return t


class CallCache(threading.local):
    """Resolutions per signature, one dict per thread: a cached Args is filled in place, so two
    threads must never share one."""

    def __init__(self):
        self.entries: dict = {}

    def remember(self, signature, call: "FastCall") -> None:
        if len(self.entries) >= _MAX_ENTRIES:
            self.entries.clear()
        self.entries[signature] = call


class FastCall:
    """A checked call, ready to repeat: its switch key, its Args (scalars and strides filled), which
    Args fields hold which tensor, and the outputs to allocate (shape, strides, dtype, device).
    It belongs to one thread (CallCache), so it owns its Args and its error buffer outright."""

    __slots__ = ("entry", "key", "args", "args_ref", "err", "index", "pointers", "allocate", "returns", "skip")

    def __init__(self, module, key: int, args, tensors: tuple, pointer_fields: tuple, outputs: tuple,
                 given: tuple):
        """`tensors`: the call's tensors in Args field order after the checked path (outputs
        allocated); `given`: the same as the caller passed them (None where an output was allocated);
        `outputs`: positions of the outputs in `tensors`, in return order."""
        device = tensors[outputs[0]].device
        self.entry, self.index = module.entry_for(device)
        self.key, self.args, self.args_ref = key, args, ctypes.byref(args)
        self.err = ctypes.create_string_buffer(ERR_LEN)
        self.pointers = tuple(zip(pointer_fields, range(len(tensors))))
        self.allocate = tuple((i, tuple(t.shape), t.stride(), t.dtype, t.device)
                              for i, (t, g) in enumerate(zip(tensors, given)) if g is None and i in outputs)
        self.returns = outputs
        self.skip = any(tensors[i].numel() == 0 for i in outputs)

    def run(self, tensors: tuple) -> list:
        ts = list(tensors)
        for i, shape, stride, dtype, device in self.allocate:
            ts[i] = _empty_strided(shape, stride, dtype=dtype, device=device)
        args = self.args
        for field, i in self.pointers:
            t = ts[i]
            setattr(args, field, 0 if t is None else t.data_ptr())
        if not self.skip:
            rc = self.entry(self.key, self.args_ref, _raw_stream(self.index), self.index, self.err, ERR_LEN)
            if rc:
                raise_launch_error(rc, self.err)
        return [ts[i] for i in self.returns]
