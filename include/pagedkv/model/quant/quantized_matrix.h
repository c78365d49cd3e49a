// Batched y = x · Wᵀ for a weight matrix kept in its stored 16-bit or quantized type (F16, BF16,
// Q8_0, Q4_0, and the block formats of block_formats.h: Q4_1, Q5_0, Q5_1, Q2_K..Q6_K, IQ4_NL,
// IQ4_XS), read in place from the model file or (AVX-512 build) from a copy of the same size
// repacked at load time: a model's weights stay as small in memory as on disk, and a decode step
// reads each weight byte once.
//
// Numerics follow llama.cpp's CPU kernels, so that a GGUF model gives llama.cpp's logits:
//   - F16 / BF16 weights: each weight is widened to f32 exactly and multiplied by the f32
//     activation (llama.cpp rounds the activation to F16/BF16 first; the difference is the F16
//     noise its README reports, well under what the tests allow). Except BF16 in the AVX-512 build
//     on CPUs where vdpbf16ps is the faster product (bf16_products below): there the activations
//     are rounded to BF16 as llama.cpp does, and pairs of columns meet in one instruction.
//   - Q8_0 / Q4_0 weights: every activation row is first quantized to Q8_0 blocks
//     (quantize_row_q8_0: ties to even, as ggml's AVX code), then each block contributes
//     (sum of int8 products, exact) * d_w * d_x. Doing it the same way is what makes our greedy
//     tokens follow llama.cpp's on quantized files; keeping f32 activations moves logits by 0.1-0.7
//     on the reference models (their README, "same weights, F32 activations").
// The scalar twin and the SIMD builds sum a row's block (or element) contributions in block
// (column) order, the SIMD builds with fused multiply-adds: AVX2 and AVX-512 give the same results
// bit for bit, and agree with the scalar twin to float rounding.
//
//   - The block formats: activations quantized to the type's own format (Q8_K for K-quants and
//     IQ4_XS, Q8_0 for Q5_0 / IQ4_NL, Q8_1 for Q4_1 / Q5_1) and integer products per block, as
//     src/model/quant/block_dot.h describes; every build gives the scalar twin's results bit for
//     bit. The AVX-512 build repacks Q4_K, Q5_K, Q6_K, IQ4_XS, Q3_K, Q2_K and IQ4_NL into panels
//     too (Q4_1, Q5_0 and Q5_1 are read in place, one block_dot per row and token).
// Builds (src/model/quant/quantized_kernels*.{h,cpp}), chosen at run time: a scalar twin (one dot
// product per row and token, the reference the others are tested against); AVX2+FMA+F16C (the
// file's Q8_0 / Q4_0 rows in place, tiles of 8 rows x 1 token or 4 x 2, and for prompts 16 rows
// transposed a slice at a time; F16, BF16 and the super-block types on the repacked panels
// below); AVX-512 with VNNI (a CPU with AVX-512 but no VNNI runs the AVX2 build), which reads a
// copy of the weights repacked by the constructor into panels of 16 interleaved rows
// (src/model/quant/quantized_panels.h): one FMA or vpdpbusd with a broadcast activation serves
// 16 rows, in tiles of 16 rows x up to 16 tokens. A tile loads each weight vector once for all its
// tokens, so a batch of decode tokens costs little more weight traffic than one token.
//
// Work is split over OpenMP threads by groups of rows (16, or 64 for the AVX-512 build) once the
// product is large enough, or the matrix large enough (a quarter megabyte) that one core would not
// saturate the memory bandwidth: a prompt in one share per thread, a decode call (up to 8 tokens)
// in 8 chunks per thread that the threads claim in turn, so that a thread woken late does not
// hold the others at the closing barrier; multiply_all() runs several products' chunks together.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "pagedkv/model/transformer_weights.h"
#include "pagedkv/storage/cpu_isa.h"

namespace pagedkv {

// How a product with `isa` multiplies BF16 weights (the other types are unaffected).
//   kWidened: each weight widened to f32, one FMA per column with the f32 activation, in column
//             order (the scalar twin, the AVX2 build, and the AVX-512 build by default);
//   kPairs:   the AVX-512 build with AVX512-BF16: the activations rounded to BF16 (to nearest
//             even), then per pair of columns, as vdpbf16ps defines it, acc += w_odd * x_odd and
//             acc += w_even * x_even, each a fused multiply-add, BF16 subnormals read as zero and
//             subnormal sums flushed to zero.
// kPairs is chosen on AMD CPUs with AVX512-BF16 (Zen 4 and later), where vdpbf16ps retires twice
// the multiply-adds of the FMAs; Intel's cores retire it at half their FMA rate (Emerald Rapids:
// 43 against 88 GMAC/s), so kWidened stays there. PAGEDKV_BF16_PAIRS=0 or 1 overrides the choice
// (1 only where AVX512-BF16 runs). Fixed for the process.
enum class Bf16Products { kWidened, kPairs };
Bf16Products bf16_products(KernelIsa isa = KernelIsa::kAuto);

class QuantizedMatrix {
 public:
  QuantizedMatrix() = default;
  // A view of `w` (which must outlive this object); throws UsageError unless its type is F16,
  // BF16, Q8_0, Q4_0 or a block format, with rows of whole blocks. Where the default build (kAuto) reads
  // panels (AVX-512; AVX2 for F16, BF16 and the super-block types), also the repacked copy it reads (as many bytes as
  // `w`, up to padding), shared by copies of this object.
  explicit QuantizedMatrix(const WeightTensor& w);

  int rows() const { return static_cast<int>(w_.rows); }
  int cols() const { return static_cast<int>(w_.cols); }
  TensorType type() const { return w_.type; }
  size_t bytes() const { return static_cast<size_t>(w_.rows) * tensor_row_bytes(w_.type, w_.cols); }

  // y[t * y_stride + r] = W[r] · x[t] for t < num_tokens, r < rows. `isa` picks the dot-product
  // build (kAuto: the best this CPU runs; kScalar: the portable twin).
  void multiply(const float* x, size_t x_stride, int num_tokens, float* y, size_t y_stride,
                KernelIsa isa = KernelIsa::kAuto) const;

  // A batch's activations as the build reads them (quantized, or reordered for the AVX-512
  // panels): prepared once, they serve every matrix of the same type and column count with the
  // same `isa`, as q, k and v (or gate and up) read the same input.
  class Prepared {
   private:
    friend class QuantizedMatrix;
    TensorType type = TensorType::kF32;
    int cols = 0;
    int num_tokens = 0;
    KernelIsa isa = KernelIsa::kAuto;
    const float* x = nullptr;  // the f32 rows, where the build reads them as they are
    size_t x_stride = 0;
    std::vector<std::byte> bytes;
    size_t stride = 0;  // bytes from one token's prepared values to the next (0: the build's own layout)
  };
  void prepare(const float* x, size_t x_stride, int num_tokens, Prepared& out, KernelIsa isa = KernelIsa::kAuto) const;
  // Whether `x` was prepared for a matrix this one can share it with.
  bool reads(const Prepared& x, KernelIsa isa) const { return x.type == w_.type && x.cols == cols() && x.isa == isa; }
  // multiply() on activations prepared for a matrix this one reads() them from.
  void multiply(const Prepared& x, float* y, size_t y_stride) const;

  // One product of multiply_all(): `matrix` times activations `x` prepared for it, into y.
  struct Product {
    const QuantizedMatrix* matrix;
    const Prepared* x;
    float* y;
    size_t y_stride;
  };
  // Several products in one parallel region: the chunks each one's multiply() would cut it into,
  // all claimed in turn by the threads, so that many small matrices (the experts a mixture of
  // experts runs in one step) pay for one fork and one closing barrier, not one each. Each y is
  // what multiply() gives, bit for bit.
  static void multiply_all(std::span<const Product> products);

 private:
  struct Panels;
  struct Work;  // one product cut into chunks of row groups
  Work plan(const Prepared& x, float* y, size_t y_stride) const;
  WeightTensor w_;
  std::shared_ptr<const Panels> panels_;  // the panel builds' repacked copy, or null; shared by copies
};

}  // namespace pagedkv
