// The packed-matmul tile kernels, written once over a GNU vector type of kLanes floats and
// compiled three times: packed_matrix.cpp (baseline SSE2, 4 lanes), packed_matrix_avx2.cpp (8
// lanes) and packed_matrix_avx512.cpp (8 lanes, 32 registers). Private to those files. Everything
// here has internal linkage (anonymous namespace), so the ISA builds of the same template never
// merge at link time.
//
// Layout (see pagedkv/model/quant/packed_matrix.h): panels of kPanelRows = 8 output rows, each stored
// [cols][8]; panel p starts at panels + p * panel_stride. For every input column j in order and
// every accumulator lane (one output row of one token), acc += W[row][j] * x[t][j]: one rounding
// for the product and one for the sum, exactly as the scalar loop of llama2.c's matmul. The AVX2
// build turns off FMA contraction to keep that (see packed_matrix_avx2.cpp).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>

namespace pagedkv {
namespace {

constexpr int kPanel = 8;

template <int kLanes>
struct PackedKernel {
  typedef float Vec __attribute__((vector_size(kLanes * sizeof(float))));
  static constexpr int kVecsPerPanel = kPanel / kLanes;

  static Vec load(const float* p) {
    Vec v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }

  // An NT-token x NP-panel tile; rows_left limits the stores of a partial last panel.
  template <int NT, int NP>
  static void tile(const float* panels, size_t panel_stride, int cols, const float* x, size_t x_stride, float* y,
                   size_t y_stride, int rows_left) {
    Vec acc[NT][NP][kVecsPerPanel];
    for (int t = 0; t < NT; ++t)
      for (int p = 0; p < NP; ++p)
        for (int v = 0; v < kVecsPerPanel; ++v) acc[t][p][v] = Vec{};
    for (int j = 0; j < cols; ++j) {
      Vec w[NP][kVecsPerPanel];
      for (int p = 0; p < NP; ++p)
        for (int v = 0; v < kVecsPerPanel; ++v)
          w[p][v] = load(panels + static_cast<size_t>(p) * panel_stride + static_cast<size_t>(j) * kPanel +
                         static_cast<size_t>(v) * kLanes);
      for (int t = 0; t < NT; ++t) {
        const float xv = x[static_cast<size_t>(t) * x_stride + static_cast<size_t>(j)];
        for (int p = 0; p < NP; ++p)
          for (int v = 0; v < kVecsPerPanel; ++v) acc[t][p][v] += w[p][v] * xv;
      }
    }
    for (int t = 0; t < NT; ++t) {
      float* yt = y + static_cast<size_t>(t) * y_stride;
      for (int p = 0; p < NP; ++p) {
        float out[kPanel];
        std::memcpy(out, acc[t][p], sizeof out);
        const int n = std::min(kPanel, rows_left - p * kPanel);
        for (int l = 0; l < n; ++l) yt[p * kPanel + l] = out[l];
      }
    }
  }

  // Tokens in groups of kTokens share each loaded panel column across kTokens x kPanels
  // accumulators; leftover tokens run alone over kSoloPanels panels at a time, so they too keep
  // enough independent accumulators in flight to hide the add latency.
  template <int kTokens, int kPanels, int kSoloPanels>
  static void run(const float* panels, size_t panel_stride, int num_panels, int cols, const float* x, size_t x_stride,
                  int num_tokens, float* y, size_t y_stride, int rows) {
    auto panel_at = [&](int p) { return panels + static_cast<size_t>(p) * panel_stride; };
    int t = 0;
    for (; t + kTokens <= num_tokens; t += kTokens) {
      const float* xt = x + static_cast<size_t>(t) * x_stride;
      float* yt = y + static_cast<size_t>(t) * y_stride;
      int p = 0;
      for (; p + kPanels <= num_panels; p += kPanels)
        tile<kTokens, kPanels>(panel_at(p), panel_stride, cols, xt, x_stride, yt + p * kPanel, y_stride,
                               rows - p * kPanel);
      for (; p < num_panels; ++p)
        tile<kTokens, 1>(panel_at(p), panel_stride, cols, xt, x_stride, yt + p * kPanel, y_stride, rows - p * kPanel);
    }
    for (; t < num_tokens; ++t) {
      const float* xt = x + static_cast<size_t>(t) * x_stride;
      float* yt = y + static_cast<size_t>(t) * y_stride;
      int p = 0;
      for (; p + kSoloPanels <= num_panels; p += kSoloPanels)
        tile<1, kSoloPanels>(panel_at(p), panel_stride, cols, xt, x_stride, yt + p * kPanel, y_stride,
                             rows - p * kPanel);
      for (; p < num_panels; ++p)
        tile<1, 1>(panel_at(p), panel_stride, cols, xt, x_stride, yt + p * kPanel, y_stride, rows - p * kPanel);
    }
  }
};

}  // namespace
}  // namespace pagedkv
