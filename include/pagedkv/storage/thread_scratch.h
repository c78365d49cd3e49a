// Scratch memory for the SIMD kernels: one set of buffers per thread, allocated here, in a file
// compiled for baseline x86-64.
//
// A translation unit compiled for AVX2 or AVX-512 emits its own copy of every inline function it
// uses but does not inline (std::vector's growth, say), compiled for that instruction set. The
// linker keeps one copy of each such function for the whole program, and where it keeps that one,
// baseline code runs AVX-512 instructions on a CPU without them (SIGILL). So the kernels take
// their buffers from here rather than own containers, and a test (scripts/check_simd_objects.py)
// fails a build whose SIMD objects define functions the rest of the program could bind to.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pagedkv {

// One buffer per use: the buffers a kernel holds at the same time are distinct, and so are those
// of a kernel and of what it calls.
enum class ScratchBuffer : uint8_t {
  // The tiled attention kernel (src/kernels/attention_tile_simd.h).
  kTileScores,
  kTileKeys,  // a tile of 16- or 8-bit keys converted to float
  kTileValues,
  kTileWeightCodes,  // int8 K/V: the softmax weights as codes
  kTileWeightSteps,
  kTileScales,
  // The prefix kernel with the query rows in vector lanes (src/kernels/attention_wide_rows_*.cpp).
  kWideQueries,
  kWideOutputs,
  kWideKeys,
  kWideValues,
  kWideZeroRow,
  kWideScores,
  kWideRunningStats,
  // One query row scaled (and rotated) before it becomes int8 codes (src/kernels/query_codes_*.cpp).
  kQueryRow,
  kCount
};

// This thread's `buffer`, with room for at least `bytes` bytes, 64-byte aligned. Its contents are
// unspecified. Valid until this thread asks for the same buffer again, or ends.
void* thread_scratch(ScratchBuffer buffer, size_t bytes);
// The same buffer as room for `count` floats.
float* thread_scratch_floats(ScratchBuffer buffer, size_t count);

}  // namespace pagedkv
