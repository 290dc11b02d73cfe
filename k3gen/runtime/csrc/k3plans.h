// What both C++ call paths share (k3host.cpp, built per torch; k3stable.cpp, on torch's stable ABI):
// how a call's scalars are keyed, what a plan holds besides its outputs' layouts, how a plan is read
// and checked, and how a family keeps its plans. One definition, so the two paths can never key or
// keep a call differently. Python's limited API only (the abi3 library includes it); the including
// file includes Python.h first.
#pragma once

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace k3plans {

using Entry = int (*)(int64_t key, const void* args, void* stream, int device, char* err, size_t err_len);
constexpr size_t kErrLen = 1024;
constexpr size_t kMaxPlans = 1024;  // signatures remembered per family; an engine sees a handful
constexpr int kMaxTensors = 16;

enum Tag : int64_t { kNone = 1, kFloat, kInt, kBool, kStr, kTensor };

using Signature = std::vector<int64_t>;

struct SignatureHash {
  size_t operator()(const Signature& v) const noexcept {
    uint64_t h = 1469598103934665603ull;
    for (int64_t x : v) h = (h ^ static_cast<uint64_t>(x)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

// A checked call's plan, but for the layouts of the outputs it allocates (each path describes a
// tensor its own way, so its Plan adds them).
struct Plan {
  int64_t key = 0;
  std::string args;                              // the Args struct's bytes, pointers patched per call
  std::vector<std::pair<size_t, int>> pointers;  // (byte offset in Args, tensor slot)
  std::vector<int> returns;                      // tensor slots returned, in order
  std::vector<PyObject*> strings;                // str scalars (the signature holds only their hash)
  bool as_tuple = false, skip = false;
  Entry entry = nullptr;
  int device = 0;
};

// Appends a scalar's part of a call's signature: its type and value; a str by its hash, kept in
// `strings` (when given) for a hit to compare the value. False for any other type: never cached.
inline bool scalar_signature(PyObject* o, Signature& sig, std::vector<PyObject*>* strings) {
  if (PyFloat_CheckExact(o)) {
    double v = PyFloat_AsDouble(o);
    int64_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    sig.push_back(kFloat);
    sig.push_back(bits);
  } else if (PyBool_Check(o)) {
    sig.push_back(kBool);
    sig.push_back(o == Py_True);
  } else if (PyLong_CheckExact(o)) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || (v == -1 && PyErr_Occurred())) { PyErr_Clear(); return false; }
    sig.push_back(kInt);
    sig.push_back(v);
  } else if (PyUnicode_CheckExact(o)) {
    Py_hash_t h = PyObject_Hash(o);
    if (h == -1) { PyErr_Clear(); return false; }
    sig.push_back(kStr);
    sig.push_back(h);
    if (strings) strings->push_back(o);
  } else {
    return false;
  }
  return true;
}

// Whether a call's str scalars are the plan's values, not only their hashes.
inline bool same_strings(const Plan& plan, PyObject* const* args, Py_ssize_t n, int n_tensors) {
  size_t k = 0;
  for (Py_ssize_t i = n_tensors; i < n; ++i) {
    if (!PyUnicode_CheckExact(args[i])) continue;
    if (k >= plan.strings.size()) return false;
    int eq = PyObject_RichCompareBool(args[i], plan.strings[k++], Py_EQ);
    if (eq != 1) { PyErr_Clear(); return false; }
  }
  return k == plan.strings.size();
}

inline std::vector<int64_t> int_list(PyObject* seq) {
  std::vector<int64_t> v;
  Py_ssize_t n = PySequence_Size(seq);
  if (n < 0) throw std::runtime_error("expected a sequence of ints");
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* item = PySequence_GetItem(seq, i);
    v.push_back(item ? PyLong_AsLongLong(item) : -1);
    Py_XDECREF(item);
  }
  if (PyErr_Occurred()) throw std::runtime_error("expected a sequence of ints");
  return v;
}

inline PyObject* item(PyObject* seq, Py_ssize_t i) {  // a borrowed tuple item, or throws
  PyObject* o = PyTuple_Check(seq) ? PyTuple_GetItem(seq, i) : nullptr;
  if (o == nullptr) throw std::runtime_error("expected a tuple");
  return o;
}

// Reads the plan tuple fastpath.FastPath.remember made from a checked call: (key, args bytes,
// ((offset, slot), ...), ((slot, example output), ...), (return slots...), as_tuple, skip, entry
// address, device index). Sets `outputs` to its (slot, example output) pairs (borrowed), for the path
// to read their layouts. False, with Python's error set, when it is no such tuple; throws when an item
// is malformed.
inline bool read_plan(PyObject* tuple, Plan& plan, PyObject** outputs) {
  PyObject *key, *bytes, *pointers, *returns, *as_tuple, *skip, *entry, *device;
  if (!PyArg_ParseTuple(tuple, "OSOOOOOOO", &key, &bytes, &pointers, outputs, &returns, &as_tuple, &skip, &entry,
                        &device))
    return false;
  plan.key = PyLong_AsLongLong(key);
  plan.args.assign(PyBytes_AsString(bytes), static_cast<size_t>(PyBytes_Size(bytes)));
  for (Py_ssize_t i = 0; i < PyTuple_Size(pointers); ++i) {
    auto p = int_list(item(pointers, i));
    plan.pointers.emplace_back(static_cast<size_t>(p.at(0)), static_cast<int>(p.at(1)));
  }
  for (int64_t s : int_list(returns)) plan.returns.push_back(static_cast<int>(s));
  plan.as_tuple = PyObject_IsTrue(as_tuple);
  plan.skip = PyObject_IsTrue(skip);
  plan.entry = reinterpret_cast<Entry>(PyLong_AsVoidPtr(entry));
  plan.device = static_cast<int>(PyLong_AsLong(device));
  if (PyErr_Occurred()) throw std::runtime_error("a plan item of the wrong type");
  return true;
}

// Throws unless every pointer field lies in the Args bytes and every slot is one of the call's
// n_tensors: a hit writes and reads at these without looking again.
template <class FullPlan>
void check_slots(const FullPlan& plan, int n_tensors) {
  for (const auto& [offset, slot] : plan.pointers)
    if (offset + sizeof(void*) > plan.args.size() || slot < 0 || slot >= n_tensors)
      throw std::runtime_error("pointer field outside Args");
  for (const auto& o : plan.allocate)
    if (o.slot < 0 || o.slot >= n_tensors) throw std::runtime_error("output slot out of range");
  for (int s : plan.returns)
    if (s < 0 || s >= n_tensors) throw std::runtime_error("return slot out of range");
  if (plan.returns.empty() || plan.entry == nullptr) throw std::runtime_error("empty plan");
}

constexpr int64_t kOutputAlign = 256;  // each output starts on this boundary of a call's one block

// Lays out the outputs a plan allocates in one block, each at a kOutputAlign offset of it (o.offset,
// in elements of o's dtype; `item_size(o)` is its element size), and returns the block's bytes (at
// least 1): one trip to torch's allocator per call instead of one per output. Throws for an element
// size that does not divide the alignment.
template <class Outputs, class ItemSize>
int64_t lay_out_block(Outputs& outputs, ItemSize item_size) {
  int64_t bytes = 0;
  for (auto& o : outputs) {
    const int64_t item = static_cast<int64_t>(item_size(o));
    int64_t extent = 1;  // elements from the first to one past the last
    for (size_t d = 0; d < o.sizes.size(); ++d) {
      if (o.sizes[d] == 0) extent = 0;
      if (extent) extent += (o.sizes[d] - 1) * o.strides[d];
    }
    const int64_t start = (bytes + kOutputAlign - 1) / kOutputAlign * kOutputAlign;
    if (item < 1 || start % item) throw std::runtime_error("an output's element size does not divide the block alignment");
    o.offset = start / item;
    bytes = start + extent * item;
  }
  return bytes > 0 ? bytes : 1;
}

// Forgets every plan, releasing its strings.
template <class Plans>
void forget_all(Plans& plans) {
  for (auto& [_, p] : plans)
    for (PyObject* s : p.strings) Py_DECREF(s);
  plans.clear();
}

// Keeps `plan` for `sig`, holding its strings; a family at kMaxPlans forgets every plan first.
template <class Plans>
void keep(Plans& plans, Signature&& sig, typename Plans::mapped_type&& plan) {
  for (PyObject* s : plan.strings) Py_INCREF(s);
  if (plans.size() >= kMaxPlans) forget_all(plans);
  auto [it, inserted] = plans.try_emplace(std::move(sig), std::move(plan));
  if (!inserted) {  // a str scalar of equal hash but another value: keep the first
    for (PyObject* s : plan.strings) Py_DECREF(s);
  }
}

}  // namespace k3plans
