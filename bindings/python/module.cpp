// The module initializer, the exception mapping and the conversions shared by the binding files.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <fmt/format.h>

#include <cstring>
#include <limits>
#include <span>

#include "pagedkv/core/error.h"
#include "pagedkv/prefix/block_hasher.h"
#include "pagedkv/version.h"
#include "fast_path.h"
#include "py_common.h"

namespace pagedkv::python {

void register_errors(py::module_& m) {
  // pybind11 tries translators newest first, so the base class is registered before its
  // subclasses: a UsageError must not be caught as a plain Error.
  auto& base = py::register_exception<Error>(m, "Error", PyExc_RuntimeError);
  base.doc() = "Base class of every exception pagedkv raises.";
  auto& usage = py::register_exception<UsageError>(m, "UsageError", base.ptr());
  usage.doc() = "The caller broke an API contract (double free, unknown request, zero-token allocation).";
  auto& config = py::register_exception<ConfigError>(m, "ConfigError", base.ptr());
  config.doc() = "A configuration value is out of range or inconsistent.";
  auto& format = py::register_exception<FormatError>(m, "FormatError", base.ptr());
  format.doc() = "An input file or record is malformed.";
  auto& invariant = py::register_exception<InvariantError>(m, "InvariantError", base.ptr());
  invariant.doc() = "An internal invariant does not hold: a bug in pagedkv, reported by a checker.";
  remember_error_types(base.ptr(), usage.ptr(), config.ptr(), format.ptr(), invariant.ptr());
}

namespace {

TokenId checked_token(long long v, const char* what, size_t index) {
  if (v < std::numeric_limits<TokenId>::min() || v > std::numeric_limits<TokenId>::max())
    throw UsageError(fmt::format("{}: token id {} at index {} does not fit in int32", what, v, index));
  return static_cast<TokenId>(v);
}

}  // namespace

void append_tokens(const py::handle& obj, const char* what, std::vector<TokenId>& out) {
  // NumPy arrays (and anything else exporting an integer buffer) are read without a Python
  // object per element; int32 is copied in one memcpy.
  if (py::isinstance<py::array>(obj)) {
    auto arr = py::reinterpret_borrow<py::array>(obj);
    if (arr.ndim() != 1)
      throw UsageError(fmt::format("{}: expected a 1-D array of token ids, got {} dimensions", what, arr.ndim()));
    if (arr.dtype().kind() != 'i' && arr.dtype().kind() != 'u')
      throw UsageError(fmt::format("{}: expected an integer array of token ids, got dtype '{}'", what,
                                   std::string(py::str(arr.dtype()))));
    if (arr.dtype().is(py::dtype::of<int32_t>())) {
      auto a = py::array_t<int32_t, py::array::c_style | py::array::forcecast>::ensure(arr);
      const size_t base = out.size();
      out.resize(base + static_cast<size_t>(a.size()));
      if (a.size() > 0) std::memcpy(out.data() + base, a.data(), static_cast<size_t>(a.size()) * sizeof(int32_t));
      return;
    }
    auto a = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(arr);
    if (!a) throw UsageError(fmt::format("{}: cannot read the array as int64 token ids", what));
    const int64_t* p = a.data();
    out.reserve(out.size() + static_cast<size_t>(a.size()));
    for (py::ssize_t i = 0; i < a.size(); ++i)
      out.push_back(checked_token(static_cast<long long>(p[i]), what, static_cast<size_t>(i)));
    return;
  }
  if (PyLong_Check(obj.ptr())) throw UsageError(fmt::format("{}: expected a sequence of token ids, got an int", what));
  // Lists and tuples: walk the item array directly (one PyLong read per token).
  py::object seq = py::reinterpret_steal<py::object>(PySequence_Fast(obj.ptr(), "token ids must be a sequence"));
  if (!seq) throw py::error_already_set();
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq.ptr());
  PyObject** items = PySequence_Fast_ITEMS(seq.ptr());
  out.reserve(out.size() + static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(items[i], &overflow);
    if (v == -1 && PyErr_Occurred()) {
      PyErr_Clear();
      throw UsageError(fmt::format("{}: item {} is not an int ({})", what, i,
                                   std::string(py::str(py::type::handle_of(items[i]).attr("__name__")))));
    }
    if (overflow != 0) throw UsageError(fmt::format("{}: token id at index {} does not fit in int32", what, i));
    out.push_back(checked_token(v, what, static_cast<size_t>(i)));
  }
}

std::vector<TokenId> to_tokens(const py::handle& obj, const char* what) {
  std::vector<TokenId> out;
  append_tokens(obj, what, out);
  return out;
}

BlockHash to_block_hash(const py::handle& obj, const char* what) {
  if (PyLong_Check(obj.ptr())) {
    py::int_ v = py::reinterpret_borrow<py::int_>(obj);
    if (v < py::int_(0) || v >= (py::int_(1).attr("__lshift__")(128)))
      throw UsageError(fmt::format("{}: an int hash must be in [0, 2**128), got {}", what, std::string(py::str(v))));
    const py::int_ mask(std::numeric_limits<uint64_t>::max());
    BlockHash h;
    h.lo = (v & mask).cast<uint64_t>();
    h.hi = (v.attr("__rshift__")(64)).cast<uint64_t>();
    return h;
  }
  std::string bytes;
  if (PyBytes_Check(obj.ptr()) || PyByteArray_Check(obj.ptr()) || PyMemoryView_Check(obj.ptr()))
    bytes = py::bytes(py::reinterpret_borrow<py::object>(obj));
  else if (PyUnicode_Check(obj.ptr())) bytes = obj.cast<std::string>();
  else
    throw UsageError(fmt::format("{}: a hash must be an int, bytes or str, got {}", what,
                                 std::string(py::str(py::type::handle_of(obj).attr("__name__")))));
  return xxh3_128_hash(std::as_bytes(std::span<const char>(bytes.data(), bytes.size())), 0);
}

py::int_ block_hash_to_int(const BlockHash& h) {
  py::int_ hi(h.hi), lo(h.lo);
  return py::reinterpret_steal<py::int_>(PyNumber_Or(hi.attr("__lshift__")(64).ptr(), lo.ptr()));
}

py::list block_ids_to_list(const BlockId* ids, size_t n) {
  PyObject* list = PyList_New(static_cast<Py_ssize_t>(n));
  if (!list) throw py::error_already_set();
  for (size_t i = 0; i < n; ++i) {
    PyObject* v = PyLong_FromLong(ids[i].value);
    if (!v) {
      Py_DECREF(list);
      throw py::error_already_set();
    }
    PyList_SET_ITEM(list, static_cast<Py_ssize_t>(i), v);
  }
  return py::reinterpret_steal<py::list>(list);
}

}  // namespace pagedkv::python

PYBIND11_MODULE(pagedkv, m) {
  using namespace pagedkv::python;
  m.doc() =
      "pagedkv: vLLM's PagedAttention memory system as a native library.\n\n"
      "KVCacheManager decides where every KV block of every request lives (prefix caching, "
      "eviction, copy-on-write) with vLLM v1's names and semantics; the caller keeps its own "
      "tensors and kernels. Errors raise pagedkv.Error subclasses with the library's messages.";
  m.attr("__version__") = PAGEDKV_VERSION_STRING;
  register_errors(m);
  register_core(m);
  register_manager(m);
  register_storage(m);
  register_memory(m);
  register_replay(m);
  register_engine(m);
}
