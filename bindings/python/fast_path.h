// The calls a Python scheduler makes per request per step (allocate_slots, free, a request's
// token counters) skip pybind11's generic dispatcher, which costs about 250 ns per call on a
// 2-core server, and use CPython's own conventions instead: METH_FASTCALL methods and getset
// descriptors, installed on the pybind11 classes. Everything else goes through pybind11.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

namespace pagedkv::python {

namespace py = pybind11;

// The C++ object behind an instance of a pybind11 class (or of a Python subclass of it).
// `type` is the class; returns nullptr with a Python TypeError set when `obj` is not one, or was
// never initialized (a subclass whose __init__ did not call the base __init__).
void* unwrap_instance(PyObject* obj, PyTypeObject* type, const char* what);
template <typename T>
T* unwrap(PyObject* obj, PyTypeObject* type, const char* what) {
  return static_cast<T*>(unwrap_instance(obj, type, what));
}

// Sets the Python exception for the C++ exception being handled (call inside catch (...)):
// pagedkv errors map to the module's exception classes, with the same message.
void set_python_error_from_current_exception();

// Sets pagedkv.UsageError with `message` (for CPython slots that return an error code).
void set_usage_error(const std::string& message);

// Records the module's exception classes for set_python_error_from_current_exception().
void remember_error_types(PyObject* error, PyObject* usage, PyObject* config, PyObject* format, PyObject* invariant);

// Attaches a CPython method or getset descriptor to a class; `def` must have static storage.
void add_method(const py::handle& cls, PyMethodDef* def);
void add_getset(const py::handle& cls, PyGetSetDef* def);

// Argument parsing for METH_FASTCALL | METH_KEYWORDS methods: fills out[0..num_names) from
// positional and keyword arguments (missing optional ones stay nullptr). Returns false with a
// TypeError set on too many, unknown, duplicate or missing required arguments.
bool parse_fastcall(const char* fn, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames,
                    const char* const* names, int num_names, int num_required, PyObject** out);

// An int argument in [lo, hi]; returns false with a TypeError/ValueError set otherwise.
bool arg_to_int(PyObject* obj, const char* fn, const char* name, long lo, long hi, int* out);

}  // namespace pagedkv::python
