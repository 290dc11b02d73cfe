"""The steady state of a wrapper call: one lookup, fresh outputs, pointer updates, one launch.

The checked path (the generated `_resolve`) decides everything about a call from its *signature*:
each tensor's dtype, shape, strides, device and data pointer modulo the largest alignment a gate asks
for, and every other argument's type and value. So a call whose signature was checked before is
served by the plan made for it; a call that differs in any of those (strides, alignment, dtype,
device, shape, a scalar) misses and is checked again. A family whose gates read a pointer other
than as `T.ptr % N` has no alignment class, and its generated wrapper always takes the checked path.

Implementations of one contract (`call(*tensors, *scalars)` → outputs or None on a miss;
`remember(plan, *tensors, *scalars)`): the C++ ones, via hostext (csrc/k3stable.cpp on torch's
stable ABI, one build for torch >= 2.10; csrc/k3host.cpp per torch, which allocates a call's outputs
as views of one block), and PyFastPath, used where neither can be had.
The generated wrapper passes the Args-field tensors first, in field order (None for an omitted
one), then the other arguments in call order.
"""

from __future__ import annotations

import ctypes
import threading

import torch

from . import hostext
from .module import ERR_LEN, raise_launch_error
from .module import raw_stream as _raw_stream

_Tensor = torch.Tensor
_empty_strided = torch.empty_strided
_MAX_ENTRIES = 1024  # signatures remembered per family; an engine sees a handful


class FastPath:
    """One family's calls: the checked path's launch (`run`) and the cache of checked calls. `call`
    misses (returns None) until the first checked call picks the implementation, so importing a
    wrapper builds and loads nothing."""

    def __init__(self, module, pointers: list[str], outputs: tuple[int, ...], align: int | None):
        """`pointers`: the Args fields that hold a tensor, in field order; `outputs`: the positions of
        the outputs among them, in return order; `align`: the largest pointer alignment a gate reads,
        None when a gate reads pointers otherwise (then nothing is cached)."""
        self.module, self.pointers, self.outputs, self.align = module, pointers, outputs, align
        self.offsets = tuple((getattr(module.args_type, name).offset, slot) for slot, name in enumerate(pointers))
        self.n_tensors = len(pointers)
        self.impl = None
        self.call = _miss

    def unpack(self, outputs: tuple):
        """What the wrapper returns: its one output, or the tuple of them."""
        return tuple(outputs) if len(self.outputs) > 1 else outputs[0]

    def run(self, key: int, args, outputs: tuple):
        """Launch a checked call (nothing to do when an output is empty) and return its outputs."""
        if all(o.numel() > 0 for o in outputs):
            self.module.launch(key, args, device=outputs[0].device)
        return self.unpack(outputs)

    def remember(self, key: int, args, outputs: tuple, call_args: tuple) -> None:
        """Cache the checked call `call_args` (tensors first) that resolved to `key`, `args`, `outputs`."""
        if self.align is None:
            return
        given = call_args[: self.n_tensors]
        device = outputs[0].device
        if self.impl is None:  # build the C++ call path while the family's own build runs
            threading.Thread(target=hostext.load, daemon=True).start()
        entry, index = self.module.entry_for(device, key)
        allocate = tuple((slot, o) for slot, o in zip(self.outputs, outputs) if given[slot] is None)
        skip = any(o.numel() == 0 for o in outputs)
        plan = (
            key,
            bytes(args),
            self.offsets,
            allocate,
            self.outputs,
            len(self.outputs) > 1,
            skip,
            ctypes.cast(entry, ctypes.c_void_p).value,
            index,
        )
        if self.impl is None:
            ext = hostext.load()
            self.impl = (ext.Family if ext else PyFastPath)(self.n_tensors, self.align, _on_error)
            self.call = self.impl.call
        self.impl.remember(plan, *call_args)


def _miss(*_):
    return None


def _on_error(rc: int, message: bytes) -> None:
    raise_launch_error(rc, message)


def _tensor_key(t, align: int):
    if type(t) is _Tensor:  # subclasses (fake and functional tensors) take the checked path
        return t.dtype, t.shape, t.stride(), t.device, t.data_ptr() % align
    if isinstance(t, _Tensor):
        raise TypeError("not a plain tensor")  # never cached
    return t


class PyFastPath:
    """The C++ path's contract in Python (same signature, same plans), for machines without it."""

    def __init__(self, n_tensors: int, align: int, on_error):
        self.n_tensors, self.align, self.on_error = n_tensors, align, on_error
        self.local = threading.local()  # a plan's Args buffer is patched per call: one per thread

    def _signature(self, args: tuple):
        n, align = self.n_tensors, self.align
        return tuple(_tensor_key(a, align) if i < n else (type(a), a) for i, a in enumerate(args))

    def _plans(self) -> dict:
        plans = getattr(self.local, "plans", None)
        if plans is None:
            plans = self.local.plans = {}
        return plans

    def remember(self, plan: tuple, *args) -> bool:
        try:
            signature = self._signature(args)
            plans = self._plans()
            if len(plans) >= _MAX_ENTRIES:
                plans.clear()
            plans[signature] = _PyPlan(plan)
        except TypeError:  # an argument that cannot be a key (a list, a tensor subclass)
            return False
        return True

    def call(self, *args):
        try:
            plan = self._plans().get(self._signature(args))
        except TypeError:
            return None
        return None if plan is None else plan.run(args, self.on_error)


class _PyPlan:
    __slots__ = ("allocate", "as_tuple", "buf", "cells", "device", "entry", "key", "returns", "skip")

    def __init__(self, plan: tuple):
        key, args, offsets, allocate, self.returns, self.as_tuple, self.skip, entry, self.device = plan
        self.key = key
        self.buf = ctypes.create_string_buffer(args, len(args))
        self.cells = tuple((ctypes.c_void_p.from_buffer(self.buf, off), slot) for off, slot in offsets)
        self.allocate = tuple((slot, tuple(o.shape), o.stride(), o.dtype, o.device) for slot, o in allocate)
        self.entry = ctypes.CFUNCTYPE(
            ctypes.c_int,
            ctypes.c_int64,
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.c_int,
            ctypes.c_char_p,
            ctypes.c_size_t,
        )(entry)

    def run(self, args: tuple, on_error):
        ts = list(args)
        for slot, shape, stride, dtype, device in self.allocate:
            ts[slot] = _empty_strided(shape, stride, dtype=dtype, device=device)
        for cell, slot in self.cells:
            t = ts[slot]
            cell.value = None if t is None else t.data_ptr()
        if not self.skip:
            err = ctypes.create_string_buffer(ERR_LEN)
            rc = self.entry(self.key, self.buf, _raw_stream(self.device), self.device, err, ERR_LEN)
            if rc:
                on_error(rc, err.value)
        if self.as_tuple:
            return tuple(ts[i] for i in self.returns)
        return ts[self.returns[0]]
