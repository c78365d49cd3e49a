// Bounds on what one template may cost. Templates come from model files and request options, so
// they are untrusted programs: every loop, recursion and allocation the interpreter performs is
// counted against these, and exceeding one is a TemplateLimitError naming it. The defaults are far
// above what real chat templates need (a long conversation with tools renders in thousands of
// steps and a few levels of macro recursion) and low enough that any template stops within a
// second.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pagedkv::jinja {

struct ParseLimits {
  size_t max_source_bytes = size_t{1} << 20;  // 1 MiB of template text
  int max_nesting_depth = 128;  // nested blocks and sub-expressions together
};

struct RenderLimits {
  uint64_t max_steps = 5'000'000;  // statements and expression nodes evaluated
  int max_call_depth = 64;  // nested macro / caller() calls
  uint64_t max_loop_iterations = 1'000'000;  // for-loop iterations, all loops together
  size_t max_output_bytes = size_t{32} << 20;  // rendered text; also bounds any one string or list built
  int max_data_depth = 256;  // nesting of the input variables (JSON)
};

}  // namespace pagedkv::jinja
