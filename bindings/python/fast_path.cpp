#include "fast_path.h"

#include <exception>
#include <new>
#include <stdexcept>

#include "pagedkv/core/error.h"

namespace pagedkv::python {
namespace {

struct ErrorTypes {
  PyObject* error = nullptr;
  PyObject* usage = nullptr;
  PyObject* config = nullptr;
  PyObject* format = nullptr;
  PyObject* invariant = nullptr;
};
ErrorTypes g_errors;

}  // namespace

void* unwrap_instance(PyObject* obj, PyTypeObject* type, const char* what) {
  if (!PyObject_TypeCheck(obj, type)) {
    PyErr_Format(PyExc_TypeError, "%s must be a %s, got %.200s", what, type->tp_name, Py_TYPE(obj)->tp_name);
    return nullptr;
  }
  // pybind11 keeps the value pointer in its instance record (index 0: our classes have one
  // C++ base); it is null until __init__ has run.
  auto* inst = reinterpret_cast<py::detail::instance*>(obj);
  void* value = inst->simple_layout ? inst->simple_value_holder[0] : inst->get_value_and_holder().value_ptr();
  if (!value) {
    PyErr_Format(PyExc_TypeError, "%s: the %s was never initialized (missing __init__ call?)", what, type->tp_name);
    return nullptr;
  }
  return value;
}

void remember_error_types(PyObject* error, PyObject* usage, PyObject* config, PyObject* format, PyObject* invariant) {
  g_errors = ErrorTypes{error, usage, config, format, invariant};
}

void set_usage_error(const std::string& message) { PyErr_SetString(g_errors.usage, message.c_str()); }

void set_python_error_from_current_exception() {
  // Most derived first; each message is the library's own.
  try {
    throw;
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (const UsageError& e) {
    PyErr_SetString(g_errors.usage, e.what());
  } catch (const ConfigError& e) {
    PyErr_SetString(g_errors.config, e.what());
  } catch (const FormatError& e) {
    PyErr_SetString(g_errors.format, e.what());
  } catch (const InvariantError& e) {
    PyErr_SetString(g_errors.invariant, e.what());
  } catch (const Error& e) {
    PyErr_SetString(g_errors.error, e.what());
  } catch (const std::bad_alloc&) {
    PyErr_NoMemory();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  } catch (...) {
    PyErr_SetString(PyExc_RuntimeError, "unknown C++ exception in pagedkv");
  }
}

void add_method(const py::handle& cls, PyMethodDef* def) {
  py::object descr =
      py::reinterpret_steal<py::object>(PyDescr_NewMethod(reinterpret_cast<PyTypeObject*>(cls.ptr()), def));
  if (!descr) throw py::error_already_set();
  py::setattr(cls, def->ml_name, descr);
}

void add_getset(const py::handle& cls, PyGetSetDef* def) {
  py::object descr =
      py::reinterpret_steal<py::object>(PyDescr_NewGetSet(reinterpret_cast<PyTypeObject*>(cls.ptr()), def));
  if (!descr) throw py::error_already_set();
  py::setattr(cls, def->name, descr);
}

bool parse_fastcall(const char* fn, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames,
                    const char* const* names, int num_names, int num_required, PyObject** out) {
  if (nargs > num_names) {
    PyErr_Format(PyExc_TypeError, "%s() takes at most %d arguments (%zd given)", fn, num_names, nargs);
    return false;
  }
  for (int i = 0; i < num_names; ++i) out[i] = i < nargs ? args[i] : nullptr;
  if (kwnames) {
    const Py_ssize_t nkw = PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t k = 0; k < nkw; ++k) {
      PyObject* key = PyTuple_GET_ITEM(kwnames, k);
      int slot = -1;
      for (int i = 0; i < num_names; ++i)
        if (PyUnicode_CompareWithASCIIString(key, names[i]) == 0) {
          slot = i;
          break;
        }
      if (slot < 0) {
        PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'", fn, key);
        return false;
      }
      if (out[slot]) {
        PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'", fn, names[slot]);
        return false;
      }
      out[slot] = args[nargs + k];
    }
  }
  for (int i = 0; i < num_required; ++i)
    if (!out[i]) {
      PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s'", fn, names[i]);
      return false;
    }
  return true;
}

bool arg_to_int(PyObject* obj, const char* fn, const char* name, long lo, long hi, int* out) {
  if (!PyLong_Check(obj)) {
    PyErr_Format(PyExc_TypeError, "%s(): %s must be an int, got %.200s", fn, name, Py_TYPE(obj)->tp_name);
    return false;
  }
  int overflow = 0;
  const long v = PyLong_AsLongAndOverflow(obj, &overflow);
  if (v == -1 && PyErr_Occurred()) return false;
  if (overflow != 0 || v < lo || v > hi) {
    PyErr_Format(PyExc_ValueError, "%s(): %s must be in [%ld, %ld], got %R", fn, name, lo, hi, obj);
    return false;
  }
  *out = static_cast<int>(v);
  return true;
}

}  // namespace pagedkv::python
