// Storage layer: the worker-side BlockTable as a NumPy array that aliases the native table (no
// copy, ever), and slot mappings as NumPy int64 arrays, ready to hand to a GPU kernel.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <fmt/format.h>

#include <vector>

#include "pagedkv/core/error.h"
#include "pagedkv/storage/block_table.h"
#include "py_common.h"

namespace pagedkv::python {
namespace {

using Int32Array = py::array_t<int32_t, py::array::c_style | py::array::forcecast>;
using Int64Array = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;

// Slot mappings this long are computed with the GIL released.
constexpr int kReleaseGilSlots = 1 << 16;

std::vector<BlockId> block_ids_from(const py::handle& obj) {
  std::vector<BlockId> out;
  for (TokenId v : to_tokens(obj, "block ids")) out.emplace_back(v);  // same int32 reading rules
  return out;
}

// The slots of positions [first_position, first_position + num_tokens) of one row, checked
// against the blocks the row holds (the native routine trusts its caller).
void check_positions(const BlockTable& t, int row, int block_size, int first_position, int num_tokens) {
  if (block_size <= 0) throw UsageError(fmt::format("block_size must be positive, got {}", block_size));
  if (first_position < 0 || num_tokens < 0)
    throw UsageError(fmt::format("slot mapping of row {}: first_position {} and num_tokens {} must be non-negative",
                                 row, first_position, num_tokens));
  const int64_t end = static_cast<int64_t>(first_position) + num_tokens;
  const int64_t covered = static_cast<int64_t>(t.num_blocks(row)) * block_size;
  if (num_tokens > 0 && end > covered)
    throw UsageError(fmt::format("slot mapping of row {}: positions up to {} need {} blocks, the row holds {}", row,
                                 end - 1, (end + block_size - 1) / block_size, t.num_blocks(row)));
}

Int64Array slot_mapping(const BlockTable& t, int row, int first_position, int num_tokens, int block_size) {
  check_positions(t, row, block_size, first_position, num_tokens);
  Int64Array out(num_tokens);
  int64_t* slots = out.mutable_data();
  const int32_t* r = t.row(row);
  if (num_tokens >= kReleaseGilSlots) {
    py::gil_scoped_release release;
    compute_slot_mapping(r, block_size, first_position, num_tokens, slots);
  } else {
    compute_slot_mapping(r, block_size, first_position, num_tokens, slots);
  }
  return out;
}

// One step's slots for a batch: row i contributes num_tokens[i] slots from first_positions[i],
// concatenated in batch order (the flat slot_mapping vLLM's model runner hands its kernels).
Int64Array batch_slot_mapping(const BlockTable& t, const Int32Array& rows, const Int32Array& first_positions,
                              const Int32Array& num_tokens, int block_size) {
  if (rows.ndim() != 1 || first_positions.ndim() != 1 || num_tokens.ndim() != 1 ||
      rows.size() != first_positions.size() || rows.size() != num_tokens.size())
    throw UsageError(
        fmt::format("slot_mappings: rows, first_positions and num_tokens must be 1-D arrays of one length "
                    "(got {}, {}, {})",
                    rows.size(), first_positions.size(), num_tokens.size()));
  const py::ssize_t n = rows.size();
  int64_t total = 0;
  for (py::ssize_t i = 0; i < n; ++i) {
    check_positions(t, rows.data()[i], block_size, first_positions.data()[i], num_tokens.data()[i]);
    total += num_tokens.data()[i];
  }
  Int64Array out(total);
  int64_t* slots = out.mutable_data();
  auto fill = [&] {
    for (py::ssize_t i = 0; i < n; ++i) {
      compute_slot_mapping(t.row(rows.data()[i]), block_size, first_positions.data()[i], num_tokens.data()[i], slots);
      slots += num_tokens.data()[i];
    }
  };
  if (total >= kReleaseGilSlots) {
    py::gil_scoped_release release;
    fill();
  } else {
    fill();
  }
  return out;
}

}  // namespace

void register_storage(py::module_& m) {
  py::class_<BlockTable>(m, "BlockTable",
                         "The worker-side block table of a batch (vLLM's BlockTable): a dense "
                         "[max_requests, max_blocks_per_request] int32 table whose rows list each request's "
                         "physical blocks in token order; unused entries are 0 (the null block). `array` is a "
                         "NumPy view of the native table itself: every update shows in it without a copy.")
      .def(py::init<int, int>(), py::kw_only(), py::arg("max_requests"), py::arg("max_blocks_per_request"))
      .def_property_readonly(
          "array",
          [](py::object self) {
            BlockTable& t = self.cast<BlockTable&>();
            const auto stride = static_cast<py::ssize_t>(t.stride());
            // `self` is the array's base: the table lives as long as any view of it.
            return py::array_t<int32_t>(
                {static_cast<py::ssize_t>(t.max_requests()), stride},
                {stride * static_cast<py::ssize_t>(sizeof(int32_t)), static_cast<py::ssize_t>(sizeof(int32_t))},
                t.data(), self);
          },
          "int32 [max_requests, max_blocks_per_request] view of the table (no copy). Writing into it "
          "changes the table but not the rows' block counts.")
      .def(
          "row_view",
          [](py::object self, int row) {
            BlockTable& t = self.cast<BlockTable&>();
            const int n = t.num_blocks(row);
            return py::array_t<int32_t>({static_cast<py::ssize_t>(n)}, {static_cast<py::ssize_t>(sizeof(int32_t))},
                                        const_cast<int32_t*>(t.row(row)), self);
          },
          py::arg("row"), "int32 view of the blocks row `row` holds now (no copy).")
      .def(
          "append_row", [](BlockTable& t, int row, const py::object& ids) { t.append_row(row, block_ids_from(ids)); },
          py::arg("row"), py::arg("block_ids"),
          "Appends blocks to a row (e.g. what allocate_slots returned for one group). UsageError past "
          "the row's capacity.")
      .def(
          "set_row", [](BlockTable& t, int row, const py::object& ids) { t.set_row(row, block_ids_from(ids)); },
          py::arg("row"), py::arg("block_ids"),
          "Replaces a row (after copy-on-write or a sliding-window release rewrote the request's table).")
      .def(
          "set_entry", [](BlockTable& t, int row, int index, int32_t b) { t.set_entry(row, index, BlockId{b}); },
          py::arg("row"), py::arg("index"), py::arg("block_id"))
      .def("clear_row", &BlockTable::clear_row, py::arg("row"))
      .def("move_row", &BlockTable::move_row, py::arg("src"), py::arg("dst"),
           "Row dst takes row src's blocks; src becomes empty (condensing a batch after a finish).")
      .def("swap_rows", &BlockTable::swap_rows, py::arg("a"), py::arg("b"))
      .def("num_blocks", &BlockTable::num_blocks, py::arg("row"))
      .def_property_readonly("max_requests", &BlockTable::max_requests)
      .def_property_readonly("max_blocks_per_request", &BlockTable::stride)
      .def("slot_mapping", &slot_mapping, py::arg("row"), py::arg("first_position"), py::arg("num_tokens"),
           py::kw_only(), py::arg("block_size"),
           "int64 slots (block_id * block_size + position % block_size) of positions [first_position, "
           "first_position + num_tokens) of one row. UsageError when the row holds too few blocks.")
      .def("slot_mappings", &batch_slot_mapping, py::arg("rows"), py::arg("first_positions"), py::arg("num_tokens"),
           py::kw_only(), py::arg("block_size"),
           "One step's flat int64 slot mapping for a batch: row i contributes num_tokens[i] slots from "
           "first_positions[i], concatenated in batch order.")
      .def("__repr__", [](const BlockTable& t) {
        return fmt::format("BlockTable(max_requests={}, max_blocks_per_request={})", t.max_requests(), t.stride());
      });

  m.def(
      "compute_slot_mapping",
      [](const Int32Array& block_table_row, int block_size, int first_position, int num_tokens) {
        if (block_table_row.ndim() != 1) throw UsageError("compute_slot_mapping: block_table_row must be 1-D");
        if (block_size <= 0) throw UsageError(fmt::format("block_size must be positive, got {}", block_size));
        if (first_position < 0 || num_tokens < 0)
          throw UsageError("compute_slot_mapping: first_position and num_tokens must be non-negative");
        const int64_t end = static_cast<int64_t>(first_position) + num_tokens;
        if (num_tokens > 0 && (end + block_size - 1) / block_size > block_table_row.size())
          throw UsageError(fmt::format("compute_slot_mapping: positions up to {} need {} blocks, the row has {}",
                                       end - 1, (end + block_size - 1) / block_size, block_table_row.size()));
        Int64Array out(num_tokens);
        compute_slot_mapping(block_table_row.data(), block_size, first_position, num_tokens, out.mutable_data());
        return out;
      },
      py::arg("block_table_row"), py::arg("block_size"), py::arg("first_position"), py::arg("num_tokens"),
      "int64 slots of positions [first_position, first_position + num_tokens) for one row of block ids "
      "(any 1-D integer array or sequence).");
}

}  // namespace pagedkv::python
