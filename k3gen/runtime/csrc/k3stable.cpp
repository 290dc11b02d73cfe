// k3gen's C++ call path on torch's stable ABI: one binary for every torch from 2.10 on and every
// CPython from 3.10 on (k3gen/runtime/hostabi.py builds, binds and checks it).
//
// The algorithm is k3host.cpp's (fastpath.py states the contract): a call's signature (each
// tensor's dtype, shape, strides, device and data pointer modulo the family's alignment; each
// scalar's type and value) finds the plan its checked call made; a hit allocates the outputs,
// patches their pointers into a copy of the plan's Args bytes and calls the family's C entry on the
// current stream; a miss returns None and the wrapper takes the checked path.
//
// What differs is how it reaches torch and Python, so that nothing in it belongs to one build:
//  - tensors only through torch's stable C shim (aoti_torch_*), targeting 2.10 so that no newer
//    shim slips in; no at::, c10:: or libtorch_python symbol is linked. The C shim itself, not
//    torch::stable::Tensor, which owns each handle through a std::shared_ptr (an allocation per
//    tensor per call) where most handles here are borrowed;
//  - Python only through the limited API (an abi3 module), so one binary loads in 3.10 and later;
//  - what a CPU-only torch lacks (the CUDA/HIP stream) and the two crossings between a Python
//    tensor and a shim handle come as addresses through bind(), looked
//    up in the running torch by hostabi.py. From torch 2.14 the crossings are the stable interop
//    shims (torch_tensor_from_pyobject / _to_pyobject). 2.10-2.13 have none: there a tensor's
//    `_cdata` is its TensorImpl*, which is all an at::Tensor holds, so a pointer to it is a
//    borrowed handle, and THPVariable_Wrap(const at::TensorBase&) makes the Python tensor. Where
//    the tensor object holds its at::Tensor right after the object header (hostabi.py finds the
//    offset), a pointer into the object is the handle and `_cdata` (a Python attribute call) is
//    skipped. Those are facts of four released builds, checked by probe() before the library is
//    used;
//  - GPU outputs come from torch's own CUDA allocation where it exports it (2.10-2.14 do), the one
//    k3host.cpp calls (at::detail::empty_strided_cuda, by address, checked through
//    probe_allocation()): the shim's aoti_torch_empty_strided goes through the dispatcher, which on
//    the H200 cost 0.5 us a call more.
#define PY_SSIZE_T_CLEAN
#define Py_LIMITED_API 0x030A0000
#include <Python.h>

#define TORCH_TARGET_VERSION (((0ULL + 2) << 56) | ((0ULL + 10) << 48))
#include <torch/csrc/inductor/aoti_torch/c/shim.h>

#include "k3plans.h"

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

using k3plans::kErrLen;
using k3plans::kMaxTensors;

// at::detail::empty_strided_cuda(IntArrayRef sizes, IntArrayRef strides, ScalarType, optional<Device>)
// as its callers see it on x86-64 and aarch64, in types of the same layout: an IntArrayRef is
// {data, size}, a ScalarType an int8 enum, an optional<Device> {int8 type, int8 index, bool}, and
// the TensorBase it returns (one owning TensorImpl*, not trivially copyable) comes back through a
// hidden pointer, which a class with a user-provided destructor also does.
struct IntArrayRef {
  const int64_t* data;
  size_t size;
};
struct OptionalDevice {
  int8_t type, index;
  bool engaged;
};
struct OwnedImpl {
  void* impl;
  ~OwnedImpl() {}  // the reference is handed to a shim handle (adopt), never dropped here
};
using EmptyStridedGpu = OwnedImpl (*)(IntArrayRef sizes, IntArrayRef strides, int8_t dtype, OptionalDevice device);

// What bind() was given: the running torch's addresses, none of them linked.
struct Bound {
  PyObject* tensor_type = nullptr;  // torch.Tensor: subclasses (fake, functional) are never keyed
  PyObject* cdata = nullptr;        // interned "_cdata"
  Py_ssize_t cdata_offset = 0;      // where a tensor object holds its at::Tensor; 0: read `_cdata`
  AOTITorchError (*from_py)(void* obj, AtenTensorHandle* ret) = nullptr;        // torch >= 2.14
  AOTITorchError (*to_py)(AtenTensorHandle t, void* type, void** ret) = nullptr;  // torch >= 2.14
  PyObject* (*wrap)(const void* tensor_base) = nullptr;                        // torch 2.10-2.13
  AOTITorchError (*gpu_stream)(int32_t device, void** stream) = nullptr;
  EmptyStridedGpu empty_gpu = nullptr;  // torch's own CUDA allocation; else outputs come from the shim
  int32_t cpu = 0, gpu = 1, byte = 0;
  bool ready = false;
} g;

// The call's tensor handles: borrowed (pointing at `impls`) on 2.10-2.13, owned from 2.14 on.
struct Handles {
  AtenTensorHandle h[kMaxTensors] = {};
  void* impls[kMaxTensors] = {};
  void* data[kMaxTensors] = {};
  ~Handles() {
    if (g.from_py)
      for (AtenTensorHandle t : h)
        if (t) aoti_torch_delete_tensor_object(t);
  }
};

// Tensors this call made (its outputs and the block they were cut from), deleted with it once
// Python holds its own references.
struct Made {
  AtenTensorHandle h[kMaxTensors] = {};
  AtenTensorHandle block = nullptr;
  ~Made() {
    for (AtenTensorHandle t : h)
      if (t) aoti_torch_delete_tensor_object(t);
    if (block) aoti_torch_delete_tensor_object(block);
  }
};

// A shim handle for the plain torch.Tensor `o`; nullptr for anything else (then nothing is keyed).
AtenTensorHandle handle_of(PyObject* o, void** impl) {
  if (Py_TYPE(o) != reinterpret_cast<PyTypeObject*>(g.tensor_type)) return nullptr;
  if (g.from_py) {
    AtenTensorHandle h = nullptr;
    return g.from_py(o, &h) == AOTI_TORCH_SUCCESS ? h : nullptr;
  }
  if (g.cdata_offset) return reinterpret_cast<AtenTensorHandle>(reinterpret_cast<char*>(o) + g.cdata_offset);
  PyObject* c = PyObject_GetAttr(o, g.cdata);
  if (c == nullptr) { PyErr_Clear(); return nullptr; }
  *impl = PyLong_AsVoidPtr(c);
  Py_DECREF(c);
  if (*impl == nullptr) { PyErr_Clear(); return nullptr; }
  return reinterpret_cast<AtenTensorHandle>(impl);
}

// A new reference to a Python tensor for `t` (which stays the caller's), or nullptr with an error set.
PyObject* to_python(AtenTensorHandle t) {
  PyObject* r = nullptr;
  try {
    if (g.to_py) {
      void* o = nullptr;
      if (g.to_py(t, nullptr, &o) == AOTI_TORCH_SUCCESS) r = static_cast<PyObject*>(o);
    } else {
      r = g.wrap(t);  // an AtenTensorHandle points at an at::Tensor, whose base is the TensorBase
    }
  } catch (...) {
    r = nullptr;
  }
  if (r == nullptr && !PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "k3gen: torch could not wrap an output");
  return r;
}

struct Output {
  int slot;
  std::vector<int64_t> sizes, strides;
  int32_t dtype;
  int64_t offset = 0;  // in elements, into the call's one output block
};

struct Plan : k3plans::Plan {
  std::vector<Output> allocate;  // outputs the caller did not pass
  int64_t block_bytes = 0;       // all outputs of a call, in one allocation
  int32_t device_type = 0;
};

using Plans = std::unordered_map<k3plans::Signature, Plan, k3plans::SignatureHash>;

struct Family {
  PyObject_HEAD
  int n_tensors;
  int64_t align;
  PyObject* on_error;  // on_error(rc, message: bytes) raises the wrapper's error
  Plans* plans;
};

// Appends one tensor's part of a signature; false when the shim cannot describe it (sparse, no storage).
bool tensor_signature(AtenTensorHandle h, int64_t align, std::vector<int64_t>& sig, void** data) {
  int32_t dtype, device_type, device_index;
  int64_t dim;
  int64_t *sizes, *strides;
  if (aoti_torch_get_dtype(h, &dtype) || aoti_torch_get_device_type(h, &device_type) ||
      aoti_torch_get_device_index(h, &device_index) || aoti_torch_get_dim(h, &dim) ||
      aoti_torch_get_sizes(h, &sizes) || aoti_torch_get_strides(h, &strides) || aoti_torch_get_data_ptr(h, data))
    return false;
  sig.push_back(k3plans::kTensor);
  sig.push_back(dtype);
  sig.push_back(static_cast<int64_t>(device_type) * 256 + device_index);
  sig.push_back(dim);
  sig.insert(sig.end(), sizes, sizes + dim);
  sig.insert(sig.end(), strides, strides + dim);
  sig.push_back(static_cast<int64_t>(reinterpret_cast<uintptr_t>(*data) % align));
  return true;
}

// Appends the call's signature; false when it cannot be keyed (a tensor subclass, another type).
bool signature(const Family* f, PyObject* const* args, Py_ssize_t n, std::vector<int64_t>& sig, Handles& hs,
               std::vector<PyObject*>* strings) {
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* o = args[i];
    if (o == Py_None) {
      sig.push_back(k3plans::kNone);
    } else if (i < f->n_tensors) {
      hs.h[i] = handle_of(o, &hs.impls[i]);
      if (hs.h[i] == nullptr || !tensor_signature(hs.h[i], f->align, sig, &hs.data[i])) return false;
    } else if (!k3plans::scalar_signature(o, sig, strings)) {
      return false;
    }
  }
  return true;
}

// An owned shim handle of the tensor `owned` holds: an AtenTensorHandle is a heap at::Tensor, which is
// its TensorImpl* alone, and aoti_torch_delete_tensor_object deletes it as one.
AtenTensorHandle adopt(OwnedImpl owned) {
  return reinterpret_cast<AtenTensorHandle>(new void*(owned.impl));
}

// A new tensor of `dtype` with the given layout on GPU `device`, by torch's own CUDA allocation where
// bind() was given it, else through the shim; false when torch refused (out of memory).
bool empty(int64_t dim, const int64_t* sizes, const int64_t* strides, int32_t dtype, int32_t device_type,
           int32_t device, AtenTensorHandle* ret) {
  if (g.empty_gpu && device_type == g.gpu) {
    try {
      *ret = adopt(g.empty_gpu({sizes, static_cast<size_t>(dim)}, {strides, static_cast<size_t>(dim)},
                               static_cast<int8_t>(dtype),
                               {static_cast<int8_t>(device_type), static_cast<int8_t>(device), true}));
      return true;
    } catch (...) {
      return false;
    }
  }
  return !aoti_torch_empty_strided(dim, sizes, strides, dtype, device_type, device, ret);
}

// The outputs the caller did not pass, with the checked layouts, cut from one allocation as in
// k3host.cpp: the block in bytes, then each output a tensor of its storage at its offset with its
// dtype (_alloc_from_pool, AOTI's own planned-memory cut: no dispatcher). The outputs share the
// block's storage, so the caching allocator owns it and record_stream on any output holds it.
// False when torch refused (out of memory).
bool allocate(const Plan& p, Made& made) {
  if (p.allocate.empty()) return true;
  if (p.allocate.size() == 1) {  // no block to cut: the output itself
    const Output& o = p.allocate[0];
    return empty(static_cast<int64_t>(o.sizes.size()), o.sizes.data(), o.strides.data(), o.dtype, p.device_type,
                 p.device, &made.h[o.slot]);
  }
  const int64_t one = 1;
  if (!empty(1, &p.block_bytes, &one, g.byte, p.device_type, p.device, &made.block)) return false;
  for (const Output& o : p.allocate)
    if (aoti_torch__alloc_from_pool(made.block, o.offset * static_cast<int64_t>(aoti_torch_dtype_element_size(o.dtype)),
                                    o.dtype, static_cast<int64_t>(o.sizes.size()), o.sizes.data(), o.strides.data(),
                                    &made.h[o.slot]))
      return false;
  return true;
}

// family.call(*tensors, *scalars): the outputs (a tensor or a tuple), or None when not cached.
PyObject* family_call(PyObject* self, PyObject* const* args, Py_ssize_t n) {
  auto* f = reinterpret_cast<Family*>(self);
  if (n < f->n_tensors || f->n_tensors > kMaxTensors) Py_RETURN_NONE;
  thread_local std::vector<int64_t> sig;
  sig.clear();
  Handles hs;
  if (!signature(f, args, n, sig, hs, nullptr)) Py_RETURN_NONE;
  auto it = f->plans->find(sig);
  if (it == f->plans->end()) Py_RETURN_NONE;
  const Plan& plan = it->second;
  if (!plan.strings.empty() && !k3plans::same_strings(plan, args, n, f->n_tensors)) Py_RETURN_NONE;

  Made made;
  if (!allocate(plan, made)) Py_RETURN_NONE;  // the checked path allocates again and raises torch's error
  const void* ptrs[kMaxTensors];
  for (int i = 0; i < f->n_tensors; ++i) {
    void* p = hs.data[i];
    if (made.h[i] && aoti_torch_get_data_ptr(made.h[i], &p)) Py_RETURN_NONE;
    ptrs[i] = p;
  }
  if (!plan.skip) {
    alignas(16) char buf[512];
    std::string big;
    char* a = buf;
    if (plan.args.size() > sizeof buf) { big = plan.args; a = big.data(); }
    else std::memcpy(buf, plan.args.data(), plan.args.size());
    for (const auto& [offset, slot] : plan.pointers) std::memcpy(a + offset, &ptrs[slot], sizeof(void*));
    void* stream = nullptr;
    if (plan.device_type != g.cpu && g.gpu_stream(plan.device, &stream)) Py_RETURN_NONE;
    char err[kErrLen] = {0};
    int rc = plan.entry(plan.key, a, stream, plan.device, err, kErrLen);
    if (rc != 0) {
      PyObject* r = PyObject_CallFunction(f->on_error, "iy", rc, err);  // raises
      Py_XDECREF(r);
      return nullptr;
    }
  }
  auto result_of = [&](int slot) -> PyObject* {
    if (made.h[slot]) return to_python(made.h[slot]);
    Py_INCREF(args[slot]);
    return args[slot];
  };
  if (!plan.as_tuple) return result_of(plan.returns[0]);
  PyObject* out = PyTuple_New(static_cast<Py_ssize_t>(plan.returns.size()));
  if (out == nullptr) return nullptr;
  for (size_t i = 0; i < plan.returns.size(); ++i) {
    PyObject* t = result_of(plan.returns[i]);
    if (t == nullptr || PyTuple_SetItem(out, static_cast<Py_ssize_t>(i), t) < 0) { Py_DECREF(out); return nullptr; }
  }
  return out;
}

// The layout of an example output (from the checked call) that a hit allocates again.
Output output_of(int slot, PyObject* example) {
  void* impl = nullptr;
  AtenTensorHandle h = handle_of(example, &impl);
  if (h == nullptr) throw std::runtime_error("an output example must be a plain tensor");
  Output o{slot, {}, {}, 0};
  int64_t dim;
  int64_t *sizes, *strides;
  bool ok = !aoti_torch_get_dim(h, &dim) && !aoti_torch_get_sizes(h, &sizes) && !aoti_torch_get_strides(h, &strides) &&
            !aoti_torch_get_dtype(h, &o.dtype);
  if (ok) {
    o.sizes.assign(sizes, sizes + dim);
    o.strides.assign(strides, strides + dim);
  }
  if (g.from_py) aoti_torch_delete_tensor_object(h);
  if (!ok) throw std::runtime_error("an output example torch cannot describe");
  return o;
}

// family.remember(plan, *tensors, *scalars): cache `plan` (made by fastpath.FastPath.remember from
// a checked call) for this call's signature. A call that cannot be keyed is not remembered.
PyObject* family_remember(PyObject* self, PyObject* const* args, Py_ssize_t n) {
  auto* f = reinterpret_cast<Family*>(self);
  if (n < 1 + f->n_tensors || f->n_tensors > kMaxTensors) {
    PyErr_SetString(PyExc_TypeError, "remember(plan, *tensors, *scalars)");
    return nullptr;
  }
  k3plans::Signature sig;
  Handles hs;
  Plan plan;
  if (f->align > k3plans::kOutputAlign) Py_RETURN_FALSE;  // outputs in the block are only this aligned
  if (!signature(f, args + 1, n - 1, sig, hs, &plan.strings)) Py_RETURN_FALSE;
  // The device every tensor of the call is on (the checked path made sure): where outputs go.
  AtenTensorHandle first = nullptr;
  for (AtenTensorHandle h : hs.h)
    if (h && !first) first = h;
  if (first == nullptr || aoti_torch_get_device_type(first, &plan.device_type)) Py_RETURN_FALSE;
  if (plan.device_type != g.cpu && (plan.device_type != g.gpu || g.gpu_stream == nullptr)) Py_RETURN_FALSE;
  try {
    PyObject* outputs;
    if (!k3plans::read_plan(args[0], plan, &outputs)) return nullptr;
    for (Py_ssize_t i = 0; i < PyTuple_Size(outputs); ++i) {
      PyObject* o = k3plans::item(outputs, i);
      plan.allocate.push_back(output_of(static_cast<int>(PyLong_AsLong(k3plans::item(o, 0))), k3plans::item(o, 1)));
    }
    if (PyErr_Occurred()) return nullptr;
    plan.block_bytes = k3plans::lay_out_block(plan.allocate, [](const Output& o) { return aoti_torch_dtype_element_size(o.dtype); });
    k3plans::check_slots(plan, f->n_tensors);
  } catch (const std::exception& e) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, e.what());
    return nullptr;
  }
  k3plans::keep(*f->plans, std::move(sig), std::move(plan));
  Py_RETURN_TRUE;
}

PyObject* family_len(PyObject* self, PyObject*) {
  return PyLong_FromSize_t(reinterpret_cast<Family*>(self)->plans->size());
}

int family_init(PyObject* self, PyObject* args, PyObject* kwargs) {
  auto* f = reinterpret_cast<Family*>(self);
  static const char* names[] = {"n_tensors", "align", "on_error", nullptr};
  PyObject* on_error;
  if (!g.ready) {
    PyErr_SetString(PyExc_RuntimeError, "_k3stable.bind() first");
    return -1;
  }
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "iLO", const_cast<char**>(names), &f->n_tensors, &f->align,
                                   &on_error))
    return -1;
  if (f->n_tensors < 0 || f->n_tensors > kMaxTensors || f->align < 1) {
    PyErr_SetString(PyExc_ValueError, "n_tensors in [0, 16] and align >= 1");
    return -1;
  }
  Py_INCREF(on_error);
  PyObject* old = f->on_error;
  f->on_error = on_error;
  Py_XDECREF(old);
  if (f->plans == nullptr) f->plans = new Plans();
  return 0;
}

void family_dealloc(PyObject* self) {
  auto* f = reinterpret_cast<Family*>(self);
  if (f->plans) {
    k3plans::forget_all(*f->plans);
    delete f->plans;
  }
  Py_XDECREF(f->on_error);
  PyTypeObject* type = Py_TYPE(self);
  reinterpret_cast<freefunc>(PyType_GetSlot(type, Py_tp_free))(self);
  Py_DECREF(type);  // a heap type: each instance holds a reference to it
}

PyMethodDef family_methods[] = {
    {"call", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(family_call)), METH_FASTCALL,
     "call(*tensors, *scalars): the outputs, or None when this signature was not checked before"},
    {"remember", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(family_remember)), METH_FASTCALL,
     "remember(plan, *tensors, *scalars): cache a checked call's plan for its signature"},
    {"cached", family_len, METH_NOARGS, "how many signatures are cached"},
    {nullptr, nullptr, 0, nullptr}};

PyType_Slot family_slots[] = {
    {Py_tp_new, reinterpret_cast<void*>(PyType_GenericNew)},
    {Py_tp_init, reinterpret_cast<void*>(family_init)},
    {Py_tp_dealloc, reinterpret_cast<void*>(family_dealloc)},
    {Py_tp_methods, family_methods},
    {Py_tp_doc, const_cast<char*>("Plans of one family's checked calls, keyed by call signature")},
    {0, nullptr}};

PyType_Spec family_spec = {"_k3stable.Family", sizeof(Family), 0, Py_TPFLAGS_DEFAULT, family_slots};

template <typename T>
T address(unsigned long long a) {
  return reinterpret_cast<T>(static_cast<uintptr_t>(a));
}

// bind(torch.Tensor, from_py, to_py, wrap, gpu_stream, empty_gpu, cdata_offset): the running torch's
// addresses (0 where it has none) and where its tensor objects hold their at::Tensor (0: unknown).
// Either both interop shims or THPVariable_Wrap.
PyObject* bind(PyObject*, PyObject* args) {
  PyObject* tensor_type;
  unsigned long long from_py, to_py, wrap, stream, empty_gpu;
  Py_ssize_t cdata_offset;
  if (!PyArg_ParseTuple(args, "OKKKKKn", &tensor_type, &from_py, &to_py, &wrap, &stream, &empty_gpu, &cdata_offset))
    return nullptr;
  if (!PyType_Check(tensor_type) || !((from_py && to_py && !wrap) || (!from_py && !to_py && wrap)) ||
      cdata_offset < 0 || (cdata_offset && from_py)) {
    PyErr_SetString(PyExc_ValueError,
                    "bind(torch.Tensor, ...): either both interop shims or THPVariable_Wrap (and an offset only with it)");
    return nullptr;
  }
  Py_INCREF(tensor_type);
  Py_XDECREF(g.tensor_type);
  g.tensor_type = tensor_type;
  g.from_py = address<decltype(g.from_py)>(from_py);
  g.to_py = address<decltype(g.to_py)>(to_py);
  g.wrap = address<decltype(g.wrap)>(wrap);
  g.gpu_stream = address<decltype(g.gpu_stream)>(stream);
  g.empty_gpu = address<decltype(g.empty_gpu)>(empty_gpu);
  g.cdata_offset = cdata_offset;
  g.cpu = aoti_torch_device_type_cpu();
  g.gpu = aoti_torch_device_type_cuda();  // HIP torch calls its devices cuda too
  g.byte = aoti_torch_dtype_uint8();
  g.ready = true;
  Py_RETURN_NONE;
}

// probe(tensor): (sizes, strides, data pointer, a new Python tensor on the same memory), read and
// made through the bound crossings, for hostabi.py to compare with what Python says of the tensor.
PyObject* probe(PyObject*, PyObject* t) {
  if (!g.ready) {
    PyErr_SetString(PyExc_RuntimeError, "_k3stable.bind() first");
    return nullptr;
  }
  Handles hs;
  std::vector<int64_t> sig;
  hs.h[0] = handle_of(t, &hs.impls[0]);
  if (hs.h[0] == nullptr || !tensor_signature(hs.h[0], 1, sig, &hs.data[0])) {
    PyErr_SetString(PyExc_ValueError, "probe(tensor): not a tensor the shim can describe");
    return nullptr;
  }
  const int64_t dim = sig[3];
  std::vector<int64_t> sizes(sig.begin() + 4, sig.begin() + 4 + dim), strides(sig.begin() + 4 + dim, sig.end() - 1);
  Made made;
  if (aoti_torch__reinterpret_tensor(hs.h[0], dim, sizes.data(), strides.data(), 0, &made.h[0])) {
    PyErr_SetString(PyExc_RuntimeError, "probe(tensor): torch could not make a view");
    return nullptr;
  }
  PyObject* view = to_python(made.h[0]);
  if (view == nullptr) return nullptr;
  PyObject* s = PyTuple_New(dim);
  PyObject* st = PyTuple_New(dim);
  for (int64_t d = 0; s && st && d < dim; ++d) {
    PyTuple_SetItem(s, d, PyLong_FromLongLong(sizes[d]));
    PyTuple_SetItem(st, d, PyLong_FromLongLong(strides[d]));
  }
  PyObject* ptr = PyLong_FromVoidPtr(hs.data[0]);
  PyObject* r = (s && st && ptr) ? PyTuple_Pack(4, s, st, ptr, view) : nullptr;
  Py_XDECREF(s);
  Py_XDECREF(st);
  Py_XDECREF(ptr);
  Py_DECREF(view);
  return r;
}

// probe_allocation(device, sizes, strides): a new float32 Python tensor allocated as a call allocates
// an output on GPU `device`, for hostabi.py to compare with what was asked.
PyObject* probe_allocation(PyObject*, PyObject* args) {
  int device;
  PyObject *sizes_o, *strides_o;
  if (!PyArg_ParseTuple(args, "iO!O!", &device, &PyTuple_Type, &sizes_o, &PyTuple_Type, &strides_o)) return nullptr;
  const Py_ssize_t dim = PyTuple_Size(sizes_o);
  if (!g.ready || dim != PyTuple_Size(strides_o) || dim > 8) {
    PyErr_SetString(PyExc_ValueError, "probe_allocation: bind() first; sizes and strides of one rank <= 8");
    return nullptr;
  }
  int64_t sizes[8], strides[8];
  for (Py_ssize_t d = 0; d < dim; ++d) {
    sizes[d] = PyLong_AsLongLong(PyTuple_GetItem(sizes_o, d));
    strides[d] = PyLong_AsLongLong(PyTuple_GetItem(strides_o, d));
  }
  if (PyErr_Occurred()) return nullptr;
  Made made;
  if (!empty(dim, sizes, strides, aoti_torch_dtype_float32(), g.gpu, device, &made.h[0])) {
    PyErr_SetString(PyExc_RuntimeError, "probe_allocation: torch could not allocate");
    return nullptr;
  }
  return to_python(made.h[0]);
}

// allocation(): how a call's GPU outputs are allocated: "torch" (its own CUDA allocation) or "shim".
PyObject* allocation(PyObject*, PyObject*) { return PyUnicode_FromString(g.empty_gpu ? "torch" : "shim"); }

PyMethodDef module_methods[] = {
    {"bind", bind, METH_VARARGS,
     "bind(torch.Tensor, from_py, to_py, wrap, gpu_stream, empty_gpu, cdata_offset): the running torch's addresses"},
    {"probe", probe, METH_O, "probe(tensor): (sizes, strides, data pointer, a view made through the shim)"},
    {"allocation", allocation, METH_NOARGS, "allocation(): \"torch\" (its own CUDA allocation) or \"shim\""},
    {"probe_allocation", probe_allocation, METH_VARARGS,
     "probe_allocation(device, sizes, strides): a float32 GPU tensor allocated as a call's output is"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_k3stable", "k3gen's C++ call path on torch's stable ABI", -1,
                          module_methods};

}  // namespace

PyMODINIT_FUNC PyInit__k3stable() {
  g.cdata = PyUnicode_InternFromString("_cdata");
  PyObject* m = PyModule_Create(&module_def);
  if (m == nullptr) return nullptr;
  PyObject* type = PyType_FromSpec(&family_spec);
  if (type == nullptr || PyModule_AddObjectRef(m, "Family", type) < 0) {
    Py_XDECREF(type);
    Py_DECREF(m);
    return nullptr;
  }
  Py_DECREF(type);
  return m;
}
