// The steady state of a generated wrapper call, in C++: signature, lookup, outputs, launch.
//
// k3gen/runtime/fastpath.py explains the contract; this is the same algorithm as its Python
// fallback (PyFastPath), without the interpreter: a call's signature (each tensor's dtype, shape,
// strides, device and data pointer modulo the family's alignment; each scalar's type and value)
// finds the plan the checked path (the generated `_resolve`) made for it; a hit allocates the
// outputs (one allocation from torch's CUDA caching allocator, each output a tensor at a 256-byte
// aligned offset of it), patches the data pointers into a copy of the plan's Args
// bytes and calls the family's C entry on the current stream. A miss returns None and the wrapper
// takes the checked path, so nothing is ever served that was not checked for this signature.
//
// Headers: only TensorBase and the CUDA empty-tensor helper (about 3 s to compile), never
// torch/extension.h or pybind11; the two torch_python symbols needed are declared here.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <ATen/core/TensorBase.h>
#include <c10/core/ScalarType.h>
#include <ATen/cuda/EmptyTensor.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "k3plans.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

PyObject* THPVariable_Wrap(const at::TensorBase& var);  // torch/csrc/autograd/python_variable.h
extern PyObject* THPVariableClass;                       // torch.Tensor

namespace {

using k3plans::kErrLen;
using k3plans::kMaxTensors;

struct Output {
  int slot;
  std::vector<int64_t> sizes, strides;
  c10::ScalarType dtype;
  int64_t offset = 0;  // in elements, into the call's one output block
};

struct Plan : k3plans::Plan {
  std::vector<Output> allocate;  // outputs the caller did not pass
  int64_t block_bytes = 0;       // all outputs of a call, in one allocation
};

using Plans = std::unordered_map<k3plans::Signature, Plan, k3plans::SignatureHash>;

struct Family {
  PyObject_HEAD
  int n_tensors;
  int64_t align;
  PyObject* on_error;  // on_error(rc, message: bytes) raises the wrapper's error
  Plans* plans;
};

PyObject* g_cdata;  // interned "_cdata": a tensor's TensorImpl* as an int

// A plain torch.Tensor's TensorImpl (through its `_cdata`); nullptr for anything else.
c10::TensorImpl* impl_of(PyObject* o) {
  if (Py_TYPE(o) != reinterpret_cast<PyTypeObject*>(THPVariableClass)) return nullptr;
  PyObject* cdata = PyObject_GetAttr(o, g_cdata);
  if (cdata == nullptr) { PyErr_Clear(); return nullptr; }
  auto* t = static_cast<c10::TensorImpl*>(PyLong_AsVoidPtr(cdata));
  Py_DECREF(cdata);
  if (t == nullptr) PyErr_Clear();
  return t;
}

// Appends the call's signature; false when it cannot be keyed (a tensor subclass, another type).
bool signature(const Family* f, PyObject* const* args, Py_ssize_t n, std::vector<int64_t>& sig,
               c10::TensorImpl** impls, std::vector<PyObject*>* strings) {
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* o = args[i];
    if (o == Py_None) {
      sig.push_back(k3plans::kNone);
      if (i < f->n_tensors) impls[i] = nullptr;
    } else if (i < f->n_tensors) {
      c10::TensorImpl* t = impl_of(o);
      if (t == nullptr) return false;
      impls[i] = t;
      try {
        c10::Device d = t->device();
        sig.push_back(k3plans::kTensor);
        sig.push_back(static_cast<int64_t>(t->dtype().toScalarType()));
        sig.push_back(static_cast<int64_t>(d.type()) * 256 + d.index());
        sig.push_back(t->dim());
        for (int64_t s : t->sizes()) sig.push_back(s);
        for (int64_t s : t->strides()) sig.push_back(s);
        sig.push_back(static_cast<int64_t>(reinterpret_cast<uintptr_t>(t->data()) % f->align));
      } catch (...) {  // sizes or data a plain tensor does not have (meta, custom policies)
        return false;
      }
    } else if (!k3plans::scalar_signature(o, sig, strings)) {
      return false;
    }
  }
  return true;
}

// family.call(*tensors, *scalars): the outputs (a tensor or a tuple), or None when not cached.
PyObject* family_call(PyObject* self, PyObject* const* args, Py_ssize_t n) {
  auto* f = reinterpret_cast<Family*>(self);
  if (n < f->n_tensors || f->n_tensors > kMaxTensors) Py_RETURN_NONE;
  thread_local std::vector<int64_t> sig;
  sig.clear();
  c10::TensorImpl* impls[kMaxTensors];
  if (!signature(f, args, n, sig, impls, nullptr)) Py_RETURN_NONE;
  auto it = f->plans->find(sig);
  if (it == f->plans->end()) Py_RETURN_NONE;
  const Plan& plan = it->second;
  if (!plan.strings.empty() && !k3plans::same_strings(plan, args, n, f->n_tensors)) Py_RETURN_NONE;

  at::TensorBase made[kMaxTensors];
  const void* ptrs[kMaxTensors];
  try {
    for (int i = 0; i < f->n_tensors; ++i) ptrs[i] = impls[i] ? impls[i]->data() : nullptr;
    if (!plan.allocate.empty()) {
      // One allocation holds every output the caller did not pass, each a tensor of its own at an
      // aligned offset: one trip to the caching allocator instead of one per output.
      at::TensorBase block = at::detail::empty_strided_cuda({plan.block_bytes}, {1}, c10::ScalarType::Byte,
                                                            c10::Device(c10::DeviceType::CUDA, plan.device));
      for (const Output& o : plan.allocate) {
        c10::Storage storage = block.storage();
        made[o.slot] = at::detail::make_tensor_base<c10::TensorImpl>(
            std::move(storage), c10::DispatchKeySet(c10::DispatchKey::CUDA), caffe2::TypeMeta::fromScalarType(o.dtype));
        made[o.slot].unsafeGetTensorImpl()->set_sizes_and_strides(o.sizes, o.strides, o.offset);
        ptrs[o.slot] = made[o.slot].const_data_ptr();
      }
    }
    if (!plan.skip) {
      alignas(16) char buf[512];
      std::string big;
      char* a = buf;
      if (plan.args.size() > sizeof buf) { big = plan.args; a = big.data(); }
      else std::memcpy(buf, plan.args.data(), plan.args.size());
      for (const auto& [offset, slot] : plan.pointers) std::memcpy(a + offset, &ptrs[slot], sizeof(void*));
      c10::Device dev(c10::DeviceType::CUDA, plan.device);
      void* stream = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(dev).native_handle();
      char err[kErrLen] = {0};
      int rc = plan.entry(plan.key, a, stream, plan.device, err, kErrLen);
      if (rc != 0) {
        PyObject* r = PyObject_CallFunction(f->on_error, "iy", rc, err);  // raises
        Py_XDECREF(r);
        return nullptr;
      }
    }
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
  auto result_of = [&](int slot) -> PyObject* {
    if (made[slot].defined()) return THPVariable_Wrap(made[slot]);
    Py_INCREF(args[slot]);
    return args[slot];
  };
  if (!plan.as_tuple) return result_of(plan.returns[0]);
  PyObject* out = PyTuple_New(static_cast<Py_ssize_t>(plan.returns.size()));
  if (out == nullptr) return nullptr;
  for (size_t i = 0; i < plan.returns.size(); ++i) {
    PyObject* t = result_of(plan.returns[i]);
    if (t == nullptr) { Py_DECREF(out); return nullptr; }
    PyTuple_SET_ITEM(out, static_cast<Py_ssize_t>(i), t);
  }
  return out;
}

// family.remember(plan, *tensors, *scalars): cache `plan` (made by fastpath.make_plan from a
// checked call) for this call's signature. A call that cannot be keyed is not remembered.
PyObject* family_remember(PyObject* self, PyObject* const* args, Py_ssize_t n) {
  auto* f = reinterpret_cast<Family*>(self);
  if (n < 1 + f->n_tensors || f->n_tensors > kMaxTensors) {
    PyErr_SetString(PyExc_TypeError, "remember(plan, *tensors, *scalars)");
    return nullptr;
  }
  std::vector<int64_t> sig;
  c10::TensorImpl* impls[kMaxTensors];
  Plan plan;
  if (f->align > k3plans::kOutputAlign) Py_RETURN_FALSE;  // outputs in the block are only this aligned
  if (!signature(f, args + 1, n - 1, sig, impls, &plan.strings)) Py_RETURN_FALSE;
  try {
    PyObject* outputs;
    if (!k3plans::read_plan(args[0], plan, &outputs)) return nullptr;
    for (Py_ssize_t i = 0; i < PyTuple_Size(outputs); ++i) {
      PyObject* o = k3plans::item(outputs, i);
      c10::TensorImpl* t = impl_of(k3plans::item(o, 1));
      if (t == nullptr) throw std::runtime_error("an output example must be a plain tensor");
      plan.allocate.push_back({static_cast<int>(PyLong_AsLong(k3plans::item(o, 0))), t->sizes().vec(),
                               t->strides().vec(), t->dtype().toScalarType()});
    }
    if (PyErr_Occurred()) return nullptr;
    plan.block_bytes = k3plans::lay_out_block(plan.allocate, [](const Output& o) { return c10::elementSize(o.dtype); });
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
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "iLO", const_cast<char**>(names), &f->n_tensors, &f->align,
                                   &on_error))
    return -1;
  if (f->n_tensors < 0 || f->n_tensors > kMaxTensors || f->align < 1) {
    PyErr_SetString(PyExc_ValueError, "n_tensors in [0, 16] and align >= 1");
    return -1;
  }
  Py_INCREF(on_error);
  Py_XSETREF(f->on_error, on_error);
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
  Py_TYPE(self)->tp_free(self);
}

PyMethodDef family_methods[] = {
    {"call", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(family_call)), METH_FASTCALL,
     "call(*tensors, *scalars): the outputs, or None when this signature was not checked before"},
    {"remember", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(family_remember)), METH_FASTCALL,
     "remember(plan, *tensors, *scalars): cache a checked call's plan for its signature"},
    {"cached", family_len, METH_NOARGS, "how many signatures are cached"},
    {nullptr, nullptr, 0, nullptr}};

PyTypeObject FamilyType = {PyVarObject_HEAD_INIT(nullptr, 0)};

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_k3host", "k3gen's C++ call path", -1, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__k3host() {
  FamilyType.tp_name = "_k3host.Family";
  FamilyType.tp_basicsize = sizeof(Family);
  FamilyType.tp_flags = Py_TPFLAGS_DEFAULT;
  FamilyType.tp_new = PyType_GenericNew;
  FamilyType.tp_init = family_init;
  FamilyType.tp_dealloc = family_dealloc;
  FamilyType.tp_methods = family_methods;
  FamilyType.tp_doc = "Plans of one family's checked calls, keyed by call signature";
  if (PyType_Ready(&FamilyType) < 0) return nullptr;
  g_cdata = PyUnicode_InternFromString("_cdata");
  PyObject* m = PyModule_Create(&module_def);
  if (m == nullptr) return nullptr;
  Py_INCREF(&FamilyType);
  if (PyModule_AddObject(m, "Family", reinterpret_cast<PyObject*>(&FamilyType)) < 0) {
    Py_DECREF(&FamilyType);
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
