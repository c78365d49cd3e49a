// Element types of model weight tensors, numbered as GGUF (ggml) numbers them, and their block
// formats. A quantized type stores a row as blocks of `block_elements` values; the model runner
// computes with F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K..Q6_K, IQ4_NL and IQ4_XS
// (block_formats.h describes the others), the reader merely knows the sizes of the rest so that
// it can walk any GGUF file and name what it cannot run.
//
// The two block formats the runner computes with (little-endian, no padding):
//   Q8_0: fp16 scale d, then 32 int8 q;           value i = d * q[i]                      (34 bytes)
//   Q4_0: fp16 scale d, then 16 bytes of nibbles; byte j holds element j (low nibble) and
//         element j + 16 (high nibble);           value  = d * (nibble - 8)               (18 bytes)
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace pagedkv {

enum class TensorType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ4_NL = 20,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kBF16 = 30,
};

struct TensorTypeTraits {
  const char* name;  // "F32", "Q8_0", ...
  int block_elements;  // values per block (1 for plain types)
  int block_bytes;  // bytes per block
};

// The traits of a raw GGUF type number, or nullopt for a number this reader does not know.
std::optional<TensorTypeTraits> tensor_type_traits(uint32_t raw_type);
std::string tensor_type_name(TensorType t);

// True for the types the model runner computes with (see above).
bool is_runnable_weight_type(TensorType t);
// The runnable types, named, for messages ("F32, F16, ...").
const char* runnable_weight_type_names();

// Bytes of one row of `elements` values (elements must be a multiple of the block size).
size_t tensor_row_bytes(TensorType t, int64_t elements);

inline constexpr int kQuantBlock = 32;  // values per Q8_0 / Q4_0 block
struct BlockQ8_0 {
  uint16_t d;  // fp16 scale
  int8_t q[kQuantBlock];
};
struct BlockQ4_0 {
  uint16_t d;  // fp16 scale
  uint8_t q[kQuantBlock / 2];
};
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18);

// Writes the `out.size()` values of one row of type `t` starting at `row` as floats (exact: every
// runnable type converts to f32 as ggml's dequantization does). Throws UsageError for a type that is not runnable.
void dequantize_row(TensorType t, const void* row, std::span<float> out);

// Quantizes a row of floats to Q8_0 blocks (x.size() a multiple of 32), as ggml quantizes
// activations: d = max|x| / 127 (stored as fp16), q = x * (127 / max|x|) rounded to nearest with
// ties to even. Used for activations in Q8_0/Q4_0 products and by the GGUF writer.
void quantize_row_q8_0(std::span<const float> x, BlockQ8_0* out);
// Quantizes to Q4_0 the way ggml's reference quantizer does (d = signed max / -8, nibbles clamped
// to 0..15): for the writer that makes test models.
void quantize_row_q4_0(std::span<const float> x, BlockQ4_0* out);

}  // namespace pagedkv
