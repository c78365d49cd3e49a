// Shared pieces of the pagedkv Python module: the registration functions each binding file
// provides, and the conversions several of them need (token lists, 128-bit hashes).
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <vector>

#include "pagedkv/core/block_hash.h"
#include "pagedkv/core/ids.h"

namespace pagedkv::python {

namespace py = pybind11;

// One per binding file, called in this order by the module initializer (errors first, so the
// later files can name the exception types in their docstrings and translators).
void register_errors(py::module_& m);
void register_core(py::module_& m);
void register_manager(py::module_& m);
void register_storage(py::module_& m);
void register_memory(py::module_& m);
void register_replay(py::module_& m);
void register_engine(py::module_& m);

// Token ids from a Python sequence of ints or a 1-D integer NumPy array (copied in one pass;
// a NumPy int32 array is a memcpy). Throws UsageError naming the first id outside int32.
std::vector<TokenId> to_tokens(const py::handle& obj, const char* what);
// Appends the same kinds of input to `out`.
void append_tokens(const py::handle& obj, const char* what, std::vector<TokenId>& out);

// A block or content hash from Python: an int in [0, 2**128) is taken as the 128-bit value
// itself (lo = low 64 bits); bytes or str are digested with XXH3-128 (seed 0).
BlockHash to_block_hash(const py::handle& obj, const char* what);
// The 128-bit value as a Python int (hi << 64 | lo).
py::int_ block_hash_to_int(const BlockHash& h);

// Block ids as a Python list of ints (what a GPU-side table wants to append).
py::list block_ids_to_list(const BlockId* ids, size_t n);

}  // namespace pagedkv::python
